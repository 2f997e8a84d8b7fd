//! OTLP/JSON → export requests (traces, logs), tolerant of what real senders emit.
//!
//! The `opentelemetry-proto` serde mapping does the heavy lifting (hex ids, int64 as
//! strings or numbers, base64 bytes, camelCase). Before handing it the document we
//! smooth over shapes the OTLP spec allows or real senders produce but that mapping
//! refuses: `null` anywhere means "absent"; an `arrayValue` or `kvlistValue` without
//! `values`; a request without `resourceSpans` (or `resourceLogs`). (An empty `AnyValue` `{}` is accepted
//! by the mapping itself since 0.33; a test keeps it that way.)

use serde_json::{Map, Value};

use crate::{ExportRequest, ExportTraceServiceRequest};

/// Parses an OTLP/JSON trace export body; the error names what was wrong.
pub fn parse_otlp_json(bytes: &[u8]) -> Result<ExportTraceServiceRequest, String> {
    parse_otlp_json_as(bytes)
}

/// Parses an OTLP/JSON export body of any signal this crate takes.
pub(crate) fn parse_otlp_json_as<R: ExportRequest>(bytes: &[u8]) -> Result<R, String> {
    let mut doc: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("body is not valid JSON: {e}"))?;
    if !doc.is_object() {
        return Err(format!(
            "OTLP/JSON body must be a JSON object with \"{}\"",
            R::ROOT
        ));
    }
    sanitize(&mut doc, Slot::Other);
    if let Value::Object(obj) = &mut doc {
        obj.entry(R::ROOT)
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    serde_path_to_error::deserialize(doc)
        .map_err(|e| format!("invalid OTLP/JSON at {}: {}", e.path(), e.inner()))
}

/// What kind of node a value is, as far as the cleanup needs to know.
#[derive(Clone, Copy, PartialEq)]
enum Slot {
    AnyValue,
    Other,
}

fn sanitize(value: &mut Value, slot: Slot) {
    match value {
        Value::Object(obj) => {
            obj.retain(|_, v| !v.is_null());
            for (key, child) in obj.iter_mut() {
                let child_slot = match key.as_str() {
                    "value" | "body" => Slot::AnyValue,
                    _ => Slot::Other,
                };
                if key == "values" && slot == Slot::Other {
                    // Items of `arrayValue.values` are AnyValues; `kvlistValue.values` are KeyValues.
                    if let Value::Array(items) = child {
                        let item_slot = if items.iter().any(|i| i.get("key").is_some()) {
                            Slot::Other
                        } else {
                            Slot::AnyValue
                        };
                        for item in items {
                            sanitize(item, item_slot);
                        }
                    }
                    continue;
                }
                sanitize(child, child_slot);
            }
            if slot == Slot::AnyValue {
                fix_any_value(obj);
            }
        }
        Value::Array(items) => {
            for item in items {
                sanitize(item, Slot::Other);
            }
        }
        _ => {}
    }
}

fn fix_any_value(obj: &mut Map<String, Value>) {
    for key in ["arrayValue", "kvlistValue"] {
        if let Some(Value::Object(inner)) = obj.get_mut(key) {
            inner
                .entry("values")
                .or_insert_with(|| Value::Array(Vec::new()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span_json(attrs: &str) -> String {
        format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[]}},"scopeSpans":[{{"scope":{{}},"spans":[{{
            "traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"EEE19B7EC3C1B174",
            "name":"x","kind":2,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":1544712661000000000,
            "attributes":{attrs}}}]}}]}}]}}"#
        )
    }

    #[test]
    fn empty_request_is_accepted() {
        assert!(parse_otlp_json(b"{}").unwrap().resource_spans.is_empty());
    }

    #[test]
    fn sloppy_attribute_values_are_accepted() {
        let doc = span_json(
            r#"[{"key":"a","value":{}},{"key":"b","value":{"intValue":null}},
                {"key":"c","value":{"arrayValue":{}}},{"key":"d","value":null},
                {"key":"e","value":{"arrayValue":{"values":[{},{"stringValue":"x"}]}}},
                {"key":"f","value":{"kvlistValue":{"values":[{"key":"g","value":{}}]}}}]"#,
        );
        let req = parse_otlp_json(doc.as_bytes()).unwrap();
        let span = &req.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.attributes.len(), 6);
        assert_eq!(span.end_time_unix_nano, 1544712661000000000);
    }

    #[test]
    fn errors_name_the_path() {
        let err = parse_otlp_json(
            br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}"#,
        )
        .unwrap_err();
        assert!(
            err.contains("resourceSpans[0].scopeSpans[0].spans[0]"),
            "{err}"
        );
        assert!(parse_otlp_json(b"[1]").is_err());
        assert!(parse_otlp_json(b"{")
            .unwrap_err()
            .contains("not valid JSON"));
    }
}

#[cfg(test)]
mod empty_id_tests {
    use super::*;
    use crate::{convert_request, TimeBounds};

    /// `"spanId": ""` (or missing) is refused like a short trace id: that span alone,
    /// by partial success, naming its length.
    #[test]
    fn an_empty_span_id_is_refused_by_span() {
        let doc = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[
            {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"","name":"empty",
             "startTimeUnixNano":"1","endTimeUnixNano":"2"},
            {"traceId":"5b8efff798038103d269b633813fc60c","name":"missing",
             "startTimeUnixNano":"1","endTimeUnixNano":"2"},
            {"traceId":"5b8efff798038103d269b633813f","spanId":"eee19b7ec3c1b174","name":"short",
             "startTimeUnixNano":"1","endTimeUnixNano":"2"},
            {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"ok",
             "startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}"#;
        let batch = convert_request(parse_otlp_json(doc).unwrap(), &TimeBounds::storable());
        assert_eq!(batch.spans.len(), 1);
        assert_eq!(batch.rejected_spans, 3);
        let msg = batch.error_message();
        assert!(
            msg.contains("\"empty\" (span_id ): span id must be 8 bytes, got 0"),
            "{msg}"
        );
        assert!(msg.contains("\"missing\""), "{msg}");
        assert!(msg.contains("trace id must be 16 bytes, got 14"), "{msg}");
    }
}
