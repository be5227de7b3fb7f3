//! Fuzz target `routes`: `--route`, `--phase`, `--pool` flags and routes TOML (`--routes FILE`, `PUT /routes`),
//! parsed and built. Oracle: never a panic, every refusal one line, flags read back through their TOML.
//! See `oracle/routes.rs` (shared with the corpus replay, `tests/fuzz_corpus.rs`).
#![no_main]

#[path = "../oracle/routes.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
