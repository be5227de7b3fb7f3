//! `cargo xtask bench`: statico and its peers measured side by side, in one run, on this machine.
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

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::setup::which;

#[derive(clap::Args, Debug, Default)]
pub struct BenchArgs {
    /// CPU list the servers are pinned to (taskset syntax) [default: the last CPU]
    #[arg(long)]
    pub server_cpus: Option<String>,
    /// CPU list wrk is pinned to [default: every other CPU]
    #[arg(long)]
    pub client_cpus: Option<String>,
    /// Seconds per measured round
    #[arg(long, default_value_t = 6)]
    pub duration: u64,
    /// Rounds per server and scenario (median reported)
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// A sub-minute smoke run: 1 round of 2 s, 1000 idle connections, no optional peers
    #[arg(long)]
    pub quick: bool,
    /// Where to write results.json, chart.svg and report.txt [default: target/bench/<timestamp>]
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Instead: compare the steering rungs on new connections (needs root for the ebpf rung)
    #[arg(long)]
    pub steering: bool,
    /// Instead: statico --http2 against nginx http2 with h2load (-c 50 -m 16)
    #[arg(long)]
    pub http2: bool,
    /// Instead: split each server's CPU per keep-alive request into TCP send, TCP receive, event
    /// loop (kernel) and user space, from perf cpu-clock samples
    #[arg(long)]
    pub profile: bool,
    /// Instead: redraw DIR/chart.svg from DIR/results.json (medians), without measuring
    #[arg(long, value_name = "DIR")]
    pub redraw: Option<PathBuf>,
}

const BODY: &str = "Hello, World!";

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub connections: u32,
    pub pipeline: u32,
    pub close: bool,
}

pub const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "keep-alive c50",
        connections: 50,
        pipeline: 1,
        close: false,
    },
    Scenario {
        name: "keep-alive c256",
        connections: 256,
        pipeline: 1,
        close: false,
    },
    Scenario {
        name: "pipelined x16 c256",
        connections: 256,
        pipeline: 16,
        close: false,
    },
    Scenario {
        name: "connection: close c50",
        connections: 50,
        pipeline: 1,
        close: true,
    },
];

/// The RSS-only scenario: this many idle keep-alive connections.
const IDLE_SCENARIO: &str = "idle keep-alive";

#[derive(Clone, Debug, Default)]
pub struct Round {
    pub rps: f64,
    pub requests: u64,
    pub cpu_us_per_req: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
}

pub struct ServerUnderTest {
    pub name: String,
    command: String,
    pub child: Child,
    pub port: u16,
}

impl Drop for ServerUnderTest {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn run(root: &Path, mut args: BenchArgs) -> Result<()> {
    if args.steering {
        let report = crate::steering_bench::run(root, args.duration, args.rounds)?;
        println!("{report}");
        return Ok(());
    }
    if let Some(dir) = &args.redraw {
        return redraw(dir);
    }
    if args.quick {
        args.duration = 2;
        args.rounds = 1;
    }
    let n = cpu_count();
    if args.http2 || args.profile {
        let server = args
            .server_cpus
            .clone()
            .unwrap_or_else(|| (n - 1).to_string());
        let client = args.client_cpus.clone().unwrap_or_else(|| "0".into());
        let mode = if args.http2 {
            crate::http2_bench::run
        } else {
            crate::profile_bench::run
        };
        println!(
            "{}",
            mode(root, &server, &client, args.duration, args.rounds)?
        );
        return Ok(());
    }
    let server_cpus = args
        .server_cpus
        .clone()
        .unwrap_or_else(|| (n - 1).to_string());
    let client_cpus = args.client_cpus.clone().unwrap_or_else(|| {
        if n > 1 {
            format!("0-{}", n - 2)
        } else {
            "0".into()
        }
    });
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let dir = root.join(
        args.out
            .clone()
            .unwrap_or_else(|| root.join("target/bench").join(stamp.to_string())),
    );
    std::fs::create_dir_all(&dir)?;
    // nginx resolves relative paths against its own prefix: give it absolute ones.
    let dir = dir.canonicalize()?;
    let pipeline_lua = dir.join("pipeline.lua");
    std::fs::write(&pipeline_lua, PIPELINE_LUA)?;
    let idle_conns = if args.quick { 1_000 } else { 10_000 };
    eprintln!(
        "bench: servers pinned to CPU {server_cpus}, wrk pinned to CPU {client_cpus} (set with --server-cpus/--client-cpus); {} round(s) of {} s per scenario",
        args.rounds, args.duration
    );

