//! Rows of `span_search` (field order is column order, `schema`): what a search filters
//! a span on, made from the span — its attributes' `key=value` pairs less those a
//! column repeats (`FOLDS`), and its texts.

use serde::{Deserialize, Serialize};
use threadline_model::{
    for_each_string, is_text_key, AttrValue, LlmView, SpanId, SpanKind, SpanRecord, StatusCode,
};

/// A row of `span_search`: what a search filters a span on.
#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct SearchRow {
    pub(crate) tenant: String,
    pub(crate) start_ns: u64,
    pub(crate) trace_id: [u8; 16],
    /// `span_key`: what tells a trace's spans that start at the same nanosecond
    /// apart, in half the bytes of the span id (nothing reads the id from here).
    pub(crate) span_key: u32,
    pub(crate) entry: u8,
    pub(crate) service: String,
    pub(crate) name: String,
    pub(crate) duration_ns: u64,
    pub(crate) error: u8,
    pub(crate) model: String,
    pub(crate) response_model: String,
    pub(crate) route: String,
    pub(crate) adapter: String,
    pub(crate) ab_group: String,
    pub(crate) instance: String,
    pub(crate) image: String,
    pub(crate) prompt_version: String,
    pub(crate) session_id: String,
    pub(crate) user_id: String,
    /// Bit `i` set: the pair of `FOLDS[i]` is left out of `attributes`, its column
    /// holding the same value.
    pub(crate) folded: u16,
    /// `SearchAttributes`: with the name, the texts are what a free-text search
    /// screens a span on.
    pub(crate) attributes: Vec<String>,
    pub(crate) texts: Vec<String>,
    pub(crate) version: u64,
}

/// What `span_search` holds of a span's attributes and texts.
pub(crate) struct SearchAttributes {
    /// The `key=value` strings a span's `attr.` filters match, but for text keys: its
    /// own attributes, then the resource's it does not shadow (as the embedded store's
    /// matcher looks them up).
    pub(crate) attributes: Vec<String>,
    /// The same for keys that hold text (`is_text_key`: prompts, replies, messages),
    /// apart so that a filter on other keys does not read them; then, as `=text` (no
    /// key, so no filter matches them), the rest of the span's searchable text: status
    /// message, event texts, the texts of a repeated key after its first.
    pub(crate) texts: Vec<String>,
}

impl SearchAttributes {
    /// `folds(key, value)` says whether a non-text pair is left out (a column holds it).
    pub(crate) fn of(span: &SpanRecord, folds: &mut dyn FnMut(&str, &str) -> bool) -> Self {
        let own = &span.detail.attributes;
        let mut out = Self {
            attributes: Vec::with_capacity(own.len() + span.origin.resource_attributes.len()),
            texts: Vec::new(),
        };
        let mut keyless = Vec::new();
        let mut extra = |text: &str| keyless.push(format!("={text}"));
        // The first of a repeated key is the one `SpanDetail::attr` finds.
        let mut seen: Vec<&str> = Vec::with_capacity(own.len());
        for a in own {
            if !seen.contains(&a.key.as_str()) {
                seen.push(&a.key);
                out.push(&a.key, &a.value, folds);
            } else if is_text_key(&a.key) {
                for_each_string(&a.value, &mut extra);
            }
        }
        span.detail.for_each_text_beside_attributes(&mut extra);
        for a in &span.origin.resource_attributes {
            if !seen.contains(&a.key.as_str()) {
                seen.push(&a.key);
                out.push(&a.key, &a.value, folds);
            }
        }
        out.texts.extend(keyless);
        out
    }

    /// `key=value` into `texts` for a text key, else into `attributes` unless `folds`.
    fn push(&mut self, key: &str, value: &AttrValue, folds: &mut dyn FnMut(&str, &str) -> bool) {
        let mut pair = String::with_capacity(key.len() + 16);
        pair.push_str(key);
        pair.push('=');
        value.write_display(&mut pair);
        if is_text_key(key) {
            self.texts.push(pair);
        } else if !folds(key, &pair[key.len() + 1..]) {
            self.attributes.push(pair);
        }
    }
}

