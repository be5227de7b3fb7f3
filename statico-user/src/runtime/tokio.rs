//! The tokio runtime: each worker is a current-thread tokio runtime on its own pinned thread.
//!
//! This file is the hot path; what to do with the bytes is the shared [`Connection`]'s decision.
//!
//! A new connection is served first on the socket as accepted (`accept4` with `SOCK_NONBLOCK`), not
//! yet registered with epoll and without a task of its own: one `read` of what the client has sent, the
//! answers written, and if that ends the connection (`Connection: close`, HTTP/1.0) the `close` — four
//! system calls, as many as nginx makes without its `epoll_ctl`. Only a connection that goes on
//! (keep-alive, a request not complete yet, output the socket did not take, TLS, HTTP/2) is registered
//! and gets its task. From then on, per read batch, the syscalls are exactly:
//! - one `read` (through tokio's `poll_read`, which also learns from a short read that the socket is
//!   drained, so no extra `read` returning `EAGAIN` is made), into a 64 KiB scratch buffer owned by the
//!   worker, not by the connection: an idle connection holds no read buffer;
//! - one `write` (`writev` when a static site's shared bodies are among them) of every response that
//!   read produced (pipelined requests are answered together); if
//!   the socket takes less, the rest is written when it is writable again, and meanwhile the connection
//!   reads only while its unsent output is under [`MAX_UNSENT`](crate::conn::connection::MAX_UNSENT);
//! - for a static site's large bodies (see [`SENDFILE_MIN`](crate::conn::output::SENDFILE_MIN)), which lie
//!   in the site's sealed memfd: `sendmsg(MSG_MORE)` of what comes before, then `sendfile` of the
//!   body, so its pages go to the socket without a copy;
//! - `shutdown(SHUT_WR)` before a lingering close, and `close`;
//! - `epoll_wait` in tokio's driver when nothing is ready.
//!
//! Nothing is formatted or locked per request: the response is copied from the worker's prebuilt bytes
//! (its `Date` patched once a second by the worker's clock task), counters are plain stores into the
//! worker's own record, and each connection has one timer, re-armed only when it fires early or the
//! connection's deadline moves earlier.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::mpsc;
use std::task::Poll;
use std::time::SystemTime;

use slab::Slab;
use statico_common::Counter;
#[cfg(unix)]
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio::time::{sleep, sleep_until, Instant, Sleep};

use super::gather::{self, Abortable as _};
use super::{AcceptErrors, AcceptRetry, Settings, WorkerSetup, ACCEPT_RETRY};
use crate::catalog::response::DateClock;
use crate::conn::connection::{Connection, Env, Status};
use crate::conn::layer::Layer;
use crate::conn::output::{FileAt, Next, MAX_SLICES};
use crate::observe::meter::WorkerCounters;
use crate::proto::detect::UpgradeRequest;
use crate::proto::http2;
use crate::shutdown;

/// Size of the worker's read scratch buffer: the most one `read` takes.
const READ_SCRATCH: usize = 64 * 1024;

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
        let listener = match register(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!(
                    "worker {id}: cannot register the listener: {e}"
                )));
                return;
            }
        };
        let worker = Rc::new(Worker::new(id, settings, counters));
        crate::kernel::timer::install();
        let _ = ready.send(Ok(()));
        tokio::task::spawn_local(clock(worker.clone()));
        accept_loop(&worker, listener, shutdown).await;
        drain(&worker).await;
    });
}

/// A worker's state, shared by its tasks on its one thread.
struct Worker {
    settings: std::sync::Arc<Settings>,
    /// This worker's copy of the catalog, its `Date` kept live by [`clock`], its site replaced when a
    /// rebuild is swapped in.
    catalog: RefCell<crate::catalog::Local>,
    /// Notified at shutdown: HTTP/2 connections send GOAWAY and finish their streams.
    h2_drain: tokio::sync::Notify,
    counters: crate::observe::meter::Counters,
    id: usize,
    /// The read buffer, lent to one connection at a time, never across an `.await`.
    scratch: RefCell<Box<[u8]>>,
    /// Set at shutdown: connections close as soon as they are between requests.
    draining: Cell<bool>,
    /// Open connections, so that shutdown can close the idle ones.
    conns: RefCell<Slab<ConnEntry>>,
    /// Notified when the last connection closes while draining.
    drained: tokio::sync::Notify,
}

