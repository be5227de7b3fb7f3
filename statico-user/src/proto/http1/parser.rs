//! HTTP/1.x request framing as a pure state machine: bytes in, [`Event`]s out, no I/O.
//!
//! statico answers every request with the same response, so it needs to know only where each request
//! starts and ends, whether the client wants the connection kept, and whether the request is broken.
//! This module decides exactly that and nothing else. It owns no buffer: the caller passes the bytes it
//! has, the parser says how many it consumed and what they were, and the caller keeps the rest for the
//! next call. Both runtimes (tokio and io_uring) drive the same parser, and the fuzz target drives it with
//! arbitrary bytes, so it must never panic, never loop without consuming, and never ask the caller to keep
//! more than [`Limits::max_head`] bytes.
//!
//! Request heads are parsed with `httparse`; bodies (Content-Length or chunked) are consumed here and
//! handed out as [`Event::Body`] slices, never parsed as requests.
//!
//! Input that arrives a little at a time (a client that trickles its head, or a fuzzer that feeds it
//! a byte at a time) is not looked at again and again: the parser remembers how much of the kept
//! input it has scanned for a line end, and hands a head to httparse only when the prefix it would
//! parse has grown — up to its last complete line, or its largest power-of-two length, whichever is
//! longer. A head trickled a byte a read is parsed once per line and per doubling, not once per
//! byte (which made a 16 KiB head cost 16 Ki parses of up to 16 KiB); a head that arrives in one
//! read ends in a line end, so it is parsed at once (a broken one answered at once). A broken
//! fragment whose last line has not ended is refused when that line ends, at the next doubling, at
//! the head limit or at `--header-timeout`. What is parsed depends only on the bytes, never on how
//! they were split.

use std::mem::MaybeUninit;

pub use crate::proto::MAX_HEADERS;

/// Longest chunk-size line (size, extensions, CRLF) accepted before answering 400.
const MAX_CHUNK_LINE: usize = 4096;

/// Size limits for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest request head (request line and header fields, up to the blank line), and longest
    /// trailer section of a chunked body. Longer is answered with 431.
    pub max_head: usize,
    /// Largest request body. Larger is answered with 413.
    pub max_body: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head: 16 * 1024,
            max_body: 16 * 1024 * 1024,
        }
    }
}

/// HTTP version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// How the request body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no Content-Length, no Transfer-Encoding, or Content-Length: 0).
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What the connection needs to know about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    pub version: Version,
    /// The method is HEAD: answer with the head of the response only.
    pub head_only: bool,
    /// The connection stays open after the response.
    pub keep_alive: bool,
    /// The client sent `Expect: 100-continue` and a body is expected.
    pub expect_continue: bool,
    pub body: BodyFraming,
    /// The client asked to switch to cleartext HTTP/2 (`Upgrade: h2c`, with `HTTP2-Settings` and
    /// `Connection: Upgrade, HTTP2-Settings`, RFC 7540 §3.2); honoured only with `--http2`.
    pub upgrade_h2c: bool,
}

/// The error answers (400, 413, 431, 501, 505) are the catalog's, pre-built with the response.
pub use crate::catalog::response::ErrorStatus;

