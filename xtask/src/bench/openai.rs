//! `cargo xtask bench --openai`: streamed chat completions, statico's OpenAI preset (`openai=on`, both
//! runtimes) against the mock people write by hand (FastAPI under uvicorn,
//! `bench/peers/fastapi/mock.py`), in one run: server CPU per token, and the time to first token
//! (TTFT) and between tokens (ITL) the client saw against the drawn ones.
//!
//! Every stream is [`TOKENS`] tokens, the first [`GAP_MS`] ms after the request and each next one
//! [`GAP_MS`] ms after the one before (statico `first=` and `gap=`; the mock sleeps
//! `asyncio.sleep(GAP)` before each token). [`STREAMS`] keep-alive connections each ask for one
//! stream after another ([`sse_load`]), `--duration` streams each, so that a round lasts about
//! `--duration` seconds. One worker each, pinned to the server CPUs: statico `-t 1`, uvicorn
//! `--workers 1` (one process, one event loop); the client, one thread, on the client CPUs. The servers take
//! turns over the rounds; medians with min–max.
//!
//! Tokens are counted by the client as they arrive (`data: [DONE]` is none). Server CPU per token =
//! the server's CPU time over the round (/proc utime + stime) / the round's tokens. Beside it: the
//! client's TTFT and ITL (p50 and p99 over the round's streams), statico's own lateness (the p99 of
//! `late_us` in its ground truth), and how long the server waited for its CPU.
//!
//! The target: statico's CPU per token at most [`TARGET`]× the mock's. `report.txt` (also printed)
//! holds the tables, `results.json` every round, `chart.svg` the CPU per token of each server.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::accuracy::StreamTruth;
use super::measure::{self, server_cpu_and_wait, Round, Stat};
use super::ratio::{verdicts, Report};
use super::report::{bar_chart, RunInfo};
use super::servers::{start_fastapi_mock, FASTAPI_MOCK};
use super::stream::stream_truth;
use crate::tools::net::{free_port, wait_port};
use crate::tools::procfs::machine;
use crate::tools::server::{start_statico, statico_bin, ServerUnderTest};
use crate::tools::sse_load::{self, Ask, Seen};

/// Tokens per stream, and the wait before each (the first's from the request).
const TOKENS: u32 = 50;
const GAP_MS: u32 = 20;
/// statico's route, and the path every server is asked.
const ROUTE: &str = "/v1/* openai=on model=bench first=20ms gap=20ms";
const TRUTH_ROUTE: &str = "/v1/*";
const PATH: &str = "/v1/chat/completions";
/// Streams open at once (one per connection).
const STREAMS: u32 = 200;
/// The target: statico's CPU per token at most this times the mock's.
const TARGET: f64 = 0.1;
/// The table's and the chart's one group.
const GROUP: &str = "chat streams c200";
/// The name the peer goes by (the report's ratios are against it).
const PEER: &str = "fastapi-uvicorn";

/// The request every server gets: a streamed chat completion of [`TOKENS`] tokens.
fn body() -> String {
    json!({ "model": "bench", "messages": [{ "role": "user", "content": "hi" }],
            "stream": true, "max_tokens": TOKENS })
    .to_string()
}

/// One round of one server: tokens in the place of requests (`rps` tokens/s, `requests` tokens,
/// `cpu_us_per_req` µs per token), and what the client saw of the streams' timing.
#[derive(Clone, Debug, Default)]
struct TokenRound {
    round: Round,
    streams: u64,
    tokens_per_stream: f64,
    ttft: Spread,
    itl: Spread,
    kernel_percent: f64,
    cpu_wait_ms: f64,
}

/// The p50 and p99 of some client-observed times, in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Spread {
    p50_ms: f64,
    p99_ms: f64,
}

