//! `GET /api/v1/incidents?from=&to=` (onsets in span time, RFC 3339 or unix seconds)
//! and `GET /api/v1/incidents/{id}`. Both first bring the detector up to date.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_analysis::{DetectorConfig, Incident, BUCKET_NS};

use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/incidents", get(list))
        .route("/api/v1/incidents/{id}", get(one))
        .route("/api/v1/nodes", get(crate::lineage_api::nodes::list))
}

/// RFC 3339 (seconds) of a unix minute.
pub(crate) fn minute_rfc3339(minute: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs((minute.max(0) * 60) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The public JSON of an incident.
pub(crate) fn incident_json(i: &Incident, cfg: &DetectorConfig) -> Value {
    let anomalies: Vec<Value> = i
        .anomalies
        .iter()
        .map(|a| {
            json!({
                "metric": a.metric,
                "onset": minute_rfc3339(a.onset_minute),
                "detected_at": minute_rfc3339(a.detected_minute + 1),
                "baseline": a.baseline,
                "observed": a.observed,
                "score": a.score,
            })
        })
        .collect();
    json!({
        "id": i.id,
        "service": i.service,
        "route": i.route,
        "model": i.model,
        "metric": i.metric,
        "onset": minute_rfc3339(i.onset_minute),
        "onset_unix": i.onset_minute * 60,
        "detected_at": minute_rfc3339(i.detected_minute + 1),
        "end": i.end_minute.map(|m| minute_rfc3339(m + 1)),
        "status": if i.is_open() { "open" } else { "resolved" },
        "severity": i.severity(cfg),
        "score": i.score,
        "anomalies": anomalies,
    })
}

async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let (mut from, mut to) = (0i64, i64::MAX);
    for (key, value) in &params {
        let t = || crate::query_api::parse_time(key, value).map(|ns| ns as i64);
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
    let incidents = crate::error::blocking(move || {
        watcher.catch_up(&tenant)?;
        Ok(watcher.store().incidents(
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
    let watcher = Arc::clone(&state.watcher);
    let incident = crate::error::blocking(move || {
        watcher.catch_up(&tenant)?;
        watcher
            .store()
            .incident(&tenant, &id)?
            .ok_or_else(|| ApiError::NotFound(format!("no incident {id:?}")))
    })
    .await?;
    Ok(Json(incident_json(&incident, state.watcher.config())))
}
