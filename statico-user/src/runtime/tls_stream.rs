//! A TLS session continued as a tokio byte stream, for HTTP/2 over TLS on the tokio runtime.
//!
//! The handshake (and ALPN `h2`) is done by the shared record layer (`tls.rs`) like any HTTPS
//! connection; when the connection then turns out to speak HTTP/2, the `h2` crate needs an
//! `AsyncRead + AsyncWrite`, so the same rustls session carries on here: ciphertext from the socket
//! into `read_tls`, plaintext out of `reader()`; plaintext into `writer()`, records out with
//! `write_tls` straight into the socket. (tokio-rustls cannot take over a session that is already
//! established, hence these few lines.)

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use statico_common::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::observe::meter::WorkerCounters;

pub struct TlsStream<'a> {
    io: TcpStream,
    tls: rustls::ServerConnection,
    /// Ciphertext bytes in and out are counted here (`tls_bytes_in`, `tls_bytes_out`).
    counters: &'a WorkerCounters,
    /// The socket has reached its end.
    eof: bool,
    close_notify_sent: bool,
}

impl super::gather::Abortable for TlsStream<'_> {
    fn abort_on_close(&self) {
        self.io.abort_on_close();
    }
}

impl<'a> TlsStream<'a> {
    pub fn new(io: TcpStream, tls: rustls::ServerConnection, counters: &'a WorkerCounters) -> Self {
        TlsStream {
            io,
            tls,
            counters,
            eof: false,
            close_notify_sent: false,
        }
    }

    /// Writes rustls's pending records to the socket.
    fn flush_records(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.tls.wants_write() {
            let mut socket = SocketWriter { io: &self.io, cx };
            match self.tls.write_tls(&mut socket) {
                Ok(n) => self.counters.add(Counter::TlsBytesOut, n as u64),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Reads ciphertext from the socket into the session — as much as it takes, straight from the
    /// socket, so that no byte read is left over when its buffer is full — and decrypts it.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut socket = SocketReader { io: &self.io, cx };
        let got = match self.tls.read_tls(&mut socket) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if got == 0 {
            self.eof = true;
            return Poll::Ready(Ok(()));
        }
        self.counters.add(Counter::TlsBytesIn, got as u64);
        if let Err(e) = self.tls.process_new_packets() {
            let _ = self.flush_records(cx); // the alert, if it can go
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        let _ = self.flush_records(cx)?; // anything the session has to say back
        Poll::Ready(Ok(()))
    }
}

/// `Read` from a tokio socket inside a poll: `WouldBlock` while it has nothing, with the waker set.
struct SocketReader<'a, 'b> {
    io: &'a TcpStream,
    cx: &'a mut Context<'b>,
}

impl Read for SocketReader<'_, '_> {
    fn read(&mut self, into: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.io.poll_read_ready(self.cx) {
                Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Ready(Ok(())) => {}
            }
            match self.io.try_read(into) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    }
}

/// `Write` into a tokio socket from inside a poll: `WouldBlock` once it is full, with the waker set.
struct SocketWriter<'a, 'b> {
    io: &'a TcpStream,
    cx: &'a mut Context<'b>,
}

impl Write for SocketWriter<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(bytes)])
    }

    /// Every record the session has ready in one `writev` (rustls hands them over together).
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        loop {
            match self.io.poll_write_ready(self.cx) {
                Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Ready(Ok(())) => {}
            }
            match self.io.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsyncRead for TlsStream<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.tls.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            ready!(this.fill(cx))?;
        }
    }
}

impl AsyncWrite for TlsStream<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    /// The slices as one plaintext write (an HTTP/2 frame's head and payload in one record), its
    /// records sent at once.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut n = this.tls.writer().write_vectored(slices)?;
        if n == 0 && slices.iter().any(|s| !s.is_empty()) {
            ready!(this.flush_records(cx))?;
            n = this.tls.writer().write_vectored(slices)?;
        }
        let _ = this.flush_records(cx)?;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().flush_records(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_notify_sent {
            this.tls.send_close_notify();
            this.close_notify_sent = true;
        }
        ready!(this.flush_records(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
