//! `cargo xtask bench --against B`: an A/B of two statico binaries, to show what a change to statico
//! costs (or saves) per request. A is the statico every mode measures (`STATICO_BIN`, else the release
//! build), B the one `--against` names (a path relative to the workspace root, or absolute).
//!
//! For each scenario ([`SCENARIOS`]: keep-alive and pipelined HTTP/1.1 with wrk, HTTP/2 with h2load,
//! a held answer and the same held in a pool) and each runtime (tokio, io-uring), A and B are started
//! afresh with the same flags, one worker each pinned to the server CPUs, and measured in turn — A, B,
//! A, B … one round each, the same load back to back — so that drift in the machine falls on both
//! alike. The figure is the server's CPU time per request (utime+stime from /proc over the round,
//! divided by the requests the client saw answered); per scenario and runtime the report gives A's
//! and B's medians with min–max, the ratio A/B of the medians, and the range of the per-round ratios
//! (each round's A over the B measured right after it), which is the noise the ratio is read against.
//!
//! Needs wrk and h2load only (`cargo xtask setup` installs them), checked before anything starts.
//! Writes `report.txt` (also printed) and `results.json` (every round) into the run's directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::measure::{self, interleave, server_cpu_us, Round, Scenario, Stat, BODY, PIPELINE_LUA};
use super::report::RunInfo;
use crate::setup::which;
use crate::tools::h2load;
use crate::tools::net::free_port;
use crate::tools::procfs::machine;
use crate::tools::server::{start_statico_from, statico_bin, ServerUnderTest};

/// The runtimes every scenario runs on.
const RUNTIMES: [&str; 2] = ["tokio", "io-uring"];

/// What the client does.
#[derive(Clone, Copy, Debug)]
pub enum Load {
    /// wrk (one thread, keep-alive) on `path`, `pipeline` requests per batch.
    Wrk {
        path: &'static str,
        connections: u32,
        pipeline: u32,
    },
    /// h2load (one thread) on `/`, `connections` × `streams` concurrent streams.
    H2load { connections: u32, streams: u32 },
}

/// One load, and the statico flags (beside `-t 1 --runtime R`) both binaries answer it with.
#[derive(Clone, Copy, Debug)]
pub struct AbScenario {
    pub name: &'static str,
    pub flags: &'static [&'static str],
    pub load: Load,
}

pub const SCENARIOS: [AbScenario; 5] = [
    AbScenario {
        name: "keep-alive c50",
        flags: &["-b", BODY, "-H", "Content-Type: text/plain"],
        load: Load::Wrk {
            path: "/",
            connections: 50,
            pipeline: 1,
        },
    },
    AbScenario {
        name: "pipelined x16 c256",
        flags: &["-b", BODY, "-H", "Content-Type: text/plain"],
        load: Load::Wrk {
            path: "/",
            connections: 256,
            pipeline: 16,
        },
    },
    AbScenario {
        name: "h2 c50 m10",
        flags: &["--http2", "-b", BODY, "-H", "Content-Type: text/plain"],
        load: Load::H2load {
            connections: 50,
            streams: 10,
        },
    },
    AbScenario {
        name: "held 1ms c50",
        flags: &["--route", "/held delay=1ms"],
        load: Load::Wrk {
            path: "/held",
            connections: 50,
            pipeline: 1,
        },
    },
    // A pool that never queues (capacity above the connections): a ticket and a server per request.
    AbScenario {
        name: "pool 64 held 1ms c50",
        flags: &["--route", "/pooled capacity=64 delay=1ms"],
        load: Load::Wrk {
            path: "/pooled",
            connections: 50,
            pipeline: 1,
        },
    },
];

impl Load {
    /// How the client is run, for the report.
    fn describe(&self) -> String {
        match *self {
            Load::Wrk {
                path,
                connections,
                pipeline: 1,
            } => format!("wrk -t1 -c{connections} {path}"),
            Load::Wrk {
                path,
                connections,
                pipeline,
            } => format!("wrk -t1 -c{connections} {path}, {pipeline} requests per batch"),
            Load::H2load {
                connections,
                streams,
            } => format!("h2load -t 1 -c {connections} -m {streams} /"),
        }
    }
}

/// The two binaries: A (what every mode measures) and B (`--against`).
pub struct Binaries {
    pub a: PathBuf,
    /// Where A came from: `STATICO_BIN` or the release build.
    pub a_from: &'static str,
    pub b: PathBuf,
}

