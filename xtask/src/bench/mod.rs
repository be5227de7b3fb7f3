//! `cargo xtask bench`: statico against its peers on this machine, in one run; or, with `--against
//! B` (`ab`), the statico otherwise measured (A) against another statico binary (B), to show what a
//! change to statico costs per request. This module holds the flags and picks the mode; the modes
//! import the layers below them and nothing imports upward:
//!
//! ```text
//! mod (flags, dispatch)
//!  └─ suite (default) · http2 · http3 · tls · site · profile · steering · routes · capacity
//!       │  · pause_demo · stream · openai · grpc · new_conns · ab
//!       │                                 one file per mode; routes ─ accuracy (its ground-truth check,
//!       │                                 whose ground-truth reader stream shares), openai ─ stream
//!       │                                 (a stream route's ground truth), grpc ─ accuracy (the
//!       │                                 ground-truth reader),
//!       │                                 capacity ─ queueing (M/M/c, D/M/c, the queue simulated; pure)
//!       ├─ ratio    (rate and CPU tables against a peer: nginx for tls and site, caddy for http3,
//!       │            fortio for routes, go-httpbin for stream, the FastAPI mock for openai,
//!       │            fortio and grpc-go for grpc)
//!       ├─ report   (table, results.json, bar charts)          ─┐ both on measure,
//!       ├─ servers  (nginx, caddy, fortio, grpc-go, go-httpbin, │ not on each other
//!       │            peers, the FastAPI mock, the TLS           │
//!       │            certificate; statico's suite flags)       ─┘
//!       └─ measure  (scenarios, a round of wrk/h2load/oha and the server's CPU (and CPU wait) over
//!                    it, rounds as JSON, RSS with idle connections, Stat, interleave)
//!
//! all on `crate::tools` (h2load, oha, statico and the server guard, /proc, ports and GET, timed SSE
//! streams asked with a POST, TLS clients, line charts), which `soak` uses too; bench and soak import nothing of each other.
//! ```
//!
//! A report names servers by `report::Started` (name, command), so it is written and tested without
//! running one.

mod ab;
mod accuracy;
mod capacity;
mod grpc;
mod http2;
mod http3;
mod measure;
mod new_conns;
mod openai;
mod pause_demo;
mod profile;
mod queueing;
mod ratio;
mod report;
mod routes;
mod servers;
mod site;
mod steering;
mod stream;
mod suite;
mod tls;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use report::validate;

