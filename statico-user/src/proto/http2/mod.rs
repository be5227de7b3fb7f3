//! `--http2`: cleartext HTTP/2 on the same port as HTTP/1.1 (and HTTP/2 by ALPN over TLS), served by
//! the `h2` crate on both runtimes: the protocol is written once here, over any `AsyncRead +
//! AsyncWrite` — a tokio socket, or the io_uring worker's in-memory [`pipe`] — and its timers are
//! [`crate::kernel::timer`]'s, which work on either runtime's thread. [`switch`] is where a connection
//! that leaves HTTP/1.1 enters.
//!
//! A connection speaks HTTP/2 if its first bytes are the client connection preface (prior knowledge),
//! or if an HTTP/1.1 request asks for `Upgrade: h2c` (then statico answers `101 Switching Protocols`
//! and the request is answered on stream 1, RFC 7540 §3.2). The `h2` crate has no server-side upgrade,
//! so [`Rewind`] presents it with what it expects from a prior-knowledge client: the preface, the
//! client's first SETTINGS frame, then a HEADERS frame for stream 1 that statico encodes from the
//! HTTP/1.1 request.
//!
//! Every stream gets the configured response; the request body is read to its end (so flow control and
//! the content-length check of `h2` apply) before the response goes out. Pseudo-header validation,
//! flow control, SETTINGS and GOAWAY are `h2`'s, which is why it is used rather than written here.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod grpc;
mod idle;
pub mod pipe;
mod stream;
mod switch;

pub use switch::serve_switched;

use super::detect::{UpgradeRequest, PREFACE};
use crate::catalog::StreamAnswer;
use crate::observe::meter::WorkerCounters;
use idle::{Fired, Idle};
use statico_common::Counter;
use stream::{Begun, Ended};

/// Settings for the HTTP/2 server.
#[derive(Clone, Copy, Debug)]
pub struct H2Settings {
    pub max_concurrent_streams: u32,
    pub max_body: u64,
    /// `--idle-timeout`: a connection with no open stream this long is closed with GOAWAY.
    pub idle_timeout: std::time::Duration,
    /// `--header-timeout`: the handshake, and each pause in a request body, may take this long.
    pub header_timeout: std::time::Duration,
}

/// After GOAWAY, once no stream is open, how long the client has to close before statico does: `h2`'s
/// graceful shutdown waits for the answer to a PING, which a silent client never sends.
pub const GOAWAY_GRACE: std::time::Duration = super::CLOSE_GRACE;

/// Serves HTTP/2 on `io` until the client goes away, or until GOAWAY (after `drain` resolves, or
/// `--idle-timeout` without a stream) and the streams in flight have finished; a client that does not
/// close then is closed [`GOAWAY_GRACE`] later.
///
/// Idle means no stream open and no stream's output moving ([`idle`]): a body still going out to a
/// slow reader keeps its connection; the answers to a client's PINGs do not.
pub async fn serve<T>(
    io: Rewind<'_, T>,
    settings: H2Settings,
    response: &dyn Fn(&Request<h2::RecvStream>) -> StreamAnswer,
    counters: &WorkerCounters,
    verbose: u8,
    drain: impl std::future::Future<Output = ()>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let moved = io.output_moved();
    let mut idle = Idle::new(settings.idle_timeout, moved.clone());
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(settings.max_concurrent_streams)
        .handshake::<_, Bytes>(io);
    let mut conn = match crate::kernel::timer::timeout(settings.header_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(_)) => return,
        Err(_) => return counters.add(Counter::Timeouts, 1),
    };
    tokio::pin!(drain);
    let mut streams = futures_util::stream::FuturesUnordered::new();
    loop {
        // Biased, in this order: the drain; the streams' futures; the next stream (so that a
        // connection taking requests never polls its timer); the timer.
        let ended = tokio::select! {
            biased;
            () = &mut drain, if !idle.draining() => {
                conn.graceful_shutdown();
                idle.goaway();
                continue;
            }
            Some(ended) = futures_util::StreamExt::next(&mut streams), if !streams.is_empty() => {
                if streams.is_empty() {
                    idle.streams_ended();
                }
                ended
            }
            accepted = conn.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    let answer = response(&request);
                    match stream::begin(request, respond, answer, settings, counters, verbose, &moved) {
                        Begun::Ended(ended) => {
                            idle.answered();
                            ended
                        }
                        Begun::Pending(pending) => {
                            streams.push(pending);
                            continue;
                        }
                    }
                }
                _ => break,
            },
            () = idle.due(), if streams.is_empty() => match idle.fired(conn.has_streams()) {
                Fired::Rearmed => continue,
                Fired::Over => {
                    // The grace is over: dropping the connection closes it, with a reset if
                    // streams' output is still waiting for a client that takes none.
                    if conn.has_streams() {
                        moved.stall();
                    }
                    break;
                }
                Fired::Idle => {
                    counters.add(Counter::Timeouts, 1);
                    conn.graceful_shutdown();
                    idle.goaway();
                    continue;
                }
            },
        };
        if ended == Ended::Stalled {
            moved.stall();
            break; // dropping the connection closes it, with a reset
        }
        if ended == Ended::CloseConnection && !idle.draining() {
            // A route's `close` fault: GOAWAY now, and the connection ends with it.
            conn.abrupt_shutdown(h2::Reason::NO_ERROR);
            idle.goaway();
        }
    }
}

