//! The OCI image (`cargo xtask image`, from `deploy/container/Containerfile`) run with podman, and
//! the Kubernetes manifests in `deploy/kubernetes/`. Unprivileged, the image serves on the best
//! steering rung it may and says which. With CAP_BPF and CAP_PERFMON, a bpffs at /sys/fs/bpf, host
//! networking and the shipped seccomp profile (`deploy/container/seccomp-statico.json`, which lets
//! io_uring through too) it attaches the ebpf rung, then drops to the image's user. The calibrated
//! target runs with its manifest's arguments, its routes file mounted read-only on a read-only root,
//! answering through published ports and on its metrics port. `podman stop` (SIGTERM) drains and
//! exits 0 with the totals printed. The manifests pass `kubernetes-validate --strict`.
//!
//! The container tests need root and podman (with runc; `cargo xtask setup` installs both) and the
//! image `cargo xtask image` built (`cargo xtask test` builds it first); without root or podman they
//! print that they are skipped. Podman runs with the flags this host needs, as `cargo xtask image`
//! does: `--runtime runc` and explicit open-files and processes limits ([`ulimits`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use statico_tests::{get, is_root, scratch_dir, Reader, WAIT};

/// Skips (loudly) a test that needs root and podman.
macro_rules! require_podman {
    ($what:expr) => {
        if !is_root() || !on_path("podman") {
            eprintln!("SKIPPED: {} needs root and podman; CI runs as root", $what);
            return;
        }
    };
}

/// The image under test: `$STATICO_IMAGE`, else the one `cargo xtask image` tags.
fn image() -> String {
    std::env::var("STATICO_IMAGE")
        .unwrap_or_else(|_| format!("localhost/statico:{}", env!("CARGO_PKG_VERSION")))
}

fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .any(|dir| dir.join(program).is_file())
}

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

/// `podman --runtime runc ARGS`, its output.
fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(["--runtime", "runc"])
        .args(args)
        .output()
        .expect("run podman")
}

/// `--ulimit nofile=H:H --ulimit nproc=N:N`, as `cargo xtask image` builds with: this process's hard
/// open-files limit and at most 4096 processes (podman's defaults exceed this host's hard limits,
/// which runc then fails to set).
fn ulimits() -> Vec<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard = |row: &str| {
        let rest = limits.lines().find_map(|l| l.strip_prefix(row)).unwrap();
        rest.split_whitespace().nth(1).unwrap().to_string()
    };
    let nofile = match hard("Max open files").as_str() {
        "unlimited" => "-1".to_string(),
        n => n.to_string(),
    };
    let nproc = hard("Max processes")
        .parse()
        .map_or(4096, |n: u64| n.min(4096));
    vec![
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
    ]
}

/// A port free now, below the kernel's ephemeral range (32768 and up here): the port is let go before
/// podman binds it, and a port 0 bind elsewhere in the suite (every `Server::start`) cannot take it
/// meanwhile, as it could when this asked the kernel for one.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Each call takes the next candidate, so two taken in a row differ.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let first = std::process::id() % 12_000;
    (0..12_000)
        .map(|_| 20_000 + (first + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000)
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p as u16)).is_ok())
        .expect("a free port in 20000..32000") as u16
}

/// A running container of the image, removed when dropped.
struct Container {
    name: String,
    /// Its veth comes and goes with it: no browser test runs meanwhile (see
    /// [`statico_tests::network_interfaces`]). Released after the removal, in `Drop`.
    _interfaces: std::sync::MutexGuard<'static, ()>,
}

impl Container {
    /// `podman run -d` of the image with `options` and statico's `args`; waits until statico
    /// listens (or fails with its log if it exits or takes longer than [`WAIT`]).
    fn start(options: &[&str], args: &[&str]) -> Container {
        let name = format!("statico-e2e-{}-{}", std::process::id(), unique());
        let mut run: Vec<String> = ["run", "-d", "--name", &name].map(String::from).to_vec();
        run.extend(ulimits());
        run.extend(options.iter().map(|s| s.to_string()));
        run.push(image());
        run.extend(args.iter().map(|s| s.to_string()));
        let interfaces = statico_tests::network_interfaces();
        let out = podman(&run.iter().map(String::as_str).collect::<Vec<_>>());
        let c = Container {
            name,
            _interfaces: interfaces,
        };
        assert!(
            out.status.success(),
            "podman run failed (has `cargo xtask image` built {}?): {}",
            image(),
            String::from_utf8_lossy(&out.stderr)
        );
        c.wait_log("listening on");
        c
    }

