//! Failing slices: a part of a scope's requests — one instance, a canary tag, an A/B
//! arm, a provider, an adapter, an image — that fails far more often than it did,
//! while the scope's error rate as a whole stays inside its noise. A canary on 10% of
//! a route failing 30% of its requests adds 3 points to the route, which a minute of a
//! few dozen requests cannot tell from chance; the canary's own requests can.
//!
//! Each slice keeps the errors and requests of its last `window` normal minutes. A
//! slice is failing when, over its last three minutes, each with an error (a fault
//! persists; a burst of errors is a minute or two), its errors are improbable under
//! Poisson at its expected share — its own baseline share once it
//! has `OWN_BASELINE` requests of history, else the scope's — at the detector's α
//! divided by the number of slices tested (the scope's minute tests them all), and its
//! share is at least `MIN_SLICE_CHANGE` above that expectation. The scope's error-rate
//! detector then opens an anomaly with the slice's first minute as onset.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::anomaly::{AnomalyOnset, DetectorConfig};
use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};

/// The dimensions whose values are slices of a scope's requests.
const SLICED: [Dimension; 8] = [
    Dimension::Instance,
    Dimension::GrayTag,
    Dimension::AbGroup,
    Dimension::Provider,
    Dimension::Adapter,
    Dimension::Image,
    Dimension::PromptVersion,
    Dimension::Model,
];

/// Requests of history after which a slice is judged against its own share.
const OWN_BASELINE: u64 = 300;

/// A failing slice's share must exceed what is expected of it by this much.
const MIN_SLICE_CHANGE: f64 = 0.1;

/// Errors and requests of one slice in one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SliceMinute {
    pub(crate) minute: i64,
    pub(crate) errors: u64,
    pub(crate) requests: u64,
}

#[derive(Default)]
struct SliceState {
    history: VecDeque<SliceMinute>,
    /// The last two minutes judged, oldest first.
    last: [Option<SliceMinute>; 2],
}

impl SliceState {
    fn share(&self) -> Option<f64> {
        let (errors, requests) = self
            .history
            .iter()
            .fold((0, 0), |(e, n), m| (e + m.errors, n + m.requests));
        (requests >= OWN_BASELINE).then(|| (errors as f64).max(0.5) / requests as f64)
    }

    fn remember(&mut self, window: usize, minute: SliceMinute) {
        self.history.push_back(minute);
        while self.history.len() > window {
            self.history.pop_front();
        }
    }
}

/// The slices of every scope, minute after minute.
#[derive(Default)]
pub(crate) struct Slices {
    state: HashMap<(SeriesKey, Dimension, String), SliceState>,
}

/// A scope's minute, split by slice.
pub(crate) fn split<'a>(
    cells: impl IntoIterator<Item = (&'a SeriesKey, &'a RollupCell)>,
    minute: i64,
) -> BTreeMap<(Dimension, String), SliceMinute> {
    let mut out: BTreeMap<(Dimension, String), SliceMinute> = BTreeMap::new();
    for (key, cell) in cells {
        for dim in SLICED {
            let value = key.get(dim);
            if value.is_empty() {
                continue;
            }
            let slice = out.entry((dim, value.to_owned())).or_insert(SliceMinute {
                minute,
                ..SliceMinute::default()
            });
            slice.errors += cell.errors;
            slice.requests += cell.requests;
        }
    }
    out
}

