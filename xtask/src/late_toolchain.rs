//! `cargo xtask test`'s check that a build made while the BPF toolchain was missing gains the BPF
//! programs when it arrives, with the same build command and no `cargo clean` (see
//! `statico-user/build.rs`, `watch_for_tools`).
//!
//! The absence is faked with a rustup home of the check's own (`RUSTUP_HOME`) whose `toolchains` is
//! empty: the build script's `rustup run <nightly>` then finds no toolchain, as on a machine before
//! `cargo xtask setup`. The outer build runs the real cargo and rustc directly, so only the BPF build
//! sees the fake home. Then the real pinned toolchain is linked into it — what an install (or moving
//! the toolchain back) does to the `toolchains` directory — and the same command runs again: the
//! binary must now carry the programs. It leaves the release binary built with them.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::setup;

/// Runs the check (two release builds of statico-user, about a minute each).
pub fn check(root: &Path) -> Result<()> {
    let nightly = setup::pinned_nightly()?;
    let real_toolchain = toolchain_dir(&nightly)?;
    let fake = root.join("target/late-toolchain/rustup");
    let _ = std::fs::remove_dir_all(&fake);
    std::fs::create_dir_all(fake.join("toolchains"))?;
    let rustc = rustup_which("rustc")?;
    // A first build as on a machine without the toolchain: the build script must run now.
    filetime_touch(&root.join("statico-user/build.rs"))?;
    build(root, &fake, &rustc)?;
    if !built_without_bpf(root)? {
        bail!("late toolchain check: the build without a nightly has BPF programs (the faked absence did not take)");
    }
    let name = real_toolchain
        .file_name()
        .context("toolchain directory name")?;
    std::os::unix::fs::symlink(&real_toolchain, fake.join("toolchains").join(name))?;
    build(root, &fake, &rustc)?;
    if built_without_bpf(root)? {
        bail!("late toolchain check: the toolchain arrived, the same build ran again, and the binary still has no BPF programs (the build script was not re-run)");
    }
    eprintln!("xtask test: late toolchain: a build made without {nightly} gained the BPF programs when it arrived, without a clean");
    Ok(())
}

/// The real directory of an installed toolchain.
fn toolchain_dir(name: &str) -> Result<std::path::PathBuf> {
    let rustc = Command::new("rustup")
        .args(["which", "--toolchain", name, "rustc"])
        .output()?;
    if !rustc.status.success() {
        bail!("{name} is not installed (cargo xtask setup installs it)");
    }
    let rustc = std::path::PathBuf::from(String::from_utf8_lossy(&rustc.stdout).trim());
    Ok(rustc
        .ancestors()
        .nth(2)
        .context("rustc lies in <toolchain>/bin")?
        .to_path_buf())
}

fn rustup_which(tool: &str) -> Result<String> {
    let out = Command::new("rustup").args(["which", tool]).output()?;
    if !out.status.success() {
        bail!("rustup which {tool} failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The release build as a user types it, with the build script seeing `rustup_home`.
fn build(root: &Path, rustup_home: &Path, rustc: &str) -> Result<()> {
    let status = Command::new(crate::cargo())
        .args(crate::RELEASE_BUILD)
        .current_dir(root)
        .env("RUSTUP_HOME", rustup_home)
        .env("RUSTC", rustc)
        .env_remove("RUSTUP_TOOLCHAIN")
        .status()?;
    if !status.success() {
        bail!("late toolchain check: the release build failed ({status})");
    }
    Ok(())
}

/// Whether the release binary says it was built without its BPF programs.
fn built_without_bpf(root: &Path) -> Result<bool> {
    let out = Command::new(root.join("target/release/statico"))
        .args([
            "--check",
            "-a",
            "127.0.0.1",
            "-p",
            "0",
            "--steering",
            "ebpf",
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stderr).contains("built without its BPF programs"))
}

/// Sets a file's modification time to now (as `touch` does).
fn filetime_touch(path: &Path) -> Result<()> {
    let file = std::fs::OpenOptions::new().append(true).open(path)?;
    file.set_modified(std::time::SystemTime::now())?;
    Ok(())
}
