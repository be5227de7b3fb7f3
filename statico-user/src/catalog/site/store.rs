//! Where a site's bodies live. On Linux: one memfd, written once while the site is built, then
//! sealed (no write, grow or shrink can ever change it) and mapped read-only. Each body is then two
//! things at once: a [`Bytes`] view of the mapping, which sends, HTTP/2 frames and TLS records read
//! like any buffer, and its place in the file ([`FileAt`]), which a runtime that can call `sendfile`
//! hands to the kernel so that a large body leaves without being copied through user memory (what
//! nginx gets from the page cache, without serving a file that may change under its `ETag`).
//!
//! The views own the mapping and the descriptor: both stay open while any response still holds a
//! body, even after a rebuild replaced the site. Off Linux, or if the kernel refuses a memfd, the
//! bodies stay on the heap and have no place in a file.

use std::fs::File;

use anyhow::Result;
use bytes::Bytes;

use crate::catalog::sink::FileAt;

/// Collects the bodies while the site is built; [`Writer::finish`] seals them into a [`Store`].
pub struct Writer {
    memfd: Option<File>,
    len: u64,
    places: Vec<Place>,
}

/// A body added to a [`Writer`]: its index there.
pub type Slot = usize;

enum Place {
    File { offset: u64, len: usize },
    Heap(Bytes),
}

/// The bodies of one site, sealed.
pub struct Store {
    places: Vec<Place>,
    /// The whole mapping (each body is a slice of it) and the memfd's descriptor, which the mapping's
    /// owner keeps open.
    mapped: Option<(Bytes, std::os::raw::c_int)>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            memfd: sealed::memfd(),
            len: 0,
            places: Vec::new(),
        }
    }

    /// Stores `body` (into the memfd, whose pages then replace the buffer; an empty body on the heap).
    pub fn add(&mut self, mut body: Vec<u8>) -> Result<Slot> {
        let place = match &mut self.memfd {
            Some(file) if !body.is_empty() => {
                std::io::Write::write_all(file, &body)?;
                let place = Place::File {
                    offset: self.len,
                    len: body.len(),
                };
                self.len += body.len() as u64;
                place
            }
            _ => {
                body.shrink_to_fit(); // a compressor's buffer grew by doubling
                Place::Heap(Bytes::from(body)) // the buffer itself, not a copy
            }
        };
        self.places.push(place);
        Ok(self.places.len() - 1)
    }

    /// Seals and maps the memfd.
    pub fn finish(self) -> Result<Store> {
        let mapped = match self.memfd {
            Some(file) if self.len > 0 => Some(sealed::seal_and_map(file)?),
            _ => None,
        };
        Ok(Store {
            places: self.places,
            mapped,
        })
    }
}

impl Store {
    /// The body in `slot`, and where it lies in the sealed file if it does.
    pub fn body(&self, slot: Slot) -> (Bytes, Option<FileAt>) {
        match (&self.places[slot], &self.mapped) {
            (Place::Heap(b), _) => (b.clone(), None),
            (&Place::File { offset, len }, Some((map, fd))) => {
                let start = offset as usize;
                let at = FileAt { fd: *fd, offset };
                (map.slice(start..start + len), Some(at))
            }
            (Place::File { .. }, None) => unreachable!("a store with file bodies is mapped"),
        }
    }

    /// Whether the bodies lie in a sealed file (Linux), for the start-up line.
    pub fn is_sealed_file(&self) -> bool {
        self.mapped.is_some()
    }
}

#[cfg(target_os = "linux")]
mod sealed {
    use std::fs::File;
    use std::os::fd::{AsRawFd, FromRawFd};

    use anyhow::{Context, Result};
    use bytes::Bytes;

    /// A new memfd that can be sealed; `None` if the kernel refuses one (bodies stay on the heap).
    pub fn memfd() -> Option<File> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a C string literal and flags; the call returns a new descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"statico-site".as_ptr(), flags) };
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) })
    }

    /// The mapping, kept alive by every view of it, with the file it maps.
    struct Sealed {
        map: memmap2::Mmap,
        _file: File,
    }

    impl AsRef<[u8]> for Sealed {
        fn as_ref(&self) -> &[u8] {
            &self.map
        }
    }

    /// Seals the memfd against every change, then maps it read-only with its pages in place.
    pub fn seal_and_map(file: File) -> Result<(Bytes, std::os::raw::c_int)> {
        let seals =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own, with an integer argument.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot seal the site's store");
        }
        // SAFETY: the file is sealed: no one, this process included, can change, grow or shrink it
        // while it is mapped, which is what makes a shared mapping sound to read as `&[u8]`.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
            .context("cannot map the site's store")?;
        let fd = file.as_raw_fd();
        Ok((Bytes::from_owner(Sealed { map, _file: file }), fd))
    }
}

#[cfg(not(target_os = "linux"))]
mod sealed {
    use std::fs::File;

    use anyhow::Result;
    use bytes::Bytes;

    /// No memfd off Linux: bodies stay on the heap.
    pub fn memfd() -> Option<File> {
        None
    }

    pub fn seal_and_map(_: File) -> Result<(Bytes, std::os::raw::c_int)> {
        unreachable!("no memfd off Linux")
    }
}
