//! The ring itself: creating it with the best flags the kernel takes, probing what the worker needs,
//! and queueing SQEs. Only the worker's main loop reaps completions; an SQE that finds the submission
//! queue full waits in a backlog that the main loop submits after it has reaped, so no completion is
//! ever handled from inside a push.

use std::collections::VecDeque;
use std::io;

use io_uring::{opcode, squeue, types, IoUring};

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

/// What a completion is for: the top byte of `user_data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Accept = 1,
    Recv = 2,
    Send = 3,
    Close = 4,
    Tick = 5,
    Timer = 6,
    Cancel = 7,
    /// A read of the worker's eventfd: connections woken from another thread ([`super::wake`]).
    Wake = 8,
}

impl Op {
    fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Accept,
            2 => Op::Recv,
            3 => Op::Send,
            4 => Op::Close,
            5 => Op::Tick,
            6 => Op::Timer,
            7 => Op::Cancel,
            8 => Op::Wake,
            _ => return None,
        })
    }
}

/// `user_data` = op (8 bits) | generation (24 bits) | connection slot (32 bits). The generation makes
/// completions for a slot's previous connection recognisable after the slot is reused.
pub fn token(op: Op, slot: usize, gen: u32) -> u64 {
    (op as u64) << 56 | u64::from(gen & GEN_MASK) << 32 | slot as u64
}

pub fn untoken(data: u64) -> (Option<Op>, usize, u32) {
    (
        Op::from_u8((data >> 56) as u8),
        (data & 0xFFFF_FFFF) as usize,
        ((data >> 32) as u32) & GEN_MASK,
    )
}

/// Generations are 24 bits wide (see [`token`]).
pub const GEN_MASK: u32 = 0xFF_FFFF;

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
        (opcode::SendMsg::CODE, "sendmsg"),
        (opcode::Timeout::CODE, "timeout"),
        (opcode::Shutdown::CODE, "shutdown"),
        (opcode::Close::CODE, "close"),
        (opcode::AsyncCancel::CODE, "cancel"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!(
                "io_uring is unavailable: this kernel lacks the {name} operation; run with --runtime tokio"
            ));
        }
    }
    let (major, minor) = crate::kernel::sys::kernel_version();
    if (major, minor) < (6, 0) {
        return Err(format!(
            "io_uring is unavailable: multishot receive with provided-buffer rings needs Linux 6.0, this is {major}.{minor}; run with --runtime tokio"
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

/// A worker's ring and the SQEs waiting to enter it.
pub struct Ring {
    pub ring: IoUring,
    /// SQEs that found the submission queue full, in order; submitted by [`Ring::submit_and_wait`].
    backlog: VecDeque<squeue::Entry>,
    /// Operations queued whose final completion has not been seen (a multishot one counts once).
    pub inflight: usize,
}

impl Ring {
    pub fn new(ring: IoUring) -> Self {
        Ring {
            ring,
            backlog: VecDeque::new(),
            inflight: 0,
        }
    }

    /// Queues an SQE: into the submission queue, or behind it if it is full.
    ///
    /// # Safety
    /// Every buffer or timespec `entry` points at must stay valid, and not be written by us, until the
    /// operation completes (a timespec: until the SQE has been submitted, when the kernel copies it).
    pub unsafe fn push(&mut self, entry: squeue::Entry) {
        self.inflight += 1;
        if !self.backlog.is_empty() {
            self.backlog.push_back(entry);
            return;
        }
        // SAFETY: the caller vouches for the memory `entry` points at (see above).
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.backlog.push_back(entry);
        }
    }

    /// Moves the backlog into the submission queue, submitting as it fills. Stops early (leaving the
    /// rest for the next call) if the kernel says its completion queue is full: reap first.
    fn flush_backlog(&mut self) -> io::Result<()> {
        while let Some(entry) = self.backlog.pop_front() {
            // SAFETY: the entry's memory was vouched for when it was pushed into the backlog.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                continue;
            }
            self.backlog.push_front(entry);
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Submits everything queued and waits for at least one completion. EINTR and EBUSY (completion
    /// queue full: reap first) are not errors.
    pub fn submit_and_wait(&mut self) -> io::Result<()> {
        self.flush_backlog()?;
        match self.ring.submit_and_wait(1) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Submits everything queued and waits for a completion, but no longer than `wait` (the earliest
    /// of the worker's deadlines; zero when there is work already). EINTR, EBUSY and ETIME (the wait is
    /// over) are not errors.
    pub fn submit_and_wait_at_most(&mut self, wait: Option<std::time::Duration>) -> io::Result<()> {
        let Some(wait) = wait else {
            return self.submit_and_wait();
        };
        self.flush_backlog()?;
        let ts = types::Timespec::from(wait);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EBUSY | libc::ETIME)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Submits everything queued and waits up to `wait` for a completion (at exit).
    pub fn submit_and_wait_for(&mut self, wait: std::time::Duration) {
        let _ = self.flush_backlog();
        let _ = self.ring.submitter().submit_with_args(
            1,
            &types::SubmitArgs::new().timespec(&types::Timespec::from(wait)),
        );
    }
}
