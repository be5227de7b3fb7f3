//! Builds statico's BPF programs (`../statico-ebpf`) for `bpfel-unknown-none` with the pinned nightly
//! toolchain (the `channel` of `../statico-ebpf/rust-toolchain.toml`) and `bpf-linker` (both installed
//! by `cargo xtask setup`), so the binary can embed them.
//!
//! If they cannot be built (no pinned nightly, no bpf-linker, not Linux) the binary is built without
//! them and says so at start-up when the `ebpf` steering rung is asked for: a build never fails for
//! lack of BPF tooling, and a running statico never pretends to have it. `STATICO_NO_BPF=1` skips the
//! build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const WITHOUT_BPF: &str =
    "statico is built without its BPF programs; the ebpf steering rung will be unavailable";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(statico_bpf)");
    println!("cargo:rerun-if-env-changed=STATICO_NO_BPF");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let ebpf = manifest.join("../statico-ebpf");
    for p in [
        "src",
        "Cargo.toml",
        "Cargo.lock",
        "rust-toolchain.toml",
        "../statico-common/src",
    ] {
        println!("cargo:rerun-if-changed={}", ebpf.join(p).display());
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    if env::var_os("STATICO_NO_BPF").is_some_and(|v| v == "1") {
        println!("cargo:warning=STATICO_NO_BPF=1: building statico without its BPF programs");
        return;
    }
    let Some(nightly) = pinned_nightly(&ebpf.join("rust-toolchain.toml")) else {
        println!("cargo:warning=BPF build: no `channel = \"nightly-…\"` in statico-ebpf/rust-toolchain.toml");
        println!("cargo:warning={WITHOUT_BPF}");
        return;
    };
    let target = if env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() == Ok("big") {
        "bpfeb-unknown-none"
    } else {
        "bpfel-unknown-none"
    };
    // A target directory shared by every profile (check, debug, release), so the BPF object is built
    // once; it is a different directory from the outer build's, so the two cargo locks never meet.
    let target_dir = manifest.join("../target/bpf");
    if !run(bpf_build(&nightly, &ebpf, target, &target_dir)) {
        watch_for_tools(&nightly);
        println!("cargo:warning={WITHOUT_BPF}: run `cargo xtask setup` (it installs {nightly} with rust-src and bpf-linker), then build again with the same command; this build notices them when they arrive, no `cargo clean` needed");
        return;
    }
    let object = target_dir.join(target).join("release/statico-ebpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("statico-ebpf.o");
    std::fs::copy(&object, &out).expect("copy the BPF object into OUT_DIR");
    println!("cargo:rustc-cfg=statico_bpf");
}

/// The toolchain named by `channel = "…"` in the BPF crate's `rust-toolchain.toml`, the one place the
/// nightly's date is written (`cargo xtask setup` and `cargo xtask fuzz` read it too).
fn pinned_nightly(toolchain_file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(toolchain_file).ok()?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .find(|v| v.starts_with("nightly"))
}

/// `cargo build` of the BPF crate with `nightly`, cleared of the outer build's toolchain settings.
fn bpf_build(nightly: &str, ebpf: &Path, target: &str, target_dir: &Path) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", nightly, "cargo", "build", "--release", "--locked"])
        .args(["-Z", "build-std=core", "--target", target])
        .arg("--manifest-path")
        .arg(ebpf.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "-Cdebuginfo=2\x1f-Clink-arg=--btf",
        );
    for var in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTDOC",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// After a build without BPF: re-run this script when the tools it lacked arrive, so that the advice
/// in the warning (set up, then build again) works without a `cargo clean`. Without this, cargo keeps
/// the first result, since nothing in the package changed.
///
/// Cargo re-runs a build script when a watched path changes; for a directory it takes the newest
/// modification time of everything below it, and a directory's own time changes when an entry is
/// added. So this watches the deepest existing directory on the way to the pinned toolchain's
/// `lib/rustlib` (the rustup `toolchains` directory while the toolchain is missing — a toolchain
/// installed, or moved back, adds an entry there; `lib/rustlib` while `rust-src` is missing) and the
/// directory `bpf-linker` is installed into. Only existing paths are watched: cargo treats a missing
/// one as changed on every build, which would recompile statico each time.
fn watch_for_tools(nightly: &str) {
    let home = |var: &str, dot: &str| {
        env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(dot)))
    };
    if let (Some(rustup), Ok(host)) = (home("RUSTUP_HOME", ".rustup"), env::var("HOST")) {
        let toolchains = rustup.join("toolchains");
        let rustlib = toolchains.join(format!("{nightly}-{host}/lib/rustlib"));
        if let Some(dir) = rustlib
            .ancestors()
            .take_while(|p| p.starts_with(&toolchains))
            .find(|p| p.is_dir())
        {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
    }
    let linker_dir = env::var_os("PATH")
        .and_then(|paths| env::split_paths(&paths).find(|d| d.join("bpf-linker").is_file()))
        .or_else(|| home("CARGO_HOME", ".cargo").map(|c| c.join("bin")));
    if let Some(dir) = linker_dir.filter(|d| d.is_dir()) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
}

/// Runs the BPF build; on failure passes its error lines on as warnings.
fn run(mut cmd: Command) -> bool {
    match cmd.output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            for line in err.lines().filter(|l| l.contains("error")).take(8) {
                println!("cargo:warning=BPF build: {line}");
            }
            false
        }
        Err(e) => {
            println!("cargo:warning=BPF build: cannot run rustup: {e}");
            false
        }
    }
}
