//! `--http3`: HTTP/3 over QUIC on the same port as HTTPS, over UDP (Linux builds).
//!
//! QUIC is [quinn] 0.11 (its tokio runtime, and quinn-udp's GSO/GRO and batched `sendmmsg`/`recvmmsg`
//! underneath), HTTP/3 is [h3] 0.0.8 over h3-quinn 0.0.10. Loss recovery, congestion control, stream
//! flow control, QPACK and the HTTP/3 framing are theirs: each is a protocol of its own, well tested
//! there, and none of it is statico's job, which is answering requests with pre-built responses. Both
//! build on the workspace's rustc (1.95).
//!
//! TLS is rustls with the aws-lc-rs provider ([`crate::conn::tls`]'s suites), TLS 1.3 only (QUIC has no
//! other), ALPN `h3`, and the certificate and key the HTTPS port serves: the QUIC configuration shares
//! the TCP one's session-ticket keys, and its certificate through [`Following`], which asks the TCP
//! configuration in force: `--tls-self-signed`'s certificate is made once for both, and a SIGHUP
//! reload of `--tls-cert` applies to new QUIC handshakes as it does to new TLS ones.
//!
//! Sockets and threads: one UDP socket per worker, all bound to the port with `SO_REUSEPORT` (the
//! kernel hashes each client's 4-tuple to one of them, so a connection's packets reach one socket
//! while the client keeps its address), each served by a quinn [`quinn::Endpoint`] on a thread of its
//! own that runs a current-thread tokio runtime pinned to the worker's CPU. The QUIC threads are
//! separate from the workers' runtimes, so `--runtime tokio` and `--runtime io-uring` serve HTTP/3 the
//! same way; they write only the `quic_*` slots of their worker's counter record, which keeps one
//! writer per slot (and is why HTTP/3 requests are counted in `quic_requests`, not `requests`).
//!
//! Every request stream gets the catalog's answer as a [`StreamAnswer`](crate::catalog::StreamAnswer),
//! the form HTTP/2 sends too, so there is one definition of each answer; HEAD gets
//! the head only. A request body is read and dropped (over `--max-body-size` the stream is stopped).
//! `--idle-timeout` is QUIC's max idle timeout; at most [`MAX_STREAMS`] request streams are open at once
//! per connection (QUIC stream flow control holds a client back beyond it). On SIGINT/SIGTERM each
//! connection gets GOAWAY, its streams in flight finish, and the endpoint closes within
//! `--shutdown-timeout`. `-v` prints requests and statuses as HTTP/2's dump does;
//! `--receive-buffer-size`/`--send-buffer-size` size the UDP sockets too.
//!
//! Kernel assist: the connection IDs a worker issues carry its index ([`WorkerCids`]), and on the
//! ebpf steering rung an `SK_REUSEPORT` program on the UDP sockets (`statico_steer_quic`, attached by
//! `bpf::Kernel::attach_quic`) sends each packet that carries one to that worker's socket, so a client
//! whose address changes keeps reaching its connection; Initial packets go by CPU as TCP connections
//! do. Without it (no privileges, other rungs), the kernel hashes the 4-tuple: a client that changes
//! address lands on a worker that does not know it.
//!
//! Address validation: an Initial from an address not yet validated is answered with a Retry (a
//! stateless packet carrying a token the client must echo) when `--quic-retry` asks for it, or when
//! its worker already has [`RETRY_ABOVE`] handshakes in progress — so a flood of Initials from
//! spoofed addresses costs statico one small packet each, not a connection's state; a real client
//! pays one round trip more. The token key is shared by all workers (one `ServerConfig`), so the
//! retried Initial may reach any of them.
//!
//! Bad input is quinn's to refuse, and counted here: every datagram a socket receives is counted
//! ([`Counted`], `quic_datagrams_in`), and so is each connection's share (`quic_datagrams_for_conns`);
//! the difference is what reached no connection — garbage, truncated or undersized packets, unknown
//! versions (which quinn answers with Version Negotiation when the datagram is full-sized, RFC 9000
//! §5.2.2), Retry'd Initials, failed handshakes (counted on their own, too).

