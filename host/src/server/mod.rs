//! Serving: bind, accept connections, and shut down gracefully.
//!
//! Connections are served by hyper directly, so the header read timeout and
//! graceful draining are hyper's own, not re-implemented here; what hyper
//! leaves open (a cap, and connections that never send a byte) is in
//! [`connections`].

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

mod bare_errors;
mod connections;

use connections::{Admission, ClientIo};

use crate::app::App;
use crate::cfg::Config;
use crate::domain::auth;
use crate::domain::seal::Sealer;
use crate::http;
use crate::store::Store;

/// What `serve` is given beyond the configuration: secrets from the
/// environment, and how it logs.
#[derive(Default)]
pub struct StartSecrets {
    /// `SWITCHYARD_BOOTSTRAP_KEY`: the first operator's API key.
    pub bootstrap_key: Option<String>,
    /// `SWITCHYARD_MASTER_KEY`: the key that seals secrets (64 hex digits).
    pub master_key: Option<String>,
    /// Logs are JSON lines: the key banner must be one too.
    pub json_logs: bool,
}

/// Opens the store, prepares the state and binds the listener: everything that
/// can fail on bad configuration fails here, before serving starts.
pub async fn prepare(mut cfg: Config, secrets: StartSecrets) -> anyhow::Result<(App, TcpListener)> {
    let fd_limit = connections::raise_fd_limit();
    cfg.limits.max_connections =
        Some(connections::cap(cfg.limits.max_connections, fd_limit).map_err(anyhow::Error::msg)?);
    let store = Store::open(&cfg.store, &cfg.data_dir).await?;
    let sealer = Sealer::load(&cfg.data_dir, secrets.master_key.as_deref())?;
    sealer.verify(&store).await?;
    if let Some(key) = auth::bootstrap(&store, secrets.bootstrap_key.as_deref()).await? {
        // Shown once: only its hash is kept.
        if secrets.json_logs {
            tracing::warn!(api_key = %key, "created the operator account; its API key is shown only this once");
        } else {
            eprintln!(
                "Created the operator account. Its API key is shown only this once:\n\n    {key}\n"
            );
        }
    }
    let listener = TcpListener::bind(cfg.listen).await.with_context(|| {
        format!(
            "cannot listen on {}; pick another address with --listen",
            cfg.listen
        )
    })?;
    Ok((App::start(cfg, store, sealer).await?, listener))
}

/// Serves until `shutdown` resolves, then stops accepting, lets in-flight
/// requests and webhook sends finish within the grace period, stops the
/// host's loops in order and flushes the store.
pub async fn serve(
    app: App,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    if let Some(addr) = app.cfg.metrics.listen {
        serve_metrics(&app, addr).await?;
    }
    let graceful = GracefulShutdown::new();
    let failure = accept(&app, listener, &graceful, shutdown).await;
    let limits = &app.cfg.limits;
    tracing::info!("shutting down: draining in-flight requests and deliveries");
    let until = tokio::time::Instant::now() + limits.shutdown_grace();
    if tokio::time::timeout_at(until, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = limits.shutdown_grace_ms,
            "requests still running after the grace period were cut off"
        );
    }
    // The loops stop in order: sends under way finish and are recorded,
    // so that none goes twice.
    let left = app.stop(until).await;
    if left > 0 {
        tracing::warn!(
            deliveries = left,
            grace_ms = limits.shutdown_grace_ms,
            "deliveries still being sent after the grace period were cut off; they go again after a restart"
        );
    }
    if let Some(why) = failure {
        anyhow::bail!("stopped because the store failed: {why}");
    }
    app.store.flush().await.context("flushing the store")?;
    tracing::info!("stopped");
    Ok(())
}

/// Serves `/metrics` on a listener of its own, until intake stops.
async fn serve_metrics(app: &App, addr: std::net::SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for [metrics] listen"))?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving /metrics");
    let router = http::metrics_router(app.clone());
    app.tasks.spawn(crate::tasks::Stage::Intake, async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

/// Accepts connections until `shutdown` resolves or the store fails (then
/// returns why), each served by hyper under `graceful`.
async fn accept(
    app: &App,
    listener: TcpListener,
    graceful: &GracefulShutdown,
    shutdown: impl Future<Output = ()>,
) -> Option<String> {
    let limits = app.cfg.limits.clone();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout());
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let service = TowerToHyperService::new(http::router(app.clone()));
    let admission = Admission::new(limits.max_connections.unwrap_or(connections::FALLBACK_CAP));
    let builder = std::sync::Arc::new(builder);
    tokio::pin!(shutdown);
    let failed = app.store.failed();
    tokio::pin!(failed);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return None,
            why = &mut failed => return Some(why),
        };
        let Some(ticket) = admission.admit() else {
            tracing::warn!(%peer, open = admission.open(), "connection refused: every connection is in use (limits.max_connections)");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let header_timeout = limits.header_read_timeout();
        let deadline = tokio::time::Instant::now() + header_timeout;
        let (builder, service, watcher) = (builder.clone(), service.clone(), graceful.watcher());
        tokio::spawn(async move {
            if !ticket.first_byte(&stream, header_timeout).await {
                tracing::debug!(%peer, "closed a connection that sent nothing");
                return;
            }
            let io = TokioIo::new(ClientIo::new(stream, deadline));
            let conn = watcher.watch(builder.serve_connection(io, service));
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(ticket);
        });
    }
}

/// Installs SIGINT and SIGTERM handlers now, and returns a future that
/// resolves on either. Installing eagerly matters: a handler installed only
/// when the future is first polled leaves a window in which SIGTERM kills the
/// process outright. Needs a tokio runtime.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = interrupt.recv() => {},
        }
    })
}
