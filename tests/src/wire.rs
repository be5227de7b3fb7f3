//! Reading answers off the wire as a client that relies on their framing does: an HTTP/1.x
//! connection read by hand ([`Wire`]: heads, each chunk of a chunked body with when it came, bodies by
//! length or to the close), curl's output, one request to the `--admin` control API, and HTTP/2
//! responses read DATA frame by DATA frame with when each came ([`h2_connect`], [`h2_body`]).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::{Response, Server, WAIT};

/// The values of every field `name` in a response head (its status line first), in order.
pub fn fields(head: &str, name: &str) -> Vec<String> {
    head.lines()
        .skip(1)
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
        .collect()
}

/// Asserts the head carries exactly one field `name`, with `value`.
pub fn assert_field(head: &str, name: &str, value: &str) {
    assert_eq!(fields(head, name), [value], "{name} in\n{head}");
}

/// Asserts the head carries no field `name`.
pub fn assert_no_field(head: &str, name: &str) {
    assert!(fields(head, name).is_empty(), "{name} in\n{head}");
}

/// How an HTTP/1.1 body read off the wire ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum End {
    /// The terminating zero-length chunk came.
    Last,
    /// The server closed the connection (EOF) first.
    Closed,
    /// A read failed.
    Failed(ErrorKind),
}

/// A chunked answer: its head, each chunk's bytes with when it was whole (since the request), and
/// how it ended.
pub struct Streamed {
    pub head: Response,
    pub chunks: Vec<(Vec<u8>, Duration)>,
    pub end: End,
}

impl Streamed {
    pub fn texts(&self) -> Vec<String> {
        (self.chunks.iter())
            .map(|(c, _)| String::from_utf8_lossy(c).into_owned())
            .collect()
    }

    /// From the first chunk to the last.
    pub fn spread(&self) -> Duration {
        match (self.chunks.first(), self.chunks.last()) {
            (Some(first), Some(last)) => last.1 - first.1,
            _ => Duration::ZERO,
        }
    }
}

/// An HTTP/1.x connection read by hand: heads, chunks as they arrive, bodies by length or to the close.
pub struct Wire {
    pub stream: TcpStream,
    buf: Vec<u8>,
    pub sent: Instant,
}

impl Wire {
    pub fn open(s: &Server) -> Wire {
        Wire {
            stream: s.connect(),
            buf: Vec::new(),
            sent: Instant::now(),
        }
    }

