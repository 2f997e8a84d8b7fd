//! Nezha's fault-injection days (FSE 2023, `IntelligentDDS/Nezha`; the continuous
//! Train-Ticket day of `IntelligentDDS/TraStrainer` has the same layout): a directory
//! with `trace/HH_MM_trace.csv` span files (`TraceID, SpanID, ParentID, PodName,
//! OperationName, StartTimeUnixNano, EndTimeUnixNano, Duration`), optionally
//! `log/HH_MM_log.csv` log files (`…, PodName, …, TraceID, SpanID, Log`), and the labels
//! in `<day>-fault_list.json` or `label.json` (per hour, each fault's `inject_time`,
//! `inject_pod` and `inject_type`).
//!
//! Converted to OTLP as an instrumented cluster would send it: one resource per pod —
//! `service.name` the pod name without its last two segments (the replica set and
//! pod hashes), the pod as `service.instance.id` and `k8s.pod.name`; a span with a
//! child in another service is a client span, one called from another service (or a
//! root) a server span; a root span carries its operation as `http.route` (the
//! gateway's route); a span is ERROR when one of its log lines is an ERROR or names an
//! exception (the CSV has no status: code faults show only in logs), and every log line
//! is sent as an OTLP log record joined to its span.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use serde::Deserialize;

use crate::loadgen::s;

/// Traces per OTLP export request (a collector batches a few hundred spans).
const TRACES_PER_EXPORT: usize = 40;
/// Log records per OTLP export request.
const LOGS_PER_EXPORT: usize = 2_000;
/// Characters of the first error line kept as a span's status message.
const STATUS_MESSAGE_CHARS: usize = 300;

/// One injected fault.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    /// `HH:MM:SS service kind`, unique within a day.
    pub(crate) name: String,
    /// When it was injected (the `inject_time` string, UTC), Unix seconds.
    pub(crate) at: i64,
    pub(crate) pod: String,
    pub(crate) service: String,
    pub(crate) kind: String,
}

#[derive(Deserialize)]
struct Injection {
    inject_time: String,
    inject_pod: String,
    inject_type: String,
}

/// The service of a Kubernetes pod: its name without the replica set and pod hashes.
pub(crate) fn service_of_pod(pod: &str) -> &str {
    let mut cut = pod.len();
    for _ in 0..2 {
        match pod[..cut].rfind('-') {
            Some(i) => cut = i,
            None => return pod,
        }
    }
    &pod[..cut]
}

/// The faults of `dir` (`*fault_list.json` or `label.json`), in time order.
pub(crate) fn faults(dir: &Path) -> anyhow::Result<Vec<Fault>> {
    let labels = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("fault_list.json") || n == "label.json")
        })
        .with_context(|| {
            format!(
                "no labels in {}: a <day>-fault_list.json or label.json is needed",
                dir.display()
            )
        })?;
    let text = std::fs::read_to_string(&labels)
        .with_context(|| format!("cannot read {}", labels.display()))?;
    let by_hour: BTreeMap<String, Vec<Injection>> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a fault list by hour", labels.display()))?;
    let mut out = Vec::new();
    for f in by_hour.into_values().flatten() {
        // The timestamp beside it is off by hours on some days; the string is UTC.
        let at = humantime::parse_rfc3339(&format!("{}Z", f.inject_time.replace(' ', "T")))
            .with_context(|| format!("inject_time {:?} is not a time", f.inject_time))?
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs() as i64;
        let service = service_of_pod(&f.inject_pod).to_owned();
        out.push(Fault {
            name: format!(
                "{} {} {}",
                f.inject_time.get(11..).unwrap_or(&f.inject_time),
                service,
                f.inject_type
            ),
            at,
            pod: f.inject_pod,
            service,
            kind: f.inject_type,
        });
    }
    out.sort_by_key(|f| f.at);
    Ok(out)
}

/// The files of `dir/sub` named `HH_MM_<suffix>.csv`, by minute of the day.
fn minute_files(dir: &Path, sub: &str, suffix: &str) -> anyhow::Result<BTreeMap<i64, PathBuf>> {
    let dir = dir.join(sub);
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for e in entries {
        let path = e?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(&format!("_{suffix}.csv")) else {
            continue;
        };
        let parsed = stem
            .split_once('_')
            .and_then(|(h, m)| Some((h.parse::<i64>().ok()?, m.parse::<i64>().ok()?)));
        if let Some((h, m)) = parsed {
            out.insert(h * 60 + m, path);
        }
    }
    Ok(out)
}

/// The span and log files of `dir` from minute of the day `from` to `to`, by minute.
pub(crate) fn files_between(
    dir: &Path,
    from: i64,
    to: i64,
) -> anyhow::Result<(BTreeMap<i64, PathBuf>, BTreeMap<i64, PathBuf>)> {
    let pick = |files: BTreeMap<i64, PathBuf>| {
        files
            .range(from..=to)
            .map(|(m, p)| (*m, p.clone()))
            .collect()
    };
    Ok((
        pick(minute_files(dir, "trace", "trace")?),
        pick(minute_files(dir, "log", "log")?),
    ))
}

