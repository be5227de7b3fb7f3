//! Start-up and shutdown of the whole server, in order: from the flags to the plan, the plan to
//! running workers, and a signal back to the totals. Each step is a component's own start-up, given
//! its part of the plan ([`crate::config`]); this file is only their order.
//!
//! Order matters and is the contract with users: everything that can fail because of a flag or the
//! machine (the catalog, TLS, the runtime, the listeners, the workers) fails before the "listening"
//! line is printed, and signal handlers are installed before it too, so a script that waits for that
//! line and then sends SIGTERM always gets a clean drain and the totals.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::catalog::Catalog;
use crate::cli::Cli;
use crate::config::Plan;
use crate::control;
use crate::kernel::steering;
use crate::observe::meter;
use crate::observe::Watch;
use crate::runtime::{self, Settings, Workers};
use crate::shutdown;

/// Why the server could not start, split by who has to act: a flag value (exit code 2) or the
/// machine (exit code 1).
#[derive(Debug)]
pub enum StartError {
    Usage(anyhow::Error),
    Runtime(anyhow::Error),
}
use StartError::{Runtime as Machine, Usage};

/// Runs the server until SIGINT/SIGTERM, then drains and prints the totals.
pub fn run(cli: Cli) -> Result<(), StartError> {
    let mut plan = plan(cli)?;
    let fd_limit = crate::kernel::sys::raise_fd_limit();
    crate::kernel::sys::reserve_fd_table(fd_limit);
    let auto = runtime::resolve(&mut plan.runtime, fd_limit);
    let settings = Arc::new(settings(&plan).map_err(Usage)?);
    let runtime_line = runtime::available(&plan.runtime, fd_limit).map_err(Machine)? + &auto;
    warn_of_resets_without_linger(&plan);
    let cores = runtime::worker_cores(plan.workers);
    let cpus: Vec<Option<usize>> = cores.iter().map(|c| c.map(|c| c.id)).collect();
    let listeners = steering::bind(
        plan.listen.rung,
        plan.address,
        &cpus,
        plan.listen.sockets,
        plan.listen.xdp.as_deref(),
    )
    .map_err(Machine)?;
    let http3 = http3::prepare(&plan, &settings)?;
    let steering::Listeners {
        rung,
        why,
        local_addr,
        sockets,
        mut assist,
    } = listeners;
    if let Some(http3) = &http3 {
        assist.steer_quic(http3::sockets(http3));
    }
    let (main_rt, signals) = signal_handlers().map_err(Machine)?;
    let metrics = crate::side::scrape::listen(plan.observe.metrics).map_err(Machine)?; // before privileges drop
    let admin = control::listen(plan.admin, plan.admin_token.clone()).map_err(Machine)?;
    let lines = [runtime_line, format!("{} ({why})", rung.name())];
    if plan.check {
        crate::check::report(&plan, local_addr, &lines);
        return Ok(());
    }
    let counters = assist.counters(plan.workers);
    // Everything privileged is done: the workers start without capabilities (threads inherit them).
    let privileges = assist
        .drop_privileges(plan.user.as_deref())
        .map_err(Machine)?;
    let start = runtime::Start {
        kind: plan.runtime.kind,
        settings: settings.clone(),
        counters: &counters,
        cores: &cores,
        uring: plan.runtime.uring(fd_limit),
    };
    let mut workers = runtime::start_workers(start, sockets).map_err(Machine)?;
    http3::start(http3, &cores, &counters, &mut workers)?;
    announce(&plan, local_addr, &cpus, &lines, privileges);

    let kernel_detail = || assist.detail();
    let shown = meter::Shown {
        tls: plan.https(),
        quic: plan.http3.is_some(),
    };
    let info = crate::observe::metrics::Info::new(plan.runtime.kind.name(), rung.name(), shown);
    let page = || crate::observe::metrics::render(&counters, cpus.len(), &kernel_detail(), &info);
    let catalog = settings.catalog.clone();
    let truth_in_force = move || catalog.truth().expect("with routes");
    let truth = settings
        .catalog
        .truth()
        .is_some()
        .then_some(&truth_in_force as &dyn Fn() -> Arc<crate::observe::truth::GroundTruth>);
    let watch = Watch {
        counters: &counters,
        kernel_detail: &kernel_detail,
        meter: plan.observe.meter,
        truth,
    };
    let scrape = crate::side::scrape::Scrape { page: &page, truth };
    let side = SidePorts {
        metrics: metrics.map(|door| (door, scrape)),
        admin,
    };
    let signal = wait_for_signal(&main_rt, signals, &plan, &settings, watch, side);
    eprintln!(
        "statico: {signal}: stopped accepting; finishing in-flight responses (up to {})",
        humantime::format_duration(plan.runtime.shutdown_timeout)
    );
    workers.stop();
    meter::print_totals(&counters, &cpus, &kernel_detail(), shown);
    for line in settings.catalog.truth().iter().flat_map(|t| t.totals()) {
        eprintln!("statico: {line}");
    }
    if let Some(pauses) = settings.catalog.pauses() {
        let (count, total) = pauses.so_far();
        eprintln!(
            "statico: pauses: {count}, {} paused in all",
            humantime::format_duration(Duration::from_millis(total.as_millis() as u64))
        );
    }
    // Dropping the kernel state detaches the programs, clears the socket slots, removes the pins.
    #[cfg(all(target_os = "linux", statico_bpf))]
    drop(assist);
    Ok(())
}

