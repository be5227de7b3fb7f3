//! `--echo-query`: Fortio-compatible answers asked for in the request's query — `?status=503:10`,
//! `?delay=5ms:50,100ms:1`, `?size=1024`, `?close=true`, `?header=X-A:b` ([`route::fortio`] parses
//! them and makes Fortio's draws) — so that load tests written for Fortio's echo server run against
//! statico unchanged.
//!
//! A request whose query names one of these gets an answer built for it: its head formatted now (the
//! one answer statico formats per request), its body a slice of one buffer generated at start-up,
//! `--max-size` long, so nothing is allocated in proportion to the query. A value past
//! `--max-delay` or `--max-size`, or one that does not parse, gets a 400 saying why. Unlike Fortio,
//! the request body is not echoed back: without `size` the body is empty.

use bytes::Bytes;

use super::model::hold::Hold;
use super::response::{with_own_fields, write_head, Framing, DATE_LEN, SERVER};
use super::route::fortio::{self, Limits};
use super::route::Draw;
use super::sink::Sink;
use super::stream::StreamAnswer;

/// The echo answers' shared parts.
#[derive(Clone, Debug)]
pub struct Echo {
    limits: Limits,
    /// `--max-size` bytes, sliced for `size`.
    body: Bytes,
    /// `Server` and the user's `-H` fields (a query's `header=` replaces same-named ones, see
    /// [`with_own_fields`]).
    fields: Vec<(String, String)>,
}

/// An answer drawn for one request's query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EchoChoice {
    status: u16,
    size: usize,
    /// Close the connection after the answer (`close`).
    pub close: bool,
    fields: Vec<(String, String)>,
    /// Why the query was refused (the 400's body).
    error: Option<String>,
    pub hold: Hold,
}

impl Echo {
    /// `fields` are the default answer's (`-H`); `limits` are `--max-delay` and `--max-size`.
    pub fn new(limits: Limits, fields: &[(String, String)]) -> Echo {
        let mut all = Vec::new();
        if !fields.iter().any(|(n, _)| n.eq_ignore_ascii_case("server")) {
            all.push(("Server".to_string(), SERVER.to_string()));
        }
        all.extend(fields.iter().cloned());
        Echo {
            body: super::route::generated(limits.max_size as usize),
            limits,
            fields: all,
        }
    }

    /// The answer `target`'s query asks for, drawn now; `None` when it asks for nothing.
    pub fn choose(&self, target: &[u8], draw: &mut Draw) -> Option<EchoChoice> {
        let query = &target[target.iter().position(|&b| b == b'?')? + 1..];
        let overrides = match fortio::parse_query(query, &self.limits) {
            Ok(Some(o)) => o,
            Ok(None) => return None,
            Err(why) => return Some(refused(why)),
        };
        if let Some(why) = overrides
            .headers
            .iter()
            .find_map(|(n, v)| refused_field(n, v))
        {
            return Some(refused(why));
        }
        let status = overrides.draw_status(draw, 200);
        let delay = overrides.draw_delay(draw).min(super::route::LONGEST_HOLD);
        let size = overrides.draw_size(draw).unwrap_or(0) as usize;
        let no_body = matches!(status, 100..=199 | 204 | 304);
        Some(EchoChoice {
            status,
            size: if no_body { 0 } else { size },
            close: overrides.draw_close(draw),
            fields: overrides.headers,
            error: None,
            hold: Hold {
                delay,
                ..Hold::default()
            },
        })
    }

    /// Appends the HTTP/1.1 answer; returns where its body starts.
    pub fn write(
        &self,
        c: &EchoChoice,
        framing: Framing,
        head_only: bool,
        date: &[u8; DATE_LEN],
        out: &mut impl Sink,
    ) -> Option<usize> {
        let framing = if c.close { Framing::Close } else { framing };
        let body = self.body_of(c);
        let fields = with_own_fields(&self.fields, &c.fields);
        write_head(out, c.status, fields, Some(body.len()), framing, date);
        if head_only || body.is_empty() {
            return None;
        }
        let body_at = out.unsent();
        out.share(&body, None);
        Some(body_at)
    }

