//! The io_uring runtime: each worker is one thread, pinned to its CPU, driving its own ring with the
//! `io-uring` crate directly — no async runtime in between.
//!
//! This file is the io_uring hot path. The only syscall in steady state is one `io_uring_enter` per loop
//! iteration, which submits every queued operation and waits for at least one completion. Operations:
//! - one **multishot accept** on the worker's listener: one SQE yields every new connection;
//! - one **multishot receive** per connection with a **provided-buffer ring**: the kernel picks a buffer
//!   only when bytes arrive, so an idle connection holds no receive buffer; each buffer is handed back
//!   to the ring as soon as its bytes are parsed;
//! - one **send** per batch: the responses to everything one receive produced go out as one SQE; a
//!   partial send is resubmitted from where it stopped; responses produced while a send is in flight
//!   wait in a second buffer and go out together after it;
//! - a ring **timeout** every [`TICK`] that patches the `Date`, expires header/idle deadlines, and
//!   notices shutdown; per-connection timeouts only for `--delay` / `--body-delay`;
//! - **shutdown + close** SQEs (linked) to end a connection, without extra syscalls.
//!
//! HTTP is decided by the shared [`Session`]; this file only moves bytes.
//!
//! Memory the kernel may write (provided buffers) or read (send buffers) is owned here with explicit
//! rules, stated at each `unsafe` block: a provided buffer belongs to the kernel from the moment it is
//! published in the buffer ring until a completion names it; a send buffer is never touched (moved,
//! grown or freed) while its send is in flight; at exit every operation is cancelled and reaped before
//! that memory is freed, and it is leaked rather than freed if the kernel does not confirm in time.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use statico_common::Counter;

use super::{Settings, WorkerSetup};
use crate::dump::Dumper;
use crate::meter::WorkerCounters;
use crate::response::{http_date, Response};
use crate::session::{Pace, Session};

/// How often the worker wakes up to patch `Date`, expire deadlines and check for shutdown.
const TICK: Duration = Duration::from_millis(100);
/// Provided receive buffers per worker, and the size of each.
const RECV_BUFFERS: u16 = 512;
const RECV_BUFFER_SIZE: usize = 8 * 1024;
/// Buffer group id of the receive buffer ring.
const BGID: u16 = 0;
/// After an error response: how long and how much to keep reading before closing (see the tokio
/// runtime for why).
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;
/// A send buffer larger than this is freed after use rather than kept for the next response.
const KEEP_SEND_CAPACITY: usize = 64 * 1024;

/// io_uring settings from the command line.
#[derive(Clone, Copy, Debug)]
pub struct UringOptions {
    pub entries: u32,
    pub sqpoll_idle_ms: Option<u32>,
    /// Size of each worker's registered (direct) file table; see [`direct_files`].
    pub direct_files: u32,
}

/// Most direct descriptors one worker registers (each slot costs the kernel 8 bytes).
const MAX_DIRECT_FILES: u64 = 1 << 18;

/// Size of a worker's registered (direct) file table for an open-files limit of `fd_limit`.
/// Connections are accepted straight into this table, so ring operations on them skip the per-operation
/// file lookup and reference counting (`fget`/`fput`), and they use no ordinary descriptor. The kernel
/// refuses a table larger than `RLIMIT_NOFILE`, so it is sized from that limit.
pub fn direct_files(fd_limit: u64) -> u32 {
    fd_limit.clamp(16, MAX_DIRECT_FILES) as u32
}

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

/// What a completion is for: the top byte of `user_data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    Accept = 1,
    Recv = 2,
    Send = 3,
    Close = 4,
    Tick = 5,
    Delay = 6,
    Cancel = 7,
}

impl Op {
    fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Accept,
            2 => Op::Recv,
            3 => Op::Send,
            4 => Op::Close,
            5 => Op::Tick,
            6 => Op::Delay,
            7 => Op::Cancel,
            _ => return None,
        })
    }
}

/// `user_data` = op (8 bits) | generation (24 bits) | connection slot (32 bits). The generation makes
/// completions for a slot's previous connection recognisable after the slot is reused.
fn token(op: Op, slot: usize, gen: u32) -> u64 {
    (op as u64) << 56 | u64::from(gen & 0xFF_FFFF) << 32 | slot as u64
}

