//! A pool's capacity and queue as a client sees them: answers in waves of C, first in first out,
//! a route without delay served at once, `queue=` shedding at once (503, 429, a reset, a close),
//! `queue-timeout=`, and a pipelined request queued as the one before it is answered.

use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use statico_tests::figures::{num, outcome, truth_when};
use statico_tests::get;

use super::{
    assert_waves, at, burst, done_sorted, ms, pool, read_answer, route, run, start, Answer, Got, MS,
};

#[test]
fn a_pool_of_two_answers_six_simultaneous_requests_in_three_waves() {
    let s = start(&["/w capacity=2 delay=100ms"], &["-t", "2"]);
    let got = burst(&s, "/w", 6);
    assert!(
        got.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{got:?}"
    );
    assert_waves(
        &done_sorted(&got),
        2,
        ms(100),
        ms(100),
        "capacity=2 delay=100ms",
    );
    let t = truth_when(&s, |t| num(pool(t, "/w"), &["served"]) >= 6.0);
    let p = pool(&t, "/w");
    assert_eq!(num(p, &["capacity"]), 2.0, "{p}");
    assert!(p["queue"].is_null(), "no queue= is unbounded: {p}");
    assert_eq!(num(p, &["served"]), 6.0, "{p}");
    assert_eq!(num(p, &["shed"]), 0.0, "{p}");
    assert_eq!(num(p, &["in_service_max"]), 2.0, "never more than 2: {p}");
    // All six arrive within a few ms, long before the first service ends: four wait together
    // (allowing for one straggler delayed past 100 ms by scheduling).
    let queued = num(p, &["queued_max"]);
    assert!((3.0..=4.0).contains(&queued), "{p}");
    let r = route(&t, "/w");
    assert_eq!(outcome(r, "200"), 6, "{r}");
    assert_eq!(num(r, &["wait_us", "count"]), 6.0, "{r}");
    // The last pair waited for two services.
    assert!(num(r, &["wait_us", "max"]) >= 195_000.0, "{r}");
}

#[test]
fn a_pooled_route_without_delay_is_served_at_once_and_counted() {
    // No delay= is a service time of zero: the server is held for no time, and every request is
    // served and recorded (next to a delayed route, which makes HTTP/1.1 hold answers).
    let s = start(&["/z capacity=1", "/d delay=20ms"], &[]);
    let got = burst(&s, "/z", 5);
    assert!(
        got.iter()
            .all(|g| g.answer == Some(Answer::Status(200)) && g.done < ms(500)),
        "{got:?}"
    );
    let mut c = s.connect();
    for _ in 0..5 {
        c.write_all(&get("/z")).unwrap();
        assert_eq!(read_answer(&mut c).0, Answer::Status(200));
    }
    let t = truth_when(&s, |t| num(pool(t, "/z"), &["served"]) >= 10.0);
    let p = pool(&t, "/z");
    assert_eq!((num(p, &["served"]), num(p, &["shed"])), (10.0, 0.0), "{p}");
    assert!(num(p, &["in_service_max"]) <= 1.0, "{p}");
    let z = route(&t, "/z");
    assert_eq!((num(z, &["count"]), outcome(z, "200")), (10.0, 10), "{z}");
}

#[test]
fn queued_requests_are_served_first_in_first_out() {
    // One server, 100 ms each; requests 30 ms apart queue behind the first in the order they came.
    // Reordering would need a 30 ms stall between two sends reaching the server (on different workers).
    let s = start(&["/f capacity=1 delay=100ms"], &["-t", "2"]);
    let plans = (0..5).map(|i| at("/f", ms(30 * i))).collect();
    let got = run(s.addr, plans).1.join().unwrap();
    assert!(
        got.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{got:?}"
    );
    assert_waves(
        &done_sorted(&got),
        1,
        ms(100),
        ms(100),
        "capacity=1 delay=100ms",
    );
    let order: Vec<Duration> = got.iter().map(|g| g.done).collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "not first in first out: {got:?}"
    );
}

/// A burst of 10 against `capacity=2 queue=3 delay=250ms` with `shed` (and the route's header):
/// exactly 5 served, in waves of 2, and 5 shed at once.
fn burst_past_the_queue(shed: Option<&str>) -> Vec<Got> {
    let spec = format!(
        "/s capacity=2 queue=3 delay=250ms header=X-Pool:yes{}",
        shed.map(|s| format!(" shed={s}")).unwrap_or_default()
    );
    let s = start(&[&spec], &[]);
    let got = burst(&s, "/s", 10);
    let (served, shed_ones): (Vec<&Got>, Vec<&Got>) = got
        .iter()
        .partition(|g| g.answer == Some(Answer::Status(200)));
    assert_eq!(served.len(), 5, "capacity 2 + queue 3 of 10: {got:?}");
    let mut done: Vec<Duration> = served.iter().map(|g| g.done).collect();
    done.sort();
    assert_waves(&done, 2, ms(250), ms(120), &spec);
    for g in &shed_ones {
        // At once: well before the first service ends (250 ms after it began).
        assert!(
            g.done + ms(125) < done[0],
            "shed after {:?}, the first served after {:?}: {got:?}",
            g.done,
            done[0]
        );
    }
    let t = truth_when(&s, |t| {
        let p = pool(t, "/s");
        num(p, &["served"]) + num(p, &["shed"]) >= 10.0
    });
    let p = pool(&t, "/s");
    assert_eq!(
        (
            num(p, &["served"]),
            num(p, &["shed"]),
            num(p, &["queue"]),
            num(p, &["in_service_max"]),
            num(p, &["queued_max"])
        ),
        (5.0, 5.0, 3.0, 2.0, 3.0),
        "{p}"
    );
    let r = route(&t, "/s");
    assert_eq!((outcome(r, "200"), outcome(r, "shed")), (5, 5), "{r}");
    got
}

