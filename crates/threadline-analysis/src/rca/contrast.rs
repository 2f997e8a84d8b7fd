//! Contrast: which attribute values the window's bad requests are attributable to,
//! within the window and against the baseline before it (the `C` and `B` terms).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::co_moving::CO_MOVING;
use super::{proximity, RcaInput, CALL_DIMENSIONS};
use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};
use crate::time_went::TimeWent;

/// Contrast of one attribute value.
#[derive(Clone, Debug, Default)]
pub(super) struct Contrast {
    pub(super) score: f64,
    /// Before/after: how much the value's arrival (its share grown since the
    /// baseline) carries the bad requests.
    pub(super) before_after: f64,
    pub(super) recall: f64,
    /// Its excess bad rate against that of the requests without it.
    pub(super) relative_risk: f64,
    pub(super) share_window: f64,
    pub(super) share_baseline: f64,
    pub(super) metric_baseline: Option<f64>,
    pub(super) metric_window: Option<f64>,
    /// The factor of `before_after` (and of a change's `score`) its requests before
    /// the onset leave it (`healthy_before`).
    pub(super) healthy_before: f64,
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
pub(super) struct Scope {
    base_all: RollupCell,
    /// The window's and the baseline's bad and total mass.
    all: Masses,
    rate_before: f64,
}

impl Scope {
    pub(super) fn of(input: &RcaInput<'_>) -> Self {
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
pub(super) fn contrasts(
    input: &RcaInput<'_>,
    scope: &Scope,
) -> BTreeMap<(Dimension, String), Contrast> {
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
pub(super) fn judge_against_leader(
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
pub(super) const NOTICEABLE: f64 = 0.01;

/// The within-window contrast above which a value leads: other values are then judged
/// against it (`judge_against_leader`).
const LEADS: f64 = 0.2;

pub(super) fn contrast_json(c: &Contrast) -> serde_json::Value {
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

/// A metric value in its unit, for explanations; "no requests" where the subject had
/// none to measure.
fn show(metric: Metric, v: Option<f64>) -> String {
    match (v, metric.unit()) {
        (None, _) => "no requests".into(),
        (Some(v), "ms") => crate::time_went::ms(v),
        (Some(v), "ratio") => format!("{:.1}%", v * 100.0),
        (Some(v), unit) => format!("{v:.1} {unit}"),
    }
}

pub(super) fn contrast_line(metric: Metric, subject: &str, c: &Contrast) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
