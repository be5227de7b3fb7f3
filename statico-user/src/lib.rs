//! statico: answers HTTP requests with pre-built responses, as fast as the machine allows.
//!
//! The crate is laid out along the path a request's bytes take, each folder one layer, each module
//! opening with what it is and why:
//!
//! ```text
//! socket ─► runtime ─► conn (layer: [tls] ─► connection) ─► proto (http1 · h2 · h3) ─► catalog ─► answer
//! ```
//!
//! - [`runtime`]: the workers' I/O loops (tokio, io_uring): they move bytes and nothing else;
//! - [`conn`]: one connection's policy (kept input, backpressure, deadlines, pacing, closing), its
//!   output queue, and the TLS record layer;
//! - [`proto`]: protocol detection, HTTP/1.1 (parser, session), HTTP/2, HTTP/3;
//! - [`catalog`]: "what do I send for this request?", asked by every protocol: the single pre-built
//!   response and the static site are its kinds;
//! - [`kernel`]: steering connections to workers (the ladder, the BPF programs), platform facts;
//! - [`observe`]: counters, the meter, the metrics page, the `-v` dump.
//!
//! Start-up reads top-down: [`cli`] parses and checks the flags, [`config`] turns them into a plan
//! with one part per component, [`server`] starts the components in order and stops them, [`check`]
//! is `--check`'s advice, [`control`] the `--admin` API that changes a running server, [`side`] the
//! small server of the side ports (`--metrics`, `--admin`),
//! [`shutdown`] the signals and draining. Imports point down that path: nothing
//! in a layer imports a layer above it.
//!
//! Public are only the modules something outside the crate uses: [`cli`] and [`server`] (the
//! binary), and the layers the fuzz targets drive ([`catalog`], [`conn`], [`observe`], [`proto`]);
//! the rest is `pub(crate)`, so the compiler reports what nothing uses.

pub mod catalog;
pub(crate) mod check;
pub mod cli;
pub(crate) mod config;
pub mod conn;
pub(crate) mod control;
pub(crate) mod kernel;
pub mod observe;
pub mod proto;
pub(crate) mod runtime;
pub mod server;
pub(crate) mod shutdown;
pub(crate) mod side;
