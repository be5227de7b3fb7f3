//! Static-site mode (`--root DIR`) over real sockets and with real clients: the start-up line, content
//! negotiation (curl decodes each stored coding back to the file's exact bytes; a precompressed sibling
//! goes out byte for byte), validators and 304, HEAD, ranges, directory redirects and index pages,
//! percent-encoded names, 404 pages and the SPA fallback, 405 on a connection that stays usable,
//! HTTP/1.0, path traversal sent byte for byte (a client would normalise it), a pipelined batch of
//! mixed answers going out together, large bodies (sent from the sealed store) between small ones to a
//! slow reader, a large file to a reader and to a client that never reads, SIGHUP
//! rebuilds under load (a failed one keeping the site in force, a request straddling one answered 503),
//! and the start-up errors of the site flags.
//!
//! The unit tests of `statico-user/src/site` cover the pure logic (path normalisation, q-values,
//! ranges); these check that the running binary, on either runtime, answers what that logic decides.
//! HTTP/2 is left to the HTTP/2 tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use statico_tests::{get, run_to_exit, signal, Reader, Response, Server, WAIT};

/// Content of a file outside the root that a symlink in the root points to: no answer may carry it.
const OUTSIDE_MARKER: &str = "OUTSIDE-THE-ROOT-5c1e9d27";
/// Content of the hidden `.env` in the root: no answer may carry it either.
const DOTENV_MARKER: &str = "DOTENV-SECRET-b8f2a4";

/// A temporary directory holding `site/` (the root) and `outside/`, removed on drop.
struct Tree {
    dir: PathBuf,
}

impl Tree {
    /// The small site every test serves:
    ///
    /// ```text
    /// site/index.html  site/style.css (compressible)  site/app.js (compressible)  site/logo.png
    /// site/docs/index.html  site/docs/page.html  site/.env (hidden)
    /// site/leak.txt -> ../outside/secret.txt   site/outlink -> ../outside
    /// ```
    fn new() -> Tree {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "statico-e2e-site-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Tree { dir };
        t.write("site/index.html", INDEX);
        t.write("site/style.css", &css());
        t.write("site/app.js", &js());
        t.write("site/logo.png", &png());
        t.write("site/docs/index.html", DOCS_INDEX);
        t.write("site/docs/page.html", DOCS_PAGE);
        t.write("site/.env", format!("SECRET={DOTENV_MARKER}\n").as_bytes());
        t.write(
            "outside/secret.txt",
            format!("{OUTSIDE_MARKER}\n").as_bytes(),
        );
        std::os::unix::fs::symlink("../outside/secret.txt", t.dir.join("site/leak.txt")).unwrap();
        std::os::unix::fs::symlink("../outside", t.dir.join("site/outlink")).unwrap();
        t
    }

    fn root(&self) -> String {
        self.dir.join("site").display().to_string()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(rel)).unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const INDEX: &[u8] = b"<!doctype html><title>home</title><h1>home</h1>\n";
const DOCS_INDEX: &[u8] = b"<!doctype html><title>docs</title><h1>docs index</h1>\n";
const DOCS_PAGE: &[u8] = b"<!doctype html><title>page</title><h1>a docs page</h1>\n";
const CUSTOM_404: &[u8] = b"<!doctype html><title>lost</title><h1>custom not found page</h1>\n";

/// Repetitive text well over the 256 bytes below which statico does not compress.
fn css() -> Vec<u8> {
    (0..60)
        .map(|i| format!(".c{i} {{ color: #333; margin: 0 auto; padding: 4px; }}\n"))
        .collect::<String>()
        .into_bytes()
}

fn js() -> Vec<u8> {
    (0..60)
        .map(|i| format!("function f{i}(x) {{ return x * {i} + 1; }}\n"))
        .collect::<String>()
        .into_bytes()
}

/// A PNG signature and binary bytes (every value 0..=255 twice): served as it is, never compressed.
fn png() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    b.extend((0..512).map(|i| (i % 256) as u8));
    b
}

