//! The catalog: "what do I send for this request?", one answer for every protocol.
//!
//! A protocol builds a [`Request`] view once per request (method, target, the few fields an answer
//! depends on), asks [`View::choose`] for a [`Choice`] (a few integers), and turns the choice into its
//! own framing: HTTP/1.1 as bytes ([`View::write`], appended to the connection's output, `Date` and the
//! connection header included), HTTP/2 and HTTP/3 as a [`StreamAnswer`] (status, fields, a shared body)
//! that they send as frames ([`Local::stream_answer`]). The choice is made when a request's head
//! arrives and written when the request is complete, so an HTTP/1.1 session holds only the choice
//! while a body arrives.
//!
//! The kinds of catalog:
//! - **one** pre-built response (`-s/-b/-H`) for every request: it never looks at the request (the
//!   view is not even built), so the hot path stays a copy of pre-encoded bytes;
//! - a **site** (`--root`): a table of files with their encoded variants, 304, 206 and HEAD forms
//!   ([`site`]), rebuilt and swapped whole on SIGHUP;
//! - in front of either, **routes** (`--route`, [`route`]): answers by method and path with drawn
//!   statuses, delays and faults, or a stream of events ([`feed`]); a request no route matches
//!   falls through to the kind below.
//!
//! With its answer the catalog decides how it is delivered ([`Hold`]: a delay, a body held apart or
//! paced, a fault): `-d` / `--body-delay` for the default answer, a route's draws for its own. One
//! delivery machine ([`delivery`]) steps every held answer for every protocol; the runtimes ask the
//! catalog, never a kind.
//!
//! Built once at start-up ([`Catalog::build`]) and shared by every worker; each worker (and each QUIC
//! thread) holds a [`Local`] copy: its own pre-built bytes with a live `Date`, and its own reference to
//! the site in force, taken again only after a rebuild (one relaxed load per batch).

pub mod echo;
pub mod feed;
pub mod grpc;
pub mod model;
pub mod openai;
pub mod request;
pub mod response;
pub mod route;
pub mod sink;
pub mod site;
pub mod stream;

use std::cell::RefCell;
use std::sync::Arc;

use anyhow::Result;

pub use model::hold::{Hold, Recorder, TruthKey};
use model::pause::Pauses;
pub use request::Request;
use response::{ErrorStatus, Framing, Response, ResponseSpec, DATE_LEN};
use route::live::LiveRoutes;
use route::table::Table;
use route::{Draw, RouteChoice, Routes};
use sink::Sink;
use site::{Site, SiteHandle, SiteOptions};
pub use stream::StreamAnswer;

/// What the catalog is built from (the catalog's part of the start-up plan).
#[derive(Clone, Debug)]
pub struct CatalogPlan {
    /// The pre-built response: the answer of the single-response kind, and the `Server`, `-H` fields
    /// and error answers of every kind.
    pub response: ResponseSpec,
    /// `--root` and its companions: a static site instead of one response.
    pub site: Option<SiteOptions>,
    /// HTTP/2 or HTTP/3 is served: the answers are needed as [`StreamAnswer`]s too.
    pub streams: bool,
    /// `-d` / `--body-delay`: how the default answer (the response, the site) is delivered.
    pub hold: Hold,
    /// `--pool`, `--route`, `--phase` and `--routes FILE`: the routes table at start-up.
    pub table: Table,
    /// `--pause`: the scheduled whole-server pauses.
    pub pauses: Vec<model::schedule::Window>,
    /// The routes may be replaced while statico runs (`--admin`, or `--routes FILE` re-read on
    /// SIGHUP): the table is kept live even when it is empty.
    pub live: bool,
    /// Pauses are possible (`--pause`, `--admin`): every answer due while one is in force is held
    /// until it ends.
    pub pausable: bool,
    /// `--seed`: the routes' draws repeat from run to run.
    pub seed: Option<u64>,
    /// `--echo-query`: Fortio's query arguments, within these limits.
    pub echo: Option<route::fortio::Limits>,
    /// How many workers answer: each, and each one's QUIC thread (with `quic`), records its own
    /// ground truth.
    pub workers: usize,
    /// `--http3`: every worker has a QUIC thread.
    pub quic: bool,
    /// `--grpc`: gRPC calls on HTTP/2 are answered by the built-in services ([`grpc`]).
    pub grpc: Option<grpc::Grpc>,
}

