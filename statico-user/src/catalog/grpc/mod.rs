//! gRPC over HTTP/2 (`--grpc`): which calls statico answers and what each gets, without I/O.
//!
//! A request on HTTP/2 whose `content-type` is `application/grpc` (or `application/grpc+…`,
//! `application/grpc;…`) is a gRPC call: it is answered by the gRPC route its path matches (a
//! route on a method path, [`crate::catalog::route`], its answers made by [`route_answer`]), else by
//! the built-in service its path names, else `UNIMPLEMENTED` in trailers-only form; no other route
//! takes it. The built-in services:
//! - Fortio's `fgrpc.PingServer/Ping`, as `fortio server` answers it: the message echoed with the
//!   server's receive time in `ts`, after `delayNanos` (at most `--max-delay`);
//! - `grpc.health.v1.Health` `Check` and `Watch`: `""`, every service below and Fortio's `ping`
//!   are SERVING, unless a route with `health=` on a health method's path gives another status
//!   ([`HealthSource`], read at each check; a `Watch` reads it every [`WATCH_EVERY`] and sends each
//!   change); another name is `NOT_FOUND` (`Check`) or `SERVICE_UNKNOWN` (`Watch`);
//! - server reflection, `grpc.reflection.v1` and `v1alpha` (`ServerReflectionInfo`): the services,
//!   and their files ([`descriptors`]) by name and by symbol;
//! - grpc-go's interop `grpc.testing.TestService` ([`testing`]), its metadata echoed: the value of
//!   `x-grpc-test-echo-initial` in the head, of `x-grpc-test-echo-trailing-bin` in the trailers.
//!
//! A unary call's answer is made once its request body is read ([`Call::unary_answer`]) and is
//! delivered like every answer, its trailers last ([`crate::catalog::model::delivery`]); one held
//! past the call's `grpc-timeout` is `DEADLINE_EXCEEDED` at the deadline instead. A streaming call
//! (reflection, `Watch`, the interop streams) answers message by message ([`Call::replies`]), and
//! ends `DEADLINE_EXCEEDED` if its `grpc-timeout` passes while it waits for the client.

pub mod descriptors;
pub mod frame;
pub mod messages;
pub mod status;
pub mod testing;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use prost::Message;

use super::model::hold::{Hold, Recorder, TruthKey};
use super::route::live::LiveRoutes;
use super::stream::StreamAnswer;
use messages::{
    ErrorResponse, FileDescriptorResponse, HealthCheckRequest, HealthCheckResponse,
    ListServiceResponse, PingMessage, ReflectionAsk, ReflectionReply, ServerReflectionRequest,
    ServerReflectionResponse, ServiceResponse, ServingStatus,
};
use status::{CallStatus, Code};

/// The services statico answers, as reflection lists them.
pub const SERVICES: [&str; 5] = [
    "fgrpc.PingServer",
    "grpc.health.v1.Health",
    "grpc.testing.TestService",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Every built-in method's path: the ground truth counts their calls per path, in this order,
/// after the routes ([`BuiltinTruth`]).
pub const METHOD_PATHS: [&str; 10] = [
    "/fgrpc.PingServer/Ping",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "/grpc.testing.TestService/EmptyCall",
    "/grpc.testing.TestService/UnaryCall",
    "/grpc.testing.TestService/StreamingInputCall",
    "/grpc.testing.TestService/StreamingOutputCall",
    "/grpc.testing.TestService/FullDuplexCall",
];

/// The outcomes of a built-in method in the ground truth: each gRPC status, its index its code's
/// number, then `gone` (the client left before its status).
pub fn method_outcomes() -> Vec<String> {
    (Code::ALL.iter().map(|c| c.name().to_owned()))
        .chain(["gone".to_owned()])
        .collect()
}

/// Where a built-in method's calls record their ground truth: the recorder of the thread that
/// answers, and where the built-in methods start in the routes table's truth.
#[derive(Clone, Debug)]
pub struct BuiltinTruth {
    pub recorder: Recorder,
    pub first: u16,
    pub generation: u32,
}

/// A call's ground truth: where it goes, and the key of its method (its outcome set when known).
#[derive(Clone, Debug)]
struct CallTruth {
    recorder: Recorder,
    key: TruthKey,
}

/// The health service's methods, whose status a route with `health=` on their path gives.
pub const HEALTH_METHODS: [&str; 2] = [
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
];

/// How often a `Watch` reads the health routes for a change (a phase's, or the control API's).
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The health service name `fortio server` marks SERVING (Fortio's default for its clients).
const FORTIO_HEALTH: &str = "ping";

/// The gRPC services of one server: what they need from its flags, and their files.
#[derive(Clone, Debug)]
pub struct Grpc {
    /// `--max-delay`: the longest `delayNanos` a ping is held.
    max_delay: Duration,
    files: Arc<Vec<prost_types::FileDescriptorProto>>,
}

/// A built-in method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Ping,
    Check,
    Watch,
    Reflection,
    EmptyCall,
    UnaryCall,
    StreamingInputCall,
    StreamingOutputCall,
    FullDuplexCall,
}

/// A call to a built-in method, to be answered once its request messages are read.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: Method,
    /// `grpc-timeout`: a unary reply held past it is `DEADLINE_EXCEEDED` at the deadline instead.
    deadline: Option<Duration>,
    grpc: Grpc,
    /// `x-grpc-test-echo-initial`: sent back in the head.
    echo_initial: Option<HeaderValue>,
    /// `x-grpc-test-echo-trailing-bin`: sent back in the trailers.
    echo_trailing: Option<HeaderValue>,
    /// `StreamingInputCall`: the payload bytes received so far.
    received: u64,
    /// Where the health service reads the routes' `health=`.
    health: HealthSource,
    /// `Watch`: the service watched, and the status last sent.
    watched: Option<(String, ServingStatus)>,
    /// Where its outcome is recorded (a call of a served method, with `--grpc`).
    truth: Option<CallTruth>,
}

