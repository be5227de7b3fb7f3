//! Fuzz target `request`: a static site's request fields (path normalisation, Accept-Encoding, Range,
//! If-None-Match, If-Modified-Since, If-Range) on the same bytes. Oracle: never a panic, a normalised
//! path never outside the root. See `oracle/request.rs` (shared with `tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../oracle/request.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
