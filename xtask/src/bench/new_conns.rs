//! `cargo xtask bench --new-conns`: what a new connection costs statico (both runtimes) against nginx,
//! in one run — the load a backend sees behind a proxy that does not pool its upstream connections.
//!
//! Every server has one worker pinned to the server CPUs; the clients run on the client CPUs; rounds
//! are interleaved and reported as medians (min–max), each statico's server CPU against nginx's:
//! - **one request per connection**: wrk `-c 50` with `Connection: close`, and with HTTP/1.0 requests
//!   without keep-alive; keep-alive `-c 50` beside them for scale (server CPU per request, that is per
//!   connection for the first two). The peer is nginx as configured by default; nginx with `listen …
//!   deferred` (TCP_DEFER_ACCEPT, which statico's listeners use) runs beside it;
//! - **system calls per connection** under the `Connection: close` load, counted by `strace -c -f`
//!   attached for one short round (strace slows the server; only the counts are read);
//! - **behind nginx**: a real nginx `proxy_pass` with its default upstream settings (HTTP/1.0, a new
//!   upstream connection per request, no `keepalive`), the proxy and wrk (keep-alive `-c 50`) on the
//!   client CPUs, the upstream alone on the server CPUs, 1 KiB answers: the upstream's CPU per proxied
//!   request, nginx serving the same bytes as the peer upstream;
//! - **TLS handshakes** with `openssl s_time`: full (`-new`, TLS 1.3), and TLS 1.2 full and resumed
//!   (`-reuse`: the session of the first connection offered again, by ticket or session ID, as the
//!   server chooses); server CPU per connection, and for `-reuse` the share that did resume.
//!
//! Writes `report.txt` (also printed), `results.json` (every round) and `chart.svg` (each statico's
//! CPU relative to nginx's) into the run's directory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::measure::{measure, measure_command, Scenario, Stat, PIPELINE_LUA};
use super::ratio::{interleave, Report};
use super::report::RunInfo;
use super::servers::{
    certificate, start_nginx, start_nginx_proxy, statico_args, statico_on, Nginx,
};
use super::tls::s_time_round;
use crate::setup::which;
use crate::tools::pinned;
use crate::tools::procfs::machine;
use crate::tools::server::{start_statico, ServerUnderTest};

const RUNTIMES: [&str; 2] = ["tokio", "io-uring"];

const CLOSE: Scenario = Scenario {
    name: "connection: close c50",
    connections: 50,
    pipeline: 1,
    close: true,
};

const KEEP_ALIVE: Scenario = Scenario {
    name: "keep-alive c50",
    connections: 50,
    pipeline: 1,
    close: false,
};

/// The wrk script whose requests are HTTP/1.0 without keep-alive: the server closes after each.
const HTTP10_LUA: &str =
    "request = function() return \"GET / HTTP/1.0\\r\\nHost: bench\\r\\n\\r\\n\" end\n";

/// The size of the answers behind the proxy.
const PROXIED_BODY: usize = 1024;

/// Seconds of the round strace watches.
const STRACE_SECONDS: u64 = 2;

/// One table of the run, for results.json: per server its rounds of (rate, server CPU µs per unit).
struct Table {
    group: &'static str,
    title: String,
    servers: Vec<(String, String)>,
    rows: Vec<Vec<(f64, f64)>>,
    /// Per server, what else was read (system calls per connection, the share of resumed sessions).
    notes: Vec<Value>,
}

pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    for tool in ["wrk", "nginx", "openssl"] {
        if which(tool).is_none() {
            bail!("{tool} is not installed (cargo xtask setup installs it)");
        }
    }
    let mut report = Report::new(format!(
        "New connections: one worker per server on CPU {}, clients on CPU {}, {} round(s) of {} s, medians (min-max)\n",
        run.server_cpus, run.client_cpus, run.rounds, run.duration
    ));
    let mut tables = Vec::new();
    one_request_per_connection(root, dir, run, &mut report, &mut tables)?;
    behind_nginx(root, dir, run, &mut report, &mut tables)?;
    handshakes(root, dir, run, &mut report, &mut tables)?;
    std::fs::write(dir.join("report.txt"), &report.text)?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&to_json(run, &tables))?,
    )?;
    let title = "New connections: server CPU per connection (or proxied request), relative to nginx (1.0), lower is better";
    report.chart(&dir.join("chart.svg"), title)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(report.text)
}

