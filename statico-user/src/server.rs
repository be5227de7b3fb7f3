//! Start-up and shutdown of the whole server: from parsed flags to workers, and back to the totals.
//!
//! Order matters and is the contract with users: everything that can fail because of a flag or the
//! machine (the response, the listeners, the workers' runtimes) fails before the "listening" line is
//! printed, and signal handlers are installed before it too, so a script that waits for that line and
//! then sends SIGTERM always gets a clean drain and the totals.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread;

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::{Cli, RuntimeKind};
use crate::kernel::steering::{self, SocketOptions};
use crate::observe::meter::{self, Counters};
use crate::runtime::{self, Settings, WorkerSetup};
use crate::shutdown;

/// Why the server could not start, split by who has to act: a flag value (exit code 2) or the
/// machine (exit code 1).
#[derive(Debug)]
pub enum StartError {
    Usage(anyhow::Error),
    Runtime(anyhow::Error),
}

/// `--runtime auto` (the default): io-uring where the kernel has what it needs and the flags are
/// served there (not `--http2`), else tokio. Returns why, for the start-up line (empty if not auto).
fn resolve_runtime(cli: &mut Cli, fd_limit: u64) -> String {
    if !cli.runtime.auto {
        return String::new();
    }
    let (kind, why) = if cli.http2 {
        (RuntimeKind::Tokio, "--http2 is served by tokio".to_string())
    } else {
        uring_works(cli, fd_limit).map_or_else(
            |e| (RuntimeKind::Tokio, e),
            |()| {
                (
                    RuntimeKind::IoUring,
                    "the kernel has what io_uring needs".into(),
                )
            },
        )
    };
    cli.runtime.kind = kind;
    format!(" (auto: {why})")
}

#[cfg(target_os = "linux")]
fn uring_works(cli: &Cli, fd_limit: u64) -> Result<(), String> {
    runtime::uring::check_available(uring_options(cli, fd_limit)).map(drop)
}

#[cfg(not(target_os = "linux"))]
fn uring_works(_: &Cli, _: u64) -> Result<(), String> {
    Err("io_uring needs Linux".into())
}

/// Checks that the runtime asked for works here and describes it; a runtime that cannot work is an
/// error with the reason, never a silent fallback.
fn runtime_available(cli: &Cli, fd_limit: u64) -> Result<String> {
    #[cfg(not(target_os = "linux"))]
    let _ = fd_limit; // only io_uring sizes anything from it
    if let Some(alias) = cli.runtime.alias {
        eprintln!(
            "statico: runtime {alias} maps to statico's own io_uring loop (--runtime io-uring)"
        );
    }
    match cli.runtime.kind {
        RuntimeKind::Tokio => Ok("tokio".into()),
        #[cfg(target_os = "linux")]
        RuntimeKind::IoUring => {
            let opts = runtime::uring::UringOptions {
                entries: cli.uring_entries,
                sqpoll_idle_ms: cli.uring_sqpoll,
                direct_files: runtime::uring::direct_files(fd_limit),
            };
            let flags = runtime::uring::check_available(opts).map_err(|e| anyhow!(e))?;
            Ok(format!("io-uring, {} entries, {flags}", cli.uring_entries))
        }
        #[cfg(not(target_os = "linux"))]
        RuntimeKind::IoUring => Err(anyhow!(
            "--runtime io-uring needs Linux; use --runtime tokio"
        )),
    }
}

