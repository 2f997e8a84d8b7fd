//! Changes upstream of an affected series, read off the lineage subgraph that ends at
//! it: a node newly bound to an instance or route (an edge first seen near the onset),
//! a completed OpenLineage run, a dataset version with drift. Each change names the
//! attribute value it is (so the contrast can back it), the values it feeds
//! downstream, and its path to the affected node.

use std::collections::{BTreeMap, HashMap, VecDeque};

use threadline_model::{EdgeKind, LineageGraph, NodeId, NodeKind};

use crate::rca::{CandidateKind, Change};
use crate::rollup::{minute_of, Dimension};

/// How far before the onset a binding or run counts as a change; drift: a day.
const CHANGE_WINDOW_MINUTES: i64 = 30;
const DRIFT_WINDOW_MINUTES: i64 = 24 * 60;
/// How far after the onset.
const AFTER_MINUTES: i64 = 5;

/// The attribute value a node stands for in rollups, if any.
pub fn attribute_of(id: &NodeId) -> Option<(Dimension, String)> {
    let dim = match id.kind {
        NodeKind::Adapter => Dimension::Adapter,
        NodeKind::Model => Dimension::Model,
        NodeKind::Image => Dimension::Image,
        NodeKind::Instance => Dimension::Instance,
        NodeKind::Route => Dimension::Route,
        // prompt:<template>@<version>: rollups key on the version.
        NodeKind::Prompt => {
            let version = id.key.rsplit_once('@').map_or(id.key.as_str(), |(_, v)| v);
            return Some((Dimension::PromptVersion, version.to_owned()));
        }
        _ => return None,
    };
    Some((dim, id.key.clone()))
}

fn change_kind(src: &NodeId, edge: EdgeKind) -> Option<CandidateKind> {
    match (src.kind, edge) {
        (NodeKind::Adapter, EdgeKind::ServedBy) => Some(CandidateKind::AdapterRollout),
        (NodeKind::Model | NodeKind::ModelVersion, EdgeKind::ServedBy) => {
            Some(CandidateKind::ModelRollout)
        }
        (NodeKind::Image, EdgeKind::RunsOn) => Some(CandidateKind::ImageRollout),
        (NodeKind::Prompt, EdgeKind::PromptFor) => Some(CandidateKind::PromptVersion),
        (NodeKind::Instance, EdgeKind::Answers) => Some(CandidateKind::InstanceAdded),
        _ => None,
    }
}

/// Downstream neighbours within the subgraph.
fn downstream(graph: &LineageGraph) -> HashMap<&NodeId, Vec<&NodeId>> {
    let mut out: HashMap<&NodeId, Vec<&NodeId>> = HashMap::new();
    for e in &graph.edges {
        out.entry(&e.src).or_default().push(&e.dst);
    }
    out
}

/// Shortest downstream path from `from` to `to` within the subgraph.
fn path(next: &HashMap<&NodeId, Vec<&NodeId>>, from: &NodeId, to: &NodeId) -> Vec<String> {
    let mut parent: HashMap<&NodeId, &NodeId> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = std::collections::HashSet::from([from]);
    while let Some(n) = queue.pop_front() {
        if n == to {
            let mut out = vec![n.to_string()];
            let mut at = n;
            while let Some(p) = parent.get(at) {
                out.push(p.to_string());
                at = p;
            }
            out.reverse();
            return out;
        }
        for m in next.get(n).into_iter().flatten() {
            if seen.insert(*m) {
                parent.insert(*m, n);
                queue.push_back(m);
            }
        }
    }
    Vec::new()
}

/// The first attribute values downstream of `from` (excluding itself), nearest first:
/// what it produced (a run → its adapter; a drifted dataset version → the adapter
/// trained on it), not what serves those in turn (the adapter's instances, which
/// serve other things too and would lend a run their own contrast).
fn feeds(next: &HashMap<&NodeId, Vec<&NodeId>>, from: &NodeId) -> Vec<(Dimension, String)> {
    let mut out = Vec::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = std::collections::HashSet::from([from]);
    while let Some(n) = queue.pop_front() {
        if n != from {
            if let Some(a) = attribute_of(n) {
                if a.0 != Dimension::Route && !out.contains(&a) {
                    out.push(a);
                }
                continue;
            }
        }
        for m in next.get(n).into_iter().flatten() {
            if seen.insert(*m) {
                queue.push_back(m);
            }
        }
    }
    out
}

