//! OTLP log records as Threadline keeps them: tied to a span when they carry its ids
//! (GenAI instrumentations send prompts and completions this way, as events named
//! `gen_ai.*`), searchable by their text, erased with their trace or subject.

use serde::{Deserialize, Serialize};

use crate::{for_each_string, is_text_key, AttrValue, Attribute, SpanId, SpanOrigin, TraceId};

/// One log record.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    /// When it happened (the observed time when the sender left it unset).
    pub time_unix_nano: u64,
    pub trace_id: Option<TraceId>,
    pub span_id: Option<SpanId>,
    pub service: String,
    pub detail: LogDetail,
    pub origin: std::sync::Arc<SpanOrigin>,
}

/// Everything of a log record that is not an indexed column. Persisted compressed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogDetail {
    pub observed_time_unix_nano: u64,
    /// OTLP `SeverityNumber` (1–24; 0 unspecified).
    pub severity_number: i32,
    pub severity_text: String,
    /// The event's name (`gen_ai.user.message`, …); empty for a plain log line.
    pub event_name: String,
    pub body: AttrValue,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes_count: u32,
    pub flags: u32,
}

impl LogDetail {
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
    }

    /// Calls `f` with each searchable text: every string of the body, the severity
    /// and event name, and the attributes that hold text (`is_text_key`).
    pub fn for_each_text<'a>(&'a self, mut f: impl FnMut(&'a str)) {
        for_each_string(&self.body, &mut f);
        for text in [&self.severity_text, &self.event_name] {
            if !text.is_empty() {
                f(text);
            }
        }
        for a in &self.attributes {
            if is_text_key(&a.key) {
                for_each_string(&a.value, &mut f);
            }
        }
    }

    /// The subject ids a log names in its attributes: (user id, session id).
    pub fn subject_ids(&self) -> (Option<&str>, Option<&str>) {
        let first = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| self.attr(k).and_then(AttrValue::as_str))
                .filter(|v| !v.is_empty())
        };
        (
            first(&["user.id", "enduser.id", "gen_ai.user.id"]),
            first(&["session.id", "gen_ai.conversation.id"]),
        )
    }
}

/// The severity a name stands for: `trace`, `debug`, `info`, `warn`, `error`, `fatal`
/// (the lowest number of its range, as OTLP numbers them), any case.
pub fn severity_from_name(name: &str) -> Option<i32> {
    Some(match name.to_ascii_lowercase().as_str() {
        "trace" => 1,
        "debug" => 5,
        "info" => 9,
        "warn" | "warning" => 13,
        "error" => 17,
        "fatal" => 21,
        _ => return None,
    })
}

/// The short name of a severity number (`""` for unspecified).
pub fn severity_name(number: i32) -> &'static str {
    match number {
        1..=4 => "trace",
        5..=8 => "debug",
        9..=12 => "info",
        13..=16 => "warn",
        17..=20 => "error",
        21..=24 => "fatal",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_round_trip_by_name() {
        for name in ["trace", "debug", "info", "warn", "error", "fatal"] {
            assert_eq!(severity_name(severity_from_name(name).unwrap()), name);
        }
        assert_eq!(severity_from_name("WARNING"), Some(13));
        assert_eq!(severity_from_name("loud"), None);
        assert_eq!(severity_name(0), "");
    }
}
