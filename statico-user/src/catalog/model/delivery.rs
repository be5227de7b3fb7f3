//! How one answer is delivered, step by step — the same machine for every protocol. It follows a
//! route's [`Ticket`] through its pool (waiting in the queue until woken or its queue timeout,
//! served until its service is over, shed: the shed answer or the pool's fault), then the delay,
//! the whole-server pause, the ground truth, the head, the body delay and the body's pieces
//! (`rate=`) or its events (`stream=`, [`super::events`]), or the answer's fault.
//!
//! A streamed answer is a sequence: it keeps its ticket — its place in flight and its pool's
//! server — to its end, and a whole-server pause holds its events as it holds a head: an event
//! due while the server is paused goes when the pause ends (its lateness recorded), and the ones
//! after it keep their own due times.
//!
//! No I/O and no clock: each call of [`Delivery::next`] is given the time (a [`Clock`]) and
//! returns one [`Step`]: what to write (the head, a range of the body, a fault), or when to call
//! again (an instant, or when the ticket's waker fires: [`Delivery::wait_with`]). Each protocol
//! carries a step out in its own terms — HTTP/1.1's connection as bytes and connection states,
//! HTTP/2 and HTTP/3 as frames of one stream ([`crate::proto::held`] waits for them) — so a runtime
//! knows nothing of pools or tickets, and a new kind of answer is new steps here.
//!
//! An answer dropped before it is delivered drops its ticket, which counts the request `gone` and
//! gives back its place in the pool.

use std::ops::Range;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::events::{fits, Events, Next, EVENT_TICK};
use super::fault::Fault;
use super::hold::{Hold, TruthKey, PACE_TICK};
use super::load::Ticket;
use super::pause::Pauses;
use super::pool::{Fate, Shed};

/// Where a step reads the time: given by the driver (an [`Instant`]), or read by it only when a
/// step needs it — an answer that is not held, with no pause possible and no truth to record,
/// needs no time at all.
pub trait Clock {
    fn now(&mut self) -> Instant;
}

impl Clock for Instant {
    fn now(&mut self) -> Instant {
        *self
    }
}

/// What the driver does next for one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to write: call again at this instant (a delay, a service, a pause, the body delay,
    /// a paced body's next tick).
    Wait(Instant),
    /// Waiting in a pool's queue: call again when the waker given to [`Delivery::wait_with`] fires,
    /// or at this instant (the queue timeout).
    Queued(Instant),
    /// The request was shed with a status: the driver delivers its shed answer (of the length
    /// given to [`Delivery::new`]) instead, and calls again.
    Shed,
    /// Record this ground truth (an answer with a ticket has it recorded by the ticket), and call
    /// again.
    Record {
        key: TruthKey,
        drawn: Duration,
        held: Duration,
    },
    /// Write the head; `end`: it is the whole answer. Call again.
    Head { end: bool },
    /// The body is held apart from its head: call again once the head is on its way (the body
    /// delay counts from then).
    Sent,
    /// Write these bytes of the body; `end`: they are the last. Call again.
    Body { range: Range<usize>, end: bool },
    /// Write this event of a streamed body (made now, framed for the connection); `end`: the body
    /// ends with it. Call again.
    Event { bytes: Vec<u8>, end: bool },
    /// Write the answer's trailers, which end it (a gRPC reply's status). Call again.
    Trailers,
    /// The answer ends in this fault: `reset`, `close` and `stall` instead of the answer,
    /// `truncate` after the head and half the body.
    Fault(Fault),
    /// The answer is delivered.
    Done,
}

/// Where a delivery is: the next step's place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    /// Following the ticket (or, without one, on to the delay).
    Admit,
    Delay,
    Pause,
    Record,
    Head,
    /// The body straight after the head, or the cut of a truncate, or held apart.
    AfterHead,
    BodyDelay,
    Piece,
    /// The tick between two pieces of a paced body.
    Gap,
    /// A stream's next event: its wait.
    Event,
    /// After the body: the answer's trailers.
    Trailers,

    /// After a truncated body: its fault.
    Cut,
    #[default]
    Done,
}

/// One answer's delivery (see the module doc). The default is delivered already.
#[derive(Debug, Default)]
pub struct Delivery {
    hold: Hold,
    /// The body's length (0 for a HEAD, or for an answer that goes whole with its head).
    body_len: usize,
    /// A route's answer in a pool, or with a load model: its place, and where its truth goes.
    ticket: Option<Ticket>,
    /// When the request was complete, for the held time of a truth recorded without a ticket
    /// (`None`: held zero).
    arrived: Option<Instant>,
    /// The length of the shed answer's body, if the driver has one (else a status shed resets).
    shed_len: Option<usize>,
    stage: Stage,
    /// Body bytes already given out.
    at: usize,
    /// Pieces of a paced body already given out.
    ticks: u64,
    /// The server's pauses, when it has them: the head and a stream's events wait while one is
    /// in force.
    pauses: Option<Pauses>,
    /// A streamed body's events, and how far they have gone.
    events: Option<Box<Events>>,
    /// The answer ends with trailers (after its body, which then does not end it).
    trailers: bool,
}

impl Delivery {
    /// The delivery of an answer held as `hold` says, with a body of `body_len` bytes to send
    /// (0 for a HEAD), following `ticket` first if it has one. `arrived` is when the request was
    /// complete (read only when a truth is recorded without a ticket), `shed_len` the body length
    /// of the answer it gets if its pool sheds it with a status.
    pub fn new(
        hold: Hold,
        body_len: usize,
        ticket: Option<Ticket>,
        arrived: Option<Instant>,
        shed_len: Option<usize>,
    ) -> Delivery {
        Delivery {
            hold,
            body_len,
            ticket,
            arrived,
            shed_len,
            stage: Stage::Admit,
            at: 0,
            ticks: 0,
            pauses: None,
            events: None,
            trailers: false,
        }
    }

