//! A route as the user writes it: the `--route SPEC` flag and a `[[route]]` table of a `--routes`
//! document ([`super::table`] reads the document).
//!
//! A route says which requests it answers (methods and a path, exact or prefix) and how: the
//! status (or a mix of statuses), the body, extra headers, delays drawn from a [`Dist`], a pacing
//! rate, and injected faults. This module turns either written form into the same
//! [`RouteSpec`], checking every value so that a mistake is a one-line error naming the bad part
//! (and, for the file, `FILE:LINE`) rather than a surprise while serving.
//!
//! The flag form is `[METHODS] PATH key=value…`, whitespace-separated:
//!
//! ```text
//! GET,HEAD /api/* status=200,503:1% delay=lognormal:10ms:80ms header=Cache-Control:no-store
//! /health body=ok
//! /download/* size=16m rate=1m fault=truncate:0.5%
//! /events stream=sse events=uniform:20:50 first=200ms gap=lognormal:20ms:80ms
//! /pkg.Svc/* grpc-status=UNAVAILABLE:5% delay=5ms
//! /pkg.Svc/Feed events=10 gap=20ms size=64
//! /grpc.health.v1.Health/* health=NOT_SERVING
//! ```
//!
//! Because tokens are split at whitespace, a flag's `body=TEXT` and `header=Name:Value` cannot
//! contain spaces; the TOML form (or `body=@FILE`) can. The file form is an array of `[[route]]`
//! tables with the same keys, plus `path`, `methods` and an optional `name`. Both forms share one
//! parser per key (`Key` and the `parse_*` functions below), so a value means the same thing
//! wherever it is written. A phase's route keys go through the same parsers into a [`RoutePatch`]:
//! what the phase replaces in each route it changes.
//!
//! Reading a `body=@FILE` at parse time is the only I/O.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::{Spanned, Value};

use super::pool_spec::{PoolKeys, PoolSpec};
use crate::catalog::feed::Feed;
use crate::catalog::grpc::messages::ServingStatus;
use crate::catalog::grpc::status::Code;
use crate::catalog::model::dist::Dist;
use crate::catalog::model::events::Count;
/// The faults a route injects, as its spec names them (and [`crate::catalog::model::hold`] takes them).
use crate::catalog::model::fault::Fault;
use crate::catalog::model::units::{parse_percent, parse_size};

/// What a route's path matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathMatch {
    /// Exactly this path: `/health`.
    Exact(String),
    /// Any path starting with this: `/api/*` is `Prefix("/api/")`; `/*` and `*` are
    /// `Prefix("/")`, everything.
    Prefix(String),
}

impl PathMatch {
    /// Parses `/exact`, `/prefix/*` (a `*` only at the very end) or `*`. No spaces, control
    /// characters, `?` or `#`: a route matches the path without its query.
    pub fn parse(s: &str) -> Result<PathMatch, String> {
        const FORM: &str = "expected /PATH, /PREFIX/* or *";
        if s == "*" {
            return Ok(PathMatch::Prefix("/".to_owned()));
        }
        if !s.starts_with('/') {
            return Err(format!("{s:?} does not start with /; {FORM}"));
        }
        if s.contains(|c: char| c.is_whitespace() || c.is_control() || c == '?' || c == '#') {
            return Err(format!(
                "{s:?} has a space, control character, ? or #; {FORM}"
            ));
        }
        match s.strip_suffix('*') {
            Some(prefix) if !prefix.contains('*') => Ok(PathMatch::Prefix(prefix.to_owned())),
            None if !s.contains('*') => Ok(PathMatch::Exact(s.to_owned())),
            _ => Err(format!("{s:?} has a * before its end; {FORM}")),
        }
    }

    /// Whether a request's path (without its query) is one this route answers.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == p,
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

/// Prints the written form: `/health`, `/api/*`.
impl fmt::Display for PathMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathMatch::Exact(p) => f.write_str(p),
            PathMatch::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

/// A route's response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodySpec {
    /// No body (the default).
    Empty,
    /// `body=TEXT`: these bytes (`body=@@x` is the literal text `@x`).
    Text(Vec<u8>),
    /// `body=@FILE`: the file's bytes, read when the route was parsed, and where they came from.
    File(PathBuf, Vec<u8>),
    /// `size=64k`: this many filler bytes.
    Size(u64),
}

/// A route: which requests it answers and how, as written by the user.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteSpec {
    /// A label: the route as written without its keys (`GET,HEAD /api/*`, `/health`), or a
    /// TOML route's `name`.
    pub name: String,
    /// Where it was written, for errors: `--route "…"`, `FILE:LINE`, `PUT /routes:LINE`; a phase's
    /// version, its phase's place and the route's name.
    pub at: String,
    /// The methods answered, uppercased; empty for any method.
    pub methods: Vec<String>,
    /// The paths answered.
    pub path: PathMatch,
    /// The status answered when no `status_mix` entry is drawn: 200 unless given. On a gRPC route
    /// ([`is_method_path`]) the statuses are `grpc-status` codes, OK unless given.
    pub status: u16,
    /// Other statuses and the fraction (0..=1) of responses each gets; the fractions sum to at
    /// most 1, the rest being `status`.
    pub status_mix: Vec<(u16, f64)>,
    /// The body.
    pub body: BodySpec,
    /// Extra response headers, in order, the value trimmed.
    pub headers: Vec<(String, String)>,
    /// How long to wait before responding.
    pub delay: Option<Dist>,
    /// How long to wait between the response head and its body.
    pub body_delay: Option<Dist>,
    /// Faults and the fraction (0..=1) of responses each replaces; the fractions sum to at most 1.
    pub faults: Vec<(Fault, f64)>,
    /// Pace the body at this many bytes per second.
    pub rate: Option<u64>,
    /// The pool the route's requests are served by, if any.
    pub pool: Option<RoutePool>,
    /// The body streamed as events (`stream=`), instead of `body`.
    pub stream: Option<StreamSpec>,
    /// An OpenAI-compatible backend (`openai=on`), instead of `body` and `stream`.
    pub openai: Option<OpenAiSpec>,
    /// A gRPC route's `grpc-message`, sent with every status but OK.
    pub grpc_message: Option<String>,
    /// `health=`: a gRPC route whose reply is a health check's answer with this status; on a
    /// health method's path (`/grpc.health.v1.Health/Check`, `…/Watch`, `…/*`) the built-in
    /// `Watch` reports it too.
    pub health: Option<ServingStatus>,
}

/// An OpenAI-compatible backend's keys (`openai=on` and the keys that shape its tokens): see
/// [`crate::catalog::openai`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenAiSpec {
    /// `model=NAME`, in order; empty: any model.
    pub models: Vec<String>,
    /// `tokens=`: output tokens drawn per request (else the request's `max_tokens`).
    pub tokens: Option<Count>,
    /// `first=`: from the head to the first token.
    pub first: Option<Dist>,
    /// `gap=`: between tokens.
    pub gap: Option<Dist>,
    /// `prefill=`: per prompt token, before the first token.
    pub prefill: Option<Duration>,
    /// `context=`: the context window, in tokens.
    pub context: Option<u64>,
}

/// A streamed body (`stream=sse|ndjson|chunks` and its keys): each request gets `events` events,
/// the first `first` after the head, each next `gap` after the one before.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    pub feed: Feed,
    pub events: Count,
    pub first: Option<Dist>,
    pub gap: Option<Dist>,
    pub event: EventSpec,
}

impl StreamSpec {
    /// A stream of `feed` with none of its keys given: [`DEFAULT_EVENTS`] events of
    /// [`DEFAULT_EVENT`] (a gRPC route's, of its reply), none waited for.
    fn of(feed: Feed) -> StreamSpec {
        StreamSpec {
            feed,
            events: Count::Fixed(DEFAULT_EVENTS),
            first: None,
            gap: None,
            event: match feed {
                Feed::Grpc => EventSpec::Reply,
                _ => EventSpec::Text(DEFAULT_EVENT.into()),
            },
        }
    }
}

