//! One side-port connection's exchange, without I/O or a clock of its own: bytes in, one [`Reply`]
//! out, and the deadlines a driver waits on — so that what a client may do to a side port (idle,
//! trickle, send too much, send garbage, keep sending after its answer) is decided here and tested
//! without sockets.
//!
//! A request is framed by the workers' HTTP/1.1 [`Parser`] (fuzzed, hostile-client-hardened), with
//! the door's own limits: its head must arrive within [`HEAD_TIME`] of the accept and its body within
//! [`BODY_TIME`] of the head. The [`Service`] screens the head before any of the body is read (a 401
//! or a 404 is answered at once) and answers the whole request. Every answer closes the connection
//! after a lingering read ([`Linger`]): our side is shut, then the client's bytes are read and
//! discarded until its EOF, so that an answer given to a client still sending (a 413, a 401 before a
//! large body) reaches it instead of being destroyed by the reset that closing with unread input
//! makes the kernel send.

use std::time::{Duration, Instant};

use crate::proto::http1::parser::{ErrorStatus, Event, Limits, Parser};
use crate::side::{Reply, Service, SideHead, SideRequest};

/// How long a client has, from the accept, to send its whole head.
pub const HEAD_TIME: Duration = Duration::from_secs(5);
/// How long a client has, from its head's end, to send its whole body.
pub const BODY_TIME: Duration = Duration::from_secs(30);
/// How long an answer may take to be sent: a client that does not read is closed after it.
pub const SEND_TIME: Duration = Duration::from_secs(10);
/// The lingering read after an answer, in all (nginx's `lingering_time`)...
pub const LINGER_TIME: Duration = Duration::from_secs(30);
/// ...and between two reads (nginx's `lingering_timeout`).
pub const LINGER_GAP: Duration = Duration::from_secs(5);

/// What the driver does after handing bytes to [`Exchange::receive`].
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Read more, until [`Exchange::deadline`].
    More,
    /// Send `100 Continue` (the client waits for it before its body), then read more.
    Continue,
    /// Send this answer, then linger and close.
    Done(Reply),
}

/// The interim answer to `Expect: 100-continue`, once the head is accepted.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// One request being received.
#[derive(Debug)]
pub struct Exchange {
    parser: Parser,
    /// Input not yet framed: a partial head or chunk line.
    kept: Vec<u8>,
    /// The head, once complete and screened, and the body so far.
    request: Option<SideRequest>,
    /// The head's or the body's deadline, whichever is being received.
    deadline: Instant,
    /// The request is a HEAD: its answer goes without its body.
    head_only: bool,
}

impl Exchange {
    pub fn new(limits: Limits, now: Instant) -> Exchange {
        Exchange {
            parser: Parser::new(limits),
            kept: Vec::new(),
            request: None,
            deadline: now + HEAD_TIME,
            head_only: false,
        }
    }

    /// When the request (its head, then its body) must have arrived: past it, [`Exchange::timed_out`].
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Bytes the client sent.
    pub fn receive(&mut self, data: &[u8], now: Instant, service: &dyn Service) -> Progress {
        self.kept.extend_from_slice(data);
        let mut at = 0;
        let progress = loop {
            let (n, event) = self.parser.next(&self.kept[at..]);
            at += n;
            match event {
                Event::Incomplete => break Progress::More,
                Event::Error(status) => break Progress::Done(refused(status)),
                Event::Head { info, raw } => {
                    self.head_only = info.head_only;
                    let Some(head) = SideHead::parse(raw) else {
                        break Progress::Done(refused(ErrorStatus::BadRequest));
                    };
                    if let Some(answer) = service.screen(&head) {
                        break Progress::Done(answer);
                    }
                    self.request = Some(SideRequest {
                        head,
                        body: Vec::new(),
                    });
                    self.deadline = now + BODY_TIME;
                    if info.expect_continue {
                        break Progress::Continue;
                    }
                }
                Event::Body(bytes) => {
                    if let Some(request) = &mut self.request {
                        request.body.extend_from_slice(bytes);
                    }
                }
                Event::End(_) => match self.request.take() {
                    Some(request) => break Progress::Done(service.answer(request)),
                    None => break Progress::Done(refused(ErrorStatus::BadRequest)),
                },
            }
        };
        self.kept.drain(..at);
        progress
    }

    /// Whether the request is a HEAD (its answer is sent without its body).
    pub fn head_only(&self) -> bool {
        self.head_only
    }

    /// The client ended its side before a whole request: 400 if it sent part of one (it may still
    /// read), nothing if it sent nothing.
    pub fn peer_closed(&self) -> Option<Reply> {
        let started = self.request.is_some() || !self.kept.is_empty();
        started.then(|| Reply::text(400, "the request ended before it was complete\n"))
    }

    /// The deadline passed before the whole request arrived.
    pub fn timed_out(&self) -> Reply {
        let (part, time) = match self.request {
            None => ("head", HEAD_TIME),
            Some(_) => ("body", BODY_TIME),
        };
        let text = format!(
            "the request's {part} did not arrive within {}\n",
            humantime::format_duration(time)
        );
        Reply::text(408, &text)
    }
}

