//! HTTPS as real TLS clients use it, on the runtime under test: a Rust (rustls) client that pipelines
//! a batch of requests in one record and gets the batch back in a few sends, wrk's load over TLS,
//! 10 000 idle TLS keep-alive connections held in bounded memory and all still served, and the bad
//! handshakes a public HTTPS port sees (an SSLv2-format hello, an SSLv3-only hello, an oversized hello
//! record, a half hello then a reset, a reset right after a finished handshake): each is closed quickly,
//! counted by cause, and the server goes on serving.
//!
//! `tls.rs` covers the server's own TLS features (certificates, versions, ALPN, tickets, reloads) with
//! curl and openssl; this file is about what clients do to it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use statico_tests::{get, run_client, Server};

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// A fresh directory for this test's certificate files.
fn scratch(name: &str) -> PathBuf {
    statico_tests::scratch_dir("tlsc", name)
}

/// statico with a self-signed certificate saved in `dir`.
fn start(dir: &Path, extra: &[&str]) -> Server {
    let out = dir.to_str().unwrap();
    Server::start(&[&["--tls-self-signed", "--tls-self-signed-out", out], extra].concat())
}

/// A rustls client configuration that trusts only the certificate statico saved in `dir`.
fn client_config(dir: &Path) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("cert.pem")).expect("cert.pem") {
        roots.add(cert.expect("a PEM certificate")).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to `s` with its handshake done (the certificate verified for `localhost`).
fn tls_connect(s: &Server, config: &Arc<ClientConfig>) -> Tls {
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(config.clone(), name).unwrap();
    let mut tls = StreamOwned::new(conn, s.connect());
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .expect("TLS handshake with statico");
    }
    tls
}

/// Reads `n` complete responses (head, then a body of Content-Length bytes) off `r`, each returned as
/// (head, body); fails if the connection ends first.
fn read_responses(r: &mut impl Read, n: usize) -> Vec<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut chunk = [0u8; 16384];
    while out.len() < n {
        let parsed = buf.windows(4).position(|w| w == b"\r\n\r\n").and_then(|i| {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .unwrap_or(0);
            (buf.len() >= i + 4 + len).then_some((head, i + 4, len))
        });
        if let Some((head, body_at, len)) = parsed {
            out.push((head, buf[body_at..body_at + len].to_vec()));
            buf.drain(..body_at + len);
            continue;
        }
        let got = r.read(&mut chunk).unwrap_or_else(|e| {
            panic!(
                "reading response {} of {n}: {e}; have {:?}",
                out.len() + 1,
                String::from_utf8_lossy(&buf)
            )
        });
        assert!(
            got > 0,
            "connection closed after {} of {n} responses; have {:?}",
            out.len(),
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..got]);
    }
    assert!(
        buf.is_empty(),
        "bytes past the last response: {:?}",
        String::from_utf8_lossy(&buf)
    );
    out
}

/// What the server spent on one connection that pipelined a batch.
struct Batch {
    /// The socket's sends (`writes`): the handshake's flight, session tickets, the answers.
    writes: u64,
    /// Bytes on the wire beyond the HTTP bytes: the handshake, and each record's header and tag.
    tls_overhead: u64,
}

/// One connection: a handshake, then `requests` GETs in a single write (one record), every answer
/// read; then the client hangs up and the server stops.
fn one_batch(requests: usize) -> Batch {
    let dir = scratch(&format!("batch{requests}"));
    let s = start(&dir, &["-b", "pipe!"]);
    let mut tls = tls_connect(&s, &client_config(&dir));
    let batch: Vec<u8> = (0..requests)
        .flat_map(|i| get(&format!("/batch/{i}")))
        .collect();
    tls.write_all(&batch).unwrap();
    tls.flush().unwrap();
    let responses = read_responses(&mut tls, requests);
    for (i, (head, body)) in responses.iter().enumerate() {
        assert!(
            head.starts_with("HTTP/1.1 200 OK\r\n"),
            "response {i}: {head}"
        );
        assert_eq!(body, b"pipe!", "response {i}");
    }
    // Nothing else follows the batch.
    tls.sock
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut extra = [0u8; 64];
    match tls.read(&mut extra) {
        Ok(n) => assert_eq!(n, 0, "more than {requests} responses: {:?}", &extra[..n]),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    drop(tls);
    std::thread::sleep(Duration::from_millis(100));
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), requests as u64);
    assert_eq!(stopped.total("responses"), requests as u64);
    assert_eq!(stopped.total("tls_handshakes"), 1);
    assert_eq!(stopped.total("conns_accepted"), 1);
    Batch {
        writes: stopped.total("writes"),
        tls_overhead: stopped.total("tls_bytes_out") - stopped.total("bytes_out"),
    }
}

