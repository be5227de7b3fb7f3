//! The soak's clients that are tools on PATH, each run in chunks of a few seconds so that its report
//! is read while the run goes on: oha (HTTP/1.1 keep-alive over TLS, HTTP/2, HTTP/3; at a fixed
//! rate) and h2load (HTTP/2 over TLS, its pace set by the route's delay). A tool on a route with
//! faults passes the [`Gate`](super::clients::Gate) for a whole chunk, so its chunks are cut to end
//! before the next routes swap.

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::clients::Shared;
use super::judge::{next_swap_in, Counts, Swap};
use crate::bench::measure::parse_oha;

/// One tool's load.
pub struct Tool {
    pub name: &'static str,
    /// "tls" or "plain", in the tallies.
    pub server: &'static str,
    pub route: &'static str,
    pub kind: Kind,
    /// On a route with faults: through the gate, chunks ending before each swap.
    pub gated: bool,
}

pub enum Kind {
    /// oha at `rate` req/s over `conns` connections, one stream each; `version` 1.1, 2 or 3; each
    /// chunk a count of requests.
    Oha {
        version: &'static str,
        conns: u32,
        rate: u32,
    },
    /// h2load with `conns` connections of one stream each.
    H2load { conns: u32 },
}

/// The longest chunk, in s.
const CHUNK_S: f64 = 10.0;

/// How long the next chunk may run from `now_s` (s): up to [`CHUNK_S`] and the run's end, and for a
/// gated tool up to 1 s before the next swap; `None` if less than 2 s is left that way.
pub fn chunk_s(now_s: f64, end_s: f64, next_swap: Option<f64>, gated: bool) -> Option<u64> {
    let mut s = CHUNK_S.min(end_s - now_s);
    if let (true, Some(swap)) = (gated, next_swap) {
        s = s.min(swap - 1.0);
    }
    (s >= 2.0).then_some(s as u64)
}

/// Runs `tool` against `url` in chunks from `start` until `end_s` (or the stop flag), counting what
/// each chunk saw.
pub fn run(
    shared: &Shared,
    tool: &Tool,
    url: &str,
    cacert: &Path,
    schedule: &[(u64, Swap)],
    start: Instant,
    end_s: f64,
) {
    while !shared.stopped() {
        let now = start.elapsed().as_secs_f64();
        if end_s - now < 2.0 {
            break;
        }
        let Some(secs) = chunk_s(now, end_s, next_swap_in(schedule, now), tool.gated) else {
            sleep(Duration::from_millis(500)); // the swap comes and passes; the gate holds us then
            continue;
        };
        let pass = tool.gated.then(|| shared.gate.enter());
        let seen = chunk(tool, url, cacert, secs);
        drop(pass);
        match seen {
            Ok((counts, messages)) => {
                shared.count(tool.name, tool.server, tool.route, counts);
                if counts.errors() + counts.status > 0 {
                    eprintln!(
                        "soak: {:.0} s: {} {}: {messages:?}",
                        start.elapsed().as_secs_f64(),
                        tool.name,
                        tool.route
                    );
                }
                let mut m = shared.messages.lock().unwrap();
                for (msg, n) in messages {
                    let key = format!("{} {}: {msg}", tool.name, tool.route);
                    *m.entry(key).or_default() += n;
                }
            }
            Err(e) => {
                eprintln!("soak: {}: {e:#}", tool.name);
                let failed = Counts {
                    other: 1,
                    ..Counts::default()
                };
                shared.count(tool.name, tool.server, "(tool failed)", failed);
                sleep(Duration::from_secs(1));
            }
        }
    }
}

/// One chunk of `secs`: what it saw, and its failures by message. oha is given a count of requests
/// (rate × secs), not a duration: at a `-z` deadline its HTTP/3 requests in flight fail with
/// "Remote is closing the connection" or "ApplicationClose: H3_NO_ERROR" besides the "aborted due to
/// deadline" it names as such (seen against a route without faults; `-n` runs show none).
fn chunk(tool: &Tool, url: &str, cacert: &Path, secs: u64) -> Result<(Counts, Vec<(String, u64)>)> {
    match tool.kind {
        Kind::Oha {
            version,
            conns,
            rate,
        } => oha(version, conns, rate, url, cacert, secs),
        Kind::H2load { conns } => h2load(conns, url, secs),
    }
}

