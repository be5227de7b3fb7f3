//! `cargo xtask bench --steering`: what kernel-assisted steering costs and buys, measured in one run.
//!
//! Every rung gets the same load: statico with one worker per CPU, wrk with one thread per CPU (not
//! pinned: clients on every CPU, so SYNs arrive on every CPU), one new connection per request
//! (`Connection: close`), rungs interleaved over the rounds. Reported per rung: connections/s, server
//! CPU µs per connection (from /proc), and for `ebpf` the program's own cost per run from the kernel's
//! BPF run-time statistics (`kernel.bpf_stats_enabled`, restored afterwards).

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

const RUNGS: [&str; 3] = ["ebpf", "incoming-cpu", "reuseport"];

pub fn run(root: &Path, duration: u64, rounds: usize) -> Result<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stats_before =
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    let mut results: Vec<(&str, Vec<(f64, f64)>)> =
        RUNGS.iter().map(|r| (*r, Vec::new())).collect();
    let mut bpf_ns_per_run = Vec::new();
    for _ in 0..rounds {
        for (rung, rows) in results.iter_mut() {
            let port = crate::bench::free_port()?;
            let mut child = Command::new(root.join("target/release/statico"))
                .args([
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-t",
                    &cpus.to_string(),
                    "--steering",
                    rung,
                ])
                .args(["-b", "Hello, World!"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("start statico")?;
            crate::bench::wait_port(port)?;
            let before = crate::bench::cpu_ticks(child.id())?;
            let out = Command::new("wrk")
                .args([
                    "-t",
                    &cpus.to_string(),
                    "-c",
                    "50",
                    "-d",
                    &format!("{duration}s"),
                ])
                .args([
                    "-H",
                    "Connection: close",
                    &format!("http://127.0.0.1:{port}/"),
                ])
                .output()
                .context("run wrk")?;
            let after = crate::bench::cpu_ticks(child.id())?;
            if *rung == "ebpf" {
                if let Some(ns) = bpf_run_time() {
                    bpf_ns_per_run.push(ns);
                }
            }
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
            let text = String::from_utf8_lossy(&out.stdout);
            let requests: f64 = text
                .lines()
                .find(|l| l.contains("requests in"))
                .and_then(|l| l.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0);
            let rps: f64 = text
                .lines()
                .find(|l| l.starts_with("Requests/sec:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
                .unwrap_or(0.0);
            let cpu_us = (after - before) as f64 / crate::bench::clock_ticks_per_second() * 1e6
                / requests.max(1.0);
            eprintln!("  {rung:<13} {rps:>9.0} conn/s {cpu_us:>7.2} µs server CPU/conn");
            rows.push((rps, cpu_us));
        }
    }
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", stats_before.trim());
    let mut s = format!(
        "\nsteering, Connection: close, {cpus} workers, wrk -t{cpus} -c50 unpinned, {rounds} round(s) x {duration} s (medians)\n{:<14} {:>12} {:>18}\n",
        "rung", "conn/s", "µs CPU/conn"
    );
    for (rung, rows) in &results {
        let (rps, _, _) = crate::bench::median(rows.iter().map(|r| r.0).collect());
        let (cpu, _, _) = crate::bench::median(rows.iter().map(|r| r.1).collect());
        let _ = writeln!(s, "{rung:<14} {rps:>12.0} {cpu:>18.2}");
    }
    if !bpf_ns_per_run.is_empty() {
        let (ns, min, max) = crate::bench::median(bpf_ns_per_run);
        let _ = writeln!(s, "SK_REUSEPORT program: {ns:.0} ns per run (min {min:.0}, max {max:.0}), from bpftool prog show run_time_ns/run_cnt");
    }
    Ok(s)
}

/// Average run time of the steering program, from `bpftool -j prog show name statico_steer`.
fn bpf_run_time() -> Option<f64> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show", "name", "statico_steer"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| -> Option<f64> {
        text.split(&format!("\"{k}\":"))
            .nth(1)?
            .split([',', '}'])
            .next()?
            .trim()
            .parse()
            .ok()
    };
    let (ns, runs) = (field("run_time_ns")?, field("run_cnt")?);
    (runs > 0.0).then(|| ns / runs)
}
