//! `cargo xtask bench --routes`: statico's routes (`--route '/echo size=1k …'`, both runtimes) against
//! Fortio's echo server, and nginx where it can answer the same, in one run.
//!
//! One worker each, pinned to the server CPUs: statico `-t 1`, Fortio with `GOMAXPROCS=1`, nginx with
//! one worker answering a 1 KiB `return`; wrk (one thread) pinned to the client CPUs; servers
//! interleaved over rounds, medians with min–max. Per scenario ([`SCENARIOS`]) the servers are started
//! afresh and asked for the same thing: statico by its route, Fortio by its query string
//! (`/echo?size=1024&delay=10ms&status=503:10`), nginx by its configuration (it cannot delay, so it sits
//! out the delay scenario). Measured: req/s, server CPU µs per request (CPU ticks from /proc over the
//! round), latency, and the share of non-2xx answers.
//!
//! Then the accuracy of statico's random delays ([`accuracy`]): a lognormal delay route driven at a fixed
//! rate by oha, statico's own ground truth (`/ground-truth.json` on its `--metrics` listener) beside
//! what was asked and what oha saw.
//!
//! `report.txt` (also printed) holds the tables and the targets: statico's server CPU per
//! request ≤ [`TARGET_VS_FORTIO`]× Fortio's, and its delay route ≤ [`TARGET_DELAY`]× the same route
//! without delay; `results.json` every round; `chart.svg` each statico's CPU relative to Fortio's.
//!
//! Until the binary has `--route` (its `--help` says), statico is started with the flags that come
//! closest (`-b` a 1 KiB body, `-d 10ms`): it then serves no status mix and no ground truth, and the
//! report says so. Both kinds of command line are made in one place, [`statico_flags`].

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::{json, Value};

use super::accuracy;
use super::measure::{self, Round, Scenario, Stat};
use super::ratio::{self, verdicts, Report};
use super::report::RunInfo;
use super::servers::{start_fortio, start_nginx, Nginx};
use crate::tools::procfs::machine;
use crate::tools::server::{start_statico, statico_bin, ServerUnderTest};

/// The target: statico's server CPU per request at most this times Fortio's.
const TARGET_VS_FORTIO: f64 = 0.3;
/// The target: a delay route's server CPU per request at most this times the same route's
/// without the delay.
const TARGET_DELAY: f64 = 1.3;
/// The body every route answers with, in bytes.
const SIZE: usize = 1024;
/// The path every server is asked.
const PATH: &str = "/echo";

/// One load on one route, and how each server is asked for it.
#[derive(Clone, Copy, Debug)]
pub struct RouteScenario {
    /// The table's and the chart's name.
    pub group: &'static str,
    /// wrk's connections (keep-alive, one request at a time).
    pub connections: u32,
    /// statico's `--route` spec.
    pub route: &'static str,
    /// statico's flags before `--route` (beside `-b` a body of [`SIZE`]).
    pub legacy: &'static [&'static str],
    /// Fortio's query string.
    pub fortio: &'static str,
    /// nginx's share of 503 answers, or `None` where nginx cannot answer the same.
    pub nginx_fail_percent: Option<u8>,
}

pub const SCENARIOS: [RouteScenario; 5] = [
    RouteScenario {
        group: "1k c50",
        connections: 50,
        route: "/echo size=1k",
        legacy: &[],
        fortio: "size=1024",
        nginx_fail_percent: Some(0),
    },
    // The delay route's own baseline: the same route and connections, without the delay.
    RouteScenario {
        group: "1k c1000",
        connections: 1000,
        route: "/echo size=1k",
        legacy: &[],
        fortio: "size=1024",
        nginx_fail_percent: Some(0),
    },
    RouteScenario {
        group: "1k delay 10ms c1000",
        connections: 1000,
        route: "/echo size=1k delay=10ms",
        legacy: &["-d", "10ms"],
        fortio: "size=1024&delay=10ms",
        nginx_fail_percent: None,
    },
    // The same held route in a pool that never queues (capacity above the connections): what
    // taking a ticket and a server costs.
    RouteScenario {
        group: "1k delay 10ms pool c1000",
        connections: 1000,
        route: "/echo size=1k delay=10ms capacity=100000",
        legacy: &["-d", "10ms"],
        fortio: "size=1024&delay=10ms",
        nginx_fail_percent: None,
    },
    RouteScenario {
        group: "1k 503:10% c50",
        connections: 50,
        route: "/echo size=1k status=503:10%",
        legacy: &[],
        fortio: "size=1024&status=503:10",
        nginx_fail_percent: Some(10),
    },
];

