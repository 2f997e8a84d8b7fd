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

impl From<threadline_store::StoreError> for ApiError {
    fn from(e: threadline_store::StoreError) -> Self {
        ApiError::Internal(e.to_string())
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
