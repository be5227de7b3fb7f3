//! What a user sees of a running server: the counters and the `-m` meter ([`meter`]), the Prometheus
//! page of `--metrics` ([`metrics`]), and the `-v` dump of requests and responses ([`dump`]).
//!
//! Every other layer writes to these (a worker's counter record, the dump) and none of them is
//! imported here, so this folder is the bottom of the tree: the metrics page is rendered here and
//! served by the side-port server above (`side`), and the dump takes a status as a code and a reason.

pub mod dump;
pub mod meter;
pub mod metrics;
pub mod truth;

use crate::observe::meter::{Counters, KernelDetail, MeterFormat};

/// What the main thread shows while the workers run: the meter (`-m`), reading the workers'
/// counters (and the kernel's) when it reports.
pub struct Watch<'a> {
    pub counters: &'a Counters,
    pub kernel_detail: &'a dyn Fn() -> KernelDetail,
    pub meter: Option<MeterFormat>,
    /// The routes' ground truth (with routes), for the JSON meter.
    pub truth: Option<truth::InForce<'a>>,
}

impl Watch<'_> {
    /// Runs the meter until the caller stops polling (shutdown).
    pub async fn run(self) {
        if let Some(format) = self.meter {
            meter::run(
                self.counters.clone(),
                format,
                self.kernel_detail,
                self.truth,
            )
            .await;
        }
        std::future::pending::<()>().await;
    }
}
