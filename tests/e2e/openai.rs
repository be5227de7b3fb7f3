//! The OpenAI-compatible preset (`--route '/v1/* openai=on …'`) as the clients of an inference
//! server see it, checked against its interface rather than its code: the three paths and the 404 /
//! 405 of any other in OpenAI's error shape; whole and streamed answers over HTTP/1.1 (a raw socket),
//! HTTP/2 (the `h2` crate, and curl over TLS) and HTTP/3 (quinn + h3), chat and completions, each
//! token its own chunk or DATA frame with the chunk JSON OpenAI sends (the role only in the first,
//! `finish_reason` `length` or `stop` in the last, `include_usage`'s usage chunk, `data: [DONE]`),
//! each answered from its own body when pipelined or multiplexed;
//! how many tokens (`tokens=`, `max_tokens`, `ignore_eos`, 16 by default), each a word and a space;
//! the prompt's tokens as `usage` counts them; every 400, `model_not_found`,
//! `context_length_exceeded` and a drawn 429 / 500 / 503; TTFT and ITL timed from the client;
//! `capacity=1` as vLLM's `max-num-seqs` (a second stream waits for the first's last token, a client
//! that leaves, closing its connection or cancelling its HTTP/2 or HTTP/3 stream, frees the slot at
//! once, a full pool sheds with a 503); the ground truth and the `vllm:*` metrics; HTTP/1.0, a client
//! that never reads (over HTTP/1.1, HTTP/2 and HTTP/3), one that reads slowly (over HTTP/2: each token
//! late, and the ground truth says how late), a garbage body, a trickled body; the start-up errors of a bad openai route, the
//! routes file and `PUT /routes`; and two real clients, the `openai` Python SDK
//! (`tests/openai/sdk.py`, its typed errors included) and aiperf (with the word-level tokenizer
//! `tests/openai/tokenizer.py` writes), whose TTFT and ITL must agree with what the server drew.
//! Without them (`cargo xtask setup` installs both) their tests print `SKIPPED`.
//!
//! Timing bounds: the server can only be late, so a lower bound that follows from the route's waits is
//! tight (a few ms for timer rounding); upper bounds allow ~150 ms of scheduling noise, as the suite
//! shares two cores with other tests.

use std::io::{ErrorKind, Write};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use statico_tests::figures::{admin_truth, entry, num, outcome, truth_when};
use statico_tests::wire::{
    admin, assert_field, assert_no_field, curl_split, h2_body, h2_connect, runtime, End, H2Body,
    Streamed, Wire,
};
use statico_tests::{rss_kib, run_client, Response, Server, EARLY, WAIT};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Held by aiperf's test, whose dozen Python processes take most of a core for ten seconds, and by
/// the tests here that time tokens to within [`SLACK`]: they take turns rather than share the cores.
fn quiet() -> std::sync::MutexGuard<'static, ()> {
    static QUIET: std::sync::Mutex<()> = std::sync::Mutex::new(());
    QUIET
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// statico with `--route SPEC` for each of `routes`, `--metrics` (where the ground truth is read) and
/// `extra`.
fn start(routes: &[&str], extra: &[&str]) -> Server {
    let mut args: Vec<&str> = routes.iter().flat_map(|r| ["--route", *r]).collect();
    args.extend_from_slice(&["--metrics", "127.0.0.1:0"]);
    args.extend_from_slice(extra);
    Server::start(&args)
}

// ---- Requests ----

/// The two generation endpoints, as their answers differ.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

impl Kind {
    fn path(self, prefix: &str) -> String {
        match self {
            Kind::Chat => format!("{prefix}/chat/completions"),
            Kind::Completion => format!("{prefix}/completions"),
        }
    }

    /// A request body: model `llama` and a short prompt, with `extra`'s fields added or replaced
    /// (a field given as `null` is left out).
    fn body(self, extra: Value) -> String {
        let mut body = match self {
            Kind::Chat => {
                json!({"model": "llama", "messages": [{"role": "user", "content": "hello"}]})
            }
            Kind::Completion => json!({"model": "llama", "prompt": "hello"}),
        };
        let fields = body.as_object_mut().unwrap();
        for (key, value) in extra.as_object().expect("extra fields").clone() {
            if value.is_null() {
                fields.remove(&key);
            } else {
                fields.insert(key, value);
            }
        }
        body.to_string()
    }

    fn id_prefix(self) -> &'static str {
        match self {
            Kind::Chat => "chatcmpl-",
            Kind::Completion => "cmpl-",
        }
    }

    /// The `object` of a whole answer and of a streamed chunk.
    fn objects(self) -> (&'static str, &'static str) {
        match self {
            Kind::Chat => ("chat.completion", "chat.completion.chunk"),
            Kind::Completion => ("text_completion", "text_completion"),
        }
    }
}

/// An HTTP/1.1 POST of the JSON `body` to `path`.
fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A request with `method` and no body.
fn bare(method: &str, path: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

/// The body of `r` as JSON.
fn json_of(r: &Response) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            r.head,
            String::from_utf8_lossy(&r.body)
        )
    })
}

/// One POST on a fresh connection, answered whole (Content-Length): the answer and its JSON.
fn ask(s: &Server, path: &str, body: &str) -> (Response, Value) {
    let mut w = Wire::open(s);
    w.send(&post(path, body));
    let r = w.whole();
    let v = json_of(&r);
    (r, v)
}

/// The next answer on `w`, whole, checked as [`whole_answer`] says.
fn read_whole(w: &mut Wire, kind: Kind) -> Answer {
    let r = w.whole();
    whole_answer(kind, &r, &json_of(&r))
}

/// One POST on a fresh connection, answered as a chunked stream.
fn ask_streamed(s: &Server, path: &str, body: &str) -> Streamed {
    let mut w = Wire::open(s);
    w.send(&post(path, body));
    w.streamed()
}

/// Now in Unix seconds.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Asserts `created` is a Unix time in seconds within a minute of now.
fn assert_created(v: &Value) {
    let created = v["created"]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer created in {v}"));
    assert!(
        (created - unix_now()).abs() < 60,
        "created {created} is not now: {v}"
    );
}

/// Asserts `id` is the kind's prefix then hexadecimal digits.
fn assert_id(kind: Kind, id: &str) {
    let hex = id
        .strip_prefix(kind.id_prefix())
        .unwrap_or_else(|| panic!("id {id:?} should start {:?}", kind.id_prefix()));
    assert!(
        !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "id {id:?}: not hex after the prefix"
    );
}

/// Asserts `token` is one lowercase ASCII word followed by one space.
fn assert_token(token: &str) {
    let word = token
        .strip_suffix(' ')
        .unwrap_or_else(|| panic!("token {token:?} does not end in a space"));
    assert!(
        !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase()),
        "token {token:?} is not one lowercase ASCII word and a space"
    );
}

/// `usage` as (prompt, completion, total), checked to add up.
fn usage_of(v: &Value) -> (u64, u64, u64) {
    let field = |name: &str| {
        v[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no {name} in usage {v}"))
    };
    let usage = (
        field("prompt_tokens"),
        field("completion_tokens"),
        field("total_tokens"),
    );
    assert_eq!(usage.0 + usage.1, usage.2, "total_tokens in {v}");
    usage
}

/// What an answer said, whole or streamed.
#[derive(Debug)]
struct Answer {
    /// The tokens, each a word and a space.
    tokens: Vec<String>,
    finish: String,
    /// (prompt, completion, total); none for a stream without `include_usage`.
    usage: Option<(u64, u64, u64)>,
    model: String,
}

/// A whole (not streamed) answer checked against the interface's shape for `kind`.
fn whole_answer(kind: Kind, r: &Response, v: &Value) -> Answer {
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 200, "{}{text}", r.head);
    assert_field(&r.head, "content-type", "application/json");
    assert!(r.header("content-length").is_some(), "{}", r.head);
    assert_no_field(&r.head, "transfer-encoding");
    assert_id(kind, v["id"].as_str().expect("an id"));
    assert_eq!(v["object"], kind.objects().0, "{v}");
    let choice = the_choice(v);
    let content = match kind {
        Kind::Chat => {
            assert_eq!(choice["message"]["role"], "assistant", "{v}");
            choice["message"]["content"].as_str().expect("content")
        }
        Kind::Completion => choice["text"].as_str().expect("text"),
    };
    let usage = usage_of(&v["usage"]);
    let tokens = split_tokens(content);
    assert_eq!(
        tokens.len() as u64,
        usage.1,
        "completion_tokens vs the words of {content:?}"
    );
    Answer {
        tokens,
        finish: choice["finish_reason"]
            .as_str()
            .expect("a finish_reason")
            .to_string(),
        usage: Some(usage),
        model: v["model"].as_str().expect("a model").to_string(),
    }
}

/// The one choice of an answer or a chunk `v`, checked with what both carry: `created`, and the choice
/// at index 0 without logprobs.
fn the_choice(v: &Value) -> &Value {
    assert_created(v);
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 1, "{v}");
    let choice = &choices[0];
    assert_eq!(choice["index"], 0, "{v}");
    assert!(choice["logprobs"].is_null(), "{v}");
    choice
}

/// A whole text cut after each space into tokens, each checked to be a word and a space.
fn split_tokens(content: &str) -> Vec<String> {
    let tokens: Vec<String> = content.split_inclusive(' ').map(str::to_string).collect();
    for t in &tokens {
        assert_token(t);
    }
    assert_eq!(
        tokens.len(),
        content.split_whitespace().count(),
        "{content:?}"
    );
    tokens
}

/// A streamed body cut into its events, each as a piece: for an answer that has no pieces of its own
/// (HTTP/1.0, or curl's output).
fn events_as_pieces(body: &str) -> Vec<String> {
    assert!(body.ends_with("\n\n"), "an event cut short: {body:?}");
    body.split_inclusive("\n\n").map(str::to_string).collect()
}

/// A streamed answer, given as the pieces it came in (HTTP/1.1 chunks, HTTP/2 or HTTP/3 DATA frames),
/// checked against the interface: its events framed as [`sse_datas`] says, its tokens' chunks as
/// [`token_of`] says with one id and model throughout, then the usage chunk (if any) and
/// `data: [DONE]` last.
fn streamed_answer(kind: Kind, pieces: &[String]) -> Answer {
    let mut datas = sse_datas(pieces);
    assert_eq!(
        datas.pop(),
        Some("[DONE]"),
        "not ended by [DONE]: {pieces:?}"
    );
    let usage = match datas.last() {
        Some(d) if is_usage(d) => {
            let v: Value = serde_json::from_str(datas.pop().unwrap()).unwrap();
            Some(usage_of(&v["usage"]))
        }
        _ => None,
    };
    let chunks: Vec<Value> = (datas.iter())
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d:?}")))
        .collect();
    assert!(!chunks.is_empty(), "no token: {pieces:?}");
    let (first, last) = (&chunks[0], chunks.len() - 1);
    assert_id(kind, first["id"].as_str().expect("an id"));
    for chunk in &chunks {
        let same = (&chunk["id"], &chunk["model"]);
        assert_eq!(same, (&first["id"], &first["model"]), "{chunk}");
    }
    let tokens: Vec<String> = (chunks.iter().enumerate())
        .map(|(i, chunk)| token_of(kind, chunk, i == 0, i == last))
        .collect();
    let finish = chunks[last]["choices"][0]["finish_reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no finish_reason in the last chunk {}", chunks[last]));
    if let Some(u) = usage {
        assert_eq!(u.1, tokens.len() as u64, "completion_tokens vs the chunks");
    }
    Answer {
        tokens,
        finish: finish.to_string(),
        usage,
        model: first["model"].as_str().expect("a model").to_string(),
    }
}

/// The data of every event in `pieces`, checked to be framed as the interface says: each piece whole
/// `data: …\n\n` events (no `id:`, one line each), and at most one token per piece.
fn sse_datas(pieces: &[String]) -> Vec<&str> {
    let mut datas = Vec::new();
    for piece in pieces {
        assert!(
            piece.ends_with("\n\n"),
            "a piece that is not whole events: {piece:?}"
        );
        let mut tokens_here = 0;
        for event in piece.split_terminator("\n\n") {
            let data = (event.strip_prefix("data: "))
                .filter(|d| !d.contains('\n'))
                .unwrap_or_else(|| panic!("not one `data:` line: {event:?} in {pieces:?}"));
            tokens_here += usize::from(data != "[DONE]" && !is_usage(data));
            datas.push(data);
        }
        assert!(tokens_here <= 1, "two tokens in one piece: {piece:?}");
    }
    datas
}

