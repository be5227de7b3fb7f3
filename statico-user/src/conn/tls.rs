//! HTTPS: the TLS record layer between a runtime's bytes and the [`Connection`], with rustls.
//!
//! The layer is pure like the connection: ciphertext in, plaintext to the connection; the connection's
//! output in, records out — rustls's buffer-oriented `ServerConnection` (`read_tls`,
//! `process_new_packets`, `writer`, `write_tls`), no I/O of its own. Both runtimes use this one
//! implementation through [`Layer`], rather than tokio using tokio-rustls: one policy for handshake
//! deadlines, backpressure on records, and the answer to plain HTTP on the TLS port, and io_uring keeps
//! owning its buffers (the ciphertext buffer is frozen while the kernel sends it, exactly like the
//! connection's plaintext one). A later kTLS offload would replace this layer's record work and nothing
//! else.
//!
//! Configuration: `--tls-cert`/`--tls-key` (PEM), or `--tls-self-signed` (ECDSA P-256, made at start-up,
//! optionally saved with `--tls-self-signed-out`); TLS 1.3 and 1.2 (`--tls-min`), rustls's forward-secret
//! AEAD suites with the aws-lc-rs provider in the server's order, AES-128-GCM first ([`provider`]), ALPN `http/1.1` (and `h2` first with `--http2`: the
//! connection then recognises HTTP/2's preface as it does on a cleartext port, and the runtime carries
//! the session on for the `h2` crate: tokio as a stream, io_uring between its ring and the HTTP/2 pipe).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use statico_common::Counter;

use crate::conn::connection::{Connection, Env, Status, Timer, MAX_UNSENT};

/// What a `--tls-*` set of flags asks for.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    pub self_signed: bool,
    pub self_signed_out: Option<std::path::PathBuf>,
    /// Oldest version accepted: "1.2" or "1.3".
    pub min: String,
    /// The listen address, named in a self-signed certificate too.
    pub address: Option<std::net::IpAddr>,
    /// `--http2`: ALPN offers `h2` first.
    pub h2: bool,
    /// `--tls-tickets`: TLS 1.3 tickets sent after each full handshake; 0 turns resumption off
    /// (tickets and TLS 1.2 session IDs alike).
    pub tickets: usize,
}

/// The server's TLS configuration and the start-up line that describes it.
pub fn server_config(opts: &TlsOptions) -> Result<Option<(Arc<ServerConfig>, String)>> {
    let (certs, key, what) = match (&opts.cert, &opts.key, opts.self_signed) {
        (Some(cert), Some(key), false) => {
            let (c, k) = load_pem(cert, key)?;
            (c, k, format!("certificate {}", cert.display()))
        }
        (None, None, true) => self_signed(opts)?,
        (None, None, false) => return Ok(None),
        _ => bail!("--tls-cert and --tls-key go together, and not with --tls-self-signed"),
    };
    let fingerprint = sha256_hex(certs[0].as_ref());
    let warning = validity_warning(certs[0].as_ref(), std::time::SystemTime::now());
    let versions: &[&rustls::SupportedProtocolVersion] = if opts.min == "1.3" {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let provider = Arc::new(provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("--tls-key does not fit --tls-cert ({e}): give the key the certificate was made for"))?;
    config.ignore_client_order = true;
    config.alpn_protocols = if opts.h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    resumption(&mut config, opts.tickets)?;
    let mut line = format!(
        "TLS {}+ with {what}, SHA-256 fingerprint {fingerprint}",
        opts.min
    );
    if let Some(warning) = warning {
        line.push_str(&format!("\nwarning: {warning}"));
    }
    Ok(Some((Arc::new(config), line)))
}

/// aws-lc-rs with its forward-secret AEAD suites, AES-128-GCM first. The server's order wins
/// (`ignore_client_order`): OpenSSL clients list AES-256-GCM with SHA-384 first, whose handshake hashing
/// costs more than the rest of the key schedule, for no gain a benchmark node needs; a client without
/// AES-128-GCM still gets AES-256-GCM or ChaCha20-Poly1305.
pub(crate) fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::aws_lc_rs::cipher_suite as suite;
    rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            suite::TLS13_AES_128_GCM_SHA256,
            suite::TLS13_AES_256_GCM_SHA384,
            suite::TLS13_CHACHA20_POLY1305_SHA256,
            suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::aws_lc_rs::default_provider()
    }
}

