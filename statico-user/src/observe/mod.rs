//! What a user sees of a running server: the counters and the `-m` meter ([`meter`]), the Prometheus
//! page of `--metrics` ([`metrics`]), and the `-v` dump of requests and responses ([`dump`]).
//!
//! Every other layer writes to these (a worker's counter record, the dump) and none of them is
//! imported here, so this folder is the bottom of the tree: the metrics page frames its one GET with
//! `httparse` rather than the workers' parser, and the dump takes a status as a code and a reason.

pub mod dump;
pub mod meter;
pub mod metrics;
pub mod truth;

use crate::observe::meter::{Counters, KernelDetail, MeterFormat};

/// What the main thread shows while the workers run: the meter (`-m`) and the metrics page
/// (`--metrics`), each reading the workers' counters (and the kernel's) when it reports.
pub struct Watch<'a> {
    pub counters: &'a Counters,
    pub kernel_detail: &'a dyn Fn() -> KernelDetail,
    pub meter: Option<MeterFormat>,
    /// The metrics listener, bound at start-up, and the page it serves.
    pub metrics: Option<(std::net::TcpListener, &'a dyn Fn() -> String)>,
    /// The routes' ground truth (with routes): on the metrics listener and in the JSON meter.
    pub truth: Option<truth::InForce<'a>>,
}

impl Watch<'_> {
    /// Runs the meter and serves the page until the caller stops polling (shutdown).
    pub async fn run(self) {
        let lines = async {
            if let Some(format) = self.meter {
                meter::run(
                    self.counters.clone(),
                    format,
                    self.kernel_detail,
                    self.truth,
                )
                .await;
            }
        };
        let page = async {
            if let Some((listener, page)) = self.metrics {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => metrics::serve(l, page, self.truth).await,
                    Err(e) => eprintln!("statico: --metrics: {e}"),
                }
            }
        };
        tokio::join!(lines, page);
        std::future::pending::<()>().await;
    }
}
