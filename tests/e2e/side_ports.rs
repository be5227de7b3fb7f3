//! The side ports (`--metrics`, `--admin`) under clients that idle, trickle, crowd, or send a large
//! body before reading: each connection is served on its own, so none of them holds the port; every
//! error answer reaches a client that is still sending (a lingering close); past 256 connections the
//! next is told 503; side-port requests never count as served requests.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use statico_tests::{get, rss_kib, Reader, Response, Server, WAIT};

/// A server with a route, both side ports, and `extra` flags.
fn start(extra: &[&str]) -> Server {
    let mut args = vec![
        "--route",
        "/x body=ok",
        "--metrics",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to a side port");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_write_timeout(Some(WAIT)).unwrap();
    s
}

/// One request on a fresh connection; the answer.
fn ask(addr: &str, method: &str, path: &str) -> Response {
    let mut r = Reader::new(connect(addr));
    r.send(format!("{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    r.response(method == "HEAD")
}

/// Everything the server sends until it closes, reading only after `request` was written whole
/// (what urllib, curl and most simple clients do); a reset ends it too.
fn send_all_then_read(addr: &str, request: &[u8]) -> String {
    let mut c = connect(addr);
    let written = c.write_all(request);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("after {} bytes (write: {written:?}): {e}", got.len()),
        }
    }
    assert!(written.is_ok(), "the body was refused mid-way: {written:?}");
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn idle_connections_do_not_hold_either_side_port() {
    let s = start(&[]);
    let (metrics, admin) = (s.metrics_addr(), s.admin_addr());
    let idle: Vec<TcpStream> = (0..10)
        .flat_map(|_| [connect(&metrics), connect(&admin)])
        .collect();
    let begun = Instant::now();
    let page = ask(&metrics, "GET", "/metrics");
    assert_eq!(page.status, 200);
    assert_eq!(ask(&admin, "GET", "/routes").status, 200);
    // Each idle connection would have held its port for its 5 s head deadline, one after another.
    assert!(
        begun.elapsed() < Duration::from_secs(3),
        "{:?}",
        begun.elapsed()
    );
    drop(idle);
}

#[test]
fn an_idle_connection_gets_408_at_its_head_deadline_and_a_trickled_head_is_answered() {
    let s = start(&[]);
    let metrics = s.metrics_addr();
    let mut idle = Reader::new(connect(&metrics));
    let mut trickled = Reader::new(connect(&metrics));
    let begun = Instant::now();
    for b in b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n".chunks(4) {
        trickled.send(b);
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(trickled.response(false).status, 200);
    let r = idle.response(false);
    let waited = begun.elapsed();
    assert_eq!(r.status, 408, "{r:?}");
    assert!(
        waited >= Duration::from_millis(4900) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    assert!(idle.until_closed().is_empty(), "closed after the 408");
}

#[test]
fn an_oversized_body_sent_before_reading_gets_its_413_not_a_reset() {
    let s = start(&[]);
    let admin = s.admin_addr();
    let body = vec![b'#'; 2 << 20];
    let head = format!(
        "PUT /routes HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    for _ in 0..3 {
        let text = send_all_then_read(&admin, &[head.as_bytes(), &body].concat());
        assert!(text.starts_with("HTTP/1.1 413 "), "{text:?}");
    }
    assert_eq!(ask(&admin, "GET", "/routes").status, 200);
}

#[test]
fn a_body_with_a_wrong_token_gets_its_401_not_a_reset() {
    let dir = statico_tests::scratch_dir("side", "token");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let s = start(&["--admin-token", token.to_str().unwrap()]);
    let admin = s.admin_addr();
    let body = vec![b'#'; 512 << 10];
    let head = format!(
        "PUT /routes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer wrong\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let text = send_all_then_read(&admin, &[head.as_bytes(), &body].concat());
    assert!(text.starts_with("HTTP/1.1 401 "), "{text:?}");
    assert!(text.contains("WWW-Authenticate: Bearer"), "{text:?}");
}

#[test]
fn a_chunked_put_is_read_whole() {
    let s = start(&[]);
    let toml = "[[route]]\npath = \"/x\"\nbody = \"new\"\n";
    let (a, b) = toml.split_at(10);
    let request = format!(
        "PUT /routes HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let text = send_all_then_read(&s.admin_addr(), request.as_bytes());
    assert!(text.starts_with("HTTP/1.1 200 "), "{text:?}");
    assert!(text.ends_with("{\"generation\":2}"), "{text:?}");
    let mut r = Reader::new(s.connect());
    r.send(&get("/x"));
    assert_eq!(r.response(false).body, b"new");
}

#[test]
fn a_hundred_scrapes_and_a_hundred_control_requests_at_once_are_all_answered() {
    let s = start(&[]);
    let (metrics, admin) = (s.metrics_addr(), s.admin_addr());
    let clients: Vec<_> = (0..200)
        .map(|i| {
            let (addr, path) = match i % 2 {
                0 => (metrics.clone(), "/metrics"),
                _ => (admin.clone(), "/ground-truth"),
            };
            thread::spawn(move || ask(&addr, "GET", path).status)
        })
        .collect();
    let statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let page = s.scrape("/metrics");
    let requests: u64 = (page.lines())
        .filter(|l| l.starts_with("statico_requests_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(requests, 0, "side-port requests are not served requests");
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 0);
}

#[test]
fn past_256_open_connections_the_next_gets_503_and_memory_stays_bounded() {
    let _many = statico_tests::many_connections();
    let s = start(&[]);
    let metrics = s.metrics_addr();
    let before = rss_kib(s.pid());
    let held: Vec<TcpStream> = (0..256).map(|_| connect(&metrics)).collect();
    // The accepts are the server's: wait until it has taken all 256 (the next is then refused).
    let begun = Instant::now();
    let refused = loop {
        let r = ask(&metrics, "GET", "/metrics");
        if r.status == 503 || begun.elapsed() > WAIT {
            break r;
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    let grown = rss_kib(s.pid()).saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "256 idle side connections cost {grown} KiB"
    );
    drop(held);
    let begun = Instant::now();
    while ask(&metrics, "GET", "/metrics").status != 200 {
        assert!(
            begun.elapsed() < WAIT,
            "the port never took connections again"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn garbage_and_wrong_methods_get_clear_answers() {
    let s = start(&[]);
    let (metrics, admin) = (s.metrics_addr(), s.admin_addr());
    let text = send_all_then_read(&metrics, b"\x16\x03\x01\x00\xff garbage\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 400 "), "{text:?}");
    assert_eq!(ask(&metrics, "POST", "/metrics").status, 405);
    assert_eq!(ask(&metrics, "GET", "/nope").status, 404);
    let head = ask(&metrics, "HEAD", "/metrics");
    assert_eq!(head.status, 200);
    assert_eq!(ask(&admin, "DELETE", "/routes").status, 405);
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20_000));
    let text = send_all_then_read(&admin, long.as_bytes());
    assert!(text.starts_with("HTTP/1.1 431 "), "{text:?}");
}
