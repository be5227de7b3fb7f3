//! How new connections reach workers: the steering ladder, chosen once at start-up.
//!
//! Every worker gets a listener of its own where the platform can spread connections over several
//! listeners on one port, so that accepting never contends on a shared queue:
//!
//! | rung | how | where |
//! |------|-----|-------|
//! | `ebpf` | an `SK_REUSEPORT` program sends each connection to the listener of the worker pinned on the CPU that took the SYN (`bpf`) | Linux, CAP_BPF + CAP_NET_ADMIN |
//! | `incoming-cpu` | each listener carries `SO_INCOMING_CPU` = its worker's CPU; the kernel prefers the matching one | Linux ≥ 6.2, unprivileged |
//! | `reuseport` | one `SO_REUSEPORT` listener per worker; the kernel hashes each connection's 4-tuple to one | Linux |
//! | `shared` | one listener, its file descriptor duplicated to every worker, which all accept from it | everywhere |
//!
//! `--steering auto` takes the best rung that works here and [`Listeners::describe`] says which and why in
//! one line (with the reason each better rung was passed over); a rung asked for by name that cannot work
//! is an error, never a silent downgrade.
//!
//! Binding happens here, in the main thread, before any worker starts, so a port in use or a bad address
//! fails the start with a message that names the cause and the fix.

use std::io;
use std::net::{SocketAddr, TcpListener};

use anyhow::{bail, Result};
use socket2::{Domain, Protocol, Socket, Type};

use clap::ValueEnum;

/// A steering rung that is in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rung {
    /// Made only by a build with the BPF programs.
    #[cfg_attr(not(all(target_os = "linux", statico_bpf)), allow(dead_code))]
    Ebpf,
    IncomingCpu,
    Reuseport,
    Shared,
}

impl Rung {
    pub fn name(self) -> &'static str {
        match self {
            Rung::Ebpf => "ebpf",
            Rung::IncomingCpu => "incoming-cpu",
            Rung::Reuseport => "reuseport",
            Rung::Shared => "shared",
        }
    }
}

/// How connections are spread over workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SteeringKind {
    /// The best rung that works on this machine
    Auto,
    /// An SK_REUSEPORT eBPF program steers each connection to the worker on the CPU that took its SYN
    /// (Linux, CAP_BPF + CAP_NET_ADMIN)
    Ebpf,
    /// Each listener carries SO_INCOMING_CPU = its worker's CPU (Linux 6.2+, unprivileged)
    IncomingCpu,
    /// One SO_REUSEPORT listener per worker; the kernel hashes connections over them (Linux)
    Reuseport,
    /// One listener shared by all workers
    Shared,
}

/// How the listeners are made: the steering part of the start-up plan.
#[derive(Clone, Debug)]
pub struct SteeringPlan {
    /// `--steering`.
    pub rung: SteeringKind,
    pub sockets: SocketOptions,
    /// `--xdp IFACE`: XDP counters on that interface (the ebpf rung).
    pub xdp: Option<String>,
}

/// The bound listeners, one per worker (the same socket duplicated for `shared`).
#[derive(Debug)]
pub struct Listeners {
    pub rung: Rung,
    /// Why this rung was chosen.
    pub why: String,
    pub local_addr: SocketAddr,
    pub sockets: Vec<TcpListener>,
    /// The attached BPF program and its maps, on the `ebpf` rung.
    pub assist: super::Assist,
}

/// Socket options applied to every listener (inherited by accepted connections).
#[derive(Clone, Copy, Debug)]
pub struct SocketOptions {
    pub receive_buffer: Option<usize>,
    pub send_buffer: Option<usize>,
    pub backlog: i32,
    /// TCP_NODELAY on the listener: Linux copies it to every accepted connection, so runtimes need no
    /// per-connection setsockopt.
    pub nodelay: bool,
}

