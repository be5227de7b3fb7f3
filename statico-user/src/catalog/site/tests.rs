//! A small tree built for real (a temporary directory), then asked what a client would ask.

use std::io::Read;
use std::path::PathBuf;

use super::*;
use crate::catalog::request::Request;

fn tree(name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("statico-site-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, body) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    dir
}

fn site(name: &str, files: &[(&str, &[u8])]) -> Site {
    let root = tree(name, files);
    build(&SiteOptions {
        root,
        cache_control: Some("public, max-age=60".into()),
        max_size: 1 << 30,
        ..SiteOptions::default()
    })
    .unwrap()
}

/// The answer to a GET of `target` with `fields`, as text, and its status.
fn get(site: &Site, target: &str, fields: &[(&str, &str)]) -> (u16, Vec<u8>) {
    let mut req = Request {
        method: b"GET",
        target: target.as_bytes(),
        ..Request::default()
    };
    for (n, v) in fields {
        req.set(n.as_bytes(), v.as_bytes());
    }
    let choice = site.choose(&req);
    let mut out = Vec::new();
    let date = [b'D'; DATE_LEN];
    let status = site.write(choice, Framing::KeepAlive, &date, false, &mut out);
    (status, out)
}

fn split(answer: &[u8]) -> (String, &[u8]) {
    let at = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (
        String::from_utf8_lossy(&answer[..at]).into_owned(),
        &answer[at..],
    )
}

fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

const PAGE: &[u8] = b"<!doctype html><p>hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello hello</p>\n";

#[test]
fn files_get_types_validators_and_compressed_variants_that_decode_to_the_file() {
    let s = site(
        "variants",
        &[
            ("index.html", PAGE),
            ("a/b.css", PAGE),
            ("img.png", b"\x89PNG"),
        ],
    );
    let (status, answer) = get(&s, "/a/b.css", &[]);
    let (head, body) = split(&answer);
    assert_eq!((status, body), (200, PAGE), "{head}");
    assert_eq!(
        field(&head, "Content-Type"),
        Some("text/css; charset=utf-8")
    );
    assert_eq!(field(&head, "Cache-Control"), Some("public, max-age=60"));
    assert_eq!(field(&head, "Vary"), Some("Accept-Encoding"));
    assert_eq!(field(&head, "Accept-Ranges"), Some("bytes"));
    assert!(field(&head, "Last-Modified").is_some() && field(&head, "ETag").is_some());
    let identity_tag = field(&head, "ETag").unwrap().to_string();
    for (accept, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("gzip, br;q=0.5", "gzip"),
    ] {
        let (_, answer) = get(&s, "/a/b.css", &[("Accept-Encoding", accept)]);
        let (head, body) = split(&answer);
        assert_eq!(
            field(&head, "Content-Encoding"),
            Some(coding),
            "{accept}: {head}"
        );
        assert_ne!(field(&head, "ETag").unwrap(), identity_tag);
        let mut plain = Vec::new();
        match coding {
            "gzip" => flate2::read::GzDecoder::new(body)
                .read_to_end(&mut plain)
                .unwrap(),
            "br" => brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut plain)
                .unwrap(),
            _ => {
                plain = zstd::bulk::decompress(body, 1 << 20).unwrap();
                plain.len()
            }
        };
        assert_eq!(plain, PAGE, "{accept}");
    }
    // Identity wins only when named with a higher q, and is sent when nothing else is acceptable.
    for accept in [
        "identity, gzip;q=0.5",
        "gzip;q=0",
        "deflate",
        "identity;q=0, compress",
    ] {
        let (_, answer) = get(&s, "/a/b.css", &[("Accept-Encoding", accept)]);
        let (head, body) = split(&answer);
        assert_eq!(
            (field(&head, "Content-Encoding"), body),
            (None, PAGE),
            "{accept}"
        );
    }
    // A tiny PNG has no variant and no Vary.
    let (_, answer) = get(&s, "/img.png", &[("Accept-Encoding", "gzip")]);
    let (head, _) = split(&answer);
    assert_eq!(field(&head, "Content-Type"), Some("image/png"));
    assert_eq!(
        (field(&head, "Content-Encoding"), field(&head, "Vary")),
        (None, None)
    );
}

