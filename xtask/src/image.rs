//! `cargo xtask image`: the OCI image `statico:VERSION` (podman), from the one Containerfile in
//! `deploy/container/`: the stripped release binary on Debian 12 slim, a non-root user, statico as
//! the entrypoint serving on 8080.
//!
//! Its base, `docker.io/library/debian:bookworm-slim`, is what a user pulls. Where no registry is
//! reachable (as on the machines this project is built on), the base is made here from Debian's own
//! packages with `mmdebstrap` (minbase, merged /usr, without documentation, man pages, locales or
//! apt's lists) and imported under the same name, so that the same Containerfile serves both.
//!
//! Podman runs with `--runtime runc` (crun refuses hybrid cgroup hosts) and with explicit
//! open-files and processes limits ([`ulimits`]): podman's defaults are higher than this host's
//! hard limits, and runc then fails to set them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::cmd;

/// The base image the Containerfile starts from (`ARG BASE`).
pub const BASE: &str = "docker.io/library/debian:bookworm-slim";
/// The one Containerfile, relative to the workspace root.
const CONTAINERFILE: &str = "deploy/container/Containerfile";
/// The build context: the stripped binary, alone.
const CONTEXT: &str = "target/image";

/// The image's name: `statico:VERSION`, the workspace's version.
pub fn tag() -> String {
    format!("statico:{}", env!("CARGO_PKG_VERSION"))
}

/// Builds the image from `binary` (a release statico already built); prints its size and returns its
/// tag.
pub fn build(root: &Path, binary: &Path) -> Result<String> {
    ensure_base()?;
    let context = stage_binary(root, binary)?;
    let tag = tag();
    let mut args = podman_args(&["build"]);
    args.extend(ulimits()?);
    args.extend(
        [
            "--build-arg",
            &format!("VERSION={}", env!("CARGO_PKG_VERSION")),
            "-f",
            &root.join(CONTAINERFILE).to_string_lossy(),
            "-t",
            &tag,
            &context.to_string_lossy(),
        ]
        .map(String::from),
    );
    cmd(
        "podman",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    report_size(&tag)?;
    Ok(tag)
}

/// `podman --runtime runc SUBCOMMAND…`.
fn podman_args(subcommand: &[&str]) -> Vec<String> {
    ["--runtime", "runc"]
        .iter()
        .chain(subcommand)
        .map(|s| s.to_string())
        .collect()
}

/// Most processes (threads) a container may have: statico runs one worker thread per CPU and a few
/// more. (This host refuses a container nproc limit of 65536 even under its hard limit.)
const NPROC: u64 = 4096;

/// `--ulimit nofile=H:H --ulimit nproc=N:N`: this process's hard open-files limit, and [`NPROC`]
/// (or the hard processes limit if lower).
pub fn ulimits() -> Result<Vec<String>> {
    let limits = std::fs::read_to_string("/proc/self/limits").context("read /proc/self/limits")?;
    let hard = |row: &str| hard_limit(&limits, row).with_context(|| format!("no {row} limit"));
    let nofile = hard("Max open files")?;
    let nproc = match hard("Max processes")?.parse::<u64>() {
        Ok(n) => n.min(NPROC),
        Err(_) => NPROC,
    };
    Ok(vec![
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
    ])
}

/// The hard limit of `row` in a `/proc/PID/limits` text (`unlimited` passes as -1).
fn hard_limit(limits: &str, row: &str) -> Option<String> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(row))?;
    let hard = rest.split_whitespace().nth(1)?;
    Some(if hard == "unlimited" { "-1" } else { hard }.to_string())
}

/// The base from a registry if one answers, else made with mmdebstrap; nothing if it is there.
fn ensure_base() -> Result<()> {
    if podman_ok(&["image", "exists", BASE]) {
        return Ok(());
    }
    if podman_ok(&["pull", "--quiet", BASE]) {
        return Ok(());
    }
    eprintln!(
        "image: no registry answers for {BASE}; making it from Debian's packages (mmdebstrap)"
    );
    debootstrap_base()
}

/// Whether `podman ARGS` succeeds (its output discarded).
fn podman_ok(args: &[&str]) -> bool {
    Command::new("podman")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What mmdebstrap leaves out, as Debian's docker images do (copyright files stay).
const DPKG_EXCLUDES: [&str; 5] = [
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
];

/// `mmdebstrap --variant=minbase bookworm - | podman import - BASE`, from the configured mirror.
fn debootstrap_base() -> Result<()> {
    let mut strap = Command::new("mmdebstrap");
    // Merged /usr as Debian's images have it, by mmdebstrap's hook rather than the usrmerge
    // package (which would bring perl, ~45 MB, into the base).
    strap.args([
        "--variant=minbase",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    ]);
    for exclude in DPKG_EXCLUDES {
        strap.arg(format!("--dpkgopt={exclude}"));
    }
    strap.arg("--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*");
    strap.args(["bookworm", "-"]).stdout(Stdio::piped());
    let mut strap = strap
        .spawn()
        .context("run mmdebstrap (cargo xtask setup installs it)")?;
    let tar = strap.stdout.take().expect("piped");
    let import = Command::new("podman")
        .args(["import", "--change", "CMD [\"bash\"]", "-", BASE])
        .stdin(tar)
        .stdout(Stdio::null())
        .status()
        .context("run podman import")?;
    let strapped = strap.wait()?;
    if !strapped.success() || !import.success() {
        bail!("making {BASE} failed (mmdebstrap: {strapped}, podman import: {import})");
    }
    Ok(())
}

/// Copies `binary`, stripped, into the build context; returns the context.
fn stage_binary(root: &Path, binary: &Path) -> Result<PathBuf> {
    let context = root.join(CONTEXT);
    std::fs::create_dir_all(&context)?;
    let out = context.join("statico");
    let _ = std::fs::remove_file(&out);
    cmd(
        "strip",
        &["-o", &out.to_string_lossy(), &binary.to_string_lossy()],
    )?;
    Ok(context)
}

/// Prints the image's size and what it adds to its base.
fn report_size(tag: &str) -> Result<()> {
    let (image, base) = (image_size(tag)?, image_size(BASE)?);
    eprintln!(
        "image: {tag}: {:.1} MB, {:.1} MB over {BASE} ({:.1} MB)",
        mb(image),
        mb(image.saturating_sub(base)),
        mb(base)
    );
    Ok(())
}

fn image_size(image: &str) -> Result<u64> {
    let out = Command::new("podman")
        .args(["image", "inspect", "--format", "{{.Size}}", image])
        .output()
        .context("run podman image inspect")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .with_context(|| format!("no size for {image}"))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_limits_come_from_the_limits_table() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             96365                96365                processes \n\
                      Max open files            1024                 20000                files     \n\
                      Max locked memory         8388608              unlimited            bytes     \n";
        assert_eq!(
            hard_limit(limits, "Max open files").as_deref(),
            Some("20000")
        );
        assert_eq!(
            hard_limit(limits, "Max processes").as_deref(),
            Some("96365")
        );
        assert_eq!(
            hard_limit(limits, "Max locked memory").as_deref(),
            Some("-1")
        );
    }
}