/// The token of one streamed chunk of `kind`, checked: its object, `created`, one choice at index 0
/// without logprobs or usage, `finish_reason` null unless it is the `last`, and for chat the role
/// `assistant` in the `first` chunk only.
fn token_of(kind: Kind, chunk: &Value, first: bool, last: bool) -> String {
    assert_eq!(chunk["object"], kind.objects().1, "{chunk}");
    assert!(chunk.get("usage").is_none_or(Value::is_null), "{chunk}");
    let choice = the_choice(chunk);
    if !last {
        assert!(choice["finish_reason"].is_null(), "{chunk}");
    }
    let token = match kind {
        Kind::Chat => {
            let delta = &choice["delta"];
            let role = delta.get("role").filter(|r| !r.is_null());
            let want = first.then(|| json!("assistant"));
            assert_eq!(
                role,
                want.as_ref(),
                "the role in the first chunk only: {chunk}"
            );
            delta["content"].as_str().expect("content")
        }
        Kind::Completion => choice["text"].as_str().expect("text"),
    };
    assert_token(token);
    token.to_string()
}

/// Whether an event's data is the usage chunk (`"choices":[]` and a `usage`).
fn is_usage(data: &str) -> bool {
    serde_json::from_str::<Value>(data)
        .is_ok_and(|v| v["choices"].as_array().is_some_and(Vec::is_empty) && v["usage"].is_object())
}

/// A chunked answer checked as a stream: 200, its head fields, ended by the last chunk.
fn stream_answer(kind: Kind, st: &Streamed) -> Answer {
    assert_eq!(st.head.status, 200, "{}", st.head.head);
    assert_field(&st.head.head, "content-type", "text/event-stream");
    assert_field(&st.head.head, "cache-control", "no-cache");
    assert_no_field(&st.head.head, "content-length");
    assert_eq!(
        st.end,
        End::Last,
        "the stream did not end with the last chunk"
    );
    streamed_answer(kind, &st.texts())
}

/// The error object of an answer in OpenAI's shape: `status`, JSON, and `{"error":{…}}` with a string
/// `message` and the keys `type`, `param` and `code`.
fn openai_error(r: &Response, status: u16) -> Value {
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, status, "{}{text}", r.head);
    assert_field(&r.head, "content-type", "application/json");
    let v = json_of(r);
    let e = &v["error"];
    assert!(e["message"].is_string(), "no message: {text}");
    assert!(e["type"].is_string(), "no type: {text}");
    for key in ["param", "code"] {
        assert!(e.get(key).is_some(), "no {key}: {text}");
    }
    e.clone()
}

/// An error's (type, param, code).
fn error_fields(e: &Value) -> (Value, Value, Value) {
    (e["type"].clone(), e["param"].clone(), e["code"].clone())
}

// ---- Paths ----

#[test]
fn models_lists_the_served_models_or_statico_without_any() {
    let s = start(
        &["/v1/* openai=on model=llama model=qwen", "/any/* openai=on"],
        &[],
    );
    for (path, want) in [
        ("/v1/models", &["llama", "qwen"][..]),
        ("/any/models", &["statico"]),
    ] {
        let mut w = Wire::open(&s);
        w.send(&statico_tests::get(path));
        let r = w.whole();
        assert_eq!(r.status, 200, "{path}: {}", r.head);
        assert_field(&r.head, "content-type", "application/json");
        let v = json_of(&r);
        assert_eq!(v["object"], "list", "{v}");
        let data = v["data"].as_array().expect("data");
        let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, want, "{path}: {v}");
        for m in data {
            assert_eq!(m["object"], "model", "{m}");
            assert_eq!(m["owned_by"], "statico", "{m}");
            assert_created(m);
        }
    }
}

#[test]
fn another_path_is_404_and_another_method_405_in_openai_error_shape() {
    let s = start(&["/v1/* openai=on tokens=2", "/ok body=ok"], &[]);
    let mut w = Wire::open(&s);
    // Each answered on the one connection, which goes on.
    w.send(&post("/v1/embeddings", "{}"));
    // The message names the request, as OpenAI's does, then the paths served; its code is OpenAI's.
    let e = openai_error(&w.whole(), 404);
    let message = e["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Unknown request URL: POST /v1/embeddings. ")
            && message.contains("/v1/chat/completions"),
        "{e}"
    );
    assert_eq!(e["code"], "unknown_url", "{e}");
    // The path without its query.
    w.send(&bare("GET", "/v1/nothing/here?x=1"));
    let e = openai_error(&w.whole(), 404);
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Unknown request URL: GET /v1/nothing/here. "),
        "{e}"
    );
    for (method, path) in [
        ("GET", "/v1/chat/completions"),
        ("GET", "/v1/completions"),
        ("DELETE", "/v1/chat/completions"),
        ("POST", "/v1/models"),
    ] {
        w.send(&bare(method, path));
        let e = openai_error(&w.whole(), 405);
        let want = format!("Invalid method for URL ({method} {path}).");
        assert_eq!(e["message"], want.as_str(), "{e}");
    }
    // The preset answers only under its prefix.
    w.send(&statico_tests::get("/ok"));
    assert_eq!(w.whole().body, b"ok");
    let chat = Kind::Chat.body(json!({}));
    w.send(&post("/v1/chat/completions", &chat));
    read_whole(&mut w, Kind::Chat);
}

// ---- Whole answers ----

#[test]
fn a_whole_chat_answer_has_the_message_finish_reason_and_usage() {
    let s = start(&["/v1/* openai=on model=llama tokens=5"], &[]);
    // "hello world!": 12 bytes, 3 prompt tokens.
    let body = Kind::Chat
        .body(json!({"messages": [{"role": "user", "content": "hello world!"}], "max_tokens": 10}));
    let (r, v) = ask(&s, "/v1/chat/completions", &body);
    let a = whole_answer(Kind::Chat, &r, &v);
    assert_eq!((a.tokens.len(), a.finish.as_str()), (5, "stop"), "{v}");
    assert_eq!(a.usage, Some((3, 5, 8)), "{v}");
    assert_eq!(a.model, "llama");
}

#[test]
fn a_whole_completion_has_the_text_finish_reason_and_usage() {
    let s = start(&["/v1/* openai=on tokens=5"], &[]);
    // "Once upon a": 11 bytes, 3 prompt tokens; cut at max_tokens 4.
    let body = Kind::Completion.body(json!({"prompt": "Once upon a", "max_tokens": 4}));
    let (r, v) = ask(&s, "/v1/completions", &body);
    let a = whole_answer(Kind::Completion, &r, &v);
    assert_eq!((a.tokens.len(), a.finish.as_str()), (4, "length"), "{v}");
    assert_eq!(a.usage, Some((3, 4, 7)), "{v}");
}

// ---- Token counts ----

#[test]
fn the_token_count_follows_tokens_max_tokens_and_ignore_eos() {
    let s = start(&["/v1/* openai=on tokens=8", "/free/* openai=on"], &[]);
    for (prefix, extra, want, finish) in [
        ("/v1", json!({"max_tokens": 20}), 8, "stop"),
        ("/v1", json!({"max_tokens": 3}), 3, "length"),
        ("/v1", json!({}), 8, "stop"),
        ("/v1", json!({"max_completion_tokens": 5}), 5, "length"),
        (
            "/v1",
            json!({"ignore_eos": true, "max_tokens": 12}),
            12,
            "length",
        ),
        ("/v1", json!({"ignore_eos": true}), 16, "length"),
        ("/free", json!({}), 16, "length"),
        ("/free", json!({"max_tokens": 7}), 7, "length"),
        ("/free", json!({"max_tokens": 40}), 40, "length"),
    ] {
        for kind in [Kind::Chat, Kind::Completion] {
            let path = kind.path(prefix);
            let (r, v) = ask(&s, &path, &kind.body(extra.clone()));
            let a = whole_answer(kind, &r, &v);
            let got = (a.tokens.len(), a.finish.as_str());
            assert_eq!(got, (want, finish), "{path} {extra}: {v}");
            let mut streamed = extra.clone();
            streamed["stream"] = json!(true);
            let st = ask_streamed(&s, &path, &kind.body(streamed));
            let a = stream_answer(kind, &st);
            let got = (a.tokens.len(), a.finish.as_str());
            assert_eq!(got, (want, finish), "{path} {extra}, streamed");
        }
    }
}

#[test]
fn without_tokens_a_large_max_tokens_is_answered_exactly_up_to_the_most_statico_gives() {
    let s = start(&["/v1/* openai=on"], &[]);
    for (kind, stream) in [(Kind::Completion, false), (Kind::Chat, true)] {
        let body = kind.body(json!({"max_tokens": 100_000, "stream": stream}));
        let a = if stream {
            stream_answer(kind, &ask_streamed(&s, &kind.path("/v1"), &body))
        } else {
            let (r, v) = ask(&s, &kind.path("/v1"), &body);
            whole_answer(kind, &r, &v)
        };
        let got = (a.tokens.len(), a.finish.as_str());
        assert_eq!(got, (100_000, "length"), "{kind:?} stream {stream}");
        // One more than statico makes is refused, saying so, rather than cut short.
        let body = kind.body(json!({"max_tokens": 100_001, "stream": stream}));
        let (r, _) = ask(&s, &kind.path("/v1"), &body);
        let e = openai_error(&r, 400);
        assert_eq!(e["param"], "max_tokens", "{e}");
    }
}

#[test]
fn tokens_uniform_2_6_gives_each_count_and_never_more_than_max_tokens() {
    let s = start(&["/v1/* openai=on tokens=uniform:2:6"], &[]);
    let mut w = Wire::open(&s);
    let mut completion = |max_tokens: u32| {
        let body = Kind::Completion.body(json!({ "max_tokens": max_tokens }));
        w.send(&post("/v1/completions", &body));
        read_whole(&mut w, Kind::Completion)
    };
    let mut seen = [0usize; 7];
    for _ in 0..60 {
        let a = completion(100);
        let n = a.tokens.len();
        assert!((2..=6).contains(&n), "{n} tokens");
        assert_eq!(a.finish, "stop", "{n} tokens of at most 100");
        seen[n] += 1;
    }
    // Each of 5 counts missed by 60 draws: 5 × 0.8⁶⁰, one time in 100 000.
    assert!(seen[2..].iter().all(|n| *n > 0), "counts 2..=6: {seen:?}");
    // Capped by max_tokens 3: a draw of 2 stops, any more is cut at 3.
    for _ in 0..20 {
        let a = completion(3);
        let want = if a.tokens.len() == 3 {
            "length"
        } else {
            "stop"
        };
        assert!(a.tokens.len() <= 3, "{} tokens", a.tokens.len());
        assert_eq!(a.finish, want, "{} tokens", a.tokens.len());
    }
}

#[test]
fn prompt_tokens_are_a_quarter_of_the_bytes_rounded_up_per_message_or_prompt() {
    let s = start(&["/v1/* openai=on tokens=1"], &[]);
    let user = |content: Value| json!({"role": "user", "content": content});
    let chats = [
        (json!([user(json!("abcd"))]), 1),
        (json!([user(json!("abcde"))]), 2),
        (json!([user(json!(""))]), 1),
        // Per message: 1 + 2.
        (json!([user(json!("abcd")), user(json!("abcde"))]), 3),
        (
            json!([{"role": "system", "content": "abcdefgh"}, user(json!("abc"))]),
            3,
        ),
        // UTF-8 bytes: é is two.
        (json!([user(json!("ééé"))]), 2),
        // Parts: their texts counted together, as the message's: 5 bytes.
        (
            json!([user(
                json!([{"type": "text", "text": "ab"}, {"type": "text", "text": "cde"}])
            )]),
            2,
        ),
    ];
    for (messages, want) in chats {
        let body = Kind::Chat.body(json!({ "messages": messages }));
        let (r, v) = ask(&s, "/v1/chat/completions", &body);
        let usage = whole_answer(Kind::Chat, &r, &v).usage.unwrap();
        assert_eq!(usage.0, want, "prompt_tokens of {messages}: {v}");
    }
    let prompts = [
        (json!("abcdefghi"), 3),
        (json!(["abcdefghi"]), 3),
        (json!([101, 102, 103, 104, 105]), 5),
        (json!(""), 1),
    ];
    for (prompt, want) in prompts {
        let body = Kind::Completion.body(json!({ "prompt": prompt }));
        let (r, v) = ask(&s, "/v1/completions", &body);
        let usage = whole_answer(Kind::Completion, &r, &v).usage.unwrap();
        assert_eq!(usage.0, want, "prompt_tokens of {prompt}: {v}");
    }
}

// ---- Models ----

