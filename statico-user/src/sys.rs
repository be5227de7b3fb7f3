//! Facts about the machine and process limits that more than one module needs, each asked in one place.

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
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, i64 on FreeBSD
    let limit = lim.rlim_cur as u64;
    limit
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

/// Gives memory freed by a large build (the static site's read and compression buffers) back to the
/// kernel, so RSS is what is kept rather than what was once used (glibc keeps freed heap otherwise).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