#[derive(clap::Args, Debug, Default)]
pub struct BenchArgs {
    /// CPU list the servers are pinned to (taskset syntax) [default: the last CPU]
    #[arg(long)]
    pub server_cpus: Option<String>,
    /// CPU list wrk is pinned to [default: every other CPU]
    #[arg(long)]
    pub client_cpus: Option<String>,
    /// Seconds per measured round
    #[arg(long, default_value_t = 6)]
    pub duration: u64,
    /// Rounds per server and scenario (median reported)
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// A sub-minute smoke run: 1 round of 2 s, 1000 idle connections, no optional peers
    #[arg(long)]
    pub quick: bool,
    /// Where to write results.json, chart.svg and report.txt [default: target/bench/<timestamp>]
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Instead: compare the steering rungs on new connections (needs root for the ebpf rung)
    #[arg(long)]
    pub steering: bool,
    /// Instead: statico --http2 (both runtimes) against nginx http2 with h2load (-c 50 and -c 256, -m 10)
    #[arg(long)]
    pub http2: bool,
    /// Instead: statico --http3 (both runtimes) against Caddy with HTTP/3, with oha (-c 50 -p 16):
    /// server CPU per request, req/s, RSS with 1000 idle connections and after the load
    #[arg(long)]
    pub http3: bool,
    /// Instead: statico over HTTPS (both runtimes) against nginx with TLS: keep-alive, pipelined,
    /// full and resumed handshakes (openssl s_time), HTTP/2 over TLS (h2load)
    #[arg(long)]
    pub tls: bool,
    /// Instead: statico --root (both runtimes) against nginx serving the Python documentation
    /// (gzip_static, brotli_static): Zipf paths, an Accept-Encoding mix, revalidations, misses
    #[arg(long)]
    pub site: bool,
    /// Instead: split each server's CPU per keep-alive request into TCP send, TCP receive, event
    /// loop (kernel) and user space, from perf cpu-clock samples
    #[arg(long)]
    pub profile: bool,
    /// Instead: statico's routes (`--route`, both runtimes, one worker) against Fortio's echo server
    /// and nginx: 1 KiB, a 10 ms delay at 1000 connections, a 10% 503 mix (server CPU per request);
    /// then the ground truth of a lognormal delay route under oha at a fixed rate
    #[arg(long)]
    pub routes: bool,
    /// Instead: a pool (`capacity=8 delay=exp:10ms`, unbounded queue) under oha at fixed rates from
    /// 10% to 150% of its capacity: throughput, client and queue-wait percentiles against the queueing
    /// model (a simulation of the same run, and M/M/c), and where the latency turns up
    #[arg(long)]
    pub capacity: bool,
    /// Instead: wrk2's coordinated-omission demonstration: oha at 1000 req/s over 10 connections for
    /// 15 s, without and with --latency-correction, while statico stalls 1.4 s (its --pause, and
    /// SIGSTOP as wrk2's ^Z), beside statico's ground truth; latency over time in chart.svg
    #[arg(long)]
    pub pause_demo: bool,
    /// Instead: streamed answers, 1000 server-sent event streams at once (50 events 20 ms apart),
    /// statico's `stream=sse` route (both runtimes, one worker) against go-httpbin's /sse over
    /// HTTP/1.1, and over HTTP/2 (h2load -c 10 -m 100): server CPU per event, statico's lateness
    #[arg(long)]
    pub stream: bool,
    /// Instead: streamed OpenAI chat completions, 200 at once (50 tokens 20 ms apart), statico's
    /// `openai=on` preset (both runtimes, one worker) against a FastAPI mock under uvicorn (one
    /// worker): server CPU per token, the client's time to first token and between tokens
    #[arg(long)]
    pub openai: bool,
    /// Instead: gRPC unary calls, statico --grpc (both runtimes, one worker) against Fortio's ping
    /// server (Ping) and grpc-go's interop server (EmptyCall), GOMAXPROCS=1: server CPU per call under
    /// h2load (-c 50 -m 10) and ghz (-c 50, one call per connection); then a calibrated gRPC route
    /// (5% UNAVAILABLE, lognormal delay) under ghz at a fixed rate against its ground truth
    #[arg(long)]
    pub grpc: bool,
    /// Instead: an A/B of two statico binaries — A the one measured otherwise (STATICO_BIN, else the
    /// release build), B this one (relative to the workspace root, or absolute) — on both runtimes,
    /// A and B in turn each round: server CPU per request and A/B per scenario (keep-alive c50,
    /// pipelined x16 c256, h2load -c 50 -m 10, a 1 ms held route and the same in a pool, at c50)
    #[arg(long, value_name = "STATICO_B", conflicts_with_all = [
        "steering", "http2", "http3", "tls", "site", "profile", "routes", "capacity", "pause_demo", "stream", "openai",
        "grpc", "new_conns", "redraw",
    ])]
    pub against: Option<PathBuf>,
    /// Instead: what a new connection costs, statico (both runtimes) against nginx, one worker each:
    /// `Connection: close` and HTTP/1.0 at c50 (server CPU and system calls per connection), behind
    /// an nginx `proxy_pass` without upstream keepalive (1 KiB answers), TLS handshakes with openssl
    /// s_time (-new, and TLS 1.2 -reuse)
    #[arg(long)]
    pub new_conns: bool,
    /// Instead: redraw DIR/chart.svg from DIR/results.json (medians), without measuring
    #[arg(long, value_name = "DIR")]
    pub redraw: Option<PathBuf>,
}

