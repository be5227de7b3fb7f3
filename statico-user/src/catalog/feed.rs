//! A streamed route's events as bytes (`stream=sse|ndjson|chunks`): each event framed for its feed
//! — a server-sent event with its `id:` and `data:` lines, a JSON line, or the payload as it is —
//! and, on a persistent HTTP/1.1 connection, as one chunk of a chunked body.
//!
//! One request's body is made whole when it is answered ([`Feed`]'s [`EventSource::draw`]): its
//! events from the one a reconnecting client asks for (`Last-Event-ID`) to the drawn count, where
//! each ends, and the waits drawn before each. The timing is the model's
//! ([`super::model::events`]); the delivery machine gives the body out event by event.

use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, RngExt, SeedableRng};

use super::model::dist::Dist;
use super::model::events::{Count, Events, MAX_STREAM_BYTES};
use super::model::fault::Fault;
use super::model::hold::{Recorder, TruthKey};
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
        }
    }

    /// The `Content-Type` a stream of this feed has unless its route gives one.
    pub fn content_type(self) -> &'static str {
        match self {
            Feed::Sse => "text/event-stream",
            Feed::Ndjson => "application/x-ndjson",
            Feed::Chunks => "application/octet-stream",
        }
    }

    /// Appends event `i` carrying `payload`, framed.
    fn frame(self, i: u32, payload: &[u8], out: &mut Vec<u8>) {
        match self {
            Feed::Sse => {
                out.extend_from_slice(format!("id: {i}\n").as_bytes());
                for line in payload.split(|&b| b == b'\n') {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(line);
                    out.push(b'\n');
                }
                out.push(b'\n');
            }
            Feed::Ndjson => {
                out.extend_from_slice(payload);
                out.push(b'\n');
            }
            Feed::Chunks => out.extend_from_slice(payload),
        }
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

/// An event's payload: text around the places of `{i}`, or filler bytes.
#[derive(Clone, Debug)]
enum Payload {
    Text(Vec<String>),
    Filler(Bytes),
}

/// What one request's stream is, drawn when its route was chosen: how many events, from which
/// (after a `Last-Event-ID`), and the seed its waits and its fault's place are drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamDraw {
    pub events: u32,
    pub from: u32,
    pub seed: u64,
}

/// How one request's stream body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunking {
    /// Each event one chunk of an HTTP/1.1 chunked body, the last chunk after the last event.
    Chunked,
    /// The events as they are: HTTP/2 and HTTP/3 DATA frames, or an HTTP/1.x body the connection's
    /// close ends.
    Bare,
}

impl EventSource {
    pub fn new(spec: &StreamSpec) -> EventSource {
        let payload = match &spec.event {
            EventSpec::Text(text) => Payload::Text(text.split("{i}").map(str::to_owned).collect()),
            EventSpec::Size(n) => Payload::Filler(Bytes::from(vec![b'x'; *n as usize])),
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
            .and_then(|id| std::str::from_utf8(id).ok()?.trim().parse::<u32>().ok())
            .map_or(0, |id| id.saturating_add(1));
        StreamDraw {
            events: self.events.sample(draw),
            from,
            seed: draw.next_u64(),
        }
    }

    /// One request's body and its events: events `from..events`, framed as `chunking` says, at
    /// most [`MAX_STREAM_BYTES`]; each event's wait drawn, and with `fault` the event count it
    /// strikes after (any from none to all but the last). `truth`: where the events' timing is
    /// recorded.
    pub fn draw(
        &self,
        stream: StreamDraw,
        chunking: Chunking,
        fault: Option<Fault>,
        truth: Option<(Recorder, TruthKey)>,
    ) -> (Vec<u8>, Events) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(stream.seed);
        let mut body = Vec::new();
        let (mut ends, mut waits) = (Vec::new(), Vec::new());
        let mut payload = Vec::new();
        for i in stream.from..stream.events {
            let start = body.len();
            payload.clear();
            self.payload(i, &mut payload);
            match chunking {
                Chunking::Chunked => {
                    let mut event = Vec::with_capacity(payload.len() + 64);
                    self.feed.frame(i, &payload, &mut event);
                    body.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
                    body.extend_from_slice(&event);
                    body.extend_from_slice(b"\r\n");
                }
                Chunking::Bare => self.feed.frame(i, &payload, &mut body),
            }
            if body.len() > MAX_STREAM_BYTES && !ends.is_empty() {
                body.truncate(start);
                break;
            }
            let wait = match (i == stream.from, &self.first, &self.gap) {
                (true, Some(first), _) => first.sample(&mut rng),
                (false, _, Some(gap)) => gap.sample(&mut rng),
                _ => Duration::ZERO,
            };
            ends.push(body.len());
            waits.push(wait);
        }
        if chunking == Chunking::Chunked {
            body.extend_from_slice(b"0\r\n\r\n");
            if let Some(last) = ends.last_mut() {
                *last = body.len();
            }
        }
        let fault = fault.map(|f| (rng.random_range(0..ends.len().max(1)), f));
        let events = Events {
            ends,
            waits,
            fault,
            truth,
        };
        (body, events)
    }

