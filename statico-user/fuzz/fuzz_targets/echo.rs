//! Fuzz target `echo`: Fortio query strings (`--echo-query`) against `--max-delay 10s --max-size 16m`.
//! Oracle: never a panic, refusals one line, nothing accepted beyond the limits, one well-formed head.
//! See `oracle/echo.rs` (shared with the corpus replay, `tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../oracle/echo.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
