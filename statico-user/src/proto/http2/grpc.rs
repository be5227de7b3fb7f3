//! A gRPC call to a built-in method on one HTTP/2 stream ([`crate::catalog::grpc`] decides what
//! it gets): its request read message by message, then a unary call's answer delivered like every
//! answer (its status in its trailers, or trailers-only), or a streaming call's replies sent as each
//! request message comes, and its trailers once the client's side ends.
//!
//! A message is at most 4 MiB (not `--max-body-size`). A unary call's body may pause
//! `--header-timeout` between its frames; a streaming call's stream, open and quiet between
//! messages, is ended after `--idle-timeout`.

use std::future::poll_fn;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::Request;

use super::stream::{deliver, Ended};
use super::H2Settings;
use crate::catalog::grpc::frame::Messages;
use crate::catalog::grpc::status::CallStatus;
use crate::catalog::grpc::{self, Call};
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
) -> Ended {
    if verbose > 0 {
        crate::observe::dump::stream_request(&request, "HTTP/2", respond.stream_id(), verbose);
    }
    let call = *answer.grpc.take().expect("a gRPC call's answer carries it");
    let date = answer.headers.remove(http::header::DATE);
    let mut body = request.into_body();
    if !call.unary() {
        counters.add(Counter::Requests, 1);
        return streamed(&call, body, respond, date, settings, counters).await;
    }
    let Some(messages) = read(&mut body, &mut respond, settings, counters).await else {
        return Ended::Done;
    };
    counters.add(Counter::Requests, 1);
    let mut reply = call.unary_answer(messages, SystemTime::now());
    if let Some(date) = date {
        reply.headers.insert(http::header::DATE, date);
    }
    deliver(respond, reply, Instant::now(), settings, counters, verbose).await
}

/// Reads a unary call's request to its end: its messages (two at most are kept, one too many), or
/// the status of a body that is not gRPC messages (reading stops there). `None`: the client reset
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
                Ok(Some(message)) if kept.len() < 2 => kept.push(message),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(status) => return Some(Err(status)),
            }
        }
    }
}

/// A streaming call: the head at once, a reply to each request message as it comes, and the
/// trailers when the client's side ends (or when a message is refused); `Watch` keeps the stream
/// open after that until the client leaves.
async fn streamed(
    call: &Call,
    mut body: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    date: Option<http::HeaderValue>,
    settings: H2Settings,
    counters: &WorkerCounters,
) -> Ended {
    let mut head = http::Response::new(());
    *head.headers_mut() = grpc::head_fields();
    if let Some(date) = date {
        head.headers_mut().insert(http::header::DATE, date);
    }
    let Ok(mut send) = respond.send_response(head, false) else {
        return Ended::Done;
    };
    counters.add(Counter::Responses, 1);
    let mut messages = Messages::default();
    let status = loop {
        let data = match crate::kernel::timer::timeout(settings.idle_timeout, body.data()).await {
            Ok(Some(Ok(data))) => data,
            Ok(None) => break messages.end().map(|()| CallStatus::OK),
            Ok(Some(Err(_))) => return Ended::Done,
            Err(_) => {
                counters.add(Counter::Timeouts, 1);
                send.send_reset(h2::Reason::CANCEL);
                return Ended::Done;
            }
        };
        let _ = body.flow_control().release_capacity(data.len());
        messages.push(&data);
        if let Err(status) = reply_each(call, &mut messages, &mut send) {
            break Err(status);
        }
    };
    let status = status.unwrap_or_else(|refused| refused);
    if status.code == grpc::status::Code::Ok && call.stays_open() {
        let _ = poll_fn(|cx| send.poll_reset(cx)).await;
        return Ended::Done;
    }
    let _ = send.send_trailers(status.trailers());
    Ended::Done
}

/// Sends the replies to every whole message received so far; the status of one refused.
fn reply_each(
    call: &Call,
    messages: &mut Messages,
    send: &mut h2::SendStream<Bytes>,
) -> Result<(), CallStatus> {
    while let Some(message) = messages.take()? {
        for reply in call.replies(&message)? {
            // A client that reset the stream is found out by the next read.
            let _ = send.send_data(reply, false);
        }
    }
    Ok(())
}