/// What each event carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventSpec {
    /// `event=TEXT`, `{i}` standing for the event's index.
    Text(String),
    /// `event-size=SIZE` filler bytes.
    Size(u64),
    /// A server-streaming gRPC route's reply message (`size=`, `body=`), each message the same.
    Reply,
}

/// The events a stream sends when `events=` is not given.
const DEFAULT_EVENTS: u32 = 10;
/// The payload of an event when neither `event=` nor `event-size=` is given.
pub const DEFAULT_EVENT: &str = "{\"i\":{i}}";

/// A route's pool: one defined apart (`pool=NAME`), or its own (the pool keys on the route).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoutePool {
    /// `pool=NAME`, and where it was written (for the error if no pool has that name).
    Named {
        name: String,
        at: String,
    },
    Own(PoolSpec),
}

impl RouteSpec {
    /// A route answering `path` for `methods` with an empty 200 and nothing else.
    fn new(name: String, methods: Vec<String>, path: PathMatch) -> RouteSpec {
        RouteSpec {
            name,
            at: String::new(),
            methods,
            path,
            status: 200,
            status_mix: Vec::new(),
            body: BodySpec::Empty,
            headers: Vec::new(),
            delay: None,
            body_delay: None,
            faults: Vec::new(),
            rate: None,
            pool: None,
            stream: None,
            openai: None,
            grpc_message: None,
            health: None,
        }
    }

    /// Whether it is a gRPC route: its path is a method path ([`is_method_path`]).
    pub fn is_grpc(&self) -> bool {
        is_method_path(&self.path)
    }
}

/// Whether `path` names gRPC methods: `/SERVICE/METHOD` or `/SERVICE/*`, the service
/// package-qualified (`pkg.Svc`: dotted names, each starting with a letter or `_`), the method a
/// name. Such a route answers gRPC calls only, in gRPC's terms.
pub fn is_method_path(path: &PathMatch) -> bool {
    let name = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let (text, prefix) = match path {
        PathMatch::Exact(p) => (p.as_str(), false),
        PathMatch::Prefix(p) => (p.as_str(), true),
    };
    let Some((service, method)) = text.strip_prefix('/').and_then(|t| t.split_once('/')) else {
        return false;
    };
    let method_ok = match prefix {
        true => method.is_empty(),
        false => name(method),
    };
    service.contains('.') && service.split('.').all(name) && method_ok
}

/// The keys a route takes after its path, in both forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Status,
    Body,
    Size,
    Header,
    Delay,
    BodyDelay,
    Fault,
    Rate,
    Stream,
    Events,
    First,
    Gap,
    Event,
    EventSize,
    OpenAi,
    Model,
    Tokens,
    Prefill,
    Context,
    GrpcStatus,
    GrpcMessage,
    Health,
}

impl Key {
    const ALL: [Key; 22] = [
        Key::Status,
        Key::Body,
        Key::Size,
        Key::Header,
        Key::Delay,
        Key::BodyDelay,
        Key::Fault,
        Key::Rate,
        Key::Stream,
        Key::Events,
        Key::First,
        Key::Gap,
        Key::Event,
        Key::EventSize,
        Key::OpenAi,
        Key::Model,
        Key::Tokens,
        Key::Prefill,
        Key::Context,
        Key::GrpcStatus,
        Key::GrpcMessage,
        Key::Health,
    ];

    /// The keys that shape a stream's events (they need `stream=`; `first=` and `gap=` shape an
    /// openai route's tokens too).
    const OF_STREAM: [Key; 5] = [
        Key::Events,
        Key::First,
        Key::Gap,
        Key::Event,
        Key::EventSize,
    ];

    /// The keys of an openai route's own (they need `openai=on`).
    const OF_OPENAI: [Key; 4] = [Key::Model, Key::Tokens, Key::Prefill, Key::Context];

    /// The stream keys an openai route's request and tokens replace.
    const OF_EVENTS: [Key; 4] = [Key::Stream, Key::Events, Key::Event, Key::EventSize];

    /// The keys a stream's events replace.
    const OF_WHOLE_BODY: [Key; 4] = [Key::Body, Key::Size, Key::Rate, Key::BodyDelay];

    fn name(self) -> &'static str {
        match self {
            Key::Status => "status",
            Key::Body => "body",
            Key::Size => "size",
            Key::Header => "header",
            Key::Delay => "delay",
            Key::BodyDelay => "body-delay",
            Key::Fault => "fault",
            Key::Rate => "rate",
            Key::Stream => "stream",
            Key::Events => "events",
            Key::First => "first",
            Key::Gap => "gap",
            Key::Event => "event",
            Key::EventSize => "event-size",
            Key::OpenAi => "openai",
            Key::Model => "model",
            Key::Tokens => "tokens",
            Key::Prefill => "prefill",
            Key::Context => "context",
            Key::GrpcStatus => "grpc-status",
            Key::GrpcMessage => "grpc-message",
            Key::Health => "health",
        }
    }
}

/// The known keys, for the unknown-key error.
const KEY_LIST: &str = "status, body, size, header, delay, body-delay, fault, rate, stream, events, first, gap, event, event-size, openai, model, tokens, prefill, context, grpc-status, grpc-message, health, pool, capacity, queue, queue-timeout, shed";

/// A route being filled in key by key: checks repeats and exclusions, then the key's parser.
struct Builder<'a> {
    route: RouteSpec,
    seen: Vec<Key>,
    /// The stream keys as given, made a [`StreamSpec`] when the route is finished.
    stream: StreamKeys,
    /// `pool=NAME`, or the keys of the route's own pool.
    pool_name: Option<String>,
    pool_keys: PoolKeys,
    /// Where `body=@FILE` paths are relative to: the TOML file's directory, or the working
    /// directory for the flag.
    base_dir: Option<&'a Path>,
}

