//! The prompt hash: which rendered prompt a call sent, from whichever convention
//! carried its messages. Message lists that arrive as JSON text (GenAI's
//! `gen_ai.input.messages`, the common case) are read into `JsonRef`, which borrows
//! the attribute's text instead of building a `serde_json::Value` of owned maps and
//! strings per call.

use std::borrow::Cow;

use crate::AttrValue;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::keys::k;
use super::{json_text, to_json, Sources};

/// SHA-256 hex of `system prompt ␟ prompt ␟ template version` (U+001F separators), so
/// the same rendered prompt under the same template version always hashes the same.
pub(super) fn prompt_hash(src: &Sources<'_>, template_version: Option<&str>) -> Option<String> {
    let (system, prompt) = prompt_texts(src);
    if system.is_empty() && prompt.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    hasher.update(system.as_bytes());
    hasher.update([0x1f]);
    hasher.update(prompt.as_bytes());
    hasher.update([0x1f]);
    hasher.update(template_version.unwrap_or("").as_bytes());
    Some(hex::encode(hasher.finalize()))
}

/// Appends messages to the system prompt (role `system`) or the prompt (others, each
/// as `role: text`), one per line.
#[derive(Default)]
struct Texts {
    system: String,
    prompt: String,
}

impl Texts {
    fn push(&mut self, role: &str, text: &str) {
        let target = if role == "system" {
            &mut self.system
        } else {
            &mut self.prompt
        };
        if !target.is_empty() {
            target.push('\n');
        }
        if role != "system" {
            target.push_str(role);
            target.push_str(": ");
        }
        target.push_str(text);
    }
}

/// (system prompt, prompt) text from whichever convention carried the messages.
fn prompt_texts(src: &Sources<'_>) -> (String, String) {
    let mut texts = Texts {
        system: src
            .span_attr(k!("gen_ai.system_instructions"))
            .map(|v| json_text(&to_json(v)))
            .unwrap_or_default(),
        prompt: String::new(),
    };
    match src.span_attr(k!("gen_ai.input.messages")) {
        Some(AttrValue::String(s)) => {
            if let Some(JsonRef::Array(messages)) = parse(s) {
                let mut text = String::new();
                for m in &messages {
                    text.clear();
                    m.get("parts")
                        .or_else(|| m.get("content"))
                        .map(|t| t.write_text(&mut text));
                    texts.push(
                        m.get("role").and_then(JsonRef::as_str).unwrap_or("user"),
                        &text,
                    );
                }
                return (texts.system, texts.prompt);
            }
        }
        Some(structured) => {
            if let Json::Array(messages) = to_json(structured) {
                for m in &messages {
                    let text = json_text(
                        m.get("parts")
                            .or_else(|| m.get("content"))
                            .unwrap_or(&Json::Null),
                    );
                    texts.push(
                        m.get("role").and_then(Json::as_str).unwrap_or("user"),
                        &text,
                    );
                }
                return (texts.system, texts.prompt);
            }
        }
        None => {}
    }
    if let Some(p) = src.span_str(&[k!("gen_ai.prompt")]) {
        texts.prompt = p;
        return (texts.system, texts.prompt);
    }
    let mut from_events = false;
    for e in &src.detail.events {
        let role = match e.name.as_str() {
            "gen_ai.system.message" => "system",
            "gen_ai.user.message" => "user",
            "gen_ai.assistant.message" => "assistant",
            "gen_ai.tool.message" => "tool",
            _ => continue,
        };
        let Some(content) = e.attributes.iter().find(|a| a.key == "content") else {
            continue;
        };
        texts.push(role, &json_text(&to_json(&content.value)));
        from_events = true;
    }
    if !from_events {
        let flattened = openinference_messages(src);
        if !flattened.is_empty() {
            for (role, content) in &flattened {
                texts.push(role, content);
            }
        } else if let Some(input) = src.span_str(&[k!("input.value")]) {
            texts.prompt = input;
        }
    }
    (texts.system, texts.prompt)
}

/// Rebuilds `llm.input_messages.{i}.message.{role,content}` (indices may be sparse).
fn openinference_messages(src: &Sources<'_>) -> Vec<(String, String)> {
    let mut by_index: std::collections::BTreeMap<u32, (String, String)> = Default::default();
    // In order, so that a repeated name's last value counts.
    for attribute in &src.detail.attributes {
        let (key, value) = (&attribute.key, &attribute.value);
        let Some(rest) = key.strip_prefix("llm.input_messages.") else {
            continue;
        };
        let Some((idx, field)) = rest.split_once('.') else {
            continue;
        };
        let Ok(idx) = idx.parse::<u32>() else {
            continue;
        };
        let entry = by_index.entry(idx).or_default();
        match field {
            "message.role" => entry.0 = value.to_display_string(),
            "message.content" => entry.1 = value.to_display_string(),
            _ => {}
        }
    }
    by_index
        .into_values()
        .filter(|(_, content)| !content.is_empty())
        .map(|(role, content)| {
            (
                if role.is_empty() {
                    "user".to_owned()
                } else {
                    role
                },
                content,
            )
        })
        .collect()
}

