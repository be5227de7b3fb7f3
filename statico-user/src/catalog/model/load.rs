//! The state a route shares between workers while it answers: how many of its requests are in
//! flight (for `inflight:BASE:PER`, in `delay=` or a stream's `first=` and `gap=`), and its
//! [`Pool`]. And the [`Ticket`] every held route answer carries from the moment its request is
//! complete to the moment it is answered — or its client goes away.
//!
//! A ticket is the one place where a held answer's fate is read (served now, waiting in a pool's
//! queue, shed) and where its ground truth is recorded: [`Ticket::finish`] when it is answered
//! (outcome, wait, service, held), and on drop, if it never was, as outcome `gone` (its client left,
//! or the connection ended) — so no runtime or protocol records, or forgets, a departure on its own.
//! Dropping it also gives back what it held: its in-flight count, its place in a queue, or (at the
//! end of its service) its server.
//!
//! A streamed answer's ticket is a *sequence*'s ([`Ticket::for_sequence`]): it is answered at its
//! last event, not at its head, so it counts in flight and keeps its pool's server until then. How
//! long that is may not be known when it is admitted (a gap drawn from the count in flight), so its
//! pool holds its server without an end, and the sequence's end — its last event, a fault, its
//! client leaving — frees it at that moment.
//!
//! A client that leaves in service keeps its server busy to the end of its service time, as a
//! real server would — unless its ticket *aborts* ([`Ticket::aborts`]): a sequence's (its end is
//! not known) or an inference request's (an openai route's, streamed or whole, which an inference
//! server aborts), whose server is freed at once.
//!
//! A route without a load model and without a hold never makes a ticket: its hot path is unchanged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::dist::in_flight_wait;
use super::pool::{Fate, Pool, Shed, Slot};
use crate::catalog::model::hold::{Recorder, TruthKey};
use crate::catalog::route::LONGEST_HOLD;

/// A sequence's service as the pool schedules it: longer than any stream runs (100 000 events of
/// up to `LONGEST_HOLD` each), so its server is held until the sequence ends and cuts it short.
const SEQUENCE_HOLD: Duration = Duration::from_secs(86_400 * 365 * 20);

/// Every route's shared load state, and the pools (shared as `Arc<Loads>` by every worker).
#[derive(Debug, Default)]
pub struct Loads {
    routes: Vec<RouteLoad>,
    pools: Vec<Arc<Pool>>,
}

/// One route's load model and its extra outcomes.
#[derive(Debug, Default)]
pub struct RouteLoad {
    /// `delay=inflight:BASE:PER`: its parameters.
    pub in_flight: Option<(Duration, Duration)>,
    /// Its requests in flight now (held or queued), across every thread.
    count: AtomicU64,
    /// Its pool, an index into [`Loads::pools`].
    pub pool: Option<usize>,
    /// The outcome number of `shed` (a pooled route's).
    pub shed: Option<u8>,
}

impl RouteLoad {
    pub fn new(
        in_flight: Option<(Duration, Duration)>,
        pool: Option<usize>,
        shed: Option<u8>,
    ) -> RouteLoad {
        RouteLoad {
            in_flight,
            count: AtomicU64::new(0),
            pool,
            shed,
        }
    }
}

impl Loads {
    pub fn new(routes: Vec<RouteLoad>, pools: Vec<Arc<Pool>>) -> Loads {
        Loads { routes, pools }
    }

    /// Route `route`'s pool, if it has one.
    pub fn pool_of(&self, route: u16) -> Option<&Arc<Pool>> {
        let i = self.routes.get(usize::from(route))?.pool?;
        self.pools.get(i)
    }

    /// Admits `ticket`, whose request of its route is complete at `now`: counted in flight (its
    /// delay recomputed if the route's delay depends on the load), then admitted to the route's
    /// pool (served, queued or shed) for its service ([`Ticket::service`]).
    pub fn admit(self: &Arc<Self>, mut ticket: Ticket, now: Instant) -> Ticket {
        let Some(route) = self.routes.get(usize::from(ticket.key.route)) else {
            return ticket;
        };
        let n = route.count.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some((base, per)) = route.in_flight {
            ticket.delay = in_flight_wait(base, per, n).min(LONGEST_HOLD);
        }
        ticket.shed = route.shed;
        ticket.loads = Some(self.clone());
        if let Some(pool) = route.pool.and_then(|i| self.pools.get(i)) {
            ticket.slot = Some(pool.arrive(now, ticket.service()));
        }
        ticket
    }

