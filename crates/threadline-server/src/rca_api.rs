//! `GET /api/v1/rca?incident=ID` or `?route=R&metric=M&at=T` (also `service=`,
//! `model=` selectors; `T` RFC 3339 or unix seconds): ranked root-cause candidates
//! for a series at an onset. Gathers the inputs — rollup cells an hour before and
//! during the anomaly, the changes in the lineage graph upstream of the affected
//! route or model, the fault rules — ranks them with `threadline_analysis::rank`, and
//! adds exemplar traces to the leading candidates.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_analysis::{
    changes_upstream, matches_at, rank, Dimension, FaultRules, Level, Metric, RcaInput, RollupCell,
    SeriesKey, BUCKET_NS,
};
use threadline_model::{Direction, NodeId, NodeKind, TenantId};
use threadline_store::{ExemplarQuery, SqliteStore, WalkLimits};

use crate::auth::Authenticator;
use crate::error::ApiError;
use crate::incident_watch::IncidentWatcher;
use crate::incidents_api::{incident_json, minute_rfc3339};

#[derive(Clone)]
pub(crate) struct RcaState {
    pub(crate) watcher: Arc<IncidentWatcher>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) rules: Arc<FaultRules>,
}

pub(crate) fn router(state: RcaState) -> Router {
    Router::new()
        .route("/api/v1/rca", get(rca))
        .with_state(state)
}

/// Minutes of normal traffic the anomaly is contrasted with.
const BASELINE_MINUTES: i64 = 60;
/// The anomaly window when the incident has not ended (or no incident was given).
const DEFAULT_WINDOW_MINUTES: i64 = 10;
const MAX_WINDOW_MINUTES: i64 = 30;
const CANDIDATES: usize = 10;
const EXEMPLAR_CANDIDATES: usize = 5;
const EXEMPLARS: usize = 5;
const UPSTREAM_DEPTH: usize = 8;
const UPSTREAM_NODES: usize = 20_000;

/// What to diagnose.
pub(crate) struct Target {
    /// Requests for a route (end to end), model calls for a model.
    level: Level,
    filter: Vec<(Dimension, String)>,
    metric: Metric,
    co_anomalies: Vec<Metric>,
    onset_minute: i64,
    end_minute: i64,
    incident: Option<Value>,
}

impl Target {
    /// The incident's series (service and route, or model), first metric, onset and
    /// window; the other metrics it moved are co-anomalies.
    pub(crate) fn of_incident(
        incident: &threadline_analysis::Incident,
        cfg: &threadline_analysis::DetectorConfig,
    ) -> Result<Self, ApiError> {
        let mut filter = vec![(Dimension::Service, incident.service.clone())];
        if incident.route.is_empty() {
            filter.push((Dimension::Model, incident.model.clone()));
        } else {
            filter.push((Dimension::Route, incident.route.clone()));
        }
        let metric = incident.metric;
        let co_anomalies = incident
            .anomalies
            .iter()
            .map(|a| a.metric)
            .filter(|m| *m != metric)
            .collect();
        let end = incident
            .end_minute
            .unwrap_or(incident.onset_minute + DEFAULT_WINDOW_MINUTES - 1);
        Ok(Self {
            level: Level::implied_by(filter.iter().map(|(d, _)| *d)),
            filter,
            metric,
            co_anomalies,
            onset_minute: incident.onset_minute,
            end_minute: end.clamp(
                incident.onset_minute,
                incident.onset_minute + MAX_WINDOW_MINUTES,
            ),
            incident: Some(incident_json(incident, cfg)),
        })
    }
}

const USAGE: &str = "use incident=ID, or route=R (or service= / model=) with metric=M and at=T";

pub(crate) fn parse_target(
    watcher: &IncidentWatcher,
    tenant: &TenantId,
    params: &[(String, String)],
) -> Result<Target, ApiError> {
    let mut incident_id = None;
    let mut filter = Vec::new();
    let (mut metric, mut at) = (None, None);
    for (key, value) in params {
        match key.as_str() {
            "incident" => incident_id = Some(value.clone()),
            "metric" => metric = Some(Metric::named(value).map_err(ApiError::BadRequest)?),
            "at" => at = Some(crate::query_api::parse_time(key, value)? as i64),
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
        watcher.catch_up(tenant)?;
        let incident = watcher
            .store()
            .incident(tenant, &id)?
            .ok_or_else(|| ApiError::NotFound(format!("no incident {id:?}")))?;
        return Target::of_incident(&incident, watcher.config());
    }
    let metric =
        metric.ok_or_else(|| ApiError::BadRequest(format!("metric is required: {USAGE}")))?;
    let at = at.ok_or_else(|| ApiError::BadRequest(format!("at is required: {USAGE}")))?;
    if filter.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "a series is required: {USAGE}"
        )));
    }
    let onset_minute = at.div_euclid(BUCKET_NS);
    Ok(Target {
        level: Level::implied_by(filter.iter().map(|(d, _)| *d)),
        filter,
        metric,
        co_anomalies: Vec::new(),
        onset_minute,
        end_minute: onset_minute + DEFAULT_WINDOW_MINUTES - 1,
        incident: None,
    })
}

