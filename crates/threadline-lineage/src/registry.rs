//! Asset manifests: base models, model versions, LoRA adapters, prompt templates and
//! deployments — what OpenLineage and OTel carry poorly — turned into registry entries
//! plus the edges they declare. The manifest format (below, and in the README) is a
//! public contract; unknown fields are refused so a typo is not silently ignored.
//!
//! ```yaml
//! models:           [{id: meta-llama/Meta-Llama-3-8B}]
//! model_versions:   [{id: llama-3-8b-fin@2, model: meta-llama/Meta-Llama-3-8B}]
//! adapters:         [{id: fin-lora@7, base_model: meta-llama/Meta-Llama-3-8B,
//!                     relation: adapter, artifact: "s3://models/fin-lora/7",
//!                     training_run: 3f0c…-uuid, config_hash: "…", tags: [pii]}]
//! prompt_templates: [{id: support-chat, version: v2.1.4, text_sha256: "…"}]
//! deployments:      [{id: chat-prod, image: "ghcr.io/acme/inference:v2.3.1",
//!                     route: /v1/chat/completions, from: 2026-11-01T00:00:00Z,
//!                     instances: [{id: inst-3, serves: fin-lora@7}]}]
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use threadline_model::{
    AssetRegistration, DeclaredEdge, DeclaredValidity, EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate,
    NodeId, NodeKind,
};

/// Why a manifest was refused; names the entry and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest is not valid: {0}")]
    Shape(String),
    #[error("{entry}: {problem}")]
    Entry { entry: String, problem: String },
}

