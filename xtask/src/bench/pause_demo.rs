//! `cargo xtask bench --pause-demo`: wrk2's demonstration of coordinated omission, reproduced by one
//! command. wrk2's README stops the server with ^Z for 1.4 s under a fixed rate: a load generator that
//! times each request from when it was *sent* reports a p99 of a few ms (the stalled connections send
//! nothing more, so the stall is one slow request per connection), one that times it from when it was
//! *due* reports a p99 of about a second (every request the schedule wanted during the stall waited).
//!
//! Here oha drives statico at [`RATE`] req/s over [`CONNS`] keep-alive connections for [`PLAN`]'s
//! length, once without and once with `--latency-correction`, while statico stalls at `at` for `for`
//! — two ways, each on a fresh statico:
//! - `--pause` (statico's own: it answers nothing for that long, requests in flight or arriving are
//!   answered when the pause ends, and its ground truth counts the pause in `held`);
//! - `^Z` as wrk2 did: SIGSTOP, then SIGCONT, of the statico PID this bench started (the kernel still
//!   accepts and buffers; the process, frozen, cannot count its own stall).
//!
//! Beside oha's two views, statico's ground truth (`/ground-truth.json` on `--metrics`: the route's
//! `held_us` percentiles and `pauses`; `/metrics`: its held-seconds histogram, for how many answers
//! were held past [`SLOW_S`]).
//!
//! Latency over time: oha 1.16's JSON has only histograms, but `--output-format csv` lists every
//! successful request (its start since oha's start, time to first byte, and its latency — corrected,
//! under `--latency-correction`, from when it was due). The chart plots, per [`BIN_S`] of time, the
//! slowest request *due* in it (due = sent, or under correction sent + first byte − latency): the
//! corrected view shows wrk2's sawtooth across the stall, the uncorrected one a single spike. The
//! CSVs are kept in the out dir beside `report.txt`, `results.json` and `chart.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::report::RunInfo;
use crate::tools::chart::{line_chart, Line, LinePanel};
use crate::tools::net::{free_port, http_get, wait_port};
use crate::tools::oha;
use crate::tools::procfs::machine;
use crate::tools::server::{signal, start_statico, statico_bin};

/// oha's fixed rate over all its connections, and the connections (wrk2's demonstration's scale).
const RATE: u32 = 1000;
const CONNS: u32 = 10;
/// statico's route (ground truth needs one), and its name in the ground truth.
const ROUTE: &str = "GET /* body=ok";
const ROUTE_NAME: &str = "GET /*";
/// A latency above this counts as slowed by the stall: a bound of statico's held-seconds histogram
/// (2^14 µs), far above an unstalled answer (~0.1 ms) and far below the stall.
const SLOW_S: f64 = 0.016384;
const SLOW_LE: &str = "0.016384";
/// The chart's time bins.
const BIN_S: f64 = 0.1;

/// A run's schedule: its length, and when (after statico's start-up) and for how long it stalls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    pub secs: u64,
    pub at_s: f64,
    pub for_s: f64,
}

/// wrk2's: a 1.4 s stall; here 5 s into a 15 s run.
const PLAN: Plan = Plan {
    secs: 15,
    at_s: 5.0,
    for_s: 1.4,
};
const QUICK_PLAN: Plan = Plan {
    secs: 6,
    at_s: 2.0,
    for_s: 1.4,
};

/// How statico is stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// `--pause 'at=… for=…'`.
    Pause,
    /// SIGSTOP / SIGCONT of its PID, as wrk2's ^Z.
    Stop,
}

impl Stall {
    fn name(self) -> &'static str {
        match self {
            Stall::Pause => "--pause",
            Stall::Stop => "^Z",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Stall::Pause => "pause",
            Stall::Stop => "sigstop",
        }
    }
}

/// One request as oha's CSV tells it, in seconds (times since oha's start).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub sent: f64,
    pub first_byte: f64,
    pub latency: f64,
}

impl Sample {
    /// When its latency is counted from: when it was sent, or (`--latency-correction`) when it was
    /// due. The answer is 2 bytes, so its first byte is its end: due = sent + first byte − latency.
    pub fn due(&self) -> f64 {
        (self.sent + self.first_byte - self.latency).max(0.0)
    }
}