use std::cell::{Cell, RefCell};
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::task::Poll;
use std::time::{Duration, SystemTime};

pub mod guard;

use anyhow::{anyhow, Context, Result};
use bytes::{Buf, Bytes};
use statico_common::{Counter, QUIC_CID_LEN};

use crate::catalog::model::delivery::Step;
use crate::catalog::model::fault::Fault;
use crate::catalog::model::hold::PACE_TICK;
use crate::catalog::response::DateClock;
use crate::observe::meter::Counters;
use crate::proto::held;
use crate::shutdown;
use guard::{Guarded, GuardedBidi};

/// The HTTPS port's TLS configuration (`conn::layer::TlsConfig`), swapped whole on a SIGHUP reload:
/// QUIC follows its certificate and shares its ticket keys.
type TlsConfig = Arc<arc_swap::ArcSwap<rustls::ServerConfig>>;

/// Request streams a client may have open at once on one connection.
pub const MAX_STREAMS: u32 = 100;

/// Handshakes in progress on one worker above which Initials from unvalidated addresses get a Retry.
/// A benchmark's burst of new connections stays below it (50 clients connecting at once); a flood
/// goes over it within a few packets.
pub const RETRY_ABOVE: usize = 256;

/// HTTP/3's "no error" code, for GOAWAY closes (RFC 9114 §8.1).
const H3_NO_ERROR: u32 = 0x100;

/// After GOAWAY, once no stream is open, how long the client has to close before statico does (as
/// HTTP/2's grace): closing at once could drop response bytes not yet acknowledged.
const GOAWAY_GRACE: Duration = super::CLOSE_GRACE;

/// What HTTP/3 needs from the flags, besides the TLS configuration and the answers.
#[derive(Clone, Copy, Debug)]
pub struct Http3Options {
    pub idle_timeout: Duration,
    pub shutdown_timeout: Duration,
    /// `--header-timeout`: for a request's head, and for each pause inside its body.
    pub header_timeout: Duration,
    /// `--max-head-size`: the largest HEADERS frame (see [`crate::proto::http3::guard`]) and field section.
    pub max_head: u64,
    pub max_body: u64,
    /// `-v`: print each request's line (`-vv`: and headers) and each response's status.
    pub verbose: u8,
    /// `--receive-buffer-size`, `--send-buffer-size`: `SO_RCVBUF`/`SO_SNDBUF` of the UDP sockets.
    pub receive_buffer: Option<usize>,
    pub send_buffer: Option<usize>,
    /// `--quic-retry`: every Initial from an unvalidated address gets a Retry, not only under load.
    pub retry: bool,
}

/// Everything every QUIC thread shares, fixed at start-up.
pub struct Http3 {
    config: quinn::ServerConfig,
    options: Http3Options,
    /// What requests are answered with (each QUIC thread takes its own [`crate::catalog::Local`]).
    catalog: Arc<crate::catalog::Catalog>,
    /// The stateless-reset key of every worker's endpoint (see [`endpoint_config`]).
    reset_key: Arc<aws_lc_rs::hmac::Key>,
}

impl std::fmt::Debug for Http3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http3")
            .field("options", &self.options)
            .finish()
    }
}

impl Http3 {
    /// From the HTTPS port's TLS configuration (its certificate, also after a reload, and its ticket
    /// keys are shared) and the answers. An error is the user's (exit code 2).
    pub fn new(
        tls: &TlsConfig,
        options: Http3Options,
        catalog: Arc<crate::catalog::Catalog>,
    ) -> Result<Self> {
        let mut secret = [0u8; 32];
        aws_lc_rs::rand::fill(&mut secret).map_err(|_| anyhow!("no randomness for QUIC"))?;
        Ok(Http3 {
            config: server_config(tls, options.idle_timeout)?,
            options,
            catalog,
            reset_key: Arc::new(aws_lc_rs::hmac::Key::new(
                aws_lc_rs::hmac::HMAC_SHA256,
                &secret,
            )),
        })
    }
}

