//! A streamed route's events as bytes (`stream=sse|ndjson|chunks`, or a server-streaming gRPC
//! route's messages): each event framed for its feed — a server-sent event with its `id:` and
//! `data:` lines, a JSON line, the payload as it is, or a length-prefixed gRPC message — and, on a
//! persistent HTTP/1.1 connection, as one chunk of a chunked body.
//!
//! [`EventSource`] is a route's [`Render`]: the delivery machine asks it for each event when the
//! event is due ([`super::model::events`] has the timing), so a stream is made one event at a time,
//! written straight into the buffer that is sent (no copy of the payload or of the framed event).

use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::Rng;

use super::model::dist::Dist;
use super::model::events::{Count, Render, StreamDraw};
use super::route::spec::{EventSpec, StreamSpec};

/// How a stream frames its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    /// Server-sent events (`text/event-stream`): `id: I`, a `data:` line per line of the payload,
    /// a blank line.
    Sse,
    /// One JSON (or any) line per event (`application/x-ndjson`).
    Ndjson,
    /// The payload as it is (`application/octet-stream`).
    Chunks,
    /// A server-streaming gRPC route's messages (no `stream=`: `events=`, `first=` or `gap=` on a
    /// gRPC route): each event the route's reply message, length-prefixed as gRPC frames it.
    Grpc,
}

impl Feed {
    pub fn parse(s: &str) -> Result<Feed, String> {
        match s {
            "sse" => Ok(Feed::Sse),
            "ndjson" => Ok(Feed::Ndjson),
            "chunks" => Ok(Feed::Chunks),
            _ => Err(format!("{s:?}: expected sse, ndjson or chunks")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Feed::Sse => "sse",
            Feed::Ndjson => "ndjson",
            Feed::Chunks => "chunks",
            Feed::Grpc => "grpc",
        }
    }

    /// The `Content-Type` a stream of this feed has unless its route gives one.
    pub fn content_type(self) -> &'static str {
        match self {
            Feed::Sse => "text/event-stream",
            Feed::Ndjson => "application/x-ndjson",
            Feed::Chunks => "application/octet-stream",
            Feed::Grpc => "application/grpc",
        }
    }

    /// Appends event `i`, its payload written by `payload`, framed: the payload goes straight into
    /// `out`, and each line of an SSE payload becomes a `data:` line there (a line ends at CRLF, LF
    /// or CR, as an SSE parser reads it).
    fn frame(self, i: u32, out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
        match self {
            Feed::Sse => {
                let _ = write!(out, "id: {i}\ndata: ");
                let start = out.len();
                payload(out);
                if out[start..].iter().any(|&b| b == b'\n' || b == b'\r') {
                    let text = out.split_off(start);
                    let mut rest = &text[..];
                    while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                        out.extend_from_slice(&rest[..end]);
                        out.extend_from_slice(b"\ndata: ");
                        let crlf = rest[end..].starts_with(b"\r\n");
                        rest = &rest[end + if crlf { 2 } else { 1 }..];
                    }
                    out.extend_from_slice(rest);
                }
                out.extend_from_slice(b"\n\n");
            }
            Feed::Ndjson => {
                payload(out);
                out.push(b'\n');
            }
            Feed::Chunks => payload(out),
            Feed::Grpc => {
                let prefix = out.len();
                out.extend_from_slice(&[0; GRPC_PREFIX]);
                payload(out);
                let len = (out.len() - prefix - GRPC_PREFIX) as u32;
                out[prefix + 1..prefix + GRPC_PREFIX].copy_from_slice(&len.to_be_bytes());
            }
        }
    }
}

/// A gRPC message's prefix: its compressed flag (0) and its length.
const GRPC_PREFIX: usize = 5;

/// Appends `event` as one HTTP/1.1 chunk, and with `last` the chunked body's last chunk after it.
pub fn chunk(event: &[u8], last: bool, out: &mut Vec<u8>) {
    chunk_with(out, last, |out| out.extend_from_slice(event));
}

