//! `[limits]`: what one client may cost the server — how long it may take to send a
//! request, how many request bytes all clients may hold in memory at once, and which
//! record times are accepted.

use std::time::Duration;

use serde::Deserialize;

/// The limits in force, after defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A request's headers must arrive within this (slow-loris). On HTTP/1 the clock
    /// starts when the connection waits for a request, so it also closes keep-alive
    /// connections idle between requests.
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this once its headers have.
    pub body_read_timeout: Duration,
    /// A connection with nothing sent either way for this long is closed (keep-alive
    /// connections between requests, half-sent requests, silent gRPC connections).
    pub idle_timeout: Duration,
    /// Request bodies held in memory at once, over every client and listener; beyond
    /// it requests get 429 / RESOURCE_EXHAUSTED with Retry-After.
    pub max_inflight_body_bytes: usize,
    /// How far ahead of the server's clock a span or log record may be dated.
    pub max_future_skew: Duration,
    /// How far behind it; `None`: no bound (backfills and replays of old data).
    pub max_span_age: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(120),
            max_inflight_body_bytes: 256 * 1024 * 1024,
            max_future_skew: Duration::from_secs(15 * 60),
            max_span_age: None,
        }
    }
}

/// `[limits]` as written: durations in humantime (`"10s"`, `"15m"`; `"0"` for
/// `max_span_age` means no bound).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimits {
    header_read_timeout: Option<String>,
    body_read_timeout: Option<String>,
    idle_timeout: Option<String>,
    max_inflight_body_bytes: Option<usize>,
    max_future_skew: Option<String>,
    max_span_age: Option<String>,
}

impl FileLimits {
    /// The limits, each unset one at its default; problems are pushed by name.
    pub(super) fn resolve(self, problems: &mut Vec<String>) -> Limits {
        let d = Limits::default();
        let mut duration = |name: &str, text: Option<String>, default: Duration, zero_ok: bool| {
            let Some(text) = text else {
                return Some(default);
            };
            match humantime::parse_duration(text.trim()) {
                Ok(v) if v.is_zero() && !zero_ok => {
                    problems.push(format!("limits.{name} must be longer than 0"));
                    Some(default)
                }
                Ok(v) => Some(v),
                Err(e) => {
                    problems.push(format!(
                        "limits.{name} {text:?} is not a duration (like \"10s\" or \"15m\"): {e}"
                    ));
                    Some(default)
                }
            }
        };
        let header_read_timeout = duration(
            "header_read_timeout",
            self.header_read_timeout,
            d.header_read_timeout,
            false,
        );
        let body_read_timeout = duration(
            "body_read_timeout",
            self.body_read_timeout,
            d.body_read_timeout,
            false,
        );
        let idle_timeout = duration("idle_timeout", self.idle_timeout, d.idle_timeout, false);
        let max_future_skew = duration(
            "max_future_skew",
            self.max_future_skew,
            d.max_future_skew,
            true,
        );
        let max_span_age = match self.max_span_age {
            None => d.max_span_age,
            Some(text) => duration("max_span_age", Some(text), Duration::ZERO, true)
                .filter(|age| !age.is_zero()),
        };
        let max_inflight_body_bytes = self
            .max_inflight_body_bytes
            .unwrap_or(d.max_inflight_body_bytes);
        if max_inflight_body_bytes == 0 {
            problems.push("limits.max_inflight_body_bytes must be greater than 0".to_owned());
        }
        Limits {
            header_read_timeout: header_read_timeout.unwrap_or(d.header_read_timeout),
            body_read_timeout: body_read_timeout.unwrap_or(d.body_read_timeout),
            idle_timeout: idle_timeout.unwrap_or(d.idle_timeout),
            max_inflight_body_bytes,
            max_future_skew: max_future_skew.unwrap_or(d.max_future_skew),
            max_span_age,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml_text: &str) -> (Limits, Vec<String>) {
        let file: FileLimits = toml::from_str(toml_text).unwrap();
        let mut problems = Vec::new();
        (file.resolve(&mut problems), problems)
    }

    #[test]
    fn unset_limits_take_their_defaults_and_set_ones_are_read() {
        let (limits, problems) = resolve("");
        assert!(problems.is_empty());
        assert_eq!(limits, Limits::default());
        let (limits, problems) = resolve(
            "idle_timeout = \"5s\"\nmax_future_skew = \"1m\"\nmax_span_age = \"30d\"\nmax_inflight_body_bytes = 1000\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(limits.max_future_skew, Duration::from_secs(60));
        assert_eq!(limits.max_span_age, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(limits.max_inflight_body_bytes, 1000);
        assert_eq!(resolve("max_span_age = \"0\"\n").0.max_span_age, None);
    }

    #[test]
    fn bad_limits_are_named() {
        let (_, problems) = resolve(
            "idle_timeout = \"soon\"\nheader_read_timeout = \"0s\"\nmax_inflight_body_bytes = 0\n",
        );
        let all = problems.join("\n");
        assert!(all.contains("limits.idle_timeout \"soon\""), "{all}");
        assert!(
            all.contains("limits.header_read_timeout must be longer than 0"),
            "{all}"
        );
        assert!(all.contains("limits.max_inflight_body_bytes"), "{all}");
        assert!(toml::from_str::<FileLimits>("bogus = 1").is_err());
    }
}
