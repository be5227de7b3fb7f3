//! One HTTP/2 stream's answer: its request body read to the end, then the steps of its [`Delivery`]
//! (its place in a route's pool first, if it has one) sent through `h2`.
//!
//! Most streams need no waiting at all: a GET whose HEADERS frame ended the stream, answered at once
//! by an answer that is not held. [`begin`] delivers those inside the connection's own poll, so they
//! cost no future of their own (no task allocated, polled and dropped per request: about a fifth of
//! statico's CPU per HTTP/2 request on the io_uring runtime, measured with `perf`). Anything that has
//! to wait — a body still to come, a pool's queue, a delay, a paced body, a stall — becomes a
//! [`Pending`] future that the connection polls with its other streams; both paths deliver through the
//! same [`Delivering::run`], which takes the steps up to the first that waits.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::{H2Settings, OutputMoved};
use crate::catalog::model::delivery::{Delivery, Step};
use crate::catalog::model::fault::Fault;
use crate::catalog::model::hold::{Recorder, PACE_TICK};
use crate::catalog::stream::Admission;
use crate::catalog::StreamAnswer;
use crate::observe::meter::WorkerCounters;
use crate::proto::held::{self, ReadOnce};
use statico_common::Counter;

/// How a stream ended, for the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Done,
    /// A route's `close` fault: the connection closes (GOAWAY).
    CloseConnection,
    /// The connection's output has stood still for `--idle-timeout` with a stream's event waiting
    /// for it: the connection closes at once (a GOAWAY would not go either).
    Stalled,
}

/// What became of a stream the connection accepted.
pub enum Begun<'a> {
    /// Answered (or refused) already.
    Ended(Ended),
    /// Still to finish: poll it with the connection's other streams.
    Pending(Pending<'a>),
}

/// A stream that waits for something before its answer is over.
pub type Pending<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Ended> + 'a>>;

/// Starts answering one stream: at once if nothing in it has to wait, else as a [`Pending`] future.
pub fn begin<'a>(
    request: Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    answer: StreamAnswer,
    settings: H2Settings,
    counters: &'a WorkerCounters,
    verbose: u8,
    moved: &'a OutputMoved,
) -> Begun<'a> {
    if answer.grpc.is_some() {
        let call =
            super::grpc::answered(request, respond, answer, settings, counters, verbose, moved);
        return Begun::Pending(Box::pin(call));
    }
    let complete = request.body().is_end_stream();
    if !complete || verbose > 0 || answer.admission.is_some() || answer.awaits_body() {
        let whole = answered(request, respond, answer, settings, counters, verbose, moved);
        return Begun::Pending(Box::pin(whole));
    }
    counters.add(Counter::Requests, 1);
    let head_only = request.method() == http::Method::HEAD;
    drop(request);
    // Only an answer whose truth is recorded reads the clock for its held time.
    let arrived = answer.hold.truth.map(|_| Instant::now());
    let mut delivering = Delivering::new(respond, answer, arrived, head_only, verbose, moved);
    match delivering.run(counters) {
        Next::Ended(ended) => Begun::Ended(ended),
        wait => Begun::Pending(Box::pin(async move {
            delivering.finish(wait, settings, counters).await
        })),
    }
}

/// The whole path of a stream that may wait before it is answered: its body read to the end, then its
/// delivery (its place in the route's pool first, if it has one).
async fn answered(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    answer: StreamAnswer,
    settings: H2Settings,
    counters: &WorkerCounters,
    verbose: u8,
    moved: &OutputMoved,
) -> Ended {
    let head_only = request.method() == http::Method::HEAD;
    if verbose > 0 {
        crate::observe::dump::stream_request(&request, "HTTP/2", respond.stream_id(), verbose);
    }
    let mut body = answer.awaits_body().then(Vec::new);
    if !read_body(
        request.into_body(),
        &mut respond,
        settings,
        counters,
        &mut body,
    )
    .await
    {
        return Ended::Done;
    }
    let answer = answer.answered(&body.unwrap_or_default());
    counters.add(Counter::Requests, 1);
    let arrived = Instant::now();
    let mut delivering = Delivering::new(respond, answer, Some(arrived), head_only, verbose, moved);
    let first = delivering.run(counters);
    delivering.finish(first, settings, counters).await
}

/// Delivers `answer` to a request complete at `arrived` (a gRPC call's, made from its request);
/// and whether its ground truth was recorded (not if its client left before it was due).
pub(super) async fn deliver(
    respond: h2::server::SendResponse<Bytes>,
    answer: StreamAnswer,
    arrived: Instant,
    settings: H2Settings,
    counters: &WorkerCounters,
    verbose: u8,
    moved: &OutputMoved,
) -> (Ended, bool) {
    let mut delivering = Delivering::new(respond, answer, Some(arrived), false, verbose, moved);
    let first = delivering.run(counters);
    let ended = delivering.finish(first, settings, counters).await;
    (ended, delivering.recorded)
}

