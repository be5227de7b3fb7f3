//! Pools (issue 30): a route that behaves like a service with C servers, a FIFO queue and shedding,
//! as a client sees it — never more than C in service across workers and protocols (answers in waves),
//! first in first out, `queue=` shedding at once with 503 / 429 / a reset / a close, `queue-timeout=`,
//! a pool shared by routes (`--pool`, `pool=NAME`, TOML `[[pool]]`), HTTP/1.1, HTTP/2 and HTTP/3 in
//! one pool; `delay=inflight:BASE:PER`; the ground truth (`wait_us`, `drawn_us`, `held_us`, outcomes
//! `shed` and `gone`, `"pools"`), the Prometheus gauges and wait histogram, the exit lines; queueing
//! theory (a closed loop obeys Little's law, Poisson arrivals wait as Erlang C says); the start-up
//! errors; clients that leave while held or queued; and a real proxy (nginx) in front.
//!
//! Timing bounds: a lower bound that follows from the pool's rules ("the 3rd answer of a pool of 2
//! with a 100 ms service cannot come before 200 ms") is kept tight (1 ms for timer rounding), since
//! the server can only be late, never early; upper bounds allow ~100 ms of scheduling noise, as the
//! suite shares two cores with other tests and builds.
//!
//! HTTP/1.1, HTTP/2 and HTTP/3 run on the runtime under test.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use statico_tests::figures::{counter, num, outcome, series, truth, truth_when};
use statico_tests::{get, rss_kib, run_to_exit, scratch_dir, Server, WAIT};

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- Starting statico, reading its ground truth and metrics ----

/// `--route SPEC` for each of `routes`, `--metrics` on an ephemeral port, then `extra`.
fn args<'a>(routes: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&str> = routes.iter().flat_map(|r| ["--route", *r]).collect();
    args.extend_from_slice(&["--metrics", "127.0.0.1:0"]);
    args.extend_from_slice(extra);
    args
}

/// statico (two workers: the harness's default) with `routes`, `--metrics` and `extra`.
fn start(routes: &[&str], extra: &[&str]) -> Server {
    Server::start(&args(routes, extra))
}

/// statico with `--http2` as well, on the runtime under test.
fn start_h2(routes: &[&str], extra: &[&str]) -> Server {
    let mut all = args(routes, extra);
    all.push("--http2");
    Server::start(&all)
}

/// The object of route `name` in the ground truth.
fn route<'a>(truth: &'a Value, name: &str) -> &'a Value {
    truth["routes"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["route"] == name))
        .unwrap_or_else(|| panic!("no route {name} in {truth}"))
}

/// The object of pool `name` in the ground truth.
fn pool<'a>(truth: &'a Value, name: &str) -> &'a Value {
    truth["pools"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no pool {name} in {truth}"))
}

/// Whether each series of `want` has its value on `/metrics` now; else the page.
fn gauges_match(s: &Server, want: &[(&str, f64)]) -> Result<(), String> {
    let page = s.scrape("/metrics");
    match want.iter().all(|(name, v)| series(&page, name) == Some(*v)) {
        true => Ok(()),
        false => Err(page),
    }
}

/// Polls `/metrics` from `from` until `until` (instants) for the moment `want` holds: a gauge is
/// read in a window of the test's timeline, wide enough that a scheduling stall does not miss it.
fn gauges_seen(s: &Server, want: &[(&str, f64)], from: Instant, until: Instant) {
    thread::sleep(from.saturating_duration_since(Instant::now()));
    loop {
        match gauges_match(s, want) {
            Ok(()) => return,
            Err(page) if Instant::now() > until => {
                panic!("never {want:?} between the window's ends; last:\n{page}")
            }
            Err(_) => thread::sleep(ms(10)),
        }
    }
}

// ---- HTTP/1.1 clients ----

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Status(u16),
    /// The connection was reset with no response.
    Reset,
    /// The connection was closed (FIN) with no response.
    Closed,
}

/// Reads one response (with a Content-Length) or the end of the connection before one.
fn read_answer(stream: &mut impl Read) -> (Answer, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4) {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= end + len {
                return (Answer::Status(head[9..12].parse().unwrap()), head);
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return (Answer::Closed, String::new()),
            Ok(0) => panic!(
                "closed inside a response: {:?}",
                String::from_utf8_lossy(&buf)
            ),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset && buf.is_empty() => {
                return (Answer::Reset, String::new())
            }
            Err(e) => panic!(
                "reading an answer: {e}; got {:?}",
                String::from_utf8_lossy(&buf)
            ),
        }
    }
}

/// One planned request: GET `path` on a connection of its own, sent `send` after the start; with
/// `reset`, the client resets the connection (SO_LINGER 0, close) then instead of reading.
#[derive(Clone)]
struct Plan {
    path: String,
    send: Duration,
    reset: Option<Duration>,
}

fn at(path: &str, send: Duration) -> Plan {
    Plan {
        path: path.into(),
        send,
        reset: None,
    }
}

fn gone_at(path: &str, send: Duration, reset: Duration) -> Plan {
    Plan {
        path: path.into(),
        send,
        reset: Some(reset),
    }
}

/// What came of a plan: the answer (none for a client that reset), the response head, when the
/// request was sent and when its answer was complete, both since the start.
#[derive(Debug)]
struct Got {
    answer: Option<Answer>,
    head: String,
    sent: Duration,
    done: Duration,
}

impl Got {
    fn latency(&self) -> Duration {
        self.done - self.sent
    }
}