/// `Connection: close`, HTTP/1.0 and keep-alive at c50, and the system calls per connection.
fn one_request_per_connection(
    root: &Path,
    dir: &Path,
    run: &RunInfo,
    report: &mut Report,
    tables: &mut Vec<Table>,
) -> Result<()> {
    let mut servers = (RUNTIMES.iter())
        .map(|runtime| statico_on(root, run.server_cpus, runtime))
        .collect::<Result<Vec<_>>>()?;
    servers.push(start_nginx(dir, run.server_cpus, Nginx::Http1)?);
    servers.push(start_nginx(
        &dir.join("deferred"),
        run.server_cpus,
        Nginx::Deferred,
    )?);
    let (lua, http10) = (dir.join("pipeline.lua"), dir.join("http10.lua"));
    std::fs::write(&lua, PIPELINE_LUA)?;
    std::fs::write(&http10, HTTP10_LUA)?;
    let wrk = |s: &ServerUnderTest, sc: Scenario| -> Result<(f64, f64)> {
        let r = measure(s.pid(), &s.url(), sc, run.client_cpus, run.duration, &lua)?;
        checked(s, r.requests, r.errors).map(|()| (r.rps, r.cpu_us_per_req))
    };
    let rows = interleave(&servers, run.rounds, |s| wrk(s, CLOSE))?;
    let mut notes = Vec::new();
    if which("strace").is_some() {
        for s in &servers {
            let per_conn = syscalls_per_connection(s, run.client_cpus)?;
            eprintln!("  {:<17} {per_conn:.2} system calls per connection", s.name);
            notes.push(json!({ "syscalls_per_conn": per_conn }));
        }
    }
    let title = format!(
        "{} (wrk -H 'Connection: close'), server CPU per connection",
        CLOSE.name
    );
    add(
        report, tables, "close", title, "conn/s", &servers, rows, notes,
    );
    if let Some(t) = tables.last() {
        syscall_lines(report, t);
    }
    let rows = interleave(&servers, run.rounds, |s| {
        let mut cmd = pinned(Some(run.client_cpus), "wrk");
        cmd.args(["-t1", "--latency", "-c50"])
            .arg(format!("-d{}s", run.duration))
            .arg("-s")
            .arg(&http10)
            .arg(s.url());
        let r = measure_command(s.pid(), &mut cmd)?;
        checked(s, r.requests, r.errors).map(|()| (r.rps, r.cpu_us_per_req))
    })?;
    let title = "HTTP/1.0 without keep-alive c50 (wrk, GET / HTTP/1.0), server CPU per connection";
    add(
        report,
        tables,
        "http/1.0",
        title.into(),
        "conn/s",
        &servers,
        rows,
        vec![],
    );
    let rows = interleave(&servers, run.rounds, |s| wrk(s, KEEP_ALIVE))?;
    let title = format!(
        "{} (wrk), for scale: server CPU per request",
        KEEP_ALIVE.name
    );
    add(
        report,
        tables,
        "keep-alive",
        title,
        "req/s",
        &servers,
        rows,
        vec![],
    );
    Ok(())
}

/// Fails on a round that measured something else than answers: none, or socket errors and non-2xx.
fn checked(s: &ServerUnderTest, requests: u64, errors: u64) -> Result<()> {
    if requests == 0 || errors > requests / 1000 {
        bail!(
            "wrk against {}: {requests} requests, {errors} errors",
            s.name
        );
    }
    Ok(())
}

