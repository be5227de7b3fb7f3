//! `--metrics`: the Prometheus text page on its own listener — every counter per worker, summing to the
//! totals — and a real Prometheus (Debian's, installed by `cargo xtask setup`) scraping it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use statico_tests::{get, Reader, Server};

fn fetch(url: &str) -> String {
    ureq::get(url)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// `n` requests on one keep-alive connection, each answered.
fn requests(s: &Server, n: usize) {
    let mut r = Reader::new(s.connect());
    for _ in 0..n {
        r.send(&get("/"));
        assert_eq!(r.response(false).status, 200);
    }
}

/// The sum of a metric's series on a page.
fn sum(page: &str, metric: &str) -> u64 {
    page.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn the_metrics_page_has_every_counter_per_worker_summing_to_the_totals() {
    let s = Server::start(&["-t", "2", "--metrics", "127.0.0.1:0"]);
    let addr = s.metrics_addr();
    requests(&s, 25);
    let page = fetch(&format!("http://{addr}/metrics"));
    assert_eq!(sum(&page, "statico_requests_total"), 25, "{page}");
    assert_eq!(page.matches("statico_requests_total{worker=").count(), 2);
    assert!(
        page.contains("# TYPE statico_bytes_out_total counter"),
        "{page}"
    );
    assert!(page.contains("statico_build_info{version=\""), "{page}");
    assert!(
        !page.contains("statico_tls_"),
        "no TLS counters on a plain port"
    );
    let other = ureq::get(&format!("http://{addr}/")).call();
    assert!(other.is_err(), "only /metrics is served there");
    let stopped = s.stop();
    assert_eq!(stopped.total("requests"), 25);
}

#[test]
fn a_busy_metrics_port_fails_the_start_naming_the_flag() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let (code, err) = statico_tests::run_to_exit(&["--metrics", &taken]);
    assert_eq!(code, Some(1), "like the benchmark port in use: {err}");
    assert!(
        err.contains("--metrics") && err.contains(&taken) && err.contains("in use"),
        "{err}"
    );
}

#[test]
fn prometheus_scrapes_statico_and_its_sum_is_the_request_count() {
    let s = Server::start(&["-t", "2", "--metrics", "127.0.0.1:0"]);
    let addr = s.metrics_addr();
    requests(&s, 40);
    let dir = std::env::temp_dir().join(format!("statico-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: statico\n    static_configs:\n      - targets: ['{addr}']\n"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus (cargo xtask setup installs it)");
    let query = format!("http://127.0.0.1:{port}/api/v1/query?query=sum(statico_requests_total)");
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(mut r) = ureq::get(&query).call() {
            last = r.body_mut().read_to_string().unwrap_or_default();
            if last.contains("\"40\"") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        last.contains("\"40\""),
        "Prometheus never saw 40 requests: {last}"
    );
}