/// The certificate of the HTTPS port's configuration in force (swapped on a SIGHUP reload).
#[derive(Debug)]
struct Following(TlsConfig);

impl rustls::server::ResolvesServerCert for Following {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.load().cert_resolver.resolve(hello)
    }
}

/// quinn's server configuration: TLS 1.3 and ALPN `h3` with `tls`'s certificate, the idle timeout,
/// [`MAX_STREAMS`].
fn server_config(tls: &TlsConfig, idle: Duration) -> Result<quinn::ServerConfig> {
    // The HTTPS port's provider: the same suites, in the same order.
    let provider = tls.load().crypto_provider().clone();
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("QUIC's TLS 1.3")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Following(tls.clone())));
    let tls = tls.load();
    crypto.alpn_protocols = vec![b"h3".to_vec()];
    crypto.ignore_client_order = true;
    crypto.send_tls13_tickets = tls.send_tls13_tickets;
    crypto.ticketer = tls.ticketer.clone();
    crypto.session_storage = tls.session_storage.clone();
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| anyhow!("QUIC's TLS configuration: {e}"))?;
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(idle)
        .map_err(|_| anyhow!("--idle-timeout is too long for QUIC (at most 2^62 ms)"))?;
    transport
        .max_idle_timeout(Some(idle))
        .max_concurrent_bidi_streams(quinn::VarInt::from_u32(MAX_STREAMS));
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// `--http3 -p 0`: a port free for TCP and UDP alike on `ip`, so both can listen on the same one (and
/// Alt-Svc, built before the listeners, can name it).
pub fn free_port(ip: std::net::IpAddr) -> Result<u16> {
    for _ in 0..16 {
        let tcp = std::net::TcpListener::bind((ip, 0)).context("cannot find a free port")?;
        let port = tcp.local_addr()?.port();
        if UdpSocket::bind((ip, port)).is_ok() {
            return Ok(port);
        }
    }
    Err(anyhow!(
        "--http3 -p 0: no port was free for both TCP and UDP; give one with -p"
    ))
}

/// `SO_RCVBUF` asked for the UDP sockets without `--receive-buffer-size`: the kernel's default
/// (~208 KiB) holds ~170 full-sized datagrams, so a burst of new connections overflows it and their
/// Initials are lost until the clients resend them a second later. The kernel caps what is asked at
/// `net.core.rmem_max`; memory is used only while datagrams wait. (quic-go asks for 2.5 MB, for the
/// same reason.)
pub const RECEIVE_BUFFER: usize = 2 << 20;

/// One UDP socket per worker on `addr`, with `SO_REUSEPORT` and the buffer sizes asked for
/// ([`RECEIVE_BUFFER`] by default), non-blocking (as quinn wants).
pub fn bind(addr: SocketAddr, workers: usize, options: &Http3Options) -> Result<Vec<UdpSocket>> {
    use socket2::{Domain, Protocol, Socket, Type};
    (0..workers)
        .map(|_| {
            let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
            socket.set_reuse_port(true)?;
            socket.set_recv_buffer_size(options.receive_buffer.unwrap_or(RECEIVE_BUFFER))?;
            if let Some(size) = options.send_buffer {
                socket.set_send_buffer_size(size)?;
            }
            socket.bind(&addr.into())?;
            socket.set_nonblocking(true)?;
            Ok(socket.into())
        })
        .collect::<std::io::Result<_>>()
        .map_err(|e| {
            anyhow!("--http3: cannot listen on udp/{addr}: {e}; if another server holds that UDP port, stop it or choose another port with -p")
        })
}

