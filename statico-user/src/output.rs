//! A connection's output: the bytes to send, in order, as a queue of chunks — bytes of its own (heads,
//! small bodies, a pipelined batch's responses together) and shared bodies (a static site's large
//! files), which are sent from where the site stores them rather than copied into every connection
//! that asks for them. A client that asks for a 100 MB file and never reads holds a reference, not a
//! copy.
//!
//! A runtime sends [`Output::front`] (one contiguous slice) and reports how much went. While a send is
//! in flight ([`Output::freeze`]) new bytes start a new chunk, so the slice the kernel reads never
//! moves or grows.

use std::collections::VecDeque;

use bytes::Bytes;

/// Bodies at least this long are sent from their shared buffer (one more send per body) rather than
/// copied; shorter ones are copied, so that a pipelined batch of them leaves in one write.
pub const SHARE_MIN: usize = 64 * 1024;

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
    /// A send of the front chunk is in flight: it must neither move nor grow.
    frozen: bool,
}

impl Output {
    /// The bytes to send next (empty: nothing to send).
    pub fn front(&self) -> &[u8] {
        self.chunks
            .front()
            .map_or(&[][..], |c| &c.bytes()[self.sent..])
    }

    /// A send of [`Output::front`] is in flight.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// `n` bytes of the front were sent (0: the socket took nothing); the send is over.
    pub fn sent(&mut self, n: usize) {
        self.frozen = false;
        self.sent += n;
        self.unsent -= n;
        while let Some(front) = self.chunks.front() {
            if self.sent < front.bytes().len() {
                break;
            }
            self.sent = 0;
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

    /// The chunk new bytes go to: the last one if it is our own and may grow, else a new one.
    fn tail(&mut self) -> &mut Vec<u8> {
        let frozen_front = self.frozen && self.chunks.len() == 1;
        if frozen_front || !matches!(self.chunks.back(), Some(Chunk::Own(_))) {
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
        if matches!(self.chunks.back(), Some(Chunk::Own(v)) if v.is_empty())
            && !(self.frozen && self.chunks.len() == 1)
        {
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