/// Runs the server until SIGINT/SIGTERM, then drains and prints the totals.
pub fn run(mut cli: Cli) -> Result<(), StartError> {
    check_http3(&mut cli)?;
    let fd_limit = crate::kernel::sys::raise_fd_limit();
    let auto = resolve_runtime(&mut cli, fd_limit);
    let settings = Arc::new(settings(&cli).map_err(StartError::Usage)?);
    let runtime_line = runtime_available(&cli, fd_limit).map_err(StartError::Runtime)? + &auto;
    let cores = worker_cores(cli.workers());
    let cpus: Vec<Option<usize>> = cores.iter().map(|c| c.map(|c| c.id)).collect();
    let listeners = listen(&cli, &cpus).map_err(StartError::Runtime)?;
    let http3 = http3(&cli, &settings)?;
    let steering::Listeners {
        rung,
        why,
        local_addr,
        sockets,
        #[cfg(all(target_os = "linux", statico_bpf))]
        mut kernel,
    } = listeners;
    #[cfg(not(all(target_os = "linux", statico_bpf)))]
    let mut kernel: Option<Never> = None;
    steer_quic(kernel.as_mut(), http3.as_ref());

    let (main_rt, signals) = signal_handlers().map_err(StartError::Runtime)?;
    let metrics = metrics_listener(&cli).map_err(StartError::Runtime)?; // before privileges drop
    let lines = [runtime_line, format!("{} ({why})", rung.name())];
    if cli.check {
        report_check(&cli, local_addr, &lines);
        return Ok(());
    }
    // Workers write their counters into the BPF map when there is one, else into ordinary memory.
    let counters = kernel
        .as_ref()
        .map_or_else(|| Counters::new(cli.workers()), kernel_counters);
    // Everything privileged is done: the workers start without capabilities (threads inherit them).
    let privileges =
        drop_privileges(kernel.as_ref(), cli.user.as_deref()).map_err(StartError::Runtime)?;
    let uring = uring_options(&cli, fd_limit);
    let mut workers = start_workers(&cli, settings.clone(), sockets, &counters, &cores, uring)?;
    start_http3(http3, &cores, &counters, &mut workers)?;

    announce(&cli, local_addr, &cpus, &lines, privileges);

    let kernel_detail = || kernel_detail(kernel.as_ref());
    let info = crate::observe::metrics::Info::new(
        cli.runtime.kind.name(),
        rung.name(),
        cli.tls(),
        cli.http3,
    );
    let metrics_page =
        || crate::observe::metrics::render(&counters, cpus.len(), &kernel_detail(), &info);
    let watch = Watch {
        counters: &counters,
        kernel_detail: &kernel_detail,
        metrics: metrics.map(|l| (l, &metrics_page as &dyn Fn() -> String)),
    };
    let signal = wait_for_signal(&main_rt, signals, &cli, &settings, watch);
    eprintln!(
        "statico: {signal}: stopped accepting; finishing in-flight responses (up to {})",
        humantime::format_duration(cli.shutdown_timeout)
    );
    workers.stop();
    print_totals(&counters, &cpus, &kernel_detail());
    // Dropping the kernel state detaches the program, clears the socket slots, removes the pins.
    #[cfg(all(target_os = "linux", statico_bpf))]
    drop(kernel);
    Ok(())
}

/// `--http3` is refused off Linux and without a certificate (exit code 2); with `-p 0`, the port is
/// chosen now, free for TCP and UDP alike, so that both listen on it and Alt-Svc can name it.
fn check_http3(cli: &mut Cli) -> Result<(), StartError> {
    if !cli.http3 {
        return Ok(());
    }
    if !cfg!(target_os = "linux") {
        return Err(StartError::Usage(anyhow!(
            "--http3 needs a Linux build of statico (this one has no QUIC)"
        )));
    }
    if !cli.tls() {
        return Err(StartError::Usage(anyhow!(
            "--http3 needs a TLS certificate: add --tls-self-signed, or --tls-cert FILE --tls-key FILE"
        )));
    }
    #[cfg(target_os = "linux")]
    if cli.port == 0 {
        cli.port = crate::proto::http3::free_port(cli.address).map_err(StartError::Runtime)?;
    }
    Ok(())
}

/// `--http3`: what the QUIC threads share, and their UDP sockets (bound now, with the TCP listeners).
#[cfg(target_os = "linux")]
type Http3 = (Arc<crate::proto::http3::Http3>, Vec<std::net::UdpSocket>);
/// Off Linux there is no HTTP/3 (refused by [`check_http3`]).
#[cfg(not(target_os = "linux"))]
type Http3 = std::convert::Infallible;

