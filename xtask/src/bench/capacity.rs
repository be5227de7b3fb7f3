//! `cargo xtask bench --capacity`: does a statico pool behave like the queue it stands for?
//!
//! statico serves [`ROUTE`] — a pool of [`SERVERS`] servers whose service time is exponential with
//! mean [`MEAN_SERVICE_MS`], so a capacity of C/E[S] = 800 requests/s — and oha drives it open loop at
//! fixed rates from 10% to 150% of that (`-q`, `--latency-correction`, enough connections never to hold
//! a request back), a fresh statico per rate so that each point's ground truth is its own. Per point:
//! throughput and client latency (oha), statico's queue wait and service time (`/ground-truth.json`),
//! server CPU; beside them the prediction of [`queueing`]: the measurement is held to a simulation of
//! this very run (oha's evenly paced arrivals, 8 FIFO servers, the run's length from an empty queue,
//! oha's deadline), with M/M/c (Erlang C) shown as the Poisson reference. The knee — where the mean
//! wait reaches the mean service time — is found on both and compared.
//!
//! The queue is unbounded: above capacity it grows through the run, the
//! throughput caps at 800/s and the latency climbs with the run's length, as in front of any saturated
//! backend — and the simulation of a run of the same length predicts exactly that.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::measure::{oha_at_rate, server_cpu_us};
use super::queueing::{self, Arrivals, Mmc, Model, Prediction, Summary};
use super::report::RunInfo;
use crate::tools::chart::{line_chart, Line, LinePanel};
use crate::tools::net::{free_port, http_get, wait_port};
use crate::tools::oha::OhaRun;
use crate::tools::procfs::{machine, run_queue_ns};
use crate::tools::server::{start_statico, statico_bin};

/// The pool's servers, and their mean service time.
const SERVERS: usize = 8;
const MEAN_SERVICE_MS: f64 = 10.0;
/// statico's route: a pool of its own (named after it), no queue limit.
const ROUTE: &str = "/work capacity=8 delay=exp:10ms";
const PATH: &str = "/work";
/// Offered loads, in % of capacity.
const LOADS: [u32; 11] = [10, 25, 50, 70, 80, 90, 95, 100, 110, 125, 150];
const QUICK_LOADS: [u32; 7] = [10, 50, 80, 90, 95, 100, 150];
/// Seconds of load per point (a `--quick` run uses its round's duration).
const SECONDS: u64 = 10;
/// Simulated runs per point, and their seed.
const RUNS: usize = 100;
const SEED: u64 = 1;
/// oha paces request i at i/rate on tokio's timer, which rounds each due time up to the millisecond.
const GRID_S: f64 = 0.001;
/// The share of single simulated runs whose knee the agreement interval holds.
const KNEE_COVERAGE: f64 = 0.95;

/// Requests a second the pool can serve: C / E[S].
fn capacity() -> f64 {
    SERVERS as f64 * 1e3 / MEAN_SERVICE_MS
}

/// statico's ground truth for [`PATH`] and its pool, in seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolTruth {
    pub count: u64,
    pub outcomes: Vec<(String, u64)>,
    pub wait: Summary,
    pub drawn: Summary,
    pub held: Summary,
    /// |held − (wait + drawn)|: how late statico told each answer against its schedule.
    pub off: Summary,
    pub served: u64,
    pub shed: u64,
    pub in_service_max: u64,
    pub queued_max: u64,
}

/// What one point measured.
struct Measured {
    oha: OhaRun,
    /// 200 answers a second of the run.
    achieved: f64,
    cpu_us_per_req: f64,
    /// statico's threads' time runnable but kept off the CPU by other work, in ms a second of the run.
    starved_ms_per_s: f64,
    truth: Result<PoolTruth>,
}

/// One offered load: the model's prediction and, when statico has pools, the measurement.
struct Point {
    load: u32,
    rate: u32,
    conns: u32,
    model: Prediction,
    mmc: Option<Mmc>,
    measured: Option<Result<Measured>>,
}

/// Runs the mode; writes `report.txt`, `results.json` and `chart.svg` into `dir`; returns the report.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    let secs = if run.quick { run.duration } else { SECONDS };
    let loads: &[u32] = if run.quick { &QUICK_LOADS } else { &LOADS };
    let bin = statico_bin(root);
    let pools = has_pools(&bin);
    eprintln!(
        "bench: capacity: simulating {RUNS} runs of {secs} s at {} loads",
        loads.len()
    );
    let mut points: Vec<Point> = loads.iter().map(|l| predicted(*l, secs)).collect();
    let mut realtime = false;
    if pools {
        realtime = super::measure::raised(|| {
            for p in &mut points {
                p.measured = Some(measure_point(root, run, p, secs));
            }
        });
    } else {
        eprintln!("bench: {} has no --pool: the model only", bin.display());
    }
    let knees = Knees::of(&points);
    let mut text = render(run, secs, pools, &points, &knees);
    if pools {
        text.insert_str(0, priority_line(realtime));
    }
    std::fs::write(dir.join("report.txt"), &text)?;
    let doc = to_json(run, secs, (&bin, realtime), &points, &knees);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    line_chart(
        &dir.join("chart.svg"),
        "offered load, % of capacity",
        &panels(&points, &knees),
    )?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(text)
}

