//! The tokio runtime: each worker is a current-thread tokio runtime on its own pinned thread.
//!
//! This file is the hot path. Per connection, per read batch, the syscalls are exactly:
//! - one `read` (through tokio's `poll_read`, which also learns from a short read that the socket is
//!   drained, so no extra `read` returning `EAGAIN` is made), into a 64 KiB scratch buffer owned by the
//!   worker, not by the connection: an idle connection holds no buffer;
//! - one `write` of every response that read produced (pipelined requests are answered together), from
//!   a second worker-owned scratch buffer; only if the socket takes less than all of it is the rest copied
//!   into the connection and written when the socket is writable again;
//! - `epoll_wait` in tokio's driver when nothing is ready.
//!
//! Nothing is formatted, allocated or locked per request: the response is copied from the worker's
//! prebuilt bytes (its `Date` patched once a second by the worker's clock task), counters are plain
//! stores into the worker's own record, and timeouts use one timer per connection that is re-armed only
//! when it fires early.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::mpsc;
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use slab::Slab;
use statico_common::Counter;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};

use super::{Settings, WorkerSetup};
use crate::dump::Dumper;
use crate::h2c::{self, H2Response, UpgradeRequest};
use crate::meter::WorkerCounters;
use crate::response::{http_date, Response};
use crate::session::{Pace, Session};
use crate::shutdown;

/// Size of the worker's read scratch buffer: the most one `read` takes.
const READ_SCRATCH: usize = 64 * 1024;
/// After an error response, how long and how much to keep reading (and discarding) before closing, so
/// that unread request bytes do not make the kernel reset the connection before the client reads the
/// response.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// Runs one worker until shutdown. `ready` receives the outcome of start-up.
pub fn run(setup: WorkerSetup, ready: mpsc::Sender<Result<(), String>>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("worker {}: cannot start tokio: {e}", setup.id)));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let WorkerSetup {
            id,
            listener,
            settings,
            counters,
            shutdown,
        } = setup;
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!(
                    "worker {id}: cannot register the listener: {e}"
                )));
                return;
            }
        };
        let worker = Rc::new(Worker {
            response: RefCell::new(settings.response.clone()),
            h2_response: RefCell::new(settings.h2.as_ref().map(|(_, r)| r.clone())),
            h2_drain: tokio::sync::Notify::new(),
            settings,
            counters,
            id,
            scratch: RefCell::new(Scratch {
                input: vec![0; READ_SCRATCH].into_boxed_slice(),
                output: Vec::with_capacity(READ_SCRATCH),
            }),
            draining: Cell::new(false),
            conns: RefCell::new(Slab::new()),
            drained: tokio::sync::Notify::new(),
        });
        let _ = ready.send(Ok(()));
        tokio::task::spawn_local(clock(worker.clone()));
        accept_loop(&worker, listener, shutdown).await;
        drain(&worker).await;
    });
}

/// A worker's state, shared by its tasks on its one thread.
struct Worker {
    settings: std::sync::Arc<Settings>,
    /// This worker's copy of the response, its `Date` kept live by [`clock`].
    response: RefCell<Response>,
    /// The same for HTTP/2 streams, with `--http2`.
    h2_response: RefCell<Option<H2Response>>,
    /// Notified at shutdown: HTTP/2 connections send GOAWAY and finish their streams.
    h2_drain: tokio::sync::Notify,
    counters: crate::meter::Counters,
    id: usize,
    scratch: RefCell<Scratch>,
    /// Set at shutdown: connections close as soon as they are between requests.
    draining: Cell<bool>,
    /// Open connections, so that shutdown can close the idle ones.
    conns: RefCell<Slab<ConnEntry>>,
    /// Notified when the last connection closes while draining.
    drained: tokio::sync::Notify,
}

/// Buffers lent to one connection at a time, never across an `.await`.
struct Scratch {
    input: Box<[u8]>,
    output: Vec<u8>,
}

struct ConnEntry {
    idle: Rc<Cell<bool>>,
    abort: AbortHandle,
}

impl Worker {
    fn counters(&self) -> &WorkerCounters {
        self.counters.worker(self.id)
    }
}

/// Patches the worker's `Date` at every second boundary.
async fn clock(worker: Rc<Worker>) {
    loop {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let to_next_second =
            Duration::from_nanos(1_000_000_000 - u64::from(since_epoch.subsec_nanos()));
        sleep(to_next_second).await;
        let date = http_date(SystemTime::now());
        worker.response.borrow_mut().set_date(&date);
        if let Some(r) = worker.h2_response.borrow_mut().as_mut() {
            r.set_date(&date);
        }
    }
}

