//! A route as the user writes it: the `--route SPEC` flag and the `--routes FILE` TOML file.
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
//! ```
//!
//! Because tokens are split at whitespace, a flag's `body=TEXT` and `header=Name:Value` cannot
//! contain spaces; the TOML form (or `body=@FILE`) can. The file form is an array of `[[route]]`
//! tables with the same keys, plus `path`, `methods` and an optional `name`. Both forms share one
//! parser per key (`Key` and the `parse_*` functions below), so a value means the same thing
//! wherever it is written.
//!
//! Reading a `body=@FILE` at parse time, and the `--routes` file itself, are the only I/O.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::{Spanned, Value};

use super::dist::{parse_percent, parse_size, Dist};
use super::phase_spec::{PhaseKeys, PhaseSpec};
use super::pool_spec::{PoolKeys, PoolSpec};

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

/// A fault a route injects into a fraction of its responses, instead of answering normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Abort the connection (a TCP reset) instead of answering.
    Reset,
    /// Close the connection cleanly instead of answering.
    Close,
    /// Never answer, keeping the connection open.
    Stall,
    /// Send the head and part of the body, then close.
    Truncate,
}

impl Fault {
    /// Every fault, in the order their names are listed in errors.
    pub const ALL: [Fault; 4] = [Fault::Reset, Fault::Close, Fault::Stall, Fault::Truncate];

    /// The name a `fault=` value uses: `reset`, `close`, `stall`, `truncate`.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Reset => "reset",
            Fault::Close => "close",
            Fault::Stall => "stall",
            Fault::Truncate => "truncate",
        }
    }
}

/// A route: which requests it answers and how, as written by the user.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteSpec {
    /// A label: the route as written without its keys (`GET,HEAD /api/*`, `/health`), or a
    /// TOML route's `name`.
    pub name: String,
    /// The methods answered, uppercased; empty for any method.
    pub methods: Vec<String>,
    /// The paths answered.
    pub path: PathMatch,
    /// The status answered when no `status_mix` entry is drawn: 200 unless given.
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
}

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
        }
    }
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
}

impl Key {
    const ALL: [Key; 8] = [
        Key::Status,
        Key::Body,
        Key::Size,
        Key::Header,
        Key::Delay,
        Key::BodyDelay,
        Key::Fault,
        Key::Rate,
    ];

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
        }
    }
}

/// The known keys, for the unknown-key error.
const KEY_LIST: &str = "status, body, size, header, delay, body-delay, fault, rate, pool, capacity, queue, queue-timeout, shed";

/// A route being filled in key by key: checks repeats and exclusions, then the key's parser.
struct Builder<'a> {
    route: RouteSpec,
    seen: Vec<Key>,
    /// `pool=NAME`, or the keys of the route's own pool.
    pool_name: Option<String>,
    pool_keys: PoolKeys,
    /// Where `body=@FILE` paths are relative to: the TOML file's directory, or the working
    /// directory for the flag.
    base_dir: Option<&'a Path>,
}

