//! What a benchmark run leaves behind: the table printed and written to `report.txt`, `results.json`
//! (machine, versions, commands, every round), and `chart.svg`; and the check that a `results.json`
//! holds every server and scenario it claims (the smoke stage of `cargo xtask test`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::measure::{cpu_count, wrk_command, Memory, Round, Stat, IDLE_SCENARIO, SCENARIOS};
use super::servers::ServerUnderTest;

/// Every server's rounds, per scenario.
pub type Table = Vec<(String, &'static str, Vec<Round>)>;

/// How a run was made, for the report.
pub struct RunInfo<'a> {
    pub server_cpus: &'a str,
    pub client_cpus: &'a str,
    pub duration: u64,
    pub rounds: usize,
    pub quick: bool,
    pub idle_conns: usize,
}

/// `target/bench/<name>`, created, as an absolute path (nginx resolves relative paths against its own
/// prefix): where a mode keeps its files and report.
pub fn work_dir(root: &Path, name: &str) -> Result<std::path::PathBuf> {
    let dir = root.join("target/bench").join(name);
    std::fs::create_dir_all(&dir)?;
    Ok(dir.canonicalize()?)
}

/// The median (with min–max) of one figure over rounds.
fn stat(rounds: &[Round], f: impl Fn(&Round) -> f64) -> Stat {
    Stat::of(rounds.iter().map(f).collect())
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

fn nginx_cpu(table: &[(String, &str, Vec<Round>)], scenario: &str) -> Option<f64> {
    table
        .iter()
        .find(|(n, sc, _)| n == "nginx" && *sc == scenario)
        .map(|(_, _, r)| stat(r, |r| r.cpu_us_per_req).median)
}

pub fn render(table: &[(String, &str, Vec<Round>)], memory: &[Memory], run: &RunInfo) -> String {
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
        let Stat {
            median: rps,
            min: rmin,
            max: rmax,
        } = stat(rounds, |r| r.rps);
        let Stat {
            median: cpu,
            min: cmin,
            max: cmax,
        } = stat(rounds, |r| r.cpu_us_per_req);
        let p50 = stat(rounds, |r| r.p50_ms).median;
        let p99 = stat(rounds, |r| r.p99_ms).median;
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
        "\nserver CPU {} / wrk CPU {}, {} round(s) x {} s; `CPU vs nginx` < 1 means less server CPU per request than nginx.\nOn a small machine one wrk thread caps keep-alive req/s; server CPU per request is the figure that ranks servers.",
        run.server_cpus, run.client_cpus, run.rounds, run.duration
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

pub fn to_json(
    servers: &[ServerUnderTest],
    table: &[(String, &str, Vec<Round>)],
    memory: &[Memory],
    run: &RunInfo,
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
        run.client_cpus,
        run.duration,
        Path::new("pipeline.lua"),
        "http://127.0.0.1:8080/",
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
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "commands": {
            "bench": format!("cargo xtask bench{}", if run.quick { " --quick" } else { "" }),
            "wrk_example": wrk_example,
            "servers": servers.iter().map(|s| json!({ "name": s.name, "command": s.command })).collect::<Vec<_>>(),
        },
        "servers": servers.iter().map(|s| json!({ "name": s.name })).collect::<Vec<_>>(),
        "scenarios": SCENARIOS.iter().map(|s| s.name).chain(std::iter::once(IDLE_SCENARIO)).collect::<Vec<_>>(),
        "results": table.iter().map(|(server, scenario, rounds)| {
            let Stat { median: rps, min: rps_min, max: rps_max } = stat(rounds, |r| r.rps);
            let Stat { median: cpu, min: cpu_min, max: cpu_max } = stat(rounds, |r| r.cpu_us_per_req);
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
            "connections_requested": run.idle_conns,
            "connections": m.connections,
            "idle_rss_kib": m.baseline_kib,
            "rss_kib": m.rss_kib,
            "peak_rss_kib": m.peak_kib,
        })).collect::<Vec<_>>(),
    })
}

/// Redraws a run's chart from its results.json (one round per result, at the median).
pub fn redraw(dir: &Path) -> Result<()> {
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
pub fn chart(path: &Path, table: &[(String, &str, Vec<Round>)]) -> Result<()> {
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
            .map_or(0.0, |(_, _, r)| stat(r, f).median)
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