/// Connects one socket per plan, then starts the clock (returned) and a thread that carries the
/// plans out (each answer read and timed by a thread of its own); join it for the results, in plan
/// order. Every send is at or after the returned instant.
fn run(addr: SocketAddr, plans: Vec<Plan>) -> (Instant, thread::JoinHandle<Vec<Got>>) {
    let conns: Vec<TcpStream> = plans
        .iter()
        .map(|_| {
            let c = TcpStream::connect(addr).expect("connect");
            c.set_read_timeout(Some(WAIT)).unwrap();
            c.set_nodelay(true).unwrap();
            c
        })
        .collect();
    let t0 = Instant::now();
    let handle = thread::spawn(move || {
        let mut sent = vec![Duration::ZERO; plans.len()];
        let mut readers = Vec::new();
        let mut conns: Vec<Option<TcpStream>> = conns.into_iter().map(Some).collect();
        for (i, p) in plans.iter().enumerate() {
            if p.reset.is_none() {
                let mut r = conns[i].as_ref().unwrap().try_clone().unwrap();
                readers.push((
                    i,
                    thread::spawn(move || {
                        let (answer, head) = read_answer(&mut r);
                        (answer, head, t0.elapsed())
                    }),
                ));
            }
        }
        // Sends and resets in time order.
        let mut events: Vec<(Duration, usize, bool)> = plans
            .iter()
            .enumerate()
            .flat_map(|(i, p)| [Some((p.send, i, false)), p.reset.map(|r| (r, i, true))])
            .flatten()
            .collect();
        events.sort_by_key(|e| (e.0, e.2));
        for (when, i, reset) in events {
            if let Some(wait) = (t0 + when).checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            if reset {
                let c = conns[i].take().unwrap();
                socket2::SockRef::from(&c)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(c);
            } else {
                conns[i]
                    .as_mut()
                    .unwrap()
                    .write_all(&get(&plans[i].path))
                    .unwrap();
                sent[i] = t0.elapsed();
            }
        }
        let mut got: Vec<Got> = (0..plans.len())
            .map(|i| Got {
                answer: None,
                head: String::new(),
                sent: sent[i],
                done: sent[i],
            })
            .collect();
        for (i, reader) in readers {
            let (answer, head, done) = reader.join().expect("reader");
            got[i].answer = Some(answer);
            got[i].head = head;
            got[i].done = done;
        }
        got
    });
    (t0, handle)
}

/// `n` GETs for `path` sent at once, each on its own connection.
fn burst(s: &Server, path: &str, n: usize) -> Vec<Got> {
    run(s.addr, vec![at(path, Duration::ZERO); n])
        .1
        .join()
        .unwrap()
}

/// The completion times, sorted.
fn done_sorted(got: &[Got]) -> Vec<Duration> {
    let mut d: Vec<Duration> = got.iter().map(|g| g.done).collect();
    d.sort();
    d
}

/// Asserts that answer i (in completion order, times since the start) came no earlier than
/// `(i / c + 1) × service` — a pool of c servers cannot do better, whatever the order of arrival —
/// and, counted from the first answer, no later than `(i / c) × service + slack`: the pool is
/// work-conserving, a freed server takes the next at once. (Counting from the first answer rather
/// than the start keeps a stall of the whole machine before the first service — seen: 150 ms with
/// the load at 4 on two cores — from failing the test; only a stall inside the run counts.)
fn assert_waves(done: &[Duration], c: usize, service: Duration, slack: Duration, what: &str) {
    assert!(
        done[0] < service + Duration::from_secs(1),
        "{what}: the first answer after {:?}",
        done[0]
    );
    for (i, d) in done.iter().enumerate() {
        let wave = service * (i / c + 1) as u32;
        let latest = done[0] + service * (i / c) as u32 + slack;
        assert!(
            *d + MS >= wave && *d < latest,
            "{what}: answer {i} after {d:?}; its wave (capacity {c}, service {service:?}) ends at \
             {wave:?}, and {:?} after the first answer at the latest; all: {done:?}",
            service * (i / c) as u32 + slack
        );
    }
}

// ---- HTTP/2 client (the h2 crate) ----

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 connection by prior knowledge; the connection task's handle aborts it (with SO_LINGER 0
/// set when `linger0`, dropping the socket then resets the connection).
async fn h2_connect(
    addr: SocketAddr,
    linger0: bool,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<()>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    if linger0 {
        socket2::SockRef::from(&tcp)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    }
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client.ready().await.unwrap(), task)
}

/// Starts a GET for `path` on `client` (request ended); the response future.
async fn h2_send(
    client: &h2::client::SendRequest<bytes::Bytes>,
    path: &str,
) -> h2::client::ResponseFuture {
    let req = http::Request::get(format!("http://t{path}"))
        .body(())
        .unwrap();
    let mut client = client.clone().ready().await.unwrap();
    client.send_request(req, true).unwrap().0
}

/// Waits for a response and its body: the status and the header fields, or the error.
async fn h2_answer(resp: h2::client::ResponseFuture) -> Result<(u16, http::HeaderMap), h2::Error> {
    let resp = tokio::time::timeout(WAIT, resp).await.expect("an answer")?;
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let mut body = resp.into_body();
    while let Some(chunk) = tokio::time::timeout(WAIT, body.data()).await.expect("data") {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok((status, headers))
}

/// Waits for a response and its body: the status, or the error.
async fn h2_finish(resp: h2::client::ResponseFuture) -> Result<u16, h2::Error> {
    h2_answer(resp).await.map(|(status, _)| status)
}

// ---- 1. Pools ----

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

#[test]
fn a_named_pool_is_shared_by_its_routes_and_pool_keys_give_a_route_its_own() {
    let s = start(
        &[
            "/a pool=db delay=200ms",
            "/b pool=db delay=200ms",
            "/free delay=200ms",
            "/x capacity=1 delay=200ms",
            "/y capacity=1 delay=200ms",
        ],
        &["--pool", "db capacity=1"],
    );
    let paths = ["/a", "/b", "/free", "/x", "/y"];
    let got = run(s.addr, paths.iter().map(|p| at(p, ms(0))).collect())
        .1
        .join()
        .unwrap();
    assert!(
        got.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{got:?}"
    );
    // /a and /b take turns on db's one server.
    let ab = done_sorted(&got[..2]);
    assert_waves(&ab, 1, ms(200), ms(100), "/a and /b in pool db");
    // The others each go at once, with the first of /a and /b rather than after it: /free has no
    // pool, /x and /y a pool each.
    for (g, path) in got[2..].iter().zip(&paths[2..]) {
        assert!(
            g.done + MS >= ms(200) && g.done + ms(100) < ab[1],
            "{path} answered after {:?}, /a and /b after {ab:?}",
            g.done
        );
    }
    let t = truth_when(&s, |t| num(pool(t, "db"), &["served"]) >= 2.0);
    let db = pool(&t, "db");
    assert_eq!(
        (
            num(db, &["served"]),
            num(db, &["in_service_max"]),
            num(db, &["queued_max"])
        ),
        (2.0, 1.0, 1.0),
        "{db}"
    );
    for own in ["/x", "/y"] {
        assert_eq!(num(pool(&t, own), &["served"]), 1.0, "{t}");
    }
    let names: Vec<&str> = t["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"/free"),
        "a route without a pool: {names:?}"
    );
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn routes_file_pools_and_route_pool_keys_work_like_the_flags() {
    let dir = scratch_dir("pools", "toml");
    let path = dir.join("routes.toml");
    std::fs::write(
        &path,
        "[[pool]]\nname = \"db\"\ncapacity = 1\nqueue = \"1\"\nshed = \"429\"\n\n\
         [[route]]\npath = \"/a\"\npool = \"db\"\ndelay = \"200ms\"\n\n\
         [[route]]\npath = \"/own\"\ncapacity = \"2\"\nqueue-timeout = \"100ms\"\ndelay = \"300ms\"\n",
    )
    .unwrap();
    let s = start(&[], &["--routes", path.to_str().unwrap()]);
    let mut plans = vec![at("/a", ms(0)); 3];
    plans.extend(vec![at("/own", ms(0)); 3]);
    let got = run(s.addr, plans).1.join().unwrap();
    // db: one served at once, one queued, one shed with 429.
    let a = &got[..3];
    let mut a_ok: Vec<Duration> = a
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(200)))
        .map(|g| g.done)
        .collect();
    a_ok.sort();
    assert_eq!(a_ok.len(), 2, "{a:?}");
    assert_waves(&a_ok, 1, ms(200), ms(100), "/a in db");
    let a_shed: Vec<&Got> = a
        .iter()
        .filter(|g| g.answer != Some(Answer::Status(200)))
        .collect();
    assert_eq!(a_shed[0].answer, Some(Answer::Status(429)), "{a:?}");
    assert!(a_shed[0].done + ms(100) < a_ok[0], "shed at once: {a:?}");
    // /own: two in service at once; the third is shed (503) after waiting 100 ms.
    let own = &got[3..];
    let own_ok: Vec<&Got> = own
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(200)))
        .collect();
    assert_eq!(own_ok.len(), 2, "{own:?}");
    let mut own_done: Vec<Duration> = own_ok.iter().map(|g| g.done).collect();
    own_done.sort();
    assert_waves(&own_done, 2, ms(300), ms(100), "/own, capacity 2");
    let own_shed = own
        .iter()
        .find(|g| g.answer != Some(Answer::Status(200)))
        .unwrap();
    assert_eq!(own_shed.answer, Some(Answer::Status(503)), "{own:?}");
    assert!(
        own_shed.latency() + MS >= ms(100) && own_shed.latency() < ms(250),
        "queue-timeout 100ms: {own:?}"
    );
    let t = truth_when(&s, |t| num(pool(t, "/own"), &["shed"]) >= 1.0);
    let db = pool(&t, "db");
    assert_eq!(
        (
            num(db, &["capacity"]),
            num(db, &["queue"]),
            num(db, &["served"]),
            num(db, &["shed"])
        ),
        (1.0, 1.0, 2.0, 1.0),
        "{db}"
    );
    let own = pool(&t, "/own");
    assert_eq!(
        (
            num(own, &["capacity"]),
            num(own, &["served"]),
            num(own, &["shed"])
        ),
        (2.0, 2.0, 1.0),
        "{own}"
    );
}