impl Builder<'_> {
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
        if key != Key::Header && self.seen.contains(&key) {
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
        self.seen.push(key);
        self.apply(key, value)
            .map_err(|e| format!("{} {e}", key.name()))
    }

    /// The route, once every key is in: its pool named or its own (not both). `at` says where
    /// the route was written, for a `pool=NAME` no pool turns out to have.
    fn finish(mut self, at: String) -> Result<RouteSpec, String> {
        self.route.pool = match (self.pool_name, self.pool_keys.any()) {
            (Some(_), true) => {
                return Err("pool=NAME and the pool keys (capacity, queue, queue-timeout, shed) can't both be given: the keys make the route a pool of its own".into())
            }
            (Some(name), false) => Some(RoutePool::Named { name, at }),
            (None, true) => Some(RoutePool::Own(self.pool_keys.finish(&self.route.name)?)),
            (None, false) => None,
        };
        Ok(self.route)
    }

    /// Parses `value` for `key` into the route.
    fn apply(&mut self, key: Key, value: &str) -> Result<(), String> {
        let route = &mut self.route;
        match key {
            Key::Status => (route.status, route.status_mix) = parse_status(value)?,
            Key::Body => route.body = parse_body(value, self.base_dir)?,
            Key::Size => route.body = BodySpec::Size(parse_size(value)?),
            Key::Header => route.headers.push(parse_header(value)?),
            Key::Delay => route.delay = Some(Dist::parse(value)?),
            Key::BodyDelay => match Dist::parse(value)? {
                d if d.in_flight().is_some() => {
                    return Err(format!("{value:?}: inflight:BASE:PER is a model of delay= only (the time before the answer)"))
                }
                d => route.body_delay = Some(d),
            },
            Key::Fault => route.faults = parse_faults(value)?,
            Key::Rate => route.rate = Some(parse_rate(value)?),
        }
        Ok(())
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
    let mut builder = Builder {
        route: RouteSpec::new(name, methods, path),
        seen: Vec::new(),
        pool_name: None,
        pool_keys: PoolKeys::default(),
        base_dir: None,
    };
    for token in tokens {
        let (key, value) = token
            .split_once('=')
            .ok_or_else(|| format!("{token:?} is not key=value; the keys are {KEY_LIST}"))?;
        builder.set(key, value)?;
    }
    builder.finish(format!("--route {s:?}"))
}

/// `base` as a phase changes it: each of `keys` (route keys, as written) replaces the route's own
/// (`header` keys replace all its headers). Without pool keys it keeps its pool; with them it has a
/// pool of its own for the phase, named `ROUTE @PHASE`.
pub fn overridden(
    base: &RouteSpec,
    keys: &[(String, String)],
    phase: &str,
    base_dir: Option<&Path>,
) -> Result<RouteSpec, String> {
    let mut route = base.clone();
    if keys.iter().any(|(k, _)| k == "header") {
        route.headers.clear();
    }
    if keys.iter().any(|(k, _)| k == "fault") {
        route.faults.clear();
    }
    route.name = format!("{} @{phase}", base.name);
    let mut builder = Builder {
        route,
        seen: Vec::new(),
        pool_name: None,
        pool_keys: PoolKeys::default(),
        base_dir,
    };
    for (key, value) in keys {
        builder.set(key, value)?;
    }
    let keeps_pool = builder.pool_name.is_none() && !builder.pool_keys.any();
    let mut route = builder.finish(format!("phase {phase}"))?;
    if keeps_pool {
        route.pool = base.pool.clone();
    }
    route.name = base.name.clone();
    Ok(route)
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
    let mut base = None;
    let mut mix = Vec::new();
    for entry in value.split(',') {
        let (code, percent) = match entry.split_once(':') {
            Some((code, percent)) => (code, Some(percent)),
            None => (entry, None),
        };
        let code = match code.parse::<u16>() {
            Ok(code) if (100..=999).contains(&code) => code,
            _ => {
                return Err(format!(
                    "{value:?}: {code:?} is not a status in 100..=999; {FORM}"
                ))
            }
        };
        match percent {
            Some(p) => mix.push((
                code,
                parse_percent(p).map_err(|e| format!("{value:?}: {e}"))?,
            )),
            None if base.is_some() => {
                return Err(format!(
                    "{value:?}: more than one status without a percentage; {FORM}"
                ))
            }
            None => base = Some(code),
        }
    }
    let base_code = base.unwrap_or(200);
    let mut seen = vec![base_code];
    for &(code, _) in &mix {
        if seen.contains(&code) {
            return Err(format!("{value:?}: status {code} is listed twice; {FORM}"));
        }
        seen.push(code);
    }
    check_total(value, mix.iter().map(|&(_, f)| f))?;
    Ok((base.unwrap_or(200), mix))
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

/// A `--routes` file: `[[route]]` tables and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutesFile {
    #[serde(default)]
    route: Vec<Spanned<TomlRoute>>,
    #[serde(default)]
    pool: Vec<Spanned<TomlPool>>,
    #[serde(default)]
    phase: Vec<Spanned<toml::Table>>,
}