    /// Sends `bytes`; times are counted from here.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send to statico");
        self.sent = Instant::now();
    }

    /// Reads once more: how many bytes came (0 at EOF), or how the read failed.
    fn fill(&mut self) -> Result<usize, ErrorKind> {
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.kind()),
            }
        }
    }

    /// The next response head (its body left unread).
    pub fn head(&mut self) -> Response {
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let got = self.fill();
            assert!(
                matches!(got, Ok(n) if n > 0),
                "no response head ({got:?}); got {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        };
        let head = String::from_utf8(self.buf.drain(..end).collect()).expect("ASCII head");
        let status = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a status line: {head:?}"));
        Response {
            status,
            head,
            body: Vec::new(),
        }
    }

    /// The next chunk of a chunked body and when it was whole; `Ok(None)` for the terminating one
    /// (trailers none), `Err` if the body ended without it.
    pub fn chunk(&mut self) -> Result<Option<(Vec<u8>, Duration)>, End> {
        loop {
            if let Some(line) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let text = String::from_utf8_lossy(&self.buf[..line]).into_owned();
                let hex = text.split(';').next().unwrap().trim();
                let size = usize::from_str_radix(hex, 16)
                    .unwrap_or_else(|_| panic!("not a chunk size line: {text:?}"));
                let whole = line + 2 + size + 2;
                if self.buf.len() >= whole {
                    let at = self.sent.elapsed();
                    let bytes: Vec<u8> = self.buf.drain(..whole).collect();
                    assert_eq!(&bytes[whole - 2..], b"\r\n", "a chunk not ended by CRLF");
                    let data = bytes[line + 2..line + 2 + size].to_vec();
                    return Ok((size > 0).then_some((data, at)));
                }
            }
            match self.fill() {
                Ok(0) => return Err(End::Closed),
                Ok(_) => {}
                Err(kind) => return Err(End::Failed(kind)),
            }
        }
    }

    /// A response with a chunked body, every chunk read to the terminating one or the end.
    pub fn streamed(&mut self) -> Streamed {
        let head = self.head();
        assert_field(&head.head, "transfer-encoding", "chunked");
        let mut chunks = Vec::new();
        let end = loop {
            match self.chunk() {
                Ok(Some(chunk)) => chunks.push(chunk),
                Ok(None) => break End::Last,
                Err(end) => break end,
            }
        };
        Streamed { head, chunks, end }
    }

    /// A response whose body has a Content-Length (none: empty).
    pub fn whole(&mut self) -> Response {
        let r = self.head();
        self.body_of(r)
    }

    /// The body of `r`, whose head was read, by its Content-Length (none: empty).
    pub fn body_of(&mut self, mut r: Response) -> Response {
        assert_no_field(&r.head, "transfer-encoding");
        let len: usize = r.header("content-length").map_or(0, |v| v.parse().unwrap());
        while self.buf.len() < len {
            assert!(
                matches!(self.fill(), Ok(n) if n > 0),
                "closed inside a body"
            );
        }
        r.body = self.buf.drain(..len).collect();
        r
    }

    /// Everything until the server closes, and how the connection ended.
    pub fn until_closed(&mut self) -> (Vec<u8>, End) {
        let end = loop {
            match self.fill() {
                Ok(0) => break End::Closed,
                Ok(_) => {}
                Err(kind) => break End::Failed(kind),
            }
        };
        (std::mem::take(&mut self.buf), end)
    }

    /// True if nothing arrives within `d` and the connection is still open.
    pub fn quiet_for(&mut self, d: Duration) -> bool {
        self.stream.set_read_timeout(Some(d)).unwrap();
        let got = self.fill();
        self.stream.set_read_timeout(Some(WAIT)).unwrap();
        matches!(got, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)) && self.buf.is_empty()
    }
}

/// curl's output split into its (lower-cased) head and its body.
pub fn curl_split(out: &str) -> (String, &str) {
    let (head, body) = out
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in curl's output: {out:?}"));
    (head.to_ascii_lowercase(), body)
}

/// One request to the `--admin` control API: the answer.
pub fn admin(s: &Server, method: &str, path: &str, body: &str) -> Response {
    let mut w = Wire {
        stream: TcpStream::connect(s.admin_addr()).expect("connect to --admin"),
        buf: Vec::new(),
        sent: Instant::now(),
    };
    w.stream.set_read_timeout(Some(WAIT)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    w.send(&[head.as_bytes(), body.as_bytes()].concat());
    w.whole()
}

// ---- HTTP/2 ----

/// A current-thread runtime with I/O and timers, for a test's async client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 client (the `h2` crate) connected to `addr` by prior knowledge, its connection driven by
/// a task of the current runtime.
pub async fn h2_connect(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    (client, tokio::spawn(conn))
}

/// What an HTTP/2 response body gave: each non-empty DATA frame with when it came, and the error it
/// ended with, if any.
pub struct H2Body {
    pub frames: Vec<(bytes::Bytes, Duration)>,
    pub error: Option<h2::Error>,
}

impl H2Body {
    pub fn texts(&self) -> Vec<String> {
        (self.frames.iter())
            .map(|(f, _)| String::from_utf8_lossy(f).into_owned())
            .collect()
    }
}

/// Reads `body` to its end or its error, each frame within [`WAIT`], granting back the
/// flow-control window as it reads; times are counted from `since`.
pub async fn h2_body(body: &mut h2::RecvStream, since: Instant) -> H2Body {
    let mut out = H2Body {
        frames: Vec::new(),
        error: None,
    };
    while let Some(frame) = tokio::time::timeout(WAIT, body.data()).await.expect("data") {
        match frame {
            Ok(frame) => {
                let _ = body.flow_control().release_capacity(frame.len());
                if !frame.is_empty() {
                    out.frames.push((frame, since.elapsed()));
                }
            }
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out
}
