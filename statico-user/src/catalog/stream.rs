//! An answer in the form HTTP/2 and HTTP/3 send it: a status, header fields, and a body that is a
//! slice of a shared buffer — the same answer HTTP/1.1 gets as bytes, for protocols that send a head
//! as a HEADERS frame and the body as DATA frames. The `http` crate's types, which `h2` and `h3` take.
//!
//! HTTP/2 forbids connection-specific fields (RFC 9113 §8.2.2), so the user's `-H` fields of that kind
//! are left out here and stay in HTTP/1.1 answers ([`left_out_fields`] names them at start-up).

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::model::delivery::Delivery;
use super::model::events::Events;
use super::model::hold::{Hold, Recorder, TruthKey};
use super::model::load::{Loads, Ticket, TicketIds};
use super::model::pause::Pauses;
use super::response::{
    header_fields, header_fields_for, http_date, streamed_fields, ResponseSpec, DATE_LEN,
};
use super::route::asked::AwaitsBody;

/// An answer as HTTP/2 and HTTP/3 send it: status, header fields (no connection-specific ones), body.
#[derive(Clone, Debug)]
pub struct StreamAnswer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// How it is delivered (a delay, a fault, ...).
    pub hold: Hold,
    /// Where a route's answer records its ground truth.
    pub recorder: Option<super::model::hold::Recorder>,
    /// A route's held answer: how it takes its ticket when its request is complete.
    pub admission: Option<std::sync::Arc<Admission>>,
    /// The server's pauses, which hold it before its head goes out (when the server has them).
    pub pauses: Option<Pauses>,
    /// A streamed answer's events, made as they fall due (its `body` is empty).
    pub events: Option<Box<Events>>,
    /// An answer made from its request's body (an openai route's): this one stands for it until
    /// the body is read ([`StreamAnswer::answered`]).
    pub awaits: Option<Box<AwaitsBody>>,
    /// A gRPC call to a built-in method: its answer is made once its request is read.
    pub grpc: Option<Box<super::grpc::Call>>,
    /// The trailers that end the answer (a gRPC reply's status).
    pub trailers: Option<HeaderMap>,
}

/// What a route's held stream answer needs for its [`Ticket`]: the routes' shared load state when
/// its route has a load model, its `gone` outcome, whether its requests are an inference server's
/// (an openai route's: aborted when their client leaves), the answer it gets if its pool sheds it
/// with a status, and where its ticket's id comes from.
#[derive(Clone, Debug)]
pub struct Admission {
    pub loads: Option<std::sync::Arc<Loads>>,
    pub gone: u8,
    pub inference: bool,
    pub shed: Option<StreamAnswer>,
    pub tickets: TicketIds,
}

impl Admission {
    /// What a request shed with a status gets instead ([`super::model::delivery::Step::Shed`]): the
    /// pool's status with the route's fields, and `date` (the shed answer is built once, at
    /// start-up).
    pub fn shed_answer(&self, date: Option<&HeaderValue>) -> Option<StreamAnswer> {
        let mut shed = self.shed.clone()?;
        if let Some(date) = date {
            shed.headers.insert(http::header::DATE, date.clone());
        }
        Some(shed)
    }

    /// The ticket of a request whose answer `key` (held as `hold` says before its head, a
    /// `sequence`'s if it is a stream of events) is complete at `now`: through the route's load
    /// state if it has one, else served at once — for HTTP/1.1 and the streams alike.
    pub fn ticket(
        &self,
        key: TruthKey,
        hold: &Hold,
        recorder: Recorder,
        (now, sequence): (std::time::Instant, bool),
    ) -> Ticket {
        let id = self.tickets.next();
        let ticket = Ticket::new(recorder, key, hold.delay, self.gone, now, id)
            .for_sequence(sequence)
            .for_inference(self.inference)
            .giving(hold.tokens);
        match &self.loads {
            Some(loads) => loads.admit(ticket, now),
            None => ticket,
        }
    }
}

/// Whether a header field is connection-specific, which HTTP/2 forbids in a message (RFC 9113 §8.2.2;
/// `h2` resets a stream that carries one): `Connection`, `Keep-Alive`, `Proxy-Connection`,
/// `Transfer-Encoding`, `Upgrade`, and `TE` with any value but `trailers`.
fn is_connection_specific(name: &str, value: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    ) || (name == "te" && !value.trim().eq_ignore_ascii_case("trailers"))
}

/// The user's `-H` fields that HTTP/2 responses leave out (they stay in HTTP/1.1 responses), by name.
pub fn left_out_fields(spec: &ResponseSpec) -> Vec<String> {
    spec.headers
        .iter()
        .filter(|(n, v)| is_connection_specific(n, v))
        .map(|(n, _)| n.clone())
        .collect()
}

/// Header fields already checked (a site's, an echo's) as HTTP/2 and HTTP/3 send them: names in
/// lower case; a field the `http` crate cannot carry is left out.
pub fn header_map<'a>(fields: impl Iterator<Item = (&'a str, &'a str)>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in fields {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(n, v);
        }
    }
    headers
}

impl StreamAnswer {
    /// From the user's response spec, without its connection-specific fields (see
    /// [`left_out_fields`]); `date` is patched per second by the caller.
    pub fn new(spec: &ResponseSpec) -> anyhow::Result<Self> {
        Self::build(spec, header_fields(spec)?, Bytes::from(spec.body.clone()))
    }