#[test]
fn a_rustls_client_pipelining_16_requests_in_one_record_gets_them_back_in_a_few_sends() {
    let one = one_batch(1);
    let sixteen = one_batch(16);
    eprintln!(
        "{}: writes for 1 request {}, for 16 pipelined {}; TLS bytes beyond HTTP {} and {}",
        statico_tests::runtime(),
        one.writes,
        sixteen.writes,
        one.tls_overhead,
        sixteen.tls_overhead
    );
    // The answers to a batch read at once go out together: as many sends as for one request (one more
    // if a send was still in flight), not one per request.
    assert!(
        sixteen.writes <= one.writes + 1 && sixteen.writes <= 4,
        "16 pipelined requests took {} writes, a single request {}",
        sixteen.writes,
        one.writes
    );
    // And in one TLS record (at most two): each record costs 22 bytes (header, content type, tag), so
    // 16 records would add 330 bytes. The handshakes differ by a few bytes (new certificates, ECDSA
    // signatures of varying length).
    assert!(
        sixteen.tls_overhead <= one.tls_overhead + 22 + 12,
        "16 pipelined answers took {} more bytes of TLS framing than one",
        sixteen.tls_overhead as i64 - one.tls_overhead as i64
    );
}

#[test]
fn wrk_over_https_gets_only_2xx_with_one_handshake_per_connection() {
    let dir = scratch("wrk");
    let s = start(&dir, &["-b", "wrk"]);
    let url = format!("https://127.0.0.1:{}/", s.addr.port());
    let (ok, out, err) = run_client("wrk", &["-t1", "-c8", "-d1s", &url]);
    assert!(ok, "wrk failed: {out}{err}");
    let requests: u64 = out
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no request count in wrk's output:\n{out}{err}"));
    assert!(requests > 100, "only {requests} requests in 1 s:\n{out}");
    assert!(!out.contains("Socket errors"), "{out}");
    assert!(!out.contains("Non-2xx"), "{out}");
    let stopped = s.stop();
    assert!(
        stopped.total("requests") >= requests,
        "server counted {} requests, wrk {requests}",
        stopped.total("requests")
    );
    // Eight keep-alive connections, each with one full handshake, none failed; plus wrk's probe of the
    // address before the run, a connection closed without a byte (not a TLS failure).
    assert_eq!(stopped.total("tls_handshakes"), 8, "{out}");
    assert_eq!(stopped.total("conns_accepted"), 9, "{out}");
    assert_eq!(stopped.total("conns_closed"), 9);
    assert_eq!(stopped.total("tls_failures"), 0);
    assert_eq!(stopped.total("status_400"), 0);
}

#[test]
fn ten_thousand_idle_tls_keep_alive_connections_in_bounded_memory_all_still_served() {
    const N: usize = 10_000;
    let _many = statico_tests::many_connections();
    let dir = scratch("idle10k");
    let s = start(
        &dir,
        &[
            "-b",
            "idle",
            "--listen-backlog",
            "16384",
            "--idle-timeout",
            "120s",
        ],
    );
    let config = client_config(&dir);
    let began = Instant::now();
    let before = statico_tests::rss_kib(s.pid());
    let mut conns: Vec<Tls> = Vec::with_capacity(N);
    for i in 0..N {
        let mut tls = tls_connect(&s, &config);
        tls.write_all(&get("/")).unwrap();
        let r = read_responses(&mut tls, 1);
        assert_eq!(r[0].1, b"idle", "connection {i}");
        conns.push(tls);
    }
    let opened = began.elapsed();
    // Let the workers settle (freed handshake buffers returned, nothing in flight).
    std::thread::sleep(Duration::from_millis(300));
    let idle = statico_tests::rss_kib(s.pid());
    let per_conn = idle.saturating_sub(before) as f64 / N as f64;
    eprintln!(
        "{}: {N} idle TLS connections: RSS {before} KiB → {idle} KiB, {per_conn:.1} KiB each; \
         opened in {opened:.1?}",
        statico_tests::runtime()
    );
    // A session holds rustls' state and small buffers while idle; a full 16 KiB record buffer per
    // connection would cost more than this.
    statico_tests::assert_memory!(
        per_conn < 14.0,
        "{per_conn:.1} KiB per idle TLS connection (RSS {before} KiB → {idle} KiB)"
    );
    // The server kept every connection: each answers a second request.
    for c in conns.iter_mut() {
        c.write_all(&get("/again")).unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let r = read_responses(c, 1);
        assert!(
            r[0].0.starts_with("HTTP/1.1 200"),
            "connection {i}: {}",
            r[0].0
        );
        assert_eq!(r[0].1, b"idle", "connection {i}, second request");
    }
    drop(conns);
    eprintln!(
        "{}: {N} TLS connections, two requests each, in {:.1?}",
        statico_tests::runtime(),
        began.elapsed()
    );
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), N as u64);
    assert_eq!(stopped.total("tls_handshakes"), N as u64);
    assert_eq!(stopped.total("requests"), 2 * N as u64);
    assert_eq!(stopped.total("tls_failures"), 0);
}

