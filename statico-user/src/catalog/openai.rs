//! The OpenAI-compatible backend (`PREFIX/* openai=on`): what an inference server answers, so that
//! AI gateways and LLM benchmark clients (the `openai` SDK, aiperf, guidellm, `vllm bench serve`)
//! can be pointed at statico instead of a GPU.
//!
//! I/O-free, like the rest of the catalog: [`OpenAi::endpoint`] tells from a request's method and
//! path which of `PREFIX/chat/completions`, `PREFIX/completions` and `PREFIX/models` it asks for;
//! [`OpenAi::reply`] reads the request's JSON once its body is complete and draws the answer from a
//! seed — how many tokens, the waits before each — as [`ApiAnswer`]: a whole JSON answer (an error, the
//! model list, a non-streamed completion) or the tokens as a stream of server-sent events, each
//! made when it falls due by [`Tokens`], the stream's [`Render`]. The route ([`super::route`]) puts
//! that on the wire through the same delivery machine as every answer.
//!
//! Prompt tokens are estimated without a tokenizer: token ids count one each, text ⌈bytes / 4⌉
//! (OpenAI's rule of thumb). Each output token is one lowercase word and a space, so a client that
//! counts words (or a word-level tokenizer) agrees with `usage`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::feed::chunk_with;
use super::model::dist::Dist;
use super::model::events::{Count, Events, Render, StreamDraw, MAX_EVENTS};
use super::route::spec::OpenAiSpec;

/// The model `/models` lists, and every answer names, when the route serves no `model=`.
pub const ANY_MODEL: &str = "statico";

/// Output tokens when the request gives no `max_tokens` (OpenAI's legacy completions default).
const DEFAULT_MAX_TOKENS: u64 = 16;

/// The most of a request's body kept to be read ([`keep_body`]); a longer one is refused.
pub const MAX_BODY: usize = 4 << 20;

/// Appends `more` of a request's body to `body`, keeping at most one byte past [`MAX_BODY`] (a
/// body that long is refused whole, so no more is needed to tell).
pub fn keep_body(body: &mut Vec<u8>, more: &[u8]) {
    let room = (MAX_BODY + 1).saturating_sub(body.len());
    body.extend_from_slice(&more[..more.len().min(room)]);
}

/// The words output tokens are made of.
const WORDS: [&str; 16] = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "far",
    "into", "green", "hills", "today",
];

/// One openai route's preset, built from its keys at start-up (shared by every worker).
#[derive(Debug)]
pub struct OpenAi {
    /// The route's path without its `/*`: `/v1`.
    prefix: String,
    /// The served models; empty: any name is accepted.
    models: Vec<String>,
    tokens: Option<Count>,
    first: Option<Dist>,
    gap: Option<Dist>,
    prefill: Duration,
    context: Option<u64>,
    /// When the preset was made (the models' `created`), in Unix seconds and on the monotonic
    /// clock: an answer's `created` is counted from it on the clock the answer is given by.
    started: (u64, Instant),
}

/// Which API a request under the prefix asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
    Models,
    /// A path the API does not have.
    Unknown,
    /// A path it has, with another method.
    WrongMethod,
}

/// A request's answer, drawn (see the module doc).
#[derive(Debug)]
pub struct ApiAnswer {
    pub status: u16,
    /// The whole JSON body; empty for a stream.
    pub body: Vec<u8>,
    /// A streamed answer's tokens, and their draw.
    pub stream: Option<(Arc<Tokens>, StreamDraw)>,
    /// How much longer than the route's `delay=` the answer is held before its head: a whole
    /// answer's time to its first token and every gap.
    pub wait: Duration,
    /// Refused before any token (a 4xx of the API's own, not one of the route's statuses).
    pub refused: bool,
    /// The prompt's tokens, and the tokens of a whole answer (a stream's go as its events).
    pub tokens: (u64, u64),
}

