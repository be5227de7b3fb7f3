//! `cargo xtask bench --http2`: statico `--http2` against nginx `http2`, with h2load, in one run.
//!
//! Both serve cleartext HTTP/2 by prior knowledge with one worker pinned to the server CPUs; h2load
//! runs pinned to the client CPUs with `-c 50 -m 16` (50 connections, 16 concurrent streams each) for
//! `--duration` seconds; servers are interleaved over the rounds. Reported: requests/s and server CPU
//! µs per request (from /proc), medians.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::measure::{h2load_round, interleave, Stat};
use super::report::{work_dir, RunInfo};
use super::servers::{start_nginx, start_statico, statico_args, Nginx};

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    let (server_cpus, client_cpus) = (run.server_cpus, run.client_cpus);
    let (duration, rounds) = (run.duration, run.rounds);
    let dir = work_dir(root, "http2")?;
    let args: Vec<&str> = ["--http2"]
        .into_iter()
        .chain(statico_args("tokio"))
        .collect();
    let servers = [
        start_statico(root, "statico --http2", Some(server_cpus), &args)?,
        start_nginx(&dir, server_cpus, Nginx::H2c)?,
    ];
    let rows = interleave(&servers, rounds, |s| {
        let (rps, cpu) = h2load_round(s.pid(), &s.url(), client_cpus, duration)?;
        eprintln!("  {:<16} {rps:>10.0} req/s {cpu:>7.2} µs/req", s.name);
        Ok((rps, cpu))
    })?;
    let mut s = format!(
        "\nHTTP/2 (h2c prior knowledge), h2load -c 50 -m 16 -t 1 -D {duration} pinned to CPU {client_cpus}, one server worker on CPU {server_cpus}, {rounds} round(s), medians\n{:<16} {:>12} {:>14}\n",
        "server", "req/s", "µs CPU/req"
    );
    for (server, r) in servers.iter().zip(&rows) {
        let rps = Stat::of(r.iter().map(|x| x.0)).median;
        let cpu = Stat::of(r.iter().map(|x| x.1)).median;
        let _ = writeln!(s, "{:<16} {rps:>12.0} {cpu:>14.2}", server.name);
    }
    Ok(s)
}
