//! statico's BPF programs.
//!
//! `statico_steer` is an `SK_REUSEPORT` program: for each new connection it reads the CPU that is
//! handling the SYN, maps it to a worker slot through `CPU_SLOTS` (any CPU to any worker, so there may
//! be more CPUs than workers), and selects that worker's listener from `SOCKETS`. A CPU without a slot,
//! or a slot whose socket is gone, returns `SK_PASS` without selecting: the kernel then hashes as plain
//! `SO_REUSEPORT` would. It never drops (`SK_DROP` would make the client see a reset). Per-CPU counters
//! in `STEERING` say how many connections were steered and how many fell back.
//!
//! `WORKERS` is not touched here: it is the per-worker counter array (`BPF_F_MMAPABLE`) that the
//! workers write through an mmap and `bpftool` reads. It lives in this object so that the loader
//! creates and pins it with the others. Nothing here logs: a log line per SYN would cost ~15 µs.
#![no_std]
#![no_main]

use aya_ebpf::bindings::sk_action::SK_PASS;
use aya_ebpf::bindings::BPF_F_MMAPABLE;
use aya_ebpf::helpers::bpf_get_smp_processor_id;
use aya_ebpf::macros::{map, sk_reuseport};
use aya_ebpf::maps::{Array, PerCpuArray, ReusePortSockArray};
use aya_ebpf::programs::SkReuseportContext;
use statico_common::{SteerCounters, WorkerRecord, NO_SLOT};

// Sizes are placeholders: userspace sets them at load time (workers, possible CPUs).
#[map(name = "SOCKETS")]
static SOCKETS: ReusePortSockArray = ReusePortSockArray::with_max_entries(1, 0);

#[map(name = "CPU_SLOTS")]
static CPU_SLOTS: Array<u32> = Array::with_max_entries(1, 0);

#[map(name = "STEERING")]
static STEERING: PerCpuArray<SteerCounters> = PerCpuArray::with_max_entries(1, 0);

#[map(name = "WORKERS")]
static WORKERS: Array<WorkerRecord> = Array::with_max_entries(1, BPF_F_MMAPABLE);

#[sk_reuseport]
pub fn statico_steer(ctx: SkReuseportContext) -> u32 {
    // SAFETY: a helper without arguments, valid in every program type.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let slot = CPU_SLOTS.get(cpu).copied().unwrap_or(NO_SLOT);
    let steered = slot != NO_SLOT && SOCKETS.select_reuseport(&ctx, slot).is_ok();
    if let Some(c) = STEERING.get_ptr_mut(0) {
        // SAFETY: a per-CPU value: only this CPU writes it, and the pointer is valid for the run.
        unsafe {
            (*c).runs += 1;
            if steered {
                (*c).steered += 1;
            } else {
                (*c).fallbacks += 1;
            }
        }
    }
    SK_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
