//! An openai route's answer ([`super::super::openai`]): drawn in two steps, because it depends on
//! the request's body. When the head arrives the route draws what every route draws (its status
//! mix, fault and delay) and, for a 2xx, [`Asks`]: which API the path names and a seed. Once the
//! body is complete, [`Asking::asked`] reads it and makes the answer, [`Asked`] — for HTTP/1.1 as
//! bytes ([`Asked::write`]), for HTTP/2 and HTTP/3 as a [`StreamAnswer`] ([`Asked::stream_answer`]).
//!
//! A completion is scheduled like any held route answer: its ticket takes its pool's server (the
//! inference server's `max-num-seqs`) for its delay, and a stream, a sequence, keeps it through
//! its tokens; whole or streamed, it is aborted when its client leaves, its server freed at once
//! ([`crate::catalog::stream::Admission::inference`]). An answer refused before any token (a 4xx
//! of the API's own) and the model list are answered at once, without a ticket, as an inference
//! server validates before it schedules.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::super::model::events::Events;
use super::super::model::hold::{Hold, Recorder, TruthKey};
use super::super::openai::{ApiAnswer, Endpoint, OpenAi};
use super::super::response::{with_defaults, write_head, Framing, DATE_LEN, SERVER};
use super::super::sink::Sink;
use super::super::stream::{header_map, StreamAnswer};
use super::{RouteBody, RouteChoice, LONGEST_HOLD};

/// What a 2xx answer of an openai route drew when its request's head arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asks {
    pub endpoint: Endpoint,
    pub seed: u64,
}

/// An openai route's preset and what its answers carry (shared by every worker).
#[derive(Debug)]
pub struct Asking {
    preset: OpenAi,
    /// `Server` and the answer's fields (the route's own replacing the `-H` ones).
    fields: Vec<(String, String)>,
    /// The outcome numbers of its own 400, 404 and 405, in that order from this one.
    refused: u8,
    /// Its outcome `gone`.
    gone: u8,
}

/// An HTTP/2 or HTTP/3 answer that waits for its request's body ([`AwaitsBody::answer`]).
#[derive(Clone, Debug)]
pub struct AwaitsBody {
    asking: Arc<Asking>,
    choice: RouteChoice,
}

impl AwaitsBody {
    /// The answer once the body is `body`, made from `drawn` (see [`Asked::stream_answer`]).
    pub fn answer(self, drawn: StreamAnswer, body: &[u8]) -> StreamAnswer {
        let loads = drawn.admission.as_ref().and_then(|a| a.loads.as_deref());
        let in_flight = loads.map_or(1, |l| l.in_flight_with_new(self.choice.route));
        let asked = (self.asking).asked(self.choice, body, (Instant::now(), in_flight));
        asked.stream_answer(drawn)
    }
}

/// An openai route's answer, made once its request's body was read.
#[derive(Clone, Debug)]
pub struct Asked {
    /// The route's draw, its hold made the answer's: a whole completion's delay is its time to
    /// the last token (a stream's tokens are timed as they fall due).
    pub choice: RouteChoice,
    reply: Arc<ApiAnswer>,
    asking: Arc<Asking>,
    /// Answered at once, without a ticket: refused, or the model list.
    pub at_once: bool,
}

impl Asking {
    pub fn new(preset: OpenAi, fields: Vec<(String, String)>, refused: u8, gone: u8) -> Asking {
        let mut all = Vec::with_capacity(fields.len() + 1);
        if !fields.iter().any(|(n, _)| n.eq_ignore_ascii_case("server")) {
            all.push(("Server".to_string(), SERVER.to_string()));
        }
        all.extend(fields);
        Asking {
            preset,
            fields: all,
            refused,
            gone,
        }
    }

    pub fn preset(&self) -> &OpenAi {
        &self.preset
    }

    /// `choice`'s answer for HTTP/2 or HTTP/3, to be made once its request's body is read.
    pub fn awaiting(self: &Arc<Self>, choice: RouteChoice) -> AwaitsBody {
        AwaitsBody {
            asking: self.clone(),
            choice,
        }
    }

    /// The answer at `now` to `choice`'s request, whose body is `body`, with `in_flight` of the
    /// route's requests in flight (itself included).
    pub fn asked(
        self: &Arc<Self>,
        choice: RouteChoice,
        body: &[u8],
        (now, in_flight): (Instant, u64),
    ) -> Asked {
        let asks = choice.asks.expect("an openai answer draws what it asks");
        let reply = (self.preset).reply(asks.endpoint, body, asks.seed, (now, in_flight));
        self.answered(choice, reply)
    }

    /// `choice`'s answer, if its request is refused as soon as its head is read: a path under the
    /// prefix the API does not have, or has with another method — `method` and `path` named.
    pub fn not_served(
        self: &Arc<Self>,
        choice: RouteChoice,
        method: &[u8],
        path: &[u8],
    ) -> Option<Asked> {
        let asks = choice.asks?;
        let reply = self.preset.not_served(asks.endpoint, method, path)?;
        Some(self.answered(choice, reply))
    }