struct ConnEntry {
    idle: Rc<Cell<bool>>,
    abort: AbortHandle,
}

impl Worker {
    fn new(
        id: usize,
        settings: std::sync::Arc<Settings>,
        counters: crate::observe::meter::Counters,
    ) -> Self {
        Worker {
            catalog: RefCell::new(crate::catalog::Local::for_worker(&settings.catalog, id)),
            h2_drain: tokio::sync::Notify::new(),
            settings,
            counters,
            id,
            scratch: RefCell::new(vec![0; READ_SCRATCH].into_boxed_slice()),
            draining: Cell::new(false),
            conns: RefCell::new(Slab::new()),
            drained: tokio::sync::Notify::new(),
        }
    }

    fn counters(&self) -> &WorkerCounters {
        self.counters.worker(self.id)
    }

    /// Runs `f` with what a connection reads from its worker (the response borrowed only inside).
    fn with_env<R>(&self, f: impl FnOnce(Env) -> R) -> R {
        self.catalog.borrow_mut().refresh();
        let catalog = self.catalog.borrow();
        f(Env {
            policy: &self.settings.policy,
            catalog: catalog.view(),
            counters: self.counters(),
        })
    }
}

/// Patches the worker's `Date` at every second boundary.
async fn clock(worker: Rc<Worker>) {
    let mut clock = DateClock::default();
    loop {
        sleep(DateClock::until_next_second(SystemTime::now())).await;
        let Some(date) = clock.tick(SystemTime::now()) else {
            continue;
        };
        worker.catalog.borrow_mut().set_date(&date);
    }
}

async fn accept_loop(worker: &Rc<Worker>, listener: Incoming, mut shutdown: shutdown::Listener) {
    let stop = shutdown::fired(&mut shutdown);
    tokio::pin!(stop);
    let mut errors = AcceptErrors::new(worker.id);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => return,
            r = accept(&listener) => r,
        };
        match accepted {
            Ok(stream) => {
                errors.succeeded();
                worker.counters().add(Counter::ConnsAccepted, 1);
                // TCP_NODELAY, when asked for, is inherited from the listener (set in `steering`).
                serve_accepted(worker, stream);
            }
            Err(e) => {
                if errors.failed_io(&e) == AcceptRetry::Later {
                    tokio::select! {
                        biased;
                        () = &mut stop => return,
                        () = sleep(ACCEPT_RETRY) => {}
                    }
                }
            }
        }
    }
}

/// A worker's listener, registered for readiness only: what it accepts is not registered.
#[cfg(unix)]
type Incoming = AsyncFd<std::net::TcpListener>;
#[cfg(not(unix))]
type Incoming = tokio::net::TcpListener;

#[cfg(unix)]
fn register(listener: std::net::TcpListener) -> io::Result<Incoming> {
    // SAFETY: the listener owns its descriptor, which stays open and the same until the
    // `AsyncFd` that owns the listener is dropped.
    unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }
        .map_err(io::Error::from)
}

#[cfg(not(unix))]
fn register(listener: std::net::TcpListener) -> io::Result<Incoming> {
    tokio::net::TcpListener::from_std(listener)
}

/// Off Unix: tokio's accept, the connection taken back out of tokio's reactor.
#[cfg(not(unix))]
async fn accept(listener: &Incoming) -> io::Result<std::net::TcpStream> {
    let (stream, _peer) = listener.accept().await?;
    stream.into_std()
}

/// The next connection on the listener, non-blocking and not registered with epoll.
#[cfg(unix)]
async fn accept(listener: &Incoming) -> io::Result<std::net::TcpStream> {
    loop {
        let mut ready = listener.readable().await?;
        #[cfg(target_os = "linux")]
        let accepted = ready.try_io(|l| {
            let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
            let (socket, _peer) = socket2::SockRef::from(l.get_ref()).accept4(flags)?;
            Ok(std::net::TcpStream::from(socket))
        });
        #[cfg(not(target_os = "linux"))]
        let accepted = ready.try_io(|l| {
            let (stream, _peer) = l.get_ref().accept()?;
            stream.set_nonblocking(true)?;
            Ok(stream)
        });
        // `Err(_)`: it would block; the readiness is cleared and awaited again.
        if let Ok(accepted) = accepted {
            return accepted;
        }
    }
}

