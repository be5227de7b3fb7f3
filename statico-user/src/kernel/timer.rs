//! Precise sleeps for the tokio threads: a held answer must go out when its delay says, and tokio's
//! timer wheel rounds every deadline up to the next millisecond (a 1 ms delay became 2.3 ms at the
//! client, a 10 ms one 11.2 ms).
//!
//! Each thread that serves (a tokio worker, a QUIC thread) installs one [`Timers`]: a `timerfd` armed
//! for the earliest deadline (`CLOCK_MONOTONIC`, the clock of [`Instant`]), rounded up to the next
//! [`QUANTUM`] so that deadlines close together share one expiry — or, for a sleep that may share a
//! coarser tick ([`sleep_until_within`]: a stream's next event), to the next such tick — a binary
//! heap of those expiries, and a task that wakes the sleeps whose expiry has passed when the
//! `timerfd` fires. A sleep costs a
//! heap push and, when it is the earliest, one `timerfd_settime`; firing costs a heap pop per sleep
//! and one `timerfd_settime` per expiry — O(log n) each with n sleeps waiting. A sleep
//! dropped before its deadline (its connection closed) leaves its heap entry behind, which is popped
//! and ignored at that deadline. The io_uring runtime needs none of this: its loop arms the ring's
//! own timeout for its earliest deadline, rounded up the same way (`runtime/uring/deadlines.rs`).
//!
//! On a thread that runs its own loop (the io_uring worker), sleeps are entries of its
//! [`deadlines`](super::deadlines), which the loop fires. On a thread with neither, and off Linux,
//! [`sleep`] is tokio's. [`timeout`] and [`Coarse`] are for timeouts rather than held answers: tokio's
//! wheel on tokio threads (no heap entry per stream), the loop's deadlines on the io_uring worker.

use std::future::Future;
use std::time::{Duration, Instant};

/// Sleeps for `d`, precisely where [`install`] was called on this thread.
pub async fn sleep(d: Duration) {
    sleep_until(far(Instant::now(), d)).await
}

/// Sleeps until `deadline`, precisely where [`install`] was called on this thread.
pub async fn sleep_until(deadline: Instant) {
    sleep_until_within(deadline, Duration::ZERO).await
}

/// Sleeps until `deadline`, ending on the next of this thread's ticks of `tick` (at most that
/// late, so that sleeps due within one tick end together; one [`QUANTUM`] when `tick` is shorter,
/// and exact on a thread with its own loop when `tick` is zero). Off Linux, or on a thread with
/// neither timer, tokio's wheel ignores `tick`.
pub async fn sleep_until_within(deadline: Instant, tick: Duration) {
    #[cfg(target_os = "linux")]
    if let Some(timers) = precise::current() {
        return precise::Sleep::new(timers, deadline, tick).await;
    }
    if let Some(own) = super::deadlines::current() {
        return super::deadlines::Sleep::within(own, deadline, tick).await;
    }
    tokio::time::sleep_until(deadline.into()).await
}

/// `at` rounded up to the next tick of `every` (at least a [`QUANTUM`]) counted from `epoch`: the
/// instant a timer that started at `epoch` fires a sleep due at `at`.
pub fn on_grid(at: Instant, epoch: Instant, every: Duration) -> Instant {
    let every = every.max(QUANTUM).as_nanos();
    let since = at.saturating_duration_since(epoch).as_nanos();
    epoch + Duration::from_nanos((since.div_ceil(every) * every) as u64)
}

/// A timeout elapsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed;

