//! The io_uring runtime: each worker is one thread, pinned to its CPU, driving its own ring with the
//! `io-uring` crate directly — no async runtime in between. What to do with the bytes is the shared
//! [`Connection`]'s decision; this file is the hot path that moves them.
//!
//! The only syscall in steady state is one `io_uring_enter` per loop iteration, which submits every
//! queued operation and waits for at least one completion. Operations:
//! - one **multishot accept** on the worker's listener, into the ring's table of direct descriptors;
//! - one **multishot receive** per connection from a **provided-buffer ring** ([`buffers`]): the kernel
//!   picks a buffer only when bytes arrive, so an idle connection holds no receive buffer; each buffer
//!   goes back as soon as the connection has taken its bytes, and is published again before the next
//!   submission, the most recently used first (few buffers in turn stay warm). A connection's first receive
//!   is a single shot instead: the listener defers accepts until the request has come, so it finds the
//!   request at once, and a connection that one request ends (`Connection: close`, HTTP/1.0) then has
//!   no receive left to tear down — its close is one `close`, without a `shutdown` before it. The receive is cancelled
//!   while the connection does not want input (its output is backed up, or a paced response is in
//!   progress) and armed again when it does: backpressure, as tokio's `await` on a write gives;
//! - one **send** of the connection's output at a time (a **sendmsg** when it has several chunks: a
//!   static site's shared bodies go out from where they are stored); responses produced meanwhile
//!   queue behind it inside the connection and go out together with the next send;
//! - a ring **timeout** every [`TICK`] that patches the `Date`, expires deadlines (idle, header, send,
//!   linger), notices shutdown and retries a failed accept; and one for the earliest of the pacing
//!   deadlines (held answers, paced bodies, queue timeouts), which must be on time: every connection
//!   due within the same 25 µs quantum is released by one expiry ([`deadlines`]);
//! - **shutdown** (write side, before a lingering close) and **shutdown + close** (linked) to end one;
//! - one **read** of the worker's eventfd, always posted: a pool on another thread that decides a
//!   queued request's fate wakes its connection through it ([`wake`]).
//!
//! A connection that switches to HTTP/2 keeps its receive and its sends; its bytes then go through the
//! shared HTTP/2 server, a future polled on this thread ([`h2`]). Its sleeps are the worker's
//! [`deadlines`](crate::kernel::deadlines): the `io_uring_enter` wait is bounded by the earliest one.
//!
//! Memory the kernel reads or writes: receive buffers (see [`buffers`]); a connection's output, frozen
//! by [`Connection::send_started`] until the send completes — if the connection closes first, it is
//! kept as an orphan until then; the timeouts' timespecs, boxed for the worker's life. At exit every
//! operation is cancelled and reaped before that memory is freed, and it is leaked if the kernel does
//! not confirm in time.

mod buffers;
mod deadlines;
mod h2;
mod ring;
mod slots;
mod wake;

use std::cell::{Cell, RefCell};
use std::os::fd::{IntoRawFd, RawFd};
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use io_uring::{cqueue, opcode, squeue, types};
use statico_common::Counter;

use super::{AcceptErrors, AcceptRetry, Settings, WorkerSetup};
use crate::catalog::response::DateClock;
use crate::conn::connection::{Connection, Env, Status};
use crate::conn::layer::Layer;
use crate::conn::output::MAX_SLICES;
use crate::observe::meter::WorkerCounters;
use crate::shutdown;
use buffers::{BufRing, BGID};
use ring::{build_ring, token, untoken, Op, Ring};
use slots::Slots;

pub use ring::{check_available, direct_files, UringOptions};

/// How often the worker wakes up to patch `Date`, expire deadlines and check for shutdown.
const TICK: Duration = super::ACCEPT_RETRY;

/// Builds an SQE on a connection's descriptor, which is a direct (registered) one when `$fixed`.
macro_rules! on_fd {
    ($fixed:expr, $fd:expr, |$t:ident| $build:expr) => {
        if $fixed {
            let $t = types::Fixed($fd as u32);
            $build
        } else {
            let $t = types::Fd($fd);
            $build
        }
    };
}

/// `at` as a `CLOCK_MONOTONIC` time, the clock `Instant` reads and io_uring's absolute timeouts use.
fn monotonic(at: Instant) -> types::Timespec {
    let now = Instant::now();
    let clock = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(Duration::ZERO, |t| {
            Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
        });
    let abs = clock + at.saturating_duration_since(now);
    types::Timespec::new()
        .sec(abs.as_secs())
        .nsec(abs.subsec_nanos())
}

/// How [`Worker::close_as`] ends a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closing {
    Shutdown,
    Reset,
}

