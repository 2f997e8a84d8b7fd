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
    #[error("internal error")]
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Internal(detail) => {
                tracing::error!(%detail, "api request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}

impl From<threadline_store::StoreError> for ApiError {
    fn from(e: threadline_store::StoreError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
