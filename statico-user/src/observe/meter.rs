//! Counters and the `-m/--meter` report.
//!
//! Each worker owns one [`WorkerCounters`] record (the layout of `statico_common::WorkerRecord`, one
//! 64-byte-aligned block per worker) and is its only writer, so an update is a plain load and store
//! (`Relaxed`): no locked instruction and no cache line shared between workers on the hot path. Workers
//! update their record once per read batch, not once per request. The meter thread only reads. With
//! `--http3`, the worker's QUIC thread (`proto::http3`) writes the `quic_*` slots of the same record and no
//! other, so every slot still has one writer.
//!
//! The report is computed from byte and request counts over a monotonic clock ([`Instant`]), once a
//! second: requests/s, responses/s, and in/out Gbit/s (HTTP/3's `quic_*` requests and UDP bytes
//! included). `--meter-format json` prints one JSON object a line for scripts.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use statico_common::{Counter, SteerCounters, XdpCounters, COUNTERS};

/// One worker's counters. Same size, alignment and slot order as `statico_common::WorkerRecord`.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    values: [AtomicU64; COUNTERS],
}

const _: () = {
    assert!(size_of::<WorkerCounters>() == size_of::<statico_common::WorkerRecord>());
    assert!(align_of::<WorkerCounters>() == align_of::<statico_common::WorkerRecord>());
};

impl WorkerCounters {
    /// Adds `n` to `counter`. Only the owning worker may call this: it is a load and a store, not an
    /// atomic read-modify-write, which is correct with a single writer and free of bus locking.
    #[inline]
    pub fn add(&self, counter: Counter, n: u64) {
        let slot = &self.values[counter as usize];
        slot.store(slot.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.values[counter as usize].load(Relaxed)
    }
}

/// The counters of every worker: in ordinary memory, or in the BPF map that `bpftool` reads (mmap-ed).
#[derive(Debug, Clone)]
pub struct Counters {
    store: Arc<Store>,
}

#[derive(Debug)]
enum Store {
    Heap(Box<[WorkerCounters]>),
    /// Records in memory owned by someone else (the mmap of a BPF array), lent by their owner.
    Mapped(Box<dyn CounterMemory>),
}

/// Memory that holds the workers' records and lends them for as long as it lives.
pub trait CounterMemory: std::fmt::Debug + Send + Sync {
    fn records(&self) -> &[WorkerCounters];
}

/// A sum over all workers at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub values: [u64; COUNTERS],
}

impl Snapshot {
    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize]
    }
}

impl Counters {
    pub fn new(workers: usize) -> Self {
        Counters {
            store: Arc::new(Store::Heap(
                (0..workers).map(|_| WorkerCounters::default()).collect(),
            )),
        }
    }

    /// Counters in the records `memory` lends.
    pub fn mapped(memory: Box<dyn CounterMemory>) -> Self {
        Counters {
            store: Arc::new(Store::Mapped(memory)),
        }
    }

    fn records(&self) -> &[WorkerCounters] {
        match &*self.store {
            Store::Heap(r) => r,
            Store::Mapped(memory) => memory.records(),
        }
    }

    pub fn workers(&self) -> usize {
        self.records().len()
    }

    pub fn worker(&self, i: usize) -> &WorkerCounters {
        &self.records()[i]
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        for w in self.records() {
            for (i, v) in s.values.iter_mut().enumerate() {
                *v += w.values[i].load(Relaxed);
            }
        }
        s
    }

    /// One worker's counters at this instant.
    pub fn worker_snapshot(&self, i: usize) -> Snapshot {
        let mut s = Snapshot::default();
        for (j, v) in s.values.iter_mut().enumerate() {
            *v = self.records()[i].values[j].load(Relaxed);
        }
        s
    }
}

/// How the meter prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MeterFormat {
    /// One aligned line a second.
    Text,
    /// One JSON object a line.
    Json,
}

/// Rates between two snapshots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub req_per_s: f64,
    pub resp_per_s: f64,
    pub in_gbps: f64,
    pub out_gbps: f64,
}

/// Rates count every protocol: HTTP/3's requests (answered streams) and UDP bytes, which have slots
/// of their own (`quic_*`, written by the QUIC threads), are added to HTTP/1.1's and HTTP/2's.
pub fn rates(prev: &Snapshot, now: &Snapshot, elapsed: Duration) -> Rates {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let d = |cs: &[Counter]| {
        cs.iter()
            .map(|&c| now.get(c).wrapping_sub(prev.get(c)))
            .fold(0u64, u64::wrapping_add) as f64
    };
    use Counter::*;
    Rates {
        req_per_s: d(&[Requests, QuicRequests]) / secs,
        resp_per_s: d(&[Responses, QuicRequests]) / secs,
        in_gbps: d(&[BytesIn, QuicBytesIn]) * 8.0 / secs / 1e9,
        out_gbps: d(&[BytesOut, QuicBytesOut]) * 8.0 / secs / 1e9,
    }
}