/// The report's first line: at what priority statico and oha ran.
fn priority_line(realtime: bool) -> &'static str {
    if realtime {
        "priority: statico and oha at SCHED_FIFO 1 (chrt), so that other work on the machine does not hold\n\
         them off their CPUs (see `starved`)\n"
    } else {
        "priority: normal (chrt -f was refused): other work on the machine may hold statico and oha off\n\
         their CPUs (see `starved`)\n"
    }
}

/// Whether the statico at `bin` has `--pool` (its `--help` lists it).
fn has_pools(bin: &Path) -> bool {
    Command::new(bin).arg("--help").output().is_ok_and(|o| {
        let help = String::from_utf8_lossy(&o.stdout);
        help.split(|c: char| c.is_whitespace() || c == ',' || c == '=')
            .any(|word| word == "--pool")
    })
}

/// The model of `load` % for `secs`, and the connections oha needs for it.
fn predicted(load: u32, secs: u64) -> Point {
    let rate = (capacity() * load as f64 / 100.0).round();
    let model = Model {
        servers: SERVERS,
        mean_service: MEAN_SERVICE_MS / 1e3,
        rate,
        seconds: secs as f64,
        arrivals: Arrivals::Even { grid: GRID_S },
    };
    let prediction = queueing::predict(&model, RUNS, SEED + load as u64);
    Point {
        load,
        rate: rate as u32,
        conns: conns_for(prediction.max_in_flight),
        mmc: Mmc::new(SERVERS, rate, 1e3 / MEAN_SERVICE_MS),
        model: prediction,
        measured: None,
    }
}

/// Connections for an open loop: half as many again as the most requests the model ever has in
/// flight (each HTTP/1.1 connection carries one; at capacity a run's queue strays far), and 64 more.
fn conns_for(max_in_flight: usize) -> u32 {
    (max_in_flight as f64 * 1.5).ceil() as u32 + 64
}

/// Whether statico had as many requests as oha had connections: oha then held requests back (closed
/// loop at the top), and the point is not open loop.
fn exhausted(t: &PoolTruth, conns: u32) -> bool {
    t.queued_max + t.in_service_max >= conns as u64
}

/// statico's flags for one point: its seed is the load, so that each point draws its own service
/// times (as each simulated point does), repeatably.
fn statico_flags(metrics: &str, load: u32) -> Vec<String> {
    let seed = load.to_string();
    [
        "-t",
        "1",
        "--route",
        ROUTE,
        "--metrics",
        metrics,
        "--seed",
        &seed,
    ]
    .map(String::from)
    .into()
}

/// One point against a fresh statico: oha at the point's rate, the server's CPU meanwhile, then its
/// ground truth.
fn measure_point(root: &Path, run: &RunInfo, p: &Point, secs: u64) -> Result<Measured> {
    let metrics_port = free_port()?;
    let flags = statico_flags(&format!("127.0.0.1:{metrics_port}"), p.load);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let s = start_statico(root, "statico", Some(run.server_cpus), &flags)?;
    wait_port(metrics_port)?;
    let url = format!("http://127.0.0.1:{}{PATH}", s.port);
    eprintln!(
        "bench: capacity {:>3}%: oha -q {} -c {} for {secs} s",
        p.load, p.rate, p.conns
    );
    let queued = run_queue_ns(s.pid())?;
    let (oha, cpu_us) = server_cpu_us(s.pid(), || {
        oha_at_rate(run.client_cpus, &url, p.rate, p.conns, secs)
    })?;
    let starved_ns = run_queue_ns(s.pid())?.saturating_sub(queued);
    // The requests oha left behind at its deadline leave the queue as their connections close.
    std::thread::sleep(Duration::from_millis(300));
    let truth = http_get(metrics_port, "/ground-truth.json").and_then(|b| parse_truth(&b));
    if let Ok(t) = &truth {
        eprintln!(
            "  achieved {:.0}/s, client p50 {:.2} p99 {:.2} ms, wait mean {:.2} p99 {:.2} ms",
            oha.ok as f64 / secs as f64,
            oha.p50_ms,
            oha.p99_ms,
            t.wait.mean * 1e3,
            t.wait.p99 * 1e3
        );
    }
    Ok(Measured {
        achieved: oha.ok as f64 / secs as f64,
        cpu_us_per_req: cpu_us / oha.ok.max(1) as f64,
        starved_ms_per_s: starved_ns as f64 / 1e6 / secs as f64,
        oha,
        truth,
    })
}

