//! The command line: Statico's flags, as clap derive, plus statico's own limits and timeouts.
//!
//! Every value is checked here, while parsing, so that a bad one is reported by clap as one line naming
//! the flag, with exit code 2, before anything starts: durations (`100ms`, `1s`, `500us`), sizes (`16k`,
//! `1m`), header syntax, and `-b @file`, which is read here, once.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{ArgAction, Parser};

use crate::catalog::model::units::parse_size;
use crate::catalog::response::ResponseSpec;
use crate::catalog::site::walk::{Dotfiles, Symlinks};
use crate::kernel::steering::SteeringKind;
use crate::observe::meter::MeterFormat;
use crate::proto::http1::parser::Limits;
use crate::runtime::RuntimeKind;

/// statico answers every HTTP request with one pre-built response, as fast as the machine allows.
///
/// Workers are threads pinned one per CPU, each with its own listener on the same port. The response
/// (status, headers, body, a live Date) is encoded once at start-up.
#[derive(Parser, Debug, Clone)]
#[command(name = "statico", version, about, long_about = None, after_help = EXAMPLES)]
#[command(group(clap::ArgGroup::new("delay_askers").args(["echo_query", "grpc"]).multiple(true)))]
pub struct Cli {
    /// Number of worker threads, each pinned to one CPU [default: CPUs this process may run on]
    #[arg(short, long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub threads: Option<u16>,

    /// TCP port to listen on
    #[arg(short, long, default_value_t = 8080)]
    pub port: u16,

    /// Address to listen on (IPv4 or IPv6, bracketed or not)
    #[arg(short, long, default_value = "0.0.0.0", value_parser = parse_address)]
    pub address: IpAddr,

    /// HTTP status code of the response
    #[arg(short, long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(100..=999))]
    pub status: u16,

    /// Response body; `@path` loads the file once at start-up (`@@text` for a literal leading @)
    #[arg(short, long, value_parser = parse_body, value_name = "BODY|@FILE")]
    pub body: Option<Body>,

    /// Response header "Name: Value" (repeatable); a Server header replaces statico's
    #[arg(short = 'H', long = "header", value_parser = parse_header, value_name = "NAME: VALUE")]
    pub headers: Vec<(String, String)>,

    /// Delay before sending each response (e.g. 100ms, 1s, 500us)
    #[arg(short, long, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,

    /// Delay between the head and the body of each response (sets TCP_NODELAY on connections)
    #[arg(long, value_parser = humantime::parse_duration)]
    pub body_delay: Option<Duration>,

    /// A route: '[METHODS] PATH key=value…' answers the requests it matches with its own status mix,
    /// body, headers, delay distribution and faults (repeatable, first match wins; unmatched requests
    /// get the default answer). Keys: status=200|503:10%,429:5%  body=TEXT|@FILE  size=64k
    /// header=Name:Value  delay=DIST  body-delay=DIST  fault=reset:0.1%,close:0.5%,stall:0.01%,truncate:0.1%
    /// rate=1m  pool=NAME (served by that --pool), or capacity=C queue=Q queue-timeout=DUR shed=…
    /// (a pool of its own). A stream of events instead of a body: stream=sse|ndjson|chunks
    /// events=N|uniform:LO:HI|lognormal:P50:P99  first=DIST  gap=DIST  event=TEXT ({i}: the index)
    /// | event-size=SIZE. An OpenAI-compatible backend on 'PREFIX/*': openai=on model=NAME (repeatable)
    /// tokens=N|DIST-of-counts first=DIST gap=DIST prefill=DUR (per prompt token) context=N. A gRPC
    /// route on a method path '/pkg.Svc/Method' (or '/pkg.Svc/*') takes gRPC calls only:
    /// grpc-status=UNAVAILABLE:5%,RESOURCE_EXHAUSTED:1% grpc-message=TEXT (not status=); events= first=
    /// gap= make it server-streaming (each message its reply); health=SERVING|NOT_SERVING on
    /// '/grpc.health.v1.Health/*' is what the health service reports. DIST: 10ms · uniform:5ms:15ms · exp:10ms · normal:10ms:2ms ·
    /// lognormal:P50:P99 · pareto:SCALE:SHAPE · pct:50=5ms,90=20ms,99=100ms,100=1s ·
    /// inflight:BASE:PER (BASE + PER × this route's requests in flight, itself included: in delay=,
    /// or a stream's first= and gap=, each drawn when due; a stream is in flight until it ends)
    #[arg(long = "route", value_name = "SPEC", value_parser = parse_route)]
    pub routes: Vec<AsWritten<crate::catalog::route::spec::RouteSpec>>,