#[cfg(target_os = "linux")]
fn http3(cli: &Cli, settings: &Settings) -> Result<Option<Http3>, StartError> {
    let Some(tls) = settings.tls.as_ref().filter(|_| cli.http3) else {
        return Ok(None);
    };
    let buffers = SocketOptions::from_cli(cli);
    let options = crate::proto::http3::Http3Options {
        idle_timeout: cli.idle_timeout,
        shutdown_timeout: cli.shutdown_timeout,
        header_timeout: cli.header_timeout,
        max_head: cli.max_head_size,
        max_body: cli.max_body_size,
        delay: cli.delay,
        body_delay: cli.body_delay,
        verbose: cli.verbose,
        receive_buffer: buffers.receive_buffer,
        send_buffer: buffers.send_buffer,
        retry: cli.quic_retry,
    };
    let http3 = crate::proto::http3::Http3::new(tls, options, settings.catalog.clone())
        .map_err(StartError::Usage)?;
    let sockets = crate::proto::http3::bind(
        SocketAddr::new(cli.address, cli.port),
        cli.workers(),
        &options,
    )
    .map_err(StartError::Runtime)?;
    Ok(Some((Arc::new(http3), sockets)))
}

#[cfg(not(target_os = "linux"))]
fn http3(_: &Cli, _: &Settings) -> Result<Option<Http3>, StartError> {
    Ok(None)
}

