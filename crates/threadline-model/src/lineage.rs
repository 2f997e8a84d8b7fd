//! The lineage graph's typed vocabulary: node kinds and ids, edge kinds, and the
//! upserts that ingest (OpenLineage events, registry manifests, span bindings) hands
//! to the store. Edges always point the way data and dependence flow — `src` feeds
//! `dst` — so "downstream" is what breaks when `src` does, and "upstream" is where a
//! thing came from.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a node is. The string forms are the `kind` prefix of public node ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Dataset,
    DatasetVersion,
    Job,
    Run,
    /// A base model (Hugging Face id or similar).
    Model,
    ModelVersion,
    /// A LoRA adapter, fine-tune, quantization or merge of a base model.
    Adapter,
    /// One version of a prompt template.
    Prompt,
    Deployment,
    Image,
    Route,
    Instance,
    Service,
}

impl NodeKind {
    pub const ALL: [NodeKind; 13] = [
        NodeKind::Dataset,
        NodeKind::DatasetVersion,
        NodeKind::Job,
        NodeKind::Run,
        NodeKind::Model,
        NodeKind::ModelVersion,
        NodeKind::Adapter,
        NodeKind::Prompt,
        NodeKind::Deployment,
        NodeKind::Image,
        NodeKind::Route,
        NodeKind::Instance,
        NodeKind::Service,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Dataset => "dataset",
            NodeKind::DatasetVersion => "dataset_version",
            NodeKind::Job => "job",
            NodeKind::Run => "run",
            NodeKind::Model => "model",
            NodeKind::ModelVersion => "model_version",
            NodeKind::Adapter => "adapter",
            NodeKind::Prompt => "prompt",
            NodeKind::Deployment => "deployment",
            NodeKind::Image => "image",
            NodeKind::Route => "route",
            NodeKind::Instance => "instance",
            NodeKind::Service => "service",
        }
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no node kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown node kind {0:?} (expected one of dataset, dataset_version, job, run, model, model_version, adapter, prompt, deployment, image, route, instance, service)")]
pub struct UnknownNodeKind(pub String);

impl FromStr for NodeKind {
    type Err = UnknownNodeKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownNodeKind(s.to_owned()))
    }
}

/// A node's identity within a tenant: its kind and a key. The public form is
/// `kind:key`, where the key is `namespace:name` for datasets and jobs
/// (`dataset:warehouse:fin-qa`) and a bare name for the rest (`adapter:fin-lora@7`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId {
    pub kind: NodeKind,
    pub key: String,
}

impl NodeId {
    pub fn new(kind: NodeKind, key: impl Into<String>) -> Self {
        Self {
            kind,
            key: key.into(),
        }
    }

    /// `dataset:NS:NAME`, `job:NS:NAME`.
    pub fn namespaced(kind: NodeKind, namespace: &str, name: &str) -> Self {
        Self::new(kind, format!("{namespace}:{name}"))
    }

    /// The version `version` of dataset `dataset` (`dataset_version:NS:NAME@VERSION`).
    pub fn dataset_version(dataset: &NodeId, version: &str) -> Self {
        Self::new(
            NodeKind::DatasetVersion,
            format!("{}@{version}", dataset.key),
        )
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.key)
    }
}

/// Why a string is not a node id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeIdError {
    #[error("node id {0:?} has no kind prefix (expected kind:key, e.g. dataset:warehouse:fin-qa)")]
    NoKind(String),
    #[error("node id {id:?}: {source}")]
    Kind { id: String, source: UnknownNodeKind },
    #[error("node id {0:?} has an empty key")]
    EmptyKey(String),
}

impl FromStr for NodeId {
    type Err = NodeIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, key) = s
            .split_once(':')
            .ok_or_else(|| NodeIdError::NoKind(s.to_owned()))?;
        let kind = kind.parse().map_err(|source| NodeIdError::Kind {
            id: s.to_owned(),
            source,
        })?;
        if key.is_empty() {
            return Err(NodeIdError::EmptyKey(s.to_owned()));
        }
        Ok(NodeId::new(kind, key))
    }
}