/// The changes in `graph` (the upstream subgraph of `affected`) near `onset_minute`.
pub fn changes_upstream(graph: &LineageGraph, affected: &NodeId, onset_minute: i64) -> Vec<Change> {
    let next = downstream(graph);
    let near = |ns: i64, before: i64| {
        let m = minute_of(ns);
        m >= onset_minute - before && m <= onset_minute + AFTER_MINUTES
    };
    // Bindings: per node, the earliest edge of its kind first seen in the window.
    let mut bindings: BTreeMap<(&NodeId, CandidateKind), (i64, Vec<String>)> = BTreeMap::new();
    for e in &graph.edges {
        let Some(kind) = change_kind(&e.src, e.kind) else {
            continue;
        };
        if !near(e.first_seen_ns, CHANGE_WINDOW_MINUTES) {
            continue;
        }
        let slot = bindings
            .entry((&e.src, kind))
            .or_insert((e.first_seen_ns, Vec::new()));
        slot.0 = slot.0.min(e.first_seen_ns);
        slot.1.push(e.dst.to_string());
    }
    let mut out = Vec::new();
    for ((node, kind), (first_ns, bound_to)) in bindings {
        out.push(Change {
            kind,
            subject: node.to_string(),
            at_minute: minute_of(first_ns),
            attribute: attribute_of(node),
            feeds: Vec::new(),
            path: path(&next, node, affected),
            detail: serde_json::json!({ "newly_bound_to": bound_to, "first_seen_ns": first_ns }),
        });
    }
    for n in &graph.nodes {
        let change = match n.id.kind {
            NodeKind::Run => {
                let state = n.props.get("state").and_then(|s| s.as_str());
                let ended = n.props.get("ended_at_ns").and_then(|t| t.as_i64());
                match (state, ended) {
                    (Some("COMPLETE"), Some(t)) if near(t, CHANGE_WINDOW_MINUTES) => Some((
                        CandidateKind::RunCompleted,
                        t,
                        serde_json::json!({ "state": "COMPLETE" }),
                    )),
                    _ => None,
                }
            }
            NodeKind::DatasetVersion => {
                let drift = n.props.get("drift").filter(|d| {
                    d.get("changes")
                        .and_then(|c| c.as_array())
                        .is_some_and(|c| !c.is_empty())
                });
                match drift {
                    Some(d) if near(n.first_seen_ns, DRIFT_WINDOW_MINUTES) => {
                        Some((CandidateKind::DatasetDrift, n.first_seen_ns, d.clone()))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some((kind, at_ns, detail)) = change {
            out.push(Change {
                kind,
                subject: n.id.to_string(),
                at_minute: minute_of(at_ns),
                attribute: None,
                feeds: feeds(&next, &n.id),
                path: path(&next, &n.id, affected),
                detail,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::{LineageEdge, LineageNode};

    fn node(id: &str, first: i64, props: serde_json::Value) -> LineageNode {
        LineageNode {
            id: id.parse().unwrap(),
            first_seen_ns: first,
            last_seen_ns: first,
            props,
        }
    }

    fn edge(src: &str, dst: &str, kind: EdgeKind, first: i64) -> LineageEdge {
        LineageEdge {
            valid_from_ns: None,
            superseded_ns: None,
            declared: false,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            kind,
            first_seen_ns: first,
            last_seen_ns: first,
            evidence: serde_json::Value::Null,
        }
    }

    #[test]
    fn new_bindings_runs_and_drift_near_the_onset_are_changes_with_paths() {
        let min = 60_000_000_000i64;
        let onset = 1000;
        let graph = LineageGraph {
            nodes: vec![
                node("route:/v1/chat", 0, serde_json::json!({})),
                node("instance:i-3", 0, serde_json::json!({})),
                node("adapter:fin@7", 990 * min, serde_json::json!({})),
                node(
                    "run:r1",
                    900 * min,
                    serde_json::json!({"state": "COMPLETE", "ended_at_ns": 985 * min}),
                ),
                node(
                    "dataset_version:ds:v2",
                    500 * min,
                    serde_json::json!({"drift": {"changes": [{"kind": "null_rate"}]}}),
                ),
                node("prompt:chat@v3", 0, serde_json::json!({})),
            ],
            edges: vec![
                edge("instance:i-3", "route:/v1/chat", EdgeKind::Answers, 0),
                edge(
                    "adapter:fin@7",
                    "instance:i-3",
                    EdgeKind::ServedBy,
                    999 * min,
                ),
                edge("run:r1", "adapter:fin@7", EdgeKind::Produced, 985 * min),
                edge(
                    "dataset_version:ds:v2",
                    "run:r1",
                    EdgeKind::InputTo,
                    900 * min,
                ),
                // Bound long ago: not a change.
                edge("prompt:chat@v3", "route:/v1/chat", EdgeKind::PromptFor, 0),
            ],
        };
        let changes = changes_upstream(&graph, &"route:/v1/chat".parse().unwrap(), onset);
        let kinds: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| (c.kind.as_str(), c.subject.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("adapter_rollout", "adapter:fin@7"),
                ("run_completed", "run:r1"),
                ("dataset_drift", "dataset_version:ds:v2")
            ]
        );
        assert_eq!(
            changes[0].attribute,
            Some((Dimension::Adapter, "fin@7".into()))
        );
        assert_eq!(changes[0].at_minute, 999);
        assert_eq!(
            changes[2].path,
            [
                "dataset_version:ds:v2",
                "run:r1",
                "adapter:fin@7",
                "instance:i-3",
                "route:/v1/chat"
            ]
        );
        // A run and a drifted dataset feed the adapter trained from them, not the
        // instance serving it.
        assert_eq!(changes[1].feeds, [(Dimension::Adapter, "fin@7".into())]);
        assert_eq!(changes[2].feeds, [(Dimension::Adapter, "fin@7".into())]);
        assert_eq!(
            attribute_of(&"prompt:chat@v3".parse().unwrap()),
            Some((Dimension::PromptVersion, "v3".into()))
        );
    }
}
