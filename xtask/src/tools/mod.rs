//! What `bench` and `soak` both drive, each in one place: the load tools and how their output is
//! read (`h2load`, `oha`), statico started and stopped behind one guard (`server`), /proc
//! (`procfs`), loopback ports and plain HTTP/1.1 requests (`net`), timed streams of server-sent events
//! asked for with a POST (`sse_load`), TLS clients (`tls`) and line
//! charts (`chart`). Both import this module; it imports neither, only `setup` (where a tool is
//! installed).

pub(crate) mod chart;
pub(crate) mod h2load;
pub(crate) mod net;
pub(crate) mod oha;
pub(crate) mod procfs;
pub(crate) mod server;
pub(crate) mod sse_load;
pub(crate) mod tls;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;

/// `taskset -c CPUS program`, or just `program` without CPUs.
pub fn pinned(cpus: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Where a run writes: `out` if given, else `target/KIND/<timestamp>`; created, and absolute (nginx
/// resolves relative paths against its own prefix).
pub fn out_dir(root: &Path, out: Option<&Path>, kind: &str) -> Result<PathBuf> {
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let dir = match out {
        Some(out) => root.join(out),
        None => root.join("target").join(kind).join(stamp.to_string()),
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir.canonicalize()?)
}
