//! Typed queries and results of the store's surface that are not search pages:
//! lineage walks, the requests lineage nodes served, the services a tenant has.

use threadline_model::{Direction, EdgeKind, NodeId};

/// What a walk may visit.
#[derive(Clone, Debug)]
pub struct WalkLimits {
    pub direction: Direction,
    /// Hops from the start node.
    pub depth: usize,
    /// Stop expanding once this many nodes were reached.
    pub max_nodes: usize,
    /// Follow only these edge kinds (all when empty).
    pub edge_kinds: Vec<EdgeKind>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSummary {
    pub name: String,
}

/// Requests (traces) that went through given adapters or instances since a time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestsServed {
    /// Distinct traces with a span on any of the nodes.
    pub traces: u64,
    /// Each adapter and instance asked about, and the distinct traces it served.
    pub by_node: Vec<(NodeId, u64)>,
}
