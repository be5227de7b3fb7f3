//! One connection's policy, shared by every runtime: what to read, what to send, when to wait, when to
//! give up. No I/O, no clock: a runtime passes in bytes and `now`, and asks what next.
//!
//! [`Session`] decides HTTP (which response, framing, errors); this module decides everything around
//! it that used to be copied into each runtime and drifted:
//! - **unconsumed input**: a partial head is kept here between reads; fresh bytes are parsed straight
//!   from the runtime's buffer when nothing is kept, so the common case copies no input;
//! - **backpressure**: at most [`MAX_UNSENT`] bytes of unsent output per connection. Past that the
//!   connection stops answering and [`Connection::wants_input`] turns false until the output drains —
//!   what an `await` on a write does implicitly, made explicit so that io_uring does the same;
//! - **deadlines**, one at a time ([`Connection::deadline`]): idle between requests, header (a head must
//!   arrive whole within `--header-timeout` of its first byte; a body may pause that long), send (output
//!   that makes no progress for `--idle-timeout`), the `--delay` / `--body-delay` waits, and lingering;
//! - **pacing**, when the catalog may hold an answer (`--delay`, `--body-delay`, a route's drawn
//!   delays and pools, paced bodies and faults, a pause): one request at a time, its response
//!   written into the held answer and given out as its [`Delivery`] steps say — the head and body
//!   as output bytes (the body delay counted from when the head is sent, a paced body's pieces cut to
//!   the room left under [`MAX_UNSENT`]), the waits as phases with their deadlines, a fault as how
//!   the connection ends (reset, close, stall) or closes after what was sent (truncate);
//! - **queueing**, for a route in a pool: while the held answer waits in the pool's queue
//!   ([`Phase::Queued`]) a runtime gives its waker with [`Connection::wait_with`] (once per request:
//!   [`Connection::queued`]) and calls [`Connection::on_deadline`] when it is woken. A connection
//!   that ends while it holds an answer drops its delivery, which counts the request `gone` and
//!   gives back its place;
//! - **closing**: after a response that closes, with a lingering read when the client may still be
//!   sending (so that its unread bytes do not turn our close into a reset that destroys the response);
//! - **protocol**: with h2c on, whether the first bytes are HTTP/2's preface, and the switch after
//!   `101 Switching Protocols`.
//!
//! A runtime's loop is: hand received bytes to [`Connection::receive`]; send [`Connection::output`] and
//! report with [`Connection::sent`]; read only while [`Connection::wants_input`]; act on
//! [`Connection::status`]; wake at [`Connection::deadline`] and call [`Connection::on_deadline`].
//! A runtime whose sends complete later (io_uring) calls [`Connection::send_started`] first: the output
//! buffer is then frozen (the kernel reads it) and new responses queue behind it.
//!
//! This is where a TLS record layer will sit: between the runtime's bytes and [`Connection::receive`] /
//! [`Connection::output`].

use std::time::{Duration, Instant};

use statico_common::Counter;

use crate::catalog::model::delivery::{Delivery, Step};
use crate::catalog::model::fault::Fault;
use crate::conn::output::{Output, Sink, Staged};
use crate::observe::dump::Dumper;
use crate::observe::meter::WorkerCounters;
use crate::proto::detect::{self, UpgradeRequest};
use crate::proto::http1::parser::Limits;
use crate::proto::http1::session::{Batch, Pace, Session};

/// Most unsent output one connection holds before it stops reading and answering. A few times the
/// 64 KiB a read takes: enough to keep a pipelining client's socket full, small enough that 10 000
/// clients that never read cost the server at most a few GiB... of kernel socket buffers, and this
/// much each of ours.
pub const MAX_UNSENT: usize = 256 * 1024;
/// After a response that closes while the client may still be sending: how long and how much to read
/// and discard before closing.
pub const LINGER_TIME: Duration = crate::proto::CLOSE_GRACE;
pub const LINGER_BYTES: usize = 1 << 20;
/// Most input kept while the connection does not want any: what a runtime that cannot stop its
/// receives at once (io_uring's multishot) may still deliver. Past this the client is sending what
/// statico never asked for, and is closed rather than buffered.
pub const MAX_KEPT_INPUT: usize = 4 << 20;
/// Input a connection keeps receiving while it holds an answer, before a runtime whose receives run
/// on their own stops them ([`Connection::pauses_input`]): one read's worth.
pub const HELD_ALLOWANCE: usize = 64 * 1024;

/// The per-connection settings every connection of a server shares.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub limits: Limits,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub verbose: u8,
    /// `--http2`: the first bytes may be the HTTP/2 preface, and `Upgrade: h2c` is honoured.
    pub h2c: bool,
}

/// What a connection reads from its worker on each call.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub policy: &'a Policy,
    /// What requests are answered with.
    pub catalog: crate::catalog::View<'a>,
    pub counters: &'a WorkerCounters,
}

/// Which deadline [`Connection::deadline`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Between requests: `--idle-timeout`.
    Idle,
    /// Within a request: `--header-timeout`.
    Header,
    /// Output that has not moved: `--idle-timeout`.
    Send,
    /// A held response's delay (or its service in a pool, or a pause).
    Delay,
    /// A held body's delay after its head, or the next piece of a paced body.
    BodyDelay,
    /// A stream's next event: a pacing wait that may end on a shared tick ([`Timer::tick`]).
    Event,
    /// The lingering read after a closing response.
    Linger,
    /// A stalled answer (a route's `stall` fault): the idle timeout ends it.
    Stall,
    /// A request waiting in a pool's queue: its queue timeout (or, without one, the longest hold).
    Queue,
}

impl Timer {
    /// The pacing waits release a response: a runtime arms a precise timer for them. The others end
    /// the connection and may be checked by a coarse periodic tick.
    pub fn is_pacing(self) -> bool {
        matches!(
            self,
            Timer::Delay | Timer::BodyDelay | Timer::Event | Timer::Queue
        )
    }

    /// How late a runtime's timer may fire for this wait: a stream's events due within one
    /// [`EVENT_TICK`](crate::catalog::model::events::EVENT_TICK) share its expiry; the others are
    /// exact (zero: the timer's own quantum).
    pub fn tick(self) -> Duration {
        match self {
            Timer::Event => crate::catalog::model::events::EVENT_TICK,
            _ => Duration::ZERO,
        }
    }
}

/// What the runtime does once it has sent what [`Connection::output`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Carry on: send the output, read while [`Connection::wants_input`], wake at the deadline.
    Open,
    /// Everything is sent: shut down our sending side, call [`Connection::shut_down_write`], and keep
    /// reading (the input is discarded) until the status says close.
    ShutdownWrite,
    /// Close the connection now.
    Close,
    /// Everything is sent and the connection speaks HTTP/2 from here: [`Connection::into_h2`].
    Upgrade,
    /// Close with a reset (`SO_LINGER` 0, so the kernel sends RST, not FIN): once everything is sent
    /// (a route's `reset` fault), or at once, dropping what is unsent (a client that took nothing for
    /// the idle timeout).
    Reset,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading and answering requests.
    Exchange,
    /// The response in `held` is released at `until`.
    Delaying,
    /// The request in `held` waits for a pool's server (its ticket is woken), at most until `until`.
    Queued,
    /// The head is in the output and the body in `held`, until the head is sent...
    SendingHead,
    /// ...and then until `until` (again for each piece of a paced body).
    BodyDelaying,
    /// A stalled answer: nothing is sent or read until `until` (the idle timeout).
    Stalled,
    /// Our side is shut; input is read and discarded until `until` or [`LINGER_BYTES`].
    Lingering { discarded: usize },
    /// Done: close now, whatever is unsent.
    Closed,
}

