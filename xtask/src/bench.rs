//! `cargo xtask bench`: statico and nginx measured side by side, in one run, on this machine.
//!
//! Method (the one `shared/PEERS.md` uses, so numbers compare): each server runs one worker pinned to
//! the server CPU, wrk runs one thread pinned to the client CPU, body "Hello, World!", text/plain. For
//! each scenario the servers are interleaved (A B A B …) for several rounds and the median is reported
//! with the min–max. Server CPU time per request = (utime+stime of the server from /proc over the
//! measured window) / requests: on a 2-core machine the client caps req/s, so CPU per request is the
//! figure that ranks servers. A round whose client saw socket errors or non-2xx answers is marked.
//! Load goes to 127.0.0.1 only and every run is bounded by `--duration`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::setup::which;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// CPU list the servers are pinned to (taskset syntax)
    #[arg(long, default_value = "1")]
    server_cpus: String,
    /// CPU list wrk is pinned to
    #[arg(long, default_value = "0")]
    client_cpus: String,
    /// Seconds per measured round
    #[arg(long, default_value_t = 8)]
    duration: u64,
    /// Rounds per server and scenario (median reported)
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// A smoke run: 1 round of 2 s per scenario
    #[arg(long)]
    quick: bool,
    /// Instead: compare the steering rungs on new connections (needs root for the ebpf rung)
    #[arg(long)]
    steering: bool,
}

const BODY: &str = "Hello, World!";

#[derive(Clone, Copy, Debug)]
struct Scenario {
    name: &'static str,
    connections: u32,
    pipeline: u32,
    close: bool,
}

