//! Threadline's network edge: the OTLP/HTTP and OTLP/gRPC receivers, the JSON query
//! API, API-key auth and the server configuration. The only crate with axum and tonic.

mod alerts;
mod assets_api;
pub mod auth;
mod body_budget;
pub mod config;
mod cpu_pool;
mod dto;
mod erasure_api;
mod error;
mod guard;
mod health_api;
mod impact_api;
mod incidents_api;
mod ingest;
mod jaeger_api;
mod jaeger_model;
mod jaeger_params;
mod lineage_api;
mod listen;
mod logs_api;
mod marquez;
mod metrics_api;
mod misdirected;
mod nodes_api;
mod otlp_grpc;
mod otlp_http;
mod params;
mod prometheus;
mod prov_api;
mod query_api;
mod rca_api;
mod service_map_api;
mod sessions_api;
mod trace_stream;
mod trace_view;
mod ui;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use threadline_store::{EmbeddedConfig, Store, StoreError};
use tokio::net::TcpListener;

pub use config::{
    AlertFormat, AlertsConfig, ConfigError, ConfigOverrides, OperatorKeys, ServerConfig, TenantKeys,
};
pub use error::ApiError;

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

/// How often the background detector pass runs.
const INCIDENT_WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The incident watcher's background pass, every few seconds, until `stopped`
/// resolves; a pass under way is finished first. The task holds the watcher (and so
/// the store): it must end for the store to close when the server stops.
fn spawn_incident_watch(
    watcher: Arc<threadline_diagnosis::IncidentWatcher>,
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
            match tokio::task::spawn_blocking(move || watcher.background_pass()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "incident detection failed"),
                Err(e) => tracing::warn!(error = %e, "incident detection task failed"),
            }
        }
    })
}