#[test]
fn http1_and_http2_requests_share_one_pool_and_one_in_flight_count() {
    let s = start_h2(
        &["/p capacity=2 delay=200ms", "/i delay=inflight:20ms:20ms"],
        &["-t", "2"],
    );
    let addr = s.addr;
    // Three HTTP/1.1 requests and three HTTP/2 streams at once: one pool of two, so three waves.
    let both = |path: &'static str| {
        tokio_rt().block_on(async move {
            let (client, _conn) = h2_connect(addr, false).await;
            let (t0, h1) = run(addr, vec![at(path, ms(0)); 3]);
            let mut streams = Vec::new();
            for _ in 0..3 {
                let resp = h2_send(&client, path).await;
                streams.push(tokio::spawn(async move {
                    (h2_finish(resp).await, t0.elapsed())
                }));
            }
            let mut h2 = Vec::new();
            for st in streams {
                h2.push(st.await.unwrap());
            }
            (h1.join().unwrap(), h2)
        })
    };
    let (h1, h2) = both("/p");
    assert!(
        h1.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{h1:?}"
    );
    assert!(h2.iter().all(|(r, _)| matches!(r, Ok(200))), "{h2:?}");
    let mut done: Vec<Duration> = h1
        .iter()
        .map(|g| g.done)
        .chain(h2.iter().map(|(_, d)| *d))
        .collect();
    done.sort();
    assert_waves(
        &done,
        2,
        ms(200),
        ms(120),
        "3 HTTP/1.1 + 3 HTTP/2 in capacity=2",
    );
    let t = truth_when(&s, |t| num(pool(t, "/p"), &["served"]) >= 6.0);
    let p = pool(&t, "/p");
    assert_eq!(
        (num(p, &["served"]), num(p, &["in_service_max"])),
        (6.0, 2.0),
        "{p}"
    );

    // inflight:20ms:20ms with six in flight over both protocols: the last drawn sees six (140 ms).
    // At least five of the six must be drawn before the first is answered (40 ms) — a count per
    // protocol would stop at 80 ms.
    let (h1, h2) = both("/i");
    assert!(
        h1.iter().all(|g| g.answer == Some(Answer::Status(200))),
        "{h1:?}"
    );
    assert!(h2.iter().all(|(r, _)| matches!(r, Ok(200))), "{h2:?}");
    let t = truth_when(&s, |t| num(route(t, "/i"), &["count"]) >= 6.0);
    let i = route(&t, "/i");
    let max = num(i, &["drawn_us", "max"]);
    assert!(
        (119_500.0..=140_200.0).contains(&max),
        "drawn max {max} µs: {i}"
    );
}

