//! Clients that leave while held or queued: counted `gone` at once, their connections, descriptors
//! and memory given back, a server in service kept until its service ends, the queue left at once.

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use statico_tests::figures::{counter, num, outcome, truth, truth_when};
use statico_tests::{get, rss_kib, Server};

use super::{
    at, gauges_match, gauges_seen, gone_at, h2_connect, h2_finish, h2_send, ms, pool, route, run,
    start, start_h2, tokio_rt, Answer, MS,
};

/// The number of descriptors statico has open.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Open connections by the counters (accepted − closed), and requests read.
fn conns_and_requests(s: &Server) -> (f64, f64) {
    let page = s.scrape("/metrics");
    (
        counter(&page, "statico_conns_accepted_total")
            - counter(&page, "statico_conns_closed_total"),
        counter(&page, "statico_requests_total"),
    )
}

/// Waits (up to 5 s) until the server has read `n` requests.
fn wait_for_requests(s: &Server, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, requests) = conns_and_requests(s);
        if requests >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server read {requests} of {n} requests"
        );
        thread::sleep(ms(50));
    }
}

/// [`wait_for_requests`] inside a runtime, whose tasks (HTTP/2 connections) go on meanwhile.
async fn wait_for_requests_async(s: &Server, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, requests) = conns_and_requests(s);
        if requests >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server read {requests} of {n} requests"
        );
        tokio::time::sleep(ms(50)).await;
    }
}

/// After the clients of `route` left: within 2 s the ground truth counts `n` gone, no connection
/// is open by the counters, the descriptors are back near `fds0`, and RSS is near `rss0`. (On
/// io_uring connections are direct descriptors, absent from /proc/PID/fd: there the counters tell.)
fn assert_forgotten(s: &Server, route_name: &str, n: u64, fds0: usize, rss0: u64, left: Instant) {
    let deadline = left + Duration::from_secs(2);
    loop {
        let t = truth(s);
        let gone = outcome(route(&t, route_name), "gone");
        let (open, _) = conns_and_requests(s);
        let now = fds(s.pid());
        if gone == n && open == 0.0 && now <= fds0 + 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{:?} after the clients left: gone {gone} of {n}, {open} connections open, {now} \
             descriptors (started with {fds0}): {}",
            left.elapsed(),
            route(&t, route_name)
        );
        thread::sleep(ms(50));
    }
    let rss = rss_kib(s.pid());
    statico_tests::assert_memory!(
        rss < rss0 + 16 * 1024,
        "RSS {rss0} KiB → {rss} KiB after {n} clients left"
    );
    let r = route(&truth(s), route_name).clone();
    assert_eq!(outcome(&r, "200"), 0, "nobody was answered: {r}");
    assert_eq!(num(&r, &["count"]), n as f64, "{r}");
}

#[test]
fn two_thousand_http1_clients_that_reset_during_a_hold_are_gone_at_once() {
    const N: usize = 2000;
    let _many = statico_tests::many_connections();
    let s = start(&["/slow delay=15s"], &["--listen-backlog", "4096"]);
    let (fds0, rss0) = (fds(s.pid()), rss_kib(s.pid()));
    let conns: Vec<TcpStream> = (0..N)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(&get("/slow")).unwrap();
            c
        })
        .collect();
    wait_for_requests(&s, N as f64);
    let held = rss_kib(s.pid());
    // Each held request: its connection and a held answer, a few KiB at most.
    statico_tests::assert_memory!(
        held < rss0 + (N as u64) * 8,
        "{N} held: RSS {rss0} KiB → {held} KiB"
    );
    for c in conns {
        socket2::SockRef::from(&c)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(c);
    }
    assert_forgotten(&s, "/slow", N as u64, fds0, rss0, Instant::now());
    let stopped = s.stop();
    assert!(stopped.status.success(), "{:?}", stopped.status);
}

#[test]
fn http2_clients_that_reset_or_cancel_during_a_hold_are_gone_at_once() {
    const N: usize = 200;
    let _many = statico_tests::many_connections();
    let s = start_h2(&["/slow delay=15s", "/fast body=ok"], &[]);
    let (fds0, rss0) = (fds(s.pid()), rss_kib(s.pid()));
    let addr = s.addr;
    let rt = tokio_rt();
    // N connections, one stream each, reset (TCP RST) once the server has read them all.
    let (tasks, pending) = rt.block_on(async {
        let mut tasks = Vec::new();
        let mut pending = Vec::new();
        for _ in 0..N {
            let (client, task) = h2_connect(addr, true).await;
            pending.push(h2_send(&client, "/slow").await);
            tasks.push((client, task));
        }
        // (The connection tasks write the requests while this waits.)
        wait_for_requests_async(&s, N as f64).await;
        (tasks, pending)
    });
    let left = Instant::now();
    rt.block_on(async {
        // Aborting a connection's task drops its socket: with SO_LINGER 0, a reset.
        for (_, task) in tasks {
            task.abort();
            let _ = task.await;
        }
    });
    drop(pending);
    assert_forgotten(&s, "/slow", N as u64, fds0, rss0, left);

    // One connection, N streams, each cancelled (RST_STREAM) once read: gone too, and the connection
    // goes on serving.
    rt.block_on(async {
        let (client, _task) = h2_connect(addr, false).await;
        let mut pending = Vec::new();
        for _ in 0..N {
            pending.push(h2_send(&client, "/slow").await);
        }
        wait_for_requests_async(&s, 2.0 * N as f64).await;
        let left = Instant::now();
        drop(pending); // each stream not ended by an answer is reset with CANCEL
        let deadline = left + Duration::from_secs(2);
        loop {
            let gone = outcome(route(&truth(&s), "/slow"), "gone");
            if gone == 2 * N as u64 {
                break;
            }
            assert!(Instant::now() < deadline, "{gone} gone of {}", 2 * N);
            tokio::time::sleep(ms(50)).await;
        }
        assert_eq!(
            h2_finish(h2_send(&client, "/fast").await).await.unwrap(),
            200
        );
    });
}