fn start(t: &Tree, extra: &[&str]) -> Server {
    let root = t.root();
    let mut args = vec!["--root", root.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// A request for `path` with extra header lines (each ending in CRLF).
fn request(method: &str, path: &str, headers: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n").into_bytes()
}

/// One request on a fresh connection.
fn fetch(s: &Server, req: &[u8]) -> Response {
    let mut r = Reader::new(s.connect());
    r.send(req);
    r.response(false)
}

/// Runs curl and returns (success, body bytes, stderr).
fn curl(args: &[&str]) -> (bool, Vec<u8>, String) {
    let out = Command::new("curl")
        .args(args)
        .output()
        .expect("curl (installed by cargo xtask setup)");
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until stderr contains `needle`, or fails.
fn wait_stderr(s: &Server, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let err = s.stderr();
        if err.contains(needle) {
            return err;
        }
        assert!(
            start.elapsed() < WAIT,
            "stderr never contained {needle:?}:\n{err}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The site line of a server's start-up: "N files, … built in N ms; what was left out".
fn site_line(s: &Server) -> String {
    let err = s.stderr();
    err.lines()
        .find(|l| l.starts_with("statico: site "))
        .unwrap_or_else(|| panic!("no site line in stderr:\n{err}"))
        .to_string()
}

#[test]
fn startup_line_counts_the_served_files_and_says_what_was_left_out() {
    let t = Tree::new();
    let s = start(&t, &["--symlinks", "inside"]);
    let line = site_line(&s);
    // index.html, style.css, app.js, logo.png, docs/index.html, docs/page.html; not .env, leak.txt
    // or outlink/.
    let prefix = format!("statico: site {}: 6 files, ", t.root());
    assert!(
        line.starts_with(&prefix),
        "{line:?} should start {prefix:?}"
    );
    let (built, left) = line
        .split(" built in ")
        .nth(1)
        .and_then(|rest| rest.split_once(" ms; "))
        .unwrap_or_else(|| panic!("{line:?} should end `built in N ms; …`"));
    assert!(built.parse::<u64>().is_ok(), "{line:?}");
    assert_eq!(
        left,
        "1 dot-name hidden, 2 symlinks out of the root refused; 0 symlinks out of the root followed"
    );
    // By default both symlinks are followed: leak.txt and outlink/secret.txt are served too.
    let s = start(&t, &["-v"]);
    let line = site_line(&s);
    assert!(line.contains(": 8 files, "), "{line}");
    assert!(
        line.ends_with("ms; 1 dot-name hidden; 2 symlinks out of the root followed"),
        "{line}"
    );
    let listed = format!(
        "statico: site: left out {}/.env: a dot-name (hidden)",
        t.root()
    );
    assert!(s.stderr().contains(&listed), "-v lists it:\n{}", s.stderr());
}

#[test]
fn symlinks_out_of_the_root_are_followed_and_well_known_is_served_while_dot_names_stay_hidden() {
    let t = Tree::new();
    t.write(
        "site/.well-known/security.txt",
        b"Contact: mailto:security@example.org\n",
    );
    t.write("site/.git/config", b"[core]\n");
    let s = start(&t, &[]);
    for (path, marker) in [
        ("/leak.txt", OUTSIDE_MARKER),
        ("/outlink/secret.txt", OUTSIDE_MARKER),
    ] {
        let r = fetch(&s, &get(path));
        assert_eq!(r.status, 200, "{path}");
        assert!(contains(&r.body, marker), "{path}");
    }
    let r = fetch(&s, &get("/.well-known/security.txt"));
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"Contact: mailto:security@example.org\n"[..])
    );
    for hidden in ["/.git/config", "/.env"] {
        let r = fetch(&s, &get(hidden));
        assert_eq!(r.status, 404, "{hidden}");
        assert!(!contains(&r.body, DOTENV_MARKER));
    }
    // `--dotfiles serve` serves them.
    let s = start(&t, &["--dotfiles", "serve"]);
    assert!(contains(&fetch(&s, &get("/.env")).body, DOTENV_MARKER));
}

/// As root with `--user nobody`, the site is read as nobody: a link to a world-readable file outside
/// the root is served, one to a root-only file is not (and is counted), at start-up and on SIGHUP.
#[cfg(target_os = "linux")]
#[test]
fn with_user_a_symlink_to_a_file_that_user_cannot_read_is_not_served() {
    use std::os::unix::fs::PermissionsExt;
    if !statico_tests::is_root() {
        eprintln!(
            "SKIPPED: with_user_a_symlink_to_a_file_that_user_cannot_read_is_not_served needs root"
        );
        return;
    }
    let t = Tree::new();
    // nobody must be able to reach the tree itself.
    for dir in [t.dir.as_path(), &t.dir.join("site"), &t.dir.join("outside")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        t.dir.parent().unwrap(),
        std::fs::Permissions::from_mode(0o1777),
    )
    .ok();
    t.write("outside/public.txt", b"PUBLIC\n");
    t.write("outside/root-only.txt", b"ROOT-ONLY-7d1c\n");
    let private = t.dir.join("outside/root-only.txt");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("../outside/public.txt", t.dir.join("site/public.txt")).unwrap();
    std::os::unix::fs::symlink("../outside/root-only.txt", t.dir.join("site/private.txt")).unwrap();
    let s = start(&t, &["--user", "nobody"]);
    // private.txt, and outlink/root-only.txt (outlink leads to the whole outside directory).
    let unreadable = "2 files unreadable as nobody";
    assert!(site_line(&s).contains(unreadable), "{}", site_line(&s));
    assert_eq!(fetch(&s, &get("/public.txt")).body, b"PUBLIC\n");
    let r = fetch(&s, &get("/private.txt"));
    assert_eq!(r.status, 404);
    assert!(!contains(&r.body, "ROOT-ONLY"));
    // A SIGHUP rebuild (statico now runs as nobody) reads it the same way.
    signal(s.pid(), "HUP");
    let rebuilt = wait_stderr(&s, "SIGHUP: site rebuilt");
    let rebuilt = rebuilt
        .lines()
        .find(|l| l.contains("SIGHUP: site rebuilt"))
        .unwrap();
    assert!(rebuilt.contains(unreadable), "{rebuilt}");
    assert_eq!(fetch(&s, &get("/private.txt")).status, 404);
}

#[test]
fn curl_decodes_each_stored_coding_back_to_the_exact_file_bytes() {
    let t = Tree::new();
    let s = start(&t, &[]);
    let headers = t.path("headers.txt").display().to_string();
    for (file, content_type) in [
        ("style.css", "text/css; charset=utf-8"),
        ("app.js", "charset=utf-8"),
    ] {
        let expected = t.read(&format!("site/{file}"));
        for coding in ["br", "gzip", "zstd"] {
            let ae = format!("Accept-Encoding: {coding}");
            let (ok, body, err) = curl(&[
                "-s",
                "--compressed",
                "-H",
                &ae,
                "-D",
                &headers,
                &s.url(&format!("/{file}")),
            ]);
            assert!(ok, "curl {coding} {file}: {err}");
            assert_eq!(body, expected, "{file} in {coding} decoded differently");
            let head = std::fs::read_to_string(&headers).unwrap().to_lowercase();
            assert!(
                head.contains(&format!("content-encoding: {coding}\r\n")),
                "{file} {coding}:\n{head}"
            );
            assert!(head.contains("vary: accept-encoding\r\n"), "{head}");
            assert!(head.contains(content_type), "{file}: {head}");
        }
        // And the compressed body on the wire is smaller than the file.
        let r = fetch(
            &s,
            &request("GET", &format!("/{file}"), "Accept-Encoding: br\r\n"),
        );
        assert_eq!(r.header("content-encoding").as_deref(), Some("br"));
        assert!(r.body.len() < expected.len(), "{}", r.head);
    }
    // Without Accept-Encoding: the file as it is, still marked as varying.
    let r = fetch(&s, &get("/style.css"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, css());
    assert_eq!(r.header("content-encoding"), None, "{}", r.head);
    assert_eq!(r.header("vary").as_deref(), Some("Accept-Encoding"));
    // A binary type is not compressed even when asked, and does not vary.
    let r = fetch(
        &s,
        &request("GET", "/logo.png", "Accept-Encoding: br, gzip, zstd\r\n"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, png());
    assert_eq!(r.header("content-type").as_deref(), Some("image/png"));
    assert_eq!(r.header("content-encoding"), None, "{}", r.head);
    assert_eq!(r.header("vary"), None, "{}", r.head);
    let (ok, body, err) = curl(&["-s", "--compressed", &s.url("/index.html")]);
    assert!(ok, "{err}");
    assert_eq!(body, INDEX);
}

#[test]
fn etag_strong_and_weak_and_last_modified_give_304_and_anything_else_200() {
    let t = Tree::new();
    let s = start(&t, &[]);
    let mut r = Reader::new(s.connect());
    r.send(&request("GET", "/style.css", "Accept-Encoding: gzip\r\n"));
    let first = r.response(false);
    assert_eq!(first.status, 200);
    let etag = first.header("etag").expect("ETag");
    let modified = first.header("last-modified").expect("Last-Modified");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    for (validator, status) in [
        (format!("If-None-Match: {etag}"), 304),
        (format!("If-None-Match: W/{etag}"), 304),
        (format!("If-None-Match: \"other\", {etag}"), 304),
        ("If-None-Match: *".to_string(), 304),
        ("If-None-Match: \"other\"".to_string(), 200),
        (format!("If-Modified-Since: {modified}"), 304),
        (
            "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT".to_string(),
            200,
        ),
        // If-None-Match decides when both are sent.
        (
            format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {modified}"),
            200,
        ),
    ] {
        r.send(&request(
            "GET",
            "/style.css",
            &format!("Accept-Encoding: gzip\r\n{validator}\r\n"),
        ));
        let resp = r.response(false);
        assert_eq!(resp.status, status, "{validator}:\n{}", resp.head);
        if status == 304 {
            assert_eq!(resp.header("etag").as_deref(), Some(etag.as_str()));
            assert_eq!(resp.header("vary").as_deref(), Some("Accept-Encoding"));
            assert_eq!(resp.header("content-encoding"), None, "{}", resp.head);
        } else {
            assert_eq!(resp.body, first.body, "{validator}");
        }
    }
    // No body came after any 304: the connection is quiet, then answers the next request in step.
    assert!(r.quiet_for(Duration::from_millis(200)), "bytes after a 304");
    r.send(&get("/index.html"));
    assert_eq!(r.response(false).body, INDEX);
    // curl's own conditional request by date.
    let (ok, body, err) = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &format!("If-Modified-Since: {modified}"),
        &s.url("/style.css"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(String::from_utf8_lossy(&body), "304");
}

#[test]
fn head_gets_the_get_headers_and_no_body_bytes() {
    let t = Tree::new();
    let s = start(&t, &[]);
    let without_date = |r: &Response| -> Vec<String> {
        r.head
            .lines()
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .map(str::to_string)
            .collect()
    };
    for (path, ae) in [
        ("/style.css", "Accept-Encoding: gzip\r\n"),
        ("/style.css", ""),
        ("/logo.png", ""),
        ("/docs/", "Accept-Encoding: br\r\n"),
        ("/missing", ""),
    ] {
        let mut r = Reader::new(s.connect());
        r.send(&request("GET", path, ae));
        let got = r.response(false);
        r.send(&request("HEAD", path, ae));
        let head = r.response(true);
        assert_eq!(head.status, got.status, "{path}");
        assert_eq!(without_date(&head), without_date(&got), "{path} {ae}");
        assert_eq!(
            head.header("content-length"),
            Some(got.body.len().to_string())
        );
        assert!(
            r.quiet_for(Duration::from_millis(200)),
            "HEAD {path} was followed by body bytes"
        );
        r.send(&get("/index.html"));
        assert_eq!(r.response(false).body, INDEX, "after HEAD {path}");
    }
}

#[test]
fn a_range_gets_206_with_exactly_those_bytes_and_one_past_the_end_416() {
    let t = Tree::new();
    let s = start(&t, &[]);
    let png = png();
    let mut r = Reader::new(s.connect());
    r.send(&request("GET", "/logo.png", "Range: bytes=2-5\r\n"));
    let part = r.response(false);
    assert_eq!(part.status, 206, "{}", part.head);
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 2-5/{}", png.len()))
    );
    assert_eq!(part.body, &png[2..6]);
    // A suffix range, and a range of a compressible file asked with Accept-Encoding: identity bytes.
    r.send(&request("GET", "/logo.png", "Range: bytes=-3\r\n"));
    assert_eq!(r.response(false).body, &png[png.len() - 3..]);
    let css = css();
    r.send(&request(
        "GET",
        "/style.css",
        "Accept-Encoding: br, gzip\r\nRange: bytes=10-19\r\n",
    ));
    let part = r.response(false);
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-encoding"), None, "{}", part.head);
    assert_eq!(part.body, &css[10..20]);
    r.send(&request("GET", "/logo.png", "Range: bytes=999999-\r\n"));
    let past = r.response(false);
    assert_eq!(past.status, 416, "{}", past.head);
    assert_eq!(
        past.header("content-range"),
        Some(format!("bytes */{}", png.len()))
    );
    // The connection carries on.
    r.send(&get("/logo.png"));
    assert_eq!(r.response(false).body, png);
    // curl's --range.
    let (ok, body, err) = curl(&["-s", "-r", "2-5", &s.url("/logo.png")]);
    assert!(ok, "{err}");
    assert_eq!(body, &png[2..6]);
}

#[test]
fn a_directory_without_its_slash_redirects_and_with_it_serves_its_index() {
    let t = Tree::new();
    let s = start(&t, &[]);
    for (path, location) in [("/docs", "/docs/"), ("/docs?x=1", "/docs/?x=1")] {
        let r = fetch(&s, &get(path));
        assert_eq!(r.status, 308, "{path}:\n{}", r.head);
        assert_eq!(r.header("location").as_deref(), Some(location), "{path}");
    }
    for (path, body) in [
        ("/", INDEX),
        ("/index.html", INDEX),
        ("/docs/", DOCS_INDEX),
        ("/docs/index.html", DOCS_INDEX),
        ("/docs/page.html", DOCS_PAGE),
        ("/docs/./page.html", DOCS_PAGE),
        ("/docs//page.html", DOCS_PAGE),
        ("/docs/page.html?v=3", DOCS_PAGE),
    ] {
        let r = fetch(&s, &get(path));
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, body, "{path}");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/html; charset=utf-8"),
            "{path}"
        );
    }
    // curl follows the redirect to the index.
    let (ok, body, err) = curl(&["-s", "-L", &s.url("/docs?x=1")]);
    assert!(ok, "{err}");
    assert_eq!(body, DOCS_INDEX);
    // Missing files, without a 404.html in the root: the built-in page.
    for path in ["/missing", "/docs/missing.html", "/style.css/x"] {
        let r = fetch(&s, &get(path));
        assert_eq!(r.status, 404, "{path}");
        assert!(contains(&r.body, "404"), "{path}: {:?}", r.body);
    }
}

#[test]
fn missing_paths_get_the_roots_404_page_with_status_404() {
    let t = Tree::new();
    t.write("site/404.html", CUSTOM_404);
    let s = start(&t, &[]);
    for path in ["/nope", "/docs/nope.html", "/a/b/c"] {
        let r = fetch(&s, &get(path));
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.body, CUSTOM_404, "{path}");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/html; charset=utf-8")
        );
    }
    // The page itself, asked for by name, is an ordinary 200.
    let r = fetch(&s, &get("/404.html"));
    assert_eq!((r.status, r.body.as_slice()), (200, CUSTOM_404));
    let (ok, body, err) = curl(&["-s", "-w", "%{http_code}", &s.url("/nope")]);
    assert!(ok, "{err}");
    assert_eq!(body, [CUSTOM_404, b"404"].concat());
}

#[test]
fn spa_fallback_answers_unknown_paths_with_the_fallback_and_200() {
    let t = Tree::new();
    let s = start(&t, &["--spa-fallback", "index.html"]);
    for path in ["/app/route", "/users/42/edit?tab=x", "/docs/unknown.html"] {
        let r = fetch(&s, &get(path));
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, INDEX, "{path}");
    }
    // Real files and directories are still themselves.
    assert_eq!(fetch(&s, &get("/style.css")).body, css());
    assert_eq!(fetch(&s, &get("/docs/")).body, DOCS_INDEX);
    assert_eq!(fetch(&s, &get("/docs")).status, 308);
    // A fallback that is not in the tree is a start-up error naming it.
    let (code, err) = run_to_exit(&["--root", &t.root(), "--spa-fallback", "app.html"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--spa-fallback") && err.contains("app.html"),
        "{err}"
    );
}

#[test]
fn other_methods_get_405_with_allow_and_the_connection_stays_usable() {
    let t = Tree::new();
    let s = start(&t, &[]);
    let mut r = Reader::new(s.connect());
    let mut batch =
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello".to_vec();
    batch.extend_from_slice(&request("DELETE", "/style.css", ""));
    batch.extend_from_slice(&request("PUT", "/new.html", "Content-Length: 3\r\n"));
    batch.extend_from_slice(b"abc");
    r.send(&batch);
    for method in ["POST", "DELETE", "PUT"] {
        let resp = r.response(false);
        assert_eq!(resp.status, 405, "{method}:\n{}", resp.head);
        assert_eq!(
            resp.header("allow").as_deref(),
            Some("GET, HEAD"),
            "{method}"
        );
        assert_eq!(
            resp.header("connection"),
            None,
            "{method} closes:\n{}",
            resp.head
        );
    }
    r.send(&get("/index.html"));
    let after = r.response(false);
    assert_eq!((after.status, after.body.as_slice()), (200, INDEX));
    // And with curl.
    let (ok, body, err) = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "DELETE",
        &s.url("/index.html"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(String::from_utf8_lossy(&body), "405");
    drop(r);
    assert_eq!(
        s.stop().total("conns_accepted"),
        2,
        "the raw client kept one connection"
    );
}

#[test]
fn traversal_attempts_sent_byte_for_byte_never_reach_outside_or_hidden_files() {
    let t = Tree::new();
    // The root's own symlinks out of it are followed by default (see the tests below); here only
    // the root may be reached.
    let s = start(&t, &["--symlinks", "inside"]);
    let targets: &[&[u8]] = &[
        b"/../outside/secret.txt",
        b"/../../../../etc/passwd",
        b"/%2e%2e/outside/secret.txt",
        b"/%2E%2E/outside/secret.txt",
        b"/.%2e/outside/secret.txt",
        b"/docs/%2e%2e/%2e%2e/outside/secret.txt",
        b"/a/%2e%2e/%2e%2e/outside/secret.txt",
        b"/%2f..%2f..%2foutside/secret.txt",
        b"/%2f..%2f..%2fetc/passwd",
        b"/..%2foutside%2fsecret.txt",
        b"/%252e%252e/outside/secret.txt",
        b"/x%00",
        b"/index.html%00.png",
        b"/%c0%ae%c0%ae/outside/secret.txt",
        b"/%c0%ae%c0%ae/",
        b"/%e0%80%ae%e0%80%ae/outside/secret.txt",
        b"/..\\..\\outside\\secret.txt",
        b"/docs\\..\\..\\outside\\secret.txt",
        b"/%5c..%5c..%5coutside%5csecret.txt",
        b"/.env",
        b"/%2eenv",
        b"/docs/../.env",
        b"/leak.txt",
        b"/outlink/secret.txt",
        b"/outlink/",
        b"http://t/../outside/secret.txt",
        b"http://t/%2e%2e/outside/secret.txt",
        b"//outside/secret.txt",
    ];
    for target in targets {
        let shown = String::from_utf8_lossy(target);
        let mut r = Reader::new(s.connect());
        let mut req = b"GET ".to_vec();
        req.extend_from_slice(target);
        req.extend_from_slice(b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        r.send(&req);
        let all = r.until_closed();
        assert!(all.starts_with(b"HTTP/1.1 "), "{shown}: {all:?}");
        let status = String::from_utf8_lossy(&all[9..12]).into_owned();
        assert!(
            status == "400" || status == "404",
            "{shown} answered {status}:\n{}",
            String::from_utf8_lossy(&all)
        );
        for secret in [OUTSIDE_MARKER, DOTENV_MARKER, "root:x:0:0"] {
            assert!(
                !contains(&all, secret),
                "{shown} leaked {secret}:\n{}",
                String::from_utf8_lossy(&all)
            );
        }
    }
    // A path refused with 400 is not a framing error: the connection goes on.
    let mut r = Reader::new(s.connect());
    let mut batch = get("/%2e%2e/outside/secret.txt");
    batch.extend_from_slice(&get("/"));
    r.send(&batch);
    let refused = r.response(false);
    assert_eq!(refused.status, 400);
    assert_eq!(refused.header("connection"), None, "{}", refused.head);
    assert_eq!(r.response(false).body, INDEX);
}

/// One request of a pipelined batch and what its answer must be.
struct Case<'a> {
    request: Vec<u8>,
    head_only: bool,
    status: u16,
    /// The `Content-Encoding` expected (none: identity).
    coding: Option<&'a str>,
    body: Option<&'a [u8]>,
}

impl<'a> Case<'a> {
    fn new(request: Vec<u8>, status: u16) -> Self {
        Case {
            request,
            head_only: false,
            status,
            coding: None,
            body: None,
        }
    }

    fn get(path: &str, status: u16) -> Self {
        Case::new(get(path), status)
    }

    fn coding(self, coding: &'a str) -> Self {
        Case {
            coding: Some(coding),
            ..self
        }
    }

    fn body(self, body: &'a [u8]) -> Self {
        Case {
            body: Some(body),
            ..self
        }
    }
}

#[test]
fn sixteen_pipelined_requests_for_mixed_paths_are_answered_in_order_in_one_write() {
    let t = Tree::new();
    let s = start(&t, &["-t", "1"]);
    // The ETag to revalidate with, from a connection of its own (one more write).
    let etag = fetch(&s, &get("/docs/page.html"))
        .header("etag")
        .expect("ETag");
    let (css, js, png) = (css(), js(), png());
    let ae = |coding: &str| format!("Accept-Encoding: {coding}\r\n");
    let cases: [Case; 16] = [
        Case::get("/", 200).body(INDEX),
        Case::new(request("GET", "/style.css", &ae("br")), 200).coding("br"),
        Case::new(request("GET", "/app.js", &ae("gzip")), 200).coding("gzip"),
        Case::get("/logo.png", 200).body(&png),
        Case::get("/nope.html", 404),
        Case::new(request("GET", "/style.css", &ae("zstd")), 200).coding("zstd"),
        Case::new(
            request(
                "GET",
                "/docs/page.html",
                &format!("If-None-Match: {etag}\r\n"),
            ),
            304,
        ),
        Case::get("/docs/", 200).body(DOCS_INDEX),
        Case::get("/docs", 308),
        Case::new(request("GET", "/logo.png", "Range: bytes=2-5\r\n"), 206).body(&png[2..6]),
        Case {
            head_only: true,
            ..Case::new(request("HEAD", "/style.css", ""), 200)
        },
        Case::get("/docs/missing", 404),
        Case::get("/app.js", 200).body(&js),
        Case::new(request("GET", "/style.css", &ae("identity")), 200).body(&css),
        Case::get("/.env", 404),
        Case::get("/docs/page.html", 200).body(DOCS_PAGE),
    ];
    let batch: Vec<u8> = cases.iter().flat_map(|c| c.request.clone()).collect();
    let mut r = Reader::new(s.connect());
    r.send(&batch);
    for (i, case) in cases.iter().enumerate() {
        let resp = r.response(case.head_only);
        let shown = String::from_utf8_lossy(case.request.split(|&b| b == b'\r').next().unwrap());
        assert_eq!(
            resp.status, case.status,
            "response {i} to {shown}:\n{}",
            resp.head
        );
        assert_eq!(
            resp.header("content-encoding").as_deref(),
            case.coding,
            "response {i} to {shown}"
        );
        if let Some(body) = case.body {
            assert_eq!(resp.body, body, "response {i} to {shown}");
        }
    }
    assert!(
        r.quiet_for(Duration::from_millis(200)),
        "more than 16 responses"
    );
    drop(r);
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 17);
    let writes = stopped.total("writes");
    assert!(
        writes <= 3,
        "16 pipelined answers (and one before them) took {writes} writes"
    );
}

/// The counts wrk prints: (requests, socket errors line if any, non-2xx/3xx responses).
fn wrk_summary(out: &str) -> (u64, Option<String>, u64) {
    let requests = out
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no request count in wrk's output:\n{out}"));
    let socket_errors = out
        .lines()
        .find(|l| l.contains("Socket errors"))
        .map(str::to_string);
    let non_2xx = out
        .lines()
        .find(|l| l.contains("Non-2xx or 3xx responses"))
        .and_then(|l| l.rsplit(':').next()?.trim().parse().ok())
        .unwrap_or(0);
    (requests, socket_errors, non_2xx)
}

#[test]
fn sighup_under_load_swaps_in_the_new_content_without_a_failed_request() {
    let t = Tree::new();
    let s = start(&t, &["-t", "1"]);
    let url = s.url("/style.css");
    let wrk = thread::spawn(move || {
        let out = Command::new("wrk")
            .args(["-t1", "-c8", "-d3s", "-H", "Accept-Encoding: gzip", &url])
            .output()
            .expect("wrk (installed by cargo xtask setup)");
        assert!(out.status.success(), "wrk failed: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    let old_etag = fetch(&s, &get("/style.css")).header("etag").unwrap();
    thread::sleep(Duration::from_millis(1000));
    let new_css = b".rebuilt { color: green; }\n".repeat(40);
    t.write("site/style.css", &new_css);
    t.write("site/docs/added.html", b"added after start\n");
    signal(s.pid(), "HUP");
    let err = wait_stderr(&s, "statico: SIGHUP: site rebuilt");
    // The 6 files, leak.txt and outlink/secret.txt (symlinks out of the root are followed), and
    // the added page.
    assert!(
        err.contains("statico: SIGHUP: site rebuilt: 9 files, "),
        "{err}"
    );
    let (ok, body, e) = curl(&["-s", "--compressed", &s.url("/style.css")]);
    assert!(ok, "{e}");
    assert_eq!(body, new_css, "the rebuilt site is not in force");
    assert_eq!(fetch(&s, &get("/docs/added.html")).status, 200);
    // The old ETag no longer matches.
    let r = fetch(
        &s,
        &request(
            "GET",
            "/style.css",
            &format!("If-None-Match: {old_etag}\r\n"),
        ),
    );
    assert_eq!((r.status, r.body.as_slice()), (200, new_css.as_slice()));
    let out = wrk.join().unwrap();
    let (requests, socket_errors, non_2xx) = wrk_summary(&out);
    assert!(requests > 100, "wrk made only {requests} requests:\n{out}");
    assert_eq!(socket_errors, None, "{out}");
    assert_eq!(non_2xx, 0, "{out}");
    let stopped = s.stop();
    assert_eq!(stopped.total("status_400"), 0);
}

#[test]
fn a_rebuild_that_fails_keeps_the_site_in_force_and_says_why() {
    let t = Tree::new();
    let s = start(&t, &["--max-site-size", "64k"]);
    let old_css = fetch(&s, &get("/style.css"));
    // Over the limit: 200 KB of bytes that do not compress (a cheap xorshift), and a changed file.
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let big: Vec<u8> = (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    t.write("site/big.bin", &big);
    t.write("site/style.css", b".changed { }\n");
    signal(s.pid(), "HUP");
    let err = wait_stderr(&s, "statico: SIGHUP: kept the site in force");
    let line = err
        .lines()
        .find(|l| l.contains("kept the site in force"))
        .unwrap();
    assert!(
        line.contains("--max-site-size") && line.contains("big.bin"),
        "{line}"
    );
    assert!(!err.contains("site rebuilt"), "{err}");
    // The old site answers: the old style.css, no big.bin.
    let now = fetch(&s, &get("/style.css"));
    assert_eq!(now.body, css());
    assert_eq!(now.header("etag"), old_css.header("etag"));
    assert_eq!(fetch(&s, &get("/big.bin")).status, 404);
    // Once the cause is gone, the next SIGHUP rebuilds.
    std::fs::remove_file(t.path("site/big.bin")).unwrap();
    signal(s.pid(), "HUP");
    wait_stderr(&s, "statico: SIGHUP: site rebuilt");
    assert_eq!(fetch(&s, &get("/style.css")).body, b".changed { }\n");
}

#[test]
fn bad_site_flags_exit_2_naming_the_cause() {
    let t = Tree::new();
    let root = t.root();

    let (code, err) = run_to_exit(&["--root", "/nonexistent/statico-site"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("--root") && err.contains("/nonexistent/statico-site"),
        "{err}"
    );

    let (code, err) = run_to_exit(&["--root", &root, "-b", "x"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--root") && err.contains("--body"), "{err}");

    let empty = t.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, err) = run_to_exit(&["--root", &empty.display().to_string()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--root") && err.contains("no file"), "{err}");

    // A tree of nothing but hidden files is empty too.
    t.write("hidden/.a", b"x");
    let (code, err) = run_to_exit(&["--root", &t.path("hidden").display().to_string()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no file"), "{err}");

    let (code, err) = run_to_exit(&["--root", &t.path("site/index.html").display().to_string()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a directory"), "{err}");

    // style.css (with its compressed variants) is the biggest file.
    let (code, err) = run_to_exit(&["--root", &root, "--max-site-size", "1k"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--max-site-size"), "{err}");
    let biggest = Path::new(&root).join("style.css");
    let named = err
        .split("the biggest files: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no biggest files in {err}"));
    assert!(
        named.starts_with(&biggest.display().to_string()),
        "{biggest:?} should come first: {err}"
    );

    let (code, err) = run_to_exit(&["--cache-control", "no-store"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--root"), "{err}");
}

#[test]
fn cache_control_and_extra_headers_are_on_every_answer() {
    let t = Tree::new();
    let s = start(
        &t,
        &["--cache-control", "public, max-age=60", "-H", "X-Site: e2e"],
    );
    let first = fetch(&s, &get("/style.css"));
    let etag = first.header("etag").unwrap();
    for (req, status) in [
        (get("/style.css"), 200),
        (
            request("GET", "/style.css", &format!("If-None-Match: {etag}\r\n")),
            304,
        ),
        (request("GET", "/logo.png", "Range: bytes=0-1\r\n"), 206),
    ] {
        let r = fetch(&s, &req);
        assert_eq!(r.status, status);
        assert_eq!(
            r.header("cache-control").as_deref(),
            Some("public, max-age=60"),
            "{status}:\n{}",
            r.head
        );
        assert_eq!(r.header("x-site").as_deref(), Some("e2e"), "{}", r.head);
    }
    for req in [
        get("/missing"),
        get("/docs"),
        request("POST", "/", "Content-Length: 0\r\n"),
    ] {
        let r = fetch(&s, &req);
        assert_eq!(r.header("x-site").as_deref(), Some("e2e"), "{}", r.head);
    }
}

#[test]
fn file_names_with_spaces_and_non_ascii_are_served_by_their_percent_encoded_path() {
    let t = Tree::new();
    t.write("site/a b.html", b"space\n");
    t.write("site/caf\u{e9}.html", b"cafe\n");
    t.write("site/my dir/index.html", b"dir with a space\n");
    let s = start(&t, &[]);
    for (path, body) in [
        ("/a%20b.html", &b"space\n"[..]),
        ("/caf%C3%A9.html", b"cafe\n"),
        ("/caf%c3%a9.html", b"cafe\n"),
        ("/my%20dir/", b"dir with a space\n"),
    ] {
        let r = fetch(&s, &get(path));
        assert_eq!((r.status, r.body.as_slice()), (200, body), "{path}");
    }
    let r = fetch(&s, &get("/my%20dir?q=a%20b"));
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location").as_deref(), Some("/my%20dir/?q=a%20b"));
    let (ok, body, err) = curl(&["-s", "-L", &s.url("/my%20dir")]);
    assert!(ok, "{err}");
    assert_eq!(body, b"dir with a space\n");
}

#[test]
fn http10_requests_are_answered_in_kind() {
    let t = Tree::new();
    let s = start(&t, &[]);
    let mut r = Reader::new(s.connect());
    r.send(b"GET /docs/page.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let resp = r.response(false);
    assert_eq!(resp.body, DOCS_PAGE);
    assert_eq!(
        resp.header("connection").as_deref(),
        Some("keep-alive"),
        "{}",
        resp.head
    );
    r.send(b"GET /index.html HTTP/1.0\r\n\r\n");
    let resp = r.response(false);
    assert_eq!(resp.body, INDEX);
    assert_eq!(resp.header("connection").as_deref(), Some("close"));
    assert!(r.until_closed().is_empty(), "bytes after the last answer");
}

/// `len` pseudo-random bytes (incompressible: stored as identity only).
fn noise(len: usize, mut x: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn large_bodies_between_small_answers_reach_a_slow_reader_exact_and_in_order() {
    // Bodies of 16 KiB and more leave from the site's sealed store (sendfile on tokio), the heads
    // and small bodies around them from memory: a pipelined batch mixing them, read slowly so that
    // every send is partial, must still come back byte for byte and in order.
    let t = Tree::new();
    let big = noise(3 << 20, 0x9e37_79b9_7f4a_7c15);
    let mid = noise(20 << 10, 0x2545_f491_4f6c_dd1d);
    t.write("site/big.bin", &big);
    t.write("site/mid.bin", &mid);
    let s = start(&t, &["-t", "1"]);
    // A small receive window: the server's sends, sendfile included, stop part way, many times.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&s.addr.into()).unwrap();
    let stream: std::net::TcpStream = sock.into();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut r = Reader::new(stream);
    let range = request("GET", "/big.bin", "Range: bytes=20000-199999\r\n");
    let head = request("HEAD", "/big.bin", "");
    let batch = [
        get("/big.bin"),
        get("/index.html"),
        range,
        get("/mid.bin"),
        head,
        get("/big.bin"),
    ]
    .concat();
    r.send(&batch);
    thread::sleep(Duration::from_millis(300)); // the socket fills; the server waits for room
    let want: [(u16, &[u8], bool); 6] = [
        (200, &big, false),
        (200, INDEX, false),
        (206, &big[20000..200000], false),
        (200, &mid, false),
        (200, b"", true),
        (200, &big, false),
    ];
    for (i, (status, body, head_only)) in want.into_iter().enumerate() {
        let resp = r.response(head_only);
        assert_eq!(resp.status, status, "answer {i}: {}", resp.head);
        assert!(resp.body == body, "answer {i}: the body differs");
    }
}

#[test]
fn a_large_file_arrives_whole_and_a_client_that_never_reads_it_holds_bounded_memory() {
    let t = Tree::new();
    let big = noise(4 << 20, 0x9e37_79b9_7f4a_7c15);
    t.write("site/big.bin", &big);
    let s = start(&t, &["-t", "1", "--idle-timeout", "2s"]);
    let (ok, body, err) = curl(&["-s", "--limit-rate", "4M", &s.url("/big.bin")]);
    assert!(ok, "{err}");
    assert!(body == big, "the 4 MiB file came back different");
    let before = statico_tests::rss_kib(s.pid());
    let mut c = s.connect();
    c.set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let batch = get("/big.bin").repeat(200);
    let start = Instant::now();
    let (mut last_progress, mut peak) = (Instant::now(), 0);
    while last_progress.elapsed() < Duration::from_millis(500) && start.elapsed() < WAIT {
        if let Ok(n) = std::io::Write::write(&mut c, &batch) {
            if n > 0 {
                last_progress = Instant::now();
            }
        }
        peak = peak.max(statico_tests::rss_kib(s.pid()));
    }
    assert!(
        last_progress.elapsed() >= Duration::from_millis(500),
        "the server kept reading requests it could not answer"
    );
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one client pipelining GETs of a 4 MiB file \
         without reading"
    );
    drop(c);
    // The server still serves.
    assert_eq!(fetch(&s, &get("/index.html")).body, INDEX);
}

#[test]
fn fifty_clients_that_never_read_a_large_file_share_it_instead_of_copying_it() {
    let t = Tree::new();
    t.write("site/big.bin", &vec![0x5a; 4 << 20]);
    let s = start(&t, &["-t", "1", "--idle-timeout", "5s"]);
    let before = statico_tests::rss_kib(s.pid());
    // Each asks for the 4 MiB file a few times and reads nothing: copies would be 50 × 4 MiB and more.
    let clients: Vec<_> = (0..50)
        .map(|_| {
            let mut c = s.connect();
            c.set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let _ = std::io::Write::write(&mut c, &get("/big.bin").repeat(4));
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let held = statico_tests::rss_kib(s.pid());
    statico_tests::assert_memory!(
        held < before + 16 * 1024,
        "RSS grew from {before} KiB to {held} KiB with 50 clients holding a 4 MiB file unread"
    );
    drop(clients);
    assert_eq!(fetch(&s, &get("/index.html")).body, INDEX);
}

#[test]
fn a_request_whose_body_spans_a_rebuild_is_answered_503_and_its_retry_200() {
    let t = Tree::new();
    let s = start(&t, &["-t", "1"]);
    let mut r = Reader::new(s.connect());
    r.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab");
    thread::sleep(Duration::from_millis(100));
    t.write("site/index.html", b"<h1>rebuilt</h1>\n");
    signal(s.pid(), "HUP");
    wait_stderr(&s, "statico: SIGHUP: site rebuilt");
    r.send(b"cd");
    let resp = r.response(false);
    assert_eq!(resp.status, 503, "{}", String::from_utf8_lossy(&resp.body));
    r.send(&get("/index.html"));
    let resp = r.response(false);
    assert_eq!(
        (resp.status, resp.body.as_slice()),
        (200, &b"<h1>rebuilt</h1>\n"[..])
    );
}

#[test]
fn a_precompressed_sibling_is_sent_byte_for_byte_and_decodes_to_the_file() {
    let t = Tree::new();
    let js = js();
    t.write("site/pre.js", &js);
    // gzip -9 with the name and time left out: bytes statico's own level 6 would not produce.
    let out = Command::new("gzip")
        .args(["-9", "-n", "-k"])
        .arg(t.path("site/pre.js"))
        .output()
        .expect("gzip");
    assert!(out.status.success(), "{out:?}");
    let sibling = t.read("site/pre.js.gz");
    let s = start(&t, &[]);
    let r = fetch(&s, &request("GET", "/pre.js", "Accept-Encoding: gzip\r\n"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"));
    assert!(r.body == sibling, "the .gz sibling was not sent as it is");
    let (ok, body, err) = curl(&[
        "-s",
        "--compressed",
        "-H",
        "Accept-Encoding: gzip",
        &s.url("/pre.js"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(body, js);
    // Without a sibling for them, brotli and zstd are made at start-up.
    for coding in ["br", "zstd"] {
        let r = fetch(
            &s,
            &request("GET", "/pre.js", &format!("Accept-Encoding: {coding}\r\n")),
        );
        assert_eq!(r.header("content-encoding").as_deref(), Some(coding));
    }
    // The sibling is also a file of its own.
    let r = fetch(&s, &get("/pre.js.gz"));
    assert_eq!((r.status, r.header("content-encoding")), (200, None));
    assert!(r.body == sibling);
}