async fn accept_loop(worker: &Rc<Worker>, listener: TcpListener, mut shutdown: shutdown::Listener) {
    let stop = shutdown::fired(&mut shutdown);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _peer)) => {
                worker.counters().add(Counter::ConnsAccepted, 1);
                // TCP_NODELAY, when asked for, is inherited from the listener (set in `steering`).
                spawn_connection(worker, stream);
            }
            Err(e) if is_resource_exhaustion(&e) => {
                // Out of file descriptors or memory: back off instead of spinning on the ready listener.
                eprintln!("statico: worker {}: accept failed: {e}; raise the fd limit (ulimit -n) or lower the load", worker.id);
                sleep(Duration::from_millis(50)).await;
            }
            Err(_) => {} // the peer gave up before accept (ECONNABORTED and the like)
        }
    }
}

fn is_resource_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if [libc_errno::EMFILE, libc_errno::ENFILE, libc_errno::ENOBUFS, libc_errno::ENOMEM].contains(&code)
    )
}

/// errno values, spelled out to avoid a libc dependency for four constants (same on Linux and BSDs).
mod libc_errno {
    pub const ENOMEM: i32 = 12;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
    #[cfg(target_os = "linux")]
    pub const ENOBUFS: i32 = 105;
    #[cfg(not(target_os = "linux"))]
    pub const ENOBUFS: i32 = 55;
}

fn spawn_connection(worker: &Rc<Worker>, stream: TcpStream) {
    let idle = Rc::new(Cell::new(false));
    let mut conns = worker.conns.borrow_mut();
    let entry = conns.vacant_entry();
    let guard = ConnGuard {
        worker: worker.clone(),
        key: entry.key(),
    };
    let task = tokio::task::spawn_local(serve(guard, stream, idle.clone()));
    entry.insert(ConnEntry {
        idle,
        abort: task.abort_handle(),
    });
}

/// Deregisters a connection and counts it closed, however its task ends (returned or aborted).
struct ConnGuard {
    worker: Rc<Worker>,
    key: usize,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let w = &self.worker;
        w.counters().add(Counter::ConnsClosed, 1);
        let mut conns = w.conns.borrow_mut();
        conns.try_remove(self.key);
        if w.draining.get() && conns.is_empty() {
            w.drained.notify_one();
        }
    }
}

/// Stops accepting has already happened; closes idle connections now and waits for busy ones.
async fn drain(worker: &Rc<Worker>) {
    worker.draining.set(true);
    worker.h2_drain.notify_waiters();
    for (_, c) in worker.conns.borrow().iter() {
        if c.idle.get() {
            c.abort.abort();
        }
    }
    let deadline = sleep(worker.settings.shutdown_timeout);
    tokio::pin!(deadline);
    while !worker.conns.borrow().is_empty() {
        tokio::select! {
            () = worker.drained.notified() => {}
            () = &mut deadline => return,
        }
    }
}

/// Why a connection ended, or what it turned into.
enum End {
    /// The client closed, reset, or we closed after a response that said so.
    Closed,
    /// A header or idle timeout expired.
    Timeout,
    /// The connection speaks HTTP/2 from here on (`--http2`): by prior knowledge, with the bytes read
    /// so far, or after `101 Switching Protocols` for the upgrade request.
    H2 {
        read: Vec<u8>,
        upgrade: Option<UpgradeRequest>,
    },
}

/// What woke a waiting connection.
enum Wake {
    Data(usize),
    Timer,
    Failed,
}

/// Serves one connection until it closes.
async fn serve(guard: ConnGuard, mut stream: TcpStream, idle: Rc<Cell<bool>>) {
    let w = guard.worker.clone();
    match serve_inner(&w, &mut stream, &idle).await {
        End::Timeout => w.counters().add(Counter::Timeouts, 1),
        End::H2 { read, upgrade } => serve_h2(&w, stream, read, upgrade).await,
        End::Closed => {}
    }
    drop(guard);
}

