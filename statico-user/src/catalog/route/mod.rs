//! Routes (`--route SPEC`, `--routes FILE`): answers chosen by method and path, each with its own
//! status mix, body, fields, latency distribution and faults — a calibrated target for benchmarking
//! proxies and load generators — and the ground truth of what each request was given
//! ([`crate::observe::truth`]).
//!
//! Everything a route can answer is built at start-up: one pre-encoded head per status of its mix
//! (HTTP/1.1 bytes and, with HTTP/2 or HTTP/3, a [`StreamAnswer`]), and its body as a slice of a
//! shared buffer (`size=` bodies are slices of one generated buffer), never copied per request. Per
//! request the route only *draws*: which status, which fault, how long a delay — from the worker's
//! own generator ([`Draw`]), seeded by `--seed` for repeatable runs. The first route that matches
//! wins; a request no route matches gets the catalog's default answer. A route on a gRPC method
//! path ([`spec::is_method_path`]) takes gRPC calls only ([`Routes::choose_call`]): its statuses are
//! `grpc-status` codes, its answers gRPC's ([`super::grpc::route_answer`]).
//!
//! [`spec`] is the user's text (flag or TOML), [`dist`] the latency distributions.

pub mod asked;
pub mod fortio;
pub mod live;
pub mod phase_spec;
pub mod pool_spec;
pub mod spec;
pub mod table;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use rand::{Rng, SeedableRng};

use super::feed::{EventSource, Feed};
use super::grpc::messages::ServingStatus;
use super::grpc::status::{CallStatus, Code};
use super::grpc::HEALTH_METHODS;
use super::openai::OpenAi;
use super::request::Request;
use super::response::{with_defaults, with_own_fields, Framing, Response, ResponseSpec, DATE_LEN};
use super::sink::Sink;
use super::stream::{Admission, StreamAnswer};
use crate::catalog::model::dist::Dist;
use crate::catalog::model::events::{Events, StreamDraw};
use crate::catalog::model::fault::Fault;
use crate::catalog::model::hold::{Hold, Recorder, TruthKey};
use crate::catalog::model::load::{Loads, RouteLoad, Ticket, TicketIds};
use crate::catalog::model::pause::Pauses;
use crate::catalog::model::pool::{OrphanClock, Pool, Shed};
use crate::catalog::model::schedule::Window;
use crate::observe::truth::{GroundTruth, PoolGauge, RouteInfo};
use asked::{Asked, Asking, Asks};
use phase_spec::with_phases;
use pool_spec::PoolSpec;
use spec::{BodySpec, OpenAiSpec, PathMatch, RoutePool, RouteSpec, StreamSpec};
use table::Table;

/// What every routes table of one server is built with and shares with the tables before and
/// after it: made at start-up, cloned into each table.
#[derive(Clone, Debug)]
pub struct Common {
    /// Every answer's `Server` and `-H` fields (a route's own fields replace theirs, see
    /// [`super::response::with_own_fields`]).
    pub base: ResponseSpec,
    /// HTTP/2 or HTTP/3 is served: the stream answers are built too.
    pub streams: bool,
    /// How many threads record the ground truth.
    pub recorders: usize,
    /// The server's pauses, when it has them: every held answer then takes a ticket (its hold is
    /// measured), and the ground truth reports them.
    pub pauses: Option<Pauses>,
    /// Where the pools hand on the ends of services whose clients left.
    pub orphans: OrphanClock,
    /// Where tickets take their ids.
    pub tickets: TicketIds,
    /// `--grpc`: the ground truth counts the built-in services' calls too, per method, after the
    /// routes ([`Routes::builtin_truth`]).
    pub builtins: bool,
}

impl Common {
    /// What a server's tables are built with: `base`'s fields, stream answers with `streams`,
    /// `recorders` threads recording, `pauses` if the server has them; its own orphan clock and
    /// ticket ids.
    pub fn new(
        base: ResponseSpec,
        streams: bool,
        recorders: usize,
        pauses: Option<Pauses>,
    ) -> Common {
        Common {
            base,
            streams,
            recorders,
            pauses,
            orphans: OrphanClock::default(),
            tickets: TicketIds::default(),
            builtins: false,
        }
    }
}

/// The routes, built: shared by every worker, each of which holds a copy of the heads with its live
/// `Date` ([`Routes::set_date`]); bodies and the ground truth are shared.
#[derive(Clone, Debug)]
pub struct Routes {
    /// The routes as given, then each phase's version of the routes it changes (matched only
    /// through their route's phases).
    routes: Vec<Route>,
    /// How many of `routes` are matched (the rest are phases').
    matched: usize,
    truth: Arc<GroundTruth>,
    /// What the routes share while they answer: in-flight counts and pools.
    loads: Arc<Loads>,
    /// The pools, by the spec each was made from (a later table with the same pool keeps it).
    pools: Vec<(PoolSpec, Arc<Pool>)>,
    /// This table's number: 1 at start-up, one more for each table put in force after it.
    generation: u32,
    /// When this table came into force: its phases' clock.
    began: std::time::Instant,
    /// The table as written (`GET /routes`).
    table: Arc<Table>,
    /// With `--grpc`: where the built-in methods' truth starts, after the routes'.
    builtins: Option<u16>,
}

#[derive(Clone, Debug)]
struct Route {
    methods: Vec<Box<[u8]>>,
    path: PathMatch,
    /// The base status's answer first, then one per status of the mix.
    answers: Vec<Answer>,
    /// Cumulative shares of `answers[1..]`, out of [`ONE`].
    status_cuts: Vec<u32>,
    /// Cumulative shares of the faults, out of [`ONE`].
    fault_cuts: Vec<(u32, Fault)>,
    delay: Option<Dist>,
    body_delay: Option<Dist>,
    rate: u64,
    /// Its pool sheds with a status: that answer's index in `answers`.
    shed_answer: Option<u8>,
    /// Its requests are counted or pooled while held ([`Loads`]).
    loaded: bool,
    /// What its held stream answers take their tickets with (made once, shared).
    admission: Option<Arc<Admission>>,
    /// Its phases: while one's window is open, the route at that index answers instead.
    phases: Vec<(Window, u16)>,
    /// The server has pauses, which may hold any of its answers.
    pausable: bool,
    /// A streamed route's events (`stream=`).
    events: Option<Arc<EventSource>>,
    /// The `204 No Content` a reconnecting client gets whose `Last-Event-ID` is the last event.
    done_answer: Option<u8>,
    /// An OpenAI-compatible backend's (`openai=on`): its 2xx answers are made per request, once
    /// the request's body is in.
    openai: Option<Arc<Asking>>,
    /// A gRPC route's ([`spec::is_method_path`]): it takes gRPC calls only.
    grpc: Option<GrpcRoute>,
    /// A gRPC route's `health=`.
    health: Option<ServingStatus>,
}

/// A gRPC route's own answers: `DEADLINE_EXCEEDED`, for a call held past its `grpc-timeout`; and
/// its own outcomes, that one's and `INTERNAL`'s (a call with a malformed `grpc-timeout`).
#[derive(Clone, Copy, Debug)]
struct GrpcRoute {
    /// Trailers-only, at the deadline.
    deadline_answer: u8,
    /// A server-streaming route's: the messages due before the deadline, then the status.
    deadline_stream: Option<u8>,
    /// Its outcome in the ground truth (after `gone` and a pool's `shed`).
    deadline_outcome: u8,
    /// The outcome of a call refused `INTERNAL` for its malformed `grpc-timeout`: the route's own
    /// `INTERNAL` status if it draws one, else one after `DEADLINE_EXCEEDED`.
    malformed_outcome: u8,
}

impl GrpcRoute {
    /// How many answers the route has for its deadline.
    fn answers(self) -> usize {
        1 + usize::from(self.deadline_stream.is_some())
    }
}

#[derive(Clone, Debug)]
struct Answer {
    /// The head in each framing (no body: it is sent from `body`, or made per request from the
    /// route's events).
    head: Response,
    body: Bytes,
    stream: Option<StreamAnswer>,
    /// Its body is the route's events (a streamed route's 2xx answers).
    streamed: bool,
    /// It is made per request from the request's body (an openai route's 2xx answers).
    asked: bool,
}

/// A route's answer body as written for one request: where it starts (when it may be held apart
/// from the head), and a streamed answer's events.
#[derive(Debug, Default)]
pub struct RouteBody {
    pub body_at: Option<usize>,
    pub events: Option<Box<Events>>,
}

/// The longest a drawn delay holds an answer (a heavy-tailed distribution may draw far more).
pub const LONGEST_HOLD: Duration = Duration::from_secs(3600);

/// Probability 1 on the scale the draws use (a uniform `u32`).
const ONE: u64 = 1 << 32;

