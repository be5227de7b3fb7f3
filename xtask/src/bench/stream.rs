//! `cargo xtask bench --stream`: streamed answers (server-sent events), statico's `stream=sse` route
//! on both runtimes against go-httpbin's `/sse`, in one run: server CPU per event.
//!
//! Every stream is [`EVENTS`] events [`GAP_MS`] ms apart (about 1 s): statico serves [`ROUTE`],
//! go-httpbin `/sse?count=50&duration=980ms` (it pauses duration / (count − 1) between events).
//! h2load (one thread, pinned to the client CPUs) keeps [`CONCURRENT`] streams open at once, 50 000
//! events/s, and asks for `--duration` streams per place, so that a round lasts about `--duration`
//! seconds and ends with every stream whole ([`LOADS`]):
//! - HTTP/1.1 (`--h1 -c 1000`): statico on both runtimes, and go-httpbin;
//! - HTTP/2 (h2c by prior knowledge, `-c 10 -m 100`): statico `--http2` (go-httpbin serves no h2c).
//!
//! One worker each, pinned to the server CPUs: statico `-t 1`, go-httpbin with `GOMAXPROCS=1` (one Go
//! scheduler thread: a one-core comparison) and `-log-level OFF`. Per load the servers are started
//! afresh and interleaved over the rounds; medians with min–max.
//!
//! Events are counted, not assumed: before its rounds each server's stream is read once with curl
//! and its events counted ([`sse_events`]); a round's events are h2load's body bytes over that
//! sample's bytes per event ([`Sample::events_in`]), shown per answer (50.0 when every stream was
//! whole). Server CPU per event = the server's CPU time over the round (/proc utime + stime) / the
//! round's events; with the share of it spent in the kernel (stime: over loopback, a send carries
//! the receiving side's TCP too). Beside it: h2load's mean and longest stream (980 ms due), and
//! statico's own lateness, the p99 of `late_us` in its ground truth (`/ground-truth.json` on
//! `--metrics`: how late each event was handed to the kernel against its due time), and how long
//! the server waited for its CPU (other work there: what lateness the machine, not the server, made).
//!
//! The target: statico's CPU per event over HTTP/2 at most [`TARGET_H2`]× its CPU per event over
//! HTTP/1.1. `report.txt` (also printed) holds the tables, `results.json` every round, `chart.svg`
//! the CPU per event of each server and load.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::accuracy::{parse_truth, StreamTruth};
use super::measure::{self, server_cpu_and_wait, CpuUsed, Round};
use super::ratio::{ratios_between, verdicts, Report};
use super::report::{bar_chart, RunInfo};
use super::servers::start_go_httpbin;
use crate::setup::GO_HTTPBIN_VERSION;
use crate::tools::h2load;
use crate::tools::net::{free_port, http_get, wait_port};
use crate::tools::procfs::machine;
use crate::tools::server::{start_statico, statico_bin, ServerUnderTest};

/// Events per stream, and the gap between two events.
const EVENTS: u32 = 50;
const GAP_MS: u32 = 20;
/// statico's route for the stream.
const ROUTE: &str = "/sse stream=sse events=50 gap=20ms";
/// The path every server is asked.
const PATH: &str = "/sse";
/// Streams open at once.
const CONCURRENT: u32 = 1000;
/// The target: statico's CPU per event over HTTP/2 at most this times over HTTP/1.1.
const TARGET_H2: f64 = 1.0;
/// How long h2load waits on a silent connection before it gives up on it, in seconds.
const IDLE_SECS: u64 = 10;

/// One way of carrying [`CONCURRENT`] streams.
#[derive(Clone, Copy, Debug)]
struct Load {
    /// The table's and the chart's name.
    group: &'static str,
    /// HTTP/2 (h2c by prior knowledge), else HTTP/1.1.
    h2: bool,
    /// h2load's connections, and streams at once on each.
    conns: u32,
    streams: u32,
}

const LOADS: [Load; 2] = [
    Load {
        group: "HTTP/1.1 c1000",
        h2: false,
        conns: CONCURRENT,
        streams: 1,
    },
    Load {
        group: "HTTP/2 c10 m100",
        h2: true,
        conns: CONCURRENT / 100,
        streams: 100,
    },
];