/// One `[[pool]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPool {
    name: Option<Spanned<Value>>,
    capacity: Option<Spanned<Value>>,
    queue: Option<Spanned<Value>>,
    #[serde(rename = "queue-timeout")]
    queue_timeout: Option<Spanned<Value>>,
    shed: Option<Spanned<Value>>,
}

/// What a `--routes` file defines: its routes, and its pools with the place each is written
/// (`FILE:LINE`, for the error of a pool defined twice).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoutesDoc {
    pub routes: Vec<RouteSpec>,
    pub pools: Vec<(PoolSpec, String)>,
    pub phases: Vec<PhaseSpec>,
}

/// One `[[route]]` table as written, each value with its place in the file for errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlRoute {
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
    pool: Option<Spanned<Value>>,
    capacity: Option<Spanned<Value>>,
    queue: Option<Spanned<Value>>,
    #[serde(rename = "queue-timeout")]
    queue_timeout: Option<Spanned<Value>>,
    shed: Option<Spanned<Value>>,
}

/// An error at a place in the TOML text.
type Located = (Range<usize>, String);

/// Parses a `--routes` TOML file (see the module documentation). Errors name the file and the
/// line: `routes.toml:7: delay "…": …`.
pub fn parse_file(path: &Path) -> Result<RoutesDoc, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse_toml_doc(&text, path)
}

/// [`parse_file`] for text already read from `path` (which names it in errors and is where
/// relative `body = "@FILE"` paths start).
pub fn parse_toml(text: &str, path: &Path) -> Result<Vec<RouteSpec>, String> {
    parse_toml_doc(text, path).map(|doc| doc.routes)
}

/// [`parse_toml`], with the file's `[[pool]]` and `[[phase]]` tables.
pub fn parse_toml_doc(text: &str, path: &Path) -> Result<RoutesDoc, String> {
    parse_toml_doc_from(text, path, path.parent())
}

/// [`parse_toml_doc`] for a document that is not a file (a `PUT /routes` body): `name` names it in
/// errors, and relative `@FILE` paths start at `base_dir` (none: the working directory).
pub fn parse_toml_doc_from(
    text: &str,
    path: &Path,
    base_dir: Option<&Path>,
) -> Result<RoutesDoc, String> {
    let at = |span: Option<Range<usize>>| match span {
        Some(span) => format!("{}:{}", path.display(), line_of(text, span.start)),
        None => path.display().to_string(),
    };
    let file: RoutesFile = toml::from_str(text).map_err(|e| {
        let message = e.message().trim().replace('\n', "; ");
        format!("{}: {message}", at(e.span()))
    })?;
    if file.route.is_empty() {
        let shown = path.display();
        return Err(format!(
            "{shown}: no routes; expected [[route]] tables with path = \"/...\""
        ));
    }
    let routes = file
        .route
        .iter()
        .map(|route| {
            let place = at(Some(route.span()));
            toml_route(route, base_dir, place)
                .map_err(|(span, e)| format!("{}: {e}", at(Some(span))))
        })
        .collect::<Result<_, _>>()?;
    let pools = file
        .pool
        .iter()
        .map(|pool| {
            let spec = toml_pool(pool).map_err(|(span, e)| format!("{}: {e}", at(Some(span))))?;
            Ok((spec, at(Some(pool.span()))))
        })
        .collect::<Result<_, String>>()?;
    let phases = (file.phase.iter().enumerate())
        .map(|(i, phase)| {
            let place = at(Some(phase.span()));
            toml_phase(phase.get_ref(), i, place.clone(), base_dir)
                .map_err(|e| format!("{place}: [[phase]] {e}"))
        })
        .collect::<Result<_, String>>()?;
    Ok(RoutesDoc {
        routes,
        pools,
        phases,
    })
}

