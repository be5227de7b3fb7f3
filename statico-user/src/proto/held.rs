//! How a stream (HTTP/2, HTTP/3) waits where its answer's [`Delivery`] says: until a step's
//! instant, on the precise timer (on its tick, for a stream's next event: [`Delivery::tick`]);
//! queued in a pool, until the pool decides (woken through the task's waker, from whichever thread
//! freed a server) or the queue timeout comes. What to wait for, and what comes after, is the
//! delivery's; the two protocols share this wait.
//!
//! While the answer holds its place in its pool (queued, or in service), a client that goes away
//! (`gone` resolves: a stream reset) ends the wait: the stream drops its delivery, whose ticket
//! counts the request `gone` — as it does when the connection's task is dropped.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;

use crate::catalog::model::delivery::{Clock, Delivery, Step};

/// A stream's time for one run of steps: read from the system clock the first time a step needs
/// it, not at all for an answer that is not held.
#[derive(Default)]
pub struct ReadOnce(Option<Instant>);

impl Clock for ReadOnce {
    fn now(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }
}

/// Waits as `step` says ([`Step::Wait`], [`Step::Queued`]; any other returns at once). Returns
/// false when the client went away while the answer held its place in its pool.
pub async fn wait<G: Future<Output = ()>>(
    delivery: &Delivery,
    step: &Step,
    gone: Pin<&mut G>,
) -> bool {
    let (until, queued) = match step {
        Step::Wait(at) => (*at, false),
        Step::Queued(at) => (*at, true),
        _ => return true,
    };
    let timer = crate::kernel::timer::sleep_until_within(until, delivery.tick());
    if !delivery.admitting() {
        timer.await;
        return true;
    }
    let decided = poll_fn(|cx| match queued && !delivery.wait_with(cx.waker()) {
        true => Poll::Ready(()),
        false => Poll::Pending,
    });
    tokio::select! {
        biased;
        () = gone => false,
        () = decided => true,
        () = timer => true,
    }
}