/// Starts the QUIC threads (one per worker, on its CPU), which stop with the workers.
#[cfg(target_os = "linux")]
fn start_http3(
    http3: Option<Http3>,
    cores: &[Option<core_affinity::CoreId>],
    counters: &Counters,
    workers: &mut Workers,
) -> Result<(), StartError> {
    let Some((http3, sockets)) = http3 else {
        return Ok(());
    };
    let stop = workers.trigger.subscribe();
    match crate::proto::http3::start(http3, sockets, cores, counters, &stop) {
        Ok(handles) => {
            workers.handles.extend(handles);
            Ok(())
        }
        Err(e) => {
            let _ = workers.trigger.send(true);
            Err(StartError::Runtime(e))
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn start_http3(
    http3: Option<Http3>,
    _: &[Option<core_affinity::CoreId>],
    _: &Counters,
    _: &mut Workers,
) -> Result<(), StartError> {
    match http3 {
        Some(never) => match never {},
        None => Ok(()),
    }
}

/// The listeners of the steering rung the flags ask for (or the best that works).
fn listen(cli: &Cli, cpus: &[Option<usize>]) -> Result<steering::Listeners> {
    steering::bind(
        cli.steering,
        SocketAddr::new(cli.address, cli.port),
        cpus,
        SocketOptions::from_cli(cli),
        cli.xdp.as_deref(),
    )
}

/// The per-CPU steering and XDP counters, read from the BPF maps (empty without them).
fn kernel_detail(kernel: Option<&Kernel>) -> meter::KernelDetail {
    meter::KernelDetail {
        steering: steering_counters(kernel),
        xdp: xdp_counters(kernel),
        quic_steering: quic_steering_counters(kernel),
    }
}

/// What every worker shares, from the flags: the response, each connection's policy, HTTP/2's
/// settings and response. Any error is the user's (exit code 2).
fn settings(cli: &Cli) -> Result<Settings> {
    let h2 = if cli.http2 {
        if cli.runtime.kind != RuntimeKind::Tokio {
            bail!("--http2 is served by the tokio runtime only (io_uring serves HTTP/1.1); use --runtime tokio with --http2");
        }
        Some(crate::proto::http2::H2Settings {
            max_concurrent_streams: cli.max_concurrent_streams,
            max_body: cli.max_body_size,
            delay: cli.delay,
            body_delay: cli.body_delay,
            idle_timeout: cli.idle_timeout,
            header_timeout: cli.header_timeout,
        })
    } else {
        None
    };
    Ok(Settings {
        catalog: Arc::new(crate::catalog::Catalog::build(&catalog_plan(cli))?),
        tls: tls_config(cli)?,
        policy: crate::conn::connection::Policy {
            limits: cli.limits(),
            header_timeout: cli.header_timeout,
            idle_timeout: cli.idle_timeout,
            delay: cli.delay,
            body_delay: cli.body_delay,
            verbose: cli.verbose,
            h2c: cli.http2,
        },
        shutdown_timeout: cli.shutdown_timeout,
        h2,
    })
}

fn catalog_plan(cli: &Cli) -> crate::catalog::Plan {
    crate::catalog::Plan {
        response: cli.response_spec(),
        site: cli.site_options(),
        streams: cli.http2 || cli.http3,
    }
}

/// The TLS configuration `--tls-*` asks for; its description is printed at start-up.
#[cfg(target_os = "linux")]
fn tls_config(cli: &Cli) -> Result<Option<crate::conn::layer::TlsConfig>> {
    Ok(
        crate::conn::tls::server_config(&tls_options(cli))?.map(|(config, lines)| {
            for line in lines.lines() {
                eprintln!("statico: {line}");
            }
            Arc::new(arc_swap::ArcSwap::new(config))
        }),
    )
}

#[cfg(target_os = "linux")]
fn tls_options(cli: &Cli) -> crate::conn::tls::TlsOptions {
    crate::conn::tls::TlsOptions {
        cert: cli.tls_cert.clone(),
        key: cli.tls_key.clone(),
        self_signed: cli.tls_self_signed,
        self_signed_out: cli.tls_self_signed_out.clone(),
        min: cli.tls_min.clone(),
        address: Some(cli.address),
        tickets: usize::from(cli.tls_tickets),
        h2: cli.http2,
    }
}

#[cfg(not(target_os = "linux"))]
fn tls_config(cli: &Cli) -> Result<Option<crate::conn::layer::TlsConfig>> {
    if cli.tls() {
        bail!("--tls-* needs a Linux build of statico (this one has no TLS)");
    }
    Ok(None)
}

/// The CPU each worker is pinned to: the CPUs this process may run on, in turn.
fn worker_cores(workers: usize) -> Vec<Option<core_affinity::CoreId>> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    (0..workers)
        .map(|id| (!cores.is_empty()).then(|| cores[id % cores.len()]))
        .collect()
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

#[cfg(target_os = "linux")]
type UringOptions = runtime::uring::UringOptions;
/// Off Linux there is no io_uring runtime to configure.
#[cfg(not(target_os = "linux"))]
#[derive(Clone, Copy)]
struct UringOptions;

#[cfg(target_os = "linux")]
fn uring_options(cli: &Cli, fd_limit: u64) -> UringOptions {
    runtime::uring::UringOptions {
        entries: cli.uring_entries,
        sqpoll_idle_ms: cli.uring_sqpoll,
        direct_files: runtime::uring::direct_files(fd_limit),
    }
}

#[cfg(not(target_os = "linux"))]
fn uring_options(_: &Cli, _: u64) -> UringOptions {
    UringOptions
}

/// The running workers, and the trigger that stops them.
struct Workers {
    trigger: shutdown::Trigger,
    handles: Vec<thread::JoinHandle<()>>,
}

impl Workers {
    /// Tells every worker to drain, and waits for them.
    fn stop(self) {
        let _ = self.trigger.send(true);
        for h in self.handles {
            let _ = h.join();
        }
    }
}

/// Starts one pinned thread per listener and waits until each says it is ready (or why not).
fn start_workers(
    cli: &Cli,
    settings: Arc<Settings>,
    sockets: Vec<std::net::TcpListener>,
    counters: &Counters,
    cores: &[Option<core_affinity::CoreId>],
    uring: UringOptions,
) -> Result<Workers, StartError> {
    let (trigger, stop) = shutdown::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::with_capacity(sockets.len());
    for (id, listener) in sockets.into_iter().enumerate() {
        let setup = WorkerSetup {
            id,
            listener,
            settings: settings.clone(),
            counters: counters.clone(),
            shutdown: stop.clone(),
        };
        let (ready, core, kind) = (ready_tx.clone(), cores[id], cli.runtime.kind);
        let handle = thread::Builder::new()
            .name(format!("statico-w{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                run_worker(kind, setup, uring, ready);
            })
            .map_err(|e| StartError::Runtime(anyhow!("cannot start worker thread {id}: {e}")))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..handles.len() {
        let outcome = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("a worker thread exited during start-up".into()));
        if let Err(e) = outcome {
            let _ = trigger.send(true);
            return Err(StartError::Runtime(anyhow!(e)));
        }
    }
    Ok(Workers { trigger, handles })
}

fn run_worker(
    kind: RuntimeKind,
    setup: WorkerSetup,
    uring: UringOptions,
    ready: mpsc::Sender<Result<(), String>>,
) {
    match kind {
        RuntimeKind::Tokio => runtime::tokio::run(setup, ready),
        #[cfg(target_os = "linux")]
        RuntimeKind::IoUring => runtime::uring::run(setup, uring, ready),
        #[cfg(not(target_os = "linux"))]
        RuntimeKind::IoUring => {
            let _ = (uring, setup, ready);
            unreachable!("refused by runtime_available")
        }
    }
}

/// The last start-up lines: what HTTP/2 leaves out, then "listening on", which scripts wait for.
/// The start-up lines after the site and TLS ones: steering, privileges, then "listening on", last
/// (scripts wait for it).
/// `lines` are the runtime's and the steering's descriptions.
fn announce(
    cli: &Cli,
    local_addr: SocketAddr,
    cpus: &[Option<usize>],
    [runtime_line, steering_line]: &[String; 2],
    privileges: Option<String>,
) {
    eprintln!("statico: steering: {steering_line}");
    if let Some(p) = privileges {
        eprintln!("statico: {p}");
    }
    let left_out = crate::catalog::stream::left_out_fields(&cli.response_spec());
    if cli.http2 && !left_out.is_empty() {
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
        if cli.tls() { "https" } else { "http" },
        if workers == 1 { "" } else { "s" },
        if cli.http2 { ", HTTP/1.1 and h2c" } else { "" },
        if pinned.is_empty() { "none".to_string() } else { pinned.join(",") },
        h3_on(cli, local_addr),
    );
}

/// The start-up lines' note that HTTP/3 is served too (empty without `--http3`).
fn h3_on(cli: &Cli, local_addr: SocketAddr) -> String {
    if cli.http3 {
        format!(" and h3 on udp/{}", local_addr.port())
    } else {
        String::new()
    }
}

/// `--check`: everything a start needs has worked (the listeners and BPF state are released on
/// return); says what a start would use, and advice about the node.
fn report_check(cli: &Cli, addr: SocketAddr, [runtime, steering]: &[String; 2]) {
    let scheme = if cli.tls() { "https" } else { "http" };
    eprintln!("statico: check: steering {steering}");
    eprintln!(
        "statico: check: a start would listen on {scheme}://{addr} with {} workers (runtime: {runtime}){}",
        cli.workers(),
        h3_on(cli, addr)
    );
    for line in crate::check::advice(u32::try_from(cli.listen_backlog).unwrap_or(0)) {
        eprintln!("statico: advice: {line}");
    }
    eprintln!("statico: check: OK");
}

/// What the main thread shows while the workers run: the meter (`-m`) and the metrics page.
struct Watch<'a> {
    counters: &'a Counters,
    kernel_detail: &'a dyn Fn() -> meter::KernelDetail,
    metrics: Option<(std::net::TcpListener, &'a dyn Fn() -> String)>,
}

/// `--metrics`: its listener, bound now; the start-up line says where.
fn metrics_listener(cli: &Cli) -> Result<Option<std::net::TcpListener>> {
    let Some(addr) = cli.metrics else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("--metrics {addr}: cannot listen there"))?;
    listener.set_nonblocking(true)?;
    eprintln!(
        "statico: metrics on http://{}/metrics",
        listener.local_addr()?
    );
    Ok(Some(listener))
}

/// Runs the meter (with `-m`) and the metrics page (with `--metrics`) until SIGINT or SIGTERM;
/// returns the signal's name. SIGHUP reloads (see [`reload`]) and the wait goes on.
fn wait_for_signal(
    main_rt: &tokio::runtime::Runtime,
    mut signals: shutdown::Signals,
    cli: &Cli,
    settings: &Settings,
    watch: Watch<'_>,
) -> &'static str {
    main_rt.block_on(async {
        let meter = async {
            let lines = async {
                if cli.meter {
                    meter::run(
                        watch.counters.clone(),
                        cli.meter_format,
                        watch.kernel_detail,
                    )
                    .await;
                }
            };
            let page = async {
                if let Some((listener, page)) = watch.metrics {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => crate::observe::metrics::serve(l, page).await,
                        Err(e) => eprintln!("statico: --metrics: {e}"),
                    }
                }
            };
            tokio::join!(lines, page);
            std::future::pending::<()>().await;
        };
        tokio::pin!(meter);
        loop {
            tokio::select! {
                sig = signals.recv() => match sig {
                    shutdown::Signal::Stop(name) => return name,
                    shutdown::Signal::Reload => reload(cli, settings),
                },
                () = &mut meter => unreachable!("the meter runs until shutdown"),
            }
        }
    })
}