/// What the bytes consumed by one [`Parser::next`] call were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A request head is complete. `raw` is the head as received, through the blank line.
    Head { info: RequestInfo, raw: &'a [u8] },
    /// Request body bytes (de-chunked).
    Body(&'a [u8]),
    /// The request, head and body, is complete: answer it.
    End(RequestInfo),
    /// The input holds no complete item: keep the unconsumed bytes and call again with more.
    Incomplete,
    /// The request is malformed or over a limit: answer with this status and close the connection.
    Error(ErrorStatus),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for a request head.
    Head,
    /// Inside a Content-Length body with this many bytes left (0: the request is complete).
    Length(u64),
    /// Expecting a chunk-size line.
    ChunkSize,
    /// Inside chunk data with this many bytes left.
    ChunkData(u64),
    /// Expecting the CRLF after chunk data.
    ChunkDataEnd,
    /// Inside the trailer section, having consumed this many bytes of it.
    Trailers(usize),
    /// An error was reported; every later call reports it again.
    Failed(ErrorStatus),
}

/// The request framing state of one connection.
#[derive(Clone, Debug)]
pub struct Parser {
    limits: Limits,
    state: State,
    /// The request being received (meaningful outside `State::Head`).
    info: RequestInfo,
    /// Body bytes announced so far by chunk sizes, for the body limit.
    chunked_total: u64,
    /// How many bytes at the start of the kept input were scanned for a line end in this state (a
    /// chunk or trailer line: none was found there).
    scanned: u32,
    /// In a head: how long a prefix of it httparse last parsed (it said `Partial`).
    parsed: u32,
}

impl Parser {
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            state: State::Head,
            info: RequestInfo {
                version: Version::Http11,
                head_only: false,
                keep_alive: true,
                expect_continue: false,
                body: BodyFraming::None,
                upgrade_h2c: false,
            },
            chunked_total: 0,
            scanned: 0,
            parsed: 0,
        }
    }

    /// True between requests: no part of a request has been consumed. (The caller may still hold
    /// unconsumed bytes of a partial head.)
    pub fn between_requests(&self) -> bool {
        self.state == State::Head
    }

    /// Consumes a prefix of `input` and says what it was. Returns the number of bytes consumed (possibly
    /// zero) and the event. With `Incomplete` the consumed bytes were complete items with nothing to report
    /// (blank lines before a request, whole chunk lines, trailer lines); the rest must be kept and passed
    /// again, followed by more input.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> (usize, Event<'a>) {
        let (n, event) = self.step(input);
        // Every `Incomplete` leaves `scanned` counted from the first byte it did not consume; any
        // other event ends what was scanned.
        if event != Event::Incomplete {
            (self.scanned, self.parsed) = (0, 0);
        }
        (n, event)
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> (usize, Event<'a>) {
        match self.state {
            State::Failed(status) => (0, Event::Error(status)),
            State::Head => self.head(input),
            State::Length(0) => self.end(0),
            State::Length(remaining) => {
                if input.is_empty() {
                    return (0, Event::Incomplete);
                }
                let n = clamp(remaining, input.len());
                self.state = State::Length(remaining - n as u64);
                (n, Event::Body(&input[..n]))
            }
            State::ChunkSize => self.chunk_size(input),
            State::ChunkData(remaining) => {
                if input.is_empty() {
                    return (0, Event::Incomplete);
                }
                let n = clamp(remaining, input.len());
                let left = remaining - n as u64;
                self.state = if left == 0 {
                    State::ChunkDataEnd
                } else {
                    State::ChunkData(left)
                };
                (n, Event::Body(&input[..n]))
            }
            State::ChunkDataEnd => match input {
                [b'\r', b'\n', ..] => {
                    self.state = State::ChunkSize;
                    self.step(&input[2..]).consumed_plus(2)
                }
                [] | [b'\r'] => (0, Event::Incomplete),
                _ => self.fail(ErrorStatus::BadRequest),
            },
            State::Trailers(seen) => self.trailers(input, seen),
        }
    }

    fn fail<'a>(&mut self, status: ErrorStatus) -> (usize, Event<'a>) {
        self.state = State::Failed(status);
        (0, Event::Error(status))
    }

    fn end<'a>(&mut self, consumed: usize) -> (usize, Event<'a>) {
        self.state = State::Head;
        (consumed, Event::End(self.info))
    }

    #[inline(never)] // keeps the header array out of the frames of the other states
    fn head<'a>(&mut self, input: &'a [u8]) -> (usize, Event<'a>) {
        // RFC 9112 §2.2: ignore empty lines received before the request line.
        let skip = input
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        if skip > 0 {
            (self.scanned, self.parsed) = (0, 0); // they counted from the skipped lines
            return self.head(&input[skip..]).consumed_plus(skip);
        }
        if input.is_empty() {
            return (0, Event::Incomplete);
        }

        // Only the first `max_head` bytes are looked at, so the outcome does not depend on how much
        // input arrived at once: a head that is not complete within the limit is 431 either way.
        let window = &input[..input.len().min(self.limits.max_head)];
        let full = window.len() >= self.limits.max_head;
        let Some(parsed) = self.head_prefix(window, full) else {
            return (0, Event::Incomplete);
        };
        #[cfg(test)]
        tests::PARSES.with(|n| n.set(n.get() + 1));
        let mut headers = [const { MaybeUninit::<httparse::Header<'a>>::uninit() }; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let head_len = match req.parse_with_uninit_headers(parsed, &mut headers) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if full => {
                return self.fail(ErrorStatus::HeaderFieldsTooLarge)
            }
            Ok(httparse::Status::Partial) => return (0, Event::Incomplete),
            Err(httparse::Error::TooManyHeaders) => {
                return self.fail(ErrorStatus::HeaderFieldsTooLarge)
            }
            Err(httparse::Error::Version) => return self.fail(version_error(window)),
            Err(_) => return self.fail(ErrorStatus::BadRequest),
        };

        match analyze(&req, self.limits) {
            Ok(info) => {
                self.info = info;
                self.chunked_total = 0;
                self.state = match info.body {
                    BodyFraming::None => State::Length(0),
                    BodyFraming::Length(n) => State::Length(n),
                    BodyFraming::Chunked => State::ChunkSize,
                };
                (
                    head_len,
                    Event::Head {
                        info,
                        raw: &input[..head_len],
                    },
                )
            }
            Err(status) => self.fail(status),
        }
    }

    /// The prefix of `window` (a head's first bytes) to parse: all of it at the limit; below it, up
    /// to the last line end or the largest power of two, whichever is longer — or none when that is
    /// no longer than what was parsed before (httparse would say `Partial` again). A function of
    /// the bytes alone, so splits do not change what is found; it grows at most once per line and
    /// once per doubling.
    fn head_prefix<'a>(&mut self, window: &'a [u8], full: bool) -> Option<&'a [u8]> {
        if full {
            return Some(window); // decided now, either way (`--max-head-size 0`: empty)
        }
        let fresh = window.get(self.scanned as usize..).unwrap_or(window);
        let lines = (fresh.iter().rposition(|&b| b == b'\n'))
            .map_or(0, |i| window.len() - fresh.len() + i + 1);
        let power = 1 << window.len().ilog2(); // not empty: below a limit above 0
        let upto = lines.max(power);
        self.scanned = saturated(window.len());
        if upto <= self.parsed as usize {
            return None;
        }
        self.parsed = saturated(upto);
        Some(&window[..upto])
    }

    fn chunk_size<'a>(&mut self, input: &'a [u8]) -> (usize, Event<'a>) {
        let Some(line_len) = find_line(input, self.scanned as usize, MAX_CHUNK_LINE) else {
            return if input.len() >= MAX_CHUNK_LINE {
                self.fail(ErrorStatus::BadRequest)
            } else {
                self.scanned = saturated(input.len());
                (0, Event::Incomplete)
            };
        };
        let Some(line) = input[..line_len].strip_suffix(b"\r\n") else {
            return self.fail(ErrorStatus::BadRequest);
        };
        let Some(size) = parse_chunk_size(line) else {
            return self.fail(ErrorStatus::BadRequest);
        };
        self.scanned = 0;
        if size == 0 {
            self.state = State::Trailers(0);
            return self.step(&input[line_len..]).consumed_plus(line_len);
        }
        self.chunked_total = self.chunked_total.saturating_add(size);
        if self.chunked_total > self.limits.max_body {
            return self.fail(ErrorStatus::ContentTooLarge);
        }
        self.state = State::ChunkData(size);
        self.step(&input[line_len..]).consumed_plus(line_len)
    }

    fn trailers<'a>(&mut self, input: &'a [u8], mut seen: usize) -> (usize, Event<'a>) {
        let mut consumed = 0;
        loop {
            let rest = &input[consumed..];
            let room = self.limits.max_head.saturating_sub(seen);
            // Only the first line may have been looked at before (in an earlier call).
            let scanned = if consumed == 0 {
                self.scanned as usize
            } else {
                0
            };
            let Some(line_len) = find_line(rest, scanned, room) else {
                self.state = State::Trailers(seen);
                return if rest.len() >= room {
                    self.fail(ErrorStatus::HeaderFieldsTooLarge)
                } else {
                    self.scanned = saturated(rest.len());
                    (consumed, Event::Incomplete)
                };
            };
            let Some(line) = rest[..line_len].strip_suffix(b"\r\n") else {
                return self.fail(ErrorStatus::BadRequest);
            };
            consumed += line_len;
            if line.is_empty() {
                return self.end(consumed);
            }
            if !is_field_line(line) {
                return self.fail(ErrorStatus::BadRequest);
            }
            seen += line_len;
        }
    }
}