impl Slices {
    /// Judges one minute of a scope's slices against `scope_share` (the scope's
    /// baseline error share, `None` while its baseline is short). Returns the anomaly
    /// of the most surprising failing slice, if any; the other slices' minutes go into
    /// their baselines.
    pub(crate) fn judge(
        &mut self,
        cfg: &DetectorConfig,
        scope: &SeriesKey,
        minute: BTreeMap<(Dimension, String), SliceMinute>,
        scope_share: Option<f64>,
    ) -> Option<AnomalyOnset> {
        let alpha = crate::tails::normal_tail(cfg.sensitivity) / minute.len().max(1) as f64;
        let mut worst: Option<(f64, AnomalyOnset)> = None;
        for ((dim, value), now) in minute {
            let state = self.state.entry((scope.clone(), dim, value)).or_default();
            // The two minutes before this one, if the slice had requests in both.
            let before = match state.last {
                [Some(a), Some(b)] if a.minute == now.minute - 2 && b.minute == now.minute - 1 => {
                    Some([a, b])
                }
                _ => None,
            };
            state.last = [state.last[1], Some(now)];
            let expected = state.share().or(scope_share);
            let found = match (before, expected) {
                (Some(before), Some(p0)) if before.iter().chain([&now]).all(|m| m.errors > 0) => {
                    let errors = before.iter().map(|m| m.errors).sum::<u64>() + now.errors;
                    let requests = before.iter().map(|m| m.requests).sum::<u64>() + now.requests;
                    let share = errors as f64 / requests.max(1) as f64;
                    let surprise = crate::tails::poisson_tail(errors, p0 * requests as f64);
                    (share - p0 >= MIN_SLICE_CHANGE && surprise < alpha).then(|| {
                        let sigma = (p0 * (1.0 - p0) / requests as f64).sqrt().max(1e-9);
                        (
                            surprise,
                            AnomalyOnset {
                                metric: Metric::ErrorRate,
                                onset_minute: before[0].minute,
                                detected_minute: now.minute,
                                baseline: p0,
                                observed: share,
                                score: (share - p0) / sigma,
                            },
                        )
                    })
                }
                _ => None,
            };
            match found {
                Some((surprise, onset)) => {
                    if worst.as_ref().is_none_or(|(s, _)| surprise < *s) {
                        worst = Some((surprise, onset));
                    }
                }
                // A failing slice's minutes stay out of its baseline; the others' go in.
                None => state.remember(cfg.window, now),
            }
        }
        worst.map(|(_, onset)| onset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::Level;

    fn scope() -> SeriesKey {
        SeriesKey::at(Level::Request)
            .with(Dimension::Service, "gw")
            .with(Dimension::Route, "/v1/agent")
    }

    fn minute(
        m: i64,
        slices: &[(Dimension, &str, u64, u64)],
    ) -> BTreeMap<(Dimension, String), SliceMinute> {
        slices
            .iter()
            .map(|(d, v, errors, requests)| {
                (
                    (*d, (*v).to_owned()),
                    SliceMinute {
                        minute: m,
                        errors: *errors,
                        requests: *requests,
                    },
                )
            })
            .collect()
    }

    /// A canary on 12% of 45 requests a minute failing a third of them is found in
    /// its third minute; the route's own share (+4 points) is inside its noise.
    #[test]
    fn a_new_canary_failing_a_third_of_its_requests_is_found_in_two_minutes() {
        let cfg = DetectorConfig::default();
        let mut slices = Slices::default();
        for m in 0..60 {
            let errs = u64::from(m % 20 == 0);
            let got = slices.judge(
                &cfg,
                &scope(),
                minute(
                    m,
                    &[
                        (Dimension::Instance, "i-1", errs, 22),
                        (Dimension::Instance, "i-2", 0, 23),
                    ],
                ),
                Some(0.003),
            );
            assert_eq!(got, None, "minute {m}");
        }
        let mut found = None;
        for m in 60..64 {
            found = found.or(slices.judge(
                &cfg,
                &scope(),
                minute(
                    m,
                    &[
                        (Dimension::Instance, "i-1", 1, 22),
                        (Dimension::Instance, "i-2", 1, 23),
                        (Dimension::GrayTag, "canary", 2, 6),
                    ],
                ),
                Some(0.003),
            ));
        }
        let found = found.expect("the canary");
        assert_eq!((found.onset_minute, found.detected_minute), (60, 62));
        assert_eq!(found.metric, Metric::ErrorRate);
    }

    /// A slice that has always failed at its own rate is judged by its own share, and a
    /// single-minute burst over every slice is no failing slice.
    #[test]
    fn a_slice_is_judged_by_its_own_history_and_a_burst_minute_is_no_failure() {
        let cfg = DetectorConfig::default();
        let mut slices = Slices::default();
        for m in 0..120 {
            // Provider b fails 8% of its 25 requests a minute, always; minute 70 is a
            // burst of errors on every slice.
            let burst = u64::from(m == 70) * 3;
            let b = 2 + u64::from(m % 3 == 0) + burst;
            let got = slices.judge(
                &cfg,
                &scope(),
                minute(
                    m,
                    &[
                        (Dimension::Provider, "a", burst, 25),
                        (Dimension::Provider, "b", b, 25),
                    ],
                ),
                Some(0.04),
            );
            assert_eq!(got, None, "minute {m}");
        }
    }
}
