//! The lineage chain behind one request — request →
//! route → instance → adapter / model version → base model → training run → dataset
//! versions (with their quality facets) and the prompt template version. The request's
//! own spans say which route, instance, adapter, model and prompt served it; from
//! those the graph is walked upstream. (Walking up from the instance would also bring
//! in adapters it served for *other* requests, so the trace's own adapter is the start.)

use std::collections::{BTreeMap, HashSet};

use threadline_lineage::validity::{as_of, Window};
use threadline_model::{
    Direction, EdgeKind, LineageEdge, LineageGraph, LineageNode, NodeId, NodeKind, SpanRecord,
    TenantId, TraceId,
};
use threadline_store::{SkeletonSpan, SpanReader, Store, StoreError, WalkLimits};

use crate::DiagnosisError;

/// From the adapter / model: base models, model versions, the training run, the
/// artifact (two hops covers adapter ← base model version ← its model).
const SOURCE_EDGES: [EdgeKind; 4] = [
    EdgeKind::BaseOf,
    EdgeKind::HasVersion,
    EdgeKind::Produced,
    EdgeKind::ArtifactOf,
];
/// From a training run: the dataset versions it read, its job, its parent run.
const RUN_EDGES: [EdgeKind; 3] = [EdgeKind::InputTo, EdgeKind::HasRun, EdgeKind::ParentOf];

/// What the request's spans say served it.
pub struct ServedBy {
    pub routes: Vec<NodeId>,
    pub instances: Vec<NodeId>,
    /// Adapters, models, prompt versions, images.
    pub sources: Vec<NodeId>,
    /// OpenLineage runs whose events carried this trace id.
    pub traced_runs: Vec<NodeId>,
}

impl ServedBy {
    fn new() -> Self {
        Self {
            routes: Vec::new(),
            instances: Vec::new(),
            sources: Vec::new(),
            traced_runs: Vec::new(),
        }
    }

    /// Every span of `spans`.
    pub fn of(spans: &[SpanRecord]) -> Self {
        let mut s = Self::new();
        for span in spans {
            s.add(span);
        }
        s
    }

    /// What one span says served the request.
    fn add(&mut self, span: &SpanRecord) {
        let Some(llm) = span.llm.as_ref() else {
            return;
        };
        let push = |v: &mut Vec<NodeId>, id: NodeId| {
            if !v.contains(&id) {
                v.push(id);
            }
        };
        if let Some(r) = &llm.route {
            push(&mut self.routes, NodeId::new(NodeKind::Route, r));
        }
        if let Some(i) = &llm.instance_id {
            push(&mut self.instances, NodeId::new(NodeKind::Instance, i));
        }
        if let Some(a) = &llm.adapter_id {
            push(&mut self.sources, NodeId::new(NodeKind::Adapter, a));
        }
        if let Some(m) = llm.model() {
            push(&mut self.sources, NodeId::new(NodeKind::Model, m));
        }
        if let Some(img) = &llm.image {
            push(&mut self.sources, NodeId::new(NodeKind::Image, img));
        }
        if let (Some(id), Some(v)) = (&llm.prompt_template_id, &llm.prompt_template_version) {
            push(
                &mut self.sources,
                threadline_lineage::registry::prompt_node(id, v),
            );
        }
    }
}

/// What a request's lineage needs of its trace, gathered one span at a time (a trace
/// of any size is never held whole).
pub struct TraceFacts {
    pub trace_id: TraceId,
    /// The span that stands for the request: the root, else the earliest.
    pub root: SkeletonSpan,
    pub start_ns: u64,
    pub end_ns: u64,
    pub served: ServedBy,
    /// The first user id a span names.
    pub user_id: Option<String>,
}

impl TraceFacts {
    /// The facts of a non-empty trace: its skeleton and each span opened in turn.
    pub fn gather(
        trace_id: TraceId,
        spans: &[SkeletonSpan],
        reader: &mut SpanReader,
    ) -> Result<Self, StoreError> {
        let root = spans
            .iter()
            .find(|s| s.parent_span_id.is_none())
            .or(spans.first())
            .cloned()
            .ok_or_else(|| StoreError::corrupt(format!("trace {trace_id} has no span")))?;
        let (start_ns, end_ns) = threadline_model::trace_tree::time_bounds(
            spans
                .iter()
                .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano)),
        );
        let mut served = ServedBy::new();
        let mut user_id = None;
        for skeleton in spans {
            let span = reader.span(skeleton)?;
            served.add(&span);
            if user_id.is_none() {
                user_id = span.llm.as_ref().and_then(|l| l.user_id.clone());
            }
        }
        Ok(Self {
            trace_id,
            root,
            start_ns,
            end_ns,
            served,
            user_id,
        })
    }

    /// The span time the request ran in.
    pub fn window(&self) -> Window {
        let ns = |t: u64| i64::try_from(t).unwrap_or(i64::MAX);
        Window {
            start_ns: ns(self.start_ns),
            end_ns: ns(self.end_ns),
        }
    }

    /// The facts of the tenant's trace `trace_id`; not found when the tenant has none.
    pub fn of_trace(
        store: &Store,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Self, DiagnosisError> {
        let (spans, mut reader) = store
            .open_trace(tenant, trace_id)?
            .ok_or_else(|| DiagnosisError::NotFound(format!("trace {trace_id} not found")))?;
        Ok(Self::gather(trace_id, &spans, &mut reader)?)
    }
}

