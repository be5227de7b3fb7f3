//! What a full TLS 1.3 handshake costs a server before any system call: the two public-key
//! operations alone (an X25519 key share and its secret, an ECDSA P-256 signature: what no server
//! can skip), and rustls's whole server side of the handshake statico makes (same provider,
//! certificate kind and tickets), client and server in memory with only the server's calls timed.
//! The floor beside the kernel's share in `docs/performance.md` (new connections):
//!
//!     taskset -c 1 cargo run --release -p statico-user --example handshake_crypto

#[cfg(target_os = "linux")]
fn main() {
    let rounds = 5_000;
    for _ in 0..3 {
        let (share, sign) = public_key_operations(rounds);
        let server = rustls_server_side(rounds / 5);
        println!(
            "X25519 share + secret {share:.1} µs, ECDSA P-256 signature {sign:.1} µs \
             (together {:.1} µs); rustls's server side of a full handshake {server:.1} µs",
            share + sign
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("handshake_crypto: statico's TLS (aws-lc-rs) is built on Linux only");
}

/// µs per X25519 key share with its shared secret, and per ECDSA P-256 signature.
#[cfg(target_os = "linux")]
fn public_key_operations(rounds: u32) -> (f64, f64) {
    use aws_lc_rs::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
    use std::hint::black_box;
    use std::time::Instant;

    let rng = SystemRandom::new();
    let client = EphemeralPrivateKey::generate(&X25519, &rng).unwrap();
    let client = UnparsedPublicKey::new(&X25519, client.compute_public_key().unwrap());
    let started = Instant::now();
    for _ in 0..rounds {
        let key = EphemeralPrivateKey::generate(&X25519, &rng).unwrap();
        black_box(key.compute_public_key().unwrap());
        agreement::agree_ephemeral(key, &client, (), |secret| {
            black_box(secret);
            Ok(())
        })
        .unwrap();
    }
    let share = per_round(started, rounds);
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref()).unwrap();
    let transcript = [7u8; 130];
    let started = Instant::now();
    for _ in 0..rounds {
        black_box(key.sign(&rng, &transcript).unwrap());
    }
    (share, per_round(started, rounds))
}

/// µs of the server's own calls per full TLS 1.3 handshake with statico's TLS configuration
/// (that of `--tls-self-signed`: an ECDSA P-256 certificate, two tickets), tickets included.
#[cfg(target_os = "linux")]
fn rustls_server_side(rounds: u32) -> f64 {
    use rustls::pki_types::ServerName;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    use statico::conn::tls::{server_config, TlsOptions};

    let dir = std::env::temp_dir().join(format!("handshake-crypto-{}", std::process::id()));
    let options = TlsOptions {
        self_signed: true,
        self_signed_out: Some(dir.clone()),
        min: "1.2".into(),
        tickets: 2,
        ..TlsOptions::default()
    };
    let (server, _) = server_config(&options).unwrap().unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("cert.pem")).unwrap())
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let client = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let mut spent = Duration::ZERO;
    for _ in 0..rounds {
        let name = ServerName::try_from("localhost").unwrap();
        let mut c = rustls::ClientConnection::new(client.clone(), name).unwrap();
        let mut s = rustls::ServerConnection::new(server.clone()).unwrap();
        while c.is_handshaking() || s.is_handshaking() || c.wants_write() || s.wants_write() {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).unwrap();
            }
            let started = Instant::now();
            let mut read = &wire[..];
            while !read.is_empty() {
                s.read_tls(&mut read).unwrap();
            }
            s.process_new_packets().unwrap();
            wire.clear();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            spent += started.elapsed();
            let mut read = &wire[..];
            while !read.is_empty() {
                c.read_tls(&mut read).unwrap();
            }
            c.process_new_packets().unwrap();
            if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() && !s.wants_write() {
                break;
            }
        }
    }
    spent.as_secs_f64() * 1e6 / f64::from(rounds)
}

#[cfg(target_os = "linux")]
fn per_round(started: std::time::Instant, rounds: u32) -> f64 {
    started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
}
