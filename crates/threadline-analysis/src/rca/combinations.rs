//! Causes that are a combination of values — an adapter that fails only on one image,
//! a bitrate that stalls only over peer-to-peer: a leading value is narrowed by one
//! value of another dimension at a time while the narrower slice is the likelier
//! cluster of the excess bad requests (HotSpot's and Squeeze's attribute
//! combinations, chosen by the expectation-based Poisson scan statistic: a value
//! whose requests went bad alike with or without the second value stays whole, as
//! narrowing it would leave bad requests unexplained; one whose bad requests all sit
//! on the second value is narrowed, as the whole value dilutes them).
//!
//! And causes that are **either of two values** of one dimension (Adtributor's
//! element sets: two bitrates that stalled at once, two instances behind one switch):
//! when no value holds most of its dimension's excess, two that hold nearly all of
//! it between them, each bad alike, are one candidate (`either`).

use std::collections::BTreeSet;

use super::co_moving::CO_MOVING;
use super::contrast::{attributable, Contrast, OwnJudgement};
use super::RcaInput;
use crate::rollup::{Dimension, SeriesKey};

/// Values narrowed, at most (the seed and two more).
const MAX_VALUES: usize = 3;
/// Leading values tried as seeds.
const SEEDS: usize = 5;
/// The within-window contrast a seed needs.
const SEED_SCORE: f64 = 0.1;
/// The most the rest of the wider slice may be affected, against the narrower
/// slice's excess bad rate.
const RATE_OUT_AT_MOST: f64 = 0.5;

/// A value holding this much of its dimension's excess is the cause alone.
const ALONE: f64 = 0.7;
/// Each of two values must hold this much of their dimension's excess, and both
/// together `TOGETHER`, for either of them to be the cause.
const EACH: f64 = 0.25;
const TOGETHER: f64 = 0.85;
/// Two values are bad alike when the lesser excess rate is at least this much of
/// the greater.
const ALIKE_RATE: f64 = 0.5;

/// Log-likelihood a narrower slice must gain over the wider to be taken: the scan
/// tries many values, and a finer slice fits noise a little better by chance.
const NARROWING_GAIN: f64 = 3.0;

/// The expectation-based Poisson scan statistic of a slice with `bad` bad requests
/// where its references expected `expected`: the log-likelihood ratio of its rate
/// raised against as expected (0 where it is not raised).
pub(super) fn scan_llr(bad: f64, expected: f64) -> f64 {
    if bad <= expected || bad <= 0.0 {
        return 0.0;
    }
    let expected = expected.max(1e-9);
    bad * (bad / expected).ln() - (bad - expected)
}

/// A combination of values, and how much of the window's excess it accounts for.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Combination {
    /// The values, the seed first.
    pub(super) values: Vec<(Dimension, String)>,
    pub(super) recall: f64,
    pub(super) relative_risk: f64,
    pub(super) score: f64,
    /// Excess bad rate of the narrowed slice and of the rest of its seed.
    pub(super) rate_in: f64,
    pub(super) rate_out: f64,
}

/// `dimension=value` of each value, in order, joined by `separator`.
fn joined(values: &[(Dimension, String)], separator: &str) -> String {
    let mut values = values.to_vec();
    values.sort();
    values
        .iter()
        .map(|(d, v)| format!("{}={v}", d.as_str()))
        .collect::<Vec<_>>()
        .join(separator)
}

impl Combination {
    /// `adapter=2000 & gray_tag=1`, in dimension order.
    pub(super) fn subject(&self) -> String {
        joined(&self.values, " & ")
    }
}

/// Either of two values of one dimension, and how much of the window's excess the
/// two hold.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Either {
    /// The two, the one holding more excess first.
    pub(super) values: [(Dimension, String); 2],
    /// Each one's share of its dimension's excess.
    pub(super) shares: [f64; 2],
    pub(super) recall: f64,
    pub(super) relative_risk: f64,
    pub(super) score: f64,
    /// Excess bad rate of the two values' requests, and of the dimension's others.
    pub(super) rate_in: f64,
    pub(super) rate_out: f64,
}

impl Either {
    /// `adapter=2000 | adapter=4000`, in value order.
    pub(super) fn subject(&self) -> String {
        joined(&self.values, " | ")
    }
}

