//! A streamed answer (`stream=sse|ndjson|chunks`): its body is a sequence of events, each sent on
//! its own time — the first `first=` after the head, each next one `gap=` after the one before —
//! like a server-sent event feed or an inference server's tokens.
//!
//! Per request the route draws how many events ([`Count`]), the first wait, each gap and, with a
//! fault, after how many events it strikes; [`Events`] is that draw, with where each event ends in
//! the body the protocol sends. [`super::delivery::Delivery`] gives the body out event by event at
//! those times and records, per event, the time drawn and how late it went (its due time is the
//! head's plus the waits drawn so far, so a late event does not push back the ones after it).

use std::time::{Duration, Instant};

use rand::{Rng, RngExt};
use rand_distr::{Distribution, StandardNormal};

use super::dist::log_normal_of;
use super::fault::Fault;
use super::hold::{Recorder, TruthKey};

/// At most this many events a stream (a drawn count is clamped to it).
pub const MAX_EVENTS: u32 = 100_000;

/// At most this many bytes in one request's stream body (events of a longer draw are left out): the
/// body is made whole when the request is answered.
pub const MAX_STREAM_BYTES: usize = 16 << 20;

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

/// One request's events, drawn (see the module doc).
#[derive(Clone, Debug)]
pub struct Events {
    /// Where each event ends in the body, counted from the body's start, ascending.
    pub ends: Vec<usize>,
    /// Before each event: the first from the head, then the gap after the one before.
    pub waits: Vec<Duration>,
    /// A fault strikes after this many events, instead of the rest.
    pub fault: Option<(usize, Fault)>,
    /// Where each event's timing is recorded (a route's answer).
    pub truth: Option<(Recorder, TruthKey)>,
}

/// Where [`Events`] are in their delivery.
#[derive(Debug, Default)]
pub struct Given {
    /// Events given out whole.
    pub sent: usize,
    /// Body bytes given out.
    pub at: usize,
    /// When the event being given out was due (its wait counted from the one before's due).
    pub due: Option<Instant>,
}

impl Events {
    /// The body's length.
    pub fn body_len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Records that event `i`, due at `due`, started to go out at `now`.
    pub fn record(&self, i: usize, due: Instant, now: Instant) {
        if let Some((recorder, key)) = &self.truth {
            let late = now.saturating_duration_since(due);
            recorder.record_event(*key, i == 0, self.waits[i], late);
        }
    }

    /// Records that the client left before the last event.
    pub fn record_left(&self) {
        if let Some((recorder, key)) = &self.truth {
            recorder.record_left(*key);
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
