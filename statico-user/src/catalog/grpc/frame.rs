//! gRPC's length-prefixed messages (the gRPC HTTP/2 protocol): a compressed flag byte, a 4-byte
//! big-endian length, the message. [`Messages`] cuts a request body into messages as its DATA
//! frames arrive, and says which status a body that is not made of gRPC messages gets.

use bytes::{Buf, Bytes, BytesMut};

use super::status::{CallStatus, Code};

/// The largest message statico takes (gRPC's default receive limit): a larger one gets
/// `RESOURCE_EXHAUSTED`.
pub const MAX_MESSAGE: usize = 4 << 20;

/// The 5-byte prefix.
const PREFIX: usize = 5;

/// `message` framed: the flag (not compressed), its length, its bytes.
pub fn framed(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(PREFIX + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

/// A request body's bytes so far, cut into whole messages.
#[derive(Debug, Default)]
pub struct Messages {
    pending: BytesMut,
}

impl Messages {
    /// Takes the next bytes of the body.
    pub fn push(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
    }

    /// The next whole message, `None` while its bytes have not all come, or the status of a
    /// message statico does not take: compressed (statico accepts no `grpc-encoding`), over
    /// [`MAX_MESSAGE`], or with a flag that is neither 0 nor 1.
    pub fn take(&mut self) -> Result<Option<Bytes>, CallStatus> {
        let Some(prefix) = self.pending.get(..PREFIX) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        match prefix[0] {
            0 => {}
            1 => {
                return Err(CallStatus::new(
                    Code::Unimplemented,
                    "compressed message: statico accepts no grpc-encoding but identity",
                ))
            }
            flag => {
                return Err(CallStatus::new(
                    Code::Internal,
                    format!("message flag {flag}: neither 0 nor 1"),
                ))
            }
        }
        if len > MAX_MESSAGE {
            return Err(CallStatus::new(
                Code::ResourceExhausted,
                format!("message of {len} bytes: larger than {MAX_MESSAGE}"),
            ));
        }
        if self.pending.len() < PREFIX + len {
            return Ok(None);
        }
        self.pending.advance(PREFIX);
        Ok(Some(self.pending.split_to(len).freeze()))
    }

    /// At the end of the body: `INTERNAL` if part of a message is left (its length prefix said
    /// more than the body held).
    pub fn end(&self) -> Result<(), CallStatus> {
        match self.pending.len() {
            0 => Ok(()),
            n => Err(CallStatus::new(
                Code::Internal,
                format!("the body ends inside a message ({n} bytes of it)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(body: &[u8]) -> Result<Vec<Bytes>, CallStatus> {
        let mut m = Messages::default();
        m.push(body);
        let mut out = Vec::new();
        while let Some(one) = m.take()? {
            out.push(one);
        }
        m.end().map(|()| out)
    }

    #[test]
    fn whole_messages_come_out_as_their_bytes_arrive() {
        let mut body = framed(b"abc").to_vec();
        body.extend_from_slice(&framed(b""));
        assert_eq!(messages(&body).unwrap(), [&b"abc"[..], b""]);
        let mut m = Messages::default();
        m.push(&body[..4]);
        assert_eq!(m.take(), Ok(None));
        m.push(&body[4..]);
        assert_eq!(m.take().unwrap().unwrap(), &b"abc"[..]);
    }

    #[test]
    fn a_body_of_no_grpc_messages_gets_the_status_grpc_prescribes() {
        let code = |body: &[u8]| messages(body).unwrap_err().code;
        // A length prefix longer than the body.
        assert_eq!(code(&[0, 0, 0, 0, 9, 1, 2]), Code::Internal);
        assert_eq!(code(&[0, 0]), Code::Internal);
        // Compressed, with no grpc-encoding statico accepts.
        assert_eq!(code(&[1, 0, 0, 0, 1, 7]), Code::Unimplemented);
        assert_eq!(code(&[2, 0, 0, 0, 0]), Code::Internal);
        // Over 4 MiB: refused from its prefix, before its bytes come.
        let len = (MAX_MESSAGE as u32 + 1).to_be_bytes();
        assert_eq!(
            code(&[0, len[0], len[1], len[2], len[3]]),
            Code::ResourceExhausted
        );
    }
}