/// What happens when the output is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
enum After {
    KeepAlive,
    Close,
    /// Close after a lingering read.
    Linger,
    /// Switch to HTTP/2: by prior knowledge (`None`), or after `101` for this request.
    Upgrade(Option<Box<UpgradeRequest>>),
    /// Reset the connection (a route's `reset` fault, or a client that took nothing for the idle
    /// timeout); a connection that closes for another reason once this is set resets too.
    Reset,
}

/// One connection's state, apart from its socket.
#[derive(Debug)]
pub struct Connection {
    session: Session,
    dumper: Dumper,
    /// Input received and not yet consumed: a partial head or chunk line, or requests waiting for the
    /// output to drain or for a paced response to finish.
    pending: Vec<u8>,
    /// Output not yet sent: own bytes and shared bodies, in order; frozen while a send of it is in
    /// flight (new output then starts a new chunk).
    out: Output,
    /// A held response (or what is left of its body), from the first held one on.
    held: Option<Box<Held>>,
    phase: Phase,
    after: After,
    /// When the current pacing or lingering phase ends.
    until: Instant,
    /// The read deadline: idle between requests, header within one.
    read_deadline: (Instant, Timer),
    /// When unsent output times out if it does not move.
    send_deadline: Instant,
    /// With h2c: the first bytes have not yet shown which protocol this is.
    undecided: bool,
}

/// A held response: its bytes (shared bodies by reference), how far they have gone out, where its
/// body starts, and its [`Delivery`]. Boxed in the connection, and only once it paces: most
/// connections never do.
#[derive(Debug, Default)]
struct Held {
    bytes: Staged,
    /// Where the answer ends in `bytes`: a request that may be shed after waiting has its shed
    /// answer written behind its answer, from here.
    end: usize,
    /// The next byte to go out.
    at: usize,
    /// Where the body starts (`end` for an answer that goes whole with its head).
    body_at: usize,
    delivery: Delivery,
}

impl Held {
    /// The request is shed with a status: its shed answer, written behind the answer, goes out
    /// whole instead (shed at once, the answer written is the shed answer).
    fn shed(&mut self) {
        if self.end < self.bytes.len() {
            (self.at, self.end) = (self.end, self.bytes.len());
        }
        self.body_at = self.end;
    }
}

impl Connection {
    pub fn new(policy: &Policy, now: Instant) -> Self {
        Connection {
            session: Session::with_h2c(policy.limits, policy.h2c),
            dumper: Dumper::new(policy.verbose),
            pending: Vec::new(),
            out: Output::default(),
            held: None,
            phase: Phase::Exchange,
            after: After::KeepAlive,
            until: now,
            read_deadline: (now + policy.idle_timeout, Timer::Idle),
            send_deadline: now,
            undecided: policy.h2c,
        }
    }

    /// A connection under TLS: HTTP/2 comes by ALPN and its preface, never by `Upgrade: h2c`, which is
    /// for cleartext only (RFC 9113 §3.1).
    pub fn new_tls(policy: &Policy, now: Instant) -> Self {
        Connection {
            session: Session::with_h2c(policy.limits, false),
            ..Connection::new(policy, now)
        }
    }

    /// Bytes the client sent. They are answered now where possible, kept otherwise.
    pub fn receive(&mut self, data: &[u8], now: Instant, env: Env) {
        env.counters.add(Counter::BytesIn, data.len() as u64);
        env.counters.add(Counter::Reads, 1);
        if let Phase::Lingering { discarded } = &mut self.phase {
            *discarded += data.len();
            if *discarded > LINGER_BYTES {
                self.phase = Phase::Closed;
            }
            return;
        }
        if matches!(self.after, After::Close | After::Linger | After::Reset)
            || self.phase == Phase::Closed
        {
            return; // input after a closing response is discarded
        }
        let was_between = self.session.between_requests() && self.pending.is_empty();
        let mut fresh = data;
        if self.undecided {
            self.pending.extend_from_slice(fresh);
            fresh = &[];
            self.decide_protocol();
            if self.undecided {
                self.refresh_read_deadline(was_between, 0, now, env);
                return;
            }
        }
        let answered = self.answer(fresh, now, env);
        self.refresh_read_deadline(was_between, answered, now, env);
        if self.pending.len() > MAX_KEPT_INPUT {
            self.phase = Phase::Closed;
        }
    }

    /// The client closed its side (or the connection failed).
    pub fn peer_closed(&mut self) {
        self.phase = Phase::Closed;
    }

    /// Whether the runtime should read: false while output is backed up, a paced response is in
    /// progress, or a closing response is queued.
    pub fn wants_input(&self) -> bool {
        match self.phase {
            Phase::Lingering { .. } => true,
            Phase::Exchange => self.after == After::KeepAlive && self.unsent() < MAX_UNSENT,
            _ => false,
        }
    }

    /// Whether bytes received now would be kept for later (rather than answered or discarded): when
    /// this is true and [`Connection::wants_input`] is false, a runtime whose receives run on their
    /// own (io_uring's multishot) stops them, so that kept input stays bounded.
    pub fn keeps_input(&self) -> bool {
        !matches!(self.phase, Phase::Closed | Phase::Lingering { .. })
            && !matches!(self.after, After::Close | After::Linger | After::Reset)
    }

    /// Whether a runtime whose receives run on their own (io_uring's multishot) stops them now: when
    /// received bytes would be kept — except while an answer is held and less than
    /// [`HELD_ALLOWANCE`] is kept. A request-and-response client sends nothing while it waits for its
    /// answer, and stopping and re-arming the receive around every held answer would cost two more
    /// operations each; a client that sends anyway is stopped past the allowance.
    pub fn pauses_input(&self) -> bool {
        self.keeps_input() && !(self.holds_answer() && self.pending.len() < HELD_ALLOWANCE)
    }

    /// Whether an answer is held (delayed, queued, its body paced or stalled): a runtime keeps
    /// reading then (within [`HELD_ALLOWANCE`], see [`Connection::pauses_input`]), so that a client
    /// that goes away is noticed at once, not when the answer is due.
    pub fn holds_answer(&self) -> bool {
        matches!(
            self.phase,
            Phase::Delaying
                | Phase::Queued
                | Phase::SendingHead
                | Phase::BodyDelaying
                | Phase::Stalled
        )
    }

    /// The bytes to send now (empty: nothing to send).
    pub fn output(&self) -> &[u8] {
        self.out.front()
    }

