//! OpenLineage events (RunEvent, DatasetEvent, JobEvent, spec 2-0-x) → one
//! `GraphUpdate`. Validation follows the spec's required fields: a missing one is an
//! error naming its JSON path. Where real producers are sloppy (no time zone, no
//! schemaURL or producer, a run id that is not a UUID) the event is accepted with a
//! warning. Facets are stored as sent; a known facet that breaks its schema is kept
//! raw under `invalid_facets`, reported as a warning, and never read by analysis.

use serde_json::{json, Map, Value};
use threadline_model::{
    EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate, LineageEventKey, NodeId, NodeKind, NodeUpsert,
    RunState, RunTransition,
};

use crate::facets::{self, FacetPlace};

/// Why an event was refused; the message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenLineageError {
    #[error("body is not valid JSON: {0}")]
    NotJson(String),
    #[error("{path}: {problem}")]
    Field { path: String, problem: String },
}

fn field_error(path: impl Into<String>, problem: impl Into<String>) -> OpenLineageError {
    OpenLineageError::Field {
        path: path.into(),
        problem: problem.into(),
    }
}

/// Which of the three event types a body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Run,
    Dataset,
    Job,
}

/// An accepted event: the graph change it implies and what was lenient about it.
#[derive(Debug, Clone)]
pub struct ParsedEvent {
    pub kind: EventKind,
    pub update: GraphUpdate,
    pub warnings: Vec<String>,
}

/// Parses and validates one event body.
pub fn parse_event(body: &[u8]) -> Result<ParsedEvent, OpenLineageError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| OpenLineageError::NotJson(e.to_string()))?;
    event_to_update(value)
}

/// Validates one event and derives its graph change.
pub fn event_to_update(event: Value) -> Result<ParsedEvent, OpenLineageError> {
    let obj = event
        .as_object()
        .ok_or_else(|| field_error("$", "an OpenLineage event must be a JSON object"))?;
    let mut warnings = Vec::new();
    let event_time_raw = required_str(obj, "eventTime", "eventTime")?;
    let event_time_ns = parse_event_time(event_time_raw, &mut warnings)?;
    for field in ["producer", "schemaURL"] {
        match obj.get(field) {
            Some(Value::String(_)) => {}
            None | Some(Value::Null) => warnings.push(format!(
                "{field} is missing (the spec requires it); accepted"
            )),
            Some(_) => return Err(field_error(field, "must be a string (a URI)")),
        }
    }
    let event_type = match obj.get("eventType") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(RunState::parse(s).ok_or_else(|| {
            field_error(
                "eventType",
                format!("{s:?} is not one of START, RUNNING, COMPLETE, ABORT, FAIL, OTHER"),
            )
        })?),
        Some(_) => return Err(field_error("eventType", "must be a string")),
    };
    let mut builder = Builder {
        update: GraphUpdate::default(),
        warnings,
        seen_ns: event_time_ns,
    };
    let kind = if obj.contains_key("run") {
        builder.run_event(obj, event_type)?;
        EventKind::Run
    } else if obj.contains_key("dataset") {
        builder.dataset_event(obj)?;
        EventKind::Dataset
    } else if obj.contains_key("job") {
        builder.job_event(obj)?;
        EventKind::Job
    } else {
        return Err(field_error(
            "run",
            "is required (or `dataset` for a DatasetEvent, `job` for a JobEvent)",
        ));
    };
    let subject = match kind {
        EventKind::Run => format!("run:{}", obj["run"]["runId"].as_str().unwrap_or_default()),
        EventKind::Dataset => {
            let d = &obj["dataset"];
            format!(
                "dataset:{}:{}",
                d["namespace"].as_str().unwrap_or_default(),
                d["name"].as_str().unwrap_or_default()
            )
        }
        EventKind::Job => {
            let j = &obj["job"];
            format!(
                "job:{}:{}",
                j["namespace"].as_str().unwrap_or_default(),
                j["name"].as_str().unwrap_or_default()
            )
        }
    };
    let key = LineageEventKey {
        subject,
        event_type: event_type.map(|t| t.as_str()).unwrap_or("").to_owned(),
        event_time: event_time_raw.to_owned(),
    };
    let mut update = builder.update;
    let mut warnings = builder.warnings;
    if !update.nodes.is_empty() {
        update.event = Some(key);
    }
    warnings.dedup();
    Ok(ParsedEvent {
        kind,
        update,
        warnings,
    })
}

