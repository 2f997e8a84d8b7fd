//! Threadline's network edge: the OTLP/HTTP and OTLP/gRPC receivers, the JSON query
//! API, API-key auth and the server configuration. The only crate with axum and tonic.

mod alerts;
mod app;
pub mod auth;
mod body_budget;
pub mod config;
mod cpu_pool;
mod diagnosis_api;
mod dto;
mod erasure_api;
mod error;
mod guard;
mod jaeger_api;
mod lineage_api;
mod listen;
mod misdirected;
mod otlp_api;
mod params;
mod prometheus;
mod query_api;
mod state;
mod telemetry;
mod ui;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use threadline_store::{EmbeddedConfig, Store, StoreError};
use tokio::net::TcpListener;

pub use app::{app, otlp_http_app};
pub use config::{
    AlertFormat, AlertsConfig, ConfigError, ConfigOverrides, OperatorKeys, ServerConfig, TenantKeys,
};
pub use error::ApiError;
pub use state::AppState;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{what} listener failed: {message}")]
    Listener { what: &'static str, message: String },
    #[error("cannot start the ingest worker threads: {0}")]
    IngestThreads(std::io::Error),
}

/// How often the background detector pass runs (and its lease is renewed).
const INCIDENT_WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long the detector's lease lasts unrenewed: a replica that dies hands detection
/// over after at most this long.
const DETECTOR_LEASE_NS: i64 = 15_000_000_000;
/// The lease under which incident detection and its alerts run.
const DETECTOR_LEASE: &str = "incident-detection";

/// This replica's name among replicas, kept in its data directory (`replica-id`) so a
/// replica restarted after a crash reclaims its own lease at once instead of waiting
/// for it to lapse (the directory's lock keeps two processes from sharing a name).
fn replica_id(data_dir: &std::path::Path) -> String {
    let path = data_dir.join("replica-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        if !id.trim().is_empty() {
            return id.trim().to_owned();
        }
    }
    use std::hash::{BuildHasher, Hasher};
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let id = format!("{}-{:016x}", host.trim(), h.finish());
    if let Err(e) = std::fs::write(&path, &id) {
        tracing::warn!(error = %e, path = %path.display(), "the replica id is not kept");
    }
    id
}

/// Takes or renews the detector's lease and tells the watcher whether it runs.
fn hold_detector_lease(watcher: &threadline_diagnosis::IncidentWatcher, replica: &str) {
    let held = watcher
        .store()
        .hold_lease(DETECTOR_LEASE, replica, DETECTOR_LEASE_NS)
        .unwrap_or_else(|e| {
            // Unrenewed, the lease lapses: stop before another replica takes over.
            tracing::warn!(error = %e, "the detector lease cannot be renewed");
            false
        });
    if held != watcher.is_active() {
        tracing::info!(replica, held, "incident detection lease");
    }
    if let Err(e) = watcher.set_active(held) {
        tracing::warn!(error = %e, "incident detection cannot switch");
    }
}

/// The incident watcher's background pass, every few seconds, until `stopped`
/// resolves; a pass under way is finished first. Each pass first holds the detector's
/// lease (on a store replicas share, one runs detection at a time). The task holds the
/// watcher (and so the store): it must end for the store to close when the server
/// stops.
fn spawn_incident_watch(
    watcher: Arc<threadline_diagnosis::IncidentWatcher>,
    replica: String,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INCIDENT_WATCH_INTERVAL);
        let mut stopped = std::pin::pin!(stopped);
        loop {
            tokio::select! {
                () = &mut stopped => return,
                _ = tick.tick() => {}
            }
            let watcher = Arc::clone(&watcher);
            let replica = replica.clone();
            let pass = tokio::task::spawn_blocking(move || {
                hold_detector_lease(&watcher, &replica);
                if watcher.is_active() {
                    watcher.background_pass()
                } else {
                    Ok(())
                }
            });
            match pass.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "incident detection failed"),
                Err(e) => tracing::warn!(error = %e, "incident detection task failed"),
            }
        }
    })
}

/// Where a started server listens (ports chosen by the OS when asked for port 0).
#[derive(Clone, Copy, Debug)]
pub struct BoundAddrs {
    pub http: SocketAddr,
    pub otlp_http: SocketAddr,
    pub otlp_grpc: SocketAddr,
}

/// Opens the store, binds the three listeners (logging one line each, with the real
/// port when 0 was asked) and serves until `shutdown` resolves.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_reporting(config, shutdown, None).await
}

