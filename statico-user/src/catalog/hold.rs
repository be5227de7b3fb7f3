//! How an answer is delivered, beyond its bytes: held for a delay, its body held apart or paced, or
//! not delivered at all (a fault) — decided with the answer, by the catalog, and carried out by each
//! protocol in its own terms (HTTP/1.1 by the connection's pacing, HTTP/2 and HTTP/3 per stream).
//!
//! `-d` / `--body-delay` give every answer of the single response or the site the same hold; a route
//! draws its own per request ([`crate::catalog::route`]).

use std::time::Duration;

use super::pause::Pauses;
pub use super::route::spec::Fault;

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

/// One step of delivering a held answer as a stream (HTTP/2, HTTP/3): the same order of delay,
/// truth, fault, head, body delay and body pieces for both, each protocol carrying a step out in its
/// own frames. (HTTP/1.1 delivers bytes, in the connection's phases, in the same order.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Wait this long.
    Wait(Duration),
    /// The delay is over: record the ground truth (the time held since the request ended).
    Record(TruthKey),
    /// Send the head; `end`: it is the whole answer.
    Head { end: bool },
    /// Send these bytes of the body; `end`: they are the last.
    Body {
        range: std::ops::Range<usize>,
        end: bool,
    },
    /// Reset the stream (a `reset` fault, or the end of a `truncate`).
    Reset,
    /// Close the connection without an answer: GOAWAY, then close (a `close` fault).
    Close,
    /// Never answer: the stream waits for the idle timeout, then is reset (a `stall` fault).
    Stall,
}

/// The steps of delivering one answer with `hold` ([`Step`]), as an iterator.
#[derive(Debug)]
pub struct Delivery {
    hold: Hold,
    body_len: usize,
    head_only: bool,
    /// The next step's place: 0 delay, 1 record, 2 fault or head, 3 body delay (or a truncated
    /// body), 4 a body piece, 6 a tick between pieces, 8 a tick after a truncated body, 7 its reset,
    /// 5 done.
    stage: u8,
    /// Body bytes already given out.
    at: usize,
    /// Pieces of a paced body already given out.
    ticks: u64,
    /// The server's pauses (when it has them): the head waits while one is in force.
    pauses: Option<Pauses>,
}

impl Delivery {
    pub fn new(hold: Hold, body_len: usize, head_only: bool, pauses: Option<Pauses>) -> Delivery {
        Delivery {
            hold,
            pauses,
            body_len: if head_only { 0 } else { body_len },
            head_only,
            stage: 0,
            at: 0,
            ticks: 0,
        }
    }

    /// The first stage of the body: what comes after the head.
    fn after_head(&mut self) -> Option<Step> {
        if let Some(Fault::Truncate) = self.hold.fault {
            self.stage = 8; // a tick for the half to leave (a reset drops what is queued), then the reset
            self.at = self.body_len / 2;
            return (self.at > 0).then_some(Step::Body {
                range: 0..self.at,
                end: false,
            });
        }
        self.stage = 4;
        (!self.hold.body_delay.is_zero()).then_some(Step::Wait(self.hold.body_delay))
    }

    fn piece(&mut self) -> Option<Step> {
        if self.at >= self.body_len {
            self.stage = 5;
            return None;
        }
        let start = self.at;
        self.at = (self.body_len).min(start.saturating_add(self.hold.piece(self.ticks)));
        self.ticks += 1;
        Some(Step::Body {
            range: start..self.at,
            end: self.at == self.body_len,
        })
    }
}