fn required_str<'a>(
    obj: &'a Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<&'a str, OpenLineageError> {
    match obj.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(field_error(path, "must not be empty")),
        None | Some(Value::Null) => Err(field_error(path, "is required")),
        Some(_) => Err(field_error(path, "must be a string")),
    }
}

fn required_obj<'a>(
    obj: &'a Map<String, Value>,
    field: &str,
    path: &str,
) -> Result<&'a Map<String, Value>, OpenLineageError> {
    match obj.get(field) {
        Some(Value::Object(o)) => Ok(o),
        None | Some(Value::Null) => Err(field_error(path, "is required")),
        Some(_) => Err(field_error(path, "must be an object")),
    }
}

/// RFC 3339; without an offset (as several real producers send) it is read as UTC.
fn parse_event_time(raw: &str, warnings: &mut Vec<String>) -> Result<i64, OpenLineageError> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(raw) {
        return t
            .timestamp_nanos_opt()
            .ok_or_else(|| field_error("eventTime", format!("{raw:?} is out of range")));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(raw, format) {
            warnings.push(format!("eventTime {raw:?} has no time zone; read as UTC"));
            return t
                .and_utc()
                .timestamp_nanos_opt()
                .ok_or_else(|| field_error("eventTime", format!("{raw:?} is out of range")));
        }
    }
    Err(field_error(
        "eventTime",
        format!("{raw:?} is not an RFC 3339 date-time (e.g. 2024-05-01T12:00:00Z)"),
    ))
}

/// 8-4-4-4-12 hex digits.
fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Valid facets (to keep and read) and invalid ones (kept raw, flagged).
struct SortedFacets {
    valid: Map<String, Value>,
    invalid: Map<String, Value>,
}

struct Builder {
    update: GraphUpdate,
    warnings: Vec<String>,
    seen_ns: i64,
}

impl Builder {
    fn node(&mut self, id: NodeId, props: Value) {
        self.update.nodes.push(NodeUpsert {
            id,
            seen_ns: self.seen_ns,
            props,
        });
    }

    fn edge(&mut self, src: EdgeEnd, dst: EdgeEnd, kind: EdgeKind, evidence: Value) {
        self.update.edges.push(EdgeUpsert {
            declared: None,
            src,
            dst,
            kind,
            seen_ns: self.seen_ns,
            evidence,
        });
    }

    /// Splits `facets` (at `path`) into valid and invalid, warning about the latter.
    fn facets(&mut self, facets: Option<&Value>, place: FacetPlace, path: &str) -> SortedFacets {
        let mut sorted = SortedFacets {
            valid: Map::new(),
            invalid: Map::new(),
        };
        let Some(facets) = facets else {
            return sorted;
        };
        let Some(map) = facets.as_object() else {
            if !facets.is_null() {
                self.warnings
                    .push(format!("{path} is not an object; ignored"));
            }
            return sorted;
        };
        for (name, facet) in map {
            match facets::check(place, name, facet) {
                Ok(()) => {
                    sorted.valid.insert(name.clone(), facet.clone());
                }
                Err(problem) => {
                    self.warnings.push(format!(
                        "{path}.{name} breaks the facet's schema ({problem}); stored as invalid and ignored by analysis"
                    ));
                    sorted.invalid.insert(name.clone(), facet.clone());
                }
            }
        }
        sorted
    }

    fn job(&mut self, obj: &Map<String, Value>) -> Result<NodeId, OpenLineageError> {
        let job = required_obj(obj, "job", "job")?;
        let namespace = required_str(job, "namespace", "job.namespace")?;
        let name = required_str(job, "name", "job.name")?;
        let facets = self.facets(job.get("facets"), FacetPlace::Job, "job.facets");
        Ok(self.namespaced_node(NodeKind::Job, namespace, name, &facets))
    }

    /// A job or dataset node: its namespace, name and facets (valid and invalid).
    fn namespaced_node(
        &mut self,
        kind: NodeKind,
        namespace: &str,
        name: &str,
        facets: &SortedFacets,
    ) -> NodeId {
        let id = NodeId::namespaced(kind, namespace, name);
        // Built from clones of the maps: `json!` would copy them through serde's
        // serializer, at twice the cost (this runs for every dataset of every event).
        let props = Map::from_iter([
            ("namespace".to_owned(), Value::from(namespace)),
            ("name".to_owned(), Value::from(name)),
            ("facets".to_owned(), Value::Object(facets.valid.clone())),
            (
                "invalid_facets".to_owned(),
                Value::Object(facets.invalid.clone()),
            ),
        ]);
        self.node(id.clone(), Value::Object(props));
        id
    }

