//! Root-cause ranking: does a value **explain** the change of the incident's metric, and
//! did it **change**? Scores in [0, 1]:
//!
//! - **References** (`contrast::OwnJudgement`, `judge`): each request of the window is
//!   judged bad — above its reference's latency quantile, failed, refused, short of
//!   its KV hits or generation speed — against the baseline requests that agree with
//!   it on every value already serving (new values and values a change near the onset
//!   brought left out), drawn towards the whole baseline's rate; with fewer than 20
//!   such requests, against the scope's. An instance that always served the long
//!   prompts is held to its own slower tail.
//! - **Explanatory power `EP`** (per attribute value): its requests' change against
//!   their references plus the traffic it gained or lost at its old rate against the
//!   route's, over the route's change (bad mass beyond the baseline rate).
//! - **Contrast `C`**: `recall × (1 − 1/RR)` for `RR > 1`, on the excess against the
//!   references — `recall` the value's share of its dimension's excess, `RR` its excess
//!   rate over that of the requests without it (both smoothed by four bad requests'
//!   worth). The value with the highest `C` leads; a value of another dimension whose
//!   requests hold the leader's and more keeps its `C` only in the proportion of how
//!   bad its requests outside the leader are (`judge_against_leader`).
//! - **Before/after `B`**: `gained × EP × (1 − rate_before / rate)` for a value that
//!   took over traffic, kept as far as its requests before the onset were bad too
//!   (`healthy_before`; not for a change in the minute before the onset; a drift is
//!   judged from when the value it feeds arrived); against a leader (a value whose
//!   bad requests gather on it beyond chance), what it explains beyond it — unless
//!   its requests without the leader are worse than before beyond chance too.
//! - **Combinations** (`combinations`): a leading value narrowed by another
//!   dimension's value where the scan statistic says the narrower slice holds the
//!   excess; either of two values of a dimension where they share its excess and
//!   neither holds most of it. A combination with a value a change brought is that
//!   change's (`narrowed_to`); a leading value that did not change, all of whose
//!   requests took a wider value a change brought at the onset, pairs with that
//!   change, which leads (`pair_with_change`).
//! - **Time share `D`** (per part of the requests — a span name in a service — for
//!   latency metrics of request series): the part's share of the added mean latency,
//!   `D = share × (1 − e^(−2·growth)) × own`, `own` being `1 − max C` over a model
//!   call's own dimensions (an adapter or instance that explains the bad requests is
//!   the more specific cause of a slower model call).
//! - **Service `D`** (`services`, from traces of the series sampled before and during):
//!   a service's own time plus its shares of the gaps of calls into it and of its
//!   calls out (by which end's other calls slowed alike) — a slow network shows in
//!   callers' client spans, not in the service's own — as a share of the added
//!   latency, scored like a part; for failures, the rise
//!   of the requests whose failure began in it over the rise of failures. Model
//!   calls are left to their attributes; a service that is one span name already
//!   ranked is left to that part.
//! - **Links**: proximity `P = exp(−|t_change − t_onset| / 5 min)` of a change upstream
//!   in the lineage graph (30 min before to 5 after; drift: 1 within a day), which
//!   carries the evidence of the value it is or feeds; rules `R` from the
//!   fault-pattern file.
//!
//! `A = 1 − (1 − C)(1 − B)`, `link = 1 − (1 − P/2)(1 − R)`,
//! `confidence = 1 − (1 − A)(1 − A·link)` (`confidence`); a part or service scores its `D`. A
//! change or rule with nothing behind it scores 0.

mod co_moving;
mod combinations;
mod contrast;
mod judge;
mod rules;
mod services;
#[cfg(test)]
mod shapes_tests;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};
use crate::time_went::TimeWent;
use co_moving::fold_co_moving;
use combinations::{either, narrow};
use contrast::{
    contrast_json, contrast_line, contrasts, judge_against_leader, Contrast, OwnJudgement, Scope,
    NOTICEABLE,
};
use rules::{dominant_rejection, rule_boost};
pub use rules::{FaultRule, FaultRules};
pub use services::{SampledSpan, TraceSamples};

