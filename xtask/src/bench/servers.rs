//! The servers a benchmark runs: statico (any flags), nginx from Debian (HTTP/1.1, h2c, TLS, a site,
//! an echo of one body), Caddy from Debian (the HTTP/3 peer), Fortio's echo server (the peer of
//! `--routes`) and its gRPC ping server with grpc-go's interop server (the peers of `--grpc`),
//! go-httpbin (the peer of `--stream`), the FastAPI OpenAI mock under uvicorn (the peer of
//! `--openai`), the peers under `bench/peers/`, and the certificate the TLS and QUIC modes give them
//! all. Each runs behind the guard [`ServerUnderTest`] (`crate::tools::server`), so no mode can leak
//! a server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::measure::BODY;
use crate::setup::which;
use crate::tools::net::free_port;
use crate::tools::pinned;
use crate::tools::server::{start_statico, ServerUnderTest};

/// The suite's statico flags: one worker on `runtime`, answering [`BODY`] as text/plain.
pub fn statico_args(runtime: &str) -> [&str; 8] {
    [
        "-t",
        "1",
        "-b",
        BODY,
        "-H",
        "Content-Type: text/plain",
        "--runtime",
        runtime,
    ]
}

/// statico with [`statico_args`], pinned to `cpus`.
pub fn statico_on(root: &Path, cpus: &str, runtime: &str) -> Result<ServerUnderTest> {
    let name = format!("statico-{runtime}");
    start_statico(root, &name, Some(cpus), &statico_args(runtime))
}

/// How nginx listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nginx<'a> {
    Http1,
    /// HTTP/1.1 with `listen … deferred` (TCP_DEFER_ACCEPT): accepted once the request has come.
    Deferred,
    /// Cleartext HTTP/2 (prior knowledge), for `--http2`.
    H2c,
    /// HTTPS with this certificate and key (PEM), TLS 1.2 and 1.3, session cache and tickets, and
    /// HTTP/2 by ALPN; the suites statico's in its order ([`NGINX_TLS12_SUITES`], AES-128-GCM first on
    /// both versions), so both servers agree on the same suite with a given client.
    Tls {
        cert: &'a Path,
        key: &'a Path,
    },
    /// The files under `root`, with precompressed siblings (`gzip_static`, `brotli_static`), the open
    /// file cache, sendfile and ETags.
    Site {
        root: &'a Path,
    },
    /// HTTP/1.1 answering `body` (ASCII, no quotes, `$` or backslashes) as application/octet-stream,
    /// with status 503 for `fail_percent` % of requests (drawn by `split_clients` on `$request_id`).
    Echo {
        body: &'a str,
        fail_percent: u8,
    },
}

/// nginx from Debian as a fair peer: one worker, no master, access log off, `return 200` with the
/// same body, keep-alive requests unlimited; its files under `dir/nginx`.
pub fn start_nginx(dir: &Path, cpus: &str, mode: Nginx<'_>) -> Result<ServerUnderTest> {
    let nginx = which("nginx").context("nginx is not installed (cargo xtask setup installs it)")?;
    let port = free_port()?;
    let ndir = dir.join("nginx");
    std::fs::create_dir_all(&ndir)?;
    let conf_path = ndir.join("nginx.conf");
    std::fs::write(&conf_path, nginx_conf(&ndir, port, mode))?;
    let mut cmd = pinned(Some(cpus), &nginx);
    cmd.arg("-p")
        .arg(&ndir)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(ndir.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let echo;
    let (name, listen) = match mode {
        Nginx::Http1 => ("nginx", ""),
        Nginx::Deferred => ("nginx deferred", "; listen deferred"),
        Nginx::H2c => ("nginx http2", "; http2"),
        Nginx::Tls { .. } => (
            "nginx https",
            "; ssl http2; TLSv1.2 TLSv1.3 (AES-128-GCM first, server order); ssl_session_cache; tickets",
        ),
        Nginx::Site { .. } => (
            "nginx",
            "; root, gzip_static, brotli_static, open_file_cache, sendfile, etag",
        ),
        Nginx::Echo { fail_percent, .. } => {
            echo = format!(
                " of {} bytes; 503 for {fail_percent}% (split_clients $request_id)",
                mode_body_len(mode)
            );
            ("nginx", echo.as_str())
        }
    };
    let command = format!("taskset -c {cpus} nginx -c {} (worker_processes 1; master_process off; access_log off; keepalive_requests 100000000; return 200{listen})", conf_path.display());
    let mut s = ServerUnderTest::spawn(name, command, cmd, port)?;
    s.tls = matches!(mode, Nginx::Tls { .. });
    Ok(s)
}

/// nginx as the proxy in front of `upstreams` (their ports on 127.0.0.1), one listening port for each,
/// with `proxy_pass` as its users leave it: HTTP/1.0 to the upstream, a new connection per request,
/// no `keepalive`; one worker pinned to `cpus`, access log off, keep-alive from clients unlimited.
/// Returns the proxy and its ports, in the order of `upstreams`; its files under `dir`.
pub fn start_nginx_proxy(
    dir: &Path,
    cpus: &str,
    upstreams: &[u16],
) -> Result<(ServerUnderTest, Vec<u16>)> {
    let nginx = which("nginx").context("nginx is not installed (cargo xtask setup installs it)")?;
    std::fs::create_dir_all(dir)?;
    let d = dir.display();
    let fronts = upstreams
        .iter()
        .map(|_| free_port())
        .collect::<Result<Vec<u16>>>()?;
    let servers: String = fronts
        .iter()
        .zip(upstreams)
        .map(|(front, up)| {
            format!(
                "  server {{\n    listen 127.0.0.1:{front} backlog=4096;\n    location / {{ proxy_pass http://127.0.0.1:{up}; }}\n  }}\n"
            )
        })
        .collect();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  access_log off;\n  server_tokens off;\n  keepalive_requests 100000000;\n  keepalive_timeout 65;\n\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n{servers}}}\n"
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let mut cmd = pinned(Some(cpus), &nginx);
    cmd.arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let command = format!(
        "taskset -c {cpus} nginx -c {} (worker_processes 1; proxy_pass without upstream keepalive)",
        conf_path.display()
    );
    let proxy = ServerUnderTest::spawn("nginx proxy", command, cmd, fronts[0])?;
    Ok((proxy, fronts))
}

