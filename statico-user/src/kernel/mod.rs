//! The kernel assist and the platform: how connections reach workers, the BPF programs behind the best
//! rung, and the few facts and socket options that differ between platforms.
//!
//! - [`steering`]: the listeners and the steering ladder, chosen once at start-up;
//! - `bpf` (Linux, built with its BPF programs): the programs, their maps and pins, loaded with aya;
//! - [`sys`]: the kernel version, the open-files limit, platform-dependent socket options.
//!
//! Nothing here knows HTTP; the workers' counters live in the BPF map when there is one.

#[cfg(all(target_os = "linux", statico_bpf))]
pub mod bpf;
pub mod steering;
pub mod sys;
