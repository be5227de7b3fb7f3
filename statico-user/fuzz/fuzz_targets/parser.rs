//! Fuzz target for the request parser: arbitrary bytes, fed whole and in pieces, must never panic, never
//! make the caller keep more than the head limit, and must give the same events however they are split.
//! Run with `cargo xtask fuzz` (nightly, cargo-fuzz); the corpus is replayed by `cargo test` on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    statico::proto::http1::parser::fuzz_one(data);
});
