//! HTTPS (`--tls-*`) on the runtime under test: curl trusting the self-signed certificate statico
//! saved, openssl s_client for versions and ALPN, plain HTTP on the TLS port, a client that never
//! finishes its handshake, garbage instead of a ClientHello, and start-up errors that name the flag.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use statico_tests::{run_client, run_to_exit, Server};

/// A fresh directory for this test's certificate files.
fn scratch(name: &str) -> PathBuf {
    statico_tests::scratch_dir("tls", name)
}

/// statico with a self-signed certificate saved in `dir`.
fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
    let out = dir.to_str().unwrap();
    Server::start(&[&["--tls-self-signed", "--tls-self-signed-out", out], extra].concat())
}

fn https(s: &Server, path: &str) -> String {
    format!("https://localhost:{}{path}", s.addr.port())
}

#[test]
fn curl_trusts_the_saved_self_signed_certificate_and_keeps_the_connection() {
    let dir = scratch("curl");
    let s = start(&dir, &["-b", "secret", "-H", "X-Mock: yes"]);
    assert!(s.stderr().contains("SHA-256 fingerprint"), "{}", s.stderr());
    assert!(
        s.stderr().contains("listening on https://"),
        "{}",
        s.stderr()
    );
    let cacert = dir.join("cert.pem");
    let (ok, out, err) = run_client(
        "curl",
        &[
            "-sS",
            "-i",
            "--cacert",
            cacert.to_str().unwrap(),
            &https(&s, "/a"),
            &https(&s, "/b"),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 2, "{out}");
    assert!(
        out.contains("x-mock: yes") || out.contains("X-Mock: yes"),
        "{out}"
    );
    assert!(out.ends_with("secret"), "{out}");
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 2);
    assert_eq!(stopped.total("tls_handshakes"), 1);
    assert_eq!(stopped.total("tls_resumed"), 0);
    assert_eq!(stopped.total("tls_failures"), 0);
    assert_eq!(
        stopped.total("conns_accepted"),
        1,
        "two requests, one connection"
    );
    // The wire carries the handshake and the records' overhead on top of the HTTP bytes.
    let (wire_in, wire_out) = (
        stopped.total("tls_bytes_in"),
        stopped.total("tls_bytes_out"),
    );
    assert!(wire_in > stopped.total("bytes_in") + 200, "{wire_in}");
    assert!(wire_out > stopped.total("bytes_out") + 400, "{wire_out}");
}

#[test]
fn a_client_that_does_not_trust_the_certificate_is_counted_as_abandoned() {
    let dir = scratch("untrusted");
    let s = start(&dir, &[]);
    let (ok, _, err) = run_client("curl", &["-sS", &https(&s, "/")]);
    assert!(!ok && err.contains("certificate"), "{err}");
    // Half a ClientHello, then a close; and a client that connects and leaves without a byte (a TCP
    // health check, not a failure). Each waits for the server's close, so both are counted.
    for hello in [&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01][..], &[]] {
        let mut c = s.connect();
        c.write_all(hello).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = c.read_to_end(&mut Vec::new());
    }
    let stopped = s.stop();
    assert_eq!(stopped.total("tls_abandoned"), 2);
    assert_eq!(stopped.total("tls_failures"), 2);
    assert_eq!(stopped.total("tls_handshakes"), 0);
    assert_eq!(stopped.total("conns_closed"), 3);
}