/// Session resumption: stateless tickets (rotating keys, aws-lc-rs) for TLS 1.3 and 1.2, and a
/// 1.2 session-ID cache, or none of it with `--tls-tickets 0`.
fn resumption(config: &mut ServerConfig, tickets: usize) -> Result<()> {
    config.send_tls13_tickets = tickets;
    if tickets == 0 {
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        return Ok(());
    }
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
        .map_err(|e| anyhow::anyhow!("cannot make session-ticket keys: {e}"))?;
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    Ok(())
}

/// A PEM chain and key from files, with an error that names the flag and the fix.
fn load_pem(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let cert_text = std::fs::read(cert)
        .with_context(|| format!("--tls-cert {}: cannot read it", cert.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_text)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: not PEM ({e})", cert.display()))?;
    if certs.is_empty() {
        bail!(
            "--tls-cert {}: no certificate in it (expected -----BEGIN CERTIFICATE-----)",
            cert.display()
        );
    }
    let key_text = std::fs::read(key)
        .with_context(|| format!("--tls-key {}: cannot read it", key.display()))?;
    if key_text.windows(9).any(|w| w == b"ENCRYPTED") {
        bail!("--tls-key {}: the key is encrypted; decrypt it first (openssl pkey -in KEY -out PLAIN)", key.display());
    }
    let key_der = PrivateKeyDer::from_pem_slice(&key_text).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key {}: no private key in it ({e}); expected PKCS#8, SEC1 or PKCS#1 PEM",
            key.display()
        )
    })?;
    Ok((certs, key_der))
}

/// An ECDSA P-256 certificate for localhost, 127.0.0.1, ::1 and the listen address, valid for a year,
/// kept in memory and written to `--tls-self-signed-out` if asked.
fn self_signed(
    opts: &TlsOptions,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String)> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if let Some(addr) = opts.address.filter(|a| !a.is_unspecified()) {
        names.push(addr.to_string());
    }
    names.sort();
    names.dedup();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(names.clone())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "statico self-signed");
    // Valid from an hour ago (a client's clock may lag) for a year: long enough for any run.
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(365);
    let cert = params.self_signed(&key)?;
    let mut what = format!("a self-signed certificate for {}", names.join(", "));
    if let Some(dir) = &opts.self_signed_out {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(dir.join("cert.pem"), cert.pem()))
            .and_then(|()| std::fs::write(dir.join("key.pem"), key.serialize_pem()))
            .with_context(|| {
                format!(
                    "--tls-self-signed-out {}: cannot write cert.pem and key.pem there",
                    dir.display()
                )
            })?;
        what.push_str(&format!(" (saved in {})", dir.display()));
    }
    let key_der = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| anyhow::anyhow!("the generated key: {e}"))?;
    Ok((vec![cert.der().clone()], key_der, what))
}

/// Why clients will refuse this certificate at `now`, if its validity period says they will: statico
/// serves it anyway (a test of a client's error path may want exactly that), and says so.
fn validity_warning(der: &[u8], now: std::time::SystemTime) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let now = now.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64;
    let validity = cert.validity();
    if now > validity.not_after.timestamp() {
        Some(format!(
            "the certificate expired on {}: clients that check it will refuse it",
            validity.not_after
        ))
    } else if now < validity.not_before.timestamp() {
        Some(format!(
            "the certificate is not valid before {}: clients that check it will refuse it",
            validity.not_before
        ))
    } else {
        None
    }
}

