//! The routes' ground truth: what the server really did to each request a `--route` matched, for
//! comparing a load generator's report against.
//!
//! Per route it keeps how many requests had each outcome (a status such as `200` or `503`, or a
//! fault such as `reset`), and HDR histograms: the delay *drawn* from the route's distribution, the
//! time each request was *held* (from when it was answered — its last byte in, or for a pipelined
//! HTTP/1.1 request the end of the answer before it — to its answer queued for the socket), and how far
//! the two were *off* (|held − drawn|, per request: the accuracy of the holds).
//! They count nanoseconds to 3 significant digits over 1 ns .. 1 hour (so a 40 µs hold is as exact
//! as an 80 ms one); values outside saturate. Every recording thread
//! owns one slot per route, each behind its own `Mutex` and on its own cache lines, so a record takes
//! an uncontended lock and a few histogram increments. A slot's histograms are allocated the first
//! time it records (a route a thread never answers costs it one pointer), and the queue-wait
//! histogram only for a pooled route.
//!
//! A pooled route also has a `wait` histogram (how long each request queued for a server; `drawn`
//! is then its service time and `held` wait + service), and the outcomes `gone` (its client left
//! while its answer was held or queued) and `shed`. The pools themselves report through
//! [`PoolGauge`]: served, shed, in service and queued now and at most. Readers — the Prometheus scrape, `/ground-truth.json`, the exit summary —
//! merge a route's slots one lock at a time; each lock is held for two histogram additions (~34k
//! counters each), the only moment a reader can make a recorder wait. A histogram is ~270 KiB (33 792
//! `u64` counters), so the memory is about `3 × recorders × routes × 270 KiB`.
//!
//! Prometheus buckets (`le`, per route, fixed at start-up): `histogram_quantile` interpolates
//! linearly inside a bucket, so to read a 10 ms route's p99 to 1% the buckets over the route's stated
//! delay range (`expected`, widened ×0.5 below and ×2 above) are geometric with a ratio of at most
//! 1.02, rounded to 4 significant digits. Outside it, and for a route without delay, a coarse ladder
//! of 1 µs × 2ᵏ (k = 0..29, up to ~9 minutes; longer goes to `+Inf`). A histogram has at most 400
//! buckets, `+Inf` included: the fine range gets what the ladder leaves (at least 368 steps), and a
//! range too wide for that at 1.02 gets a larger ratio. A lognormal with p50 10 ms and p99 80 ms,
//! stated as its p0.1 .. p99.99 (0.63 .. 278 ms), takes 378 steps at 1.02 and fits; its p99 reads
//! within 0.1%. Bucket counts come from the merged HDR histogram: each recorded value (its highest
//! equivalent, as HDR's own percentiles report) goes into the first bucket at or above it.

use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;
use prometheus::proto::LabelPair;
use serde::{Serialize, Serializer};

use crate::observe::metrics::{encode, label, Family};

/// The histograms' range in nanoseconds, 1 ns .. 1 hour (3 significant digits throughout, so a
/// 40 µs hold is not rounded to a coarse bottom bucket), and the Prometheus buckets' floor, 1 µs.
const LOWEST_NS: u64 = 1;
const FLOOR_NS: u64 = 1_000;
const HIGHEST_NS: u64 = 3_600 * 1_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// The Prometheus buckets over a route's expected range: the largest ratio between neighbours (a
/// range too wide for the budget gets a larger one); and the budget, `+Inf` included.
const FINE_RATIO: f64 = 1.02;
const MAX_BUCKETS: usize = 400;
/// The coarse ladder, 1 µs × 2ᵏ for k below this (2²⁹ µs ≈ 9 minutes).
const COARSE_STEPS: u32 = 30;

/// A route as the truth knows it, given at start-up.
#[derive(Clone, Debug, Default)]
pub struct RouteInfo {
    /// How the route is shown, e.g. `GET /api/*`.
    pub name: String,
    /// The phase it answers in (`base` outside any); none when its table has no phases.
    pub phase: Option<String>,
    /// Every outcome the route can have, e.g. `["200", "503", "reset"]`; a record names one by index.
    pub outcomes: Vec<String>,
    /// The delay range the route states (e.g. its p0.1 .. p99.99), for choosing the Prometheus
    /// buckets; `None` for a route without delay.
    pub expected: Option<(Duration, Duration)>,
    /// Its requests queue in a pool: their wait is recorded.
    pub pooled: bool,
    /// It streams its body as events (`stream=`, `openai=on`): their timing is recorded.
    pub streamed: bool,
    /// Its pool, an index into the pools the truth is given ([`GroundTruth::with_pools`]).
    pub pool: Option<usize>,
    /// An OpenAI-compatible backend's (`openai=on`): the model it names first, the `model_name`
    /// of its vLLM metrics. Its tokens are counted.
    pub model: Option<String>,
    /// An openai route's: the outcome of its first refusal of its own (400, then 404 and 405),
    /// answered before it is scheduled — which vLLM's end-to-end latency does not count.
    pub refusals: Option<usize>,
    /// A gRPC route's or built-in method's: each outcome's `grpc-status` number, for those that are
    /// statuses (the `grpc_status` label); empty for another route.
    pub grpc_status: Vec<Option<u16>>,
}

/// A pool's figures at one moment, as the ground truth and the metrics show them (an entry of the
/// document's `pools`, its fields as named here).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolTruth {
    pub name: String,
    pub capacity: usize,
    /// The most that may wait (`None`: unbounded).
    pub queue: Option<usize>,
    pub served: u64,
    pub shed: u64,
    pub in_service: u64,
    pub queued: u64,
    pub in_service_max: u64,
    pub queued_max: u64,
}

/// Where the ground truth reads a pool's figures (the catalog's pools).
pub trait PoolGauge: Send + Sync {
    fn figures(&self) -> PoolTruth;
}

/// Where the ground truth reads how many of a route's requests are in flight (held or queued): the
/// catalog's load state.
pub trait InFlight: Send + Sync {
    fn in_flight(&self, route: usize) -> u64;
}

/// An openai route's figures for its vLLM metrics ([`GroundTruth::vllm_families`]).
struct Served<'a> {
    model: Vec<LabelPair>,
    tally: &'a Tally,
    stream: &'a StreamTally,
    /// Running, waiting, and the share of the capacity in service.
    load: [f64; 3],
}

/// One route's truth, merged over the recorders (an entry of the document's `routes`: `route`,
/// `phase`, `count`, `outcomes` as an object in their order, `held_us` .. `wait_us`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RouteTruth {
    #[serde(rename = "route")]
    pub name: String,
    #[serde(serialize_with = "phase_or_base")]
    pub phase: Option<String>,
    /// Requests with any outcome (those only counted included).
    pub count: u64,
    /// Each outcome of [`RouteInfo::outcomes`], in that order, with its count.
    #[serde(serialize_with = "in_order")]
    pub outcomes: Vec<(String, u64)>,
    #[serde(rename = "held_us")]
    pub held: Summary,
    #[serde(rename = "drawn_us")]
    pub drawn: Summary,
    /// |held − drawn| per request: the accuracy of the holds.
    #[serde(rename = "off_us")]
    pub off: Summary,
    /// Time queued for a pool's server (empty for a route without a pool).
    #[serde(rename = "wait_us")]
    pub wait: Summary,
    /// A streamed route's events (none for another route).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamTruth>,
}

/// A streamed route's events, merged over the recorders (the document's `stream`: `events`,
/// `left`, `first_us`, `gap_us`, `late_us`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamTruth {
    /// Events given out (their first byte), over every request.
    pub events: u64,
    /// Streams whose client left before their last event (each counted as outcome `gone`, with
    /// the events it got).
    pub left: u64,
    /// The first events' waits as drawn (from the head).
    #[serde(rename = "first_us")]
    pub first: Summary,
    /// The gaps as drawn (between an event and the one before).
    #[serde(rename = "gap_us")]
    pub gap: Summary,
    /// How late each event went, past its due time (the head's plus the waits drawn up to it).
    #[serde(rename = "late_us")]
    pub late: Summary,
    /// An openai route's prompt tokens, over every request it made an answer for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// An openai route's output tokens given out: its streams' events and its whole answers'
    /// tokens (none of a whole answer whose client left before it was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
}

