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

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub mod pipe;
mod switch;

pub use switch::serve_switched;

use super::detect::{UpgradeRequest, PREFACE};
use crate::catalog::hold::{Delivery, Step};
use crate::catalog::StreamAnswer;
use crate::observe::meter::WorkerCounters;
use crate::proto::held;
use statico_common::Counter;

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
pub async fn serve<T>(
    io: T,
    settings: H2Settings,
    response: &dyn Fn(&Request<h2::RecvStream>) -> StreamAnswer,
    counters: &WorkerCounters,
    verbose: u8,
    drain: impl std::future::Future<Output = ()>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(settings.max_concurrent_streams)
        .handshake::<_, Bytes>(io);
    let mut conn = match crate::kernel::timer::timeout(settings.header_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(_)) => return,
        Err(_) => return counters.add(Counter::Timeouts, 1),
    };
    tokio::pin!(drain);
    let mut draining = false;
    let mut streams = futures_util::stream::FuturesUnordered::new();
    // One timer: the idle timeout while no stream is open, then, after GOAWAY, the grace period.
    let mut timer = crate::kernel::timer::Coarse::after(settings.idle_timeout);
    loop {
        tokio::select! {
            biased;
            () = &mut drain, if !draining => {
                draining = true;
                conn.graceful_shutdown();
                timer.reset(GOAWAY_GRACE);
            }
            Some(ended) = futures_util::StreamExt::next(&mut streams), if !streams.is_empty() => {
                if ended == Ended::CloseConnection && !draining {
                    // A route's `close` fault: GOAWAY now, and the connection ends with it.
                    draining = true;
                    conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                    timer.reset(GOAWAY_GRACE);
                }
                if streams.is_empty() {
                    let wait = if draining { GOAWAY_GRACE } else { settings.idle_timeout };
                    timer.reset(wait);
                }
            }
            () = &mut timer, if streams.is_empty() => {
                if draining {
                    break; // the grace is over: dropping the connection closes it
                }
                draining = true;
                counters.add(Counter::Timeouts, 1);
                conn.graceful_shutdown();
                timer.reset(GOAWAY_GRACE);
            }
            accepted = conn.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    let response = response(&request);
                    streams.push(answer(request, respond, response, settings, counters, verbose));
                }
                _ => break,
            },
        }
    }
}

/// How a stream ended, for the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Done,
    /// A route's `close` fault: the connection closes (GOAWAY).
    CloseConnection,
}

/// Reads one stream's request body to its end, then delivers the answer as its hold says.
async fn answer(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    response: StreamAnswer,
    settings: H2Settings,
    counters: &WorkerCounters,
    verbose: u8,
) -> Ended {
    let head_only = request.method() == http::Method::HEAD;
    if verbose > 0 {
        crate::observe::dump::stream_request(&request, "HTTP/2", respond.stream_id(), verbose);
    }
    if !read_body(request.into_body(), &mut respond, settings, counters).await {
        return Ended::Done;
    }
    counters.add(Counter::Requests, 1);
    let arrived = std::time::Instant::now();
    // A client that resets the stream while its answer is held or queued has gone.
    let gone = std::future::poll_fn(|cx| respond.poll_reset(cx).map(|_| ()));
    let Some((response, mut ticket)) = held::admitted(response, arrived, gone).await else {
        return Ended::Done;
    };
    let (status, hold, recorder) = (response.status, response.hold, response.recorder.clone());
    let (head, data) = response.into_parts();
    let mut head = Some(head);
    let mut stream = None;
    for step in Delivery::new(hold, data.len(), head_only) {
        match step {
            Step::Wait(d) => crate::kernel::timer::sleep(d).await,
            Step::Record(key) => match ticket.take() {
                Some(ticket) => ticket.finish(std::time::Instant::now()),
                None => {
                    if let Some(r) = &recorder {
                        r.record(key, hold.delay, arrived.elapsed());
                    }
                }
            },
            Step::Head { end } => {
                let Ok(s) = respond.send_response(head.take().expect("one head"), end) else {
                    return Ended::Done;
                };
                counters.add(Counter::Responses, 1);
                if verbose > 0 {
                    println!("↪ response (HTTP/2): {status}");
                }
                stream = Some(s);
            }
            Step::Body { range, end } => {
                // A stream the client reset takes no more data: its answer is over.
                if let Some(s) = stream.as_mut() {
                    if s.send_data(data.slice(range), end).is_err() {
                        return Ended::Done;
                    }
                }
            }
            Step::Reset => match stream.as_mut() {
                Some(s) => s.send_reset(h2::Reason::INTERNAL_ERROR),
                None => respond.send_reset(h2::Reason::INTERNAL_ERROR),
            },
            Step::Close => return Ended::CloseConnection,
            Step::Stall => {
                crate::kernel::timer::Coarse::after(settings.idle_timeout).await;
                counters.add(Counter::Timeouts, 1);
                respond.send_reset(h2::Reason::CANCEL);
            }
        }
    }
    Ended::Done
}