    /// A pool: 'NAME capacity=C [queue=Q] [queue-timeout=DUR] [shed=503|429|reset|close]' — C servers
    /// for the whole process that its routes' requests (pool=NAME) queue for, FIFO, each held for its
    /// drawn delay; past Q waiting (or after waiting DUR) a request is shed (default 503). Repeatable
    #[arg(long = "pool", value_name = "SPEC", value_parser = parse_pool)]
    pub pools: Vec<AsWritten<crate::catalog::route::pool_spec::PoolSpec>>,

    /// A phase: 'at=DUR for=DUR [every=DUR] [name=NAME] PATH key=value…' — from AT after start-up,
    /// for FOR (again every EVERY), the routes written with path PATH answer with these route keys
    /// replacing their own (status, delay, fault, capacity, …). Repeatable; one route's phases may
    /// not overlap. Ground truth is kept per phase
    #[arg(long = "phase", value_name = "SPEC", value_parser = parse_phase)]
    pub phases: Vec<String>,

    /// A whole-server pause: 'at=DUR for=DUR [every=DUR]' — from AT after start-up, for FOR (again
    /// every EVERY), nothing is answered; every request in flight or arriving is answered when it
    /// ends, and a stream's events due in it go then (connections are still accepted). Repeatable
    #[arg(long = "pause", value_name = "SPEC", value_parser = parse_pause)]
    pub pauses: Vec<crate::catalog::model::schedule::Window>,

    /// The control API on a listener of its own: GET/PUT /routes, POST /pause?for=DUR, POST /resume,
    /// GET /ground-truth, POST /ground-truth/reset. Loopback only, unless --admin-token is given
    #[arg(long, value_name = "ADDR:PORT")]
    pub admin: Option<SocketAddr>,

    /// A file holding the bearer token every control API request must carry (Authorization:
    /// Bearer TOKEN); required for --admin on an address other than loopback
    #[arg(long, value_name = "FILE", requires = "admin")]
    pub admin_token: Option<PathBuf>,

    /// Routes from a TOML file: one [[route]] table per route, with the keys of --route (path,
    /// methods, status, body, size, header, delay, body-delay, fault, rate, pool, capacity, queue,
    /// queue-timeout, shed, name), and [[pool]] tables (name, capacity, queue, queue-timeout, shed);
    /// after the --route ones; and [[phase]] tables (path, at, for, every, name, route keys).
    /// SIGHUP reads it again
    #[arg(long = "routes", value_name = "FILE", value_parser = parse_routes_file)]
    pub routes_file: Option<RoutesFile>,

    /// Seed of the routes' random draws: the same seed gives the same outcomes in the same order
    /// (per worker) [default: from the clock]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Fortio-compatible answers asked for in the query, on any path: ?status=503:10,429:5
    /// ?delay=5ms:50,100ms:1 ?size=1024 ?close=true ?header=X-A:b (percentages without %)
    #[arg(long)]
    pub echo_query: bool,