/// A histogram's count and percentiles, in microseconds (all zero when it is empty); in the
/// document `count`, `p50`, `p90`, `p99`, `p99.9`, `max`, `mean`, to the nanosecond.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    #[serde(rename = "p50", serialize_with = "three_decimals")]
    pub p50_us: f64,
    #[serde(rename = "p90", serialize_with = "three_decimals")]
    pub p90_us: f64,
    #[serde(rename = "p99", serialize_with = "three_decimals")]
    pub p99_us: f64,
    #[serde(rename = "p99.9", serialize_with = "three_decimals")]
    pub p999_us: f64,
    #[serde(rename = "max", serialize_with = "three_decimals")]
    pub max_us: f64,
    #[serde(rename = "mean", serialize_with = "three_decimals")]
    pub mean_us: f64,
}

/// `/ground-truth.json`: the routes table's generation, when its counting began, the pauses (when
/// pauses are possible), every route in the order given and every pool.
#[derive(Serialize)]
struct Document {
    generation: u32,
    /// RFC 3339, to the millisecond.
    began: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pauses: Option<PauseTotals>,
    routes: Vec<RouteTruth>,
    pools: Vec<PoolTruth>,
}

#[derive(Serialize)]
struct PauseTotals {
    count: u64,
    total_us: u128,
}

impl Summary {
    fn of(histogram: &Histogram<u64>) -> Summary {
        if histogram.is_empty() {
            return Summary::default();
        }
        let at = |q: f64| histogram.value_at_quantile(q) as f64 / 1_000.0;
        Summary {
            count: histogram.len(),
            p50_us: at(0.5),
            p90_us: at(0.9),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: histogram.max() as f64 / 1_000.0,
            mean_us: histogram.mean() / 1_000.0,
        }
    }
}

/// Keeps a value on cache lines of its own, so neighbouring recorders' slots never share one.
#[repr(align(128))]
struct CacheLinePadded<T>(T);

/// What one recorder has recorded for one route (or, merged, what all have).
struct Tally {
    outcomes: Vec<u64>,
    drawn: Histogram<u64>,
    held: Histogram<u64>,
    /// |held − (wait + drawn)|: how far each hold missed its schedule.
    off: Histogram<u64>,
    /// Queue waits (a pooled route's only).
    wait: Option<Histogram<u64>>,
    /// Events' timing (a streamed route's only).
    stream: Option<Box<StreamTally>>,
}

/// What one recorder has recorded of a streamed route's events.
struct StreamTally {
    events: u64,
    left: u64,
    /// An openai route's prompt tokens, and the tokens of its whole (not streamed) answers.
    prompt_tokens: u64,
    whole_tokens: u64,
    first: Histogram<u64>,
    gap: Histogram<u64>,
    late: Histogram<u64>,
    /// The time held of the requests scheduled, an openai route's refusals left out: an openai
    /// route's only (elsewhere it would be `held`).
    e2e: Option<Histogram<u64>>,
}

impl RouteInfo {
    /// Whether `outcome` is one of an openai route's refusals (see [`RouteInfo::refusals`]).
    fn refused(&self, outcome: usize) -> bool {
        (self.refusals).is_some_and(|first| (first..first + 3).contains(&outcome))
    }
}

impl StreamTally {
    /// An empty tally; with an `e2e` histogram if it is an openai route's.
    fn new(openai: bool) -> StreamTally {
        StreamTally {
            events: 0,
            left: 0,
            prompt_tokens: 0,
            whole_tokens: 0,
            first: empty_histogram(),
            gap: empty_histogram(),
            late: empty_histogram(),
            e2e: openai.then(empty_histogram),
        }
    }

    fn histograms_mut(&mut self) -> impl Iterator<Item = &mut Histogram<u64>> {
        [&mut self.first, &mut self.gap, &mut self.late]
            .into_iter()
            .chain(self.e2e.as_mut())
    }

    fn histograms(&self) -> impl Iterator<Item = &Histogram<u64>> {
        [&self.first, &self.gap, &self.late]
            .into_iter()
            .chain(self.e2e.as_ref())
    }

    fn subtract(&mut self, other: &StreamTally) {
        self.events = self.events.saturating_sub(other.events);
        self.left = self.left.saturating_sub(other.left);
        self.prompt_tokens = self.prompt_tokens.saturating_sub(other.prompt_tokens);
        self.whole_tokens = self.whole_tokens.saturating_sub(other.whole_tokens);
        for (mine, theirs) in self.histograms_mut().zip(other.histograms()) {
            let _ = mine.subtract(theirs);
        }
    }

    fn add(&mut self, other: &StreamTally) {
        self.events += other.events;
        self.left += other.left;
        self.prompt_tokens += other.prompt_tokens;
        self.whole_tokens += other.whole_tokens;
        for (mine, theirs) in self.histograms_mut().zip(other.histograms()) {
            mine.add(theirs).expect("histograms share bounds");
        }
    }

    /// Its truth; `tokens`: an openai route's, whose tokens are counted.
    fn truth(&self, tokens: bool) -> StreamTruth {
        StreamTruth {
            events: self.events,
            left: self.left,
            first: Summary::of(&self.first),
            gap: Summary::of(&self.gap),
            late: Summary::of(&self.late),
            prompt_tokens: tokens.then_some(self.prompt_tokens),
            completion_tokens: tokens.then_some(self.events + self.whole_tokens),
        }
    }
}

impl Tally {
    /// An empty tally of route `info`, with a wait histogram if `pooled`.
    fn new(info: &RouteInfo, pooled: bool) -> Tally {
        let openai = info.refusals.is_some();
        Tally {
            outcomes: vec![0; info.outcomes.len()],
            drawn: empty_histogram(),
            held: empty_histogram(),
            off: empty_histogram(),
            wait: pooled.then(empty_histogram),
            stream: (info.streamed).then(|| Box::new(StreamTally::new(openai))),
        }
    }

    fn count(&mut self, outcome: usize) {
        debug_assert!(
            outcome < self.outcomes.len(),
            "outcome {outcome} out of range"
        );
        if let Some(n) = self.outcomes.get_mut(outcome) {
            *n += 1;
        }
    }

    /// Takes away what `other` (an earlier state of the same tally) had counted.
    fn subtract(&mut self, other: &Tally) {
        for (mine, theirs) in self.outcomes.iter_mut().zip(&other.outcomes) {
            *mine = mine.saturating_sub(*theirs);
        }
        // An earlier state is contained in a later one; were it not, the later one is kept whole.
        let _ = self.drawn.subtract(&other.drawn);
        let _ = self.held.subtract(&other.held);
        let _ = self.off.subtract(&other.off);
        if let (Some(mine), Some(theirs)) = (self.wait.as_mut(), other.wait.as_ref()) {
            let _ = mine.subtract(theirs);
        }
        if let (Some(mine), Some(theirs)) = (self.stream.as_mut(), other.stream.as_ref()) {
            mine.subtract(theirs);
        }
    }

    fn add(&mut self, other: &Tally) {
        for (mine, theirs) in self.outcomes.iter_mut().zip(&other.outcomes) {
            *mine += theirs;
        }
        // Every histogram has the same bounds, so an addition cannot fall outside them.
        self.drawn
            .add(&other.drawn)
            .expect("histograms share bounds");
        self.held.add(&other.held).expect("histograms share bounds");
        self.off.add(&other.off).expect("histograms share bounds");
        if let (Some(mine), Some(theirs)) = (self.wait.as_mut(), other.wait.as_ref()) {
            mine.add(theirs).expect("histograms share bounds");
        }
        if let (Some(mine), Some(theirs)) = (self.stream.as_mut(), other.stream.as_ref()) {
            mine.add(theirs);
        }
    }
}

fn empty_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A route, its Prometheus labels and bucket bounds.
struct Route {
    info: RouteInfo,
    /// `route="GET /x"`, and `phase="…"` when its table has phases.
    labels: Vec<LabelPair>,
    bounds_ns: Vec<u64>,
}

/// What counting since the start of a generation (or the last reset) subtracts, and when it began.
struct Since {
    /// Each route's merged tally at the last reset (none before any).
    tallies: Option<Vec<Tally>>,
    /// Each pool's served and shed at the last reset.
    pools: Vec<(u64, u64)>,
    began: std::time::SystemTime,
}

/// Where a reader finds the ground truth in force (the routes table in force has its own).
pub type InForce<'a> = &'a dyn Fn() -> std::sync::Arc<GroundTruth>;

/// How many pauses there have been, and how long they lasted in all.
pub type PausesSoFar = Box<dyn Fn() -> (u64, Duration) + Send + Sync>;

