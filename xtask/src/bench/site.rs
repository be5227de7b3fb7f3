//! `cargo xtask bench --site`: statico `--root` (both runtimes) against nginx serving the same static
//! site, in one run.
//!
//! The corpus is the Python documentation from Debian's `python3.11-doc` (HTML, CSS, JS, images),
//! copied once under `target/bench/site/corpus` with symlinks resolved, and given precompressed
//! siblings once (`x.gz` at gzip level 9, `x.br` at brotli quality 9) for every text file: nginx serves
//! them with `gzip_static`/`brotli_static`, statico takes them as its variants (and adds zstd). The load
//! is one wrk script per server: 20 000 requests sampled with Zipf weights over the corpus's pages, an
//! `Accept-Encoding` mix (60% a browser's `gzip, deflate, br, zstd`, 25% `gzip`, 15% none), 10%
//! revalidations (`If-None-Match` with that server's ETag, answered 304) and 5% missing paths (404);
//! keep-alive c50 and c256. Reported: req/s and server CPU per request (medians, against nginx), Gbit/s,
//! RSS after the load, and start-up time (spawn to listening).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::measure::{self, server_cpu_us, Stat};
use super::ratio::Report;
use super::report::{work_dir, RunInfo};
use super::servers::{start_nginx, Nginx};
use crate::tools::pinned;
use crate::tools::procfs::status_kib;
use crate::tools::server::{start_statico, ServerUnderTest};

/// Where Debian's `python3.11-doc` puts the HTML documentation.
pub const CORPUS: &str = "/usr/share/doc/python3.11/html";

/// Requests in each server's script (cycled).
const REQUESTS: usize = 20_000;

pub fn run(root: &Path, run: &RunInfo) -> Result<String> {
    let dir = work_dir(root, "site")?;
    let corpus = corpus(&dir)?;
    let pages = pages(&corpus)?;
    let mut started = Vec::new();
    for runtime in ["tokio", "io-uring"] {
        let args = [
            "-t",
            "1",
            "--runtime",
            runtime,
            "--root",
            path_str(&corpus)?,
        ];
        let name = format!("statico-{runtime}");
        started.push(timed(|| {
            start_statico(root, &name, Some(run.server_cpus), &args)
        })?);
    }
    started.push(timed(|| {
        start_nginx(&dir, run.server_cpus, Nginx::Site { root: &corpus })
    })?);
    let (servers, startup): (Vec<_>, Vec<_>) = started.into_iter().unzip();
    let scripts = servers
        .iter()
        .map(|s| script(&dir, s, &pages))
        .collect::<Result<Vec<_>>>()?;
    let mut report = Report::new(format!(
        "Static site: {} ({} pages), servers on CPU {}, wrk on CPU {}, {} round(s) of {} s, medians (min-max)\n",
        CORPUS, pages.len(), run.server_cpus, run.client_cpus, run.rounds, run.duration
    ));
    let mut gbps = Vec::new();
    for conns in [50, 256] {
        let rows = measure::interleave(&servers, run.rounds, |s| {
            let i = servers.iter().position(|x| x.name == s.name).unwrap_or(0);
            let r = round(s, conns, run, &scripts[i])?;
            eprintln!(
                "  {:<17} c{conns}: {:>8.0} req/s {:>7.2} µs {:>6.2} Gbit/s",
                s.name, r.0, r.1, r.2
            );
            Ok(r)
        })?;
        let two: Vec<Vec<(f64, f64)>> = rows
            .iter()
            .map(|r| r.iter().map(|x| (x.0, x.1)).collect())
            .collect();
        let title = format!("keep-alive c{conns}, Zipf paths and encodings (wrk)");
        report.table(
            if conns == 50 { "c50" } else { "c256" },
            &title,
            "req/s",
            "µs CPU/req",
            &servers,
            &two,
        );
        gbps.push((
            conns,
            rows.iter()
                .map(|r| Stat::of(r.iter().map(|x| x.2)).median)
                .collect::<Vec<_>>(),
        ));
    }
    memory_and_startup(&mut report, &servers, &startup, &gbps);
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let title = "Static site: server CPU per request relative to nginx (1.0), lower is better";
    report.chart(&dir.join("chart.svg"), title)?;
    Ok(report.text)
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().context("a non-UTF-8 path")
}

