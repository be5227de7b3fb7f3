//! `cargo xtask bench --tls`: statico over HTTPS (both runtimes) against nginx with TLS, in one run.
//!
//! Same certificate for every server (ECDSA P-256, made with openssl for the run), TLS 1.3, nginx with
//! its session cache and tickets on, access log off, one worker; every server pinned to the server CPUs
//! and the clients to the client CPUs, interleaved over rounds, medians. Measured:
//! - keep-alive c50 and c256 and pipelined ×16 c256 with wrk over https (server CPU per request);
//! - new connections, each a handshake and one request: with `openssl s_time -new` (full handshakes),
//!   and with a rustls client pinned to the client CPUs, full and resumed (TLS 1.3 tickets; s_time's
//!   `-reuse` does not resume TLS 1.3): server CPU per connection;
//! - RSS with 10 000 idle TLS keep-alive connections (1 000 with `--quick`; a rustls client holds them);
//! - HTTP/2 over TLS with h2load `-c 50 -m 16` (statico on both runtimes with `--http2`, nginx `http2 on`).
//!
//! `report.txt` holds the tables, `chart.svg` each statico's server CPU relative to nginx's.
//!
//! The cipher is AES-128-GCM with SHA-256 on both: statico prefers it over the client's order, nginx is
//! given only that TLS 1.3 suite (`ssl_conf_command Ciphersuites`); the group is X25519 (the clients'
//! first key share).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::measure::{
    h2load_round, idle_rss_with, measure, server_cpu_us, Scenario, PIPELINE_LUA, SCENARIOS,
};
use super::ratio::{interleave, Report};
use super::report::{work_dir, RunInfo};
use super::servers::{certificate, start_nginx, statico_args, Cert};
use crate::tools::net::Stream;
use crate::tools::pinned;
use crate::tools::server::{start_statico, ServerUnderTest};
use crate::tools::tls::{self, Groups};

/// Seconds of each handshake round (`s_time` or the rustls client; connections are counted in that time).
const S_TIME_SECONDS: u64 = 3;

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    let dir = work_dir(root, "tls")?;
    let cert = certificate(&dir)?;
    let lua = dir.join("pipeline.lua");
    std::fs::write(&lua, PIPELINE_LUA)?;
    let servers = start_servers(root, &dir, run.server_cpus, &cert)?;
    let mut report = Report::new(format!(
        "HTTPS (TLS 1.3, AES-128-GCM, X25519, ECDSA P-256), servers on CPU {}, clients on CPU {}, {} round(s) of {} s, medians (min-max)\n",
        run.server_cpus, run.client_cpus, run.rounds, run.duration
    ));
    // First, while each server's heap is fresh: memory freed after a load would hide the growth.
    idle_memory(&mut report, &servers, run.idle_conns, &cert)?;
    for sc in SCENARIOS.iter().filter(|s| !s.close) {
        let rows = interleave(&servers, run.rounds, |s| wrk_round(s, *sc, run, &lua))?;
        let title = format!("{} (wrk over https)", sc.name);
        report.table(sc.name, &title, "req/s", "µs CPU/req", &servers, &rows);
    }
    let rows = interleave(&servers, run.rounds, |s| {
        s_time_round(s, run.client_cpus, &["-new"]).map(|r| (r.rate, r.cpu_us))
    })?;
    let title = "full handshakes (openssl s_time -new)";
    report.table(
        "full (s_time)",
        title,
        "conn/s",
        "µs CPU/conn",
        &servers,
        &rows,
    );
    let config = tls::client_config(&cert.cert, Groups::X25519)?;
    for resume in [false, true] {
        let rows = interleave(&servers, run.rounds, |s| {
            handshake_round(s, run.client_cpus, &config, resume)
        })?;
        let (group, title) = if resume {
            (
                "resumed",
                "resumed handshakes (rustls client, TLS 1.3 tickets, PSK with X25519)",
            )
        } else {
            ("full (rustls)", "full handshakes (rustls client)")
        };
        report.table(group, title, "conn/s", "µs CPU/conn", &servers, &rows);
    }
    drop(servers);
    let h2 = start_h2_servers(root, &dir, run.server_cpus, &cert)?;
    let rows = interleave(&h2, run.rounds, |s| {
        h2load_round(s.pid(), &s.url(), run.client_cpus, run.duration, 50, 16)
    })?;
    let title = "HTTP/2 over TLS (h2load -c 50 -m 16)";
    report.table("h2 -m 16", title, "req/s", "µs CPU/req", &h2, &rows);
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let title =
        "HTTPS: server CPU per request or connection, relative to nginx (1.0), lower is better";
    report.chart(&dir.join("chart.svg"), title)?;
    Ok(report.text)
}

