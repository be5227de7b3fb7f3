//! Replays the parser fuzz corpus (`fuzz/corpus/parser`) as an ordinary test, on stable Rust, so every
//! input the fuzzer ever kept — and every crash it found, once added there — is checked on each run.

use std::path::Path;

#[test]
fn parser_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parser");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("the fuzz corpus directory exists") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| statico::proto::http1::parser::fuzz_one(&data));
        assert!(
            outcome.is_ok(),
            "corpus input {} fails the parser invariants",
            path.display()
        );
        count += 1;
    }
    assert!(
        count >= 10,
        "expected the seed corpus, found {count} inputs"
    );
}
