//! Whole-server pauses: `--pause 'at=DUR for=DUR [every=DUR]'` on a schedule, and `POST /pause?for=DUR`
//! / `POST /resume` on the control API. While paused, statico answers nothing — every answer in
//! flight or arriving waits — as a frozen process would look from outside (wrk2's ^Z demonstration of
//! coordinated omission), except that connections are still accepted and requests read, as a frozen
//! process's kernel does. When the pause ends everything due goes out.
//!
//! One per process, as the pause is the whole server's: installed at start-up only when pauses are
//! possible (`--pause` or `--admin`), so a server without them reads one empty `OnceLock` per held
//! answer and nothing else. Every protocol asks the same question at the same step — just before an
//! answer's head would go out: [`left`] — in [`super::delivery::Delivery`]. An answer found paused waits until the pause's end, in slices of at most
//! [`RECHECK`] so that a `POST /resume` (which moves the end) is seen within one slice.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::schedule::Window;

/// The longest an answer waits on a pause before asking again (a resume is seen this late at most).
pub const RECHECK: Duration = Duration::from_millis(50);

/// The longest pause the control API takes.
pub const LONGEST: Duration = Duration::from_secs(3600);

struct Pauses {
    /// The scheduled pauses' clock starts here (start-up).
    start: Instant,
    scheduled: Vec<Window>,
    /// The end of the control API's pause, in nanoseconds after `start` (0: none ever).
    manual_end: AtomicU64,
    /// The control API's pauses so far.
    manual: Mutex<Manual>,
}

#[derive(Default)]
struct Manual {
    count: u64,
    /// Their length in all, the one in force counted up to its end.
    ended: Duration,
    /// The one in force (or the last): begin and end after `start`.
    last: Option<(Duration, Duration)>,
}

static PAUSES: OnceLock<Pauses> = OnceLock::new();

/// Makes pauses possible, with `scheduled` ones whose clock starts now. Once per process.
pub fn install(scheduled: Vec<Window>) {
    let _ = PAUSES.set(Pauses {
        start: Instant::now(),
        scheduled,
        manual_end: AtomicU64::new(0),
        manual: Mutex::new(Manual::default()),
    });
}

/// Whether pauses are possible in this process.
pub fn installed() -> bool {
    PAUSES.get().is_some()
}

/// Paused at `now`: how long until the pause in force ends (as known now).
#[inline]
pub fn left(now: Instant) -> Option<Duration> {
    let p = PAUSES.get()?;
    let elapsed = now.saturating_duration_since(p.start);
    let manual = Duration::from_nanos(p.manual_end.load(Relaxed)).checked_sub(elapsed);
    let scheduled = p.scheduled.iter().filter_map(|w| w.left(elapsed)).max();
    manual.filter(|d| !d.is_zero()).max(scheduled)
}

/// How long an answer due at `now` waits before it is asked again: `None` when not paused.
#[inline]
pub fn wait(now: Instant) -> Option<Duration> {
    left(now).map(|l| l.min(RECHECK))
}

/// [`wait`] at the clock's now, read only when pauses are installed.
#[inline]
pub fn wait_now() -> Option<Duration> {
    PAUSES.get()?;
    wait(Instant::now())
}

/// `POST /pause?for=DUR`: paused from now for `length` (a pause in force is replaced).
pub fn pause_for(length: Duration) -> Option<()> {
    let p = PAUSES.get()?;
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
    Some(())
}

/// `POST /resume`: the control API's pause in force ends now (a scheduled one runs its course).
pub fn resume() {
    let Some(p) = PAUSES.get() else { return };
    let now = p.start.elapsed();
    let mut m = p.manual.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((begin, end)) = m.last {
        if end > now {
            m.last = Some((begin, now));
        }
    }
    p.manual_end.store(now.as_nanos() as u64, Relaxed);
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

/// Pauses begun so far and how long they have lasted in all (scheduled and asked for; two that
/// overlap are both counted).
pub fn so_far() -> (u64, Duration) {
    let Some(p) = PAUSES.get() else {
        return (0, Duration::ZERO);
    };
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
