//! Kernel assist: loads statico's BPF programs with aya, attaches the `SK_REUSEPORT` steering program
//! to the workers' listeners, pins the maps, and maps the per-worker counter array into memory.
//!
//! - `SOCKETS` (reuseport socket array): slot i holds worker i's listener;
//! - `CPU_SLOTS`: CPU id → slot of the worker pinned on that CPU (CPUs without a worker keep
//!   [`NO_SLOT`], so the kernel hashes their connections);
//! - `STEERING` (per-CPU): how many connections each CPU steered and let fall back;
//! - `WORKERS` (`BPF_F_MMAPABLE`): the workers' counter records, written by the workers through an
//!   mmap of the map — no syscall on the hot path — and readable by `bpftool` while statico runs;
//! - `QUIC_SOCKETS`, `QUIC_STEERING` (`--http3`): worker i's UDP socket at slot i, and per CPU how
//!   many datagrams the QUIC program steered by connection ID, by CPU, or left to the hash
//!   ([`Kernel::attach_quic`]).
//!
//! Maps are pinned under `/sys/fs/bpf/statico/<port>/` (bpffs is mounted there if it is not). A stale
//! directory left by a crashed run on the same port is replaced (the port was just proven free, so no
//! live statico owns it). [`Kernel`]'s drop detaches the program, clears the socket slots and removes
//! the pins: a clean exit leaves nothing behind.

use std::fs;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Array, Map, MapData, PerCpuArray, ReusePortSockArray};
use aya::programs::{SkReuseport, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use statico_common::names::{
    MAP_CPU_SLOTS, MAP_QUIC_SOCKETS, MAP_QUIC_STEERING, MAP_SOCKETS, MAP_STEERING, MAP_WORKERS,
    MAP_XDP_PORT, MAP_XDP_STATS, PROG_STEER, PROG_STEER_QUIC, PROG_XDP,
};
use statico_common::{QuicSteerCounters, SteerCounters, WorkerRecord, XdpCounters, NO_SLOT};

use crate::observe::meter::{Counters, WorkerCounters};

/// The BPF object built by `build.rs` from `statico-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/statico-ebpf.o"));

/// Root of statico's pins on the BPF filesystem.
pub const PIN_ROOT: &str = "/sys/fs/bpf/statico";

/// Loaded, attached and pinned kernel state. Dropping it undoes all of that.
pub struct Kernel {
    ebpf: Ebpf,
    /// `--xdp IFACE`: the interface, the link to detach, and the per-CPU packet counters.
    xdp: Option<(
        String,
        aya::programs::xdp::XdpLinkId,
        PerCpuArray<MapData, XdpCounters>,
    )>,
    /// A duplicate of one listener of the group, to detach the program from the group at exit.
    group: OwnedFd,
    sockets: ReusePortSockArray<MapData>,
    steering: PerCpuArray<MapData, SteerCounters>,
    /// `--http3`: a duplicate of one UDP socket of the QUIC group, and the QUIC socket array, once
    /// [`Kernel::attach_quic`] has attached the QUIC program.
    quic: Option<(OwnedFd, ReusePortSockArray<MapData>)>,
    /// Whether the QUIC steering program loaded (the verifier's word if not).
    quic_program: Result<(), String>,
    quic_sockets: Option<Map>,
    quic_steering: PerCpuArray<MapData, QuicSteerCounters>,
    _workers_map: Map,
    workers: usize,
    pins: Pins,
    counters: Counters,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("pin_dir", &self.pins.0)
            .finish()
    }
}

/// The pin directory; removed on drop (with the root, once no other port uses it).
struct Pins(PathBuf);

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        let _ = fs::remove_dir(PIN_ROOT);
    }
}

/// The mmap of the `WORKERS` map; unmapped on drop.
#[derive(Debug)]
struct Mapping {
    addr: usize,
    len: usize,
    /// Worker records at the start of the mapping.
    workers: usize,
}

