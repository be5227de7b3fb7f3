//! `cargo xtask bench --http2`: statico `--http2` against nginx `http2`, with h2load, in one run.
//!
//! Both serve cleartext HTTP/2 by prior knowledge with one worker pinned to the server CPUs; h2load
//! runs pinned to the client CPUs with `-c 50 -m 16` (50 connections, 16 concurrent streams each) for
//! `--duration` seconds; servers are interleaved over the rounds. Reported: requests/s and server CPU
//! µs per request (from /proc), medians.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::bench::{clock_ticks_per_second, cpu_ticks, free_port, median, wait_port};
use crate::setup::which;

struct Server {
    name: &'static str,
    child: std::process::Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

pub fn run(
    root: &Path,
    server_cpus: &str,
    client_cpus: &str,
    duration: u64,
    rounds: usize,
) -> Result<String> {
    let dir = root.join("target/bench/http2");
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let p = free_port()?;
    let statico = Server {
        name: "statico --http2",
        child: Command::new("taskset")
            .args(["-c", server_cpus])
            .arg(root.join("target/release/statico"))
            .args([
                "--http2",
                "--runtime",
                "tokio",
                "-t",
                "1",
                "-a",
                "127.0.0.1",
                "-p",
                &p.to_string(),
            ])
            .args(["-b", "Hello, World!", "-H", "Content-Type: text/plain"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start statico")?,
        port: p,
    };
    wait_port(p)?;
    let p = free_port()?;
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  access_log off;\n  server_tokens off;\n  keepalive_requests 100000000;\n  http2_max_requests 100000000;\n\
         http2_max_concurrent_streams 256;\n\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{\n    listen 127.0.0.1:{p} http2;\n    location / {{ default_type text/plain; return 200 \"Hello, World!\"; }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let nginx = Server {
        name: "nginx http2",
        child: Command::new("taskset")
            .args(["-c", server_cpus])
            .arg(which("nginx").context("nginx is not installed")?)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start nginx")?,
        port: p,
    };
    wait_port(p)?;
    let servers = [statico, nginx];
    let mut rows: Vec<Vec<(f64, f64)>> = vec![Vec::new(); servers.len()];
    for _ in 0..rounds {
        for (i, s) in servers.iter().enumerate() {
            let before = cpu_ticks(s.child.id())?;
            let out = Command::new("taskset")
                .args([
                    "-c",
                    client_cpus,
                    "h2load",
                    "-c",
                    "50",
                    "-m",
                    "16",
                    "-t",
                    "1",
                ])
                .args(["-D", &duration.to_string()])
                .arg(format!("http://127.0.0.1:{}/", s.port))
                .output()
                .context("run h2load (cargo xtask setup installs nghttp2-client)")?;
            let after = cpu_ticks(s.child.id())?;
            let text = String::from_utf8_lossy(&out.stdout);
            let done: f64 = text
                .lines()
                .find(|l| l.starts_with("requests:"))
                .and_then(|l| {
                    l.split(',')
                        .find(|p| p.contains("succeeded"))?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or(0.0);
            let rps: f64 = text
                .lines()
                .find(|l| l.starts_with("finished in"))
                .and_then(|l| l.split(',').nth(1)?.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0);
            let cpu = (after - before) as f64 / clock_ticks_per_second() * 1e6 / done.max(1.0);
            eprintln!(
                "  {:<16} {rps:>10.0} req/s {cpu:>7.2} µs/req ({done} requests)",
                s.name
            );
            rows[i].push((rps, cpu));
        }
    }
    let mut s = format!(
        "\nHTTP/2 (h2c prior knowledge), h2load -c 50 -m 16 -t 1 -D {duration} pinned to CPU {client_cpus}, one server worker on CPU {server_cpus}, {rounds} round(s), medians\n{:<16} {:>12} {:>14}\n",
        "server", "req/s", "µs CPU/req"
    );
    for (server, r) in servers.iter().zip(&rows) {
        let (rps, _, _) = median(r.iter().map(|x| x.0).collect());
        let (cpu, _, _) = median(r.iter().map(|x| x.1).collect());
        let _ = writeln!(s, "{:<16} {rps:>12.0} {cpu:>14.2}", server.name);
    }
    Ok(s)
}