/// go-httpbin's query for the same stream: [`EVENTS`] events over (EVENTS − 1) gaps.
fn httpbin_query() -> String {
    format!("count={EVENTS}&duration={}ms", (EVENTS - 1) * GAP_MS)
}

/// One server's stream as curl read it: its body's bytes and events.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub bytes: u64,
    pub events: u64,
}

impl Sample {
    /// The events in `data_bytes` of bodies: bytes over this whole stream's bytes per event.
    pub fn events_in(self, data_bytes: u64) -> f64 {
        data_bytes as f64 * self.events as f64 / self.bytes as f64
    }
}

/// The events of a server-sent event stream: an event ends at a blank line after at least one
/// `data` line (an event without data, or a comment, is none: EventSource dispatches nothing).
pub fn sse_events(body: &str) -> u64 {
    let mut events = 0;
    let mut data = false;
    for line in body.lines() {
        if line.is_empty() {
            events += u64::from(data);
            data = false;
        } else if line == "data" || line.starts_with("data:") {
            data = true;
        }
    }
    events
}

/// What a server of one load is asked for: its stream's URL, the stream as sampled, and statico's
/// metrics port.
struct Asked {
    url: String,
    sample: Sample,
    metrics: Option<u16>,
}

/// One round of one server: the figures every mode keeps, with events in the place of requests
/// (`rps` events/s, `requests` events, `cpu_us_per_req` µs per event), and the streams' own.
#[derive(Clone, Debug, Default)]
struct StreamRound {
    round: Round,
    answers: u64,
    events_per_answer: f64,
    stream_mean_ms: f64,
    stream_max_ms: f64,
    /// The share of the server's CPU time spent in the kernel (over loopback, the sending side's
    /// TCP and the receiving side's both), in %.
    kernel_percent: f64,
    /// How long the server's threads waited for a CPU over the round (other work on its CPU), in ms.
    cpu_wait_ms: f64,
}

/// Runs both loads; writes `report.txt`, `results.json` and `chart.svg` into `dir` and returns the
/// report.
pub fn run(root: &Path, dir: &Path, run: &RunInfo) -> Result<String> {
    let mut report = Report::against("go-httpbin", heading(run));
    let mut loads = Vec::new();
    let mut medians = Vec::new();
    let mut skipped = Vec::new();
    for load in &LOADS {
        let (servers, asked): (Vec<_>, Vec<_>) =
            start_servers(root, dir, run.server_cpus, load, &mut skipped)?
                .into_iter()
                .unzip();
        eprintln!(
            "bench: {} ({} round(s) of {} streams)",
            load.group,
            run.rounds,
            requests(run.duration)
        );
        let each: Vec<usize> = (0..servers.len()).collect();
        let rows = measure::interleave(&each, run.rounds, |&i| {
            round(&servers[i], &asked[i], load, run)
        })?;
        let truths: Vec<Option<StreamTruth>> = (servers.iter().zip(&asked))
            .map(|(s, a)| stream_truth(s, a.metrics, PATH))
            .collect();
        add_tables(&mut report, load, &servers, &asked, &rows, &truths);
        for (s, r) in servers.iter().zip(&rows) {
            medians.push((load.group, s.name.clone(), cpu(r).median));
        }
        loads.push(load_json(load, run, &servers, &asked, &rows, &truths));
    }
    let targets = targets(&mut report, &medians);
    for (name, reason) in &skipped {
        let _ = writeln!(report.text, "  not measured: {name}: {reason}");
    }
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let doc = results_json(root, run, loads, targets, &skipped);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    chart(&dir.join("chart.svg"), &medians)?;
    eprintln!("bench: wrote {}", dir.display());
    Ok(report.text)
}

/// results.json: how the run was made, every load's results, the target, and what was not measured.
fn results_json(
    root: &Path,
    run: &RunInfo,
    loads: Vec<Value>,
    targets: Value,
    skipped: &[(String, String)],
) -> Value {
    json!({
        "mode": "stream",
        "machine": machine(),
        "placement": { "server_cpus": run.server_cpus, "client_cpus": run.client_cpus },
        "duration_s": run.duration,
        "rounds": run.rounds,
        "statico": statico_bin(root).display().to_string(),
        "go_httpbin": GO_HTTPBIN_VERSION,
        "stream": { "events": EVENTS, "gap_ms": GAP_MS, "statico_route": ROUTE,
                    "go_httpbin_query": httpbin_query(), "concurrent": CONCURRENT },
        "unit": "in each round, rps is events/s, requests are events and cpu_us_per_req is server CPU µs per event",
        "loads": loads,
        "targets": targets,
        "skipped": skipped.iter().map(|(n, r)| json!({ "server": n, "reason": r })).collect::<Vec<_>>(),
    })
}

