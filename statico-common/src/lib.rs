//! Types shared by both sides of statico: the BPF programs (`statico-ebpf`) and the userspace server
//! (`statico-user`).
//!
//! Everything here is `no_std` and `#[repr(C)]`, because the same bytes are written by one side and read
//! by the other (a BPF map mmap-ed by the workers, dumped by `bpftool`, read by the meter). Changing a
//! layout here changes it on both sides at once, which is the point of this crate.
#![no_std]

/// One worker's counters: a fixed array of `u64`, one cache-line-aligned record per worker so that two
/// workers never write the same cache line.
///
/// Each worker is the only writer of its record; the meter only reads. The index of each counter is
/// one of the `Counter` discriminants.
///
/// The fields are named (so `bpftool map dump` of the BTF-described map prints them by name) and laid
/// out in `Counter` slot order; userspace addresses them by slot as an array of `u64`.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerRecord {
    pub requests: u64,
    pub responses: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub conns_accepted: u64,
    pub conns_closed: u64,
    pub status_400: u64,
    pub timeouts: u64,
    pub status_413: u64,
    pub status_431: u64,
    pub status_501: u64,
    pub status_505: u64,
    pub reads: u64,
    pub writes: u64,
    pub tls_handshakes: u64,
    pub tls_failures: u64,
    pub tls_resumed: u64,
    pub tls_no_common: u64,
    pub tls_bad_record: u64,
    pub tls_plain_http: u64,
    pub tls_timeouts: u64,
    pub tls_abandoned: u64,
    pub tls_bytes_in: u64,
    pub tls_bytes_out: u64,
    pub quic_conns: u64,
    pub quic_requests: u64,
    pub quic_handshake_failures: u64,
    pub quic_bytes_in: u64,
    pub quic_bytes_out: u64,
    pub quic_datagrams_in: u64,
    pub quic_datagrams_for_conns: u64,
    pub quic_retries: u64,
}

/// Number of `u64` slots in a [`WorkerRecord`] (four cache lines, all in use: a new counter takes a
/// fifth line).
pub const COUNTERS: usize = 32;

/// The counters a worker keeps, by slot index in [`WorkerRecord::values`].
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Complete requests received (head and body).
    Requests = 0,
    /// Responses written, error responses included (100 Continue excluded).
    Responses = 1,
    /// Bytes read from clients.
    BytesIn = 2,
    /// Bytes written to clients.
    BytesOut = 3,
    /// Connections accepted.
    ConnsAccepted = 4,
    /// Connections closed.
    ConnsClosed = 5,
    /// 400 Bad Request responses sent.
    Status400 = 6,
    /// 408-style closes: a header or idle timeout expired.
    Timeouts = 7,
    /// 413 Content Too Large responses sent.
    Status413 = 8,
    /// 431 Request Header Fields Too Large responses sent.
    Status431 = 9,
    /// 501 Not Implemented responses sent.
    Status501 = 10,
    /// 505 HTTP Version Not Supported responses sent.
    Status505 = 11,
    /// `read`/`recv` calls that returned data: requests per read shows how well pipelining batches.
    Reads = 12,
    /// `write`/`send` calls that wrote response bytes: one per batch when pipelining works.
    Writes = 13,
    /// TLS handshakes completed (full or resumed).
    TlsHandshakes = 14,
    /// TLS connections that failed: the sum of the five causes below.
    TlsFailures = 15,
    /// Handshakes that resumed a session (a ticket or a TLS 1.2 session ID): full ones are
    /// `tls_handshakes - tls_resumed`.
    TlsResumed = 16,
    /// Failure: no version, cipher suite, group or signature scheme in common (alert sent).
    TlsNoCommon = 17,
    /// Failure: records that are not TLS, do not decrypt, or break the protocol (alert sent).
    TlsBadRecord = 18,
    /// Failure: plain HTTP on the TLS port (answered 400, also counted in `status_400`).
    TlsPlainHttp = 19,
    /// Failure: a handshake still unfinished at `--header-timeout` (also counted in `timeouts`).
    TlsTimeouts = 20,
    /// Failure: the client left mid-handshake, closing or with an alert of its own (for one, a
    /// certificate it does not trust).
    TlsAbandoned = 21,
    /// Ciphertext bytes read from TLS clients (`bytes_in` counts the plaintext).
    TlsBytesIn = 22,
    /// Ciphertext bytes written to TLS clients (`bytes_out` counts the plaintext).
    TlsBytesOut = 23,
    /// `--http3`: QUIC connections whose handshake completed. The QUIC counters are written by the
    /// worker's QUIC thread, every other counter by the worker's runtime: one writer per slot.
    QuicConns = 24,
    /// `--http3`: request streams answered (not counted in `requests`, which another thread writes).
    QuicRequests = 25,
    /// `--http3`: QUIC handshakes that failed (bad or unsupported Initial, TLS alert, timeout).
    QuicHandshakeFailures = 26,
    /// `--http3`: UDP payload bytes received on connections, counted as each connection goes on.
    QuicBytesIn = 27,
    /// `--http3`: UDP payload bytes sent on connections.
    QuicBytesOut = 28,
    /// `--http3`: UDP datagrams received, whatever they hold (GRO batches counted per datagram).
    QuicDatagramsIn = 29,
    /// `--http3`: of those, the datagrams that reached a connection (its first Initial included).
    /// `quic_datagrams_in - quic_datagrams_for_conns` is what no connection took: garbage,
    /// truncated packets, unknown versions (answered with Version Negotiation), Initials answered
    /// with Retry, the packets of failed handshakes; each connection's share is added as it goes on.
    QuicDatagramsForConns = 30,
    /// `--http3`: Initial packets answered with Retry (address validation: `--quic-retry`, or a
    /// worker with too many handshakes in progress).
    QuicRetries = 31,
}

