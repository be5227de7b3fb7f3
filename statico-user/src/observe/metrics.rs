//! `--metrics ADDR:PORT`: the counters in the Prometheus text format, on a listener of their own.
//!
//! Every counter of the totals line, per worker (`statico_requests_total{worker="0"}`; `sum()` gives
//! the totals), the steering and XDP counters per CPU, and `statico_build_info`; with routes, their
//! ground truth too, as Prometheus histograms and as JSON at `/ground-truth.json`
//! ([`crate::observe::truth`]). The values are read
//! from the same memory the meter reads (the workers' records, the BPF maps) when a scrape arrives: the
//! workers do nothing for it. The port is served by the side-port server (`side::scrape`), on the
//! main thread, never on a worker.

use std::fmt::Write as _;

use statico_common::Counter;

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
    let mut s = String::new();
    for (c, name) in Counter::ALL {
        if !info.shown.shows(name) {
            continue;
        }
        let metric = format!("statico_{name}_total");
        let _ = writeln!(s, "# HELP {metric} {}\n# TYPE {metric} counter", help(c));
        for w in 0..workers {
            let value = counters.worker_snapshot(w).get(c);
            let _ = writeln!(s, "{metric}{{worker=\"{w}\"}} {value}");
        }
    }
    let steering = [
        ("runs", "Runs of the steering program (new connections).", 0),
        (
            "steered",
            "Connections sent to the worker on the CPU that took the SYN.",
            1,
        ),
        ("fallbacks", "Connections left to the kernel's hash.", 2),
    ];
    for (name, text, i) in steering.iter().filter(|_| !kernel.steering.is_empty()) {
        let metric = format!("statico_steering_{name}_total");
        let _ = writeln!(s, "# HELP {metric} {text}\n# TYPE {metric} counter");
        for (cpu, c) in kernel.steering.iter().enumerate() {
            let value = [c.runs, c.steered, c.fallbacks][*i];
            let _ = writeln!(s, "{metric}{{cpu=\"{cpu}\"}} {value}");
        }
    }
    let quic = [
        ("runs", "Runs of the QUIC steering program (datagrams)."),
        (
            "by_id",
            "Datagrams sent to the worker their connection ID names.",
        ),
        (
            "by_cpu",
            "Datagrams sent to the worker on their CPU (Initial packets, unknown IDs).",
        ),
        ("fallbacks", "Datagrams left to the kernel's hash."),
    ];
    let quic_steering = if info.shown.quic {
        &kernel.quic_steering[..]
    } else {
        &[]
    };
    for (i, (name, text)) in quic.iter().enumerate() {
        let metric = format!("statico_quic_steering_{name}_total");
        if !quic_steering.is_empty() {
            let _ = writeln!(s, "# HELP {metric} {text}\n# TYPE {metric} counter");
        }
        for (cpu, q) in quic_steering.iter().enumerate() {
            let value = [q.runs, q.by_id, q.by_cpu, q.fallbacks][i];
            let _ = writeln!(s, "{metric}{{cpu=\"{cpu}\"}} {value}");
        }
    }
    let xdp = [
        ("packets", "Packets of the server's port seen by XDP."),
        ("bytes", "Their bytes."),
    ];
    for (i, (name, text)) in xdp.iter().enumerate().filter(|_| !kernel.xdp.is_empty()) {
        let metric = format!("statico_xdp_{name}_total");
        let _ = writeln!(s, "# HELP {metric} {text}\n# TYPE {metric} counter");
        for (cpu, x) in kernel.xdp.iter().enumerate() {
            let value = [x.packets, x.bytes][i];
            let _ = writeln!(s, "{metric}{{cpu=\"{cpu}\"}} {value}");
        }
    }
    let _ = writeln!(
        s,
        "# HELP statico_build_info statico's version, runtime and steering rung.\n# TYPE statico_build_info gauge\n\
         statico_build_info{{version=\"{}\",runtime=\"{}\",steering=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        info.runtime,
        info.steering
    );
    s
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
                by_cpu: 2,
                fallbacks: 1,
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
