//! Jaeger's query API under `/jaeger` on the API port, so Grafana's Jaeger data source
//! (URL `http://HOST:8080/jaeger`) and Jaeger tooling read Threadline unchanged:
//! v1 JSON (`/jaeger/api/…`, `{data, total, limit, offset, errors}`) and v3
//! (`/jaeger/api/v3/…`, OTLP JSON in `result`, errors as `{"error": {httpCode,
//! message}}`). Shapes are in `jaeger_model`; Bearer keys work as everywhere.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_analysis::PriceTable;
use threadline_model::{SpanKind, SpanRecord, TenantId};

use crate::error::{blocking, ApiError};

use self::params::{epoch_to_nanos, parse_jaeger_trace_id, parse_v1_search, parse_v3_search};
use crate::params::only;
use crate::state::{AppState, Tenant};

mod model;
mod params;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/jaeger/api/services", get(v1_services))
        .route(
            "/jaeger/api/services/{service}/operations",
            get(v1_service_operations),
        )
        .route("/jaeger/api/operations", get(v1_operations))
        .route("/jaeger/api/traces", get(v1_find_traces))
        .route("/jaeger/api/traces/{trace_id}", get(v1_get_trace))
        .route("/jaeger/api/dependencies", get(v1_dependencies))
        .route("/jaeger/api/v3/services", get(v3_services))
        .route("/jaeger/api/v3/operations", get(v3_operations))
        .route("/jaeger/api/v3/traces", get(v3_find_traces))
        .route("/jaeger/api/v3/traces/{trace_id}", get(v3_get_trace))
        .route("/jaeger/api/v3/trace-summaries", get(v3_trace_summaries))
}

/// An error in the shape of the API version that raised it.
enum JaegerError {
    V1(ApiError),
    V3(ApiError),
}

impl IntoResponse for JaegerError {
    fn into_response(self) -> Response {
        let (status, body) = match &self {
            JaegerError::V1(e) => {
                let s = e.status();
                (
                    s,
                    json!({"data": null, "total": 0, "limit": 0, "offset": 0,
                    "errors": [{"code": s.as_u16(), "msg": e.to_string()}]}),
                )
            }
            JaegerError::V3(e) => {
                let s = e.status();
                (
                    s,
                    json!({"error": {"httpCode": s.as_u16(), "message": e.to_string()}}),
                )
            }
        };
        if let JaegerError::V1(ApiError::Internal(d)) | JaegerError::V3(ApiError::Internal(d)) =
            &self
        {
            tracing::error!(detail = %d, "jaeger api request failed");
        }
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            crate::error::insert_retry_after(&mut response);
        }
        response
    }
}

type V1 = Result<Json<Value>, JaegerError>;

fn v1<T>(r: Result<T, ApiError>) -> Result<T, JaegerError> {
    r.map_err(JaegerError::V1)
}

fn v3<T>(r: Result<T, ApiError>) -> Result<T, JaegerError> {
    r.map_err(JaegerError::V3)
}

async fn v1_services(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> V1 {
    v1(only(&params, &[]))?;
    let tenant = v1(tenant.map(|Tenant(t)| t))?;
    let store = st.store.clone();
    let names: Vec<String> = v1(blocking(move || Ok(store.services(&tenant)?)).await)?
        .into_iter()
        .map(|s| s.name)
        .collect();
    let n = names.len();
    Ok(Json(model::v1_envelope(json!(names), n)))
}

async fn operations_of(
    st: &AppState,
    tenant: TenantId,
    service: Option<String>,
    kind: Option<String>,
) -> Result<Vec<(String, SpanKind)>, ApiError> {
    let store = st.store.clone();
    let ops = blocking(move || Ok(store.operations(&tenant, service.as_deref())?)).await?;
    let mut out: Vec<(String, SpanKind)> = ops
        .into_iter()
        .filter(|(_, _, k)| {
            kind.as_deref()
                .is_none_or(|want| want.is_empty() || k.as_str() == want)
        })
        .map(|(_, name, k)| (name, k))
        .collect();
    out.dedup();
    Ok(out)
}

async fn v1_service_operations(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Path(service): Path<String>,
    Query(params): Query<Vec<(String, String)>>,
) -> V1 {
    v1(only(&params, &[]))?;
    let tenant = v1(tenant.map(|Tenant(t)| t))?;
    let mut names: Vec<String> = v1(operations_of(&st, tenant, Some(service), None).await)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names.dedup();
    let n = names.len();
    Ok(Json(model::v1_envelope(json!(names), n)))
}

fn param<'a>(params: &'a [(String, String)], names: &[&str]) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| names.contains(&k.as_str()))
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

