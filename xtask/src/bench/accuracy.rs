//! The accuracy check of `cargo xtask bench --routes`: does statico hold the delays it is asked for?
//!
//! statico (each runtime, one worker) serves [`ROUTE`], a lognormal delay with p50 10 ms and p99
//! 80 ms, with a fixed `--seed`, while oha drives it at a fixed rate ([`RATE`] requests/s over
//! [`CONNS`] connections, `--latency-correction`, so a late answer does not hide the requests due
//! behind it). Then statico's own ground truth is fetched from its `--metrics` listener
//! (`/ground-truth.json`: per route, the delays it drew and the time it actually held each request)
//! and shown beside what was asked and what oha saw, with whether the ground truth is within
//! [`TOLERANCE`] of the requested p50 and p99, and how far each hold was from its draw
//! (|held − drawn|, whose p99 must be within [`OFF_P99_US`] at [`CONNS`] connections and
//! [`RATE`] requests/s).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::measure::oha_at_rate;
use super::report::RunInfo;
use crate::tools::net::{free_port, http_get, wait_port};
use crate::tools::oha::OhaRun;
use crate::tools::server::start_statico;

/// The route whose delays are checked.
pub const ROUTE: &str = "/echo delay=lognormal:10ms:80ms";
/// Its path, as the ground truth names it.
const PATH: &str = "/echo";
/// The delays [`ROUTE`] asks for: (p50, p99) in ms.
const REQUESTED_MS: (f64, f64) = (10.0, 80.0);
/// How far the ground truth may be from [`REQUESTED_MS`], relative.
const TOLERANCE: f64 = 0.02;
/// oha's fixed rate (requests/s) and connections.
const RATE: u32 = 20_000;
const CONNS: u32 = 1000;
/// The target for |held − drawn| at p99, in µs.
const OFF_P99_US: f64 = 100.0;
/// Seconds of load (a `--quick` run uses its round's duration).
const SECONDS: u64 = 10;

/// The check's part of report.txt, and of results.json.
pub struct Accuracy {
    pub text: String,
    pub json: Value,
}

/// A ground-truth histogram's count and quantiles, in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Quantiles {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// A stream route's part of the ground truth: the events given out, and how late each was handed
/// to the kernel against its due time (`"stream": {"events": N, "late_us": {..}, ..}`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StreamTruth {
    pub events: u64,
    pub late: Quantiles,
}

impl StreamTruth {
    /// As results.json gives it: the events and the lateness's count, p50 and p99.
    pub fn to_json(self) -> Value {
        let late = self.late;
        json!({ "events": self.events,
                "late_us": { "count": late.count, "p50": late.p50_us, "p99": late.p99_us } })
    }
}

/// One route of `/ground-truth.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouteTruth {
    pub route: String,
    pub count: u64,
    /// Answers per status code.
    pub outcomes: Vec<(String, u64)>,
    /// How long statico held each request.
    pub held: Quantiles,
    /// The delays it drew.
    pub drawn: Quantiles,
    /// |held − drawn| per request.
    pub off: Quantiles,
    /// A stream route's events and lateness; `None` for a route that answers whole.
    pub stream: Option<StreamTruth>,
}