#[test]
fn http2_streams_past_the_queue_get_503_or_a_stream_reset_and_the_connection_goes_on() {
    let s = start_h2(
        &[
            "/s capacity=1 queue=1 delay=300ms header=X-Pool:yes",
            "/r capacity=1 queue=1 delay=300ms shed=reset",
            "/ok body=ok",
        ],
        &[],
    );
    let addr = s.addr;
    tokio_rt().block_on(async move {
        let (client, _conn) = h2_connect(addr, false).await;
        for path in ["/s", "/r"] {
            let t0 = Instant::now();
            let mut streams = Vec::new();
            for _ in 0..3 {
                let resp = h2_send(&client, path).await;
                streams.push(tokio::spawn(async move {
                    (h2_answer(resp).await, t0.elapsed())
                }));
            }
            let mut out = Vec::new();
            for st in streams {
                out.push(st.await.unwrap());
            }
            let ok = out
                .iter()
                .filter(|(r, _)| matches!(r, Ok((200, _))))
                .count();
            assert_eq!(ok, 2, "{path}: one in service, one queued: {out:?}");
            let (shed, at) = out
                .iter()
                .find(|(r, _)| !matches!(r, Ok((200, _))))
                .unwrap();
            let first_ok = out
                .iter()
                .filter(|(r, _)| matches!(r, Ok((200, _))))
                .map(|(_, at)| *at)
                .min()
                .unwrap();
            assert!(
                *at + ms(150) < first_ok,
                "{path}: shed after {at:?}, the first served after {first_ok:?}"
            );
            match (path, shed) {
                ("/s", Ok((503, headers))) => {
                    assert_eq!(headers.get("x-pool").unwrap(), "yes");
                    assert_eq!(headers.get("content-length").unwrap(), "0");
                }
                ("/r", Err(e)) if e.is_reset() => {}
                _ => panic!("{path}: shed as {shed:?}"),
            }
        }
        // Only streams were refused: the connection still answers.
        assert_eq!(h2_finish(h2_send(&client, "/ok").await).await.unwrap(), 200);
    });
    let t = truth_when(&s, |t| num(pool(t, "/r"), &["shed"]) >= 1.0);
    for name in ["/s", "/r"] {
        let p = pool(&t, name);
        assert_eq!((num(p, &["served"]), num(p, &["shed"])), (2.0, 1.0), "{p}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn http1_over_tls_and_http3_requests_share_one_pool() {
    let dir = crate::http3::scratch("pools-mixed");
    let s = crate::http3::start(&dir, &args(&["/p capacity=2 delay=200ms"], &[]));
    let addr = s.addr;
    // Two HTTP/1.1-over-TLS clients (rustls, handshaken before the start) and four HTTP/3 streams.
    let config = tls_client(&dir);
    let mut tls: Vec<_> = (0..2).map(|_| tls_connect(&config, addr)).collect();
    let barrier = Arc::new(Barrier::new(3));
    let rt = crate::http3::runtime();
    let (conn, send) = rt.block_on(crate::http3::connect(&dir, addr));
    let t0 = Instant::now();
    let h1: Vec<_> = tls
        .drain(..)
        .map(|mut stream| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                stream.write_all(&get("/p")).unwrap();
                let (answer, _) = read_answer(&mut stream);
                (answer, t0.elapsed())
            })
        })
        .collect();
    barrier.wait();
    let h3: Vec<(u16, Duration)> = rt.block_on(async move {
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let mut send = send.clone();
            streams.spawn(async move {
                let (head, _) = crate::http3::request(&mut send, "GET", "/p").await;
                (head.status().as_u16(), t0.elapsed())
            });
        }
        let out = streams.join_all().await;
        conn.close(0u32.into(), b"done");
        out
    });
    let h1: Vec<(Answer, Duration)> = h1.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(h1.iter().all(|(a, _)| *a == Answer::Status(200)), "{h1:?}");
    assert!(h3.iter().all(|(st, _)| *st == 200), "{h3:?}");
    let mut done: Vec<Duration> = h1
        .iter()
        .map(|x| x.1)
        .chain(h3.iter().map(|x| x.1))
        .collect();
    done.sort();
    // Six in a pool of two: three waves, whichever protocol each came by.
    assert_waves(
        &done,
        2,
        ms(200),
        ms(150),
        "2 HTTPS + 4 HTTP/3 in capacity=2",
    );
    let t = truth_when(&s, |t| num(pool(t, "/p"), &["served"]) >= 6.0);
    let p = pool(&t, "/p");
    assert_eq!(
        (num(p, &["served"]), num(p, &["in_service_max"])),
        (6.0, 2.0),
        "{p}"
    );
}

/// A rustls client configuration trusting `dir/cert.pem`, offering HTTP/1.1.
#[cfg(target_os = "linux")]
fn tls_client(dir: &std::path::Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(tls)
}

/// A TLS connection to `addr`, its handshake done.
#[cfg(target_os = "linux")]
fn tls_connect(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut conn =
        rustls::ClientConnection::new(config.clone(), "localhost".try_into().unwrap()).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("TLS handshake");
    }
    rustls::StreamOwned::new(conn, tcp)
}

// ---- 2. In-flight delay ----

#[test]
fn inflight_delay_is_base_alone_and_grows_with_the_requests_in_flight() {
    let s = start(&["/i delay=inflight:20ms:20ms"], &["-t", "2"]);
    // Alone: 20 ms + 20 ms × 1.
    let alone = burst(&s, "/i", 1);
    assert_eq!(alone[0].answer, Some(Answer::Status(200)));
    assert!(
        alone[0].done + MS >= ms(40) && alone[0].done < ms(240),
        "alone: {:?}",
        alone[0].done
    );
    let t = truth_when(&s, |t| num(route(t, "/i"), &["count"]) >= 1.0);
    let drawn = num(route(&t, "/i"), &["drawn_us", "max"]);
    assert!(
        (39_900.0..=40_100.0).contains(&drawn),
        "alone drew {drawn} µs"
    );

    // N at once: the k-th drawn sees k in flight, 20 + 20·k ms; the largest is 20 + 20·N when all N
    // are drawn before the first is answered (40 ms after it came; sends take a few ms). One
    // straggler is allowed for: at least N - 1 together.
    for n in [5usize, 10] {
        let before = num(route(&truth(&s), "/i"), &["count"]);
        let got = burst(&s, "/i", n);
        assert!(
            got.iter().all(|g| g.answer == Some(Answer::Status(200))),
            "{got:?}"
        );
        let t = truth_when(&s, |t| num(route(t, "/i"), &["count"]) >= before + n as f64);
        let i = route(&t, "/i");
        let max = num(i, &["drawn_us", "max"]);
        let top = 20_000.0 + 20_000.0 * n as f64;
        assert!(
            (top - 20_000.0 - 100.0..=top + 100.0).contains(&max),
            "{n} at once: drawn max {max} µs, want {top}: {i}"
        );
        // The client waited for the largest draw.
        let last = *done_sorted(&got).last().unwrap();
        assert!(
            last.as_secs_f64() * 1e6 + 1000.0 >= top - 20_000.0,
            "{n} at once: the last answered after {last:?}"
        );
    }
}

// ---- 3. Ground truth, metrics, exit lines ----

