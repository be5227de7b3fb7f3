//! `--metrics ADDR:PORT`: the counters in the Prometheus text format, on a listener of their own.
//!
//! Every counter of the totals line, per worker (`statico_requests_total{worker="0"}`; `sum()` gives
//! the totals), the steering and XDP counters per CPU, and `statico_build_info`; with routes, their
//! ground truth too, as Prometheus histograms and as JSON at `/ground-truth.json`
//! ([`crate::observe::truth`]). The values are read
//! from the same memory the meter reads (the workers' records, the BPF maps) when a scrape arrives,
//! into metric families that the `prometheus` crate's text encoder writes out: nothing is registered,
//! and the workers do nothing for it. The port is served by the side-port server (`side::scrape`),
//! on the main thread, never on a worker.

use prometheus::proto::{self, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::TextEncoder;
use statico_common::{Counter, QuicSteerCounters, SteerCounters, XdpCounters};

use crate::observe::meter::{Counters, KernelDetail, Shown};

/// What `statico_build_info` says, and which counters apply.
#[derive(Clone, Debug)]
pub struct Info {
    pub runtime: String,
    pub steering: String,
    /// Which protocols' counters are exported (TLS's only on an HTTPS port, QUIC's only with
    /// `--http3`): the same rule as the totals'.
    pub shown: Shown,
}

impl Info {
    pub fn new(runtime: &str, steering: &str, shown: Shown) -> Info {
        Info {
            runtime: runtime.into(),
            steering: steering.into(),
            shown,
        }
    }
}

/// One line of help per counter.
fn help(c: Counter) -> &'static str {
    use Counter::*;
    match c {
        Requests => "Complete requests received (head and body).",
        Responses => "Responses written, error responses included.",
        BytesIn => "HTTP bytes read from clients (plaintext under TLS).",
        BytesOut => "HTTP bytes written to clients (plaintext under TLS).",
        ConnsAccepted => "Connections accepted.",
        ConnsClosed => "Connections closed.",
        Status400 => "400 Bad Request responses.",
        Timeouts => "Connections closed by a header, idle or send timeout.",
        Status413 => "413 Content Too Large responses.",
        Status431 => "431 Request Header Fields Too Large responses.",
        Status501 => "501 Not Implemented responses.",
        Status505 => "505 HTTP Version Not Supported responses.",
        Reads => "Reads that returned data.",
        Writes => "Sends that wrote data.",
        TlsHandshakes => "TLS handshakes completed.",
        TlsFailures => "TLS connections that failed (the sum of the tls_* causes).",
        TlsResumed => "TLS handshakes that resumed a session.",
        TlsNoCommon => "TLS failures: no version, suite or group in common.",
        TlsBadRecord => "TLS failures: records that are not TLS or break the protocol.",
        TlsPlainHttp => "TLS failures: plain HTTP on the TLS port.",
        TlsTimeouts => "TLS failures: handshakes past --header-timeout.",
        TlsAbandoned => "TLS failures: the client left mid-handshake or sent an alert.",
        TlsBytesIn => "Ciphertext bytes read from TLS clients.",
        TlsBytesOut => "Ciphertext bytes written to TLS clients.",
        QuicConns => "HTTP/3: QUIC connections whose handshake completed.",
        QuicRequests => "HTTP/3: request streams answered.",
        QuicHandshakeFailures => "HTTP/3: QUIC handshakes that failed.",
        QuicBytesIn => "HTTP/3: UDP payload bytes received on QUIC connections.",
        QuicBytesOut => "HTTP/3: UDP payload bytes sent on QUIC connections.",
        QuicDatagramsIn => "HTTP/3: UDP datagrams received.",
        QuicDatagramsForConns => {
            "HTTP/3: UDP datagrams that reached a connection (the rest were garbage, unknown versions, Retry'd Initials or failed handshakes)."
        }
        QuicRetries => "HTTP/3: Initial packets answered with Retry (address validation).",
    }
}

/// The whole exposition: counters per worker, steering and XDP per CPU, build info.
pub fn render(counters: &Counters, workers: usize, kernel: &KernelDetail, info: &Info) -> String {
    let mut families = worker_families(counters, workers, &info.shown);
    families.extend(kernel_families(kernel, &info.shown));
    families.push(build_info(info));
    let mut page = String::new();
    encode(families, &mut page);
    page
}