impl Counter {
    /// Every counter, in slot order, with the name used by the meter's JSON and by BPF map dumps.
    pub const ALL: [(Counter, &'static str); COUNTERS] = [
        (Counter::Requests, "requests"),
        (Counter::Responses, "responses"),
        (Counter::BytesIn, "bytes_in"),
        (Counter::BytesOut, "bytes_out"),
        (Counter::ConnsAccepted, "conns_accepted"),
        (Counter::ConnsClosed, "conns_closed"),
        (Counter::Status400, "status_400"),
        (Counter::Timeouts, "timeouts"),
        (Counter::Status413, "status_413"),
        (Counter::Status431, "status_431"),
        (Counter::Status501, "status_501"),
        (Counter::Status505, "status_505"),
        (Counter::Reads, "reads"),
        (Counter::Writes, "writes"),
        (Counter::TlsHandshakes, "tls_handshakes"),
        (Counter::TlsFailures, "tls_failures"),
        (Counter::TlsResumed, "tls_resumed"),
        (Counter::TlsNoCommon, "tls_no_common"),
        (Counter::TlsBadRecord, "tls_bad_record"),
        (Counter::TlsPlainHttp, "tls_plain_http"),
        (Counter::TlsTimeouts, "tls_timeouts"),
        (Counter::TlsAbandoned, "tls_abandoned"),
        (Counter::TlsBytesIn, "tls_bytes_in"),
        (Counter::TlsBytesOut, "tls_bytes_out"),
        (Counter::QuicConns, "quic_conns"),
        (Counter::QuicRequests, "quic_requests"),
        (Counter::QuicHandshakeFailures, "quic_handshake_failures"),
        (Counter::QuicBytesIn, "quic_bytes_in"),
        (Counter::QuicBytesOut, "quic_bytes_out"),
        (Counter::QuicDatagramsIn, "quic_datagrams_in"),
        (Counter::QuicDatagramsForConns, "quic_datagrams_for_conns"),
        (Counter::QuicRetries, "quic_retries"),
    ];

    /// The counter that records an error response with this status, if statico sends that status.
    pub const fn for_error_status(status: u16) -> Option<Counter> {
        match status {
            400 => Some(Counter::Status400),
            413 => Some(Counter::Status413),
            431 => Some(Counter::Status431),
            501 => Some(Counter::Status501),
            505 => Some(Counter::Status505),
            _ => None,
        }
    }
}

/// Names of the BPF objects, as the BPF program declares them and userspace looks them up. Kernel map
/// names are at most 15 bytes.
pub mod names {
    /// The `SK_REUSEPORT` program.
    pub const PROG_STEER: &str = "statico_steer";
    /// `REUSEPORT_SOCKARRAY`: slot → listening socket of a worker.
    pub const MAP_SOCKETS: &str = "SOCKETS";
    /// `ARRAY` of u32: CPU id → slot in `SOCKETS` ([`super::NO_SLOT`]: let the kernel hash).
    pub const MAP_CPU_SLOTS: &str = "CPU_SLOTS";
    /// `PERCPU_ARRAY` of one [`super::SteerCounters`].
    pub const MAP_STEERING: &str = "STEERING";
    /// `ARRAY` (`BPF_F_MMAPABLE`) of [`super::WorkerRecord`], one per worker, written by the workers.
    pub const MAP_WORKERS: &str = "WORKERS";
    /// The XDP program counting the server's packets (`--xdp IFACE`).
    pub const PROG_XDP: &str = "statico_xdp";
    /// `ARRAY` of one u16: the server's TCP port, set by userspace before attaching.
    pub const MAP_XDP_PORT: &str = "XDP_PORT";
    /// `PERCPU_ARRAY` of one [`super::XdpCounters`].
    pub const MAP_XDP_STATS: &str = "XDP_STATS";
    /// The `SK_REUSEPORT` program of the QUIC (UDP) sockets (`--http3`).
    pub const PROG_STEER_QUIC: &str = "statico_steer_quic";
    /// `REUSEPORT_SOCKARRAY`: slot → UDP socket of a worker.
    pub const MAP_QUIC_SOCKETS: &str = "QUIC_SOCKETS";
    /// `PERCPU_ARRAY` of one [`super::QuicSteerCounters`].
    pub const MAP_QUIC_STEERING: &str = "QUIC_STEERING";
}

/// Length of the connection IDs statico issues for QUIC. Their first byte is the index of the worker
/// that holds the connection (the rest is random), so the QUIC steering program can send a packet to
/// that worker's socket whatever address it comes from.
pub const QUIC_CID_LEN: usize = 8;

/// What the QUIC steering program did, counted per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuicSteerCounters {
    /// Times the program ran (datagrams reaching the reuseport group).
    pub runs: u64,
    /// Datagrams sent to the worker named by their destination connection ID (short header, Handshake).
    pub by_id: u64,
    /// Datagrams left to the kernel's hash of their addresses and ports: Initial and 0-RTT packets
    /// (their connection ID is the client's), unreadable ones, or an ID naming no worker.
    pub by_hash: u64,
}

