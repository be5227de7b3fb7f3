//! A streamed answer (`stream=sse|ndjson|chunks`): its body is a sequence of events, each sent on
//! its own time — the first `first=` after the head, each next one `gap=` after the one before —
//! like a server-sent event feed or an inference server's tokens.
//!
//! Per request the route draws how many events ([`Count`]), where a reconnecting client resumes, a
//! seed for the waits and, with a fault, after how many events it strikes; [`Events`] carries that
//! draw and makes each event when it is due — its wait drawn then, its bytes framed then by the
//! route's [`Render`] — so a stream costs its connection one event's bytes at a time, however long
//! it is. [`super::delivery::Delivery`] gives the events out and records, per event, the wait drawn
//! and how late it went (its due time is the head's plus the waits drawn so far, so a late event
//! does not push back the ones after it). A wait is drawn when the event before it has gone, with
//! the count of its route's requests in flight then (for `inflight:BASE:PER`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::dist::log_normal_of;
use super::fault::Fault;
use super::hold::{Recorder, TruthKey};

/// A stream's events due within one tick of this on a worker leave together: the wait for an event
/// ends on the worker timer's next tick at or after its due time, so an event goes at most this late
/// (plus the wake-up), never early. At 50 000 events a second over 1 000 connections a worker then
/// wakes once for about five events, not once for each, which costs the server — and the client it
/// wakes — a fifth of the wake-ups (`cargo xtask bench --stream`); the due times drawn are unchanged
/// and how late each event went is in the ground truth.
pub const EVENT_TICK: Duration = Duration::from_micros(100);

/// At most this many events a stream (a drawn count is clamped to it).
pub const MAX_EVENTS: u32 = 100_000;

/// How many events: `N`, `uniform:LO:HI` or `lognormal:P50:P99` — no units; a draw is rounded and
/// kept within `1..=MAX_EVENTS`.
#[derive(Clone, Debug, PartialEq)]
pub enum Count {
    Fixed(u32),
    Uniform {
        low: u32,
        high: u32,
    },
    /// Given by its median and 99th percentile, as [`super::dist::Dist::LogNormal`].
    LogNormal {
        p50: f64,
        p99: f64,
    },
}

impl Count {
    pub fn parse(s: &str) -> Result<Count, String> {
        const FORMS: &str = "expected N, uniform:LO:HI or lognormal:P50:P99 (counts, no units)";
        let number = |v: &str| -> Result<f64, String> {
            match v.parse::<f64>() {
                Ok(n) if n.is_finite() && n >= 1.0 => Ok(n),
                _ => Err(format!(
                    "{s:?}: {v:?} is not a count of at least 1; {FORMS}"
                )),
            }
        };
        let whole = |v: &str| -> Result<u32, String> {
            match v.parse::<u32>() {
                Ok(n) if (1..=MAX_EVENTS).contains(&n) => Ok(n),
                _ => Err(format!(
                    "{s:?}: {v:?} is not a whole count from 1 to {MAX_EVENTS}; {FORMS}"
                )),
            }
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts[..] {
            [n] => whole(n).map(Count::Fixed),
            ["uniform", low, high] => {
                let (low, high) = (whole(low)?, whole(high)?);
                match low <= high {
                    true => Ok(Count::Uniform { low, high }),
                    false => Err(format!("{s:?}: LO is above HI; {FORMS}")),
                }
            }
            ["lognormal", p50, p99] => {
                let (p50, p99) = (number(p50)?, number(p99)?);
                match p50 <= p99 {
                    true => Ok(Count::LogNormal { p50, p99 }),
                    false => Err(format!("{s:?}: P50 is above P99; {FORMS}")),
                }
            }
            _ => Err(format!("{s:?}: {FORMS}")),
        }
    }

    /// One draw, in `1..=MAX_EVENTS`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        let n = match *self {
            Count::Fixed(n) => return n,
            Count::Uniform { low, high } => return rng.random_range(low..=high),
            Count::LogNormal { p50, p99 } => {
                let (mu, sigma) = log_normal_of(p50, p99);
                let z: f64 = StandardNormal.sample(rng);
                (mu + sigma * z).exp().round()
            }
        };
        n.clamp(1.0, f64::from(MAX_EVENTS)) as u32
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Count::Fixed(n) => write!(f, "{n}"),
            Count::Uniform { low, high } => write!(f, "uniform:{low}:{high}"),
            Count::LogNormal { p50, p99 } => write!(f, "lognormal:{p50}:{p99}"),
        }
    }
}

