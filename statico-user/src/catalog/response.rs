//! The pre-built response: encoded once at start-up, copied as bytes for every request.
//!
//! statico's whole job is to send the same bytes again and again, so those bytes are built once: status
//! line, headers, `Content-Length`, `Date`, body, in one contiguous buffer. Only two things vary per
//! request, and both are decided by choosing a prebuilt buffer rather than by formatting:
//! - the connection header ([`Framing`]): none for HTTP/1.1 keep-alive, `Connection: keep-alive` for an
//!   HTTP/1.0 client that asked for it, `Connection: close` when the connection ends after it;
//! - HEAD requests get the same head without the body (a prefix of the same buffer).
//!
//! The `Date` header is the one live field: [`Response::set_date`] patches its 29 bytes in place in every
//! buffer, once a second, from the worker's clock tick; nothing is formatted per request. Error responses
//! (400, 413, 431, 501, 505) are prebuilt the same way.

use std::time::SystemTime;

use anyhow::{bail, Context, Result};

/// An error status statico answers malformed or oversized requests with, before closing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorStatus {
    BadRequest,
    ContentTooLarge,
    HeaderFieldsTooLarge,
    NotImplemented,
    VersionNotSupported,
    /// A gRPC call over HTTP/1.1 (`--grpc` serves gRPC on HTTP/2 only).
    UnsupportedMediaType,
}

impl ErrorStatus {
    pub const ALL: [ErrorStatus; 6] = [
        ErrorStatus::BadRequest,
        ErrorStatus::ContentTooLarge,
        ErrorStatus::HeaderFieldsTooLarge,
        ErrorStatus::NotImplemented,
        ErrorStatus::VersionNotSupported,
        ErrorStatus::UnsupportedMediaType,
    ];

    pub const fn code(self) -> u16 {
        match self {
            ErrorStatus::BadRequest => 400,
            ErrorStatus::ContentTooLarge => 413,
            ErrorStatus::HeaderFieldsTooLarge => 431,
            ErrorStatus::NotImplemented => 501,
            ErrorStatus::VersionNotSupported => 505,
            ErrorStatus::UnsupportedMediaType => 415,
        }
    }

    pub const fn reason(self) -> &'static str {
        match self {
            ErrorStatus::BadRequest => "Bad Request",
            ErrorStatus::ContentTooLarge => "Content Too Large",
            ErrorStatus::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            ErrorStatus::NotImplemented => "Not Implemented",
            ErrorStatus::VersionNotSupported => "HTTP Version Not Supported",
            ErrorStatus::UnsupportedMediaType => "Unsupported Media Type",
        }
    }
}

/// Length of an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_LEN: usize = 29;

/// What the user asked statico to answer with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseSpec {
    pub status: u16,
    /// Extra header fields, in order; a `Server` field here replaces statico's.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// How the response frames the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// HTTP/1.1 persistent connection: no `Connection` field.
    KeepAlive = 0,
    /// HTTP/1.0 client that sent `Connection: keep-alive`: answer it in kind.
    KeepAlive10 = 1,
    /// The connection closes after this response: `Connection: close`.
    Close = 2,
    /// The same, to an HTTP/1.0 client (which cannot read a chunked body).
    Close10 = 3,
}

/// One fully encoded response.
#[derive(Clone, Debug)]
struct Encoded {
    bytes: Vec<u8>,
    head_len: usize,
    date_at: usize,
}

impl Encoded {
    fn date(&self) -> &[u8; DATE_LEN] {
        self.bytes[self.date_at..self.date_at + DATE_LEN]
            .try_into()
            .expect("DATE_LEN bytes")
    }