    /// From a response spec whose body is `body`, shared (a route's).
    pub fn with_body(spec: &ResponseSpec, body: Bytes) -> anyhow::Result<Self> {
        Self::build(spec, header_fields_for(spec, body.len())?, body)
    }

    /// From a response spec whose body is a stream of events made per request (no length).
    pub fn streamed(spec: &ResponseSpec) -> anyhow::Result<Self> {
        Self::build(spec, streamed_fields(spec)?, Bytes::new())
    }

    fn build(
        spec: &ResponseSpec,
        fields: Vec<(String, String)>,
        body: Bytes,
    ) -> anyhow::Result<Self> {
        let status = StatusCode::from_u16(spec.status)?;
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            if is_connection_specific(&name, &value) {
                continue;
            }
            headers.append(
                HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())?,
                HeaderValue::from_str(&value)?,
            );
        }
        let mut response = StreamAnswer {
            status,
            headers,
            body,
            hold: Hold::default(),
            recorder: None,
            admission: None,
            pauses: None,
            events: None,
            awaits: None,
            grpc: None,
            trailers: None,
        };
        response.set_date(&http_date(std::time::SystemTime::now()));
        Ok(response)
    }

    /// A site's answer in parts, as a stream answer with `date`.
    pub fn from_parts(parts: super::site::Parts<'_>, date: &[u8; DATE_LEN]) -> Self {
        let mut headers = header_map(parts.fields.iter().map(|(n, v)| (*n, &**v)));
        let body = parts.body.unwrap_or_default();
        if parts.status != 304 {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let mut response = StreamAnswer {
            status: StatusCode::from_u16(parts.status).unwrap_or(StatusCode::OK),
            headers,
            body,
            hold: Hold::default(),
            recorder: None,
            admission: None,
            pauses: None,
            events: None,
            awaits: None,
            grpc: None,
            trailers: None,
        };
        response.set_date(date);
        response
    }

    /// Whether the answer is made from its request's body, which must be read (and kept) first.
    pub fn awaits_body(&self) -> bool {
        self.awaits.is_some()
    }

    /// The answer to a request whose body was `body`: this one, or the one made from the body.
    pub fn answered(mut self, body: &[u8]) -> StreamAnswer {
        match self.awaits.take() {
            Some(awaits) => awaits.answer(self, body),
            None => self,
        }
    }

    /// The delivery of this answer to a request complete at `arrived` (`None`: the time was not
    /// read, for an answer with no ticket and no truth), `head_only` for a HEAD: a route's held
    /// answer takes its ticket now — served, queued or shed by its route's pool (see [`Ticket`]).
    pub fn delivery(&mut self, arrived: Option<std::time::Instant>, head_only: bool) -> Delivery {
        let events = self.events.take().filter(|_| !head_only);
        let ticket = arrived.and_then(|now| self.admit(now, events.is_some()));
        let len = |answer: &StreamAnswer| if head_only { 0 } else { answer.body.len() };
        let shed = self.admission.as_ref().and_then(|a| a.shed.as_ref());
        Delivery::new(self.hold, len(self), ticket, arrived, shed.map(len))
            .paused_by(self.pauses.clone())
            .with_events(events)
            .with_trailers(self.trailers.is_some())
    }

    /// The ticket of a route's held answer whose request is complete at `now` (none for an answer
    /// that is not held), a `sequence`'s for a stream of events.
    fn admit(&self, now: std::time::Instant, sequence: bool) -> Option<Ticket> {
        let (admission, key) = (self.admission.as_ref()?, self.hold.truth?);
        let recorder = self.recorder.clone()?;
        Some(admission.ticket(key, &self.hold, recorder, (now, sequence)))
    }

    pub fn set_date(&mut self, date: &[u8; DATE_LEN]) {
        if let Ok(v) = HeaderValue::from_bytes(date) {
            self.headers.insert(http::header::DATE, v);
        }
    }

    /// The response head to send and its body. Consumes this copy, so the headers are moved, not
    /// cloned a second time (the caller's copy per stream is the one clone).
    pub fn into_parts(self) -> (Response<()>, Bytes) {
        let mut r = Response::new(());
        *r.status_mut() = self.status;
        *r.headers_mut() = self.headers;
        (r, self.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_specific_fields_are_left_out_of_http2_responses() {
        let spec = ResponseSpec {
            status: 200,
            headers: [
                ("Keep-Alive", "timeout=5"),
                ("TE", "trailers"),
                ("te", "gzip"),
                ("Upgrade", "websocket"),
                ("Proxy-Connection", "close"),
                ("X-Kept", "yes"),
            ]
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
            body: vec![],
        };
        assert_eq!(
            left_out_fields(&spec),
            ["Keep-Alive", "te", "Upgrade", "Proxy-Connection"]
        );
        let r = StreamAnswer::new(&spec).unwrap();
        assert_eq!(r.headers.get("x-kept").unwrap(), "yes");
        assert_eq!(r.headers.get("te").unwrap(), "trailers");
        for gone in ["keep-alive", "upgrade", "proxy-connection"] {
            assert!(r.headers.get(gone).is_none(), "{gone}");
        }
    }
}