/// One scenario on one runtime: A's and B's rounds, in round order (A's round i ran just before B's).
#[derive(Clone, Debug)]
pub struct Pair {
    pub scenario: &'static str,
    pub runtime: &'static str,
    pub a: Vec<Round>,
    pub b: Vec<Round>,
}

impl Pair {
    /// A's median server CPU per request over B's (NaN if B's is 0).
    pub fn ratio(&self) -> f64 {
        let b = Round::cpu(&self.b).median;
        if b > 0.0 {
            Round::cpu(&self.a).median / b
        } else {
            f64::NAN
        }
    }

    /// Each round's A over the B measured right after it.
    pub fn round_ratios(&self) -> Vec<f64> {
        self.a
            .iter()
            .zip(&self.b)
            .filter(|(_, b)| b.cpu_us_per_req > 0.0)
            .map(|(a, b)| a.cpu_us_per_req / b.cpu_us_per_req)
            .collect()
    }

    fn errors(rounds: &[Round]) -> u64 {
        rounds.iter().map(|r| r.errors).sum()
    }
}

/// Runs every scenario on both runtimes, A and B interleaved; writes `report.txt` and
/// `results.json` into `dir` and returns the report.
pub fn run(root: &Path, dir: &Path, against: &Path, run: &RunInfo) -> Result<String> {
    let bins = binaries(root, against)?;
    for tool in ["wrk", "h2load"] {
        if which(tool).is_none() {
            bail!("{tool} is not installed (cargo xtask setup installs it)");
        }
    }
    let lua = dir.join("pipeline.lua");
    std::fs::write(&lua, PIPELINE_LUA)?;
    eprintln!("bench: {}", setup(&bins, run));
    let mut pairs = Vec::new();
    for sc in &SCENARIOS {
        for runtime in RUNTIMES {
            eprintln!("bench: {} on {runtime}", sc.name);
            let servers = [
                start(&bins.a, "A", sc, runtime, run.server_cpus)?,
                start(&bins.b, "B", sc, runtime, run.server_cpus)?,
            ];
            let mut rows = interleave(&servers, run.rounds, |s| {
                let r = round(s, sc, run, &lua)?;
                let errors = match r.errors {
                    0 => String::new(),
                    n => format!("  ({n} errors)"),
                };
                eprintln!(
                    "  {} {:>10.0} req/s {:>7.3} µs/req{errors}",
                    s.name, r.rps, r.cpu_us_per_req
                );
                Ok(r)
            })?;
            let b = rows.pop().unwrap_or_default();
            let a = rows.pop().unwrap_or_default();
            pairs.push(Pair {
                scenario: sc.name,
                runtime,
                a,
                b,
            });
        }
    }
    let text = render(&bins, &pairs, run);
    std::fs::write(dir.join("report.txt"), &text)?;
    let doc = to_json(&bins, &pairs, run);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(text)
}

/// A and B as absolute paths, each an existing file.
fn binaries(root: &Path, against: &Path) -> Result<Binaries> {
    let bins = Binaries {
        a: statico_bin(root),
        a_from: if std::env::var_os("STATICO_BIN").is_some() {
            "STATICO_BIN"
        } else {
            "the release build"
        },
        b: root.join(against),
    };
    for (which, bin) in [("A", &bins.a), ("B (--against)", &bins.b)] {
        if !bin.is_file() {
            bail!("statico {which} is not a file: {}", bin.display());
        }
    }
    Ok(bins)
}

/// The statico at `bin` (named `name`, A or B) with `sc`'s flags on `runtime`, one worker on `cpus`.
fn start(
    bin: &Path,
    name: &str,
    sc: &AbScenario,
    runtime: &str,
    cpus: &str,
) -> Result<ServerUnderTest> {
    let args: Vec<&str> = ["-t", "1", "--runtime", runtime]
        .into_iter()
        .chain(sc.flags.iter().copied())
        .collect();
    start_statico_from(bin, name, Some(cpus), free_port()?, &args, None)
}

/// One round of `sc` against `s`: the client's figures and the server's CPU per request.
fn round(s: &ServerUnderTest, sc: &AbScenario, run: &RunInfo, lua: &Path) -> Result<Round> {
    match sc.load {
        Load::Wrk {
            path,
            connections,
            pipeline,
        } => {
            let wrk = Scenario {
                name: sc.name,
                connections,
                pipeline,
                close: false,
            };
            let url = format!("http://127.0.0.1:{}{path}", s.port);
            measure::measure(s.pid(), &url, wrk, run.client_cpus, run.duration, lua)
        }
        Load::H2load {
            connections,
            streams,
        } => {
            let url = s.url();
            let mut cmd = h2load::command(
                Some(run.client_cpus),
                connections,
                streams,
                run.duration,
                &url,
            );
            let (report, cpu_us) = server_cpu_us(s.pid(), || h2load::run(&mut cmd))?;
            if report.succeeded == 0 {
                bail!("h2load got no answer from {} ({url})", s.name);
            }
            let non_2xx = report.status_4xx + report.status_5xx;
            Ok(Round {
                rps: report.rps,
                requests: report.succeeded,
                cpu_us_per_req: cpu_us / report.succeeded as f64,
                errors: report.errored + report.timeout + non_2xx,
                non_2xx,
                ..Round::default()
            })
        }
    }
}

