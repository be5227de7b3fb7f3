//! What sits between a runtime's socket and its [`Connection`]: nothing, or TLS ([`crate::conn::tls`], Linux
//! builds). Runtimes call these instead of the connection's methods of the same names, so the TLS
//! decision is made once, per connection, here.

use std::time::{Duration, Instant};

use crate::conn::connection::{Connection, Env, Status, Timer};

/// The server's TLS configuration, if it serves HTTPS.
/// Swapped whole on SIGHUP; each new connection takes the one in force.
#[cfg(target_os = "linux")]
pub type TlsConfig = std::sync::Arc<arc_swap::ArcSwap<rustls::ServerConfig>>;
/// Off Linux statico is built without TLS.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone)]
pub enum TlsConfig {}

/// The TLS part of the start-up plan (`--tls-*`; off Linux it is refused while planning).
#[cfg(target_os = "linux")]
pub type TlsOptions = crate::conn::tls::TlsOptions;
#[cfg(not(target_os = "linux"))]
pub type TlsOptions = std::convert::Infallible;

/// The TLS configuration `options` ask for (none without them); its description is printed at
/// start-up. An error is the user's (a certificate, a key).
pub fn configure(options: Option<&TlsOptions>) -> anyhow::Result<Option<TlsConfig>> {
    let Some(options) = options else {
        return Ok(None);
    };
    #[cfg(target_os = "linux")]
    return Ok(
        crate::conn::tls::server_config(options)?.map(|(config, lines)| {
            for line in lines.lines() {
                eprintln!("statico: {line}");
            }
            std::sync::Arc::new(arc_swap::ArcSwap::new(config))
        }),
    );
    #[cfg(not(target_os = "linux"))]
    match *options {}
}

/// SIGHUP: loads the certificate and key again and, if they are good, serves new connections with
/// them; connections already open keep theirs. A bad new pair keeps the old one. Says what happened.
pub fn reload(current: Option<&TlsConfig>, options: Option<&TlsOptions>) -> String {
    let (Some(current), Some(options)) = (current, options) else {
        return "nothing to reload (no --tls-cert)".into();
    };
    #[cfg(target_os = "linux")]
    {
        if options.self_signed {
            return "nothing to reload (--tls-self-signed makes its certificate once)".into();
        }
        match crate::conn::tls::server_config(options) {
            Ok(Some((config, line))) => {
                current.store(config);
                format!("reloaded: {}", line.replace('\n', "; "))
            }
            Ok(None) => "nothing to reload".into(),
            Err(e) => format!("kept the certificate in use: {e:#}"),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = current;
        match *options {}
    }
}

pub enum Layer {
    Plain,
    #[cfg(target_os = "linux")]
    Tls(Box<crate::conn::tls::TlsSession>),
}

impl Layer {
    /// The layer for a new connection: TLS when the server has a configuration.
    pub fn new(tls: Option<&TlsConfig>, now: Instant, header_timeout: Duration) -> Layer {
        #[cfg(target_os = "linux")]
        if let Some(session) = tls
            .and_then(|c| crate::conn::tls::TlsSession::start(&c.load_full(), now, header_timeout))
        {
            return Layer::Tls(Box::new(session));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (tls, now, header_timeout);
        Layer::Plain
    }

    /// The TLS session, if any, once the connection moves on to HTTP/2.
    #[cfg(target_os = "linux")]
    pub fn into_tls(self) -> Option<Box<rustls::ServerConnection>> {
        match self {
            Layer::Plain => None,
            Layer::Tls(t) => Some(Box::new(t.into_session())),
        }
    }

    /// Whether this is a TLS connection.
    pub fn is_tls(&self) -> bool {
        !matches!(self, Layer::Plain)
    }

    pub fn receive(&mut self, conn: &mut Connection, data: &[u8], now: Instant, env: Env) {
        match self {
            Layer::Plain => conn.receive(data, now, env),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.on_receive(conn, data, now, env),
        }
    }

    /// The bytes to send now.
    pub fn output<'a>(&'a self, conn: &'a Connection) -> &'a [u8] {
        match self {
            Layer::Plain => conn.output(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.output(),
        }
    }

    /// The bytes to send now as slices; returns how many (TLS: its records, one slice).
    pub fn output_slices<'a>(
        &'a self,
        conn: &'a Connection,
        slices: &mut [std::io::IoSlice<'a>],
    ) -> usize {
        match self {
            Layer::Plain => conn.output_slices(slices),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => {
                let out = t.output();
                if out.is_empty() || slices.is_empty() {
                    return 0;
                }
                slices[0] = std::io::IoSlice::new(out);
                1
            }
        }
    }

    /// The next send for a runtime that can call `sendfile`: without TLS, a site's large bodies come
    /// as file spans; with TLS, the records, as [`Layer::output_slices`].
    pub fn output_next<'a>(
        &'a self,
        conn: &'a Connection,
        slices: &mut [std::io::IoSlice<'a>],
    ) -> crate::conn::output::Next {
        match self {
            Layer::Plain => conn.output_next(slices),
            #[cfg(target_os = "linux")]
            Layer::Tls(_) => match self.output_slices(conn, slices) {
                0 => crate::conn::output::Next::Nothing,
                count => crate::conn::output::Next::Slices {
                    count,
                    file_follows: false,
                },
            },
        }
    }

    /// A send of [`Layer::output`] is in flight: those bytes stay put until [`Layer::sent`].
    pub fn send_started(&mut self, conn: &mut Connection) {
        match self {
            Layer::Plain => conn.send_started(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.send_started(),
        }
    }

    pub fn sent(&mut self, conn: &mut Connection, n: usize, now: Instant, env: Env) {
        match self {
            Layer::Plain => conn.sent(n, now, env),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.on_sent(conn, n, now, env),
        }
    }

    pub fn wants_input(&self, conn: &Connection) -> bool {
        match self {
            Layer::Plain => conn.wants_input(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.wants_input(conn),
        }
    }

    /// See [`Connection::pauses_input`].
    pub fn pauses_input(&self, conn: &Connection) -> bool {
        match self {
            Layer::Plain => conn.pauses_input(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.pauses_input(conn),
        }
    }

    pub fn status(&self, conn: &Connection) -> Status {
        match self {
            Layer::Plain => conn.status(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.status(conn),
        }
    }

    pub fn deadline(&self, conn: &Connection) -> (Instant, Timer) {
        match self {
            Layer::Plain => conn.deadline(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.deadline(conn),
        }
    }

    /// The socket reached its end or failed.
    pub fn peer_closed(&mut self, conn: &mut Connection, env: Env) {
        #[cfg(not(target_os = "linux"))]
        let _ = env;
        match self {
            Layer::Plain => conn.peer_closed(),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.on_peer_closed(conn, env),
        }
    }

    pub fn on_deadline(&mut self, conn: &mut Connection, now: Instant, env: Env) {
        match self {
            Layer::Plain => conn.on_deadline(now, env),
            #[cfg(target_os = "linux")]
            Layer::Tls(t) => t.on_deadline(conn, now, env),
        }
    }
}
