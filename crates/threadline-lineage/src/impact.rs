//! Impact plans: given the nodes downstream of a changed (or erased) node, what to do
//! about each one, decided by policy rules from a TOML file — match a node kind, a
//! name glob and tags (`pii`, …) → an action (`retrain`, `reindex`, `anonymize`,
//! `notify`) with a reason. The first matching rule wins; Threadline ships a default
//! policy (`policy/default-impact.toml`).

use serde::Deserialize;
use serde_json::Value;
use threadline_model::{LineageNode, NodeKind};

/// What a rule asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Retrain,
    Reindex,
    Anonymize,
    Notify,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Retrain => "retrain",
            Action::Reindex => "reindex",
            Action::Anonymize => "anonymize",
            Action::Notify => "notify",
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A node kind, or "*".
    #[serde(default = "any")]
    pub kind: String,
    /// Glob on the node key; `*` matches any run of characters.
    #[serde(default = "any")]
    pub name: String,
    /// Every one of these tags must be on the node.
    #[serde(default)]
    pub tags: Vec<String>,
    pub action: Action,
    pub reason: String,
}

fn any() -> String {
    "*".to_owned()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImpactPolicy {
    #[serde(rename = "rule", default)]
    pub rules: Vec<Rule>,
}

/// Why a policy file was refused.
#[derive(Debug, Clone, thiserror::Error)]
#[error("impact policy is invalid: {0}")]
pub struct PolicyError(String);

const DEFAULT_POLICY: &str = include_str!("../policy/default-impact.toml");

impl ImpactPolicy {
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let policy: ImpactPolicy =
            toml::from_str(text).map_err(|e| PolicyError(e.message().to_owned()))?;
        for (i, rule) in policy.rules.iter().enumerate() {
            if rule.kind != "*" && rule.kind.parse::<NodeKind>().is_err() {
                return Err(PolicyError(format!(
                    "rule {}: kind {:?} is not a node kind or \"*\"",
                    i + 1,
                    rule.kind
                )));
            }
        }
        Ok(policy)
    }

    /// The policy Threadline ships.
    pub fn default_policy() -> Self {
        Self::parse(DEFAULT_POLICY).expect("the shipped default policy parses")
    }

    /// The first rule matching `node`, if any.
    pub fn decide(&self, node: &LineageNode) -> Option<&Rule> {
        let tags = node_tags(&node.props);
        self.rules.iter().find(|r| {
            (r.kind == "*" || r.kind == node.id.kind.as_str())
                && glob(&r.name, &node.id.key)
                && r.tags.iter().all(|t| tags.contains(t))
        })
    }
}

/// Tags a node carries: its registry spec's `tags`, and the keys (and `key:value`) of
/// an OpenLineage `tags` facet.
pub fn node_tags(props: &Value) -> Vec<String> {
    let mut tags: Vec<String> = props["spec"]["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    for facet in [&props["facets"]["tags"], &props["facets"]["tags"]["tags"]] {
        for t in facet.as_array().into_iter().flatten() {
            if let Some(k) = t["key"].as_str() {
                tags.push(k.to_owned());
                if let Some(v) = t["value"].as_str() {
                    tags.push(format!("{k}:{v}"));
                }
            }
        }
    }
    tags
}

/// `*` matches any run of characters; everything else literally.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use threadline_model::NodeId;

    use super::*;

    fn node(id: &str, props: Value) -> LineageNode {
        LineageNode {
            id: id.parse::<NodeId>().unwrap(),
            first_seen_ns: 0,
            last_seen_ns: 0,
            props,
        }
    }

    #[test]
    fn the_default_policy_decides_by_kind_name_and_tags() {
        let p = ImpactPolicy::default_policy();
        let act = |n: &LineageNode| p.decide(n).map(|r| r.action);
        assert_eq!(
            act(&node("adapter:fin-lora@7", json!({}))),
            Some(Action::Retrain)
        );
        assert_eq!(
            act(&node("dataset:warehouse:support-kb-index", json!({}))),
            Some(Action::Reindex)
        );
        let pii = json!({"facets": {"tags": {"tags": [{"key": "pii", "value": "true"}]}}});
        assert_eq!(
            act(&node("dataset:warehouse:users", pii)),
            Some(Action::Anonymize)
        );
        assert_eq!(
            act(&node("instance:inst-3", json!({}))),
            Some(Action::Notify)
        );
    }

    #[test]
    fn globs_and_bad_policies() {
        assert!(glob("*index*", "support-kb-index-v2"));
        assert!(glob("fin-*@7", "fin-lora@7"));
        assert!(!glob("fin-*@7", "fin-lora@8"));
        assert!(glob("*", ""));
        let err = ImpactPolicy::parse(
            "[[rule]]\nkind = \"table\"\naction = \"notify\"\nreason = \"r\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("table"), "{err}");
        assert!(ImpactPolicy::parse("[[rule]]\naction = \"burn\"\nreason = \"r\"\n").is_err());
    }
}
