//! Terminal renderings of API answers: the trace tree and the search table.

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn ms(v: &Value, key: &str) -> String {
    format_ms(v.get(key).and_then(Value::as_f64).unwrap_or(0.0))
}

fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else {
        format!("{ms:.1}ms")
    }
}

fn time(v: &Value, key: &str) -> String {
    let nanos: u64 = s(v, key).parse().unwrap_or(0);
    let t = UNIX_EPOCH + Duration::from_nanos(nanos);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Siblings sharing a service and name are folded into one line from this many on (as
/// the UI's waterfall folds them).
const FOLD_MIN: usize = 10;

/// The trace as an indented tree; big groups of like siblings folded into one line
/// each unless `expand`.
pub(crate) fn trace_tree(trace: &Value, expand: bool) -> String {
    let mut out = String::new();
    let services: Vec<&str> = trace
        .get("services")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "trace {}  {} spans  {}  started {}  services: {}",
        s(trace, "trace_id"),
        trace.get("span_count").and_then(Value::as_u64).unwrap_or(0),
        ms(trace, "duration_ms"),
        time(trace, "start_time_unix_nano"),
        services.join(", ")
    );
    let roots = trace
        .get("roots")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    siblings(&mut out, &roots, "", expand);
    out
}

/// What a sibling list prints as: a span, or a folded group of like spans.
enum Item<'a> {
    Span(&'a Value),
    Group(Vec<&'a Value>),
}

fn siblings(out: &mut String, spans: &[Value], prefix: &str, expand: bool) {
    let key = |v: &Value| (s(v, "service").to_owned(), s(v, "name").to_owned());
    let mut counts: std::collections::HashMap<(String, String), usize> = Default::default();
    for span in spans {
        *counts.entry(key(span)).or_default() += 1;
    }
    let mut items: Vec<Item<'_>> = Vec::new();
    let mut group_at: std::collections::HashMap<(String, String), usize> = Default::default();
    for span in spans {
        let k = key(span);
        if expand || counts[&k] < FOLD_MIN {
            items.push(Item::Span(span));
            continue;
        }
        match group_at.get(&k) {
            Some(&at) => {
                if let Item::Group(members) = &mut items[at] {
                    members.push(span);
                }
            }
            None => {
                group_at.insert(k, items.len());
                items.push(Item::Group(vec![span]));
            }
        }
    }
    let n = items.len();
    for (i, item) in items.iter().enumerate() {
        let last = i + 1 == n;
        match item {
            Item::Span(span) => node(out, span, prefix, last, expand),
            Item::Group(members) => group(out, members, prefix, last),
        }
    }
}

/// A folded group: how many, their total and slowest time, errors.
fn group(out: &mut String, members: &[&Value], prefix: &str, last: bool) {
    let branch = if last { "└─ " } else { "├─ " };
    let durations: Vec<f64> = members
        .iter()
        .map(|m| m.get("duration_ms").and_then(Value::as_f64).unwrap_or(0.0))
        .collect();
    let errors = members
        .iter()
        .filter(|m| m.get("status").map(|st| s(st, "code")) == Some("error"))
        .count();
    let descendants: usize = members.iter().map(|m| count_below(m)).sum();
    let _ = writeln!(
        out,
        "{prefix}{branch}{} × {} {}  total {}, slowest {}{}{}  (folded; --expand shows each)",
        members.len(),
        s(members[0], "service"),
        s(members[0], "name"),
        format_ms(durations.iter().sum()),
        format_ms(durations.iter().copied().fold(0.0, f64::max)),
        if errors > 0 {
            format!(", {errors} ✗ ERROR")
        } else {
            String::new()
        },
        if descendants > 0 {
            format!(", {descendants} spans below")
        } else {
            String::new()
        },
    );
}

fn count_below(span: &Value) -> usize {
    span.get("children")
        .and_then(Value::as_array)
        .map_or(0, |c| c.len() + c.iter().map(count_below).sum::<usize>())
}

fn node(out: &mut String, span: &Value, prefix: &str, last: bool, expand: bool) {
    let branch = if last { "└─ " } else { "├─ " };
    let mut line = format!(
        "{prefix}{branch}{} {}  {} (self {})",
        s(span, "service"),
        s(span, "name"),
        ms(span, "duration_ms"),
        ms(span, "self_time_ms")
    );
    if let Some(llm) = span.get("llm") {
        let model = llm
            .get("response_model")
            .and_then(Value::as_str)
            .or_else(|| llm.get("request_model").and_then(Value::as_str));
        if let Some(m) = model {
            let _ = write!(line, "  model={m}");
        }
        for (key, label) in [("input_tokens", "in"), ("output_tokens", "out")] {
            if let Some(n) = llm.get(key).and_then(Value::as_i64) {
                let _ = write!(line, " {label}={n}");
            }
        }
        if let Some(t) = llm.get("ttft_ms").and_then(Value::as_f64) {
            let _ = write!(line, " ttft={}", format_ms(t));
        }
        if let Some(a) = llm.get("adapter_id").and_then(Value::as_str) {
            let _ = write!(line, " adapter={a}");
        }
        if let Some(t) = llm.get("tool_name").and_then(Value::as_str) {
            let _ = write!(line, " tool={t}");
        }
        if let Some(r) = llm.get("rejection_reason").and_then(Value::as_str) {
            let _ = write!(line, " rejected={r}");
        }
        // Its prompt and reply: `trace ID --span SPAN_ID`.
        let _ = write!(line, "  span={}", s(span, "span_id"));
    }
    let status = span.get("status");
    if status.map(|st| s(st, "code")) == Some("error") {
        let msg = status.map(|st| s(st, "message")).unwrap_or("");
        let _ = write!(
            line,
            "  ✗ ERROR{}",
            if msg.is_empty() {
                String::new()
            } else {
                format!(": {msg}")
            }
        );
    }
    let _ = writeln!(out, "{line}");
    let children = span
        .get("children")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let child_prefix = format!("{prefix}{}", if last { "   " } else { "│  " });
    siblings(out, &children, &child_prefix, expand);
}

/// One span whole (`/api/v1/traces/{id}/spans/{span}`): what it is, its LLM fields,
/// the conversation it carried (prompt and reply, tool calls), its attributes, its
/// logs.
pub(crate) fn span_detail(span: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "span {}  {} {}  {}  started {}",
        s(span, "span_id"),
        s(span, "service"),
        s(span, "name"),
        ms(span, "duration_ms"),
        time(span, "start_time_unix_nano"),
    );
    if let Some(status) = span.get("status").filter(|st| s(st, "code") == "error") {
        let _ = writeln!(out, "✗ ERROR: {}", s(status, "message"));
    }
    if let Some(llm) = span.get("llm").and_then(Value::as_object) {
        let fields: Vec<String> = llm
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::String(text) => format!("{k}={text}"),
                Value::Number(n) if k == "cost_usd" => {
                    format!("{k}=${:.6}", n.as_f64().unwrap_or_default())
                }
                other => format!("{k}={other}"),
            })
            .collect();
        let _ = writeln!(out, "llm: {}", fields.join("  "));
    }
    let messages = span
        .pointer("/conversation/messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !messages.is_empty() {
        let _ = writeln!(out, "\nconversation:");
        for m in &messages {
            let side = if m.get("output").and_then(Value::as_bool) == Some(true) {
                "<"
            } else {
                ">"
            };
            let _ = writeln!(out, "{side} {}: {}", s(m, "role"), s(m, "content"));
            for call in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let _ = writeln!(
                    out,
                    "    tool call {}({})",
                    s(call, "name"),
                    s(call, "arguments")
                );
            }
        }
    }
    let attributes = span
        .get("attributes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if !attributes.is_empty() {
        let _ = writeln!(out, "\nattributes:");
        for (k, v) in &attributes {
            let _ = writeln!(out, "  {k} = {}", fit(&plain(Some(v)), 200));
        }
    }
    let logs = span
        .get("logs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !logs.is_empty() {
        let _ = writeln!(out, "\nlogs:");
        for l in &logs {
            let _ = writeln!(
                out,
                "  {} {} {}",
                time(l, "time_unix_nano"),
                s(l, "event_name"),
                fit(&plain(l.get("body")), 200)
            );
        }
    }
    out
}