#[test]
fn a_served_model_is_echoed_another_is_model_not_found_and_none_takes_the_first() {
    let s = start(
        &[
            "/v1/* openai=on model=llama model=qwen tokens=2",
            "/any/* openai=on tokens=2",
        ],
        &[],
    );
    for (path, model, want) in [
        ("/v1", json!("qwen"), "qwen"),
        ("/v1", json!("llama"), "llama"),
        ("/v1", Value::Null, "llama"),
        ("/any", json!("whatever-7b"), "whatever-7b"),
        ("/any", Value::Null, "statico"),
        // Echoed as JSON: quotes, backslashes, control characters and UTF-8 escaped.
        (
            "/any",
            json!("we\"ird\\mo\u{e9}del\n\t"),
            "we\"ird\\mo\u{e9}del\n\t",
        ),
    ] {
        for kind in [Kind::Chat, Kind::Completion] {
            let extra = json!({ "model": model });
            let (r, v) = ask(&s, &kind.path(path), &kind.body(extra.clone()));
            assert_eq!(whole_answer(kind, &r, &v).model, want, "{path} {model}");
            let mut streamed = extra;
            streamed["stream"] = json!(true);
            let st = ask_streamed(&s, &kind.path(path), &kind.body(streamed));
            assert_eq!(stream_answer(kind, &st).model, want, "{path} {model}");
        }
    }
    for stream in [false, true] {
        let body = Kind::Chat.body(json!({"model": "gpt-4", "stream": stream}));
        let mut w = Wire::open(&s);
        w.send(&post("/v1/chat/completions", &body));
        let e = openai_error(&w.whole(), 404);
        let want = (
            json!("invalid_request_error"),
            json!("model"),
            json!("model_not_found"),
        );
        assert_eq!(error_fields(&e), want, "stream {stream}: {e}");
    }
}

// ---- 400s ----

#[test]
fn every_bad_request_is_a_400_invalid_request_error_naming_the_field() {
    let s = start(
        &["/v1/* openai=on tokens=2", "/c/* openai=on context=100"],
        &[],
    );
    let chat = "/v1/chat/completions";
    let completions = "/v1/completions";
    // (path, body, param): the field the error names (`None`: not checked, the interface names
    // none); none of these has a code.
    let cases: Vec<(&str, String, Option<&str>)> = vec![
        (chat, "not json".into(), None),
        (chat, "[1, 2]".into(), None),
        (chat, "\"a string\"".into(), None),
        (chat, "{\"model\":\"m\",\"messages\":[".into(), None),
        (completions, "{\"prompt\":".into(), None),
        (chat, "".into(), None),
        (chat, json!({"model": "m"}).to_string(), Some("messages")),
        (
            chat,
            Kind::Chat.body(json!({"messages": []})),
            Some("messages"),
        ),
        (
            completions,
            json!({"model": "m"}).to_string(),
            Some("prompt"),
        ),
        (
            chat,
            Kind::Chat.body(json!({"max_tokens": 0})),
            Some("max_tokens"),
        ),
        (
            chat,
            Kind::Chat.body(json!({"max_tokens": -3})),
            Some("max_tokens"),
        ),
        (
            completions,
            Kind::Completion.body(json!({"max_tokens": 2.5})),
            Some("max_tokens"),
        ),
        (
            chat,
            Kind::Chat.body(json!({"max_tokens": "10"})),
            Some("max_tokens"),
        ),
        (chat, Kind::Chat.body(json!({"n": 2})), Some("n")),
        (
            completions,
            Kind::Completion.body(json!({"n": 3})),
            Some("n"),
        ),
    ];
    // All on one connection: an error never drops it.
    let mut w = Wire::open(&s);
    for (path, body, param) in &cases {
        for stream in [false, true] {
            let body = match serde_json::from_str::<Value>(body) {
                Ok(Value::Object(mut o)) if stream => {
                    o.insert("stream".into(), json!(true));
                    Value::Object(o).to_string()
                }
                _ => body.clone(),
            };
            w.send(&post(path, &body));
            let e = openai_error(&w.whole(), 400);
            let what = format!("{path} {body:?}: {e}");
            assert_eq!(e["type"], "invalid_request_error", "{what}");
            assert!(e["code"].is_null(), "{what}");
            if let Some(param) = param {
                assert_eq!(e["param"], *param, "{what}");
            }
        }
    }
    // n: 1 is no error.
    w.send(&post(chat, &Kind::Chat.body(json!({"n": 1}))));
    read_whole(&mut w, Kind::Chat);
    // The context window: 99 prompt tokens (396 bytes) + 1 fits in 100, 100 + 1 does not.
    let fits = [
        (
            Kind::Chat,
            json!({"messages": [{"role": "user", "content": "a".repeat(396)}]}),
        ),
        (Kind::Completion, json!({ "prompt": "a".repeat(396) })),
        (
            Kind::Completion,
            json!({ "prompt": (0..99).collect::<Vec<u32>>() }),
        ),
    ];
    for (kind, mut extra) in fits {
        extra["max_tokens"] = json!(1);
        w.send(&post(&kind.path("/c"), &kind.body(extra.clone())));
        read_whole(&mut w, kind);
        let param = match kind {
            Kind::Chat => {
                extra["messages"][0]["content"] = json!("a".repeat(397));
                "messages"
            }
            Kind::Completion if extra["prompt"].is_string() => {
                extra["prompt"] = json!("a".repeat(397));
                "prompt"
            }
            Kind::Completion => {
                extra["prompt"] = json!((0..100).collect::<Vec<u32>>());
                "prompt"
            }
        };
        w.send(&post(&kind.path("/c"), &kind.body(extra.clone())));
        let e = openai_error(&w.whole(), 400);
        let want = (
            json!("invalid_request_error"),
            json!(param),
            json!("context_length_exceeded"),
        );
        assert_eq!(error_fields(&e), want, "{extra}: {e}");
        // Or by max_tokens alone.
        extra[param] = match kind {
            Kind::Chat => json!([{"role": "user", "content": "a"}]),
            Kind::Completion => json!("a"),
        };
        extra["max_tokens"] = json!(101);
        w.send(&post(&kind.path("/c"), &kind.body(extra)));
        let e = openai_error(&w.whole(), 400);
        assert_eq!(e["code"], "context_length_exceeded", "{e}");
    }
}

#[test]
fn a_max_tokens_whose_sum_with_the_prompt_passes_64_bits_still_exceeds_the_context() {
    let s = start(&["/c/* openai=on context=100"], &[]);
    let mut w = Wire::open(&s);
    for kind in [Kind::Chat, Kind::Completion] {
        for max_tokens in [u64::MAX - 1, u64::MAX] {
            let body = kind.body(json!({ "max_tokens": max_tokens }));
            w.send(&post(&kind.path("/c"), &body));
            let e = openai_error(&w.whole(), 400);
            let what = format!("{kind:?} max_tokens {max_tokens}: {e}");
            assert_eq!(e["code"], "context_length_exceeded", "{what}");
        }
    }
}

// ---- Drawn statuses ----

#[test]
fn a_drawn_429_500_503_or_502_is_answered_whole_in_openai_error_shape() {
    let s = start(
        &[
            "/r429/* openai=on status=429",
            "/r500/* openai=on status=500",
            "/r503/* openai=on status=503",
            "/r502/* openai=on status=502",
            "/slow/* openai=on status=503 delay=200ms",
        ],
        &[],
    );
    let mut w = Wire::open(&s);
    for (prefix, status, typ, code) in [
        ("/r429", 429, "requests", json!("rate_limit_exceeded")),
        ("/r500", 500, "server_error", Value::Null),
        ("/r503", 503, "server_error", json!("service_unavailable")),
        ("/r502", 502, "server_error", Value::Null),
    ] {
        for kind in [Kind::Chat, Kind::Completion] {
            for stream in [false, true] {
                let body = kind.body(json!({ "stream": stream }));
                w.send(&post(&kind.path(prefix), &body));
                let r = w.whole();
                let e = openai_error(&r, status);
                let what = format!("{prefix} {kind:?} stream {stream}: {e}");
                assert_eq!(e["type"], typ, "{what}");
                if !code.is_null() {
                    assert_eq!(e["code"], code, "{what}");
                }
            }
        }
    }
    // After the route's delay.
    w.send(&post("/slow/chat/completions", &Kind::Chat.body(json!({}))));
    openai_error(&w.whole(), 503);
    let took = w.sent.elapsed();
    assert!(
        took + EARLY >= ms(200) && took < ms(2000),
        "503 after {took:?} (delay 200 ms)"
    );
}

#[test]
fn a_status_mix_answers_streams_and_429s_each_framed_as_its_status_says() {
    let s = start(&["/v1/* openai=on tokens=3 status=200,429:50%"], &[]);
    let mut w = Wire::open(&s);
    let (mut streams, mut limited) = (0, 0);
    let body = Kind::Chat.body(json!({"stream": true}));
    for _ in 0..40 {
        w.send(&post("/v1/chat/completions", &body));
        let head = w.head();
        match head.status {
            200 => {
                assert_field(&head.head, "transfer-encoding", "chunked");
                let mut pieces = Vec::new();
                while let Some((c, _)) = w.chunk().expect("the last chunk") {
                    pieces.push(String::from_utf8_lossy(&c).into_owned());
                }
                assert_eq!(streamed_answer(Kind::Chat, &pieces).tokens.len(), 3);
                streams += 1;
            }
            429 => {
                let e = openai_error(&w.body_of(head), 429);
                assert_eq!(e["code"], "rate_limit_exceeded", "{e}");
                limited += 1;
            }
            other => panic!("status {other}: {}", head.head),
        }
    }
    assert!(
        streams > 0 && limited > 0,
        "{streams} streams, {limited} 429s"
    );
}

#[test]
fn a_request_shed_by_a_full_pool_gets_a_503_in_openai_error_shape() {
    let s = start(
        &["/v1/* openai=on tokens=3 gap=200ms capacity=1 queue=0"],
        &[],
    );
    // The only server held (the head leaves once admitted) while two more come.
    let mut holder = Wire::open(&s);
    holder.send(&post(
        "/v1/chat/completions",
        &Kind::Chat.body(json!({"stream": true})),
    ));
    assert_eq!(holder.head().status, 200);
    for stream in [false, true] {
        let mut w = Wire::open(&s);
        let body = Kind::Chat.body(json!({ "stream": stream }));
        w.send(&post("/v1/chat/completions", &body));
        let e = openai_error(&w.whole(), 503);
        assert_eq!(e["type"], "server_error", "{e}");
        assert_eq!(e["code"], "service_unavailable", "{e}");
    }
    let mut pieces = Vec::new();
    while let Some((c, _)) = holder.chunk().expect("the last chunk") {
        pieces.push(String::from_utf8_lossy(&c).into_owned());
    }
    assert_eq!(streamed_answer(Kind::Chat, &pieces).tokens.len(), 3);
}

// ---- Streams over HTTP/1.1 ----

#[test]
fn a_chat_stream_is_one_chunk_per_token_then_usage_and_done_and_the_connection_goes_on() {
    let s = start(&["/v1/* openai=on model=llama tokens=4 gap=20ms"], &[]);
    let mut w = Wire::open(&s);
    // "hello world!": 3 prompt tokens.
    let body = Kind::Chat.body(json!({
        "messages": [{"role": "user", "content": "hello world!"}],
        "max_tokens": 10,
        "stream": true,
        "stream_options": {"include_usage": true},
    }));
    w.send(&post("/v1/chat/completions", &body));
    let st = w.streamed();
    assert_field(&st.head.head, "transfer-encoding", "chunked");
    let a = stream_answer(Kind::Chat, &st);
    assert_eq!((a.tokens.len(), a.finish.as_str()), (4, "stop"));
    assert_eq!(a.usage, Some((3, 4, 7)));
    assert_eq!(a.model, "llama");
    assert!(
        st.chunks.len() >= 4,
        "{} chunks for 4 tokens",
        st.chunks.len()
    );
    // Without include_usage: no usage chunk; cut at max_tokens: `length`.
    let body = Kind::Chat.body(json!({"max_tokens": 2, "stream": true}));
    w.send(&post("/v1/chat/completions", &body));
    let a = stream_answer(Kind::Chat, &w.streamed());
    assert_eq!((a.tokens.len(), a.finish.as_str()), (2, "length"));
    assert_eq!(a.usage, None);
    // And a whole answer after them on the same connection.
    w.send(&post("/v1/chat/completions", &Kind::Chat.body(json!({}))));
    assert_eq!(read_whole(&mut w, Kind::Chat).tokens.len(), 4);
    // Pipelined, each answered from its own body, in order: a stream, a whole answer, a stream.
    let bodies = [
        json!({"max_tokens": 3, "stream": true}),
        json!({"max_tokens": 2}),
        json!({"max_tokens": 1, "stream": true}),
    ];
    let requests: Vec<Vec<u8>> = (bodies.iter())
        .map(|b| post("/v1/chat/completions", &Kind::Chat.body(b.clone())))
        .collect();
    w.send(&requests.concat());
    assert_eq!(stream_answer(Kind::Chat, &w.streamed()).tokens.len(), 3);
    assert_eq!(read_whole(&mut w, Kind::Chat).tokens.len(), 2);
    assert_eq!(stream_answer(Kind::Chat, &w.streamed()).tokens.len(), 1);
}

