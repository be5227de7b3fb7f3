//! A gRPC call to a built-in method on one HTTP/2 stream ([`crate::catalog::grpc`] decides what
//! it gets): its request read message by message, then a unary call's answer delivered like every
//! answer (its status in its trailers, or trailers-only), or a streaming call's replies sent as each
//! request message comes, and its trailers once the client's side ends.
//!
//! A message is at most 4 MiB (not `--max-body-size`). A unary call's body may pause
//! `--header-timeout` between its frames; a streaming call's stream, open and quiet between
//! messages, is ended after `--idle-timeout`; a `Watch` reads the health routes every
//! [`WATCH_EVERY`] and sends a change as it comes.

use std::future::poll_fn;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::Request;

use super::stream::{deliver, Ended};
use super::{H2Settings, OutputMoved};
use crate::catalog::grpc::frame::Messages;
use crate::catalog::grpc::status::{CallStatus, Code};
use crate::catalog::grpc::{Call, TimedReply, WATCH_EVERY};
use crate::catalog::StreamAnswer;
use crate::observe::meter::WorkerCounters;
use statico_common::Counter;

/// Answers the gRPC call `answer` carries (its [`Call`]) on this stream.
pub(super) async fn answered(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    mut answer: StreamAnswer,
    settings: H2Settings,
    counters: &WorkerCounters,
    verbose: u8,
    moved: &OutputMoved,
) -> Ended {
    if verbose > 0 {
        crate::observe::dump::stream_request(&request, "HTTP/2", respond.stream_id(), verbose);
    }
    let mut call = *answer.grpc.take().expect("a gRPC call's answer carries it");
    let date = answer.headers.remove(http::header::DATE);
    let mut body = request.into_body();
    if !call.unary() {
        counters.add(Counter::Requests, 1);
        return streamed(&mut call, body, respond, date, settings, counters).await;
    }
    let began = Instant::now();
    let Some(messages) = read(&mut body, &mut respond, settings, counters).await else {
        call.record_end(None, began.elapsed());
        return Ended::Done;
    };
    counters.add(Counter::Requests, 1);
    let mut reply = call.unary_answer(messages, SystemTime::now());
    if let Some(date) = date {
        reply.headers.insert(http::header::DATE, date);
    }
    // A call whose client leaves (or whose connection ends) while its answer is held is `gone`.
    let unanswered = Unanswered { call: &call, began };
    let (ended, recorded) = deliver(
        respond,
        reply,
        Instant::now(),
        settings,
        counters,
        verbose,
        moved,
    )
    .await;
    if recorded {
        std::mem::forget(unanswered);
    }
    ended
}

/// A unary call not answered yet: dropped so, it is recorded `gone`.
struct Unanswered<'a> {
    call: &'a Call,
    began: Instant,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.call.record_end(None, self.began.elapsed());
    }
}

