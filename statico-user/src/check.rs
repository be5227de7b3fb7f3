//! `statico --check`: what a start would find, without serving (like `nginx -t`).
//!
//! The server's own start-up steps do the checking — flags, files (body, certificates, site), the
//! runtime probe, the steering ladder with its BPF attach and pins, XDP, the port — and stop before
//! the workers start (see `server::run`). This module adds what a start does not need but a benchmark
//! node should know: the listen backlog against `net.core.somaxconn`, and node-tuning advice (CPU
//! frequency governor, irqbalance, RPS, busy polling), read from /proc and /sys. Advice never fails the
//! check.

use std::net::SocketAddr;
use std::path::Path;

use crate::config::Plan;

/// `--check`: everything a start needs has worked (the listeners and BPF state are released on
/// return); says what a start would use, and advice about the node. `lines` are the runtime's and the
/// steering's descriptions.
pub fn report(plan: &Plan, addr: SocketAddr, [runtime, steering]: &[String; 2]) {
    let scheme = if plan.https() { "https" } else { "http" };
    eprintln!("statico: check: steering {steering}");
    eprintln!(
        "statico: check: a start would listen on {scheme}://{addr} with {} workers (runtime: {runtime}){}",
        plan.workers,
        plan.h3_note(addr)
    );
    let backlog = u32::try_from(plan.listen.sockets.backlog).unwrap_or(0);
    for line in advice(backlog) {
        eprintln!("statico: advice: {line}");
    }
    eprintln!("statico: check: OK");
}

/// Lines of advice about this node for a server started with `backlog` (empty: nothing to say).
pub fn advice(backlog: u32) -> Vec<String> {
    let mut lines = Vec::new();
    if !cfg!(target_os = "linux") {
        return lines; // every fact below is read from Linux's /proc and /sys
    }
    if let Some(max) = read_number("/proc/sys/net/core/somaxconn") {
        if u64::from(backlog) > max {
            lines.push(format!(
                "--listen-backlog {backlog} is cut to net.core.somaxconn {max}: raise it (sysctl -w net.core.somaxconn={backlog})"
            ));
        }
    }
    let governors = governors();
    if governors.iter().any(|g| g != "performance") {
        lines.push(format!(
            "CPU frequency governor {}: `performance` keeps benchmark numbers steady (cpupower frequency-set -g performance)",
            governors.join(",")
        ));
    }
    if irqbalance_running() {
        lines.push("irqbalance is running: it moves NIC interrupts between CPUs during a run; pin them and stop it for steady numbers".into());
    }
    if read_number("/proc/sys/net/core/busy_poll") == Some(0) {
        lines.push("net.core.busy_poll is 0: busy polling is off (fine on loopback; on a NIC it can lower latency)".into());
    }
    if !rps_configured() {
        lines.push("RPS is off on every interface: with fewer NIC queues than CPUs, /sys/class/net/IFACE/queues/rx-*/rps_cpus spreads receive work".into());
    }
    lines
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The distinct frequency governors of the CPUs (empty without cpufreq, as in most VMs).
fn governors() -> Vec<String> {
    let mut found: Vec<String> = (0..1024)
        .map_while(|cpu| {
            let p = format!("/sys/devices/system/cpu/cpu{cpu}");
            Path::new(&p).exists().then_some(p)
        })
        .filter_map(|p| std::fs::read_to_string(format!("{p}/cpufreq/scaling_governor")).ok())
        .map(|g| g.trim().to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

fn irqbalance_running() -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        std::fs::read_to_string(p.path().join("comm")).is_ok_and(|c| c.trim() == "irqbalance")
    })
}

/// Whether any receive queue of any interface has an RPS CPU mask set.
fn rps_configured() -> bool {
    let Ok(ifaces) = std::fs::read_dir("/sys/class/net") else {
        return true; // nothing to say
    };
    ifaces.flatten().any(|iface| {
        let Ok(queues) = std::fs::read_dir(iface.path().join("queues")) else {
            return false;
        };
        queues.flatten().any(|q| {
            std::fs::read_to_string(q.path().join("rps_cpus"))
                .is_ok_and(|m| m.trim().chars().any(|c| c != '0' && c != ','))
        })
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_backlog_over_somaxconn_is_advised_against() {
        let max: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .map_or(4096, |s| s.trim().parse().unwrap_or(4096));
        let over = super::advice(max.saturating_add(1));
        assert!(over.iter().any(|l| l.contains("somaxconn")), "{over:?}");
        let within = super::advice(1);
        assert!(
            !within.iter().any(|l| l.contains("somaxconn")),
            "{within:?}"
        );
    }
}