/// A connection's output as its protocol and its runtime both see it, shared between them: when
/// it last moved — the instant `io` last took bytes, or (on io_uring, whose pipe takes a send's
/// worth at a time) the socket did — and whether the connection ended stalled.
pub type OutputMoved = Rc<OutputState>;

/// See [`OutputMoved`].
#[derive(Debug)]
pub struct OutputState {
    moved: Cell<Instant>,
    stalled: Cell<bool>,
}

impl OutputState {
    /// Output that last moved at `at`, not stalled.
    pub fn moved_at(at: Instant) -> OutputMoved {
        Rc::new(OutputState {
            moved: Cell::new(at),
            stalled: Cell::new(false),
        })
    }

    /// When the output last moved.
    pub fn moved(&self) -> Instant {
        self.moved.get()
    }

    /// The output moved now.
    pub fn moved_now(&self) {
        self.moved.set(Instant::now());
    }

    /// The connection ends with output its client did not take (nothing taken for an idle
    /// timeout, or a GOAWAY's grace): the runtime closes it with a reset (`SO_LINGER` 0), so that
    /// the kernel drops what it holds unsent at once rather than keeping the closed socket
    /// (FIN_WAIT1) while it retries for minutes.
    pub fn stall(&self) {
        self.stalled.set(true);
    }

    /// Whether the connection ended stalled ([`OutputState::stall`]).
    pub fn stalled(&self) -> bool {
        self.stalled.get()
    }
}

/// An [`OutputMoved`] that starts now.
pub fn output_moved_now() -> OutputMoved {
    OutputState::moved_at(Instant::now())
}

/// Reads from `prefix` first, then from `inner`, counting bytes both ways; writes go to `inner`, and
/// when they take bytes, that instant is noted ([`OutputMoved`]).
pub struct Rewind<'a, T> {
    prefix: Vec<u8>,
    pos: usize,
    inner: T,
    counters: &'a WorkerCounters,
    moved: OutputMoved,
}

impl<'a, T> Rewind<'a, T> {
    pub fn new(
        prefix: Vec<u8>,
        inner: T,
        counters: &'a WorkerCounters,
        moved: OutputMoved,
    ) -> Self {
        Rewind {
            prefix,
            pos: 0,
            inner,
            counters,
            moved,
        }
    }

    /// When output last moved, kept up to date by the writes.
    pub fn output_moved(&self) -> OutputMoved {
        self.moved.clone()
    }

    /// A write's result `r`, counted (and the moment noted if it took bytes).
    fn wrote(&self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                self.moved.moved_now();
            }
            self.counters.add(Counter::BytesOut, n as u64);
            self.counters.add(Counter::Writes, 1);
        }
        r
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<'_, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.counters.add(Counter::BytesIn, n as u64);
            self.counters.add(Counter::Reads, 1);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<'_, T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        self.wrote(r)
    }

    /// `h2` hands over what it has ready (frame heads and payloads) as slices: one write for them
    /// all when the transport takes them so (a socket's `writev`).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        slices: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, slices);
        self.wrote(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A HEADERS frame (END_STREAM | END_HEADERS) on stream 1 carrying the request that asked to upgrade,
/// HPACK-encoded with literal fields (no table, no Huffman): what a prior-knowledge client would have sent.
fn headers_frame(up: &UpgradeRequest) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", up.method.as_str()),
        (":scheme", "http"),
        (":path", up.path.as_str()),
        (":authority", up.authority.as_str()),
    ] {
        block.push(0x00); // literal header field without indexing, new name
        hpack_string(&mut block, name.as_bytes());
        hpack_string(&mut block, value.as_bytes());
    }
    let mut frame = Vec::with_capacity(9 + block.len());
    let len = block.len() as u32;
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.push(0x1); // HEADERS
    frame.push(0x1 | 0x4); // END_STREAM | END_HEADERS
    frame.extend_from_slice(&1u32.to_be_bytes());
    frame.extend_from_slice(&block);
    frame
}

