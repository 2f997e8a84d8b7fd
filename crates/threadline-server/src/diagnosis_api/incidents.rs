//! `GET /api/v1/incidents?from=&to=` (onsets in span time, RFC 3339 or unix seconds)
//! and `GET /api/v1/incidents/{id}`. Both first bring the detector up to date.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_analysis::BUCKET_NS;

use crate::dto::incident_json;
use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/incidents", get(list))
        .route("/api/v1/incidents/{id}", get(one))
}

async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let (mut from, mut to) = (0i64, i64::MAX);
    for (key, value) in &params {
        let t = || crate::params::parse_time(key, value).map(|ns| ns as i64);
        match key.as_str() {
            "from" => from = t()?,
            "to" => to = t()?,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: use from, to"
                )))
            }
        }
    }
    let watcher = Arc::clone(&state.watcher);
    let store = state.store.clone();
    let incidents = crate::error::blocking(move || {
        watcher.catch_up(&tenant)?;
        Ok(store.incidents(
            &tenant,
            from.div_euclid(BUCKET_NS),
            to.div_euclid(BUCKET_NS),
        )?)
    })
    .await?;
    let cfg = state.watcher.config();
    Ok(Json(json!({
        "incidents": incidents.iter().map(|i| incident_json(i, cfg)).collect::<Vec<_>>(),
    })))
}

async fn one(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = threadline_analysis::IncidentId::new(id);
    let watcher = Arc::clone(&state.watcher);
    let store = state.store.clone();
    let incident = crate::error::blocking(move || {
        watcher.catch_up(&tenant)?;
        store
            .incident(&tenant, &id)?
            .ok_or_else(|| ApiError::NotFound(format!("no incident {:?}", id.as_str())))
    })
    .await?;
    Ok(Json(incident_json(&incident, state.watcher.config())))
}
