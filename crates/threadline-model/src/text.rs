//! The text a person searches a span for: its name, its status message, and what was
//! said — prompts, completions, messages, tool arguments and results, retrieved
//! documents, exception messages — in whichever convention carried it. The rule is
//! the attribute's key, on the span or on its events; GenAI and exception events
//! give all their string values. Ids, enums and numbers are left to the filters.

use crate::{AttrValue, Attribute, SpanDetail};

/// Key prefixes (or whole keys) whose string values are searchable text.
const TEXT_KEYS: [&str; 21] = [
    // OpenTelemetry GenAI (current and deprecated), OpenLLMetry.
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.content.",
    "gen_ai.event.content",
    "gen_ai.retrieval.query.text",
    // OpenInference.
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompts",
    "input.value",
    "output.value",
    "retrieval.documents.",
    "tool.parameters",
    // Traceloop entity input / output.
    "traceloop.entity.input",
    "traceloop.entity.output",
    // Errors.
    "exception.message",
    "error.message",
];

/// Whether a string value under `key` is searchable text.
pub fn is_text_key(key: &str) -> bool {
    TEXT_KEYS.iter().any(|k| key.starts_with(k))
}

/// Calls `f` with every string inside `value` (array items and map values included).
pub fn for_each_string<'a>(value: &'a AttrValue, f: &mut impl FnMut(&'a str)) {
    match value {
        AttrValue::String(s) => f(s),
        AttrValue::Array(items) => items.iter().for_each(|v| for_each_string(v, f)),
        AttrValue::KvList(kvs) => kvs.iter().for_each(|kv| for_each_string(&kv.value, f)),
        AttrValue::Empty
        | AttrValue::Bool(_)
        | AttrValue::Int(_)
        | AttrValue::Double(_)
        | AttrValue::Bytes(_) => {}
    }
}

/// Whether every string value of an event with this name is text (GenAI message and
/// choice events, exceptions).
pub fn is_text_event(name: &str) -> bool {
    name.starts_with("gen_ai.") || name == "exception"
}

fn text_attributes<'a>(attributes: &'a [Attribute], all: bool, f: &mut impl FnMut(&'a str)) {
    for a in attributes {
        if all || is_text_key(&a.key) {
            for_each_string(&a.value, f);
        }
    }
}

impl SpanDetail {
    /// Calls `f` with each searchable text of the span besides its name.
    pub fn for_each_text<'a>(&'a self, mut f: impl FnMut(&'a str)) {
        if !self.status.message.is_empty() {
            f(&self.status.message);
        }
        text_attributes(&self.attributes, false, &mut f);
        for event in &self.events {
            text_attributes(&event.attributes, is_text_event(&event.name), &mut f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpanEvent;

    #[test]
    fn text_comes_from_text_keys_and_message_events_only() {
        let detail = SpanDetail {
            attributes: vec![
                Attribute::new("gen_ai.prompt.0.content", AttrValue::String("why".into())),
                Attribute::new("gen_ai.request.model", AttrValue::String("m".into())),
                Attribute::new(
                    "llm.input_messages.0.message.content",
                    AttrValue::String("hello".into()),
                ),
                Attribute::new("input.value", AttrValue::Int(3)),
            ],
            events: vec![
                SpanEvent {
                    time_unix_nano: 0,
                    name: "gen_ai.user.message".into(),
                    attributes: vec![Attribute::new(
                        "content",
                        AttrValue::Array(vec![AttrValue::String("asked".into())]),
                    )],
                    dropped_attributes_count: 0,
                },
                SpanEvent {
                    time_unix_nano: 0,
                    name: "cache.lookup".into(),
                    attributes: vec![Attribute::new("key", AttrValue::String("k".into()))],
                    dropped_attributes_count: 0,
                },
            ],
            ..SpanDetail::default()
        };
        let mut seen = Vec::new();
        detail.for_each_text(|t| seen.push(t));
        assert_eq!(seen, ["why", "hello", "asked"]);
    }
}