fn heading(run: &RunInfo) -> String {
    format!(
        "stream: {CONCURRENT} SSE streams at once, {EVENTS} events {GAP_MS} ms apart each; one server worker on CPU {} \
         (statico -t 1, go-httpbin GOMAXPROCS=1), h2load -t 1 on CPU {}, {} round(s) of {} streams, medians (min-max)\n\
         statico --route '{ROUTE}'; go-httpbin {GO_HTTPBIN_VERSION} {PATH}?{}\n",
        run.server_cpus,
        run.client_cpus,
        run.rounds,
        requests(run.duration),
        httpbin_query()
    )
}

/// Streams per round: `duration` after one another in each of the [`CONCURRENT`] places (a stream
/// lasts about a second).
fn requests(duration: u64) -> u64 {
    u64::from(CONCURRENT) * duration.max(1)
}

/// statico's flags for `load` on `runtime`, its ground truth on the metrics listener `metrics`.
fn statico_flags(runtime: &str, load: &Load, metrics: &str) -> Vec<String> {
    let mut flags: Vec<String> = ["-t", "1", "--runtime", runtime, "--route", ROUTE]
        .map(String::from)
        .into();
    flags.extend(["--metrics".into(), metrics.into()]);
    if load.h2 {
        flags.push("--http2".into());
    }
    flags
}

/// statico on each runtime, and go-httpbin over HTTP/1.1, each with its stream sampled. A statico
/// that cannot start or stream fails the run; go-httpbin is left out, with the reason in `skipped`.
fn start_servers(
    root: &Path,
    dir: &Path,
    cpus: &str,
    load: &Load,
    skipped: &mut Vec<(String, String)>,
) -> Result<Vec<(ServerUnderTest, Asked)>> {
    let mut servers = Vec::new();
    for runtime in ["io-uring", "tokio"] {
        let name = format!("statico-{runtime}");
        let metrics = free_port()?;
        let flags = statico_flags(runtime, load, &format!("127.0.0.1:{metrics}"));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let server = start_statico(root, &name, Some(cpus), &flags)?;
        wait_port(metrics)?;
        let url = format!("http://127.0.0.1:{}{PATH}", server.port);
        servers.push(measured(server, url, load, Some(metrics))?);
    }
    if !load.h2 {
        let started = start_go_httpbin(dir, cpus).and_then(|server| {
            let url = format!("http://127.0.0.1:{}{PATH}?{}", server.port, httpbin_query());
            measured(server, url, load, None)
        });
        match started {
            Ok(m) => servers.push(m),
            Err(e) => skipped.push((format!("go-httpbin ({})", load.group), format!("{e:#}"))),
        }
    }
    Ok(servers)
}

/// `server` with its stream at `url` read once by curl (over HTTP/2 for an HTTP/2 load).
fn measured(
    server: ServerUnderTest,
    url: String,
    load: &Load,
    metrics: Option<u16>,
) -> Result<(ServerUnderTest, Asked)> {
    let sample = sample(&url, load.h2).with_context(|| format!("{}'s stream", server.name))?;
    eprintln!(
        "  {:<17} streams {} events in {} bytes",
        server.name, sample.events, sample.bytes
    );
    let asked = Asked {
        url,
        sample,
        metrics,
    };
    Ok((server, asked))
}

