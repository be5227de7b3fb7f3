//! The `connection` oracle: one HTTP/1.1 connection's state machine
//! (`statico::conn::connection::Connection`) driven the way a runtime drives it — bytes in by
//! `receive`, output taken by `sent`, `status` acted on, the deadline met by `on_deadline` — against
//! a catalog with routes in front of a static site, on a fake clock that moves only to the
//! connection's next deadline, and only when it will not read (the client has sent everything, or
//! the connection does not want more).
//!
//! The input's first byte sets the scene (see [`Scene`]): which catalog, `--http2`'s h2c, sends
//! that complete later (io_uring: input may arrive while a send is in flight), small limits; the
//! second chooses how the later runs cut reads and sends. The rest is what the client sends, then it
//! reads until the server closes. Oracle, beyond never a panic and never a step without progress:
//! - **splits do not matter**: the bytes in one read, one byte a read, and in reads and sends of
//!   sizes the second byte draws, give the same output bytes (but for `100 Continue`, rightly sent
//!   only when a body did not come with its head), the same end (close, reset, shutdown
//!   first, the switch to HTTP/2 with the same bytes after it), at the same (fake) time, with the
//!   same requests, responses, timeouts and error statuses counted;
//! - **kept input is bounded**: whenever the connection wants input and holds no answer, it keeps
//!   at most one partial head or chunk line (the head limit, or 4 KiB);
//! - **output is bounded**: at most one answer (the largest the catalog has, plus the request's
//!   own bytes that `header=` may echo) and one `100 Continue` for each 14 bytes received — the
//!   shortest request head is 14 bytes (`A * HTTP/1.0\n\n`) — and one error answer.
//!
//! The catalogs are built once (the site in a small temporary directory) and each run takes a fresh
//! worker's copy (`Local`), so each draws the same sequence (`--seed 1`). Pools are left out: their
//! state is shared by connections, which one connection run again cannot compare.
//!
//! Shared by the fuzz target (`fuzz_targets/connection.rs`) and the corpus replay
//! (`tests/fuzz_corpus.rs`), which include this file with `#[path]`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use statico::catalog::response::ResponseSpec;
use statico::catalog::route::fortio;
use statico::catalog::route::spec::parse_spec;
use statico::catalog::route::table::Table;
use statico::catalog::site::SiteOptions;
use statico::catalog::{Catalog, CatalogPlan, Local};
use statico::conn::connection::{Connection, Env, Policy, Status};
use statico::observe::meter::Counters;
use statico::proto::detect::UpgradeRequest;
use statico::proto::http1::parser::Limits;
use statico::proto::http1::session::CONTINUE;
use statico_common::Counter;

/// Routes without holds: answered in batches, pipelined requests together.
const PLAIN_ROUTES: &[&str] = &[
    "GET /r status=201 body=route header=X-Route:r",
    "/mix status=503:50% size=100",
    "POST /big size=3000",
];
/// Routes that hold their answers (delays, a held and a paced body, every fault, streams): answered one at a
/// time, on the fake clock.
const HELD_ROUTES: &[&str] = &[
    "GET /r status=201 body=route",
    "/slow delay=30ms body=late",
    "/exp delay=exp:5ms size=50",
    "/bd body-delay=20ms size=200",
    "/p size=300 rate=10k",
    "/f size=100 fault=reset:20%,close:20%,stall:20%,truncate:20%",
    "/s stream=sse events=uniform:1:4 first=5ms gap=exp:5ms fault=close:20%,truncate:20%",
    "/n stream=ndjson events=3 event-size=500",
    "/v1/* openai=on tokens=uniform:1:4 first=5ms gap=exp:5ms context=64 fault=close:20%,truncate:20%",
];
/// `--echo-query`'s limits in the held catalog.
const ECHO: fortio::Limits = fortio::Limits {
    max_delay: Duration::from_secs(10),
    max_size: 4096,
};
/// The largest answer either catalog gives, head included (a 4 KiB echo, a 3 000-byte route, a
/// site file and their heads); `header=` may add what the request itself holds.
const MAX_ANSWER: usize = 8192;
/// The shortest request: `A * HTTP/1.0\n\n`.
const SHORTEST_REQUEST: usize = 14;
/// Far more steps than any input up to `-max_len` takes: each reads a byte, sends one or meets a
/// deadline.
const MAX_STEPS: usize = 1_000_000;

