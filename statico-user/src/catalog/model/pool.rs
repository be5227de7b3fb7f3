//! A pool (`--pool`, a route's `capacity=`): C servers for the whole process, a FIFO queue in
//! front of them, and shedding — what makes a route behave like a service under load.
//!
//! The model is the textbook one (G/G/c with a bounded queue and reneging): a request that finds a
//! free server is served at once for its service time (the route's drawn `delay=`); otherwise it
//! waits in FIFO order; one that finds `queue` already waiting is shed at once, one that has waited
//! `queue-timeout` is shed then.
//!
//! **Time is kept virtually.** A server's end of service is known the moment it starts (the service
//! time is drawn at arrival), so the pool keeps only the ends of the services in progress (a heap
//! of at most C instants) and the waiters. Whoever next touches the pool ([`Pool::advance`]: an
//! arrival, a release, a waiter's timeout, the orphan clock) first replays what happened since:
//! each end of service at or before now hands its server to the head of the queue, whose service
//! *starts at that end* (or at its arrival, if later) — not when a worker got round to it. So a
//! waiter's wait and its answer's due time are exact to the schedule, whatever the wake-up latency
//! of the thread that serves it; a late wake-up only delays the moment it is *told*.
//!
//! A waiter is told through the [`Waker`] its runtime registered on its [`Slot`]: the runtimes
//! learn only "this connection may go on". Lock order: the pool's state, then a slot's.
//!
//! A client that goes away while queued leaves the queue ([`Pool::cancel`]); one that goes away in
//! service keeps its server to the end of its service, as a real server would (unless its request
//! is aborted: [`Pool::cut_short`]): its end stays in the heap, and since no connection of its own
//! will come back at that moment to hand the server on, the end is given to the server's
//! [`OrphanClock`], one thread that sleeps until the next such end and advances the pool then.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::catalog::route::pool_spec::PoolSpec;
pub use crate::catalog::route::pool_spec::Shed;
use crate::observe::truth::PoolGauge;
pub use crate::observe::truth::PoolTruth;

/// One pool, shared by every worker and protocol (`Arc<Pool>`).
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub capacity: usize,
    /// The most requests waiting (`None`: unbounded).
    pub queue: Option<usize>,
    pub queue_timeout: Option<Duration>,
    pub shed: Shed,
    state: Mutex<State>,
    stats: Stats,
    /// Where the end of a service whose client left is handed on.
    orphans: OrphanClock,
}

/// What the pool's lock guards.
#[derive(Debug, Default)]
struct State {
    /// The ends of the services in progress (or ended but not yet replayed), at most `capacity`.
    ends: BinaryHeap<Reverse<Instant>>,
    /// The waiters, in arrival order.
    waiting: VecDeque<Arc<Slot>>,
    /// The latest time the pool has been told: a thread whose `now` was read before another's
    /// (a batch's clock, read before the lock) is moved up to it, so the schedule never runs
    /// backwards and capacity holds in it.
    last: Option<Instant>,
}

impl State {
    /// `now`, never before a time the pool has already been told.
    fn clock(&mut self, now: Instant) -> Instant {
        let now = self.last.map_or(now, |last| last.max(now));
        self.last = Some(now);
        now
    }
}

/// Counters read by the ground truth and the metrics (written under the lock, read without it).
#[derive(Debug, Default)]
struct Stats {
    served: AtomicU64,
    shed: AtomicU64,
    in_service: AtomicU64,
    queued: AtomicU64,
    in_service_max: AtomicU64,
    queued_max: AtomicU64,
}

/// One request's place in a pool: where the pool writes its fate and finds its waker.
#[derive(Debug)]
pub struct Slot {
    arrived: Instant,
    service: Duration,
    fate: Mutex<(Fate, Option<Waker>)>,
}

/// What a pool has decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Waiting for a server; shed at `deadline` if still waiting then (`queue-timeout`).
    Waiting { deadline: Option<Instant> },
    /// Served from `start` to `due` (`start` + its service time).
    Serving { start: Instant, due: Instant },
    /// Shed at `at`.
    Shed { at: Instant },
    /// Its client went away while it waited.
    Left,
}

impl Pool {
    /// The pool `spec` describes; the ends of services whose clients left go to `orphans`.
    pub fn new(spec: &PoolSpec, orphans: &OrphanClock) -> Pool {
        Pool {
            name: spec.name.clone(),
            capacity: spec.capacity,
            queue: spec.queue,
            queue_timeout: spec.queue_timeout,
            shed: spec.shed,
            state: Mutex::new(State::default()),
            stats: Stats::default(),
            orphans: orphans.clone(),
        }
    }

