//! Routes (`--route SPEC`, `--routes FILE`, `--seed N`) as a client sees them: which route answers
//! (exact and prefix paths, methods, first match, the file after the flags, the default answer and
//! the `--root` site behind them), sizes, headers and files as bodies, a status mix that holds its
//! proportion, delays, body delays and pacing timed from the client, faults (reset, close, stall,
//! truncate) over raw HTTP/1.1 sockets, the `h2` crate and a quinn + h3 client, seeds that repeat a
//! run, the one-line start-up errors of a bad route, the ground truth on `--metrics` checked against
//! what the client counted, and Fortio's query arguments (`--echo-query`).
//!
//! HTTP/1.1 tests run on the runtime under test; HTTP/2 ones ask for tokio; HTTP/3 ones run on the
//! runtime under test, as `http3.rs` does.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use statico_tests::{get, scratch_dir, Reader, Response, Server, WAIT};

/// `--route SPEC` for each of `routes`, then `extra`.
fn args<'a>(routes: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&str> = routes.iter().flat_map(|r| ["--route", *r]).collect();
    args.extend_from_slice(extra);
    args
}

/// statico with `routes` and `extra` flags.
fn start(routes: &[&str], extra: &[&str]) -> Server {
    Server::start(&args(routes, extra))
}

/// A request with `method` for `path`.
fn request(method: &str, path: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

/// One request and its response on a fresh connection.
fn fetch(s: &Server, method: &str, path: &str) -> Response {
    let mut r = Reader::new(s.connect());
    r.send(&request(method, path));
    r.response(method == "HEAD")
}

/// The body of a GET for `path`, as text.
fn body_of(s: &Server, path: &str) -> String {
    String::from_utf8(fetch(s, "GET", path).body).unwrap()
}

/// Reads until the server closes the connection or a read fails: what came, and the error.
fn read_all(stream: &mut TcpStream) -> (Vec<u8>, Option<std::io::Error>) {
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (got, None),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(e)),
        }
    }
}

/// Sends a GET for `path` on a fresh connection and reads until it ends: what came, the read
/// error if it ended with one, and how long after the request it ended.
fn get_until_closed(s: &Server, path: &str) -> (Vec<u8>, Option<std::io::Error>, Duration) {
    let mut c = s.connect();
    // Timed from before the write: the server may take the request before the write returns here.
    let sent = Instant::now();
    c.write_all(&get(path)).unwrap();
    let (got, err) = read_all(&mut c);
    (got, err, sent.elapsed())
}

/// A response read off the wire with the times its head and its last body byte arrived.
struct Timed {
    head: Duration,
    done: Duration,
    body: Vec<u8>,
}

