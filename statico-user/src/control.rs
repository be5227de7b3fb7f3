//! `--admin ADDR:PORT`: the control API, on a listener of its own, served by the main thread (never
//! a worker), one short connection at a time like `--metrics`. It changes the server during a run
//! without a restart:
//!
//! | request | does |
//! |---|---|
//! | `GET /routes` | the routes table in force, as a `--routes` TOML document |
//! | `PUT /routes` | a TOML body replaces the routes, pools and phases for the next requests |
//! | `POST /pause?for=DUR`, `POST /resume` | a whole-server pause ([`crate::catalog::pause`]) |
//! | `GET /ground-truth` | the routes' ground truth (as `/ground-truth.json`) |
//! | `POST /ground-truth/reset` | that snapshot, then counting from zero |
//!
//! Who may use it: on a loopback address, anyone on the machine (as for `--metrics`); on any other,
//! only a client with `--admin-token FILE`'s token (`Authorization: Bearer …`, compared in constant
//! time) — start-up refuses a non-loopback `--admin` without one. A request must arrive within
//! [`REQUEST_TIME`]; a body over [`MAX_BODY`] gets 413 before it is read. The head is framed with
//! `httparse`: the workers' parser is tuned for benchmark traffic, this is a handful of requests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::catalog::route::table::Table;
use crate::catalog::Catalog;

/// The largest `PUT /routes` body.
pub const MAX_BODY: usize = 1 << 20;
/// How long a client has to send its whole request.
const REQUEST_TIME: Duration = Duration::from_secs(5);
const MAX_HEAD: usize = 16 * 1024;

/// The control API's listener and who may use it.
pub struct Admin {
    listener: std::net::TcpListener,
    token: Option<String>,
}

/// `--admin` and `--admin-token` as given, checked before anything else starts (exit 2 on error).
pub fn check(addr: Option<SocketAddr>, token_file: Option<&Path>) -> Result<Option<String>> {
    let Some(addr) = addr else { return Ok(None) };
    let Some(file) = token_file else {
        if !addr.ip().is_loopback() {
            anyhow::bail!("--admin {addr}: not a loopback address; give --admin-token FILE (a bearer token every request must carry) or listen on 127.0.0.1");
        }
        return Ok(None);
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--admin-token {}: cannot read", file.display()))?;
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        anyhow::bail!(
            "--admin-token {}: the file must hold one token (no spaces), like the output of openssl rand -hex 32",
            file.display()
        );
    }
    Ok(Some(token.to_owned()))
}

/// Binds `--admin`'s listener; the start-up line says where.
pub fn listen(addr: Option<SocketAddr>, token: Option<String>) -> Result<Option<Admin>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("--admin {addr}: cannot listen there"))?;
    listener.set_nonblocking(true)?;
    let guarded = if token.is_some() {
        " (bearer token required)"
    } else {
        ""
    };
    eprintln!(
        "statico: admin on http://{}/{guarded}",
        listener.local_addr()?
    );
    Ok(Some(Admin { listener, token }))
}

/// What SIGHUP and `PUT /routes` rebuild the routes from: the flags' own table, and the file.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub flags: Table,
    pub file: Option<PathBuf>,
}

/// SIGHUP: `--routes FILE` read again, after the flags' routes, put in force; a broken file keeps
/// the routes in force. Says which on stderr.
pub fn reload_routes(catalog: &Catalog, sources: &Sources) {
    let Some(file) = &sources.file else { return };
    let table = Table::of_file(file).map(|t| sources.flags.clone().and(t));
    match table.map_err(anyhow::Error::msg).and_then(|t| {
        let generation = catalog.replace_routes(&t)?;
        Ok((generation, t))
    }) {
        Ok((generation, t)) => eprintln!(
            "statico: SIGHUP: routes: generation {generation}: {}",
            summary(&t)
        ),
        Err(e) => eprintln!("statico: SIGHUP: kept the routes in force: {e:#}"),
    }
}

fn summary(t: &Table) -> String {
    format!(
        "{} routes, {} pools, {} phases",
        t.routes.len(),
        t.pools.len(),
        t.phases.len()
    )
}

/// Answers the control API on `admin` until the future is dropped (shutdown).
pub async fn serve(admin: Admin, catalog: &Catalog) {
    let listener = match tokio::net::TcpListener::from_std(admin.listener) {
        Ok(l) => l,
        Err(e) => return eprintln!("statico: --admin: {e}"),
    };
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await; // out of descriptors: retry
            continue;
        };
        let token = admin.token.as_deref();
        let request = tokio::time::timeout(REQUEST_TIME, read_request(&mut conn, token)).await;
        let answer = match request {
            Ok(Ok(request)) => route(&request, catalog),
            Ok(Err(answer)) => answer,
            Err(_) => Answer::text(408, "the request did not arrive within 5s\n"),
        };
        let bytes = answer.encode();
        let _ = tokio::time::timeout(REQUEST_TIME, conn.write_all(&bytes)).await;
    }
}

/// One request, as the API reads it.
#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    query: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