/// A JSON value as text: a string as it is, anything else as JSON, nothing as "".
fn plain(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(t)) => t.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// `text` in at most `width` characters, ending with `…` when cut.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

pub(crate) fn search_table(page: &Value) -> String {
    let mut out = String::new();
    let traces = page
        .get("traces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{:<32}  {:<24}  {:>10}  {:>5}  {:>7}  {:<3}  {:<30}  MODELS",
        "TRACE ID", "START", "DURATION", "SPANS", "TOKENS", "ERR", "ROOT"
    );
    for t in &traces {
        let models: Vec<&str> = t
            .get("models")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let root = format!("{} {}", s(t, "root_service"), s(t, "root_name"));
        let _ = writeln!(
            out,
            "{:<32}  {:<24}  {:>10}  {:>5}  {:>7}  {:<3}  {:<30}  {}",
            s(t, "trace_id"),
            time(t, "start_time_unix_nano"),
            ms(t, "duration_ms"),
            t.get("span_count").and_then(Value::as_u64).unwrap_or(0),
            t.get("total_tokens").and_then(Value::as_i64).unwrap_or(0),
            if t.get("error").and_then(Value::as_bool).unwrap_or(false) {
                "yes"
            } else {
                ""
            },
            fit(&root, 30),
            models.join(",")
        );
    }
    let _ = writeln!(out, "{} trace(s)", traces.len());
    if page
        .get("searched_from_unix_nano")
        .is_some_and(Value::is_string)
    {
        let _ = writeln!(
            out,
            "searched traces started since {} (the first page's time budget); older ones:",
            time(page, "searched_from_unix_nano")
        );
    }
    if let Some(c) = page.get("next_cursor").and_then(Value::as_str) {
        let _ = writeln!(out, "more: --cursor {c}");
    }
    out
}

