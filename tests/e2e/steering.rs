//! The steering ladder, observed from outside: clients pinned to each CPU, and which worker accepted
//! their connections. On loopback the SYN is processed on the client's CPU, so with `ebpf` and
//! `incoming-cpu` every connection must land on the worker pinned to the client's CPU; with plain
//! `reuseport` the kernel hashes and the spread is not all-local.
//!
//! The eBPF tests need root (CAP_BPF + CAP_NET_ADMIN): without it they print that they are skipped.
//! The unprivileged cases run statico as the user `nobody`, which also needs root to arrange.

use std::process::Command;

use statico_tests::{get, is_root, Reader, Server, Stopped};

const PER_CPU: usize = 12;

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Skips (loudly) a test that needs root.
macro_rules! require_root {
    ($what:expr) => {
        if !is_root() {
            eprintln!(
                "SKIPPED: {} needs root (CAP_BPF + CAP_NET_ADMIN); CI runs as root",
                $what
            );
            return;
        }
    };
}

/// Opens `PER_CPU` connections from a thread pinned to `cpu`, one request each.
fn connect_from_cpu(s: &Server, cpu: usize) {
    let addr = s.addr;
    std::thread::spawn(move || {
        pin_current_thread(cpu);
        for _ in 0..PER_CPU {
            let c = std::net::TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(statico_tests::WAIT)).unwrap();
            let mut r = Reader::new(c);
            r.send(&get("/"));
            assert_eq!(r.response(false).status, 200);
        }
    })
    .join()
    .unwrap();
}

/// Opens `PER_CPU` connections from each CPU in turn, and returns, for each CPU, how many of its
/// connections each worker took (read from the JSON meter between phases; one request a connection).
fn spread_by_client_cpu(s: &Server) -> Vec<Vec<u64>> {
    let mut before = vec![0u64; cpus()];
    let mut spread = Vec::new();
    for cpu in 0..cpus() {
        connect_from_cpu(s, cpu);
        let total = ((cpu + 1) * PER_CPU) as u64;
        let now = worker_requests_when_total(s, total);
        spread.push(now.iter().zip(&before).map(|(n, b)| n - b).collect());
        before = now;
    }
    spread
}

/// Waits for a JSON meter line whose total is `total` requests and returns its per-worker requests.
fn worker_requests_when_total(s: &Server, total: u64) -> Vec<u64> {
    let key = format!("\"requests\":{total},");
    let out = s.wait_stdout(&key);
    let line = out.lines().find(|l| l.contains(&key)).unwrap();
    let workers = line
        .split("\"workers\":[")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap();
    workers
        .split("\"requests\":")
        .skip(1)
        .map(|r| r.split('}').next().unwrap().parse().unwrap())
        .collect()
}

/// Worker i is pinned to CPU i (the server runs one worker per CPU): every connection from CPU c must
/// have been taken by worker c.
fn assert_all_local(spread: &[Vec<u64>]) {
    for (cpu, by_worker) in spread.iter().enumerate() {
        for (worker, n) in by_worker.iter().enumerate() {
            let expected = if worker == cpu { PER_CPU as u64 } else { 0 };
            assert_eq!(
                *n, expected,
                "connections from CPU {cpu} taken per worker: {by_worker:?} (all: {spread:?})"
            );
        }
    }
}

