//! Projecting a walked subgraph onto some node kinds (`kinds=` on lineage queries):
//! nodes of other kinds are dropped, and each kept node that was reached through
//! dropped ones gets a `via` link to its nearest kept ancestor on the walk, carrying
//! the dropped path, so "which adapters come from this dataset" still shows how.

use std::collections::{HashMap, HashSet, VecDeque};

use threadline_model::{Direction, LineageGraph, NodeId, NodeKind};

/// A link through dropped nodes: `src` feeds `dst` by way of `path` (in flow order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViaLink {
    pub src: NodeId,
    pub dst: NodeId,
    pub path: Vec<NodeId>,
}

/// Keeps `root` and the nodes of `kinds`, the edges between kept nodes, and returns
/// the `via` links that replace paths through dropped nodes.
pub fn project_kinds(
    graph: &mut LineageGraph,
    root: &NodeId,
    kinds: &[NodeKind],
    direction: Direction,
) -> Vec<ViaLink> {
    let keep = |id: &NodeId| id == root || kinds.contains(&id.kind);
    // Neighbours moving away from the root, with whether the hop follows the flow.
    let mut next: HashMap<&NodeId, Vec<(&NodeId, bool)>> = HashMap::new();
    for e in &graph.edges {
        if direction != Direction::Upstream {
            next.entry(&e.src).or_default().push((&e.dst, true));
        }
        if direction != Direction::Downstream {
            next.entry(&e.dst).or_default().push((&e.src, false));
        }
    }
    let mut parent: HashMap<&NodeId, (&NodeId, bool)> = HashMap::new();
    let mut seen: HashSet<&NodeId> = HashSet::from([root]);
    let mut queue = VecDeque::from([root]);
    while let Some(node) = queue.pop_front() {
        for &(n, downstream) in next.get(node).into_iter().flatten() {
            if seen.insert(n) {
                parent.insert(n, (node, downstream));
                queue.push_back(n);
            }
        }
    }
    let mut links = Vec::new();
    for node in graph
        .nodes
        .iter()
        .map(|n| &n.id)
        .filter(|id| keep(id) && *id != root)
    {
        let Some(&(mut up, downstream)) = parent.get(node) else {
            continue;
        };
        let mut dropped = Vec::new();
        while !keep(up) {
            dropped.push(up.clone());
            match parent.get(up) {
                Some(&(p, _)) => up = p,
                None => break,
            }
        }
        if dropped.is_empty() || !keep(up) {
            continue;
        }
        // `dropped` runs from the node back towards the kept ancestor.
        let (src, dst) = if downstream {
            dropped.reverse();
            (up.clone(), node.clone())
        } else {
            (node.clone(), up.clone())
        };
        links.push(ViaLink {
            src,
            dst,
            path: dropped,
        });
    }
    graph.nodes.retain(|n| keep(&n.id));
    let kept: HashSet<NodeId> = graph.nodes.iter().map(|n| n.id.clone()).collect();
    graph
        .edges
        .retain(|e| kept.contains(&e.src) && kept.contains(&e.dst));
    links
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use threadline_model::{EdgeKind, LineageEdge, LineageNode};

    use super::*;

    fn id(s: &str) -> NodeId {
        s.parse().unwrap()
    }

    #[test]
    fn dropped_kinds_leave_via_links_with_their_path() {
        let nodes = [
            "dataset:w:qa",
            "dataset_version:w:qa@v3",
            "run:r1",
            "adapter:fin@7",
            "instance:i3",
        ];
        let edge = |s: &str, d: &str, kind| LineageEdge {
            valid_from_ns: None,
            superseded_ns: None,
            declared: false,
            src: id(s),
            dst: id(d),
            kind,
            first_seen_ns: 0,
            last_seen_ns: 0,
            evidence: json!({}),
        };
        let mut graph = LineageGraph {
            nodes: nodes
                .iter()
                .map(|n| LineageNode {
                    id: id(n),
                    first_seen_ns: 0,
                    last_seen_ns: 0,
                    props: json!({}),
                })
                .collect(),
            edges: vec![
                edge(
                    "dataset:w:qa",
                    "dataset_version:w:qa@v3",
                    EdgeKind::HasVersion,
                ),
                edge("dataset_version:w:qa@v3", "run:r1", EdgeKind::InputTo),
                edge("run:r1", "adapter:fin@7", EdgeKind::Produced),
                edge("adapter:fin@7", "instance:i3", EdgeKind::ServedBy),
            ],
        };
        let links = project_kinds(
            &mut graph,
            &id("dataset:w:qa"),
            &[NodeKind::Adapter, NodeKind::Instance],
            Direction::Downstream,
        );
        assert_eq!(graph.nodes.len(), 3);
        assert_eq!(graph.edges.len(), 1, "adapter → instance stays");
        assert_eq!(
            links,
            [ViaLink {
                src: id("dataset:w:qa"),
                dst: id("adapter:fin@7"),
                path: vec![id("dataset_version:w:qa@v3"), id("run:r1")],
            }]
        );
    }
}
