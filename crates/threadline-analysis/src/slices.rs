//! Failing slices: a part of a scope's requests — one instance, a canary tag, an A/B
//! arm, a provider, an adapter, an image — that fails far more often than it did,
//! while the scope's error rate as a whole stays inside its noise. A canary on 10% of
//! a route failing 30% of its requests adds 3 points to the route, which a minute of a
//! few dozen requests cannot tell from chance; the canary's own requests can.
//!
//! Each slice keeps the errors and requests of its last `window` normal minutes. A
//! slice is failing when its errors are improbable under what is expected of it — the
//! belief its own baseline gives once it has `OWN_BASELINE` requests of history, else
//! the scope's (`share`) — at the detector's α divided by the number of slices tested (the
//! scope's minute tests them all; the slices that hold all of its requests, its one
//! model or image, are one test), and its share is at least `MIN_SLICE_CHANGE` above
//! that expectation, over either
//!
//! - its last two minutes, each improbable on its own at √α (a burst of errors is one
//!   minute, so two such minutes in a row are a fault), or
//! - its last three minutes, each with an error: weaker minutes that add up.
//!
//! The scope's error-rate detector then opens an anomaly with the slice's first minute
//! as onset.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::anomaly::{AnomalyOnset, DetectorConfig};
use crate::metric::Metric;
use crate::rollup::{Dimension, RollupCell, SeriesKey};
use crate::share::ShareBelief;

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
    /// Minutes judged normal, which no window can hold any more.
    history: VecDeque<SliceMinute>,
    /// The last two minutes judged, oldest first, each with whether a failing window
    /// held it. They join the history once no window can hold them, unless one did:
    /// a fault's first minutes, judged before it showed, must not raise the share its
    /// next minutes are held to.
    last: [Option<(SliceMinute, bool)>; 2],
}

impl SliceState {
    /// The belief its own history gives, once it holds `OWN_BASELINE` requests.
    fn share(&self) -> Option<ShareBelief> {
        let (errors, requests) = self
            .history
            .iter()
            .fold((0, 0), |(e, n), m| (e + m.errors, n + m.requests));
        (requests >= OWN_BASELINE)
            .then(|| ShareBelief::UNINFORMED.observe(errors as f64, requests as f64))
    }

    /// The minute before `now` and the one before that, if the slice had requests in
    /// them.
    fn before(&self, now: &SliceMinute) -> [Option<SliceMinute>; 2] {
        let at = |i: usize, back: i64| {
            self.last[i]
                .map(|(m, _)| m)
                .filter(|m| m.minute == now.minute - back)
        };
        [at(0, 2), at(1, 1)]
    }

    /// Takes `now` in as the last minute judged, `failing` if a failing window held it
    /// (and so the minutes before it).
    fn push(&mut self, window: usize, now: SliceMinute, failing: bool) {
        if failing {
            for (_, held) in self.last.iter_mut().flatten() {
                *held = true;
            }
        }
        if let Some((oldest, false)) = self.last[0] {
            self.history.push_back(oldest);
            while self.history.len() > window {
                self.history.pop_front();
            }
        }
        self.last = [self.last[1], Some((now, failing))];
    }
}

/// The slices of every scope, minute after minute.
#[derive(Default)]
pub(crate) struct Slices {
    state: HashMap<(SeriesKey, Dimension, String), SliceState>,
}

/// A scope's minute, split by slice.
#[derive(Default)]
pub(crate) struct SplitMinute {
    /// The scope's requests in the minute.
    requests: u64,
    slices: BTreeMap<(Dimension, String), SliceMinute>,
}

impl SplitMinute {
    /// Tests the minute makes: one per slice, the slices that hold every request of the
    /// scope (its one model, image …) being one and the same test.
    fn tests(&self) -> usize {
        let partial = self
            .slices
            .values()
            .filter(|m| m.requests < self.requests)
            .count();
        partial + usize::from(partial < self.slices.len())
    }
}

/// Splits a scope's minute by slice.
pub(crate) fn split<'a>(
    cells: impl IntoIterator<Item = (&'a SeriesKey, &'a RollupCell)>,
    minute: i64,
) -> SplitMinute {
    let mut out = SplitMinute::default();
    for (key, cell) in cells {
        out.requests += cell.requests;
        for dim in SLICED {
            let value = key.get(dim);
            if value.is_empty() {
                continue;
            }
            let slice = out
                .slices
                .entry((dim, value.to_owned()))
                .or_insert(SliceMinute {
                    minute,
                    ..SliceMinute::default()
                });
            slice.errors += cell.errors;
            slice.requests += cell.requests;
        }
    }
    out
}