    /// The answer as HTTP/2 and HTTP/3 send it (`close` does not apply to a stream).
    pub fn stream_answer(&self, c: &EchoChoice, date: &[u8; DATE_LEN]) -> StreamAnswer {
        let fields = with_own_fields(&self.fields, &c.fields);
        let mut headers = super::stream::header_map(fields.map(|(n, v)| (n.as_str(), v.as_str())));
        let body = self.body_of(c);
        headers.insert(http::header::CONTENT_LENGTH, body.len().into());
        let mut answer = StreamAnswer {
            status: http::StatusCode::from_u16(c.status).unwrap_or(http::StatusCode::OK),
            headers,
            body,
            hold: c.hold,
            recorder: None,
            admission: None,
            pauses: None,
            events: None,
            awaits: None,
            grpc: None,
            trailers: None,
        };
        answer.set_date(date);
        answer
    }

    fn body_of(&self, c: &EchoChoice) -> Bytes {
        match &c.error {
            Some(why) => Bytes::from(format!("{why}\n")),
            None => self.body.slice(..c.size.min(self.body.len())),
        }
    }
}

/// Why a header a query asks for cannot be sent: one statico sets itself (`Content-Length`,
/// `Transfer-Encoding`, `Connection`, `Date`: they would contradict the framing), or one that is not
/// a valid field.
fn refused_field(name: &str, value: &str) -> Option<String> {
    super::response::validate_field(name, value)
        .err()
        .map(|e| format!("header={name}:{value}: {e}"))
}

/// A query statico will not answer as asked: 400, saying why.
fn refused(why: String) -> EchoChoice {
    EchoChoice {
        status: 400,
        size: 0,
        close: false,
        fields: vec![("Content-Type".into(), "text/plain".into())],
        error: Some(why),
        hold: Hold::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn echo(fields: &[(String, String)]) -> Echo {
        let limits = Limits {
            max_delay: std::time::Duration::from_secs(10),
            max_size: 1 << 20,
        };
        Echo::new(limits, fields)
    }

    fn http1(target: &str) -> Option<(EchoChoice, String)> {
        http1_with(target, &[])
    }

    fn http1_with(target: &str, fields: &[(String, String)]) -> Option<(EchoChoice, String)> {
        let e = echo(fields);
        let c = e.choose(target.as_bytes(), &mut Draw::seed_from_u64(1))?;
        let mut out = Vec::new();
        e.write(&c, Framing::KeepAlive, false, &[b'D'; DATE_LEN], &mut out);
        Some((c, String::from_utf8(out).unwrap()))
    }

    #[test]
    fn a_query_without_fortio_arguments_asks_for_nothing() {
        assert!(http1("/echo").is_none());
        assert!(http1("/echo?x=1").is_none());
    }

    #[test]
    fn status_size_header_and_close_are_answered() {
        let (c, text) = http1("/echo?status=503&size=1000&header=X-A:b&close=true").unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nX-A: b\r\n") && text.contains("\r\nConnection: close\r\n"));
        assert!(text.contains("\r\nContent-Length: 1000\r\n"));
        assert_eq!(text.split("\r\n\r\n").nth(1).unwrap().len(), 1000);
        assert!(c.close);
    }

    #[test]
    fn a_query_header_replaces_the_same_named_default_field() {
        let defaults = [("Content-Type".to_string(), "text/plain".to_string())];
        let (c, text) = http1_with("/echo?header=content-type:text/csv", &defaults).unwrap();
        assert!(text.contains("\r\ncontent-type: text/csv\r\n"), "{text}");
        assert!(!text.contains("text/plain"), "{text}");
        let stream = echo(&defaults).stream_answer(&c, &[b'D'; DATE_LEN]);
        let types: Vec<_> = stream.headers.get_all("content-type").iter().collect();
        assert_eq!(types, ["text/csv"]);
    }

    #[test]
    fn a_delay_is_held_and_limits_are_a_400_saying_which() {
        let (c, _) = http1("/echo?delay=250ms").unwrap();
        assert_eq!(c.hold.delay, std::time::Duration::from_millis(250));
        let (_, text) = http1("/echo?delay=20s").unwrap();
        assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
        assert!(text.ends_with("--max-delay 10s\n"), "{text}");
        let (_, text) = http1("/echo?size=2m").unwrap();
        assert!(text.contains("--max-size"), "{text}");
    }
}
