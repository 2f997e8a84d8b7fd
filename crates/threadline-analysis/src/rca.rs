//! Root-cause ranking. Candidates come from three sources and are scored in [0, 1]:
//!
//! - **Contrast `C`** (per attribute value — adapter, instance, image, prompt version,
//!   A/B group, gray tag, provider, model, route): the share of the metric's *excess
//!   bad mass* in the anomaly window that is attributable to the value (population
//!   attributable fraction): `C = recall × (1 − 1/RR)` for `RR > 1`, else 0, where
//!   `recall = x(v) / x(all)`, `RR = (x(v)/n(v)) / (x(rest)/n(rest))` against the
//!   requests without the value (both smoothed by four bad requests' worth at the
//!   window's rate: a few bad requests that fell on one arm by chance are weak
//!   evidence), and `x` is the
//!   bad mass beyond what the same requests showed before the onset (their own rate,
//!   drawn towards the scope's while they were few). Bad mass: requests above the
//!   baseline quantile (latency, TTFT), errors, rejections, the KV-hit deficit against
//!   the baseline ratio, the generation-time excess against the baseline tokens/s.
//!   The value with the highest `C` leads; a
//!   value of another dimension whose requests hold the leader's and more (an image
//!   on two instances, one of which fails) keeps its `C` only in the proportion of
//!   how bad its requests outside the leader are against the leader's own.
//! - **Proximity `P`** (per change upstream of the affected series in the lineage
//!   graph — adapter / image / model first bound to an instance, prompt version first
//!   used, OpenLineage run completed, dataset version with drift):
//!   `P = exp(−|t_change − t_onset| / 5 min)`, for changes from 30 min before to
//!   5 min after the onset (drift: from 24 h before). A change that is an attribute
//!   value (adapter `fin-lora@7` first served) shares that value's `C`, kept as far as
//!   the value's requests between the change and the onset leave it (a new image
//!   that served an instance well for minutes did not bring its KV collapse); a change
//!   that feeds one (a training run, a drifted dataset version upstream of the adapter)
//!   inherits the `C` of the value it feeds.
//! - **Rules `R`** from the fault-pattern file: the largest `boost` of the rules that
//!   match the incident's metric, its co-anomalies, the candidate's kind, and
//!   optionally a rejection reason that dominates.
//!
//! - **Before/after `B`** (per attribute value): the window against the baseline
//!   before it, for a change that took over all (or much) of the traffic at once and
//!   so has nothing to be contrasted with inside the window:
//!   `B = gained × recall × (1 − rate_before / rate)` for `rate > rate_before`, where
//!   `gained` is the value's share of requests now minus before, `rate` the bad rate
//!   of its requests now and `rate_before` that of all requests before. A harmless
//!   change rolled out at the same minute on part of the traffic gains less and holds
//!   less of the bad mass than the one whose requests went bad.
//! - **Time share `D`** (per part of the requests — a span name in a service — for
//!   latency metrics of request series): the requests' critical paths add up to their
//!   latency, so the growth of each part's mean time per request over the added mean
//!   latency says where the time went: `D = share × (1 − e^(−2·growth)) × own`, where
//!   `growth` is the part's relative growth against its own baseline and `own` is 1 for
//!   a span that is no model call, else `1 − max C` over the model call's own
//!   dimensions (an adapter or instance that explains the bad requests is the more
//!   specific cause of a slower model call).
//!
//! `confidence = 1 − (1 − C) · (1 − B) · (1 − D) · (1 − P/2) · (1 − R)`, each term 0 where it does
//! not apply. A change with nothing behind it (a harmless rollout near the onset)
//! scores at most 0.5; a value that explains the bad requests and arrived with a change
//! near the onset scores above that, as does a part that took most of the added time.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};
use crate::time_went::TimeWent;

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

const DEFAULT_RULES: &str = include_str!("../rules/default-faults.toml");

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

/// Contrast of one attribute value.
#[derive(Clone, Debug, Default)]
struct Contrast {
    score: f64,
    /// Before/after: how much the value's arrival (its share grown since the
    /// baseline) carries the bad requests.
    before_after: f64,
    recall: f64,
    /// Its excess bad rate against that of the requests without it.
    relative_risk: f64,
    share_window: f64,
    share_baseline: f64,
    metric_baseline: Option<f64>,
    metric_window: Option<f64>,
    /// The factor of `before_after` (and of a change's `score`) its requests before
    /// the onset leave it (`healthy_before`).
    healthy_before: f64,
}

/// (bad mass, total mass) of a cell for `metric`, against the baseline.
fn bad_mass(metric: Metric, cell: &RollupCell, base: &RollupCell) -> (f64, f64) {
    let n = cell.requests as f64;
    match metric {
        Metric::P50Latency | Metric::P95Latency | Metric::P99Latency => {
            let q = metric.latency_quantile().unwrap_or(0.99);
            match base.latency_ms.quantile(q).ok().flatten() {
                Some(t) => (RollupCell::count_above(&cell.latency_ms, t), n),
                None => (0.0, n),
            }
        }
        Metric::TtftP99 => match base.ttft_ms.quantile(0.99).ok().flatten() {
            Some(t) => (
                RollupCell::count_above(&cell.ttft_ms, t),
                cell.ttft_ms.count() as f64,
            ),
            None => (0.0, n),
        },
        Metric::ErrorRate => (cell.errors as f64, n),
        Metric::RejectionRate => (cell.rejected() as f64, n),
        Metric::KvCacheHitRatio => {
            let base_ratio = Metric::KvCacheHitRatio.value(base, 60.0).unwrap_or(1.0);
            let expected = base_ratio * cell.kv_hit_count as f64;
            (
                (expected - cell.kv_hit_sum).max(0.0),
                cell.kv_hit_count as f64,
            )
        }
        Metric::TokensPerS => match Metric::TokensPerS.value(base, 60.0) {
            Some(tps) if tps > 0.0 => {
                let expected = cell.gen_tokens as f64 / tps;
                ((cell.gen_seconds - expected).max(0.0), cell.gen_seconds)
            }
            _ => (0.0, cell.gen_seconds),
        },
        // Cost and the prompt cache are not watched: no request of a cell is "bad" for them.
        Metric::RequestRate | Metric::Cost | Metric::PromptCacheHitRatio => (0.0, n),
    }
}

/// What the whole scope looked like, computed once per ranking: the merged baseline,
/// the window's bad mass and total, and how often a request was bad before (the rate
/// a value's requests are held to).
struct Scope {
    base_all: RollupCell,
    /// The window's and the baseline's bad and total mass.
    all: Masses,
    rate_before: f64,
}

