//! HTTP/2 on the io_uring worker: the same [`http2`] server as on tokio (the `h2` crate's protocol,
//! statico's streams and holds), driven from the ring instead of a reactor.
//!
//! A connection that switches to HTTP/2 (prior knowledge, `Upgrade: h2c`, or ALPN `h2` over TLS) keeps
//! its slot, its multishot receive and its sends; what changes is what the bytes go through. Received
//! bytes (decrypted first, under TLS, by the same rustls session that did the handshake) are pushed
//! into the connection's [`Pipe`]; its future — [`http2::serve_switched`] — is polled on the worker's
//! thread; what it wrote is taken from the pipe (and encrypted) into the connection's send buffer,
//! which one ring send at a time carries out. No tokio reactor, no extra thread, no timer thread: the
//! futures' sleeps are the worker's [`deadlines`](crate::kernel::deadlines), which bound the ring's wait.
//!
//! Why not a tokio runtime on the ring thread: a current-thread runtime only runs inside `block_on`,
//! whose idle path parks in its own driver (epoll, its timer wheel) — blocking the ring — and
//! `tokio::time` needs that driver. What `h2` needs is less: `AsyncRead + AsyncWrite` (trait objects,
//! no reactor), wakers, and sleeps, which [`crate::kernel::timer`] maps to the ring thread's
//! deadlines. So the ring stays the only thing the thread waits in.
//!
//! The executor is a ready list. Each connection has one [`Waker`] (an `Arc` with its ring token and a
//! queued flag, since `h2` requires `Send + Sync` wakers); waking it on the ring thread queues the
//! token once, and the worker polls every queued connection after each batch of completions. A wake
//! from another thread (a pool that decided a queued stream's fate) goes through the worker's
//! [`Mailbox`], whose eventfd ends the ring's wait. A receive, the end of input,
//! and a send that frees a full outbox queue the connection the same way, so a batch with several
//! receives for one connection polls it once.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use statico_common::Counter;

use crate::catalog::Local;
use crate::observe::meter::WorkerCounters;
use crate::proto::detect::UpgradeRequest;
use crate::proto::http2::{self, pipe::PipeIo, H2Settings, OutputMoved};

use super::wake::Mailbox;

/// Tokens of the connections to poll, in the order they were woken; a wake from another thread (a
/// pool that decided a queued stream's fate) goes through the worker's [`Mailbox`] instead, whose
/// eventfd ends the ring's wait.
#[derive(Debug)]
pub struct ReadyList {
    tokens: Mutex<Vec<u64>>,
    mailbox: Arc<Mailbox>,
}

thread_local! {
    /// The [`ReadyList`] of the worker on this thread (its address), to tell its wakes from others'.
    static RING_LIST: Cell<usize> = const { Cell::new(0) };
}

impl ReadyList {
    /// The list of the worker running on this thread.
    pub fn new(mailbox: Arc<Mailbox>) -> Arc<ReadyList> {
        let list = Arc::new(ReadyList {
            tokens: Mutex::default(),
            mailbox,
        });
        RING_LIST.with(|r| r.set(Arc::as_ptr(&list) as usize));
        list
    }

    /// Whether this is the ring thread of the list's worker.
    fn on_ring(&self) -> bool {
        RING_LIST.with(|r| r.get() == std::ptr::from_ref(self) as usize)
    }

    /// Takes the queued tokens, leaving `into`'s memory to the list for next time.
    pub fn take(&self, into: &mut Vec<u64>) {
        into.clear();
        std::mem::swap(
            &mut *self.tokens.lock().unwrap_or_else(|p| p.into_inner()),
            into,
        );
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.lock().map_or(true, |l| l.is_empty())
    }
}

/// One connection's waker: queues its token on the worker's [`ReadyList`], once until it is polled.
struct ConnWake {
    token: u64,
    queued: AtomicBool,
    ready: Arc<ReadyList>,
}

impl Wake for ConnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // From elsewhere, always through the mailbox: a flag read there could be stale.
        if !self.ready.on_ring() {
            return self.ready.mailbox.wake(self.token);
        }
        if !self.queued.swap(true, Ordering::AcqRel) {
            let mut list = self.ready.tokens.lock().unwrap_or_else(|p| p.into_inner());
            list.push(self.token);
        }
    }
}

