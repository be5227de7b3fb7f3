//! The start-up plan: the parsed flags turned, once, into one part per component.
//!
//! `cli` parses and checks each flag on its own; this step is where flags meet: which settings each
//! component takes from which flags (`--body-delay` also sets `TCP_NODELAY`, `--http3` adds `Alt-Svc`
//! to every answer and needs a certificate), and which combinations are refused (exit code 2). Each
//! component defines the part it takes — [`crate::catalog::CatalogPlan`], [`crate::conn::connection::Policy`],
//! [`crate::runtime::RuntimePlan`], [`crate::kernel::steering::SteeringPlan`], the HTTP/2 and HTTP/3 settings, the TLS
//! options — and receives only that part; only `main`, `server`, `check` and this module see
//! [`Cli`]. Nothing here does I/O: the plan is data, and `server` starts the components from it in
//! order.

use std::net::SocketAddr;

use anyhow::{bail, Result};

use crate::cli::Cli;

/// Everything a start needs, decided from the flags.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `--check`: every start-up step runs, then statico says what it would serve, and exits.
    pub check: bool,
    /// Where TCP (and with `--http3`, UDP) listens; port 0 with `--http3` is chosen at start-up.
    pub address: SocketAddr,
    pub workers: usize,
    pub runtime: crate::runtime::RuntimePlan,
    pub listen: crate::kernel::steering::SteeringPlan,
    pub policy: crate::conn::connection::Policy,
    pub catalog: crate::catalog::CatalogPlan,
    pub http2: Option<crate::proto::http2::H2Settings>,
    pub tls: Option<crate::conn::layer::TlsOptions>,
    pub http3: Option<Http3>,
    pub observe: Observe,
    /// `--user`: who the workers run as, once everything privileged is done.
    pub user: Option<String>,
    /// `--admin`, `--admin-token`: the control API.
    pub admin: Option<SocketAddr>,
    /// The token read from `--admin-token FILE` (checked with `--admin` before anything starts).
    pub admin_token: Option<String>,
    /// What SIGHUP and the control API rebuild the routes from.
    pub sources: crate::control::Sources,
}

/// HTTP/3's options (Linux builds; elsewhere `--http3` is refused while planning).
#[cfg(target_os = "linux")]
pub type Http3 = crate::proto::http3::Http3Options;
#[cfg(not(target_os = "linux"))]
pub type Http3 = std::convert::Infallible;

/// What a user watches: the meter, the metrics page.
#[derive(Clone, Copy, Debug)]
pub struct Observe {
    /// `-m`, in `--meter-format`.
    pub meter: Option<crate::observe::meter::MeterFormat>,
    /// `--metrics ADDR:PORT`.
    pub metrics: Option<SocketAddr>,
}

impl Plan {
    /// The plan the flags describe, or why they cannot work together (exit code 2).
    pub fn from_cli(cli: &Cli) -> Result<Plan> {
        refuse_what_this_build_lacks(cli)?;
        Ok(Plan {
            check: cli.check,
            address: SocketAddr::new(cli.address, cli.port),
            workers: cli.workers(),
            runtime: runtime(cli),
            listen: listen(cli),
            policy: policy(cli),
            catalog: catalog(cli),
            http2: http2(cli)?,
            tls: tls(cli),
            http3: http3(cli),
            observe: Observe {
                meter: cli.meter.then_some(cli.meter_format),
                metrics: cli.metrics,
            },
            user: cli.user.clone(),
            admin: cli.admin,
            admin_token: crate::control::check(cli.admin, cli.admin_token.as_deref())?,
            sources: crate::control::Sources {
                flags: cli.flag_table(),
                file: cli.routes_file.as_ref().map(|f| f.path.clone()),
            },
        })
    }

    /// Whether the port serves HTTPS.
    pub fn https(&self) -> bool {
        self.tls.is_some()
    }

    /// The start-up lines' note that HTTP/3 is served too (empty without `--http3`).
    pub fn h3_note(&self, local_addr: SocketAddr) -> String {
        match self.http3 {
            Some(_) => format!(" and h3 on udp/{}", local_addr.port()),
            None => String::new(),
        }
    }
}

/// `--http3` and `--tls-*` need a Linux build; `--http3` needs a certificate.
pub fn refuse_what_this_build_lacks(cli: &Cli) -> Result<()> {
    if cli.http3 && !cfg!(target_os = "linux") {
        bail!("--http3 needs a Linux build of statico (this one has no QUIC)");
    }
    if cli.http3 && !cli.tls() {
        bail!("--http3 needs a TLS certificate: add --tls-self-signed, or --tls-cert FILE --tls-key FILE");
    }
    if cli.tls() && !cfg!(target_os = "linux") {
        bail!("--tls-* needs a Linux build of statico (this one has no TLS)");
    }
    Ok(())
}

