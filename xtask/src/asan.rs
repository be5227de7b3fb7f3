//! `cargo xtask test --asan`: the end-to-end suite, on both runtimes, against a statico built with
//! AddressSanitizer — the pinned nightly with `-Zsanitizer=address`, into `target/asan/` so the
//! release build is left alone. The io_uring runtime's `unsafe` over kernel-shared buffers, the BPF
//! maps and the TLS and QUIC layers all run under it.
//!
//! A sanitizer report does not always fail the test that provoked it (a server that dies mid-test may
//! look like a refused connection), so every statico writes its reports to `target/asan/reports/`
//! (`ASAN_OPTIONS=log_path`) and the run passes only when the suite passes *and* that directory holds
//! no report. Leaks of the process's intentional statics may be suppressed by name in
//! `deploy/asan/lsan.supp` (each with why).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::{cargo, cmd, setup};

/// The target triple the sanitizer is built for (it needs an explicit `--target`).
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Builds statico with AddressSanitizer and runs the end-to-end suite against it on both runtimes.
pub fn run(root: &Path) -> Result<()> {
    let nightly = setup::ensure_nightly()?;
    let binary = build(&nightly)?;
    let reports = root.join("target/asan/reports");
    let _ = std::fs::remove_dir_all(&reports);
    std::fs::create_dir_all(&reports)?;
    let options = format!(
        "log_path={}/statico:detect_leaks=1:halt_on_error=1",
        reports.display()
    );
    let suppressions = root.join("deploy/asan/lsan.supp");
    std::env::set_var("ASAN_OPTIONS", &options);
    std::env::set_var(
        "LSAN_OPTIONS",
        format!(
            "suppressions={}:print_suppressions=0",
            suppressions.display()
        ),
    );
    std::env::set_var("STATICO_BIN", &binary);
    // The tests then print memory bounds rather than hold them, and wait longer for start-up.
    std::env::set_var("STATICO_ASAN", "1");
    let mut failed = Vec::new();
    for runtime in ["tokio", "io-uring"] {
        eprintln!(
            "xtask test --asan: the end-to-end suite on {runtime}, statico under AddressSanitizer"
        );
        std::env::set_var("STATICO_TEST_RUNTIME", runtime);
        let args = [
            "test",
            "-p",
            "statico-tests",
            "--test",
            "e2e",
            "--",
            "--test-threads",
            "2",
        ];
        if let Err(e) = cmd(&cargo(), &args) {
            failed.push(format!("{runtime}: {e:#}"));
        }
    }
    check_reports(&reports)?;
    if !failed.is_empty() {
        bail!(
            "the suite under AddressSanitizer failed: {}",
            failed.join("; ")
        );
    }
    eprintln!("xtask test --asan: both runtimes passed; no sanitizer report");
    Ok(())
}

/// `target/asan/x86_64-unknown-linux-gnu/release/statico`, built now.
fn build(nightly: &str) -> Result<std::path::PathBuf> {
    std::env::set_var("RUSTFLAGS", "-Zsanitizer=address");
    let toolchain = format!("+{nightly}");
    let result = cmd(
        "cargo",
        &[
            &toolchain,
            "build",
            "--release",
            "-p",
            "statico-user",
            "--bin",
            "statico",
            "--target",
            TRIPLE,
            "--target-dir",
            "target/asan",
        ],
    );
    std::env::remove_var("RUSTFLAGS");
    result.context("building statico with AddressSanitizer")?;
    Ok(std::path::PathBuf::from(format!(
        "target/asan/{TRIPLE}/release/statico"
    )))
}

/// Fails with the first lines of each report, if any statico wrote one.
fn check_reports(dir: &Path) -> Result<()> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let head: Vec<&str> = text.lines().filter(|l| !l.is_empty()).take(12).collect();
        found.push(format!("{}:\n{}", entry.path().display(), head.join("\n")));
    }
    match found.is_empty() {
        true => Ok(()),
        false => bail!(
            "{} AddressSanitizer report(s) (kept in {}):\n{}",
            found.len(),
            dir.display(),
            found.join("\n\n")
        ),
    }
}