/// What the worker lends every HTTP/2 connection's future.
#[derive(Clone, Copy)]
pub struct Lent<'a> {
    pub settings: H2Settings,
    pub verbose: u8,
    pub counters: &'a WorkerCounters,
}

/// The TLS session carried on from the handshake, if any.
type Tls = Option<Box<rustls::ServerConnection>>;

/// One HTTP/2 connection on the ring.
pub struct H2Conn<'a> {
    pipe: PipeIo,
    /// The connection's future; `None` once it has ended.
    task: Option<Pin<Box<dyn Future<Output = ()> + 'a>>>,
    wake: Arc<ConnWake>,
    waker: Waker,
    tls: Tls,
    counters: &'a WorkerCounters,
    /// The bytes of the send in flight or next (frozen while the kernel reads them) and how many of
    /// them went out.
    sending: Vec<u8>,
    sent: usize,
    /// Under TLS: plaintext taken from the pipe, and whether `close_notify` went out.
    plain: Vec<u8>,
    close_notified: bool,
    /// When the future ended (what it left unsent may take one more tick of the worker).
    pub ended: Option<Instant>,
    /// When output last moved, shared with the future's writes: the pipe takes a send's worth at a
    /// time, so a send that took part of it is progress too (a slow reader is not idle).
    moved: OutputMoved,
}

/// What a switched connection brings: the bytes read so far, an upgrade's request, a TLS session.
pub struct Switch {
    pub read: Vec<u8>,
    pub upgrade: Option<UpgradeRequest>,
    pub tls: Tls,
}

impl<'a> H2Conn<'a> {
    /// Starts the HTTP/2 server on a switched connection; it is queued to be polled.
    pub fn start(
        lent: Lent<'a>,
        catalog: Rc<RefCell<Local>>,
        draining: Rc<Cell<bool>>,
        switch: Switch,
        token: u64,
        ready: &Arc<ReadyList>,
    ) -> Box<H2Conn<'a>> {
        let pipe = PipeIo::default();
        let io = pipe.clone();
        let moved = http2::output_moved_now();
        let moved_here = moved.clone();
        let Switch { read, upgrade, tls } = switch;
        let task = async move {
            let response =
                |request: &http::Request<h2::RecvStream>| catalog.borrow().stream_answer(request);
            // The worker polls every connection when it starts draining.
            let drain = std::future::poll_fn(|_| match draining.get() {
                true => Poll::Ready(()),
                false => Poll::Pending,
            });
            let Lent {
                settings,
                verbose,
                counters,
            } = lent;
            http2::serve_switched(
                io, read, upgrade, settings, &response, counters, verbose, drain, moved,
            )
            .await;
        };
        let wake = Arc::new(ConnWake {
            token,
            queued: AtomicBool::new(false),
            ready: ready.clone(),
        });
        let waker = Waker::from(wake.clone());
        waker.wake_by_ref();
        Box::new(H2Conn {
            pipe,
            task: Some(Box::pin(task)),
            wake,
            waker,
            tls,
            counters: lent.counters,
            sending: Vec::new(),
            sent: 0,
            plain: Vec::new(),
            close_notified: false,
            ended: None,
            moved: moved_here,
        })
    }

    /// Polls the connection's future (it was queued).
    pub fn poll(&mut self, now: Instant) {
        self.wake.queued.store(false, Ordering::Release);
        let Some(task) = self.task.as_mut() else {
            return;
        };
        if task
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
            .is_ready()
        {
            self.task = None;
            self.ended = Some(now);
        }
    }

    /// Queues the connection to be polled.
    fn wake(&self) {
        self.waker.wake_by_ref();
    }

    /// Bytes from the socket. Under TLS a bad record ends the connection (after its alert).
    pub fn received(&mut self, data: &[u8]) {
        if self.task.is_none() {
            return; // over: what arrives now is dropped
        }
        if let Some(tls) = self.tls.as_mut() {
            match tls::decrypt(tls, data, &self.pipe, self.counters) {
                Ok(false) => {}
                Ok(true) => self.pipe.0.borrow_mut().end_input(false), // close_notify
                Err(()) => self.pipe.0.borrow_mut().end_input(true),
            }
            return self.wake();
        }
        self.pipe.0.borrow_mut().push(data);
        self.wake();
    }

    /// The socket reached its end (`broken`: or failed, so nothing more can be sent).
    pub fn input_ended(&mut self, broken: bool) {
        self.pipe.0.borrow_mut().end_input(broken);
        self.wake();
    }

    /// A send failed (no send is in flight now): the connection is gone, and so is its output.
    pub fn send_failed(&mut self) {
        let mut pipe = self.pipe.0.borrow_mut();
        pipe.end_input(true);
        pipe.take_output(&mut self.plain);
        drop(pipe);
        self.plain.clear();
        self.sending.clear();
        self.sent = 0;
        self.wake();
    }

    pub fn wants_input(&self) -> bool {
        self.task.is_some() && self.pipe.0.borrow().wants_input()
    }

    /// The bytes to send now, if any (taken from the pipe, encrypted under TLS, when the last send is
    /// done). They stay put until [`H2Conn::sent`].
    pub fn output(&mut self) -> &[u8] {
        if self.sent == self.sending.len() {
            self.sent = 0;
            self.sending.clear();
            let blocked = self.fill();
            if blocked {
                self.wake();
            }
        }
        &self.sending[self.sent..]
    }

    /// Moves the pipe's output into `sending`; returns whether a write waited for room.
    fn fill(&mut self) -> bool {
        let mut pipe = self.pipe.0.borrow_mut();
        if let Some(tls) = self.tls.as_mut() {
            let blocked = pipe.take_output(&mut self.plain);
            tls::encrypt(tls, &mut self.plain, &mut self.sending, self.counters);
            if pipe.is_shut() && self.plain.is_empty() && !self.close_notified {
                self.close_notified = true;
                tls.send_close_notify();
                tls::encrypt(tls, &mut self.plain, &mut self.sending, self.counters);
            }
            return blocked;
        }
        pipe.take_output(&mut self.sending)
    }

    /// A send of [`H2Conn::output`] took `n` bytes.
    pub fn sent(&mut self, n: usize) {
        if n > 0 {
            self.moved.moved_now();
        }
        self.sent = (self.sent + n).min(self.sending.len());
        if self.sent == self.sending.len() {
            self.sent = 0;
            http2::pipe::release(&mut self.sending);
        }
    }

    /// The connection ended stalled: it closes with a reset ([`http2::OutputState::stall`]).
    pub fn stalled(&self) -> bool {
        self.moved.stalled()
    }

    /// The future has ended and everything it wrote is out: the connection can close.
    pub fn finished(&self) -> bool {
        self.task.is_none()
            && self.sending.len() == self.sent
            && self.plain.is_empty()
            && !self.pipe.0.borrow().has_output()
    }

    /// Asks for a poll now (drain started).
    pub fn nudge(&self) {
        self.wake();
    }
}