    fn run_event(
        &mut self,
        obj: &Map<String, Value>,
        event_type: Option<RunState>,
    ) -> Result<(), OpenLineageError> {
        let run = required_obj(obj, "run", "run")?;
        let run_id = required_str(run, "runId", "run.runId")?;
        if !is_uuid(run_id) {
            self.warnings
                .push(format!("run.runId {run_id:?} is not a UUID; accepted"));
        }
        let job = self.job(obj)?;
        let facets = self.facets(run.get("facets"), FacetPlace::Run, "run.facets");
        let run_node = NodeId::new(NodeKind::Run, run_id);
        let trace_id = trace_id_in(&facets.valid);
        let parent = facets.valid.get("parent").cloned();
        let mut props = Map::from_iter([
            ("run_id".to_owned(), Value::from(run_id)),
            ("job".to_owned(), Value::from(job.to_string())),
            ("facets".to_owned(), Value::Object(facets.valid)),
            ("invalid_facets".to_owned(), Value::Object(facets.invalid)),
        ]);
        if let Some(trace_id) = trace_id {
            props.insert("trace_id".to_owned(), json!(trace_id));
        }
        self.node(run_node.clone(), Value::Object(props));
        self.edge(
            EdgeEnd::Node(job),
            EdgeEnd::Node(run_node.clone()),
            EdgeKind::HasRun,
            Value::Null,
        );
        if let Some(state) = event_type {
            self.update.runs.push(RunTransition {
                run: run_node.clone(),
                state,
                event_time_ns: self.seen_ns,
            });
        }
        if let Some(parent) = &parent {
            self.parent(parent, &run_node);
        }
        self.datasets(obj, &run_node, Some(run_id))
    }

    /// `parent` facet: parent run (of the parent job) → this run.
    fn parent(&mut self, parent: &Value, child: &NodeId) {
        let (Some(parent_run), Some(ns), Some(name)) = (
            parent["run"]["runId"].as_str(),
            parent["job"]["namespace"].as_str(),
            parent["job"]["name"].as_str(),
        ) else {
            return;
        };
        let parent_job = NodeId::namespaced(NodeKind::Job, ns, name);
        let parent_node = NodeId::new(NodeKind::Run, parent_run);
        self.node(parent_job.clone(), json!({"namespace": ns, "name": name}));
        self.node(
            parent_node.clone(),
            json!({"run_id": parent_run, "job": parent_job.to_string()}),
        );
        self.edge(
            EdgeEnd::Node(parent_job),
            EdgeEnd::Node(parent_node.clone()),
            EdgeKind::HasRun,
            Value::Null,
        );
        self.edge(
            EdgeEnd::Node(parent_node),
            EdgeEnd::Node(child.clone()),
            EdgeKind::ParentOf,
            Value::Null,
        );
    }

    /// Inputs and outputs of a run (or, for a JobEvent, of a job).
    fn datasets(
        &mut self,
        obj: &Map<String, Value>,
        consumer: &NodeId,
        run_id: Option<&str>,
    ) -> Result<(), OpenLineageError> {
        for (list, is_input) in [("inputs", true), ("outputs", false)] {
            let items = match obj.get(list) {
                None | Some(Value::Null) => continue,
                Some(Value::Array(items)) => items,
                Some(_) => return Err(field_error(list, "must be an array")),
            };
            for (i, item) in items.iter().enumerate() {
                let path = format!("{list}[{i}]");
                let ds = item
                    .as_object()
                    .ok_or_else(|| field_error(&path, "must be an object"))?;
                let (dataset, version, facets) = self.dataset(ds, &path)?;
                let (place, io_key) = if is_input {
                    (FacetPlace::InputDataset, "inputFacets")
                } else {
                    (FacetPlace::OutputDataset, "outputFacets")
                };
                let io = self.facets(ds.get(io_key), place, &format!("{path}.{io_key}"));
                // A job event's input edge (no run) carries its facets and says where it came from.
                let job_evidence = (is_input && consumer.kind != NodeKind::Run)
                    .then(|| json!({ "via": "job event", io_key: io.valid }));
                let io_props = Value::Object(Map::from_iter([
                    (io_key.to_owned(), Value::Object(io.valid)),
                    ("invalid_facets".to_owned(), Value::Object(io.invalid)),
                ]));
                if is_input {
                    let src = match version {
                        Some(v) => {
                            self.version_node(&dataset, &v, &facets, io_props.clone(), None);
                            EdgeEnd::Node(NodeId::dataset_version(&dataset, &v))
                        }
                        None => EdgeEnd::CurrentVersionOf(dataset),
                    };
                    let evidence = job_evidence.unwrap_or(io_props);
                    self.edge(
                        src,
                        EdgeEnd::Node(consumer.clone()),
                        EdgeKind::InputTo,
                        evidence,
                    );
                } else {
                    // A write without a version facet makes the version "written by this run".
                    let v = version
                        .or_else(|| run_id.map(|r| format!("run-{r}")))
                        .unwrap_or_else(|| "unversioned".to_owned());
                    self.version_node(&dataset, &v, &facets, io_props, run_id);
                    self.edge(
                        EdgeEnd::Node(consumer.clone()),
                        EdgeEnd::Node(NodeId::dataset_version(&dataset, &v)),
                        EdgeKind::Produced,
                        Value::Null,
                    );
                }
            }
        }
        Ok(())
    }