#[test]
fn a_completions_stream_has_text_chunks_and_usage_when_asked() {
    let s = start(&["/v1/* openai=on tokens=3"], &[]);
    for include_usage in [false, true] {
        let body = Kind::Completion.body(json!({
            "prompt": "abcdefgh",
            "stream": true,
            "stream_options": {"include_usage": include_usage},
        }));
        let st = ask_streamed(&s, "/v1/completions", &body);
        let a = stream_answer(Kind::Completion, &st);
        assert_eq!((a.tokens.len(), a.finish.as_str()), (3, "stop"));
        let want = include_usage.then_some((2, 3, 5));
        assert_eq!(a.usage, want, "include_usage {include_usage}");
    }
}

#[test]
fn http1_0_gets_the_stream_unchunked_and_the_close_ends_it() {
    let s = start(&["/v1/* openai=on tokens=3 gap=20ms"], &[]);
    let body = Kind::Chat.body(json!({"stream": true}));
    let mut w = Wire::open(&s);
    w.send(
        format!(
            "POST /v1/chat/completions HTTP/1.0\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    let head = w.head();
    assert_eq!(head.status, 200, "{}", head.head);
    assert_no_field(&head.head, "transfer-encoding");
    assert_no_field(&head.head, "content-length");
    assert_field(&head.head, "content-type", "text/event-stream");
    let (body, end) = w.until_closed();
    assert_eq!(end, End::Closed);
    let body = String::from_utf8(body).unwrap();
    let a = streamed_answer(Kind::Chat, &events_as_pieces(&body));
    assert_eq!(a.tokens.len(), 3);
}

// ---- HTTP/2 and TLS ----

/// What an HTTP/2 POST got: its head and its body, each DATA frame's time since the request's end.
struct H2Answer {
    head: http::response::Parts,
    body: H2Body,
}

/// Sends a POST of the JSON `body` to `path` on an HTTP/2 connection: its answer to come.
async fn h2_send(
    client: h2::client::SendRequest<bytes::Bytes>,
    path: &str,
    body: &str,
) -> h2::client::ResponseFuture {
    let mut client = client.ready().await.unwrap();
    let req = http::Request::post(format!("http://t{path}"))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (resp, mut stream) = client.send_request(req, false).unwrap();
    stream
        .send_data(bytes::Bytes::from(body.to_string()), true)
        .unwrap();
    resp
}

/// One POST of `body` to `path` over a fresh prior-knowledge HTTP/2 connection, read frame by frame.
fn h2_post(s: &Server, path: &str, body: &str) -> H2Answer {
    let addr = s.addr;
    let (path, body) = (path.to_string(), body.to_string());
    runtime().block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let resp = h2_send(client, &path, &body).await;
        let sent = Instant::now();
        let resp = tokio::time::timeout(WAIT, resp)
            .await
            .expect("an answer")
            .expect("a head");
        let (head, mut body) = resp.into_parts();
        let body = h2_body(&mut body, sent).await;
        assert!(body.error.is_none(), "the body: {:?}", body.error);
        H2Answer { head, body }
    })
}

#[test]
fn http2_each_token_is_its_own_data_frame_and_a_whole_answer_is_json() {
    let _quiet = quiet();
    let s = start(&["/v1/* openai=on tokens=4 gap=30ms"], &["--http2"]);
    for kind in [Kind::Chat, Kind::Completion] {
        let body = kind.body(json!({"stream": true, "stream_options": {"include_usage": true}}));
        let out = h2_post(&s, &kind.path("/v1"), &body);
        assert_eq!(out.head.status, 200);
        assert_eq!(out.head.headers["content-type"], "text/event-stream");
        assert_eq!(out.head.headers["cache-control"], "no-cache");
        assert!(out.head.headers.get("content-length").is_none());
        let a = streamed_answer(kind, &out.body.texts());
        assert_eq!((a.tokens.len(), a.finish.as_str()), (4, "stop"));
        assert_eq!(a.usage.map(|u| u.1), Some(4));
        let times: Vec<Duration> = out.body.frames[..4].iter().map(|f| f.1).collect();
        assert_due(&times, Duration::ZERO, ms(30));
        let out = h2_post(&s, &kind.path("/v1"), &kind.body(json!({"max_tokens": 2})));
        assert_eq!(out.head.status, 200);
        assert_eq!(out.head.headers["content-type"], "application/json");
        let text = out.body.texts().concat();
        let v: Value = serde_json::from_str(&text).unwrap();
        let len: usize = out.head.headers["content-length"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, text.len());
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "length", "{v}");
        assert_eq!(usage_of(&v["usage"]).1, 2, "{v}");
    }
    // A 100 KB prompt: more than the first flow-control window, so the server must take it in
    // several DATA frames and grant the window as it reads (25 600 prompt tokens).
    let body = Kind::Chat.body(json!({
        "messages": [{"role": "user", "content": "abcd".repeat(25_600)}],
        "max_tokens": 1,
    }));
    let out = h2_post(&s, "/v1/chat/completions", &body);
    assert_eq!(out.head.status, 200);
    let text = out.body.texts().concat();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(usage_of(&v["usage"]), (25_600, 1, 25_601), "{v}");
    let out = h2_post(&s, "/v1/nowhere", "{}");
    assert_eq!(out.head.status, 404);
}

#[test]
fn http2_twenty_concurrent_requests_on_one_connection_each_get_their_own_answer() {
    let s = start(&["/v1/* openai=on gap=5ms"], &["--http2"]);
    let addr = s.addr;
    let rt = runtime();
    // Request i asks for i + 1 tokens, streamed when i is even: told apart only by their bodies.
    let answers = rt.block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let mut all = tokio::task::JoinSet::new();
        for i in 0..20usize {
            let client = client.clone();
            all.spawn(async move {
                let body = Kind::Chat.body(json!({"max_tokens": i + 1, "stream": i % 2 == 0}));
                let resp = h2_send(client, "/v1/chat/completions", &body).await;
                let mut body = resp.await.expect("a head").into_body();
                let out = h2_body(&mut body, Instant::now()).await;
                assert!(out.error.is_none(), "the body: {:?}", out.error);
                (i, out.texts())
            });
        }
        let mut answers = Vec::new();
        while let Some(answer) = tokio::time::timeout(WAIT, all.join_next())
            .await
            .expect("all")
        {
            answers.push(answer.unwrap());
        }
        answers
    });
    assert_eq!(answers.len(), 20);
    for (i, pieces) in answers {
        let tokens = if i % 2 == 0 {
            streamed_answer(Kind::Chat, &pieces).tokens
        } else {
            let v: Value = serde_json::from_str(&pieces.concat()).unwrap();
            split_tokens(v["choices"][0]["message"]["content"].as_str().unwrap())
        };
        assert_eq!(tokens.len(), i + 1, "request {i}");
    }
}

#[test]
fn curl_over_tls_and_http2_streams_the_chat_tokens() {
    let dir = statico_tests::scratch_dir("openai", "tls");
    let out = dir.to_str().unwrap();
    let s = start(
        &["/v1/* openai=on tokens=3 gap=10ms"],
        &["--tls-self-signed", "--tls-self-signed-out", out, "--http2"],
    );
    let url = format!("https://localhost:{}/v1/chat/completions", s.addr.port());
    let cacert = dir.join("cert.pem");
    let body = Kind::Chat.body(json!({"stream": true}));
    let (ok, out, err) = run_client(
        "curl",
        &[
            "-sS",
            "-N",
            "-i",
            "--http2",
            "--cacert",
            cacert.to_str().unwrap(),
            "-H",
            "Content-Type: application/json",
            "-d",
            &body,
            &url,
        ],
    );
    assert!(ok, "curl: {err}");
    let (head, body) = curl_split(&out);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_field(&head, "content-type", "text/event-stream");
    let a = streamed_answer(Kind::Chat, &events_as_pieces(body));
    assert_eq!((a.tokens.len(), a.finish.as_str()), (3, "stop"));
}

// ---- HTTP/3 ----

#[cfg(target_os = "linux")]
mod http3 {
    //! The preset over HTTP/3, with the quinn + h3 client of `http3.rs`.

    use std::time::{Duration, Instant};

    use bytes::{Buf, Bytes};
    use serde_json::{json, Value};

    use super::{assert_due, ms, streamed_answer, usage_of, Kind};
    use crate::http3::{connect, runtime, scratch, start, timed_pieces, RequestStream};
    use statico_tests::figures::{entry, outcome, truth_when};

    /// A POST of the JSON `body` to `path` sent and finished on `send`'s connection: its stream.
    async fn post(
        send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
        path: &str,
        body: String,
    ) -> RequestStream {
        let req = http::Request::post(format!("https://localhost{path}"))
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let mut stream = send.send_request(req).await.expect("send");
        stream.send_data(Bytes::from(body)).await.expect("body");
        stream.finish().await.expect("finish");
        stream
    }

