//! Nezha's rows as OTLP: one resource per pod, span kinds from the call structure,
//! the root's operation as `http.route`, ERROR where a span's log lines hold an error
//! or an exception, every log line an OTLP log record (see `nezha` for the format).

use std::collections::{BTreeMap, HashMap, HashSet};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use threadline_model::{SpanId, TraceId};

use super::nezha::{service_of_pod, LogRow, SpanRow};
use crate::loadgen::s;

/// Traces per OTLP export request (a collector batches a few hundred spans).
const TRACES_PER_EXPORT: usize = 40;
/// Log records per OTLP export request.
const LOGS_PER_EXPORT: usize = 2_000;
/// Characters of the first error line kept as a span's status message.
const STATUS_MESSAGE_CHARS: usize = 300;

/// What a directory's minutes become: OTLP export requests, shifted in time.
pub(crate) struct Replay {
    pub(crate) traces: Vec<ExportTraceServiceRequest>,
    pub(crate) logs: Vec<ExportLogsServiceRequest>,
    pub(crate) spans: usize,
    pub(crate) error_spans: usize,
    pub(crate) log_records: usize,
    /// The service and route of most root spans: the series to diagnose.
    pub(crate) entry: Option<(String, String)>,
    /// Each request as sent (times not shifted): what its dashboard shows.
    pub(crate) requests: Vec<Request>,
}

/// A request: when its root span began, how long it took, whether any span failed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) start_ns: u64,
    pub(crate) ms: f64,
    pub(crate) failed: bool,
}

fn pod_resource(pod: &str) -> Resource {
    Resource {
        attributes: vec![
            s("service.name", service_of_pod(pod)),
            s("service.instance.id", pod),
            s("k8s.pod.name", pod),
        ],
        ..Default::default()
    }
}

fn truncated(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((i, _)) => text[..i].to_owned(),
        None => text.to_owned(),
    }
}

/// Drops the traces that began inside one of `windows` (ns, end exclusive) and
/// their log lines.
pub(crate) fn without_traces_in(
    spans: Vec<SpanRow>,
    logs: Vec<LogRow>,
    windows: &[(u64, u64)],
) -> (Vec<SpanRow>, Vec<LogRow>) {
    let mut began: HashMap<TraceId, u64> = HashMap::new();
    for s in &spans {
        let at = began.entry(s.trace).or_insert(s.start_ns);
        *at = (*at).min(s.start_ns);
    }
    let dropped: HashSet<TraceId> = began
        .into_iter()
        .filter(|(_, at)| windows.iter().any(|(from, to)| (*from..*to).contains(at)))
        .map(|(t, _)| t)
        .collect();
    (
        spans
            .into_iter()
            .filter(|s| !dropped.contains(&s.trace))
            .collect(),
        logs.into_iter()
            .filter(|l| l.trace.is_none_or(|t| !dropped.contains(&t)))
            .collect(),
    )
}

