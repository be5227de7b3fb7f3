//! `--http3`: HTTP/3 over QUIC on the runtime under test, with a real quinn + h3 client that trusts
//! the self-signed certificate statico saves: many requests and concurrent streams on one connection,
//! HEAD, Alt-Svc on HTTPS responses, the start-up error without a certificate, garbage datagrams, the
//! idle timeout, `--root`, the counters, a drain on SIGTERM, and (as root, two workers) a client whose
//! source port moves eight times keeping its connection, steered by connection ID.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use statico_tests::{rss_kib, run_client, run_to_exit, Server};

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One request's stream on a client connection.
pub(crate) type RequestStream = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// A fresh directory for this test's files.
pub(crate) fn scratch(name: &str) -> PathBuf {
    statico_tests::scratch_dir("h3", name)
}

/// statico with `--http3` and a self-signed certificate saved in `dir`.
pub(crate) fn start(dir: &Path, extra: &[&str]) -> Server {
    let out = dir.to_str().unwrap();
    let tls = ["--tls-self-signed", "--tls-self-signed-out", out, "--http3"];
    Server::start(&[&tls[..], extra].concat())
}

pub(crate) use statico_tests::wire::runtime;

/// A QUIC client endpoint that trusts `dir/cert.pem` and offers `alpn`.
pub(crate) fn client(dir: &Path, alpn: &[u8]) -> quinn::Endpoint {
    let tls = client_tls(dir, alpn, rustls::crypto::aws_lc_rs::default_provider());
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint
}

/// A TLS 1.3 client configuration over `provider` that trusts `dir/cert.pem` and offers `alpn`.
pub(crate) fn client_tls(
    dir: &Path,
    alpn: &[u8],
    provider: rustls::crypto::CryptoProvider,
) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![alpn.to_vec()];
    tls
}

/// An HTTP/3 connection to `addr` from a fresh client endpoint (see [`connect_from`]).
pub(crate) async fn connect(dir: &Path, addr: SocketAddr) -> (quinn::Connection, SendRequest) {
    connect_from(&client(dir, b"h3"), addr).await
}

/// An HTTP/3 connection to `addr` from `endpoint`, which the caller may keep (to rebind it); the
/// driver runs as a task of the current runtime and holds the endpoint until the connection ends.
pub(crate) async fn connect_from(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
) -> (quinn::Connection, SendRequest) {
    let conn = endpoint
        .connect(addr, "localhost")
        .unwrap()
        .await
        .expect("QUIC handshake");
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .expect("HTTP/3 connection");
    let endpoint = endpoint.clone();
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        drop(endpoint);
    });
    (conn, send)
}

/// One request: the response head and the body.
pub(crate) async fn request(
    send: &mut SendRequest,
    method: &str,
    path: &str,
) -> (http::Response<()>, Vec<u8>) {
    try_request(send, method, path).await.unwrap()
}

