//! The text a person searches a span for: its name, its status message, and what was
//! said — prompts, completions, messages, tool arguments and results, retrieved
//! documents, exception messages — in whichever convention carried it. The rule is
//! the attribute's key, on the span or on its events; GenAI and exception events
//! give all their string values. Ids, enums and numbers are left to the filters.

use crate::{AttrValue, Attribute, SpanDetail};

/// Key prefixes (or whole keys) whose string values are searchable text: sorted, and
/// none a prefix of another, so that `is_text_key` binary-searches them (a test holds
/// both).
const TEXT_KEYS: [&str; 21] = [
    "error.message",
    "exception.message",
    // OpenTelemetry GenAI (current and deprecated), OpenLLMetry.
    "gen_ai.completion",
    "gen_ai.content.",
    "gen_ai.event.content",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.prompt",
    "gen_ai.retrieval.query.text",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    // OpenInference.
    "input.value",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompts",
    "output.value",
    "retrieval.documents.",
    "tool.parameters",
    // Traceloop entity input / output.
    "traceloop.entity.input",
    "traceloop.entity.output",
];

/// Whether a string value under `key` is searchable text. The only prefix `key` can
/// start with is the greatest one not above it (no prefix starts another).
pub fn is_text_key(key: &str) -> bool {
    let at = TEXT_KEYS.partition_point(|prefix| *prefix <= key);
    at > 0 && key.starts_with(TEXT_KEYS[at - 1])
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
    fn text_keys_are_sorted_and_none_starts_another() {
        assert!(TEXT_KEYS.windows(2).all(|w| w[0] < w[1]));
        for a in TEXT_KEYS {
            for b in TEXT_KEYS {
                assert!(a == b || !b.starts_with(a), "{a} starts {b}");
            }
        }
    }

    #[test]
    fn a_key_is_text_when_it_starts_with_any_text_prefix() {
        let slow = |key: &str| TEXT_KEYS.iter().any(|p| key.starts_with(p));
        let mut keys: Vec<String> = vec![
            "".into(),
            "a".into(),
            "zzz".into(),
            "gen_ai".into(),
            "gen_ai.request.model".into(),
            "gen_ai.promptx".into(),
            "gen_ai.prompt.0.content".into(),
            "gen_ai.tool.call".into(),
            "llm.prompts.0".into(),
            "llm.model_name".into(),
        ];
        for prefix in TEXT_KEYS {
            keys.push(prefix.to_owned());
            keys.push(format!("{prefix}.x"));
            keys.push(prefix[..prefix.len() - 1].to_owned());
            keys.push(format!("{}~", &prefix[..prefix.len() - 1]));
        }
        for key in &keys {
            assert_eq!(is_text_key(key), slow(key), "{key}");
        }
    }

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
