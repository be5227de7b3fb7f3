//! `cargo xtask bench --profile`: where each server's CPU goes per keep-alive request.
//!
//! CPU per request alone cannot say whether a runtime is cheap or whether the kernel's TCP path simply
//! dominates; this mode splits it. Same method as `bench` (one worker pinned to the server CPUs, wrk
//! pinned to the client CPUs, servers interleaved over rounds), and during each measured round
//! `perf record -e cpu-clock -g -p <server>` samples the server's call stacks. Every sample lands in
//! one bucket, by the frames on its stack:
//! - **TCP send**: under `tcp_sendmsg`. On loopback this includes delivering the segment to the
//!   client's socket (softirq in the sender's context) and waking the client;
//! - **TCP receive**: under `tcp_recvmsg`;
//! - **event loop, kernel**: every other kernel sample (syscall entry and exit, epoll or io_uring,
//!   polling and wake-ups, scheduling);
//! - **user space**: HTTP parsing, response building, the runtime itself.
//!
//! Each bucket's share of samples times the round's measured CPU per request (from /proc) gives µs per
//! request; medians over rounds. The first two buckets are the same kernel work whatever the server;
//! the last two are what a server's design controls. perf's own sampling adds a few percent to every
//! server alike. Needs `perf` (package linux-perf) and permission to profile the servers (root, or
//! `kernel.perf_event_paranoid` ≤ 1); uses software `cpu-clock` events, so it works in VMs without PMU.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::measure::{measure, Scenario, Stat, SCENARIOS};
use super::report::{work_dir, RunInfo};
use super::servers::{start_nginx, statico_on, Nginx, ServerUnderTest};
use crate::setup::which;

/// The buckets, in report order.
const BUCKETS: [&str; 4] = [
    "TCP send",
    "TCP receive",
    "event loop, kernel",
    "user space",
];

/// Which bucket a sample belongs to, from its frames (innermost first, `(address, symbol)`).
fn bucket(frames: &[(u64, &str)]) -> usize {
    let has = |name: &str| frames.iter().any(|(_, s)| *s == name);
    if has("tcp_sendmsg") {
        0
    } else if has("tcp_recvmsg") {
        1
    } else if frames
        .first()
        .is_some_and(|(ip, _)| *ip >= 0xffff_8000_0000_0000)
    {
        2
    } else {
        3
    }
}

/// Sample counts per bucket from `perf script -F ip,sym` output (samples are runs of tab-indented
/// frame lines separated by blank lines).
fn count_buckets(script: &str) -> [u64; 4] {
    let mut counts = [0u64; 4];
    let mut frames: Vec<(u64, &str)> = Vec::new();
    for line in script.lines().chain(std::iter::once("")) {
        let line = line.trim();
        if line.is_empty() {
            if !frames.is_empty() {
                counts[bucket(&frames)] += 1;
                frames.clear();
            }
            continue;
        }
        let (ip, sym) = line.split_once(' ').unwrap_or((line, ""));
        frames.push((u64::from_str_radix(ip, 16).unwrap_or(0), sym.trim()));
    }
    counts
}

/// One profiled round: CPU µs per request, and per bucket.
struct Profiled {
    rps: f64,
    us_per_req: f64,
    buckets: [f64; 4],
}

