//! Facts about the machine and process limits that more than one module needs, each asked in one place,
//! and the few calls whose form differs between platforms (Linux, the BSDs and macOS, Windows), each a
//! small function here rather than `cfg` through the code.

use std::io;

use socket2::Socket;

/// (major, minor) of the running Linux kernel, (0, 0) if unknown.
pub fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Raises the soft limit on open files to the hard limit, as a server for thousands of connections
/// needs (Go's runtime does the same); returns the limit in force. The io_uring runtime sizes its
/// table of direct descriptors from it: the kernel refuses a table larger than this limit.
#[cfg(unix)]
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct passed, which lives on this stack frame.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        let ceiling = fd_ceiling(lim.rlim_max);
        if lim.rlim_cur < ceiling {
            let raised = libc::rlimit {
                rlim_cur: ceiling,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = ceiling;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, i64 on FreeBSD
    let limit = lim.rlim_cur as u64;
    limit
}

/// The most descriptor slots [`reserve_fd_table`] makes room for at start-up (about 8 bytes each).
#[cfg(target_os = "linux")]
const MAX_RESERVED_FDS: u64 = 1 << 16;

/// Grows this process's descriptor table to `limit` slots (at most [`MAX_RESERVED_FDS`]) before
/// the workers take connections. The kernel grows the table by doubling as descriptors are taken,
/// and in a process of several threads each doubling waits for an RCU grace period (`expand_files`
/// → `synchronize_rcu`, 10–20 ms on a VM) with the accepting worker stopped inside `accept4`; a
/// burst of 1 000 new connections took five of them, and stream events due meanwhile went tens of
/// milliseconds late. The kernel never shrinks the table, so this is paid once, here.
#[cfg(target_os = "linux")]
pub fn reserve_fd_table(limit: u64) {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let Ok(top) = libc::c_int::try_from(limit.min(MAX_RESERVED_FDS).saturating_sub(1)) else {
        return;
    };
    let Ok(null) = std::fs::File::open("/dev/null") else {
        return;
    };
    // SAFETY: F_DUPFD_CLOEXEC duplicates an open descriptor of ours onto the lowest free number at
    // or above `top`, closing none; the new descriptor is owned below and closed at once.
    let fd = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD_CLOEXEC, top) };
    if fd >= 0 {
        // SAFETY: `fd` was just returned by fcntl: open, and owned by nothing else.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// Elsewhere the table's growth waits for no grace period: nothing to reserve.
#[cfg(not(target_os = "linux"))]
pub fn reserve_fd_table(_: u64) {}

/// The most open files the soft limit can be raised to: the hard limit.
#[cfg(all(unix, not(target_os = "macos")))]
fn fd_ceiling(hard: libc::rlim_t) -> libc::rlim_t {
    hard
}

/// macOS: the hard limit, and at most `kern.maxfilesperproc`: setrlimit refuses more even under an
/// unlimited hard limit (the default), which would leave the soft limit at its default of 256.
#[cfg(target_os = "macos")]
fn fd_ceiling(hard: libc::rlim_t) -> libc::rlim_t {
    const OPEN_MAX: libc::rlim_t = 10240; // <sys/syslimits.h>, if the sysctl cannot be read
    let mut max: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>();
    // SAFETY: the name is NUL-terminated; `max` and `len` are live locals of the size sysctl is told.
    let read = unsafe {
        libc::sysctlbyname(
            c"kern.maxfilesperproc".as_ptr(),
            (&raw mut max).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    let per_process = libc::rlim_t::try_from(max)
        .ok()
        .filter(|&m| read == 0 && m > 0);
    hard.min(per_process.unwrap_or(OPEN_MAX))
}

/// Off Unix (Windows) sockets are handles, with no per-process limit like `RLIMIT_NOFILE` to raise:
/// the limit in force is "no limit" (only io_uring, a Linux runtime, sizes anything from it).
#[cfg(not(unix))]
pub fn raise_fd_limit() -> u64 {
    u64::MAX
}

/// Before a large build of long-lived buffers (the static site): buffers of 64 KiB and more get
/// pages of their own, so the ones freed during the build (duplicates, compressors' scratch) go back
/// to the kernel instead of leaving holes between the kept ones.
pub fn prefer_own_pages_for_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's threshold for future allocations.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
}

/// Asks the kernel to fire this thread's timers when they are due rather than up to 50 µs later
/// (the default timer slack, which lets it batch wake-ups): a held answer's delay is the product.
pub fn exact_timers() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a number and changes only this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Gives memory freed by a large build (the static site's read and compression buffers) back to the
/// kernel, so RSS is what is kept rather than what was once used (glibc keeps freed heap otherwise).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Lets a restarted server listen at once on a port its previous run's connections still hold in
/// TIME_WAIT: SO_REUSEADDR.
#[cfg(unix)]
pub fn allow_quick_rebind(socket: &Socket) -> io::Result<()> {
    socket.set_reuse_address(true)
}

/// Windows allows a quick rebind by default, and there SO_REUSEADDR would let the socket bind a port
/// another socket is listening on: it is left off (as Rust's std and Go do).
#[cfg(not(unix))]
pub fn allow_quick_rebind(_: &Socket) -> io::Result<()> {
    Ok(())
}

/// TCP_DEFER_ACCEPT: the kernel hands a connection to `accept` only once its first bytes have
/// arrived, so that the read after `accept` finds the request instead of waiting for it. A client
/// that sends nothing is handed over after `secs` (the retransmitted SYN-ACK it acknowledges), and
/// from then on the server's own timeouts bound it.
#[cfg(target_os = "linux")]
pub fn defer_accept(socket: &Socket, secs: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let secs = secs as libc::c_int;
    // SAFETY: the descriptor is the socket's, open; the option's value is a local int of the size
    // given.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&secs).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Only Linux defers accepts this way; elsewhere a connection is accepted as it is established.
#[cfg(not(target_os = "linux"))]
pub fn defer_accept(_: &Socket, _: u32) -> io::Result<()> {
    Ok(())
}

/// SO_REUSEPORT: several listeners on one port (asked for only where it balances connections: Linux,
/// see `steering`).
#[cfg(all(
    unix,
    not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))
))]
pub fn set_reuse_port(socket: &Socket) -> io::Result<()> {
    socket.set_reuse_port(true)
}

#[cfg(not(all(
    unix,
    not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))
)))]
pub fn set_reuse_port(_: &Socket) -> io::Result<()> {
    Err(io::Error::other(
        "SO_REUSEPORT is not available on this platform",
    ))
}
