//! Streamed answers (`stream=sse|ndjson|chunks`) as a client that relies on them sees them:
//! `curl -N` and a raw socket over HTTP/1.1 (each event its own chunk, spread over time, the
//! connection going on after the last chunk), HTTP/1.0 (no chunking, the close ends the stream),
//! curl and the `h2` crate over HTTP/2 and a quinn + h3 client over HTTP/3 (each event its own DATA
//! frame), the three framings, `{i}`, `event-size=`, a drawn number of events, `Last-Event-ID`
//! resuming and its 204, HEAD, a drawn error status answered whole, the faults (truncate, close,
//! reset, stall), a client that leaves mid-stream (closing its connection, or cancelling its HTTP/2
//! or HTTP/3 stream), clients that never read, many streams at once, `delay=` and `first=` timed
//! from the client, the ground truth (JSON, the control API, Prometheus, the exit totals) checked
//! against what the clients counted, a stream route put with `PUT /routes`, and the one-line
//! start-up errors of a bad stream route.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::time::{Duration, Instant};

use serde_json::Value;
use statico_tests::figures::{self, admin_truth, entry, num, outcome, truth, truth_when};
use statico_tests::wire::{
    admin, assert_field, assert_no_field, curl_split, h2_body, h2_connect, runtime, End, H2Body,
    Streamed, Wire,
};
use statico_tests::{get, refused_in_one_line, rss_kib, run_client, Server, WAIT};

/// statico with `--route SPEC` for each of `routes`, then `extra`.
fn start(routes: &[&str], extra: &[&str]) -> Server {
    let mut args: Vec<&str> = routes.iter().flat_map(|r| ["--route", *r]).collect();
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The default payload of event `i` (`{"i":{i}}`).
fn payload(i: usize) -> String {
    format!("{{\"i\":{i}}}")
}

/// Event `i` as server-sent events frame it.
fn sse(i: usize, data: &str) -> String {
    format!("id: {i}\ndata: {data}\n\n")
}

/// The default SSE events `ids`, as text.
fn sse_events(ids: Range<usize>) -> Vec<String> {
    ids.map(|i| sse(i, &payload(i))).collect()
}

/// One GET for `path` on a fresh connection, read as a stream.
fn stream_of(s: &Server, path: &str) -> Streamed {
    let mut w = Wire::open(s);
    w.send(&get(path));
    w.streamed()
}

/// A GET for `path` with `Last-Event-ID: id` on `w`.
fn resume(path: &str, id: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\nLast-Event-ID: {id}\r\n\r\n").into_bytes()
}

/// The SSE events of `text`, as (id, data) with a multi-line data joined by `\n`.
fn parse_sse(text: &str) -> Vec<(String, String)> {
    (text.split_terminator("\n\n"))
        .map(|event| {
            let mut id = String::new();
            let mut data: Vec<&str> = Vec::new();
            for line in event.lines() {
                match line.split_once(": ") {
                    Some(("id", v)) => id = v.to_string(),
                    Some(("data", v)) => data.push(v),
                    _ => panic!("not an SSE line: {line:?} in {text:?}"),
                }
            }
            (id, data.join("\n"))
        })
        .collect()
}

// ---- HTTP/1.1 and HTTP/1.0 ----

#[test]
fn curl_n_gets_five_sse_events_with_their_type_cache_control_and_chunking() {
    let s = start(&["/sse stream=sse events=5 gap=50ms"], &[]);
    let (ok, out, err) = run_client("curl", &["-sS", "-N", "-i", "--http1.1", &s.url("/sse")]);
    assert!(ok, "curl: {err}");
    let (head, body) = curl_split(&out);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_field(&head, "content-type", "text/event-stream");
    assert_field(&head, "cache-control", "no-cache");
    assert_field(&head, "transfer-encoding", "chunked");
    assert_no_field(&head, "content-length");
    assert_eq!(body, sse_events(0..5).concat());
}

#[test]
fn a_request_pipelined_behind_a_stream_due_at_once_is_answered_when_it_ends() {
    // Every event due as the head goes: the stream ends as its head drains, and the request
    // behind it must be answered then, not at the header timeout.
    let s = start(
        &["/now stream=ndjson events=3", "/ok body=ok"],
        &["--header-timeout", "5s"],
    );
    let mut w = Wire::open(&s);
    w.send(&[get("/now"), get("/ok")].concat());
    let st = w.streamed();
    assert_eq!((st.head.status, st.end), (200, End::Last));
    assert_eq!(st.texts().len(), 3);
    assert_eq!(w.whole().body, b"ok");
    assert!(
        w.sent.elapsed() < ms(4000),
        "the request behind the stream waited {:?}",
        w.sent.elapsed()
    );
}

#[test]
fn each_event_is_its_own_chunk_spread_over_time_and_the_connection_goes_on() {
    let s = start(&["/sse stream=sse events=5 gap=50ms", "/ok body=ok"], &[]);
    let mut w = Wire::open(&s);
    // A second request pipelined behind the stream: answered after its last chunk.
    w.send(&[get("/sse"), get("/ok")].concat());
    let st = w.streamed();
    assert_eq!(st.head.status, 200, "{}", st.head.head);
    assert_eq!(st.end, End::Last);
    assert_eq!(st.texts(), sse_events(0..5));
    // Four 50 ms gaps: 200 ms between the first event and the last.
    let spread = st.spread();
    assert!(
        spread >= ms(150) && spread < ms(5000),
        "first to last event {spread:?}: {:?}",
        st.chunks.iter().map(|c| c.1).collect::<Vec<_>>()
    );
    assert_eq!(w.whole().body, b"ok");
    // And a stream again on the same connection.
    w.send(&get("/sse"));
    assert_eq!(w.streamed().texts(), sse_events(0..5));
}

#[test]
fn http1_0_gets_the_events_unchunked_and_the_close_ends_them() {
    let s = start(&["/sse stream=sse events=5 gap=50ms"], &[]);
    // Keep-alive asked for or not, an unchunked stream can only end with the connection.
    for connection in ["", "Connection: keep-alive\r\n"] {
        let mut w = Wire::open(&s);
        w.send(format!("GET /sse HTTP/1.0\r\nHost: t\r\n{connection}\r\n").as_bytes());
        let head = w.head();
        assert_eq!(head.status, 200, "{}", head.head);
        assert_no_field(&head.head, "transfer-encoding");
        assert_no_field(&head.head, "content-length");
        assert_field(&head.head, "content-type", "text/event-stream");
        let conn = head.header("connection").map(|c| c.to_ascii_lowercase());
        assert_eq!(conn.as_deref(), Some("close"), "{}", head.head);
        let (body, end) = w.until_closed();
        assert_eq!(end, End::Closed, "{connection:?}");
        assert_eq!(String::from_utf8_lossy(&body), sse_events(0..5).concat());
        let took = w.sent.elapsed();
        assert!(
            took >= ms(150) && took < ms(5000),
            "{connection:?}: closed {took:?} after the request"
        );
    }
}

#[test]
fn http1_1_connection_close_still_gets_chunks_so_a_truncation_shows() {
    let s = start(
        &[
            "/sse stream=sse events=5 gap=10ms",
            "/t stream=sse events=20 gap=5ms fault=truncate:100%",
        ],
        &[],
    );
    let mut w = Wire::open(&s);
    w.send(b"GET /sse HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let st = w.streamed();
    assert_eq!((st.texts(), st.end), (sse_events(0..5), End::Last));
    assert_eq!(w.until_closed(), (Vec::new(), End::Closed));
    // The last chunk is what tells a client the stream was whole: one cut short must fail.
    let args = ["-sS", "-N", "--http1.1", "-H", "Connection: close"];
    let (ok, out, _) = run_client("curl", &[&args[..], &[&s.url("/t")]].concat());
    assert!(!ok, "curl succeeded on a truncated stream: {out:?}");
}

// ---- HTTP/2 ----

/// What an HTTP/2 stream gave: the head if one came, and its body (with no head, none but the error
/// the stream ended with).
struct H2Frames {
    head: Option<http::response::Parts>,
    body: H2Body,
}

/// One GET for `path` over a fresh prior-knowledge HTTP/2 connection to `s`, read frame by frame.
fn h2_frames(s: &Server, path: &str) -> H2Frames {
    let addr = s.addr;
    runtime().block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let req = http::Request::get(format!("http://t{path}"))
            .body(())
            .unwrap();
        let sent = Instant::now();
        let (resp, _) = client.send_request(req, true).unwrap();
        match tokio::time::timeout(WAIT, resp).await.expect("an answer") {
            Ok(resp) => {
                let (head, mut body) = resp.into_parts();
                let body = h2_body(&mut body, sent).await;
                H2Frames {
                    head: Some(head),
                    body,
                }
            }
            Err(e) => {
                let body = H2Body {
                    frames: Vec::new(),
                    error: Some(e),
                };
                H2Frames { head: None, body }
            }
        }
    })
}