/// `openssl s_client` against the server with `args`; returns its output.
fn s_client(s: &Server, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-ign_eof", // read the answer after stdin ends, until the server closes
            "-connect",
            &s.addr.to_string(),
            "-servername",
            "localhost",
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl (cargo xtask setup installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn openssl_sees_tls13_and_12_with_alpn_http11_and_tls_min_refuses_12() {
    let dir = scratch("openssl");
    let s = start(&dir, &["-b", "ok"]);
    let out = s_client(&s, &["-tls1_3", "-alpn", "http/1.1"]);
    assert!(
        out.contains("TLSv1.3") && out.contains("ALPN protocol: http/1.1"),
        "{out}"
    );
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}");
    let out = s_client(&s, &["-tls1_2"]);
    assert!(
        out.contains("TLSv1.2") && out.contains("HTTP/1.1 200 OK"),
        "{out}"
    );
    // TLS 1.0 and 1.1 are not spoken at all, and with --tls-min 1.3 neither is 1.2.
    let out = s_client(&s, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]);
    assert!(!out.contains("HTTP/1.1 200 OK"), "{out}");
    assert_eq!(s.stop().total("tls_no_common"), 1);
    let s = start(&dir, &["--tls-min", "1.3"]);
    let out = s_client(&s, &["-tls1_2"]);
    assert!(
        !out.contains("HTTP/1.1 200 OK") && out.contains("alert"),
        "{out}"
    );
    let stopped = s.stop();
    assert_eq!(stopped.total("tls_no_common"), 1);
    assert_eq!(stopped.total("tls_failures"), 1);
}

#[test]
fn plain_http_on_the_tls_port_gets_a_400_that_says_so() {
    let dir = scratch("plain");
    let s = start(&dir, &[]);
    let (ok, out, err) = run_client("curl", &["-sS", "-i", &s.url("/")]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("HTTP/1.1 400") && out.contains("HTTPS port"),
        "{out}"
    );
    let stopped = s.stop();
    assert_eq!(stopped.total("status_400"), 1);
    assert_eq!(stopped.total("tls_plain_http"), 1);
    assert_eq!(stopped.total("tls_failures"), 1);
}

#[test]
fn a_handshake_that_never_finishes_is_closed_at_the_header_timeout() {
    let dir = scratch("slow");
    let s = start(&dir, &["--header-timeout", "1s", "--idle-timeout", "30s"]);
    let mut c = s.connect();
    // The first bytes of a ClientHello record, then nothing.
    c.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "closed {waited:?} into the handshake"
    );
    let stopped = s.stop();
    assert_eq!(stopped.total("timeouts"), 1);
    assert_eq!(stopped.total("tls_timeouts"), 1);
    assert_eq!(stopped.total("tls_failures"), 1);
}

#[test]
fn garbage_instead_of_a_client_hello_is_closed_and_the_server_goes_on() {
    let dir = scratch("garbage");
    let s = start(&dir, &["-b", "fine"]);
    let mut c = s.connect();
    c.write_all(&[0x16, 0x03, 0x03, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef, 0x00])
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(got.len() < 64, "an alert at most: {got:?}");
    let (ok, out, err) = run_client(
        "curl",
        &[
            "-sS",
            "--cacert",
            dir.join("cert.pem").to_str().unwrap(),
            &https(&s, "/"),
        ],
    );
    assert!(ok && out == "fine", "{err}");
    let stopped = s.stop();
    assert_eq!(stopped.total("tls_failures"), 1);
    assert_eq!(stopped.total("tls_bad_record"), 1);
    assert_eq!(stopped.total("tls_handshakes"), 1);
}

#[test]
fn bad_tls_flags_are_refused_with_the_flag_and_the_fix() {
    let dir = scratch("flags");
    let missing = dir.join("missing.pem");
    let missing = missing.to_str().unwrap();
    let (code, err) = run_to_exit(&["--tls-cert", missing, "--tls-key", missing]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--tls-cert") && err.contains("cannot read"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--tls-cert", missing]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--tls-key"), "{err}");
    let (code, err) = run_to_exit(&[
        "--tls-self-signed",
        "--tls-cert",
        missing,
        "--tls-key",
        missing,
    ]);
    assert_eq!(code, Some(2), "{err}");
    // Two self-signed pairs: the key of one does not fit the certificate of the other.
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        drop(start(d, &[]));
    }
    let (cert, key) = (a.join("cert.pem"), b.join("key.pem"));
    let (code, err) = run_to_exit(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--tls-key does not fit --tls-cert"), "{err}");
    // A certificate file that holds no certificate.
    let (code, err) = run_to_exit(&[
        "--tls-cert",
        key.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no certificate"), "{err}");
    // The pair that fits starts.
    let s = Server::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        a.join("key.pem").to_str().unwrap(),
    ]);
    assert!(s.stderr().contains("listening on https://"));
}

