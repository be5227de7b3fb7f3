//! One connection's HTTP exchange: input bytes in, response bytes out.
//!
//! The connection (`conn::connection`) hands it the bytes it has, [`Session::process`] appends
//! the responses to `out` (pipelined requests together, so they leave in **one** write) and says how many
//! bytes it consumed; the connection keeps the rest. Everything about HTTP — which response, which
//! framing, 100 Continue, error responses, when to close, what to count and dump — is decided here,
//! without I/O; what to do about the socket (deadlines, backpressure, pacing) is the connection's.

use crate::catalog::response::Framing;
use crate::catalog::sink::Sink;
use crate::catalog::{Choice, Request, View};
use crate::observe::dump::Dumper;
use crate::proto::http1::parser::{ErrorStatus, Event, Limits, Parser, RequestInfo, Version};

/// The interim response sent when a client waits on `Expect: 100-continue`.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// What one [`Session::process`] call did.
#[derive(Debug, Default)]
pub struct Batch {
    /// Input bytes consumed; the caller keeps the rest.
    pub consumed: usize,
    /// Complete requests answered.
    pub requests: u64,
    /// Responses appended (error responses included, 100 Continue excluded).
    pub responses: u64,
    /// The error response appended, if the request was bad. The connection must close after writing.
    pub error: Option<ErrorStatus>,
    /// Close the connection once `out` is written.
    pub close: bool,
    /// The close is the server's, on a connection the client meant to keep (`--echo-query`'s
    /// `close`): the client may be sending its next request already.
    pub unasked_close: bool,
    /// With [`Pace::OneByOne`]: where the body of the last response starts in `out` (when it may be
    /// held apart from its head), and how that response is delivered.
    pub body_at: Option<usize>,
    pub hold: crate::catalog::Hold,
    /// With [`Pace::OneByOne`], a route's held answer: its ticket (its fate in a pool, its truth),
    /// and where its shed answer starts in `out` when it may be shed after waiting.
    pub ticket: Option<crate::catalog::model::load::Ticket>,
    /// With [`Pace::OneByOne`]: a streamed answer's events (its body given out as them).
    pub events: Option<Box<crate::catalog::model::events::Events>>,
    pub shed_at: Option<usize>,
    /// The last request asked for `Upgrade: h2c` and h2c is on: `101 Switching Protocols` was appended
    /// (after the responses before it); the caller writes it and switches the connection to HTTP/2 with
    /// the bytes after `consumed`. The request itself is answered on HTTP/2 stream 1.
    pub upgrade: Option<Box<crate::proto::detect::UpgradeRequest>>,
}

impl Batch {
    /// Adds what this batch did to a worker's counters (every runtime counts the same way).
    pub fn count(&self, c: &crate::observe::meter::WorkerCounters) {
        use statico_common::Counter;
        if self.requests > 0 {
            c.add(Counter::Requests, self.requests);
        }
        if self.responses > 0 {
            c.add(Counter::Responses, self.responses);
        }
        if let Some(counter) = self.error.and_then(|e| Counter::for_error_status(e.code())) {
            c.add(counter, 1);
        }
    }
}

/// How many requests one call answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Answer complete requests until `out` holds at least this many bytes (pipelining: one write for
    /// all). The bound is what keeps a client that pipelines without reading from growing the output
    /// without limit: the rest of the input waits until the output drains.
    UpTo(usize),
    /// Stop after each answered request, so the runtime can apply `--delay` / `--body-delay` to it.
    OneByOne,
}

/// The state of one connection.
#[derive(Debug)]
pub struct Session {
    parser: Parser,
    /// `--http2`: honour `Upgrade: h2c`.
    h2c: bool,
    /// The request being received asked for the h2c upgrade.
    /// (Boxed: rare, and kept out of every connection's size.)
    upgrade: Option<Box<crate::proto::detect::UpgradeRequest>>,
    /// The catalog's answer to a request whose head came in an earlier call than its end (a body
    /// still arriving), unless it is the single response. Boxed: rare; within one call the choice
    /// stays on the stack.
    choice: Option<Box<Choice>>,
    /// The body of a request whose answer is made from it ([`View::wants_body`]), as it arrives.
    body: Option<Vec<u8>>,
}

/// The interim response that switches an upgraded connection to HTTP/2.
pub const SWITCHING_TO_H2C: &[u8] =
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";