impl SpanRow {
    pub(crate) fn end_ns(&self) -> u64 {
        self.end_ns
    }
}

/// One row of a span file.
#[derive(Clone, Debug)]
pub(crate) struct SpanRow {
    trace: [u8; 16],
    span: [u8; 8],
    parent: Option<[u8; 8]>,
    pod: String,
    name: String,
    start_ns: u64,
    end_ns: u64,
}

fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    if text.len() != 2 * N {
        return None;
    }
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A CSV file's reader and header row.
fn open_csv(path: &Path) -> anyhow::Result<(csv::Reader<std::fs::File>, csv::StringRecord)> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = reader
        .headers()
        .with_context(|| format!("{} has no header row", path.display()))?
        .clone();
    Ok((reader, headers))
}

/// The position of column `name` of a CSV file's header row.
fn column(path: &Path, headers: &csv::StringRecord, name: &str) -> anyhow::Result<usize> {
    headers
        .iter()
        .position(|h| h == name)
        .with_context(|| format!("{} has no column {name}", path.display()))
}

/// The spans of span files (rows with an id that does not parse are skipped).
pub(crate) fn read_spans(paths: &[PathBuf]) -> anyhow::Result<Vec<SpanRow>> {
    let mut out = Vec::new();
    for path in paths {
        let (mut reader, headers) = open_csv(path)?;
        let col = |name: &str| column(path, &headers, name);
        let (trace, span, parent, pod, name, start, end) = (
            col("TraceID")?,
            col("SpanID")?,
            col("ParentID")?,
            col("PodName")?,
            col("OperationName")?,
            col("StartTimeUnixNano")?,
            col("EndTimeUnixNano")?,
        );
        for record in reader.records() {
            let r = record.with_context(|| format!("{} does not parse", path.display()))?;
            let (Some(t), Some(sp)) = (hex::<16>(&r[trace]), hex::<8>(&r[span])) else {
                continue;
            };
            let (Ok(start_ns), Ok(end_ns)) = (r[start].parse::<u64>(), r[end].parse::<u64>())
            else {
                continue;
            };
            out.push(SpanRow {
                trace: t,
                span: sp,
                parent: hex::<8>(&r[parent]),
                pod: r[pod].to_owned(),
                name: r[name].to_owned(),
                start_ns,
                end_ns: end_ns.max(start_ns),
            });
        }
    }
    Ok(out)
}

/// One log line joined to a span.
#[derive(Clone, Debug)]
pub(crate) struct LogRow {
    time_ns: u64,
    pod: String,
    trace: Option<[u8; 16]>,
    span: Option<[u8; 8]>,
    level: Level,
    text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    fn named(token: &str) -> Option<Self> {
        match token {
            "TRACE" | "DEBUG" => Some(Level::Debug),
            "INFO" => Some(Level::Info),
            "WARN" | "WARNING" => Some(Level::Warn),
            "ERROR" | "FATAL" | "SEVERE" => Some(Level::Error),
            _ => None,
        }
    }

    /// OTLP severity number and text.
    fn severity(self) -> (i32, &'static str) {
        match self {
            Level::Debug => (5, "DEBUG"),
            Level::Info => (9, "INFO"),
            Level::Warn => (13, "WARN"),
            Level::Error => (17, "ERROR"),
        }
    }
}

/// The text of a container log line (`{"log": …}` as Docker writes it, else as is)
/// and its level: the first of its leading words that names one (`19:52:40.412 INFO
/// t.s.TravelServiceImpl#532 …`), INFO when none does.
fn parse_log(raw: &str) -> (String, Level) {
    #[derive(Deserialize)]
    struct Docker {
        log: String,
    }
    let text = serde_json::from_str::<Docker>(raw)
        .map(|d| d.log)
        .unwrap_or_else(|_| raw.to_owned());
    let text = text.trim_end().to_owned();
    let level = text
        .split_whitespace()
        .take(4)
        .find_map(Level::named)
        .unwrap_or(Level::Info);
    (text, level)
}

impl LogRow {
    /// An error or an exception: what makes its span ERROR.
    fn is_error(&self) -> bool {
        self.level == Level::Error || self.text.contains("Exception")
    }
}