/// What statico answers from, built once, shared by every worker.
#[derive(Debug)]
pub struct Catalog {
    response: Response,
    /// The response as HTTP/2 and HTTP/3 send it (with `--http2` or `--http3`).
    stream: Option<StreamAnswer>,
    kind: Kind,
    hold: Hold,
    routes: Option<Arc<LiveRoutes>>,
    echo: Option<echo::Echo>,
    seed: Option<u64>,
    workers: usize,
    /// Whether some answer other than a route's is held (a route's table says for its own):
    /// HTTP/1.1 then answers one request at a time.
    paced: bool,
    /// What every routes table is built with, the server's pauses among it.
    common: route::Common,
    grpc: Option<grpc::Grpc>,
}

/// The kinds of catalog (see the module doc).
#[derive(Debug)]
enum Kind {
    One,
    Site(Arc<SiteHandle>),
}

/// The answer to one request, decided when its head arrived (an openai route's, when its body
/// is in: [`View::asked`]).
#[derive(Clone, Debug)]
pub enum Choice {
    /// The pre-built response.
    One,
    Site(site::SiteChoice),
    Route(RouteChoice),
    Echo(Box<echo::EchoChoice>),
    /// An openai route's answer, made from its request's body.
    Asked(Box<route::asked::Asked>),
    /// A gRPC call over HTTP/1.1, with `--grpc`: 415.
    GrpcOverHttp1,
}

impl Choice {
    /// The same answer, recording no ground truth (a copy written for `-v`'s dump).
    pub fn uncounted(&self) -> Choice {
        match self {
            Choice::Route(c) => {
                let mut c = *c;
                c.hold.truth = None; // and so no ticket: a copy takes no place in a pool
                Choice::Route(c)
            }
            Choice::Asked(a) => {
                let mut a = a.clone();
                a.choice.hold.truth = None;
                Choice::Asked(a)
            }
            other => other.clone(),
        }
    }
}

/// What [`View::write`] wrote: where the body starts (when it may be held apart from the head), and
/// how the answer is delivered.
#[derive(Debug, Default)]
pub struct Written {
    pub body_at: Option<usize>,
    pub hold: Hold,
    /// The connection closes after this answer (`--echo-query`'s `close`).
    pub close: bool,
    /// A route's held answer: its ticket ([`model::load::Ticket`]).
    pub ticket: Option<model::load::Ticket>,
    /// Where a shed answer written behind the answer starts (a request that may be shed after
    /// waiting in a pool's queue).
    pub shed_at: Option<usize>,
    /// A streamed answer's events: its body is given out as them.
    pub events: Option<Box<model::events::Events>>,
}

impl CatalogPlan {
    /// The plan of one response answered at once, with no routes (tests).
    pub fn of_response(response: ResponseSpec) -> CatalogPlan {
        CatalogPlan {
            response,
            site: None,
            streams: false,
            hold: Hold::default(),
            table: Table::default(),
            pauses: Vec::new(),
            live: false,
            pausable: false,
            seed: None,
            echo: None,
            workers: 1,
            quic: false,
            grpc: None,
        }
    }
}

impl Catalog {
    /// From the plan: the response encoded, the site walked and built (its summary printed). Any
    /// error is the user's (a flag, a file).
    pub fn build(plan: &CatalogPlan) -> Result<Catalog> {
        let response = Response::new(&plan.response)?;
        let stream = match plan.streams {
            true => Some(StreamAnswer::new(&plan.response)?),
            false => None,
        };
        let kind = match &plan.site {
            None => Kind::One,
            Some(opts) => Kind::Site(Arc::new(SiteHandle::new(build_site(opts)?))),
        };
        let common = route::Common::new(
            plan.response.clone(),
            plan.streams,
            plan.workers * (1 + usize::from(plan.quic)),
            plan.pausable.then(|| Pauses::new(plan.pauses.clone())),
        );
        let common = route::Common {
            builtins: plan.grpc.is_some(),
            ..common
        };
        // With `--grpc` the table is kept, if empty, for the built-in methods' truth.
        let routes = match plan.table.routes.is_empty() && !plan.live && plan.grpc.is_none() {
            true => {
                route::check_pools_alone(&plan.table.pools)?;
                None
            }
            false => {
                let routes = Routes::build(&plan.table, &common, None)?;
                Some(Arc::new(LiveRoutes::new(routes)))
            }
        };
        announce(plan);
        Ok(Catalog {
            response,
            stream,
            kind,
            hold: plan.hold,
            // Pauses pace HTTP/1.1 only while one is in force (see `Local::view`).
            paced: plan.hold.paces() || plan.echo.is_some(),
            routes,
            echo: (plan.echo.as_ref()).map(|l| echo::Echo::new(*l, &plan.response.headers)),
            seed: plan.seed,
            workers: plan.workers,
            common,
            grpc: plan.grpc.clone(),
        })
    }