#[test]
fn ground_truth_metrics_and_exit_lines_show_waits_services_holds_and_sheds() {
    let s = start(
        &["/p capacity=1 delay=300ms", "/q pool=q delay=300ms"],
        &["--pool", "q capacity=1 queue=1 shed=429"],
    );
    let mut plans = vec![at("/p", ms(0)); 3];
    plans.extend(vec![at("/q", ms(0)); 3]);
    let (t0, h) = run(s.addr, plans);
    // While the first of each is in service (until about 300 ms): /p has 2 waiting, /q 1 (its
    // third was shed).
    gauges_seen(
        &s,
        &[
            ("statico_pool_in_service{pool=\"/p\"}", 1.0),
            ("statico_pool_queued{pool=\"/p\"}", 2.0),
            ("statico_pool_in_service{pool=\"q\"}", 1.0),
            ("statico_pool_queued{pool=\"q\"}", 1.0),
        ],
        t0 + ms(20),
        t0 + ms(600),
    );
    let got = h.join().unwrap();
    let p_answers: Vec<_> = got[..3].iter().map(|g| g.answer).collect();
    assert!(
        p_answers.iter().all(|a| *a == Some(Answer::Status(200))),
        "{got:?}"
    );
    let mut q: Vec<_> = got[3..].iter().map(|g| g.answer.unwrap()).collect();
    q.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(
        q,
        [
            Answer::Status(200),
            Answer::Status(200),
            Answer::Status(429)
        ],
        "{got:?}"
    );

    let t = truth_when(&s, |t| num(pool(t, "/p"), &["served"]) >= 3.0);
    let p = route(&t, "/p");
    // Waits of about 0, 300 and 600 ms; each drew 300 ms; each held wait + service.
    assert_eq!(num(p, &["wait_us", "count"]), 3.0, "{p}");
    let drawn = num(p, &["drawn_us", "mean"]);
    assert!((299_500.0..=300_500.0).contains(&drawn), "{p}");
    let wait = num(p, &["wait_us", "mean"]);
    assert!(
        (290_000.0..=340_000.0).contains(&wait),
        "wait mean {wait}: {p}"
    );
    assert!(num(p, &["wait_us", "max"]) >= 590_000.0, "{p}");
    let held = num(p, &["held_us", "mean"]);
    assert!(
        held >= wait + drawn - 100.0 && held <= wait + drawn + 5_000.0,
        "held mean {held} is not wait {wait} + service {drawn}: {p}"
    );
    let pq = pool(&t, "q");
    assert_eq!(
        (
            num(pq, &["served"]),
            num(pq, &["shed"]),
            num(pq, &["queued_max"])
        ),
        (2.0, 1.0, 1.0),
        "{pq}"
    );
    assert_eq!(outcome(route(&t, "/q"), "shed"), 1, "{t}");
    assert_eq!(outcome(route(&t, "/q"), "gone"), 0, "{t}");

    let after = s.scrape("/metrics");
    for (name, want) in [
        ("statico_pool_in_service{pool=\"/p\"}", 0.0),
        ("statico_pool_queued{pool=\"/p\"}", 0.0),
        ("statico_route_wait_seconds_count{route=\"/p\"}", 3.0),
        (
            "statico_route_wait_seconds_bucket{route=\"/p\",le=\"+Inf\"}",
            3.0,
        ),
    ] {
        assert_eq!(series(&after, name), Some(want), "{name}:\n{after}");
    }
    // The histogram's content: one wait under 250 ms (the first), all three under 1 s.
    let buckets: Vec<(f64, f64)> = after
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("statico_route_wait_seconds_bucket{route=\"/p\",le=\"")?;
            let (le, count) = rest.split_once("\"} ")?;
            Some((le.parse().ok()?, count.trim().parse().ok()?))
        })
        .collect();
    let at_most = |x: f64| {
        buckets
            .iter()
            .filter(|(le, _)| *le <= x)
            .map(|b| b.1)
            .fold(0.0, f64::max)
    };
    assert!(buckets.len() > 3, "wait buckets:\n{after}");
    assert_eq!(at_most(0.25), 1.0, "waits up to 250 ms: {buckets:?}");
    let sum = series(&after, "statico_route_wait_seconds_sum{route=\"/p\"}").unwrap();
    assert!((0.87..=1.02).contains(&sum), "wait sum {sum} s");

    let stopped = s.stop();
    for line in [
        "statico: pool /p: capacity 1, queue unbounded: served 3, shed 0, in service max 1, queued max 2",
        "statico: pool q: capacity 1, queue 1: served 2, shed 1, in service max 1, queued max 1",
    ] {
        assert!(stopped.stderr.lines().any(|l| l == line), "no {line:?} in\n{}", stopped.stderr);
    }
}

// ---- 4. Queueing theory ----

#[test]
fn a_closed_loop_runs_at_c_over_s_with_littles_law_latency() {
    // 12 clients back to back against 4 servers of 20 ms: the pool is never idle (8 wait), so it
    // completes C/S = 200 req/s, and by Little's law each request spends N/X = 60 ms. Edge effects
    // (the first wave, the drain after the 3 s) are under 3%; the tolerances (±10%, ±15%) leave room
    // for the holds' lateness and the client's turnaround on a busy machine.
    const C: f64 = 4.0;
    const S: f64 = 0.020;
    const N: usize = 12;
    let s = start(&["/c capacity=4 delay=20ms"], &[]);
    let addr = s.addr;
    let barrier = Arc::new(Barrier::new(N));
    let start = Instant::now();
    let run_for = Duration::from_secs(3);
    let clients: Vec<_> = (0..N)
        .map(|_| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(WAIT)).unwrap();
                c.set_nodelay(true).unwrap();
                barrier.wait();
                let mut latencies = Vec::new();
                while start.elapsed() < run_for {
                    let t = Instant::now();
                    c.write_all(&get("/c")).unwrap();
                    assert_eq!(read_answer(&mut c).0, Answer::Status(200));
                    latencies.push(t.elapsed().as_secs_f64());
                }
                latencies
            })
        })
        .collect();
    let latencies: Vec<f64> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let elapsed = start.elapsed().as_secs_f64();
    let x = latencies.len() as f64 / elapsed;
    let r = latencies.iter().sum::<f64>() / latencies.len() as f64;
    let (want_x, want_r) = (C / S, N as f64 * S / C);
    assert!(
        (want_x * 0.9..=want_x * 1.1).contains(&x),
        "throughput {x:.1}/s, want {want_x}/s ({} in {elapsed:.2} s)",
        latencies.len()
    );
    assert!(
        (want_r * 0.85..=want_r * 1.15).contains(&r),
        "mean latency {:.1} ms, want {:.1} ms",
        r * 1e3,
        want_r * 1e3
    );
    let t = truth_when(&s, |t| {
        num(pool(t, "/c"), &["served"]) >= latencies.len() as f64
    });
    let p = pool(&t, "/c");
    assert_eq!(num(p, &["served"]), latencies.len() as f64, "{p}");
    assert_eq!(num(p, &["in_service_max"]), 4.0, "{p}");
    assert!(
        num(p, &["queued_max"]) <= 8.0,
        "12 clients, 4 in service: {p}"
    );
    // The server's waits: the latency less the service, 40 ms.
    let wait = num(route(&t, "/c"), &["wait_us", "mean"]) / 1e6;
    assert!(
        ((want_r - S) * 0.85..=(want_r - S) * 1.15).contains(&wait),
        "wait mean {:.1} ms",
        wait * 1e3
    );
}

