//! The soak's own HTTP/1.1 clients, on plain sockets or rustls over them: keep-alive,
//! `Connection: close` and pipelined (16 requests a write) at a modest fixed pace, each answer read
//! by its Content-Length and each failure told apart (reset, close, truncate, timeout); and the
//! hostile ones: slowloris (a head a byte a second), never-reading (16 large answers asked for,
//! none read) and the stall route's client, which time how long statico takes to close on them.
//!
//! Every request of the paced clients passes the [`Gate`], which a routes swap closes: no request is
//! in flight while the ground truth is read and the table replaced, so each answer's outcome lands
//! in a generation the soak reads.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::judge::Counts;
use crate::tools::net::Stream;
use crate::tools::tls;

/// Requests in flight through the gate, and whether a swap waits for them to end.
#[derive(Default)]
pub struct Gate {
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

/// A request's pass through the [`Gate`]; dropped when its answer is read.
pub struct Pass<'a>(&'a Gate);

impl Gate {
    /// Waits while a swap is pending, then counts one more request in flight.
    pub fn enter(&self) -> Pass<'_> {
        let mut s = self.state.lock().unwrap();
        while s.0 {
            s = self.changed.wait(s).unwrap();
        }
        s.1 += 1;
        Pass(self)
    }

    /// Stops new passes and waits (up to `limit`) for those in flight to end; false if they did not.
    pub fn close(&self, limit: Duration) -> bool {
        let mut s = self.state.lock().unwrap();
        s.0 = true;
        let (s, timeout) = self
            .changed
            .wait_timeout_while(s, limit, |s| s.1 > 0)
            .unwrap();
        drop(s);
        !timeout.timed_out()
    }

    pub fn open(&self) {
        self.state.lock().unwrap().0 = false;
        self.changed.notify_all();
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().1 -= 1;
        self.0.changed.notify_all();
    }
}

/// (client kind, server) → when each of its connections closed, in s (`None`: not by its limit).
pub type Closes = BTreeMap<(String, String), Vec<Option<f64>>>;

/// What every client thread shares: the stop flag, the gate, and what they saw.
#[derive(Default)]
pub struct Shared {
    pub stop: AtomicBool,
    pub gate: Gate,
    /// (client, server, route) → what that client saw there.
    pub tally: Mutex<BTreeMap<(String, String, String), Counts>>,
    /// (what, server) → when each of those connections closed, in s (`None`: not by the limit).
    pub closes: Mutex<Closes>,
    /// The tools' failures by message ("CLIENT: MESSAGE"), for the report.
    pub messages: Mutex<BTreeMap<String, u64>>,
}

impl Shared {
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn count(&self, client: &str, server: &str, route: &str, c: Counts) {
        let key = (client.to_string(), server.to_string(), route.to_string());
        self.tally.lock().unwrap().entry(key).or_default().add(&c);
    }

    fn closed(&self, what: &str, server: &str, after: Option<f64>) {
        let key = (what.to_string(), server.to_string());
        self.closes
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .push(after);
    }
}

/// A statico port: plain, or TLS with the client's config.
#[derive(Clone)]
pub struct Target {
    /// "tls" or "plain", in the tallies.
    pub server: &'static str,
    pub port: u16,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The paths the paced clients cycle through.
    pub paths: Vec<&'static str>,
}

/// How long a client waits for a byte before calling it a timeout.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

impl Target {
    /// A connection, its TLS handshake done, with `timeout` on reads.
    fn connect(&self, timeout: Duration) -> std::io::Result<Box<dyn Stream>> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port))?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(READ_TIMEOUT))?;
        match &self.tls {
            Some(config) => Ok(Box::new(tls::handshake(config, tcp)?)),
            None => Ok(Box::new(tcp)),
        }
    }
}

/// A client connection and the bytes read past the last answer.
struct Conn {
    s: Box<dyn Stream>,
    buf: Vec<u8>,
}

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Answer(u16),
    Reset,
    Close,
    Truncate,
    Timeout,
    Other,
}

impl Outcome {
    fn counts(self) -> Counts {
        let mut c = Counts::default();
        match self {
            Outcome::Answer(s) if (200..300).contains(&s) => c.ok = 1,
            Outcome::Answer(_) => c.status = 1,
            Outcome::Reset => c.reset = 1,
            Outcome::Close => c.close = 1,
            Outcome::Truncate => c.truncate = 1,
            Outcome::Timeout => c.timeout = 1,
            Outcome::Other => c.other = 1,
        }
        c
    }
}