/// One request, or the step at which it failed.
async fn try_request(
    send: &mut SendRequest,
    method: &str,
    path: &str,
) -> Result<(http::Response<()>, Vec<u8>), String> {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let fail = |step: &'static str| move |e: h3::error::StreamError| format!("{step}: {e}");
    let mut stream = send.send_request(req).await.map_err(fail("send"))?;
    stream.finish().await.map_err(fail("finish"))?;
    let response = stream.recv_response().await.map_err(fail("head"))?;
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.map_err(fail("body"))? {
        body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    Ok((response, body))
}

/// Each piece of the body of `stream`'s answer (its head read) with when it came since `sent`, the
/// whole body within [`statico_tests::WAIT`].
pub(crate) async fn timed_pieces(
    stream: &mut RequestStream,
    sent: Instant,
) -> Vec<(String, Duration)> {
    let mut pieces = Vec::new();
    let read = async {
        while let Some(mut piece) = stream.recv_data().await.expect("body") {
            let bytes = piece.copy_to_bytes(piece.remaining());
            pieces.push((String::from_utf8_lossy(&bytes).into(), sent.elapsed()));
        }
    };
    tokio::time::timeout(statico_tests::WAIT, read)
        .await
        .expect("the body ends");
    pieces
}

fn header(r: &http::Response<()>, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

#[test]
fn two_hundred_requests_over_one_connection_twenty_streams_at_a_time() {
    let dir = scratch("many");
    let s = start(
        &dir,
        &[
            "-b",
            "hello h3",
            "-H",
            "Content-Type: text/plain",
            "-H",
            "X-Test: yes",
        ],
    );
    let line = s.stderr();
    let port = s.addr.port();
    assert!(line.contains(&format!("and h3 on udp/{port}")), "{line}");
    runtime().block_on(async {
        let (_conn, send) = connect(&dir, s.addr).await;
        for _ in 0..10 {
            let mut streams = tokio::task::JoinSet::new();
            for _ in 0..20 {
                let mut send = send.clone();
                streams.spawn(async move { request(&mut send, "GET", "/x").await });
            }
            while let Some(answer) = streams.join_next().await {
                let (r, body) = answer.unwrap();
                assert_eq!(r.status(), 200);
                assert_eq!(header(&r, "content-type").as_deref(), Some("text/plain"));
                assert_eq!(header(&r, "x-test").as_deref(), Some("yes"));
                assert_eq!(header(&r, "content-length").as_deref(), Some("8"));
                assert!(header(&r, "date").is_some());
                assert_eq!(body, b"hello h3");
            }
        }
    });
    let stopped = s.stop();
    assert_eq!(stopped.total("quic_requests"), 200);
    assert_eq!(stopped.total("quic_conns"), 1);
}

#[test]
fn head_gets_the_head_and_no_body() {
    let dir = scratch("head");
    let s = start(&dir, &["-b", "twelve bytes", "-v"]);
    runtime().block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        let (r, body) = request(&mut send, "HEAD", "/").await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "content-length").as_deref(), Some("12"));
        assert!(body.is_empty(), "HEAD got a body: {body:?}");
        let (_, body) = request(&mut send, "GET", "/").await;
        assert_eq!(body, b"twelve bytes");
    });
    // -v prints HTTP/3 requests and statuses as it does HTTP/2's.
    let out = s.wait_stdout("GET https://localhost/ HTTP/3");
    assert!(out.contains("HEAD https://localhost/ HTTP/3"), "{out}");
    assert!(out.contains("↪ response (HTTP/3): 200 OK"), "{out}");
}

/// The response head curl gets over HTTPS (HTTP/1.1).
fn curl_head(port: u16) -> String {
    let url = format!("https://127.0.0.1:{port}/");
    let (ok, out, err) = run_client("curl", &["-sk", "--http1.1", "-D-", "-o/dev/null", &url]);
    assert!(ok, "curl: {err}");
    out.to_ascii_lowercase()
}

#[test]
fn https_responses_advertise_h3_with_alt_svc_only_with_http3() {
    let dir = scratch("altsvc");
    let s = start(&dir, &["-b", "ok"]);
    let head = curl_head(s.addr.port());
    let want = format!("alt-svc: h3=\":{}\"", s.addr.port());
    assert!(head.contains(&want), "{head}");
    drop(s);
    // HTTP/2 (ALPN h2) carries it too.
    let h2 = start(&dir, &["-b", "ok", "--http2"]);
    let url = format!("https://127.0.0.1:{}/", h2.addr.port());
    let (ok, out, err) = run_client("curl", &["-sk", "--http2", "-D-", "-o/dev/null", &url]);
    assert!(ok, "curl: {err}");
    let want = format!("alt-svc: h3=\":{}\"", h2.addr.port());
    assert!(
        out.starts_with("HTTP/2 200") && out.contains(&want),
        "{out}"
    );
    drop(h2);
    let plain = Server::start(&["--tls-self-signed", "-b", "ok"]);
    let head = curl_head(plain.addr.port());
    assert!(
        head.starts_with("http/1.1 200") && !head.contains("alt-svc"),
        "{head}"
    );
}

#[test]
fn http3_without_a_certificate_is_refused_with_the_flag_and_the_fix() {
    let (code, err) = run_to_exit(&["--http3", "-a", "127.0.0.1", "-p", "0"]);
    assert_eq!(code, Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("--http3") && lines[0].contains("--tls-self-signed"),
        "{err}"
    );
}

