//! Lineage as the APIs show it, over the store: Marquez's lineage graph (one walk of
//! the store, projected by `threadline_lineage::marquez`), Marquez's column lineage
//! (followed through the `columnLineage` facets dataset by dataset) and the impact of
//! a change to a node (the downstream closure still holding now, the requests the
//! affected adapters and instances served, the impact policy's plan).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{json, Value};
use threadline_lineage::impact::ImpactPolicy;
use threadline_model::{Direction, NodeId, NodeKind, TenantId};
use threadline_store::{RequestsServed, Store, StoreError, WalkLimits};

/// Nodes one Marquez walk may reach.
const MARQUEZ_MAX_NODES: usize = 50_000;

/// Marquez's lineage graph around a job or dataset, `depth` job/dataset hops out each
/// way; `None` when the tenant has no such node.
pub fn marquez_lineage(
    store: &Store,
    tenant: &TenantId,
    start: &NodeId,
    depth: usize,
) -> Result<Option<Value>, StoreError> {
    let limits = WalkLimits {
        direction: Direction::Connected,
        depth: threadline_lineage::marquez::walk_depth(depth),
        max_nodes: MARQUEZ_MAX_NODES,
        edge_kinds: threadline_lineage::marquez::EDGE_KINDS.to_vec(),
    };
    Ok(store
        .walk(tenant, start, &limits)?
        .map(|graph| threadline_lineage::marquez::lineage_graph(&graph, start, depth)))
}

/// Hops followed downstream for an impact; the closure stops there or at
/// `IMPACT_MAX_NODES`.
const IMPACT_DEPTH: usize = 20;
const IMPACT_MAX_NODES: usize = 10_000;

/// What a change to (or erasure of) a node affects.
#[derive(Debug)]
pub struct Impact {
    pub root: NodeId,
    /// Affected nodes (the root left out) by kind.
    pub affected: BTreeMap<&'static str, Vec<NodeId>>,
    /// The closure reached `IMPACT_MAX_NODES`.
    pub truncated: bool,
    pub requests_served: RequestsServed,
    pub plan: Vec<PlannedAction>,
}

impl Impact {
    pub fn affected_count(&self) -> usize {
        self.affected.values().map(Vec::len).sum()
    }
}

/// One step of the impact plan: what the policy says to do with an affected node.
#[derive(Debug)]
pub struct PlannedAction {
    pub node: NodeId,
    pub action: threadline_lineage::impact::Action,
    pub reason: String,
}

/// The impact of a change to `root` at `now_ns`: what depends on it now (a declared
/// edge a later registration superseded, or a deployment that ended, no longer
/// carries the change), how many requests the affected adapters and instances served
/// since `since_ns`, and the policy's plan; `None` when the node does not exist.
pub fn impact(
    store: &Store,
    tenant: &TenantId,
    root: &NodeId,
    since_ns: i64,
    now_ns: i64,
    policy: &ImpactPolicy,
) -> Result<Option<Impact>, StoreError> {
    let limits = WalkLimits {
        direction: Direction::Downstream,
        depth: IMPACT_DEPTH,
        max_nodes: IMPACT_MAX_NODES,
        edge_kinds: Vec::new(),
    };
    let Some(graph) = store.walk(tenant, root, &limits)? else {
        return Ok(None);
    };
    let graph = threadline_lineage::validity::still_holding(
        graph,
        std::slice::from_ref(root),
        now_ns,
        false,
    );
    let mut affected: BTreeMap<&'static str, Vec<NodeId>> = BTreeMap::new();
    let mut plan = Vec::new();
    let mut adapters = Vec::new();
    let mut instances = Vec::new();
    for n in &graph.nodes {
        let is_root = &n.id == root;
        if !is_root {
            affected
                .entry(n.id.kind.as_str())
                .or_default()
                .push(n.id.clone());
        }
        match n.id.kind {
            NodeKind::Adapter => adapters.push(n.id.key.clone()),
            NodeKind::Instance => instances.push(n.id.key.clone()),
            _ => {}
        }
        // The plan is for what the change reaches, not the changed node itself.
        if let Some(rule) = policy.decide(n).filter(|_| !is_root) {
            plan.push(PlannedAction {
                node: n.id.clone(),
                action: rule.action,
                reason: rule.reason.clone(),
            });
        }
    }
    let requests_served = store.requests_served(tenant, &adapters, &instances, since_ns)?;
    Ok(Some(Impact {
        root: root.clone(),
        affected,
        truncated: graph.nodes.len() >= IMPACT_MAX_NODES,
        requests_served,
        plan,
    }))
}