/// The status and the whole length (head and body) of the answer at the start of `buf`, once its
/// head is there; `Err` if the head is not HTTP/1.1 with a Content-Length.
fn answer_len(buf: &[u8]) -> Option<Result<(u16, usize), ()>> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..end]);
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3)?.parse().ok());
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    Some(match (status, len) {
        (Some(s), Some(l)) => Ok((s, end + l)),
        _ => Err(()),
    })
}

impl Conn {
    /// Reads one answer; any outcome but an answer leaves the connection unusable.
    fn answer(&mut self) -> Outcome {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match answer_len(&self.buf) {
                Some(Err(())) => return Outcome::Other,
                Some(Ok((status, len))) if self.buf.len() >= len => {
                    self.buf.drain(..len);
                    return Outcome::Answer(status);
                }
                _ => {}
            }
            let ended = match self.s.read(&mut chunk) {
                Ok(0) => ErrorKind::UnexpectedEof,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    continue;
                }
                Err(e) => e.kind(),
            };
            return match (ended, self.buf.is_empty()) {
                (ErrorKind::WouldBlock | ErrorKind::TimedOut, _) => Outcome::Timeout,
                (ErrorKind::UnexpectedEof, true) => Outcome::Close,
                (ErrorKind::ConnectionReset, true) => Outcome::Reset,
                (ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset, false) => Outcome::Truncate,
                _ => Outcome::Other,
            };
        }
    }
}

fn request(path: &str, close: bool) -> String {
    let connection = if close { "close" } else { "keep-alive" };
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: {connection}\r\n\r\n")
}

/// Idle longer than this, a kept connection is replaced before use (statico's idle timeout is 5 s).
const STALE: Duration = Duration::from_secs(3);

/// A paced HTTP/1.1 client: `batch` requests a write (1: keep-alive, 16: pipelined), or a new
/// connection per request with `close`; one batch every `every`, until stopped.
pub fn paced(shared: &Shared, name: &str, t: &Target, batch: usize, close: bool, every: Duration) {
    let mut conn: Option<(Conn, Instant)> = None;
    for i in 0.. {
        if shared.stopped() {
            break;
        }
        let paths: Vec<&str> = (0..batch)
            .map(|j| t.paths[(i * batch + j) % t.paths.len()])
            .collect();
        let pass = shared.gate.enter();
        if close || conn.as_ref().is_none_or(|(_, used)| used.elapsed() > STALE) {
            conn = match t.connect(READ_TIMEOUT) {
                Ok(s) => Some((Conn { s, buf: Vec::new() }, Instant::now())),
                Err(_) => {
                    shared.count(name, t.server, "(connect)", Outcome::Other.counts());
                    None
                }
            };
        }
        if let Some((c, used)) = conn.as_mut() {
            *used = Instant::now();
            if !exchange(shared, name, t.server, c, &paths, close) {
                conn = None;
            }
        }
        drop(pass);
        sleep(every);
    }
}

/// Writes `paths` as one batch and reads their answers, counting each; false if the connection failed.
fn exchange(
    shared: &Shared,
    name: &str,
    server: &str,
    c: &mut Conn,
    paths: &[&str],
    close: bool,
) -> bool {
    let all: String = paths.iter().map(|p| request(p, close)).collect();
    if c.s
        .write_all(all.as_bytes())
        .and_then(|()| c.s.flush())
        .is_err()
    {
        shared.count(name, server, paths[0], Outcome::Other.counts());
        return false;
    }
    for (k, path) in paths.iter().enumerate() {
        let outcome = c.answer();
        shared.count(name, server, path, outcome.counts());
        if !matches!(outcome, Outcome::Answer(_)) {
            for p in &paths[k + 1..] {
                let unanswered = Counts {
                    unanswered: 1,
                    ..Counts::default()
                };
                shared.count(name, server, p, unanswered);
            }
            return false;
        }
    }
    !close
}

/// Waits on `s` until statico ends the connection, up to `limit` from `since`: the seconds it took,
/// or `None`. Bytes that arrive meanwhile (a 408, say) are read and dropped; every second without
/// any, `tick` runs (and may write), and its error also counts as the end.
fn until_closed(
    s: &mut dyn Stream,
    since: Instant,
    limit: Duration,
    mut tick: impl FnMut(&mut dyn Stream) -> std::io::Result<()>,
) -> Option<f64> {
    let mut chunk = [0u8; 64 * 1024];
    while since.elapsed() < limit {
        match s.read(&mut chunk) {
            Ok(0) => return Some(since.elapsed().as_secs_f64()),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if tick(s).is_err() {
                    return Some(since.elapsed().as_secs_f64());
                }
            }
            Err(_) => return Some(since.elapsed().as_secs_f64()),
        }
    }
    None
}

