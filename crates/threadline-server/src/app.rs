//! The server's routers, built from one `AppState`: `app` (the JSON API, Grafana's
//! Jaeger API, `/metrics` and the UI, behind the request guard), `otlp_http_app` and
//! the gRPC services. Tests drive `app(state)` in process (`tower::ServiceExt::oneshot`).

use std::time::Duration;

use axum::Router;

use crate::error::ApiError;
use crate::guard::{api_guard, ApiGuard};
use crate::otlp_api::{grpc, ingest};
use crate::state::AppState;

/// The API port: every JSON endpoint, the Jaeger query API, `/metrics` and the UI.
pub fn app(state: AppState) -> Router {
    let guard = ApiGuard {
        origins: state.origins.clone(),
        auth: state.auth.clone(),
        budget: state.budget.clone(),
        ports: state.otlp_ports,
    };
    Router::new()
        .merge(crate::query_api::router())
        .merge(crate::lineage_api::router())
        .merge(crate::diagnosis_api::router())
        .merge(crate::erasure_api::router())
        .merge(crate::prometheus::router())
        .merge(crate::jaeger_api::router())
        .fallback(|| async { ApiError::NotFound("no such endpoint".to_owned()) })
        .with_state(state)
        .merge(crate::ui::router())
        // The guard reads and bounds bodies (max_body_bytes, the in-flight budget):
        // axum's own 2 MiB default would be a second, different limit.
        .layer(axum::middleware::from_fn_with_state(guard, api_guard))
        .layer(axum::extract::DefaultBodyLimit::disable())
}

/// The OTLP/HTTP port: `POST /v1/traces` and `/v1/logs`.
pub fn otlp_http_app(state: AppState) -> Router {
    crate::otlp_api::http::router().with_state(state)
}

/// The OTLP/gRPC services: traces, logs, and a refusal for metrics. A request (its
/// message read, stored and answered) that takes longer than `timeout` is cancelled.
pub(crate) fn otlp_grpc(state: &AppState, timeout: Duration) -> tonic::transport::server::Router {
    tonic::transport::Server::builder()
        .timeout(timeout)
        .add_service(grpc::service::<ingest::Traces>(
            state.ingest.clone(),
            state.max_body_bytes,
            state.budget.clone(),
        ))
        .add_service(grpc::service::<ingest::Logs>(
            state.ingest.clone(),
            state.max_body_bytes,
            state.budget.clone(),
        ))
        .add_service(grpc::MetricsRefusal)
}