/// The ground truth of every route, one slot per (recorder, route). Shared as `Arc<GroundTruth>`.
pub struct GroundTruth {
    routes: Vec<Route>,
    recorders: usize,
    /// Recorder-major: recorder `r`'s slot for route `i` is `slots[r * routes.len() + i]`; each
    /// allocated when it first records.
    slots: Vec<CacheLinePadded<Mutex<Option<Box<Tally>>>>>,
    pools: Vec<std::sync::Arc<dyn PoolGauge>>,
    /// The routes' requests in flight, when they are counted.
    in_flight: Option<std::sync::Arc<dyn InFlight>>,
    /// The routes table's number ([`GroundTruth::with_generation`]); records of another are dropped.
    generation: u32,
    since: Mutex<Since>,
    pauses: Option<PausesSoFar>,
}

impl std::fmt::Debug for GroundTruth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroundTruth").finish_non_exhaustive()
    }
}

impl GroundTruth {
    /// The truth of `routes`, recorded by `recorders` threads (numbered `0..recorders`).
    pub fn new(routes: Vec<RouteInfo>, recorders: usize) -> GroundTruth {
        let slots = (0..recorders)
            .flat_map(|_| routes.iter())
            .map(|_| CacheLinePadded(Mutex::new(None)))
            .collect();
        let routes = routes
            .into_iter()
            .map(|info| Route {
                bounds_ns: bucket_bounds_ns(info.expected),
                labels: labels(&info),
                info,
            })
            .collect();
        GroundTruth {
            routes,
            recorders,
            slots,
            pools: Vec::new(),
            in_flight: None,
            generation: 1,
            since: Mutex::new(Since {
                tallies: None,
                pools: Vec::new(),
                began: std::time::SystemTime::now(),
            }),
            pauses: None,
        }
    }

    /// The same, for routes table number `generation`.
    pub fn with_generation(self, generation: u32) -> GroundTruth {
        GroundTruth { generation, ..self }
    }

    /// The same, reporting the server's pauses from `pauses`.
    pub fn with_pauses(self, pauses: PausesSoFar) -> GroundTruth {
        GroundTruth {
            pauses: Some(pauses),
            ..self
        }
    }

    /// The routes table this truth counts for.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// `POST /ground-truth/reset`: what [`GroundTruth::json`] says now; from now on, counts and
    /// histograms start from zero (what was counted so far is subtracted when read).
    pub fn reset(&self) -> String {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = self.json_with(&since);
        let raw: Vec<Tally> = (0..self.routes.len()).map(|i| self.merged_raw(i)).collect();
        since.pools = self
            .pools_raw()
            .iter()
            .map(|p| (p.served, p.shed))
            .collect();
        since.tallies = Some(raw);
        since.began = std::time::SystemTime::now();
        snapshot
    }

    /// The same, with the pools whose figures it reports.
    /// The same truth, reading the routes' requests in flight from `in_flight`.
    pub fn with_in_flight(self, in_flight: std::sync::Arc<dyn InFlight>) -> GroundTruth {
        GroundTruth {
            in_flight: Some(in_flight),
            ..self
        }
    }

    pub fn with_pools(self, pools: Vec<std::sync::Arc<dyn PoolGauge>>) -> GroundTruth {
        GroundTruth { pools, ..self }
    }

    /// Every pool's figures now, in the order they were defined.
    pub fn pools(&self) -> Vec<PoolTruth> {
        let since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        self.pools_since(&since)
    }

    fn pools_raw(&self) -> Vec<PoolTruth> {
        self.pools.iter().map(|p| p.figures()).collect()
    }

    fn pools_since(&self, since: &Since) -> Vec<PoolTruth> {
        let mut pools = self.pools_raw();
        for (pool, (served, shed)) in pools.iter_mut().zip(&since.pools) {
            pool.served = pool.served.saturating_sub(*served);
            pool.shed = pool.shed.saturating_sub(*shed);
        }
        pools
    }

    /// One request's truth: its outcome (an index into [`RouteInfo::outcomes`]), the delay drawn for
    /// it and the time it was held. Called by recorder `recorder` only; no allocation.
    pub fn record(
        &self,
        recorder: usize,
        route: usize,
        outcome: usize,
        drawn: Duration,
        held: Duration,
    ) {
        self.record_sample(recorder, route, outcome, Some(drawn), None, held);
    }

    /// One request's truth, in full: `drawn` (its service time; none for a request shed or gone
    /// before it was served), `wait` (its queue wait, for a pooled route) and `held` (from its
    /// last byte to its answer or departure).
    pub fn record_sample(
        &self,
        recorder: usize,
        route: usize,
        outcome: usize,
        drawn: Option<Duration>,
        wait: Option<Duration>,
        held: Duration,
    ) {
        if let Some(mut slot) = self.slot(recorder, route) {
            let scheduled = !self.routes[route].info.refused(outcome);
            let tally = self.tally(&mut slot, route);
            tally.count(outcome);
            tally.held.saturating_record(nanos(held));
            let e2e = (tally.stream.as_mut()).and_then(|s| s.e2e.as_mut());
            if let Some(e2e) = e2e.filter(|_| scheduled) {
                e2e.saturating_record(nanos(held));
            }
            if let Some(drawn) = drawn {
                let scheduled = drawn + wait.unwrap_or_default();
                tally.drawn.saturating_record(nanos(drawn));
                tally.off.saturating_record(nanos(held.abs_diff(scheduled)));
            }
            if let (Some(w), Some(wait)) = (tally.wait.as_mut(), wait) {
                w.saturating_record(nanos(wait));
            }
        }
    }

    /// One event of a streamed route: the wait `drawn` for it (`first`: from the head, else from
    /// the event before) and how `late` it went past its due time.
    pub fn record_event(
        &self,
        recorder: usize,
        route: usize,
        first: bool,
        drawn: Duration,
        late: Duration,
    ) {
        if let Some(mut slot) = self.slot(recorder, route) {
            if let Some(stream) = self.tally(&mut slot, route).stream.as_mut() {
                stream.events += 1;
                let waits = if first {
                    &mut stream.first
                } else {
                    &mut stream.gap
                };
                waits.saturating_record(nanos(drawn));
                stream.late.saturating_record(nanos(late));
            }
        }
    }

    /// An openai route made an answer for a prompt of `prompt` tokens, or gave out a whole answer
    /// of `whole` tokens (a stream's are counted as its events).
    pub fn record_tokens(&self, recorder: usize, route: usize, prompt: u64, whole: u64) {
        if let Some(mut slot) = self.slot(recorder, route) {
            if let Some(stream) = self.tally(&mut slot, route).stream.as_mut() {
                stream.prompt_tokens += prompt;
                stream.whole_tokens += whole;
            }
        }
    }

    /// A streamed route's client left before the stream's last event: the answer counted as
    /// `outcome` when its head went counts as `gone` instead.
    pub fn record_left(&self, recorder: usize, route: usize, outcome: usize, gone: usize) {
        if let Some(mut slot) = self.slot(recorder, route) {
            let tally = self.tally(&mut slot, route);
            if let Some(n) = tally.outcomes.get_mut(outcome) {
                *n = n.saturating_sub(1);
            }
            tally.count(gone);
            if let Some(stream) = tally.stream.as_mut() {
                stream.left += 1;
            }
        }
    }

