//! Loopback ports and plain HTTP/1.1 requests: a port free for TCP and UDP, waiting until a server
//! accepts, and one request on a connection of its own (statico's `--metrics` and `--admin`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A client connection: a TCP stream, or TLS over one.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A port on 127.0.0.1 free for TCP and for UDP alike (a server with HTTP/3 takes both).
pub fn free_port() -> Result<u16> {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no port on 127.0.0.1 free for both TCP and UDP in 20 tries")
}

/// Waits (up to 10 s) until something accepts connections on 127.0.0.1:`port`.
pub fn wait_port(port: u16) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        sleep(Duration::from_millis(50));
    }
    bail!("server on port {port} did not come up")
}

/// The body of `GET path` on 127.0.0.1:`port`, if the answer is 200.
pub fn http_get(port: u16, path: &str) -> Result<String> {
    http_request(port, "GET", path, "")
}

/// `METHOD path` with `body` on 127.0.0.1:`port` (HTTP/1.1, `Connection: close`): the answer's body,
/// if its status is 200; else the error names its status line.
pub fn http_request(port: u16, method: &str, path: &str, body: &str) -> Result<String> {
    let mut c = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connect to 127.0.0.1:{port}"))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let length = match (method, body.len()) {
        ("GET", 0) => String::new(),
        (_, n) => format!("Content-Length: {n}\r\n"),
    };
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{length}Connection: close\r\n\r\n{body}"
    )?;
    let mut answer = String::new();
    c.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "{method} {path} on port {port}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// A one-shot server on a free port: answers `answer` to the first request; the request it read.
    fn serve_once(answer: &'static str) -> (u16, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (c, _) = listener.accept().unwrap();
            let mut r = std::io::BufReader::new(c);
            let mut request = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(n) = line.strip_prefix("Content-Length: ") {
                    length = n.trim().parse().unwrap();
                }
                request.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            r.read_exact(&mut body).unwrap();
            request.push_str(&String::from_utf8(body).unwrap());
            r.get_mut().write_all(answer.as_bytes()).unwrap();
            request
        });
        (port, server)
    }

    #[test]
    fn a_request_gets_the_body_of_a_200_and_names_another_status() {
        let (port, server) = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
        assert_eq!(http_get(port, "/x").unwrap(), "hi");
        let sent = server.join().unwrap();
        assert!(sent.starts_with("GET /x HTTP/1.1\r\n"), "{sent}");
        assert!(!sent.contains("Content-Length"), "{sent}");

        let (port, server) = serve_once("HTTP/1.1 400 Bad Request\r\n\r\n");
        let err = http_request(port, "PUT", "/routes", "[[route]]").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("PUT /routes on port {port}: HTTP/1.1 400 Bad Request")
        );
        let sent = server.join().unwrap();
        assert!(sent.contains("Content-Length: 9\r\n"), "{sent}");
        assert!(sent.ends_with("\r\n\r\n[[route]]"), "{sent}");
    }
}
