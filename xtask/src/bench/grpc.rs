//! `cargo xtask bench --grpc`: statico's gRPC (`--grpc`, both runtimes) against the servers whose
//! methods its built-in services answer — Fortio's ping server (`fgrpc.PingServer/Ping`) and grpc-go's
//! interop server (`grpc.testing.TestService/EmptyCall`) — then a calibrated gRPC route under a fixed
//! rate, in one run.
//!
//! Speed, per [`METHODS`]: statico on each runtime and the method's peer, started afresh, one worker
//! each pinned to the server CPUs (statico `-t 1`, the peers with `GOMAXPROCS=1`), the load pinned to
//! the client CPUs. First h2load (`-t 1 -c 50 -m 10`, each call a POST of one framed message from a
//! file, `content-type: application/grpc`, `te: trailers`), then ghz (`-c 50 --connections 50`: one
//! call in flight per connection; the method from a `.proto` written into `target/bench/grpc`); the
//! servers take turns over the rounds; medians with min–max. Server CPU per call = the server's CPU time over
//! the round (/proc utime + stime) / the calls answered.
//!
//! h2load sees HTTP statuses, not gRPC's, so a call is counted only where it is known to succeed: each
//! server is first asked once by curl with the same message, whose trailers must say
//! `grpc-status: 0`; and in every h2load round the answers must carry a reply message each (data
//! bytes ≥ [`FRAME`] per 2xx answer: a failed call is trailers-only). ghz counts gRPC statuses itself:
//! its OK calls are counted; the calls its `-z` cuts off at the end (`Unavailable` "transport is
//! closing", `Canceled` "the client connection is closing": about one per connection) are told apart
//! from failures.
//!
//! Calibration: statico (each runtime) with `--route '`[`ROUTE`]`'` under ghz at a fixed rate
//! ([`RATE`] calls/s). Judged: the share of each status against what was asked, and the p50 and
//! p99 of ghz and of statico's ground truth (`/ground-truth.json` on `--metrics`) against the asked
//! lognormal, within sampling error — three standard errors of a binomial count: a share p̂ of n
//! calls within 3√(p(1−p)/n) of p, and a q-quantile x̂ where the asked distribution's share below
//! it, F(x̂), is within 3√(q(1−q)/n) of q; and the ground truth's count per status, which must equal
//! ghz's.
//!
//! The target: statico's server CPU per call under h2load at most [`TARGET`]× each peer's.
//! `report.txt` (also printed) holds the tables, `results.json` every round, `chart.svg` each
//! statico's CPU per call relative to the method's peer.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::accuracy::{parse_truth, Quantiles, RouteTruth};
use super::measure::{self, server_cpu, Round};
use super::ratio::{verdicts, Report};
use super::report::{work_dir, RunInfo};
use super::servers::{start_fortio_grpc, start_grpc_go};
use crate::tools::net::{free_port, http_get, wait_port};
use crate::tools::procfs::{machine, run_queue_ns};
use crate::tools::server::{start_statico, statico_bin, ServerUnderTest};
use crate::tools::{h2load, pinned};

/// The target: statico's server CPU per call under h2load at most this times the peer's.
const TARGET: f64 = 0.35;
/// h2load's connections and concurrent streams per connection; ghz's connections (one call each).
const CONNS: u32 = 50;
const STREAMS: u32 = 10;
/// A gRPC message's frame header (compressed flag, length): the least a reply's body holds.
const FRAME: u64 = 5;

/// A unary method statico and one peer answer, and how each client asks for it.
struct Method {
    /// The tables' and the chart's groups: under h2load, under ghz.
    h2load_group: &'static str,
    ghz_group: &'static str,
    /// The peer's name (as [`start_peer`] starts it).
    peer: &'static str,
    /// `package.Service/Method`.
    call: &'static str,
    /// The request message, protobuf-encoded.
    message: &'static [u8],
    /// The same message as ghz's JSON.
    json: &'static str,
    /// The `.proto` ghz reads the method from: file name and text.
    proto: (&'static str, &'static str),
}

const METHODS: [Method; 2] = [
    Method {
        h2load_group: "Ping h2load",
        ghz_group: "Ping ghz",
        peer: "fortio",
        call: "fgrpc.PingServer/Ping",
        // seq = 1, payload = "x"
        message: b"\x08\x01\x1a\x01x",
        json: r#"{"seq":1,"payload":"x"}"#,
        proto: (
            "ping.proto",
            "syntax = \"proto3\";\npackage fgrpc;\n\
             message PingMessage { int64 seq = 1; int64 ts = 2; string payload = 3; int64 delayNanos = 4; }\n\
             service PingServer { rpc Ping(PingMessage) returns (PingMessage); }\n",
        ),
    },
    Method {
        h2load_group: "EmptyCall h2load",
        ghz_group: "EmptyCall ghz",
        peer: "grpc-go",
        call: "grpc.testing.TestService/EmptyCall",
        message: b"",
        json: "{}",
        proto: (
            "test.proto",
            "syntax = \"proto3\";\npackage grpc.testing;\nmessage Empty {}\n\
             service TestService { rpc EmptyCall(Empty) returns (Empty); }\n",
        ),
    },
];