fn sha256_hex(der: &[u8]) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    d.as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A record or plaintext buffer larger than this is freed once empty rather than kept.
const KEEP_CAPACITY: usize = 2048;

/// What nginx answers plain HTTP sent to its TLS port with, in plain HTTP, before closing.
const PLAIN_HTTP_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 50\r\nConnection: close\r\n\r\nThis is an HTTPS port: the request was plain HTTP.\n";

/// One connection's TLS state: rustls's session and the records waiting to be sent.
pub struct TlsSession {
    tls: rustls::ServerConnection,
    /// Records to send; the first `sent` bytes are gone; frozen while `in_flight`.
    out: Vec<u8>,
    sent: usize,
    in_flight: bool,
    /// Decrypted bytes on their way to the connection.
    plain: Vec<u8>,
    /// Nothing arrived yet (a plain HTTP request is recognised in the first bytes).
    fresh: bool,
    /// The handshake must be done by then (`--header-timeout` from accept).
    handshake_by: Instant,
    /// The session failed (bad records, an alert sent): close once the records are out.
    failed: bool,
    close_notify_sent: bool,
    /// The handshake's outcome has been reported (`-v`).
    reported: bool,
}

impl TlsSession {
    fn new(config: &Arc<ServerConfig>, handshake_by: Instant) -> Result<Self, rustls::Error> {
        Ok(TlsSession {
            tls: rustls::ServerConnection::new(config.clone())?,
            out: Vec::new(),
            sent: 0,
            in_flight: false,
            plain: Vec::new(),
            fresh: true,
            handshake_by,
            failed: false,
            close_notify_sent: false,
            reported: false,
        })
    }

    fn receive(&mut self, data: &[u8], conn: &mut Connection, now: Instant, env: Env) {
        env.counters.add(Counter::TlsBytesIn, data.len() as u64);
        if std::mem::take(&mut self.fresh) && looks_like_plain_http(data) {
            self.out.extend_from_slice(PLAIN_HTTP_ON_TLS);
            env.counters.add(Counter::Status400, 1);
            self.fail(Counter::TlsPlainHttp, env);
            return;
        }
        let mut rest = data;
        while !rest.is_empty() && !self.failed {
            if self.tls.read_tls(&mut rest).is_err() {
                self.fail(Counter::TlsBadRecord, env); // a record longer than TLS allows
                break;
            }
            match self.tls.process_new_packets() {
                Ok(state) => {
                    let closed = state.peer_has_closed();
                    self.report_handshake(env);
                    self.deliver(conn, now, env);
                    if closed {
                        conn.peer_closed();
                    }
                }
                // An alert is queued (unless the client sent one): `pump` sends it.
                Err(e) => self.fail(failure_cause(&e), env),
            }
        }
        self.pump(conn, now, env);
    }

    /// The session has failed: counted once, by cause; the connection closes once its records are out.
    fn fail(&mut self, cause: Counter, env: Env) {
        if !self.failed {
            self.failed = true;
            env.counters.add(Counter::TlsFailures, 1);
            env.counters.add(cause, 1);
        }
    }