impl Spread {
    fn of_us(values: &[f64]) -> Spread {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            v.get(((v.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .map_or(0.0, |us| us / 1e3)
        };
        Spread {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
        }
    }
}

/// Runs the rounds; writes `report.txt`, `results.json` and `chart.svg` into `dir` and returns the
/// report.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    let mut report = Report::against(PEER, heading(run));
    let mut skipped = Vec::new();
    let (servers, metrics): (Vec<_>, Vec<_>) = start_servers(root, dir, run, &mut skipped)?
        .into_iter()
        .unzip();
    eprintln!(
        "bench: {GROUP} ({} round(s) of {} streams)",
        run.rounds,
        requests(run.duration)
    );
    let each: Vec<usize> = (0..servers.len()).collect();
    let rows = measure::interleave(&each, run.rounds, |&i| round(&servers[i], run))?;
    let truths: Vec<Option<StreamTruth>> = (servers.iter().zip(&metrics))
        .map(|(s, m)| stream_truth(s, *m, TRUTH_ROUTE))
        .collect();
    add_tables(&mut report, &servers, &rows, &truths);
    let target = target(&mut report);
    for (name, reason) in &skipped {
        let _ = writeln!(report.text, "  not measured: {name}: {reason}");
    }
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let results = results(&servers, &rows, &truths);
    let doc = json!({
        "mode": "openai",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "statico": statico_bin(root).display().to_string(),
        "peer": FASTAPI_MOCK,
        "stream": { "tokens": TOKENS, "first_ms": GAP_MS, "gap_ms": GAP_MS, "statico_route": ROUTE,
                    "path": PATH, "body": body(), "concurrent": STREAMS },
        "unit": "in each round, rps is tokens/s, requests are tokens and cpu_us_per_req is server CPU µs per token",
        "results": results,
        "targets": target,
        "skipped": skipped.iter().map(|(n, r)| json!({ "server": n, "reason": r })).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    let bars: Vec<Vec<f64>> = rows.iter().map(|r| vec![cpu(r).median]).collect();
    let title = format!(
        "OpenAI chat streams, {STREAMS} at once x {TOKENS} tokens {GAP_MS} ms apart: server CPU µs per token, lower is better"
    );
    bar_chart(&dir.join("chart.svg"), &title, &[GROUP], &names, &bars)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(report.text)
}

fn heading(run: &RunInfo) -> String {
    format!(
        "openai: {STREAMS} streamed chat completions at once, {TOKENS} tokens each, first {GAP_MS} ms after the request \
         and {GAP_MS} ms apart; one server worker on CPU {} (statico -t 1, uvicorn --workers 1), the client \
         (one thread, epoll) on CPU {}, {} round(s) of {} streams, medians (min-max)\n\
         statico --route '{ROUTE}'; {FASTAPI_MOCK}; POST {PATH} {}\n",
        run.server_cpus,
        run.client_cpus,
        run.rounds,
        requests(run.duration),
        body()
    )
}

/// Streams per round: `duration` after one another on each of the [`STREAMS`] connections (a
/// stream lasts about a second).
fn requests(duration: u64) -> u64 {
    u64::from(STREAMS) * duration.max(1)
}

/// statico on each runtime (with its metrics port), and the mock, each asked for one stream first.
/// A statico that cannot start or stream fails the run; the mock is left out, with the reason in
/// `skipped`.
fn start_servers(
    root: &Path,
    dir: &Path,
    run: &RunInfo,
    skipped: &mut Vec<(String, String)>,
) -> Result<Vec<(ServerUnderTest, Option<u16>)>> {
    let mut servers = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let metrics = free_port()?;
        let metrics_at = format!("127.0.0.1:{metrics}");
        let flags = ["-t", "1", "--runtime", runtime, "--route", ROUTE];
        let flags: Vec<&str> = flags
            .into_iter()
            .chain(["--metrics", &metrics_at])
            .collect();
        let server = start_statico(
            root,
            &format!("statico-{runtime}"),
            Some(run.server_cpus),
            &flags,
        )?;
        wait_port(metrics)?;
        sampled(&server, run)?;
        servers.push((server, Some(metrics)));
    }
    let mock = start_fastapi_mock(root, dir, run.server_cpus, GAP_MS)
        .and_then(|s| sampled(&s, run).map(|()| s));
    match mock {
        Ok(s) => servers.push((s, None)),
        Err(e) => skipped.push((PEER.to_string(), format!("{e:#}"))),
    }
    Ok(servers)
}

/// `s` asked for one stream, which must have its [`TOKENS`] tokens.
fn sampled(s: &ServerUnderTest, run: &RunInfo) -> Result<()> {
    let seen = sse_load::run(&ask(s, run, 1, 1))?;
    if seen.failed > 0 || seen.events != u64::from(TOKENS) {
        bail!(
            "{}'s stream: {} tokens, {}",
            s.name,
            seen.events,
            seen.first_error.unwrap_or_default()
        );
    }
    eprintln!("  {:<17} streams {} tokens", s.name, seen.events);
    Ok(())
}

fn ask(s: &ServerUnderTest, run: &RunInfo, conns: usize, per_conn: usize) -> Ask {
    Ask {
        cpus: run.client_cpus.to_string(),
        port: s.port,
        path: PATH.to_string(),
        body: body(),
        conns,
        per_conn,
    }
}

/// One round against `s`: every connection's streams to their end, the server's CPU meanwhile.
fn round(s: &ServerUnderTest, run: &RunInfo) -> Result<TokenRound> {
    let ask = ask(s, run, STREAMS as usize, run.duration.max(1) as usize);
    let (seen, cpu, waited_ms) = server_cpu_and_wait(s.pid(), || sse_load::run(&ask))?;
    if seen.events == 0 {
        bail!(
            "no token from {}: {}",
            s.name,
            seen.first_error.unwrap_or_default()
        );
    }
    let r = token_round(&seen, cpu, waited_ms);
    eprintln!(
        "  {:<17} {:>7.0} tokens/s {:>7.3} µs/token ({:.0}% kernel)  TTFT p99 {:.2} ms  ITL p99 {:.2} ms  failed {}",
        s.name, r.round.rps, r.round.cpu_us_per_req, r.kernel_percent, r.ttft.p99_ms, r.itl.p99_ms, seen.failed
    );
    Ok(r)
}

/// A round's figures from what the client saw, the server's CPU over it and its wait for the CPU.
fn token_round(seen: &Seen, cpu: measure::CpuUsed, cpu_wait_ms: f64) -> TokenRound {
    let tokens = seen.events as f64;
    TokenRound {
        round: Round {
            rps: tokens / seen.elapsed.as_secs_f64().max(1e-9),
            requests: seen.events,
            cpu_us_per_req: cpu.total_us() / tokens.max(1.0),
            errors: seen.failed,
            ..Round::default()
        },
        streams: seen.streams,
        tokens_per_stream: tokens / seen.streams.max(1) as f64,
        ttft: Spread::of_us(&seen.ttft_us),
        itl: Spread::of_us(&seen.itl_us),
        kernel_percent: 100.0 * cpu.system_us / cpu.total_us().max(1e-9),
        cpu_wait_ms,
    }
}

/// The median (and range) server CPU per token of `rounds`.
fn cpu(rounds: &[TokenRound]) -> Stat {
    Stat::of(rounds.iter().map(|r| r.round.cpu_us_per_req))
}

/// The CPU table against the mock, then the streams' timing against the drawn one.
fn add_tables(
    report: &mut Report,
    servers: &[ServerUnderTest],
    rows: &[Vec<TokenRound>],
    truths: &[Option<StreamTruth>],
) {
    let pairs: Vec<Vec<(f64, f64)>> = (rows.iter())
        .map(|r| (r.iter().map(|x| (x.round.rps, x.round.cpu_us_per_req))).collect())
        .collect();
    let streams = rows
        .first()
        .and_then(|r| r.first())
        .map_or(0, |r| r.streams);
    let title = format!("{GROUP} ({STREAMS} keep-alive connections, {streams} streams a round)");
    report.table(GROUP, &title, "tokens/s", "µs CPU/token", servers, &pairs);
    let _ = writeln!(
        report.text,
        "\n  client-observed, drawn TTFT = ITL = {GAP_MS} ms (p50 / p99, ms)\n  {:<17} {:>13} {:>15} {:>15} {:>12} {:>9} {:>12} {:>7}",
        "", "tokens/stream", "TTFT p50/p99", "ITL p50/p99", "late p99 ms", "kernel %", "cpu wait ms", "failed"
    );
    for ((s, r), truth) in servers.iter().zip(rows).zip(truths) {
        let of = |f: fn(&TokenRound) -> f64| Stat::of(r.iter().map(f)).median;
        let late = truth.map_or("-".into(), |t| format!("{:.3}", t.late.p99_us / 1e3));
        let failed: u64 = r.iter().map(|x| x.round.errors).sum();
        let pair = |a: f64, b: f64| format!("{a:.2} / {b:.2}");
        let _ = writeln!(
            report.text,
            "  {:<17} {:>13.2} {:>15} {:>15} {late:>12} {:>9.0} {:>12.0} {failed:>7}",
            s.name,
            of(|x| x.tokens_per_stream),
            pair(of(|x| x.ttft.p50_ms), of(|x| x.ttft.p99_ms)),
            pair(of(|x| x.itl.p50_ms), of(|x| x.itl.p99_ms)),
            of(|x| x.kernel_percent),
            of(|x| x.cpu_wait_ms),
        );
    }
}

/// The target, appended to the report; returned for results.json.
fn target(report: &mut Report) -> Value {
    let ratios = report.ratios(GROUP).to_vec();
    let said = verdicts(&ratios, TARGET, &format!("{PEER} not measured"));
    let _ = writeln!(
        report.text,
        "\ntargets\n  statico CPU/token <= {TARGET:.1}x {PEER}'s: {said}"
    );
    json!([{ "scenario": GROUP, "target": TARGET, "vs": PEER, "ratios": ratios }])
}

/// Each server's command, ground truth, medians, min–max and every round.
fn results(
    servers: &[ServerUnderTest],
    rows: &[Vec<TokenRound>],
    truths: &[Option<StreamTruth>],
) -> Vec<Value> {
    (servers.iter().zip(rows).zip(truths))
        .map(|((s, r), truth)| {
            let plain: Vec<Round> = r.iter().map(|x| x.round.clone()).collect();
            let map = measure::stream_rounds_json(
                &plain,
                r.iter().map(|x| {
                    json!({
                        "streams": x.streams,
                        "tokens_per_stream": x.tokens_per_stream,
                        "ttft_ms": { "p50": x.ttft.p50_ms, "p99": x.ttft.p99_ms },
                        "itl_ms": { "p50": x.itl.p50_ms, "p99": x.itl.p99_ms },
                        "kernel_percent": x.kernel_percent,
                        "cpu_wait_ms": x.cpu_wait_ms,
                    })
                }),
            );
            let truth = truth.map(StreamTruth::to_json);
            let mut doc = json!({ "server": s.name, "command": s.command, "ground_truth": truth });
            if let Value::Object(o) = &mut doc {
                o.extend(map);
            }
            doc
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_rounds_cpu_is_per_token_the_client_counted() {
        let seen = Seen {
            streams: 4,
            events: 200,
            ttft_us: vec![20_000.0, 21_000.0, 20_500.0, 40_000.0],
            itl_us: vec![20_000.0; 196],
            elapsed: Duration::from_secs(2),
            ..Seen::default()
        };
        let cpu = measure::CpuUsed {
            user_us: 500.0,
            system_us: 1500.0,
        };
        let r = token_round(&seen, cpu, 3.0);
        assert_eq!((r.round.requests, r.round.cpu_us_per_req), (200, 10.0));
        assert_eq!((r.round.rps, r.tokens_per_stream), (100.0, 50.0));
        assert_eq!((r.ttft.p50_ms, r.ttft.p99_ms), (20.5, 40.0));
        assert_eq!((r.itl.p50_ms, r.kernel_percent), (20.0, 75.0));
        assert_eq!(Spread::of_us(&[]), Spread::default());
    }

    #[test]
    fn both_are_asked_for_the_same_stream() {
        assert_eq!(
            ROUTE,
            format!("{TRUTH_ROUTE} openai=on model=bench first={GAP_MS}ms gap={GAP_MS}ms")
        );
        assert!(body().contains(&format!("\"max_tokens\":{TOKENS}")));
        assert_eq!(requests(6), 1200);
    }
}