/// The window's cells with their own judgement, for sums over slices.
struct Cells<'a> {
    keys: Vec<&'a SeriesKey>,
    judged: &'a [(f64, f64, f64)],
}

impl Cells<'_> {
    /// (bad mass, expected bad mass, total) of the cells `keep` passes.
    fn sums(&self, keep: impl Fn(&SeriesKey) -> bool) -> (f64, f64, f64) {
        let (mut bad, mut total, mut expected) = (0.0, 0.0, 0.0);
        for (k, (b, t, e)) in self.keys.iter().zip(self.judged) {
            if keep(k) {
                bad += b;
                total += t;
                expected += e;
            }
        }
        (bad, expected, total)
    }

    /// The values of `dim` (not empty) on the cells `keep` passes.
    fn values_of(&self, dim: Dimension, keep: impl Fn(&SeriesKey) -> bool) -> BTreeSet<&str> {
        self.keys
            .iter()
            .filter(|k| keep(k))
            .map(|k| k.get(dim))
            .filter(|v| !v.is_empty())
            .collect()
    }

    /// (excess bad mass, total) of the cells `keep` passes.
    fn mass(&self, keep: impl Fn(&SeriesKey) -> bool) -> (f64, f64) {
        let (bad, expected, total) = self.sums(keep);
        ((bad - expected).max(0.0), total)
    }
}

fn holds(values: &[(Dimension, String)], k: &SeriesKey) -> bool {
    values.iter().all(|(d, v)| k.get(*d) == v)
}

/// Narrows the leading values (by within-window contrast, those in `seeds_from`)
/// into combinations where the evidence asks for one.
pub(super) fn narrow(
    input: &RcaInput<'_>,
    own: &OwnJudgement,
    contrasts: &std::collections::BTreeMap<(Dimension, String), Contrast>,
    seeds_from: impl Fn(&(Dimension, String)) -> bool,
) -> Vec<Combination> {
    let cells = Cells {
        keys: input.window.iter().map(|(k, _)| k).collect(),
        judged: &own.cells,
    };
    let (all_x, all_n) = cells.mass(|_| true);
    let mut seeds: Vec<(&(Dimension, String), &Contrast)> = contrasts
        .iter()
        .filter(|(k, c)| c.score >= SEED_SCORE && seeds_from(k))
        .collect();
    seeds.sort_by(|a, b| b.1.score.total_cmp(&a.1.score));
    let mut out = Vec::new();
    for (seed, _) in seeds.into_iter().take(SEEDS) {
        let mut values = vec![seed.clone()];
        let mut last = None;
        while values.len() < MAX_VALUES {
            let (wide_bad, wide_expected, wide_n) = cells.sums(|k| holds(&values, k));
            let wide_llr = scan_llr(wide_bad, wide_expected);
            let used: BTreeSet<Dimension> = values.iter().map(|(d, _)| *d).collect();
            let mut best: Option<(f64, Combination)> = None;
            for dim in Dimension::ALL
                .into_iter()
                .filter(|d| *d != Dimension::Service && !used.contains(d))
            {
                let seen = cells.values_of(dim, |k| holds(&values, k));
                if seen.len() < 2 {
                    // Every request of the slice has it: nothing to narrow by.
                    continue;
                }
                for value in seen {
                    let inside = |k: &SeriesKey| holds(&values, k) && k.get(dim) == value;
                    let (bad, expected, n) = cells.sums(inside);
                    let llr = scan_llr(bad, expected);
                    // A value on (nearly) all of the slice's requests moves with it:
                    // no narrower slice (`co_moving` makes them one cause).
                    if n <= 0.0
                        || n >= CO_MOVING * wide_n
                        || llr < wide_llr + NARROWING_GAIN
                        || best.as_ref().is_some_and(|(b, _)| *b >= llr)
                    {
                        continue;
                    }
                    let x = (bad - expected).max(0.0);
                    let (x_out, n_out) = cells.mass(|k| holds(&values, k) && k.get(dim) != value);
                    let rate_out = if n_out > 0.0 { x_out / n_out } else { 0.0 };
                    // The rest of the wider slice affected nearly as much: no
                    // narrower cause, whatever the likelihoods of a few requests say.
                    if rate_out > RATE_OUT_AT_MOST * x / n {
                        continue;
                    }
                    let (recall, relative_risk, score) =
                        attributable((x, n), (all_x - x, all_n - n));
                    let mut narrower = values.clone();
                    narrower.push((dim, value.to_owned()));
                    best = Some((
                        llr,
                        Combination {
                            values: narrower,
                            recall,
                            relative_risk,
                            score,
                            rate_in: x / n,
                            rate_out,
                        },
                    ));
                }
            }
            let best = best.map(|(_, b)| b);
            match best {
                Some(b) => {
                    values = b.values.clone();
                    last = Some(b);
                }
                None => break,
            }
        }
        if let Some(found) = last {
            // One of its values alone on (nearly) the same requests (a new image on
            // the one instance narrowed by it): that value is the cause, whole.
            let (_, _, n) = cells.sums(|k| holds(&found.values, k));
            let alone = found.values.iter().any(|(d, v)| {
                let (_, _, with) = cells.sums(|k| k.get(*d) == v);
                n >= CO_MOVING * with
            });
            // Found from several seeds (each of its values leading): each seed is
            // narrowed to it, and the ranking keeps the best-scored of the same
            // subject.
            if !alone {
                out.push(found);
            }
        }
    }
    out
}