impl Scope {
    fn of(input: &RcaInput<'_>) -> Self {
        let base_all = input
            .baseline
            .iter()
            .map(|(_, c)| c)
            .collect::<RollupCell>();
        let mass = |cells: &[(SeriesKey, RollupCell)]| {
            cells
                .iter()
                .map(|(_, c)| bad_mass(input.metric, c, &base_all))
                .fold((0.0, 0.0), |(b, t), (x, y)| (b + x, t + y))
        };
        let (bad_all, total_all) = mass(input.window);
        let (bad_before, total_before) = mass(input.baseline);
        let rate_before = if total_before > 0.0 {
            bad_before / total_before
        } else {
            0.0
        };
        Self {
            base_all,
            all: Masses {
                bad: bad_all,
                total: total_all,
                bad_before,
                total_before,
            },
            rate_before,
        }
    }
}

/// Contrast of every attribute value present in the window.
fn contrasts(input: &RcaInput<'_>, scope: &Scope) -> BTreeMap<(Dimension, String), Contrast> {
    let Scope {
        base_all,
        all,
        rate_before,
    } = scope;
    let (all, rate_before) = (*all, *rate_before);
    let base_requests: f64 = input.baseline.iter().map(|(_, c)| c.requests as f64).sum();
    let window_requests: f64 = input.window.iter().map(|(_, c)| c.requests as f64).sum();
    // Values a change near the onset brought: their requests before the onset are the
    // change's doing, not a background of theirs (an onset found minutes late finds
    // them bad already); whether they were healthy is `healthy_before`'s to judge.
    let brought: HashSet<(Dimension, &str)> = input
        .changes
        .iter()
        .filter(|c| proximity(c, input.onset_minute) > 0.0)
        .filter_map(|c| c.attribute.as_ref().map(|(d, v)| (*d, v.as_str())))
        .collect();
    let mut out = BTreeMap::new();
    // Every dimension but the service: it is the scope, not a cause.
    for dim in Dimension::ALL
        .into_iter()
        .filter(|d| *d != Dimension::Service)
    {
        let mut window: HashMap<&str, Vec<&RollupCell>> = HashMap::new();
        for (k, c) in input.window {
            if !k.get(dim).is_empty() {
                window.entry(k.get(dim)).or_default().push(c);
            }
        }
        let mut baseline: HashMap<&str, Vec<&RollupCell>> = HashMap::new();
        for (k, c) in input.baseline {
            baseline.entry(k.get(dim)).or_default().push(c);
        }
        for (value, cells) in window {
            let (bad, total) = cells
                .iter()
                .map(|c| bad_mass(input.metric, c, base_all))
                .fold((0.0, 0.0), |(b, t), (x, y)| (b + x, t + y));
            let rate = if total > 0.0 { bad / total } else { 0.0 };
            let in_window = cells.iter().copied().collect::<RollupCell>();
            let base_cells = baseline.get(value);
            let (bad_base, total_base) = base_cells
                .into_iter()
                .flatten()
                .map(|c| bad_mass(input.metric, c, base_all))
                .fold((0.0, 0.0), |(b, t), (x, y)| (b + x, t + y));
            let in_base = base_cells.map(|c| c.iter().copied().collect::<RollupCell>());
            let (bad_before, total_before) = if brought.contains(&(dim, value)) {
                (0.0, 0.0)
            } else {
                (bad_base, total_base)
            };
            let (recall, relative_risk, score) = attributable(
                Masses {
                    bad,
                    total,
                    bad_before,
                    total_before,
                },
                all,
                rate_before,
            );
            let share_window = in_window.requests as f64 / window_requests.max(1.0);
            let share_baseline =
                in_base.as_ref().map_or(0.0, |b| b.requests as f64) / base_requests.max(1.0);
            // A value that took over traffic since the baseline (all of it, for a
            // change on every instance) and whose requests are worse than requests
            // were before: within the window it has nothing to be contrasted with.
            let gained = (share_window - share_baseline).max(0.0);
            let excess = if rate > rate_before && rate > 0.0 {
                1.0 - rate_before / rate
            } else {
                0.0
            };
            out.insert(
                (dim, value.to_owned()),
                Contrast {
                    score,
                    before_after: (gained * recall * excess).clamp(0.0, 1.0),
                    recall,
                    relative_risk,
                    share_window,
                    share_baseline,
                    metric_baseline: in_base.and_then(|b| input.metric.value(&b, 60.0)),
                    metric_window: input.metric.value(&in_window, 60.0),
                    healthy_before: healthy_before(
                        (bad_base, total_base),
                        (bad, total),
                        rate_before,
                    ),
                },
            );
        }
    }
    out
}

/// Bad and total mass of some requests in the window and before it.
#[derive(Clone, Copy, Debug, Default)]
struct Masses {
    bad: f64,
    total: f64,
    bad_before: f64,
    total_before: f64,
}

impl Masses {
    fn minus(self, other: Masses) -> Masses {
        Masses {
            bad: (self.bad - other.bad).max(0.0),
            total: (self.total - other.total).max(0.0),
            bad_before: (self.bad_before - other.bad_before).max(0.0),
            total_before: (self.total_before - other.total_before).max(0.0),
        }
    }

    /// The window's bad mass in excess of what these requests showed before: their
    /// own rate before, drawn towards the scope's `rate_before` while they were few.
    fn excess(&self, rate_before: f64) -> f64 {
        let own = (self.bad_before + rate_before * BACKGROUND_PRIOR)
            / (self.total_before + BACKGROUND_PRIOR);
        (self.bad - own * self.total).max(0.0)
    }
}

/// Bad requests' worth at the window's rate added to a value's and the rest's rates
/// before they are compared.
const PSEUDO_BAD: f64 = 4.0;

/// Requests' worth of the scope's background a value's own background is drawn to.
const BACKGROUND_PRIOR: f64 = 20.0;

/// How much of the window's excess bad mass a value accounts for, as its population
/// attributable fraction: `(recall, relative risk, recall × (1 − 1/relative risk))`.
///
/// Bad mass is taken in excess of the background the requests showed before (half of
/// them are above a baseline median, 1% above its P99; a slow model is always above
/// the median), so that a slower A/B arm is contrasted on the requests it slowed. The
/// value's excess rate is held against that of the requests without it — not of all
/// requests, itself included, which capped an arm on half the traffic at 0.5 however
/// completely it held the bad requests. Both rates are smoothed by `PSEUDO_BAD` bad
/// requests' worth at the window's rate: 8 bad requests that all fell on one arm of
/// two (one time in 250 by chance, and there are many values) are weaker evidence
/// than 35, and a value on nearly all of the traffic does not win on a few clean
/// requests left over.
fn attributable(value: Masses, all: Masses, rate_before: f64) -> (f64, f64, f64) {
    let rest = all.minus(value);
    let (value_x, rest_x) = (value.excess(rate_before), rest.excess(rate_before));
    let all_x = value_x + rest_x;
    if all_x <= 0.0 || value.total <= 0.0 {
        return (0.0, 0.0, 0.0);
    }
    let recall = value_x / all_x;
    let rate_all = all_x / all.total.max(1e-9);
    let smoothing = (PSEUDO_BAD / rate_all).min(all.total);
    let smoothed = |bad: f64, total: f64| (bad + rate_all * smoothing) / (total + smoothing);
    let risk = smoothed(value_x, value.total) / smoothed(rest_x, rest.total);
    let score = if risk > 1.0 {
        recall * (1.0 - 1.0 / risk)
    } else {
        0.0
    };
    (recall, risk, score.clamp(0.0, 1.0))
}