/// Latency percentiles (nearest rank), in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// Of latencies in seconds.
    pub fn of(latencies_s: impl IntoIterator<Item = f64>) -> Percentiles {
        let mut v: Vec<f64> = latencies_s.into_iter().map(|s| s * 1e3).collect();
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Percentiles {
            count: v.len() as u64,
            p50: rank(0.5),
            p99: rank(0.99),
            p999: rank(0.999),
            max: v[v.len() - 1],
        }
    }
}

/// statico's ground truth of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Truth {
    /// The route's held time (from its request read to its answer's head), in ms.
    pub held: Percentiles,
    /// `pauses`: (count, total ms), where statico tells it.
    pub pauses: Option<(u64, f64)>,
    /// Answers held past [`SLOW_S`] (its held-seconds histogram), where `/metrics` tells it.
    pub slowed: Option<u64>,
}

/// What a perfect server stalled by `plan` shows, from the plan alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expected {
    /// Requests the schedule wants during the stall.
    pub due_in_stall: u64,
    /// The most requests the stall can hold on the wire: one per connection.
    pub in_flight: u32,
    /// Corrected: the due requests' latencies spread evenly over (0, for], so the top q of all
    /// `rate × secs` requests lies above `for − (1 − q) × secs` (if that is positive).
    pub corrected_p99_ms: f64,
    pub corrected_p999_ms: f64,
}

impl Expected {
    pub fn of(plan: Plan) -> Expected {
        let above = |q: f64| ((plan.for_s - (1.0 - q) * plan.secs as f64) * 1e3).max(0.0);
        Expected {
            due_in_stall: (RATE as f64 * plan.for_s).round() as u64,
            in_flight: CONNS,
            corrected_p99_ms: above(0.99),
            corrected_p999_ms: above(0.999),
        }
    }
}

/// One run measured.
struct Measured {
    samples: Vec<Sample>,
    oha: Percentiles,
    /// oha's requests slower than [`SLOW_S`], and those of them the stall held ([`held_by`]).
    slowed: u64,
    in_stall: u64,
    /// The stall, in oha's clock (s).
    window: (f64, f64),
    truth: Result<Truth>,
    csv: String,
}

/// One stall seen with or without correction.
struct Row {
    stall: Stall,
    corrected: bool,
    measured: Result<Measured>,
}

/// Runs the mode; writes `report.txt`, `results.json`, `chart.svg` and oha's CSVs into `dir`;
/// returns the report.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    let plan = if run.quick { QUICK_PLAN } else { PLAN };
    let bin = statico_bin(root);
    let pause = has_pause(&bin);
    let mut rows = Vec::new();
    let realtime = super::measure::raised(|| {
        for stall in [Stall::Pause, Stall::Stop] {
            for corrected in [false, true] {
                let measured = if stall == Stall::Pause && !pause {
                    Err(anyhow::anyhow!("{} has no --pause", bin.display()))
                } else {
                    measure(root, dir, run, plan, (stall, corrected))
                };
                rows.push(Row {
                    stall,
                    corrected,
                    measured,
                });
            }
        }
    });
    let mut text = render(run, plan, &rows);
    text.insert_str(0, priority_line(realtime));
    std::fs::write(dir.join("report.txt"), &text)?;
    let mut doc = to_json(run, plan, &bin, &rows);
    doc["realtime"] = realtime.into();
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    line_chart(
        &dir.join("chart.svg"),
        "seconds since oha's start (when each request was due)",
        &panels(&rows),
    )?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(text)
}

/// The report's first line: at what priority statico and oha ran.
fn priority_line(realtime: bool) -> &'static str {
    if realtime {
        "priority: statico and oha at SCHED_FIFO 1 (chrt), so that other work on the machine does not hold them off their CPUs\n"
    } else {
        "priority: normal (chrt -f was refused): other work on the machine may hold statico and oha off their CPUs\n"
    }
}

/// Whether the statico at `bin` has `--pause` (its `--help` lists it).
fn has_pause(bin: &Path) -> bool {
    Command::new(bin).arg("--help").output().is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout)
            .split(|c: char| c.is_whitespace() || c == ',' || c == '=')
            .any(|word| word == "--pause")
    })
}