/// What a request asked for, read from its JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ask {
    chat: bool,
    model: String,
    prompt: u64,
    max_tokens: u64,
    stream: bool,
    usage: bool,
    ignore_eos: bool,
}

/// An error in OpenAI's shape.
#[derive(Debug, PartialEq, Eq)]
struct ApiError {
    status: u16,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

impl OpenAi {
    /// The preset of a route on `prefix/*` with these keys.
    pub fn new(prefix: &str, spec: &OpenAiSpec) -> OpenAi {
        OpenAi {
            prefix: prefix.trim_end_matches('/').to_owned(),
            models: spec.models.clone(),
            tokens: spec.tokens.clone(),
            first: spec.first.clone(),
            gap: spec.gap.clone(),
            prefill: spec.prefill.unwrap_or_default(),
            context: spec.context,
            started: (unix_now(), Instant::now()),
        }
    }

    /// The API a request for `path` (without its query) with `method` asks for.
    pub fn endpoint(&self, method: &[u8], path: &[u8]) -> Endpoint {
        let rest = path.strip_prefix(self.prefix.as_bytes()).unwrap_or(path);
        let (endpoint, methods): (_, &[&[u8]]) = match rest {
            b"/chat/completions" => (Endpoint::Chat, &[b"POST"]),
            b"/completions" => (Endpoint::Completions, &[b"POST"]),
            b"/models" => (Endpoint::Models, &[b"GET", b"HEAD"]),
            _ => return Endpoint::Unknown,
        };
        match methods.contains(&method) {
            true => endpoint,
            false => Endpoint::WrongMethod,
        }
    }

    /// The answer at `now` to a request for `endpoint` whose body is `body`, drawn from `seed`
    /// with `in_flight` of the route's requests in flight, itself included (a whole answer's
    /// waits are all drawn now; a stream's each when it falls due).
    pub fn reply(
        &self,
        endpoint: Endpoint,
        body: &[u8],
        seed: u64,
        (now, in_flight): (Instant, u64),
    ) -> ApiAnswer {
        let ask = match endpoint {
            Endpoint::Models => return whole(200, self.model_list()),
            Endpoint::Unknown | Endpoint::WrongMethod => {
                return refused(not_served(endpoint, &self.prefix, None))
            }
            Endpoint::Chat | Endpoint::Completions => {
                match self.ask(endpoint == Endpoint::Chat, body) {
                    Ok(ask) => ask,
                    Err(e) => return refused(e),
                }
            }
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let count = self.count(&ask, &mut rng);
        let id = format!(
            "{}-{:016x}",
            if ask.chat { "chatcmpl" } else { "cmpl" },
            seed
        );
        let created = self.started.0 + now.saturating_duration_since(self.started.1).as_secs();
        let tokens = Arc::new(Tokens {
            tail: chunk_tail(&id, created, &ask),
            id,
            created,
            first: self.first.clone(),
            prefill: self
                .prefill
                .saturating_mul(ask.prompt.min(u32::MAX as u64) as u32),
            gap: self.gap.clone(),
            finish: if u64::from(count) == ask.max_tokens {
                "length"
            } else {
                "stop"
            },
            count,
            ask,
        });
        let draw = StreamDraw {
            events: count,
            from: 0,
            seed: rng.next_u64(),
            cut: None,
        };
        if tokens.ask.stream {
            return ApiAnswer {
                tokens: (tokens.ask.prompt, 0),
                stream: Some((tokens, draw)),
                ..whole(200, Vec::new())
            };
        }
        let wait = Events::new(tokens.clone(), draw, false, None, None).total_wait(in_flight);
        ApiAnswer {
            wait,
            tokens: (tokens.ask.prompt, u64::from(count)),
            ..whole(200, tokens.completion())
        }
    }

    /// The refusal of a request for a path under the prefix the API does not have (404), or has
    /// with another method (405), naming its `method` and `path` as OpenAI's API does; `None` for
    /// an endpoint it serves.
    pub fn not_served(&self, endpoint: Endpoint, method: &[u8], path: &[u8]) -> Option<ApiAnswer> {
        matches!(endpoint, Endpoint::Unknown | Endpoint::WrongMethod)
            .then(|| refused(not_served(endpoint, &self.prefix, Some((method, path)))))
    }

    /// The error body of a drawn non-2xx `status` (the route's status mix).
    pub fn status_body(status: u16) -> Vec<u8> {
        let (message, kind, code) = match status {
            429 => (
                "Rate limit reached for requests",
                "requests",
                Some("rate_limit_exceeded"),
            ),
            503 => (
                "The server is overloaded or not ready yet.",
                "server_error",
                Some("service_unavailable"),
            ),
            500 => (
                "The server had an error while processing your request.",
                "server_error",
                None,
            ),
            _ => ("The server could not answer.", "server_error", None),
        };
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code,
        }
        .body()
    }