/// `f`, unless `d` passes first: on a thread with its own loop, its deadlines; else tokio's timer.
/// The clock is read and the timer made only if `f` has to wait (a request body already received
/// costs no timer).
pub async fn timeout<F: Future>(d: Duration, f: F) -> Result<F::Output, Elapsed> {
    let own = super::deadlines::current();
    let mut f = std::pin::pin!(f);
    let mut own_sleep = None;
    let mut tokio_sleep = std::pin::pin!(None::<tokio::time::Sleep>);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
            return std::task::Poll::Ready(Ok(v));
        }
        // From the first wait: `f` was not ready when called.
        let elapsed = match &own {
            Some(own) => {
                let s = own_sleep.get_or_insert_with(|| {
                    super::deadlines::Sleep::new(own.clone(), far(Instant::now(), d))
                });
                std::pin::Pin::new(s).poll(cx)
            }
            None => {
                if tokio_sleep.is_none() {
                    let at = far(Instant::now(), d);
                    tokio_sleep.set(Some(tokio::time::sleep_until(at.into())));
                }
                let s = tokio_sleep.as_mut().as_pin_mut().expect("made above");
                s.poll(cx)
            }
        };
        elapsed.map(|()| Err(Elapsed))
    })
    .await
}

/// `now + d`, or a year from now if that overflows.
fn far(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or(now + Duration::from_secs(86_400 * 365))
}

/// A re-armable timeout-grade timer (an HTTP/2 connection's idle and grace timer): tokio's on tokio
/// threads, the loop's deadlines on a thread with its own loop.
#[derive(Debug)]
pub enum Coarse {
    Tokio(std::pin::Pin<Box<tokio::time::Sleep>>),
    Own(super::deadlines::Sleep),
}

impl Coarse {
    /// A timer that fires `d` from now.
    pub fn after(d: Duration) -> Coarse {
        let at = far(Instant::now(), d);
        match super::deadlines::current() {
            Some(own) => Coarse::Own(super::deadlines::Sleep::new(own, at)),
            None => Coarse::Tokio(Box::pin(tokio::time::sleep_until(at.into()))),
        }
    }

    /// Re-arms the timer to fire `d` from now.
    pub fn reset(&mut self, d: Duration) {
        let at = far(Instant::now(), d);
        match self {
            Coarse::Tokio(s) => s.as_mut().reset(at.into()),
            Coarse::Own(s) => s.reset(at),
        }
    }
}

impl Future for Coarse {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        match self.get_mut() {
            Coarse::Tokio(s) => s.as_mut().poll(cx),
            Coarse::Own(s) => std::pin::Pin::new(s).poll(cx),
        }
    }
}

/// A sleep that can be re-armed and polled in place (a connection's pacing timer).
#[derive(Debug, Default)]
pub struct Sleep {
    #[cfg(target_os = "linux")]
    inner: Option<precise::Sleep>,
    #[cfg(not(target_os = "linux"))]
    inner: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Sleep {
    /// Arms the sleep for `deadline`, to end on the thread's next tick of `tick` (see
    /// [`sleep_until_within`]), unless it already is.
    pub fn reset(&mut self, deadline: Instant, tick: Duration) {
        #[cfg(target_os = "linux")]
        {
            if self
                .inner
                .as_ref()
                .is_some_and(|s| s.deadline() == deadline)
            {
                return;
            }
            self.inner = precise::current().map(|t| precise::Sleep::new(t, deadline, tick));
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = tick; // tokio's wheel has its own millisecond ticks
            self.inner = Some(Box::pin(tokio::time::sleep_until(deadline.into())));
        }
    }

    /// Polls the armed sleep; an unarmed one (or one on a thread without [`install`]) never fires.
    pub fn poll(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self.inner.as_mut() {
            #[cfg(target_os = "linux")]
            Some(s) => std::future::Future::poll(std::pin::Pin::new(s), cx),
            #[cfg(not(target_os = "linux"))]
            Some(s) => std::future::Future::poll(s.as_mut(), cx),
            None => std::task::Poll::Pending,
        }
    }

    /// Whether precise sleeps work on this thread (else the caller uses its coarse timer).
    pub fn available() -> bool {
        #[cfg(target_os = "linux")]
        return precise::current().is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }
}

/// Installs this thread's precise timers and starts their task; call it inside the thread's
/// `LocalSet`. A failure (no `timerfd`) leaves tokio's timer in use, which is said once.
pub fn install() {
    super::sys::exact_timers();
    #[cfg(target_os = "linux")]
    if let Err(e) = precise::install() {
        eprintln!("statico: no timerfd ({e}): delays are rounded up to the millisecond");
    }
}

/// Deadlines within this of each other share one `timerfd` expiry: a sleep ends at most this late
/// (plus the wake-up), and however many answers are held a thread wakes for its timer at most once
/// per quantum rather than once per answer.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // its users (timerfd, io_uring) are Linux's
pub const QUANTUM: Duration = Duration::from_micros(25);

#[cfg(target_os = "linux")]
mod precise {
    use std::cell::{Cell, RefCell};
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};
    use std::future::Future;
    use std::hash::{BuildHasherDefault, Hasher};
    use std::os::fd::{AsFd, AsRawFd, RawFd};
    use std::pin::Pin;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    use tokio::io::unix::AsyncFd;

