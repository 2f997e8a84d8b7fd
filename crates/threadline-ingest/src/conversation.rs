//! The conversation an LLM span carried — system, user, assistant and tool messages
//! with their tool calls — from whichever convention sent it, for display. Sources, the
//! first present wins for each side (input, output):
//!
//! 1. OpenTelemetry GenAI: `gen_ai.system_instructions`, `gen_ai.input.messages`,
//!    `gen_ai.output.messages` (parts: `text`, `tool_call`, `tool_call_response`);
//! 2. GenAI events on the span: `gen_ai.{system,user,assistant,tool}.message`,
//!    `gen_ai.choice` (also when sent as OTLP logs: `with_log_events`);
//! 3. OpenInference: `llm.input_messages.N.message.*`, `llm.output_messages.N.message.*`
//!    (with `tool_calls.M.tool_call.function.{name,arguments}`);
//! 4. deprecated GenAI / OpenLLMetry: `gen_ai.prompt.N.{role,content}`,
//!    `gen_ai.completion.N.{role,content}`, or plain `gen_ai.prompt` / `gen_ai.completion`;
//! 5. OpenInference's `input.value` / `output.value`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value as Json;
use threadline_model::{AttrValue, Attribute, LogRecord, SpanDetail, SpanEvent};

use threadline_model::conventions::{json_text, to_json};

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: Option<String>,
    pub name: String,
    /// The arguments as sent (usually a JSON text).
    pub arguments: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool` (or what the sender named).
    pub role: String,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    pub tool_call_id: Option<String>,
    /// True for what the model produced (output side).
    pub output: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Conversation {
    pub messages: Vec<Message>,
    /// Which convention carried it: `gen_ai`, `gen_ai_events`, `openinference`,
    /// `gen_ai_deprecated`, `openinference_values` (input side first, then output).
    pub sources: Vec<&'static str>,
}

/// The span's conversation (empty when it carried no message text).
pub fn conversation(detail: &SpanDetail) -> Conversation {
    let mut out = Conversation::default();
    let attr = |key: &str| {
        detail
            .attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
            .filter(|v| !matches!(v, AttrValue::Empty))
    };
    for output in [false, true] {
        let (messages, source) = side(detail, &attr, output);
        if !messages.is_empty() {
            out.sources.push(source);
            out.messages.extend(messages);
        }
    }
    out
}

/// The span's detail with the GenAI events it sent as OTLP logs folded in, for
/// `conversation`: a log named `gen_ai.*` becomes a span event (a map body's entries as
/// its attributes, any other body as `content`), in time order after the span's own;
/// message-list attributes a log carries (`gen_ai.input.messages`, …, as the
/// `gen_ai.client.inference.operation.details` event sends them) fill the ones the
/// span lacks.
pub fn with_log_events(detail: &SpanDetail, logs: &[LogRecord]) -> SpanDetail {
    let mut out = detail.clone();
    let mut genai: Vec<&LogRecord> = logs
        .iter()
        .filter(|l| l.detail.event_name.starts_with("gen_ai."))
        .collect();
    genai.sort_by_key(|l| l.time_unix_nano);
    for log in genai {
        let mut attributes = log.detail.attributes.clone();
        match &log.detail.body {
            AttrValue::KvList(entries) => attributes.extend(entries.iter().cloned()),
            AttrValue::Empty => {}
            other => attributes.push(Attribute::new("content", other.clone())),
        }
        for a in &log.detail.attributes {
            let whole_list = matches!(
                a.key.as_str(),
                "gen_ai.input.messages" | "gen_ai.output.messages" | "gen_ai.system_instructions"
            );
            if whole_list && detail.attr(&a.key).is_none() && out.attr(&a.key).is_none() {
                out.attributes.push(a.clone());
            }
        }
        out.events.push(SpanEvent {
            time_unix_nano: log.time_unix_nano,
            name: log.detail.event_name.clone(),
            attributes,
            dropped_attributes_count: 0,
        });
    }
    out
}

type Lookup<'a> = dyn Fn(&str) -> Option<&'a AttrValue> + 'a;

fn side<'a>(
    detail: &'a SpanDetail,
    attr: &Lookup<'a>,
    output: bool,
) -> (Vec<Message>, &'static str) {
    // 1. GenAI structured messages.
    let key = if output {
        "gen_ai.output.messages"
    } else {
        "gen_ai.input.messages"
    };
    let mut messages = Vec::new();
    if !output {
        if let Some(system) = attr("gen_ai.system_instructions") {
            let text = json_text(&to_json(system));
            if !text.is_empty() {
                messages.push(message("system", text, output));
            }
        }
    }
    if let Some(Json::Array(items)) = attr(key).map(to_json) {
        messages.extend(items.iter().map(|m| genai_message(m, output)));
    }
    if !messages.is_empty() {
        return (messages, "gen_ai");
    }
    // 2. GenAI events.
    let from_events: Vec<Message> = detail
        .events
        .iter()
        .filter_map(|e| event_message(e, output))
        .collect();
    if !from_events.is_empty() {
        return (from_events, "gen_ai_events");
    }
    // 3. OpenInference flattened messages.
    let prefix = if output {
        "llm.output_messages."
    } else {
        "llm.input_messages."
    };
    let flattened = indexed_messages(detail, prefix, output);
    if !flattened.is_empty() {
        return (flattened, "openinference");
    }
    // 4. Deprecated GenAI (OpenLLMetry's indexed prompt / completion, or plain text).
    let prefix = if output {
        "gen_ai.completion."
    } else {
        "gen_ai.prompt."
    };
    let deprecated = indexed_messages(detail, prefix, output);
    if !deprecated.is_empty() {
        return (deprecated, "gen_ai_deprecated");
    }
    let plain = if output {
        "gen_ai.completion"
    } else {
        "gen_ai.prompt"
    };
    if let Some(text) = attr(plain).map(|v| json_text(&to_json(v))) {
        if !text.is_empty() {
            let role = if output { "assistant" } else { "user" };
            return (vec![message(role, text, output)], "gen_ai_deprecated");
        }
    }
    // 5. OpenInference input / output values.
    let value = if output {
        "output.value"
    } else {
        "input.value"
    };
    if let Some(text) = attr(value).map(AttrValue::to_display_string) {
        if !text.is_empty() {
            let role = if output { "assistant" } else { "user" };
            return (vec![message(role, text, output)], "openinference_values");
        }
    }
    (Vec::new(), "")
}

fn message(role: &str, content: String, output: bool) -> Message {
    Message {
        role: role.to_owned(),
        content,
        output,
        ..Message::default()
    }
}

fn json_string(v: Option<&Json>) -> Option<String> {
    match v? {
        Json::String(s) => Some(s.clone()),
        Json::Null => None,
        other => Some(other.to_string()),
    }
}

/// A GenAI `{role, parts: [...]}` message (or a `{role, content}` one).
fn genai_message(m: &Json, output: bool) -> Message {
    let role =
        m.get("role")
            .and_then(Json::as_str)
            .unwrap_or(if output { "assistant" } else { "user" });
    let mut msg = message(role, String::new(), output);
    let parts = m.get("parts").or_else(|| m.get("content"));
    let mut texts = Vec::new();
    match parts {
        Some(Json::Array(parts)) => {
            for part in parts {
                match part.get("type").and_then(Json::as_str) {
                    Some("tool_call") => msg.tool_calls.push(ToolCall {
                        id: json_string(part.get("id")),
                        name: json_string(part.get("name")).unwrap_or_default(),
                        arguments: json_string(part.get("arguments")).unwrap_or_default(),
                    }),
                    Some("tool_call_response") => {
                        msg.tool_call_id = json_string(part.get("id"));
                        texts.push(json_string(part.get("response")).unwrap_or_default());
                    }
                    _ => texts.push(json_text(part)),
                }
            }
        }
        Some(other) => texts.push(json_text(other)),
        None => {}
    }
    msg.content = texts
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    msg
}

/// A message from a GenAI event of the side asked for.
fn event_message(e: &threadline_model::SpanEvent, output: bool) -> Option<Message> {
    let role = match (e.name.as_str(), output) {
        ("gen_ai.system.message", false) => "system",
        ("gen_ai.user.message", false) => "user",
        ("gen_ai.assistant.message", false) => "assistant",
        ("gen_ai.tool.message", false) => "tool",
        ("gen_ai.choice", true) => "assistant",
        _ => return None,
    };
    let get = |key: &str| {
        e.attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| to_json(&a.value))
    };
    // `gen_ai.choice` nests its message; the others carry content at the top.
    let body = get("message").unwrap_or(Json::Null);
    let field = |key: &str| get(key).or_else(|| body.get(key).cloned());
    let mut msg = message(role, String::new(), output);
    msg.content = field("content").map(|c| json_text(&c)).unwrap_or_default();
    msg.tool_call_id = json_string(field("id").as_ref());
    if let Some(Json::Array(calls)) = field("tool_calls") {
        msg.tool_calls = calls
            .iter()
            .map(|c| ToolCall {
                id: json_string(c.get("id")),
                name: json_string(c.get("function").and_then(|f| f.get("name")))
                    .unwrap_or_default(),
                arguments: json_string(c.get("function").and_then(|f| f.get("arguments")))
                    .unwrap_or_default(),
            })
            .collect();
    }
    Some(msg)
}

/// Messages flattened as `PREFIX{i}.…` attributes: OpenInference's
/// `message.role` / `message.content` / `message.tool_calls.{j}.tool_call.*`, or
/// OpenLLMetry's `role` / `content`.
fn indexed_messages(detail: &SpanDetail, prefix: &str, output: bool) -> Vec<Message> {
    let mut by_index: BTreeMap<u32, (Message, BTreeMap<u32, ToolCall>)> = BTreeMap::new();
    for a in &detail.attributes {
        let Some(rest) = a.key.strip_prefix(prefix) else {
            continue;
        };
        let Some((idx, field)) = rest.split_once('.') else {
            continue;
        };
        let Ok(idx) = idx.parse::<u32>() else {
            continue;
        };
        let (msg, calls) = by_index
            .entry(idx)
            .or_insert_with(|| (message("", String::new(), output), BTreeMap::new()));
        let text = a.value.to_display_string();
        let field = field.strip_prefix("message.").unwrap_or(field);
        match field {
            "role" => msg.role = text,
            "content" => msg.content = text,
            "tool_call_id" => msg.tool_call_id = Some(text),
            other => {
                if let Some(call) = other.strip_prefix("tool_calls.") {
                    let Some((j, what)) = call.split_once('.') else {
                        continue;
                    };
                    let Ok(j) = j.parse::<u32>() else {
                        continue;
                    };
                    let c = calls.entry(j).or_default();
                    match what.strip_prefix("tool_call.").unwrap_or(what) {
                        "id" => c.id = Some(text),
                        "function.name" | "name" => c.name = text,
                        "function.arguments" | "arguments" => c.arguments = text,
                        _ => {}
                    }
                }
            }
        }
    }
    by_index
        .into_values()
        .filter(|(m, calls)| !m.content.is_empty() || !calls.is_empty())
        .map(|(mut m, calls)| {
            if m.role.is_empty() {
                m.role = if output { "assistant" } else { "user" }.to_owned();
            }
            m.tool_calls = calls.into_values().collect();
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::LogDetail;

    fn log(at: u64, event: &str, body: AttrValue) -> LogRecord {
        LogRecord {
            time_unix_nano: at,
            trace_id: None,
            span_id: None,
            service: "chat".into(),
            detail: LogDetail {
                event_name: event.into(),
                body,
                ..LogDetail::default()
            },
            origin: Default::default(),
        }
    }

    #[test]
    fn genai_events_sent_as_logs_join_the_conversation_in_time_order() {
        let kv = |k: &str, v: &str| Attribute::new(k, AttrValue::String(v.into()));
        let logs = [
            log(
                3,
                "gen_ai.choice",
                AttrValue::KvList(vec![Attribute::new(
                    "message",
                    AttrValue::KvList(vec![
                        kv("role", "assistant"),
                        kv("content", "Twice, sorry."),
                    ]),
                )]),
            ),
            log(
                1,
                "gen_ai.system.message",
                AttrValue::KvList(vec![kv("content", "Be brief.")]),
            ),
            log(
                2,
                "gen_ai.user.message",
                AttrValue::String("Why was I charged twice?".into()),
            ),
            log(2, "app.audit", AttrValue::String("not a message".into())),
        ];
        let folded = with_log_events(&SpanDetail::default(), &logs);
        let c = conversation(&folded);
        assert_eq!(
            roles(&c),
            [
                ("system", "Be brief.", false),
                ("user", "Why was I charged twice?", false),
                ("assistant", "Twice, sorry.", true)
            ]
        );
        assert_eq!(c.sources, ["gen_ai_events", "gen_ai_events"]);
    }

    fn detail(attrs: &[(&str, &str)]) -> SpanDetail {
        SpanDetail {
            attributes: attrs
                .iter()
                .map(|(k, v)| Attribute::new(*k, AttrValue::String((*v).into())))
                .collect(),
            ..SpanDetail::default()
        }
    }

    fn roles(c: &Conversation) -> Vec<(&str, &str, bool)> {
        c.messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str(), m.output))
            .collect()
    }

    #[test]
    fn genai_structured_messages_with_tool_calls() {
        let c = conversation(&detail(&[
            (
                "gen_ai.system_instructions",
                r#"[{"type":"text","content":"Be brief."}]"#,
            ),
            (
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"Weather in Paris?"}]},
                {"role":"tool","parts":[{"type":"tool_call_response","id":"c1","response":"18 C"}]}]"#,
            ),
            (
                "gen_ai.output.messages",
                r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"c2","name":"get_weather","arguments":{"city":"Paris"}}],"finish_reason":"tool_call"}]"#,
            ),
        ]));
        assert_eq!(
            roles(&c),
            [
                ("system", "Be brief.", false),
                ("user", "Weather in Paris?", false),
                ("tool", "18 C", false),
                ("assistant", "", true)
            ]
        );
        assert_eq!(c.messages[2].tool_call_id.as_deref(), Some("c1"));
        let call = &c.messages[3].tool_calls[0];
        assert_eq!(
            (
                call.id.as_deref(),
                call.name.as_str(),
                call.arguments.as_str()
            ),
            (Some("c2"), "get_weather", r#"{"city":"Paris"}"#)
        );
        assert_eq!(c.sources, ["gen_ai", "gen_ai"]);
    }

    #[test]
    fn genai_events_openinference_and_deprecated_attributes() {
        let mut d = SpanDetail::default();
        let ev = |name: &str, attrs: Vec<Attribute>| SpanEvent {
            time_unix_nano: 0,
            name: name.into(),
            attributes: attrs,
            dropped_attributes_count: 0,
        };
        d.events = vec![
            ev(
                "gen_ai.user.message",
                vec![Attribute::new("content", AttrValue::String("hi".into()))],
            ),
            ev(
                "gen_ai.choice",
                vec![Attribute::new(
                    "message",
                    AttrValue::String(r#"{"content":"hello","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}]}"#.into()),
                )],
            ),
        ];
        let c = conversation(&d);
        assert_eq!(
            roles(&c),
            [("user", "hi", false), ("assistant", "hello", true)]
        );
        assert_eq!(c.messages[1].tool_calls[0].name, "f");

        let c = conversation(&detail(&[
            ("llm.input_messages.1.message.role", "user"),
            ("llm.input_messages.1.message.content", "second"),
            ("llm.input_messages.0.message.role", "system"),
            ("llm.input_messages.0.message.content", "first"),
            ("llm.output_messages.0.message.role", "assistant"),
            (
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                "lookup",
            ),
            (
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                "{\"id\":1}",
            ),
        ]));
        assert_eq!(
            roles(&c),
            [
                ("system", "first", false),
                ("user", "second", false),
                ("assistant", "", true)
            ]
        );
        assert_eq!(c.messages[2].tool_calls[0].name, "lookup");
        assert_eq!(c.sources, ["openinference", "openinference"]);

        let c = conversation(&detail(&[
            ("gen_ai.prompt.0.role", "user"),
            ("gen_ai.prompt.0.content", "q"),
            ("gen_ai.completion.0.role", "assistant"),
            ("gen_ai.completion.0.content", "a"),
        ]));
        assert_eq!(roles(&c), [("user", "q", false), ("assistant", "a", true)]);
        let c = conversation(&detail(&[
            ("input.value", "raw in"),
            ("output.value", "raw out"),
        ]));
        assert_eq!(
            roles(&c),
            [("user", "raw in", false), ("assistant", "raw out", true)]
        );
        assert!(conversation(&SpanDetail::default()).messages.is_empty());
    }
}
