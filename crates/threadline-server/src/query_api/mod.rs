//! The JSON query API under `/api/v1`: traces by id, trace search, services, health.
//! Every read is scoped to the tenant of the caller's API key.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};

use serde_json::{json, Value};
use threadline_model::TraceId;
use threadline_store::{TraceCursor, TraceQuery};

use crate::auth::Caller;
use crate::dto;
use crate::error::{blocking, ApiError};
use crate::params::{
    encode_page_cursor, invalid_cursor, page_cursor_fields, parse_duration, parse_since,
    parse_time, MAX_LIMIT,
};
use crate::state::{AppState, CallerOf, Tenant};

pub(crate) mod logs;
mod service_map;
mod sessions;
pub(crate) mod trace_stream;
pub(crate) mod trace_view;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/traces", get(search_traces))
        .route("/api/v1/traces/{trace_id}", get(get_trace))
        .route("/api/v1/traces/{trace_id}/skeleton", get(get_skeleton))
        .route("/api/v1/traces/{trace_id}/spans/{span_id}", get(get_span))
        .route("/api/v1/sessions", get(sessions::list))
        .route("/api/v1/sessions/{session_id}", get(sessions::one))
        .route("/api/v1/services", get(list_services))
        .route("/api/v1/service-map", get(service_map::get))
        .route("/api/v1/health", get(health))
        .merge(logs::router())
}

