//! A connection's output: the bytes to send, in order, as a queue of chunks — bytes of its own (heads,
//! small bodies, a pipelined batch's responses together) and shared bodies (a static site's large
//! files), which are sent from where the site stores them rather than copied into every connection
//! that asks for them. A client that asks for a 100 MB file and never reads holds a reference, not a
//! copy.
//!
//! A runtime sends [`Output::slices`] (up to as many chunks as it has room for, in one `writev` or
//! `sendmsg`) and reports how much went. While a send is in flight ([`Output::freeze`]) new bytes
//! start a new chunk, so nothing the kernel reads moves or grows.

use std::collections::VecDeque;

use bytes::Bytes;

/// Bodies at least this long are sent from their shared buffer (one more slice in the send) rather
/// than copied; shorter ones cost less to copy than to describe.
pub const SHARE_MIN: usize = 4 * 1024;

/// Most slices one send carries.
pub const MAX_SLICES: usize = 64;

/// An own chunk that grew past this (a large body, deep pipelining) is freed once sent rather than
/// kept: an idle connection holds at most this much output memory.
const KEEP_CAPACITY: usize = 4 * 1024;

/// Where a session writes its responses: a connection's [`Output`], or a plain buffer (a response
/// held for `--delay`, a test).
pub trait Sink {
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// A body stored elsewhere (a static site's): kept by reference where worth it, else copied.
    fn share(&mut self, body: &Bytes);
    /// Bytes written and not yet sent.
    fn unsent(&self) -> usize;
}

impl Sink for Vec<u8> {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }

    fn share(&mut self, body: &Bytes) {
        Vec::extend_from_slice(self, body);
    }

    fn unsent(&self) -> usize {
        self.len()
    }
}

#[derive(Debug)]
enum Chunk {
    Own(Vec<u8>),
    Shared(Bytes),
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Own(v) => v,
            Chunk::Shared(b) => b,
        }
    }
}

#[derive(Debug, Default)]
pub struct Output {
    chunks: VecDeque<Chunk>,
    /// Bytes of the front chunk already sent.
    sent: usize,
    /// Bytes written and not yet sent, in every chunk.
    unsent: usize,
    /// A send is in flight over the first this many chunks: they must neither move nor grow.
    frozen: usize,
}

impl Output {
    /// The bytes to send next (empty: nothing to send).
    pub fn front(&self) -> &[u8] {
        self.chunks
            .front()
            .map_or(&[][..], |c| &c.bytes()[self.sent..])
    }

    /// The bytes to send next as slices, in order, as many as `slices` holds; returns how many.
    pub fn slices<'a>(&'a self, slices: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut k = 0;
        for (i, chunk) in self.chunks.iter().enumerate() {
            if k == slices.len() {
                break;
            }
            let bytes = if i == 0 {
                &chunk.bytes()[self.sent..]
            } else {
                chunk.bytes()
            };
            if !bytes.is_empty() {
                slices[k] = std::io::IoSlice::new(bytes);
                k += 1;
            }
        }
        k
    }

    /// A send of [`Output::front`] or [`Output::slices`] is in flight.
    pub fn freeze(&mut self) {
        self.frozen = self.chunks.len();
    }

    /// Whether a send is in flight (between [`Output::freeze`] and [`Output::sent`]).
    pub fn in_flight(&self) -> bool {
        self.frozen > 0
    }

    /// `n` bytes were sent, from the front on (0: the socket took nothing); the send is over.
    pub fn sent(&mut self, n: usize) {
        self.frozen = 0;
        self.unsent -= n;
        self.sent += n;
        while let Some(front) = self.chunks.front() {
            let len = front.bytes().len();
            if self.sent < len || (len == 0 && self.chunks.len() == 1) {
                break;
            }
            self.sent -= len;
            match self.chunks.pop_front() {
                // The last chunk, small: kept empty for the next responses.
                Some(Chunk::Own(mut v))
                    if self.chunks.is_empty() && v.capacity() <= KEEP_CAPACITY =>
                {
                    v.clear();
                    self.chunks.push_back(Chunk::Own(v));
                    break;
                }
                _ => {}
            }
        }
    }

    /// The chunk new bytes go to: the last one if it is our own and may grow (no send in flight can
    /// be reading it), else a new one.
    fn tail(&mut self) -> &mut Vec<u8> {
        let growable =
            matches!(self.chunks.back(), Some(Chunk::Own(_))) && self.chunks.len() > self.frozen;
        if !growable {
            self.chunks.push_back(Chunk::Own(Vec::new()));
        }
        match self.chunks.back_mut() {
            Some(Chunk::Own(v)) => v,
            _ => unreachable!("an own chunk was just pushed"),
        }
    }
}

