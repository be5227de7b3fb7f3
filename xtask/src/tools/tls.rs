//! TLS clients of statico and its peers (rustls, with the provider statico uses): a configuration
//! trusting a run's certificate, and a handshake over a connected TCP stream.

use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};

/// The key exchange groups a client offers.
#[derive(Clone, Copy, Debug)]
pub enum Groups {
    /// The provider's defaults (a hybrid post-quantum group first).
    Default,
    /// X25519 only: OpenSSL 3.0's nginx knows no hybrid post-quantum group, and statico would pick
    /// one, and so pay more, if offered; a benchmark against nginx offers both the same.
    X25519,
}

/// A client trusting the certificates of the PEM file `cert`, offering `groups`.
pub fn client_config(cert: &Path, groups: Groups) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("read the certificate {}", cert.display()))?
    {
        roots.add(c?)?;
    }
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Groups::X25519 = groups {
        provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A TLS client connection over TCP.
pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// TLS over `tcp` (connected, its timeouts set) to "localhost", the handshake done.
pub fn handshake(config: &Arc<rustls::ClientConfig>, tcp: TcpStream) -> std::io::Result<TlsStream> {
    let name = ServerName::try_from("localhost").expect("a valid name");
    let conn =
        rustls::ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}
