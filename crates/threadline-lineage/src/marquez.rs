//! Marquez's lineage graph (`{"graph": [{id, type, data, inEdges, outEdges}]}`) as a
//! projection of ours: only jobs and datasets, a job linked to the datasets any of
//! its runs read (dataset → job) and wrote (job → dataset), dataset versions folded
//! into their dataset. Tools written for Marquez can read Threadline through it.
//!
//! Pure: it projects a subgraph the store walked once (`walk_depth` says how deep)
//! instead of asking the store hop by hop.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde_json::{json, Value};
use threadline_model::{Direction, EdgeKind, LineageGraph, LineageNode, NodeId, NodeKind};

/// Runs of one job looked at, most recent first.
const MAX_RUNS_PER_JOB: usize = 100;

/// The edge kinds a Marquez graph is made of.
pub const EDGE_KINDS: [EdgeKind; 4] = [
    EdgeKind::HasRun,
    EdgeKind::InputTo,
    EdgeKind::Produced,
    EdgeKind::HasVersion,
];

/// How deep (in our edges followed either way, `EDGE_KINDS` only) a walk must go for a
/// Marquez graph `depth` job/dataset hops deep: a hop is up to three edges (job → run
/// → dataset version → dataset), and the nodes of the last hop need their own
/// neighbours for their edges.
pub fn walk_depth(depth: usize) -> usize {
    3 * (depth + 1)
}

/// A walked subgraph, indexed by node and edge kind.
struct Subgraph<'a> {
    nodes: HashMap<&'a NodeId, &'a LineageNode>,
    /// (node, edge kind, direction from it) → neighbours.
    next: HashMap<(&'a NodeId, EdgeKind, bool), Vec<&'a NodeId>>,
}

impl<'a> Subgraph<'a> {
    fn of(graph: &'a LineageGraph) -> Self {
        let nodes = graph.nodes.iter().map(|n| (&n.id, n)).collect();
        let mut next: HashMap<_, Vec<&NodeId>> = HashMap::new();
        for e in &graph.edges {
            next.entry((&e.src, e.kind, true)).or_default().push(&e.dst);
            next.entry((&e.dst, e.kind, false))
                .or_default()
                .push(&e.src);
        }
        Self { nodes, next }
    }

    fn step(&self, from: &NodeId, direction: Direction, edge: EdgeKind) -> Vec<&'a LineageNode> {
        let downstream = direction == Direction::Downstream;
        self.next
            .get(&(from, edge, downstream))
            .into_iter()
            .flatten()
            .filter(|id| **id != from)
            .filter_map(|id| self.nodes.get(id).copied())
            .collect()
    }

    /// The dataset a version belongs to (or the node itself when it is a dataset).
    fn dataset_of(&self, node: &LineageNode) -> Option<NodeId> {
        match node.id.kind {
            NodeKind::Dataset => Some(node.id.clone()),
            NodeKind::DatasetVersion => self
                .step(&node.id, Direction::Upstream, EdgeKind::HasVersion)
                .into_iter()
                .map(|n| n.id.clone())
                .find(|id| id.kind == NodeKind::Dataset),
            _ => None,
        }
    }

    /// The job a run (or job) node stands for.
    fn job_of(&self, node: &LineageNode) -> Option<NodeId> {
        match node.id.kind {
            NodeKind::Job => Some(node.id.clone()),
            NodeKind::Run => self
                .step(&node.id, Direction::Upstream, EdgeKind::HasRun)
                .into_iter()
                .map(|n| n.id.clone())
                .find(|id| id.kind == NodeKind::Job),
            _ => None,
        }
    }

    /// (inputs, outputs) datasets of a job.
    fn job_io(&self, job: &NodeId) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let mut runs = self.step(job, Direction::Downstream, EdgeKind::HasRun);
        runs.sort_by_key(|r| std::cmp::Reverse(r.last_seen_ns));
        runs.truncate(MAX_RUNS_PER_JOB);
        let mut inputs = BTreeSet::new();
        let mut outputs = BTreeSet::new();
        // A JobEvent links datasets to the job itself.
        let holders = std::iter::once(job).chain(runs.iter().map(|r| &r.id));
        for holder in holders {
            for v in self.step(holder, Direction::Upstream, EdgeKind::InputTo) {
                inputs.extend(self.dataset_of(v));
            }
            for v in self.step(holder, Direction::Downstream, EdgeKind::Produced) {
                outputs.extend(self.dataset_of(v));
            }
        }
        (inputs, outputs)
    }

    /// (jobs reading, jobs writing) a dataset.
    fn dataset_io(&self, dataset: &NodeId) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let mut readers = BTreeSet::new();
        let mut writers = BTreeSet::new();
        for v in self.step(dataset, Direction::Downstream, EdgeKind::HasVersion) {
            for consumer in self.step(&v.id, Direction::Downstream, EdgeKind::InputTo) {
                readers.extend(self.job_of(consumer));
            }
            for producer in self.step(&v.id, Direction::Upstream, EdgeKind::Produced) {
                writers.extend(self.job_of(producer));
            }
        }
        (readers, writers)
    }
}

pub fn namespace_and_name(node: &LineageNode) -> (String, String) {
    let ns = node.props["namespace"].as_str().map(str::to_owned);
    let name = node.props["name"].as_str().map(str::to_owned);
    match (ns, name) {
        (Some(ns), Some(name)) => (ns, name),
        _ => {
            let (ns, name) = node.id.key.rsplit_once(':').unwrap_or(("", &node.id.key));
            (ns.to_owned(), name.to_owned())
        }
    }
}