fn untoken(data: u64) -> (Option<Op>, usize, u32) {
    (
        Op::from_u8((data >> 56) as u8),
        (data & 0xFFFF_FFFF) as usize,
        ((data >> 32) & 0xFF_FFFF) as u32,
    )
}

/// Creates a ring with the best flags this kernel accepts for a single-threaded worker, and says which.
pub fn build_ring(opts: UringOptions) -> io::Result<(IoUring, &'static str)> {
    let mut last_err = None;
    let attempts: &[&'static str] = if opts.sqpoll_idle_ms.is_some() {
        &["sqpoll+single_issuer", "sqpoll"]
    } else {
        &[
            "single_issuer+defer_taskrun",
            "single_issuer+coop_taskrun",
            "coop_taskrun",
            "plain",
        ]
    };
    for &flags in attempts {
        let mut b = IoUring::builder();
        if let Some(idle) = opts.sqpoll_idle_ms {
            b.setup_sqpoll(idle);
        }
        if flags.contains("single_issuer") {
            b.setup_single_issuer();
        }
        if flags.contains("defer_taskrun") {
            b.setup_defer_taskrun();
        }
        if flags.contains("coop_taskrun") {
            b.setup_coop_taskrun();
        }
        b.setup_cqsize(opts.entries.saturating_mul(4));
        match b.build(opts.entries) {
            Ok(ring) => return Ok((ring, flags)),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no ring flags tried")))
}

/// Checks that this kernel can run the worker (multishot receive with provided-buffer rings needs
/// Linux 6.0), and explains what is missing otherwise. On success, describes the ring: its flags and
/// whether connections are direct descriptors (and if not, why).
pub fn check_available(opts: UringOptions) -> Result<String, String> {
    let (ring, flags) = build_ring(opts).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EPERM) => "io_uring is disabled for this process (sysctl kernel.io_uring_disabled, or a seccomp filter such as a container's)",
            Some(libc::ENOSYS) => "this kernel has no io_uring",
            Some(libc::ENOMEM) => "not enough locked memory for the ring (raise `ulimit -l` or lower --uring-entries)",
            _ => "the kernel refused to create a ring",
        };
        format!("io_uring is unavailable: {why} ({e}); run with --runtime tokio")
    })?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        format!(
            "io_uring is unavailable: cannot probe its operations ({e}); run with --runtime tokio"
        )
    })?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "accept"),
        (opcode::RecvMulti::CODE, "recv"),
        (opcode::Send::CODE, "send"),
        (opcode::Timeout::CODE, "timeout"),
        (opcode::Shutdown::CODE, "shutdown"),
        (opcode::Close::CODE, "close"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!(
                "io_uring is unavailable: this kernel lacks the {name} operation; run with --runtime tokio"
            ));
        }
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (6, 0) {
        return Err(format!(
            "io_uring is unavailable: multishot receive with provided-buffer rings needs Linux 6.0, this is {}; run with --runtime tokio",
            release.trim()
        ));
    }
    Ok(
        match ring.submitter().register_files_sparse(opts.direct_files) {
            Ok(()) => format!("{flags}, {} direct descriptors", opts.direct_files),
            Err(e) => format!(
                "{flags}, plain descriptors: the kernel refused a table of {} direct ones ({e})",
                opts.direct_files
            ),
        },
    )
}

/// The provided-buffer ring: `RECV_BUFFERS` buffers the kernel picks from for multishot receives.
struct BufRing {
    /// Page-aligned ring of entries shared with the kernel (mmap-ed).
    entries: *mut types::BufRingEntry,
    ring_bytes: usize,
    mask: u16,
    /// Our copy of the tail; published to the kernel through the ring's tail field.
    tail: u16,
    /// The buffers themselves, `RECV_BUFFER_SIZE` each, contiguous. A raw pointer, not a slice: the
    /// kernel writes buffers we have published while we read others, so no Rust reference may ever
    /// cover the whole area; [`BufRing::bytes`] makes a slice of one buffer the kernel has handed back.
    memory: *mut u8,
    memory_len: usize,
}

