//! Query parameters a handler does not take are refused, on every endpoint: a typo
//! (`?sevice=chat`) answers 400 naming it instead of silently returning everything.
//! Handlers that parse parameters refuse unknown ones as they parse; those that take
//! none say so with `NoQuery`, and those that read a few by name check with `only`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;

/// Refuses a request with any query parameter (an empty query string is none).
pub(crate) struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.uri.query() {
            Some(query) if !query.trim_matches('&').is_empty() => {
                let first = query
                    .split('&')
                    .find(|p| !p.is_empty())
                    .and_then(|p| p.split('=').next())
                    .unwrap_or(query);
                Err(ApiError::BadRequest(format!(
                    "unknown query parameter {:?}: {} takes no query parameters",
                    percent_decoded(first),
                    parts.uri.path()
                )))
            }
            _ => Ok(NoQuery),
        }
    }
}

fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// `Ok` when every parameter is one of `names` (a name ending in `.` takes any key it
/// starts, like `attr.`).
pub(crate) fn only(params: &[(String, String)], names: &[&str]) -> Result<(), ApiError> {
    for (key, _) in params {
        let known = names.iter().any(|n| {
            if n.ends_with('.') {
                key.starts_with(n) && key.len() > n.len()
            } else {
                key == n
            }
        });
        if !known {
            return Err(ApiError::BadRequest(format!(
                "unknown query parameter {key:?}: use {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// A `limit` parameter: an integer in `1..=max`, else a 400 naming the range.
pub(crate) fn limit(value: &str, max: usize) -> Result<usize, ApiError> {
    value
        .parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            ApiError::BadRequest(format!("limit {value:?} is not an integer in 1..={max}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_parameters_pass() {
        let p = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(only(
            &p(&[("service", "a"), ("attr.x", "1")]),
            &["service", "attr."]
        )
        .is_ok());
        let e = only(&p(&[("sevice", "a")]), &["service"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"sevice\"") && e.contains("use service"), "{e}");
        assert!(only(&p(&[("attr.", "1")]), &["attr."]).is_err());
    }

    #[tokio::test]
    async fn no_query_refuses_any_parameter() {
        let parts = |uri: &str| {
            axum::http::Request::get(uri)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        for ok in [
            "/api/v1/services",
            "/api/v1/services?",
            "/api/v1/services?&",
        ] {
            assert!(
                NoQuery::from_request_parts(&mut parts(ok), &())
                    .await
                    .is_ok(),
                "{ok}"
            );
        }
        let e = NoQuery::from_request_parts(&mut parts("/api/v1/services?limit=5"), &())
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("\"limit\"") && e.contains("/api/v1/services takes no"),
            "{e}"
        );
    }
}
