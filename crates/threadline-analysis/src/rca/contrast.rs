//! Contrast: which attribute values explain the window's bad requests, within the
//! window and against the baseline before it (the `C` and `B` terms).
//!
//! Two judgements of a request are made (`Judge`). Against the **scope's** baseline
//! (slower than the route's P99 before, failed, refused …) the bad mass adds up to the
//! route's change, which each value's **explanatory power** is a share of. Against the
//! value's **own** baseline (slower than its own P99 before), a value that always
//! served the slow requests — an instance with the long prompts — is bad only where it
//! got worse than it was: the bad requests concentrated on it before the onset as
//! after, so it explains nothing of what changed. The contrast `C` is taken on this
//! own judgement.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::co_moving::CO_MOVING;
use super::combinations::scan_llr;
use super::judge::{Judge, OWN_BASELINE_REQUESTS};
use super::{proximity, RcaInput, CALL_DIMENSIONS};
use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};
use crate::tails::binomial_tail;
use crate::time_went::TimeWent;

/// Contrast of one attribute value.
#[derive(Clone, Debug, Default)]
pub(super) struct Contrast {
    /// Within the window (`C`): the share of its dimension's excess bad mass the
    /// value holds, each value judged against its own baseline, times `1 − 1/RR`.
    pub(super) score: f64,
    /// Before/after (`B`): how much the value's arrival (its share grown since the
    /// baseline) carries the route's change.
    pub(super) before_after: f64,
    /// `before_after` before its requests before the onset judged it (`healthy_before`).
    pub(super) before_after_whole: f64,
    /// Its share of its dimension's excess bad mass, each value against its own
    /// baseline.
    pub(super) recall: f64,
    /// Its excess bad rate against that of the requests without it.
    pub(super) relative_risk: f64,
    /// The part of the route's change (bad mass beyond the baseline rate) its
    /// requests account for: their own change plus the traffic it gained or lost at
    /// its old rate against the route's (Adtributor's explanatory power, with a
    /// forecast per request).
    pub(super) explanatory_power: f64,
    /// Its share of its dimension's bad mass expected from the baseline (its requests
    /// at their own rate before; 0 for a value that did not exist), and the share it
    /// holds.
    pub(super) expected_share: f64,
    pub(super) actual_share: f64,
    /// Its term of the Jensen–Shannon divergence between expected and actual shares.
    pub(super) surprise: f64,
    pub(super) share_window: f64,
    pub(super) share_baseline: f64,
    pub(super) metric_baseline: Option<f64>,
    pub(super) metric_window: Option<f64>,
    /// The factor of `before_after` (and of a change's `score`) its requests before
    /// the onset leave it (`healthy_before`).
    pub(super) healthy_before: f64,
}

/// What the whole scope looked like, computed once per ranking: the judgement of its
/// baseline, the window's bad mass and total, and how often a request was bad
/// before (the rate a value's requests are held to).
pub(super) struct Scope {
    base_all: RollupCell,
    pub(super) judge: Judge,
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
        let judge = Judge::against(input.metric, &base_all);
        let (bad_all, total_all) = judge.masses(input.window.iter().map(|(_, c)| c));
        let (bad_before, total_before) = judge.masses(input.baseline.iter().map(|(_, c)| c));
        let rate_before = if total_before > 0.0 {
            bad_before / total_before
        } else {
            0.0
        };
        Self {
            base_all,
            judge,
            all: Masses {
                bad: bad_all,
                total: total_all,
                bad_before,
                total_before,
            },
            rate_before,
        }
    }

    /// The route's change: its window's bad mass beyond the baseline rate.
    fn change(&self) -> f64 {
        (self.all.bad - self.all.total * self.rate_before).max(0.0)
    }
}

