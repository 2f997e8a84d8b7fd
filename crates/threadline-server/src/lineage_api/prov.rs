//! `GET /api/v1/prov?format=turtle|jsonld[&root=NODE&depth=N]`: the tenant's lineage
//! as PROV-O. Without `root`, the whole graph; with a node, the subgraph `depth` hops
//! around it; with `root=request:TRACE_ID`, the request as an Activity with its
//! response, and the chain behind it.

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::Digest;
use threadline_lineage::prov::{self, ProvFormat, ProvRequest};
use threadline_model::{Direction, NodeId, NodeKind, TenantId};
use threadline_store::{Store, WalkLimits};

use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/api/v1/prov", get(export))
}

/// Largest whole-graph export; bigger graphs need a `root`.
const MAX_EXPORT_NODES: usize = 200_000;

async fn export(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let mut format = ProvFormat::Turtle;
    let mut root = None;
    let mut depth = 3;
    for (key, value) in &params {
        match key.as_str() {
            "format" => format = value.parse().map_err(ApiError::BadRequest)?,
            "root" => root = Some(value.clone()),
            "depth" => {
                depth = value.parse().map_err(|_| {
                    ApiError::BadRequest(format!("depth {value:?} is not a whole number"))
                })?
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter {other:?}: use format, root and depth"
                )))
            }
        }
    }
    let store = state.store.clone();
    let body = crate::error::blocking(move || {
        let (graph, requests) = match root {
            None => (
                store.graph_dump(&tenant, MAX_EXPORT_NODES)?.ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "the graph has more than {MAX_EXPORT_NODES} nodes: export a subgraph with root=NODE&depth=N"
                    ))
                })?,
                Vec::new(),
            ),
            Some(r) => match r.strip_prefix("request:") {
                Some(trace) => request_export(&store, &tenant, trace)?,
                None => {
                    let start = crate::lineage_api::resolve_one(&store, &tenant, &r)?;
                    let graph = store
                        .walk(
                            &tenant,
                            &start,
                            &WalkLimits {
                                direction: Direction::Both,
                                depth,
                                max_nodes: MAX_EXPORT_NODES,
                                edge_kinds: Vec::new(),
                            },
                        )?
                        .ok_or_else(|| ApiError::NotFound(format!("no lineage node {r:?}")))?;
                    (graph, Vec::new())
                }
            },
        };
        prov::export(&graph, &requests, format).map_err(|e| ApiError::Internal(e.to_string()))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, format.media_type())], body).into_response())
}

/// A request's chain plus the request itself.
fn request_export(
    store: &Store,
    tenant: &TenantId,
    trace: &str,
) -> Result<(threadline_model::LineageGraph, Vec<ProvRequest>), ApiError> {
    let trace_id = crate::error::parse_trace_id(trace)?;
    let mut facts =
        threadline_diagnosis::trace_lineage::TraceFacts::of_trace(store, tenant, trace_id)?;
    let graph = threadline_diagnosis::trace_lineage::chain(
        store,
        tenant,
        trace_id,
        facts.window(),
        &mut facts.served,
    )?;
    let served = &facts.served;
    let present: std::collections::HashSet<&NodeId> = graph.nodes.iter().map(|n| &n.id).collect();
    let request = ProvRequest {
        trace_id: trace_id.to_string(),
        name: facts.root.name.clone(),
        start_ns: facts.start_ns as i64,
        end_ns: facts.end_ns as i64,
        service: facts.root.service.clone(),
        user_digest: facts
            .user_id
            .as_ref()
            .map(|u| hex::encode(sha2::Sha256::digest(u.as_bytes()))),
        used: served
            .sources
            .iter()
            .filter(|s| present.contains(s) && s.kind != NodeKind::Image)
            .cloned()
            .collect(),
        served_by: served
            .instances
            .iter()
            .filter(|i| present.contains(i))
            .cloned()
            .collect(),
    };
    Ok((graph, vec![request]))
}
