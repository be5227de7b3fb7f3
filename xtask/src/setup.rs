//! `cargo xtask setup`: installs what a fresh machine lacks, and nothing twice.
//!
//! - Debian packages: `curl` and `openssl` (end-to-end tests), `wrk` (benchmarks), `nginx-light` (the benchmark peer),
//!   `bpftool` (reads the pinned BPF maps in the steering tests), `nghttp2-client` (nghttp in the
//!   HTTP/2 tests, h2load in `bench --http2`), `linux-perf` (`bench --profile`), `testssl.sh` (the
//!   HTTPS audit in the TLS tests), `prometheus` (scrapes `--metrics` in a test), `python3.11-doc` and `libnginx-mod-http-brotli-static` (the
//!   corpus and nginx's precompressed-file module for `bench --site`).
//! - The nightly toolchain with `rust-src` (BPF programs and the fuzzer build with nightly).
//! - `bpf-linker` 0.10.0 (links BPF objects; 0.11+ needs a system libLLVM and fails here).
//! - The `x86_64-unknown-freebsd` standard library, to check that statico builds off Linux.
//! - h2spec, with `go install` (the HTTP/2 conformance suite of the `--http2` tests).
//!
//! Every step first checks whether its tool is already there, so running setup again is quick.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

use crate::cmd;

/// (program to look for, or an absolute path, Debian package that provides it)
const PACKAGES: [(&str, &str); 14] = [
    ("curl", "curl"),
    ("openssl", "openssl"),
    ("wrk", "wrk"),
    ("nginx", "nginx-light"),
    ("bpftool", "bpftool"),
    ("nghttp", "nghttp2-client"),
    ("h2load", "nghttp2-client"),
    ("kill", "procps"),
    ("perf", "linux-perf"),
    ("testssl", "testssl.sh"),
    ("prometheus", "prometheus"),
    ("systemd-analyze", "systemd"),
    // `bench --site`: the corpus, and nginx's brotli_static for the peer.
    (
        "/usr/share/doc/python3.11/html/index.html",
        "python3.11-doc",
    ),
    (
        "/usr/lib/nginx/modules/ngx_http_brotli_static_module.so",
        "libnginx-mod-http-brotli-static",
    ),
];
const BPF_LINKER_VERSION: &str = "0.10.0";
/// A non-Linux target `cargo xtask test` checks statico against (the shared-listener fallback, no aya).
pub const NON_LINUX_TARGET: &str = "x86_64-unknown-freebsd";

/// h2spec (the HTTP/2 conformance suite the `--http2` tests run), from the Go module proxy.
fn ensure_h2spec() -> Result<()> {
    if h2spec_path().is_some() {
        return Ok(());
    }
    if !on_path("go") {
        bail!("h2spec is missing and there is no Go toolchain to build it: install Go, then run `cargo xtask setup` again");
    }
    cmd(
        "go",
        &[
            "install",
            "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible",
        ],
    )
}

/// Where `go install` puts h2spec (GOBIN, else ~/go/bin), or PATH.
pub fn h2spec_path() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    std::env::var_os("GOBIN")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(home.map(|h| h.join("go/bin")))
        .map(|d| d.join("h2spec"))
        .find(|p| p.is_file())
        .or_else(|| which("h2spec"))
}

/// cargo-deb, which `cargo xtask package` (and the test stage that checks the package) uses.
fn ensure_cargo_deb() -> Result<()> {
    let version = Command::new("cargo").args(["deb", "--version"]).output();
    if matches!(&version, Ok(o) if o.status.success()) {
        return Ok(());
    }
    cmd(
        "cargo",
        &[
            "install",
            "cargo-deb",
            "--locked",
            "--version",
            crate::package::CARGO_DEB_VERSION,
        ],
    )
}

/// The standard library of `target` for the stable toolchain, through rustup.
fn ensure_target(target: &str) -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    if matches!(&installed, Ok(o) if String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == target))
    {
        return Ok(());
    }
    cmd("rustup", &["target", "add", target])
}

/// Installs what is missing. `report` prints a line for what is already there too.
pub fn run(report: bool) -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(program, _)| {
            if program.starts_with('/') {
                !std::path::Path::new(program).exists()
            } else {
                !on_path(program)
            }
        })
        .map(|(_, package)| *package)
        .fold(Vec::new(), |mut v, p| {
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    if missing.is_empty() {
        if report {
            eprintln!("setup: curl, openssl, wrk, nginx (with brotli_static), bpftool, nghttp, h2load, perf, testssl, prometheus and the Python docs are installed");
        }
    } else {
        install_debian(&missing)?;
    }
    ensure_nightly()?;
    if bpf_linker_version().as_deref() == Some(BPF_LINKER_VERSION) {
        if report {
            eprintln!("setup: bpf-linker {BPF_LINKER_VERSION} is installed");
        }
    } else {
        cmd(
            "cargo",
            &[
                "+nightly",
                "install",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--locked",
                "--force",
            ],
        )?;
    }
    ensure_target(NON_LINUX_TARGET)?;
    ensure_h2spec()?;
    ensure_cargo_deb()?;
    if report {
        eprintln!("setup: done");
    }
    Ok(())
}

/// The nightly toolchain with `rust-src`, through rustup.
pub fn ensure_nightly() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["component", "list", "--toolchain", "nightly", "--installed"])
        .output();
    let has_src = matches!(&installed, Ok(o) if o.status.success()
        && String::from_utf8_lossy(&o.stdout).lines().any(|l| l.starts_with("rust-src")));
    if has_src {
        return Ok(());
    }
    if installed.is_err() {
        bail!("rustup is not installed; install it from your distribution or rustup.rs, then run `cargo xtask setup` again");
    }
    cmd(
        "rustup",
        &[
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
            "--component",
            "rust-src",
        ],
    )
}

fn bpf_linker_version() -> Option<String> {
    let out = Command::new("bpf-linker").arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(1).map(str::to_string)
}

/// Looks in PATH and in the sbin directories, where Debian puts nginx.
pub fn on_path(program: &str) -> bool {
    which(program).is_some()
}

/// Full path of a program found by [`on_path`].
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(Into::into))
        .map(|dir| Path::new(&dir).join(program))
        .find(|p| p.is_file())
}

fn install_debian(packages: &[&str]) -> Result<()> {
    if !on_path("apt-get") {
        bail!(
            "missing tools and no apt-get to install them: install the packages {} with your package manager, then run `cargo xtask setup` again",
            packages.join(", ")
        );
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let sudo: &[&str] = if root { &[] } else { &["sudo"] };
    let run = |args: &[&str]| -> Result<()> {
        let full: Vec<&str> = sudo.iter().chain(args).copied().collect();
        cmd(full[0], &full[1..])
    };
    std::env::set_var("DEBIAN_FRONTEND", "noninteractive");
    run(&["apt-get", "update", "-qq"])?;
    let mut args = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    args.extend_from_slice(packages);
    run(&args)
}