impl SearchRow {
    pub(crate) fn of(tenant: &str, span: &SpanRecord, version: u64) -> Self {
        let llm = span.llm.as_ref();
        let text =
            |f: fn(&LlmView) -> Option<&String>| llm.and_then(f).cloned().unwrap_or_default();
        let model = llm.and_then(|l| l.model()).unwrap_or_default().to_owned();
        let response_model = llm
            .and_then(|l| l.response_model.as_ref())
            .filter(|r| **r != model)
            .cloned()
            .unwrap_or_default();
        let mut row = Self {
            tenant: tenant.to_owned(),
            start_ns: span.start_time_unix_nano,
            trace_id: span.trace_id.0,
            span_key: span_key(span.span_id),
            entry: u8::from(
                span.parent_span_id.is_none()
                    || matches!(span.kind, SpanKind::Server | SpanKind::Consumer),
            ),
            service: span.service.clone(),
            name: span.name.clone(),
            duration_ns: span.duration_nanos(),
            error: u8::from(span.detail.status.code == StatusCode::Error),
            model,
            response_model,
            route: text(|l| l.route.as_ref()),
            adapter: text(|l| l.adapter_id.as_ref()),
            ab_group: text(|l| l.ab_group.as_ref()),
            instance: text(|l| l.instance_id.as_ref()),
            image: text(|l| l.image.as_ref()),
            prompt_version: text(|l| l.prompt_template_version.as_ref()),
            session_id: text(|l| l.session_id.as_ref()),
            user_id: text(|l| l.user_id.as_ref()),
            folded: 0,
            attributes: Vec::new(),
            texts: Vec::new(),
            version,
        };
        let searched = SearchAttributes::of(span, &mut |key, value| row.fold(key, value));
        row.attributes = searched.attributes;
        row.texts = searched.texts;
        row
    }

    /// Whether a column holds the attribute `key`'s `value` (`FOLDS`): its bit is then
    /// set and the pair left out. (A span's keys are distinct here: the first of a
    /// repeated key is its pair.)
    fn fold(&mut self, key: &str, value: &str) -> bool {
        let Some(bit) = FOLDS
            .iter()
            .position(|f| f.key == key && (f.value)(self) == value)
        else {
            return false;
        };
        self.folded |= 1 << bit;
        true
    }
}

/// The first four bytes of a span id's mix: a key that tells a trace's spans apart when
/// they start at the same nanosecond (two ids colliding there as well: one in 2³²),
/// sequential ids (1, 2, 3 …) included.
fn span_key(id: SpanId) -> u32 {
    (u64::from_be_bytes(id.0).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

/// An attribute whose `key=value` pair a `span_search` row leaves out when `column`
/// holds the same value (`SearchRow::folded`): ids and names a span's columns already
/// hold take a quarter of the attribute array's bytes. An `attr.` filter on `key`
/// reads the column where the bit is set.
pub(crate) struct Fold {
    pub(crate) key: &'static str,
    pub(crate) column: &'static str,
    value: fn(&SearchRow) -> &str,
}

/// At most 16 (`SearchRow::folded`).
pub(crate) const FOLDS: [Fold; 12] = [
    Fold {
        key: "service.name",
        column: "service",
        value: |r| &r.service,
    },
    Fold {
        key: "session.id",
        column: "session_id",
        value: |r| &r.session_id,
    },
    Fold {
        key: "user.id",
        column: "user_id",
        value: |r| &r.user_id,
    },
    Fold {
        key: "http.route",
        column: "route",
        value: |r| &r.route,
    },
    Fold {
        key: "api.route",
        column: "route",
        value: |r| &r.route,
    },
    Fold {
        key: "gen_ai.request.model",
        column: "model",
        value: |r| &r.model,
    },
    Fold {
        key: "gen_ai.response.model",
        column: "model",
        value: |r| &r.model,
    },
    Fold {
        key: "llm.lora.adapter_id",
        column: "adapter",
        value: |r| &r.adapter,
    },
    Fold {
        key: "model.instance.id",
        column: "instance",
        value: |r| &r.instance,
    },
    Fold {
        key: "llm.prompt.version",
        column: "prompt_version",
        value: |r| &r.prompt_version,
    },
    Fold {
        key: "ab.group",
        column: "ab_group",
        value: |r| &r.ab_group,
    },
    Fold {
        key: "container.image",
        column: "image",
        value: |r| &r.image,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids a sender counts up (in either half) — the spans of one trace that may share
    /// a start — get keys of their own; random ids collide as any 32 bits do.
    #[test]
    fn span_keys_tell_counted_ids_apart() {
        for shift in [0, 32] {
            let keys: std::collections::HashSet<u32> = (1..=100_000u64)
                .map(|n| span_key(SpanId((n << shift).to_be_bytes())))
                .collect();
            assert_eq!(keys.len(), 100_000, "ids counted at bit {shift}");
        }
    }
}