/// A duration as statico's flags take it: whole seconds, else ms.
fn dur(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{:.0}ms", s * 1e3)
    }
}

/// statico's flags: one worker, the route, the metrics listener, and the pause if `stall` is one.
fn statico_flags(metrics: &str, stall: Stall, plan: Plan) -> Vec<String> {
    let mut flags: Vec<String> = ["-t", "1", "--route", ROUTE, "--metrics", metrics]
        .map(String::from)
        .into();
    if stall == Stall::Pause {
        flags.push("--pause".into());
        flags.push(format!("at={} for={}", dur(plan.at_s), dur(plan.for_s)));
    }
    flags
}

/// oha at [`RATE`] over [`CONNS`] for `secs`, one runtime thread pinned to `client_cpus`, every
/// request written to `csv`.
fn oha_command(
    client_cpus: &str,
    url: &str,
    corrected: bool,
    secs: u64,
    csv: &Path,
) -> Result<Command> {
    let mut cmd = oha::command(Some(client_cpus), oha::Output::Csv(csv))?;
    cmd.args(["-q", &RATE.to_string(), "-c", &CONNS.to_string()])
        .args(["-z", &format!("{secs}s")]);
    if corrected {
        cmd.arg("--latency-correction");
    }
    cmd.arg(url);
    Ok(cmd)
}

/// The file oha's CSV of one run goes to.
fn csv_name(stall: Stall, corrected: bool) -> String {
    let view = if corrected {
        "corrected"
    } else {
        "uncorrected"
    };
    format!("oha-{}-{view}.csv", stall.key())
}

/// One run against a fresh statico: oha's requests, the stall's window in oha's clock, the truth.
fn measure(
    root: &Path,
    dir: &Path,
    run: &RunInfo,
    plan: Plan,
    (stall, corrected): (Stall, bool),
) -> Result<Measured> {
    let metrics_port = free_port()?;
    let flags = statico_flags(&format!("127.0.0.1:{metrics_port}"), stall, plan);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let s = start_statico(root, "statico", Some(run.server_cpus), &flags)?;
    // statico's pause clock started a little before it said it listens: the window is nominal.
    let ready = Instant::now();
    wait_port(metrics_port)?;
    let csv = csv_name(stall, corrected);
    let mut cmd = oha_command(
        run.client_cpus,
        &s.url(),
        corrected,
        plan.secs,
        &dir.join(&csv),
    )?;
    eprintln!(
        "bench: pause-demo {} {}: oha -q {RATE} -c {CONNS} for {} s",
        stall.name(),
        if corrected {
            "corrected"
        } else {
            "uncorrected"
        },
        plan.secs
    );
    let pid = s.pid();
    let (out, offset) = std::thread::scope(|scope| {
        if stall == Stall::Stop {
            scope.spawn(move || sigstop_for(pid, ready, plan));
        }
        let offset = ready.elapsed().as_secs_f64();
        (cmd.output(), offset)
    });
    let out = out.context("run oha (cargo xtask setup installs it)")?;
    if !out.status.success() {
        bail!("oha failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let samples = parse_csv(&std::fs::read_to_string(dir.join(&csv))?)?;
    // The requests oha aborted at its deadline leave as their connections close.
    sleep(Duration::from_millis(300));
    let truth = http_get(metrics_port, "/ground-truth.json").and_then(|gt| {
        let metrics = http_get(metrics_port, "/metrics").unwrap_or_default();
        parse_truth(&gt, &metrics)
    });
    let window = (plan.at_s - offset, plan.at_s - offset + plan.for_s);
    Ok(Measured {
        oha: Percentiles::of(samples.iter().map(|s| s.latency)),
        slowed: samples.iter().filter(|s| s.latency > SLOW_S).count() as u64,
        in_stall: held_by(&samples, window),
        window,
        samples,
        truth,
        csv,
    })
}

/// The requests the stall `window` held: slower than [`SLOW_S`], due before it ended and answered
/// after it began.
pub fn held_by(samples: &[Sample], (begin, end): (f64, f64)) -> u64 {
    samples
        .iter()
        .filter(|s| s.latency > SLOW_S && s.due() < end && s.due() + s.latency > begin)
        .count() as u64
}

/// wrk2's ^Z: SIGSTOP to `pid` at `plan.at_s` after `ready`, SIGCONT `plan.for_s` later.
fn sigstop_for(pid: u32, ready: Instant, plan: Plan) {
    sleep((ready + Duration::from_secs_f64(plan.at_s)).saturating_duration_since(Instant::now()));
    if signal(pid, "-STOP").is_err() {
        eprintln!("bench: pause-demo: SIGSTOP to {pid} failed");
        return;
    }
    sleep(Duration::from_secs_f64(plan.for_s));
    if signal(pid, "-CONT").is_err() {
        eprintln!("bench: pause-demo: SIGCONT to {pid} failed (it is stopped at the end)");
    }
}

/// oha's `--output-format csv`: a header, then per successful request `request-start, DNS,
/// DNS+dialup, Response-delay, request-duration, bytes, status` (seconds).
pub fn parse_csv(text: &str) -> Result<Vec<Sample>> {
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.starts_with("request-start,") => {}
        other => bail!("oha's CSV starts with {other:?}, not its header"),
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let f: Vec<&str> = line.split(',').collect();
            let num = |k: usize| -> Result<f64> {
                f.get(k)
                    .and_then(|v| v.trim().parse().ok())
                    .with_context(|| format!("oha's CSV line {}: {line:?}", i + 2))
            };
            Ok(Sample {
                sent: num(0)?,
                first_byte: num(3)?,
                latency: num(4)?,
            })
        })
        .collect()
}

