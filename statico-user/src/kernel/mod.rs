//! The kernel assist and the platform: how connections reach workers, the BPF programs behind the best
//! rung, and the few facts and socket options that differ between platforms.
//!
//! - [`steering`]: the listeners and the steering ladder, chosen once at start-up;
//! - `bpf` (Linux, built with its BPF programs): the programs, their maps and pins, loaded with aya;
//! - [`privilege`]: `--user` and dropping capabilities once start-up is done, on every build;
//! - [`sys`]: the kernel version, the open-files limit, platform-dependent socket options;
//! - [`timer`]: precise sleeps for held answers, and [`deadlines`] for a thread with its own event loop.
//!
//! Nothing here knows HTTP; the workers' counters live in the BPF map when there is one.

#[cfg(all(target_os = "linux", statico_bpf))]
pub mod bpf;
pub mod deadlines;
pub mod privilege;
pub mod steering;
pub mod sys;
pub mod timer;

use anyhow::Result;

use crate::observe::meter::{Counters, KernelDetail};

/// What the kernel assist gives a running server: the BPF state of the `ebpf` rung (its maps hold the
/// workers' counters and the steering counters, and its programs can steer QUIC), or nothing. One type
/// on every build, so start-up reads the same with and without BPF; dropping it detaches the programs,
/// clears the socket slots and removes the pins.
#[derive(Debug, Default)]
pub struct Assist {
    #[cfg(all(target_os = "linux", statico_bpf))]
    kernel: Option<bpf::Kernel>,
}

impl Assist {
    /// The `ebpf` rung's state.
    #[cfg(all(target_os = "linux", statico_bpf))]
    pub fn ebpf(kernel: bpf::Kernel) -> Assist {
        Assist {
            kernel: Some(kernel),
        }
    }

    /// Where the workers write their counters: the BPF map when there is one (readable by `bpftool`
    /// while statico runs), else ordinary memory.
    pub fn counters(&self, workers: usize) -> Counters {
        #[cfg(all(target_os = "linux", statico_bpf))]
        if let Some(k) = &self.kernel {
            return k.counters();
        }
        Counters::new(workers)
    }

    /// The per-CPU steering, XDP and QUIC steering counters, read from the BPF maps (empty without).
    pub fn detail(&self) -> KernelDetail {
        #[cfg(all(target_os = "linux", statico_bpf))]
        if let Some(k) = &self.kernel {
            return KernelDetail {
                steering: k.steering(),
                xdp: k.xdp().map(|(_, v)| v).unwrap_or_default(),
                quic_steering: k.quic_steering(),
            };
        }
        KernelDetail {
            steering: Vec::new(),
            xdp: Vec::new(),
            quic_steering: Vec::new(),
        }
    }

    /// `--http3`: how QUIC packets find their worker, said at start-up. On the ebpf rung the QUIC
    /// steering program is attached to the UDP sockets (by connection ID); otherwise, or if that
    /// fails, the kernel hashes each datagram's 4-tuple.
    pub fn steer_quic(&mut self, sockets: &[std::net::UdpSocket]) {
        #[cfg(all(target_os = "linux", statico_bpf))]
        let why = match self.kernel.as_mut().map(|k| k.attach_quic(sockets)) {
            Some(Ok(())) => {
                return eprintln!("statico: quic steering: by connection ID (an SK_REUSEPORT program sends each packet to the worker its connection ID names; Initial packets by the kernel's hash)");
            }
            Some(Err(e)) => format!("the QUIC program could not be attached: {e:#}"),
            None => "no BPF on this steering rung".to_string(),
        };
        #[cfg(not(all(target_os = "linux", statico_bpf)))]
        let why = {
            let _ = sockets;
            "this build has no BPF programs".to_string()
        };
        eprintln!("statico: quic steering: kernel hash of each datagram's address ({why}); a client whose address changes may reach a worker without its connection");
    }

    /// Drops every capability, and switches to `--user` (the pinned maps chowned to it first), once
    /// nothing privileged is left to do (see [`privilege`]). Returns the line to print, if anything
    /// changed.
    pub fn drop_privileges(&self, user: Option<&str>) -> Result<Option<String>> {
        privilege::drop(user, |uid, gid| {
            #[cfg(all(target_os = "linux", statico_bpf))]
            if let Some(k) = &self.kernel {
                k.chown_pins(uid, gid)?;
            }
            let _ = (uid, gid);
            Ok(())
        })
    }
}
