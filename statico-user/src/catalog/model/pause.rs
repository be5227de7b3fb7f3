//! Whole-server pauses: `--pause 'at=DUR for=DUR [every=DUR]'` on a schedule, and `POST /pause?for=DUR`
//! / `POST /resume` on the control API. While paused, statico answers nothing — every answer in
//! flight or arriving waits — as a frozen process would look from outside (wrk2's ^Z demonstration of
//! coordinated omission), except that connections are still accepted and requests read, as a frozen
//! process's kernel does. When the pause ends everything due goes out.
//!
//! One [`Pauses`] per server, as the pause is the whole server's: made at start-up only when pauses
//! are possible (`--pause` or `--admin`) and handed to whoever asks or moves it (the catalog and its
//! views, the control API, the ground truth), so a server without them checks one empty `Option`
//! per held answer and nothing else. Every protocol asks the same question at the same steps — just
//! before an answer's head would go out, and before each event of a stream: [`Pauses::wait`] — in
//! [`super::delivery::Delivery`]. An answer found paused waits until the pause's end, in slices of at
//! most [`RECHECK`] so that a `POST /resume` (which moves the end) is seen within one slice.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::schedule::Window;

/// The longest an answer waits on a pause before asking again (a resume is seen this late at most).
pub const RECHECK: Duration = Duration::from_millis(50);

/// The longest pause the control API takes.
pub const LONGEST: Duration = Duration::from_secs(3600);

/// One server's pauses, scheduled and asked for: a handle, cloned cheaply (one `Arc`), every clone
/// the same pauses.
#[derive(Clone, Debug)]
pub struct Pauses(Arc<State>);

#[derive(Debug)]
struct State {
    /// The scheduled pauses' clock starts here (start-up).
    start: Instant,
    scheduled: Vec<Window>,
    /// The end of the control API's pause, in nanoseconds after `start` (0: none ever).
    manual_end: AtomicU64,
    /// The control API's pauses so far.
    manual: Mutex<Manual>,
}

#[derive(Debug, Default)]
struct Manual {
    count: u64,
    /// Their length in all, the one in force counted up to its end.
    ended: Duration,
    /// The one in force (or the last): begin and end after `start`.
    last: Option<(Duration, Duration)>,
}

impl Pauses {
    /// A server's pauses, with `scheduled` ones whose clock starts now.
    pub fn new(scheduled: Vec<Window>) -> Pauses {
        Pauses::starting(Instant::now(), scheduled)
    }

    /// Pauses whose clock starts at `start`.
    pub(super) fn starting(start: Instant, scheduled: Vec<Window>) -> Pauses {
        Pauses(Arc::new(State {
            start,
            scheduled,
            manual_end: AtomicU64::new(0),
            manual: Mutex::new(Manual::default()),
        }))
    }

    /// Paused at `now`: how long the pause in force has left to run (as known now).
    #[inline]
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        let p = &*self.0;
        let elapsed = now.saturating_duration_since(p.start);
        let manual = Duration::from_nanos(p.manual_end.load(Relaxed)).checked_sub(elapsed);
        let scheduled = p.scheduled.iter().filter_map(|w| w.left(elapsed)).max();
        manual.filter(|d| !d.is_zero()).max(scheduled)
    }

    /// How long an answer due at `now` waits before it is asked again: `None` when not paused.
    #[inline]
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        self.remaining(now).map(|l| l.min(RECHECK))
    }

    /// [`Pauses::wait`] at the clock's now.
    #[inline]
    pub fn wait_now(&self) -> Option<Duration> {
        self.wait(Instant::now())
    }

    /// `POST /pause?for=DUR`: paused from now for `length` (a pause in force is replaced).
    pub fn pause_for(&self, length: Duration) {
        let p = &*self.0;
        let now = p.start.elapsed();
        let end = now + length.min(LONGEST);
        let mut m = p.manual.lock().unwrap_or_else(|e| e.into_inner());
        match m.last {
            Some((begin, old_end)) if old_end > now => m.last = Some((begin, end)),
            _ => {
                m.close_last();
                m.count += 1;
                m.last = Some((now, end));
            }
        }
        p.manual_end.store(end.as_nanos() as u64, Relaxed);
    }

    /// `POST /resume`: the control API's pause in force ends now (a scheduled one runs its course).
    pub fn resume(&self) {
        let p = &*self.0;
        let now = p.start.elapsed();
        let mut m = p.manual.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((begin, end)) = m.last {
            if end > now {
                m.last = Some((begin, now));
            }
        }
        p.manual_end.store(now.as_nanos() as u64, Relaxed);
    }

    /// Pauses begun so far and how long they have lasted in all (scheduled and asked for; two that
    /// overlap are both counted).
    pub fn so_far(&self) -> (u64, Duration) {
        let p = &*self.0;
        let now = p.start.elapsed();
        let m = p.manual.lock().unwrap_or_else(|e| e.into_inner());
        let (mut count, mut total) = m.so_far(now);
        for w in &p.scheduled {
            let (c, t) = w.so_far(now);
            count += c;
            total += t;
        }
        (count, total)
    }
}

impl Manual {
    fn close_last(&mut self) {
        if let Some((begin, end)) = self.last.take() {
            self.ended += end - begin;
        }
    }

    /// Count and length so far, at `now` after start.
    fn so_far(&self, now: Duration) -> (u64, Duration) {
        let current = self
            .last
            .map_or(Duration::ZERO, |(b, e)| e.min(now).saturating_sub(b));
        (self.count, self.ended + current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_servers_pauses_are_their_own() {
        let (a, b) = (Pauses::new(Vec::new()), Pauses::new(Vec::new()));
        let now = Instant::now();
        assert_eq!((a.remaining(now), b.remaining(now)), (None, None));
        a.pause_for(Duration::from_secs(60));
        let now = Instant::now();
        assert!(a
            .remaining(now)
            .is_some_and(|l| l > Duration::from_secs(59)));
        assert_eq!(a.wait(now), Some(RECHECK));
        assert_eq!((b.remaining(now), b.wait(now)), (None, None));
        assert_eq!((a.so_far().0, b.so_far()), (1, (0, Duration::ZERO)));
        let a_again = a.clone();
        a_again.resume();
        assert_eq!(a.wait_now(), None, "a clone moves the same pauses");
        assert_eq!(a.so_far().0, 1);
    }
}