    /// The server's pauses (none unless `--pause` or `--admin` makes them possible).
    pub fn pauses(&self) -> Option<&Pauses> {
        self.common.pauses.as_ref()
    }

    /// The routes' ground truth in force (none without routes).
    pub fn truth(&self) -> Option<Arc<crate::observe::truth::GroundTruth>> {
        self.routes.as_ref().map(|r| r.load().truth().clone())
    }

    /// The routes table in force (none without routes).
    pub fn routes(&self) -> Option<Arc<Routes>> {
        self.routes.as_ref().map(|r| r.load())
    }

    /// `PUT /routes`, SIGHUP: builds `table` and puts it in force for the next requests (answers
    /// already chosen keep theirs; pools with the same spec carry over). Returns the new table's
    /// generation; an error (the user's) leaves the table in force as it is.
    pub fn replace_routes(&self, table: &Table) -> Result<u32> {
        let Some(live) = &self.routes else {
            anyhow::bail!(
                "the routes cannot be replaced: statico started without --admin or --routes FILE"
            );
        };
        let new = live.replace(|current| Routes::build(table, &self.common, Some(current)))?;
        for (pool, _) in &table.pools {
            eprintln!("statico: generation {}: pool {pool}", new.generation());
        }
        Ok(new.generation())
    }

    /// Whether the catalog can be rebuilt (SIGHUP): a site can, one response cannot.
    pub fn rebuilds(&self) -> bool {
        matches!(self.kind, Kind::Site(_))
    }

    /// SIGHUP: rebuilds the site on a thread of its own and swaps it in when it is built; a rebuild
    /// that fails keeps the site in force. Says what happened when it is done.
    pub fn rebuild(&self, plan: &CatalogPlan) {
        let (Kind::Site(handle), Some(opts)) = (&self.kind, plan.site.clone()) else {
            return;
        };
        let handle = handle.clone();
        std::thread::spawn(move || match site::build(&opts) {
            Ok(site) => {
                let stats = site.stats.clone();
                list_left_out(&opts, &site);
                handle.swap(site);
                crate::kernel::sys::release_free_memory(); // and the old site's, once its last request is out
                eprintln!("statico: SIGHUP: site rebuilt: {stats}");
            }
            Err(e) => eprintln!("statico: SIGHUP: kept the site in force: {e:#}"),
        });
    }
}

/// Says what the routes and `--echo-query` answer (the site says so itself).
fn announce(plan: &CatalogPlan) {
    for (pool, _) in &plan.table.pools {
        eprintln!("statico: pool {pool}");
    }
    for (i, r) in plan.table.routes.iter().enumerate() {
        eprintln!("statico: route {}: {}", i + 1, route::describe(r));
    }
    for phase in &plan.table.phases {
        eprintln!("statico: phase {}", phase.describe());
    }
    for pause in &plan.pauses {
        eprintln!("statico: pause {}", pause.describe());
    }
    if let Some(limits) = &plan.echo {
        eprintln!(
            "statico: --echo-query: Fortio's ?status= ?delay= ?size= ?close= ?header= on any path (up to {} and {} bytes)",
            humantime::format_duration(limits.max_delay),
            limits.max_size
        );
    }
}