/// SIGHUP: the site is rebuilt (with `--root`), the certificate reloaded (with `--tls-cert`).
fn reload(cli: &Cli, settings: &Settings) {
    if settings.catalog.rebuilds() {
        settings.catalog.rebuild(&catalog_plan(cli));
    }
    if settings.tls.is_some() || !settings.catalog.rebuilds() {
        eprintln!("statico: SIGHUP: {}", reload_tls(cli, settings));
    }
}

/// Loads `--tls-cert`/`--tls-key` again and, if they are good, serves new connections with them;
/// connections already open keep theirs. A bad new pair keeps the old one. Says what happened.
#[cfg(target_os = "linux")]
fn reload_tls(cli: &Cli, settings: &Settings) -> String {
    let Some(current) = &settings.tls else {
        return "nothing to reload (no --tls-cert)".into();
    };
    if cli.tls_self_signed {
        return "nothing to reload (--tls-self-signed makes its certificate once)".into();
    }
    match crate::conn::tls::server_config(&tls_options(cli)) {
        Ok(Some((config, line))) => {
            current.store(config);
            format!("reloaded: {}", line.replace('\n', "; "))
        }
        Ok(None) => "nothing to reload".into(),
        Err(e) => format!("kept the certificate in use: {e:#}"),
    }
}

