//! What a user sees of a running server: the counters and the `-m` meter ([`meter`]), the Prometheus
//! page of `--metrics` ([`metrics`]), and the `-v` dump of requests and responses ([`dump`]).
//!
//! Every other layer writes to these (a worker's counter record, the dump); none of them reads back,
//! so this folder imports nothing above the catalog's response (for the dump).

pub mod dump;
pub mod meter;
pub mod metrics;