/// Starts a server and measures the wall time until it listens.
fn timed(start: impl FnOnce() -> Result<ServerUnderTest>) -> Result<(ServerUnderTest, Duration)> {
    let t = Instant::now();
    let s = start()?;
    Ok((s, t.elapsed()))
}

/// Gbit/s per scenario, RSS after the load, and start-up time, per server.
fn memory_and_startup(
    report: &mut Report,
    servers: &[ServerUnderTest],
    startup: &[Duration],
    gbps: &[(u32, Vec<f64>)],
) {
    let _ = writeln!(
        report.text,
        "\nthroughput, memory, start-up\n  {:<17} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "server", "Gbit/s c50", "Gbit/s c256", "RSS KiB", "peak KiB", "start-up ms"
    );
    for (i, s) in servers.iter().enumerate() {
        let g = |k: usize| gbps.get(k).map_or(0.0, |(_, v)| v[i]);
        let _ = writeln!(
            report.text,
            "  {:<17} {:>12.2} {:>12.2} {:>12} {:>12} {:>12}",
            s.name,
            g(0),
            g(1),
            status_kib(s.pid(), "VmRSS:").unwrap_or(0),
            status_kib(s.pid(), "VmHWM:").unwrap_or(0),
            startup[i].as_millis()
        );
    }
    let _ = writeln!(
        report.text,
        "\nnginx's file bytes sit in the page cache (sendfile), not in its RSS; statico's are its RSS."
    );
}

