//! The bottom layer of every benchmark mode: what a load looks like (scenarios), how a round is
//! driven and measured (wrk, h2load, oha for HTTP/3 and at a fixed rate; the server's CPU over the
//! round's window, and its wait for a CPU), rounds taken in turn and written as JSON, medians with
//! their min–max, and RSS with idle connections.
//! It knows nothing of which servers run; the tools themselves and /proc are read by `crate::tools`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::tools::net::Stream;
use crate::tools::oha::{self, OhaRun};
use crate::tools::procfs::{
    clock_ticks_per_second, cpu_ticks, run_queue_ns, status_kib, user_system_ticks,
};
use crate::tools::{h2load, pinned};

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
    /// Socket errors and non-2xx answers.
    pub errors: u64,
    /// The non-2xx answers among the errors.
    pub non_2xx: u64,
}

impl Round {
    /// The median (and range) server CPU per request of `rounds`.
    pub fn cpu(rounds: &[Round]) -> Stat {
        Stat::of(rounds.iter().map(|r| r.cpu_us_per_req))
    }

    /// The median (and range) requests per second of `rounds`.
    pub fn rps(rounds: &[Round]) -> Stat {
        Stat::of(rounds.iter().map(|r| r.rps))
    }
}

/// One server's `rounds` as results.json holds them: medians, min–max and every round.
pub fn rounds_json(rounds: &[Round]) -> serde_json::Map<String, serde_json::Value> {
    let (rps, cpu) = (Round::rps(rounds), Round::cpu(rounds));
    let value = serde_json::json!({
        "median": { "rps": rps.median, "cpu_us_per_req": cpu.median },
        "min_max": { "rps": [rps.min, rps.max], "cpu_us_per_req": [cpu.min, cpu.max] },
        "rounds": rounds.iter().map(|x| serde_json::json!({
            "rps": x.rps, "requests": x.requests, "cpu_us_per_req": x.cpu_us_per_req,
            "p50_ms": x.p50_ms, "p99_ms": x.p99_ms, "errors": x.errors, "non_2xx": x.non_2xx,
        })).collect::<Vec<_>>(),
    });
    match value {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("json! of braces is an object"),
    }
}

/// [`rounds_json`] for rounds of streams: each round without the request latencies (`p50_ms`,
/// `p99_ms`), which the route's length makes, and with its own figures `extra` (a JSON object a
/// round) added.
pub fn stream_rounds_json(
    rounds: &[Round],
    extra: impl IntoIterator<Item = serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut map = rounds_json(rounds);
    if let Some(serde_json::Value::Array(list)) = map.get_mut("rounds") {
        for (doc, extra) in list.iter_mut().zip(extra) {
            if let (serde_json::Value::Object(o), serde_json::Value::Object(extra)) = (doc, extra) {
                o.remove("p50_ms");
                o.remove("p99_ms");
                o.extend(extra);
            }
        }
    }
    map
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

/// Runs `work` and returns what it returned with the CPU time (µs) process `pid` used meanwhile.
pub fn server_cpu_us<T>(pid: u32, work: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let (out, cpu) = server_cpu(pid, work)?;
    Ok((out, cpu.total_us()))
}

/// The CPU time a process used over some work, in µs: in user space, and in the kernel on its
/// behalf (system calls, and on loopback the receiving side's TCP too).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUsed {
    pub user_us: f64,
    pub system_us: f64,
}

impl CpuUsed {
    pub fn total_us(self) -> f64 {
        self.user_us + self.system_us
    }
}

/// Runs `work` and returns what it returned with the CPU time process `pid` used meanwhile.
pub fn server_cpu<T>(pid: u32, work: impl FnOnce() -> Result<T>) -> Result<(T, CpuUsed)> {
    let before = user_system_ticks(pid)?;
    let out = work()?;
    let after = user_system_ticks(pid)?;
    let us = |ticks: u64| ticks as f64 / clock_ticks_per_second() * 1e6;
    let cpu = CpuUsed {
        user_us: us(after.0.saturating_sub(before.0)),
        system_us: us(after.1.saturating_sub(before.1)),
    };
    Ok((out, cpu))
}

/// Runs `work` and returns what it returned with the CPU time process `pid` used meanwhile and how
/// long (ms) it waited for a CPU meanwhile (its run-queue time: other work there).
pub fn server_cpu_and_wait<T>(
    pid: u32,
    work: impl FnOnce() -> Result<T>,
) -> Result<(T, CpuUsed, f64)> {
    let queued = run_queue_ns(pid)?;
    let (out, cpu) = server_cpu(pid, work)?;
    let waited = run_queue_ns(pid)?.saturating_sub(queued);
    Ok((out, cpu, waited as f64 / 1e6))
}

/// The wrk command for a scenario against `url`, pinned to `client_cpus`.
pub fn wrk_command(
    sc: Scenario,
    client_cpus: &str,
    duration: u64,
    lua: &Path,
    url: &str,
) -> Command {
    let mut cmd = pinned(Some(client_cpus), "wrk");
    cmd.args(["-t1", "--latency"])
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
    measure_command(pid, &mut wrk_command(sc, client_cpus, duration, lua, url))
}

/// One round of the wrk command `cmd` against the server `pid`: wrk's figures and the server's CPU
/// per request over the same window.
pub fn measure_command(pid: u32, cmd: &mut Command) -> Result<Round> {
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
            r.non_2xx = words.last().and_then(|n| n.parse().ok()).unwrap_or(0);
            r.errors += r.non_2xx;
        }
    }
    r
}

