//! grpc-go's interop `grpc.testing.TestService`, with the semantics its interop client checks:
//! `EmptyCall`, `UnaryCall` (a payload of the size asked, or the status asked), `StreamingInputCall`
//! (the sizes of the payloads received, summed), `StreamingOutputCall` and `FullDuplexCall` (a
//! reply per `ResponseParameters`, each after its interval, or the status asked). `HalfDuplexCall`
//! and `UnimplementedCall` are `UNIMPLEMENTED`, as grpc-go's interop server answers them.
//!
//! The messages are those of `grpc/testing/messages.proto` that the service reads and writes.

use std::time::Duration;

use prost::Message;

use super::frame::MAX_MESSAGE;
use super::status::{CallStatus, Code};

/// `grpc.testing.Empty`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `grpc.testing.Payload` (its type is always `COMPRESSABLE`, 0).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TestPayload {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub body: Vec<u8>,
}

/// `grpc.testing.EchoStatus`: the status a call asks to end with.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `grpc.testing.SimpleRequest`, the fields the service reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SimpleRequest {
    #[prost(int32, tag = "2")]
    pub response_size: i32,
    #[prost(message, optional, tag = "3")]
    pub payload: Option<TestPayload>,
    #[prost(message, optional, tag = "7")]
    pub response_status: Option<EchoStatus>,
}

/// `grpc.testing.SimpleResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SimpleResponse {
    #[prost(message, optional, tag = "1")]
    pub payload: Option<TestPayload>,
}

/// `grpc.testing.StreamingInputCallRequest`, the field the service reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamingInputCallRequest {
    #[prost(message, optional, tag = "1")]
    pub payload: Option<TestPayload>,
}

/// `grpc.testing.StreamingInputCallResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamingInputCallResponse {
    #[prost(int32, tag = "1")]
    pub aggregated_payload_size: i32,
}

/// `grpc.testing.ResponseParameters`, the fields the service reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseParameters {
    #[prost(int32, tag = "1")]
    pub size: i32,
    #[prost(int32, tag = "2")]
    pub interval_us: i32,
}

/// `grpc.testing.StreamingOutputCallRequest`, the fields the service reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamingOutputCallRequest {
    #[prost(message, repeated, tag = "2")]
    pub response_parameters: Vec<ResponseParameters>,
    #[prost(message, optional, tag = "3")]
    pub payload: Option<TestPayload>,
    #[prost(message, optional, tag = "7")]
    pub response_status: Option<EchoStatus>,
}

/// `grpc.testing.StreamingOutputCallResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamingOutputCallResponse {
    #[prost(message, optional, tag = "1")]
    pub payload: Option<TestPayload>,
}

/// One reply of a streaming output: `size` zeros after `wait`. The payload is made as it is sent
/// ([`output_reply`]), so that a request asking for many large replies holds one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    pub wait: Duration,
    pub size: usize,
}

/// `UnaryCall`'s reply: the payload of the size asked, or the status asked.
pub fn unary_call(request: SimpleRequest) -> Result<Vec<u8>, CallStatus> {
    asked_status(request.response_status.as_ref())?;
    let payload = zeros(payload_size(request.response_size)?);
    Ok(SimpleResponse {
        payload: Some(payload),
    }
    .encode_to_vec())
}

/// `StreamingOutputCall`'s and `FullDuplexCall`'s replies to one request: the status asked, or a
/// payload per `ResponseParameters`, each after its interval.
pub fn streaming_output(request: StreamingOutputCallRequest) -> Result<Vec<Timed>, CallStatus> {
    asked_status(request.response_status.as_ref())?;
    (request.response_parameters.iter())
        .map(|p| {
            let wait = Duration::from_micros(u64::try_from(p.interval_us).unwrap_or(0));
            Ok(Timed {
                wait,
                size: payload_size(p.size)?,
            })
        })
        .collect()
}

/// A streaming output's reply: a payload of `size` zeros.
pub fn output_reply(size: usize) -> Vec<u8> {
    StreamingOutputCallResponse {
        payload: Some(zeros(size)),
    }
    .encode_to_vec()
}

/// `StreamingInputCall`'s reply to its requests, whose payloads held `received` bytes in all.
pub fn streaming_input(received: u64) -> Vec<u8> {
    StreamingInputCallResponse {
        aggregated_payload_size: i32::try_from(received).unwrap_or(i32::MAX),
    }
    .encode_to_vec()
}

/// A payload size asked for: at most [`MAX_MESSAGE`] (`RESOURCE_EXHAUSTED` past it), not negative
/// (`INVALID_ARGUMENT`).
fn payload_size(size: i32) -> Result<usize, CallStatus> {
    let size = usize::try_from(size).map_err(|_| {
        CallStatus::new(Code::InvalidArgument, format!("a payload of {size} bytes"))
    })?;
    if size > MAX_MESSAGE {
        let why = format!("a payload of {size} bytes: larger than {MAX_MESSAGE}");
        return Err(CallStatus::new(Code::ResourceExhausted, why));
    }
    Ok(size)
}

fn zeros(size: usize) -> TestPayload {
    TestPayload {
        r#type: 0,
        body: vec![0; size],
    }
}

/// The status a request asks the call to end with, as an error (none, or OK: no error).
fn asked_status(asked: Option<&EchoStatus>) -> Result<(), CallStatus> {
    match asked.filter(|s| s.code != 0) {
        None => Ok(()),
        Some(s) => Err(CallStatus::new(code(s.code), s.message.clone())),
    }
}

/// A status code by its number (`UNKNOWN` for one gRPC does not define).
pub fn code(n: i32) -> Code {
    u16::try_from(n)
        .ok()
        .and_then(Code::from_number)
        .unwrap_or(Code::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unary_call_answers_the_size_or_the_status_asked() {
        let reply = unary_call(SimpleRequest {
            response_size: 314_159,
            payload: None,
            response_status: None,
        })
        .unwrap();
        let r = SimpleResponse::decode(&reply[..]).unwrap();
        assert_eq!(r.payload.unwrap().body.len(), 314_159);
        let asked = EchoStatus {
            code: 2,
            message: "test status message".into(),
        };
        let err = unary_call(SimpleRequest {
            response_status: Some(asked),
            ..SimpleRequest::default()
        })
        .unwrap_err();
        assert_eq!(err, CallStatus::new(Code::Unknown, "test status message"));
        let too_big = SimpleRequest {
            response_size: MAX_MESSAGE as i32 + 1,
            ..SimpleRequest::default()
        };
        assert_eq!(
            unary_call(too_big).unwrap_err().code,
            Code::ResourceExhausted
        );
    }

    #[test]
    fn streaming_output_replies_per_parameters_after_their_intervals() {
        let request = StreamingOutputCallRequest {
            response_parameters: vec![
                ResponseParameters {
                    size: 3,
                    interval_us: 0,
                },
                ResponseParameters {
                    size: 5,
                    interval_us: 1000,
                },
            ],
            ..StreamingOutputCallRequest::default()
        };
        let replies = streaming_output(request).unwrap();
        assert_eq!(replies.len(), 2);
        assert_eq!(replies[1].wait, Duration::from_millis(1));
        let second =
            StreamingOutputCallResponse::decode(&output_reply(replies[1].size)[..]).unwrap();
        assert_eq!(second.payload.unwrap().body, [0; 5]);
        assert_eq!(code(99), Code::Unknown);
        assert_eq!(code(14), Code::Unavailable);
    }
}
