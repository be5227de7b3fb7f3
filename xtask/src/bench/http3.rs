//! `cargo xtask bench --http3`: statico `--http3` (both runtimes) against Caddy with HTTP/3, in one run.
//!
//! HTTP/3 is the one protocol nginx from Debian does not serve, so the peer is Caddy from Debian
//! (quic-go): the same ECDSA P-256 certificate for every server (made with openssl for the run), the
//! same body and Content-Type, one statico worker (`-t 1`; its QUIC endpoint runs on a thread of its
//! own pinned with it, whatever the runtime) against Caddy with `GOMAXPROCS=1`, every server pinned to
//! the server CPUs. The load is oha (Debian's h2load is built without HTTP/3) over HTTP/3, one thread
//! pinned to the client CPUs, 50 connections × 16 concurrent streams; servers interleaved over rounds,
//! medians with min–max. Measured:
//! - RSS with [`IDLE_CONNS`] HTTP/3 connections open and idle (oha `-c 1000 -p 1 -q 1`), first, while
//!   each server's heap is fresh, read once the server's CPU has gone quiet (handshakes done);
//! - req/s and server CPU µs per request (CPU ticks from /proc over the round, 200 answers from oha);
//! - RSS and peak RSS after the load.
//!
//! `report.txt` holds the tables and whether statico meets its target (server CPU per request
//! ≤ [`TARGET`]× Caddy's); `chart.svg` each statico's CPU relative to Caddy's. Without caddy the run
//! says so and measures statico alone.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::measure::Oha;
use super::ratio::{interleave, verdicts, Report};
use super::report::{work_dir, RunInfo};
use super::servers::{certificate, start_caddy, statico_args, Cert};
use crate::tools::oha;
use crate::tools::procfs::{cpu_ticks, status_kib};
use crate::tools::server::{start_statico, ServerUnderTest};

/// The target: statico's server CPU per request at most this times Caddy's.
const TARGET: f64 = 0.5;
/// Idle HTTP/3 connections held for the memory measure.
const IDLE_CONNS: usize = 1_000;
/// The table's group name (and the chart's).
const GROUP: &str = "h3 c50 x16";

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    let dir = work_dir(root, "http3")?;
    let cert = certificate(&dir)?;
    let oha = Oha {
        client_cpus: run.client_cpus,
        cacert: &cert.cert,
    };
    let servers = start_servers(root, &dir, run.server_cpus, &cert)?;
    for s in &servers {
        wait_h3(s, &oha)?;
    }
    let mut report = Report::against("caddy", format!(
        "HTTP/3 (QUIC, TLS 1.3, ECDSA P-256), oha -c 50 -p 16 pinned to CPU {}, one server worker on CPU {}, {} round(s) of {} s, medians (min-max)\n",
        run.client_cpus, run.server_cpus, run.rounds, run.duration
    ));
    idle_memory(&mut report, &servers, &oha)?;
    let rows = interleave(&servers, run.rounds, |s| {
        oha.round(s.pid(), &s.url(), run.duration)
    })?;
    let title = "50 connections x 16 concurrent streams (oha --http-version 3 -c 50 -p 16)";
    report.table(GROUP, title, "req/s", "µs CPU/req", &servers, &rows);
    memory_after(&mut report, &servers);
    target(&mut report);
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let title = "HTTP/3: server CPU per request relative to Caddy (1.0), lower is better";
    report.chart(&dir.join("chart.svg"), title)?;
    Ok(report.text)
}

/// statico `--http3` on each runtime, and Caddy if it starts (else the reason is printed and the run
/// goes on without it).
fn start_servers(root: &Path, dir: &Path, cpus: &str, cert: &Cert) -> Result<Vec<ServerUnderTest>> {
    let mut servers = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let args: Vec<&str> = ["--http3"]
            .into_iter()
            .chain(statico_args(runtime))
            .chain(cert.statico_args())
            .collect();
        let name = format!("statico-{runtime}");
        servers.push(start_statico(root, &name, Some(cpus), &args)?);
    }
    match start_caddy(dir, cpus, cert) {
        Ok(caddy) => servers.push(caddy),
        Err(e) => eprintln!("bench: caddy skipped, no ratio to report: {e:#}"),
    }
    Ok(servers)
}

