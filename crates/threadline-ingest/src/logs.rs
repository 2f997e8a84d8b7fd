//! OTLP log records → `LogRecord`s. Invalid records (malformed trace or span ids) are
//! rejected one by one, counted and described for `partial_success`.

use opentelemetry_proto::tonic::logs::v1::LogRecord as OtlpLogRecord;
use threadline_model::{LogDetail, LogRecord, SpanId, TraceId};

use crate::convert::{
    convert_attributes, convert_value, rejection_message, ResourceParts, MAX_REPORTED_ERRORS,
};
use crate::{ExportLogsServiceRequest, TimeBounds};

/// The records accepted from one request and what was refused.
#[derive(Debug, Default)]
pub struct ConvertedLogs {
    pub records: Vec<LogRecord>,
    pub rejected: u64,
    pub errors: Vec<String>,
}

impl ConvertedLogs {
    /// Counts the records refused before conversion (they did not decode), their
    /// reasons first.
    pub fn add_undecodable(&mut self, refused: crate::Undecodable) {
        refused.count_into(&mut self.rejected, &mut self.errors);
    }

    /// The `partial_success.error_message`, empty when nothing was refused.
    pub fn error_message(&self) -> String {
        rejection_message(self.rejected, "log record(s)", &self.errors)
    }
}

/// Converts and validates every record of a logs export request; records whose time
/// falls outside `bounds` are refused.
pub fn convert_logs_request(
    request: ExportLogsServiceRequest,
    bounds: &TimeBounds,
) -> ConvertedLogs {
    let mut out = ConvertedLogs::default();
    for resource_logs in request.resource_logs {
        let resource = ResourceParts::new(resource_logs.resource, resource_logs.schema_url);
        for scope_logs in resource_logs.scope_logs {
            let origin = resource.origin(scope_logs.scope, scope_logs.schema_url);
            let service = origin.service_name();
            for (i, record) in scope_logs.log_records.into_iter().enumerate() {
                match convert_record(record, bounds) {
                    Ok((time_unix_nano, trace_id, span_id, detail)) => {
                        out.records.push(LogRecord {
                            time_unix_nano,
                            trace_id,
                            span_id,
                            service: service.clone(),
                            detail,
                            origin: origin.clone(),
                        })
                    }
                    Err(reason) => {
                        out.rejected += 1;
                        if out.errors.len() < MAX_REPORTED_ERRORS {
                            out.errors
                                .push(format!("log record {i} of {service}: {reason}"));
                        }
                    }
                }
            }
        }
    }
    out
}

type Converted = (u64, Option<TraceId>, Option<SpanId>, LogDetail);

fn convert_record(r: OtlpLogRecord, bounds: &TimeBounds) -> Result<Converted, String> {
    // Empty or all-zero ids mean "not tied to a span".
    let unset = |id: &[u8]| id.iter().all(|b| *b == 0);
    let trace_id = if unset(&r.trace_id) {
        None
    } else {
        Some(TraceId::from_bytes(&r.trace_id).map_err(|e| format!("trace_id: {e}"))?)
    };
    let span_id = if unset(&r.span_id) {
        None
    } else {
        Some(SpanId::from_bytes(&r.span_id).map_err(|e| format!("span_id: {e}"))?)
    };
    if span_id.is_some() && trace_id.is_none() {
        return Err("span_id without a trace_id".to_owned());
    }
    let time = if r.time_unix_nano != 0 {
        r.time_unix_nano
    } else {
        r.observed_time_unix_nano
    };
    if time == 0 {
        return Err("neither time_unix_nano nor observed_time_unix_nano is set".to_owned());
    }
    let field = if r.time_unix_nano != 0 {
        "time_unix_nano"
    } else {
        "observed_time_unix_nano"
    };
    bounds.check(field, time)?;
    Ok((
        time,
        trace_id,
        span_id,
        LogDetail {
            observed_time_unix_nano: r.observed_time_unix_nano,
            severity_number: r.severity_number,
            severity_text: r.severity_text,
            event_name: r.event_name,
            body: convert_value(r.body),
            attributes: convert_attributes(r.attributes),
            dropped_attributes_count: r.dropped_attributes_count,
            flags: r.flags,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_their_span_and_bad_ids_are_refused_one_by_one() {
        let doc = r#"{"resourceLogs":[{"resource":{"attributes":[
            {"key":"service.name","value":{"stringValue":"chat"}}]},
          "scopeLogs":[{"scope":{"name":"genai"},"logRecords":[
            {"timeUnixNano":"1764400000000000000","eventName":"gen_ai.user.message",
             "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
             "body":{"kvlistValue":{"values":[{"key":"content","value":{"stringValue":"Hi"}}]}}},
            {"observedTimeUnixNano":"1764400000000000001","severityNumber":17,
             "body":{"stringValue":"db timeout"}},
            {"timeUnixNano":"1","traceId":"00000000000000000000000000000000","spanId":"eee19b7ec3c1b174"},
            {"timeUnixNano":"1","spanId":"eee19b7ec3"}
          ]}]}]}"#;
        let request =
            crate::otlp_json::parse_otlp_json_as::<ExportLogsServiceRequest>(doc.as_bytes())
                .unwrap();
        let out = convert_logs_request(request, &TimeBounds::storable());
        assert_eq!(out.records.len(), 2);
        assert_eq!(out.rejected, 2);
        let first = &out.records[0];
        assert_eq!(first.service, "chat");
        assert!(first.trace_id.is_some() && first.span_id.is_some());
        assert_eq!(first.detail.event_name, "gen_ai.user.message");
        assert_eq!(out.records[1].time_unix_nano, 1764400000000000001);
        assert_eq!(out.records[1].detail.severity_number, 17);
        let message = out.error_message();
        assert!(message.contains("span_id without a trace_id"), "{message}");
        assert!(
            message.contains("log record 3 of chat: span_id"),
            "{message}"
        );
    }
}
