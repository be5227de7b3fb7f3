//! `--http2`: cleartext HTTP/2 next to HTTP/1.1 on one port, checked with h2spec (every case), curl (prior
//! knowledge and the `Upgrade: h2c` handshake) and the `h2` crate's client (many concurrent streams,
//! SETTINGS, GOAWAY at shutdown). Both runtimes serve HTTP/2: these run on the suite's
//! (`STATICO_TEST_RUNTIME`).

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use statico_tests::wire::{h2_connect, runtime};
use statico_tests::{get, run_client, Reader, Server};

fn start(extra: &[&str]) -> Server {
    Server::start(&[&["--http2"], extra].concat())
}

#[test]
fn h2spec_passes_every_case() {
    let s = start(&["-b", "Hello, World!"]);
    statico_tests::h2spec_passes(s.addr.port(), false);
}

#[test]
fn curl_prior_knowledge_gets_the_response_over_http2() {
    let s = start(&["-b", "over h2", "-H", "X-Mock: yes"]);
    let (ok, out, err) = run_client(
        "curl",
        &["-sS", "-i", "--http2-prior-knowledge", &s.url("/p")],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(
        out.contains("x-mock: yes") && out.contains("content-length: 7") && out.contains("date: "),
        "{out}"
    );
    assert!(out.ends_with("over h2"), "{out}");
}

#[test]
fn curl_upgrade_h2c_switches_protocols() {
    let s = start(&["-b", "upgraded"]);
    let (ok, out, err) = run_client("curl", &["-sS", "-v", "--http2", &s.url("/u")]);
    assert!(ok, "{err}");
    assert!(
        err.contains("< HTTP/1.1 101 Switching Protocols") && err.contains("< HTTP/2 200"),
        "{err}"
    );
    assert_eq!(out, "upgraded");
}

#[test]
fn http1_still_works_on_an_http2_port_and_garbage_is_closed() {
    let s = start(&["-b", "one"]);
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).body, b"one");
    let mut bad = Reader::new(s.connect());
    bad.send(b"INVALID CONNECTION PREFACE\r\n\r\n");
    assert!(
        bad.until_closed().is_empty(),
        "an invalid preface is closed without an HTTP/1 answer"
    );
}

#[test]
fn h2_client_with_many_concurrent_streams_and_settings() {
    let s = start(&["-b", "stream", "--max-concurrent-streams", "64"]);
    let rt = runtime();
    let addr = s.addr;
    let bodies = rt.block_on(async move {
        let (client, conn_task) = h2_connect(addr).await;
        let requests = tokio::spawn(async move {
            let mut client = client.ready().await.unwrap();
            // One request first: its response comes after the server's SETTINGS, so the client knows
            // the stream limit before opening the rest (streams over the limit are refused, rightly).
            let warm = http::Request::builder()
                .uri(format!("http://{addr}/warm"))
                .body(())
                .unwrap();
            let (resp, _) = client.send_request(warm, true).unwrap();
            assert_eq!(resp.await.unwrap().status(), 200);
            let mut handles = Vec::new();
            for i in 0..200 {
                let req = http::Request::builder()
                    .method(if i % 10 == 0 { "POST" } else { "GET" })
                    .uri(format!("http://{addr}/s{i}"))
                    .body(())
                    .unwrap();
                let end = i % 10 != 0;
                client = client.ready().await.unwrap();
                let (resp, mut send) = client.send_request(req, end).unwrap();
                if !end {
                    send.send_data(bytes::Bytes::from_static(b"request body"), true)
                        .unwrap();
                }
                handles.push(tokio::spawn(async move {
                    let resp = resp.await.unwrap();
                    assert_eq!(resp.status(), 200);
                    let mut body = resp.into_body();
                    let mut got = Vec::new();
                    while let Some(chunk) = body.data().await {
                        let chunk = chunk.unwrap();
                        let _ = body.flow_control().release_capacity(chunk.len());
                        got.extend_from_slice(&chunk);
                    }
                    got
                }));
            }
            let mut bodies = Vec::new();
            for h in handles {
                bodies.push(h.await.unwrap());
            }
            bodies
        });
        let bodies = requests.await.unwrap();
        conn_task.abort();
        bodies
    });
    // The server's SETTINGS as another client (nghttp) sees them.
    let (ok, out, err) = run_client("nghttp", &["-nv", &s.url("/settings")]);
    assert!(ok, "{err}");
    let max_streams: u32 = out
        .split("recv SETTINGS frame")
        .nth(1)
        .unwrap_or_default()
        .split("SETTINGS_MAX_CONCURRENT_STREAMS(0x03):")
        .nth(1)
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or_else(|| panic!("no SETTINGS_MAX_CONCURRENT_STREAMS in\n{out}"));
    assert_eq!(max_streams, 64, "SETTINGS_MAX_CONCURRENT_STREAMS");
    assert_eq!(bodies.len(), 200);
    assert!(bodies.iter().all(|b| b == b"stream"));
    let stopped = s.stop();
    assert_eq!(
        stopped.total("requests"),
        202, // the warm-up, 200 concurrent, nghttp's
        "the meter counts HTTP/2 requests"
    );
    assert!(stopped.total("bytes_out") > 200 * 6);
}