/// The scenario without a delay, and the one with, whose CPU per request [`TARGET_DELAY`] compares;
/// and the delayed one in a pool, which [`TARGET_POOL`] compares with the delayed one.
const BASE: usize = 1;
const DELAYED: usize = 2;
const POOLED: usize = 3;
/// The target: a pooled route's server CPU per request at most this times the same held
/// route's without a pool, at the same load.
const TARGET_POOL: f64 = 1.2;

/// What statico is asked to serve.
#[derive(Clone, Copy, Debug)]
pub enum Ask<'a> {
    /// A scenario's route.
    Route(&'a RouteScenario),
    /// [`accuracy::ROUTE`] with its ground truth on a `--metrics` listener at this address.
    Truth { metrics: &'a str },
}

/// statico's flags (after `-a`/`-p`) for `ask` on `runtime`, the one place its command lines are
/// made: with `--route` when the binary has it (`routes`), else the closest older flags (`-b @body`, a
/// body of [`SIZE`], and `-d`), or `None` where there are none (the ground truth).
pub fn statico_flags(routes: bool, runtime: &str, ask: Ask, body: &Path) -> Option<Vec<String>> {
    let mut flags: Vec<String> = ["-t", "1", "--runtime", runtime].map(String::from).into();
    match (routes, ask) {
        (true, Ask::Route(sc)) => flags.extend(["--route".into(), sc.route.into()]),
        (false, Ask::Route(sc)) => {
            flags.extend(["-b".into(), format!("@{}", body.display())]);
            flags.extend(sc.legacy.iter().map(|f| f.to_string()));
        }
        (true, Ask::Truth { metrics }) => flags.extend(
            [
                "--route",
                accuracy::ROUTE,
                "--metrics",
                metrics,
                "--seed",
                "1",
            ]
            .map(String::from),
        ),
        (false, Ask::Truth { .. }) => return None,
    }
    Some(flags)
}

/// Whether the statico at `bin` has `--route` (its `--help` lists it).
fn has_routes(bin: &Path) -> bool {
    Command::new(bin).arg("--help").output().is_ok_and(|o| {
        let help = String::from_utf8_lossy(&o.stdout);
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '=')
            .any(|word| word == "--route")
    })
}