    /// `GET /models`.
    fn model_list(&self) -> Vec<u8> {
        let names = match self.models.is_empty() {
            true => vec![ANY_MODEL.to_owned()],
            false => self.models.clone(),
        };
        let data: Vec<Value> = names
            .iter()
            .map(|id| json!({"id": id, "object": "model", "created": self.started.0, "owned_by": "statico"}))
            .collect();
        json!({"object": "list", "data": data})
            .to_string()
            .into_bytes()
    }

    /// What a completion request's JSON asks for, or why it is refused.
    fn ask(&self, chat: bool, body: &[u8]) -> Result<Ask, ApiError> {
        if body.len() > MAX_BODY {
            return Err(invalid(
                format!("The request body is over {} MiB.", MAX_BODY >> 20),
                None,
                None,
            ));
        }
        let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(body) else {
            return Err(invalid(
                "The request body is not a JSON object.".into(),
                None,
                None,
            ));
        };
        let model = self.model(request.get("model"))?;
        let (field, prompt) = match chat {
            true => ("messages", messages_tokens(request.get("messages"))?),
            false => ("prompt", prompt_tokens(request.get("prompt"))?),
        };
        let max_tokens = max_tokens(&request)?;
        if request
            .get("n")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 1)
        {
            return Err(invalid(
                "n > 1 is not supported: statico answers one choice per request.".into(),
                Some("n"),
                None,
            ));
        }
        let requested = prompt.saturating_add(max_tokens);
        if let Some(context) = self.context.filter(|c| requested > *c) {
            return Err(invalid(
                format!("This model's maximum context length is {context} tokens. However, you requested {requested} tokens ({prompt} in the {field}, {max_tokens} in the completion). Please reduce the length of the {field} or completion."),
                Some(field),
                Some("context_length_exceeded"),
            ));
        }
        if max_tokens > u64::from(MAX_EVENTS) {
            return Err(invalid(
                format!("max_tokens is {max_tokens}: statico gives at most {MAX_EVENTS} tokens an answer."),
                Some("max_tokens"),
                None,
            ));
        }
        let flag = |name: &str| request.get(name).and_then(Value::as_bool) == Some(true);
        let usage = (request.get("stream_options"))
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
        Ok(Ask {
            chat,
            model,
            prompt,
            max_tokens,
            stream: flag("stream"),
            usage,
            ignore_eos: flag("ignore_eos"),
        })
    }

    /// The model a request names: one served, or any when the route names none.
    fn model(&self, given: Option<&Value>) -> Result<String, ApiError> {
        let first = self.models.first().map_or(ANY_MODEL, String::as_str);
        let name = match given {
            None | Some(Value::Null) => return Ok(first.to_owned()),
            Some(Value::String(name)) => name,
            Some(_) => {
                return Err(invalid(
                    "model must be a string.".into(),
                    Some("model"),
                    None,
                ))
            }
        };
        if self.models.is_empty() || self.models.contains(name) {
            return Ok(name.clone());
        }
        Err(ApiError {
            status: 404,
            message: format!("The model `{name}` does not exist."),
            kind: "invalid_request_error",
            param: Some("model"),
            code: Some("model_not_found"),
        })
    }