/// What an edge means; `src` feeds `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// dataset → dataset_version, model → model_version.
    HasVersion,
    /// dataset_version → run that read it.
    InputTo,
    /// run → dataset_version (or adapter / model_version) it wrote.
    Produced,
    /// job → one of its runs.
    HasRun,
    /// parent run → child run.
    ParentOf,
    /// base model → adapter / model version derived from it (the relation —
    /// adapter, finetune, quantized, merge — is in the evidence).
    BaseOf,
    /// adapter / model_version → instance serving it.
    ServedBy,
    /// image → instance running it.
    RunsOn,
    /// deployment → instance it deploys.
    Deploys,
    /// instance → route it answers.
    Answers,
    /// prompt template version → route / service using it.
    PromptFor,
    /// callee service → caller service (the caller depends on the callee).
    Serves,
    /// dataset holding an artifact's files → the adapter / model version registered
    /// with that artifact URI.
    ArtifactOf,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 13] = [
        EdgeKind::HasVersion,
        EdgeKind::InputTo,
        EdgeKind::Produced,
        EdgeKind::HasRun,
        EdgeKind::ParentOf,
        EdgeKind::BaseOf,
        EdgeKind::ServedBy,
        EdgeKind::RunsOn,
        EdgeKind::Deploys,
        EdgeKind::Answers,
        EdgeKind::PromptFor,
        EdgeKind::Serves,
        EdgeKind::ArtifactOf,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::HasVersion => "has_version",
            EdgeKind::InputTo => "input_to",
            EdgeKind::Produced => "produced",
            EdgeKind::HasRun => "has_run",
            EdgeKind::ParentOf => "parent_of",
            EdgeKind::BaseOf => "base_of",
            EdgeKind::ServedBy => "served_by",
            EdgeKind::RunsOn => "runs_on",
            EdgeKind::Deploys => "deploys",
            EdgeKind::Answers => "answers",
            EdgeKind::PromptFor => "prompt_for",
            EdgeKind::Serves => "serves",
            EdgeKind::ArtifactOf => "artifact_of",
        }
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EdgeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EdgeKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown edge kind {s:?}"))
    }
}

/// Lifecycle state of an OpenLineage run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunState {
    Start,
    Running,
    Complete,
    Fail,
    Abort,
    Other,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Start => "START",
            RunState::Running => "RUNNING",
            RunState::Complete => "COMPLETE",
            RunState::Fail => "FAIL",
            RunState::Abort => "ABORT",
            RunState::Other => "OTHER",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            RunState::Start,
            RunState::Running,
            RunState::Complete,
            RunState::Fail,
            RunState::Abort,
            RunState::Other,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// COMPLETE, FAIL and ABORT end a run.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Complete | RunState::Fail | RunState::Abort)
    }
}

/// Creates the node if new, else widens its seen-interval; `props` (a JSON object) is
/// merged into the stored properties (RFC 7396 merge patch: later values win).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeUpsert {
    pub id: NodeId,
    pub seen_ns: i64,
    pub props: serde_json::Value,
}

/// Where an edge ends: a known node, or "whatever version of this dataset is newest"
/// (an input read without a version facet), resolved by the store at write time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EdgeEnd {
    Node(NodeId),
    CurrentVersionOf(NodeId),
}

/// Creates the edge if new (first seen = `seen_ns`), else widens its seen-interval.
/// `evidence` (a JSON object) is merged like node properties.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EdgeUpsert {
    pub src: EdgeEnd,
    pub dst: EdgeEnd,
    pub kind: EdgeKind,
    pub seen_ns: i64,
    pub evidence: serde_json::Value,
    /// `Some` for an edge a registry declares (it holds over this validity, whenever
    /// it was seen); `None` for one observed in spans or lineage events.
    pub declared: Option<DeclaredValidity>,
}

/// When a declared edge holds: from `from_ns` (`None`: from the start) until
/// `until_ns` (`None`: still).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredValidity {
    pub from_ns: Option<i64>,
    pub until_ns: Option<i64>,
}

/// A run's state change at an event time; the store keeps the state of the latest
/// event time, the earliest START as start and the latest terminal time as end, so
/// events arriving out of order give the same result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunTransition {
    pub run: NodeId,
    pub state: RunState,
    pub event_time_ns: i64,
}

/// The identity of a lineage event for idempotency: the same key twice is stored once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LineageEventKey {
    /// Run id for run events; the dataset or job node id for the others.
    pub subject: String,
    pub event_type: String,
    pub event_time: String,
}

/// A registry entry (model, adapter, prompt template, deployment …) as registered.
/// Registering the same spec again changes nothing; a different spec becomes the
/// node's next revision (earlier ones are kept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssetRegistration {
    pub id: NodeId,
    /// The entry as given in the manifest (a JSON object).
    pub spec: serde_json::Value,
    pub registered_ns: i64,
    /// The edges into `id` this spec declares (its base model, its model, its
    /// artifact, its training run). When the spec is a new revision, stored declared
    /// edges it no longer names are superseded at `registered_ns`, and the ones it
    /// names anew hold from then.
    pub declares: Vec<DeclaredEdge>,
}

/// An edge a registry spec declares into its own node: `src` → the asset, of `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeclaredEdge {
    pub src: NodeId,
    pub kind: EdgeKind,
}