#[test]
fn a_client_gone_in_service_keeps_its_server_until_the_service_ends() {
    // A holds the only server 0 .. 1 s and leaves at 200 ms; B, sent at 300 ms, still waits for
    // A's service to end, then has its own: answered at 2 s, not 1.3 s.
    let s = start(&["/g capacity=1 delay=1s"], &[]);
    let (t0, h) = run(
        s.addr,
        vec![gone_at("/g", ms(0), ms(200)), at("/g", ms(300))],
    );
    // After A left and B came, before A's service ends: A's server still busy, B waiting.
    gauges_seen(
        &s,
        &[
            ("statico_pool_in_service{pool=\"/g\"}", 1.0),
            ("statico_pool_queued{pool=\"/g\"}", 1.0),
        ],
        t0 + ms(350),
        t0 + ms(900),
    );
    let got = h.join().unwrap();
    let b = &got[1];
    assert_eq!(b.answer, Some(Answer::Status(200)), "{got:?}");
    assert!(
        b.done + MS >= ms(2000) && b.done < ms(2400),
        "B answered at {:?}: A's service ends at 1 s, B's at 2 s",
        b.done
    );
    let t = truth_when(&s, |t| outcome(route(t, "/g"), "gone") >= 1);
    let r = route(&t, "/g");
    assert_eq!((outcome(r, "gone"), outcome(r, "200")), (1, 1), "{r}");
}

#[test]
fn a_client_gone_while_queued_leaves_the_queue_at_once() {
    // A in service 0 .. 1 s; B and C queued; B leaves at 300 ms. C is next: answered at 2 s, not 3.
    let s = start(&["/g capacity=1 delay=1s"], &[]);
    let (t0, h) = run(
        s.addr,
        vec![
            at("/g", ms(0)),
            gone_at("/g", ms(100), ms(300)),
            at("/g", ms(200)),
        ],
    );
    // B left the queue at 300 ms: C alone waits (before, B and C did; after 1 s, nobody).
    gauges_seen(
        &s,
        &[("statico_pool_queued{pool=\"/g\"}", 1.0)],
        t0 + ms(350),
        t0 + ms(650),
    );
    let got = h.join().unwrap();
    assert_eq!(got[0].answer, Some(Answer::Status(200)), "{got:?}");
    assert!(
        got[0].done + MS >= ms(1000) && got[0].done < ms(1400),
        "{got:?}"
    );
    let c = &got[2];
    assert_eq!(c.answer, Some(Answer::Status(200)), "{got:?}");
    assert!(
        c.done + MS >= ms(2000) && c.done < ms(2500),
        "C answered at {:?}: after A (1 s) and its own service, without B's",
        c.done
    );
    let t = truth_when(&s, |t| num(pool(t, "/g"), &["served"]) >= 2.0);
    assert_eq!(outcome(route(&t, "/g"), "gone"), 1, "{t}");
}

#[test]
fn an_http2_stream_cancelled_while_queued_leaves_the_queue_at_once() {
    let s = start_h2(&["/g capacity=1 delay=1s"], &[]);
    let addr = s.addr;
    let (a, c) = tokio_rt().block_on(async {
        let (client, _task) = h2_connect(addr, false).await;
        let t0 = Instant::now();
        let a = h2_send(&client, "/g").await;
        let a = tokio::spawn(async move { (h2_finish(a).await, t0.elapsed()) });
        tokio::time::sleep(ms(100)).await;
        let b = h2_send(&client, "/g").await;
        tokio::time::sleep(ms(100)).await;
        let c = h2_send(&client, "/g").await;
        let c = tokio::spawn(async move { (h2_finish(c).await, t0.elapsed()) });
        tokio::time::sleep(ms(100)).await;
        drop(b); // RST_STREAM CANCEL
                 // The cancelled stream left the queue: C alone waits.
        let want = [("statico_pool_queued{pool=\"/g\"}", 1.0)];
        tokio::time::sleep(ms(50)).await;
        loop {
            match gauges_match(&s, &want) {
                Ok(()) => break,
                Err(page) if t0.elapsed() > ms(650) => panic!("never {want:?}:\n{page}"),
                Err(_) => tokio::time::sleep(ms(10)).await,
            }
        }
        (a.await.unwrap(), c.await.unwrap())
    });
    assert!(matches!(a.0, Ok(200)), "{a:?}");
    assert!(a.1 + MS >= ms(1000) && a.1 < ms(1400), "{a:?}");
    assert!(matches!(c.0, Ok(200)), "{c:?}");
    assert!(
        c.1 + MS >= ms(2000) && c.1 < ms(2500),
        "C answered at {:?}, not after A and itself (2 s)",
        c.1
    );
    let t = truth_when(&s, |t| outcome(route(t, "/g"), "gone") >= 1);
    assert_eq!(outcome(route(&t, "/g"), "gone"), 1, "{t}");
}