/// Per-worker request rates and the kernel's per-CPU counters, next to the totals.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detail {
    /// (requests/s, total requests) per worker.
    pub workers: Vec<(f64, u64)>,
    /// Steering counters per CPU (empty without the eBPF rung).
    pub steering: Vec<SteerCounters>,
    /// XDP packet counters per CPU (empty without `--xdp`).
    pub xdp: Vec<XdpCounters>,
}

/// What the kernel side counts, read once a second from the BPF maps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelDetail {
    pub steering: Vec<SteerCounters>,
    pub xdp: Vec<XdpCounters>,
    /// `--http3` on the ebpf rung: the QUIC steering program's counters per CPU.
    pub quic_steering: Vec<statico_common::QuicSteerCounters>,
}

/// Formats one meter line.
pub fn format_line(format: MeterFormat, r: &Rates, total: &Snapshot, detail: &Detail) -> String {
    let open = total
        .get(Counter::ConnsAccepted)
        .saturating_sub(total.get(Counter::ConnsClosed));
    match format {
        MeterFormat::Text => {
            let mut s = format!(
                "req/s {:>12.0}  resp/s {:>12.0}  in {:>8.3} Gbps  out {:>8.3} Gbps  conns {:>6}",
                r.req_per_s, r.resp_per_s, r.in_gbps, r.out_gbps, open
            );
            let tls = [Counter::TlsHandshakes, Counter::TlsFailures].map(|c| total.get(c));
            if tls != [0, 0] {
                let _ = write!(
                    s,
                    "  | tls handshakes {} (resumed {}) failed {}",
                    tls[0],
                    total.get(Counter::TlsResumed),
                    tls[1]
                );
            }
            let quic = [Counter::QuicConns, Counter::QuicRequests].map(|c| total.get(c));
            if quic != [0, 0] {
                let _ = write!(
                    s,
                    "  | h3 conns {} requests {} handshake failures {} retries {}",
                    quic[0],
                    quic[1],
                    total.get(Counter::QuicHandshakeFailures),
                    total.get(Counter::QuicRetries)
                );
            }
            if detail.workers.len() > 1 {
                s.push_str("  | req/s by worker");
                for (i, (rate, _)) in detail.workers.iter().enumerate() {
                    let _ = write!(s, " w{i} {rate:.0}");
                }
            }
            if !detail.steering.is_empty() {
                s.push_str("  | steered/fallback by CPU");
                for (cpu, c) in detail.steering.iter().enumerate() {
                    let _ = write!(s, " {cpu}:{}/{}", c.steered, c.fallbacks);
                }
            }
            if !detail.xdp.is_empty() {
                s.push_str("  | xdp packets by CPU");
                for (cpu, x) in detail.xdp.iter().enumerate() {
                    let _ = write!(s, " {cpu}:{}", x.packets);
                }
            }
            s
        }
        MeterFormat::Json => {
            let mut s = format!(
                "{{\"req_per_s\":{:.1},\"resp_per_s\":{:.1},\"in_gbps\":{:.6},\"out_gbps\":{:.6},\"open_conns\":{}",
                r.req_per_s, r.resp_per_s, r.in_gbps, r.out_gbps, open
            );
            for (c, name) in Counter::ALL {
                let _ = write!(s, ",\"{name}\":{}", total.get(c));
            }
            s.push_str(",\"workers\":[");
            for (i, (rate, requests)) in detail.workers.iter().enumerate() {
                let sep = if i > 0 { "," } else { "" };
                let _ = write!(
                    s,
                    "{sep}{{\"worker\":{i},\"req_per_s\":{rate:.1},\"requests\":{requests}}}"
                );
            }
            s.push_str("],\"steering\":[");
            for (cpu, c) in detail.steering.iter().enumerate() {
                let sep = if cpu > 0 { "," } else { "" };
                let _ = write!(
                    s,
                    "{sep}{{\"cpu\":{cpu},\"runs\":{},\"steered\":{},\"fallbacks\":{}}}",
                    c.runs, c.steered, c.fallbacks
                );
            }
            s.push_str("],\"xdp\":[");
            for (cpu, x) in detail.xdp.iter().enumerate() {
                let sep = if cpu > 0 { "," } else { "" };
                let _ = write!(
                    s,
                    "{sep}{{\"cpu\":{cpu},\"packets\":{},\"bytes\":{}}}",
                    x.packets, x.bytes
                );
            }
            s.push_str("]}");
            s
        }
    }
}

