//! `cargo xtask soak --minutes N [--runtime tokio|io-uring] [--out DIR]`: statico under every kind of
//! client for N minutes at a modest load, to see that its memory, descriptors and answers stay flat
//! over time.
//! Throughput is not the point: each client kind sends a few hundred requests a second at most.
//!
//! **What runs.** One statico on 127.0.0.1 with `--tls-self-signed --http2 --http3`, a small site
//! (`--root`, generated under the out dir), routes with every fault (`/fault`: reset, close and
//! truncate 1% each; `/stall`: always stalls, hit every 20 s; `/delay`: `exp:5ms`; `/pool`: capacity
//! 4, queue 20, `exp:2ms`), `--routes FILE`, `--metrics`, `--admin`, `--idle-timeout 5s
//! --header-timeout 3s -t 2`. statico serves only TLS on a TLS port (plain HTTP there gets 400), so
//! plain HTTP/1.1 goes to a second statico with the same site and routes and no TLS (cheap: it is
//! sampled and judged the same way, but sees no swaps). Against them, all at once:
//! - keep-alive, `Connection: close` and pipelined (16 a write) HTTP/1.1, TLS and plain, from this
//!   module's own clients (`clients`), which tell a reset, a close and a truncation apart;
//! - oha: HTTP/1.1 keep-alive over TLS (`/pool`), HTTP/2 (`/fault`), HTTP/3 (`/delay`, `/fault`);
//!   h2load: HTTP/2 over TLS (`/delay`) (`tool_runs`);
//! - slowloris (a head a byte a second: closed at `--header-timeout`), never-reading clients (16
//!   requests for 2 MiB, nothing read: closed at `--idle-timeout`), the stall route's client;
//! - SIGHUP every 30 s, and `PUT /routes` every 60 s (from 45 s) alternating the start-up table
//!   (`GET /routes`) and that table with one more route.
//!
//! Every 10 s statico's RSS (VmRSS), open descriptors (/proc/PID/fd) and CPU (utime + stime) are
//! sampled. After N minutes the clients stop, the descriptors are counted once more after the idle
//! timeout, and statico is drained with SIGTERM while idle keep-alive connections are open.
//!
//! **The ground truth across swaps.** Each swap starts a new generation whose truth counts from zero,
//! so before each swap the clients on fault routes are held at a gate (no request of theirs in
//! flight), the truth in force is read, the table swapped, and the gate opened; the truth is summed
//! over generations. Tools on fault routes run in chunks cut to end before each swap.
//!
//! **Pass** (otherwise exit non-zero, naming why), per statico:
//! - memory flat: the largest RSS of the last third of the run at most 10% + 8 MiB above the largest
//!   of the reference window (60 s to 120 s, or to the last third if that starts earlier);
//! - descriptors flat: the last third's largest count at most 16 above the reference window's, and
//!   `--idle-timeout` + 2 s after the clients stop at most 8 above the count before they started, and
//!   at most 2 connections open per `/metrics` (accepted − closed): the io_uring runtime's
//!   connections are direct descriptors, which /proc/PID/fd does not list;
//! - every client failure injected: on `/fault`, failures (all clients, all protocols) at most the
//!   truth's reset + close + truncate, and no other status; on `/pool`, no failure and non-2xx at
//!   most the truth's `shed`; elsewhere, neither;
//! - slowloris closed 2.5–6 s after its first byte, the stall 4.5–8 s after its request, every
//!   never-reading connection closed; every swap made a new generation;
//! - the drain: exit status 0 within the shutdown timeout (5 s) + 1 s.
//!
//! Written to `--out` (default `target/soak/<timestamp>`): `report.txt`, `results.json`, `chart.svg`
//! (RSS, descriptors, CPU over time), statico's stderr (`statico-*.log`), the site and routes file.
//!
//! Layers: `soak` (this file: flags, servers, the run, swaps, drain) ─ `clients`, `tool_runs` ─
//! `judge` (pure) ─ `report`, all on `crate::tools` (h2load, oha, the statico guard, /proc, ports and
//! GET, TLS clients, charts), as `bench` is; nothing imports this module but `main`.