    /// Once per connection, when the handshake is done: counted, and with `-v` the version, suite and
    /// ALPN it agreed on.
    fn report_handshake(&mut self, env: Env) {
        if self.reported || self.tls.is_handshaking() {
            return;
        }
        self.reported = true;
        let resumed = matches!(
            self.tls.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed)
        );
        env.counters.add(Counter::TlsHandshakes, 1);
        env.counters.add(Counter::TlsResumed, resumed as u64);
        if env.policy.verbose == 0 {
            return;
        }
        let version = self.tls.protocol_version().map(|v| format!("{v:?}"));
        let suite = self
            .tls
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()));
        let alpn = self
            .tls
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        crate::observe::dump::Dumper::new(env.policy.verbose).tls(&format!(
            "{} {} ALPN {}{}",
            version.unwrap_or_default(),
            suite.unwrap_or_default(),
            alpn.as_deref().unwrap_or("none"),
            if resumed { ", resumed" } else { "" }
        ));
    }

    /// Hands the decrypted bytes to the connection.
    fn deliver(&mut self, conn: &mut Connection, now: Instant, env: Env) {
        self.plain.clear();
        let _ = self.tls.reader().read_to_end(&mut self.plain);
        if !self.plain.is_empty() {
            conn.receive(&self.plain, now, env);
        }
        if self.plain.capacity() > KEEP_CAPACITY {
            self.plain = Vec::new();
        }
    }

    /// Moves the connection's output into records, while the records waiting are few and no send of
    /// them is in flight; then queues whatever rustls has to say (handshake, alerts, close_notify).
    fn pump(&mut self, conn: &mut Connection, now: Instant, env: Env) {
        if self.in_flight {
            return;
        }
        if !self.tls.is_handshaking() && !self.failed {
            while !conn.output().is_empty() && self.out.len() - self.sent < MAX_UNSENT {
                let n = self.tls.writer().write(conn.output()).unwrap_or(0);
                if n == 0 {
                    break;
                }
                conn.taken(n, now, env);
            }
            if matches!(conn.status(), Status::Close | Status::ShutdownWrite)
                && !self.close_notify_sent
            {
                self.tls.send_close_notify();
                self.close_notify_sent = true;
            }
        }
        while self.tls.wants_write() {
            if self.tls.write_tls(&mut self.out).is_err() {
                break;
            }
        }
    }

    fn sent(&mut self, n: usize, conn: &mut Connection, now: Instant, env: Env) {
        env.counters.add(Counter::TlsBytesOut, n as u64);
        env.counters.add(Counter::Writes, u64::from(n > 0));
        self.in_flight = false;
        self.sent += n;
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            if self.out.capacity() > KEEP_CAPACITY {
                self.out = Vec::new(); // the handshake's flight, a large body: not kept while idle
            }
        }
        self.pump(conn, now, env);
    }
}

/// The failure counter for an error from rustls: nothing in common, the client's own alert, or else a
/// record that does not parse, decrypt or follow the protocol.
fn failure_cause(e: &rustls::Error) -> Counter {
    match e {
        rustls::Error::PeerIncompatible(_) => Counter::TlsNoCommon,
        rustls::Error::AlertReceived(_) => Counter::TlsAbandoned,
        _ => Counter::TlsBadRecord,
    }
}

/// Whether the first bytes on a TLS port are an HTTP/1 request line rather than a TLS record.
fn looks_like_plain_http(data: &[u8]) -> bool {
    let word: Vec<u8> = data
        .iter()
        .take_while(|b| b.is_ascii_uppercase())
        .copied()
        .collect();
    !word.is_empty() && data.get(word.len()) == Some(&b' ')
}

impl TlsSession {
    /// A session for a new connection, whose handshake must be done `header_timeout` from `now`.
    pub fn start(
        config: &Arc<ServerConfig>,
        now: Instant,
        header_timeout: Duration,
    ) -> Option<Self> {
        TlsSession::new(config, now + header_timeout).ok()
    }

    pub fn on_receive(&mut self, conn: &mut Connection, data: &[u8], now: Instant, env: Env) {
        self.receive(data, conn, now, env);
    }