    /// Everything statico wrote (stdout and stderr).
    fn log(&self) -> String {
        let out = podman(&["logs", &self.name]);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    fn wait_log(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            let running = podman(&["inspect", "--format", "{{.State.Running}}", &self.name]);
            let running = String::from_utf8_lossy(&running.stdout).trim() == "true";
            assert!(
                running && start.elapsed() < WAIT,
                "no {needle:?} from the container:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `statico: steering: …` start-up line.
    fn steering(&self) -> String {
        let log = self.log();
        log.lines()
            .find(|l| l.starts_with("statico: steering: "))
            .unwrap_or_else(|| panic!("no steering line:\n{log}"))
            .to_string()
    }

    /// `podman stop` (SIGTERM, as the image's STOPSIGNAL); returns the exit code and the log.
    fn stop(&self) -> (i32, String) {
        let out = podman(&["stop", "--time", "10", &self.name]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let code = podman(&["inspect", "--format", "{{.State.ExitCode}}", &self.name]);
        let code = String::from_utf8_lossy(&code.stdout)
            .trim()
            .parse()
            .unwrap();
        (code, self.log())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "0", &self.name]);
    }
}

fn unique() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// One GET of `path` on 127.0.0.1:`port`.
fn get_from(port: u16, path: &str) -> statico_tests::Response {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut r = Reader::new(stream);
    r.send(&get(path));
    r.response(false)
}

/// Stops the container and checks that it drained: exit 0, the SIGTERM line, the totals with
/// `requests` requests.
fn stops_cleanly(c: &Container, requests: u64) {
    let (code, log) = c.stop();
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("statico: SIGTERM: stopped accepting"), "{log}");
    let totals = log
        .lines()
        .find(|l| l.starts_with("statico: totals"))
        .unwrap_or_else(|| panic!("no totals:\n{log}"));
    assert!(
        totals.contains(&format!(" requests={requests} ")),
        "{totals}"
    );
}

/// A bpffs of the test's own, mounted where the container sees /sys/fs/bpf: the host's pins (other
/// statico runs) are not touched. Unmounted when dropped.
struct Bpffs(PathBuf);

impl Bpffs {
    fn mount(name: &str) -> Bpffs {
        let dir = scratch_dir("bpffs", name);
        let ok = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mount -t bpf");
        Bpffs(dir)
    }

    fn volume(&self) -> String {
        format!("{}:/sys/fs/bpf", self.0.display())
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn the_image_is_labelled_runs_as_a_user_and_serves_on_8080() {
    require_podman!("the_image_is_labelled_runs_as_a_user_and_serves_on_8080");
    let out = podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{.Config.StopSignal}}",
        &image(),
    ]);
    let config = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        config.trim(),
        r#"10001:10001|["/usr/bin/statico"]|["-p","8080"]|SIGTERM"#,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = podman(&["image", "inspect", "--format", "{{json .Labels}}", &image()]);
    let labels = String::from_utf8_lossy(&out.stdout);
    for key in ["title", "version", "source", "licenses", "description"] {
        assert!(
            labels.contains(&format!("\"org.opencontainers.image.{key}\"")),
            "{key}: {labels}"
        );
    }
    assert!(labels.contains(&format!("\"{}\"", env!("CARGO_PKG_VERSION"))));
}

#[test]
fn unprivileged_the_image_serves_on_the_best_rung_it_may_and_says_which() {
    require_podman!("unprivileged_the_image_serves_on_the_best_rung_it_may_and_says_which");
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:8080");
    // The image's own command: -p 8080, as the image's user, the default capabilities.
    let c = Container::start(&["-p", &publish], &[]);
    let steering = c.steering();
    eprintln!("unprivileged: {steering}");
    assert!(!steering.contains("steering: ebpf"), "{steering}");
    assert!(steering.contains("auto: "), "{steering}");
    assert!(steering.contains("the ebpf rung needs"), "{steering}");
    assert_eq!(get_from(port, "/").status, 200);
    stops_cleanly(&c, 1);
}