    /// The bytes to send now as slices (own bytes and shared bodies, in order), at most as many as
    /// `slices` holds; returns how many. Sent with one `writev`/`sendmsg`, reported with `sent`.
    pub fn output_slices<'a>(&'a self, slices: &mut [std::io::IoSlice<'a>]) -> usize {
        self.out.slices(slices)
    }

    /// The next send for a runtime that can call `sendfile` (see [`crate::conn::output::Output::next`]).
    pub fn output_next<'a>(
        &'a self,
        slices: &mut [std::io::IoSlice<'a>],
    ) -> crate::conn::output::Next {
        self.out.next(slices)
    }

    /// A send of [`Connection::output`] is in flight: its bytes must stay where they are until
    /// [`Connection::sent`] reports it done.
    pub fn send_started(&mut self) {
        self.out.freeze();
    }

    /// `n` bytes of the output were sent (0: the socket took nothing). Answers what was waiting for the
    /// output to drain.
    pub fn sent(&mut self, n: usize, now: Instant, env: Env) {
        if n > 0 {
            env.counters.add(Counter::Writes, 1);
        }
        self.taken(n, now, env);
    }

    /// `n` bytes of the output were taken by a layer that sends them itself (TLS: into records; the
    /// layer counts its own `writes`, the socket's).
    pub fn taken(&mut self, n: usize, now: Instant, env: Env) {
        let backed_up = self.unsent() >= MAX_UNSENT;
        self.out.sent(n);
        if n > 0 {
            env.counters.add(Counter::BytesOut, n as u64);
            self.send_deadline = now + env.policy.idle_timeout;
        }
        if self.unsent() == 0 {
            self.drained(now, env);
        }
        if backed_up && !self.pending.is_empty() {
            let answered = self.answer(&[], now, env);
            self.refresh_read_deadline(false, answered, now, env);
        }
    }

    /// What the runtime does next (see [`Status`]).
    pub fn status(&self) -> Status {
        if self.phase == Phase::Closed {
            return match self.after {
                After::Reset => Status::Reset,
                _ => Status::Close,
            };
        }
        if self.phase != Phase::Exchange || self.unsent() > 0 || self.out.in_flight() {
            return Status::Open;
        }
        match self.after {
            After::KeepAlive => Status::Open,
            After::Close => Status::Close,
            After::Linger => Status::ShutdownWrite,
            After::Upgrade(_) => Status::Upgrade,
            After::Reset => Status::Reset,
        }
    }

    /// The connection is over (the peer went away, a timeout, a failed send): close now, whatever is
    /// still unsent — in a layer under the connection too.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Our sending side is shut down: linger, reading and discarding.
    pub fn shut_down_write(&mut self, now: Instant) {
        self.phase = Phase::Lingering { discarded: 0 };
        self.until = now + LINGER_TIME;
    }

    /// When the runtime must call [`Connection::on_deadline`] at the latest, and why.
    pub fn deadline(&self) -> (Instant, Timer) {
        match self.phase {
            Phase::Delaying => (self.until, Timer::Delay),
            Phase::Queued => (self.until, Timer::Queue),
            // A paced body whose output does not move times out like any other output.
            Phase::BodyDelaying if self.unsent() > 0 && self.send_deadline < self.until => {
                (self.send_deadline, Timer::Send)
            }
            Phase::BodyDelaying
                if self
                    .held
                    .as_ref()
                    .is_some_and(|h| !h.delivery.tick().is_zero()) =>
            {
                (self.until, Timer::Event)
            }
            Phase::BodyDelaying => (self.until, Timer::BodyDelay),
            Phase::Stalled => (self.until, Timer::Stall),
            Phase::Lingering { .. } => (self.until, Timer::Linger),
            _ if self.unsent() > 0 => (self.send_deadline, Timer::Send),
            _ => self.read_deadline,
        }
    }

    /// The deadline may have passed: release a paced response, or end the connection (a timeout is
    /// counted). Early calls do nothing.
    pub fn on_deadline(&mut self, now: Instant, env: Env) {
        let (at, timer) = self.deadline();
        if now < at && timer != Timer::Queue {
            return;
        }
        match timer {
            // The held answer's next steps (woken by the pool, or the queue timeout: whatever the
            // pool decided).
            Timer::Delay | Timer::Queue | Timer::BodyDelay | Timer::Event => self.deliver(now, env),
            Timer::Linger => self.phase = Phase::Closed,
            Timer::Stall => {
                env.counters.add(Counter::Timeouts, 1);
                self.phase = Phase::Closed;
            }
            Timer::Idle | Timer::Header => {
                env.counters.add(Counter::Timeouts, 1);
                self.phase = Phase::Closed;
            }
            // A client that took nothing for the idle timeout: closed with a reset, so that the
            // kernel drops what it holds unsent rather than retrying it for minutes from a closed
            // socket (FIN_WAIT1).
            Timer::Send => {
                env.counters.add(Counter::Timeouts, 1);
                (self.phase, self.after) = (Phase::Closed, After::Reset);
            }
        }
        self.answer_pending(now, env);
    }

    /// A held answer is over: the requests that came in behind it are answered.
    fn answer_pending(&mut self, now: Instant, env: Env) {
        if self.phase == Phase::Exchange && !self.pending.is_empty() {
            let answered = self.answer(&[], now, env);
            self.refresh_read_deadline(false, answered, now, env);
        }
    }

    /// A request waiting in a pool's queue: what tells it from every other (a number never given
    /// twice), for a runtime that registers its waker once per queued request.
    pub fn queued(&self) -> Option<u64> {
        match self.phase {
            Phase::Queued => self.held.as_ref()?.delivery.ticket_id(),
            _ => None,
        }
    }

    /// While a request waits in a pool's queue: gives the pool the waker to call when it decides,
    /// after which the runtime calls [`Connection::on_deadline`]. Returns whether it still waits
    /// (false: decided already, call [`Connection::on_deadline`] now).
    pub fn wait_with(&self, waker: &std::task::Waker) -> bool {
        match (self.phase, &self.held) {
            (Phase::Queued, Some(held)) => held.delivery.wait_with(waker),
            _ => false,
        }
    }

    /// Nothing in progress: no partial request, nothing unsent or held. Shutdown closes such
    /// connections at once.
    pub fn is_idle(&self) -> bool {
        self.phase == Phase::Exchange
            && self.after == After::KeepAlive
            && self.unsent() == 0
            && self.pending.is_empty()
            && self.session.between_requests()
    }

    /// For [`Status::Upgrade`]: the bytes received after the switch, and the request to answer on
    /// stream 1 after an `Upgrade: h2c` (none by prior knowledge).
    pub fn into_h2(self) -> (Vec<u8>, Option<UpgradeRequest>) {
        match self.after {
            After::Upgrade(upgrade) => (self.pending, upgrade.map(|u| *u)),
            _ => (self.pending, None),
        }
    }

    /// Input received and not yet answered (a partial head or chunk line, or requests waiting):
    /// what the fuzz oracle bounds (`fuzz/oracle/connection.rs`).
    pub fn kept_input(&self) -> usize {
        self.pending.len()
    }

    fn unsent(&self) -> usize {
        self.out.unsent()
    }