/// `/ground-truth.json`'s route [`PATH`] and its pool (named after it); µs turned into seconds.
pub fn parse_truth(json: &str) -> Result<PoolTruth> {
    let doc: Value = serde_json::from_str(json).context("statico's /ground-truth.json")?;
    let named = |list: &str, key: &str| {
        doc[list]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r[key] == PATH)
            .with_context(|| format!("no {PATH} in the ground truth's {list}: {json}"))
    };
    let (route, pool) = (named("routes", "route")?, named("pools", "name")?);
    let s = |v: &Value| {
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0) / 1e6;
        Summary {
            p50: f("p50"),
            p99: f("p99"),
            mean: f("mean"),
        }
    };
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    Ok(PoolTruth {
        count: n(&route["count"]),
        outcomes: route["outcomes"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), n(v)))
            .collect(),
        wait: s(&route["wait_us"]),
        drawn: s(&route["drawn_us"]),
        held: s(&route["held_us"]),
        off: s(&route["off_us"]),
        served: n(&pool["served"]),
        shed: n(&pool["shed"]),
        in_service_max: n(&pool["in_service_max"]),
        queued_max: n(&pool["queued_max"]),
    })
}

/// A point's measurement, if it was made and statico told its ground truth.
fn truth_of(p: &Point) -> Option<(&Measured, &PoolTruth)> {
    match &p.measured {
        Some(Ok(m)) => m.truth.as_ref().ok().map(|t| (m, t)),
        _ => None,
    }
}

/// Where one curve turns up, measured and modelled, on the same loads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Knee {
    /// The figure and its threshold (s).
    pub what: &'static str,
    pub threshold: f64,
    pub measured: Option<f64>,
    pub model: Option<f64>,
    /// A single simulated run's knee: the low end of its central [`KNEE_COVERAGE`], its median, the
    /// high end.
    pub single_run: (f64, f64, f64),
}

impl Knee {
    /// `per_run[i]` holds each simulated run's figure at load i; `model` and `measured` one per load
    /// (`None` where a load was not measured: then there is no measured knee).
    fn new(
        what: &'static str,
        threshold: f64,
        loads: &[f64],
        model: &[f64],
        measured: Option<Vec<f64>>,
        per_run: &[Vec<f64>],
    ) -> Knee {
        let runs = queueing::run_knees(loads, per_run, threshold);
        let tail = (1.0 - KNEE_COVERAGE) / 2.0;
        Knee {
            what,
            threshold,
            measured: measured.and_then(|m| queueing::knee(loads, &m, threshold)),
            model: queueing::knee(loads, model, threshold),
            single_run: (
                queueing::quantile(&runs, tail),
                queueing::quantile(&runs, 0.5),
                queueing::quantile(&runs, 1.0 - tail),
            ),
        }
    }

    /// Whether the measured knee lies where a single run of the model puts it.
    pub fn agrees(&self) -> Option<bool> {
        let m = self.measured?;
        self.model?;
        Some(m >= self.single_run.0 && m <= self.single_run.2)
    }
}

/// The knees the report states: statico's mean wait reaching E[S], the client's mean latency
/// reaching 2·E[S] (the same event seen from outside), and M/M/c's (exact, steady state).
struct Knees {
    wait: Knee,
    client: Knee,
    mmc: f64,
}

impl Knees {
    fn of(points: &[Point]) -> Knees {
        let loads: Vec<f64> = points.iter().map(|p| p.load as f64).collect();
        let es = MEAN_SERVICE_MS / 1e3;
        let all = |f: &dyn Fn(&Measured, &PoolTruth) -> f64| -> Option<Vec<f64>> {
            points
                .iter()
                .map(|p| truth_of(p).map(|(o, t)| f(o, t)))
                .collect()
        };
        let model =
            |f: fn(&Prediction) -> f64| points.iter().map(|p| f(&p.model)).collect::<Vec<_>>();
        let runs = |f: fn(&Prediction) -> &Vec<f64>| {
            points
                .iter()
                .map(|p| f(&p.model).clone())
                .collect::<Vec<_>>()
        };
        let wait = Knee::new(
            "statico's mean queue wait",
            es,
            &loads,
            &model(|m| m.wait.mean),
            all(&|_, t| t.wait.mean),
            &runs(|m| &m.run_mean_wait),
        );
        let client = Knee::new(
            "oha's mean latency",
            2.0 * es,
            &loads,
            &model(|m| m.sojourn.mean),
            all(&|m, _| m.oha.mean_ms / 1e3),
            &runs(|m| &m.run_mean_sojourn),
        );
        let mmc = 100.0 * queueing::mmc_knee(SERVERS, 1.0 / es, es);
        Knees { wait, client, mmc }
    }
}