/// The body length of an [`Nginx::Echo`] (0 for the others).
fn mode_body_len(mode: Nginx<'_>) -> usize {
    match mode {
        Nginx::Echo { body, .. } => body.len(),
        _ => 0,
    }
}

/// The `location /` block (and what it needs at `http` level) of a mode that answers one body.
fn nginx_location(mode: Nginx<'_>) -> (String, String) {
    match mode {
        Nginx::Echo { body, fail_percent } if fail_percent > 0 => (
            format!("  split_clients \"${{request_id}}\" $fail {{ {fail_percent}% 1; * \"\"; }}\n"),
            format!("location / {{ default_type application/octet-stream; if ($fail) {{ return 503 \"{body}\"; }} return 200 \"{body}\"; }}"),
        ),
        Nginx::Echo { body, .. } => (
            String::new(),
            format!("location / {{ default_type application/octet-stream; return 200 \"{body}\"; }}"),
        ),
        _ => (
            String::new(),
            format!("location / {{ default_type text/plain; return 200 \"{BODY}\"; }}"),
        ),
    }
}

/// nginx's TLS 1.2 suites, statico's (`conn::tls::provider`) in the same order: OpenSSL clients list
/// AES-256-GCM with SHA-384 first, which nginx would otherwise follow while statico takes AES-128-GCM.
const NGINX_TLS12_SUITES: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
     ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:\
     ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

fn nginx_conf(ndir: &Path, port: u16, mode: Nginx<'_>) -> String {
    let d = ndir.display();
    let h2 = "  http2_max_requests 100000000;\n  http2_max_concurrent_streams 256;\n";
    let tls;
    let (split, location) = nginx_location(mode);
    let (listen, h2) = match mode {
        Nginx::Http1 | Nginx::Echo { .. } => ("backlog=4096", ""),
        Nginx::Deferred => ("backlog=4096 deferred", ""),
        Nginx::H2c => ("http2", h2),
        Nginx::Site { root } => return nginx_site_conf(&d.to_string(), port, root),
        Nginx::Tls { cert, key } => {
            tls = format!(
                "{h2}  ssl_certificate {};\n  ssl_certificate_key {};\n  ssl_protocols TLSv1.2 TLSv1.3;\n  ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;\n  ssl_ciphers {NGINX_TLS12_SUITES};\n  ssl_prefer_server_ciphers on;\n  ssl_session_cache shared:SSL:10m;\n  ssl_session_tickets on;\n",
                cert.display(),
                key.display()
            );
            ("ssl http2 backlog=4096", tls.as_str())
        }
    };
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  access_log off;\n  server_tokens off;\n  keepalive_requests 100000000;\n  keepalive_timeout 65;\n{h2}{split}\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{\n    listen 127.0.0.1:{port} {listen};\n    {location}\n  }}\n}}\n"
    )
}