/// What makes a stream's events: the route's framing and payload, and its wait distributions.
pub trait Render: std::fmt::Debug + Send + Sync {
    /// Appends event `i`, framed; `chunked`: as one HTTP/1.1 chunk, and with `last` the chunked
    /// body's last chunk after it.
    fn event(&self, i: u32, chunked: bool, last: bool, out: &mut Vec<u8>);
    /// The wait before an event: the first's from the head, else the gap after the one before;
    /// `in_flight`: its route's requests in flight at the draw.
    fn wait(&self, first: bool, in_flight: u64, rng: &mut SmallRng) -> Duration;
}

/// An event goes whole once the driver has room for it, or for [`PART`] of it: an event bigger than
/// a peer's flow-control window must still go (the driver then holds at most one event past it).
pub fn fits(len: usize, room: usize) -> bool {
    room >= len.min(PART)
}

/// See [`fits`].
pub const PART: usize = 16 * 1024;

/// One request's events (see the module doc), and how far they have gone.
#[derive(Clone, Debug)]
pub struct Events {
    render: Arc<dyn Render>,
    chunked: bool,
    /// The next event's index, and the index past the last.
    next: u32,
    end: u32,
    /// A fault strikes once this many events have gone, instead of the rest.
    fault: Option<(u32, Fault)>,
    /// Where each event's timing is recorded (a route's answer), and the route's `gone` outcome.
    truth: Option<(Recorder, TruthKey, u8)>,
    rng: SmallRng,
    /// Events given out.
    sent: u32,
    /// When the event being given out is due, and the wait drawn for it.
    due: Option<(Instant, Duration)>,
    /// When the event before it was due.
    last_due: Option<Instant>,
    /// The waits drawn so far, in all.
    drawn: Duration,
    /// The due event, made, while it waits for room.
    made: Option<Vec<u8>>,
    /// See [`StreamDraw::cut`].
    cut: Option<Duration>,
    /// When the first event was asked for: the head's time.
    began: Option<Instant>,
}

/// What one request's stream is, drawn when its route was chosen: how many events, from which
/// (after a `Last-Event-ID`), and the seed of the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamDraw {
    pub events: u32,
    pub from: u32,
    pub seed: u64,
    /// The stream ends this long after its head (a gRPC call's deadline): the events due later
    /// are not sent, and its end waits for it.
    pub cut: Option<Duration>,
}

/// An event the driver takes now, or when to ask again.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// This event's bytes; `last`: the body ends with it.
    Event { bytes: Vec<u8>, last: bool },
    /// Nothing before this instant (the event's due time, or a tick for room).
    Wait(Instant),
    /// The fault strikes now.
    Fault(Fault),
    /// Every event has gone.
    Done,
}

impl Events {
    /// The events of `stream` made by `render` (as HTTP/1.1 chunks with `chunked`); with `fault`,
    /// it strikes after a number of events drawn evenly from none to all but the last. `truth`:
    /// where their timing goes, and the route's `gone` outcome.
    pub fn new(
        render: Arc<dyn Render>,
        stream: StreamDraw,
        chunked: bool,
        fault: Option<Fault>,
        truth: Option<(Recorder, TruthKey, u8)>,
    ) -> Events {
        let mut rng = SmallRng::seed_from_u64(stream.seed);
        let count = stream.events.saturating_sub(stream.from);
        let fault = fault.map(|f| (rng.random_range(0..count.max(1)), f));
        Events {
            render,
            chunked,
            next: stream.from,
            end: stream.events.max(stream.from),
            fault,
            truth,
            rng,
            sent: 0,
            due: None,
            last_due: None,
            drawn: Duration::ZERO,
            made: None,
            cut: stream.cut,
            began: None,
        }
    }