/// An answer: status, extra fields, content type, body. Every answer closes the connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    fields: Vec<(&'static str, String)>,
    content_type: &'static str,
    body: String,
}

impl Answer {
    fn text(status: u16, body: &str) -> Answer {
        Answer {
            status,
            fields: Vec::new(),
            content_type: "text/plain; charset=utf-8",
            body: body.to_owned(),
        }
    }

    fn json(body: String) -> Answer {
        Answer {
            content_type: "application/json",
            body,
            ..Answer::text(200, "")
        }
    }

    fn unauthorized() -> Answer {
        Answer {
            fields: vec![("WWW-Authenticate", "Bearer".into())],
            ..Answer::text(
                401,
                "a bearer token is required: Authorization: Bearer TOKEN (--admin-token)\n",
            )
        }
    }

    fn encode(&self) -> Vec<u8> {
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
        bytes.extend_from_slice(self.body.as_bytes());
        bytes
    }
}

/// Reads a request's head and its body (by `Content-Length`); a bad one is answered at once.
async fn read_request(
    conn: &mut tokio::net::TcpStream,
    token: Option<&str>,
) -> Result<Request, Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = conn.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return Err(Answer::text(400, "the request ended before its head\n"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some((request, length, at)) = parse_head(&buf)? {
            if !authorized(&request, token) {
                return Err(Answer::unauthorized()); // before its body is read
            }
            if length > MAX_BODY {
                return Err(Answer::text(413, "a body is at most 1 MiB\n"));
            }
            let mut body = buf.split_off(at);
            while body.len() < length {
                let n = conn.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    return Err(Answer::text(400, "the request ended before its body\n"));
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(length);
            return Ok(Request { body, ..request });
        }
        if buf.len() > MAX_HEAD {
            return Err(Answer::text(431, "the head is over 16 KiB\n"));
        }
    }
}

/// The head, once complete: the request without its body, the body's length, where it starts.
fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize, usize)>, Answer> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let at = match req.parse(buf) {
        Ok(httparse::Status::Complete(at)) => at,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(Answer::text(
                400,
                &format!("not an HTTP/1.1 request: {e}\n"),
            ))
        }
    };
    let field = |name: &str| {
        (req.headers.iter())
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_owned())
    };
    if field("transfer-encoding").is_some() {
        return Err(Answer::text(411, "send the body with Content-Length\n"));
    }
    // Digits only, as HTTP/1.1 requests are read (`usize`'s parser would also take `+5`).
    let length = field("content-length").map(|v| {
        crate::proto::http1::parser::parse_content_length(v.as_bytes())
            .and_then(|n| usize::try_from(n).ok())
    });
    let length = match length {
        None => 0,
        Some(Some(n)) => n,
        Some(None) => return Err(Answer::text(400, "Content-Length is not a number\n")),
    };
    let target = req.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let request = Request {
        method: req.method.unwrap_or("").to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        authorization: field("authorization"),
        body: Vec::new(),
    };
    Ok(Some((request, length, at)))
}

/// Whether `request` may use the API: no token is needed, or it carries the token.
fn authorized(request: &Request, token: Option<&str>) -> bool {
    let Some(token) = token else { return true };
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
    let given = (request.authorization.as_deref())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim());
    same_token(given.as_bytes(), token.as_bytes())
}

/// Whether `given` is `token`, in a time that depends on the token's length only: every byte of the
/// token is compared (against 0 past the end of `given`), so neither where a guess goes wrong nor how
/// long it is shows (`subtle`'s slice comparison returns at once on a length mismatch).
fn same_token(given: &[u8], token: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let mut same = given.len().ct_eq(&token.len());
    for (i, t) in token.iter().enumerate() {
        same &= given.get(i).copied().unwrap_or(0).ct_eq(t);
    }
    bool::from(same)
}

/// What a request asks for, answered.
fn route(request: &Request, catalog: &Catalog) -> Answer {
    let method = request.method.as_str();
    match (request.path.as_str(), method) {
        ("/routes", "GET") => get_routes(catalog),
        ("/routes", "PUT") => put_routes(&request.body, catalog),
        ("/pause", "POST") => pause(&request.query, catalog),
        ("/resume", "POST") => {
            catalog.pauses().inspect(|p| p.resume());
            eprintln!("statico: admin: resumed");
            Answer::json("{\"resumed\":true}".into())
        }
        ("/ground-truth", "GET") => ground_truth(catalog, false),
        ("/ground-truth/reset", "POST") => ground_truth(catalog, true),
        (path, _) => match allowed(path) {
            Some(allow) => Answer {
                fields: vec![("Allow", allow.into())],
                ..Answer::text(405, &format!("{path} takes {allow}\n"))
            },
            None => Answer::text(404, "the control API has /routes, /pause, /resume, /ground-truth and /ground-truth/reset\n"),
        },
    }
}

fn allowed(path: &str) -> Option<&'static str> {
    match path {
        "/routes" => Some("GET, PUT"),
        "/pause" | "/resume" | "/ground-truth/reset" => Some("POST"),
        "/ground-truth" => Some("GET"),
        _ => None,
    }
}