/// A route's `reset` fault on io_uring needs the ring's `setsockopt` (Linux 6.7) to set `SO_LINGER`
/// on a direct descriptor: before that, the close that should reset sends FIN. Said, not refused.
fn warn_of_resets_without_linger(plan: &Plan) {
    let resets = (plan.catalog.table.routes.iter()).any(|r| {
        r.faults
            .iter()
            .any(|(f, _)| *f == crate::catalog::model::fault::Fault::Reset)
    });
    if resets
        && plan.runtime.kind == runtime::RuntimeKind::IoUring
        && crate::kernel::sys::kernel_version() < (6, 7)
    {
        eprintln!("statico: route: a reset fault ends with FIN, not RST, on io_uring before Linux 6.7 (use --runtime tokio for RST)");
    }
}

/// The plan the flags describe. With `--http3 -p 0` the port is chosen first, free for TCP and UDP
/// alike, so that both listen on it and every answer's `Alt-Svc` names it.
fn plan(cli: Cli) -> Result<Plan, StartError> {
    crate::config::refuse_what_this_build_lacks(&cli).map_err(Usage)?;
    crate::kernel::privilege::check_user(cli.user.as_deref()).map_err(Usage)?;
    #[cfg(target_os = "linux")]
    let cli = match cli.http3 && cli.port == 0 {
        true => Cli {
            port: crate::proto::http3::free_port(cli.address).map_err(Machine)?,
            ..cli
        },
        false => cli,
    };
    Plan::from_cli(&cli).map_err(Usage)
}

/// What every worker shares: the catalog (the site built now), the TLS configuration, each
/// connection's policy, HTTP/2's settings. Any error is the user's (exit code 2).
fn settings(plan: &Plan) -> Result<Settings> {
    Ok(Settings {
        catalog: Arc::new(Catalog::build(&plan.catalog)?),
        tls: crate::conn::layer::configure(plan.tls.as_ref())?,
        policy: plan.policy,
        shutdown_timeout: plan.runtime.shutdown_timeout,
        h2: plan.http2,
    })
}

/// The main thread's runtime and the stop signals' handlers, installed before anything listens for
/// clients so that a signal at any time after the "listening" line leads to a clean drain.
fn signal_handlers() -> Result<(tokio::runtime::Runtime, shutdown::Signals)> {
    let main_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the main tokio runtime")?;
    let signals = {
        let _enter = main_rt.enter();
        shutdown::Signals::install()
            .with_context(|| format!("cannot install {} handlers", shutdown::STOP_SIGNALS))?
    };
    Ok((main_rt, signals))
}

/// The last start-up lines: steering, privileges, what HTTP/2 leaves out, then "listening on", last
/// (scripts wait for it). `lines` are the runtime's and the steering's descriptions.
fn announce(
    plan: &Plan,
    local_addr: SocketAddr,
    cpus: &[Option<usize>],
    [runtime_line, steering_line]: &[String; 2],
    privileges: Option<String>,
) {
    eprintln!("statico: steering: {steering_line}");
    if let Some(p) = privileges {
        eprintln!("statico: {p}");
    }
    let left_out = crate::catalog::stream::left_out_fields(&plan.catalog.response);
    if plan.http2.is_some() && !left_out.is_empty() {
        eprintln!(
            "statico: HTTP/2 responses leave out {}: connection-specific fields are forbidden there (RFC 9113 §8.2.2); HTTP/1.1 responses keep them",
            left_out.join(", ")
        );
    }
    let pinned: Vec<String> = cpus.iter().flatten().map(usize::to_string).collect();
    let workers = cpus.len();
    eprintln!(
        "statico {}: listening on {}://{local_addr} with {workers} worker{} (runtime: {runtime_line}{}, pinned to CPU {}){}",
        env!("CARGO_PKG_VERSION"),
        if plan.https() { "https" } else { "http" },
        if workers == 1 { "" } else { "s" },
        protocols(plan),
        if pinned.is_empty() { "none".to_string() } else { pinned.join(",") },
        plan.h3_note(local_addr),
    );
}

/// Which runtime serves which protocol, for the start-up line: HTTP/1.1 and HTTP/2 on the workers'
/// runtime (under TLS, HTTP/2 by ALPN), HTTP/3 on its own tokio threads (its note follows the line).
fn protocols(plan: &Plan) -> String {
    let runtime = plan.runtime.kind.name();
    let h3 = if plan.http3.is_some() {
        "; HTTP/3 on tokio (quinn)"
    } else {
        ""
    };
    match (plan.http2.is_some(), plan.https()) {
        (false, _) if h3.is_empty() => String::new(), // HTTP/1.1 only: the runtime says it all
        (false, _) => format!(", HTTP/1.1 on {runtime}{h3}"),
        (true, false) => format!(", HTTP/1.1 and h2c on {runtime}{h3}"),
        (true, true) => format!(", HTTP/1.1 and h2 on {runtime}{h3}"),
    }
}