/// What a route answered one request with: which answer, and how it is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteChoice {
    route: u16,
    answer: u8,
    /// The table it was chosen from ([`Routes::generation`]).
    pub generation: u32,
    pub hold: Hold,
    /// A streamed answer's draw.
    pub stream: Option<StreamDraw>,
    /// An openai route's 2xx answer: what its request asks, read once its body is in.
    pub asks: Option<Asks>,
}

/// A worker's generator for the routes' draws.
pub type Draw = rand::rngs::SmallRng;

/// A worker's generator: from `--seed` and the worker's slot (repeatable), or from the clock.
pub fn generator(seed: Option<u64>, slot: usize) -> Draw {
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    Draw::seed_from_u64(seed ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

impl Routes {
    /// From a table, with what the server's tables have in `common`; `previous` is the table in force, whose pools
    /// this one keeps where their specs are the same.
    pub fn build(table: &Table, common: &Common, previous: Option<&Routes>) -> Result<Routes> {
        let specs = &table.routes;
        check_limits(specs)?;
        let phased = with_phases(specs, &table.phases)?;
        check_limits(&phased.specs)?;
        let kept = previous.map_or(&[][..], |p| &p.pools[..]);
        let (pools, pool_of) = resolve_pools(&phased.specs, &table.pools, kept, &common.orphans)?;
        let pool_of = phased.inherit_pools(pool_of);
        let generated = generated_body(&phased.specs);
        let mut routes = Vec::with_capacity(phased.specs.len());
        for (spec, pool) in phased.specs.iter().zip(&pool_of) {
            let shed = pool.map(|i| pools[i].1.shed);
            let route =
                Route::build(spec, common, &generated, shed).with_context(|| spec.at.clone())?;
            routes.push(route);
        }
        for (i, windows) in phased.windows.iter().enumerate() {
            routes[i].phases = windows.clone();
        }
        let generation = previous.map_or(1, |p| p.generation.wrapping_add(1));
        let mut info: Vec<RouteInfo> = (phased.specs.iter().zip(&pool_of).enumerate())
            .map(|(i, (s, p))| route_info(s, *p, phased.phase_name(i)))
            .collect();
        let builtins = (common.builtins).then(|| {
            let first = info.len() as u16;
            info.extend(super::grpc::METHOD_PATHS.map(builtin_info));
            first
        });
        let loads = (phased.specs.iter().zip(&routes).zip(&pool_of))
            .map(|((spec, route), pool)| route_load(spec, route, *pool))
            .collect();
        let gauges = pools
            .iter()
            .map(|p| p.1.clone() as Arc<dyn PoolGauge>)
            .collect();
        let loads = Arc::new(Loads::new(
            loads,
            pools.iter().map(|p| p.1.clone()).collect(),
        ));
        for route in &mut routes {
            route.admission = Some(Arc::new(route.admission_with(&loads, &common.tickets)));
        }
        let pauses = common.pauses.clone();
        let truth = GroundTruth::new(info, common.recorders)
            .with_pools(gauges)
            .with_in_flight(loads.clone())
            .with_generation(generation)
            .with_pauses(Box::new(move || {
                pauses.as_ref().map_or((0, Duration::ZERO), Pauses::so_far)
            }));
        Ok(Routes {
            routes,
            matched: specs.len(),
            truth: Arc::new(truth),
            loads,
            pools,
            generation,
            began: std::time::Instant::now(),
            table: Arc::new(table.clone()),
            builtins,
        })
    }

    /// Where a built-in gRPC service's call on this table records its truth, through `recorder`
    /// (with `--grpc`).
    pub fn builtin_truth(&self, recorder: &Recorder) -> Option<super::grpc::BuiltinTruth> {
        Some(super::grpc::BuiltinTruth {
            recorder: recorder.clone(),
            first: self.builtins?,
            generation: self.generation,
        })
    }

    /// This table's number (1 at start-up).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The table as written.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The ticket of a held answer whose request is complete at `now` (none for an answer that is
    /// not held and has no load model, or one written uncounted); a `sequence`'s if the answer is
    /// a stream of events.
    pub fn admit(
        &self,
        choice: &RouteChoice,
        recorder: &super::Recorder,
        (now, sequence): (std::time::Instant, bool),
    ) -> Option<Ticket> {
        let key = choice.hold.truth?;
        let route = &self.routes[usize::from(choice.route)];
        if !route.ticketed(choice) {
            return None;
        }
        let admission = route.admission.as_ref()?;
        Some(admission.ticket(key, &choice.hold, recorder.clone(), (now, sequence)))
    }

    /// The ground truth of a call `choice` would have answered, refused `INTERNAL` for its
    /// malformed `grpc-timeout` (none for a route that is not gRPC's).
    pub fn malformed_timeout(&self, choice: &RouteChoice) -> Option<TruthKey> {
        let grpc = self.routes[usize::from(choice.route)].grpc?;
        (choice.hold.truth).map(|t| TruthKey {
            outcome: grpc.malformed_outcome,
            ..t
        })
    }

    /// What a gRPC route's `choice` becomes for a call whose `grpc-timeout` is `deadline`: the
    /// same if it is answered in time, else `DEADLINE_EXCEEDED` at the deadline (counted so) —
    /// trailers-only, or after a server-streaming route's messages due before it.
    pub fn within(&self, choice: RouteChoice, deadline: Duration) -> RouteChoice {
        let route = &self.routes[usize::from(choice.route)];
        let Some(grpc) = route.grpc else {
            return choice;
        };
        let truth = (choice.hold.truth).map(|t| TruthKey {
            outcome: grpc.deadline_outcome,
            ..t
        });
        if choice.hold.delay >= deadline {
            return RouteChoice {
                answer: grpc.deadline_answer,
                hold: Hold {
                    delay: deadline,
                    truth,
                    ..Hold::default()
                },
                stream: None,
                ..choice
            };
        }
        let (Some(cut_answer), Some(stream), Some(source)) =
            (grpc.deadline_stream, choice.stream, &route.events)
        else {
            return choice;
        };
        let left = deadline - choice.hold.delay;
        // A gRPC route's waits do not depend on the load (`check_stream`).
        if Events::new(source.clone(), stream, false, None, None).total_wait(0) < left {
            return choice;
        }
        RouteChoice {
            answer: cut_answer,
            hold: Hold {
                truth,
                ..choice.hold
            },
            stream: Some(StreamDraw {
                cut: Some(left),
                ..stream
            }),
            ..choice
        }
    }

    /// The answer a shed request gets instead of `choice`: the pool's status, or its fault.
    pub fn shed_choice(&self, choice: &RouteChoice, shed: Shed) -> RouteChoice {
        let route = &self.routes[usize::from(choice.route)];
        let hold = Hold {
            fault: match shed {
                Shed::Status(_) => None,
                Shed::Reset => Some(Fault::Reset),
                Shed::Close => Some(Fault::Close),
            },
            truth: None,
            ..Hold::default()
        };
        RouteChoice {
            answer: route.shed_answer.unwrap_or(choice.answer),
            hold,
            stream: None,
            asks: None,
            ..*choice
        }
    }

    /// Whether `choice`'s route may be shed with a status after its request has waited (its
    /// shed answer is then written behind its answer, for the connection to pick).
    pub fn sheds_late(&self, choice: &RouteChoice) -> bool {
        let route = &self.routes[usize::from(choice.route)];
        route.shed_answer.is_some()
            && self
                .loads
                .pool_of(choice.route)
                .is_some_and(|p| p.queue_timeout.is_some())
    }

    /// The ground truth every answer is recorded in.
    pub fn truth(&self) -> &Arc<GroundTruth> {
        &self.truth
    }

    /// Whether some answer may be held (a delay, a paced body, a fault).
    pub fn paces(&self) -> bool {
        self.routes.iter().any(|r| {
            r.delay.is_some()
                || r.body_delay.is_some()
                || r.rate > 0
                || !r.fault_cuts.is_empty()
                || r.loaded
                || r.events.is_some()
                || r.openai.is_some()
        })
    }

    /// Whether no request can match (an empty table kept live for `--admin` or SIGHUP): requests
    /// then skip it without being looked at.
    pub fn matches_nothing(&self) -> bool {
        self.matched == 0
    }

    /// The status the health routes give the built-in health service now: that of the first gRPC
    /// route with `health=` on a health method's path (its phase's version while one is open).
    pub fn health(&self) -> Option<ServingStatus> {
        let on_health = |r: &Route| {
            r.grpc.is_some()
                && r.health.is_some()
                && HEALTH_METHODS
                    .iter()
                    .any(|m| r.matches(b"POST", m.as_bytes()))
        };
        let i = self.routes[..self.matched].iter().position(on_health)?;
        self.routes[self.in_phase(i)].health
    }

    /// The first route `request` matches, and what it draws for it (a gRPC route takes only gRPC
    /// calls, [`Routes::choose_call`]).
    pub fn choose(&self, request: &Request<'_>, draw: &mut Draw) -> Option<RouteChoice> {
        self.first(request, draw, false)
    }

    /// The first gRPC route ([`spec::is_method_path`]) the gRPC call `request` matches, and what it
    /// draws for it.
    pub fn choose_call(&self, request: &Request<'_>, draw: &mut Draw) -> Option<RouteChoice> {
        self.first(request, draw, true)
    }

    /// The first route, gRPC or not as `grpc` says, that `request` matches, and its draw.
    fn first(&self, request: &Request<'_>, draw: &mut Draw, grpc: bool) -> Option<RouteChoice> {
        let path = path_of(request.target);
        let i = self.routes[..self.matched]
            .iter()
            .position(|r| r.grpc.is_some() == grpc && r.matches(request.method, path))?;
        let i = self.in_phase(i);
        Some(self.routes[i].draw(i as u16, self.generation, request, draw))
    }

    /// Route `i`, or the route its phase open now answers with.
    #[inline]
    fn in_phase(&self, i: usize) -> usize {
        let phases = &self.routes[i].phases;
        if phases.is_empty() {
            return i;
        }
        let elapsed = self.began.elapsed();
        (phases.iter())
            .find(|(w, _)| w.left(elapsed).is_some())
            .map_or(i, |(_, v)| usize::from(*v))
    }

    /// Appends the HTTP/1.1 answer to `out`: the head, then the shared body unless `head_only`.
    /// Returns where the body starts in `out`.
    pub fn write(
        &self,
        choice: &RouteChoice,
        framing: Framing,
        head_only: bool,
        out: &mut impl Sink,
        recorder: Option<&Recorder>,
    ) -> RouteBody {
        let answer = self.answer(choice);
        let head = answer.head.head(framing);
        let body_at = out.unsent() + head.len();
        out.extend_from_slice(head);
        if head_only {
            return RouteBody::default();
        }
        let chunked = matches!(framing, Framing::KeepAlive | Framing::Close);
        if let Some(events) = self.events(choice, chunked, recorder) {
            return RouteBody {
                body_at: None,
                events: Some(Box::new(events)),
            };
        }
        if answer.body.is_empty() {
            return RouteBody::default();
        }
        out.share(&answer.body, None);
        RouteBody {
            body_at: Some(body_at),
            events: None,
        }
    }

    /// The answer at `now` to `choice` (an openai route's 2xx, see [`RouteChoice::asks`]) once its
    /// request's body is `body`.
    pub fn asked(&self, choice: RouteChoice, body: &[u8], now: std::time::Instant) -> Asked {
        let route = &self.routes[usize::from(choice.route)];
        let asking = route.openai.as_ref().expect("only an openai route asks");
        let in_flight = self.loads.in_flight_with_new(choice.route);
        asking.asked(choice, body, (now, in_flight))
    }

    /// `choice`'s answer if an openai route refuses its `request` as soon as its head is read (a
    /// path under the prefix the API does not have, or has with another method).
    pub fn not_served(&self, choice: &RouteChoice, request: &Request<'_>) -> Option<Asked> {
        choice.asks?;
        let asking = self.routes[usize::from(choice.route)].openai.as_ref()?;
        asking.not_served(*choice, request.method, path_of(request.target))
    }

    /// Whether `choice`'s answer is a stream, whose body only the connection's close ends unless it
    /// is chunked.
    pub fn streamed(&self, choice: &RouteChoice) -> bool {
        self.answer(choice).streamed
    }

    /// A streamed answer's events for `choice` (as HTTP/1.1 chunks with `chunked`), their timing
    /// recorded by `recorder`.
    fn events(
        &self,
        choice: &RouteChoice,
        chunked: bool,
        recorder: Option<&Recorder>,
    ) -> Option<Events> {
        let route = &self.routes[usize::from(choice.route)];
        let (source, stream) = (route.events.as_ref()?, choice.stream?);
        let gone = route.gone_outcome();
        let truth = (recorder.cloned().zip(choice.hold.truth)).map(|(r, key)| (r, key, gone));
        Some(Events::new(
            source.clone(),
            stream,
            chunked,
            choice.hold.fault,
            truth,
        ))
    }

    /// The answer as HTTP/2 and HTTP/3 send it, with its hold (a streamed answer with its body and
    /// events, their timing recorded by `recorder`).
    pub fn stream_answer(&self, choice: &RouteChoice, recorder: Option<&Recorder>) -> StreamAnswer {
        let mut answer = (self.answer(choice).stream.clone())
            .expect("--http2 and --http3 build the routes' stream answers");
        answer.hold = choice.hold;
        let route = &self.routes[usize::from(choice.route)];
        if route.ticketed(choice) {
            answer.admission = route.admission.clone();
        }
        answer.events = self.events(choice, false, recorder).map(Box::new);
        if let (Some(asking), Some(_)) = (&route.openai, choice.asks) {
            answer.awaits = Some(Box::new(asking.awaiting(*choice)));
        }
        answer
    }

    /// The second changed: every head carries the new `Date`.
    pub fn set_date(&mut self, date: &[u8; DATE_LEN]) {
        for answer in self.routes.iter_mut().flat_map(|r| r.answers.iter_mut()) {
            answer.head.set_date(date);
            if let Some(s) = answer.stream.as_mut() {
                s.set_date(date);
            }
        }
    }

    fn answer(&self, choice: &RouteChoice) -> &Answer {
        &self.routes[usize::from(choice.route)].answers[usize::from(choice.answer)]
    }
}

impl Route {
    fn build(
        spec: &RouteSpec,
        common: &Common,
        generated: &Bytes,
        shed: Option<Shed>,
    ) -> Result<Route> {
        let (base, streams) = (&common.base, common.streams);
        let body = match &spec.body {
            BodySpec::Empty => Bytes::new(),
            BodySpec::Text(b) | BodySpec::File(_, b) => Bytes::from(b.clone()),
            BodySpec::Size(n) => generated.slice(..*n as usize),
        };
        let reply = match spec.is_grpc() {
            true => super::grpc::route_reply(spec, generated),
            false => Bytes::new(),
        };
        let events = (spec.stream.as_ref()).map(|s| Arc::new(EventSource::new(s, &reply)));
        if let (Some(_), PathMatch::Exact(_)) = (&spec.openai, &spec.path) {
            anyhow::bail!("openai=on needs a path ending in /* (like /v1/*): it answers PREFIX/chat/completions, PREFIX/completions and PREFIX/models");
        }
        check_stream(spec, &body)?;
        if spec.is_grpc() && !streams {
            anyhow::bail!("its path names a gRPC method, and gRPC calls come over HTTP/2: add --http2 (or --grpc)");
        }
        let answers = match spec.is_grpc() {
            true => Answers::grpc(spec, common, &reply, shed)?,
            false => Answers::http(spec, base, streams, &body, shed)?,
        };
        Ok(Route {
            methods: spec.methods.iter().map(|m| m.as_bytes().into()).collect(),
            path: spec.path.clone(),
            answers: answers.all,
            status_cuts: cumulative(spec.status_mix.iter().map(|(_, p)| *p)),
            fault_cuts: cumulative(spec.faults.iter().map(|(_, p)| *p))
                .into_iter()
                .zip(spec.faults.iter().map(|(f, _)| *f))
                .collect(),
            delay: spec.delay.clone(),
            body_delay: spec.body_delay.clone(),
            rate: spec.rate.unwrap_or(0),
            // An openai route's sequences in flight are counted (its vLLM gauges without a pool).
            loaded: shed.is_some()
                || spec.delay.as_ref().is_some_and(|d| d.in_flight().is_some())
                || waits_in_flight(spec)
                || spec.openai.is_some(),
            admission: None,
            shed_answer: answers.shed,
            phases: Vec::new(),
            pausable: common.pauses.is_some(),
            events,
            done_answer: answers.done,
            openai: None,
            grpc: answers.grpc,
            health: spec.health,
        }
        .with_openai(spec, base, shed.is_some()))
    }

    /// The route with its openai preset, if it has one: its own outcomes (400, 404, 405) follow
    /// `gone` and a pooled route's `shed`.
    fn with_openai(mut self, spec: &RouteSpec, base: &ResponseSpec, pooled: bool) -> Route {
        let (Some(openai), PathMatch::Prefix(prefix)) = (&spec.openai, &spec.path) else {
            return self;
        };
        let fields = with_own_fields(&base.headers, &spec.headers)
            .cloned()
            .collect();
        let gone = self.gone_outcome();
        let refused = gone + 1 + u8::from(pooled);
        let preset = OpenAi::new(prefix, openai);
        self.openai = Some(Arc::new(Asking::new(preset, fields, refused, gone)));
        self
    }

    /// How its held stream answers take their tickets: through `loads` if it has a load model,
    /// their ids from `tickets`.
    fn admission_with(&self, loads: &Arc<Loads>, tickets: &TicketIds) -> Admission {
        let shed = (self.shed_answer).and_then(|i| self.answers[usize::from(i)].stream.clone());
        Admission {
            loads: self.loaded.then(|| loads.clone()),
            gone: self.gone_outcome(),
            inference: self.openai.is_some(),
            shed,
            tickets: tickets.clone(),
        }
    }

    /// Whether its answer `choice` takes a ticket: it has a load model, or it is held — by its own
    /// hold or its events, or by a pause, which may hold any answer (each then has its hold
    /// measured).
    fn ticketed(&self, choice: &RouteChoice) -> bool {
        self.loaded
            || choice.hold.paces()
            || choice.stream.is_some()
            || choice.asks.is_some()
            || self.pausable
    }

    /// How many statuses it draws from (its answers, less a pool's shed answer, a stream's `204`
    /// and a gRPC route's own).
    fn statuses(&self) -> usize {
        self.answers.len()
            - usize::from(self.shed_answer.is_some())
            - usize::from(self.done_answer.is_some())
            - self.grpc.map_or(0, GrpcRoute::answers)
    }

    /// The outcome number of `gone`: after the statuses and the faults (see [`route_info`]); a
    /// pooled route's `shed` follows it.
    fn gone_outcome(&self) -> u8 {
        (self.statuses() + self.fault_cuts.len()) as u8
    }

    /// Whether this route answers `method` on `path` (GET routes answer HEAD too).
    fn matches(&self, method: &[u8], path: &[u8]) -> bool {
        let method_ok = self.methods.is_empty()
            || self
                .methods
                .iter()
                .any(|m| **m == *method || (method == b"HEAD" && **m == *b"GET"));
        method_ok
            && match &self.path {
                PathMatch::Exact(p) => p.as_bytes() == path,
                PathMatch::Prefix(p) => path.starts_with(p.as_bytes()),
            }
    }

    /// One request's status (a stream's, after its `Last-Event-ID` in `request`, with its
    /// events), fault and delays, drawn in that order.
    fn draw(
        &self,
        route: u16,
        generation: u32,
        request: &Request<'_>,
        draw: &mut Draw,
    ) -> RouteChoice {
        let status_roll = draw.next_u32();
        let mut answer = (self.status_cuts.iter())
            .position(|&cut| status_roll < cut)
            .map_or(0, |i| i + 1);
        let mut stream = match (&self.events, self.answers[answer].streamed) {
            (Some(events), true) => Some(events.choose(request.last_event_id, draw)),
            _ => None,
        };
        // A reconnecting client that has every event is told to stop.
        if let (Some(s), Some(done)) = (stream, self.done_answer) {
            if s.from >= s.events {
                (answer, stream) = (usize::from(done), None);
            }
        }
        let fault = match self.fault_cuts.is_empty() {
            true => None,
            false => {
                let roll = draw.next_u32();
                self.fault_cuts
                    .iter()
                    .find(|(cut, _)| roll < *cut)
                    .map(|(_, f)| *f)
            }
        };
        let outcome = match fault {
            Some(f) => {
                self.statuses()
                    + self
                        .fault_cuts
                        .iter()
                        .position(|(_, g)| *g == f)
                        .unwrap_or(0)
            }
            // The `204` that ends a stream a client has whole counts as the route's status.
            None if self.done_answer == Some(answer as u8) => 0,
            None => answer,
        };
        // A heavy tail may draw past what an `Instant` can add: an hour is the longest hold.
        let sample = |d: &Option<Dist>, draw: &mut Draw| {
            d.as_ref()
                .map_or(Duration::ZERO, |d| d.sample(draw).min(LONGEST_HOLD))
        };
        let delay = sample(&self.delay, draw);
        let body_delay = sample(&self.body_delay, draw);
        let asks = match (&self.openai, self.answers[answer].asked) {
            (Some(asking), true) => Some(Asks {
                endpoint: asking
                    .preset()
                    .endpoint(request.method, path_of(request.target)),
                seed: draw.next_u64(),
            }),
            _ => None,
        };
        RouteChoice {
            route,
            answer: answer as u8,
            generation,
            hold: Hold {
                delay,
                body_delay,
                fault,
                rate: self.rate,
                truth: Some(TruthKey {
                    route,
                    outcome: outcome as u8,
                    generation,
                }),
                tokens: 0,
            },
            stream,
            asks,
        }
    }
}

/// A stream fits its route: on a gRPC route its messages (no `stream=` feed, `rate` or
/// `body-delay`), elsewhere a feed whose events are the body (no `body`, `size`, `rate` or
/// `body-delay` beside it); and `health=` is a gRPC route's. A phase's keys are parsed without
/// their route, so this is where a phase's stream and health meet it.
fn check_stream(spec: &RouteSpec, body: &Bytes) -> Result<()> {
    if spec.health.is_some() && !spec.is_grpc() {
        anyhow::bail!("health= needs a gRPC method path, like /grpc.health.v1.Health/*");
    }
    let Some(stream) = &spec.stream else {
        return Ok(());
    };
    match (spec.is_grpc(), stream.feed) {
        (true, Feed::Grpc) if spec.rate.is_some() || spec.body_delay.is_some() => anyhow::bail!("rate and body-delay can't be given with events=, first= or gap=: each message of a server-streaming gRPC route goes whole, on the stream's times"),
        (true, Feed::Grpc) if waits_in_flight(spec) => anyhow::bail!("first= and gap= can't be inflight:BASE:PER on a gRPC route: a call's messages are timed ahead, against its grpc-timeout"),
        (true, Feed::Grpc) => Ok(()),
        (true, _) => anyhow::bail!("stream= can't be given on a gRPC route: events=, first= and gap= make it server-streaming, each message its reply (size= or body=)"),
        (false, Feed::Grpc) => anyhow::bail!("events=, first= or gap= without stream= make a gRPC route server-streaming, and this route is not on a gRPC method path: give stream=sse|ndjson|chunks with them"),
        (false, _) if !body.is_empty() || spec.rate.is_some() || spec.body_delay.is_some() => {
            anyhow::bail!("body, size, rate and body-delay can't be given with stream=: the events are the body")
        }
        (false, _) => Ok(()),
    }
}

/// Whether a stream's (or an openai route's) `first=` or `gap=` is drawn from the count in flight
/// (`inflight:BASE:PER`).
fn waits_in_flight(spec: &RouteSpec) -> bool {
    let waits = match (&spec.stream, &spec.openai) {
        (Some(s), _) => [&s.first, &s.gap],
        (_, Some(o)) => [&o.first, &o.gap],
        _ => return false,
    };
    waits.into_iter().flatten().any(|d| d.in_flight().is_some())
}

/// A route's answers: one per status of its mix, then a stream's `204`, a pool's shed answer
/// and a gRPC route's `DEADLINE_EXCEEDED` (each with its index).
struct Answers {
    all: Vec<Answer>,
    done: Option<u8>,
    shed: Option<u8>,
    grpc: Option<GrpcRoute>,
}

impl Answers {
    /// An HTTP route's: each status's head and `body`, or its stream's or openai backend's.
    fn http(
        spec: &RouteSpec,
        base: &ResponseSpec,
        streams: bool,
        body: &Bytes,
        shed: Option<Shed>,
    ) -> Result<Answers> {
        let statuses = std::iter::once(spec.status).chain(spec.status_mix.iter().map(|(s, _)| *s));
        let mut answers = statuses
            .map(|status| match (&spec.stream, &spec.openai, status) {
                (Some(stream), _, 200..=299) => {
                    Answer::streamed(status, spec, stream, base, streams)
                }
                (_, Some(_), _) => Answer::openai(status, spec, base, streams),
                _ => Answer::build(status, spec, base, body, streams),
            })
            .collect::<Result<Vec<_>>>()?;
        let done_answer = match &spec.stream {
            Some(_) => {
                answers.push(Answer::build(204, spec, base, &Bytes::new(), streams)?);
                Some((answers.len() - 1) as u8)
            }
            None => None,
        };
        let shed_answer = match (shed, &spec.openai) {
            (Some(Shed::Status(status)), Some(_)) => {
                answers.push(Answer::openai(status, spec, base, streams)?);
                Some((answers.len() - 1) as u8)
            }
            (Some(Shed::Status(status)), None) => {
                answers.push(Answer::build(status, spec, base, &Bytes::new(), streams)?);
                Some((answers.len() - 1) as u8)
            }
            _ => None,
        };
        Ok(Answers {
            all: answers,
            done: done_answer,
            shed: shed_answer,
            grpc: None,
        })
    }

    /// A gRPC route's: one per `grpc-status` of its mix (its `reply` message, or a server-streaming
    /// route's messages, and OK; or the status trailers-only), a pool's shed status as its gRPC
    /// code, and `DEADLINE_EXCEEDED` (trailers-only; and a server-streaming route's after the
    /// messages sent in time).
    fn grpc(
        spec: &RouteSpec,
        common: &Common,
        reply: &Bytes,
        shed: Option<Shed>,
    ) -> Result<Answers> {
        if spec.openai.is_some() {
            anyhow::bail!("openai=on can't be given on a gRPC route: it answers gRPC calls");
        }
        let message = (spec.stream.is_none()).then_some(reply);
        let code = |n: u16| {
            Code::from_number(n).with_context(|| {
                format!("{n} is not a gRPC status: a gRPC route's outcome is grpc-status=")
            })
        };
        let statuses = std::iter::once(spec.status).chain(spec.status_mix.iter().map(|(s, _)| *s));
        let mut codes = statuses.map(code).collect::<Result<Vec<_>>>()?;
        let shed_answer = match shed {
            Some(Shed::Status(status)) => {
                codes.push(Code::of_shed(status));
                Some((codes.len() - 1) as u8)
            }
            _ => None,
        };
        codes.push(Code::DeadlineExceeded);
        let mut all = (codes.into_iter())
            .map(|code| Answer::grpc(code, spec, common, message))
            .collect::<Result<Vec<_>>>()?;
        let deadline_answer = (all.len() - 1) as u8;
        let deadline_stream = match &spec.stream {
            Some(_) => {
                all.push(Answer::grpc_stream_cut(spec, common)?);
                Some((all.len() - 1) as u8)
            }
            None => None,
        };
        // Its DEADLINE_EXCEEDED's outcome follows gone and a pool's shed (see `route_info`).
        let gone = (1 + spec.status_mix.len() + spec.faults.len()) as u8;
        let deadline_outcome = gone + 1 + u8::from(shed.is_some());
        Ok(Answers {
            grpc: Some(GrpcRoute {
                deadline_answer,
                deadline_stream,
                deadline_outcome,
                malformed_outcome: drawn_internal(spec).map_or(deadline_outcome + 1, |i| i as u8),
            }),
            all,
            done: None,
            shed: shed_answer,
        })
    }
}

impl Answer {
    fn build(
        status: u16,
        spec: &RouteSpec,
        base: &ResponseSpec,
        body: &Bytes,
        streams: bool,
    ) -> Result<Answer> {
        let headers = with_own_fields(&base.headers, &spec.headers)
            .cloned()
            .collect();
        let spec = ResponseSpec {
            status,
            headers,
            body: Vec::new(),
        };
        let no_body = matches!(status, 100..=199 | 204 | 304);
        let body = if no_body { Bytes::new() } else { body.clone() };
        Ok(Answer {
            head: Response::head_for(&spec, body.len())?,
            stream: match streams {
                true => Some(StreamAnswer::with_body(&spec, body.clone())?),
                false => None,
            },
            body,
            streamed: false,
            asked: false,
        })
    }

    /// A gRPC route's answer with `code`: HTTP 200, the route's fields, then `message` (or, with
    /// none, a server-streaming route's messages) and OK in the trailers, or `code` (and the
    /// route's `grpc-message`) trailers-only. Its HTTP/1.1 head is never sent (a gRPC call over
    /// HTTP/1.1 gets 415) but is made like every route's.
    fn grpc(
        code: Code,
        spec: &RouteSpec,
        common: &Common,
        message: Option<&Bytes>,
    ) -> Result<Answer> {
        let status = match code {
            Code::Ok => CallStatus::OK,
            _ => CallStatus::new(code, spec.grpc_message.clone().unwrap_or_default()),
        };
        let streamed = code == Code::Ok && message.is_none();
        Answer::grpc_with(spec, common, streamed, |fields| {
            super::grpc::route_answer(fields, message.map(|m| &m[..]), &status)
        })
    }

    /// A server-streaming gRPC route's answer to a call whose deadline falls during its messages:
    /// the messages due before it, then `DEADLINE_EXCEEDED` in the trailers at it.
    fn grpc_stream_cut(spec: &RouteSpec, common: &Common) -> Result<Answer> {
        Answer::grpc_with(spec, common, true, |fields| {
            super::grpc::messages_cut(fields, &CallStatus::deadline_exceeded())
        })
    }

    /// A gRPC route's answer as `stream` makes it from the route's fields (`streamed`: its
    /// messages are the route's events).
    fn grpc_with(
        spec: &RouteSpec,
        common: &Common,
        streamed: bool,
        stream: impl FnOnce(http::HeaderMap) -> StreamAnswer,
    ) -> Result<Answer> {
        let fields = with_own_fields(&common.base.headers, &spec.headers);
        let fields = super::stream::header_map(fields.map(|(n, v)| (n.as_str(), v.as_str())));
        let head_spec = ResponseSpec {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        };
        Ok(Answer {
            head: Response::head_for(&head_spec, 0)?,
            body: Bytes::new(),
            stream: (common.streams).then(|| stream(fields)),
            streamed,
            asked: false,
        })
    }

    /// An openai route's answer with `status`: a 2xx is made per request ([`asked`]); any other
    /// is whole, its body the error in OpenAI's shape, with the route's fields and
    /// `Content-Type: application/json` unless the route gives its own.
    fn openai(status: u16, spec: &RouteSpec, base: &ResponseSpec, streams: bool) -> Result<Answer> {
        let spec = RouteSpec {
            headers: with_defaults(&spec.headers, &[("Content-Type", "application/json")]),
            ..spec.clone()
        };
        let body = Bytes::from(OpenAi::status_body(status));
        Ok(Answer {
            asked: (200..=299).contains(&status),
            ..Answer::build(status, &spec, base, &body, streams)?
        })
    }

    /// A streamed route's answer with `status`: its heads without a length, its body the events
    /// made per request; the feed's `Content-Type` (and for SSE `Cache-Control: no-cache`) unless
    /// the route gives its own.
    fn streamed(
        status: u16,
        spec: &RouteSpec,
        stream: &StreamSpec,
        base: &ResponseSpec,
        streams: bool,
    ) -> Result<Answer> {
        let content_type = ("Content-Type", stream.feed.content_type());
        let defaults: &[(&str, &str)] = match stream.feed {
            Feed::Sse => &[content_type, ("Cache-Control", "no-cache")],
            _ => &[content_type],
        };
        let own = with_defaults(&spec.headers, defaults);
        let spec = ResponseSpec {
            status,
            headers: with_own_fields(&base.headers, &own).cloned().collect(),
            body: Vec::new(),
        };
        Ok(Answer {
            head: Response::streamed(&spec)?,
            stream: match streams {
                true => Some(StreamAnswer::streamed(&spec)?),
                false => None,
            },
            body: Bytes::new(),
            streamed: true,
            asked: false,
        })
    }
}

/// The most routes, and outcomes (statuses and faults) per route, a catalog numbers; and the largest
/// `size=` body, made at start-up.
const MAX_ROUTES: usize = u16::MAX as usize;
const MAX_OUTCOMES: usize = u8::MAX as usize;
const MAX_SIZE: u64 = 1 << 30;

/// What the catalog's numbering and memory allow, or which route asks for more.
fn check_limits(specs: &[RouteSpec]) -> Result<()> {
    if specs.len() > MAX_ROUTES {
        anyhow::bail!("{} routes: at most {MAX_ROUTES}", specs.len());
    }
    for spec in specs {
        // And gone, shed, and an openai route's 400, 404, 405.
        // And a gRPC route's DEADLINE_EXCEEDED and INTERNAL.
        let outcomes = 1
            + spec.status_mix.len()
            + spec.faults.len()
            + 2
            + 3 * usize::from(spec.openai.is_some())
            + 2 * usize::from(spec.is_grpc());
        if outcomes > MAX_OUTCOMES {
            anyhow::bail!(
                "{}: {outcomes} statuses and faults: at most {MAX_OUTCOMES}",
                spec.at
            );
        }
        if let BodySpec::Size(n) = spec.body {
            if n > MAX_SIZE {
                anyhow::bail!(
                    "{}: size={n} is over 1g, the largest body made at start-up",
                    spec.at
                );
            }
        }
    }
    Ok(())
}

/// The bytes `size=` bodies are cut from: one buffer as long as the longest, printable and
/// recognisable (a repeating alphabet, 64 bytes a line).
fn generated_body(specs: &[RouteSpec]) -> Bytes {
    let longest = specs
        .iter()
        .filter_map(|s| match s.body {
            BodySpec::Size(n) => Some(n as usize),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    generated(longest)
}

/// `len` generated body bytes: printable and recognisable (a repeating alphabet, 64 bytes a line).
pub fn generated(len: usize) -> Bytes {
    let line = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-\n";
    line.iter()
        .copied()
        .cycle()
        .take(len)
        .collect::<Vec<u8>>()
        .into()
}

/// Cumulative shares out of [`ONE`] (a roll below `cuts[i]` and above `cuts[i-1]` picks `i`).
fn cumulative(shares: impl Iterator<Item = f64>) -> Vec<u32> {
    let mut sum = 0.0;
    shares
        .map(|p| {
            sum += p;
            (sum * ONE as f64).min((ONE - 1) as f64) as u32
        })
        .collect()
}

/// The path of a request target, without its query (an absolute URI's path too).
fn path_of(target: &[u8]) -> &[u8] {
    let target = match target.iter().position(|&b| b == b'?') {
        Some(q) => &target[..q],
        None => target,
    };
    match target.windows(3).position(|w| w == b"://") {
        Some(at) => {
            let rest = &target[at + 3..];
            rest.iter()
                .position(|&b| b == b'/')
                .map_or(b"/", |p| &rest[p..])
        }
        None => target,
    }
}

/// A gRPC route's reply as the start-up lines show it: `, health NOT_SERVING`, `, a message of 3
/// bytes in field 1`, … and, server-streaming, `as a stream of 5 gRPC messages, first …, gap …`.
fn describe_reply(spec: &RouteSpec) -> String {
    let message = match (&spec.health, &spec.body) {
        (Some(status), _) => format!(", health {}", spec::health_name(*status)),
        (None, BodySpec::Empty) => ", an empty message".into(),
        (None, BodySpec::Size(n)) => format!(", a message of {n} bytes in field 1"),
        (None, BodySpec::Text(b)) => format!(", a message of {} bytes", b.len()),
        (None, BodySpec::File(path, b)) => format!(", {} ({} bytes)", path.display(), b.len()),
    };
    let stream = spec
        .stream
        .as_ref()
        .map(describe_stream)
        .unwrap_or_default();
    message + &stream
}

/// A stream as the start-up lines show it: `, a stream of 50 sse events, first 0s, gap 20ms`.
fn describe_stream(stream: &StreamSpec) -> String {
    let wait = |d: &Option<Dist>| d.as_ref().map_or("0s".to_string(), Dist::to_string);
    let kind = match stream.feed {
        Feed::Grpc => "gRPC messages".to_string(),
        feed => format!("{} events", feed.name()),
    };
    format!(
        ", a stream of {} {kind}, first {}, gap {}",
        stream.events,
        wait(&stream.first),
        wait(&stream.gap)
    )
}

/// An openai route as the start-up lines show it: `, an OpenAI-compatible backend (models any;
/// tokens max_tokens, first 0s, gap 20ms, prefill 0s per prompt token)`.
fn describe_openai(openai: Option<&OpenAiSpec>) -> String {
    let Some(o) = openai else {
        return String::new();
    };
    let wait = |d: &Option<Dist>| d.as_ref().map_or("0s".to_string(), Dist::to_string);
    let models = match o.models.is_empty() {
        true => "any".to_string(),
        false => o.models.join(", "),
    };
    let tokens = o
        .tokens
        .as_ref()
        .map_or("max_tokens".into(), |t| t.to_string());
    let prefill = humantime::format_duration(o.prefill.unwrap_or_default());
    let context = o
        .context
        .map_or(String::new(), |c| format!(", context {c}"));
    format!(
        ", an OpenAI-compatible backend (models {models}; tokens {tokens}, first {}, gap {}, prefill {prefill} per prompt token{context})",
        wait(&o.first),
        wait(&o.gap)
    )
}

/// A route as the start-up lines show it: its name, then what it answers with.
pub fn describe(spec: &RouteSpec) -> String {
    let mut s = format!("{} → {}", spec.name, outcome_name(spec, spec.status));
    for (status, p) in &spec.status_mix {
        s.push_str(&format!(", {} {}%", outcome_name(spec, *status), p * 100.0));
    }
    match (&spec.body, &spec.stream) {
        _ if spec.openai.is_some() => s.push_str(&describe_openai(spec.openai.as_ref())),
        _ if spec.is_grpc() => s.push_str(&describe_reply(spec)),
        (_, Some(stream)) => s.push_str(&describe_stream(stream)),
        (BodySpec::Empty, None) => s.push_str(", empty body"),
        (BodySpec::Text(b), None) => s.push_str(&format!(", {} bytes", b.len())),
        (BodySpec::File(path, b), None) => {
            s.push_str(&format!(", {} ({} bytes)", path.display(), b.len()))
        }
        (BodySpec::Size(n), None) => s.push_str(&format!(", {n} generated bytes")),
    }
    if let Some(d) = &spec.delay {
        s.push_str(&format!(", delay {d}"));
    }
    if let Some(d) = &spec.body_delay {
        s.push_str(&format!(", body delay {d}"));
    }
    for (f, p) in &spec.faults {
        s.push_str(&format!(", {} {}%", f.name(), p * 100.0));
    }
    if let Some(rate) = spec.rate {
        s.push_str(&format!(", body at {rate} B/s"));
    }
    match &spec.pool {
        Some(RoutePool::Named { name, .. }) => s.push_str(&format!(", served by pool {name}")),
        Some(RoutePool::Own(pool)) => s.push_str(&format!(", served by its pool: {pool}")),
        None => {}
    }
    s
}

/// What the ground truth knows of a route: its name, outcomes (its statuses, its faults, `gone`,
/// and `shed` when it is pooled) and delay range.
fn route_info(spec: &RouteSpec, pool: Option<usize>, phase: Option<String>) -> RouteInfo {
    let pooled = pool.is_some();
    let statuses = std::iter::once(spec.status).chain(spec.status_mix.iter().map(|(s, _)| *s));
    let mut outcomes: Vec<String> = statuses.map(|s| outcome_name(spec, s)).collect();
    outcomes.extend(spec.faults.iter().map(|(f, _)| f.name().to_string()));
    outcomes.push("gone".into());
    if pooled {
        outcomes.push("shed".into());
    }
    let refusals = spec.openai.is_some().then_some(outcomes.len());
    if refusals.is_some() {
        outcomes.extend(["400", "404", "405"].map(String::from));
    }
    if spec.is_grpc() {
        outcomes.push(Code::DeadlineExceeded.name().into());
        if drawn_internal(spec).is_none() {
            outcomes.push(Code::Internal.name().into());
        }
    }
    RouteInfo {
        name: spec.name.clone(),
        phase,
        grpc_status: match spec.is_grpc() {
            true => grpc_statuses(&outcomes),
            false => Vec::new(),
        },
        outcomes,
        pooled,
        refusals,
        streamed: spec.stream.is_some() || spec.openai.is_some(),
        pool,
        model: (spec.openai.as_ref()).map(|o| {
            o.models
                .first()
                .map_or(super::openai::ANY_MODEL, String::as_str)
                .to_owned()
        }),
        expected: spec
            .delay
            .as_ref()
            .map(|d| (d.quantile(0.001), d.quantile(0.9999))),
    }
}

/// Where a gRPC route draws `INTERNAL` among its statuses, if it does: its outcome for a call
/// refused `INTERNAL` too.
fn drawn_internal(spec: &RouteSpec) -> Option<usize> {
    let mut statuses = std::iter::once(spec.status).chain(spec.status_mix.iter().map(|(s, _)| *s));
    let internal = Code::Internal as u16;
    statuses.position(|s| s == internal)
}

/// A built-in gRPC method as the truth knows it: named by its path, its outcomes every gRPC status
/// (by number) and `gone`.
fn builtin_info(path: &str) -> RouteInfo {
    let outcomes = super::grpc::method_outcomes();
    RouteInfo {
        name: path.to_owned(),
        phase: None,
        grpc_status: grpc_statuses(&outcomes),
        outcomes,
        expected: None,
        pooled: false,
        streamed: false,
        pool: None,
        model: None,
        refusals: None,
    }
}

/// Each of a gRPC route's (or built-in method's) outcomes as a `grpc-status` number, for those that
/// are statuses (not a fault, `gone` or `shed`).
fn grpc_statuses(outcomes: &[String]) -> Vec<Option<u16>> {
    (outcomes.iter())
        .map(|name| {
            Code::ALL
                .iter()
                .find(|c| c.name() == name)
                .map(|c| *c as u16)
        })
        .collect()
}

/// How the ground truth and the start-up lines name `status`: a gRPC route's by its code's name
/// (`UNAVAILABLE`), another's by its number.
fn outcome_name(spec: &RouteSpec, status: u16) -> String {
    match Code::from_number(status).filter(|_| spec.is_grpc()) {
        Some(code) => code.name().to_owned(),
        None => status.to_string(),
    }
}

/// A route's shared load state: its in-flight model, its pool, its `shed` outcome (after `gone`).
fn route_load(spec: &RouteSpec, route: &Route, pool: Option<usize>) -> RouteLoad {
    RouteLoad::new(
        spec.delay.as_ref().and_then(Dist::in_flight),
        pool,
        pool.map(|_| route.gone_outcome() + 1),
    )
}

/// Checks the pools when there are no routes at all: each is defined once, and (there being no
/// route) unused, which is refused like any pool no route is served by.
pub fn check_pools_alone(defined: &[(PoolSpec, String)]) -> Result<()> {
    resolve_pools(&[], defined, &[], &OrphanClock::default()).map(|_| ())
}

/// The pools, and each route's pool among them (an index).
type Resolved = (Vec<(PoolSpec, Arc<Pool>)>, Vec<Option<usize>>);

/// The pool `spec` describes: the one `kept` has with that very spec (its requests in service and
/// queued carry on), or a new one handing its orphans to `orphans`.
fn pool_for(
    spec: &PoolSpec,
    kept: &[(PoolSpec, Arc<Pool>)],
    orphans: &OrphanClock,
) -> (PoolSpec, Arc<Pool>) {
    let pool = (kept.iter().find(|(s, _)| s == spec))
        .map_or_else(|| Arc::new(Pool::new(spec, orphans)), |(_, p)| p.clone());
    (spec.clone(), pool)
}

/// The pools: those defined apart (`--pool`, `[[pool]]`), then each route's own; and each route's
/// pool among them. A pool defined twice or a route naming no defined pool is the user's error.
fn resolve_pools(
    specs: &[RouteSpec],
    defined: &[(PoolSpec, String)],
    kept: &[(PoolSpec, Arc<Pool>)],
    orphans: &OrphanClock,
) -> Result<Resolved> {
    let mut pools: Vec<(PoolSpec, Arc<Pool>)> = Vec::new();
    for (i, (pool, at)) in defined.iter().enumerate() {
        if let Some((_, first)) = defined[..i].iter().find(|(p, _)| p.name == pool.name) {
            anyhow::bail!(
                "{at}: pool {:?} is defined twice (first at {first})",
                pool.name
            );
        }
        pools.push(pool_for(pool, kept, orphans));
    }
    let mut pool_of = Vec::with_capacity(specs.len());
    for spec in specs {
        pool_of.push(match &spec.pool {
            None => None,
            Some(RoutePool::Named { name, at }) => match defined.iter().position(|(p, _)| &p.name == name) {
                Some(i) => Some(i),
                None => anyhow::bail!("{at}: pool={name}: no --pool or [[pool]] is named {name:?} (a route's own pool cannot be shared); define it with --pool '{name} capacity=C' or a [[pool]] table"),
            },
            Some(RoutePool::Own(pool)) => {
                if let Some((same, _)) = pools.iter().find(|p| p.0.name == pool.name) {
                    anyhow::bail!("{}: its own pool is named {:?}, as another pool is (capacity {}); give the route another name (TOML name = \"...\") or the other pool another", spec.at, pool.name, same.capacity);
                }
                pools.push(pool_for(pool, kept, orphans));
                Some(pools.len() - 1)
            }
        });
    }
    if let Some((pool, at)) = (defined.iter().enumerate())
        .find(|(i, _)| !pool_of.contains(&Some(*i)))
        .map(|(_, p)| p)
    {
        anyhow::bail!(
            "{at}: no route is served by pool {:?}; give a route pool={}",
            pool.name,
            pool.name
        );
    }
    Ok((pools, pool_of))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_grpc_route_without_http2_is_refused_naming_the_flag() {
        let table = super::Table {
            routes: vec![super::spec::parse_spec("/pkg.Svc/M grpc-status=UNAVAILABLE").unwrap()],
            ..super::Table::default()
        };
        let base = super::ResponseSpec {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        };
        let common = |streams| super::Common::new(base.clone(), streams, 1, None);
        let err = super::Routes::build(&table, &common(false), None).unwrap_err();
        assert!(
            format!("{err:#}").contains("add --http2 (or --grpc)"),
            "{err:#}"
        );
        assert!(super::Routes::build(&table, &common(true), None).is_ok());
    }

    use super::*;

    /// `table` built with HTTP/2 and an empty 200 as the base answer.
    fn built(table: &Table) -> Result<Routes> {
        let base = ResponseSpec {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        };
        Routes::build(table, &Common::new(base, true, 1, None), None)
    }

    /// Building `table` (with HTTP/2): the error, in one line.
    fn build_error(table: &Table) -> String {
        format!("{:#}", built(table).unwrap_err())
    }

    #[test]
    fn a_routes_build_errors_name_where_it_was_written() {
        let put = |text: &str| Table::of_toml(text, std::path::Path::new("PUT /routes")).unwrap();
        let e = build_error(&put(
            "[[route]]\npath = \"/a\"\n\n[[route]]\npath = \"/v1\"\nopenai = \"on\"\n",
        ));
        assert!(
            e.starts_with("PUT /routes:4: openai=on needs a path ending in /*"),
            "{e}"
        );
        let e = build_error(&put("[[pool]]\nname = \"db\"\ncapacity = 1\n\n[[route]]\nname = \"db\"\npath = \"/a\"\ncapacity = 2\n\n[[route]]\npath = \"/b\"\npool = \"db\"\n"));
        assert!(
            e.starts_with("PUT /routes:5: its own pool is named \"db\""),
            "{e}"
        );
        let flags = Table {
            routes: vec![spec::parse_spec("/v1 openai=on").unwrap()],
            ..Table::default()
        };
        let e = build_error(&flags);
        assert!(
            e.starts_with("--route \"/v1 openai=on\": openai=on needs a path"),
            "{e}"
        );
    }

    #[test]
    fn a_phase_retiming_a_stream_or_an_openai_route_builds() {
        for (route, phase) in [
            (
                "/sse stream=sse events=5 gap=10ms",
                "at=3600s for=1s /sse gap=1s",
            ),
            (
                "/v1/* openai=on gap=10ms",
                "at=3600s for=1s /v1/* gap=1s first=5ms",
            ),
        ] {
            let table = Table {
                routes: vec![spec::parse_spec(route).unwrap()],
                phases: vec![phase_spec::parse_phase(phase, 0).unwrap()],
                ..Table::default()
            };
            let built = built(&table);
            assert!(built.is_ok(), "{route} {phase}: {:#}", built.unwrap_err());
        }
        let table = Table {
            routes: vec![spec::parse_spec("/pkg.Svc/M events=2").unwrap()],
            phases: vec![phase_spec::parse_phase("at=1s for=1s /pkg.Svc/M rate=1m", 0).unwrap()],
            ..Table::default()
        };
        let e = build_error(&table);
        assert!(
            e.starts_with("--phase \"at=1s for=1s /pkg.Svc/M rate=1m\": on route /pkg.Svc/M: rate and body-delay can't be given with events="),
            "{e}"
        );
    }

    /// The fields of the HTTP/1.1 and the stream answer `path` gets from `routes` and `phases`,
    /// with `-H` fields `defaults`.
    fn answered(
        routes: &[&str],
        phases: &[&str],
        defaults: &[(&str, &str)],
        path: &str,
    ) -> (String, http::HeaderMap) {
        let table = Table {
            routes: (routes.iter())
                .map(|r| spec::parse_spec(r).unwrap())
                .collect(),
            phases: (phases.iter().enumerate())
                .map(|(i, p)| phase_spec::parse_phase(p, i).unwrap())
                .collect(),
            ..Table::default()
        };
        let base = ResponseSpec {
            status: 200,
            headers: (defaults.iter())
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        };
        let routes = Routes::build(&table, &Common::new(base, true, 1, None), None).unwrap();
        let request = Request {
            method: b"GET",
            target: path.as_bytes(),
            ..Request::default()
        };
        let choice = routes.choose(&request, &mut generator(Some(1), 0)).unwrap();
        let mut out = Vec::new();
        routes.write(&choice, Framing::KeepAlive, true, &mut out, None);
        let head = String::from_utf8(out).unwrap();
        (head, routes.stream_answer(&choice, None).headers)
    }

    fn count(head: &str, field: &str) -> usize {
        head.matches(&format!("\r\n{field}")).count()
    }

    #[test]
    fn a_routes_field_replaces_the_same_named_default_and_set_cookie_adds() {
        let defaults = [
            ("Content-Type", "text/plain"),
            ("Set-Cookie", "a=1"),
            ("X-Default", "d"),
        ];
        let route = "/p header=content-type:application/json header=Set-Cookie:b=2";
        let (head, stream) = answered(&[route], &[], &defaults, "/p");
        assert_eq!(count(&head, "Content-Type:"), 0, "{head}");
        assert_eq!(count(&head, "content-type: application/json"), 1, "{head}");
        assert_eq!(count(&head, "Set-Cookie:"), 2, "{head}");
        assert_eq!(count(&head, "X-Default: d"), 1, "{head}");
        let types: Vec<_> = stream.get_all("content-type").iter().collect();
        assert_eq!(types, ["application/json"]);
        assert_eq!(stream.get_all("set-cookie").iter().count(), 2);
    }

    #[test]
    fn a_phases_field_replaces_the_default_too() {
        let defaults = [("Content-Type", "text/plain")];
        let phase = "at=0s for=3600s /p header=Content-Type:text/csv";
        let (head, stream) = answered(&["/p body=x"], &[phase], &defaults, "/p");
        assert_eq!(count(&head, "Content-Type:"), 1, "{head}");
        assert_eq!(count(&head, "Content-Type: text/csv"), 1, "{head}");
        let types: Vec<_> = stream.get_all("content-type").iter().collect();
        assert_eq!(types, ["text/csv"]);
    }

    #[test]
    fn a_grpc_routes_start_up_line_names_its_message_its_health_and_its_stream() {
        let line = |r: &str| describe(&spec::parse_spec(r).unwrap());
        assert_eq!(
            line("/pkg.Svc/M grpc-status=UNAVAILABLE:5%"),
            "/pkg.Svc/M → OK, UNAVAILABLE 5%, an empty message"
        );
        assert_eq!(
            line("/grpc.health.v1.Health/* health=not_serving"),
            "/grpc.health.v1.Health/* → OK, health NOT_SERVING"
        );
        assert_eq!(
            line("/pkg.Svc/Feed events=5 gap=20ms size=3"),
            "/pkg.Svc/Feed → OK, a message of 3 bytes in field 1, a stream of 5 gRPC messages, first 0s, gap 20ms"
        );
    }

    #[test]
    fn a_server_streaming_grpc_route_sends_its_reply_per_event_then_ok_or_the_deadline_at_it() {
        use crate::catalog::model::delivery::Step;
        let table = Table {
            routes: vec![
                spec::parse_spec("/pkg.Svc/Feed events=4 first=10ms gap=20ms size=2").unwrap(),
            ],
            ..Table::default()
        };
        let routes = built(&table).unwrap();
        let request = Request {
            method: b"POST",
            target: b"/pkg.Svc/Feed",
            ..Request::default()
        };
        // The steps of a call, with their times in ms after the request.
        let run = |deadline: Option<Duration>| {
            let mut draw = generator(Some(1), 0);
            let choice = routes.choose_call(&request, &mut draw).unwrap();
            let choice = deadline.map_or(choice, |d| routes.within(choice, d));
            let mut answer = routes.stream_answer(&choice, None);
            let t0 = std::time::Instant::now();
            let mut delivery = answer.delivery(None, false);
            let (mut now, mut steps) = (t0, Vec::new());
            loop {
                match delivery.next(&mut now, usize::MAX) {
                    Step::Wait(at) => now = at,
                    Step::Done => return (answer, steps),
                    Step::Record { .. } => {}
                    step => steps.push(((now - t0).as_millis(), step)),
                }
            }
        };
        let message = b"\0\0\0\0\x04\x0a\x02ab".to_vec();
        let event = |ms, end| {
            (
                ms,
                Step::Event {
                    bytes: message.clone(),
                    end,
                },
            )
        };
        let head = [(0, Step::Head { end: false }), (0, Step::Sent)];
        let (whole, steps) = run(None);
        assert_eq!(whole.trailers.as_ref().unwrap()["grpc-status"], "0");
        let events = [10, 30, 50, 70].map(|ms| event(ms, false));
        let all = [&head[..], &events, &[(70, Step::Trailers)]].concat();
        assert_eq!(steps, all);
        assert_eq!(run(Some(Duration::from_millis(71))).1, steps, "in time");
        let (cut, steps) = run(Some(Duration::from_millis(45)));
        assert_eq!(cut.trailers.as_ref().unwrap()["grpc-status"], "4");
        let cut_short = [&head[..], &events[..2], &[(45, Step::Trailers)]].concat();
        assert_eq!(steps, cut_short, "two messages, then the deadline at it");
        let outcomes = route_info(&table.routes[0], None, None).outcomes;
        assert_eq!(outcomes, ["OK", "gone", "DEADLINE_EXCEEDED", "INTERNAL"]);
    }

    #[test]
    fn a_server_streaming_grpc_routes_faults_gone_and_malformed_timeouts_are_their_own_outcomes() {
        for (spec, fault) in [
            ("/pkg.Svc/Feed events=5 gap=10ms fault=reset:100%", "reset"),
            ("/pkg.Svc/Feed events=5 gap=10ms fault=close:100%", "close"),
        ] {
            let table = Table {
                routes: vec![spec::parse_spec(spec).unwrap()],
                ..Table::default()
            };
            let routes = built(&table).unwrap();
            let outcomes = route_info(&table.routes[0], None, None).outcomes;
            assert_eq!(
                outcomes,
                ["OK", fault, "gone", "DEADLINE_EXCEEDED", "INTERNAL"]
            );
            let request = Request {
                method: b"POST",
                target: b"/pkg.Svc/Feed",
                ..Request::default()
            };
            let choice = (routes.choose_call(&request, &mut generator(Some(1), 0))).unwrap();
            let drawn = usize::from(choice.hold.truth.unwrap().outcome);
            assert_eq!(outcomes[drawn], fault, "{spec}");
            let gone = usize::from(routes.routes[0].gone_outcome());
            assert_eq!(outcomes[gone], "gone", "{spec}");
            let malformed = routes.malformed_timeout(&choice).unwrap().outcome;
            assert_eq!(outcomes[usize::from(malformed)], "INTERNAL", "{spec}");
        }
    }

    #[test]
    fn a_grpc_route_answers_calls_only_in_grpc_terms_and_past_a_deadline_is_deadline_exceeded() {
        let table = Table {
            routes: vec![spec::parse_spec(
                "/pkg.Svc/* grpc-status=UNAVAILABLE:50% grpc-message=busy delay=1s size=3",
            )
            .unwrap()],
            ..Table::default()
        };
        let base = ResponseSpec {
            status: 200,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: Vec::new(),
        };
        let routes = Routes::build(&table, &Common::new(base, true, 1, None), None).unwrap();
        let request = Request {
            method: b"POST",
            target: b"/pkg.Svc/M",
            ..Request::default()
        };
        let mut draw = generator(Some(1), 0);
        assert!(
            routes.choose(&request, &mut draw).is_none(),
            "not a plain request's"
        );
        let mut seen = [false; 2];
        for _ in 0..64 {
            let choice = routes.choose_call(&request, &mut draw).unwrap();
            let a = routes.stream_answer(&choice, None);
            assert_eq!(a.status, http::StatusCode::OK);
            assert_eq!(a.headers["content-type"], "application/grpc");
            match a.trailers {
                Some(t) => {
                    assert_eq!(t["grpc-status"], "0");
                    assert_eq!(&a.body[..], b"\0\0\0\0\x05\x0a\x03abc");
                    seen[0] = true;
                }
                None => {
                    assert_eq!(a.headers["grpc-status"], "14");
                    assert_eq!(a.headers["grpc-message"], "busy");
                    seen[1] = true;
                }
            }
            let late = routes.within(choice, Duration::from_millis(10));
            let a = routes.stream_answer(&late, None);
            assert_eq!(a.headers["grpc-status"], "4");
            assert_eq!(a.hold.delay, Duration::from_millis(10));
            assert_eq!(
                late.hold.truth.unwrap().outcome,
                3,
                "after OK, UNAVAILABLE, gone"
            );
        }
        assert_eq!(seen, [true, true]);
        // A route that draws INTERNAL counts a malformed grpc-timeout under it.
        let drawing = Table {
            routes: vec![spec::parse_spec("/pkg.Svc/* grpc-status=INTERNAL:50%").unwrap()],
            ..Table::default()
        };
        let outcomes = route_info(&drawing.routes[0], None, None).outcomes;
        assert_eq!(outcomes, ["OK", "INTERNAL", "gone", "DEADLINE_EXCEEDED"]);
        let base = ResponseSpec {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        };
        let drawn = Routes::build(&drawing, &Common::new(base, true, 1, None), None).unwrap();
        let choice = drawn.choose_call(&request, &mut draw).unwrap();
        let malformed = drawn.malformed_timeout(&choice).unwrap().outcome;
        assert_eq!(malformed, 1);
        let outcomes = route_info(&table.routes[0], None, None).outcomes;
        assert_eq!(
            outcomes,
            ["OK", "UNAVAILABLE", "gone", "DEADLINE_EXCEEDED", "INTERNAL"]
        );
    }
}
