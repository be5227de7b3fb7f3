//! Deadlines for a thread that runs its own event loop rather than tokio's: the io_uring worker, whose
//! HTTP/2 connections are futures it polls itself (see `runtime::uring::h2`), with no tokio timer to
//! wake them.
//!
//! Each sleep is an entry in one ordered map, keyed by when it ends — its deadline, or for a sleep
//! that may share a tick ([`crate::kernel::timer::sleep_until_within`]) the tick at or after it —
//! and a number; the loop asks for the earliest end ([`Deadlines::earliest`]), bounds its wait for
//! completions by it (the kernel's timeout on `io_uring_enter`), and then [`Deadlines::fire`]s what
//! is due, which wakes those sleeps' tasks. A sleep dropped or moved before its end takes its entry
//! out at once (O(log n)), so a timeout that never fires — a stream's body that arrived in time, an
//! idle timer re-armed each time streams end — leaves nothing behind. [`crate::kernel::timer`]'s sleeps and timeouts land here
//! on a thread that [`install`]ed it.
//!
//! Only the io_uring worker (Linux) installs and fires them: off Linux they are built, not used.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

thread_local! {
    static DEADLINES: RefCell<Option<Rc<Deadlines>>> = const { RefCell::new(None) };
}

/// This thread's deadlines, if [`install`] was called on it.
pub fn current() -> Option<Rc<Deadlines>> {
    DEADLINES.with(|d| d.borrow().clone())
}

/// Makes sleeps on this thread entries of the returned [`Deadlines`], which the caller's loop fires;
/// their ticks are counted from `epoch`.
pub fn install(epoch: Instant) -> Rc<Deadlines> {
    let deadlines = Rc::new(Deadlines::new(epoch));
    DEADLINES.with(|d| *d.borrow_mut() = Some(deadlines.clone()));
    deadlines
}

/// One thread's waiting sleeps (see the module doc).
#[derive(Debug)]
pub struct Deadlines {
    waiting: RefCell<BTreeMap<(Instant, u64), Waker>>,
    next: Cell<u64>,
    /// Where ticks are counted from.
    epoch: Instant,
}

impl Deadlines {
    /// No sleeps yet; ticks counted from `epoch`.
    pub fn new(epoch: Instant) -> Deadlines {
        Deadlines {
            waiting: RefCell::default(),
            next: Cell::new(0),
            epoch,
        }
    }

    /// The earliest end a sleep waits for.
    pub fn earliest(&self) -> Option<Instant> {
        self.waiting.borrow().first_key_value().map(|(k, _)| k.0)
    }

    /// Wakes every sleep whose end is at or before `now`.
    pub fn fire(&self, now: Instant) {
        loop {
            let due = {
                let mut waiting = self.waiting.borrow_mut();
                match waiting.first_entry() {
                    Some(e) if e.key().0 <= now => e.remove(),
                    _ => return,
                }
            };
            due.wake(); // outside the borrow: a waker may run code that sleeps
        }
    }

    /// How many sleeps wait.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.borrow().len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A sleep until a deadline, re-armable in place.
#[derive(Debug)]
pub struct Sleep {
    deadlines: Rc<Deadlines>,
    deadline: Instant,
    /// It ends on a tick of this, or (zero) at its deadline.
    tick: Duration,
    /// Its entry in the map, while it waits.
    key: Option<(Instant, u64)>,
}

impl Sleep {
    pub fn new(deadlines: Rc<Deadlines>, deadline: Instant) -> Sleep {
        Sleep::within(deadlines, deadline, Duration::ZERO)
    }

    /// A sleep that ends on the thread's next tick of `tick` at or after `deadline`.
    pub fn within(deadlines: Rc<Deadlines>, deadline: Instant, tick: Duration) -> Sleep {
        Sleep {
            deadlines,
            deadline,
            tick,
            key: None,
        }
    }

    /// When the sleep's entry fires.
    fn ends(&self) -> Instant {
        match self.tick.is_zero() {
            true => self.deadline,
            false => super::timer::on_grid(self.deadline, self.deadlines.epoch, self.tick),
        }
    }