#[test]
fn sessions_resume_with_tickets_and_not_with_tls_tickets_0() {
    let dir = scratch("resume");
    let sess = dir.join("session.pem");
    let sess = sess.to_str().unwrap();
    for (tickets, version) in [("2", "-tls1_3"), ("2", "-tls1_2"), ("0", "-tls1_3")] {
        let s = start(&dir, &["--tls-tickets", tickets]);
        let first = s_client(&s, &[version, "-sess_out", sess]);
        assert!(first.contains("HTTP/1.1 200 OK"), "{first}");
        let again = s_client(&s, &[version, "-sess_in", sess]);
        let reused = again.contains("Reused, TLS");
        assert_eq!(
            reused,
            tickets != "0",
            "--tls-tickets {tickets} {version}:\n{again}"
        );
        let stopped = s.stop();
        assert_eq!(stopped.total("tls_handshakes"), 2);
        assert_eq!(stopped.total("tls_resumed"), u64::from(reused));
    }
}

#[test]
fn http2_over_tls_by_alpn_passes_h2spec_and_curl() {
    let dir = scratch("h2");
    let s = start(&dir, &["--http2", "-b", "over h2"]);
    let cacert = dir.join("cert.pem");
    let cacert = cacert.to_str().unwrap();
    let (ok, out, err) = run_client("curl", &["-sS", "-i", "--cacert", cacert, &https(&s, "/")]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("HTTP/2 200") && out.ends_with("over h2"),
        "{out}"
    );
    let (ok, out, err) = run_client(
        "curl",
        &[
            "-sS",
            "-i",
            "--http1.1",
            "--cacert",
            cacert,
            &https(&s, "/"),
        ],
    );
    assert!(ok && out.starts_with("HTTP/1.1 200"), "{out}{err}");
    statico_tests::h2spec_passes(s.addr.port(), true);
}

/// An open TLS connection through `openssl s_client`: send requests, wait for answers.
struct OpenTls {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl OpenTls {
    fn connect(s: &Server) -> OpenTls {
        let mut child = Command::new("openssl")
            .args([
                "s_client",
                "-quiet",
                "-ign_eof",
                "-connect",
                &s.addr.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl (cargo xtask setup installs it)");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        OpenTls { child, lines }
    }

    /// Sends a GET and waits for a 200 status line.
    fn get_ok(&mut self) -> bool {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                // (The body has no newline: the next status line follows it on one line.)
                Ok(line) if line.contains("HTTP/1.1 200") => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }
}

impl Drop for OpenTls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sighup_reloads_the_certificate_for_new_clients_and_keeps_open_connections() {
    let dir = scratch("reload");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        drop(start(d, &[]));
    }
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::copy(a.join("cert.pem"), &cert).unwrap();
    std::fs::copy(a.join("key.pem"), &key).unwrap();
    let s = Server::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "-b",
        "ok",
    ]);
    let trusts = |ca: &std::path::Path| {
        run_client(
            "curl",
            &[
                "-sS",
                "--cacert",
                ca.join("cert.pem").to_str().unwrap(),
                &https(&s, "/"),
            ],
        )
        .0
    };
    assert!(trusts(&a) && !trusts(&b), "pair A in use");
    let mut open = OpenTls::connect(&s);
    assert!(open.get_ok(), "a request on the open connection");