/// statico's `/ground-truth.json` (the route [`ROUTE_NAME`], its base entry, and `pauses` if told)
/// and its `/metrics` text (how many answers its held-seconds histogram has past [`SLOW_LE`]).
pub fn parse_truth(json: &str, metrics: &str) -> Result<Truth> {
    let doc: Value = serde_json::from_str(json).context("statico's /ground-truth.json")?;
    let route = doc["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["route"] == ROUTE_NAME && (r["phase"].is_null() || r["phase"] == "base"))
        .with_context(|| format!("no route {ROUTE_NAME} in the ground truth: {json}"))?;
    let held = &route["held_us"];
    let ms = |k: &str| held[k].as_f64().unwrap_or(0.0) / 1e3;
    let pauses = doc["pauses"].as_object().map(|p| {
        let count = p.get("count").and_then(Value::as_u64).unwrap_or(0);
        let total = p.get("total_us").and_then(Value::as_f64).unwrap_or(0.0);
        (count, total / 1e3)
    });
    Ok(Truth {
        held: Percentiles {
            count: held["count"].as_u64().unwrap_or(0),
            p50: ms("p50"),
            p99: ms("p99"),
            p999: ms("p99.9"),
            max: ms("max"),
        },
        pauses,
        slowed: held_over(metrics, SLOW_LE),
    })
}

/// Answers of the route held longer than the bucket bound `le`: the `+Inf` bucket less that one.
fn held_over(metrics: &str, le: &str) -> Option<u64> {
    let route = format!("route=\"{ROUTE_NAME}\"");
    let bucket = |bound: &str| -> Option<u64> {
        let le = format!("le=\"{bound}\"");
        metrics
            .lines()
            .find(|l| {
                l.starts_with("statico_route_held_seconds_bucket{")
                    && l.contains(&route)
                    && l.contains(&le)
            })?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    };
    Some(bucket("+Inf")?.saturating_sub(bucket(le)?))
}

/// What was run, above the table.
fn heading(run: &RunInfo, plan: Plan) -> String {
    let e = Expected::of(plan);
    format!(
        "pause demo: coordinated omission as in wrk2's README (a 1.4 s ^Z of the server under a fixed rate)\n\
         statico -t 1 --route '{ROUTE}' --metrics … on CPU {}, a fresh one per run, stalled {} s after\n\
         start-up for {} s: by its own --pause 'at={} for={}', and by SIGSTOP/SIGCONT of its PID (^Z, as wrk2 did).\n\
         oha -q {RATE} -c {CONNS} -z {}s --worker-threads 1 on CPU {}, without and with --latency-correction\n\
         (latency from when each request was sent, or from when the schedule had it due).\n\
         A perfect server so stalled: {} requests are due during the stall, at most {} of them (one per\n\
         connection) in flight on the wire; corrected p99 ≈ {:.0} ms, p99.9 ≈ {:.0} ms (the due requests' waits\n\
         spread evenly over the stall); uncorrected, at most {} slow answers of {}:\n{}.\n",
        run.server_cpus,
        plan.at_s,
        plan.for_s,
        dur(plan.at_s),
        dur(plan.for_s),
        plan.secs,
        run.client_cpus,
        e.due_in_stall,
        e.in_flight,
        e.corrected_p99_ms,
        e.corrected_p999_ms,
        e.in_flight,
        RATE as u64 * plan.secs,
        uncorrected_tail(e.in_flight as u64, RATE as u64 * plan.secs),
    )
}

/// Which of oha's uncorrected figures `slow` stalled answers of `all` reach: those whose tail
/// (nearest rank) holds no more answers than that.
fn uncorrected_tail(slow: u64, all: u64) -> &'static str {
    let tail = |q: f64| ((1.0 - q) * all as f64).floor() as u64;
    if slow <= tail(0.999) {
        "p99 and p99.9 stay those of an unstalled server, only max shows the stall"
    } else if slow <= tail(0.99) {
        "p99 stays that of an unstalled server, p99.9 and max show the stall"
    } else {
        "every tail figure shows the stall"
    }
}

