//! A server a run starts, behind one guard, [`ServerUnderTest`], which stops it by PID however the
//! run ends — an error return included — so that no run leaks a server; statico started and awaited
//! (its "listening on" line, then its port); and signals sent by PID.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::net::{free_port, wait_port};
use super::pinned;

/// A running server, stopped (SIGTERM, then reaped) when dropped.
pub struct ServerUnderTest {
    pub name: String,
    /// How it was started, for the report.
    pub command: String,
    pub child: Child,
    pub port: u16,
    /// It serves HTTPS.
    pub tls: bool,
}

impl ServerUnderTest {
    /// Spawns `cmd` and waits until it accepts connections on `port`; if it does not, it is stopped.
    pub fn spawn(name: &str, command: String, mut cmd: Command, port: u16) -> Result<Self> {
        let child = cmd.spawn().with_context(|| format!("start {name}"))?;
        let s = ServerUnderTest {
            name: name.to_string(),
            command,
            child,
            port,
            tls: false,
        };
        wait_port(port)?;
        Ok(s)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:PORT/`, or https for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }
}

impl Drop for ServerUnderTest {
    fn drop(&mut self) {
        stop(&mut self.child, STOP_GRACE);
    }
}

/// How long a server has to exit after SIGTERM (statico removes its BPF pins then) before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Stops `child` by its PID: SIGTERM, up to `grace` to exit, then SIGKILL; always reaped. A child
/// already reaped is not signalled (its PID may belong to another process by now).
fn stop(child: &mut Child, grace: Duration) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    let term = signal(child.id(), "-TERM");
    let deadline = Instant::now() + grace;
    while term.is_ok() && Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `kill SIGNAL PID` (`signal` as `-TERM`, `-HUP`, `-STOP`...).
pub fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .context("run kill")?;
    if !status.success() {
        bail!("kill {signal} {pid}: {status}");
    }
    Ok(())
}

/// The statico a run starts: `STATICO_BIN` (relative to `root`, or absolute), else the release build.
pub fn statico_bin(root: &Path) -> PathBuf {
    std::env::var_os("STATICO_BIN")
        .map_or_else(|| root.join("target/release/statico"), |bin| root.join(bin))
}

/// statico on a free loopback port with `args`, pinned to `cpus` if given: [`start_statico_on`].
pub fn start_statico(
    root: &Path,
    name: &str,
    cpus: Option<&str>,
    args: &[&str],
) -> Result<ServerUnderTest> {
    start_statico_on(root, name, cpus, free_port()?, args, None)
}

/// statico (see [`statico_bin`]) on 127.0.0.1:`port`: [`start_statico_from`].
pub fn start_statico_on(
    root: &Path,
    name: &str,
    cpus: Option<&str>,
    port: u16,
    args: &[&str],
    log: Option<&Path>,
) -> Result<ServerUnderTest> {
    start_statico_from(&statico_bin(root), name, cpus, port, args, log)
}

/// The statico at `bin` on 127.0.0.1:`port` with `args`, pinned to `cpus` if given, its stderr
/// copied to `log` if given. Waits for its "listening on" line and its port; if it exits first, the
/// error says what it printed.
pub fn start_statico_from(
    bin: &Path,
    name: &str,
    cpus: Option<&str>,
    port: u16,
    args: &[&str],
    log: Option<&Path>,
) -> Result<ServerUnderTest> {
    let port_s = port.to_string();
    let args: Vec<&str> = ["-a", "127.0.0.1", "-p", &port_s]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let log = log
        .map(|l| File::create(l).with_context(|| format!("create {}", l.display())))
        .transpose()?;
    let mut cmd = pinned(cpus, bin);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let prefix = cpus.map_or(String::new(), |c| format!("taskset -c {c} "));
    // In its guard from the start: every way out of here below stops it.
    let mut s = ServerUnderTest {
        name: name.to_string(),
        command: format!("{prefix}statico {}", args.join(" ")),
        tls: args.iter().any(|a| a.starts_with("--tls")),
        child: cmd.spawn().context("start statico")?,
        port,
    };
    let stderr = s.child.stderr.take().expect("piped");
    wait_listening(name, stderr, log)?;
    wait_port(port)?;
    Ok(s)
}

/// How long statico has to say it listens.
const LISTEN_LIMIT: Duration = Duration::from_secs(20);

/// Reads statico's stderr on a thread to its end (so that the server never blocks on a full pipe),
/// each line copied to `log` if given; returns once a line says "listening on", or fails with what
/// it printed if it ended first or said nothing of the kind within [`LISTEN_LIMIT`].
fn wait_listening(name: &str, stderr: ChildStderr, mut log: Option<File>) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut waiting = Some((tx, String::new()));
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(file) = &mut log {
                let _ = writeln!(file, "{line}");
            }
            if let Some((tx, said)) = &mut waiting {
                said.push_str(&line);
                said.push('\n');
                if line.contains("listening on") {
                    let _ = tx.send(Ok(()));
                    waiting = None;
                }
            }
        }
        if let Some((tx, said)) = waiting {
            let _ = tx.send(Err(said));
        }
    });
    match rx.recv_timeout(LISTEN_LIMIT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(said)) => bail!("{name} did not start: {said}"),
        Err(_) => bail!("{name} did not say it listens within {LISTEN_LIMIT:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn guarded(script: &str) -> ServerUnderTest {
        let child = Command::new("sh").args(["-c", script]).spawn().unwrap();
        ServerUnderTest {
            name: "sh".into(),
            command: script.into(),
            child,
            port: 0,
            tls: false,
        }
    }

    #[test]
    fn the_guard_stops_its_server_on_an_error_return() {
        let mut pid = 0;
        let mut failing = || -> Result<()> {
            let server = guarded("exec sleep 30");
            pid = server.pid();
            bail!("the bench failed")
        };
        assert!(failing().is_err());
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_server_that_ignores_sigterm_gets_sigkill_after_the_grace() {
        let mut server = guarded("trap '' TERM; exec sleep 30");
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        stop(&mut server.child, Duration::from_millis(200));
        assert!(start.elapsed() < Duration::from_secs(5));
        let status = server.child.try_wait().unwrap().expect("reaped");
        assert_eq!(status.signal(), Some(9));
    }

    /// `sh` printing `script`'s output on stderr, as statico prints its start-up lines.
    fn stderr_of(script: &str) -> (Child, ChildStderr) {
        let mut child = Command::new("sh")
            .args(["-c", &format!("{{ {script}; }} >&2")])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        (child, stderr)
    }

    #[test]
    fn listening_is_awaited_and_the_log_gets_every_line() {
        let log = std::env::temp_dir().join(format!("xtask-listening-{}.log", std::process::id()));
        let (mut child, stderr) =
            stderr_of("echo starting; echo 'listening on 127.0.0.1:1'; echo after");
        wait_listening("sh", stderr, Some(File::create(&log).unwrap())).unwrap();
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let logged = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert_eq!(logged, "starting\nlistening on 127.0.0.1:1\nafter\n");

        let (mut child, stderr) = stderr_of("echo 'error: bad flag'");
        let err = wait_listening("sh", stderr, None).unwrap_err().to_string();
        child.wait().unwrap();
        assert_eq!(err, "sh did not start: error: bad flag\n");
    }
}
