//! How an answer is delivered, beyond its bytes: held for a delay, its body held apart or paced, or
//! not delivered at all (a fault) — decided with the answer, by the catalog, and carried out step
//! by step by [`super::delivery::Delivery`] for every protocol.
//!
//! `-d` / `--body-delay` give every answer of the single response or the site the same hold; a route
//! draws its own per request ([`crate::catalog::route`]).

use std::time::Duration;

use super::fault::Fault;

/// How one answer is delivered. The default delivers it at once, whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hold {
    /// Before the answer (from the request's last byte).
    pub delay: Duration,
    /// Between the head and the body.
    pub body_delay: Duration,
    /// Instead of (or part of) the answer.
    pub fault: Option<Fault>,
    /// The body paced at this many bytes a second (0: as fast as the client takes it).
    pub rate: u64,
    /// Where the ground truth of this answer is recorded (a route's answers only).
    pub truth: Option<TruthKey>,
    /// The output tokens of an openai route's whole answer: counted in its truth by its ticket
    /// when the answer is given out, none if its client leaves first (a stream's count as its
    /// events).
    pub tokens: u64,
}

/// A route and the outcome drawn for one request, as the ground truth counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruthKey {
    pub route: u16,
    pub outcome: u8,
    /// The routes table it was drawn from: a record meant for another table's truth is dropped.
    pub generation: u32,
}

/// How often a paced body (`rate=`) is released: one piece of a hundredth of the rate per tick.
pub const PACE_TICK: Duration = Duration::from_millis(10);

impl Hold {
    /// Whether delivery differs from "all of it, now": the connection must then answer one request
    /// at a time and hold it.
    pub fn paces(&self) -> bool {
        !self.delay.is_zero() || !self.body_delay.is_zero() || self.fault.is_some() || self.rate > 0
    }

    /// The body bytes a paced body releases at its tick number `tick` (0, 1, …, one every
    /// [`Hold::tick`]): what is due by the end of that tick less what was due before, so that the
    /// rate holds on average to the byte (everything when not paced).
    pub fn piece(&self, tick: u64) -> usize {
        if self.rate == 0 {
            return usize::MAX;
        }
        let per_tick = u128::from(self.rate) * self.tick().as_nanos();
        let due = |n: u64| (u128::from(n) * per_tick + 500_000_000) / 1_000_000_000;
        usize::try_from(due(tick + 1) - due(tick)).unwrap_or(usize::MAX)
    }

    /// How often a paced body releases a piece: every [`PACE_TICK`], or for a rate under a byte a
    /// tick, as often as one byte is due.
    pub fn tick(&self) -> Duration {
        match self.rate {
            0 => PACE_TICK,
            rate => PACE_TICK.max(Duration::from_secs(1) / u32::try_from(rate).unwrap_or(u32::MAX)),
        }
    }
}

/// Where one thread records the ground truth of the answers it delivers: its own slot of the shared
/// record (one writer per slot).
#[derive(Clone, Debug)]
pub struct Recorder {
    truth: std::sync::Arc<crate::observe::truth::GroundTruth>,
    slot: usize,
}

impl Recorder {
    pub fn new(truth: std::sync::Arc<crate::observe::truth::GroundTruth>, slot: usize) -> Self {
        Recorder { truth, slot }
    }

    /// The answer of `key` was delivered `held` after its request ended, for a drawn `drawn`.
    pub fn record(&self, key: TruthKey, drawn: Duration, held: Duration) {
        if key.generation != self.truth.generation() {
            return;
        }
        let (route, outcome) = (usize::from(key.route), usize::from(key.outcome));
        self.truth.record(self.slot, route, outcome, drawn, held);
    }

    /// One event of a streamed answer `key`: its wait as `drawn` (`first`: from the head) and how
    /// `late` it went.
    pub fn record_event(&self, key: TruthKey, first: bool, drawn: Duration, late: Duration) {
        if key.generation == self.truth.generation() {
            (self.truth).record_event(self.slot, usize::from(key.route), first, drawn, late);
        }
    }

    /// An openai answer `key` was made for a prompt of `prompt` tokens, or a whole answer of
    /// `whole` tokens was given out (a stream's count as its events).
    pub fn record_tokens(&self, key: TruthKey, prompt: u64, whole: u64) {
        if key.generation == self.truth.generation() {
            (self.truth).record_tokens(self.slot, usize::from(key.route), prompt, whole);
        }
    }

    /// A streamed answer `key` was left by its client before its last event: it counts as
    /// outcome `gone` instead.
    pub fn record_left(&self, key: TruthKey, gone: u8) {
        if key.generation == self.truth.generation() {
            let (route, outcome) = (usize::from(key.route), usize::from(key.outcome));
            (self.truth).record_left(self.slot, route, outcome, usize::from(gone));
        }
    }

    /// One request's full truth (see [`crate::observe::truth::GroundTruth::record_sample`]).
    pub fn record_sample(
        &self,
        key: TruthKey,
        drawn: Option<Duration>,
        wait: Option<Duration>,
        held: Duration,
    ) {
        if key.generation != self.truth.generation() {
            return;
        }
        let (route, outcome) = (usize::from(key.route), usize::from(key.outcome));
        (self.truth).record_sample(self.slot, route, outcome, drawn, wait, held);
    }
}
