//! The health of a lineage node: freshness of the datasets and jobs upstream against
//! their usual cadence (at the tenant's newest span time), drift on dataset versions
//! upstream, open incidents on the routes it serves — scored by
//! `threadline_analysis::health`.

use std::collections::HashSet;

use serde_json::Value;
use threadline_analysis::health::{score, staleness, HealthFactor};
use threadline_model::{Direction, EdgeKind, NodeId, NodeKind, TenantId};
use threadline_store::{Store, StoreError, WalkLimits};

use crate::IncidentWatcher;

/// A node's health: 1 is healthy, each factor's penalty takes its share off.
#[derive(Clone, Debug)]
pub struct NodeHealth {
    pub node: NodeId,
    pub score: f64,
    /// `healthy`, `degraded` or `unhealthy`.
    pub status: &'static str,
    pub factors: Vec<HealthFactor>,
}

const UPSTREAM_DEPTH: usize = 8;
/// Routes a serving node (adapter, instance …) answers through, within this many hops.
const SERVES_DEPTH: usize = 3;
const MAX_NODES: usize = 5_000;

fn walk(
    store: &Store,
    tenant: &TenantId,
    from: &NodeId,
    direction: Direction,
    depth: usize,
    edge_kinds: Vec<EdgeKind>,
) -> Result<Vec<threadline_model::LineageNode>, StoreError> {
    Ok(store
        .walk(
            tenant,
            from,
            &WalkLimits {
                direction,
                depth,
                max_nodes: MAX_NODES,
                edge_kinds,
            },
        )?
        .map(|g| g.nodes)
        .unwrap_or_default())
}

/// The health of `node`: its factors and their combined score. Blocking (graph walks,
/// and the incident watcher catches up when routes are involved).
pub fn node_health(
    watcher: &IncidentWatcher,
    tenant: &TenantId,
    node: NodeId,
) -> Result<NodeHealth, StoreError> {
    let store = watcher.store();
    // "Now" is span time, like the rest of diagnosis: the end of the tenant's newest
    // minute of traffic (wall-clock time only for a tenant without any).
    let now = match store.rollup_minute_range(tenant)? {
        Some((_, last)) => (last + 1) * threadline_analysis::BUCKET_NS,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64),
    };
    let mut factors = Vec::new();
    let upstream = walk(
        store,
        tenant,
        &node,
        Direction::Upstream,
        UPSTREAM_DEPTH,
        Vec::new(),
    )?;
    for n in &upstream {
        let own = n.id == node;
        match n.id.kind {
            NodeKind::DatasetVersion => {
                if let Some(changes) = n.props.pointer("/drift/changes").and_then(Value::as_array) {
                    let kinds: Vec<&str> =
                        changes.iter().filter_map(|c| c["kind"].as_str()).collect();
                    factors.push(HealthFactor {
                        kind: "drift",
                        node: n.id.to_string(),
                        penalty: if own { 0.3 } else { 0.25 },
                        detail: format!("drift against the previous version: {}", kinds.join(", ")),
                    });
                }
            }
            NodeKind::Dataset | NodeKind::Job => {
                let edge = if n.id.kind == NodeKind::Dataset {
                    EdgeKind::HasVersion
                } else {
                    EdgeKind::HasRun
                };
                let times: Vec<i64> =
                    walk(store, tenant, &n.id, Direction::Downstream, 1, vec![edge])?
                        .iter()
                        .filter(|m| m.id != n.id)
                        .map(|m| m.first_seen_ns)
                        .collect();
                if let Some((penalty, detail)) = staleness(&times, now) {
                    factors.push(HealthFactor {
                        kind: "stale",
                        node: n.id.to_string(),
                        penalty: if own { penalty } else { penalty / 2.0 },
                        detail,
                    });
                }
            }
            _ => {}
        }
    }
    // Open incidents on the node's own route / model, or on routes it serves.
    let mut routes: HashSet<String> = HashSet::new();
    let mut models: HashSet<String> = HashSet::new();
    match node.kind {
        NodeKind::Route => {
            routes.insert(node.key.clone());
        }
        NodeKind::Model => {
            models.insert(node.key.clone());
        }
        _ => {}
    }
    for n in walk(
        store,
        tenant,
        &node,
        Direction::Downstream,
        SERVES_DEPTH,
        Vec::new(),
    )? {
        if n.id.kind == NodeKind::Route {
            routes.insert(n.id.key.clone());
        }
    }
    if !routes.is_empty() || !models.is_empty() {
        watcher.catch_up(tenant)?;
        for i in store.incidents(tenant, i64::MIN, i64::MAX)? {
            let on_node =
                routes.contains(&i.route) || (i.route.is_empty() && models.contains(&i.model));
            if i.is_open() && on_node {
                let severity = i.severity(watcher.config());
                factors.push(HealthFactor {
                    kind: "incident",
                    node: format!("route:{}", i.route),
                    penalty: if severity == "critical" { 0.4 } else { 0.2 },
                    detail: format!("open incident {} ({}, {severity})", i.id, i.metric),
                });
            }
        }
    }
    let (value, status) = score(&factors);
    Ok(NodeHealth {
        node,
        score: value,
        status,
        factors,
    })
}