    pub fn output(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    pub fn send_started(&mut self) {
        self.in_flight = true;
    }

    pub fn on_sent(&mut self, conn: &mut Connection, n: usize, now: Instant, env: Env) {
        self.sent(n, conn, now, env);
    }

    pub fn wants_input(&self, conn: &Connection) -> bool {
        if self.failed {
            false
        } else if self.tls.is_handshaking() {
            true
        } else {
            conn.wants_input() && self.out.len() - self.sent < MAX_UNSENT
        }
    }

    pub fn pauses_input(&self, conn: &Connection) -> bool {
        !self.failed && conn.pauses_input()
    }

    /// The connection's status, held open while records (a response, an alert, close_notify) are
    /// still to be sent.
    pub fn status(&self, conn: &Connection) -> Status {
        if conn.is_closed() {
            // The peer is gone or timed out: records left unsent stay so (a stalled client's are
            // dropped by a reset).
            return conn.status();
        }
        let records_out = self.out.len() == self.sent && !self.in_flight;
        match conn.status() {
            Status::Close if !records_out => Status::Open,
            _ if self.failed && records_out => Status::Close,
            _ if self.failed => Status::Open,
            // Lingering under TLS would need the close_notify exchange; close once it is sent.
            Status::ShutdownWrite if records_out => Status::Close,
            Status::ShutdownWrite => Status::Open,
            // HTTP/2 (after ALPN h2, the client's preface): once every record is out.
            Status::Upgrade if !records_out => Status::Open,
            // A reset (a route's fault) after what was answered before it, without close_notify.
            Status::Reset if !records_out => Status::Open,
            s => s,
        }
    }

    /// While handshaking, `--header-timeout` from accept; then the connection's own deadline.
    pub fn deadline(&self, conn: &Connection) -> (Instant, Timer) {
        if self.tls.is_handshaking() {
            (self.handshake_by.min(conn.deadline().0), Timer::Header)
        } else {
            conn.deadline()
        }
    }

    /// The established session, for a runtime that carries on with HTTP/2 over it.
    pub fn into_session(self) -> rustls::ServerConnection {
        self.tls
    }

    /// The socket reached its end or failed: a client that sent part of a handshake and left counts
    /// as abandoned (one that connected and sent nothing, a TCP health check, does not).
    pub fn on_peer_closed(&mut self, conn: &mut Connection, env: Env) {
        if self.tls.is_handshaking() && !self.fresh {
            self.fail(Counter::TlsAbandoned, env);
        }
        conn.peer_closed();
    }

    pub fn on_deadline(&mut self, conn: &mut Connection, now: Instant, env: Env) {
        if self.tls.is_handshaking() {
            if now >= self.handshake_by {
                env.counters.add(Counter::Timeouts, 1);
                self.fail(Counter::TlsTimeouts, env);
                conn.peer_closed();
            }
            return;
        }
        conn.on_deadline(now, env);
        self.pump(conn, now, env);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_recognised_on_the_tls_port() {
        assert!(looks_like_plain_http(b"GET / HTTP/1.1\r\n"));
        assert!(looks_like_plain_http(b"OPTIONS * HTTP/1.1\r\n"));
        assert!(!looks_like_plain_http(&[0x16, 0x03, 0x01, 0x00, 0xa5]));
        assert!(!looks_like_plain_http(b"get / HTTP/1.1"));
    }

    #[test]
    fn an_expired_or_not_yet_valid_certificate_is_warned_about() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let der = params.self_signed(&key).unwrap().der().to_vec();
        let at = |y: u64| std::time::UNIX_EPOCH + Duration::from_secs((y - 1970) * 365 * 86_400);
        let expired = validity_warning(&der, at(2026)).unwrap();
        assert!(
            expired.contains("expired on") && expired.contains("2021"),
            "{expired}"
        );
        let early = validity_warning(&der, at(2019)).unwrap();
        assert!(
            early.contains("not valid before") && early.contains("2020"),
            "{early}"
        );
        assert_eq!(
            validity_warning(&der, at(2020) + Duration::from_secs(86_400 * 60)),
            None
        );
    }

    #[test]
    fn a_self_signed_configuration_names_its_fingerprint() {
        let opts = TlsOptions {
            self_signed: true,
            min: "1.2".into(),
            ..TlsOptions::default()
        };
        let (_, line) = server_config(&opts).unwrap().unwrap();
        assert!(
            line.contains("self-signed") && line.contains("SHA-256 fingerprint"),
            "{line}"
        );
        assert_eq!(line.rsplit(' ').next().unwrap().len(), 32 * 3 - 1, "{line}");
    }
}