/// One line of the table: who saw it, and the figures.
fn line(stall: &str, view: &str, p: &Percentiles, slowed: [Option<u64>; 2], extra: &str) -> String {
    let [slowed, in_stall] = slowed.map(|n| n.map_or("-".into(), |n| n.to_string()));
    format!(
        "{stall:<8} {view:<26} {:>7} {:>9.3} {:>9.3} {:>9.3} {:>9.1} {:>7} {:>8}  {extra}\n",
        p.count, p.p50, p.p99, p.p999, p.max, slowed, in_stall
    )
}

/// The report: heading, per run oha's view and statico's truth, and what they mean.
fn render(run: &RunInfo, plan: Plan, rows: &[Row]) -> String {
    let mut s = heading(run, plan);
    let _ = write!(
        s,
        "\n{:<8} {:<26} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}\n",
        "stall",
        "seen by",
        "answers",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        ">16 ms",
        "in stall"
    );
    for r in rows {
        let view = if r.corrected {
            "oha --latency-correction"
        } else {
            "oha, uncorrected"
        };
        let m = match &r.measured {
            Ok(m) => m,
            Err(e) => {
                let _ = writeln!(s, "{:<8} {view:<26} not measured: {e:#}", r.stall.name());
                continue;
            }
        };
        let counts = [Some(m.slowed), Some(m.in_stall)];
        s.push_str(&line(r.stall.name(), view, &m.oha, counts, ""));
        s.push_str(&match &m.truth {
            Ok(t) => {
                let pauses = t.pauses.map_or(String::new(), |(n, ms)| {
                    format!("pauses: {n}, {ms:.0} ms in all")
                });
                line(
                    "",
                    "  statico's truth (held)",
                    &t.held,
                    [t.slowed, None],
                    &pauses,
                )
            }
            Err(e) => format!("{:<8}   statico's truth: none: {e:#}\n", ""),
        });
    }
    s.push_str(
        ">16 ms: answers slower than 16.4 ms (oha), or held longer (statico's held-seconds histogram), in\n\
         the whole run; in stall: those of oha's due before the stall's (nominal) end and answered after its\n\
         start — the requests the stall held. statico's truth counts from when it read a request, so it\n\
         sees what went over the wire (the uncorrected view); a frozen process (^Z) sees nothing at all.\n\
         Only the corrected view counts the requests the schedule wanted to send during the stall.\n\
         statico's held is how long an answer was held back (a route's delay, a pause), from its request\n\
         read to its head going out: 0 for an unstalled answer of this route, which has no delay.\n",
    );
    s
}

/// A percentile set as JSON (ms).
fn percentiles_json(p: &Percentiles) -> Value {
    json!({ "count": p.count, "p50": p.p50, "p99": p.p99, "p99.9": p.p999, "max": p.max })
}

