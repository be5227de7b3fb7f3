//! An HTTP/2 connection's writes on a tokio socket, gathered into one send per turn of the worker.
//!
//! `h2` writes a connection's frames as its streams' answers are made and flushes after each poll of
//! the connection, which on a bare socket is a send per answer (and, with `TCP_NODELAY`, a segment
//! per answer). [`Gathered`] keeps what is written (up to [`GATHER_MAX`]) and sends it at a flush
//! only in a later turn of the connection's task than the one that first found it kept (a turn is one
//! poll of the task, counted by [`in_turns`]; the first flush wakes the task and yields). So every
//! answer made in one turn leaves in one send, however often `h2` flushes within the turn — as
//! io_uring's pipe sends them ([`crate::proto::http2::pipe`]). A write of a large payload goes
//! straight through (after what was kept), not copied.
//!
//! A connection that ends stalled ([`OutputState::stall`](crate::proto::http2::OutputState::stall))
//! is closed with a reset: as [`Gathered`] drops, before its socket closes, it sets `SO_LINGER` 0.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::proto::http2::OutputMoved;

/// Kept output past which a write first sends it.
const GATHER_MAX: usize = 64 * 1024;
/// Writes at least this long go straight to the socket rather than into the kept output.
const PASS_THROUGH: usize = 16 * 1024;
/// Room made for a turn's output at its first write (more if that write is longer): the output is
/// given back once sent, so an idle connection holds none.
const ROOM: usize = 4 * 1024;

/// The count of a task's polls, shared by [`in_turns`] (which counts) and [`Gathered`] (which reads).
#[derive(Clone, Default)]
pub struct Turns(Rc<Cell<u64>>);

/// Runs `future`, counting each poll of it as a turn of `turns`.
pub async fn in_turns<F: Future>(turns: &Turns, future: F) -> F::Output {
    let mut future = pin!(future);
    poll_fn(|cx| {
        turns.0.set(turns.0.get() + 1);
        future.as_mut().poll(cx)
    })
    .await
}

/// A socket whose close can be made a reset.
pub trait Abortable {
    /// Sets `SO_LINGER` 0: the socket's close sends RST and drops what it holds unsent.
    fn abort_on_close(&self);
}

impl Abortable for tokio::net::TcpStream {
    fn abort_on_close(&self) {
        linger_zero(socket2::SockRef::from(self));
    }
}

/// A socket not yet registered with tokio (a new connection's first exchange).
impl Abortable for std::net::TcpStream {
    fn abort_on_close(&self) {
        linger_zero(socket2::SockRef::from(self));
    }
}

fn linger_zero(socket: socket2::SockRef<'_>) {
    let _ = socket.set_linger(Some(std::time::Duration::ZERO));
}

/// A transport whose writes are gathered (see the module doc).
pub struct Gathered<T: Abortable> {
    inner: T,
    /// The connection's output, shared with its protocol: whether it ended stalled.
    output: OutputMoved,
    out: Vec<u8>,
    /// How much of `out` the socket took.
    sent: usize,
    turns: Turns,
    /// The turn in which a flush found output kept, woke the task and yielded: a flush in a later
    /// turn sends it.
    yielded_in: Option<u64>,
}

impl<T: Abortable> Gathered<T> {
    /// `inner`'s writes gathered per turn of `turns`, which must count the polls of the task that
    /// writes (see [`in_turns`]); `output`: the connection's, as its protocol sees it.
    pub fn new(inner: T, turns: Turns, output: OutputMoved) -> Gathered<T> {
        Gathered {
            inner,
            output,
            out: Vec::new(),
            sent: 0,
            turns,
            yielded_in: None,
        }
    }
}

impl<T: Abortable> Drop for Gathered<T> {
    fn drop(&mut self) {
        if self.output.stalled() {
            self.inner.abort_on_close();
        }
    }
}

impl<T: Abortable + AsyncWrite + Unpin> Gathered<T> {
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
        self.out = Vec::new();
        Poll::Ready(Ok(()))
    }
}

impl<T: Abortable + AsyncRead + Unpin> AsyncRead for Gathered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: Abortable + AsyncWrite + Unpin> AsyncWrite for Gathered<T> {
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
        if this.out.capacity() == 0 {
            this.out.reserve(ROOM.max(len));
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
        if this.sent < this.out.len() {
            let turn = this.turns.0.get();
            match this.yielded_in {
                None => {
                    this.yielded_in = Some(turn);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(t) if t == turn => {
                    cx.waker().wake_by_ref(); // this turn's waker, whichever polls
                    return Poll::Pending;
                }
                Some(_) => {}
            }
        }
        ready!(this.poll_send(cx))?;
        this.yielded_in = None;
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

    impl Abortable for Vec<u8> {
        fn abort_on_close(&self) {}
    }

    #[test]
    fn writes_are_kept_until_a_flush_in_a_later_turn_then_sent_whole() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let turns = Turns::default();
        let mut g = Gathered::new(
            Vec::new(),
            turns.clone(),
            crate::proto::http2::output_moved_now(),
        );
        for piece in [&b"head"[..], b"body"] {
            assert!(matches!(
                Pin::new(&mut g).poll_write(&mut cx, piece),
                Poll::Ready(Ok(4))
            ));
            assert!(
                Pin::new(&mut g).poll_flush(&mut cx).is_pending(),
                "a flush in the turn that found output kept yields"
            );
        }
        assert!(g.inner.is_empty(), "kept, not sent");
        turns.0.set(1);
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