    /// A request arrives at `now` for `service`: served at once, queued or shed.
    pub fn arrive(self: &Arc<Self>, now: Instant, service: Duration) -> Arc<Slot> {
        let mut state = self.lock();
        let now = state.clock(now);
        let mut woken = self.replay(&mut state, now);
        let fate = if state.waiting.is_empty() && self.free_at(&mut state, now) {
            self.start(&mut state, now, service)
        } else if self.queue.is_some_and(|q| state.waiting.len() >= q) {
            self.stats.shed.fetch_add(1, Ordering::Relaxed);
            Fate::Shed { at: now }
        } else {
            Fate::Waiting {
                deadline: self.queue_timeout.map(|t| now + t),
            }
        };
        let slot = Arc::new(Slot {
            arrived: now,
            service,
            fate: Mutex::new((fate, None)),
        });
        if matches!(fate, Fate::Waiting { .. }) {
            state.waiting.push_back(slot.clone());
        }
        self.publish(&mut state, now);
        drop(state);
        woken.drain(..).for_each(Waker::wake);
        slot
    }

    /// Replays the pool up to `now` (ends of service hand servers to waiters, timeouts shed them)
    /// and wakes whoever that decided.
    pub fn advance(&self, now: Instant) {
        let mut state = self.lock();
        let now = state.clock(now);
        let woken = self.replay(&mut state, now);
        self.publish(&mut state, now);
        drop(state);
        woken.into_iter().for_each(Waker::wake);
    }

    /// The client of a waiting request went away: it leaves the queue (nothing if it was already
    /// decided).
    pub fn cancel(&self, slot: &Arc<Slot>) {
        let mut state = self.lock();
        if let Some(i) = state.waiting.iter().position(|s| Arc::ptr_eq(s, slot)) {
            state.waiting.remove(i);
            slot.set(Fate::Left);
        }
        let now = state.clock(Instant::now());
        self.publish(&mut state, now);
    }

    /// A request in service lost its client before `due`: its server is busy until then, and the
    /// orphan clock hands it on at that moment if anyone is waiting.
    pub fn abandon(self: &Arc<Self>, due: Instant) {
        self.orphans.push(due, Arc::downgrade(self));
    }

    /// A service due to end at `due` ended at `now` instead (a sequence or an inference request
    /// whose client left, or a sequence that a fault cut): its server is free from `now`, and
    /// handed on.
    pub fn cut_short(&self, due: Instant, now: Instant) {
        let mut state = self.lock();
        let now = state.clock(now);
        let mut ends = std::mem::take(&mut state.ends).into_vec();
        if let Some(end) = ends.iter_mut().find(|end| end.0 == due) {
            *end = Reverse(now.min(due));
        }
        state.ends = ends.into();
        let woken = self.replay(&mut state, now);
        self.publish(&mut state, now);
        drop(state);
        woken.into_iter().for_each(Waker::wake);
    }