/// One stream at `url`, read to its end by curl.
fn sample(url: &str, h2: bool) -> Result<Sample> {
    let mut curl = Command::new("curl");
    curl.args(["-sSN", "--fail", "--max-time", "10"]);
    if h2 {
        curl.arg("--http2-prior-knowledge");
    }
    let out = curl.arg(url).output().context("run curl")?;
    if !out.status.success() {
        bail!(
            "curl {url}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let body = String::from_utf8_lossy(&out.stdout);
    let sample = Sample {
        bytes: body.len() as u64,
        events: sse_events(&body),
    };
    if sample.events == 0 {
        bail!("no event in {url}'s answer: {}", body.trim());
    }
    Ok(sample)
}

/// One round of `load` against `s`: h2load to the end of every stream, the server's CPU meanwhile.
fn round(s: &ServerUnderTest, a: &Asked, load: &Load, run: &RunInfo) -> Result<StreamRound> {
    let mut cmd = h2load::counted_command(
        Some(run.client_cpus),
        (load.conns, load.streams),
        requests(run.duration),
        !load.h2,
        IDLE_SECS,
        &a.url,
    );
    let (report, cpu, waited_ms) = server_cpu_and_wait(s.pid(), || h2load::run(&mut cmd))?;
    if report.succeeded == 0 || report.data_bytes == 0 {
        bail!("h2load got no stream from {}", a.url);
    }
    let r = stream_round(&report, cpu, waited_ms, a.sample);
    eprintln!(
        "  {:<17} {:>8.0} events/s {:>7.3} µs/event ({:.0}% kernel)  {:.1} events/answer  stream mean {:.0} ms",
        s.name, r.round.rps, r.round.cpu_us_per_req, r.kernel_percent, r.events_per_answer, r.stream_mean_ms
    );
    Ok(r)
}

/// A round's figures from h2load's report, the server's CPU over it and its wait for the CPU, and
/// the server's sample.
fn stream_round(
    report: &h2load::Report,
    cpu: CpuUsed,
    cpu_wait_ms: f64,
    sample: Sample,
) -> StreamRound {
    let events = sample.events_in(report.data_bytes);
    let answers = report.succeeded;
    let non_2xx = report.status_4xx + report.status_5xx;
    StreamRound {
        round: Round {
            rps: report.rps * events / answers as f64,
            requests: events.round() as u64,
            cpu_us_per_req: cpu.total_us() / events,
            errors: report.errored + report.timeout + non_2xx,
            non_2xx,
            ..Round::default()
        },
        answers,
        events_per_answer: events / answers as f64,
        stream_mean_ms: report.request_mean_ms,
        stream_max_ms: report.request_max_ms,
        kernel_percent: 100.0 * cpu.system_us / cpu.total_us().max(1e-9),
        cpu_wait_ms,
    }
}

/// The median (and range) server CPU per event of `rounds`.
fn cpu(rounds: &[StreamRound]) -> measure::Stat {
    Round::cpu(&plain(rounds))
}

fn plain(rounds: &[StreamRound]) -> Vec<Round> {
    rounds.iter().map(|r| r.round.clone()).collect()
}

/// statico's stream ground truth for `route`, read from its metrics listener `metrics`, or `None`
/// for a peer (no metrics) or where statico has none (its failure is said on stderr).
pub fn stream_truth(s: &ServerUnderTest, metrics: Option<u16>, route: &str) -> Option<StreamTruth> {
    let truth = http_get(metrics?, "/ground-truth.json").and_then(|body| parse_truth(&body));
    match truth {
        Ok(routes) => routes.into_iter().find(|t| t.route == route)?.stream,
        Err(e) => {
            eprintln!("bench: no ground truth from {}: {e:#}", s.name);
            None
        }
    }
}

/// A load's tables: events/s and CPU per event against go-httpbin, then the streams.
fn add_tables(
    report: &mut Report,
    load: &Load,
    servers: &[ServerUnderTest],
    asked: &[Asked],
    rows: &[Vec<StreamRound>],
    truths: &[Option<StreamTruth>],
) {
    let pairs: Vec<Vec<(f64, f64)>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|x| (x.round.rps, x.round.cpu_us_per_req))
                .collect()
        })
        .collect();
    let title = format!(
        "{} (h2load{} -c {} -m {}, {} streams a round)",
        load.group,
        if load.h2 { "" } else { " --h1" },
        load.conns,
        load.streams,
        rows.first()
            .and_then(|r| r.first())
            .map_or(0, |r| r.answers)
    );
    report.table(
        load.group,
        &title,
        "events/s",
        "µs CPU/event",
        servers,
        &pairs,
    );
    let _ = writeln!(
        report.text,
        "  {:<17} {:>13} {:>14} {:>13} {:>12} {:>9} {:>12} {:>7}",
        "",
        "events/answer",
        "stream mean ms",
        "stream max ms",
        "late p99 ms",
        "kernel %",
        "cpu wait ms",
        "failed"
    );
    for (((s, a), r), truth) in servers.iter().zip(asked).zip(rows).zip(truths) {
        let of = |f: fn(&StreamRound) -> f64| measure::Stat::of(r.iter().map(f)).median;
        let late = match (a.metrics, truth) {
            (None, _) => "-".to_string(),
            (Some(_), Some(t)) if t.late.count > 0 => format!("{:.3}", t.late.p99_us / 1e3),
            (Some(_), _) => "n/a".to_string(),
        };
        let failed: u64 = r.iter().map(|x| x.round.errors).sum();
        let _ = writeln!(
            report.text,
            "  {:<17} {:>13.2} {:>14.1} {:>13.1} {late:>12} {:>9.0} {:>12.0} {failed:>7}",
            s.name,
            of(|x| x.events_per_answer),
            of(|x| x.stream_mean_ms),
            of(|x| x.stream_max_ms),
            of(|x| x.kernel_percent),
            of(|x| x.cpu_wait_ms),
        );
    }
}