    /// Event `i`'s payload.
    fn payload(&self, i: u32, out: &mut Vec<u8>) {
        match &self.payload {
            Payload::Filler(bytes) => out.extend_from_slice(bytes),
            Payload::Text(parts) => {
                for (n, part) in parts.iter().enumerate() {
                    if n > 0 {
                        out.extend_from_slice(i.to_string().as_bytes());
                    }
                    out.extend_from_slice(part.as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(route: &str) -> EventSource {
        let spec = super::super::route::spec::parse_spec(route).unwrap();
        EventSource::new(spec.stream.as_ref().unwrap())
    }

    fn draw(events: u32, from: u32) -> StreamDraw {
        StreamDraw {
            events,
            from,
            seed: 1,
        }
    }

    #[test]
    fn sse_events_carry_their_id_and_a_data_line_each_a_chunk_over_http1() {
        let s = source("/s stream=sse event=tok-{i}");
        let (body, events) = s.draw(draw(3, 0), Chunking::Bare, None, None);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "id: 0\ndata: tok-0\n\nid: 1\ndata: tok-1\n\nid: 2\ndata: tok-2\n\n"
        );
        assert_eq!(events.ends, [19, 38, 57]);
        let (body, events) = s.draw(draw(2, 0), Chunking::Chunked, None, None);
        let text = String::from_utf8(body).unwrap();
        assert_eq!(
            text,
            "13\r\nid: 0\ndata: tok-0\n\n\r\n13\r\nid: 1\ndata: tok-1\n\n\r\n0\r\n\r\n"
        );
        assert_eq!(events.ends, [25, text.len()]);
    }

    #[test]
    fn a_resumed_stream_starts_after_the_last_event_id_and_ndjson_is_lines() {
        let s = source("/s stream=ndjson events=5");
        let from = s.choose(Some(b"2"), &mut rand::rngs::SmallRng::seed_from_u64(0));
        assert_eq!((from.events, from.from), (5, 3));
        let (body, _) = s.draw(from, Chunking::Bare, None, None);
        assert_eq!(body, b"{\"i\":3}\n{\"i\":4}\n");
        let ignored = s.choose(Some(b"x"), &mut rand::rngs::SmallRng::seed_from_u64(0));
        assert_eq!(ignored.from, 0);
    }

    #[test]
    fn waits_are_the_first_then_the_gaps_and_a_fault_strikes_before_the_end() {
        let s = source("/s stream=chunks event-size=4 events=4 first=100ms gap=20ms");
        for seed in 0..50 {
            let stream = StreamDraw { seed, ..draw(4, 0) };
            let (body, events) = s.draw(stream, Chunking::Bare, Some(Fault::Close), None);
            assert_eq!(body, b"xxxxxxxxxxxxxxxx");
            let ms = Duration::from_millis;
            assert_eq!(events.waits, [ms(100), ms(20), ms(20), ms(20)]);
            assert!(events.fault.is_some_and(|(after, _)| after < 4));
        }
    }
}
