//! Hostile HTTP/2 clients, on the runtime under test, written frame by frame on a raw socket: one that
//! opens and at once resets 100 000 streams (the "rapid reset" attack), and one that opens streams with
//! huge flow-control windows for large bodies and never reads; a preface and a request trickled a byte
//! at a time, garbage after the preface, 2 000 streams reset halfway through their bodies, a stream
//! starved of flow-control window, and a stream route's events to a client that never reads or whose
//! window is smaller than an event. Each must cost the server bounded memory (read from
//! /proc/PID/status) and bounded time, end in GOAWAY or a close, and leave the server answering
//! others; the counters must balance at the end. (The silent client is in `http2.rs`.)

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use statico_tests::{rss_kib, run_client, scratch_dir, Server};

pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame: 24-bit length, type, flags, stream, payload.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
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
    let ends = (c.local_addr().unwrap(), c.peer_addr().unwrap());
    // Watched in the kernel's table, not probed: a probe the server left unread would make any
    // close a reset.
    let (closed, peak) = until_gone(&s, &c, Instant::now(), before);
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one client that does not read 100 MiB"
    );
    // Its streams' answers are all queued at once: then 2 s without a stream, GOAWAY, 2 s of grace.
    assert!(
        closed > Duration::from_millis(3500) && closed < Duration::from_secs(6),
        "closed {closed:?} after the requests (idle timeout 2 s, grace 2 s)"
    );
    // With a reset, the answers still queued: the kernel keeps no closed socket retrying them.
    assert_closed_with_a_reset(ends, "the bodies");
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

// ---- Frames of a request, and a reader of the server's ----

/// An HPACK literal field without indexing, new name, no Huffman (names and values under 127 bytes).
fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00);
    for s in [name, value] {
        assert!(s.len() < 127);
        block.push(s.len() as u8);
        block.extend_from_slice(s.as_bytes());
    }
}

/// HEADERS (END_HEADERS, and END_STREAM when `end`) for `METHOD PATH` on `stream`, with `fields`.
pub(crate) fn request(
    stream: u32,
    method: &str,
    path: &str,
    end: bool,
    fields: &[(&str, &str)],
) -> Vec<u8> {
    let mut block = Vec::new();
    let pseudo = [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "t"),
    ];
    for (name, value) in pseudo.iter().chain(fields) {
        literal(&mut block, name, value);
    }
    frame(1, 0x4 | u8::from(end), stream, &block)
}

/// SETTINGS with `pairs` (identifier, value).
pub(crate) fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let payload: Vec<u8> = (pairs.iter())
        .flat_map(|(id, v)| [&id.to_be_bytes()[..], &v.to_be_bytes()[..]].concat())
        .collect();
    frame(4, 0, 0, &payload)
}

/// SETTINGS_INITIAL_WINDOW_SIZE.
pub(crate) const INITIAL_WINDOW: u16 = 4;

pub(crate) fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(8, 0, stream, &increment.to_be_bytes())
}

pub(crate) fn data(stream: u32, payload: &[u8], end: bool) -> Vec<u8> {
    frame(0, u8::from(end), stream, payload)
}

/// A frame the server sent.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
    pub(crate) payload: Vec<u8>,
}

pub(crate) const DATA: u8 = 0;
pub(crate) const HEADERS: u8 = 1;
pub(crate) const GOAWAY: u8 = 7;

/// What the server sends on a connection, frame by frame.
pub(crate) struct Frames {
    c: TcpStream,
    buf: Vec<u8>,
}

/// Why [`Frames::next`] has no frame.
#[derive(Debug, PartialEq)]
pub(crate) enum Quiet {
    /// Nothing came within the wait.
    Waited,
    /// The server closed the connection (EOF or reset).
    Closed,
}

impl Frames {
    pub(crate) fn new(c: &TcpStream) -> Frames {
        Frames {
            c: c.try_clone().unwrap(),
            buf: Vec::new(),
        }
    }