    fn build(
        status_line: &str,
        fields: &[(String, String)],
        connection: Option<&str>,
        body: &[u8],
    ) -> Self {
        let mut bytes = Vec::with_capacity(256 + body.len());
        bytes.extend_from_slice(status_line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        for (name, value) in fields {
            push_field(&mut bytes, name, value);
        }
        if let Some(connection) = connection {
            push_field(&mut bytes, "Connection", connection);
        }
        bytes.extend_from_slice(b"Date: ");
        let date_at = bytes.len();
        bytes.extend_from_slice(&http_date(SystemTime::now()));
        bytes.extend_from_slice(b"\r\n\r\n");
        let head_len = bytes.len();
        bytes.extend_from_slice(body);
        Encoded {
            bytes,
            head_len,
            date_at,
        }
    }

    fn set_date(&mut self, date: &[u8; DATE_LEN]) {
        self.bytes[self.date_at..self.date_at + DATE_LEN].copy_from_slice(date);
    }
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The once-a-second `Date` tick, the same for every runtime: a runtime calls [`DateClock::tick`]
/// whenever it wakes for its clock, and patches its responses when the second has changed.
#[derive(Debug, Default)]
pub struct DateClock {
    second: u64,
}

impl DateClock {
    /// The new `Date` value if the second has changed since the last call.
    pub fn tick(&mut self, now: SystemTime) -> Option<[u8; DATE_LEN]> {
        let second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        (second != self.second).then(|| {
            self.second = second;
            http_date(now)
        })
    }

    /// How long from `now` to the next second boundary, when `Date` changes.
    pub fn until_next_second(now: SystemTime) -> std::time::Duration {
        let nanos = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::time::Duration::from_nanos(1_000_000_000 - u64::from(nanos))
    }
}

/// Formats `t` as an IMF-fixdate.
pub fn http_date(t: SystemTime) -> [u8; DATE_LEN] {
    let s = httpdate::fmt_http_date(t);
    let mut out = [b' '; DATE_LEN];
    // httpdate always yields 29 bytes for dates after 1970 and before year 10000.
    out.copy_from_slice(&s.as_bytes()[..DATE_LEN]);
    out
}

/// The response in every framing, plus the error responses, all with a live `Date`.
#[derive(Clone, Debug)]
pub struct Response {
    /// Kept alive (HTTP/1.1, HTTP/1.0), and closing; an HTTP/1.0 close takes the one at `close10`.
    variants: [Encoded; 3],
    close10: usize,
    errors: [Encoded; ErrorStatus::ALL.len()],
}

/// Fields statico writes itself; the user may not set them.
const RESERVED: [&str; 4] = ["content-length", "transfer-encoding", "connection", "date"];

/// The value of the `Server` field unless the user gives one.
pub const SERVER: &str = concat!("statico/", env!("CARGO_PKG_VERSION"));

/// The fields of an answer that has its own (a route's or a phase's `header=`, an echo query's
/// `?header=`) besides the default ones (`-H`): the defaults less those its own replace, then its
/// own, in order. An own field replaces every default field of the same name (case-insensitive),
/// except `Set-Cookie`, which is added to them: it is the field a response may carry more than
/// once and that cannot be folded into one line (RFC 9110 §5.3). Fields of one's own that repeat
/// are all kept.
pub fn with_own_fields<'a>(
    defaults: &'a [(String, String)],
    own: &'a [(String, String)],
) -> impl Iterator<Item = &'a (String, String)> + Clone {
    let replaced = |name: &str| {
        !name.eq_ignore_ascii_case("set-cookie")
            && own.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    (defaults.iter())
        .filter(move |(name, _)| !replaced(name))
        .chain(own)
}

/// An answer's own fields with the fields its kind sends unless it gives them (a stream's
/// `Content-Type`, say): `defaults` not named in `own` (case-insensitive), then `own`.
pub fn with_defaults(own: &[(String, String)], defaults: &[(&str, &str)]) -> Vec<(String, String)> {
    let named = |name: &str| own.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    (defaults.iter())
        .filter(|(name, _)| !named(name))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .chain(own.iter().cloned())
        .collect()
}

/// The header fields of the response, for HTTP/1.1 and HTTP/2 alike: statico's `Server` unless the user
/// gives one, the user's fields (validated), and `Content-Length` except where the status forbids it.
/// (`Date` and connection-specific fields are each protocol's own.)
pub fn header_fields(spec: &ResponseSpec) -> Result<Vec<(String, String)>> {
    header_fields_for(spec, spec.body.len())
}

/// [`header_fields`] for a body of `body_len` bytes kept apart from the spec (a route's shared body).
pub fn header_fields_for(spec: &ResponseSpec, body_len: usize) -> Result<Vec<(String, String)>> {
    fields_of(spec, Some(body_len))
}

/// The fields of a streamed answer, whose length is not known: no `Content-Length`.
pub fn streamed_fields(spec: &ResponseSpec) -> Result<Vec<(String, String)>> {
    fields_of(spec, None)
}

/// `Server` (unless given), the spec's fields, and the body's length when it is known and the
/// status may have a body.
fn fields_of(spec: &ResponseSpec, body_len: Option<usize>) -> Result<Vec<(String, String)>> {
    let mut fields: Vec<(String, String)> = Vec::new();
    if !spec
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("server"))
    {
        fields.push(("Server".into(), SERVER.into()));
    }
    for (name, value) in &spec.headers {
        validate_field(name, value)?;
        fields.push((name.clone(), value.clone()));
    }
    match body_len {
        Some(len) if spec.status != 204 && !(100..=199).contains(&spec.status) => {
            fields.push(("Content-Length".into(), len.to_string()))
        }
        _ => {}
    }
    Ok(fields)
}

