//! The side ports, `--metrics` and `--admin`: one small HTTP/1.1 server for both, on the main
//! thread (never a worker), so that nothing done to a side port touches the answers being measured
//! and no side-port request counts in `statico_requests_total` or the ground truth.
//!
//! Every connection is served on its own, beside the others ([`serve`]): a client that idles,
//! trickles or never reads holds its own connection and nothing else — a scrape or a `POST /pause`
//! is answered while it waits. At most [`MAX_OPEN`] are served at once per port; the next gets 503
//! and is closed. What one connection may do is decided by the I/O-free [`exchange`] (the workers'
//! HTTP/1.1 parser, a deadline for the head and one for the body, a lingering close after every
//! answer); what a request is answered with is the port's [`Service`]: the metrics page
//! ([`scrape`]) or the control API ([`crate::control`]).
//!
//! The driver below is every system call a side-port connection makes: `accept4`, `recv`, `send`,
//! `shutdown(SHUT_WR)`, `recv` until EOF, `close`.

pub mod exchange;
pub mod scrape;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::proto::http1::parser::Limits;
use exchange::{Exchange, Linger, Progress, CONTINUE, SEND_TIME};

/// Connections served at once on one side port; past this, each new one is refused with 503.
pub const MAX_OPEN: usize = 256;
/// How long a refused connection lingers for the request it may have sent (so that the 503 is not
/// destroyed by a reset); at most [`MAX_OPEN`] of them, past which a new connection is just closed.
const REFUSED_LINGER: Duration = Duration::from_secs(1);
/// After an accept fails (out of descriptors): wait this long before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// A request head is at most this long on a side port.
const MAX_HEAD: usize = 16 * 1024;
/// One read's buffer, per connection while it reads (a side port's requests are small).
const READ_SIZE: usize = 4096;

/// What a side port answers with.
pub trait Service {
    /// Called once a request's head is complete, before any of its body is read: an answer that
    /// refuses it (401, 404, 405), or `None` to read the body and [`Service::answer`] it.
    fn screen(&self, head: &SideHead) -> Option<Reply>;
    /// The whole request's answer.
    fn answer(&self, request: SideRequest) -> Reply;
}

/// A request's head, as a side port reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideHead {
    pub method: String,
    pub path: String,
    pub query: String,
    pub authorization: Option<String>,
}

impl SideHead {
    /// The fields a service looks at, from a complete head the parser has framed.
    fn parse(raw: &[u8]) -> Option<SideHead> {
        let mut fields = [httparse::EMPTY_HEADER; crate::proto::MAX_HEADERS];
        let mut req = httparse::Request::new(&mut fields);
        req.parse(raw).ok()?.is_complete().then_some(())?;
        let authorization = (req.headers.iter())
            .find(|h| h.name.eq_ignore_ascii_case("authorization"))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned());
        let target = req.path?;
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Some(SideHead {
            method: req.method?.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            authorization,
        })
    }
}

/// A whole request.
#[derive(Debug)]
pub struct SideRequest {
    pub head: SideHead,
    pub body: Vec<u8>,
}

/// An answer: status, extra fields, content type, body. Every answer closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub fields: Vec<(&'static str, String)>,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    pub fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            fields: Vec::new(),
            content_type: "text/plain; charset=utf-8",
            body: body.to_owned(),
        }
    }

    /// A 200 with `body` of `content_type`.
    pub fn ok(content_type: &'static str, body: String) -> Reply {
        Reply {
            content_type,
            body,
            ..Reply::text(200, "")
        }
    }

    pub fn json(body: String) -> Reply {
        Reply::ok("application/json", body)
    }

    /// 405 for `path`, which takes the methods `allow`.
    pub fn not_allowed(path: &str, allow: &str) -> Reply {
        Reply {
            fields: vec![("Allow", allow.into())],
            ..Reply::text(405, &format!("{path} takes {allow}\n"))
        }
    }

    /// The bytes sent: the head, and the body unless the request was a HEAD.
    fn encode(&self, head_only: bool) -> Vec<u8> {
        let reason = http::StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut head = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.fields {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        if !head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

/// A side port's listener and the request limits it serves with.
#[derive(Debug)]
pub struct Door {
    listener: std::net::TcpListener,
    limits: Limits,
}

impl Door {
    /// Binds `addr` for `flag` (named in the error), taking bodies of at most `max_body` bytes.
    pub fn bind(flag: &str, addr: SocketAddr, max_body: u64) -> Result<Door> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("{flag} {addr}: cannot listen there"))?;
        listener.set_nonblocking(true)?;
        let limits = Limits {
            max_head: MAX_HEAD,
            max_body,
        };
        Ok(Door { listener, limits })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Serves `door` with `service` until the future is dropped (shutdown): each connection on its own,
/// at most [`MAX_OPEN`] at once.
pub async fn serve(door: Door, service: &dyn Service) {
    let listener = match tokio::net::TcpListener::from_std(door.listener) {
        Ok(l) => l,
        Err(e) => return eprintln!("statico: side port: {e}"),
    };
    let mut open = FuturesUnordered::new();
    let mut refused = FuturesUnordered::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if open.len() < MAX_OPEN => {
                    open.push(connection(stream, door.limits, service));
                }
                Ok((stream, _)) if refused.len() < MAX_OPEN => refused.push(refuse(stream)),
                Ok(_) => {} // closed at once
                Err(_) => tokio::time::sleep(ACCEPT_RETRY).await,
            },
            Some(()) = open.next(), if !open.is_empty() => {}
            Some(()) = refused.next(), if !refused.is_empty() => {}
        }
    }
}