#[test]
fn curl_n_over_http2_gets_the_five_events() {
    let s = start(&["/sse stream=sse events=5 gap=50ms"], &["--http2"]);
    let (ok, out, err) = run_client(
        "curl",
        &["-sS", "-N", "-i", "--http2-prior-knowledge", &s.url("/sse")],
    );
    assert!(ok, "curl: {err}");
    let (head, body) = curl_split(&out);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_field(&head, "content-type", "text/event-stream");
    assert_field(&head, "cache-control", "no-cache");
    assert_no_field(&head, "content-length");
    assert_eq!(body, sse_events(0..5).concat());
}

#[test]
fn http2_each_event_is_its_own_data_frame_spread_over_time() {
    let s = start(&["/sse stream=sse events=5 gap=50ms"], &["--http2"]);
    let out = h2_frames(&s, "/sse");
    assert!(out.body.error.is_none(), "{:?}", out.body.error);
    let head = out.head.as_ref().expect("a head");
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-type"], "text/event-stream");
    assert_eq!(head.headers["cache-control"], "no-cache");
    assert!(head.headers.get("content-length").is_none(), "{head:?}");
    assert_eq!(out.body.texts(), sse_events(0..5));
    let spread = out.body.frames[4].1 - out.body.frames[0].1;
    assert!(
        spread >= ms(150) && spread < ms(5000),
        "first to last frame {spread:?}"
    );
}

#[test]
fn http2_truncate_fault_resets_the_stream_after_whole_events() {
    let s = start(
        &["/t stream=sse events=20 gap=5ms fault=truncate:100%"],
        &["--http2"],
    );
    let mut most = 0;
    for _ in 0..8 {
        let out = h2_frames(&s, "/t");
        let head = out.head.as_ref().expect("a head before the truncation");
        assert_eq!(head.status, 200);
        let err = out.body.error.as_ref().expect("the stream is reset");
        assert!(err.is_reset(), "{err}");
        let n = out.body.frames.len();
        assert!(n < 20, "all 20 events, then a reset");
        assert_eq!(out.body.texts(), sse_events(0..n));
        most = most.max(n);
    }
    assert!(most > 0, "eight truncated streams, none with an event");
}

#[test]
fn http2_a_stream_the_client_cancels_is_left_and_the_connection_goes_on() {
    let s = start(
        &[
            "/long stream=sse events=100 gap=20ms",
            "/short stream=ndjson events=3 gap=10ms",
        ],
        &["--http2", "--metrics", "127.0.0.1:0"],
    );
    let addr = s.addr;
    let rt = runtime();
    let short = rt.block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let get = |path: &str| {
            http::Request::get(format!("http://t{path}"))
                .body(())
                .unwrap()
        };
        let (resp, _) = client.send_request(get("/long"), true).unwrap();
        let mut body = resp.await.expect("a head").into_body();
        let mut events = 0;
        while events < 2 {
            let frame = tokio::time::timeout(WAIT, body.data()).await.expect("data");
            events += usize::from(!frame.expect("an event").expect("data").is_empty());
        }
        // Dropping the body cancels the stream (RST_STREAM CANCEL), as a closed EventSource does.
        drop(body);
        let mut client = client.ready().await.unwrap();
        let (resp, _) = client.send_request(get("/short"), true).unwrap();
        let mut body = resp.await.expect("a head").into_body();
        let mut got = Vec::new();
        while let Some(frame) = tokio::time::timeout(WAIT, body.data()).await.expect("data") {
            got.extend_from_slice(&frame.expect("the short stream"));
        }
        String::from_utf8(got).unwrap()
    });
    let want: String = (0..3).map(|i| format!("{}\n", payload(i))).collect();
    assert_eq!(short, want);
    truth_once_long_is_left(&s);
}