/// What the first byte sets.
#[derive(Clone, Copy, Debug)]
struct Scene {
    /// The held catalog (routes that hold, `--echo-query`), else the plain one.
    held: bool,
    /// `--http2`: h2c by prior knowledge or `Upgrade: h2c`.
    h2c: bool,
    /// Sends complete later (io_uring): the output is frozen while one is in flight, and input may
    /// arrive meanwhile.
    in_flight: bool,
    /// A 256-byte head limit and a 64-byte body limit (431 and 413 within a short input).
    small: bool,
}

impl Scene {
    fn of(byte: u8) -> Scene {
        Scene {
            held: byte & 1 != 0,
            h2c: byte & 2 != 0,
            in_flight: byte & 4 != 0,
            small: byte & 8 != 0,
        }
    }

    fn policy(self) -> Policy {
        let limits = match self.small {
            true => Limits {
                max_head: 256,
                max_body: 64,
            },
            false => Limits::default(),
        };
        Policy {
            limits,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            verbose: 0,
            h2c: self.h2c,
        }
    }
}

/// How a run cuts the client's reads and the server's sends.
#[derive(Clone, Copy, Debug)]
enum Cuts {
    /// Everything in one read; each output in one send.
    Whole,
    /// One byte a read; each output in one send.
    Bytes,
    /// Reads of 1 up to a span the seed picks (1 to 2 048 bytes), sends of a part of what is there.
    Drawn { span: usize, state: u64 },
}

impl Cuts {
    fn drawn(seed: u8) -> Cuts {
        Cuts::Drawn {
            span: 1 << (seed % 12),
            state: u64::from(seed),
        }
    }

    fn below(state: &mut u64, n: usize) -> usize {
        *state = (state.wrapping_mul(6364136223846793005)).wrapping_add(1442695040888963407);
        ((*state >> 33) as usize) % n.max(1)
    }

    /// How many of `left` input bytes the next read takes (at least one).
    fn read(&mut self, left: usize) -> usize {
        match self {
            Cuts::Whole => left,
            Cuts::Bytes => 1,
            Cuts::Drawn { span, state } => 1 + Cuts::below(state, (*span).min(left)),
        }
    }

    /// How many of `len` output bytes the next send takes (at least one).
    fn send(&mut self, len: usize) -> usize {
        match self {
            Cuts::Whole | Cuts::Bytes => len,
            Cuts::Drawn { state, .. } => 1 + Cuts::below(state, len),
        }
    }
}

/// How the connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Close,
    Reset,
    /// Switched to HTTP/2, with the bytes received after the switch.
    Upgrade(Vec<u8>, Option<UpgradeRequest>),
}

/// What the client saw, and what was counted.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    out: Vec<u8>,
    end: End,
    /// Our side was shut down (a lingering close) before the end.
    shut: bool,
    /// When it ended, on the fake clock.
    at: Duration,
    counted: Vec<u64>,
}

/// The counters that do not depend on how bytes were cut.
const COUNTED: [Counter; 8] = [
    Counter::Requests,
    Counter::Responses,
    Counter::Timeouts,
    Counter::Status400,
    Counter::Status413,
    Counter::Status431,
    Counter::Status501,
    Counter::Status505,
];

pub fn check(data: &[u8]) {
    let [scene, seed, input @ ..] = data else {
        return;
    };
    let scene = Scene::of(*scene);
    let whole = run(input, scene, Cuts::Whole);
    let answers = input.len() / SHORTEST_REQUEST + 1;
    let bound = answers * (MAX_ANSWER + input.len() + 64);
    assert!(
        whole.out.len() <= bound,
        "{} bytes out for {} in ({scene:?})",
        whole.out.len(),
        input.len()
    );
    let bytes = run(input, scene, Cuts::Bytes);
    assert_eq!(bytes, whole, "one byte a read differs ({scene:?})");
    let cuts = Cuts::drawn(*seed);
    assert_eq!(
        run(input, scene, cuts),
        whole,
        "{cuts:?} differs ({scene:?})"
    );
}

