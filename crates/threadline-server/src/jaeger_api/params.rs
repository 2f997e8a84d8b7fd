//! The query parameters of Jaeger's APIs, parsed into Threadline's typed queries:
//! Go durations, unix times in µs (or ms), `tags` as a JSON map or logfmt, v3's
//! `query.…` names in camelCase or snake_case, RFC 3339 times with offsets, and trace
//! ids without their leading zeros.

use serde_json::Value;
use threadline_model::TraceId;
use threadline_store::{NameMatch, TraceQuery};

use crate::error::ApiError;

pub(crate) const DEFAULT_LIMIT: usize = 20;
pub(crate) const MAX_LIMIT: usize = 1500;

/// A Go duration (`1.5s`, `100ms`, `1m30s`, `250us`, `250µs`) in nanoseconds.
pub(crate) fn go_duration(key: &str, value: &str) -> Result<u64, ApiError> {
    let text = value.replace('µ', "u");
    // humantime wants a number before every unit; Go allows fractions ("1.5s").
    let mut total = 0f64;
    let mut rest = text.as_str();
    if rest.is_empty() {
        return Err(ApiError::BadRequest(format!("{key} is empty")));
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let n: f64 = num.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "{key} {value:?} is not a duration (e.g. 1.5s, 100ms, 1m30s)"
            ))
        })?;
        let scale = match unit {
            "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "{key} {value:?} has unit {unit:?}: use ns, us, ms, s, m or h"
                )))
            }
        };
        total += n * scale;
        rest = next;
    }
    Ok(total as u64)
}

/// `start` / `end` of the v1 API: unix microseconds (milliseconds, seconds or
/// nanoseconds are told apart by size, as clients mix them).
pub(crate) fn epoch_to_nanos(key: &str, value: &str) -> Result<u64, ApiError> {
    let n: u64 = value.trim().parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "{key} {value:?} is not a unix time in microseconds"
        ))
    })?;
    Ok(match n {
        0..=99_999_999_999 => n * 1_000_000_000, // seconds
        100_000_000_000..=99_999_999_999_999 => n * 1_000_000, // milliseconds
        100_000_000_000_000..=99_999_999_999_999_999 => n * 1_000, // microseconds
        _ => n,                                  // nanoseconds
    })
}

/// How many traces a search returns: 1 to `MAX_LIMIT`.
fn trace_limit(key: &str, value: &str) -> Result<usize, ApiError> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| ApiError::BadRequest(format!("{key} {value:?} is not in 1..={MAX_LIMIT}")))
}

/// `tags` of the v1 API: a JSON object, or logfmt (`k=v k2="v 2"`).
fn parse_tags(value: &str) -> Result<Vec<(String, String)>, ApiError> {
    let t = value.trim();
    if t.starts_with('{') {
        let map: serde_json::Map<String, Value> = serde_json::from_str(t).map_err(|e| {
            ApiError::BadRequest(format!("tags {value:?} is not a JSON object: {e}"))
        })?;
        return Ok(map
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, v)
            })
            .collect());
    }
    let mut out = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').ok_or_else(|| {
            ApiError::BadRequest(format!("tags {value:?}: expected key=value pairs"))
        })?;
        let (val, next) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted
                .find('"')
                .ok_or_else(|| ApiError::BadRequest(format!("tags {value:?}: unclosed quote")))?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            after.split_once(' ').unwrap_or((after, ""))
        };
        out.push((key.trim().to_owned(), val.to_owned()));
        rest = next.trim_start();
    }
    Ok(out)
}

/// Tag filters onto a trace query: `error=true` is the error filter, the rest match
/// span or resource attributes.
fn apply_tags(q: &mut TraceQuery, tags: Vec<(String, String)>) {
    for (k, v) in tags {
        if k == "error" && v == "true" {
            q.errors_only = true;
        } else {
            q.attributes.push((k, v));
        }
    }
}

pub(crate) fn parse_v1_search(params: &[(String, String)]) -> Result<TraceQuery, ApiError> {
    let mut q = TraceQuery {
        limit: DEFAULT_LIMIT,
        // Jaeger's clients send a service picked from the services list.
        names: NameMatch::Exact,
        // Jaeger's API has no next page: its one page reads as far as it must.
        exhaustive: true,
        ..Default::default()
    };
    let mut lookback = None;
    for (k, v) in params {
        let v = v.as_str();
        if v.is_empty() {
            continue;
        }
        match k.as_str() {
            "service" => q.service = Some(v.to_owned()),
            "operation" => q.span_name = Some(v.to_owned()),
            "tags" | "tag" => apply_tags(&mut q, parse_tags(v)?),
            "start" => q.start_from_unix_nano = Some(epoch_to_nanos(k, v)?),
            "end" => q.start_to_unix_nano = Some(epoch_to_nanos(k, v)?),
            "minDuration" => q.min_duration_nanos = Some(go_duration(k, v)?),
            "maxDuration" => q.max_duration_nanos = Some(go_duration(k, v)?),
            "lookback" if v != "custom" => lookback = Some(go_duration(k, v)?),
            "lookback" => {}
            "limit" => q.limit = trace_limit(k, v)?,
            "traceID" | "spanKind" | "raw" | "prettyPrint" => {}
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown parameter {other:?}: use service, operation, tags, start, end, minDuration, maxDuration, lookback or limit"
                )))
            }
        }
    }
    if let (None, Some(back)) = (q.start_from_unix_nano, lookback) {
        q.start_from_unix_nano = Some((crate::params::now_ns() as u64).saturating_sub(back));
    }
    if let Some(problem) = q.problem() {
        return Err(ApiError::BadRequest(problem));
    }
    Ok(q)
}

