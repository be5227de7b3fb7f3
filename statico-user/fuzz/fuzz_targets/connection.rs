//! Fuzz target `connection`: a connection's state machine (reads, sends, deadlines, holds) against
//! routes, a static site and `--echo-query`, on a fake clock. Oracle: never a panic, the same output
//! and the same end however reads and sends are cut, kept input and output bounded.
//! See `oracle/connection.rs` (shared with the corpus replay, `tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../oracle/connection.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
