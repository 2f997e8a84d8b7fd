//! `GET /api/v1/service-map?since=1h` (or `from=&to=`): services, the calls between
//! them and the models they call over the range, each edge with its request rate,
//! error rate and latency quantiles (see `threadline_diagnosis::service_map`).

use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};
use threadline_diagnosis::service_map::service_map;

use crate::error::{blocking, ApiError};
use crate::params::{now_ns, parse_since, parse_time};
use crate::state::{AppState, Tenant};

/// The range when none is given: the last hour.
const DEFAULT_RANGE_NS: i64 = 3_600_000_000_000;

pub(crate) async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let (mut from, mut to) = (None, None);
    for (key, value) in &params {
        match key.as_str() {
            "from" | "start" => from = Some(parse_time(key, value)? as i64),
            "since" => from = Some(parse_since(key, value)? as i64),
            "to" | "end" => to = Some(parse_time(key, value)? as i64),
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: use since, from or to"
                )))
            }
        }
    }
    let to = to.unwrap_or_else(now_ns);
    let from = from.unwrap_or(to.saturating_sub(DEFAULT_RANGE_NS));
    if from > to {
        return Err(ApiError::BadRequest(
            "from is after to: the range is empty".to_owned(),
        ));
    }
    let store = state.store.clone();
    let map = blocking(move || Ok(service_map(&store, &tenant, from, to)?)).await?;
    let minutes = map.minutes();
    Ok(Json(json!({
        "from_unix_nano": map.from_ns.to_string(),
        "to_unix_nano": map.to_ns.to_string(),
        "services": map.services,
        "models": map.models,
        "edges": map.edges.iter().map(|e| json!({
            "caller": e.caller,
            "callee": e.callee,
            "target": e.target.as_str(),
            "calls": e.calls,
            "errors": e.errors,
            "rate_per_min": e.calls as f64 / minutes,
            "error_rate": e.error_rate(),
            "p50_ms": e.p50_ms,
            "p99_ms": e.p99_ms,
        })).collect::<Vec<_>>(),
    })))
}
