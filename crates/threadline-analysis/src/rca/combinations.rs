//! Causes that are a combination of values — an adapter that fails only on one image,
//! a bitrate that stalls only over peer-to-peer: a leading value is narrowed by one
//! value of another dimension at a time while the narrower slice is the likelier
//! cluster of the excess bad requests (HotSpot's and Squeeze's attribute
//! combinations, chosen by the expectation-based Poisson scan statistic: a value
//! whose requests went bad alike with or without the second value stays whole, as
//! narrowing it would leave bad requests unexplained; one whose bad requests all sit
//! on the second value is narrowed, as the whole value dilutes them).

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

/// Log-likelihood a narrower slice must gain over the wider to be taken: the scan
/// tries many values, and a finer slice fits noise a little better by chance.
const NARROWING_GAIN: f64 = 3.0;

/// The expectation-based Poisson scan statistic of a slice with `bad` bad requests
/// where its references expected `expected`: the log-likelihood ratio of its rate
/// raised against as expected (0 where it is not raised).
fn scan_llr(bad: f64, expected: f64) -> f64 {
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

impl Combination {
    /// `adapter=2000 & gray_tag=1`, in dimension order.
    pub(super) fn subject(&self) -> String {
        let mut values = self.values.clone();
        values.sort();
        values
            .iter()
            .map(|(d, v)| format!("{}={v}", d.as_str()))
            .collect::<Vec<_>>()
            .join(" & ")
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
                let seen: BTreeSet<&str> = cells
                    .keys
                    .iter()
                    .filter(|k| holds(&values, k))
                    .map(|k| k.get(dim))
                    .filter(|v| !v.is_empty())
                    .collect();
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
            if !alone
                && !out
                    .iter()
                    .any(|c: &Combination| c.subject() == found.subject())
            {
                out.push(found);
            }
        }
    }
    out
}
