//! When an edge holds. Edges a registry declared hold over their declared validity (a
//! deployment's `from`..`to`; an adapter's base until a revision names another).
//! Observed provenance (a run read a version, produced an artifact) holds for good;
//! observed placement (an instance ran an image, served an adapter, answered a route)
//! holds while it was seen. A request's lineage is the graph
//! as of the request: `as_of` keeps what held while it ran. `plan_revision` is what a
//! registry revision changes in the declared edges of its asset.

use std::collections::{HashMap, HashSet};

use threadline_model::{DeclaredEdge, EdgeKind, LineageEdge, LineageGraph, LineageNode, NodeId};

/// How far outside its seen-interval a placement edge still counts as holding: span
/// clocks and the moment a binding is first revealed differ by this much.
pub const PLACEMENT_SLACK_NS: i64 = 60_000_000_000;

/// An interval of span time, in nanoseconds since the epoch (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ns: i64,
    pub end_ns: i64,
}

impl Window {
    pub fn at(t_ns: i64) -> Self {
        Self {
            start_ns: t_ns,
            end_ns: t_ns,
        }
    }
}

/// Whether `edge` may have held during `window`: a declared edge's validity overlaps
/// it; observed placement was first seen no later than its end (with slack).
fn may_hold(edge: &LineageEdge, window: Window) -> bool {
    if edge.declared {
        edge.valid_from_ns.is_none_or(|from| from <= window.end_ns)
            && edge
                .superseded_ns
                .is_none_or(|until| window.start_ns < until)
    } else {
        !edge.kind.is_placement()
            || edge.first_seen_ns <= window.end_ns.saturating_add(PLACEMENT_SLACK_NS)
    }
}

/// Whether an observed edge was seen during `window` (with slack).
fn seen_during(edge: &LineageEdge, window: Window) -> bool {
    !edge.declared
        && edge.first_seen_ns <= window.end_ns.saturating_add(PLACEMENT_SLACK_NS)
        && edge.last_seen_ns >= window.start_ns.saturating_sub(PLACEMENT_SLACK_NS)
}

/// Kinds an instance has one of at a time: one image, one deployment. Of rival edges
/// into one instance, the ones seen during the window win; else the declared ones
/// holding then; else the one seen last before it.
fn one_at_a_time(kind: EdgeKind) -> bool {
    matches!(kind, EdgeKind::RunsOn | EdgeKind::Deploys)
}

/// The edges of `edges` that held during `window`.
pub fn in_force(edges: Vec<LineageEdge>, window: Window) -> Vec<LineageEdge> {
    let edges: Vec<LineageEdge> = edges.into_iter().filter(|e| may_hold(e, window)).collect();
    // Rivals: (dst, kind) for one-at-a-time kinds.
    let mut rivals: HashMap<(NodeId, EdgeKind), Vec<usize>> = HashMap::new();
    for (i, e) in edges.iter().enumerate() {
        if one_at_a_time(e.kind) {
            rivals.entry((e.dst.clone(), e.kind)).or_default().push(i);
        }
    }
    let mut dropped: HashSet<usize> = HashSet::new();
    for group in rivals.values().filter(|g| g.len() > 1) {
        let during: Vec<usize> = group
            .iter()
            .copied()
            .filter(|&i| seen_during(&edges[i], window))
            .collect();
        let declared: Vec<usize> = group
            .iter()
            .copied()
            .filter(|&i| edges[i].declared)
            .collect();
        let keep: Vec<usize> = if !during.is_empty() {
            during
        } else if !declared.is_empty() {
            declared
        } else {
            group
                .iter()
                .copied()
                .max_by_key(|&i| (edges[i].last_seen_ns, edges[i].first_seen_ns))
                .into_iter()
                .collect()
        };
        dropped.extend(group.iter().filter(|i| !keep.contains(i)));
    }
    edges
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !dropped.contains(i))
        .map(|(_, e)| e)
        .collect()
}

/// `graph` (walked from `starts`) as it stood during `window`: the edges in force, and
/// the nodes still reachable from a start over them, walking the way the graph was
/// walked (`upstream`: from an edge's `dst` to its `src`).
pub fn as_of(
    graph: LineageGraph,
    starts: &[NodeId],
    window: Window,
    upstream: bool,
) -> LineageGraph {
    let edges = in_force(graph.edges, window);
    reachable(graph.nodes, edges, starts, upstream)
}

/// `graph` (walked from `starts`) less the declared edges that ended by `now_ns` (a
/// revision superseded them, a deployment's `to` passed): what depends on a node now,
/// for impact. Observed edges all stay (their traffic is history the caller bounds).
pub fn still_holding(
    graph: LineageGraph,
    starts: &[NodeId],
    now_ns: i64,
    upstream: bool,
) -> LineageGraph {
    let edges = graph
        .edges
        .into_iter()
        .filter(|e| !e.declared || e.superseded_ns.is_none_or(|until| now_ns < until))
        .collect();
    reachable(graph.nodes, edges, starts, upstream)
}

