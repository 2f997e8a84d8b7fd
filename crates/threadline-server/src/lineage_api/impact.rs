//! `GET /api/v1/impact/{node_id}?since=T`: what a change to (or erasure of) a node
//! affects — the downstream closure grouped by kind, how many requests the affected
//! adapters and instances served since T, and a plan from the impact policy.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_model::{Direction, NodeKind};
use threadline_store::WalkLimits;

use crate::error::ApiError;
use crate::lineage_api::resolve_one;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/impact/{*node_id}", get(impact))
}

/// Hops followed downstream; the closure stops there or at `MAX_NODES`.
const IMPACT_DEPTH: usize = 20;
const MAX_NODES: usize = 10_000;
/// Default window for request counts: the last 7 days.
const DEFAULT_WINDOW_NS: i64 = 7 * 24 * 3600 * 1_000_000_000;

async fn impact(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(node): Path<String>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let now = crate::params::now_ns();
    let mut since = now - DEFAULT_WINDOW_NS;
    for (key, value) in &params {
        match key.as_str() {
            "since" => since = crate::params::parse_time(key, value)? as i64,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: use since"
                )))
            }
        }
    }
    let store = state.store.clone();
    let policy = Arc::clone(&state.impact_policy);
    let node = node.trim_start_matches('/').to_owned();
    crate::error::blocking(move || {
        let root = resolve_one(&store, &tenant, &node)?;
        let graph = store
            .walk(
                &tenant,
                &root,
                &WalkLimits {
                    direction: Direction::Downstream,
                    depth: IMPACT_DEPTH,
                    max_nodes: MAX_NODES,
                    edge_kinds: Vec::new(),
                },
            )?
            .ok_or_else(|| ApiError::NotFound(format!("no lineage node {node:?}")))?;
        // What depends on the node now: a declared edge a later registration
        // superseded (or a deployment that ended) no longer carries the change.
        let graph = threadline_lineage::validity::still_holding(
            graph,
            std::slice::from_ref(&root),
            now,
            false,
        );
        let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let mut plan = Vec::new();
        let mut adapters = Vec::new();
        let mut instances = Vec::new();
        for n in &graph.nodes {
            let is_root = n.id == root;
            if !is_root {
                by_kind
                    .entry(n.id.kind.as_str())
                    .or_default()
                    .push(n.id.to_string());
            }
            match n.id.kind {
                NodeKind::Adapter => adapters.push(n.id.key.clone()),
                NodeKind::Instance => instances.push(n.id.key.clone()),
                _ => {}
            }
            // The plan is for what the change reaches, not the changed node itself.
            if let Some(rule) = policy.decide(n).filter(|_| !is_root) {
                plan.push(json!({
                    "node": n.id.to_string(),
                    "action": rule.action.as_str(),
                    "reason": rule.reason,
                }));
            }
        }
        let served = store.requests_served(&tenant, &adapters, &instances, since)?;
        Ok(Json(json!({
            "root": root.to_string(),
            "since_unix_nano": since.to_string(),
            "affected": by_kind,
            "affected_count": graph.nodes.len().saturating_sub(1),
            "truncated": graph.nodes.len() >= MAX_NODES,
            "requests_served": {
                "traces": served.traces,
                "by_node": served.by_node.iter().map(|(kind, id, n)| json!({
                    "node": format!("{kind}:{id}"), "traces": n
                })).collect::<Vec<_>>(),
            },
            "plan": plan,
        })))
    })
    .await
}