/// A metric value as a person reads it, in its unit: `1.47 s`, `250 ms`, `12.3%`,
/// `290 tokens/s`, `$0.0012`; `–` when there is none.
pub(crate) fn metric_value(value: &Value, unit: &str) -> String {
    let Some(v) = value.as_f64() else {
        return "–".to_owned();
    };
    match unit {
        "ms" if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        "ms" if v >= 10.0 => format!("{v:.0} ms"),
        "ms" => format!("{v:.2} ms"),
        "ratio" => format!("{:.1}%", v * 100.0),
        "USD" => format!("${v:.4}"),
        unit => {
            let digits = if v.abs() >= 100.0 {
                0
            } else if v.abs() >= 1.0 {
                1
            } else {
                3
            };
            format!("{v:.digits$} {unit}")
        }
    }
}

#[cfg(test)]
mod metric_value_tests {
    use super::metric_value;
    use serde_json::json;

    #[test]
    fn cut_cells_end_with_an_ellipsis() {
        assert_eq!(
            super::fit("gateway POST /v1/chat/completions", 12),
            "gateway POS…"
        );
        assert_eq!(super::fit("short", 12), "short");
    }

    #[test]
    fn values_read_in_their_units() {
        assert_eq!(metric_value(&json!(1465.853597354569), "ms"), "1.47 s");
        assert_eq!(metric_value(&json!(254.7), "ms"), "255 ms");
        assert_eq!(metric_value(&json!(0.3696), "ratio"), "37.0%");
        assert_eq!(metric_value(&json!(290.47), "tokens/s"), "290 tokens/s");
        assert_eq!(metric_value(&json!(null), "ms"), "–");
    }
}
