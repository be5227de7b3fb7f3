//! gRPC status codes and the fields that carry them (`grpc-status`, `grpc-message`): in the
//! trailers after a reply, or in the head of a trailers-only answer.

use http::{HeaderMap, HeaderValue};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// The gRPC status codes (grpc/doc/statuscodes.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

/// A call's outcome: its code and, when it is not OK, a message for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallStatus {
    pub code: Code,
    pub message: String,
}

/// What `grpc-message` percent-encodes (the gRPC HTTP/2 protocol: anything outside printable
/// ASCII, and `%` itself).
const MESSAGE: &AsciiSet = &CONTROLS.add(b'%');

impl CallStatus {
    pub const OK: CallStatus = CallStatus {
        code: Code::Ok,
        message: String::new(),
    };

    pub fn new(code: Code, message: impl Into<String>) -> CallStatus {
        CallStatus {
            code,
            message: message.into(),
        }
    }

    /// A call whose `grpc-timeout` passed before its end.
    pub fn deadline_exceeded() -> CallStatus {
        CallStatus::new(Code::DeadlineExceeded, "the call's grpc-timeout passed")
    }

    /// Adds `grpc-status` (and `grpc-message`, when there is one) to `fields`.
    pub fn add_to(&self, fields: &mut HeaderMap) {
        fields.insert("grpc-status", HeaderValue::from(self.code as u16));
        if self.message.is_empty() {
            return;
        }
        let encoded = utf8_percent_encode(&self.message, MESSAGE).to_string();
        if let Ok(v) = HeaderValue::from_str(&encoded) {
            fields.insert("grpc-message", v);
        }
    }

    /// The trailers that end a reply with this status.
    pub fn trailers(&self) -> HeaderMap {
        let mut fields = HeaderMap::new();
        self.add_to(&mut fields);
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_carry_the_code_and_the_message_percent_encoded() {
        let t = CallStatus::new(Code::NotFound, "no such service: ü 100%").trailers();
        assert_eq!(t["grpc-status"], "5");
        assert_eq!(t["grpc-message"], "no such service: %C3%BC 100%25");
        let ok = CallStatus::OK.trailers();
        assert_eq!(ok["grpc-status"], "0");
        assert!(ok.get("grpc-message").is_none());
    }
}