fn entry_error(entry: impl Into<String>, problem: impl Into<String>) -> ManifestError {
    ManifestError::Entry {
        entry: entry.into(),
        problem: problem.into(),
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(default)]
    pub models: Vec<ModelSpec>,
    #[serde(default)]
    pub model_versions: Vec<ModelVersionSpec>,
    #[serde(default)]
    pub adapters: Vec<AdapterSpec>,
    #[serde(default)]
    pub prompt_templates: Vec<PromptTemplateSpec>,
    #[serde(default)]
    pub deployments: Vec<DeploymentSpec>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelVersionSpec {
    pub id: String,
    /// The model this is a version of.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_run: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// How an adapter relates to its base model (Hugging Face `base_model_relation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Relation {
    #[default]
    Adapter,
    Finetune,
    Quantized,
    Merge,
}

impl Relation {
    fn as_str(self) -> &'static str {
        match self {
            Relation::Adapter => "adapter",
            Relation::Finetune => "finetune",
            Relation::Quantized => "quantized",
            Relation::Merge => "merge",
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterSpec {
    pub id: String,
    pub base_model: String,
    #[serde(default)]
    pub relation: Relation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PromptTemplateSpec {
    pub id: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default)]
    pub instances: Vec<InstanceSpec>,
    /// When the deployment started serving (RFC 3339); registration time if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// When it stopped serving, if it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSpec {
    pub id: String,
    /// The adapter or model version this instance serves (`kind:key` or a bare id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serves: Option<String>,
    /// Overrides the deployment's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// Parses a manifest from JSON.
pub fn parse_manifest(value: Value) -> Result<Manifest, ManifestError> {
    // serde would take a struct from a positional array (`[[{"id": "m"}]]` as models):
    // a manifest and its entries must be objects, named field by field.
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let Value::Object(collections) = &value else {
        return Err(ManifestError::Shape(format!(
            "a manifest is an object with any of {}, not {}",
            COLLECTIONS.join(", "),
            kind(&value)
        )));
    };
    for (collection, entries) in collections {
        if let Value::Array(entries) = entries {
            if let Some((i, entry)) = entries.iter().enumerate().find(|(_, e)| !e.is_object()) {
                return Err(entry_error(
                    format!("{collection}[{i}]"),
                    format!(
                        "an entry is an object with named fields, not {}",
                        kind(entry)
                    ),
                ));
            }
        }
    }
    let manifest: Manifest =
        serde_json::from_value(value).map_err(|e| ManifestError::Shape(e.to_string()))?;
    if manifest.is_empty() {
        return Err(ManifestError::Shape(format!(
            "the manifest has no entries: give at least one of {}",
            COLLECTIONS.join(", ")
        )));
    }
    Ok(manifest)
}

impl Manifest {
    /// Whether it registers nothing.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
            && self.model_versions.is_empty()
            && self.adapters.is_empty()
            && self.prompt_templates.is_empty()
            && self.deployments.is_empty()
    }
}

/// The dataset an artifact URI's files are, by OpenLineage naming: `s3://bucket/key` is
/// namespace `s3://bucket`, name `key`; a plain path is namespace `file`.
pub fn artifact_dataset(uri: &str) -> Option<NodeId> {
    let uri = uri.trim();
    if uri.is_empty() {
        return None;
    }
    let (namespace, name) = match uri.split_once("://") {
        Some(("file", path)) => ("file".to_owned(), path.to_owned()),
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            (format!("{scheme}://{authority}"), path.to_owned())
        }
        None => ("file".to_owned(), uri.to_owned()),
    };
    if name.is_empty() {
        return None;
    }
    Some(NodeId::namespaced(NodeKind::Dataset, &namespace, &name))
}

fn parse_time(entry: &str, field: &str, raw: &str) -> Result<i64, ManifestError> {
    chrono::DateTime::parse_from_rfc3339(raw)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .ok_or_else(|| {
            entry_error(
                entry,
                format!("{field} {raw:?} is not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z)"),
            )
        })
}

fn check_id(collection: &str, index: usize, id: &str) -> Result<String, ManifestError> {
    let entry = format!("{collection}[{index}]");
    if id.trim().is_empty() {
        return Err(entry_error(entry, "id must not be empty"));
    }
    Ok(format!("{collection}[{index}] ({id})"))
}

struct Builder {
    update: GraphUpdate,
    now_ns: i64,
}

impl Builder {
    fn asset<T: Serialize>(&mut self, id: NodeId, spec: &T) {
        self.update.assets.push(AssetRegistration {
            id,
            spec: serde_json::to_value(spec).unwrap_or(Value::Null),
            registered_ns: self.now_ns,
            declares: Vec::new(),
        });
    }

    /// A provenance edge the registry declares: it holds for good (until a revision
    /// supersedes it).
    fn edge(&mut self, src: NodeId, dst: NodeId, kind: EdgeKind, seen_ns: i64, evidence: Value) {
        self.declare(
            src,
            dst,
            kind,
            seen_ns,
            evidence,
            DeclaredValidity::default(),
        );
    }

    fn declare(
        &mut self,
        src: NodeId,
        dst: NodeId,
        kind: EdgeKind,
        seen_ns: i64,
        evidence: Value,
        validity: DeclaredValidity,
    ) {
        self.update.edges.push(EdgeUpsert {
            src: EdgeEnd::Node(src),
            dst: EdgeEnd::Node(dst),
            kind,
            seen_ns,
            evidence,
            declared: Some(validity),
        });
    }

    /// Artifact and training run of an adapter / model version.
    fn provenance(&mut self, node: &NodeId, artifact: Option<&str>, training_run: Option<&str>) {
        if let Some(dataset) = artifact.and_then(artifact_dataset) {
            self.edge(
                dataset,
                node.clone(),
                EdgeKind::ArtifactOf,
                self.now_ns,
                Value::Null,
            );
        }
        if let Some(run) = training_run.filter(|r| !r.trim().is_empty()) {
            self.edge(
                NodeId::new(NodeKind::Run, run.trim()),
                node.clone(),
                EdgeKind::Produced,
                self.now_ns,
                json!({"via": "registry training_run"}),
            );
        }
    }
}

impl Builder {
    /// The update, each asset with the edges its spec declares into it.
    fn finish(mut self) -> GraphUpdate {
        let update = &mut self.update;
        for asset in &mut update.assets {
            let mut declares: Vec<DeclaredEdge> = update
                .edges
                .iter()
                .filter(|e| EdgeKind::DECLARED.contains(&e.kind))
                .filter(|e| matches!(&e.dst, EdgeEnd::Node(dst) if *dst == asset.id))
                .filter_map(|e| match &e.src {
                    EdgeEnd::Node(src) => Some(DeclaredEdge {
                        src: src.clone(),
                        kind: e.kind,
                    }),
                    EdgeEnd::CurrentVersionOf(_) => None,
                })
                .collect();
            declares.sort();
            declares.dedup();
            asset.declares = declares;
        }
        self.update
    }
}

/// Registry entries and edges for a whole manifest, registered at `now_ns`.
pub fn manifest_to_update(manifest: &Manifest, now_ns: i64) -> Result<GraphUpdate, ManifestError> {
    let mut b = Builder {
        update: GraphUpdate::default(),
        now_ns,
    };
    let model_version_ids: Vec<&str> = manifest
        .model_versions
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    let adapter_ids: Vec<&str> = manifest.adapters.iter().map(|a| a.id.as_str()).collect();
    for (i, m) in manifest.models.iter().enumerate() {
        check_id("models", i, &m.id)?;
        b.asset(NodeId::new(NodeKind::Model, m.id.trim()), m);
    }
    for (i, m) in manifest.model_versions.iter().enumerate() {
        let entry = check_id("model_versions", i, &m.id)?;
        if m.model.trim().is_empty() {
            return Err(entry_error(entry, "model must not be empty"));
        }
        let id = NodeId::new(NodeKind::ModelVersion, m.id.trim());
        b.asset(id.clone(), m);
        b.edge(
            NodeId::new(NodeKind::Model, m.model.trim()),
            id.clone(),
            EdgeKind::HasVersion,
            now_ns,
            Value::Null,
        );
        b.provenance(&id, m.artifact.as_deref(), m.training_run.as_deref());
    }
    for (i, a) in manifest.adapters.iter().enumerate() {
        let entry = check_id("adapters", i, &a.id)?;
        if a.base_model.trim().is_empty() {
            return Err(entry_error(entry, "base_model must not be empty"));
        }
        let id = NodeId::new(NodeKind::Adapter, a.id.trim());
        b.asset(id.clone(), a);
        let base_kind = if model_version_ids.contains(&a.base_model.trim()) {
            NodeKind::ModelVersion
        } else {
            NodeKind::Model
        };
        b.edge(
            NodeId::new(base_kind, a.base_model.trim()),
            id.clone(),
            EdgeKind::BaseOf,
            now_ns,
            json!({"relation": a.relation.as_str()}),
        );
        b.provenance(&id, a.artifact.as_deref(), a.training_run.as_deref());
    }
    for (i, p) in manifest.prompt_templates.iter().enumerate() {
        let entry = check_id("prompt_templates", i, &p.id)?;
        if p.version.trim().is_empty() {
            return Err(entry_error(entry, "version must not be empty"));
        }
        if let Some(sha) = &p.text_sha256 {
            if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(entry_error(
                    entry,
                    format!("text_sha256 {sha:?} is not 64 hex digits"),
                ));
            }
        }
        b.asset(prompt_node(&p.id, &p.version), p);
    }
    for (i, d) in manifest.deployments.iter().enumerate() {
        let entry = check_id("deployments", i, &d.id)?;
        let declared_from = d
            .from
            .as_deref()
            .map(|t| parse_time(&entry, "from", t))
            .transpose()?;
        let from = declared_from.unwrap_or(now_ns);
        let to =
            d.to.as_deref()
                .map(|t| parse_time(&entry, "to", t))
                .transpose()?;
        if to.is_some_and(|t| t < from) {
            return Err(entry_error(entry, "to is before from"));
        }
        let id = NodeId::new(NodeKind::Deployment, d.id.trim());
        b.asset(id.clone(), d);
        // An edge's seen-interval is the deployment's from..to (or ..now); it holds
        // from `from` (without one, from the start) until `to`.
        let validity = DeclaredValidity {
            from_ns: declared_from,
            until_ns: to,
        };
        let edge = |b: &mut Builder, src: NodeId, dst: NodeId, kind: EdgeKind| {
            b.declare(src.clone(), dst.clone(), kind, from, Value::Null, validity);
            b.declare(src, dst, kind, to.unwrap_or(now_ns), Value::Null, validity);
        };
        for (j, inst) in d.instances.iter().enumerate() {
            if inst.id.trim().is_empty() {
                return Err(entry_error(
                    format!("{entry}.instances[{j}]"),
                    "id must not be empty",
                ));
            }
            let instance = NodeId::new(NodeKind::Instance, inst.id.trim());
            edge(&mut b, id.clone(), instance.clone(), EdgeKind::Deploys);
            if let Some(image) = inst.image.as_ref().or(d.image.as_ref()) {
                edge(
                    &mut b,
                    NodeId::new(NodeKind::Image, image.trim()),
                    instance.clone(),
                    EdgeKind::RunsOn,
                );
            }
            if let Some(route) = &d.route {
                edge(
                    &mut b,
                    instance.clone(),
                    NodeId::new(NodeKind::Route, route.trim()),
                    EdgeKind::Answers,
                );
            }
            if let Some(serves) = &inst.serves {
                let served = served_node(serves, &adapter_ids, &model_version_ids, manifest);
                edge(&mut b, served, instance.clone(), EdgeKind::ServedBy);
            }
        }
    }
    Ok(b.finish())
}