    /// The same delivery, its head and events held while one of the server's `pauses` is in
    /// force.
    pub fn paused_by(mut self, pauses: Option<Pauses>) -> Delivery {
        self.pauses = pauses;
        self
    }

    /// The same delivery, its body given out as these `events` (a streamed answer's, made as they
    /// fall due). The answer's fault strikes after the events' drawn number of them.
    pub fn with_events(mut self, events: Option<Box<Events>>) -> Delivery {
        self.events = events;
        self
    }

    /// The same delivery, ended by the answer's trailers (`trailers`) after its body.
    pub fn with_trailers(mut self, trailers: bool) -> Delivery {
        self.trailers = trailers;
        self
    }

    /// Where the body's last bytes go: the end of the answer, or the trailers next.
    fn after_body(&self) -> Stage {
        match self.trailers {
            true => Stage::Trailers,
            false => Stage::Done,
        }
    }

    /// The next step at `clock`'s time. `room`: the most body bytes the driver takes now (a paced
    /// or held-apart body's piece is cut to it; a body that follows its head at once goes whole).
    pub fn next(&mut self, clock: &mut impl Clock, room: usize) -> Step {
        loop {
            let step = match self.stage {
                Stage::Admit => self.admit(clock),
                Stage::Delay => {
                    self.stage = Stage::Pause;
                    let delay = self.hold.delay;
                    (!delay.is_zero()).then(|| Step::Wait(clock.now() + delay))
                }
                Stage::Pause => match paused(self.pauses.as_ref(), clock) {
                    Some(until) => Some(Step::Wait(until)),
                    None => {
                        self.stage = Stage::Record;
                        None
                    }
                },
                Stage::Record => {
                    self.stage = Stage::Head;
                    self.record(clock)
                }
                Stage::Head => Some(self.head()),
                Stage::AfterHead => self.after_head(),
                Stage::BodyDelay => {
                    self.stage = Stage::Piece;
                    let delay = self.hold.body_delay;
                    (!delay.is_zero()).then(|| Step::Wait(clock.now() + delay))
                }
                Stage::Piece => self.piece(room),
                Stage::Gap => {
                    self.stage = Stage::Piece;
                    Some(Step::Wait(clock.now() + self.hold.tick()))
                }
                Stage::Cut => {
                    self.stage = Stage::Done;
                    Some(Step::Fault(Fault::Truncate))
                }
                Stage::Event => Some(self.event(clock, room)),
                Stage::Trailers => {
                    self.stage = Stage::Done;
                    Some(Step::Trailers)
                }
                Stage::Done => Some(Step::Done),
            };
            if let Some(step) = step {
                return step;
            }
        }
    }

    /// While queued ([`Step::Queued`]): registers the waker the pool calls when it decides.
    /// Returns whether the request is still waiting (false: call [`Delivery::next`] now).
    pub fn wait_with(&self, waker: &Waker) -> bool {
        match (&self.ticket, self.stage) {
            (Some(ticket), Stage::Admit) => {
                matches!(ticket.register(waker), Fate::Waiting { .. })
            }
            _ => false,
        }
    }

    /// For a stream's events: how many bytes of room the driver should ask its flow control for
    /// before the next call — the due event's length once it is made and waits for room, else 0
    /// (none for another answer, whose pieces take any room).
    pub fn event_room(&self) -> Option<usize> {
        let events = self
            .events
            .as_ref()
            .filter(|_| self.stage == Stage::Event)?;
        Some(events.waiting_len().unwrap_or(0))
    }

    /// Whether a stream's event made and waiting for room goes with `room` (see
    /// [`super::events::fits`]).
    pub fn event_fits(&self, room: usize) -> bool {
        matches!(self.event_room(), Some(wanted) if wanted > 0 && fits(wanted, room))
    }

    /// What tells this request's place in a pool from every other (for a driver that registers
    /// a waker once per queued request): never given twice in the process.
    pub fn ticket_id(&self) -> Option<u64> {
        self.ticket.as_ref().map(Ticket::id)
    }

    /// Whether the answer holds a place in its pool (queued, or in service): a client that goes
    /// away then is counted `gone` (the delivery is dropped) rather than answered.
    pub fn admitting(&self) -> bool {
        self.stage == Stage::Admit && self.ticket.is_some()
    }

    /// How late the driver's timer may end the [`Step::Wait`] just given: a stream's wait for its
    /// next event (or for room for it) ends on a tick of [`EVENT_TICK`], shared with the other
    /// streams' events due in it; every other wait is exact (zero).
    pub fn tick(&self) -> Duration {
        match self.stage {
            Stage::Event => EVENT_TICK,
            _ => Duration::ZERO,
        }
    }

    /// Whether the head has been given out (a [`Step::Wait`] then holds the body, not the answer).
    pub fn started(&self) -> bool {
        matches!(
            self.stage,
            Stage::AfterHead
                | Stage::BodyDelay
                | Stage::Piece
                | Stage::Gap
                | Stage::Cut
                | Stage::Event
                | Stage::Trailers
        )
    }

    /// The ticket says what next: the end of its service, the queue, or the shed answer. Without
    /// a ticket, on to the delay (with one, its service is the delay).
    fn admit(&mut self, clock: &mut impl Clock) -> Option<Step> {
        let Some(ticket) = &self.ticket else {
            self.stage = Stage::Delay;
            return None;
        };
        let now = clock.now();
        match ticket.fate_at(now) {
            Fate::Serving { start, due } => {
                let head_at = ticket.head_at(start, due);
                if head_at > now {
                    return Some(Step::Wait(head_at));
                }
                self.stage = Stage::Pause;
                None
            }
            Fate::Waiting { deadline } => Some(Step::Queued(
                deadline.unwrap_or(now + crate::catalog::route::LONGEST_HOLD),
            )),
            Fate::Shed { .. } | Fate::Left => {
                self.stage = Stage::Pause;
                let how = ticket.shed_as();
                self.shed(how)
            }
        }
    }