    let mut servers = vec![start_statico(root, &server_cpus, "tokio")?];
    if cfg!(target_os = "linux") {
        match start_statico(root, &server_cpus, "io-uring") {
            Ok(s) => servers.push(s),
            Err(e) => eprintln!("bench: statico io-uring skipped: {e:#}"),
        }
    }
    match start_nginx(&dir, &server_cpus) {
        Ok(s) => servers.push(s),
        Err(e) => eprintln!("bench: nginx skipped: {e:#}"),
    }
    if !args.quick {
        for peer in &PEERS {
            match build_peer(root, peer).and_then(|bin| start_peer(peer, &bin, &server_cpus)) {
                Ok(s) => servers.push(s),
                Err(e) => eprintln!("bench: peer {} skipped: {e:#}", peer.name),
            }
        }
    }

    let mut table: Vec<(String, &'static str, Vec<Round>)> = Vec::new();
    for sc in SCENARIOS {
        let mut per_server: Vec<Vec<Round>> = vec![Vec::new(); servers.len()];
        for _ in 0..args.rounds {
            for (i, s) in servers.iter().enumerate() {
                let r = measure(s, sc, &client_cpus, args.duration, &pipeline_lua)?;
                eprintln!(
                    "  {:<17} {:<22} {:>10.0} req/s {:>7.2} µs/req{}",
                    s.name,
                    sc.name,
                    r.rps,
                    r.cpu_us_per_req,
                    if r.errors > 0 {
                        format!("  ({} errors)", r.errors)
                    } else {
                        String::new()
                    }
                );
                per_server[i].push(r);
            }
        }
        for (i, rounds) in per_server.into_iter().enumerate() {
            table.push((servers[i].name.clone(), sc.name, rounds));
        }
    }
    let mut memory = Vec::new();
    for s in &servers {
        let m = idle_rss(s, idle_conns)?;
        eprintln!(
            "  {:<17} {IDLE_SCENARIO}: {} connections, RSS {} KiB (idle server {} KiB)",
            s.name, m.connections, m.rss_kib, m.baseline_kib
        );
        memory.push(m);
    }
    for (s, m) in servers.iter().zip(memory.iter_mut()) {
        m.peak_kib = status_kib(s.child.id(), "VmHWM:").unwrap_or(0);
    }

    let report = render(&table, &memory, &server_cpus, &client_cpus, &args);
    println!("{report}");
    std::fs::write(dir.join("report.txt"), &report)?;
    let doc = to_json(
        &servers,
        &table,
        &memory,
        &server_cpus,
        &client_cpus,
        &args,
        idle_conns,
    );
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    chart(&dir.join("chart.svg"), &table)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(())
}

/// Checks that a results.json has every server and scenario it claims, each with measured rounds.
pub fn validate(path: &Path) -> Result<()> {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let servers: Vec<&str> = doc["servers"]
        .as_array()
        .context("no servers")?
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    let scenarios: Vec<&str> = doc["scenarios"]
        .as_array()
        .context("no scenarios")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if servers.len() < 2 || scenarios.len() < SCENARIOS.len() + 1 {
        bail!(
            "{}: expected statico and nginx and every scenario, got {servers:?} {scenarios:?}",
            path.display()
        );
    }
    let results = doc["results"].as_array().context("no results")?;
    for server in &servers {
        for scenario in &scenarios {
            if *scenario == IDLE_SCENARIO {
                let found = doc["memory"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| m["server"] == *server && m["rss_kib"].as_u64().unwrap_or(0) > 0);
                if !found {
                    bail!("{}: no {IDLE_SCENARIO} RSS for {server}", path.display());
                }
                continue;
            }
            let r = results
                .iter()
                .find(|r| r["server"] == *server && r["scenario"] == *scenario)
                .with_context(|| {
                    format!("{}: no result for {server} / {scenario}", path.display())
                })?;
            let measured = r["rounds"].as_array().is_some_and(|rounds| {
                !rounds.is_empty()
                    && rounds
                        .iter()
                        .all(|x| x["requests"].as_u64().unwrap_or(0) > 0)
            });
            if !measured {
                bail!(
                    "{}: {server} / {scenario} has no measured requests",
                    path.display()
                );
            }
        }
    }
    eprintln!(
        "bench: {} has {} servers x {} scenarios",
        path.display(),
        servers.len(),
        scenarios.len()
    );
    Ok(())
}

pub fn start_statico(root: &Path, cpus: &str, runtime: &str) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let bin = root.join("target/release/statico");
    let args = [
        "-t",
        "1",
        "-a",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-b",
        BODY,
        "-H",
        "Content-Type: text/plain",
        "--runtime",
        runtime,
    ];
    let mut child = Command::new("taskset")
        .args(["-c", cpus])
        .arg(&bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start statico under taskset")?;
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut said = String::new();
    loop {
        match lines.next() {
            Some(line) => {
                let line = line?;
                let done = line.contains("listening on");
                said.push_str(&line);
                said.push('\n');
                if done {
                    break;
                }
            }
            None => bail!("statico --runtime {runtime} did not start: {said}"),
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    wait_port(port)?;
    Ok(ServerUnderTest {
        name: format!("statico-{runtime}"),
        command: format!("taskset -c {cpus} statico {}", args.join(" ")),
        child,
        port,
    })
}

pub fn start_nginx(dir: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let nginx = which("nginx").context("nginx is not installed (cargo xtask setup installs it)")?;
    let port = free_port()?;
    let ndir = dir.join("nginx");
    std::fs::create_dir_all(&ndir)?;
    let d = ndir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  access_log off;\n  server_tokens off;\n  keepalive_requests 100000000;\n  keepalive_timeout 65;\n\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{\n    listen 127.0.0.1:{port} backlog=4096;\n    location / {{ default_type text/plain; return 200 \"{BODY}\"; }}\n  }}\n}}\n"
    );
    let conf_path = ndir.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let child = Command::new("taskset")
        .args(["-c", cpus])
        .arg(&nginx)
        .arg("-p")
        .arg(&ndir)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(ndir.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start nginx")?;
    let s = ServerUnderTest {
        name: "nginx".into(),
        command: format!("taskset -c {cpus} nginx -c {} (worker_processes 1; master_process off; access_log off; keepalive_requests 100000000; return 200)", conf_path.display()),
        child,
        port,
    };
    wait_port(port)?;
    Ok(s)
}

/// An optional peer: a few-line server in `bench/peers/<dir>`.
struct Peer {
    name: &'static str,
    dir: &'static str,
    toolchain: &'static str,
}

const PEERS: [Peer; 3] = [
    Peer {
        name: "hyper",
        dir: "hyper",
        toolchain: "cargo",
    },
    Peer {
        name: "actix-web",
        dir: "actix",
        toolchain: "cargo",
    },
    Peer {
        name: "go-fasthttp",
        dir: "fasthttp",
        toolchain: "go",
    },
];

fn build_peer(root: &Path, peer: &Peer) -> Result<PathBuf> {
    let src = root.join("bench/peers").join(peer.dir);
    let out = root.join("target/peers");
    if peer.toolchain != "cargo" && which(peer.toolchain).is_none() {
        bail!("{} is not installed", peer.toolchain);
    }
    eprintln!("bench: building peer {} in {}", peer.name, src.display());
    let status = if peer.toolchain == "cargo" {
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--quiet",
                "--release",
                "--locked",
                "--manifest-path",
            ])
            .arg(src.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&out)
            .status()?
    } else {
        std::fs::create_dir_all(out.join("release"))?;
        Command::new("go")
            .args(["build", "-o"])
            .arg(out.join("release").join("peer-fasthttp"))
            .arg(".")
            .current_dir(&src)
            .status()?
    };
    if !status.success() {
        bail!("building {} failed", peer.name);
    }
    let bin = match peer.dir {
        "hyper" => "peer-hyper",
        "actix" => "peer-actix",
        _ => "peer-fasthttp",
    };
    Ok(out.join("release").join(bin))
}

fn start_peer(peer: &Peer, bin: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let child = Command::new("taskset")
        .args(["-c", cpus])
        .arg(bin)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {}", peer.name))?;
    let s = ServerUnderTest {
        name: peer.name.into(),
        command: format!("taskset -c {cpus} {} {port}", bin.display()),
        child,
        port,
    };
    wait_port(port)?;
    Ok(s)
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits (up to 10 s) until something accepts connections on 127.0.0.1:`port`.
pub fn wait_port(port: u16) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        sleep(Duration::from_millis(50));
    }
    bail!("server on port {port} did not come up")
}

/// utime + stime of a whole process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').context("stat format")? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

pub fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// A `Vm…:` line of /proc/PID/status, in KiB.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn wrk_command(sc: Scenario, client_cpus: &str, duration: u64, lua: &Path, port: u16) -> Command {
    let url = format!("http://127.0.0.1:{port}/");
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", client_cpus, "wrk", "-t1", "--latency"])
        .arg(format!("-c{}", sc.connections))
        .arg(format!("-d{duration}s"));
    if sc.close {
        cmd.args(["-H", "Connection: close"]);
    }
    if sc.pipeline > 1 {
        cmd.arg("-s")
            .arg(lua)
            .arg(&url)
            .arg("--")
            .arg(sc.pipeline.to_string());
    } else {
        cmd.arg(&url);
    }
    cmd
}

pub fn measure(
    s: &ServerUnderTest,
    sc: Scenario,
    client_cpus: &str,
    duration: u64,
    lua: &Path,
) -> Result<Round> {
    let mut cmd = wrk_command(sc, client_cpus, duration, lua, s.port);
    let before = cpu_ticks(s.child.id())?;
    let out = cmd.output().context("run wrk")?;
    let after = cpu_ticks(s.child.id())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut r = parse_wrk(&text);
    if r.requests > 0 {
        r.cpu_us_per_req =
            (after - before) as f64 / clock_ticks_per_second() * 1e6 / r.requests as f64;
    }
    Ok(r)
}

fn parse_wrk(text: &str) -> Round {
    let mut r = Round::default();
    let ms = |v: &str| -> f64 {
        let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
        let n: f64 = num.parse().unwrap_or(0.0);
        match unit {
            "us" => n / 1000.0,
            "s" => n * 1000.0,
            _ => n,
        }
    };
    for line in text.lines() {
        let t = line.trim();
        let words: Vec<&str> = t.split_whitespace().collect();
        if t.starts_with("Requests/sec:") {
            r.rps = words[1].parse().unwrap_or(0.0);
        } else if t.contains("requests in") {
            r.requests = words[0].parse().unwrap_or(0);
        } else if t.starts_with("50%") {
            r.p50_ms = ms(words[1]);
        } else if t.starts_with("99%") {
            r.p99_ms = ms(words[1]);
        } else if t.starts_with("Socket errors:") {
            r.errors += t
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<u64>().ok())
                .sum::<u64>();
        } else if t.starts_with("Non-2xx or 3xx responses:") {
            r.errors += words.last().and_then(|n| n.parse().ok()).unwrap_or(0);
        }
    }
    r
}

/// RSS with `n` idle keep-alive connections, each having made one request.
struct Memory {
    server: String,
    connections: usize,
    baseline_kib: u64,
    rss_kib: u64,
    peak_kib: u64,
}

fn idle_rss(s: &ServerUnderTest, n: usize) -> Result<Memory> {
    let pid = s.child.id();
    let baseline_kib = status_kib(pid, "VmRSS:").unwrap_or(0);
    let mut conns = Vec::with_capacity(n);
    let request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
    for _ in 0..n {
        let c = TcpStream::connect(("127.0.0.1", s.port)).context("open an idle connection")?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        (&c).write_all(request)?;
        conns.push(c);
    }
    let mut buf = [0u8; 512];
    let mut answered = 0;
    for mut c in &conns {
        if c.read(&mut buf).map(|k| k > 0).unwrap_or(false) {
            answered += 1;
        }
    }
    sleep(Duration::from_millis(300));
    let rss_kib = status_kib(pid, "VmRSS:").unwrap_or(0);
    drop(conns);
    sleep(Duration::from_millis(300));
    Ok(Memory {
        server: s.name.clone(),
        connections: answered,
        baseline_kib,
        rss_kib,
        peak_kib: 0,
    })
}

pub fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn nginx_cpu(table: &[(String, &str, Vec<Round>)], scenario: &str) -> Option<f64> {
    table
        .iter()
        .find(|(n, sc, _)| n == "nginx" && *sc == scenario)
        .map(|(_, _, r)| median(r.iter().map(|r| r.cpu_us_per_req).collect()).0)
}

fn render(
    table: &[(String, &str, Vec<Round>)],
    memory: &[Memory],
    server_cpus: &str,
    client_cpus: &str,
    args: &BenchArgs,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<17} {:<22} {:>24} {:>20} {:>8} {:>8} {:>7} {:>12}",
        "server",
        "scenario",
        "req/s median (min-max)",
        "µs CPU/req (min-max)",
        "p50 ms",
        "p99 ms",
        "errors",
        "CPU vs nginx"
    );
    for (server, scenario, rounds) in table {
        let (rps, rmin, rmax) = median(rounds.iter().map(|r| r.rps).collect());
        let (cpu, cmin, cmax) = median(rounds.iter().map(|r| r.cpu_us_per_req).collect());
        let (p50, _, _) = median(rounds.iter().map(|r| r.p50_ms).collect());
        let (p99, _, _) = median(rounds.iter().map(|r| r.p99_ms).collect());
        let errors: u64 = rounds.iter().map(|r| r.errors).sum();
        let ratio =
            nginx_cpu(table, scenario).map_or("-".to_string(), |n| format!("{:.2}x", cpu / n));
        let _ = writeln!(
            s,
            "{:<17} {:<22} {:>9.0} ({:.0}-{:.0}) {:>7.2} ({:.2}-{:.2}) {:>8.2} {:>8.2} {:>7} {:>12}{}",
            server, scenario, rps, rmin, rmax, cpu, cmin, cmax, p50, p99, errors, ratio,
            if errors > 0 { "  <- client saw errors" } else { "" }
        );
    }
    let _ = writeln!(
        s,
        "\n{:<17} {:>22} {:>18} {:>14} {:>14}",
        "server", IDLE_SCENARIO, "RSS KiB", "idle KiB", "peak KiB"
    );
    for m in memory {
        let _ = writeln!(
            s,
            "{:<17} {:>22} {:>18} {:>14} {:>14}",
            m.server, m.connections, m.rss_kib, m.baseline_kib, m.peak_kib
        );
    }
    let _ = writeln!(
        s,
        "\nserver CPU {server_cpus} / wrk CPU {client_cpus}, {} round(s) x {} s; `CPU vs nginx` < 1 means less server CPU per request than nginx.\nOn a small machine one wrk thread caps keep-alive req/s; server CPU per request is the figure that ranks servers.",
        args.rounds, args.duration
    );
    s
}