#[test]
fn with_bpf_and_perfmon_the_image_attaches_the_ebpf_rung_then_drops_to_its_user() {
    require_podman!("with_bpf_and_perfmon_the_image_attaches_the_ebpf_rung_then_drops_to_its_user");
    let bpffs = Bpffs::mount("ebpf");
    let port = free_port().to_string();
    // As the DaemonSet: root at start-up with only what the rung and --user need, host network,
    // a read-only root; podman's default seccomp profile allows bpf() only with CAP_SYS_ADMIN, the
    // shipped one (the default plus bpf and io_uring) without.
    let seccomp = format!(
        "--security-opt=seccomp={}",
        deploy("container/seccomp-statico.json").display()
    );
    let c = Container::start(
        &[
            "--network=host",
            "--read-only",
            "--user=0",
            &seccomp,
            "--cap-drop=ALL",
            "--cap-add=BPF,PERFMON,CHOWN,SETUID,SETGID",
            "-v",
            &bpffs.volume(),
        ],
        &["-a", "127.0.0.1", "-p", &port, "-t", "2"]
            .into_iter()
            .chain(["--steering=ebpf", "--user=statico"])
            .collect::<Vec<_>>(),
    );
    let steering = c.steering();
    eprintln!("with CAP_BPF+CAP_PERFMON: {steering}");
    assert!(
        steering.starts_with("statico: steering: ebpf"),
        "{steering}"
    );
    let log = c.log();
    assert!(
        log.contains("statico: running as statico with no capabilities"),
        "{log}"
    );
    assert!(log.contains("runtime: io-uring"), "{log}");
    assert_eq!(get_from(port.parse().unwrap(), "/").status, 200);
    stops_cleanly(&c, 1);
}

#[test]
fn bpf_without_perfmon_is_not_enough_for_the_ebpf_rung() {
    require_podman!("bpf_without_perfmon_is_not_enough_for_the_ebpf_rung");
    let bpffs = Bpffs::mount("no-perfmon");
    let port = free_port().to_string();
    let c = Container::start(
        &[
            "--network=host",
            "--user=0",
            "--security-opt=seccomp=unconfined",
            "--cap-drop=ALL",
            "--cap-add=BPF,NET_ADMIN",
            "-v",
            &bpffs.volume(),
        ],
        &["-a", "127.0.0.1", "-p", &port, "-t", "1"],
    );
    let steering = c.steering();
    assert!(!steering.contains("steering: ebpf"), "{steering}");
    stops_cleanly(&c, 0);
}

/// The calibrated target's container arguments as `deploy/kubernetes/target.yaml` writes them, with
/// `$(CPU_LIMIT)` at `cpus`.
fn target_args(manifest: &str, cpus: &str) -> Vec<String> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- --"))
        .map(|a| format!("--{}", a.replace("$(CPU_LIMIT)", cpus)))
        .collect()
}

/// The ConfigMap's `routes.toml` in `manifest` (its block scalar, dedented).
fn configmap_routes(manifest: &str) -> String {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "routes.toml: |")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.get(4..).unwrap_or("")))
        .collect()
}

#[test]
fn the_calibrated_target_runs_as_its_manifest_says_with_routes_mounted_read_only() {
    require_podman!(
        "the_calibrated_target_runs_as_its_manifest_says_with_routes_mounted_read_only"
    );
    let manifest = std::fs::read_to_string(deploy("kubernetes/target.yaml")).unwrap();
    let dir = scratch_dir("container", "routes");
    std::fs::write(dir.join("routes.toml"), configmap_routes(&manifest)).unwrap();
    let args = target_args(&manifest, "2");
    assert!(args.len() >= 4, "{args:?}");
    let (port, metrics) = (free_port(), free_port());
    let c = Container::start(
        &[
            "--read-only",
            "--cap-drop=ALL",
            "-p",
            &format!("127.0.0.1:{port}:8080"),
            "-p",
            &format!("127.0.0.1:{metrics}:9100"),
            "-v",
            &format!("{}:/etc/statico:ro", dir.display()),
        ],
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    eprintln!("target: {}", c.steering());
    let health = get_from(port, "/healthz");
    assert_eq!((health.status, &health.body[..]), (200, &b"ok"[..]));
    let api = get_from(port, "/api/x");
    assert!(api.status == 503 || api.body.len() == 1024, "{api:?}");
    let scrape = get_from(metrics, "/metrics");
    let text = String::from_utf8_lossy(&scrape.body);
    assert!(text.contains("statico_requests_total"), "{text}");
    stops_cleanly(&c, 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_manifests_validate_strictly() {
    if !on_path("kubernetes-validate") {
        eprintln!(
            "SKIPPED: the_manifests_validate_strictly needs kubernetes-validate (pip install 'kubernetes-validate==1.37.*')"
        );
        return;
    }
    for manifest in ["kubernetes/target.yaml", "kubernetes/bench-node.yaml"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--quiet"])
            .arg(deploy(manifest))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{manifest}: {said}"
        );
    }
}

#[test]
fn the_manifests_arguments_are_what_the_tests_run() {
    let manifest = std::fs::read_to_string(deploy("kubernetes/target.yaml")).unwrap();
    let args = target_args(&manifest, "2");
    assert!(args.contains(&"--threads=2".to_string()), "{args:?}");
    assert!(args.contains(&"--routes=/etc/statico/routes.toml".to_string()));
    assert!(configmap_routes(&manifest).contains("[[route]]"));
    assert!(Path::new(&deploy("container/Containerfile")).is_file());
}