    /// Route `route`'s requests in flight now (see [`crate::observe::truth::InFlight`]).
    pub fn in_flight_of(&self, route: u16) -> u64 {
        self.routes
            .get(usize::from(route))
            .map_or(0, |r| r.count.load(Ordering::Relaxed))
    }

    /// What a request of route `route` not admitted yet sees in flight: the count, itself included.
    pub fn in_flight_with_new(&self, route: u16) -> u64 {
        self.in_flight_of(route) + 1
    }

    fn left(&self, route: u16) {
        if let Some(r) = self.routes.get(usize::from(route)) {
            r.count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl crate::observe::truth::InFlight for Loads {
    fn in_flight(&self, route: usize) -> u64 {
        u16::try_from(route).map_or(0, |route| self.in_flight_of(route))
    }
}

/// Where one server's tickets take their ids ([`Ticket::id`]): a handle, cloned cheaply (one
/// `Arc`), shared by every routes table of the server, so no id is given twice while it runs.
#[derive(Clone, Debug, Default)]
pub struct TicketIds(Arc<AtomicU64>);

impl TicketIds {
    /// An id not given before.
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// One held route answer's place: see the module doc.
#[derive(Debug)]
pub struct Ticket {
    recorder: Recorder,
    key: TruthKey,
    arrived: Instant,
    /// Its service up to its head: the drawn delay (recomputed by a load model).
    delay: Duration,
    /// A sequence: it keeps its server past its head, to its end (see the module doc).
    sequence: bool,
    /// An inference request's (an openai route's): its client leaving aborts it.
    inference: bool,
    /// The output tokens a whole answer gives out, counted when it is answered.
    tokens: u64,
    /// Set when the route has a load model: where to give back the in-flight count.
    loads: Option<Arc<Loads>>,
    /// Its place in the route's pool.
    slot: Option<Arc<Slot>>,
    gone: u8,
    shed: Option<u8>,
    /// Recorded (and everything given back) already.
    done: bool,
    id: u64,
}

impl Ticket {
    /// A ticket served at once from `now`, for `delay` (until [`Loads::admit`] admits it to its
    /// route's load model); a departure counts as outcome `gone`; `id` from the server's
    /// [`TicketIds`].
    pub fn new(
        recorder: Recorder,
        key: TruthKey,
        delay: Duration,
        gone: u8,
        now: Instant,
        id: u64,
    ) -> Ticket {
        Ticket {
            recorder,
            key,
            arrived: now,
            delay,
            sequence: false,
            inference: false,
            tokens: 0,
            loads: None,
            slot: None,
            gone,
            shed: None,
            done: false,
            id,
        }
    }

    /// The same ticket, a sequence's if `sequence` (a streamed answer's: see the module doc).
    /// Before [`Loads::admit`].
    pub fn for_sequence(mut self, sequence: bool) -> Ticket {
        self.sequence = sequence;
        self
    }

    /// The same ticket, an inference request's if `inference` (an openai route's answer, streamed
    /// or whole). Before [`Loads::admit`].
    pub fn for_inference(mut self, inference: bool) -> Ticket {
        self.inference = inference;
        self
    }

    /// The same ticket, its answer a whole one of `tokens` output tokens (an openai route's),
    /// counted when it is answered — not if its client leaves first or it is shed.
    pub fn giving(mut self, tokens: u64) -> Ticket {
        self.tokens = tokens;
        self
    }

    /// Whether it is a sequence's.
    pub(super) fn is_sequence(&self) -> bool {
        self.sequence
    }

    /// Whether its client leaving in service frees its server at once (see the module doc): a
    /// sequence's, whose end is not known, or an inference request's, which is aborted.
    pub fn aborts(&self) -> bool {
        self.sequence || self.inference
    }

    /// How long it keeps a server: its delay, or for a sequence until its end (cut short then,
    /// [`Ticket::finish`]; [`SEQUENCE_HOLD`] never comes first).
    fn service(&self) -> Duration {
        match self.sequence {
            true => self.delay.saturating_add(SEQUENCE_HOLD),
            false => self.delay,
        }
    }

    /// Its fate so far: a ticket outside a pool is served from its arrival.
    pub fn fate(&self) -> Fate {
        match &self.slot {
            Some(slot) => slot.fate(),
            None => Fate::Serving {
                start: self.arrived,
                due: self.arrived + self.service(),
            },
        }
    }

    /// When the head of an answer served from `start` to `due` goes: at the end of its delay.
    pub(super) fn head_at(&self, start: Instant, due: Instant) -> Instant {
        match self.sequence {
            true => start + self.delay,
            false => due,
        }
    }

    /// Its route's requests in flight now, itself included (0 without a load model).
    pub(super) fn in_flight(&self) -> u64 {
        (self.loads.as_ref()).map_or(0, |loads| loads.in_flight_of(self.key.route))
    }

    /// As [`Ticket::fate`], after letting the pool replay up to `now` (a waiter whose timeout has
    /// come is shed by this).
    pub fn fate_at(&self, now: Instant) -> Fate {
        let fate = self.fate();
        if let (Fate::Waiting { deadline: Some(d) }, Some(pool)) = (fate, self.pool()) {
            if d <= now {
                pool.advance(now);
                return self.fate();
            }
        }
        fate
    }

    /// Registers the waker to call when a waiting ticket's fate is decided; returns the fate now.
    pub fn register(&self, waker: &Waker) -> Fate {
        match &self.slot {
            Some(slot) => slot.register(waker),
            None => self.fate(),
        }
    }

    /// How a shed ticket is answered (its pool's `shed=`).
    pub fn shed_as(&self) -> Option<Shed> {
        self.pool().map(|p| p.shed)
    }

    /// What tells this ticket from every other (for a runtime that registers a waker once per
    /// queued request): a number its server never gives twice — not an address, which the next
    /// ticket may reuse.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// It was answered at `now` (or shed, if that is its fate) — a sequence at its end, `tail`
    /// the waits it drew after its head: records its truth, and hands its server on to the next
    /// waiter — at once if its service was to end later (a sequence).
    pub fn finish(mut self, now: Instant, tail: Duration) {
        let fate = self.fate();
        let held = now.saturating_duration_since(self.arrived);
        let pooled = self.slot.is_some();
        match fate {
            Fate::Shed { at } => {
                let outcome = self.shed.unwrap_or(self.key.outcome);
                self.record(outcome, None, Some(at - self.arrived), held);
            }
            Fate::Serving { start, due } => {
                let wait = pooled.then(|| start.saturating_duration_since(self.arrived));
                let drawn = self.delay.saturating_add(tail);
                self.record(self.key.outcome, Some(drawn), wait, held);
                if self.tokens > 0 {
                    self.recorder.record_tokens(self.key, 0, self.tokens);
                }
                match self.pool() {
                    Some(pool) if due > now => pool.cut_short(due, now),
                    Some(pool) => pool.advance(now),
                    None => {}
                }
            }
            Fate::Waiting { .. } | Fate::Left => self.depart(now),
        }
        self.give_back();
        self.done = true;
    }

    fn pool(&self) -> Option<&Arc<Pool>> {
        self.loads.as_ref()?.pool_of(self.key.route)
    }

    fn record(&self, outcome: u8, drawn: Option<Duration>, wait: Option<Duration>, held: Duration) {
        let key = TruthKey {
            outcome,
            ..self.key
        };
        self.recorder.record_sample(key, drawn, wait, held);
    }

    /// Its client left at `now`: counted `gone` with the time held and waited so far; it leaves
    /// the queue, or keeps its server to the end of its service — unless it aborts
    /// ([`Ticket::aborts`]), which frees it at once.
    fn depart(&mut self, now: Instant) {
        let held = now.saturating_duration_since(self.arrived);
        let fate = self.fate();
        let wait = self.slot.is_some().then(|| match fate {
            Fate::Serving { start, .. } => start.min(now).saturating_duration_since(self.arrived),
            Fate::Shed { at } => at.saturating_duration_since(self.arrived),
            _ => held,
        });
        self.record(self.gone, None, wait, held);
        if let (Some(pool), Some(slot)) = (self.pool(), &self.slot) {
            match fate {
                Fate::Waiting { .. } => pool.cancel(slot),
                Fate::Serving { due, .. } if due > now && self.aborts() => pool.cut_short(due, now),
                Fate::Serving { due, .. } if due > now => pool.abandon(due),
                Fate::Serving { .. } => pool.advance(now),
                _ => {}
            }
        }
    }

    fn give_back(&mut self) {
        if let Some(loads) = &self.loads {
            loads.left(self.key.route);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.depart(Instant::now());
            self.give_back();
        }
    }
}
