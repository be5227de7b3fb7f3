//! The `request` oracle: the fields a static site reads from a request
//! (`statico::catalog::site::request`), all fed the same bytes. Never a panic, and:
//! - the target's path, normalised (`split_target`, `normalize`), starts with `/`, has no `.`,
//!   `..` or empty segment (but a trailing `/`), no NUL or backslash, is UTF-8, and joined to a
//!   root stays under it; normalising it again (when it has no `%` left to decode) changes nothing;
//! - `Accept-Encoding` gives every coding a q-value in 0..=1000;
//! - `Range` against bodies of several lengths gives only `bytes a..b` with `a < b <= len`;
//! - `If-None-Match` always matches `*` and the ETag itself; `If-Modified-Since` and `If-Range`
//!   answer without a panic, and a date that parses is compared as the date it is.
//!
//! Shared by the fuzz target (`fuzz_targets/request.rs`) and the corpus replay
//! (`tests/fuzz_corpus.rs`), which include this file with `#[path]`.

use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use statico::catalog::site::request::{
    accepts, if_range_holds, none_match, normalize, not_modified_since, range, split_target,
    Accepted, Coding, RangeAsk, MAX_PATH,
};

pub fn check(data: &[u8]) {
    path(data);
    let accepted = Accepted::parse(Some(data));
    for coding in Coding::ALL {
        let q = accepted.q(coding);
        assert!(q <= 1000, "{coding:?} q={q} for {data:?}");
        assert_eq!(q, accepts(Some(data), coding));
    }
    for len in [0, 1, 2, 100, 1 << 40, u64::MAX] {
        if let RangeAsk::Part(a, b) = range(data, len) {
            assert!(a < b && b <= len, "range {data:?} of {len}: {a}..{b}");
        }
    }
    let etag = "\"3b-1f\"";
    let _ = none_match(data, etag);
    assert!(none_match(b"*", etag) && none_match(etag.as_bytes(), etag));
    let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let since = not_modified_since(data, modified);
    let _ = if_range_holds(data, etag, modified);
    if let Some(date) =
        (std::str::from_utf8(data).ok()).and_then(|s| httpdate::parse_http_date(s).ok())
    {
        assert_eq!(since, modified <= date);
    }
}

/// The path oracle: never outside the root.
fn path(target: &[u8]) {
    let (path, _query) = split_target(target);
    let mut buf = [0u8; MAX_PATH];
    let Ok(n) = normalize(path, &mut buf) else {
        return;
    };
    let out = &buf[..n];
    let text =
        std::str::from_utf8(out).unwrap_or_else(|_| panic!("not UTF-8: {out:?} from {target:?}"));
    assert!(text.starts_with('/'), "{text:?} from {target:?}");
    assert!(!text.contains(['\0', '\\']), "{text:?} from {target:?}");
    let inner = text.strip_suffix('/').unwrap_or(text);
    for segment in inner.split('/').skip(1) {
        assert!(
            !matches!(segment, "" | "." | ".."),
            "segment {segment:?} in {text:?} from {target:?}"
        );
    }
    let root = Path::new("/srv/site");
    let joined = root.join(text.trim_start_matches('/'));
    assert!(
        joined.starts_with(root)
            && joined
                .components()
                .all(|c| !matches!(c, Component::ParentDir)),
        "{joined:?} from {target:?}"
    );
    if !out.contains(&b'%') {
        let mut again = [0u8; MAX_PATH];
        let m = normalize(out, &mut again)
            .unwrap_or_else(|e| panic!("{text:?} normalised again: {e:?}"));
        assert_eq!(&again[..m], out, "normalising {text:?} again");
    }
}