impl Response {
    pub fn new(spec: &ResponseSpec) -> Result<Self> {
        Response::build(spec, spec.body.len())
    }

    /// The head alone, for a body of `body_len` bytes that is sent from a shared buffer (a route's):
    /// [`Response::full`] is then the head too, and the caller appends the body.
    pub fn head_for(spec: &ResponseSpec, body_len: usize) -> Result<Self> {
        let spec = ResponseSpec {
            body: Vec::new(),
            ..spec.clone()
        };
        Response::build(&spec, body_len)
    }

    /// The heads of an answer whose body is a stream of events of unknown length: chunked on a
    /// persistent HTTP/1.1 connection; else `Connection: close`, the close ending the body (RFC
    /// 9112 §6.3), which an HTTP/1.0 client reads too.
    pub fn streamed(spec: &ResponseSpec) -> Result<Self> {
        let status_line = status_line(spec.status)?;
        let fields = streamed_fields(spec)?;
        let mut chunked_fields = fields.clone();
        chunked_fields.push(("Transfer-Encoding".into(), "chunked".into()));
        let chunked = Encoded::build(&status_line, &chunked_fields, None, b"");
        let close = Encoded::build(&status_line, &fields, Some("close"), b"");
        let chunked_close = Encoded::build(&status_line, &chunked_fields, Some("close"), b"");
        Ok(Response {
            variants: [chunked, close, chunked_close],
            close10: Framing::KeepAlive10 as usize,
            errors: errors(),
        })
    }

    fn build(spec: &ResponseSpec, body_len: usize) -> Result<Self> {
        let status_line = status_line(spec.status)?;
        let no_body = matches!(spec.status, 100..=199 | 204 | 304);
        if no_body && body_len > 0 {
            bail!(
                "status {} cannot carry a body (RFC 9110), but --body was given: drop --body or pick another --status",
                spec.status
            );
        }
        let fields = header_fields_for(spec, body_len)?;
        let variants = [None, Some("keep-alive"), Some("close")]
            .map(|connection| Encoded::build(&status_line, &fields, connection, &spec.body));
        Ok(Response {
            variants,
            close10: Framing::Close as usize,
            errors: errors(),
        })
    }

    /// The whole response (head and body) in this framing.
    #[inline]
    pub fn full(&self, framing: Framing) -> &[u8] {
        &self.variants[self.variant(framing)].bytes
    }

    /// The head only (for HEAD requests, and for `--body-delay`).
    #[inline]
    pub fn head(&self, framing: Framing) -> &[u8] {
        let v = &self.variants[self.variant(framing)];
        &v.bytes[..v.head_len]
    }

    /// Which of the variants `framing` takes.
    #[inline]
    fn variant(&self, framing: Framing) -> usize {
        match framing {
            Framing::Close10 => self.close10,
            other => other as usize,
        }
    }

    /// The body only.
    pub fn body(&self) -> &[u8] {
        let v = &self.variants[0];
        &v.bytes[v.head_len..]
    }

