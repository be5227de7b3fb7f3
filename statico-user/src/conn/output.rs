//! A connection's output: the bytes to send, in order, as a queue of chunks — bytes of its own (heads,
//! small bodies, a pipelined batch's responses together) and shared bodies (a static site's large
//! files), which are sent from where the site stores them rather than copied into every connection
//! that asks for them. A client that asks for a 100 MB file and never reads holds a reference, not a
//! copy.
//!
//! A runtime sends [`Output::slices`] (up to as many chunks as it has room for, in one `writev` or
//! `sendmsg`) and reports how much went. A runtime that can call `sendfile` asks [`Output::next`]
//! instead: a large shared body that lies in a file (a site's sealed store, see `catalog::site::store`) then
//! goes out from that file, the kernel taking its pages rather than copying them. While a send is in flight ([`Output::freeze`]) new bytes
//! start a new chunk, so nothing the kernel reads moves or grows.

use std::collections::VecDeque;

use bytes::Bytes;

pub use crate::catalog::sink::{FileAt, Sink};

/// Bodies at least this long are sent from their shared buffer (one more slice in the send) rather
/// than copied; shorter ones cost less to copy than to describe.
pub const SHARE_MIN: usize = 4 * 1024;

/// Shared bodies at least this long that lie in a file are sent with `sendfile` by a runtime that
/// can (one more syscall, no copy): measured on loopback, `sendfile` costs as much CPU as a copy at
/// 12 KiB, 10-15% less at 32 KiB, 20-35% less at 128 KiB.
pub const SENDFILE_MIN: usize = 16 * 1024;

/// Most slices one send carries.
pub const MAX_SLICES: usize = 64;

/// An own chunk that grew past this (a large body, deep pipelining) is freed once sent rather than
/// kept: an idle connection holds at most this much output memory.
const KEEP_CAPACITY: usize = 4 * 1024;

/// The next send, for a runtime that can call `sendfile` ([`Output::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Nothing,
    /// Send the first `count` slices; `file_follows`: a file's bytes come next (send with `MSG_MORE`).
    Slices {
        count: usize,
        file_follows: bool,
    },
    /// Send `len` bytes of the file from `at`.
    File {
        at: FileAt,
        len: usize,
    },
}

