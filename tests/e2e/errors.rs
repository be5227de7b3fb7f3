//! Bad input gets the right status, `Connection: close`, and a closed connection — never a hang.

use std::time::Duration;

use statico_tests::{Reader, Server};

/// Sends `request` and expects `status` with `Connection: close`, then the connection closed.
fn expect_error(s: &Server, request: &[u8], status: u16) {
    let mut r = Reader::new(s.connect());
    r.send(request);
    let resp = r.response(false);
    assert_eq!(
        resp.status,
        status,
        "for {:?}",
        String::from_utf8_lossy(&request[..request.len().min(80)])
    );
    assert_eq!(resp.header("connection").as_deref(), Some("close"));
    assert!(r.until_closed().is_empty(), "bytes after an error response");
}

#[test]
fn each_error_status_is_sent_then_the_connection_closes() {
    let s = Server::start(&["-b", "ok", "--max-body-size", "1k", "--max-head-size", "2k"]);
    // 400: missing Host, duplicate Content-Length, CL with TE, bad chunk size, bad header syntax.
    expect_error(&s, b"GET / HTTP/1.1\r\n\r\n", 400);
    expect_error(
        &s,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        400,
    );
    expect_error(
        &s,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        400,
    );
    expect_error(
        &s,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n",
        400,
    );
    expect_error(
        &s,
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n",
        400,
    );
    expect_error(&s, b"GET / HTTP/1.1\r\nHost t\r\n\r\n", 400);
    // 413: declared, and reached by chunks.
    expect_error(
        &s,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1025\r\n\r\n",
        413,
    );
    let mut chunked = b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"200\r\n");
        chunked.extend_from_slice(&[b'a'; 0x200]);
        chunked.extend_from_slice(b"\r\n");
    }
    expect_error(&s, &chunked, 413);
    // 431: a head over the limit.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "b".repeat(3000)
    );
    expect_error(&s, big.as_bytes(), 431);
    // 501: a transfer coding statico does not implement.
    expect_error(
        &s,
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        501,
    );
    // 505: another major version.
    expect_error(&s, b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505);
    let stopped = s.stop();
    assert_eq!(stopped.total("status_400"), 6);
    assert_eq!(stopped.total("status_413"), 2);
    assert_eq!(stopped.total("status_431"), 1);
    assert_eq!(stopped.total("status_501"), 1);
    assert_eq!(stopped.total("status_505"), 1);
}

#[test]
fn error_after_good_pipelined_requests_answers_them_first() {
    let s = Server::start(&["-b", "ok"]);
    let mut r = Reader::new(s.connect());
    let mut bytes = statico_tests::get("/1");
    bytes.extend_from_slice(&statico_tests::get("/2"));
    bytes.extend_from_slice(b"BROKEN\r\n\r\n");
    r.send(&bytes);
    assert_eq!(r.response(false).status, 200);
    assert_eq!(r.response(false).status, 200);
    assert_eq!(r.response(false).status, 400);
    assert!(r.until_closed().is_empty());
}

#[test]
fn endless_header_is_cut_at_the_limit_without_growing() {
    let s = Server::start(&["--max-head-size", "4k", "-t", "1"]);
    let before = statico_tests::rss_kib(s.pid());
    // 200 clients each send a header that never ends: up to 256 KiB each, 50 MiB in all, far more than
    // the growth allowed. The server must answer 431 once 4 KiB arrived and close (after a lingering
    // read that discards what follows), holding no more than the limit plus one read for any of them.
    let mut clients: Vec<Reader> = (0..200).map(|_| Reader::new(s.connect())).collect();
    let chunk = [b'a'; 16 * 1024];
    let mut peak = before;
    for r in &mut clients {
        // A server that stops reading must not stall the test: a full socket fails the write.
        r.stream
            .set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        r.send(b"GET / HTTP/1.1\r\nHost: t\r\nX-Endless: ");
        for _ in 0..16 {
            if std::io::Write::write_all(&mut r.stream, &chunk).is_err() {
                break; // the server closed: fine, its 431 is already in our receive buffer
            }
        }
        peak = peak.max(statico_tests::rss_kib(s.pid()));
    }
    statico_tests::assert_memory!(
        peak < before + 16 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for 200 endless heads"
    );
    for r in &mut clients {
        assert_eq!(r.response(false).status, 431);
        r.stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        r.until_closed();
    }
    let stopped = s.stop();
    assert_eq!(stopped.total("status_431"), 200);
}