const REUSEPORT_SUPPORTED: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Picks the rung and binds one listener per worker on `addr`; `worker_cpus[i]` is the CPU worker i
/// is pinned to (if any).
pub fn bind(
    kind: SteeringKind,
    addr: SocketAddr,
    worker_cpus: &[Option<usize>],
    opts: SocketOptions,
    xdp: Option<&str>,
) -> Result<Listeners> {
    let workers = worker_cpus.len();
    let group = match kind {
        SteeringKind::Shared => false,
        SteeringKind::Auto => REUSEPORT_SUPPORTED,
        _ if REUSEPORT_SUPPORTED => true,
        other => bail!(
            "--steering {} needs Linux, where SO_REUSEPORT balances connections; use --steering shared",
            other.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
        ),
    };
    if xdp.is_some() && !matches!(kind, SteeringKind::Auto | SteeringKind::Ebpf) {
        bail!("--xdp comes with the eBPF programs: use it with --steering ebpf or auto");
    }
    if !group {
        if xdp.is_some() {
            bail!("--xdp needs Linux and the eBPF programs");
        }
        let one = listen(addr, false, opts)?;
        let mut sockets = Vec::with_capacity(workers);
        for _ in 1..workers {
            // Non-blocking stated for each copy: Windows' duplicated sockets need not inherit it, and
            // a worker that loses the race for a connection must not block in accept.
            let copy = one.try_clone()?;
            copy.set_nonblocking(true)?;
            sockets.push(copy);
        }
        sockets.push(one);
        let why = if kind == SteeringKind::Shared {
            "forced: one listener accepted from by every worker".to_string()
        } else {
            "auto: this platform cannot balance SO_REUSEPORT listeners, so workers share one"
                .to_string()
        };
        return finish(Rung::Shared, why, sockets);
    }

    // A listener of ours could silently join another process's SO_REUSEPORT group on the same port and
    // share its connections; binding once without SO_REUSEPORT proves the port is free.
    if addr.port() != 0 {
        let probe = new_socket(addr, false, opts)?;
        bind_socket(&probe, addr).map_err(|e| bind_error(addr, e))?;
        drop(probe);
    }
    let first = listen(addr, true, opts)?;
    let addr = first.local_addr()?;
    let mut sockets = vec![first];
    for _ in 1..workers {
        sockets.push(listen(addr, true, opts)?);
    }

    match kind {
        SteeringKind::Ebpf => {
            let kernel = attach_ebpf(&sockets, worker_cpus, addr.port(), xdp)
                .map_err(|e| anyhow::anyhow!("--steering ebpf cannot work here: {e:#}"))?;
            finish_ebpf(kernel, "forced".into(), sockets)
        }
        SteeringKind::IncomingCpu => {
            incoming_cpu(&sockets, worker_cpus)
                .map_err(|e| anyhow::anyhow!("--steering incoming-cpu cannot work here: {e}"))?;
            finish(
                Rung::IncomingCpu,
                "forced: each listener prefers connections from its worker's CPU".into(),
                sockets,
            )
        }
        SteeringKind::Reuseport => finish(
            Rung::Reuseport,
            "forced: one SO_REUSEPORT listener per worker, the kernel hashes connections over them"
                .into(),
            sockets,
        ),
        SteeringKind::Auto => {
            let ebpf_failure = match attach_ebpf(&sockets, worker_cpus, addr.port(), xdp) {
                Ok(kernel) => return finish_ebpf(kernel, "auto".into(), sockets),
                Err(e) if xdp.is_some() => {
                    bail!("--xdp needs the eBPF programs, which cannot work here: {e:#}")
                }
                Err(e) => format!("{e:#}"),
            };
            match incoming_cpu(&sockets, worker_cpus) {
                Ok(()) => finish(
                    Rung::IncomingCpu,
                    format!("auto: each listener prefers connections from its worker's CPU; eBPF passed over: {ebpf_failure}"),
                    sockets,
                ),
                Err(why_not) => finish(
                    Rung::Reuseport,
                    format!("auto: the kernel hashes connections over the workers' listeners; eBPF passed over: {ebpf_failure}; SO_INCOMING_CPU passed over: {why_not}"),
                    sockets,
                ),
            }
        }
        SteeringKind::Shared => unreachable!("handled above"),
    }
}

fn finish(rung: Rung, why: String, sockets: Vec<TcpListener>) -> Result<Listeners> {
    let local_addr = sockets[0].local_addr()?;
    Ok(Listeners {
        rung,
        why,
        local_addr,
        sockets,
        assist: super::Assist::default(),
    })
}

#[cfg(all(target_os = "linux", statico_bpf))]
type KernelState = crate::kernel::bpf::Kernel;
#[cfg(not(all(target_os = "linux", statico_bpf)))]
type KernelState = std::convert::Infallible;

#[cfg(all(target_os = "linux", statico_bpf))]
fn attach_ebpf(
    sockets: &[TcpListener],
    worker_cpus: &[Option<usize>],
    port: u16,
    xdp: Option<&str>,
) -> Result<KernelState> {
    if worker_cpus.iter().any(Option::is_none) {
        bail!("workers are not pinned to CPUs, so there is no CPU to steer to");
    }
    crate::kernel::bpf::attach(sockets, worker_cpus, port, xdp)
}

#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn attach_ebpf(
    _: &[TcpListener],
    _: &[Option<usize>],
    _: u16,
    _: Option<&str>,
) -> Result<KernelState> {
    if cfg!(target_os = "linux") {
        bail!("this statico was built without its BPF programs (nightly or bpf-linker was missing at build time: run `cargo xtask setup` and rebuild)")
    } else {
        bail!("eBPF steering needs Linux")
    }
}

#[cfg(all(target_os = "linux", statico_bpf))]
fn finish_ebpf(kernel: KernelState, how: String, sockets: Vec<TcpListener>) -> Result<Listeners> {
    let mut l = finish(
        Rung::Ebpf,
        format!(
            "{how}: an SK_REUSEPORT program sends each connection to the worker on the CPU that took its SYN; maps pinned in {}",
            kernel.pin_dir().display()
        ),
        sockets,
    )?;
    l.assist = super::Assist::ebpf(kernel);
    Ok(l)
}

#[cfg(not(all(target_os = "linux", statico_bpf)))]
fn finish_ebpf(kernel: KernelState, _: String, _: Vec<TcpListener>) -> Result<Listeners> {
    match kernel {}
}

