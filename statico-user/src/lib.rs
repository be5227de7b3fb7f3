//! statico: answers every HTTP request with one pre-built response, as fast as the machine allows.
//!
//! The crate is split by concern, each module opening with what it is and why:
//! - [`cli`]: the flags, checked while parsing;
//! - [`response`]: the response bytes, encoded once, `Date` patched once a second;
//! - [`http`]: request framing, a pure state machine (fuzzed);
//! - [`session`]: one connection's HTTP exchange: which response, framing, errors;
//! - [`connection`]: one connection's policy, shared by every runtime: kept input, backpressure,
//!   deadlines, pacing, closing;
//! - [`h2c`]: `--http2`, cleartext HTTP/2 with the `h2` crate (tokio runtime);
//! - `quic` (Linux): `--http3`, HTTP/3 over QUIC with quinn and h3, on threads of its own;
//!   `h3_guard` bounds the frames of its request streams before h3 buffers them;
//! - [`layer`], `tls` (Linux): what sits between a socket and its connection — nothing, or rustls;
//! - [`steering`]: how connections reach workers (listeners, the fallback ladder);
//! - `bpf` (Linux): the eBPF steering program, its maps and pins, loaded with aya;
//! - [`runtime`]: the workers' I/O loops (`runtime::tokio` is the hot path);
//! - [`meter`]: per-worker counters and the `-m` report;
//! - [`dump`]: `-v` request/response printing;
//! - [`shutdown`]: SIGINT/SIGTERM (Windows: the console's Ctrl-C, Ctrl-Break, close) and draining;
//! - [`server`]: start-up and shutdown order;
//! - [`sys`]: the kernel version, the open-files limit and the platform-dependent socket options, each
//!   asked in one place.

#[cfg(all(target_os = "linux", statico_bpf))]
pub mod bpf;
pub mod check;
pub mod cli;
pub mod connection;
pub mod dump;
pub mod h2c;
#[cfg(target_os = "linux")]
pub mod h3_guard;
pub mod http;
pub mod layer;
pub mod meter;
pub mod metrics;
pub mod output;
#[cfg(target_os = "linux")]
pub mod quic;
pub mod response;
pub mod runtime;
pub mod server;
pub mod session;
pub mod shutdown;
pub mod site;
pub mod steering;
pub mod sys;
#[cfg(target_os = "linux")]
pub mod tls;