#[test]
fn http2_reset_and_close_faults_count_the_events_the_client_got() {
    let s = start(
        &[
            "/reset stream=ndjson events=10 gap=2ms fault=reset:100%",
            "/close stream=ndjson events=10 gap=2ms fault=close:100%",
        ],
        &["--http2", "--metrics", "127.0.0.1:0"],
    );
    for (path, fault) in [("/reset", "reset"), ("/close", "close")] {
        let mut got = 0;
        for _ in 0..8 {
            let out = h2_frames(&s, path);
            assert!(out.body.error.is_some(), "{path}: the stream ends broken");
            got += out.body.frames.len();
        }
        let t = truth_when(&s, |t| outcome(entry(t, path), fault) == 8);
        let e = entry(&t, path);
        assert_eq!(outcome(e, fault), 8, "{e}");
        assert_eq!(
            num(e, &["stream", "events"]),
            got as f64,
            "{path}: the events the client got: {e}"
        );
    }
}

#[test]
fn http2_a_stream_the_client_resets_counts_the_events_it_got() {
    let s = start(
        &["/long stream=ndjson events=100 gap=50ms"],
        &["--http2", "--metrics", "127.0.0.1:0"],
    );
    let addr = s.addr;
    runtime().block_on(async move {
        let (client, _conn) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let get = http::Request::get("http://t/long").body(()).unwrap();
        let (resp, _) = client.send_request(get, true).unwrap();
        let mut body = resp.await.expect("a head").into_body();
        let mut events = 0;
        while events < 3 {
            let frame = tokio::time::timeout(WAIT, body.data()).await.expect("data");
            events += usize::from(!frame.expect("an event").expect("data").is_empty());
        }
        // RST_STREAM CANCEL, well before the next event is due; the connection stays open.
        drop(body);
        tokio::time::sleep(ms(300)).await;
    });
    let t = truth_when(&s, |t| left_or_gone(entry(t, "/long")) >= 1);
    let long = entry(&t, "/long");
    assert_eq!(outcome(long, "gone"), 1, "{long}");
    assert_eq!(num(long, &["stream", "events"]), 3.0, "{long}");
}

// ---- Many at once ----

#[test]
fn a_hundred_concurrent_streams_interleave_rather_than_queue() {
    // 100 streams of 500 ms each on two workers: together, not one after another (50 s).
    let s = start(&["/sse stream=sse events=6 gap=100ms"], &[]);
    let started = Instant::now();
    let clients: Vec<_> = (0..100)
        .map(|_| {
            let mut w = Wire::open(&s);
            std::thread::spawn(move || {
                w.send(&get("/sse"));
                let st = w.streamed();
                (st.texts(), st.end, st.spread())
            })
        })
        .collect();
    for client in clients {
        let (texts, end, spread) = client.join().unwrap();
        assert_eq!((texts, end), (sse_events(0..6), End::Last));
        assert!(
            spread >= ms(400),
            "six events 100 ms apart within {spread:?}"
        );
    }
    let took = started.elapsed();
    assert!(
        took < ms(10000),
        "100 concurrent 500 ms streams took {took:?}"
    );
}

#[test]
fn an_http2_client_that_never_reads_holds_the_events_back_in_bounded_memory() {
    // 100 000 events of 64 KiB, all due at once: 6.5 GB if the server made them faster than the
    // client's flow control takes them.
    let s = start(
        &["/big stream=chunks events=100000 event-size=64k"],
        &["--http2", "-t", "1"],
    );
    let before = rss_kib(s.pid());
    let addr = s.addr;
    let rt = runtime();
    let got = rt.block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let req = http::Request::get("http://t/big").body(()).unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let mut body = resp.await.expect("a head").into_body();
        // Take what the first window holds, release nothing, then wait.
        let mut got = 0;
        while got < 32 * 1024 {
            got += body.data().await.expect("data").expect("the stream").len();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        (got, body)
    });
    let grew = rss_kib(s.pid()).saturating_sub(before);
    assert!(
        grew < 32 * 1024,
        "a client that never reads grew the server by {grew} KiB (got {} bytes)",
        got.0
    );
}

#[test]
fn http2_fifty_concurrent_streams_on_one_connection_interleave() {
    let s = start(&["/sse stream=sse events=6 gap=100ms"], &["--http2"]);
    let addr = s.addr;
    let rt = runtime();
    let took = rt.block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let started = Instant::now();
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let client = client.clone();
            streams.spawn(async move {
                let mut client = client.ready().await.unwrap();
                let req = http::Request::get("http://t/sse").body(()).unwrap();
                let (resp, _) = client.send_request(req, true).unwrap();
                let mut body = resp.await.expect("a head").into_body();
                let out = h2_body(&mut body, started).await;
                assert!(out.error.is_none(), "{:?}", out.error);
                out.texts()
            });
        }
        let all = async {
            while let Some(frames) = streams.join_next().await {
                assert_eq!(frames.unwrap(), sse_events(0..6));
            }
        };
        tokio::time::timeout(WAIT, all)
            .await
            .expect("all 50 streams end");
        started.elapsed()
    });
    assert!(
        took < ms(10000),
        "50 concurrent 500 ms streams took {took:?}"
    );
}

// ---- HTTP/3 ----

#[cfg(target_os = "linux")]
mod http3 {
    //! The same stream over HTTP/3, with the quinn + h3 client of `http3.rs`.

    use std::time::{Duration, Instant};

    use bytes::Buf;

    use super::{ms, payload, sse_events, truth_once_long_is_left};
    use crate::http3::{connect, runtime, scratch, start, timed_pieces};

