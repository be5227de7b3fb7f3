//! End-to-end tests: each starts the real `statico` binary and talks to it with real clients (curl, the
//! `ureq` crate, raw sockets). Run them with `cargo xtask test`, which builds the release binary first.

#[cfg(target_os = "linux")]
mod browser;
mod changes;
mod clients;
mod containers;
mod deploy;
mod errors;
mod grpc;
mod hostile_clients;
mod http11;
mod http2;
mod http2_hostile;
#[cfg(target_os = "linux")]
mod http3;
#[cfg(target_os = "linux")]
mod http3_hostile;
mod metrics;
mod openai;
mod operations;
mod pools;
mod routes;
mod scale;
mod side_ports;
mod site;
mod startup;
mod steering;
mod streams;
mod timeouts;
mod tls;
mod tls_clients;
