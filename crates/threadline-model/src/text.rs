//! The text a person searches a span for: its name, its status message, and what was
//! said — prompts, completions, messages, tool arguments and results, retrieved
//! documents, exception messages — in whichever convention carried it. The rule is
//! the attribute's key, on the span or on its events; GenAI and exception events
//! give all their string values. Ids, enums and numbers are left to the filters.

use crate::{AttrValue, Attribute, SpanDetail};

/// Key prefixes (or whole keys) whose string values are searchable text: sorted, and
/// none a prefix of another (a test holds both), so that the candidates for a key are
/// a short run of the list (`CANDIDATES`).
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

/// What most keys share before the byte that tells the text keys apart.
const GEN_AI: &[u8] = b"gen_ai.";

/// The run of `TEXT_KEYS` a key can start with, by its first byte — and, for keys
/// under `gen_ai.` (half the list), by the byte after it: an empty run for most keys,
/// one or two prefixes for the rest. Ingest asks this of every attribute of every span
/// (tens of keys per span); a binary search cost five string comparisons each.
struct Candidates {
    by_first: [(u8, u8); 256],
    by_gen_ai_next: [(u8, u8); 256],
}

const fn starts_with(s: &[u8], prefix: &[u8]) -> bool {
    if s.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if s[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Widens `ranges[byte]` to take index `i` of the sorted list.
const fn take(ranges: &mut [(u8, u8); 256], byte: u8, i: usize) {
    let (lo, hi) = ranges[byte as usize];
    ranges[byte as usize] = if lo == hi {
        (i as u8, i as u8 + 1)
    } else {
        (lo, hi + 1)
    };
}

const CANDIDATES: Candidates = {
    let mut c = Candidates {
        by_first: [(0, 0); 256],
        by_gen_ai_next: [(0, 0); 256],
    };
    let mut i = 0;
    while i < TEXT_KEYS.len() {
        let key = TEXT_KEYS[i].as_bytes();
        take(&mut c.by_first, key[0], i);
        if starts_with(key, GEN_AI) && key.len() > GEN_AI.len() {
            take(&mut c.by_gen_ai_next, key[GEN_AI.len()], i);
        }
        i += 1;
    }
    c
};

/// Whether a string value under `key` is searchable text.
pub fn is_text_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    let Some(&first) = bytes.first() else {
        return false;
    };
    let (lo, hi) = if bytes.len() > GEN_AI.len() && bytes.starts_with(GEN_AI) {
        CANDIDATES.by_gen_ai_next[bytes[GEN_AI.len()] as usize]
    } else {
        CANDIDATES.by_first[first as usize]
    };
    TEXT_KEYS[lo as usize..hi as usize]
        .iter()
        .any(|prefix| key.starts_with(prefix))
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
        self.status_text(&mut f);
        text_attributes(&self.attributes, false, &mut f);
        self.event_texts(&mut f);
    }

    /// The texts `for_each_text` gives that are not the span's own attributes: its
    /// status message and its events' texts.
    pub fn for_each_text_beside_attributes<'a>(&'a self, mut f: impl FnMut(&'a str)) {
        self.status_text(&mut f);
        self.event_texts(&mut f);
    }

    fn status_text<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        if !self.status.message.is_empty() {
            f(&self.status.message);
        }
    }

    fn event_texts<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        for event in &self.events {
            text_attributes(&event.attributes, is_text_event(&event.name), f);
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