/// Reads a unary call's request to its end: its message, or the status of a body that is not one
/// gRPC message (reading stops there: a second message is `INTERNAL` at once). `None`: the client reset
/// the stream, or paused past `--header-timeout` (then it is reset here, counted as a timeout).
async fn read(
    body: &mut h2::RecvStream,
    respond: &mut h2::server::SendResponse<Bytes>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> Option<Result<Vec<Bytes>, CallStatus>> {
    let mut messages = Messages::default();
    let mut kept = Vec::new();
    loop {
        let data = match crate::kernel::timer::timeout(settings.header_timeout, body.data()).await {
            Ok(Some(Ok(data))) => data,
            Ok(None) => return Some(messages.end().map(|()| kept)),
            Ok(Some(Err(_))) => return None,
            Err(_) => {
                counters.add(Counter::Timeouts, 1);
                respond.send_reset(h2::Reason::CANCEL);
                return None;
            }
        };
        let _ = body.flow_control().release_capacity(data.len());
        messages.push(&data);
        loop {
            match messages.take() {
                Ok(Some(message)) if kept.is_empty() => kept.push(message),
                Ok(Some(_)) => {
                    let two = "a unary call with more than one request message";
                    return Some(Err(CallStatus::new(Code::Internal, two)));
                }
                Ok(None) => break,
                Err(status) => return Some(Err(status)),
            }
        }
    }
}

/// A streaming call: the head at once, the replies to each request message as it comes, and the
/// last replies and the trailers when the client's side ends (or the status of a message refused,
/// or one that asks for a status, in the trailers at once); `Watch` keeps the stream
/// open after that until the client leaves, or `--idle-timeout` (then it is reset, counted as a
/// timeout, and a watching client watches again). Its outcome is recorded: its status, or `gone`
/// for a call that ended without one.
async fn streamed(
    call: &mut Call,
    body: h2::RecvStream,
    respond: h2::server::SendResponse<Bytes>,
    date: Option<http::HeaderValue>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> Ended {
    let began = Instant::now();
    let status = stream_call(call, body, respond, date, settings, counters).await;
    call.record_end(status.as_ref(), began.elapsed());
    Ended::Done
}

/// [`streamed`]'s call: its status once its trailers are sent, `None` if it ended without them.
async fn stream_call(
    call: &mut Call,
    mut body: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    date: Option<http::HeaderValue>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> Option<CallStatus> {
    let mut head = http::Response::new(());
    *head.headers_mut() = call.head();
    if let Some(date) = date {
        head.headers_mut().insert(http::header::DATE, date);
    }
    let Ok(mut send) = respond.send_response(head, false) else {
        return None;
    };
    counters.add(Counter::Responses, 1);
    let waits = Waits {
        idle: settings.idle_timeout,
        deadline: call.deadline().map(|d| Instant::now() + d),
    };
    let mut messages = Messages::default();
    let status = loop {
        let (wait, at_deadline) = waits.next();
        let data = match crate::kernel::timer::timeout(wait, body.data()).await {
            Ok(Some(Ok(data))) => data,
            Ok(None) => match messages.end() {
                Ok(()) => match send_all(call.ended(), &mut send, settings, counters).await {
                    true => break Ok(CallStatus::OK),
                    false => return None,
                },
                Err(status) => break Err(status),
            },
            Ok(Some(Err(_))) => return None,
            Err(_) if at_deadline => break Err(CallStatus::deadline_exceeded()),
            Err(_) => {
                counters.add(Counter::Timeouts, 1);
                send.send_reset(h2::Reason::CANCEL);
                return None;
            }
        };
        let _ = body.flow_control().release_capacity(data.len());
        messages.push(&data);
        match reply_each(call, &mut messages, &mut send, settings, counters).await {
            Some(Ok(())) => {}
            Some(Err(status)) => break Err(status),
            None => return None,
        }
    };
    let status = status.unwrap_or_else(|refused| refused);
    let status = match status.code == Code::Ok && call.stays_open() {
        true => match watch(call, &mut send, &waits, settings, counters).await {
            Some(status) => status,
            None => return None,
        },
        false => status,
    };
    send.send_trailers(call.trailers(&status)).ok()?;
    Some(status)
}

/// A `Watch` once its first status is sent: every [`WATCH_EVERY`] the health routes are read and
/// a change is sent, until the client leaves (`None`), the call's deadline (`DEADLINE_EXCEEDED`),
/// or `--idle-timeout` with nothing sent (the stream is reset, counted as a timeout: `None`).
async fn watch(
    call: &mut Call,
    send: &mut h2::SendStream<Bytes>,
    waits: &Waits,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> Option<CallStatus> {
    let mut quiet_since = Instant::now();
    loop {
        let (limit, at_deadline) =
            waits.next_within(waits.idle.saturating_sub(quiet_since.elapsed()));
        let wait = limit.min(WATCH_EVERY);
        let left = poll_fn(|cx| send.poll_reset(cx));
        match crate::kernel::timer::timeout(wait, left).await {
            Ok(_) => return None,
            Err(_) if wait < limit => {
                if let Some(change) = call.watch() {
                    if !send_all(vec![change], send, settings, counters).await {
                        return None;
                    }
                    quiet_since = Instant::now();
                }
            }
            Err(_) if at_deadline => return Some(CallStatus::deadline_exceeded()),
            Err(_) => {
                counters.add(Counter::Timeouts, 1);
                send.send_reset(h2::Reason::CANCEL);
                return None;
            }
        }
    }
}

/// How long a streaming call waits for its client: `--idle-timeout`, or less when the call's
/// `grpc-timeout` falls first (then the call ends `DEADLINE_EXCEEDED`).
struct Waits {
    idle: std::time::Duration,
    deadline: Option<Instant>,
}

impl Waits {
    /// The next wait, and whether it ends at the deadline.
    fn next(&self) -> (std::time::Duration, bool) {
        self.next_within(self.idle)
    }

    /// The next wait when `idle` is left before `--idle-timeout`, and whether it ends at the
    /// deadline.
    fn next_within(&self, idle: std::time::Duration) -> (std::time::Duration, bool) {
        let left = self
            .deadline
            .map(|at| at.saturating_duration_since(Instant::now()));
        match left {
            Some(left) if left <= idle => (left, true),
            _ => (idle, false),
        }
    }
}

/// Sends the replies to every whole message received so far: the status of a message refused;
/// `None` when the stream is over (the client left, or did not read for `--idle-timeout`).
async fn reply_each(
    call: &mut Call,
    messages: &mut Messages,
    send: &mut h2::SendStream<Bytes>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> Option<Result<(), CallStatus>> {
    loop {
        let replies = match messages.take() {
            Ok(Some(message)) => call.replies(&message),
            Ok(None) => return Some(Ok(())),
            Err(status) => Err(status),
        };
        let replies = match replies {
            Ok(replies) => replies,
            Err(status) => return Some(Err(status)),
        };
        if !send_all(replies, send, settings, counters).await {
            return None;
        }
    }
}

/// Sends `replies`, each after its wait; false when the stream is over.
async fn send_all(
    replies: Vec<TimedReply>,
    send: &mut h2::SendStream<Bytes>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> bool {
    for reply in replies {
        if !reply.wait.is_zero() {
            crate::kernel::timer::sleep(reply.wait).await;
        }
        if !send_flowed(send, reply.framed(), settings, counters).await {
            return false;
        }
    }
    true
}

/// Sends `data` as the client's flow control makes room for it, so that a client that does not
/// read holds its replies here rather than in `h2`'s buffers. Each wait for room lasts at most
/// `--idle-timeout` (then the stream is reset, counted as a timeout). False when the stream is
/// over.
async fn send_flowed(
    send: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> bool {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let mut room = send.capacity();
        if room == 0 {
            let granted = poll_fn(|cx| send.poll_capacity(cx));
            room = match crate::kernel::timer::timeout(settings.idle_timeout, granted).await {
                Ok(Some(Ok(room))) => room,
                Ok(_) => return false,
                Err(_) => {
                    counters.add(Counter::Timeouts, 1);
                    send.send_reset(h2::Reason::CANCEL);
                    return false;
                }
            };
        }
        let piece = data.split_to(room.min(data.len()));
        if send.send_data(piece, false).is_err() {
            return false;
        }
    }
    true
}
