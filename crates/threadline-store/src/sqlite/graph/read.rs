//! Reading the lineage graph for queries: nodes by id or kind, walks along edges
//! within limits, dumps, the runs a trace joins and the instances a node is bound to.

use std::collections::{HashMap, HashSet, VecDeque};

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use threadline_model::{
    Direction, EdgeKind, LineageEdge, LineageGraph, LineageNode, NodeId, NodeKind,
};

use super::*;

fn parse_node_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, LineageNode)> {
    let kind: String = r.get(1)?;
    let props: String = r.get(5)?;
    Ok((
        r.get(0)?,
        LineageNode {
            id: NodeId::new(
                kind.parse().unwrap_or(NodeKind::Dataset),
                r.get::<_, String>(2)?,
            ),
            first_seen_ns: r.get(3)?,
            last_seen_ns: r.get(4)?,
            props: serde_json::from_str(&props).unwrap_or(serde_json::Value::Null),
        },
    ))
}

const NODE_COLUMNS: &str = "id, kind, key, first_seen_ns, last_seen_ns, props";

/// The node ids `name` may mean: itself when it parses as an existing `kind:key`,
/// else every node whose key or bare name is `name`.
pub(crate) fn resolve(
    conn: &Connection,
    tenant: &TenantId,
    name: &str,
) -> Result<Vec<NodeId>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    if let Ok(id) = name.parse::<NodeId>() {
        if node_row(conn, tenant_id, &id)?.is_some() {
            return Ok(vec![id]);
        }
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT kind, key FROM graph_nodes WHERE tenant_id = ?1 AND name = ?2
                AND kind NOT IN ('run', 'dataset_version') LIMIT 50",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map(params![tenant_id, name], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sqlite_err(conn, e))?;
    let mut ids: Vec<NodeId> = rows
        .into_iter()
        .filter_map(|(kind, key)| Some(NodeId::new(kind.parse().ok()?, key)))
        .collect();
    // A whole key of any kind (a run id, `warehouse:fin-qa@v3`, `/v1/chat`).
    for kind in NodeKind::ALL {
        let id = NodeId::new(kind, name);
        if node_row(conn, tenant_id, &id)?.is_some() {
            ids.push(id);
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

fn node_row(
    conn: &Connection,
    tenant_id: i64,
    id: &NodeId,
) -> Result<Option<(i64, LineageNode)>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE tenant_id = ?1 AND kind = ?2 AND key = ?3"
    ))
    .and_then(|mut s| {
        s.query_row(params![tenant_id, id.kind.as_str(), id.key], parse_node_row)
            .optional()
    })
    .map_err(|e| sqlite_err(conn, e))
}

pub(crate) fn get_node(
    conn: &Connection,
    tenant: &TenantId,
    id: &NodeId,
) -> Result<Option<LineageNode>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(None);
    };
    Ok(node_row(conn, tenant_id, id)?.map(|(_, n)| n))
}

/// Nodes of `kind` (any, when `None`) whose key contains `contains` (any case), most
/// recently seen first.
pub(crate) fn find_nodes(
    conn: &Connection,
    tenant: &TenantId,
    kind: Option<NodeKind>,
    contains: Option<&str>,
    limit: usize,
) -> Result<Vec<LineageNode>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    // LIKE with its wildcards escaped: the text is matched literally.
    let pattern = contains.map(|c| {
        let escaped = c
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("%{escaped}%")
    });
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE tenant_id = ?1
                AND (?2 IS NULL OR kind = ?2) AND (?3 IS NULL OR key LIKE ?3 ESCAPE '\\')
             ORDER BY last_seen_ns DESC, id DESC LIMIT ?4"
        ))
        .map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(
        params![tenant_id, kind.map(NodeKind::as_str), pattern, limit as i64],
        parse_node_row,
    )
    .and_then(|rows| rows.map(|r| r.map(|(_, n)| n)).collect())
    .map_err(|e| sqlite_err(conn, e))
}