/// The calibrated route, its method, and what it asks: a share per status (as ghz and the ground
/// truth name them), and a lognormal delay by its p50 and p99 in ms.
const ROUTE: &str = "/bench.Calibrated/Call grpc-status=UNAVAILABLE:5% delay=lognormal:5ms:20ms";
const ROUTE_PATH: &str = "/bench.Calibrated/Call";
const ASKED_SHARES: [(&str, f64); 2] = [("OK", 0.95), ("UNAVAILABLE", 0.05)];
const ASKED_MS: (f64, f64) = (5.0, 20.0);
const ROUTE_PROTO: (&str, &str) = (
    "calibrated.proto",
    "syntax = \"proto3\";\npackage bench;\nmessage Empty {}\n\
     service Calibrated { rpc Call(Empty) returns (Empty); }\n",
);
/// ghz's fixed rate (calls/s) and connections, and the calls of a run (of a `--quick` one).
const RATE: u32 = 500;
const RATE_CONNS: u32 = 20;
const CALLS: u64 = 5_000;
const CALLS_QUICK: u64 = 1_000;
/// How many standard errors a sampled share or percentile may be from what was asked.
const SE: f64 = 3.0;

/// One round of one server: calls in the place of requests, and what did not succeed.
#[derive(Clone, Debug, Default)]
struct CallRound {
    round: Round,
    /// ghz's calls cut off by the end of its `-z` (none under h2load).
    cut: u64,
    /// ghz's other failed calls, per error message.
    failures: Vec<(String, u64)>,
}

/// Runs the methods, then the calibration; writes `report.txt`, `results.json` and `chart.svg` into
/// `dir` and returns the report.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    let work = work_dir(root, "grpc")?;
    let mut report = Report::against(METHODS[0].peer, heading(run));
    let mut results = Vec::new();
    let mut targets = Vec::new();
    let mut skipped = Vec::new();
    for m in &METHODS {
        results.extend(method(root, &work, run, m, &mut report, &mut skipped)?);
        targets.push((m, report.ratios(m.h2load_group).to_vec()));
    }
    let targets = write_targets(&mut report, &targets);
    let calibrated = calibrate(root, &work, run)?;
    report.text.push_str(&calibrated.text);
    for (name, reason) in &skipped {
        let _ = writeln!(report.text, "  not measured: {name}: {reason}");
    }
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let doc = json!({
        "mode": "grpc",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "statico": statico_bin(root).display().to_string(),
        "methods": METHODS.iter().map(|m| json!({
            "call": m.call, "peer": m.peer, "message_json": m.json,
            "h2load": h2load_title(m, run), "ghz": ghz_title(m, run),
        })).collect::<Vec<_>>(),
        "unit": "rps is calls/s, requests are calls, cpu_us_per_req is server CPU µs per call",
        "results": results,
        "targets": targets,
        "calibrated": calibrated.json,
        "skipped": skipped.iter().map(|(n, r)| json!({ "server": n, "reason": r })).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    let title = format!(
        "gRPC unary calls: statico's server CPU per call relative to the method's peer (Fortio, grpc-go), lower is better; target {TARGET}x under h2load"
    );
    report.chart(&dir.join("chart.svg"), &title)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(report.text)
}

/// One method: its servers started, its h2load and ghz rounds, their tables added to `report`;
/// its servers' results for results.json.
fn method(
    root: &Path,
    work: &Path,
    run: &RunInfo,
    m: &Method,
    report: &mut Report,
    skipped: &mut Vec<(String, String)>,
) -> Result<Vec<Value>> {
    let files = write_files(work, m)?;
    let servers = start_servers(root, work, run, m, &files, skipped)?;
    report.set_peer(m.peer);
    let h2load_rows = rounds(m.h2load_group, &servers, run, |s| {
        h2load_round(s, m, &files.body, run)
    })?;
    let title = h2load_title(m, run);
    add_table(report, m.h2load_group, &title, &servers, &h2load_rows);
    let ghz_rows = rounds(m.ghz_group, &servers, run, |s| {
        ghz_round(s, m, &files.proto, run)
    })?;
    add_table(report, m.ghz_group, &ghz_title(m, run), &servers, &ghz_rows);
    let groups = [(m.h2load_group, &h2load_rows), (m.ghz_group, &ghz_rows)];
    Ok((groups.into_iter())
        .flat_map(|(group, rows)| results_json(group, &servers, rows))
        .collect())
}

fn heading(run: &RunInfo) -> String {
    format!(
        "grpc: unary calls, one server worker on CPU {} (statico -t 1 --grpc; Fortio and grpc-go with GOMAXPROCS=1), \
         the client on CPU {}, {} round(s) of {} s, medians (min-max)\n\
         a call counts only if it succeeded: curl's one call per server had grpc-status 0, and every h2load answer \
         carried a reply message; ghz counts OK calls\n",
        run.server_cpus, run.client_cpus, run.rounds, run.duration
    )
}

fn h2load_title(m: &Method, run: &RunInfo) -> String {
    format!(
        "{}: h2load -t 1 -c {CONNS} -m {STREAMS} -D {} -d <one framed message> -H 'content-type: application/grpc' -H 'te: trailers' (POST /{})",
        m.h2load_group, run.duration, m.call
    )
}

fn ghz_title(m: &Method, run: &RunInfo) -> String {
    format!(
        "{}: ghz --insecure --proto {} --call {} -d '{}' -c {CONNS} --connections {CONNS} -z {}s (one call in flight per connection)",
        m.ghz_group, m.proto.0, m.call, m.json, run.duration
    )
}

/// The files a method's clients read, kept in `target/bench/grpc` with the peers' logs: h2load's
/// request body (one framed message) and ghz's proto.
struct Files {
    body: PathBuf,
    proto: PathBuf,
}

fn write_files(dir: &Path, m: &Method) -> Result<Files> {
    let body = dir.join(format!("{}.bin", m.proto.0.trim_end_matches(".proto")));
    std::fs::write(&body, framed(m.message))?;
    let proto = dir.join(m.proto.0);
    std::fs::write(&proto, m.proto.1)?;
    Ok(Files { body, proto })
}

/// `message` as gRPC frames it: uncompressed, its length (big-endian u32), itself.
fn framed(message: &[u8]) -> Vec<u8> {
    let len = u32::try_from(message.len()).expect("a small message");
    [&[0][..], &len.to_be_bytes(), message].concat()
}

/// statico on each runtime and `m`'s peer, each asked for `m` once by curl. A statico that cannot
/// start or answer fails the run; the peer is left out, with the reason in `skipped`.
fn start_servers(
    root: &Path,
    dir: &Path,
    run: &RunInfo,
    m: &Method,
    files: &Files,
    skipped: &mut Vec<(String, String)>,
) -> Result<Vec<ServerUnderTest>> {
    let mut servers = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let flags = ["-t", "1", "--runtime", runtime, "--grpc"];
        let s = start_statico(
            root,
            &format!("statico-{runtime}"),
            Some(run.server_cpus),
            &flags,
        )?;
        probe(&s, m, &files.body)?;
        servers.push(s);
    }
    let peer = start_peer(dir, run, m).and_then(|s| probe(&s, m, &files.body).map(|()| s));
    match peer {
        Ok(s) => servers.push(s),
        Err(e) => skipped.push((m.peer.to_string(), format!("{e:#}"))),
    }
    Ok(servers)
}

