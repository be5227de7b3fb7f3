//! Hostile HTTP/1.1 clients, on the runtime under test: one that pipelines and never reads, one that
//! trickles a head a byte at a time (with and without `-d`), one that sends its body right behind
//! `Expect: 100-continue` (with `-d`), ones that send garbage after a good request or reset mid-request.
//! Each ends in an answer or a close, the server's memory is read from /proc/PID/status, timeouts are
//! checked from both sides (not before, not much after), and the counters must balance at the end.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use statico_tests::{get, rss_kib, Reader, Server};

/// Whether the server has closed the connection, probed without reading what it sent: a zero-length
/// peek says nothing, but once the server closed with our requests unread it sent a reset, and a
/// write then fails; while it is open, the full socket just would block.
fn closed_by_server(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let closed = match (&*s).write(b"G") {
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    s.set_nonblocking(false).unwrap();
    closed
}

/// Pipelines GETs without reading until the writes stop moving for `stall`; returns when they last
/// moved, and the server's peak RSS meanwhile.
fn pipeline_until_stalled(s: &mut TcpStream, pid: u32, stall: Duration) -> (Instant, u64) {
    let batch = get("/").repeat(64 * 1024 / get("/").len());
    s.set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let start = Instant::now();
    let (mut last_progress, mut peak) = (Instant::now(), 0);
    while last_progress.elapsed() < stall && start.elapsed() < Duration::from_secs(8) {
        match s.write(&batch) {
            Ok(n) if n > 0 => last_progress = Instant::now(),
            _ => {}
        }
        peak = peak.max(rss_kib(pid));
    }
    assert!(
        last_progress.elapsed() >= stall,
        "the server kept reading for 8 s"
    );
    (last_progress, peak)
}

fn never_reading_client_is_bounded_then_closed(extra: &[&str]) {
    let body = "x".repeat(64 * 1024); // a large body fills the kernel's socket buffers at once
    let args = [&["--idle-timeout", "2s", "-t", "1", "-b", &body], extra].concat();
    let s = Server::start(&args);
    let before = rss_kib(s.pid());
    let mut c = s.connect();
    let (stalled_at, peak) = pipeline_until_stalled(&mut c, s.pid(), Duration::from_millis(500));
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one client that does not read"
    );
    // Not before the idle timeout (2 s without progress)...
    while stalled_at.elapsed() < Duration::from_millis(1500) {
        assert!(
            !closed_by_server(&c),
            "closed after {:?}",
            stalled_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // ...and not much after.
    while !closed_by_server(&c) {
        assert!(
            stalled_at.elapsed() < Duration::from_secs(5),
            "still open {:?} after the output stalled",
            stalled_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = rss_kib(s.pid());
    statico_tests::assert_memory!(
        after < before + 64 * 1024,
        "RSS {after} KiB after the close"
    );
    let stopped = s.stop();
    assert_eq!(stopped.total("timeouts"), 1);
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

#[test]
fn a_client_that_never_reads_holds_bounded_memory_and_is_closed_after_the_idle_timeout() {
    never_reading_client_is_bounded_then_closed(&[]);
}

#[test]
fn a_client_that_never_reads_paced_responses_is_bounded_and_closed_too() {
    never_reading_client_is_bounded_then_closed(&["-d", "1ms"]);
}

/// Sends a head that never completes, one byte every 100 ms, until the server closes; returns how
/// long after the first byte that was, or `None` if it was still open after `give_up`.
fn trickle_until_closed(s: &Server, give_up: Duration) -> Option<Duration> {
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let head = b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: "
        .iter()
        .chain([b'a'; 200].iter());
    let start = Instant::now();
    for b in head {
        if start.elapsed() > give_up {
            return None;
        }
        if c.write_all(&[*b]).is_err() {
            break;
        }
        let mut buf = [0u8; 64];
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => panic!("answered a partial head: {:?}", &buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
    Some(start.elapsed())
}

#[test]
fn a_trickled_head_is_closed_at_the_header_timeout_with_and_without_delay() {
    for extra in [&[][..], &["-d", "50ms"][..]] {
        let args = [&["--header-timeout", "1s", "--idle-timeout", "30s"], extra].concat();
        let s = Server::start(&args);
        let after = trickle_until_closed(&s, Duration::from_secs(3)).unwrap_or_else(|| {
            panic!("{extra:?}: still open 3 s after the first byte (--header-timeout 1s)")
        });
        assert!(
            after >= Duration::from_millis(900) && after < Duration::from_millis(2000),
            "{extra:?}: closed {after:?} after the first byte"
        );
        assert_eq!(s.stop().total("timeouts"), 1, "{extra:?}");
    }
}

const CONTINUE_HEAD: &[u8] =
    b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";

#[test]
fn a_body_sent_right_behind_expect_100_continue_is_answered_with_delay() {
    for extra in [&[][..], &["-d", "100ms"][..]] {
        let s = Server::start(&[&["-b", "ok"], extra].concat());
        // The body in the same write as the head, and in a write of its own right after it.
        for same_write in [true, false] {
            let mut r = Reader::new(s.connect());
            let start = Instant::now();
            if same_write {
                r.send(&[CONTINUE_HEAD, b"hello"].concat());
            } else {
                r.send(CONTINUE_HEAD);
                r.send(b"hello");
            }
            let mut first = r.response(false);
            if first.status == 100 {
                first = r.response(false);
            }
            assert_eq!(
                (first.status, &first.body[..]),
                (200, &b"ok"[..]),
                "{extra:?}, same write: {same_write}"
            );
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "{extra:?}, same write: {same_write}: answered after {:?}",
                start.elapsed()
            );
        }
    }
}

#[test]
fn a_polite_100_continue_client_gets_the_interim_then_the_answer_with_delay() {
    for extra in [&[][..], &["-d", "100ms"][..]] {
        let s = Server::start(&[&["-b", "ok"], extra].concat());
        let mut r = Reader::new(s.connect());
        let start = Instant::now();
        r.send(CONTINUE_HEAD);
        assert_eq!(r.response(false).status, 100, "{extra:?}");
        r.send(b"hello");
        let answer = r.response(false);
        assert_eq!(
            (answer.status, &answer.body[..]),
            (200, &b"ok"[..]),
            "{extra:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{extra:?}: answered after {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn clients_that_reset_mid_request_leave_nothing_behind() {
    // io_uring: the kernel does not always report a reset that follows data to a multishot receive;
    // such a connection goes at its header timeout, which is short here.
    let args = ["-t", "1", "-m", "--meter-format", "json"];
    let s = Server::start(&[&args[..], &["--header-timeout", "1s"]].concat());
    let before = rss_kib(s.pid());
    let partials: [&[u8]; 3] = [
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Half",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nsome of it",
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHo",
    ];
    for i in 0..1000 {
        let c = s.connect();
        (&c).write_all(partials[i % partials.len()]).unwrap();
        // SO_LINGER 0: close() sends a reset instead of a FIN.
        socket2::SockRef::from(&c)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(c);
    }
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).status, 200, "still serving");
    // With that one connection open, the meter must count exactly one: every reset one is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !last_meter_line(&s).contains("\"open_conns\":1,") {
        assert!(
            Instant::now() < deadline,
            "reset connections kept: {}",
            last_meter_line(&s)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = rss_kib(s.pid());
    statico_tests::assert_memory!(after < before + 8 * 1024, "RSS {before} KiB → {after} KiB");
    drop(r);
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), 1001);
    assert_eq!(stopped.total("conns_closed"), 1001);
}

#[test]
fn clients_that_reset_or_stay_silent_before_sending_are_bounded_and_the_counts_balance() {
    // The listener defers accepts until a request arrives: a client that resets before sending may
    // never reach `accept` (then it is not counted at all), one that stays silent reaches it after
    // the deferral and is then bounded by the idle timeout like any other.
    let s = Server::start(&["-t", "1", "--idle-timeout", "1s"]);
    for _ in 0..200 {
        let c = s.connect();
        // SO_LINGER 0: close() sends a reset instead of a FIN.
        socket2::SockRef::from(&c)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(c);
    }
    let start = Instant::now();
    let mut silent = Reader::new(s.connect());
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).status, 200, "still serving");
    drop(r);
    assert!(silent.until_closed().is_empty());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(3500),
        "the silent client closed after {waited:?} (idle timeout 1 s, accept deferred up to 1 s)"
    );
    drop(silent);
    let stopped = s.stop();
    assert_eq!(stopped.total("timeouts"), 1);
    let accepted = stopped.total("conns_accepted");
    assert!((2..=202).contains(&accepted), "accepted {accepted}");
    assert_eq!(stopped.total("conns_closed"), accepted);
}

#[test]
fn garbage_after_a_good_request_is_answered_then_closed_and_the_server_keeps_serving() {
    let args = ["-t", "1", "-b", "ok", "-m", "--meter-format", "json"];
    let s = Server::start(&args);
    let before = rss_kib(s.pid());
    // A good request and garbage (a TLS ClientHello's start, binary, a bare line) in one write.
    let bytes = [
        &get("/")[..],
        b"\x16\x03\x01\x02\x00\x01\x00\xff\xfe garbage\r\n\r\n",
    ]
    .concat();
    for i in 0..200 {
        let mut r = Reader::new(s.connect());
        r.send(&bytes);
        match i % 3 {
            // Reads the answer, the 400, then the close.
            0 => {
                let ok = r.response(false);
                assert_eq!((ok.status, &ok.body[..]), (200, &b"ok"[..]), "client {i}");
                let bad = r.response(false);
                assert_eq!(bad.status, 400, "client {i}");
                assert_eq!(bad.header("connection").as_deref(), Some("close"));
                r.stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                assert!(
                    r.until_closed().is_empty(),
                    "client {i}: bytes after the 400"
                );
            }
            // Goes away without reading.
            1 => drop(r),
            // Resets without reading.
            _ => {
                socket2::SockRef::from(&r.stream)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(r);
            }
        }
    }
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).status, 200, "still serving");
    // Lingering reads end within 2 s: then only this connection is open.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !last_meter_line(&s).contains("\"open_conns\":1,") {
        assert!(
            Instant::now() < deadline,
            "garbage connections kept: {}",
            last_meter_line(&s)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = rss_kib(s.pid());
    statico_tests::assert_memory!(after < before + 8 * 1024, "RSS {before} KiB → {after} KiB");
    drop(r);
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), 201);
    assert_eq!(stopped.total("conns_closed"), 201);
    assert!(stopped.total("status_400") >= 67, "{}", stopped.stderr);
}

fn last_meter_line(s: &Server) -> String {
    s.stdout().lines().last().unwrap_or_default().to_string()
}

#[test]
fn shutdown_does_not_wait_past_its_timeout_for_a_client_that_never_reads() {
    let body = "x".repeat(64 * 1024);
    let s = Server::start(&["-t", "1", "--shutdown-timeout", "1s", "-b", &body]);
    let mut c = s.connect();
    pipeline_until_stalled(&mut c, s.pid(), Duration::from_millis(300));
    let start = Instant::now();
    let stopped = s.stop();
    let took = start.elapsed();
    assert!(stopped.status.success(), "{:?}", stopped.status);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "exit {took:?} after SIGTERM with --shutdown-timeout 1s"
    );
    assert!(stopped.stderr.contains("statico: totals"));
}