/// RSS of each server holding `n` idle TLS keep-alive connections (one request each).
fn idle_memory(
    report: &mut Report,
    servers: &[ServerUnderTest],
    n: usize,
    cert: &Cert,
) -> Result<()> {
    let config = tls::client_config(&cert.cert, Groups::X25519)?;
    let _ = writeln!(
        report.text,
        "\nidle keep-alive over TLS\n  {:<17} {:>11} {:>10} {:>10} {:>14}",
        "server", "connections", "RSS KiB", "idle KiB", "KiB per conn"
    );
    for s in servers {
        let m = idle_rss_with(&s.name, s.pid(), n, || tls_connection(&config, s.port))?;
        let per = (m.rss_kib.saturating_sub(m.baseline_kib)) as f64 / m.connections.max(1) as f64;
        eprintln!(
            "  {:<17} {} idle TLS connections: {per:.1} KiB each",
            s.name, m.connections
        );
        let _ = writeln!(
            report.text,
            "  {:<17} {:>11} {:>10} {:>10} {per:>14.1}",
            s.name, m.connections, m.rss_kib, m.baseline_kib
        );
    }
    Ok(())
}

/// Connections for a few seconds from a rustls client pinned to the client CPUs, each a handshake (full,
/// or resuming with the ticket of the one before) and one request with `Connection: close`:
/// (connections/s, server CPU µs per connection). Fails unless nine in ten were what was asked.
fn handshake_round(
    s: &ServerUnderTest,
    client_cpus: &str,
    config: &Arc<rustls::ClientConfig>,
    resume: bool,
) -> Result<(f64, f64)> {
    let mut config = (**config).clone();
    config.resumption = if resume {
        rustls::client::Resumption::in_memory_sessions(16)
    } else {
        rustls::client::Resumption::disabled()
    };
    let config = Arc::new(config);
    let seconds = Duration::from_secs(S_TIME_SECONDS);
    let ((conns, resumed), cpu_us) = server_cpu_us(s.pid(), || {
        std::thread::scope(|scope| {
            let client = scope.spawn(|| -> Result<(u64, u64)> {
                pin_this_thread(client_cpus)?;
                let (mut conns, mut resumed) = (0, 0);
                let start = std::time::Instant::now();
                while start.elapsed() < seconds {
                    resumed += u64::from(one_request_connection(&config, s.port)?);
                    conns += 1;
                }
                Ok((conns, resumed))
            });
            client
                .join()
                .map_err(|_| anyhow::anyhow!("the TLS client panicked"))?
        })
    })?;
    let wanted = if resume { resumed } else { conns - resumed };
    if conns == 0 || wanted * 10 < conns * 9 {
        bail!(
            "{}: {resumed} of {conns} handshakes resumed (resume: {resume})",
            s.name
        );
    }
    Ok((conns as f64 / seconds.as_secs_f64(), cpu_us / conns as f64))
}

/// One connection: handshake, `GET /` with `Connection: close`, the answer read to the server's close.
/// Returns whether the handshake resumed a session.
fn one_request_connection(config: &Arc<rustls::ClientConfig>, port: u16) -> Result<bool> {
    let mut tls = tls_stream(config, port)?;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer); // a peer may close without close_notify
    if !answer.starts_with(b"HTTP/1.1 200") {
        bail!("no 200 over TLS: {:?}", String::from_utf8_lossy(&answer));
    }
    Ok(tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed))
}