    /// How many tokens an answer has: the route's draw, never more than `max_tokens` — exactly
    /// that many with `ignore_eos` or without `tokens=`.
    fn count(&self, ask: &Ask, rng: &mut SmallRng) -> u32 {
        let most = ask.max_tokens.min(u64::from(MAX_EVENTS)) as u32;
        match (&self.tokens, ask.ignore_eos) {
            (Some(tokens), false) => tokens.sample(rng).min(most),
            _ => most,
        }
    }
}

/// One answer's tokens: made one at a time when each falls due ([`Render`]), or whole.
#[derive(Debug)]
pub struct Tokens {
    id: String,
    created: u64,
    /// What every token's chunk ends with ([`chunk_tail`]).
    tail: String,
    first: Option<Dist>,
    /// `prefill=` × the prompt's tokens.
    prefill: Duration,
    gap: Option<Dist>,
    finish: &'static str,
    count: u32,
    ask: Ask,
}

impl Tokens {
    /// A chunk's JSON (`data:` of one event) carrying token `i`'s text, or the usage chunk.
    fn chunk_json(&self, i: u32, usage: bool) -> Value {
        let finish = (i + 1 == self.count).then_some(self.finish);
        let choices = match (usage, self.ask.chat) {
            (true, _) => json!([]),
            (false, true) => {
                let delta = match i {
                    0 => json!({"role": "assistant", "content": word(i)}),
                    _ => json!({"content": word(i)}),
                };
                json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}])
            }
            (false, false) => {
                json!([{"index": 0, "text": word(i), "logprobs": null, "finish_reason": finish}])
            }
        };
        let object = if self.ask.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut chunk = json!({"id": self.id, "object": object, "created": self.created,
            "model": self.ask.model, "choices": choices});
        if usage {
            chunk["usage"] = self.usage();
        }
        chunk
    }

    fn usage(&self) -> Value {
        let (prompt, completion) = (self.ask.prompt, u64::from(self.count));
        json!({"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion})
    }

    /// The whole (non-streamed) answer.
    fn completion(&self) -> Vec<u8> {
        let text: String = (0..self.count).map(word).collect();
        let choice = match self.ask.chat {
            true => json!({"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": null, "finish_reason": self.finish}),
            false => json!({"index": 0, "text": text, "logprobs": null,
                "finish_reason": self.finish}),
        };
        let object = if self.ask.chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.ask.model,
            "choices": [choice], "usage": self.usage()})
        .to_string()
        .into_bytes()
    }

    /// Token `i`'s chunk as [`Tokens::chunk_json`] would print it (its keys in order), written
    /// straight into `out`: the token's choice, then the [`chunk_tail`] every chunk shares.
    fn write_chunk(&self, i: u32, out: &mut Vec<u8>) {
        let word = WORDS[i as usize % WORDS.len()].as_bytes();
        let finish = |out: &mut Vec<u8>| match i + 1 == self.count {
            true => {
                out.push(b'"');
                out.extend_from_slice(self.finish.as_bytes());
                out.push(b'"');
            }
            false => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(b"{\"choices\":[{");
        if self.ask.chat {
            out.extend_from_slice(b"\"delta\":{\"content\":\"");
            out.extend_from_slice(word);
            out.extend_from_slice(b" \"");
            if i == 0 {
                out.extend_from_slice(b",\"role\":\"assistant\"");
            }
            out.extend_from_slice(b"},\"finish_reason\":");
            finish(out);
            out.extend_from_slice(b",\"index\":0,\"logprobs\":null}]");
        } else {
            out.extend_from_slice(b"\"finish_reason\":");
            finish(out);
            out.extend_from_slice(b",\"index\":0,\"logprobs\":null,\"text\":\"");
            out.extend_from_slice(word);
            out.extend_from_slice(b" \"}]");
        }
        out.extend_from_slice(self.tail.as_bytes());
    }

    /// Token `i`'s event: its chunk, then (after the last) the usage chunk if asked and `[DONE]`.
    fn event_bytes(&self, i: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        self.write_chunk(i, out);
        out.extend_from_slice(b"\n\n");
        if i + 1 == self.count {
            if self.ask.usage {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(self.chunk_json(i, true).to_string().as_bytes());
                out.extend_from_slice(b"\n\n");
            }
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
    }
}

/// The end every token's chunk shares, after its `choices` (the keys in the order serde_json
/// prints them): `,"created":…,"id":…,"model":…,"object":…}`.
fn chunk_tail(id: &str, created: u64, ask: &Ask) -> String {
    let object = if ask.chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let text = |s: &str| Value::from(s).to_string();
    format!(
        ",\"created\":{created},\"id\":{},\"model\":{},\"object\":\"{object}\"}}",
        text(id),
        text(&ask.model)
    )
}

impl Render for Tokens {
    fn event(&self, i: u32, chunked: bool, last: bool, out: &mut Vec<u8>) {
        match chunked {
            true => chunk_with(out, last, |out| self.event_bytes(i, out)),
            false => self.event_bytes(i, out),
        }
    }

    fn wait(&self, first: bool, in_flight: u64, rng: &mut SmallRng) -> Duration {
        let sample = |d: &Option<Dist>, rng: &mut SmallRng| {
            d.as_ref()
                .map_or(Duration::ZERO, |d| d.sample_at(rng, in_flight))
        };
        match first {
            true => sample(&self.first, rng).saturating_add(self.prefill),
            false => sample(&self.gap, rng),
        }
    }
}

/// Token `i`'s text.
fn word(i: u32) -> String {
    format!("{} ", WORDS[i as usize % WORDS.len()])
}

/// A whole answer with this status and body.
fn whole(status: u16, body: Vec<u8>) -> ApiAnswer {
    ApiAnswer {
        status,
        body,
        stream: None,
        wait: Duration::ZERO,
        refused: false,
        tokens: (0, 0),
    }
}

fn refused(e: ApiError) -> ApiAnswer {
    ApiAnswer {
        refused: true,
        ..whole(e.status, e.body())
    }
}

/// 404 for a path the API does not have (code `unknown_url`, OpenAI's), 405 for one it has with
/// another method; the message names the request's method and path (`line`) when known, as
/// OpenAI's does (`Unknown request URL: POST /v1/foo. …`), and a 404 the paths served.
fn not_served(endpoint: Endpoint, prefix: &str, line: Option<(&[u8], &[u8])>) -> ApiError {
    let line = line.map(|(method, path)| {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        format!("{} {}", text(method), text(path))
    });
    let (status, message, code) = match (endpoint, line) {
        (Endpoint::WrongMethod, Some(line)) => (405, format!("Invalid method for URL ({line})."), None),
        (Endpoint::WrongMethod, None) => (405, "Invalid method for URL.".to_owned(), None),
        (_, line) => (
            404,
            format!(
                "Unknown request URL{}. Please check the URL for typos: the paths served are {prefix}/chat/completions, {prefix}/completions and {prefix}/models.",
                line.map(|l| format!(": {l}")).unwrap_or_default()
            ),
            Some("unknown_url"),
        ),
    };
    ApiError {
        status,
        message,
        kind: "invalid_request_error",
        param: None,
        code,
    }
}

fn invalid(message: String, param: Option<&'static str>, code: Option<&'static str>) -> ApiError {
    ApiError {
        status: 400,
        message,
        kind: "invalid_request_error",
        param,
        code,
    }
}

impl ApiError {
    fn body(&self) -> Vec<u8> {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param,
            "code": self.code}})
        .to_string()
        .into_bytes()
    }
}

