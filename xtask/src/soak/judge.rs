//! The soak's pure parts: the swap schedule, what a client saw ([`Counts`]), the
//! ground truth summed over generations, and the verdicts (flatness, errors against the truth, the
//! timeouts seen by the hostile clients). No sockets or processes here, so all of it is unit-tested.

use std::collections::BTreeMap;

use serde_json::Value;

/// One sample of statico, every [`SAMPLE_EVERY_S`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the clients started.
    pub t_s: f64,
    pub rss_kib: u64,
    /// The anonymous part of the RSS (heap and stacks, not mapped files), KiB.
    pub rss_anon_kib: u64,
    pub fds: u64,
    /// utime + stime so far, in clock ticks.
    pub cpu_ticks: u64,
}

pub const SAMPLE_EVERY_S: f64 = 10.0;

/// Connections statico holds open per its `/metrics` (accepted − closed, over workers): the
/// descriptor count of the io_uring runtime, whose connections are direct descriptors that
/// /proc/PID/fd does not list.
pub fn open_connections(metrics: &str) -> Option<i64> {
    let sum = |name: &str| -> Option<i64> {
        let values = metrics
            .lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .map(|l| l.split_whitespace().last()?.parse::<f64>().ok());
        values.sum::<Option<f64>>().map(|v| v as i64)
    };
    Some(sum("statico_conns_accepted_total")? - sum("statico_conns_closed_total")?)
}

/// A change of the routes table in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swap {
    /// `kill -HUP`: the flags and `--routes FILE` again.
    Sighup,
    /// `PUT /routes` on the control API, alternating two tables.
    Put,
}

/// When the swaps fall in a run of `total_s` seconds: SIGHUP every 30 s, `PUT /routes` every 60 s
/// from 45 s (so the two never coincide), none in the last 5 s.
pub fn swap_schedule(total_s: u64) -> Vec<(u64, Swap)> {
    let sighups = (30..).step_by(30).map(|t| (t, Swap::Sighup));
    let puts = (45..).step_by(60).map(|t| (t, Swap::Put));
    let mut all: Vec<(u64, Swap)> = sighups
        .take_while(|(t, _)| t + 5 <= total_s)
        .chain(puts.take_while(|(t, _)| t + 5 <= total_s))
        .collect();
    all.sort_by_key(|(t, _)| *t);
    all
}

/// Seconds from `now_s` to the next swap, if any; a swap due less than 2 s ago still counts (negative),
/// since it may not have been made yet: a tool must not start a chunk past it.
pub fn next_swap_in(schedule: &[(u64, Swap)], now_s: f64) -> Option<f64> {
    schedule
        .iter()
        .map(|(t, _)| *t as f64 - now_s)
        .find(|d| *d >= -2.0)
}

/// What one client saw on one route: answers, and each way an answer failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// 2xx answers, whole.
    pub ok: u64,
    /// Whole answers with another status.
    pub status: u64,
    /// The connection reset before any byte of the answer.
    pub reset: u64,
    /// The connection closed (FIN) before any byte of the answer.
    pub close: u64,
    /// Part of the answer, then the connection ended.
    pub truncate: u64,
    /// No answer within the client's timeout.
    pub timeout: u64,
    /// Any other failure (a tool's error message, a bad answer, a refused connection).
    pub other: u64,
    /// Pipelined requests behind a failed one, never answered (not failures of their own).
    pub unanswered: u64,
}

impl Counts {
    pub fn errors(&self) -> u64 {
        self.reset + self.close + self.truncate + self.timeout + self.other
    }

    pub fn add(&mut self, o: &Counts) {
        self.ok += o.ok;
        self.status += o.status;
        self.reset += o.reset;
        self.close += o.close;
        self.truncate += o.truncate;
        self.timeout += o.timeout;
        self.other += o.other;
        self.unanswered += o.unanswered;
    }
}

/// Outcome counts per route, summed over the generations read.
pub type Truth = BTreeMap<String, BTreeMap<String, u64>>;