#[derive(Debug)]
enum Chunk {
    Own(Vec<u8>),
    Shared(Bytes, Option<FileAt>),
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Own(v) => v,
            Chunk::Shared(b, _) => b,
        }
    }

    /// Where this chunk lies in a file, if it is worth `sendfile`.
    fn file(&self) -> Option<FileAt> {
        match self {
            Chunk::Shared(b, Some(at)) if b.len() >= SENDFILE_MIN => Some(*at),
            _ => None,
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
        self.slices_of(self.chunks.len(), slices)
    }

    /// [`Output::slices`] of the first `chunks` chunks.
    fn slices_of<'a>(&'a self, chunks: usize, slices: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut k = 0;
        for (i, chunk) in self.chunks.iter().take(chunks).enumerate() {
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

    /// The next send when `sendfile` is at hand: a file's bytes if the front chunk lies in one, else
    /// the slices up to the first chunk that does (written into `slices`).
    pub fn next<'a>(&'a self, slices: &mut [std::io::IoSlice<'a>]) -> Next {
        let Some(front) = self.chunks.front() else {
            return Next::Nothing;
        };
        if let Some(at) = front.file() {
            let len = front.bytes().len() - self.sent;
            let at = FileAt {
                offset: at.offset + self.sent as u64,
                ..at
            };
            return Next::File { at, len };
        }
        let file = self.chunks.iter().position(|c| c.file().is_some());
        let upto = file.unwrap_or(self.chunks.len());
        let count = self.slices_of(upto, slices);
        match count {
            0 => Next::Nothing,
            _ => Next::Slices {
                count,
                // Every chunk before the file fitted in the slices.
                file_follows: file.is_some() && count == self.unsent_chunks(upto),
            },
        }
    }

    /// How many of the first `chunks` chunks have bytes to send (each is one slice).
    fn unsent_chunks(&self, chunks: usize) -> usize {
        let rest = self.chunks.iter().take(chunks).skip(1);
        usize::from(!self.front().is_empty()) + rest.filter(|c| !c.bytes().is_empty()).count()
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
        // A small own buffer sent is kept, emptied, for the next responses (a head sent before a
        // shared body included): once warm, a connection allocates nothing per response.
        let mut spare = None;
        while let Some(front) = self.chunks.front() {
            let len = front.bytes().len();
            if self.sent < len || (len == 0 && self.chunks.len() == 1) {
                break;
            }
            self.sent -= len;
            match self.chunks.pop_front() {
                Some(Chunk::Own(v)) if spare.is_none() && v.capacity() <= KEEP_CAPACITY => {
                    spare = Some(v)
                }
                _ => {}
            }
        }
        let needed = !matches!(self.chunks.back(), Some(Chunk::Own(_)));
        if let (true, Some(mut v)) = (needed, spare) {
            v.clear();
            self.chunks.push_back(Chunk::Own(v));
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

/// An answer staged apart from the output — a held answer — as the output keeps it: own bytes, and
/// shared bodies by reference (a static site's file, a route's body: never copied, still sent with
/// `sendfile`); moved into the output by byte ranges ([`Staged::move_range`]) as it is let go.
#[derive(Debug, Default)]
pub struct Staged {
    chunks: Vec<Chunk>,
    len: usize,
}

impl Staged {
    /// Empties it, keeping its first own buffer for the next answer.
    pub fn clear(&mut self) {
        self.chunks.truncate(1);
        match self.chunks.first_mut() {
            Some(Chunk::Own(v)) => v.clear(),
            _ => self.chunks.clear(),
        }
        self.len = 0;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends bytes `from..to` of the staged answer to `out`: own bytes copied, shared bodies (or
    /// the part of one in the range) by reference.
    pub fn move_range(&self, from: usize, to: usize, out: &mut Output) {
        let mut at = 0;
        for chunk in &self.chunks {
            let len = chunk.bytes().len();
            let (start, end) = (from.max(at), to.min(at + len));
            if start < end {
                let (a, b) = (start - at, end - at);
                match chunk {
                    Chunk::Own(v) => out.extend_from_slice(&v[a..b]),
                    Chunk::Shared(body, file) => {
                        let file = file.map(|f| FileAt {
                            offset: f.offset + a as u64,
                            ..f
                        });
                        out.share(&body.slice(a..b), file);
                    }
                }
            }
            at += len;
        }
    }
}

impl Sink for Staged {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        if !matches!(self.chunks.last(), Some(Chunk::Own(_))) {
            self.chunks.push(Chunk::Own(Vec::new()));
        }
        if let Some(Chunk::Own(v)) = self.chunks.last_mut() {
            v.extend_from_slice(bytes);
        }
        self.len += bytes.len();
    }

    fn share(&mut self, body: &Bytes, file: Option<FileAt>) {
        if body.len() < SHARE_MIN {
            return self.extend_from_slice(body);
        }
        self.chunks.push(Chunk::Shared(body.clone(), file));
        self.len += body.len();
    }

    fn unsent(&self) -> usize {
        self.len
    }
}

impl Sink for Output {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.tail().extend_from_slice(bytes);
            self.unsent += bytes.len();
        }
    }

    fn share(&mut self, body: &Bytes, file: Option<FileAt>) {
        if body.len() < SHARE_MIN {
            return self.extend_from_slice(body);
        }
        // An empty own chunk at the back (kept for reuse) would stay stranded before it: drop it.
        if matches!(self.chunks.back(), Some(Chunk::Own(v)) if v.is_empty()) {
            self.chunks.pop_back();
        }
        self.chunks.push_back(Chunk::Shared(body.clone(), file));
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
        out.share(&big, None);
        out.extend_from_slice(b"head2");
        out.share(&Bytes::from_static(b"small body"), None);
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
        out.share(&big, None);
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

    /// [`Output::next`] with room for `room` slices, and the bytes of those slices.
    fn next(out: &Output, room: usize) -> (Next, Vec<u8>) {
        let mut s = vec![std::io::IoSlice::new(&[]); room];
        let next = out.next(&mut s);
        let n = match next {
            Next::Slices { count, .. } => count,
            _ => 0,
        };
        (
            next,
            s[..n].iter().flat_map(|x| x.iter().copied()).collect(),
        )
    }

    #[test]
    fn next_sends_heads_then_a_file_body_from_where_it_lies() {
        let at = |offset| FileAt { fd: 7, offset };
        let slices = |count, file_follows| Next::Slices {
            count,
            file_follows,
        };
        let big = Bytes::from(vec![5u8; SENDFILE_MIN]);
        let mid = Bytes::from(vec![6u8; SHARE_MIN]);
        let mut out = Output::default();
        out.extend_from_slice(b"head");
        out.share(&mid, Some(at(0))); // too short for sendfile: a slice
        out.extend_from_slice(b"head2");
        out.share(&big, Some(at(100)));
        out.extend_from_slice(b"tail");
        assert_eq!(next(&out, MAX_SLICES).0, slices(3, true));
        out.freeze();
        out.sent(4 + SHARE_MIN + 5);
        let len = SENDFILE_MIN;
        assert_eq!(next(&out, MAX_SLICES).0, Next::File { at: at(100), len });
        out.freeze();
        out.sent(1000);
        let len = SENDFILE_MIN - 1000;
        assert_eq!(next(&out, MAX_SLICES).0, Next::File { at: at(1100), len });
        out.freeze();
        out.sent(len);
        assert_eq!(next(&out, MAX_SLICES), (slices(1, false), b"tail".to_vec()));
        out.share(&big, Some(at(0)));
        assert_eq!(next(&out, 1), (slices(1, true), b"tail".to_vec()));
        let mut out = Output::default();
        out.extend_from_slice(b"a");
        out.share(&mid, None);
        out.share(&big, Some(at(0)));
        assert_eq!(
            next(&out, 1).0,
            slices(1, false),
            "no room for all before the file"
        );
        assert_eq!(next(&out, 2).0, slices(2, true));
    }

    #[test]
    fn a_small_buffer_is_kept_for_reuse_and_a_large_one_freed() {
        let mut out = Output::default();
        out.extend_from_slice(b"head");
        out.share(&Bytes::from(vec![1u8; SHARE_MIN]), None);
        let head = out.front().as_ptr();
        drain(&mut out, usize::MAX);
        out.extend_from_slice(b"next head");
        assert_eq!(out.front().as_ptr(), head, "the head's buffer is reused");
        drain(&mut out, usize::MAX);
        out.extend_from_slice(&[0u8; KEEP_CAPACITY * 2]);
        drain(&mut out, usize::MAX);
        assert!(out.chunks.is_empty());
    }

    #[test]
    fn a_staged_answer_moves_by_ranges_and_keeps_shared_bodies_shared() {
        let body = Bytes::from(vec![b'b'; 3 * SHARE_MIN]);
        let mut staged = Staged::default();
        staged.extend_from_slice(b"head:");
        staged.share(&body, Some(FileAt { fd: 7, offset: 100 }));
        staged.extend_from_slice(b":tail");
        let whole = [&b"head:"[..], &body, b":tail"].concat();
        assert_eq!(staged.len(), whole.len());
        let mut out = Output::default();
        let half = 5 + body.len() / 2;
        staged.move_range(0, half, &mut out);
        staged.move_range(half, staged.len(), &mut out);
        let shared = out
            .chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Shared(..)))
            .count();
        assert_eq!(shared, 2, "the body went by reference, in two slices");
        let offsets: Vec<u64> = (out.chunks.iter())
            .filter_map(|c| match c {
                Chunk::Shared(_, Some(at)) => Some(at.offset),
                _ => None,
            })
            .collect();
        assert_eq!(offsets, [100, 100 + (half - 5) as u64]);
        assert_eq!(drain(&mut out, 1000), whole);
        staged.clear();
        assert!(staged.is_empty());
    }
}