trait ConsumedPlus {
    fn consumed_plus(self, n: usize) -> Self;
}

impl ConsumedPlus for (usize, Event<'_>) {
    /// Accounts for bytes consumed before a recursive step. Errors keep reporting 0 consumed: after an
    /// error the connection is closed and nothing more is read.
    fn consumed_plus(self, n: usize) -> Self {
        match self.1 {
            Event::Error(_) => self,
            _ => (self.0 + n, self.1),
        }
    }
}

/// A length kept in a `u32` (a head limit over 4 GiB is not sensible, but may be given): a smaller
/// count only makes the parser look again.
fn saturated(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn clamp(remaining: u64, available: usize) -> usize {
    usize::try_from(remaining).map_or(available, |r| r.min(available))
}

/// Length of the first line of `input` including its `\n`, if one ends within `limit` bytes; the
/// first `scanned` bytes are known to hold none.
fn find_line(input: &[u8], scanned: usize, limit: usize) -> Option<usize> {
    let window = &input[..input.len().min(limit)];
    let from = scanned.min(window.len());
    (window[from..].iter().position(|&b| b == b'\n')).map(|i| from + i + 1)
}

/// `chunk-size [ chunk-ext ]` without the CRLF. Extensions are accepted and ignored.
fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return None;
    }
    let mut size: u64 = 0;
    for &b in &line[..digits] {
        let d = (b as char).to_digit(16)? as u64;
        size = size.checked_mul(16)?.checked_add(d)?;
    }
    let rest = &line[digits..];
    let ext = rest.trim_ascii_start();
    if !(ext.is_empty() && rest.is_empty() || ext.first() == Some(&b';')) {
        return None;
    }
    if ext.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return None;
    }
    Some(size)
}

