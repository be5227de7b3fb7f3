//! The soak's clients that are tools on PATH, each run in chunks of a few seconds so that its report
//! is read while the run goes on: oha (HTTP/1.1 keep-alive over TLS, HTTP/2, HTTP/3; at a fixed
//! rate) and h2load (HTTP/2 over TLS, its pace set by the route's delay). A tool on a route with
//! faults passes the [`Gate`](super::clients::Gate) for a whole chunk, so its chunks are cut to end
//! before the next routes swap.

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::clients::Shared;
use super::judge::{next_swap_in, Counts, Swap};
use crate::tools::{h2load, oha};

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
    let mut cmd = oha::command(None, oha::Output::Json)?;
    cmd.args(["--http-version", version, "--cacert"])
        .arg(cacert)
        .args(["-c", &conns.to_string(), "-q", &rate.to_string()])
        .args(["-n", &(u64::from(rate) * secs).to_string(), url]);
    let run = oha::run(&mut cmd)?;
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

/// h2load for `secs` with `conns` connections of one stream each.
fn h2load(conns: u32, url: &str, secs: u64) -> Result<(Counts, Vec<(String, u64)>)> {
    let c = h2load_counts(&h2load::run(&mut h2load::command(
        None, conns, 1, secs, url,
    ))?);
    let failures = (c.other > 0)
        .then(|| ("errored or timed out".to_string(), c.other))
        .into_iter()
        .collect();
    Ok((c, failures))
}

/// What an h2load report counts: its successes as `ok`, its errors and timeouts as `other`, its 4xx
/// and 5xx answers as `status`.
fn h2load_counts(r: &h2load::Report) -> Counts {
    Counts {
        ok: r.succeeded,
        other: r.errored + r.timeout,
        status: r.status_4xx + r.status_5xx,
        ..Counts::default()
    }
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
    fn h2load_failures_are_errors_timeouts_and_other_statuses() {
        let report = h2load::Report {
            rps: 28.0,
            succeeded: 84,
            errored: 2,
            timeout: 1,
            status_4xx: 3,
            status_5xx: 1,
            ..h2load::Report::default()
        };
        let c = h2load_counts(&report);
        assert_eq!((c.ok, c.other, c.status), (84, 3, 4));
    }
}