/// What was run and what the model is, above the tables.
fn heading(run: &RunInfo, secs: u64, pools: bool) -> String {
    let mut s = format!(
        "capacity: statico --route '{ROUTE}' (one worker on CPU {}, --seed LOAD%), a fresh statico per load;\n\
         oha -q RATE -c CONNS --latency-correction for {secs} s on CPU {}, CONNS 1.5 times the most requests\n\
         the model has in flight, plus 64 (so oha never holds one back: open loop). Capacity C/E[S] = {SERVERS} / {MEAN_SERVICE_MS} ms = {:.0} req/s.\n\
         The queue is unbounded: above capacity it grows all run long, the throughput caps\n\
         at capacity and the latency grows with the run's length, as before any saturated backend.\n\
         model (the measurement is held to it): oha's arrivals (request i due at i/rate, rounded up to the ms\n\
         by tokio's timer) into {SERVERS} FIFO servers with exponential service of mean {MEAN_SERVICE_MS} ms, from an empty queue\n\
         for the run's {secs} s, answers after oha's deadline not counted; {RUNS} seeded runs pooled. That is D/M/c\n\
         (GI/M/c with even arrivals), run for as long as the measurement. M/M/c (Erlang C: Poisson arrivals,\n\
         steady state, none at or above capacity) is the reference; oha does not send Poisson arrivals,\n\
         and even ones queue less.\n",
        run.server_cpus,
        run.client_cpus,
        capacity()
    );
    if !pools {
        s.push_str(
            "\nNOT MEASURED: this statico has no --pool (build one with pools); the model alone:\n",
        );
    }
    s
}

/// The report: heading, the measured table, the model's, and the knees.
fn render(run: &RunInfo, secs: u64, pools: bool, points: &[Point], knees: &Knees) -> String {
    let mut s = heading(run, secs, pools);
    if pools {
        s.push_str(&measured_table(points));
    }
    s.push_str(&model_table(points));
    s.push_str(&knee_lines(knees, points, secs));
    s
}

/// Seconds as ms, for the tables.
fn ms(s: f64) -> f64 {
    s * 1e3
}

fn measured_table(points: &[Point]) -> String {
    let mut s = format!(
        "\n{:<34}{:>26}  {:>26}  {:>17}\n{:>5} {:>9} {:>10} {:>6}  {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8}  {:>8} {:>8} {:>7} {:>7} {:>8} {:>7}\n",
        "measured", "oha (client) ms", "statico queue wait ms", "statico ms",
        "load", "offered/s", "achieved/s", "conns", "p50", "p99", "mean", "p50", "p99", "mean",
        "service", "late p99", "queued", "CPU µs", "starved", "aborted"
    );
    for p in points {
        let _ = write!(s, "{:>4}% {:>9} ", p.load, p.rate);
        let m = match &p.measured {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                let _ = writeln!(s, "not measured: {e:#}");
                continue;
            }
            None => {
                let _ = writeln!(s, "not measured");
                continue;
            }
        };
        let o = &m.oha;
        let _ = write!(
            s,
            "{:>10.1} {:>6}  {:>8.2} {:>8.2} {:>8.2}  ",
            m.achieved, p.conns, o.p50_ms, o.p99_ms, o.mean_ms
        );
        let _ = match &m.truth {
            Ok(t) => writeln!(
                s,
                "{:>8.2} {:>8.2} {:>8.2}  {:>8.2} {:>8.2} {:>7} {:>7.1} {:>8.1} {:>7}{}",
                ms(t.wait.p50),
                ms(t.wait.p99),
                ms(t.wait.mean),
                ms(t.drawn.mean),
                ms(t.off.p99),
                t.queued_max,
                m.cpu_us_per_req,
                m.starved_ms_per_s,
                o.aborted,
                failures(o)
                    + if exhausted(t, p.conns) {
                        "  <- every connection busy: oha held requests back"
                    } else {
                        ""
                    }
            ),
            Err(e) => writeln!(s, "no ground truth: {e:#}"),
        };
    }
    s.push_str("queue wait: as statico records it, of every request (one still queued at the deadline: until its\nclient left); service: the mean service time drawn (answered requests); late: how far statico's answer\ncame after its schedule (|held − (wait + service)|, the answering worker's wake-up); queued: the pool's\nqueued max; starved: ms a second statico's threads were runnable but kept off their CPU by other\nwork (/proc schedstat); aborted: requests oha still had in flight at its deadline.\n");
    s
}

/// oha's failures, if any, for a table row.
fn failures(o: &OhaRun) -> String {
    if o.failures.is_empty() {
        String::new()
    } else {
        format!("  failures {:?}", o.failures)
    }
}