/// Slowloris: a head a byte a second, never finished; statico should close it `--header-timeout`
/// after its first byte. Then again, until stopped.
pub fn slowloris(shared: &Shared, t: &Target) {
    let head = b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    while !shared.stopped() {
        let Ok(mut s) = t.connect(Duration::from_secs(1)) else {
            sleep(Duration::from_secs(1));
            continue;
        };
        let mut next = 0;
        let mut trickle = |s: &mut dyn Stream| {
            next += 1;
            s.write_all(&[head[(next - 1) % head.len()]])
                .and_then(|()| s.flush())
        };
        if trickle(&mut *s).is_err() {
            continue;
        }
        let since = Instant::now();
        let closed = until_closed(&mut *s, since, Duration::from_secs(20), trickle);
        shared.closed("slowloris", t.server, closed);
    }
}

/// The stall route's client: `GET /stall` every 20 s; statico should end it at `--idle-timeout`.
pub fn stall(shared: &Shared, t: &Target) {
    while !shared.stopped() {
        if let Ok(mut s) = t.connect(Duration::from_secs(1)) {
            let since = Instant::now();
            if s.write_all(request("/stall", false).as_bytes())
                .and_then(|()| s.flush())
                .is_ok()
            {
                let closed = until_closed(&mut *s, since, Duration::from_secs(15), |_| Ok(()));
                shared.closed("stall", t.server, closed);
            }
        }
        wait_or_stop(shared, Duration::from_secs(20));
    }
}

/// Sleeps `d`, waking early when the run stops.
fn wait_or_stop(shared: &Shared, d: Duration) {
    let end = Instant::now() + d;
    while !shared.stopped() && Instant::now() < end {
        sleep(Duration::from_millis(200));
    }
}

/// The never-reading client: 16 requests for `path` (a large body) in one write, nothing read for
/// `quiet`; then it reads: statico should have closed it meanwhile, so the bytes stop short of all
/// 16 answers and end. Records `quiet` + the reading time if it ended, `None` if it stayed open.
pub fn never_reading(shared: &Shared, t: &Target, path: &str, quiet: Duration) {
    while !shared.stopped() {
        let Ok(mut s) = t.connect(Duration::from_secs(1)) else {
            sleep(Duration::from_secs(1));
            continue;
        };
        let since = Instant::now();
        let all: String = (0..16).map(|_| request(path, false)).collect();
        if s.write_all(all.as_bytes())
            .and_then(|()| s.flush())
            .is_err()
        {
            continue;
        }
        sleep(quiet);
        let closed = until_closed(&mut *s, since, quiet + Duration::from_secs(10), |_| Ok(()));
        shared.closed("never-reading", t.server, closed);
    }
}

/// `n` connections to `t`, each having had one answer, left open and idle (for the drain).
pub fn idle_connections(t: &Target, n: usize) -> Vec<Box<dyn Stream>> {
    (0..n)
        .filter_map(|_| {
            let mut c = Conn {
                s: t.connect(READ_TIMEOUT).ok()?,
                buf: Vec::new(),
            };
            c.s.write_all(request("/", false).as_bytes()).ok()?;
            matches!(c.answer(), Outcome::Answer(_)).then_some(c.s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_cut_by_their_content_length() {
        assert_eq!(
            answer_len(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"),
            None
        );
        let a = b"HTTP/1.1 503 No\r\ncontent-length: 3\r\n\r\nabcHTTP/1.1";
        assert_eq!(answer_len(a), Some(Ok((503, 41))));
        assert_eq!(answer_len(b"HTTP/1.1 200 OK\r\n\r\n"), Some(Err(())));
    }

    #[test]
    fn the_gate_holds_new_passes_until_open_and_waits_for_those_in_flight() {
        let gate = Gate::default();
        let pass = gate.enter();
        assert!(!gate.close(Duration::from_millis(20)));
        drop(pass);
        assert!(gate.close(Duration::from_millis(20)));
        gate.open();
        drop(gate.enter());
    }
}