/// Judges every value against the leader: the value whose within-window contrast is
/// highest, once it is high enough to lead.
///
/// - A value whose requests hold (nearly) all of the leader's and more — an image on
///   two instances, one of which fails — is a less specific cause than the leader,
///   unless its requests outside the leader went bad too (an adapter on two instances
///   whose bad requests happen to gather on one). Its within-window contrast is kept
///   in the proportion of how bad those other requests are against the leader's own.
/// - A value that took over the traffic is only as good a cause as the window lets it
///   be. When the bad requests concentrate on a value of another dimension (an adapter
///   on half the instances), a value that arrived everywhere (an image on all of them)
///   is judged on its requests without that value: what it explains beyond it. And
///   when the added time went into spans that are no model call (a retriever), a model
///   call's own attributes (prompt, adapter, image …) explain it only by the model
///   calls' share of it.
fn judge_against_leader(
    input: &RcaInput<'_>,
    scope: &Scope,
    time_went: &TimeWent,
    contrasts: &mut BTreeMap<(Dimension, String), Contrast>,
) {
    let leader = contrasts
        .iter()
        .max_by(|a, b| a.1.score.total_cmp(&b.1.score))
        .filter(|(_, c)| c.score > LEADS)
        .map(|(k, _)| k.clone());
    let Scope {
        base_all,
        all,
        rate_before,
    } = scope;
    let (bad_all, rate_before) = (all.bad, *rate_before);
    // (bad, total) mass of the window's requests that pass `keep`.
    let mass = |keep: &dyn Fn(&SeriesKey) -> bool| {
        input
            .window
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(_, cell)| bad_mass(input.metric, cell, base_all))
            .fold((0.0, 0.0), |(b, t), (x, y)| (b + x, t + y))
    };
    let rate = |(bad, total): (f64, f64)| if total > 0.0 { bad / total } else { 0.0 };
    let call_share = time_went.model_call_share();
    let leader_mass = leader
        .as_ref()
        .map(|(d, v)| mass(&|k: &SeriesKey| k.get(*d) == v));
    for ((dim, value), c) in contrasts.iter_mut() {
        if let (Some((lead_dim, lead_value)), Some(lead)) = (&leader, leader_mass) {
            // Only a value with some contrast has any to lose.
            if lead_dim != dim && (c.score > 0.0 || c.before_after > 0.0) {
                // The value's requests with the leading value, and without it.
                let both =
                    mass(&|k: &SeriesKey| k.get(*dim) == value && k.get(*lead_dim) == lead_value);
                let outside =
                    mass(&|k: &SeriesKey| k.get(*dim) == value && k.get(*lead_dim) != lead_value);
                let holds_leader = lead.1 > 0.0 && both.1 >= CO_MOVING * lead.1;
                let wider = lead.1 < CO_MOVING * (both.1 + outside.1);
                if holds_leader && wider && c.score > 0.0 {
                    let lead_excess = rate(lead) - rate_before;
                    let kept = if lead_excess > 0.0 {
                        ((rate(outside) - rate_before) / lead_excess).clamp(0.0, 1.0)
                    } else {
                        1.0
                    };
                    c.score *= kept;
                }
                if c.before_after > 0.0 {
                    // What the value explains beyond the leader.
                    let rate = rate(outside);
                    let recall = if bad_all > 0.0 {
                        outside.0 / bad_all
                    } else {
                        0.0
                    };
                    let excess = if rate > rate_before {
                        1.0 - rate_before / rate
                    } else {
                        0.0
                    };
                    let gained = (c.share_window - c.share_baseline).max(0.0);
                    c.before_after = (gained * recall * excess).clamp(0.0, 1.0);
                }
            }
        }
        if c.before_after <= 0.0 {
            continue;
        }
        c.before_after *= c.healthy_before;
        if CALL_DIMENSIONS.contains(dim) {
            c.before_after *= call_share.unwrap_or(1.0);
        }
    }
}

/// A value that was already serving before the onset, and whose requests then were no
/// worse than the rest, did not bring the bad requests with it (a harmless prompt bump
/// two minutes before the real change takes the same traffic; a new image on an
/// instance minutes before its KV cache collapsed). Returns the factor of its contrast
/// kept: the posterior, from even odds, that its requests before the onset were
/// already as bad as in the window rather than as good as the scope's were — the
/// binomial likelihoods of their bad mass under each. A handful of requests between a
/// change and an onset found a minute late decide little either way; dozens of
/// healthy ones rule the value out.
fn healthy_before(
    (bad_before, total_before): (f64, f64),
    (bad_during, total_during): (f64, f64),
    rate_before: f64,
) -> f64 {
    if total_before <= 0.0 || total_during <= 0.0 {
        return 1.0;
    }
    let during = bad_during / total_during;
    if during <= rate_before {
        return 1.0;
    }
    let bad = bad_before.clamp(0.0, total_before);
    let ln_likelihood = |rate: f64| {
        let rate = rate.clamp(1e-9, 1.0 - 1e-9);
        bad * rate.ln() + (total_before - bad) * (-rate).ln_1p()
    };
    let ln_odds = ln_likelihood(during) - ln_likelihood(rate_before);
    1.0 / (1.0 + (-ln_odds).exp())
}

/// The contrast (within the window, or before/after) a value needs to be a candidate.
const NOTICEABLE: f64 = 0.01;

/// The within-window contrast above which a value leads: other values are then judged
/// against it (`judge_against_leader`).
const LEADS: f64 = 0.2;