/// Values a change near the onset brought: their requests before the onset are the
/// change's doing, not a background of theirs (an onset found minutes late finds them
/// bad already), nor a baseline to judge them by; whether they were healthy is
/// `healthy_before`'s to judge.
fn brought<'a>(input: &'a RcaInput<'_>) -> HashSet<(Dimension, &'a str)> {
    input
        .changes
        .iter()
        .filter(|c| proximity(c, input.onset_minute) > 0.0)
        .filter_map(|c| c.attribute.as_ref().map(|(d, v)| (*d, v.as_str())))
        .collect()
}

/// The window's requests judged each against its own reference: the baseline of the
/// requests that agree with it on every dimension whose value was already serving
/// (values new since, or brought by a change near the onset, left out — their
/// requests before the onset are no baseline of theirs). An instance that always
/// served the long prompts is judged against its own slower tail, a new adapter's
/// requests on it against that instance's. A reference with fewer than
/// `OWN_BASELINE_REQUESTS` is replaced by the scope's baseline.
pub(super) struct OwnJudgement {
    /// Per window cell: its bad mass against its reference, its total, and the bad
    /// mass its reference's own rate expects of it.
    pub(super) cells: Vec<(f64, f64, f64)>,
}

impl OwnJudgement {
    pub(super) fn of(input: &RcaInput<'_>, scope: &Scope) -> Self {
        let brought = brought(input);
        let dims: Vec<Dimension> = Dimension::ALL
            .into_iter()
            .filter(|d| *d != Dimension::Service)
            .collect();
        let existing: HashSet<(Dimension, &str)> = input
            .baseline
            .iter()
            .flat_map(|(k, _)| dims.iter().map(move |d| (*d, k.get(*d))))
            .filter(|a| !brought.contains(a))
            .collect();
        // The reference's judgement and its rate, per set of values it agrees on.
        let mut references: HashMap<Vec<(Dimension, &str)>, (Judge, f64)> = HashMap::new();
        let scope_reference = (
            scope.judge,
            (scope.all.bad_before + 0.5) / (scope.all.total_before + 1.0),
        );
        let cells = input
            .window
            .iter()
            .map(|(key, cell)| {
                let agree: Vec<(Dimension, &str)> = dims
                    .iter()
                    .map(|d| (*d, key.get(*d)))
                    .filter(|a| existing.contains(a))
                    .collect();
                let (judge, rate) = *references.entry(agree).or_insert_with_key(|agree| {
                    let base: RollupCell = input
                        .baseline
                        .iter()
                        .filter(|(k, _)| agree.iter().all(|(d, v)| k.get(*d) == *v))
                        .map(|(_, c)| c)
                        .collect();
                    if base.requests < OWN_BASELINE_REQUESTS {
                        return scope_reference;
                    }
                    let judge = Judge::against(input.metric, &base);
                    let (bad, total) = judge.mass(&base);
                    // Drawn towards how often the whole baseline was bad by the same
                    // judgement: a reference with no bad request in 300 does not
                    // expect none ever (a single one would then be infinitely
                    // surprising).
                    let (prior_bad, prior_total) = judge.mass(&scope.base_all);
                    let prior = (prior_bad + 0.5) / (prior_total + 1.0);
                    let rate = (bad + prior * BACKGROUND_PRIOR) / (total + BACKGROUND_PRIOR);
                    (judge, rate)
                });
                let (bad, total) = judge.mass(cell);
                (bad, total, total * rate)
            })
            .collect();
        Self { cells }
    }
}

/// One value's requests of a dimension, judged both ways.
#[derive(Default)]
struct Slice<'a> {
    window: Vec<&'a RollupCell>,
    baseline: Vec<&'a RollupCell>,
    /// Against each request's own reference: bad mass, total, expected bad mass.
    own: (f64, f64, f64),
    /// Against the scope's baseline; before the onset none for a value a change near
    /// it brought.
    scoped: Masses,
    /// (bad, total) mass of its baseline requests against the scope's baseline,
    /// brought or not.
    base: (f64, f64),
}

impl Slice<'_> {
    /// Its bad mass beyond what its references expect.
    fn own_excess(&self) -> f64 {
        (self.own.0 - self.own.2).max(0.0)
    }
}

