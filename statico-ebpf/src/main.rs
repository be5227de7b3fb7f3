//! statico's BPF programs: an `SK_REUSEPORT` program that steers each new connection to the worker
//! pinned on the CPU that took the SYN, with per-CPU counters in BPF maps (see `statico-common` for
//! the shared layouts).
//!
//! Not written yet: this crate is the place for them, outside the workspace because it builds with
//! nightly for `bpfel-unknown-none` (`bpf-linker` 0.10.0, installed by `cargo xtask setup`). Until then
//! statico steers with plain `SO_REUSEPORT` and says so at start-up.
#![no_std]
#![no_main]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