/// `prompt:ID@VERSION`.
pub fn prompt_node(id: &str, version: &str) -> NodeId {
    NodeId::new(
        NodeKind::Prompt,
        format!("{}@{}", id.trim(), version.trim()),
    )
}

/// A manifest entry's reference to a node the manifest does not define itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `collection[index] (id)`, as errors name entries.
    pub entry: String,
    pub field: &'static str,
    pub node: NodeId,
}

/// The references of `manifest` to nodes it does not define: a model version's model,
/// an adapter's base model, what a deployment's instance serves. The registry adds
/// such a node bare; the caller warns when nothing else knows it either.
pub fn references(manifest: &Manifest) -> Vec<Reference> {
    let model_ids: Vec<&str> = manifest.models.iter().map(|m| m.id.trim()).collect();
    let model_version_ids: Vec<&str> = manifest
        .model_versions
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    let adapter_ids: Vec<&str> = manifest.adapters.iter().map(|a| a.id.as_str()).collect();
    let defined = |node: &NodeId| match node.kind {
        NodeKind::Model => model_ids.contains(&node.key.as_str()),
        NodeKind::ModelVersion => model_version_ids.iter().any(|v| v.trim() == node.key),
        NodeKind::Adapter => adapter_ids.iter().any(|a| a.trim() == node.key),
        _ => true,
    };
    let mut out = Vec::new();
    let mut push = |entry: String, field: &'static str, node: NodeId| {
        if !defined(&node) {
            out.push(Reference { entry, field, node });
        }
    };
    for (i, m) in manifest.model_versions.iter().enumerate() {
        let node = NodeId::new(NodeKind::Model, m.model.trim());
        push(
            format!("model_versions[{i}] ({})", m.id.trim()),
            "model",
            node,
        );
    }
    for (i, a) in manifest.adapters.iter().enumerate() {
        let kind = if model_version_ids.contains(&a.base_model.trim()) {
            NodeKind::ModelVersion
        } else {
            NodeKind::Model
        };
        let node = NodeId::new(kind, a.base_model.trim());
        push(
            format!("adapters[{i}] ({})", a.id.trim()),
            "base_model",
            node,
        );
    }
    for (i, d) in manifest.deployments.iter().enumerate() {
        for (j, inst) in d.instances.iter().enumerate() {
            if let Some(serves) = inst.serves.as_deref().filter(|s| !s.trim().is_empty()) {
                let node = served_node(serves, &adapter_ids, &model_version_ids, manifest);
                let entry = format!(
                    "deployments[{i}] ({}).instances[{j}] ({})",
                    d.id.trim(),
                    inst.id.trim()
                );
                push(entry, "serves", node);
            }
        }
    }
    out
}