    #[test]
    fn http3_with_capacity_1_a_stream_the_client_stops_frees_the_slot_at_once() {
        let _quiet = super::quiet();
        let dir = scratch("openai-leave");
        let s = start(
            &dir,
            &[
                "--route",
                "/v1/* openai=on tokens=40 gap=50ms capacity=1",
                "--metrics",
                "127.0.0.1:0",
            ],
        );
        let body = Kind::Chat.body(json!({"stream": true, "max_tokens": 100}));
        let (left, head, first, pieces) = runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let mut long = post(&mut send, "/v1/chat/completions", body.clone()).await;
            long.recv_response().await.expect("a head");
            let mut tokens = 0;
            while tokens < 2 {
                let mut piece = long.recv_data().await.expect("body").expect("a token");
                tokens += usize::from(!piece.copy_to_bytes(piece.remaining()).is_empty());
            }
            let mut waiting = post(&mut send, "/v1/chat/completions", body).await;
            let second = tokio::spawn(async move {
                waiting.recv_response().await.expect("a head");
                let head = Instant::now();
                let (mut pieces, mut first) = (Vec::new(), None);
                while let Some(mut piece) = waiting.recv_data().await.expect("body") {
                    let bytes = piece.copy_to_bytes(piece.remaining());
                    first.get_or_insert_with(Instant::now);
                    pieces.push(String::from_utf8_lossy(&bytes).into_owned());
                }
                (head, first.expect("a token"), pieces)
            });
            tokio::time::sleep(ms(200)).await;
            // Dropped unread, quinn's receive stream asks the server to stop sending (STOP_SENDING).
            drop(long);
            let left = Instant::now();
            let (head, first, pieces) = tokio::time::timeout(statico_tests::WAIT, second)
                .await
                .expect("the second stream ends")
                .unwrap();
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            (left, head, first, pieces)
        });
        assert!(
            head + ms(5) >= left,
            "the second's head came {:?} before the first left (its only server held)",
            left - head
        );
        let waited = first.saturating_duration_since(left);
        assert!(
            waited < ms(500),
            "the second's first token {waited:?} after the first stopped (~1.7 s to go)"
        );
        assert_eq!(streamed_answer(Kind::Chat, &pieces).tokens.len(), 40);
        let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 1);
        let e = entry(&t, "/v1/*");
        assert_eq!((outcome(e, "gone"), outcome(e, "200")), (1, 1), "{e}");
    }

    #[test]
    fn http3_a_client_that_never_reads_a_long_stream_holds_bounded_memory_and_is_closed_when_idle()
    {
        let dir = scratch("openai-never-reads");
        let s = start(
            &dir,
            &[
                "--route",
                "/v1/* openai=on",
                "--metrics",
                "127.0.0.1:0",
                "-t",
                "1",
                "--idle-timeout",
                "2s",
            ],
        );
        let before = statico_tests::rss_kib(s.pid());
        // 100 000 chunks of 1 KB due at once; the head is read, the body never: the tokens wait for
        // the stream's flow control, and the connection is closed when idle.
        let body = Kind::Chat.body(json!({
            "model": "m".repeat(1000),
            "stream": true,
            "ignore_eos": true,
            "max_tokens": 100_000,
        }));
        let (peak, closed) = runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let mut stream = post(&mut send, "/v1/chat/completions", body).await;
            assert_eq!(stream.recv_response().await.expect("a head").status(), 200);
            let sent = Instant::now();
            let mut peak = before;
            let closed = loop {
                peak = peak.max(statico_tests::rss_kib(s.pid()));
                let wait = tokio::time::timeout(ms(50), conn.closed()).await;
                if let Ok(why) = wait {
                    assert!(crate::http3_hostile::idle_close(&why), "{why}");
                    break sent.elapsed();
                }
                assert!(
                    sent.elapsed() < ms(10_000),
                    "a client that reads no token was still connected after 10 s (idle 2 s)"
                );
            };
            drop(stream);
            (peak, closed)
        });
        statico_tests::assert_memory!(
            peak < before + 64 * 1024,
            "RSS grew from {before} KiB to {peak} KiB for one stream nobody reads"
        );
        assert!(closed < ms(6000), "closed {closed:?} after the head");
        let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "gone") >= 1);
        let stream = &entry(&t, "/v1/*")["stream"];
        assert_eq!(
            statico_tests::figures::num(stream, &["left"]),
            1.0,
            "{stream}"
        );
        // What went is what the stream's flow control let go, each token when it was due (all at
        // once); the rest never went.
        let events = statico_tests::figures::num(stream, &["events"]);
        assert!((1.0..100_000.0).contains(&events), "{stream}");
    }

    #[test]
    fn http3_a_client_that_reads_slowly_gets_every_token_late_and_the_ground_truth_says_how_late() {
        let _quiet = super::quiet();
        let dir = scratch("openai-slow-reader");
        let s = start(
            &dir,
            &[
                "--route",
                "/v1/* openai=on model=m tokens=20 gap=20ms",
                "--metrics",
                "127.0.0.1:0",
            ],
        );
        let body = Kind::Chat.body(json!({"model": "m", "stream": true, "max_tokens": 20}));
        let (pieces, took) = runtime().block_on(async {
            // A stream receive window of 400 bytes, a token's chunk or so, and a piece read every
            // 100 ms, where the route makes one every 20 ms.
            let tls = crate::http3::client_tls(
                &dir,
                b"h3",
                rustls::crypto::aws_lc_rs::default_provider(),
            );
            let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
            let mut config = quinn::ClientConfig::new(std::sync::Arc::new(crypto));
            let mut transport = quinn::TransportConfig::default();
            transport.stream_receive_window(400u32.into());
            config.transport_config(std::sync::Arc::new(transport));
            let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
            endpoint.set_default_client_config(config);
            let (conn, mut send) = crate::http3::connect_from(&endpoint, s.addr).await;
            let mut stream = post(&mut send, "/v1/chat/completions", body).await;
            assert_eq!(stream.recv_response().await.expect("a head").status(), 200);
            let start = Instant::now();
            let mut pieces = Vec::new();
            let read = async {
                while let Some(mut piece) = stream.recv_data().await.expect("body") {
                    let bytes = piece.copy_to_bytes(piece.remaining());
                    pieces.push(String::from_utf8_lossy(&bytes).into_owned());
                    tokio::time::sleep(ms(100)).await;
                }
            };
            tokio::time::timeout(statico_tests::WAIT, read)
                .await
                .expect("the stream ends");
            let took = start.elapsed();
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            (pieces, took)
        });
        // A small window splits a DATA frame into pieces as h3 reads them: the events, joined.
        let events = super::events_as_pieces(&pieces.concat());
        let a = streamed_answer(Kind::Chat, &events);
        assert_eq!(a.tokens.len(), 20);
        assert!(
            took > ms(1000),
            "20 tokens read a piece per 100 ms came in {took:?}"
        );
        // Each token went when flow control let it: the last, due at 380 ms, went a few hundred ms
        // late (quinn takes a little past the window into its buffer), and the ground truth says so.
        let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 1);
        let stream = &entry(&t, "/v1/*")["stream"];
        let num = statico_tests::figures::num;
        assert_eq!(num(stream, &["events"]), 20.0, "{stream}");
        assert_eq!(num(&stream["late_us"], &["count"]), 20.0, "{stream}");
        let late = num(&stream["late_us"], &["max"]);
        assert!(
            late > 200_000.0 && late < took.as_micros() as f64,
            "late_us {stream}"
        );
    }

    #[test]
    fn http3_streams_each_token_as_its_own_piece_and_answers_whole() {
        let _quiet = super::quiet();
        let dir = scratch("openai");
        let s = start(&dir, &["--route", "/v1/* openai=on tokens=4 gap=30ms"]);
        let body =
            Kind::Chat.body(json!({"stream": true, "stream_options": {"include_usage": true}}));
        // A 100 KB prompt: the body comes in many DATA frames (25 600 prompt tokens).
        let prompt = "abcd".repeat(25_600);
        let whole = Kind::Completion.body(json!({"max_tokens": 3, "prompt": prompt}));
        let (streamed, answered) = runtime().block_on(async {
            let (conn, mut send) = connect(&dir, s.addr).await;
            let mut results = Vec::new();
            for (path, body) in [
                ("/v1/chat/completions", body.clone()),
                ("/v1/completions", whole.clone()),
            ] {
                let mut stream = post(&mut send, path, body).await;
                let sent = Instant::now();
                let head = stream.recv_response().await.expect("a head");
                results.push((head, timed_pieces(&mut stream, sent).await));
            }
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(Duration::from_millis(50)).await;
            let answered = results.pop().unwrap();
            (results.pop().unwrap(), answered)
        });
        let (head, pieces) = streamed;
        assert_eq!(head.status(), 200);
        assert_eq!(head.headers()["content-type"], "text/event-stream");
        let texts: Vec<String> = pieces.iter().map(|p| p.0.clone()).collect();
        let a = streamed_answer(Kind::Chat, &texts);
        assert_eq!((a.tokens.len(), a.finish.as_str()), (4, "stop"));
        assert_eq!(a.usage.map(|u| u.1), Some(4));
        let times: Vec<Duration> = pieces[..4].iter().map(|p| p.1).collect();
        assert_due(&times, Duration::ZERO, ms(30));
        let (head, pieces) = answered;
        assert_eq!(head.status(), 200);
        assert_eq!(head.headers()["content-type"], "application/json");
        let text: String = pieces.iter().map(|p| p.0.as_str()).collect();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["object"], "text_completion", "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
        assert_eq!(usage_of(&v["usage"]), (25_600, 3, 25_603), "{v}");
    }
}

// ---- Timing ----

/// What the server may add to a token's due time: scheduling on two shared cores.
const SLACK: Duration = Duration::from_millis(150);

/// Asserts token `k` came (since the request's last byte) at its due time, `ttft + k × gap`, or up
/// to [`SLACK`] after it, never before (but for [`EARLY`]). Each token is due on the route's clock,
/// so one that is late does not make the ones after it late.
fn assert_due(times: &[Duration], ttft: Duration, gap: Duration) {
    for (k, at) in times.iter().enumerate() {
        let due = ttft + gap * k as u32;
        assert!(
            *at + EARLY >= due && *at < due + SLACK,
            "token {k} at {at:?}, due at {due:?} (TTFT {ttft:?}, gap {gap:?}): {times:?}"
        );
    }
}

#[test]
fn ttft_is_delay_plus_first_plus_prefill_per_prompt_token_and_itl_is_gap() {
    let _quiet = quiet();
    let s = start(
        &[
            "/plain/* openai=on tokens=3 first=200ms",
            "/v1/* openai=on tokens=3 delay=100ms first=200ms prefill=5ms gap=50ms",
        ],
        &[],
    );
    // first=200ms alone.
    let body = Kind::Chat.body(json!({"stream": true}));
    let st = ask_streamed(&s, "/plain/chat/completions", &body);
    stream_answer(Kind::Chat, &st);
    let ttft = st.chunks[0].1;
    assert_due(&[ttft], ms(200), Duration::ZERO);
    // 80 bytes: 20 prompt tokens, 100 ms of prefill; + delay 100 ms + first 200 ms = 400 ms.
    let prompt = "abcd".repeat(20);
    let body = Kind::Chat.body(json!({
        "messages": [{"role": "user", "content": prompt}],
        "stream": true,
    }));
    let mut w = Wire::open(&s);
    w.send(&post("/v1/chat/completions", &body));
    w.head();
    let head = w.sent.elapsed();
    let mut chunks = Vec::new();
    while let Some(chunk) = w.chunk().expect("the last chunk") {
        chunks.push(chunk);
    }
    assert!(
        head + EARLY >= ms(100) && head < ms(399),
        "the head after {head:?}: after delay (100 ms), before the first token (400 ms)"
    );
    // TTFT: delay 100 + first 200 + 20 × prefill 5 ms.
    let times: Vec<Duration> = chunks.iter().take(3).map(|c| c.1).collect();
    assert_due(&times, ms(400), ms(50));
    // A whole answer comes after TTFT and every gap: 400 + 2 × 50 ms.
    let mut w = Wire::open(&s);
    let body = Kind::Chat.body(json!({"messages": [{"role": "user", "content": prompt}]}));
    w.send(&post("/v1/chat/completions", &body));
    let r = w.whole();
    let took = w.sent.elapsed();
    whole_answer(Kind::Chat, &r, &json_of(&r));
    assert_due(&[took], ms(500), Duration::ZERO);
}

// ---- capacity= as max-num-seqs ----

/// A streamed request sent on its own connection by a thread: when (on the test's clock) its head
/// and each token chunk came.
struct Timed {
    sent: Instant,
    head: Instant,
    tokens: Vec<Instant>,
}

/// Sends a streamed chat request on a new connection now, reads it all in a thread.
fn stream_in_thread(s: &Server, path: &str, body: String) -> thread::JoinHandle<Timed> {
    let mut w = Wire::open(s);
    let path = path.to_string();
    thread::spawn(move || {
        let sent = Instant::now();
        w.send(&post(&path, &body));
        let head = w.head();
        let head_at = Instant::now();
        assert_eq!(head.status, 200, "{}", head.head);
        let mut pieces = Vec::new();
        let mut at = Vec::new();
        while let Some((c, _)) = w.chunk().expect("the last chunk") {
            at.push(Instant::now());
            pieces.push(String::from_utf8_lossy(&c).into_owned());
        }
        let n = streamed_answer(Kind::Chat, &pieces).tokens.len();
        Timed {
            sent,
            head: head_at,
            tokens: at[..n].to_vec(),
        }
    })
}

#[test]
fn with_capacity_1_a_second_stream_waits_for_the_firsts_last_token() {
    let _quiet = quiet();
    let s = start(&["/v1/* openai=on tokens=4 gap=100ms capacity=1"], &[]);
    let body = || Kind::Chat.body(json!({"stream": true}));
    let first = stream_in_thread(&s, "/v1/chat/completions", body());
    thread::sleep(ms(50));
    let second = stream_in_thread(&s, "/v1/chat/completions", body());
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    assert_eq!((first.tokens.len(), second.tokens.len()), (4, 4));
    // The sequence holds its server to its last token: a server freed a gap early would start the
    // second 100 ms sooner.
    let last = *first.tokens.last().unwrap();
    let slack = ms(20);
    assert!(
        second.tokens[0] + slack >= last,
        "the second's first token {:?} before the first's last",
        last - second.tokens[0]
    );
    assert!(
        second.head + slack >= last,
        "the second's head {:?} before the first's last token (it waits in the queue)",
        last - second.head
    );
    // The pool's wait in the ground truth: the second queued from ~50 ms to the first's end at 300.
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 2);
    let wait = &entry(&t, "/v1/*")["wait_us"];
    assert_eq!(num(wait, &["count"]), 2.0, "{wait}");
    assert!(num(wait, &["max"]) >= 200_000.0, "{wait}");
}

#[test]
fn with_capacity_1_a_client_that_leaves_mid_stream_frees_the_slot_at_once() {
    let _quiet = quiet();
    // 40 tokens 50 ms apart: the first stream would hold the slot for 2 s.
    let s = start(&["/v1/* openai=on tokens=40 gap=50ms capacity=1"], &[]);
    let body = Kind::Chat.body(json!({"stream": true, "max_tokens": 100}));
    let mut first = Wire::open(&s);
    first.send(&post("/v1/chat/completions", &body));
    assert_eq!(first.head().status, 200);
    for _ in 0..2 {
        first.chunk().expect("a token").expect("not the last");
    }
    let mut second = Wire::open(&s);
    second.send(&post("/v1/chat/completions", &body));
    assert!(
        second.quiet_for(ms(200)),
        "the second stream answered while the first holds the only slot"
    );
    drop(first);
    let left = Instant::now();
    let st = second.streamed();
    let a = stream_answer(Kind::Chat, &st);
    assert_eq!(a.tokens.len(), 40);
    let waited = (second.sent + st.chunks[0].1).saturating_duration_since(left);
    assert!(
        waited < ms(500),
        "the second's first token {waited:?} after the first client left (its stream had ~1.8 s to go)"
    );
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 1);
    let e = entry(&t, "/v1/*");
    assert_eq!(outcome(e, "gone"), 1, "{e}");
    assert_eq!(num(e, &["stream", "left"]), 1.0, "{e}");
    assert_eq!(outcome(e, "200"), 1, "{e}");
}