fn model_table(points: &[Point]) -> String {
    let mut s = format!(
        "\n{:<18}{:>26}  {:>40}  {:>16}  {:>14}   {:>25}\n{:>5} {:>10}  {:>8} {:>8} {:>8}  {:>8} {:>8} {:>8} {:>13}  {:>7} {:>8}  {:>5} {:>8}   {:>7} {:>8} {:>8}\n",
        "model", "client ms", "queue wait ms", "", "D/M/c", "M/M/c steady state",
        "load", "achieved/s", "p50", "p99", "mean", "p50", "p99", "mean", "1 run's mean", "P(wait)", "W|wait",
        "σ", "W|wait", "P(wait)", "wait", "p99"
    );
    for p in points {
        let m = &p.model;
        let _ = write!(
            s,
            "{:>4}% {:>10.1}  {:>8.2} {:>8.2} {:>8.2}  {:>8.2} {:>8.2} {:>8.2} {:>13}  {:>7.3} {:>8.2}  ",
            p.load,
            m.throughput,
            ms(m.sojourn.p50),
            ms(m.sojourn.p99),
            ms(m.sojourn.mean),
            ms(m.wait.p50),
            ms(m.wait.p99),
            ms(m.wait.mean),
            {
                let (lo, hi) = band(&m.run_mean_wait);
                format!("{:.2}-{:.2}", ms(lo), ms(hi))
            },
            m.p_wait,
            ms(m.wait.mean / m.p_wait.max(1e-12)),
        );
        let _ = match dmc_wait(p.rate as f64) {
            Some((sigma, given)) => write!(s, "{sigma:>5.3} {:>8.2}   ", ms(given)),
            None => write!(s, "{:>5} {:>8}   ", "1", "∞"),
        };
        let _ = match &p.mmc {
            Some(q) => writeln!(
                s,
                "{:>7.3} {:>8.2} {:>8.2}",
                q.p_wait(),
                ms(q.mean_wait()),
                ms(q.sojourn_quantile(0.99))
            ),
            None => writeln!(s, "{:>7} {:>8} {:>8}", "1", "∞", "∞"),
        };
    }
    s.push_str(
        "1 run's mean: the central 95% of single simulated runs' mean wait, the scatter of one measured run.\n\
         W|wait: the mean wait of a request that waits; D/M/c's (steady state, exact even arrivals) is\n\
         1/(cμ(1−σ)), σ the root in (0,1) of σ = exp(−cμ(1−σ)/λ). M/M/c: mean wait and client p99.\n",
    );
    s
}

/// The central [`KNEE_COVERAGE`] of single runs' figures.
fn band(runs: &[f64]) -> (f64, f64) {
    let mut v = runs.to_vec();
    v.sort_by(f64::total_cmp);
    let tail = (1.0 - KNEE_COVERAGE) / 2.0;
    (
        queueing::quantile(&v, tail),
        queueing::quantile(&v, 1.0 - tail),
    )
}

/// The loads at which statico's mean wait lies outside a single model run's [`band`], each with how
/// far (s, + above), and how many loads were measured.
fn outside_band(points: &[Point]) -> (Vec<(u32, f64)>, usize) {
    let measured: Vec<(&Point, f64)> = points
        .iter()
        .filter_map(|p| truth_of(p).map(|(_, t)| (p, t.wait.mean)))
        .collect();
    let outside = measured
        .iter()
        .filter_map(|(p, w)| {
            let (lo, hi) = band(&p.model.run_mean_wait);
            let by = if *w > hi { w - hi } else { (w - lo).min(0.0) };
            (by != 0.0).then_some((p.load, by))
        })
        .collect();
    (outside, measured.len())
}

/// D/M/c in steady state at `rate`: σ, and the mean wait of a request that waits, 1/(cμ(1−σ)).
fn dmc_wait(rate: f64) -> Option<(f64, f64)> {
    let mu = 1e3 / MEAN_SERVICE_MS;
    let sigma = queueing::dmc_sigma(SERVERS, rate, mu)?;
    Some((sigma, 1.0 / (SERVERS as f64 * mu * (1.0 - sigma))))
}

/// How a knee reads: "93.2%" or "not reached".
fn pct(k: Option<f64>) -> String {
    k.map_or("not reached".into(), |k| format!("{k:.1}%"))
}