/// A load in results.json: each server's command, sample, ground truth, medians, min–max and
/// every round.
fn load_json(
    load: &Load,
    run: &RunInfo,
    servers: &[ServerUnderTest],
    asked: &[Asked],
    rows: &[Vec<StreamRound>],
    truths: &[Option<StreamTruth>],
) -> Value {
    let h2load = h2load::counted_command(
        Some(run.client_cpus),
        (load.conns, load.streams),
        requests(run.duration),
        !load.h2,
        IDLE_SECS,
        "URL",
    );
    let h2load: Vec<String> = std::iter::once(h2load.get_program())
        .chain(h2load.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let results: Vec<Value> = (servers.iter().zip(asked).zip(rows).zip(truths))
        .map(|(((s, a), r), truth)| {
            let map = measure::stream_rounds_json(
                &plain(r),
                r.iter().map(|x| {
                    json!({
                        "answers": x.answers,
                        "events_per_answer": x.events_per_answer,
                        "stream_mean_ms": x.stream_mean_ms,
                        "stream_max_ms": x.stream_max_ms,
                        "kernel_percent": x.kernel_percent,
                        "cpu_wait_ms": x.cpu_wait_ms,
                    })
                }),
            );
            let truth = truth.map(StreamTruth::to_json);
            let mut doc = json!({ "server": s.name, "command": s.command, "url": a.url,
                "sample": { "bytes": a.sample.bytes, "events": a.sample.events },
                "ground_truth": truth });
            if let Value::Object(o) = &mut doc {
                o.extend(map);
            }
            doc
        })
        .collect();
    json!({ "load": load.group, "http2": load.h2, "connections": load.conns,
            "streams_per_connection": load.streams, "h2load": h2load.join(" "), "results": results })
}

/// Each statico's CPU per event over HTTP/2 divided by its own over HTTP/1.1.
fn h2_over_h1(medians: &[(&str, String, f64)]) -> Vec<(String, f64)> {
    ratios_between(medians, LOADS[1].group, LOADS[0].group)
}

/// The target, appended to the report; returned for results.json.
fn targets(report: &mut Report, medians: &[(&str, String, f64)]) -> Value {
    let ratios = h2_over_h1(medians);
    let said = verdicts(&ratios, TARGET_H2, "no statico measured over both");
    let _ = writeln!(
        report.text,
        "\ntargets\n  statico CPU/event over HTTP/2 <= {TARGET_H2:.1}x over HTTP/1.1: {said}"
    );
    json!([{ "scenario": LOADS[1].group, "target": TARGET_H2, "vs": LOADS[0].group, "ratios": ratios }])
}

/// `chart.svg`: each server's CPU per event (median) per load; go-httpbin has no HTTP/2 bar.
fn chart(path: &Path, medians: &[(&str, String, f64)]) -> Result<()> {
    let mut servers: Vec<&str> = Vec::new();
    for (_, s, _) in medians {
        if !servers.contains(&s.as_str()) {
            servers.push(s);
        }
    }
    let groups: Vec<&str> = LOADS.iter().map(|l| l.group).collect();
    let bars: Vec<Vec<f64>> = servers
        .iter()
        .map(|server| {
            (groups.iter())
                .map(|g| {
                    (medians.iter())
                        .find(|(mg, s, _)| mg == g && s == server)
                        .map_or(0.0, |m| m.2)
                })
                .collect()
        })
        .collect();
    let title = format!(
        "SSE, {CONCURRENT} streams x {EVENTS} events {GAP_MS} ms apart: server CPU µs per event, lower is better"
    );
    bar_chart(path, &title, &groups, &servers, &bars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_a_blank_line_after_data() {
        let statico = "id: 0\ndata: {\"i\":0}\n\nid: 1\ndata: {\"i\":1}\n\n";
        assert_eq!(sse_events(statico), 2);
        let httpbin = "event: ping\ndata: {\"id\":0,\"timestamp\":1795795707873}\n\n\
                       event: ping\ndata: {\"id\":1,\"timestamp\":1795795707894}\n\n";
        assert_eq!(sse_events(httpbin), 2);
        // A comment and an id alone (no event), one event of two data lines with CRLF line ends,
        // one of empty data (`data` alone), and a last one without its blank line (cut: not
        // dispatched).
        let mixed = ": hi\r\n\r\ndata: a\r\ndata: b\r\n\r\nid: 7\n\ndata\n\ndata: cut\n";
        assert_eq!(sse_events(mixed), 2);
        assert_eq!(sse_events(""), 0);
    }

    #[test]
    fn a_rounds_events_are_its_bytes_over_the_samples_bytes_per_event() {
        // go-httpbin: 50 events in 2740 bytes; 4 whole streams.
        let sample = Sample {
            bytes: 2740,
            events: 50,
        };
        assert_eq!(sample.events_in(10960), 200.0);
        let report = h2load::Report {
            rps: 2.0,
            succeeded: 4,
            data_bytes: 10960,
            request_mean_ms: 992.7,
            request_max_ms: 993.0,
            ..h2load::Report::default()
        };
        let cpu = CpuUsed {
            user_us: 500.0,
            system_us: 1500.0,
        };
        let r = stream_round(&report, cpu, 3.0, sample);
        assert_eq!((r.answers, r.events_per_answer), (4, 50.0));
        assert_eq!((r.round.requests, r.round.cpu_us_per_req), (200, 10.0));
        assert_eq!((r.round.rps, r.stream_mean_ms), (100.0, 992.7));
        assert_eq!((r.kernel_percent, r.cpu_wait_ms), (75.0, 3.0));
    }

    #[test]
    fn both_ask_for_the_same_stream() {
        assert_eq!(httpbin_query(), "count=50&duration=980ms");
        assert_eq!(
            ROUTE,
            format!("{PATH} stream=sse events={EVENTS} gap={GAP_MS}ms")
        );
        assert!(LOADS.iter().all(|l| l.conns * l.streams == CONCURRENT));
        assert_eq!(requests(6), 6000);
        assert_eq!(requests(0), 1000);
        let h2 = statico_flags("tokio", &LOADS[1], "127.0.0.1:9").join(" ");
        assert_eq!(
            h2,
            format!("-t 1 --runtime tokio --route {ROUTE} --metrics 127.0.0.1:9 --http2")
        );
        assert!(!statico_flags("tokio", &LOADS[0], "x").contains(&"--http2".to_string()));
    }

    #[test]
    fn the_target_is_each_staticos_http2_over_its_http1() {
        let (h1, h2) = (LOADS[0].group, LOADS[1].group);
        let medians = vec![
            (h1, "statico-io-uring".to_string(), 2.0),
            (h1, "statico-tokio".to_string(), 4.0),
            (h1, "go-httpbin".to_string(), 20.0),
            (h2, "statico-io-uring".to_string(), 1.5),
            (h2, "statico-tokio".to_string(), 5.0),
        ];
        assert_eq!(
            h2_over_h1(&medians),
            [
                ("statico-io-uring".into(), 0.75),
                ("statico-tokio".into(), 1.25)
            ]
        );
        assert!(h2_over_h1(&medians[3..]).is_empty());
    }
}