    /// The next frame, if one comes within `wait`.
    pub(crate) fn next(&mut self, wait: Duration) -> Result<Frame, Quiet> {
        let until = Instant::now() + wait;
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let f: Vec<u8> = self.buf.drain(..9 + len).collect();
                    return Ok(Frame {
                        kind: f[3],
                        flags: f[4],
                        stream: u32::from_be_bytes([f[5], f[6], f[7], f[8]]) & 0x7fff_ffff,
                        payload: f[9..].to_vec(),
                    });
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Quiet::Waited);
            }
            self.c.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 64 * 1024];
            match self.c.read(&mut chunk) {
                Ok(0) => return Err(Quiet::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return Err(Quiet::Closed),
            }
        }
    }

    /// Frames until the server closes; panics if it has not within `limit`. Returns them and when
    /// the close came.
    fn until_closed(&mut self, limit: Duration) -> (Vec<Frame>, Instant) {
        let start = Instant::now();
        let mut seen = Vec::new();
        loop {
            let left = limit.saturating_sub(start.elapsed());
            match self.next(left.min(Duration::from_millis(100))) {
                Ok(f) => seen.push(f),
                Err(Quiet::Closed) => return (seen, Instant::now()),
                Err(Quiet::Waited) => assert!(
                    start.elapsed() < limit,
                    "still open after {limit:?}; frames: {seen:?}"
                ),
            }
        }
    }
}

const PROTOCOL_ERROR: u32 = 1;
const FRAME_SIZE_ERROR: u32 = 6;

/// GOAWAY's error code.
fn goaway_error(f: &Frame) -> u32 {
    u32::from_be_bytes([f.payload[4], f.payload[5], f.payload[6], f.payload[7]])
}

fn balanced(s: Server) -> statico_tests::Stopped {
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
    stopped
}

// ---- Trickles and garbage ----

#[test]
fn a_trickled_preface_is_closed_at_the_header_timeout_and_a_trickled_request_at_the_idle_timeout() {
    let s = Server::start(&[
        "--http2",
        "-t",
        "1",
        "-b",
        "ok",
        "--header-timeout",
        "1s",
        "--idle-timeout",
        "2s",
    ]);
    // The preface, a byte every 100 ms: it must be whole by the header timeout.
    let since_preface = trickle(&s, &[PREFACE, &settings(&[])].concat(), &[]);
    assert!(
        since_preface >= Duration::from_millis(950) && since_preface < Duration::from_millis(2500),
        "a trickled preface closed {since_preface:?} after its first byte (header timeout 1 s)"
    );
    // After a whole preface, a request's HEADERS frame a byte every 100 ms: no stream is open, so
    // the connection is idle: GOAWAY at 2 s, closed 2 s later.
    let hello = [PREFACE, &settings(&[])].concat();
    let head = request(1, "GET", "/", true, &[("x-slow", &"a".repeat(100))]);
    let since_hello = trickle(&s, &head, &hello);
    assert!(
        since_hello >= Duration::from_millis(3900) && since_hello < Duration::from_millis(5500),
        "a trickled request closed {since_hello:?} after the preface (idle 2 s, then a 2 s grace)"
    );
    let stopped = balanced(s);
    assert_eq!(stopped.total("timeouts"), 2);
    assert_eq!(stopped.total("requests"), 0);
}

/// Sends `first` at once, then `bytes` one every 100 ms until the server closes; returns how long
/// after the first byte that was.
fn trickle(s: &Server, bytes: &[u8], first: &[u8]) -> Duration {
    let mut c = s.connect();
    c.write_all(first).unwrap();
    let mut frames = Frames::new(&c);
    let start = Instant::now();
    for b in bytes {
        if c.write_all(&[*b]).is_err() {
            return start.elapsed();
        }
        // What the server says meanwhile (SETTINGS, GOAWAY) is read; a close ends the trickle.
        let next = Instant::now() + Duration::from_millis(100);
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            match frames.next(left) {
                Ok(f) => assert!(f.kind != HEADERS, "answered a partial request: {f:?}"),
                Err(Quiet::Closed) => return start.elapsed(),
                Err(Quiet::Waited) => break,
            }
        }
    }
    panic!("still open after the whole trickle ({:?})", start.elapsed());
}

