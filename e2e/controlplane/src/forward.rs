//! The one way in: a TCP listener on the machine's loopback that forwards every connection to
//! the API server inside the namespace, so kubectl, the test process and the installer reach it
//! at `https://127.0.0.1:PORT` while everything else stays inside.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::netns::{self, NetNs};

/// A running forward; stops when dropped.
#[derive(Debug)]
pub struct Forward {
    local: SocketAddr,
    stop: CancellationToken,
}

impl Forward {
    /// Listens on `127.0.0.1:port` (0: any free port) and forwards to `target` inside `netns`.
    pub async fn start(netns: Arc<NetNs>, target: SocketAddr, port: u16) -> Result<Self, Error> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|source| Error::Forward { port, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| Error::Forward { port, source })?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stopped.cancelled() => break,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut outside, _)) = accepted else {
                    continue;
                };
                let netns = netns.clone();
                let stopped = stopped.clone();
                tokio::spawn(async move {
                    let inside =
                        tokio::task::spawn_blocking(move || netns::connect(&netns, target)).await;
                    let inside = match inside {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "failed to connect inside the namespace");
                            return;
                        }
                        Err(_) => return,
                    };
                    if inside.set_nonblocking(true).is_err() {
                        return;
                    }
                    let Ok(mut inside) = TcpStream::from_std(inside) else {
                        return;
                    };
                    tokio::select! {
                        () = stopped.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut outside, &mut inside) => {}
                    }
                });
            }
        });
        Ok(Self { local, stop })
    }

    /// The local address (`127.0.0.1:PORT`).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