/// Waits (up to 10 s) until `s` answers 16 requests over HTTP/3: its UDP side may come up after its
/// TCP port does.
fn wait_h3(s: &ServerUnderTest, oha: &Oha) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut cmd = oha.command(&s.url(), 1, 1)?;
        cmd.args(["-n", "16", "--connect-timeout", "1s", "-t", "2s"]);
        let out = cmd.output().context("run oha")?;
        let run = oha::parse(&String::from_utf8_lossy(&out.stdout));
        let checked = run.and_then(|r| r.check(&s.url()).map(|_| r.ok));
        match checked {
            Ok(16) => return Ok(()),
            _ if start.elapsed() < Duration::from_secs(10) => sleep(Duration::from_millis(200)),
            other => bail!("{} does not answer over HTTP/3: {other:?}", s.name),
        }
    }
}

/// RSS of each server with [`IDLE_CONNS`] HTTP/3 connections open: oha opens them all at once and
/// sends one request a second over them; the RSS is read once the server's CPU has been still for
/// half a second (the handshakes done). Errors oha saw (a connection closed, say) are shown, not fatal.
fn idle_memory(report: &mut Report, servers: &[ServerUnderTest], oha: &Oha) -> Result<()> {
    let _ = writeln!(
        report.text,
        "\n{IDLE_CONNS} idle HTTP/3 connections (oha -c {IDLE_CONNS} -p 1 -q 1, opened at once)\n  {:<17} {:>11} {:>10} {:>10} {:>14} {:>8}",
        "server", "connections", "RSS KiB", "idle KiB", "KiB per conn", "errors"
    );
    for s in servers {
        let baseline = status_kib(s.pid(), "VmRSS:").unwrap_or(0);
        let mut cmd = oha.command(&s.url(), IDLE_CONNS, 1)?;
        cmd.args(["-q", "1", "-z", "8s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let client = cmd.spawn().context("run oha")?;
        let quiet = wait_quiet(s.pid(), Duration::from_secs(6));
        let rss = status_kib(s.pid(), "VmRSS:").unwrap_or(0);
        let out = client.wait_with_output()?;
        quiet?;
        let run = oha::parse(&String::from_utf8_lossy(&out.stdout))?;
        if run.ok == 0 {
            bail!("no answer over {IDLE_CONNS} idle connections to {}", s.name);
        }
        let errors: u64 = run.failures.iter().map(|f| f.1).sum();
        let per = rss.saturating_sub(baseline) as f64 / IDLE_CONNS as f64;
        eprintln!(
            "  {:<17} {IDLE_CONNS} idle HTTP/3 connections: {per:.1} KiB each, errors {:?}",
            s.name, run.failures
        );
        let _ = writeln!(
            report.text,
            "  {:<17} {IDLE_CONNS:>11} {rss:>10} {baseline:>10} {per:>14.1} {errors:>8}",
            s.name
        );
    }
    Ok(())
}

/// Waits until process `pid` has used no CPU for half a second, after at least one second; fails after
/// `limit`.
fn wait_quiet(pid: u32, limit: Duration) -> Result<()> {
    let start = Instant::now();
    sleep(Duration::from_secs(1));
    let mut last = cpu_ticks(pid)?;
    while start.elapsed() < limit {
        sleep(Duration::from_millis(500));
        let now = cpu_ticks(pid)?;
        if now == last {
            return Ok(());
        }
        last = now;
    }
    bail!("server {pid} was still busy {limit:?} after the idle connections were opened")
}

/// RSS and peak RSS of each server after the load.
fn memory_after(report: &mut Report, servers: &[ServerUnderTest]) {
    let _ = writeln!(
        report.text,
        "\nmemory after the load\n  {:<17} {:>12} {:>12}",
        "server", "RSS KiB", "peak KiB"
    );
    for s in servers {
        let _ = writeln!(
            report.text,
            "  {:<17} {:>12} {:>12}",
            s.name,
            status_kib(s.pid(), "VmRSS:").unwrap_or(0),
            status_kib(s.pid(), "VmHWM:").unwrap_or(0)
        );
    }
}

/// Whether each statico meets the target against Caddy (nothing to say without Caddy).
fn target(report: &mut Report) {
    let said = verdicts(report.ratios(GROUP), TARGET, "caddy did not run, no ratio");
    let _ = writeln!(
        report.text,
        "\ntarget: statico's server CPU per request <= {TARGET:.2}x caddy's: {said}"
    );
}