    std::fs::copy(b.join("cert.pem"), &cert).unwrap();
    std::fs::copy(b.join("key.pem"), &key).unwrap();
    statico_tests::signal(s.pid(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.stderr().contains("SIGHUP: reloaded") {
        assert!(Instant::now() < deadline, "no reload line:\n{}", s.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(trusts(&b) && !trusts(&a), "new clients get pair B");
    assert!(
        open.get_ok(),
        "the connection opened before the reload still works"
    );

    // A bad new pair (A's certificate with B's key) keeps B, and says why.
    std::fs::copy(a.join("cert.pem"), &cert).unwrap();
    statico_tests::signal(s.pid(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.stderr().contains("SIGHUP: kept the certificate in use") {
        assert!(
            Instant::now() < deadline,
            "no refusal line:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(trusts(&b), "still pair B");
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no memory-safety preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn many_handshakes_then_hang_ups_leave_the_server_idle_and_every_connection_closed() {
    let dir = scratch("hangups");
    let s = start(&dir, &[]);
    // s_time: a full handshake per connection, then the client hangs up (no request).
    let out = Command::new("openssl")
        .args([
            "s_time",
            "-new",
            "-time",
            "1",
            "-connect",
            &s.addr.to_string(),
        ])
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("connections in"), "{text}");
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_seconds(s.pid());
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_seconds(s.pid()) - before;
    assert!(
        spent < 0.1,
        "the server spent {spent:.2} s of CPU in 1 s with no client"
    );
    let stopped = s.stop();
    assert!(stopped.total("conns_accepted") > 10, "{}", stopped.stderr);
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

#[test]
fn verbose_says_what_each_handshake_agreed_on() {
    let dir = scratch("verbose");
    let s = start(&dir, &["-v"]);
    let cacert = dir.join("cert.pem");
    let (ok, _, err) = run_client(
        "curl",
        &[
            "-sS",
            "--tlsv1.3",
            "--cacert",
            cacert.to_str().unwrap(),
            &https(&s, "/"),
        ],
    );
    assert!(ok, "{err}");
    let out = s.wait_stdout("↔ TLS:");
    let line = out.lines().find(|l| l.contains("↔ TLS:")).unwrap();
    assert!(
        line.contains("TLSv1_3") && line.contains("TLS13_") && line.contains("ALPN http/1.1"),
        "{line}"
    );
}

#[test]
fn a_tls12_renegotiation_attempt_is_refused_and_the_server_goes_on() {
    let dir = scratch("renegotiate");
    let s = start(&dir, &["-b", "after"]);
    // s_client's "R" command asks to renegotiate; statico answers with a no_renegotiation alert.
    let mut child = Command::new("openssl")
        .args(["s_client", "-tls1_2", "-connect", &s.addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl (cargo xtask setup installs it)");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stdin.write_all(b"R\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("RENEGOTIATING") && text.contains("no renegotiation"),
        "{text}"
    );
    let (ok, body, err) = run_client(
        "curl",
        &[
            "-sS",
            "--cacert",
            dir.join("cert.pem").to_str().unwrap(),
            &https(&s, "/"),
        ],
    );
    assert!(ok && body == "after", "{err}");
    let stopped = s.stop();
    assert_eq!(stopped.total("tls_handshakes"), 2);
    assert_eq!(stopped.total("conns_closed"), 2);
}

#[test]
fn testssl_finds_tls12_and_13_with_forward_secret_aead_only_and_no_known_vulnerability() {
    let dir = scratch("testssl");
    let s = start(&dir, &["--http2"]);
    // Protocols, cipher categories, forward secrecy, server preferences, vulnerabilities (~30 s).
    let target = s.addr.to_string();
    let (_, out, err) = run_client(
        "testssl",
        &[
            "--quiet",
            "--color",
            "0",
            "--warnings",
            "off",
            "-p",
            "-s",
            "-f",
            "-P",
            "-U",
            &target,
        ],
    );
    let out = out + &err;
    for line in [
        "SSLv2      not offered",
        "SSLv3      not offered",
        "TLS 1      not offered",
        "TLS 1.1    not offered",
        "TLS 1.2    offered",
        "TLS 1.3    offered",
        "NULL ciphers (no encryption)                  not offered",
        "Obsolete CBC ciphers (AES, ARIA etc.)         not offered",
        "Strong encryption (AEAD ciphers)              offered",
        "Has server cipher order?     yes",
        "Negotiated cipher            TLS_AES_128_GCM_SHA256",
        "Secure Client-Initiated Renegotiation     not vulnerable",
    ] {
        assert!(
            out.contains(line),
            "testssl did not report `{line}`:\n{out}"
        );
    }
    assert!(!out.contains("VULNERABLE"), "{out}");
    assert!(out.contains("ALPN/HTTP2 h2, http/1.1 (offered)"), "{out}");
}