impl EdgeKind {
    /// Kinds a registry spec declares into the asset it registers; a re-registration
    /// supersedes the ones it no longer names.
    pub const DECLARED: [EdgeKind; 4] = [
        EdgeKind::BaseOf,
        EdgeKind::HasVersion,
        EdgeKind::ArtifactOf,
        EdgeKind::Produced,
    ];

    /// Where an edge of this kind is placement observed in traffic or deployment
    /// windows (an instance runs an image, serves an adapter, answers a route, belongs
    /// to a deployment, a service calls another): it holds while it was seen. The
    /// others are provenance (what was derived from what), which holds for good unless
    /// a later registration supersedes it.
    pub fn is_placement(self) -> bool {
        matches!(
            self,
            EdgeKind::ServedBy
                | EdgeKind::RunsOn
                | EdgeKind::Deploys
                | EdgeKind::Answers
                | EdgeKind::Serves
        )
    }
}

/// What registering one asset did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AssetOutcome {
    Created,
    Unchanged,
    /// The spec changed: this is its revision number (the first is 1).
    Revised(u32),
}

/// One atomic change to the graph, e.g. everything one OpenLineage event implies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphUpdate {
    /// Registry entries, applied before the nodes and edges.
    pub assets: Vec<AssetRegistration>,
    pub nodes: Vec<NodeUpsert>,
    pub edges: Vec<EdgeUpsert>,
    pub runs: Vec<RunTransition>,
    /// When set, the update is applied only if no event with this key was applied
    /// before (a re-sent event changes nothing).
    pub event: Option<LineageEventKey>,
}

/// A node as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct LineageNode {
    pub id: NodeId,
    pub first_seen_ns: i64,
    pub last_seen_ns: i64,
    pub props: serde_json::Value,
}

/// An edge as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct LineageEdge {
    pub src: NodeId,
    pub dst: NodeId,
    pub kind: EdgeKind,
    pub first_seen_ns: i64,
    pub last_seen_ns: i64,
    pub evidence: serde_json::Value,
    /// Set when a registry revision introduced (or reinstated) the edge: it holds from
    /// then. `None`: from the start of the asset's history.
    pub valid_from_ns: Option<i64>,
    /// Set when a later registration of the edge's asset no longer declared it (or a
    /// deployment's `to`): it held until then.
    pub superseded_ns: Option<i64>,
    /// Declared by a registry (its validity is `valid_from_ns` .. `superseded_ns`),
    /// rather than observed (spans, lineage events: its seen-interval).
    pub declared: bool,
}

impl LineageEdge {
    /// Whether the edge's declared validity (`valid_from_ns` .. `superseded_ns`)
    /// covers the instant `t_ns`. Placement edges also need their seen-interval; see
    /// `threadline_lineage::validity`.
    pub fn declared_at(&self, t_ns: i64) -> bool {
        self.valid_from_ns.is_none_or(|from| from <= t_ns)
            && self.superseded_ns.is_none_or(|until| t_ns < until)
    }
}

/// Which way to walk from a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Upstream,
    Downstream,
    /// Upstream, then downstream: ancestors and descendants.
    Both,
    /// Either way at every hop: the region connected to the node (what Marquez's
    /// job/dataset graph is projected from). Not a choice of the lineage API.
    Connected,
}

impl FromStr for Direction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "upstream" | "up" => Ok(Direction::Upstream),
            "downstream" | "down" => Ok(Direction::Downstream),
            "both" => Ok(Direction::Both),
            other => Err(format!(
                "direction {other:?} is not upstream, downstream or both"
            )),
        }
    }
}

/// A subgraph: the nodes reached and the edges walked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineageGraph {
    pub nodes: Vec<LineageNode>,
    pub edges: Vec<LineageEdge>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_round_trip_and_keep_colons_in_the_key() {
        let id: NodeId = "dataset:s3://blob-source:instance.schema.table"
            .parse()
            .unwrap();
        assert_eq!(id.kind, NodeKind::Dataset);
        assert_eq!(id.key, "s3://blob-source:instance.schema.table");
        assert_eq!(
            id.to_string(),
            "dataset:s3://blob-source:instance.schema.table"
        );
        let adapter: NodeId = "adapter:fin-lora@7".parse().unwrap();
        assert_eq!(adapter, NodeId::new(NodeKind::Adapter, "fin-lora@7"));
    }

    #[test]
    fn bad_node_ids_say_what_is_wrong() {
        assert_eq!(
            "fin-lora".parse::<NodeId>(),
            Err(NodeIdError::NoKind("fin-lora".into()))
        );
        let err = "table:x".parse::<NodeId>().unwrap_err().to_string();
        assert!(err.contains("unknown node kind \"table\""), "{err}");
        assert!("adapter:".parse::<NodeId>().is_err());
    }
}