/// An HPACK string literal without Huffman coding: 7-bit-prefix length, then the bytes.
fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, s.len(), 7, 0x00);
    out.extend_from_slice(s);
}

/// HPACK integer (RFC 7541 §5.1) with an `n`-bit prefix and the given high bits.
fn hpack_int(out: &mut Vec<u8>, mut v: usize, n: u8, high: u8) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// After `101 Switching Protocols`: the bytes the upgraded client sends (`client`, starting with its
/// preface) rearranged for `h2` — preface, the client's first (SETTINGS) frame, then stream 1's
/// HEADERS — or `None` while more bytes are needed. Returns the prefix to replay; any further client
/// bytes follow from the socket.
pub fn upgraded_prefix(client: &[u8], upgrade: &UpgradeRequest) -> Option<Result<Vec<u8>, ()>> {
    if client.len() < PREFACE.len() + 9 {
        return if PREFACE.starts_with(&client[..client.len().min(PREFACE.len())]) {
            None
        } else {
            Some(Err(()))
        };
    }
    if &client[..PREFACE.len()] != PREFACE {
        return Some(Err(()));
    }
    let frame = &client[PREFACE.len()..];
    let len = u32::from_be_bytes([0, frame[0], frame[1], frame[2]]) as usize;
    if frame[3] != 0x4 {
        return Some(Err(())); // the first frame must be SETTINGS
    }
    if frame.len() < 9 + len {
        return None;
    }
    let split = PREFACE.len() + 9 + len;
    let mut out = client[..split].to_vec();
    out.extend_from_slice(&headers_frame(upgrade));
    out.extend_from_slice(&client[split..]);
    Some(Ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_integers_follow_rfc7541_examples() {
        let mut v = Vec::new();
        hpack_int(&mut v, 10, 5, 0);
        assert_eq!(v, [10]);
        let mut v = Vec::new();
        hpack_int(&mut v, 1337, 5, 0);
        assert_eq!(v, [31, 154, 10]);
    }

    #[test]
    fn upgrade_headers_frame_decodes_with_hpack_rules() {
        let u = UpgradeRequest {
            method: "GET".into(),
            path: "/x".into(),
            authority: "h".into(),
        };
        let f = headers_frame(&u);
        assert_eq!(&f[3..9], &[1, 5, 0, 0, 0, 1]);
        let len = u32::from_be_bytes([0, f[0], f[1], f[2]]) as usize;
        assert_eq!(len, f.len() - 9);
        assert_eq!(
            &f[9..],
            b"\x00\x07:method\x03GET\x00\x07:scheme\x04http\x00\x05:path\x02/x\x00\x0a:authority\x01h"
        );
    }

    #[test]
    fn upgraded_prefix_inserts_stream_one_after_settings() {
        let u = UpgradeRequest {
            method: "GET".into(),
            path: "/".into(),
            authority: "h".into(),
        };
        let settings = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        let mut client = PREFACE.to_vec();
        client.extend_from_slice(&settings);
        assert_eq!(upgraded_prefix(&client[..30], &u), None);
        client.extend_from_slice(b"rest");
        let out = upgraded_prefix(&client, &u).unwrap().unwrap();
        assert!(out.starts_with(PREFACE));
        assert_eq!(&out[24..24 + 15], &settings);
        assert_eq!(&out[39..48], &headers_frame(&u)[..9]);
        assert!(out.ends_with(b"rest"));
        assert_eq!(
            upgraded_prefix(b"GET / HTTP/1.1\r\n\r\n0123456789abcdef", &u),
            Some(Err(()))
        );
    }
}