impl<'a> Builder<'a> {
    /// A builder for `route`, with no key given yet.
    fn new(route: RouteSpec, base_dir: Option<&'a Path>) -> Builder<'a> {
        Builder {
            route,
            seen: Vec::new(),
            stream: StreamKeys::default(),
            pool_name: None,
            pool_keys: PoolKeys::default(),
            base_dir,
        }
    }

    /// Sets `key` (as written) to `value`. Errors start with the key and the bad value.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        if key == "pool" {
            if self.pool_name.replace(value.to_owned()).is_some() {
                return Err("pool given twice".into());
            }
            return Ok(());
        }
        if PoolKeys::is_key(key) {
            return self.pool_keys.set(key, value);
        }
        let Some(key) = Key::ALL.into_iter().find(|k| k.name() == key) else {
            return Err(format!("unknown key {key:?}; expected one of {KEY_LIST}"));
        };
        if !matches!(key, Key::Header | Key::Model) && self.seen.contains(&key) {
            return Err(format!("{} given twice", key.name()));
        }
        let other = match key {
            Key::Body => Some(Key::Size),
            Key::Size => Some(Key::Body),
            _ => None,
        };
        if other.is_some_and(|other| self.seen.contains(&other)) {
            return Err("body and size can't both be given; a body is TEXT, @FILE or SIZE".into());
        }
        let other = match key {
            Key::Event => Some(Key::EventSize),
            Key::EventSize => Some(Key::Event),
            _ => None,
        };
        if other.is_some_and(|other| self.seen.contains(&other)) {
            return Err(
                "event and event-size can't both be given; an event is TEXT or SIZE".into(),
            );
        }
        self.seen.push(key);
        self.apply(key, value)
            .map_err(|e| format!("{} {e}", key.name()))
    }

    /// The route, once every key is in: its pool named or its own (not both). `at` says where
    /// the route was written, for the errors of building it (and a `pool=NAME` no pool has).
    fn finish(mut self, at: String) -> Result<RouteSpec, String> {
        self.route.at.clone_from(&at);
        let grpc = self.route.is_grpc();
        (self.route.stream, self.route.openai) = self.stream_spec(Some(grpc))?;
        self.check_grpc()?;
        if self.route.is_grpc() && !self.seen.contains(&Key::GrpcStatus) {
            self.route.status = Code::Ok as u16;
        }
        let name = self.route.name.clone();
        self.route.pool = match self.pool(&name)? {
            PoolChange::Keep => None,
            PoolChange::Named(name) => Some(RoutePool::Named { name, at }),
            PoolChange::Own(pool) => Some(RoutePool::Own(pool)),
        };
        Ok(self.route)
    }

    /// What the pool keys given say: nothing, `pool=NAME`, or a pool of its own named `name`
    /// (not both).
    fn pool(&mut self, name: &str) -> Result<PoolChange, String> {
        match (self.pool_name.take(), self.pool_keys.any()) {
            (Some(_), true) => Err("pool=NAME and the pool keys (capacity, queue, queue-timeout, shed) can't both be given: the keys make the route a pool of its own".into()),
            (Some(name), false) => Ok(PoolChange::Named(name)),
            (None, true) => Ok(PoolChange::Own(std::mem::take(&mut self.pool_keys).finish(name)?)),
            (None, false) => Ok(PoolChange::Keep),
        }
    }

    /// A gRPC route's keys say what gRPC can: no HTTP `status=`, no stream or openai backend,
    /// no `content-type` or `grpc-*` field in `header=`; the gRPC keys need a method path.
    fn check_grpc(&self) -> Result<(), String> {
        let route = &self.route;
        let given = |key: Key| self.seen.contains(&key);
        if !route.is_grpc() {
            return match [Key::GrpcStatus, Key::GrpcMessage, Key::Health]
                .into_iter()
                .find(|k| given(*k))
            {
                Some(key) => Err(format!(
                    "{} needs a gRPC method path, like /pkg.Service/Method or /pkg.Service/*",
                    key.name()
                )),
                None => Ok(()),
            };
        }
        if given(Key::Status) {
            return Err(format!("status can't be given on a gRPC route ({}): its outcome is grpc-status=, like grpc-status=UNAVAILABLE:5%", route.path));
        }
        if route.openai.is_some() {
            return Err("openai=on can't be given on a gRPC route: it answers gRPC calls".into());
        }
        if let Some(key) = [Key::Body, Key::Size, Key::Events, Key::First, Key::Gap]
            .into_iter()
            .find(|k| given(*k) && given(Key::Health))
        {
            return Err(format!("{} can't be given with health=: the reply is a health check's answer with that status", key.name()));
        }
        let reserved = |name: &str| {
            name.eq_ignore_ascii_case("content-type")
                || name
                    .get(..5)
                    .is_some_and(|p| p.eq_ignore_ascii_case("grpc-"))
        };
        match route.headers.iter().find(|(name, _)| reserved(name)) {
            Some((name, _)) => Err(format!("header {name:?} can't be given on a gRPC route: statico sends content-type and the grpc-* fields (grpc-status=, grpc-message=)")),
            None => Ok(()),
        }
    }

    /// The stream or the openai backend the keys describe, if `stream=` or `openai=on` was given,
    /// or on a gRPC route (`grpc`: whether the route is one; `None` for a phase's keys, whose route
    /// is not known here) `events=`, `first=` or `gap=`, which make it server-streaming; their keys
    /// without them, or a key they replace beside them, are refused naming both.
    fn stream_spec(
        &mut self,
        grpc: Option<bool>,
    ) -> Result<(Option<StreamSpec>, Option<OpenAiSpec>), String> {
        let given = |key: &Key| self.seen.contains(key);
        if self.stream.openai {
            return self.openai_spec().map(|spec| (None, Some(spec)));
        }
        if let Some(key) = Key::OF_OPENAI.iter().find(|k| given(k)) {
            return Err(format!(
                "{} needs openai=on: it shapes an OpenAI-compatible backend's tokens",
                key.name()
            ));
        }
        let stream_key = Key::OF_STREAM.iter().find(|k| given(k)).copied();
        let feed = match (self.stream.feed, grpc, stream_key) {
            (Some(_), Some(true), _) => return Err("stream can't be given on a gRPC route: events=, first= and gap= make it server-streaming, each message its reply (size= or body=)".into()),
            (Some(feed), _, _) => feed,
            (None, _, None) => return Ok((None, None)),
            (None, Some(false), Some(key)) | (None, _, Some(key @ (Key::Event | Key::EventSize))) => {
                return Err(format!(
                    "{} needs stream=sse|ndjson|chunks (or openai=on): it shapes a stream's events (a gRPC route's messages are its reply: size= or body=)",
                    key.name()
                ))
            }
            (None, _, Some(_)) => return self.grpc_stream_spec().map(|s| (Some(s), None)),
        };
        if let Some(key) = Key::OF_WHOLE_BODY.iter().find(|k| given(k)) {
            return Err(format!(
                "{} can't be given with stream=: the events are the body (event= or event-size=, events=, first=, gap=)",
                key.name()
            ));
        }
        let mut stream = StreamSpec::of(feed);
        std::mem::take(&mut self.stream).onto_stream(&mut stream);
        Ok((Some(stream), None))
    }

    /// A server-streaming gRPC route's messages: its reply (`size=`, `body=`), sent whole on the
    /// stream's times, so a paced body's keys are refused.
    fn grpc_stream_spec(&mut self) -> Result<StreamSpec, String> {
        if let Some(key) = [Key::Rate, Key::BodyDelay]
            .iter()
            .find(|k| self.seen.contains(k))
        {
            return Err(format!(
                "{} can't be given with events=, first= or gap=: each message of a server-streaming gRPC route goes whole, on the stream's times",
                key.name()
            ));
        }
        let mut stream = StreamSpec::of(Feed::Grpc);
        std::mem::take(&mut self.stream).onto_stream(&mut stream);
        Ok(stream)
    }

    /// An openai route's keys: a body or a stream's own keys beside them are refused, naming
    /// what replaces them.
    fn openai_spec(&mut self) -> Result<OpenAiSpec, String> {
        let given = |key: &Key| self.seen.contains(key);
        if let Some(key) = Key::OF_WHOLE_BODY.iter().find(|k| given(k)) {
            return Err(format!(
                "{} can't be given with openai=on: the answer is the completion the request asks for (tokens=, first=, gap=, prefill= shape it)",
                key.name()
            ));
        }
        if let Some(key) = Key::OF_EVENTS.iter().find(|k| given(k)) {
            return Err(format!(
                "{} can't be given with openai=on: the request's \"stream\" field chooses a stream, tokens= how many tokens, and the tokens are statico's words",
                key.name()
            ));
        }
        let keys = std::mem::take(&mut self.stream);
        Ok(OpenAiSpec {
            models: keys.models,
            tokens: keys.tokens,
            first: keys.first,
            gap: keys.gap,
            prefill: keys.prefill,
            context: keys.context,
        })
    }

    /// Parses `value` for `key` into the route (a stream key into the stream's keys).
    fn apply(&mut self, key: Key, value: &str) -> Result<(), String> {
        let stream = &mut self.stream;
        match key {
            Key::Stream => stream.feed = Some(Feed::parse(value)?),
            Key::Events => stream.events = Some(Count::parse(value)?),
            Key::First => stream.first = Some(Dist::parse(value)?),
            Key::Gap => stream.gap = Some(Dist::parse(value)?),
            Key::Event => stream.event = Some(EventSpec::Text(value.into())),
            Key::EventSize => stream.event = Some(EventSpec::Size(parse_event_size(value)?)),
            Key::OpenAi => stream.openai = parse_on(value)?,
            Key::Model => stream.models.push(parse_model(value)?),
            Key::Tokens => stream.tokens = Some(Count::parse(value)?),
            Key::Prefill => stream.prefill = Some(parse_prefill(value)?),
            Key::Context => stream.context = Some(parse_context(value)?),
            _ => return self.apply_to_route(key, value),
        }
        Ok(())
    }

    /// Parses `value` for a key of the route itself.
    fn apply_to_route(&mut self, key: Key, value: &str) -> Result<(), String> {
        let route = &mut self.route;
        match key {
            Key::Status => (route.status, route.status_mix) = parse_status(value)?,
            Key::GrpcStatus => (route.status, route.status_mix) = parse_grpc_status(value)?,
            Key::GrpcMessage => route.grpc_message = Some(value.to_owned()),
            Key::Health => route.health = Some(parse_health(value)?),
            Key::Body => route.body = parse_body(value, self.base_dir)?,
            Key::Size => route.body = BodySpec::Size(parse_size(value)?),
            Key::Header => route.headers.push(parse_header(value)?),
            Key::Delay => route.delay = Some(Dist::parse(value)?),
            Key::BodyDelay => match Dist::parse(value)? {
                d if d.in_flight().is_some() => {
                    return Err(format!("{value:?}: inflight:BASE:PER is a model of delay=, first= and gap= only (the time before the answer or an event)"))
                }
                d => route.body_delay = Some(d),
            },
            Key::Fault => route.faults = parse_faults(value)?,
            Key::Rate => route.rate = Some(parse_rate(value)?),
            _ => unreachable!("the stream's keys are applied to its keys"),
        }
        Ok(())
    }
}