#[cfg(not(target_os = "linux"))]
fn reload_tls(_: &Cli, _: &Settings) -> String {
    "nothing to reload".into()
}

/// The totals line, one line per worker, and the per-CPU steering and XDP counters.
fn print_totals(counters: &Counters, cpus: &[Option<usize>], kernel: &meter::KernelDetail) {
    eprintln!("{}", meter::format_totals(&counters.snapshot()));
    for (w, cpu) in cpus.iter().enumerate() {
        eprintln!(
            "{}",
            meter::format_worker_totals(w, *cpu, &counters.worker_snapshot(w))
        );
    }
    for (cpu, s) in kernel.steering.iter().enumerate() {
        eprintln!(
            "statico: steering cpu {cpu}: runs={} steered={} fallbacks={}",
            s.runs, s.steered, s.fallbacks
        );
    }
    for (cpu, x) in kernel.xdp.iter().enumerate() {
        eprintln!(
            "statico: xdp cpu {cpu}: packets={} bytes={}",
            x.packets, x.bytes
        );
    }
    for (cpu, q) in kernel.quic_steering.iter().enumerate() {
        eprintln!(
            "statico: quic steering cpu {cpu}: runs={} by_id={} by_cpu={} fallbacks={}",
            q.runs, q.by_id, q.by_cpu, q.fallbacks
        );
    }
}