const SCENARIOS: [Scenario; 4] = [
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

#[derive(Clone, Debug, Default)]
struct Round {
    rps: f64,
    requests: u64,
    cpu_us_per_req: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
}

struct ServerUnderTest {
    name: String,
    child: Child,
    port: u16,
}

impl Drop for ServerUnderTest {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

pub fn run(root: &Path, mut args: BenchArgs) -> Result<()> {
    if args.quick {
        args.duration = 2;
        args.rounds = 1;
    }
    if args.steering {
        let report = crate::steering_bench::run(root, args.duration, args.rounds)?;
        println!("{report}");
        return Ok(());
    }
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let dir = root.join("target/bench").join(stamp.to_string());
    std::fs::create_dir_all(&dir)?;
    let pipeline_lua = dir.join("pipeline.lua");
    std::fs::write(&pipeline_lua, PIPELINE_LUA)?;
    eprintln!(
        "bench: servers on CPU {}, wrk on CPU {}, {} round(s) of {} s per scenario",
        args.server_cpus, args.client_cpus, args.rounds, args.duration
    );

    let mut servers = vec![start_statico(root, &args.server_cpus, "tokio")?];
    if cfg!(target_os = "linux") {
        match start_statico(root, &args.server_cpus, "io-uring") {
            Ok(s) => servers.push(s),
            Err(e) => eprintln!("bench: statico io-uring skipped: {e:#}"),
        }
    }
    match start_nginx(&dir, &args.server_cpus) {
        Ok(n) => servers.push(n),
        Err(e) => eprintln!("bench: nginx skipped: {e:#}"),
    }

    let mut table: Vec<(String, &'static str, Vec<Round>)> = Vec::new();
    for sc in SCENARIOS {
        let mut per_server: Vec<Vec<Round>> = vec![Vec::new(); servers.len()];
        for _ in 0..args.rounds {
            for (i, s) in servers.iter().enumerate() {
                let r = measure(s, sc, &args, &pipeline_lua)?;
                eprintln!(
                    "  {:<16} {:<22} {:>10.0} req/s {:>7.2} µs/req{}",
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

    let report = render(&table, &args);
    println!("{report}");
    std::fs::write(dir.join("report.txt"), &report)?;
    std::fs::write(dir.join("results.json"), to_json(&table, &args))?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(())
}

fn start_statico(root: &Path, cpus: &str, runtime: &str) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let bin = root.join("target/release/statico");
    let mut child = Command::new("taskset")
        .args(["-c", cpus])
        .arg(&bin)
        .args([
            "-t",
            "1",
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-b",
            BODY,
        ])
        .args(["-H", "Content-Type: text/plain"])
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
                if line.contains("listening on") {
                    break;
                }
                said.push_str(&line);
                said.push('\n');
            }
            None => bail!("statico --runtime {runtime} did not start: {said}"),
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    wait_port(port)?;
    Ok(ServerUnderTest {
        name: format!("statico-{runtime}"),
        child,
        port,
    })
}

fn start_nginx(dir: &Path, cpus: &str) -> Result<ServerUnderTest> {
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
         server {{\n    listen 127.0.0.1:{port};\n    location / {{ default_type text/plain; return 200 \"{BODY}\"; }}\n  }}\n}}\n"
    );
    let conf_path = ndir.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let child = Command::new("taskset")
        .args(["-c", cpus])
        .arg(nginx)
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
        child,
        port,
    };
    wait_port(port)?;
    Ok(s)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn wait_port(port: u16) -> Result<()> {
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

fn measure(s: &ServerUnderTest, sc: Scenario, args: &BenchArgs, lua: &Path) -> Result<Round> {
    let url = format!("http://127.0.0.1:{}/", s.port);
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &args.client_cpus, "wrk", "-t1", "--latency"])
        .arg(format!("-c{}", sc.connections))
        .arg(format!("-d{}s", args.duration));
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

pub fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn render(table: &[(String, &str, Vec<Round>)], args: &BenchArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<16} {:<22} {:>22} {:>20} {:>9} {:>9} {:>7} {:>12}",
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
        let nginx_cpu = table
            .iter()
            .find(|(n, sc, _)| n == "nginx" && sc == scenario)
            .map(|(_, _, r)| median(r.iter().map(|r| r.cpu_us_per_req).collect()).0);
        let ratio = nginx_cpu.map_or("-".to_string(), |n| format!("{:.2}x", cpu / n));
        let _ = writeln!(
            s,
            "{:<16} {:<22} {:>9.0} ({:.0}-{:.0}) {:>7.2} ({:.2}-{:.2}) {:>9.2} {:>9.2} {:>7} {:>12}{}",
            server, scenario, rps, rmin, rmax, cpu, cmin, cmax, p50, p99, errors, ratio,
            if errors > 0 { "  <- client saw errors" } else { "" }
        );
    }
    let _ = writeln!(
        s,
        "\nserver CPU {} / wrk CPU {}, {} round(s) x {} s; `CPU vs nginx` < 1 means statico spends less CPU per request.",
        args.server_cpus, args.client_cpus, args.rounds, args.duration
    );
    s
}

fn to_json(table: &[(String, &str, Vec<Round>)], args: &BenchArgs) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    let results: Vec<serde_json::Value> = table
        .iter()
        .map(|(server, scenario, rounds)| {
            serde_json::json!({
                "server": server,
                "scenario": scenario,
                "rounds": rounds.iter().map(|r| serde_json::json!({
                    "rps": r.rps,
                    "requests": r.requests,
                    "cpu_us_per_req": r.cpu_us_per_req,
                    "p50_ms": r.p50_ms,
                    "p99_ms": r.p99_ms,
                    "errors": r.errors,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "kernel": kernel.trim(),
        "cpu": cpu,
        "server_cpus": args.server_cpus,
        "client_cpus": args.client_cpus,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "results": results,
    });
    serde_json::to_string_pretty(&doc).expect("JSON of plain values")
}

const PIPELINE_LUA: &str = r#"init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) or 16 do r[i] = wrk.format("GET", "/") end
  req = table.concat(r)
end
request = function() return req end
"#;