/// The dimensions a model call carries itself: when one of them explains the bad
/// requests, it is a more specific cause than the call's span.
const CALL_DIMENSIONS: [Dimension; 6] = [
    Dimension::Model,
    Dimension::Adapter,
    Dimension::Instance,
    Dimension::Image,
    Dimension::PromptVersion,
    Dimension::Provider,
];

/// Request-context dimensions that pick a variant of the model call (an A/B arm, a
/// canary): when one of them explains the bad requests, it too is a more specific
/// cause than the model calls' time.
const VARIANT_DIMENSIONS: [Dimension; 2] = [Dimension::AbGroup, Dimension::GrayTag];

/// Minutes before the onset in which a change's requests are no evidence of its
/// health.
const ONSET_UNCERTAINTY_MINUTES: i64 = 1;

/// What a candidate cause is: a value of an attribute, a span on the critical path,
/// or a kind of change seen in the lineage graph. Serialized (API, fault rules) in
/// snake case: `attribute`, `span`, `adapter_rollout` …
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateKind {
    /// A value of a dimension (`instance=i-6`) that the bad requests concentrate on.
    Attribute,
    /// A (service, span name) whose share of the critical path grew.
    Span,
    /// A service whose spans and calls took the added time, or where the new failures
    /// began (from sampled traces).
    Service,
    AdapterRollout,
    ModelRollout,
    ImageRollout,
    PromptVersion,
    InstanceAdded,
    RunCompleted,
    DatasetDrift,
}

impl CandidateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateKind::Attribute => "attribute",
            CandidateKind::Span => "span",
            CandidateKind::Service => "service",
            CandidateKind::AdapterRollout => "adapter_rollout",
            CandidateKind::ModelRollout => "model_rollout",
            CandidateKind::ImageRollout => "image_rollout",
            CandidateKind::PromptVersion => "prompt_version",
            CandidateKind::InstanceAdded => "instance_added",
            CandidateKind::RunCompleted => "run_completed",
            CandidateKind::DatasetDrift => "dataset_drift",
        }
    }
}

/// A change seen in the lineage graph upstream of the affected series.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// One of the change kinds (never `Attribute` or `Span`).
    pub kind: CandidateKind,
    /// The lineage node (`kind:key`).
    pub subject: String,
    pub at_minute: i64,
    /// The attribute value the change is (adapter `fin-lora@7` …), if any.
    pub attribute: Option<(Dimension, String)>,
    /// Attribute values the change feeds downstream (a run → its adapter).
    pub feeds: Vec<(Dimension, String)>,
    /// Lineage path from the change to the affected series, node ids.
    pub path: Vec<String>,
    /// Extra evidence (drift details, run state …).
    pub detail: serde_json::Value,
}

/// What to diagnose.
pub struct RcaInput<'a> {
    pub metric: Metric,
    /// Other metrics anomalous in the same incident.
    pub co_anomalies: Vec<Metric>,
    pub onset_minute: i64,
    /// Cells of the affected series before the onset and from the onset on.
    pub baseline: &'a [(SeriesKey, RollupCell)],
    pub window: &'a [(SeriesKey, RollupCell)],
    pub changes: Vec<Change>,
    pub rules: &'a FaultRules,
    /// Traces of the series sampled before the onset and in the window, when read.
    pub traces: Option<&'a TraceSamples>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    pub kind: CandidateKind,
    /// `dimension=value` for attributes, the node id for changes.
    pub subject: String,
    pub confidence: f64,
    pub contrast: f64,
    /// Before/after contrast: a value that took over traffic since the baseline and
    /// carries the bad requests.
    pub before_after: f64,
    pub proximity: f64,
    pub rule: f64,
    /// Share of the added latency the candidate's part of the request accounts for
    /// (span candidates), discounted by what the model call's own attributes explain.
    pub time_share: f64,
    /// One line a person reads: what the evidence says.
    pub explanation: String,
    pub evidence: serde_json::Value,
    /// The attribute value whose requests hold the exemplars (for trace lookups).
    #[serde(skip)]
    pub attribute: Option<(Dimension, String)>,
}