/// A small seeded generator (SplitMix64) for arrival gaps and the simulation.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

/// Erlang C: the probability that an arrival waits in M/M/c with offered load `a` = λ/μ.
fn erlang_c(c: u32, a: f64) -> f64 {
    let (mut sum, mut term) = (0.0, 1.0);
    for k in 0..c {
        if k > 0 {
            term *= a / k as f64;
        }
        sum += term;
    }
    let top = term * a / c as f64 * (c as f64 / (c as f64 - a));
    top / (sum + top)
}

/// What one simulated run gave: the mean wait, the fraction of arrivals that waited, and the
/// fraction that a client would count as finding all servers busy when it learns of each
/// departure `shift` late.
struct SimRun {
    wait: f64,
    waited: f64,
    seen_busy: f64,
}

/// One simulated FIFO M/M/c run of `n` Poisson arrivals at rate `lambda`.
fn simulate_mmc(rng: &mut Rng, n: usize, lambda: f64, mean_service: f64, c: usize) -> SimRun {
    let mut t = 0.0;
    let arrivals: Vec<f64> = (0..n)
        .map(|_| {
            t += rng.exp(1.0 / lambda);
            t
        })
        .collect();
    simulate_fifo(rng, &arrivals, mean_service, c, 0.0)
}

/// One simulated run of c FIFO servers with exponential services over the given arrival times
/// (seconds, in order).
fn simulate_fifo(
    rng: &mut Rng,
    arrivals: &[f64],
    mean_service: f64,
    c: usize,
    shift: f64,
) -> SimRun {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // Departure times as a client sees them, in µs (a heap of the ones still ahead).
    let mut seen: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut free = vec![0.0f64; c];
    let (mut total, mut waited, mut busy) = (0.0, 0usize, 0usize);
    for &t in arrivals {
        while seen.peek().is_some_and(|d| d.0 as f64 <= t * 1e6) {
            seen.pop();
        }
        busy += usize::from(seen.len() >= c);
        let (j, at) = free
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        let begin = t.max(at);
        total += begin - t;
        waited += usize::from(begin > t);
        free[j] = begin + rng.exp(mean_service);
        seen.push(Reverse(((free[j] + shift) * 1e6) as u64));
    }
    let n = arrivals.len() as f64;
    SimRun {
        wait: total / n,
        waited: waited as f64 / n,
        seen_busy: busy as f64 / n,
    }
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64;
    (m, v.sqrt())
}

/// Sends GET `path` at each of `arrivals` (after a common start) by whichever of `clients`
/// keep-alive connections is free; returns (arrival index, sent, answered) since the start, in
/// arrival order.
fn open_loop(
    addr: SocketAddr,
    path: &'static str,
    arrivals: &[Duration],
    clients: usize,
) -> Vec<(usize, Duration, Duration)> {
    let (jobs_tx, jobs_rx) = mpsc::channel::<(usize, Duration)>();
    for (i, a) in arrivals.iter().enumerate() {
        jobs_tx.send((i, *a)).unwrap();
    }
    drop(jobs_tx);
    let jobs = Arc::new(Mutex::new(jobs_rx));
    let conns: Vec<TcpStream> = (0..clients)
        .map(|_| {
            let c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(WAIT)).unwrap();
            c.set_nodelay(true).unwrap();
            c
        })
        .collect();
    let t0 = Instant::now() + ms(50);
    let threads: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            let jobs = jobs.clone();
            thread::spawn(move || {
                let mut out = Vec::new();
                loop {
                    let job = jobs.lock().unwrap().recv();
                    let Ok((i, when)) = job else { break };
                    if let Some(d) = (t0 + when).checked_duration_since(Instant::now()) {
                        thread::sleep(d);
                    }
                    c.write_all(&get(path)).unwrap();
                    let sent = t0.elapsed();
                    assert_eq!(read_answer(&mut c).0, Answer::Status(200));
                    out.push((i, sent, t0.elapsed()));
                }
                out
            })
        })
        .collect();
    let mut log: Vec<(usize, Duration, Duration)> = threads
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    log.sort_by_key(|l| l.0);
    log
}

