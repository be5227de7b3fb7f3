//! The provided-buffer ring: receive buffers the kernel picks from for multishot receives, so that a
//! connection holds a buffer only while its bytes are being handled, never while it is idle.
//!
//! Only as many buffers are published as the receives take between two loop iterations (twice the
//! most recent batch, at least [`MIN_PUBLISHED`], decaying slowly); the rest wait in a stack, and the
//! ones handed back last are published first; the memory is on huge pages where the kernel has them.
//! The kernel takes buffers in ring order, so publishing all of them made every receive write into
//! the least recently used of 4 MiB, on its own page: while other processes shared the CPU, that
//! copy took up to a fifth of the server's CPU per `Connection: close` connection (2% on a quiet
//! machine); a few buffers in turn, on one or two TLB entries, keep it under 1%.
//!
//! Ownership of the memory is explicit, and no Rust reference ever covers memory the kernel may write
//! or read: a buffer belongs to the kernel from the moment it is published in the ring until a
//! completion names it; the ring entries are written through raw pointers only; the ring is
//! unregistered from the kernel before its memory is unmapped.

use std::io;
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::IoUring;

/// Provided receive buffers per worker, and the size of each.
pub const RECV_BUFFERS: u16 = 512;
pub const RECV_BUFFER_SIZE: usize = 8 * 1024;
/// Buffer group id of the receive buffer ring.
pub const BGID: u16 = 0;
/// Buffers published however little is received.
const MIN_PUBLISHED: u16 = 32;

/// One ring entry, as the kernel lays it out (`struct io_uring_buf`). In entry 0, `resv` is the
/// ring's tail, which the kernel reads.
#[repr(C)]
struct Entry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

const _: () = assert!(size_of::<Entry>() == size_of::<io_uring::types::BufRingEntry>());

pub struct BufRing {
    /// Page-aligned ring of entries shared with the kernel (mmap-ed).
    entries: *mut Entry,
    ring_bytes: usize,
    mask: u16,
    /// Our copy of the tail; published to the kernel through entry 0's `resv`.
    tail: u16,
    /// The buffers, `RECV_BUFFER_SIZE` each, contiguous, reached only through this raw pointer.
    memory: *mut u8,
    memory_len: usize,
    /// Still registered with a ring (see [`BufRing::unregister`]).
    registered: bool,
    /// Buffers neither published nor lent out, the most recently handed back on top.
    spare: Vec<u16>,
    /// Published and not yet named by a completion.
    published: u16,
    /// How many to keep published (see the module's doc).
    target: u16,
    /// Handed back since the last [`BufRing::refill`].
    taken: u16,
}