/// One `[[phase]]` table: its keys as the flag's, each value as text (an array is one key per item).
fn toml_phase(
    table: &toml::Table,
    index: usize,
    place: String,
    base_dir: Option<&Path>,
) -> Result<PhaseSpec, String> {
    let mut keys = PhaseKeys::default();
    for (key, value) in table {
        let items = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for item in items {
            let text = match item {
                Value::String(s) => s.clone(),
                Value::Integer(i) => i.to_string(),
                _ => return Err(format!("{key} must be a string or an integer")),
            };
            keys.set(key, &text)?;
        }
    }
    let mut phase = keys.finish(index, place)?;
    phase.base_dir = base_dir.map(Path::to_path_buf);
    Ok(phase)
}

/// One `[[pool]]` table as a pool, through the flag's key parsers.
fn toml_pool(table: &Spanned<TomlPool>) -> Result<PoolSpec, Located> {
    let pool = table.get_ref();
    let Some(name) = &pool.name else {
        return Err((
            table.span(),
            "the pool has no name; expected name = \"NAME\"".into(),
        ));
    };
    let name = one_text("name", name)?;
    let mut keys = PoolKeys::default();
    let keyed = [
        ("capacity", &pool.capacity),
        ("queue", &pool.queue),
        ("queue-timeout", &pool.queue_timeout),
        ("shed", &pool.shed),
    ];
    for (key, value) in keyed {
        if let Some(value) = value {
            let text = one_text(key, value)?;
            keys.set(key, &text).map_err(|e| (value.span(), e))?;
        }
    }
    keys.finish(&name).map_err(|e| (table.span(), e))
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.as_bytes().get(..offset).unwrap_or(text.as_bytes());
    before.iter().filter(|&&b| b == b'\n').count() + 1
}