/// Which binaries are A and B, and how the run is made: where the servers and the client run, and
/// the rounds.
fn setup(bins: &Binaries, run: &RunInfo) -> String {
    format!(
        "A = {} ({})\nB = {} (--against)\n\
         one server worker on CPU {}, client (one thread) on CPU {}, {} round(s) of {} s, A then B in each round",
        bins.a.display(),
        bins.a_from,
        bins.b.display(),
        run.server_cpus,
        run.client_cpus,
        run.rounds,
        run.duration
    )
}

/// The report: the binaries, how the run was made, one line per scenario and runtime, and how to
/// read it.
pub fn render(bins: &Binaries, pairs: &[Pair], run: &RunInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "A/B of two statico binaries: server CPU per request (utime+stime from /proc over the round / requests)\n\
         {}; medians (min-max)\n",
        setup(bins, run)
    );
    let _ = writeln!(
        s,
        "{:<21} {:<9} {:>24} {:>24} {:>6} {:>13} {:>9} {:>9} {:>7}",
        "scenario",
        "runtime",
        "A µs CPU/req",
        "B µs CPU/req",
        "A/B",
        "(per round)",
        "A req/s",
        "B req/s",
        "errors"
    );
    for p in pairs {
        let (a, b) = (Round::cpu(&p.a), Round::cpu(&p.b));
        let per_round = Stat::of(p.round_ratios());
        let _ = writeln!(
            s,
            "{:<21} {:<9} {:>24} {:>24} {:>6.3} {:>13} {:>9.0} {:>9.0} {:>7}",
            p.scenario,
            p.runtime,
            format!("{:.3} ({:.3}-{:.3})", a.median, a.min, a.max),
            format!("{:.3} ({:.3}-{:.3})", b.median, b.min, b.max),
            p.ratio(),
            format!("({:.3}-{:.3})", per_round.min, per_round.max),
            Round::rps(&p.a).median,
            Round::rps(&p.b).median,
            format!("{}/{}", Pair::errors(&p.a), Pair::errors(&p.b)),
        );
    }
    let ratios: Vec<f64> = pairs
        .iter()
        .map(Pair::ratio)
        .filter(|x| x.is_finite())
        .collect();
    if !ratios.is_empty() {
        let geomean = (ratios.iter().map(|x| x.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let _ = writeln!(
            s,
            "\nA/B over all {} rows (geometric mean): {geomean:.3}",
            ratios.len()
        );
    }
    s.push_str(
        "A/B above 1: A spends more server CPU per request than B. (per round) is the range of each \
         round's A over the B measured right after it: a ratio whose range holds 1 is a difference \
         this run cannot tell from noise. errors: the client's socket errors and non-2xx answers, A/B \
         (a row with errors measured something else).\n",
    );
    s
}

/// results.json: the binaries, the placement, and per scenario and runtime A's and B's every round.
fn to_json(bins: &Binaries, pairs: &[Pair], run: &RunInfo) -> Value {
    let side = |rounds: &[Round]| Value::Object(measure::rounds_json(rounds));
    let scenarios: Vec<Value> = pairs
        .iter()
        .map(|p| {
            let sc = SCENARIOS.iter().find(|s| s.name == p.scenario);
            json!({
                "scenario": p.scenario,
                "runtime": p.runtime,
                "statico_flags": sc.map(|s| s.flags),
                "load": sc.map(|s| s.load.describe()),
                "a": side(&p.a),
                "b": side(&p.b),
                "cpu_ratio_a_over_b": p.ratio(),
                "cpu_ratio_per_round": p.round_ratios(),
            })
        })
        .collect();
    json!({
        "mode": "ab",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "a": { "binary": bins.a.display().to_string(), "from": bins.a_from },
        "b": { "binary": bins.b.display().to_string(), "from": "--against" },
        "scenarios": scenarios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(cpu: f64, rps: f64) -> Round {
        Round {
            rps,
            requests: 1000,
            cpu_us_per_req: cpu,
            ..Round::default()
        }
    }

    fn run_info() -> RunInfo<'static> {
        RunInfo {
            server_cpus: "1",
            client_cpus: "0",
            duration: 5,
            rounds: 3,
            quick: false,
            idle_conns: 0,
        }
    }

    fn bins() -> Binaries {
        Binaries {
            a: "/a/statico".into(),
            a_from: "STATICO_BIN",
            b: "/b/statico".into(),
        }
    }

    #[test]
    fn the_ratio_is_of_the_medians_and_each_round_is_paired_with_the_b_after_it() {
        let p = Pair {
            scenario: "keep-alive c50",
            runtime: "tokio",
            a: vec![round(2.0, 100.0), round(2.2, 100.0), round(1.8, 100.0)],
            b: vec![round(2.0, 90.0), round(1.0, 90.0), round(2.0, 90.0)],
        };
        assert_eq!(p.ratio(), 1.0);
        assert_eq!(p.round_ratios(), [1.0, 2.2, 0.9]);
        let zero = Pair {
            b: vec![round(0.0, 0.0)],
            ..p
        };
        assert!(zero.ratio().is_nan());
        assert!(zero.round_ratios().is_empty());
    }

    #[test]
    fn the_report_has_a_row_per_scenario_and_runtime_with_the_ratio() {
        let mut slow = round(3.0, 80.0);
        slow.errors = 2;
        let pairs = vec![
            Pair {
                scenario: "keep-alive c50",
                runtime: "tokio",
                a: vec![round(2.0, 100.0), round(2.1, 101.0), round(1.9, 99.0)],
                b: vec![round(2.0, 100.0), round(2.0, 100.0), round(2.0, 100.0)],
            },
            Pair {
                scenario: "pool 64 held 1ms c50",
                runtime: "io-uring",
                a: vec![round(3.0, 80.0), slow, round(3.0, 80.0)],
                b: vec![round(2.0, 90.0), round(2.0, 90.0), round(2.0, 90.0)],
            },
        ];
        let text = render(&bins(), &pairs, &run_info());
        assert!(
            text.contains("A = /a/statico (STATICO_BIN)\nB = /b/statico (--against)"),
            "{text}"
        );
        assert!(text.contains("3 round(s) of 5 s"), "{text}");
        let row = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} row in {text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            row("keep-alive c50"),
            "keep-alive c50 tokio 2.000 (1.900-2.100) 2.000 (2.000-2.000) 1.000 (0.950-1.050) 100 100 0/0"
        );
        assert_eq!(
            row("pool 64 held 1ms c50"),
            "pool 64 held 1ms c50 io-uring 3.000 (3.000-3.000) 2.000 (2.000-2.000) 1.500 (1.500-1.500) 80 90 2/0"
        );
        // The geometric mean of 1.0 and 1.5.
        assert!(text.contains("(geometric mean): 1.225"), "{text}");
    }

    #[test]
    fn results_json_holds_both_sides_every_round_and_the_ratios() {
        let pairs = vec![Pair {
            scenario: "h2 c50 m10",
            runtime: "io-uring",
            a: vec![round(1.0, 10.0), round(3.0, 30.0)],
            b: vec![round(2.0, 20.0), round(2.0, 20.0)],
        }];
        let doc = to_json(&bins(), &pairs, &run_info());
        assert_eq!(doc["mode"], "ab");
        assert_eq!(doc["b"]["binary"], "/b/statico");
        let sc = &doc["scenarios"][0];
        assert_eq!(sc["load"], "h2load -t 1 -c 50 -m 10 /");
        assert_eq!(sc["statico_flags"][0], "--http2");
        assert_eq!(sc["a"]["rounds"].as_array().unwrap().len(), 2);
        assert_eq!(sc["a"]["min_max"]["cpu_us_per_req"][1], 3.0);
        assert_eq!(sc["cpu_ratio_a_over_b"], 1.5);
        assert_eq!(sc["cpu_ratio_per_round"][0], 0.5);
    }

    #[test]
    fn every_scenario_names_its_load() {
        let loads: Vec<String> = SCENARIOS.iter().map(|s| s.load.describe()).collect();
        assert_eq!(
            loads,
            [
                "wrk -t1 -c50 /",
                "wrk -t1 -c256 /, 16 requests per batch",
                "h2load -t 1 -c 50 -m 10 /",
                "wrk -t1 -c50 /held",
                "wrk -t1 -c50 /pooled",
            ]
        );
    }
}