    /// The dataset node (with its dataset facets) and the version it names, if any.
    fn dataset(
        &mut self,
        ds: &Map<String, Value>,
        path: &str,
    ) -> Result<(NodeId, Option<String>, SortedFacets), OpenLineageError> {
        let namespace = required_str(ds, "namespace", &format!("{path}.namespace"))?;
        let name = required_str(ds, "name", &format!("{path}.name"))?;
        let facets = self.facets(
            ds.get("facets"),
            FacetPlace::Dataset,
            &format!("{path}.facets"),
        );
        let version = ["version", "datasetVersion"].iter().find_map(|k| {
            facets.valid.get(*k)?["datasetVersion"]
                .as_str()
                .map(str::to_owned)
        });
        let id = self.namespaced_node(NodeKind::Dataset, namespace, name, &facets);
        Ok((id, version, facets))
    }

    fn version_node(
        &mut self,
        dataset: &NodeId,
        version: &str,
        facets: &SortedFacets,
        io_props: Value,
        produced_by: Option<&str>,
    ) {
        let id = NodeId::dataset_version(dataset, version);
        let mut invalid = facets.invalid.clone();
        let mut props = Map::from_iter([
            ("dataset".to_owned(), Value::from(dataset.to_string())),
            ("version".to_owned(), Value::from(version)),
            ("facets".to_owned(), Value::Object(facets.valid.clone())),
        ]);
        if let Value::Object(io) = io_props {
            for (k, v) in io {
                match (k.as_str(), v) {
                    ("invalid_facets", Value::Object(io_invalid)) => invalid.extend(io_invalid),
                    ("invalid_facets", _) => {}
                    (_, v) => {
                        props.insert(k, v);
                    }
                }
            }
        }
        props.insert("invalid_facets".to_owned(), Value::Object(invalid));
        if let Some(run) = produced_by {
            props.insert("produced_by".to_owned(), json!(format!("run:{run}")));
        }
        self.node(id.clone(), Value::Object(props));
        self.edge(
            EdgeEnd::Node(dataset.clone()),
            EdgeEnd::Node(id),
            EdgeKind::HasVersion,
            Value::Null,
        );
    }

    fn dataset_event(&mut self, obj: &Map<String, Value>) -> Result<(), OpenLineageError> {
        let ds = required_obj(obj, "dataset", "dataset")?;
        let (dataset, version, facets) = self.dataset(ds, "dataset")?;
        if let Some(v) = version {
            self.version_node(&dataset, &v, &facets, json!({}), None);
        }
        Ok(())
    }

    fn job_event(&mut self, obj: &Map<String, Value>) -> Result<(), OpenLineageError> {
        let job = self.job(obj)?;
        self.datasets(obj, &job, None)
    }
}