/// nginx serving the files under `root` as a static site, as its users would configure it to be fast.
fn nginx_site_conf(d: &str, port: u16, root: &Path) -> String {
    format!(
        "load_module /usr/lib/nginx/modules/ngx_http_brotli_static_module.so;\n\
         daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log crit;\n\
         events {{ worker_connections 20000; }}\n\
         http {{\n  include /etc/nginx/mime.types;\n  access_log off;\n  log_not_found off;\n  server_tokens off;\n\
         keepalive_requests 100000000;\n  keepalive_timeout 65;\n  sendfile on;\n  tcp_nopush on;\n  etag on;\n\
         gzip_static on;\n  brotli_static on;\n  gzip_vary on;\n\
         open_file_cache max=20000 inactive=60s;\n  open_file_cache_valid 60s;\n  open_file_cache_errors on;\n\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{\n    listen 127.0.0.1:{port} backlog=4096;\n    root {};\n  }}\n}}\n",
        root.display()
    )
}

/// A run's certificate and key (PEM files), which every server of a TLS or QUIC mode loads.
pub struct Cert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Cert {
    /// statico's flags for it, TLS 1.3 only.
    pub fn statico_args(&self) -> [&str; 6] {
        [
            "--tls-cert",
            self.cert.to_str().unwrap_or_default(),
            "--tls-key",
            self.key.to_str().unwrap_or_default(),
            "--tls-min",
            "1.3",
        ]
    }

    pub fn nginx(&self) -> Nginx<'_> {
        Nginx::Tls {
            cert: &self.cert,
            key: &self.key,
        }
    }
}

/// An ECDSA P-256 certificate for localhost and 127.0.0.1, made with openssl.
pub fn certificate(dir: &Path) -> Result<Cert> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"]) // an end entity, which rustls checks
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("run openssl (cargo xtask setup installs it)")?;
    if !status.status.success() {
        bail!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    }
    Ok(Cert { cert, key })
}

/// Caddy from Debian as the HTTP/3 peer: HTTP/1.1, HTTP/2 and HTTP/3 (quic-go) on one port with the
/// run's certificate, `respond` with the same body and Content-Type, admin API and logs off, one Go
/// scheduler thread (`GOMAXPROCS=1`), pinned to `cpus`; its files (Caddyfile, storage) under
/// `dir/caddy`.
pub fn start_caddy(dir: &Path, cpus: &str, cert: &Cert) -> Result<ServerUnderTest> {
    let caddy = which("caddy").context("caddy is not installed (cargo xtask setup installs it)")?;
    let port = free_port()?;
    let cdir = dir.join("caddy");
    std::fs::create_dir_all(&cdir)?;
    let conf_path = cdir.join("Caddyfile");
    std::fs::write(&conf_path, caddyfile(&cdir, port, cert))?;
    let mut cmd = pinned(Some(cpus), &caddy);
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&conf_path)
        .env("GOMAXPROCS", "1")
        .env("HOME", &cdir)
        .env("XDG_CONFIG_HOME", cdir.join("config"))
        .env("XDG_DATA_HOME", cdir.join("data"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(cdir.join("caddy.log"))?);
    let command = format!(
        "GOMAXPROCS=1 taskset -c {cpus} caddy run --config {} (admin off; logs discarded; protocols h1 h2 h3; tls cert key; respond 200)",
        conf_path.display()
    );
    let mut s = ServerUnderTest::spawn("caddy", command, cmd, port).with_context(|| {
        let log = std::fs::read_to_string(cdir.join("caddy.log")).unwrap_or_default();
        format!("caddy did not start: {}", log.trim())
    })?;
    s.tls = true;
    Ok(s)
}

/// The Caddyfile: one HTTPS site on 127.0.0.1:`port` answering [`BODY`] as text/plain (Caddy's own
/// `Server` and `Alt-Svc` headers kept, as statico sends its own).
fn caddyfile(cdir: &Path, port: u16, cert: &Cert) -> String {
    format!(
        "{{\n\tadmin off\n\tauto_https off\n\tstorage file_system {}\n\tlog {{\n\t\toutput discard\n\t}}\n\
         \tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\
         https://:{port} {{\n\tbind 127.0.0.1\n\ttls {} {}\n\theader Content-Type text/plain\n\trespond \"{BODY}\" 200\n}}\n",
        cdir.join("data").display(),
        cert.cert.display(),
        cert.key.display()
    )
}