/// Runs every scenario, then the accuracy check; writes `report.txt`, `results.json` and `chart.svg`
/// into `dir` and returns the report.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    let bin = statico_bin(root);
    let routes = has_routes(&bin);
    let body = dir.join("body-1k");
    std::fs::write(&body, "x".repeat(SIZE))?;
    let mut report = Report::against("fortio", heading(run, routes));
    let mut scenarios = Vec::new();
    let mut medians = Vec::new();
    for sc in &SCENARIOS {
        let servers = start_servers(root, dir, run.server_cpus, sc, routes, &body)?;
        eprintln!(
            "bench: {} ({} round(s) of {} s)",
            sc.group, run.rounds, run.duration
        );
        let rows = measure::interleave(&servers, run.rounds, |s| round(s, sc, run))?;
        add_table(&mut report, sc, &servers, &rows);
        for (s, r) in servers.iter().zip(&rows) {
            medians.push((sc.group, s.name.clone(), Round::cpu(r).median));
        }
        scenarios.push(scenario_json(sc, &servers, &rows));
    }
    let targets = targets(&mut report, &medians);
    let accuracy = accuracy::run(root, run, |runtime, metrics| {
        statico_flags(routes, runtime, Ask::Truth { metrics }, &body)
    })?;
    report.text.push_str(&accuracy.text);
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let doc = json!({
        "mode": "routes",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "statico": bin.display().to_string(),
        "statico_flags": if routes { "--route" } else { "-b/-d (no --route in this statico)" },
        "scenarios": scenarios,
        "targets": targets,
        "accuracy": accuracy.json,
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    let title = "routes: server CPU per request relative to Fortio (1.0), lower is better";
    report.chart(&dir.join("chart.svg"), title)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(report.text)
}

fn heading(run: &RunInfo, routes: bool) -> String {
    let flags = if routes {
        "statico with --route"
    } else {
        "statico WITHOUT --route (this build lacks it): -b a 1 KiB body and -d 10ms instead; no 503 mix, no ground truth"
    };
    format!(
        "routes: one server worker on CPU {}, wrk -t1 on CPU {}, {} round(s) of {} s, medians (min-max)\n{flags}\n",
        run.server_cpus, run.client_cpus, run.rounds, run.duration
    )
}

/// statico on each runtime, Fortio, and nginx where it can answer `sc`; a peer that cannot start is
/// skipped with the reason.
fn start_servers(
    root: &Path,
    dir: &Path,
    cpus: &str,
    sc: &RouteScenario,
    routes: bool,
    body: &Path,
) -> Result<Vec<ServerUnderTest>> {
    let mut servers = Vec::new();
    for runtime in ["tokio", "io-uring"] {
        let flags = statico_flags(routes, runtime, Ask::Route(sc), body).unwrap_or_default();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let name = format!("statico-{runtime}");
        servers.push(start_statico(root, &name, Some(cpus), &flags)?);
    }
    match start_fortio(dir, cpus) {
        Ok(fortio) => servers.push(fortio),
        Err(e) => eprintln!("bench: fortio skipped, no ratio to report: {e:#}"),
    }
    if let Some(fail_percent) = sc.nginx_fail_percent {
        let x = "x".repeat(SIZE);
        let mode = Nginx::Echo {
            body: &x,
            fail_percent,
        };
        match start_nginx(dir, cpus, mode) {
            Ok(nginx) => servers.push(nginx),
            Err(e) => eprintln!("bench: nginx skipped: {e:#}"),
        }
    }
    Ok(servers)
}

/// The URL `s` is asked for `sc` at: Fortio by its query string, the others by the path alone.
fn url(s: &ServerUnderTest, sc: &RouteScenario) -> String {
    let query = if s.name == "fortio" {
        format!("?{}", sc.fortio)
    } else {
        String::new()
    };
    format!("http://127.0.0.1:{}{PATH}{query}", s.port)
}

/// One wrk round of `sc` against `s`, with its server CPU per request.
fn round(s: &ServerUnderTest, sc: &RouteScenario, run: &RunInfo) -> Result<Round> {
    let wrk = Scenario {
        name: sc.group,
        connections: sc.connections,
        pipeline: 1,
        close: false,
    };
    let r = measure::measure(
        s.pid(),
        &url(s, sc),
        wrk,
        run.client_cpus,
        run.duration,
        Path::new(""),
    )?;
    eprintln!(
        "  {:<17} {:>10.0}/s {:>8.2} µs  p99 {:.2} ms  non-2xx {:.1}%",
        s.name,
        r.rps,
        r.cpu_us_per_req,
        r.p99_ms,
        non_2xx_percent(&r)
    );
    Ok(r)
}

/// The share of a round's answers that were not 2xx, in %.
fn non_2xx_percent(r: &Round) -> f64 {
    if r.requests == 0 {
        return 0.0;
    }
    r.non_2xx as f64 * 100.0 / r.requests as f64
}

/// A scenario's tables: req/s and CPU per request against Fortio, then latency and answers.
fn add_table(
    report: &mut Report,
    sc: &RouteScenario,
    servers: &[ServerUnderTest],
    rows: &[Vec<Round>],
) {
    let pairs: Vec<Vec<(f64, f64)>> = rows
        .iter()
        .map(|r| r.iter().map(|x| (x.rps, x.cpu_us_per_req)).collect())
        .collect();
    let statico = match servers.first() {
        Some(s) if s.command.contains("--route") => format!("--route '{}'", sc.route),
        _ => format!("-b <{SIZE} bytes> {}", sc.legacy.join(" ")),
    };
    let title = format!(
        "{} (statico {}, fortio {PATH}?{}), wrk -c{}",
        sc.group,
        statico.trim_end(),
        sc.fortio,
        sc.connections
    );
    report.table(sc.group, &title, "req/s", "µs CPU/req", servers, &pairs);
    let _ = writeln!(
        report.text,
        "  {:<17} {:>10} {:>10} {:>10} {:>14}",
        "", "p50 ms", "p99 ms", "non-2xx %", "socket errors"
    );
    for (s, r) in servers.iter().zip(rows) {
        let of = |f: fn(&Round) -> f64| Stat::of(r.iter().map(f)).median;
        let socket: u64 = r.iter().map(|x| x.errors - x.non_2xx).sum();
        let _ = writeln!(
            report.text,
            "  {:<17} {:>10.2} {:>10.2} {:>10.1} {:>14}",
            s.name,
            of(|x| x.p50_ms),
            of(|x| x.p99_ms),
            of(non_2xx_percent),
            socket
        );
    }
}

/// A scenario in results.json: how each server was started and asked, medians, min–max, every round.
fn scenario_json(sc: &RouteScenario, servers: &[ServerUnderTest], rows: &[Vec<Round>]) -> Value {
    let results: Vec<Value> = servers
        .iter()
        .zip(rows)
        .map(|(s, r)| {
            let mut result = json!({ "server": s.name, "command": s.command, "url": url(s, sc) });
            if let Value::Object(map) = &mut result {
                map.extend(measure::rounds_json(r));
            }
            result
        })
        .collect();
    json!({ "scenario": sc.group, "connections": sc.connections, "route": sc.route,
            "fortio_query": sc.fortio, "results": results })
}

/// Each statico's CPU per request in scenario `over` divided by its own in scenario `base`.
fn ratios_between(medians: &[(&str, String, f64)], over: usize, base: usize) -> Vec<(String, f64)> {
    ratio::ratios_between(medians, SCENARIOS[over].group, SCENARIOS[base].group)
}

/// The targets, appended to the report; returned for results.json.
fn targets(report: &mut Report, medians: &[(&str, String, f64)]) -> Value {
    let _ = writeln!(report.text, "\ntargets");
    let mut doc = Vec::new();
    for sc in &SCENARIOS {
        let ratios: Vec<(String, f64)> = report
            .ratios(sc.group)
            .iter()
            .filter(|(name, _)| name.starts_with("statico"))
            .cloned()
            .collect();
        let said = verdicts(&ratios, TARGET_VS_FORTIO, "fortio did not run, no ratio");
        let _ = writeln!(
            report.text,
            "  {}: statico CPU/request <= {TARGET_VS_FORTIO:.1}x fortio's: {said}",
            sc.group
        );
        doc.push(json!({ "scenario": sc.group, "target": TARGET_VS_FORTIO, "vs": "fortio", "ratios": ratios }));
    }
    let between = [
        ("delay route", DELAYED, BASE, TARGET_DELAY),
        ("pooled route", POOLED, DELAYED, TARGET_POOL),
    ];
    for (what, over, base, target) in between {
        let ratios = ratios_between(medians, over, base);
        let said = verdicts(&ratios, target, "no statico measured in both");
        let (over, base) = (SCENARIOS[over].group, SCENARIOS[base].group);
        let _ = writeln!(
            report.text,
            "  {what}: statico CPU/request in '{over}' <= {target:.1}x in '{base}': {said}"
        );
        doc.push(json!({ "scenario": over, "target": target, "vs": base, "ratios": ratios }));
    }
    Value::Array(doc)
}

#[cfg(test)]
mod tests {
    use super::super::ratio::verdict;
    use super::*;

    #[test]
    fn the_delay_ratio_is_per_statico_against_its_own_undelayed_route() {
        let (base, delayed) = (SCENARIOS[BASE].group, SCENARIOS[DELAYED].group);
        let medians = vec![
            (base, "statico-tokio".to_string(), 2.0),
            (base, "statico-io-uring".to_string(), 1.0),
            (base, "fortio".to_string(), 10.0),
            (delayed, "statico-tokio".to_string(), 2.5),
            (delayed, "statico-io-uring".to_string(), 1.5),
            (delayed, "fortio".to_string(), 30.0),
        ];
        let ratios = ratios_between(&medians, DELAYED, BASE);
        assert_eq!(
            ratios,
            [
                ("statico-tokio".into(), 1.25),
                ("statico-io-uring".into(), 1.5)
            ]
        );
        assert_eq!(verdict(ratios[0].1, TARGET_DELAY), "1.25x (met)");
        assert_eq!(verdict(ratios[1].1, TARGET_DELAY), "1.50x (NOT met)");
        // A statico with no undelayed figure (or a zero one) has no ratio.
        assert!(ratios_between(&medians[3..], DELAYED, BASE).is_empty());
    }

    #[test]
    fn statico_is_asked_by_route_or_by_the_older_flags() {
        let body = Path::new("/tmp/b");
        let sc = &SCENARIOS[DELAYED];
        let routed = statico_flags(true, "tokio", Ask::Route(sc), body).unwrap();
        assert_eq!(
            routed,
            [
                "-t",
                "1",
                "--runtime",
                "tokio",
                "--route",
                "/echo size=1k delay=10ms"
            ]
        );
        let legacy = statico_flags(false, "io-uring", Ask::Route(sc), body).unwrap();
        assert_eq!(
            legacy,
            [
                "-t",
                "1",
                "--runtime",
                "io-uring",
                "-b",
                "@/tmp/b",
                "-d",
                "10ms"
            ]
        );
        let truth = Ask::Truth {
            metrics: "127.0.0.1:9",
        };
        assert!(statico_flags(false, "tokio", truth, body).is_none());
        let with = statico_flags(true, "tokio", truth, body).unwrap().join(" ");
        assert!(with.ends_with("--metrics 127.0.0.1:9 --seed 1"), "{with}");
    }
}