mod clients;
mod judge;
mod report;
mod tool_runs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::tools::net::{free_port, http_get, http_request};
use crate::tools::procfs::{cpu_ticks, fd_count, parse_status_kib};
use crate::tools::server::{signal, start_statico_on, ServerUnderTest};
use crate::tools::tls::{self, Groups};
use clients::{Shared, Target};
use judge::{Sample, Swap, SAMPLE_EVERY_S};

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// How long the clients run, in minutes (at least 2: the first minute is warm-up)
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=600))]
    pub minutes: u64,
    /// statico's runtime
    #[arg(long, default_value = "tokio", value_parser = ["tokio", "io-uring"])]
    pub runtime: String,
    /// Where to write report.txt, results.json and chart.svg [default: target/soak/<timestamp>]
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The routes both staticos start with (`--route`).
const ROUTES: [&str; 4] = [
    "/fault size=8k fault=reset:1%,close:1%,truncate:1%",
    "/stall fault=stall:100%",
    "/delay size=1k delay=exp:5ms",
    "/pool size=1k capacity=4 queue=20 delay=exp:2ms",
];

/// The `--routes FILE` of the TLS statico (SIGHUP reads it again).
const ROUTES_FILE: &str = "[[route]]\npath = \"/toml\"\nsize = \"2k\"\ndelay = \"exp:1ms\"\n";

/// What the second table of `PUT /routes` adds to the first.
const EXTRA_ROUTE: &str = "\n[[route]]\npath = \"/swapped\"\nbody = \"b\"\n";

const IDLE_TIMEOUT_S: f64 = 5.0;
const HEADER_TIMEOUT_S: f64 = 3.0;
const SHUTDOWN_TIMEOUT_S: f64 = 5.0;

/// A statico of the soak: its guard, its ports and its stderr's file.
pub struct Statico {
    guard: ServerUnderTest,
    metrics: u16,
    admin: Option<u16>,
    log: PathBuf,
}

impl Statico {
    fn pid(&self) -> u32 {
        self.guard.pid()
    }
}

