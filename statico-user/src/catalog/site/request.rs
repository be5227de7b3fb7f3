//! What a request asks of a static site, read without allocating: the path (percent-decoded, dot
//! segments resolved, never above the root), the encodings it accepts with their q-values, its
//! validators (`If-None-Match`, `If-Modified-Since`) and a single byte range.
//!
//! Pure functions over the bytes of a [`Request`](crate::catalog::request::Request) view, which every
//! protocol builds the same way, so they all resolve a path and negotiate alike.

use std::time::SystemTime;

/// Longest path (decoded) looked up; longer is not found.
pub const MAX_PATH: usize = 1024;

/// Why a path cannot be looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadPath {
    /// Malformed: bad percent-encoding, invalid UTF-8, NUL, or `..` above the root → 400.
    Malformed,
    /// Well-formed but nothing statico would serve (too long, backslashes, not a path) → 404.
    NotFound,
}

/// The path part of a request target, and its query (with the `?`), as sent.
pub fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    // An absolute URI (`http://host/path`): the path starts at the first `/` after the authority.
    let target = match target.windows(3).position(|w| w == b"://") {
        Some(i) if target.first() != Some(&b'/') => {
            let rest = &target[i + 3..];
            match rest.iter().position(|&b| b == b'/' || b == b'?') {
                Some(at) if rest[at] == b'/' => &rest[at..],
                _ => b"/", // `http://host` or `http://host?q`: the path is `/` (RFC 9112 §3.2.2)
            }
        }
        _ => target,
    };
    match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], &target[q..]),
        None => (target, &[]),
    }
}

/// Decodes and normalises `path` into `buf`: percent-decoded, `.` and empty segments dropped, `..`
/// resolved (one above the root is an error), a trailing `/` kept. Returns the length written: the
/// result starts with `/` and names no segment beginning with `.` only if the tree has none.
pub fn normalize(path: &[u8], buf: &mut [u8; MAX_PATH]) -> Result<usize, BadPath> {
    if path.first() != Some(&b'/') {
        return Err(BadPath::NotFound);
    }
    let mut decoded = [0u8; MAX_PATH];
    let n = percent_decode(path, &mut decoded)?;
    let decoded = &decoded[..n];
    if std::str::from_utf8(decoded).is_err() || decoded.contains(&0) {
        return Err(BadPath::Malformed);
    }
    if decoded.contains(&b'\\') {
        return Err(BadPath::NotFound);
    }
    let mut len = 0;
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                // Drop the last segment written (and its `/`); above the root is an error.
                let start = buf[..len]
                    .iter()
                    .rposition(|&b| b == b'/')
                    .ok_or(BadPath::Malformed)?;
                len = start;
            }
            s => {
                buf[len] = b'/';
                buf[len + 1..len + 1 + s.len()].copy_from_slice(s);
                len += 1 + s.len();
            }
        }
    }
    let trailing = decoded.ends_with(b"/")
        || decoded.ends_with(b"/.")
        || decoded.ends_with(b"/..")
        || len == 0;
    if trailing {
        buf[len] = b'/';
        len += 1;
    }
    Ok(len)
}

/// `%XX` decoding into `out` (never longer than the input); a `%` without two hex digits is malformed,
/// a path longer than [`MAX_PATH`] is not found.
fn percent_decode(input: &[u8], out: &mut [u8; MAX_PATH]) -> Result<usize, BadPath> {
    if input.len() >= MAX_PATH {
        return Err(BadPath::NotFound);
    }
    let (mut i, mut n) = (0, 0);
    while i < input.len() {
        let b = input[i];
        if b == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let (Some(hi), Some(lo)) = (
                input.get(i + 1).and_then(|&c| hex(c)),
                input.get(i + 2).and_then(|&c| hex(c)),
            ) else {
                return Err(BadPath::Malformed);
            };
            out[n] = (hi * 16 + lo) as u8;
            i += 3;
        } else {
            out[n] = b;
            i += 1;
        }
        n += 1;
    }
    Ok(n)
}

/// A content coding statico may store a variant in, in the order it prefers them at equal q.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    Identity,
    Brotli,
    Zstd,
    Gzip,
}

impl Coding {
    pub const COMPRESSED: [Coding; 3] = [Coding::Brotli, Coding::Zstd, Coding::Gzip];
    pub const ALL: [Coding; 4] = [Coding::Identity, Coding::Brotli, Coding::Zstd, Coding::Gzip];

    /// The token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The file-name suffix of a precompressed sibling (`x.br`), and of the ETag.
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Identity => "",
            Coding::Brotli => "br",
            Coding::Zstd => "zst",
            Coding::Gzip => "gz",
        }
    }
}

