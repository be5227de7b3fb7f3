//! The target model: what a request is given and when, apart from the bytes that carry it. A reader
//! finds here every rule a calibrated answer follows — readable without HTTP — and the encoding
//! layers (`response`, `stream`, the protocols) only frame what it decides:
//!
//! - [`dist`]: the delay distributions a route draws from; [`units`]: durations, sizes, percentages;
//! - [`fault`]: what a route injects instead of answering; [`hold`]: how one answer is delivered
//!   (delay, body delay, pace, fault) and where its ground truth goes;
//! - [`pool`] and [`load`]: the server's pools (C servers, a FIFO queue, shedding) and the in-flight
//!   counts, and the ticket every held route answer carries;
//! - [`schedule`] and [`pause`]: phase windows and whole-server pauses;
//! - [`delivery`]: the one I/O-free machine that steps every answer on every protocol through all of
//!   the above: ticket, delay, pause, truth, head, body delay, pieces, fault.

pub mod delivery;
pub mod dist;
pub mod events;
pub mod fault;
pub mod hold;
pub mod load;
pub mod pause;
pub mod pool;
pub mod schedule;
pub mod units;
