//! h2load (nghttp2's HTTP/2 load generator): its command and its report, read in one place for the
//! benchmarks (req/s and server CPU per request) and the soak (answers and failures per chunk).

use std::process::{Command, Stdio};

use anyhow::{Context, Result};

/// What an h2load run reports on its `finished in`, `requests:`, `status codes:`, `traffic:` and
/// `time for request:` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Report {
    /// Requests per second over the run.
    pub rps: f64,
    pub succeeded: u64,
    /// Requests that failed on a connection error.
    pub errored: u64,
    /// Requests that failed on h2load's timeout.
    pub timeout: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    /// Body bytes received (HTTP/1.1 bodies as decoded from their chunks; HTTP/2 DATA payloads).
    pub data_bytes: u64,
    /// The mean and the longest time from a request to the end of its answer, in ms.
    pub request_mean_ms: f64,
    pub request_max_ms: f64,
}

/// `h2load -t 1 -c CONNS -m STREAMS -D SECS URL`, pinned to `cpus` if given.
pub fn command(cpus: Option<&str>, conns: u32, streams: u32, secs: u64, url: &str) -> Command {
    let mut cmd = base(cpus, conns, streams);
    cmd.args(["-D", &secs.to_string(), url]);
    cmd
}

/// `h2load -t 1 -c CONNS -m STREAMS -n REQUESTS -N IDLE URL` (with `--h1` over HTTP/1.1, where
/// STREAMS is the pipeline depth), pinned to `cpus` if given: a run that ends when every request
/// has its whole answer, or its connection has been silent for `idle_secs`.
pub fn counted_command(
    cpus: Option<&str>,
    (conns, streams): (u32, u32),
    requests: u64,
    h1: bool,
    idle_secs: u64,
    url: &str,
) -> Command {
    let mut cmd = base(cpus, conns, streams);
    if h1 {
        cmd.arg("--h1");
    }
    cmd.args([
        "-n",
        &requests.to_string(),
        "-N",
        &format!("{idle_secs}s"),
        url,
    ]);
    cmd
}