#[test]
fn directories_index_redirect_and_missing_paths() {
    let s = site(
        "dirs",
        &[
            ("index.html", b"root"),
            ("docs/index.html", b"docs"),
            ("docs/x/y.txt", b"y"),
        ],
    );
    assert_eq!(split(&get(&s, "/", &[]).1).1, b"root");
    assert_eq!(split(&get(&s, "/docs/", &[]).1).1, b"docs");
    assert_eq!(split(&get(&s, "/docs/./x/../index.html", &[]).1).1, b"docs");
    let (status, answer) = get(&s, "/docs?q=1", &[]);
    assert_eq!(status, 308);
    assert_eq!(field(&split(&answer).0, "Location"), Some("/docs/?q=1"));
    assert_eq!(get(&s, "/docs/x", &[]).0, 308);
    assert_eq!(get(&s, "/docs/x/", &[]).0, 404);
    assert_eq!(get(&s, "/nope", &[]).0, 404);
    assert_eq!(get(&s, "/../etc/passwd", &[]).0, 400);
    assert_eq!(get(&s, "/%2e%2e/x", &[]).0, 400);
    assert_eq!(get(&s, "/a%00", &[]).0, 400);
    assert_eq!(split(&get(&s, "/docs/x/y.txt?v=2", &[]).1).1, b"y");
}

#[test]
fn hidden_files_stay_hidden_and_symlinks_out_of_the_root_are_followed_unless_inside() {
    let outside = tree("outside", &[("secret.txt", b"secret")]);
    let root = tree(
        "inside",
        &[
            ("ok.txt", b"ok"),
            (".env", b"hidden"),
            (".git/config", b"hidden"),
            (".well-known/security.txt", b"Contact: mailto:a@b"),
            (".well-known/.private", b"hidden"),
        ],
    );
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("linked.txt")).unwrap();
    std::os::unix::fs::symlink(root.join("ok.txt"), root.join("alias.txt")).unwrap();
    std::os::unix::fs::symlink(root.join("gone.txt"), root.join("dangling.txt")).unwrap();
    std::os::unix::fs::symlink(".git/config", root.join("git-config")).unwrap();
    let opts = SiteOptions {
        root,
        max_size: 1 << 20,
        ..SiteOptions::default()
    };
    let s = build(&opts).unwrap();
    assert_eq!(get(&s, "/ok.txt", &[]).0, 200);
    assert_eq!(split(&get(&s, "/alias.txt", &[]).1).1, b"ok");
    assert_eq!(split(&get(&s, "/linked.txt", &[]).1).1, b"secret");
    assert_eq!(get(&s, "/.well-known/security.txt", &[]).0, 200);
    for hidden in [
        "/.env",
        "/.git/config",
        "/git-config",
        "/.well-known/.private",
    ] {
        assert_eq!(get(&s, hidden, &[]).0, 404, "{hidden}");
    }
    assert_eq!(s.stats.files, 4);
    assert_eq!(s.stats.shared, 1, "alias.txt shares ok.txt's body");
    let left = s.stats.left_out.to_string();
    assert_eq!(
        left,
        "4 dot-names hidden, 1 dangling symlink; 1 symlink out of the root followed"
    );

    let inside = build(&SiteOptions {
        symlinks: super::walk::Symlinks::Inside,
        ..opts.clone()
    })
    .unwrap();
    assert_eq!(get(&inside, "/linked.txt", &[]).0, 404);
    assert!(inside
        .stats
        .left_out
        .to_string()
        .contains("1 symlink out of the root refused"));

    let served = build(&SiteOptions {
        dotfiles: super::walk::Dotfiles::Serve,
        ..opts
    })
    .unwrap();
    assert_eq!(split(&get(&served, "/.env", &[]).1).1, b"hidden");
    assert_eq!(get(&served, "/.git/config", &[]).0, 200);
}

#[test]
fn a_symlink_loop_is_walked_once_and_a_directory_alias_serves_both_names() {
    let root = tree("loops", &[("docs/a.txt", b"a")]);
    std::os::unix::fs::symlink("..", root.join("docs/up")).unwrap();
    std::os::unix::fs::symlink("docs", root.join("alias")).unwrap();
    std::os::unix::fs::symlink("docs/.hidden", root.join("peek")).unwrap();
    std::fs::create_dir_all(root.join("docs/.hidden")).unwrap();
    std::fs::write(root.join("docs/.hidden/secret"), b"s").unwrap();
    let s = build(&SiteOptions {
        root,
        max_size: 1 << 20,
        ..SiteOptions::default()
    })
    .unwrap();
    assert_eq!(split(&get(&s, "/docs/a.txt", &[]).1).1, b"a");
    assert_eq!(split(&get(&s, "/alias/a.txt", &[]).1).1, b"a");
    assert_eq!(get(&s, "/peek/secret", &[]).0, 404);
    assert_eq!(
        get(&s, "/docs/up/docs/a.txt", &[]).0,
        404,
        "the loop is not followed"
    );
    assert_eq!(
        s.stats.left_out.to_string(),
        "3 dot-names hidden, 2 symlink loops; 0 symlinks out of the root followed",
        "docs/.hidden, alias/.hidden and peek (into docs/.hidden); docs/up and alias/up (the root)"
    );
}

