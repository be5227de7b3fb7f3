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
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

use super::measure::{interleave, measure, Scenario, Stat, SCENARIOS};
use super::report::{work_dir, RunInfo};
use super::servers::{start_nginx, statico_on, Nginx};
use crate::setup::which;
use crate::tools::server::{signal, ServerUnderTest};

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

/// One round of `sc` against `s` with perf sampling the server; perf is stopped whatever wrk did.
fn profile_round(
    s: &ServerUnderTest,
    sc: Scenario,
    client_cpus: &str,
    duration: u64,
    dir: &Path,
) -> Result<Profiled> {
    let data = dir.join(format!("{}-{}.data", s.name, sc.connections));
    let perf = start_perf(s.pid(), &data)?;
    // Keep-alive scenarios only: wrk gets no pipelining script.
    let lua = dir.join("unused.lua");
    let measured = measure(s.pid(), &s.url(), sc, client_cpus, duration, &lua);
    stop_perf(perf)?;
    let r = measured?;
    if r.requests == 0 {
        bail!("wrk got no answers from {}", s.name);
    }
    let counts = sample_buckets(&data, &s.name)?;
    let total: u64 = counts.iter().sum();
    Ok(Profiled {
        rps: r.rps,
        us_per_req: r.cpu_us_per_req,
        buckets: counts.map(|c| c as f64 / total as f64 * r.cpu_us_per_req),
    })
}

/// `perf record` of process `pid`'s stacks into `data`, given a moment to attach.
fn start_perf(pid: u32, data: &Path) -> Result<Child> {
    let perf = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-o"])
        .arg(data)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start perf record")?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    Ok(perf)
}

/// SIGINT makes perf write its data and exit (it then ends by that SIGINT); if it cannot be
/// signalled it is killed, so it never outlives the round.
fn stop_perf(mut perf: Child) -> Result<()> {
    let sent = signal(perf.id(), "-INT");
    if sent.is_err() {
        let _ = perf.kill();
        let _ = perf.wait();
        bail!("could not signal perf record: {sent:?}");
    }
    let status = perf.wait()?;
    if status.success() || status.signal() == Some(2) {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = perf.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    bail!("perf record failed ({status}): {}", err.trim())
}

/// Sample counts per bucket from perf's `data` (removed once read), checked to be usable.
fn sample_buckets(data: &Path, server: &str) -> Result<[u64; 4]> {
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .context("run perf script")?;
    let _ = std::fs::remove_file(data);
    let counts = count_buckets(&String::from_utf8_lossy(&script.stdout));
    if counts.iter().sum::<u64>() == 0 {
        bail!("perf recorded no samples of {server}");
    }
    if counts[0] == 0 {
        // Every server sends: no sample under tcp_sendmsg means kernel symbols were not resolved.
        bail!("perf resolved no kernel symbols (no sample under tcp_sendmsg); run as root or set kernel.kptr_restrict=0 and kernel.perf_event_paranoid=1");
    }
    Ok(counts)
}

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    which("perf").context("perf is not installed (cargo xtask setup installs linux-perf)")?;
    let dir = work_dir(root, "profile")?;
    let servers = start_servers(root, &dir, run.server_cpus)?;
    let mut report = format!(
        "Where server CPU goes per keep-alive request (µs, medians of {} round(s) of {} s; servers on CPU {}, wrk -t1 on CPU {}; perf cpu-clock samples of the server process)\n",
        run.rounds, run.duration, run.server_cpus, run.client_cpus
    );
    for sc in SCENARIOS.iter().filter(|s| s.pipeline == 1 && !s.close) {
        let per_server = interleave(&servers, run.rounds, |s| {
            let p = profile_round(s, *sc, run.client_cpus, run.duration, &dir)?;
            eprintln!(
                "  {:<17} {:<16} {:>8.0} req/s {:>6.2} µs/req",
                s.name, sc.name, p.rps, p.us_per_req
            );
            Ok(p)
        })?;
        scenario_table(&mut report, sc.name, &servers, &per_server);
    }
    std::fs::write(dir.join("report.txt"), &report)?;
    Ok(report)
}

/// statico on each runtime, and nginx unless it cannot start.
fn start_servers(root: &Path, dir: &Path, cpus: &str) -> Result<Vec<ServerUnderTest>> {
    let mut servers = vec![
        statico_on(root, cpus, "tokio")?,
        statico_on(root, cpus, "io-uring")?,
    ];
    match start_nginx(dir, cpus, Nginx::Http1) {
        Ok(s) => servers.push(s),
        Err(e) => eprintln!("bench: nginx skipped: {e:#}"),
    }
    Ok(servers)
}

/// One scenario's table: per server req/s, total and per-bucket µs per request, what its design
/// controls (event loop + user), medians; then io-uring against tokio.
fn scenario_table(
    report: &mut String,
    scenario: &str,
    servers: &[ServerUnderTest],
    per_server: &[Vec<Profiled>],
) {
    let _ = writeln!(report, "\n{scenario}");
    let _ = write!(report, "  {:<16} {:>9} {:>8}", "server", "req/s", "total");
    for b in BUCKETS {
        let _ = write!(report, " {b:>19}");
    }
    let _ = writeln!(report, " {:>19}", "event loop + user");
    let mut totals = Vec::new();
    let mut own = Vec::new();
    for (s, ps) in servers.iter().zip(per_server) {
        let median = |f: &dyn Fn(&Profiled) -> f64| Stat::of(ps.iter().map(f)).median;
        let (total, mine) = (
            median(&|p| p.us_per_req),
            median(&|p| p.buckets[2] + p.buckets[3]),
        );
        let rps = median(&|p| p.rps);
        let _ = write!(report, "  {:<16} {rps:>9.0} {total:>8.2}", s.name);
        for k in 0..BUCKETS.len() {
            let _ = write!(report, " {:>19.2}", median(&|p| p.buckets[k]));
        }
        let _ = writeln!(report, " {mine:>19.2}");
        totals.push(total);
        own.push(mine);
    }
    let _ = writeln!(
        report,
        "  io-uring / tokio: total {:.2}×, event loop + user {:.2}×",
        totals[1] / totals[0],
        own[1] / own[0]
    );
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
