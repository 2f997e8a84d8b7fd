//! `GET /api/v1/rca?incident=ID` or `?route=R&metric=M&at=T` (also `service=`,
//! `model=` selectors; `T` RFC 3339 or unix seconds): ranked root-cause candidates
//! for a series at an onset, from `threadline_diagnosis::rca`, rendered as JSON.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_analysis::{DetectorConfig, Dimension, Metric};
use threadline_diagnosis::rca::{target_of_incident, CONFIDENCE_FORMULA};
use threadline_diagnosis::{diagnose, IncidentWatcher, RcaReport, RcaTarget};
use threadline_model::TenantId;

use crate::dto::{cause_json, incident_json, minute_rfc3339};
use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/rca", get(rca))
}

const USAGE: &str = "use incident=ID, or route=R (or service= / model=) with metric=M and at=T";

/// The target the query names. Blocking (an incident id reads the store).
fn parse_target(
    watcher: &IncidentWatcher,
    tenant: &TenantId,
    params: &[(String, String)],
) -> Result<RcaTarget, ApiError> {
    let mut incident_id = None;
    let mut filter = Vec::new();
    let (mut metric, mut at) = (None, None);
    for (key, value) in params {
        match key.as_str() {
            "incident" => incident_id = Some(threadline_analysis::IncidentId::new(value.clone())),
            "metric" => metric = Some(Metric::named(value).map_err(ApiError::BadRequest)?),
            "at" => at = Some(crate::params::parse_time(key, value)? as i64),
            "route" => filter.push((Dimension::Route, value.clone())),
            "service" => filter.push((Dimension::Service, value.clone())),
            "model" => filter.push((Dimension::Model, value.clone())),
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: {USAGE}"
                )))
            }
        }
    }
    if let Some(id) = incident_id {
        if !filter.is_empty() || metric.is_some() || at.is_some() {
            return Err(ApiError::BadRequest(format!(
                "incident= names the series, metric and time: {USAGE}"
            )));
        }
        return Ok(target_of_incident(watcher, tenant, &id)?);
    }
    let metric =
        metric.ok_or_else(|| ApiError::BadRequest(format!("metric is required: {USAGE}")))?;
    let at = at.ok_or_else(|| ApiError::BadRequest(format!("at is required: {USAGE}")))?;
    if filter.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "a series is required: {USAGE}"
        )));
    }
    Ok(RcaTarget::of_series(
        filter,
        metric,
        at.div_euclid(1_000_000_000),
    )?)
}

fn render(report: &RcaReport, cfg: &DetectorConfig) -> Value {
    let target = &report.target;
    let labels: serde_json::Map<String, Value> = target
        .filter
        .iter()
        .map(|(d, v)| (d.as_str().to_owned(), json!(v)))
        .collect();
    // An empty window says so: nothing ranked because nothing was there.
    let note = report.is_empty_window().then(|| {
        format!(
            "no requests of this series between {} and {}: check the route, model and time",
            minute_rfc3339(report.baseline_from_minute),
            minute_rfc3339(target.end_minute + 1)
        )
    });
    json!({
        "note": note,
        "target": {
            "series": labels,
            "metric": target.metric.as_str(),
            "level": target.level.as_str(),
            "unit": target.metric.unit(),
            "onset": minute_rfc3339(target.onset_minute),
            "window_end": minute_rfc3339(target.end_minute + 1),
            "baseline_from": minute_rfc3339(report.baseline_from_minute),
        },
        "incident": target.incident.as_ref().map(|i| incident_json(i, cfg)),
        "metric_before": report.metric_before,
        "metric_during": report.metric_during,
        "requests_before": report.requests_before,
        "requests_during": report.requests_during,
        // Which refusals moved: share of requests per rejection reason.
        "rejections_by_reason": {
            "before": report.rejections_before,
            "during": report.rejections_during,
        },
        "confidence_formula": CONFIDENCE_FORMULA,
        "candidates": report.causes.iter().map(cause_json).collect::<Vec<_>>(),
    })
}

async fn rca(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let watcher = Arc::clone(&state.watcher);
    let rules = Arc::clone(&state.rca_rules);
    let store = state.store.clone();
    Ok(Json(
        crate::error::blocking(move || {
            let target = parse_target(&watcher, &tenant, &params)?;
            let report = diagnose(&store, &tenant, &rules, target)?;
            Ok(render(&report, watcher.config()))
        })
        .await?,
    ))
}