/// Runs the mode `args` asks for.
pub fn run(root: &Path, mut args: BenchArgs) -> Result<()> {
    if let Some(dir) = &args.redraw {
        return report::redraw(dir);
    }
    apply_quick(&mut args);
    if args.steering {
        println!("{}", steering::run(root, args.duration, args.rounds)?);
        return Ok(());
    }
    let (server_cpus, mut client_cpus) = placement(&args);
    if let Some(against) = &args.against {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", ab::run(root, &out_dir(root, &args)?, against, &run)?);
        return Ok(());
    }
    if args.routes {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", routes::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    if args.new_conns {
        // wrk, openssl s_time and the proxy each run one thread.
        let client_cpus = args.client_cpus.clone().unwrap_or_else(|| "0".into());
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", new_conns::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    if args.capacity {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", capacity::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    if args.pause_demo {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", pause_demo::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    if args.stream {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", stream::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    if args.openai {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", openai::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    if args.grpc {
        let run = run_info(&args, &server_cpus, &client_cpus, 0);
        println!("{}", grpc::run(root, &out_dir(root, &args)?, &run)?);
        return Ok(());
    }
    let single = args.http2 || args.http3 || args.profile || args.tls || args.site;
    if single && args.client_cpus.is_none() {
        client_cpus = "0".into(); // h2load, oha and the profiled wrk run one thread each
    }
    let idle_conns = if args.quick { 1_000 } else { 10_000 };
    let run = run_info(&args, &server_cpus, &client_cpus, idle_conns);
    if single {
        let mode = match (args.http2, args.http3, args.tls, args.site) {
            (true, ..) => http2::run,
            (_, true, ..) => http3::run,
            (_, _, true, _) => tls::run,
            (.., true) => site::run,
            _ => profile::run,
        };
        println!("{}", mode(root, &run)?);
        return Ok(());
    }
    suite::run(root, &out_dir(root, &args)?, &run)
}

/// `--quick`: one round of 2 s.
fn apply_quick(args: &mut BenchArgs) {
    if args.quick {
        args.duration = 2;
        args.rounds = 1;
    }
}

/// Where servers and clients run: by default the servers on the last CPU, the clients on the others.
/// How this run is made, for the modes and their reports.
fn run_info<'a>(
    args: &BenchArgs,
    server_cpus: &'a str,
    client_cpus: &'a str,
    idle_conns: usize,
) -> report::RunInfo<'a> {
    report::RunInfo {
        server_cpus,
        client_cpus,
        duration: args.duration,
        rounds: args.rounds,
        quick: args.quick,
        idle_conns,
    }
}

fn placement(args: &BenchArgs) -> (String, String) {
    let n = crate::tools::procfs::cpu_count();
    let server = args
        .server_cpus
        .clone()
        .unwrap_or_else(|| (n - 1).to_string());
    let client = args.client_cpus.clone().unwrap_or_else(|| {
        if n > 1 {
            format!("0-{}", n - 2)
        } else {
            "0".into()
        }
    });
    (server, client)
}

/// `--out`, or `target/bench/<timestamp>`; created, absolute.
fn out_dir(root: &Path, args: &BenchArgs) -> Result<PathBuf> {
    crate::tools::out_dir(root, args.out.as_deref(), "bench")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(["bench"].iter().chain(args)).map(|c| c.bench)
    }

    #[test]
    fn against_names_statico_b_and_quick_makes_it_one_round_of_two_seconds() {
        let mut args = parse(&["--against", "../bin-base/statico", "--quick"]).unwrap();
        assert_eq!(
            args.against.as_deref(),
            Some(Path::new("../bin-base/statico"))
        );
        assert_eq!((args.rounds, args.duration), (3, 6));
        apply_quick(&mut args);
        assert_eq!((args.rounds, args.duration), (1, 2));
        let args = parse(&["--against", "/b", "--rounds", "5", "--duration", "4"]).unwrap();
        assert_eq!((args.rounds, args.duration), (5, 4));
    }

    #[test]
    fn against_is_a_mode_of_its_own() {
        assert!(parse(&["--against"]).is_err());
        for other in ["--http2", "--routes", "--steering", "--profile"] {
            assert!(parse(&["--against", "/b", other]).is_err(), "{other}");
        }
        assert!(parse(&["--http2"]).unwrap().against.is_none());
    }
}