/// Per dimension, two values that hold its excess between them where neither holds
/// most of it alone (module docs), among those `candidate` passes.
pub(super) fn either(
    input: &RcaInput<'_>,
    own: &OwnJudgement,
    candidate: impl Fn(&(Dimension, String)) -> bool,
) -> Vec<Either> {
    let cells = Cells {
        keys: input.window.iter().map(|(k, _)| k).collect(),
        judged: &own.cells,
    };
    let (all_x, all_n) = cells.mass(|_| true);
    let mut out = Vec::new();
    for dim in Dimension::ALL
        .into_iter()
        .filter(|d| *d != Dimension::Service)
    {
        let values = cells.values_of(dim, |_| true);
        // (value, excess, requests), the most excess first.
        let mut masses: Vec<(&str, f64, f64)> = values
            .into_iter()
            .map(|v| {
                let (x, n) = cells.mass(|k| k.get(dim) == v);
                (v, x, n)
            })
            .collect();
        let dim_x: f64 = masses.iter().map(|m| m.1).sum();
        if masses.len() < 3 || dim_x <= 0.0 {
            continue;
        }
        masses.sort_by(|a, b| b.1.total_cmp(&a.1));
        let ((v1, x1, n1), (v2, x2, n2)) = (masses[0], masses[1]);
        let (s1, s2) = (x1 / dim_x, x2 / dim_x);
        let (r1, r2) = (x1 / n1.max(1.0), x2 / n2.max(1.0));
        let both_n = n1 + n2;
        if s1 >= ALONE
            || s2 < EACH
            || s1 + s2 < TOGETHER
            || r1.min(r2) < ALIKE_RATE * r1.max(r2)
            || both_n >= CO_MOVING * all_n
            || !candidate(&(dim, v1.to_owned()))
            || !candidate(&(dim, v2.to_owned()))
        {
            continue;
        }
        // The two on (nearly) the same requests as one value of another dimension
        // (the two instances a new adapter runs on): that value is the cause.
        let in_pair = |k: &SeriesKey| k.get(dim) == v1 || k.get(dim) == v2;
        let one_value = Dimension::ALL
            .into_iter()
            .filter(|d| *d != dim && *d != Dimension::Service)
            .any(|other| {
                cells.values_of(other, in_pair).into_iter().any(|v| {
                    let (_, _, with) = cells.sums(|k| k.get(other) == v);
                    let (_, _, both) = cells.sums(|k| k.get(other) == v && in_pair(k));
                    both >= CO_MOVING * both_n && both >= CO_MOVING * with
                })
            });
        if one_value {
            continue;
        }
        let (rest_x, rest_n) = (all_x - x1 - x2, all_n - both_n);
        let (recall, relative_risk, score) = attributable((x1 + x2, both_n), (rest_x, rest_n));
        let (others_x, others_n) = cells.mass(|k| {
            let v = k.get(dim);
            !v.is_empty() && v != v1 && v != v2
        });
        out.push(Either {
            values: [(dim, v1.to_owned()), (dim, v2.to_owned())],
            shares: [s1, s2],
            recall,
            relative_risk,
            score,
            rate_in: (x1 + x2) / both_n.max(1.0),
            rate_out: if others_n > 0.0 {
                others_x / others_n
            } else {
                0.0
            },
        });
    }
    out
}
