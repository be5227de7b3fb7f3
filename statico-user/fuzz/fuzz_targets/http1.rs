//! Fuzz target `http1`: bytes as an HTTP/1.1 connection reads them (heads, chunked and
//! `Content-Length` bodies, pipelined requests), through the request parser. Oracle: never a panic,
//! nothing kept beyond the head limit, the same events however the bytes are split.
//! See `oracle/http1.rs` (shared with the corpus replay, `tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../oracle/http1.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
