//! What a benchmark run leaves behind: the table printed and written to `report.txt`, `results.json`
//! (machine, versions, commands, every round), and `chart.svg`; and the check that a `results.json`
//! holds every server and scenario it claims (the smoke stage of `cargo xtask test`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use super::measure::{wrk_command, Memory, Round, Stat, IDLE_SCENARIO, SCENARIOS};
use crate::tools::procfs::machine;

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
    Stat::of(rounds.iter().map(f))
}

/// Checks that a results.json has every server and scenario it claims, each with measured rounds.
pub fn validate(path: &Path) -> Result<()> {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let names = |key: &str, name: fn(&Value) -> Option<&str>| -> Result<Vec<&str>> {
        let list = doc[key].as_array().with_context(|| format!("no {key}"))?;
        Ok(list.iter().filter_map(name).collect())
    };
    let servers = names("servers", |s| s["name"].as_str())?;
    let scenarios = names("scenarios", Value::as_str)?;
    if servers.len() < 2 || scenarios.len() < SCENARIOS.len() + 1 {
        bail!(
            "{}: expected statico and nginx and every scenario, got {servers:?} {scenarios:?}",
            path.display()
        );
    }
    for server in &servers {
        for scenario in &scenarios {
            measured(&doc, server, scenario).map_err(|e| anyhow!("{}: {e}", path.display()))?;
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

/// Whether a results.json holds `server` / `scenario` with measured requests (an RSS, for the idle
/// scenario).
fn measured(doc: &Value, server: &str, scenario: &str) -> Result<()> {
    if scenario == IDLE_SCENARIO {
        let found = doc["memory"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["server"] == server && m["rss_kib"].as_u64().unwrap_or(0) > 0);
        if !found {
            bail!("no {IDLE_SCENARIO} RSS for {server}");
        }
        return Ok(());
    }
    let r = doc["results"]
        .as_array()
        .context("no results")?
        .iter()
        .find(|r| r["server"] == server && r["scenario"] == scenario)
        .with_context(|| format!("no result for {server} / {scenario}"))?;
    let rounds = r["rounds"].as_array().map_or(&[][..], Vec::as_slice);
    if rounds.is_empty()
        || rounds
            .iter()
            .any(|x| x["requests"].as_u64().unwrap_or(0) == 0)
    {
        bail!("{server} / {scenario} has no measured requests");
    }
    Ok(())
}

fn nginx_cpu(table: &[(String, &str, Vec<Round>)], scenario: &str) -> Option<f64> {
    table
        .iter()
        .find(|(n, sc, _)| n == "nginx" && *sc == scenario)
        .map(|(_, _, r)| stat(r, |r| r.cpu_us_per_req).median)
}

/// Prints the table and writes `report.txt`, `results.json` and `chart.svg` into `dir`.
pub fn write(
    dir: &Path,
    servers: &[Started],
    table: &[(String, &str, Vec<Round>)],
    memory: &[Memory],
    run: &RunInfo,
) -> Result<()> {
    let text = render(table, memory, run);
    println!("{text}");
    std::fs::write(dir.join("report.txt"), &text)?;
    let doc = to_json(servers, table, memory, run);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    chart(&dir.join("chart.svg"), table)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(())
}

/// The table printed and written to report.txt: speed per server and scenario, then memory.
fn render(table: &[(String, &str, Vec<Round>)], memory: &[Memory], run: &RunInfo) -> String {
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
        s.push_str(&speed_line(table, server, scenario, rounds));
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

/// One server under one scenario in the table: req/s and CPU per request (medians with min–max),
/// latency, errors, and the CPU ratio to nginx.
fn speed_line(
    table: &[(String, &str, Vec<Round>)],
    server: &str,
    scenario: &str,
    rounds: &[Round],
) -> String {
    let (rps, cpu) = (stat(rounds, |r| r.rps), stat(rounds, |r| r.cpu_us_per_req));
    let p50 = stat(rounds, |r| r.p50_ms).median;
    let p99 = stat(rounds, |r| r.p99_ms).median;
    let errors: u64 = rounds.iter().map(|r| r.errors).sum();
    let ratio =
        nginx_cpu(table, scenario).map_or("-".to_string(), |n| format!("{:.2}x", cpu.median / n));
    format!(
        "{:<17} {:<22} {:>9.0} ({:.0}-{:.0}) {:>7.2} ({:.2}-{:.2}) {:>8.2} {:>8.2} {:>7} {:>12}{}\n",
        server, scenario, rps.median, rps.min, rps.max, cpu.median, cpu.min, cpu.max, p50, p99,
        errors, ratio,
        if errors > 0 { "  <- client saw errors" } else { "" }
    )
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

/// A server as the report names it: its name and how it was started.
pub struct Started<'a> {
    pub name: &'a str,
    pub command: &'a str,
}

/// results.json: the machine, versions, placement, commands, and every server's rounds and memory.
fn to_json(
    servers: &[Started],
    table: &[(String, &str, Vec<Round>)],
    memory: &[Memory],
    run: &RunInfo,
) -> Value {
    json!({
        "machine": machine(),
        "versions": versions(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "commands": {
            "bench": format!("cargo xtask bench{}", if run.quick { " --quick" } else { "" }),
            "wrk_example": wrk_example(run),
            "servers": servers.iter().map(|s| json!({ "name": s.name, "command": s.command })).collect::<Vec<_>>(),
        },
        "servers": servers.iter().map(|s| json!({ "name": s.name })).collect::<Vec<_>>(),
        "scenarios": SCENARIOS.iter().map(|s| s.name).chain(std::iter::once(IDLE_SCENARIO)).collect::<Vec<_>>(),
        "results": table.iter().map(|(server, scenario, rounds)| result_json(table, server, scenario, rounds)).collect::<Vec<_>>(),
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

fn versions() -> Value {
    json!({
        "statico": env!("CARGO_PKG_VERSION"),
        "rustc": version_of("rustc", &["--version"]),
        "nginx": version_of("nginx", &["-v"]),
        "wrk": version_of("wrk", &["-v"]),
        "go": version_of("go", &["version"]),
    })
}

/// The first scenario's wrk command line, as an example of how the load was made.
fn wrk_example(run: &RunInfo) -> String {
    let example = wrk_command(
        SCENARIOS[0],
        run.client_cpus,
        run.duration,
        Path::new("pipeline.lua"),
        "http://127.0.0.1:8080/",
    );
    std::iter::once(example.get_program())
        .chain(example.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// One server under one scenario: medians, min–max, the CPU ratio to nginx, and every round.
fn result_json(
    table: &[(String, &str, Vec<Round>)],
    server: &str,
    scenario: &str,
    rounds: &[Round],
) -> Value {
    let (rps, cpu) = (stat(rounds, |r| r.rps), stat(rounds, |r| r.cpu_us_per_req));
    json!({
        "server": server,
        "scenario": scenario,
        "median": { "rps": rps.median, "cpu_us_per_req": cpu.median },
        "min_max": { "rps": [rps.min, rps.max], "cpu_us_per_req": [cpu.min, cpu.max] },
        "cpu_vs_nginx": nginx_cpu(table, scenario).map(|n| cpu.median / n),
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

/// The SVG area a chart panel is drawn on.
type Panel<'a> =
    plotters::prelude::DrawingArea<plotters::prelude::SVGBackend<'a>, plotters::coord::Shift>;

/// Grouped bars, one group per scenario: req/s on top, server CPU µs per request below.
fn chart(path: &Path, table: &[(String, &str, Vec<Round>)]) -> Result<()> {
    use plotters::prelude::*;

    let mut servers: Vec<&str> = Vec::new();
    for (s, _, _) in table {
        if !servers.contains(&s.as_str()) {
            servers.push(s);
        }
    }
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
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    for (panel, (title, f)) in root.split_evenly((2, 1)).iter().zip(metrics.iter()) {
        // Per server, the figure's median in each scenario (0 where it was not measured).
        let bars: Vec<Vec<f64>> = servers
            .iter()
            .map(|server| {
                SCENARIOS
                    .iter()
                    .map(|sc| {
                        table
                            .iter()
                            .find(|(s, name, _)| s == server && *name == sc.name)
                            .map_or(0.0, |(_, _, r)| stat(r, f.as_ref()).median)
                    })
                    .collect()
            })
            .collect();
        let groups: Vec<&str> = SCENARIOS.iter().map(|sc| sc.name).collect();
        draw_panel(panel, title, &groups, &servers, &bars)?;
    }
    root.present()?;
    Ok(())
}

/// One panel of grouped bars: per group (a scenario), a bar per server (0 where it was not measured).
pub fn bar_chart(
    path: &Path,
    title: &str,
    groups: &[&str],
    servers: &[&str],
    bars: &[Vec<f64>],
) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    draw_panel(&root, title, groups, servers, bars)?;
    root.present()?;
    Ok(())
}

/// One panel: a group of bars per scenario (named above it), a bar per server, and the legend.
fn draw_panel(
    panel: &Panel,
    title: &str,
    groups: &[&str],
    servers: &[&str],
    bars: &[Vec<f64>],
) -> Result<()> {
    use plotters::prelude::*;

    let group = servers.len() as f64 + 1.0;
    let max = bars
        .iter()
        .flatten()
        .fold(0.0f64, |m, v| m.max(*v))
        .max(1e-9);
    let mut c = ChartBuilder::on(panel)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..(groups.len() as f64 * group), 0.0..max * 1.85)?;
    c.configure_mesh().disable_x_mesh().x_labels(0).draw()?;
    // Scenario names over their groups (the axis has no natural tick at a group's centre).
    for (i, name) in groups.iter().enumerate() {
        let centre = (i as f64 + 0.5) * group;
        c.plotting_area().draw(&Text::new(
            name.to_string(),
            (centre - group * 0.3, max * 1.06),
            ("sans-serif", 14),
        ))?;
    }
    for (j, (server, values)) in servers.iter().zip(bars).enumerate() {
        let colour = Palette99::pick(j).mix(0.9);
        let rects = values.iter().enumerate().map(|(i, v)| {
            let x0 = i as f64 * group + 0.5 + j as f64;
            Rectangle::new([(x0, 0.0), (x0 + 0.9, *v)], colour.filled())
        });
        c.draw_series(rects)?.label(*server).legend(move |(x, y)| {
            Rectangle::new([(x, y - 5), (x + 10, y + 5)], Palette99::pick(j).filled())
        });
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperMiddle)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A results.json as a quick run writes it: two servers, every scenario, one round each.
    fn quick_run() -> Value {
        let round = Round {
            rps: 1000.0,
            requests: 2000,
            cpu_us_per_req: 6.0,
            ..Round::default()
        };
        let names = ["statico-tokio", "nginx"];
        let table: Table = SCENARIOS
            .iter()
            .flat_map(|sc| names.map(|n| (n.to_string(), sc.name, vec![round.clone()])))
            .collect();
        let memory = names.map(|n| Memory {
            server: n.into(),
            connections: 1000,
            baseline_kib: 1,
            rss_kib: 2,
            peak_kib: 3,
        });
        let run = RunInfo {
            server_cpus: "1",
            client_cpus: "0",
            duration: 2,
            rounds: 1,
            quick: true,
            idle_conns: 1000,
        };
        let started = names.map(|name| Started {
            name,
            command: name,
        });
        to_json(&started, &table, &memory, &run)
    }

    fn validate_doc(doc: &Value) -> Result<()> {
        let path = std::env::temp_dir().join(format!("xtask-results-{}.json", std::process::id()));
        std::fs::write(&path, doc.to_string()).unwrap();
        let checked = validate(&path);
        let _ = std::fs::remove_file(&path);
        checked
    }

    #[test]
    fn validate_accepts_a_full_run_and_names_what_is_missing() {
        let mut doc = quick_run();
        validate_doc(&doc).unwrap();
        doc["results"][3]["rounds"][0]["requests"] = json!(0);
        let err = validate_doc(&doc).unwrap_err().to_string();
        assert!(
            err.ends_with("nginx / keep-alive c256 has no measured requests"),
            "{err}"
        );
        doc["results"][3]["rounds"][0]["requests"] = json!(2000);
        doc["memory"].as_array_mut().unwrap().pop();
        let err = validate_doc(&doc).unwrap_err().to_string();
        assert!(err.ends_with("no idle keep-alive RSS for nginx"), "{err}");
    }
}
