//! `GET /api/v1/node-health/{node_id}`: the health of a lineage node, from
//! `threadline_diagnosis::health`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_diagnosis::health::{node_health as health_of, NodeHealth};

use crate::error::ApiError;
use crate::lineage_api::resolve_one;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/node-health/{*node_id}", get(node_health))
}

fn render(health: &NodeHealth) -> Value {
    json!({
        "node": health.node.to_string(),
        "score": (health.score * 1000.0).round() / 1000.0,
        "status": health.status,
        "factors": health.factors,
    })
}

async fn node_health(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(node): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let watcher = Arc::clone(&state.watcher);
    let store = state.store.clone();
    let node = node.trim_start_matches('/').to_owned();
    Ok(Json(
        crate::error::blocking(move || {
            let node = resolve_one(&store, &tenant, &node)?;
            Ok(render(&health_of(&watcher, &tenant, node)?))
        })
        .await?,
    ))
}