/// The nodes reachable from `starts` over `edges`, and the edges between them.
fn reachable(
    nodes: Vec<LineageNode>,
    edges: Vec<LineageEdge>,
    starts: &[NodeId],
    upstream: bool,
) -> LineageGraph {
    let mut reached: HashSet<&NodeId> = starts.iter().collect();
    let mut frontier: Vec<&NodeId> = starts.iter().collect();
    while let Some(node) = frontier.pop() {
        for e in &edges {
            let (from, to) = if upstream {
                (&e.dst, &e.src)
            } else {
                (&e.src, &e.dst)
            };
            if from == node && reached.insert(to) {
                frontier.push(to);
            }
        }
    }
    let reached: HashSet<NodeId> = reached.into_iter().cloned().collect();
    LineageGraph {
        nodes: nodes
            .into_iter()
            .filter(|n| reached.contains(&n.id))
            .collect(),
        edges: edges
            .into_iter()
            .filter(|e| reached.contains(&e.src) && reached.contains(&e.dst))
            .collect(),
    }
}

/// A declared edge into an asset as stored: its source, kind and whether a revision
/// superseded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDeclared {
    pub src: NodeId,
    pub kind: EdgeKind,
    pub superseded: bool,
}

/// What a registry revision does to one declared edge of its asset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeclaredChange {
    /// No longer named: it held until the revision.
    Supersede(DeclaredEdge),
    /// Named anew (or again, after a revision dropped it): it holds from the revision.
    HoldFrom(DeclaredEdge),
}

