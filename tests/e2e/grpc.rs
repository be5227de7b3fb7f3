//! `--grpc`: gRPC calls on HTTP/2, answered by the built-in services and checked with the clients
//! that use them — Fortio (`fortio grpcping`, `fortio load -grpc -ping`), grpc-health-probe,
//! grpcurl and ghz (through server reflection), grpc-go's interop client (plain and TLS), Python's
//! `grpcio` — and with the `h2` crate's client for what a real client
//! never sends (a body that is not gRPC messages) and for the statuses of calls statico does not
//! serve. On the suite's runtime (`STATICO_TEST_RUNTIME`). A test whose client is missing prints
//! `SKIPPED: … needs …` (`cargo xtask setup` installs them with `go install`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use statico_tests::wire::{h2_connect, runtime};
use statico_tests::{run_client, Reader, Server, EARLY};

fn start(extra: &[&str]) -> Server {
    Server::start(&[&["--grpc"], extra].concat())
}

/// A Go tool where `go install` puts it (GOBIN, ~/go/bin) or on PATH; `None` (the test prints
/// why it skips) when it is nowhere.
fn go_tool(name: &str, test: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let found = std::env::var_os("GOBIN")
        .map(PathBuf::from)
        .into_iter()
        .chain([home.join("go/bin")])
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ))
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        println!("SKIPPED: {test} needs {name} (cargo xtask setup)");
    }
    found
}

fn run(tool: &Path, args: &[&str]) -> (bool, String, String) {
    run_client(tool.to_str().unwrap(), args)
}

fn target(s: &Server) -> String {
    format!("127.0.0.1:{}", s.addr.port())
}

#[test]
fn fortio_grpcping_gets_its_echo_and_the_delay_it_asks() {
    let Some(fortio) = go_tool(
        "fortio",
        "fortio_grpcping_gets_its_echo_and_the_delay_it_asks",
    ) else {
        return;
    };
    let s = start(&["--max-delay", "1s"]);
    let (ok, out, err) = run(&fortio, &["grpcping", "-n", "5", &target(&s)]);
    assert!(ok, "{out}\n{err}");
    assert!(
        format!("{out}{err}").contains("RTT histogram"),
        "{out}\n{err}"
    );
    // The reply is held as delayNanos asks, up to --max-delay.
    let started = Instant::now();
    let (ok, out, err) = run(
        &fortio,
        &[
            "grpcping",
            "-n",
            "1",
            "-grpc-ping-delay",
            "300ms",
            &target(&s),
        ],
    );
    assert!(ok, "{out}\n{err}");
    // A warm-up call and two timed ones, each held 300 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{out}\n{err}"
    );
}

#[test]
fn fortio_load_grpc_ping_gets_every_call_answered() {
    let Some(fortio) = go_tool("fortio", "fortio_load_grpc_ping_gets_every_call_answered") else {
        return;
    };
    let s = start(&[]);
    let (ok, out, err) = run(
        &fortio,
        &[
            "load",
            "-grpc",
            "-ping",
            "-qps",
            "0",
            "-n",
            "200",
            "-c",
            "4",
            &target(&s),
        ],
    );
    let all = format!("{out}{err}");
    assert!(ok, "{all}");
    assert!(all.contains("SERVING : 200"), "{all}");
    // The health check Fortio's load sends without -ping.
    let (ok, out, err) = run(
        &fortio,
        &["load", "-grpc", "-qps", "0", "-n", "20", &target(&s)],
    );
    let all = format!("{out}{err}");
    assert!(ok && all.contains("SERVING : 20"), "{all}");
}

#[test]
fn grpc_health_probe_sees_every_service_serving_and_no_other() {
    let test = "grpc_health_probe_sees_every_service_serving_and_no_other";
    let Some(probe) = go_tool("grpc-health-probe", test) else {
        return;
    };
    let s = start(&[]);
    let addr = format!("-addr={}", target(&s));
    for service in ["", "fgrpc.PingServer", "grpc.health.v1.Health"] {
        let (ok, out, err) = run(&probe, &[&addr, &format!("-service={service}")]);
        // The probe reports on stderr.
        assert!(
            ok && err.contains("status: SERVING"),
            "{service}: {out}\n{err}"
        );
    }
    let (ok, out, err) = run(&probe, &[&addr, "-service=no.Such"]);
    assert!(
        !ok && format!("{out}{err}").contains("NotFound"),
        "{out}\n{err}"
    );
}