    /// With h2c: prior knowledge if the input starts with the preface; HTTP/1.x if the first line says
    /// so; anything else is an invalid preface, a connection error (RFC 9113 §3.4): closed unanswered.
    fn decide_protocol(&mut self) {
        if self.pending.starts_with(detect::PREFACE) {
            self.undecided = false;
            self.after = After::Upgrade(None);
            return;
        }
        if detect::PREFACE.starts_with(&self.pending) {
            return; // a prefix of the preface: read more before deciding
        }
        match detect::first_line_is_http1(&self.pending) {
            None => {} // the first line is not complete yet
            Some(false) => self.phase = Phase::Closed,
            Some(true) => self.undecided = false,
        }
    }

    fn can_answer(&self) -> bool {
        self.phase == Phase::Exchange
            && self.after == After::KeepAlive
            && !self.undecided
            && self.unsent() < MAX_UNSENT
    }

    /// Answers what the kept input and `fresh` hold, as far as output room and pacing allow; keeps the
    /// rest. Returns the requests answered.
    fn answer(&mut self, fresh: &[u8], now: Instant, env: Env) -> u64 {
        let mut answered = 0;
        let mut fresh = fresh;
        while self.can_answer() {
            let batch = if self.pending.is_empty() {
                // Nothing kept: parse the runtime's buffer in place and keep only what is left of it.
                let batch = self.answer_batch(fresh, now, env);
                self.pending.extend_from_slice(&fresh[batch.consumed..]);
                fresh = &[];
                batch
            } else {
                self.pending.extend_from_slice(fresh);
                fresh = &[];
                let mut kept = std::mem::take(&mut self.pending);
                let batch = self.answer_batch(&kept, now, env);
                kept.drain(..batch.consumed);
                self.pending = kept;
                batch
            };
            answered += batch.requests;
            let more = env.catalog.paced() && batch.requests > 0 && !batch.close;
            if !more || self.pending.is_empty() {
                break;
            }
        }
        if !fresh.is_empty() && !matches!(self.after, After::Close | After::Linger | After::Reset) {
            self.pending.extend_from_slice(fresh);
        }
        answered
    }

    /// One call of the session over `input`: responses go to the output (or, paced, wait for their
    /// delay); what the batch says about closing and upgrading is remembered.
    fn answer_batch(&mut self, input: &[u8], now: Instant, env: Env) -> Batch {
        let paced = env.catalog.paced();
        let was_empty = self.unsent() == 0;
        let room = MAX_UNSENT.saturating_sub(self.unsent());
        // Paced: one response at a time into `held` (a copy: it is released by pieces).
        let mut batch = if paced {
            let held = self.held.get_or_insert_with(Box::default);
            held.at = 0;
            held.bytes.clear();
            let target = &mut held.bytes;
            let catalog = env.catalog.at(now);
            (self.session).process(input, target, catalog, Pace::OneByOne, &mut self.dumper)
        } else {
            let limit = Pace::UpTo(self.out.unsent() + room);
            (self.session).process(input, &mut self.out, env.catalog, limit, &mut self.dumper)
        };
        batch.count(env.counters);
        if batch.close {
            // Linger when the client may still be sending: after an error, or a close it did not
            // ask for. Not on whether more bytes came in this read: that depends on how the reads
            // fell (found by the `connection` fuzz target); bytes read here are discarded anyway.
            self.after = if batch.error.is_some() || batch.unasked_close {
                After::Linger
            } else {
                After::Close
            };
        }
        if let Some(upgrade) = batch.upgrade.take() {
            self.after = After::Upgrade(Some(upgrade));
        }
        if paced {
            self.pace(&mut batch, now, env);
        } else if was_empty && self.unsent() > 0 {
            self.send_deadline = now + env.policy.idle_timeout;
        }
        batch
    }

