//! An HTTP/2 connection's transport as memory, for a runtime that moves the bytes itself (the io_uring
//! worker): the runtime [`Pipe::push`]es what it received, and sends what [`Pipe::take_output`] hands
//! it; the `h2` crate sees an `AsyncRead + AsyncWrite` ([`PipeIo`]) and never a socket.
//!
//! No waker is kept: a read with nothing to read, and a write into a full outbox, return `Pending`, and
//! the runtime polls the connection again whenever it pushed bytes, ended the input, or took output
//! from a full outbox — the only events that change what those calls would return. The inbox and the
//! outbox are bounded ([`IN_MAX`], [`OUT_MAX`]): past them the runtime stops receiving, and `h2` stops
//! writing, as a socket's buffers would make them.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Unread input past which the runtime stops receiving.
pub const IN_MAX: usize = 256 * 1024;
/// Unsent output past which writes wait.
pub const OUT_MAX: usize = 256 * 1024;
/// A buffer emptied with more capacity than this gives it back, so that an idle connection holds
/// little.
const KEEP: usize = 4 * 1024;

/// Both directions of one connection's bytes (see the module doc).
#[derive(Debug, Default)]
pub struct Pipe {
    inbox: Vec<u8>,
    /// How much of `inbox` was read.
    taken: usize,
    /// No more input will come (the peer closed, or the socket failed).
    eof: bool,
    outbox: Vec<u8>,
    /// A write found the outbox full (the runtime polls again once it took output).
    blocked: bool,
    /// The socket failed: writes fail.
    broken: bool,
    /// `h2` shut its side down.
    shut: bool,
}

impl Pipe {
    /// Bytes received.
    pub fn push(&mut self, data: &[u8]) {
        self.inbox.extend_from_slice(data);
    }

    /// The input ended (`broken`: the socket failed, so writes fail too).
    pub fn end_input(&mut self, broken: bool) {
        self.eof = true;
        self.broken |= broken;
    }

    /// Whether the runtime should receive: the input has not ended and the inbox has room.
    pub fn wants_input(&self) -> bool {
        !self.eof && self.inbox.len() - self.taken < IN_MAX
    }

    /// Moves the output written so far to the end of `into`; returns whether a write was waiting for
    /// room (then the connection must be polled again).
    pub fn take_output(&mut self, into: &mut Vec<u8>) -> bool {
        if into.is_empty() {
            std::mem::swap(into, &mut self.outbox);
        } else {
            into.extend_from_slice(&self.outbox);
            self.outbox.clear();
        }
        release(&mut self.outbox);
        std::mem::take(&mut self.blocked)
    }

    pub fn has_output(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Whether `h2` shut the connection down.
    pub fn is_shut(&self) -> bool {
        self.shut
    }
}

/// Empties `buf`, giving its memory back if it grew large.
pub fn release(buf: &mut Vec<u8>) {
    buf.clear();
    if buf.capacity() > KEEP {
        *buf = Vec::new();
    }
}

/// The `h2` side of a [`Pipe`].
#[derive(Clone, Debug, Default)]
pub struct PipeIo(pub Rc<RefCell<Pipe>>);

impl AsyncRead for PipeIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut p = self.0.borrow_mut();
        let unread = p.inbox.len() - p.taken;
        if unread == 0 {
            return if p.eof {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            };
        }
        let n = unread.min(buf.remaining());
        let at = p.taken;
        buf.put_slice(&p.inbox[at..at + n]);
        p.taken += n;
        if p.taken == p.inbox.len() {
            p.taken = 0;
            release(&mut p.inbox);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for PipeIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        slices: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut p = self.0.borrow_mut();
        if p.broken || p.shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if p.outbox.len() >= OUT_MAX {
            p.blocked = true;
            return Poll::Pending;
        }
        let mut n = 0;
        for s in slices {
            p.outbox.extend_from_slice(s);
            n += s.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.borrow_mut().shut = true;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn bytes_pass_both_ways_and_an_ended_input_reads_as_the_end() {
        let io = PipeIo::default();
        let mut h2 = io.clone();
        io.0.borrow_mut().push(b"hello");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut buf = [0u8; 8];
            assert_eq!(h2.read(&mut buf).await.unwrap(), 5);
            h2.write_all(b"frames").await.unwrap();
            io.0.borrow_mut().end_input(false);
            assert_eq!(h2.read(&mut buf).await.unwrap(), 0);
        });
        let mut out = Vec::new();
        assert!(!io.0.borrow_mut().take_output(&mut out));
        assert_eq!(out, b"frames");
    }
}