impl CallTruth {
    /// The truth of a call on `path`, if it is a built-in method's.
    fn of(truth: BuiltinTruth, path: &str) -> Option<CallTruth> {
        let method = METHOD_PATHS.iter().position(|p| *p == path)?;
        Some(CallTruth {
            key: TruthKey {
                route: truth.first + method as u16,
                outcome: 0,
                generation: truth.generation,
            },
            recorder: truth.recorder,
        })
    }

    /// The key with the outcome of `status` (`None`: the client left).
    fn key(&self, status: Option<&CallStatus>) -> TruthKey {
        let gone = Code::ALL.len() as u8;
        TruthKey {
            outcome: status.map_or(gone, |s| s.code as u8),
            ..self.key
        }
    }
}

/// Where the health service reads the status the routes give it now
/// ([`crate::catalog::route::Routes::health`]): the routes in force, read at each check.
#[derive(Clone, Debug, Default)]
pub struct HealthSource(Option<Arc<LiveRoutes>>);

impl HealthSource {
    pub fn new(routes: Option<Arc<LiveRoutes>>) -> HealthSource {
        HealthSource(routes)
    }

    /// The status a route gives, if one does.
    fn status(&self) -> Option<ServingStatus> {
        self.0.as_ref()?.load().health()
    }
}

/// One reply of a streaming call: sent `wait` after the one before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedReply {
    pub wait: Duration,
    body: ReplyBody,
}

/// What a [`TimedReply`] sends.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ReplyBody {
    Framed(Bytes),
    /// A streaming output's payload of this many zeros, made when it is sent.
    Zeros(usize),
}

impl TimedReply {
    fn now(message: &[u8]) -> TimedReply {
        TimedReply {
            wait: Duration::ZERO,
            body: ReplyBody::Framed(frame::framed(message)),
        }
    }

    /// The reply as it goes out, framed.
    pub fn framed(&self) -> Bytes {
        match &self.body {
            ReplyBody::Framed(framed) => framed.clone(),
            ReplyBody::Zeros(size) => frame::framed(&testing::output_reply(*size)),
        }
    }
}

/// A header name made when compiled, not parsed per call.
macro_rules! name {
    ($name:expr) => {
        const { ::http::HeaderName::from_static($name) }
    };
}
pub(super) use name;

const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";

/// Whether a `content-type` is gRPC's.
pub fn is_grpc(content_type: &[u8]) -> bool {
    let Some(rest) = content_type.strip_prefix(b"application/grpc") else {
        return false;
    };
    matches!(rest.first(), None | Some(b'+' | b';'))
}

/// The built-in method at `path`.
pub fn method(path: &str) -> Option<Method> {
    Some(match path {
        "/fgrpc.PingServer/Ping" => Method::Ping,
        "/grpc.health.v1.Health/Check" => Method::Check,
        "/grpc.health.v1.Health/Watch" => Method::Watch,
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        | "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo" => Method::Reflection,
        "/grpc.testing.TestService/EmptyCall" => Method::EmptyCall,
        "/grpc.testing.TestService/UnaryCall" => Method::UnaryCall,
        "/grpc.testing.TestService/StreamingInputCall" => Method::StreamingInputCall,
        "/grpc.testing.TestService/StreamingOutputCall" => Method::StreamingOutputCall,
        "/grpc.testing.TestService/FullDuplexCall" => Method::FullDuplexCall,
        _ => return None,
    })
}

