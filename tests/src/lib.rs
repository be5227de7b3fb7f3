//! Harness for statico's end-to-end tests: starts the real `statico` binary on a free loopback port,
//! talks to it over real sockets, and stops it with a real SIGTERM; [`wire`] reads its answers frame
//! by frame, as a client that relies on their framing does.
//!
//! The binary is `$STATICO_BIN` if set (what `cargo xtask test` does, with the release build), else
//! `target/release/statico` or `target/debug/statico`, built on first use if neither exists.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

pub mod wire;

/// How long any single wait in a test may take before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(10);

/// How early a time measured by a client may seem: it reads its clock after its send returns, and
/// on two busy cores it may be descheduled in between (the ground truth has the server's exact
/// times; the timer rounds too).
pub const EARLY: Duration = Duration::from_millis(5);

/// The runtime the suite runs against: `$STATICO_TEST_RUNTIME` (`tokio` or `io-uring`), default tokio.
/// `cargo xtask test` runs the whole suite once per runtime.
pub fn runtime() -> String {
    std::env::var("STATICO_TEST_RUNTIME").unwrap_or_else(|_| "tokio".into())
}

/// Held by a test that opens thousands of connections: the test process has one descriptor limit
/// (20 000 here), which two such tests running at once would exceed.
pub fn many_connections() -> std::sync::MutexGuard<'static, ()> {
    static MANY: Mutex<()> = Mutex::new(());
    MANY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by a test that adds or removes the host's network interfaces, and by one that needs them to
/// stay as they are. A podman container on its bridge network gets a veth with an IPv6 link-local
/// address, both gone when it is removed; Chromium watches the interfaces (netlink) and, on any
/// address appearing or going, fails its requests in progress with `ERR_NETWORK_CHANGED` — a page's
/// `fetch` rejects with "Failed to fetch" though nothing reached the server. So the browser tests and
/// the container tests, which the suite would otherwise run side by side, take turns.
pub fn network_interfaces() -> std::sync::MutexGuard<'static, ()> {
    static INTERFACES: Mutex<()> = Mutex::new(());
    INTERFACES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Path of the statico binary under test.
pub fn binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        if let Some(p) = std::env::var_os("STATICO_BIN") {
            return root.join(p); // relative to the workspace root; an absolute path stays as it is
        }
        for profile in ["release", "debug"] {
            let p = root.join("target").join(profile).join("statico");
            if p.exists() {
                return p;
            }
        }
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "statico-user", "--bin", "statico"])
            .current_dir(root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building statico failed");
        root.join("target/debug/statico")
    })
    .clone()
}

/// A running statico.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

/// What a stopped server left behind.
#[derive(Debug)]
pub struct Stopped {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Stopped {
    /// A counter from the totals line printed at exit.
    pub fn total(&self, name: &str) -> u64 {
        let line = self
            .stderr
            .lines()
            .find(|l| l.starts_with("statico: totals"))
            .unwrap_or_else(|| panic!("no totals line in stderr:\n{}", self.stderr));
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .parse()
            .unwrap()
    }
}

impl Server {
    /// Starts statico on 127.0.0.1 with an ephemeral port and `args`, and waits until it listens.
    pub fn start(args: &[&str]) -> Server {
        Self::try_start(args).unwrap_or_else(|e| panic!("statico did not start: {e}"))
    }

    /// Like [`Server::start`], with `configure` applied to the command before it is spawned.
    pub fn start_with(args: &[&str], configure: impl FnOnce(&mut Command)) -> Server {
        Self::try_start_with(args, configure)
            .unwrap_or_else(|e| panic!("statico did not start: {e}"))
    }

    pub fn try_start(args: &[&str]) -> Result<Server, String> {
        Self::try_start_with(args, |_| {})
    }