#[test]
fn poisson_arrivals_wait_as_erlang_c_predicts() {
    // M/M/2 with mean service M = 8 ms at ρ = 0.7: λ = 175/s, 1600 arrivals (~9 s). Erlang C gives
    // P(wait) = 0.576 and the mean wait W = P(wait)·M/(c − λM) = 7.7 ms. Waits are strongly
    // correlated from one customer to the next, so the sampling error of a run's mean wait is far
    // above σ/√n: it is taken from 300 simulated runs of the same size (about 20% of W for the
    // mean wait, 0.035 for the fraction that waited), and the bounds are 4 of those standard
    // deviations.
    const C: u32 = 2;
    const M: f64 = 0.008;
    const RHO: f64 = 0.7;
    const N: usize = 1600;
    let lambda = RHO * C as f64 / M;
    let (p_wait, w) = {
        let a = lambda * M;
        let p = erlang_c(C, a);
        (p, p * M / (C as f64 - a))
    };
    let mut rng = Rng(30);
    let runs: Vec<SimRun> = (0..300)
        .map(|_| simulate_mmc(&mut rng, N, lambda, M, C as usize))
        .collect();
    let (sim_w, sd_w) = mean_sd(&runs.iter().map(|r| r.wait).collect::<Vec<_>>());
    let (sim_p, sd_p) = mean_sd(&runs.iter().map(|r| r.waited).collect::<Vec<_>>());
    // The simulation agrees with the formula (so its spread is the spread of this system).
    assert!(
        (sim_w - w).abs() < 0.1 * w,
        "simulated W {sim_w} vs Erlang C {w}"
    );
    assert!(
        (sim_p - p_wait).abs() < 0.02,
        "simulated P {sim_p} vs Erlang C {p_wait}"
    );

    let s = start(
        &["/e capacity=2 delay=exp:8ms"],
        &["--seed", "30", "--listen-backlog", "1024"],
    );
    // Open loop: arrival i is sent at its scheduled time by whichever of 48 clients is free (at
    // ρ = 0.7 more than 48 in the system has a probability far below 1e-6).
    let mut arrivals = Vec::with_capacity(N);
    let mut t = 0.0;
    let mut gaps = Rng(7);
    for _ in 0..N {
        t += gaps.exp(1.0 / lambda);
        arrivals.push(Duration::from_secs_f64(t));
    }
    let log = open_loop(s.addr, "/e", &arrivals, 48);
    let mean_late = log
        .iter()
        .map(|(i, sent, _)| (sent.as_secs_f64() - arrivals[*i].as_secs_f64()).max(0.0))
        .sum::<f64>()
        / N as f64;
    let sent: Vec<f64> = log.iter().map(|l| l.1.as_secs_f64()).collect();
    let latency = log.iter().map(|l| (l.2 - l.1).as_secs_f64()).sum::<f64>() / N as f64;
    // From the client's side, an arrival found all servers busy when C requests sent before it
    // were not yet answered.
    let seen_busy = log
        .iter()
        .filter(|(_, sent, _)| {
            log.iter()
                .filter(|(_, s2, d2)| s2 < sent && d2 > sent)
                .count()
                >= C as usize
        })
        .count() as f64
        / N as f64;

    let t = truth_when(&s, |t| num(route(t, "/e"), &["count"]) >= N as f64);
    let e = route(&t, "/e");
    assert_eq!(num(e, &["count"]), N as f64, "{e}");
    assert_eq!(num(pool(&t, "/e"), &["in_service_max"]), C as f64, "{t}");
    let drawn = num(e, &["drawn_us", "mean"]) / 1e6;
    let wait = num(e, &["wait_us", "mean"]) / 1e6;
    let held = num(e, &["held_us", "mean"]) / 1e6;
    // The service drawn: the mean of N exponentials, standard error M/√N = 2.5%.
    assert!(
        (drawn - M).abs() < 4.0 * M / (N as f64).sqrt(),
        "service mean {drawn}"
    );
    // Each request held its wait plus its service (and the answer's way out).
    assert!(
        held >= wait + drawn - 0.000_1 && held < wait + drawn + 0.001,
        "held {held} vs wait {wait} + service {drawn}"
    );

    // The same queue simulated over the arrivals exactly as they were sent and with this run's
    // service mean (the pool keeps its servers for the drawn time exactly): what to expect of this
    // run whatever the machine's load did to the sender, with the spread the services alone give.
    // The client learns of a departure later than it happens, by its latency less the server's
    // wait and service: the simulation shifts its departures by that much for the client's count.
    let shift = (latency - wait - drawn).max(0.0);
    let mut rng = Rng(31);
    let runs: Vec<SimRun> = (0..300)
        .map(|_| simulate_fifo(&mut rng, &sent, drawn, C as usize, shift))
        .collect();
    let (cond_w, cond_sd_w) = mean_sd(&runs.iter().map(|r| r.wait).collect::<Vec<_>>());
    let (cond_p, _) = mean_sd(&runs.iter().map(|r| r.waited).collect::<Vec<_>>());
    let (cond_busy, cond_sd_busy) = mean_sd(&runs.iter().map(|r| r.seen_busy).collect::<Vec<_>>());
    // Erlang C at this run's load (its arrival rate and service mean), and the fraction that
    // waited as the client's count gives it once the lateness of its view is taken out.
    let a_run = N as f64 / sent[sent.len() - 1] * drawn;
    let p_run = erlang_c(C, a_run);
    let w_run = p_run * drawn / (C as f64 - a_run);
    let waited = seen_busy - (cond_busy - cond_p);
    eprintln!(
        "Erlang C at ρ {:.3}: P(wait) {p_run:.3} (nominal {p_wait:.3}, sd {sd_p:.3}), W {:.2} ms \
         (nominal {:.2}, sd {:.2}); this run: waited {waited:.3} (client saw all busy {seen_busy:.3}), \
         server's wait mean {:.2} ms; simulated over the arrivals as sent ({:.2} ms late on \
         average, the client's view {:.2} ms late): P(wait) {cond_p:.3}, all busy {cond_busy:.3} \
         (sd {cond_sd_busy:.3}), W {:.2} ms (sd {:.2})",
        a_run / C as f64,
        w_run * 1e3,
        w * 1e3,
        sd_w * 1e3,
        wait * 1e3,
        mean_late * 1e3,
        shift * 1e3,
        cond_w * 1e3,
        cond_sd_w * 1e3
    );
    assert!(
        (seen_busy - cond_busy).abs() <= 4.0 * cond_sd_busy + 0.01,
        "arrivals that found all servers busy {seen_busy:.3}, simulated {cond_busy:.3} (sd \
         {cond_sd_busy:.3})"
    );
    assert!(
        (wait - cond_w).abs() <= 4.0 * cond_sd_w,
        "mean wait {:.2} ms, simulated {:.2} ms (sd {:.2} ms)",
        wait * 1e3,
        cond_w * 1e3,
        cond_sd_w * 1e3
    );
    // Erlang C itself, when the arrivals went out as scheduled (Poisson): a sender held up by
    // the machine's load (seen: 1.5 ms late on average with the load at 4 on two cores) bunches
    // them, which Erlang C does not describe; the simulation above covers that case.
    if mean_late < 0.001 {
        assert!(
            (waited - p_run).abs() <= 4.0 * sd_p + 0.01,
            "fraction that waited {waited:.3}, Erlang C {p_run:.3} (sd {sd_p:.3})"
        );
        assert!(
            (wait - w_run).abs() <= 4.0 * sd_w,
            "mean wait {:.2} ms, Erlang C {:.2} ms (sd {:.2} ms)",
            wait * 1e3,
            w_run * 1e3,
            sd_w * 1e3
        );
    }
}

// ---- 5. Bad input ----

/// Runs statico with `args` on a port another socket holds, expecting exit 2 (a parse error,
/// before binding: binding first would fail with exit 1) with one stderr line containing each of
/// `names`; returns that line, or what was wrong.
fn refused(args: &[&str], names: &[&str]) -> Result<String, String> {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let all = [&["-a", "127.0.0.1", "-p", &port][..], args].concat();
    let (code, err) = run_to_exit(&all);
    if code != Some(2) {
        return Err(format!("{args:?}: exit {code:?}, not 2: {err}"));
    }
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    if lines.len() != 1 {
        return Err(format!("{args:?}: not one line: {err}"));
    }
    match names.iter().find(|name| !lines[0].contains(*name)) {
        Some(name) => Err(format!("{args:?} should name {name:?}: {err}")),
        None => Ok(lines[0].to_string()),
    }
}