/// Which counters the totals at exit and the `--metrics` page show: TLS's only on an HTTPS port,
/// QUIC's only with `--http3` (the BPF map and the JSON meter keep the full schema).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown {
    pub tls: bool,
    pub quic: bool,
}

impl Shown {
    /// Whether the counter called `name` is shown.
    pub fn shows(self, name: &str) -> bool {
        (self.tls || !name.starts_with("tls_")) && (self.quic || !name.starts_with("quic_"))
    }
}

/// A counter as the totals show it: `requests` and `responses` count every protocol's (HTTP/3's
/// answered request streams are kept in `quic_requests`, one writer per slot, and added here), so the
/// first number a user reads is everything served.
fn total_of(total: &Snapshot, c: Counter) -> u64 {
    match c {
        Counter::Requests | Counter::Responses => total.get(c) + total.get(Counter::QuicRequests),
        _ => total.get(c),
    }
}

/// The counters of one totals line.
fn write_totals(s: &mut String, total: &Snapshot, shown: Shown) {
    for (c, name) in Counter::ALL {
        if shown.shows(name) {
            let _ = write!(s, " {name}={}", total_of(total, c));
        }
    }
}

/// The line printed at exit.
pub fn format_totals(total: &Snapshot, shown: Shown) -> String {
    let mut s = String::from("statico: totals");
    write_totals(&mut s, total, shown);
    s
}

/// One worker's line printed at exit.
pub fn format_worker_totals(
    worker: usize,
    cpu: Option<usize>,
    total: &Snapshot,
    shown: Shown,
) -> String {
    let mut s = match cpu {
        Some(cpu) => format!("statico: worker {worker} (cpu {cpu}):"),
        None => format!("statico: worker {worker}:"),
    };
    write_totals(&mut s, total, shown);
    s
}

/// Prints a meter line every second until the future is dropped. `kernel` reads the per-CPU steering
/// and XDP counters (empty without the eBPF rung).
/// Prints the meter line once a second; in JSON, with the routes' ground truth when there are routes.
pub async fn run(
    counters: Counters,
    format: MeterFormat,
    kernel: &dyn Fn() -> KernelDetail,
    truth: Option<crate::observe::truth::InForce<'_>>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let per_worker = |c: &Counters| -> Vec<u64> {
        (0..c.workers())
            .map(|i| {
                let s = c.worker_snapshot(i);
                s.get(Counter::Requests) + s.get(Counter::QuicRequests)
            })
            .collect()
    };
    let mut prev = counters.snapshot();
    let mut prev_workers = per_worker(&counters);
    let mut prev_at = Instant::now();
    loop {
        tick.tick().await;
        let now = counters.snapshot();
        let now_workers = per_worker(&counters);
        let at = Instant::now();
        let secs = (at - prev_at).as_secs_f64().max(1e-9);
        let k = kernel();
        let detail = Detail {
            workers: now_workers
                .iter()
                .zip(&prev_workers)
                .map(|(n, p)| (n.wrapping_sub(*p) as f64 / secs, *n))
                .collect(),
            steering: k.steering,
            xdp: k.xdp,
        };
        let mut line = format_line(format, &rates(&prev, &now, at - prev_at), &now, &detail);
        if let (MeterFormat::Json, Some(truth)) = (format, truth) {
            if line.ends_with('}') {
                line.pop();
                line = format!("{line},\"ground_truth\":{}}}", truth().json());
            }
        }
        println!("{line}");
        prev = now;
        prev_workers = now_workers;
        prev_at = at;
    }
}