impl Sink for Output {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.tail().extend_from_slice(bytes);
            self.unsent += bytes.len();
        }
    }

    fn share(&mut self, body: &Bytes) {
        if body.len() < SHARE_MIN {
            return self.extend_from_slice(body);
        }
        // An empty own chunk at the back (kept for reuse) would stay stranded before it: drop it.
        if matches!(self.chunks.back(), Some(Chunk::Own(v)) if v.is_empty()) {
            self.chunks.pop_back();
        }
        self.chunks.push_back(Chunk::Shared(body.clone()));
        self.unsent += body.len();
    }

    fn unsent(&self) -> usize {
        self.unsent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends everything in pieces of at most `step`, as a socket would take it.
    fn drain(out: &mut Output, step: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while !out.front().is_empty() {
            let n = out.front().len().min(step);
            got.extend_from_slice(&out.front()[..n]);
            out.freeze();
            out.sent(n);
        }
        got
    }

    #[test]
    fn own_bytes_and_shared_bodies_leave_in_order() {
        let big = Bytes::from(vec![7u8; SHARE_MIN]);
        let mut out = Output::default();
        out.extend_from_slice(b"head1");
        out.share(&big);
        out.extend_from_slice(b"head2");
        out.share(&Bytes::from_static(b"small body"));
        assert_eq!(out.unsent(), 5 + SHARE_MIN + 5 + 10);
        assert_eq!(
            out.front(),
            b"head1",
            "the shared body is not copied behind the head"
        );
        let got = drain(&mut out, 1000);
        let want = [&b"head1"[..], &big, b"head2", b"small body"].concat();
        assert_eq!(got, want);
        assert_eq!(out.unsent(), 0);
    }

    #[test]
    fn bytes_written_during_a_send_do_not_move_what_is_being_sent() {
        let mut out = Output::default();
        out.extend_from_slice(b"first");
        let before = out.front().as_ptr();
        out.freeze();
        out.extend_from_slice(&[1u8; 10_000]); // would reallocate the first chunk if appended to it
        assert_eq!(out.front().as_ptr(), before);
        assert_eq!(out.front(), b"first");
        out.sent(2);
        assert_eq!(out.front(), b"rst");
        assert_eq!(drain(&mut out, 4096).len(), 3 + 10_000);
    }

    #[test]
    fn slices_cover_every_chunk_and_a_send_across_them_advances_through_them() {
        let big = Bytes::from(vec![3u8; SHARE_MIN]);
        let mut out = Output::default();
        out.extend_from_slice(b"ab");
        out.share(&big);
        out.extend_from_slice(b"cd");
        let mut s = [std::io::IoSlice::new(&[]); MAX_SLICES];
        assert_eq!(out.slices(&mut s), 3);
        let first: Vec<u8> = s[..3].iter().flat_map(|x| x.iter().copied()).collect();
        assert_eq!(first, [&b"ab"[..], &big, b"cd"].concat());
        out.freeze();
        out.extend_from_slice(b"ef"); // during the send: a new chunk
        out.sent(2 + SHARE_MIN + 1); // into the last chunk sent
        let mut s = [std::io::IoSlice::new(&[]); MAX_SLICES];
        let k = out.slices(&mut s);
        let rest: Vec<u8> = s[..k].iter().flat_map(|x| x.iter().copied()).collect();
        assert_eq!(rest, b"def");
        assert_eq!(out.unsent(), 3);
    }

    #[test]
    fn a_small_buffer_is_kept_for_reuse_and_a_large_one_freed() {
        let mut out = Output::default();
        out.extend_from_slice(b"x");
        drain(&mut out, 100);
        assert!(matches!(out.chunks.back(), Some(Chunk::Own(v)) if v.capacity() > 0));
        out.extend_from_slice(&[0u8; KEEP_CAPACITY * 2]);
        drain(&mut out, usize::MAX);
        assert!(out.chunks.is_empty());
    }
}