    #[test]
    fn http3_a_stream_the_client_cancels_is_left_and_the_connection_goes_on() {
        let dir = scratch("streams-cancel");
        let s = start(
            &dir,
            &[
                "--route",
                "/long stream=sse events=100 gap=20ms",
                "--route",
                "/short stream=ndjson events=3 gap=10ms",
                "--metrics",
                "127.0.0.1:0",
            ],
        );
        let short = runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let get = |path: &str| {
                http::Request::get(format!("https://localhost{path}"))
                    .body(())
                    .unwrap()
            };
            let mut long = send.send_request(get("/long")).await.expect("send");
            long.finish().await.expect("finish");
            long.recv_response().await.expect("a head");
            let mut got = 0;
            while got < 2 * "id: 0\ndata: {\"i\":0}\n\n".len() {
                let mut piece = long.recv_data().await.expect("body").expect("an event");
                got += piece.copy_to_bytes(piece.remaining()).len();
            }
            // Dropped unread, quinn's receive stream asks the server to stop sending (STOP_SENDING):
            // h3-quinn's own stop_sending panics while a read is pending.
            drop(long);
            let mut short = send.send_request(get("/short")).await.expect("send");
            short.finish().await.expect("finish");
            short.recv_response().await.expect("a head");
            let mut body = Vec::new();
            while let Some(mut piece) = short.recv_data().await.expect("body") {
                body.extend_from_slice(&piece.copy_to_bytes(piece.remaining()));
            }
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            String::from_utf8(body).unwrap()
        });
        let want: String = (0..3).map(|i| format!("{}\n", payload(i))).collect();
        assert_eq!(short, want);
        truth_once_long_is_left(&s);
    }

    #[test]
    fn http3_each_event_comes_as_its_own_piece_spread_over_time() {
        let dir = scratch("streams-sse");
        let s = start(&dir, &["--route", "/sse stream=sse events=5 gap=50ms"]);
        let (head, pieces) = runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let req = http::Request::get("https://localhost/sse")
                .body(())
                .unwrap();
            let sent = Instant::now();
            let mut stream = send.send_request(req).await.expect("send");
            stream.finish().await.expect("finish");
            let head = stream.recv_response().await.expect("a head");
            let pieces = timed_pieces(&mut stream, sent).await;
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            (head, pieces)
        });
        assert_eq!(head.status(), 200);
        assert_eq!(head.headers()["content-type"], "text/event-stream");
        assert_eq!(head.headers()["cache-control"], "no-cache");
        assert!(head.headers().get("content-length").is_none(), "{head:?}");
        let texts: Vec<String> = pieces.iter().map(|p| p.0.clone()).collect();
        assert_eq!(texts, sse_events(0..5), "one piece per event");
        let spread = pieces[4].1 - pieces[0].1;
        assert!(
            spread >= ms(150) && spread < ms(5000),
            "first to last event {spread:?}"
        );
    }

    #[test]
    fn http3_a_pause_holds_the_events_due_in_it_to_its_end() {
        let dir = scratch("streams-pause");
        let s = start(
            &dir,
            &["--route", super::PAUSED_ROUTE, "--admin", "127.0.0.1:0"],
        );
        let after = runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let req = http::Request::get("https://localhost/p").body(()).unwrap();
            let mut stream = send.send_request(req).await.expect("send");
            stream.finish().await.expect("finish");
            stream.recv_response().await.expect("a head");
            let mut pieces = Vec::new();
            let mut first = None;
            while let Some(mut piece) = stream.recv_data().await.expect("body") {
                let bytes = piece.copy_to_bytes(piece.remaining());
                if bytes.is_empty() {
                    continue;
                }
                match first {
                    None => first = Some(super::pause_now(&s)),
                    Some(at) => pieces.push(Instant::now() - at),
                }
            }
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            pieces
        });
        super::assert_held_by_the_pause(&s, &after);
    }
}

// ---- Framings, payloads, counts ----