    thread_local! {
        static TIMERS: RefCell<Option<Rc<Timers>>> = const { RefCell::new(None) };
    }

    pub fn current() -> Option<Rc<Timers>> {
        TIMERS.with(|t| t.borrow().clone())
    }

    pub fn install() -> std::io::Result<()> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        // SAFETY: `Fd` owns the timerfd, open for as long as the `AsyncFd` holds it, and
        // `as_raw_fd` always returns that same descriptor.
        let fd = unsafe { AsyncFd::register(Fd(fd)) }.map_err(std::io::Error::from)?;
        let timers = Rc::new(Timers {
            fd,
            heap: RefCell::default(),
            wakers: RefCell::default(),
            armed: Cell::new(None),
            epoch: Instant::now(),
            next: Cell::new(0),
        });
        TIMERS.with(|t| *t.borrow_mut() = Some(timers.clone()));
        tokio::task::spawn_local(drive(timers));
        Ok(())
    }

    /// Sleeps are numbered in order: their number is a good enough hash of itself.
    #[derive(Default)]
    struct Numbered(u64);

    impl Hasher for Numbered {
        fn finish(&self) -> u64 {
            self.0
        }

        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = (self.0 << 8) | u64::from(b);
            }
        }

        fn write_u64(&mut self, n: u64) {
            self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15); // spread over the table's buckets
        }
    }

    /// The `timerfd`, as tokio's reactor wants it.
    struct Fd(TimerFd);

    impl AsRawFd for Fd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }

    /// One thread's deadlines (see the module doc).
    pub struct Timers {
        fd: AsyncFd<Fd>,
        /// When each waiting sleep ends (its deadline on its tick) and the sleep, earliest first;
        /// entries of dropped sleeps linger.
        heap: RefCell<BinaryHeap<Reverse<(Instant, u64)>>>,
        /// The waker of every sleep that is waiting, by its number.
        wakers: RefCell<HashMap<u64, Waker, BuildHasherDefault<Numbered>>>,
        /// What the `timerfd` is armed for.
        armed: Cell<Option<Instant>>,
        /// Where quanta and ticks are counted from.
        epoch: Instant,
        next: Cell<u64>,
    }

    impl Timers {
        /// Waits for `deadline` on its tick of `tick` as sleep `id`, arming the `timerfd` if it
        /// is the earliest.
        fn wait(&self, id: u64, deadline: Instant, tick: Duration, waker: &Waker) {
            let mut wakers = self.wakers.borrow_mut();
            let ends = super::on_grid(deadline, self.epoch, tick);
            match wakers.get_mut(&id) {
                Some(w) => w.clone_from(waker),
                None => {
                    wakers.insert(id, waker.clone());
                    self.heap.borrow_mut().push(Reverse((ends, id)));
                }
            }
            if self.armed.get().is_none_or(|at| ends < at) {
                self.arm(ends);
            }
        }

        /// Arms the `timerfd` for `at`, an instant on the grid.
        fn arm(&self, at: Instant) {
            if self.armed.get() == Some(at) {
                return;
            }
            // A zero expiry would disarm: at least a nanosecond.
            let wait = at
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            let expiry = Expiration::OneShot(TimeSpec::from_duration(wait));
            if self
                .fd
                .get_ref()
                .0
                .set(expiry, TimerSetTimeFlags::empty())
                .is_ok()
            {
                self.armed.set(Some(at));
            }
        }

        /// Wakes every sleep whose expiry has passed; arms for the next.
        fn fire(&self) {
            let now = Instant::now();
            let mut heap = self.heap.borrow_mut();
            while let Some(&Reverse((at, id))) = heap.peek() {
                if at > now {
                    break;
                }
                heap.pop();
                if let Some(w) = self.wakers.borrow_mut().remove(&id) {
                    w.wake();
                }
            }
            self.armed.set(None);
            if let Some(&Reverse((at, _))) = heap.peek() {
                drop(heap);
                self.arm(at);
            }
        }
    }

    /// Fires what is due each time the `timerfd` expires. Its expiry count is not read: `fire`
    /// re-arms it (which zeroes the count) whenever a sleep is left, and every expiry wakes the
    /// reactor again whatever the count (epoll is edge-triggered on each expiry), so clearing
    /// tokio's readiness is enough, and saves a `read` per expiry.
    async fn drive(timers: Rc<Timers>) {
        loop {
            let Ok(mut ready) = timers.fd.readable().await else {
                return;
            };
            ready.clear_ready();
            timers.fire();
        }
    }

    /// One precise sleep.
    pub struct Sleep {
        timers: Rc<Timers>,
        deadline: Instant,
        /// It ends on a tick of this (see [`super::sleep_until_within`]).
        tick: Duration,
        id: Option<u64>,
    }

    impl std::fmt::Debug for Sleep {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Sleep")
                .field("deadline", &self.deadline)
                .finish()
        }
    }

    impl Sleep {
        pub fn new(timers: Rc<Timers>, deadline: Instant, tick: Duration) -> Sleep {
            Sleep {
                timers,
                deadline,
                tick,
                id: None,
            }
        }

        pub fn deadline(&self) -> Instant {
            self.deadline
        }
    }

    impl Future for Sleep {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if Instant::now() >= self.deadline {
                if let Some(id) = self.id.take() {
                    self.timers.wakers.borrow_mut().remove(&id);
                }
                return Poll::Ready(());
            }
            let id = match self.id {
                Some(id) => id,
                None => {
                    let id = self.timers.next.get();
                    self.timers.next.set(id + 1);
                    self.id = Some(id);
                    id
                }
            };
            self.timers.wait(id, self.deadline, self.tick, cx.waker());
            Poll::Pending
        }
    }

    impl Drop for Sleep {
        fn drop(&mut self) {
            if let Some(id) = self.id {
                self.timers.wakers.borrow_mut().remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_on_the_next_tick_of_its_grid_never_before_its_deadline() {
        let epoch = Instant::now();
        let us = Duration::from_micros(1);
        let tick = Duration::from_micros(100);
        assert_eq!(on_grid(epoch + 10 * us, epoch, tick), epoch + tick);
        assert_eq!(
            on_grid(epoch + 100 * us, epoch, tick),
            epoch + tick,
            "on a tick"
        );
        assert_eq!(on_grid(epoch + 101 * us, epoch, tick), epoch + 2 * tick);
        // No tick, or one shorter than the quantum: the quantum.
        assert_eq!(
            on_grid(epoch + 10 * us, epoch, Duration::ZERO),
            epoch + QUANTUM
        );
        assert_eq!(on_grid(epoch + 10 * us, epoch, us), epoch + QUANTUM);
        // Before the epoch: the epoch.
        assert_eq!(on_grid(epoch, epoch + tick, tick), epoch + tick);
    }
}