fn knee_lines(knees: &Knees, points: &[Point], secs: u64) -> String {
    let mut s = format!(
        "\nknee (where the curve turns up): the offered load at which the mean queue wait reaches the mean\n\
         service time, {MEAN_SERVICE_MS} ms (the mean latency doubles), interpolated between the loads above (linear in\n\
         load, log in the figure); the model's on the same loads. They agree if the measured knee lies within\n\
         the central {:.0}% of the knees of single simulated {secs} s runs: the scatter one run like this one has.\n\
         (A run's mean wait near capacity is skewed — a few runs queue long — so a typical run's knee lies\n\
         above the knee of the model's runs pooled.)\n",
        KNEE_COVERAGE * 100.0
    );
    for k in [&knees.wait, &knees.client] {
        let verdict = match k.agrees() {
            Some(true) => "agrees",
            Some(false) => "DOES NOT agree",
            None => "not compared",
        };
        let _ = writeln!(
            s,
            "  {} reaches {:.0} ms: measured {}; model {} pooled, a single run's {:.1}% (median), {:.1}-{:.1}%: {verdict}",
            k.what,
            ms(k.threshold),
            pct(k.measured),
            pct(k.model),
            k.single_run.1,
            k.single_run.0,
            k.single_run.2
        );
    }
    let _ = writeln!(
        s,
        "  M/M/c (Poisson arrivals, steady state) puts it at {:.1}%: burstier arrivals queue sooner.",
        knees.mmc
    );
    let (outside, of) = outside_band(points);
    if of > 0 {
        let _ = writeln!(
            s,
            "statico's mean wait lies within one model run's 95% at {} of {of} loads{}",
            of - outside.len(),
            outside
                .iter()
                .map(|(load, by)| format!("; at {load}% it is {:+.3} ms outside", ms(*by)))
                .collect::<String>()
        );
    }
    s
}

/// results.json: how the run was made, the model, every point measured and predicted, the knees.
fn to_json(
    run: &RunInfo,
    secs: u64,
    (bin, realtime): (&Path, bool),
    points: &[Point],
    knees: &Knees,
) -> Value {
    let knee = |k: &Knee| {
        json!({ "figure": k.what, "threshold_ms": ms(k.threshold), "measured_pct": k.measured,
                "model_pct": k.model, "single_run_pct": { "low": k.single_run.0, "median": k.single_run.1, "high": k.single_run.2 },
                "coverage": KNEE_COVERAGE, "agrees": k.agrees() })
    };
    json!({
        "mode": "capacity",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "statico": bin.display().to_string(),
        "statico_flags": statico_flags("127.0.0.1:PORT", 0).join(" ").replace("--seed 0", "--seed LOAD"),
        "realtime": realtime,
        "oha": format!("oha --no-tui --output-format json --worker-threads 1 --latency-correction -q RATE -c CONNS -z {secs}s"),
        "seconds": secs,
        "servers": SERVERS,
        "mean_service_ms": MEAN_SERVICE_MS,
        "capacity_rps": capacity(),
        "queue": "unbounded",
        "model": { "arrivals": "even, rounded up to the ms", "grid_s": GRID_S, "runs": RUNS, "seed": SEED },
        "points": points.iter().map(point_json).collect::<Vec<_>>(),
        "knees": { "wait": knee(&knees.wait), "client": knee(&knees.client), "mmc_pct": knees.mmc },
    })
}

/// A summary in ms.
fn summary_json(s: &Summary) -> Value {
    json!({ "p50": ms(s.p50), "p99": ms(s.p99), "mean": ms(s.mean) })
}

fn point_json(p: &Point) -> Value {
    let m = &p.model;
    let (lo, hi) = band(&m.run_mean_wait);
    let model = json!({
        "throughput": m.throughput, "client_ms": summary_json(&m.sojourn),
        "wait_mean_single_run_ms": [ms(lo), ms(hi)],
        "wait_ms": summary_json(&m.wait), "p_wait": m.p_wait, "max_in_flight": m.max_in_flight,
    });
    let mmc = p.mmc.map(|q| json!({
        "p_wait": q.p_wait(), "wait_mean_ms": ms(q.mean_wait()), "wait_p99_ms": ms(q.wait_quantile(0.99)),
        "client_p50_ms": ms(q.sojourn_quantile(0.5)), "client_p99_ms": ms(q.sojourn_quantile(0.99)),
    }));
    let measured = match &p.measured {
        None => Value::Null,
        Some(Err(e)) => json!({ "error": format!("{e:#}") }),
        Some(Ok(x)) => {
            let o = &x.oha;
            let truth = match &x.truth {
                Ok(t) => json!({
                    "count": t.count, "outcomes": t.outcomes, "wait_ms": summary_json(&t.wait),
                    "drawn_ms": summary_json(&t.drawn), "held_ms": summary_json(&t.held),
                    "off_ms": summary_json(&t.off),
                    "served": t.served, "shed": t.shed, "in_service_max": t.in_service_max,
                    "queued_max": t.queued_max,
                }),
                Err(e) => json!({ "error": format!("{e:#}") }),
            };
            json!({
                "achieved": x.achieved, "ok": o.ok, "aborted": o.aborted,
                "failures": o.failures,
                "client_ms": { "p50": o.p50_ms, "p99": o.p99_ms, "mean": o.mean_ms },
                "cpu_us_per_req": x.cpu_us_per_req, "starved_ms_per_s": x.starved_ms_per_s,
                "truth": truth,
            })
        }
    };
    json!({ "load_pct": p.load, "offered": p.rate, "connections": p.conns,
            "measured": measured, "model": model, "mmc": mmc })
}