/// Each upstream behind one nginx proxy (its default `proxy_pass`: HTTP/1.0, a new connection per
/// request), the proxy and wrk on the client CPUs: the upstream's CPU per proxied request.
fn behind_nginx(
    root: &Path,
    dir: &Path,
    run: &RunInfo,
    report: &mut Report,
    tables: &mut Vec<Table>,
) -> Result<()> {
    let body = "x".repeat(PROXIED_BODY);
    let mut upstreams = Vec::new();
    for runtime in RUNTIMES {
        let args = [
            "-t",
            "1",
            "-b",
            &body,
            "-H",
            "Content-Type: application/octet-stream",
            "--runtime",
            runtime,
        ];
        upstreams.push(start_statico(
            root,
            &format!("statico-{runtime}"),
            Some(run.server_cpus),
            &args,
        )?);
    }
    let echo = Nginx::Echo {
        body: &body,
        fail_percent: 0,
    };
    upstreams.push(start_nginx(dir, run.server_cpus, echo)?);
    let ports: Vec<u16> = upstreams.iter().map(|s| s.port).collect();
    let (proxy, fronts) = start_nginx_proxy(&dir.join("proxy"), run.client_cpus, &ports)?;
    let lua = dir.join("pipeline.lua");
    let rows = interleave(&upstreams, run.rounds, |s| {
        let i = upstreams.iter().position(|u| u.port == s.port).unwrap_or(0);
        let url = format!("http://127.0.0.1:{}/", fronts[i]);
        let r = measure(
            s.pid(),
            &url,
            KEEP_ALIVE,
            run.client_cpus,
            run.duration,
            &lua,
        )?;
        checked(s, r.requests, r.errors).map(|()| (r.rps, r.cpu_us_per_req))
    })?;
    drop(proxy);
    let title = format!(
        "behind nginx (proxy_pass, no upstream keepalive; proxy and wrk -c50 on CPU {}), {PROXIED_BODY} B answers: upstream CPU per proxied request",
        run.client_cpus
    );
    add(
        report,
        tables,
        "proxied",
        title,
        "req/s",
        &upstreams,
        rows,
        vec![],
    );
    Ok(())
}