/// The stream's and the openai backend's keys as given, in any order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamKeys {
    feed: Option<Feed>,
    events: Option<Count>,
    first: Option<Dist>,
    gap: Option<Dist>,
    event: Option<EventSpec>,
    openai: bool,
    models: Vec<String>,
    tokens: Option<Count>,
    prefill: Option<Duration>,
    context: Option<u64>,
}

impl StreamKeys {
    /// The stream's and the openai backend's own keys given, in [`Key::ALL`]'s order.
    fn given(&self) -> Vec<Key> {
        [
            (Key::Events, self.events.is_some()),
            (Key::First, self.first.is_some()),
            (Key::Gap, self.gap.is_some()),
            (Key::Event, matches!(self.event, Some(EventSpec::Text(_)))),
            (
                Key::EventSize,
                matches!(self.event, Some(EventSpec::Size(_))),
            ),
            (Key::Model, !self.models.is_empty()),
            (Key::Tokens, self.tokens.is_some()),
            (Key::Prefill, self.prefill.is_some()),
            (Key::Context, self.context.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, given)| given.then_some(key))
        .collect()
    }

    /// The stream keys given, each replacing `stream`'s own.
    fn onto_stream(&self, stream: &mut StreamSpec) {
        replace(&mut stream.events, &self.events);
        replace_some(&mut stream.first, &self.first);
        replace_some(&mut stream.gap, &self.gap);
        replace(&mut stream.event, &self.event);
    }

    /// A phase's keys given without `stream=` or `openai=on`, onto `route`'s own stream or
    /// openai backend, each replacing the route's; on a gRPC route without a stream `events=`,
    /// `first=` and `gap=` make it server-streaming, as they do written on the route. A key the
    /// route has nothing for is refused, naming what it needs.
    fn onto(&self, route: &mut RouteSpec) -> Result<(), String> {
        let given = self.given();
        let any_of = |keys: &[Key]| given.iter().find(|k| keys.contains(k)).copied();
        if let Some(openai) = &mut route.openai {
            if let Some(key) = any_of(&Key::OF_EVENTS) {
                return Err(format!("{} can't be given for an openai route: the request's \"stream\" field chooses a stream, tokens= how many tokens, and the tokens are statico's words", key.name()));
            }
            replace_some(&mut openai.first, &self.first);
            replace_some(&mut openai.gap, &self.gap);
            replace_some(&mut openai.tokens, &self.tokens);
            replace_some(&mut openai.prefill, &self.prefill);
            replace_some(&mut openai.context, &self.context);
            if !self.models.is_empty() {
                openai.models.clone_from(&self.models);
            }
            return Ok(());
        }
        if let Some(key) = any_of(&Key::OF_OPENAI) {
            return Err(format!("{} needs openai=on, on the route or in the phase: it shapes an OpenAI-compatible backend's tokens", key.name()));
        }
        let grpc = route.is_grpc();
        if let (Some(key), true) = (any_of(&[Key::Event, Key::EventSize]), grpc) {
            return Err(format!(
                "{} can't be given for a gRPC route: its messages are its reply (size= or body=)",
                key.name()
            ));
        }
        if grpc && route.stream.is_none() {
            route.stream = Some(StreamSpec::of(Feed::Grpc));
        }
        let Some(stream) = &mut route.stream else {
            let key = given.first().map_or("events", |k| k.name());
            return Err(format!("{key} needs stream=sse|ndjson|chunks (or openai=on), on the route or in the phase: the route has no stream and is not on a gRPC method path (where events=, first= and gap= make it server-streaming)"));
        };
        self.onto_stream(stream);
        Ok(())
    }
}

/// The health statuses `health=` takes, by name (any case) and number.
const HEALTH_NAMES: [(&str, ServingStatus); 4] = [
    ("UNKNOWN", ServingStatus::Unknown),
    ("SERVING", ServingStatus::Serving),
    ("NOT_SERVING", ServingStatus::NotServing),
    ("SERVICE_UNKNOWN", ServingStatus::ServiceUnknown),
];

/// `health=`: a health check's status, by name (`SERVING`, `NOT_SERVING`, `UNKNOWN`,
/// `SERVICE_UNKNOWN`, any case) or number.
fn parse_health(value: &str) -> Result<ServingStatus, String> {
    (HEALTH_NAMES.iter())
        .find(|(name, status)| {
            name.eq_ignore_ascii_case(value) || value == (*status as i32).to_string()
        })
        .map(|(_, status)| *status)
        .ok_or_else(|| {
            format!("{value:?}: expected SERVING, NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN")
        })
}

/// A health status's name, as `health=` writes it.
pub fn health_name(status: ServingStatus) -> &'static str {
    (HEALTH_NAMES.iter())
        .find(|(_, s)| *s == status)
        .map_or("UNKNOWN", |(name, _)| name)
}

/// `openai=on|off`.
fn parse_on(value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{value:?}: expected on or off")),
    }
}

/// `model=NAME`: a model name as OpenAI's API carries it (no spaces or quotes).
fn parse_model(value: &str) -> Result<String, String> {
    match !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        true => Ok(value.to_owned()),
        false => Err(format!(
            "{value:?} is not a model name: printable ASCII, no quotes"
        )),
    }
}

/// `prefill=DUR`: a fixed time per prompt token.
fn parse_prefill(value: &str) -> Result<Duration, String> {
    match Dist::parse(value)? {
        Dist::Fixed(d) => Ok(d),
        _ => Err(format!(
            "{value:?}: prefill is one duration per prompt token (like 50us), not a distribution"
        )),
    }
}

/// `context=N`: tokens, at least 1.
fn parse_context(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{value:?} is not a number of tokens (at least 1)")),
    }
}

/// `event-size=`: 1 byte to 64 KiB (an event goes out whole, when the connection has room for it).
fn parse_event_size(value: &str) -> Result<u64, String> {
    match parse_size(value)? {
        size @ 1..=0x1_0000 => Ok(size),
        _ => Err(format!("{value:?} is not from 1 byte to 64k")),
    }
}

/// Parses the `--route` flag: `[METHODS] PATH key=value…` (see the module documentation).
/// Errors name the bad part; the caller adds which flag it was.
pub fn parse_spec(s: &str) -> Result<RouteSpec, String> {
    const FORM: &str = "expected [METHODS] PATH key=value..., like GET /api/* status=200";
    let mut tokens = s.split_whitespace();
    let first = tokens
        .next()
        .ok_or_else(|| format!("the route is empty; {FORM}"))?;
    let is_methods = first.bytes().all(|b| b.is_ascii_uppercase() || b == b',');
    let (methods, path_text) = if first.starts_with('/') || first == "*" {
        (Vec::new(), first)
    } else if is_methods {
        let path = tokens
            .next()
            .ok_or_else(|| format!("no PATH after {first:?}; {FORM}"))?;
        (
            parse_methods(first).map_err(|e| format!("methods {e}"))?,
            path,
        )
    } else {
        return Err(format!(
            "{first:?} is neither METHODS (like GET,HEAD) nor a PATH; {FORM}"
        ));
    };
    let path = PathMatch::parse(path_text).map_err(|e| format!("path {e}"))?;
    let name = label(&methods, path_text);
    let mut builder = Builder::new(RouteSpec::new(name, methods, path), None);
    for token in tokens {
        let (key, value) = token
            .split_once('=')
            .ok_or_else(|| format!("{token:?} is not key=value; the keys are {KEY_LIST}"))?;
        builder.set(key, value)?;
    }
    builder.finish(format!("--route {s:?}"))
}