/// The answer to a request the parser refused.
fn refused(status: ErrorStatus) -> Reply {
    let why = match status {
        ErrorStatus::ContentTooLarge => "the body is over this port's limit",
        ErrorStatus::HeaderFieldsTooLarge => "the head is over this port's limit",
        ErrorStatus::NotImplemented => "this transfer coding is not implemented",
        ErrorStatus::VersionNotSupported => "only HTTP/1.x is served here",
        ErrorStatus::UnsupportedMediaType => "gRPC is served on HTTP/2 only",
        ErrorStatus::BadRequest => {
            "a malformed request (RFC 9112: an HTTP/1.1 request has one Host field)"
        }
    };
    Reply::text(status.code(), &format!("{why}\n"))
}

/// The lingering read after an answer: until the client's EOF, at most [`LINGER_TIME`] in all and
/// [`LINGER_GAP`] between two reads.
#[derive(Clone, Copy, Debug)]
pub struct Linger {
    until: Instant,
}

impl Linger {
    /// Lingering starts when our side is shut, at `now`.
    pub fn new(now: Instant) -> Linger {
        Linger {
            until: now + LINGER_TIME,
        }
    }

    /// How long the next read may wait (a read at `now` returned data); `None`: stop, close.
    pub fn next_wait(&self, now: Instant) -> Option<Duration> {
        let left = self.until.checked_duration_since(now)?;
        (!left.is_zero()).then(|| left.min(LINGER_GAP))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every request with its method, path and body length; refuses `/secret` at its head.
    struct Echo;

    impl Service for Echo {
        fn screen(&self, head: &SideHead) -> Option<Reply> {
            (head.path == "/secret").then(|| Reply::text(401, "no\n"))
        }

        fn answer(&self, r: SideRequest) -> Reply {
            let text = format!("{} {} {}", r.head.method, r.head.path, r.body.len());
            Reply::text(200, &text)
        }
    }

    const LIMITS: Limits = Limits {
        max_head: 1024,
        max_body: 100,
    };

    fn exchange(input: &[&[u8]]) -> (Exchange, Vec<Progress>) {
        let now = Instant::now();
        let mut ex = Exchange::new(LIMITS, now);
        let progress = input.iter().map(|d| ex.receive(d, now, &Echo)).collect();
        (ex, progress)
    }

    fn done(p: &Progress) -> (u16, &str) {
        match p {
            Progress::Done(a) => (a.status, a.body.as_str()),
            other => panic!("not done: {other:?}"),
        }
    }

    #[test]
    fn a_request_trickled_a_byte_at_a_time_is_answered_once_whole() {
        let text = b"PUT /p?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        let (_, progress) = exchange(&bytes);
        let (last, before) = progress.split_last().unwrap();
        assert!(before.iter().all(|p| *p == Progress::More));
        assert_eq!(done(last), (200, "PUT /p 5"));
    }

    #[test]
    fn a_chunked_body_is_read_whole() {
        let text = b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let (_, progress) = exchange(&[text]);
        assert_eq!(done(&progress[0]), (200, "POST /c 5"));
    }

    #[test]
    fn a_head_is_screened_before_its_body_arrives() {
        let (_, progress) =
            exchange(&[b"PUT /secret HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\n"]);
        assert_eq!(done(&progress[0]).0, 401);
    }

    #[test]
    fn over_the_limits_and_garbage_are_refused_at_once() {
        let big = b"PUT /p HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n";
        assert_eq!(done(&exchange(&[big]).1[0]).0, 413);
        let long = [b"GET /".as_slice(), &[b'a'; 2000]].concat();
        assert_eq!(done(&exchange(&[&long]).1[0]).0, 431);
        assert_eq!(
            done(&exchange(&[b"\x16\x03\x01\x02\x00\r\n\r\n"]).1[0]).0,
            400
        );
        assert_eq!(done(&exchange(&[b"GET / HTTP/2.0\r\n\r\n"]).1[0]).0, 505);
    }

    #[test]
    fn expect_continue_is_answered_after_the_head_is_accepted() {
        let head =
            b"PUT /p HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n";
        let (_, progress) = exchange(&[head, b"ok"]);
        assert_eq!(progress[0], Progress::Continue);
        assert_eq!(done(&progress[1]), (200, "PUT /p 2"));
    }

    #[test]
    fn deadlines_move_from_the_head_to_the_body() {
        let now = Instant::now();
        let mut ex = Exchange::new(LIMITS, now);
        assert_eq!(ex.deadline(), now + HEAD_TIME);
        assert_eq!(ex.timed_out().status, 408);
        assert!(
            ex.peer_closed().is_none(),
            "nothing sent: nothing to answer"
        );
        let later = now + Duration::from_secs(1);
        let head = b"PUT /p HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\nabc";
        assert_eq!(ex.receive(head, later, &Echo), Progress::More);
        assert_eq!(ex.deadline(), later + BODY_TIME);
        assert!(ex.timed_out().body.contains("body"));
        assert_eq!(ex.peer_closed().map(|a| a.status), Some(400));
    }

    #[test]
    fn lingering_waits_a_gap_at_a_time_within_its_whole_time() {
        let now = Instant::now();
        let linger = Linger::new(now);
        assert_eq!(linger.next_wait(now), Some(LINGER_GAP));
        let near_end = now + LINGER_TIME - Duration::from_secs(2);
        assert_eq!(linger.next_wait(near_end), Some(Duration::from_secs(2)));
        assert_eq!(linger.next_wait(now + LINGER_TIME), None);
    }
}