/// Contrast of every attribute value present in the window.
pub(super) fn contrasts(
    input: &RcaInput<'_>,
    scope: &Scope,
    own: &OwnJudgement,
) -> BTreeMap<(Dimension, String), Contrast> {
    let (all, rate_before) = (scope.all, scope.rate_before);
    let base_requests: f64 = input.baseline.iter().map(|(_, c)| c.requests as f64).sum();
    let window_requests: f64 = input.window.iter().map(|(_, c)| c.requests as f64).sum();
    let route_change = scope.change();
    let brought = brought(input);
    let mut out = BTreeMap::new();
    // Every dimension but the service: it is the scope, not a cause.
    for dim in Dimension::ALL
        .into_iter()
        .filter(|d| *d != Dimension::Service)
    {
        // Requests without the dimension are a slice of their own ("") that is no
        // candidate but part of everyone's rest.
        let mut slices: HashMap<&str, Slice<'_>> = HashMap::new();
        for ((k, c), judged) in input.window.iter().zip(&own.cells) {
            let slice = slices.entry(k.get(dim)).or_default();
            slice.window.push(c);
            slice.own = (
                slice.own.0 + judged.0,
                slice.own.1 + judged.1,
                slice.own.2 + judged.2,
            );
        }
        for (k, c) in input.baseline {
            slices.entry(k.get(dim)).or_default().baseline.push(c);
        }
        for (value, slice) in slices.iter_mut() {
            let (bad, total) = scope.judge.masses(slice.window.iter().copied());
            slice.base = scope.judge.masses(slice.baseline.iter().copied());
            let (bad_before, total_before) = if brought.contains(&(dim, *value)) {
                (0.0, 0.0)
            } else {
                slice.base
            };
            slice.scoped = Masses {
                bad,
                total,
                bad_before,
                total_before,
            };
        }
        let own_excess: f64 = slices.values().map(Slice::own_excess).sum();
        let own_total: f64 = slices.values().map(|s| s.own.1).sum();
        let own_bad: f64 = slices.values().map(|s| s.own.0).sum();
        let own_expected: f64 = slices.values().map(|s| s.own.2).sum();
        // Bad mass each value would hold had nothing changed: its share of the
        // traffic before, at the rate its references expect (0 for a value that did
        // not exist).
        let expected_of = |s: &Slice<'_>| {
            let before: f64 = s.baseline.iter().map(|c| c.requests as f64).sum();
            before / base_requests.max(1.0) * own_expected
        };
        for (value, slice) in &slices {
            if value.is_empty() || slice.window.is_empty() {
                continue;
            }
            let (recall, relative_risk, score) = attributable(
                (slice.own_excess(), slice.own.1),
                (own_excess - slice.own_excess(), own_total - slice.own.1),
            );
            let in_window = slice.window.iter().copied().collect::<RollupCell>();
            let in_base = (!slice.baseline.is_empty())
                .then(|| slice.baseline.iter().copied().collect::<RollupCell>());
            let share_window = in_window.requests as f64 / window_requests.max(1.0);
            let share_baseline =
                in_base.as_ref().map_or(0.0, |b| b.requests as f64) / base_requests.max(1.0);
            // What its requests changed against their own references (a new value's
            // against the values it arrived with: a harmless adapter on every request
            // of a prompt version that always refused a third explains none of the
            // refusals), plus the traffic it gained or lost at its rate before against
            // the route's (that prompt version taking over from 15% of the traffic
            // explains them all).
            let scoped = slice.scoped;
            let own_rate = scoped.rate_before(rate_before);
            let forecast_requests = share_baseline * all.total;
            let change = (slice.own.0 - slice.own.2)
                + (scoped.total - forecast_requests) * (own_rate - rate_before);
            let explanatory_power = if route_change > 0.0 {
                (change / route_change).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let expected_share = if own_expected > 0.0 {
                expected_of(slice) / own_expected
            } else {
                0.0
            };
            let actual_share = if own_bad > 0.0 {
                slice.own.0 / own_bad
            } else {
                0.0
            };
            // A value that took over traffic since the baseline (all of it, for a
            // change on every instance) and whose requests are worse than requests
            // were before: within the window it has nothing to be contrasted with.
            let gained = (share_window - share_baseline).max(0.0);
            let rate = if scoped.total > 0.0 {
                scoped.bad / scoped.total
            } else {
                0.0
            };
            let excess = if rate > rate_before && rate > 0.0 {
                1.0 - rate_before / rate
            } else {
                0.0
            };
            out.insert(
                (dim, (*value).to_owned()),
                Contrast {
                    score,
                    before_after: (gained * explanatory_power * excess).clamp(0.0, 1.0),
                    before_after_whole: 0.0,
                    recall,
                    relative_risk,
                    explanatory_power,
                    expected_share,
                    actual_share,
                    surprise: js_term(expected_share, actual_share),
                    share_window,
                    share_baseline,
                    metric_baseline: in_base.and_then(|b| input.metric.value(&b, 60.0)),
                    metric_window: input.metric.value(&in_window, 60.0),
                    healthy_before: healthy_before(
                        slice.base,
                        (scoped.bad, scoped.total),
                        rate_before,
                    ),
                },
            );
        }
    }
    out
}