/// The changes a new revision (not the first) of an asset makes, given the edges its
/// spec declares and the declared edges stored before it was applied. Edges both
/// declare and store as holding are left as they are.
pub fn plan_revision(declares: &[DeclaredEdge], stored: &[StoredDeclared]) -> Vec<DeclaredChange> {
    let mut changes = Vec::new();
    for s in stored.iter().filter(|s| !s.superseded) {
        if !declares.iter().any(|d| d.src == s.src && d.kind == s.kind) {
            changes.push(DeclaredChange::Supersede(DeclaredEdge {
                src: s.src.clone(),
                kind: s.kind,
            }));
        }
    }
    for d in declares {
        let holding = stored
            .iter()
            .any(|s| s.src == d.src && s.kind == d.kind && !s.superseded);
        if !holding {
            changes.push(DeclaredChange::HoldFrom(d.clone()));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    const MIN: i64 = 60_000_000_000;
    const HOUR: i64 = 60 * MIN;

    fn id(s: &str) -> NodeId {
        s.parse().unwrap()
    }

    fn edge(src: &str, dst: &str, kind: EdgeKind, first: i64, last: i64) -> LineageEdge {
        LineageEdge {
            src: id(src),
            dst: id(dst),
            kind,
            first_seen_ns: first,
            last_seen_ns: last,
            evidence: Value::Null,
            valid_from_ns: None,
            superseded_ns: None,
            declared: false,
        }
    }

    fn node(s: &str) -> LineageNode {
        LineageNode {
            id: id(s),
            first_seen_ns: 0,
            last_seen_ns: 0,
            props: Value::Null,
        }
    }

    fn srcs(edges: &[LineageEdge]) -> Vec<String> {
        let mut v: Vec<String> = edges.iter().map(|e| e.src.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn an_image_rolled_out_after_the_request_is_not_its_image() {
        let t = 10 * HOUR;
        let edges = vec![
            edge(
                "image:vllm:0.6.0",
                "instance:i-4",
                EdgeKind::RunsOn,
                0,
                11 * HOUR,
            ),
            // The rollout reached i-4 two hours after the request.
            edge(
                "image:vllm:0.6.2",
                "instance:i-4",
                EdgeKind::RunsOn,
                12 * HOUR,
                20 * HOUR,
            ),
        ];
        assert_eq!(
            srcs(&in_force(edges.clone(), Window::at(t))),
            ["image:vllm:0.6.0"]
        );
        // After the rollout, the new image (the old one was last seen before).
        assert_eq!(
            srcs(&in_force(edges, Window::at(13 * HOUR))),
            ["image:vllm:0.6.2"]
        );
    }

    #[test]
    fn with_no_image_seen_during_the_request_the_last_one_before_it_holds() {
        let edges = vec![
            edge("image:a", "instance:i-1", EdgeKind::RunsOn, 0, HOUR),
            edge(
                "image:b",
                "instance:i-1",
                EdgeKind::RunsOn,
                2 * HOUR,
                3 * HOUR,
            ),
        ];
        assert_eq!(srcs(&in_force(edges, Window::at(5 * HOUR))), ["image:b"]);
    }

    #[test]
    fn a_deployment_declared_without_from_holds_before_it_was_registered() {
        let mut declared = edge(
            "image:v2",
            "instance:i-1",
            EdgeKind::RunsOn,
            9 * HOUR,
            9 * HOUR,
        );
        declared.declared = true;
        assert_eq!(
            srcs(&in_force(vec![declared.clone()], Window::at(HOUR))),
            ["image:v2"]
        );
        // Traffic seen on another image during the request wins over the declaration.
        let seen = edge("image:v1", "instance:i-1", EdgeKind::RunsOn, 0, 2 * HOUR);
        assert_eq!(
            srcs(&in_force(
                vec![declared.clone(), seen.clone()],
                Window::at(HOUR)
            )),
            ["image:v1"]
        );
        // Past its `to`, a deployment no longer holds.
        declared.superseded_ns = Some(3 * HOUR);
        assert_eq!(
            srcs(&in_force(vec![declared, seen], Window::at(4 * HOUR))),
            ["image:v1"]
        );
    }

    #[test]
    fn an_instance_serves_several_adapters_at_once() {
        let edges = vec![
            edge("adapter:a", "instance:i-1", EdgeKind::ServedBy, 0, HOUR),
            edge("adapter:b", "instance:i-1", EdgeKind::ServedBy, 0, 2 * HOUR),
            edge(
                "adapter:c",
                "instance:i-1",
                EdgeKind::ServedBy,
                3 * HOUR,
                4 * HOUR,
            ),
        ];
        assert_eq!(
            srcs(&in_force(edges, Window::at(HOUR))),
            ["adapter:a", "adapter:b"]
        );
    }

    #[test]
    fn a_superseded_base_held_until_the_revision_and_its_successor_from_then() {
        let mut old = edge("model:llama-3-8b", "adapter:fin", EdgeKind::BaseOf, 0, 0);
        old.declared = true;
        old.superseded_ns = Some(5 * HOUR);
        let mut new = edge(
            "model:llama-3.1-8b",
            "adapter:fin",
            EdgeKind::BaseOf,
            5 * HOUR,
            5 * HOUR,
        );
        new.declared = true;
        new.valid_from_ns = Some(5 * HOUR);
        let edges = vec![old, new];
        assert_eq!(
            srcs(&in_force(edges.clone(), Window::at(HOUR))),
            ["model:llama-3-8b"]
        );
        assert_eq!(
            srcs(&in_force(edges.clone(), Window::at(6 * HOUR))),
            ["model:llama-3.1-8b"]
        );
        // Provenance registered after the request still holds (the registry was late).
        let late = edge(
            "run:r1",
            "adapter:fin",
            EdgeKind::Produced,
            9 * HOUR,
            9 * HOUR,
        );
        assert_eq!(srcs(&in_force(vec![late], Window::at(HOUR))), ["run:r1"]);
    }

    #[test]
    fn nodes_reached_only_over_edges_not_in_force_leave_the_graph() {
        let graph = LineageGraph {
            nodes: ["instance:i-4", "image:old", "image:new", "deployment:d2"]
                .into_iter()
                .map(node)
                .collect(),
            edges: vec![
                edge("image:old", "instance:i-4", EdgeKind::RunsOn, 0, 2 * HOUR),
                edge(
                    "image:new",
                    "instance:i-4",
                    EdgeKind::RunsOn,
                    3 * HOUR,
                    4 * HOUR,
                ),
                edge(
                    "deployment:d2",
                    "image:new",
                    EdgeKind::Deploys,
                    3 * HOUR,
                    4 * HOUR,
                ),
            ],
        };
        let g = as_of(graph, &[id("instance:i-4")], Window::at(HOUR), true);
        let mut nodes: Vec<String> = g.nodes.iter().map(|n| n.id.to_string()).collect();
        nodes.sort();
        assert_eq!(nodes, ["image:old", "instance:i-4"]);
        assert_eq!(g.edges.len(), 1);
    }

    #[test]
    fn a_revision_supersedes_what_it_no_longer_names_and_reinstates_what_it_names_again() {
        let declared = |src: &str| DeclaredEdge {
            src: id(src),
            kind: EdgeKind::BaseOf,
        };
        let stored = vec![
            StoredDeclared {
                src: id("model:a"),
                kind: EdgeKind::BaseOf,
                superseded: false,
            },
            StoredDeclared {
                src: id("model:b"),
                kind: EdgeKind::BaseOf,
                superseded: true,
            },
        ];
        assert_eq!(
            plan_revision(&[declared("model:b")], &stored),
            [
                DeclaredChange::Supersede(declared("model:a")),
                DeclaredChange::HoldFrom(declared("model:b")),
            ]
        );
        assert_eq!(
            plan_revision(&[declared("model:c"), declared("model:a")], &stored),
            [DeclaredChange::HoldFrom(declared("model:c"))]
        );
        assert!(plan_revision(&[declared("model:a")], &stored).is_empty());
    }
}
