//! Graceful shutdown: SIGINT/SIGTERM (on Windows, the console's Ctrl-C, Ctrl-Break and close events)
//! become one broadcast that every worker watches; SIGHUP asks for a reload (Unix only).
//!
//! On the signal, workers stop accepting, close the connections that sit idle between requests, let the
//! busy ones finish the response in flight, and give up after `--shutdown-timeout`. The main thread then
//! prints the totals and exits 0.

use tokio::sync::watch;

/// The sending half, held by the main thread.
pub type Trigger = watch::Sender<bool>;
/// The receiving half, one per worker; it changes to `true` once.
pub type Listener = watch::Receiver<bool>;

pub fn channel() -> (Trigger, Listener) {
    watch::channel(false)
}

/// The stop (and, on Unix, reload) signals' handlers, installed at start-up (inside a tokio runtime
/// context) so that a signal arriving at any time after the "listening" line leads to a clean drain.
pub struct Signals(imp::Signals);

/// What a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM (Windows: Ctrl-C, Ctrl-Break, the console closing, shutdown), named: drain
    /// and exit.
    Stop(&'static str),
    /// SIGHUP: reload, keep serving (Windows has no SIGHUP).
    #[cfg_attr(windows, allow(dead_code))]
    Reload,
}

/// The signals that stop statico here, as the start-up error names them.
pub const STOP_SIGNALS: &str = imp::STOP_SIGNALS;
/// Whether a running statico can be told to reload (SIGHUP); Windows has no such signal.
pub const CAN_RELOAD: bool = cfg!(unix);

impl Signals {
    pub fn install() -> std::io::Result<Self> {
        imp::Signals::install().map(Signals)
    }

    /// Waits for the next signal.
    pub async fn recv(&mut self) -> Signal {
        self.0.recv().await
    }
}

#[cfg(unix)]
mod imp {
    use super::Signal;
    use tokio::signal::unix::{signal, Signal as Handler, SignalKind};

    pub const STOP_SIGNALS: &str = "SIGINT/SIGTERM";

    pub struct Signals {
        term: Handler,
        int: Handler,
        /// SIGHUP: reload what can be reloaded (the site, the TLS certificate).
        hup: Handler,
    }

    impl Signals {
        pub fn install() -> std::io::Result<Self> {
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
                hup: signal(SignalKind::hangup())?,
            })
        }

        pub async fn recv(&mut self) -> Signal {
            tokio::select! {
                _ = self.term.recv() => Signal::Stop("SIGTERM"),
                _ = self.int.recv() => Signal::Stop("SIGINT"),
                _ = self.hup.recv() => Signal::Reload,
            }
        }
    }
}

/// Windows: the console's control events. Ctrl-Close and shutdown leave a few seconds (Windows then
/// ends the process) for the drain; there is nothing that asks for a reload.
#[cfg(windows)]
mod imp {
    use super::Signal;
    use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close, ctrl_shutdown};
    use tokio::signal::windows::{CtrlBreak, CtrlC, CtrlClose, CtrlShutdown};

    pub const STOP_SIGNALS: &str = "Ctrl-C/Ctrl-Break/console close";

    pub struct Signals {
        c: CtrlC,
        brk: CtrlBreak,
        close: CtrlClose,
        shutdown: CtrlShutdown,
    }

    impl Signals {
        pub fn install() -> std::io::Result<Self> {
            Ok(Signals {
                c: ctrl_c()?,
                brk: ctrl_break()?,
                close: ctrl_close()?,
                shutdown: ctrl_shutdown()?,
            })
        }

        pub async fn recv(&mut self) -> Signal {
            tokio::select! {
                _ = self.c.recv() => Signal::Stop("Ctrl-C"),
                _ = self.brk.recv() => Signal::Stop("Ctrl-Break"),
                _ = self.close.recv() => Signal::Stop("console closed"),
                _ = self.shutdown.recv() => Signal::Stop("system shutdown"),
            }
        }
    }
}

/// Resolves once the trigger has fired (or its sender is gone).
pub async fn fired(rx: &mut Listener) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