/// One wrk round with the server's script: (req/s, server CPU µs per request, Gbit/s).
fn round(s: &ServerUnderTest, conns: u32, run: &RunInfo, script: &Path) -> Result<(f64, f64, f64)> {
    let mut cmd = pinned(Some(run.client_cpus), "wrk");
    cmd.arg("-t1")
        .arg(format!("-c{conns}"))
        .arg(format!("-d{}s", run.duration))
        .arg("-s")
        .arg(script)
        .arg(s.url());
    let (out, cpu_us) = server_cpu_us(s.pid(), || cmd.output().context("run wrk"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let r = measure::parse_wrk(&text);
    let socket_errors = text.lines().any(|l| l.trim().starts_with("Socket errors:"));
    if r.requests == 0 || socket_errors {
        bail!("wrk against {}: {} requests\n{text}", s.name, r.requests);
    }
    let transfer = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Transfer/sec:"))
        .map_or(0.0, |v| bytes_of(v.trim()));
    Ok((r.rps, cpu_us / r.requests as f64, transfer * 8.0 / 1e9))
}

/// wrk's `12.34MB` as bytes.
fn bytes_of(v: &str) -> f64 {
    let at = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let n: f64 = v[..at].parse().unwrap_or(0.0);
    n * match &v[at..] {
        "KB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        _ => 1.0,
    }
}

/// The corpus copied under `dir` (symlinks resolved) with its precompressed siblings, made once.
fn corpus(dir: &Path) -> Result<PathBuf> {
    let target = dir.join("corpus");
    let done = dir.join("corpus.done");
    if done.exists() {
        return Ok(target);
    }
    if !Path::new(CORPUS).is_dir() {
        bail!("{CORPUS} is missing: cargo xtask setup installs python3.11-doc");
    }
    let _ = std::fs::remove_dir_all(&target);
    let status = Command::new("cp")
        .args(["-rL", CORPUS])
        .arg(&target)
        .status()?;
    if !status.success() {
        bail!("cp -rL {CORPUS} {} failed", target.display());
    }
    let mut files = Vec::new();
    collect(&target, &mut files)?;
    for f in files.iter().filter(|f| compressible(f)) {
        let data = std::fs::read(f)?;
        if data.len() < 256 {
            continue;
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
        gz.write_all(&data)?;
        std::fs::write(sibling(f, "gz"), gz.finish()?)?;
        let mut br = Vec::new();
        let params = brotli::enc::BrotliEncoderParams {
            quality: 9,
            lgwin: 22,
            ..Default::default()
        };
        brotli::BrotliCompress(&mut &data[..], &mut br, &params)?;
        std::fs::write(sibling(f, "br"), br)?;
    }
    std::fs::write(done, b"")?;
    Ok(target)
}

fn sibling(f: &Path, ext: &str) -> PathBuf {
    PathBuf::from(format!("{}.{ext}", f.display()))
}

fn compressible(f: &Path) -> bool {
    let ext = f.extension().and_then(|e| e.to_str()).unwrap_or_default();
    ["html", "css", "js", "json", "svg", "txt", "xml"].contains(&ext)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// The corpus's URL paths (no siblings, no dot-names), in a fixed pseudo-random order: the Zipf ranks.
fn pages(corpus: &Path) -> Result<Vec<String>> {
    let mut files = Vec::new();
    collect(corpus, &mut files)?;
    let mut pages: Vec<String> = files
        .iter()
        .filter(|f| !matches!(f.extension().and_then(|e| e.to_str()), Some("gz" | "br")))
        .filter_map(|f| {
            f.strip_prefix(corpus)
                .ok()?
                .to_str()
                .map(|p| format!("/{p}"))
        })
        .filter(|p| !p.split('/').any(|seg| seg.starts_with('.')))
        .collect();
    pages.sort();
    let mut rng = Lcg(7);
    for i in (1..pages.len()).rev() {
        pages.swap(i, rng.below(i + 1));
    }
    Ok(pages)
}

/// A small deterministic generator: the same load for every server and every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

/// One server's wrk script: [`REQUESTS`] raw requests, cycled.
fn script(dir: &Path, s: &ServerUnderTest, pages: &[String]) -> Result<PathBuf> {
    let cumulative: Vec<f64> = pages
        .iter()
        .enumerate()
        .scan(0.0, |sum, (rank, _)| {
            *sum += 1.0 / (rank as f64 + 1.0);
            Some(*sum)
        })
        .collect();
    let total = *cumulative.last().context("an empty corpus")?;
    let mut rng = Lcg(42);
    let mut etags: HashMap<String, String> = HashMap::new();
    let mut lua = String::from("local r = {\n");
    for n in 0..REQUESTS {
        let x = rng.unit() * total;
        let page = &pages[cumulative.partition_point(|c| *c < x).min(pages.len() - 1)];
        let kind = rng.below(100);
        let mut fields = String::new();
        let path = if kind < 5 {
            format!("/missing/{n}.html")
        } else if kind < 15 {
            if !etags.contains_key(page) {
                etags.insert(page.clone(), etag(s, page)?);
            }
            fields.push_str(&format!("If-None-Match: {}\r\n", etags[page]));
            page.clone()
        } else {
            match rng.below(100) {
                0..60 => fields.push_str("Accept-Encoding: gzip, deflate, br, zstd\r\n"),
                60..85 => fields.push_str("Accept-Encoding: gzip\r\n"),
                _ => {}
            }
            page.clone()
        };
        let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n{fields}\r\n");
        let _ = writeln!(lua, "  {:?},", request);
    }
    lua.push_str("}\nlocal i = 0\nrequest = function()\n  i = i % #r + 1\n  return r[i]\nend\n");
    let path = dir.join(format!("{}.lua", s.name.replace(' ', "-")));
    std::fs::write(&path, lua)?;
    Ok(path)
}

/// The server's `ETag` for `page` without `Accept-Encoding` (what a revalidation sends back).
fn etag(s: &ServerUnderTest, page: &str) -> Result<String> {
    let mut c = TcpStream::connect(("127.0.0.1", s.port))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        c,
        "HEAD {page} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )?;
    let tag = BufReader::new(c)
        .lines()
        .map_while(|l| l.ok())
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("etag")
                .then(|| value.trim().to_string())
        });
    tag.with_context(|| format!("{} gave no ETag for {page}", s.name))
}