#[test]
fn garbage_after_the_preface_or_a_request_gets_goaway_and_a_close_at_once() {
    let s = Server::start(&["--http2", "-t", "1", "-b", "ok"]);
    // Bytes that are no frame, a frame's length past the largest frame, and HTTP/1.1 after the
    // preface: each a connection error (PROTOCOL_ERROR or FRAME_SIZE_ERROR), GOAWAY, then the close.
    let huge = [0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1];
    let cases: [(&str, Vec<u8>); 4] = [
        ("0xff bytes", [PREFACE, &[0xff; 100]].concat()),
        ("a huge frame", [PREFACE, &settings(&[]), &huge].concat()),
        (
            "HTTP/1.1",
            [PREFACE, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"].concat(),
        ),
        (
            "a request, then a huge frame",
            [PREFACE, &settings(&[]), &get(1), &huge].concat(),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = s.connect();
        c.write_all(&bytes).unwrap();
        let start = Instant::now();
        let (frames, closed) = Frames::new(&c).until_closed(Duration::from_secs(3));
        let goaway = (frames.iter().find(|f| f.kind == GOAWAY))
            .unwrap_or_else(|| panic!("{what}: no GOAWAY in {frames:?}"));
        assert!(
            [PROTOCOL_ERROR, FRAME_SIZE_ERROR].contains(&goaway_error(goaway)),
            "{what}: {goaway:?}"
        );
        let took = closed - start;
        assert!(
            took < Duration::from_secs(1),
            "{what}: closed after {took:?}"
        );
    }
    let (ok, out, err) = run_client("curl", &["-sS", "--http2-prior-knowledge", &s.url("/")]);
    assert!(
        ok && out == "ok",
        "the server answers others after it: {err}"
    );
    balanced(s);
}

// ---- Resets, starvation ----

#[test]
fn two_thousand_streams_reset_halfway_through_their_bodies_cost_bounded_memory() {
    let s = Server::start(&["--http2", "-t", "1", "-b", "ok", "--idle-timeout", "2s"]);
    let before = rss_kib(s.pid());
    let mut c = s.connect();
    c.write_all(&[PREFACE, &settings(&[])].concat()).unwrap();
    let mut frames = Frames::new(&c);
    // Each stream: a POST declaring 100 000 bytes, 5 000 of them, then RST_STREAM (CANCEL). The
    // connection's window is kept to: the server's WINDOW_UPDATEs are waited for.
    let mut window: i64 = 65_535;
    let mut peak = before;
    for i in 0..2000u32 {
        let stream = 1 + 2 * i;
        while window < 5000 {
            let f = frames
                .next(Duration::from_secs(5))
                .expect("a WINDOW_UPDATE");
            if f.kind == 8 && f.stream == 0 {
                window += i64::from(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
            }
        }
        window -= 5000;
        let post = request(stream, "POST", "/", false, &[("content-length", "100000")]);
        c.write_all(&[post, data(stream, &[b'a'; 5000], false), reset(stream)].concat())
            .unwrap();
        if i % 200 == 0 {
            peak = peak.max(rss_kib(s.pid()));
        }
    }
    // The connection goes on: a GET on it is answered.
    c.write_all(&get(4001)).unwrap();
    let answered = loop {
        match frames.next(Duration::from_secs(5)) {
            Ok(f) if f.kind == DATA && f.stream == 4001 => break f.payload,
            Ok(f) => assert!(f.kind != GOAWAY, "GOAWAY: {f:?}"),
            Err(why) => panic!("no answer on stream 4001: {why:?}"),
        }
    };
    assert_eq!(answered, b"ok");
    peak = peak.max(rss_kib(s.pid()));
    statico_tests::assert_memory!(
        peak < before + 16 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for 2 000 streams reset mid-body"
    );
    let stopped = balanced(s);
    assert_eq!(stopped.total("requests"), 1);
}

#[test]
fn a_stream_starved_of_window_gets_goaway_at_the_idle_timeout_and_its_body_once_the_window_opens() {
    let dir = scratch_dir("h2-hostile", "starved");
    let file = dir.join("body");
    std::fs::write(&file, "x".repeat(1 << 20)).unwrap();
    let body = format!("@{}", file.display());
    let s = Server::start(&["--http2", "-t", "1", "--idle-timeout", "2s", "-b", &body]);
    for opens in [false, true] {
        let mut c = s.connect();
        // Stream windows of 0: the head may go, no byte of the body.
        c.write_all(&[PREFACE, &settings(&[(INITIAL_WINDOW, 0)]), &get(1)].concat())
            .unwrap();
        let sent = Instant::now();
        let mut frames = Frames::new(&c);
        let mut seen = Vec::new();
        let goaway = loop {
            let f = frames.next(Duration::from_secs(4)).expect("GOAWAY");
            assert!(
                f.kind != DATA || f.payload.is_empty(),
                "DATA with no window"
            );
            if f.kind == GOAWAY {
                break sent.elapsed();
            }
            seen.push(f.kind);
        };
        assert!(seen.contains(&HEADERS), "the head goes: {seen:?}");
        assert!(
            goaway >= Duration::from_millis(1900) && goaway < Duration::from_millis(3000),
            "GOAWAY {goaway:?} after the request (idle timeout 2 s, the body starved)"
        );
        if !opens {
            let (_, closed) = frames.until_closed(Duration::from_secs(4));
            let closed = closed - sent;
            assert!(
                closed >= Duration::from_millis(3900) && closed < Duration::from_millis(5000),
                "closed {closed:?} after the request (GOAWAY at 2 s, then a 2 s grace)"
            );
            continue;
        }
        // Within the grace the client opens its windows: the body comes whole, then the close.
        c.write_all(&[window_update(1, 1 << 20), window_update(0, 1 << 20)].concat())
            .unwrap();
        let (frames, _) = frames.until_closed(Duration::from_secs(5));
        let got: usize = (frames.iter())
            .filter(|f| f.kind == DATA && f.stream == 1)
            .map(|f| f.payload.len())
            .sum();
        assert_eq!(got, 1 << 20, "the body, once the window opened");
    }
    let stopped = balanced(s);
    assert_eq!(stopped.total("timeouts"), 2);
}

// ---- Flow control's round trips ----

/// A client that opens its windows only once it has spent them waits a round trip per 64 KiB; each
/// round's last bytes must not wait on top of it for the client's delayed acknowledgement (Nagle's
/// algorithm holding a small segment while another is unacknowledged: 40 ms a round).
#[test]
fn a_download_whose_window_opens_only_when_spent_is_not_held_by_delayed_acks() {
    const SIZE: usize = 2 << 20;
    let dir = scratch_dir("h2-hostile", "window-rounds");
    let file = dir.join("body");
    std::fs::write(&file, "x".repeat(SIZE)).unwrap();
    let body = format!("@{}", file.display());
    let s = Server::start(&["--http2", "-t", "1", "-b", &body]);
    let mut c = s.connect();
    c.set_nodelay(true).unwrap();
    c.write_all(&[PREFACE, &settings(&[]), &get(1)].concat())
        .unwrap();
    let mut frames = Frames::new(&c);
    let start = Instant::now();
    let (mut got, mut round, mut slowest) = (0, 0, Duration::ZERO);
    let mut round_start = Instant::now();
    while got < SIZE {
        let f = frames.next(Duration::from_secs(5)).expect("the body");
        if f.kind != DATA {
            continue;
        }
        got += f.payload.len();
        round += f.payload.len();
        if round == 65_535 {
            slowest = slowest.max(round_start.elapsed());
            c.write_all(&[window_update(1, 65_535), window_update(0, 65_535)].concat())
                .unwrap();
            (round, round_start) = (0, Instant::now());
        }
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(600),
        "2 MiB in 32 window rounds took {took:?} (the slowest round {slowest:?})"
    );
    balanced(s);
}

/// The other way: a client uploading a body sends a window's worth, then waits for the server's
/// WINDOW_UPDATEs (the stream's and the connection's) to give it half a window back, 80 times (5 MiB).
#[test]
fn an_upload_is_not_held_by_delayed_acks_of_window_updates() {
    const ROUNDS: usize = 80;
    let s = Server::start(&["--http2", "-t", "1", "-b", "ok", "--max-body-size", "100m"]);
    let mut c = s.connect();
    c.set_nodelay(true).unwrap();
    let post = request(1, "POST", "/", false, &[]);
    c.write_all(&[PREFACE, &settings(&[]), &post].concat())
        .unwrap();
    let mut frames = Frames::new(&c);
    let (mut stream_window, mut conn_window) = (65_535usize, 65_535usize);
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..ROUNDS {
        let round = Instant::now();
        let mut left = stream_window.min(conn_window);
        (stream_window, conn_window) = (stream_window - left, conn_window - left);
        while left > 0 {
            let n = left.min(16_384);
            c.write_all(&data(1, &vec![b'u'; n], false)).unwrap();
            left -= n;
        }
        while stream_window <= 32_768 || conn_window <= 32_768 {
            let f = frames.next(Duration::from_secs(5)).expect("WINDOW_UPDATE");
            if f.kind == 8 {
                let n = u32::from_be_bytes(f.payload[..4].try_into().unwrap()) as usize;
                *(if f.stream == 0 {
                    &mut conn_window
                } else {
                    &mut stream_window
                }) += n;
            }
        }
        slowest = slowest.max(round.elapsed());
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(600),
        "{ROUNDS} window rounds of upload took {took:?} (the slowest {slowest:?})"
    );
    c.write_all(&data(1, b"", true)).unwrap();
    let answered = loop {
        let f = frames.next(Duration::from_secs(5)).expect("the answer");
        if f.kind == DATA && f.stream == 1 {
            break f.payload;
        }
    };
    assert_eq!(answered, b"ok");
    balanced(s);
}

// ---- A stream route's events ----

/// A stream route with events due faster than a client can be slow: 100 000 events of 4 KiB.
const EVENTS: &str = "/events stream=sse events=100000 gap=1ms event-size=4k";

#[test]
fn a_client_that_never_reads_a_stream_routes_events_holds_bounded_memory_and_is_closed_when_idle() {
    // A small send buffer: the output stalls at once, not when the kernel stops growing it.
    let s = Server::start(&[
        "--http2",
        "-t",
        "1",
        "--send-buffer-size",
        "64k",
        "--idle-timeout",
        "2s",
        "--route",
        EVENTS,
    ]);
    let before = rss_kib(s.pid());
    let mut c = s.connect();
    let ends = (c.local_addr().unwrap(), c.peer_addr().unwrap());
    // The largest windows there are, and not a byte read: the events wait for the socket.
    let mut hello = PREFACE.to_vec();
    hello.extend_from_slice(&settings(&[(INITIAL_WINDOW, 0x7fff_ffff)]));
    hello.extend_from_slice(&window_update(0, 0x7fff_ffff - 65_535));
    hello.extend_from_slice(&request(1, "GET", "/events", true, &[]));
    c.write_all(&hello).unwrap();
    let (closed, peak) = until_gone(&s, &c, Instant::now(), before);
    statico_tests::assert_memory!(
        peak < before + 16 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one client that reads no event"
    );
    assert!(
        closed < Duration::from_secs(6),
        "closed {closed:?} after the request (output stalled at once; idle 2 s, grace 2 s)"
    );
    // Closed with a reset: the kernel keeps no closed socket retrying the unread events.
    assert_closed_with_a_reset(ends, "the events");
    let stopped = balanced(s);
    assert_eq!(stopped.total("timeouts"), 1);
}

/// Asserts that the server's end of the connection between `ends` (client, server), which the
/// server has just closed, leaves the kernel's table within 1 s: closed with a reset, not left in
/// FIN_WAIT1 with `queued` (what the client did not read) for the kernel to retry.
pub(crate) fn assert_closed_with_a_reset(ends: (SocketAddr, SocketAddr), queued: &str) {
    let (client, server) = ends;
    let since = Instant::now();
    while tcp_state(server.port(), client.port()).is_some() {
        assert!(
            since.elapsed() < Duration::from_secs(1),
            "the server's end is left open after its close (FIN_WAIT1, {queued} queued), not reset"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The kernel's state of the loopback socket from port `from` to port `to`, if it has one: the `st`
/// of its line in /proc/net/tcp ("01" ESTABLISHED, "04" FIN_WAIT1).
fn tcp_state(from: u16, to: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    // Each line: "sl local_address rem_address st ...".
    let ends = format!(":{from:04X} 0100007F:{to:04X} ");
    let line = table.lines().find(|l| l.contains(&ends))?;
    line.split_whitespace().nth(3).map(str::to_owned)
}

/// Waits for the server to close `c` ([`connection_gone`]), at most 10 s (a client that reads
/// nothing, with an idle timeout of 2 s), reading the server's RSS meanwhile: how long the close
/// took from `since`, and the peak RSS in KiB (at least `before`).
pub(crate) fn until_gone(
    s: &Server,
    c: &TcpStream,
    since: Instant,
    before: u64,
) -> (Duration, u64) {
    let mut peak = before;
    loop {
        peak = peak.max(rss_kib(s.pid()));
        if connection_gone(c) {
            return (since.elapsed(), peak);
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "a client that reads nothing was still connected after 10 s (idle timeout 2 s)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the server has closed `c`, probed without reading what it sent: the kernel's view of
/// both ends in /proc/net/tcp. The server's end leaves ESTABLISHED when it closes (FIN_WAIT1 while
/// the bytes a client that reads nothing left unread are still queued), the client's when the
/// server's FIN or reset reaches it (a reset leaves it without a peer).
pub(crate) fn connection_gone(c: &TcpStream) -> bool {
    // A client's socket that a reset reached has no peer left.
    let Ok(peer) = c.peer_addr() else {
        return true;
    };
    let (local, peer) = (c.local_addr().unwrap().port(), peer.port());
    let established = |from, to| tcp_state(from, to).as_deref() == Some("01");
    !(established(local, peer) && established(peer, local))
}

#[test]
fn a_stream_window_smaller_than_an_event_does_not_hold_the_connection_forever() {
    let s = Server::start(&[
        "--http2",
        "-t",
        "1",
        "--idle-timeout",
        "2s",
        "--route",
        "/events stream=sse events=5 gap=20ms",
    ]);
    let mut c = s.connect();
    // A 16-byte stream window, opened again by what each DATA frame takes, as a client that
    // reads as it goes does; each event is 21 bytes (`id: 0\ndata: {"i":0}\n\n`).
    c.write_all(
        &[
            PREFACE,
            &settings(&[(INITIAL_WINDOW, 16)]),
            &request(1, "GET", "/events", true, &[]),
        ]
        .concat(),
    )
    .unwrap();
    let start = Instant::now();
    let mut frames = Frames::new(&c);
    let mut got = Vec::new();
    let ended = loop {
        match frames.next(Duration::from_millis(100)) {
            Ok(f) if f.kind == DATA && f.stream == 1 => {
                got.extend_from_slice(&f.payload);
                if !f.payload.is_empty() {
                    let n = f.payload.len() as u32;
                    c.write_all(&[window_update(1, n), window_update(0, n)].concat())
                        .unwrap();
                }
                if f.flags & 1 == 1 {
                    break "the stream's end";
                }
            }
            Ok(_) => {}
            Err(Quiet::Closed) => break "the connection's close",
            Err(Quiet::Waited) => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "after 8 s neither the events ({} bytes) nor a close came (idle timeout 2 s)",
            got.len()
        );
    };
    eprintln!(
        "a 16-byte window: {} bytes, then {ended}, after {:?}",
        got.len(),
        start.elapsed()
    );
    balanced(s);
}