    /// The error response for `status` (always `Connection: close`).
    pub fn error(&self, status: ErrorStatus) -> &[u8] {
        let i = ErrorStatus::ALL
            .iter()
            .position(|&e| e == status)
            .expect("every ErrorStatus has a prebuilt response");
        &self.errors[i].bytes
    }

    /// Patches the `Date` field of every prebuilt response in place.
    /// The live `Date` value (a `--root` site writes it into its answers).
    pub fn date(&self) -> &[u8; DATE_LEN] {
        self.variants[0].date()
    }

    pub fn set_date(&mut self, date: &[u8; DATE_LEN]) {
        for e in self.variants.iter_mut().chain(self.errors.iter_mut()) {
            e.set_date(date);
        }
    }
}

/// Appends the head of an answer made for one request (an echo's, an openai route's): `status`,
/// `fields`, then its framing — `Content-Length` when the body's `length` is known, else (a stream)
/// chunked on an HTTP/1.1 connection and ended by the close on an HTTP/1.0 one — and `date`.
pub fn write_head<'a>(
    out: &mut impl super::sink::Sink,
    status: u16,
    fields: impl Iterator<Item = &'a (String, String)>,
    length: Option<usize>,
    framing: Framing,
    date: &[u8; DATE_LEN],
) {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Unknown");
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    for (name, value) in fields {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let chunked = matches!(framing, Framing::KeepAlive | Framing::Close);
    match length {
        Some(len) => head.push_str(&format!("Content-Length: {len}\r\n")),
        None if chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
        None => {}
    }
    match (framing, length) {
        (Framing::KeepAlive, _) => {}
        (Framing::KeepAlive10, Some(_)) => head.push_str("Connection: keep-alive\r\n"),
        _ => head.push_str("Connection: close\r\n"),
    }
    head.push_str("Date: ");
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n\r\n");
}

/// `HTTP/1.1 CODE Reason`.
fn status_line(status: u16) -> Result<String> {
    let status = http::StatusCode::from_u16(status)
        .with_context(|| format!("invalid status {status}: use a code from 100 to 999"))?;
    Ok(format!(
        "HTTP/1.1 {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Unknown")
    ))
}

/// The error answers every response carries.
fn errors() -> [Encoded; ErrorStatus::ALL.len()] {
    ErrorStatus::ALL.map(|e| {
        let line = format!("HTTP/1.1 {} {}", e.code(), e.reason());
        let fields = [
            ("Server".to_string(), SERVER.to_string()),
            ("Content-Length".to_string(), "0".to_string()),
        ];
        Encoded::build(&line, &fields, Some("close"), b"")
    })
}