/// Closes `c` with a reset (SO_LINGER 0) instead of a FIN.
fn reset(c: TcpStream) {
    socket2::SockRef::from(&c)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(c);
}

/// Sends `bytes` (ignoring a send the server refuses by closing), then reads until the server closes;
/// returns what came back and how long the close took.
fn send_and_wait_for_close(s: &Server, bytes: &[u8]) -> (Vec<u8>, Duration) {
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let sent_at = Instant::now();
    let _ = c.write_all(bytes);
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match c.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "not closed after {:?} ({e}); got {got:?}",
                sent_at.elapsed()
            ),
        }
    }
    (got, sent_at.elapsed())
}

/// curl, trusting the saved certificate, still gets `body`.
fn curl_still_served(s: &Server, dir: &Path, body: &str) {
    let cacert = dir.join("cert.pem");
    let url = format!("https://localhost:{}/", s.addr.port());
    let (ok, out, err) = run_client("curl", &["-sS", "--cacert", cacert.to_str().unwrap(), &url]);
    assert!(
        ok && out == body,
        "curl after the bad client: {out:?} {err}"
    );
}

/// A bad first flight: closed within 2 s with at most an alert, counted once under `cause`, and the
/// server still serves curl.
fn bad_hello_is_closed_and_counted(name: &str, hello: &[u8], cause: &str) {
    let dir = scratch(name);
    let s = start(&dir, &["-b", "still here"]);
    let (got, took) = send_and_wait_for_close(&s, hello);
    assert!(
        took < Duration::from_secs(2),
        "{name}: closed after {took:?}"
    );
    // An alert record is 7 bytes (content type 21); nothing else may come back.
    assert!(
        got.is_empty() || (got.len() == 7 && got[0] == 0x15),
        "{name}: expected at most an alert, got {got:02x?}"
    );
    eprintln!(
        "{}: {name}: closed in {took:?}, answer {got:02x?}",
        statico_tests::runtime()
    );
    curl_still_served(&s, &dir, "still here");
    let stopped = s.stop();
    assert_eq!(stopped.total("tls_failures"), 1, "{name}");
    assert_eq!(stopped.total(cause), 1, "{name}: counted as {cause}");
    assert_eq!(stopped.total("tls_handshakes"), 1, "{name}: curl's");
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

#[test]
fn an_sslv2_format_client_hello_is_closed_and_counted_as_a_bad_record() {
    // SSLv2 record header (2 bytes, high bit set, length 46), CLIENT-HELLO, version 0x0002, 21 bytes of
    // cipher specs, no session id, a 16-byte challenge.
    let mut hello = vec![
        0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10,
    ];
    hello.extend_from_slice(&[
        0x01, 0x00, 0x80, 0x02, 0x00, 0x80, 0x03, 0x00, 0x80, 0x04, 0x00, 0x80, 0x06, 0x00, 0x40,
        0x07, 0x00, 0xc0, 0x00, 0x00, 0x2f,
    ]);
    hello.extend_from_slice(&[0x5a; 16]);
    assert_eq!(hello.len(), 2 + 0x2e);
    bad_hello_is_closed_and_counted("sslv2", &hello, "tls_bad_record");
}

/// A TLS handshake record holding a ClientHello with `client_version`, `suites` and no extensions.
fn client_hello(record_version: u16, client_version: u16, suites: &[u16]) -> Vec<u8> {
    let mut body = client_version.to_be_bytes().to_vec();
    body.extend_from_slice(&[0x11; 32]); // random
    body.push(0); // no session id
    body.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
    for s in suites {
        body.extend_from_slice(&s.to_be_bytes());
    }
    body.extend_from_slice(&[0x01, 0x00]); // null compression only
    let mut hs = vec![0x01, 0x00];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut record = vec![0x16];
    record.extend_from_slice(&record_version.to_be_bytes());
    record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    record.extend_from_slice(&hs);
    record
}

#[test]
fn an_sslv3_only_client_hello_is_refused_as_nothing_in_common() {
    // SSL 3.0 in the record and the hello, and SSL 3.0 era suites (AES128-SHA, DES-CBC3-SHA).
    let hello = client_hello(0x0300, 0x0300, &[0x002f, 0x000a]);
    bad_hello_is_closed_and_counted("sslv3", &hello, "tls_no_common");
}

#[test]
fn an_oversized_client_hello_record_is_closed_and_counted_as_a_bad_record() {
    // A handshake record claiming 18 000 bytes (plaintext records hold at most 16 384), and that many
    // bytes sent (the server may close before they are all in).
    const LEN: usize = 18_000;
    let mut hello = vec![0x16, 0x03, 0x01];
    hello.extend_from_slice(&(LEN as u16).to_be_bytes());
    hello.extend_from_slice(&[0x01, 0x00]);
    hello.extend_from_slice(&((LEN - 4) as u16).to_be_bytes());
    hello.extend_from_slice(&[0x03, 0x03]);
    hello.resize(5 + LEN, 0);
    bad_hello_is_closed_and_counted("oversized", &hello, "tls_bad_record");
}

#[test]
fn a_half_client_hello_then_a_reset_is_counted_as_abandoned() {
    let dir = scratch("half-reset");
    let s = start(&dir, &["-b", "still here"]);
    let hello = client_hello(0x0301, 0x0303, &[0x1301, 0xc02b]);
    let mut c = s.connect();
    c.write_all(&hello[..hello.len() / 2]).unwrap();
    // Let the server read the half before the reset arrives.
    std::thread::sleep(Duration::from_millis(200));
    reset(c);
    std::thread::sleep(Duration::from_millis(200));
    curl_still_served(&s, &dir, "still here");
    let stopped = s.stop();
    assert_eq!(stopped.total("tls_failures"), 1);
    assert_eq!(stopped.total("tls_abandoned"), 1);
    assert_eq!(stopped.total("tls_handshakes"), 1, "curl's");
    assert_eq!(stopped.total("conns_accepted"), 2);
    assert_eq!(stopped.total("conns_closed"), 2);
}

/// The open-connection count of the latest meter line that also shows `handshakes` TLS handshakes.
fn open_conns_after(s: &Server, handshakes: usize) -> Option<u64> {
    let out = s.stdout();
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains(&format!("tls handshakes {handshakes} ")))?;
    let (_, rest) = line.split_once("conns")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn clients_that_reset_right_after_the_handshake_leave_no_connection_open() {
    let dir = scratch("reset-after");
    let s = start(&dir, &["-b", "ok", "-m"]);
    let config = client_config(&dir);
    // Ten reset right after the handshake, ten after one answered request.
    for i in 0..20 {
        let mut tls = tls_connect(&s, &config);
        if i % 2 == 1 {
            tls.write_all(&get("/")).unwrap();
            assert_eq!(read_responses(&mut tls, 1)[0].1, b"ok");
        }
        reset(tls.sock);
    }
    // The meter (once a second) shows every connection closed while the server runs, before any
    // shutdown drain could close them.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if open_conns_after(&s, 20) == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections still open after the resets:\n{}",
            s.stdout()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    curl_still_served(&s, &dir, "ok");
    let stopped = s.stop();
    assert_eq!(stopped.total("conns_accepted"), 21);
    assert_eq!(stopped.total("conns_closed"), 21);
    assert_eq!(stopped.total("tls_handshakes"), 21);
    assert_eq!(stopped.total("tls_failures"), 0);
    assert_eq!(stopped.total("requests"), 11);
}