    /// Shed: the shed answer, whole and at once (when there is one for a status), or the pool's
    /// fault. The ticket stays, to record the shed when it is delivered.
    fn shed(&mut self, how: Option<Shed>) -> Option<Step> {
        // A shed stream sends none of its events.
        self.events = None;
        let fault = match (how, self.shed_len) {
            (Some(Shed::Status(_)), Some(len)) => {
                (self.hold, self.body_len, self.trailers) = (Hold::default(), len, false);
                return Some(Step::Shed);
            }
            (Some(Shed::Close), _) => Fault::Close,
            _ => Fault::Reset,
        };
        self.hold = Hold {
            fault: Some(fault),
            ..Hold::default()
        };
        None
    }

    /// The answer is due: its ticket records its truth (and hands its server on), or the driver
    /// records it. A sequence keeps its ticket to its last event ([`Delivery::finish_sequence`]).
    fn record(&mut self, clock: &mut impl Clock) -> Option<Step> {
        if self.sequence() {
            return None;
        }
        if let Some(ticket) = self.ticket.take() {
            ticket.finish(clock.now(), Duration::ZERO);
            return None;
        }
        let key = self.hold.truth?;
        let held = match self.arrived {
            Some(arrived) => clock.now().saturating_duration_since(arrived),
            None => Duration::ZERO,
        };
        Some(Step::Record {
            key,
            drawn: self.hold.delay,
            held,
        })
    }

    /// The head, or a fault that replaces the whole answer (a stream's strikes between its events).
    fn head(&mut self) -> Step {
        match self.hold.fault.filter(|_| self.events.is_none()) {
            Some(fault @ (Fault::Reset | Fault::Close | Fault::Stall)) => {
                self.stage = Stage::Done;
                Step::Fault(fault)
            }
            _ => {
                self.stage = Stage::AfterHead;
                let events = self.events.as_ref().is_some_and(|e| !e.is_empty());
                Step::Head {
                    end: self.body_len == 0 && !events && !self.trailers,
                }
            }
        }
    }

    /// What follows the head: half the body and the cut (truncate), nothing, the body held apart
    /// (a body delay or a rate), or the whole body at once.
    fn after_head(&mut self) -> Option<Step> {
        if self.events.as_ref().is_some_and(|e| !e.is_empty()) {
            self.stage = Stage::Event;
            return Some(Step::Sent);
        }
        if let (Some(Fault::Truncate), None) = (self.hold.fault, &self.events) {
            self.stage = Stage::Cut;
            self.at = self.body_len / 2;
            return (self.at > 0).then_some(Step::Body {
                range: 0..self.at,
                end: false,
            });
        }
        if self.body_len == 0 {
            self.stage = self.after_body();
            return None;
        }
        if !self.hold.body_delay.is_zero() || self.hold.rate > 0 {
            self.stage = Stage::BodyDelay;
            return Some(Step::Sent);
        }
        self.stage = self.after_body();
        self.at = self.body_len;
        Some(Step::Body {
            range: 0..self.body_len,
            end: !self.trailers,
        })
    }

    /// The next piece of a body held apart: what its rate releases this tick, at most `room`.
    fn piece(&mut self, room: usize) -> Option<Step> {
        let start = self.at;
        let piece = self.hold.piece(self.ticks).min(room);
        self.ticks += 1;
        self.at = self.body_len.min(start.saturating_add(piece));
        let end = self.at >= self.body_len;
        self.stage = if end { self.after_body() } else { Stage::Gap };
        (start < self.at).then_some(Step::Body {
            range: start..self.at,
            end: end && !self.trailers,
        })
    }
}

/// A stream's events, given out one at a time as they fall due.
impl Delivery {
    /// A stream's next event when it is due and the driver has room for it, the fault if it
    /// strikes here, or what follows the events (the trailers, or the end). A pause in force
    /// holds whichever is due.
    fn event(&mut self, clock: &mut impl Clock, room: usize) -> Step {
        let Some(events) = self.events.as_mut() else {
            self.stage = Stage::Done;
            return Step::Done;
        };
        let now = clock.now();
        let ticket = &self.ticket;
        let in_flight = || ticket.as_ref().map_or(0, Ticket::in_flight);
        if let Some(until) = paused(self.pauses.as_ref(), clock) {
            // Held to the pause's end, unless the stream's cut (a gRPC deadline) comes first.
            let due = events
                .due(now, in_flight)
                .map_or(until, |due| due.max(until));
            match events.cut_at() {
                Some(cut) if cut <= now => events.end_here(),
                cut => return Step::Wait(cut.map_or(due, |cut| due.min(cut))),
            }
        }
        let (step, stage) = match events.next(now, room, PACE_TICK, in_flight) {
            Next::Event { bytes, last } => {
                let end = last && !self.trailers;
                return Step::Event { bytes, end };
            }
            Next::Wait(at) => return Step::Wait(at),
            Next::Fault(fault) => (Some(Step::Fault(fault)), Stage::Done),
            Next::Done => (None, self.after_body()),
        };
        self.stage = stage;
        self.finish_sequence(clock.now());
        step.unwrap_or_else(|| self.next(clock, room))
    }

    /// Whether the answer is a sequence: a stream that keeps its ticket — its place in flight
    /// and its pool's server — from its admission to its end, not only to its head.
    fn sequence(&self) -> bool {
        self.events.is_some() && self.ticket.as_ref().is_some_and(Ticket::is_sequence)
    }

    /// A sequence ended at `now` (its last event, a fault, or its client leaving): its ticket
    /// records its truth and gives back its place in flight and its server.
    fn finish_sequence(&mut self, now: Instant) {
        if let Some(ticket) = self.ticket.take() {
            let tail = self.events.as_ref().map_or(Duration::ZERO, |e| e.drawn());
            ticket.finish(now, tail);
        }
    }
}