/// Reads a stream's request body to its end, releasing flow-control capacity as it goes. A body over
/// `--max-body-size` gets 413, one that pauses longer than `--header-timeout` is cancelled (counted as
/// a timeout); both reset the stream. Returns whether the body ended well.
async fn read_body(
    mut body: h2::RecvStream,
    respond: &mut h2::server::SendResponse<Bytes>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> bool {
    let mut received: u64 = 0;
    loop {
        let chunk = match crate::kernel::timer::timeout(settings.header_timeout, body.data()).await
        {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return true,
            Err(_) => {
                counters.add(Counter::Timeouts, 1);
                respond.send_reset(h2::Reason::CANCEL);
                return false;
            }
        };
        let Ok(data) = chunk else {
            return false; // h2 already reset the stream (bad content-length, protocol error)
        };
        received += data.len() as u64;
        let _ = body.flow_control().release_capacity(data.len());
        if received > settings.max_body {
            refuse_body(body, respond, settings, counters).await;
            return false;
        }
    }
}

/// After a 413, how much more of the body is read and dropped so that the client sees a clean end.
const DISCARD_MAX: u64 = 1 << 20;

/// A body over `--max-body-size`: a complete 413, then the rest of the body read and dropped (up to
/// [`DISCARD_MAX`], each pause at most `--header-timeout`), as nginx does, and past that RST_STREAM
/// with NO_ERROR (RFC 9113 §8.1), which curl reports as an error. Not REFUSED_STREAM, which tells a
/// client the request was not processed and may be retried (curl re-sent such a POST six times).
async fn refuse_body(
    mut body: h2::RecvStream,
    respond: &mut h2::server::SendResponse<Bytes>,
    settings: H2Settings,
    counters: &WorkerCounters,
) {
    let head = http::Response::builder()
        .status(http::StatusCode::PAYLOAD_TOO_LARGE)
        .header(http::header::CONTENT_LENGTH, "0")
        .body(())
        .expect("a 413 head");
    if respond.send_response(head, true).is_ok() {
        counters.add(Counter::Responses, 1);
        counters.add(Counter::Status413, 1);
    }
    let mut discarded = 0u64;
    while discarded <= DISCARD_MAX {
        match crate::kernel::timer::timeout(settings.header_timeout, body.data()).await {
            Ok(Some(Ok(data))) => {
                discarded += data.len() as u64;
                let _ = body.flow_control().release_capacity(data.len());
            }
            Ok(None) => return,
            Ok(Some(Err(_))) | Err(_) => break,
        }
    }
    respond.send_reset(h2::Reason::NO_ERROR);
}

/// Reads from `prefix` first, then from `inner`, counting bytes both ways; writes go to `inner`.
pub struct Rewind<'a, T> {
    prefix: Vec<u8>,
    pos: usize,
    inner: T,
    counters: &'a WorkerCounters,
}

impl<'a, T> Rewind<'a, T> {
    pub fn new(prefix: Vec<u8>, inner: T, counters: &'a WorkerCounters) -> Self {
        Rewind {
            prefix,
            pos: 0,
            inner,
            counters,
        }
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
        if let Poll::Ready(Ok(n)) = r {
            self.counters.add(Counter::BytesOut, n as u64);
            self.counters.add(Counter::Writes, 1);
        }
        r
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
