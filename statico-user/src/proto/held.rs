//! How a stream (HTTP/2, HTTP/3) waits out a route's held answer before delivering it: it takes
//! the answer's [`Ticket`] when its request is complete, waits in its pool's queue until the pool
//! decides (woken through the task's waker, from whichever thread freed a server) or its queue
//! timeout comes, then until the end of its service — on the precise timer, to the instant the
//! schedule says. A shed request gets its shed answer. The two protocols share this; the steps
//! after it (head, body delay, pieces, faults) are [`crate::catalog::hold::Delivery`]'s.
//!
//! If the client goes away meanwhile (`gone` resolves: a stream reset, or the connection's task is
//! dropped with this future), the ticket is dropped and counts the request `gone`.

use std::future::{poll_fn, Future};
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::catalog::route::load::Ticket;
use crate::catalog::route::pool::Fate;
use crate::catalog::StreamAnswer;

/// What to deliver after the wait: the answer (its delay already waited out) or its shed answer,
/// and the ticket to finish when it is delivered (the delivery's `Record` step). `None`: the client
/// went away.
pub async fn admitted(
    mut answer: StreamAnswer,
    arrived: Instant,
    gone: impl Future<Output = ()>,
) -> Option<(StreamAnswer, Option<Ticket>)> {
    let Some(ticket) = answer.admit(arrived) else {
        return Some((answer, None));
    };
    tokio::pin!(gone);
    loop {
        let step = async {
            match ticket.fate_at(Instant::now()) {
                Fate::Waiting { deadline } => {
                    decided(&ticket, deadline).await;
                    None
                }
                Fate::Serving { due, .. } => {
                    crate::kernel::timer::sleep_until(due).await;
                    Some(true)
                }
                Fate::Shed { .. } | Fate::Left => Some(false),
            }
        };
        let served = tokio::select! {
            biased;
            () = &mut gone => return None,
            step = step => step,
        };
        match served {
            None => continue,
            Some(true) => {
                answer.hold.delay = Duration::ZERO;
                return Some((answer, Some(ticket)));
            }
            Some(false) => {
                let how = ticket.shed_as();
                ticket.finish(Instant::now());
                return Some((answer.shed(how), None));
            }
        }
    }
}

/// Until the pool decides a waiting ticket's fate, or its queue timeout comes.
async fn decided(ticket: &Ticket, deadline: Option<Instant>) {
    let woken = poll_fn(|cx| match ticket.register(cx.waker()) {
        Fate::Waiting { .. } => Poll::Pending,
        _ => Poll::Ready(()),
    });
    match deadline {
        Some(at) => {
            tokio::select! {
                () = woken => {}
                () = crate::kernel::timer::sleep_until(at) => {}
            }
        }
        None => woken.await,
    }
}
