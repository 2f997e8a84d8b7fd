//! Query parameters a handler does not take are refused, on every endpoint: a typo
//! (`?sevice=chat`) answers 400 naming it instead of silently returning everything.
//! Handlers that parse parameters refuse unknown ones as they parse; those that take
//! none say so with `NoQuery`, and those that read a few by name check with `only`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;

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

/// The most results one page of any list may hold.
pub(crate) const MAX_LIMIT: usize = 1000;

/// `since=1h` (a duration back from now) as the unix nanoseconds it starts at.
pub(crate) fn parse_since(key: &str, value: &str) -> Result<u64, ApiError> {
    let back = humantime::parse_duration(value).map_err(|e| {
        ApiError::BadRequest(format!(
            "{key} {value:?} is not a duration back from now (e.g. 15m, 1h, 7d): {e}"
        ))
    })?;
    let back = i64::try_from(back.as_nanos()).unwrap_or(i64::MAX);
    Ok(now_ns().saturating_sub(back).max(0) as u64)
}

/// `250ms`, `1.5s`, `2m` … or a bare number of milliseconds.
pub(crate) fn parse_duration(key: &str, value: &str) -> Result<u64, ApiError> {
    if let Ok(ms) = value.parse::<f64>() {
        if ms.is_finite() && ms >= 0.0 {
            return Ok((ms * 1e6) as u64);
        }
    }
    let d = humantime::parse_duration(value).map_err(|e| {
        ApiError::BadRequest(format!(
            "{key} {value:?} is not a duration (e.g. 250ms, 1.5s or milliseconds): {e}"
        ))
    })?;
    Ok(d.as_nanos().min(u64::MAX as u128) as u64)
}

/// RFC 3339 (`2026-11-30T14:05:00Z`) or unix seconds (fractions allowed).
/// Wall-clock time now, in unix nanoseconds.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// A time parameter in unix nanoseconds, no later than `i64::MAX` ns (in 2262): times
/// are signed nanoseconds past this point.
pub(crate) fn parse_time(key: &str, value: &str) -> Result<u64, ApiError> {
    let ns = match value.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => secs * 1e9,
        _ => rfc3339_nanos(value).map_err(|e| {
            ApiError::BadRequest(format!(
                "{key} {value:?} is not a time (RFC 3339 or unix seconds): {e}"
            ))
        })? as f64,
    };
    if ns >= i64::MAX as f64 {
        return Err(ApiError::BadRequest(format!(
            "{key} {value:?} is after the latest time Threadline handles (2262-04-11)"
        )));
    }
    Ok(ns as u64)
}

/// Unix nanoseconds as RFC 3339 UTC (for messages).
pub(crate) fn format_time(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_nanos(t).to_string()
}

/// An RFC 3339 time with its offset (`2026-12-01T09:00:00+01:00`, `…Z`), or one
/// without a zone, read as UTC, in unix nanoseconds.
pub(crate) fn rfc3339_nanos(value: &str) -> Result<u64, String> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(value, &Rfc3339) {
        return Ok(t.unix_timestamp_nanos().clamp(0, u64::MAX as i128) as u64);
    }
    let t = humantime::parse_rfc3339_weak(value).map_err(|e| e.to_string())?;
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Ok(since.as_nanos().min(u64::MAX as u128) as u64)
}

/// A page cursor as this API hands it out: `TAG:FIELD:…` in URL-safe base64.
pub(crate) fn encode_page_cursor(tag: &str, fields: &[&dyn std::fmt::Display]) -> String {
    let mut text = tag.to_owned();
    for f in fields {
        text.push_str(&format!(":{f}"));
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// The 400 for a cursor this API did not give out.
pub(crate) fn invalid_cursor(value: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "cursor {value:?} is invalid: pass next_cursor from a previous page unchanged"
    ))
}

/// The fields after `tag` of a cursor made by `encode_page_cursor`.
pub(crate) fn page_cursor_fields(value: &str, tag: &str) -> Result<Vec<String>, ApiError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(value)
        .map_err(|_| invalid_cursor(value))?;
    let text = String::from_utf8(bytes).map_err(|_| invalid_cursor(value))?;
    let mut parts = text.split(':');
    if parts.next() != Some(tag) {
        return Err(invalid_cursor(value));
    }
    Ok(parts.map(str::to_owned).collect())
}

/// Query parameters as handlers receive them, from literals (tests).
#[cfg(test)]
pub(crate) fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_parameters_pass() {
        let p = pairs;
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