fn oha(
    version: &str,
    conns: u32,
    rate: u32,
    url: &str,
    cacert: &Path,
    secs: u64,
) -> Result<(Counts, Vec<(String, u64)>)> {
    let oha = crate::setup::oha_path().context("oha is not installed (cargo xtask setup)")?;
    let out = Command::new(oha)
        .args([
            "--no-tui",
            "--output-format",
            "json",
            "--worker-threads",
            "1",
        ])
        .args(["--http-version", version, "--cacert"])
        .arg(cacert)
        .args(["-c", &conns.to_string(), "-q", &rate.to_string()])
        .args(["-n", &(u64::from(rate) * secs).to_string(), url])
        .stdin(Stdio::null())
        .output()
        .context("run oha")?;
    let run = parse_oha(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("oha: {}", String::from_utf8_lossy(&out.stderr)))?;
    let mut c = Counts {
        ok: run.ok,
        ..Counts::default()
    };
    for (what, n) in &run.failures {
        if what.starts_with("status 2") {
            c.ok += n;
        } else if what.starts_with("status ") {
            c.status += n;
        } else {
            c.other += n;
        }
    }
    Ok((c, run.failures))
}

fn h2load(conns: u32, url: &str, secs: u64) -> Result<(Counts, Vec<(String, u64)>)> {
    let out = Command::new("h2load")
        .args(["-t", "1", "-c", &conns.to_string(), "-m", "1"])
        .args(["-D", &secs.to_string(), url])
        .stdin(Stdio::null())
        .output()
        .context("run h2load (cargo xtask setup installs nghttp2-client)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let c = parse_h2load(&text).with_context(|| format!("h2load's report: {text}"))?;
    let failures = (c.other > 0)
        .then(|| ("errored or timed out".to_string(), c.other))
        .into_iter()
        .collect();
    Ok((c, failures))
}

/// h2load's `requests:` and `status codes:` lines: succeeded, errored + timeout, 4xx + 5xx.
pub fn parse_h2load(text: &str) -> Option<Counts> {
    let field = |line: &str, name: &str| -> Option<u64> {
        let l = text.lines().find(|l| l.starts_with(line))?;
        l.split(&[':', ','][..])
            .find(|p| p.trim().ends_with(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(Counts {
        ok: field("requests:", "succeeded")?,
        other: field("requests:", "errored")? + field("requests:", "timeout")?,
        status: field("status codes:", "4xx")? + field("status codes:", "5xx")?,
        ..Counts::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_before_swaps_and_the_run() {
        assert_eq!(chunk_s(0.0, 120.0, Some(30.0), true), Some(10));
        assert_eq!(chunk_s(20.0, 120.0, Some(8.5), true), Some(7));
        assert_eq!(chunk_s(28.5, 120.0, Some(1.5), true), None);
        assert_eq!(chunk_s(28.5, 120.0, Some(1.5), false), Some(10));
        assert_eq!(chunk_s(30.1, 120.0, Some(-0.1), true), None);
        assert_eq!(chunk_s(115.0, 120.0, None, false), Some(5));
        assert_eq!(chunk_s(119.0, 120.0, None, false), None);
    }

    #[test]
    fn h2load_report_is_read() {
        let text = "finished in 3.00s, 28.00 req/s, 227.52KB/s\n\
            requests: 86 total, 88 started, 86 done, 84 succeeded, 2 failed, 2 errored, 1 timeout\n\
            status codes: 86 2xx, 0 3xx, 3 4xx, 1 5xx\n";
        let c = parse_h2load(text).unwrap();
        assert_eq!((c.ok, c.other, c.status), (84, 3, 4));
        assert_eq!(parse_h2load("nothing"), None);
    }
}