/// One value's term of the Jensen–Shannon divergence between the expected shares `p`
/// and the actual ones `q` (bits; the terms of a dimension add up to at most 1).
fn js_term(p: f64, q: f64) -> f64 {
    let m = (p + q) / 2.0;
    let part = |x: f64| if x > 0.0 { x * (x / m).log2() } else { 0.0 };
    if m <= 0.0 {
        0.0
    } else {
        ((part(p) + part(q)) / 2.0).max(0.0)
    }
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
    /// Their bad rate before: their own, drawn towards `prior` (the scope's) while
    /// they were few.
    fn rate_before(&self, prior: f64) -> f64 {
        (self.bad_before + prior * BACKGROUND_PRIOR) / (self.total_before + BACKGROUND_PRIOR)
    }
}

/// Bad requests' worth at the window's rate added to a value's and the rest's rates
/// before they are compared.
const PSEUDO_BAD: f64 = 4.0;

/// Requests' worth of the scope's background a value's own background is drawn to.
const BACKGROUND_PRIOR: f64 = 20.0;

/// How much of the window's excess bad mass a value accounts for, as its population
/// attributable fraction, from the (excess, total) of its requests and of the rest:
/// `(recall, relative risk, recall × (1 − 1/relative risk))`.
///
/// The excess is the bad mass beyond the background the requests showed before (half
/// of them are above a baseline median, 1% above its P99; a slow model is always
/// above the median), so that a slower A/B arm is contrasted on the requests it
/// slowed. The value's excess rate is held against that of the requests without it
/// — not of all requests, itself included, which capped an arm on half the traffic at
/// 0.5 however completely it held the bad requests. Both rates are smoothed by
/// `PSEUDO_BAD` bad requests' worth at the window's rate: 8 bad requests that all fell
/// on one arm of two (one time in 250 by chance, and there are many values) are
/// weaker evidence than 35, and a value on nearly all of the traffic does not win on
/// a few clean requests left over.
pub(super) fn attributable(
    (value_x, value_n): (f64, f64),
    (rest_x, rest_n): (f64, f64),
) -> (f64, f64, f64) {
    // The rest may hold fewer bad requests than its references expect (its excess
    // below zero): it then holds none of the excess, and the value all of it.
    let rest_x = rest_x.max(0.0);
    let all_x = value_x + rest_x;
    let all_n = value_n + rest_n;
    if all_x <= 0.0 || value_n <= 0.0 {
        return (0.0, 0.0, 0.0);
    }
    let recall = value_x / all_x;
    let rate_all = all_x / all_n.max(1e-9);
    let smoothing = (PSEUDO_BAD / rate_all).min(all_n);
    let smoothed = |bad: f64, total: f64| (bad + rate_all * smoothing) / (total + smoothing);
    let risk = smoothed(value_x, value_n) / smoothed(rest_x, rest_n.max(0.0));
    let score = if risk > 1.0 {
        recall * (1.0 - 1.0 / risk)
    } else {
        0.0
    };
    (recall, risk, score.clamp(0.0, 1.0))
}