struct Merged {
    nodes: Vec<LineageNode>,
    node_ids: HashSet<NodeId>,
    edges: Vec<LineageEdge>,
    edge_keys: HashSet<(NodeId, NodeId, EdgeKind)>,
}

impl Merged {
    fn add(&mut self, graph: LineageGraph) {
        for n in graph.nodes {
            if self.node_ids.insert(n.id.clone()) {
                self.nodes.push(n);
            }
        }
        for e in graph.edges {
            if self
                .edge_keys
                .insert((e.src.clone(), e.dst.clone(), e.kind))
            {
                self.edges.push(e);
            }
        }
    }
}

/// The graph behind what served trace `trace_id` as it stood while the request ran
/// (`window`: edges in force then, see `threadline_lineage::validity`), and the
/// OpenLineage runs that named the trace (set on `served`). Where the request's spans
/// name an image, that is the image, whatever else ran on the instance.
pub fn chain(
    store: &Store,
    tenant: &TenantId,
    trace_id: TraceId,
    window: Window,
    served: &mut ServedBy,
) -> Result<LineageGraph, StoreError> {
    served.traced_runs = store.runs_for_trace(tenant, trace_id)?;
    let mut merged = Merged {
        nodes: Vec::new(),
        node_ids: HashSet::new(),
        edges: Vec::new(),
        edge_keys: HashSet::new(),
    };
    let walk = |start: &NodeId, depth: usize, edge_kinds: Vec<EdgeKind>| {
        walk_as_of(
            store,
            tenant,
            start,
            Direction::Upstream,
            depth,
            edge_kinds,
            window,
        )
    };
    let named_images: Vec<&NodeId> = served
        .sources
        .iter()
        .filter(|s| s.kind == NodeKind::Image)
        .collect();
    for route in &served.routes {
        if let Some(g) = walk(route, 0, Vec::new())? {
            merged.add(g);
        }
    }
    for instance in &served.instances {
        // Its image and deployment, not every adapter it ever served.
        if let Some(mut g) = walk(instance, 1, vec![EdgeKind::RunsOn, EdgeKind::Deploys])? {
            if !named_images.is_empty() {
                g.edges
                    .retain(|e| e.kind != EdgeKind::RunsOn || named_images.contains(&&e.src));
                g.nodes
                    .retain(|n| n.id.kind != NodeKind::Image || named_images.contains(&&n.id));
            }
            merged.add(g);
        }
    }
    // The chain stops at the training data: the history of those datasets is their
    // own lineage (`/api/v1/lineage/{dataset}`), not this request's.
    let mut runs = Vec::new();
    for source in &served.sources {
        if let Some(g) = walk(source, 2, SOURCE_EDGES.to_vec())? {
            runs.extend(
                g.nodes
                    .iter()
                    .filter(|n| n.id.kind == NodeKind::Run)
                    .map(|n| n.id.clone()),
            );
            merged.add(g);
        }
    }
    // Training runs, and runs that named this trace: what they read.
    let mut versions = Vec::new();
    for run in runs.iter().chain(&served.traced_runs) {
        if let Some(g) = walk(run, 1, RUN_EDGES.to_vec())? {
            versions.extend(
                g.nodes
                    .iter()
                    .filter(|n| n.id.kind == NodeKind::DatasetVersion)
                    .map(|n| n.id.clone()),
            );
            merged.add(g);
        }
    }
    // And what the traced runs wrote.
    for run in &served.traced_runs {
        let outputs = walk_as_of(
            store,
            tenant,
            run,
            Direction::Downstream,
            1,
            vec![EdgeKind::Produced],
            window,
        )?;
        if let Some(g) = outputs {
            merged.add(g);
        }
    }
    for version in &versions {
        if let Some(g) = walk(version, 1, vec![EdgeKind::HasVersion])? {
            merged.add(g);
        }
    }
    Ok(LineageGraph {
        nodes: merged.nodes,
        edges: merged.edges,
    })
}