/// `--root`: the site, built now; what it holds is printed at start-up, with what this platform
/// cannot do for it.
fn build_site(opts: &SiteOptions) -> Result<Site> {
    crate::kernel::sys::prefer_own_pages_for_large_buffers();
    // Read with the privileges the site is served with (see `site::walk`).
    let site = crate::kernel::privilege::read_as(opts.reader.as_deref(), || site::build(opts))?;
    crate::kernel::sys::release_free_memory();
    eprintln!("statico: site {}: {}", opts.root.display(), site.stats);
    list_left_out(opts, &site);
    if !cfg!(target_os = "linux") {
        eprintln!("statico: site: this build has no zstd compressor (Linux builds only): zstd is served from precompressed .zst files only");
    }
    if !crate::shutdown::CAN_RELOAD {
        eprintln!("statico: site: there is no SIGHUP here to rebuild the site: restart statico to serve changes");
    }
    Ok(site)
}

/// `-v`: every path the walk left out, with why.
fn list_left_out(opts: &SiteOptions, site: &Site) {
    if opts.list_left_out {
        for (path, why) in &site.stats.left_out.paths {
            eprintln!(
                "statico: site: left out {}: {}",
                path.display(),
                why.describe()
            );
        }
    }
}

/// One worker's copy of the catalog (or one QUIC thread's): its own pre-built answers, whose `Date`
/// it keeps live ([`Local::set_date`]), and the site in force, taken again only when a rebuild has
/// been swapped in ([`Local::refresh`]) — the same for every runtime.
#[derive(Debug)]
pub struct Local {
    /// HTTP/1.1's bytes (a worker's; a QUIC thread needs none).
    response: Option<Response>,
    stream: Option<StreamAnswer>,
    date: [u8; DATE_LEN],
    site: Option<(Arc<SiteHandle>, Arc<Site>)>,
    hold: Hold,
    /// Whether some answer may be held: the catalog's own, or the routes table's.
    paced: bool,
    /// The routes table in force, and this thread's copy of it (its heads with this thread's
    /// `Date`) with this thread's slot in its ground truth.
    live: Option<Arc<LiveRoutes>>,
    routes: Option<Routes>,
    recorder: Option<Recorder>,
    /// The table before, kept for a request chosen from it and answered after a swap.
    previous: Option<(Routes, Recorder)>,
    echo: Option<echo::Echo>,
    /// The routes' draws, this thread's own.
    draw: RefCell<Draw>,
    /// This thread's slot in the ground truth.
    slot: usize,
    catalog_paced: bool,
    /// The server's pauses, when it has them.
    pauses: Option<Pauses>,
    grpc: Option<grpc::Grpc>,
}

impl Local {
    /// Worker `worker`'s copy: HTTP/1.1 answers, and HTTP/2's when the catalog has them.
    pub fn for_worker(catalog: &Catalog, worker: usize) -> Local {
        Local {
            response: Some(catalog.response.clone()),
            ..Local::for_streams(catalog, worker)
        }
    }

    /// A copy for worker `worker`'s HTTP/3 thread: stream answers only.
    pub fn for_quic(catalog: &Catalog, worker: usize) -> Local {
        Local::for_streams(catalog, catalog.workers + worker)
    }

    /// Stream answers only, recording the ground truth in `slot`.
    fn for_streams(catalog: &Catalog, slot: usize) -> Local {
        let mut local = Local {
            response: None,
            stream: catalog.stream.clone(),
            date: *catalog.response.date(),
            site: match &catalog.kind {
                Kind::One => None,
                Kind::Site(handle) => Some((handle.clone(), handle.load())),
            },
            hold: catalog.hold,
            paced: catalog.paced,
            live: catalog.routes.clone(),
            routes: None,
            recorder: None,
            previous: None,
            echo: catalog.echo.clone(),
            draw: RefCell::new(route::generator(catalog.seed, slot)),
            slot,
            catalog_paced: catalog.paced,
            pauses: catalog.common.pauses.clone(),
            grpc: catalog.grpc.clone(),
        };
        if let Some(live) = catalog.routes.as_ref() {
            local.take_routes(&live.load());
        }
        local
    }

    /// Makes `routes` this thread's table (the one it held becomes the previous).
    fn take_routes(&mut self, routes: &Routes) {
        let mut mine = routes.clone();
        mine.set_date(&self.date);
        let recorder = Recorder::new(mine.truth().clone(), self.slot);
        self.paced = self.catalog_paced || mine.paces();
        let before = self.routes.replace(mine);
        self.previous = before.zip(self.recorder.replace(recorder));
    }