/// A stream given up before its last event: its client left with the events it got.
impl Drop for Delivery {
    fn drop(&mut self) {
        if self.stage == Stage::Event {
            self.finish_sequence(Instant::now());
            if let Some(events) = &self.events {
                events.record_left();
            }
        }
    }
}

/// A whole-server pause in force: the answer waits until this instant, then asks again (see
/// [`super::pause`]). The one place a delivery asks about pauses; the clock is read only when
/// pauses are possible.
fn paused(pauses: Option<&Pauses>, clock: &mut impl Clock) -> Option<Instant> {
    let pauses = pauses?;
    let now = clock.now();
    pauses.wait(now).map(|wait| now + wait)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::catalog::model::hold::{Recorder, PACE_TICK};
    use crate::catalog::model::load::{Loads, RouteLoad};
    use crate::catalog::model::pool::Pool;
    use crate::catalog::route::pool_spec::PoolSpec;
    use crate::observe::truth::{GroundTruth, RouteInfo};

    const MS: Duration = Duration::from_millis(1);
    const KEY: TruthKey = TruthKey {
        route: 0,
        outcome: 0,
        generation: 1,
    };

    /// Drives `d` from `t0` as a stream does, jumping to each instant it waits for, to its end
    /// or its fault; returns the steps with their times (ms after `t0`).
    fn drive(d: &mut Delivery, t0: Instant) -> Vec<(u64, Step)> {
        let mut now = t0;
        let mut steps = Vec::new();
        loop {
            let step = d.next(&mut now, usize::MAX);
            let ms = (now - t0).as_millis() as u64;
            match &step {
                Step::Wait(at) | Step::Queued(at) => now = *at,
                Step::Done | Step::Fault(_) => {
                    steps.push((ms, step));
                    return steps;
                }
                _ => {}
            }
            steps.push((ms, step));
        }
    }

    /// The steps of an answer without a ticket, their times left out.
    fn steps(hold: Hold, len: usize) -> Vec<Step> {
        let mut d = Delivery::new(hold, len, None, None, None);
        let t0 = Instant::now();
        drive(&mut d, t0).into_iter().map(|(_, s)| s).collect()
    }

    fn body(range: Range<usize>, end: bool) -> Step {
        Step::Body { range, end }
    }

    #[test]
    fn an_answer_not_held_is_its_head_and_body() {
        assert_eq!(
            steps(Hold::default(), 10),
            [Step::Head { end: false }, body(0..10, true), Step::Done]
        );
        assert_eq!(
            steps(Hold::default(), 0),
            [Step::Head { end: true }, Step::Done]
        );
    }

    #[test]
    fn trailers_end_an_answer_after_its_body() {
        let t0 = Instant::now();
        let steps = |len| {
            let mut d = Delivery::new(Hold::default(), len, None, None, None).with_trailers(true);
            drive(&mut d, t0)
                .into_iter()
                .map(|(_, s)| s)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            steps(10),
            [
                Step::Head { end: false },
                body(0..10, false),
                Step::Trailers,
                Step::Done
            ]
        );
        assert_eq!(
            steps(0),
            [Step::Head { end: false }, Step::Trailers, Step::Done]
        );
    }

    #[test]
    fn delays_come_before_the_truth_and_between_head_and_body() {
        let hold = Hold {
            delay: 5 * MS,
            body_delay: 7 * MS,
            truth: Some(KEY),
            ..Hold::default()
        };
        let t0 = Instant::now();
        let mut d = Delivery::new(hold, 4, None, Some(t0), None);
        assert_eq!(
            drive(&mut d, t0),
            [
                (0, Step::Wait(t0 + 5 * MS)),
                (
                    5,
                    Step::Record {
                        key: KEY,
                        drawn: 5 * MS,
                        held: 5 * MS
                    }
                ),
                (5, Step::Head { end: false }),
                (5, Step::Sent),
                (5, Step::Wait(t0 + 12 * MS)),
                (12, body(0..4, true)),
                (12, Step::Done),
            ]
        );
    }

    #[test]
    fn faults_replace_or_cut_the_answer() {
        for fault in [Fault::Reset, Fault::Close, Fault::Stall] {
            let hold = Hold {
                fault: Some(fault),
                ..Hold::default()
            };
            assert_eq!(steps(hold, 10), [Step::Fault(fault)]);
        }
        let hold = Hold {
            fault: Some(Fault::Truncate),
            ..Hold::default()
        };
        assert_eq!(
            steps(hold, 10),
            [
                Step::Head { end: false },
                body(0..5, false),
                Step::Fault(Fault::Truncate)
            ]
        );
        assert_eq!(
            steps(hold, 0),
            [Step::Head { end: true }, Step::Fault(Fault::Truncate)]
        );
    }

    #[test]
    fn a_paced_body_goes_a_piece_a_tick_and_no_more_than_the_room() {
        let hold = Hold {
            rate: 1000, // 10 bytes a tick
            ..Hold::default()
        };
        let t0 = Instant::now();
        let mut d = Delivery::new(hold, 25, None, None, None);
        let tick = |n: u32| t0 + PACE_TICK * n;
        assert_eq!(
            drive(&mut d, t0),
            [
                (0, Step::Head { end: false }),
                (0, Step::Sent),
                (0, body(0..10, false)),
                (0, Step::Wait(tick(1))),
                (10, body(10..20, false)),
                (10, Step::Wait(tick(2))),
                (20, body(20..25, true)),
                (20, Step::Done),
            ]
        );
        // A driver with room for 4 bytes gets 4, and the rest a tick later.
        let hold = Hold {
            body_delay: MS,
            ..Hold::default()
        };
        let mut d = Delivery::new(hold, 6, None, None, None);
        let mut now = t0;
        let mut got = Vec::new();
        while got.last() != Some(&Step::Done) {
            let step = d.next(&mut now, 4);
            if let Step::Wait(at) = step {
                now = at;
            }
            got.push(step);
        }
        assert_eq!(
            got[3..6],
            [
                body(0..4, false),
                Step::Wait(t0 + MS + PACE_TICK),
                body(4..6, true)
            ]
        );
    }

    /// Events of `size` bytes, the first 10 ms after the head, then 5 ms apart.
    #[derive(Debug)]
    struct Ticks {
        size: usize,
    }

    impl crate::catalog::model::events::Render for Ticks {
        fn event(&self, i: u32, _chunked: bool, _last: bool, out: &mut Vec<u8>) {
            out.extend(std::iter::repeat_n(b'0' + i as u8, self.size));
        }

        fn wait(&self, first: bool, _: u64, _: &mut rand::rngs::SmallRng) -> Duration {
            if first {
                10 * MS
            } else {
                5 * MS
            }
        }
    }

    fn stream(size: usize, events: u32, fault: Option<Fault>) -> Delivery {
        stream_seeded(size, events, fault, 3)
    }

    fn stream_seeded(size: usize, events: u32, fault: Option<Fault>, seed: u64) -> Delivery {
        use crate::catalog::model::events::{Events, StreamDraw};
        let draw = StreamDraw {
            events,
            from: 0,
            seed,
            cut: None,
        };
        let events = Events::new(Arc::new(Ticks { size }), draw, false, fault, None);
        Delivery::new(Hold::default(), 0, None, None, None).with_events(Some(Box::new(events)))
    }

    fn event(bytes: &[u8], end: bool) -> Step {
        Step::Event {
            bytes: bytes.to_vec(),
            end,
        }
    }

    #[test]
    fn a_stream_gives_each_event_at_its_due_time_after_the_head() {
        let t0 = Instant::now();
        assert_eq!(
            drive(&mut stream(2, 3, None), t0),
            [
                (0, Step::Head { end: false }),
                (0, Step::Sent),
                (0, Step::Wait(t0 + 10 * MS)),
                (10, event(b"00", false)),
                (10, Step::Wait(t0 + 15 * MS)),
                (15, event(b"11", false)),
                (15, Step::Wait(t0 + 20 * MS)),
                (20, event(b"22", true)),
                (20, Step::Done),
            ]
        );
    }

    #[test]
    fn an_event_waits_for_room_and_a_late_one_does_not_push_back_the_next() {
        let t0 = Instant::now();
        let mut d = stream(4, 2, None);
        let mut now = t0;
        assert_eq!(d.next(&mut now, usize::MAX), Step::Head { end: false });
        assert_eq!(d.next(&mut now, usize::MAX), Step::Sent);
        assert_eq!(d.next(&mut now, usize::MAX), Step::Wait(t0 + 10 * MS));
        now = t0 + 10 * MS;
        // No room for 4 bytes: a tick later, then it goes, late.
        assert_eq!(d.next(&mut now, 3), Step::Wait(now + PACE_TICK));
        now += PACE_TICK;
        assert_eq!(d.next(&mut now, 4), event(b"0000", false));
        // Due 5 ms after the first was due (15 ms), which has passed: at once.
        assert_eq!(d.next(&mut now, 4), event(b"1111", true));
    }

    #[test]
    fn a_fault_strikes_between_events_and_never_after_the_last() {
        let mut struck_after = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let t0 = Instant::now();
            let steps = drive(&mut stream_seeded(1, 3, Some(Fault::Close), seed), t0);
            let events = steps
                .iter()
                .filter(|(_, s)| matches!(s, Step::Event { .. }))
                .count();
            assert!(events < 3, "{steps:?}");
            assert_eq!(
                steps.last().map(|(_, s)| s),
                Some(&Step::Fault(Fault::Close))
            );
            struck_after.insert(events);
        }
        assert_eq!(struck_after.into_iter().collect::<Vec<_>>(), [0, 1, 2]);
    }

    /// Where a test's streams record their truth: one streamed route.
    fn streamed_truth() -> Arc<GroundTruth> {
        let route = RouteInfo {
            name: "GET /s".into(),
            outcomes: ["200", "gone"].map(String::from).to_vec(),
            streamed: true,
            ..RouteInfo::default()
        };
        Arc::new(GroundTruth::new(vec![route], 1))
    }

    /// Three one-byte events (the first 10 ms after the head, then 5 ms apart) whose truth goes to
    /// `truth`'s route 0: the events, and the recorder and key they record with.
    fn three_events(
        truth: &Arc<GroundTruth>,
    ) -> (crate::catalog::model::events::Events, Recorder, TruthKey) {
        use crate::catalog::model::events::{Events, StreamDraw};
        let key = TruthKey {
            generation: truth.generation(),
            ..KEY
        };
        let draw = StreamDraw {
            events: 3,
            from: 0,
            seed: 1,
            cut: None,
        };
        let recorder = Recorder::new(truth.clone(), 0);
        let truth_of = Some((recorder.clone(), key, 1));
        let events = Events::new(Arc::new(Ticks { size: 1 }), draw, false, None, truth_of);
        (events, recorder, key)
    }

    #[test]
    fn only_a_streams_waits_for_its_events_may_share_a_tick() {
        let t0 = Instant::now();
        let hold = Hold {
            delay: MS,
            ..Hold::default()
        };
        let mut held = Delivery::new(hold, 4, None, None, None);
        let mut now = t0;
        assert_eq!(held.next(&mut now, usize::MAX), Step::Wait(t0 + MS));
        assert_eq!(
            held.tick(),
            Duration::ZERO,
            "a held answer's delay is exact"
        );
        let mut s = stream(1, 2, None);
        assert_eq!(s.next(&mut now, usize::MAX), Step::Head { end: false });
        assert_eq!(s.next(&mut now, usize::MAX), Step::Sent);
        assert_eq!(s.next(&mut now, usize::MAX), Step::Wait(t0 + 10 * MS));
        assert_eq!(s.tick(), EVENT_TICK, "the first event's wait");
        now = t0 + 10 * MS;
        assert_eq!(s.next(&mut now, usize::MAX), event(b"0", false));
        assert_eq!(s.next(&mut now, usize::MAX), Step::Wait(t0 + 15 * MS));
        assert_eq!(s.tick(), EVENT_TICK, "a gap");
        now = t0 + 15 * MS;
        assert_eq!(s.next(&mut now, usize::MAX), event(b"1", true));
        assert_eq!(s.next(&mut now, usize::MAX), Step::Done);
        assert_eq!(s.tick(), Duration::ZERO);
    }

    /// `events` delivered from `t0`, the server paused over `pause` (from `t0`).
    fn paused_stream(
        events: crate::catalog::model::events::Events,
        t0: Instant,
        pause: Range<Duration>,
    ) -> Delivery {
        let window = crate::catalog::model::schedule::Window {
            at: pause.start,
            length: pause.end - pause.start,
            every: None,
        };
        Delivery::new(Hold::default(), 0, None, None, None)
            .paused_by(Some(Pauses::starting(t0, vec![window])))
            .with_events(Some(Box::new(events)))
    }

    #[test]
    fn a_pause_holds_the_events_due_in_it_to_its_end_and_the_truth_has_how_late() {
        // Events due 10, 15 and 20 ms after the head; the server paused from 12 to 22 ms.
        let t0 = Instant::now();
        let truth = streamed_truth();
        let (events, _, _) = three_events(&truth);
        let mut d = paused_stream(events, t0, 12 * MS..22 * MS);
        assert_eq!(
            drive(&mut d, t0),
            [
                (0, Step::Head { end: false }),
                (0, Step::Sent),
                (0, Step::Wait(t0 + 10 * MS)),
                (10, event(b"0", false)),
                (10, Step::Wait(t0 + 15 * MS)),
                // Due at 15, in the pause: held to its end, then the one due at 20 with it.
                (15, Step::Wait(t0 + 22 * MS)),
                (22, event(b"1", false)),
                (22, event(b"2", true)),
                (22, Step::Done),
            ]
        );
        let json: serde_json::Value = serde_json::from_str(&truth.json()).unwrap();
        let late = &json["routes"][0]["stream"]["late_us"];
        assert_eq!(late["count"], 3, "{json}");
        let max = late["max"].as_f64().unwrap();
        assert!((6990.0..7010.0).contains(&max), "{late}");
    }

    #[test]
    fn a_pause_does_not_hold_a_stream_past_its_cut() {
        use crate::catalog::model::events::{Events, StreamDraw};
        // Events due 10, 15 and 20 ms after the head, cut at 12 ms (a gRPC deadline); the server
        // paused from 11 to 30 ms.
        let t0 = Instant::now();
        let draw = StreamDraw {
            events: 3,
            from: 0,
            seed: 1,
            cut: Some(12 * MS),
        };
        let events = Events::new(Arc::new(Ticks { size: 1 }), draw, false, None, None);
        let mut d = paused_stream(events, t0, 11 * MS..30 * MS);
        assert_eq!(
            drive(&mut d, t0),
            [
                (0, Step::Head { end: false }),
                (0, Step::Sent),
                (0, Step::Wait(t0 + 10 * MS)),
                (10, event(b"0", false)),
                (10, Step::Wait(t0 + 12 * MS)),
                // The cut, in the pause: the stream ends there, not at the pause's end.
                (12, Step::Done),
            ]
        );
    }

    #[test]
    fn a_gap_drawn_from_inflight_counts_the_streams_open_then_itself_included() {
        use crate::catalog::model::events::{Events, StreamDraw};
        // gap=inflight:10ms:5ms on a route with three streams open at once.
        let route = crate::catalog::route::spec::parse_spec(
            "/s stream=ndjson events=3 gap=inflight:10ms:5ms",
        )
        .unwrap();
        let source = Arc::new(crate::catalog::feed::EventSource::new(
            route.stream.as_ref().unwrap(),
            &bytes::Bytes::new(),
        ));
        let truth = streamed_truth();
        let loads = Arc::new(Loads::new(vec![RouteLoad::new(None, None, None)], vec![]));
        let key = TruthKey {
            generation: truth.generation(),
            ..KEY
        };
        let t0 = Instant::now();
        let open = |n: u64| {
            let draw = StreamDraw {
                events: 3,
                from: 0,
                seed: n,
                cut: None,
            };
            let recorder = Recorder::new(truth.clone(), 0);
            let truth_of = Some((recorder.clone(), key, 1));
            let events = Events::new(source.clone(), draw, false, None, truth_of);
            let ticket = Ticket::new(recorder, key, Duration::ZERO, 1, t0, n).for_sequence(true);
            let ticket = loads.admit(ticket, t0);
            Delivery::new(Hold::default(), 0, Some(ticket), Some(t0), None)
                .with_events(Some(Box::new(events)))
        };
        let mut streams: Vec<Delivery> = (0..3).map(open).collect();
        assert_eq!(loads.in_flight_of(0), 3);
        // Each gives its head and its first event at once, and draws its gap with three open.
        for d in &mut streams {
            let mut now = t0;
            let steps: Vec<Step> = (0..4).map(|_| d.next(&mut now, usize::MAX)).collect();
            assert!(matches!(steps[2], Step::Event { .. }), "{steps:?}");
            assert_eq!(steps[3], Step::Wait(t0 + 25 * MS));
        }
        // The first ends at its last event (its next gap drawn with three still open): two left.
        assert_eq!(
            drive(&mut streams[0], t0 + 25 * MS)[1..],
            [
                (0, Step::Wait(t0 + 50 * MS)),
                (25, event(b"{\"i\":2}\n", true)),
                (25, Step::Done)
            ]
        );
        assert_eq!(loads.in_flight_of(0), 2);
        // The second draws its next gap with two open: 10 + 5 × 2 ms.
        let mut now = t0 + 25 * MS;
        assert!(matches!(
            streams[1].next(&mut now, usize::MAX),
            Step::Event { .. }
        ));
        assert_eq!(
            streams[1].next(&mut now, usize::MAX),
            Step::Wait(now + 20 * MS)
        );
        // Its client leaves: one left, whose next gap is 10 + 5 × 1 ms.
        drop(streams.remove(1));
        assert_eq!(loads.in_flight_of(0), 1);
        assert!(matches!(
            streams[1].next(&mut now, usize::MAX),
            Step::Event { .. }
        ));
        assert_eq!(
            streams[1].next(&mut now, usize::MAX),
            Step::Wait(now + 15 * MS)
        );
        drop(streams);
        assert_eq!(loads.in_flight_of(0), 0);
        let json: serde_json::Value = serde_json::from_str(&truth.json()).unwrap();
        let gap = &json["routes"][0]["stream"]["gap_us"];
        assert_eq!(gap["count"].as_f64(), Some(4.0), "{gap}");
        let max = gap["max"].as_f64().unwrap();
        assert!((24_990.0..25_010.0).contains(&max), "{gap}");
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

    /// One pooled route (`capacity` servers, `queue`, `timeout`, shed with 503), and the ground
    /// truth its tickets record.
    struct Pooled {
        loads: Arc<Loads>,
        truth: Arc<GroundTruth>,
    }

    impl Pooled {
        fn new(capacity: usize, queue: Option<usize>, timeout: Option<Duration>) -> Pooled {
            let pool = Arc::new(Pool::new(
                &PoolSpec {
                    name: "p".into(),
                    capacity,
                    queue,
                    queue_timeout: timeout,
                    shed: Shed::Status(503),
                },
                &super::super::pool::OrphanClock::default(),
            ));
            let route = RouteInfo {
                name: "GET /".into(),
                outcomes: ["200", "gone", "shed"].map(String::from).to_vec(),
                pooled: true,
                pool: Some(0),
                ..RouteInfo::default()
            };
            Pooled {
                loads: Arc::new(Loads::new(
                    vec![RouteLoad::new(None, Some(0), Some(2))],
                    vec![pool],
                )),
                truth: Arc::new(GroundTruth::new(vec![route], 1)),
            }
        }

        /// A request complete at `now`, served for `service`, whose shed answer has a body of 3.
        fn delivery(&self, service: Duration, now: Instant) -> Delivery {
            self.whole(service, now, false)
        }

        /// As [`Pooled::delivery`], an inference request's (an openai route's whole answer) if
        /// `inference`.
        fn whole(&self, service: Duration, now: Instant, inference: bool) -> Delivery {
            let key = TruthKey {
                generation: self.truth.generation(),
                ..KEY
            };
            let recorder = Recorder::new(self.truth.clone(), 0);
            let ticket = Ticket::new(recorder, key, service, 1, now, 0).for_inference(inference);
            let ticket = self.loads.admit(ticket, now);
            let hold = Hold {
                delay: service,
                truth: Some(key),
                ..Hold::default()
            };
            Delivery::new(hold, 10, Some(ticket), Some(now), Some(3))
        }

        /// A sequence complete at `now`: held `delay`, then three one-byte events (the first 10 ms
        /// after its head, then 5 ms apart), keeping its server to its last.
        fn sequence(&self, delay: Duration, now: Instant) -> Delivery {
            let (events, recorder, key) = three_events(&self.truth);
            let hold = Hold {
                delay,
                truth: Some(key),
                ..Hold::default()
            };
            let ticket = Ticket::new(recorder, key, delay, 1, now, 0).for_sequence(true);
            let ticket = self.loads.admit(ticket, now);
            Delivery::new(hold, 0, Some(ticket), Some(now), Some(3))
                .with_events(Some(Box::new(events)))
        }

        fn outcomes(&self) -> String {
            let json = self.truth.json();
            let at = json.find("\"outcomes\"").unwrap();
            json[at..at + json[at..].find('}').unwrap() + 1].to_string()
        }
    }

    #[test]
    fn a_served_request_waits_out_its_service_then_its_ticket_records_it() {
        let p = Pooled::new(1, None, None);
        let t0 = Instant::now();
        let mut d = p.delivery(20 * MS, t0);
        assert_eq!(
            drive(&mut d, t0),
            [
                (0, Step::Wait(t0 + 20 * MS)),
                (20, Step::Head { end: false }),
                (20, body(0..10, true)),
                (20, Step::Done),
            ]
        );
        assert!(p.outcomes().contains("\"200\":1"), "{}", p.outcomes());
    }

    #[test]
    fn a_queued_request_waits_for_the_pool_then_is_served() {
        let p = Pooled::new(1, None, None);
        let t0 = Instant::now();
        let mut first = p.delivery(20 * MS, t0);
        let mut second = p.delivery(5 * MS, t0 + MS);
        let mut now = t0 + MS;
        let queued = second.next(&mut now, usize::MAX);
        assert!(matches!(queued, Step::Queued(_)), "{queued:?}");
        assert!(second.admitting() && second.ticket_id().is_some());
        let waker = std::task::Waker::noop();
        assert!(second.wait_with(waker), "still waiting");
        // The first is delivered at the end of its service and hands its server on.
        drive(&mut first, t0);
        assert!(!second.wait_with(waker), "decided");
        assert_eq!(
            drive(&mut second, t0 + 20 * MS)[..2],
            [
                (0, Step::Wait(t0 + 25 * MS)),
                (5, Step::Head { end: false })
            ]
        );
        assert!(!second.admitting());
    }

    #[test]
    fn a_shed_request_gets_the_shed_answer_or_a_reset() {
        let p = Pooled::new(1, Some(0), None);
        let t0 = Instant::now();
        let _first = p.delivery(20 * MS, t0);
        let mut shed = p.delivery(5 * MS, t0);
        assert_eq!(
            drive(&mut shed, t0),
            [
                (0, Step::Shed),
                (0, Step::Head { end: false }),
                (0, body(0..3, true)),
                (0, Step::Done),
            ]
        );
        assert!(p.outcomes().contains("\"shed\":1"), "{}", p.outcomes());
        // Without a shed answer, a status shed resets.
        let mut bare = p.delivery(5 * MS, t0);
        bare.shed_len = None;
        assert_eq!(drive(&mut bare, t0), [(0, Step::Fault(Fault::Reset))]);
    }

    #[test]
    fn a_waiter_is_shed_at_its_queue_timeout() {
        let p = Pooled::new(1, None, Some(10 * MS));
        let t0 = Instant::now();
        let _first = p.delivery(50 * MS, t0);
        let mut second = p.delivery(5 * MS, t0);
        assert_eq!(
            drive(&mut second, t0)[..2],
            [(0, Step::Queued(t0 + 10 * MS)), (10, Step::Shed)]
        );
    }

    #[test]
    fn a_sequence_keeps_its_server_to_its_last_event() {
        let p = Pooled::new(1, None, None);
        let t0 = Instant::now();
        let mut first = p.sequence(2 * MS, t0);
        let mut second = p.delivery(5 * MS, t0 + MS);
        let steps = drive(&mut first, t0);
        assert_eq!(
            steps[..3],
            [
                (0, Step::Wait(t0 + 2 * MS)),
                (2, Step::Head { end: false }),
                (2, Step::Sent)
            ]
        );
        assert_eq!(steps.last(), Some(&(22, Step::Done)));
        // The second starts when the first's last event went (its tail, 20 ms, after its head).
        assert_eq!(
            drive(&mut second, t0 + MS)[0],
            (0, Step::Wait(t0 + 27 * MS))
        );
        assert!(p.outcomes().contains("\"200\":2"), "{}", p.outcomes());
    }

    #[test]
    fn a_sequence_left_mid_stream_frees_its_server_at_once() {
        let p = Pooled::new(1, None, None);
        let t0 = Instant::now();
        let mut first = p.sequence(Duration::ZERO, t0);
        let mut second = p.delivery(5 * MS, t0 + MS);
        let mut now = t0;
        loop {
            match first.next(&mut now, usize::MAX) {
                Step::Wait(at) => now = at,
                Step::Event { .. } => break,
                _ => {}
            }
        }
        drop(first);
        let mut later = Instant::now().max(t0 + 12 * MS);
        match second.next(&mut later, usize::MAX) {
            Step::Wait(at) => assert!(at < t0 + 20 * MS, "the server was kept to {at:?}"),
            Step::Head { .. } => {} // served already
            other => panic!("{other:?}"),
        }
        assert!(p.outcomes().contains("\"gone\":1"), "{}", p.outcomes());
    }

    #[test]
    fn a_whole_answer_left_in_service_keeps_its_server_unless_it_is_an_inference_request() {
        for inference in [false, true] {
            let p = Pooled::new(1, None, None);
            let t0 = Instant::now();
            let mut first = p.whole(Duration::from_secs(1), t0, inference);
            let mut second = p.delivery(5 * MS, t0);
            let mut now = t0;
            let served = first.next(&mut now, usize::MAX);
            assert_eq!(served, Step::Wait(t0 + Duration::from_secs(1)));
            assert!(matches!(second.next(&mut now, usize::MAX), Step::Queued(_)));
            drop(first);
            let mut later = Instant::now();
            let step = second.next(&mut later, usize::MAX);
            match inference {
                // Aborted: the second is served from the moment the first's client left.
                true => assert!(
                    matches!(step, Step::Wait(at) if at <= later + 5 * MS),
                    "{step:?}"
                ),
                // Kept to the end of its service: the second waits for it.
                false => assert!(matches!(step, Step::Queued(_)), "{step:?}"),
            }
            assert!(p.outcomes().contains("\"gone\":1"), "{}", p.outcomes());
        }
    }

    #[test]
    fn a_whole_answers_tokens_count_when_it_is_given_out_and_not_when_its_client_left() {
        let route = RouteInfo {
            name: "POST /v1/*".into(),
            outcomes: ["200", "gone"].map(String::from).to_vec(),
            streamed: true,
            model: Some("m".into()),
            ..RouteInfo::default()
        };
        let truth = Arc::new(GroundTruth::new(vec![route], 1));
        let key = TruthKey {
            generation: truth.generation(),
            ..KEY
        };
        let t0 = Instant::now();
        let whole = |tokens: u64| {
            let recorder = Recorder::new(truth.clone(), 0);
            let ticket = Ticket::new(recorder, key, 10 * MS, 1, t0, 0)
                .for_inference(true)
                .giving(tokens);
            let hold = Hold {
                delay: 10 * MS,
                truth: Some(key),
                tokens,
                ..Hold::default()
            };
            Delivery::new(hold, 10, Some(ticket), Some(t0), None)
        };
        let completion = || {
            let json: serde_json::Value = serde_json::from_str(&truth.json()).unwrap();
            json["routes"][0]["stream"]["completion_tokens"].as_u64()
        };
        let mut left = whole(100);
        let mut now = t0;
        assert_eq!(left.next(&mut now, usize::MAX), Step::Wait(t0 + 10 * MS));
        drop(left);
        assert_eq!(completion(), Some(0), "a whole answer left before it went");
        drive(&mut whole(7), t0);
        assert_eq!(completion(), Some(7), "a whole answer given out");
    }

    #[test]
    fn a_delivery_dropped_before_its_answer_counts_gone() {
        let p = Pooled::new(1, None, None);
        let t0 = Instant::now();
        let mut d = p.delivery(20 * MS, t0);
        let mut now = t0;
        assert_eq!(d.next(&mut now, usize::MAX), Step::Wait(t0 + 20 * MS));
        drop(d);
        assert!(p.outcomes().contains("\"gone\":1"), "{}", p.outcomes());
    }
}