/// A candidate's confidence from what its value explains — its contrast within the
/// window `c` and before/after `b`: `A = 1 − (1 − c)(1 − b)` — and what links it to a
/// cause, `link` (a change near the onset, a fault rule): `1 − (1 − A)(1 − A·link)`.
/// The link raises a value in proportion to what it explains: a change or a rule
/// with nothing behind it is no cause (a harmless rollout near the onset scores 0),
/// and one behind a value that explains the change makes it surer.
fn confidence(c: f64, b: f64, link: f64) -> f64 {
    let explains = 1.0 - (1.0 - c) * (1.0 - b);
    1.0 - (1.0 - explains) * (1.0 - explains * link.clamp(0.0, 1.0))
}

fn proximity(change: &Change, onset: i64) -> f64 {
    let earliest = if change.kind == CandidateKind::DatasetDrift {
        24 * 60
    } else {
        30
    };
    let d = change.at_minute - onset;
    if d > 5 || d < -earliest {
        return 0.0;
    }
    if change.kind == CandidateKind::DatasetDrift {
        // Drift acts through training and deployment: its time is far from the onset
        // by nature, so it counts fully within the day before.
        return 1.0;
    }
    (-(d.abs() as f64) / 5.0).exp()
}

/// Ranks the candidates, best first.
pub fn rank(input: &RcaInput<'_>) -> Vec<Candidate> {
    let time_went = TimeWent::of(input);
    let scope = Scope::of(input);
    let own = OwnJudgement::of(input, &scope);
    let mut contrasts = contrasts(input, &scope, &own);
    judge_against_leader(input, &scope, &time_went, &mut contrasts);
    let dominant = dominant_rejection(input.window);
    let mut out: Vec<Candidate> = Vec::new();
    let mut explained: std::collections::HashSet<(Dimension, String)> = Default::default();
    for change in &input.changes {
        let p = proximity(change, input.onset_minute);
        if p <= 0.0 {
            continue;
        }
        // Its own value's contrasts, else those of the best of the values it feeds.
        let both = |c: &Contrast| 1.0 - (1.0 - c.score) * (1.0 - c.before_after);
        let via = match &change.attribute {
            Some(a) => change
                .attribute
                .clone()
                .filter(|_| contrasts.contains_key(a)),
            None => change
                .feeds
                .iter()
                .filter_map(|f| contrasts.get(f).map(|c| (both(c), f)))
                .filter(|(score, _)| *score > 0.0)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, f)| f.clone()),
        };
        let backed = via.as_ref().and_then(|a| contrasts.get(a));
        // A change whose value then served healthy requests until the onset did not
        // bring the bad ones with it (a new image on an instance minutes before that
        // instance's KV cache collapsed): its contrast is kept as far as those
        // requests leave it (`healthy_before`, as for before/after). Not so for a change
        // in the minute before the onset or after: an onset is known to a minute, and
        // a fault's first requests a minute early may be clean by chance (17 of a new
        // model's at a 17% error rate, one time in twenty).
        // A drift acts through the value it feeds (an adapter trained on it): judged
        // from when that value arrived, as the change that brought it is.
        let arrived = match (&change.kind, &via) {
            (CandidateKind::DatasetDrift, Some(fed)) => input
                .changes
                .iter()
                .filter(|c| c.attribute.as_ref() == Some(fed))
                .map(|c| c.at_minute)
                .max()
                .unwrap_or(change.at_minute),
            _ => change.at_minute,
        };
        let near = input.onset_minute - arrived <= ONSET_UNCERTAINTY_MINUTES;
        let (c, b) = backed.map_or((0.0, 0.0), |x| {
            if near {
                (x.score, x.before_after_whole)
            } else {
                (x.score * x.healthy_before, x.before_after)
            }
        });
        if let Some(a) = &change.attribute {
            explained.insert(a.clone());
        }
        let dim = via.as_ref().map(|(d, _)| *d);
        let (r, rules) = rule_boost(input, dominant.as_deref(), dim, Some(change.kind));
        let confidence = confidence(c, b, 1.0 - (1.0 - p / 2.0) * (1.0 - r));
        let minutes = input.onset_minute - change.at_minute;
        let when = match minutes {
            0 => "at the onset".to_owned(),
            m if m > 0 => format!("{m} min before the onset"),
            m => format!("{} min after the onset", -m),
        };
        let backing = match via.as_ref().and_then(|a| contrasts.get(a).map(|c| (a, c))) {
            Some(((d, v), ctr)) if ctr.score > 0.0 || ctr.before_after > 0.0 => {
                contrast_line(input.metric, &format!("{}={v}", d.as_str()), ctr)
            }
            _ => NOT_CONCENTRATED.to_owned(),
        };
        let explanation = format!(
            "{} {} {when}; {backing}",
            change.kind.as_str().replace('_', " "),
            change.subject
        );
        let evidence = serde_json::json!({
            "changed_at_minute": change.at_minute,
            "minutes_before_onset": input.onset_minute - change.at_minute,
            "path": change.path,
            "attribute": via.as_ref().map(|(d, v)| format!("{}={v}", d.as_str())),
            "contrast": via.as_ref().and_then(|a| contrasts.get(a)).map(contrast_json),
            "rules": rules,
            "detail": change.detail,
        });
        out.push(Candidate {
            kind: change.kind,
            subject: change.subject.clone(),
            confidence,
            contrast: c,
            before_after: b,
            proximity: p,
            rule: r,
            time_share: 0.0,
            explanation,
            evidence,
            attribute: via,
        });
    }
    let combinations = narrow(input, &own, &contrasts, |a| !explained.contains(a));
    for ((dim, value), c) in &contrasts {
        // A value with next to no evidence is no candidate, whatever rule its kind
        // matches ("instance=i-6: 0% of the bad requests", boosted as an instance).
        let some = c.score >= NOTICEABLE || c.before_after >= NOTICEABLE;
        if !some || explained.contains(&(*dim, value.clone())) {
            continue;
        }
        let (r, rules) = rule_boost(input, dominant.as_deref(), Some(*dim), None);
        let mut evidence = contrast_json(c);
        evidence["rules"] = serde_json::json!(rules);
        let mut subject = format!("{}={value}", dim.as_str());
        let mut explanation = contrast_line(input.metric, &subject, c);
        let mut score = c.score;
        // Narrowed to a combination of values: the combination is the candidate, its
        // seed's own evidence beside it — unless one of its values is what a change
        // brought: the combination is then that change's, narrowed (a prompt version
        // tried on one arm before it took over), and the seed stands alone.
        let found = combinations
            .iter()
            .find(|x| x.values[0] == (*dim, value.clone()));
        if let Some((combination, host)) = found.and_then(|x| {
            let brought = x.values.iter().find(|v| explained.contains(v))?;
            let host = out.iter_mut().find(|h| {
                h.kind != CandidateKind::Attribute && h.attribute.as_ref() == Some(brought)
            })?;
            Some((x, host))
        }) {
            let narrowed = confidence(combination.score, c.before_after, r);
            host.evidence["narrowed_to"] = serde_json::json!({
                "subject": combination.subject(),
                "share_of_bad": combination.recall,
                "relative_risk": combination.relative_risk,
                "contrast": combination.score,
            });
            host.confidence = host.confidence.max(narrowed);
            host.explanation.push_str(&format!(
                "; {:.0}% of the excess on {}",
                combination.recall * 100.0,
                combination.subject()
            ));
        } else if let Some(combination) = found {
            let narrowed = combination.subject();
            explanation = format!(
                "{narrowed}: {:.0}% of the excess bad requests; their excess rate {:.1}% against {:.1}% on the rest of {subject}",
                combination.recall * 100.0,
                combination.rate_in * 100.0,
                combination.rate_out * 100.0,
            );
            evidence["narrowed_from"] = serde_json::json!({
                "subject": subject,
                "explanation": contrast_line(input.metric, &subject, c),
            });
            evidence["contrast"] = serde_json::json!(combination.score);
            evidence["share_of_bad"] = serde_json::json!(combination.recall);
            evidence["relative_risk"] = serde_json::json!(combination.relative_risk);
            score = combination.score;
            subject = narrowed;
        }
        let confidence = confidence(score, c.before_after, r);
        out.push(Candidate {
            kind: CandidateKind::Attribute,
            explanation,
            subject,
            confidence,
            contrast: score,
            before_after: c.before_after,
            proximity: 0.0,
            rule: r,
            time_share: 0.0,
            evidence,
            attribute: Some((*dim, value.clone())),
        });
    }
    // Either of two values of a dimension that share its excess: one candidate.
    for pair in either(input, &own, |a| !explained.contains(a)) {
        let dim = pair.values[0].0;
        let (r, rules) = rule_boost(input, dominant.as_deref(), Some(dim), None);
        let subject = pair.subject();
        let explanation = format!(
            "{subject}: {:.0}% of the excess bad requests between them ({:.0}% and {:.0}% of {}'s); their excess rate {:.1}% against {:.1}% on its other values",
            pair.recall * 100.0,
            pair.shares[0] * 100.0,
            pair.shares[1] * 100.0,
            dim.as_str(),
            pair.rate_in * 100.0,
            pair.rate_out * 100.0,
        );
        let either_of: Vec<String> = pair
            .values
            .iter()
            .map(|(d, v)| format!("{}={v}", d.as_str()))
            .collect();
        let evidence = serde_json::json!({
            "either_of": either_of,
            "shares_of_dimension_excess": pair.shares,
            "share_of_bad": pair.recall,
            "relative_risk": pair.relative_risk,
            "contrast": pair.score,
            "rules": rules,
        });
        out.push(Candidate {
            kind: CandidateKind::Attribute,
            subject,
            confidence: confidence(pair.score, 0.0, r),
            contrast: pair.score,
            before_after: 0.0,
            proximity: 0.0,
            rule: r,
            time_share: 0.0,
            explanation,
            evidence,
            attribute: Some(pair.values[0].clone()),
        });
    }
    // Where the time went: the parts of the requests whose time grew.
    let call_explained = contrasts
        .iter()
        .filter(|((d, _), _)| CALL_DIMENSIONS.contains(d) || VARIANT_DIMENSIONS.contains(d))
        .map(|(_, c)| c.score)
        .fold(0.0, f64::max);
    let (mut parts, breakdown) = time_went.candidates(call_explained);
    if let Some(samples) = input.traces {
        let named: Vec<String> = parts.iter().map(|p| p.subject.clone()).collect();
        let view = services::view(input.metric, samples, &named);
        parts.iter_mut().for_each(|p| view.cap_part(p));
        out.extend(view.candidates);
    }
    out.extend(parts);
    if !breakdown.is_empty() {
        for cand in &mut out {
            cand.evidence["where_the_time_went"] = serde_json::json!(breakdown);
        }
    }
    if let Some(reason) = &dominant {
        for cand in &mut out {
            cand.evidence["dominant_rejection_reason"] = serde_json::json!(reason);
        }
    }
    // Of values that explain the bad requests alike (an instance, and the old image
    // only it still runs since a rollout elsewhere), the one that was the narrower
    // before the onset too comes first: it did not just come to coincide with them
    // (exact ties here; alike ones on the same requests in `fold_co_moving`).
    // Confidences equal to 1e-9 are a tie (a total order: sorting needs one).
    let tied = |c: &Candidate| (c.confidence * 1e9).round() as i64;
    // The share of requests its value had before the onset, in 1e-9 steps.
    let share_before = |c: &Candidate| {
        let share = c
            .attribute
            .as_ref()
            .and_then(|a| contrasts.get(a))
            .map_or(1.0, |x| x.share_baseline);
        (share * 1e9).round() as i64
    };
    out.sort_by_cached_key(|c| {
        (
            std::cmp::Reverse(tied(c)),
            share_before(c),
            c.subject.clone(),
        )
    });
    // A combination reached from several of its values: the best-ranked one stays.
    let mut subjects = std::collections::HashSet::new();
    out.retain(|c| subjects.insert(c.subject.clone()));
    pair_with_change(input, &contrasts, &mut out);
    fold_co_moving(input.window, out, &share_before)
}

