//! Start-up and shutdown of the whole server: from parsed flags to workers, and back to the totals.
//!
//! Order matters and is the contract with users: everything that can fail because of a flag or the
//! machine (the response, the listeners, the workers' runtimes) fails before the "listening" line is
//! printed, and signal handlers are installed before it too, so a script that waits for that line and
//! then sends SIGTERM always gets a clean drain and the totals.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread;

use anyhow::{anyhow, Context, Result};

use crate::cli::{Cli, RuntimeKind};
use crate::meter::{self, Counters};
use crate::response::Response;
use crate::runtime::{self, Settings, WorkerSetup};
use crate::shutdown;
use crate::steering::{self, SocketOptions};

/// Why the server could not start, split by who has to act: a flag value (exit code 2) or the
/// machine (exit code 1).
#[derive(Debug)]
pub enum StartError {
    Usage(anyhow::Error),
    Runtime(anyhow::Error),
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
pub fn run(cli: Cli) -> Result<(), StartError> {
    let response = Response::new(&cli.response_spec()).map_err(StartError::Usage)?;
    let h2 = if cli.http2 {
        if cli.runtime.kind != RuntimeKind::Tokio {
            return Err(StartError::Usage(anyhow!(
                "--http2 is served by the tokio runtime only (io_uring serves HTTP/1.1); use --runtime tokio with --http2"
            )));
        }
        let settings = crate::h2c::H2Settings {
            max_concurrent_streams: cli.max_concurrent_streams,
            max_body: cli.max_body_size,
            delay: cli.delay,
            body_delay: cli.body_delay,
            idle_timeout: cli.idle_timeout,
        };
        Some((
            settings,
            crate::h2c::H2Response::new(&cli.response_spec()).map_err(StartError::Usage)?,
        ))
    } else {
        None
    };
    let fd_limit = crate::sys::raise_fd_limit();
    let runtime_line = runtime_available(&cli, fd_limit).map_err(StartError::Runtime)?;
    let workers = cli.workers();
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let worker_cores: Vec<Option<core_affinity::CoreId>> = (0..workers)
        .map(|id| (!cores.is_empty()).then(|| cores[id % cores.len()]))
        .collect();
    let worker_cpus: Vec<Option<usize>> = worker_cores.iter().map(|c| c.map(|c| c.id)).collect();
    let addr = SocketAddr::new(cli.address, cli.port);
    let listeners = steering::bind(
        cli.steering,
        addr,
        &worker_cpus,
        SocketOptions::from_cli(&cli),
        cli.xdp.as_deref(),
    )
    .map_err(StartError::Runtime)?;
    let steering::Listeners {
        rung,
        why,
        local_addr,
        sockets,
        #[cfg(all(target_os = "linux", statico_bpf))]
        kernel,
    } = listeners;
    #[cfg(not(all(target_os = "linux", statico_bpf)))]
    let kernel: Option<Never> = None;

    let main_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the main tokio runtime")
        .map_err(StartError::Runtime)?;
    let signals = {
        let _enter = main_rt.enter();
        shutdown::Signals::install()
            .context("cannot install SIGINT/SIGTERM handlers")
            .map_err(StartError::Runtime)?
    };

    // Workers write their counters into the BPF map when there is one, else into ordinary memory.
    let counters = kernel
        .as_ref()
        .map_or_else(|| Counters::new(workers), kernel_counters);
    // Everything privileged is done: the workers start without capabilities (threads inherit them).
    let privileges =
        drop_privileges(kernel.as_ref(), cli.user.as_deref()).map_err(StartError::Runtime)?;

    let settings = Arc::new(Settings {
        response,
        policy: crate::connection::Policy {
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
    });
    let (trigger, stop) = shutdown::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::with_capacity(workers);
    for (id, listener) in sockets.into_iter().enumerate() {
        let core = worker_cores[id];
        let setup = WorkerSetup {
            id,
            listener,
            settings: settings.clone(),
            counters: counters.clone(),
            shutdown: stop.clone(),
        };
        let ready = ready_tx.clone();
        let runtime_kind = cli.runtime.kind;
        #[cfg(target_os = "linux")]
        let uring = runtime::uring::UringOptions {
            entries: cli.uring_entries,
            sqpoll_idle_ms: cli.uring_sqpoll,
            direct_files: runtime::uring::direct_files(fd_limit),
        };
        let handle = thread::Builder::new()
            .name(format!("statico-w{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                match runtime_kind {
                    RuntimeKind::Tokio => runtime::tokio::run(setup, ready),
                    #[cfg(target_os = "linux")]
                    RuntimeKind::IoUring => runtime::uring::run(setup, uring, ready),
                    #[cfg(not(target_os = "linux"))]
                    RuntimeKind::IoUring => unreachable!("refused by runtime_available"),
                }
            })
            .map_err(|e| StartError::Runtime(anyhow!("cannot start worker thread {id}: {e}")))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..workers {
        let outcome = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("a worker thread exited during start-up".into()));
        if let Err(e) = outcome {
            let _ = trigger.send(true);
            return Err(StartError::Runtime(anyhow!(e)));
        }
    }

    // The steering line comes first: "listening on" is the last start-up line, scripts wait for it.
    eprintln!("statico: steering: {} ({why})", rung.name());
    if let Some(p) = privileges {
        eprintln!("statico: {p}");
    }
    let pinned: Vec<String> = worker_cpus.iter().flatten().map(usize::to_string).collect();
    eprintln!(
        "statico {}: listening on http://{local_addr} with {workers} worker{} (runtime: {runtime_line}{}, pinned to CPU {})",
        env!("CARGO_PKG_VERSION"),
        if workers == 1 { "" } else { "s" },
        if cli.http2 { ", HTTP/1.1 and h2c" } else { "" },
        if pinned.is_empty() { "none".to_string() } else { pinned.join(",") },
    );

    let steering_source = || meter::KernelDetail {
        steering: steering_counters(kernel.as_ref()),
        xdp: xdp_counters(kernel.as_ref()),
    };
    let signal = main_rt.block_on(async {
        let meter = async {
            if cli.meter {
                meter::run(counters.clone(), cli.meter_format, &steering_source).await;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            sig = signals.recv() => sig,
            () = meter => unreachable!("the meter runs until shutdown"),
        }
    });
    eprintln!(
        "statico: {signal}: stopped accepting; finishing in-flight responses (up to {})",
        humantime::format_duration(cli.shutdown_timeout)
    );
    let _ = trigger.send(true);
    for h in handles {
        let _ = h.join();
    }
    eprintln!("{}", meter::format_totals(&counters.snapshot()));
    for (w, cpu) in worker_cpus.iter().enumerate() {
        eprintln!(
            "{}",
            meter::format_worker_totals(w, *cpu, &counters.worker_snapshot(w))
        );
    }
    for (cpu, s) in steering_counters(kernel.as_ref()).iter().enumerate() {
        eprintln!(
            "statico: steering cpu {cpu}: runs={} steered={} fallbacks={}",
            s.runs, s.steered, s.fallbacks
        );
    }
    for (cpu, x) in xdp_counters(kernel.as_ref()).iter().enumerate() {
        eprintln!(
            "statico: xdp cpu {cpu}: packets={} bytes={}",
            x.packets, x.bytes
        );
    }
    // Dropping the kernel state detaches the program, clears the socket slots, removes the pins.
    #[cfg(all(target_os = "linux", statico_bpf))]
    drop(kernel);
    Ok(())
}

#[cfg(not(all(target_os = "linux", statico_bpf)))]
#[derive(Debug)]
enum Never {}

#[cfg(all(target_os = "linux", statico_bpf))]
use crate::bpf::Kernel;
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
        crate::bpf::drop_privileges(kernel, user).map(Some)
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
