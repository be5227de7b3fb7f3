//! Runtimes: how bytes move between sockets and the [`Session`](crate::session::Session).
//!
//! A runtime runs one worker on its own thread, pinned to one CPU, and serves the connections its
//! listener accepts. Everything it needs is in [`WorkerSetup`]; what it does with HTTP is decided by the
//! shared `session` module, so runtimes differ only in the I/O they perform.

pub mod tokio;
#[cfg(target_os = "linux")]
pub mod uring;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use crate::http::Limits;
use crate::meter::Counters;
use crate::response::Response;
use crate::shutdown;

/// Settings every worker shares, fixed at start-up.
#[derive(Debug)]
pub struct Settings {
    pub response: Response,
    pub limits: Limits,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub delay: Option<Duration>,
    pub body_delay: Option<Duration>,
    pub verbose: u8,
    /// `--http2` (tokio runtime only): h2c settings and the response for HTTP/2 streams.
    pub h2: Option<(crate::h2c::H2Settings, crate::h2c::H2Response)>,
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