/// Packets and bytes of the server's TCP port (either direction) seen by the XDP program, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCounters {
    pub packets: u64,
    pub bytes: u64,
}

/// A CPU with no worker slot: the program returns `SK_PASS` without selecting, and the kernel hashes.
pub const NO_SLOT: u32 = u32::MAX;

/// What the steering program did, counted per CPU (one record per CPU in a per-CPU array).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SteerCounters {
    /// Times the program ran (new connections reaching the reuseport group).
    pub runs: u64,
    /// Connections sent to the listener of the worker on this CPU.
    pub steered: u64,
    /// Connections left to the kernel's hash: no slot for this CPU, or the slot was empty.
    pub fallbacks: u64,
}

// SAFETY: plain `#[repr(C)]` records of u64s: every bit pattern is valid, no padding, no pointers.
#[cfg(all(feature = "user", target_os = "linux"))]
unsafe impl aya::Pod for SteerCounters {}
#[cfg(all(feature = "user", target_os = "linux"))]
unsafe impl aya::Pod for QuicSteerCounters {}
#[cfg(all(feature = "user", target_os = "linux"))]
unsafe impl aya::Pod for WorkerRecord {}
#[cfg(all(feature = "user", target_os = "linux"))]
unsafe impl aya::Pod for XdpCounters {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_four_cache_lines_and_aligned() {
        assert_eq!(core::mem::size_of::<WorkerRecord>(), 256);
        assert_eq!(core::mem::align_of::<WorkerRecord>(), 64);
    }

