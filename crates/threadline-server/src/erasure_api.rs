//! Erasure (GDPR) over the API: `POST /api/v1/erasures` with `{"user_id": …}` or
//! `{"session_id": …}` (and optionally `"requested_by"`) deletes every trace of that
//! subject in the caller's tenant; `GET /api/v1/erasures` is the audit log.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_store::ErasureSubject;

use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/erasures", get(audit_log).post(erase))
}

fn subject(body: &Value) -> Result<ErasureSubject, ApiError> {
    let text = |key: &str| -> Result<Option<String>, ApiError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::BadRequest(format!(
                "{key} must be a non-empty string"
            ))),
        }
    };
    match (text("user_id")?, text("session_id")?) {
        (Some(u), None) => Ok(ErasureSubject::UserId(u)),
        (None, Some(s)) => Ok(ErasureSubject::SessionId(s)),
        (Some(_), Some(_)) => Err(ApiError::BadRequest(
            "give either user_id or session_id, not both".to_owned(),
        )),
        (None, None) => Err(ApiError::BadRequest(
            "user_id or session_id is required".to_owned(),
        )),
    }
}

async fn erase(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid JSON: {e}")))?;
    let subject = subject(&body)?;
    let requested_by = body
        .get("requested_by")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("api")
        .to_owned();
    let now = crate::params::now_ns();
    let kind = subject.kind();
    let digest = subject.digest();
    let metric_series = state.llm_metrics().erase(&tenant, subject.value());
    let ack = state.store.erase(&tenant, subject, &requested_by, now)?;
    let report = ack
        .wait()
        .await?
        .erasure
        .ok_or_else(|| ApiError::Internal("erasure finished without a report".to_owned()))?;
    // The subject id is never logged; its digest identifies the audit row.
    tracing::info!(tenant = %tenant, subject_kind = kind, subject_sha256 = %digest,
        spans = report.spans_deleted, "erasure done");
    let copies = &report.copies;
    let matched = report.matched_anything() || metric_series > 0;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "note": (!matched).then_some(
                "nothing matched: no span, log record, resource, rollup series, lineage node or metric names this id (the erasure is logged all the same)"
            ),
            "erasure_id": report.erasure_id,
            "subject_kind": kind,
            "subject_sha256": digest,
            "requested_by": requested_by,
            "traces_matched": report.traces_matched,
            "spans_deleted": report.spans_deleted,
            "logs_deleted": report.logs_deleted,
            "blocks_rewritten": report.blocks_rewritten,
            "disk_cleared": report.disk_cleared,
            "copies": {
                "resources": copies.origins,
                "rollup_series": copies.rollup_series,
                "rollup_cells": copies.rollup_cells,
                "lineage_nodes": copies.lineage_nodes,
                "lineage_edges": copies.lineage_edges,
                "names": copies.names,
                "incidents": copies.incidents,
                "metric_series": metric_series,
            },
        })),
    ))
}

async fn audit_log(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
) -> Result<Json<Value>, ApiError> {
    let store = state.store.clone();
    let records = crate::error::blocking(move || Ok(store.erasures(&tenant)?)).await?;
    Ok(Json(json!({
        "erasures": records.iter().map(|r| json!({
            "erasure_id": r.erasure_id,
            "requested_by": r.requested_by,
            "requested_at_unix_nano": r.requested_ns.to_string(),
            "subject_kind": r.subject_kind,
            "subject_sha256": r.subject_sha256,
            "traces_matched": r.traces_matched,
            "spans_deleted": r.spans_deleted,
        })).collect::<Vec<_>>(),
    })))
}
