//! `ApiError`: every failure of the JSON API, rendered as `{"error": "..."}` with the
//! right status. Internal details are logged, not sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use threadline_store::{ErrorKind, StoreError};

use crate::auth::AuthError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(#[from] AuthError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The write queue is full: 429 with Retry-After.
    #[error("{0}")]
    Busy(String),
    /// The store failed: its kind says the status (`store_status`), clients see only
    /// the public message.
    #[error("{}", .0.public_message())]
    Store(#[from] StoreError),
    #[error("internal error")]
    Internal(String),
}

/// The one mapping of a store failure's kind to the HTTP status and the gRPC code a
/// client gets, on every API (JSON, OTLP/HTTP, OTLP/gRPC). Busy comes with Retry-After.
pub(crate) fn store_status(kind: ErrorKind) -> (StatusCode, tonic::Code) {
    match kind {
        ErrorKind::Busy => (
            StatusCode::TOO_MANY_REQUESTS,
            tonic::Code::ResourceExhausted,
        ),
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, tonic::Code::NotFound),
        ErrorKind::InvalidQuery => (StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument),
        ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, tonic::Code::Unavailable),
        ErrorKind::Corrupt => (StatusCode::INTERNAL_SERVER_ERROR, tonic::Code::Internal),
    }
}

/// Logs what the client is not told of a store failure (paths, backend messages).
pub(crate) fn log_store_failure(e: &StoreError) {
    if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Corrupt) {
        tracing::error!(error = %e, "store failed");
    }
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Store(e) => store_status(e.kind()).0,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            ApiError::Internal(detail) => tracing::error!(%detail, "api request failed"),
            ApiError::Store(e) => log_store_failure(e),
            _ => {}
        }
        let status = self.status();
        let mut response = (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            insert_retry_after(&mut response);
        }
        response
    }
}

/// Seconds a client refused for load (429, 503 on OTLP, RESOURCE_EXHAUSTED) is told
/// to wait before it retries.
pub(crate) const RETRY_AFTER_SECONDS: u64 = 1;

/// Tells the client of a refused request when to retry: the one place every API (ours,
/// Jaeger's, OTLP/HTTP, the overload guard) sets Retry-After.
pub(crate) fn insert_retry_after(response: &mut axum::response::Response) {
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(RETRY_AFTER_SECONDS),
    );
}

/// A missing incident or trace is a 404, a target that names no series a 400.
impl From<threadline_diagnosis::DiagnosisError> for ApiError {
    fn from(e: threadline_diagnosis::DiagnosisError) -> Self {
        use threadline_diagnosis::DiagnosisError;
        match e {
            DiagnosisError::Store(e) => e.into(),
            DiagnosisError::NotFound(m) => ApiError::NotFound(m),
            DiagnosisError::InvalidTarget(m) => ApiError::BadRequest(m),
        }
    }
}

/// Runs blocking work (store reads, graph walks) off the async runtime; a task that
/// panicked is an internal error.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("blocking task failed: {e}")))?
}

/// A trace id from a URL path, or a 400 naming it.
pub(crate) fn parse_trace_id(raw: &str) -> Result<threadline_model::TraceId, ApiError> {
    raw.parse()
        .map_err(|e| ApiError::BadRequest(format!("trace id {raw:?} is invalid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    /// Diagnosis reads flush the writer's rollup cells first: a full queue there is a
    /// 429 with Retry-After, as on ingest, not a 500.
    #[test]
    fn a_full_write_queue_is_429_with_retry_after_wherever_it_is_met() {
        let e = ApiError::from(StoreError::queue_full(1024, 1));
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "1");
        let other = ApiError::from(StoreError::writer_stopped());
        assert_eq!(other.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn a_store_failure_never_shows_the_client_a_path() {
        let e = StoreError::unavailable("cannot open /srv/data/threadline.db")
            .with_source(std::io::Error::other("disk I/O error"));
        let response = ApiError::from(e).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(!body.contains("/srv/data"), "{body}");
        assert!(body.contains("the store is unavailable"), "{body}");
    }
}