/// How many nodes of each kind the tenant has.
pub(crate) fn node_counts(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Vec<(NodeKind, u64)>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached("SELECT kind, count(*) FROM graph_nodes WHERE tenant_id = ?1 GROUP BY kind")
        .map_err(|e| sqlite_err(conn, e))?;
    let rows: Vec<(String, i64)> = stmt
        .query_map([tenant_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect())
        .map_err(|e| sqlite_err(conn, e))?;
    Ok(rows
        .into_iter()
        .filter_map(|(kind, n)| Some((kind.parse().ok()?, n as u64)))
        .collect())
}

/// Breadth-first walk from `start`, one batched query per hop and direction.
pub(crate) fn walk(
    conn: &Connection,
    tenant: &TenantId,
    start: &NodeId,
    limits: &WalkLimits,
) -> Result<Option<LineageGraph>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(None);
    };
    let Some((start_row, start_node)) = node_row(conn, tenant_id, start)? else {
        return Ok(None);
    };
    let mut seen: HashSet<i64> = HashSet::from([start_row]);
    let mut order: Vec<i64> = vec![start_row];
    let mut nodes: HashMap<i64, LineageNode> = HashMap::from([(start_row, start_node)]);
    let mut edges: Vec<(i64, i64, LineageEdge)> = Vec::new();
    let mut edge_seen: HashSet<(i64, i64, EdgeKind)> = HashSet::new();
    // Walks: each a list of the edge directions every hop follows (true: downstream).
    let walks: &[&[bool]] = match limits.direction {
        Direction::Downstream => &[&[true]],
        Direction::Upstream => &[&[false]],
        Direction::Both => &[&[true], &[false]],
        Direction::Connected => &[&[true, false]],
    };
    for &hop_directions in walks {
        let mut frontier: VecDeque<i64> = VecDeque::from([start_row]);
        for _ in 0..limits.depth {
            if frontier.is_empty() || seen.len() >= limits.max_nodes {
                break;
            }
            let batch: Vec<i64> = frontier.drain(..).collect();
            for chunk in batch.chunks(500) {
                for &downstream in hop_directions {
                    for (src, dst, edge) in edges_touching(conn, chunk, downstream)? {
                        let Some(edge) = edge else { continue };
                        if !limits.edge_kinds.is_empty() && !limits.edge_kinds.contains(&edge.kind)
                        {
                            continue;
                        }
                        let next = if downstream { dst } else { src };
                        if edge_seen.insert((src, dst, edge.kind)) {
                            edges.push((src, dst, edge));
                        }
                        if seen.len() < limits.max_nodes && seen.insert(next) {
                            order.push(next);
                            frontier.push_back(next);
                        }
                    }
                }
            }
        }
    }
    let missing: Vec<i64> = order
        .iter()
        .copied()
        .filter(|r| !nodes.contains_key(r))
        .collect();
    for chunk in missing.chunks(500) {
        for (row, node) in nodes_by_row(conn, chunk)? {
            nodes.insert(row, node);
        }
    }
    // Edges to nodes past the node budget are dropped with them.
    let node_ids: HashMap<i64, NodeId> = nodes.iter().map(|(r, n)| (*r, n.id.clone())).collect();
    let edges = edges
        .into_iter()
        .filter_map(|(src, dst, mut e)| {
            e.src = node_ids.get(&src)?.clone();
            e.dst = node_ids.get(&dst)?.clone();
            Some(e)
        })
        .collect();
    let nodes = order.iter().filter_map(|r| nodes.remove(r)).collect();
    Ok(Some(LineageGraph { nodes, edges }))
}

/// Edges leaving (downstream) or entering (upstream) the given nodes; the returned
/// `LineageEdge`s carry placeholder ids, resolved by the caller from the row ids.
fn edges_touching(
    conn: &Connection,
    rows: &[i64],
    downstream: bool,
) -> Result<Vec<(i64, i64, Option<LineageEdge>)>, StoreError> {
    let column = if downstream { "src" } else { "dst" };
    let sql = format!(
        "SELECT {EDGE_COLUMNS} FROM graph_edges WHERE {column} IN ({})",
        crate::sqlite::placeholders(rows.len())
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(params_from_iter(rows), parse_edge_row)
        .and_then(|rows| rows.collect())
        .map_err(|e| sqlite_err(conn, e))
}

const EDGE_COLUMNS: &str =
    "src, dst, kind, first_seen_ns, last_seen_ns, evidence, valid_from_ns, superseded_ns, declared";

/// An `EDGE_COLUMNS` row: (src row, dst row, the edge with placeholder ends, resolved
/// by the caller from the row ids). An unknown kind reads as `None`.
fn parse_edge_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, i64, Option<LineageEdge>)> {
    let placeholder = NodeId::new(NodeKind::Dataset, "");
    let kind: String = r.get(2)?;
    let evidence: String = r.get(5)?;
    let (first_seen_ns, last_seen_ns) = (r.get(3)?, r.get(4)?);
    let (valid_from_ns, superseded_ns, declared) = (r.get(6)?, r.get(7)?, r.get(8)?);
    Ok((
        r.get(0)?,
        r.get(1)?,
        kind.parse().ok().map(|kind| LineageEdge {
            src: placeholder.clone(),
            dst: placeholder,
            kind,
            first_seen_ns,
            last_seen_ns,
            evidence: serde_json::from_str(&evidence).unwrap_or(serde_json::Value::Null),
            valid_from_ns,
            superseded_ns,
            declared,
        }),
    ))
}