#[test]
fn with_capacity_1_an_http2_stream_the_client_cancels_frees_the_slot_at_once() {
    let _quiet = quiet();
    let s = start(
        &["/v1/* openai=on tokens=40 gap=50ms capacity=1"],
        &["--http2"],
    );
    let body = Kind::Chat.body(json!({"stream": true, "max_tokens": 100}));
    let addr = s.addr;
    let rt = runtime();
    let (waited, frames) = rt.block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let first = h2_send(client.clone(), "/v1/chat/completions", &body).await;
        let mut first = first.await.expect("a head").into_body();
        let mut tokens = 0;
        while tokens < 2 {
            let frame = tokio::time::timeout(WAIT, first.data())
                .await
                .expect("data");
            let frame = frame.expect("a token").expect("data");
            let _ = first.flow_control().release_capacity(frame.len());
            tokens += usize::from(!frame.is_empty());
        }
        let second = h2_send(client, "/v1/chat/completions", &body).await;
        tokio::pin!(second);
        let early = tokio::time::timeout(ms(200), &mut second).await;
        assert!(
            early.is_err(),
            "the second stream answered while the first holds the only slot"
        );
        // Dropping the body cancels the stream (RST_STREAM CANCEL).
        drop(first);
        let left = Instant::now();
        let head = tokio::time::timeout(WAIT, second).await.expect("a head");
        let mut body = head.expect("a head").into_body();
        let out = h2_body(&mut body, left).await;
        assert!(out.error.is_none(), "the stream: {:?}", out.error);
        (out.frames.first().expect("a token").1, out.texts())
    });
    assert_eq!(streamed_answer(Kind::Chat, &frames).tokens.len(), 40);
    assert!(
        waited < ms(500),
        "the second's first token {waited:?} after the first was cancelled (its stream had ~1.8 s to go)"
    );
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 1);
    let e = entry(&t, "/v1/*");
    assert_eq!((outcome(e, "gone"), outcome(e, "200")), (1, 1), "{e}");
}

#[test]
fn with_capacity_1_a_client_that_leaves_a_whole_answer_frees_the_slot_at_once() {
    let _quiet = quiet();
    // 50 tokens 100 ms apart: a whole answer would hold the slot for 5 s.
    let s = start(
        &["/v1/* openai=on tokens=50 gap=100ms capacity=1"],
        &["--http2"],
    );
    let long = Kind::Completion.body(json!({"max_tokens": 100}));
    let short = Kind::Completion.body(json!({"max_tokens": 1}));
    let running = |n: f64| [("vllm:num_requests_running", n)];
    // Over HTTP/1.1 the client closes its connection; the next request is served at once.
    let mut first = Wire::open(&s);
    first.send(&post("/v1/completions", &long));
    metrics_when(&s, "statico", &running(1.0)).unwrap();
    drop(first);
    let left = Instant::now();
    metrics_when(&s, "statico", &running(0.0)).unwrap();
    let (r, _) = ask(&s, "/v1/completions", &short);
    assert_eq!(r.status, 200);
    assert!(
        left.elapsed() < ms(1000),
        "the next answer {:?} after the first client left (its answer had ~5 s to go)",
        left.elapsed()
    );
    // Over HTTP/2 the client cancels its stream (dropping its answer to come).
    let addr = s.addr;
    let waited = runtime().block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let first = h2_send(client.clone(), "/v1/completions", &long).await;
        let early = tokio::time::timeout(ms(300), first).await;
        assert!(early.is_err(), "a 5 s answer came within 300 ms");
        let left = Instant::now();
        let second = h2_send(client, "/v1/completions", &short).await;
        let head = tokio::time::timeout(WAIT, second).await.expect("a head");
        let mut body = head.expect("a head").into_body();
        let out = h2_body(&mut body, left).await;
        assert!(out.error.is_none(), "the answer: {:?}", out.error);
        left.elapsed()
    });
    assert!(
        waited < ms(1000),
        "the next answer {waited:?} after the first was cancelled (its answer had ~5 s to go)"
    );
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 2);
    let e = entry(&t, "/v1/*");
    assert_eq!((outcome(e, "gone"), outcome(e, "200")), (2, 2), "{e}");
    metrics_when(&s, "statico", &running(0.0)).unwrap();
}

// ---- Start-up errors ----

#[test]
fn an_openai_route_not_ending_in_a_star_or_with_body_or_stream_keys_exits_2_in_one_line() {
    let line = statico_tests::refused_in_one_line(&["--route", "/v1 openai=on"]);
    assert!(line.contains("/*"), "{line}");
    // Each names itself and what replaces it: `tokens=`, or the request's `stream`.
    for key in [
        "stream=sse",
        "events=5",
        "event=x",
        "event-size=100",
        "body=x",
        "size=1k",
        "rate=1k",
        "body-delay=10ms",
    ] {
        let spec = format!("/v1/* openai=on {key}");
        let line = statico_tests::refused_in_one_line(&["--route", &spec]);
        let name = key.split('=').next().unwrap();
        assert!(
            line.contains(name) && (line.contains("tokens") || line.contains("stream")),
            "{spec:?}: {line}"
        );
    }
}

// ---- The routes file and the control API ----

#[test]
fn the_routes_file_and_put_routes_take_an_openai_route() {
    let dir = statico_tests::scratch_dir("openai", "toml");
    let file = dir.join("routes.toml");
    std::fs::write(
        &file,
        "[[route]]\npath = \"/v1/*\"\nopenai = \"on\"\nmodel = [\"llama\", \"qwen\"]\n\
         tokens = 3\ngap = \"5ms\"\n",
    )
    .unwrap();
    let s = Server::start(&["--routes", file.to_str().unwrap(), "--admin", "127.0.0.1:0"]);
    let mut w = Wire::open(&s);
    w.send(&statico_tests::get("/v1/models"));
    let ids: Vec<Value> = (json_of(&w.whole())["data"].as_array().unwrap().iter())
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids, [json!("llama"), json!("qwen")]);
    let body = Kind::Chat.body(json!({"model": "qwen", "stream": true}));
    w.send(&post("/v1/chat/completions", &body));
    let a = stream_answer(Kind::Chat, &w.streamed());
    assert_eq!((a.tokens.len(), a.model.as_str()), (3, "qwen"));
    // Put in place of it: another model, and stream keys refused whole, naming what replaces them.
    let table = "[[route]]\npath = \"/v1/*\"\nopenai = \"on\"\nmodel = \"m2\"\ntokens = 2\n";
    let r = admin(&s, "PUT", "/routes", table);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (r, v) = ask(
        &s,
        "/v1/chat/completions",
        &Kind::Chat.body(json!({"model": null})),
    );
    let a = whole_answer(Kind::Chat, &r, &v);
    assert_eq!((a.tokens.len(), a.model.as_str()), (2, "m2"));
    let bad = "[[route]]\npath = \"/v1/*\"\nopenai = \"on\"\nevents = 5\n";
    let r = admin(&s, "PUT", "/routes", bad);
    let text = String::from_utf8_lossy(&r.body);
    assert!((400..500).contains(&r.status), "{}{text}", r.head);
    assert!(text.contains("events") && text.contains("tokens"), "{text}");
    let (r, v) = ask(
        &s,
        "/v1/chat/completions",
        &Kind::Chat.body(json!({"model": "m2"})),
    );
    assert_eq!(whole_answer(Kind::Chat, &r, &v).tokens.len(), 2);
}

// ---- Ground truth and metrics ----

#[test]
fn ground_truth_counts_the_tokens_and_the_drawn_first_and_gaps() {
    let s = start(
        &["/v1/* openai=on tokens=4 first=30ms prefill=1ms gap=10ms"],
        &["--admin", "127.0.0.1:0"],
    );
    // "abcdefgh": 2 prompt tokens, so each first token is drawn at 30 + 2 × 1 ms.
    let body = |stream: bool| {
        Kind::Chat.body(json!({
            "messages": [{"role": "user", "content": "abcdefgh"}],
            "stream": stream,
        }))
    };
    let mut w = Wire::open(&s);
    for _ in 0..5 {
        w.send(&post("/v1/chat/completions", &body(true)));
        assert_eq!(stream_answer(Kind::Chat, &w.streamed()).tokens.len(), 4);
    }
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 5);
    let e = entry(&t, "/v1/*");
    assert_eq!(outcome(e, "200"), 5, "{e}");
    let stream = &e["stream"];
    assert_eq!(num(stream, &["events"]), 20.0, "{stream}");
    assert_eq!(num(stream, &["left"]), 0.0, "{stream}");
    let first = &stream["first_us"];
    assert_eq!(num(first, &["count"]), 5.0, "{first}");
    let mean = num(first, &["mean"]);
    assert!(
        (31_700.0..=32_300.0).contains(&mean),
        "first_us (first 30 ms + 2 × prefill 1 ms): {first}"
    );
    let gap = &stream["gap_us"];
    assert_eq!(num(gap, &["count"]), 15.0, "{gap}");
    let mean = num(gap, &["mean"]);
    assert!((9_900.0..=10_100.0).contains(&mean), "gap_us: {gap}");
    // One lateness per token given.
    assert_eq!(num(&stream["late_us"], &["count"]), 20.0, "{stream}");
    // A whole answer records its drawn total, 32 + 3 × 10 ms, as its delay.
    w.send(&post("/v1/chat/completions", &body(false)));
    read_whole(&mut w, Kind::Chat);
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 6);
    let drawn = &entry(&t, "/v1/*")["drawn_us"];
    let max = num(drawn, &["max"]);
    assert!(
        (61_500.0..=62_500.0).contains(&max),
        "drawn_us (a whole answer's 62 ms the longest): {drawn}"
    );
    // The control API's document says the same.
    let from_admin = admin_truth(&s);
    let events = num(&entry(&from_admin, "/v1/*")["stream"], &["events"]);
    assert_eq!(events, 20.0, "{from_admin}");
}

/// The value of series `name` whose labels include `model_name="MODEL"` on a metrics page.
fn vllm(page: &str, name: &str, model: &str) -> Option<f64> {
    let label = format!("model_name=\"{model}\"");
    page.lines().find_map(|l| {
        let (labels, value) = l.strip_prefix(name)?.strip_prefix('{')?.split_once("} ")?;
        let ours = labels.split(',').any(|kv| kv == label);
        ours.then(|| value.trim().parse().ok())?
    })
}

/// Polls `/metrics` until every `(series, value)` of `want` for `model` holds, for up to 3 s; the
/// page, or the failure with it.
fn metrics_when(s: &Server, model: &str, want: &[(&str, f64)]) -> Result<String, String> {
    let deadline = Instant::now() + ms(3000);
    loop {
        let page = s.scrape("/metrics");
        let off: Vec<String> = want
            .iter()
            .filter(|(name, v)| vllm(&page, name, model) != Some(*v))
            .map(|(name, v)| format!("{name} {:?}, not {v}", vllm(&page, name, model)))
            .collect();
        if off.is_empty() {
            return Ok(page);
        }
        if Instant::now() > deadline {
            let ours: Vec<&str> = page.lines().filter(|l| l.starts_with("vllm:")).collect();
            return Err(format!("{off:?} in\n{}", ours.join("\n")));
        }
        thread::sleep(ms(20));
    }
}

#[test]
fn vllm_gauges_show_running_and_waiting_streams_with_capacity_1() {
    let s = start(
        &["/v1/* openai=on model=llama model=other tokens=20 gap=100ms capacity=1"],
        &[],
    );
    let idle = [
        ("vllm:num_requests_running", 0.0),
        ("vllm:num_requests_waiting", 0.0),
        ("vllm:kv_cache_usage_perc", 0.0),
    ];
    metrics_when(&s, "llama", &idle).unwrap();
    let body = Kind::Chat.body(json!({"stream": true, "max_tokens": 100}));
    let mut running = Wire::open(&s);
    running.send(&post("/v1/chat/completions", &body));
    assert_eq!(running.head().status, 200);
    running.chunk().expect("a token");
    let mut waiting = Wire::open(&s);
    waiting.send(&post("/v1/chat/completions", &body));
    let held = [
        ("vllm:num_requests_running", 1.0),
        ("vllm:num_requests_waiting", 1.0),
        ("vllm:kv_cache_usage_perc", 1.0),
    ];
    metrics_when(&s, "llama", &held).unwrap();
    drop((running, waiting));
    metrics_when(&s, "llama", &idle).unwrap();
}

