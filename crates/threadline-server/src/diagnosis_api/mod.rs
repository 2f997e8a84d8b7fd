//! The diagnosis API under `/api/v1`: incidents, ranked root causes, node health
//! and metric series. Handlers parse, call `threadline-diagnosis` on the blocking pool
//! and render.

use axum::Router;

use crate::state::AppState;

pub(crate) mod health;
pub(crate) mod incidents;
pub(crate) mod metrics;
pub(crate) mod rca;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .merge(incidents::router())
        .merge(health::router())
        .merge(rca::router())
        .merge(metrics::router())
}