pub(crate) fn read_logs(paths: &[PathBuf]) -> anyhow::Result<Vec<LogRow>> {
    let mut out = Vec::new();
    for path in paths {
        let (mut reader, headers) = open_csv(path)?;
        let col = |name: &str| column(path, &headers, name);
        let (time, pod, trace, span, log) = (
            col("TimeUnixNano")?,
            col("PodName")?,
            col("TraceID")?,
            col("SpanID")?,
            col("Log")?,
        );
        for record in reader.records() {
            let r = record.with_context(|| format!("{} does not parse", path.display()))?;
            let Ok(time_ns) = r[time].parse::<u64>() else {
                continue;
            };
            let (text, level) = parse_log(&r[log]);
            out.push(LogRow {
                time_ns,
                pod: r[pod].to_owned(),
                trace: hex::<16>(&r[trace]),
                span: hex::<8>(&r[span]),
                level,
                text,
            });
        }
    }
    Ok(out)
}

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
    let mut began: HashMap<[u8; 16], u64> = HashMap::new();
    for s in &spans {
        let at = began.entry(s.trace).or_insert(s.start_ns);
        *at = (*at).min(s.start_ns);
    }
    let dropped: std::collections::HashSet<[u8; 16]> = began
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
    let mut errors: HashMap<([u8; 16], [u8; 8]), &str> = HashMap::new();
    for l in logs.iter().filter(|l| l.is_error()) {
        if let (Some(t), Some(s)) = (l.trace, l.span) {
            errors.entry((t, s)).or_insert(&l.text);
        }
    }
    let mut by_trace: BTreeMap<[u8; 16], Vec<&SpanRow>> = BTreeMap::new();
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
        let service_of: HashMap<[u8; 8], &str> = rows
            .iter()
            .map(|r| (r.span, service_of_pod(&r.pod)))
            .collect();
        let mut calls_out: HashMap<[u8; 8], bool> = HashMap::new();
        for r in rows {
            if let Some(p) = r.parent.and_then(|p| service_of.get(&p).map(|s| (p, *s))) {
                if p.1 != service_of_pod(&r.pod) {
                    calls_out.insert(p.0, true);
                }
            }
        }
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
            let kind = if calls_out.contains_key(&r.span) {
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
                trace_id: r.trace.to_vec(),
                span_id: r.span.to_vec(),
                parent_span_id: r.parent.map(|p| p.to_vec()).unwrap_or_default(),
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
                trace_id: l.trace.map(|t| t.to_vec()).unwrap_or_default(),
                span_id: l.span.map(|s| s.to_vec()).unwrap_or_default(),
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

/// The service a ranked candidate names: a service's or a span's own, or a value of
/// the service dimensions.
pub(crate) fn service_of_candidate(candidate: &serde_json::Value) -> Option<String> {
    if let Some(s) = candidate["evidence"]["service"].as_str() {
        return Some(s.to_owned());
    }
    let subject = candidate["subject"].as_str()?;
    let value = subject
        .strip_prefix("service=")
        .or_else(|| subject.strip_prefix("upstream_service="))?;
    Some(value.split(" span=").next().unwrap_or(value).to_owned())
}

/// A minute of the day (UTC) of Unix seconds.
pub(crate) fn minute_of_day(unix_s: i64) -> i64 {
    unix_s.rem_euclid(86_400) / 60
}

/// Checks a directory before a long run: labels and span files.
pub(crate) fn check_dir(dir: &Path) -> anyhow::Result<()> {
    if minute_files(dir, "trace", "trace")?.is_empty() {
        bail!(
            "no span files in {}: trace/HH_MM_trace.csv expected",
            dir.join("trace").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_its_service_without_the_replica_set_and_pod_hashes() {
        assert_eq!(
            service_of_pod("ts-contacts-service-866bd68c97-dzqgd"),
            "ts-contacts-service"
        );
        assert_eq!(service_of_pod("redis-0"), "redis-0");
    }

    #[test]
    fn a_docker_log_line_gives_its_text_and_level() {
        let (text, level) = parse_log(
            r#"{"log":"19:52:40.412 ERROR t.s.TravelServiceImpl#532 TraceID: 0b SpanID: 31 [x]\n","stream":"stdout"}"#,
        );
        assert_eq!(level, Level::Error);
        assert!(text.ends_with("[x]"), "{text}");
        assert_eq!(parse_log("plain line").1, Level::Info);
        let row = LogRow {
            time_ns: 0,
            pod: "p-a-b".into(),
            trace: None,
            span: None,
            level: Level::Info,
            text: "java.lang.RuntimeException: boom".into(),
        };
        assert!(row.is_error());
    }

    fn row(trace: u8, span: u8, parent: Option<u8>, pod: &str, name: &str) -> SpanRow {
        SpanRow {
            trace: [trace; 16],
            span: [span; 8],
            parent: parent.map(|p| [p; 8]),
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
            trace: Some([1; 16]),
            span: Some([3; 8]),
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
            trace: Some([trace; 16]),
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
        assert_eq!(spans[0].trace, [1; 16]);
        assert_eq!(logs.len(), 1);
    }

    #[test]
    fn a_candidate_names_its_service() {
        let c = serde_json::json!({"subject": "service=ts-route-service", "evidence": {}});
        assert_eq!(
            service_of_candidate(&c).as_deref(),
            Some("ts-route-service")
        );
        let c = serde_json::json!({"subject": "service=a span=b", "evidence": {"service": "a"}});
        assert_eq!(service_of_candidate(&c).as_deref(), Some("a"));
        let c = serde_json::json!({"subject": "adapter=x", "evidence": {}});
        assert_eq!(service_of_candidate(&c), None);
    }
}