/// One h2load round (`-c CONNS -m STREAMS`, one thread) against the server `pid` at `url`: (req/s,
/// server CPU µs per request).
pub fn h2load_round(
    pid: u32,
    url: &str,
    client_cpus: &str,
    duration: u64,
    conns: u32,
    streams: u32,
) -> Result<(f64, f64)> {
    let mut cmd = h2load::command(Some(client_cpus), conns, streams, duration, url);
    let (report, cpu_us) = server_cpu_us(pid, || h2load::run(&mut cmd))?;
    if report.succeeded == 0 {
        bail!("h2load got no answer from {url}");
    }
    Ok((report.rps, cpu_us / report.succeeded as f64))
}

/// HTTP/3 load from oha (built with its `http3` feature; `cargo xtask setup` installs it): one runtime
/// thread pinned to the client CPUs, trusting the run's certificate, JSON report.
pub struct Oha<'a> {
    pub client_cpus: &'a str,
    /// The run's certificate, which oha verifies the servers' against.
    pub cacert: &'a Path,
}

impl Oha<'_> {
    /// `oha` against `url` over HTTP/3 with `conns` connections × `streams` concurrent streams; the
    /// caller adds how long (`-z`) and how fast (`-q`).
    pub fn command(&self, url: &str, conns: usize, streams: usize) -> Result<Command> {
        let mut cmd = oha::command(Some(self.client_cpus), oha::Output::Json)?;
        cmd.args(["--http-version", "3", "--cacert"])
            .arg(self.cacert)
            .args(["-c", &conns.to_string(), "-p", &streams.to_string()])
            .arg(url);
        Ok(cmd)
    }

    /// One round of `-c 50 -p 16` (50 connections, 16 concurrent streams each) for `duration` seconds
    /// against the server `pid`: (req/s, server CPU µs per request), counting 200 answers only, both
    /// over the `duration` (oha's own total also holds its wait for the server to close each
    /// connection after GOAWAY, 30 s with Caddy: its idle timeout).
    pub fn round(&self, pid: u32, url: &str, duration: u64) -> Result<(f64, f64)> {
        let mut cmd = self.command(url, 50, 16)?;
        cmd.args(["-z", &format!("{duration}s")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let before = cpu_ticks(pid)?;
        let client = cmd.spawn().context("run oha")?;
        sleep(Duration::from_secs(duration) + OHA_START);
        let cpu_us = cpu_ticks(pid)?.saturating_sub(before) as f64 / clock_ticks_per_second() * 1e6;
        let out = client.wait_with_output()?;
        let run = oha::parse(&String::from_utf8_lossy(&out.stdout))
            .with_context(|| format!("oha: {}", String::from_utf8_lossy(&out.stderr)))?;
        run.check(url)?;
        Ok((run.ok as f64 / duration as f64, cpu_us / run.ok as f64))
    }
}

/// oha over HTTP/1.1 at a fixed `rate` (requests/s over all `conns` connections) for `secs`, one
/// runtime thread pinned to `client_cpus`, each latency counted from when its request was due
/// (`--latency-correction`: a slow answer does not hide the requests queued behind it).
pub fn oha_at_rate(
    client_cpus: &str,
    url: &str,
    rate: u32,
    conns: u32,
    secs: u64,
) -> Result<OhaRun> {
    let mut cmd = oha::command(Some(client_cpus), oha::Output::Json)?;
    cmd.arg("--latency-correction")
        .args(["-q", &rate.to_string(), "-c", &conns.to_string()])
        .args(["-z", &format!("{secs}s"), url]);
    oha::run(&mut cmd)
}

/// How long oha takes to start its clock, added to a round's measured window.
const OHA_START: Duration = Duration::from_millis(100);

/// RSS with `n` idle keep-alive connections, each having made one request.
pub struct Memory {
    pub server: String,
    pub connections: usize,
    pub baseline_kib: u64,
    pub rss_kib: u64,
    pub peak_kib: u64,
}

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

/// Runs `work` with this thread — and so the server and the client it starts, which inherit it — at
/// SCHED_FIFO priority 1 (`chrt`), then back at the normal policy; whether it could. On a busy
/// machine a server or client otherwise waits for a CPU now and then for tens of ms, and a latency
/// measurement's tail (or a pool's queue, which starts at each arrival as statico reads it) is that
/// wait. Both use a sliver of a CPU, so running them first costs the machine's other work little.
pub fn raised(work: impl FnOnce()) -> bool {
    let chrt = |args: &[&str]| {
        std::process::Command::new("chrt")
            .args(args)
            .arg(std::process::id().to_string())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let raised = chrt(&["-f", "-p", "1"]);
    work();
    if raised {
        chrt(&["-o", "-p", "0"]);
    }
    raised
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_of_streams_has_its_own_figures_in_place_of_request_latencies() {
        let round = Round {
            rps: 100.0,
            requests: 200,
            ..Round::default()
        };
        let map = stream_rounds_json(&[round], [serde_json::json!({ "streams": 4 })]);
        let doc = &map["rounds"][0];
        assert_eq!(
            (&doc["requests"], &doc["streams"]),
            (&200.into(), &4.into())
        );
        assert!(
            doc.get("p50_ms").is_none() && doc.get("p99_ms").is_none(),
            "{doc}"
        );
        assert_eq!(map["median"]["rps"], 100.0);
    }

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
    fn wrk_reports_parse() {
        let wrk = "  Latency Distribution\n     50%  250.00us\n     99%    1.20ms\n  1000 requests in 2.00s, 1 MB read\n  Socket errors: connect 0, read 2, write 0, timeout 1\nRequests/sec:    500.00\n";
        let r = parse_wrk(wrk);
        assert_eq!((r.requests, r.rps, r.errors), (1000, 500.0, 3));
        assert_eq!((r.p50_ms, r.p99_ms), (0.25, 1.2));
    }
}