    /// A slot's tally, made on its first record.
    fn tally<'a>(&self, slot: &'a mut Option<Box<Tally>>, route: usize) -> &'a mut Tally {
        let info = &self.routes[route].info;
        slot.get_or_insert_with(|| Box::new(Tally::new(info, info.pooled)))
    }

    /// Only an outcome (a fault that holds nothing, e.g. a reset before any delay): counted, with no
    /// histogram sample.
    pub fn count(&self, recorder: usize, route: usize, outcome: usize) {
        if let Some(mut slot) = self.slot(recorder, route) {
            self.tally(&mut slot, route).count(outcome);
        }
    }

    /// The slot of (`recorder`, `route`), locked; `None` (and a debug assertion) when either is out
    /// of range, so a misnumbered caller loses its record rather than a worker.
    fn slot(&self, recorder: usize, route: usize) -> Option<MutexGuard<'_, Option<Box<Tally>>>> {
        let in_range = recorder < self.recorders && route < self.routes.len();
        debug_assert!(in_range, "recorder {recorder} / route {route} out of range");
        if !in_range {
            return None;
        }
        let slot = &self.slots[recorder * self.routes.len() + route].0;
        // A recorder that panicked while holding its slot left whole counts behind.
        Some(slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Route `route` since the last reset.
    fn merged(&self, route: usize) -> Tally {
        let since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        self.merged_since(route, &since)
    }

    fn merged_since(&self, route: usize, since: &Since) -> Tally {
        let mut tally = self.merged_raw(route);
        if let Some(before) = since.tallies.as_ref().and_then(|t| t.get(route)) {
            tally.subtract(before);
        }
        tally
    }

    /// Route `route` merged over the recorders, locking one slot at a time.
    fn merged_raw(&self, route: usize) -> Tally {
        // Merged, every route has a wait histogram (empty without a pool), for one metric shape.
        let info = &self.routes[route].info;
        let mut total = Tally::new(info, true);
        for recorder in 0..self.recorders {
            if let Some(tally) = self
                .slot(recorder, route)
                .as_deref()
                .and_then(Option::as_deref)
            {
                total.add(tally);
            }
        }
        total
    }

    /// Every route's truth, merged over the recorders, in the order the routes were given.
    pub fn snapshot(&self) -> Vec<RouteTruth> {
        (0..self.routes.len())
            .map(|i| route_truth(&self.routes[i].info, &self.merged(i)))
            .collect()
    }

    /// `/ground-truth.json`: `{"routes":[{"route":…,"count":…,"outcomes":{…},"held_us":{…},
    /// "drawn_us":{…}}]}`, the routes in the order given.
    pub fn json(&self) -> String {
        let since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        self.json_with(&since)
    }

    fn json_with(&self, since: &Since) -> String {
        let pauses = self.pauses.as_ref().map(|pauses| {
            let (count, total) = pauses();
            PauseTotals {
                count,
                total_us: total.as_micros(),
            }
        });
        let document = Document {
            generation: self.generation,
            began: humantime::format_rfc3339_millis(since.began).to_string(),
            pauses,
            routes: (0..self.routes.len())
                .map(|i| route_truth(&self.routes[i].info, &self.merged_since(i, since)))
                .collect(),
            pools: self.pools_since(since),
        };
        serde_json::to_string(&document)
            .expect("the document serializes: its keys are strings, its numbers valid")
    }

    /// The Prometheus text (format 0.0.4), appended to `out`: `statico_route_requests_total{route,
    /// outcome}`, the histograms `statico_route_{held,drawn,wait}_seconds{route}`, the pools' gauges,
    /// the generation and the pauses.
    pub fn prometheus(&self, out: &mut String) {
        let merged: Vec<Tally> = (0..self.routes.len()).map(|i| self.merged(i)).collect();
        let mut families = vec![self.requests_family(&merged)];
        families.extend(self.histogram_families(&merged));
        families.extend(self.stream_families(&merged));
        families.extend(self.vllm_families(&merged));
        families.extend(self.pools_families());
        families.extend(self.changes_families());
        encode(families, out);
    }

    /// `statico_route_requests_total{route,outcome}`, and `grpc_status` (the code's number) for a
    /// gRPC route's statuses.
    fn requests_family(&self, merged: &[Tally]) -> Family {
        let mut family = Family::counter(
            "statico_route_requests_total",
            "Requests a route matched, by outcome (a status code or a fault).",
        );
        for (route, tally) in self.routes.iter().zip(merged) {
            for (i, (outcome, n)) in route.info.outcomes.iter().zip(&tally.outcomes).enumerate() {
                let mut labels = route.labels.clone();
                labels.push(label("outcome", outcome));
                if let Some(Some(code)) = route.info.grpc_status.get(i) {
                    labels.push(label("grpc_status", &code.to_string()));
                }
                family.sample(labels, *n as f64);
            }
        }
        family
    }

    /// The held, drawn and wait histograms, a sample per route over its own buckets.
    fn histogram_families(&self, merged: &[Tally]) -> Vec<Family> {
        type Of = fn(&Tally) -> &Histogram<u64>;
        let histograms: [(&str, &str, Of); 3] = [
            (
                "statico_route_held_seconds",
                "Time a route's requests were held, from their last byte to their response.",
                |tally| &tally.held,
            ),
            (
                "statico_route_drawn_seconds",
                "Delays drawn from a route's distribution.",
                |tally| &tally.drawn,
            ),
            (
                "statico_route_wait_seconds",
                "Time a pooled route's requests queued for a server (zero for a route without a pool).",
                |tally| {
                    tally
                        .wait
                        .as_ref()
                        .expect("a merged tally has a wait histogram")
                },
            ),
        ];
        let families = histograms.into_iter().map(|(metric, help, histogram_of)| {
            let mut family = Family::histogram(metric, help);
            for (route, tally) in self.routes.iter().zip(merged) {
                add_buckets(
                    &mut family,
                    &route.labels,
                    histogram_of(tally),
                    &route.bounds_ns,
                );
            }
            family
        });
        families.collect()
    }

    /// A streamed route's events: `statico_route_stream_events_total{route}`,
    /// `statico_route_stream_left_total{route}` and the histograms of the first waits, the gaps
    /// and the lateness, `statico_route_stream_{first,gap,late}_seconds{route}` (coarse buckets).
    /// Nothing when no route streams.
    fn stream_families(&self, merged: &[Tally]) -> Vec<Family> {
        let streamed: Vec<(&Route, &StreamTally)> = (self.routes.iter().zip(merged))
            .filter_map(|(route, tally)| Some((route, tally.stream.as_deref()?)))
            .collect();
        if streamed.is_empty() {
            return Vec::new();
        }
        type Tallied = fn(&StreamTally) -> u64;
        let counters: [(&str, &str, Tallied); 2] = [
            (
                "statico_route_stream_events_total",
                "Events a streamed route gave out.",
                |s| s.events,
            ),
            (
                "statico_route_stream_left_total",
                "Streams whose client left before their last event.",
                |s| s.left,
            ),
        ];
        let counters = counters.into_iter().map(|(metric, help, value)| {
            let mut family = Family::counter(metric, help);
            for (route, stream) in &streamed {
                family.sample(route.labels.clone(), value(stream) as f64);
            }
            family
        });
        type Of = fn(&StreamTally) -> &Histogram<u64>;
        let histograms: [(&str, &str, Of); 3] = [
            (
                "statico_route_stream_first_seconds",
                "A stream's wait drawn from its head to its first event.",
                |s| &s.first,
            ),
            (
                "statico_route_stream_gap_seconds",
                "The gaps drawn between a stream's events.",
                |s| &s.gap,
            ),
            (
                "statico_route_stream_late_seconds",
                "How late each event went past its due time.",
                |s| &s.late,
            ),
        ];
        let bounds_ns = bucket_bounds_ns(None);
        let histograms = histograms.into_iter().map(|(metric, help, histogram_of)| {
            let mut family = Family::histogram(metric, help);
            for (route, stream) in &streamed {
                add_buckets(&mut family, &route.labels, histogram_of(stream), &bounds_ns);
            }
            family
        });
        counters.chain(histograms).collect()
    }

    /// An openai route's metrics under the names vLLM gives them (which load-aware gateways
    /// read), labelled `model_name`: its pool's `vllm:num_requests_running` (in service),
    /// `vllm:num_requests_waiting` (queued) and `vllm:kv_cache_usage_perc` (in service ÷
    /// capacity) — without a pool, its requests in flight running, none waiting, 0 used; the
    /// token counters; and as histograms, the drawn wait from the head to the first token
    /// (`vllm:time_to_first_token_seconds`), the drawn gaps (`vllm:inter_token_latency_seconds`)
    /// and the time held, from the request's last byte to the last token
    /// (`vllm:e2e_request_latency_seconds`, of the requests scheduled: not those refused before).
    /// Nothing when no route is one.
    fn vllm_families(&self, merged: &[Tally]) -> Vec<Family> {
        let served: Vec<Served> = (self.routes.iter().zip(merged).enumerate())
            .filter_map(|(i, (route, tally))| {
                let model = vec![label("model_name", route.info.model.as_deref()?)];
                let stream = tally.stream.as_deref()?;
                let load = self.load_of(i, route);
                Some(Served {
                    model,
                    tally,
                    stream,
                    load,
                })
            })
            .collect();
        if served.is_empty() {
            return Vec::new();
        }
        type Gauge = (&'static str, &'static str, fn(&[f64; 3]) -> f64);
        let gauges: [Gauge; 3] = [
            ("vllm:num_requests_running", "Requests in service (their sequences hold a server of the route's pool, or are in flight without one).", |l| l[0]),
            ("vllm:num_requests_waiting", "Requests waiting for a server of the route's pool.", |l| l[1]),
            ("vllm:kv_cache_usage_perc", "The route's pool in service over its capacity (0 to 1; 0 without a pool).", |l| l[2]),
        ];
        let mut families = Vec::new();
        for (metric, help, value) in gauges {
            let mut family = Family::gauge(metric, help);
            for s in &served {
                family.sample(s.model.clone(), value(&s.load));
            }
            families.push(family);
        }
        type TokensOf = fn(&StreamTally) -> u64;
        let counters: [(&str, &str, TokensOf); 2] = [
            (
                "vllm:prompt_tokens_total",
                "Prompt tokens of the requests answered (estimated: a token per 4 bytes of text).",
                |s| s.prompt_tokens,
            ),
            (
                "vllm:generation_tokens_total",
                "Output tokens given out.",
                |s| s.events + s.whole_tokens,
            ),
        ];
        for (metric, help, value) in counters {
            let mut family = Family::counter(metric, help);
            for s in &served {
                family.sample(s.model.clone(), value(s.stream) as f64);
            }
            families.push(family);
        }
        type Of = for<'t> fn(&'t Tally, &'t StreamTally) -> &'t Histogram<u64>;
        let histograms: [(&str, &str, Of); 3] = [
            (
                "vllm:time_to_first_token_seconds",
                "The wait drawn from a stream's head to its first token (first= and prefill=).",
                |_, s| &s.first,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "The gaps drawn between tokens (gap=).",
                |_, s| &s.gap,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Time held, from the request's last byte to its last token (requests refused before they are scheduled left out).",
                |t, s| s.e2e.as_ref().unwrap_or(&t.held),
            ),
        ];
        let bounds_ns = bucket_bounds_ns(None);
        for (metric, help, histogram_of) in histograms {
            let mut family = Family::histogram(metric, help);
            for s in &served {
                add_buckets(
                    &mut family,
                    &s.model,
                    histogram_of(s.tally, s.stream),
                    &bounds_ns,
                );
            }
            families.push(family);
        }
        families
    }

    /// Route `i`'s requests running and waiting, and the share of its pool's capacity in service:
    /// its pool's figures, or without one its requests in flight.
    fn load_of(&self, i: usize, route: &Route) -> [f64; 3] {
        match route.info.pool.and_then(|p| self.pools.get(p)) {
            Some(pool) => {
                let p = pool.figures();
                let used = p.in_service as f64 / p.capacity.max(1) as f64;
                [p.in_service as f64, p.queued as f64, used]
            }
            None => {
                let running = self.in_flight.as_ref().map_or(0, |f| f.in_flight(i));
                [running as f64, 0.0, 0.0]
            }
        }
    }

    /// The routes table's generation, and the pauses (with pauses possible).
    fn changes_families(&self) -> Vec<Family> {
        let mut generation = Family::gauge(
            "statico_routes_generation",
            "The routes table in force: 1 at start-up, one more per PUT /routes or SIGHUP re-read.",
        );
        generation.sample(Vec::new(), f64::from(self.generation));
        let Some(pauses) = &self.pauses else {
            return vec![generation];
        };
        let (count, total) = pauses();
        let mut begun = Family::counter(
            "statico_pauses_total",
            "Whole-server pauses begun (--pause and POST /pause).",
        );
        begun.sample(Vec::new(), count as f64);
        let mut paused = Family::counter(
            "statico_paused_seconds_total",
            "Time the server has spent paused.",
        );
        paused.sample(Vec::new(), total.as_secs_f64());
        vec![generation, begun, paused]
    }

    /// The pools' gauges: `statico_pool_in_service{pool}`, `statico_pool_queued{pool}`.
    fn pools_families(&self) -> Vec<Family> {
        let pools = self.pools();
        type Gauge = (&'static str, &'static str, fn(&PoolTruth) -> u64);
        let gauges: [Gauge; 2] = [
            (
                "statico_pool_in_service",
                "Requests a pool is serving now.",
                |p| p.in_service,
            ),
            (
                "statico_pool_queued",
                "Requests waiting for a pool's server now.",
                |p| p.queued,
            ),
        ];
        let families = gauges.into_iter().map(|(metric, help, value)| {
            let mut family = Family::gauge(metric, help);
            for pool in &pools {
                family.sample(vec![label("pool", &pool.name)], value(pool) as f64);
            }
            family
        });
        families.collect()
    }

    /// One line per route for the exit summary, e.g. `route GET /api/*: 10234 requests (200 9012,
    /// 503 1020, reset 12); held p50 10.02ms p99 80.4ms max 1.2s; drawn p50 10.01ms p99 80.3ms`.
    pub fn totals(&self) -> Vec<String> {
        let delayed = self.routes.iter().map(|r| r.info.expected.is_some());
        let routes = self.snapshot();
        let lines = routes
            .iter()
            .zip(delayed)
            .map(|(truth, delayed)| total_line(truth, delayed));
        lines.chain(self.pools().iter().map(pool_line)).collect()
    }
}

