//! Marquez's lineage graph (`{"graph": [{id, type, data, inEdges, outEdges}]}`) as a
//! projection of ours: only jobs and datasets, a job linked to the datasets any of
//! its runs read (dataset → job) and wrote (job → dataset), dataset versions folded
//! into their dataset. Tools written for Marquez can read Threadline through it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{json, Value};
use threadline_model::{Direction, EdgeKind, LineageNode, NodeId, NodeKind, TenantId};
use threadline_store::{Store, StoreError, WalkLimits};

/// Runs of one job looked at, most recent first.
const MAX_RUNS_PER_JOB: usize = 100;

fn step(
    store: &Store,
    tenant: &TenantId,
    from: &NodeId,
    direction: Direction,
    edge: EdgeKind,
) -> Result<Vec<LineageNode>, StoreError> {
    let limits = WalkLimits {
        direction,
        depth: 1,
        max_nodes: 10_000,
        edge_kinds: vec![edge],
    };
    Ok(store
        .walk(tenant, from, &limits)?
        .map(|g| g.nodes.into_iter().filter(|n| &n.id != from).collect())
        .unwrap_or_default())
}

/// The dataset a version belongs to (or the node itself when it is a dataset).
fn dataset_of(
    store: &Store,
    tenant: &TenantId,
    node: &LineageNode,
) -> Result<Option<NodeId>, StoreError> {
    match node.id.kind {
        NodeKind::Dataset => Ok(Some(node.id.clone())),
        NodeKind::DatasetVersion => Ok(step(
            store,
            tenant,
            &node.id,
            Direction::Upstream,
            EdgeKind::HasVersion,
        )?
        .into_iter()
        .map(|n| n.id)
        .find(|id| id.kind == NodeKind::Dataset)),
        _ => Ok(None),
    }
}

/// The job a run (or job) node stands for.
fn job_of(
    store: &Store,
    tenant: &TenantId,
    node: &LineageNode,
) -> Result<Option<NodeId>, StoreError> {
    match node.id.kind {
        NodeKind::Job => Ok(Some(node.id.clone())),
        NodeKind::Run => Ok(step(
            store,
            tenant,
            &node.id,
            Direction::Upstream,
            EdgeKind::HasRun,
        )?
        .into_iter()
        .map(|n| n.id)
        .find(|id| id.kind == NodeKind::Job)),
        _ => Ok(None),
    }
}

/// (inputs, outputs) datasets of a job.
fn job_io(
    store: &Store,
    tenant: &TenantId,
    job: &NodeId,
) -> Result<(BTreeSet<NodeId>, BTreeSet<NodeId>), StoreError> {
    let mut runs = step(store, tenant, job, Direction::Downstream, EdgeKind::HasRun)?;
    runs.sort_by_key(|r| std::cmp::Reverse(r.last_seen_ns));
    runs.truncate(MAX_RUNS_PER_JOB);
    let mut inputs = BTreeSet::new();
    let mut outputs = BTreeSet::new();
    // A JobEvent links datasets to the job itself.
    let holders = std::iter::once(job.clone()).chain(runs.into_iter().map(|r| r.id));
    for holder in holders {
        for v in step(
            store,
            tenant,
            &holder,
            Direction::Upstream,
            EdgeKind::InputTo,
        )? {
            inputs.extend(dataset_of(store, tenant, &v)?);
        }
        for v in step(
            store,
            tenant,
            &holder,
            Direction::Downstream,
            EdgeKind::Produced,
        )? {
            outputs.extend(dataset_of(store, tenant, &v)?);
        }
    }
    Ok((inputs, outputs))
}

/// (jobs reading, jobs writing) a dataset.
fn dataset_io(
    store: &Store,
    tenant: &TenantId,
    dataset: &NodeId,
) -> Result<(BTreeSet<NodeId>, BTreeSet<NodeId>), StoreError> {
    let versions = step(
        store,
        tenant,
        dataset,
        Direction::Downstream,
        EdgeKind::HasVersion,
    )?;
    let mut readers = BTreeSet::new();
    let mut writers = BTreeSet::new();
    for v in &versions {
        for consumer in step(
            store,
            tenant,
            &v.id,
            Direction::Downstream,
            EdgeKind::InputTo,
        )? {
            readers.extend(job_of(store, tenant, &consumer)?);
        }
        for producer in step(
            store,
            tenant,
            &v.id,
            Direction::Upstream,
            EdgeKind::Produced,
        )? {
            writers.extend(job_of(store, tenant, &producer)?);
        }
    }
    Ok((readers, writers))
}

fn namespace_and_name(node: &LineageNode) -> (String, String) {
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

/// The Marquez-shaped graph around `start`, `depth` job/dataset hops out each way.
pub(crate) fn lineage(
    store: &Store,
    tenant: &TenantId,
    start: &NodeId,
    depth: usize,
) -> Result<Option<Value>, StoreError> {
    if store.get_node(tenant, start)?.is_none() {
        return Ok(None);
    }
    // node → (ins, outs): for a job its input / output datasets; for a dataset the jobs
    // writing it / reading it.
    let mut io: BTreeMap<NodeId, (BTreeSet<NodeId>, BTreeSet<NodeId>)> = BTreeMap::new();
    let mut queue = VecDeque::from([(start.clone(), 0usize)]);
    while let Some((id, hops)) = queue.pop_front() {
        if io.contains_key(&id) {
            continue;
        }
        let (ins, outs) = match id.kind {
            NodeKind::Job => job_io(store, tenant, &id)?,
            _ => {
                let (readers, writers) = dataset_io(store, tenant, &id)?;
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
    let mut graph = Vec::new();
    for (id, (ins, outs)) in &io {
        let Some(node) = store.get_node(tenant, id)? else {
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
        graph.push(json!({
            "id": id.to_string(),
            "type": if id.kind == NodeKind::Job { "JOB" } else { "DATASET" },
            "data": node_data(&node, &inputs, &outputs),
            "inEdges": in_edges,
            "outEdges": out_edges,
        }));
    }
    Ok(Some(json!({ "graph": graph })))
}

/// Marquez's column lineage (`GET /api/v1/column-lineage?nodeId=dataset:NS:NAME` or
/// `datasetField:NS:NAME:FIELD`): `DATASET_FIELD` nodes with edges input field →
/// output field, read from the latest `columnLineage` facet of each dataset, followed
/// upstream `depth` datasets deep.
pub(crate) fn column_lineage(
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
        let (ns, name) = namespace_and_name(&node);
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
