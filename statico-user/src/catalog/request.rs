//! The request view: the few fields of a request that an answer may depend on, borrowed from the
//! request as it arrived and built once per request: by the HTTP/1.1 session from the request head,
//! and from the `http` crate's request that HTTP/2 and HTTP/3 hand over ([`Request::from_http`]).
//!
//! It allocates nothing; a catalog kind that answers every request alike never asks for it (see
//! [`View::choose`](crate::catalog::View::choose)), so the single-response hot path parses no head twice.

/// The request fields an answer depends on.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    pub method: &'a [u8],
    /// The request target as sent: `/a%20b/c?x=1` (or an absolute URI).
    pub target: &'a [u8],
    pub accept_encoding: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
    /// A reconnecting event-stream client's last event (a streamed route resumes after it).
    pub last_event_id: Option<&'a [u8]>,
    /// With `--grpc`: a gRPC call is told by it.
    pub content_type: Option<&'a [u8]>,
}

impl<'a> Request<'a> {
    /// The fields of an HTTP/2 or HTTP/3 request.
    pub fn from_http<B>(request: &'a http::Request<B>) -> Request<'a> {
        let target = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes();
        let mut r = Request {
            method: request.method().as_str().as_bytes(),
            target,
            ..Request::default()
        };
        for (name, value) in request.headers() {
            r.set(name.as_str().as_bytes(), value.as_bytes());
        }
        r
    }

    /// Records one header field if the answer depends on it.
    pub fn set(&mut self, name: &[u8], value: &'a [u8]) {
        let slot = match name.len() {
            5 if name.eq_ignore_ascii_case(b"range") => &mut self.range,
            8 if name.eq_ignore_ascii_case(b"if-range") => &mut self.if_range,
            12 if name.eq_ignore_ascii_case(b"content-type") => &mut self.content_type,
            13 if name.eq_ignore_ascii_case(b"if-none-match") => &mut self.if_none_match,
            13 if name.eq_ignore_ascii_case(b"last-event-id") => &mut self.last_event_id,
            15 if name.eq_ignore_ascii_case(b"accept-encoding") => &mut self.accept_encoding,
            17 if name.eq_ignore_ascii_case(b"if-modified-since") => &mut self.if_modified_since,
            _ => return,
        };
        *slot = Some(value);
    }
}
