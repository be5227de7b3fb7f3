//! A load of server-sent event streams asked for with a POST (an OpenAI-style streamed completion):
//! `conns` keep-alive HTTP/1.1 connections, one thread each, each asking for `per_conn` streams in
//! turn, and every event's arrival timed on the client. A stream's first event is timed from the
//! request's last byte (time to first token); each later one from the event before it (inter-token
//! latency). Events are counted as they are read: an event ends at a blank line, and `data: [DONE]`
//! ends a stream without being one. The threads run on the client CPUs given (`taskset -p`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

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

/// How long a connection may be silent before its stream counts as failed.
const SILENT: Duration = Duration::from_secs(10);

/// Runs `ask` to its end: every connection's streams, one after another.
pub fn run(ask: &Ask) -> Result<Seen> {
    let ask = ask.clone();
    std::thread::spawn(move || {
        pin_this_thread(&ask.cpus)?;
        Ok(connections(&ask))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client's thread panicked"))?
}

/// `taskset -p -c CPUS` on the calling thread, whose threads then inherit it.
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

/// Every connection on a thread of its own; what they saw, together.
fn connections(ask: &Ask) -> Seen {
    let start = Instant::now();
    let threads: Vec<_> = (0..ask.conns)
        .map(|_| {
            let ask = ask.clone();
            std::thread::spawn(move || connection(&ask))
        })
        .collect();
    let mut seen = Seen::default();
    for t in threads {
        let one = t.join().unwrap_or_else(|_| Seen {
            failed: 1,
            first_error: Some("a client thread panicked".into()),
            ..Seen::default()
        });
        seen.streams += one.streams;
        seen.failed += one.failed;
        seen.events += one.events;
        seen.first_error = seen.first_error.take().or(one.first_error);
        seen.ttft_us.extend(one.ttft_us);
        seen.itl_us.extend(one.itl_us);
    }
    seen.elapsed = start.elapsed();
    seen
}

/// One connection's streams; a failure ends the connection (its remaining streams count as failed).
fn connection(ask: &Ask) -> Seen {
    let mut seen = Seen::default();
    let result = (|| -> Result<()> {
        let tcp = TcpStream::connect(("127.0.0.1", ask.port)).context("connect")?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(SILENT))?;
        let request = request(ask);
        let mut reader = BufReader::new(tcp.try_clone()?);
        let mut writer = tcp;
        for _ in 0..ask.per_conn {
            writer.write_all(request.as_bytes()).context("send")?;
            let asked = Instant::now();
            let times = stream(&mut reader)?;
            seen.streams += 1;
            seen.events += times.len() as u64;
            let mut before = asked;
            for (i, t) in times.into_iter().enumerate() {
                let us = t.duration_since(before).as_secs_f64() * 1e6;
                match i {
                    0 => seen.ttft_us.push(us),
                    _ => seen.itl_us.push(us),
                }
                before = t;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        seen.failed = ask.per_conn as u64 - seen.streams;
        seen.first_error = Some(format!("{e:#}"));
    }
    seen
}

fn request(ask: &Ask) -> String {
    format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\n\r\n{}",
        ask.path,
        ask.port,
        ask.body.len(),
        ask.body
    )
}

/// One answer read to its end: a 200 with a chunked body; the arrival time of each of its events.
fn stream(reader: &mut impl BufRead) -> Result<Vec<Instant>> {
    let mut line = String::new();
    reader.read_line(&mut line).context("read the status")?;
    if !line.starts_with("HTTP/1.1 200") {
        bail!("answered {:?}", line.trim_end());
    }
    let mut chunked = false;
    loop {
        line.clear();
        reader.read_line(&mut line).context("read the head")?;
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        chunked |= l.starts_with("transfer-encoding:") && l.contains("chunked");
    }
    if !chunked {
        bail!("the answer is not chunked");
    }
    let mut events = Events::default();
    loop {
        line.clear();
        reader.read_line(&mut line).context("read a chunk's size")?;
        let hex = line.trim_end().split(';').next().unwrap_or_default();
        let size = usize::from_str_radix(hex, 16).with_context(|| format!("chunk size {hex:?}"))?;
        if size == 0 {
            line.clear();
            reader.read_line(&mut line)?; // the empty trailer
            return Ok(events.times);
        }
        let mut data = vec![0; size + 2];
        reader.read_exact(&mut data).context("read a chunk")?;
        events.add(&data[..size], Instant::now());
    }
}

/// A stream's bytes as they come, cut into events at blank lines.
#[derive(Default)]
struct Events {
    pending: Vec<u8>,
    times: Vec<Instant>,
}

impl Events {
    /// `data`, arrived at `at`: every event it completes is timed `at`.
    fn add(&mut self, data: &[u8], at: Instant) {
        self.pending.extend_from_slice(data);
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            if event.starts_with(b"data:") && !event.starts_with(b"data: [DONE]") {
                self.times.push(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_answer_gives_one_time_per_event_and_done_is_none() {
        let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                      9\r\ndata: a\n\n\r\n\
                      10\r\ndata: b\n\ndata: c\r\n\
                      2\r\n\n\n\r\n\
                      e\r\ndata: [DONE]\n\n\r\n\
                      0\r\n\r\n";
        let mut reader = BufReader::new(answer.as_bytes());
        assert_eq!(stream(&mut reader).unwrap().len(), 3);
        assert!(reader.fill_buf().unwrap().is_empty());
        let refused = "HTTP/1.1 429 Too Many Requests\r\n\r\n";
        assert!(stream(&mut BufReader::new(refused.as_bytes())).is_err());
    }
}