/// Pins the calling thread to `cpus` (a taskset list) with `taskset -p` on its thread id.
fn pin_this_thread(cpus: &str) -> Result<()> {
    let me = std::fs::read_link("/proc/thread-self").context("read /proc/thread-self")?;
    let tid = me.file_name().and_then(|t| t.to_str()).unwrap_or_default();
    let out = Command::new("taskset")
        .args(["-p", "-c", cpus, tid])
        .output()?;
    if !out.status.success() {
        bail!(
            "taskset -p -c {cpus} {tid}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A TLS connection to 127.0.0.1:`port` whose handshake is done.
fn tls_connection(config: &Arc<rustls::ClientConfig>, port: u16) -> Result<Box<dyn Stream>> {
    Ok(Box::new(tls_stream(config, port)?))
}

/// A TLS connection to 127.0.0.1:`port`, 10 s timeout on reads, whose handshake is done.
fn tls_stream(config: &Arc<rustls::ClientConfig>, port: u16) -> Result<tls::TlsStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).context("open an idle TLS connection")?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    tls::handshake(config, tcp).context("TLS handshake")
}

/// statico over HTTPS on each runtime, and nginx with TLS.
fn start_servers(root: &Path, dir: &Path, cpus: &str, cert: &Cert) -> Result<Vec<ServerUnderTest>> {
    let mut servers = Vec::new();
    for runtime in ["tokio", "io-uring"] {
        let args: Vec<&str> = statico_args(runtime)
            .into_iter()
            .chain(cert.statico_args())
            .collect();
        servers.push(start_statico(
            root,
            &format!("statico-{runtime}"),
            Some(cpus),
            &args,
        )?);
    }
    servers.push(start_nginx(dir, cpus, cert.nginx())?);
    Ok(servers)
}

/// statico `--http2` over HTTPS on each runtime, and nginx with TLS (HTTP/2 by ALPN).
fn start_h2_servers(
    root: &Path,
    dir: &Path,
    cpus: &str,
    cert: &Cert,
) -> Result<Vec<ServerUnderTest>> {
    let mut servers = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let args: Vec<&str> = ["--http2"]
            .into_iter()
            .chain(statico_args(runtime))
            .chain(cert.statico_args())
            .collect();
        let name = format!("statico-{runtime} --http2");
        servers.push(start_statico(root, &name, Some(cpus), &args)?);
    }
    servers.push(start_nginx(dir, cpus, cert.nginx())?);
    Ok(servers)
}

fn wrk_round(s: &ServerUnderTest, sc: Scenario, run: &RunInfo, lua: &Path) -> Result<(f64, f64)> {
    let r = measure(s.pid(), &s.url(), sc, run.client_cpus, run.duration, lua)?;
    if r.requests == 0 || r.errors > 0 {
        bail!(
            "wrk over https against {}: {} requests, {} errors",
            s.name,
            r.requests,
            r.errors
        );
    }
    Ok((r.rps, r.cpu_us_per_req))
}

/// An `openssl s_time` round: connections per second, server CPU µs per connection, and the share of
/// connections whose session was resumed.
pub struct STime {
    pub rate: f64,
    pub cpu_us: f64,
    pub resumed: f64,
}

/// `openssl s_time` with `args` (`-new`: a full handshake and one request per connection; `-reuse`:
/// the first connection's session offered again by every other) for a few seconds. Here `-new` only:
/// `-reuse` does not resume TLS 1.3 sessions, so it would measure full handshakes again.
pub fn s_time_round(s: &ServerUnderTest, client_cpus: &str, args: &[&str]) -> Result<STime> {
    let mut cmd = pinned(Some(client_cpus), "openssl");
    cmd.args(["s_time", "-connect"])
        .arg(format!("127.0.0.1:{}", s.port))
        .args(args)
        .args(["-time", &S_TIME_SECONDS.to_string()]);
    let (out, cpu_us) = server_cpu_us(s.pid(), || cmd.output().context("run openssl s_time"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "1234 connections in 3.01s; 410.0 connections/user sec, bytes read 0"
    let line = text
        .lines()
        .find(|l| l.contains("connections in") && !l.contains("real seconds"))
        .with_context(|| format!("no s_time summary for {}:\n{text}", s.name))?;
    let conns: f64 = line
        .split_whitespace()
        .next()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0.0);
    if conns == 0.0 {
        bail!("s_time made no connection to {}:\n{text}", s.name);
    }
    // s_time prints one character per connection: `r` for a resumed session.
    let marks = text
        .lines()
        .filter(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c == 'r' || c == '*' || c.is_ascii_digit())
        })
        .flat_map(|l| l.chars());
    let (resumed, all) = marks.fold((0, 0), |(r, n), c| (r + u32::from(c == 'r'), n + 1));
    Ok(STime {
        rate: conns / S_TIME_SECONDS as f64,
        cpu_us: cpu_us / conns,
        resumed: f64::from(resumed) / f64::from(all.max(1)),
    })
}