/// Hands a connection to the HTTP/2 server (`h2c`), after collecting, for an upgrade, the client's
/// preface and first SETTINGS frame.
async fn serve_h2(
    w: &Worker,
    mut stream: TcpStream,
    mut read: Vec<u8>,
    upgrade: Option<UpgradeRequest>,
) {
    let Some((h2, _)) = w.settings.h2 else { return };
    let prefix = match upgrade {
        None => read,
        Some(up) => loop {
            match h2c::upgraded_prefix(&read, &up) {
                Some(Ok(prefix)) => break prefix,
                Some(Err(())) => return,
                None if read.len() > 64 * 1024 => return,
                None => {
                    let mut chunk = vec![0u8; 16 * 1024];
                    match timeout(w.settings.header_timeout, stream.read(&mut chunk)).await {
                        Ok(Ok(n)) if n > 0 => read.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
            }
        },
    };
    let drain = async {
        let notified = w.h2_drain.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !w.draining.get() {
            notified.await;
        }
    };
    let response = || {
        w.h2_response
            .borrow()
            .clone()
            .expect("--http2 builds the HTTP/2 response")
    };
    let counters = w.counters();
    h2c::serve(
        h2c::Rewind::new(prefix, stream, counters),
        h2,
        &response,
        counters,
        w.settings.verbose,
        drain,
    )
    .await;
}

async fn serve_inner(w: &Worker, stream: &mut TcpStream, idle: &Cell<bool>) -> End {
    let s = &*w.settings;
    let counters = w.counters();
    let paced = s.delay.is_some() || s.body_delay.is_some();
    let mut session = Session::with_h2c(s.limits, s.h2.is_some());
    let mut dumper = Dumper::new(s.verbose);
    // Unconsumed input (a partial head or chunk line), owned by the connection only while it exists.
    let mut pending: Vec<u8> = Vec::new();
    let mut deadline = Instant::now() + s.idle_timeout;
    let timer = sleep_until(deadline);
    tokio::pin!(timer);
    // With --http2, the first bytes decide whether the connection speaks HTTP/2 (prior knowledge).
    let mut protocol_undecided = s.h2.is_some();

    loop {
        let between = session.between_requests() && pending.is_empty();
        idle.set(between);
        if between && w.draining.get() {
            return End::Closed;
        }

        // Wait for bytes or the deadline. The scratch buffer is borrowed only inside each poll.
        let wake = poll_fn(|cx| {
            let mut scratch = w.scratch.borrow_mut();
            let mut buf = ReadBuf::new(&mut scratch.input);
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => return Poll::Ready(Wake::Data(buf.filled().len())),
                Poll::Ready(Err(_)) => return Poll::Ready(Wake::Failed),
                Poll::Pending => {}
            }
            timer.as_mut().poll(cx).map(|()| Wake::Timer)
        })
        .await;
        let n = match wake {
            Wake::Data(0) | Wake::Failed => return End::Closed,
            Wake::Data(n) => n,
            Wake::Timer if Instant::now() >= deadline => return End::Timeout,
            Wake::Timer => {
                timer.as_mut().reset(deadline);
                continue;
            }
        };
        idle.set(false);
        counters.add(Counter::BytesIn, n as u64);
        counters.add(Counter::Reads, 1);

        // Bytes of this read not yet moved into `pending`.
        let mut fresh = n;
        if protocol_undecided {
            pending.extend_from_slice(&w.scratch.borrow().input[..n]);
            fresh = 0;
            if pending.starts_with(h2c::PREFACE) {
                return End::H2 {
                    read: std::mem::take(&mut pending),
                    upgrade: None,
                };
            }
            if h2c::PREFACE.starts_with(&pending) {
                continue; // a prefix of the preface: read more before deciding
            }
            match h2c::first_line_is_http1(&pending) {
                None => continue, // the first line is not complete yet
                // Neither HTTP/1.x nor the HTTP/2 preface: an invalid preface is a connection error
                // (RFC 9113 §3.4), so the connection closes without an HTTP/1 answer.
                Some(false) => return End::Closed,
                Some(true) => protocol_undecided = false,
            }
        }

        let done = if paced {
            pending.extend_from_slice(&w.scratch.borrow().input[..fresh]);
            paced_exchange(w, stream, &mut session, &mut pending, &mut dumper).await
        } else {
            match exchange_now(w, stream, &mut session, &mut pending, &mut dumper, fresh) {
                Some(Exchanged {
                    unwritten: Some(rest),
                    ..
                }) if write_all(w, stream, &rest).await.is_err() => None,
                done => done,
            }
        };
        let Some(done) = done else {
            return End::Closed;
        };
        if let Some(upgrade) = done.upgrade {
            // `101 Switching Protocols` is written; what follows the upgrade request is HTTP/2.
            return End::H2 {
                read: std::mem::take(&mut pending),
                upgrade: Some(upgrade),
            };
        }
        if done.close {
            if done.linger {
                linger(stream).await;
            }
            return End::Closed;
        }
        // A new head must arrive whole within the header timeout of its first byte; a body must keep
        // moving; between requests the idle timeout applies.
        let now = Instant::now();
        if session.between_requests() {
            if pending.is_empty() {
                deadline = now + s.idle_timeout;
            } else if between || done.answered {
                deadline = now + s.header_timeout;
            }
        } else {
            deadline = now + s.header_timeout;
        }
        // The timer is re-armed lazily when it fires early; only an earlier deadline re-arms it now.
        if deadline < timer.deadline() {
            timer.as_mut().reset(deadline);
        }
    }
}

/// What [`exchange_now`] did.
struct Exchanged {
    /// Responses the socket did not take at once, to write when it is writable.
    unwritten: Option<Vec<u8>>,
    /// Close after writing.
    close: bool,
    /// Before closing, drain what the client may still send (after an error response, or when input
    /// follows the last answered request), so that unread bytes do not turn the close into a reset.
    linger: bool,
    /// At least one request was answered.
    answered: bool,
    /// The last request upgraded the connection to HTTP/2 (`101` already in the output).
    upgrade: Option<UpgradeRequest>,
}

/// The synchronous part of a batch: the `n` bytes just read (in the worker's scratch) are parsed,
/// answered into the output scratch, and written with one `write`. Returns `None` if the write failed.
fn exchange_now(
    w: &Worker,
    stream: &TcpStream,
    session: &mut Session,
    pending: &mut Vec<u8>,
    dumper: &mut Dumper,
    n: usize,
) -> Option<Exchanged> {
    let mut scratch = w.scratch.borrow_mut();
    let Scratch { input, output } = &mut *scratch;
    let kept = !pending.is_empty();
    if kept {
        pending.extend_from_slice(&input[..n]);
    }
    let data: &[u8] = if kept { pending } else { &input[..n] };
    output.clear();
    let batch = session.process(data, output, &w.response.borrow(), Pace::All, dumper);
    let unread = batch.consumed < data.len();
    if kept {
        pending.drain(..batch.consumed);
    } else if batch.consumed < n {
        pending.extend_from_slice(&input[batch.consumed..n]);
    }
    let counters = w.counters();
    batch.count(counters);

    let mut written = 0;
    while written < output.len() {
        match stream.try_write(&output[written..]) {
            Ok(k) => {
                written += k;
                counters.add(Counter::Writes, 1);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => return None,
        }
    }
    counters.add(Counter::BytesOut, written as u64);
    Some(Exchanged {
        unwritten: (written < output.len()).then(|| output[written..].to_vec()),
        close: batch.close,
        linger: batch.error.is_some() || unread,
        answered: batch.requests > 0,
        upgrade: batch.upgrade,
    })
}

/// `--delay` / `--body-delay`: answers the requests in `pending` one at a time, sleeping as asked.
/// Returns `None` if the client went away.
async fn paced_exchange(
    w: &Worker,
    stream: &mut TcpStream,
    session: &mut Session,
    pending: &mut Vec<u8>,
    dumper: &mut Dumper,
) -> Option<Exchanged> {
    let s = &*w.settings;
    let mut answered = false;
    loop {
        let mut out = Vec::new();
        let batch = session.process(
            pending,
            &mut out,
            &w.response.borrow(),
            Pace::OneByOne,
            dumper,
        );
        pending.drain(..batch.consumed);
        batch.count(w.counters());
        if batch.requests > 0 {
            answered = true;
            if let Some(d) = s.delay {
                sleep(d).await;
            }
        }
        match (batch.body_at, s.body_delay) {
            (Some(at), Some(body_delay)) if batch.requests > 0 && at < out.len() => {
                write_all(w, stream, &out[..at]).await.ok()?;
                sleep(body_delay).await;
                write_all(w, stream, &out[at..]).await.ok()?;
            }
            _ => write_all(w, stream, &out).await.ok()?,
        }
        if batch.close || batch.requests == 0 || batch.upgrade.is_some() {
            return Some(Exchanged {
                unwritten: None,
                close: batch.close,
                linger: batch.error.is_some() || !pending.is_empty(),
                answered,
                upgrade: batch.upgrade,
            });
        }
    }
}

/// Writes all of `bytes`, waiting for the socket, giving up after the idle timeout (a client that does
/// not read its responses does not hold the connection forever).
async fn write_all(w: &Worker, stream: &mut TcpStream, bytes: &[u8]) -> Result<(), ()> {
    if bytes.is_empty() {
        return Ok(());
    }
    match timeout(w.settings.idle_timeout, stream.write_all(bytes)).await {
        Ok(Ok(())) => {
            w.counters().add(Counter::BytesOut, bytes.len() as u64);
            w.counters().add(Counter::Writes, 1);
            Ok(())
        }
        _ => Err(()),
    }
}

/// Closes our side after the last response, then reads and discards what the client still sends, for a
/// bounded time and amount, so that its unread bytes do not turn our close into a reset that could
/// destroy the response before the client reads it. Only used when such bytes may exist: a clean
/// `Connection: close` just closes.
async fn linger(stream: &mut TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = Instant::now() + LINGER_TIME;
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    while total < LINGER_BYTES {
        match timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            _ => return,
        }
    }
}
