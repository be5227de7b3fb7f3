//! The bottom layer of every benchmark mode: what a load looks like (scenarios), how it is driven (wrk,
//! h2load), and how a server is measured — CPU ticks from /proc over the measured window, RSS from
//! /proc/PID/status, ports, rounds taken in turn, and medians with their min–max. It knows nothing of
//! which servers run.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The body every server answers with.
pub const BODY: &str = "Hello, World!";

/// One load: wrk with this many connections, requests per pipelined batch, and `Connection: close`.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub connections: u32,
    pub pipeline: u32,
    pub close: bool,
}

pub const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "keep-alive c50",
        connections: 50,
        pipeline: 1,
        close: false,
    },
    Scenario {
        name: "keep-alive c256",
        connections: 256,
        pipeline: 1,
        close: false,
    },
    Scenario {
        name: "pipelined x16 c256",
        connections: 256,
        pipeline: 16,
        close: false,
    },
    Scenario {
        name: "connection: close c50",
        connections: 50,
        pipeline: 1,
        close: true,
    },
];

/// The RSS-only scenario: this many idle keep-alive connections.
pub const IDLE_SCENARIO: &str = "idle keep-alive";

/// The wrk script that sends `args[1]` requests per batch.
pub const PIPELINE_LUA: &str = r#"init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) or 16 do r[i] = wrk.format("GET", "/") end
  req = table.concat(r)
end
request = function() return req end
"#;

/// One measured round of one server under one scenario.
#[derive(Clone, Debug, Default)]
pub struct Round {
    pub rps: f64,
    pub requests: u64,
    pub cpu_us_per_req: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
}

/// A median with the range it came from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// The median (the upper one of an even count), min and max of `values`; zeros when empty.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Stat {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return Stat::default();
        }
        v.sort_by(f64::total_cmp);
        Stat {
            median: v[v.len() / 2],
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

/// Runs `round` on every item once per round, in turn (A B C A B C …), so that drift in the machine
/// spreads over all of them; the results per item, in round order.
pub fn interleave<S, R>(
    items: &[S],
    rounds: usize,
    mut round: impl FnMut(&S) -> Result<R>,
) -> Result<Vec<Vec<R>>> {
    let mut results: Vec<Vec<R>> = items.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (item, results) in items.iter().zip(results.iter_mut()) {
            results.push(round(item)?);
        }
    }
    Ok(results)
}

pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits (up to 10 s) until something accepts connections on 127.0.0.1:`port`.
pub fn wait_port(port: u16) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        sleep(Duration::from_millis(50));
    }
    bail!("server on port {port} did not come up")
}

/// utime + stime of a whole process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').context("stat format")? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

pub fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Runs `work` and returns what it returned with the CPU time (µs) process `pid` used meanwhile.
pub fn server_cpu_us<T>(pid: u32, work: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let before = cpu_ticks(pid)?;
    let out = work()?;
    let after = cpu_ticks(pid)?;
    Ok((
        out,
        (after - before) as f64 / clock_ticks_per_second() * 1e6,
    ))
}

/// A `Vm…:` line of /proc/PID/status, in KiB.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The wrk command for a scenario against `url`, pinned to `client_cpus`.
pub fn wrk_command(
    sc: Scenario,
    client_cpus: &str,
    duration: u64,
    lua: &Path,
    url: &str,
) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", client_cpus, "wrk", "-t1", "--latency"])
        .arg(format!("-c{}", sc.connections))
        .arg(format!("-d{duration}s"));
    if sc.close {
        cmd.args(["-H", "Connection: close"]);
    }
    if sc.pipeline > 1 {
        cmd.arg("-s")
            .arg(lua)
            .arg(url)
            .arg("--")
            .arg(sc.pipeline.to_string());
    } else {
        cmd.arg(url);
    }
    cmd
}