fn version_of(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
fn to_json(
    servers: &[ServerUnderTest],
    table: &[(String, &str, Vec<Round>)],
    memory: &[Memory],
    server_cpus: &str,
    client_cpus: &str,
    args: &BenchArgs,
    idle_conns: usize,
) -> Value {
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
    let example = wrk_command(
        SCENARIOS[0],
        client_cpus,
        args.duration,
        Path::new("pipeline.lua"),
        8080,
    );
    let wrk_example = std::iter::once(example.get_program())
        .chain(example.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    json!({
        "machine": {
            "kernel": read("/proc/sys/kernel/osrelease").trim(),
            "cpu_model": model,
            "cpus": cpu_count(),
            "memory_kib": mem_kib,
        },
        "versions": {
            "statico": env!("CARGO_PKG_VERSION"),
            "rustc": version_of("rustc", &["--version"]),
            "nginx": version_of("nginx", &["-v"]),
            "wrk": version_of("wrk", &["-v"]),
            "go": version_of("go", &["version"]),
        },
        "placement": { "server_cpus": server_cpus, "client_cpus": client_cpus },
        "duration_s": args.duration,
        "rounds": args.rounds,
        "commands": {
            "bench": format!("cargo xtask bench{}", if args.quick { " --quick" } else { "" }),
            "wrk_example": wrk_example,
            "servers": servers.iter().map(|s| json!({ "name": s.name, "command": s.command })).collect::<Vec<_>>(),
        },
        "servers": servers.iter().map(|s| json!({ "name": s.name })).collect::<Vec<_>>(),
        "scenarios": SCENARIOS.iter().map(|s| s.name).chain(std::iter::once(IDLE_SCENARIO)).collect::<Vec<_>>(),
        "results": table.iter().map(|(server, scenario, rounds)| {
            let (rps, rps_min, rps_max) = median(rounds.iter().map(|r| r.rps).collect());
            let (cpu, cpu_min, cpu_max) = median(rounds.iter().map(|r| r.cpu_us_per_req).collect());
            json!({
                "server": server,
                "scenario": scenario,
                "median": { "rps": rps, "cpu_us_per_req": cpu },
                "min_max": { "rps": [rps_min, rps_max], "cpu_us_per_req": [cpu_min, cpu_max] },
                "cpu_vs_nginx": nginx_cpu(table, scenario).map(|n| cpu / n),
                "errors": rounds.iter().map(|r| r.errors).sum::<u64>(),
                "rounds": rounds.iter().map(|r| json!({
                    "rps": r.rps,
                    "requests": r.requests,
                    "cpu_us_per_req": r.cpu_us_per_req,
                    "p50_ms": r.p50_ms,
                    "p99_ms": r.p99_ms,
                    "errors": r.errors,
                })).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
        "memory": memory.iter().map(|m| json!({
            "server": m.server,
            "scenario": IDLE_SCENARIO,
            "connections_requested": idle_conns,
            "connections": m.connections,
            "idle_rss_kib": m.baseline_kib,
            "rss_kib": m.rss_kib,
            "peak_rss_kib": m.peak_kib,
        })).collect::<Vec<_>>(),
    })
}

/// Redraws a run's chart from its results.json (one round per result, at the median).
fn redraw(dir: &Path) -> Result<()> {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("results.json"))?)?;
    let mut table: Vec<(String, &'static str, Vec<Round>)> = Vec::new();
    for r in doc["results"].as_array().context("no results")? {
        let Some(sc) = SCENARIOS.iter().find(|s| r["scenario"] == s.name) else {
            continue;
        };
        table.push((
            r["server"].as_str().unwrap_or_default().to_string(),
            sc.name,
            vec![Round {
                rps: r["median"]["rps"].as_f64().unwrap_or(0.0),
                cpu_us_per_req: r["median"]["cpu_us_per_req"].as_f64().unwrap_or(0.0),
                ..Round::default()
            }],
        ));
    }
    chart(&dir.join("chart.svg"), &table)
}

/// A chart panel: its title and the figure it plots.
type Metric = (&'static str, Box<dyn Fn(&Round) -> f64>);

/// Grouped bars, one group per scenario: req/s on top, server CPU µs per request below.
fn chart(path: &Path, table: &[(String, &str, Vec<Round>)]) -> Result<()> {
    use plotters::prelude::*;

    let servers: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for (s, _, _) in table {
            if !v.contains(&s.as_str()) {
                v.push(s);
            }
        }
        v
    };
    let scenarios: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
    let value = |server: &str, scenario: &str, f: &dyn Fn(&Round) -> f64| -> f64 {
        table
            .iter()
            .find(|(s, sc, _)| s == server && *sc == scenario)
            .map_or(0.0, |(_, _, r)| median(r.iter().map(f).collect()).0)
    };
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let metrics: [Metric; 2] = [
        (
            "requests/s (thousands), higher is better",
            Box::new(|r: &Round| r.rps / 1000.0),
        ),
        (
            "server CPU µs per request, lower is better",
            Box::new(|r: &Round| r.cpu_us_per_req),
        ),
    ];
    let group = servers.len() as f64 + 1.0;
    for (panel, (title, f)) in panels.iter().zip(metrics.iter()) {
        let max = scenarios
            .iter()
            .flat_map(|sc| servers.iter().map(move |s| (s, sc)))
            .map(|(s, sc)| value(s, sc, f.as_ref()))
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let mut c = ChartBuilder::on(panel)
            .caption(*title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..(scenarios.len() as f64 * group), 0.0..max * 1.85)?;
        c.configure_mesh().disable_x_mesh().x_labels(0).draw()?;
        // Scenario names over their groups (the axis has no natural tick at a group's centre).
        for (i, name) in scenarios.iter().enumerate() {
            let centre = (i as f64 + 0.5) * group;
            c.plotting_area().draw(&Text::new(
                name.to_string(),
                (centre - group * 0.3, max * 1.06),
                ("sans-serif", 14),
            ))?;
        }
        for (j, server) in servers.iter().enumerate() {
            let colour = Palette99::pick(j).mix(0.9);
            let bars: Vec<_> = scenarios
                .iter()
                .enumerate()
                .map(|(i, sc)| {
                    let x0 = i as f64 * group + 0.5 + j as f64;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + 0.9, value(server, sc, f.as_ref()))],
                        colour.filled(),
                    )
                })
                .collect();
            c.draw_series(bars)?.label(*server).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], Palette99::pick(j).filled())
            });
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperMiddle)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

const PIPELINE_LUA: &str = r#"init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) or 16 do r[i] = wrk.format("GET", "/") end
  req = table.concat(r)
end
request = function() return req end
"#;