/// The most bytes a chunk's size line takes (`ffffffffffffffff\r\n`).
const SIZE_LINE: usize = 18;

/// Appends one HTTP/1.1 chunk whose data `data` writes straight into `out` (its size line is
/// written in front of it after), and with `last` the chunked body's last chunk after it.
pub fn chunk_with(out: &mut Vec<u8>, last: bool, data: impl FnOnce(&mut Vec<u8>)) {
    let head = out.len();
    out.extend_from_slice(&[0; SIZE_LINE]);
    data(out);
    let len = out.len() - head - SIZE_LINE;
    let mut size = [0u8; SIZE_LINE];
    let mut room = &mut size[..];
    let _ = write!(room, "{len:x}\r\n");
    let n = SIZE_LINE - room.len();
    out.splice(head..head + SIZE_LINE, size[..n].iter().copied());
    out.extend_from_slice(b"\r\n");
    if last {
        out.extend_from_slice(b"0\r\n\r\n");
    }
}

/// A streamed route's events, built at start-up: drawn and framed per request.
#[derive(Clone, Debug)]
pub struct EventSource {
    feed: Feed,
    events: Count,
    first: Option<Dist>,
    gap: Option<Dist>,
    payload: Payload,
}

/// An event's payload: text around the places of `{i}`, or the same bytes each time (filler, or a
/// gRPC route's reply message).
#[derive(Clone, Debug)]
enum Payload {
    Text(Vec<String>),
    Filler(Bytes),
}

impl EventSource {
    /// The events `spec` describes; `reply` is what a gRPC route's messages carry
    /// ([`EventSpec::Reply`]).
    pub fn new(spec: &StreamSpec, reply: &Bytes) -> EventSource {
        let payload = match &spec.event {
            EventSpec::Text(text) => Payload::Text(text.split("{i}").map(str::to_owned).collect()),
            EventSpec::Size(n) => Payload::Filler(Bytes::from(vec![b'x'; *n as usize])),
            EventSpec::Reply => Payload::Filler(reply.clone()),
        };
        EventSource {
            feed: spec.feed,
            events: spec.events.clone(),
            first: spec.first.clone(),
            gap: spec.gap.clone(),
            payload,
        }
    }

    pub fn feed(&self) -> Feed {
        self.feed
    }

    /// One request's draw: its count, where it resumes after the `Last-Event-ID` it sent (if a
    /// number), and a seed for the rest.
    pub fn choose(&self, last_event_id: Option<&[u8]>, draw: &mut impl Rng) -> StreamDraw {
        let from = last_event_id
            .and_then(|id| std::str::from_utf8(id).ok()?.trim().parse::<u64>().ok())
            .map_or(0, |id| {
                u32::try_from(id.saturating_add(1)).unwrap_or(u32::MAX)
            });
        StreamDraw {
            events: self.events.sample(draw),
            from,
            seed: draw.next_u64(),
            cut: None,
        }
    }

    /// Event `i`'s payload.
    fn payload(&self, i: u32, out: &mut Vec<u8>) {
        match &self.payload {
            Payload::Filler(bytes) => out.extend_from_slice(bytes),
            Payload::Text(parts) => {
                for (n, part) in parts.iter().enumerate() {
                    if n > 0 {
                        let _ = write!(out, "{i}");
                    }
                    out.extend_from_slice(part.as_bytes());
                }
            }
        }
    }
}

impl Render for EventSource {
    fn event(&self, i: u32, chunked: bool, last: bool, out: &mut Vec<u8>) {
        let framed = |out: &mut Vec<u8>| self.feed.frame(i, out, |out| self.payload(i, out));
        match chunked {
            true => chunk_with(out, last, framed),
            false => framed(out),
        }
    }