#[test]
fn sigterm_sends_goaway_and_finishes_in_flight_streams() {
    let s = start(&["-b", "late", "-d", "600ms"]);
    let pid = s.pid();
    let rt = runtime();
    let addr = s.addr;
    let status = rt.block_on(async move {
        let (client, conn_task) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let req = http::Request::builder()
            .uri(format!("http://{addr}/"))
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        statico_tests::signal(pid, "TERM");
        let resp = resp
            .await
            .expect("the in-flight stream completes after GOAWAY");
        let status = resp.status();
        let mut body = resp.into_body();
        let data = body.data().await.unwrap().unwrap();
        assert_eq!(&data[..], b"late");
        // After GOAWAY the connection ends cleanly.
        let closed = tokio::time::timeout(Duration::from_secs(5), conn_task).await;
        assert!(
            closed.is_ok(),
            "the server did not close the HTTP/2 connection after GOAWAY"
        );
        status
    });
    assert_eq!(status, 200);
    let stopped = s.stop_after_signal();
    assert!(stopped.status.success());
    assert_eq!(stopped.total("responses"), 1);
}

#[test]
fn http2_is_served_by_io_uring_too_and_the_start_up_line_says_so() {
    let s = Server::start(&["--http2", "--runtime", "io-uring", "-b", "on the ring"]);
    assert!(
        s.stderr().contains("HTTP/1.1 and h2c on io-uring"),
        "{}",
        s.stderr()
    );
    let (ok, out, err) = run_client("curl", &["-sS", "--http2-prior-knowledge", &s.url("/")]);
    assert!(ok && out == "on the ring", "{err}");
}

#[test]
fn without_http2_the_preface_is_a_bad_http1_request() {
    let s = Server::start(&[]);
    let mut r = Reader::new(s.connect());
    r.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let resp = r.response(false);
    assert_eq!(resp.status, 505, "HTTP/2 is off unless --http2");
}

#[test]
fn idle_http2_connection_gets_goaway_after_the_idle_timeout() {
    let s = start(&["--idle-timeout", "1s"]);
    let rt = runtime();
    let addr = s.addr;
    rt.block_on(async move {
        let (client, conn_task) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let req = http::Request::builder()
            .uri(format!("http://{addr}/"))
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        assert_eq!(resp.await.unwrap().status(), 200);
        // Then silence: the server must end the connection, not hold it forever.
        let ended = tokio::time::timeout(Duration::from_secs(5), conn_task).await;
        assert!(
            ended.is_ok(),
            "an idle HTTP/2 connection was kept past --idle-timeout"
        );
    });
    let stopped = s.stop();
    assert_eq!(stopped.total("timeouts"), 1);
}

