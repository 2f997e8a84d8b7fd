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
//! is sent as an OTLP log record joined to its span (`nezha_otlp`). This module reads
//! the directory: its faults, files and rows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;
use threadline_model::{SpanId, TraceId};

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

/// One row of a span file.
#[derive(Clone, Debug)]
pub(crate) struct SpanRow {
    pub(super) trace: TraceId,
    pub(super) span: SpanId,
    pub(super) parent: Option<SpanId>,
    pub(super) pod: String,
    pub(super) name: String,
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
}

/// A CSV file's reader and header row. Records may hold more fields than the header
/// (a log line with an unquoted comma) or fewer (a row cut short): each reader takes
/// what it needs of them.
fn open_csv(path: &Path) -> anyhow::Result<(csv::Reader<std::fs::File>, csv::StringRecord)> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
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
            let field = |i: usize| r.get(i).unwrap_or_default();
            let (Ok(t), Ok(sp)) = (
                field(trace).parse::<TraceId>(),
                field(span).parse::<SpanId>(),
            ) else {
                continue;
            };
            let (Ok(start_ns), Ok(end_ns)) =
                (field(start).parse::<u64>(), field(end).parse::<u64>())
            else {
                continue;
            };
            out.push(SpanRow {
                trace: t,
                span: sp,
                // `root` (or any id that does not parse): no parent.
                parent: field(parent).parse().ok(),
                pod: field(pod).to_owned(),
                name: field(name).to_owned(),
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
    pub(super) time_ns: u64,
    pub(super) pod: String,
    pub(super) trace: Option<TraceId>,
    pub(super) span: Option<SpanId>,
    pub(super) level: Level,
    pub(super) text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
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
    pub(super) fn severity(self) -> (i32, &'static str) {
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
    pub(super) fn is_error(&self) -> bool {
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
        let last = headers.len().saturating_sub(1);
        for record in reader.records() {
            let r = record.with_context(|| format!("{} does not parse", path.display()))?;
            let field = |i: usize| r.get(i).unwrap_or_default();
            let Ok(time_ns) = field(time).parse::<u64>() else {
                continue;
            };
            // The log line is the last column: fields past the header are the rest of
            // it, split at commas nobody quoted.
            let line = if log == last && r.len() > headers.len() {
                r.iter().skip(log).collect::<Vec<_>>().join(",")
            } else {
                field(log).to_owned()
            };
            let (text, level) = parse_log(&line);
            out.push(LogRow {
                time_ns,
                pod: field(pod).to_owned(),
                trace: field(trace).parse().ok(),
                span: field(span).parse().ok(),
                level,
                text,
            });
        }
    }
    Ok(out)
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

    #[test]
    fn rows_with_unquoted_commas_or_cut_short_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("10_06_log.csv");
        std::fs::write(
            &logs,
            "Timestamp,TimeUnixNano,Node,PodName,Container,TraceID,SpanID,Log\n\
             t,1,n,ts-a-1-2,server,0b,31,plain line\n\
             t,2,n,ts-a-1-2,server,0b,31,ERROR a, b, c\n\
             t,3,n,ts-a-1-2\n",
        )
        .unwrap();
        let rows = read_logs(&[logs]).unwrap();
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(rows[1].text, "ERROR a, b, c");
        assert!(rows[1].is_error());
        assert_eq!(
            (rows[2].pod.as_str(), rows[2].text.as_str()),
            ("ts-a-1-2", "")
        );
        let spans = dir.path().join("10_06_trace.csv");
        std::fs::write(
            &spans,
            "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration\n\
             0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b,3131313131313131,root,ts-a-1-2,/x,10,20,10\n\
             0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b,3232323232323232\n",
        )
        .unwrap();
        assert_eq!(read_spans(&[spans]).unwrap().len(), 1);
    }
}