/// Serves `input` on a fresh connection as `cuts` says, until it ends.
fn run(input: &[u8], scene: Scene, mut cuts: Cuts) -> Outcome {
    let local = Local::for_worker(catalog(scene.held), 0);
    let counters = Counters::new(1);
    let policy = scene.policy();
    let env = Env {
        policy: &policy,
        catalog: local.view(),
        counters: counters.worker(0),
    };
    let t0 = epoch();
    let mut now = t0;
    let mut conn = Connection::new(&policy, now);
    let (mut at, mut out, mut shut) = (0, Vec::new(), false);
    for _ in 0..MAX_STEPS {
        if !conn.output().is_empty() {
            let n = cuts.send(conn.output().len());
            out.extend_from_slice(&conn.output()[..n]);
            if scene.in_flight {
                conn.send_started();
                if reads(&conn) && at < input.len() {
                    at += receive(&mut conn, &input[at..], &mut cuts, now, env);
                }
            }
            conn.sent(n, now, env);
            continue;
        }
        let end = match conn.status() {
            Status::Open => None,
            Status::ShutdownWrite => {
                shut = true;
                conn.shut_down_write(now);
                continue;
            }
            Status::Close => Some(End::Close),
            Status::Reset => Some(End::Reset),
            Status::Upgrade => {
                let (mut rest, upgrade) = conn.into_h2();
                rest.extend_from_slice(&input[at..]);
                let end = End::Upgrade(rest, upgrade);
                return outcome(out, end, shut, now - t0, &counters);
            }
        };
        if let Some(end) = end {
            return outcome(out, end, shut, now - t0, &counters);
        }
        if reads(&conn) && at < input.len() {
            at += receive(&mut conn, &input[at..], &mut cuts, now, env);
            continue;
        }
        now = now.max(conn.deadline().0);
        conn.on_deadline(now, env);
    }
    panic!("no end after {MAX_STEPS} steps ({scene:?}, {cuts:?})");
}

/// What a run is compared by: the output without its `100 Continue`s, the end, the counters.
fn outcome(out: Vec<u8>, end: End, shut: bool, at: Duration, counters: &Counters) -> Outcome {
    let counted = COUNTED.map(|c| counters.worker(0).get(c)).to_vec();
    let mut kept = Vec::with_capacity(out.len());
    let mut rest = &out[..];
    while !rest.is_empty() {
        match rest.strip_prefix(CONTINUE) {
            Some(after) => rest = after,
            None => {
                kept.push(rest[0]);
                rest = &rest[1..];
            }
        }
    }
    Outcome {
        out: kept,
        end,
        shut,
        at,
        counted,
    }
}

/// Whether a runtime reads now: while the connection wants input, and while it holds an answer
/// (within its allowance), as the tokio runtime does.
fn reads(conn: &Connection) -> bool {
    conn.wants_input() || (conn.holds_answer() && !conn.pauses_input())
}

/// One read of the client's `left` bytes; checks the kept input's bound. Returns the bytes read.
fn receive(conn: &mut Connection, left: &[u8], cuts: &mut Cuts, now: Instant, env: Env) -> usize {
    let n = cuts.read(left.len());
    conn.receive(&left[..n], now, env);
    if conn.wants_input() && !conn.holds_answer() {
        let bound = env.policy.limits.max_head.max(4096);
        assert!(
            conn.kept_input() <= bound,
            "{} bytes kept, over {bound}",
            conn.kept_input()
        );
    }
    n
}

/// The fake clock's start: any instant will do, the same for every run of a process.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The plain or the held catalog, built once.
fn catalog(held: bool) -> &'static Catalog {
    static PLAIN: OnceLock<Catalog> = OnceLock::new();
    static HELD: OnceLock<Catalog> = OnceLock::new();
    let (cell, routes) = match held {
        true => (&HELD, HELD_ROUTES),
        false => (&PLAIN, PLAIN_ROUTES),
    };
    cell.get_or_init(|| {
        let routes = routes.iter().map(|r| parse_spec(r).unwrap()).collect();
        let plan = CatalogPlan {
            site: Some(SiteOptions {
                root: site(),
                max_size: 1 << 20,
                ..SiteOptions::default()
            }),
            table: Table {
                routes,
                ..Table::default()
            },
            seed: Some(1),
            echo: held.then_some(ECHO),
            ..CatalogPlan::of_response(ResponseSpec {
                status: 200,
                headers: vec![("X-Fuzz".into(), "1".into())],
                body: b"statico".to_vec(),
            })
        };
        Catalog::build(&plan).expect("the fuzz catalog builds")
    })
}

/// A small site, written once per process into a temporary directory: an index, a text file big
/// enough to be compressed, a file in a directory, a dotfile (hidden) and a well-known one.
fn site() -> PathBuf {
    let root = std::env::temp_dir().join(format!("statico-fuzz-site-{}", std::process::id()));
    let files: [(&str, Vec<u8>); 5] = [
        ("index.html", b"<!doctype html><h1>statico</h1>\n".to_vec()),
        ("a.txt", b"statico fuzz ".repeat(80)),
        ("sub/b.css", b"body { color: black }\n".to_vec()),
        (".env", b"SECRET=1\n".to_vec()),
        (".well-known/security.txt", b"Contact: x\n".to_vec()),
    ];
    for (path, body) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    root
}