impl BufRing {
    fn new(ring: &IoUring) -> io::Result<BufRing> {
        let count = RECV_BUFFERS;
        let ring_bytes = usize::from(count) * size_of::<types::BufRingEntry>();
        // SAFETY: an anonymous private mapping with no address hint; the result is checked below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut br = BufRing {
            entries: addr.cast(),
            ring_bytes,
            mask: count - 1,
            tail: 0,
            memory: Box::into_raw(
                vec![0u8; usize::from(count) * RECV_BUFFER_SIZE].into_boxed_slice(),
            )
            .cast(),
            memory_len: usize::from(count) * RECV_BUFFER_SIZE,
        };
        // SAFETY: `entries` is a page-aligned mapping of `count` entries that lives until `Drop`, which
        // runs only after the ring stopped using it (see `Worker::finish`).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(addr as u64, count, BGID, 0)?;
        }
        for bid in 0..count {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    /// Queues buffer `bid` for the kernel (published by [`BufRing::publish`]).
    fn push(&mut self, bid: u16) {
        let slot = usize::from(self.tail & self.mask);
        // SAFETY: `slot` < `count` entries of the mapping; the kernel reads only entries between its head
        // and the published tail, and this one is past the published tail until `publish`.
        let entry = unsafe { &mut *self.entries.add(slot) };
        // Address arithmetic only: `bid` < `count`, so the buffer lies inside the allocation.
        entry.set_addr(
            self.memory
                .wrapping_add(usize::from(bid) * RECV_BUFFER_SIZE) as u64,
        );
        entry.set_len(RECV_BUFFER_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes pushed buffers visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail field overlays entry 0's `resv`, inside the mapping; the kernel reads it
        // atomically, so it is written with an atomic release store after the entries.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// The `len` bytes the kernel received into buffer `bid`.
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(
            bid < RECV_BUFFERS,
            "the kernel named a buffer we never provided"
        );
        // SAFETY: buffer `bid` is inside the allocation; a completion just handed it to us, so the kernel
        // does not write it until we publish it again, which happens after this slice is dropped.
        unsafe {
            std::slice::from_raw_parts(
                self.memory.add(usize::from(bid) * RECV_BUFFER_SIZE),
                len.min(RECV_BUFFER_SIZE),
            )
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both were allocated in `new` with these sizes, and `Worker::finish` drops the buffer
        // ring only after the kernel confirmed that no operation can still use them.
        unsafe {
            libc::munmap(self.entries.cast(), self.ring_bytes);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.memory,
                self.memory_len,
            )));
        }
    }
}

/// Where a `--delay` / `--body-delay` connection is in answering its current request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Paced {
    /// Not answering: the next complete request in `pending` may start.
    Ready,
    /// Waiting for the `--delay` timeout before sending.
    Delaying,
    /// Sending the head; the body goes after `--body-delay`.
    SendingHead,
    /// Waiting for the `--body-delay` timeout before sending the body.
    BodyDelaying,
    /// Sending the rest.
    Sending,
}

struct Conn {
    fd: RawFd,
    gen: u32,
    session: Session,
    dumper: Dumper,
    /// Unconsumed input (partial head or chunk line).
    pending: Vec<u8>,
    /// The bytes of the send in flight; never touched while `sending`.
    out: Vec<u8>,
    sent: usize,
    sending: bool,
    /// Responses produced while a send was in flight.
    queued: Vec<u8>,
    /// For `--body-delay`: the body part, sent after the delay.
    held_body: Vec<u8>,
    paced: Paced,
    /// Close once everything is sent.
    close_after_send: bool,
    /// Linger (read and discard) rather than close at once.
    linger_after_send: bool,
    lingering: Option<(Instant, usize)>,
    deadline: Instant,
    /// The current head started at this read (for the header deadline).
    recv_armed: bool,
}

