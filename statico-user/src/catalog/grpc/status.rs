//! gRPC status codes and the fields that carry them (`grpc-status`, `grpc-message`): in the
//! trailers after a reply, or in the head of a trailers-only answer.

use super::name;
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

impl Code {
    /// Every code, by number.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code numbered `n`.
    pub fn from_number(n: u16) -> Option<Code> {
        Code::ALL.get(usize::from(n)).copied()
    }

    /// The code written as its name (`UNAVAILABLE`, any case) or its number (`14`).
    pub fn parse(text: &str) -> Option<Code> {
        match text.parse::<u16>() {
            Ok(n) => Code::from_number(n),
            Err(_) => (Code::ALL.into_iter()).find(|c| c.name().eq_ignore_ascii_case(text)),
        }
    }

    /// Its name, as gRPC's documents and clients write it: `UNAVAILABLE`.
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The code a pool's shed status stands for: `429` is `RESOURCE_EXHAUSTED`, any other
    /// `UNAVAILABLE`.
    pub fn of_shed(http_status: u16) -> Code {
        match http_status {
            429 => Code::ResourceExhausted,
            _ => Code::Unavailable,
        }
    }
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
        fields.insert(name!("grpc-status"), HeaderValue::from(self.code as u16));
        if self.message.is_empty() {
            return;
        }
        let encoded = utf8_percent_encode(&self.message, MESSAGE).to_string();
        if let Ok(v) = HeaderValue::from_str(&encoded) {
            fields.insert(name!("grpc-message"), v);
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
        assert_eq!(Code::parse("unavailable"), Some(Code::Unavailable));
        assert_eq!(Code::parse("8"), Some(Code::ResourceExhausted));
        assert_eq!(Code::parse("17"), None);
        assert_eq!(
            Code::from_number(16).map(Code::name),
            Some("UNAUTHENTICATED")
        );
        let ok = CallStatus::OK.trailers();
        assert_eq!(ok["grpc-status"], "0");
        assert!(ok.get("grpc-message").is_none());
    }
}