/// Judges every value against the leader: the value whose within-window contrast is
/// highest, once it is high enough to lead and its share of the bad requests is
/// beyond chance for its share of the traffic (`LEADER_CHANCE`) — or a narrower value
/// inside its requests that holds nearly all of its excess (a canary pinned to one
/// instance).
///
/// - A value whose requests hold (nearly) all of the leader's and more — an image on
///   two instances, one of which fails — is a less specific cause than the leader,
///   unless its requests outside the leader went bad too (an adapter on two instances
///   whose bad requests happen to gather on one). Its within-window contrast is kept
///   in the proportion of how bad those other requests are against the leader's own.
/// - A value that took over the traffic is only as good a cause as the window lets it
///   be. When the bad requests concentrate on a value of another dimension (an adapter
///   on half the instances), a value that arrived everywhere (an image on all of them)
///   is judged on its requests without that value: what it explains beyond it —
///   unless those requests are worse than before beyond chance (a new model that
///   fails on both arms of a test, more on one): then the leader cannot be the whole
///   story, and the value keeps what it explains. And
///   when the added time went into spans that are no model call (a retriever), a model
///   call's own attributes (prompt, adapter, image …) explain it only by the model
///   calls' share of it.
pub(super) fn judge_against_leader(
    input: &RcaInput<'_>,
    scope: &Scope,
    time_went: &TimeWent,
    contrasts: &mut BTreeMap<(Dimension, String), Contrast>,
) {
    let rate_before = scope.rate_before;
    let route_change = scope.change();
    // (bad, total) mass of the window's requests that pass `keep`.
    let mass = |keep: &dyn Fn(&SeriesKey) -> bool| {
        input
            .window
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(_, cell)| scope.judge.mass(cell))
            .fold((0.0, 0.0), |(b, t), (x, y)| (b + x, t + y))
    };
    // A leader's bad requests must gather on it beyond chance: four of a quiet
    // route's bad requests all on the arm that has 60% of its traffic (one time in
    // eight) leads nothing. (A deficit — KV hits, generation speed — is no count of
    // requests to test so.)
    let beyond_chance = |(dim, value): &(Dimension, String)| {
        if !scope.judge.counts_requests() {
            return true;
        }
        let all = mass(&|_| true);
        let (bad, total) = mass(&|k: &SeriesKey| k.get(*dim) == value);
        all.1 > 0.0
            && binomial_tail(
                bad.round() as u64,
                all.0.round() as u64,
                (total / all.1).clamp(0.0, 1.0),
            ) < LEADER_CHANCE
    };
    let leader = contrasts
        .iter()
        .filter(|(_, c)| c.score > LEADS)
        .max_by(|a, b| a.1.score.total_cmp(&b.1.score))
        .map(|(k, _)| k.clone())
        .filter(|k| beyond_chance(k));
    let rate = |(bad, total): (f64, f64)| if total > 0.0 { bad / total } else { 0.0 };
    // A value of another dimension whose requests lie inside the leader's, fewer of
    // them, that holds nearly all of the leader's excess (a canary pinned to one
    // instance) is the more specific cause: it leads, and the old leader is judged
    // against it as any wider value is.
    let (leader, leader_mass) = leader
        .map(|(lead_dim, lead_value)| {
            let lead = mass(&|k: &SeriesKey| k.get(lead_dim) == lead_value);
            let lead_excess = lead.0 - lead.1 * rate_before;
            contrasts
                .keys()
                .filter(|(dim, _)| *dim != lead_dim && lead_excess > 0.0)
                .filter_map(|(dim, value)| {
                    let all = mass(&|k: &SeriesKey| k.get(*dim) == value);
                    let inside = mass(&|k: &SeriesKey| {
                        k.get(*dim) == value && k.get(lead_dim) == lead_value
                    });
                    let nested = all.1 > 0.0 && inside.1 >= CO_MOVING * all.1;
                    let narrower = all.1 < CO_MOVING * lead.1;
                    let holds = inside.0 - inside.1 * rate_before >= CO_MOVING * lead_excess;
                    (nested && narrower && holds).then_some((all, (*dim, value.clone())))
                })
                .min_by(|a, b| a.0 .1.total_cmp(&b.0 .1))
                .map_or(((lead_dim, lead_value), lead), |(all, v)| (v, all))
        })
        .unzip();
    let call_share = time_went.model_call_share();
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
                // Its requests without the leading value worse than requests were
                // before, beyond chance: the leader cannot be the whole story, and the
                // value that took over the traffic is one cause of all of it (a new
                // model that fails on both arms, more on one) — it keeps what it
                // explains. Otherwise it keeps what it explains beyond the leader.
                let worse_without_leader =
                    scan_llr(outside.0, outside.1 * rate_before) >= WORSE_WITHOUT_LEADER;
                if c.before_after > 0.0 && !worse_without_leader {
                    // What the value explains beyond the leader.
                    let rate = rate(outside);
                    let recall = if route_change > 0.0 {
                        ((outside.0 - outside.1 * rate_before) / route_change).clamp(0.0, 1.0)
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
        // Of a request's end-to-end latency, a model call's attributes explain the
        // calls' part; of its time to the first token as the caller waits for it, what
        // the steps before the call (a slower profile lookup) did not add; cache hits
        // and generation speed are the call's own.
        if CALL_DIMENSIONS.contains(dim) && input.metric.requests_quantile().is_some() {
            c.before_after *= call_share.unwrap_or(1.0);
        }
        c.before_after_whole = c.before_after;
        c.before_after *= c.healthy_before;
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

/// The scan statistic (log-likelihood ratio) of a value's requests without the
/// leading value against the rate before, from which they are worse beyond chance
/// (about p < 0.001, a few dimensions' values scanned).
const WORSE_WITHOUT_LEADER: f64 = 6.0;

/// How unlikely (binomial tail) a leader's share of the window's bad requests must be,
/// given its share of the traffic, for it to lead: the values of several dimensions
/// are scanned.
const LEADER_CHANCE: f64 = 0.001;

/// The within-window contrast above which a value leads: other values are then judged
/// against it (`judge_against_leader`).
const LEADS: f64 = 0.2;

pub(super) fn contrast_json(c: &Contrast) -> serde_json::Value {
    serde_json::json!({
        "contrast": c.score,
        "before_after": c.before_after,
        "share_of_bad": c.recall,
        "explanatory_power": c.explanatory_power,
        "expected_share_of_bad": c.expected_share,
        "actual_share_of_bad": c.actual_share,
        "surprise": c.surprise,
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
        "{subject}: {:.0}% of the bad requests (expected {:.0}%) on {:.0}% of the traffic (before {:.0}%), explains {:.0}% of the change; {} {} → {}",
        c.actual_share * 100.0,
        // Never "-0%".
        (c.expected_share * 100.0).abs(),
        c.share_window * 100.0,
        c.share_baseline * 100.0,
        c.explanatory_power * 100.0,
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

    #[test]
    fn a_rest_better_than_its_references_leaves_the_value_all_the_excess() {
        // The narrowed slice: 2,173 excess bad requests of 3,348; the rest of the
        // window 31 fewer bad requests than expected of 18,300.
        let (recall, risk, score) = attributable((2173.0, 3348.0), (-31.0, 18_300.0));
        assert!(
            recall > 0.99 && risk > 100.0 && score > 0.99,
            "{recall} {risk} {score}"
        );
    }
}