    /// The pool's figures now (the ground truth reads them through [`PoolGauge`]).
    pub fn snapshot(&self) -> PoolTruth {
        let mut state = self.lock();
        let now = state.clock(Instant::now());
        self.publish(&mut state, now);
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PoolTruth {
            name: self.name.clone(),
            capacity: self.capacity,
            queue: self.queue,
            served: load(&s.served),
            shed: load(&s.shed),
            in_service: load(&s.in_service),
            queued: load(&s.queued),
            in_service_max: load(&s.in_service_max),
            queued_max: load(&s.queued_max),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a server is free at `now` (one whose service has ended is taken off the heap).
    fn free_at(&self, state: &mut State, now: Instant) -> bool {
        while state.ends.peek().is_some_and(|Reverse(end)| *end <= now) {
            state.ends.pop();
        }
        state.ends.len() < self.capacity
    }

    /// Starts a service at `start`: its end goes on the heap.
    fn start(&self, state: &mut State, start: Instant, service: Duration) -> Fate {
        let due = start + service;
        state.ends.push(Reverse(due));
        self.stats.served.fetch_add(1, Ordering::Relaxed);
        Fate::Serving { start, due }
    }

    /// Hands servers freed at or before `now` to the waiters, in order, each starting when its
    /// server freed (or when it arrived); sheds the waiters whose timeout came first. Returns the
    /// wakers of those decided.
    fn replay(&self, state: &mut State, now: Instant) -> Vec<Waker> {
        let mut woken = Vec::new();
        while let Some(head) = state.waiting.front().cloned() {
            let free = match state.ends.len() < self.capacity {
                true => head.arrived,
                false => state
                    .ends
                    .peek()
                    .map_or(head.arrived, |r| r.0.max(head.arrived)),
            };
            let deadline = self.queue_timeout.map(|t| head.arrived + t);
            let fate = match deadline {
                Some(d) if d < free && d <= now => {
                    self.stats.shed.fetch_add(1, Ordering::Relaxed);
                    Fate::Shed { at: d }
                }
                _ if free <= now => {
                    if state.ends.len() >= self.capacity {
                        state.ends.pop();
                    }
                    self.start(state, free, head.service)
                }
                _ => break,
            };
            state.waiting.pop_front();
            woken.extend(head.set(fate));
        }
        woken
    }

    /// Publishes the gauges and their maxima (under the lock, so the maxima are exact). With no
    /// one waiting, services ended by `now` are let go first (with waiters, their ends are when
    /// the waiters start, and stay until replayed).
    fn publish(&self, state: &mut State, now: Instant) {
        if state.waiting.is_empty() {
            self.free_at(state, now);
        }
        let s = &self.stats;
        let queued = state.waiting.len() as u64;
        let in_service = state.ends.len() as u64;
        s.queued.store(queued, Ordering::Relaxed);
        s.in_service.store(in_service, Ordering::Relaxed);
        s.queued_max.fetch_max(queued, Ordering::Relaxed);
        s.in_service_max.fetch_max(in_service, Ordering::Relaxed);
    }
}

impl PoolGauge for Pool {
    fn figures(&self) -> PoolTruth {
        self.snapshot()
    }
}

impl Slot {
    /// What the pool has decided so far.
    pub fn fate(&self) -> Fate {
        self.lock().0
    }

    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    /// Registers the waker to call when a waiting request's fate is decided. Returns the fate now:
    /// if it is no longer waiting, nothing is registered.
    pub fn register(&self, waker: &Waker) -> Fate {
        let mut fate = self.lock();
        if let Fate::Waiting { .. } = fate.0 {
            if !fate.1.as_ref().is_some_and(|w| w.will_wake(waker)) {
                fate.1 = Some(waker.clone());
            }
        }
        fate.0
    }

    fn set(&self, fate: Fate) -> Option<Waker> {
        let mut f = self.lock();
        f.0 = fate;
        f.1.take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Fate, Option<Waker>)> {
        self.fate.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One server's thread for the ends of services whose clients left (see the module doc): a handle,
/// cloned cheaply (one `Arc`) into every pool. The thread starts the first time a service is
/// abandoned, and ends when the last handle is dropped.
#[derive(Clone, Debug, Default)]
pub struct OrphanClock(Arc<ClockState>);

#[derive(Debug, Default)]
struct ClockState {
    /// What the thread reads.
    shared: Arc<Orphans>,
    /// Set once the thread is started.
    started: OnceLock<()>,
}

/// The ends of service to replay, with their pools, and the condition the clock's thread waits on.
#[derive(Debug, Default)]
struct Orphans {
    list: Mutex<Ends>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Ends {
    due: Vec<(Instant, Weak<Pool>)>,
    /// Every handle is gone: the thread ends.
    closed: bool,
}

impl OrphanClock {
    /// `pool`'s server is busy until `due`: the pool is advanced then.
    fn push(&self, due: Instant, pool: Weak<Pool>) {
        self.0.started.get_or_init(|| self.0.start());
        let orphans = &*self.0.shared;
        orphans.lock().due.push((due, pool));
        orphans.wake.notify_one();
    }
}

impl ClockState {
    fn start(&self) {
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("statico-pool".into())
            .spawn(move || shared.run());
        if let Err(e) = started {
            eprintln!("statico: pools: cannot start the orphan clock thread ({e}): a server whose client left is handed on at the pool's next arrival");
        }
    }
}

impl Drop for ClockState {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

impl Orphans {
    fn lock(&self) -> MutexGuard<'_, Ends> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps until the earliest end, then advances the pools whose ends have come; returns when
    /// every handle is gone.
    fn run(&self) {
        let mut ends = self.lock();
        while !ends.closed {
            let now = Instant::now();
            let (due, pending): (Vec<_>, Vec<_>) =
                ends.due.drain(..).partition(|(at, _)| *at <= now);
            ends.due = pending;
            if !due.is_empty() {
                drop(ends);
                due.iter()
                    .filter_map(|(_, p)| p.upgrade())
                    .for_each(|p| p.advance(now));
                ends = self.lock();
                continue;
            }
            let next = ends.due.iter().map(|(at, _)| *at).min();
            ends = match next {
                None => self.wake.wait(ends).unwrap_or_else(|p| p.into_inner()),
                Some(at) => {
                    let wait = at.saturating_duration_since(now);
                    (self.wake.wait_timeout(ends, wait))
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn pool(capacity: usize, queue: Option<usize>, timeout: Option<Duration>) -> Arc<Pool> {
        let spec = PoolSpec {
            name: "p".into(),
            capacity,
            queue,
            queue_timeout: timeout,
            shed: Shed::Status(503),
        };
        Arc::new(Pool::new(&spec, &OrphanClock::default()))
    }

    #[test]
    fn capacity_requests_are_served_at_once_and_the_next_waits_for_the_first_end() {
        let p = pool(2, None, None);
        let t0 = Instant::now();
        let a = p.arrive(t0, 10 * MS);
        let b = p.arrive(t0 + MS, 20 * MS);
        let c = p.arrive(t0 + 2 * MS, 5 * MS);
        assert_eq!(
            a.fate(),
            Fate::Serving {
                start: t0,
                due: t0 + 10 * MS
            }
        );
        assert_eq!(
            b.fate(),
            Fate::Serving {
                start: t0 + MS,
                due: t0 + 21 * MS
            }
        );
        assert_eq!(c.fate(), Fate::Waiting { deadline: None });
        // Advanced late, c still starts when a's server freed.
        p.advance(t0 + 15 * MS);
        assert_eq!(
            c.fate(),
            Fate::Serving {
                start: t0 + 10 * MS,
                due: t0 + 15 * MS
            }
        );
        let s = p.snapshot();
        assert_eq!(
            (s.served, s.shed, s.in_service_max, s.queued_max),
            (3, 0, 2, 1)
        );
    }

    #[test]
    fn a_full_queue_sheds_at_once_and_a_timeout_sheds_then() {
        let p = pool(1, Some(1), Some(5 * MS));
        let t0 = Instant::now();
        let _a = p.arrive(t0, 100 * MS);
        let b = p.arrive(t0, MS);
        let c = p.arrive(t0, MS);
        assert_eq!(c.fate(), Fate::Shed { at: t0 });
        assert!(matches!(b.fate(), Fate::Waiting { .. }));
        p.advance(t0 + 4 * MS);
        assert!(matches!(b.fate(), Fate::Waiting { .. }));
        p.advance(t0 + 6 * MS);
        assert_eq!(b.fate(), Fate::Shed { at: t0 + 5 * MS });
        assert_eq!(p.snapshot().shed, 2);
    }

    #[test]
    fn a_waiter_that_leaves_does_not_hold_up_the_next() {
        let p = pool(1, None, None);
        let t0 = Instant::now();
        let _a = p.arrive(t0, 10 * MS);
        let b = p.arrive(t0, 10 * MS);
        let c = p.arrive(t0, 10 * MS);
        p.cancel(&b);
        p.advance(t0 + 10 * MS);
        assert_eq!(b.fate(), Fate::Left);
        assert_eq!(
            c.fate(),
            Fate::Serving {
                start: t0 + 10 * MS,
                due: t0 + 20 * MS
            }
        );
    }

    #[test]
    fn the_waker_is_called_when_the_fate_is_decided() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let p = pool(1, None, None);
        let t0 = Instant::now();
        let _a = p.arrive(t0, MS);
        let b = p.arrive(t0, MS);
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        assert!(matches!(b.register(&waker), Fate::Waiting { .. }));
        p.advance(t0 + MS);
        assert!(flag.0.load(Ordering::SeqCst));
    }

    #[test]
    fn an_abandoned_service_hands_its_server_on_at_its_end() {
        let p = pool(1, None, None);
        let t0 = Instant::now();
        let _a = p.arrive(t0, 30 * MS);
        let b = p.arrive(t0, MS);
        p.abandon(t0 + 30 * MS);
        let until = Instant::now() + Duration::from_secs(2);
        while matches!(b.fate(), Fate::Waiting { .. }) && Instant::now() < until {
            std::thread::sleep(MS);
        }
        assert_eq!(
            b.fate(),
            Fate::Serving {
                start: t0 + 30 * MS,
                due: t0 + 31 * MS
            }
        );
    }

    /// M/D/1 at ρ = 0.5 replayed exactly: the mean wait is ρ·S / (2(1−ρ)) = S/2.
    #[test]
    fn the_virtual_schedule_is_the_fifo_queue_of_theory() {
        use rand::{RngExt, SeedableRng};
        let p = pool(1, None, None);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let t0 = Instant::now();
        let (s, n) = (Duration::from_micros(1000), 200_000);
        let mut t = t0;
        let mut slots = Vec::with_capacity(n);
        for _ in 0..n {
            let gap: f64 = -(1.0f64 - rng.random::<f64>()).ln() * 2.0; // mean 2 ms: λ·S = 0.5
            t += Duration::from_secs_f64(gap / 1000.0);
            slots.push(p.arrive(t, s));
        }
        p.advance(t + Duration::from_secs(3600)); // the last waiters served
        let mut total_wait = Duration::ZERO;
        for slot in &slots {
            let Fate::Serving { start, .. } = slot.fate() else {
                panic!("unbounded queue")
            };
            total_wait += start - slot.arrived();
        }
        let mean = total_wait.as_secs_f64() / n as f64 * 1000.0;
        assert!(
            (mean - 0.5).abs() < 0.05,
            "mean wait {mean} ms, expected 0.5"
        );
    }
}
