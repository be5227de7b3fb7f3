//! When an HTTP/2 connection is idle, and when, after GOAWAY, it is over: the connection's one timer
//! (`--idle-timeout` while no stream is open, then the GOAWAY grace) and what tells idle apart from a
//! body still going out.
//!
//! A stream's future ends once its body is handed to `h2`, which may go on sending it to a slow reader
//! long after; and a stream answered inside the connection's poll has no future at all. So the timer
//! is not re-armed per request: when it fires, it asks whether a stream was answered since it last
//! looked or `h2` still holds one, and if so, whether the output moved within the timeout
//! ([`OutputMoved`]); then it waits on from there. Output with no stream behind it (the answers to a
//! client's PINGs) keeps nothing open. HTTP/1.1's rule is the same: output may stall this long and no
//! more.

use std::time::{Duration, Instant};

use super::{OutputMoved, GOAWAY_GRACE};
use crate::kernel::timer::Coarse;

/// What a fired timer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fired {
    /// A stream's output moved within the timeout: re-armed for the rest of it.
    Rearmed,
    /// Idle for `--idle-timeout`: time for GOAWAY.
    Idle,
    /// After GOAWAY, the grace is over: the connection closes.
    Over,
}

/// The connection's timer and whether it is past GOAWAY.
pub struct Idle {
    timer: Coarse,
    idle_timeout: Duration,
    moved: OutputMoved,
    /// A stream was answered at once since the timer last fired.
    answered: bool,
    draining: bool,
}

impl Idle {
    pub fn new(idle_timeout: Duration, moved: OutputMoved) -> Idle {
        Idle {
            timer: Coarse::after(idle_timeout),
            idle_timeout,
            moved,
            answered: false,
            draining: false,
        }
    }

    /// The timer, to wait on while no stream's future is open.
    pub fn due(&mut self) -> &mut Coarse {
        &mut self.timer
    }

    pub fn draining(&self) -> bool {
        self.draining
    }

    /// GOAWAY went out: the grace starts.
    pub fn goaway(&mut self) {
        self.draining = true;
        self.timer.reset(GOAWAY_GRACE);
    }

    /// A stream was answered inside the connection's poll.
    pub fn answered(&mut self) {
        self.answered = true;
    }

    /// The last stream's future ended: the timeout starts again from now.
    pub fn streams_ended(&mut self) {
        self.timer.reset(self.wait());
    }

    /// The timer fired; `h2_holds_streams`: `h2` still has a stream (a body going out).
    pub fn fired(&mut self, h2_holds_streams: bool) -> Fired {
        let streaming = std::mem::take(&mut self.answered) || h2_holds_streams;
        let rest = still_moving(self.moved.moved(), self.wait()).filter(|_| streaming);
        match (rest, self.draining) {
            (Some(rest), _) => {
                self.timer.reset(rest);
                Fired::Rearmed
            }
            (None, true) => Fired::Over,
            (None, false) => Fired::Idle,
        }
    }

    fn wait(&self) -> Duration {
        if self.draining {
            GOAWAY_GRACE
        } else {
            self.idle_timeout
        }
    }
}

/// How long after output last moved (at `moved`) a timer of `wait` is due, if it is not yet.
fn still_moving(moved: Instant, wait: Duration) -> Option<Duration> {
    (moved + wait)
        .checked_duration_since(Instant::now())
        .filter(|rest| !rest.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `Idle` whose output last moved at `moved`, run with `check` (its timer is tokio's here).
    fn idle_moved_at(moved: Instant, check: impl FnOnce(&mut Idle)) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _in_runtime = rt.enter();
        check(&mut Idle::new(
            Duration::from_secs(60),
            super::super::OutputState::moved_at(moved),
        ));
    }

    /// `secs` ago, if the monotonic clock goes back that far.
    fn ago(secs: u64) -> Option<Instant> {
        Instant::now().checked_sub(Duration::from_secs(secs))
    }

    #[test]
    fn output_extends_the_timeout_only_for_a_stream() {
        let Some(second_ago) = ago(1) else { return };
        // Output a second ago, no stream answered nor held: a PING's answer, idle.
        idle_moved_at(second_ago, |idle| {
            assert_eq!(idle.fired(false), Fired::Idle);
            // The same output with a body still held by h2: not idle yet.
            assert_eq!(idle.fired(true), Fired::Rearmed);
            // A stream answered since the last look counts once.
            idle.answered();
            assert_eq!(idle.fired(false), Fired::Rearmed);
            assert_eq!(idle.fired(false), Fired::Idle);
        });
    }

    #[test]
    fn output_older_than_the_timeout_is_idle_and_after_goaway_over() {
        let Some(long_ago) = ago(61) else { return };
        idle_moved_at(long_ago, |idle| {
            assert_eq!(idle.fired(true), Fired::Idle);
            idle.goaway();
            assert!(idle.draining());
            // The grace is 2 s: output 61 s ago is long past it.
            assert_eq!(idle.fired(true), Fired::Over);
        });
    }

    #[test]
    fn still_moving_is_the_rest_of_the_wait() {
        let (Some(ten), Some(sixty)) = (ago(10), ago(60)) else {
            return;
        };
        let rest = still_moving(ten, Duration::from_secs(60)).unwrap();
        assert!(rest <= Duration::from_secs(50) && rest > Duration::from_secs(49));
        assert_eq!(still_moving(sixty, Duration::from_secs(60)), None);
    }
}
