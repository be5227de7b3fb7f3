//! `cargo xtask fuzz`: the cargo-fuzz targets of `statico-user/fuzz` (the pinned nightly), one or all
//! in turn, each for `--seconds`; new inputs go to `statico-user/fuzz/corpus/NAME`, crashes to
//! `statico-user/fuzz/artifacts/NAME`. See docs/fuzzing.md.
//!
//! The fuzz crate is a workspace of its own (cargo-fuzz builds it with its own flags), so it has its
//! own `Cargo.lock`. That lock is the main workspace's `Cargo.lock` less what the fuzz crate does not
//! use, plus `libfuzzer-sys` and what it needs: `--relock` writes it so, and every run first checks
//! it (`cargo metadata --locked`, which fails where a build would change it, and the versions
//! against the main lock's), so a fuzz build never resolves versions afresh and fuzzes the versions
//! statico ships with.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{cargo, cmd, setup};

/// The targets (`statico-user/fuzz/fuzz_targets/NAME.rs`), in the order `--all` runs them, with the
/// longest input each is given (`-max_len`).
pub const TARGETS: [(&str, usize); 5] = [
    ("http1", 4096),
    ("connection", 4096),
    ("routes", 4096),
    ("echo", 1024),
    ("request", 2048),
];

const FUZZ_DIR: &str = "statico-user/fuzz";

#[derive(clap::Args, Debug, Default)]
pub struct FuzzArgs {
    /// The target to fuzz: http1 (the request parser; it was called parser), connection, routes,
    /// echo or request [default: http1]
    #[arg(long, conflicts_with = "all")]
    pub target: Option<String>,
    /// Fuzz every target in turn, each for --seconds
    #[arg(long)]
    pub all: bool,
    /// How long to fuzz each target, in seconds
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Write statico-user/fuzz/Cargo.lock afresh from the main workspace's Cargo.lock, then stop
    #[arg(long)]
    pub relock: bool,
}

pub fn run(root: &Path, args: FuzzArgs) -> Result<()> {
    let nightly = setup::ensure_nightly()?;
    if args.relock {
        return relock(root, &nightly);
    }
    let targets: Vec<(&str, usize)> = match (&args.target, args.all) {
        (_, true) => TARGETS.to_vec(),
        (None, false) => vec![TARGETS[0]],
        (Some(name), false) => match TARGETS.iter().find(|(t, _)| t == name) {
            Some(&t) => vec![t],
            None => {
                let names: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
                bail!(
                    "no fuzz target {name:?}; the targets are {}",
                    names.join(", ")
                )
            }
        },
    };
    check_lock(root, &nightly)?;
    if Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        cmd(&cargo(), &["install", "cargo-fuzz", "--locked"])?;
    }
    std::env::set_current_dir(root.join("statico-user"))?;
    for (name, max_len) in targets {
        eprintln!("xtask fuzz: {name} for {} s", args.seconds);
        cmd(
            "cargo",
            &[
                &format!("+{nightly}"),
                "fuzz",
                "run",
                name,
                "--",
                &format!("-max_total_time={}", args.seconds),
                &format!("-max_len={max_len}"),
            ],
        )?;
    }
    Ok(())
}

/// Fails, saying how to mend it, if a fuzz build would change `statico-user/fuzz/Cargo.lock` or if
/// it locks a package the main workspace also locks at another version.
fn check_lock(root: &Path, nightly: &str) -> Result<()> {
    const MEND: &str = "run `cargo xtask fuzz --relock` and commit statico-user/fuzz/Cargo.lock";
    let manifest = root.join(FUZZ_DIR).join("Cargo.toml");
    let status = Command::new("cargo")
        .arg(format!("+{nightly}"))
        .args([
            "metadata",
            "--locked",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&manifest)
        .stdout(std::process::Stdio::null())
        .status()
        .context("cannot run cargo metadata")?;
    if !status.success() {
        bail!("statico-user/fuzz/Cargo.lock is stale (a build would change it): {MEND}");
    }
    let differ = lock_differences(root)?;
    if !differ.is_empty() {
        bail!(
            "statico-user/fuzz/Cargo.lock locks other versions than Cargo.lock: {}; {MEND}",
            differ.join(", ")
        );
    }
    Ok(())
}

/// The main workspace's lock, copied, then trimmed and completed by cargo for the fuzz workspace
/// (versions already locked are kept).
fn relock(root: &Path, nightly: &str) -> Result<()> {
    let lock = root.join(FUZZ_DIR).join("Cargo.lock");
    std::fs::copy(root.join("Cargo.lock"), &lock).context("cannot copy Cargo.lock")?;
    let manifest = root.join(FUZZ_DIR).join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    cmd(
        "cargo",
        &[
            &format!("+{nightly}"),
            "metadata",
            "--format-version",
            "1",
            "--manifest-path",
            &manifest,
        ],
    )
    .map(drop)?;
    let differ = lock_differences(root)?;
    if !differ.is_empty() {
        bail!(
            "cargo relocked other versions than Cargo.lock's: {}",
            differ.join(", ")
        );
    }
    eprintln!("xtask fuzz: wrote {}", lock.display());
    Ok(())
}

/// Packages both locks name at different versions, as `name fuzz-version (main: versions)`.
pub fn lock_differences(root: &Path) -> Result<Vec<String>> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .with_context(|| format!("cannot read {}", p.display()))
            .map(|text| lock_versions(&text))
    };
    let main = read(&root.join("Cargo.lock"))?;
    let fuzz = read(&root.join(FUZZ_DIR).join("Cargo.lock"))?;
    Ok(fuzz
        .iter()
        .filter_map(|(name, versions)| {
            let theirs = main.get(name)?;
            (versions != theirs)
                .then(|| format!("{name} {} (main: {})", versions.join("/"), theirs.join("/")))
        })
        .collect())
}

/// Each package of a `Cargo.lock` with its locked versions.
fn lock_versions(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut name = None;
    for line in text.lines() {
        if line == "[[package]]" {
            name = None;
        } else if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_owned());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            out.entry(n)
                .or_default()
                .push(v.trim_matches('"').to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz workspace locks the versions the main workspace does (CI has no nightly to run
    /// `cargo metadata --locked` with; `cargo xtask fuzz` does that too).
    #[test]
    fn fuzz_lock_agrees_with_the_main_lock() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let differ = lock_differences(root).unwrap();
        assert!(
            differ.is_empty(),
            "statico-user/fuzz/Cargo.lock differs from Cargo.lock: {}; run `cargo xtask fuzz --relock`",
            differ.join(", ")
        );
        let fuzz = lock_versions(
            &std::fs::read_to_string(root.join(FUZZ_DIR).join("Cargo.lock")).unwrap(),
        );
        assert!(fuzz.contains_key("statico-user") && fuzz.contains_key("libfuzzer-sys"));
    }
}