/// Text's tokens: ⌈bytes / 4⌉.
fn text_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// A chat request's prompt tokens: its messages' contents (a string, or parts whose `text` counts).
fn messages_tokens(messages: Option<&Value>) -> Result<u64, ApiError> {
    let Some(Value::Array(messages)) =
        messages.filter(|m| m.as_array().is_some_and(|a| !a.is_empty()))
    else {
        return Err(invalid(
            "messages must be a non-empty array.".into(),
            Some("messages"),
            None,
        ));
    };
    let content = |m: &Value| match m.get("content") {
        Some(Value::String(s)) => text_tokens(s),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(text_tokens)
            .sum(),
        _ => 0,
    };
    Ok(messages.iter().map(content).sum::<u64>().max(1))
}

/// A completions request's prompt tokens: a string, one string in an array, or token ids.
fn prompt_tokens(prompt: Option<&Value>) -> Result<u64, ApiError> {
    let bad = |message: &str| Err(invalid(message.into(), Some("prompt"), None));
    let tokens = match prompt {
        Some(Value::String(s)) => text_tokens(s),
        Some(Value::Array(items)) => match &items[..] {
            [Value::String(s)] => text_tokens(s),
            ids if !ids.is_empty() && ids.iter().all(Value::is_u64) => ids.len() as u64,
            [Value::Array(ids)] if ids.iter().all(Value::is_u64) => ids.len() as u64,
            _ => {
                return bad("prompt must be a string, one string in an array, or token ids (statico answers one prompt per request).")
            }
        },
        _ => return bad("prompt must be given: a string or token ids."),
    };
    Ok(tokens.max(1))
}