async fn v1_operations(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> V1 {
    v1(only(&params, &["service", "spanKind"]))?;
    let tenant = v1(tenant.map(|Tenant(t)| t))?;
    let service = param(&params, &["service"]).map(str::to_owned);
    let kind = param(&params, &["spanKind"]).map(str::to_owned);
    let ops = v1(operations_of(&st, tenant, service, kind).await)?;
    let n = ops.len();
    let data: Vec<Value> = ops
        .iter()
        .map(|(name, k)| json!({"name": name, "spanKind": kind_name(*k)}))
        .collect();
    Ok(Json(model::v1_envelope(json!(data), n)))
}

/// Jaeger's span-kind names (`""` for unspecified).
fn kind_name(k: SpanKind) -> &'static str {
    match k {
        SpanKind::Unspecified => "",
        other => other.as_str(),
    }
}

async fn v1_find_traces(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, JaegerError> {
    let tenant = v1(tenant.map(|Tenant(t)| t))?;
    let query = v1(parse_v1_search(&params))?;
    // `traceID=A&traceID=B` asks for exactly those traces (Jaeger's UI compares traces
    // this way); the search filters do not apply then.
    let mut trace_ids = Vec::new();
    for (_, raw) in params
        .iter()
        .filter(|(k, v)| k == "traceID" && !v.is_empty())
    {
        let id = v1(parse_jaeger_trace_id(raw))?;
        if !trace_ids.contains(&id) {
            trace_ids.push(id);
        }
    }
    if trace_ids.is_empty() {
        let store = st.store.clone();
        let search_tenant = tenant.clone();
        let page = v1(blocking(move || Ok(store.search(&search_tenant, &query)?)).await)?;
        trace_ids = page.traces.iter().map(|t| t.trace_id).collect();
    }
    let (store, prices) = (st.store.clone(), Arc::clone(&st.prices));
    // Each trace is written span by span, opened when its turn comes.
    Ok(
        crate::query_api::trace_stream::streamed("Jaeger search response", move |out| {
            out.write(br#"{"data":["#)?;
            let mut written = 0usize;
            for trace_id in trace_ids {
                let Some((spans, reader)) = store.open_trace(&tenant, trace_id)? else {
                    continue;
                };
                if written > 0 {
                    out.write(b",")?;
                }
                write_v1_trace(out, trace_id, &spans, reader, &prices)?;
                written += 1;
            }
            out.write(
                format!(r#"],"total":{written},"limit":0,"offset":0,"errors":null}}"#).as_bytes(),
            )
        })
        .await,
    )
}

/// One trace in Jaeger's v1 UI model (its spans, then `processes`), written span by span.
fn write_v1_trace(
    out: &mut crate::query_api::trace_stream::ChunkWriter,
    trace_id: threadline_model::TraceId,
    spans: &[threadline_store::SkeletonSpan],
    mut reader: threadline_store::SpanReader,
    prices: &PriceTable,
) -> Result<(), crate::query_api::trace_stream::WriteStop> {
    out.write(format!(r#"{{"traceID":"{}","spans":["#, model::trace_id(&trace_id)).as_bytes())?;
    let mut processes = model::Processes::default();
    for (i, skeleton) in spans.iter().enumerate() {
        if i > 0 {
            out.write(b",")?;
        }
        let span = reader.span(skeleton)?;
        out.write(
            model::v1_span(&span, &mut processes, prices)
                .to_string()
                .as_bytes(),
        )?;
    }
    out.write(format!(r#"],"processes":{},"warnings":null}}"#, processes.to_json()).as_bytes())
}

async fn v1_get_trace(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Path(raw): Path<String>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, JaegerError> {
    v1(only(&params, &["start", "end"]))?;
    let tenant = v1(tenant.map(|Tenant(t)| t))?;
    // `start` / `end` (µs or ms) narrow Jaeger's own lookup; the trace is found by id.
    for (k, v) in &params {
        if matches!(k.as_str(), "start" | "end") && !v.is_empty() {
            v1(epoch_to_nanos(k, v))?;
        }
    }
    let trace_id = v1(parse_jaeger_trace_id(&raw))?;
    let (spans, reader) =
        v1(crate::query_api::trace_stream::open_trace(st.store.clone(), tenant, trace_id).await)?;
    let prices = Arc::clone(&st.prices);
    // `model::v1_envelope` around one trace, written span by span.
    Ok(
        crate::query_api::trace_stream::streamed("Jaeger trace response", move |out| {
            out.write(br#"{"data":["#)?;
            write_v1_trace(out, trace_id, &spans, reader, &prices)?;
            out.write(br#"],"total":1,"limit":0,"offset":0,"errors":null}"#)
        })
        .await,
    )
}

async fn v1_dependencies(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> V1 {
    v1(only(&params, &["endTs", "lookback"]))?;
    let tenant = v1(tenant.map(|Tenant(t)| t))?;
    let now_ms = (crate::params::now_ns() / 1_000_000) as u64;
    let mut end_ms = now_ms;
    let mut lookback_ms = 24 * 3600 * 1000;
    for (k, v) in &params {
        let num = || {
            v.parse::<u64>().map_err(|_| {
                ApiError::BadRequest(format!("{k} {v:?} is not a number of milliseconds"))
            })
        };
        match k.as_str() {
            "endTs" => end_ms = v1(num())?,
            "lookback" => lookback_ms = v1(num())?,
            _ => {}
        }
    }
    let store = st.store.clone();
    // From the stored per-minute hops (parent/child pairs across services, joined
    // across processes): every call in the range, however many traces it holds.
    let data = v1(blocking(move || {
        let to_ns = end_ms.saturating_mul(1_000_000).min(i64::MAX as u64) as i64;
        let from_ns =
            to_ns.saturating_sub(lookback_ms.saturating_mul(1_000_000).min(i64::MAX as u64) as i64);
        let map = threadline_diagnosis::service_map::service_map(&store, &tenant, from_ns, to_ns)?;
        Ok(map
            .edges
            .iter()
            .filter(|e| e.target == threadline_diagnosis::service_map::EdgeTarget::Service)
            .map(|e| json!({"parent": e.caller, "child": e.callee, "callCount": e.calls}))
            .collect::<Vec<_>>())
    })
    .await)?;
    let n = data.len();
    Ok(Json(model::v1_envelope(json!(data), n)))
}

async fn v3_services(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, JaegerError> {
    v3(only(&params, &[]))?;
    let tenant = v3(tenant.map(|Tenant(t)| t))?;
    let store = st.store.clone();
    let names: Vec<String> = v3(blocking(move || Ok(store.services(&tenant)?)).await)?
        .into_iter()
        .map(|s| s.name)
        .collect();
    Ok(Json(json!({"services": names})))
}

async fn v3_operations(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, JaegerError> {
    v3(only(&params, &["service", "span_kind", "spanKind"]))?;
    let tenant = v3(tenant.map(|Tenant(t)| t))?;
    let service = param(&params, &["service"]).map(str::to_owned);
    let kind = param(&params, &["span_kind", "spanKind"]).map(str::to_owned);
    let ops = v3(operations_of(&st, tenant, service, kind).await)?;
    Ok(Json(
        json!({"operations": ops.iter().map(|(name, k)| json!({"name": name, "spanKind": kind_name(*k)})).collect::<Vec<_>>()}),
    ))
}

/// v3's answer of spans: `{"result": {"resourceSpans": [...]}}`.
/// Spans per OTLP `resourceSpans` entry at most: a run of consecutive spans from one
/// origin is written as one entry, so what is held while writing stays bounded.
const OTLP_GROUP_SPANS: usize = 1000;

/// One trace's OTLP JSON `resourceSpans` entries, written as its spans are read:
/// consecutive spans of the same resource and scope share an entry (of at most
/// `OTLP_GROUP_SPANS`). `written` counts entries across traces, for the commas.
fn write_otlp_trace(
    out: &mut crate::query_api::trace_stream::ChunkWriter,
    spans: &[threadline_store::SkeletonSpan],
    mut reader: threadline_store::SpanReader,
    written: &mut usize,
) -> Result<(), crate::query_api::trace_stream::WriteStop> {
    let mut group: Vec<SpanRecord> = Vec::new();
    for skeleton in spans {
        let span = reader.span(skeleton)?;
        let other_origin = group
            .last()
            .is_some_and(|g| !Arc::ptr_eq(&g.origin, &span.origin) && g.origin != span.origin);
        if group.len() >= OTLP_GROUP_SPANS || other_origin {
            write_otlp_group(out, &mut group, written)?;
        }
        group.push(span);
    }
    write_otlp_group(out, &mut group, written)
}

fn write_otlp_group(
    out: &mut crate::query_api::trace_stream::ChunkWriter,
    group: &mut Vec<SpanRecord>,
    written: &mut usize,
) -> Result<(), crate::query_api::trace_stream::WriteStop> {
    if let Value::Array(entries) = model::otlp_json(group) {
        for entry in entries {
            if *written > 0 {
                out.write(b",")?;
            }
            out.write(entry.to_string().as_bytes())?;
            *written += 1;
        }
    }
    group.clear();
    Ok(())
}

/// The page of traces a v3 search names (`query.…` parameters).
async fn v3_search(
    st: &AppState,
    tenant: Result<Tenant, ApiError>,
    params: &[(String, String)],
) -> Result<(TenantId, threadline_store::TracePage), JaegerError> {
    let tenant = v3(tenant.map(|Tenant(t)| t))?;
    let query = v3(parse_v3_search(params))?;
    let store = st.store.clone();
    let search_tenant = tenant.clone();
    let page = v3(blocking(move || Ok(store.search(&search_tenant, &query)?)).await)?;
    Ok((tenant, page))
}

/// Every span of the found traces, as OTLP JSON, each trace written span by span.
async fn v3_find_traces(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, JaegerError> {
    let (tenant, page) = v3_search(&st, tenant, &params).await?;
    let store = st.store.clone();
    Ok(
        crate::query_api::trace_stream::streamed("Jaeger v3 search response", move |out| {
            out.write(br#"{"result":{"resourceSpans":["#)?;
            let mut written = 0;
            for summary in &page.traces {
                if let Some((spans, reader)) = store.open_trace(&tenant, summary.trace_id)? {
                    write_otlp_trace(out, &spans, reader, &mut written)?;
                }
            }
            out.write(b"]}}")
        })
        .await,
    )
}

async fn v3_get_trace(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Path(raw): Path<String>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, JaegerError> {
    // Jaeger's GetTrace parameters: the time bounds narrow its own lookup (checked,
    // then not needed: the trace is found by id).
    v3(only(
        &params,
        &[
            "start_time",
            "end_time",
            "raw_traces",
            "startTime",
            "endTime",
            "rawTraces",
        ],
    ))?;
    for (k, v) in &params {
        if matches!(
            k.as_str(),
            "start_time" | "end_time" | "startTime" | "endTime"
        ) {
            v3(crate::params::rfc3339_nanos(v).map_err(|e| {
                ApiError::BadRequest(format!("{k} {v:?} is not an RFC 3339 time: {e}"))
            }))?;
        }
    }
    let tenant = v3(tenant.map(|Tenant(t)| t))?;
    let trace_id = v3(parse_jaeger_trace_id(&raw))?;
    let (spans, reader) =
        v3(crate::query_api::trace_stream::open_trace(st.store.clone(), tenant, trace_id).await)?;
    Ok(
        crate::query_api::trace_stream::streamed("Jaeger v3 trace response", move |out| {
            out.write(br#"{"result":{"resourceSpans":["#)?;
            write_otlp_trace(out, &spans, reader, &mut 0)?;
            out.write(b"]}}")
        })
        .await,
    )
}

/// Summaries of the found traces, from their skeletons (no span detail is opened).
async fn v3_trace_summaries(
    State(st): State<AppState>,
    tenant: Result<Tenant, ApiError>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, JaegerError> {
    let (tenant, page) = v3_search(&st, tenant, &params).await?;
    let store = st.store.clone();
    let summaries = v3(blocking(move || {
        let mut out = Vec::with_capacity(page.traces.len());
        for t in &page.traces {
            let spans = store.trace_skeleton(&tenant, t.trace_id)?;
            if !spans.is_empty() {
                out.push(model::v3_summary(t.trace_id, &spans));
            }
        }
        Ok(out)
    })
    .await)?;
    Ok(Json(json!({ "summaries": summaries })))
}