#[test]
fn cache_control_rules_match_by_glob_and_the_first_match_wins() {
    let root = tree(
        "cache",
        &[("a.css", b"c"), ("img/x.png", b"p"), ("index.html", b"h")],
    );
    let opts = SiteOptions {
        root,
        cache_control: Some("no-cache".into()),
        cache_rules: vec![
            ("*.css".into(), "public, max-age=31536000".into()),
            ("/img/*".into(), "public, max-age=600".into()),
            ("/a.css".into(), "shadowed by *.css".into()),
            ("*".into(), "never reached for css or img".into()),
        ],
        max_size: 1 << 20,
        ..SiteOptions::default()
    };
    let s = build(&opts).unwrap();
    let cc = |path| field(&split(&get(&s, path, &[]).1).0, "Cache-Control").map(str::to_string);
    assert_eq!(cc("/a.css").as_deref(), Some("public, max-age=31536000"));
    assert_eq!(cc("/img/x.png").as_deref(), Some("public, max-age=600"));
    assert_eq!(
        cc("/index.html").as_deref(),
        Some("never reached for css or img")
    );
    assert!(super::build::glob_matches("/index.html", "/index.html"));
    assert!(super::build::glob_matches("docs/*.html", "/a/docs/b.html"));
    assert!(!super::build::glob_matches("/img/*.png", "/img/x.jpg"));
    let plain = SiteOptions {
        cache_rules: vec![("*.js".into(), "x".into())],
        ..opts
    };
    let s = build(&plain).unwrap();
    let cc = |path| field(&split(&get(&s, path, &[]).1).0, "Cache-Control").map(str::to_string);
    assert_eq!(
        cc("/index.html").as_deref(),
        Some("no-cache"),
        "no rule matches: --cache-control"
    );
}

