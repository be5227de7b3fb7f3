//! The protocols: what a connection's bytes mean, and how an answer goes back in each.
//!
//! - [`detect`]: which protocol a cleartext connection speaks (the HTTP/2 preface, an HTTP/1.x first
//!   line, an `Upgrade: h2c` request) — below both HTTP/1.1 and HTTP/2, so neither imports the other;
//! - [`http1`]: the HTTP/1.1 parser (pure, fuzzed) and the session that answers pipelined requests as
//!   bytes;
//! - [`http2`]: HTTP/2 with the `h2` crate (tokio), answers as frames;
//! - `http3` (Linux): HTTP/3 over QUIC with quinn and h3, on threads of its own, with a guard on its
//!   request streams' frames;
//! - [`held`]: how a stream (HTTP/2, HTTP/3) waits where its answer's delivery says — a step's
//!   instant, or a pool's decision — the same for both.
//!
//! Every protocol asks the same [`crate::catalog`] what to send for a request, and writes the answer in
//! its own framing. Nothing here does socket I/O for HTTP/1.1 (the runtime does); HTTP/2 and HTTP/3
//! run on their crates' async I/O.

use std::time::Duration;

/// Most header fields accepted in one request head; more is answered with 431.
pub const MAX_HEADERS: usize = 100;

/// How long a closing connection waits for its client before statico closes it: the lingering read of
/// an HTTP/1.1 connection closed after an error (so unread input does not turn the close into a reset
/// that destroys the answer), and the time HTTP/2 and HTTP/3 give a client after GOAWAY.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub mod detect;
pub mod held;
pub mod http1;
pub mod http2;
#[cfg(target_os = "linux")]
pub mod http3;