    fn try_start_with(
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Result<Server, String> {
        let mut cmd = Command::new(binary());
        // Loopback, an ephemeral port and two workers, unless the test says otherwise.
        for (short, long, value) in [
            ("-a", "--address", "127.0.0.1"),
            ("-p", "--port", "0"),
            ("-t", "--threads", "2"),
        ] {
            if !args.iter().any(|a| *a == short || *a == long) {
                cmd.args([short, value]);
            }
        }
        if !args.contains(&"--runtime") {
            cmd.args(["--runtime", &runtime()]);
        }
        cmd.args(args);
        configure(&mut cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let err_pipe = child.stderr.take().unwrap();
        let err_buf = stderr.clone();
        thread::spawn(move || {
            for line in BufReader::new(err_pipe).lines().map_while(Result::ok) {
                {
                    let mut b = err_buf.lock().unwrap();
                    b.push_str(&line);
                    b.push('\n');
                }
                // Announce readiness only once the line is in the buffer the test reads.
                let after = |scheme: &str| line.split(scheme).nth(1).map(str::to_string);
                if let Some(rest) =
                    after("listening on http://").or_else(|| after("listening on https://"))
                {
                    let addr = rest
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let out_pipe = child.stdout.take().unwrap();
        let out_buf = stdout.clone();
        thread::spawn(move || {
            let mut reader = BufReader::new(out_pipe);
            let mut chunk = [0u8; 4096];
            while let Ok(n) = reader.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                out_buf
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        // Under AddressSanitizer a large site takes several times longer to build.
        let start_up = if under_asan() { WAIT * 6 } else { WAIT };
        match rx.recv_timeout(start_up) {
            Ok(addr) => Ok(Server {
                child: Some(child),
                addr: addr.parse().expect("listening address"),
                stdout,
                stderr,
            }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                thread::sleep(Duration::from_millis(100));
                Err(format!(
                    "exit {status:?}, stderr:\n{}",
                    stderr.lock().unwrap()
                ))
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// A connected socket with read/write timeouts, so that a test never hangs.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect to statico");
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_write_timeout(Some(WAIT)).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The `--metrics` address statico printed at start-up.
    pub fn metrics_addr(&self) -> String {
        self.stderr()
            .lines()
            .find_map(|l| l.strip_prefix("statico: metrics on http://"))
            .and_then(|l| l.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no metrics line:\n{}", self.stderr()))
            .to_string()
    }

    /// The `--admin` address statico printed at start-up.
    pub fn admin_addr(&self) -> String {
        self.stderr()
            .lines()
            .find_map(|l| l.strip_prefix("statico: admin on http://"))
            .and_then(|l| l.split('/').next())
            .unwrap_or_else(|| panic!("no admin line:\n{}", self.stderr()))
            .to_string()
    }

    /// The body of a GET for `path` on the `--metrics` listener.
    pub fn scrape(&self, path: &str) -> String {
        let url = format!("http://{}{path}", self.metrics_addr());
        ureq::get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    }

    /// Waits until standard output contains `needle`, or fails.
    pub fn wait_stdout(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let out = self.stdout();
            if out.contains(needle) {
                return out;
            }
            assert!(
                start.elapsed() < WAIT,
                "stdout never contained {needle:?}:\n{out}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn stop(self) -> Stopped {
        signal(self.pid(), "TERM");
        self.stop_after_signal()
    }

    /// Waits for the exit after a signal the test sent itself.
    pub fn stop_after_signal(mut self) -> Stopped {
        let child = self.child.as_mut().unwrap();
        let status = wait_timeout(child, WAIT).expect("statico exits after SIGTERM");
        // Let the pipe readers drain.
        thread::sleep(Duration::from_millis(50));
        self.child = None;
        Stopped {
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }
}

impl Drop for Server {
    /// A test that did not stop its server still stops it cleanly (SIGTERM, so BPF pins and XDP
    /// attachments are removed), and kills it only if it does not exit in time.
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if child.try_wait().ok().flatten().is_none() {
                signal(child.id(), "TERM");
            }
            if wait_timeout(child, WAIT).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Sends a signal by name to a process we started.
pub fn signal(pid: u32, name: &str) {
    #[cfg(target_os = "linux")]
    {
        let sig = match name {
            "TERM" => libc::SIGTERM,
            "INT" => libc::SIGINT,
            "HUP" => libc::SIGHUP,
            "KILL" => libc::SIGKILL,
            other => panic!("unknown signal {other}"),
        };
        // SAFETY: kill(2) on a child process this harness started.
        let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(
            rc,
            0,
            "kill -{name} {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    #[cfg(not(target_os = "linux"))]
    {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{name} {pid} failed");
    }
}

pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Runs statico with `args` expecting it to exit by itself (a start-up error); returns
/// (exit code, stderr).
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args);
    exit_of(cmd)
}

/// Runs `cmd` (a prepared statico command) expecting it to exit by itself; returns (exit code,
/// stderr). Fails if it keeps running past [`WAIT`].
pub fn exit_of(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn statico");
    let status = wait_timeout(&mut child, WAIT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} kept running; it should have exited with an error");
    }
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.unwrap().code(), err)
}

/// One parsed HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// Reads HTTP responses off a socket, keeping what it read past the last one.
pub struct Reader {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    pub fn new(stream: TcpStream) -> Self {
        Reader {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send to statico");
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 65536];
        let n = loop {
            match self.stream.read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.expect("read from statico"),
            }
        };
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// Reads one response; `head_only` for responses to HEAD (no body whatever Content-Length says).
    pub fn response(&mut self, head_only: bool) -> Response {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            assert!(
                self.fill() > 0,
                "connection closed before a response head; got {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).expect("ASCII head");
        let status: u16 = head[9..12].parse().expect("status code");
        let mut r = Response {
            status,
            head,
            body: Vec::new(),
        };
        let len: usize = if head_only || status == 100 || status == 204 || status == 304 {
            0
        } else {
            r.header("content-length").map_or(0, |v| v.parse().unwrap())
        };
        while self.buf.len() < head_end + len {
            assert!(self.fill() > 0, "connection closed inside a body");
        }
        r.body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        r
    }

    /// Reads until the server closes the connection; returns what came (after any kept bytes).
    /// Fails if the server keeps the connection open past [`WAIT`].
    pub fn until_closed(&mut self) -> Vec<u8> {
        let start = Instant::now();
        loop {
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return std::mem::take(&mut self.buf),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return std::mem::take(&mut self.buf)
                }
                Err(e) => panic!("server did not close the connection within {WAIT:?}: {e}"),
            }
            assert!(start.elapsed() < WAIT * 2, "server keeps sending");
        }
    }

    /// True if nothing arrives within `d` and the connection is still open.
    pub fn quiet_for(&mut self, d: Duration) -> bool {
        self.stream.set_read_timeout(Some(d)).unwrap();
        let mut chunk = [0u8; 1024];
        let quiet = match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                false
            }
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        self.stream.set_read_timeout(Some(WAIT)).unwrap();
        quiet
    }
}

/// A fresh, empty directory for one test's files: `statico-PREFIX-NAME-PID` under the temp dir.
pub fn scratch_dir(prefix: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("statico-{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A process's resident memory in KiB (VmRSS of /proc/PID/status), to bound what clients make the
/// server hold.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Runs h2spec (every case, `-t -k` over TLS) against 127.0.0.1:`port` and fails the test unless all
/// pass. h2spec is installed by `cargo xtask setup` with `go install` (into $GOBIN or ~/go/bin).
pub fn h2spec_passes(port: u16, tls: bool) {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let h2spec = std::env::var_os("GOBIN")
        .map(PathBuf::from)
        .into_iter()
        .chain([home.join("go/bin")])
        .map(|d| d.join("h2spec"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| "h2spec".into());
    let mut cmd = Command::new(h2spec);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let out = cmd
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--timeout", "5"])
        .output()
        .expect("h2spec (installed by cargo xtask setup)");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_default();
    assert!(
        out.status.success() && summary.contains(" 0 failed"),
        "h2spec{}: {summary}\n{text}",
        if tls { " over TLS" } else { "" }
    );
}

/// Whether the tests run as root (privileged tests print `SKIPPED: … needs root` otherwise).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A GET request for `path` with a Host header.
pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
}

/// Runs an external client (curl, …) and returns (success, stdout, stderr).
pub fn run_client(program: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} (install it with `cargo xtask setup`): {e}")
        });
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs statico with `args` on a port another socket holds, expecting a flag error: exit 2 (before
/// binding the port; binding first would fail with exit 1), in one line (clap's hint aside); the line.
pub fn refused_in_one_line(args: &[&str]) -> String {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let all = [&["-a", "127.0.0.1", "-p", &port][..], args].concat();
    let (code, err) = run_to_exit(&all);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line: {err}");
    lines[0].to_string()
}

/// Reading figures out of statico's ground truth (JSON) and metrics page (Prometheus text).
pub mod figures {
    use std::time::{Duration, Instant};

    use serde_json::Value;

    use crate::Server;

    /// `/ground-truth.json` on `--metrics`, parsed.
    pub fn truth(s: &Server) -> Value {
        let text = s.scrape("/ground-truth.json");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// `/ground-truth` on `--admin`: the control API's copy of [`truth`], parsed.
    pub fn admin_truth(s: &Server) -> Value {
        let url = format!("http://{}/ground-truth", s.admin_addr());
        let text = ureq::get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// Polls the ground truth until `ready` holds (the truth of an answer is recorded as it is sent,
    /// so a client can read its answer a moment before the truth counts it), for up to 3 s; returns
    /// the last.
    pub fn truth_when(s: &Server, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let t = truth(s);
            if ready(&t) || Instant::now() > deadline {
                return t;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The ground truth's entry for route `name`.
    pub fn entry<'a>(truth: &'a Value, name: &str) -> &'a Value {
        (truth["routes"].as_array())
            .and_then(|rs| rs.iter().find(|r| r["route"] == name))
            .unwrap_or_else(|| panic!("no route {name} in {truth}"))
    }

    /// The number at `path` (keys) inside `v`.
    pub fn num(v: &Value, path: &[&str]) -> f64 {
        let mut at = v;
        for key in path {
            at = &at[*key];
        }
        at.as_f64()
            .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
    }

    /// How many requests of a route's entry had `outcome` (0 if the outcome is not listed).
    pub fn outcome(entry: &Value, outcome: &str) -> u64 {
        entry["outcomes"][outcome].as_u64().unwrap_or(0)
    }

    /// The value of one Prometheus series given in full, e.g. `statico_pool_queued{pool="db"}`.
    pub fn series(page: &str, name: &str) -> Option<f64> {
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// The sum over workers of a per-worker counter, e.g. `statico_requests_total`.
    pub fn counter(page: &str, name: &str) -> f64 {
        page.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// Whether the statico under test is built with AddressSanitizer (`STATICO_ASAN`, set by
/// `cargo xtask test --asan`).
pub fn under_asan() -> bool {
    std::env::var_os("STATICO_ASAN").is_some()
}

/// A bound on statico's memory (RSS): asserted, except under AddressSanitizer, whose shadow memory,
/// redzones and quarantine make a process's RSS several times its own — there the run is for memory
/// errors, and a bound not held is printed rather than failed.
#[macro_export]
macro_rules! assert_memory {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            if $crate::under_asan() {
                eprintln!("under AddressSanitizer, a memory bound not held: {}", format!($($arg)+));
            } else {
                panic!($($arg)+);
            }
        }
    };
}
