//! Which protocol a cleartext connection speaks, decided from its first bytes: HTTP/2's connection
//! preface (prior knowledge), an HTTP/1.x request line, or an HTTP/1.1 request asking for
//! `Upgrade: h2c` (RFC 7540 §3.2).
//!
//! It sits below both HTTP/1.1 and HTTP/2: the connection asks it before either protocol runs, the
//! HTTP/1.1 session records the upgrade request, and HTTP/2 replays it on stream 1 — so neither
//! protocol module imports the other.

/// The HTTP/2 client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How far into a `--http2` connection's first bytes a request line's end is looked for.
const FIRST_LINE_MAX: usize = 256;

/// On a `--http2` port, whether a connection's first bytes are an HTTP/1.x request line: `None` until
/// the line is complete (or [`FIRST_LINE_MAX`] bytes arrived without one: then HTTP/1 decides, and its
/// limits apply), `Some(false)` when the line does not end in an `HTTP/` version (it is then taken for
/// a broken HTTP/2 preface).
///
/// Only the first [`FIRST_LINE_MAX`] bytes are looked at, so the answer does not depend on how the
/// bytes were split into reads (a line end just past them once made a broken preface when it came in
/// the same read, and HTTP/1's 400 when it came later: found by the `connection` fuzz target).
pub fn first_line_is_http1(bytes: &[u8]) -> Option<bool> {
    let window = &bytes[..bytes.len().min(FIRST_LINE_MAX)];
    let Some(end) = window.iter().position(|&b| b == b'\n') else {
        return (bytes.len() >= FIRST_LINE_MAX).then_some(true);
    };
    let line = bytes[..end].strip_suffix(b"\r").unwrap_or(&bytes[..end]);
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or_default();
    Some(line.is_empty() || version.starts_with(b"HTTP/"))
}

/// The request that asked to upgrade, as needed to replay it on stream 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeRequest {
    pub method: String,
    pub path: String,
    pub authority: String,
}

impl UpgradeRequest {
    /// From the raw HTTP/1.1 head of a request that asked for `Upgrade: h2c`.
    pub fn from_head(raw: &[u8]) -> Option<Self> {
        let mut headers = [httparse::EMPTY_HEADER; super::MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(raw).ok()?;
        let host = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("host"))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
            .unwrap_or_default();
        Some(UpgradeRequest {
            method: req.method?.to_string(),
            path: req.path?.to_string(),
            authority: host,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_decides_between_http1_and_a_broken_preface() {
        assert_eq!(first_line_is_http1(b"GET / HTT"), None);
        assert_eq!(first_line_is_http1(b"GET / HTTP/1.1\r\n"), Some(true));
        assert_eq!(first_line_is_http1(b"GET / HTTP/2.0\r\nHost"), Some(true));
        assert_eq!(first_line_is_http1(b"\r\n"), Some(true));
        assert_eq!(
            first_line_is_http1(b"INVALID CONNECTION PREFACE\r\n\r\n"),
            Some(false)
        );
        assert_eq!(first_line_is_http1(&[b'a'; 300]), Some(true));
        // A line end past the first 256 bytes is not looked for, whichever read brought it.
        let late = [&[b'a'; 256][..], b"\n"].concat();
        assert_eq!(first_line_is_http1(&late), Some(true));
        assert_eq!(first_line_is_http1(&late[..256]), Some(true));
        assert_eq!(first_line_is_http1(&late[..255]), None);
    }
}