/// `SO_LINGER` on with a zero timeout: a close then resets the connection.
static LINGER_RESET: libc::linger = libc::linger {
    l_onoff: 1,
    l_linger: 0,
};

/// The state of a connection's multishot receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recv {
    Off,
    On,
    /// Cancelled; its last completion has not arrived yet (no new one may be armed before it does).
    Cancelling,
}

/// One connection: its descriptor, its policy state, and what the ring is doing for it.
struct Conn<'a> {
    fd: RawFd,
    gen: u32,
    state: Connection,
    /// Nothing, or TLS, between the socket and `state`.
    layer: Layer,
    /// A send of the layer's output is in flight.
    sending: bool,
    /// The message header and slices of a vectored send in flight (boxed: they must not move).
    gather: Option<Box<Gather>>,
    recv: Recv,
    /// The next receive is a single shot: the connection's first, which finds the request there (the
    /// listener defers accepts until it has come) and so often is its last — no multishot left armed
    /// to be torn down by a shutdown before the close.
    once: bool,
    /// The pacing deadline a timeout is armed for.
    timer: Option<Instant>,
    /// The queued request whose ticket has this connection's waker ([`wake`]), by its id.
    registered: Option<u64>,
    /// After the switch to HTTP/2: the connection's HTTP/2 server (`state` and `layer` are then unused).
    h2: Option<Box<h2::H2Conn<'a>>>,
}

impl Conn<'_> {
    /// Whether to receive, and whether to stop a receive in progress (see [`Worker::steer_recv`]).
    fn wants_input(&self) -> (bool, bool) {
        if let Some(h) = &self.h2 {
            let wants = h.wants_input();
            return (wants, !wants);
        }
        // While an answer is held, bytes are read too, so that a client that leaves is noticed at once.
        let pause = self.layer.pauses_input(&self.state);
        let wants = self.layer.wants_input(&self.state) || (self.state.holds_answer() && !pause);
        (wants, !wants && pause)
    }
}

/// A `sendmsg`'s header and slices: the output's chunks (own bytes and shared bodies) in one send.
struct Gather {
    msg: libc::msghdr,
    iov: [libc::iovec; MAX_SLICES],
}

impl Gather {
    fn new() -> Box<Gather> {
        // SAFETY: msghdr and iovec are plain C structs; all-zero is a valid value of each.
        Box::new(unsafe { std::mem::zeroed() })
    }

    /// Points the header at `slices`; returns the header.
    fn point(&mut self, slices: &[std::io::IoSlice<'_>]) -> *const libc::msghdr {
        for (iov, s) in self.iov.iter_mut().zip(slices) {
            *iov = libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            };
        }
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = slices.len() as _;
        &self.msg
    }
}

/// What every connection of the worker reads.
struct Shared<'a> {
    settings: &'a Settings,
    /// This worker's copy of the catalog, its `Date` patched by the tick, its site replaced when a
    /// rebuild is swapped in; shared with the HTTP/2 connections' futures, which borrow it only while
    /// they are polled.
    catalog: Rc<RefCell<crate::catalog::Local>>,
    counters: &'a WorkerCounters,
}

impl Shared<'_> {
    fn env<'s>(&'s self, catalog: &'s crate::catalog::Local) -> Env<'s> {
        Env {
            policy: &self.settings.policy,
            catalog: catalog.view(),
            counters: self.counters,
        }
    }
}

/// What the worker keeps for its HTTP/2 connections' futures (see [`h2`]).
struct H2Worker {
    /// The connections to poll.
    ready: Arc<h2::ReadyList>,
    /// The tokens being polled (the list's memory, reused).
    polling: Vec<u64>,
    /// This thread's sleeps, which bound the ring's wait.
    deadlines: Rc<crate::kernel::deadlines::Deadlines>,
    /// Set at shutdown: every HTTP/2 connection sends GOAWAY and finishes its streams.
    draining: Rc<Cell<bool>>,
}

/// What a send in flight reads, kept after its connection closed until the send completes.
#[allow(dead_code)] // held, never read: only dropped
struct Orphan<'a>(
    Connection,
    Layer,
    Option<Box<Gather>>,
    Option<Box<h2::H2Conn<'a>>>,
);