fn start_peer(dir: &Path, run: &RunInfo, m: &Method) -> Result<ServerUnderTest> {
    match m.peer {
        "fortio" => start_fortio_grpc(dir, run.server_cpus),
        _ => start_grpc_go(dir, run.server_cpus),
    }
}

/// One call of `m` by curl with h2load's body: its trailers must say `grpc-status: 0`.
fn probe(s: &ServerUnderTest, m: &Method, body: &Path) -> Result<()> {
    let out = Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "--max-time", "10"])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .args(["-D", "-", "-o", "/dev/null"])
        .arg(format!("http://127.0.0.1:{}/{}", s.port, m.call))
        .stdin(Stdio::null())
        .output()
        .context("run curl")?;
    let head = String::from_utf8_lossy(&out.stdout);
    if !grpc_ok(&head) {
        bail!(
            "{}'s answer to {} is not grpc-status 0: {head}{}",
            s.name,
            m.call,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("  {:<17} {} grpc-status 0", s.name, m.call);
    Ok(())
}

/// Whether curl's dump of an answer's head and trailers has HTTP 200 and `grpc-status: 0`.
fn grpc_ok(head: &str) -> bool {
    let mut lines = head.lines().map(str::trim);
    let status_200 = lines.next().is_some_and(|l| l.starts_with("HTTP/2 200"));
    status_200
        && head
            .lines()
            .any(|l| l.trim().eq_ignore_ascii_case("grpc-status: 0"))
}

/// `group`'s rounds over `servers` in turn, each round's figures shown as it ends.
fn rounds(
    group: &str,
    servers: &[ServerUnderTest],
    run: &RunInfo,
    mut round: impl FnMut(&ServerUnderTest) -> Result<CallRound>,
) -> Result<Vec<Vec<CallRound>>> {
    eprintln!(
        "bench: {group} ({} round(s) of {} s)",
        run.rounds, run.duration
    );
    measure::interleave(servers, run.rounds, |s| {
        let r = round(s)?;
        eprintln!(
            "  {:<17} {:>9.0} calls/s {:>7.2} µs/call  failed {}",
            s.name, r.round.rps, r.round.cpu_us_per_req, r.round.errors
        );
        Ok(r)
    })
}

/// One h2load round of `m` against `s`: 2xx answers, each with a reply message, are the calls.
fn h2load_round(s: &ServerUnderTest, m: &Method, body: &Path, run: &RunInfo) -> Result<CallRound> {
    let url = format!("http://127.0.0.1:{}/{}", s.port, m.call);
    let mut cmd = h2load::command(Some(run.client_cpus), CONNS, STREAMS, run.duration, &url);
    cmd.arg("-d")
        .arg(body)
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"]);
    let (report, cpu) = server_cpu(s.pid(), || h2load::run(&mut cmd))?;
    let round = h2load_calls(&report, cpu.total_us())
        .with_context(|| format!("h2load against {}", s.name))?;
    Ok(CallRound {
        round,
        ..CallRound::default()
    })
}

/// An h2load round's calls: its 2xx answers, if each carried a reply message.
fn h2load_calls(report: &h2load::Report, cpu_us: f64) -> Result<Round> {
    let calls = report.succeeded;
    if calls == 0 {
        bail!("no call answered");
    }
    if report.data_bytes < FRAME * calls {
        bail!(
            "{} bytes of replies for {calls} answers: some were not a reply message (a failed call)",
            report.data_bytes
        );
    }
    let non_2xx = report.status_4xx + report.status_5xx;
    Ok(Round {
        rps: report.rps,
        requests: calls,
        cpu_us_per_req: cpu_us / calls as f64,
        errors: non_2xx + report.errored + report.timeout,
        non_2xx,
        ..Round::default()
    })
}

/// ghz pinned to the client CPUs, with its JSON report, `proto` naming the method `call`, each call
/// asking `json`.
fn ghz(run: &RunInfo, proto: &Path, call: &str, json: &str) -> Result<Command> {
    let ghz =
        crate::setup::ghz_path().context("ghz is not installed (cargo xtask setup installs it)")?;
    let mut cmd = pinned(Some(run.client_cpus), ghz);
    cmd.args(["--insecure", "--format", "json"])
        .arg("--proto")
        .arg(proto)
        .args(["--call", call, "-d", json])
        .stdin(Stdio::null());
    Ok(cmd)
}

/// One ghz round of `m` against `s` for `--duration` seconds: its OK calls.
fn ghz_round(s: &ServerUnderTest, m: &Method, proto: &Path, run: &RunInfo) -> Result<CallRound> {
    let mut cmd = ghz(run, proto, m.call, m.json)?;
    let conns = CONNS.to_string();
    cmd.args(["-c", &conns, "--connections", &conns])
        .args(["-z", &format!("{}s", run.duration)])
        .arg(format!("127.0.0.1:{}", s.port));
    let (seen, cpu) = server_cpu(s.pid(), || run_ghz(&mut cmd))?;
    let ok = seen.status("OK");
    if ok == 0 {
        bail!("no OK call from {}: {:?}", s.name, seen.errors);
    }
    let cut = seen.cut_off();
    Ok(CallRound {
        round: Round {
            rps: ok as f64 / seen.total_s.max(1e-9),
            requests: ok,
            cpu_us_per_req: cpu.total_us() / ok as f64,
            p50_ms: seen.p50_ms,
            p99_ms: seen.p99_ms,
            errors: seen.count - ok - cut,
            ..Round::default()
        },
        cut,
        failures: seen.failures(),
    })
}

/// What ghz reports (`--format json`): calls, statuses, error messages and latency percentiles.
#[derive(Clone, Debug, Default, PartialEq)]
struct Ghz {
    count: u64,
    total_s: f64,
    /// Calls per status, as ghz names them (`OK`, `Unavailable`).
    statuses: Vec<(String, u64)>,
    /// Calls per error message.
    errors: Vec<(String, u64)>,
    p50_ms: f64,
    p99_ms: f64,
}

impl Ghz {
    fn status(&self, name: &str) -> u64 {
        (self.statuses.iter())
            .find(|(s, _)| s == name)
            .map_or(0, |x| x.1)
    }

    /// The calls a `-z` run's end cut off: its connections closed under them.
    fn cut_off(&self) -> u64 {
        (self.errors.iter())
            .filter(|(e, _)| is_cut_off(e))
            .map(|x| x.1)
            .sum()
    }

    /// The errors but those of the calls cut off.
    fn failures(&self) -> Vec<(String, u64)> {
        (self.errors.iter())
            .filter(|(e, _)| !is_cut_off(e))
            .cloned()
            .collect()
    }
}

/// Whether a ghz error is that of a call its `-z` run's end cut off: the connection closed under
/// it (`Unavailable`), or the call cancelled as the client closed (`Canceled`).
fn is_cut_off(error: &str) -> bool {
    error.contains("transport is closing") || error.contains("the client connection is closing")
}

fn run_ghz(cmd: &mut Command) -> Result<Ghz> {
    let out = cmd.output().context("run ghz")?;
    parse_ghz(&String::from_utf8_lossy(&out.stdout)).with_context(|| {
        format!(
            "ghz ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// ghz's JSON report: `count`, `total` (ns), `statusCodeDistribution`, `errorDistribution` and
/// `latencyDistribution` (`[{"percentage": 50, "latency": ns}, …]`).
fn parse_ghz(text: &str) -> Result<Ghz> {
    let doc: Value = serde_json::from_str(text).context("ghz's JSON report")?;
    let counts = |v: &Value| -> Vec<(String, u64)> {
        (v.as_object().into_iter().flatten())
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
            .collect()
    };
    let percentile = |p: u64| {
        (doc["latencyDistribution"].as_array().into_iter().flatten())
            .find(|x| x["percentage"].as_u64() == Some(p))
            .and_then(|x| x["latency"].as_f64())
            .map_or(0.0, |ns| ns / 1e6)
    };
    Ok(Ghz {
        count: doc["count"].as_u64().context("no count in ghz's report")?,
        total_s: doc["total"].as_f64().unwrap_or(0.0) / 1e9,
        statuses: counts(&doc["statusCodeDistribution"]),
        errors: counts(&doc["errorDistribution"]),
        p50_ms: percentile(50),
        p99_ms: percentile(99),
    })
}

/// A group's table: calls/s and CPU per call, medians with min–max, against the peer.
fn add_table(
    report: &mut Report,
    group: &'static str,
    title: &str,
    servers: &[ServerUnderTest],
    rows: &[Vec<CallRound>],
) {
    let pairs: Vec<Vec<(f64, f64)>> = (rows.iter())
        .map(|r| (r.iter().map(|x| (x.round.rps, x.round.cpu_us_per_req))).collect())
        .collect();
    report.table(group, title, "calls/s", "µs CPU/call", servers, &pairs);
    let _ = write!(report.text, "  failed calls (all rounds):");
    for (s, r) in servers.iter().zip(rows) {
        let failed: u64 = r.iter().map(|x| x.round.errors).sum();
        let cut: u64 = r.iter().map(|x| x.cut).sum();
        let cut = if cut > 0 {
            format!(" (+{cut} cut off by -z's end)")
        } else {
            String::new()
        };
        let _ = write!(report.text, " {} {failed}{cut};", s.name);
    }
    report.text.push('\n');
    for (s, r) in servers.iter().zip(rows) {
        for (error, n) in r.iter().flat_map(|x| &x.failures) {
            let _ = writeln!(report.text, "    {}: {n} x {error}", s.name);
        }
    }
}

/// The targets, each method's h2load ratios against [`TARGET`], appended to the report; returned
/// for results.json.
fn write_targets(report: &mut Report, targets: &[(&Method, Vec<(String, f64)>)]) -> Value {
    let _ = writeln!(report.text, "\ntargets (server CPU per call under h2load)");
    for (m, ratios) in targets {
        let said = verdicts(ratios, TARGET, &format!("{} not measured", m.peer));
        let _ = writeln!(
            report.text,
            "  {}: statico <= {TARGET:.2}x {}: {said}",
            m.h2load_group, m.peer
        );
    }
    (targets.iter())
        .map(|(m, ratios)| json!({ "scenario": m.h2load_group, "target": TARGET, "vs": m.peer, "ratios": ratios }))
        .collect()
}

/// A group's servers: command, medians, min–max and every round.
fn results_json(group: &str, servers: &[ServerUnderTest], rows: &[Vec<CallRound>]) -> Vec<Value> {
    (servers.iter().zip(rows))
        .map(|(s, r)| {
            let plain: Vec<Round> = r.iter().map(|x| x.round.clone()).collect();
            let mut doc = json!({ "scenario": group, "server": s.name, "command": s.command,
                                  "cut_off": r.iter().map(|x| x.cut).collect::<Vec<_>>(),
                                  "failures": r.iter().map(|x| &x.failures).collect::<Vec<_>>() });
            if let Value::Object(o) = &mut doc {
                o.extend(measure::rounds_json(&plain));
            }
            doc
        })
        .collect()
}

/// The calibration's part of report.txt, and of results.json.
struct Calibrated {
    text: String,
    json: Value,
}

/// The calibrated route on each runtime under ghz at [`RATE`], its proto written into `work`; a
/// statico that fails is told in the text, the rest stands.
fn calibrate(root: &Path, work: &Path, run: &RunInfo) -> Result<Calibrated> {
    let calls = if run.quick { CALLS_QUICK } else { CALLS };
    let proto = work.join(ROUTE_PROTO.0);
    std::fs::write(&proto, ROUTE_PROTO.1)?;
    let mut text = format!(
        "\ncalibrated route: statico --grpc --seed 1 --route '{ROUTE}'\n  \
         ghz --proto {} --call {} --rps {RATE} -n {calls} -c {RATE_CONNS} --connections {RATE_CONNS}; \
         sampling error: {SE:.0} standard errors of a binomial count of {calls} calls\n",
        ROUTE_PROTO.0,
        call_of(ROUTE_PATH)
    );
    let mut runs = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let name = format!("statico-{runtime}");
        match calibrated_run(root, run, &proto, runtime, calls) {
            Ok(r) => {
                text.push_str(&calibrated_rows(&name, &r.seen, &r.truth));
                let _ = writeln!(
                    text,
                    "  {:<17} statico waited {:.0} ms for its CPU over the run",
                    "", r.cpu_wait_ms
                );
                let mut doc = calibrated_json(&name, &r.seen, &r.truth);
                doc["cpu_wait_ms"] = r.cpu_wait_ms.into();
                runs.push(doc);
            }
            Err(e) => {
                let _ = writeln!(text, "  {name:<17} not measured: {e:#}");
                runs.push(json!({ "server": name, "error": format!("{e:#}") }));
            }
        }
    }
    let json = json!({ "route": ROUTE, "asked_shares": ASKED_SHARES, "asked_ms": { "p50": ASKED_MS.0, "p99": ASKED_MS.1 },
        "rate": RATE, "connections": RATE_CONNS, "calls": calls, "standard_errors": SE, "runs": runs });
    Ok(Calibrated { text, json })
}

/// `/pkg.Svc/Method` as ghz's `--call` names it.
fn call_of(path: &str) -> &str {
    path.trim_start_matches('/')
}

/// One statico's calibrated run: what ghz saw, the route's ground truth, and how long statico
/// waited for its CPU meanwhile (/proc schedstat).
struct Run {
    seen: Ghz,
    truth: RouteTruth,
    cpu_wait_ms: f64,
}

/// statico on `runtime` with [`ROUTE`] under ghz.
fn calibrated_run(
    root: &Path,
    run: &RunInfo,
    proto: &Path,
    runtime: &str,
    calls: u64,
) -> Result<Run> {
    let metrics = free_port()?;
    let metrics_at = format!("127.0.0.1:{metrics}");
    let flags = [
        "-t",
        "1",
        "--runtime",
        runtime,
        "--grpc",
        "--seed",
        "1",
        "--metrics",
        &metrics_at,
        "--route",
        ROUTE,
    ];
    let name = format!("statico-{runtime}");
    let s = start_statico(root, &name, Some(run.server_cpus), &flags)?;
    wait_port(metrics)?;
    eprintln!("bench: calibrated route on {name}: ghz --rps {RATE} -n {calls}");
    let mut cmd = ghz(run, proto, call_of(ROUTE_PATH), "{}")?;
    let conns = RATE_CONNS.to_string();
    cmd.args(["-c", &conns, "--connections", &conns])
        .args(["--rps", &RATE.to_string(), "-n", &calls.to_string()])
        .arg(format!("127.0.0.1:{}", s.port));
    let waited = run_queue_ns(s.pid())?;
    let seen = run_ghz(&mut cmd)?;
    let waited = run_queue_ns(s.pid())?.saturating_sub(waited);
    let body = http_get(metrics, "/ground-truth.json")?;
    let truth = (parse_truth(&body)?.into_iter())
        .find(|t| t.route == ROUTE_PATH)
        .with_context(|| format!("no route {ROUTE_PATH} in {name}'s ground truth: {body}"))?;
    Ok(Run {
        seen,
        truth,
        cpu_wait_ms: waited as f64 / 1e6,
    })
}

/// ghz's status name (`Unavailable`, `ResourceExhausted`) as gRPC's code and the ground truth name
/// it (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`).
fn code_name(ghz: &str) -> String {
    let mut out = String::new();
    let mut lower_before = false;
    for c in ghz.chars() {
        if c.is_ascii_uppercase() && lower_before {
            out.push('_');
        }
        lower_before = c.is_ascii_lowercase();
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `SE` standard errors of the share of `q` in `n` draws.
fn bound(q: f64, n: u64) -> f64 {
    SE * (q * (1.0 - q) / n.max(1) as f64).sqrt()
}

/// The share of the asked lognormal below `ms`: Φ(ln(ms / p50) / σ), σ = ln(p99 / p50) / z₀.₉₉.
fn asked_cdf(ms: f64) -> f64 {
    /// The standard normal's 0.99 quantile.
    const Z99: f64 = 2.326_347_874_040_841;
    let sigma = (ASKED_MS.1 / ASKED_MS.0).ln() / Z99;
    let z = (ms / ASKED_MS.0).ln() / sigma;
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

/// Whether a sampled q-quantile `ms` of `n` draws is within sampling error of the asked one.
fn quantile_within(ms: f64, q: f64, n: u64) -> bool {
    (asked_cdf(ms) - q).abs() <= bound(q, n)
}

/// Calls per status, both sides named as the ground truth names them: (status, ghz, ground truth).
fn status_counts(seen: &Ghz, truth: &RouteTruth) -> Vec<(String, u64, u64)> {
    let mut rows: Vec<(String, u64, u64)> = Vec::new();
    let mut add = |name: String, ghz: u64, truth: u64| match rows.iter_mut().find(|r| r.0 == name) {
        Some(r) => {
            r.1 += ghz;
            r.2 += truth;
        }
        None => rows.push((name, ghz, truth)),
    };
    for (name, n) in &seen.statuses {
        add(code_name(name), *n, 0);
    }
    for (name, n) in &truth.outcomes {
        add(name.clone(), 0, *n);
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.1.max(r.2)));
    rows
}

/// One statico's calibration: each status's share and count, then the latency percentiles.
fn calibrated_rows(name: &str, seen: &Ghz, truth: &RouteTruth) -> String {
    let yes = |ok: bool| if ok { "yes" } else { "NO" };
    let n = seen.count;
    let mut out = format!(
        "  {:<17} {:<17} {:>7} {:>9} {:>7} {:>7} {:>9} {:>12} {:>6}\n",
        name,
        "status",
        "asked",
        "ghz share",
        "±3 se",
        "within",
        "ghz calls",
        "ground truth",
        "equal"
    );
    for (status, ghz, truth_n) in status_counts(seen, truth) {
        let asked = (ASKED_SHARES.iter())
            .find(|(s, _)| *s == status)
            .map_or(0.0, |x| x.1);
        let share = ghz as f64 / n.max(1) as f64;
        let b = bound(asked, n);
        let _ = writeln!(
            out,
            "  {:<17} {status:<17} {:>6.2}% {:>8.2}% {:>6.2}% {:>7} {ghz:>9} {truth_n:>12} {:>6}",
            "",
            asked * 100.0,
            share * 100.0,
            b * 100.0,
            yes((share - asked).abs() <= b),
            yes(ghz == truth_n)
        );
    }
    let _ = writeln!(
        out,
        "  {:<17} {:<17} {:>7} {:>9} {:>7} {:>9} {:>7}  F = the asked share below; within: |F - q| <= 3 se",
        "", "latency ms", "count", "p50", "F", "p99", "F"
    );
    let rows = [
        ("asked", ASKED_MS.0, ASKED_MS.1, n, false),
        (
            "drawn (truth)",
            truth.drawn.p50_us / 1e3,
            truth.drawn.p99_us / 1e3,
            truth.drawn.count,
            true,
        ),
        (
            "held (truth)",
            truth.held.p50_us / 1e3,
            truth.held.p99_us / 1e3,
            truth.held.count,
            true,
        ),
        ("ghz", seen.p50_ms, seen.p99_ms, n, true),
    ];
    for (source, p50, p99, count, judged) in rows {
        let verdict = if judged {
            format!(
                "p50 {}, p99 {}",
                yes(quantile_within(p50, 0.5, count)),
                yes(quantile_within(p99, 0.99, count))
            )
        } else {
            format!(
                "(± {:.3} at p50, ± {:.4} at p99)",
                bound(0.5, n),
                bound(0.99, n)
            )
        };
        let _ = writeln!(
            out,
            "  {:<17} {source:<17} {count:>7} {p50:>9.2} {:>7.3} {p99:>9.2} {:>7.4}  {verdict}",
            "",
            asked_cdf(p50),
            asked_cdf(p99)
        );
    }
    let _ = writeln!(
        out,
        "  {:<17} ghz - held: p50 {:+.3} ms, p99 {:+.3} ms (the client's and the transport's share); |held - drawn| p99 {:.3} ms",
        "",
        seen.p50_ms - truth.held.p50_us / 1e3,
        seen.p99_ms - truth.held.p99_us / 1e3,
        truth.off.p99_us / 1e3
    );
    out
}

fn calibrated_json(name: &str, seen: &Ghz, truth: &RouteTruth) -> Value {
    let quantiles = |q: Quantiles| json!({ "count": q.count, "p50": q.p50_us, "p99": q.p99_us });
    let statuses: Vec<Value> = (status_counts(seen, truth).into_iter())
        .map(|(status, ghz, truth)| json!({ "status": status, "ghz": ghz, "ground_truth": truth }))
        .collect();
    let n = seen.count;
    json!({
        "server": name,
        "ghz": { "count": n, "p50_ms": seen.p50_ms, "p99_ms": seen.p99_ms, "statuses": seen.statuses, "errors": seen.errors },
        "statuses": statuses,
        "counts_equal": status_counts(seen, truth).iter().all(|r| r.1 == r.2),
        "drawn_us": quantiles(truth.drawn),
        "held_us": quantiles(truth.held),
        "off_us": quantiles(truth.off),
        "within_sampling_error": {
            "shares": (status_counts(seen, truth).iter()).all(|(status, ghz, _)| {
                let asked = ASKED_SHARES.iter().find(|(s, _)| s == status).map_or(0.0, |x| x.1);
                (*ghz as f64 / n.max(1) as f64 - asked).abs() <= bound(asked, n)
            }),
            "drawn": quantile_within(truth.drawn.p50_us / 1e3, 0.5, truth.drawn.count)
                && quantile_within(truth.drawn.p99_us / 1e3, 0.99, truth.drawn.count),
            "ghz": quantile_within(seen.p50_ms, 0.5, n) && quantile_within(seen.p99_ms, 0.99, n),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_with_its_length() {
        assert_eq!(framed(b""), [0, 0, 0, 0, 0]);
        assert_eq!(framed(METHODS[0].message), b"\0\0\0\0\x05\x08\x01\x1a\x01x");
    }

    #[test]
    fn curl_shows_success_in_the_trailers() {
        let ok = "HTTP/2 200 \r\ncontent-type: application/grpc\r\n\r\ngrpc-status: 0\r\ngrpc-message: \r\n";
        assert!(grpc_ok(ok));
        assert!(!grpc_ok(&ok.replace("grpc-status: 0", "grpc-status: 14")));
        assert!(!grpc_ok("HTTP/2 404 \r\n\r\n"));
        assert!(!grpc_ok(""));
    }

    fn h2load(succeeded: u64, data_bytes: u64) -> h2load::Report {
        h2load::Report {
            rps: 1000.0,
            succeeded,
            data_bytes,
            ..h2load::Report::default()
        }
    }

    #[test]
    fn an_h2load_round_counts_calls_that_each_carried_a_reply() {
        let r = h2load_calls(&h2load(1000, 5000), 2000.0).unwrap();
        assert_eq!((r.requests, r.cpu_us_per_req, r.errors), (1000, 2.0, 0));
        assert!(h2load_calls(&h2load(1000, 4995), 2000.0).is_err());
        assert!(h2load_calls(&h2load(0, 0), 2000.0).is_err());
    }

    /// ghz 0.93.0's report (`details` and `histogram` cut), `-z 2s` against statico.
    const GHZ: &str = r#"{"date":"2026-11-27T22:30:00Z","endReason":"timeout","count":6163,
        "total":2020542953,"average":12890555,"fastest":1000000,"slowest":40000000,"rps":3050.17,
        "errorDistribution":{"rpc error: code = Unavailable desc = transport is closing":49,
        "rpc error: code = Canceled desc = grpc: the client connection is closing":1},
        "statusCodeDistribution":{"OK":6113,"Unavailable":49,"Canceled":1},
        "latencyDistribution":[{"percentage":10,"latency":2920100},{"percentage":50,"latency":3756560},
        {"percentage":99,"latency":21000000}],"details":[]}"#;

    #[test]
    fn ghz_reports_parse_and_tell_cut_off_calls() {
        let g = parse_ghz(GHZ).unwrap();
        assert_eq!(
            (g.count, g.status("OK"), g.status("Internal")),
            (6163, 6113, 0)
        );
        assert_eq!(g.cut_off(), 50);
        assert!(g.failures().is_empty());
        assert!((g.p50_ms - 3.75656).abs() < 1e-9 && (g.p99_ms - 21.0).abs() < 1e-9);
        assert!((g.total_s - 2.020542953).abs() < 1e-9);
        assert!(parse_ghz("{}").is_err());
    }

    #[test]
    fn ghz_names_statuses_as_grpc_codes() {
        assert_eq!(code_name("OK"), "OK");
        assert_eq!(code_name("Unavailable"), "UNAVAILABLE");
        assert_eq!(code_name("ResourceExhausted"), "RESOURCE_EXHAUSTED");
        assert_eq!(code_name("DeadlineExceeded"), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn the_asked_lognormal_has_its_p50_and_p99() {
        assert!((asked_cdf(ASKED_MS.0) - 0.5).abs() < 1e-12);
        assert!((asked_cdf(ASKED_MS.1) - 0.99).abs() < 1e-9);
        // 3 se of a median of 5000 draws: 0.0212 of probability, ±0.17 ms around 5 ms.
        assert!(quantile_within(5.15, 0.5, 5000));
        assert!(!quantile_within(5.25, 0.5, 5000));
        assert!(quantile_within(21.5, 0.99, 5000));
        assert!(!quantile_within(23.0, 0.99, 5000));
        assert!((bound(0.05, 5000) - 0.00925).abs() < 1e-4);
    }

    #[test]
    fn statuses_pair_ghz_and_the_ground_truth() {
        let g = Ghz {
            count: 100,
            statuses: vec![("OK".into(), 94), ("Unavailable".into(), 6)],
            ..Ghz::default()
        };
        let truth = RouteTruth {
            outcomes: vec![("UNAVAILABLE".into(), 6), ("OK".into(), 94)],
            ..RouteTruth::default()
        };
        assert_eq!(
            status_counts(&g, &truth),
            [("OK".into(), 94, 94), ("UNAVAILABLE".into(), 6, 6)]
        );
        let text = calibrated_rows("statico-tokio", &g, &truth);
        assert!(text.contains("UNAVAILABLE"), "{text}");
        assert!(!text.contains("   NO\n"), "{text}");
    }
}