impl BufRing {
    /// Maps the ring, registers it with `ring` as group [`BGID`], and publishes every buffer.
    pub fn new(ring: &IoUring) -> io::Result<BufRing> {
        let count = RECV_BUFFERS;
        let ring_bytes = usize::from(count) * size_of::<Entry>();
        let addr = map(ring_bytes)?;
        let memory_len = usize::from(count) * RECV_BUFFER_SIZE;
        let memory = match map(memory_len) {
            Ok(memory) => memory,
            Err(e) => {
                // SAFETY: mapped just above with this length, and not yet known to the kernel's ring.
                unsafe { libc::munmap(addr, ring_bytes) };
                return Err(e);
            }
        };
        // Huge pages where the kernel has them: the buffers then take one or two TLB entries, not
        // one per buffer (a hint; without it they are ordinary pages).
        // SAFETY: advice on our own mapping, which it does not change the contents of.
        unsafe { libc::madvise(memory, memory_len, libc::MADV_HUGEPAGE) };
        let mut br = BufRing {
            entries: addr.cast(),
            ring_bytes,
            mask: count - 1,
            tail: 0,
            memory: memory.cast(),
            memory_len,
            registered: false,
            spare: (0..count).rev().collect(),
            published: 0,
            target: MIN_PUBLISHED,
            taken: 0,
        };
        // SAFETY: `addr` is a page-aligned mapping of `count` entries; it stays mapped until `Drop`,
        // which unregisters it first (or leaks it if that fails).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(addr as u64, count, BGID, 0)?
        };
        br.registered = true;
        br.refill();
        Ok(br)
    }

    /// Buffer `bid`, which a completion named, is done with: it goes on top of the spares.
    pub fn give_back(&mut self, bid: u16) {
        self.published = self.published.saturating_sub(1);
        self.taken = self.taken.saturating_add(1);
        self.spare.push(bid);
    }

    /// A receive found no buffer: all of them are published at the next refill.
    pub fn ran_out(&mut self) {
        self.target = RECV_BUFFERS;
    }

    /// Publishes spares, the most recently handed back first, until as many are published as the
    /// receives are taking; once per loop iteration, before the next submission.
    pub fn refill(&mut self) {
        let wanted = self
            .taken
            .saturating_mul(2)
            .clamp(MIN_PUBLISHED, RECV_BUFFERS);
        if wanted >= self.target {
            self.target = wanted;
        } else {
            self.target -= (self.target - wanted) / 8;
        }
        self.taken = 0;
        let before = self.published;
        while self.published < self.target {
            let Some(bid) = self.spare.pop() else { break };
            self.push(bid);
            self.published += 1;
        }
        if self.published != before {
            self.publish();
        }
    }

    /// Queues buffer `bid` for the kernel (visible to it after [`BufRing::publish`]).
    fn push(&mut self, bid: u16) {
        let slot = usize::from(self.tail & self.mask);
        let addr = self
            .memory
            .wrapping_add(usize::from(bid) * RECV_BUFFER_SIZE) as u64;
        // SAFETY: `slot` < `count` entries of the mapping. The kernel reads only entries between its
        // head and the published tail; this one is past the published tail until `publish`. Fields are
        // written through raw pointers (no reference to shared memory), and `resv` — the tail, in
        // entry 0 — is not touched here.
        unsafe {
            let e = self.entries.add(slot);
            addr_of_mut!((*e).addr).write(addr);
            addr_of_mut!((*e).len).write(RECV_BUFFER_SIZE as u32);
            addr_of_mut!((*e).bid).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes pushed buffers visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail is entry 0's `resv`, inside the mapping and 2-byte aligned; the kernel reads it
        // with acquire semantics, so it is written with a release store after the entries.
        unsafe {
            let tail = addr_of_mut!((*self.entries).resv).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// The `len` bytes the kernel received into buffer `bid`, which a completion
    /// just handed back to us.
    pub fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(
            bid < RECV_BUFFERS,
            "the kernel named a buffer we never provided"
        );
        // SAFETY: buffer `bid` is inside the allocation; a completion handed it to us, so the kernel
        // does not write it until we push and publish it again, which needs `&mut self` and so
        // happens after this slice is gone.
        unsafe {
            std::slice::from_raw_parts(
                self.memory.add(usize::from(bid) * RECV_BUFFER_SIZE),
                len.min(RECV_BUFFER_SIZE),
            )
        }
    }

    /// Takes the ring back from the kernel. Returns false if the kernel refused (then the memory must
    /// not be freed: see `Drop`).
    pub fn unregister(&mut self, ring: &IoUring) -> bool {
        if self.registered && ring.submitter().unregister_buf_ring(BGID).is_ok() {
            self.registered = false;
        }
        !self.registered
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.registered {
            return; // the kernel may still use it: leaked rather than freed
        }
        // SAFETY: both were mapped in `new` with these sizes, and the kernel no longer knows them
        // (unregistered, after every operation that could pick a buffer was reaped).
        unsafe {
            libc::munmap(self.entries.cast(), self.ring_bytes);
            libc::munmap(self.memory.cast(), self.memory_len);
        }
    }
}

/// `len` bytes of zeroed, page-aligned, private anonymous memory.
fn map(len: usize) -> io::Result<*mut libc::c_void> {
    // SAFETY: an anonymous private mapping with no address hint; the result is checked below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(addr)
}