/// The head of every gRPC answer: 200 with gRPC's content type (a trailers-only answer adds its
/// status to it).
fn head_fields() -> HeaderMap {
    let mut fields = HeaderMap::new();
    fields.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    fields.insert(
        name!("grpc-accept-encoding"),
        HeaderValue::from_static("identity"),
    );
    fields
}

/// An answer with no message: its status in its head, which ends the stream.
pub fn trailers_only(status: &CallStatus) -> StreamAnswer {
    let mut headers = head_fields();
    status.add_to(&mut headers);
    stream_answer(headers, Bytes::new(), Hold::default(), None)
}

/// A call refused with `status` before it is read, trailers-only: its outcome recorded with
/// `truth`, if it has one.
fn refused(status: &CallStatus, truth: Option<CallTruth>) -> StreamAnswer {
    let mut answer = trailers_only(status);
    if let Some(truth) = truth {
        answer.hold.truth = Some(truth.key(Some(status)));
        answer.recorder = Some(truth.recorder);
    }
    answer
}

/// A gRPC answer of these parts: HTTP status 200 always (the call's outcome is its `grpc-status`).
fn stream_answer(
    headers: HeaderMap,
    body: Bytes,
    hold: Hold,
    trailers: Option<HeaderMap>,
) -> StreamAnswer {
    StreamAnswer {
        status: StatusCode::OK,
        headers,
        body,
        hold,
        recorder: None,
        admission: None,
        pauses: None,
        events: None,
        grpc: None,
        trailers,
        awaits: None,
    }
}

/// A calibrated route's answer with `status` (see [`crate::catalog::route`]): `fields` in the
/// head (but `content-type` and `grpc-*`, which are gRPC's), then `message` framed (or, with none,
/// a server-streaming route's messages, its events) and OK in the trailers, or any other status
/// trailers-only.
pub fn route_answer(
    fields: HeaderMap,
    message: Option<&[u8]>,
    status: &CallStatus,
) -> StreamAnswer {
    let mut headers = route_head(fields);
    match status.code {
        Code::Ok => stream_answer(
            headers,
            message.map_or_else(Bytes::new, frame::framed),
            Hold::default(),
            Some(status.trailers()),
        ),
        _ => {
            status.add_to(&mut headers);
            stream_answer(headers, Bytes::new(), Hold::default(), None)
        }
    }
}

/// A server-streaming route's answer whose messages are cut short: `fields` in the head, the
/// messages (its events), then `status` in the trailers.
pub fn messages_cut(fields: HeaderMap, status: &CallStatus) -> StreamAnswer {
    stream_answer(
        route_head(fields),
        Bytes::new(),
        Hold::default(),
        Some(status.trailers()),
    )
}

/// A route's head: gRPC's fields, and the route's `fields` but `content-type` and `grpc-*`.
fn route_head(fields: HeaderMap) -> HeaderMap {
    let mut headers = head_fields();
    for (name, value) in &fields {
        let name_text = name.as_str();
        if name != http::header::CONTENT_TYPE && !name_text.starts_with("grpc-") {
            headers.append(name, value.clone());
        }
    }
    headers
}

/// A gRPC route's reply message: a health check's answer with its `health=` status, `body=` as it
/// is, `size=N` a message whose field 1 holds N bytes of `generated`, or an empty message.
pub fn route_reply(spec: &super::route::spec::RouteSpec, generated: &Bytes) -> Bytes {
    use super::route::spec::BodySpec;
    if let Some(status) = spec.health {
        return health(status).into();
    }
    match &spec.body {
        BodySpec::Empty => Bytes::new(),
        BodySpec::Text(b) | BodySpec::File(_, b) => Bytes::from(b.clone()),
        BodySpec::Size(n) => bytes_message(&generated[..*n as usize]),
    }
}

/// A message whose field 1 (`bytes`) holds `payload`: a route's `size=N` reply.
pub fn bytes_message(payload: &[u8]) -> Bytes {
    let mut message = Vec::with_capacity(payload.len() + 10);
    prost::encoding::bytes::encode(1, &payload.to_vec(), &mut message);
    message.into()
}

/// The answer to a gRPC call over HTTP/3: 415, as over HTTP/1.1.
pub fn unsupported(date: &[u8; super::response::DATE_LEN]) -> StreamAnswer {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(0));
    let mut answer = StreamAnswer {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ..stream_answer(headers, Bytes::new(), Hold::default(), None)
    };
    answer.set_date(date);
    answer
}

impl Grpc {
    pub fn new(max_delay: Duration) -> Grpc {
        Grpc {
            max_delay,
            files: Arc::new(descriptors::files()),
        }
    }

