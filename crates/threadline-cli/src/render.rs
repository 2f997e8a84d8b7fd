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

pub(crate) fn trace_tree(trace: &Value) -> String {
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
    let n = roots.len();
    for (i, root) in roots.iter().enumerate() {
        node(&mut out, root, "", i + 1 == n);
    }
    out
}

fn node(out: &mut String, span: &Value, prefix: &str, last: bool) {
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
    let n = children.len();
    for (i, child) in children.iter().enumerate() {
        node(out, child, &child_prefix, i + 1 == n);
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