/// Runs the soak; fails, naming every reason, unless it passed.
pub fn run(root: &Path, args: SoakArgs) -> Result<()> {
    let out = crate::tools::out_dir(root, args.out.as_deref(), "soak")?;
    let site = make_site(&out)?;
    let (tls, plain) = start_both(root, &out, &site, &args.runtime)?;
    let config = tls::client_config(&out.join("cert/cert.pem"), Groups::Default)?;
    let admin = tls.admin.expect("the TLS statico has --admin");
    let table = http_get(admin, "/routes").context("GET /routes")?;
    let mut run = Run {
        shared: Arc::new(Shared::default()),
        tables: [format!("{table}{EXTRA_ROUTE}"), table],
        schedule: judge::swap_schedule(args.minutes * 60),
        start: Instant::now(),
        total_s: (args.minutes * 60) as f64,
        servers: [tls, plain],
        progress: report::Progress::default(),
    };
    run.sample_all();
    let handles = run.spawn_clients(&config, &out.join("cert/cert.pem"));
    run.drive();
    run.shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    run.finish(&config)?;
    let failures = run.verdicts();
    report::write(
        &out,
        &args,
        &run.commands(),
        &run.progress,
        &run.shared,
        &failures,
    )?;
    println!("{}", out.join("report.txt").display());
    if !failures.is_empty() {
        bail!("soak failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

/// A small site: an index, a stylesheet, and `big.bin` (2 MiB) for the never-reading clients.
fn make_site(out: &Path) -> Result<PathBuf> {
    let site = out.join("site");
    std::fs::create_dir_all(&site)?;
    std::fs::write(
        site.join("index.html"),
        "<!doctype html><title>soak</title><link rel=stylesheet href=style.css><p>soak</p>\n",
    )?;
    std::fs::write(site.join("style.css"), "p { color: #333; }\n".repeat(50))?;
    let big: Vec<u8> = (0..2u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(site.join("big.bin"), big)?;
    std::fs::write(out.join("routes.toml"), ROUTES_FILE)?;
    Ok(site)
}

/// The TLS statico (HTTP/1.1, h2, h3; admin; routes file) and the plain one, on `runtime`.
fn start_both(root: &Path, out: &Path, site: &Path, runtime: &str) -> Result<(Statico, Statico)> {
    let common = |metrics: u16| -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--http2".into(),
            "--root".into(),
            site.display().to_string(),
        ];
        for r in ROUTES {
            a.extend(["--route".into(), r.into()]);
        }
        a.extend(["--metrics".into(), format!("127.0.0.1:{metrics}")]);
        let timeouts = ["--idle-timeout", "5s", "--header-timeout", "3s", "-t", "2"];
        a.extend(timeouts.map(String::from));
        a.extend(["--runtime".into(), runtime.into()]);
        a
    };
    let (port, metrics, admin) = (free_port()?, free_port()?, free_port()?);
    let mut tls = common(metrics);
    tls.extend(["--tls-self-signed", "--tls-self-signed-out"].map(String::from));
    tls.push(out.join("cert").display().to_string());
    tls.extend([
        "--http3".into(),
        "--admin".into(),
        format!("127.0.0.1:{admin}"),
    ]);
    tls.extend([
        "--routes".into(),
        out.join("routes.toml").display().to_string(),
    ]);
    let tls = spawn_statico(root, out, "statico-tls", port, metrics, Some(admin), &tls)?;
    let (port, metrics) = (free_port()?, free_port()?);
    let plain = common(metrics);
    let plain = spawn_statico(root, out, "statico-plain", port, metrics, None, &plain)?;
    Ok((tls, plain))
}

/// Starts statico on `port` with `args`, its stderr copied to `OUT/NAME.log`.
fn spawn_statico(
    root: &Path,
    out: &Path,
    name: &str,
    port: u16,
    metrics: u16,
    admin: Option<u16>,
    args: &[String],
) -> Result<Statico> {
    let log = out.join(format!("{name}.log"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let guard = start_statico_on(root, name, None, port, &args, Some(&log))?;
    Ok(Statico {
        guard,
        metrics,
        admin,
        log,
    })
}

/// A soak in progress.
struct Run {
    shared: Arc<Shared>,
    /// The tables `PUT /routes` alternates: the start-up one with a route more, then as at start-up.
    tables: [String; 2],
    schedule: Vec<(u64, Swap)>,
    start: Instant,
    total_s: f64,
    /// The TLS statico, then the plain one.
    servers: [Statico; 2],
    progress: report::Progress,
}

/// Which statico, in the tallies and the report.
const SERVER_NAMES: [&str; 2] = ["tls", "plain"];

impl Run {
    fn targets(&self, config: &Arc<rustls::ClientConfig>) -> [Target; 2] {
        let paths = vec![
            "/fault",
            "/fault",
            "/fault",
            "/delay",
            "/pool",
            "/",
            "/style.css",
        ];
        let mut tls_paths = paths.clone();
        tls_paths.push("/toml");
        [
            Target {
                server: SERVER_NAMES[0],
                port: self.servers[0].guard.port,
                tls: Some(config.clone()),
                paths: tls_paths,
            },
            Target {
                server: SERVER_NAMES[1],
                port: self.servers[1].guard.port,
                tls: None,
                paths,
            },
        ]
    }

    /// Every client on its own thread.
    fn spawn_clients(
        &self,
        config: &Arc<rustls::ClientConfig>,
        cacert: &Path,
    ) -> Vec<JoinHandle<()>> {
        let mut handles = Vec::new();
        let ms = Duration::from_millis;
        let paced: [(usize, &str, usize, bool, Duration); 7] = [
            (0, "keep-alive", 1, false, ms(10)),
            (0, "keep-alive", 1, false, ms(10)),
            (0, "pipelined", 16, false, ms(100)),
            (0, "close", 1, true, ms(20)),
            (1, "keep-alive", 1, false, ms(10)),
            (1, "pipelined", 16, false, ms(100)),
            (1, "close", 1, true, ms(10)),
        ];
        for target in self.targets(config) {
            for (server, name, batch, close, every) in paced {
                if target.server == SERVER_NAMES[server] {
                    let (shared, t) = (self.shared.clone(), target.clone());
                    handles.push(std::thread::spawn(move || {
                        clients::paced(&shared, name, &t, batch, close, every)
                    }));
                }
            }
            handles.extend(self.hostile(&target));
        }
        handles.extend(self.tools(cacert));
        handles
    }

    /// Two slowloris, a never-reading client and the stall's client against `target`.
    fn hostile(&self, target: &Target) -> Vec<JoinHandle<()>> {
        let quiet = Duration::from_secs_f64(IDLE_TIMEOUT_S + 4.0);
        let mut handles = Vec::new();
        for kind in 0..4 {
            let (shared, t) = (self.shared.clone(), target.clone());
            handles.push(std::thread::spawn(move || match kind {
                0 | 1 => clients::slowloris(&shared, &t),
                2 => clients::never_reading(&shared, &t, "/big.bin", quiet),
                _ => clients::stall(&shared, &t),
            }));
        }
        handles
    }

    /// oha and h2load against the TLS statico.
    fn tools(&self, cacert: &Path) -> Vec<JoinHandle<()>> {
        use tool_runs::{Kind, Tool};
        let oha = |version, conns, rate| Kind::Oha {
            version,
            conns,
            rate,
        };
        let list = [
            ("oha h1", "/pool", oha("1.1", 4, 200), false),
            ("h2load", "/delay", Kind::H2load { conns: 1 }, false),
            ("oha h2", "/fault", oha("2", 2, 100), true),
            ("oha h3", "/delay", oha("3", 2, 150), false),
            ("oha h3", "/fault", oha("3", 2, 100), true),
        ];
        let port = self.servers[0].guard.port;
        list.into_iter()
            .map(|(name, route, kind, gated)| {
                let tool = Tool {
                    name,
                    server: SERVER_NAMES[0],
                    route,
                    kind,
                    gated,
                };
                let url = format!("https://127.0.0.1:{port}{route}");
                let (shared, cacert) = (self.shared.clone(), cacert.to_path_buf());
                let (schedule, start, end) = (self.schedule.clone(), self.start, self.total_s);
                std::thread::spawn(move || {
                    tool_runs::run(&shared, &tool, &url, &cacert, &schedule, start, end)
                })
            })
            .collect()
    }

    /// The run's clock: samples every 10 s and the swaps on schedule, until the run's end or a
    /// statico's death.
    fn drive(&mut self) {
        let mut swaps = self.schedule.clone().into_iter().peekable();
        loop {
            let now = self.start.elapsed().as_secs_f64();
            if now >= self.total_s {
                break;
            }
            if let Some(dead) = self.dead() {
                self.progress.problems.push(dead);
                break;
            }
            if self.progress.samples[0].len() as f64 * SAMPLE_EVERY_S <= now {
                self.sample_all();
            }
            if let Some((at, swap)) = swaps.next_if(|(at, _)| *at as f64 <= now) {
                self.swap(at, swap);
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// A statico that has exited, named.
    fn dead(&mut self) -> Option<String> {
        for s in &mut self.servers {
            if let Ok(Some(status)) = s.guard.child.try_wait() {
                return Some(format!(
                    "{} exited during the run ({status}); see {}",
                    s.guard.name,
                    s.log.display()
                ));
            }
        }
        None
    }

    fn sample_all(&mut self) {
        let t_s = self.start.elapsed().as_secs_f64();
        let answers = report::answers_now(&self.shared.tally.lock().unwrap());
        self.progress.answers.push((t_s, answers));
        for (i, s) in self.servers.iter().enumerate() {
            match sample(s.pid(), t_s) {
                Ok(sample) => self.progress.samples[i].push(sample),
                Err(e) => self
                    .progress
                    .problems
                    .push(format!("sampling {}: {e:#}", s.guard.name)),
            }
        }
    }
}

/// statico's RSS, descriptors and CPU now.
fn sample(pid: u32, t_s: f64) -> Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(Sample {
        t_s,
        rss_kib: parse_status_kib(&status, "VmRSS:").context("VmRSS")?,
        rss_anon_kib: parse_status_kib(&status, "RssAnon:").context("RssAnon")?,
        fds: fd_count(pid)?,
        cpu_ticks: cpu_ticks(pid)?,
    })
}

impl Run {
    /// One swap, with the fault routes' clients held at the gate: the truth in force read, the table
    /// replaced, the new generation awaited.
    fn swap(&mut self, at: u64, swap: Swap) {
        let begun = Instant::now();
        let quiet = self.shared.gate.close(Duration::from_secs(15));
        let done = self.swap_held(swap);
        self.shared.gate.open();
        let record = report::SwapRecord {
            at_s: at,
            swap,
            held_ms: begun.elapsed().as_secs_f64() * 1e3,
            quiet,
            generation: done.as_ref().ok().copied(),
        };
        if let Err(e) = done {
            self.progress
                .problems
                .push(format!("swap at {at} s ({swap:?}): {e:#}"));
        }
        if !quiet {
            self.progress.problems.push(format!(
                "swap at {at} s: requests on the fault routes still in flight after 15 s"
            ));
        }
        self.progress.swaps.push(record);
    }

    /// The truth read, the swap made; the new generation.
    fn swap_held(&mut self, swap: Swap) -> Result<u64> {
        let admin = self.servers[0].admin.expect("admin");
        let before = self.read_truth()?;
        match swap {
            Swap::Sighup => signal(self.servers[0].pid(), "-HUP")?,
            Swap::Put => {
                let n = self
                    .progress
                    .swaps
                    .iter()
                    .filter(|s| s.swap == Swap::Put)
                    .count();
                put_routes(admin, &self.tables[n % 2])?;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let doc: Value = serde_json::from_str(&http_get(admin, "/ground-truth")?)?;
            let generation = doc["generation"].as_u64().unwrap_or(0);
            if generation > before {
                return Ok(generation);
            }
            sleep(Duration::from_millis(20));
        }
        bail!("no new generation after 5 s (still {before})")
    }

    /// The TLS statico's truth in force, kept by generation (a later read replaces an earlier one);
    /// its generation.
    fn read_truth(&mut self) -> Result<u64> {
        let admin = self.servers[0].admin.expect("admin");
        let doc: Value = serde_json::from_str(&http_get(admin, "/ground-truth")?)?;
        let generation = doc["generation"].as_u64().context("no generation")?;
        self.progress.generations.insert(generation, doc);
        Ok(generation)
    }
}

/// `PUT /routes` with `table` on the control API.
fn put_routes(admin: u16, table: &str) -> Result<()> {
    http_request(admin, "PUT", "/routes", table).map(drop)
}

impl Run {
    /// After the clients: the last truth, the descriptors after the idle timeout, `/metrics`, and the
    /// drains with idle keep-alive connections open.
    fn finish(&mut self, config: &Arc<rustls::ClientConfig>) -> Result<()> {
        self.read_truth()?;
        let plain = &self.servers[1];
        let doc: Value = serde_json::from_str(&http_get(plain.metrics, "/ground-truth.json")?)?;
        self.progress.plain_truth = doc;
        sleep(Duration::from_secs_f64(IDLE_TIMEOUT_S + 2.0));
        for (i, s) in self.servers.iter().enumerate() {
            self.progress.end_fds[i] = sample(s.pid(), 0.0)?.fds;
            match http_get(s.metrics, "/metrics") {
                Ok(m) => self.progress.end_open_conns[i] = judge::open_connections(&m),
                Err(e) => {
                    (self.progress.problems).push(format!("{}: GET /metrics: {e:#}", s.guard.name))
                }
            }
        }
        let targets = self.targets(config);
        for (i, s) in self.servers.iter_mut().enumerate() {
            let idle = clients::idle_connections(&targets[i], 4);
            self.progress.drains[i] = Some(drain(s));
            drop(idle);
        }
        Ok(())
    }

    fn commands(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| s.guard.command.clone())
            .collect()
    }
}

/// SIGTERM, then up to the shutdown timeout + 2 s for the exit: (seconds, exit code if it exited).
fn drain(s: &mut Statico) -> report::Drain {
    let begun = Instant::now();
    let limit = Duration::from_secs_f64(SHUTDOWN_TIMEOUT_S + 2.0);
    if signal(s.pid(), "-TERM").is_ok() {
        while begun.elapsed() < limit {
            if let Ok(Some(status)) = s.guard.child.try_wait() {
                return report::Drain {
                    secs: begun.elapsed().as_secs_f64(),
                    code: status.code(),
                    exited: true,
                };
            }
            sleep(Duration::from_millis(10));
        }
    }
    report::Drain {
        secs: begun.elapsed().as_secs_f64(),
        code: None,
        exited: false,
    }
}

impl Run {
    /// Every reason the soak failed; none if it passed.
    fn verdicts(&self) -> Vec<String> {
        let mut failures = self.progress.problems.clone();
        let truths = self.progress.truths();
        for (i, name) in SERVER_NAMES.iter().enumerate() {
            let seen = route_totals(&self.shared.tally.lock().unwrap(), name);
            for (route, counts) in &seen {
                let kind = match route.as_str() {
                    "/fault" => judge::RouteKind::Fault,
                    "/pool" => judge::RouteKind::Pool,
                    _ => judge::RouteKind::Clean,
                };
                if let Some(why) = judge::judge_route(kind, route, counts, &truths[i]) {
                    failures.push(format!("{name}: {why}"));
                }
            }
            failures.extend(self.flat(i));
            failures.extend(self.closes(name));
            if let Some(d) = &self.progress.drains[i] {
                if !d.exited || d.code != Some(0) || d.secs > SHUTDOWN_TIMEOUT_S + 1.0 {
                    failures.push(format!(
                        "{name}: drain: {d:?}, expected exit 0 within {} s",
                        SHUTDOWN_TIMEOUT_S + 1.0
                    ));
                }
            }
        }
        failures
    }

    /// Flatness of RSS and descriptors of statico `i`, and its descriptors at the end.
    fn flat(&self, i: usize) -> Vec<String> {
        let samples = &self.progress.samples[i];
        let name = SERVER_NAMES[i];
        let mut failures = Vec::new();
        let rss: Vec<(f64, u64)> = samples.iter().map(|s| (s.t_s, s.rss_kib)).collect();
        let fds: Vec<(f64, u64)> = samples.iter().map(|s| (s.t_s, s.fds)).collect();
        let checks = [
            (
                "RSS KiB",
                judge::flatness(&rss, self.total_s, 0.10, 8 << 10),
            ),
            ("descriptors", judge::flatness(&fds, self.total_s, 0.0, 16)),
        ];
        for (what, f) in checks {
            match f {
                Some(f) if f.ok() => {}
                Some(f) => failures.push(format!(
                    "{name}: {what} not flat: the last third reached {}, over the bound {} (the \
                     second minute's most was {})",
                    f.last_max, f.bound, f.reference_max
                )),
                None => failures.push(format!("{name}: {what}: too few samples to judge")),
            }
        }
        match self.progress.end_open_conns[i] {
            Some(open) if open <= 2 => {}
            Some(open) => failures.push(format!(
                "{name}: {open} connections open (/metrics) after the clients left"
            )),
            None => failures.push(format!(
                "{name}: /metrics did not answer after the clients left"
            )),
        }
        let start = samples.first().map_or(0, |s| s.fds);
        if self.progress.end_fds[i] > start + 8 {
            failures.push(format!(
                "{name}: {} descriptors after the clients left, {start} before they came",
                self.progress.end_fds[i]
            ));
        }
        failures
    }

    /// The hostile clients' closes against their timeouts.
    fn closes(&self, name: &str) -> Vec<String> {
        let closes = self.shared.closes.lock().unwrap();
        let get = |what: &str| {
            closes
                .get(&(what.to_string(), name.to_string()))
                .cloned()
                .unwrap_or_default()
        };
        let h = HEADER_TIMEOUT_S;
        let i = IDLE_TIMEOUT_S;
        let mut failures = judge::judge_closes("slowloris", &get("slowloris"), h - 0.5, h + 3.0);
        failures.extend(judge::judge_closes(
            "stall",
            &get("stall"),
            i - 0.5,
            i + 3.0,
        ));
        failures.extend(judge::judge_closes(
            "never-reading",
            &get("never-reading"),
            0.0,
            f64::MAX,
        ));
        failures
            .into_iter()
            .map(|f| format!("{name}: {f}"))
            .collect()
    }
}

/// Sums of what each client saw, per route (used by the verdicts and the report).
pub fn route_totals(
    tally: &BTreeMap<(String, String, String), judge::Counts>,
    server: &str,
) -> BTreeMap<String, judge::Counts> {
    let mut out: BTreeMap<String, judge::Counts> = BTreeMap::new();
    for ((_, s, route), c) in tally {
        if s == server {
            out.entry(route.clone()).or_default().add(c);
        }
    }
    out
}