fn node_data(node: &LineageNode, inputs: &BTreeSet<NodeId>, outputs: &BTreeSet<NodeId>) -> Value {
    let (namespace, name) = namespace_and_name(node);
    let id = json!({ "namespace": namespace, "name": name });
    let facets = node.props.get("facets").cloned().unwrap_or(json!({}));
    let ids = |set: &BTreeSet<NodeId>| -> Vec<Value> {
        set.iter()
            .map(|d| {
                let (ns, name) = d.key.rsplit_once(':').unwrap_or(("", &d.key));
                json!({ "namespace": ns, "name": name })
            })
            .collect()
    };
    match node.id.kind {
        NodeKind::Job => json!({
            "type": "BATCH",
            "id": id,
            "name": name,
            "namespace": namespace,
            "inputs": ids(inputs),
            "outputs": ids(outputs),
            "facets": facets,
        }),
        _ => json!({
            "type": "DB_TABLE",
            "id": id,
            "name": name,
            "namespace": namespace,
            "fields": facets["schema"]["fields"].clone(),
            "facets": facets,
        }),
    }
}

/// The Marquez-shaped graph around `start`, `depth` job/dataset hops out each way, of
/// a subgraph walked `walk_depth(depth)` deep from it over `EDGE_KINDS`.
pub fn lineage_graph(graph: &LineageGraph, start: &NodeId, depth: usize) -> Value {
    let sub = Subgraph::of(graph);
    // node → (ins, outs): for a job its input / output datasets; for a dataset the jobs
    // writing it / reading it.
    let mut io: BTreeMap<NodeId, (BTreeSet<NodeId>, BTreeSet<NodeId>)> = BTreeMap::new();
    let mut queue = VecDeque::from([(start.clone(), 0usize)]);
    while let Some((id, hops)) = queue.pop_front() {
        if io.contains_key(&id) {
            continue;
        }
        let (ins, outs) = match id.kind {
            NodeKind::Job => sub.job_io(&id),
            _ => {
                let (readers, writers) = sub.dataset_io(&id);
                (writers, readers)
            }
        };
        if hops < depth {
            for next in ins.iter().chain(outs.iter()) {
                if !io.contains_key(next) {
                    queue.push_back((next.clone(), hops + 1));
                }
            }
        }
        io.insert(id, (ins, outs));
    }
    let mut out = Vec::new();
    for (id, (ins, outs)) in &io {
        let Some(node) = sub.nodes.get(id) else {
            continue;
        };
        let edge = |origin: &NodeId, destination: &NodeId| json!({ "origin": origin.to_string(), "destination": destination.to_string() });
        let in_edges: Vec<Value> = ins.iter().map(|o| edge(o, id)).collect();
        let out_edges: Vec<Value> = outs.iter().map(|d| edge(id, d)).collect();
        let (inputs, outputs) = if id.kind == NodeKind::Job {
            (ins.clone(), outs.clone())
        } else {
            (BTreeSet::new(), BTreeSet::new())
        };
        out.push(json!({
            "id": id.to_string(),
            "type": if id.kind == NodeKind::Job { "JOB" } else { "DATASET" },
            "data": node_data(node, &inputs, &outputs),
            "inEdges": in_edges,
            "outEdges": out_edges,
        }));
    }
    json!({ "graph": out })
}

#[cfg(test)]
mod tests {
    use threadline_model::LineageEdge;

    use super::*;

    fn node(id: &str, seen: i64) -> LineageNode {
        LineageNode {
            id: id.parse().unwrap(),
            first_seen_ns: seen,
            last_seen_ns: seen,
            props: json!({}),
        }
    }

    fn edge(src: &str, kind: EdgeKind, dst: &str) -> LineageEdge {
        LineageEdge {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            kind,
            first_seen_ns: 0,
            last_seen_ns: 0,
            evidence: Value::Null,
            valid_from_ns: None,
            superseded_ns: None,
            declared: false,
        }
    }

    #[test]
    fn jobs_link_to_the_datasets_their_runs_read_and_wrote_versions_folded() {
        let graph = LineageGraph {
            nodes: vec![
                node("job:train:ft", 1),
                node("run:r1", 2),
                node("dataset:wh:raw", 1),
                node("dataset_version:wh:raw@v1", 1),
                node("dataset:wh:model", 3),
                node("dataset_version:wh:model@v1", 3),
            ],
            edges: vec![
                edge("job:train:ft", EdgeKind::HasRun, "run:r1"),
                edge(
                    "dataset:wh:raw",
                    EdgeKind::HasVersion,
                    "dataset_version:wh:raw@v1",
                ),
                edge("dataset_version:wh:raw@v1", EdgeKind::InputTo, "run:r1"),
                edge("run:r1", EdgeKind::Produced, "dataset_version:wh:model@v1"),
                edge(
                    "dataset:wh:model",
                    EdgeKind::HasVersion,
                    "dataset_version:wh:model@v1",
                ),
            ],
        };
        let out = lineage_graph(&graph, &"job:train:ft".parse().unwrap(), 1);
        let ids: Vec<&str> = out["graph"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["dataset:wh:model", "dataset:wh:raw", "job:train:ft"]);
        let job = &out["graph"][2];
        assert_eq!(job["inEdges"][0]["origin"], "dataset:wh:raw");
        assert_eq!(job["outEdges"][0]["destination"], "dataset:wh:model");
        assert_eq!(job["data"]["inputs"][0]["name"], "raw");
        // The raw dataset is read by the job; at depth 0 only the start is shown.
        assert_eq!(
            out["graph"][1]["outEdges"][0]["destination"],
            "job:train:ft"
        );
        let alone = lineage_graph(&graph, &"dataset:wh:raw".parse().unwrap(), 0);
        assert_eq!(alone["graph"].as_array().unwrap().len(), 1);
    }
}