/// The worker's whole state.
struct Worker<'a> {
    ring: IoUring,
    bufs: BufRing,
    settings: &'a Settings,
    response: Response,
    counters: &'a WorkerCounters,
    listener: RawFd,
    /// Connections are direct descriptors in the ring's registered file table.
    fixed: bool,
    accepting: bool,
    /// The last accept error reported (reported once until an accept succeeds).
    accept_error: Option<i32>,
    conns: Vec<Option<Conn>>,
    gens: Vec<u32>,
    free: Vec<usize>,
    live: usize,
    /// Timespecs the timeouts point at. The kernel copies a timespec when it takes the SQE, but the SQE
    /// may wait in the queue until the next `io_uring_enter`, so they live as long as the worker.
    tick: Box<types::Timespec>,
    delay: Box<types::Timespec>,
    body_delay: Box<types::Timespec>,
    /// Send buffers of connections closed while their send was in flight, kept until that send's
    /// completion arrives (the kernel may still read them), by the send's token.
    orphans: Vec<(u64, Vec<u8>)>,
    /// Operations submitted whose final completion has not been seen.
    inflight: usize,
    draining: Option<Instant>,
    last_date_second: u64,
    cqes: Vec<(u64, i32, u32)>,
    paced: bool,
    /// Per-batch output before it is moved into a connection (so a batch appends without allocating).
    scratch: Vec<u8>,
    closing: VecDeque<usize>,
}

/// The connection in `slot` if `gen` is still its generation (a completion for a slot's previous
/// connection finds nothing). A free function, so callers can borrow other worker fields alongside.
fn live_conn(conns: &mut [Option<Conn>], slot: usize, gen: u32) -> Option<&mut Conn> {
    conns
        .get_mut(slot)
        .and_then(Option::as_mut)
        .filter(|c| c.gen == gen)
}

/// Runs one worker until shutdown. `ready` receives the outcome of start-up.
pub fn run(setup: WorkerSetup, opts: UringOptions, ready: mpsc::Sender<Result<(), String>>) {
    let WorkerSetup {
        id,
        listener,
        settings,
        counters,
        shutdown,
    } = setup;
    let (ring, _flags) = match build_ring(opts) {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(format!("worker {id}: cannot create an io_uring: {e}")));
            return;
        }
    };
    let bufs = match BufRing::new(&ring) {
        Ok(b) => b,
        Err(e) => {
            let _ = ready.send(Err(format!(
                "worker {id}: cannot register the receive buffer ring: {e}; io_uring needs Linux 6.0+, or run with --runtime tokio"
            )));
            return;
        }
    };
    let listener_fd = listener.into_raw_fd();
    // Direct descriptors where the kernel has them (5.19+); plain descriptors otherwise (the start-up
    // line says which, from the same attempt in `check_available`).
    let fixed = ring
        .submitter()
        .register_files_sparse(opts.direct_files)
        .is_ok();
    let mut w = Worker {
        fixed,
        ring,
        bufs,
        settings: &settings,
        response: settings.response.clone(),
        counters: counters.worker(id),
        listener: listener_fd,
        accepting: false,
        accept_error: None,
        conns: Vec::new(),
        gens: Vec::new(),
        free: Vec::new(),
        live: 0,
        tick: Box::new(types::Timespec::from(TICK)),
        delay: Box::new(types::Timespec::from(settings.delay.unwrap_or_default())),
        body_delay: Box::new(types::Timespec::from(
            settings.body_delay.unwrap_or_default(),
        )),
        orphans: Vec::new(),
        inflight: 0,
        draining: None,
        last_date_second: 0,
        cqes: Vec::with_capacity(1024),
        paced: settings.delay.is_some() || settings.body_delay.is_some(),
        scratch: Vec::with_capacity(64 * 1024),
        closing: VecDeque::new(),
    };
    w.arm_accept();
    w.arm_tick();
    let _ = ready.send(Ok(()));
    loop {
        if w.draining.is_none() && *shutdown.borrow() {
            w.start_draining();
        }
        if let Some(since) = w.draining {
            if w.live == 0 || since.elapsed() >= settings.shutdown_timeout {
                break;
            }
        }
        if let Err(e) = w.ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) || e.raw_os_error() == Some(libc::EBUSY) {
                continue;
            }
            eprintln!("statico: worker {id}: io_uring_enter failed: {e}");
            break;
        }
        w.reap();
    }
    w.finish();
}

