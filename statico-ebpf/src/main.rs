//! statico's BPF programs.
//!
//! `statico_steer` is an `SK_REUSEPORT` program: for each new connection it reads the CPU that is
//! handling the SYN, maps it to a worker slot through `CPU_SLOTS` (any CPU to any worker, so there may
//! be more CPUs than workers), and selects that worker's listener from `SOCKETS`. A CPU without a slot,
//! or a slot whose socket is gone, returns `SK_PASS` without selecting: the kernel then hashes as plain
//! `SO_REUSEPORT` would. It never drops (`SK_DROP` would make the client see a reset). Per-CPU counters
//! in `STEERING` say how many connections were steered and how many fell back.
//!
//! `statico_steer_quic` steers the datagrams of the QUIC sockets (`--http3`, one UDP socket per worker):
//! a packet whose destination connection ID is one statico issued (short-header and Handshake
//! packets) goes to the worker that ID names — its first byte, see `QUIC_CID_LEN` — whatever address
//! or CPU it comes from, so a client whose address changes (NAT rebinding, migration) still reaches the
//! worker holding its connection. Initial and 0-RTT packets carry the client's own ID: they, and a
//! packet too short to read or naming no worker, are left to the kernel's hash of addresses and ports
//! (`SK_PASS` without a selection). Never by CPU: a client's first flight may span several datagrams
//! (a post-quantum ClientHello takes two) sent from different CPUs, and every one of them must reach
//! the same worker; a client keeps its address until its handshake is confirmed (RFC 9000 §9), so the
//! hash does. Counted per CPU in `QUIC_STEERING`.
//!
//! `statico_xdp` (attached with `--xdp IFACE`) counts, per CPU, the packets and bytes of IPv4 and IPv6
//! TCP segments to or from the server's port (`XDP_PORT`) and passes every packet on unchanged.
//!
//! `WORKERS` is not touched here: it is the per-worker counter array (`BPF_F_MMAPABLE`) that the
//! workers write through an mmap and `bpftool` reads. It lives in this object so that the loader
//! creates and pins it with the others. Nothing here logs: a log line per SYN would cost ~15 µs.
#![no_std]
#![no_main]

use aya_ebpf::bindings::sk_action::SK_PASS;
use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::btf_maps::{Array, PerCpuArray, ReusePortSockArray};
use aya_ebpf::cty::c_void;
use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_skb_load_bytes};
use aya_ebpf::macros::{btf_map, sk_reuseport, xdp};
use aya_ebpf::programs::{SkReuseportContext, XdpContext};
use statico_common::{
    QuicSteerCounters, SteerCounters, WorkerRecord, XdpCounters, NO_SLOT, QUIC_CID_LEN,
};

/// `BPF_F_MMAPABLE`, as the map flags generic parameter takes it.
const MMAPABLE: usize = aya_ebpf::bindings::BPF_F_MMAPABLE as usize;

// BTF-described maps, so `bpftool map dump` prints the records by field name. Sizes are placeholders:
// userspace sets them at load time (workers, possible CPUs).
#[btf_map]
static SOCKETS: ReusePortSockArray<1> = ReusePortSockArray::new();

#[btf_map]
static CPU_SLOTS: Array<u32, 1> = Array::new();

#[btf_map]
static STEERING: PerCpuArray<SteerCounters, 1> = PerCpuArray::new();

#[btf_map]
static WORKERS: Array<WorkerRecord, 1, MMAPABLE> = Array::new();

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

#[btf_map]
static QUIC_SOCKETS: ReusePortSockArray<1> = ReusePortSockArray::new();

#[btf_map]
static QUIC_STEERING: PerCpuArray<QuicSteerCounters, 1> = PerCpuArray::new();

/// Where the UDP payload starts: for UDP the program sees the datagram from its UDP header.
const UDP_HLEN: u32 = 8;

