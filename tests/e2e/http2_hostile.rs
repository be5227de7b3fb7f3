//! Hostile HTTP/2 clients, on the runtime under test, written frame by frame on a raw socket: one that
//! opens and at once resets 100 000 streams (the "rapid reset" attack), and one that opens streams with
//! huge flow-control windows for large bodies and never reads. Each must cost the server bounded
//! memory (read from /proc/PID/status) and bounded time, end in GOAWAY or a close, and leave the server
//! answering others; the counters must balance at the end. (The silent client is in `http2.rs`.)

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use statico_tests::{rss_kib, run_client, scratch_dir, Server};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame: 24-bit length, type, flags, stream, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HEADERS (END_STREAM | END_HEADERS) for `GET /` on `stream`: static-table `:method GET`, `:scheme
/// http`, `:path /`, and a literal `:authority`.
fn get(stream: u32) -> Vec<u8> {
    frame(1, 0x5, stream, &[0x82, 0x86, 0x84, 0x01, 0x01, b't'])
}

/// RST_STREAM with CANCEL.
fn reset(stream: u32) -> Vec<u8> {
    frame(3, 0, stream, &8u32.to_be_bytes())
}

/// Reads everything the server sends until it closes (or `limit` passes); returns whether a GOAWAY
/// came, and when the connection ended.
fn drain(mut c: TcpStream, limit: Duration) -> (bool, Option<Instant>) {
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = Instant::now();
    let (mut buf, mut seen) = (vec![0u8; 64 * 1024], Vec::new());
    while start.elapsed() < limit {
        match c.read(&mut buf) {
            Ok(0) => return (goaway_in(&seen), Some(Instant::now())),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return (goaway_in(&seen), Some(Instant::now())),
        }
    }
    (goaway_in(&seen), None)
}

/// Whether the server's frames include a GOAWAY.
fn goaway_in(bytes: &[u8]) -> bool {
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
        if bytes[at + 3] == 7 {
            return true;
        }
        at += 9 + len;
    }
    false
}

#[test]
fn rapid_reset_of_100_000_streams_is_bounded_and_the_server_goes_on() {
    let s = Server::start(&["--http2", "-t", "1", "-b", "ok"]);
    let before = rss_kib(s.pid());
    let mut c = s.connect();
    c.write_all(PREFACE).unwrap();
    c.write_all(&frame(4, 0, 0, &[])).unwrap();
    let reader = c.try_clone().unwrap();
    let drained = std::thread::spawn(move || drain(reader, Duration::from_secs(30)));
    let start = Instant::now();
    let mut peak = before;
    let mut sent = 0u32;
    'send: for batch in 0..1000u32 {
        let mut bytes = Vec::new();
        for i in 0..100 {
            let stream = 1 + 2 * (batch * 100 + i);
            bytes.extend_from_slice(&get(stream));
            bytes.extend_from_slice(&reset(stream));
        }
        if c.write_all(&bytes).is_err() {
            break 'send; // the server gave up on this client: that is bounded too
        }
        sent += 100;
        if batch % 50 == 0 {
            peak = peak.max(rss_kib(s.pid()));
        }
    }
    let _ = c.shutdown(std::net::Shutdown::Write);
    let (_goaway, ended) = drained.join().unwrap();
    let took = start.elapsed();
    peak = peak.max(rss_kib(s.pid()));
    assert!(
        ended.is_some(),
        "the connection was still open {took:?} after {sent} streams"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for {sent} reset streams"
    );
    let (ok, out, err) = run_client("curl", &["-sS", "--http2-prior-knowledge", &s.url("/")]);
    assert!(
        ok && out == "ok",
        "the server answers others after it: {err}"
    );
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

#[test]
fn a_client_that_never_reads_big_bodies_holds_bounded_memory_and_is_closed_when_idle() {
    let dir = scratch_dir("h2-hostile", "never-reads");
    let file = dir.join("body");
    std::fs::write(&file, "x".repeat(1 << 20)).unwrap();
    let body = format!("@{}", file.display());
    let s = Server::start(&["--http2", "-t", "1", "--idle-timeout", "2s", "-b", &body]);
    let before = rss_kib(s.pid());
    let mut c = s.connect();
    // The largest windows there are (INITIAL_WINDOW_SIZE, and the connection's), then 100 streams for
    // a 1 MiB body each, and not a byte read.
    let mut hello = PREFACE.to_vec();
    hello.extend_from_slice(&frame(4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    hello.extend_from_slice(&frame(8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    for i in 0..100u32 {
        hello.extend_from_slice(&get(1 + 2 * i));
    }
    c.write_all(&hello).unwrap();
    let start = Instant::now();
    let mut peak = before;
    let mut closed = None;
    while start.elapsed() < Duration::from_secs(10) {
        peak = peak.max(rss_kib(s.pid()));
        if start.elapsed() > Duration::from_secs(1) && closed.is_none() {
            // Probe without reading: once the server closed with our data unread, writes fail.
            c.set_nonblocking(true).unwrap();
            let ping = frame(6, 0, 0, &[0; 8]);
            if let Err(e) = c.write(&ping) {
                if e.kind() != ErrorKind::WouldBlock {
                    closed = Some(start.elapsed());
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one client that does not read 100 MiB"
    );
    // Its streams' answers are all queued at once: then 2 s without a stream, GOAWAY, 2 s of grace.
    let closed = closed.expect("closed within 10 s");
    assert!(
        closed > Duration::from_millis(3500) && closed < Duration::from_secs(6),
        "closed {closed:?} after the requests (idle timeout 2 s, grace 2 s)"
    );
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}
