//! The asset registry API: `PUT /api/v1/assets` (a whole manifest, as JSON),
//! `PUT /api/v1/assets/{collection}/{id}` (one entry), and `GET` of both to read
//! registered entries back with their revision. Scoped to the caller's tenant.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use threadline_lineage::registry::{self, COLLECTIONS};
use threadline_model::{AssetOutcome, NodeId, TenantId};

use crate::dto;
use crate::error::ApiError;
use crate::state::{AppState, Tenant};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/assets", axum::routing::put(register_manifest))
        .route("/api/v1/assets/{collection}", get(list_assets))
        .route(
            "/api/v1/assets/{collection}/{*id}",
            get(get_asset).put(register_one),
        )
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid JSON: {e}")))
}

async fn register(
    state: &AppState,
    tenant: &TenantId,
    manifest: Value,
) -> Result<Json<Value>, ApiError> {
    let manifest =
        registry::parse_manifest(manifest).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let now = crate::params::now_ns();
    let update = registry::manifest_to_update(&manifest, now)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // References to nodes neither this manifest, the registry nor traffic knows: the
    // registry adds them bare, and the caller is told (a typo, usually).
    let references = registry::references(&manifest);
    let store = state.store.clone();
    let who = tenant.clone();
    let warnings: Vec<String> = crate::error::blocking(move || {
        let mut out = Vec::new();
        for r in references {
            if store.get_node(&who, &r.node)?.is_none() {
                out.push(format!(
                    "{}: {} {} is not registered and has not been seen; it was added without details",
                    r.entry, r.field, r.node
                ));
            }
        }
        Ok(out)
    })
    .await?;
    let ack = state.store.write_graph(tenant, update, now)?;
    let applied = ack.wait().await?;
    let assets: Vec<Value> = applied
        .assets
        .iter()
        .map(|(id, outcome)| {
            let (word, revision) = match outcome {
                AssetOutcome::Created => ("created", 1),
                AssetOutcome::Unchanged => ("unchanged", 0),
                AssetOutcome::Revised(n) => ("revised", *n),
            };
            let mut v = json!({ "id": id.to_string(), "outcome": word });
            if revision > 0 {
                v["revision"] = json!(revision);
            }
            v
        })
        .collect();
    Ok(Json(json!({ "assets": assets, "warnings": warnings })))
}

/// `PUT /api/v1/assets`: a manifest (`models`, `model_versions`, `adapters`,
/// `prompt_templates`, `deployments`).
async fn register_manifest(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    register(&state, &tenant, parse_json(&body)?).await
}

fn check_collection(collection: &str) -> Result<(), ApiError> {
    if registry::collection_kind(collection).is_none() {
        return Err(ApiError::NotFound(format!(
            "no asset collection {collection:?}: use one of {}",
            COLLECTIONS.join(", ")
        )));
    }
    Ok(())
}

/// `PUT /api/v1/assets/{collection}/{id}`: one entry; its `id` may be left out.
async fn register_one(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path((collection, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    check_collection(&collection)?;
    let mut entry = parse_json(&body)?;
    let obj = entry
        .as_object_mut()
        .ok_or_else(|| ApiError::BadRequest("body must be a JSON object".to_owned()))?;
    match obj.get("id").and_then(Value::as_str) {
        Some(body_id) if body_id != id => {
            return Err(ApiError::BadRequest(format!(
                "id {body_id:?} in the body differs from {id:?} in the path"
            )))
        }
        _ => {
            obj.insert("id".into(), json!(id));
        }
    }
    register(&state, &tenant, json!({ collection: [entry] })).await
}

fn asset_json(node: &threadline_model::LineageNode) -> Value {
    let mut v = dto::lineage_node(node);
    v["spec"] = node.props.get("spec").cloned().unwrap_or(Value::Null);
    v["revision"] = node.props.get("revision").cloned().unwrap_or(Value::Null);
    v
}

async fn list_assets(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path(collection): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_collection(&collection)?;
    let kind = registry::collection_kind(&collection).expect("checked");
    let store = state.store.clone();
    let nodes =
        crate::error::blocking(move || Ok(store.find_nodes(&tenant, Some(kind), None, 1000)?))
            .await?;
    // Nodes seen only in spans are not registered: list the registered ones.
    let assets: Vec<Value> = nodes
        .iter()
        .filter(|n| n.props.get("spec").is_some())
        .map(asset_json)
        .collect();
    Ok(Json(json!({ collection: assets })))
}

async fn get_asset(
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    Tenant(tenant): Tenant,
    Path((collection, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    check_collection(&collection)?;
    let kind = registry::collection_kind(&collection).expect("checked");
    let node_id = NodeId::new(kind, id.clone());
    let store = state.store.clone();
    let node = crate::error::blocking(move || Ok(store.get_node(&tenant, &node_id)?)).await?;
    match node {
        Some(n) if n.props.get("spec").is_some() => Ok(Json(asset_json(&n))),
        _ => Err(ApiError::NotFound(format!("no {collection} entry {id:?}"))),
    }
}