fn route_truth(info: &RouteInfo, tally: &Tally) -> RouteTruth {
    RouteTruth {
        name: info.name.clone(),
        phase: info.phase.clone(),
        count: tally.outcomes.iter().sum(),
        outcomes: info
            .outcomes
            .iter()
            .cloned()
            .zip(tally.outcomes.iter().copied())
            .collect(),
        held: Summary::of(&tally.held),
        drawn: Summary::of(&tally.drawn),
        off: Summary::of(&tally.off),
        wait: tally.wait.as_ref().map(Summary::of).unwrap_or_default(),
        stream: (tally.stream.as_deref()).map(|s| s.truth(info.model.is_some())),
    }
}

// ---- Prometheus buckets ----

/// A route's bucket bounds in nanoseconds, ascending: fine over its expected range, coarse outside.
fn bucket_bounds_ns(expected: Option<(Duration, Duration)>) -> Vec<u64> {
    let ladder = (0..COARSE_STEPS).map(|k| FLOOR_NS << k);
    let Some((a, b)) = expected else {
        return ladder.collect();
    };
    let (low, high) = fine_range_ns(a.min(b), a.max(b));
    let outside = |&rung: &u64| (rung as f64) < low || (rung as f64) > high;
    let mut bounds: Vec<u64> = ladder.filter(outside).collect();
    // The fine range's bounds (steps + 1) and `+Inf` share what the ladder leaves.
    let steps = MAX_BUCKETS - 2 - bounds.len();
    bounds.extend(geometric_bounds_ns(low, high, steps));
    bounds.sort_unstable();
    bounds.dedup();
    bounds
}

/// The expected range widened ×0.5 below and ×2 above, within the histograms' range.
fn fine_range_ns(low: Duration, high: Duration) -> (f64, f64) {
    let low = (nanos(low) as f64 * 0.5).clamp(FLOOR_NS as f64, HIGHEST_NS as f64 / 2.0);
    let high = (nanos(high) as f64 * 2.0).clamp(low * FINE_RATIO, HIGHEST_NS as f64);
    (low, high)
}

/// Geometric bounds from `low` to `high`, neighbours at most [`FINE_RATIO`] apart unless that takes
/// more than `max_steps` steps.
fn geometric_bounds_ns(low: f64, high: f64, max_steps: usize) -> Vec<u64> {
    let span = (high / low).ln();
    let steps = (span / FINE_RATIO.ln()).ceil().clamp(1.0, max_steps as f64) as i32;
    let ratio = (span / f64::from(steps)).exp();
    (0..=steps)
        .map(|k| round_to_4_significant(low * ratio.powi(k)))
        .collect()
}

/// `x` (at least 1000 ns) rounded to 4 significant digits, so the `le` labels read as short decimals.
fn round_to_4_significant(x: f64) -> u64 {
    let unit = 10f64.powi(x.log10().floor() as i32 - 3).max(1.0);
    ((x / unit).round() * unit) as u64
}

/// `route`'s sample of a histogram family: `histogram` over the buckets `bounds_ns`.
fn add_buckets(
    family: &mut Family,
    labels: &[LabelPair],
    histogram: &Histogram<u64>,
    bounds_ns: &[u64],
) {
    let les = bounds_ns.iter().map(|&bound| bound as f64 / 1e9);
    let cumulative = les.zip(cumulative_counts(histogram, bounds_ns));
    let count = histogram.len();
    let sum_seconds = histogram.mean() * count as f64 / 1e9;
    family.buckets(labels.to_vec(), cumulative, sum_seconds, count);
}

