//! `ApiError`: every failure of the JSON API, rendered as `{"error": "..."}` with the
//! right status. Internal details are logged, not sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

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
    #[error("internal error")]
    Internal(String),
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
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "api request failed");
        }
        let status = self.status();
        let mut response = (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

/// A full write queue is the client's cue to retry (429 with Retry-After), whichever
/// endpoint met it: ingest, registry writes, erasures, and the diagnosis reads that
/// flush the writer's rollup cells first. Anything else is internal.
impl From<threadline_store::StoreError> for ApiError {
    fn from(e: threadline_store::StoreError) -> Self {
        match e {
            e @ threadline_store::StoreError::QueueFull { .. } => ApiError::Busy(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
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
        let e = ApiError::from(threadline_store::StoreError::QueueFull {
            queued_batches: 1024,
            queued_bytes: 1,
        });
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "1");
        let other = ApiError::from(threadline_store::StoreError::WriterStopped);
        assert_eq!(other.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