    /// The answer to a gRPC call on `path` with these header `fields`: a built-in method's, made
    /// once its request is read (the answer carries its [`Call`]), else `UNIMPLEMENTED`; a
    /// malformed `grpc-timeout` gets `INTERNAL` (as grpc-go answers it, counted so for a built-in
    /// method). The health service's
    /// status is the one `health` reads, SERVING if none.
    /// `truth`: where the call's outcome is recorded, under its method's path.
    pub fn answer(
        &self,
        path: &str,
        fields: &HeaderMap,
        health: HealthSource,
        truth: Option<BuiltinTruth>,
    ) -> StreamAnswer {
        let grpc_timeout = fields.get(name!("grpc-timeout")).map(HeaderValue::as_bytes);
        let deadline = match grpc_timeout.map(timeout).transpose() {
            Ok(deadline) => deadline,
            Err(status) => return refused(&status, truth.and_then(|t| CallTruth::of(t, path))),
        };
        match method(path) {
            Some(method) => StreamAnswer {
                grpc: Some(Box::new(Call {
                    method,
                    deadline,
                    grpc: self.clone(),
                    echo_initial: fields.get(name!(ECHO_INITIAL)).cloned(),
                    echo_trailing: fields.get(name!(ECHO_TRAILING)).cloned(),
                    received: 0,
                    health,
                    watched: None,
                    truth: truth.and_then(|t| CallTruth::of(t, path)),
                })),
                // The call makes its own head ([`Call::head`]).
                ..stream_answer(HeaderMap::new(), Bytes::new(), Hold::default(), None)
            },
            None => trailers_only(&CallStatus::new(
                Code::Unimplemented,
                format!("unknown method {path}"),
            )),
        }
    }

    /// Whether the health service knows `service`.
    fn serves(&self, service: &str) -> bool {
        service.is_empty() || service == FORTIO_HEALTH || SERVICES.contains(&service)
    }
}

impl Call {
    /// Whether the call is unary: one request message, one reply, then the trailers.
    pub fn unary(&self) -> bool {
        matches!(
            self.method,
            Method::Ping | Method::Check | Method::EmptyCall | Method::UnaryCall
        )
    }

    /// The head of the call's answer (its echoed metadata in it).
    pub fn head(&self) -> HeaderMap {
        let mut fields = head_fields();
        if let Some(echo) = &self.echo_initial {
            fields.insert(name!(ECHO_INITIAL), echo.clone());
        }
        fields
    }

    /// The trailers that end the call with `status` (its echoed metadata in them).
    pub fn trailers(&self, status: &CallStatus) -> HeaderMap {
        let mut fields = status.trailers();
        if let Some(echo) = &self.echo_trailing {
            fields.insert(name!(ECHO_TRAILING), echo.clone());
        }
        fields
    }

    /// An answer with no message: the head and the trailers in one, which ends the stream.
    fn trailers_only(&self, status: &CallStatus) -> StreamAnswer {
        let mut headers = self.head();
        headers.extend(self.trailers(status));
        stream_answer(headers, Bytes::new(), Hold::default(), None)
    }

    /// The call's `grpc-timeout`.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// Whether the call's stream stays open after the client's last message, until the client
    /// leaves (`Watch`).
    pub fn stays_open(&self) -> bool {
        self.method == Method::Watch
    }

    /// A unary call's answer to its request `messages` (or to the status its body got), received
    /// at `now`: the reply and OK in its trailers, held as the method says; or the status,
    /// trailers-only.
    pub fn unary_answer(
        &self,
        messages: Result<Vec<Bytes>, CallStatus>,
        now: SystemTime,
    ) -> StreamAnswer {
        let (mut answer, status) = self.unary_reply(messages, now);
        if let Some(truth) = &self.truth {
            answer.hold.truth = Some(truth.key(Some(&status)));
            answer.recorder = Some(truth.recorder.clone());
        }
        answer
    }

    /// A streaming call ended `held` after its request began, with `status` (`None`: its client
    /// left, or it was reset): its outcome recorded.
    pub fn record_end(&self, status: Option<&CallStatus>, held: Duration) {
        if let Some(truth) = &self.truth {
            truth
                .recorder
                .record(truth.key(status), Duration::ZERO, held);
        }
    }

    /// [`Call::unary_answer`]'s answer, and its status.
    fn unary_reply(
        &self,
        messages: Result<Vec<Bytes>, CallStatus>,
        now: SystemTime,
    ) -> (StreamAnswer, CallStatus) {
        let reply = messages.and_then(|m| match m.as_slice() {
            [one] => self.reply(one, now),
            _ => Err(CallStatus::new(
                Code::Internal,
                format!("a unary call with {} request messages", m.len()),
            )),
        });
        match reply {
            Ok((_, delay)) if self.deadline.is_some_and(|d| delay >= d) => {
                let deadline = self.deadline.unwrap_or_default();
                let status = CallStatus::deadline_exceeded();
                let answer = StreamAnswer {
                    hold: Hold {
                        delay: deadline,
                        ..Hold::default()
                    },
                    ..self.trailers_only(&status)
                };
                (answer, status)
            }
            Ok((message, delay)) => {
                let answer = stream_answer(
                    self.head(),
                    frame::framed(&message),
                    Hold {
                        delay,
                        ..Hold::default()
                    },
                    Some(self.trailers(&CallStatus::OK)),
                );
                (answer, CallStatus::OK)
            }
            Err(status) => (self.trailers_only(&status), status),
        }
    }

