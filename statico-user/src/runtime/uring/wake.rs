//! Wake-ups from other threads. A pool decides the fate of a queued request on whichever thread
//! frees a server — often another worker's — and tells its connection through a std [`Waker`]
//! made here: the waker puts the connection's token in the worker's mailbox and writes the
//! worker's eventfd, of which the ring always has one read posted, so the worker's
//! `io_uring_enter` returns and it handles the tokens ([`Mailbox::take`]). The pool never learns
//! what a connection or a ring is: only "wake this one".

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

/// A worker's mailbox: the tokens of connections woken from elsewhere, and its eventfd.
#[derive(Debug)]
pub struct Mailbox {
    fd: OwnedFd,
    tokens: Mutex<Vec<u64>>,
}

impl Mailbox {
    pub fn new() -> std::io::Result<Arc<Mailbox>> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a descriptor we now own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(Mailbox {
            // SAFETY: `fd` was just created and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            tokens: Mutex::new(Vec::new()),
        }))
    }

    /// The eventfd the ring reads.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A waker for the connection of `token`.
    pub fn waker(self: &Arc<Self>, token: u64) -> Waker {
        Waker::from(Arc::new(ConnWake {
            mailbox: self.clone(),
            token,
        }))
    }

    /// Wakes the connection of `token`: from any thread.
    pub fn wake(&self, token: u64) {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(token);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our eventfd. A full counter (EAGAIN) already
        // means a wake-up is pending, which is all this asks for.
        unsafe { libc::write(self.fd(), std::ptr::from_ref(&one).cast(), 8) };
    }

    /// The tokens woken since the last call.
    pub fn take(&self) -> Vec<u64> {
        std::mem::take(&mut *self.tokens.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

struct ConnWake {
    mailbox: Arc<Mailbox>,
    token: u64,
}

impl Wake for ConnWake {
    fn wake(self: Arc<Self>) {
        self.mailbox.wake(self.token);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.mailbox.wake(self.token);
    }
}