    /// With --echo-query, the longest delay a query may ask for (longer gets 400); with --grpc, the
    /// longest a ping's delayNanos holds its reply
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "delay_askers")]
    pub max_delay: Duration,

    /// With --echo-query, the largest body a query may ask for (larger gets 400); this much memory
    /// is set aside for the bodies at start-up
    #[arg(long, default_value = "16m", value_parser = parse_size, value_name = "BYTES", requires = "echo_query")]
    pub max_size: u64,

    /// Static site: serve the files under DIR (responses built at start-up, rebuilt on SIGHUP)
    /// instead of one response
    #[arg(long, value_name = "DIR", conflicts_with_all = ["body", "status"])]
    pub root: Option<std::path::PathBuf>,

    /// Static site: the Cache-Control value of every file (e.g. 'public, max-age=60')
    #[arg(long, value_name = "VALUE", requires = "root")]
    pub cache_control: Option<String>,

    /// Static site: Cache-Control for the paths matching GLOB ('*' matches anything, '/' included),
    /// e.g. '*.css=public, max-age=31536000'; repeatable, the first match wins over --cache-control
    #[arg(long = "cache-control-for", value_name = "GLOB=VALUE", requires = "root", value_parser = parse_cache_rule)]
    pub cache_control_for: Vec<(String, String)>,

    /// Static site: answer unknown paths with this file (relative to --root) and 200, for
    /// single-page apps
    #[arg(long, value_name = "FILE", requires = "root")]
    pub spa_fallback: Option<String>,

    /// Static site: most bytes kept in memory (every stored variant, identical bodies once)
    #[arg(long, default_value = "1g", value_parser = parse_size, value_name = "BYTES")]
    pub max_site_size: u64,

    /// Static site: follow symlinks wherever they lead (read with the privileges the site is served
    /// with), or only those that stay inside --root
    #[arg(long, value_enum, default_value = "follow", requires = "root")]
    pub symlinks: Symlinks,

    /// Static site: hide names that start with a dot (/.well-known/ is served either way) or serve them
    #[arg(long, value_enum, default_value = "hide", requires = "root")]
    pub dotfiles: Dotfiles,

    /// HTTPS: PEM certificate chain; the port then serves TLS only (Linux builds, with --tls-key)
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_self_signed"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// HTTPS: PEM private key (PKCS#8, SEC1 or PKCS#1) of --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// HTTPS with an ECDSA P-256 certificate for localhost, 127.0.0.1, ::1 and the listen address,
    /// made at start-up (its SHA-256 fingerprint is printed)
    #[arg(long)]
    pub tls_self_signed: bool,

    /// Also write cert.pem and key.pem into DIR, for curl --cacert (needs --tls-self-signed)
    #[arg(long, value_name = "DIR", requires = "tls_self_signed")]
    pub tls_self_signed_out: Option<std::path::PathBuf>,

    /// HTTPS: session tickets sent after each full TLS 1.3 handshake; 0 turns resumption off
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(0..=16))]
    pub tls_tickets: u16,

    /// HTTPS: oldest TLS version accepted
    #[arg(long, default_value = "1.2", value_parser = ["1.2", "1.3"])]
    pub tls_min: String,

    /// Print requests/s, responses/s and in/out Gbps every second
    #[arg(short, long)]
    pub meter: bool,

    /// Serve the counters in the Prometheus text format at http://ADDR:PORT/metrics, on a listener
    /// of their own (not the benchmark port)
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,

    /// Format of the meter lines
    #[arg(long, value_enum, default_value_t = MeterFormat::Text)]
    pub meter_format: MeterFormat,

    /// Print requests and responses: -v lines, -vv headers, -vvv bodies, -vvvv hexdumps
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,

    /// Runtime that moves the bytes: auto (io-uring where the kernel allows it, else tokio; the
    /// start-up line says why), tokio (alias tokio-local) or io-uring (Linux; aliases
    /// tokio-uring, monoio, glommio map to statico's own io_uring loop)
    #[arg(long, default_value = "auto", value_parser = PossibleValuesParser::new(RuntimeChoice::NAMES).map(|s| RuntimeChoice::from_name(&s)))]
    pub runtime: RuntimeChoice,

    /// The Statico original's spelling of --runtime io-uring, so its command lines run unchanged
    #[arg(long = "io-uring", conflicts_with = "runtime")]
    pub io_uring: bool,

    /// io_uring: submission queue entries per worker ring
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(16..=32768))]
    pub uring_entries: u32,

    /// io_uring: poll the submission queue from a kernel thread that sleeps after this many ms idle
    #[arg(long, value_name = "MS")]
    pub uring_sqpoll: Option<u32>,

    /// How connections reach workers: auto picks the best that works here and says why
    #[arg(long, value_enum, default_value_t = SteeringKind::Auto)]
    pub steering: SteeringKind,

    /// Also serve cleartext HTTP/2 on the same port (prior knowledge and `Upgrade: h2c`; `h2` by ALPN over TLS)
    #[arg(
        long,
        default_value_if("grpc", clap::builder::ArgPredicate::IsPresent, "true")
    )]
    pub http2: bool,

    /// Answer gRPC calls on HTTP/2 (turns on --http2) with Fortio's fgrpc.PingServer/Ping, the
    /// health service, grpc-go's interop TestService and server reflection; any other method
    /// UNIMPLEMENTED; gRPC over HTTP/1.1 gets 415
    #[arg(long)]
    pub grpc: bool,

    /// Also serve HTTP/3 over QUIC on the same port, over UDP (Linux builds; needs --tls-cert and
    /// --tls-key, or --tls-self-signed). HTTP/1.1 and HTTP/2 responses then carry Alt-Svc: h3=":PORT"
    #[arg(long)]
    pub http3: bool,

    /// HTTP/3: answer every Initial from an address not yet validated with a Retry (one more round
    /// trip per new connection). Without it, Retry is sent only by a worker with 256 handshakes in
    /// progress (an Initial flood)
    #[arg(long, requires = "http3")]
    pub quic_retry: bool,

    /// HTTP/2: most streams a client may have open at once on one connection
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,

    /// Count the server port's packets and bytes per CPU with an XDP program on this interface (e.g. lo);
    /// needs the eBPF rung
    #[arg(long, value_name = "IFACE")]
    pub xdp: Option<String>,

    /// Check as a start would (flags, files, runtime, steering and BPF, the ports), print what a start
    /// would use and advice about this node, then exit: 0 if it would start (like nginx -t)
    #[arg(long)]
    pub check: bool,

    /// Write the man page and the bash, zsh and fish completions into DIR, then exit (for packaging)
    #[arg(long, value_name = "DIR", hide = true)]
    pub generate_docs: Option<std::path::PathBuf>,

    /// After start-up (listeners bound, eBPF attached, maps pinned), switch to this user (from the system's
    /// user database, with its groups); capabilities are dropped always
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    /// SO_RCVBUF of the listening sockets, inherited by connections (bytes, k/m suffixes); also of
    /// the --http3 UDP sockets, which ask for 2m without it
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub receive_buffer_size: Option<u64>,

    /// SO_SNDBUF of the listening sockets, inherited by connections (bytes, k/m suffixes)
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    pub send_buffer_size: Option<u64>,

    /// Length of each listener's accept queue (the kernel caps it at net.core.somaxconn)
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(i32).range(1..))]
    pub listen_backlog: i32,

    /// Set TCP_NODELAY on every connection (on anyway with --route, --admin, --body-delay, --http2 or --grpc, whose answers may go in pieces)
    #[arg(long)]
    pub tcp_nodelay: bool,

    /// Largest request head (and chunked trailer section) accepted; larger gets 431
    #[arg(long, default_value = "16k", value_parser = parse_size, value_name = "BYTES")]
    pub max_head_size: u64,

    /// Largest request body accepted; larger gets 413
    #[arg(long, default_value = "16m", value_parser = parse_size, value_name = "BYTES")]
    pub max_body_size: u64,

    /// Time a client has to send a whole request head (from its first byte), and the longest pause
    /// inside a body; HTTP/2: the handshake, and each pause in a request body
    #[arg(long, default_value = "10s", value_parser = parse_timeout)]
    pub header_timeout: Duration,

    /// Time a keep-alive connection may wait for its next request, and output the client does not
    /// read may stall (then the connection is reset); HTTP/2: GOAWAY after this long with no stream
    /// open and no stream's output moving
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    pub idle_timeout: Duration,

    /// On SIGINT/SIGTERM, time given to in-flight responses before exiting
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
}

