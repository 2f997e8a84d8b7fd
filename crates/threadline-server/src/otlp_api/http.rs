//! OTLP/HTTP receiver: `POST /v1/traces` and `POST /v1/logs` with protobuf or JSON
//! bodies, gzip allowed, both through one handler (`export::<S: Signal>`). Failures are
//! answered the OTLP way: a `google.rpc.Status` in the request's encoding.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use prost::Message;

use threadline_ingest::{decode_body, ContentKind, RpcStatus};

use crate::body_budget::{announced, decode_status, drain, BodyRefusal};

use crate::otlp_api::ingest::{IngestFailure, Logs, Signal, Traces};
use crate::state::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(Traces::HTTP_PATH, post(export::<Traces>))
        .route(Logs::HTTP_PATH, post(export::<Logs>))
        .route("/v1/metrics", post(export_metrics))
        .fallback(|State(state): State<AppState>, headers: HeaderMap| async move {
            match crate::misdirected::grpc_on_http_port(&headers, state.otlp_ports) {
                Some(answer) => answer,
                None => crate::error::ApiError::NotFound(
                    "this is Threadline's OTLP/HTTP receiver (POST /v1/traces, /v1/logs); the JSON API and the UI are on the API port (default :8080)".to_owned(),
                )
                .into_response(),
            }
        })
}

/// An OTLP/HTTP failure: the status, and a `google.rpc.Status` body with the gRPC code.
fn failure(kind: ContentKind, status: StatusCode, code: tonic::Code, message: String) -> Response {
    let code = code as i32;
    let body = match kind {
        ContentKind::Protobuf => RpcStatus { code, message }.encode_to_vec(),
        ContentKind::Json => serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes(),
    };
    let mut response = (status, [(header::CONTENT_TYPE, kind.mime())], body).into_response();
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        crate::error::insert_retry_after(&mut response);
    }
    response
}

/// What an exporter of OTLP metrics is told (HTTP 501, gRPC UNIMPLEMENTED): neither
/// retryable nor a missing route, so an SDK set up with one endpoint for every signal
/// drops its metrics once and says why.
pub(crate) const METRICS_NOT_SUPPORTED: &str = "Threadline does not accept OTLP metrics: \
    it stores traces and logs (/v1/traces, /v1/logs; TraceService, LogsService) and derives \
    its own metrics from them; \
    send metrics to a metrics backend (Prometheus can scrape Threadline's /metrics)";

async fn export_metrics(headers: HeaderMap) -> Response {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| ContentKind::from_content_type(Some(v)).ok())
        .unwrap_or(ContentKind::Json);
    failure(
        kind,
        StatusCode::NOT_IMPLEMENTED,
        tonic::Code::Unimplemented,
        METRICS_NOT_SUPPORTED.to_owned(),
    )
}

async fn export<S: Signal>(
    State(state): State<AppState>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    mut headers: HeaderMap,
    body: Body,
) -> Response {
    crate::guard::authority_as_host(&uri, &mut headers);
    let text_header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = text_header(header::CONTENT_TYPE);
    let announced = announced(&headers);
    // Errors before the content type is known are answered in JSON.
    let kind = ContentKind::from_content_type(content_type.as_deref());
    if let Err(refusal) = state.origins.check(&method, &headers) {
        drain(body, announced).await;
        let kind = kind.unwrap_or(ContentKind::Json);
        return failure(
            kind,
            refusal.status,
            rpc_code_of(refusal.status),
            refusal.message,
        );
    }
    let kind = match kind {
        Ok(kind) => kind,
        Err(e) => {
            drain(body, announced).await;
            return failure(
                ContentKind::Json,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                tonic::Code::InvalidArgument,
                e.to_string(),
            );
        }
    };
    let tenant = match state
        .ingest
        .auth
        .authenticate(crate::auth::authorization(&headers))
    {
        Ok(t) => t,
        Err(e) => {
            drain(body, announced).await;
            return failure(
                kind,
                StatusCode::UNAUTHORIZED,
                tonic::Code::Unauthenticated,
                e.to_string(),
            );
        }
    };
    let mut held = None;
    let (bytes, mut reservation) = match state.budget.read(&headers, body).await {
        Ok(read) => read,
        Err(refusal) => {
            if matches!(refusal, BodyRefusal::OverBudget { .. }) {
                state
                    .ingest
                    .stats
                    .requests_throttled
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let status = refusal.status();
            return failure(kind, status, rpc_code_of(status), refusal.to_string());
        }
    };
    let encoding = text_header(header::CONTENT_ENCODING);
    let ctx = state.ingest.clone();
    let limits = state.budget.limits();
    let store = ctx.store.clone();
    let bounds = ctx.time_bounds();
    // The reservation (the body's bytes, and what inflating it took) is held until
    // the export is answered: it stands for the request's memory while decoded,
    // converted and queued.
    let prepared = ctx
        .run_cpu(move || {
            let coming = store.write_coming();
            let decoded = decode_body(encoding.as_deref(), &bytes, limits, &mut reservation)
                .and_then(|body| S::decode(kind, &body, &bounds));
            drop(bytes);
            let prepared = decoded.map(|decoded| S::prepare(&store, &tenant, decoded, coming));
            (prepared, reservation)
        })
        .await
        .map(|(prepared, reservation)| {
            held = Some(reservation);
            prepared
        });
    let ready = match prepared {
        Ok(Ok(Ok(ready))) => ready,
        Ok(Ok(Err(e))) | Err(e) => return ingest_failure(kind, e),
        Ok(Err(e)) => {
            let status = decode_status(&e);
            return failure(kind, status, rpc_code_of(status), e.to_string());
        }
    };
    let committed = S::commit(&state.ingest, ready).await;
    drop(held);
    match committed {
        Ok(response) => {
            let body = match kind {
                ContentKind::Protobuf => response.encode_to_vec(),
                ContentKind::Json => {
                    serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec())
                }
            };
            (StatusCode::OK, [(header::CONTENT_TYPE, kind.mime())], body).into_response()
        }
        Err(e) => ingest_failure(kind, e),
    }
}

/// The `google.rpc.Status` code that goes with an HTTP status of a refusal.
fn rpc_code_of(status: StatusCode) -> tonic::Code {
    match status {
        StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
        StatusCode::UNAUTHORIZED => tonic::Code::Unauthenticated,
        StatusCode::FORBIDDEN => tonic::Code::PermissionDenied,
        StatusCode::REQUEST_TIMEOUT => tonic::Code::DeadlineExceeded,
        _ => tonic::Code::InvalidArgument,
    }
}

fn ingest_failure(kind: ContentKind, e: IngestFailure) -> Response {
    let (status, code) = e.statuses();
    failure(kind, status, code, e.to_string())
}