/// Sizes and bytes from a fixed xorshift, so a failure can be replayed.
pub(crate) fn garbage(seed: &mut u64) -> Vec<u8> {
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let len = 1 + (next() % 1500) as usize;
    (0..len).map(|_| next() as u8).collect()
}

#[test]
fn garbage_datagrams_are_dropped_and_the_server_goes_on_without_growing() {
    let dir = scratch("garbage");
    let s = start(&dir, &["-b", "still here"]);
    let rt = runtime();
    rt.block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        assert_eq!(request(&mut send, "GET", "/").await.1, b"still here");
    });
    let before = rss_kib(s.pid());
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    for i in 0..1000 {
        udp.send_to(&garbage(&mut seed), s.addr).unwrap();
        if i % 100 == 99 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    rt.block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        let (r, body) = request(&mut send, "GET", "/").await;
        assert_eq!(
            (r.status().as_u16(), body.as_slice()),
            (200, &b"still here"[..])
        );
    });
    let grown = rss_kib(s.pid()).saturating_sub(before);
    statico_tests::assert_memory!(grown < 4096, "RSS grew by {grown} KiB after garbage");
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let dir = scratch("idle");
    let s = start(&dir, &["--idle-timeout", "1s"]);
    runtime().block_on(async {
        let (conn, mut send) = connect(&dir, s.addr).await;
        assert_eq!(request(&mut send, "GET", "/").await.0.status(), 200);
        let idle_from = Instant::now();
        let why = tokio::time::timeout(Duration::from_secs(10), conn.closed())
            .await
            .expect("the connection was never closed");
        let after = idle_from.elapsed();
        assert!(
            after >= Duration::from_millis(900) && after <= Duration::from_secs(3),
            "closed after {after:?}: {why}"
        );
        assert!(crate::http3_hostile::idle_close(&why), "{why}");
    });
}

#[test]
fn root_serves_a_files_bytes_over_http3() {
    let dir = scratch("root");
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    let bytes: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(site.join("data.bin"), &bytes).unwrap();
    std::fs::write(site.join("index.html"), "<p>home</p>").unwrap();
    let s = start(&dir, &["--root", site.to_str().unwrap()]);
    runtime().block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        let (r, body) = request(&mut send, "GET", "/data.bin").await;
        assert_eq!(r.status(), 200);
        assert_eq!(body.len(), bytes.len());
        assert!(body == bytes, "the file's bytes differ");
        let (r, body) = request(&mut send, "GET", "/").await;
        assert_eq!(
            (r.status().as_u16(), body.as_slice()),
            (200, &b"<p>home</p>"[..])
        );
        assert!(header(&r, "content-type").unwrap().starts_with("text/html"));
        // The site's answers are made with the same fields as HTTPS ones, Alt-Svc included.
        let want = format!("h3=\":{}\"", s.addr.port());
        assert_eq!(header(&r, "alt-svc"), Some(want));
        let (r, _) = request(&mut send, "GET", "/missing").await;
        assert_eq!(r.status(), 404);
    });
}

#[test]
fn the_totals_count_http3_connections_requests_bytes_and_failed_handshakes() {
    let dir = scratch("counters");
    let s = start(&dir, &["-b", "counted"]);
    runtime().block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        for _ in 0..7 {
            assert_eq!(request(&mut send, "GET", "/").await.1, b"counted");
        }
        // A client that offers only h2 shares no ALPN protocol with the QUIC port.
        let wrong = client(&dir, b"h2");
        let refused = wrong.connect(s.addr, "localhost").unwrap().await;
        assert!(refused.is_err(), "a handshake without h3 succeeded");
    });
    std::thread::sleep(Duration::from_millis(100));
    let stopped = s.stop();
    assert!(stopped.status.success());
    assert_eq!(stopped.total("quic_requests"), 7);
    assert_eq!(stopped.total("quic_conns"), 1);
    assert_eq!(stopped.total("quic_handshake_failures"), 1);
    assert_eq!(
        stopped.total("quic_retries"),
        0,
        "no flood, no --quic-retry"
    );
    assert!(stopped.total("quic_bytes_out") > 7 * 7);
    assert!(stopped.total("quic_bytes_in") > 0);
    assert_eq!(
        (stopped.total("requests"), stopped.total("responses")),
        (7, 7),
        "requests and responses count HTTP/3's too (no TCP request was made)"
    );
    assert!(
        stopped.total("tls_handshakes") == 0,
        "HTTPS: TLS counters shown"
    );
}

