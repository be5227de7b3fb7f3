//! Starting the workers: which runtime serves (`--runtime auto` resolved, the one asked for probed),
//! one pinned thread per listener, and stopping them.
//!
//! A runtime that cannot work here is an error with the reason, never a silent fallback; `auto` says
//! why it chose what it chose, and the start-up line carries it.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, Result};

use super::{RuntimeKind, Settings, WorkerSetup};
use crate::observe::meter::Counters;
use crate::shutdown;

/// How the workers run: the runtime part of the start-up plan.
#[derive(Clone, Copy, Debug)]
pub struct RuntimePlan {
    pub kind: RuntimeKind,
    /// `--runtime auto`: `kind` is decided at start-up ([`resolve`]).
    pub auto: bool,
    /// Asked for by another project's name (`tokio-uring`, `monoio`, `glommio`).
    pub alias: Option<&'static str>,
    /// `--uring-entries`, `--uring-sqpoll` (io_uring is Linux's).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub uring_entries: u32,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub uring_sqpoll: Option<u32>,
    /// How long a drain after SIGINT/SIGTERM may take.
    pub shutdown_timeout: Duration,
}

#[cfg(target_os = "linux")]
pub type UringOptions = super::uring::UringOptions;
/// Off Linux there is no io_uring runtime to configure.
#[cfg(not(target_os = "linux"))]
#[derive(Clone, Copy, Debug)]
pub struct UringOptions;

impl RuntimePlan {
    /// The io_uring settings, sized for `fd_limit` descriptors.
    pub fn uring(&self, fd_limit: u64) -> UringOptions {
        #[cfg(target_os = "linux")]
        return super::uring::UringOptions {
            entries: self.uring_entries,
            sqpoll_idle_ms: self.uring_sqpoll,
            direct_files: super::uring::direct_files(fd_limit),
        };
        #[cfg(not(target_os = "linux"))]
        {
            let _ = fd_limit;
            UringOptions
        }
    }
}

/// `--runtime auto` (the default): io-uring where the kernel has what it needs (it serves every flag
/// tokio does, `--http2` included), else tokio. Returns why, for the start-up line (empty if not auto).
pub fn resolve(plan: &mut RuntimePlan, fd_limit: u64) -> String {
    if !plan.auto {
        return String::new();
    }
    let (kind, why) = uring_works(plan.uring(fd_limit)).map_or_else(
        |e| (RuntimeKind::Tokio, e),
        |()| {
            (
                RuntimeKind::IoUring,
                "the kernel has what io_uring needs".into(),
            )
        },
    );
    plan.kind = kind;
    format!(" (auto: {why})")
}

#[cfg(target_os = "linux")]
fn uring_works(opts: UringOptions) -> Result<(), String> {
    super::uring::check_available(opts).map(drop)
}

#[cfg(not(target_os = "linux"))]
fn uring_works(_: UringOptions) -> Result<(), String> {
    Err("io_uring needs Linux".into())
}

/// Checks that the runtime asked for works here and describes it; a runtime that cannot work is an
/// error with the reason.
pub fn available(plan: &RuntimePlan, fd_limit: u64) -> Result<String> {
    if let Some(alias) = plan.alias {
        eprintln!(
            "statico: runtime {alias} maps to statico's own io_uring loop (--runtime io-uring)"
        );
    }
    match plan.kind {
        RuntimeKind::Tokio => Ok("tokio".into()),
        #[cfg(target_os = "linux")]
        RuntimeKind::IoUring => {
            let flags =
                super::uring::check_available(plan.uring(fd_limit)).map_err(|e| anyhow!(e))?;
            Ok(format!("io-uring, {} entries, {flags}", plan.uring_entries))
        }
        #[cfg(not(target_os = "linux"))]
        RuntimeKind::IoUring => {
            let _ = fd_limit;
            Err(anyhow!(
                "--runtime io-uring needs Linux; use --runtime tokio"
            ))
        }
    }
}

/// The CPU each worker is pinned to: the CPUs this process may run on, in turn.
pub fn worker_cores(workers: usize) -> Vec<Option<core_affinity::CoreId>> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    (0..workers)
        .map(|id| (!cores.is_empty()).then(|| cores[id % cores.len()]))
        .collect()
}

/// The running workers (and the threads that stop with them), and the trigger that stops them.
pub struct Workers {
    pub trigger: shutdown::Trigger,
    pub handles: Vec<thread::JoinHandle<()>>,
}

impl Workers {
    /// Tells every worker to drain, and waits for them.
    pub fn stop(self) {
        let _ = self.trigger.send(true);
        for h in self.handles {
            let _ = h.join();
        }
    }
}

/// What every worker thread is started with.
pub struct Start<'a> {
    pub kind: RuntimeKind,
    pub settings: Arc<Settings>,
    pub counters: &'a Counters,
    pub cores: &'a [Option<core_affinity::CoreId>],
    pub uring: UringOptions,
}

/// Starts one pinned thread per listener and waits until each says it is ready (or why not).
pub fn start_workers(start: Start<'_>, sockets: Vec<std::net::TcpListener>) -> Result<Workers> {
    let (trigger, stop) = shutdown::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::with_capacity(sockets.len());
    for (id, listener) in sockets.into_iter().enumerate() {
        let setup = WorkerSetup {
            id,
            listener,
            settings: start.settings.clone(),
            counters: start.counters.clone(),
            shutdown: stop.clone(),
        };
        let (ready, core, kind, uring) =
            (ready_tx.clone(), start.cores[id], start.kind, start.uring);
        let handle = thread::Builder::new()
            .name(format!("statico-w{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                run_worker(kind, setup, uring, ready);
            })
            .map_err(|e| anyhow!("cannot start worker thread {id}: {e}"))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..handles.len() {
        let outcome = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("a worker thread exited during start-up".into()));
        if let Err(e) = outcome {
            let _ = trigger.send(true);
            return Err(anyhow!(e));
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
        RuntimeKind::Tokio => super::tokio::run(setup, ready),
        #[cfg(target_os = "linux")]
        RuntimeKind::IoUring => super::uring::run(setup, uring, ready),
        #[cfg(not(target_os = "linux"))]
        RuntimeKind::IoUring => {
            let _ = (uring, setup, ready);
            unreachable!("refused by `available`")
        }
    }
}