#[cfg(target_os = "linux")]
fn pin_current_thread(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one bit set, passed by pointer with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "pin to CPU {cpu}"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_current_thread(_: usize) {}

/// Sums `key` over the per-CPU lines starting with `prefix` that statico prints at exit.
fn per_cpu_sum(stopped: &Stopped, prefix: &str, key: &str) -> u64 {
    stopped
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            let v = l.split(&format!("{key}=")).nth(1).unwrap();
            v.split_whitespace().next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

/// (steered, fallbacks) over all CPUs.
fn steering_totals(stopped: &Stopped) -> (u64, u64) {
    let sum = |k| per_cpu_sum(stopped, "statico: steering cpu ", k);
    (sum("steered"), sum("fallbacks"))
}

#[test]
fn ebpf_steers_every_connection_to_the_clients_cpu() {
    require_root!("ebpf steering");
    let s = Server::start(&[
        "--steering",
        "ebpf",
        "-t",
        &cpus().to_string(),
        "-m",
        "--meter-format",
        "json",
    ]);
    assert!(s.stderr().contains("steering: ebpf"), "{}", s.stderr());
    assert_all_local(&spread_by_client_cpu(&s));
    let stopped = s.stop();
    let (steered, fallbacks) = steering_totals(&stopped);
    assert_eq!(
        (steered, fallbacks),
        ((cpus() * PER_CPU) as u64, 0),
        "{}",
        stopped.stderr
    );
}

#[test]
fn incoming_cpu_keeps_connections_local_without_privileges() {
    let s = Server::start(&[
        "--steering",
        "incoming-cpu",
        "-t",
        &cpus().to_string(),
        "-m",
        "--meter-format",
        "json",
    ]);
    assert_all_local(&spread_by_client_cpu(&s));
}

#[test]
fn plain_reuseport_hashes_so_the_spread_is_not_all_local() {
    if cpus() < 2 {
        eprintln!("SKIPPED: needs 2 CPUs to compare spreads");
        return;
    }
    let s = Server::start(&[
        "--steering",
        "reuseport",
        "-t",
        &cpus().to_string(),
        "-m",
        "--meter-format",
        "json",
    ]);
    let spread = spread_by_client_cpu(&s);
    // Every connection served, but not all by the client's CPU's worker: all-local by chance has
    // probability 2^-(CPUs * PER_CPU) under hashing.
    assert_eq!(
        spread.iter().flatten().sum::<u64>(),
        (cpus() * PER_CPU) as u64
    );
    let local: u64 = spread.iter().enumerate().map(|(cpu, w)| w[cpu]).sum();
    assert!(
        local < (cpus() * PER_CPU) as u64,
        "hashing looked CPU-local: {spread:?}"
    );
}

#[test]
fn ebpf_cpu_without_a_worker_falls_back_without_refusing() {
    require_root!("ebpf steering");
    if cpus() < 2 {
        eprintln!("SKIPPED: needs 2 CPUs for a CPU without a worker");
        return;
    }
    // One worker, pinned to the first CPU: SYNs on the other CPUs find no slot and must still be served.
    let s = Server::start(&["--steering", "ebpf", "-t", "1"]);
    for cpu in 0..cpus() {
        connect_from_cpu(&s, cpu);
    }
    let stopped = s.stop();
    let (steered, fallbacks) = steering_totals(&stopped);
    assert_eq!(steered, PER_CPU as u64, "{}", stopped.stderr);
    assert_eq!(
        fallbacks,
        ((cpus() - 1) * PER_CPU) as u64,
        "{}",
        stopped.stderr
    );
    assert_eq!(stopped.total("requests"), (cpus() * PER_CPU) as u64);
}

#[test]
fn bpftool_reads_the_pinned_counters_and_pins_go_at_exit() {
    require_root!("ebpf steering");
    let s = Server::start(&["--steering", "ebpf"]);
    let pins = format!("/sys/fs/bpf/statico/{}", s.addr.port());
    let mut r = Reader::new(s.connect());
    for _ in 0..7 {
        r.send(&get("/"));
        r.response(false);
    }
    let out = Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned", &format!("{pins}/workers")])
        .output()
        .expect("bpftool (installed by cargo xtask setup)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = requests_in_dump(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(requests, 7, "bpftool saw {requests} requests");
    drop(r);
    let stopped = s.stop();
    assert!(stopped.status.success());
    assert!(
        !std::path::Path::new(&pins).exists(),
        "pins left behind in {pins}"
    );
}

/// Sums the `requests` field of every worker record in `bpftool -j map dump` output: the map carries
/// BTF, so bpftool prints each record by field name.
fn requests_in_dump(json: &str) -> u64 {
    json.split("\"requests\":")
        .skip(1)
        .map(|v| {
            v.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// Runs statico as `nobody` (no capabilities) and returns its exit code and stderr, or the line
/// announcing the steering rung if it started (then stops it).
#[cfg(target_os = "linux")]
fn as_nobody(args: &[&str]) -> (Option<i32>, String) {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    // A copy `nobody` can execute, unique per call (tests run in parallel).
    static COPIES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let bin = std::env::temp_dir().join(format!("statico-nobody-{}-{n}", std::process::id()));
    std::fs::copy(statico_tests::binary(), &bin).unwrap();
    let spawn = || {
        Command::new(&bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                "0",
                "--runtime",
                &statico_tests::runtime(),
            ])
            .args(args)
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
    };
    // A child forked by a parallel test may still hold the copy's write descriptor for a moment
    // (ETXTBSY until it execs): retry briefly.
    let mut child = (0..50)
        .find_map(|_| match spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            }
            other => Some(other.unwrap()),
        })
        .expect("the copied binary stayed busy");
    let mut err = String::new();
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        err.push_str(&line);
        err.push('\n');
        if line.contains("listening on") {
            statico_tests::signal(child.id(), "TERM");
        }
    }
    let status = statico_tests::wait_timeout(&mut child, statico_tests::WAIT);
    let _ = std::fs::remove_file(&bin);
    (status.and_then(|s| s.code()), err)
}

#[cfg(target_os = "linux")]
#[test]
fn forced_ebpf_without_privileges_fails_with_the_reason() {
    require_root!("switching to the unprivileged user nobody");
    let (code, err) = as_nobody(&["--steering", "ebpf"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--steering ebpf cannot work here") && err.contains("CAP_BPF"),
        "{err}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn auto_without_privileges_lands_on_incoming_cpu_and_says_why() {
    require_root!("switching to the unprivileged user nobody");
    let (code, err) = as_nobody(&[]);
    assert_eq!(code, Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("steering: "))
        .unwrap_or_default();
    assert!(
        line.contains("steering: incoming-cpu") && line.contains("eBPF passed over"),
        "{err}"
    );
}

#[test]
fn xdp_on_lo_counts_the_server_ports_packets() {
    require_root!("XDP");
    let s = Server::start(&["--xdp", "lo"]);
    for _ in 0..5 {
        let mut r = Reader::new(s.connect());
        r.send(&get("/"));
        r.response(false);
    }
    let stopped = s.stop();
    let packets = per_cpu_sum(&stopped, "statico: xdp cpu ", "packets");
    let bytes = per_cpu_sum(&stopped, "statico: xdp cpu ", "bytes");
    // Each connection: handshake (3), request, response, their ACKs, and the close: well over 5 packets
    // each, and at least the request and response bytes.
    assert!(
        packets >= 5 * 5,
        "xdp counted {packets} packets:\n{}",
        stopped.stderr
    );
    assert!(
        bytes >= stopped.total("bytes_in") + stopped.total("bytes_out"),
        "xdp counted {bytes} bytes"
    );
    let link = Command::new("ip")
        .args(["link", "show", "lo"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&link.stdout).contains("xdp"),
        "XDP left attached to lo"
    );
}

#[test]
fn xdp_without_the_ebpf_rung_is_refused() {
    let (code, err) = statico_tests::run_to_exit(&[
        "-a",
        "127.0.0.1",
        "-p",
        "0",
        "--steering",
        "reuseport",
        "--xdp",
        "lo",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--xdp") && err.contains("--steering ebpf"),
        "{err}"
    );
}

/// `/proc/PID/status`'s values for `key` (`Uid:` gives real, effective, saved and filesystem uid).
#[cfg(target_os = "linux")]
fn status_fields(pid: u32, key: &str) -> Vec<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// A statico started as root with `--user nobody` runs as nobody (every uid), with no capability
/// left, and serves.
#[cfg(target_os = "linux")]
fn assert_serves_as_nobody(s: &Server) {
    assert_eq!(status_fields(s.pid(), "Uid:"), ["65534"; 4]);
    assert_eq!(status_fields(s.pid(), "Gid:"), ["65534"; 4]);
    for set in ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:"] {
        let caps = u64::from_str_radix(&status_fields(s.pid(), set)[0], 16).unwrap();
        assert_eq!(caps, 0, "{set} capabilities left");
    }
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).status, 200);
}

#[cfg(target_os = "linux")]
#[test]
fn user_flag_runs_the_hot_path_unprivileged_and_pins_still_go() {
    require_root!("--user");
    let s = Server::start(&["--steering", "ebpf", "--user", "nobody"]);
    assert!(
        s.stderr()
            .contains("running as nobody with no capabilities"),
        "{}",
        s.stderr()
    );
    let pins = format!("/sys/fs/bpf/statico/{}", s.addr.port());
    assert!(std::path::Path::new(&pins).exists());
    assert_serves_as_nobody(&s);
    let stopped = s.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert!(
        !std::path::Path::new(&pins).exists(),
        "pins left behind after --user"
    );
}

/// `--user` has nothing to do with BPF: on a rung without it (as on a build without the programs)
/// statico switches user all the same.
#[cfg(target_os = "linux")]
#[test]
fn user_flag_switches_without_any_bpf_state() {
    require_root!("--user");
    let s = Server::start(&["--steering", "reuseport", "--user", "nobody"]);
    assert!(
        s.stderr()
            .contains("running as nobody with no capabilities"),
        "{}",
        s.stderr()
    );
    assert_serves_as_nobody(&s);
    assert!(s.stop().status.success());
}

#[cfg(target_os = "linux")]
#[test]
fn a_user_the_system_does_not_know_is_refused_with_the_fix() {
    for check in [false, true] {
        let mut args = vec!["-a", "127.0.0.1", "-p", "0", "--user", "no-such-user-here"];
        if check {
            args.push("--check");
        }
        let (code, err) = statico_tests::run_to_exit(&args);
        assert_eq!(code, Some(2), "a flag error (--check: {check}): {err}");
        assert!(
            err.contains("--user no-such-user-here: no such user"),
            "{err}"
        );
        assert!(
            !err.contains("listening on"),
            "refused before listening: {err}"
        );
    }
}

#[test]
fn shared_rung_serves_from_one_listener() {
    let s = Server::start(&[
        "--steering",
        "shared",
        "-t",
        "2",
        "-m",
        "--meter-format",
        "json",
    ]);
    assert!(
        s.stderr().contains("steering: shared (forced"),
        "{}",
        s.stderr()
    );
    for cpu in 0..cpus() {
        connect_from_cpu(&s, cpu);
    }
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), (cpus() * PER_CPU) as u64);
}

#[cfg(target_os = "linux")]
#[test]
fn stale_pins_from_a_crashed_run_are_replaced() {
    require_root!("ebpf steering");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pins = format!("/sys/fs/bpf/statico/{port}");
    // What a crashed run leaves: the directory (bpffs only holds BPF objects, so an empty one).
    std::fs::create_dir_all(&pins).unwrap();
    let s = Server::start(&["--steering", "ebpf", "-p", &port.to_string()]);
    assert!(s.stderr().contains("steering: ebpf"), "{}", s.stderr());
    assert!(std::path::Path::new(&format!("{pins}/workers")).exists());
    let stopped = s.stop();
    assert!(stopped.status.success());
    assert!(!std::path::Path::new(&pins).exists());
}