fn profile_round(
    s: &ServerUnderTest,
    sc: Scenario,
    client_cpus: &str,
    duration: u64,
    dir: &Path,
) -> Result<Profiled> {
    let data = dir.join(format!("{}-{}.data", s.name, sc.connections));
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-o"])
        .arg(&data)
        .args(["-p", &s.pid().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start perf record")?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Keep-alive scenarios only: wrk gets no pipelining script.
    let measured = measure(
        s.pid(),
        &s.url(),
        sc,
        client_cpus,
        duration,
        &dir.join("unused.lua"),
    );
    // SIGINT makes perf write its data and exit (also when wrk failed: perf must not outlive this).
    Command::new("kill")
        .args(["-INT", &perf.id().to_string()])
        .status()
        .context("signal perf")?;
    let status = perf.wait()?;
    // After writing its data, perf ends by that SIGINT.
    if !status.success() && std::os::unix::process::ExitStatusExt::signal(&status) != Some(2) {
        let mut err = String::new();
        if let Some(mut e) = perf.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        bail!("perf record failed ({status}): {}", err.trim());
    }
    let r = measured?;
    if r.requests == 0 {
        bail!("wrk got no answers from {}", s.name);
    }
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .context("run perf script")?;
    let _ = std::fs::remove_file(&data);
    let counts = count_buckets(&String::from_utf8_lossy(&script.stdout));
    let total: u64 = counts.iter().sum();
    if total == 0 {
        bail!("perf recorded no samples of {}", s.name);
    }
    if counts[0] == 0 {
        // Every server sends: no sample under tcp_sendmsg means kernel symbols were not resolved.
        bail!("perf resolved no kernel symbols (no sample under tcp_sendmsg); run as root or set kernel.kptr_restrict=0 and kernel.perf_event_paranoid=1");
    }
    let us_per_req = r.cpu_us_per_req;
    Ok(Profiled {
        rps: r.rps,
        us_per_req,
        buckets: counts.map(|c| c as f64 / total as f64 * us_per_req),
    })
}

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    let (server_cpus, client_cpus) = (run.server_cpus, run.client_cpus);
    let (duration, rounds) = (run.duration, run.rounds);
    which("perf").context("perf is not installed (cargo xtask setup installs linux-perf)")?;
    let dir = work_dir(root, "profile")?;
    let mut servers = vec![
        statico_on(root, server_cpus, "tokio")?,
        statico_on(root, server_cpus, "io-uring")?,
    ];
    match start_nginx(&dir, server_cpus, Nginx::Http1) {
        Ok(s) => servers.push(s),
        Err(e) => eprintln!("bench: nginx skipped: {e:#}"),
    }
    let mut report = String::new();
    writeln!(
        report,
        "Where server CPU goes per keep-alive request (µs, medians of {rounds} round(s) of {duration} s; servers on CPU {server_cpus}, wrk -t1 on CPU {client_cpus}; perf cpu-clock samples of the server process)"
    )?;
    for sc in SCENARIOS.iter().filter(|s| s.pipeline == 1 && !s.close) {
        let mut per_server: Vec<Vec<Profiled>> = servers.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for (i, s) in servers.iter().enumerate() {
                let p = profile_round(s, *sc, client_cpus, duration, &dir)?;
                eprintln!(
                    "  {:<17} {:<16} {:>8.0} req/s {:>6.2} µs/req",
                    s.name, sc.name, p.rps, p.us_per_req
                );
                per_server[i].push(p);
            }
        }
        writeln!(report, "\n{}", sc.name)?;
        write!(report, "  {:<16} {:>9} {:>8}", "server", "req/s", "total")?;
        for b in BUCKETS {
            write!(report, " {b:>19}")?;
        }
        writeln!(report, " {:>19}", "event loop + user")?;
        let mut own = Vec::new();
        let mut totals = Vec::new();
        for (s, ps) in servers.iter().zip(&per_server) {
            let total = Stat::of(ps.iter().map(|p| p.us_per_req).collect()).median;
            let b: Vec<f64> = (0..4)
                .map(|k| Stat::of(ps.iter().map(|p| p.buckets[k]).collect()).median)
                .collect();
            let mine = Stat::of(ps.iter().map(|p| p.buckets[2] + p.buckets[3]).collect()).median;
            write!(
                report,
                "  {:<16} {:>9.0} {:>8.2}",
                s.name,
                Stat::of(ps.iter().map(|p| p.rps).collect()).median,
                total
            )?;
            for v in &b {
                write!(report, " {v:>19.2}")?;
            }
            writeln!(report, " {mine:>19.2}")?;
            own.push(mine);
            totals.push(total);
        }
        writeln!(
            report,
            "  io-uring / tokio: total {:.2}×, event loop + user {:.2}×",
            totals[1] / totals[0],
            own[1] / own[0]
        )?;
    }
    std::fs::write(dir.join("report.txt"), &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_the_bucket_of_their_stack() {
        let script = "\n\tffffffff81000001 _raw_spin_unlock\n\tffffffff81000002 tcp_sendmsg\n\tffffffff81000003 do_syscall_64\n\t  1234 __send\n\n\n\
                      \tffffffff81000004 _copy_to_iter\n\tffffffff81000005 tcp_recvmsg\n\n\
                      \tffffffff81000006 io_cqring_wait\n\t  5678 syscall\n\n\
                      \t  9abc httparse::parse\n\t  1 [unknown]\n";
        assert_eq!(count_buckets(script), [1, 1, 1, 1]);
    }
}