/// Full TLS 1.3 handshakes, and TLS 1.2 full and resumed ones, with `openssl s_time`.
fn handshakes(
    root: &Path,
    dir: &Path,
    run: &RunInfo,
    report: &mut Report,
    tables: &mut Vec<Table>,
) -> Result<()> {
    let cert = certificate(dir)?;
    let mut servers = Vec::new();
    for runtime in RUNTIMES {
        let args: Vec<&str> = statico_args(runtime)
            .into_iter()
            .chain([
                "--tls-cert",
                cert.cert.to_str().unwrap_or_default(),
                "--tls-key",
                cert.key.to_str().unwrap_or_default(),
            ])
            .collect();
        let name = format!("statico-{runtime}");
        servers.push(start_statico(root, &name, Some(run.server_cpus), &args)?);
    }
    servers.push(start_nginx(dir, run.server_cpus, cert.nginx())?);
    let kinds: [(&'static str, &str, &[&str]); 3] = [
        (
            "TLS 1.3 full",
            "full handshakes, TLS 1.3 (openssl s_time -new)",
            &["-new"],
        ),
        (
            "TLS 1.2 full",
            "full handshakes, TLS 1.2 (openssl s_time -new -tls1_2)",
            &["-new", "-tls1_2"],
        ),
        (
            "TLS 1.2 resumed",
            "resumed handshakes, TLS 1.2 (openssl s_time -reuse -tls1_2)",
            &["-reuse", "-tls1_2"],
        ),
    ];
    for (group, title, args) in kinds {
        let mut resumed: Vec<Vec<f64>> = servers.iter().map(|_| Vec::new()).collect();
        let rows = interleave(&servers, run.rounds, |s| {
            let r = s_time_round(s, run.client_cpus, args)?;
            let i = servers.iter().position(|x| x.port == s.port).unwrap_or(0);
            resumed[i].push(r.resumed);
            Ok((r.rate, r.cpu_us))
        })?;
        let notes = resumed
            .iter()
            .map(|r| json!({ "resumed_share": Stat::of(r.iter().copied()).median }))
            .collect();
        let resumes = args.contains(&"-reuse");
        add(
            report,
            tables,
            group,
            title.into(),
            "conn/s",
            &servers,
            rows,
            notes,
        );
        if resumes {
            if let Some(t) = tables.last() {
                let shares: Vec<String> = t
                    .servers
                    .iter()
                    .zip(&t.notes)
                    .map(|((name, _), n)| {
                        format!(
                            "{name} {:.0}%",
                            n["resumed_share"].as_f64().unwrap_or(0.0) * 100.0
                        )
                    })
                    .collect();
                report
                    .text
                    .push_str(&format!("  resumed: {}\n", shares.join(", ")));
            }
        }
    }
    Ok(())
}

/// A table into the report and into results.json.
#[allow(clippy::too_many_arguments)]
fn add(
    report: &mut Report,
    tables: &mut Vec<Table>,
    group: &'static str,
    title: String,
    rate: &str,
    servers: &[ServerUnderTest],
    rows: Vec<Vec<(f64, f64)>>,
    notes: Vec<Value>,
) {
    let cpu = if rate == "req/s" {
        "µs CPU/req"
    } else {
        "µs CPU/conn"
    };
    report.table(group, &title, rate, cpu, servers, &rows);
    tables.push(Table {
        group,
        title,
        servers: servers
            .iter()
            .map(|s| (s.name.clone(), s.command.clone()))
            .collect(),
        rows,
        notes,
    });
}

/// The system calls per connection of a table that has them, one line per server.
fn syscall_lines(report: &mut Report, t: &Table) {
    let per: Vec<String> = t
        .servers
        .iter()
        .zip(&t.notes)
        .filter_map(|((name, _), n)| {
            Some(format!("{name} {:.2}", n["syscalls_per_conn"].as_f64()?))
        })
        .collect();
    if !per.is_empty() {
        report.text.push_str(&format!(
            "  system calls per connection (strace -c -f, one {STRACE_SECONDS}-s round): {}\n",
            per.join(", ")
        ));
    }
}

/// The system calls the server makes per `Connection: close` connection: `strace -c -f` attached to
/// it over one short wrk round, its total over the connections wrk saw answered.
fn syscalls_per_connection(s: &ServerUnderTest, client_cpus: &str) -> Result<f64> {
    let out = std::env::temp_dir().join(format!("xtask-strace-{}.txt", s.pid()));
    let mut strace = Command::new("strace")
        .args(["-c", "-f", "-o"])
        .arg(&out)
        .args(["-p", &s.pid().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("run strace")?;
    std::thread::sleep(Duration::from_millis(500)); // attached to every thread
    let mut cmd = pinned(Some(client_cpus), "wrk");
    cmd.args(["-t1", "-c50", "-H", "Connection: close"])
        .arg(format!("-d{STRACE_SECONDS}s"))
        .arg(s.url());
    let wrk = cmd.output().context("run wrk");
    std::thread::sleep(Duration::from_millis(300));
    let _ = crate::tools::server::signal(strace.id(), "-INT");
    let _ = strace.wait();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let requests = super::measure::parse_wrk(&String::from_utf8_lossy(&wrk?.stdout)).requests;
    let calls = strace_total(&text).with_context(|| format!("no strace total for {}", s.name))?;
    if requests == 0 {
        bail!("wrk got no answer from {} under strace", s.name);
    }
    Ok(calls as f64 / requests as f64)
}

/// The calls of `strace -c`'s total line (`100.00 0.75 2 271454 19207 total`).
fn strace_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.trim_end().ends_with("total"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn to_json(run: &RunInfo, tables: &[Table]) -> Value {
    let tables: Vec<Value> = tables
        .iter()
        .map(|t| {
            let servers: Vec<Value> = t
                .servers
                .iter()
                .zip(&t.rows)
                .enumerate()
                .map(|(i, ((name, command), rows))| {
                    let cpu = Stat::of(rows.iter().map(|r| r.1));
                    let rate = Stat::of(rows.iter().map(|r| r.0));
                    json!({
                        "name": name,
                        "command": command,
                        "median": { "rate": rate.median, "cpu_us": cpu.median },
                        "min_max": { "rate": [rate.min, rate.max], "cpu_us": [cpu.min, cpu.max] },
                        "rounds": rows.iter().map(|r| json!({ "rate": r.0, "cpu_us": r.1 })).collect::<Vec<_>>(),
                        "other": t.notes.get(i),
                    })
                })
                .collect();
            json!({ "group": t.group, "title": t.title, "servers": servers })
        })
        .collect();
    json!({
        "mode": "new-conns",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "tables": tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_totals_parse() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n------ ----------- ----------- --------- --------- ----------------\n 37.18    0.279647           6     41425           sendto\n------ ----------- ----------- --------- --------- ----------------\n100.00    0.752087           2    271454     19207 total\n";
        assert_eq!(strace_total(text), Some(271454));
        assert_eq!(strace_total("nothing"), None);
    }
}
