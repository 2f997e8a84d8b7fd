//! `GET /api/v1/nodes?kind=&q=&limit=`: the lineage browser's list — nodes of a kind
//! whose key contains the text, most recently seen first, each with its badges (a
//! dataset version's drift, a run's failure, incidents of the last week on a route,
//! model or service), and how many nodes each kind has.

use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};
use threadline_analysis::{Incident, BUCKET_NS};
use threadline_model::{LineageNode, NodeKind};

use crate::error::ApiError;

use crate::state::{AppState, Tenant};

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Incidents this far back badge the nodes they name.
const INCIDENT_LOOKBACK_NS: i64 = 7 * 24 * 3_600_000_000_000;

/// The badges of `node`: what a browser should flag next to it.
fn badges(node: &LineageNode, incidents: &[Incident]) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(drift) = node.props.get("drift").filter(|d| !d.is_null()) {
        out.push(json!({"kind": "drift", "text": "drift", "detail": drift}));
    }
    if node.id.kind == NodeKind::Run {
        if let Some(state) = node.props.get("state").and_then(Value::as_str) {
            if matches!(state, "FAIL" | "ABORT") {
                out.push(json!({"kind": "failed", "text": state.to_lowercase()}));
            }
        }
    }
    let named = |i: &&Incident| match node.id.kind {
        NodeKind::Route => i.route == node.id.key,
        NodeKind::Model => i.model == node.id.key,
        NodeKind::Service => i.service == node.id.key,
        _ => false,
    };
    let mine: Vec<&Incident> = incidents.iter().filter(named).collect();
    if !mine.is_empty() {
        let open = mine.iter().filter(|i| i.is_open()).count();
        out.push(json!({
            "kind": "incident",
            "text": if open > 0 { format!("{open} open incident{}", if open == 1 { "" } else { "s" }) }
                    else { format!("{} incident{} this week", mine.len(), if mine.len() == 1 { "" } else { "s" }) },
            "open": open,
            "incidents": mine.iter().map(|i| i.id.clone()).collect::<Vec<_>>(),
        }));
    }
    out
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let (mut kind, mut text, mut limit) = (None, None, DEFAULT_LIMIT);
    for (key, value) in &params {
        match key.as_str() {
            "kind" if value.is_empty() => kind = None,
            "kind" => {
                kind = Some(
                    value
                        .parse::<NodeKind>()
                        .map_err(|e| ApiError::BadRequest(e.to_string()))?,
                )
            }
            "q" => text = Some(value.trim().to_owned()).filter(|t| !t.is_empty()),
            "limit" => limit = crate::params::limit(value, MAX_LIMIT)?,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: use kind, q or limit"
                )))
            }
        }
    }
    let store = state.store.clone();
    let (counts, nodes, incidents) = crate::error::blocking(move || {
        let counts = store.node_counts(&tenant)?;
        let nodes = store.find_nodes(&tenant, kind, text.as_deref(), limit)?;
        let now = crate::params::now_ns();
        let incidents = store.incidents(
            &tenant,
            (now - INCIDENT_LOOKBACK_NS).div_euclid(BUCKET_NS),
            now.div_euclid(BUCKET_NS),
        )?;
        Ok((counts, nodes, incidents))
    })
    .await?;
    let counts: serde_json::Map<String, Value> = NodeKind::ALL
        .into_iter()
        .map(|k| {
            let n = counts.iter().find(|(c, _)| *c == k).map_or(0, |(_, n)| *n);
            (k.as_str().to_owned(), json!(n))
        })
        .collect();
    Ok(Json(json!({
        "counts": counts,
        "nodes": nodes.iter().map(|n| {
            let mut v = crate::dto::lineage_node(n);
            v["badges"] = Value::Array(badges(n, &incidents));
            if let Value::Object(obj) = &mut v {
                obj.remove("props");
            }
            v
        }).collect::<Vec<_>>(),
    })))
}