/// What a phase does to a route's pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PoolChange {
    /// No pool key: the phase's version of a route shares the route's pool (if it has one).
    #[default]
    Keep,
    /// `pool=NAME`: the pool of that name.
    Named(String),
    /// Pool keys (`capacity`, …): a pool of its own for the phase, named `ROUTE @PHASE` when the
    /// patch is applied (its `name` is empty until then).
    Own(PoolSpec),
}

/// What a phase changes in each route it names: the route keys it gives, parsed once, with the
/// route's own parsers (a key means the same in a phase as on a route). Each key given replaces
/// the route's own: `header` keys all its headers, `fault` all its faults, `events=` or `gap=` its
/// stream's, `gap=` or `tokens=` its openai backend's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoutePatch {
    /// `status` (or a gRPC route's `grpc-status`): the base status and the mix.
    pub status: Option<(u16, Vec<(u16, f64)>)>,
    pub grpc_message: Option<String>,
    /// `health=`, which replaces the route's body (and a body the route's health).
    pub health: Option<ServingStatus>,
    /// `body` or `size`.
    pub body: Option<BodySpec>,
    pub headers: Option<Vec<(String, String)>>,
    pub delay: Option<Dist>,
    pub body_delay: Option<Dist>,
    pub faults: Option<Vec<(Fault, f64)>>,
    pub rate: Option<u64>,
    pub pool: PoolChange,
    /// A stream (`stream=` and its keys, all given anew), which replaces the route's body; a body
    /// (`body=`, `size=`) replaces the route's stream.
    pub stream: Option<StreamSpec>,
    /// An OpenAI-compatible backend (`openai=on` and its keys, all given anew), which replaces the
    /// route's body or stream; a body or a stream replaces it.
    pub openai: Option<OpenAiSpec>,
    /// The stream's or the openai backend's keys given without `stream=` or `openai=on`: each
    /// replaces the route's own (after `stream`, `openai` and `body` are applied).
    pub stream_keys: Option<StreamKeys>,
}

impl RoutePatch {
    /// `keys` (route keys, as written, in order): errors as a route's, starting with the key.
    /// A `body=@FILE` is read now, from `base_dir` when given.
    pub(crate) fn parse(
        keys: &[(String, String)],
        base_dir: Option<&Path>,
    ) -> Result<RoutePatch, String> {
        let blank = RouteSpec::new(String::new(), Vec::new(), PathMatch::Prefix("/".into()));
        let mut builder = Builder::new(blank, base_dir);
        for (key, value) in keys {
            builder.set(key, value)?;
        }
        let pool = builder.pool("")?;
        let anew = builder.stream.feed.is_some() || builder.stream.openai;
        let (stream, openai) = match anew {
            true => builder.stream_spec(None)?,
            false => (None, None),
        };
        let keyed =
            (Key::OF_STREAM.iter().chain(&Key::OF_OPENAI)).any(|k| builder.seen.contains(k));
        let stream_keys = (!anew && keyed).then(|| std::mem::take(&mut builder.stream));
        let given = |key: Key| builder.seen.contains(&key);
        let status_given = given(Key::Status) || given(Key::GrpcStatus);
        let body_given = given(Key::Body) || given(Key::Size);
        let headers_given = given(Key::Header);
        let faults_given = given(Key::Fault);
        let route = builder.route;
        Ok(RoutePatch {
            status: status_given.then_some((route.status, route.status_mix)),
            grpc_message: route.grpc_message,
            health: route.health,
            body: body_given.then_some(route.body),
            headers: headers_given.then_some(route.headers),
            delay: route.delay,
            body_delay: route.body_delay,
            faults: faults_given.then_some(route.faults),
            rate: route.rate,
            pool,
            stream,
            openai,
            stream_keys,
        })
    }

    /// Whether a route's version for the phase keeps the route's pool: the phase gives no pool key.
    pub(crate) fn keeps_pool(&self) -> bool {
        self.pool == PoolChange::Keep
    }

    /// `base` as phase `phase` changes it. A version that keeps its route's pool names none: it
    /// shares the route's ([`RoutePatch::keeps_pool`]), which is made once, for the route. A stream
    /// or openai key the route (as changed) has nothing for is refused ([`StreamKeys::onto`]).
    pub(crate) fn apply(&self, base: &RouteSpec, phase: &str) -> Result<RouteSpec, String> {
        let mut route = base.clone();
        if let Some((status, mix)) = &self.status {
            (route.status, route.status_mix) = (*status, mix.clone());
        }
        replace(&mut route.body, &self.body);
        if self.body.is_some() {
            route.health = None;
        }
        if self.health.is_some() {
            (route.health, route.body) = (self.health, BodySpec::Empty);
        }
        // A gRPC route's reply is its messages' too: a body and a stream do not replace each other.
        let grpc = base.is_grpc();
        if self.body.is_some() && !grpc {
            (route.stream, route.openai) = (None, None);
        }
        if let Some(stream) = &self.stream {
            if !grpc {
                route.body = BodySpec::Empty;
            }
            (route.rate, route.body_delay) = (None, None);
            (route.stream, route.openai) = (Some(stream.clone()), None);
        }
        if let Some(openai) = &self.openai {
            (route.body, route.rate, route.body_delay) = (BodySpec::Empty, None, None);
            (route.stream, route.openai) = (None, Some(openai.clone()));
        }
        if let Some(keys) = &self.stream_keys {
            keys.onto(&mut route)?;
        }
        replace(&mut route.headers, &self.headers);
        replace(&mut route.faults, &self.faults);
        replace_some(&mut route.grpc_message, &self.grpc_message);
        replace_some(&mut route.delay, &self.delay);
        replace_some(&mut route.body_delay, &self.body_delay);
        replace_some(&mut route.rate, &self.rate);
        route.pool = match &self.pool {
            PoolChange::Keep => None,
            PoolChange::Named(name) => Some(RoutePool::Named {
                name: name.clone(),
                at: format!("phase {phase}"),
            }),
            PoolChange::Own(pool) => Some(RoutePool::Own(PoolSpec {
                name: format!("{} @{phase}", base.name),
                ..pool.clone()
            })),
        };
        Ok(route)
    }
}

/// `slot` replaced by the patch's value, if it gives one.
fn replace<T: Clone>(slot: &mut T, patch: &Option<T>) {
    if let Some(value) = patch {
        *slot = value.clone();
    }
}

/// An optional `slot` replaced by the patch's value, if it gives one.
fn replace_some<T: Clone>(slot: &mut Option<T>, patch: &Option<T>) {
    if patch.is_some() {
        slot.clone_from(patch);
    }
}

/// A route's default label: `GET,HEAD /api/*`, or the path alone when any method goes.
fn label(methods: &[String], path: &str) -> String {
    if methods.is_empty() {
        path.to_owned()
    } else {
        format!("{} {path}", methods.join(","))
    }
}

/// `GET,HEAD` (letters, either case) as uppercased method names.
fn parse_methods(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(|m| {
            if !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic()) {
                Ok(m.to_ascii_uppercase())
            } else {
                Err(format!(
                    "{value:?}: {m:?} is not a method; expected letters, like GET,HEAD"
                ))
            }
        })
        .collect()
}

/// `200`, `503:10%,429:5%` or `404,503:10%`: the base status (200 unless an entry has no
/// percentage) and the mix of other statuses.
fn parse_status(value: &str) -> Result<(u16, Vec<(u16, f64)>), String> {
    const FORM: &str = "expected CODE or CODE:P%,..., like 404,503:10%";
    let status = |code: &str| {
        code.parse::<u16>()
            .ok()
            .filter(|c| (100..=999).contains(c))
            .ok_or_else(|| format!("{value:?}: {code:?} is not a status in 100..=999; {FORM}"))
    };
    parse_mix(value, 200, status, FORM)
}

