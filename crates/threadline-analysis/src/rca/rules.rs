//! The fault-pattern file: rules that boost a candidate of some kind when the
//! incident moved some metrics (and, optionally, one rejection reason dominates).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{CandidateKind, RcaInput};
use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};

/// One fault pattern.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    pub name: String,
    /// Incident metrics it applies to (the diagnosed metric or any anomaly).
    pub when: Vec<String>,
    /// Another metric that must be anomalous in the same incident.
    #[serde(default)]
    pub with_anomaly: Option<String>,
    /// A rejection reason that must make up most rejections in the window.
    #[serde(default)]
    pub rejection_reason: Option<String>,
    /// Candidate attribute dimension it blames (`instance`, `adapter` …).
    #[serde(default)]
    pub blames: Option<String>,
    /// Candidate change kind it blames (`prompt_version`, `dataset_drift` …).
    #[serde(default)]
    pub change: Option<CandidateKind>,
    pub boost: f64,
    pub explain: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRules {
    #[serde(default, rename = "rule")]
    pub rules: Vec<FaultRule>,
}

const DEFAULT_RULES: &str = include_str!("../../rules/default-faults.toml");

impl FaultRules {
    pub fn default_rules() -> Self {
        Self::parse(DEFAULT_RULES).unwrap_or_default()
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let rules: FaultRules = toml::from_str(text).map_err(|e| e.to_string())?;
        for r in &rules.rules {
            for m in r.when.iter().chain(r.with_anomaly.iter()) {
                Metric::named(m).map_err(|e| format!("rule {:?}: {e}", r.name))?;
            }
            if let Some(d) = &r.blames {
                if Dimension::parse(d).is_none() {
                    return Err(format!("rule {:?}: blames unknown dimension {d:?}", r.name));
                }
            }
            if !(0.0..=1.0).contains(&r.boost) {
                return Err(format!(
                    "rule {:?}: boost {} is not in [0, 1]",
                    r.name, r.boost
                ));
            }
        }
        Ok(rules)
    }
}

/// The rejection reason behind most rejections in the window, if any.
pub(super) fn dominant_rejection(window: &[(SeriesKey, RollupCell)]) -> Option<String> {
    let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, c) in window {
        for (r, n) in &c.rejections {
            *reasons.entry(r.as_str()).or_default() += n;
        }
    }
    let total: u64 = reasons.values().sum();
    reasons
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .filter(|(_, n)| *n * 2 > total)
        .map(|(r, _)| r.to_owned())
}

pub(super) fn rule_boost(
    input: &RcaInput<'_>,
    dominant: Option<&str>,
    dimension: Option<Dimension>,
    change: Option<CandidateKind>,
) -> (f64, Vec<String>) {
    let mut best = 0.0f64;
    let mut matched = Vec::new();
    for r in &input.rules.rules {
        let metrics: Vec<Metric> = std::iter::once(input.metric)
            .chain(input.co_anomalies.iter().copied())
            .collect();
        let when = r
            .when
            .iter()
            .any(|m| metrics.iter().any(|x| x.as_str() == m));
        let with = r
            .with_anomaly
            .as_ref()
            .is_none_or(|m| metrics.iter().any(|x| x.as_str() == m));
        let reason = r
            .rejection_reason
            .as_ref()
            .is_none_or(|want| dominant == Some(want.as_str()));
        let blames = r
            .blames
            .as_ref()
            .is_none_or(|d| dimension.is_some_and(|x| x.as_str() == d));
        let changes = r.change.is_none_or(|c| change == Some(c));
        let targets_something = r.blames.is_some() || r.change.is_some();
        if when && with && reason && blames && changes && targets_something {
            best = best.max(r.boost);
            matched.push(format!("{}: {}", r.name, r.explain));
        }
    }
    (best, matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_rules_name_known_change_kinds() {
        let rules = FaultRules::parse(DEFAULT_RULES).unwrap();
        assert!(rules
            .rules
            .iter()
            .any(|r| r.change == Some(CandidateKind::DatasetDrift)));
        let typo = "[[rule]]\nname = \"x\"\nwhen = [\"error_rate\"]\nchange = \"adapter_rolout\"\nboost = 0.5\nexplain = \"x\"\n";
        let err = FaultRules::parse(typo).unwrap_err();
        assert!(err.contains("adapter_rolout"), "{err}");
    }

    #[test]
    fn shipped_rules_parse_and_bad_rules_are_refused() {
        assert!(FaultRules::default_rules().rules.len() >= 5);
        let err = FaultRules::parse("[[rule]]\nname='x'\nwhen=['p98']\nboost=0.1\nexplain='e'\n")
            .unwrap_err();
        assert!(err.contains("unknown metric \"p98\""), "{err}");
    }
}