#[test]
fn ndjson_events_are_lines_with_every_i_replaced_by_the_index() {
    let s = start(
        &[r#"/n stream=ndjson events=4 event={"n":{i},"again":"{i}"}"#],
        &[],
    );
    let st = stream_of(&s, "/n");
    assert_eq!(st.end, End::Last);
    assert_field(&st.head.head, "content-type", "application/x-ndjson");
    let want: Vec<String> = (0..4)
        .map(|i| format!("{{\"n\":{i},\"again\":\"{i}\"}}\n"))
        .collect();
    assert_eq!(st.texts(), want);
}

#[test]
fn chunks_events_are_the_payload_as_is() {
    let s = start(&["/c stream=chunks events=3 event=tick-{i};"], &[]);
    let st = stream_of(&s, "/c");
    assert_eq!(st.end, End::Last);
    assert_field(&st.head.head, "content-type", "application/octet-stream");
    assert_eq!(st.texts(), ["tick-0;", "tick-1;", "tick-2;"]);
}

#[test]
fn a_stream_route_without_counts_gives_ten_events_of_the_default_payload() {
    let s = start(&["/d stream=ndjson"], &[]);
    let st = stream_of(&s, "/d");
    assert_eq!(st.end, End::Last);
    let want: Vec<String> = (0..10).map(|i| format!("{}\n", payload(i))).collect();
    assert_eq!(st.texts(), want);
}

#[test]
fn event_size_100_gives_each_event_100_bytes_in_every_framing() {
    let s = start(
        &[
            "/c stream=chunks events=3 event-size=100",
            "/n stream=ndjson events=3 event-size=100",
            "/s stream=sse events=3 event-size=100",
        ],
        &[],
    );
    let chunks = stream_of(&s, "/c");
    assert_eq!(chunks.chunks.len(), 3);
    for (c, _) in &chunks.chunks {
        assert_eq!(c.len(), 100, "{:?}", String::from_utf8_lossy(c));
    }
    // One line per event: a filler with newlines would make several ndjson records of one event.
    let lines = stream_of(&s, "/n");
    assert_eq!(lines.chunks.len(), 3);
    for (c, _) in &lines.chunks {
        assert_eq!(c.len(), 101, "{:?}", String::from_utf8_lossy(c));
        let newlines = c.iter().filter(|b| **b == b'\n').count();
        assert!(
            c.ends_with(b"\n") && newlines == 1,
            "not one line: {:?}",
            String::from_utf8_lossy(c)
        );
    }
    let events = stream_of(&s, "/s");
    assert_eq!(events.chunks.len(), 3);
    for (i, text) in events.texts().iter().enumerate() {
        let parsed = parse_sse(text);
        assert_eq!(parsed.len(), 1, "one event per chunk: {text:?}");
        assert_eq!(parsed[0].0, i.to_string(), "{text:?}");
        assert_eq!(parsed[0].1.len(), 100, "the data of {text:?}");
    }
}

#[test]
fn a_routes_content_type_replaces_the_streams() {
    let s = start(
        &["/j stream=ndjson events=2 header=Content-Type:application/json-seq"],
        &[],
    );
    let st = stream_of(&s, "/j");
    assert_field(&st.head.head, "content-type", "application/json-seq");
    assert_eq!(st.chunks.len(), 2);
}

#[test]
fn events_uniform_3_6_gives_3_to_6_events_and_each_count_over_60_requests() {
    let s = start(&["/u stream=ndjson events=uniform:3:6"], &[]);
    let mut w = Wire::open(&s);
    let mut seen = [0usize; 7];
    for _ in 0..60 {
        w.send(&get("/u"));
        let st = w.streamed();
        assert_eq!(st.end, End::Last);
        let n = st.chunks.len();
        assert!((3..=6).contains(&n), "{n} events");
        let want: Vec<String> = (0..n).map(|i| format!("{}\n", payload(i))).collect();
        assert_eq!(st.texts(), want);
        seen[n] += 1;
    }
    // Even an end of the range drawn at half the others' rate is missed by 60 draws one time in 50 000.
    assert!(seen[3..].iter().all(|n| *n > 0), "counts 3..=6: {seen:?}");
}

// ---- Last-Event-ID ----

#[test]
fn last_event_id_resumes_after_it_and_past_the_last_gets_204() {
    let s = start(&["/sse stream=sse events=5 gap=10ms"], &[]);
    let mut w = Wire::open(&s);
    w.send(&resume("/sse", "2"));
    let st = w.streamed();
    assert_eq!(st.end, End::Last);
    assert_eq!(st.texts(), sse_events(3..5));
    // At or past the last event: 204, no body, and the connection goes on.
    for id in ["4", "17"] {
        w.send(&resume("/sse", id));
        let r = w.head();
        assert_eq!(r.status, 204, "Last-Event-ID: {id}\n{}", r.head);
        assert_no_field(&r.head, "transfer-encoding");
        assert!(
            w.quiet_for(ms(100)),
            "Last-Event-ID: {id}: a body after 204"
        );
    }
    // Not a number: from the start.
    w.send(&resume("/sse", "banana"));
    assert_eq!(w.streamed().texts(), sse_events(0..5));
}

// ---- HEAD and drawn statuses ----

#[test]
fn head_gets_the_streams_head_at_once_and_no_body() {
    let s = start(&["/sse stream=sse events=5 gap=1s", "/ok body=ok"], &[]);
    let mut w = Wire::open(&s);
    w.send(b"HEAD /sse HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = w.head();
    let took = w.sent.elapsed();
    assert_eq!(r.status, 200, "{}", r.head);
    assert_field(&r.head, "content-type", "text/event-stream");
    assert!(
        took < ms(2000),
        "HEAD answered after {took:?} (the stream lasts 4 s)"
    );
    assert!(w.quiet_for(ms(300)), "HEAD got body bytes");
    w.send(&get("/ok"));
    assert_eq!(w.whole().body, b"ok");
}

#[test]
fn a_drawn_503_answers_whole_and_empty_at_once() {
    let s = start(
        &[
            "/down stream=sse events=5 gap=100ms status=503",
            "/mix stream=ndjson events=3 status=200,503:50%",
        ],
        &[],
    );
    let mut w = Wire::open(&s);
    w.send(&get("/down"));
    let r = w.whole();
    assert_eq!(r.status, 503, "{}", r.head);
    assert_eq!(
        r.header("content-length").as_deref(),
        Some("0"),
        "{}",
        r.head
    );
    assert!(
        w.sent.elapsed() < ms(2000),
        "503 after {:?}",
        w.sent.elapsed()
    );
    assert!(w.quiet_for(ms(200)), "bytes after an empty 503");
    // A mix on one connection: each answer framed as its status says.
    let (mut streams, mut errors) = (0, 0);
    for _ in 0..40 {
        w.send(&get("/mix"));
        let head = w.head();
        match head.status {
            200 => {
                assert_field(&head.head, "transfer-encoding", "chunked");
                let mut n = 0;
                while let Some((c, _)) = w.chunk().expect("the terminating chunk") {
                    assert_eq!(String::from_utf8_lossy(&c), format!("{}\n", payload(n)));
                    n += 1;
                }
                assert_eq!(n, 3);
                streams += 1;
            }
            503 => {
                assert_eq!(head.header("content-length").as_deref(), Some("0"));
                assert_no_field(&head.head, "transfer-encoding");
                errors += 1;
            }
            other => panic!("status {other}"),
        }
    }
    assert!(
        streams > 0 && errors > 0,
        "{streams} streams, {errors} 503s"
    );
}

// ---- Faults ----

#[test]
fn truncate_fault_ends_the_stream_after_whole_events_without_the_last_chunk() {
    let s = start(
        &["/t stream=sse events=20 gap=5ms fault=truncate:100%"],
        &[],
    );
    let (ok, out, _) = run_client("curl", &["-sS", "-N", "--http1.1", &s.url("/t")]);
    assert!(!ok, "curl succeeded on a truncated stream: {out:?}");
    let mut most = 0;
    for _ in 0..10 {
        let st = stream_of(&s, "/t");
        assert_eq!(st.head.status, 200);
        assert_eq!(st.end, End::Closed, "the stream did not end with the close");
        let n = st.chunks.len();
        assert!(n < 20, "all 20 events before the close");
        assert_eq!(st.texts(), sse_events(0..n));
        most = most.max(n);
    }
    assert!(most > 0, "ten truncated streams, none with an event");
}

#[test]
fn close_reset_and_stall_faults_end_a_stream_after_whole_events() {
    let s = start(
        &[
            "/close stream=sse events=20 gap=5ms fault=close:100%",
            "/reset stream=sse events=20 gap=5ms fault=reset:100%",
            "/stall stream=sse events=20 gap=5ms fault=stall:100%",
        ],
        &["--idle-timeout", "1s"],
    );
    for (path, want) in [
        ("/close", End::Closed),
        ("/reset", End::Failed(ErrorKind::ConnectionReset)),
    ] {
        let mut most = 0;
        for _ in 0..8 {
            let st = stream_of(&s, path);
            assert_eq!(st.end, want, "{path}");
            let n = st.chunks.len();
            assert!(n < 20, "{path}: all 20 events");
            assert_eq!(st.texts(), sse_events(0..n), "{path}");
            most = most.max(n);
        }
        assert!(most > 0, "{path}: eight streams, none with an event");
    }
    // A stall sends nothing more until the idle timeout closes the connection.
    let mut w = Wire::open(&s);
    w.send(&get("/stall"));
    let st = w.streamed();
    let n = st.chunks.len();
    assert!(n < 20, "/stall: all 20 events");
    assert_eq!(st.texts(), sse_events(0..n));
    assert_ne!(st.end, End::Last, "/stall: the last chunk came");
    let took = w.sent.elapsed();
    assert!(
        took >= ms(900) && took < ms(6000),
        "/stall: ended {took:?} after the request (idle timeout 1 s)"
    );
}

// ---- Clients that leave or never read ----

/// What the interface between the stream's authors says of a client that leaves mid-stream.
const GONE: &str = "a client that leaves mid-stream is counted in outcome `gone`";

/// A route entry's streams left by their clients, counted either way (`stream.left`, outcome `gone`).
fn left_or_gone(entry: &Value) -> u64 {
    entry["stream"]["left"].as_u64().unwrap_or(0) + outcome(entry, "gone")
}

/// The ground truth once the client of `/long` has left: it left once, noticed within a few events
/// (2 to 10 given) rather than at the stream's end.
fn truth_once_long_is_left(s: &Server) -> Value {
    let t = truth_when(s, |t| left_or_gone(entry(t, "/long")) >= 1);
    let long = entry(&t, "/long");
    assert_eq!(num(long, &["stream", "left"]), 1.0, "{long}");
    let given = num(long, &["stream", "events"]);
    assert!(
        (2.0..=10.0).contains(&given),
        "{given} events given: {long}"
    );
    t
}

#[test]
fn a_client_that_leaves_mid_stream_is_counted_gone_and_the_others_are_served() {
    let s = start(
        &[
            "/long stream=sse events=100 gap=20ms",
            "/short stream=sse events=3 gap=10ms",
            "/ok body=ok",
        ],
        &["-t", "1", "--metrics", "127.0.0.1:0"],
    );
    let mut w = Wire::open(&s);
    w.send(&get("/long"));
    assert_eq!(w.head().status, 200);
    for i in 0..2 {
        let (c, _) = w.chunk().expect("an event").expect("not the last");
        assert_eq!(String::from_utf8_lossy(&c), sse(i, &payload(i)));
    }
    drop(w);
    // The same (only) worker goes on serving.
    let short = stream_of(&s, "/short");
    assert_eq!((short.texts(), short.end), (sse_events(0..3), End::Last));
    let mut ok = Wire::open(&s);
    ok.send(&get("/ok"));
    assert_eq!(ok.whole().body, b"ok");
    // Gone, noticed within a few events rather than after the 2 s the stream would take.
    let t = truth_once_long_is_left(&s);
    let long = entry(&t, "/long");
    assert_eq!(outcome(long, "gone"), 1, "{GONE}: {long}");
    assert_eq!(outcome(long, "200"), 0, "{GONE}: {long}");
    let short = entry(&t, "/short");
    assert_eq!(outcome(short, "200"), 1, "{short}");
    assert_eq!(num(short, &["stream", "events"]), 3.0, "{short}");
}

#[test]
fn a_reading_client_gets_every_event_of_a_64_mib_stream() {
    let s = start(&["/big stream=chunks event-size=64k events=1000"], &[]);
    let mut w = Wire::open(&s);
    w.send(&get("/big"));
    let head = w.head();
    assert_eq!(head.status, 200, "{}", head.head);
    let (mut events, mut odd) = (0, Vec::new());
    let end = loop {
        match w.chunk() {
            Ok(Some((c, _))) => {
                if c.len() != 65536 {
                    odd.push((events, c.len()));
                }
                events += 1;
            }
            Ok(None) => break End::Last,
            Err(end) => break end,
        }
    };
    assert!(
        odd.is_empty(),
        "events not of 64 KiB (index, size): {odd:?}"
    );
    assert_eq!(
        (events, end),
        (1000, End::Last),
        "events=1000 event-size=64k: events before the end"
    );
}

#[test]
fn eight_clients_that_never_read_a_big_stream_hold_bounded_memory() {
    let s = start(
        &["/big stream=chunks event-size=64k events=1000"],
        &["-t", "1", "--idle-timeout", "5s"],
    );
    let before = rss_kib(s.pid());
    let clients: Vec<TcpStream> = (0..8)
        .map(|_| {
            let c = s.connect();
            (&c).write_all(&get("/big")).unwrap();
            c
        })
        .collect();
    let sent = Instant::now();
    let mut peak = 0;
    while sent.elapsed() < ms(1500) {
        peak = peak.max(rss_kib(s.pid()));
        std::thread::sleep(ms(20));
    }
    // The events are filler: what a stalled client costs is its place in the stream, not its bytes.
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for 8 streams nobody reads"
    );
    drop(clients);
}

#[test]
fn a_client_that_never_reads_a_big_stream_holds_bounded_memory_and_is_closed_at_the_timeout() {
    // 4000 events of 64 KiB: a server that made them all regardless would hold 250 MiB.
    let s = start(
        &["/big stream=chunks event-size=64k events=4000"],
        &["-t", "1", "--idle-timeout", "2s"],
    );
    let before = rss_kib(s.pid());
    let c = s.connect();
    let ends = (c.local_addr().unwrap(), c.peer_addr().unwrap());
    (&c).write_all(&get("/big")).unwrap();
    let sent = Instant::now();
    let mut peak = 0;
    while sent.elapsed() < ms(1500) {
        peak = peak.max(rss_kib(s.pid()));
        std::thread::sleep(ms(20));
    }
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one stream nobody reads"
    );
    // The output stalls at once: not closed before the 2 s idle timeout, and not long after
    // (watched in the kernel's table: a probe written would leave unread bytes, which make any
    // close a reset).
    while !crate::http2_hostile::connection_gone(&c) {
        assert!(
            sent.elapsed() < ms(5000),
            "still open {:?} after the output stalled",
            sent.elapsed()
        );
        std::thread::sleep(ms(20));
    }
    let closed = sent.elapsed();
    assert!(
        closed >= ms(1800),
        "closed after {closed:?} (idle timeout 2 s)"
    );
    // With a reset: the kernel keeps no closed socket retrying the events never read.
    crate::http2_hostile::assert_closed_with_a_reset(ends, "the events");
    let after = rss_kib(s.pid());
    statico_tests::assert_memory!(
        after < before + 64 * 1024,
        "RSS {after} KiB after the close (from {before} KiB)"
    );
    drop(c);
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

// ---- Ground truth ----

#[test]
fn ground_truth_counts_the_events_clients_received_and_the_drawn_times() {
    let s = start(
        &["/sse stream=sse events=uniform:3:8 first=20ms gap=uniform:5ms:15ms"],
        &["--metrics", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
    );
    let requests: u64 = 10;
    let mut received = 0;
    let mut w = Wire::open(&s);
    for _ in 0..requests {
        w.send(&get("/sse"));
        let st = w.streamed();
        assert_eq!(st.end, End::Last);
        let n = st.chunks.len();
        assert_eq!(st.texts(), sse_events(0..n));
        let first = st.chunks[0].1;
        assert!(
            first >= ms(19),
            "first event {first:?} after the request (first=20ms)"
        );
        received += n;
    }
    let received = received as f64;
    let t = truth_when(&s, |t| outcome(entry(t, "/sse"), "200") >= requests);
    let e = entry(&t, "/sse");
    assert_eq!(outcome(e, "200"), requests, "{e}");
    let stream = &e["stream"];
    assert_eq!(num(stream, &["events"]), received, "{stream}");
    // One first wait per request, one gap between each two events, one lateness per event.
    let first = &stream["first_us"];
    assert_eq!(num(first, &["count"]), requests as f64, "{first}");
    // The summaries are those of the other histograms (count, mean, p50 … p99.9, max): no min.
    assert!(num(first, &["mean"]) >= 19_000.0, "{first}");
    assert!(num(first, &["max"]) <= 21_000.0, "{first}");
    let gap = &stream["gap_us"];
    assert_eq!(num(gap, &["count"]), received - requests as f64, "{gap}");
    assert!(num(gap, &["max"]) <= 15_100.0, "{gap}");
    // Over 20 or more uniform draws from 5..15 ms, a mean off 10 ms by 3 ms is 4 standard errors.
    let mean = num(gap, &["mean"]);
    assert!((7_000.0..=13_000.0).contains(&mean), "{gap}");
    let late = &stream["late_us"];
    assert_eq!(num(late, &["count"]), received, "{late}");
    assert!(num(late, &["p50"]) < 20_000.0, "{late}");
    // The control API's document says the same.
    let from_admin = admin_truth(&s);
    let events = num(&entry(&from_admin, "/sse")["stream"], &["events"]);
    assert_eq!(events, received, "{from_admin}");
    assert_eq!(
        num(&entry(&truth(&s), "/sse")["stream"], &["events"]),
        received
    );
    // And Prometheus, and the totals at exit.
    let page = s.scrape("/metrics");
    let series = r#"statico_route_stream_events_total{route="/sse"}"#;
    assert_eq!(figures::series(&page, series), Some(received), "{page}");
    let stopped = s.stop();
    let line = format!("stream {received} events, 0 left");
    assert!(
        stopped.stderr.contains(&line),
        "no {line:?} in\n{}",
        stopped.stderr
    );
}

// ---- Pauses, and gaps drawn from the count in flight ----

/// Three events 300 ms apart, the first with the head: the pause tests' route.
const PAUSED_ROUTE: &str = "/p stream=ndjson events=3 gap=300ms";

/// Pauses `s` for 1 s now (`POST /pause?for=1s`): the instant just before it was asked for.
fn pause_now(s: &Server) -> Instant {
    let asked = Instant::now();
    let r = admin(s, "POST", "/pause?for=1s", "");
    assert_eq!(r.status, 200, "{}", r.head);
    asked
}

/// A pause of 1 s asked for as the first event of [`PAUSED_ROUTE`] came: the events due 300 and
/// 600 ms later came `after` it, both when the pause ended — in order, together — and the ground
/// truth says how late they went.
fn assert_held_by_the_pause(s: &Server, after: &[Duration]) {
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        after[0] >= ms(990) && after[0] < ms(1600),
        "the event due 300 ms in came {:?} after a 1 s pause began",
        after[0]
    );
    assert!(
        after[1] - after[0] < ms(200),
        "the event due 600 ms in came {:?} after the one before: it too was due when the pause ended",
        after[1] - after[0]
    );
    let t = admin_truth(s);
    let late = &entry(&t, "/p")["stream"]["late_us"];
    assert_eq!(num(late, &["count"]), 3.0, "{late}");
    // The event due at 300 ms went at the pause's end, ~1 s: ~700 ms late.
    let max = num(late, &["max"]);
    assert!((650_000.0..1_300_000.0).contains(&max), "{late}");
}

#[test]
fn a_pause_holds_the_events_due_in_it_to_its_end() {
    let s = start(&[PAUSED_ROUTE], &["--admin", "127.0.0.1:0"]);
    let mut w = Wire::open(&s);
    w.send(&get("/p"));
    assert_eq!(w.head().status, 200);
    w.chunk().expect("an event").expect("not the last");
    let asked = pause_now(&s);
    let mut after = Vec::new();
    while w.chunk().expect("the last chunk").is_some() {
        after.push(asked.elapsed());
    }
    assert_held_by_the_pause(&s, &after);
    // A pause over, the next stream is on its own times again.
    w.send(&get("/p"));
    assert_eq!(w.streamed().texts().len(), 3);
}

#[test]
fn http2_a_pause_holds_the_events_due_in_it_to_its_end() {
    let s = start(&[PAUSED_ROUTE], &["--http2", "--admin", "127.0.0.1:0"]);
    let addr = s.addr;
    let after = runtime().block_on(async {
        let (client, _) = h2_connect(addr).await;
        let mut client = client.ready().await.unwrap();
        let req = http::Request::get("http://t/p").body(()).unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let mut body = resp.await.expect("a head").into_body();
        let (mut first, mut after) = (None, Vec::new());
        while let Some(frame) = tokio::time::timeout(WAIT, body.data()).await.expect("data") {
            if frame.expect("an event").is_empty() {
                continue;
            }
            match first {
                None => first = Some(pause_now(&s)),
                Some(at) => after.push(at.elapsed()),
            }
        }
        after
    });
    assert_held_by_the_pause(&s, &after);
}

#[test]
fn gap_inflight_is_drawn_with_the_streams_open_each_counted_to_its_end() {
    // Each gap is 20 ms + 20 ms × this route's streams in flight when it is drawn.
    let s = start(
        &["/i stream=ndjson events=4 gap=inflight:20ms:20ms"],
        &["--metrics", "127.0.0.1:0"],
    );
    // Alone: three gaps of 40 ms, the last event 120 ms after the head at the soonest (the server
    // can only be late).
    let alone = stream_of(&s, "/i");
    assert_eq!((alone.texts().len(), alone.end), (4, End::Last));
    let last = alone.chunks.last().unwrap().1;
    assert!(
        last >= ms(119) && last < ms(1000),
        "alone: last event {last:?} after the request"
    );
    let t = truth_when(&s, |t| outcome(entry(t, "/i"), "200") >= 1);
    let gap = &entry(&t, "/i")["stream"]["gap_us"];
    assert!((39_000.0..=41_000.0).contains(&num(gap, &["max"])), "{gap}");
    // Four at once: once all four are open every gap is drawn with four in flight, 100 ms (the
    // ground truth's drawn gaps say so exactly; a client's own clock only that no gap was shorter
    // than alone, as a client may be scheduled late to open); a stream counts until its last
    // event, not its head.
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let mut w = Wire::open(&s);
            std::thread::spawn(move || {
                w.send(&get("/i"));
                w.streamed()
            })
        })
        .collect();
    for client in clients {
        let st = client.join().unwrap();
        assert_eq!((st.texts().len(), st.end), (4, End::Last));
        let last = st.chunks.last().unwrap().1;
        assert!(
            last >= ms(119) && last < ms(3000),
            "four at once: the last event {last:?} after the request"
        );
    }
    let t = truth_when(&s, |t| outcome(entry(t, "/i"), "200") >= 5);
    let gap = &entry(&t, "/i")["stream"]["gap_us"];
    assert_eq!(num(gap, &["count"]), 15.0, "{gap}");
    assert!(
        (99_000.0..=101_000.0).contains(&num(gap, &["max"])),
        "{gap}"
    );
}