/// One stream's answer and its [`Delivery`], whose steps go out as `h2` frames.
struct Delivering {
    respond: h2::server::SendResponse<Bytes>,
    /// The body's stream once the head is sent.
    stream: Option<h2::SendStream<Bytes>>,
    head: Option<Response<()>>,
    data: Bytes,
    trailers: Option<http::HeaderMap>,
    status: StatusCode,
    /// Where a truth recorded without a ticket goes (a route's answer).
    recorder: Option<Recorder>,
    /// The delivery's [`Step::Record`] was taken.
    recorded: bool,
    /// A route's held answer: where its shed answer comes from.
    admission: Option<Arc<Admission>>,
    delivery: Delivery,
    verbose: u8,
    /// When the connection's output last moved.
    moved: OutputMoved,
}

/// Where [`Delivering::run`] stopped.
enum Next {
    /// At a [`Step::Wait`] or [`Step::Queued`].
    Wait(Step),
    Stall,
    /// A fault (`truncate`, `reset`, `close`) that strikes once what this run handed to `h2` has
    /// left: a reset or a GOAWAY drops the frames `h2` still queues, and an event dropped so was
    /// not sent (though recorded as sent).
    AfterSent(Fault),
    Ended(Ended),
}

impl Delivering {
    fn new(
        respond: h2::server::SendResponse<Bytes>,
        mut answer: StreamAnswer,
        arrived: Option<Instant>,
        head_only: bool,
        verbose: u8,
        moved: &OutputMoved,
    ) -> Delivering {
        let delivery = answer.delivery(arrived, head_only);
        let (status, recorder, admission, trailers) = (
            answer.status,
            answer.recorder.take(),
            answer.admission.take(),
            answer.trailers.take(),
        );
        let (head, data) = answer.into_parts();
        Delivering {
            respond,
            stream: None,
            head: Some(head),
            data,
            trailers,
            status,
            recorder,
            recorded: false,
            admission,
            delivery,
            verbose,
            moved: moved.clone(),
        }
    }

    /// Takes the steps that need no waiting, up to the first that does or the end.
    fn run(&mut self, counters: &WorkerCounters) -> Next {
        let mut clock = ReadOnce::default();
        // Room that came goes on at once, but once per call: a wait that is not for room (a pause)
        // with room there would come back at the same instant.
        let mut room_tried = false;
        // Whether this run handed `h2` a frame of the answer (which a fault must let leave).
        let mut handed = false;
        loop {
            // An event is recorded as it is given out: none is given to a stream the client reset.
            let Some(room) = self.room() else {
                return Next::Ended(Ended::Done);
            };
            let step = self.delivery.next(&mut clock, room);
            handed |= matches!(
                step,
                Step::Head { .. } | Step::Body { .. } | Step::Event { .. }
            );
            match step {
                Step::Wait(_) if !room_tried && self.room_came() => room_tried = true,
                step @ (Step::Wait(_) | Step::Queued(_)) => return Next::Wait(step),
                Step::Fault(Fault::Stall) => return Next::Stall,
                Step::Fault(fault) if handed => return Next::AfterSent(fault),
                Step::Fault(fault) => return Next::Ended(self.strike(fault)),
                Step::Shed => self.shed(),
                Step::Record { key, drawn, held } => {
                    if let Some(r) = &self.recorder {
                        r.record(key, drawn, held);
                    }
                    self.recorded = true;
                }
                Step::Head { end } => {
                    let head = self.head.take().expect("one head");
                    let Ok(s) = self.respond.send_response(head, end) else {
                        return Next::Ended(Ended::Done);
                    };
                    counters.add(Counter::Responses, 1);
                    if self.verbose > 0 {
                        println!("↪ response (HTTP/2): {}", self.status);
                    }
                    self.stream = Some(s);
                }
                // h2 queues the head: the body delay counts from now.
                Step::Sent => {}
                Step::Body { range, end } => {
                    if !self.send(self.data.slice(range), end) {
                        return Next::Ended(Ended::Done);
                    }
                }
                Step::Event { bytes, end } => {
                    if !self.send(Bytes::from(bytes), end) {
                        return Next::Ended(Ended::Done);
                    }
                }
                Step::Trailers => {
                    let (Some(s), Some(t)) = (self.stream.as_mut(), self.trailers.take()) else {
                        continue;
                    };
                    if s.send_trailers(t).is_err() {
                        return Next::Ended(Ended::Done);
                    }
                }
                Step::Done => return Next::Ended(Ended::Done),
            }
        }
    }

    /// How many body bytes the stream takes now; `None` once the client reset a stream of events
    /// (it takes none of them). A stream's event goes only once flow control has room for all of
    /// it (asked for, its length exactly, once it is made), so that a client that does not read
    /// makes the events wait rather than `h2` buffer them without bound, and each event leaves
    /// whole; any other body takes any room.
    fn room(&mut self) -> Option<usize> {
        let (Some(s), Some(wanted)) = (self.stream.as_mut(), self.delivery.event_room()) else {
            return Some(usize::MAX);
        };
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if s.poll_reset(&mut cx).is_ready() {
            return None;
        }
        s.reserve_capacity(wanted);
        Some(s.capacity())
    }