/// The worker's whole state.
struct Worker<'a> {
    ring: Ring,
    bufs: BufRing,
    shared: Shared<'a>,
    listener: RawFd,
    /// Connections are direct descriptors in the ring's registered file table.
    fixed: bool,
    accepting: bool,
    accept_errors: AcceptErrors,
    conns: Slots<Conn<'a>>,
    h2: H2Worker,
    tick: Box<types::Timespec>,
    /// Connections closed while a send was in flight, kept until its completion (the kernel may still
    /// read their output), by the send's token.
    orphans: Vec<(u64, Orphan<'a>)>,
    draining: Option<Instant>,
    clock: DateClock,
    /// The time of the completions being handled.
    now: Instant,
    cqes: Vec<(u64, i32, u32)>,
    /// The connections' pacing deadlines behind one timeout, its timespec (read by the kernel when
    /// the timeout is submitted), and the deadlines found due when it fires.
    deadlines: deadlines::Deadlines,
    pace_ts: Box<types::Timespec>,
    due: Vec<deadlines::Due>,
    /// Connections woken from other threads, and the eventfd read's buffer (boxed: the kernel
    /// writes it; kept, or leaked, like the receive buffers).
    mailbox: std::sync::Arc<wake::Mailbox>,
    wake_buf: Box<u64>,
}

/// Runs one worker until shutdown. `ready` receives the outcome of start-up.
pub fn run(setup: WorkerSetup, opts: UringOptions, ready: mpsc::Sender<Result<(), String>>) {
    let settings = setup.settings.clone();
    crate::kernel::sys::exact_timers();
    let mut w = match Worker::start(setup.id, setup.listener, &settings, &setup.counters, opts) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    w.serve(setup.id, &setup.shutdown);
    w.finish();
}

impl<'a> Worker<'a> {
    /// The ring, its receive buffers and direct descriptors, and the first accept and tick.
    fn start(
        id: usize,
        listener: std::net::TcpListener,
        settings: &'a Settings,
        counters: &'a crate::observe::meter::Counters,
        opts: UringOptions,
    ) -> Result<Self, String> {
        let (ring, _flags) =
            build_ring(opts).map_err(|e| format!("worker {id}: cannot create an io_uring: {e}"))?;
        let bufs = BufRing::new(&ring).map_err(|e| format!(
            "worker {id}: cannot register the receive buffer ring: {e}; io_uring needs Linux 6.0+, or run with --runtime tokio"
        ))?;
        // Direct descriptors where the kernel has them (5.19+); plain descriptors otherwise (the start-up
        // line says which, from the same attempt in `check_available`).
        let fixed = ring
            .submitter()
            .register_files_sparse(opts.direct_files)
            .is_ok();
        let mailbox = wake::Mailbox::new()
            .map_err(|e| format!("worker {id}: cannot create an eventfd: {e}"))?;
        // One epoch for both kinds of deadlines: their ticks coincide, one wake-up for both.
        let epoch = Instant::now();
        let mut w = Worker {
            ring: Ring::new(ring),
            bufs,
            shared: Shared {
                settings,
                catalog: Rc::new(RefCell::new(crate::catalog::Local::for_worker(
                    &settings.catalog,
                    id,
                ))),
                counters: counters.worker(id),
            },
            listener: listener.into_raw_fd(),
            fixed,
            accepting: false,
            accept_errors: AcceptErrors::new(id),
            conns: Slots::new(),
            h2: H2Worker {
                ready: h2::ReadyList::new(mailbox.clone()),
                polling: Vec::new(),
                deadlines: crate::kernel::deadlines::install(epoch),
                draining: Rc::default(),
            },
            tick: Box::new(types::Timespec::from(TICK)),
            orphans: Vec::new(),
            draining: None,
            clock: DateClock::default(),
            now: Instant::now(),
            cqes: Vec::with_capacity(1024),
            mailbox,
            wake_buf: Box::new(0),
            deadlines: deadlines::Deadlines::new(epoch),
            pace_ts: Box::new(types::Timespec::new()),
            due: Vec::new(),
        };
        w.arm_accept();
        w.arm_tick();
        w.arm_wake();
        Ok(w)
    }

    /// The main loop: one `io_uring_enter`, then every completion, until drained or out of time.
    fn serve(&mut self, id: usize, shutdown: &shutdown::Listener) {
        loop {
            if self.draining.is_none() && *shutdown.borrow() {
                self.start_draining();
            }
            if let Some(since) = self.draining {
                if self.conns.live() == 0
                    || since.elapsed() >= self.shared.settings.shutdown_timeout
                {
                    return;
                }
            }
            // Futures to poll: do not wait. Sleeps: wait no longer than the earliest.
            let wait = match self.h2.ready.is_empty() {
                false => Some(Duration::ZERO),
                true => (self.h2.deadlines.earliest())
                    .map(|at| at.saturating_duration_since(Instant::now())),
            };
            if let Err(e) = self.ring.submit_and_wait_at_most(wait) {
                eprintln!("statico: worker {id}: io_uring_enter failed: {e}");
                return;
            }
            self.reap();
        }
    }