fn runtime(cli: &Cli) -> crate::runtime::RuntimePlan {
    let choice = cli.runtime_choice();
    crate::runtime::RuntimePlan {
        kind: choice.kind,
        auto: choice.auto,
        alias: choice.alias,
        uring_entries: cli.uring_entries,
        uring_sqpoll: cli.uring_sqpoll,
        shutdown_timeout: cli.shutdown_timeout,
    }
}

/// A socket buffer size from its flag (sizes past the address space are the most there is).
fn buffer_size(v: Option<u64>) -> Option<usize> {
    v.map(|b| usize::try_from(b).unwrap_or(usize::MAX))
}

fn listen(cli: &Cli) -> crate::kernel::steering::SteeringPlan {
    crate::kernel::steering::SteeringPlan {
        rung: cli.steering,
        sockets: crate::kernel::steering::SocketOptions {
            receive_buffer: buffer_size(cli.receive_buffer_size),
            send_buffer: buffer_size(cli.send_buffer_size),
            backlog: cli.listen_backlog,
            // A body sent apart from its head, a gRPC reply written after a frame before it (the
            // ACK of the PING grpc-go clients send beside their calls), or HTTP/2's last DATA frame
            // of a flow-control window (or a WINDOW_UPDATE) must not wait for the acknowledgement
            // of what went before (a delayed ACK: 40 ms each). Both runtimes gather a turn's
            // output into one send already, so Nagle has nothing left to merge.
            nodelay: cli.tcp_nodelay
                || cli.body_delay.is_some()
                || cli.has_routes()
                || cli.admin.is_some()
                || cli.http2
                || cli.grpc,
        },
        xdp: cli.xdp.clone(),
    }
}

fn policy(cli: &Cli) -> crate::conn::connection::Policy {
    crate::conn::connection::Policy {
        limits: cli.limits(),
        header_timeout: cli.header_timeout,
        idle_timeout: cli.idle_timeout,
        verbose: cli.verbose,
        h2c: cli.http2,
    }
}

fn catalog(cli: &Cli) -> crate::catalog::CatalogPlan {
    crate::catalog::CatalogPlan {
        response: cli.response_spec(),
        site: cli.site_options(),
        streams: cli.http2 || cli.http3,
        hold: crate::catalog::Hold {
            delay: (cli.delay.unwrap_or_default()).min(crate::catalog::route::LONGEST_HOLD),
            body_delay: (cli.body_delay.unwrap_or_default())
                .min(crate::catalog::route::LONGEST_HOLD),
            ..crate::catalog::Hold::default()
        },
        table: cli.table(),
        pauses: cli.pauses.clone(),
        // With pauses the (maybe empty) table is built too: its ground truth reports them.
        live: cli.admin.is_some() || cli.routes_file.is_some() || !cli.pauses.is_empty(),
        pausable: cli.admin.is_some() || !cli.pauses.is_empty(),
        seed: cli.seed,
        echo: cli
            .echo_query
            .then_some(crate::catalog::route::fortio::Limits {
                max_delay: cli.max_delay,
                max_size: cli.max_size,
            }),
        workers: cli.workers(),
        quic: cli.http3,
        grpc: cli
            .grpc
            .then(|| crate::catalog::grpc::Grpc::new(cli.max_delay)),
    }
}

/// `--http2`: its settings (both runtimes serve it).
fn http2(cli: &Cli) -> Result<Option<crate::proto::http2::H2Settings>> {
    if !cli.http2 {
        return Ok(None);
    }
    Ok(Some(crate::proto::http2::H2Settings {
        max_concurrent_streams: cli.max_concurrent_streams,
        max_body: cli.max_body_size,
        idle_timeout: cli.idle_timeout,
        header_timeout: cli.header_timeout,
    }))
}

#[cfg(target_os = "linux")]
fn tls(cli: &Cli) -> Option<crate::conn::layer::TlsOptions> {
    cli.tls().then(|| crate::conn::tls::TlsOptions {
        cert: cli.tls_cert.clone(),
        key: cli.tls_key.clone(),
        self_signed: cli.tls_self_signed,
        self_signed_out: cli.tls_self_signed_out.clone(),
        min: cli.tls_min.clone(),
        address: Some(cli.address),
        tickets: usize::from(cli.tls_tickets),
        h2: cli.http2,
    })
}

#[cfg(not(target_os = "linux"))]
fn tls(_: &Cli) -> Option<crate::conn::layer::TlsOptions> {
    None // refused above
}

#[cfg(target_os = "linux")]
fn http3(cli: &Cli) -> Option<Http3> {
    cli.http3.then(|| crate::proto::http3::Http3Options {
        idle_timeout: cli.idle_timeout,
        shutdown_timeout: cli.shutdown_timeout,
        header_timeout: cli.header_timeout,
        max_head: cli.max_head_size,
        max_body: cli.max_body_size,
        verbose: cli.verbose,
        receive_buffer: buffer_size(cli.receive_buffer_size),
        send_buffer: buffer_size(cli.send_buffer_size),
        retry: cli.quic_retry,
    })
}

#[cfg(not(target_os = "linux"))]
fn http3(_: &Cli) -> Option<Http3> {
    None // refused above
}