    /// The reply to a unary call's request message, and how long it is held first.
    fn reply(&self, request: &[u8], now: SystemTime) -> Result<(Vec<u8>, Duration), CallStatus> {
        match self.method {
            Method::Ping => {
                let mut ping = decoded::<PingMessage>(request)?;
                let since = now
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default();
                ping.ts = i64::try_from(since.as_nanos()).unwrap_or(i64::MAX);
                let asked = Duration::from_nanos(u64::try_from(ping.delay_nanos).unwrap_or(0));
                Ok((ping.encode_to_vec(), asked.min(self.grpc.max_delay)))
            }
            Method::Check => {
                let ask = decoded::<HealthCheckRequest>(request)?;
                match self.status_of(&ask.service) {
                    Some(status) => Ok((health(status), Duration::ZERO)),
                    None => Err(CallStatus::new(
                        Code::NotFound,
                        format!("unknown service {:?}", ask.service),
                    )),
                }
            }
            Method::EmptyCall => {
                decoded::<testing::Empty>(request)?;
                Ok((testing::Empty {}.encode_to_vec(), Duration::ZERO))
            }
            Method::UnaryCall => Ok((testing::unary_call(decoded(request)?)?, Duration::ZERO)),
            Method::Watch
            | Method::Reflection
            | Method::StreamingInputCall
            | Method::StreamingOutputCall
            | Method::FullDuplexCall => Err(CallStatus::new(
                Code::Internal,
                "a streaming method answered as unary",
            )),
        }
    }

    /// A streaming call's replies to one request message.
    pub fn replies(&mut self, request: &[u8]) -> Result<Vec<TimedReply>, CallStatus> {
        let at_once = |message: Vec<u8>| vec![TimedReply::now(&message)];
        Ok(match self.method {
            Method::Watch => {
                let ask = decoded::<HealthCheckRequest>(request)?;
                let status =
                    (self.status_of(&ask.service)).unwrap_or(ServingStatus::ServiceUnknown);
                self.watched = Some((ask.service, status));
                at_once(health(status))
            }
            Method::Reflection => at_once(self.reflect(decoded(request)?).encode_to_vec()),
            Method::StreamingInputCall => {
                let ask = decoded::<testing::StreamingInputCallRequest>(request)?;
                let size = ask.payload.map_or(0, |p| p.body.len());
                self.received = self.received.saturating_add(size as u64);
                Vec::new()
            }
            Method::StreamingOutputCall | Method::FullDuplexCall => {
                let replies = testing::streaming_output(decoded(request)?)?;
                (replies.into_iter())
                    .map(|r| TimedReply {
                        wait: r.wait,
                        body: ReplyBody::Zeros(r.size),
                    })
                    .collect()
            }
            Method::Ping | Method::Check | Method::EmptyCall | Method::UnaryCall => {
                return Err(CallStatus::new(
                    Code::Internal,
                    "a unary method answered as streaming",
                ))
            }
        })
    }

    /// The health status of a known `service`: the routes' (`health=`), else SERVING.
    fn status_of(&self, service: &str) -> Option<ServingStatus> {
        (self.grpc.serves(service)).then(|| self.health.status().unwrap_or(ServingStatus::Serving))
    }

    /// A `Watch`'s next message: the status of the service watched, if it changed since the one
    /// sent last (read every [`WATCH_EVERY`]).
    pub fn watch(&mut self) -> Option<TimedReply> {
        let (service, sent) = self.watched.as_ref()?;
        let now = self.status_of(service)?;
        if now == *sent {
            return None;
        }
        self.watched = self.watched.take().map(|(service, _)| (service, now));
        Some(TimedReply::now(&health(now)))
    }

    /// A streaming call's replies once the client's side has ended (`StreamingInputCall`'s one).
    pub fn ended(&self) -> Vec<TimedReply> {
        match self.method {
            Method::StreamingInputCall => {
                vec![TimedReply::now(&testing::streaming_input(self.received))]
            }
            _ => Vec::new(),
        }
    }

