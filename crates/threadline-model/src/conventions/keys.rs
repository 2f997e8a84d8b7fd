//! The attribute names the normalizer reads, numbered: a span's attributes are put in
//! slots by name once (`Slots::of`), and every lookup after that is an index. Call
//! sites name keys with `k!("name")`, resolved when compiling (a name missing from
//! `KEYS` does not compile).

use std::sync::LazyLock;

use crate::{AttrValue, Attribute};

/// Every attribute name a lookup of `Sources` may ask for.
pub(super) const KEYS: &[&str] = &[
    "ab.group",
    "gray.tag",
    "gen_ai.request.model",
    "llm.request.model_name",
    "llm.model_name",
    "embedding.model_name",
    "gen_ai.response.model",
    "llm.response.model_name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "gen_ai.usage.total_tokens",
    "llm.token_count.total",
    "gen_ai.response.time_to_first_chunk",
    "gen_ai.server.time_to_first_token",
    "gen_ai.latency.time_to_first_token",
    "llm.prompt_template.id",
    "gen_ai.prompt.name",
    "prompt.id",
    "llm.prompt.version",
    "llm.prompt_template.version",
    "llm.lora.adapter_id",
    "llm.base_model",
    "llm.lora.base_model",
    "model.instance.id",
    "container.image",
    "gen_ai.tool.name",
    "tool.name",
    "gen_ai.tool.call.id",
    "tool.id",
    "tool_call.id",
    "gen_ai.operation.name",
    "openinference.span.kind",
    "gen_ai.provider.name",
    "gen_ai.system",
    "llm.provider",
    "llm.system",
    "gen_ai.response.finish_reasons",
    "llm.finish_reason",
    "gen_ai.output.messages",
    "llm.kvcache.hit_ratio",
    "gen_ai.usage.cached_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "llm.token_count.prompt_details.cache_read",
    "llm.rejection.reason",
    "error.type",
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "input.value",
    "api.route",
    "http.route",
    "user.id",
    "enduser.id",
    "gen_ai.user.id",
    "gen_ai.conversation.id",
    "session.id",
    "request.tag",
    "baggage",
    "w3c.baggage",
];

const KEY_COUNT: usize = KEYS.len();
// A key is a `u8` position.
const _: () = assert!(KEY_COUNT <= 256);

/// An attribute name of `KEYS`, by its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Key(u8);

impl Key {
    /// The key named `name`; a compile-time error in a `const` context (`k!`) when
    /// `KEYS` does not hold it.
    pub(super) const fn named(name: &str) -> Key {
        let mut i = 0;
        while i < KEY_COUNT {
            if const_eq(KEYS[i].as_bytes(), name.as_bytes()) {
                return Key(i as u8);
            }
            i += 1;
        }
        panic!("an attribute name missing from conventions::keys::KEYS")
    }

    pub(super) fn name(self) -> &'static str {
        KEYS[self.0 as usize]
    }
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `Key::named` at compile time.
macro_rules! k {
    ($name:literal) => {
        const { $crate::conventions::keys::Key::named($name) }
    };
}
pub(super) use k;

/// Name → position, for putting a span's attributes in their slots. The names are
/// ours, so a fixed hash is fine.
type Positions = std::collections::HashMap<&'static str, u8, foldhash::fast::FixedState>;

static POSITIONS: LazyLock<Positions> = LazyLock::new(|| {
    let mut map = Positions::with_hasher(foldhash::fast::FixedState::default());
    for (i, name) in KEYS.iter().enumerate() {
        map.insert(*name, i as u8);
    }
    map
});

/// A span's attributes of `KEYS`, by key (the last one wins when a name repeats, as
/// in a map built from them in order).
pub(super) struct Slots<'a>([Option<&'a AttrValue>; KEY_COUNT]);

impl<'a> Slots<'a> {
    pub(super) fn of(attributes: &'a [Attribute]) -> Self {
        let positions = &*POSITIONS;
        let mut slots = [None; KEY_COUNT];
        for a in attributes {
            if let Some(&at) = positions.get(a.key.as_str()) {
                slots[at as usize] = Some(&a.value);
            }
        }
        Self(slots)
    }

    pub(super) fn get(&self, key: Key) -> Option<&'a AttrValue> {
        self.0[key.0 as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_find_their_slot() {
        let mut seen = std::collections::HashSet::new();
        for &name in KEYS {
            assert!(seen.insert(name), "{name} twice");
            assert_eq!(Key::named(name).name(), name);
        }
        let attributes = [
            Attribute::new("gen_ai.request.model", AttrValue::String("a".into())),
            Attribute::new("not.ours", AttrValue::Int(1)),
            Attribute::new("gen_ai.request.model", AttrValue::String("b".into())),
        ];
        let slots = Slots::of(&attributes);
        assert_eq!(
            slots.get(k!("gen_ai.request.model")),
            Some(&AttrValue::String("b".into()))
        );
        assert_eq!(slots.get(k!("api.route")), None);
    }
}