impl<'a> Worker<'a> {
    /// Queues an SQE, flushing the submission queue to the kernel if it is full.
    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every SQE built in this file points only at memory that outlives its operation:
            // the worker's tick timespec, a connection's boxed delay timespec, or a connection's `out`
            // buffer, which is not touched until the send's completion (see `Conn::out`).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.inflight += 1;
                return;
            }
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) {
                    eprintln!("statico: io_uring submit failed: {e}");
                }
                // The completion queue is full: make room, then retry.
                self.reap();
            }
        }
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
        self.push(e);
    }

    fn arm_tick(&mut self) {
        let e = opcode::Timeout::new(&*self.tick as *const types::Timespec)
            .build()
            .user_data(token(Op::Tick, 0, 0));
        self.push(e);
    }

    fn arm_recv(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        c.recv_armed = true;
        let e = on_fd!(self.fixed, c.fd, |fd| opcode::RecvMulti::new(fd, BGID)
            .build())
        .user_data(token(Op::Recv, slot, c.gen));
        self.push(e);
    }

    /// Collects the completions and handles each.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(data, res, flags) in &cqes {
            if !cqueue::more(flags) {
                self.inflight = self.inflight.saturating_sub(1);
            }
            let (op, slot, gen) = untoken(data);
            match op {
                Some(Op::Accept) => self.on_accept(res, flags),
                Some(Op::Recv) => self.on_recv(slot, gen, res, flags),
                Some(Op::Send) => self.on_send(slot, gen, res),
                Some(Op::Tick) => self.on_tick(),
                Some(Op::Delay) => self.on_delay(slot, gen),
                Some(Op::Close) | Some(Op::Cancel) | None => {}
            }
        }
        self.cqes = cqes;
        while let Some(slot) = self.closing.pop_front() {
            self.close_now(slot);
        }
    }

    fn on_accept(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accepting = false;
        }
        if res < 0 {
            let err = -res;
            if [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM].contains(&err) {
                // Out of descriptors: the tick re-arms accept once connections have closed.
                eprintln!(
                    "statico: accept failed: {}; raise the fd limit (ulimit -n) or lower the load",
                    io::Error::from_raw_os_error(err)
                );
                self.accepting = false;
                return;
            }
            if [libc::ECONNABORTED, libc::EINTR, libc::EAGAIN].contains(&err) {
                // A connection that went away before it was accepted: carry on at once.
                if !self.accepting && self.draining.is_none() {
                    self.arm_accept();
                }
            } else if !self.accepting && err != libc::ECANCELED {
                // Anything else would fail again at once: say so (once), and retry at each tick
                // rather than spin.
                if self.accept_error != Some(err) {
                    eprintln!(
                        "statico: accept failed: {}; retrying every {} ms",
                        io::Error::from_raw_os_error(err),
                        TICK.as_millis()
                    );
                }
                self.accept_error = Some(err);
            }
            return;
        }
        let fd = res;
        self.accept_error = None;
        if self.draining.is_some() {
            let e = on_fd!(self.fixed, fd, |fd| opcode::Close::new(fd).build()).user_data(token(
                Op::Close,
                0,
                0,
            ));
            self.push(e);
            return;
        }
        self.counters.add(Counter::ConnsAccepted, 1);
        // TCP_NODELAY, when asked for, is inherited from the listener (set in `steering`).
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.gens.push(0);
            self.conns.len() - 1
        });
        self.gens[slot] = self.gens[slot].wrapping_add(1) & 0xFF_FFFF;
        self.conns[slot] = Some(Conn {
            fd,
            gen: self.gens[slot],
            session: Session::new(self.settings.limits),
            dumper: Dumper::new(self.settings.verbose),
            pending: Vec::new(),
            out: Vec::new(),
            sent: 0,
            sending: false,
            queued: Vec::new(),
            held_body: Vec::new(),
            paced: Paced::Ready,
            close_after_send: false,
            linger_after_send: false,
            lingering: None,
            deadline: Instant::now() + self.settings.idle_timeout,
            recv_armed: false,
        });
        self.live += 1;
        self.arm_recv(slot);
        if !self.accepting && self.draining.is_none() {
            self.arm_accept();
        }
    }

    /// The connection in `slot` if `gen` is still its generation.
    fn conn(&mut self, slot: usize, gen: u32) -> Option<&mut Conn> {
        live_conn(&mut self.conns, slot, gen)
    }

    fn on_recv(&mut self, slot: usize, gen: u32, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let alive = self.conn(slot, gen).is_some();
        if res > 0 && alive {
            let bid = bid.expect("a receive with data names its buffer");
            self.on_data(slot, bid, res as usize);
        }
        if let Some(bid) = bid {
            // The buffer goes back to the kernel whatever happened to the connection.
            self.bufs.push(bid);
            self.bufs.publish();
        }
        if !alive {
            return;
        }
        match res {
            0 => self.schedule_close(slot),
            // Every buffer was in use for a moment; they are back now.
            r if r < 0 && -r == libc::ENOBUFS && !more => self.arm_recv(slot),
            r if r < 0 && -r == libc::ENOBUFS => {}
            r if r < 0 => self.schedule_close(slot),
            _ if !more => {
                if let Some(c) = self.conns[slot].as_mut() {
                    c.recv_armed = false;
                    if !c.close_after_send || c.lingering.is_some() {
                        self.arm_recv(slot);
                    }
                }
            }
            _ => {}
        }
    }

    /// Handles `n` received bytes in buffer `bid`.
    fn on_data(&mut self, slot: usize, bid: u16, n: usize) {
        self.counters.add(Counter::BytesIn, n as u64);
        self.counters.add(Counter::Reads, 1);
        let data = self.bufs.bytes(bid, n);
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        if let Some((_, ref mut got)) = c.lingering {
            *got += n;
            if *got > LINGER_BYTES {
                self.closing.push_back(slot);
            }
            return;
        }
        if c.close_after_send {
            return; // input after a closing response is discarded
        }
        if self.paced {
            c.pending.extend_from_slice(data);
            self.step_paced(slot);
            return;
        }
        let was_between = c.session.between_requests() && c.pending.is_empty();
        let kept = !c.pending.is_empty();
        if kept {
            c.pending.extend_from_slice(data);
        }
        let input: &[u8] = if kept { &c.pending } else { data };
        let out = if c.sending {
            &mut c.queued
        } else {
            &mut self.scratch
        };
        let batch = c
            .session
            .process(input, out, &self.response, Pace::All, &mut c.dumper);
        let unread = batch.consumed < input.len();
        if kept {
            c.pending.drain(..batch.consumed);
        } else if unread {
            c.pending.extend_from_slice(&data[batch.consumed..]);
        }
        batch.count(self.counters);
        if batch.close {
            c.close_after_send = true;
            c.linger_after_send = batch.error.is_some() || unread;
        }
        let now = Instant::now();
        if c.session.between_requests() {
            if c.pending.is_empty() {
                c.deadline = now + self.settings.idle_timeout;
            } else if was_between || batch.requests > 0 {
                c.deadline = now + self.settings.header_timeout;
            }
        } else {
            c.deadline = now + self.settings.header_timeout;
        }
        if !c.sending {
            // Move this batch's output into the connection's send buffer (swap keeps both allocations).
            std::mem::swap(&mut c.out, &mut self.scratch);
            self.scratch.clear();
            self.start_send(slot);
        }
    }

    /// Sends `out` (from `sent`) if there is anything; otherwise finishes a pending close.
    fn start_send(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        if c.sent >= c.out.len() {
            c.out.clear();
            c.sent = 0;
            if c.out.capacity() > KEEP_SEND_CAPACITY {
                c.out = Vec::new();
            }
            if c.close_after_send && c.paced == Paced::Ready {
                self.begin_close(slot);
            }
            return;
        }
        c.sending = true;
        let rest = &c.out[c.sent..];
        let e = on_fd!(self.fixed, c.fd, |fd| opcode::Send::new(
            fd,
            rest.as_ptr(),
            rest.len() as u32
        )
        .flags(libc::MSG_NOSIGNAL)
        .build())
        .user_data(token(Op::Send, slot, c.gen));
        self.push(e);
    }

    fn on_send(&mut self, slot: usize, gen: u32, res: i32) {
        let Some(c) = live_conn(&mut self.conns, slot, gen) else {
            // The connection closed while this send was in flight: its buffer can go now.
            let t = token(Op::Send, slot, gen);
            if let Some(i) = self.orphans.iter().position(|(k, _)| *k == t) {
                self.orphans.swap_remove(i);
            }
            return;
        };
        c.sending = false;
        if res < 0 {
            self.closing.push_back(slot);
            return;
        }
        self.counters.add(Counter::BytesOut, res as u64);
        c.sent += res as usize;
        if c.sent < c.out.len() {
            self.start_send(slot); // partial send: the rest, from where it stopped
            return;
        }
        self.counters.add(Counter::Writes, 1);
        c.out.clear();
        c.sent = 0;
        match c.paced {
            Paced::SendingHead => {
                c.paced = Paced::BodyDelaying;
                self.arm_delay(slot, true);
            }
            Paced::Sending => {
                c.paced = Paced::Ready;
                if c.close_after_send {
                    self.begin_close(slot);
                } else {
                    self.step_paced(slot);
                }
            }
            _ => {
                if !c.queued.is_empty() {
                    std::mem::swap(&mut c.out, &mut c.queued);
                }
                self.start_send(slot);
            }
        }
    }

    /// `--delay` / `--body-delay`: answers the next complete request in `pending`, if any and if the
    /// connection is not busy with the previous one.
    fn step_paced(&mut self, slot: usize) {
        let s = self.settings;
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        if c.paced != Paced::Ready || c.sending || c.close_after_send {
            return;
        }
        let mut out = std::mem::take(&mut c.out);
        out.clear();
        let batch = c.session.process(
            &c.pending,
            &mut out,
            &self.response,
            Pace::OneByOne,
            &mut c.dumper,
        );
        c.pending.drain(..batch.consumed);
        batch.count(self.counters);
        if batch.close {
            c.close_after_send = true;
            c.linger_after_send = batch.error.is_some() || !c.pending.is_empty();
        }
        c.deadline = Instant::now()
            + if c.session.between_requests() && c.pending.is_empty() {
                s.idle_timeout
            } else {
                s.header_timeout
            };
        if batch.requests == 0 {
            c.out = out; // 100 Continue or an error response: no delay
            self.start_send(slot);
            return;
        }
        if let (Some(at), Some(_)) = (batch.body_at, s.body_delay) {
            c.held_body = out.split_off(at.min(out.len()));
        }
        c.out = out;
        if s.delay.is_some() {
            c.paced = Paced::Delaying;
            self.arm_delay(slot, false);
        } else {
            self.send_paced(slot);
        }
    }

    /// Sends the head (then waits for the body delay) or the whole response.
    fn send_paced(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        c.paced = if c.held_body.is_empty() {
            Paced::Sending
        } else {
            Paced::SendingHead
        };
        self.start_send(slot);
    }

    /// Arms the `--delay` (or, with `body`, the `--body-delay`) timeout for the connection in `slot`.
    fn arm_delay(&mut self, slot: usize, body: bool) {
        let Some(c) = self.conns[slot].as_ref() else {
            return;
        };
        let ts: *const types::Timespec = if body {
            &*self.body_delay
        } else {
            &*self.delay
        };
        let e = opcode::Timeout::new(ts)
            .build()
            .user_data(token(Op::Delay, slot, c.gen));
        self.push(e);
    }

    fn on_delay(&mut self, slot: usize, gen: u32) {
        let Some(c) = live_conn(&mut self.conns, slot, gen) else {
            return;
        };
        match c.paced {
            Paced::Delaying => self.send_paced(slot),
            Paced::BodyDelaying => {
                c.out = std::mem::take(&mut c.held_body);
                c.paced = Paced::Sending;
                self.start_send(slot);
            }
            _ => {}
        }
    }

    fn on_tick(&mut self) {
        let now_wall = SystemTime::now();
        let second = now_wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if second != self.last_date_second {
            self.last_date_second = second;
            self.response.set_date(&http_date(now_wall));
        }
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_ref() else {
                continue;
            };
            if let Some((since, _)) = c.lingering {
                if now - since >= LINGER_TIME {
                    self.closing.push_back(slot);
                }
                continue;
            }
            let busy = c.sending || matches!(c.paced, Paced::Delaying | Paced::BodyDelaying);
            if !busy && now >= c.deadline {
                self.counters.add(Counter::Timeouts, 1);
                self.closing.push_back(slot);
            } else if self.draining.is_some()
                && !busy
                && c.session.between_requests()
                && c.pending.is_empty()
            {
                self.closing.push_back(slot);
            }
        }
        if !self.accepting && self.draining.is_none() {
            self.arm_accept();
        }
        self.arm_tick();
    }

    fn start_draining(&mut self) {
        self.draining = Some(Instant::now());
        // Stop accepting: cancel the multishot accept, then close the listener.
        let e = opcode::AsyncCancel::new(token(Op::Accept, 0, 0))
            .build()
            .user_data(token(Op::Cancel, 0, 0));
        self.push(e);
        // Idle connections close now; busy ones when their response is out (checked by the tick).
        for slot in 0..self.conns.len() {
            if let Some(c) = self.conns[slot].as_ref() {
                if !c.sending
                    && c.paced == Paced::Ready
                    && c.session.between_requests()
                    && c.pending.is_empty()
                {
                    self.closing.push_back(slot);
                }
            }
        }
        while let Some(slot) = self.closing.pop_front() {
            self.close_now(slot);
        }
    }

    fn schedule_close(&mut self, slot: usize) {
        self.closing.push_back(slot);
    }

    /// After the last response: close, or linger first when the client may still be sending.
    fn begin_close(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        if c.linger_after_send && c.lingering.is_none() {
            c.lingering = Some((Instant::now(), 0));
            let e = on_fd!(self.fixed, c.fd, |fd| opcode::Shutdown::new(
                fd,
                libc::SHUT_WR
            )
            .build())
            .user_data(token(Op::Close, slot, c.gen));
            let rearm = !c.recv_armed;
            self.push(e);
            if rearm {
                self.arm_recv(slot);
            }
            return;
        }
        self.closing.push_back(slot);
    }

    /// Ends a connection: shutdown (which also ends its multishot receive) linked to close, as SQEs.
    fn close_now(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].take() else {
            return;
        };
        if c.sending {
            // The send in flight may still read `out`: keep it until its completion.
            self.orphans.push((token(Op::Send, slot, c.gen), c.out));
        }
        // Hard link: the close runs even if the shutdown fails (a peer that already reset).
        let shutdown = on_fd!(self.fixed, c.fd, |fd| opcode::Shutdown::new(
            fd,
            libc::SHUT_RDWR
        )
        .build())
        .flags(squeue::Flags::IO_HARDLINK)
        .user_data(token(Op::Close, slot, c.gen));
        let close = on_fd!(self.fixed, c.fd, |fd| opcode::Close::new(fd).build()).user_data(token(
            Op::Close,
            slot,
            c.gen,
        ));
        self.push(shutdown);
        self.push(close);
        self.counters.add(Counter::ConnsClosed, 1);
        self.live -= 1;
        self.free.push(slot);
    }

    /// Cancels everything, waits (bounded) for the kernel to confirm, and only then frees the memory it
    /// could still touch; if it does not confirm in time, that memory is leaked instead.
    fn finish(mut self) {
        for slot in 0..self.conns.len() {
            if self.conns[slot].is_some() {
                self.close_now(slot);
            }
        }
        let cancel_all = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(token(Op::Cancel, 0, 0));
        self.push(cancel_all);
        // SAFETY: the listener fd is ours; the accept on it was cancelled above.
        unsafe { libc::close(self.listener) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.inflight > 0 && Instant::now() < deadline {
            let _ = self.ring.submitter().submit_with_args(
                1,
                &types::SubmitArgs::new()
                    .timespec(&types::Timespec::from(Duration::from_millis(50))),
            );
            self.reap_quietly();
        }
        if self.inflight > 0 {
            // The kernel may still use the buffers: never free them.
            std::mem::forget(std::mem::take(&mut self.orphans));
            std::mem::forget(self.bufs);
        }
    }

    /// Reaps completions at exit without acting on them (every connection is gone).
    fn reap_quietly(&mut self) {
        for c in self.ring.completion() {
            if !cqueue::more(c.flags()) {
                self.inflight = self.inflight.saturating_sub(1);
            }
        }
    }
}