async fn get_trace(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(raw_id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    let trace_id = crate::error::parse_trace_id(&raw_id)?;
    Ok(crate::query_api::trace_stream::trace_response(
        state.store.clone(),
        tenant,
        trace_id,
        Arc::clone(&state.prices),
    )
    .await)
}

/// Every span of a trace in compact columns (see `trace_view`), or 404.
async fn get_skeleton(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(raw_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let trace_id = crate::error::parse_trace_id(&raw_id)?;
    let store = state.store.clone();
    let prices = Arc::clone(&state.prices);
    let body = blocking(move || {
        let spans = store.trace_skeleton(&tenant, trace_id)?;
        if spans.is_empty() {
            return Err(ApiError::NotFound(format!("trace {trace_id} not found")));
        }
        Ok(trace_view::skeleton(&trace_id.to_hex(), &spans, &prices))
    })
    .await?;
    Ok(Json(body))
}

/// One span whole, with its logs and conversation, or 404.
async fn get_span(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path((raw_trace, raw_span)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let trace_id = crate::error::parse_trace_id(&raw_trace)?;
    let span_id: threadline_model::SpanId = raw_span
        .parse()
        .map_err(|e| ApiError::BadRequest(format!("span id {raw_span:?} is invalid: {e}")))?;
    let store = state.store.clone();
    let (span, logs) = blocking(move || {
        let span = store.get_span(&tenant, trace_id, span_id)?;
        let logs = match &span {
            Some(_) => store.logs_of(&tenant, trace_id, Some(span_id))?,
            None => Vec::new(),
        };
        Ok((span, logs))
    })
    .await?;
    let span = span.ok_or_else(|| {
        ApiError::NotFound(format!("span {span_id} of trace {trace_id} not found"))
    })?;
    Ok(Json(trace_view::span_detail(&span, &logs, &state.prices)))
}

async fn search_traces(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let query = parse_search(&params)?;
    let store = state.store.clone();
    let page = blocking(move || Ok(store.search(&tenant, &query)?)).await?;
    Ok(Json(json!({
        "traces": page.traces.iter().map(|t| dto::trace_summary(t, &state.prices)).collect::<Vec<_>>(),
        "next_cursor": page.next_cursor.map(encode_cursor),
        "searched_from_unix_nano": page.searched_from_unix_nano.map(|t| t.to_string()),
    })))
}

async fn list_services(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
) -> Result<Json<Value>, ApiError> {
    let store = state.store.clone();
    let services = blocking(move || Ok(store.services(&tenant)?)).await?;
    Ok(Json(json!({
        "services": services.iter().map(|s| json!({ "name": s.name })).collect::<Vec<_>>(),
    })))
}

/// Liveness and store health; carries no tenant data, so it needs no key.
/// Liveness for anyone; the server-wide counters (write queue, commits, ingest
/// totals: every tenant's volume) only for an operator key or on a server without
/// tenant keys. A tenant's key learns its tenant's name.
async fn health(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    CallerOf(caller): CallerOf,
) -> Result<Json<Value>, ApiError> {
    let store = state.store.clone();
    let store_ok = blocking(move || Ok(store.ping().is_ok())).await?;
    let mut body = json!({
        "status": if store_ok { "ok" } else { "degraded" },
        "auth_required": state.auth.required(),
        "version": env!("CARGO_PKG_VERSION"),
        // Where to send data (ports only: the host is the one the caller reached).
        "otlp": {"http_port": state.otlp_ports.http, "grpc_port": state.otlp_ports.grpc},
    });
    let server_wide = match &caller {
        Caller::Operator => true,
        Caller::Tenant(tenant) => {
            body["tenant"] = json!(tenant.as_str());
            !state.auth.required()
        }
        Caller::Anonymous => false,
    };
    if server_wide {
        let store = state.store.clone();
        let text_backlog = blocking(move || Ok(store.index_backlog().ok())).await?;
        let writer = state.store.writer_stats();
        body["store"] = json!({ "ok": store_ok, "queued_batches": writer.queued_batches, "spans_committed": writer.spans_committed,
            "commits": writer.commits,
            "commit_seconds_total": writer.commit_nanos_total as f64 / 1e9,
            "text_index_backlog_blocks": text_backlog });
        body["store"]["incident_detection"] = json!(if state.watcher().is_active() {
            "active"
        } else {
            "standby"
        });
        if let Some(spool) = writer.spool {
            body["store"]["spool"] = json!({ "bytes": spool.bytes, "records": spool.records,
                "max_bytes": spool.max_bytes });
        }
        body["ingest"] = json!({
            "spans_accepted": state.stats().spans_accepted.load(Ordering::Relaxed),
            "spans_rejected": state.stats().spans_rejected.load(Ordering::Relaxed),
            "logs_accepted": state.stats().logs_accepted.load(Ordering::Relaxed),
            "logs_rejected": state.stats().logs_rejected.load(Ordering::Relaxed),
            "requests_throttled": state.stats().requests_throttled.load(Ordering::Relaxed),
        });
    }
    Ok(Json(body))
}

const DEFAULT_LIMIT: usize = 20;

fn parse_search(params: &[(String, String)]) -> Result<TraceQuery, ApiError> {
    let mut q = TraceQuery {
        limit: DEFAULT_LIMIT,
        ..Default::default()
    };
    let bad = |msg: String| ApiError::BadRequest(msg);
    for (key, value) in params {
        let text = || Some(value.clone());
        match key.as_str() {
            "service" => q.service = text(),
            "name" | "span_name" => q.span_name = text(),
            "model" => q.model = text(),
            "route" => q.route = text(),
            "adapter" => q.adapter = text(),
            "ab_group" => q.ab_group = text(),
            "session" | "session_id" => q.session_id = text(),
            "user" | "user_id" => q.user_id = text(),
            "q" => q.text = Some(value.trim().to_owned()).filter(|t| !t.is_empty()),
            "status" => match value.as_str() {
                "error" => q.errors_only = true,
                other => return Err(bad(format!("status {other:?} is not supported: use status=error"))),
            },
            "min_duration" => q.min_duration_nanos = Some(parse_duration(key, value)?),
            "max_duration" => q.max_duration_nanos = Some(parse_duration(key, value)?),
            "from" | "start" => q.start_from_unix_nano = Some(parse_time(key, value)?),
            "since" => q.start_from_unix_nano = Some(parse_since(key, value)?),
            "to" | "end" => q.start_to_unix_nano = Some(parse_time(key, value)?),
            "limit" => {
                let n: usize = value
                    .parse()
                    .map_err(|_| bad(format!("limit {value:?} is not a positive integer")))?;
                if n == 0 || n > MAX_LIMIT {
                    return Err(bad(format!("limit {n} is out of range 1..={MAX_LIMIT}")));
                }
                q.limit = n;
            }
            "cursor" => q.cursor = Some(decode_cursor(value)?),
            other => match other.strip_prefix("attr.") {
                Some(attr) if !attr.is_empty() => q.attributes.push((attr.to_owned(), value.clone())),
                _ => {
                    return Err(bad(format!(
                        "unknown query parameter {other:?}: use service, name, model, route, adapter, ab_group, session, user, q, status, min_duration, max_duration, from, since, to, limit, cursor or attr.KEY"
                    )))
                }
            },
        }
    }
    if let (Some(a), Some(b)) = (q.min_duration_nanos, q.max_duration_nanos) {
        if a > b {
            return Err(bad(format!(
                "min_duration ({a} ns) is greater than max_duration ({b} ns)"
            )));
        }
    }
    if let Some(problem) = q.problem() {
        return Err(bad(problem));
    }
    Ok(q)
}

fn encode_cursor(c: TraceCursor) -> String {
    encode_page_cursor("v1", &[&c.start_unix_nano, &c.trace_id])
}

fn decode_cursor(value: &str) -> Result<TraceCursor, ApiError> {
    let fields = page_cursor_fields(value, "v1")?;
    let field = |i: usize| fields.get(i).ok_or_else(|| invalid_cursor(value));
    Ok(TraceCursor {
        start_unix_nano: field(0)?.parse().map_err(|_| invalid_cursor(value))?,
        // Any 16 bytes: a position in the order, not a stored trace's id (a first page
        // cut short by the store's time budget goes on from the least, all zeros).
        trace_id: hex::decode(field(1)?)
            .ok()
            .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
            .map(TraceId)
            .ok_or_else(|| invalid_cursor(value))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::TraceId;

    use crate::params::pairs as params;

    #[test]
    fn search_parameters_parse() {
        let q = parse_search(&params(&[
            ("service", "gw"),
            ("min_duration", "250ms"),
            ("max_duration", "2500"),
            ("from", "2026-11-30T14:05:00Z"),
            ("status", "error"),
            ("attr.tier", "gold"),
        ]))
        .unwrap();
        assert_eq!(q.service.as_deref(), Some("gw"));
        assert_eq!(q.min_duration_nanos, Some(250_000_000));
        assert_eq!(
            q.max_duration_nanos,
            Some(2_500_000_000),
            "bare numbers are milliseconds"
        );
        assert!(q.errors_only);
        assert_eq!(q.attributes, vec![("tier".to_owned(), "gold".to_owned())]);
        assert_eq!(q.start_from_unix_nano, Some(1_796_047_500_000_000_000));
        let offset = parse_search(&params(&[("from", "2026-11-30T15:05:00+01:00")])).unwrap();
        assert_eq!(offset.start_from_unix_nano, Some(1_796_047_500_000_000_000));
    }

    #[test]
    fn bad_parameters_say_what_was_wrong() {
        for (pairs, needle) in [
            (vec![("limit", "0")], "limit"),
            (vec![("bogus", "1")], "bogus"),
            (vec![("status", "ok")], "status"),
            (vec![("min_duration", "soon")], "min_duration"),
            (vec![("from", "yesterday")], "from"),
            (vec![("cursor", "!!")], "cursor"),
        ] {
            let err = parse_search(&params(&pairs)).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn cursor_round_trips() {
        let c = TraceCursor {
            start_unix_nano: 42,
            trace_id: TraceId([7; 16]),
        };
        assert_eq!(decode_cursor(&encode_cursor(c)).unwrap(), c);
        // A cut first page's cursor: the least id.
        let least = TraceCursor {
            trace_id: TraceId([0; 16]),
            ..c
        };
        assert_eq!(decode_cursor(&encode_cursor(least)).unwrap(), least);
        let short = encode_page_cursor("v1", &[&42, &"0707"]);
        assert!(decode_cursor(&short).is_err());
    }
}