/// One run in results.json.
fn row_json(r: &Row) -> Value {
    let measured = match &r.measured {
        Err(e) => json!({ "error": format!("{e:#}") }),
        Ok(m) => {
            let truth = match &m.truth {
                Ok(t) => json!({
                    "held_ms": percentiles_json(&t.held), "held_over_16ms": t.slowed,
                    "pauses": t.pauses.map(|(n, ms)| json!({ "count": n, "total_ms": ms })),
                }),
                Err(e) => json!({ "error": format!("{e:#}") }),
            };
            json!({ "oha_ms": percentiles_json(&m.oha), "oha_over_16ms": m.slowed,
                    "oha_held_by_stall": m.in_stall,
                    "stall_window_s": [m.window.0, m.window.1], "csv": m.csv, "truth": truth })
        }
    };
    json!({ "stall": r.stall.name(), "latency_correction": r.corrected, "measured": measured })
}

/// results.json: how the run was made, what a perfect server would show, and every run.
fn to_json(run: &RunInfo, plan: Plan, bin: &Path, rows: &[Row]) -> Value {
    let e = Expected::of(plan);
    json!({
        "mode": "pause-demo",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "statico": bin.display().to_string(),
        "statico_flags": statico_flags("127.0.0.1:PORT", Stall::Pause, plan).join(" "),
        "oha": format!("oha --no-tui --output-format csv -o FILE --worker-threads 1 -q {RATE} -c {CONNS} -z {}s [--latency-correction]", plan.secs),
        "plan": { "seconds": plan.secs, "stall_at_s": plan.at_s, "stall_for_s": plan.for_s,
                  "rate": RATE, "connections": CONNS, "slow_ms": SLOW_S * 1e3 },
        "expected": { "due_in_stall": e.due_in_stall, "in_flight_max": e.in_flight,
                      "corrected_p99_ms": e.corrected_p99_ms, "corrected_p999_ms": e.corrected_p999_ms },
        "runs": rows.iter().map(row_json).collect::<Vec<_>>(),
    })
}

/// The slowest latency (ms) among the requests due in each `width` of time, at the bin's centre.
pub fn bins(samples: &[Sample], width: f64) -> Vec<(f64, f64)> {
    let mut max: BTreeMap<i64, f64> = BTreeMap::new();
    for s in samples {
        let slot = max.entry((s.due() / width).floor() as i64).or_default();
        *slot = slot.max(s.latency * 1e3);
    }
    max.into_iter()
        .map(|(k, v)| ((k as f64 + 0.5) * width, v))
        .collect()
}