const EXAMPLES: &str = "\
Examples:
  statico                                   200 OK, empty body, on :8080
  statico -p 3000 -t 2 -b 'Hello, World!' -H 'Content-Type: text/plain'
  statico -s 404 -b @notfound.json -H 'Content-Type: application/json'
  statico -d 100ms -m                       every response 100 ms late, meter on
  statico -vv                               print request and response heads

Manual (docs/ in statico's source tree; README.md is its front page):
  every flag, its default; signals          docs/flags.md
  --route, --routes, --seed, --echo-query   docs/calibrated-target.md
  --phase, --pause, --admin, SIGHUP         docs/changing-a-run.md
  --root and the site's flags               docs/static-sites.md
  --http2, --http3, --tls-cert and TLS      docs/protocols.md
  --grpc                                    docs/protocols.md
  --runtime, --uring-entries                docs/architecture.md
  --steering, --xdp                         docs/steering.md
  -m, --metrics, --check                    docs/metrics.md
  the limits and timeouts                   docs/hostile-clients.md
  --user, systemd, the .deb, containers     docs/deployment.md";

/// The response body given with `-b`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body(pub Vec<u8>);

/// The runtime asked for, and the name it was asked by when that was an alias of another project's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeChoice {
    pub kind: RuntimeKind,
    /// Set for `tokio-uring`, `monoio`, `glommio`: statico prints that they map to its own loop.
    pub alias: Option<&'static str>,
    /// `auto`: `kind` is decided at start-up (see `runtime::resolve`).
    pub auto: bool,
}