/// How many of `histogram`'s values are at or below each bound (cumulative).
fn cumulative_counts(histogram: &Histogram<u64>, bounds_ns: &[u64]) -> Vec<u64> {
    let mut counts = vec![0u64; bounds_ns.len()];
    for value in histogram.iter_recorded() {
        let bucket = bounds_ns.partition_point(|&bound| bound < value.value_iterated_to());
        if let Some(n) = counts.get_mut(bucket) {
            *n += value.count_at_value();
        }
    }
    let mut running = 0;
    for n in &mut counts {
        running += *n;
        *n = running;
    }
    counts
}

// ---- Prometheus labels ----

/// A route's labels: `route="GET /x"`, and `phase="…"` when its table has phases.
fn labels(info: &RouteInfo) -> Vec<LabelPair> {
    let phase = info.phase.as_deref().map(|phase| label("phase", phase));
    std::iter::once(label("route", &info.name))
        .chain(phase)
        .collect()
}

// ---- JSON ----

/// A route's phase as the document names it: `base` outside any.
fn phase_or_base<S: Serializer>(phase: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(phase.as_deref().unwrap_or("base"))
}

/// The outcomes as an object, in the route's order.
fn in_order<S: Serializer>(outcomes: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(outcomes.iter().map(|(outcome, n)| (outcome, n)))
}

/// A figure in microseconds with three decimals (to the nanosecond). A non-finite one (never made
/// from a histogram) goes as the serializer writes it: `null` in JSON.
fn three_decimals<S: Serializer>(us: &f64, s: S) -> Result<S::Ok, S::Error> {
    if !us.is_finite() {
        return s.serialize_f64(*us);
    }
    let fixed = serde_json::value::RawValue::from_string(format!("{us:.3}"))
        .map_err(serde::ser::Error::custom)?;
    fixed.serialize(s)
}

// ---- The exit summary ----

fn total_line(truth: &RouteTruth, delayed: bool) -> String {
    let outcomes: Vec<String> = truth
        .outcomes
        .iter()
        .map(|(outcome, n)| format!("{outcome} {n}"))
        .collect();
    let phase = truth
        .phase
        .as_ref()
        .map_or(String::new(), |p| format!(" @{p}"));
    let mut line = format!(
        "route {}{phase}: {} requests ({})",
        truth.name,
        truth.count,
        outcomes.join(", ")
    );
    let held = &truth.held;
    if held.count > 0 {
        let _ = write!(
            line,
            "; held p50 {} p99 {} max {}",
            human_duration(held.p50_us),
            human_duration(held.p99_us),
            human_duration(held.max_us)
        );
    }
    let drawn = &truth.drawn;
    if delayed && drawn.count > 0 {
        let _ = write!(
            line,
            "; drawn p50 {} p99 {}; |held - drawn| p99 {}",
            human_duration(drawn.p50_us),
            human_duration(drawn.p99_us),
            human_duration(truth.off.p99_us)
        );
    }
    if let Some(stream) = &truth.stream {
        let _ = write!(
            line,
            "; stream {} events, {} left, first p50 {}, gap p50 {}, late p99 {}",
            stream.events,
            stream.left,
            human_duration(stream.first.p50_us),
            human_duration(stream.gap.p50_us),
            human_duration(stream.late.p99_us)
        );
    }
    line
}

/// The exit summary's line of a pool, e.g. `pool db: capacity 8, queue 100: served 10234, shed
/// 12, in service max 8, queued max 100`.
fn pool_line(p: &PoolTruth) -> String {
    let queue = p.queue.map_or("unbounded".to_owned(), |q| q.to_string());
    format!(
        "pool {}: capacity {}, queue {queue}: served {}, shed {}, in service max {}, queued max {}",
        p.name, p.capacity, p.served, p.shed, p.in_service_max, p.queued_max
    )
}

