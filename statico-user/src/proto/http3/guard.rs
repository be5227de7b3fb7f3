//! A size guard on the frames of HTTP/3 request streams, between quinn and h3 (Linux builds).
//!
//! h3 0.0.8 reads a whole HEADERS frame (or an unknown frame) into memory before it looks at it, and
//! checks its size limit only afterwards; reading hands QUIC flow-control credit back to the client,
//! so nothing else bounds it. One client declaring 2^40-byte frames on 100 streams took a server to
//! 1 GB of RSS in 21 s. So each request stream's bytes pass through [`FrameSizes`], which reads only
//! the frame headers (type and length, two varints, RFC 9114 §7.1) and refuses any frame other than
//! DATA longer than the limit (`--max-head-size`): the stream is stopped and reset with
//! H3_EXCESSIVE_LOAD before its payload is buffered. DATA frames are streamed by h3 and bounded by
//! `--max-body-size` in [`crate::proto::http3`]. The rest of the transport is h3-quinn's, passed through.
//!
//! Unidirectional streams (the client's control and QPACK streams) are not guarded: one per kind per
//! connection, h3 closes the connection on what does not belong there.

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};

/// H3_EXCESSIVE_LOAD (RFC 9114 §8.1): the reset code for a frame over the limit.
const H3_EXCESSIVE_LOAD: u64 = 0x107;
/// The DATA frame type.
const DATA: u64 = 0x0;

/// Where a stream's byte sequence stands, frame by frame: reading a frame header (at most two 8-byte
/// varints), or skipping `remaining` bytes of payload. Pure: it sees bytes, no I/O.
#[derive(Debug)]
pub struct FrameSizes {
    limit: u64,
    header: [u8; 16],
    have: usize,
    remaining: u64,
}

/// A frame other than DATA declared more than the limit.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLarge {
    pub frame_type: u64,
    pub length: u64,
}

impl FrameSizes {
    pub fn new(limit: u64) -> Self {
        FrameSizes {
            limit,
            header: [0; 16],
            have: 0,
            remaining: 0,
        }
    }

    /// Takes the next bytes of the stream; an error once a frame declares too much.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), TooLarge> {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let skip = self.remaining.min(bytes.len() as u64);
                self.remaining -= skip;
                bytes = &bytes[skip as usize..];
                continue;
            }
            self.header[self.have] = bytes[0];
            self.have += 1;
            bytes = &bytes[1..];
            if let Some((frame_type, length)) = self.frame_header() {
                if frame_type != DATA && length > self.limit {
                    return Err(TooLarge { frame_type, length });
                }
                (self.have, self.remaining) = (0, length);
            }
        }
        Ok(())
    }

    /// The frame's type and length, once both varints are in.
    fn frame_header(&self) -> Option<(u64, u64)> {
        let got = &self.header[..self.have];
        let (frame_type, used) = varint(got)?;
        let (length, rest) = varint(&got[used..])?;
        (used + rest == got.len()).then_some((frame_type, length))
    }
}

/// A QUIC varint (RFC 9000 §16) at the start of `bytes`, and its size, if it is all there.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    let len = 1usize << (first >> 6);
    let bytes = bytes.get(..len)?;
    let value = bytes[1..]
        .iter()
        .fold(u64::from(first & 0x3f), |v, b| (v << 8) | u64::from(*b));
    Some((value, len))
}

/// h3-quinn's connection, whose request streams come guarded.
pub struct Guarded {
    inner: h3_quinn::Connection,
    limit: u64,
}

impl Guarded {
    pub fn new(conn: quinn::Connection, limit: u64) -> Self {
        Guarded {
            inner: h3_quinn::Connection::new(conn),
            limit,
        }
    }
}

impl<B: Buf> quic::Connection<B> for Guarded {
    type RecvStream = h3_quinn::RecvStream;
    type OpenStreams = Opener;

    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        quic::Connection::<B>::poll_accept_recv(&mut self.inner, cx)
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        let limit = self.limit;
        quic::Connection::<B>::poll_accept_bidi(&mut self.inner, cx)
            .map_ok(|stream| GuardedBidi::new(stream, limit))
    }

    fn opener(&self) -> Opener {
        Opener {
            inner: quic::Connection::<B>::opener(&self.inner),
            limit: self.limit,
        }
    }
}

impl<B: Buf> quic::OpenStreams<B> for Guarded {
    type BidiStream = GuardedBidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        let limit = self.limit;
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.inner, cx)
            .map_ok(|stream| GuardedBidi::new(stream, limit))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.inner, code, reason)
    }
}