/// Spans and logs as OTLP, every time moved by `shift_ns`.
pub(crate) fn replay(spans: &[SpanRow], logs: &[LogRow], shift_ns: i64) -> Replay {
    let at = |t: u64| (t as i64 + shift_ns).max(0) as u64;
    // The first error line of each span.
    let mut errors: HashMap<(TraceId, SpanId), &str> = HashMap::new();
    for l in logs.iter().filter(|l| l.is_error()) {
        if let (Some(t), Some(s)) = (l.trace, l.span) {
            errors.entry((t, s)).or_insert(&l.text);
        }
    }
    let mut by_trace: BTreeMap<TraceId, Vec<&SpanRow>> = BTreeMap::new();
    for s in spans {
        by_trace.entry(s.trace).or_default().push(s);
    }
    let mut entries: HashMap<(String, String), usize> = HashMap::new();
    let mut out = Replay {
        traces: Vec::new(),
        logs: Vec::new(),
        spans: 0,
        error_spans: 0,
        log_records: 0,
        entry: None,
        requests: Vec::new(),
    };
    let mut batch: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
    let mut in_batch = 0;
    for rows in by_trace.values() {
        let service_of: HashMap<SpanId, &str> = rows
            .iter()
            .map(|r| (r.span, service_of_pod(&r.pod)))
            .collect();
        // Spans with a child in another service: client spans.
        let calls_out: HashSet<SpanId> = rows
            .iter()
            .filter_map(|r| {
                let parent = r.parent?;
                (*service_of.get(&parent)? != service_of_pod(&r.pod)).then_some(parent)
            })
            .collect();
        let root = rows
            .iter()
            .filter(|r| r.parent.is_none())
            .max_by_key(|r| r.end_ns - r.start_ns);
        if let Some(root) = root {
            out.requests.push(Request {
                start_ns: root.start_ns,
                ms: (root.end_ns - root.start_ns) as f64 / 1e6,
                failed: rows.iter().any(|r| errors.contains_key(&(r.trace, r.span))),
            });
        }
        for r in rows {
            let service = service_of_pod(&r.pod);
            let parent_service = r.parent.and_then(|p| service_of.get(&p).copied());
            let kind = if calls_out.contains(&r.span) {
                SpanKind::Client
            } else if parent_service.is_none_or(|p| p != service) {
                SpanKind::Server
            } else {
                SpanKind::Internal
            };
            let mut attributes = Vec::new();
            if r.parent.is_none() {
                attributes.push(s("http.route", r.name.clone()));
                *entries
                    .entry((service.to_owned(), r.name.clone()))
                    .or_default() += 1;
            }
            let status = errors.get(&(r.trace, r.span)).map(|line| {
                out.error_spans += 1;
                Status {
                    code: StatusCode::Error as i32,
                    message: truncated(line, STATUS_MESSAGE_CHARS),
                }
            });
            batch.entry(r.pod.as_str()).or_default().push(Span {
                trace_id: r.trace.0.to_vec(),
                span_id: r.span.0.to_vec(),
                parent_span_id: r.parent.map(|p| p.0.to_vec()).unwrap_or_default(),
                name: r.name.clone(),
                kind: kind as i32,
                start_time_unix_nano: at(r.start_ns),
                end_time_unix_nano: at(r.end_ns),
                attributes,
                status,
                ..Default::default()
            });
            out.spans += 1;
        }
        in_batch += 1;
        if in_batch == TRACES_PER_EXPORT {
            out.traces.push(export_spans(std::mem::take(&mut batch)));
            in_batch = 0;
        }
    }
    if !batch.is_empty() {
        out.traces.push(export_spans(batch));
    }
    for chunk in logs.chunks(LOGS_PER_EXPORT) {
        let mut by_pod: BTreeMap<&str, Vec<LogRecord>> = BTreeMap::new();
        for l in chunk {
            let (severity_number, severity_text) = l.level.severity();
            by_pod.entry(l.pod.as_str()).or_default().push(LogRecord {
                time_unix_nano: at(l.time_ns),
                observed_time_unix_nano: at(l.time_ns),
                severity_number,
                severity_text: severity_text.to_owned(),
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(l.text.clone())),
                }),
                trace_id: l.trace.map(|t| t.0.to_vec()).unwrap_or_default(),
                span_id: l.span.map(|s| s.0.to_vec()).unwrap_or_default(),
                ..Default::default()
            });
            out.log_records += 1;
        }
        out.logs.push(ExportLogsServiceRequest {
            resource_logs: by_pod
                .into_iter()
                .map(|(pod, log_records)| ResourceLogs {
                    resource: Some(pod_resource(pod)),
                    scope_logs: vec![ScopeLogs {
                        log_records,
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
        });
    }
    out.entry = entries
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|(k, _)| k);
    out
}

fn export_spans(by_pod: BTreeMap<&str, Vec<Span>>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: by_pod
            .into_iter()
            .map(|(pod, spans)| ResourceSpans {
                resource: Some(pod_resource(pod)),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_public::nezha::Level;

    fn row(trace: u8, span: u8, parent: Option<u8>, pod: &str, name: &str) -> SpanRow {
        SpanRow {
            trace: TraceId([trace; 16]),
            span: SpanId([span; 8]),
            parent: parent.map(|p| SpanId([p; 8])),
            pod: pod.into(),
            name: name.into(),
            start_ns: 1_000,
            end_ns: 2_000,
        }
    }

    #[test]
    fn spans_become_otlp_with_kinds_routes_and_errors_from_logs() {
        let spans = [
            row(1, 1, None, "ts-gateway-service-6f-d9", "/*"),
            row(1, 2, Some(1), "ts-gateway-service-6f-d9", "HTTP POST"),
            row(1, 3, Some(2), "ts-travel-service-64-5r", "/api/v1/travel"),
        ];
        let logs = [LogRow {
            time_ns: 1_500,
            pod: "ts-travel-service-64-5r".into(),
            trace: Some(TraceId([1; 16])),
            span: Some(SpanId([3; 8])),
            level: Level::Error,
            text: "12:00:00.000 ERROR boom".into(),
        }];
        let r = replay(&spans, &logs, 10);
        assert_eq!((r.spans, r.error_spans, r.log_records), (3, 1, 1));
        assert_eq!(
            r.entry,
            Some(("ts-gateway-service".to_owned(), "/*".to_owned()))
        );
        let all: Vec<(&str, &Span)> = r.traces[0]
            .resource_spans
            .iter()
            .flat_map(|rs| {
                let svc = rs.resource.as_ref().unwrap().attributes[0]
                    .value
                    .as_ref()
                    .and_then(|v| match &v.value {
                        Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                        _ => None,
                    })
                    .unwrap();
                rs.scope_spans[0].spans.iter().map(move |s| (svc, s))
            })
            .collect();
        let get = |name: &str| all.iter().find(|(_, s)| s.name == name).unwrap();
        assert_eq!(get("/*").1.kind, SpanKind::Server as i32);
        assert_eq!(get("/*").1.attributes[0].key, "http.route");
        assert_eq!(get("HTTP POST").1.kind, SpanKind::Client as i32);
        let travel = get("/api/v1/travel");
        assert_eq!(travel.0, "ts-travel-service");
        assert_eq!(travel.1.kind, SpanKind::Server as i32);
        assert_eq!(
            travel.1.status.as_ref().unwrap().code,
            StatusCode::Error as i32
        );
        assert_eq!(travel.1.start_time_unix_nano, 1_010);
    }

    #[test]
    fn traces_that_began_in_a_window_are_dropped_with_their_logs() {
        let mut late = row(2, 1, None, "a-b-c", "/*");
        late.start_ns = 5_000;
        let log = |trace: u8| LogRow {
            time_ns: 0,
            pod: "a-b-c".into(),
            trace: Some(TraceId([trace; 16])),
            span: None,
            level: Level::Info,
            text: String::new(),
        };
        let (spans, logs) = without_traces_in(
            vec![row(1, 1, None, "a-b-c", "/*"), late],
            vec![log(1), log(2)],
            &[(4_000, 6_000)],
        );
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].trace, TraceId([1; 16]));
        assert_eq!(logs.len(), 1);
    }
}