#[test]
fn sigterm_lets_a_request_in_flight_finish_then_the_process_exits() {
    let dir = scratch("drain");
    let s = start(
        &dir,
        &["-b", "late", "-d", "700ms", "--shutdown-timeout", "5s"],
    );
    let pid = s.pid();
    runtime().block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        let mut first = send.clone();
        let in_flight = tokio::spawn(async move { request(&mut first, "GET", "/").await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        statico_tests::signal(pid, "TERM");
        let (r, body) = in_flight.await.unwrap();
        assert_eq!((r.status().as_u16(), body.as_slice()), (200, &b"late"[..]));
        // GOAWAY came: a new request on the connection is not served.
        let late = try_request(&mut send, "GET", "/").await;
        assert!(
            late.is_err(),
            "a request after GOAWAY was answered: {late:?}"
        );
    });
    let started = Instant::now();
    let stopped = s.stop_after_signal();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(stopped.total("quic_requests"), 1);
}

#[test]
fn a_client_opening_more_than_100_streams_at_once_is_held_back_not_refused() {
    let dir = scratch("streams");
    let s = start(&dir, &["-b", "slow", "-d", "400ms"]);
    runtime().block_on(async {
        let (_conn, send) = connect(&dir, s.addr).await;
        let started = Instant::now();
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..150 {
            let mut send = send.clone();
            streams.spawn(async move { request(&mut send, "GET", "/").await });
        }
        while let Some(answer) = streams.join_next().await {
            assert_eq!(answer.unwrap().1, b"slow");
        }
        let took = started.elapsed();
        // 100 streams at once: the last 50 wait for the first ones, so two delays pass, not one.
        assert!(
            took >= Duration::from_millis(780) && took < Duration::from_secs(4),
            "150 requests took {took:?}"
        );
    });
}

/// Whether a QUIC handshake with ALPN h3 succeeds for a client that trusts only `ca/cert.pem`.
fn trusted_by(ca: &Path, addr: SocketAddr) -> bool {
    runtime().block_on(async {
        let endpoint = client(ca, b"h3");
        let ok = endpoint.connect(addr, "localhost").unwrap().await.is_ok();
        endpoint.wait_idle().await;
        ok
    })
}