/// Starts one pinned thread per socket (socket i serves worker i's CPU and counters), and waits
/// until each has its endpoint (or says why not). They stop when `stop` turns true.
pub fn start(
    http3: Arc<Http3>,
    sockets: Vec<UdpSocket>,
    cores: &[Option<core_affinity::CoreId>],
    counters: &Counters,
    stop: &shutdown::Listener,
) -> Result<Vec<std::thread::JoinHandle<()>>> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut handles = Vec::with_capacity(sockets.len());
    for (id, socket) in sockets.into_iter().enumerate() {
        let (http3, counters, stop, ready) = (
            http3.clone(),
            counters.clone(),
            stop.clone(),
            ready_tx.clone(),
        );
        let core = cores.get(id).copied().flatten();
        let handle = std::thread::Builder::new()
            .name(format!("statico-q{id}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let thread = Thread::new(http3, counters, id);
                thread.run(socket, stop, ready);
            })
            .with_context(|| format!("cannot start QUIC thread {id}"))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..handles.len() {
        ready_rx
            .recv()
            .unwrap_or_else(|_| Err("a QUIC thread exited during start-up".into()))
            .map_err(|e| anyhow!(e))?;
    }
    Ok(handles)
}

/// One QUIC thread's state: the shared settings, its worker's counters, its own copy of the catalog
/// with a live `Date` (and the clock that keeps it so).
struct Thread {
    http3: Arc<Http3>,
    counters: Counters,
    id: usize,
    catalog: RefCell<(DateClock, crate::catalog::Local)>,
    /// Handshakes in progress (see [`Handshaking`]).
    handshaking: Cell<usize>,
}

impl Thread {
    fn new(http3: Arc<Http3>, counters: Counters, id: usize) -> Self {
        let catalog = crate::catalog::Local::for_quic(&http3.catalog, id);
        Thread {
            catalog: RefCell::new((DateClock::default(), catalog)),
            handshaking: Cell::new(0),
            http3,
            counters,
            id,
        }
    }

    fn count(&self, counter: Counter, n: u64) {
        self.counters.worker(self.id).add(counter, n);
    }

    /// Runs the endpoint on a current-thread runtime until shutdown; says on `ready` once it serves.
    fn run(
        self,
        socket: UdpSocket,
        stop: shutdown::Listener,
        ready: mpsc::Sender<Result<(), String>>,
    ) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return drop(ready.send(Err(format!("QUIC thread {}: {e}", self.id)))),
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            crate::kernel::timer::install();
            let endpoint = match Counted::wrap(socket, &self.counters, self.id).and_then(|socket| {
                quinn::Endpoint::new_with_abstract_socket(
                    endpoint_config(self.id, &self.http3.reset_key),
                    Some(self.http3.config.clone()),
                    socket,
                    Arc::new(quinn::TokioRuntime),
                )
            }) {
                Ok(e) => e,
                Err(e) => return drop(ready.send(Err(format!("QUIC endpoint {}: {e}", self.id)))),
            };
            let _ = ready.send(Ok(()));
            serve(Rc::new(self), endpoint, stop).await;
        });
    }

    /// The address-validation policy: an Initial from an address not yet validated is answered with
    /// a Retry under `--quic-retry` or when this worker has [`RETRY_ABOVE`] handshakes in progress;
    /// otherwise the handshake goes on. `None` when a Retry was sent.
    fn admit(&self, incoming: quinn::Incoming) -> Option<quinn::Incoming> {
        let busy = self.handshaking.get() >= RETRY_ABOVE;
        if incoming.remote_address_validated() || !(self.http3.options.retry || busy) {
            return Some(incoming);
        }
        match incoming.retry() {
            Ok(()) => {
                self.count(Counter::QuicRetries, 1);
                None
            }
            // Only when the Initial already carried a Retry token (which then validated it).
            Err(e) => Some(e.into_incoming()),
        }
    }

    /// The catalog's answer to `request`; `Date` is this second's.
    fn answer(&self, request: &http::Request<()>) -> crate::catalog::StreamAnswer {
        let mut catalog = self.catalog.borrow_mut();
        let (clock, catalog) = &mut *catalog;
        if let Some(now) = clock.tick(SystemTime::now()) {
            catalog.set_date(&now);
        }
        catalog.refresh();
        catalog.stream_answer(request)
    }
}