    /// An event that has waited for room (the client's window, or the socket) since `since` for
    /// `--idle-timeout` ends its stream (reset, counted as a timeout); and its connection too, at
    /// once, when the connection's output has stood still as long (a client that reads nothing). Output still
    /// moving on the connection (the socket draining, other streams) extends the wait once, by at
    /// most another `--idle-timeout`. `None` while the wait goes on, or when no event lacks room.
    fn out_of_room(
        &mut self,
        since: &mut Option<Instant>,
        settings: H2Settings,
        counters: &WorkerCounters,
    ) -> Option<Ended> {
        let waiting = self.delivery.event_room().is_some_and(|wanted| wanted > 0);
        if !waiting || self.room_came() {
            *since = None;
            return None;
        }
        let (now, idle) = (Instant::now(), settings.idle_timeout);
        let since = *since.get_or_insert(now);
        let moved = self.moved.moved();
        if now.duration_since(since.max(moved.min(since + idle))) < idle {
            return None;
        }
        counters.add(Counter::Timeouts, 1);
        match self.stream.as_mut() {
            Some(s) => s.send_reset(h2::Reason::CANCEL),
            None => self.respond.send_reset(h2::Reason::CANCEL),
        }
        Some(match now.duration_since(moved) >= idle {
            true => Ended::Stalled,
            false => Ended::Done,
        })
    }

    /// Whether a stream's event made and waiting for room has it now (flow control may grant what
    /// is asked at once): then the delivery goes on rather than waiting a tick.
    fn room_came(&mut self) -> bool {
        let waiting = self.delivery.event_room().is_some_and(|wanted| wanted > 0);
        waiting
            && self
                .room()
                .is_some_and(|room| self.delivery.event_fits(room))
    }

    /// Sends `data` on the answer's stream: false when the client reset the stream, which takes no
    /// more data (its answer is over).
    fn send(&mut self, data: Bytes, end: bool) -> bool {
        match self.stream.as_mut() {
            Some(s) => s.send_data(data, end).is_ok(),
            None => true,
        }
    }

    /// The pool shed the request: its shed answer, with this answer's `Date`, goes out instead.
    fn shed(&mut self) {
        let date = self
            .head
            .as_ref()
            .and_then(|h| h.headers().get(http::header::DATE));
        if let Some(shed) = self.admission.as_ref().and_then(|a| a.shed_answer(date)) {
            self.status = shed.status;
            let (head, data) = shed.into_parts();
            (self.head, self.data) = (Some(head), data);
        }
    }

    /// The answer's fault strikes: `truncate` and `reset` reset the stream, `close` closes the
    /// connection.
    fn strike(&mut self, fault: Fault) -> Ended {
        if fault == Fault::Close {
            return Ended::CloseConnection;
        }
        match self.stream.as_mut() {
            Some(s) => s.send_reset(h2::Reason::INTERNAL_ERROR),
            None => self.respond.send_reset(h2::Reason::INTERNAL_ERROR),
        }
        Ended::Done
    }

    /// Waits where [`run`](Self::run) stopped (`next`), and runs on, until the delivery ends. A
    /// client that resets the stream while its answer holds a place in a pool has gone.
    async fn finish(
        &mut self,
        mut next: Next,
        settings: H2Settings,
        counters: &WorkerCounters,
    ) -> Ended {
        let mut no_room_since = None;
        loop {
            match next {
                Next::Ended(ended) => return ended,
                Next::Wait(step) => {
                    if let Some(ended) = self.out_of_room(&mut no_room_since, settings, counters) {
                        return ended;
                    }
                    let respond = &mut self.respond;
                    let gone = std::pin::pin!(poll_fn(|cx| respond.poll_reset(cx).map(|_| ())));
                    if !held::wait(&self.delivery, &step, gone).await {
                        return Ended::Done;
                    }
                }
                Next::Stall => {
                    crate::kernel::timer::Coarse::after(settings.idle_timeout).await;
                    counters.add(Counter::Timeouts, 1);
                    self.respond.send_reset(h2::Reason::CANCEL);
                    return Ended::Done;
                }
                Next::AfterSent(fault) => {
                    // A tick for what was sent to leave: a reset drops what is queued.
                    crate::kernel::timer::sleep(PACE_TICK).await;
                    return self.strike(fault);
                }
            }
            next = self.run(counters);
        }
    }
}

/// Reads a stream's request body to its end, releasing flow-control capacity as it goes, into
/// `kept` if the answer is made from it. A body over `--max-body-size` gets 413, one that pauses
/// longer than `--header-timeout` is cancelled (counted as a timeout); both reset the stream.
/// Returns whether the body ended well.
async fn read_body(
    mut body: h2::RecvStream,
    respond: &mut h2::server::SendResponse<Bytes>,
    settings: H2Settings,
    counters: &WorkerCounters,
    kept: &mut Option<Vec<u8>>,
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
        if let Some(kept) = kept {
            crate::catalog::openai::keep_body(kept, &data);
        }
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