/// A line over the points, of the measured figure `f` (points without a measurement left out).
fn measured_line(
    points: &[Point],
    name: &str,
    colour: usize,
    f: impl Fn(&Measured, &PoolTruth) -> f64,
) -> Line {
    Line {
        name: name.into(),
        points: points
            .iter()
            .filter_map(|p| truth_of(p).map(|(o, t)| (p.load as f64, f(o, t))))
            .collect(),
        measured: true,
        colour,
    }
}

/// A dashed line of a predicted figure, in ms or req/s as `f` gives it.
fn model_line(
    points: &[Point],
    name: &str,
    colour: usize,
    f: impl Fn(&Point) -> Option<f64>,
) -> Line {
    Line {
        name: name.into(),
        points: points
            .iter()
            .filter_map(|p| f(p).map(|v| (p.load as f64, v)))
            .collect(),
        measured: false,
        colour,
    }
}

/// The chart: latency (log) over offered load, measured and predicted, with the knees; throughput below.
fn panels(points: &[Point], knees: &Knees) -> Vec<LinePanel> {
    let throughput = vec![
        model_line(points, "offered", 16, |p| Some(p.rate as f64)),
        model_line(points, "capacity C/E[S]", 14, |_| Some(capacity())),
        model_line(points, "model throughput", 0, |p| Some(p.model.throughput)),
        measured_line(points, "achieved (oha: 200s a second)", 0, |m, _| {
            m.achieved
        }),
    ];
    let title = format!(
        "pool of {SERVERS}, exp({MEAN_SERVICE_MS} ms) service: latency against offered load (solid: measured, dashed: theory)"
    );
    vec![
        LinePanel {
            title,
            y_label: "ms (log)".into(),
            log_y: true,
            lines: latency_lines(points, knees),
        },
        LinePanel {
            title: "throughput against offered load".into(),
            y_label: "requests/s".into(),
            log_y: false,
            lines: throughput,
        },
    ]
}