/// One round of `sc` against the server `pid` at `url`: wrk's figures and the server's CPU per
/// request over the same window.
pub fn measure(
    pid: u32,
    url: &str,
    sc: Scenario,
    client_cpus: &str,
    duration: u64,
    lua: &Path,
) -> Result<Round> {
    let mut cmd = wrk_command(sc, client_cpus, duration, lua, url);
    let (out, cpu_us) = server_cpu_us(pid, || cmd.output().context("run wrk"))?;
    if !out.status.success() {
        bail!("wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut r = parse_wrk(&String::from_utf8_lossy(&out.stdout));
    if r.requests > 0 {
        r.cpu_us_per_req = cpu_us / r.requests as f64;
    }
    Ok(r)
}

/// wrk's report: requests, req/s, p50/p99 (with `--latency`), socket errors and non-2xx answers.
pub fn parse_wrk(text: &str) -> Round {
    let mut r = Round::default();
    let ms = |v: &str| -> f64 {
        let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
        let n: f64 = num.parse().unwrap_or(0.0);
        match unit {
            "us" => n / 1000.0,
            "s" => n * 1000.0,
            _ => n,
        }
    };
    for line in text.lines() {
        let t = line.trim();
        let words: Vec<&str> = t.split_whitespace().collect();
        if t.starts_with("Requests/sec:") {
            r.rps = words[1].parse().unwrap_or(0.0);
        } else if t.contains("requests in") {
            r.requests = words[0].parse().unwrap_or(0);
        } else if t.starts_with("50%") {
            r.p50_ms = ms(words[1]);
        } else if t.starts_with("99%") {
            r.p99_ms = ms(words[1]);
        } else if t.starts_with("Socket errors:") {
            r.errors += t
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<u64>().ok())
                .sum::<u64>();
        } else if t.starts_with("Non-2xx or 3xx responses:") {
            r.errors += words.last().and_then(|n| n.parse().ok()).unwrap_or(0);
        }
    }
    r
}

/// One h2load round (`-c 50 -m 16`, one thread) against the server `pid` at `url`: (req/s, server
/// CPU µs per request).
pub fn h2load_round(pid: u32, url: &str, client_cpus: &str, duration: u64) -> Result<(f64, f64)> {
    let mut cmd = Command::new("taskset");
    cmd.args([
        "-c",
        client_cpus,
        "h2load",
        "-c",
        "50",
        "-m",
        "16",
        "-t",
        "1",
    ])
    .args(["-D", &duration.to_string()])
    .arg(url);
    let (out, cpu_us) = server_cpu_us(pid, || {
        cmd.output()
            .context("run h2load (cargo xtask setup installs nghttp2-client)")
    })?;
    let (done, rps) = parse_h2load(&String::from_utf8_lossy(&out.stdout));
    if done == 0.0 {
        bail!("h2load got no answer from {url}");
    }
    Ok((rps, cpu_us / done))
}

/// h2load's report: (requests succeeded, req/s).
pub fn parse_h2load(text: &str) -> (f64, f64) {
    let done: f64 = text
        .lines()
        .find(|l| l.starts_with("requests:"))
        .and_then(|l| {
            l.split(',')
                .find(|p| p.contains("succeeded"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0.0);
    let rps: f64 = text
        .lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(',').nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    (done, rps)
}

/// RSS with `n` idle keep-alive connections, each having made one request.
pub struct Memory {
    pub server: String,
    pub connections: usize,
    pub baseline_kib: u64,
    pub rss_kib: u64,
    pub peak_kib: u64,
}

/// A client connection the idle-memory measure can talk through: a TCP stream, or TLS over one.
pub trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// Opens `n` keep-alive connections to the server `pid` on `port`, one request each, and reads its RSS
/// while they sit idle.
pub fn idle_rss(server: &str, pid: u32, port: u16, n: usize) -> Result<Memory> {
    idle_rss_with(server, pid, n, || {
        let c = TcpStream::connect(("127.0.0.1", port)).context("open an idle connection")?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Box::new(c))
    })
}

/// [`idle_rss`] over the connections `open` makes (TLS ones, say).
pub fn idle_rss_with(
    server: &str,
    pid: u32,
    n: usize,
    mut open: impl FnMut() -> Result<Box<dyn Stream>>,
) -> Result<Memory> {
    let baseline_kib = status_kib(pid, "VmRSS:").unwrap_or(0);
    let mut conns = Vec::with_capacity(n);
    let request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
    for _ in 0..n {
        let mut c = open()?;
        c.write_all(request)?;
        c.flush()?;
        conns.push(c);
    }
    let mut buf = [0u8; 512];
    let mut answered = 0;
    for c in conns.iter_mut() {
        if c.read(&mut buf).map(|k| k > 0).unwrap_or(false) {
            answered += 1;
        }
    }
    sleep(Duration::from_millis(300));
    let rss_kib = status_kib(pid, "VmRSS:").unwrap_or(0);
    drop(conns);
    sleep(Duration::from_millis(300));
    Ok(Memory {
        server: server.to_string(),
        connections: answered,
        baseline_kib,
        rss_kib,
        peak_kib: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_the_median_with_its_range() {
        assert_eq!(
            Stat::of(vec![3.0, 1.0, 2.0]),
            Stat {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Stat::of(vec![]), Stat::default());
        let even = Stat::of([4.0, 1.0, 3.0, 2.0]);
        assert_eq!((even.median, even.min, even.max), (3.0, 1.0, 4.0));
    }

    #[test]
    fn interleave_takes_turns_and_stops_at_the_first_error() {
        let mut order = Vec::new();
        let rows = interleave(&["a", "b"], 2, |s| {
            order.push(*s);
            Ok(s.len())
        })
        .unwrap();
        assert_eq!(order, ["a", "b", "a", "b"]);
        assert_eq!(rows, [[1, 1], [1, 1]]);
        let failed = interleave(&["a", "b"], 2, |s| match *s {
            "b" => anyhow::bail!("b failed"),
            _ => Ok(()),
        });
        assert!(failed.is_err());
    }

    #[test]
    fn wrk_and_h2load_reports_parse() {
        let wrk = "  Latency Distribution\n     50%  250.00us\n     99%    1.20ms\n  1000 requests in 2.00s, 1 MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\nRequests/sec:    500.00\n";
        let r = parse_wrk(wrk);
        assert_eq!((r.requests, r.rps, r.errors), (1000, 500.0, 3));
        assert_eq!((r.p50_ms, r.p99_ms), (0.25, 1.2));
        let h2 = "finished in 2.00s, 1234.50 req/s, 1MB/s\nrequests: 2469 total, 2469 started, 2469 done, 2469 succeeded, 0 failed\n";
        assert_eq!(parse_h2load(h2), (2469.0, 1234.5));
    }
}
