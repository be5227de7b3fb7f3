//! An HTTP/2 connection's writes on a tokio socket, gathered into one send per turn of the worker.
//!
//! `h2` writes a connection's frames as its streams' answers are made and flushes after each poll of
//! the connection, which on a bare socket is a send per answer (and, with `TCP_NODELAY`, a segment
//! per answer). [`Gathered`] keeps what is written (up to [`GATHER_MAX`]) and sends it at a flush
//! only after the connection's task has yielded once, so that every answer made in one turn of the
//! worker leaves in one send — as io_uring's pipe sends them ([`crate::proto::http2::pipe`]). A write
//! of a large payload goes straight through (after what was kept), not copied.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Kept output past which a write first sends it.
const GATHER_MAX: usize = 64 * 1024;
/// Writes at least this long go straight to the socket rather than into the kept output.
const PASS_THROUGH: usize = 16 * 1024;
/// Kept output's capacity given back once it is sent, past this (an idle connection holds little).
const KEEP: usize = 4 * 1024;

/// A transport whose writes are gathered (see the module doc).
pub struct Gathered<T> {
    inner: T,
    out: Vec<u8>,
    /// How much of `out` the socket took.
    sent: usize,
    /// A flush found output kept and yielded once; the next flush sends it.
    yielded: bool,
}

impl<T> Gathered<T> {
    pub fn new(inner: T) -> Gathered<T> {
        Gathered {
            inner,
            out: Vec::new(),
            sent: 0,
            yielded: false,
        }
    }
}

impl<T: AsyncWrite + Unpin> Gathered<T> {
    /// Sends the kept output; `Pending` while the socket is full.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.sent = 0;
        self.out.clear();
        if self.out.capacity() > KEEP {
            self.out = Vec::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Gathered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Gathered<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len: usize = slices.iter().map(|s| s.len()).sum();
        if len >= PASS_THROUGH || this.out.len() >= GATHER_MAX {
            ready!(this.poll_send(cx))?;
        }
        if len >= PASS_THROUGH {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, slices);
        }
        for s in slices {
            this.out.extend_from_slice(s);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.sent < this.out.len() && !this.yielded {
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.poll_send(cx))?;
        this.yielded = false;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_kept_until_a_flush_after_one_yield_then_sent_whole() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut g = Gathered::new(Vec::new());
        for piece in [&b"head"[..], b"body"] {
            assert!(matches!(
                Pin::new(&mut g).poll_write(&mut cx, piece),
                Poll::Ready(Ok(4))
            ));
        }
        assert!(g.inner.is_empty(), "kept, not sent");
        assert!(
            Pin::new(&mut g).poll_flush(&mut cx).is_pending(),
            "the first flush yields"
        );
        assert!(matches!(
            Pin::new(&mut g).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(g.inner, b"headbody");
        let big = vec![7u8; PASS_THROUGH];
        let _ = Pin::new(&mut g).poll_write(&mut cx, b"x");
        let _ = Pin::new(&mut g).poll_write(&mut cx, &big);
        assert_eq!(
            g.inner.len(),
            8 + 1 + PASS_THROUGH,
            "kept output first, then the payload"
        );
    }
}
