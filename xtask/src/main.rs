//! `cargo xtask`: the project's tasks, so that a new machine needs two commands (README).
//!
//! - `setup`: installs what a fresh machine lacks, idempotently: Debian packages used by tests and
//!   benchmarks (curl, wrk, nginx, caddy), oha with HTTP/3 (`bench --http3`), Fortio (`bench --routes`),
//!   go-httpbin (`bench --stream`), FastAPI and uvicorn (`bench --openai`), the pinned nightly toolchain with `rust-src` (the `channel` of `statico-ebpf/rust-toolchain.toml`), `bpf-linker`
//!   0.10.0, and the non-Linux targets' std.
//! - `build`: release build of the `statico` binary (after installing what building needs: the pinned
//!   nightly with `rust-src` and `bpf-linker`, nothing else).
//! - `run -- ARGS`: builds and runs statico with ARGS (replacing this process, so signals reach it);
//!   installs only what building needs, so a first run on a fresh machine waits for no test tool.
//! - `test`: fmt check, clippy `-D warnings` (for Linux and for each of `setup::NON_LINUX_TARGETS`), unit
//!   tests (among them `doclinks`: every link of the README and the manual in `docs/` resolves),
//!   end-to-end tests against the release binary.
//! - `package`: the Debian package (see `package.rs`).
//! - `image`: the OCI image `statico:VERSION` with podman (see `image.rs`), its base made locally
//!   with mmdebstrap where no registry answers; with `STATICO_BIN` set, of that statico (nothing built).
//! - `bench`: statico against nginx, pinned, measured in one run (see `bench/`); with `STATICO_BIN`
//!   set, that statico is measured and nothing is built; with `--against B`, that statico (A) against
//!   the statico binary B, an A/B on both runtimes.
//! - `soak --minutes N`: one statico under every kind of client, faults, SIGHUP and routes swaps for
//!   N minutes; fails unless memory and descriptors stay flat, every client error was injected and
//!   the drain exits 0 (see `soak.rs`).
//! - `fuzz`: runs a fuzz target (`--target NAME`, default `http1`, the request parser) or all in
//!   turn (`--all`) for a while (the pinned nightly, cargo-fuzz; see `fuzz.rs`), its `Cargo.lock`
//!   checked first.
//!
//! Each task installs what it uses and is missing first (`setup::Purpose`): `run`/`build` the build
//! toolchains, `bench` its peers and clients, `package` cargo-deb, `image` podman, runc and mmdebstrap, `test` everything (it runs the smoke
//! benches and the package stage too).

#[cfg(target_os = "linux")]
mod asan;
mod bench;
#[cfg(test)]
mod doclinks;
mod fuzz;
mod image;
#[cfg(target_os = "linux")]
mod late_toolchain;
mod package;
mod setup;
#[cfg(target_os = "linux")]
mod soak;
mod tools;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use setup::Purpose;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "statico's project tasks")]
struct Args {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything a fresh machine lacks (idempotent)
    Setup,
    /// Build the release binary (target/release/statico)
    Build,
    /// Build and run statico: `cargo xtask run -- -p 8080 -b 'Hello'`
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// fmt check, clippy -D warnings, unit tests, end-to-end tests
    Test {
        /// Instead: the end-to-end suite on both runtimes against statico built with
        /// AddressSanitizer (the pinned nightly); fails on any sanitizer report
        #[arg(long)]
        asan: bool,
    },
    /// Build the Debian package (target/package/statico_*.deb): binary, man page, completions, units
    Package,
    /// Build the OCI image statico:VERSION (podman; the stripped binary on Debian 12 slim)
    Image,
    /// Benchmark statico against nginx on this machine, in one run
    Bench(bench::BenchArgs),
    /// Soak: one statico with TLS, h2, h3, a site and faulty routes under every kind of client,
    /// SIGHUP and routes swaps, for N minutes; passes if memory and descriptors stay flat, every
    /// client error was injected, and the drain exits 0 (see xtask/src/soak.rs)
    #[cfg(target_os = "linux")]
    Soak(soak::SoakArgs),
    /// Fuzz a target (http1, connection, routes, echo, request), or --all in turn (the pinned nightly; installs cargo-fuzz)
    Fuzz(fuzz::FuzzArgs),
}