/// The side ports the main thread serves: `--metrics` and `--admin`.
struct SidePorts<'a> {
    metrics: Option<(crate::side::Door, crate::side::scrape::Scrape<'a>)>,
    admin: Option<control::Admin>,
}

/// Runs the meter and the side ports until SIGINT or SIGTERM; returns the signal's name. SIGHUP
/// reloads (see [`reload`]) and the wait goes on.
fn wait_for_signal(
    main_rt: &tokio::runtime::Runtime,
    mut signals: shutdown::Signals,
    plan: &Plan,
    settings: &Settings,
    watch: Watch<'_>,
    side: SidePorts<'_>,
) -> &'static str {
    main_rt.block_on(async {
        let watch = watch.run();
        tokio::pin!(watch);
        let SidePorts { metrics, admin } = side;
        let metrics = async move {
            match metrics {
                Some((door, scrape)) => crate::side::serve(door, &scrape).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(metrics);
        let admin = async move {
            match admin {
                Some(admin) => control::serve(admin, &settings.catalog).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(admin);
        loop {
            tokio::select! {
                sig = signals.recv() => match sig {
                    shutdown::Signal::Stop(name) => return name,
                    shutdown::Signal::Reload => reload(plan, settings),
                },
                () = &mut watch => unreachable!("the meter runs until shutdown"),
                () = &mut metrics => unreachable!("the metrics port is served until shutdown"),
                () = &mut admin => unreachable!("the control API runs until shutdown"),
            }
        }
    })
}

/// SIGHUP: the site is rebuilt (with `--root`), the certificate reloaded (with `--tls-cert`), the
/// routes read again (with `--routes FILE`).
fn reload(plan: &Plan, settings: &Settings) {
    control::reload_routes(&settings.catalog, &plan.sources);
    if settings.catalog.rebuilds() {
        settings.catalog.rebuild(&plan.catalog);
    }
    if settings.tls.is_some() || (!settings.catalog.rebuilds() && plan.sources.file.is_none()) {
        let what = crate::conn::layer::reload(settings.tls.as_ref(), plan.tls.as_ref());
        eprintln!("statico: SIGHUP: {what}");
    }
}

/// `--http3`'s start-up steps: what the QUIC threads share and their UDP sockets (bound with the TCP
/// listeners), then the threads (one per worker, on its CPU), which stop with the workers. Off Linux
/// `--http3` is refused while planning, and these have nothing to do.
mod http3 {
    use super::*;
    use crate::observe::meter::Counters;

    #[cfg(target_os = "linux")]
    pub type Prepared = (Arc<crate::proto::http3::Http3>, Vec<std::net::UdpSocket>);
    #[cfg(not(target_os = "linux"))]
    pub type Prepared = std::convert::Infallible;

    #[cfg(target_os = "linux")]
    pub fn prepare(plan: &Plan, settings: &Settings) -> Result<Option<Prepared>, StartError> {
        let (Some(options), Some(tls)) = (plan.http3, settings.tls.as_ref()) else {
            return Ok(None);
        };
        let catalog = settings.catalog.clone();
        let http3 = crate::proto::http3::Http3::new(tls, options, catalog).map_err(Usage)?;
        let sockets =
            crate::proto::http3::bind(plan.address, plan.workers, &options).map_err(Machine)?;
        Ok(Some((Arc::new(http3), sockets)))
    }

    #[cfg(not(target_os = "linux"))]
    pub fn prepare(_: &Plan, _: &Settings) -> Result<Option<Prepared>, StartError> {
        Ok(None)
    }

    #[cfg(target_os = "linux")]
    pub fn sockets(prepared: &Prepared) -> &[std::net::UdpSocket] {
        &prepared.1
    }

    #[cfg(not(target_os = "linux"))]
    pub fn sockets(prepared: &Prepared) -> &[std::net::UdpSocket] {
        match *prepared {}
    }

    pub fn start(
        prepared: Option<Prepared>,
        cores: &[Option<core_affinity::CoreId>],
        counters: &Counters,
        workers: &mut Workers,
    ) -> Result<(), StartError> {
        let Some(prepared) = prepared else {
            return Ok(());
        };
        #[cfg(target_os = "linux")]
        {
            let (http3, sockets) = prepared;
            let stop = workers.trigger.subscribe();
            match crate::proto::http3::start(http3, sockets, cores, counters, &stop) {
                Ok(handles) => {
                    workers.handles.extend(handles);
                    Ok(())
                }
                Err(e) => {
                    let _ = workers.trigger.send(true);
                    Err(Machine(e))
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (cores, counters, workers);
            match prepared {}
        }
    }
}