/// h3-quinn's stream opener, whose bidirectional streams come guarded (h3 asks for one type).
pub struct Opener {
    inner: h3_quinn::OpenStreams,
    limit: u64,
}

impl<B: Buf> quic::OpenStreams<B> for Opener {
    type BidiStream = GuardedBidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        let limit = self.limit;
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.inner, cx)
            .map_ok(|stream| GuardedBidi::new(stream, limit))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.inner, code, reason)
    }
}

/// A request stream: its send half as h3-quinn's, its receive half guarded. A frame over the limit
/// stops the receive half and resets the send half with H3_EXCESSIVE_LOAD.
pub struct GuardedBidi<B: Buf> {
    send: h3_quinn::SendStream<B>,
    recv: GuardedRecv,
}

impl<B: Buf> GuardedBidi<B> {
    fn new(stream: h3_quinn::BidiStream<B>, limit: u64) -> Self {
        let (send, recv) = quic::BidiStream::split(stream);
        GuardedBidi {
            send,
            recv: GuardedRecv {
                inner: recv,
                frames: FrameSizes::new(limit),
            },
        }
    }
}

impl<B: Buf> quic::BidiStream<B> for GuardedBidi<B> {
    type SendStream = h3_quinn::SendStream<B>;
    type RecvStream = GuardedRecv;

    fn split(self) -> (Self::SendStream, Self::RecvStream) {
        (self.send, self.recv)
    }
}

impl<B: Buf> quic::RecvStream for GuardedBidi<B> {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let polled = self.recv.poll_data(cx);
        if let Poll::Ready(Err(StreamErrorIncoming::StreamTerminated { error_code })) = &polled {
            if *error_code == H3_EXCESSIVE_LOAD {
                quic::SendStream::reset(&mut self.send, H3_EXCESSIVE_LOAD);
            }
        }
        polled
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl<B: Buf> quic::SendStream<B> for GuardedBidi<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

/// The receive half of a request stream, its frames measured as they arrive.
pub struct GuardedRecv {
    inner: h3_quinn::RecvStream,
    frames: FrameSizes,
}

impl quic::RecvStream for GuardedRecv {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let polled = self.inner.poll_data(cx);
        if let Poll::Ready(Ok(Some(bytes))) = &polled {
            if self.frames.feed(bytes).is_err() {
                self.inner.stop_sending(H3_EXCESSIVE_LOAD);
                let error_code = H3_EXCESSIVE_LOAD;
                return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated { error_code }));
            }
        }
        polled
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.inner.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.inner.recv_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_each_size_decode() {
        assert_eq!(varint(&[0x25]), Some((37, 1)));
        assert_eq!(varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        let eight = [0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c];
        assert_eq!(varint(&eight), Some((151_288_809_941_952_652, 8)));
        assert_eq!(varint(&[0x7b]), None, "incomplete");
    }

    #[test]
    fn frames_within_the_limit_pass_even_split_byte_by_byte() {
        // HEADERS of 5 bytes, DATA of 1 MiB (DATA is not limited here), HEADERS (trailers) of 10.
        let mut stream = vec![0x01, 0x05, 1, 2, 3, 4, 5, 0x00, 0x80, 0x10, 0x00, 0x00];
        stream.extend(std::iter::repeat_n(7, 1 << 20));
        stream.extend([0x01, 0x0a]);
        stream.extend([9; 10]);
        let mut whole = FrameSizes::new(16);
        assert_eq!(whole.feed(&stream), Ok(()));
        let mut trickled = FrameSizes::new(16);
        for b in &stream {
            assert_eq!(trickled.feed(std::slice::from_ref(b)), Ok(()));
        }
    }

    #[test]
    fn a_headers_or_unknown_frame_over_the_limit_is_refused_from_its_header() {
        let mut frames = FrameSizes::new(16 * 1024);
        // HEADERS declaring 2^40 bytes: refused before any payload arrives.
        let huge = [0x01, 0xc0, 0, 0x01, 0, 0, 0, 0, 0];
        let err = frames.feed(&huge).unwrap_err();
        assert_eq!((err.frame_type, err.length), (1, 1 << 40));
        // A reserved (unknown) frame type 0x21 declaring 16 KiB + 1.
        let mut frames = FrameSizes::new(16 * 1024);
        let unknown = [0x40, 0x21, 0x80, 0x00, 0x40, 0x01];
        assert_eq!(frames.feed(&unknown).unwrap_err().frame_type, 0x21);
    }
}