/// `statico_<counter>_total{worker}`, for every counter the server's protocols show.
fn worker_families(counters: &Counters, workers: usize, shown: &Shown) -> Vec<Family> {
    let snapshots: Vec<_> = (0..workers).map(|w| counters.worker_snapshot(w)).collect();
    let shown = Counter::ALL
        .into_iter()
        .filter(|(_, name)| shown.shows(name));
    shown
        .map(|(c, name)| {
            let mut family = Family::counter(&format!("statico_{name}_total"), help(c));
            for (w, snapshot) in snapshots.iter().enumerate() {
                family.sample(
                    vec![label("worker", &w.to_string())],
                    snapshot.get(c) as f64,
                );
            }
            family
        })
        .collect()
}

/// The BPF programs' counters per CPU: TCP steering, QUIC steering (with `--http3`) and XDP.
fn kernel_families(kernel: &KernelDetail, shown: &Shown) -> Vec<Family> {
    let steering: [PerCpu<SteerCounters>; 3] = [
        (
            "runs",
            "Runs of the steering program (new connections).",
            |c| c.runs,
        ),
        (
            "steered",
            "Connections sent to the worker on the CPU that took the SYN.",
            |c| c.steered,
        ),
        ("fallbacks", "Connections left to the kernel's hash.", |c| {
            c.fallbacks
        }),
    ];
    let quic: [PerCpu<QuicSteerCounters>; 3] = [
        (
            "runs",
            "Runs of the QUIC steering program (datagrams).",
            |q| q.runs,
        ),
        (
            "by_id",
            "Datagrams sent to the worker their connection ID names.",
            |q| q.by_id,
        ),
        (
            "by_hash",
            "Datagrams left to the kernel's hash of their addresses (Initial packets, unknown IDs).",
            |q| q.by_hash,
        ),
    ];
    let xdp: [PerCpu<XdpCounters>; 2] = [
        (
            "packets",
            "Packets of the server's port seen by XDP.",
            |x| x.packets,
        ),
        ("bytes", "Their bytes.", |x| x.bytes),
    ];
    let quic_steering = if shown.quic {
        &kernel.quic_steering[..]
    } else {
        &[]
    };
    let mut families = per_cpu("statico_steering", &steering, &kernel.steering);
    families.extend(per_cpu("statico_quic_steering", &quic, quic_steering));
    families.extend(per_cpu("statico_xdp", &xdp, &kernel.xdp));
    families
}

/// A counter of a BPF program's per-CPU record: its name, its help and where the record has it.
type PerCpu<T> = (&'static str, &'static str, fn(&T) -> u64);

/// `{prefix}_{name}_total{cpu}` for each counter of `counters`, read from each CPU's record.
fn per_cpu<T>(prefix: &str, counters: &[PerCpu<T>], cpus: &[T]) -> Vec<Family> {
    let families = counters.iter().map(|(name, help, value)| {
        let mut family = Family::counter(&format!("{prefix}_{name}_total"), help);
        for (cpu, record) in cpus.iter().enumerate() {
            family.sample(vec![label("cpu", &cpu.to_string())], value(record) as f64);
        }
        family
    });
    families.collect()
}

/// `statico_build_info{version,runtime,steering} 1`.
fn build_info(info: &Info) -> Family {
    let mut family = Family::gauge(
        "statico_build_info",
        "statico's version, runtime and steering rung.",
    );
    let labels = vec![
        label("version", env!("CARGO_PKG_VERSION")),
        label("runtime", &info.runtime),
        label("steering", &info.steering),
    ];
    family.sample(labels, 1.0);
    family
}

/// One metric family of the page, its samples added in the order they are shown.
pub(crate) struct Family(MetricFamily);

