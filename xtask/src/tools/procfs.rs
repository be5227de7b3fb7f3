//! What /proc tells of a process and of the machine: RSS and other `/proc/PID/status` fields, CPU
//! time from `/proc/PID/stat`, open descriptors, run-queue delay, and the machine's description.
//! The parsers take the files' text, so they are unit-tested without a process.

use std::process::Command;

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// The field `name` (with its colon, e.g. `VmRSS:`) of a /proc/PID/status text, in KiB.
pub fn parse_status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime and stime (fields 14 and 15) of a /proc/PID/stat text, in clock ticks; the command name
/// may hold spaces and parentheses, so fields are counted after its last ')'.
pub fn parse_stat_user_system(stat: &str) -> Option<(u64, u64)> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// The field `name` (with its colon) of process `pid`'s /proc/PID/status, in KiB.
pub fn status_kib(pid: u32, name: &str) -> Option<u64> {
    parse_status_kib(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        name,
    )
}

/// utime + stime of a whole process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let (user, system) = user_system_ticks(pid)?;
    Ok(user + system)
}

/// utime and stime of a whole process, in clock ticks.
pub fn user_system_ticks(pid: u32) -> Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat_user_system(&stat).context("/proc/PID/stat format")
}

/// The descriptors process `pid` has open (/proc/PID/fd).
pub fn fd_count(pid: u32) -> Result<u64> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64)
}

pub fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The time every thread of process `pid` has spent runnable but waiting for a CPU (the second field
/// of /proc/PID/task/TID/schedstat), in ns: how much other work on its CPUs held it back.
pub fn run_queue_ns(pid: u32) -> Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = std::fs::read_to_string(task?.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Kernel, CPU model and count, memory, from /proc.
pub fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    let mem_kib = read("/proc/meminfo")
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    json!({
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "cpu_model": model,
        "cpus": cpu_count(),
        "memory_kib": mem_kib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn proc_files_parse() {
        let status = "Name:\tstatico\nVmPeak:\t  99 kB\nVmRSS:\t   12345 kB\nThreads: 4\n";
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(12345));
        assert_eq!(parse_status_kib("Name: x\n", "VmRSS:"), None);
        assert_eq!(
            parse_status_kib("VmRSS: 9 kB\nRssAnon:\t  77 kB\n", "RssAnon:"),
            Some(77)
        );
        let stat = "4242 (stat ico) (x) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 4 0 100";
        assert_eq!(parse_stat_user_system(stat), Some((150, 25)));
        assert_eq!(parse_stat_user_system("4242 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_is_read() {
        let me = std::process::id();
        assert!(status_kib(me, "VmRSS:").is_some_and(|k| k > 0));
        cpu_ticks(me).unwrap();
        assert!(fd_count(me).unwrap() >= 3);
    }

    #[test]
    fn a_process_has_a_run_queue_delay() {
        let me = std::process::id();
        let before = run_queue_ns(me).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(run_queue_ns(me).unwrap() >= before);
        assert!(run_queue_ns(u32::MAX).is_err());
    }
}