pub(crate) fn parse_v3_search(params: &[(String, String)]) -> Result<TraceQuery, ApiError> {
    let mut q = TraceQuery {
        limit: DEFAULT_LIMIT,
        // Jaeger's clients send a service picked from the services list.
        names: NameMatch::Exact,
        // Jaeger's API has no next page: its one page reads as far as it must.
        exhaustive: true,
        ..Default::default()
    };
    let rfc3339 = |k: &str, v: &str| -> Result<u64, ApiError> {
        crate::params::rfc3339_nanos(v)
            .map_err(|e| ApiError::BadRequest(format!("{k} {v:?} is not an RFC 3339 time: {e}")))
    };
    for (k, v) in params {
        let v = v.as_str();
        if v.is_empty() {
            continue;
        }
        let Some(name) = k.strip_prefix("query.") else {
            return Err(ApiError::BadRequest(format!(
                "unknown parameter {k:?}: the search parameters are query.service_name, query.operation_name, query.attributes, query.start_time_min, query.start_time_max, query.duration_min, query.duration_max, query.search_depth"
            )));
        };
        // camelCase and snake_case name the same field.
        let snake: String = name
            .chars()
            .flat_map(|c| {
                if c.is_ascii_uppercase() {
                    vec!['_', c.to_ascii_lowercase()]
                } else {
                    vec![c]
                }
            })
            .collect();
        match snake.as_str() {
            "service_name" => q.service = Some(v.to_owned()),
            "operation_name" => q.span_name = Some(v.to_owned()),
            "attributes" => apply_tags(&mut q, parse_tags(v)?),
            "start_time_min" => q.start_from_unix_nano = Some(rfc3339(k, v)?),
            "start_time_max" => q.start_to_unix_nano = Some(rfc3339(k, v)?),
            "duration_min" => q.min_duration_nanos = Some(go_duration(k, v)?),
            "duration_max" => q.max_duration_nanos = Some(go_duration(k, v)?),
            "search_depth" | "num_traces" => q.limit = trace_limit(k, v)?,
            "raw_traces" => {}
            other => match other.strip_prefix("attributes.") {
                Some(key) => q.attributes.push((key.to_owned(), v.to_owned())),
                None => return Err(ApiError::BadRequest(format!("unknown parameter {k:?}"))),
            },
        }
    }
    if let Some(problem) = q.problem() {
        return Err(ApiError::BadRequest(problem));
    }
    Ok(q)
}

/// A trace id as Jaeger clients write it: 1 to 32 hex digits (leading zeros dropped).
pub(crate) fn parse_jaeger_trace_id(raw: &str) -> Result<TraceId, ApiError> {
    if raw.is_empty() || raw.len() > 32 || !raw.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::BadRequest(format!(
            "trace id {raw:?} is invalid: expected up to 32 hex digits"
        )));
    }
    crate::error::parse_trace_id(&format!("{raw:0>32}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::params::pairs as params;

    #[test]
    fn go_durations_and_epochs() {
        assert_eq!(go_duration("d", "1.5s").unwrap(), 1_500_000_000);
        assert_eq!(go_duration("d", "1m30s").unwrap(), 90_000_000_000);
        assert_eq!(go_duration("d", "250µs").unwrap(), 250_000);
        assert_eq!(go_duration("d", "100ms").unwrap(), 100_000_000);
        assert!(go_duration("d", "5 parsecs")
            .unwrap_err()
            .to_string()
            .contains("d"));
        assert_eq!(
            epoch_to_nanos("start", "1485467191639875").unwrap(),
            1_485_467_191_639_875_000
        );
        assert_eq!(
            epoch_to_nanos("start", "1485467191639").unwrap(),
            1_485_467_191_639_000_000
        );
    }

    #[test]
    fn v1_search_parameters() {
        let q = parse_v1_search(&params(&[
            ("service", "gw"),
            ("operation", "chat"),
            (
                "tags",
                r#"{"error":"true","gen_ai.request.model":"gpt-4o"}"#,
            ),
            ("start", "1485467191639875"),
            ("minDuration", "1.2s"),
            ("limit", "20"),
        ]))
        .unwrap();
        assert_eq!(q.service.as_deref(), Some("gw"));
        assert_eq!(q.span_name.as_deref(), Some("chat"));
        assert!(q.errors_only);
        assert_eq!(
            q.attributes,
            [("gen_ai.request.model".to_owned(), "gpt-4o".to_owned())]
        );
        assert_eq!(q.min_duration_nanos, Some(1_200_000_000));
        let logfmt = parse_tags(r#"a=1 b="two words" c=x"#).unwrap();
        assert_eq!(logfmt[1], ("b".to_owned(), "two words".to_owned()));
        assert_eq!(logfmt.len(), 3);
        assert!(parse_v1_search(&params(&[("bogus", "1")])).is_err());
    }

    #[test]
    fn v3_search_takes_both_spellings() {
        for (svc, start) in [
            ("query.service_name", "query.start_time_min"),
            ("query.serviceName", "query.startTimeMin"),
        ] {
            let q = parse_v3_search(&params(&[
                (svc, "gw"),
                (start, "2026-12-01T09:00:00+01:00"),
                ("query.search_depth", "5"),
            ]))
            .unwrap();
            assert_eq!(q.service.as_deref(), Some("gw"));
            assert_eq!(q.start_from_unix_nano, Some(1_796_112_000_000_000_000));
            assert_eq!(q.limit, 5);
        }
        assert!(parse_v3_search(&params(&[("service", "gw")])).is_err());
    }

    #[test]
    fn jaeger_trace_ids_drop_leading_zeros() {
        assert_eq!(
            parse_jaeger_trace_id("1").unwrap().to_hex(),
            "00000000000000000000000000000001"
        );
        assert!(parse_jaeger_trace_id("xyz").is_err());
    }
}