    #[test]
    fn named_fields_sit_at_their_counter_slots() {
        use core::mem::offset_of;
        let slots = [
            (offset_of!(WorkerRecord, requests), Counter::Requests),
            (offset_of!(WorkerRecord, responses), Counter::Responses),
            (offset_of!(WorkerRecord, bytes_in), Counter::BytesIn),
            (offset_of!(WorkerRecord, bytes_out), Counter::BytesOut),
            (
                offset_of!(WorkerRecord, conns_accepted),
                Counter::ConnsAccepted,
            ),
            (offset_of!(WorkerRecord, conns_closed), Counter::ConnsClosed),
            (offset_of!(WorkerRecord, status_400), Counter::Status400),
            (offset_of!(WorkerRecord, timeouts), Counter::Timeouts),
            (offset_of!(WorkerRecord, status_413), Counter::Status413),
            (offset_of!(WorkerRecord, status_431), Counter::Status431),
            (offset_of!(WorkerRecord, status_501), Counter::Status501),
            (offset_of!(WorkerRecord, status_505), Counter::Status505),
            (offset_of!(WorkerRecord, reads), Counter::Reads),
            (offset_of!(WorkerRecord, writes), Counter::Writes),
            (
                offset_of!(WorkerRecord, tls_handshakes),
                Counter::TlsHandshakes,
            ),
            (offset_of!(WorkerRecord, tls_failures), Counter::TlsFailures),
            (offset_of!(WorkerRecord, tls_resumed), Counter::TlsResumed),
            (
                offset_of!(WorkerRecord, tls_no_common),
                Counter::TlsNoCommon,
            ),
            (
                offset_of!(WorkerRecord, tls_bad_record),
                Counter::TlsBadRecord,
            ),
            (
                offset_of!(WorkerRecord, tls_plain_http),
                Counter::TlsPlainHttp,
            ),
            (offset_of!(WorkerRecord, tls_timeouts), Counter::TlsTimeouts),
            (
                offset_of!(WorkerRecord, tls_abandoned),
                Counter::TlsAbandoned,
            ),
            (offset_of!(WorkerRecord, tls_bytes_in), Counter::TlsBytesIn),
            (
                offset_of!(WorkerRecord, tls_bytes_out),
                Counter::TlsBytesOut,
            ),
            (offset_of!(WorkerRecord, quic_conns), Counter::QuicConns),
            (
                offset_of!(WorkerRecord, quic_requests),
                Counter::QuicRequests,
            ),
            (
                offset_of!(WorkerRecord, quic_handshake_failures),
                Counter::QuicHandshakeFailures,
            ),
            (
                offset_of!(WorkerRecord, quic_bytes_in),
                Counter::QuicBytesIn,
            ),
            (
                offset_of!(WorkerRecord, quic_bytes_out),
                Counter::QuicBytesOut,
            ),
            (
                offset_of!(WorkerRecord, quic_datagrams_in),
                Counter::QuicDatagramsIn,
            ),
            (
                offset_of!(WorkerRecord, quic_datagrams_for_conns),
                Counter::QuicDatagramsForConns,
            ),
            (offset_of!(WorkerRecord, quic_retries), Counter::QuicRetries),
        ];
        for (offset, counter) in slots {
            assert_eq!(offset, counter as usize * 8, "{counter:?}");
        }
        assert_eq!(slots.len(), Counter::ALL.len());
    }

    #[test]
    fn counter_slots_are_unique_and_in_range() {
        for (i, (c, _)) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "Counter::ALL must be in slot order");
            assert!((*c as usize) < COUNTERS);
        }
    }
}