/// One connection: its request, its answer, the lingering close.
async fn connection(mut stream: TcpStream, limits: Limits, service: &dyn Service) {
    let Some((answer, head_only)) = receive(&mut stream, limits, service).await else {
        return; // nothing to answer: closed
    };
    let sent = tokio::time::timeout(SEND_TIME, stream.write_all(&answer.encode(head_only))).await;
    if matches!(sent, Ok(Ok(()))) {
        linger(stream).await;
    }
}

/// Reads until the exchange has an answer: the service's, or a refusal (408 past a deadline).
async fn receive(
    stream: &mut TcpStream,
    limits: Limits,
    service: &dyn Service,
) -> Option<(Reply, bool)> {
    let mut exchange = Exchange::new(limits, Instant::now());
    let mut buf = vec![0u8; READ_SIZE];
    loop {
        let deadline = tokio::time::Instant::from_std(exchange.deadline());
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return Some((exchange.timed_out(), exchange.head_only())),
            Ok(Ok(0)) => return exchange.peer_closed().map(|a| (a, exchange.head_only())),
            Ok(Err(_)) => return None, // reset: nobody to answer
            Ok(Ok(n)) => n,
        };
        match exchange.receive(&buf[..n], Instant::now(), service) {
            Progress::More => {}
            Progress::Continue => {
                let sent = tokio::time::timeout(SEND_TIME, stream.write_all(CONTINUE)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    return None;
                }
            }
            Progress::Done(answer) => return Some((answer, exchange.head_only())),
        }
    }
}

/// Shuts our side, then reads and discards until the client's EOF ([`Linger`]).
async fn linger(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let linger = Linger::new(Instant::now());
    let mut buf = vec![0u8; READ_SIZE];
    while let Some(wait) = linger.next_wait(Instant::now()) {
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

/// A connection past [`MAX_OPEN`]: 503, then a short lingering close.
async fn refuse(stream: TcpStream) {
    let text = format!("this port serves {MAX_OPEN} connections at once: try again\n");
    let answer = Reply {
        fields: vec![("Retry-After", "1".into())],
        ..Reply::text(503, &text)
    };
    // A fresh socket's buffer takes a short answer whole: no waiting on a client that never reads.
    let _ = stream.try_write(&answer.encode(false));
    let _ = tokio::time::timeout(REFUSED_LINGER, linger(stream)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_closes_and_a_head_answer_has_no_body() {
        let a = Reply::not_allowed("/routes", "GET, PUT");
        let text = String::from_utf8(a.encode(false)).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nConnection: close\r\n") && text.contains("\r\nAllow: GET, PUT\r\n")
        );
        assert!(text.ends_with("\r\n\r\n/routes takes GET, PUT\n"));
        let head = String::from_utf8(a.encode(true)).unwrap();
        assert!(
            head.ends_with("\r\n\r\n") && head.contains("Content-Length: 23\r\n"),
            "{head}"
        );
    }

    #[test]
    fn a_head_gives_method_path_query_and_token() {
        let raw = b"PUT /pause?for=1s HTTP/1.1\r\nAuthorization:  Bearer abc \r\n\r\n";
        let head = SideHead::parse(raw).unwrap();
        assert_eq!(
            (head.method.as_str(), head.path.as_str()),
            ("PUT", "/pause")
        );
        assert_eq!(head.query, "for=1s");
        assert_eq!(head.authorization.as_deref(), Some("Bearer abc"));
    }
}