#[test]
fn sighup_reloads_the_certificate_for_new_quic_handshakes_too() {
    let dir = scratch("reload");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
        drop(start(d, &[]));
    }
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::copy(a.join("cert.pem"), &cert).unwrap();
    std::fs::copy(a.join("key.pem"), &key).unwrap();
    let (c, k) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let s = Server::start(&["--tls-cert", c, "--tls-key", k, "--http3", "-b", "ok"]);
    assert!(
        trusted_by(&a, s.addr) && !trusted_by(&b, s.addr),
        "pair A in use"
    );
    std::fs::copy(b.join("cert.pem"), &cert).unwrap();
    std::fs::copy(b.join("key.pem"), &key).unwrap();
    statico_tests::signal(s.pid(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.stderr().contains("SIGHUP: reloaded") {
        assert!(Instant::now() < deadline, "no reload line:\n{}", s.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        trusted_by(&b, s.addr) && !trusted_by(&a, s.addr),
        "new QUIC clients get pair B"
    );
}

#[test]
fn a_udp_port_held_by_another_program_is_exit_code_1_with_the_fix() {
    // The port must be free for TCP and held for UDP. Other tests open thousands of client
    // connections meanwhile, and one may take the TCP port between our check and statico's bind:
    // that run says so (TCP in use) and is tried again with another port, at most three times.
    for _ in 0..3 {
        let (holder, port) = udp_port_free_for_tcp();
        let port = port.to_string();
        let args = [
            "--tls-self-signed",
            "--http3",
            "-a",
            "127.0.0.1",
            "-p",
            &port,
        ];
        let (code, err) = run_to_exit(&args);
        drop(holder);
        if err.contains(&format!("cannot listen on 127.0.0.1:{port}")) {
            continue; // the TCP port was taken by another test's client in between
        }
        assert_eq!(code, Some(1), "{err}");
        let line = err
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or_default();
        assert!(
            line.contains(&format!("udp/127.0.0.1:{port}")) && line.contains("-p"),
            "{err}"
        );
        return;
    }
    panic!("three ports in a row were taken for TCP before statico could bind them");
}

/// A UDP socket holding a port that was free for TCP a moment ago (the TCP reservation is dropped).
fn udp_port_free_for_tcp() -> (UdpSocket, u16) {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if let Ok(udp) = UdpSocket::bind(("127.0.0.1", port)) {
            return (udp, port);
        }
    }
}

#[test]
fn metrics_show_the_quic_counters_and_check_says_h3_would_be_served() {
    let dir = scratch("metrics");
    let s = start(&dir, &["--metrics", "127.0.0.1:0"]);
    runtime().block_on(async {
        let (_conn, mut send) = connect(&dir, s.addr).await;
        for _ in 0..3 {
            assert_eq!(request(&mut send, "GET", "/").await.0.status(), 200);
        }
    });
    let addr = s
        .stderr()
        .lines()
        .find_map(|l| {
            l.strip_prefix("statico: metrics on http://")?
                .strip_suffix("/metrics")
        })
        .map(str::to_string)
        .expect("the metrics line");
    let page = ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let requests: u64 = page
        .lines()
        .filter(|l| l.starts_with("statico_quic_requests_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(requests, 3, "{page}");
    assert!(page.contains("# HELP statico_quic_handshake_failures_total "));

    let args = [
        "--check",
        "--tls-self-signed",
        "--http3",
        "-a",
        "127.0.0.1",
        "-p",
        "0",
    ];
    let (code, err) = run_to_exit(&args);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(" and h3 on udp/") && err.contains("check: OK"),
        "{err}"
    );
}

/// The sum over CPUs of one field of the QUIC steering lines of the totals.
fn quic_steering_total(stderr: &str, field: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.starts_with("statico: quic steering cpu "))
        .filter_map(|l| l.split(&format!(" {field}=")).nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_client_whose_address_changes_keeps_its_connection_with_two_workers() {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: a_client_whose_address_changes… needs root (CAP_BPF + CAP_NET_ADMIN for the QUIC steering program); CI runs as root");
        return;
    }
    let dir = scratch("migrate");
    let s = start(&dir, &["-t", "2", "--steering", "ebpf", "-b", "moved"]);
    assert!(
        s.stderr().contains("quic steering: by connection ID"),
        "{}",
        s.stderr()
    );
    runtime().block_on(async {
        let endpoint = client(&dir, b"h3");
        let (conn, mut send) = connect_from(&endpoint, s.addr).await;
        // A client moves once its handshake is confirmed (RFC 9000 §9): one answer first.
        assert_eq!(request(&mut send, "GET", "/").await.1, b"moved");
        // Each new source port hashes anywhere among the two workers' sockets: without routing by
        // connection ID, 8 moves in a row would all reach the worker holding the connection 1 time
        // in 256.
        for moves in 0..8 {
            endpoint
                .rebind(UdpSocket::bind("127.0.0.1:0").unwrap())
                .unwrap();
            let answer =
                tokio::time::timeout(Duration::from_secs(3), try_request(&mut send, "GET", "/"));
            match answer.await {
                Ok(Ok((r, body))) => {
                    assert_eq!((r.status().as_u16(), &body[..]), (200, &b"moved"[..]))
                }
                other => panic!("after {} moves of the client's port: {other:?}", moves + 1),
            }
        }
        conn.close(0u32.into(), b"done");
    });
    let stopped = s.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert_eq!(stopped.total("quic_conns"), 1, "{}", stopped.stderr);
    assert_eq!(stopped.total("quic_requests"), 9);
    let by_id = quic_steering_total(&stopped.stderr, "by_id");
    assert!(
        by_id >= 8,
        "datagrams steered by connection ID: {by_id}\n{}",
        stopped.stderr
    );
}

/// A client socket that sends each datagram from the other of two CPUs (the thread is moved before
/// each send), one datagram a send: what a browser's network thread does when the scheduler moves it
/// between the two datagrams of its first flight. On loopback a datagram is handled on the CPU that
/// sends it.
#[derive(Debug)]
struct CpuHopping {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    sends: std::sync::atomic::AtomicUsize,
}

impl quinn::AsyncUdpSocket for CpuHopping {
    fn create_io_poller(self: Arc<Self>) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> std::io::Result<()> {
        let n = self
            .sends
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes a bit inside it, and
        // sched_setaffinity reads it for the calling thread (pid 0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(n % 2, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut std::task::Context,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        1
    }
}

#[test]
fn a_first_flight_of_two_datagrams_sent_from_two_cpus_reaches_one_worker() {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: a_first_flight_of_two_datagrams… needs root (CAP_BPF + CAP_NET_ADMIN for the QUIC steering program); CI runs as root");
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("SKIPPED: a_first_flight_of_two_datagrams… needs two CPUs");
        return;
    }
    let dir = scratch("two-cpus");
    let s = start(&dir, &["-t", "2", "--steering", "ebpf", "-b", "whole"]);
    runtime().block_on(async {
        // A post-quantum key share first, as Chromium sends it: the ClientHello takes two Initials.
        use rustls::crypto::aws_lc_rs::{default_provider, kx_group};
        let mut provider = default_provider();
        provider.kx_groups = vec![kx_group::X25519MLKEM768, kx_group::X25519];
        let tls = client_tls(&dir, b"h3", provider);
        let crypto = Arc::new(quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap());
        for attempt in 0..6usize {
            let runtime = Arc::new(quinn::TokioRuntime);
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.set_nonblocking(true).unwrap();
            let socket = Arc::new(CpuHopping {
                inner: quinn::Runtime::wrap_udp_socket(&*runtime, udp).unwrap(),
                sends: attempt.into(),
            });
            let mut endpoint = quinn::Endpoint::new_with_abstract_socket(
                quinn::EndpointConfig::default(),
                None,
                socket.clone(),
                runtime,
            )
            .unwrap();
            endpoint.set_default_client_config(quinn::ClientConfig::new(crypto.clone()));
            let handshake =
                tokio::time::timeout(Duration::from_secs(3), connect_from(&endpoint, s.addr));
            let (conn, mut send) = handshake
                .await
                .unwrap_or_else(|_| panic!("handshake {attempt} timed out"));
            assert_eq!(request(&mut send, "GET", "/").await.1, b"whole");
            conn.close(0u32.into(), b"done");
            assert!(socket.sends.load(std::sync::atomic::Ordering::Relaxed) >= 3);
        }
    });
    let stopped = s.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    // A worker holding half a ClientHello gives it up as a failed handshake.
    assert_eq!(
        (
            stopped.total("quic_conns"),
            stopped.total("quic_handshake_failures")
        ),
        (6, 0),
        "{}",
        stopped.stderr
    );
    assert!(
        quic_steering_total(&stopped.stderr, "by_hash") >= 12,
        "{}",
        stopped.stderr
    );
}

#[test]
fn without_steering_by_id_a_moved_client_gets_a_stateless_reset_at_once_not_a_hang() {
    let dir = scratch("migrate-reset");
    let s = start(&dir, &["-t", "2", "--steering", "reuseport", "-b", "moved"]);
    runtime().block_on(async {
        let endpoint = client(&dir, b"h3");
        let (conn, mut send) = connect_from(&endpoint, s.addr).await;
        assert_eq!(request(&mut send, "GET", "/").await.1, b"moved");
        // Sooner or later a new port hashes to the worker that does not hold the connection. Its
        // stateless reset is signed with the key both workers share, so the client trusts it.
        for _ in 0..32 {
            endpoint
                .rebind(UdpSocket::bind("127.0.0.1:0").unwrap())
                .unwrap();
            let at = Instant::now();
            let answer =
                tokio::time::timeout(Duration::from_secs(5), try_request(&mut send, "GET", "/"));
            match answer.await {
                Ok(Ok(_)) => continue,
                Ok(Err(_)) => {
                    let why = conn.close_reason().expect("closed");
                    assert!(matches!(why, quinn::ConnectionError::Reset), "{why}");
                    assert!(at.elapsed() < Duration::from_secs(2), "{:?}", at.elapsed());
                    return;
                }
                Err(_) => panic!("the moved client hung: no stateless reset it could verify"),
            }
        }
        panic!("32 moves all reached the worker holding the connection");
    });
}