/// A W3C trace id a producer put on its run (custom facet fields `traceId` /
/// `trace_id`, at the top of a facet or inside the parent facet's `run`).
fn trace_id_in(facets: &Map<String, Value>) -> Option<String> {
    let is_trace_id =
        |s: &str| s.len() == 32 && s.chars().all(|c| c.is_ascii_hexdigit()) && s != "0".repeat(32);
    facets.values().find_map(|facet| {
        [
            &facet["traceId"],
            &facet["trace_id"],
            &facet["run"]["traceId"],
        ]
        .into_iter()
        .find_map(|v| v.as_str().filter(|s| is_trace_id(s)))
        .map(str::to_ascii_lowercase)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<ParsedEvent, OpenLineageError> {
        event_to_update(v)
    }

    fn run_event() -> Value {
        json!({
            "eventType": "COMPLETE",
            "eventTime": "2024-05-01T12:00:00.000Z",
            "run": {"runId": "3f0c1d2e-0000-4000-8000-000000000001"},
            "job": {"namespace": "training", "name": "finetune-fin"},
            "inputs": [{"namespace": "warehouse", "name": "fin-qa",
                        "facets": {"version": {"datasetVersion": "v3"}}}],
            "outputs": [{"namespace": "s3://models", "name": "fin-lora/7"}],
            "producer": "https://example.com/p",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
        })
    }

    #[test]
    fn a_run_event_becomes_job_run_and_dataset_versions() {
        let parsed = parse(run_event()).unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let u = &parsed.update;
        let ids: Vec<String> = u.nodes.iter().map(|n| n.id.to_string()).collect();
        assert!(ids.contains(&"job:training:finetune-fin".to_owned()));
        assert!(ids.contains(&"run:3f0c1d2e-0000-4000-8000-000000000001".to_owned()));
        assert!(ids.contains(&"dataset_version:warehouse:fin-qa@v3".to_owned()));
        assert!(ids.contains(
            &"dataset_version:s3://models:fin-lora/7@run-3f0c1d2e-0000-4000-8000-000000000001"
                .to_owned()
        ));
        assert_eq!(u.runs.len(), 1);
        assert_eq!(u.runs[0].state, RunState::Complete);
        let key = u.event.as_ref().unwrap();
        assert_eq!(key.event_type, "COMPLETE");
    }

    #[test]
    fn missing_required_fields_are_named() {
        let mut e = run_event();
        e["run"].as_object_mut().unwrap().remove("runId");
        assert_eq!(parse(e).unwrap_err().to_string(), "run.runId: is required");
        let mut e = run_event();
        e["outputs"][0].as_object_mut().unwrap().remove("name");
        assert_eq!(
            parse(e).unwrap_err().to_string(),
            "outputs[0].name: is required"
        );
        let mut e = run_event();
        e["eventTime"] = json!("yesterday");
        assert!(parse(e).unwrap_err().to_string().starts_with("eventTime:"));
        let mut e = run_event();
        e["eventType"] = json!("DONE");
        assert!(parse(e).unwrap_err().to_string().starts_with("eventType:"));
    }

    #[test]
    fn lenient_envelopes_warn() {
        let mut e = run_event();
        e["eventTime"] = json!("2024-05-01T12:00:00.123456");
        e["run"]["runId"] = json!("run_id");
        e.as_object_mut().unwrap().remove("schemaURL");
        let parsed = parse(e).unwrap();
        assert_eq!(parsed.warnings.len(), 3, "{:?}", parsed.warnings);
    }

    #[test]
    fn a_broken_known_facet_is_kept_as_invalid() {
        let mut e = run_event();
        e["outputs"][0]["outputFacets"] = json!({"outputStatistics": {"rowCount": "wrong"}});
        let parsed = parse(e).unwrap();
        assert_eq!(parsed.warnings.len(), 1);
        assert!(
            parsed.warnings[0].contains("outputStatistics"),
            "{:?}",
            parsed.warnings
        );
        let version = parsed
            .update
            .nodes
            .iter()
            .find(|n| n.id.kind == NodeKind::DatasetVersion && n.id.key.starts_with("s3://"))
            .unwrap();
        assert_eq!(
            version.props["invalid_facets"]["outputStatistics"]["rowCount"],
            "wrong"
        );
        assert!(version.props["outputFacets"]
            .get("outputStatistics")
            .is_none());
    }

    #[test]
    fn a_trace_id_on_the_run_links_it_to_the_trace() {
        let mut e = run_event();
        e["run"]["facets"] = json!({"parent": {
            "run": {"runId": "0193aa00-1111-7222-8333-444455556666",
                    "traceId": "4BF92F3577B34DA6A3CE929D0E0E4736"},
            "job": {"namespace": "airflow", "name": "nightly"}}});
        let parsed = parse(e).unwrap();
        let run = parsed
            .update
            .nodes
            .iter()
            .find(|n| n.id.kind == NodeKind::Run && n.id.key.starts_with("3f0c"))
            .unwrap();
        assert_eq!(run.props["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        let parent = parsed
            .update
            .edges
            .iter()
            .find(|e| e.kind == EdgeKind::ParentOf)
            .unwrap();
        assert_eq!(
            parent.src,
            EdgeEnd::Node(NodeId::new(
                NodeKind::Run,
                "0193aa00-1111-7222-8333-444455556666"
            ))
        );
    }

    #[test]
    fn uuids_are_recognized() {
        assert!(is_uuid("ea041791-68bc-4ae1-bd89-4c8106a157e4"));
        assert!(!is_uuid("run_id"));
        assert!(!is_uuid("ea041791-68bc-4ae1-bd89-4c8106a157e"));
    }
}