/// A trailer field line: a token, a colon, then visible characters.
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    colon > 0
        && line[..colon].iter().all(|&b| is_tchar(b))
        && line[colon + 1..]
            .iter()
            .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// httparse accepts only HTTP/1.0 and HTTP/1.1. A version token of another major number (`HTTP/2.0`,
/// `HTTP/3`) is 505; anything else httparse calls a version error is a malformed request line (400).
/// Only the bytes up to the major digit decide, so the answer does not depend on how much of the line
/// has arrived when httparse rejects it.
fn version_error(input: &[u8]) -> ErrorStatus {
    let line_end = input
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(input.len());
    let version = input[..line_end]
        .splitn(3, |&b| b == b' ')
        .nth(2)
        .unwrap_or_default();
    match version {
        [b'H', b'T', b'T', b'P', b'/', major, ..] if major.is_ascii_digit() && *major != b'1' => {
            ErrorStatus::VersionNotSupported
        }
        _ => ErrorStatus::BadRequest,
    }
}

/// Applies RFC 9112's framing rules to a parsed head.
fn analyze(req: &httparse::Request<'_, '_>, limits: Limits) -> Result<RequestInfo, ErrorStatus> {
    let version = match req.version {
        Some(0) => Version::Http10,
        _ => Version::Http11,
    };
    let head_only = req.method == Some("HEAD");

    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut hosts = 0usize;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    let mut conn_upgrade = false;
    let mut expect_continue = false;
    let mut upgrade_h2c = false;
    let mut http2_settings = 0usize;

    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = h.value.trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return Err(ErrorStatus::BadRequest);
            }
            content_length = Some(parse_content_length(value).ok_or(ErrorStatus::BadRequest)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
            for coding in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if coding.is_empty() {
                    return Err(ErrorStatus::BadRequest);
                }
                if !coding.eq_ignore_ascii_case(b"chunked") {
                    return Err(ErrorStatus::NotImplemented);
                }
                if chunked {
                    return Err(ErrorStatus::BadRequest);
                }
                chunked = true;
            }
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                conn_close |= token.eq_ignore_ascii_case(b"close");
                conn_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                conn_upgrade |= token.eq_ignore_ascii_case(b"upgrade");
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            expect_continue = value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade_h2c |= value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"));
        } else if name.eq_ignore_ascii_case(b"http2-settings") {
            http2_settings += 1;
        }
    }

    if transfer_encoding && (content_length.is_some() || version == Version::Http10) {
        return Err(ErrorStatus::BadRequest);
    }
    if version == Version::Http11 && hosts != 1 || hosts > 1 {
        return Err(ErrorStatus::BadRequest);
    }
    let body = match (chunked, content_length) {
        (true, _) => BodyFraming::Chunked,
        (false, Some(n)) if n > limits.max_body => return Err(ErrorStatus::ContentTooLarge),
        (false, Some(0)) | (false, None) => BodyFraming::None,
        (false, Some(n)) => BodyFraming::Length(n),
    };
    let keep_alive = match version {
        Version::Http11 => !conn_close,
        Version::Http10 => conn_keep_alive && !conn_close,
    };
    Ok(RequestInfo {
        version,
        head_only,
        keep_alive,
        expect_continue: expect_continue && version == Version::Http11 && body != BodyFraming::None,
        body,
        upgrade_h2c: upgrade_h2c
            && conn_upgrade
            && http2_settings == 1
            && version == Version::Http11,
    })
}