    fn wait(&self, first: bool, in_flight: u64, rng: &mut SmallRng) -> Duration {
        let wait = if first { &self.first } else { &self.gap };
        wait.as_ref()
            .map_or(Duration::ZERO, |d| d.sample_at(rng, in_flight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn source(route: &str) -> EventSource {
        let spec = super::super::route::spec::parse_spec(route).unwrap();
        EventSource::new(spec.stream.as_ref().unwrap(), &Bytes::new())
    }

    /// One SSE event whose payload is `text` (which a route line could not hold: line ends).
    fn sse_of(text: &str) -> EventSource {
        let spec = StreamSpec {
            feed: Feed::Sse,
            events: Count::Fixed(1),
            first: None,
            gap: None,
            event: EventSpec::Text(text.into()),
        };
        EventSource::new(&spec, &Bytes::new())
    }

    fn events(s: &EventSource, range: std::ops::Range<u32>, chunked: bool) -> String {
        let mut out = Vec::new();
        for i in range.clone() {
            s.event(i, chunked, i + 1 == range.end, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn sse_events_carry_their_id_and_a_data_line_each_a_chunk_over_http1() {
        let s = source("/s stream=sse event=tok-{i}");
        assert_eq!(
            events(&s, 0..3, false),
            "id: 0\ndata: tok-0\n\nid: 1\ndata: tok-1\n\nid: 2\ndata: tok-2\n\n"
        );
        assert_eq!(
            events(&s, 0..2, true),
            "13\r\nid: 0\ndata: tok-0\n\n\r\n13\r\nid: 1\ndata: tok-1\n\n\r\n0\r\n\r\n"
        );
        assert_eq!(
            events(&sse_of("a\nb"), 7..8, false),
            "id: 7\ndata: a\ndata: b\n\n"
        );
        assert_eq!(
            events(&sse_of("a\rb\r\nc\n\rd"), 0..1, false),
            "id: 0\ndata: a\ndata: b\ndata: c\ndata: \ndata: d\n\n",
            "CR, CRLF and LF each end a line"
        );
    }

    #[test]
    fn a_resumed_stream_starts_after_the_last_event_id_and_ndjson_is_lines() {
        let s = source("/s stream=ndjson events=5");
        let from = s.choose(Some(b"2"), &mut SmallRng::seed_from_u64(0));
        assert_eq!((from.events, from.from), (5, 3));
        assert_eq!(events(&s, 3..5, false), "{\"i\":3}\n{\"i\":4}\n");
        let ignored = s.choose(Some(b"x"), &mut SmallRng::seed_from_u64(0));
        assert_eq!(ignored.from, 0);
        for past in ["4", "4294967295", "4294967296", "18446744073709551615"] {
            let done = s.choose(Some(past.as_bytes()), &mut SmallRng::seed_from_u64(0));
            assert!(
                done.from >= 5,
                "Last-Event-ID {past} is past the last event"
            );
        }
    }

    #[test]
    fn waits_are_the_first_then_the_gaps_and_filler_is_its_size() {
        let s = source("/s stream=chunks event-size=4 events=4 first=100ms gap=20ms");
        let mut rng = SmallRng::seed_from_u64(1);
        let ms = Duration::from_millis;
        assert_eq!(s.wait(true, 0, &mut rng), ms(100));
        assert_eq!(s.wait(false, 0, &mut rng), ms(20));
        assert_eq!(events(&s, 0..2, false), "xxxxxxxx");
    }

    #[test]
    fn a_grpc_routes_messages_are_its_reply_length_prefixed() {
        let spec = super::super::route::spec::parse_spec("/pkg.Svc/M events=3 gap=1ms").unwrap();
        let s = EventSource::new(
            spec.stream.as_ref().unwrap(),
            &Bytes::from_static(b"\x0a\x01z"),
        );
        let mut out = Vec::new();
        s.event(0, false, false, &mut out);
        s.event(1, false, true, &mut out);
        assert_eq!(out, b"\0\0\0\0\x03\x0a\x01z\0\0\0\0\x03\x0a\x01z");
    }
}