/// A walk from `start`, kept to the edges in force during `window` and the nodes they
/// reach.
fn walk_as_of(
    store: &Store,
    tenant: &TenantId,
    start: &NodeId,
    direction: Direction,
    depth: usize,
    edge_kinds: Vec<EdgeKind>,
    window: Window,
) -> Result<Option<LineageGraph>, StoreError> {
    let graph = store.walk(
        tenant,
        start,
        &WalkLimits {
            direction,
            depth,
            max_nodes: 2000,
            edge_kinds,
        },
    )?;
    Ok(graph.map(|g| {
        as_of(
            g,
            std::slice::from_ref(start),
            window,
            direction == Direction::Upstream,
        )
    }))
}

/// A binding the request's own spans made (request ← route ← instance ← adapter …),
/// between nodes of the chain or the request itself (`request:TRACE_ID`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainBinding {
    pub src: String,
    pub dst: String,
    /// `handled`, `answers`, `traced_run`, `served_by` or `runs_on`.
    pub kind: &'static str,
}

/// The lineage chain of one request.
#[derive(Clone, Debug)]
pub struct TraceLineage {
    pub trace_id: TraceId,
    /// `request:TRACE_ID`, the request's node in `bindings`.
    pub request_id: String,
    /// The span that stands for the request.
    pub root: SkeletonSpan,
    /// Node ids of the chain by role: routes, instances, adapters, model_versions,
    /// models, training_runs, traced_runs, dataset_versions, datasets, prompts,
    /// images, deployments.
    pub summary: BTreeMap<&'static str, Vec<String>>,
    pub graph: LineageGraph,
    pub bindings: Vec<ChainBinding>,
}

/// The lineage chain of the request `facts` describe. Blocking (graph walks).
pub fn trace_lineage(
    store: &Store,
    tenant: &TenantId,
    mut facts: TraceFacts,
) -> Result<TraceLineage, StoreError> {
    let window = facts.window();
    let graph = chain(store, tenant, facts.trace_id, window, &mut facts.served)?;
    let served = &facts.served;
    let node_ids: HashSet<NodeId> = graph.nodes.iter().map(|n| n.id.clone()).collect();
    // The request's own bindings, as this trace saw them.
    let request_id = format!("request:{}", facts.trace_id);
    let mut bindings = Vec::new();
    let mut bind = |src: String, dst: String, kind: &'static str| {
        bindings.push(ChainBinding { src, dst, kind });
    };
    let present = |id: &NodeId| node_ids.contains(id);
    for route in served.routes.iter().filter(|r| present(r)) {
        bind(route.to_string(), request_id.clone(), "handled");
        for instance in served.instances.iter().filter(|i| present(i)) {
            bind(instance.to_string(), route.to_string(), "answers");
        }
    }
    for run in served.traced_runs.iter().filter(|r| present(r)) {
        bind(request_id.clone(), run.to_string(), "traced_run");
    }
    for instance in served.instances.iter().filter(|i| present(i)) {
        for source in served.sources.iter().filter(|s| present(s)) {
            let kind = match source.kind {
                NodeKind::Image => "runs_on",
                NodeKind::Prompt => continue,
                _ => "served_by",
            };
            bind(source.to_string(), instance.to_string(), kind);
        }
    }
    let by_kind = |kind: NodeKind| -> Vec<String> {
        graph
            .nodes
            .iter()
            .filter(|n| n.id.kind == kind)
            .map(|n| n.id.to_string())
            .collect()
    };
    let summary: BTreeMap<&'static str, Vec<String>> = [
        ("routes", by_kind(NodeKind::Route)),
        ("instances", by_kind(NodeKind::Instance)),
        ("adapters", by_kind(NodeKind::Adapter)),
        ("model_versions", by_kind(NodeKind::ModelVersion)),
        ("models", by_kind(NodeKind::Model)),
        (
            "training_runs",
            by_kind(NodeKind::Run)
                .into_iter()
                .filter(|r| !served.traced_runs.iter().any(|t| t.to_string() == *r))
                .collect(),
        ),
        (
            "traced_runs",
            served.traced_runs.iter().map(|r| r.to_string()).collect(),
        ),
        ("dataset_versions", by_kind(NodeKind::DatasetVersion)),
        ("datasets", by_kind(NodeKind::Dataset)),
        ("prompts", by_kind(NodeKind::Prompt)),
        ("images", by_kind(NodeKind::Image)),
        ("deployments", by_kind(NodeKind::Deployment)),
    ]
    .into_iter()
    .collect();
    Ok(TraceLineage {
        trace_id: facts.trace_id,
        request_id,
        root: facts.root,
        summary,
        graph,
        bindings,
    })
}