/// `Content-Length = 1*DIGIT`, at most 19 digits so it fits a u64 (the control API reads its
/// requests' with it too).
pub fn parse_content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Feeds `data` through a parser the way a connection would — in pieces of `piece` bytes, keeping
/// unconsumed bytes — and checks the invariants every runtime relies on: it never consumes more than
/// it was given, never asks to keep more than the head limit (or a chunk line), a head is the bytes
/// it consumed, a body slice is never empty, a `Content-Length` body is as long as it said, and an
/// error is sticky. Used by the unit tests and the `http1` fuzz oracle (`fuzz/oracle/http1.rs`).
/// Returns the events seen, in a comparable form.
pub fn check_invariants(data: &[u8], piece: usize, limits: Limits) -> Vec<String> {
    let mut parser = Parser::new(limits);
    let mut pending: Vec<u8> = Vec::new();
    let mut log = Vec::new();
    let mut body = 0usize;
    for chunk in data.chunks(piece.max(1)) {
        pending.extend_from_slice(chunk);
        // Consumed bytes are dropped once per piece, not once per event.
        let mut at = 0;
        loop {
            let input = &pending[at..];
            let (n, event) = parser.next(input);
            assert!(n <= input.len(), "consumed more than given");
            at += n;
            match event {
                Event::Incomplete => break,
                Event::Head { info, raw } => {
                    assert!(
                        raw.len() <= n && input[n - raw.len()..n] == *raw,
                        "head is not the consumed bytes"
                    );
                    log.push(format!("head {info:?}"));
                }
                Event::Body(b) => {
                    assert!(
                        !b.is_empty() && b.len() <= n,
                        "empty or oversized body slice"
                    );
                    body += b.len();
                }
                Event::End(info) => {
                    log.push(format!("end {info:?} body={body}"));
                    if let BodyFraming::Length(len) = info.body {
                        assert_eq!(body as u64, len);
                    }
                    body = 0;
                }
                Event::Error(status) => {
                    log.push(format!("error {}", status.code()));
                    assert_eq!(parser.next(&pending[at..]).1, Event::Error(status));
                    return log;
                }
            }
        }
        pending.drain(..at);
        assert!(
            pending.len() <= limits.max_head.max(MAX_CHUNK_LINE),
            "parser asked to keep {} bytes",
            pending.len()
        );
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// How many heads httparse was asked to parse on this thread.
        pub(super) static PARSES: Cell<usize> = const { Cell::new(0) };
    }

    #[test]
    fn a_trickled_head_is_parsed_once_a_line_and_a_doubling_not_once_a_byte() {
        let mut head = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 8000));
        head.extend_from_slice(b"\r\n\r\n");
        let before = PARSES.with(Cell::get);
        let log = check_invariants(&head, 1, Limits::default());
        assert!(log.len() == 2 && log[1].starts_with("end"), "{log:?}");
        // Four line ends and the powers of two up to 8 KiB; it was once per byte.
        let parses = PARSES.with(Cell::get) - before;
        assert!(
            parses <= 4 + 14,
            "{parses} parses of a {}-byte head",
            head.len()
        );
        // A chunk line and a trailer trickled are complete all the same.
        let chunked = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
            0000000003;a=bbbbbbbbbbbbbbbbbbbbbbbb\r\nabc\r\n0\r\nX-Trailer: ccccccccccccccc\r\n\r\n";
        assert_eq!(
            check_invariants(chunked, 1, Limits::default()),
            events(chunked)
        );
    }

    #[test]
    fn a_broken_head_in_one_read_is_answered_at_once() {
        // A TLS ClientHello on a plain port: refused without waiting for a line end.
        let mut p = Parser::new(Limits::default());
        let hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
        assert_eq!(p.next(hello), (0, Event::Error(ErrorStatus::BadRequest)));
        // Trickled, a broken request line is refused by its second byte (a power of two).
        let mut p = Parser::new(Limits::default());
        assert_eq!(p.next(b"G"), (0, Event::Incomplete));
        assert_eq!(p.next(b"G@"), (0, Event::Error(ErrorStatus::BadRequest)));
        // A head limit of 0 (`--max-head-size 0`): every request is too large, none a crash.
        let mut p = Parser::new(Limits {
            max_head: 0,
            ..Limits::default()
        });
        let e = Event::Error(ErrorStatus::HeaderFieldsTooLarge);
        assert_eq!(p.next(b"G"), (0, e));
    }

    /// Runs the parser over `input` in one piece and collects the events, de-chunked bodies joined.
    fn events(input: &[u8]) -> Vec<String> {
        check_invariants(input, input.len().max(1), Limits::default())
    }

    fn first_error(input: &[u8]) -> Option<u16> {
        first_error_with(input, Limits::default())
    }

    fn first_error_with(input: &[u8], limits: Limits) -> Option<u16> {
        check_invariants(input, input.len().max(1), limits)
            .iter()
            .find_map(|e| e.strip_prefix("error ").map(|s| s.parse().unwrap()))
    }

    fn ends(input: &[u8]) -> usize {
        events(input)
            .iter()
            .filter(|e| e.starts_with("end"))
            .count()
    }

    fn one_request(input: &[u8]) -> RequestInfo {
        let mut p = Parser::new(Limits::default());
        let (n, ev) = p.next(input);
        let Event::Head { info, .. } = ev else {
            panic!("expected a head, got {ev:?}")
        };
        assert_eq!(n, input.len());
        info
    }

    #[test]
    fn simple_get_is_keep_alive_http11() {
        let info = one_request(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(info.version, Version::Http11);
        assert!(info.keep_alive && !info.head_only && !info.expect_continue);
        assert_eq!(info.body, BodyFraming::None);
    }

    #[test]
    fn h2c_upgrade_needs_settings_and_connection_upgrade() {
        let ok = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
        assert!(one_request(ok).upgrade_h2c);
        let no_settings =
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
        assert!(!one_request(no_settings).upgrade_h2c);
        let websocket = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: websocket\r\nHTTP2-Settings: AA\r\n\r\n";
        assert!(!one_request(websocket).upgrade_h2c);
    }

    #[test]
    fn head_method_is_flagged() {
        assert!(one_request(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n").head_only);
    }

    #[test]
    fn http10_closes_unless_keep_alive_asked() {
        assert!(!one_request(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(one_request(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert_eq!(
            one_request(b"GET / HTTP/1.0\r\n\r\n").version,
            Version::Http10
        );
    }

    #[test]
    fn connection_close_is_honoured_in_a_token_list() {
        assert!(
            !one_request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n").keep_alive
        );
    }

    #[test]
    fn expect_continue_only_with_a_body() {
        let with =
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
        assert!(one_request(with).expect_continue);
        let without = b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n";
        assert!(!one_request(without).expect_continue);
    }

    #[test]
    fn pipelined_requests_are_each_ended() {
        let one = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let sixteen: Vec<u8> = one.repeat(16);
        assert_eq!(ends(&sixteen), 16);
    }

    #[test]
    fn content_length_body_is_consumed_not_parsed() {
        let body = b"GET /evil HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut req = format!(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        req.extend_from_slice(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let ev = events(&req);
        assert_eq!(ends(&req), 2, "{ev:?}");
        assert!(ev[1].contains(&format!("body={}", body.len())));
    }

    #[test]
    fn chunked_body_is_decoded_with_extensions_and_trailers() {
        let req = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\n\
            GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let ev = events(req);
        assert_eq!(ends(req), 2, "{ev:?}");
        assert!(ev[1].ends_with("body=31"), "{ev:?}");
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let req = b"\r\nPOST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
            3\r\nabc\r\n0\r\n\r\nPUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbodyHEAD / HTTP/1.0\r\n\r\n";
        let whole = events(req);
        assert_eq!(whole.iter().filter(|e| e.starts_with("end")).count(), 3);
        for piece in 1..8 {
            assert_eq!(
                check_invariants(req, piece, Limits::default()),
                whole,
                "piece {piece}"
            );
        }
    }

    #[test]
    fn framing_errors_are_400() {
        let cases: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\n\r\n",                                   // no Host
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",             // two Hosts
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
            b"GET / HTTP/1.1\r\nHost a\r\n\r\n",                          // no colon
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / FOO/1.1\r\nHost: a\r\n\r\n",
        ];
        for case in cases {
            assert_eq!(
                first_error(case),
                Some(400),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn unknown_transfer_coding_is_501() {
        assert_eq!(
            first_error(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Some(501)
        );
    }

    #[test]
    fn unknown_major_version_is_505() {
        assert_eq!(first_error(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"), Some(505));
        assert_eq!(first_error(b"GET / HTTP/3\r\nHost: a\r\n\r\n"), Some(505));
    }

    #[test]
    fn oversized_head_is_431_even_when_it_never_ends() {
        let limits = Limits {
            max_head: 256,
            max_body: 1024,
        };
        let mut endless = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
        endless.extend(std::iter::repeat_n(b'a', 1000));
        assert_eq!(first_error_with(&endless, limits), Some(431));
        // Fed in small pieces, the parser never asks to keep more than the limit.
        let log = check_invariants(&endless, 7, limits);
        assert_eq!(log, vec!["error 431".to_string()]);
        let many: Vec<u8> = [
            b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec(),
            b"X: y\r\n".repeat(MAX_HEADERS + 1),
            b"\r\n".to_vec(),
        ]
        .concat();
        assert_eq!(first_error(&many), Some(431));
    }

    #[test]
    fn oversized_body_is_413() {
        let limits = Limits {
            max_head: 1024,
            max_body: 10,
        };
        assert_eq!(
            first_error_with(
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n",
                limits
            ),
            Some(413)
        );
        assert_eq!(
            first_error_with(
                b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\n",
                limits
            ),
            Some(413)
        );
    }

    #[test]
    fn errors_are_sticky() {
        let mut p = Parser::new(Limits::default());
        let (_, ev) = p.next(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(ev, Event::Error(ErrorStatus::BadRequest));
        let (n, ev) = p.next(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!((n, ev), (0, Event::Error(ErrorStatus::BadRequest)));
    }

    #[test]
    fn partial_head_consumes_nothing() {
        let mut p = Parser::new(Limits::default());
        assert_eq!(p.next(b"GET / HT"), (0, Event::Incomplete));
        assert!(p.between_requests());
    }
}