fn get_routes(catalog: &Catalog) -> Answer {
    let toml = (catalog.routes()).map_or(String::new(), |r| r.table().toml.clone());
    Answer {
        content_type: "application/toml",
        body: toml,
        ..Answer::text(200, "")
    }
}

/// `PUT /routes`: the body as a `--routes` document, put in force; a bad one is a 400 saying why,
/// and the table in force stays.
fn put_routes(body: &[u8], catalog: &Catalog) -> Answer {
    let Ok(text) = std::str::from_utf8(body) else {
        return Answer::text(400, "statico: PUT /routes: the body is not UTF-8 TOML\n");
    };
    let table = Table::of_toml(text, Path::new("PUT /routes")).map_err(anyhow::Error::msg);
    match table.and_then(|t| Ok((catalog.replace_routes(&t)?, t))) {
        Ok((generation, t)) => {
            eprintln!(
                "statico: admin: PUT /routes: generation {generation}: {}",
                summary(&t)
            );
            Answer::json(format!("{{\"generation\":{generation}}}"))
        }
        Err(e) => Answer::text(400, &format!("statico: {e:#}\n")),
    }
}

/// `POST /pause?for=DUR`.
fn pause(query: &str, catalog: &Catalog) -> Answer {
    let value = (query.split('&')).find_map(|kv| kv.strip_prefix("for="));
    let length = match value.map(humantime::parse_duration) {
        Some(Ok(d)) if !d.is_zero() && d <= crate::catalog::pause::LONGEST => d,
        Some(Ok(_)) => return Answer::text(400, "for= must be above 0 and at most 1h\n"),
        Some(Err(e)) => return Answer::text(400, &format!("for={}: {e}\n", value.unwrap_or(""))),
        None => return Answer::text(400, "POST /pause?for=DUR, like /pause?for=1.4s\n"),
    };
    if catalog.pauses().inspect(|p| p.pause_for(length)).is_none() {
        return Answer::text(409, "pauses are not installed\n");
    }
    eprintln!(
        "statico: admin: paused for {}",
        humantime::format_duration(length)
    );
    Answer::json(format!("{{\"paused_ms\":{}}}", length.as_millis()))
}

fn ground_truth(catalog: &Catalog, reset: bool) -> Answer {
    match catalog.truth() {
        Some(truth) if reset => Answer::json(truth.reset()),
        Some(truth) => Answer::json(truth.json()),
        None => Answer::text(404, "no routes, so no ground truth\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Result<Option<(Request, usize, usize)>, Answer> {
        parse_head(text.as_bytes())
    }

    #[test]
    fn a_head_gives_method_path_query_token_and_body_length() {
        let text =
            "PUT /pause?for=1s HTTP/1.1\r\nAuthorization: Bearer abc\r\nContent-Length: 3\r\n\r\nxyz";
        let (r, length, at) = request(text).unwrap().unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("PUT", "/pause"));
        assert_eq!(r.query, "for=1s");
        assert_eq!((length, at), (3, text.len() - 3));
        assert!(authorized(&r, Some("abc")));
        assert!(!authorized(&r, Some("abd")));
        assert!(!authorized(&r, Some("ab")));
        assert!(!authorized(&r, Some("abcd")));
        assert!(
            same_token(b"abc", b"abc") && !same_token(b"", b"abc") && !same_token(b"abc\0", b"abc")
        );
        assert!(request("GET / HTTP/1.1\r\n").unwrap().is_none());
        assert_eq!(request("GET\x01 /").err().map(|a| a.status), Some(400));
        for length in ["+5", "-5", "5 5", "0x5", ""] {
            let head = format!("PUT /routes HTTP/1.1\r\nContent-Length: {length}\r\n\r\n");
            assert_eq!(
                request(&head).err().map(|a| a.status),
                Some(400),
                "{length:?}"
            );
        }
    }

    #[test]
    fn pause_wants_a_duration_within_an_hour() {
        let plan = crate::catalog::Plan {
            pausable: true,
            ..crate::catalog::Plan::of_response(crate::catalog::response::ResponseSpec {
                status: 200,
                headers: Vec::new(),
                body: Vec::new(),
            })
        };
        let catalog = Catalog::build(&plan).unwrap();
        for query in ["", "for=soon", "for=2h", "for=0s"] {
            assert_eq!(pause(query, &catalog).status, 400, "{query}");
        }
        assert_eq!(pause("for=1s", &catalog).status, 200);
    }

    #[test]
    fn a_non_loopback_admin_needs_a_token() {
        let any: SocketAddr = "0.0.0.0:9000".parse().unwrap();
        let e = check(Some(any), None).unwrap_err().to_string();
        assert!(
            e.contains("--admin 0.0.0.0:9000") && e.contains("--admin-token"),
            "{e}"
        );
        assert_eq!(
            check(Some("127.0.0.1:9000".parse().unwrap()), None).unwrap(),
            None
        );
    }
}