impl Session {
    pub fn new(limits: Limits) -> Self {
        Session {
            parser: Parser::new(limits),
            h2c: false,
            upgrade: None,
            choice: None,
            body: None,
        }
    }

    /// A session that honours `Upgrade: h2c` (with `--http2`).
    pub fn with_h2c(limits: Limits, h2c: bool) -> Self {
        Session {
            h2c,
            ..Session::new(limits)
        }
    }

    /// True when no request is partly received (given that the caller holds no unconsumed bytes).
    pub fn between_requests(&self) -> bool {
        self.parser.between_requests()
    }

    /// Consumes complete requests from `input` and appends the catalog's answer to each to `out`
    /// (error answers too).
    pub fn process(
        &mut self,
        input: &[u8],
        out: &mut impl Sink,
        catalog: View<'_>,
        pace: Pace,
        dumper: &mut Dumper,
    ) -> Batch {
        let mut choice = self.choice.take().map(|c| *c);
        let batch = self.process_requests(input, out, catalog, pace, dumper, &mut choice);
        self.choice = choice.filter(|c| !matches!(c, Choice::One)).map(Box::new);
        batch
    }

    fn process_requests(
        &mut self,
        input: &[u8],
        out: &mut impl Sink,
        catalog: View<'_>,
        pace: Pace,
        dumper: &mut Dumper,
        choice: &mut Option<Choice>,
    ) -> Batch {
        let mut batch = Batch::default();
        loop {
            let (n, event) = self.parser.next(&input[batch.consumed..]);
            let after = batch.consumed + n;
            match event {
                Event::Head { info, raw } => {
                    dumper.request_head(raw);
                    // Only a request without a body is upgraded (its body would have to be replayed).
                    self.upgrade = (self.h2c
                        && info.upgrade_h2c
                        && info.body == crate::proto::http1::parser::BodyFraming::None)
                        .then(|| crate::proto::detect::UpgradeRequest::from_head(raw).map(Box::new))
                        .flatten();
                    let chosen = catalog.choose(|| request_view(raw));
                    self.body = catalog.wants_body(&chosen).then(Vec::new);
                    *choice = Some(chosen);
                    // Ask for the body only if it has not started to arrive already.
                    if info.expect_continue && after == input.len() {
                        out.extend_from_slice(CONTINUE);
                    }
                }
                Event::Body(bytes) => {
                    dumper.request_body(bytes);
                    if let Some(body) = &mut self.body {
                        crate::catalog::openai::keep_body(body, bytes);
                    }
                }
                Event::End(info) => {
                    batch.consumed = after;
                    if let Some(upgrade) = self.upgrade.take() {
                        out.extend_from_slice(SWITCHING_TO_H2C);
                        batch.upgrade = Some(upgrade);
                        return batch;
                    }
                    batch.requests += 1;
                    batch.responses += 1;
                    let framing = framing(&info);
                    let mut choice = choice.take().unwrap_or(Choice::One);
                    if let Some(body) = self.body.take() {
                        choice = catalog.asked(choice, &body);
                    }
                    if dumper.on() {
                        let mut copy = Vec::new();
                        catalog.write(choice.uncounted(), framing, info.head_only, &mut copy);
                        dumper.raw_response(&copy);
                    }
                    let written = catalog.write(choice, framing, info.head_only, out);
                    (batch.body_at, batch.hold) = (written.body_at, written.hold);
                    (batch.ticket, batch.shed_at) = (written.ticket, written.shed_at);
                    batch.events = written.events;
                    if !info.keep_alive || written.close {
                        batch.close = true;
                        batch.unasked_close = info.keep_alive;
                        return batch;
                    }
                    match pace {
                        Pace::OneByOne => return batch,
                        Pace::UpTo(limit) if out.unsent() >= limit => return batch,
                        Pace::UpTo(_) => continue,
                    }
                }
                Event::Incomplete => {
                    batch.consumed = after;
                    return batch;
                }
                Event::Error(status) => {
                    out.extend_from_slice(catalog.error(status));
                    dumper.error(status.code(), status.reason());
                    batch.responses += 1;
                    batch.error = Some(status);
                    batch.close = true;
                    batch.body_at = None;
                    batch.hold = crate::catalog::Hold::default();
                    batch.consumed = input.len();
                    return batch;
                }
            }
            batch.consumed = after;
        }
    }
}