/// The totals line, one line per worker, and the per-CPU steering and XDP counters.
pub fn print_totals(
    counters: &Counters,
    cpus: &[Option<usize>],
    kernel: &KernelDetail,
    shown: Shown,
) {
    eprintln!("{}", format_totals(&counters.snapshot(), shown));
    for (w, cpu) in cpus.iter().enumerate() {
        let worker = counters.worker_snapshot(w);
        eprintln!("{}", format_worker_totals(w, *cpu, &worker, shown));
    }
    for (cpu, s) in kernel.steering.iter().enumerate() {
        eprintln!(
            "statico: steering cpu {cpu}: runs={} steered={} fallbacks={}",
            s.runs, s.steered, s.fallbacks
        );
    }
    for (cpu, x) in kernel.xdp.iter().enumerate() {
        eprintln!(
            "statico: xdp cpu {cpu}: packets={} bytes={}",
            x.packets, x.bytes
        );
    }
    for (cpu, q) in kernel.quic_steering.iter().enumerate() {
        eprintln!(
            "statico: quic steering cpu {cpu}: runs={} by_id={} by_hash={}",
            q.runs, q.by_id, q.by_hash
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_sums_workers() {
        let c = Counters::new(3);
        c.worker(0).add(Counter::Requests, 2);
        c.worker(2).add(Counter::Requests, 5);
        c.worker(1).add(Counter::BytesOut, 7);
        let s = c.snapshot();
        assert_eq!(s.get(Counter::Requests), 7);
        assert_eq!(s.get(Counter::BytesOut), 7);
    }

    #[test]
    fn rates_use_elapsed_time_and_bits() {
        let mut a = Snapshot::default();
        let mut b = Snapshot::default();
        a.values[Counter::Requests as usize] = 100;
        b.values[Counter::Requests as usize] = 300;
        b.values[Counter::BytesOut as usize] = 1_000_000_000;
        let r = rates(&a, &b, Duration::from_secs(2));
        assert_eq!(r.req_per_s, 100.0);
        assert_eq!(r.out_gbps, 4.0);
        b.values[Counter::QuicRequests as usize] = 200;
        b.values[Counter::QuicBytesOut as usize] = 1_000_000_000;
        let r = rates(&a, &b, Duration::from_secs(2));
        assert_eq!((r.req_per_s, r.resp_per_s, r.out_gbps), (200.0, 100.0, 8.0));
    }

    #[test]
    fn the_text_line_shows_http3_only_when_there_is_some() {
        let mut s = Snapshot::default();
        let r = rates(&Snapshot::default(), &s, Duration::from_secs(1));
        let line = format_line(MeterFormat::Text, &r, &s, &Detail::default());
        assert!(!line.contains("h3"), "{line}");
        s.values[Counter::QuicConns as usize] = 2;
        s.values[Counter::QuicRequests as usize] = 9;
        s.values[Counter::QuicHandshakeFailures as usize] = 1;
        let line = format_line(MeterFormat::Text, &r, &s, &Detail::default());
        assert!(
            line.contains("| h3 conns 2 requests 9 handshake failures 1"),
            "{line}"
        );
        let h3 = Shown {
            tls: true,
            quic: true,
        };
        assert!(format_totals(&s, h3).ends_with(" quic_retries=0"));
    }

    #[test]
    fn totals_show_what_the_server_runs_and_count_every_protocols_requests() {
        let mut s = Snapshot::default();
        s.values[Counter::Requests as usize] = 3;
        s.values[Counter::Responses as usize] = 4;
        s.values[Counter::QuicRequests as usize] = 9;
        let plain = Shown {
            tls: false,
            quic: false,
        };
        let line = format_totals(&s, plain);
        assert!(!line.contains("tls_") && !line.contains("quic_"), "{line}");
        assert!(line.contains(" requests=12 responses=13 "), "{line}");
        let https = format_totals(&s, Shown { tls: true, ..plain });
        assert!(https.contains(" tls_handshakes=0") && !https.contains("quic_"));
        let worker = format_worker_totals(
            0,
            Some(1),
            &s,
            Shown {
                quic: true,
                ..plain
            },
        );
        assert!(worker.starts_with("statico: worker 0 (cpu 1): requests=12 "));
        assert!(worker.contains(" quic_requests=9") && !worker.contains("tls_"));
    }

    #[test]
    fn json_line_has_rates_and_totals() {
        let mut s = Snapshot::default();
        s.values[Counter::Requests as usize] = 42;
        let r = rates(&Snapshot::default(), &s, Duration::from_secs(1));
        let detail = Detail {
            workers: vec![(42.0, 42)],
            steering: vec![SteerCounters {
                runs: 3,
                steered: 2,
                fallbacks: 1,
            }],
            xdp: vec![XdpCounters {
                packets: 5,
                bytes: 300,
            }],
        };
        let line = format_line(MeterFormat::Json, &r, &s, &detail);
        assert!(
            line.contains("\"workers\":[{\"worker\":0,\"req_per_s\":42.0,\"requests\":42}]"),
            "{line}"
        );
        assert!(
            line.contains("\"steering\":[{\"cpu\":0,\"runs\":3,\"steered\":2,\"fallbacks\":1}]"),
            "{line}"
        );
        assert!(line.starts_with("{\"req_per_s\":42.0,"), "{line}");
        assert!(line.contains("\"requests\":42") && line.ends_with('}'));
    }
}
