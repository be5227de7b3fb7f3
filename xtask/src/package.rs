//! `cargo xtask package`: the Debian package of statico (cargo-deb): the release binary with its BPF
//! programs, the man page and bash/zsh/fish completions generated from the clap definition
//! (`statico --generate-docs`), the systemd units and the arguments file from `deploy/` (the latter a
//! conffile). The asset list is `[package.metadata.deb]` in `statico-user/Cargo.toml`.
//!
//! `cargo xtask test` builds it and checks its contents ([`check`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The cargo-deb release `setup` installs (it builds with the pinned stable toolchain).
pub const CARGO_DEB_VERSION: &str = "3.8.0";

/// Where the generated documents and the `.deb` go.
const OUT: &str = "target/package";

/// What the package must hold (as `dpkg-deb -c` lists it).
const CONTENTS: [&str; 8] = [
    "./usr/bin/statico",
    "./lib/systemd/system/statico.service",
    "./lib/systemd/system/statico@.service",
    "./etc/default/statico",
    "./usr/share/man/man1/statico.1.gz",
    "./usr/share/bash-completion/completions/statico",
    "./usr/share/zsh/vendor-completions/_statico",
    "./usr/share/fish/vendor_completions.d/statico.fish",
];

/// Builds the `.deb` from the release binary already built; returns its path.
pub fn build(root: &Path) -> Result<PathBuf> {
    let out = root.join(OUT);
    let status = Command::new(root.join("target/release/statico"))
        .arg("--generate-docs")
        .arg(out.join("docs"))
        .status()
        .context("run target/release/statico --generate-docs")?;
    if !status.success() {
        bail!("statico --generate-docs failed");
    }
    let deb = Command::new("cargo")
        .args([
            "deb",
            "-p",
            "statico-user",
            "--no-build",
            "--no-strip",
            "-o",
        ])
        .arg(&out)
        .output()
        .context("run cargo deb (cargo xtask setup installs cargo-deb)")?;
    if !deb.status.success() {
        bail!("cargo deb failed: {}", String::from_utf8_lossy(&deb.stderr));
    }
    let path = String::from_utf8_lossy(&deb.stdout)
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok(PathBuf::from(path))
}

/// The package holds every file of [`CONTENTS`], names itself `statico`, and its binary runs.
pub fn check(deb: &Path) -> Result<()> {
    let listing = dpkg_deb(&["-c"], deb)?;
    for file in CONTENTS {
        if !listing.lines().any(|l| l.ends_with(file)) {
            bail!("{} lacks {file}:\n{listing}", deb.display());
        }
    }
    let info = dpkg_deb(&["-I"], deb)?;
    if !info.contains("Package: statico") || !info.contains("conffiles") {
        bail!("{}: unexpected control data:\n{info}", deb.display());
    }
    let scratch = std::env::temp_dir().join(format!("statico-deb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(&scratch)
        .status()?;
    if !status.success() {
        bail!("dpkg-deb -x {} failed", deb.display());
    }
    let version = Command::new(scratch.join("usr/bin/statico"))
        .arg("--version")
        .output()?;
    let _ = std::fs::remove_dir_all(&scratch);
    if !String::from_utf8_lossy(&version.stdout).starts_with("statico ") {
        bail!("the packaged binary does not run: {version:?}");
    }
    Ok(())
}

fn dpkg_deb(args: &[&str], deb: &Path) -> Result<String> {
    let out = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .context("run dpkg-deb")?;
    if !out.status.success() {
        bail!(
            "dpkg-deb {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
