//! `cargo xtask bench --http2`: statico `--http2` on both runtimes against nginx `http2`, with h2load,
//! in one run.
//!
//! All serve cleartext HTTP/2 by prior knowledge with one worker pinned to the server CPUs; h2load runs
//! pinned to the client CPUs, one thread, for `--duration` seconds, in two scenarios — `-c 50 -m 10`
//! and `-c 256 -m 10` (connections, concurrent streams each); servers are interleaved over the rounds.
//! Reported: requests/s and server CPU µs per request (from /proc), medians, each statico's CPU per
//! request relative to nginx's, and whether the targets hold (≤ [`TARGET`]× nginx, io_uring no worse
//! than tokio). Then each server's RSS with `--idle-conns` h2c connections open, each having made one
//! request.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::measure::{h2load_round, interleave, Stat};
use super::report::{work_dir, RunInfo};
use super::servers::{start_nginx, statico_args, Nginx};
use crate::tools::procfs::status_kib;
use crate::tools::server::{start_statico, ServerUnderTest};

/// statico's server CPU per request must be at most this times nginx's.
const TARGET: f64 = 0.35;

/// The scenarios: h2load's connections and concurrent streams per connection.
const LOADS: [(u32, u32); 2] = [(50, 10), (256, 10)];

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    let (server_cpus, client_cpus) = (run.server_cpus, run.client_cpus);
    let (duration, rounds) = (run.duration, run.rounds);
    let dir = work_dir(root, "http2")?;
    let mut servers = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let args: Vec<&str> = ["--http2"]
            .into_iter()
            .chain(statico_args(runtime))
            .collect();
        let name = format!("statico-{runtime}");
        servers.push(start_statico(root, &name, Some(server_cpus), &args)?);
    }
    servers.push(start_nginx(&dir, server_cpus, Nginx::H2c)?);
    let mut s = String::new();
    for (c, m) in LOADS {
        eprintln!("bench: h2load -c {c} -m {m}");
        let rows = interleave(&servers, rounds, |s| {
            let (rps, cpu) = h2load_round(s.pid(), &s.url(), client_cpus, duration, c, m)?;
            eprintln!("  {:<16} {rps:>10.0} req/s {cpu:>7.2} µs/req", s.name);
            Ok((rps, cpu))
        })?;
        table(&mut s, &servers, &rows, (c, m), run);
    }
    idle_memory(&mut s, &servers, run.idle_conns)?;
    std::fs::write(dir.join("report.txt"), &s)?;
    Ok(s)
}

/// One scenario's medians, ratios to nginx and the targets' verdicts.
fn table(
    s: &mut String,
    servers: &[ServerUnderTest],
    rows: &[Vec<(f64, f64)>],
    (c, m): (u32, u32),
    run: &RunInfo,
) {
    let _ = write!(
        s,
        "\nHTTP/2 (h2c prior knowledge), h2load -c {c} -m {m} -t 1 -D {} pinned to CPU {}, one server worker on CPU {}, {} round(s), medians\n{:<16} {:>12} {:>14} {:>10}\n",
        run.duration, run.client_cpus, run.server_cpus, run.rounds, "server", "req/s", "µs CPU/req", "x nginx"
    );
    let cpu: Vec<f64> = rows
        .iter()
        .map(|r| Stat::of(r.iter().map(|x| x.1)).median)
        .collect();
    let nginx = cpu.last().copied().unwrap_or(f64::NAN);
    for ((server, r), cpu) in servers.iter().zip(rows).zip(&cpu) {
        let rps = Stat::of(r.iter().map(|x| x.0)).median;
        let _ = writeln!(
            s,
            "{:<16} {rps:>12.0} {cpu:>14.2} {:>10.2}",
            server.name,
            cpu / nginx
        );
    }
    let (uring, tokio) = (cpu[0], cpu[1]);
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let _ = writeln!(
        s,
        "target: io-uring <= {TARGET:.2}x nginx: {:.2}x ({}); io-uring <= tokio: {uring:.2} vs {tokio:.2} µs ({})",
        uring / nginx,
        verdict(uring / nginx <= TARGET),
        verdict(uring <= tokio)
    );
}

/// Each server's RSS with `n` idle h2c connections, each having made one request.
fn idle_memory(s: &mut String, servers: &[ServerUnderTest], n: usize) -> Result<()> {
    let _ = write!(
        s,
        "\n{n} idle h2c connections (prior knowledge, one request each)\n{:<16} {:>11} {:>10} {:>10} {:>13}\n",
        "server", "connections", "RSS KiB", "idle KiB", "KiB per conn"
    );
    for server in servers {
        let baseline = status_kib(server.pid(), "VmRSS:").unwrap_or(0);
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(open_h2c(&server.url())?);
        }
        let answered = conns
            .iter_mut()
            .map(|c| answered(c).unwrap_or(false))
            .filter(|&ok| ok)
            .count();
        sleep(Duration::from_millis(500));
        let rss = status_kib(server.pid(), "VmRSS:").unwrap_or(0);
        drop(conns);
        sleep(Duration::from_millis(500));
        let per = rss.saturating_sub(baseline) as f64 / answered.max(1) as f64;
        eprintln!(
            "  {:<16} {answered} idle h2c connections: {per:.1} KiB each",
            server.name
        );
        let _ = writeln!(
            s,
            "{:<16} {answered:>11} {rss:>10} {baseline:>10} {per:>13.1}",
            server.name
        );
    }
    Ok(())
}

/// A connection that sent the preface, an empty SETTINGS and `GET /` on stream 1.
fn open_h2c(url: &str) -> Result<TcpStream> {
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut c = TcpStream::connect(&addr).with_context(|| format!("connect to {addr}"))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    // HEADERS, END_STREAM | END_HEADERS, stream 1: GET http / and a literal :authority.
    hello.extend_from_slice(&[
        0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x01, 0x01, b'b',
    ]);
    c.write_all(&hello)?;
    Ok(c)
}

/// Reads frames until stream 1 ends (a HEADERS or DATA frame on it with END_STREAM).
fn answered(c: &mut TcpStream) -> Result<bool> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = c.read(&mut buf)?;
        if n == 0 {
            return Ok(false);
        }
        seen.extend_from_slice(&buf[..n]);
        let mut at = 0;
        while at + 9 <= seen.len() {
            let len = u32::from_be_bytes([0, seen[at], seen[at + 1], seen[at + 2]]) as usize;
            let (kind, flags) = (seen[at + 3], seen[at + 4]);
            let stream =
                u32::from_be_bytes([seen[at + 5], seen[at + 6], seen[at + 7], seen[at + 8]]);
            if stream == 1 && kind <= 1 && flags & 1 == 1 {
                return Ok(true);
            }
            at += 9 + len;
        }
        if seen.len() > 1 << 20 {
            bail!("no end of stream 1 in 1 MiB");
        }
    }
}
