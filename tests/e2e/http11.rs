//! HTTP/1.1 behaviour over raw sockets: pipelining, split reads, request bodies, HTTP/1.0, HEAD,
//! 100 Continue, the live Date, large responses, and clients that vanish.

use std::io::Write;
use std::thread::sleep;
use std::time::{Duration, SystemTime};

use statico_tests::{get, Reader, Server};

#[test]
fn pipelined_16_deep_is_answered_in_order_with_one_write() {
    let s = Server::start(&["-b", "pong"]);
    let mut r = Reader::new(s.connect());
    let mut batch = Vec::new();
    for i in 0..16 {
        if i == 7 {
            batch.extend_from_slice(b"HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n");
        } else {
            batch.extend_from_slice(&get(&format!("/{i}")));
        }
    }
    r.send(&batch);
    for i in 0..16 {
        let resp = r.response(i == 7);
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.body,
            if i == 7 { &b""[..] } else { &b"pong"[..] },
            "response {i}"
        );
    }
    assert!(
        r.quiet_for(Duration::from_millis(200)),
        "more than 16 responses"
    );
    drop(r);
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 16);
    assert_eq!(
        stopped.total("reads"),
        1,
        "the 16 requests were sent in one segment"
    );
    assert_eq!(
        stopped.total("writes"),
        1,
        "one read's responses must go out in one write"
    );
}

#[test]
fn request_fed_one_byte_at_a_time() {
    let s = Server::start(&["-b", "slow"]);
    let mut r = Reader::new(s.connect());
    let req = b"POST /split HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
    for b in req.iter() {
        r.send(&[*b]);
        sleep(Duration::from_millis(2));
    }
    assert_eq!(r.response(false).body, b"slow");
    r.send(&get("/again"));
    assert_eq!(r.response(false).status, 200);
}

#[test]
fn content_length_body_then_requests() {
    let s = Server::start(&["-b", "r"]);
    let mut r = Reader::new(s.connect());
    let mut bytes = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123456789".to_vec();
    bytes.extend_from_slice(&get("/1"));
    bytes.extend_from_slice(&get("/2"));
    r.send(&bytes);
    for _ in 0..3 {
        assert_eq!(r.response(false).status, 200);
    }
    assert!(r.quiet_for(Duration::from_millis(200)));
}