/// `/ground-truth.json`: `{"routes":[{"route","count","outcomes":{..},"held_us":{..},"drawn_us":{..}}]}`,
/// a stream route's with `"stream":{"events","late_us":{..}}`.
pub fn parse_truth(json: &str) -> Result<Vec<RouteTruth>> {
    let doc: Value = serde_json::from_str(json).context("statico's /ground-truth.json")?;
    let quantiles = |q: &Value| Quantiles {
        count: q["count"].as_u64().unwrap_or(0),
        p50_us: q["p50"].as_f64().unwrap_or(0.0),
        p99_us: q["p99"].as_f64().unwrap_or(0.0),
    };
    let routes = doc["routes"]
        .as_array()
        .context("no `routes` in the ground truth")?;
    Ok(routes
        .iter()
        .map(|r| RouteTruth {
            route: r["route"].as_str().unwrap_or_default().to_string(),
            count: r["count"].as_u64().unwrap_or(0),
            outcomes: r["outcomes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect(),
            held: quantiles(&r["held_us"]),
            drawn: quantiles(&r["drawn_us"]),
            off: quantiles(&r["off_us"]),
            stream: r["stream"].as_object().map(|_| StreamTruth {
                events: r["stream"]["events"].as_u64().unwrap_or(0),
                late: quantiles(&r["stream"]["late_us"]),
            }),
        })
        .collect())
}

/// How far `measured` is from `requested`, in %, and whether that is within [`TOLERANCE`].
pub fn within(measured: f64, requested: f64) -> (bool, f64) {
    let off = (measured - requested) / requested;
    (off.abs() <= TOLERANCE, off * 100.0)
}

/// Runs the check on each runtime; `flags(runtime, metrics address)` are statico's flags, or `None`
/// when this statico cannot serve the route (then the check is skipped and says so).
pub fn run(
    root: &Path,
    run: &RunInfo,
    flags: impl Fn(&str, &str) -> Option<Vec<String>>,
) -> Result<Accuracy> {
    let secs = if run.quick { run.duration } else { SECONDS };
    let mut text = format!(
        "\naccuracy: statico --route '{ROUTE}' --seed 1, oha -q {RATE} -c {CONNS} --latency-correction for {secs} s\n  {:<17} {:<13} {:>8} {:>9} {:>9}  within {:.0}% of requested\n  {:<17} {:<13} {:>8} {:>9.2} {:>9.2}\n",
        "server", "source", "count", "p50 ms", "p99 ms", TOLERANCE * 100.0,
        "", "requested", "", REQUESTED_MS.0, REQUESTED_MS.1
    );
    let mut runs = Vec::new();
    for runtime in ["tokio", "io-uring"] {
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let Some(flags) = flags(runtime, &metrics) else {
            text.push_str("  skipped: this statico has no --route (and so no ground truth)\n");
            return Ok(Accuracy {
                text,
                json: Value::Null,
            });
        };
        let name = format!("statico-{runtime}");
        let (lines, doc) = one_runtime(root, &name, run, &flags, secs);
        text.push_str(&lines);
        runs.push(doc);
    }
    let json = json!({ "route": ROUTE, "requested_ms": { "p50": REQUESTED_MS.0, "p99": REQUESTED_MS.1 },
        "tolerance": TOLERANCE, "rate": RATE, "connections": CONNS, "seconds": secs, "runs": runs });
    Ok(Accuracy { text, json })
}

/// One statico's lines and results.json entry. A failure is told there, not returned: the
/// scenarios' tables stand without it.
fn one_runtime(
    root: &Path,
    name: &str,
    run: &RunInfo,
    flags: &[String],
    secs: u64,
) -> (String, Value) {
    let (oha, truth) = match measure_one(root, name, run, flags, secs) {
        Ok(measured) => measured,
        Err(e) => {
            let text = format!("  {name:<17} not measured: {e:#}\n");
            return (
                text,
                json!({ "server": name, "flags": flags, "error": format!("{e:#}") }),
            );
        }
    };
    let oha_json = json!({ "ok": oha.ok, "p50_ms": oha.p50_ms, "p99_ms": oha.p99_ms, "failures": oha.failures });
    let truth = match truth {
        Ok(truth) => truth,
        Err(e) => {
            let text = format!(
                "{}  {name:<17} no ground truth: {e:#}\n",
                oha_row(name, &oha)
            );
            let doc = json!({ "server": name, "flags": flags, "oha": oha_json, "error": format!("{e:#}") });
            return (text, doc);
        }
    };
    let text = truth_rows(name, &truth) + &oha_row(name, &oha);
    let quantiles = |q: Quantiles| json!({ "count": q.count, "p50": q.p50_us, "p99": q.p99_us });
    let doc = json!({
        "server": name,
        "flags": flags,
        "oha": oha_json,
        "drawn_us": quantiles(truth.drawn),
        "held_us": quantiles(truth.held),
        "off_us": quantiles(truth.off),
        "off_p99_target_us": OFF_P99_US,
        "outcomes": truth.outcomes,
        "within_tolerance": within_all(&truth),
    });
    (text, doc)
}

/// statico with `flags` under oha's fixed rate; what oha saw and statico's ground truth for [`PATH`].
fn measure_one(
    root: &Path,
    name: &str,
    run: &RunInfo,
    flags: &[String],
    secs: u64,
) -> Result<(OhaRun, Result<RouteTruth>)> {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let metrics_port = flags
        .iter()
        .skip_while(|f| **f != "--metrics")
        .nth(1)
        .and_then(|a| a.rsplit(':').next()?.parse::<u16>().ok())
        .context("no --metrics address among statico's flags")?;
    let s = start_statico(root, name, Some(run.server_cpus), &flags)?;
    wait_port(metrics_port)?;
    let url = format!("http://127.0.0.1:{}{PATH}", s.port);
    eprintln!("bench: accuracy of {name}: oha -q {RATE} -c {CONNS} for {secs} s");
    let oha = oha_at_rate(run.client_cpus, &url, RATE, CONNS, secs)?;
    let truth = http_get(metrics_port, "/ground-truth.json").and_then(|body| {
        parse_truth(&body)?
            .into_iter()
            .find(|t| t.route == PATH)
            .with_context(|| format!("no route {PATH} in {name}'s ground truth: {body}"))
    });
    Ok((oha, truth))
}

/// Whether the drawn and the held delays' p50 and p99 are all within [`TOLERANCE`].
fn within_all(t: &RouteTruth) -> bool {
    [t.drawn, t.held].iter().all(|q| {
        within(q.p50_us / 1e3, REQUESTED_MS.0).0 && within(q.p99_us / 1e3, REQUESTED_MS.1).0
    })
}

/// One statico's ground truth: drawn and held, each with its distance from the request.
fn truth_rows(name: &str, t: &RouteTruth) -> String {
    let mut out = String::new();
    for (source, q) in [("drawn", t.drawn), ("held", t.held)] {
        let (p50, p99) = (q.p50_us / 1e3, q.p99_us / 1e3);
        let ((ok50, off50), (ok99, off99)) =
            (within(p50, REQUESTED_MS.0), within(p99, REQUESTED_MS.1));
        let yes = |ok: bool| if ok { "yes" } else { "NO" };
        let _ = writeln!(
            out,
            "  {name:<17} {source:<13} {:>8} {p50:>9.2} {p99:>9.2}  p50 {} ({off50:+.1}%), p99 {} ({off99:+.1}%)",
            q.count,
            yes(ok50),
            yes(ok99)
        );
    }
    let off = t.off;
    let _ = writeln!(
        out,
        "  {name:<17} {:<13} {:>8} {:>9.3} {:>9.3}  p99 {} {OFF_P99_US:.0} µs",
        "|held-drawn|",
        off.count,
        off.p50_us / 1e3,
        off.p99_us / 1e3,
        if off.p99_us <= OFF_P99_US {
            "within"
        } else {
            "NOT within"
        }
    );
    out
}

/// What oha saw of one statico.
fn oha_row(name: &str, oha: &OhaRun) -> String {
    let failures: u64 = oha.failures.iter().map(|f| f.1).sum();
    format!(
        "  {name:<17} {:<13} {:>8} {:>9.2} {:>9.2}  (client view, incl. network and queueing){}\n",
        "oha",
        oha.ok,
        oha.p50_ms,
        oha.p99_ms,
        if failures > 0 {
            format!("; {failures} failed: {:?}", oha.failures)
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ground_truth_parses_per_route() {
        let json = r#"{"routes":[{"route":"/echo","count":20000,"outcomes":{"200":19000,"503":1000},
            "held_us":{"count":20000,"p50":10150,"p90":31000,"p99":80900,"p99.9":150000,"max":400000,"mean":14900},
            "drawn_us":{"count":20000,"p50":10010,"p90":30500,"p99":79500,"p99.9":149000,"max":399000,"mean":14800}}]}"#;
        let routes = parse_truth(json).unwrap();
        assert_eq!(routes.len(), 1);
        let t = &routes[0];
        assert_eq!((t.route.as_str(), t.count), ("/echo", 20000));
        assert_eq!(t.outcomes, [("200".into(), 19000), ("503".into(), 1000)]);
        assert_eq!(
            t.drawn,
            Quantiles {
                count: 20000,
                p50_us: 10010.0,
                p99_us: 79500.0
            }
        );
        assert_eq!(t.held.p99_us, 80900.0);
        assert!(within_all(t));
        assert_eq!(t.stream, None);
        assert!(parse_truth("{}").is_err());
        assert!(parse_truth("nope").is_err());
    }

    #[test]
    fn a_stream_route_has_its_events_and_lateness() {
        let json = r#"{"routes":[{"route":"/sse","count":100,"outcomes":{"200":100},
            "stream":{"events":5000,"first_us":{"count":100,"p50":0,"p99":0},
            "late_us":{"count":5000,"p50":40,"p90":90,"p99":310,"max":900,"mean":52}}}]}"#;
        let t = &parse_truth(json).unwrap()[0];
        let stream = t.stream.unwrap();
        assert_eq!((stream.events, stream.late.count), (5000, 5000));
        assert_eq!((stream.late.p50_us, stream.late.p99_us), (40.0, 310.0));
    }

    #[test]
    fn within_is_relative_to_the_request() {
        assert!(within(10.1, 10.0).0);
        let (ok, off) = within(78.0, 80.0);
        assert!(!ok);
        assert!((off + 2.5).abs() < 1e-9, "{off}");
        assert!(within(81.6, 80.0).0);
        assert!(!within(81.7, 80.0).0);
    }

    #[test]
    fn oha_latency_percentiles_are_read_in_ms() {
        let json = r#"{"summary":{"total":10.0},"statusCodeDistribution":{"200":20000},
            "errorDistribution":{"aborted due to deadline":12},
            "latencyPercentiles":{"p10":0.004,"p50":0.0102,"p99":0.0815}}"#;
        let run = crate::tools::oha::parse(json).unwrap();
        assert_eq!(run.ok, 20000);
        assert!((run.p50_ms - 10.2).abs() < 1e-9 && (run.p99_ms - 81.5).abs() < 1e-9);
        assert!(run.failures.is_empty());
    }
}
