//! `cargo xtask bench --steering`: what kernel-assisted steering costs and buys, measured in one run.
//!
//! Every rung gets the same load: statico with one worker per CPU, wrk with one thread per CPU (not
//! pinned: clients on every CPU, so SYNs arrive on every CPU), one new connection per request
//! (`Connection: close`), rungs interleaved over the rounds. Reported per rung: connections/s, server
//! CPU µs per connection (from /proc), and for `ebpf` the program's own cost per run from the kernel's
//! BPF run-time statistics (`kernel.bpf_stats_enabled`, switched on for the run and restored on every
//! way out, errors included; each statico is stopped by its guard likewise).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::measure::{interleave, parse_wrk, server_cpu_us, Stat, BODY};
use crate::tools::procfs::cpu_count;
use crate::tools::server::start_statico;

const RUNGS: [&str; 3] = ["ebpf", "incoming-cpu", "reuseport"];
const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// A sysctl set for the run; its old value is written back when this is dropped.
pub struct Sysctl {
    path: PathBuf,
    old: Option<String>,
}

impl Sysctl {
    pub fn set(path: impl Into<PathBuf>, value: &str) -> Sysctl {
        let path = path.into();
        let old = std::fs::read_to_string(&path).ok();
        let _ = std::fs::write(&path, value);
        Sysctl { path, old }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            let _ = std::fs::write(&self.path, old.trim());
        }
    }
}

/// One round on one rung.
struct RungRound {
    conn_per_s: f64,
    cpu_us_per_conn: f64,
    /// For `ebpf`: the program's average run time, read while its statico still runs.
    bpf_ns_per_run: Option<f64>,
}

pub fn run(root: &Path, duration: u64, rounds: usize) -> Result<String> {
    let cpus = cpu_count();
    let _stats = Sysctl::set(BPF_STATS, "1");
    let results = interleave(&RUNGS, rounds, |rung| {
        let r = rung_round(root, rung, cpus, duration)?;
        eprintln!(
            "  {rung:<13} {:>9.0} conn/s {:>7.2} µs server CPU/conn",
            r.conn_per_s, r.cpu_us_per_conn
        );
        Ok(r)
    })?;
    Ok(render(&results, cpus, duration, rounds))
}

/// One round on one rung, on a fresh statico (stopped by its guard however the round ends).
fn rung_round(root: &Path, rung: &str, cpus: usize, duration: u64) -> Result<RungRound> {
    let threads = cpus.to_string();
    let args = ["-t", &threads, "--steering", rung, "-b", BODY];
    let server = start_statico(root, &format!("statico --steering {rung}"), None, &args)?;
    let mut wrk = Command::new("wrk");
    wrk.args(["-t", &threads, "-c", "50", "-d", &format!("{duration}s")])
        .args(["-H", "Connection: close", &server.url()]);
    let (out, cpu_us) = server_cpu_us(server.pid(), || wrk.output().context("run wrk"))?;
    let r = parse_wrk(&String::from_utf8_lossy(&out.stdout));
    Ok(RungRound {
        conn_per_s: r.rps,
        cpu_us_per_conn: cpu_us / (r.requests as f64).max(1.0),
        // The program goes with the server that loaded it: read it before the guard drops.
        bpf_ns_per_run: (rung == "ebpf").then(bpf_run_time).flatten(),
    })
}

fn render(results: &[Vec<RungRound>], cpus: usize, duration: u64, rounds: usize) -> String {
    let mut s = format!(
        "\nsteering, Connection: close, {cpus} workers, wrk -t{cpus} -c50 unpinned, {rounds} round(s) x {duration} s (medians)\n{:<14} {:>12} {:>18}\n",
        "rung", "conn/s", "µs CPU/conn"
    );
    for (rung, rows) in RUNGS.iter().zip(results) {
        let rps = Stat::of(rows.iter().map(|r| r.conn_per_s)).median;
        let cpu = Stat::of(rows.iter().map(|r| r.cpu_us_per_conn)).median;
        let _ = writeln!(s, "{rung:<14} {rps:>12.0} {cpu:>18.2}");
    }
    let bpf: Vec<f64> = results
        .iter()
        .flatten()
        .filter_map(|r| r.bpf_ns_per_run)
        .collect();
    if !bpf.is_empty() {
        let Stat { median, min, max } = Stat::of(bpf);
        let _ = writeln!(s, "SK_REUSEPORT program: {median:.0} ns per run (min {min:.0}, max {max:.0}), from bpftool prog show run_time_ns/run_cnt");
    }
    s
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sysctl_is_restored_when_the_run_ends_whatever_the_way() {
        let path = std::env::temp_dir().join(format!("xtask-sysctl-{}", std::process::id()));
        std::fs::write(&path, "0\n").unwrap();
        let failing = || -> Result<()> {
            let _stats = Sysctl::set(&path, "1");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "1");
            anyhow::bail!("the bench failed")
        };
        assert!(failing().is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0");
        let _ = std::fs::remove_file(&path);
    }
}