/// Runs the task. A failure ends in one line (the error and its causes), without the backtrace
/// `RUST_BACKTRACE` adds to an error returned from `main`: what failed above it, a test's message
/// say, stays at the end of the output, where a CI log's tail shows it.
fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match args.task {
        Task::Setup => setup::run(true),
        Task::Build => {
            setup::ensure(&[Purpose::Build], false)?;
            build_release()
        }
        Task::Run { args } => {
            setup::ensure(&[Purpose::Build], false)?;
            build_release()?;
            exec(root.join("target/release/statico"), &args)
        }
        Task::Test { asan: false } => test(),
        #[cfg(target_os = "linux")]
        Task::Test { asan: true } => {
            setup::run(false)?;
            asan::run(&root)
        }
        #[cfg(not(target_os = "linux"))]
        Task::Test { asan: true } => bail!("--asan: AddressSanitizer runs are made on Linux"),
        Task::Package => {
            setup::ensure(&[Purpose::Build, Purpose::Package], false)?;
            build_release()?;
            let deb = package::build(&root)?;
            package::check(&deb)?;
            println!("{}", deb.display());
            Ok(())
        }
        Task::Image => {
            // STATICO_BIN names a statico already built (as for `bench`): nothing is built then.
            let binary = match std::env::var_os("STATICO_BIN") {
                Some(bin) => {
                    setup::ensure(&[Purpose::Image], false)?;
                    root.join(bin)
                }
                None => {
                    setup::ensure(&[Purpose::Build, Purpose::Image], false)?;
                    build_release()?;
                    root.join("target/release/statico")
                }
            };
            println!("{}", image::build(&root, &binary)?);
            Ok(())
        }
        Task::Bench(b) => {
            // STATICO_BIN names a statico already built: the bench then builds nothing. The A/B mode
            // (`--against`) installs nothing either: it uses wrk and h2load only, and checks for them.
            let build = std::env::var_os("STATICO_BIN").is_none();
            let mut purposes = Vec::new();
            if build {
                purposes.push(Purpose::Build);
            }
            if b.against.is_none() {
                purposes.push(Purpose::Bench);
            }
            setup::ensure(&purposes, false)?;
            if build {
                build_release()?;
            }
            bench::run(&root, b)
        }
        #[cfg(target_os = "linux")]
        Task::Soak(a) => {
            if std::env::var_os("STATICO_BIN").is_some() {
                setup::ensure(&[Purpose::Bench], false)?;
            } else {
                setup::ensure(&[Purpose::Build, Purpose::Bench], false)?;
                build_release()?;
            }
            soak::run(&root, a)
        }
        Task::Fuzz(f) => fuzz::run(&root, f),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs a command, echoing it, and fails with its exit status.
pub fn cmd(program: &str, args: &[&str]) -> Result<()> {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The release build of the binary, as `build`, `run`, `test`, `bench` and `package` make it.
pub const RELEASE_BUILD: [&str; 6] = [
    "build",
    "--release",
    "-p",
    "statico-user",
    "--bin",
    "statico",
];

fn build_release() -> Result<()> {
    cmd(&cargo(), &RELEASE_BUILD)
}

#[cfg(unix)]
fn exec(bin: PathBuf, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let err = Command::new(&bin).args(args).exec();
    Err(err).with_context(|| format!("cannot run {}", bin.display()))
}

#[cfg(not(unix))]
fn exec(bin: PathBuf, args: &[String]) -> Result<()> {
    let status = Command::new(&bin).args(args).status()?;
    std::process::exit(status.code().unwrap_or(1));
}

/// `cargo xtask test`: every check CI makes, in stages; the first failure stops it.
fn test() -> Result<()> {
    setup::run(false)?;
    lints()?;
    let root = workspace_root();
    build_release()?;
    // A build made before the BPF toolchain arrived gains the programs when it does (two release
    // builds of statico-user); it leaves the release binary built with them.
    #[cfg(target_os = "linux")]
    late_toolchain::check(&root)?;
    // The image the container tests run (they skip without root or podman, and so does this).
    if cfg!(target_os = "linux") && setup::is_root() && setup::on_path("podman") {
        image::build(&root, &root.join("target/release/statico"))?;
    }
    suites()?;
    smoke_benches()?;
    // A short soak on the io_uring runtime, whose ring code holds the `unsafe`.
    #[cfg(target_os = "linux")]
    {
        eprintln!("xtask test: soak stage: cargo xtask soak --minutes 2 --runtime io-uring");
        let out = root.join("target/soak/test");
        let runtime = "io-uring".to_string();
        soak::run(
            &root,
            soak::SoakArgs {
                minutes: 2,
                runtime,
                out: Some(out),
            },
        )?;
    }
    eprintln!("xtask test: package stage: cargo xtask package, contents checked");
    let deb = package::build(&root)?;
    package::check(&deb)?;
    eprintln!("xtask test: all checks passed");
    Ok(())
}

/// fmt and clippy, on Linux and the non-Linux targets.
fn lints() -> Result<()> {
    let cargo = cargo();
    cmd(&cargo, &["fmt", "--all", "--check"])?;
    cmd(
        &cargo,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // Off Linux statico builds without aya, io_uring, TLS and zstd, on the shared-listener rung.
    for target in setup::NON_LINUX_TARGETS {
        cmd(
            &cargo,
            &[
                "clippy",
                "-p",
                "statico-user",
                "--target",
                target,
                "--",
                "-D",
                "warnings",
            ],
        )?;
    }
    Ok(())
}

/// Unit tests, the fuzz corpus replay, and the end-to-end suite on both runtimes.
fn suites() -> Result<()> {
    let cargo = cargo();
    // Unit tests, the fuzz corpus replay, and the end-to-end suite against the release binary with
    // the tokio runtime; then the same end-to-end suite again with the io_uring runtime.
    std::env::set_var("STATICO_BIN", "target/release/statico");
    std::env::set_var("STATICO_TEST_RUNTIME", "tokio");
    // The aiperf setup installed, for the OpenAI preset's test that drives it.
    std::env::set_var("STATICO_AIPERF_VENV", setup::aiperf_venv()?);
    // A failing test prints its message, not a backtrace of 60 frames after it (run that test alone
    // with RUST_BACKTRACE=1 for one): the summary at the end of the output names what failed and why.
    std::env::set_var("RUST_BACKTRACE", "0");
    cmd(
        &cargo,
        &["test", "--workspace", "--", "--test-threads", "4"],
    )?;
    if cfg!(target_os = "linux") {
        eprintln!("xtask test: the end-to-end suite again, on the io_uring runtime");
        std::env::set_var("STATICO_TEST_RUNTIME", "io-uring");
        cmd(
            &cargo,
            &[
                "test",
                "-p",
                "statico-tests",
                "--test",
                "e2e",
                "--",
                "--test-threads",
                "4",
            ],
        )?;
    }
    Ok(())
}

/// Quick bench runs, whose results must hold every server and scenario.
fn smoke_benches() -> Result<()> {
    // Smoke stage: a quick bench run, whose results.json must hold every server and scenario.
    eprintln!("xtask test: smoke stage: cargo xtask bench --quick");
    let out = workspace_root().join("target/bench/smoke");
    bench::run(
        &workspace_root(),
        bench::BenchArgs {
            quick: true,
            out: Some(out.clone()),
            ..Default::default()
        },
    )?;
    bench::validate(&out.join("results.json"))?;
    eprintln!("xtask test: smoke stage: cargo xtask bench --profile --quick");
    bench::run(
        &workspace_root(),
        bench::BenchArgs {
            quick: true,
            profile: true,
            ..Default::default()
        },
    )?;
    eprintln!("xtask test: smoke stage: cargo xtask bench --http3 --quick");
    bench::run(
        &workspace_root(),
        bench::BenchArgs {
            quick: true,
            http3: true,
            ..Default::default()
        },
    )?;
    eprintln!("xtask test: smoke stage: cargo xtask bench --stream --quick");
    bench::run(
        &workspace_root(),
        bench::BenchArgs {
            quick: true,
            stream: true,
            ..Default::default()
        },
    )?;
    Ok(())
}