/// A field name is a token; a value is visible characters, spaces and tabs (no CR or LF: no injection).
pub fn validate_field(name: &str, value: &str) -> Result<()> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        bail!("invalid header name {name:?}: use letters, digits and !#$%&'*+-.^_`|~ only");
    }
    if RESERVED.iter().any(|r| name.eq_ignore_ascii_case(r)) {
        bail!("header {name:?} is set by statico itself and cannot be given with -H");
    }
    if value.bytes().any(|b| b != b'\t' && (b < b' ' || b == 0x7f)) {
        bail!("invalid value for header {name:?}: control characters (CR, LF, …) are not allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&str, &str)]) -> Vec<(String, String)> {
        (list.iter())
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn own_fields_replace_same_named_defaults_but_set_cookie_adds() {
        let defaults = fields(&[
            ("Content-Type", "text/plain"),
            ("X-A", "1"),
            ("content-type", "text/html"),
            ("Set-Cookie", "a=1"),
        ]);
        let own = fields(&[
            ("CONTENT-TYPE", "application/json"),
            ("Set-Cookie", "b=2"),
            ("X-B", "2"),
            ("X-B", "3"),
        ]);
        let merged: Vec<_> = with_own_fields(&defaults, &own).cloned().collect();
        let want = [
            ("X-A", "1"),
            ("Set-Cookie", "a=1"),
            ("CONTENT-TYPE", "application/json"),
            ("Set-Cookie", "b=2"),
            ("X-B", "2"),
            ("X-B", "3"),
        ];
        assert_eq!(merged, fields(&want));
        let alone: Vec<_> = with_own_fields(&defaults, &[]).cloned().collect();
        assert_eq!(alone, defaults);
    }

    fn spec(status: u16, headers: &[(&str, &str)], body: &str) -> ResponseSpec {
        ResponseSpec {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn full_response_has_status_server_length_date_and_body() {
        let r = Response::new(&spec(200, &[("Content-Type", "text/plain")], "Hello")).unwrap();
        let t = text(r.full(Framing::KeepAlive));
        assert!(t.starts_with("HTTP/1.1 200 OK\r\n"), "{t}");
        assert!(t.contains(&format!("\r\nServer: {SERVER}\r\n")));
        assert!(t.contains("\r\nContent-Type: text/plain\r\n"));
        assert!(t.contains("\r\nContent-Length: 5\r\n"));
        assert!(
            t.contains("\r\nDate: ") && t.ends_with(" GMT\r\n\r\nHello"),
            "{t}"
        );
        assert!(!t.contains("Connection"));
    }

    #[test]
    fn framings_differ_only_in_connection_field() {
        let r = Response::new(&spec(201, &[], "x")).unwrap();
        assert!(text(r.full(Framing::Close)).contains("\r\nConnection: close\r\n"));
        assert!(text(r.full(Framing::KeepAlive10)).contains("\r\nConnection: keep-alive\r\n"));
        assert!(text(r.full(Framing::Close)).starts_with("HTTP/1.1 201 Created\r\n"));
    }

    #[test]
    fn head_is_a_prefix_without_body() {
        let r = Response::new(&spec(200, &[], "body!")).unwrap();
        let head = r.head(Framing::KeepAlive);
        assert!(head.ends_with(b"\r\n\r\n"));
        assert_eq!([head, r.body()].concat(), r.full(Framing::KeepAlive));
        assert_eq!(r.body(), b"body!");
    }

    #[test]
    fn date_is_patched_in_place_everywhere() {
        let mut r = Response::new(&spec(200, &[], "x")).unwrap();
        let len = r.full(Framing::KeepAlive).len();
        let date = *b"Sun, 06 Nov 1994 08:49:37 GMT";
        r.set_date(&date);
        assert_eq!(r.full(Framing::KeepAlive).len(), len);
        for f in [Framing::KeepAlive, Framing::KeepAlive10, Framing::Close] {
            assert!(text(r.full(f)).contains("Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"));
        }
        assert!(text(r.error(ErrorStatus::BadRequest)).contains("Date: Sun, 06 Nov 1994"));
    }

    #[test]
    fn user_server_header_replaces_the_default() {
        let r = Response::new(&spec(200, &[("server", "mock")], "")).unwrap();
        let t = text(r.full(Framing::KeepAlive));
        assert!(
            t.contains("server: mock\r\n") && !t.contains("statico/"),
            "{t}"
        );
    }

    #[test]
    fn reserved_and_malformed_headers_are_refused() {
        assert!(Response::new(&spec(200, &[("Content-Length", "3")], "")).is_err());
        assert!(Response::new(&spec(200, &[("X-A", "a\r\nInjected: 1")], "")).is_err());
        assert!(Response::new(&spec(200, &[("Bad Name", "v")], "")).is_err());
    }

    #[test]
    fn no_content_statuses_have_no_length_and_refuse_a_body() {
        let r = Response::new(&spec(204, &[], "")).unwrap();
        assert!(!text(r.full(Framing::KeepAlive)).contains("Content-Length"));
        assert!(Response::new(&spec(204, &[], "x")).is_err());
        let r = Response::new(&spec(304, &[], "")).unwrap();
        assert!(text(r.full(Framing::KeepAlive)).contains("Content-Length: 0"));
    }

    #[test]
    fn error_responses_close() {
        let r = Response::new(&spec(200, &[], "x")).unwrap();
        for e in ErrorStatus::ALL {
            let t = text(r.error(e));
            assert!(t.starts_with(&format!("HTTP/1.1 {} ", e.code())));
            assert!(t.contains("Connection: close\r\n") && t.contains("Content-Length: 0\r\n"));
        }
    }
}