/// Linux ≥ 6.2 picks, among a SO_REUSEPORT group, the listener whose `SO_INCOMING_CPU` matches the CPU
/// handling the SYN. Sets it on each worker's listener.
fn incoming_cpu(
    sockets: &[TcpListener],
    worker_cpus: &[Option<usize>],
) -> std::result::Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("SO_INCOMING_CPU steering needs Linux 6.2 or later".into());
    }
    let (major, minor) = crate::kernel::sys::kernel_version();
    if (major, minor) < (6, 2) {
        return Err(format!(
            "the kernel is {major}.{minor}; listeners honour SO_INCOMING_CPU from Linux 6.2"
        ));
    }
    for (socket, cpu) in sockets.iter().zip(worker_cpus) {
        let Some(cpu) = cpu else {
            return Err("workers are not pinned to CPUs".into());
        };
        set_incoming_cpu(socket, *cpu)
            .map_err(|e| format!("setsockopt(SO_INCOMING_CPU) failed: {e}"))?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn set_incoming_cpu(socket: &TcpListener, cpu: usize) -> io::Result<()> {
    socket2::SockRef::from(socket).set_cpu_affinity(cpu)
}

#[cfg(not(target_os = "linux"))]
fn set_incoming_cpu(_: &TcpListener, _: usize) -> io::Result<()> {
    Err(io::Error::other("not Linux"))
}

/// How long the kernel holds a connection that has sent nothing before handing it to `accept`
/// anyway (see [`defer_accept`](crate::kernel::sys::defer_accept)): one SYN-ACK retransmission.
const DEFER_ACCEPT_SECS: u32 = 1;

fn new_socket(addr: SocketAddr, reuse_port: bool, opts: SocketOptions) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    crate::kernel::sys::allow_quick_rebind(&socket)?;
    if reuse_port {
        crate::kernel::sys::set_reuse_port(&socket)?;
    }
    if let Some(n) = opts.receive_buffer {
        socket.set_recv_buffer_size(n)?;
    }
    if let Some(n) = opts.send_buffer {
        socket.set_send_buffer_size(n)?;
    }
    if opts.nodelay {
        socket.set_tcp_nodelay(true)?;
    }
    crate::kernel::sys::defer_accept(&socket, DEFER_ACCEPT_SECS)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn bind_socket(socket: &Socket, addr: SocketAddr) -> io::Result<()> {
    socket.bind(&addr.into())
}

fn listen(addr: SocketAddr, reuse_port: bool, opts: SocketOptions) -> Result<TcpListener> {
    let socket = new_socket(addr, reuse_port, opts)
        .map_err(|e| anyhow::anyhow!("cannot create a socket: {e}"))?;
    bind_socket(&socket, addr).map_err(|e| bind_error(addr, e))?;
    socket
        .listen(opts.backlog)
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    Ok(socket.into())
}

fn bind_error(addr: SocketAddr, e: io::Error) -> anyhow::Error {
    match e.kind() {
        io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: the port is already in use by another process; stop it or choose another port with -p"
        ),
        io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "cannot listen on {addr}: no interface has this address; pass one of this machine's addresses with -a"
        ),
        io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot listen on {addr}: permission denied (ports below 1024 need privileges); choose a port >= 1024 with -p"
        ),
        _ => anyhow::anyhow!("cannot listen on {addr}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SocketOptions {
        SocketOptions {
            receive_buffer: None,
            send_buffer: None,
            backlog: 16,
            nodelay: false,
        }
    }

    fn localhost0() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[test]
    fn one_listener_per_worker_on_one_port() {
        let l = bind(
            SteeringKind::Reuseport,
            localhost0(),
            &[None; 3],
            opts(),
            None,
        )
        .unwrap();
        assert_eq!(l.sockets.len(), 3);
        let port = l.local_addr.port();
        assert!(l
            .sockets
            .iter()
            .all(|s| s.local_addr().unwrap().port() == port));
    }

    #[test]
    fn port_in_use_is_refused_with_the_fix() {
        let taken = TcpListener::bind(localhost0()).unwrap();
        for kind in [SteeringKind::Reuseport, SteeringKind::Shared] {
            let err = bind(kind, taken.local_addr().unwrap(), &[None; 2], opts(), None)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("already in use") && err.contains("-p"),
                "{err}"
            );
        }
    }

    #[test]
    fn nodelay_on_the_listener_reaches_accepted_connections() {
        let opts = SocketOptions {
            nodelay: true,
            ..opts()
        };
        let l = bind(SteeringKind::Shared, localhost0(), &[None], opts, None).unwrap();
        let listener = &l.sockets[0];
        listener.set_nonblocking(false).unwrap();
        let _client = std::net::TcpStream::connect(l.local_addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn port_held_by_another_reuseport_group_is_refused() {
        let other = listen(localhost0(), true, opts()).unwrap();
        let err = bind(
            SteeringKind::Reuseport,
            other.local_addr().unwrap(),
            &[None; 2],
            opts(),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("already in use"), "{err}");
    }
}