/// `max_completion_tokens` or `max_tokens`: a whole number of at least 1 (16 if neither).
fn max_tokens(request: &serde_json::Map<String, Value>) -> Result<u64, ApiError> {
    let given = (request.get("max_completion_tokens"))
        .filter(|v| !v.is_null())
        .or_else(|| request.get("max_tokens").filter(|v| !v.is_null()));
    match given {
        None => Ok(DEFAULT_MAX_TOKENS),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(n),
            _ => Err(invalid(
                format!("max_tokens must be a whole number of at least 1, not {v}."),
                Some("max_tokens"),
                None,
            )),
        },
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset(keys: &str) -> OpenAi {
        let spec =
            super::super::route::spec::parse_spec(&format!("/v1/* openai=on {keys}")).unwrap();
        OpenAi::new("/v1", spec.openai.as_ref().unwrap())
    }

    fn json_of(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    /// Every event of a stream, as the `data:` payloads a client reads.
    fn streamed(reply: &ApiAnswer) -> Vec<String> {
        let (tokens, draw) = reply.stream.as_ref().unwrap();
        let mut out = Vec::new();
        for i in 0..draw.events {
            tokens.event(i, false, i + 1 == draw.events, &mut out);
        }
        let text = String::from_utf8(out).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
            .collect()
    }

    #[test]
    fn endpoints_are_told_by_path_and_method() {
        let p = preset("");
        assert_eq!(p.endpoint(b"POST", b"/v1/chat/completions"), Endpoint::Chat);
        assert_eq!(
            p.endpoint(b"POST", b"/v1/completions"),
            Endpoint::Completions
        );
        assert_eq!(p.endpoint(b"GET", b"/v1/models"), Endpoint::Models);
        assert_eq!(
            p.endpoint(b"GET", b"/v1/chat/completions"),
            Endpoint::WrongMethod
        );
        assert_eq!(p.endpoint(b"POST", b"/v1/embeddings"), Endpoint::Unknown);
        let r = p
            .not_served(Endpoint::Unknown, b"POST", b"/v1/embeddings")
            .unwrap();
        assert_eq!((r.status, r.refused), (404, true));
        let e = &json_of(&r.body)["error"];
        assert_eq!(
            (&e["type"], &e["code"]),
            (&json!("invalid_request_error"), &json!("unknown_url"))
        );
        let message = e["message"].as_str().unwrap();
        assert!(
            message.starts_with("Unknown request URL: POST /v1/embeddings. "),
            "{message}"
        );
        assert!(message.contains("/v1/chat/completions"), "{message}");
        let r = p
            .not_served(Endpoint::WrongMethod, b"GET", b"/v1/completions")
            .unwrap();
        let e = &json_of(&r.body)["error"];
        assert_eq!(
            (r.status, &e["message"]),
            (405, &json!("Invalid method for URL (GET /v1/completions)."))
        );
        assert!(p
            .not_served(Endpoint::Chat, b"POST", b"/v1/chat/completions")
            .is_none());
        assert_eq!(
            p.reply(Endpoint::WrongMethod, b"", 1, (Instant::now(), 1))
                .status,
            405
        );
    }

    #[test]
    fn a_streamed_chat_is_one_chunk_per_token_then_usage_and_done() {
        let p = preset("model=llama tokens=3 first=100ms gap=10ms prefill=1ms");
        let body = br#"{"model":"llama","messages":[{"role":"user","content":"12345678"}],
            "stream":true,"max_tokens":10,"stream_options":{"include_usage":true}}"#;
        let r = p.reply(Endpoint::Chat, body, 7, (Instant::now(), 1));
        assert_eq!((r.status, r.refused, r.body.len()), (200, false, 0));
        // The first token waits first= + prefill × 2 prompt tokens; two gaps follow.
        let (tokens, draw) = r.stream.as_ref().unwrap();
        let waits = Events::new(tokens.clone(), *draw, false, None, None).total_wait(1);
        assert_eq!(waits, Duration::from_millis(100 + 2 + 20));
        let events = streamed(&r);
        assert_eq!(events.len(), 5, "{events:?}");
        let first = json_of(events[0].as_bytes());
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(first["model"], "llama");
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["choices"][0]["finish_reason"], Value::Null);
        let second = json_of(events[1].as_bytes());
        assert!(second["choices"][0]["delta"].get("role").is_none());
        assert_eq!(
            json_of(events[2].as_bytes())["choices"][0]["finish_reason"],
            "stop"
        );
        let usage = json_of(events[3].as_bytes());
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(
            usage["usage"],
            json!({"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5})
        );
        assert_eq!(events[4], "[DONE]");
    }

    #[test]
    fn a_tokens_chunk_written_directly_is_its_json_printed() {
        let p = preset("tokens=3");
        for (endpoint, body) in [
            (
                Endpoint::Chat,
                r#"{"model":"m\"x\u00e9","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":10}"#,
            ),
            (
                Endpoint::Chat,
                r#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":3}"#,
            ),
            (
                Endpoint::Completions,
                r#"{"model":"c","prompt":"hi","stream":true,"max_tokens":10}"#,
            ),
        ] {
            let r = p.reply(endpoint, body.as_bytes(), 9, (Instant::now(), 1));
            let (tokens, _) = r.stream.as_ref().unwrap();
            for i in 0..3 {
                let mut out = Vec::new();
                tokens.write_chunk(i, &mut out);
                let printed = tokens.chunk_json(i, false).to_string();
                assert_eq!(String::from_utf8(out).unwrap(), printed, "{body} token {i}");
            }
        }
    }

    #[test]
    fn a_whole_completion_waits_for_every_token_and_counts_words() {
        let p = preset("first=50ms gap=5ms");
        let r = p.reply(
            Endpoint::Completions,
            br#"{"model":"m","prompt":[1,2,3],"max_tokens":4}"#,
            3,
            (Instant::now(), 1),
        );
        assert!(r.stream.is_none());
        assert_eq!(r.wait, Duration::from_millis(50 + 3 * 5));
        let body = json_of(&r.body);
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["model"], "m");
        let text = body["choices"][0]["text"].as_str().unwrap();
        assert_eq!(text.split_whitespace().count(), 4);
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert_eq!(body["usage"]["prompt_tokens"], 3);
    }

    #[test]
    fn tokens_are_drawn_but_never_past_max_tokens_and_ignore_eos_takes_all() {
        let p = preset("tokens=uniform:5:8");
        let ask = |extra: &str| {
            let body = format!(
                r#"{{"messages":[{{"role":"user","content":"hi"}}],"max_tokens":6{extra}}}"#
            );
            let r = p.reply(Endpoint::Chat, body.as_bytes(), 11, (Instant::now(), 1));
            json_of(&r.body)["usage"]["completion_tokens"]
                .as_u64()
                .unwrap()
        };
        for seed in 0..20 {
            let body = br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":6}"#;
            let r = p.reply(Endpoint::Chat, body, seed, (Instant::now(), 1));
            let n = json_of(&r.body)["usage"]["completion_tokens"]
                .as_u64()
                .unwrap();
            assert!((5..=6).contains(&n), "{n}");
        }
        assert_eq!(ask(r#","ignore_eos":true"#), 6);
        let r = preset("").reply(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"x"}]}"#,
            1,
            (Instant::now(), 1),
        );
        assert_eq!(json_of(&r.body)["usage"]["completion_tokens"], 16);
    }

    #[test]
    fn bad_requests_get_openai_errors() {
        let p = preset("model=a model=b context=100");
        // The body, then the status, `param` and `code` it gets.
        type Case<'a> = (&'a [u8], u16, Option<&'a str>, Option<&'a str>);
        let cases: [Case; 7] = [
            (b"not json", 400, None, None),
            (br#"{"model":"a"}"#, 400, Some("messages"), None),
            (
                br#"{"model":"a","messages":[]}"#,
                400,
                Some("messages"),
                None,
            ),
            (
                br#"{"model":"a","messages":[{"content":"x"}],"max_tokens":0}"#,
                400,
                Some("max_tokens"),
                None,
            ),
            (
                br#"{"model":"a","messages":[{"content":"x"}],"n":2}"#,
                400,
                Some("n"),
                None,
            ),
            (
                br#"{"model":"c","messages":[{"content":"x"}]}"#,
                404,
                Some("model"),
                Some("model_not_found"),
            ),
            (
                br#"{"model":"b","messages":[{"content":"x"}],"max_tokens":100}"#,
                400,
                Some("messages"),
                Some("context_length_exceeded"),
            ),
        ];
        for (body, status, param, code) in cases {
            let r = p.reply(Endpoint::Chat, body, 1, (Instant::now(), 1));
            let e = json_of(&r.body)["error"].clone();
            let label = String::from_utf8_lossy(body);
            assert_eq!((r.status, r.refused), (status, true), "{label}");
            assert_eq!(e["param"].as_str(), param, "{label}");
            assert_eq!(e["code"].as_str(), code, "{label}");
        }
        let r = p.reply(
            Endpoint::Completions,
            br#"{"model":"a","prompt":["x","y"]}"#,
            1,
            (Instant::now(), 1),
        );
        assert_eq!(json_of(&r.body)["error"]["param"], "prompt");
    }

    #[test]
    fn models_and_drawn_statuses_answer_in_openai_shapes() {
        let list = json_of(
            &preset("model=a model=b")
                .reply(Endpoint::Models, b"", 1, (Instant::now(), 1))
                .body,
        );
        let ids: Vec<&str> = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a", "b"]);
        let any = json_of(
            &preset("")
                .reply(Endpoint::Models, b"", 1, (Instant::now(), 1))
                .body,
        );
        assert_eq!(any["data"][0]["id"], ANY_MODEL);
        let e = json_of(&OpenAi::status_body(429));
        assert_eq!(
            (e["error"]["type"].as_str(), e["error"]["code"].as_str()),
            (Some("requests"), Some("rate_limit_exceeded"))
        );
        assert_eq!(
            json_of(&OpenAi::status_body(503))["error"]["code"],
            "service_unavailable"
        );
    }
}