#[sk_reuseport]
pub fn statico_steer_quic(ctx: SkReuseportContext) -> u32 {
    let by_id = quic_worker(&ctx).is_some_and(|w| QUIC_SOCKETS.select_reuseport(&ctx, w).is_ok());
    if let Some(c) = QUIC_STEERING.get_ptr_mut(0) {
        // SAFETY: a per-CPU value: only this CPU writes it, and the pointer is valid for the run.
        unsafe {
            (*c).runs += 1;
            if by_id {
                (*c).by_id += 1;
            } else {
                (*c).by_hash += 1;
            }
        }
    }
    SK_PASS
}

/// The worker a QUIC packet's destination connection ID names, if it is one statico issued: the byte
/// after the first of a short header (1-RTT), or after the lengths of a Handshake packet's long header.
fn quic_worker(ctx: &SkReuseportContext) -> Option<u32> {
    let mut head = [0u8; 7];
    // SAFETY: the helper copies at most `head.len()` bytes of the packet into `head`, or fails.
    let read = unsafe {
        bpf_skb_load_bytes(
            ctx.md as *const c_void,
            UDP_HLEN,
            head.as_mut_ptr() as *mut c_void,
            head.len() as u32,
        )
    };
    if read != 0 {
        return None;
    }
    let first = head[0];
    if first & 0x80 == 0 {
        return Some(u32::from(head[1])); // short header: the ID follows the first byte
    }
    // Long header: type 2 is Handshake (types 0 and 1, Initial and 0-RTT, carry the client's ID);
    // then version (4 bytes), the ID's length, the ID.
    let handshake = (first >> 4) & 0x3 == 2;
    (handshake && usize::from(head[5]) == QUIC_CID_LEN).then(|| u32::from(head[6]))
}

#[btf_map]
static XDP_PORT: Array<u16, 1> = Array::new();

#[btf_map]
static XDP_STATS: PerCpuArray<XdpCounters, 1> = PerCpuArray::new();

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const IPPROTO_TCP: u8 = 6;

#[xdp]
pub fn statico_xdp(ctx: XdpContext) -> u32 {
    if let Some(len) = server_segment(&ctx) {
        if let Some(c) = XDP_STATS.get_ptr_mut(0) {
            // SAFETY: a per-CPU value: only this CPU writes it, and the pointer is valid for the run.
            unsafe {
                (*c).packets += 1;
                (*c).bytes += len as u64;
            }
        }
    }
    XDP_PASS
}

/// The packet's length if it is a TCP segment from or to the server's port.
#[inline(always)]
fn server_segment(ctx: &XdpContext) -> Option<usize> {
    let start = ctx.data();
    let end = ctx.data_end();
    let port = *XDP_PORT.get(0)?;
    let ethertype = u16::from_be(read::<u16>(start + 12, end)?);
    let tcp = match ethertype {
        ETH_P_IP => {
            let ip = start + ETH_HLEN;
            let ihl = usize::from(read::<u8>(ip, end)? & 0x0f) * 4;
            if read::<u8>(ip + 9, end)? != IPPROTO_TCP || ihl < 20 {
                return None;
            }
            ip + ihl
        }
        ETH_P_IPV6 => {
            let ip = start + ETH_HLEN;
            if read::<u8>(ip + 6, end)? != IPPROTO_TCP {
                return None;
            }
            ip + 40
        }
        _ => return None,
    };
    let src = u16::from_be(read::<u16>(tcp, end)?);
    let dst = u16::from_be(read::<u16>(tcp + 2, end)?);
    (src == port || dst == port).then_some(end - start)
}

/// Reads a `T` at packet address `at`, if it lies inside the packet (the check the verifier needs).
#[inline(always)]
fn read<T: Copy>(at: usize, end: usize) -> Option<T> {
    if at + core::mem::size_of::<T>() > end {
        return None;
    }
    // SAFETY: bounds-checked against `data_end` just above; packet data may be unaligned.
    Some(unsafe { core::ptr::read_unaligned(at as *const T) })
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