#[test]
fn gap_inflight_grows_the_gaps_with_the_sequences_running_which_vllm_counts_to_their_last_token() {
    let _quiet = quiet();
    // Each gap is 20 ms + 20 ms × the route's sequences in flight when it is drawn.
    let s = start(
        &["/v1/* openai=on model=m tokens=6 gap=inflight:20ms:20ms"],
        &[],
    );
    let body = || Kind::Chat.body(json!({"model": "m", "stream": true}));
    // From the request to its last token: at the soonest the gaps drawn (the server can only be
    // late).
    let spread = |t: &Timed| *t.tokens.last().unwrap() - t.sent;
    // Alone: five gaps of 40 ms.
    let alone = stream_in_thread(&s, "/v1/chat/completions", body())
        .join()
        .unwrap();
    assert!(spread(&alone) + ms(1) >= ms(200), "{:?}", spread(&alone));
    // Three at once: once all three run, every gap is 80 ms (the ground truth's drawn gaps say so
    // exactly; a client's clock only that none was shorter, as a client may be scheduled late to
    // send), and vLLM's gauge counts them until their last token.
    let three: Vec<_> = (0..3)
        .map(|_| stream_in_thread(&s, "/v1/chat/completions", body()))
        .collect();
    metrics_when(&s, "m", &[("vllm:num_requests_running", 3.0)]).unwrap();
    for t in three {
        let t = t.join().unwrap();
        assert_eq!(t.tokens.len(), 6);
        assert!(
            spread(&t) + ms(1) >= ms(200),
            "three at once: the last token {:?} after the request",
            spread(&t)
        );
    }
    metrics_when(&s, "m", &[("vllm:num_requests_running", 0.0)]).unwrap();
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 4);
    let gap = &entry(&t, "/v1/*")["stream"]["gap_us"];
    assert_eq!(num(gap, &["count"]), 20.0, "{gap}");
    assert!((79_000.0..=81_000.0).contains(&num(gap, &["max"])), "{gap}");
}

/// statico with one openai route of model `m1` (4 tokens, first 20 ms, gaps 5 ms), after 3 whole
/// answers and then 2 streams of 4 tokens each, for prompts of 2 tokens ("abcdefgh").
fn after_three_whole_answers_and_two_streams() -> Server {
    let s = start(
        &["/v1/* openai=on model=m1 tokens=4 first=20ms gap=5ms"],
        &[],
    );
    let mut w = Wire::open(&s);
    for stream in [false, false, false, true, true] {
        let body =
            Kind::Completion.body(json!({"model": "m1", "prompt": "abcdefgh", "stream": stream}));
        w.send(&post("/v1/completions", &body));
        if stream {
            let tokens = stream_answer(Kind::Completion, &w.streamed()).tokens;
            assert_eq!(tokens.len(), 4);
        } else {
            read_whole(&mut w, Kind::Completion);
        }
    }
    s
}

/// The `_sum` of histogram `name` for model `m1` on `page`.
fn sum_of(page: &str, name: &str) -> f64 {
    let series = format!("{name}_sum");
    vllm(page, &series, "m1").unwrap_or_else(|| panic!("no {series} in\n{page}"))
}

#[test]
fn vllm_counters_count_the_tokens_and_e2e_latency_every_request() {
    let _quiet = quiet();
    let s = after_three_whole_answers_and_two_streams();
    let want = [
        ("vllm:prompt_tokens_total", 10.0),
        ("vllm:generation_tokens_total", 20.0),
        ("vllm:e2e_request_latency_seconds_count", 5.0),
        ("vllm:num_requests_running", 0.0),
    ];
    let page = metrics_when(&s, "m1", &want).unwrap();
    // Each answer's 20 + 3 × 5 ms, and the lateness the server added (held, not drawn: up to 20 ms
    // each under load).
    let (sum, drawn) = (
        sum_of(&page, "vllm:e2e_request_latency_seconds"),
        5.0 * 0.035,
    );
    assert!(
        sum >= drawn - 0.001 && sum < drawn + 0.1,
        "e2e sum {sum} s, drawn {drawn} s"
    );
}

#[test]
fn vllm_e2e_latency_leaves_out_requests_refused_before_they_are_scheduled() {
    let _quiet = quiet();
    let s = after_three_whole_answers_and_two_streams();
    let mut w = Wire::open(&s);
    w.send(&post("/v1/completions", "not json"));
    assert_eq!(w.whole().status, 400);
    w.send(&post("/v1/embeddings", "{}"));
    assert_eq!(w.whole().status, 404);
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "404") >= 1);
    let e = entry(&t, "/v1/*");
    assert_eq!((outcome(e, "400"), outcome(e, "200")), (1, 5), "{e}");
    let want = [
        ("vllm:e2e_request_latency_seconds_count", 5.0),
        ("vllm:generation_tokens_total", 20.0),
    ];
    metrics_when(&s, "m1", &want).unwrap();
}

#[test]
fn a_whole_answer_whose_client_left_counts_no_completion_tokens() {
    let _quiet = quiet();
    // 30 tokens 100 ms apart: a whole answer goes after 3 s.
    let s = start(&["/v1/* openai=on tokens=30 gap=100ms"], &["--http2"]);
    let long = Kind::Completion.body(json!({"max_tokens": 100}));
    // One client leaves over HTTP/1.1, one cancels its HTTP/2 stream, both before their answers.
    let mut first = Wire::open(&s);
    first.send(&post("/v1/completions", &long));
    assert!(first.quiet_for(ms(200)), "a 3 s answer came within 200 ms");
    drop(first);
    let addr = s.addr;
    runtime().block_on(async move {
        let (client, _) = h2_connect(addr).await;
        let second = h2_send(client, "/v1/completions", &long).await;
        let early = tokio::time::timeout(ms(200), second).await;
        assert!(early.is_err(), "a 3 s answer came within 200 ms");
    });
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "gone") >= 2);
    let (r, v) = ask(
        &s,
        "/v1/completions",
        &Kind::Completion.body(json!({"max_tokens": 2})),
    );
    assert_eq!(whole_answer(Kind::Completion, &r, &v).tokens.len(), 2);
    let left = num(&entry(&t, "/v1/*")["stream"], &["completion_tokens"]);
    assert_eq!(left, 0.0, "the tokens of two answers never given: {t}");
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 1);
    let e = entry(&t, "/v1/*");
    assert_eq!(num(&e["stream"], &["completion_tokens"]), 2.0, "{e}");
    metrics_when(&s, "statico", &[("vllm:generation_tokens_total", 2.0)]).unwrap();
}

#[test]
fn a_whole_answer_a_fault_replaces_counts_no_completion_tokens() {
    let _quiet = quiet();
    let s = start(&["/v1/* openai=on tokens=5 fault=reset:100%"], &[]);
    let mut c = Wire::open(&s);
    c.send(&post("/v1/completions", &Kind::Completion.body(json!({}))));
    let (got, end) = c.until_closed();
    assert!(
        matches!(end, End::Failed(ErrorKind::ConnectionReset)),
        "{end:?} after {got:?}"
    );
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "reset") >= 1);
    let tokens = num(&entry(&t, "/v1/*")["stream"], &["completion_tokens"]);
    assert_eq!(tokens, 0.0, "a reset answer gives out no tokens: {t}");
    metrics_when(&s, "statico", &[("vllm:generation_tokens_total", 0.0)]).unwrap();
}

#[test]
fn a_client_that_never_reads_a_long_stream_holds_bounded_memory() {
    // 100 000 tokens (the most an answer has) due at once, each chunk 1 KB with the model's name it
    // echoes: 100 MB of chunks if the server made them faster than the client takes them.
    let s = start(&["/v1/* openai=on"], &["-t", "1"]);
    let before = rss_kib(s.pid());
    let model = "m".repeat(1000);
    let body = Kind::Chat.body(json!({
        "model": model,
        "stream": true,
        "ignore_eos": true,
        "max_tokens": 100_000,
    }));
    let c = s.connect();
    (&c).write_all(&post("/v1/chat/completions", &body))
        .unwrap();
    let sent = Instant::now();
    let mut peak = 0;
    while sent.elapsed() < ms(1500) {
        peak = peak.max(rss_kib(s.pid()));
        thread::sleep(ms(20));
    }
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one stream nobody reads"
    );
    drop(c);
    // Gone, and the server goes on.
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "gone") >= 1);
    assert_eq!(outcome(entry(&t, "/v1/*"), "gone"), 1, "{t}");
    let (r, v) = ask(&s, "/v1/chat/completions", &Kind::Chat.body(json!({})));
    whole_answer(Kind::Chat, &r, &v);
}

// ---- Slow and silent clients over HTTP/2 ----

/// A raw HTTP/2 connection to `s` (frames written by hand, as `http2_hostile.rs` writes them) whose
/// client SETTINGS are `settings`, with a POST of the JSON `body` to `path` on stream `stream`.
fn h2_raw_post(
    s: &Server,
    settings: &[(u16, u32)],
    stream: u32,
    body: &str,
) -> std::net::TcpStream {
    use crate::http2_hostile::{data, request, PREFACE};
    let mut c = s.connect();
    c.set_nodelay(true).unwrap();
    let length = body.len().to_string();
    let head = request(
        stream,
        "POST",
        "/v1/chat/completions",
        false,
        &[
            ("content-type", "application/json"),
            ("content-length", &length),
        ],
    );
    let hello = [
        PREFACE,
        &crate::http2_hostile::settings(settings),
        &head,
        &data(stream, body.as_bytes(), true),
    ]
    .concat();
    c.write_all(&hello).unwrap();
    c
}

#[test]
fn http2_a_client_that_reads_slowly_gets_every_token_late_and_the_ground_truth_says_how_late() {
    use crate::http2_hostile::{window_update, Frames, Quiet, DATA, INITIAL_WINDOW};
    let _quiet = quiet();
    let s = start(
        &["/v1/* openai=on model=m tokens=20 gap=20ms"],
        &["--http2", "-t", "1"],
    );
    let body = Kind::Chat.body(json!({"model": "m", "stream": true, "max_tokens": 20}));
    // A stream window of none: the client gives 300 bytes more every 100 ms, a token's chunk or
    // two, where the route makes one every 20 ms.
    let mut c = h2_raw_post(&s, &[(INITIAL_WINDOW, 0)], 1, &body);
    let mut frames = Frames::new(&c);
    let start = Instant::now();
    let mut pieces = Vec::new();
    'read: loop {
        assert!(start.elapsed() < WAIT, "the stream did not end: {pieces:?}");
        c.write_all(&window_update(1, 300)).unwrap();
        let next = Instant::now() + ms(100);
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            match frames.next(left) {
                Ok(f) if f.kind == DATA && f.stream == 1 => {
                    if !f.payload.is_empty() {
                        pieces.push(String::from_utf8(f.payload).unwrap());
                    }
                    if f.flags & 1 == 1 {
                        break 'read;
                    }
                }
                Ok(_) => {}
                Err(Quiet::Waited) => break,
                Err(Quiet::Closed) => panic!("closed after {pieces:?}"),
            }
        }
    }
    let took = start.elapsed();
    let a = streamed_answer(Kind::Chat, &pieces);
    assert_eq!(a.tokens.len(), 20);
    assert!(
        took > ms(1000),
        "20 tokens through 300 bytes a 100 ms came in {took:?}"
    );
    // Each token went when the window let it: the last, due at 380 ms, went over half a second
    // late, and the ground truth says so (the drawn gaps are as drawn).
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= 1);
    let stream = &entry(&t, "/v1/*")["stream"];
    assert_eq!(num(stream, &["events"]), 20.0, "{stream}");
    assert_eq!(num(&stream["late_us"], &["count"]), 20.0, "{stream}");
    let late = num(&stream["late_us"], &["max"]);
    assert!(late > 500_000.0, "late_us {stream}");
    assert!(late < took.as_micros() as f64, "late_us {stream}");
    let gap = num(&stream["gap_us"], &["mean"]);
    assert!((19_900.0..=20_100.0).contains(&gap), "gap_us {stream}");
    // The connection goes on: a second request on it, its window opened, is answered whole.
    let length = body.len().to_string();
    let second = crate::http2_hostile::request(
        3,
        "POST",
        "/v1/chat/completions",
        false,
        &[
            ("content-type", "application/json"),
            ("content-length", &length),
        ],
    );
    c.write_all(&[second, crate::http2_hostile::data(3, body.as_bytes(), true)].concat())
        .unwrap();
    c.write_all(&window_update(3, 1 << 20)).unwrap();
    let mut pieces = Vec::new();
    loop {
        let f = frames.next(WAIT).expect("the second answer");
        if f.kind == DATA && f.stream == 3 {
            if !f.payload.is_empty() {
                pieces.push(String::from_utf8(f.payload).unwrap());
            }
            if f.flags & 1 == 1 {
                break;
            }
        }
    }
    assert_eq!(streamed_answer(Kind::Chat, &pieces).tokens.len(), 20);
    drop((c, frames));
    let stopped = s.stop();
    assert_eq!(
        stopped.total("conns_closed"),
        stopped.total("conns_accepted")
    );
}