/// Accepts connections until shutdown; then refuses new ones, lets each connection drain (GOAWAY),
/// and closes the endpoint after `--shutdown-timeout` at the latest.
async fn serve(thread: Rc<Thread>, endpoint: quinn::Endpoint, mut stop: shutdown::Listener) {
    let mut connections = tokio::task::JoinSet::new();
    let for_connections = stop.clone();
    // After a SIGHUP rebuild, the old site is let go within a second, HTTP/3 requests or not.
    let mut refresh = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = refresh.tick() => thread.catalog.borrow_mut().1.refresh(),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => if let Some(incoming) = thread.admit(incoming) {
                    let handshake = Handshaking::new(&thread);
                    connections.spawn_local(connection(handshake, incoming, for_connections.clone()));
                },
                None => break,
            },
        }
    }
    endpoint.set_server_config(None);
    let all_done = async { while connections.join_next().await.is_some() {} };
    let drain = thread
        .http3
        .options
        .shutdown_timeout
        .saturating_sub(CLOSE_WAIT);
    let _ = tokio::time::timeout(drain, all_done).await;
    endpoint.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"shutting down");
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
}

/// At shutdown, how long the endpoint's CONNECTION_CLOSE packets get to leave, within
/// `--shutdown-timeout`.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// One connection: the handshake, then its request streams until the client leaves, the idle timeout
/// closes it, or shutdown (GOAWAY, the streams in flight finish, then a grace for the client to close).
async fn connection(
    handshake: Handshaking,
    incoming: quinn::Incoming,
    mut stop: shutdown::Listener,
) {
    let thread = handshake.0.clone();
    let handshaken = incoming.await;
    drop(handshake);
    let Ok(conn) = handshaken else {
        return thread.count(Counter::QuicHandshakeFailures, 1);
    };
    thread.count(Counter::QuicConns, 1);
    let mut bytes = Traffic::default();
    let max_head = thread.http3.options.max_head;
    let Ok(mut h3) = h3::server::builder()
        .max_field_section_size(max_head)
        .build::<_, Bytes>(Guarded::new(conn.clone(), max_head))
        .await
    else {
        return bytes.account(&thread, &conn);
    };
    let mut requests = tokio::task::JoinSet::new();
    let mut draining = false; // `wait_for` sees a stop that came before this connection, too
                              // `--idle-timeout` without a request stream open: GOAWAY, as HTTP/2 does (QUIC's own idle
                              // timeout sees PINGs as activity).
    let idle = thread.http3.options.idle_timeout;
    let mut idle_since = tokio::time::Instant::now();
    loop {
        if draining && requests.is_empty() {
            let _ = tokio::time::timeout(GOAWAY_GRACE, conn.closed()).await;
            break;
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s), if !draining => {
                draining = true;
                // GOAWAY names the first stream not processed: the one after the last accepted.
                let _ = h3.shutdown(1).await;
            }
            _ = tokio::time::sleep_until(idle_since + idle), if requests.is_empty() && !draining => {
                draining = true;
                let _ = h3.shutdown(0).await;
            }
            Some(ended) = requests.join_next(), if !requests.is_empty() => {
                idle_since = tokio::time::Instant::now();
                if matches!(ended, Ok(Ended::CloseConnection)) {
                    // A route's `close` fault: GOAWAY, then the connection closes.
                    let _ = h3.shutdown(0).await;
                    break;
                }
            }
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    requests.spawn_local(request(thread.clone(), resolver));
                }
                _ => break,
            },
        }
        bytes.account(&thread, &conn);
    }
    conn.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
    bytes.account(&thread, &conn);
}