/// A gRPC route's `UNAVAILABLE:5%,RESOURCE_EXHAUSTED:1%` or `NOT_FOUND`: codes by name or number,
/// the base OK unless an entry has no percentage.
fn parse_grpc_status(value: &str) -> Result<(u16, Vec<(u16, f64)>), String> {
    const FORM: &str = "expected CODE or CODE:P%,... (names or numbers), like UNAVAILABLE:5%,RESOURCE_EXHAUSTED:1%";
    let code = |code: &str| {
        Code::parse(code)
            .map(|c| c as u16)
            .ok_or_else(|| format!("{value:?}: {code:?} is not a gRPC status (OK, CANCELLED, … UNAUTHENTICATED, or 0..=16); {FORM}"))
    };
    parse_mix(value, Code::Ok as u16, code, FORM)
}

/// A mix of codes as `status=` and `grpc-status=` write it: the base (`default` unless an entry has
/// no percentage) and the others with their fractions. The base may be spelled out with the share
/// the others leave it (`200:90%,503:10%` is `503:10%`); any other share for it is refused.
fn parse_mix(
    value: &str,
    default: u16,
    parse_code: impl Fn(&str) -> Result<u16, String>,
    form: &str,
) -> Result<(u16, Vec<(u16, f64)>), String> {
    let mut base = None;
    let mut mix = Vec::new();
    for entry in value.split(',') {
        let (code, percent) = match entry.split_once(':') {
            Some((code, percent)) => (code, Some(percent)),
            None => (entry, None),
        };
        let code = parse_code(code)?;
        match percent {
            Some(p) => mix.push((
                code,
                parse_percent(p).map_err(|e| format!("{value:?}: {e}"))?,
                entry,
            )),
            None if base.is_some() => {
                return Err(format!(
                    "{value:?}: more than one status without a percentage; {form}"
                ))
            }
            None => base = Some(code),
        }
    }
    for (i, &(code, _, entry)) in mix.iter().enumerate() {
        if base == Some(code) || mix[..i].iter().any(|&(c, _, _)| c == code) {
            return Err(format!(
                "{value:?}: {entry} lists a status given before; {form}"
            ));
        }
    }
    check_total(value, mix.iter().map(|&(_, f, _)| f))?;
    let base_code = base.unwrap_or(default);
    if let Some(i) = mix.iter().position(|&(code, _, _)| code == base_code) {
        let (_, share, entry) = mix.remove(i);
        let rest = 1.0 - mix.iter().map(|&(_, f, _)| f).sum::<f64>();
        if (share - rest).abs() > 1e-9 {
            return Err(format!(
                "{value:?}: {entry} is the base status, which answers the share the others leave ({}%); leave it out or give it that share",
                (rest * 1e8).round() / 1e6
            ));
        }
    }
    Ok((base_code, mix.into_iter().map(|(c, f, _)| (c, f)).collect()))
}

/// `reset:0.1%,close:0.5%,stall:0.01%,truncate:0.1%`; a fault without a percentage is 100%.
fn parse_faults(value: &str) -> Result<Vec<(Fault, f64)>, String> {
    const FORM: &str =
        "expected FAULT:P%,... with reset, close, stall or truncate, like reset:0.1%";
    let faults = value
        .split(',')
        .map(|entry| {
            let (name, percent) = entry.split_once(':').unwrap_or((entry, "100%"));
            let Some(fault) = Fault::ALL.into_iter().find(|f| f.name() == name) else {
                return Err(format!("{value:?}: unknown fault {name:?}; {FORM}"));
            };
            let fraction = parse_percent(percent).map_err(|e| format!("{value:?}: {e}"))?;
            Ok((fault, fraction))
        })
        .collect::<Result<Vec<_>, String>>()?;
    for (i, (fault, _)) in faults.iter().enumerate() {
        if faults[..i].iter().any(|(f, _)| f == fault) {
            return Err(format!(
                "{value:?}: {} is listed twice; {FORM}",
                fault.name()
            ));
        }
    }
    check_total(value, faults.iter().map(|&(_, f)| f))?;
    Ok(faults)
}

/// Fractions summing to more than 100% are an error (with a little room for rounding).
fn check_total(value: &str, fractions: impl Iterator<Item = f64>) -> Result<(), String> {
    let total = fractions.sum::<f64>();
    if total > 1.0 + 1e-9 {
        let percent = (total * 1e8).round() / 1e6;
        return Err(format!(
            "{value:?}: the percentages add up to {percent}%, over 100%"
        ));
    }
    Ok(())
}

/// `TEXT`, `@FILE` (read now, relative to `base_dir` when given) or `@@TEXT` (the literal
/// `@TEXT`); an empty value is no body.
fn parse_body(value: &str, base_dir: Option<&Path>) -> Result<BodySpec, String> {
    if let Some(text) = value.strip_prefix("@@") {
        return Ok(BodySpec::Text(format!("@{text}").into_bytes()));
    }
    let Some(file) = value.strip_prefix('@') else {
        return Ok(if value.is_empty() {
            BodySpec::Empty
        } else {
            BodySpec::Text(value.into())
        });
    };
    if file.is_empty() {
        return Err(format!("{value:?}: no file name after @; expected @FILE"));
    }
    let path = base_dir.map_or_else(|| PathBuf::from(file), |dir| dir.join(file));
    match std::fs::read(&path) {
        Ok(bytes) => Ok(BodySpec::File(path, bytes)),
        Err(e) => Err(format!("{value:?}: cannot read {}: {e}", path.display())),
    }
}

/// `Name:Value`: the name an HTTP token, the value trimmed and free of control characters
/// other than tab. Also the parser of a Fortio `header=` query argument.
pub(super) fn parse_header(value: &str) -> Result<(String, String), String> {
    let Some((name, text)) = value.split_once(':') else {
        return Err(format!("{value:?}: no colon; expected Name:Value"));
    };
    if !is_token(name) {
        return Err(format!(
            "{value:?}: {name:?} is not a header name; expected Name:Value"
        ));
    }
    let text = text.trim();
    if text.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!(
            "{value:?}: the value has a control character; expected Name:Value"
        ));
    }
    Ok((name.to_owned(), text.to_owned()))
}

/// Whether `s` is an HTTP token (RFC 9110 §5.6.2), as header names must be.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `1m`: bytes per second, more than zero.
fn parse_rate(value: &str) -> Result<u64, String> {
    match parse_size(value)? {
        0 => Err(format!(
            "{value:?} must be above 0; expected bytes per second, like 1m"
        )),
        rate => Ok(rate),
    }
}

/// One `[[route]]` table as written, each value with its place in the file for errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TomlRoute {
    name: Option<Spanned<Value>>,
    path: Option<Spanned<Value>>,
    methods: Option<Spanned<Value>>,
    status: Option<Spanned<Value>>,
    body: Option<Spanned<Value>>,
    size: Option<Spanned<Value>>,
    header: Option<Spanned<Value>>,
    delay: Option<Spanned<Value>>,
    #[serde(rename = "body-delay")]
    body_delay: Option<Spanned<Value>>,
    fault: Option<Spanned<Value>>,
    rate: Option<Spanned<Value>>,
    stream: Option<Spanned<Value>>,
    events: Option<Spanned<Value>>,
    first: Option<Spanned<Value>>,
    gap: Option<Spanned<Value>>,
    event: Option<Spanned<Value>>,
    #[serde(rename = "event-size")]
    event_size: Option<Spanned<Value>>,
    openai: Option<Spanned<Value>>,
    model: Option<Spanned<Value>>,
    tokens: Option<Spanned<Value>>,
    prefill: Option<Spanned<Value>>,
    context: Option<Spanned<Value>>,
    #[serde(rename = "grpc-status")]
    grpc_status: Option<Spanned<Value>>,
    #[serde(rename = "grpc-message")]
    grpc_message: Option<Spanned<Value>>,
    health: Option<Spanned<Value>>,
    pool: Option<Spanned<Value>>,
    capacity: Option<Spanned<Value>>,
    queue: Option<Spanned<Value>>,
    #[serde(rename = "queue-timeout")]
    queue_timeout: Option<Spanned<Value>>,
    shed: Option<Spanned<Value>>,
}

/// An error at a place in the TOML text.
pub(super) type Located = (Range<usize>, String);