/// Minutes from the onset within which a change pairs with a value it is bad on.
const PAIR_MINUTES: i64 = 5;

/// What a change's explanation says when its value holds no bad requests of note.
const NOT_CONCENTRATED: &str = "the bad requests are not concentrated on what it changed";

/// Share of the baseline's requests below which a value a change brought was not
/// there before it.
const BROUGHT_SHARE: f64 = 0.1;

/// A value that leads without a change of its own (an instance) whose requests all
/// took, at the onset, the value a change brought to (nearly) every request (a new
/// adapter on every instance):
/// the cause is the pair — the change, bad only where that value is (the adapter
/// only on the instances a new image reached before). The change leads, narrowed to
/// the value, at the value's confidence; the value is listed under it. Only for
/// deployed artifacts (adapter, model, image rollouts; instance, image, adapter or
/// model values).
fn pair_with_change(
    input: &RcaInput<'_>,
    contrasts: &std::collections::BTreeMap<(Dimension, String), Contrast>,
    out: &mut Vec<Candidate>,
) {
    let Some(lead) = out.first() else { return };
    let Some(value) = lead.attribute.clone() else {
        return;
    };
    if lead.kind != CandidateKind::Attribute || lead.subject.contains(['&', '|']) {
        return;
    }
    // Within the minutes an onset is found late by: the change's requests since were
    // bad too (`healthy_before` below), so it is no decoy before the onset.
    let near = (-(PAIR_MINUTES as f64) / 5.0).exp();
    // Artifacts deployed together: an adapter, model or image that fails only with
    // one of another kind (a prompt version is no part of the deployment: one that
    // fails on one instance alone is that instance's fault).
    const DEPLOYED: [Dimension; 4] = [
        Dimension::Instance,
        Dimension::Image,
        Dimension::Adapter,
        Dimension::Model,
    ];
    if !DEPLOYED.contains(&value.0) {
        return;
    }
    // The pair's other half, of another kind than the change's: an artifact the value
    // is (an image), or one all of the value's requests run and only part of the
    // route's (the image two of four instances got). An instance that differs from
    // the others in nothing deployed failed by itself (its KV cache). Their kinds,
    // read once a change could pair.
    let artifacts = [Dimension::Image, Dimension::Adapter, Dimension::Model];
    let partner_kinds = || -> std::collections::BTreeSet<Dimension> {
        if artifacts.contains(&value.0) {
            return [value.0].into();
        }
        let run: std::collections::BTreeSet<(Dimension, &str)> = input
            .window
            .iter()
            .flat_map(|(k, _)| artifacts.map(|d| (d, k.get(d))))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        run.into_iter()
            .map(|(d, v)| (d, v.to_owned()))
            .filter(|a| {
                co_moving::overlap(input.window, &value, a) >= co_moving::CO_MOVING
                    && co_moving::partial(input.window, a)
            })
            .map(|(d, _)| d)
            .collect()
    };
    let mut partners = None;
    let host = out.iter().position(|c| {
        matches!(
            c.kind,
            CandidateKind::AdapterRollout
                | CandidateKind::ModelRollout
                | CandidateKind::ImageRollout
        ) && c.proximity >= near
            && c.attribute.as_ref().is_some_and(|brought| {
                brought.0 != value.0
                    // New, its requests before the onset (if any) no healthier than
                    // in the window (a harmless bump two minutes before an instance's
                    // KV cache collapsed served it well meanwhile), and on (nearly)
                    // every request of the window: a change on part of the traffic
                    // has a contrast of its own to rank by (a new image on the
                    // instance whose KV cache collapsed minutes later is a decoy).
                    && contrasts.get(brought).is_some_and(|x| {
                        x.share_baseline < BROUGHT_SHARE
                            && x.healthy_before >= 0.5
                            && x.share_window >= co_moving::CO_MOVING
                    })
                    && co_moving::overlap(input.window, &value, brought) >= co_moving::CO_MOVING
                    // On more than the value's requests: else the two move together
                    // (`fold_co_moving`), no pair.
                    && co_moving::overlap(input.window, brought, &value) < co_moving::CO_MOVING
                    && partners
                        .get_or_insert_with(partner_kinds)
                        .iter()
                        .any(|p| *p != brought.0)
            })
    });
    let Some(at) = host else { return };
    let lead = out.remove(0);
    let mut host = out.remove(at - 1);
    host.confidence = host.confidence.max(lead.confidence);
    let said = host
        .explanation
        .replace(&format!("; {NOT_CONCENTRATED}"), "");
    host.explanation = format!("{said}; bad only on {}", lead.explanation);
    host.evidence["narrowed_to"] = serde_json::json!({
        "subject": lead.subject,
        "explanation": lead.explanation,
        "confidence": lead.confidence,
    });
    out.insert(0, host);
}