/// A handshake in progress on its thread, counted in [`Thread::handshaking`] from its Initial until
/// it completes, fails, or its task is dropped at shutdown.
struct Handshaking(Rc<Thread>);

impl Handshaking {
    fn new(thread: &Rc<Thread>) -> Self {
        thread.handshaking.set(thread.handshaking.get() + 1);
        Handshaking(thread.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.handshaking.set(self.0.handshaking.get() - 1);
    }
}

/// A connection's UDP bytes and datagrams counted so far, to add what is new since.
#[derive(Default)]
struct Traffic {
    rx: u64,
    tx: u64,
    datagrams: u64,
}

impl Traffic {
    fn account(&mut self, thread: &Thread, conn: &quinn::Connection) {
        let stats = conn.stats();
        // quinn's count leaves out the datagram that opened the connection.
        let datagrams = stats.udp_rx.datagrams + 1;
        thread.count(Counter::QuicBytesIn, stats.udp_rx.bytes - self.rx);
        thread.count(Counter::QuicBytesOut, stats.udp_tx.bytes - self.tx);
        thread.count(Counter::QuicDatagramsForConns, datagrams - self.datagrams);
        (self.rx, self.tx) = (stats.udp_rx.bytes, stats.udp_tx.bytes);
        self.datagrams = datagrams;
    }
}

/// quinn's tokio UDP socket, counting the datagrams it receives in its worker's `quic_datagrams_in`
/// (the only place every datagram passes, garbage included). Everything else is passed through.
#[derive(Debug)]
struct Counted {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    counters: Counters,
    id: usize,
}

impl Counted {
    fn wrap(
        socket: UdpSocket,
        counters: &Counters,
        id: usize,
    ) -> std::io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
        use quinn::Runtime;
        let inner = quinn::TokioRuntime.wrap_udp_socket(socket)?;
        let counters = counters.clone();
        Ok(Arc::new(Counted {
            inner,
            counters,
            id,
        }))
    }
}

impl quinn::AsyncUdpSocket for Counted {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> std::io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut std::task::Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        let polled = self.inner.poll_recv(cx, bufs, meta);
        if let Poll::Ready(Ok(n)) = polled {
            // A GRO batch holds `len / stride` datagrams, the last one possibly shorter.
            let datagrams: usize = meta[..n]
                .iter()
                .map(|m| m.len.div_ceil(m.stride.max(1)))
                .sum();
            let worker = self.counters.worker(self.id);
            worker.add(Counter::QuicDatagramsIn, datagrams as u64);
        }
        polled
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

type Resolver = h3::server::RequestResolver<Guarded, Bytes>;
type Stream = h3::server::RequestStream<GuardedBidi<Bytes>, Bytes>;

/// How a request stream ended, for its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Done,
    /// A route's `close` fault: the connection closes.
    CloseConnection,
}