/// One `[[route]]` table as a route, through the same key parsers as the flag.
pub(super) fn toml_route(
    table: &Spanned<TomlRoute>,
    base_dir: Option<&Path>,
    place: String,
) -> Result<RouteSpec, Located> {
    let route = table.get_ref();
    let Some(path_value) = &route.path else {
        return Err((
            table.span(),
            "the route has no path; expected path = \"/...\"".into(),
        ));
    };
    let path_text = one_text("path", path_value)?;
    let path =
        PathMatch::parse(&path_text).map_err(|e| (path_value.span(), format!("path {e}")))?;
    let mut methods = Vec::new();
    if let Some(value) = &route.methods {
        for text in texts("methods", value)? {
            let parsed =
                parse_methods(&text).map_err(|e| (value.span(), format!("methods {e}")))?;
            methods.extend(parsed);
        }
    }
    let name = match &route.name {
        Some(name) => one_text("name", name)?,
        None => label(&methods, &path_text),
    };
    let mut builder = Builder::new(RouteSpec::new(name, methods, path), base_dir);
    let keyed = [
        (Key::Status, &route.status),
        (Key::Body, &route.body),
        (Key::Size, &route.size),
        (Key::Header, &route.header),
        (Key::Delay, &route.delay),
        (Key::BodyDelay, &route.body_delay),
        (Key::Fault, &route.fault),
        (Key::Rate, &route.rate),
        (Key::Stream, &route.stream),
        (Key::Events, &route.events),
        (Key::First, &route.first),
        (Key::Gap, &route.gap),
        (Key::Event, &route.event),
        (Key::EventSize, &route.event_size),
        (Key::OpenAi, &route.openai),
        (Key::Model, &route.model),
        (Key::Tokens, &route.tokens),
        (Key::Prefill, &route.prefill),
        (Key::Context, &route.context),
        (Key::GrpcStatus, &route.grpc_status),
        (Key::GrpcMessage, &route.grpc_message),
        (Key::Health, &route.health),
    ];
    for (key, value) in keyed {
        let Some(value) = value else { continue };
        let values = if matches!(key, Key::Header | Key::Model) {
            texts(key.name(), value)?
        } else {
            vec![one_text(key.name(), value)?]
        };
        for text in values {
            builder
                .set(key.name(), &text)
                .map_err(|e| (value.span(), e))?;
        }
    }
    let pooled = [
        ("pool", &route.pool),
        ("capacity", &route.capacity),
        ("queue", &route.queue),
        ("queue-timeout", &route.queue_timeout),
        ("shed", &route.shed),
    ];
    for (key, value) in pooled {
        if let Some(value) = value {
            let text = one_text(key, value)?;
            builder.set(key, &text).map_err(|e| (value.span(), e))?;
        }
    }
    builder.finish(place).map_err(|e| (table.span(), e))
}

/// A value written as a string or an integer, as text for the key's parser.
pub(super) fn one_text(key: &str, value: &Spanned<Value>) -> Result<String, Located> {
    match value.get_ref() {
        Value::String(s) => Ok(s.clone()),
        Value::Integer(i) => Ok(i.to_string()),
        _ => Err((
            value.span(),
            format!("{key} must be a string or an integer"),
        )),
    }
}