/// A new connection's first exchange, on the socket as accepted: one read of what the client has sent,
/// its answers written; the connection closed here if that ends it, else handed to its own task.
fn serve_accepted(worker: &Rc<Worker>, stream: std::net::TcpStream) {
    let (mut conn, mut layer) = open(worker);
    let read = io::Read::read(&mut &stream, &mut worker.scratch.borrow_mut());
    let now = std::time::Instant::now();
    worker.with_env(|env| match read {
        Ok(0) => layer.peer_closed(&mut conn, env),
        Ok(n) => layer.receive(&mut conn, &worker.scratch.borrow()[..n], now, env),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(_) => layer.peer_closed(&mut conn, env),
    });
    let status = match flush(worker, &stream, &mut conn, &mut layer) {
        Ok(()) => layer.status(&conn),
        Err(()) => Status::Close,
    };
    match status {
        Status::Close => {}
        Status::Reset => {
            // The close sends RST (a route's `reset` fault).
            stream.abort_on_close();
        }
        Status::Open | Status::ShutdownWrite | Status::Upgrade => {
            return spawn_connection(worker, stream, conn, layer);
        }
    }
    worker.counters().add(Counter::ConnsClosed, 1);
}

/// A new connection's state: TLS or not, its header timeout running from now.
fn open(w: &Worker) -> (Connection, Layer) {
    let policy = &w.settings.policy;
    let start = std::time::Instant::now();
    let layer = Layer::new(w.settings.tls.as_ref(), start, policy.header_timeout);
    let conn = if layer.is_tls() {
        Connection::new_tls(policy, start)
    } else {
        Connection::new(policy, start)
    };
    (conn, layer)
}