impl crate::observe::meter::CounterMemory for Mapping {
    fn records(&self) -> &[WorkerCounters] {
        // SAFETY: the mapping holds `workers` records of `WorkerRecord` layout (same size and alignment
        // as `WorkerCounters`, which is `AtomicU64`s), page-aligned, zero-initialised by the kernel; it
        // stays mapped while `self` lives, which the returned slice's lifetime is tied to. The kernel
        // side (bpftool, BPF programs) only reads them, and all access is atomic.
        unsafe { std::slice::from_raw_parts(self.addr as *const WorkerCounters, self.workers) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` came from a successful mmap in `map_workers` and nothing refers to the
        // records any more (the `Counters` owning this `Mapping` is being dropped).
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// Loads the programs, pins the maps under `PIN_ROOT/<port>/`, fills them, and attaches steering to
/// `listeners` (worker i's listener at index i). `worker_cpus[i]` is the CPU worker i is pinned to.
pub fn attach(
    listeners: &[TcpListener],
    worker_cpus: &[Option<usize>],
    port: u16,
    xdp: Option<&str>,
) -> Result<Kernel> {
    let workers = listeners.len();
    let cpus = aya::util::nr_cpus()
        .map_err(|(what, e)| anyhow!("cannot count possible CPUs ({what}): {e}"))?;
    let mut ebpf = EbpfLoader::new()
        .map_max_entries(MAP_SOCKETS, workers as u32)
        .map_max_entries(MAP_QUIC_SOCKETS, workers as u32)
        .map_max_entries(MAP_CPU_SLOTS, cpus as u32)
        .map_max_entries(MAP_WORKERS, workers as u32)
        .load(OBJECT)
        .map_err(|e| privilege_hint(anyhow!(e), "loading the BPF maps and programs"))?;

    let program: &mut SkReuseport = ebpf
        .program_mut(PROG_STEER)
        .context("the BPF object has no steering program")?
        .try_into()?;
    program
        .load()
        .map_err(|e| privilege_hint(anyhow!(e), "loading the SK_REUSEPORT program"))?;

    // Loaded now, while every map it refers to is open here; attached by `attach_quic` with `--http3`.
    let quic_program = load_quic_program(&mut ebpf);

    let pins = pin_all(
        &ebpf,
        &Path::new(PIN_ROOT).join(port.to_string()),
        &[
            (MAP_SOCKETS, "sockets"),
            (MAP_CPU_SLOTS, "cpu_slots"),
            (MAP_STEERING, "steering"),
            (MAP_WORKERS, "workers"),
            (MAP_QUIC_SOCKETS, "quic_sockets"),
            (MAP_QUIC_STEERING, "quic_steering"),
        ],
    )?;

    let mut sockets = ReusePortSockArray::try_from(take(&mut ebpf, MAP_SOCKETS)?)?;
    for (slot, listener) in listeners.iter().enumerate() {
        sockets
            .set(slot as u32, listener, 0)
            .with_context(|| format!("cannot put worker {slot}'s listener in the socket array"))?;
    }
    let mut cpu_slots: Array<MapData, u32> = Array::try_from(take(&mut ebpf, MAP_CPU_SLOTS)?)?;
    for cpu in 0..cpus {
        let slot = worker_cpus
            .iter()
            .position(|c| *c == Some(cpu))
            .map_or(NO_SLOT, |w| w as u32);
        cpu_slots.set(cpu as u32, slot, 0)?;
    }
    let steering = PerCpuArray::try_from(take(&mut ebpf, MAP_STEERING)?)?;
    let quic_sockets = Some(take(&mut ebpf, MAP_QUIC_SOCKETS)?);
    let quic_steering = PerCpuArray::try_from(take(&mut ebpf, MAP_QUIC_STEERING)?)?;
    let workers_map = take(&mut ebpf, MAP_WORKERS)?;
    let counters = map_workers(&workers_map, workers)?;

    let program: &mut SkReuseport = ebpf.program_mut(PROG_STEER).unwrap().try_into()?;
    program
        .attach(&listeners[0])
        .map_err(|e| privilege_hint(anyhow!(e), "attaching the program to the listeners"))?;
    let group = listeners[0].as_fd().try_clone_to_owned()?;
    let xdp = match xdp {
        Some(iface) => Some(attach_xdp(&mut ebpf, iface, port).inspect_err(|_| {
            let _ = SkReuseport::detach(&group);
        })?),
        None => None,
    };
    Ok(Kernel {
        ebpf,
        xdp,
        group,
        sockets,
        steering,
        quic: None,
        quic_program,
        quic_sockets,
        quic_steering,
        _workers_map: workers_map,
        workers,
        pins,
        counters,
    })
}

impl Kernel {
    /// The counters the workers write: the mmap-ed `WORKERS` map.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// The steering counters of every possible CPU.
    pub fn steering(&self) -> Vec<SteerCounters> {
        self.steering
            .get(&0, 0)
            .map(|values| values.iter().copied().collect())
            .unwrap_or_default()
    }

    /// `--http3`: puts worker i's UDP socket at slot i of `QUIC_SOCKETS` and attaches the QUIC steering
    /// program to the group, so packets carrying a connection ID statico issued reach the worker that
    /// holds the connection (see `statico-ebpf`).
    pub fn attach_quic(&mut self, sockets: &[UdpSocket]) -> Result<()> {
        self.quic_program.clone().map_err(|e| anyhow!(e))?;
        let map = self
            .quic_sockets
            .take()
            .context("the QUIC program is attached already")?;
        let mut array = ReusePortSockArray::try_from(map)?;
        for (slot, socket) in sockets.iter().enumerate() {
            array.set(slot as u32, socket, 0).with_context(|| {
                format!("cannot put worker {slot}'s UDP socket in the socket array")
            })?;
        }
        let program: &mut SkReuseport = self
            .ebpf
            .program_mut(PROG_STEER_QUIC)
            .context("the BPF object has no QUIC steering program")?
            .try_into()?;
        program
            .attach(&sockets[0])
            .map_err(|e| privilege_hint(anyhow!(e), "attaching the program to the UDP sockets"))?;
        self.quic = Some((sockets[0].as_fd().try_clone_to_owned()?, array));
        Ok(())
    }

    /// The QUIC steering counters of every possible CPU (none unless [`Kernel::attach_quic`] ran).
    pub fn quic_steering(&self) -> Vec<QuicSteerCounters> {
        if self.quic.is_none() {
            return Vec::new();
        }
        self.quic_steering
            .get(&0, 0)
            .map(|values| values.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The XDP program's counters of every possible CPU, with `--xdp`.
    pub fn xdp(&self) -> Option<(&str, Vec<XdpCounters>)> {
        let (iface, _, stats) = self.xdp.as_ref()?;
        let values = stats
            .get(&0, 0)
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        Some((iface, values))
    }

    pub fn pin_dir(&self) -> &Path {
        &self.pins.0
    }

    /// Gives the port's pin directory and its files to `uid`/`gid`, so that a server switched to that
    /// user can remove them at exit (`PIN_ROOT` is sticky and world-writable, like /tmp).
    pub fn chown_pins(&self, uid: u32, gid: u32) -> Result<()> {
        std::os::unix::fs::chown(self.pin_dir(), Some(uid), Some(gid))?;
        for entry in fs::read_dir(self.pin_dir())? {
            std::os::unix::fs::chown(entry?.path(), Some(uid), Some(gid))?;
        }
        Ok(())
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if let Some((_, link, _)) = self.xdp.take() {
            if let Some(Ok(p)) = self.ebpf.program_mut(PROG_XDP).map(<&mut Xdp>::try_from) {
                let _ = p.detach(link);
            }
        }
        let _ = SkReuseport::detach(&self.group);
        for slot in 0..self.workers as u32 {
            let _ = self.sockets.clear_index(&slot);
        }
        if let Some((group, mut quic)) = self.quic.take() {
            let _ = SkReuseport::detach(&group);
            for slot in 0..self.workers as u32 {
                let _ = quic.clear_index(&slot);
            }
        }
        // The pins go with `self.pins`.
    }
}

fn attach_xdp(
    ebpf: &mut Ebpf,
    iface: &str,
    port: u16,
) -> Result<(
    String,
    aya::programs::xdp::XdpLinkId,
    PerCpuArray<MapData, XdpCounters>,
)> {
    let mut port_map: Array<MapData, u16> = Array::try_from(take(ebpf, MAP_XDP_PORT)?)?;
    port_map.set(0, port, 0)?;
    let stats = PerCpuArray::try_from(take(ebpf, MAP_XDP_STATS)?)?;
    let program: &mut Xdp = ebpf
        .program_mut(PROG_XDP)
        .context("the BPF object has no XDP program")?
        .try_into()?;
    program
        .load()
        .map_err(|e| privilege_hint(anyhow!(e), "loading the XDP program"))?;
    let link = program.attach(iface, XdpMode::Default).map_err(|e| {
        anyhow!("cannot attach XDP to {iface:?}: {e}; check the interface name (ip link)")
    })?;
    Ok((iface.to_string(), link, stats))
}

/// Loads the QUIC steering program; its failure is kept for `--http3` to report, not fatal to TCP.
fn load_quic_program(ebpf: &mut Ebpf) -> Result<(), String> {
    let program: &mut SkReuseport = ebpf
        .program_mut(PROG_STEER_QUIC)
        .ok_or("the BPF object has no QUIC steering program")?
        .try_into()
        .map_err(|e| format!("{e}"))?;
    program
        .load()
        .map_err(|e| format!("loading the QUIC SK_REUSEPORT program: {e}"))
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<Map> {
    ebpf.take_map(name)
        .with_context(|| format!("the BPF object has no map {name}"))
}

fn map_data(map: &Map) -> Result<&MapData> {
    match map {
        Map::Array(data) => Ok(data),
        _ => bail!("map WORKERS is not an array map"),
    }
}

/// Maps the `WORKERS` array into memory as the workers' counter records.
fn map_workers(map: &Map, workers: usize) -> Result<Counters> {
    const _: () = assert!(size_of::<WorkerCounters>() == size_of::<WorkerRecord>());
    let data = map_data(map)?;
    let page = 4096usize.max(page_size());
    let len = (workers * size_of::<WorkerRecord>()).div_ceil(page) * page;
    // SAFETY: a shared mapping of a BPF_F_MMAPABLE array map's fd, of at most the map's (page-rounded)
    // size; the result is checked before use.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            data.fd().as_fd().as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        bail!(
            "cannot mmap the worker counter map: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(Counters::mapped(Box::new(Mapping {
        addr: addr as usize,
        len,
        workers,
    })))
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// Pins the maps under `dir`, mounting bpffs and replacing a stale directory as needed.
fn pin_all(ebpf: &Ebpf, dir: &Path, maps: &[(&str, &str)]) -> Result<Pins> {
    ensure_bpffs()?;
    if dir.exists() {
        fs::remove_dir_all(dir)
            .with_context(|| format!("cannot replace the stale pins in {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Like /tmp: every server, whatever user it ends up as (`--user`, or root without capabilities),
    // can remove its own port's directory at exit, and only its own.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(PIN_ROOT, fs::Permissions::from_mode(0o1777))
        .with_context(|| format!("cannot set the mode of {PIN_ROOT}"))?;
    let pins = Pins(dir.to_path_buf());
    for (map, file) in maps {
        ebpf.map(map)
            .with_context(|| format!("the BPF object has no map {map}"))?
            .pin(dir.join(file))
            .with_context(|| format!("cannot pin map {map} in {}", dir.display()))?;
    }
    Ok(pins)
}

/// Mounts the BPF filesystem on /sys/fs/bpf unless it is there.
fn ensure_bpffs() -> Result<()> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf") && l.contains(" bpf "))
    {
        return Ok(());
    }
    let _ = fs::create_dir_all("/sys/fs/bpf");
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    // SAFETY: mount(2) with valid NUL-terminated strings and no data argument.
    let rc = unsafe {
        libc::mount(
            c("bpf").as_ptr(),
            c("/sys/fs/bpf").as_ptr(),
            c("bpf").as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "cannot mount bpffs on /sys/fs/bpf: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Adds the fix to errors that mean "not privileged enough".
fn privilege_hint(e: anyhow::Error, doing: &str) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("Operation not permitted")
        || text.contains("Permission denied")
        || text.contains("EPERM")
    {
        anyhow!("{doing} was refused: {text}; the ebpf rung needs CAP_BPF and CAP_PERFMON, and --xdp CAP_NET_ADMIN (run as root or grant them)")
    } else {
        anyhow!("{doing} failed: {text}")
    }
}