impl RuntimeChoice {
    pub const NAMES: [&'static str; 7] = [
        "auto",
        "tokio",
        "tokio-local",
        "io-uring",
        "tokio-uring",
        "monoio",
        "glommio",
    ];

    fn from_name(name: &str) -> RuntimeChoice {
        let (kind, alias) = match name {
            "io-uring" => (RuntimeKind::IoUring, None),
            "tokio-uring" => (RuntimeKind::IoUring, Some("tokio-uring")),
            "monoio" => (RuntimeKind::IoUring, Some("monoio")),
            "glommio" => (RuntimeKind::IoUring, Some("glommio")),
            _ => (RuntimeKind::Tokio, None),
        };
        RuntimeChoice {
            kind,
            alias,
            auto: name == "auto",
        }
    }
}

/// An IP address; IPv6 may come bracketed (`[::1]`), as the Statico original accepts it.
fn parse_address(s: &str) -> Result<IpAddr, String> {
    let bare = s
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse().map_err(|_| {
        format!("{s:?} is not an IP address; give one such as 0.0.0.0, 127.0.0.1 or ::1")
    })
}

fn parse_body(s: &str) -> Result<Body, String> {
    if let Some(literal) = s.strip_prefix("@@") {
        return Ok(Body(format!("@{literal}").into_bytes()));
    }
    match s.strip_prefix('@') {
        Some(path) => std::fs::read(path)
            .map(Body)
            .map_err(|e| format!("cannot read body file {path:?}: {e}; check the path after @")),
        None => Ok(Body(s.as_bytes().to_vec())),
    }
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} has no colon; write it as \"Name: Value\""))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!(
            "{s:?} has an empty name; write it as \"Name: Value\""
        ));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

/// `--routes FILE`: the routes it holds, read and checked while parsing the flags.
#[derive(Clone, Debug)]
pub struct RoutesFile {
    pub path: PathBuf,
    pub table: crate::catalog::route::table::Table,
}

pub use crate::catalog::route::table::AsWritten;

fn parse_route(s: &str) -> Result<AsWritten<crate::catalog::route::spec::RouteSpec>, String> {
    crate::catalog::route::spec::parse_spec(s).map(|value| AsWritten {
        text: s.to_owned(),
        value,
    })
}

fn parse_pool(s: &str) -> Result<AsWritten<crate::catalog::route::pool_spec::PoolSpec>, String> {
    crate::catalog::route::pool_spec::parse_pool(s).map(|value| AsWritten {
        text: s.to_owned(),
        value,
    })
}

/// `--phase`: checked now, numbered (for its default name) when all are in ([`Cli::flag_table`]).
fn parse_phase(s: &str) -> Result<String, String> {
    crate::catalog::route::phase_spec::parse_phase(s, 0).map(|_| s.to_owned())
}

fn parse_pause(s: &str) -> Result<crate::catalog::model::schedule::Window, String> {
    let mut keys = crate::catalog::model::schedule::WindowKeys::default();
    for token in s.split_whitespace() {
        let known = match token.split_once('=') {
            Some((key, value)) => keys.set(key, value)?,
            None => false,
        };
        if !known {
            return Err(format!(
                "{token:?}: expected {}",
                crate::catalog::model::schedule::WINDOW_KEYS
            ));
        }
    }
    keys.finish()
}

fn parse_routes_file(s: &str) -> Result<RoutesFile, String> {
    let path = PathBuf::from(s);
    let table = crate::catalog::route::table::Table::of_file(&path)?;
    Ok(RoutesFile { path, table })
}

/// `GLOB=VALUE`: split at the first `=` (a glob has none; a Cache-Control value may).
fn parse_cache_rule(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((glob, value)) if !glob.is_empty() && !value.trim().is_empty() => {
            Ok((glob.to_string(), value.trim().to_string()))
        }
        _ => Err(format!(
            "{s:?} is not GLOB=VALUE (e.g. '*.css=public, max-age=31536000')"
        )),
    }
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be more than zero".into());
    }
    Ok(d)
}

impl Cli {
    pub fn response_spec(&self) -> ResponseSpec {
        ResponseSpec {
            status: self.status,
            headers: self.headers(),
            body: self.body.clone().map(|b| b.0).unwrap_or_default(),
        }
    }

