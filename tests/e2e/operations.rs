//! What operators rely on: the meter, `-v` dumps, delays, and a graceful SIGTERM with totals.

use std::thread::sleep;
use std::time::{Duration, Instant};

use statico_tests::{get, Reader, Server};

#[test]
fn json_meter_reports_rates_and_totals_every_second() {
    let s = Server::start(&["-m", "--meter-format", "json"]);
    let mut r = Reader::new(s.connect());
    for _ in 0..25 {
        r.send(&get("/"));
        r.response(false);
    }
    let out = s.wait_stdout("\"requests\":25");
    let line = out.lines().find(|l| l.contains("\"requests\":25")).unwrap();
    for key in [
        "\"req_per_s\":",
        "\"resp_per_s\":",
        "\"in_gbps\":",
        "\"out_gbps\":",
        "\"bytes_out\":",
        "\"writes\":",
    ] {
        assert!(
            line.starts_with('{') && line.ends_with('}') && line.contains(key),
            "{line}"
        );
    }
}

#[test]
fn text_meter_prints_rates() {
    let s = Server::start(&["-m"]);
    let out = s.wait_stdout("req/s");
    assert!(out.contains("Gbps"), "{out}");
}

#[test]
fn verbosity_levels_dump_what_statico_documents() {
    let req = b"POST /dump HTTP/1.1\r\nHost: t\r\nX-Probe: 1\r\nContent-Length: 13\r\n\r\nHello\x00World\x01!";
    let expect: [(&str, &[&str], &[&str]); 4] = [
        (
            "-v",
            &["POST /dump HTTP/1.1", "HTTP/1.1 200 OK"],
            &["X-Probe: 1"],
        ),
        ("-vv", &["X-Probe: 1", "Content-Length: 4"], &["Hello"]),
        ("-vvv", &["Hello\\x00World\\x01!", "resp"], &["00000000"]),
        (
            "-vvvv",
            &["00000000  48 65 6c 6c 6f 00 57 6f  72 6c 64 01 21           |Hello.World.!|"],
            &[],
        ),
    ];
    for (flag, present, absent) in expect {
        let s = Server::start(&[flag, "-b", "resp"]);
        let mut r = Reader::new(s.connect());
        r.send(req);
        r.response(false);
        let out = s.wait_stdout("HTTP/1.1 200 OK");
        sleep(Duration::from_millis(100));
        let out = if flag == "-v" { out } else { s.stdout() };
        for p in present {
            assert!(out.contains(p), "{flag}: missing {p:?} in\n{out}");
        }
        for a in absent {
            assert!(!out.contains(a), "{flag}: unexpected {a:?} in\n{out}");
        }
    }
}

#[test]
fn no_dump_without_v() {
    let s = Server::start(&[]);
    let mut r = Reader::new(s.connect());
    r.send(&get("/quiet"));
    r.response(false);
    drop(r);
    let stopped = s.stop();
    assert!(!stopped.stdout.contains("/quiet"), "{}", stopped.stdout);
}

#[test]
fn delay_holds_each_response() {
    let s = Server::start(&["-d", "300ms", "-b", "late"]);
    let mut r = Reader::new(s.connect());
    let start = Instant::now();
    r.send(&get("/1").repeat(2));
    assert_eq!(r.response(false).body, b"late");
    let first = start.elapsed();
    assert_eq!(r.response(false).body, b"late");
    let second = start.elapsed();
    assert!(first >= Duration::from_millis(300), "first after {first:?}");
    assert!(
        second >= Duration::from_millis(600),
        "the delay applies to each response: {second:?}"
    );
}

#[test]
fn body_delay_sends_the_head_first() {
    let s = Server::start(&["--body-delay", "400ms", "-b", "tail"]);
    let mut r = Reader::new(s.connect());
    r.send(&get("/"));
    let start = Instant::now();
    let mut got = Vec::new();
    let mut head_at = None;
    while !got.ends_with(b"tail") {
        let mut chunk = [0u8; 4096];
        let n = std::io::Read::read(&mut r.stream, &mut chunk).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&chunk[..n]);
        if head_at.is_none() && got.windows(4).any(|w| w == b"\r\n\r\n") {
            head_at = Some(start.elapsed());
            assert!(!got.ends_with(b"tail"), "head and body arrived together");
        }
    }
    let head_at = head_at.unwrap();
    let body_at = start.elapsed();
    assert!(
        body_at - head_at >= Duration::from_millis(350),
        "head at {head_at:?}, body at {body_at:?}"
    );
}

#[test]
fn sigterm_finishes_in_flight_responses_and_prints_totals() {
    let s = Server::start(&["-d", "500ms", "-b", "finished"]);
    let mut busy = Reader::new(s.connect());
    let mut idle = Reader::new(s.connect());
    idle.send(&get("/warm"));
    busy.send(&get("/slow"));
    sleep(Duration::from_millis(700));
    assert_eq!(idle.response(false).status, 200);
    busy.send(&get("/in-flight"));
    sleep(Duration::from_millis(100));
    statico_tests::signal(s.pid(), "TERM");
    assert_eq!(busy.response(false).body, b"finished");
    assert_eq!(
        busy.response(false).body,
        b"finished",
        "the in-flight response was dropped"
    );
    assert!(
        idle.until_closed().is_empty(),
        "idle connections are closed at shutdown"
    );
    let stopped = s.stop_after_signal();
    assert!(stopped.status.success(), "exit {:?}", stopped.status);
    assert_eq!(stopped.total("requests"), 3);
    assert_eq!(stopped.total("responses"), 3);
    assert_eq!(stopped.total("conns_accepted"), 2);
    assert!(stopped.stderr.contains("SIGTERM"), "{}", stopped.stderr);
}

#[test]
fn a_plain_servers_totals_name_only_what_it_runs() {
    let s = Server::start(&[]);
    let (ok, _, err) = statico_tests::run_client("curl", &["-s", &s.url("/")]);
    assert!(ok, "{err}");
    let stopped = s.stop();
    let lines: Vec<&str> = stopped
        .stderr
        .lines()
        .filter(|l| l.starts_with("statico: totals") || l.starts_with("statico: worker "))
        .collect();
    assert!(lines.len() >= 2, "{}", stopped.stderr);
    for line in lines {
        assert!(!line.contains("tls_") && !line.contains("quic_"), "{line}");
    }
    assert_eq!(stopped.total("requests"), 1);
}

#[test]
fn sigint_exits_zero_with_totals() {
    let s = Server::start(&[]);
    statico_tests::signal(s.pid(), "INT");
    let stopped = s.stop_after_signal();
    assert!(stopped.status.success());
    assert_eq!(stopped.total("requests"), 0);
}