/// The catalog's view of a request head (complete, as the framing parser accepted it); a head that
/// does not parse again gives the empty view.
fn request_view(raw: &[u8]) -> Request<'_> {
    let mut headers = [httparse::EMPTY_HEADER; crate::proto::MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let (Ok(_), Some(method), Some(target)) = (req.parse(raw), req.method, req.path) else {
        return Request::default();
    };
    let mut view = Request {
        method: method.as_bytes(),
        target: target.as_bytes(),
        ..Request::default()
    };
    for h in req.headers.iter() {
        view.set(h.name.as_bytes(), h.value);
    }
    view
}

fn framing(info: &RequestInfo) -> Framing {
    match (info.keep_alive, info.version) {
        (false, Version::Http10) => Framing::Close10,
        (false, Version::Http11) => Framing::Close,
        (true, Version::Http10) => Framing::KeepAlive10,
        (true, Version::Http11) => Framing::KeepAlive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::response::ResponseSpec;

    fn catalog() -> crate::catalog::Local {
        let plan = crate::catalog::CatalogPlan::of_response(ResponseSpec {
            status: 200,
            headers: vec![],
            body: b"hi".to_vec(),
        });
        crate::catalog::Local::for_worker(&crate::catalog::Catalog::build(&plan).unwrap(), 0)
    }

    fn run(input: &[u8], pace: Pace) -> (Batch, String) {
        let mut s = Session::new(Limits::default());
        let mut out = Vec::new();
        let b = s.process(input, &mut out, catalog().view(), pace, &mut Dumper::off());
        (b, String::from_utf8(out).unwrap())
    }

    #[test]
    fn pipelined_requests_become_one_output() {
        let input = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".repeat(16);
        let (b, out) = run(&input, Pace::UpTo(usize::MAX));
        assert_eq!((b.requests, b.consumed, b.close), (16, input.len(), false));
        assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 16);
    }

    #[test]
    fn output_bound_stops_answering_and_keeps_the_rest() {
        let input = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".repeat(16);
        let one = run(&input[..27], Pace::UpTo(usize::MAX)).1.len();
        let (b, out) = run(&input, Pace::UpTo(3 * one));
        assert_eq!((b.requests, b.consumed), (3, 3 * 27));
        assert_eq!(out.len(), 3 * one);
    }

    #[test]
    fn one_by_one_stops_after_each() {
        let input = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".repeat(2);
        let (b, out) = run(&input, Pace::OneByOne);
        assert_eq!((b.requests, b.consumed), (1, input.len() / 2));
        assert_eq!(&out[b.body_at.unwrap()..], "hi");
    }

    #[test]
    fn partial_request_is_kept() {
        let (b, out) = run(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HT",
            Pace::UpTo(usize::MAX),
        );
        assert_eq!((b.requests, b.consumed), (1, 27));
        assert_eq!(out.matches("200 OK").count(), 1);
    }

    #[test]
    fn head_gets_no_body_and_http10_closes() {
        let (b, out) = run(b"HEAD / HTTP/1.0\r\n\r\n", Pace::UpTo(usize::MAX));
        assert!(b.close);
        assert!(
            out.ends_with("\r\n\r\n") && out.contains("Connection: close"),
            "{out}"
        );
    }

    #[test]
    fn expect_continue_is_sent_only_when_the_body_is_missing() {
        let head =
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
        let (b, out) = run(head, Pace::UpTo(usize::MAX));
        assert_eq!(
            (b.requests, out.as_str()),
            (0, "HTTP/1.1 100 Continue\r\n\r\n")
        );
        let (b, out) = run(&[&head[..], b"ok"].concat(), Pace::UpTo(usize::MAX));
        assert_eq!(b.requests, 1);
        assert!(out.starts_with("HTTP/1.1 200 OK"));
    }

    #[test]
    fn bad_request_answers_error_and_closes_after_good_ones() {
        let (b, out) = run(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            Pace::UpTo(usize::MAX),
        );
        assert_eq!((b.requests, b.responses, b.close), (1, 2, true));
        assert_eq!(b.error, Some(ErrorStatus::BadRequest));
        assert!(out.contains("200 OK") && out.contains("400 Bad Request"));
    }
}
