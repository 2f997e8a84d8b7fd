//! `GET /api/v1/impact/{node_id}?since=T`: what a change to (or erasure of) a node
//! affects — the downstream closure grouped by kind, how many requests the affected
//! adapters and instances served since T, and a plan from the impact policy.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_diagnosis::lineage_views::Impact;

use crate::error::ApiError;
use crate::lineage_api::resolve_one;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/impact/{*node_id}", get(impact))
}

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
        let impact = threadline_diagnosis::lineage_views::impact(
            &store, &tenant, &root, since, now, &policy,
        )?
        .ok_or_else(|| ApiError::NotFound(format!("no lineage node {node:?}")))?;
        Ok(Json(impact_json(&impact, since)))
    })
    .await
}

/// An impact as the API shows it.
fn impact_json(impact: &Impact, since: i64) -> Value {
    let affected: BTreeMap<&str, Vec<String>> = impact
        .affected
        .iter()
        .map(|(kind, ids)| (*kind, ids.iter().map(ToString::to_string).collect()))
        .collect();
    let served = &impact.requests_served;
    json!({
        "root": impact.root.to_string(),
        "since_unix_nano": since.to_string(),
        "affected": affected,
        "affected_count": impact.affected_count(),
        "truncated": impact.truncated,
        "requests_served": {
            "traces": served.traces,
            "by_node": served.by_node.iter().map(|(node, n)| json!({
                "node": node.to_string(), "traces": n
            })).collect::<Vec<_>>(),
        },
        "plan": impact.plan.iter().map(|p| json!({
            "node": p.node.to_string(),
            "action": p.action.as_str(),
            "reason": p.reason,
        })).collect::<Vec<_>>(),
    })
}