/// The latency panel's lines: client and queue wait, measured, modelled and M/M/c's; the knees upright.
fn latency_lines(points: &[Point], knees: &Knees) -> Vec<Line> {
    let mut lines = vec![
        measured_line(points, "client p99 (oha)", 0, |m, _| m.oha.p99_ms),
        measured_line(points, "client p50 (oha)", 1, |m, _| m.oha.p50_ms),
        measured_line(points, "queue wait p99 (statico)", 3, |_, t| ms(t.wait.p99)),
        measured_line(points, "queue wait p50 (statico)", 10, |_, t| {
            ms(t.wait.p50)
        }),
        measured_line(points, "service p99 (statico, drawn)", 4, |_, t| {
            ms(t.drawn.p99)
        }),
        model_line(points, "model client p99", 0, |p| {
            Some(ms(p.model.sojourn.p99))
        }),
        model_line(points, "model client p50", 1, |p| {
            Some(ms(p.model.sojourn.p50))
        }),
        model_line(points, "model queue wait p99", 3, |p| {
            Some(ms(p.model.wait.p99))
        }),
        model_line(points, "M/M/c client p99", 5, |p| {
            p.mmc.map(|q| ms(q.sojourn_quantile(0.99)))
        }),
        model_line(points, "M/M/c queue wait p99", 7, |p| {
            p.mmc.map(|q| ms(q.wait_quantile(0.99)))
        }),
    ];
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    for (name, at, measured) in [
        ("knee measured", knees.wait.measured, true),
        ("knee model", knees.wait.model, false),
    ] {
        if let Some(k) = at {
            let points = vec![(k, 0.1), (k, top)];
            let name = format!("{name} ({k:.1}%)");
            lines.push(Line {
                name,
                points,
                measured,
                colour: 12,
            });
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUTH: &str = r#"{"routes":[{"route":"/work","count":8000,"outcomes":{"200":7990,"gone":10},
        "held_us":{"count":8000,"p50":9000,"p90":30000,"p99":60000,"p99.9":90000,"max":120000,"mean":13000},
        "drawn_us":{"count":8000,"p50":6900,"p90":23000,"p99":46000,"p99.9":69000,"max":99000,"mean":10000},
        "off_us":{"count":8000,"p50":30,"p90":60,"p99":150,"p99.9":300,"max":900,"mean":40},
        "wait_us":{"count":8000,"p50":0,"p90":9000,"p99":25000,"p99.9":40000,"max":70000,"mean":3000}}],
        "pools":[{"name":"/work","capacity":8,"queue":null,"served":7995,"shed":0,"in_service_max":8,"queued_max":41}]}"#;

    #[test]
    fn the_ground_truth_of_the_route_and_its_pool_parses_in_seconds() {
        let t = parse_truth(TRUTH).unwrap();
        assert_eq!((t.count, t.served, t.shed), (8000, 7995, 0));
        assert_eq!((t.in_service_max, t.queued_max), (8, 41));
        assert_eq!(t.outcomes, [("200".into(), 7990), ("gone".into(), 10)]);
        assert_eq!(
            t.wait,
            Summary {
                p50: 0.0,
                p99: 0.025,
                mean: 0.003
            }
        );
        assert!((t.held.mean - t.wait.mean - 0.010).abs() < 1e-12);
        let no_pool = TRUTH.replace(r#""name":"/work""#, r#""name":"/db""#);
        assert!(parse_truth(&no_pool).is_err());
        assert!(parse_truth("nope").is_err());
    }

    #[test]
    fn connections_cover_the_most_in_flight() {
        assert_eq!(conns_for(0), 64);
        assert_eq!(conns_for(4000), 6064);
        let mut t = parse_truth(TRUTH).unwrap();
        assert!(!exhausted(&t, 64));
        t.queued_max = 56;
        assert!(exhausted(&t, 64));
    }

    #[test]
    fn a_knee_agrees_within_the_single_run_scatter() {
        let mut k = Knee {
            what: "w",
            threshold: 0.01,
            measured: Some(94.0),
            model: Some(95.0),
            single_run: (93.5, 95.0, 96.5),
        };
        assert_eq!(k.agrees(), Some(true));
        k.measured = Some(91.0);
        assert_eq!(k.agrees(), Some(false));
        k.measured = None;
        assert_eq!(k.agrees(), None);
    }

    /// A point measured as the model predicts it, with `truth`'s service.
    fn measured_as_modelled(p: &mut Point) {
        let m = &p.model;
        let truth = PoolTruth {
            wait: m.wait,
            held: Summary {
                mean: m.wait.mean + 0.01,
                ..m.sojourn
            },
            ..parse_truth(TRUTH).unwrap()
        };
        let oha = OhaRun {
            ok: m.throughput as u64,
            p50_ms: ms(m.sojourn.p50),
            p99_ms: ms(m.sojourn.p99),
            mean_ms: ms(m.sojourn.mean),
            ..OhaRun::default()
        };
        p.measured = Some(Ok(Measured {
            achieved: m.throughput,
            oha,
            cpu_us_per_req: 5.0,
            starved_ms_per_s: 0.0,
            truth: Ok(truth),
        }));
    }

    #[test]
    fn a_run_measured_as_modelled_agrees_and_is_reported_and_drawn() {
        let mut points: Vec<Point> = QUICK_LOADS.iter().map(|l| predicted(*l, 1)).collect();
        points.iter_mut().for_each(measured_as_modelled);
        let knees = Knees::of(&points);
        assert_eq!(knees.wait.measured, knees.wait.model);
        assert_eq!(knees.wait.agrees(), Some(true), "{:?}", knees.wait);
        assert_eq!(knees.client.agrees(), Some(true), "{:?}", knees.client);
        assert!(knees.mmc > 90.0 && knees.mmc < 92.0, "{}", knees.mmc);
        let run = RunInfo {
            server_cpus: "1",
            client_cpus: "0",
            duration: 1,
            rounds: 1,
            quick: true,
            idle_conns: 0,
        };
        let text = render(&run, 1, true, &points, &knees);
        assert!(
            text.contains("measured") && text.contains(": agrees"),
            "{text}"
        );
        assert_eq!(text.matches(" 150% ").count(), 2, "{text}");
        assert!(text.contains("95% at 7 of 7 loads\n"), "{text}");
        let doc = to_json(&run, 1, (Path::new("statico"), false), &points, &knees);
        assert_eq!(doc["points"].as_array().unwrap().len(), QUICK_LOADS.len());
        assert_eq!(doc["knees"]["wait"]["agrees"], true);
        let svg = std::env::temp_dir().join(format!("xtask-capacity-{}.svg", std::process::id()));
        line_chart(&svg, "load", &panels(&points, &knees)).unwrap();
        let drawn = std::fs::read_to_string(&svg).unwrap();
        let _ = std::fs::remove_file(&svg);
        assert!(drawn.contains("client p99 (oha)") && drawn.contains("M/M/c client p99"));
    }

    #[test]
    fn a_point_not_measured_says_why() {
        let mut points = vec![predicted(50, 1), predicted(150, 1)];
        points[0].measured = Some(Err(anyhow::anyhow!("statico did not start")));
        let knees = Knees::of(&points);
        assert_eq!(knees.wait.measured, None);
        let text = measured_table(&points);
        assert!(
            text.contains("not measured: statico did not start"),
            "{text}"
        );
        assert!(knee_lines(&knees, &points, 1).contains("not compared"));
    }
}