/// Opens the store, binds the three listeners (logging one line each, with the real
/// port when 0 was asked) and serves until `shutdown` resolves.
/// Where a started server listens (ports chosen by the OS when asked for port 0).
#[derive(Clone, Copy, Debug)]
pub struct BoundAddrs {
    pub http: SocketAddr,
    pub otlp_http: SocketAddr,
    pub otlp_grpc: SocketAddr,
}

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
    let store = Store::open_embedded(&config.data_dir, store_config)?;
    tracing::info!(data_dir = %config.data_dir.display(), auth = config.auth_required(), "store opened");
    let auth = Arc::new(auth::Authenticator::new(
        &config.tenants,
        &config.operator_keys.0,
    ));
    let stats = Arc::new(ingest::IngestStats::default());
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let ctx = ingest::IngestContext {
        store: store.clone(),
        stats: Arc::clone(&stats),
        auth: Arc::clone(&auth),
        cpu_pool: Arc::new(cpu_pool::CpuPool::start(cores + 1).map_err(ServeError::IngestThreads)?),
        llm_metrics: Arc::new(prometheus::LlmMetrics::default()),
        max_future_skew: config.limits.max_future_skew,
        max_span_age: config.limits.max_span_age,
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
        Ok::<_, ServeError>(listener)
    };
    let otlp_http = bind("otlp-http", config.otlp_http_addr).await?;
    let otlp_grpc = bind("otlp-grpc", config.otlp_grpc_addr).await?;
    let http = bind("http", config.http_addr).await?;
    if let Some(ready) = ready {
        let local = |l: &TcpListener, what, addr| {
            l.local_addr()
                .map_err(|source| ServeError::Bind { what, addr, source })
        };
        let _ = ready.send(BoundAddrs {
            http: local(&http, "http", config.http_addr)?,
            otlp_http: local(&otlp_http, "otlp-http", config.otlp_http_addr)?,
            otlp_grpc: local(&otlp_grpc, "otlp-grpc", config.otlp_grpc_addr)?,
        });
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

    let alert_sink = config.alerts.clone().map(|a| {
        let base = a
            .base_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", http.local_addr().unwrap_or(config.http_addr)));
        alerts::AlertSink::start(
            a,
            base.trim_end_matches('/').to_owned(),
            config.detector.clone(),
        )
    });
    let rca_rules = Arc::new(config.rca_rules.clone());
    let slo_rules = alert_sink
        .as_ref()
        .map(|sink| sink.rules.clone())
        .unwrap_or_default();
    let watcher = Arc::new(threadline_diagnosis::IncidentWatcher::new(
        store.clone(),
        config.detector.clone(),
        Arc::clone(&rca_rules),
        slo_rules,
        alert_sink.map(|sink| sink as Arc<dyn threadline_diagnosis::IncidentListener>),
    ));
    let watch = spawn_incident_watch(Arc::clone(&watcher), stopped());

    let budget = body_budget::BodyBudget::new(
        config.limits.max_inflight_body_bytes,
        config.max_body_bytes,
        config.limits.body_read_timeout,
    );
    let origins = Arc::new(guard::Origins {
        check_hosts: !config.auth_required(),
        hosts: config.allowed_hosts.clone(),
        origins: config.allowed_origins.clone(),
    });
    let port = |l: &TcpListener, addr: std::net::SocketAddr| {
        l.local_addr().map_or(addr.port(), |a| a.port())
    };
    let otlp_ports = misdirected::OtlpPorts {
        http: port(&otlp_http, config.otlp_http_addr),
        grpc: port(&otlp_grpc, config.otlp_grpc_addr),
    };
    let otlp_http_app = otlp_http::router(otlp_http::OtlpHttpState {
        ctx: ctx.clone(),
        budget: budget.clone(),
        origins: Arc::clone(&origins),
        ports: otlp_ports,
    });
    let query_state = query_api::QueryState {
        otlp_ports,
        store: store.clone(),
        auth: Arc::clone(&auth),
        stats: Arc::clone(&stats),
        prices: Arc::new(config.prices.clone()),
    };
    let grpc_budget = budget.clone();
    let api_guard = guard::ApiGuard {
        origins,
        auth: Arc::clone(&auth),
        budget,
        ports: otlp_ports,
    };
    let query_app = lineage_api::router(lineage_api::LineageState {
        store: store.clone(),
        auth: Arc::clone(&auth),
        cpu_pool: Arc::clone(&ctx.cpu_pool),
    })
    .merge(assets_api::router(assets_api::AssetsState {
        store: store.clone(),
        auth: Arc::clone(&auth),
    }))
    .merge(erasure_api::router(erasure_api::ErasureState {
        store: store.clone(),
        auth: Arc::clone(&auth),
        llm: Arc::clone(&ctx.llm_metrics),
    }))
    .merge(impact_api::router(impact_api::ImpactState {
        store: store.clone(),
        auth: Arc::clone(&auth),
        policy: Arc::new(config.impact_policy.clone()),
    }))
    .merge(prov_api::router(prov_api::ProvState {
        store: store.clone(),
        auth: Arc::clone(&auth),
    }))
    .merge(incidents_api::router(incidents_api::IncidentsState {
        watcher: Arc::clone(&watcher),
        auth: Arc::clone(&auth),
    }))
    .merge(health_api::router(health_api::HealthState {
        watcher: Arc::clone(&watcher),
        auth: Arc::clone(&auth),
    }))
    .merge(rca_api::router(rca_api::RcaState {
        watcher: Arc::clone(&watcher),
        auth: Arc::clone(&auth),
        rules: rca_rules,
    }))
    .merge(metrics_api::router(metrics_api::MetricsState {
        store: store.clone(),
        auth: Arc::clone(&auth),
        prices: Arc::new(config.prices.clone()),
    }))
    .merge(prometheus::router(prometheus::PrometheusState {
        store: store.clone(),
        auth: Arc::clone(&auth),
        stats: Arc::clone(&stats),
        llm: Arc::clone(&ctx.llm_metrics),
    }))
    .merge(logs_api::router(query_state.clone()))
    .merge(query_api::router(query_state))
    .merge(jaeger_api::router(jaeger_api::JaegerState {
        store: store.clone(),
        auth,
        prices: Arc::new(config.prices.clone()),
    }))
    .merge(ui::router())
    // The guard reads and bounds bodies (max_body_bytes, the in-flight budget):
    // axum's own 2 MiB default would be a second, different limit.
    .layer(axum::middleware::from_fn_with_state(
        api_guard,
        guard::api_guard,
    ))
    .layer(axum::extract::DefaultBodyLimit::disable());
    let timeouts = listen::ConnectionTimeouts {
        header_read: config.limits.header_read_timeout,
        idle: config.limits.idle_timeout,
    };
    let grpc = tonic::transport::Server::builder()
        // A request (its message read, stored and answered) that takes longer is
        // cancelled; a connection silent for the idle timeout is closed.
        .timeout(config.limits.body_read_timeout)
        .add_service(otlp_grpc::service::<ingest::Traces>(
            ctx.clone(),
            config.max_body_bytes,
            grpc_budget.clone(),
        ))
        .add_service(otlp_grpc::service::<ingest::Logs>(
            ctx,
            config.max_body_bytes,
            grpc_budget,
        ))
        .add_service(otlp_grpc::MetricsRefusal)
        .serve_with_incoming_shutdown(
            listen::idle_closing(otlp_grpc, config.limits.idle_timeout),
            stopped(),
        );

    let (a, b, c) = tokio::join!(
        listen::serve_http(otlp_http, otlp_http_app, timeouts, false, stopped()),
        listen::serve_http(http, query_app, timeouts, true, stopped()),
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