    /// Collects the completions and handles each.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(
            self.ring
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        self.now = Instant::now();
        self.shared.catalog.borrow_mut().refresh();
        for &(data, res, flags) in &cqes {
            if !cqueue::more(flags) {
                self.ring.inflight = self.ring.inflight.saturating_sub(1);
            }
            let (op, slot, gen) = untoken(data);
            match op {
                Some(Op::Accept) => self.on_accept(res, flags),
                Some(Op::Recv) => self.on_recv(slot, gen, res, flags),
                Some(Op::Send) => self.on_send(data, slot, gen, res),
                Some(Op::Tick) => self.on_tick(),
                Some(Op::Timer) => self.on_timer(),
                Some(Op::Wake) => self.on_wake(),
                Some(Op::Close) | Some(Op::Cancel) | None => {}
            }
        }
        self.cqes = cqes;
        self.run_h2();
        self.bufs.refill();
    }

    /// Fires the sleeps that are due, then polls every HTTP/2 connection that was woken (a few rounds,
    /// for those woken by another's poll; the rest are polled after a wait of zero).
    fn run_h2(&mut self) {
        self.h2.deadlines.fire(Instant::now());
        let mut polling = std::mem::take(&mut self.h2.polling);
        for _ in 0..4 {
            self.h2.ready.take(&mut polling);
            if polling.is_empty() {
                break;
            }
            for &t in &polling {
                let (_, slot, gen) = untoken(t);
                let Some(c) = self.conns.get_mut(slot, gen) else {
                    continue;
                };
                if let Some(h) = c.h2.as_mut() {
                    h.poll(self.now);
                    self.drive(slot);
                }
            }
        }
        self.h2.polling = polling;
    }

    fn on_accept(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accepting = false;
        }
        if res < 0 {
            let errno = -res;
            let retry_now =
                errno != libc::ECANCELED && self.accept_errors.failed(errno) == AcceptRetry::Now;
            if retry_now && !self.accepting && self.draining.is_none() {
                self.arm_accept();
            } // otherwise the tick re-arms it
            return;
        }
        self.accept_errors.succeeded();
        if self.draining.is_some() {
            self.close_fd(res, token(Op::Close, 0, 0));
            return;
        }
        self.shared.counters.add(Counter::ConnsAccepted, 1);
        // TCP_NODELAY, when asked for, is inherited from the listener (set in `steering`).
        let settings = self.shared.settings;
        let state = Connection::new(&settings.policy, self.now);
        let layer = Layer::new(
            settings.tls.as_ref(),
            self.now,
            settings.policy.header_timeout,
        );
        let slot = self.conns.insert(|_, gen| Conn {
            fd: res,
            gen,
            state,
            layer,
            sending: false,
            gather: None,
            recv: Recv::Off,
            once: true,
            timer: None,
            registered: None,
            h2: None,
        });
        self.drive(slot);
        if !self.accepting && self.draining.is_none() {
            self.arm_accept();
        }
    }

    fn on_recv(&mut self, slot: usize, gen: u32, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        if let Some(c) = self.conns.get_mut(slot, gen) {
            if !cqueue::more(flags) {
                c.recv = Recv::Off;
            }
            if let Some(h) = c.h2.as_mut() {
                match res {
                    n if n > 0 => h.received(self.bufs.bytes(bid.expect("a buffer"), n as usize)),
                    0 => h.input_ended(false),
                    r if -r == libc::ENOBUFS || -r == libc::ECANCELED => {}
                    _ => h.input_ended(true),
                }
            } else {
                let catalog = self.shared.catalog.borrow();
                let env = self.shared.env(&catalog);
                match res {
                    n if n > 0 => {
                        let bid = bid.expect("a receive with data names its buffer");
                        let data = self.bufs.bytes(bid, n as usize);
                        c.layer.receive(&mut c.state, data, self.now, env);
                    }
                    0 => c.layer.peer_closed(&mut c.state, env),
                    // Every buffer was in use for a moment (re-armed below), or we cancelled it.
                    r if -r == libc::ENOBUFS || -r == libc::ECANCELED => {}
                    _ => c.layer.peer_closed(&mut c.state, env),
                }
            }
        }
        if res == -libc::ENOBUFS {
            self.bufs.ran_out();
        }
        if let Some(bid) = bid {
            // The buffer goes back whatever happened to the connection (published by `reap`).
            self.bufs.give_back(bid);
        }
        self.drive_if_live(slot, gen);
    }

    fn on_send(&mut self, token: u64, slot: usize, gen: u32, res: i32) {
        let Some(c) = self.conns.get_mut(slot, gen) else {
            // The connection closed while this send was in flight: its output can go now.
            if let Some(i) = self.orphans.iter().position(|(t, _)| *t == token) {
                self.orphans.swap_remove(i);
            }
            return;
        };
        c.sending = false;
        if let Some(h) = c.h2.as_mut() {
            match usize::try_from(res) {
                Ok(n) => h.sent(n),
                Err(_) => h.send_failed(),
            }
            return self.drive(slot);
        }
        let catalog = self.shared.catalog.borrow();
        let env = self.shared.env(&catalog);
        match usize::try_from(res) {
            Ok(n) => c.layer.sent(&mut c.state, n, self.now, env),
            Err(_) => c.layer.peer_closed(&mut c.state, env),
        }
        drop(catalog);
        self.drive(slot);
    }

    /// The pacing timeout fired: every connection whose deadline has come goes on.
    fn on_timer(&mut self) {
        let mut due = std::mem::take(&mut self.due);
        if let Some(expiry) = self.deadlines.fired(self.now, &mut due) {
            self.arm_pacing(expiry);
        }
        for &(at, slot, gen) in &due {
            let Some(c) = self.conns.get_mut(slot, gen) else {
                continue;
            };
            if c.timer != Some(at) {
                continue; // the connection's deadline moved since
            }
            c.timer = None;
            let catalog = self.shared.catalog.borrow();
            c.layer
                .on_deadline(&mut c.state, self.now, self.shared.env(&catalog));
            drop(catalog);
            self.drive(slot);
        }
        due.clear();
        self.due = due;
    }

    /// Connections woken from another thread (a pool decided their queued request): each asks its
    /// ticket what next; an HTTP/2 one is polled.
    fn on_wake(&mut self) {
        self.arm_wake();
        for woken in self.mailbox.take() {
            let (_, slot, gen) = untoken(woken);
            let Some(c) = self.conns.get_mut(slot, gen) else {
                continue;
            };
            if let Some(h) = &c.h2 {
                h.nudge(); // polled after this batch
                continue;
            }
            let catalog = self.shared.catalog.borrow();
            c.layer
                .on_deadline(&mut c.state, self.now, self.shared.env(&catalog));
            drop(catalog);
            self.drive(slot);
        }
    }

    /// Every [`TICK`]: `Date`, expired deadlines, idle connections while draining, a failed accept.
    fn on_tick(&mut self) {
        if let Some(date) = self.clock.tick(SystemTime::now()) {
            self.shared.catalog.borrow_mut().set_date(&date);
        }
        for slot in 0..self.conns.capacity() {
            let draining = self.draining.is_some();
            let Some(c) = self.conns.at(slot) else {
                continue;
            };
            if draining && c.h2.is_none() && c.state.is_idle() {
                self.close(slot);
                continue;
            }
            if c.recv == Recv::Cancelling {
                // A cancel can miss a multishot receive caught between runs; ask again each tick.
                let e = opcode::AsyncCancel::new(token(Op::Recv, slot, c.gen))
                    .build()
                    .user_data(token(Op::Cancel, slot, c.gen));
                // SAFETY: a cancel points at no memory.
                unsafe { self.ring.push(e) };
            }
            if let Some(h) = &c.h2 {
                // HTTP/2 keeps its own time. Once its server has ended (after its own grace, if the
                // client stalled), what it left unsent gets a tick, as tokio drops its socket.
                if h.ended.is_some_and(|t| self.now.duration_since(t) >= TICK) {
                    self.close_h2(slot);
                }
                continue;
            }
            let (at, timer) = c.layer.deadline(&c.state);
            if self.now >= at && !timer.is_pacing() {
                let catalog = self.shared.catalog.borrow();
                c.layer
                    .on_deadline(&mut c.state, self.now, self.shared.env(&catalog));
                drop(catalog);
                self.drive(slot);
            }
        }
        if !self.accepting && self.draining.is_none() {
            self.arm_accept();
        }
        self.arm_tick();
    }

    fn drive_if_live(&mut self, slot: usize, gen: u32) {
        if self.conns.get_mut(slot, gen).is_some() {
            self.drive(slot);
        }
    }

    /// Does what the connection in `slot` needs now: send its output, shut down or close, start or
    /// stop receiving, arm its pacing timer.
    fn drive(&mut self, slot: usize) {
        let Some(c) = self.conns.at(slot) else {
            return;
        };
        if c.h2.is_some() {
            return self.drive_h2(slot);
        }
        if !c.sending {
            let mut slices = [std::io::IoSlice::new(&[]); MAX_SLICES];
            let e = match c.layer.output_slices(&c.state, &mut slices) {
                0 => None,
                1 => Some(on_fd!(self.fixed, c.fd, |fd| opcode::Send::new(
                    fd,
                    slices[0].as_ptr(),
                    slices[0].len() as u32
                )
                .flags(libc::MSG_NOSIGNAL)
                .build())),
                k => {
                    let msg = c.gather.get_or_insert_with(Gather::new).point(&slices[..k]);
                    Some(on_fd!(self.fixed, c.fd, |fd| opcode::SendMsg::new(fd, msg)
                        .flags(libc::MSG_NOSIGNAL as u32)
                        .build()))
                }
            };
            if let Some(e) = e {
                let e = e.user_data(token(Op::Send, slot, c.gen));
                c.layer.send_started(&mut c.state);
                c.sending = true;
                // SAFETY: the slices are the connection's output (its chunks, or its TLS records),
                // frozen by `send_started` until `sent` reports this send's completion; a vectored
                // send's header and iovecs are in `c.gather`, boxed, untouched until then. If the
                // connection closes first, `close` keeps all of it in `orphans` until the completion.
                unsafe { self.ring.push(e) };
            }
        }
        match c.layer.status(&c.state) {
            Status::Open => {}
            Status::ShutdownWrite => {
                let e = on_fd!(self.fixed, c.fd, |fd| opcode::Shutdown::new(
                    fd,
                    libc::SHUT_WR
                )
                .build())
                .user_data(token(Op::Close, slot, c.gen));
                c.state.shut_down_write(self.now);
                // SAFETY: a shutdown points at no memory.
                unsafe { self.ring.push(e) };
            }
            Status::Close => return self.close(slot),
            Status::Upgrade => return self.switch_to_h2(slot),
            Status::Reset => return self.close_as(slot, Closing::Reset),
        }
        self.steer_recv(slot);
        self.arm_timer(slot);
        self.register_waker(slot);
    }

    /// A connection whose request waits in a pool's queue gives the pool its waker, once per
    /// request; if the pool decided meanwhile, it is woken at once.
    fn register_waker(&mut self, slot: usize) {
        let Some(c) = self.conns.at(slot) else {
            return;
        };
        let Some(id) = c.state.queued() else {
            c.registered = None;
            return;
        };
        if c.registered == Some(id) {
            return;
        }
        c.registered = Some(id);
        let token = token(Op::Wake, slot, c.gen);
        if !c.state.wait_with(&self.mailbox.waker(token)) {
            self.mailbox.wake(token);
        }
    }

    /// Posts the read of the eventfd that other threads write to wake this worker.
    fn arm_wake(&mut self) {
        let buf: *mut u64 = &mut *self.wake_buf;
        let e = opcode::Read::new(types::Fd(self.mailbox.fd()), buf.cast(), 8)
            .build()
            .user_data(token(Op::Wake, 0, 0));
        // SAFETY: the buffer is boxed and lives as long as the worker; `finish` leaks it if the
        // kernel does not confirm this read's cancellation.
        unsafe { self.ring.push(e) };
    }

    /// The connection speaks HTTP/2 from now on: its server starts (and is polled after this batch).
    fn switch_to_h2(&mut self, slot: usize) {
        let settings = self.shared.settings;
        let (Some(c), Some(h2)) = (self.conns.at(slot), settings.h2) else {
            return self.close(slot);
        };
        let state = std::mem::replace(&mut c.state, Connection::new(&settings.policy, self.now));
        let layer = std::mem::replace(&mut c.layer, Layer::Plain);
        let (read, upgrade) = state.into_h2();
        let tls = layer.into_tls();
        let lent = h2::Lent {
            settings: h2,
            verbose: settings.policy.verbose,
            counters: self.shared.counters,
        };
        let switch = h2::Switch { read, upgrade, tls };
        let (catalog, draining) = (self.shared.catalog.clone(), self.h2.draining.clone());
        let token = token(Op::Recv, slot, c.gen);
        c.h2 = Some(h2::H2Conn::start(
            lent,
            catalog,
            draining,
            switch,
            token,
            &self.h2.ready,
        ));
        self.drive(slot);
    }

    /// An HTTP/2 connection: one send at a time of what its future wrote; the close once the future
    /// has ended and everything is out.
    fn drive_h2(&mut self, slot: usize) {
        let Some(c) = self.conns.at(slot) else {
            return;
        };
        let Some(h) = c.h2.as_mut() else {
            return;
        };
        if !c.sending {
            let out = h.output();
            if !out.is_empty() {
                let e = on_fd!(self.fixed, c.fd, |fd| opcode::Send::new(
                    fd,
                    out.as_ptr(),
                    out.len() as u32
                )
                .flags(libc::MSG_NOSIGNAL)
                .build())
                .user_data(token(Op::Send, slot, c.gen));
                c.sending = true;
                // SAFETY: `out` is the connection's send buffer, which `output` does not refill and
                // nothing else writes until `sent` or `send_failed` reports this send's completion; if
                // the connection closes first, `close` keeps it in `orphans` until then.
                unsafe { self.ring.push(e) };
            }
        }
        if h.finished() {
            return self.close_h2(slot);
        }
        self.steer_recv(slot);
    }

    /// Arms a receive when the connection wants input (its first a single shot, then a multishot); cancels it when the connection
    /// would have to keep what arrives (output backed up, a paced response in progress). Input after a
    /// closing response is discarded, so that receive is left to end with the close.
    fn steer_recv(&mut self, slot: usize) {
        let Some(c) = self.conns.at(slot) else {
            return;
        };
        let (wants, pause) = c.wants_input();
        let e = match (wants, pause, c.recv) {
            (true, _, Recv::Off) if std::mem::take(&mut c.once) => {
                c.recv = Recv::On;
                on_fd!(self.fixed, c.fd, |fd| opcode::Recv::new(
                    fd,
                    std::ptr::null_mut(),
                    0
                )
                .buf_group(BGID)
                .build())
                .flags(squeue::Flags::BUFFER_SELECT)
                .user_data(token(Op::Recv, slot, c.gen))
            }
            (true, _, Recv::Off) => {
                c.recv = Recv::On;
                on_fd!(self.fixed, c.fd, |fd| opcode::RecvMulti::new(fd, BGID)
                    .build())
                .user_data(token(Op::Recv, slot, c.gen))
            }
            (false, true, Recv::On) => {
                c.recv = Recv::Cancelling;
                opcode::AsyncCancel::new(token(Op::Recv, slot, c.gen))
                    .build()
                    .user_data(token(Op::Cancel, slot, c.gen))
            }
            _ => return,
        };
        // SAFETY: a receive from the provided-buffer ring (see `buffers`) or a cancel: no memory of ours.
        unsafe { self.ring.push(e) };
    }

    /// For a `--delay` / `--body-delay` wait: a timeout at the connection's deadline.
    fn arm_timer(&mut self, slot: usize) {
        let Some(c) = self.conns.at(slot) else {
            return;
        };
        let (at, timer) = c.layer.deadline(&c.state);
        if !timer.is_pacing() || c.timer == Some(at) {
            return;
        }
        c.timer = Some(at);
        if let Some(expiry) = self.deadlines.add(at, timer.tick(), slot, c.gen) {
            self.arm_pacing(expiry);
        }
    }

    /// The pacing timeout, at `expiry`: absolute on CLOCK_MONOTONIC (`Instant`'s clock), as a wait
    /// relative to the batch's `now` would start late by however long the batch has taken so far.
    fn arm_pacing(&mut self, expiry: Instant) {
        *self.pace_ts = monotonic(expiry);
        let e = opcode::Timeout::new(&*self.pace_ts as *const types::Timespec)
            .flags(types::TimeoutFlags::ABS)
            .build()
            .user_data(token(Op::Timer, 0, 0));
        // SAFETY: the timespec is boxed and kept for the worker's life; the kernel reads it when the
        // timeout is submitted. Two armed in one batch both read the later-written (earlier)
        // expiry: the first then fires early, finds nothing due, and changes nothing.
        unsafe { self.ring.push(e) };
    }

    fn arm_accept(&mut self) {
        self.accepting = true;
        // A direct descriptor is not in the process's file table, so it has no close-on-exec flag (the
        // kernel refuses SOCK_CLOEXEC with EINVAL there).
        let flags = if self.fixed { 0 } else { libc::SOCK_CLOEXEC };
        let e = opcode::AcceptMulti::new(types::Fd(self.listener))
            .allocate_file_index(self.fixed)
            .flags(flags)
            .build()
            .user_data(token(Op::Accept, 0, 0));
        // SAFETY: an accept into the ring's table (or the process's): no memory of ours.
        unsafe { self.ring.push(e) };
    }

    fn arm_tick(&mut self) {
        let e = opcode::Timeout::new(&*self.tick as *const types::Timespec)
            .build()
            .user_data(token(Op::Tick, 0, 0));
        // SAFETY: the tick's timespec is boxed and lives as long as the worker.
        unsafe { self.ring.push(e) };
    }

    fn start_draining(&mut self) {
        self.draining = Some(Instant::now());
        // Stop accepting: cancel the multishot accept (the listener is closed at exit).
        let e = opcode::AsyncCancel::new(token(Op::Accept, 0, 0))
            .build()
            .user_data(token(Op::Cancel, 0, 0));
        // SAFETY: a cancel points at no memory.
        unsafe { self.ring.push(e) };
        // Idle connections close now; busy ones when their response is out (checked by the tick).
        // HTTP/2 ones send GOAWAY, finish their streams and end by themselves.
        self.h2.draining.set(true);
        for slot in 0..self.conns.capacity() {
            match self.conns.at(slot) {
                Some(Conn { h2: Some(h), .. }) => h.nudge(),
                Some(c) if c.state.is_idle() => self.close(slot),
                _ => {}
            }
        }
    }

    /// Ends a connection: shutdown (which also ends its receive and send) linked to close, or only the
    /// close when neither is in flight.
    fn close(&mut self, slot: usize) {
        self.close_as(slot, Closing::Shutdown);
    }

    /// Closes an HTTP/2 connection whose server has ended: with a reset if it ended stalled (what
    /// its client did not take is dropped, not retried for minutes by a closed socket).
    fn close_h2(&mut self, slot: usize) {
        let stalled = self
            .conns
            .at(slot)
            .and_then(|c| c.h2.as_ref())
            .is_some_and(|h| h.stalled());
        match stalled {
            true => self.close_as(slot, Closing::Reset),
            false => self.close(slot),
        }
    }

    /// Closes a connection: after a shutdown (FIN), or with `SO_LINGER` 0 so that the close sends
    /// RST (a route's `reset` fault).
    fn close_as(&mut self, slot: usize, how: Closing) {
        let Some((c, gen)) = self.conns.remove(slot) else {
            return;
        };
        if c.sending {
            let orphan = Orphan(c.state, c.layer, c.gather, c.h2);
            self.orphans.push((token(Op::Send, slot, gen), orphan));
        }
        // Hard links: the close runs even if a step before it fails (a peer that already reset).
        // A reset sets `SO_LINGER` 0 first, and shuts down only the reading side (which sends
        // nothing) — both sides if a send is in flight (a client that took nothing), since that
        // send, like a receive, holds the socket past the close until a shutdown ends it; the close
        // then sends the RST. Without either, the close alone sends the FIN.
        let token = token(Op::Close, slot, gen);
        let shut = match how {
            Closing::Shutdown if c.recv == Recv::Off && !c.sending => {
                self.close_fd(c.fd, token);
                self.shared.counters.add(Counter::ConnsClosed, 1);
                return;
            }
            Closing::Shutdown => libc::SHUT_RDWR,
            Closing::Reset => {
                let linger = on_fd!(self.fixed, c.fd, |fd| opcode::SetSockOpt::new(
                    fd,
                    libc::SOL_SOCKET as u32,
                    libc::SO_LINGER as u32,
                    std::ptr::from_ref(&LINGER_RESET).cast(),
                    size_of::<libc::linger>() as u32
                )
                .build());
                let linger = linger.flags(squeue::Flags::IO_HARDLINK).user_data(token);
                // SAFETY: the socket option is a static, never written.
                unsafe { self.ring.push(linger) };
                match c.sending {
                    true => libc::SHUT_RDWR,
                    false => libc::SHUT_RD,
                }
            }
        };
        let shutdown = on_fd!(self.fixed, c.fd, |fd| opcode::Shutdown::new(fd, shut)
            .build())
        .flags(squeue::Flags::IO_HARDLINK)
        .user_data(token);
        // SAFETY: a shutdown points at no memory.
        unsafe { self.ring.push(shutdown) };
        self.close_fd(c.fd, token);
        self.shared.counters.add(Counter::ConnsClosed, 1);
    }

    fn close_fd(&mut self, fd: RawFd, user_data: u64) {
        let e = on_fd!(self.fixed, fd, |fd| opcode::Close::new(fd).build()).user_data(user_data);
        // SAFETY: a close points at no memory.
        unsafe { self.ring.push(e) };
    }

    /// Cancels everything, waits (bounded) for the kernel to confirm, and only then frees the memory it
    /// could still touch; if it does not confirm in time, that memory is leaked instead.
    fn finish(mut self) {
        for slot in 0..self.conns.capacity() {
            self.close(slot);
        }
        let cancel_all = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(token(Op::Cancel, 0, 0));
        // SAFETY: a cancel points at no memory.
        unsafe { self.ring.push(cancel_all) };
        // SAFETY: the listener fd is ours; the accept on it was cancelled.
        unsafe { libc::close(self.listener) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.ring.inflight > 0 && Instant::now() < deadline {
            self.ring.submit_and_wait_for(Duration::from_millis(50));
            for c in self.ring.ring.completion() {
                if !cqueue::more(c.flags()) {
                    self.ring.inflight = self.ring.inflight.saturating_sub(1);
                }
            }
        }
        if self.ring.inflight > 0 || !self.bufs.unregister(&self.ring.ring) {
            // The kernel may still use the buffers: never free them.
            std::mem::forget(std::mem::take(&mut self.orphans));
            std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new(0)));
            std::mem::forget(self.bufs);
        }
    }
}