#[test]
fn review_findings_stay_fixed() {
    let s = site(
        "review",
        &[
            ("docs/index.html", b"d"),
            ("f.txt", b"0123456789ab"),
            ("empty.txt", b""),
        ],
    );
    // A range ending at u64::MAX wrapped `b + 1` to 0 and crashed the server on slicing.
    let (status, answer) = get(&s, "/f.txt", &[("Range", "bytes=5-18446744073709551615")]);
    assert_eq!((status, split(&answer).1), (206, &b"56789ab"[..]));
    assert_eq!(get(&s, "/empty.txt", &[("Range", "bytes=-5")]).0, 416);
    // The 308 is built from the normalised path: `//evil.example/../docs` must not point off-site.
    let (status, answer) = get(&s, "//evil.example/../docs?q=1", &[]);
    assert_eq!(status, 308);
    assert_eq!(field(&split(&answer).0, "Location"), Some("/docs/?q=1"));
    // HEAD of a plain-text answer (400) carries no body.
    let req = Request {
        method: b"HEAD",
        target: b"/%zz",
        ..Request::default()
    };
    let mut out = Vec::new();
    assert_eq!(
        s.write(
            s.choose(&req),
            Framing::KeepAlive,
            &[b'D'; DATE_LEN],
            true,
            &mut out
        ),
        400
    );
    assert!(
        out.ends_with(b"\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // An absolute-form target without a path is `/`.
    assert_eq!(get(&s, "http://host", &[]).0, 404);
    assert_eq!(split(&get(&s, "http://host/docs/", &[]).1).1, b"d");
}

#[test]
fn validators_give_304_and_ranges_206_or_416() {
    let s = site("cond", &[("f.txt", b"0123456789")]);
    let (_, answer) = get(&s, "/f.txt", &[]);
    let head = split(&answer).0;
    let (etag, modified) = (
        field(&head, "ETag").unwrap(),
        field(&head, "Last-Modified").unwrap(),
    );
    let (status, answer) = get(&s, "/f.txt", &[("If-None-Match", etag)]);
    assert_eq!(status, 304);
    let (head, body) = split(&answer);
    assert!(
        body.is_empty() && field(&head, "Content-Length").is_none(),
        "{head}"
    );
    assert_eq!(field(&head, "ETag"), Some(etag));
    assert_eq!(
        get(&s, "/f.txt", &[("If-None-Match", &format!("W/{etag}"))]).0,
        304
    );
    assert_eq!(get(&s, "/f.txt", &[("If-None-Match", "\"other\"")]).0, 200);
    assert_eq!(get(&s, "/f.txt", &[("If-Modified-Since", modified)]).0, 304);
    assert_eq!(
        get(
            &s,
            "/f.txt",
            &[("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT")]
        )
        .0,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    let both = [
        ("If-None-Match", "\"other\""),
        ("If-Modified-Since", modified),
    ];
    assert_eq!(get(&s, "/f.txt", &both).0, 200);
    let (status, answer) = get(&s, "/f.txt", &[("Range", "bytes=2-4")]);
    let (head, body) = split(&answer);
    assert_eq!((status, body), (206, &b"234"[..]));
    assert_eq!(field(&head, "Content-Range"), Some("bytes 2-4/10"));
    let (status, answer) = get(&s, "/f.txt", &[("Range", "bytes=10-")]);
    assert_eq!(status, 416);
    assert_eq!(
        field(&split(&answer).0, "Content-Range"),
        Some("bytes */10")
    );
    assert_eq!(get(&s, "/f.txt", &[("Range", "bytes=0-1,4-5")]).0, 200);
    assert_eq!(
        get(
            &s,
            "/f.txt",
            &[("Range", "bytes=0-1"), ("If-Range", "\"old\"")]
        )
        .0,
        200
    );
}

#[test]
fn other_methods_get_405_and_a_404_page_or_spa_fallback_answers_unknown_paths() {
    let s = site(
        "methods",
        &[("index.html", b"app"), ("404.html", b"custom missing")],
    );
    let req = Request {
        method: b"POST",
        target: b"/",
        ..Request::default()
    };
    let mut out = Vec::new();
    let status = s.write(
        s.choose(&req),
        Framing::Close,
        &[b'D'; DATE_LEN],
        false,
        &mut out,
    );
    let (head, _) = split(&out);
    assert_eq!(status, 405);
    assert_eq!(field(&head, "Allow"), Some("GET, HEAD"));
    assert_eq!(field(&head, "Connection"), Some("close"));
    let (status, answer) = get(&s, "/missing", &[]);
    assert_eq!((status, split(&answer).1), (404, &b"custom missing"[..]));
    let root = tree("spa", &[("index.html", b"app")]);
    let opts = SiteOptions {
        root,
        spa_fallback: Some("index.html".into()),
        max_size: 1 << 20,
        ..SiteOptions::default()
    };
    let s = build(&opts).unwrap();
    let (status, answer) = get(&s, "/some/client/route", &[]);
    assert_eq!((status, split(&answer).1), (200, &b"app"[..]));
}

#[test]
fn a_site_over_its_size_limit_or_an_empty_root_is_refused_with_the_reason() {
    let root = tree("big", &[("a.bin", &[1u8; 4000]), ("b.bin", &[2u8; 100])]);
    let opts = SiteOptions {
        root: root.clone(),
        max_size: 1000,
        ..SiteOptions::default()
    };
    let err = build(&opts).unwrap_err().to_string();
    assert!(
        err.contains("--max-site-size") && err.contains("a.bin"),
        "{err}"
    );
    let empty = tree("empty", &[]);
    std::fs::create_dir_all(&empty).unwrap();
    let err = build(&SiteOptions {
        root: empty,
        max_size: 1000,
        ..SiteOptions::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("no file"), "{err}");
}

#[test]
fn a_choice_from_an_older_build_is_answered_503() {
    let handle = SiteHandle::new(site("swap", &[("a.txt", b"one")]));
    let mut mine = handle.load();
    let req = Request {
        method: b"GET",
        target: b"/a.txt",
        ..Request::default()
    };
    let old = mine.choose(&req);
    handle.swap(site("swap2", &[("a.txt", b"two")]));
    handle.refresh(&mut mine);
    let mut out = Vec::new();
    assert_eq!(
        mine.write(old, Framing::KeepAlive, &[b'D'; DATE_LEN], false, &mut out),
        503
    );
    let (_, answer) = get(&mine, "/a.txt", &[]);
    assert_eq!(split(&answer).1, b"two");
}