/// Cells of the target merged per series over a minute range.
fn per_series(
    cells: &[(i64, SeriesKey, RollupCell)],
    level: Level,
    filter: &[(Dimension, String)],
    from: i64,
    to: i64,
) -> Vec<(SeriesKey, RollupCell)> {
    let mut out: std::collections::BTreeMap<&SeriesKey, RollupCell> = Default::default();
    for (minute, key, cell) in cells {
        if (from..=to).contains(minute) && matches_at(key, level, filter) {
            out.entry(key).or_default().merge(cell);
        }
    }
    out.into_iter().map(|(k, c)| (k.clone(), c)).collect()
}

/// The span column an attribute dimension is stored in, for exemplar lookups: the
/// columns carry the dimensions' names; gray tag, provider and the upstream service
/// have none.
fn column_of(dim: Dimension) -> Option<&'static str> {
    let stored = !matches!(
        dim,
        Dimension::GrayTag | Dimension::Provider | Dimension::UpstreamService
    );
    stored.then(|| dim.as_str())
}

fn reason_shares(cell: &RollupCell) -> Value {
    let n = cell.requests.max(1) as f64;
    cell.rejections
        .iter()
        .map(|(r, k)| (r.clone(), json!(*k as f64 / n)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Ranked candidates as JSON. Blocking.
pub(crate) fn diagnose(
    store: &SqliteStore,
    tenant: &TenantId,
    rules: &FaultRules,
    target: Target,
) -> Result<Value, ApiError> {
    store.flush_rollups()?.wait_blocking()?;
    let from = target.onset_minute - BASELINE_MINUTES;
    let cells = store.rollup_cells(tenant, from, target.end_minute)?;
    let baseline = per_series(
        &cells,
        target.level,
        &target.filter,
        from,
        target.onset_minute - 1,
    );
    let window = per_series(
        &cells,
        target.level,
        &target.filter,
        target.onset_minute,
        target.end_minute,
    );
    let merged =
        |series: &[(SeriesKey, RollupCell)]| series.iter().map(|(_, c)| c).collect::<RollupCell>();
    let (base_all, window_all) = (merged(&baseline), merged(&window));
    let value = |c: &RollupCell, minutes: i64| target.metric.value(c, (minutes * 60) as f64);

    // The lineage node the series hangs off: its route, else its model, else service.
    let find = |d: Dimension| {
        target
            .filter
            .iter()
            .find(|(x, _)| *x == d)
            .map(|(_, v)| v.clone())
    };
    let affected = match (
        find(Dimension::Route),
        find(Dimension::Model),
        find(Dimension::Service),
    ) {
        (Some(r), _, _) => NodeId::new(NodeKind::Route, r),
        (None, Some(m), _) => NodeId::new(NodeKind::Model, m),
        (None, None, Some(s)) => NodeId::new(NodeKind::Service, s),
        _ => {
            return Err(ApiError::BadRequest(format!(
                "a series is required: {USAGE}"
            )))
        }
    };
    let upstream = store.walk(
        tenant,
        &affected,
        &WalkLimits {
            direction: Direction::Upstream,
            depth: UPSTREAM_DEPTH,
            max_nodes: UPSTREAM_NODES,
            edge_kinds: Vec::new(),
        },
    )?;
    let changes = upstream
        .map(|g| changes_upstream(&g, &affected, target.onset_minute))
        .unwrap_or_default();
    let ranked = rank(&RcaInput {
        metric: target.metric,
        co_anomalies: target.co_anomalies.clone(),
        onset_minute: target.onset_minute,
        baseline: &baseline,
        window: &window,
        changes,
        rules,
    });

    // Exemplars: the slowest (latency metrics) or failed requests of the candidate's
    // value, over the baseline's quantile when there is one.
    let threshold_ms = target
        .metric
        .latency_quantile()
        .and_then(|q| base_all.latency_ms.quantile(q).ok().flatten());
    let errors_only = matches!(target.metric, Metric::ErrorRate | Metric::RejectionRate);
    // A request's entry span carries its service and route; its model fields are on
    // the model call below, with the call's own (shorter) duration: exemplars of those
    // are looked up on the calls, by route when they carry it.
    let base_columns: Vec<(&'static str, String)> = target
        .filter
        .iter()
        .filter(|(d, _)| target.level == Level::Call || *d == Dimension::Route)
        .filter_map(|(d, v)| column_of(*d).map(|c| (c, v.clone())))
        .collect();
    let mut candidates = Vec::new();
    for (i, c) in ranked.into_iter().take(CANDIDATES).enumerate() {
        let mut evidence = c.evidence.clone();
        if i < EXEMPLAR_CANDIDATES {
            if let Some((dim, v)) = &c.attribute {
                if let Some(column) = column_of(*dim) {
                    let on_entry = matches!(dim, Dimension::Route | Dimension::AbGroup);
                    let mut query = ExemplarQuery {
                        columns: base_columns.clone(),
                        from_ns: target.onset_minute * BUCKET_NS,
                        to_ns: (target.end_minute + 1) * BUCKET_NS - 1,
                        min_duration_ns: threshold_ms
                            .filter(|_| target.level == Level::Call || on_entry)
                            .map(|t| (t * 1e6) as i64),
                        errors_only,
                        limit: EXEMPLARS,
                    };
                    query.columns.push((column, v.clone()));
                    let mut found = store.exemplars(tenant, &query)?;
                    if found.is_empty() {
                        // The route is often set on the gateway span only (rollups
                        // inherit it); the model call's span then has no route column.
                        query
                            .columns
                            .retain(|(c, _)| *c != "route" || column == "route");
                        found = store.exemplars(tenant, &query)?;
                    }
                    evidence["exemplar_trace_ids"] =
                        json!(found.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>());
                }
            }
        }
        if let Some(m) = evidence.get("changed_at_minute").and_then(Value::as_i64) {
            evidence["changed_at"] = json!(minute_rfc3339(m));
        }
        candidates.push(json!({
            "rank": i + 1,
            "kind": c.kind,
            "subject": c.subject,
            "confidence": (c.confidence * 1000.0).round() / 1000.0,
            "explanation": c.explanation,
            "scores": {
                "contrast": c.contrast,
                "before_after": c.before_after,
                "time_share": c.time_share,
                "proximity": c.proximity,
                "rule": c.rule,
            },
            "evidence": evidence,
        }));
    }
    let labels: serde_json::Map<String, Value> = target
        .filter
        .iter()
        .map(|(d, v)| (d.as_str().to_owned(), json!(v)))
        .collect();
    // An empty window says so: nothing ranked because nothing was there.
    let note = (base_all.requests == 0 && window_all.requests == 0).then(|| {
        format!(
            "no requests of this series between {} and {}: check the route, model and time",
            minute_rfc3339(from),
            minute_rfc3339(target.end_minute + 1)
        )
    });
    Ok(json!({
        "note": note,
        "target": {
            "series": labels,
            "metric": target.metric.as_str(),
            "level": target.level.as_str(),
            "unit": target.metric.unit(),
            "onset": minute_rfc3339(target.onset_minute),
            "window_end": minute_rfc3339(target.end_minute + 1),
            "baseline_from": minute_rfc3339(from),
        },
        "incident": target.incident,
        "metric_before": value(&base_all, BASELINE_MINUTES),
        "metric_during": value(&window_all, target.end_minute - target.onset_minute + 1),
        "requests_before": base_all.requests,
        "requests_during": window_all.requests,
        // Which refusals moved: share of requests per rejection reason.
        "rejections_by_reason": {
            "before": reason_shares(&base_all),
            "during": reason_shares(&window_all),
        },
        "confidence_formula": "1 - (1 - contrast) * (1 - before_after) * (1 - time_share) * (1 - proximity / 2) * (1 - rule)",
        "candidates": candidates,
    }))
}

async fn rca(
    State(state): State<RcaState>,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let tenant = state.auth.tenant_of(&headers)?;
    let watcher = Arc::clone(&state.watcher);
    let rules = Arc::clone(&state.rules);
    Ok(Json(
        crate::error::blocking(move || {
            let target = parse_target(&watcher, &tenant, &params)?;
            diagnose(watcher.store(), &tenant, &rules, target)
        })
        .await?,
    ))
}