/// Reads until the server closes (EOF or reset) or `limit` passes; returns when, after `since`.
fn closed_within(stream: &mut std::net::TcpStream, since: Instant, limit: Duration) -> Duration {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return since.elapsed(),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return since.elapsed(),
        }
        assert!(since.elapsed() < limit, "still open after {limit:?}");
    }
}

#[test]
fn a_silent_client_after_the_preface_is_closed_after_goaway() {
    use std::io::Write;
    let s = start(&["--idle-timeout", "2s"]);
    let mut c = s.connect();
    let start = Instant::now();
    // The preface and an empty SETTINGS frame; then never an ACK, never a PING answer.
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .unwrap();
    let after = closed_within(&mut c, start, Duration::from_secs(8));
    assert!(
        after >= Duration::from_millis(1900) && after < Duration::from_secs(5),
        "closed {after:?} after connecting (idle timeout 2 s, then a 2 s grace)"
    );
    assert_eq!(s.stop().total("timeouts"), 1);
}

/// A stream's future ends once its body is handed to `h2`, which may go on sending it for long after:
/// a connection whose output still moves is not idle. 30 MB read at 3 MB/s with `--idle-timeout 2s`
/// takes about twice the idle timeout and its GOAWAY grace, and ends whole (it was cut after about
/// 4.5 s, curl exit 18).
#[test]
fn a_download_longer_than_the_idle_timeout_completes_while_its_output_moves() {
    let dir = statico_tests::scratch_dir("h2", "slow-download");
    let size = 30_000_000;
    std::fs::write(dir.join("big.bin"), vec![7u8; size]).unwrap();
    let root = dir.to_str().unwrap();
    let s = start(&["--root", root, "--idle-timeout", "2s"]);
    let out = dir.join("out.bin");
    let since = Instant::now();
    let (ok, _, err) = run_client(
        "curl",
        &[
            "-sS",
            "--http2-prior-knowledge",
            "--limit-rate",
            "3M",
            "-o",
            out.to_str().unwrap(),
            &s.url("/big.bin"),
        ],
    );
    let took = since.elapsed();
    assert!(ok, "the download was cut after {took:?}: {err}");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), size as u64);
    assert!(
        took > Duration::from_secs(5),
        "the download took {took:?}: too fast to outlast the idle timeout and its grace"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Output that belongs to no stream keeps nothing open: a client that only sends PINGs (each answered)
/// gets GOAWAY at `--idle-timeout` and, never acknowledging the GOAWAY's PING, is closed 2 s later.
#[test]
fn a_client_that_only_pings_is_closed_at_the_idle_timeout() {
    use std::io::{Read, Write};
    let s = start(&["--idle-timeout", "1s"]);
    let mut c = s.connect();
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let since = Instant::now();
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .unwrap();
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingpong";
    let mut buf = [0u8; 4096];
    let closed = loop {
        assert!(
            since.elapsed() < Duration::from_secs(8),
            "still open after 8 s of PINGs"
        );
        if c.write_all(ping).is_err() {
            break since.elapsed();
        }
        let read_until = Instant::now() + Duration::from_millis(300);
        let mut ended = false;
        while Instant::now() < read_until && !ended {
            ended = match c.read(&mut buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            };
        }
        if ended {
            break since.elapsed();
        }
    };
    assert!(
        closed >= Duration::from_millis(2900) && closed < Duration::from_millis(4500),
        "closed {closed:?} after connecting (idle timeout 1 s, then a 2 s grace)"
    );
    assert_eq!(s.stop().total("timeouts"), 1);
}

#[test]
fn a_request_body_that_never_ends_is_reset_at_the_header_timeout() {
    let s = start(&["--header-timeout", "1s", "--idle-timeout", "30s"]);
    let rt = runtime();
    let addr = s.addr;
    let waited = rt.block_on(async move {
        let (client, _conn_task) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/"))
            .body(())
            .unwrap();
        let (resp, mut body) = client.send_request(req, false).unwrap();
        body.send_data(bytes::Bytes::from_static(b"part"), false)
            .unwrap();
        let start = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(6), resp).await;
        let err = answer
            .expect("the stream is reset, not left open")
            .expect_err("no response to an unfinished request");
        assert_eq!(err.reason(), Some(h2::Reason::CANCEL), "{err}");
        start.elapsed()
    });
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "reset {waited:?} after the last DATA"
    );
    assert_eq!(s.stop().total("timeouts"), 1);
}