fn served_node(
    serves: &str,
    adapters: &[&str],
    model_versions: &[&str],
    manifest: &Manifest,
) -> NodeId {
    let serves = serves.trim();
    if let Ok(id) = serves.parse::<NodeId>() {
        if !adapters.contains(&serves) && !model_versions.contains(&serves) {
            return id;
        }
    }
    if model_versions.contains(&serves) {
        NodeId::new(NodeKind::ModelVersion, serves)
    } else if manifest.models.iter().any(|m| m.id == serves) && !adapters.contains(&serves) {
        NodeId::new(NodeKind::Model, serves)
    } else {
        NodeId::new(NodeKind::Adapter, serves)
    }
}

/// The manifest collections, as used in `PUT /api/v1/assets/{collection}/{id}`.
pub const COLLECTIONS: [&str; 5] = [
    "models",
    "model_versions",
    "adapters",
    "prompt_templates",
    "deployments",
];

/// The node kind a collection registers.
pub fn collection_kind(collection: &str) -> Option<NodeKind> {
    match collection {
        "models" => Some(NodeKind::Model),
        "model_versions" => Some(NodeKind::ModelVersion),
        "adapters" => Some(NodeKind::Adapter),
        "prompt_templates" => Some(NodeKind::Prompt),
        "deployments" => Some(NodeKind::Deployment),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        parse_manifest(json!({
            "models": [{"id": "meta-llama/Meta-Llama-3-8B"}],
            "adapters": [{"id": "fin-lora@7", "base_model": "meta-llama/Meta-Llama-3-8B",
                          "relation": "adapter", "artifact": "s3://models/fin-lora/7",
                          "training_run": "3f0c9a62-7d1e-4b55-9a8e-1c2d3e4f5a6b"}],
            "prompt_templates": [{"id": "support-chat", "version": "v2.1.4",
                                  "text_sha256": "a".repeat(64)}],
            "deployments": [{"id": "chat-prod", "image": "ghcr.io/acme/inference:v2.3.1",
                             "route": "/v1/chat/completions",
                             "instances": [{"id": "inst-3", "serves": "fin-lora@7"}]}]
        }))
        .unwrap()
    }

    #[test]
    fn references_to_entries_the_manifest_does_not_define_are_listed() {
        assert_eq!(references(&manifest()), []);
        let m = parse_manifest(json!({
            "adapters": [{"id": "a@1", "base_model": "org/base", "relation": "adapter"}],
            "deployments": [{"id": "d", "instances": [{"id": "i-1", "serves": "b@2"}]}]
        }))
        .unwrap();
        let refs: Vec<String> = references(&m)
            .iter()
            .map(|r| format!("{} {} {}", r.entry, r.field, r.node))
            .collect();
        assert_eq!(
            refs,
            [
                "adapters[0] (a@1) base_model model:org/base",
                "deployments[0] (d).instances[0] (i-1) serves adapter:b@2"
            ]
        );
    }

    #[test]
    fn a_manifest_registers_assets_and_declares_their_edges() {
        let update = manifest_to_update(&manifest(), 1_000).unwrap();
        let assets: Vec<String> = update.assets.iter().map(|a| a.id.to_string()).collect();
        assert_eq!(
            assets,
            [
                "model:meta-llama/Meta-Llama-3-8B",
                "adapter:fin-lora@7",
                "prompt:support-chat@v2.1.4",
                "deployment:chat-prod"
            ]
        );
        let edge = |kind: EdgeKind| {
            update
                .edges
                .iter()
                .filter(|e| e.kind == kind)
                .map(|e| match (&e.src, &e.dst) {
                    (EdgeEnd::Node(s), EdgeEnd::Node(d)) => format!("{s} -> {d}"),
                    _ => unreachable!("registry edges name their nodes"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            edge(EdgeKind::BaseOf),
            ["model:meta-llama/Meta-Llama-3-8B -> adapter:fin-lora@7"]
        );
        assert_eq!(
            edge(EdgeKind::ArtifactOf),
            ["dataset:s3://models:fin-lora/7 -> adapter:fin-lora@7"]
        );
        assert_eq!(
            edge(EdgeKind::Produced),
            ["run:3f0c9a62-7d1e-4b55-9a8e-1c2d3e4f5a6b -> adapter:fin-lora@7"]
        );
        assert!(
            edge(EdgeKind::ServedBy).contains(&"adapter:fin-lora@7 -> instance:inst-3".to_owned())
        );
        assert!(edge(EdgeKind::Answers)
            .contains(&"instance:inst-3 -> route:/v1/chat/completions".to_owned()));
    }

    /// A manifest that registers nothing, or registers from positional arrays, is
    /// refused by name instead of answering 200.
    #[test]
    fn empty_and_positional_manifests_are_refused() {
        for (value, needle) in [
            (json!([]), "not an array"),
            (json!([[{"id": "m"}]]), "not an array"),
            (json!({}), "no entries"),
            (json!({"models": []}), "no entries"),
            (json!({"models": [["m"]]}), "models[0]"),
            (json!({"models": ["m"]}), "not a string"),
        ] {
            let err = parse_manifest(value.clone()).unwrap_err().to_string();
            assert!(err.contains(needle), "{value}: {err}");
        }
        assert!(parse_manifest(json!({"models": [{"id": "m"}]})).is_ok());
    }

    #[test]
    fn bad_entries_are_named() {
        let err = parse_manifest(json!({"adapters": [{"id": "x"}]})).unwrap_err();
        assert!(err.to_string().contains("base_model"), "{err}");
        let err = parse_manifest(json!({"modles": []})).unwrap_err();
        assert!(err.to_string().contains("modles"), "{err}");
        let mut m = manifest();
        m.prompt_templates[0].text_sha256 = Some("xyz".into());
        let err = manifest_to_update(&m, 0).unwrap_err().to_string();
        assert!(
            err.starts_with("prompt_templates[0] (support-chat): text_sha256"),
            "{err}"
        );
        let mut m = manifest();
        m.deployments[0].from = Some("yesterday".into());
        assert!(manifest_to_update(&m, 0)
            .unwrap_err()
            .to_string()
            .contains("from"));
    }

    #[test]
    fn artifact_uris_map_to_openlineage_dataset_names() {
        assert_eq!(
            artifact_dataset("s3://models/fin-lora/7")
                .unwrap()
                .to_string(),
            "dataset:s3://models:fin-lora/7"
        );
        assert_eq!(
            artifact_dataset("/srv/models/x").unwrap().to_string(),
            "dataset:file:/srv/models/x"
        );
        assert!(artifact_dataset("s3://bucket").is_none());
    }
}