    /// Moves the deadline (its entry follows at the next poll).
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    fn unregister(&mut self) {
        if let Some(key) = self.key.take() {
            self.deadlines.waiting.borrow_mut().remove(&key);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    /// While its entry waits in the map for an end no later than the sleep's, the poll only keeps
    /// the waker: no clock read, no map change. A deadline moved later (an idle timer re-armed each
    /// time streams end) keeps the earlier entry, which, once fired, finds the sleep not yet due and
    /// enters the new deadline then: at most one early wake-up per move, rather than a removal and an
    /// insertion each time.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let ends = this.ends();
        let mut waiting = this.deadlines.waiting.borrow_mut();
        if let Some(key) = this.key.filter(|k| k.0 <= ends) {
            if let Some(w) = waiting.get_mut(&key) {
                if !w.will_wake(cx.waker()) {
                    w.clone_from(cx.waker());
                }
                return Poll::Pending;
            }
        }
        if let Some(old) = this.key.take() {
            waiting.remove(&old);
        }
        if Instant::now() >= this.deadline {
            return Poll::Ready(());
        }
        let id = this.deadlines.next.get();
        this.deadlines.next.set(id.wrapping_add(1));
        let key = (ends, id);
        waiting.insert(key, cx.waker().clone());
        this.key = Some(key);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A waker that counts its wakes.
    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn sleeps_wake_at_their_deadline_and_leave_nothing_when_dropped() {
        let d = Rc::new(Deadlines::new(Instant::now()));
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let now = Instant::now();
        let mut a = Box::pin(Sleep::new(d.clone(), now + Duration::from_secs(60)));
        let mut b = Box::pin(Sleep::new(d.clone(), now + Duration::from_millis(1)));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        assert_eq!(d.earliest(), Some(now + Duration::from_millis(1)));
        a.as_mut().reset(now + Duration::from_secs(30));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert_eq!(d.len(), 2, "a re-armed sleep keeps one entry");
        assert_eq!(
            a.key.map(|k| k.0),
            Some(now + Duration::from_secs(30)),
            "moved earlier: moved"
        );
        a.as_mut().reset(now + Duration::from_secs(40));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            a.key.map(|k| k.0),
            Some(now + Duration::from_secs(30)),
            "later: kept"
        );
        std::thread::sleep(Duration::from_millis(2));
        d.fire(Instant::now());
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(b.as_mut().poll(&mut cx).is_ready());
        drop(a);
        assert!(d.is_empty());
    }

    #[test]
    fn sleeps_that_may_share_a_tick_end_on_it_never_before_their_deadline() {
        let d = Rc::new(Deadlines::new(Instant::now()));
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let (tick, us) = (Duration::from_millis(50), Duration::from_micros(1));
        let grid = crate::kernel::timer::on_grid(Instant::now() + tick, d.epoch, tick);
        let mut a = Box::pin(Sleep::within(d.clone(), grid - tick + 10 * us, tick));
        let mut b = Box::pin(Sleep::within(d.clone(), grid - 10 * us, tick));
        let mut exact = Box::pin(Sleep::new(d.clone(), grid - tick + 20 * us));
        for s in [&mut a, &mut b, &mut exact] {
            assert!(s.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(
            d.earliest(),
            Some(grid - tick + 20 * us),
            "an exact sleep keeps its deadline"
        );
        assert_eq!(
            (a.key.unwrap().0, b.key.unwrap().0),
            (grid, grid),
            "one tick for both"
        );
        std::thread::sleep((grid - tick + 20 * us).saturating_duration_since(Instant::now()));
        d.fire(grid - Duration::from_nanos(1));
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            1,
            "only the exact one before the tick"
        );
        assert!(exact.as_mut().poll(&mut cx).is_ready());
        std::thread::sleep(grid.saturating_duration_since(Instant::now()));
        d.fire(grid);
        assert_eq!(count.0.load(Ordering::Relaxed), 3);
        assert!(a.as_mut().poll(&mut cx).is_ready() && b.as_mut().poll(&mut cx).is_ready());
        assert!(d.is_empty());
    }
}