    /// Server reflection's answer to one request.
    fn reflect(&self, ask: ServerReflectionRequest) -> ServerReflectionResponse {
        let files = self.grpc.files.as_slice();
        let reply = match &ask.message_request {
            Some(ReflectionAsk::ListServices(_)) => {
                ReflectionReply::ListServicesResponse(ListServiceResponse {
                    service: SERVICES
                        .iter()
                        .map(|s| ServiceResponse {
                            name: s.to_string(),
                        })
                        .collect(),
                })
            }
            Some(ReflectionAsk::FileByFilename(name)) => {
                found(files.iter().find(|f| f.name() == name), name)
            }
            Some(ReflectionAsk::FileContainingSymbol(symbol)) => {
                found(files.iter().find(|f| declares(f, symbol)), symbol)
            }
            Some(ReflectionAsk::FileContainingExtension(e)) => {
                not_found(&format!("no extension of {}", e.containing_type))
            }
            Some(ReflectionAsk::AllExtensionNumbersOfType(t)) => {
                match files.iter().any(|f| declares(f, t)) {
                    true => ReflectionReply::AllExtensionNumbersResponse(
                        messages::ExtensionNumberResponse {
                            base_type_name: t.clone(),
                            extension_number: Vec::new(),
                        },
                    ),
                    false => not_found(&format!("unknown type {t}")),
                }
            }
            None => ReflectionReply::ErrorResponse(ErrorResponse {
                error_code: Code::InvalidArgument as i32,
                error_message: "an empty reflection request".into(),
            }),
        };
        ServerReflectionResponse {
            valid_host: ask.host.clone(),
            original_request: Some(ask),
            message_response: Some(reply),
        }
    }
}

/// A `grpc-timeout` value (the gRPC HTTP/2 protocol: at most 8 digits and a unit, `H`, `M`, `S`,
/// `m`, `u` or `n`), or `INTERNAL` naming it.
pub fn timeout(value: &[u8]) -> Result<Duration, CallStatus> {
    let malformed = || {
        CallStatus::new(
            Code::Internal,
            format!(
                "malformed grpc-timeout {:?}",
                String::from_utf8_lossy(value)
            ),
        )
    };
    let (&unit, digits) = value.split_last().ok_or_else(malformed)?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(malformed());
    }
    let n: u64 = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or_else(malformed)?;
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(malformed()),
    })
}

/// `message` decoded, or `INTERNAL` (what grpc-go answers a message it cannot unmarshal).
fn decoded<M: Message + Default>(message: &[u8]) -> Result<M, CallStatus> {
    M::decode(message)
        .map_err(|e| CallStatus::new(Code::Internal, format!("a bad request message: {e}")))
}

fn health(status: ServingStatus) -> Vec<u8> {
    HealthCheckResponse {
        status: status as i32,
    }
    .encode_to_vec()
}

/// A file found for reflection, or its `NOT_FOUND`.
fn found(file: Option<&prost_types::FileDescriptorProto>, asked: &str) -> ReflectionReply {
    match file {
        Some(f) => ReflectionReply::FileDescriptorResponse(FileDescriptorResponse {
            file_descriptor_proto: vec![f.encode_to_vec()],
        }),
        None => not_found(&format!("{asked} not found")),
    }
}

fn not_found(message: &str) -> ReflectionReply {
    ReflectionReply::ErrorResponse(ErrorResponse {
        error_code: Code::NotFound as i32,
        error_message: message.into(),
    })
}