/// Fortio's echo server (`go install`ed by `cargo xtask setup`) as the peer of `bench --routes`: its
/// HTTP echo only (gRPC, redirect, TCP/UDP echo and UI off), quiet, one Go scheduler thread
/// (`GOMAXPROCS=1`), pinned to `cpus`; what it answers is asked per request
/// (`/echo?size=1024&delay=10ms&status=503:10`). Its files (log, data dir) under `dir/fortio`.
pub fn start_fortio(dir: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let serve = ["-http-port", &listen, "-grpc-port", "disabled"];
    start_fortio_serving(dir, cpus, port, &serve, "gRPC")
}

/// Fortio's gRPC server as the peer of `bench --grpc`: its ping (`fgrpc.PingServer/Ping`) and
/// health services on `port`, the rest as [`start_fortio`] has it (and its HTTP echo off).
pub fn start_fortio_grpc(dir: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let serve = ["-grpc-port", &listen, "-http-port", "disabled"];
    start_fortio_serving(dir, cpus, port, &serve, "HTTP echo")
}

/// `fortio server` with the listeners `serve` (the one on `port` awaited), `off` besides the
/// redirect, TCP/UDP echo and UI off, quiet, `GOMAXPROCS=1`, pinned to `cpus`; its files under
/// `dir/fortio`.
fn start_fortio_serving(
    dir: &Path,
    cpus: &str,
    port: u16,
    serve: &[&str],
    off: &str,
) -> Result<ServerUnderTest> {
    let fortio = crate::setup::fortio_path()
        .context("fortio is not installed (cargo xtask setup installs it)")?;
    let fdir = dir.join("fortio");
    std::fs::create_dir_all(&fdir)?;
    let unused = ["-redirect-port", "-tcp-port", "-udp-port"];
    let mut cmd = pinned(Some(cpus), &fortio);
    cmd.arg("server")
        .args(serve)
        .args(["-ui-path", "", "-quiet"])
        .args(unused.iter().flat_map(|flag| [*flag, "disabled"]))
        .env("GOMAXPROCS", "1")
        .current_dir(&fdir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(fdir.join("fortio.log"))?);
    let command = format!(
        "GOMAXPROCS=1 taskset -c {cpus} fortio server {} -ui-path '' -quiet ({off}, redirect, TCP/UDP echo disabled)",
        serve.join(" ")
    );
    ServerUnderTest::spawn("fortio", command, cmd, port).with_context(|| {
        let log = std::fs::read_to_string(fdir.join("fortio.log")).unwrap_or_default();
        format!("fortio did not start: {}", log.trim())
    })
}

/// grpc-go's interop server (`grpc-interop-server`, `go install`ed by `cargo xtask setup`) as the
/// EmptyCall peer of `bench --grpc`: plain text, one Go scheduler thread (`GOMAXPROCS=1`), pinned to
/// `cpus`. It takes only a port (and so listens on every address). Its log under `dir/grpc-go`.
pub fn start_grpc_go(dir: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let bin = crate::setup::interop_server_path().context(
        "grpc-go's interop server is not installed (cargo xtask setup installs it as grpc-interop-server)",
    )?;
    let port = free_port()?;
    let gdir = dir.join("grpc-go");
    std::fs::create_dir_all(&gdir)?;
    let flag = format!("-port={port}");
    let mut cmd = pinned(Some(cpus), &bin);
    cmd.arg(&flag)
        .env("GOMAXPROCS", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(gdir.join("grpc-go.log"))?);
    let command = format!("GOMAXPROCS=1 taskset -c {cpus} grpc-interop-server {flag}");
    ServerUnderTest::spawn("grpc-go", command, cmd, port).with_context(|| {
        let log = std::fs::read_to_string(gdir.join("grpc-go.log")).unwrap_or_default();
        format!("grpc-go's interop server did not start: {}", log.trim())
    })
}

/// go-httpbin (`go install`ed by `cargo xtask setup`) as the peer of `bench --stream`: its `/sse`
/// answers `count` events spread over `duration` (`/sse?count=50&duration=980ms`), logging off, one
/// Go scheduler thread (`GOMAXPROCS=1`), pinned to `cpus`. Its log under `dir/go-httpbin`.
pub fn start_go_httpbin(dir: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let bin = crate::setup::go_httpbin_path()
        .context("go-httpbin is not installed (cargo xtask setup installs it)")?;
    let port = free_port()?;
    let gdir = dir.join("go-httpbin");
    std::fs::create_dir_all(&gdir)?;
    let flags = [
        "-host",
        "127.0.0.1",
        "-port",
        &port.to_string(),
        "-log-level",
        "OFF",
    ];
    let mut cmd = pinned(Some(cpus), &bin);
    cmd.args(flags)
        .env("GOMAXPROCS", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(gdir.join("go-httpbin.log"))?);
    let command = format!(
        "GOMAXPROCS=1 taskset -c {cpus} go-httpbin {}",
        flags.join(" ")
    );
    ServerUnderTest::spawn("go-httpbin", command, cmd, port).with_context(|| {
        let log = std::fs::read_to_string(gdir.join("go-httpbin.log")).unwrap_or_default();
        format!("go-httpbin did not start: {}", log.trim())
    })
}

