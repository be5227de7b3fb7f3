//! HTTP/1.1: the request framing parser ([`parser`], a pure state machine, fuzzed) and one connection's
//! exchange ([`session`]: pipelined requests in, the catalog's answers out as bytes, in one write).

pub mod parser;
pub mod session;
