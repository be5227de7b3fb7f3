//! Builds statico's BPF programs (`../statico-ebpf`) for `bpfel-unknown-none` with the nightly
//! toolchain and `bpf-linker` (both installed by `cargo xtask setup`), so the binary can embed them.
//!
//! If they cannot be built (no nightly, no bpf-linker, not Linux) the binary is built without them and
//! says so at start-up when the `ebpf` steering rung is asked for: a build never fails for lack of BPF
//! tooling, and a running statico never pretends to have it. `STATICO_NO_BPF=1` skips the build.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(statico_bpf)");
    println!("cargo:rerun-if-env-changed=STATICO_NO_BPF");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let ebpf = manifest.join("../statico-ebpf");
    for p in ["src", "Cargo.toml", "Cargo.lock", "../statico-common/src"] {
        println!("cargo:rerun-if-changed={}", ebpf.join(p).display());
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    if env::var_os("STATICO_NO_BPF").is_some_and(|v| v == "1") {
        println!("cargo:warning=STATICO_NO_BPF=1: building statico without its BPF programs");
        return;
    }
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").unwrap_or_default();
    let target = if endian == "big" {
        "bpfeb-unknown-none"
    } else {
        "bpfel-unknown-none"
    };
    // A target directory shared by every profile (check, debug, release), so the BPF object is built
    // once; it is a different directory from the outer build's, so the two cargo locks never meet.
    let target_dir = manifest.join("../target/bpf");
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        "nightly",
        "cargo",
        "build",
        "--release",
        "--locked",
        "-Z",
        "build-std=core",
    ])
    .arg("--manifest-path")
    .arg(ebpf.join("Cargo.toml"))
    .args(["--target", target])
    .arg("--target-dir")
    .arg(&target_dir)
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
    let built = match cmd.output() {
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
    };
    if !built {
        println!("cargo:warning=statico is built without its BPF programs (run `cargo xtask setup` for nightly and bpf-linker); the ebpf steering rung will be unavailable");
        return;
    }
    let object = target_dir.join(target).join("release/statico-ebpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("statico-ebpf.o");
    std::fs::copy(&object, &out).expect("copy the BPF object into OUT_DIR");
    println!("cargo:rustc-cfg=statico_bpf");
}
