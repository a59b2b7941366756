//! The accept loop: connections capped, a deadline for every request's headers, and a
//! shutdown that waits a bounded time for open connections.
//!
//! `axum::serve` sets no timer, so a client that opens connections and sends headers one byte
//! at a time (or never) holds them forever; a few hundred such sockets lock everyone out, and
//! one of them keeps the process alive after SIGTERM. Here each connection is served by
//! hyper's HTTP/1 connection with a header-read deadline, a connection over the cap is closed
//! at once, and shutdown closes idle connections, lets running requests end (the engine
//! cancels them), and stops waiting after a grace period.

use anyhow::Result;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use std::{future::Future, sync::Arc, time::Duration};
use tokio::{net::TcpListener, sync::Semaphore, task::JoinSet};

/// Bytes of a connection's send buffer (the kernel doubles it for its bookkeeping).
const SEND_BUFFER: usize = 64 << 10;

/// Limits of the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, from the connection's first byte or
    /// the end of its previous request.
    pub header_timeout: Duration,
    /// Time shutdown waits for open connections before closing them.
    pub shutdown_grace: Duration,
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A fixed send buffer instead of the kernel's autotuned one (megabytes on loopback):
        // replies are small and streamed, and a client that stops reading must fill the
        // buffers soon, so that its reply's queue notices (`reply::stream`).
        if let Err(e) = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER) {
            tracing::debug!("could not set a connection's send buffer: {e}");
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!("connection refused: {} open", limits.max_connections);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopped.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = stop.send(true);
    let drained =
        tokio::time::timeout(limits.shutdown_grace, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!("closing {} connections still open after the shutdown grace period", connections.len());
        connections.abort_all();
    }
    Ok(())
}