/// `serve`, telling `ready` where it listens once every listener is bound.
pub async fn serve_reporting(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: Option<tokio::sync::oneshot::Sender<BoundAddrs>>,
) -> Result<(), ServeError> {
    let store_config = EmbeddedConfig {
        max_queued_batches: config.max_queued_batches,
        drift: config.drift.clone(),
        ..EmbeddedConfig::default()
    };
    let store = match &config.store {
        config::StoreLocation::Embedded => {
            let store = Store::open_embedded(&config.data_dir, store_config)?;
            tracing::info!(data_dir = %config.data_dir.display(), auth = config.auth_required(), "store opened");
            store
        }
        config::StoreLocation::ClickHouse {
            config: ch,
            spool_max_bytes,
        } => {
            let options = threadline_store::ClickHouseOptions {
                max_queued_batches: config.max_queued_batches,
                drift: config.drift.clone(),
                spool_max_bytes: *spool_max_bytes,
                ..Default::default()
            };
            // Connecting and migrating wait on the network: off the async workers.
            let (ch, local_dir) = (ch.clone(), config.data_dir.clone());
            let store = tokio::task::spawn_blocking(move || {
                threadline_store::ClickHouseStore::open(&ch, options, &local_dir)
            })
            .await
            .map_err(|e| {
                threadline_store::StoreError::unavailable(format!("opening ClickHouse failed: {e}"))
            })??;
            tracing::info!(
                database = store.database(),
                auth = config.auth_required(),
                "store opened"
            );
            Store::new(store)
        }
    };

    let bind = |what: &'static str, addr: SocketAddr| async move {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { what, addr, source })?;
        let local =
            listener
                .local_addr()
                .map_err(|source| ServeError::Bind { what, addr, source })?;
        tracing::info!("{what} listening on {local}");
        Ok::<_, ServeError>((listener, local))
    };
    let (otlp_http, otlp_http_addr) = bind("otlp-http", config.otlp_http_addr).await?;
    let (otlp_grpc, otlp_grpc_addr) = bind("otlp-grpc", config.otlp_grpc_addr).await?;
    let (http, http_addr) = bind("http", config.http_addr).await?;
    let bound = BoundAddrs {
        http: http_addr,
        otlp_http: otlp_http_addr,
        otlp_grpc: otlp_grpc_addr,
    };
    // The state sees where the server listens (ports the OS chose included).
    let config = ServerConfig {
        http_addr,
        otlp_http_addr,
        otlp_grpc_addr,
        ..config
    };
    let state = AppState::new(&config, store).map_err(ServeError::IngestThreads)?;
    if let Some(ready) = ready {
        let _ = ready.send(bound);
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    // A store replicas share starts without detection until its lease is held (the
    // watch's first pass, at once); the embedded store is this process's alone.
    let replica = replica_id(&config.data_dir);
    if state.store.as_sqlite().is_none() {
        state
            .watcher()
            .set_active(false)
            .map_err(ServeError::Store)?;
    }
    let watch = spawn_incident_watch(Arc::clone(state.watcher()), replica, stopped());

    let timeouts = listen::ConnectionTimeouts {
        header_read: config.limits.header_read_timeout,
        idle: config.limits.idle_timeout,
    };
    let grpc = app::otlp_grpc(&state, config.limits.body_read_timeout)
        .serve_with_incoming_shutdown(
            listen::idle_closing(otlp_grpc, config.limits.idle_timeout),
            stopped(),
        );

    let (a, b, c) = tokio::join!(
        listen::serve_http(
            otlp_http,
            otlp_http_app(state.clone()),
            timeouts,
            false,
            stopped()
        ),
        listen::serve_http(http, app(state), timeouts, true, stopped()),
        grpc,
    );
    a.map_err(|e| ServeError::Listener {
        what: "otlp-http",
        message: e.to_string(),
    })?;
    b.map_err(|e| ServeError::Listener {
        what: "http",
        message: e.to_string(),
    })?;
    c.map_err(|e| ServeError::Listener {
        what: "otlp-grpc",
        message: e.to_string(),
    })?;
    // The last holder of the store but this function: once it ends, the store closes
    // (its writer drains its queue and its threads stop) as this function returns.
    if let Err(e) = watch.await {
        tracing::warn!(error = %e, "incident detection task failed");
    }
    tracing::info!("stopped");
    Ok(())
}