/// Whether `file` declares `symbol` (a message, enum or service of its package, or a member of one:
/// `fgrpc.PingServer.Ping`).
fn declares(file: &prost_types::FileDescriptorProto, symbol: &str) -> bool {
    let Some(name) = symbol
        .strip_prefix(file.package())
        .and_then(|s| s.strip_prefix('.'))
    else {
        return false;
    };
    let top = name.split('.').next().unwrap_or_default();
    file.message_type.iter().any(|m| m.name() == top)
        || file.enum_type.iter().any(|e| e.name() == top)
        || file.service.iter().any(|s| s.name() == top)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: Method) -> Call {
        Call {
            method,
            deadline: None,
            echo_initial: None,
            echo_trailing: None,
            received: 0,
            grpc: Grpc::new(Duration::from_secs(1)),
            health: HealthSource::default(),
            watched: None,
            truth: None,
        }
    }

    fn reply_of(a: &StreamAnswer) -> Bytes {
        let mut m = frame::Messages::default();
        m.push(&a.body);
        m.take().unwrap().unwrap()
    }

    fn grpc_status(a: &StreamAnswer) -> &str {
        let fields = a.trailers.as_ref().unwrap_or(&a.headers);
        fields["grpc-status"].to_str().unwrap()
    }

    #[test]
    fn grpc_content_types_are_told_from_others() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;x=1",
        ] {
            assert!(is_grpc(yes.as_bytes()), "{yes}");
        }
        for no in ["application/grpc-web", "application/json", ""] {
            assert!(!is_grpc(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn a_ping_is_echoed_with_the_receive_time_and_held_its_delay_up_to_the_most() {
        let ping = PingMessage {
            seq: 7,
            ts: 1,
            payload: "abc".into(),
            delay_nanos: 5_000_000_000,
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_nanos(42);
        let a = call(Method::Ping).unary_answer(Ok(vec![ping.encode_to_vec().into()]), now);
        assert_eq!(grpc_status(&a), "0");
        assert_eq!(a.hold.delay, Duration::from_secs(1));
        let back = PingMessage::decode(reply_of(&a)).unwrap();
        assert_eq!(back, PingMessage { ts: 42, ..ping });
    }

    #[test]
    fn grpc_timeout_parses_its_units_and_a_reply_held_past_it_is_deadline_exceeded() {
        assert_eq!(timeout(b"250m"), Ok(Duration::from_millis(250)));
        assert_eq!(timeout(b"2S"), Ok(Duration::from_secs(2)));
        assert_eq!(timeout(b"1H"), Ok(Duration::from_secs(3600)));
        assert_eq!(timeout(b"99999999n"), Ok(Duration::from_nanos(99_999_999)));
        for bad in [&b""[..], b"m", b"123456789m", b"10x", b"-1S", b"1.5S"] {
            assert_eq!(timeout(bad).unwrap_err().code, Code::Internal, "{bad:?}");
        }
        let grpc = Grpc::new(Duration::from_secs(10));
        let timed = |t: &'static str| {
            let mut fields = HeaderMap::new();
            fields.insert("grpc-timeout", HeaderValue::from_static(t));
            fields
        };
        let malformed = grpc.answer(
            "/fgrpc.PingServer/Ping",
            &timed("soon"),
            HealthSource::default(),
            None,
        );
        assert_eq!(grpc_status(&malformed), "13");
        assert_eq!(malformed.hold.truth, None, "no truth to record it in");
        // With the ground truth, it is counted INTERNAL under its method.
        let info = crate::observe::truth::RouteInfo {
            name: "/fgrpc.PingServer/Ping".into(),
            outcomes: method_outcomes(),
            ..crate::observe::truth::RouteInfo::default()
        };
        let truth = Arc::new(crate::observe::truth::GroundTruth::new(vec![info], 1));
        let builtin = BuiltinTruth {
            recorder: Recorder::new(truth, 0),
            first: 0,
            generation: 1,
        };
        let path = "/fgrpc.PingServer/Ping";
        let counted = grpc.answer(path, &timed("soon"), HealthSource::default(), Some(builtin));
        assert_eq!(grpc_status(&counted), "13");
        assert!(counted.recorder.is_some());
        assert_eq!(
            counted.hold.truth,
            Some(TruthKey {
                route: 0,
                outcome: Code::Internal as u8,
                generation: 1
            })
        );
        let held = |timeout: &'static str| {
            let a = grpc.answer(
                "/fgrpc.PingServer/Ping",
                &timed(timeout),
                HealthSource::default(),
                None,
            );
            let ping = PingMessage {
                delay_nanos: 300_000_000,
                ..PingMessage::default()
            };
            a.grpc
                .unwrap()
                .unary_answer(Ok(vec![ping.encode_to_vec().into()]), SystemTime::now())
        };
        let late = held("100m");
        assert_eq!(
            (grpc_status(&late), late.hold.delay),
            ("4", Duration::from_millis(100))
        );
        let in_time = held("1S");
        assert_eq!(
            (grpc_status(&in_time), in_time.hold.delay),
            ("0", Duration::from_millis(300))
        );
    }

    #[test]
    fn health_serves_every_service_and_knows_no_other() {
        let ask = |s: &str| {
            HealthCheckRequest { service: s.into() }
                .encode_to_vec()
                .into()
        };
        let check = call(Method::Check);
        for served in ["", "ping", "fgrpc.PingServer", "grpc.health.v1.Health"] {
            let a = check.unary_answer(Ok(vec![ask(served)]), SystemTime::now());
            let r = HealthCheckResponse::decode(reply_of(&a)).unwrap();
            assert_eq!(r.status, ServingStatus::Serving as i32, "{served}");
        }
        let a = check.unary_answer(Ok(vec![ask("nope")]), SystemTime::now());
        assert_eq!(grpc_status(&a), "5");
        assert!(a.trailers.is_none(), "trailers-only");
        let watched = call(Method::Watch).replies(&ask("nope")).unwrap();
        let mut m = frame::Messages::default();
        m.push(&watched[0].framed());
        let r = HealthCheckResponse::decode(m.take().unwrap().unwrap()).unwrap();
        assert_eq!(r.status, ServingStatus::ServiceUnknown as i32);
    }

    #[test]
    fn a_health_route_sets_the_status_and_a_watch_sees_it_change() {
        use crate::catalog::route::{spec, table::Table, Common, Routes};
        let table = |routes: &[&str]| Table {
            routes: routes
                .iter()
                .map(|r| spec::parse_spec(r).unwrap())
                .collect(),
            ..Table::default()
        };
        let base = crate::catalog::response::ResponseSpec {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        };
        let common = Common::new(base, true, 1, None);
        let out = table(&["/grpc.health.v1.Health/* health=NOT_SERVING"]);
        let live = Arc::new(LiveRoutes::new(Routes::build(&out, &common, None).unwrap()));
        let mut watch = Call {
            health: HealthSource::new(Some(live.clone())),
            ..call(Method::Watch)
        };
        let status = |reply: &TimedReply| {
            let mut m = frame::Messages::default();
            m.push(&reply.framed());
            HealthCheckResponse::decode(m.take().unwrap().unwrap())
                .unwrap()
                .status
        };
        let ask = HealthCheckRequest { service: "".into() }.encode_to_vec();
        let first = watch.replies(&ask).unwrap();
        assert_eq!(status(&first[0]), ServingStatus::NotServing as i32);
        assert_eq!(watch.watch(), None, "no change, no message");
        let back = table(&["/pkg.Svc/M"]);
        live.replace(|now| Routes::build(&back, &common, Some(now)))
            .unwrap();
        let change = watch.watch().expect("the change is sent");
        assert_eq!(status(&change), ServingStatus::Serving as i32);
        assert_eq!(watch.watch(), None);
        let unknown = Call {
            health: HealthSource::new(Some(live)),
            ..call(Method::Check)
        };
        let a = unknown.unary_answer(Ok(vec![b"\x0a\x04nope"[..].into()]), SystemTime::now());
        assert_eq!(
            grpc_status(&a),
            "5",
            "an unknown service is still NOT_FOUND"
        );
    }

    #[test]
    fn a_unary_call_without_one_message_is_internal_and_a_bad_body_keeps_its_status() {
        let ping = call(Method::Ping);
        assert_eq!(
            grpc_status(&ping.unary_answer(Ok(vec![]), SystemTime::now())),
            "13"
        );
        let two = vec![Bytes::new(), Bytes::new()];
        assert_eq!(
            grpc_status(&ping.unary_answer(Ok(two), SystemTime::now())),
            "13"
        );
        let big = Err(CallStatus::new(Code::ResourceExhausted, "big"));
        assert_eq!(grpc_status(&ping.unary_answer(big, SystemTime::now())), "8");
        let garbage = vec![Bytes::from_static(&[0xff, 0xff])];
        assert_eq!(
            grpc_status(&ping.unary_answer(Ok(garbage), SystemTime::now())),
            "13"
        );
    }

    #[test]
    fn unknown_methods_are_unimplemented_trailers_only() {
        let a = Grpc::new(Duration::ZERO).answer(
            "/pkg.Svc/Nope",
            &HeaderMap::new(),
            HealthSource::default(),
            None,
        );
        assert_eq!(grpc_status(&a), "12");
        assert!(a.grpc.is_none() && a.trailers.is_none() && a.body.is_empty());
    }

    #[test]
    fn reflection_lists_the_services_and_finds_their_files() {
        let reflect = |ask: ReflectionAsk| {
            let request = ServerReflectionRequest {
                host: String::new(),
                message_request: Some(ask),
            };
            let replies = call(Method::Reflection)
                .replies(&request.encode_to_vec())
                .unwrap();
            let mut m = frame::Messages::default();
            m.push(&replies[0].framed());
            let r = ServerReflectionResponse::decode(m.take().unwrap().unwrap()).unwrap();
            r.message_response.unwrap()
        };
        let ReflectionReply::ListServicesResponse(list) =
            reflect(ReflectionAsk::ListServices(String::new()))
        else {
            panic!("a list");
        };
        assert_eq!(list.service.len(), SERVICES.len());
        for symbol in [
            "fgrpc.PingServer",
            "fgrpc.PingServer.Ping",
            "grpc.health.v1.HealthCheckResponse.ServingStatus",
            "grpc.reflection.v1alpha.ServerReflection",
        ] {
            let ReflectionReply::FileDescriptorResponse(f) =
                reflect(ReflectionAsk::FileContainingSymbol(symbol.into()))
            else {
                panic!("{symbol} not found");
            };
            let file =
                prost_types::FileDescriptorProto::decode(&f.file_descriptor_proto[0][..]).unwrap();
            assert!(symbol.starts_with(file.package()), "{symbol}");
        }
        assert!(matches!(
            reflect(ReflectionAsk::FileByFilename("ping.proto".into())),
            ReflectionReply::FileDescriptorResponse(_)
        ));
        assert!(
            matches!(reflect(ReflectionAsk::FileContainingSymbol("fgrpc.Nope".into())), ReflectionReply::ErrorResponse(e) if e.error_code == 5)
        );
    }
}
