//! Where a connection that leaves HTTP/1.1 enters HTTP/2, on either runtime: after an `Upgrade: h2c`,
//! the client's preface and first SETTINGS frame are collected (so that [`super::upgraded_prefix`] can
//! put stream 1's request behind them), then [`super::serve`] runs over the bytes read so far followed
//! by the transport, with bytes counted by [`super::Rewind`].

use http::Request;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::{serve, upgraded_prefix, H2Settings, OutputMoved, Rewind};
use crate::catalog::StreamAnswer;
use crate::observe::meter::WorkerCounters;
use crate::proto::detect::UpgradeRequest;

/// The most an upgrading client may send before its first SETTINGS frame is complete.
const UPGRADE_MAX: usize = 64 * 1024;

/// Serves HTTP/2 on `stream`, whose first bytes `read` were already taken by HTTP/1.1 (with the
/// request of an `Upgrade: h2c`, if that is how it switched); see [`serve`] for the rest.
#[allow(clippy::too_many_arguments)] // what `serve` takes, plus the switch
pub async fn serve_switched<T: AsyncRead + AsyncWrite + Unpin>(
    mut stream: T,
    mut read: Vec<u8>,
    upgrade: Option<UpgradeRequest>,
    settings: H2Settings,
    response: &dyn Fn(&Request<h2::RecvStream>) -> StreamAnswer,
    counters: &WorkerCounters,
    verbose: u8,
    drain: impl std::future::Future<Output = ()>,
    moved: OutputMoved,
) {
    let prefix = match upgrade {
        None => read,
        Some(up) => loop {
            match upgraded_prefix(&read, &up) {
                Some(Ok(prefix)) => break prefix,
                Some(Err(())) => return,
                None if read.len() > UPGRADE_MAX => return,
                None => {
                    let mut chunk = vec![0u8; 16 * 1024];
                    let more = stream.read(&mut chunk);
                    match crate::kernel::timer::timeout(settings.header_timeout, more).await {
                        Ok(Ok(n)) if n > 0 => read.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
            }
        },
    };
    let io = Rewind::new(prefix, stream, counters, moved);
    serve(io, settings, response, counters, verbose, drain).await;
}