/// Adds one ground-truth document's route outcomes (every phase of a route under its path) to `acc`.
pub fn add_truth(acc: &mut Truth, doc: &Value) {
    for entry in doc["routes"].as_array().into_iter().flatten() {
        let Some(route) = entry["route"].as_str() else {
            continue;
        };
        let outcomes = acc.entry(route.to_string()).or_default();
        for (outcome, n) in entry["outcomes"].as_object().into_iter().flatten() {
            *outcomes.entry(outcome.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
}

/// What the truth allows on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// Faults injected: client failures at most the truth's reset + close + truncate, no other status.
    Fault,
    /// A pool: no failure; other statuses (503, shed) at most the truth's `shed`.
    Pool,
    /// No fault: no failure, no other status.
    Clean,
}

/// Faults injected on a route per the truth: reset, close, truncate and stall.
pub fn injected(truth: &Truth, route: &str) -> u64 {
    let o = truth.get(route);
    ["reset", "close", "truncate", "stall"]
        .iter()
        .map(|k| o.and_then(|o| o.get(*k)).copied().unwrap_or(0))
        .sum()
}

/// `None` if what the clients saw on `route` (summed over clients) is what the truth allows, else why not.
pub fn judge_route(kind: RouteKind, route: &str, seen: &Counts, truth: &Truth) -> Option<String> {
    let errors = seen.errors();
    let shed = truth
        .get(route)
        .and_then(|o| o.get("shed"))
        .copied()
        .unwrap_or(0);
    match kind {
        RouteKind::Fault if errors > injected(truth, route) => Some(format!(
            "{route}: {errors} client failures, more than the {} faults the ground truth injected",
            injected(truth, route)
        )),
        RouteKind::Pool if seen.status > shed => Some(format!(
            "{route}: {} answers not 2xx, more than the {shed} the pool shed",
            seen.status
        )),
        RouteKind::Fault | RouteKind::Clean if seen.status > 0 => {
            Some(format!("{route}: {} answers not 2xx", seen.status))
        }
        RouteKind::Pool | RouteKind::Clean if errors > 0 => Some(format!(
            "{route}: {errors} client failures on a route without faults ({seen:?})"
        )),
        _ => None,
    }
}

/// A flatness verdict: the largest value of the last third of the run against the largest of the
/// reference window (from 60 s to 120 s, or to the last third if that starts earlier).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flatness {
    pub reference_max: u64,
    pub last_max: u64,
    /// The most the last third may reach: `reference_max × (1 + frac) + abs`.
    pub bound: u64,
}

impl Flatness {
    pub fn ok(&self) -> bool {
        self.last_max <= self.bound
    }
}

/// Judges `values` (time in s, value) of a run of `total_s` seconds; `None` if a window has no sample.
pub fn flatness(values: &[(f64, u64)], total_s: f64, frac: f64, abs: u64) -> Option<Flatness> {
    let last_start = total_s * 2.0 / 3.0;
    let reference_end = last_start.min(120.0);
    let max_in = |lo: f64, hi: f64| {
        values
            .iter()
            .filter(|(t, _)| *t >= lo && *t < hi)
            .map(|(_, v)| *v)
            .max()
    };
    let reference_max = max_in(60.0, reference_end)?;
    let last_max = max_in(last_start, f64::INFINITY)?;
    let bound = (reference_max as f64 * (1.0 + frac)) as u64 + abs;
    Some(Flatness {
        reference_max,
        last_max,
        bound,
    })
}

/// When the hostile clients saw their connections end, per kind, in seconds (`None`: still open
/// at the client's limit), against `[lo, hi]`: the failures, one line each.
pub fn judge_closes(what: &str, closes: &[Option<f64>], lo: f64, hi: f64) -> Vec<String> {
    if closes.is_empty() {
        return vec![format!("{what}: no connection ran its course")];
    }
    let open = closes.iter().filter(|c| c.is_none()).count();
    let out: Vec<f64> = closes
        .iter()
        .flatten()
        .copied()
        .filter(|s| *s < lo || *s > hi)
        .collect();
    let mut failures = Vec::new();
    if open > 0 {
        failures.push(format!("{what}: {open} of {} never closed", closes.len()));
    }
    if !out.is_empty() {
        failures.push(format!(
            "{what}: {} of {} closed outside {lo}–{hi} s: {out:.1?}",
            out.len(),
            closes.len()
        ));
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn open_connections_are_accepted_less_closed() {
        let m = "# TYPE statico_conns_accepted_total counter\n\
            statico_conns_accepted_total{worker=\"0\"} 10\n\
            statico_conns_accepted_total{worker=\"1\"} 5\n\
            statico_conns_accepted_totalx 99\n\
            statico_conns_closed_total{worker=\"0\"} 9\n\
            statico_conns_closed_total{worker=\"1\"} 5\n";
        assert_eq!(open_connections(m), Some(1));
    }

    #[test]
    fn swaps_every_30_and_60_seconds_never_together_nor_at_the_end() {
        let s = swap_schedule(120);
        assert_eq!(
            s,
            vec![
                (30, Swap::Sighup),
                (45, Swap::Put),
                (60, Swap::Sighup),
                (90, Swap::Sighup),
                (105, Swap::Put)
            ]
        );
        assert_eq!(swap_schedule(600).len(), 19 + 10);
        assert_eq!(next_swap_in(&s, 31.0), Some(-1.0));
        assert_eq!(next_swap_in(&s, 33.0), Some(12.0));
        assert_eq!(next_swap_in(&s, 95.0), Some(10.0));
        assert_eq!(next_swap_in(&s, 106.0), Some(-1.0));
        assert_eq!(next_swap_in(&s, 107.5), None);
    }

    #[test]
    fn truth_sums_over_generations() {
        let gen = |reset: u64| {
            json!({"generation": 1, "routes": [
                {"route": "/fault", "phase": "base", "outcomes": {"200": 97, "reset": reset, "close": 1}},
                {"route": "/pool", "phase": "base", "outcomes": {"200": 10, "shed": 2}}]})
        };
        let mut truth = Truth::new();
        add_truth(&mut truth, &gen(2));
        add_truth(&mut truth, &gen(3));
        assert_eq!(truth["/fault"]["200"], 194);
        assert_eq!(injected(&truth, "/fault"), 7);
        assert_eq!(injected(&truth, "/nothing"), 0);
        assert_eq!(truth["/pool"]["shed"], 4);
    }

    #[test]
    fn errors_are_held_against_what_was_injected() {
        let mut truth = Truth::new();
        add_truth(
            &mut truth,
            &json!({"routes": [{"route": "/fault", "outcomes": {"reset": 2, "truncate": 1}},
                               {"route": "/pool", "outcomes": {"shed": 1}}]}),
        );
        let seen = |reset, status| Counts {
            ok: 100,
            reset,
            status,
            ..Counts::default()
        };
        assert_eq!(
            judge_route(RouteKind::Fault, "/fault", &seen(3, 0), &truth),
            None
        );
        assert!(judge_route(RouteKind::Fault, "/fault", &seen(4, 0), &truth).is_some());
        assert!(judge_route(RouteKind::Fault, "/fault", &seen(0, 1), &truth).is_some());
        assert_eq!(
            judge_route(RouteKind::Pool, "/pool", &seen(0, 1), &truth),
            None
        );
        assert!(judge_route(RouteKind::Pool, "/pool", &seen(0, 2), &truth).is_some());
        assert!(judge_route(RouteKind::Pool, "/pool", &seen(1, 0), &truth).is_some());
        assert!(judge_route(RouteKind::Clean, "/", &seen(1, 0), &truth).is_some());
        assert_eq!(
            judge_route(RouteKind::Clean, "/", &seen(0, 0), &truth),
            None
        );
    }

    #[test]
    fn flat_means_the_last_third_within_the_second_minute_plus_slack() {
        // Two minutes: reference 60–80 s, last third from 80 s.
        let rss = |last: u64| vec![(0.0, 5_000), (60.0, 20_000), (70.0, 21_000), (110.0, last)];
        let f = flatness(&rss(31_292), 120.0, 0.10, 8192).unwrap();
        assert_eq!((f.reference_max, f.bound), (21_000, 31_292));
        assert!(f.ok());
        assert!(!flatness(&rss(31_293), 120.0, 0.10, 8192).unwrap().ok());
        // Ten minutes: the reference is the second minute only.
        let long = [(65.0, 100), (130.0, 1_000), (500.0, 116)];
        let f = flatness(&long, 600.0, 0.0, 16).unwrap();
        assert_eq!((f.reference_max, f.last_max), (100, 116));
        assert!(f.ok());
        assert_eq!(flatness(&[(10.0, 1)], 120.0, 0.1, 1), None);
    }

    #[test]
    fn closes_outside_their_bounds_or_never_are_named() {
        assert!(judge_closes("slowloris", &[Some(3.1), Some(4.0)], 2.5, 6.0).is_empty());
        let f = judge_closes("slowloris", &[Some(3.1), None, Some(9.0)], 2.5, 6.0);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("1 of 3 never closed"));
        assert_eq!(judge_closes("stall", &[], 1.0, 2.0).len(), 1);
    }
}
