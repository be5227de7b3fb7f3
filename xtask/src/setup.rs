//! `cargo xtask setup`: installs what a fresh machine lacks, and nothing twice. Each task installs
//! only what it uses ([`Purpose`]): `run` and `build` the toolchains the BPF programs need, `bench`,
//! `package` and `test` their tools; `setup` installs all of it at once.
//!
//! - Debian packages: `curl` and `openssl` (end-to-end tests; curl also reads a stream in `bench --stream`), `wrk` (benchmarks), `nginx-light` (the benchmark peer),
//!   `bpftool` (reads the pinned BPF maps in the steering tests), `nghttp2-client` (nghttp in the
//!   HTTP/2 tests, h2load in `bench --http2`), `linux-perf` (`bench --profile`), `testssl.sh` (the
//!   HTTPS audit in the TLS tests), `prometheus` (scrapes `--metrics` in a test), `python3.11-doc` and `libnginx-mod-http-brotli-static` (the
//!   corpus and nginx's precompressed-file module for `bench --site`), `caddy` (the HTTP/3 peer of
//!   `bench --http3`; its package also enables a systemd unit, which the bench does not use: it runs its
//!   own caddy with its own Caddyfile); `podman`, `runc` (the runtime podman runs with: crun refuses
//!   hybrid cgroup hosts) and `mmdebstrap` (makes the image's Debian base where no registry answers)
//!   for `cargo xtask image` and the container tests; `chromium`, `chromium-driver` and `libnss3-tools`
//!   (the browser tests: Chromium over WebDriver, trusting the self-signed certificate through a
//!   private NSS database made with `certutil`), which also load `python3.11-doc`.
//! - The pinned nightly toolchain with `rust-src` (the BPF programs and the fuzzer build with it): the
//!   `channel` of `statico-ebpf/rust-toolchain.toml`, the one place its date is written.
//! - `bpf-linker` 0.10.0, built with that nightly (links BPF objects; 0.11+ needs a system libLLVM and
//!   fails here).
//! - The standard libraries of [`NON_LINUX_TARGETS`], to check that statico builds off Linux.
//! - h2spec, with `go install` (the HTTP/2 conformance suite of the `--http2` tests).
//! - oha [`OHA_VERSION`] with its `http3` feature, with `cargo install` (the HTTP/3 load generator of
//!   `bench --http3`: Debian's h2load is built without HTTP/3).
//! - Fortio [`FORTIO_VERSION`], with `go install` (the echo-server peer of `bench --routes`, the gRPC
//!   ping peer of `bench --grpc`, and the gRPC ping client of the `--grpc` tests).
//! - grpc-health-probe [`GRPC_HEALTH_PROBE_VERSION`], grpcurl [`GRPCURL_VERSION`] and ghz
//!   [`GHZ_VERSION`], with `go install` (the health, reflection and load clients of the `--grpc`
//!   tests, ghz also the load generator of `bench --grpc`); grpc-go's interop client,
//!   [`GRPC_GO_VERSION`], as `grpc-interop-client` (the conformance client of the `--grpc` tests), and
//!   its interop server as `grpc-interop-server` (the EmptyCall peer of `bench --grpc`).
//! - Python's grpcio [`GRPCIO`], with pip (a C-core gRPC client in the `--grpc` tests).
//! - go-httpbin [`GO_HTTPBIN_VERSION`], with `go install` (its `/sse` is the peer of `bench --stream`).
//! - FastAPI and uvicorn ([`FASTAPI_MOCK_PACKAGES`]), with pip (they serve the hand-written OpenAI
//!   mock `bench/peers/fastapi/mock.py`, the peer of `bench --openai`).
//! - kubernetes-validate [`KUBERNETES_VALIDATE`], with pip (checks `deploy/kubernetes/` offline, with
//!   `--strict`, in the container tests).
//! - The `openai` Python SDK [`OPENAI_SDK`], with pip, and aiperf [`AIPERF_SERIES`] in a venv of its
//!   own at [`AIPERF_VENV`] under the home directory (its many dependencies kept apart from the
//!   system's Python; `tokenizers` among them): the real clients of the OpenAI-compatible preset's
//!   tests (`tests/e2e/openai.rs`).
//!
//! Every step first checks whether its tool is already there, so running setup again is quick.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd;