/// The rejection reason behind most rejections in the window, if any.
fn dominant_rejection(window: &[(SeriesKey, RollupCell)]) -> Option<String> {
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

fn rule_boost(
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

fn contrast_json(c: &Contrast) -> serde_json::Value {
    serde_json::json!({
        "contrast": c.score,
        "before_after": c.before_after,
        "share_of_bad": c.recall,
        "relative_risk": c.relative_risk,
        "share_of_requests": c.share_window,
        "share_of_requests_before": c.share_baseline,
        "metric_before": c.metric_baseline,
        "metric_during": c.metric_window,
    })
}

/// A metric value in its unit, for explanations.
fn show(metric: Metric, v: Option<f64>) -> String {
    match (v, metric.unit()) {
        (None, _) => "none".into(),
        (Some(v), "ms") => crate::time_went::ms(v),
        (Some(v), "ratio") => format!("{:.1}%", v * 100.0),
        (Some(v), unit) => format!("{v:.1} {unit}"),
    }
}

fn contrast_line(metric: Metric, subject: &str, c: &Contrast) -> String {
    format!(
        "{subject}: {:.0}% of the bad requests on {:.0}% of the traffic (before {:.0}%); {} {} → {}",
        c.recall * 100.0,
        c.share_window * 100.0,
        c.share_baseline * 100.0,
        metric.as_str(),
        show(metric, c.metric_baseline),
        show(metric, c.metric_window),
    )
}

/// Ranks the candidates, best first.
pub fn rank(input: &RcaInput<'_>) -> Vec<Candidate> {
    let time_went = TimeWent::of(input);
    let scope = Scope::of(input);
    let mut contrasts = contrasts(input, &scope);
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
        // requests leave it (`healthy_before`, as for before/after).
        let (c, b) = backed.map_or((0.0, 0.0), |x| (x.score * x.healthy_before, x.before_after));
        if let Some(a) = &change.attribute {
            explained.insert(a.clone());
        }
        let dim = via.as_ref().map(|(d, _)| *d);
        let (r, rules) = rule_boost(input, dominant.as_deref(), dim, Some(change.kind));
        let confidence = 1.0 - (1.0 - c) * (1.0 - b) * (1.0 - p / 2.0) * (1.0 - r);
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
            _ => "the bad requests are not concentrated on what it changed".to_owned(),
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
    for ((dim, value), c) in &contrasts {
        // A value with next to no evidence is no candidate, whatever rule its kind
        // matches ("instance=i-6: 0% of the bad requests", boosted as an instance).
        let some = c.score >= NOTICEABLE || c.before_after >= NOTICEABLE;
        if !some || explained.contains(&(*dim, value.clone())) {
            continue;
        }
        let (r, rules) = rule_boost(input, dominant.as_deref(), Some(*dim), None);
        let confidence = 1.0 - (1.0 - c.score) * (1.0 - c.before_after) * (1.0 - r);
        let mut evidence = contrast_json(c);
        evidence["rules"] = serde_json::json!(rules);
        let subject = format!("{}={value}", dim.as_str());
        out.push(Candidate {
            kind: CandidateKind::Attribute,
            explanation: contrast_line(input.metric, &subject, c),
            subject,
            confidence,
            contrast: c.score,
            before_after: c.before_after,
            proximity: 0.0,
            rule: r,
            time_share: 0.0,
            evidence,
            attribute: Some((*dim, value.clone())),
        });
    }
    // Where the time went: the parts of the requests whose time grew.
    let call_explained = contrasts
        .iter()
        .filter(|((d, _), _)| CALL_DIMENSIONS.contains(d) || VARIANT_DIMENSIONS.contains(d))
        .map(|(_, c)| c.score)
        .fold(0.0, f64::max);
    let (parts, breakdown) = time_went.candidates(call_explained);
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
    fold_co_moving(input.window, out, &share_before)
}

/// Requests of the window carrying `a` that also carry `b`, over those carrying `a`.
fn overlap(
    window: &[(SeriesKey, RollupCell)],
    a: &(Dimension, String),
    b: &(Dimension, String),
) -> f64 {
    let (mut with_a, mut both) = (0u64, 0u64);
    for (k, c) in window {
        if k.get(a.0) == a.1 {
            with_a += c.requests;
            if k.get(b.0) == b.1 {
                both += c.requests;
            }
        }
    }
    if with_a == 0 {
        0.0
    } else {
        both as f64 / with_a as f64
    }
}

/// Share of a value's requests that must also carry a better-ranked value for the two
/// to move together.
const CO_MOVING: f64 = 0.9;

/// Values that move together — an adapter loaded only on some instances, the image
/// those instances still run — are one cause, not rivals splitting the confidence:
/// a candidate whose requests (nearly) all carry the value of a better-ranked one is
/// folded into it, listed under its `co_moving` evidence; the better-ranked, more
/// specific one (a lineage change before a bare attribute, then by confidence) stays.
/// `share_before` is a candidate's value's share of requests before the onset.
fn fold_co_moving(
    window: &[(SeriesKey, RollupCell)],
    ranked: Vec<Candidate>,
    share_before: &dyn Fn(&Candidate) -> i64,
) -> Vec<Candidate> {
    let total: u64 = window.iter().map(|(_, c)| c.requests).sum();
    // A value on (nearly) every request holds every other one: that is no co-movement.
    let partial = |a: &(Dimension, String)| {
        let with: u64 = window
            .iter()
            .filter(|(k, _)| k.get(a.0) == a.1)
            .map(|(_, c)| c.requests)
            .sum();
        total > 0 && (with as f64) < CO_MOVING * total as f64
    };
    let mut out: Vec<Candidate> = Vec::with_capacity(ranked.len());
    for cand in ranked {
        let host = cand.attribute.as_ref().and_then(|b| {
            out.iter().position(|kept| {
                kept.attribute
                    .as_ref()
                    .is_some_and(|a| a.0 != b.0 && partial(a) && overlap(window, b, a) >= CO_MOVING)
            })
        });
        match host {
            Some(i) => {
                // Of two candidates on the same requests that explain them alike,
                // the more specific leads.
                let mut cand = cand;
                if more_specific_alike(window, &out[i], &cand, share_before) {
                    std::mem::swap(&mut out[i], &mut cand);
                    if let Some(list) = cand.evidence.get_mut("co_moving").map(std::mem::take) {
                        out[i].evidence["co_moving"] = list;
                    }
                    out[i].confidence = out[i].confidence.max(cand.confidence);
                }
                let entry = serde_json::json!({
                    "kind": cand.kind,
                    "subject": cand.subject,
                    "confidence": cand.confidence,
                    "explanation": cand.explanation,
                });
                match out[i]
                    .evidence
                    .get_mut("co_moving")
                    .and_then(|v| v.as_array_mut())
                {
                    Some(list) => list.push(entry),
                    None => out[i].evidence["co_moving"] = serde_json::json!([entry]),
                }
            }
            None => out.push(cand),
        }
    }
    out
}

/// Confidences this close are alike: the evidence does not tell the two apart.
const ALIKE: f64 = 0.01;

/// Whether `b`, to be folded into the better-ranked `a`, should lead instead: the two
/// on the same requests (each holding nearly all of the other's), confidences alike,
/// and `b` the more specific — a lineage change before a bare attribute value (the
/// adapter hot-swapped onto two instances before the old image only they still run),
/// then the value on fewer requests before the onset (a failing instance before that
/// old image).
fn more_specific_alike(
    window: &[(SeriesKey, RollupCell)],
    a: &Candidate,
    b: &Candidate,
    share_before: &dyn Fn(&Candidate) -> i64,
) -> bool {
    let specificity = |c: &Candidate| (c.kind == CandidateKind::Attribute, share_before(c));
    match (&a.attribute, &b.attribute) {
        (Some(x), Some(y)) => {
            a.confidence - b.confidence < ALIKE
                && specificity(b) < specificity(a)
                && overlap(window, x, y) >= CO_MOVING
                && overlap(window, y, x) >= CO_MOVING
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::SpanSlot;

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

    fn key(instance: &str, adapter: &str, prompt: &str, image: &str) -> SeriesKey {
        SeriesKey::default()
            .with(Dimension::Service, "gw")
            .with(Dimension::Route, "/v1/chat")
            .with(Dimension::Instance, instance)
            .with(Dimension::Adapter, adapter)
            .with(Dimension::PromptVersion, prompt)
            .with(Dimension::Image, image)
    }

    fn cell(ms: f64, n: u64, kv: f64) -> RollupCell {
        let mut c = RollupCell::default();
        for i in 0..n {
            c.requests += 1;
            c.latency_ms.add(ms * (0.7 + 0.6 * i as f64 / n as f64));
            c.kv_hit_sum += kv;
            c.kv_hit_count += 1;
        }
        c
    }

    /// Ranks with the shipped rules for an incident of `metric` at minute 100.
    fn rank_at_onset(
        metric: Metric,
        co_anomalies: Vec<Metric>,
        baseline: &[(SeriesKey, RollupCell)],
        window: &[(SeriesKey, RollupCell)],
        changes: Vec<Change>,
    ) -> Vec<Candidate> {
        rank(&RcaInput {
            metric,
            co_anomalies,
            onset_minute: 100,
            baseline,
            window,
            changes,
            rules: &FaultRules::default_rules(),
        })
    }

    /// `rank_at_onset` for a P99 incident with no other anomaly.
    fn rank_p99(
        baseline: &[(SeriesKey, RollupCell)],
        window: &[(SeriesKey, RollupCell)],
        changes: Vec<Change>,
    ) -> Vec<Candidate> {
        rank_at_onset(Metric::P99Latency, vec![], baseline, window, changes)
    }

    /// Adapter `fin@7` rolled out at minute `at`.
    fn fin_lora_7_at(at: i64) -> Change {
        change(
            "adapter_rollout",
            "adapter:fin@7",
            at,
            (Dimension::Adapter, "fin@7"),
        )
    }

    fn change(kind: &str, subject: &str, at: i64, attr: (Dimension, &str)) -> Change {
        Change {
            kind: serde_json::from_value(serde_json::json!(kind)).unwrap(),
            subject: subject.into(),
            at_minute: at,
            attribute: Some((attr.0, attr.1.into())),
            feeds: vec![],
            path: vec![],
            detail: serde_json::Value::Null,
        }
    }

    #[test]
    fn the_swapped_adapter_outranks_harmless_changes_and_the_instances_it_runs_on() {
        let baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
            .iter()
            .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
            .collect();
        let window: Vec<_> = [
            ("i-1", "fin@6", 500.0),
            ("i-2", "fin@6", 500.0),
            ("i-3", "fin@7", 1400.0),
            ("i-4", "fin@7", 1400.0),
        ]
        .iter()
        .map(|(i, a, ms)| (key(i, a, "v3", "img:2"), cell(*ms, 300, 0.8)))
        .collect();
        let ranked = rank_p99(
            &baseline,
            &window,
            vec![
                fin_lora_7_at(100),
                change(
                    "prompt_version",
                    "prompt:chat@v3",
                    99,
                    (Dimension::PromptVersion, "v3"),
                ),
                change(
                    "image_rollout",
                    "image:img:2",
                    98,
                    (Dimension::Image, "img:2"),
                ),
            ],
        );
        assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
        assert!(ranked[0].confidence > 0.7);
        let prompt = ranked
            .iter()
            .find(|c| c.kind == CandidateKind::PromptVersion)
            .unwrap();
        assert!(prompt.confidence <= 0.5 && prompt.contrast == 0.0);
        // i-3 and i-4 run fin@7 and nothing else: they move with it, one cause.
        assert!(
            ranked.iter().all(|c| c.subject != "instance=i-3"),
            "{ranked:#?}"
        );
        let folded: Vec<&str> = ranked[0].evidence["co_moving"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["subject"].as_str().unwrap())
            .collect();
        assert!(
            folded.contains(&"instance=i-3") && folded.contains(&"instance=i-4"),
            "{folded:?}"
        );
    }

    /// `n` requests of about 500 ms on `instance`, `adapter` and `image`, `errors` of
    /// them failed.
    fn errors_cell(
        (instance, adapter, image): (&str, &str, &str),
        n: u64,
        errors: u64,
    ) -> (SeriesKey, RollupCell) {
        let mut c = cell(500.0, n, 0.8);
        c.errors = errors;
        (key(instance, adapter, "", image), c)
    }

    /// Ranks an error-rate incident: every instance served 300 requests with one error
    /// on `before` (adapter, image) in the baseline; `window` as given; one change.
    fn rank_errors(
        instances: &[&str],
        before: (&str, &str),
        window: &[((&str, &str, &str), u64)],
        change: Change,
    ) -> Vec<Candidate> {
        let baseline: Vec<_> = instances
            .iter()
            .map(|i| errors_cell((i, before.0, before.1), 300, 1))
            .collect();
        let window: Vec<_> = window
            .iter()
            .map(|(at, errors)| errors_cell(*at, 100, *errors))
            .collect();
        rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![change])
    }

    #[test]
    fn a_failing_instance_inside_a_wider_rollout_is_blamed_before_the_rollout() {
        // A harmless image went to i-1 and i-3 three minutes before i-3 began failing:
        // the image holds every bad request, but its other requests (i-1) are healthy.
        let ranked = rank_errors(
            &["i-1", "i-2", "i-3"],
            ("", "img:1"),
            &[
                (("i-1", "", "img:2"), 0),
                (("i-2", "", "img:1"), 0),
                (("i-3", "", "img:2"), 25),
            ],
            change(
                "image_rollout",
                "image:img:2",
                97,
                (Dimension::Image, "img:2"),
            ),
        );
        assert_eq!(ranked[0].subject, "instance=i-3", "{ranked:#?}");
        let image = ranked.iter().find(|c| c.subject == "image:img:2").unwrap();
        assert_eq!(image.contrast, 0.0, "{image:#?}");
    }

    #[test]
    fn a_failing_instance_comes_before_the_old_image_only_it_still_runs() {
        // i-1 took a new image five minutes before i-2 began failing: in the window the
        // old image is on i-2's requests alone, a tie the baseline breaks.
        let ranked = rank_errors(
            &["i-1", "i-2"],
            ("", "img:1"),
            &[(("i-1", "", "img:2"), 0), (("i-2", "", "img:1"), 35)],
            change(
                "image_rollout",
                "image:img:2",
                95,
                (Dimension::Image, "img:2"),
            ),
        );
        assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
        let folded = ranked[0].evidence["co_moving"][0]["subject"].as_str();
        assert_eq!(folded, Some("image=img:1"), "{ranked:#?}");
    }

    /// The same, with i-2 a little worse than i-1 before: counted beyond their own
    /// background, the old image (the two instances' requests before) explains the
    /// window's errors a hair better than i-2 does. Alike, on the same requests: the
    /// instance, narrower before, still leads.
    #[test]
    fn a_failing_instance_leads_the_old_image_it_still_runs_on_alike_evidence() {
        let baseline = vec![
            errors_cell(("i-1", "", "img:1"), 300, 0),
            errors_cell(("i-2", "", "img:1"), 300, 3),
        ];
        let window = vec![
            errors_cell(("i-1", "", "img:2"), 100, 0),
            errors_cell(("i-2", "", "img:1"), 100, 35),
        ];
        let rollout = change(
            "image_rollout",
            "image:img:2",
            95,
            (Dimension::Image, "img:2"),
        );
        let ranked = rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![rollout]);
        assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
        let folded = ranked[0].evidence["co_moving"][0]["subject"].as_str();
        assert_eq!(folded, Some("image=img:1"), "{ranked:#?}");
    }

    /// An adapter hot-swapped onto i-3 and i-4 slows them, four minutes after a new
    /// image went onto i-1 and i-2: in the window the old image is on (nearly) the
    /// adapter's requests alone, with contrast alike. The adapter's rollout, a lineage
    /// change, is the more specific and leads; the old image moves with it.
    #[test]
    fn a_swapped_adapter_leads_the_old_image_its_instances_still_run() {
        let instances = ["i-1", "i-2", "i-3", "i-4"];
        let baseline: Vec<_> = instances
            .iter()
            .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
            .collect();
        // i-3's first requests of the minute still ran the old adapter, slow already:
        // the old image holds a few more of the bad requests than the adapter does.
        let window: Vec<_> = [
            ("i-1", "fin@6", "img:2", 500.0, 100),
            ("i-2", "fin@6", "img:2", 500.0, 100),
            ("i-3", "fin@6", "img:1", 1400.0, 5),
            ("i-3", "fin@7", "img:1", 1400.0, 100),
            ("i-4", "fin@7", "img:1", 1400.0, 100),
        ]
        .iter()
        .map(|(i, a, img, ms, n)| (key(i, a, "v2", img), cell(*ms, *n, 0.8)))
        .collect();
        let changes = vec![
            change(
                "image_rollout",
                "image:img:2",
                96,
                (Dimension::Image, "img:2"),
            ),
            fin_lora_7_at(100),
        ];
        let ranked = rank_at_onset(Metric::P99Latency, vec![], &baseline, &window, changes);
        assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
        let folded: Vec<_> = ranked[0].evidence["co_moving"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["subject"].as_str())
            .collect();
        assert!(folded.contains(&"image=img:1"), "{ranked:#?}");
    }

    #[test]
    fn a_rollout_whose_bad_requests_gather_on_one_instance_keeps_its_contrast() {
        // An adapter hot-swapped onto i-1 and i-2 fails on both, more on i-1 by chance:
        // i-1 leads the contrast, but the adapter's requests outside it went bad too.
        let ranked = rank_errors(
            &["i-1", "i-2", "i-3"],
            ("fin@6", ""),
            &[
                (("i-1", "fin@7", ""), 30),
                (("i-2", "fin@7", ""), 18),
                (("i-3", "fin@6", ""), 0),
            ],
            fin_lora_7_at(99),
        );
        assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
        assert!(ranked[0].contrast > 0.3, "{:#?}", ranked[0]);
    }

    #[test]
    fn a_kv_drop_on_one_instance_blames_that_instance() {
        let baseline: Vec<_> = ["i-1", "i-2", "i-3"]
            .iter()
            .map(|i| (key(i, "", "", ""), cell(500.0, 300, 0.8)))
            .collect();
        let window: Vec<_> = [("i-1", 0.8), ("i-2", 0.1), ("i-3", 0.8)]
            .iter()
            .map(|(i, kv)| (key(i, "", "", ""), cell(500.0, 300, *kv)))
            .collect();
        let ranked = rank_at_onset(
            Metric::KvCacheHitRatio,
            vec![Metric::P99Latency],
            &baseline,
            &window,
            vec![],
        );
        assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
        assert!(ranked[0].rule > 0.0);
        // The healthy instances match the same rule but hold none of the deficit:
        // they are no candidates.
        assert!(
            ranked.iter().all(|c| !c.subject.starts_with("instance=i-1")
                && !c.subject.starts_with("instance=i-3")),
            "{ranked:#?}"
        );
    }

    /// i-2's KV cache collapses four minutes after it took a new image, and the image
    /// served it well until then: in the window the image is on i-2's requests alone,
    /// but its healthy minutes before the onset say it did not bring the collapse.
    /// The instance leads; the image rollout moves with it.
    #[test]
    fn a_change_that_served_well_until_the_onset_yields_to_the_instance() {
        let baseline = vec![
            (key("i-1", "", "", "img:1"), cell(500.0, 300, 0.8)),
            (key("i-2", "", "", "img:1"), cell(500.0, 260, 0.8)),
            (key("i-2", "", "", "img:2"), cell(500.0, 40, 0.8)),
        ];
        let window = vec![
            (key("i-1", "", "", "img:1"), cell(500.0, 100, 0.8)),
            (key("i-2", "", "", "img:2"), cell(500.0, 100, 0.1)),
        ];
        let rollout = change(
            "image_rollout",
            "image:img:2",
            96,
            (Dimension::Image, "img:2"),
        );
        let ranked = rank_at_onset(
            Metric::KvCacheHitRatio,
            vec![Metric::P99Latency],
            &baseline,
            &window,
            vec![rollout],
        );
        assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
        let folded = ranked[0].evidence["co_moving"][0]["subject"].as_str();
        assert_eq!(folded, Some("image:img:2"), "{ranked:#?}");
    }

    /// A request cell of `n` requests: retrieval `retrieve_ms`, model call `call_ms`,
    /// the gateway's own 20 ms; latency their sum (lognormal-ish spread).
    fn request_cell(n: u64, retrieve_ms: f64, call_ms: f64) -> RollupCell {
        let mut c = RollupCell::default();
        let mut add = |service: &str, name: &str, ms: f64, model_call: bool| {
            c.span_time.insert(
                SpanSlot {
                    service: service.into(),
                    name: name.into(),
                },
                crate::cell::SlotTime {
                    critical_ms: ms * n as f64,
                    spans: n,
                    model_call,
                },
            );
        };
        add("docs-index", "search_docs", retrieve_ms, false);
        add("vllm", "chat llama", call_ms, true);
        add("gateway", "POST /v1/chat", 20.0, false);
        for i in 0..n {
            c.requests += 1;
            let spread = 0.7 + 0.6 * i as f64 / n as f64;
            c.latency_ms.add((retrieve_ms + call_ms + 20.0) * spread);
        }
        c
    }

    #[test]
    fn a_slower_retriever_is_named_as_where_the_time_went_over_a_harmless_change() {
        let k = |i: &str| key(i, "fin@6", "v2", "img:1");
        let baseline: Vec<_> = ["i-1", "i-2"]
            .iter()
            .map(|i| (k(i), request_cell(300, 70.0, 500.0)))
            .collect();
        let window: Vec<_> = ["i-1", "i-2"]
            .iter()
            .map(|i| {
                (
                    key(i, "fin@6", "v3", "img:1"),
                    request_cell(300, 560.0, 500.0),
                )
            })
            .collect();
        let ranked = rank_p99(
            &baseline,
            &window,
            vec![change(
                "prompt_version",
                "prompt:chat@v3",
                100,
                (Dimension::PromptVersion, "v3"),
            )],
        );
        let top = &ranked[0];
        assert_eq!(
            (top.kind.as_str(), top.subject.as_str()),
            ("span", "service=docs-index span=search_docs"),
            "{ranked:#?}"
        );
        assert!(top.confidence > 0.8, "{top:#?}");
        assert!(
            top.explanation.contains("70 ms → 560 ms") && top.explanation.contains("100%"),
            "{}",
            top.explanation
        );
        let prompt = ranked
            .iter()
            .find(|c| c.kind == CandidateKind::PromptVersion)
            .unwrap();
        assert!(prompt.confidence <= 0.5, "{prompt:#?}");
        assert!(ranked.iter().all(|c| !c.explanation.is_empty()));
    }

    #[test]
    fn a_slower_model_call_on_a_swapped_adapter_blames_the_adapter_before_the_call() {
        let baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
            .iter()
            .map(|i| {
                (
                    key(i, "fin@6", "v2", "img:1"),
                    request_cell(300, 70.0, 500.0),
                )
            })
            .collect();
        let window: Vec<_> = [
            ("i-1", "fin@6", 500.0),
            ("i-2", "fin@6", 500.0),
            ("i-3", "fin@7", 1500.0),
            ("i-4", "fin@7", 1500.0),
        ]
        .iter()
        .map(|(i, a, ms)| (key(i, a, "v2", "img:1"), request_cell(300, 70.0, *ms)))
        .collect();
        let ranked = rank_p99(&baseline, &window, vec![fin_lora_7_at(99)]);
        assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
        let call = ranked.iter().find(|c| c.kind == CandidateKind::Span);
        assert!(
            call.is_none_or(|c| c.confidence < ranked[0].confidence),
            "{ranked:#?}"
        );
        // The model calls are one part, whatever their span names.
        assert!(
            ranked[0].evidence["where_the_time_went"][0]["span"] == crate::time_went::MODEL_CALLS,
            "{ranked:#?}"
        );
    }

    /// Arm B of an A/B test slows its model calls: the arm, not "the model calls took
    /// the time", is the cause — it picks the variant of the call that slowed.
    #[test]
    fn a_slower_ab_arm_is_ranked_before_the_model_calls_it_slowed() {
        let arm =
            |group: &str, i: &str| key(i, "fin@6", "v2", "img:1").with(Dimension::AbGroup, group);
        let mut baseline = Vec::new();
        let mut window = Vec::new();
        for i in ["i-1", "i-2"] {
            for group in ["A", "B"] {
                baseline.push((arm(group, i), request_cell(300, 70.0, 500.0)));
                let ms = if group == "B" { 1400.0 } else { 500.0 };
                window.push((arm(group, i), request_cell(300, 70.0, ms)));
            }
        }
        let ranked = rank_at_onset(Metric::P99Latency, vec![], &baseline, &window, vec![]);
        assert_eq!(ranked[0].subject, "ab_group=B", "{ranked:#?}");
        let calls = ranked.iter().find(|c| c.kind == CandidateKind::Span);
        assert!(
            calls.is_none_or(|c| c.confidence < ranked[0].confidence),
            "{ranked:#?}"
        );
    }

    /// An arm on half of a route whose two models differ threefold in latency slows
    /// by 60%, two minutes after a harmless image went onto every instance. The bad
    /// requests of a median incident are those above the baseline median — half of
    /// them even before — and the arm is held against the other arm, not against all
    /// requests, itself included (which capped it at 0.5, under the image's proximity
    /// and rule).
    #[test]
    fn an_arm_on_half_the_traffic_outranks_a_harmless_image_just_before() {
        let at = |image: &str, model: &str, group: &str| {
            key("i-1", "fin@6", "v2", image)
                .with(Dimension::Model, model)
                .with(Dimension::AbGroup, group)
        };
        let mut baseline = Vec::new();
        let mut window = Vec::new();
        for (model, ms) in [("small", 500.0), ("big", 1500.0)] {
            for group in ["A", "B"] {
                baseline.push((at("img:1", model, group), request_cell(300, 70.0, ms)));
                let slower = if group == "B" { 1.6 } else { 1.0 };
                window.push((
                    at("img:2", model, group),
                    request_cell(300, 70.0, ms * slower),
                ));
            }
        }
        let image = change(
            "image_rollout",
            "image:img:2",
            98,
            (Dimension::Image, "img:2"),
        );
        let ranked = rank_at_onset(Metric::P50Latency, vec![], &baseline, &window, vec![image]);
        assert_eq!(ranked[0].subject, "ab_group=B", "{ranked:#?}");
        assert!(ranked[0].contrast > 0.5, "{:#?}", ranked[0]);
    }

    /// A new image on every instance slows every request: nothing to contrast it with
    /// inside the window, so the window is compared with the baseline before it; a
    /// harmless adapter swapped onto half the instances in the same minute loses.
    #[test]
    fn a_change_on_all_traffic_is_ranked_by_before_and_after_over_a_harmless_one() {
        let baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
            .iter()
            .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
            .collect();
        let window: Vec<_> = [
            ("i-1", "fin@6"),
            ("i-2", "fin@6"),
            ("i-3", "fin@7"),
            ("i-4", "fin@7"),
        ]
        .iter()
        .map(|(i, a)| (key(i, a, "v2", "img:2"), cell(1300.0, 300, 0.8)))
        .collect();
        let ranked = rank_p99(
            &baseline,
            &window,
            vec![
                change(
                    "image_rollout",
                    "image:img:2",
                    100,
                    (Dimension::Image, "img:2"),
                ),
                fin_lora_7_at(100),
            ],
        );
        assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
        assert!(ranked[0].before_after > 0.9, "{:#?}", ranked[0]);
        let adapter = ranked
            .iter()
            .find(|c| c.subject == "adapter:fin@7")
            .unwrap();
        assert!(adapter.before_after < 0.5, "{adapter:#?}");
        assert!(adapter.confidence < ranked[0].confidence);
    }

    /// An adapter hot-swapped onto i-3 at minute 97, its incident's onset found at
    /// 100: its 90 requests before the onset were as slow as since. They are the
    /// change's doing, not a background of the adapter's: it keeps its contrast and
    /// leads the instance it runs on (which was healthy for the rest of the baseline).
    #[test]
    fn a_change_found_a_few_minutes_before_a_late_onset_keeps_its_contrast() {
        let mut baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
            .iter()
            .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 1000, 0.8)))
            .collect();
        baseline.push((key("i-3", "fin@7", "v2", "img:1"), cell(1400.0, 90, 0.8)));
        let mut window: Vec<_> = ["i-1", "i-2", "i-4"]
            .iter()
            .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
            .collect();
        window.push((key("i-3", "fin@7", "v2", "img:1"), cell(1400.0, 300, 0.8)));
        let ranked = rank_p99(&baseline, &window, vec![fin_lora_7_at(97)]);
        assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
        assert!(ranked[0].contrast > 0.8, "{:#?}", ranked[0]);
    }

    /// The requests of a value between its change and the onset, against the
    /// window's 60% bad and the scope's 1% before: 3 of 10 bad (an onset found a
    /// minute late) keep its contrast; 0 of 40 (an image that served an instance well
    /// before its cache collapsed) lose it; 1 of 2 decide little.
    #[test]
    fn requests_before_the_onset_keep_a_value_only_as_far_as_they_were_bad_too() {
        let during = (60.0, 100.0);
        assert!(healthy_before((3.0, 10.0), during, 0.01) > 0.99);
        assert!(healthy_before((0.0, 40.0), during, 0.01) < 1e-9);
        let few = healthy_before((1.0, 2.0), during, 0.01);
        assert!((0.9..1.0).contains(&few), "{few}");
        let one_good = healthy_before((0.0, 1.0), during, 0.01);
        assert!((0.2..0.5).contains(&one_good), "{one_good}");
        // Nothing before, or a window no worse than before: nothing to go by.
        assert_eq!(healthy_before((0.0, 0.0), during, 0.01), 1.0);
        assert_eq!(healthy_before((0.0, 40.0), (1.0, 100.0), 0.01), 1.0);
    }

    /// Two changes take all of a route's traffic: a harmless prompt bump two minutes
    /// before the onset, then the image that slows every request. Both carry every bad
    /// request; the prompt's requests before the onset were as fast as the rest, so
    /// its arrival did not bring them, and the image ranks first.
    #[test]
    fn a_value_healthy_before_the_onset_loses_its_before_and_after() {
        let mut baseline: Vec<_> = ["i-1", "i-2"]
            .iter()
            .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 1500, 0.8)))
            .collect();
        baseline.extend(
            ["i-1", "i-2"]
                .iter()
                .map(|i| (key(i, "fin@6", "v3", "img:1"), cell(500.0, 50, 0.8))),
        );
        let window: Vec<_> = ["i-1", "i-2"]
            .iter()
            .map(|i| (key(i, "fin@6", "v3", "img:2"), cell(1300.0, 250, 0.8)))
            .collect();
        let ranked = rank_p99(
            &baseline,
            &window,
            vec![
                change(
                    "prompt_version",
                    "prompt:p@v3",
                    98,
                    (Dimension::PromptVersion, "v3"),
                ),
                change(
                    "image_rollout",
                    "image:img:2",
                    100,
                    (Dimension::Image, "img:2"),
                ),
            ],
        );
        assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
        let prompt = ranked.iter().find(|c| c.subject == "prompt:p@v3").unwrap();
        assert!(prompt.before_after < 0.1, "{prompt:#?}");
        assert!(
            ranked[0].confidence - prompt.confidence > 0.2,
            "{ranked:#?}"
        );
    }

    /// The same change on every instance, on requests that are (nearly) all model
    /// call: the added time went into model calls, so an image on all of them keeps
    /// its before/after contrast.
    #[test]
    fn a_change_on_all_traffic_keeps_its_before_and_after_when_the_call_is_the_request() {
        let baseline: Vec<_> = ["i-1", "i-2"]
            .iter()
            .map(|i| {
                (
                    key(i, "fin@6", "v2", "img:1"),
                    request_cell(300, 5.0, 500.0),
                )
            })
            .collect();
        // The retrieval wobbles up a little too (5 → 8 ms).
        let window: Vec<_> = ["i-1", "i-2"]
            .iter()
            .map(|i| {
                (
                    key(i, "fin@6", "v2", "img:2"),
                    request_cell(300, 8.0, 1300.0),
                )
            })
            .collect();
        let ranked = rank_p99(
            &baseline,
            &window,
            vec![change(
                "image_rollout",
                "image:img:2",
                100,
                (Dimension::Image, "img:2"),
            )],
        );
        assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
        assert!(ranked[0].before_after > 0.9, "{:#?}", ranked[0]);
        // The model call was the whole request: no span candidate names it, and the
        // retrieval's wobble is no cause.
        assert!(
            ranked.iter().all(|c| c.kind != CandidateKind::Span
                || (!c.subject.contains("chat llama") && c.confidence < 0.1)),
            "{ranked:#?}"
        );
    }

    #[test]
    fn shipped_rules_parse_and_bad_rules_are_refused() {
        assert!(FaultRules::default_rules().rules.len() >= 5);
        let err = FaultRules::parse("[[rule]]\nname='x'\nwhen=['p98']\nboost=0.1\nexplain='e'\n")
            .unwrap_err();
        assert!(err.contains("unknown metric \"p98\""), "{err}");
    }
}
