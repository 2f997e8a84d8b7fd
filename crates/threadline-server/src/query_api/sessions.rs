//! Sessions (conversations: the traces that share a session id): the list, newest
//! activity first, and one session's traces with totals.

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};
use threadline_analysis::PriceTable;
use threadline_model::TenantId;
use threadline_store::{Store, TraceQuery, TraceSummary};

use crate::dto;
use crate::error::{blocking, ApiError};
use crate::params::{parse_since, parse_time, MAX_LIMIT};
use crate::state::{AppState, Tenant};

/// Most traces a session page lists.
const SESSION_MAX_TRACES: usize = 5000;
/// Most traces a row of the session list totals (the row says when it has more).
const LIST_MAX_TRACES: usize = 200;
const LIST_DEFAULT: usize = 50;
const LIST_MAX: usize = 200;

/// The traces of `session` started in `from..=to` (up to `max`, newest first) and
/// whether it has more.
fn session_traces(
    store: &Store,
    tenant: &TenantId,
    session: &str,
    max: usize,
    (from, to): (Option<u64>, Option<u64>),
) -> Result<(Vec<TraceSummary>, bool), ApiError> {
    let mut query = TraceQuery {
        session_id: Some(session.to_owned()),
        start_from_unix_nano: from,
        start_to_unix_nano: to,
        limit: max.min(MAX_LIMIT),
        ..Default::default()
    };
    let mut traces = Vec::new();
    loop {
        let page = store.search(tenant, &query)?;
        traces.extend(page.traces);
        match page.next_cursor {
            Some(_) if traces.len() >= max => return Ok((traces, true)),
            Some(c) => query.cursor = Some(c),
            None => return Ok((traces, false)),
        }
    }
}

/// A session's totals over `traces` (sorted oldest first here), and its last activity.
fn totals(
    session: &str,
    traces: &mut [TraceSummary],
    truncated: bool,
    prices: &PriceTable,
) -> (u64, Value) {
    traces.sort_by_key(|t| (t.start_time_unix_nano, t.trace_id));
    let first = traces.first().map_or(0, |t| t.start_time_unix_nano);
    let last_end = traces
        .iter()
        .map(|t| t.start_time_unix_nano + t.duration_nanos)
        .max()
        .unwrap_or(first);
    let cost = PriceTable::total_usd(traces.iter().map(|t| dto::summary_cost(t, prices)));
    let body = json!({
        "session_id": session,
        "user_id": traces.iter().find_map(|t| t.user_id.clone()),
        "trace_count": traces.len(),
        "truncated": truncated,
        "span_count": traces.iter().map(|t| t.span_count).sum::<usize>(),
        "error_count": traces.iter().filter(|t| t.error).count(),
        "total_tokens": traces.iter().map(|t| t.total_tokens).sum::<i64>(),
        "cost_usd": cost,
        "start_time_unix_nano": first.to_string(),
        "last_activity_unix_nano": last_end.to_string(),
        "duration_ms": last_end.saturating_sub(first) as f64 / 1e6,
    });
    (last_end, body)
}

/// `GET /api/v1/sessions/{id}`: the traces of one conversation, oldest first, with
/// totals.
pub(crate) async fn one(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(session_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = state.store.clone();
    let wanted = session_id.clone();
    let (mut traces, truncated) = blocking(move || {
        session_traces(&store, &tenant, &wanted, SESSION_MAX_TRACES, (None, None))
    })
    .await?;
    if traces.is_empty() {
        return Err(ApiError::NotFound(format!(
            "session {session_id:?} not found"
        )));
    }
    let (_, mut body) = totals(&session_id, &mut traces, truncated, &state.prices);
    body["traces"] = traces
        .iter()
        .map(|t| dto::trace_summary(t, &state.prices))
        .collect();
    Ok(Json(body))
}

/// `GET /api/v1/sessions?since=1h&user=U&limit=N`: sessions with spans in the window,
/// newest activity first, each with its user, traces, tokens, cost and errors.
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let (mut from, mut to, mut user, mut limit) = (None, None, None, LIST_DEFAULT);
    for (key, value) in &params {
        match key.as_str() {
            "from" | "start" => from = Some(parse_time(key, value)?),
            "since" => from = Some(parse_since(key, value)?),
            "to" | "end" => to = Some(parse_time(key, value)?),
            "user" | "user_id" => user = Some(value.clone()).filter(|u| !u.is_empty()),
            "limit" => limit = crate::params::limit(value, LIST_MAX)?,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: use from, since, to, user or limit"
                )))
            }
        }
    }
    let store = state.store.clone();
    let prices = std::sync::Arc::clone(&state.prices);
    let sessions = blocking(move || {
        let ids = store.recent_sessions(&tenant, (from, to), user.as_deref(), limit)?;
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            // A row totals the session's traces in the list's range: each session is
            // read over that range only.
            let (mut traces, truncated) =
                session_traces(&store, &tenant, &id, LIST_MAX_TRACES, (from, to))?;
            if traces.is_empty() {
                continue;
            }
            let (last_activity, row) = totals(&id, &mut traces, truncated, &prices);
            let session_user = traces.iter().find_map(|t| t.user_id.as_deref());
            if user.is_none() || session_user == user.as_deref() {
                rows.push((last_activity, row));
            }
        }
        // The index orders sessions by the block they were last stored in; within the
        // page, by their last activity in span time.
        rows.sort_by_key(|(last_activity, _)| std::cmp::Reverse(*last_activity));
        Ok::<_, ApiError>(rows.into_iter().map(|(_, row)| row).collect::<Vec<_>>())
    })
    .await?;
    Ok(Json(json!({ "sessions": sessions })))
}