#[test]
fn chunked_body_then_request() {
    let s = Server::start(&["-b", "r"]);
    let mut r = Reader::new(s.connect());
    r.send(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n");
    sleep(Duration::from_millis(50));
    r.send(b"5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\n");
    r.send(&get("/next"));
    assert_eq!(r.response(false).status, 200);
    assert_eq!(r.response(false).status, 200);
    assert!(r.quiet_for(Duration::from_millis(200)));
    drop(r);
    assert_eq!(s.stop().total("requests"), 2);
}

#[test]
fn body_that_looks_like_a_request_is_not_parsed_as_one() {
    let s = Server::start(&["-b", "r"]);
    let mut r = Reader::new(s.connect());
    let inner = get("/smuggled");
    let mut bytes = format!(
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        inner.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&inner);
    r.send(&bytes);
    assert_eq!(r.response(false).status, 200);
    assert!(
        r.quiet_for(Duration::from_millis(300)),
        "the body was answered as a request"
    );
    // Chunked too.
    let mut chunked = b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    chunked.extend_from_slice(format!("{:x}\r\n", inner.len()).as_bytes());
    chunked.extend_from_slice(&inner);
    chunked.extend_from_slice(b"\r\n0\r\n\r\n");
    r.send(&chunked);
    assert_eq!(r.response(false).status, 200);
    assert!(
        r.quiet_for(Duration::from_millis(300)),
        "the chunked body was answered as a request"
    );
    drop(r);
    assert_eq!(s.stop().total("requests"), 2);
}

#[test]
fn http10_keep_alive_is_answered_in_kind() {
    let s = Server::start(&["-b", "ten"]);
    let mut r = Reader::new(s.connect());
    for _ in 0..3 {
        r.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let resp = r.response(false);
        assert_eq!(resp.header("connection").as_deref(), Some("keep-alive"));
        assert_eq!(resp.body, b"ten");
    }
    r.send(b"GET / HTTP/1.0\r\n\r\n");
    let resp = r.response(false);
    assert_eq!(resp.header("connection").as_deref(), Some("close"));
    assert!(
        r.until_closed().is_empty(),
        "HTTP/1.0 without keep-alive must close"
    );
}

#[test]
fn connection_close_is_honoured() {
    let s = Server::start(&[]);
    let mut r = Reader::new(s.connect());
    let mut bytes = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec();
    bytes.extend_from_slice(&get("/never-answered"));
    r.send(&bytes);
    let resp = r.response(false);
    assert_eq!(resp.header("connection").as_deref(), Some("close"));
    assert!(
        r.until_closed().is_empty(),
        "nothing may follow a Connection: close response"
    );
}

#[test]
fn one_request_connections_are_counted_and_traced_and_nothing_after_their_close_is_answered() {
    // Each connection's request is there when it is accepted, so it is answered and closed in its
    // first exchange (on tokio before any epoll registration, on io_uring by its single-shot
    // receive): counted, traced with -v, and what was pipelined behind the close is dropped.
    let s = Server::start(&["-t", "1", "-b", "ok", "-v"]);
    let closing: [&[u8]; 2] = [
        b"GET /close HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        b"GET /old HTTP/1.0\r\nHost: t\r\n\r\n",
    ];
    for (i, first) in closing.iter().cycle().take(20).enumerate() {
        let mut r = Reader::new(s.connect());
        r.send(&[*first, &get("/never-answered")[..]].concat());
        let resp = r.response(false);
        assert_eq!(
            (resp.status, &resp.body[..]),
            (200, &b"ok"[..]),
            "client {i}"
        );
        assert!(
            r.until_closed().is_empty(),
            "client {i}: bytes after the close"
        );
    }
    let stopped = s.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert_eq!(stopped.total("requests"), 20);
    assert_eq!(stopped.total("conns_accepted"), 20);
    assert_eq!(stopped.total("conns_closed"), 20);
    assert_eq!(stopped.stdout.matches("GET /close HTTP/1.1").count(), 10);
    assert_eq!(stopped.stdout.matches("GET /old HTTP/1.0").count(), 10);
    assert!(
        !stopped.stdout.contains("never-answered"),
        "{}",
        stopped.stdout
    );
}

#[test]
fn expect_100_continue_over_a_raw_socket() {
    let s = Server::start(&["-b", "done"]);
    let mut r = Reader::new(s.connect());
    r.send(b"PUT /x HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    let interim = r.response(false);
    assert_eq!(interim.status, 100);
    r.send(b"data");
    let fin = r.response(false);
    assert_eq!((fin.status, fin.body.as_slice()), (200, &b"done"[..]));
    // With the body already sent, no 100 is needed.
    r.send(b"PUT /y HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\ndata");
    assert_eq!(r.response(false).status, 200);
}

#[test]
fn date_header_is_live() {
    let s = Server::start(&[]);
    sleep(Duration::from_millis(2500));
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    let date = r.response(false).header("date").expect("a Date header");
    let served = httpdate_parse(&date);
    let now = SystemTime::now();
    let skew = now.duration_since(served).unwrap_or_default();
    assert!(
        skew <= Duration::from_millis(1500),
        "Date {date} is {skew:?} old: not refreshed"
    );
}

/// Parses an IMF-fixdate without a dependency: "Sun, 06 Nov 1994 08:49:37 GMT".
fn httpdate_parse(s: &str) -> SystemTime {
    let parts: Vec<&str> = s.split([' ', ':']).collect();
    let day: u64 = parts[1].parse().unwrap();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])
    .unwrap() as u64
        + 1;
    let year: u64 = parts[3].parse().unwrap();
    let (h, m, sec): (u64, u64, u64) = (
        parts[4].parse().unwrap(),
        parts[5].parse().unwrap(),
        parts[6].parse().unwrap(),
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    SystemTime::UNIX_EPOCH + Duration::from_secs(days * 86400 + h * 3600 + m * 60 + sec)
}

#[test]
fn large_response_to_a_slow_reader_arrives_whole() {
    let body: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let file = crate::clients::TempPath::with_bytes(&body);
    let s = Server::start(&["-b", &format!("@{}", file.path())]);
    let mut r = Reader::new(s.connect());
    r.send(&get("/1").repeat(3));
    sleep(Duration::from_millis(300)); // let the socket buffers fill: the server must wait, not drop
    for _ in 0..3 {
        let resp = r.response(false);
        assert_eq!(resp.body.len(), body.len());
        assert!(resp.body == body, "body corrupted");
    }
}

#[test]
fn client_reset_mid_request_leaves_the_server_serving() {
    let s = Server::start(&["-b", "alive"]);
    for _ in 0..20 {
        let c = s.connect();
        (&c).write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\npartial")
            .unwrap();
        socket_reset(c);
    }
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    assert_eq!(r.response(false).body, b"alive");
    drop(r);
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_accepted"),
        stopped.total("conns_closed")
    );
}

/// Closes with SO_LINGER 0, which makes the kernel send a RST.
fn socket_reset(stream: std::net::TcpStream) {
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(stream);
}