    /// `choice`'s answer `reply`: its hold made the answer's, its outcome an API refusal's.
    fn answered(self: &Arc<Self>, mut choice: RouteChoice, reply: ApiAnswer) -> Asked {
        let endpoint = choice.asks.map(|a| a.endpoint);
        let at_once = reply.refused || endpoint == Some(Endpoint::Models);
        let key = choice.hold.truth.map(|key| TruthKey {
            outcome: match reply.status {
                _ if !reply.refused => key.outcome,
                400 => self.refused,
                404 => self.refused + 1,
                _ => self.refused + 2,
            },
            ..key
        });
        choice.hold = match at_once {
            true => Hold {
                truth: key,
                ..Hold::default()
            },
            false => Hold {
                delay: (choice.hold.delay + reply.wait).min(LONGEST_HOLD),
                // A drawn fault takes the answer's place: its tokens are never given out.
                tokens: match choice.hold.fault {
                    Some(_) => 0,
                    None => reply.tokens.1,
                },
                ..choice.hold
            },
        };
        Asked {
            choice,
            reply: Arc::new(reply),
            asking: self.clone(),
            at_once,
        }
    }
}

impl Asked {
    /// Whether the answer is a stream of tokens.
    pub fn streamed(&self) -> bool {
        self.reply.stream.is_some()
    }

    /// Appends the HTTP/1.1 answer to `out` (its events, for a stream, made later, timed as
    /// `recorder` records).
    pub fn write(
        &self,
        framing: Framing,
        head_only: bool,
        date: &[u8; DATE_LEN],
        out: &mut impl Sink,
        recorder: Option<&Recorder>,
    ) -> RouteBody {
        self.record_tokens(recorder);
        let fields = self.fields();
        let length = (!self.streamed()).then_some(self.reply.body.len());
        write_head(out, self.reply.status, fields.iter(), length, framing, date);
        if head_only {
            return RouteBody::default();
        }
        let chunked = matches!(framing, Framing::KeepAlive | Framing::Close);
        if let Some(events) = self.events(chunked, recorder) {
            return RouteBody {
                body_at: None,
                events: Some(Box::new(events)),
            };
        }
        let body_at = out.unsent();
        out.extend_from_slice(&self.reply.body);
        RouteBody {
            body_at: Some(body_at),
            events: None,
        }
    }

    /// The answer as HTTP/2 and HTTP/3 send it, made from `drawn` (the answer chosen when the head
    /// arrived: its `Date`, recorder and admission).
    pub fn stream_answer(&self, drawn: StreamAnswer) -> StreamAnswer {
        let fields = self.fields();
        let mut headers = header_map(fields.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        if let Some(date) = drawn.headers.get(http::header::DATE) {
            headers.insert(http::header::DATE, date.clone());
        }
        if !self.streamed() {
            headers.insert(http::header::CONTENT_LENGTH, self.reply.body.len().into());
        }
        self.record_tokens(drawn.recorder.as_ref());
        let events = self.events(false, drawn.recorder.as_ref()).map(Box::new);
        StreamAnswer {
            status: http::StatusCode::from_u16(self.reply.status).unwrap_or(http::StatusCode::OK),
            headers,
            body: Bytes::from(self.reply.body.clone()),
            hold: self.choice.hold,
            admission: drawn.admission.filter(|_| !self.at_once),
            events,
            awaits: None,
            ..drawn
        }
    }

    /// Records the prompt's tokens (a counted answer's: not a copy written for `-v`'s dump); a
    /// whole answer's own are counted by its ticket when it is given out ([`Hold::tokens`]).
    fn record_tokens(&self, recorder: Option<&Recorder>) {
        let (prompt, _) = self.reply.tokens;
        if let (Some(recorder), Some(key)) = (recorder, self.choice.hold.truth) {
            if prompt > 0 {
                recorder.record_tokens(key, prompt, 0);
            }
        }
    }

    /// The answer's fields: the route's, then its `Content-Type` (and a stream's `Cache-Control`)
    /// unless the route gives them.
    fn fields(&self) -> Vec<(String, String)> {
        let defaults: &[(&str, &str)] = match self.streamed() {
            true => &[
                ("Content-Type", "text/event-stream"),
                ("Cache-Control", "no-cache"),
            ],
            false => &[("Content-Type", "application/json")],
        };
        with_defaults(&self.asking.fields, defaults)
    }

    /// A stream's events (as HTTP/1.1 chunks with `chunked`), their timing recorded by `recorder`.
    fn events(&self, chunked: bool, recorder: Option<&Recorder>) -> Option<Events> {
        let (tokens, draw) = self.reply.stream.as_ref()?;
        let gone = self.asking.gone;
        let truth = (recorder.cloned().zip(self.choice.hold.truth)).map(|(r, key)| (r, key, gone));
        Some(Events::new(
            tokens.clone(),
            *draw,
            chunked,
            self.choice.hold.fault,
            truth,
        ))
    }
}