/// One request stream: its head, its body (read and dropped), then the answer, delivered as its
/// hold says.
async fn request(thread: Rc<Thread>, resolver: Resolver) -> Ended {
    let options = thread.http3.options;
    // `--header-timeout`: a head not complete by then is given up (the stream ends, unanswered).
    let resolving = tokio::time::timeout(options.header_timeout, resolver.resolve_request());
    let Ok(Ok((head, mut stream))) = resolving.await else {
        return Ended::Done;
    };
    if options.verbose > 0 {
        crate::observe::dump::stream_request(&head, "HTTP/3", stream.id(), options.verbose);
    }
    let response = thread.answer(&head);
    let mut kept = response.awaits_body().then(Vec::new);
    match read_body(&mut stream, &head, &options, &mut kept).await {
        Body::Read => {}
        Body::TooLarge => {
            refuse_body(&mut stream).await;
            return Ended::Done;
        }
        Body::Broken => return Ended::Done,
    }
    let arrived = std::time::Instant::now();
    let mut response = response.answered(&kept.unwrap_or_default());
    let head_only = head.method() == http::Method::HEAD;
    let mut delivery = response.delivery(Some(arrived), head_only);
    let (recorder, admission) = (response.recorder.take(), response.admission.take());
    let (mut status, (response, mut body)) = (response.status, response.into_parts());
    let mut response = Some(response);
    // The connection's end drops this task, and with it a held answer's ticket (counted gone).
    let mut gone = std::pin::pin!(std::future::pending::<()>());
    loop {
        let step = delivery.next(&mut held::ReadOnce::default(), usize::MAX);
        let sent = match step {
            Step::Wait(_) | Step::Queued(_) => {
                held::wait(&delivery, &step, gone.as_mut()).await;
                Ok(())
            }
            Step::Shed => {
                let date = response
                    .as_ref()
                    .and_then(|r| r.headers().get(http::header::DATE));
                if let Some(shed) = admission.as_ref().and_then(|a| a.shed_answer(date)) {
                    status = shed.status;
                    let (head, data) = shed.into_parts();
                    (response, body) = (Some(head), data);
                }
                Ok(())
            }
            Step::Record { key, drawn, held } => {
                if let Some(r) = &recorder {
                    r.record(key, drawn, held);
                }
                Ok(())
            }
            Step::Head { .. } => {
                if options.verbose > 0 {
                    println!("↪ response (HTTP/3): {status}");
                }
                stream
                    .send_response(response.take().expect("one head"))
                    .await
            }
            // HTTP/3 answers carry no trailers (gRPC is served on HTTP/2).
            Step::Sent | Step::Trailers => Ok(()),
            Step::Body { range, .. } => stream.send_data(body.slice(range)).await,
            Step::Event { bytes, .. } => stream.send_data(Bytes::from(bytes)).await,
            Step::Fault(Fault::Reset) => {
                stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return Ended::Done;
            }
            Step::Fault(Fault::Truncate) => {
                // A tick for what was sent to leave: a reset drops what is queued.
                crate::kernel::timer::sleep(PACE_TICK).await;
                stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return Ended::Done;
            }
            Step::Fault(Fault::Close) => return Ended::CloseConnection,
            Step::Fault(Fault::Stall) => {
                tokio::time::sleep(options.idle_timeout).await;
                stream.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
                return Ended::Done;
            }
            Step::Done => break,
        };
        if sent.is_err() {
            return Ended::Done;
        }
    }
    if stream.finish().await.is_ok() {
        thread.count(Counter::QuicRequests, 1);
    }
    Ended::Done
}

/// How a request body ended.
enum Body {
    Read,
    /// Over `--max-body-size` (by its Content-Length, or as it came).
    TooLarge,
    /// Reset by the client, or paused past `--header-timeout` (then the stream is reset here).
    Broken,
}

/// Reads a request body to its end, each pause at most `--header-timeout`, into `kept` if the
/// answer is made from it (else it is dropped).
async fn read_body(
    stream: &mut Stream,
    head: &http::Request<()>,
    options: &Http3Options,
    kept: &mut Option<Vec<u8>>,
) -> Body {
    let declared = head
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > options.max_body) {
        return Body::TooLarge;
    }
    let mut received = 0u64;
    loop {
        match tokio::time::timeout(options.header_timeout, stream.recv_data()).await {
            Ok(Ok(Some(mut chunk))) => {
                received += chunk.remaining() as u64;
                if let Some(kept) = kept {
                    while chunk.has_remaining() {
                        let piece = chunk.chunk();
                        crate::catalog::openai::keep_body(kept, piece);
                        let n = piece.len();
                        chunk.advance(n);
                    }
                }
                if received > options.max_body {
                    return Body::TooLarge;
                }
            }
            Ok(Ok(None)) => return Body::Read,
            Ok(Err(_)) => return Body::Broken,
            Err(_) => {
                // Only the send side: h3-quinn panics on STOP_SENDING while a read is unfinished;
                // the receive side is stopped when the stream is dropped.
                stream.stop_stream(h3::error::Code::H3_REQUEST_INCOMPLETE);
                return Body::Broken;
            }
        }
    }
}

