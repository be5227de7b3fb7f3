//! `cargo xtask bench` (the default mode): statico and its peers measured side by side, in one run.
//!
//! Method (the one `shared/PEERS.md` uses, so numbers compare): each server runs one worker pinned to
//! the server CPUs, wrk runs one thread pinned to the client CPUs, body "Hello, World!" as text/plain.
//! For each scenario the servers are interleaved (A B C A B C …) for several rounds; the median is
//! reported with the min–max. Server CPU time per request = (utime+stime of the server from /proc over
//! the measured window) / requests: on a 2-core machine the client caps req/s, so CPU per request is
//! the figure that ranks servers. A round whose client saw socket errors or non-2xx answers is marked,
//! never averaged in silently. Load goes to 127.0.0.1 only and every run is bounded by `--duration`.
//!
//! Servers: statico on each runtime; nginx from Debian (`return 200`, access log off,
//! `keepalive_requests` raised); and, unless `--quick`, the peers under `bench/peers/` built from
//! registry packages when their toolchain is present (hyper, actix-web, Go fasthttp).
//!
//! Writes `target/bench/<timestamp>/{results.json,chart.svg,report.txt}` (or `--out DIR`).

use std::path::Path;

use anyhow::Result;

use super::measure::{
    idle_rss, interleave, measure, Memory, IDLE_SCENARIO, PIPELINE_LUA, SCENARIOS,
};
use super::report::{self, RunInfo, Started, Table};
use super::servers::{build_peer, start_nginx, start_peer, statico_on, Nginx, PEERS};
use crate::tools::procfs::status_kib;
use crate::tools::server::ServerUnderTest;

/// Runs every scenario against every server, then the idle-connection memory, and writes the report
/// into `dir`.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<()> {
    let lua = dir.join("pipeline.lua");
    std::fs::write(&lua, PIPELINE_LUA)?;
    eprintln!(
        "bench: servers pinned to CPU {}, wrk pinned to CPU {} (set with --server-cpus/--client-cpus); {} round(s) of {} s per scenario",
        run.server_cpus, run.client_cpus, run.rounds, run.duration
    );
    let servers = start_servers(root, dir, run)?;
    let table = measure_scenarios(&servers, run, &lua)?;
    let memory = measure_memory(&servers, run.idle_conns)?;
    let started: Vec<Started> = servers
        .iter()
        .map(|s| Started {
            name: &s.name,
            command: &s.command,
        })
        .collect();
    report::write(dir, &started, &table, &memory, run)
}

/// Starts one server, when asked.
type Starter<'a> = Box<dyn Fn() -> Result<ServerUnderTest> + 'a>;

/// statico on each runtime, nginx, and (unless quick) the peers; one that cannot start is skipped with
/// the reason, except statico on tokio.
fn start_servers(root: &Path, dir: &Path, run: &RunInfo) -> Result<Vec<ServerUnderTest>> {
    let cpus = run.server_cpus;
    let mut servers = vec![statico_on(root, cpus, "tokio")?];
    let mut optional: Vec<(&str, Starter)> = Vec::new();
    if cfg!(target_os = "linux") {
        optional.push((
            "statico io-uring",
            Box::new(|| statico_on(root, cpus, "io-uring")),
        ));
    }
    optional.push(("nginx", Box::new(|| start_nginx(dir, cpus, Nginx::Http1))));
    if !run.quick {
        for peer in &PEERS {
            let start = move || build_peer(root, peer).and_then(|bin| start_peer(peer, &bin, cpus));
            optional.push((peer.name, Box::new(start)));
        }
    }
    for (name, start) in optional {
        match start() {
            Ok(s) => servers.push(s),
            Err(e) => eprintln!("bench: {name} skipped: {e:#}"),
        }
    }
    Ok(servers)
}

/// Every scenario, the servers interleaved over the rounds.
fn measure_scenarios(servers: &[ServerUnderTest], run: &RunInfo, lua: &Path) -> Result<Table> {
    let mut table = Table::new();
    for sc in SCENARIOS {
        let per_server = interleave(servers, run.rounds, |s| {
            let r = measure(s.pid(), &s.url(), sc, run.client_cpus, run.duration, lua)?;
            let errors = if r.errors > 0 {
                format!("  ({} errors)", r.errors)
            } else {
                String::new()
            };
            eprintln!(
                "  {:<17} {:<22} {:>10.0} req/s {:>7.2} µs/req{errors}",
                s.name, sc.name, r.rps, r.cpu_us_per_req
            );
            Ok(r)
        })?;
        for (s, rounds) in servers.iter().zip(per_server) {
            table.push((s.name.clone(), sc.name, rounds));
        }
    }
    Ok(table)
}

/// RSS with `n` idle keep-alive connections, per server, and each server's peak RSS of the run.
fn measure_memory(servers: &[ServerUnderTest], n: usize) -> Result<Vec<Memory>> {
    let mut memory = Vec::new();
    for s in servers {
        let m = idle_rss(&s.name, s.pid(), s.port, n)?;
        eprintln!(
            "  {:<17} {IDLE_SCENARIO}: {} connections, RSS {} KiB (idle server {} KiB)",
            s.name, m.connections, m.rss_kib, m.baseline_kib
        );
        memory.push(m);
    }
    for (s, m) in servers.iter().zip(memory.iter_mut()) {
        m.peak_kib = status_kib(s.pid(), "VmHWM:").unwrap_or(0);
    }
    Ok(memory)
}