    /// `--generate-docs DIR`: `statico.1`, `statico.bash`, `_statico` (zsh), `statico.fish`, from the clap
    /// definition, so they never drift from `--help`.
    pub fn generate_docs(dir: &std::path::Path) -> std::io::Result<()> {
        use clap::CommandFactory;
        std::fs::create_dir_all(dir)?;
        let mut man = Vec::new();
        clap_mangen::Man::new(Cli::command()).render(&mut man)?;
        std::fs::write(dir.join("statico.1"), man)?;
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            clap_complete::generate_to(shell, &mut Cli::command(), "statico", dir)?;
        }
        Ok(())
    }

    /// `--root` and its companions, if a static site is served.
    /// The routes table of the flags alone: `--pool`, `--route`, `--phase`.
    pub fn flag_table(&self) -> crate::catalog::route::table::Table {
        let phases: Vec<_> = (self.phases.iter().enumerate())
            .filter_map(|(i, text)| {
                let value = crate::catalog::route::phase_spec::parse_phase(text, i).ok()?;
                Some(AsWritten {
                    text: text.clone(),
                    value,
                })
            })
            .collect();
        crate::catalog::route::table::Table::of_flags(&self.pools, &self.routes, &phases)
    }

    /// The routes table at start-up: the flags', then `--routes FILE`'s.
    pub fn table(&self) -> crate::catalog::route::table::Table {
        let file = self.routes_file.iter().map(|f| f.table.clone());
        file.fold(self.flag_table(), crate::catalog::route::table::Table::and)
    }

    /// Whether any route is given (flags or file).
    pub fn has_routes(&self) -> bool {
        !self.routes.is_empty()
            || self
                .routes_file
                .as_ref()
                .is_some_and(|f| !f.table.routes.is_empty())
    }

    pub fn site_options(&self) -> Option<crate::catalog::site::SiteOptions> {
        Some(crate::catalog::site::SiteOptions {
            root: self.root.clone()?,
            cache_control: self.cache_control.clone(),
            cache_rules: self.cache_control_for.clone(),
            headers: self.headers(),
            spa_fallback: self.spa_fallback.clone(),
            max_size: self.max_site_size,
            symlinks: self.symlinks,
            dotfiles: self.dotfiles,
            reader: self.user.clone(),
            list_left_out: self.verbose > 0,
        })
    }

    /// The header fields every response carries besides statico's own: the user's `-H` fields and,
    /// with `--http3`, `Alt-Svc: h3=":PORT"` (unless the user gives an Alt-Svc), which tells HTTP/1.1
    /// and HTTP/2 clients where HTTP/3 is. The one place it is added: the pre-built response and the
    /// site's answers are both made from this list.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = self.headers.clone();
        let given = headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("alt-svc"));
        if self.http3 && !given {
            headers.push(("Alt-Svc".into(), format!("h3=\":{}\"", self.port)));
        }
        headers
    }

    /// The runtime asked for: `--runtime`, or `--io-uring`.
    pub fn runtime_choice(&self) -> RuntimeChoice {
        match self.io_uring {
            true => RuntimeChoice::from_name("io-uring"),
            false => self.runtime,
        }
    }

    /// Whether the port serves HTTPS.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() || self.tls_self_signed
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_head: usize::try_from(self.max_head_size).unwrap_or(usize::MAX),
            max_body: self.max_body_size,
        }
    }

    /// Worker count: `-t`, or the CPUs this process may run on.
    pub fn workers(&self) -> usize {
        self.threads.map(usize::from).unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("statico").chain(args.iter().copied()))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_originals_io_uring_flag_selects_io_uring_and_conflicts_with_runtime() {
        let c = parse(&["--io-uring", "--uring-entries", "256"]).unwrap();
        let choice = c.runtime_choice();
        assert_eq!((choice.kind, choice.auto), (RuntimeKind::IoUring, false));
        assert!(parse(&[]).unwrap().runtime_choice().auto);
        let e = parse(&["--io-uring", "--runtime", "tokio"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn addresses_parse_bare_and_bracketed_as_the_original_takes_them() {
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(parse(&["-a", "[::1]"]).unwrap().address, v6);
        assert_eq!(parse(&["-a", "::1"]).unwrap().address, v6);
        assert_eq!(
            parse(&["-a", "127.0.0.1"]).unwrap().address.to_string(),
            "127.0.0.1"
        );
        let e = parse(&["-a", "localhost"]).unwrap_err().to_string();
        assert!(
            e.contains("--address") && e.contains("not an IP address"),
            "{e}"
        );
    }

    #[test]
    fn statico_flags_parse() {
        let c = parse(&[
            "-t",
            "2",
            "-p",
            "9000",
            "-a",
            "127.0.0.1",
            "-s",
            "201",
            "-b",
            "hi",
            "-H",
            "X-A: 1",
            "--header",
            "X-B:2",
            "-d",
            "100ms",
            "--body-delay",
            "500us",
            "-m",
            "-vvv",
            "--runtime",
            "tokio-local",
            "--receive-buffer-size",
            "64k",
            "--send-buffer-size",
            "1m",
            "--listen-backlog",
            "128",
            "--tcp-nodelay",
        ])
        .unwrap();
        assert_eq!(c.workers(), 2);
        assert_eq!((c.port, c.status, c.verbose), (9000, 201, 3));
        assert_eq!(
            c.headers,
            vec![("X-A".into(), "1".into()), ("X-B".into(), "2".into())]
        );
        assert_eq!(c.delay, Some(Duration::from_millis(100)));
        assert_eq!(c.body_delay, Some(Duration::from_micros(500)));
        assert_eq!(c.receive_buffer_size, Some(65536));
        assert_eq!(c.runtime.kind, RuntimeKind::Tokio);
        assert!(!c.runtime.auto);
        assert!(parse(&[]).unwrap().runtime.auto, "auto is the default");
        assert_eq!(c.response_spec().body, b"hi");
        let c = parse(&[
            "--runtime",
            "monoio",
            "--uring-entries",
            "256",
            "--uring-sqpoll",
            "10",
        ])
        .unwrap();
        assert_eq!(
            (c.runtime.kind, c.runtime.alias),
            (RuntimeKind::IoUring, Some("monoio"))
        );
        assert_eq!((c.uring_entries, c.uring_sqpoll), (256, Some(10)));
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, flag) in [
            (&["-p", "http"][..], "--port"),
            (&["-s", "42"][..], "--status"),
            (&["-d", "soon"][..], "--delay"),
            (&["-H", "NoColon"][..], "--header"),
            (&["-b", "@/nonexistent/file"][..], "--body"),
            (&["--max-body-size", "12q"][..], "--max-body-size"),
            (&["--idle-timeout", "0s"][..], "--idle-timeout"),
            (&["--root", "/tmp", "-b", "x"][..], "--root"),
            (&["--root", "/tmp", "-s", "404"][..], "--status"),
            (&["--cache-control", "no-store"][..], "--root"),
            (&["--max-site-size", "lots"][..], "--max-site-size"),
            (
                &["--root", "/tmp", "--cache-control-for", "no-equals"][..],
                "--cache-control-for",
            ),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }

    #[test]
    fn http3_advertises_itself_with_alt_svc_once() {
        let c = parse(&["-p", "8443", "--tls-self-signed", "--http3", "-H", "X-A: 1"]).unwrap();
        let alt: Vec<_> = c
            .headers()
            .into_iter()
            .filter(|(n, _)| n == "Alt-Svc")
            .collect();
        assert_eq!(alt, vec![("Alt-Svc".into(), "h3=\":8443\"".into())]);
        assert_eq!(c.response_spec().headers.len(), 2);
        let own = parse(&["--http3", "-H", "alt-svc: clear"]).unwrap();
        assert_eq!(own.headers(), vec![("alt-svc".into(), "clear".into())]);
        assert!(parse(&["-H", "X-A: 1"]).unwrap().headers().len() == 1);
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        let body_size = |size: &str| parse(&["--max-body-size", size]).map(|c| c.max_body_size);
        assert_eq!(body_size("16k").unwrap(), 16384);
        assert_eq!(body_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(body_size("7").unwrap(), 7);
        let e = body_size("k").unwrap_err().to_string();
        assert!(e.contains("\"k\" is not a number"), "{e}");
    }

    #[test]
    fn body_file_is_read_and_double_at_escapes() {
        let path = std::env::temp_dir().join(format!("statico-cli-{}", std::process::id()));
        std::fs::write(&path, b"from file").unwrap();
        let c = parse(&["-b", &format!("@{}", path.display())]).unwrap();
        assert_eq!(c.response_spec().body, b"from file");
        std::fs::remove_file(path).unwrap();
        assert_eq!(parse(&["-b", "@@me"]).unwrap().response_spec().body, b"@me");
    }
}