/// The TLS session between the socket and the pipe, as `tls_stream` is on tokio.
mod tls {
    use std::io::{Read, Write};

    use super::*;

    /// Ciphertext in; its plaintext into the pipe. Returns whether the client closed the session
    /// (`close_notify`); an error is a bad record (its alert is queued to go out).
    pub fn decrypt(
        tls: &mut rustls::ServerConnection,
        mut data: &[u8],
        pipe: &PipeIo,
        counters: &WorkerCounters,
    ) -> Result<bool, ()> {
        counters.add(Counter::TlsBytesIn, data.len() as u64);
        let mut plain = [0u8; 16 * 1024];
        while !data.is_empty() {
            if tls.read_tls(&mut data).map_err(drop)? == 0 {
                break;
            }
            tls.process_new_packets().map_err(drop)?;
            loop {
                match tls.reader().read(&mut plain) {
                    Ok(0) => return Ok(true),
                    Ok(n) => pipe.0.borrow_mut().push(&plain[..n]),
                    Err(_) => break, // nothing more for now
                }
            }
        }
        Ok(false)
    }

    /// `plain` into records appended to `out`; what the session does not take stays in `plain`.
    pub fn encrypt(
        tls: &mut rustls::ServerConnection,
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
        counters: &WorkerCounters,
    ) {
        let mut at = 0;
        while at < plain.len() {
            match tls.writer().write(&plain[at..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => at += n,
            }
            drain_records(tls, out, counters);
        }
        plain.drain(..at);
        drain_records(tls, out, counters);
    }

    fn drain_records(tls: &mut rustls::ServerConnection, out: &mut Vec<u8>, c: &WorkerCounters) {
        while tls.wants_write() {
            match tls.write_tls(out) {
                Ok(n) => c.add(Counter::TlsBytesOut, n as u64),
                Err(_) => break,
            }
        }
    }
}