#[test]
fn connection_specific_headers_stay_in_http1_and_are_left_out_of_http2() {
    let forbidden = [
        ("Keep-Alive", "timeout=5"),
        ("Proxy-Connection", "keep-alive"),
        ("Upgrade", "websocket"),
        ("TE", "gzip"),
    ];
    let mut args = vec!["-b".to_string(), "ok".into()];
    for (n, v) in forbidden.iter().chain([("X-Kept", "yes")].iter()) {
        args.extend(["-H".into(), format!("{n}: {v}")]);
    }
    let s = start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let line = s
        .stderr()
        .lines()
        .find(|l| l.contains("HTTP/2 responses leave out"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no start-up line about them:\n{}", s.stderr()));
    let (ok, out, err) = run_client(
        "curl",
        &["-sS", "-i", "--http2-prior-knowledge", &s.url("/")],
    );
    assert!(ok, "curl over HTTP/2 failed: {err}");
    assert!(
        out.starts_with("HTTP/2 200") && out.contains("x-kept: yes"),
        "{out}"
    );
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    let http1 = r.response(false);
    for (name, value) in forbidden {
        assert!(line.contains(name), "{name} not named in: {line}");
        assert!(
            !out.to_ascii_lowercase()
                .contains(&format!("\n{}:", name.to_ascii_lowercase())),
            "{name} in HTTP/2: {out}"
        );
        assert_eq!(
            http1.header(name).as_deref(),
            Some(value),
            "{name} kept in HTTP/1.1"
        );
    }
}

#[test]
fn each_connection_specific_header_alone_leaves_http2_working() {
    for header in [
        "Keep-Alive: timeout=5",
        "Proxy-Connection: close",
        "Upgrade: h2c",
        "TE: deflate",
    ] {
        let s = start(&["-b", "ok", "-H", header]);
        let (ok, out, err) = run_client("curl", &["-sS", "--http2-prior-knowledge", &s.url("/")]);
        assert!(ok && out == "ok", "{header}: {err}");
    }
}

#[test]
fn connection_and_transfer_encoding_cannot_be_given_with_or_without_http2() {
    for header in ["Connection: close", "Transfer-Encoding: chunked"] {
        for http2 in [&["--http2"][..], &[][..]] {
            let args = [&["-a", "127.0.0.1", "-p", "0", "-H", header][..], http2].concat();
            let (code, err) = statico_tests::run_to_exit(&args);
            let name = header.split(':').next().unwrap();
            assert_eq!(code, Some(2), "{args:?}: {err}");
            assert!(
                err.contains(name) && err.contains("-H"),
                "{args:?} should name {name} and -H: {err}"
            );
        }
    }
}

#[test]
fn a_body_over_max_body_size_gets_413_once_not_a_stream_the_client_retries() {
    let s = start(&["--max-body-size", "1k"]);
    let url = format!("http://{}/", s.addr);
    let dir = statico_tests::scratch_dir("h2", "413");
    // Just over the limit, and 500 KiB over it (read and dropped after the 413 so the stream ends
    // cleanly; curl reports a reset stream as an error, and used to retry a refused one 5 times).
    for size in [5_000, 500_000] {
        let file = dir.join(format!("body-{size}"));
        std::fs::write(&file, vec![b'x'; size]).unwrap();
        let data = format!("@{}", file.display());
        let args = [
            "-sS",
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--data-binary",
            &data,
            &url,
        ];
        let (ok, out, err) = statico_tests::run_client("curl", &args);
        assert!(ok, "curl failed for {size} bytes: {err}");
        assert_eq!(out, "413", "{size} bytes");
    }
    let stopped = s.stop();
    assert_eq!(
        stopped.total("status_413"),
        2,
        "one 413 per upload: no retries"
    );
}