// ---- Delays, the control API ----

#[test]
fn the_head_leaves_after_delay_and_the_first_event_after_first() {
    let s = start(
        &["/d stream=ndjson events=3 delay=150ms first=100ms gap=10ms"],
        &[],
    );
    let mut w = Wire::open(&s);
    w.send(&get("/d"));
    w.head();
    let head = w.sent.elapsed();
    let events = {
        let mut chunks = Vec::new();
        while let Some(chunk) = w.chunk().expect("the last chunk") {
            chunks.push(chunk);
        }
        chunks
    };
    assert!(
        head >= ms(145) && head < ms(3000),
        "head after {head:?} (delay 150 ms)"
    );
    assert_eq!(events.len(), 3);
    let first = events[0].1;
    assert!(
        first >= ms(245) && first < ms(4000),
        "first event after {first:?} (delay 150 ms, first 100 ms)"
    );
}

#[test]
fn put_routes_takes_a_stream_route_and_refuses_a_body_with_stream() {
    let s = start(&["/s body=plain"], &["--admin", "127.0.0.1:0"]);
    let table = "[[route]]\npath = \"/s\"\nstream = \"ndjson\"\nevents = 3\n";
    let r = admin(&s, "PUT", "/routes", table);
    assert_eq!(
        r.status,
        200,
        "{}{}",
        r.head,
        String::from_utf8_lossy(&r.body)
    );
    let st = stream_of(&s, "/s");
    let want: Vec<String> = (0..3).map(|i| format!("{}\n", payload(i))).collect();
    assert_eq!(st.texts(), want);
    // Refused whole, naming the key: the table in force stays.
    let bad = "[[route]]\npath = \"/s\"\nstream = \"sse\"\nbody = \"x\"\n";
    let r = admin(&s, "PUT", "/routes", bad);
    let text = String::from_utf8_lossy(&r.body);
    assert!((400..500).contains(&r.status), "{}{text}", r.head);
    assert!(text.contains("body") && text.contains("stream"), "{text}");
    assert_eq!(stream_of(&s, "/s").texts(), want);
}

