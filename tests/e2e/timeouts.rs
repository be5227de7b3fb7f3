//! Slow and silent clients are closed by the header and idle timeouts, never held forever — and never
//! before their time: each test bounds the close from below and above, and checks the `timeouts` count.

use std::time::{Duration, Instant};

use statico_tests::{get, Reader, Server};

/// Asserts that `waited` is at least `timeout` (less a little for timer granularity) and not much more.
fn assert_closed_at(waited: Duration, timeout: Duration, what: &str) {
    assert!(
        waited >= timeout.mul_f64(0.9),
        "{what}: closed too early, after {waited:?} (timeout {timeout:?})"
    );
    assert!(
        waited < timeout + Duration::from_millis(1500),
        "{what}: closed only after {waited:?} (timeout {timeout:?})"
    );
}

#[test]
fn idle_keep_alive_connection_is_closed_after_idle_timeout() {
    let s = Server::start(&["--idle-timeout", "1s"]);
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).status, 200);
    let start = Instant::now();
    assert!(r.until_closed().is_empty());
    assert_closed_at(
        start.elapsed(),
        Duration::from_secs(1),
        "idle after a response",
    );
    drop(r);
    assert_eq!(s.stop().total("timeouts"), 1);
}

#[test]
fn silent_connection_is_closed_after_idle_timeout() {
    let s = Server::start(&["--idle-timeout", "1s"]);
    let start = Instant::now();
    let mut r = Reader::new(s.connect());
    assert!(r.until_closed().is_empty());
    assert_closed_at(start.elapsed(), Duration::from_secs(1), "silent");
    assert_eq!(s.stop().total("timeouts"), 1);
}

#[test]
fn partial_head_is_closed_after_header_timeout() {
    let s = Server::start(&["--header-timeout", "1s", "--idle-timeout", "30s"]);
    let mut r = Reader::new(s.connect());
    r.send(b"GET / HTTP/1.1\r\nHost: t\r\n");
    let start = Instant::now();
    assert!(r.until_closed().is_empty());
    assert_closed_at(start.elapsed(), Duration::from_secs(1), "partial head");
    assert_eq!(s.stop().total("timeouts"), 1);
}

#[test]
fn slowloris_trickle_does_not_extend_the_header_timeout() {
    let s = Server::start(&["--header-timeout", "1s", "--idle-timeout", "30s"]);
    let mut r = Reader::new(s.connect());
    let start = Instant::now();
    // One header byte every 200 ms: progress, but the head never completes within the timeout.
    let mut closed = false;
    for b in b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if std::io::Write::write_all(&mut r.stream, &[*b]).is_err() || !r.quiet_for(Duration::from_millis(200)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "still open after {:?}", start.elapsed());
    // The close is seen at the next 200 ms probe.
    assert_closed_at(start.elapsed(), Duration::from_secs(1), "trickled head");
    assert_eq!(s.stop().total("timeouts"), 1);
}

#[test]
fn stalled_body_is_closed_after_header_timeout() {
    let s = Server::start(&["--header-timeout", "1s", "--idle-timeout", "30s"]);
    let mut r = Reader::new(s.connect());
    r.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly part");
    let start = Instant::now();
    assert!(r.until_closed().is_empty());
    assert_closed_at(start.elapsed(), Duration::from_secs(1), "stalled body");
    assert_eq!(s.stop().total("timeouts"), 1);
}
