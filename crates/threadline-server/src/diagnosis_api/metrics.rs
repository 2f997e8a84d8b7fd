//! `GET /api/v1/metrics?metric=M&group_by=D,…&D=V…&from=T&to=T&step=S&level=L`: a
//! metric of the rollups over time, per group. Times are span (event) times, RFC 3339
//! or unix seconds; `step` is seconds (or `5m`, `1h`), a whole number of minutes.
//! `level` is `request` (routes' requests, end to end) or `call` (model calls); by
//! default `request` when the query groups or filters by route, else `call`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_analysis::{Dimension, Level, Metric, BUCKET_NS};
use threadline_diagnosis::metric_series::{metric_series, SeriesQuery};
use threadline_model::TenantId;
use threadline_store::Store;

use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/metrics", get(metrics))
}

/// Points one answer may hold per series.
const MAX_STEPS: i64 = 20_000;

/// A parsed metrics query.
pub(crate) struct MetricsQuery(SeriesQuery);

fn parse_step(value: &str) -> Result<i64, ApiError> {
    let seconds = match value.parse::<u64>() {
        Ok(s) => s,
        Err(_) => humantime::parse_duration(value)
            .map(|d: Duration| d.as_secs())
            .map_err(|e| {
                ApiError::BadRequest(format!(
                    "step {value:?} is not a duration (seconds, or like 5m): {e}"
                ))
            })?,
    };
    if seconds == 0 || seconds % 60 != 0 {
        return Err(ApiError::BadRequest(format!(
            "step {value:?} must be a whole number of minutes (rollups are per minute)"
        )));
    }
    Ok((seconds / 60) as i64)
}

/// Dimension names a filter or `group_by` may use.
fn dimension_names() -> String {
    Dimension::ALL.map(Dimension::as_str).join(", ")
}

impl MetricsQuery {
    pub(crate) fn parse(params: &[(String, String)]) -> Result<Self, ApiError> {
        let mut metric = None;
        let mut group_by = Vec::new();
        let mut filter = Vec::new();
        let (mut from, mut to, mut step) = (None, None, 1);
        let mut level = None;
        for (key, value) in params {
            match key.as_str() {
                "metric" => metric = Some(Metric::named(value).map_err(ApiError::BadRequest)?),
                "group_by" => {
                    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                        group_by.push(Dimension::parse(name).ok_or_else(|| {
                            ApiError::BadRequest(format!(
                                "group_by {name:?} is not a dimension: use {}",
                                dimension_names()
                            ))
                        })?);
                    }
                }
                "from" => from = Some(crate::params::parse_time(key, value)? as i64),
                "to" => to = Some(crate::params::parse_time(key, value)? as i64),
                "step" => step = parse_step(value)?,
                "level" => {
                    level = Some(Level::parse(value).ok_or_else(|| {
                        ApiError::BadRequest(format!(
                            "level {value:?} is not a level: use request (a route's requests, end to end) or call (model calls)"
                        ))
                    })?)
                }
                other => match Dimension::parse(other) {
                    Some(d) => filter.push((d, value.clone())),
                    None => {
                        return Err(ApiError::BadRequest(format!(
                            "unknown query parameter {other:?}: use metric, group_by, from, to, step, level or a dimension ({})",
                            dimension_names()
                        )))
                    }
                },
            }
        }
        let metric = metric.ok_or_else(|| {
            ApiError::BadRequest(format!(
                "metric is required: one of {}",
                Metric::ALL.map(Metric::as_str).join(", ")
            ))
        })?;
        let to = to.unwrap_or_else(crate::params::now_ns);
        let from = from.unwrap_or(to - 3600 * 1_000_000_000);
        if from > to {
            return Err(ApiError::BadRequest(format!(
                "from ({}) is after to ({})",
                crate::params::format_time(from),
                crate::params::format_time(to)
            )));
        }
        let (from_minute, to_minute) = (from.div_euclid(BUCKET_NS), to.div_euclid(BUCKET_NS));
        if (to_minute - from_minute) / step > MAX_STEPS {
            return Err(ApiError::BadRequest(format!(
                "from..to over step {step} min gives more than {MAX_STEPS} points: use a larger step"
            )));
        }
        let level = level.unwrap_or_else(|| {
            Level::implied_by(
                group_by
                    .iter()
                    .copied()
                    .chain(filter.iter().map(|(d, _)| *d)),
            )
        });
        Ok(Self(SeriesQuery {
            metric,
            level,
            group_by,
            filter,
            from_minute,
            to_minute,
            step_minutes: step,
        }))
    }
}

/// The series of a query as JSON. Blocking: reads the store.
pub(crate) fn run(
    store: &Store,
    tenant: &TenantId,
    MetricsQuery(q): &MetricsQuery,
    prices: &threadline_analysis::PriceTable,
) -> Result<Value, ApiError> {
    let series: Vec<Value> = metric_series(store, tenant, q, prices)?
        .iter()
        .map(|s| {
            let labels: serde_json::Map<String, Value> = s
                .labels
                .iter()
                .map(|(d, v)| (d.as_str().to_owned(), Value::from(v.as_str())))
                .collect();
            let points: Vec<Value> = s
                .points
                .iter()
                .map(|p| json!({"t": p.minute * 60, "value": p.value, "requests": p.requests}))
                .collect();
            json!({"labels": labels, "points": points})
        })
        .collect();
    let note = series
        .is_empty()
        .then_some("no requests match these filters in this window");
    Ok(json!({
        "note": note,
        "metric": q.metric.as_str(),
        "level": q.level.as_str(),
        "unit": q.metric.unit(),
        "from": q.from_minute * 60,
        "to": q.to_minute * 60 + 59,
        "step_s": q.step_minutes * 60,
        "series": series,
    }))
}

async fn metrics(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let query = MetricsQuery::parse(&params)?;
    let store = state.store.clone();
    let prices = Arc::clone(&state.prices);
    Ok(Json(
        crate::error::blocking(move || run(&store, &tenant, &query, &prices)).await?,
    ))
}