/// What a task needs installed, so that each task installs only that: `run` and `build` only what
/// building needs (a first run on a fresh machine waits for no test tool), `bench` its peers and load
/// generators, `package` cargo-deb; `setup` and `test` (which also runs the smoke benches and the
/// package stage) everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The pinned nightly with rust-src and bpf-linker: the BPF programs.
    Build,
    /// The end-to-end suite's clients and checkers, and the non-Linux clippy targets.
    Test,
    /// The benchmark peers, corpora and load generators.
    Bench,
    /// cargo-deb.
    Package,
    /// podman, runc and mmdebstrap: the OCI image and its base.
    Image,
}

impl Purpose {
    pub const ALL: [Purpose; 5] = [
        Purpose::Build,
        Purpose::Test,
        Purpose::Bench,
        Purpose::Package,
        Purpose::Image,
    ];
}

use Purpose::{Bench, Build, Image, Package, Test};

/// (program to look for, or an absolute path; Debian package that provides it; who needs it)
const PACKAGES: [(&str, &str, &[Purpose]); 23] = [
    ("curl", "curl", &[Test, Bench]),
    ("openssl", "openssl", &[Test, Bench]),
    ("wrk", "wrk", &[Test, Bench]),
    ("nginx", "nginx-light", &[Bench]),
    ("bpftool", "bpftool", &[Test]),
    ("nghttp", "nghttp2-client", &[Test]),
    ("h2load", "nghttp2-client", &[Test, Bench]),
    ("kill", "procps", &[Test, Bench]),
    ("perf", "linux-perf", &[Bench]),
    ("testssl", "testssl.sh", &[Test]),
    ("prometheus", "prometheus", &[Test]),
    ("systemd-analyze", "systemd", &[Test, Package]),
    // `bench --site` (and the browser tests): the corpus, and nginx's brotli_static for the peer.
    (
        "/usr/share/doc/python3.11/html/index.html",
        "python3.11-doc",
        &[Test, Bench],
    ),
    (
        "/usr/lib/nginx/modules/ngx_http_brotli_static_module.so",
        "libnginx-mod-http-brotli-static",
        &[Bench],
    ),
    // `bench --http3`: the peer.
    ("caddy", "caddy", &[Bench]),
    // `image`, and the container tests (`test` builds the image).
    ("podman", "podman", &[Test, Image]),
    ("runc", "runc", &[Test, Image]),
    ("mmdebstrap", "mmdebstrap", &[Test, Image]),
    // kubernetes-validate, the `openai` SDK and the OpenAI mock's FastAPI come from PyPI.
    ("pip3", "python3-pip", &[Test, Bench]),
    // aiperf's venv.
    (
        "/usr/lib/python3.11/ensurepip/__init__.py",
        "python3.11-venv",
        &[Test],
    ),
    // The browser tests (`tests/e2e/browser.rs`): Chromium driven over WebDriver, trusting the
    // self-signed certificate through a private NSS database.
    ("chromium", "chromium", &[Test]),
    ("chromedriver", "chromium-driver", &[Test]),
    ("certutil", "libnss3-tools", &[Test]),
];
/// The kubernetes-validate release (and with it the Kubernetes schema version) the manifests are
/// checked against.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.*";
/// The `openai` Python SDK the preset's tests drive statico with (`tests/openai/sdk.py`).
const OPENAI_SDK: &str = "openai==3.*";
/// The aiperf release series the preset's tests compare their TTFT and ITL with.
const AIPERF_SERIES: &str = "0.13";
/// aiperf's venv, under the home directory (`cargo xtask test` gives it to the tests as
/// `$STATICO_AIPERF_VENV`).
const AIPERF_VENV: &str = ".cache/statico/aiperf";
/// FastAPI and uvicorn (with uvloop and httptools, as `uvicorn[standard]` installs them) for the
/// OpenAI mock `bench --openai` runs as its peer.
pub const FASTAPI_MOCK_PACKAGES: [&str; 2] = ["fastapi==0.163.2", "uvicorn[standard]==0.54.0"];
/// The Fortio `bench --routes` runs as its peer (newer ones need a module the registries here refuse).
pub const FORTIO_VERSION: &str = "v1.66.0";
/// The go-httpbin `bench --stream` runs as its peer (its `/sse`).
pub const GO_HTTPBIN_VERSION: &str = "v2.26.0";
/// The oha `bench --http3` drives its load with (built with the `http3` feature).
pub const OHA_VERSION: &str = "1.16.0";
const BPF_LINKER_VERSION: &str = "0.10.0";
/// The non-Linux targets `cargo xtask test` checks statico against with clippy (the shared-listener
/// fallback, tokio only: no aya, io_uring, TLS or zstd).
pub const NON_LINUX_TARGETS: [&str; 3] = [
    "x86_64-unknown-freebsd",
    "x86_64-pc-windows-gnu",
    "aarch64-apple-darwin",
];
/// The file whose `channel` names the pinned nightly (also read by `statico-user/build.rs`).
const TOOLCHAIN_FILE: &str = "statico-ebpf/rust-toolchain.toml";