fn spawn_connection(
    worker: &Rc<Worker>,
    stream: std::net::TcpStream,
    conn: Connection,
    layer: Layer,
) {
    let idle = Rc::new(Cell::new(false));
    let mut conns = worker.conns.borrow_mut();
    let entry = conns.vacant_entry();
    let guard = ConnGuard {
        worker: worker.clone(),
        key: entry.key(),
    };
    let task = tokio::task::spawn_local(serve(guard, stream, (conn, layer), idle.clone()));
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

/// What woke a waiting connection.
enum Wake {
    Data(usize),
    Writable,
    Closed,
    Timer,
    /// A pool decided the fate of the request the connection has queued.
    Pool,
}

/// Serves one connection, registered now, until it closes, on HTTP/1.1 and, if it switches, on HTTP/2.
async fn serve(
    guard: ConnGuard,
    stream: std::net::TcpStream,
    state: (Connection, Layer),
    idle: Rc<Cell<bool>>,
) {
    let w = guard.worker.clone();
    let Ok(mut stream) = TcpStream::from_std(stream) else {
        return; // not registered: closed, and counted by the guard
    };
    if let Some(h2) = serve_http1(&w, &mut stream, state, &idle).await {
        // HTTP/2 drains by itself, with GOAWAY. Boxed: HTTP/2's state is kilobytes, and inline it
        // would make every connection's task that large, HTTP/1.1 ones included.
        idle.set(false);
        match h2.tls {
            #[cfg(target_os = "linux")]
            Some(session) => {
                let stream = super::tls_stream::TlsStream::new(stream, *session, w.counters());
                Box::pin(serve_h2(&w, stream, h2.read, h2.upgrade)).await;
            }
            _ => Box::pin(serve_h2(&w, stream, h2.read, h2.upgrade)).await,
        }
    }
    drop(guard);
}

/// A connection that moves on to HTTP/2: the bytes read so far, the request of an `Upgrade: h2c`, and
/// (after ALPN h2) its TLS session.
struct ToH2 {
    read: Vec<u8>,
    upgrade: Option<UpgradeRequest>,
    #[cfg(target_os = "linux")]
    tls: Option<Box<rustls::ServerConnection>>,
    #[cfg(not(target_os = "linux"))]
    tls: Option<std::convert::Infallible>,
}

/// The HTTP/1.1 loop: send what the connection has, act on its status, wait for what it waits for.
/// Returns the connection if it switches to HTTP/2.
async fn serve_http1(
    w: &Worker,
    stream: &mut TcpStream,
    (mut conn, mut layer): (Connection, Layer),
    idle: &Cell<bool>,
) -> Option<ToH2> {
    let timer = sleep_until(Instant::from_std(layer.deadline(&conn).0));
    tokio::pin!(timer);
    // A held answer's deadline needs better than tokio's millisecond (see `kernel::timer`).
    let mut pacing = crate::kernel::timer::Sleep::default();
    let precise = crate::kernel::timer::Sleep::available();
    let mut fired = false;
    loop {
        flush(w, stream, &mut conn, &mut layer).ok()?;
        match layer.status(&conn) {
            Status::Open => {}
            Status::ShutdownWrite => {
                stream.shutdown().await.ok()?;
                conn.shut_down_write(std::time::Instant::now());
            }
            Status::Close => return None,
            Status::Reset => {
                // The close sends RST (a route's `reset` fault, or a client that took nothing).
                stream.abort_on_close();
                return None;
            }
            Status::Upgrade => {
                let (read, upgrade) = conn.into_h2();
                #[cfg(target_os = "linux")]
                let tls = layer.into_tls();
                #[cfg(not(target_os = "linux"))]
                let tls = None;
                return Some(ToH2 { read, upgrade, tls });
            }
        }
        idle.set(conn.is_idle());
        if conn.is_idle() && w.draining.get() {
            return None;
        }
        // The timer follows the connection's deadline lazily: re-armed when it has fired (early or
        // not) or when the deadline moved earlier, not each time it moves later.
        let (at, why) = layer.deadline(&conn);
        let paced = precise && why.is_pacing();
        let deadline = Instant::from_std(at);
        if paced {
            pacing.reset(at, why.tick());
        } else if fired || deadline < timer.deadline() {
            timer.as_mut().reset(deadline);
        }
        let timers = Timers {
            coarse: timer.as_mut(),
            precise: paced.then_some(&mut pacing),
        };
        let wake = wait(w, stream, &conn, &layer, timers).await;
        fired = matches!(wake, Wake::Timer);
        let now = std::time::Instant::now();
        w.with_env(|env| match wake {
            Wake::Data(n) => layer.receive(&mut conn, &w.scratch.borrow()[..n], now, env),
            Wake::Writable => {}
            Wake::Closed => layer.peer_closed(&mut conn, env),
            Wake::Timer | Wake::Pool => layer.on_deadline(&mut conn, now, env),
        });
    }
}

/// Writes the connection's output until it is all sent or the socket is full (`try_write`: one
/// `write` per batch in the common case). An error means the connection is gone.
fn flush(
    w: &Worker,
    stream: &impl Socket,
    conn: &mut Connection,
    layer: &mut Layer,
) -> Result<(), ()> {
    loop {
        let written = {
            let mut slices = [io::IoSlice::new(&[]); MAX_SLICES];
            match layer.output_next(conn, &mut slices) {
                Next::Nothing => return Ok(()),
                Next::Slices {
                    count,
                    file_follows,
                } => stream.send(&slices[..count], file_follows),
                Next::File { at, len } => stream.send_file(at, len),
            }
        };
        match written {
            Ok(n) => w.with_env(|env| layer.sent(conn, n, std::time::Instant::now(), env)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(_) => return Err(()),
        }
    }
}

/// A socket [`flush`] writes to: tokio's once the connection is registered (its writes go through
/// tokio's readiness), the accepted one before (plain non-blocking writes).
trait Socket {
    /// One `write`, `writev`, or `sendmsg(MSG_MORE)` when a file's bytes follow (they leave in the
    /// same segments, not behind a small one).
    fn send(&self, slices: &[io::IoSlice<'_>], more: bool) -> io::Result<usize>;
    /// `sendfile` of `len` bytes of a site's sealed store from `at`.
    fn send_file(&self, at: FileAt, len: usize) -> io::Result<usize>;
}

impl Socket for std::net::TcpStream {
    fn send(&self, slices: &[io::IoSlice<'_>], more: bool) -> io::Result<usize> {
        use io::Write;
        match (slices.len(), more) {
            #[cfg(target_os = "linux")]
            (_, true) => {
                socket2::SockRef::from(self).send_vectored_with_flags(slices, libc::MSG_MORE)
            }
            (1, _) => (&mut &*self).write(&slices[0]),
            _ => (&mut &*self).write_vectored(slices),
        }
    }

    fn send_file(&self, at: FileAt, len: usize) -> io::Result<usize> {
        send_file(self, at, len)
    }
}

impl Socket for TcpStream {
    fn send(&self, slices: &[io::IoSlice<'_>], more: bool) -> io::Result<usize> {
        match (slices.len(), more) {
            #[cfg(target_os = "linux")]
            (_, true) => self.try_io(Interest::WRITABLE, || {
                socket2::SockRef::from(self).send_vectored_with_flags(slices, libc::MSG_MORE)
            }),
            (1, _) => self.try_write(&slices[0]),
            _ => self.try_write_vectored(slices),
        }
    }

    fn send_file(&self, at: FileAt, len: usize) -> io::Result<usize> {
        self.try_io(Interest::WRITABLE, || send_file(self, at, len))
    }
}

/// `sendfile` of `len` bytes of a site's sealed store from `at` to `socket` (only Linux builds have
/// one).
#[cfg(target_os = "linux")]
fn send_file(socket: &impl std::os::fd::AsRawFd, at: FileAt, len: usize) -> io::Result<usize> {
    let mut offset = at.offset as libc::off_t;
    // SAFETY: both descriptors are open (the store's is owned by the body the output holds);
    // `offset` is a local the kernel updates.
    let n = unsafe { libc::sendfile(socket.as_raw_fd(), at.fd, &mut offset, len) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(not(target_os = "linux"))]
fn send_file<S>(_socket: &S, at: FileAt, len: usize) -> io::Result<usize> {
    unreachable!("no file-backed bodies off Linux: {at:?} {len}")
}

/// A connection's timers: tokio's for its timeouts, the precise one while an answer is held.
struct Timers<'a> {
    coarse: Pin<&'a mut Sleep>,
    precise: Option<&'a mut crate::kernel::timer::Sleep>,
}

/// Waits for what the connection waits for: the socket writable (unsent output), bytes (while it
/// wants input, and while it holds an answer — so that a client that leaves is noticed at once; read
/// into the worker's scratch, borrowed only inside each poll), a pool's decision on its queued
/// request, or its deadline.
async fn wait(
    w: &Worker,
    stream: &mut TcpStream,
    conn: &Connection,
    layer: &Layer,
    mut timers: Timers<'_>,
) -> Wake {
    poll_fn(|cx| {
        if !layer.output(conn).is_empty() && stream.poll_write_ready(cx).is_ready() {
            return Poll::Ready(Wake::Writable);
        }
        if conn.queued().is_some() && !conn.wait_with(cx.waker()) {
            return Poll::Ready(Wake::Pool);
        }
        if layer.wants_input(conn) || (conn.holds_answer() && !layer.pauses_input(conn)) {
            let mut scratch = w.scratch.borrow_mut();
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Wake::Closed),
                Poll::Ready(Ok(())) => return Poll::Ready(Wake::Data(buf.filled().len())),
                Poll::Ready(Err(_)) => return Poll::Ready(Wake::Closed),
                Poll::Pending => {}
            }
        }
        match timers.precise.as_mut() {
            Some(precise) => precise.poll(cx).map(|()| Wake::Timer),
            None => timers.coarse.as_mut().poll(cx).map(|()| Wake::Timer),
        }
    })
    .await
}

/// Hands a connection to the HTTP/2 server (`h2c`, or h2 after ALPN), which drains by itself with
/// GOAWAY when the worker does.
async fn serve_h2<T: AsyncRead + AsyncWrite + Unpin + gather::Abortable>(
    w: &Worker,
    stream: T,
    read: Vec<u8>,
    upgrade: Option<UpgradeRequest>,
) {
    let Some(h2) = w.settings.h2 else { return };
    let drain = async {
        let notified = w.h2_drain.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !w.draining.get() {
            notified.await;
        }
    };
    let response = |request: &http::Request<h2::RecvStream>| {
        let mut catalog = w.catalog.borrow_mut();
        catalog.refresh();
        catalog.stream_answer(request)
    };
    let counters = w.counters();
    let verbose = w.settings.policy.verbose;
    let moved = http2::output_moved_now();
    let turns = gather::Turns::default();
    let stream = gather::Gathered::new(stream, turns.clone(), moved.clone());
    let serving = http2::serve_switched(
        stream, read, upgrade, h2, &response, counters, verbose, drain, moved,
    );
    gather::in_turns(&turns, serving).await;
}