/// `Accept-Encoding` read once (one pass, no allocation): the q-value (0–1000) it gives each coding
/// statico stores, RFC 9110 §12.5.3. No header accepts only identity (any coding may be sent, but a
/// client that sent nothing is best served uncompressed); `*` covers codings not listed; identity is
/// acceptable unless refused by `identity;q=0` or `*;q=0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// By `Coding as usize`; `None`: not named.
    named: [Option<u16>; 4],
    star: Option<u16>,
    present: bool,
}

impl Accepted {
    pub fn parse(accept: Option<&[u8]>) -> Accepted {
        let mut a = Accepted {
            named: [None; 4],
            star: None,
            present: accept.is_some(),
        };
        for item in accept.unwrap_or_default().split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let name = trim(parts.next().unwrap_or_default());
            let mut q = || {
                parts
                    .find_map(|p| {
                        let p = trim(p);
                        (p.len() > 2 && p[..2].eq_ignore_ascii_case(b"q="))
                            .then(|| parse_q(&p[2..]))
                    })
                    .unwrap_or(1000)
            };
            let slot = match name {
                b"*" => &mut a.star,
                n if n.eq_ignore_ascii_case(b"x-gzip") => &mut a.named[Coding::Gzip as usize],
                n => match Coding::ALL
                    .iter()
                    .find(|c| n.eq_ignore_ascii_case(c.token().as_bytes()))
                {
                    Some(&c) => &mut a.named[c as usize],
                    None => continue,
                },
            };
            // The first mention of a coding counts (a later `*` still replaces an earlier one).
            if slot.is_none() || name == b"*" {
                *slot = Some(q());
            }
        }
        a
    }

    /// The q-value given `coding`.
    pub fn q(&self, coding: Coding) -> u16 {
        if !self.present {
            return if coding == Coding::Identity { 1000 } else { 0 };
        }
        match (self.named[coding as usize], self.star, coding) {
            (Some(q), _, _) => q,
            (None, Some(q), _) => q,
            (None, None, Coding::Identity) => 1000,
            (None, None, _) => 0,
        }
    }

    /// Whether the header names identity itself or `*` (then identity's q-value competes).
    pub fn names_identity(&self) -> bool {
        self.star.is_some() || self.named[Coding::Identity as usize].is_some()
    }
}

/// The q-value `accept` gives `coding` (see [`Accepted`]).
pub fn accepts(accept: Option<&[u8]>, coding: Coding) -> u16 {
    Accepted::parse(accept).q(coding)
}

/// A qvalue (`0`, `0.5`, `1.000`) in thousandths; anything else counts as 0.
fn parse_q(v: &[u8]) -> u16 {
    let mut digits = v.iter();
    let whole = match digits.next() {
        Some(b'0') => 0,
        Some(b'1') => 1000,
        _ => return 0,
    };
    match digits.next() {
        None => return whole,
        Some(b'.') => {}
        Some(_) => return 0,
    }
    let mut frac = 0u16;
    let mut scale = 100;
    for &d in digits.take(3) {
        if !d.is_ascii_digit() {
            return 0;
        }
        frac += u16::from(d - b'0') * scale;
        scale /= 10;
    }
    (whole + frac).min(1000)
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// Whether `If-None-Match` matches `etag` by weak comparison (RFC 9110 §13.1.2: `W/` is ignored on
/// both sides; `*` matches any current representation).
pub fn none_match(header: &[u8], etag: &str) -> bool {
    fn bare(t: &[u8]) -> &[u8] {
        t.strip_prefix(b"W/").unwrap_or(t)
    }
    let ours = bare(etag.as_bytes());
    header
        .split(|&b| b == b',')
        .map(trim)
        .any(|t| t == b"*" || bare(t) == ours)
}

/// Whether `If-Modified-Since` says the client's copy is current (`modified` is not later than it).
pub fn not_modified_since(header: &[u8], modified: SystemTime) -> bool {
    let Some(since) = std::str::from_utf8(header)
        .ok()
        .and_then(|s| httpdate::parse_http_date(s).ok())
    else {
        return false;
    };
    modified <= since
}

/// Whether `If-Range` still names the identity body: its strong ETag exactly, or its `Last-Modified`
/// date exactly (RFC 9110 §13.1.5); otherwise the whole body is sent.
pub fn if_range_holds(header: &[u8], etag: &str, modified: SystemTime) -> bool {
    if header.starts_with(b"\"") || header.starts_with(b"W/") {
        return header == etag.as_bytes();
    }
    std::str::from_utf8(header)
        .ok()
        .and_then(|s| httpdate::parse_http_date(s).ok())
        == Some(modified)
}

/// A `Range` header applied to a body of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeAsk {
    /// No range, a malformed one, or several (answered with the whole body).
    Whole,
    /// One satisfiable range: bytes `start..end` (end exclusive).
    Part(u64, u64),
    /// A valid range that lies past the end: 416.
    Unsatisfiable,
}