/// Sends a GET for `path` and reads one response (with a Content-Length), timing it.
fn timed_get(stream: &mut TcpStream, path: &str) -> Timed {
    // Timed from before the write: the server may take the request (and start its delay) before
    // the write returns here, and a delay must never look shorter than it was.
    let sent = Instant::now();
    stream.write_all(&get(path)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut head = None;
    loop {
        if head.is_none() {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                head = Some((i + 4, sent.elapsed()));
            }
        }
        if let Some((end, at)) = head {
            let text = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a Content-Length");
            if buf.len() >= end + len {
                return Timed {
                    head: at,
                    done: sent.elapsed(),
                    body: buf[end..end + len].to_vec(),
                };
            }
        }
        let n = stream.read(&mut chunk).expect("read a response");
        assert!(
            n > 0,
            "closed inside a response: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The statuses of `n` GETs for `path` pipelined on one connection, in batches.
fn statuses(s: &Server, path: &str, n: usize) -> Vec<u16> {
    let mut r = Reader::new(s.connect());
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let batch = (n - got.len()).min(200);
        r.send(&get(path).repeat(batch));
        got.extend((0..batch).map(|_| r.response(false).status));
    }
    got
}

/// A file `name` holding `text` in a fresh scratch directory for `test`.
fn file(test: &str, name: &str, text: &[u8]) -> String {
    let path = scratch_dir("routes", test).join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

// ---- Matching ----

#[test]
fn exact_and_prefix_paths_answer_their_requests_and_the_rest_get_the_default() {
    let s = start(&["/health body=ok", "/api/* body=api"], &["-b", "default"]);
    for (path, want) in [
        ("/health", "ok"),
        ("/health?probe=1", "ok"),
        ("/health/deep", "default"),
        ("/healthz", "default"),
        ("/api/", "api"),
        ("/api/users/7", "api"),
        ("/api", "default"),
        ("/other", "default"),
    ] {
        assert_eq!(body_of(&s, path), want, "GET {path}");
    }
}

#[test]
fn a_get_route_answers_head_too_but_a_post_falls_through() {
    let s = start(&["GET /only body=get-only"], &["-b", "default"]);
    assert_eq!(body_of(&s, "/only"), "get-only");
    let head = fetch(&s, "HEAD", "/only");
    assert_eq!(head.header("content-length").as_deref(), Some("8"));
    assert_eq!(fetch(&s, "POST", "/only").body, b"default");
    assert_eq!(fetch(&s, "DELETE", "/only").body, b"default");
}

#[test]
fn listed_methods_are_answered_and_others_fall_through() {
    let s = start(&["POST,PUT /write status=201"], &["-s", "418"]);
    assert_eq!(fetch(&s, "POST", "/write").status, 201);
    assert_eq!(fetch(&s, "PUT", "/write").status, 201);
    assert_eq!(fetch(&s, "GET", "/write").status, 418);
}

#[test]
fn unmatched_requests_are_served_from_the_root_site() {
    let dir = scratch_dir("routes", "root");
    std::fs::write(dir.join("index.html"), "<h1>site index</h1>").unwrap();
    let root = dir.to_str().unwrap();
    let s = start(&["/api/* body=from-route"], &["--root", root]);
    assert_eq!(body_of(&s, "/"), "<h1>site index</h1>");
    assert_eq!(body_of(&s, "/index.html"), "<h1>site index</h1>");
    assert_eq!(body_of(&s, "/api/x"), "from-route");
    assert_eq!(fetch(&s, "GET", "/missing").status, 404);
}

#[test]
fn the_first_matching_route_wins() {
    let s = start(
        &[
            "/api/special body=special",
            "/api/* body=any-api",
            "/api/special body=never",
            "* body=everything",
        ],
        &["-b", "default"],
    );
    assert_eq!(body_of(&s, "/api/special"), "special");
    assert_eq!(body_of(&s, "/api/other"), "any-api");
    assert_eq!(body_of(&s, "/elsewhere"), "everything");
}

#[test]
fn routes_file_comes_after_the_route_flags_and_takes_toml_values() {
    let toml = b"[[route]]\npath = \"/a\"\nbody = \"from the file\"\n\n\
        [[route]]\npath = \"/b\"\nmethods = [\"GET\"]\nbody = \"b from the file\"\n\
        header = [\"X-One: 1\", \"X-Two: two words\"]\n";
    let path = file("file-order", "routes.toml", toml);
    let s = start(
        &["/a body=from-the-flag"],
        &["--routes", &path, "-b", "default"],
    );
    assert_eq!(body_of(&s, "/a"), "from-the-flag");
    let b = fetch(&s, "GET", "/b");
    assert_eq!(b.body, b"b from the file");
    assert_eq!(b.header("x-one").as_deref(), Some("1"));
    assert_eq!(b.header("x-two").as_deref(), Some("two words"));
    assert_eq!(body_of(&s, "/c"), "default");
}

// ---- Bodies and headers ----

#[test]
fn size_64k_sends_exactly_65536_printable_bytes_with_their_length() {
    let s = start(&["/big size=64k"], &[]);
    let r = fetch(&s, "GET", "/big");
    assert_eq!(r.header("content-length").as_deref(), Some("65536"));
    assert_eq!(r.body.len(), 65536);
    assert!(
        r.body
            .iter()
            .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\n'),
        "generated bytes are not printable"
    );
}

#[test]
fn header_keys_add_their_fields_to_the_response() {
    let s = start(
        &["/h body=x header=Cache-Control:no-store header=X-Route:yes status=202"],
        &["-H", "X-Default: d"],
    );
    let r = fetch(&s, "GET", "/h");
    assert_eq!(r.status, 202);
    assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
    assert_eq!(r.header("x-route").as_deref(), Some("yes"));
    assert_eq!(r.body, b"x");
}

#[test]
fn a_routes_header_replaces_the_same_named_default_one() {
    let s = start(
        &["/p header=Content-Type:application/json body={}"],
        &["-H", "Content-Type: text/plain", "-H", "X-Default: d"],
    );
    let r = fetch(&s, "GET", "/p");
    let types: Vec<_> = (r.head.lines())
        .filter(|l| l.to_ascii_lowercase().starts_with("content-type:"))
        .collect();
    assert_eq!(types, ["Content-Type: application/json"], "{}", r.head);
    assert_eq!(r.header("x-default").as_deref(), Some("d"));
    let other = fetch(&s, "GET", "/other");
    assert_eq!(other.header("content-type").as_deref(), Some("text/plain"));
}

#[test]
fn body_from_a_file_is_sent_byte_for_byte() {
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let path = file("body-file", "payload.bin", &bytes);
    let spec = format!("/file body=@{path}");
    let s = start(&[&spec], &[]);
    let r = fetch(&s, "GET", "/file");
    assert_eq!(r.header("content-length").as_deref(), Some("3000"));
    assert!(r.body == bytes, "the file's bytes differ");
}

#[test]
fn head_to_a_sized_route_gets_the_length_and_no_body() {
    let s = start(&["/big size=64k"], &[]);
    let mut r = Reader::new(s.connect());
    r.send(b"HEAD /big HTTP/1.1\r\nHost: t\r\n\r\n");
    let head = r.response(true);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length").as_deref(), Some("65536"));
    assert!(
        r.quiet_for(Duration::from_millis(200)),
        "HEAD got body bytes"
    );
    r.send(&get("/big"));
    assert_eq!(r.response(false).body.len(), 65536);
}

// ---- Status mix ----

#[test]
fn status_503_at_10_percent_holds_over_4000_requests() {
    let s = start(&["/mix status=503:10%"], &[]);
    let got = statuses(&s, "/mix", 4000);
    let failed = got.iter().filter(|&&c| c == 503).count();
    assert!(got.iter().all(|&c| c == 200 || c == 503), "other statuses");
    // Binomial(4000, 0.1): mean 400, sigma 19; 5 sigma either side.
    assert!((305..=495).contains(&failed), "{failed} of 4000 were 503");
}

#[test]
fn a_status_without_a_percentage_is_the_base_of_the_mix() {
    let s = start(&["/gone status=404,503:20%"], &[]);
    let got = statuses(&s, "/gone", 500);
    let failed = got.iter().filter(|&&c| c == 503).count();
    assert!(got.iter().all(|&c| c == 404 || c == 503), "{got:?}");
    // Binomial(500, 0.2): mean 100, sigma 9.
    assert!((55..=145).contains(&failed), "{failed} of 500 were 503");
}

#[test]
fn a_mix_that_spells_out_the_base_share_is_the_mix_without_it() {
    let s = start(&["/spelled status=200:80%,503:20%"], &[]);
    let got = statuses(&s, "/spelled", 500);
    let failed = got.iter().filter(|&&c| c == 503).count();
    assert!(got.iter().all(|&c| c == 200 || c == 503), "{got:?}");
    // Binomial(500, 0.2): mean 100, sigma 9.
    assert!((55..=145).contains(&failed), "{failed} of 500 were 503");
    assert_refused(
        &["--route", "/x status=200:50%,503:10%"],
        "--route",
        "200:50% is the base status",
    );
}

// ---- Faults over HTTP/1.1 ----

#[test]
fn reset_fault_is_a_connection_reset_with_no_response() {
    let s = start(&["/r fault=reset"], &[]);
    let (got, err, _) = get_until_closed(&s, "/r");
    assert!(got.is_empty(), "bytes before the reset: {got:?}");
    let kind = err.map(|e| e.kind());
    assert_eq!(kind, Some(ErrorKind::ConnectionReset));
}

#[test]
fn close_fault_is_an_eof_with_no_response() {
    let s = start(&["/c fault=close"], &[]);
    let (got, err, _) = get_until_closed(&s, "/c");
    assert!(err.is_none(), "not a clean close: {err:?}");
    assert!(got.is_empty(), "bytes before the close: {got:?}");
}

#[test]
fn stall_fault_sends_nothing_until_the_idle_timeout_then_closes() {
    let s = start(&["/s fault=stall"], &["--idle-timeout", "1s"]);
    let (got, _, waited) = get_until_closed(&s, "/s");
    assert!(got.is_empty(), "bytes from a stalled answer: {got:?}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(2),
        "closed {waited:?} after the request (idle timeout 1 s)"
    );
}

#[test]
fn truncate_fault_sends_the_head_and_half_the_body_then_closes() {
    let s = start(&["/t size=10000 fault=truncate"], &[]);
    let (got, err, _) = get_until_closed(&s, "/t");
    assert!(err.is_none(), "{err:?}");
    let end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-length: 10000"), "{head}");
    assert_eq!(got.len() - end, 5000, "body bytes before the close");
}

#[test]
fn a_fault_comes_after_the_routes_delay() {
    let s = start(&["/late delay=300ms fault=close"], &[]);
    let (got, _, waited) = get_until_closed(&s, "/late");
    assert!(got.is_empty());
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(2),
        "closed {waited:?} after the request (delay 300 ms)"
    );
}

#[test]
fn a_fault_fraction_leaves_the_other_answers_whole() {
    // Half the connections are closed unanswered; the others get the body.
    let s = start(&["/half fault=close:50% body=whole"], &["--seed", "3"]);
    let mut answered = 0;
    for _ in 0..60 {
        let mut c = s.connect();
        c.write_all(b"GET /half HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (got, err) = read_all(&mut c);
        assert!(err.is_none(), "{err:?}");
        if !got.is_empty() {
            assert!(got.ends_with(b"\r\n\r\nwhole"), "{got:?}");
            answered += 1;
        }
    }
    assert!((10..=50).contains(&answered), "{answered} of 60 answered");
}

// ---- Delays and pacing over HTTP/1.1 ----

#[test]
fn delay_50ms_holds_each_response_about_50ms() {
    let s = start(&["/d delay=50ms body=late"], &[]);
    let mut c = s.connect();
    for _ in 0..5 {
        let t = timed_get(&mut c, "/d");
        assert_eq!(t.body, b"late");
        assert!(
            t.done >= Duration::from_millis(50) && t.done < Duration::from_millis(150),
            "answered after {:?} (delay 50 ms)",
            t.done
        );
    }
}

/// The times `n` GETs for `path` took, one after another on one connection.
fn waits(s: &Server, path: &str, n: usize) -> Vec<Duration> {
    let mut c = s.connect();
    let mut waits: Vec<Duration> = (0..n).map(|_| timed_get(&mut c, path).done).collect();
    waits.sort();
    waits
}

#[test]
fn uniform_delay_stays_within_its_bounds_and_spreads() {
    let s = start(&["/u delay=uniform:20ms:60ms"], &[]);
    let w = waits(&s, "/u", 20);
    assert!(w[0] >= Duration::from_millis(20), "{w:?}");
    assert!(w[19] < Duration::from_millis(150), "{w:?}");
    // 20 draws all in one half of the range would be a 1 in 500 000 chance.
    assert!(
        w[0] < Duration::from_millis(40) && w[19] > Duration::from_millis(40),
        "not spread over 20..60 ms: {w:?}"
    );
}

#[test]
fn percentile_delay_stays_under_its_maximum_and_spreads() {
    let s = start(&["/p delay=pct:50=5ms,90=20ms,100=40ms"], &[]);
    let w = waits(&s, "/p", 40);
    assert!(
        w[39] < Duration::from_millis(100),
        "over the 40 ms maximum: {w:?}"
    );
    // Half the draws are at most 5 ms, a tenth over 20 ms: 40 draws with none on one side of
    // 12 ms would be a one in a billion chance.
    assert!(
        w[0] < Duration::from_millis(12) && w[39] > Duration::from_millis(12),
        "{w:?}"
    );
}

#[test]
fn lognormal_delay_has_its_median_near_p50() {
    let s = start(&["/l delay=lognormal:10ms:80ms"], &[]);
    let w = waits(&s, "/l", 41);
    // The median of 41 draws is within a factor of two of 10 ms by over four standard errors.
    assert!(
        w[20] >= Duration::from_millis(5) && w[20] < Duration::from_millis(30),
        "median {:?} of {w:?}",
        w[20]
    );
}

#[test]
fn body_delay_sends_the_head_well_before_the_body() {
    let s = start(&["/b body=hello body-delay=300ms"], &[]);
    let t = timed_get(&mut s.connect(), "/b");
    assert_eq!(t.body, b"hello");
    assert!(
        t.head < Duration::from_millis(150),
        "head after {:?}",
        t.head
    );
    assert!(
        t.done - t.head >= Duration::from_millis(250),
        "body {:?} after the head (body delay 300 ms)",
        t.done - t.head
    );
}

#[test]
fn pipelined_slow_and_fast_requests_are_answered_in_order() {
    let s = start(&["/slow delay=100ms body=slow", "/fast body=fast"], &[]);
    let mut r = Reader::new(s.connect());
    let mut batch = get("/slow");
    batch.extend_from_slice(&get("/fast"));
    batch.extend_from_slice(&get("/slow"));
    batch.extend_from_slice(&get("/fast"));
    let sent = Instant::now();
    r.send(&batch);
    for want in ["slow", "fast", "slow", "fast"] {
        assert_eq!(r.response(false).body, want.as_bytes());
    }
    assert!(sent.elapsed() >= Duration::from_millis(200));
}

#[test]
fn rate_10k_paces_a_20k_body_over_about_two_seconds() {
    let s = start(&["/paced size=20k rate=10k"], &[]);
    let t = timed_get(&mut s.connect(), "/paced");
    assert_eq!(t.body.len(), 20 * 1024);
    assert!(
        t.head < Duration::from_millis(500),
        "head after {:?}",
        t.head
    );
    assert!(
        t.done >= Duration::from_millis(1500) && t.done < Duration::from_secs(3),
        "20 KiB at 10 KiB/s took {:?}",
        t.done
    );
}

// ---- Seeds ----

/// The statuses of 200 requests on one connection to one worker seeded with `seed`.
fn seeded_statuses(seed: &str) -> Vec<u16> {
    let s = start(&["/coin status=503:50%"], &["--seed", seed, "-t", "1"]);
    statuses(&s, "/coin", 200)
}

#[test]
fn the_same_seed_repeats_the_statuses_and_another_seed_does_not() {
    let first = seeded_statuses("7");
    assert!(first.contains(&200) && first.contains(&503), "{first:?}");
    assert_eq!(first, seeded_statuses("7"), "seed 7 twice");
    assert_ne!(first, seeded_statuses("8"), "seeds 7 and 8");
}

// ---- Start-up errors ----

/// Runs statico with `args` on a port another socket holds, expecting a flag error: exit 2 (a
/// parse error, before binding the port; binding first would fail with exit 1), one error line
/// naming `flag` and `bad`.
fn assert_refused(args: &[&str], flag: &str, bad: &str) {
    let line = statico_tests::refused_in_one_line(args);
    assert!(
        line.contains(flag) && line.contains(bad),
        "{args:?} should name {flag} and {bad:?}: {line}"
    );
}

#[test]
fn bad_route_flags_exit_2_naming_the_flag_and_the_bad_part() {
    for (spec, bad) in [
        ("/x colour=red", "colour"),
        ("/x delay=10parsecs", "10parsecs"),
        ("/x delay=lognormal:80ms:10ms", "lognormal:80ms:10ms"),
        ("/x delay=normal:10ms:-2ms", "-2ms"),
        ("/x delay=pct:90=5ms,50=20ms", "pct:90=5ms,50=20ms"),
        ("/x status=503:60%,429:50%", "110%"),
        ("/x fault=reset:80%,close:30%", "110%"),
        (
            "/x body=@/nonexistent/statico-body",
            "/nonexistent/statico-body",
        ),
        ("x/ body=a", "x/"),
    ] {
        assert_refused(&["--route", spec], "--route", bad);
    }
}

#[test]
fn bad_routes_files_exit_2_naming_the_file_and_line() {
    let bad_value = file(
        "bad-value",
        "bad.toml",
        b"[[route]]\npath = \"/a\"\n\n[[route]]\npath = \"/b\"\ndelay = \"lognormal:80ms:10ms\"\n",
    );
    assert_refused(
        &["--routes", &bad_value],
        "--routes",
        &format!("{bad_value}:6"),
    );
    assert_refused(&["--routes", &bad_value], "--routes", "lognormal:80ms:10ms");
    let unknown = file(
        "unknown-key",
        "unknown.toml",
        b"[[route]]\npath = \"/a\"\ncolour = \"red\"\n",
    );
    assert_refused(&["--routes", &unknown], "--routes", &format!("{unknown}:3"));
    assert_refused(&["--routes", &unknown], "--routes", "colour");
    // Refused when the route is built, after the file is read: still the file and line.
    let openai = file(
        "openai-exact",
        "openai.toml",
        b"[[route]]\npath = \"/a\"\n\n[[route]]\npath = \"/v1\"\nopenai = \"on\"\n",
    );
    let line = statico_tests::refused_in_one_line(&["--routes", &openai]);
    assert!(
        line.contains(&format!("{openai}:4: openai=on needs a path ending in /*")),
        "{line}"
    );
    assert!(!line.contains("--route "), "{line}");
    assert_refused(
        &["--routes", "/nonexistent/routes.toml"],
        "--routes",
        "/nonexistent/routes.toml",
    );
}

// ---- HTTP/2 ----

/// statico with `routes` over cleartext HTTP/2.
fn start_h2(routes: &[&str], extra: &[&str]) -> Server {
    start(routes, &[&["--http2"], extra].concat())
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What an HTTP/2 stream gave: the status if a head came, the body bytes, the error it ended with.
struct H2Outcome {
    status: Option<u16>,
    body: Vec<u8>,
    error: Option<h2::Error>,
    headers: http::HeaderMap,
}

/// An HTTP/2 client connected by prior knowledge, its connection driven by a task.
async fn h2_connect(addr: SocketAddr) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    client.ready().await.unwrap()
}

/// A GET for `path` on `client`'s connection, read to its end or its error.
async fn h2_get(client: &h2::client::SendRequest<bytes::Bytes>, path: &str) -> H2Outcome {
    let req = http::Request::get(format!("http://t{path}"))
        .body(())
        .unwrap();
    let mut client = client.clone().ready().await.unwrap();
    let (resp, _) = client.send_request(req, true).unwrap();
    let mut out = H2Outcome {
        status: None,
        body: Vec::new(),
        error: None,
        headers: http::HeaderMap::new(),
    };
    let resp = match tokio::time::timeout(WAIT, resp).await.expect("an answer") {
        Ok(resp) => resp,
        Err(e) => {
            out.error = Some(e);
            return out;
        }
    };
    out.status = Some(resp.status().as_u16());
    out.headers = resp.headers().clone();
    let mut body = resp.into_body();
    while let Some(chunk) = tokio::time::timeout(WAIT, body.data()).await.expect("data") {
        match chunk {
            Ok(chunk) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                out.body.extend_from_slice(&chunk);
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out
}

/// One GET for `path` on a fresh HTTP/2 connection to `s`.
fn h2_once(s: &Server, path: &str) -> (H2Outcome, Duration) {
    let addr = s.addr;
    tokio_rt().block_on(async move {
        let client = h2_connect(addr).await;
        let start = Instant::now();
        let out = h2_get(&client, path).await;
        (out, start.elapsed())
    })
}

#[test]
fn http2_routes_match_and_carry_their_size_and_headers() {
    let s = start_h2(
        &["GET /big size=64k header=X-Route:big"],
        &["-b", "default"],
    );
    let (big, _) = h2_once(&s, "/big");
    assert_eq!(big.status, Some(200));
    assert_eq!(big.body.len(), 65536);
    assert_eq!(big.headers.get("x-route").unwrap(), "big");
    assert_eq!(big.headers.get("content-length").unwrap(), "65536");
    let (other, _) = h2_once(&s, "/other");
    assert_eq!(other.body, b"default");
}

#[test]
fn http2_a_routes_header_replaces_the_same_named_default_one() {
    let s = start_h2(
        &["/p header=Content-Type:application/json body={}"],
        &["-H", "Content-Type: text/plain"],
    );
    let (p, _) = h2_once(&s, "/p");
    let types: Vec<_> = p.headers.get_all("content-type").iter().collect();
    assert_eq!(types, ["application/json"]);
}

#[test]
fn http2_reset_fault_resets_the_stream_with_internal_error() {
    let s = start_h2(&["/r fault=reset", "/ok body=ok"], &[]);
    let addr = s.addr;
    tokio_rt().block_on(async move {
        let client = h2_connect(addr).await;
        let out = h2_get(&client, "/r").await;
        let err = out.error.expect("a reset stream");
        assert_eq!(err.reason(), Some(h2::Reason::INTERNAL_ERROR), "{err}");
        assert!(err.is_reset(), "{err}");
        // Only the stream: the connection still answers.
        assert_eq!(h2_get(&client, "/ok").await.body, b"ok");
    });
}

#[test]
fn http2_truncate_fault_resets_the_stream_after_half_the_body() {
    let s = start_h2(&["/t size=10000 fault=truncate"], &[]);
    let (out, _) = h2_once(&s, "/t");
    assert_eq!(out.status, Some(200), "{:?}", out.error);
    assert_eq!(out.headers.get("content-length").unwrap(), "10000");
    assert_eq!(out.body.len(), 5000, "body bytes before the reset");
    let err = out.error.expect("the stream is reset mid-body");
    assert!(err.is_reset(), "{err}");
}

#[test]
fn http2_close_fault_ends_the_connection_with_goaway() {
    let s = start_h2(&["/c fault=close"], &[]);
    let (out, _) = h2_once(&s, "/c");
    assert_eq!(out.status, None, "a head came");
    let err = out.error.expect("the stream fails");
    assert!(err.is_go_away() || err.is_io(), "{err}");
}

#[test]
fn http2_stall_fault_resets_the_stream_after_the_idle_timeout() {
    let s = start_h2(&["/s fault=stall"], &["--idle-timeout", "1s"]);
    let (out, waited) = h2_once(&s, "/s");
    assert_eq!(out.status, None, "a head came");
    let err = out.error.expect("the stream is reset");
    assert!(err.is_reset(), "{err}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "reset {waited:?} after the request (idle timeout 1 s)"
    );
}

#[test]
fn http2_fast_stream_finishes_before_an_earlier_slow_one() {
    let s = start_h2(&["/slow delay=300ms body=slow", "/fast body=fast"], &[]);
    let addr = s.addr;
    tokio_rt().block_on(async move {
        let client = h2_connect(addr).await;
        let start = Instant::now();
        let slow = {
            let client = client.clone();
            tokio::spawn(async move { (h2_get(&client, "/slow").await.body, start.elapsed()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let fast = h2_get(&client, "/fast").await;
        let fast_done = start.elapsed();
        let (slow_body, slow_done) = slow.await.unwrap();
        assert_eq!(
            (fast.body.as_slice(), slow_body.as_slice()),
            (&b"fast"[..], &b"slow"[..])
        );
        assert!(
            fast_done < Duration::from_millis(200),
            "fast took {fast_done:?}"
        );
        assert!(
            slow_done >= Duration::from_millis(300),
            "slow took {slow_done:?}"
        );
    });
}

#[test]
fn http2_body_delay_and_rate_are_kept_per_stream() {
    let s = start_h2(
        &["/paced size=20k rate=10k", "/b body=hi body-delay=300ms"],
        &[],
    );
    let (paced, took) = h2_once(&s, "/paced");
    assert_eq!(paced.body.len(), 20 * 1024);
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(3),
        "20 KiB at 10 KiB/s took {took:?}"
    );
    let (delayed, took) = h2_once(&s, "/b");
    assert_eq!(delayed.body, b"hi");
    assert!(took >= Duration::from_millis(290), "body after {took:?}");
}

#[test]
fn http2_ground_truth_counts_each_stream_once() {
    let s = start_h2(&["/plain", "/d delay=20ms"], &["--metrics", "127.0.0.1:0"]);
    let addr = s.addr;
    tokio_rt().block_on(async move {
        let client = h2_connect(addr).await;
        for path in ["/plain", "/plain", "/d"] {
            assert_eq!(h2_get(&client, path).await.status, Some(200));
        }
    });
    let json = s.scrape("/ground-truth.json");
    assert_eq!(number(route_truth(&json, "/plain"), "count"), 2.0, "{json}");
    let d = route_truth(&json, "/d");
    assert_eq!(number(d, "count"), 1.0, "{json}");
    assert!(number_in(d, "held_us", "max") >= 20_000.0, "{d}");
}

#[test]
fn http2_echo_query_answers_from_the_query() {
    let s = start_h2(&[], &["--echo-query"]);
    let (out, _) = h2_once(&s, "/x?status=418&size=1024&header=X-A:b");
    assert_eq!(out.status, Some(418));
    assert_eq!(out.body.len(), 1024);
    assert_eq!(out.headers.get("x-a").unwrap(), "b");
}

// ---- Ground truth on --metrics ----

/// The object of route `name` in `/ground-truth.json`, as text.
fn route_truth<'a>(json: &'a str, name: &str) -> &'a str {
    let start = json
        .find(&format!("{{\"route\":\"{name}\""))
        .unwrap_or_else(|| panic!("no route {name} in {json}"));
    let rest = &json[start + 1..];
    &json[start..start + 1 + rest.find("{\"route\":").unwrap_or(rest.len())]
}

/// The number after `"key":` in `json` (the first one).
fn number(json: &str, key: &str) -> f64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[at + key.len() + 3..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().unwrap()
}

/// The number after `"key":` inside the object `"object":{…}` of `json`.
fn number_in(json: &str, object: &str, key: &str) -> f64 {
    let at = json
        .find(&format!("\"{object}\":{{"))
        .unwrap_or_else(|| panic!("no {object} in {json}"));
    let inner = &json[at..];
    number(&inner[..inner.find('}').unwrap()], key)
}

#[test]
fn ground_truth_json_counts_the_statuses_the_client_saw() {
    let s = start(&["/mix status=503:20%"], &["--metrics", "127.0.0.1:0"]);
    let got = statuses(&s, "/mix", 500);
    let failed = got.iter().filter(|&&c| c == 503).count() as f64;
    let json = s.scrape("/ground-truth.json");
    let mix = route_truth(&json, "/mix");
    assert_eq!(number(mix, "count"), 500.0, "{mix}");
    assert_eq!(number_in(mix, "outcomes", "503"), failed, "{mix}");
    assert_eq!(number_in(mix, "outcomes", "200"), 500.0 - failed, "{mix}");
}

#[test]
fn ground_truth_json_counts_faults_and_the_delays_drawn_and_held() {
    let s = start(
        &["/gone fault=reset", "/d delay=20ms"],
        &["--metrics", "127.0.0.1:0"],
    );
    for _ in 0..3 {
        let (_, err, _) = get_until_closed(&s, "/gone");
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionReset));
    }
    let mut c = s.connect();
    for _ in 0..10 {
        timed_get(&mut c, "/d");
    }
    let json = s.scrape("/ground-truth.json");
    let gone = route_truth(&json, "/gone");
    assert_eq!(number_in(gone, "outcomes", "reset"), 3.0, "{gone}");
    let d = route_truth(&json, "/d");
    assert_eq!(number(d, "count"), 10.0, "{d}");
    assert_eq!(number_in(d, "held_us", "count"), 10.0, "{d}");
    let drawn = number_in(d, "drawn_us", "p50");
    assert!(
        (19_000.0..=21_000.0).contains(&drawn),
        "drawn p50 {drawn} µs: {d}"
    );
    let held = number_in(d, "held_us", "p50");
    assert!(
        (20_000.0..=40_000.0).contains(&held),
        "held p50 {held} µs: {d}"
    );
}

#[test]
fn ground_truth_counts_an_unheld_route_once_next_to_a_delayed_one() {
    // A delay on any route makes HTTP/1.1 hold every answer; the others must still count once.
    let s = start(&["/plain", "/d delay=20ms"], &["--metrics", "127.0.0.1:0"]);
    let got = statuses(&s, "/plain", 10);
    assert!(got.iter().all(|&c| c == 200));
    let json = s.scrape("/ground-truth.json");
    let plain = route_truth(&json, "/plain");
    assert_eq!(number(plain, "count"), 10.0, "10 requests: {plain}");
}

#[test]
fn prometheus_route_counters_match_the_client() {
    let s = start(&["/mix status=503:20%"], &["--metrics", "127.0.0.1:0"]);
    let got = statuses(&s, "/mix", 300);
    let failed = got.iter().filter(|&&c| c == 503).count();
    let page = s.scrape("/metrics");
    for (outcome, n) in [("503", failed), ("200", 300 - failed)] {
        let line =
            format!("statico_route_requests_total{{route=\"/mix\",outcome=\"{outcome}\"}} {n}");
        assert!(page.lines().any(|l| l == line), "no {line:?} in\n{page}");
    }
}

// ---- --echo-query ----

#[test]
fn echo_query_answers_status_size_and_header_from_the_query() {
    let s = start(&[], &["--echo-query", "-b", "default"]);
    let r = fetch(&s, "GET", "/any/path?status=418&size=1024&header=X-A:b");
    assert_eq!(r.status, 418);
    assert_eq!(r.body.len(), 1024);
    assert_eq!(r.header("content-length").as_deref(), Some("1024"));
    assert_eq!(r.header("x-a").as_deref(), Some("b"));
    assert_eq!(body_of(&s, "/no-query"), "default");
}

#[test]
fn echo_query_status_percentages_hold_over_2000_requests() {
    let s = start(&[], &["--echo-query"]);
    let got = statuses(&s, "/?status=503:10", 2000);
    let failed = got.iter().filter(|&&c| c == 503).count();
    assert!(got.iter().all(|&c| c == 200 || c == 503), "other statuses");
    // Binomial(2000, 0.1): mean 200, sigma 13.4; 5 sigma either side.
    assert!((133..=267).contains(&failed), "{failed} of 2000 were 503");
}

#[test]
fn echo_query_delay_and_close() {
    let s = start(&[], &["--echo-query"]);
    let t = timed_get(&mut s.connect(), "/?delay=100ms");
    assert!(
        t.done >= Duration::from_millis(100) && t.done < Duration::from_millis(300),
        "answered after {:?}",
        t.done
    );
    let mut r = Reader::new(s.connect());
    r.send(&get("/?close=true"));
    assert_eq!(r.response(false).status, 200);
    assert!(r.until_closed().is_empty(), "open after close=true");
}

#[test]
fn echo_query_past_the_limits_gets_400_naming_the_argument() {
    let s = start(
        &[],
        &["--echo-query", "--max-delay", "1s", "--max-size", "4k"],
    );
    for (query, name) in [
        ("/?delay=5s", "delay"),
        ("/?size=8192", "size"),
        ("/?status=abc", "status"),
    ] {
        let r = fetch(&s, "GET", query);
        assert_eq!(r.status, 400, "{query}");
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.contains(name), "{query}: {body}");
    }
}

#[test]
fn without_echo_query_the_query_is_not_obeyed() {
    let s = start(&[], &["-b", "plain"]);
    let r = fetch(&s, "GET", "/?status=503&size=1024");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"plain"[..]));
}

// ---- HTTP/3 ----

#[cfg(target_os = "linux")]
mod http3 {
    //! The faults and routes over HTTP/3, with the quinn + h3 client of `http3.rs`.

    use std::time::{Duration, Instant};

    use bytes::Buf;
    use h3::error::StreamError;

    use super::args;
    use crate::http3::{connect, runtime, scratch, start};

    /// What an HTTP/3 request gave: the status if a head came, the body, the error it ended with.
    struct H3Outcome {
        status: Option<u16>,
        body: Vec<u8>,
        error: Option<StreamError>,
    }

    /// statico over HTTP/3 with `routes`; one GET for each of `paths` on one connection, in turn.
    fn h3_gets(
        name: &str,
        routes: &[&str],
        extra: &[&str],
        paths: &[&str],
    ) -> Vec<(H3Outcome, Duration)> {
        let dir = scratch(name);
        let s = start(&dir, &args(routes, extra));
        runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let mut outs = Vec::new();
            for path in paths {
                let started = Instant::now();
                let out = tokio::time::timeout(statico_tests::WAIT, get(&mut send, path))
                    .await
                    .expect("an answer or an error");
                outs.push((out, started.elapsed()));
            }
            // Closed now (and the close sent), the server stops at once rather than draining.
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            outs
        })
    }

    async fn get(
        send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>,
        path: &str,
    ) -> H3Outcome {
        let mut out = H3Outcome {
            status: None,
            body: Vec::new(),
            error: None,
        };
        let req = http::Request::get(format!("https://localhost{path}"))
            .body(())
            .unwrap();
        let mut stream = match send.send_request(req).await {
            Ok(stream) => stream,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        if let Err(e) = stream.finish().await {
            out.error = Some(e);
            return out;
        }
        match stream.recv_response().await {
            Ok(r) => out.status = Some(r.status().as_u16()),
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        }
        loop {
            match stream.recv_data().await {
                Ok(Some(mut chunk)) => out
                    .body
                    .extend_from_slice(&chunk.copy_to_bytes(chunk.remaining())),
                Ok(None) => return out,
                Err(e) => {
                    out.error = Some(e);
                    return out;
                }
            }
        }
    }

    /// Whether `e` is the server resetting the stream with `code`.
    fn reset_with(e: &Option<StreamError>, code: h3::error::Code) -> bool {
        matches!(e, Some(StreamError::RemoteTerminate { code: c, .. }) if *c == code)
    }

    /// Whether `e` is the server resetting the stream, with any code.
    fn reset(e: &Option<StreamError>) -> bool {
        matches!(e, Some(StreamError::RemoteTerminate { .. }))
    }

    #[test]
    fn http3_route_matches_and_sends_its_size() {
        let outs = h3_gets(
            "routes-size",
            &["/big size=64k"],
            &["-b", "default"],
            &["/big", "/x"],
        );
        assert_eq!(outs[0].0.status, Some(200));
        assert_eq!(outs[0].0.body.len(), 65536);
        assert_eq!(outs[1].0.body, b"default");
    }

    #[test]
    fn http3_reset_fault_resets_the_stream_and_the_connection_goes_on() {
        let outs = h3_gets(
            "routes-reset",
            &["/r fault=reset", "/ok body=ok"],
            &[],
            &["/r", "/ok"],
        );
        let (reset, _) = &outs[0];
        assert_eq!(reset.status, None);
        assert!(
            reset_with(&reset.error, h3::error::Code::H3_INTERNAL_ERROR),
            "{:?}",
            reset.error
        );
        assert_eq!(outs[1].0.body, b"ok");
    }

    #[test]
    fn http3_truncate_fault_resets_the_stream_after_the_head() {
        let outs = h3_gets(
            "routes-truncate",
            &["/t size=100k fault=truncate"],
            &[],
            &["/t"],
        );
        let (t, _) = &outs[0];
        assert_eq!(t.status, Some(200), "{:?}", t.error);
        // quinn drops the bytes it received but the client has not read when a stream is reset, so
        // how many of the 51 200 sent arrive depends on timing; never the whole body.
        assert!(t.body.len() < 100 * 1024, "{} body bytes", t.body.len());
        assert!(reset(&t.error), "{:?}", t.error);
    }

    #[test]
    fn http3_close_fault_closes_the_connection() {
        let outs = h3_gets("routes-close", &["/c fault=close"], &[], &["/c"]);
        let (c, _) = &outs[0];
        assert_eq!(c.status, None);
        assert!(
            matches!(c.error, Some(StreamError::ConnectionError { .. })),
            "{:?}",
            c.error
        );
    }

    #[test]
    fn http3_stall_fault_resets_the_stream_after_the_idle_timeout() {
        let outs = h3_gets(
            "routes-stall",
            &["/s fault=stall"],
            &["--idle-timeout", "1s"],
            &["/s"],
        );
        let (st, waited) = &outs[0];
        assert_eq!(st.status, None);
        // QUIC's own idle timeout is --idle-timeout too: the stream's reset or the connection's close,
        // whichever the client hears first, ends the stall.
        let closed = matches!(st.error, Some(StreamError::ConnectionError { .. }));
        assert!(reset(&st.error) || closed, "{:?}", st.error);
        assert!(
            *waited >= Duration::from_millis(900) && *waited < Duration::from_secs(3),
            "ended {waited:?} after the request (idle timeout 1 s)"
        );
    }
}