fn nodes_by_row(conn: &Connection, rows: &[i64]) -> Result<Vec<(i64, LineageNode)>, StoreError> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE id IN ({})",
        crate::sqlite::placeholders(rows.len())
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(params_from_iter(rows), parse_node_row)
        .and_then(|rows| rows.collect())
        .map_err(|e| sqlite_err(conn, e))
}

/// Every node and edge of the tenant, up to `max_nodes` nodes (None when the tenant has
/// more: the caller should ask for a subgraph).
pub(crate) fn dump(
    conn: &Connection,
    tenant: &TenantId,
    max_nodes: usize,
) -> Result<Option<LineageGraph>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Some(LineageGraph::default()));
    };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE tenant_id = ?1 ORDER BY id LIMIT ?2"
        ))
        .map_err(|e| sqlite_err(conn, e))?;
    let rows: Vec<(i64, LineageNode)> = stmt
        .query_map(params![tenant_id, max_nodes as i64 + 1], parse_node_row)
        .and_then(|r| r.collect())
        .map_err(|e| sqlite_err(conn, e))?;
    if rows.len() > max_nodes {
        return Ok(None);
    }
    let ids: HashMap<i64, NodeId> = rows.iter().map(|(r, n)| (*r, n.id.clone())).collect();
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {EDGE_COLUMNS} FROM graph_edges WHERE tenant_id = ?1"
        ))
        .map_err(|e| sqlite_err(conn, e))?;
    let edges = stmt
        .query_map([tenant_id], parse_edge_row)
        .and_then(|r| r.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sqlite_err(conn, e))?
        .into_iter()
        .filter_map(|(src, dst, edge)| {
            let mut edge = edge?;
            edge.src = ids.get(&src)?.clone();
            edge.dst = ids.get(&dst)?.clone();
            Some(edge)
        })
        .collect();
    Ok(Some(LineageGraph {
        nodes: rows.into_iter().map(|(_, n)| n).collect(),
        edges,
    }))
}

/// Runs whose OpenLineage events named `trace_id` (lowercase hex), newest first.
pub(crate) fn runs_for_trace(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: &str,
) -> Result<Vec<NodeId>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT key FROM graph_nodes
             WHERE tenant_id = ?1 AND kind = 'run' AND json_extract(props, '$.trace_id') = ?2
             ORDER BY last_seen_ns DESC LIMIT 100",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(params![tenant_id, trace_id], |r| r.get::<_, String>(0))
        .and_then(|rows| {
            rows.map(|k| k.map(|k| NodeId::new(NodeKind::Run, k)))
                .collect()
        })
        .map_err(|e| sqlite_err(conn, e))
}

/// Per image, adapter / model and route: how many instances were bound to it (the
/// binding edge seen) within `window_ns` of the tenant's newest binding, on span time.
pub(crate) fn bound_instances(
    conn: &Connection,
    tenant_id: i64,
    window_ns: i64,
) -> Result<Vec<crate::Bound>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "WITH inst AS (SELECT id FROM graph_nodes WHERE tenant_id = ?1 AND kind = 'instance'),
             b AS (
                SELECT e.src AS other, e.dst AS inst, e.last_seen_ns AS seen
                FROM inst JOIN graph_edges e ON e.dst = inst.id
                WHERE e.kind IN ('served_by', 'runs_on')
                UNION ALL
                SELECT e.dst, e.src, e.last_seen_ns
                FROM inst JOIN graph_edges e ON e.src = inst.id AND e.kind = 'answers'
             )
             SELECT n.kind, n.key, count(DISTINCT b.inst) FROM b JOIN graph_nodes n ON n.id = b.other
             WHERE b.seen >= (SELECT max(seen) FROM b) - ?2
             GROUP BY n.kind, n.key ORDER BY n.kind, n.key",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map(params![tenant_id, window_ns], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get(1)?,
                r.get::<_, i64>(2)? as u64,
            ))
        })
        .map_err(|e| sqlite_err(conn, e))?;
    let rows: Vec<(String, String, u64)> = rows
        .collect::<Result<_, _>>()
        .map_err(|e| sqlite_err(conn, e))?;
    rows.into_iter()
        .map(|(kind, key, instances)| {
            let kind: NodeKind = kind
                .parse()
                .map_err(|e| StoreError::corrupt(format!("bound node: {e}")))?;
            Ok(crate::Bound {
                node: NodeId::new(kind, key),
                instances,
            })
        })
        .collect()
}