impl Family {
    pub(crate) fn counter(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::COUNTER)
    }

    pub(crate) fn gauge(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::GAUGE)
    }

    pub(crate) fn histogram(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::HISTOGRAM)
    }

    fn new(name: &str, help: &str, kind: MetricType) -> Family {
        let mut family = MetricFamily::default();
        family.set_name(name.into());
        family.set_help(help.into());
        family.set_field_type(kind);
        Family(family)
    }

    /// A counter's or a gauge's sample.
    pub(crate) fn sample(&mut self, labels: Vec<LabelPair>, value: f64) {
        let mut metric = Metric::from_label(labels);
        match self.0.get_field_type() {
            MetricType::COUNTER => {
                let mut counter = proto::Counter::default();
                counter.set_value(value);
                metric.set_counter(counter);
            }
            kind => {
                debug_assert_eq!(kind, MetricType::GAUGE, "a sample of one value");
                let mut gauge = proto::Gauge::default();
                gauge.set_value(value);
                metric.set_gauge(gauge);
            }
        }
        self.0.mut_metric().push(metric);
    }

    /// A histogram's sample: its cumulative counts at ascending upper bounds (the encoder adds
    /// `+Inf`, at `count`), its sum and its count.
    pub(crate) fn buckets(
        &mut self,
        labels: Vec<LabelPair>,
        cumulative: impl IntoIterator<Item = (f64, u64)>,
        sum: f64,
        count: u64,
    ) {
        debug_assert_eq!(self.0.get_field_type(), MetricType::HISTOGRAM);
        let buckets = cumulative.into_iter().map(|(upper_bound, n)| {
            let mut bucket = proto::Bucket::default();
            bucket.set_upper_bound(upper_bound);
            bucket.set_cumulative_count(n);
            bucket
        });
        let mut histogram = proto::Histogram::default();
        histogram.set_bucket(buckets.collect());
        histogram.set_sample_sum(sum);
        histogram.set_sample_count(count);
        let mut metric = Metric::from_label(labels);
        metric.set_histogram(histogram);
        self.0.mut_metric().push(metric);
    }
}

/// A sample's label; the encoder escapes its value.
pub(crate) fn label(name: &str, value: &str) -> LabelPair {
    let mut pair = LabelPair::default();
    pair.set_name(name.into());
    pair.set_value(value.into());
    pair
}

/// Appends `families` to `page` in the text format 0.0.4, in their order, each with its HELP and
/// TYPE. A family without samples is left out: the format has no empty family.
pub(crate) fn encode(families: Vec<Family>, page: &mut String) {
    let families: Vec<MetricFamily> = families
        .into_iter()
        .map(|f| f.0)
        .filter(|f| !f.get_metric().is_empty())
        .collect();
    TextEncoder::new()
        .encode_utf8(&families, page)
        .expect("every family has a name and a sample");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_help_type_and_a_series_per_worker() {
        let counters = Counters::new(2);
        counters.worker(0).add(Counter::Requests, 3);
        counters.worker(1).add(Counter::Requests, 4);
        let kernel = KernelDetail {
            steering: vec![statico_common::SteerCounters {
                runs: 5,
                steered: 4,
                fallbacks: 1,
            }],
            xdp: vec![],
            quic_steering: vec![statico_common::QuicSteerCounters {
                runs: 9,
                by_id: 6,
                by_hash: 3,
            }],
        };
        let info = Info {
            runtime: "tokio".into(),
            steering: "ebpf".into(),
            shown: Shown {
                tls: false,
                quic: false,
            },
        };
        let page = render(&counters, 2, &kernel, &info);
        assert!(
            page.contains("# TYPE statico_requests_total counter\n"),
            "{page}"
        );
        assert!(page.contains("statico_requests_total{worker=\"0\"} 3\n"));
        assert!(page.contains("statico_requests_total{worker=\"1\"} 4\n"));
        assert!(page.contains("statico_steering_fallbacks_total{cpu=\"0\"} 1\n"));
        assert!(!page.contains("tls_") && !page.contains("xdp") && !page.contains("quic_"));
        assert!(page.contains("statico_build_info{version=\"") && page.ends_with("} 1\n"));
        let helps = page.lines().filter(|l| l.starts_with("# HELP")).count();
        let types = page.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!((helps, types), (14 + 3 + 1, 14 + 3 + 1));
        let info = Info {
            shown: Shown {
                quic: true,
                ..info.shown
            },
            ..info
        };
        let page = render(&counters, 2, &kernel, &info);
        assert!(page.contains("statico_quic_steering_by_id_total{cpu=\"0\"} 6\n"));
        assert!(page.contains("statico_quic_steering_by_hash_total{cpu=\"0\"} 3\n"));
        let h3 = Info {
            shown: Shown {
                quic: true,
                ..info.shown
            },
            ..info
        };
        counters.worker(1).add(Counter::QuicRequests, 5);
        let page = render(&counters, 2, &kernel, &h3);
        assert!(
            page.contains("statico_quic_requests_total{worker=\"1\"} 5\n"),
            "{page}"
        );
        assert!(page.contains("# HELP statico_quic_handshake_failures_total "));
        assert!(!page.contains("tls_"));
    }
}