/// A value written as one string or an array of strings.
pub(super) fn texts(key: &str, value: &Spanned<Value>) -> Result<Vec<String>, Located> {
    let wrong = || {
        (
            value.span(),
            format!("{key} must be a string or an array of strings"),
        )
    };
    match value.get_ref() {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(wrong))
            .collect(),
        _ => Err(wrong()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> RouteSpec {
        parse_spec(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn spec_err(s: &str) -> String {
        parse_spec(s).expect_err(s)
    }

    /// A scratch directory for file tests, unique to the test.
    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("route-spec-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn minimal_route() {
        let r = spec("/health");
        assert_eq!(
            r,
            RouteSpec {
                at: "--route \"/health\"".into(),
                ..RouteSpec::new("/health".into(), vec![], PathMatch::Exact("/health".into()))
            }
        );
    }

    #[test]
    fn methods_and_paths() {
        let r = spec("GET,HEAD /api/*");
        assert_eq!(r.name, "GET,HEAD /api/*");
        assert_eq!(r.methods, ["GET", "HEAD"]);
        assert_eq!(r.path, PathMatch::Prefix("/api/".into()));
        assert_eq!(spec("*").path, PathMatch::Prefix("/".into()));
        assert_eq!(spec("/*").path, PathMatch::Prefix("/".into()));
        assert!(PathMatch::Prefix("/api/".into()).matches("/api/x"));
        assert!(!PathMatch::Exact("/a".into()).matches("/a/"));
        assert_eq!(PathMatch::parse("/api/*").unwrap().to_string(), "/api/*");
        assert!(spec_err("get /x").contains("\"get\" is neither METHODS"));
        assert!(spec_err("GET").contains("no PATH after \"GET\""));
        assert!(spec_err("GET, /x").contains("\"\" is not a method"));
        assert!(spec_err("GET api").contains("path \"api\" does not start with /"));
        assert!(spec_err("/a*b").contains("path \"/a*b\" has a * before its end"));
        assert!(spec_err("/a?b").contains("has a space, control character, ? or #"));
        assert!(spec_err("").contains("the route is empty"));
    }

    #[test]
    fn status_key() {
        let r = spec("/ status=503");
        assert_eq!((r.status, r.status_mix), (503, vec![]));
        let r = spec("/ status=503:10%,429:5%");
        assert_eq!(
            (r.status, r.status_mix),
            (200, vec![(503, 0.1), (429, 0.05)])
        );
        let r = spec("/ status=404,503:10%");
        assert_eq!((r.status, r.status_mix), (404, vec![(503, 0.1)]));
        assert!(
            spec_err("/ status=99").contains("status \"99\": \"99\" is not a status in 100..=999")
        );
        assert!(spec_err("/ status=abc").contains("\"abc\" is not a status"));
        assert!(spec_err("/ status=503:10").contains("status \"503:10\": \"10\" has no % sign"));
        assert!(spec_err("/ status=404,500").contains("more than one status without a percentage"));
        let e = spec_err("/ status=503:60%,429:50%");
        assert_eq!(
            e,
            "status \"503:60%,429:50%\": the percentages add up to 110%, over 100%"
        );
        assert_eq!(spec("/ status=503:60%,429:40%").status_mix.len(), 2);
    }

    #[test]
    fn a_mix_may_spell_out_the_base_with_the_share_the_others_leave() {
        let r = spec("/ status=200:90%,503:10%");
        assert_eq!((r.status, r.status_mix), (200, vec![(503, 0.1)]));
        let r = spec("/ status=503:10%,200:90%");
        assert_eq!((r.status, r.status_mix), (200, vec![(503, 0.1)]));
        assert_eq!(spec("/ status=200:100%").status_mix, []);
        let r = spec("/pkg.Svc/M grpc-status=OK:90%,UNAVAILABLE:10%");
        assert_eq!((r.status, r.status_mix), (0, vec![(14, 0.1)]));
        assert_eq!(
            spec_err("/ status=200:50%,503:10%"),
            "status \"200:50%,503:10%\": 200:50% is the base status, which answers the share the others leave (90%); leave it out or give it that share"
        );
        assert!(spec_err("/ status=503:10%,503:5%")
            .starts_with("status \"503:10%,503:5%\": 503:5% lists a status given before"));
        assert!(spec_err("/ status=404,404:5%")
            .starts_with("status \"404,404:5%\": 404:5% lists a status given before"));
        assert!(spec_err("/pkg.Svc/M grpc-status=OK:90%,0:10%")
            .contains("0:10% lists a status given before"));
    }

    #[test]
    fn a_grpc_route_is_one_on_a_method_path_and_takes_grpc_statuses() {
        for yes in ["/pkg.Svc/Method", "/a.b.C/*", "/_x.Y/do_it"] {
            assert!(spec(yes).is_grpc(), "{yes}");
        }
        for no in [
            "/api/users",
            "/v1.0/x",
            "/pkg.Svc/a/b",
            "/pkg.Svc*",
            "*",
            "/file.txt",
        ] {
            assert!(!spec(no).is_grpc(), "{no}");
        }
        let r = spec("/pkg.Svc/M grpc-status=UNAVAILABLE:5%,8:1% grpc-message=busy");
        assert_eq!((r.status, r.status_mix), (0, vec![(14, 0.05), (8, 0.01)]));
        assert_eq!(r.grpc_message.as_deref(), Some("busy"));
        assert_eq!(spec("/pkg.Svc/M grpc-status=not_found").status, 5);
        assert_eq!(spec("/pkg.Svc/M").status, 0);
        assert!(spec_err("/pkg.Svc/M status=503").contains("grpc-status="));
        assert!(spec_err("/pkg.Svc/M grpc-status=NOPE").contains("not a gRPC status"));
        assert!(spec_err("/pkg.Svc/M header=Content-Type:x").contains("gRPC route"));
        assert!(spec_err("/pkg.Svc/M header=grpc-status:0").contains("gRPC route"));
        assert!(spec_err("/health grpc-status=OK").contains("method path"));
        let streaming = spec("/pkg.Svc/M events=3 gap=20ms size=8");
        let stream = streaming.stream.as_ref().unwrap();
        assert_eq!(
            (stream.feed, &stream.event),
            (Feed::Grpc, &EventSpec::Reply)
        );
        assert_eq!(
            streaming.body,
            BodySpec::Size(8),
            "each message is the reply"
        );
        assert!(spec_err("/pkg.Svc/M stream=sse").contains("server-streaming"));
        assert!(spec_err("/pkg.Svc/M event-size=3").contains("size= or body="));
        assert!(spec_err("/pkg.Svc/M events=3 rate=1k").contains("goes whole"));
        assert!(spec_err("/http events=3").contains("needs stream="));
    }

    #[test]
    fn body_and_size_keys() {
        assert_eq!(spec("/ body=hello").body, BodySpec::Text(b"hello".to_vec()));
        assert_eq!(spec("/ body=a=b").body, BodySpec::Text(b"a=b".to_vec()));
        assert_eq!(spec("/ body=@@x").body, BodySpec::Text(b"@x".to_vec()));
        assert_eq!(spec("/ body=").body, BodySpec::Empty);
        assert_eq!(spec("/ size=64k").body, BodySpec::Size(65536));
        let dir = scratch("body");
        let file = dir.join("b.txt");
        std::fs::write(&file, "from file").unwrap();
        let r = spec(&format!("/ body=@{}", file.display()));
        assert_eq!(r.body, BodySpec::File(file.clone(), b"from file".to_vec()));
        let missing = dir.join("missing.txt");
        let e = spec_err(&format!("/ body=@{}", missing.display()));
        assert!(
            e.contains(&format!("cannot read {}: ", missing.display())),
            "{e}"
        );
        assert!(e.contains("os error"), "{e}");
        assert!(spec_err("/ body=@").contains("no file name after @"));
        assert!(spec_err("/ body=x size=1k").contains("body and size can't both be given"));
        assert!(spec_err("/ size=1k body=x").contains("body and size can't both be given"));
        assert!(spec_err("/ size=1q").contains("size \"1q\" has an unknown unit"));
    }

    #[test]
    fn header_key() {
        let r = spec("/ header=X-A:b header=Cache-Control:no-store");
        assert_eq!(
            r.headers,
            [
                ("X-A".into(), "b".into()),
                ("Cache-Control".into(), "no-store".into())
            ]
        );
        assert_eq!(
            spec("/ header=X-A:").headers,
            [("X-A".into(), String::new())]
        );
        assert!(spec_err("/ header=X-A").contains("header \"X-A\": no colon; expected Name:Value"));
        assert!(spec_err("/ header=X(A:b").contains("\"X(A\" is not a header name"));
        assert!(spec_err("/ header=:b").contains("\"\" is not a header name"));
        assert!(parse_header("X: a\u{1}")
            .unwrap_err()
            .contains("control character"));
    }

    #[test]
    fn delay_keys() {
        let r = spec("/ delay=10ms body-delay=lognormal:10ms:80ms");
        assert_eq!(r.delay, Some(Dist::Fixed(Duration::from_millis(10))));
        assert_eq!(r.body_delay, Dist::parse("lognormal:10ms:80ms").ok());
        assert_eq!(
            spec_err("/ delay=lognormal:80ms:10ms"),
            "delay \"lognormal:80ms:10ms\": p99 (10ms) is below p50 (80ms); expected lognormal:P50:P99"
        );
        assert!(spec_err("/ body-delay=10").starts_with("body-delay \"10\" has no unit"));
    }

    #[test]
    fn fault_key() {
        let r = spec("/ fault=reset:0.1%,close:0.5%,stall:0.01%,truncate:0.1%");
        let names: Vec<_> = r.faults.iter().map(|(f, _)| f.name()).collect();
        assert_eq!(names, ["reset", "close", "stall", "truncate"]);
        assert_eq!(r.faults[1], (Fault::Close, 0.005));
        assert_eq!(spec("/ fault=close").faults, [(Fault::Close, 1.0)]);
        assert!(spec_err("/ fault=boom:1%").contains("fault \"boom:1%\": unknown fault \"boom\""));
        assert!(spec_err("/ fault=reset:1").contains("\"1\" has no % sign"));
        assert!(spec_err("/ fault=reset:60%,close:50%").contains("add up to 110%, over 100%"));
    }

    #[test]
    fn rate_key() {
        assert_eq!(spec("/ rate=1m").rate, Some(1_048_576));
        assert_eq!(spec("/ rate=1000").rate, Some(1000));
        assert!(spec_err("/ rate=0").contains("rate \"0\" must be above 0"));
        assert!(spec_err("/ rate=fast").contains("rate \"fast\" is not a number"));
    }

    #[test]
    fn openai_keys_shape_the_backend_and_refuse_what_they_replace() {
        let r = spec("/v1/* openai=on model=a model=b tokens=uniform:5:9 first=80ms gap=15ms prefill=50us context=4096 capacity=8");
        let o = r.openai.as_ref().unwrap();
        assert_eq!(o.models, ["a", "b"]);
        assert_eq!(o.tokens, Some(Count::Uniform { low: 5, high: 9 }));
        assert_eq!(
            (o.prefill, o.context),
            (Some(Duration::from_micros(50)), Some(4096))
        );
        assert_eq!(o.gap.as_ref().unwrap().to_string(), "15ms");
        assert!(r.stream.is_none() && matches!(r.pool, Some(RoutePool::Own(_))));
        assert_eq!(spec("/v1/* openai=off").openai, None);
        for (route, named) in [
            (
                "/v1/* openai=on body=x",
                "body can't be given with openai=on",
            ),
            (
                "/v1/* openai=on stream=sse",
                "stream can't be given with openai=on",
            ),
            (
                "/v1/* openai=on events=5",
                "events can't be given with openai=on",
            ),
            ("/v1/* tokens=5", "tokens needs openai=on"),
            ("/v1/* model=a", "model needs openai=on"),
            (
                "/v1/* gap=5ms",
                "gap needs stream=sse|ndjson|chunks (or openai=on)",
            ),
            ("/v1/* openai=yes", "openai \"yes\": expected on or off"),
            (
                "/v1/* openai=on prefill=uniform:1ms:2ms",
                "prefill \"uniform:1ms:2ms\"",
            ),
            (
                "/v1/* openai=on context=0",
                "context \"0\" is not a number of tokens",
            ),
        ] {
            let err = spec_err(route);
            assert!(err.starts_with(named), "{route}: {err}");
        }
    }

    #[test]
    fn key_errors() {
        assert_eq!(
            spec_err("/ colour=red"),
            "unknown key \"colour\"; expected one of status, body, size, header, delay, body-delay, fault, rate, stream, events, first, gap, event, event-size, openai, model, tokens, prefill, context, grpc-status, grpc-message, health, pool, capacity, queue, queue-timeout, shed"
        );
        assert!(spec_err("/ status").contains("\"status\" is not key=value"));
        assert_eq!(spec_err("/ status=200 status=404"), "status given twice");
        assert_eq!(spec_err("/ delay=1ms delay=2ms"), "delay given twice");
    }
}