#[test]
fn grpcurl_lists_describes_and_calls_through_reflection() {
    let Some(grpcurl) = go_tool(
        "grpcurl",
        "grpcurl_lists_describes_and_calls_through_reflection",
    ) else {
        return;
    };
    let s = start(&[]);
    let t = target(&s);
    let (ok, out, err) = run(&grpcurl, &["-plaintext", &t, "list"]);
    assert!(ok, "{err}");
    for service in [
        "fgrpc.PingServer",
        "grpc.health.v1.Health",
        "grpc.testing.TestService",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(out.lines().any(|l| l == service), "{service}: {out}");
    }
    let (ok, out, err) = run(
        &grpcurl,
        &["-plaintext", &t, "describe", "fgrpc.PingServer"],
    );
    assert!(
        ok && out.contains("rpc Ping ( .fgrpc.PingMessage )"),
        "{out}\n{err}"
    );
    let (ok, out, err) = run(&grpcurl, &["-plaintext", &t, "describe"]);
    assert!(ok && out.contains("rpc Watch"), "{out}\n{err}");
    let (ok, out, err) = run(
        &grpcurl,
        &[
            "-plaintext",
            "-d",
            r#"{"seq": 7, "payload": "hi"}"#,
            &t,
            "fgrpc.PingServer/Ping",
        ],
    );
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains(r#""seq": "7""#)
            && out.contains(r#""payload": "hi""#)
            && out.contains(r#""ts""#),
        "{out}"
    );
    let (ok, out, err) = run(
        &grpcurl,
        &[
            "-plaintext",
            "-d",
            r#"{"service": "nope"}"#,
            &t,
            "grpc.health.v1.Health/Check",
        ],
    );
    assert!(
        !ok && format!("{out}{err}").contains("NotFound"),
        "{out}\n{err}"
    );
}

#[test]
fn ghz_loads_the_ping_through_reflection_and_every_call_is_ok() {
    let Some(ghz) = go_tool(
        "ghz",
        "ghz_loads_the_ping_through_reflection_and_every_call_is_ok",
    ) else {
        return;
    };
    let s = start(&[]);
    let (ok, report, out) = ghz_ping(&ghz, &s, r#"{"seq": 1, "payload": "x"}"#, 300, 5);
    assert!(ok, "{out}");
    assert_eq!(report["count"], 300, "{out}");
    assert_eq!(report["statusCodeDistribution"]["OK"], 300, "{out}");
    // One call at a time: a reply's trailers do not wait for a delayed ACK of its message (40 ms).
    let (ok, report, out) = ghz_ping(&ghz, &s, r#"{"seq": 1}"#, 50, 1);
    let average = Duration::from_nanos(report["average"].as_u64().unwrap_or(u64::MAX));
    assert!(
        ok && average < Duration::from_millis(20),
        "{average:?}: {out}"
    );
}

/// The interop client's cases that grpc-go's interop server passes and that need no more than a
/// server (no credentials, no compression, no second backend).
const INTEROP_CASES: [&str; 14] = [
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "timeout_on_sleeping_server",
    "cancel_after_begin",
    "cancel_after_first_response",
    "status_code_and_message",
    "special_status_message",
    "custom_metadata",
    "unimplemented_method",
    "unimplemented_service",
];

#[test]
fn grpc_go_interop_client_passes_every_case_plain_and_over_tls() {
    let test = "grpc_go_interop_client_passes_every_case_plain_and_over_tls";
    let Some(client) = go_tool("grpc-interop-client", test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("statico-grpc-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.pem");
    let tls_args = [
        "-use_tls",
        "-use_test_ca",
        &format!("-ca_file={}", cert.display()),
        "-server_host_override=localhost",
    ];
    let plain = start(&[]);
    let tls = start(&[
        "--tls-self-signed",
        "--tls-self-signed-out",
        dir.to_str().unwrap(),
    ]);
    for (s, extra) in [(&plain, &[][..]), (&tls, &tls_args[..])] {
        for case in INTEROP_CASES {
            let port = format!("-server_port={}", s.addr.port());
            let test_case = format!("-test_case={case}");
            let args = [&["-server_host=127.0.0.1", &port, &test_case][..], extra].concat();
            let (ok, out, err) = run(&client, &args);
            assert!(ok, "{case} {extra:?}: {out}\n{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Python's `grpcio` (the C-core client), calling with raw messages: a ping, health, an unknown
/// method, a full-duplex stream, and a server-streaming route (whole, and cut by its deadline).
const PYTHON_CLIENT: &str = r#"
import sys, grpc
ch = grpc.insecure_channel(sys.argv[1])
reply = ch.unary_unary('/fgrpc.PingServer/Ping')(b'\x08\x07\x1a\x02py', timeout=5)
assert reply.startswith(b'\x08\x07\x10') and reply.endswith(b'\x1a\x02py'), reply
assert ch.unary_unary('/grpc.health.v1.Health/Check')(b'', timeout=5) == b'\x08\x01'
for path, ask, code in [
    ('/grpc.health.v1.Health/Check', b'\x0a\x04nope', grpc.StatusCode.NOT_FOUND),
    ('/no.Such/Method', b'', grpc.StatusCode.UNIMPLEMENTED),
]:
    try:
        ch.unary_unary(path)(ask, timeout=5)
        raise SystemExit(path + ': no error')
    except grpc.RpcError as e:
        assert e.code() == code, (path, e.code())
duplex = ch.stream_stream('/grpc.testing.TestService/FullDuplexCall')
replies = list(duplex(iter([b'\x12\x02\x08\x03', b'\x12\x02\x08\x05']), timeout=5))
assert [len(r) for r in replies] == [7, 9], replies
feed = list(ch.unary_stream('/pkg.Svc/Feed')(b'', timeout=5))
assert feed == [b'\x0a\x02' + feed[0][2:]] * 3 and len(feed[0]) == 4, feed
try:
    list(ch.unary_stream('/pkg.Svc/Feed')(b'', timeout=0.25))
    raise SystemExit('/pkg.Svc/Feed: no deadline')
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e.code()
print('ok')
"#;

#[test]
fn python_grpcio_calls_ping_health_a_duplex_stream_and_a_server_streaming_route() {
    let importable = std::process::Command::new("python3")
        .args(["-c", "import grpc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !importable {
        println!("SKIPPED: python_grpcio_calls_ping_health_a_duplex_stream_and_a_server_streaming_route needs grpcio (cargo xtask setup)");
        return;
    }
    let s = start(&[
        "--route",
        "/pkg.Svc/Feed events=3 first=100ms gap=100ms size=2",
    ]);
    let (ok, out, err) = run_client("python3", &["-c", PYTHON_CLIENT, &target(&s)]);
    assert!(ok && out.trim() == "ok", "{out}\n{err}");
}

/// A gRPC call's outcome as the `h2` crate's client sees it.
#[derive(Debug)]
struct Outcome {
    http: u16,
    /// `grpc-status`, from the trailers or a trailers-only head.
    grpc_status: Option<String>,
    /// Whether the status came in the head (trailers-only).
    trailers_only: bool,
    body: Vec<u8>,
    /// When each piece of the body came, after the request was sent.
    pieces: Vec<Duration>,
    /// When the trailers (or the head of a trailers-only answer) came.
    ended: Duration,
    /// The stream's error, when it did not end with trailers (a reset, a GOAWAY).
    broken: Option<String>,
}

/// One call: `body` sent as the request body, on `path`, with `content-type`.
fn call(s: &Server, path: &str, content_type: &str, body: Vec<u8>) -> Outcome {
    call_with(s, path, &[("content-type", content_type)], body)
}

/// The head of a gRPC call to `path` at `addr`.
fn grpc_call(addr: std::net::SocketAddr, path: &str) -> http::Request<()> {
    http::Request::post(format!("http://{addr}{path}"))
        .header("te", "trailers")
        .header("content-type", "application/grpc")
        .body(())
        .unwrap()
}

/// One call's request sent whole, then the stream reset (CANCEL) `after` it, before its answer.
fn call_and_leave(s: &Server, path: &str, body: Vec<u8>, after: Duration) {
    let rt = runtime();
    let addr = s.addr;
    rt.block_on(async move {
        let (client, conn) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let request = grpc_call(addr, path);
        let (response, mut send) = client.send_request(request, false).unwrap();
        send.send_data(Bytes::from(body), true).unwrap();
        tokio::time::sleep(after).await;
        send.send_reset(h2::Reason::CANCEL);
        drop(response);
        // The connection's task sends the reset; the connection stays open meanwhile.
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(client);
        conn.abort();
    });
}

/// One call with these header fields (`te: trailers` added).
fn call_with(s: &Server, path: &str, fields: &[(&str, &str)], body: Vec<u8>) -> Outcome {
    let rt = runtime();
    let addr = s.addr;
    let path = path.to_string();
    let fields: Vec<(String, String)> = (fields.iter())
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    rt.block_on(async move {
        let (client, _conn) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let mut request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}{path}"))
            .header("te", "trailers");
        for (name, value) in fields {
            request = request.header(name, value);
        }
        let request = request.body(()).unwrap();
        let (response, mut send) = client.send_request(request, false).unwrap();
        send.reserve_capacity(body.len());
        send.send_data(Bytes::from(body), true).unwrap();
        let sent = Instant::now();
        let response = match tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .expect("an answer")
        {
            Ok(response) => response,
            Err(e) => {
                return Outcome {
                    http: 0,
                    grpc_status: None,
                    trailers_only: false,
                    body: Vec::new(),
                    pieces: Vec::new(),
                    ended: sent.elapsed(),
                    broken: Some(e.to_string()),
                }
            }
        };
        let http = response.status().as_u16();
        let head_status = response.headers().get("grpc-status").cloned();
        let mut stream = response.into_body();
        let (mut got, mut pieces) = (Vec::new(), Vec::new());
        let mut broken = None;
        while let Some(chunk) = stream.data().await {
            match chunk {
                Ok(chunk) => {
                    let _ = stream.flow_control().release_capacity(chunk.len());
                    got.extend_from_slice(&chunk);
                    pieces.push(sent.elapsed());
                }
                Err(e) => {
                    broken = Some(e.to_string());
                    break;
                }
            }
        }
        let trailers = match broken {
            Some(_) => None,
            None => stream.trailers().await.ok().flatten(),
        };
        let ended = sent.elapsed();
        let trailer_status = trailers.and_then(|t| t.get("grpc-status").cloned());
        Outcome {
            http,
            trailers_only: head_status.is_some(),
            grpc_status: head_status
                .or(trailer_status)
                .map(|v| v.to_str().unwrap().to_string()),
            body: got,
            pieces,
            ended,
            broken,
        }
    })
}

/// `message` with gRPC's 5-byte prefix, the flag given.
fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

#[test]
fn a_body_that_is_not_grpc_messages_gets_the_status_grpc_prescribes() {
    let s = start(&[]);
    let ping = "/fgrpc.PingServer/Ping";
    let status = |body: Vec<u8>| call(&s, ping, "application/grpc", body);
    // A length prefix longer than the body: INTERNAL.
    let mut short = framed(0, b"abcdef");
    short.truncate(8);
    let o = status(short);
    assert_eq!(
        (o.http, o.grpc_status.as_deref()),
        (200, Some("13")),
        "{o:?}"
    );
    // Compressed, with no grpc-encoding statico accepts: UNIMPLEMENTED.
    let o = status(framed(1, b"\x08\x01"));
    assert_eq!(o.grpc_status.as_deref(), Some("12"), "{o:?}");
    // Over 4 MiB: RESOURCE_EXHAUSTED, told from the prefix.
    let o = status(framed(0, &vec![0; (4 << 20) + 1]));
    assert_eq!(o.grpc_status.as_deref(), Some("8"), "{o:?}");
    // Two messages on a unary call: INTERNAL.
    let o = status([framed(0, b""), framed(0, b"")].concat());
    assert_eq!(o.grpc_status.as_deref(), Some("13"), "{o:?}");
    // And the server answers the next call as ever.
    let o = status(framed(0, b"\x08\x07"));
    assert_eq!(o.grpc_status.as_deref(), Some("0"), "{o:?}");
    assert!(!o.trailers_only && o.body.len() > 5, "{o:?}");
}

#[test]
fn an_unknown_method_is_unimplemented_and_no_route_takes_a_grpc_call() {
    let s = start(&["--route", "/* status=503", "--route", "* status=503"]);
    let o = call(
        &s,
        "/pkg.Nope/Call",
        "application/grpc+proto",
        framed(0, b""),
    );
    assert_eq!(o.http, 200, "{o:?}");
    assert_eq!(o.grpc_status.as_deref(), Some("12"), "{o:?}");
    assert!(o.trailers_only && o.body.is_empty(), "{o:?}");
    let o = call(
        &s,
        "/fgrpc.PingServer/Ping",
        "application/grpc",
        framed(0, b""),
    );
    assert_eq!(o.grpc_status.as_deref(), Some("0"), "{o:?}");
    // Not gRPC: the routes answer it.
    assert_eq!(call(&s, "/pkg.Nope/Call", "text/plain", vec![]).http, 503);
}

#[test]
fn grpc_over_http1_gets_415() {
    let s = start(&[]);
    let mut r = Reader::new(s.connect());
    r.send(
        b"POST /fgrpc.PingServer/Ping HTTP/1.1\r\nHost: t\r\nContent-Type: application/grpc\r\nContent-Length: 5\r\n\r\n\0\0\0\0\0",
    );
    assert_eq!(r.response(false).status, 415);
}

/// A `PingMessage` asking for `delay_ms` (field 4, `delayNanos`), framed.
fn ping_with_delay(delay_ms: u64) -> Vec<u8> {
    let mut message = vec![0x20]; // field 4, varint
    let mut n = delay_ms * 1_000_000;
    while n >= 0x80 {
        message.push((n as u8) | 0x80);
        n >>= 7;
    }
    message.push(n as u8);
    framed(0, &message)
}

#[test]
fn a_reply_held_past_grpc_timeout_is_deadline_exceeded_at_the_deadline() {
    let s = start(&[]);
    let ping = "/fgrpc.PingServer/Ping";
    let grpc = ("content-type", "application/grpc");
    let started = Instant::now();
    let o = call_with(
        &s,
        ping,
        &[grpc, ("grpc-timeout", "100m")],
        ping_with_delay(400),
    );
    let took = started.elapsed();
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(400),
        "{took:?}"
    );
    let o = call_with(
        &s,
        ping,
        &[grpc, ("grpc-timeout", "2S")],
        ping_with_delay(50),
    );
    assert_eq!(o.grpc_status.as_deref(), Some("0"), "{o:?}");
    let o = call_with(
        &s,
        ping,
        &[grpc, ("grpc-timeout", "soon")],
        ping_with_delay(0),
    );
    assert_eq!(o.grpc_status.as_deref(), Some("13"), "{o:?}");
}

#[test]
fn health_watch_sends_the_status_and_keeps_the_stream_open() {
    let s = start(&[]);
    let rt = runtime();
    let addr = s.addr;
    rt.block_on(async move {
        let (client, _conn) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let request = grpc_call(addr, "/grpc.health.v1.Health/Watch");
        let (response, mut send) = client.send_request(request, false).unwrap();
        // HealthCheckRequest{service: "fgrpc.PingServer"}.
        let mut ask = vec![0x0a, 16];
        ask.extend_from_slice(b"fgrpc.PingServer");
        send.send_data(Bytes::from(framed(0, &ask)), true).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.data().await.unwrap().unwrap();
        // HealthCheckResponse{status: SERVING}.
        assert_eq!(&first[..], &framed(0, &[0x08, 1])[..]);
        let more = tokio::time::timeout(Duration::from_millis(300), body.data()).await;
        assert!(more.is_err(), "the stream stays open: {more:?}");
    });
    // With a grpc-timeout, the watch ends DEADLINE_EXCEEDED at the deadline.
    let started = Instant::now();
    let o = call_with(
        &s,
        "/grpc.health.v1.Health/Watch",
        &[
            ("content-type", "application/grpc"),
            ("grpc-timeout", "200m"),
        ],
        framed(0, b""), // HealthCheckRequest{service: ""}
    );
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    assert_eq!(o.body, framed(0, &[0x08, 1]), "{o:?}");
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[test]
fn grpcurl_lists_the_services_over_tls_with_alpn_h2() {
    let Some(grpcurl) = go_tool(
        "grpcurl",
        "grpcurl_lists_the_services_over_tls_with_alpn_h2",
    ) else {
        return;
    };
    let s = start(&["--tls-self-signed"]);
    let (ok, out, err) = run(&grpcurl, &["-insecure", &target(&s), "list"]);
    assert!(ok && out.contains("fgrpc.PingServer"), "{out}\n{err}");
    let (ok, out, err) = run(
        &grpcurl,
        &[
            "-insecure",
            "-d",
            r#"{"seq": 3}"#,
            &target(&s),
            "fgrpc.PingServer/Ping",
        ],
    );
    assert!(ok && out.contains(r#""seq": "3""#), "{out}\n{err}");
}

// ---- Calibrated gRPC routes ----

/// ghz making the call `call` (its flags: the method, its data or proto) `n` times over `c`
/// connections: whether it exited 0, its JSON report, and its output (stdout and stderr) for a
/// failed check.
fn ghz_json(
    ghz: &Path,
    s: &Server,
    call: &[&str],
    n: u32,
    c: u32,
) -> (bool, serde_json::Value, String) {
    let (n, c, target) = (n.to_string(), c.to_string(), target(s));
    let load = [
        "--insecure",
        "-n",
        &n,
        "-c",
        &c,
        "--format",
        "json",
        &target,
    ];
    let (ok, out, err) = run(ghz, &[call, &load[..]].concat());
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (ok, report, format!("{out}\n{err}"))
}

/// `n` pings with `data` (JSON) over `c` connections by ghz (through reflection): see
/// [`ghz_json`].
fn ghz_ping(
    ghz: &Path,
    s: &Server,
    data: &str,
    n: u32,
    c: u32,
) -> (bool, serde_json::Value, String) {
    ghz_json(
        ghz,
        s,
        &["--call", "fgrpc.PingServer/Ping", "-d", data],
        n,
        c,
    )
}

/// ghz's count of calls with `status` (its names: `OK`, `Unavailable`), 0 if none.
fn ghz_count(report: &serde_json::Value, status: &str) -> u64 {
    report["statusCodeDistribution"][status]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn ghz_sees_a_routes_status_mix_and_the_ground_truth_counts_exactly_what_it_saw() {
    let Some(ghz) = go_tool(
        "ghz",
        "ghz_sees_a_routes_status_mix_and_the_ground_truth_counts_exactly_what_it_saw",
    ) else {
        return;
    };
    let route = "/fgrpc.PingServer/Ping grpc-status=UNAVAILABLE:20%,RESOURCE_EXHAUSTED:10% grpc-message=busy";
    let s = start(&["--route", route, "--metrics", "127.0.0.1:0"]);
    let (_, report, out) = ghz_ping(&ghz, &s, r#"{"seq": 1}"#, 1000, 10);
    assert_eq!(report["count"], 1000, "{out}");
    let seen = [
        ("OK", ghz_count(&report, "OK")),
        ("UNAVAILABLE", ghz_count(&report, "Unavailable")),
        (
            "RESOURCE_EXHAUSTED",
            ghz_count(&report, "ResourceExhausted"),
        ),
    ];
    assert_eq!(seen.iter().map(|(_, n)| n).sum::<u64>(), 1000, "{out}");
    for ((_, n), share) in seen.iter().zip([0.7, 0.2, 0.1]) {
        let got = *n as f64 / 1000.0;
        assert!((got - share).abs() < 0.05, "{seen:?}");
    }
    let truth =
        statico_tests::figures::truth_when(&s, |t| t["routes"][0]["count"].as_u64() == Some(1000));
    let entry = &truth["routes"][0];
    for (name, n) in seen {
        assert_eq!(
            statico_tests::figures::outcome(entry, name),
            n,
            "{name}: {entry}"
        );
    }
    let metrics = s.scrape("/metrics");
    assert!(metrics.contains("outcome=\"UNAVAILABLE\""), "{metrics}");
}

#[test]
fn a_route_on_a_method_answers_its_message_status_and_delay_in_grpc_terms() {
    let s = start(&[
        "--route",
        "/fgrpc.PingServer/Ping size=1000 header=x-served-by:route",
        "--route",
        "/pkg.Svc/* grpc-status=NOT_FOUND grpc-message=gone delay=300ms",
        "--route",
        "* status=503",
    ]);
    // A route on a built-in method takes it: its reply is field 1 holding 1000 bytes, then OK.
    let o = call(
        &s,
        "/fgrpc.PingServer/Ping",
        "application/grpc",
        framed(0, b""),
    );
    assert_eq!(
        (o.http, o.grpc_status.as_deref()),
        (200, Some("0")),
        "{o:?}"
    );
    assert!(!o.trailers_only, "{o:?}");
    assert_eq!(&o.body[..5], &[0, 0, 0, 0x03, 0xeb], "a 1003-byte message");
    assert_eq!(&o.body[5..8], &[0x0a, 0xe8, 0x07], "field 1, 1000 bytes");
    // A glob on a service: its status trailers-only, after its delay.
    let t = Instant::now();
    let o = call(&s, "/pkg.Svc/Any", "application/grpc", framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("5"), "{o:?}");
    assert!(o.trailers_only && o.body.is_empty(), "{o:?}");
    assert!(t.elapsed() >= Duration::from_millis(300));
    // Held past the call's grpc-timeout: DEADLINE_EXCEEDED at the deadline.
    let t = Instant::now();
    let fields = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "50m"),
    ];
    let o = call_with(&s, "/pkg.Svc/Any", &fields, framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    // The catch-all never takes a gRPC call; it takes the rest.
    let o = call(&s, "/pkg.Other/Call", "application/grpc", framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("12"), "{o:?}");
    assert_eq!(call(&s, "/pkg.Svc/Any", "text/plain", vec![]).http, 503);
}

#[test]
fn a_grpc_routes_faults_break_the_call_as_http2_does() {
    let s = start(&[
        "--route",
        "/pkg.Svc/Reset fault=reset",
        "--route",
        "/pkg.Svc/Truncate size=1000 fault=truncate",
    ]);
    let o = call(&s, "/pkg.Svc/Reset", "application/grpc", framed(0, b""));
    assert!(o.broken.is_some() && o.grpc_status.is_none(), "{o:?}");
    let o = call(&s, "/pkg.Svc/Truncate", "application/grpc", framed(0, b""));
    assert!(o.grpc_status.is_none(), "{o:?}");
    assert!(
        o.body.len() < 1008,
        "half a message at most: {}",
        o.body.len()
    );
}

#[test]
fn a_grpc_route_refuses_what_grpc_does_not_have() {
    let status =
        statico_tests::refused_in_one_line(&["--grpc", "--route", "/pkg.Svc/M status=503"]);
    assert!(status.contains("grpc-status"), "{status}");
    let header = statico_tests::refused_in_one_line(&[
        "--grpc",
        "--route",
        "/pkg.Svc/M header=grpc-status:1",
    ]);
    assert!(header.contains("grpc-status"), "{header}");
    let path = statico_tests::refused_in_one_line(&["--route", "/health grpc-status=OK"]);
    assert!(path.contains("method path"), "{path}");
}

#[test]
fn a_pooled_grpc_routes_shed_is_resource_exhausted_and_a_deadline_is_counted() {
    let Some(ghz) = go_tool(
        "ghz",
        "a_pooled_grpc_routes_shed_is_resource_exhausted_and_a_deadline_is_counted",
    ) else {
        return;
    };
    let route = "/fgrpc.PingServer/Ping delay=200ms capacity=1 queue=0 shed=429";
    let s = start(&["--route", route, "--metrics", "127.0.0.1:0"]);
    let (_, report, out) = ghz_ping(&ghz, &s, "{}", 12, 4);
    let (ok, shed) = (
        ghz_count(&report, "OK"),
        ghz_count(&report, "ResourceExhausted"),
    );
    assert_eq!(ok + shed, 12, "{out}");
    assert!(ok > 0 && shed > 0, "{out}");
    let fields = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "20m"),
    ];
    let o = call_with(&s, "/fgrpc.PingServer/Ping", &fields, framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    let truth =
        statico_tests::figures::truth_when(&s, |t| t["routes"][0]["count"].as_u64() == Some(13));
    let entry = &truth["routes"][0];
    let counted = |name| statico_tests::figures::outcome(entry, name);
    assert_eq!(
        (counted("OK"), counted("shed"), counted("DEADLINE_EXCEEDED")),
        (ok, shed, 1),
        "{entry}"
    );
}

#[test]
fn grpcurl_sees_a_routes_status_and_message_and_close_is_a_goaway() {
    let s = start(&[
        "--route",
        "/fgrpc.PingServer/Ping grpc-status=UNAVAILABLE grpc-message=busy",
        "--route",
        "/pkg.Svc/Close fault=close",
    ]);
    if let Some(grpcurl) = go_tool(
        "grpcurl",
        "grpcurl_sees_a_routes_status_and_message_and_close_is_a_goaway",
    ) {
        let (ok, out, err) = run(
            &grpcurl,
            &[
                "-plaintext",
                "-d",
                "{}",
                &target(&s),
                "fgrpc.PingServer/Ping",
            ],
        );
        assert!(!ok, "{out}");
        assert!(
            err.contains("Code: Unavailable") && err.contains("Message: busy"),
            "{err}"
        );
    }
    let o = call(&s, "/pkg.Svc/Close", "application/grpc", framed(0, b""));
    assert!(o.broken.is_some() && o.grpc_status.is_none(), "{o:?}");
}

#[test]
fn a_phase_changes_a_grpc_routes_status_and_refuses_an_http_one() {
    let s = start(&[
        "--route",
        "/pkg.Svc/M",
        "--phase",
        "at=0s for=3600s /pkg.Svc/M grpc-status=UNAVAILABLE",
    ]);
    let o = call(&s, "/pkg.Svc/M", "application/grpc", framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("14"), "{o:?}");
    let line = statico_tests::refused_in_one_line(&[
        "--grpc",
        "--route",
        "/pkg.Svc/M",
        "--phase",
        "at=0s for=3600s /pkg.Svc/M status=503",
    ]);
    assert!(line.contains("grpc-status"), "{line}");
    // A phase's gRPC keys on an HTTP route: its health, its messages.
    for (keys, says) in [
        ("health=NOT_SERVING", "health= needs a gRPC method path"),
        ("events=3", "not on a gRPC method path"),
    ] {
        let phase = format!("at=0s for=3600s /x {keys}");
        let line =
            statico_tests::refused_in_one_line(&["--grpc", "--route", "/x", "--phase", &phase]);
        assert!(line.contains(says), "{keys}: {line}");
    }
}

#[test]
fn a_server_streaming_route_sends_its_reply_on_the_streams_times_then_ok_or_deadline_exceeded() {
    let route = "/pkg.Svc/Feed events=5 first=100ms gap=50ms size=3";
    let s = start(&["--route", route, "--metrics", "127.0.0.1:0"]);
    let ms = Duration::from_millis;
    let o = call(&s, "/pkg.Svc/Feed", "application/grpc", framed(0, b""));
    assert_eq!(
        (o.http, o.grpc_status.as_deref()),
        (200, Some("0")),
        "{o:?}"
    );
    assert!(!o.trailers_only, "{o:?}");
    let message = [0, 0, 0, 0, 5, 0x0a, 3];
    assert_eq!(o.body.len(), 5 * 10, "five messages: {o:?}");
    for m in o.body.chunks(10) {
        assert_eq!(
            m[..7],
            message,
            "a message whose field 1 holds 3 bytes: {o:?}"
        );
    }
    assert_eq!(o.pieces.len(), 5, "one DATA frame per message: {o:?}");
    for (k, at) in o.pieces.iter().enumerate() {
        let due = ms(100 + 50 * k as u64);
        assert!(
            *at + EARLY >= due && *at < due + ms(40),
            "message {k} at {at:?}, due {due:?}"
        );
    }
    // A deadline between the second and third messages: two, then DEADLINE_EXCEEDED at it.
    let fields = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "170m"),
    ];
    let o = call_with(&s, "/pkg.Svc/Feed", &fields, framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    assert_eq!((o.pieces.len(), o.body.len()), (2, 20), "{o:?}");
    assert!(
        o.ended + EARLY >= ms(170) && o.ended < ms(230),
        "ended at {:?}",
        o.ended
    );
    let truth =
        statico_tests::figures::truth_when(&s, |t| t["routes"][0]["count"].as_u64() == Some(2));
    let route = &truth["routes"][0];
    for name in ["OK", "DEADLINE_EXCEEDED"] {
        assert_eq!(
            statico_tests::figures::outcome(route, name),
            1,
            "{name}: {route}"
        );
    }
    assert_eq!(route["stream"]["events"], 7, "the messages sent: {route}");
}

/// A call to `path` whose messages are read until `after` of them came, then the stream is reset
/// (CANCEL); the connection stays open a while after.
fn call_and_cancel_after(s: &Server, path: &str, after: usize) {
    let addr = s.addr;
    runtime().block_on(async move {
        let (client, _conn) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let request = grpc_call(addr, path);
        let (response, mut send) = client.send_request(request, false).unwrap();
        send.send_data(Bytes::from(framed(0, b"")), true).unwrap();
        let mut body = response.await.expect("a head").into_body();
        let mut messages = 0;
        while messages < after {
            let data = tokio::time::timeout(Duration::from_secs(10), body.data());
            let data = data.await.expect("a message").expect("more").expect("data");
            let _ = body.flow_control().release_capacity(data.len());
            messages += usize::from(!data.is_empty());
        }
        send.send_reset(h2::Reason::CANCEL);
        drop(body);
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
}

#[test]
fn a_server_streaming_routes_cancel_is_gone_and_its_faults_are_their_own_outcomes() {
    let s = start(&[
        "--route",
        "/pkg.Svc/Feed events=20 gap=50ms",
        "--route",
        "/pkg.Svc/Reset events=5 gap=5ms fault=reset:100%",
        "--route",
        "/pkg.Svc/Close events=5 gap=5ms fault=close:100%",
        "--metrics",
        "127.0.0.1:0",
    ]);
    call_and_cancel_after(&s, "/pkg.Svc/Feed", 3);
    for path in ["/pkg.Svc/Reset", "/pkg.Svc/Close"] {
        let o = call(&s, path, "application/grpc", framed(0, b""));
        assert!(o.broken.is_some() && o.grpc_status.is_none(), "{o:?}");
    }
    let truth = statico_tests::figures::truth_when(&s, |t| {
        let routes = t["routes"].as_array().into_iter().flatten();
        routes.filter(|r| r["count"].as_u64() == Some(1)).count() == 3
    });
    let route = |path: &str| statico_tests::figures::entry(&truth, path).clone();
    let counted = |path: &str, name: &str| statico_tests::figures::outcome(&route(path), name);
    let feed = route("/pkg.Svc/Feed");
    assert_eq!(counted("/pkg.Svc/Feed", "gone"), 1, "{feed}");
    assert_eq!(counted("/pkg.Svc/Feed", "DEADLINE_EXCEEDED"), 0, "{feed}");
    assert_eq!(
        feed["stream"]["events"], 3,
        "the messages the client got: {feed}"
    );
    for (path, fault) in [("/pkg.Svc/Reset", "reset"), ("/pkg.Svc/Close", "close")] {
        assert_eq!(counted(path, fault), 1, "{}", route(path));
        assert_eq!(counted(path, "gone"), 0, "{}", route(path));
    }
}

/// ghz calling `slow.Svc/Stream` (a server-streaming method, from a proto file) `n` times, `c` at
/// a time: its JSON report.
fn ghz_stream(ghz: &Path, s: &Server, n: u32, c: u32) -> (serde_json::Value, String) {
    let dir = std::env::temp_dir().join(format!("statico-ghz-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let proto = dir.join("slow.proto");
    let service = "syntax = \"proto3\";\npackage slow;\nmessage M { bytes data = 1; }\n\
        service Svc { rpc Stream(M) returns (stream M); }\n";
    std::fs::write(&proto, service).unwrap();
    let call = [
        "--proto",
        proto.to_str().unwrap(),
        "--call",
        "slow.Svc/Stream",
    ];
    let (_, report, out) = ghz_json(ghz, s, &call, n, c);
    let _ = std::fs::remove_dir_all(&dir);
    (report, out)
}

#[test]
fn ghz_sees_a_server_streaming_routes_faults_as_the_ground_truth_counts_them() {
    let test = "ghz_sees_a_server_streaming_routes_faults_as_the_ground_truth_counts_them";
    let Some(ghz) = go_tool("ghz", test) else {
        return;
    };
    // One call at a time: each status ghz saw is the outcome counted.
    for (fault, status) in [("reset", "Internal"), ("close", "Unavailable")] {
        let route = format!("/slow.Svc/Stream events=5 gap=5ms fault={fault}:10%");
        let s = start(&["--route", &route, "--metrics", "127.0.0.1:0"]);
        let (report, out) = ghz_stream(&ghz, &s, 200, 1);
        let (ok, faulted) = (ghz_count(&report, "OK"), ghz_count(&report, status));
        assert_eq!(ok + faulted, 200, "{out}");
        let truth = statico_tests::figures::truth_when(&s, |t| {
            t["routes"][0]["count"].as_u64() == Some(200)
        });
        let entry = &truth["routes"][0];
        let counted = |name| statico_tests::figures::outcome(entry, name);
        assert_eq!(
            (counted("OK"), counted(fault)),
            (ok, faulted),
            "{entry}\n{out}"
        );
        assert_eq!(counted("gone"), 0, "{entry}");
    }
    // Five at a time on one connection: a close cuts the calls beside it, which are gone, never
    // past a deadline they did not give.
    let route = "/slow.Svc/Stream events=5 gap=10ms fault=close:10%";
    let s = start(&["--route", route, "--metrics", "127.0.0.1:0"]);
    let (report, out) = ghz_stream(&ghz, &s, 300, 5);
    assert!(ghz_count(&report, "Unavailable") > 0, "{out}");
    let truth = statico_tests::figures::truth_when(&s, |t| {
        let outcomes = &t["routes"][0]["outcomes"];
        outcomes["close"].as_u64() > Some(0) && outcomes["gone"].as_u64() > Some(0)
    });
    let entry = &truth["routes"][0];
    let counted = |name| statico_tests::figures::outcome(entry, name);
    assert_eq!(counted("DEADLINE_EXCEEDED"), 0, "{entry}");
    assert!(counted("close") > 0 && counted("gone") > 0, "{entry}");
}

#[test]
fn a_call_with_a_malformed_grpc_timeout_is_internal_and_counted() {
    let s = start(&["--route", "/pkg.Svc/M", "--metrics", "127.0.0.1:0"]);
    let malformed = ["abc", "100", "-5m", "123456789m"];
    for path in ["/pkg.Svc/M", "/fgrpc.PingServer/Ping"] {
        for timeout in malformed {
            let fields = [
                ("content-type", "application/grpc"),
                ("grpc-timeout", timeout),
            ];
            let o = call_with(&s, path, &fields, framed(0, b""));
            assert_eq!(
                o.grpc_status.as_deref(),
                Some("13"),
                "{path} {timeout}: {o:?}"
            );
        }
    }
    let truth = statico_tests::figures::truth_when(&s, |t| {
        let routes = t["routes"].as_array().into_iter().flatten();
        routes.filter(|r| r["count"].as_u64() == Some(4)).count() == 2
    });
    for path in ["/pkg.Svc/M", "/fgrpc.PingServer/Ping"] {
        let route = statico_tests::figures::entry(&truth, path);
        assert_eq!(
            statico_tests::figures::outcome(route, "INTERNAL"),
            4,
            "{route}"
        );
    }
}

#[test]
fn a_health_route_takes_the_server_out_of_service_for_a_phase_and_a_watch_sees_it_come_back() {
    let test =
        "a_health_route_takes_the_server_out_of_service_for_a_phase_and_a_watch_sees_it_come_back";
    let s = start(&[
        "--route",
        "/grpc.health.v1.Health/* health=SERVING",
        "--phase",
        "at=0s for=2s /grpc.health.v1.Health/* health=NOT_SERVING",
    ]);
    let started = Instant::now();
    let probe = go_tool("grpc-health-probe", test);
    if let Some(probe) = &probe {
        let (ok, out, err) = run(probe, &[&format!("-addr={}", target(&s))]);
        assert!(!ok && err.contains("NOT_SERVING"), "{out}\n{err}");
    }
    // A Watch gets NOT_SERVING, then SERVING when the phase ends, then its deadline.
    let fields = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "3000m"),
    ];
    let o = call_with(&s, "/grpc.health.v1.Health/Watch", &fields, framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    let (not_serving, serving) = (framed(0, &[0x08, 2]), framed(0, &[0x08, 1]));
    assert_eq!(o.body, [not_serving, serving].concat(), "{o:?}");
    let change = started.elapsed() - o.ended + o.pieces[1];
    assert!(
        change >= Duration::from_millis(1800) && change < Duration::from_millis(2400),
        "the change came {change:?} after the start"
    );
    if let Some(probe) = &probe {
        let (ok, out, err) = run(probe, &[&format!("-addr={}", target(&s))]);
        assert!(ok && err.contains("status: SERVING"), "{out}\n{err}");
    }
}

#[test]
fn the_built_in_methods_calls_are_in_the_ground_truth_by_method_and_status() {
    let s = start(&["--metrics", "127.0.0.1:0"]);
    let ping = "/fgrpc.PingServer/Ping";
    for _ in 0..3 {
        let o = call(&s, ping, "application/grpc", ping_with_delay(0));
        assert_eq!(o.grpc_status.as_deref(), Some("0"), "{o:?}");
    }
    let late = [
        ("content-type", "application/grpc"),
        ("grpc-timeout", "50m"),
    ];
    let o = call_with(&s, ping, &late, ping_with_delay(200));
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    // HealthCheckRequest{service: "no.Such"}.
    let mut unknown = vec![0x0a, 7];
    unknown.extend_from_slice(b"no.Such");
    let check = "/grpc.health.v1.Health/Check";
    let o = call(&s, check, "application/grpc", framed(0, &unknown));
    assert_eq!(o.grpc_status.as_deref(), Some("5"), "{o:?}");
    let o = call_with(&s, "/grpc.health.v1.Health/Watch", &late, framed(0, b""));
    assert_eq!(o.grpc_status.as_deref(), Some("4"), "{o:?}");
    // A client that leaves while its ping's delay holds the answer: `gone`.
    call_and_leave(&s, ping, ping_with_delay(400), Duration::from_millis(100));
    let truth = statico_tests::figures::truth_when(&s, |t| {
        let routes = t["routes"].as_array().into_iter().flatten();
        routes
            .map(|r| r["count"].as_u64().unwrap_or(0))
            .sum::<u64>()
            == 7
    });
    let method = |path: &str| {
        let routes = truth["routes"].as_array().unwrap();
        routes.iter().find(|r| r["route"] == path).cloned().unwrap()
    };
    let outcome = statico_tests::figures::outcome;
    let pinged = method(ping);
    assert_eq!(outcome(&pinged, "OK"), 3, "{pinged}");
    assert_eq!(outcome(&pinged, "DEADLINE_EXCEEDED"), 1, "{pinged}");
    assert_eq!(outcome(&pinged, "gone"), 1, "{pinged}");
    assert_eq!(outcome(&method(check), "NOT_FOUND"), 1, "{truth}");
    let watched = method("/grpc.health.v1.Health/Watch");
    assert_eq!(outcome(&watched, "DEADLINE_EXCEEDED"), 1, "{watched}");
    let metrics = s.scrape("/metrics");
    let not_found = metrics.lines().find(|l| {
        l.starts_with("statico_route_requests_total{")
            && l.contains(r#"route="/grpc.health.v1.Health/Check""#)
            && l.contains(r#"outcome="NOT_FOUND""#)
    });
    let line = not_found.unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        line.contains(r#"grpc_status="5""#) && line.ends_with(" 1"),
        "{line}"
    );
}
