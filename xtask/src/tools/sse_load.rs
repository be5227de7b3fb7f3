//! A load of server-sent event streams asked for with a POST (an OpenAI-style streamed completion):
//! `conns` keep-alive HTTP/1.1 connections, each asking for `per_conn` streams in turn, and every
//! event's arrival timed on the client. One thread drives every connection over epoll (mio), as
//! h2load does, so that an event is timed when the client's one thread gets the CPU rather than
//! when one of hundreds of threads does. A stream's first event is timed from the request's send
//! (time to first token); each later one from the event before it (inter-token latency). Events are
//! counted as they are read: an event ends at a blank line, and `data: [DONE]` ends a stream
//! without being one. The thread runs on the client CPUs given (`taskset -p`).

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mio::net::TcpStream;
use mio::{Events as Ready, Interest, Poll, Token};

/// What to ask: `path` on 127.0.0.1:`port` with the JSON `body`, over `conns` connections,
/// `per_conn` streams on each, from the CPUs `cpus`.
#[derive(Clone, Debug)]
pub struct Ask {
    pub cpus: String,
    pub port: u16,
    pub path: String,
    pub body: String,
    pub conns: usize,
    pub per_conn: usize,
}

/// What a load saw: whole streams, failed ones (with the first failure said), events, the time
/// to each stream's first event and between events (µs), and the load's wall time.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub streams: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub events: u64,
    pub ttft_us: Vec<f64>,
    pub itl_us: Vec<f64>,
    pub elapsed: Duration,
}

/// How long every connection may be silent before the ones left count as failed.
const SILENT: Duration = Duration::from_secs(10);

/// Runs `ask` to its end on a thread of its own, pinned to `ask.cpus`.
pub fn run(ask: &Ask) -> Result<Seen> {
    let ask = ask.clone();
    std::thread::spawn(move || {
        pin_this_thread(&ask.cpus)?;
        drive(&ask)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client's thread panicked"))?
}

/// `taskset -p -c CPUS` on the calling thread.
fn pin_this_thread(cpus: &str) -> Result<()> {
    let me = std::fs::read_link("/proc/thread-self").context("read /proc/thread-self")?;
    let tid = me.file_name().context("no thread id")?;
    let status = std::process::Command::new("taskset")
        .args(["-p", "-c", cpus])
        .arg(tid)
        .stdout(std::process::Stdio::null())
        .status()
        .context("run taskset")?;
    if !status.success() {
        bail!("taskset -p -c {cpus} {tid:?}: {status}");
    }
    Ok(())
}

/// One connection: its socket, the streams it has still to ask for, and the answer being read.
struct Conn {
    socket: TcpStream,
    left: usize,
    asked: Instant,
    answer: Answer,
}

/// Every connection to the end of its streams, or until they all fall silent for [`SILENT`].
fn drive(ask: &Ask) -> Result<Seen> {
    let start = Instant::now();
    let request = request(ask);
    let mut poll = Poll::new()?;
    let mut seen = Seen::default();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    for i in 0..ask.conns {
        let std = std::net::TcpStream::connect(("127.0.0.1", ask.port)).context("connect")?;
        std.set_nodelay(true)?;
        std.set_nonblocking(true)?;
        let mut socket = TcpStream::from_std(std);
        poll.registry()
            .register(&mut socket, Token(i), Interest::READABLE)?;
        let mut conn = Conn {
            socket,
            left: ask.per_conn,
            asked: Instant::now(),
            answer: Answer::default(),
        };
        let sent = send(&mut conn, &request);
        conns.push(settle(conn, sent, &mut seen));
    }
    let mut ready = Ready::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    while conns.iter().any(Option::is_some) {
        poll.poll(&mut ready, Some(SILENT))?;
        if ready.is_empty() {
            let silent = conns.iter().flatten().map(|c| c.left as u64).sum::<u64>();
            seen.failed += silent;
            seen.first_error
                .get_or_insert_with(|| format!("{silent} streams silent for {SILENT:?}"));
            break;
        }
        for event in ready.iter() {
            let i = event.token().0;
            let Some(mut conn) = conns[i].take() else {
                continue;
            };
            let result = receive(&mut conn, &mut buf, &request, &mut seen);
            conns[i] = settle(conn, result, &mut seen);
        }
    }
    seen.elapsed = start.elapsed();
    Ok(seen)
}

/// `conn` if it has streams left and no error; else it is counted (its streams left as failed).
fn settle(conn: Conn, result: Result<()>, seen: &mut Seen) -> Option<Conn> {
    match result {
        Ok(()) if conn.left > 0 => Some(conn),
        Ok(()) => None,
        Err(e) => {
            seen.failed += conn.left as u64;
            seen.first_error.get_or_insert_with(|| format!("{e:#}"));
            None
        }
    }
}

/// Sends the request (small: it fits the socket's empty buffer whole) and starts its clock.
fn send(conn: &mut Conn, request: &[u8]) -> Result<()> {
    conn.socket.write_all(request).context("send")?;
    conn.asked = Instant::now();
    Ok(())
}

/// Reads what `conn` has, each read timed as it returns; a whole answer is counted and the next
/// stream asked for.
fn receive(conn: &mut Conn, buf: &mut [u8], request: &[u8], seen: &mut Seen) -> Result<()> {
    loop {
        let n = match conn.socket.read(buf) {
            Ok(0) => bail!("the server closed the connection"),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("read"),
        };
        let at = Instant::now();
        let mut data = &buf[..n];
        while let Some(rest) = conn.answer.take(data, at)? {
            let times = std::mem::take(&mut conn.answer).times;
            count(seen, conn.asked, &times);
            conn.left -= 1;
            if conn.left == 0 {
                return Ok(());
            }
            if !rest.is_empty() {
                bail!("bytes after the answer, before the next request");
            }
            send(conn, request)?;
            data = rest;
        }
    }
}

/// One whole stream asked at `asked` whose events arrived at `times`.
fn count(seen: &mut Seen, asked: Instant, times: &[Instant]) {
    seen.streams += 1;
    seen.events += times.len() as u64;
    let mut before = asked;
    for (i, t) in times.iter().enumerate() {
        let us = t.duration_since(before).as_secs_f64() * 1e6;
        match i {
            0 => seen.ttft_us.push(us),
            _ => seen.itl_us.push(us),
        }
        before = *t;
    }
}

fn request(ask: &Ask) -> Vec<u8> {
    format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\n\r\n{}",
        ask.path,
        ask.port,
        ask.body.len(),
        ask.body
    )
    .into_bytes()
}

/// Where an answer's reading is: its head, a chunk's size line, a chunk's data (and its CRLF), or
/// the empty trailer after the last chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Part {
    #[default]
    Head,
    Size,
    Data(usize),
    Trailer,
}

