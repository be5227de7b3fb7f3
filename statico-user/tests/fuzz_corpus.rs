//! Replays every fuzz target's corpus (`fuzz/corpus/NAME`) as an ordinary test, on stable Rust, so
//! every input the fuzzer ever kept — and every crash it found, once fixed and added there — is
//! checked on each run. The targets' oracles live in `fuzz/oracle/NAME.rs`, included here as the
//! fuzz targets include them, so the replay asks exactly what the fuzzer asked.

use std::path::Path;

#[path = "../fuzz/oracle/connection.rs"]
mod connection;
#[path = "../fuzz/oracle/echo.rs"]
mod echo;
#[path = "../fuzz/oracle/http1.rs"]
mod http1;
#[path = "../fuzz/oracle/request.rs"]
mod request;
#[path = "../fuzz/oracle/routes.rs"]
mod routes;

/// Runs `check` on each input of `fuzz/corpus/NAME`; fails naming the inputs that fail, or if the
/// corpus has fewer than `at_least` inputs.
fn replay(name: &str, at_least: usize, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(name);
    let mut count = 0;
    let mut failed = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the fuzz corpus directory exists") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(path.display().to_string());
        }
        count += 1;
    }
    assert!(
        failed.is_empty(),
        "{name}: corpus inputs fail the target's oracle: {}",
        failed.join(", ")
    );
    assert!(
        count >= at_least,
        "{name}: expected the seed corpus, found {count} inputs"
    );
}

#[test]
fn http1_corpus_replays_clean() {
    replay("http1", 10, http1::check);
}

#[test]
fn connection_corpus_replays_clean() {
    replay("connection", 10, connection::check);
}

#[test]
fn routes_corpus_replays_clean() {
    replay("routes", 10, routes::check);
}

#[test]
fn echo_corpus_replays_clean() {
    replay("echo", 10, echo::check);
}

#[test]
fn request_corpus_replays_clean() {
    replay("request", 10, request::check);
}