/// Microseconds shown in the unit that keeps them short, to about 4 significant digits: `850ns`,
/// `12.34µs`, `10.02ms`, `1.2s`.
fn human_duration(us: f64) -> String {
    let (value, unit) = match us {
        us if us < 1.0 => (us * 1e3, "ns"),
        us if us < 1e3 => (us, "µs"),
        us if us < 1e6 => (us / 1e3, "ms"),
        us => (us / 1e6, "s"),
    };
    let decimals = match value {
        v if v >= 100.0 => 1,
        v if v >= 10.0 => 2,
        _ => 3,
    };
    let shown = format!("{value:.decimals$}");
    let shown = if shown.contains('.') {
        shown.trim_end_matches('0').trim_end_matches('.')
    } else {
        &shown
    };
    format!("{shown}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn route(name: &str, outcomes: &[&str], expected: Option<(Duration, Duration)>) -> RouteInfo {
        RouteInfo {
            name: name.into(),
            outcomes: outcomes.iter().map(|o| o.to_string()).collect(),
            expected,
            ..RouteInfo::default()
        }
    }

    fn api_route() -> RouteInfo {
        let range = (Duration::from_millis(5), Duration::from_millis(50));
        route("GET /api/*", &["200", "503", "reset"], Some(range))
    }

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= expected * tolerance
    }

    /// Two recorders: 100 × 200 at 10 ms (held 10.1 ms) and 100 × 503 at 20 ms (held 20.2 ms), plus
    /// 3 resets only counted.
    fn two_recorders() -> GroundTruth {
        let truth = GroundTruth::new(vec![api_route(), route("GET /", &["200"], None)], 2);
        for _ in 0..100 {
            let (drawn, held) = (
                Duration::from_nanos(10 * MS),
                Duration::from_nanos(10_100_000),
            );
            truth.record(0, 0, 0, drawn, held);
            let (drawn, held) = (
                Duration::from_nanos(20 * MS),
                Duration::from_nanos(20_200_000),
            );
            truth.record(1, 0, 1, drawn, held);
        }
        for _ in 0..3 {
            truth.count(1, 0, 2);
        }
        truth.record(1, 1, 0, Duration::ZERO, Duration::from_micros(40));
        truth
    }

    #[test]
    fn is_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<GroundTruth>();
    }

    #[test]
    fn merges_the_recorders_counts_and_percentiles() {
        let routes = two_recorders().snapshot();
        assert_eq!(routes.len(), 2);
        let api = &routes[0];
        assert_eq!(api.name, "GET /api/*");
        assert_eq!(api.count, 203);
        let outcomes: Vec<(&str, u64)> =
            api.outcomes.iter().map(|(o, n)| (o.as_str(), *n)).collect();
        assert_eq!(outcomes, [("200", 100), ("503", 100), ("reset", 3)]);
        assert_eq!((api.held.count, api.drawn.count), (200, 200));
        assert!(close(api.held.p50_us, 10_100.0, 0.001), "{:?}", api.held);
        assert!(close(api.held.p90_us, 20_200.0, 0.001), "{:?}", api.held);
        assert!(close(api.held.p99_us, 20_200.0, 0.001), "{:?}", api.held);
        assert!(close(api.held.max_us, 20_200.0, 0.001), "{:?}", api.held);
        assert!(close(api.held.mean_us, 15_150.0, 0.001), "{:?}", api.held);
        assert!(close(api.drawn.p50_us, 10_000.0, 0.001), "{:?}", api.drawn);
        assert!(close(api.drawn.p999_us, 20_000.0, 0.001), "{:?}", api.drawn);
        let plain = &routes[1];
        assert_eq!((plain.count, plain.held.count), (1, 1));
        assert!(close(plain.held.p50_us, 40.0, 0.001), "{:?}", plain.held);
        assert_eq!(plain.drawn.max_us, 0.0);
    }

    #[test]
    fn records_after_being_read_and_saturates_outside_the_range() {
        let truth = two_recorders();
        let _ = (truth.snapshot(), truth.json(), truth.totals());
        truth.prometheus(&mut String::new());
        truth.record(0, 0, 0, Duration::from_secs(7_200), Duration::from_nanos(1));
        truth.count(0, 0, 2);
        let api = &truth.snapshot()[0];
        assert_eq!(
            (api.count, api.outcomes[2].1, api.held.count),
            (205, 4, 201)
        );
        assert!(close(api.drawn.max_us, 3.6e9, 0.001), "{:?}", api.drawn);
    }

    #[test]
    fn json_is_valid_and_escapes_the_route_name() {
        let name = "GET /a\"b\\c\nd\u{1}é";
        let truth = GroundTruth::new(vec![route(name, &["200"], None), api_route()], 1);
        truth.record(0, 0, 0, Duration::ZERO, Duration::from_millis(2));
        let parsed: serde_json::Value = serde_json::from_str(&truth.json()).expect("valid JSON");
        let routes = parsed["routes"].as_array().expect("routes");
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0]["route"], name);
        assert_eq!(routes[0]["count"], 1);
        assert_eq!(routes[0]["outcomes"]["200"], 1);
        assert_eq!(routes[0]["held_us"]["count"], 1);
        let p99 = routes[0]["held_us"]["p99.9"].as_f64().expect("p99.9");
        assert!(close(p99, 2_000.0, 0.001), "{p99}");
        assert_eq!(routes[1]["route"], "GET /api/*");
        assert_eq!(routes[1]["outcomes"]["reset"], 0);
        assert_eq!(routes[1]["drawn_us"]["max"], 0.0);
    }

    /// The `(le, cumulative count)` pairs of one route's histogram, `+Inf` as infinity, and its
    /// `_count`.
    fn buckets(page: &str, metric: &str, route: &str) -> (Vec<(f64, u64)>, u64) {
        let bucket = format!("{metric}_bucket{{route=\"{route}\",le=\"");
        let pairs = page
            .lines()
            .filter_map(|line| line.strip_prefix(&bucket))
            .map(|rest| {
                let (le, n) = rest.split_once("\"} ").expect("a bucket line");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("le")
                };
                (le, n.parse().expect("count"))
            })
            .collect();
        let count = format!("{metric}_count{{route=\"{route}\"}} ");
        let count = page
            .lines()
            .find_map(|line| line.strip_prefix(&count))
            .expect("_count");
        (pairs, count.parse().expect("count"))
    }

    /// Prometheus' `histogram_quantile`: linear interpolation inside the bucket holding the rank.
    fn histogram_quantile(q: f64, buckets: &[(f64, u64)]) -> f64 {
        let total = buckets[buckets.len() - 1].1 as f64;
        let rank = q * total;
        let b = buckets
            .iter()
            .position(|&(_, n)| n as f64 >= rank)
            .expect("rank");
        if b == buckets.len() - 1 {
            return buckets[b - 1].0;
        }
        let (start, before) = if b == 0 {
            (0.0, 0.0)
        } else {
            (buckets[b - 1].0, buckets[b - 1].1 as f64)
        };
        let (end, upto) = (buckets[b].0, buckets[b].1 as f64);
        start + (end - start) * (rank - before) / (upto - before)
    }

    #[test]
    fn prometheus_histograms_are_cumulative_and_end_at_their_count() {
        let truth = two_recorders();
        let mut page = String::new();
        truth.prometheus(&mut page);
        for metric in ["statico_route_held_seconds", "statico_route_drawn_seconds"] {
            assert_eq!(
                page.matches(&format!("# TYPE {metric} histogram\n"))
                    .count(),
                1
            );
            assert_eq!(page.matches(&format!("# HELP {metric} ")).count(), 1);
            for (route, samples) in [("GET /api/*", 200), ("GET /", 1)] {
                let (pairs, count) = buckets(&page, metric, route);
                assert!(pairs.len() <= 400 && pairs.len() > 10, "{}", pairs.len());
                assert!(pairs
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
                assert_eq!(pairs.last(), Some(&(f64::INFINITY, samples)));
                assert_eq!(count, samples);
            }
        }
        assert_eq!(
            page.matches("# TYPE statico_route_requests_total counter\n")
                .count(),
            1
        );
        assert!(page
            .contains("statico_route_requests_total{route=\"GET /api/*\",outcome=\"503\"} 100\n"));
        assert!(page
            .contains("statico_route_requests_total{route=\"GET /api/*\",outcome=\"reset\"} 3\n"));
        let sum = "statico_route_held_seconds_sum{route=\"GET /api/*\"} ";
        let sum: f64 = page
            .lines()
            .find_map(|l| l.strip_prefix(sum))
            .expect("_sum")
            .parse()
            .expect("sum");
        assert!(close(sum, 3.03, 0.001), "{sum}");
    }

    #[test]
    fn prometheus_escapes_label_values() {
        let truth = GroundTruth::new(vec![route("GET /a\"b\\c\nd", &["x\"y"], None)], 1);
        let mut page = String::new();
        truth.prometheus(&mut page);
        assert!(page.contains(
            "statico_route_requests_total{route=\"GET /a\\\"b\\\\c\\nd\",outcome=\"x\\\"y\"} 0\n"
        ));
        assert!(
            page.contains("statico_route_held_seconds_count{route=\"GET /a\\\"b\\\\c\\nd\"} 0\n")
        );
        assert_eq!(
            page.lines().filter(|l| !l.starts_with('#')).count(),
            1 + 3 * (COARSE_STEPS as usize + 3) + 1 // held, drawn and wait; the generation
        );
    }

    /// A deterministic lognormal: Box-Muller over a 64-bit LCG.
    struct Lognormal {
        state: u64,
        median_ns: f64,
        sigma: f64,
    }

    impl Lognormal {
        fn uniform(&mut self) -> f64 {
            self.state = self
                .state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        fn sample(&mut self) -> Duration {
            let (u1, u2) = (self.uniform(), self.uniform());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            Duration::from_nanos((self.median_ns * (self.sigma * z).exp()) as u64)
        }
    }

    #[test]
    fn histogram_quantile_reads_a_10ms_routes_p99_to_1_percent() {
        // p50 10 ms, p99 80 ms: sigma = ln 8 / z(0.99); the route states its p0.1 .. p99.99.
        let sigma = 8f64.ln() / 2.326_348;
        let at = |z: f64| Duration::from_nanos((10.0 * MS as f64 * (sigma * z).exp()) as u64);
        let expected = (at(-3.090_232), at(3.719_016));
        let truth = GroundTruth::new(vec![route("GET /slow", &["200"], Some(expected))], 2);
        let mut lognormal = Lognormal {
            state: 42,
            median_ns: 10.0 * MS as f64,
            sigma,
        };
        for i in 0..100_000 {
            let d = lognormal.sample();
            truth.record(i % 2, 0, 0, d, d);
        }
        let held = &truth.snapshot()[0].held;
        assert!(close(held.p99_us, 80_000.0, 0.03), "{held:?}");
        let mut page = String::new();
        truth.prometheus(&mut page);
        let (pairs, count) = buckets(&page, "statico_route_held_seconds", "GET /slow");
        assert_eq!(count, 100_000);
        assert!(pairs.len() <= MAX_BUCKETS, "{}", pairs.len());
        let fine = pairs
            .windows(2)
            .filter(|w| w[0].0 >= 0.0005 && w[1].0 <= 0.5);
        assert!(fine.clone().count() > 340);
        assert!(
            fine.clone().all(|w| w[1].0 / w[0].0 <= FINE_RATIO * 1.001),
            "{pairs:?}"
        );
        for (q, hdr_us) in [
            (0.5, held.p50_us),
            (0.9, held.p90_us),
            (0.99, held.p99_us),
            (0.999, held.p999_us),
        ] {
            let read_us = histogram_quantile(q, &pairs) * 1e6;
            assert!(
                close(read_us, hdr_us, 0.01),
                "q {q}: buckets {read_us} µs, HDR {hdr_us} µs"
            );
        }
    }

    #[test]
    fn bucket_bounds_are_ascending_bounded_and_fine_over_the_range() {
        let cases = [
            None,
            Some((Duration::from_millis(10), Duration::from_millis(10))),
            Some((Duration::from_micros(1), Duration::from_secs(3_600))),
            Some((Duration::from_millis(80), Duration::from_millis(1))),
            Some((Duration::ZERO, Duration::ZERO)),
        ];
        let sweep = (0..40)
            .flat_map(|a| (a..40).map(move |b| (a, b)))
            .map(|(a, b)| {
                let at = |k: i32| Duration::from_nanos((1_000.0 * 1.8f64.powi(k)) as u64);
                Some((at(a), at(b)))
            });
        for expected in cases.into_iter().chain(sweep) {
            let bounds = bucket_bounds_ns(expected);
            assert!(bounds.len() < MAX_BUCKETS, "{expected:?}: {}", bounds.len());
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{expected:?}");
            assert!(
                bounds[0] >= FLOOR_NS && bounds[bounds.len() - 1] <= HIGHEST_NS,
                "{expected:?}"
            );
        }
        let fine = bucket_bounds_ns(Some((Duration::from_millis(1), Duration::from_millis(80))));
        let mut inside = fine
            .windows(2)
            .filter(|w| w[0] >= 500_000 && w[1] <= 160 * MS);
        assert!(inside.clone().count() > 250);
        assert!(inside.all(|w| w[1] as f64 / w[0] as f64 <= FINE_RATIO + 0.001));
    }

    #[test]
    fn totals_name_each_route_with_its_outcomes_and_percentiles() {
        let lines = two_recorders().totals();
        assert_eq!(
            lines,
            [
                "route GET /api/*: 203 requests (200 100, 503 100, reset 3); held p50 10.1ms p99 20.2ms max 20.2ms; drawn p50 10ms p99 20ms; |held - drawn| p99 200.1µs",
                "route GET /: 1 requests (200 1); held p50 40.03µs p99 40.03µs max 40.03µs",
            ]
        );
        assert_eq!(human_duration(0.5), "500ns");
        assert_eq!(human_duration(1_200_000.0), "1.2s");
        assert_eq!(human_duration(80_400.0), "80.4ms");
    }

    /// A pool whose figures never change.
    struct FixedPool(PoolTruth);

    impl PoolGauge for FixedPool {
        fn figures(&self) -> PoolTruth {
            self.0.clone()
        }
    }

    /// A generation-3 table with phases, pauses and two pools (one unbounded); a pooled route with
    /// 5000 lognormal samples and a route whose name and outcome need escaping.
    fn phased_pooled_paused() -> GroundTruth {
        let mut pooled = api_route();
        pooled.phase = Some("brown\"out".into());
        pooled.pooled = true;
        let mut odd = route("GET /a\"b\\c\nd\t\u{1}é", &["200", "x\"y"], None);
        odd.phase = Some("base".into());
        let pool = |name: &str, queue, served| PoolTruth {
            name: name.into(),
            capacity: 8,
            queue,
            served,
            shed: 2,
            in_service: 3,
            queued: 4,
            in_service_max: 8,
            queued_max: 50,
        };
        let pools: Vec<std::sync::Arc<dyn PoolGauge>> = vec![
            std::sync::Arc::new(FixedPool(pool("db", Some(100), 10))),
            std::sync::Arc::new(FixedPool(pool("c\"ache", None, 0))),
        ];
        let truth = GroundTruth::new(vec![odd, pooled], 2)
            .with_generation(3)
            .with_pauses(Box::new(|| (2, Duration::from_micros(1_234_567))))
            .with_pools(pools);
        let mut lognormal = Lognormal {
            state: 7,
            median_ns: 3.0 * MS as f64,
            sigma: 0.8,
        };
        for i in 0..5_000 {
            let d = lognormal.sample();
            let held = d + d / 3 + Duration::from_nanos(777);
            truth.record_sample(i % 2, 1, i % 3, Some(d), Some(d / 3), held);
            truth.record(i % 2, 0, i % 2, Duration::ZERO, d / 7);
        }
        truth.count(0, 1, 2);
        truth
    }

    #[test]
    fn json_is_the_document_as_it_was_written_by_hand() {
        let truth = phased_pooled_paused();
        let (derived, by_hand) = (truth.json(), hand_written_json(&truth));
        let parse = |json: &str| serde_json::from_str::<serde_json::Value>(json).expect("JSON");
        assert_eq!(parse(&derived), parse(&by_hand));
        // The same bytes: the same keys in the same order, the same number formats.
        assert_eq!(derived, by_hand);
        assert!(derived.contains("\"p99.9\":") && derived.contains("\"queue\":null"));
        let without_pauses = GroundTruth::new(vec![api_route()], 1);
        assert_eq!(without_pauses.json(), hand_written_json(&without_pauses));
    }

    #[test]
    fn prometheus_labels_phases_and_has_the_pools_generation_and_pauses() {
        let mut page = String::new();
        phased_pooled_paused().prometheus(&mut page);
        for line in [
            "statico_route_requests_total{route=\"GET /api/*\",phase=\"brown\\\"out\",outcome=\"reset\"} 1667\n",
            "statico_route_wait_seconds_count{route=\"GET /api/*\",phase=\"brown\\\"out\"} 5000\n",
            "statico_route_held_seconds_bucket{route=\"GET /api/*\",phase=\"brown\\\"out\",le=\"+Inf\"} 5000\n",
            "# TYPE statico_pool_queued gauge\nstatico_pool_queued{pool=\"db\"} 4\nstatico_pool_queued{pool=\"c\\\"ache\"} 4\n",
            "# TYPE statico_routes_generation gauge\nstatico_routes_generation 3\n",
            "statico_pauses_total 2\n",
            "statico_paused_seconds_total 1.234567\n",
        ] {
            assert!(page.contains(line), "{line} in {page}");
        }
    }

    #[test]
    fn vllm_end_to_end_latency_leaves_out_an_openai_routes_refusals() {
        let outcomes = ["200", "gone", "400", "404", "405"];
        let info = RouteInfo {
            streamed: true,
            model: Some("m".into()),
            refusals: Some(2),
            ..route("/v1/*", &outcomes, None)
        };
        let truth = GroundTruth::new(vec![info], 1);
        let held = Duration::from_millis(30);
        for outcome in 0..outcomes.len() {
            truth.record_sample(0, 0, outcome, Some(held), None, held);
        }
        let mut page = String::new();
        truth.prometheus(&mut page);
        for line in [
            "vllm:e2e_request_latency_seconds_count{model_name=\"m\"} 2\n",
            "statico_route_held_seconds_count{route=\"/v1/*\"} 5\n",
            "statico_route_requests_total{route=\"/v1/*\",outcome=\"404\"} 1\n",
        ] {
            assert!(page.contains(line), "{line} in {page}");
        }
    }

    /// `/ground-truth.json` as it was assembled with format strings, for comparing the serialized
    /// document against.
    fn hand_written_json(truth: &GroundTruth) -> String {
        let since = truth.since.lock().unwrap();
        let began = humantime::format_rfc3339_millis(since.began);
        let mut out = format!(
            "{{\"generation\":{},\"began\":\"{began}\"",
            truth.generation
        );
        if let Some(pauses) = &truth.pauses {
            let (count, total) = pauses();
            let total = total.as_micros();
            let _ = write!(
                out,
                ",\"pauses\":{{\"count\":{count},\"total_us\":{total}}}"
            );
        }
        let routes: Vec<String> = (0..truth.routes.len())
            .map(|i| route_truth(&truth.routes[i].info, &truth.merged_since(i, &since)))
            .map(|route| hand_written_route(&route))
            .collect();
        let pools: Vec<String> = truth
            .pools_since(&since)
            .iter()
            .map(hand_written_pool)
            .collect();
        let _ = write!(
            out,
            ",\"routes\":[{}],\"pools\":[{}]}}",
            routes.join(","),
            pools.join(",")
        );
        out
    }

    fn hand_written_route(truth: &RouteTruth) -> String {
        let outcomes: Vec<String> = truth
            .outcomes
            .iter()
            .map(|(outcome, n)| format!("{}:{n}", hand_written_string(outcome)))
            .collect();
        let summary = |s: &Summary| {
            format!(
                "{{\"count\":{},\"p50\":{:.3},\"p90\":{:.3},\"p99\":{:.3},\"p99.9\":{:.3},\"max\":{:.3},\"mean\":{:.3}}}",
                s.count, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us, s.mean_us
            )
        };
        format!(
            "{{\"route\":{},\"phase\":{},\"count\":{},\"outcomes\":{{{}}},\"held_us\":{},\"drawn_us\":{},\"off_us\":{},\"wait_us\":{}}}",
            hand_written_string(&truth.name),
            hand_written_string(truth.phase.as_deref().unwrap_or("base")),
            truth.count,
            outcomes.join(","),
            summary(&truth.held),
            summary(&truth.drawn),
            summary(&truth.off),
            summary(&truth.wait)
        )
    }

    fn hand_written_pool(p: &PoolTruth) -> String {
        let queue = p.queue.map_or("null".to_owned(), |q| q.to_string());
        format!(
            "{{\"name\":{},\"capacity\":{},\"queue\":{queue},\"served\":{},\"shed\":{},\"in_service\":{},\"queued\":{},\"in_service_max\":{},\"queued_max\":{}}}",
            hand_written_string(&p.name), p.capacity, p.served, p.shed, p.in_service, p.queued, p.in_service_max, p.queued_max
        )
    }

    fn hand_written_string(value: &str) -> String {
        let mut out = String::from('"');
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
}