/// `h2load -t 1 -c CONNS -m STREAMS`, pinned to `cpus` if given, no standard input.
fn base(cpus: Option<&str>, conns: u32, streams: u32) -> Command {
    let mut cmd = super::pinned(cpus, "h2load");
    cmd.args(["-t", "1", "-c", &conns.to_string()])
        .args(["-m", &streams.to_string()])
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` (from [`command`]) to its end and reads its report.
pub fn run(cmd: &mut Command) -> Result<Report> {
    let out = cmd
        .output()
        .context("run h2load (cargo xtask setup installs nghttp2-client)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse(&text).with_context(|| {
        format!(
            "h2load's report: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// h2load's report, `None` if a figure is missing. Its lines read
/// `finished in 2.00s, 1234.50 req/s, 1MB/s`,
/// `requests: 20 total, 20 started, 20 done, 18 succeeded, 2 failed, 2 errored, 0 timeout`,
/// `status codes: 18 2xx, 0 3xx, 0 4xx, 0 5xx`,
/// `traffic: 838B (838) total, 194B (194) headers (space savings 87.56%), 260B (260) data` and
/// `time for request:        9us       292us        29us        62us    95.00%` (min, max, mean…).
pub fn parse(text: &str) -> Option<Report> {
    let line = |start: &str| text.lines().find(|l| l.starts_with(start));
    let requests = line("requests:")?;
    let statuses = line("status codes:")?;
    let rps = line("finished in")?
        .split(',')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(Report {
        rps,
        succeeded: count(requests, "succeeded")?,
        errored: count(requests, "errored")?,
        timeout: count(requests, "timeout")?,
        status_4xx: count(statuses, "4xx")?,
        status_5xx: count(statuses, "5xx")?,
        data_bytes: data_bytes(line("traffic:")?)?,
        request_mean_ms: request_times(line("time for request:")?)?.1,
        request_max_ms: request_times(line("time for request:")?)?.0,
    })
}

/// The exact byte count in parentheses of the `traffic:` line's `data` item.
fn data_bytes(traffic: &str) -> Option<u64> {
    let item = traffic
        .split(',')
        .find(|i| i.trim_end().ends_with("data"))?;
    let (_, rest) = item.split_once('(')?;
    rest.split_once(')')?.0.parse().ok()
}

/// The `time for request:` line's (max, mean), in ms.
fn request_times(line: &str) -> Option<(f64, f64)> {
    let (_, figures) = line.split_once(':')?;
    let mut words = figures.split_whitespace().map(ms);
    let (_min, max, mean) = (words.next()?, words.next()?, words.next()?);
    Some((max?, mean?))
}

/// h2load's duration (`9us`, `1.20ms`, `1.01s`) in ms.
fn ms(figure: &str) -> Option<f64> {
    let split = figure.find(|c: char| c.is_ascii_alphabetic())?;
    let n: f64 = figure[..split].parse().ok()?;
    match &figure[split..] {
        "us" => Some(n / 1e3),
        "ms" => Some(n),
        "s" => Some(n * 1e3),
        _ => None,
    }
}

/// The number before `name` in a line of `N name` items after a colon, separated by commas.
fn count(line: &str, name: &str) -> Option<u64> {
    let (_, items) = line.split_once(':')?;
    items
        .split(',')
        .map(str::split_whitespace)
        .find_map(|mut item| match (item.next(), item.next()) {
            (Some(n), Some(what)) if what == name => n.parse().ok(),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// h2load 1.52.0 with `-n 20 -c 1` against a port nobody listens on.
    const REFUSED: &str = "starting benchmark...
spawning thread #0: 1 total client(s). 20 total requests

finished in 3.57ms, 0.00 req/s, 0B/s
requests: 20 total, 0 started, 0 done, 0 succeeded, 20 failed, 20 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 0B (0) total, 0B (0) headers (space savings 0.00%), 0B (0) data
                     min         max         mean         sd        +/- sd
time for request:        0us         0us         0us         0us     0.00%
time for connect:        0us         0us         0us         0us     0.00%
time to 1st byte:        0us         0us         0us         0us     0.00%
req/s           :       0.00        0.00        0.00        0.00   100.00%
";

    /// h2load 1.52.0 with `-n 20 -c 1 -m 1` against statico `--http2` (h2c).
    const ANSWERED: &str = "starting benchmark...
spawning thread #0: 1 total client(s). 20 total requests
Application protocol: h2c
progress: 10% done
progress: 20% done
progress: 30% done
progress: 40% done
progress: 50% done
progress: 60% done
progress: 70% done
progress: 80% done
progress: 90% done
progress: 100% done

finished in 1.37ms, 14652.01 req/s, 599.53KB/s
requests: 20 total, 20 started, 20 done, 20 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 20 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 838B (838) total, 194B (194) headers (space savings 87.56%), 260B (260) data
                     min         max         mean         sd        +/- sd
time for request:        9us       292us        29us        62us    95.00%
time for connect:      441us       441us       441us         0us   100.00%
time to 1st byte:      772us       772us       772us         0us   100.00%
req/s           :   16515.62    16515.62    16515.62        0.00   100.00%
";

    /// The same with `-n 10` for a route answering 404.
    const NOT_FOUND: &str = "starting benchmark...
spawning thread #0: 1 total client(s). 10 total requests
Application protocol: h2c
progress: 10% done
progress: 20% done
progress: 30% done
progress: 40% done
progress: 50% done
progress: 60% done
progress: 70% done
progress: 80% done
progress: 90% done
progress: 100% done

finished in 1.15ms, 8673.03 req/s, 184.64KB/s
requests: 10 total, 10 started, 10 done, 0 succeeded, 10 failed, 0 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 10 4xx, 0 5xx
traffic: 218B (218) total, 104B (104) headers (space savings 86.49%), 0B (0) data
                     min         max         mean         sd        +/- sd
time for request:       11us       495us        66us       150us    90.00%
time for connect:      149us       149us       149us         0us   100.00%
time to 1st byte:      689us       689us       689us         0us   100.00%
req/s           :   10804.98    10804.98    10804.98        0.00   100.00%
";

    /// `-t 1 -c 1 -m 1 -D 1`: a timed run, which ends with one request started and not done.
    const TIMED: &str = "starting benchmark...
spawning thread #0: 1 total client(s). Timing-based test with 0s of warm-up time and 1s of main duration for measurements.
Warm-up started for thread #0.
progress: 100% of clients started
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Application protocol: h2c
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 1.00s, 71894.00 req/s, 2.67MB/s
requests: 71894 total, 71895 started, 71894 done, 71894 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 71894 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 2.67MB (2803948) total, 561.73KB (575210) headers (space savings 89.74%), 912.72KB (934622) data
                     min         max         mean         sd        +/- sd
time for request:        8us      5.27ms        12us        57us    99.84%
time for connect:       49us        49us        49us         0us   100.00%
time to 1st byte:      245us       245us       245us         0us   100.00%
req/s           :   71874.48    71874.48    71874.48        0.00   100.00%
";

    #[test]
    fn answered_runs_count_their_successes_and_rate() {
        let r = parse(ANSWERED).unwrap();
        assert_eq!(
            (r.succeeded, r.errored, r.timeout, r.rps),
            (20, 0, 0, 14652.01)
        );
        assert_eq!((r.status_4xx, r.status_5xx), (0, 0));
        let r = parse(TIMED).unwrap();
        assert_eq!((r.succeeded, r.rps), (71894, 71894.0));
        assert_eq!(r.data_bytes, 934622);
        assert_eq!((r.request_max_ms, r.request_mean_ms), (5.27, 0.012));
    }

    /// h2load 1.52.0 with `--h1 -c 2 -n 4` against go-httpbin's `/sse?count=50&duration=980ms`.
    const STREAMED: &str = "finished in 1.99s, 2.01 req/s, 6.93KB/s
requests: 4 total, 4 started, 4 done, 4 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 4 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 13.78KB (14108) total, 1.70KB (1740) headers (space savings 0.00%), 10.70KB (10960) data
                     min         max         mean         sd        +/- sd
time for request:   992.44ms    992.98ms    992.71ms       226us    50.00%
time for connect:      536us       793us       664us       181us   100.00%
";

    #[test]
    fn a_streamed_run_counts_its_body_bytes_and_request_times() {
        let r = parse(STREAMED).unwrap();
        assert_eq!((r.succeeded, r.data_bytes), (4, 10960));
        assert_eq!((r.request_max_ms, r.request_mean_ms), (992.98, 992.71));
        assert_eq!(ms("1.5s"), Some(1500.0));
        assert_eq!(ms("12"), None);
    }

    #[test]
    fn a_counted_run_names_its_requests_and_protocol() {
        let cmd = counted_command(Some("0"), (1000, 1), 6000, true, 10, "http://h/sse");
        let args: Vec<String> = (cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args.join(" "),
            "-c 0 h2load -t 1 -c 1000 -m 1 --h1 -n 6000 -N 10s http://h/sse"
        );
    }

    #[test]
    fn answers_with_4xx_count_as_such_not_as_successes() {
        let r = parse(NOT_FOUND).unwrap();
        assert_eq!(
            (r.succeeded, r.errored, r.status_4xx, r.status_5xx),
            (0, 0, 10, 0)
        );
    }

    #[test]
    fn a_refused_run_is_all_errored() {
        let r = parse(REFUSED).unwrap();
        assert_eq!((r.succeeded, r.errored, r.timeout, r.rps), (0, 20, 0, 0.0));
    }

    #[test]
    fn a_report_without_its_lines_is_none() {
        assert_eq!(parse("nothing"), None);
        let cut: String = REFUSED.lines().take(5).map(|l| format!("{l}\n")).collect();
        assert_eq!(parse(&cut), None, "no status codes line");
    }
}