fn shed_ones(got: &[Got]) -> Vec<&Got> {
    got.iter()
        .filter(|g| g.answer != Some(Answer::Status(200)))
        .collect()
}

/// The burst past the queue with `shed` is shed with `status`, the route's header and no body.
fn assert_shed_with_status(shed: Option<&str>, status: u16) {
    let got = burst_past_the_queue(shed);
    for g in shed_ones(&got) {
        assert_eq!(g.answer, Some(Answer::Status(status)), "{got:?}");
        let head = g.head.to_ascii_lowercase();
        assert!(head.contains("\r\nx-pool: yes\r\n"), "{}", g.head);
        assert!(head.contains("\r\ncontent-length: 0\r\n"), "{}", g.head);
    }
}

#[test]
fn a_burst_past_capacity_and_queue_is_shed_at_once_with_503_and_the_routes_headers() {
    assert_shed_with_status(None, 503);
}

#[test]
fn shed_429_answers_the_burst_past_the_queue_with_429() {
    assert_shed_with_status(Some("429"), 429);
}

#[test]
fn shed_reset_resets_the_connections_past_the_queue() {
    let got = burst_past_the_queue(Some("reset"));
    for g in shed_ones(&got) {
        assert_eq!(g.answer, Some(Answer::Reset), "{got:?}");
    }
}

#[test]
fn shed_close_closes_the_connections_past_the_queue_without_an_answer() {
    let got = burst_past_the_queue(Some("close"));
    for g in shed_ones(&got) {
        assert_eq!(g.answer, Some(Answer::Closed), "{got:?}");
    }
}

#[test]
fn a_queued_request_is_shed_after_the_queue_timeout_not_before_and_not_much_after() {
    let s = start(&["/t capacity=1 queue-timeout=200ms delay=600ms"], &[]);
    let got = run(
        s.addr,
        vec![at("/t", ms(0)), at("/t", ms(50)), at("/t", ms(100))],
    )
    .1
    .join()
    .unwrap();
    assert_eq!(got[0].answer, Some(Answer::Status(200)), "{got:?}");
    assert!(got[0].done + MS >= ms(600), "{got:?}");
    for g in &got[1..] {
        assert_eq!(g.answer, Some(Answer::Status(503)), "{got:?}");
        // Its wait starts when the server has the request, after the client sent it.
        // Not before 200 ms; not much after (150 ms of scheduling noise allowed).
        assert!(
            g.latency() + MS >= ms(200) && g.latency() < ms(350),
            "shed {:?} after it was sent (queue-timeout 200 ms): {got:?}",
            g.latency()
        );
    }
    let t = truth_when(&s, |t| num(pool(t, "/t"), &["shed"]) >= 2.0);
    let p = pool(&t, "/t");
    assert_eq!((num(p, &["served"]), num(p, &["shed"])), (1.0, 2.0), "{p}");
    assert!(p["queue"].is_null(), "{p}");
}

/// A pipelined connection whose second request queues the moment its first is answered (the
/// ticket of the first freed, the second taken in the same step): the second must still be woken
/// when the pool serves it, even by a runtime that tells tickets apart by an address the next one
/// may reuse. Long header fields make the answers' allocations the size a freed ticket leaves, so
/// that the second ticket is likely to take the first one's address.
#[test]
fn a_pipelined_request_queued_as_the_one_before_it_is_answered_is_still_woken() {
    let pad = "x".repeat(150);
    let slow = format!("/slow pool=db delay=200ms header=X-Pad:{pad}");
    let fast = format!("/fast pool=db header=X-Pad:{pad}");
    let s = start(&[&slow, &fast], &["--pool", "db capacity=1"]);
    let mut b = s.connect();
    b.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    thread::sleep(ms(50));
    let mut a = s.connect();
    a.write_all(b"GET /fast HTTP/1.1\r\nHost: a\r\n\r\nGET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    thread::sleep(ms(50));
    let mut c = s.connect();
    c.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    // b's 200 ms, a's /fast, a's /slow 200 ms: both of a's answers within about 0.4 s.
    while seen.windows(8).filter(|w| w == b"HTTP/1.1").count() < 2 {
        match a.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    let answers = seen.windows(8).filter(|w| w == b"HTTP/1.1").count();
    assert_eq!(answers, 2, "a's answers after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a's second answer came after {:?}",
        started.elapsed()
    );
    drop((b, c));
}
