//! One connection, apart from its socket: the layer between a runtime's bytes and HTTP.
//!
//! A runtime hands received bytes here and sends what comes back; everything decided per connection
//! lives in this folder, once for every runtime:
//! - [`connection`]: the connection's policy — kept input, backpressure, deadlines, pacing, closing —
//!   and the switch to HTTP/2;
//! - [`output`]: what waits to be sent, own bytes and shared bodies in order;
//! - [`layer`]: what sits between the socket and the connection: nothing, or TLS; the TLS set-up and
//!   its SIGHUP reload, on every build;
//! - `tls` (Linux): the TLS record layer (rustls) and its configuration.
//!
//! Below it: [`crate::proto`] (what the bytes mean) and [`crate::catalog`] (what to answer). Above it:
//! [`crate::runtime`], the only place that does I/O.

pub mod connection;
pub mod layer;
pub mod output;
#[cfg(target_os = "linux")]
pub mod tls;
