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
fn runtime_available(cli: &Cli) -> Result<String> {
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
    let runtime_line = runtime_available(&cli).map_err(StartError::Runtime)?;
    let workers = cli.workers();
    let addr = SocketAddr::new(cli.address, cli.port);
    let listeners = steering::bind(cli.steering, addr, workers, SocketOptions::from_cli(&cli))
        .map_err(StartError::Runtime)?;

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

    let settings = Arc::new(Settings {
        response,
        limits: cli.limits(),
        header_timeout: cli.header_timeout,
        idle_timeout: cli.idle_timeout,
        shutdown_timeout: cli.shutdown_timeout,
        delay: cli.delay,
        body_delay: cli.body_delay,
        verbose: cli.verbose,
    });
    let counters = Counters::new(workers);
    let (trigger, stop) = shutdown::channel();
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (ready_tx, ready_rx) = mpsc::channel();
    let local_addr = listeners.local_addr;
    let steering_line = listeners.describe();

    let mut handles = Vec::with_capacity(workers);
    let mut pinned = Vec::new();
    for (id, listener) in listeners.sockets.into_iter().enumerate() {
        let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
        if let Some(c) = core {
            pinned.push(c.id.to_string());
        }
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
    eprintln!("statico: {steering_line}");
    eprintln!(
        "statico {}: listening on http://{local_addr} with {workers} worker{} (runtime: {runtime_line}, pinned to CPU {})",
        env!("CARGO_PKG_VERSION"),
        if workers == 1 { "" } else { "s" },
        if pinned.is_empty() { "none".to_string() } else { pinned.join(",") },
    );

    let signal = main_rt.block_on(async {
        let meter = async {
            if cli.meter {
                meter::run(counters.clone(), cli.meter_format, std::future::pending()).await;
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
    Ok(())
}