// ---- Start-up errors and the routes file ----

/// Asserts a flag form route is refused at start-up in one line naming each of `names`.
fn assert_refused(spec: &str, names: &[&str]) {
    let line = refused_in_one_line(&["--route", spec]);
    for name in [&["--route"], names].concat() {
        assert!(line.contains(name), "{spec:?} should name {name:?}: {line}");
    }
}

#[test]
fn a_body_size_rate_or_body_delay_with_stream_exits_2_naming_the_key_and_the_events() {
    for (spec, key) in [
        ("/s stream=sse body=x", "body"),
        ("/s stream=sse size=1k", "size"),
        ("/s stream=ndjson rate=1k", "rate"),
        ("/s stream=chunks body-delay=10ms", "body-delay"),
    ] {
        assert_refused(spec, &[key, "stream", "event"]);
    }
}

#[test]
fn bad_stream_keys_exit_2_naming_the_key() {
    for (spec, names) in [
        ("/s stream=sse events=0", &["events"][..]),
        ("/s stream=foo", &["stream", "foo"]),
        ("/s stream=sse gap=soonish", &["gap", "soonish"]),
        ("/s stream=sse first=later", &["first", "later"]),
        ("/s stream=sse events=many", &["events", "many"]),
        ("/s stream=sse event-size=huge", &["event-size", "huge"]),
    ] {
        assert_refused(spec, names);
    }
}