impl Iterator for Delivery {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        loop {
            let step = match self.stage {
                0 => {
                    self.stage = 1;
                    (!self.hold.delay.is_zero()).then_some(Step::Wait(self.hold.delay))
                }
                1 => match self.pauses.as_ref().and_then(Pauses::wait_now) {
                    // A whole-server pause holds the answer until it ends (asked again each slice).
                    Some(wait) => Some(Step::Wait(wait)),
                    None => {
                        self.stage = 2;
                        self.hold.truth.map(Step::Record)
                    }
                },
                2 => {
                    self.stage = 3;
                    Some(match self.hold.fault {
                        Some(Fault::Reset) => Step::Reset,
                        Some(Fault::Close) => Step::Close,
                        Some(Fault::Stall) => Step::Stall,
                        _ => Step::Head {
                            end: self.head_only || self.body_len == 0,
                        },
                    })
                }
                3 if matches!(
                    self.hold.fault,
                    Some(Fault::Reset | Fault::Close | Fault::Stall)
                ) =>
                {
                    return None;
                }
                3 if self.body_len == 0 && self.hold.fault.is_none() => return None,
                3 => self.after_head(),
                4 => {
                    let step = self.piece();
                    if let (Some(Step::Body { end: false, .. }), true) = (&step, self.hold.rate > 0)
                    {
                        self.stage = 6; // a tick before the next piece
                    }
                    step
                }
                6 => {
                    self.stage = 4;
                    Some(Step::Wait(self.hold.tick()))
                }
                8 => {
                    self.stage = 7;
                    Some(Step::Wait(PACE_TICK))
                }
                7 => {
                    self.stage = 5;
                    Some(Step::Reset)
                }
                _ => return None,
            };
            if step.is_some() {
                return step;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(hold: Hold, len: usize, head_only: bool) -> Vec<Step> {
        Delivery::new(hold, len, head_only, None).collect()
    }

    const KEY: TruthKey = TruthKey {
        route: 0,
        outcome: 0,
        generation: 1,
    };
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_answer_not_held_is_its_head_and_body() {
        let body = Step::Body {
            range: 0..10,
            end: true,
        };
        assert_eq!(
            steps(Hold::default(), 10, false),
            [Step::Head { end: false }, body]
        );
        assert_eq!(steps(Hold::default(), 10, true), [Step::Head { end: true }]);
        assert_eq!(steps(Hold::default(), 0, false), [Step::Head { end: true }]);
    }

    #[test]
    fn delays_come_before_the_truth_and_between_head_and_body() {
        let hold = Hold {
            delay: 5 * MS,
            body_delay: 7 * MS,
            truth: Some(KEY),
            ..Hold::default()
        };
        assert_eq!(
            steps(hold, 4, false),
            [
                Step::Wait(5 * MS),
                Step::Record(KEY),
                Step::Head { end: false },
                Step::Wait(7 * MS),
                Step::Body {
                    range: 0..4,
                    end: true
                }
            ]
        );
    }

    #[test]
    fn a_pause_holds_the_head_after_the_delay_and_its_end_lets_it_go() {
        let hold = Hold {
            delay: 5 * MS,
            truth: Some(KEY),
            ..Hold::default()
        };
        let pauses = Pauses::new(Vec::new());
        pauses.pause_for(Duration::from_secs(60));
        let mut steps = Delivery::new(hold, 0, false, Some(pauses.clone()));
        assert_eq!(steps.next(), Some(Step::Wait(5 * MS)));
        assert_eq!(steps.next(), Some(Step::Wait(super::super::pause::RECHECK)));
        pauses.resume();
        assert_eq!(
            steps.collect::<Vec<_>>(),
            [Step::Record(KEY), Step::Head { end: true }]
        );
    }

    #[test]
    fn faults_replace_or_cut_the_answer() {
        for (fault, step) in [
            (Fault::Reset, Step::Reset),
            (Fault::Close, Step::Close),
            (Fault::Stall, Step::Stall),
        ] {
            let hold = Hold {
                fault: Some(fault),
                ..Hold::default()
            };
            assert_eq!(steps(hold, 10, false), [step]);
        }
        let hold = Hold {
            fault: Some(Fault::Truncate),
            ..Hold::default()
        };
        assert_eq!(
            steps(hold, 10, false),
            [
                Step::Head { end: false },
                Step::Body {
                    range: 0..5,
                    end: false
                },
                Step::Wait(PACE_TICK),
                Step::Reset
            ]
        );
    }

    #[test]
    fn a_paced_body_goes_a_piece_a_tick() {
        let hold = Hold {
            rate: 1000, // 10 bytes a tick
            ..Hold::default()
        };
        let s = steps(hold, 25, false);
        assert_eq!(s.len(), 1 + 3 + 2);
        assert_eq!(
            s[1..],
            [
                Step::Body {
                    range: 0..10,
                    end: false
                },
                Step::Wait(PACE_TICK),
                Step::Body {
                    range: 10..20,
                    end: false
                },
                Step::Wait(PACE_TICK),
                Step::Body {
                    range: 20..25,
                    end: true
                },
            ]
        );
    }

    #[test]
    fn a_rate_holds_to_the_byte_on_average() {
        for rate in [1, 7, 150, 1000, 12_345, 1 << 20] {
            let hold = Hold {
                rate,
                ..Hold::default()
            };
            let ticks_a_second =
                (Duration::from_secs(1).as_nanos() / hold.tick().as_nanos()) as u64;
            let sent: usize = (0..ticks_a_second).map(|n| hold.piece(n)).sum();
            assert_eq!(sent as u64, rate, "{rate} B/s over {ticks_a_second} ticks");
        }
    }
}