/// Whether consecutive minutes of a slice hold improbably many errors under what is
/// `expected` of it: each minute has an error (a fault persists; a burst of errors is a
/// minute), their errors together are improbable at `alpha`, and their share is at
/// least `MIN_SLICE_CHANGE` above the expected share. With `each_out`, every minute
/// must also be improbable on its own at √`alpha` (two such independent minutes:
/// `alpha` together), which lets two minutes suffice. Returns (surprise, anomaly).
fn failing(
    minutes: &[SliceMinute],
    expected: &ShareBelief,
    alpha: f64,
    each_out: bool,
) -> Option<(f64, AnomalyOnset)> {
    let (first, last) = (minutes.first()?, minutes.last()?);
    let out = |m: &SliceMinute| {
        m.errors > 0 && (!each_out || expected.surprise(m.errors, m.requests) < alpha.sqrt())
    };
    if !minutes.iter().all(out) {
        return None;
    }
    let errors = minutes.iter().map(|m| m.errors).sum::<u64>();
    let requests = minutes.iter().map(|m| m.requests).sum::<u64>();
    let share = errors as f64 / requests.max(1) as f64;
    let p0 = expected.share();
    let surprise = expected.surprise(errors, requests);
    (share - p0 >= MIN_SLICE_CHANGE && surprise < alpha).then(|| {
        let sigma = (p0 * (1.0 - p0) / requests as f64).sqrt().max(1e-9);
        (
            surprise,
            AnomalyOnset {
                metric: Metric::ErrorRate,
                onset_minute: first.minute,
                detected_minute: last.minute,
                baseline: p0,
                observed: share,
                score: (share - p0) / sigma,
            },
        )
    })
}

impl Slices {
    /// Judges one minute of a scope's slices against `scope_share` (the belief about
    /// the scope's error share, `None` while its baseline is short). Returns the anomaly
    /// of the most surprising failing slice, if any; the other slices' minutes go into
    /// their baselines once no window can hold them.
    pub(crate) fn judge(
        &mut self,
        cfg: &DetectorConfig,
        scope: &SeriesKey,
        minute: SplitMinute,
        scope_share: Option<ShareBelief>,
    ) -> Option<AnomalyOnset> {
        let alpha = crate::tails::normal_tail(cfg.sensitivity) / minute.tests().max(1) as f64;
        let mut worst: Option<(f64, AnomalyOnset)> = None;
        for ((dim, value), now) in minute.slices {
            let state = self.state.entry((scope.clone(), dim, value)).or_default();
            let expected = state.share().or(scope_share);
            let found = expected.and_then(|expected| {
                // Two minutes each improbable on their own open at once; three minutes
                // each with an error open on their errors together.
                match state.before(&now) {
                    [a, Some(b)] => failing(&[b, now], &expected, alpha, true)
                        .or_else(|| a.and_then(|a| failing(&[a, b, now], &expected, alpha, false))),
                    _ => None,
                }
            });
            state.push(cfg.window, now, found.is_some());
            if let Some((surprise, onset)) = found {
                if worst.as_ref().is_none_or(|(s, _)| surprise < *s) {
                    worst = Some((surprise, onset));
                }
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

    /// The belief a scope's hour of 3 000 requests at `share` gives.
    fn scope_share(share: f64) -> Option<ShareBelief> {
        Some(ShareBelief::UNINFORMED.observe(share * 3000.0, 3000.0))
    }

    /// A scope's minute `m`; its requests are those of the first dimension's slices.
    fn minute(m: i64, slices: &[(Dimension, &str, u64, u64)]) -> SplitMinute {
        let requests = slices
            .iter()
            .filter(|s| s.0 == slices[0].0)
            .map(|s| s.3)
            .sum();
        let slices = slices
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
            .collect();
        SplitMinute { requests, slices }
    }

    /// A canary on 12% of 45 requests a minute failing a third of them is found in
    /// its second minute; the route's own share (+4 points) is inside its noise.
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
                scope_share(0.003),
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
                scope_share(0.003),
            ));
        }
        let found = found.expect("the canary");
        assert_eq!((found.onset_minute, found.detected_minute), (60, 61));
        assert_eq!(found.metric, Metric::ErrorRate);
    }

    /// A canary failing one of its 6 requests a minute has no minute improbable on its
    /// own; its three minutes together are.
    #[test]
    fn a_weaker_canary_is_found_on_three_minutes_together() {
        let cfg = DetectorConfig::default();
        let mut slices = Slices::default();
        let mut found = None;
        for m in 60..64 {
            let got = slices.judge(
                &cfg,
                &scope(),
                minute(
                    m,
                    &[
                        (Dimension::Instance, "i-1", 0, 22),
                        (Dimension::Instance, "i-2", 1, 23),
                        (Dimension::GrayTag, "canary", 1, 6),
                    ],
                ),
                scope_share(0.001),
            );
            found = found.or(got.map(|f| (f.onset_minute, f.detected_minute)));
        }
        assert_eq!(found, Some((60, 62)));
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
                scope_share(0.04),
            );
            assert_eq!(got, None, "minute {m}");
        }
    }
}