#[cfg(not(all(target_os = "linux", statico_bpf)))]
#[derive(Debug)]
enum Never {}

#[cfg(all(target_os = "linux", statico_bpf))]
use crate::kernel::bpf::Kernel;
#[cfg(not(all(target_os = "linux", statico_bpf)))]
type Kernel = Never;

#[cfg(all(target_os = "linux", statico_bpf))]
fn kernel_counters(k: &Kernel) -> Counters {
    k.counters()
}
#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn kernel_counters(k: &Kernel) -> Counters {
    match *k {}
}

#[cfg(all(target_os = "linux", statico_bpf))]
fn steering_counters(k: Option<&Kernel>) -> Vec<statico_common::SteerCounters> {
    k.map(Kernel::steering).unwrap_or_default()
}
#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn steering_counters(_: Option<&Kernel>) -> Vec<statico_common::SteerCounters> {
    Vec::new()
}

#[cfg(all(target_os = "linux", statico_bpf))]
fn quic_steering_counters(k: Option<&Kernel>) -> Vec<statico_common::QuicSteerCounters> {
    k.map(Kernel::quic_steering).unwrap_or_default()
}
#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn quic_steering_counters(_: Option<&Kernel>) -> Vec<statico_common::QuicSteerCounters> {
    Vec::new()
}

/// `--http3`: how QUIC packets find their worker, said at start-up. On the ebpf rung the QUIC
/// steering program is attached to the UDP sockets (by connection ID); otherwise, or if that fails,
/// the kernel hashes each datagram's 4-tuple.
#[cfg(all(target_os = "linux", statico_bpf))]
fn steer_quic(kernel: Option<&mut Kernel>, http3: Option<&Http3>) {
    let Some((_, sockets)) = http3 else {
        return;
    };
    let why = match kernel.map(|k| k.attach_quic(sockets)) {
        Some(Ok(())) => {
            return eprintln!("statico: quic steering: by connection ID (an SK_REUSEPORT program sends each packet to the worker its connection ID names; Initial packets by CPU)");
        }
        Some(Err(e)) => format!("the QUIC program could not be attached: {e:#}"),
        None => "no BPF on this steering rung".into(),
    };
    eprintln!("statico: quic steering: kernel hash of each datagram's address ({why}); a client whose address changes may reach a worker without its connection");
}
#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn steer_quic(_: Option<&mut Kernel>, http3: Option<&Http3>) {
    if http3.is_some() {
        eprintln!("statico: quic steering: kernel hash of each datagram's address (this build has no BPF programs)");
    }
}

#[cfg(all(target_os = "linux", statico_bpf))]
fn xdp_counters(k: Option<&Kernel>) -> Vec<statico_common::XdpCounters> {
    k.and_then(Kernel::xdp).map(|(_, v)| v).unwrap_or_default()
}
#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn xdp_counters(_: Option<&Kernel>) -> Vec<statico_common::XdpCounters> {
    Vec::new()
}

/// Drops capabilities (and switches user with `--user`) once nothing privileged is left to do.
/// Returns the line to print, if anything changed.
#[cfg(target_os = "linux")]
fn drop_privileges(kernel: Option<&Kernel>, user: Option<&str>) -> Result<Option<String>> {
    #[cfg(statico_bpf)]
    {
        let had_caps = caps::read(None, caps::CapSet::Permitted)
            .map(|c| !c.is_empty())
            .unwrap_or(false);
        if !had_caps && user.is_none() {
            return Ok(None);
        }
        crate::kernel::bpf::drop_privileges(kernel, user).map(Some)
    }
    #[cfg(not(statico_bpf))]
    {
        let _ = kernel;
        match user {
            Some(_) => anyhow::bail!("--user needs a statico built with its BPF support (run `cargo xtask setup` and rebuild)"),
            None => Ok(None),
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn drop_privileges(_: Option<&Kernel>, user: Option<&str>) -> Result<Option<String>> {
    match user {
        Some(_) => Err(anyhow!("--user is supported on Linux only")),
        None => Ok(None),
    }
}