#[test]
fn stream_keys_without_stream_exit_2_naming_the_key_and_stream() {
    for (spec, key) in [
        ("/s events=5", "events"),
        ("/s gap=10ms", "gap"),
        ("/s first=10ms", "first"),
        ("/s event=x", "event"),
        ("/s event-size=100", "event-size"),
    ] {
        assert_refused(spec, &[key, "stream="]);
    }
}

#[test]
fn the_routes_file_takes_the_stream_keys_and_refuses_a_body_with_them() {
    let dir = statico_tests::scratch_dir("streams", "toml");
    let good = dir.join("good.toml");
    // Integers and strings both; a payload with a newline gets one `data:` line per line.
    std::fs::write(
        &good,
        "[[route]]\npath = \"/sse\"\nstream = \"sse\"\nevents = 3\ngap = \"10ms\"\n\
         first = \"5ms\"\nevent = \"line {i}\\nsecond {i}\"\n\n\
         [[route]]\npath = \"/c\"\nstream = \"chunks\"\nevents = \"2\"\nevent-size = \"1k\"\n",
    )
    .unwrap();
    let s = Server::start(&["--routes", good.to_str().unwrap()]);
    let st = stream_of(&s, "/sse");
    let want: Vec<String> = (0..3)
        .map(|i| format!("id: {i}\ndata: line {i}\ndata: second {i}\n\n"))
        .collect();
    assert_eq!(st.texts(), want);
    let c = stream_of(&s, "/c");
    let sizes: Vec<usize> = c.chunks.iter().map(|c| c.0.len()).collect();
    assert_eq!(sizes, [1024, 1024]);
    drop(s);
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[route]]\npath = \"/ok\"\n\n[[route]]\npath = \"/s\"\nstream = \"sse\"\nbody = \"x\"\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let line = refused_in_one_line(&["--routes", bad]);
    for name in ["--routes", bad, "body", "stream"] {
        assert!(line.contains(name), "should name {name:?}: {line}");
    }
}
