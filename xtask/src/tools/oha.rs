//! oha (the HTTP load generator `cargo xtask setup` installs, with HTTP/3): its command and its JSON
//! report, read in one place for the benchmarks and the soak.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Where oha writes its report.
#[derive(Clone, Copy, Debug)]
pub enum Output<'a> {
    /// A JSON summary on stdout, read by [`parse`].
    Json,
    /// Every request, one CSV line each, to this file.
    Csv(&'a Path),
}

/// `oha --no-tui --worker-threads 1` with its `output`, pinned to `cpus` if given; the caller adds
/// the load (`-c`, `-q`, `-n` or `-z`, the HTTP version) and the URL.
pub fn command(cpus: Option<&str>, output: Output) -> Result<Command> {
    let oha =
        crate::setup::oha_path().context("oha is not installed (cargo xtask setup installs it)")?;
    let mut cmd = super::pinned(cpus, oha);
    cmd.args(["--no-tui", "--worker-threads", "1"])
        .stdin(Stdio::null());
    match output {
        Output::Json => cmd.args(["--output-format", "json"]),
        Output::Csv(file) => cmd.args(["--output-format", "csv", "-o"]).arg(file),
    };
    Ok(cmd)
}

/// Runs `cmd` (from [`command`] with [`Output::Json`]) to its end and reads its report.
pub fn run(cmd: &mut Command) -> Result<OhaRun> {
    let out = cmd.output().context("run oha")?;
    parse(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("oha: {}", String::from_utf8_lossy(&out.stderr)))
}

/// What an oha run reports: 200 answers, its seconds, and its failures other than the requests in flight
/// it aborts at its deadline (other statuses, and errors by message).
#[derive(Debug, Default, PartialEq)]
pub struct OhaRun {
    pub ok: u64,
    pub seconds: f64,
    pub failures: Vec<(String, u64)>,
    /// Latency percentiles over every answer, in ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Mean latency over every answer, in ms.
    pub mean_ms: f64,
    /// Requests in flight at the deadline, which oha aborts (not failures).
    pub aborted: u64,
}

impl OhaRun {
    /// Fails unless the run had answers and no failure.
    pub fn check(&self, url: &str) -> Result<()> {
        if self.ok == 0 || self.seconds <= 0.0 || !self.failures.is_empty() {
            bail!(
                "oha against {url}: {} answers with 200 in {:.1} s, failures {:?}",
                self.ok,
                self.seconds,
                self.failures
            );
        }
        Ok(())
    }
}

/// oha's `--output-format json`.
pub fn parse(json: &str) -> Result<OhaRun> {
    let doc: Value = serde_json::from_str(json).context("oha's JSON report")?;
    let count = |v: &Value| v.as_u64().unwrap_or(0);
    let ms = |p: &str| doc["latencyPercentiles"][p].as_f64().unwrap_or(0.0) * 1e3;
    let mut run = OhaRun {
        seconds: doc["summary"]["total"].as_f64().unwrap_or(0.0),
        p50_ms: ms("p50"),
        p99_ms: ms("p99"),
        mean_ms: doc["summary"]["average"].as_f64().unwrap_or(0.0) * 1e3,
        ..OhaRun::default()
    };
    for (status, n) in doc["statusCodeDistribution"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if status == "200" {
            run.ok = count(n);
        } else {
            run.failures.push((format!("status {status}"), count(n)));
        }
    }
    for (error, n) in doc["errorDistribution"].as_object().into_iter().flatten() {
        if error.contains("deadline") {
            run.aborted += count(n);
        } else {
            run.failures.push((error.clone(), count(n)));
        }
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oha_reports_parse_and_only_the_deadline_aborts_pass() {
        let json = r#"{"summary":{"successRate":1.0,"total":2.004,"requestsPerSec":5000.0},
            "statusCodeDistribution":{"200":10000},
            "errorDistribution":{"aborted due to deadline":800}}"#;
        let run = parse(json).unwrap();
        assert_eq!((run.ok, run.seconds, run.aborted), (10000, 2.004, 800));
        run.check("u").unwrap();
        let json = r#"{"summary":{"total":2.0},"statusCodeDistribution":{"200":5,"503":2},
            "errorDistribution":{"connection refused":3}}"#;
        let run = parse(json).unwrap();
        assert_eq!(
            run.failures,
            [("status 503".into(), 2), ("connection refused".into(), 3)]
        );
        assert!(run.check("u").is_err());
        assert!(parse("not json").is_err());
    }
}