    /// The second changed: every pre-built answer carries the new `Date`.
    pub fn set_date(&mut self, date: &[u8; DATE_LEN]) {
        self.date = *date;
        if let Some(r) = self.response.as_mut() {
            r.set_date(date);
        }
        if let Some(s) = self.stream.as_mut() {
            s.set_date(date);
        }
        if let Some(r) = self.routes.as_mut() {
            r.set_date(date);
        }
    }

    /// Takes the site and the routes table in force if either was swapped since (a relaxed load
    /// each).
    pub fn refresh(&mut self) {
        if let Some((handle, mine)) = self.site.as_mut() {
            handle.refresh(mine);
        }
        if let (Some(live), Some(mine)) = (&self.live, &self.routes) {
            if live.generation() != mine.generation() {
                let routes = live.load();
                self.take_routes(&routes);
            }
        }
    }

    /// What HTTP/1.1 connections read, borrowed for one batch. Paced when an answer may be held,
    /// or while a whole-server pause is in force: then each answer waits for its end on its own,
    /// and outside one a pipelined batch goes out at once (with pauses possible, one atomic load
    /// and a clock read per batch; without, an empty `Option`).
    pub fn view(&self) -> View<'_> {
        View {
            response: self
                .response
                .as_ref()
                .expect("a worker's catalog holds the HTTP/1.1 answers"),
            kinds: self.kinds(),
            recorder: self.recorder.as_ref(),
            previous: self.previous.as_ref(),
            hold: self.hold,
            paced: self.paced || self.pauses.as_ref().and_then(Pauses::wait_now).is_some(),
            pauses: self.pauses.as_ref(),
            now: None,
        }
    }

    /// What chooses an answer, borrowed (see [`Kinds::choose`]). A live table that matches
    /// nothing is left out, so that `--admin` without routes costs a request nothing.
    fn kinds(&self) -> Kinds<'_> {
        Kinds {
            site: self.site.as_ref().map(|(_, site)| &**site),
            routes: self.routes.as_ref().filter(|r| !r.matches_nothing()),
            echo: self.echo.as_ref(),
            draw: &self.draw,
            grpc: self.grpc.is_some(),
        }
    }

    /// The answer to an HTTP/2 or HTTP/3 request, with this second's `Date` and its hold; a route's
    /// answer carries where its ground truth is recorded. A gRPC call on HTTP/2 is a gRPC route's
    /// if one matches; else, with `--grpc`, the gRPC services' ([`grpc`]), never another route's.
    pub fn stream_answer<B>(&self, request: &http::Request<B>) -> StreamAnswer {
        let grpc_call = is_grpc_call(request);
        let answer = match grpc_call.then(|| self.call_answer(request)).flatten() {
            Some(answer) => answer,
            None => match self.grpc.as_ref().filter(|_| grpc_call) {
                Some(grpc) => {
                    let health = grpc::HealthSource::new(self.live.clone());
                    let truth = (self.routes.as_ref().zip(self.recorder.as_ref()))
                        .and_then(|(routes, recorder)| routes.builtin_truth(recorder));
                    let path = request.uri().path();
                    let mut answer = grpc.answer(path, request.headers(), health, truth);
                    answer.set_date(&self.date);
                    return answer;
                }
                None => self.chosen_answer(request),
            },
        };
        StreamAnswer {
            pauses: self.pauses.clone(),
            ..answer
        }
    }

    /// The answer of the gRPC route the gRPC call `request` matches, if one does: its draw, or
    /// `DEADLINE_EXCEEDED` for one held past the call's `grpc-timeout` (a malformed one is
    /// `INTERNAL`, as the built-in services answer it, counted so).
    fn call_answer<B>(&self, request: &http::Request<B>) -> Option<StreamAnswer> {
        // The built-in `Watch` follows the health routes rather than being answered by one.
        if self.grpc.is_some() && request.uri().path() == grpc::HEALTH_METHODS[1] {
            return None;
        }
        let routes = self.routes.as_ref().filter(|r| !r.matches_nothing())?;
        let chosen =
            routes.choose_call(&Request::from_http(request), &mut self.draw.borrow_mut())?;
        let grpc_timeout = request.headers().get("grpc-timeout");
        let choice = match grpc_timeout
            .map(|t| grpc::timeout(t.as_bytes()))
            .transpose()
        {
            Ok(Some(deadline)) => routes.within(chosen, deadline),
            Ok(None) => chosen,
            Err(status) => {
                let mut answer = grpc::trailers_only(&status);
                answer.set_date(&self.date);
                answer.hold.truth = routes.malformed_timeout(&chosen);
                answer.recorder = self.recorder.clone();
                return Some(answer);
            }
        };
        Some(StreamAnswer {
            recorder: self.recorder.clone(),
            ..routes.stream_answer(&choice, self.recorder.as_ref())
        })
    }

    /// The answer `request` gets, as its kind built it.
    fn chosen_answer<B>(&self, request: &http::Request<B>) -> StreamAnswer {
        let kinds = self.kinds();
        match (kinds.choose(|| Request::from_http(request)), kinds) {
            (
                Choice::Echo(c),
                Kinds {
                    echo: Some(echo), ..
                },
            ) => echo.stream_answer(&c, &self.date),
            (
                Choice::Route(c),
                Kinds {
                    routes: Some(routes),
                    ..
                },
            ) => StreamAnswer {
                recorder: self.recorder.clone(),
                ..routes.stream_answer(&c, self.recorder.as_ref())
            },
            (
                Choice::Asked(a),
                Kinds {
                    routes: Some(routes),
                    ..
                },
            ) => a.stream_answer(StreamAnswer {
                recorder: self.recorder.clone(),
                ..routes.stream_answer(&a.choice, self.recorder.as_ref())
            }),
            (
                Choice::Site(c),
                Kinds {
                    site: Some(site), ..
                },
            ) => StreamAnswer {
                hold: self.hold,
                ..StreamAnswer::from_parts(site.parts(c), &self.date)
            },
            (Choice::GrpcOverHttp1, _) => grpc::unsupported(&self.date),
            _ => StreamAnswer {
                hold: self.hold,
                ..(self.stream.clone()).expect("--http2 and --http3 build the stream answer")
            },
        }
    }
}