/// JSON text held in a string attribute, as `to_json` would parse it: only text that
/// starts with `[` or `{` (after white space), and all of it.
pub(super) fn parse(text: &str) -> Option<JsonRef<'_>> {
    let t = text.trim_start();
    if !(t.starts_with('[') || t.starts_with('{')) {
        return None;
    }
    serde_json::from_str(t).ok()
}

/// A JSON value whose strings borrow the text they were read from where it holds
/// them unescaped. Numbers, booleans and null are only told apart from the rest.
#[derive(Debug, PartialEq)]
pub(super) enum JsonRef<'a> {
    String(Cow<'a, str>),
    Array(Vec<JsonRef<'a>>),
    /// Members in the order read; a repeated name: the last one counts (as in
    /// `serde_json::Map`).
    Object(Vec<(Cow<'a, str>, JsonRef<'a>)>),
    Other,
}

impl<'a> JsonRef<'a> {
    pub(super) fn get(&self, name: &str) -> Option<&JsonRef<'a>> {
        match self {
            JsonRef::Object(members) => members
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            JsonRef::String(s) => Some(s),
            _ => None,
        }
    }

    /// Appends what `json_text` returns for the same value; whether it appended any.
    fn write_text(&self, out: &mut String) -> bool {
        match self {
            JsonRef::String(s) => {
                out.push_str(s);
                !s.is_empty()
            }
            JsonRef::Array(parts) => {
                let mut any = false;
                for part in parts {
                    let mark = out.len();
                    if any {
                        out.push('\n');
                    }
                    if part.write_text(out) {
                        any = true;
                    } else {
                        out.truncate(mark);
                    }
                }
                any
            }
            JsonRef::Object(_) => match self.get("type").and_then(JsonRef::as_str) {
                Some("text") | None => self.get("content").is_some_and(|c| c.write_text(out)),
                Some(_) => false,
            },
            JsonRef::Other => false,
        }
    }
}

impl<'de> Deserialize<'de> for JsonRef<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonRefVisitor)
    }
}

struct JsonRefVisitor;

impl<'de> Visitor<'de> for JsonRefVisitor {
    type Value = JsonRef<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(JsonRef::String(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(JsonRef::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(JsonRef::String(Cow::Owned(v)))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(JsonRef::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(JsonRef::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(JsonRef::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(JsonRef::Other)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(JsonRef::Other)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(JsonRef::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(JsonRef::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(JsonRef::String(name)) = map.next_key::<JsonRef<'de>>()? {
            members.push((name, map.next_value()?));
        }
        Ok(JsonRef::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed reading gives `json_text`'s text for every shape of message.
    #[test]
    fn borrowed_text_equals_the_value_text() {
        let cases = [
            r#"[{"role":"system","parts":[{"type":"text","content":"Be brief."}]},
                {"role":"user","parts":[{"type":"text","content":"Hi \"there\"\n"},
                  {"type":"image","content":"x"},{"type":"text","content":""},
                  {"content":["a",["b",""],{"type":"text","content":"c"}]}]},
                {"role":"assistant","content":"plain"},
                {"content":{"type":7,"content":"typed by number"}},
                {"role":null,"parts":null,"content":"parts null wins"},
                {"role":"user","content":"first","content":"last"},
                {"role":"tool","parts":[1,true,null,{"type":"text"}]},
                "not a message", 3]"#,
            r#"[]"#,
            r#"[{"role":"user","content":"caf\u00e9 \ud83d\ude00"}]"#,
        ];
        for case in cases {
            let value: Json = serde_json::from_str(case).unwrap();
            let borrowed = parse(case).unwrap();
            let (Json::Array(values), JsonRef::Array(refs)) = (&value, &borrowed) else {
                panic!("{case}");
            };
            assert_eq!(values.len(), refs.len());
            for (v, r) in values.iter().zip(refs) {
                let text = |t: Option<&Json>| json_text(t.unwrap_or(&Json::Null));
                let expected = text(v.get("parts").or_else(|| v.get("content")));
                let mut got = String::new();
                r.get("parts")
                    .or_else(|| r.get("content"))
                    .map(|t| t.write_text(&mut got));
                assert_eq!(got, expected, "{v}");
                assert_eq!(
                    r.get("role").and_then(JsonRef::as_str),
                    v.get("role").and_then(Json::as_str)
                );
            }
        }
    }

    #[test]
    fn only_whole_json_documents_parse() {
        assert!(parse("  [1]").is_some());
        assert!(parse("[1] trailing").is_none());
        assert!(parse("plain text").is_none());
        assert!(parse("\"a json string\"").is_none());
    }
}