    /// The waits of the events still to come, drawn as [`Events::next`] will draw them with
    /// `in_flight` requests in flight at every draw (a whole answer's time after its first byte
    /// would be, or a gRPC stream's time to its last message).
    pub fn total_wait(&self, in_flight: u64) -> Duration {
        let mut rng = self.rng.clone();
        (self.next..self.end)
            .enumerate()
            .map(|(k, _)| (self.render).wait(self.sent == 0 && k == 0, in_flight, &mut rng))
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// The waits drawn so far, in all (a sequence's service after its head).
    pub(super) fn drawn(&self) -> Duration {
        self.drawn
    }

    /// Whether no event has been given out yet, and none will be (a stream resumed past its end).
    pub fn is_empty(&self) -> bool {
        self.next >= self.end
    }

    /// When the next event is due at `now` (its wait drawn now if it was not, with
    /// `in_flight()` requests in flight), or `None` if a fault or the end comes next.
    pub(super) fn due(&mut self, now: Instant, in_flight: impl FnOnce() -> u64) -> Option<Instant> {
        let fault_next = self.fault.is_some_and(|(after, _)| after == self.sent);
        (!fault_next && self.next < self.end).then(|| self.draw(now, in_flight).0)
    }

    /// The next event's due time and wait: drawn (from `now`, for the first) when the event
    /// before it has gone.
    fn draw(&mut self, now: Instant, in_flight: impl FnOnce() -> u64) -> (Instant, Duration) {
        self.began.get_or_insert(now);
        if let Some(due) = self.due {
            return due;
        }
        let drawn = (self.render).wait(self.sent == 0, in_flight(), &mut self.rng);
        let due = (self.last_due.unwrap_or(now) + drawn, drawn);
        self.drawn = self.drawn.saturating_add(drawn);
        self.due = Some(due);
        due
    }

    /// When the stream is cut ([`StreamDraw::cut`] after its head), once its first wait is drawn.
    pub(super) fn cut_at(&self) -> Option<Instant> {
        Some(self.began? + self.cut?)
    }

    /// Ends the stream here: the events not given out yet are not sent (its cut came).
    pub(super) fn end_here(&mut self) {
        self.end = self.next;
        self.made = None;
    }

    /// The next event at `now`, if it [`fits`] in `room` bytes (else it waits a tick: `tick`);
    /// `in_flight()`: its route's requests in flight, read if a wait is drawn.
    pub fn next(
        &mut self,
        now: Instant,
        room: usize,
        tick: Duration,
        in_flight: impl FnOnce() -> u64,
    ) -> Next {
        if let Some((_, fault)) = self.fault.filter(|(after, _)| *after == self.sent) {
            return Next::Fault(fault);
        }
        if self.next >= self.end {
            return Next::Done;
        }
        let (due, drawn) = self.draw(now, in_flight);
        if let Some(end) = self.cut_at().filter(|end| due >= *end) {
            if now < end {
                return Next::Wait(end);
            }
            self.end_here();
            return Next::Done;
        }
        if due > now {
            return Next::Wait(due);
        }
        let last = self.next + 1 == self.end && self.fault.is_none();
        let bytes = match self.made.take() {
            Some(bytes) => bytes,
            None => {
                let mut bytes = Vec::new();
                self.render.event(self.next, self.chunked, last, &mut bytes);
                bytes
            }
        };
        if !fits(bytes.len(), room) {
            self.made = Some(bytes);
            return Next::Wait(now + tick);
        }
        self.record(drawn, due, now);
        (self.next, self.sent, self.due) = (self.next + 1, self.sent + 1, None);
        self.last_due = Some(due);
        Next::Event { bytes, last }
    }

    /// The length of the due event when it waits for room (the room to ask a flow-controlled
    /// driver for).
    pub fn waiting_len(&self) -> Option<usize> {
        self.made.as_ref().map(Vec::len)
    }

    /// Records that an event waited `drawn` and went at `now`, due at `due`.
    fn record(&self, drawn: Duration, due: Instant, now: Instant) {
        if let Some((recorder, key, _)) = &self.truth {
            let late = now.saturating_duration_since(due);
            recorder.record_event(*key, self.sent == 0, drawn, late);
        }
    }

    /// Records that the client left before the last event: its answer counts as `gone`.
    pub fn record_left(&self) {
        if let Some((recorder, key, gone)) = &self.truth {
            recorder.record_left(*key, *gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn counts_parse_draw_within_their_range_and_print_as_written() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for (text, low, high) in [
            ("5", 5, 5),
            ("uniform:3:6", 3, 6),
            ("lognormal:10:40", 1, MAX_EVENTS),
        ] {
            let count = Count::parse(text).unwrap();
            assert_eq!(count.to_string(), text);
            let draws: Vec<u32> = (0..2000).map(|_| count.sample(&mut rng)).collect();
            assert!(draws.iter().all(|n| (low..=high).contains(n)), "{text}");
        }
        let uniform = Count::parse("uniform:3:6").unwrap();
        let seen: std::collections::BTreeSet<u32> =
            (0..200).map(|_| uniform.sample(&mut rng)).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [3, 4, 5, 6]);
        let mut draws: Vec<u32> = (0..4001)
            .map(|_| Count::parse("lognormal:10:40").unwrap().sample(&mut rng))
            .collect();
        draws.sort_unstable();
        assert!((9..=11).contains(&draws[2000]), "median {}", draws[2000]);
    }

    #[test]
    fn bad_counts_are_refused_with_the_forms() {
        for bad in [
            "0",
            "-1",
            "x",
            "uniform:6:3",
            "uniform:0:3",
            "lognormal:40:10",
            "1000001",
        ] {
            let err = Count::parse(bad).unwrap_err();
            assert!(err.contains("expected N, uniform:LO:HI"), "{bad}: {err}");
        }
    }
}