/// Whether `request` is a gRPC call on HTTP/2 (gRPC over HTTP/3 is not served: such a request
/// gets 415, as over HTTP/1.1).
fn is_grpc_call<B>(request: &http::Request<B>) -> bool {
    let content_type = request.headers().get(http::header::CONTENT_TYPE);
    request.version() == http::Version::HTTP_2
        && content_type.is_some_and(|c| grpc::is_grpc(c.as_bytes()))
}

/// The kinds that choose an answer, in the order they are asked: `--echo-query`'s arguments, then
/// the routes, then the site or the single response — for HTTP/1.1 ([`View::choose`]) and for
/// HTTP/2 and HTTP/3 ([`Local::stream_answer`]) alike.
#[derive(Clone, Copy, Debug)]
struct Kinds<'a> {
    site: Option<&'a Site>,
    routes: Option<&'a Routes>,
    echo: Option<&'a echo::Echo>,
    draw: &'a RefCell<Draw>,
    /// `--grpc`: a gRPC call over HTTP/1.1 gets 415.
    grpc: bool,
}

impl Kinds<'_> {
    /// The answer to a request whose view `request` builds, only if some kind looks at requests.
    #[inline]
    fn choose<'r>(&self, request: impl FnOnce() -> Request<'r>) -> Choice {
        if self.routes.is_none() && self.site.is_none() && self.echo.is_none() && !self.grpc {
            return Choice::One;
        }
        let request = request();
        if self.grpc && request.content_type.is_some_and(grpc::is_grpc) {
            return Choice::GrpcOverHttp1;
        }
        if let Some(echo) = self.echo {
            if let Some(c) = echo.choose(request.target, &mut self.draw.borrow_mut()) {
                return Choice::Echo(Box::new(c));
            }
        }
        if let Some(routes) = self.routes {
            if let Some(choice) = routes.choose(&request, &mut self.draw.borrow_mut()) {
                return match routes.not_served(&choice, &request) {
                    Some(refused) => Choice::Asked(Box::new(refused)),
                    None => Choice::Route(choice),
                };
            }
        }
        match self.site {
            None => Choice::One,
            Some(site) => Choice::Site(site.choose(&request)),
        }
    }
}