/// h2spec (the HTTP/2 conformance suite the `--http2` tests run), from the Go module proxy.
fn ensure_h2spec() -> Result<()> {
    go_install(
        "h2spec",
        "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible",
    )
}

/// `go install PACKAGE@VERSION`, unless `program` is already where `go install` puts it.
fn go_install(program: &str, package: &str) -> Result<()> {
    if go_installed(program).is_some() {
        return Ok(());
    }
    if !on_path("go") {
        bail!("{program} is missing and there is no Go toolchain to build it: install Go, then run `cargo xtask setup` again");
    }
    cmd("go", &["install", package])
}

/// kubernetes-validate [`KUBERNETES_VALIDATE`] with pip (Debian's Python is externally managed, hence
/// `--break-system-packages`: the tool installs into pip's own site directory).
fn ensure_kubernetes_validate() -> Result<()> {
    if on_path("kubernetes-validate") {
        return Ok(());
    }
    cmd(
        "pip3",
        &["install", "--break-system-packages", KUBERNETES_VALIDATE],
    )
}

/// Whether `python3` imports `modules` (a comma-separated list).
fn python_imports(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The `openai` Python SDK [`OPENAI_SDK`] with pip, as kubernetes-validate.
fn ensure_openai_sdk() -> Result<()> {
    if python_imports("openai") {
        return Ok(());
    }
    cmd("pip3", &["install", "--break-system-packages", OPENAI_SDK])
}

/// Where aiperf's venv is: [`AIPERF_VENV`] under the home directory.
pub fn aiperf_venv() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("no HOME for aiperf's venv")?;
    Ok(Path::new(&home).join(AIPERF_VENV))
}

/// aiperf [`AIPERF_SERIES`] in a venv at [`AIPERF_VENV`] under the home directory, made with
/// `python3`.
fn ensure_aiperf() -> Result<()> {
    let venv = aiperf_venv()?;
    let version = Command::new(venv.join("bin/aiperf"))
        .arg("--version")
        .output();
    let series = format!("{AIPERF_SERIES}.");
    if matches!(&version, Ok(o) if String::from_utf8_lossy(&o.stdout).trim().starts_with(&series)) {
        return Ok(());
    }
    let venv = venv.to_str().context("aiperf's venv path is not UTF-8")?;
    cmd("python3", &["-m", "venv", venv])?;
    let aiperf = format!("aiperf=={AIPERF_SERIES}.*");
    cmd(&format!("{venv}/bin/pip"), &["install", "--quiet", &aiperf])
}

/// FastAPI and uvicorn [`FASTAPI_MOCK_PACKAGES`] with pip (as kubernetes-validate), unless Python
/// already imports both.
fn ensure_fastapi() -> Result<()> {
    if python_imports("fastapi, uvicorn") {
        return Ok(());
    }
    let args: Vec<&str> = ["install", "--break-system-packages"]
        .into_iter()
        .chain(FASTAPI_MOCK_PACKAGES)
        .collect();
    cmd("pip3", &args)
}

/// Python's grpcio (a `--grpc` tests' client).
const GRPCIO: &str = "grpcio==1.85.1";

