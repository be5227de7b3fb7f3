//! Graceful shutdown: SIGINT/SIGTERM become one broadcast that every worker watches.
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

/// SIGINT and SIGTERM handlers, installed at start-up (inside a tokio runtime context) so that a signal
/// arriving at any time after the "listening" line leads to a clean drain.
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    /// SIGHUP: reload what can be reloaded (the TLS certificate).
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
}

/// What a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM (named): drain and exit.
    Stop(&'static str),
    /// SIGHUP: reload, keep serving.
    Reload,
}

impl Signals {
    pub fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
                hup: signal(SignalKind::hangup())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for the next signal.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => Signal::Stop("SIGTERM"),
                _ = self.int.recv() => Signal::Stop("SIGINT"),
                _ = self.hup.recv() => Signal::Reload,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Stop("Ctrl-C")
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