#[test]
fn http2_a_client_that_never_reads_a_long_stream_holds_bounded_memory_and_is_closed_when_idle() {
    use crate::http2_hostile::{until_gone, window_update, INITIAL_WINDOW};
    let s = start(
        &["/v1/* openai=on"],
        // A small send buffer: the output stalls at once, not when the kernel stops growing it.
        &[
            "--http2",
            "-t",
            "1",
            "--send-buffer-size",
            "64k",
            "--idle-timeout",
            "2s",
        ],
    );
    let before = rss_kib(s.pid());
    // 100 000 chunks of 1 KB due at once, the largest windows, and not a byte read.
    let body = Kind::Chat.body(json!({
        "model": "m".repeat(1000),
        "stream": true,
        "ignore_eos": true,
        "max_tokens": 100_000,
    }));
    let mut c = h2_raw_post(&s, &[(INITIAL_WINDOW, 0x7fff_ffff)], 1, &body);
    c.write_all(&window_update(0, 0x7fff_ffff - 65_535))
        .unwrap();
    let (closed, peak) = until_gone(&s, &c, Instant::now(), before);
    statico_tests::assert_memory!(
        peak < before + 64 * 1024,
        "RSS grew from {before} KiB to {peak} KiB for one stream nobody reads"
    );
    // The stream ends once its token has waited for room, and the connection's output stood
    // still, for the idle timeout (2-4 s: output still moving extends the wait once); the
    // connection then closes at once if its output stalled, else idle after its grace.
    assert!(closed < ms(8500), "closed {closed:?} after the request");
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "gone") >= 1);
    let stream = &entry(&t, "/v1/*")["stream"];
    assert_eq!(num(stream, &["left"]), 1.0, "{stream}");
    // The tokens that went before the socket filled; the one waiting for room never went.
    assert!(num(stream, &["events"]) < 100_000.0, "{stream}");
}

#[test]
fn a_garbage_or_truncated_body_is_a_400_and_the_connection_goes_on() {
    let s = start(&["/v1/* openai=on tokens=2"], &[]);
    let mut w = Wire::open(&s);
    for body in [
        &b"\x00\xff\xfe garbage \x01"[..],
        b"{\"model\": \"llama\", \"messages\": [{\"role\": \"user\", \"content\": \"hi",
        b"{}}",
    ] {
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        w.send(&[head.as_bytes(), body].concat());
        let e = openai_error(&w.whole(), 400);
        assert_eq!(e["type"], "invalid_request_error", "{e}");
    }
    w.send(&post("/v1/chat/completions", &Kind::Chat.body(json!({}))));
    read_whole(&mut w, Kind::Chat);
}

#[test]
fn a_body_trickled_a_byte_at_a_time_is_answered_timed_from_its_last_byte() {
    let _quiet = quiet();
    let s = start(&["/v1/* openai=on tokens=3 first=100ms"], &[]);
    let body = Kind::Chat.body(json!({"stream": true}));
    let head = |framing: &str| {
        format!("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{framing}\r\n\r\n")
    };
    // By Content-Length, then chunked (a chunk per byte): each byte of the body 3 ms after the one
    // before, the head at once.
    let chunked: Vec<u8> = (body.bytes())
        .flat_map(|b| [b'1', b'\r', b'\n', b, b'\r', b'\n'])
        .chain(*b"0\r\n\r\n")
        .collect();
    let mut w = Wire::open(&s);
    for (head, bytes) in [
        (
            head(&format!("Content-Length: {}", body.len())),
            body.as_bytes(),
        ),
        (head("Transfer-Encoding: chunked"), &chunked[..]),
    ] {
        w.send(head.as_bytes());
        let started = Instant::now();
        for byte in bytes {
            thread::sleep(ms(3));
            w.send(&[*byte]);
        }
        let trickled = started.elapsed();
        let st = w.streamed();
        let a = stream_answer(Kind::Chat, &st);
        assert_eq!(a.tokens.len(), 3);
        // Timed from the last byte: first=100ms, neither answered before the body was whole nor
        // late by the trickle's length.
        assert!(trickled > ms(100), "trickled over {trickled:?}");
        assert_due(&[st.chunks[0].1], ms(100), Duration::ZERO);
    }
}

// ---- Real clients: the openai SDK and aiperf ----

/// A file of the Python drivers in `tests/openai/`.
fn driver(name: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openai");
    dir.join(name).to_str().unwrap().to_string()
}

/// Whether `python` can import `module`.
fn imports(python: &str, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_openai_sdk_streams_answers_whole_and_raises_its_typed_errors() {
    if !imports("python3", "openai") {
        println!("SKIPPED: the_openai_sdk_… needs the openai Python package (cargo xtask setup)");
        return;
    }
    let s = start(
        &[
            "/v1/* openai=on model=llama tokens=5",
            "/limited/* openai=on model=llama status=429",
        ],
        &[],
    );
    let (ok, out, err) = run_client(
        "python3",
        &[&driver("sdk.py"), &s.url("/v1"), &s.url("/limited")],
    );
    assert!(ok, "sdk.py: {err}\n{out}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["models"], json!(["llama"]), "{r}");
    // Whole chat: 5 tokens of at most 10 stop; the prompt "Say hello in a few words." is 25 bytes.
    let chat = &r["chat"];
    assert_eq!(chat["object"], "chat.completion", "{chat}");
    assert_eq!(chat["role"], "assistant", "{chat}");
    assert_eq!(chat["finish_reason"], "stop", "{chat}");
    assert_eq!(split_tokens(chat["content"].as_str().unwrap()).len(), 5);
    let usage = json!({"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12});
    assert_eq!(chat["usage"], usage, "{chat}");
    // Streamed: 5 deltas, the role in the first only, `stop` in the last, then the usage.
    let st = &r["chat_stream"];
    let roles = st["roles"].as_array().unwrap();
    assert_eq!(roles.len(), 5, "{st}");
    assert_eq!(roles[0], "assistant", "{st}");
    assert!(roles[1..].iter().all(Value::is_null), "{st}");
    let finishes = st["finish_reasons"].as_array().unwrap();
    assert_eq!(finishes[4], "stop", "{st}");
    assert!(finishes[..4].iter().all(Value::is_null), "{st}");
    for c in st["contents"].as_array().unwrap() {
        assert_token(c.as_str().unwrap());
    }
    assert_eq!(st["usage"], usage, "{st}");
    let cut = &r["chat_stream_cut"];
    assert_eq!(
        cut["finish_reasons"],
        json!([null, null, "length"]),
        "{cut}"
    );
    // Completions: "Once upon a time" is 16 bytes, 4 prompt tokens.
    let completion = &r["completion"];
    assert_eq!(completion["object"], "text_completion", "{completion}");
    assert_eq!(completion["finish_reason"], "stop", "{completion}");
    let usage = json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9});
    assert_eq!(completion["usage"], usage, "{completion}");
    let cst = &r["completion_stream"];
    assert_eq!(cst["texts"].as_array().unwrap().len(), 3, "{cst}");
    assert_eq!(
        cst["finish_reasons"],
        json!([null, null, "length"]),
        "{cst}"
    );
    // The typed errors, with max_retries=0.
    for (case, class, status, code) in [
        (
            "rate_limited",
            "RateLimitError",
            429,
            json!("rate_limit_exceeded"),
        ),
        ("bad_request", "BadRequestError", 400, Value::Null),
        ("not_found", "NotFoundError", 404, json!("model_not_found")),
    ] {
        let e = &r[case];
        assert_eq!(e["class"], class, "{case}: {e}");
        assert_eq!(e["status"], status, "{case}: {e}");
        assert_eq!(e["code"], code, "{case}: {e}");
    }
    assert_eq!(r["bad_request"]["param"], "max_tokens", "{r}");
    assert_eq!(r["not_found"]["param"], "model", "{r}");
}

/// aiperf's venv: `$STATICO_AIPERF_VENV`, which `cargo xtask test` sets to the one `cargo xtask
/// setup` makes.
fn aiperf_venv() -> Option<std::path::PathBuf> {
    std::env::var_os("STATICO_AIPERF_VENV").map(Into::into)
}

/// A figure of aiperf's summary (`profile_export_aiperf.json`), e.g. `time_to_first_token` `p50`, in
/// its unit (ms for times).
fn aiperf_figure(summary: &Value, metric: &str, stat: &str) -> f64 {
    summary[metric][stat]
        .as_f64()
        .unwrap_or_else(|| panic!("no {metric}.{stat} in aiperf's summary"))
}

#[test]
fn aiperf_measures_the_ttft_and_itl_the_server_drew() {
    let Some(venv) = aiperf_venv().filter(|v| v.join("bin/aiperf").is_file()) else {
        println!(
            "SKIPPED: aiperf_measures_… needs aiperf 0.13 in $STATICO_AIPERF_VENV ({:?}; cargo xtask \
             setup makes it, cargo xtask test sets it)",
            aiperf_venv()
        );
        return;
    };
    let (aiperf, python) = (venv.join("bin/aiperf"), venv.join("bin/python"));
    let _quiet = quiet();
    // Without tokens=, each request gets exactly the max_tokens aiperf asks for (10): so its
    // per-request ITL (the mean of 9 gaps) averages to the mean of all the gaps drawn. A first token
    // of 80 ms or so, so that 20% of it covers what aiperf's own client adds (~5 ms here).
    let s = start(
        &["/v1/* openai=on model=llama first=lognormal:80ms:200ms prefill=100us gap=lognormal:10ms:25ms"],
        &[],
    );
    let dir = statico_tests::scratch_dir("openai", "aiperf");
    let tokenizer = dir.join("tokenizer");
    let (ok, _, err) = run_client(
        python.to_str().unwrap(),
        &[&driver("tokenizer.py"), tokenizer.to_str().unwrap()],
    );
    assert!(ok, "tokenizer.py: {err}");
    let requests = 40;
    let artifacts = dir.join("artifacts");
    let out = Command::new(&aiperf)
        .args(["profile", "--model", "llama", "--url", &s.url("")])
        .args(["--endpoint-type", "chat", "--streaming"])
        .args(["--tokenizer", tokenizer.to_str().unwrap()])
        .args([
            "--request-count",
            &requests.to_string(),
            "--concurrency",
            "4",
        ])
        .args([
            "--prompt-input-tokens-mean",
            "20",
            "--prompt-input-tokens-stddev",
            "0",
        ])
        .args(["--output-tokens-mean", "10", "--output-tokens-stddev", "0"])
        .args(["--random-seed", "1", "--ui", "none"])
        // One worker and one record processor (4 requests at a time need no more): aiperf's own
        // processes would otherwise take a core from the tests timed beside it.
        .args(["--workers-max", "1", "--record-processors", "1"])
        .args(["--no-server-metrics", "--no-gpu-telemetry"])
        .args(["--artifact-dir", artifacts.to_str().unwrap()])
        .output()
        .expect("run aiperf");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "aiperf: {log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(artifacts.join("profile_export_aiperf.json"))
        .unwrap_or_else(|e| panic!("aiperf's summary: {e}\n{log}"));
    let summary: Value = serde_json::from_str(&text).unwrap();
    let t = truth_when(&s, |t| outcome(entry(t, "/v1/*"), "200") >= requests);
    let e = entry(&t, "/v1/*");
    assert_eq!(outcome(e, "200"), requests, "{e}");
    // Every request and token counted the same by both: the word-level tokenizer agrees with usage.
    assert_eq!(
        aiperf_figure(&summary, "request_count", "avg"),
        requests as f64
    );
    assert_eq!(
        aiperf_figure(&summary, "output_sequence_length", "avg"),
        10.0
    );
    assert_eq!(
        aiperf_figure(&summary, "total_osl", "avg"),
        num(e, &["stream", "events"]),
        "{e}"
    );
    // TTFT: aiperf's from its send to the first token, the truth's as drawn (first + prefill):
    // the same within 20% or 5 ms.
    let close = |client: f64, truth: f64| (client - truth).abs() <= (0.2 * truth).max(5.0);
    let first = &e["stream"]["first_us"];
    for (stat, drawn) in [("p50", "p50"), ("avg", "mean")] {
        let (client, truth) = (
            aiperf_figure(&summary, "time_to_first_token", stat),
            num(first, &[drawn]) / 1000.0,
        );
        println!("TTFT {stat}: aiperf {client:.2} ms, drawn {truth:.2} ms");
        assert!(
            client >= truth - 1.0 && close(client, truth),
            "TTFT {stat}: aiperf {client:.2} ms, drawn {truth:.2} ms"
        );
    }
    // ITL: each request's mean gap, averaged, against the mean of all gaps drawn.
    let (client, truth) = (
        aiperf_figure(&summary, "inter_token_latency", "avg"),
        num(&e["stream"]["gap_us"], &["mean"]) / 1000.0,
    );
    println!("ITL mean: aiperf {client:.2} ms, drawn {truth:.2} ms");
    assert!(
        close(client, truth),
        "ITL: aiperf {client:.2} ms, drawn {truth:.2} ms"
    );
}
