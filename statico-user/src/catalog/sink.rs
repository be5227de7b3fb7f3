//! Where an answer is written: the [`Sink`] trait a catalog writes HTTP/1.1 answers into — a
//! connection's output queue (`conn::output::Output`) or a plain buffer — and [`FileAt`], where
//! a shared body lies in a file, so a runtime can send it with `sendfile`.
//!
//! Defined here, below the connection, so that the catalog writes answers without knowing the
//! connection that sends them.

use bytes::Bytes;

/// Where a session writes its responses: a connection's output queue, or a plain buffer (a response
/// held for `--delay`, a test).
pub trait Sink {
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// A body stored elsewhere (a static site's), and where it lies in a file if it does: kept by
    /// reference where worth it, else copied.
    fn share(&mut self, body: &Bytes, file: Option<FileAt>);
    /// Bytes written and not yet sent.
    fn unsent(&self) -> usize;
}

impl Sink for Vec<u8> {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }

    fn share(&mut self, body: &Bytes, _: Option<FileAt>) {
        Vec::extend_from_slice(self, body);
    }

    fn unsent(&self) -> usize {
        self.len()
    }
}

/// Where a shared body's first byte lies in a file that outlives it: the `Bytes` holding the body
/// owns the file (see `catalog::site::store`), so the descriptor is open while a chunk holds the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileAt {
    pub fd: std::os::raw::c_int,
    pub offset: u64,
}