/// A worker's catalog as one batch of HTTP/1.1 requests sees it (see [`Local::view`]).
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    response: &'a Response,
    kinds: Kinds<'a>,
    recorder: Option<&'a Recorder>,
    /// The routes table before the one in force, with its recorder.
    previous: Option<&'a (Routes, Recorder)>,
    hold: Hold,
    paced: bool,
    /// The server's pauses, when it has them.
    pauses: Option<&'a Pauses>,
    /// When the requests of this batch are complete (the runtime's clock): when a held answer's
    /// ticket is taken. `None`: the system clock's now.
    now: Option<std::time::Instant>,
}

impl<'a> View<'a> {
    /// The same view for a batch whose requests complete at `now`.
    #[inline]
    pub fn at(self, now: std::time::Instant) -> View<'a> {
        View {
            now: Some(now),
            ..self
        }
    }

    /// The answer to a request whose view `request` builds: called only by a kind that looks at the
    /// request, so the single response parses nothing.
    #[inline]
    pub fn choose<'r>(&self, request: impl FnOnce() -> Request<'r>) -> Choice {
        self.kinds.choose(request)
    }

    /// Whether `choice` is made from its request's body, which the connection keeps for it
    /// ([`openai::keep_body`]) and hands to [`View::asked`] once complete.
    #[inline]
    pub fn wants_body(&self, choice: &Choice) -> bool {
        matches!(choice, Choice::Route(c) if c.asks.is_some())
    }

    /// The answer `choice` gives once its request's body is `body` (see [`View::wants_body`]).
    pub fn asked(&self, choice: Choice, body: &[u8]) -> Choice {
        match choice {
            Choice::Route(c) if c.asks.is_some() => match self.routes_of(c.generation) {
                Some((routes, _)) => {
                    let now = self.now.unwrap_or_else(std::time::Instant::now);
                    Choice::Asked(Box::new(routes.asked(c, body, now)))
                }
                None => Choice::Route(c),
            },
            other => other,
        }
    }

    /// Whether some answer may be held, or a whole-server pause is in force: HTTP/1.1 then
    /// answers one request at a time.
    #[inline]
    pub fn paced(&self) -> bool {
        self.paced
    }

    /// Paused at `now`: how long an answer due then waits before it is asked again (see
    /// [`Pauses::wait`]); `None` when not paused, or the server has no pauses.
    #[inline]
    pub fn pause_wait(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.pauses?.wait(now)
    }

    /// The server's pauses, for a delivery to hold its head by ([`delivery::Delivery::paused_by`]).
    pub fn pauses(&self) -> Option<Pauses> {
        self.pauses.cloned()
    }

    /// Records the ground truth of an answer that was held (see [`Recorder::record`]).
    pub fn record(&self, key: TruthKey, drawn: std::time::Duration, held: std::time::Duration) {
        if let Some((_, recorder)) = self.routes_of(key.generation) {
            recorder.record(key, drawn, held);
        }
    }

    /// The routes table numbered `generation` (the one in force, or the one before), with its
    /// recorder.
    fn routes_of(&self, generation: u32) -> Option<(&'a Routes, &'a Recorder)> {
        match (self.kinds.routes, self.recorder) {
            (Some(r), Some(rec)) if r.generation() == generation => Some((r, rec)),
            _ => (self.previous)
                .filter(|(r, _)| r.generation() == generation)
                .map(|(r, rec)| (r, rec)),
        }
    }

    /// Appends the answer to `choice` as HTTP/1.1 bytes, in the connection's `framing`, without the
    /// body for HEAD. Says where the body starts in `out` when it may be held apart from the head
    /// (`--body-delay`), and how the answer is delivered. An answer delivered at once has its ground
    /// truth recorded here; a held one's is recorded by whoever holds it ([`View::record`]).
    #[inline]
    pub fn write(
        &self,
        choice: Choice,
        framing: Framing,
        head_only: bool,
        out: &mut impl Sink,
    ) -> Written {
        let hold = self.hold;
        let written = |body_at, hold| Written {
            body_at,
            hold,
            ..Written::default()
        };
        let routes = match &choice {
            Choice::Route(c) => self.routes_of(c.generation),
            Choice::Asked(a) => self.routes_of(a.choice.generation),
            _ => None,
        };
        match (choice, self.kinds.site, routes) {
            (Choice::Route(choice), _, Some((routes, recorder))) => {
                self.write_route(routes, recorder, choice, None, framing, head_only, out)
            }
            (Choice::Asked(a), _, Some((routes, recorder))) => self.write_route(
                routes,
                recorder,
                a.choice,
                Some(&a),
                framing,
                head_only,
                out,
            ),
            (Choice::Echo(c), _, _) => {
                let echo = (self.kinds.echo).expect("an echo choice comes from --echo-query");
                let body_at = echo.write(&c, framing, head_only, self.response.date(), out);
                Written {
                    close: c.close,
                    ..written(body_at, c.hold)
                }
            }
            (Choice::Site(choice), Some(site), _) => {
                site.write(choice, framing, self.response.date(), head_only, out);
                written(None, hold)
            }
            (Choice::GrpcOverHttp1, _, _) => {
                out.extend_from_slice(self.error(ErrorStatus::UnsupportedMediaType));
                Written {
                    close: true,
                    ..written(None, Hold::default())
                }
            }
            _ if head_only => {
                out.extend_from_slice(self.response.head(framing));
                written(None, hold)
            }
            _ => {
                let body_at = out.unsent() + self.response.head(framing).len();
                out.extend_from_slice(self.response.full(framing));
                written(Some(body_at), hold)
            }
        }
    }

    /// A route's answer (`asked`: made from its request's body). Paced, a held answer takes its
    /// ticket now (its request is complete): shed at once, its shed answer is written instead;
    /// queued with a timeout, the shed answer is written behind it for the connection to pick.
    /// Not paced, its truth is recorded here.
    #[allow(clippy::too_many_arguments)]
    fn write_route(
        &self,
        routes: &Routes,
        recorder: &Recorder,
        choice: RouteChoice,
        asked: Option<&route::asked::Asked>,
        framing: Framing,
        head_only: bool,
        out: &mut impl Sink,
    ) -> Written {
        let ticket = match self.paced && !asked.is_some_and(|a| a.at_once) {
            true => {
                let now = self.now.unwrap_or_else(std::time::Instant::now);
                let stream = asked.map_or(choice.stream.is_some(), |a| a.streamed());
                routes.admit(&choice, recorder, (now, stream && !head_only))
            }
            false => None,
        };
        let fate = ticket.as_ref().map(model::load::Ticket::fate);
        let shed = ticket.as_ref().and_then(model::load::Ticket::shed_as);
        let (answer, asked) = match (fate, shed) {
            (Some(model::pool::Fate::Shed { .. }), Some(shed)) => {
                (routes.shed_choice(&choice, shed), None)
            }
            _ => (choice, asked),
        };
        let date = self.response.date();
        let body = match asked {
            Some(a) => a.write(framing, head_only, date, out, Some(recorder)),
            None => routes.write(&answer, framing, head_only, out, Some(recorder)),
        };
        let shed_at = match (fate, shed) {
            (Some(model::pool::Fate::Waiting { .. }), Some(shed)) if routes.sheds_late(&choice) => {
                let at = out.unsent();
                let shed = routes.shed_choice(&choice, shed);
                routes.write(&shed, framing, head_only, out, None);
                Some(at)
            }
            _ => None,
        };
        // A stream to an HTTP/1.0 client is not chunked: the connection's close ends it.
        let streamed = asked.map_or_else(|| routes.streamed(&answer), |a| a.streamed());
        let close = streamed && framing == Framing::KeepAlive10;
        if let (Some(key), false) = (choice.hold.truth, self.paced) {
            recorder.record(key, std::time::Duration::ZERO, std::time::Duration::ZERO);
        }
        Written {
            body_at: body.body_at,
            hold: answer.hold,
            ticket,
            shed_at,
            close,
            events: body.events,
        }
    }

    /// The error answer for a request that cannot be answered (always `Connection: close`).
    pub fn error(&self, status: ErrorStatus) -> &'a [u8] {
        self.response.error(status)
    }
}