/// Reads `bytes=a-b`, `bytes=a-` or `bytes=-n` (one range only) against a body of `len` bytes.
pub fn range(header: &[u8], len: u64) -> RangeAsk {
    let unit = header
        .get(..6)
        .filter(|u| u.eq_ignore_ascii_case(b"bytes="));
    let Some(spec) = unit.map(|_| &header[6..]) else {
        return RangeAsk::Whole;
    };
    if spec.contains(&b',') {
        return RangeAsk::Whole;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return RangeAsk::Whole;
    };
    let number = |s: &[u8]| -> Option<u64> {
        let s = trim(s);
        (!s.is_empty() && s.iter().all(u8::is_ascii_digit))
            .then(|| std::str::from_utf8(s).ok()?.parse().ok())
            .flatten()
    };
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    // Every `Part(a, b)` below has a < b <= len: a satisfiable range is never empty.
    match (number(first), number(last)) {
        (Some(a), _) if a >= len => RangeAsk::Unsatisfiable,
        (Some(a), Some(b)) if b >= a => RangeAsk::Part(a, b.min(len - 1) + 1),
        (Some(a), None) if trim(last).is_empty() => RangeAsk::Part(a, len),
        (None, Some(n)) if trim(first).is_empty() && (n == 0 || len == 0) => {
            RangeAsk::Unsatisfiable
        }
        (None, Some(n)) if trim(first).is_empty() => RangeAsk::Part(len.saturating_sub(n), len),
        _ => RangeAsk::Whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &str) -> Result<String, BadPath> {
        let mut buf = [0u8; MAX_PATH];
        let n = normalize(p.as_bytes(), &mut buf)?;
        Ok(String::from_utf8(buf[..n].to_vec()).unwrap())
    }

    #[test]
    fn paths_are_decoded_and_resolved_inside_the_root() {
        assert_eq!(norm("/").unwrap(), "/");
        assert_eq!(norm("/a/b.html").unwrap(), "/a/b.html");
        assert_eq!(norm("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(norm("/a//b/").unwrap(), "/a/b/");
        assert_eq!(norm("/a%20b").unwrap(), "/a b");
        assert_eq!(norm("/a/%2e%2e/b").unwrap(), "/b");
        assert_eq!(norm("/a/..").unwrap(), "/");
        assert_eq!(norm("/a%2fb").unwrap(), "/a/b");
        for escape in [
            "/..",
            "/../etc/passwd",
            "/a/../../x",
            "/%2e%2e/x",
            "/a%2f..%2f..%2fx",
        ] {
            assert_eq!(norm(escape), Err(BadPath::Malformed), "{escape}");
        }
        for bad in ["/a%00b", "/%ff", "/%c0%ae%c0%ae/x", "/a%2", "/a%zz"] {
            assert_eq!(norm(bad), Err(BadPath::Malformed), "{bad}");
        }
        assert_eq!(norm("/a\\..\\b"), Err(BadPath::NotFound));
        assert_eq!(norm("*"), Err(BadPath::NotFound));
        assert_eq!(
            norm(&format!("/{}", "a".repeat(MAX_PATH))),
            Err(BadPath::NotFound)
        );
    }

    #[test]
    fn targets_split_into_path_and_query() {
        assert_eq!(split_target(b"/a?x=1"), (&b"/a"[..], &b"?x=1"[..]));
        assert_eq!(split_target(b"/a"), (&b"/a"[..], &b""[..]));
        assert_eq!(split_target(b"http://h:1/p?q"), (&b"/p"[..], &b"?q"[..]));
        assert_eq!(split_target(b"http://h"), (&b"/"[..], &b""[..]));
    }

    #[test]
    fn accept_encoding_follows_q_values() {
        let ae = Some(&b"gzip, deflate, br;q=0.9, zstd;q=0"[..]);
        assert_eq!(accepts(ae, Coding::Gzip), 1000);
        assert_eq!(accepts(ae, Coding::Brotli), 900);
        assert_eq!(accepts(ae, Coding::Zstd), 0);
        assert_eq!(accepts(ae, Coding::Identity), 1000);
        assert_eq!(accepts(None, Coding::Gzip), 0);
        assert_eq!(accepts(None, Coding::Identity), 1000);
        assert_eq!(accepts(Some(b"*;q=0.5"), Coding::Zstd), 500);
        assert_eq!(accepts(Some(b"gzip, identity;q=0"), Coding::Identity), 0);
        assert_eq!(accepts(Some(b"gzip, *;q=0"), Coding::Identity), 0);
        assert_eq!(accepts(Some(b"GZIP;Q=1.0"), Coding::Gzip), 1000);
        assert_eq!(accepts(Some(b"x-gzip"), Coding::Gzip), 1000);
        assert_eq!(accepts(Some(b""), Coding::Identity), 1000);
        // The first mention of a coding counts; the last `*` covers the codings never named.
        assert_eq!(accepts(Some(b"gzip;q=0.5, gzip"), Coding::Gzip), 500);
        assert_eq!(accepts(Some(b"x-gzip;q=0.2, gzip"), Coding::Gzip), 200);
        assert_eq!(accepts(Some(b"*;q=0.3, br, *;q=0.4"), Coding::Zstd), 400);
        assert_eq!(accepts(Some(b"*;q=0.3, br"), Coding::Brotli), 1000);
        assert_eq!(accepts(Some(b"identity;q=0, *"), Coding::Identity), 0);
        assert!(!Accepted::parse(Some(b"gzip, br")).names_identity());
        assert!(Accepted::parse(Some(b"gzip, *;q=0")).names_identity());
    }

    #[test]
    fn validators_compare_weakly_and_by_date() {
        assert!(none_match(b"\"abc\"", "\"abc\""));
        assert!(none_match(b"W/\"abc\"", "\"abc\""));
        assert!(none_match(b"\"x\", \"abc\"", "\"abc\""));
        assert!(none_match(b"*", "\"abc\""));
        assert!(!none_match(b"\"abd\"", "\"abc\""));
        let t = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert!(not_modified_since(b"Sun, 06 Nov 1994 08:49:37 GMT", t));
        assert!(!not_modified_since(b"Sun, 06 Nov 1994 08:49:36 GMT", t));
        assert!(!not_modified_since(b"yesterday", t));
    }

    #[test]
    fn if_range_holds_for_the_exact_etag_or_date_only() {
        let t = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert!(if_range_holds(b"\"abc\"", "\"abc\"", t));
        assert!(!if_range_holds(b"W/\"abc\"", "\"abc\"", t));
        assert!(!if_range_holds(b"\"abd\"", "\"abc\"", t));
        assert!(if_range_holds(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            "\"abc\"",
            t
        ));
        assert!(!if_range_holds(
            b"Sun, 06 Nov 1994 08:49:38 GMT",
            "\"abc\"",
            t
        ));
    }

    #[test]
    fn single_ranges_are_read_and_others_ignored() {
        assert_eq!(range(b"bytes=0-9", 100), RangeAsk::Part(0, 10));
        assert_eq!(range(b"bytes=90-", 100), RangeAsk::Part(90, 100));
        assert_eq!(range(b"bytes=-10", 100), RangeAsk::Part(90, 100));
        assert_eq!(range(b"bytes=-200", 100), RangeAsk::Part(0, 100));
        assert_eq!(range(b"bytes=50-500", 100), RangeAsk::Part(50, 100));
        assert_eq!(range(b"bytes=100-", 100), RangeAsk::Unsatisfiable);
        assert_eq!(range(b"bytes=-0", 100), RangeAsk::Unsatisfiable);
        assert_eq!(range(b"bytes=0-1,5-6", 100), RangeAsk::Whole);
        assert_eq!(range(b"bytes=9-3", 100), RangeAsk::Whole);
        assert_eq!(range(b"items=0-1", 100), RangeAsk::Whole);
        assert_eq!(range(b"bytes=x-1", 100), RangeAsk::Whole);
        // Found by review: `b + 1` wrapped to 0 (a crash on slicing), and an empty file's suffix.
        assert_eq!(
            range(b"bytes=5-18446744073709551615", 12),
            RangeAsk::Part(5, 12)
        );
        assert_eq!(
            range(b"bytes=0-18446744073709551615", 12),
            RangeAsk::Part(0, 12)
        );
        assert_eq!(range(b"bytes=-5", 0), RangeAsk::Unsatisfiable);
        assert_eq!(range(b"bytes=0-", 0), RangeAsk::Unsatisfiable);
        assert_eq!(range(b"Bytes=0-0", 10), RangeAsk::Part(0, 1));
    }
}