    /// A response just went into `held`. An interim or error response goes out at once; an answer
    /// waits for its delay.
    fn pace(&mut self, batch: &mut Batch, now: Instant, env: Env) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        if batch.requests == 0 {
            self.emit_staged(&held.bytes, 0..held.bytes.len(), now, env);
            held.bytes.clear();
            self.held = Some(held);
            return;
        }
        held.end = batch.shed_at.unwrap_or(held.bytes.len());
        held.body_at = batch
            .body_at
            .filter(|&at| at < held.end)
            .unwrap_or(held.end);
        let body_len = held.end - held.body_at;
        // A shed answer (behind the answer, or the answer itself) goes out whole: body length 0.
        held.delivery = Delivery::new(batch.hold, body_len, batch.ticket.take(), None, Some(0))
            .paused_by(env.catalog.pauses())
            .with_events(batch.events.take());
        self.held = Some(held);
        self.deliver(now, env);
    }

    /// Takes the held answer's steps up to the first that waits: the head and body they give out
    /// go to the output (in one piece when they follow each other), what they wait for becomes the
    /// phase, a fault becomes how the connection ends.
    fn deliver(&mut self, now: Instant, env: Env) {
        self.phase = Phase::Exchange;
        let Some(mut held) = self.held.take() else {
            return;
        };
        let mut clock = now;
        // What the steps give out: from `from` to `held.at`.
        let mut from = held.at;
        loop {
            // A client that does not read gets no more of a paced body, or of a stream's events,
            // than it has room for.
            let room = MAX_UNSENT.saturating_sub(self.unsent() + (held.at - from));
            match held.delivery.next(&mut clock, room) {
                Step::Wait(until) => {
                    self.phase = match held.delivery.started() {
                        true => Phase::BodyDelaying,
                        false => Phase::Delaying,
                    };
                    self.until = until;
                    break;
                }
                Step::Queued(until) => {
                    (self.phase, self.until) = (Phase::Queued, until);
                    break;
                }
                Step::Shed => {
                    held.shed();
                    from = held.at;
                }
                Step::Record { key, drawn, held } => env.catalog.record(key, drawn, held),
                Step::Head { .. } => held.at = held.body_at,
                Step::Body { range, .. } => held.at = held.body_at + range.end,
                // HTTP/1.1 answers carry no trailers.
                Step::Trailers => {}
                Step::Event { bytes, .. } => {
                    self.emit_staged(&held.bytes, from..held.at, now, env);
                    from = held.at;
                    self.emit_event(&bytes, now, env);
                }
                Step::Sent => {
                    self.phase = Phase::SendingHead;
                    break;
                }
                Step::Fault(fault) => {
                    match fault {
                        Fault::Reset => self.after = After::Reset,
                        Fault::Close | Fault::Truncate => self.after = After::Linger,
                        Fault::Stall => {
                            self.phase = Phase::Stalled;
                            self.until = now + env.policy.idle_timeout;
                        }
                    }
                    break;
                }
                Step::Done => break,
            }
        }
        self.emit_staged(&held.bytes, from..held.at, now, env);
        let sending_head = self.phase == Phase::SendingHead;
        self.held = Some(held);
        if sending_head && self.unsent() == 0 {
            self.drained(now, env);
        }
    }

    /// Appends `range` of a staged answer to the output, behind a send in flight if there is one.
    fn emit_staged(
        &mut self,
        staged: &Staged,
        range: std::ops::Range<usize>,
        now: Instant,
        env: Env,
    ) {
        if range.is_empty() {
            return;
        }
        if self.unsent() == 0 {
            self.send_deadline = now + env.policy.idle_timeout;
        }
        staged.move_range(range.start, range.end, &mut self.out);
    }

    /// Appends a stream's event to the output, behind a send in flight if there is one.
    fn emit_event(&mut self, bytes: &[u8], now: Instant, env: Env) {
        if self.unsent() == 0 {
            self.send_deadline = now + env.policy.idle_timeout;
        }
        self.out.extend_from_slice(bytes);
    }

    /// Everything is sent: a held body starts its delay; an idle connection starts its idle timeout.
    fn drained(&mut self, now: Instant, env: Env) {
        match self.phase {
            // The head is out: the body's delay counts from now (a stream's events due at once, or
            // a paced body's only piece, may end the answer here).
            Phase::SendingHead => {
                self.deliver(now, env);
                self.answer_pending(now, env);
            }
            Phase::Exchange if self.pending.is_empty() && self.session.between_requests() => {
                self.read_deadline = (now + env.policy.idle_timeout, Timer::Idle);
            }
            _ => {}
        }
    }

    /// After input: between requests with nothing kept, the idle timeout; a new head (its first bytes,
    /// or what follows an answered request) starts the header timeout; more bytes of the same head do
    /// not extend it; a body may pause for the header timeout.
    fn refresh_read_deadline(&mut self, was_between: bool, answered: u64, now: Instant, env: Env) {
        let p = env.policy;
        if !self.session.between_requests() {
            self.read_deadline = (now + p.header_timeout, Timer::Header);
        } else if self.pending.is_empty() {
            self.read_deadline = (now + p.idle_timeout, Timer::Idle);
        } else if was_between || answered > 0 {
            self.read_deadline = (now + p.header_timeout, Timer::Header);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::response::ResponseSpec;
    use crate::observe::meter::Counters;

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    const SEC: Duration = Duration::from_secs(1);

    pub(super) fn spec(body: &[u8]) -> ResponseSpec {
        ResponseSpec {
            status: 200,
            headers: vec![],
            body: body.to_vec(),
        }
    }

    /// A worker's catalog of one response with `body`.
    pub(super) fn one(body: &[u8]) -> crate::catalog::Local {
        held(body, crate::catalog::Hold::default())
    }

    /// A worker's catalog of one response with `body`, delivered as `hold` says.
    fn held(body: &[u8], hold: crate::catalog::Hold) -> crate::catalog::Local {
        let plan = crate::catalog::CatalogPlan {
            hold,
            ..crate::catalog::CatalogPlan::of_response(spec(body))
        };
        crate::catalog::Local::for_worker(&crate::catalog::Catalog::build(&plan).unwrap(), 0)
    }

    /// A worker's worth of shared state for one test.
    struct World {
        policy: Policy,
        response: crate::catalog::response::Response,
        catalog: crate::catalog::Local,
        counters: Counters,
        t0: Instant,
    }

    impl World {
        fn new(body: &[u8], delay: Option<Duration>, body_delay: Option<Duration>) -> World {
            World {
                policy: Policy {
                    limits: Limits::default(),
                    header_timeout: 10 * SEC,
                    idle_timeout: 60 * SEC,
                    verbose: 0,
                    h2c: false,
                },
                response: crate::catalog::response::Response::new(&spec(body)).unwrap(),
                catalog: held(
                    body,
                    crate::catalog::Hold {
                        delay: delay.unwrap_or_default(),
                        body_delay: body_delay.unwrap_or_default(),
                        ..Default::default()
                    },
                ),
                counters: Counters::new(1),
                t0: Instant::now(),
            }
        }

        fn env(&self) -> Env<'_> {
            Env {
                policy: &self.policy,
                catalog: self.catalog.view(),
                counters: self.counters.worker(0),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn conn(&self) -> Connection {
            Connection::new(&self.policy, self.t0)
        }

        /// Sends everything the connection has, at `ms`, and returns it.
        fn flush(&self, c: &mut Connection, ms: u64) -> Vec<u8> {
            let out = c.output().to_vec();
            c.sent(out.len(), self.at(ms), self.env());
            out
        }

        fn total(&self, counter: Counter) -> u64 {
            self.counters.worker(0).get(counter)
        }
    }

    fn responses(out: &[u8]) -> usize {
        out.windows(15).filter(|w| w == b"HTTP/1.1 200 OK").count()
    }

    #[test]
    fn a_client_that_never_reads_fills_the_cap_and_then_is_not_read() {
        let w = World::new(&[b'x'; 2000], None, None);
        let mut c = w.conn();
        let input = GET.repeat(64 * 1024 / GET.len());
        c.receive(&input, w.at(0), w.env());
        let one = w
            .response
            .full(crate::catalog::response::Framing::KeepAlive)
            .len();
        assert!(c.output().len() >= MAX_UNSENT && c.output().len() < MAX_UNSENT + one);
        assert!(
            !c.wants_input(),
            "reading stops while the output is backed up"
        );
        c.receive(&input, w.at(1), w.env()); // what was in flight before the read stopped
        assert!(
            c.output().len() < MAX_UNSENT + one,
            "nothing more is answered"
        );
        // Once the output is sent, the kept requests are answered, again up to the cap.
        let first = w.flush(&mut c, 2);
        assert!(c.output().len() >= MAX_UNSENT);
        assert_eq!(responses(&first), first.len() / one);
    }

    #[test]
    fn input_that_keeps_coming_while_backed_up_is_closed_not_kept() {
        let w = World::new(&[b'x'; 2000], None, None);
        let mut c = w.conn();
        c.receive(&GET.repeat(10_000), w.at(0), w.env());
        assert!(!c.wants_input());
        // A runtime whose receive could not be stopped in time delivers more; up to a bound it is kept.
        c.receive(&GET.repeat(100_000), w.at(1), w.env());
        assert_eq!(c.status(), Status::Open);
        c.receive(&GET.repeat(100_000), w.at(2), w.env());
        assert_eq!(c.status(), Status::Close, "past MAX_KEPT_INPUT");
    }

    #[test]
    fn output_that_does_not_move_times_out_after_the_idle_timeout() {
        let w = World::new(&[b'x'; 2000], None, None);
        let mut c = w.conn();
        c.receive(&GET.repeat(200), w.at(0), w.env());
        let out = c.output().len();
        c.sent(out / 2, w.at(500), w.env());
        assert_eq!(c.deadline(), (w.at(500) + 60 * SEC, Timer::Send));
        c.sent(0, w.at(900), w.env()); // nothing taken: no progress
        assert_eq!(c.deadline().0, w.at(500) + 60 * SEC);
        c.on_deadline(w.at(500) + 60 * SEC, w.env());
        assert_eq!(c.status(), Status::Reset, "what it did not take is dropped");
        assert_eq!(w.total(Counter::Timeouts), 1);
    }

    #[test]
    fn a_trickled_head_keeps_the_deadline_of_its_first_byte() {
        for delay in [None, Some(Duration::from_millis(100))] {
            let w = World::new(b"ok", delay, None);
            let mut c = w.conn();
            assert_eq!(c.deadline(), (w.at(60_000), Timer::Idle));
            for (i, b) in b"GET / HTTP/1.1\r\nX: y".iter().enumerate() {
                c.receive(&[*b], w.at(400 * i as u64), w.env());
                assert_eq!(c.deadline(), (w.at(10_000), Timer::Header), "{delay:?}");
            }
            c.on_deadline(w.at(9_999), w.env());
            assert_eq!(c.status(), Status::Open, "not before the deadline");
            c.on_deadline(w.at(10_000), w.env());
            assert_eq!(c.status(), Status::Close);
            assert_eq!(w.total(Counter::Timeouts), 1);
        }
    }

    #[test]
    fn a_body_may_pause_for_the_header_timeout_and_the_idle_timeout_follows_the_answer() {
        let w = World::new(b"ok", None, None);
        let mut c = w.conn();
        c.receive(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab",
            w.at(0),
            w.env(),
        );
        assert_eq!(c.deadline(), (w.at(10_000), Timer::Header));
        c.receive(b"c", w.at(5_000), w.env());
        assert_eq!(c.deadline(), (w.at(15_000), Timer::Header));
        c.receive(b"d", w.at(6_000), w.env());
        assert_eq!(c.deadline(), (w.at(6_000) + 60 * SEC, Timer::Send));
        w.flush(&mut c, 7_000);
        assert_eq!(c.deadline(), (w.at(7_000) + 60 * SEC, Timer::Idle));
        assert!(c.is_idle());
    }

    #[test]
    fn delay_answers_pipelined_requests_one_at_a_time() {
        let w = World::new(b"ok", Some(Duration::from_millis(100)), None);
        let mut c = w.conn();
        c.receive(&GET.repeat(2), w.at(0), w.env());
        assert!(c.output().is_empty() && !c.wants_input());
        assert_eq!(c.deadline(), (w.at(100), Timer::Delay));
        c.on_deadline(w.at(99), w.env());
        assert!(c.output().is_empty(), "not before the delay");
        c.on_deadline(w.at(100), w.env());
        assert_eq!(responses(&w.flush(&mut c, 100)), 1);
        assert_eq!(c.deadline(), (w.at(200), Timer::Delay));
        c.on_deadline(w.at(200), w.env());
        assert_eq!(responses(&w.flush(&mut c, 200)), 1);
        assert!(c.is_idle() && c.wants_input());
    }

    #[test]
    fn body_delay_holds_the_body_until_the_head_is_sent_and_the_delay_passed() {
        let w = World::new(b"tail", None, Some(Duration::from_millis(300)));
        let mut c = w.conn();
        c.receive(GET, w.at(0), w.env());
        assert!(c.output().ends_with(b"\r\n\r\n"), "the head alone");
        assert_eq!(c.deadline().1, Timer::Send);
        w.flush(&mut c, 10);
        assert_eq!(c.deadline(), (w.at(310), Timer::BodyDelay));
        c.on_deadline(w.at(310), w.env());
        assert_eq!(w.flush(&mut c, 310), b"tail");
    }

    #[test]
    fn a_body_that_arrives_while_100_continue_is_in_flight_is_answered_after_the_delay() {
        let w = World::new(b"ok", Some(Duration::from_millis(100)), None);
        let mut c = w.conn();
        let head =
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
        c.receive(head, w.at(0), w.env());
        assert_eq!(c.output(), crate::proto::http1::session::CONTINUE);
        c.send_started(); // io_uring: the kernel is sending it
        c.receive(b"hi", w.at(1), w.env());
        assert_eq!(c.deadline(), (w.at(101), Timer::Delay));
        c.on_deadline(w.at(101), w.env());
        assert_eq!(
            c.output(),
            crate::proto::http1::session::CONTINUE,
            "the send in flight is not touched"
        );
        c.sent(
            crate::proto::http1::session::CONTINUE.len(),
            w.at(102),
            w.env(),
        );
        assert_eq!(responses(c.output()), 1);
    }

    #[test]
    fn a_bad_request_is_answered_then_the_connection_lingers_then_closes() {
        let w = World::new(b"ok", None, None);
        let mut c = w.conn();
        c.receive(
            b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            w.at(0),
            w.env(),
        );
        assert!(c.output().starts_with(b"HTTP/1.1 400"));
        assert_eq!(c.status(), Status::Open, "the answer goes out first");
        w.flush(&mut c, 1);
        assert_eq!(c.status(), Status::ShutdownWrite);
        c.shut_down_write(w.at(1));
        assert!(c.wants_input());
        c.receive(&[b'z'; 1000], w.at(2), w.env());
        assert!(c.output().is_empty(), "input after the answer is discarded");
        assert_eq!(c.deadline(), (w.at(1) + LINGER_TIME, Timer::Linger));
        c.on_deadline(w.at(1) + LINGER_TIME, w.env());
        assert_eq!(c.status(), Status::Close);
        assert_eq!(w.total(Counter::Timeouts), 0, "lingering is not a timeout");
    }

    #[test]
    fn connection_close_closes_after_the_answer_without_lingering() {
        let w = World::new(b"ok", None, None);
        let mut c = w.conn();
        c.receive(
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            w.at(0),
            w.env(),
        );
        assert!(
            !c.wants_input() && !c.keeps_input(),
            "more input is discarded"
        );
        w.flush(&mut c, 1);
        assert_eq!(c.status(), Status::Close);
    }

    #[test]
    fn a_close_the_client_did_not_ask_for_lingers_however_its_next_request_arrives() {
        let mut w = World::new(b"ok", None, None);
        let plan = crate::catalog::CatalogPlan {
            echo: Some(crate::catalog::route::fortio::Limits {
                max_delay: SEC,
                max_size: 1024,
            }),
            ..crate::catalog::CatalogPlan::of_response(spec(b"ok"))
        };
        w.catalog =
            crate::catalog::Local::for_worker(&crate::catalog::Catalog::build(&plan).unwrap(), 0);
        let close = b"GET /?close=true HTTP/1.1\r\nHost: a\r\n\r\n";
        for next in [GET, b""] {
            let mut c = w.conn();
            c.receive(&[&close[..], next].concat(), w.at(0), w.env());
            assert!(w.flush(&mut c, 1).starts_with(b"HTTP/1.1 200 OK"));
            assert_eq!(c.status(), Status::ShutdownWrite, "next: {next:?}");
        }
        // A close the client asked for does not linger, whatever came after it in the same read.
        let mut c = w.conn();
        let asked = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
        c.receive(&[&asked[..], GET].concat(), w.at(0), w.env());
        w.flush(&mut c, 1);
        assert_eq!(c.status(), Status::Close);
    }

    #[test]
    fn an_idle_connection_is_small() {
        // 10 000 idle connections: every byte here is 10 kB of server memory.
        assert!(
            size_of::<Connection>() <= 320,
            "{}",
            size_of::<Connection>()
        );
    }

    #[test]
    fn with_h2c_the_first_bytes_choose_the_protocol() {
        let mut w = World::new(b"ok", None, None);
        w.policy.h2c = true;
        let mut c = w.conn();
        c.receive(&detect::PREFACE[..10], w.at(0), w.env());
        assert_eq!(c.status(), Status::Open);
        c.receive(
            &[detect::PREFACE, b"frames"].concat()[10..],
            w.at(1),
            w.env(),
        );
        assert_eq!(c.status(), Status::Upgrade);
        assert_eq!(c.into_h2(), ([detect::PREFACE, b"frames"].concat(), None));

        let mut c = w.conn();
        c.receive(b"INVALID PREFACE\r\n\r\n", w.at(0), w.env());
        assert_eq!(c.status(), Status::Close);

        let mut c = w.conn();
        c.receive(GET, w.at(0), w.env());
        assert_eq!(responses(c.output()), 1);
    }
}

#[cfg(test)]
mod routes {
    //! Held answers drawn by routes: each fault as the runtime sees it, pipelined delays in order,
    //! a paced body, and the ground truth recorded when the answer is released.
    use super::*;
    use crate::catalog::route::spec::parse_spec;
    use crate::catalog::{Catalog, CatalogPlan, Local};
    use crate::observe::meter::Counters;

    struct World {
        policy: Policy,
        catalog: Catalog,
        local: Local,
        counters: Counters,
        t0: Instant,
    }

    impl World {
        fn new(routes: &[&str]) -> World {
            let plan = CatalogPlan {
                table: crate::catalog::route::table::Table {
                    routes: routes.iter().map(|r| parse_spec(r).unwrap()).collect(),
                    ..Default::default()
                },
                seed: Some(1),
                ..CatalogPlan::of_response(super::tests::spec(b"default"))
            };
            let catalog = Catalog::build(&plan).unwrap();
            World {
                policy: Policy {
                    limits: Limits::default(),
                    header_timeout: 10 * SEC,
                    idle_timeout: 2 * SEC,
                    verbose: 0,
                    h2c: false,
                },
                local: Local::for_worker(&catalog, 0),
                catalog,
                counters: Counters::new(1),
                t0: Instant::now(),
            }
        }

        fn env(&self) -> Env<'_> {
            Env {
                policy: &self.policy,
                catalog: self.local.view(),
                counters: self.counters.worker(0),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        /// A connection that was sent `input` at 0 ms.
        fn sent(&self, input: &str) -> Connection {
            let mut c = Connection::new(&self.policy, self.t0);
            c.receive(input.as_bytes(), self.t0, self.env());
            c
        }

        fn flush(&self, c: &mut Connection, ms: u64) -> String {
            let out = c.output().to_vec();
            c.sent(out.len(), self.at(ms), self.env());
            String::from_utf8(out).unwrap()
        }

        fn truth(&self) -> String {
            self.catalog.truth().unwrap().json()
        }
    }

    const SEC: Duration = Duration::from_secs(1);

    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n")
    }

    #[test]
    fn a_delayed_route_is_released_at_its_deadline_and_its_truth_recorded() {
        let w = World::new(&["/slow delay=30ms body=late"]);
        let mut c = w.sent(&get("/slow"));
        assert_eq!(c.deadline(), (w.at(30), Timer::Delay));
        assert!(c.output().is_empty());
        c.on_deadline(w.at(31), w.env());
        assert!(w.flush(&mut c, 31).ends_with("\r\n\r\nlate"));
        let truth = w.truth();
        assert!(
            truth.contains("\"count\":1,\"outcomes\":{\"200\":1,\"gone\":0}"),
            "{truth}"
        );
        assert!(
            truth.contains("\"held_us\":{\"count\":1,\"p50\":31"),
            "{truth}"
        );
    }

    #[test]
    fn pipelined_requests_with_different_delays_are_answered_in_order() {
        let w = World::new(&["/slow delay=50ms body=slow", "/fast body=fast"]);
        let mut c = w.sent(&(get("/slow") + &get("/fast")));
        assert!(
            c.output().is_empty(),
            "the fast one waits behind the slow one"
        );
        c.on_deadline(w.at(50), w.env());
        let out = w.flush(&mut c, 50);
        let (slow, fast) = (out.find("slow").unwrap(), out.find("fast").unwrap());
        assert!(slow < fast, "{out}");
        assert!(c.is_idle());
    }

    #[test]
    fn unmatched_requests_get_the_default_answer() {
        let w = World::new(&["POST /x body=route"]);
        let mut c = w.sent(&get("/x"));
        assert!(w.flush(&mut c, 0).ends_with("default"));
    }

    #[test]
    fn reset_waits_for_what_was_answered_before_it() {
        let w = World::new(&["/ok body=ok", "/r fault=reset:100%"]);
        let mut c = w.sent(&(get("/ok") + &get("/r")));
        assert_eq!(c.status(), Status::Open, "the first answer goes out first");
        assert!(w.flush(&mut c, 1).ends_with("ok"));
        assert_eq!(c.status(), Status::Reset);
    }

    #[test]
    fn close_sends_nothing_and_shuts_down() {
        let w = World::new(&["/c fault=close:100%"]);
        let c = w.sent(&get("/c"));
        assert!(c.output().is_empty());
        assert_eq!(c.status(), Status::ShutdownWrite);
    }

    #[test]
    fn stall_answers_nothing_until_the_idle_timeout_closes() {
        let w = World::new(&["/s fault=stall:100%"]);
        let mut c = w.sent(&get("/s"));
        assert!(c.output().is_empty() && !c.wants_input());
        assert_eq!(c.deadline(), (w.at(2000), Timer::Stall));
        c.on_deadline(w.at(1999), w.env());
        assert_eq!(c.status(), Status::Open);
        c.on_deadline(w.at(2000), w.env());
        assert_eq!(c.status(), Status::Close);
    }

    #[test]
    fn truncate_sends_the_head_and_half_the_body_then_shuts_down() {
        let w = World::new(&["/t size=1000 fault=truncate:100%"]);
        let mut c = w.sent(&get("/t"));
        let out = w.flush(&mut c, 0);
        assert!(out.contains("Content-Length: 1000\r\n"));
        assert_eq!(out.split("\r\n\r\n").nth(1).unwrap().len(), 500);
        assert_eq!(c.status(), Status::ShutdownWrite);
    }

    #[test]
    fn a_streams_waits_for_its_events_may_share_a_tick_a_paced_bodys_do_not() {
        let w = World::new(&["/sse stream=sse events=2 first=10ms gap=10ms"]);
        let mut c = w.sent(&get("/sse"));
        assert!(w.flush(&mut c, 0).ends_with("\r\n\r\n"), "the head first");
        for (ms, last) in [(10, false), (20, true)] {
            let (at, timer) = c.deadline();
            assert_eq!(
                (at, timer),
                (w.at(ms), Timer::Event),
                "event due at {ms} ms"
            );
            assert!(timer.is_pacing());
            assert_eq!(timer.tick(), crate::catalog::model::events::EVENT_TICK);
            c.on_deadline(at, w.env());
            let event = w.flush(&mut c, ms);
            assert!(event.contains("data:"), "{event:?}");
            assert_eq!(event.ends_with("0\r\n\r\n"), last, "{event:?}");
        }
        assert!(c.is_idle());
        assert_eq!(Timer::BodyDelay.tick(), Duration::ZERO);
    }

    #[test]
    fn a_paced_body_goes_a_piece_a_tick() {
        let w = World::new(&["/p size=300 rate=10k"]); // 102 bytes a tick
        let mut c = w.sent(&get("/p"));
        let head = w.flush(&mut c, 0);
        assert!(head.ends_with("\r\n\r\n"), "the head alone first");
        let mut body = String::new();
        let mut ms = 0;
        while !c.is_idle() {
            let (at, timer) = c.deadline();
            assert_eq!(timer, Timer::BodyDelay);
            ms = (at - w.t0).as_millis() as u64;
            c.on_deadline(at, w.env());
            body += &w.flush(&mut c, ms);
        }
        assert_eq!(body.len(), 300);
        assert_eq!(ms, 20, "three pieces, 10 ms apart");
    }

    #[test]
    fn a_paced_body_the_client_does_not_read_is_bounded_and_times_out() {
        let w = World::new(&["/p size=4m rate=100m"]); // 1 MiB a tick
        let mut c = w.sent(&get("/p"));
        w.flush(&mut c, 0); // the head
        let mut ms = 0;
        while c.status() == Status::Open {
            let (at, _) = c.deadline();
            ms = (at - w.t0).as_millis() as u64;
            c.on_deadline(at, w.env());
            assert!(
                c.output().len() <= MAX_UNSENT,
                "{} unsent",
                c.output().len()
            );
        }
        assert_eq!(c.status(), Status::Reset);
        assert_eq!(ms, 2000, "closed by the send timeout (--idle-timeout 2s)");
    }

    #[test]
    fn a_queued_request_waits_for_the_pool_and_one_that_times_out_gets_the_shed_answer() {
        let w = World::new(&["/q capacity=1 queue-timeout=50ms delay=20ms body=served"]);
        let mut first = w.sent(&get("/q"));
        assert_eq!(first.deadline(), (w.at(20), Timer::Delay), "served at once");
        let mut second = w.sent(&get("/q"));
        assert_eq!(second.deadline(), (w.at(50), Timer::Queue));
        assert!(second.queued().is_some(), "queued");
        assert!(second.wait_with(std::task::Waker::noop()), "still waiting");
        // The first answer goes out at the end of its service and hands its server on.
        first.on_deadline(w.at(20), w.env());
        assert!(w.flush(&mut first, 20).ends_with("served"));
        assert!(!second.wait_with(std::task::Waker::noop()), "decided");
        second.on_deadline(w.at(21), w.env()); // woken
        assert_eq!(second.deadline(), (w.at(40), Timer::Delay));
        assert_eq!(second.queued(), None);
        second.on_deadline(w.at(40), w.env());
        assert!(w.flush(&mut second, 40).ends_with("served"));
        // One that waits past its queue timeout behind a long service is shed then, with 503.
        let w = World::new(&["/q capacity=1 queue-timeout=50ms delay=90ms body=served"]);
        let _busy = w.sent(&get("/q"));
        let mut late = w.sent(&get("/q"));
        assert!(late.queued().is_some(), "queued behind the long service");
        late.on_deadline(w.at(50), w.env());
        let shed = w.flush(&mut late, 50);
        assert!(shed.starts_with("HTTP/1.1 503"), "{shed}");
        assert!(!shed.contains("served"), "{shed}");
        assert!(late.is_idle());
        let truth = w.truth();
        assert!(truth.contains("\"shed\":1"), "{truth}");
    }

    #[test]
    fn a_status_mix_is_drawn_per_request_and_repeats_with_the_seed() {
        let statuses = || {
            let w = World::new(&["/m status=503:50%"]);
            let mut c = w.sent(&get("/m").repeat(64));
            let out = w.flush(&mut c, 0);
            out.match_indices("HTTP/1.1 ")
                .map(|(i, _)| out[i + 9..i + 12].to_string())
                .collect::<Vec<_>>()
        };
        let first = statuses();
        assert_eq!(first.len(), 64);
        let n503 = first.iter().filter(|s| *s == "503").count();
        assert!((16..=48).contains(&n503), "{n503} of 64");
        assert_eq!(first, statuses(), "the same seed, the same sequence");
    }
}

#[cfg(test)]
mod chunking {
    //! However input arrives and however much each send takes, the client gets the same bytes, and
    //! the connection never holds more than its bounds.
    use super::*;
    use crate::catalog::response::{Framing, Response};
    use crate::catalog::Local;
    use crate::observe::meter::Counters;

    /// A small deterministic generator (no dependency needed for a few thousand numbers).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n.max(1)
        }
    }

    /// Serves `input` from `catalog`, whose answers are `one` bytes long.
    fn serve(input: &[u8], (catalog, one): (&Local, usize), seed: u64, in_flight: bool) -> Vec<u8> {
        let policy = Policy {
            limits: Limits::default(),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            verbose: 0,
            h2c: false,
        };
        let counters = Counters::new(1);
        let env = Env {
            policy: &policy,
            catalog: catalog.view(),
            counters: counters.worker(0),
        };
        let now = Instant::now();
        let mut c = Connection::new(&policy, now);
        let mut rng = Lcg(seed);
        let (mut at, mut got) = (0, Vec::new());
        while at < input.len() || !c.output().is_empty() {
            if c.wants_input() && at < input.len() {
                let n = 1 + rng.below(3000.min(input.len() - at));
                c.receive(&input[at..at + n], now, env);
                at += n;
            }
            assert!(c.pending.len() <= 64 * 1024 + 3000, "kept input is bounded");
            assert!(c.unsent() <= MAX_UNSENT + one);
            if !c.output().is_empty() {
                let n = rng.below(c.output().len() + 1);
                got.extend_from_slice(&c.output()[..n]);
                if in_flight {
                    c.send_started();
                    if at < input.len() && rng.below(2) == 0 {
                        let m = 1 + rng.below(500.min(input.len() - at));
                        c.receive(&input[at..at + m], now, env); // arrives while the send is out
                        at += m;
                    }
                }
                c.sent(n, now, env);
            }
        }
        got
    }

    #[test]
    fn any_chunking_of_input_and_sends_gives_the_same_bytes() {
        let one = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc";
        let input = one.repeat(800);
        for body in [&b"ok"[..], &[b'x'; 3000][..]] {
            // One catalog for every run: its `Date` is fixed when it is built.
            let catalog = super::tests::one(body);
            let len = Response::new(&super::tests::spec(body)).unwrap();
            let answers = (&catalog, len.full(Framing::KeepAlive).len());
            let whole = serve(&input, answers, 0, false);
            assert_eq!(
                whole
                    .windows(15)
                    .filter(|w| w == b"HTTP/1.1 200 OK")
                    .count(),
                1600
            );
            for seed in 1..20 {
                assert!(
                    serve(&input, answers, seed, seed % 2 == 0) == whole,
                    "seed {seed}"
                );
            }
        }
    }
}