/// A body over `--max-body-size`: a complete 413 response (so the client knows not to retry, as it
/// may after H3_REQUEST_REJECTED); the rest of the body is refused when the stream is dropped
/// (quinn's STOP_SENDING), which RFC 9114 §4.1.2 allows once the response is complete.
async fn refuse_body(stream: &mut Stream) {
    let response = http::Response::builder()
        .status(http::StatusCode::PAYLOAD_TOO_LARGE)
        .header(http::header::CONTENT_LENGTH, "0")
        .body(())
        .expect("a 413 head");
    if stream.send_response(response).await.is_ok() {
        let _ = stream.finish().await;
    }
}

/// Worker `id`'s endpoint settings: its connection IDs name it (see [`WorkerCids`]), and its
/// stateless resets are signed with the key every worker shares, so a client whose packets reach a
/// worker that does not hold its connection (an address change without the eBPF steering) gets a
/// reset it can verify and reconnects at once, instead of waiting out its idle timeout.
fn endpoint_config(id: usize, reset_key: &Arc<aws_lc_rs::hmac::Key>) -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::new(reset_key.clone());
    let worker = u8::try_from(id).unwrap_or(u8::MAX);
    config.cid_generator(move || Box::new(WorkerCids { worker }));
    config
}

/// The connection IDs a worker issues: [`QUIC_CID_LEN`] bytes, the first the worker's index, the rest
/// random. statico's QUIC steering program (`statico-ebpf`) reads that byte to send each packet to
/// the worker that holds its connection, whatever address it comes from — the plaintext server-ID
/// scheme of QUIC-LB: an observer learns which worker serves a connection, which it could also learn
/// from timing, and nothing else. Workers past 255 share index 255 (the program then steers their
/// packets by CPU).
struct WorkerCids {
    worker: u8,
}

impl quinn::ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let mut id = [0u8; QUIC_CID_LEN];
        id[0] = self.worker;
        // The system's CSPRNG; it does not fail on Linux once booted (aws-lc aborts if it ever did).
        let _ = aws_lc_rs::rand::fill(&mut id[1..]);
        quinn::ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        QUIC_CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> crate::conn::layer::TlsConfig {
        let opts = crate::conn::tls::TlsOptions {
            self_signed: true,
            min: "1.2".into(),
            tickets: 2,
            ..Default::default()
        };
        let (config, _) = crate::conn::tls::server_config(&opts).unwrap().unwrap();
        Arc::new(arc_swap::ArcSwap::new(config))
    }

    #[test]
    fn the_quic_configuration_takes_the_https_certificate() {
        assert!(server_config(&tls(), Duration::from_secs(1)).is_ok());
        let err = server_config(&tls(), Duration::MAX)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--idle-timeout"), "{err}");
    }

    #[test]
    fn sockets_share_the_port() {
        let port = free_port("127.0.0.1".parse().unwrap()).unwrap();
        let options = Http3Options {
            idle_timeout: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(1),
            header_timeout: Duration::from_secs(1),
            max_head: 16 * 1024,
            max_body: 0,
            verbose: 0,
            receive_buffer: Some(1 << 20),
            send_buffer: None,
            retry: false,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let sockets = bind(addr, 3, &options).unwrap();
        assert_eq!(sockets.len(), 3);
        for s in &sockets {
            assert_eq!(s.local_addr().unwrap().port(), port);
        }
    }
}