/// One answer read as its bytes come: a 200 with a chunked body, cut into events at blank lines,
/// each timed when the read that completed it returned.
#[derive(Debug, Default)]
struct Answer {
    part: Part,
    /// Bytes of the current part not yet whole.
    pending: Vec<u8>,
    /// Body bytes of an event not yet ended.
    event: Vec<u8>,
    times: Vec<Instant>,
}

impl Answer {
    /// Takes `data`, read at `at`; `Some(the bytes after the answer)` once the answer is whole.
    fn take<'a>(&mut self, mut data: &'a [u8], at: Instant) -> Result<Option<&'a [u8]>> {
        loop {
            if let Part::Data(size) = self.part {
                let need = size + 2 - self.pending.len();
                let n = need.min(data.len());
                self.pending.extend_from_slice(&data[..n]);
                data = &data[n..];
                if self.pending.len() < size + 2 {
                    return Ok(None);
                }
                let chunk = std::mem::take(&mut self.pending);
                self.add(&chunk[..size], at);
                self.part = Part::Size;
                continue;
            }
            let end = match self.part {
                Part::Head => b"\r\n\r\n".as_slice(),
                _ => b"\r\n".as_slice(),
            };
            let before = self.pending.len().saturating_sub(end.len() - 1);
            let n = data.len();
            self.pending.extend_from_slice(data);
            let Some(found) = find(&self.pending[before..], end) else {
                return Ok(None);
            };
            let line_end = before + found + end.len();
            let rest = &data[n - (self.pending.len() - line_end)..];
            let line = self.pending.drain(..).take(line_end).collect::<Vec<u8>>();
            data = rest;
            match self.part {
                Part::Head => self.head(&line)?,
                Part::Size => {
                    let text = String::from_utf8_lossy(&line);
                    let hex = text.trim_end().split(';').next().unwrap_or_default();
                    let size = usize::from_str_radix(hex, 16)
                        .with_context(|| format!("chunk size {hex:?}"))?;
                    self.part = if size == 0 {
                        Part::Trailer
                    } else {
                        Part::Data(size)
                    };
                }
                Part::Trailer => return Ok(Some(data)),
                Part::Data(_) => unreachable!("read above"),
            }
        }
    }

    /// The answer's head: a 200 with a chunked body.
    fn head(&mut self, head: &[u8]) -> Result<()> {
        let head = String::from_utf8_lossy(head).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            bail!("answered {:?}", head.lines().next().unwrap_or_default());
        }
        let chunked = head
            .lines()
            .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
        if !chunked {
            bail!("the answer is not chunked");
        }
        self.part = Part::Size;
        Ok(())
    }

    /// Body bytes arrived at `at`: every event they complete is timed `at`.
    fn add(&mut self, data: &[u8], at: Instant) {
        self.event.extend_from_slice(data);
        while let Some(end) = find(&self.event, b"\n\n") {
            let event: Vec<u8> = self.event.drain(..end + 2).collect();
            if event.starts_with(b"data:") && !event.starts_with(b"data: [DONE]") {
                self.times.push(at);
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                          9\r\ndata: a\n\n\r\n\
                          10\r\ndata: b\n\ndata: c\r\n\
                          2\r\n\n\n\r\n\
                          e\r\ndata: [DONE]\n\n\r\n\
                          0\r\n\r\n";

    #[test]
    fn a_chunked_answer_gives_one_time_per_event_and_done_is_none() {
        let at = Instant::now();
        let mut whole = Answer::default();
        let rest = whole.take(ANSWER.as_bytes(), at).unwrap();
        assert_eq!((rest, whole.times.len()), (Some(&b""[..]), 3));
        // The same bytes a few at a time, and the next answer's first bytes after it.
        let mut bits = Answer::default();
        let next = format!("{ANSWER}HTTP/1.1");
        let mut rest = None;
        for piece in next.as_bytes().chunks(3) {
            if let Some(r) = bits.take(piece, at).unwrap() {
                rest = Some(r.len());
                break;
            }
        }
        assert_eq!(bits.times.len(), 3);
        assert!(rest.is_some());
        let refused = "HTTP/1.1 429 Too Many Requests\r\n\r\n";
        assert!(Answer::default().take(refused.as_bytes(), at).is_err());
    }
}
