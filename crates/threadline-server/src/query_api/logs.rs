//! Log records in the JSON API: `GET /api/v1/logs` (search, newest first) and
//! `GET /api/v1/traces/{trace_id}/logs` (a trace's, oldest first). Scoped to the
//! caller's tenant like every read.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_model::{severity_from_name, SpanId};
use threadline_store::{LogCursor, LogQuery};

use crate::dto::log_json;
use crate::error::{blocking, ApiError};
use crate::params::{
    encode_page_cursor, invalid_cursor, page_cursor_fields, parse_time, MAX_LIMIT,
};
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/logs", get(search_logs))
        .route("/api/v1/traces/{trace_id}/logs", get(trace_logs))
}

const DEFAULT_LIMIT: usize = 50;

fn parse(params: &[(String, String)]) -> Result<LogQuery, ApiError> {
    let bad = |msg: String| ApiError::BadRequest(msg);
    let mut q = LogQuery {
        limit: DEFAULT_LIMIT,
        ..Default::default()
    };
    for (key, value) in params {
        match key.as_str() {
            "q" => q.text = Some(value.trim().to_owned()).filter(|t| !t.is_empty()),
            "trace_id" => q.trace_id = Some(crate::error::parse_trace_id(value)?),
            "span_id" => {
                q.span_id = Some(value.parse::<SpanId>().map_err(|e| {
                    bad(format!("span_id {value:?} is invalid: {e}"))
                })?)
            }
            "service" => q.service = Some(value.clone()),
            "severity" => {
                q.min_severity = Some(match value.parse::<i32>() {
                    Ok(n) if (1..=24).contains(&n) => n,
                    _ => severity_from_name(value).ok_or_else(|| {
                        bad(format!(
                            "severity {value:?} is not one of trace, debug, info, warn, error, fatal or 1..=24"
                        ))
                    })?,
                })
            }
            "event" => q.event_prefix = Some(value.clone()),
            "from" | "start" => q.from_unix_nano = Some(parse_time(key, value)?),
            "to" | "end" => q.to_unix_nano = Some(parse_time(key, value)?),
            "limit" => {
                q.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad(format!("limit {value:?} is not in 1..={MAX_LIMIT}")))?
            }
            "cursor" => q.cursor = Some(decode_cursor(value)?),
            other => {
                return Err(bad(format!(
                    "unknown query parameter {other:?}: use q, trace_id, span_id, service, severity, event, from, to, limit or cursor"
                )))
            }
        }
    }
    if q.span_id.is_some() && q.trace_id.is_none() {
        return Err(bad("span_id needs trace_id".to_owned()));
    }
    Ok(q)
}

fn encode_cursor(c: LogCursor) -> String {
    encode_page_cursor("l1", &[&c.time_unix_nano, &c.seq])
}

fn decode_cursor(value: &str) -> Result<LogCursor, ApiError> {
    match page_cursor_fields(value, "l1")?.as_slice() {
        [time, seq] => Ok(LogCursor {
            time_unix_nano: time.parse().map_err(|_| invalid_cursor(value))?,
            seq: seq.parse().map_err(|_| invalid_cursor(value))?,
        }),
        _ => Err(invalid_cursor(value)),
    }
}

async fn search_logs(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let query = parse(&params)?;
    let store = state.store.clone();
    let page = blocking(move || Ok(store.search_logs(&tenant, &query)?)).await?;
    Ok(Json(json!({
        "logs": page.logs.iter().map(|l| log_json(&l.record)).collect::<Vec<_>>(),
        "next_cursor": page.next_cursor.map(encode_cursor),
    })))
}

async fn trace_logs(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(raw_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let trace_id = crate::error::parse_trace_id(&raw_id)?;
    let store = state.store.clone();
    let logs = blocking(move || Ok(store.logs_of(&tenant, trace_id, None)?)).await?;
    Ok(Json(json!({
        "trace_id": trace_id.to_hex(),
        "logs": logs.iter().map(log_json).collect::<Vec<_>>(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_bad_parameters_are_named() {
        let c = LogCursor {
            time_unix_nano: 1_764_400_000_000_000_000,
            seq: 42,
        };
        assert_eq!(decode_cursor(&encode_cursor(c)).unwrap(), c);
        assert!(decode_cursor("bm9wZQ").is_err());
        let p = |k: &str, v: &str| parse(&[(k.to_owned(), v.to_owned())]);
        assert_eq!(p("severity", "WARN").unwrap().min_severity, Some(13));
        assert_eq!(p("severity", "17").unwrap().min_severity, Some(17));
        for (k, v, says) in [
            ("severity", "loud", "severity"),
            ("limit", "0", "limit"),
            ("span_id", "eee19b7ec3c1b174", "needs trace_id"),
            ("colour", "red", "unknown query parameter"),
        ] {
            let e = p(k, v).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
