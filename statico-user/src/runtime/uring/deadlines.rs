//! The pacing deadlines of one io_uring worker (held answers, paced bodies, queue timeouts), behind
//! one ring timeout instead of one per connection.
//!
//! A timeout per held answer cost a timer interrupt and a trip through `io_uring_enter` per
//! request: a held route's answer cost 1.85× the CPU of the same route unheld at 1 000
//! connections. Here deadlines are rounded up to the next [`QUANTUM`] (as the tokio runtime's
//! precise timer does), or to the next tick of a wait that may share one (a stream's next event:
//! [`crate::kernel::timer::sleep_until_within`]), kept in a heap, and one absolute timeout is armed
//! for the earliest: every connection due in the same quantum or tick is released by the same
//! expiry. A deadline that moves leaves
//! its old entry behind, skipped when popped (the connection no longer names it). Pure: the worker
//! arms the timeouts this asks for.
//!
//! [`QUANTUM`]: crate::kernel::timer::QUANTUM

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::kernel::timer::on_grid;

/// One connection's deadline: when, and the connection by slot and generation.
pub type Due = (Instant, usize, u32);

#[derive(Debug)]
pub struct Deadlines {
    /// Each deadline under the expiry that releases it, earliest first.
    heap: BinaryHeap<Reverse<(Instant, Due)>>,
    /// The expiries of the timeouts armed and not yet fired (they fire in this order).
    armed: BinaryHeap<Reverse<Instant>>,
    /// Where quanta and ticks are counted from.
    epoch: Instant,
}

impl Deadlines {
    pub fn new(now: Instant) -> Deadlines {
        Deadlines {
            heap: BinaryHeap::new(),
            armed: BinaryHeap::new(),
            epoch: now,
        }
    }

    /// A connection waits until `at`, released on the next tick of `tick` (at least a quantum,
    /// [`crate::kernel::timer::QUANTUM`]). Returns the expiry to arm the timeout for, when it is
    /// earlier than the one armed.
    pub fn add(&mut self, at: Instant, tick: Duration, slot: usize, gen: u32) -> Option<Instant> {
        let expiry = on_grid(at, self.epoch, tick);
        self.heap.push(Reverse((expiry, (at, slot, gen))));
        self.arm_if_earlier(expiry)
    }

    /// `expiry`, to be armed, unless a timeout armed already fires by then.
    fn arm_if_earlier(&mut self, expiry: Instant) -> Option<Instant> {
        match self.armed.peek() {
            Some(Reverse(armed)) if *armed <= expiry => None,
            _ => {
                self.armed.push(Reverse(expiry));
                Some(expiry)
            }
        }
    }

    /// A timeout fired (the earliest armed) at `now`: the deadlines due (into `due`), and the
    /// expiry to arm next.
    pub fn fired(&mut self, now: Instant, due: &mut Vec<Due>) -> Option<Instant> {
        self.armed.pop();
        while let Some(&Reverse((expiry, d))) = self.heap.peek() {
            if expiry > now {
                break;
            }
            self.heap.pop();
            due.push(d);
        }
        let next = self.heap.peek().map(|Reverse((expiry, _))| *expiry)?;
        self.arm_if_earlier(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::timer::QUANTUM;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn deadlines_in_one_quantum_share_one_expiry() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(t0);
        assert_eq!(
            d.add(t0 + 10 * US, Duration::ZERO, 1, 0),
            Some(t0 + QUANTUM)
        );
        assert_eq!(d.add(t0 + 20 * US, Duration::ZERO, 2, 0), None);
        assert_eq!(
            d.add(t0 + 5 * US, Duration::ZERO, 3, 0),
            None,
            "same quantum: already armed"
        );
        assert_eq!(d.add(t0 + 100 * US, Duration::ZERO, 4, 0), None);
        let mut due = Vec::new();
        let next = d.fired(t0 + QUANTUM, &mut due);
        let slots: Vec<usize> = due.iter().map(|d| d.1).collect();
        assert_eq!(slots, [3, 1, 2]);
        assert_eq!(next, Some(t0 + 100 * US));
        due.clear();
        assert_eq!(d.fired(t0 + 100 * US, &mut due), None);
        assert_eq!(due.len(), 1);
    }

    #[test]
    fn an_earlier_deadline_arms_an_earlier_expiry() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(t0);
        assert_eq!(
            d.add(t0 + 1000 * US, Duration::ZERO, 1, 0),
            Some(t0 + 1000 * US)
        );
        assert_eq!(
            d.add(t0 + 30 * US, Duration::ZERO, 2, 0),
            Some(t0 + 2 * QUANTUM)
        );
        let mut due = Vec::new();
        // The earlier expiry fires; the later one is still armed, so nothing new is.
        assert_eq!(d.fired(t0 + 2 * QUANTUM, &mut due), None);
        assert_eq!(due.len(), 1);
        due.clear();
        assert_eq!(d.fired(t0 + 1000 * US, &mut due), None);
        assert_eq!(due.len(), 1);
        // Nothing armed, nothing waiting: a new deadline arms again.
        assert_eq!(
            d.add(t0 + 2000 * US, Duration::ZERO, 5, 0),
            Some(t0 + 2000 * US)
        );
    }

    #[test]
    fn waits_that_may_share_a_tick_are_released_on_it_never_before_their_deadline() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(t0);
        let tick = 4 * QUANTUM;
        assert_eq!(d.add(t0 + 10 * US, tick, 1, 0), Some(t0 + tick));
        assert_eq!(d.add(t0 + 90 * US, tick, 2, 0), None, "the same tick");
        // An exact wait keeps its quantum, before the tick.
        assert_eq!(
            d.add(t0 + 30 * US, Duration::ZERO, 3, 0),
            Some(t0 + 2 * QUANTUM)
        );
        assert_eq!(d.add(t0 + 101 * US, tick, 4, 0), None, "armed for the tick");
        let mut due = Vec::new();
        assert_eq!(d.fired(t0 + 2 * QUANTUM, &mut due), None);
        assert_eq!(due, [(t0 + 30 * US, 3, 0)]);
        due.clear();
        let next = d.fired(t0 + tick, &mut due);
        assert_eq!(due, [(t0 + 10 * US, 1, 0), (t0 + 90 * US, 2, 0)]);
        assert_eq!(next, Some(t0 + 2 * tick), "the next tick, not 101 us");
    }
}