/// One `[[route]]` table as a route, through the same key parsers as the flag.
fn toml_route(
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
    let mut builder = Builder {
        route: RouteSpec::new(name, methods, path),
        seen: Vec::new(),
        pool_name: None,
        pool_keys: PoolKeys::default(),
        base_dir,
    };
    let keyed = [
        (Key::Status, &route.status),
        (Key::Body, &route.body),
        (Key::Size, &route.size),
        (Key::Header, &route.header),
        (Key::Delay, &route.delay),
        (Key::BodyDelay, &route.body_delay),
        (Key::Fault, &route.fault),
        (Key::Rate, &route.rate),
    ];
    for (key, value) in keyed {
        let Some(value) = value else { continue };
        let values = if key == Key::Header {
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
fn one_text(key: &str, value: &Spanned<Value>) -> Result<String, Located> {
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
fn texts(key: &str, value: &Spanned<Value>) -> Result<Vec<String>, Located> {
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
    use std::time::Duration;

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
            RouteSpec::new("/health".into(), vec![], PathMatch::Exact("/health".into()))
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
    fn key_errors() {
        assert_eq!(
            spec_err("/ colour=red"),
            "unknown key \"colour\"; expected one of status, body, size, header, delay, body-delay, fault, rate, pool, capacity, queue, queue-timeout, shed"
        );
        assert!(spec_err("/ status").contains("\"status\" is not key=value"));
        assert_eq!(spec_err("/ status=200 status=404"), "status given twice");
        assert_eq!(spec_err("/ delay=1ms delay=2ms"), "delay given twice");
    }

    const ROUTES: &str = r#"# three routes
[[route]]
path = "/health"
body = "ok"

[[route]]
name = "api"
methods = ["get", "HEAD"]
path = "/api/*"
status = "503:10%,429:5%"
header = ["Cache-Control: no-store", "X-Served-By: statico"]
delay = "lognormal:10ms:80ms"
body-delay = "1ms"
fault = "reset:0.1%"
body = "@body.txt"

[[route]]
methods = "POST,PUT"
path = "/upload"
status = 201
size = 1024
rate = "1m"
"#;

    #[test]
    fn toml_file_with_three_routes() {
        let dir = scratch("toml");
        std::fs::write(dir.join("body.txt"), "api body").unwrap();
        let file = dir.join("routes.toml");
        std::fs::write(&file, ROUTES).unwrap();
        let routes = parse_file(&file).unwrap().routes;
        assert_eq!(routes.len(), 3);
        assert_eq!(
            routes[0],
            RouteSpec {
                body: BodySpec::Text(b"ok".to_vec()),
                ..spec("/health")
            }
        );
        let api = &routes[1];
        assert_eq!(api.name, "api");
        assert_eq!(api.methods, ["GET", "HEAD"]);
        assert_eq!(api.status_mix, [(503, 0.1), (429, 0.05)]);
        assert_eq!(api.headers[1], ("X-Served-By".into(), "statico".into()));
        assert_eq!(api.delay, Dist::parse("lognormal:10ms:80ms").ok());
        assert_eq!(api.body_delay, Some(Dist::Fixed(Duration::from_millis(1))));
        assert_eq!(api.faults, [(Fault::Reset, 0.001)]);
        assert_eq!(
            api.body,
            BodySpec::File(dir.join("body.txt"), b"api body".to_vec())
        );
        let upload = &routes[2];
        assert_eq!(upload.name, "POST,PUT /upload");
        assert_eq!(
            (upload.status, &upload.body, upload.rate),
            (201, &BodySpec::Size(1024), Some(1 << 20))
        );
        assert!(parse_file(&dir.join("none.toml"))
            .unwrap_err()
            .contains("none.toml: cannot read: "));
    }

    fn toml_err(text: &str) -> String {
        parse_toml(text, Path::new("routes.toml")).expect_err(text)
    }

    #[test]
    fn toml_errors_name_file_and_line() {
        let text = "[[route]]\npath = \"/a\"\n\n[[route]]\npath = \"/b\"\nstatus = 200\ndelay = \"lognormal:80ms:10ms\"\n";
        assert_eq!(
            toml_err(text),
            "routes.toml:7: delay \"lognormal:80ms:10ms\": p99 (10ms) is below p50 (80ms); expected lognormal:P50:P99"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\ncolour = \"red\"\n");
        assert!(
            e.starts_with("routes.toml:3: unknown field `colour`"),
            "{e}"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\n\n[server]\nport = 1\n");
        assert!(
            e.starts_with("routes.toml:4: unknown field `server`"),
            "{e}"
        );
        let e = toml_err("[[route]]\npath = \"/a\nstatus = 200\n");
        assert!(e.starts_with("routes.toml:2: "), "{e}");
        let e = toml_err("[[route]]\npath = \"/a\"\n\n[[route]]\nstatus = 200\n");
        assert!(e.starts_with("routes.toml:4: the route has no path"), "{e}");
        let e = toml_err("[[route]]\npath = \"/a\"\nheader = 5\n");
        assert_eq!(
            e,
            "routes.toml:3: header must be a string or an array of strings"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\nrate = 1.5\n");
        assert_eq!(e, "routes.toml:3: rate must be a string or an integer");
        let e = toml_err("[[route]]\npath = \"/a\"\nmethods = [\"GET\", \"G T\"]\n");
        assert!(
            e.starts_with("routes.toml:3: methods \"G T\": \"G T\" is not a method"),
            "{e}"
        );
        let e = toml_err("[[route]]\npath = \"/a\"\nbody = \"@nope.txt\"\n");
        assert!(
            e.starts_with("routes.toml:3: body \"@nope.txt\": cannot read nope.txt: "),
            "{e}"
        );
        assert_eq!(
            toml_err(""),
            "routes.toml: no routes; expected [[route]] tables with path = \"/...\""
        );
    }

    #[test]
    fn toml_spaces_and_single_strings() {
        let text = "[[route]]\npath = \"/\"\nbody = \"text with spaces\"\nheader = \"X-A: b c\"\nsize = \"64k\"\n";
        assert!(toml_err(text).contains("body and size can't both be given"));
        let text = "[[route]]\npath = \"/\"\nbody = \"text with spaces\"\nheader = \"X-A: b c\"\n";
        let r = parse_toml(text, Path::new("r.toml")).unwrap();
        assert_eq!(r[0].body, BodySpec::Text(b"text with spaces".to_vec()));
        assert_eq!(r[0].headers, [("X-A".into(), "b c".into())]);
    }
}
