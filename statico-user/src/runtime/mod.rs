//! Runtimes: how bytes move between sockets and the [`Connection`](crate::conn::connection::Connection).
//!
//! A runtime runs one worker on its own thread, pinned to one CPU, and serves the connections its
//! listener accepts. Everything it needs is in [`WorkerSetup`]; every decision about a connection is the
//! shared [`crate::conn`] layer's, and every answer the [`crate::catalog`]'s (each worker holds its own
//! [`crate::catalog::Local`] copy), so runtimes differ only in the I/O they perform. The few things
//! both loops need besides — how to treat a failed accept — live here, once; `start` chooses the
//! runtime and starts the pinned worker threads.

mod gather;
mod start;
#[cfg(target_os = "linux")]
mod tls_stream;
pub mod tokio;
#[cfg(target_os = "linux")]
pub mod uring;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

pub use start::{available, resolve, start_workers, worker_cores, RuntimePlan, Start, Workers};

use crate::conn::connection::Policy;
use crate::observe::meter::Counters;
use crate::shutdown;

/// Which runtime moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// One current-thread tokio runtime per pinned worker.
    Tokio,
    /// One io_uring per pinned worker, driven directly (Linux).
    IoUring,
}

impl RuntimeKind {
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Tokio => "tokio",
            RuntimeKind::IoUring => "io-uring",
        }
    }
}

/// Settings every worker shares, fixed at start-up.
#[derive(Debug)]
pub struct Settings {
    /// What requests are answered with (each worker takes its own [`crate::catalog::Local`] copy).
    pub catalog: Arc<crate::catalog::Catalog>,
    /// Timeouts, pacing and limits of every connection.
    pub policy: Policy,
    pub shutdown_timeout: Duration,
    /// `--http2` (both runtimes).
    pub h2: Option<crate::proto::http2::H2Settings>,
    /// `--tls-*`: every connection speaks TLS.
    pub tls: Option<crate::conn::layer::TlsConfig>,
}

/// Everything one worker owns or shares.
#[derive(Debug)]
pub struct WorkerSetup {
    pub id: usize,
    pub listener: TcpListener,
    pub settings: Arc<Settings>,
    pub counters: Counters,
    pub shutdown: shutdown::Listener,
}

/// How long a worker waits before accepting again after an accept failed for a reason that would fail
/// again at once (out of descriptors, or anything unexpected).
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// When to accept again after a failed accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptRetry {
    /// The connection went away before it was accepted: carry on.
    Now,
    /// Waiting is the only cure: retry after [`ACCEPT_RETRY`].
    Later,
}

/// One worker's accept failures: classifies each, and reports each kind once until an accept succeeds
/// (a persistent failure is one line, not a line per retry).
#[derive(Debug)]
pub struct AcceptErrors {
    worker: usize,
    reported: Option<i32>,
}

impl AcceptErrors {
    pub fn new(worker: usize) -> Self {
        AcceptErrors {
            worker,
            reported: None,
        }
    }

    pub fn succeeded(&mut self) {
        self.reported = None;
    }

    /// An accept failed with `e`: a peer that vanished or a signal is retried at once on every
    /// platform (by kind: Windows reports its own codes, not errno's); the rest as [`Self::failed`].
    pub fn failed_io(&mut self, e: &std::io::Error) -> AcceptRetry {
        use std::io::ErrorKind::*;
        if matches!(
            e.kind(),
            ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
        ) {
            return AcceptRetry::Now;
        }
        self.failed(e.raw_os_error().unwrap_or(0))
    }

    /// An accept failed with `errno`: says when to retry, and reports it if it is new.
    pub fn failed(&mut self, errno: i32) -> AcceptRetry {
        if [libc::ECONNABORTED, libc::EINTR, libc::EAGAIN, libc::EPROTO].contains(&errno) {
            return AcceptRetry::Now;
        }
        if self.reported != Some(errno) {
            self.reported = Some(errno);
            let error = std::io::Error::from_raw_os_error(errno);
            let fix = if [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM].contains(&errno)
            {
                "raise the fd limit (ulimit -n) or lower the load; "
            } else {
                ""
            };
            eprintln!(
                "statico: worker {}: accept failed: {error}; {fix}retrying every {} ms",
                self.worker,
                ACCEPT_RETRY.as_millis()
            );
        }
        AcceptRetry::Later
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors_retry_at_once_only_for_a_vanished_peer() {
        let mut e = AcceptErrors::new(0);
        assert_eq!(e.failed(libc::ECONNABORTED), AcceptRetry::Now);
        assert_eq!(e.failed(libc::EMFILE), AcceptRetry::Later);
        assert_eq!(e.reported, Some(libc::EMFILE));
        assert_eq!(e.failed(libc::EINVAL), AcceptRetry::Later);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(e.failed_io(&reset), AcceptRetry::Now);
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert_eq!(e.failed_io(&emfile), AcceptRetry::Later);
        e.succeeded();
        assert_eq!(e.reported, None);
    }
}