/// Marquez's column lineage (`GET /api/v1/column-lineage?nodeId=dataset:NS:NAME` or
/// `datasetField:NS:NAME:FIELD`): `DATASET_FIELD` nodes with edges input field →
/// output field, read from the latest `columnLineage` facet of each dataset, followed
/// upstream `depth` datasets deep.
pub fn column_lineage(
    store: &Store,
    tenant: &TenantId,
    dataset: &NodeId,
    only_field: Option<&str>,
    depth: usize,
) -> Result<Option<Value>, StoreError> {
    if store.get_node(tenant, dataset)?.is_none() {
        return Ok(None);
    }
    // field id → (namespace, dataset name, field, in-edges, out-edges, transformations)
    struct FieldNode {
        namespace: String,
        name: String,
        field: String,
        ins: BTreeSet<String>,
        outs: BTreeSet<String>,
        transformations: Vec<Value>,
    }
    let mut fields: BTreeMap<String, FieldNode> = BTreeMap::new();
    let field_id = |ns: &str, name: &str, field: &str| format!("datasetField:{ns}:{name}:{field}");
    let entry = |fields: &mut BTreeMap<String, FieldNode>, ns: &str, name: &str, field: &str| {
        fields
            .entry(field_id(ns, name, field))
            .or_insert_with(|| FieldNode {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                field: field.to_owned(),
                ins: BTreeSet::new(),
                outs: BTreeSet::new(),
                transformations: Vec::new(),
            })
            .field
            .clone()
    };
    let mut queue = VecDeque::from([(dataset.clone(), 0usize, only_field.map(str::to_owned))]);
    let mut visited = BTreeSet::new();
    while let Some((id, hops, wanted)) = queue.pop_front() {
        if !visited.insert((id.clone(), wanted.clone())) {
            continue;
        }
        let Some(node) = store.get_node(tenant, &id)? else {
            continue;
        };
        let (ns, name) = threadline_lineage::marquez::namespace_and_name(&node);
        let Some(columns) = node.props["facets"]["columnLineage"]["fields"].as_object() else {
            continue;
        };
        for (column, spec) in columns {
            if wanted.as_deref().is_some_and(|w| w != column) {
                continue;
            }
            let out_id = field_id(&ns, &name, column);
            entry(&mut fields, &ns, &name, column);
            for input in spec["inputFields"].as_array().into_iter().flatten() {
                let (Some(ins), Some(iname), Some(ifield)) = (
                    input["namespace"].as_str(),
                    input["name"].as_str(),
                    input["field"].as_str(),
                ) else {
                    continue;
                };
                let in_id = field_id(ins, iname, ifield);
                entry(&mut fields, ins, iname, ifield);
                if let Some(f) = fields.get_mut(&in_id) {
                    f.outs.insert(out_id.clone());
                }
                if let Some(f) = fields.get_mut(&out_id) {
                    f.ins.insert(in_id.clone());
                    if let Some(t) = input.get("transformations") {
                        f.transformations
                            .push(json!({"from": in_id, "transformations": t}));
                    }
                }
                if hops < depth {
                    queue.push_back((
                        NodeId::namespaced(NodeKind::Dataset, ins, iname),
                        hops + 1,
                        Some(ifield.to_owned()),
                    ));
                }
            }
        }
    }
    let graph: Vec<Value> = fields
        .iter()
        .map(|(id, f)| {
            json!({
                "id": id,
                "type": "DATASET_FIELD",
                "data": {
                    "namespace": f.namespace,
                    "dataset": f.name,
                    "field": f.field,
                    "transformations": f.transformations,
                },
                "inEdges": f.ins.iter().map(|o| json!({"origin": o, "destination": id})).collect::<Vec<_>>(),
                "outEdges": f.outs.iter().map(|d| json!({"origin": id, "destination": d})).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Some(json!({ "graph": graph })))
}