/// Fails with every case's complaint at once.
fn all_refused(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bad_pool_flags_exit_2_naming_the_flag_and_the_bad_part() {
    let cases: [(&[&str], &[&str]); 14] = [
        (&["--route", "/x pool=nope"], &["--route", "nope"]),
        (
            &[
                "--pool",
                "db capacity=1",
                "--pool",
                "db capacity=2",
                "--route",
                "/x pool=db",
            ],
            &["--pool", "db", "twice"],
        ),
        // Defined twice with no route using it yet: still two definitions of one name.
        (
            &["--pool", "db capacity=1", "--pool", "db capacity=2"],
            &["--pool", "db", "twice"],
        ),
        (&["--route", "/x capacity=0"], &["--route", "capacity"]),
        (&["--pool", "db capacity=0"], &["--pool", "capacity"]),
        (&["--pool", "db"], &["--pool", "capacity"]),
        (&["--route", "/x queue=10"], &["--route", "queue"]),
        (
            &["--route", "/x queue-timeout=1s"],
            &["--route", "queue-timeout"],
        ),
        (&["--route", "/x shed=429"], &["--route", "shed"]),
        (
            &["--route", "/x capacity=1 shed=teapot"],
            &["--route", "teapot"],
        ),
        (
            &["--pool", "db capacity=1 shed=teapot"],
            &["--pool", "teapot"],
        ),
        (
            &["--route", "/x delay=inflight:x:y"],
            &["--route", "inflight:x:y"],
        ),
        (
            &["--route", "/x delay=inflight:1ms"],
            &["--route", "inflight:1ms"],
        ),
        (
            &[
                "--pool",
                "db capacity=1",
                "--route",
                "/x pool=db capacity=2",
            ],
            &["--route", "pool"],
        ),
    ];
    all_refused(
        cases
            .iter()
            .filter_map(|(args, names)| refused(args, names).err())
            .collect(),
    );
}

#[test]
fn bad_pools_in_a_routes_file_exit_2_naming_the_file_and_line() {
    // (file text, the lines that may be named — the table's or the key's —, the bad part)
    let route_db = "\n[[route]]\npath = \"/a\"\npool = \"db\"\n";
    let cases: Vec<(String, &[usize], &str)> = vec![
        ("[[route]]\npath = \"/a\"\npool = \"nope\"\n".into(), &[1, 3], "nope"),
        (
            format!("[[pool]]\nname = \"db\"\ncapacity = 1\n\n[[pool]]\nname = \"db\"\ncapacity = 2\n{route_db}"),
            &[5, 6],
            "db",
        ),
        (format!("[[pool]]\nname = \"db\"\ncapacity = 0\n{route_db}"), &[1, 3], "capacity"),
        ("[[route]]\npath = \"/a\"\nqueue = 5\n".into(), &[1, 3], "queue"),
        (
            format!("[[pool]]\nname = \"db\"\ncapacity = 1\nshed = \"teapot\"\n{route_db}"),
            &[1, 4],
            "teapot",
        ),
        ("[[route]]\npath = \"/a\"\ndelay = \"inflight:x:y\"\n".into(), &[1, 3], "inflight:x:y"),
        (
            "[[pool]]\nname = \"db\"\ncapacity = 1\n\n[[route]]\npath = \"/a\"\npool = \"db\"\ncapacity = 2\n".into(),
            &[5, 7, 8],
            "pool",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (text, lines, bad)) in cases.iter().enumerate() {
        let path = scratch_dir("pools", &format!("bad-{i}")).join("routes.toml");
        std::fs::write(&path, text).unwrap();
        let file = path.to_str().unwrap();
        match refused(&["--routes", file], &[bad]) {
            Ok(line) if lines.iter().any(|l| line.contains(&format!("{file}:{l}"))) => {}
            Ok(line) => failures.push(format!("{text:?} should name {file}:{lines:?}: {line}")),
            Err(e) => failures.push(format!("{text:?}: {e}")),
        }
    }
    all_refused(failures);
}

// ---- 6. Clients that leave while held or queued ----

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

// ---- A real proxy in front ----

/// nginx started by a test, stopped (by its process id) when dropped.
struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx in the foreground, one process, proxying everything to `upstream` (no retries).
fn nginx(name: &str, upstream: SocketAddr) -> Option<Nginx> {
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let dir = scratch_dir("pools", name);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = dir.to_str().unwrap();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
         server {{\n  listen 127.0.0.1:{port};\n  location / {{\n   proxy_pass http://{upstream};\n\
         proxy_next_upstream off;\n  }}\n }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(bin)
        .args([
            "-p",
            d,
            "-e",
            &format!("{d}/error.log"),
            "-c",
            &format!("{d}/nginx.conf"),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let n = Nginx { child, addr };
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        thread::sleep(ms(50));
    }
    Some(n)
}

#[test]
fn through_nginx_a_burst_gets_200s_and_503s_and_the_ground_truth_agrees() {
    let s = start(&["/p capacity=2 queue=4 delay=50ms"], &[]);
    let Some(proxy) = nginx("nginx", s.addr) else {
        eprintln!("SKIPPED: nginx is not installed");
        return;
    };
    const N: usize = 20;
    let got = run(proxy.addr, vec![at("/p", ms(0)); N]).1.join().unwrap();
    let ok = got
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(200)))
        .count();
    let shed = got
        .iter()
        .filter(|g| g.answer == Some(Answer::Status(503)))
        .count();
    assert_eq!(ok + shed, N, "only 200s and 503s: {got:?}");
    // The burst reaches statico within a few ms, inside the first 50 ms service: 2 + 4 are served;
    // a request nginx passes on late may find room, so a couple more are allowed.
    assert!((6..=8).contains(&ok), "{ok} of {N} served: {got:?}");
    let t = truth_when(&s, |t| {
        let p = pool(t, "/p");
        num(p, &["served"]) + num(p, &["shed"]) >= N as f64
    });
    let p = pool(&t, "/p");
    let r = route(&t, "/p");
    assert_eq!(
        (num(p, &["served"]) as usize, num(p, &["shed"]) as usize),
        (ok, shed),
        "what the client saw vs the pool: {p}"
    );
    assert_eq!(
        (
            outcome(r, "200") as usize,
            outcome(r, "shed") as usize,
            outcome(r, "gone")
        ),
        (ok, shed, 0),
        "{r}"
    );
    assert!(num(p, &["in_service_max"]) <= 2.0, "{p}");
    drop(proxy);
}

/// A pipelined connection whose second request queues the moment its first is answered (the
/// ticket of the first freed, the second taken in the same step): the second must still be woken
/// when the pool serves it. Found in review on io_uring, which registered its waker once per ticket
/// and told tickets apart by an address the next one could reuse: the second answer never came.
/// Long header fields make the answers' allocations the size a freed ticket leaves.
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