/// grpcio [`GRPCIO`] with pip, as kubernetes-validate, unless Python imports it already.
fn ensure_grpcio() -> Result<()> {
    let importable = Command::new("python3")
        .args(["-c", "import grpc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if importable {
        return Ok(());
    }
    cmd("pip3", &["install", "--break-system-packages", GRPCIO])
}

/// grpc-health-probe (the `--grpc` tests' health client), from the Go module proxy.
const GRPC_HEALTH_PROBE_VERSION: &str = "v0.4.62";
/// grpcurl (the `--grpc` tests' reflection client), from the Go module proxy.
const GRPCURL_VERSION: &str = "v1.9.4";
/// ghz (the load generator of the `--grpc` tests, through reflection, and of `bench --grpc`), from the
/// Go module proxy.
const GHZ_VERSION: &str = "v0.93.0";

/// grpc-go, whose interop client (`interop/client`) the `--grpc` tests run and whose interop server
/// (`interop/server`) is a peer of `bench --grpc`.
const GRPC_GO_VERSION: &str = "v1.85.0";
/// What grpc-go's interop client and server are installed as (`go install` would name them `client`
/// and `server`).
const INTEROP_CLIENT: &str = "grpc-interop-client";
const INTEROP_SERVER: &str = "grpc-interop-server";

/// grpc-go's interop `part` (`client` or `server`) [`GRPC_GO_VERSION`], built into a scratch
/// directory and moved next to the other Go tools as `name`.
fn ensure_interop(part: &str, name: &str) -> Result<()> {
    if go_installed(name).is_some() {
        return Ok(());
    }
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let bin = std::env::var_os("GOBIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join("go/bin"));
    let scratch = std::env::temp_dir().join(format!("statico-interop-{part}"));
    std::fs::create_dir_all(&scratch)?;
    let package = format!("google.golang.org/grpc/interop/{part}@{GRPC_GO_VERSION}");
    eprintln!("$ GOBIN={} go install {package}", scratch.display());
    let status = Command::new("go")
        .args(["install", &package])
        .env("GOBIN", &scratch)
        .status()
        .context("cannot run go")?;
    if !status.success() {
        bail!("`go install {package}` failed ({status})");
    }
    std::fs::create_dir_all(&bin)?;
    std::fs::rename(scratch.join(part), bin.join(name))?;
    Ok(())
}

/// Where grpc-go's interop server is installed, or PATH.
pub fn interop_server_path() -> Option<PathBuf> {
    go_installed(INTEROP_SERVER)
}

/// Where `go install` puts ghz, or PATH.
pub fn ghz_path() -> Option<PathBuf> {
    go_installed("ghz")
}

/// grpc-health-probe [`GRPC_HEALTH_PROBE_VERSION`], grpcurl [`GRPCURL_VERSION`], ghz
/// [`GHZ_VERSION`] and grpc-go's interop client.
fn ensure_grpc_clients() -> Result<()> {
    go_install(
        "grpc-health-probe",
        &format!("github.com/grpc-ecosystem/grpc-health-probe@{GRPC_HEALTH_PROBE_VERSION}"),
    )?;
    go_install(
        "grpcurl",
        &format!("github.com/fullstorydev/grpcurl/cmd/grpcurl@{GRPCURL_VERSION}"),
    )?;
    ensure_ghz()?;
    ensure_interop("client", INTEROP_CLIENT)
}

/// ghz [`GHZ_VERSION`], from the Go module proxy.
fn ensure_ghz() -> Result<()> {
    go_install(
        "ghz",
        &format!("github.com/bojand/ghz/cmd/ghz@{GHZ_VERSION}"),
    )
}

/// What `bench --grpc` runs besides Fortio: ghz and grpc-go's interop server.
fn ensure_grpc_bench() -> Result<()> {
    ensure_ghz()?;
    ensure_interop("server", INTEROP_SERVER)
}

/// Fortio [`FORTIO_VERSION`] (the peer of `bench --routes`), from the Go module proxy.
fn ensure_fortio() -> Result<()> {
    go_install("fortio", &format!("fortio.org/fortio@{FORTIO_VERSION}"))
}

/// Where `go install` puts fortio, or PATH.
pub fn fortio_path() -> Option<PathBuf> {
    go_installed("fortio")
}

/// go-httpbin [`GO_HTTPBIN_VERSION`] (the peer of `bench --stream`), from the Go module proxy.
fn ensure_go_httpbin() -> Result<()> {
    go_install(
        "go-httpbin",
        &format!("github.com/mccutchen/go-httpbin/v2/cmd/go-httpbin@{GO_HTTPBIN_VERSION}"),
    )
}

/// Where `go install` puts go-httpbin, or PATH.
pub fn go_httpbin_path() -> Option<PathBuf> {
    go_installed("go-httpbin")
}

/// `program` where `go install` puts it (GOBIN, else GOPATH/bin, else ~/go/bin), or on PATH.
fn go_installed(program: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go"));
    let gopath = std::env::var_os("GOPATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    std::env::var_os("GOBIN")
        .map(PathBuf::from)
        .into_iter()
        .chain(gopath.into_iter().flatten().map(|p| p.join("bin")))
        .chain(home.map(|h| h.join("bin")))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .or_else(|| which(program))
}

/// oha [`OHA_VERSION`] built with HTTP/3, with `cargo install` (into cargo's bin directory).
fn ensure_oha() -> Result<()> {
    if oha_path().is_some_and(|oha| oha_has_http3(&oha)) {
        return Ok(());
    }
    cmd(
        "cargo",
        &[
            "install",
            "oha",
            "--version",
            OHA_VERSION,
            "--features",
            "http3",
            "--locked",
            "--force",
        ],
    )
}

/// Where `cargo install` puts oha (`CARGO_HOME/bin`, else ~/.cargo/bin), or PATH.
pub fn oha_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo"));
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .into_iter()
        .chain(home)
        .map(|d| d.join("bin/oha"))
        .find(|p| p.is_file())
        .or_else(|| which("oha"))
}

/// Whether `oha` is [`OHA_VERSION`] and knows HTTP/3: one request to a closed local port must fail
/// for want of a connection, not for want of the feature.
pub fn oha_has_http3(oha: &Path) -> bool {
    let version = Command::new(oha).arg("--version").output();
    if !matches!(&version, Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == format!("oha {OHA_VERSION}"))
    {
        return false;
    }
    let probe = Command::new(oha)
        .args(["--no-tui", "--http-version", "3", "-n", "1", "-c", "1"])
        .args(["--connect-timeout", "50ms", "https://127.0.0.1:9/"])
        .output();
    matches!(&probe, Ok(o) if !String::from_utf8_lossy(&o.stderr).contains("not been built with HTTP/3"))
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

/// `cargo xtask setup`: installs everything any task uses. `report` prints a line for what is
/// already there too.
pub fn run(report: bool) -> Result<()> {
    ensure(&Purpose::ALL, report)
}

/// Installs what `purposes` need and is missing (see [`Purpose`]).
pub fn ensure(purposes: &[Purpose], report: bool) -> Result<()> {
    let wanted = |who: &[Purpose]| who.iter().any(|p| purposes.contains(p));
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(program, _, who)| wanted(who) && !present(program))
        .map(|(_, package, _)| *package)
        .fold(Vec::new(), |mut v, p| {
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    if !missing.is_empty() {
        install_debian(&missing)?;
    } else if report {
        eprintln!("setup: the Debian packages are installed");
    }
    if purposes.contains(&Build) {
        let nightly = ensure_nightly()?;
        if report {
            eprintln!("setup: {nightly} with rust-src is installed");
        }
        ensure_bpf_linker(&nightly, report)?;
    }
    if purposes.contains(&Test) {
        for target in NON_LINUX_TARGETS {
            ensure_target(target)?;
        }
        ensure_h2spec()?;
        ensure_fortio()?;
        ensure_grpc_clients()?;
        ensure_grpcio()?;
        ensure_kubernetes_validate()?;
        ensure_openai_sdk()?;
        ensure_aiperf()?;
    }
    if purposes.contains(&Package) {
        ensure_cargo_deb()?;
    }
    if purposes.contains(&Bench) {
        ensure_oha()?;
        ensure_fortio()?;
        ensure_grpc_bench()?;
        ensure_go_httpbin()?;
        ensure_fastapi()?;
    }
    if report {
        eprintln!("setup: done");
    }
    Ok(())
}

/// A program on PATH, or a file at an absolute path.
fn present(program: &str) -> bool {
    if program.starts_with('/') {
        Path::new(program).exists()
    } else {
        on_path(program)
    }
}

/// The pinned nightly (see [`pinned_nightly`]) with `rust-src`, through rustup; returns its name.
pub fn ensure_nightly() -> Result<String> {
    let nightly = pinned_nightly()?;
    let installed = Command::new("rustup")
        .args(["component", "list", "--toolchain", &nightly, "--installed"])
        .output();
    let has_src = matches!(&installed, Ok(o) if o.status.success()
        && String::from_utf8_lossy(&o.stdout).lines().any(|l| l.starts_with("rust-src")));
    if has_src {
        return Ok(nightly);
    }
    if installed.is_err() {
        bail!("rustup is not installed; install it from your distribution or rustup.rs, then run `cargo xtask setup` again");
    }
    cmd(
        "rustup",
        &[
            "toolchain",
            "install",
            &nightly,
            "--profile",
            "minimal",
            "--component",
            "rust-src",
        ],
    )?;
    Ok(nightly)
}

/// The dated nightly the BPF programs and the fuzzer build with: the `channel` of [`TOOLCHAIN_FILE`].
pub fn pinned_nightly() -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(TOOLCHAIN_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    channel(&text).with_context(|| {
        format!(
            "{TOOLCHAIN_FILE}: no `channel = \"nightly-YYYY-MM-DD\"` (a dated nightly) in {}",
            path.display()
        )
    })
}

/// The value of `channel = "…"` in a `rust-toolchain.toml`, if it is a dated nightly.
fn channel(toml: &str) -> Option<String> {
    let value = toml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .find_map(|rest| rest.trim_start().strip_prefix('='))?
        .trim()
        .trim_matches('"');
    let date = value.strip_prefix("nightly-")?;
    let dated = date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    dated.then(|| value.to_string())
}

/// `bpf-linker` [`BPF_LINKER_VERSION`], built with the pinned nightly.
fn ensure_bpf_linker(nightly: &str, report: bool) -> Result<()> {
    if bpf_linker_version().as_deref() == Some(BPF_LINKER_VERSION) {
        if report {
            eprintln!("setup: bpf-linker {BPF_LINKER_VERSION} is installed");
        }
        return Ok(());
    }
    cmd(
        "cargo",
        &[
            &format!("+{nightly}"),
            "install",
            &format!("bpf-linker@{BPF_LINKER_VERSION}"),
            "--locked",
            "--force",
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
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(Into::into))
        .map(|dir| Path::new(&dir).join(program))
        .find(|p| p.is_file())
}

/// Whether this process runs as root (`id -u` is 0).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn install_debian(packages: &[&str]) -> Result<()> {
    if !on_path("apt-get") {
        bail!(
            "missing tools and no apt-get to install them: install the packages {} with your package manager, then run `cargo xtask setup` again",
            packages.join(", ")
        );
    }
    let sudo: &[&str] = if is_root() { &[] } else { &["sudo"] };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_pins_a_dated_nightly() {
        let nightly = pinned_nightly().unwrap();
        assert!(nightly.starts_with("nightly-20"), "{nightly}");
    }

    #[test]
    fn only_a_dated_nightly_is_a_pin() {
        let file =
            |c: &str| format!("[toolchain]\nchannel = \"{c}\"\ncomponents = [\"rust-src\"]\n");
        assert_eq!(
            channel(&file("nightly-2031-01-02")).as_deref(),
            Some("nightly-2031-01-02")
        );
        assert_eq!(channel(&file("nightly")), None);
        assert_eq!(channel(&file("stable")), None);
        assert_eq!(channel(&file("nightly-2031-1-02")), None);
        assert_eq!(
            channel("channel=\"nightly-2031-01-02\""),
            Some("nightly-2031-01-02".into())
        );
    }
}