/// One panel per stall measured: oha's two views over time, and the stall's window as a box.
fn panels(rows: &[Row]) -> Vec<LinePanel> {
    let mut panels = Vec::new();
    for stall in [Stall::Pause, Stall::Stop] {
        let runs: Vec<(bool, &Measured)> = rows
            .iter()
            .filter(|r| r.stall == stall)
            .filter_map(|r| r.measured.as_ref().ok().map(|m| (r.corrected, m)))
            .collect();
        let Some((_, first)) = runs.first() else {
            continue;
        };
        let mut lines: Vec<Line> = runs
            .iter()
            .map(|(corrected, m)| Line {
                name: format!(
                    "oha {}: slowest per {:.0} ms",
                    if *corrected {
                        "corrected"
                    } else {
                        "uncorrected (sent nothing in the stall)"
                    },
                    BIN_S * 1e3
                ),
                points: bins(&m.samples, BIN_S),
                measured: true,
                colour: if *corrected { 3 } else { 0 },
            })
            .collect();
        let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
        let (low, top) = (ys.clone().fold(f64::MAX, f64::min), ys.fold(0.0, f64::max));
        let (a, b) = first.window;
        lines.push(Line {
            name: format!("the stall ({}, nominal)", stall.name()),
            points: vec![(a, low), (a, top), (b, top), (b, low)],
            measured: false,
            colour: 12,
        });
        panels.push(LinePanel {
            title: format!(
                "statico stalled by {} under oha -q {RATE} -c {CONNS}: latency over time",
                stall.name()
            ),
            y_label: "ms (log)".into(),
            log_y: true,
            lines,
        });
    }
    panels
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of a real oha 1.16 CSV (against statico, `-q 200 -c 4`).
    const CSV: &str = "request-start,DNS,DNS+dialup,Response-delay,request-duration,bytes,status\n\
        0.000365953,0.00018881,0.000716918,0.002184192,0.002185093,2,200\n\
        0.005686512,0.000015875,0.000093304,0.00016655,0.000167197,2,200\n\
        0.011111046,0.000013491,0.000161482,0.000259313,0.000260404,2,200\n";

    const TRUTH: &str = r#"{"generation":1,"pauses":{"count":1,"total_us":1400000},
        "routes":[{"route":"GET /*","phase":"base","count":15000,"outcomes":{"200":15000,"gone":0},
        "held_us":{"count":15000,"p50":0.000,"p90":0.000,"p99":0.000,"p99.9":0.000,"max":1399000.000,"mean":930.0}}],
        "pools":[]}"#;

    const METRICS: &str =
        "statico_route_held_seconds_bucket{route=\"GET /*\",le=\"0.008192\"} 14990\n\
        statico_route_held_seconds_bucket{route=\"GET /*\",le=\"0.016384\"} 14990\n\
        statico_route_held_seconds_bucket{route=\"GET /*\",le=\"+Inf\"} 15000\n";

    #[test]
    fn ohas_csv_parses_and_a_bad_one_says_where() {
        let s = parse_csv(CSV).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].sent, 0.005686512);
        assert_eq!(s[1].latency, 0.000167197);
        // Uncorrected, a request was due when sent (to the ns, less its body's read).
        assert!((s[1].due() - s[1].sent).abs() < 1e-6);
        assert!(parse_csv("{}").is_err());
        let err = parse_csv(&format!("{CSV}1,2\n")).unwrap_err().to_string();
        assert!(err.contains("line 5"), "{err}");
    }

    #[test]
    fn the_stall_held_the_slow_requests_that_overlap_it() {
        let at = |due: f64, latency: f64| Sample {
            sent: due,
            first_byte: latency,
            latency,
        };
        let samples = [
            at(4.9, 0.0001),  // before, fast
            at(4.999, 1.401), // in flight when it began
            at(6.0, 0.4),     // due in it
            at(3.0, 0.1),     // slow, but before it
            at(6.39, 0.001),  // due in it, but fast
        ];
        assert_eq!(held_by(&samples, (5.0, 6.4)), 2);
    }

    #[test]
    fn a_corrected_request_is_placed_when_it_was_due() {
        // Sent at 6.4 s when the stall ended, answered 0.1 ms later, 1 s late: due at 5.4001 s.
        let s = Sample {
            sent: 6.4,
            first_byte: 0.0001,
            latency: 1.0001,
        };
        assert!((s.due() - 5.4).abs() < 1e-9);
    }

    #[test]
    fn percentiles_are_nearest_rank_in_ms() {
        let p = Percentiles::of((1..=1000).map(|i| i as f64 / 1e3));
        assert_eq!(
            (p.count, p.p50, p.p99, p.p999, p.max),
            (1000, 500.0, 990.0, 999.0, 1000.0)
        );
        assert_eq!(Percentiles::of([]), Percentiles::default());
        assert_eq!(Percentiles::of([0.002]).p50, 2.0);
    }

    #[test]
    fn the_truth_reads_held_pauses_and_the_slowed_answers() {
        let t = parse_truth(TRUTH, METRICS).unwrap();
        assert_eq!((t.held.count, t.held.p99, t.held.max), (15000, 0.0, 1399.0));
        assert_eq!(t.pauses, Some((1, 1400.0)));
        assert_eq!(t.slowed, Some(10));
        // Today's statico: no pauses, no phase; no /metrics text.
        let old = TRUTH
            .replace(r#""phase":"base","#, "")
            .replace(r#""pauses""#, r#""x""#);
        let t = parse_truth(&old, "").unwrap();
        assert_eq!((t.pauses, t.slowed), (None, None));
        assert!(parse_truth(&TRUTH.replace("GET /*", "/x"), "").is_err());
    }

    #[test]
    fn a_perfect_server_stalled_as_wrk2s_shows_a_second_at_p99_corrected() {
        let e = Expected::of(PLAN);
        assert_eq!((e.due_in_stall, e.in_flight), (1400, 10));
        assert!((e.corrected_p99_ms - 1250.0).abs() < 1e-6, "{e:?}");
        assert!((e.corrected_p999_ms - 1385.0).abs() < 1e-6, "{e:?}");
        assert!(uncorrected_tail(10, 15_000).starts_with("p99 and p99.9 stay"));
        assert!(uncorrected_tail(10, 6_000).starts_with("p99 stays"));
        assert!(uncorrected_tail(10, 100).starts_with("every"));
        let long = Expected::of(Plan { secs: 200, ..PLAN });
        assert_eq!(long.corrected_p99_ms, 0.0);
    }

    #[test]
    fn flags_and_durations_read_as_statico_takes_them() {
        assert_eq!((dur(5.0), dur(1.4)), ("5s".into(), "1400ms".into()));
        let f = statico_flags("127.0.0.1:9", Stall::Pause, PLAN);
        assert_eq!(f[f.len() - 2..], ["--pause", "at=5s for=1400ms"]);
        assert!(!statico_flags("127.0.0.1:9", Stall::Stop, PLAN).contains(&"--pause".into()));
        assert_eq!(csv_name(Stall::Stop, true), "oha-sigstop-corrected.csv");
    }

    /// A corrected run of a perfect server stalled by `plan`: one request a ms, those due in the stall
    /// answered when it ends.
    fn perfect(plan: Plan) -> Vec<Sample> {
        let (a, b) = (plan.at_s, plan.at_s + plan.for_s);
        (0..RATE as u64 * plan.secs)
            .map(|i| {
                let due = i as f64 / RATE as f64;
                let sent = if due >= a && due < b { b } else { due };
                Sample {
                    sent,
                    first_byte: 1e-4,
                    latency: sent + 1e-4 - due,
                }
            })
            .collect()
    }

    #[test]
    fn a_perfect_run_is_reported_charted_and_saved() {
        let samples = perfect(PLAN);
        let oha = Percentiles::of(samples.iter().map(|s| s.latency));
        assert!(
            (oha.p99 - Expected::of(PLAN).corrected_p99_ms).abs() < 2.0,
            "{oha:?}"
        );
        let b = bins(&samples, BIN_S);
        assert_eq!(b.len(), 150);
        let peak = b.iter().find(|(t, _)| (*t - 5.05).abs() < 1e-9).unwrap();
        assert!((peak.1 - 1400.0).abs() < 1.0, "{b:?}");
        let measured = |stall| Row {
            stall,
            corrected: true,
            measured: Ok(Measured {
                oha,
                slowed: 1400,
                in_stall: 1400,
                window: (5.0, 6.4),
                truth: parse_truth(TRUTH, METRICS),
                csv: "x.csv".into(),
                samples: samples.clone(),
            }),
        };
        let rows = [
            measured(Stall::Pause),
            Row {
                stall: Stall::Stop,
                corrected: false,
                measured: Err(anyhow::anyhow!("SIGSTOP refused")),
            },
        ];
        let run = RunInfo {
            server_cpus: "1",
            client_cpus: "0",
            duration: 1,
            rounds: 1,
            quick: false,
            idle_conns: 0,
        };
        let text = render(&run, PLAN, &rows);
        assert!(text.contains("pauses: 1, 1400 ms in all"), "{text}");
        assert!(text.contains("not measured: SIGSTOP refused"), "{text}");
        assert!(text.contains("corrected p99 ≈ 1250 ms"), "{text}");
        let doc = to_json(&run, PLAN, Path::new("statico"), &rows);
        assert_eq!(doc["runs"][0]["measured"]["truth"]["held_over_16ms"], 10);
        assert_eq!(doc["runs"][1]["measured"]["error"], "SIGSTOP refused");
        let svg = std::env::temp_dir().join(format!("xtask-pause-{}.svg", std::process::id()));
        line_chart(&svg, "s", &panels(&rows)).unwrap();
        let drawn = std::fs::read_to_string(&svg).unwrap();
        let _ = std::fs::remove_file(&svg);
        assert!(drawn.contains("oha corrected: slowest per 100 ms") && drawn.contains("--pause"));
    }
}