/// The OpenAI mock `bench --openai` runs as its peer, as its report names it.
pub const FASTAPI_MOCK: &str =
    "bench/peers/fastapi/mock.py (FastAPI, asyncio.sleep per token) under uvicorn --workers 1";

/// The FastAPI OpenAI mock (`bench/peers/fastapi/mock.py`, FastAPI and uvicorn installed by `cargo
/// xtask setup`) under uvicorn with one worker (one process: uvloop and httptools where installed),
/// sleeping `gap_ms` before each token, its access log off, pinned to `cpus`. Its log under
/// `dir/fastapi`.
pub fn start_fastapi_mock(
    root: &Path,
    dir: &Path,
    cpus: &str,
    gap_ms: u32,
) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let fdir = dir.join("fastapi");
    std::fs::create_dir_all(&fdir)?;
    let app_dir = root.join("bench/peers/fastapi");
    let port_s = port.to_string();
    let flags = [
        "-m",
        "uvicorn",
        "mock:app",
        "--workers",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        &port_s,
        "--log-level",
        "warning",
        "--no-access-log",
    ];
    let mut cmd = pinned(Some(cpus), "python3");
    cmd.args(flags)
        .arg("--app-dir")
        .arg(&app_dir)
        .env("MOCK_GAP_MS", gap_ms.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(fdir.join("uvicorn.log"))?);
    let command = format!(
        "MOCK_GAP_MS={gap_ms} taskset -c {cpus} python3 {} --app-dir bench/peers/fastapi",
        flags.join(" ")
    );
    ServerUnderTest::spawn("fastapi-uvicorn", command, cmd, port).with_context(|| {
        let log = std::fs::read_to_string(fdir.join("uvicorn.log")).unwrap_or_default();
        format!(
            "uvicorn did not start (cargo xtask setup installs it): {}",
            log.trim()
        )
    })
}

/// An optional peer: a few-line server in `bench/peers/<dir>`.
pub struct Peer {
    pub name: &'static str,
    dir: &'static str,
    toolchain: &'static str,
}

pub const PEERS: [Peer; 3] = [
    Peer {
        name: "hyper",
        dir: "hyper",
        toolchain: "cargo",
    },
    Peer {
        name: "actix-web",
        dir: "actix",
        toolchain: "cargo",
    },
    Peer {
        name: "go-fasthttp",
        dir: "fasthttp",
        toolchain: "go",
    },
];

/// Builds a peer from its registry packages into `target/peers`; returns the binary.
pub fn build_peer(root: &Path, peer: &Peer) -> Result<PathBuf> {
    let src = root.join("bench/peers").join(peer.dir);
    let out = root.join("target/peers");
    if peer.toolchain != "cargo" && which(peer.toolchain).is_none() {
        bail!("{} is not installed", peer.toolchain);
    }
    eprintln!("bench: building peer {} in {}", peer.name, src.display());
    let status = if peer.toolchain == "cargo" {
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--quiet",
                "--release",
                "--locked",
                "--manifest-path",
            ])
            .arg(src.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&out)
            .status()?
    } else {
        std::fs::create_dir_all(out.join("release"))?;
        Command::new("go")
            .args(["build", "-o"])
            .arg(out.join("release").join("peer-fasthttp"))
            .arg(".")
            .current_dir(&src)
            .status()?
    };
    if !status.success() {
        bail!("building {} failed", peer.name);
    }
    let bin = match peer.dir {
        "hyper" => "peer-hyper",
        "actix" => "peer-actix",
        _ => "peer-fasthttp",
    };
    Ok(out.join("release").join(bin))
}

/// A built peer on a free port, pinned to `cpus`.
pub fn start_peer(peer: &Peer, bin: &Path, cpus: &str) -> Result<ServerUnderTest> {
    let port = free_port()?;
    let mut cmd = pinned(Some(cpus), bin);
    cmd.arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let command = format!("taskset -c {cpus} {} {port}", bin.display());
    ServerUnderTest::spawn(peer.name, command, cmd, port)
}
