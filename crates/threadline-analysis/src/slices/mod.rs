//! Failing slices: a part of a scope's requests — one instance, a canary tag, an A/B
//! arm, a provider, an adapter, an image — that fails or is slow far more often than
//! it was, while the scope as a whole stays inside its noise. A canary on 10% of a
//! route failing 30% of its requests adds 3 points to the route, which a minute of a
//! few dozen requests cannot tell from chance; the canary's own requests can. So with
//! a canary twice as slow: the route's P99 moves inside its noise for minutes, while
//! nearly all of the canary's requests are slower than the route's 90th percentile,
//! where one in ten would be.
//!
//! A slice's bad requests (`Failure`) are its errors, or its requests slower than the
//! scope's baseline requests' 90th percentile. Each slice keeps its bad requests and
//! requests of its last `window` normal minutes. A slice is failing when its bad
//! requests are improbable under what is expected of it — the belief its own baseline
//! gives once it has `OWN_BASELINE` requests of history, starting from its siblings'
//! (the scope's other instances, arms …: `PeerShares`, as far as their shares agree,
//! so an instance's hour that holds more of the route's error bursts by chance does
//! not make its bar four times the route's), else, for a slice that showed
//! once the scope could be judged (a canary, a new image), the scope's when it showed
//! (its error share; one in ten slow), which its own unnoticed bad requests cannot
//! raise; a slice there from the start waits for its own history — at the detector's
//! α divided by the number of slices tested (the scope's minute tests them all; the
//! slices that hold all of its requests, its one model or image, are one test for
//! errors and none for slowness, which the scope's own latency detectors judge), and
//! its share is at least `MIN_SLICE_CHANGE` above that expectation, over
//!
//! - its last two minutes, each improbable on its own at √α (a burst of errors is one
//!   minute, so two such minutes in a row are a fault), or
//! - its last three minutes, each with a bad request: weaker minutes that add up, or
//! - its last 4 to `SCAN_MINUTES` minutes, and a new slice's minutes since it
//!   appeared, from the first with more than expected, three of them with a bad
//!   request and still improbable at √α without the most improbable minute, at α
//!   shared by these windows: a weak fault's few bad requests a minute. A minute
//!   joins the slice's history only once no window can hold it, so they add up
//!   before they raise the bar. Errors only: slow requests are counted against the
//!   scope's quantile as it is now, which moves as its pool turns over.
//!
//! The scope's error-rate (slow: P99 latency) detector then opens an anomaly with the
//! slice's first minute as onset.

use std::collections::{BTreeMap, HashMap, VecDeque};

use sketches_ddsketch::DDSketch;

use crate::anomaly::DetectorConfig;
use crate::rollup::{Dimension, RollupCell, SeriesKey};
use crate::share::{PeerShares, ShareBelief};

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

/// Minutes a slice's minute waits before it joins its history: the longest window a
/// weak fault's bad requests add up over before they would raise the bar.
pub(crate) const SCAN_MINUTES: usize = 10;

/// Requests of history after which a slice is judged against its own share.
const OWN_BASELINE: u64 = 300;

/// A failing slice's share must exceed what is expected of it by this much.
const MIN_SLICE_CHANGE: f64 = 0.1;

/// The scope's baseline quantile a slow request is slower than.
pub(crate) const SLOW_QUANTILE: f64 = 0.9;

/// What makes a slice's request bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Failure {
    /// It failed.
    Errors,
    /// It took longer than the scope's baseline requests' `SLOW_QUANTILE`.
    Slow,
}

/// Bad requests (errors, or slow ones) and requests of one slice in one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SliceMinute {
    pub(crate) minute: i64,
    pub(crate) bad: u64,
    pub(crate) requests: u64,
}

/// A slice found failing: which, and its failing window.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FailingSlice {
    pub(crate) dimension: Dimension,
    pub(crate) value: String,
    pub(crate) window: FailingWindow,
}

/// Minutes of a slice that hold improbably many bad requests: which, how far off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FailingWindow {
    pub(crate) onset_minute: i64,
    pub(crate) detected_minute: i64,
    /// The share of bad requests expected of the slice, and the share it had.
    pub(crate) expected: f64,
    pub(crate) observed: f64,
    /// Binomial standard deviations the share is off by.
    pub(crate) score: f64,
}

#[derive(Default)]
struct SliceState {
    /// For a slice that first showed once the scope could be judged (a canary, a new
    /// image): the scope's belief then, which it is held to until it has a history of
    /// its own — its own bad requests, while they go unnoticed, must not raise the
    /// scope's share it is held to. A slice there from the start (a provider slower by
    /// nature) has none and waits for its own history.
    scope_before: Option<ShareBelief>,
    /// Minutes judged normal, which no window can hold any more.
    history: VecDeque<SliceMinute>,
    /// The last `SCAN_MINUTES` minutes judged, oldest first, each with whether a
    /// failing window held it. They join the history once no window can hold them,
    /// unless one did: a fault's first minutes, judged before it showed, must not
    /// raise the share its next minutes are held to.
    recent: VecDeque<(SliceMinute, bool)>,
    /// The last minute the slice had requests in.
    seen: i64,
}

impl SliceState {
    /// Bad requests and requests of its history.
    fn history_counts(&self) -> (u64, u64) {
        self.history
            .iter()
            .fold((0, 0), |(b, n), m| (b + m.bad, n + m.requests))
    }

    /// The recent minutes no failing window held, from minute `from` on, then `now`.
    fn since(&self, from: i64, now: SliceMinute) -> Vec<SliceMinute> {
        self.recent
            .iter()
            .filter(|(m, held)| !held && m.minute >= from)
            .map(|(m, _)| *m)
            .chain([now])
            .collect()
    }

    /// Every minute it kept, up to `now`: for a new slice held to the scope, its
    /// minutes since it appeared.
    fn all_since(&self, now: SliceMinute) -> Vec<SliceMinute> {
        self.history
            .iter()
            .copied()
            .chain(self.since(i64::MIN, now))
            .collect()
    }

    /// Takes `now` in as the last minute judged; a failing window from minute
    /// `held_from` on holds it and the recent minutes it covers.
    fn push(&mut self, window: usize, now: SliceMinute, held_from: Option<i64>) {
        if let Some(from) = held_from {
            for (m, held) in &mut self.recent {
                *held |= m.minute >= from;
            }
        }
        self.recent.push_back((now, held_from.is_some()));
        while self.recent.len() > SCAN_MINUTES {
            if let Some((oldest, false)) = self.recent.pop_front() {
                self.history.push_back(oldest);
                while self.history.len() > window {
                    self.history.pop_front();
                }
            }
        }
    }

    /// The failing window ending at `now`, if any: its last two minutes, each out at
    /// √α; its last three, each with a bad request; else the least probable of its
    /// last 4 to `SCAN_MINUTES` minutes and (a new slice `held_to_scope`, with no
    /// history of its own yet) its minutes since it appeared, adding up
    /// (`Spread::AddingUp`) at α shared by those longer windows (for errors only).
    fn failing(
        &self,
        failure: Failure,
        now: SliceMinute,
        (expected, held_to_scope): (&ShareBelief, bool),
        alpha: f64,
    ) -> Option<(f64, FailingWindow)> {
        let consecutive = |k: i64| {
            let minutes = self.since(now.minute - k + 1, now);
            (minutes.len() as i64 == k).then_some(minutes)
        };
        let recent = consecutive(2)
            .and_then(|m| failing(&m, expected, alpha, Spread::EachOut))
            .or_else(|| consecutive(3).and_then(|m| failing(&m, expected, alpha, Spread::Each)));
        // Slow requests are counted against the scope's baseline quantile as it is
        // now, which moves as its pool turns over: only a short window compares like
        // with like.
        if recent.is_some() || failure == Failure::Slow {
            return recent;
        }
        let windows = (SCAN_MINUTES - 2) as f64;
        (4..=SCAN_MINUTES as i64)
            .map(|k| self.since(now.minute - k + 1, now))
            .chain(held_to_scope.then(|| self.all_since(now)))
            .filter(|m| m.len() > 3)
            .filter_map(|m| failing(&m, expected, alpha / windows, Spread::AddingUp))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }
}

/// The slices of every scope, minute after minute.
#[derive(Default)]
pub(crate) struct Slices {
    state: HashMap<(SeriesKey, Dimension, String, Failure), SliceState>,
}

/// One slice's requests in a minute.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct SliceCounts {
    requests: u64,
    errors: u64,
    slow: u64,
}

/// A scope's minute, split by slice.
#[derive(Debug, Default)]
pub(crate) struct SplitMinute {
    minute: i64,
    /// The scope's requests in the minute.
    requests: u64,
    /// Whether slow requests were counted (the scope's baseline quantile was known).
    timed: bool,
    slices: BTreeMap<(Dimension, String), SliceCounts>,
}

impl SplitMinute {
    /// The slices judged for `failure`, with their minute: every slice for errors,
    /// those that hold part of the scope's requests for slowness.
    fn judged(
        &self,
        failure: Failure,
    ) -> impl Iterator<Item = (&(Dimension, String), SliceMinute)> {
        let whole = self.requests;
        self.slices
            .iter()
            .filter(move |(_, c)| failure == Failure::Errors || c.requests < whole)
            .map(move |(slice, c)| {
                let bad = match failure {
                    Failure::Errors => c.errors,
                    Failure::Slow => c.slow,
                };
                (
                    slice,
                    SliceMinute {
                        minute: self.minute,
                        bad,
                        requests: c.requests,
                    },
                )
            })
    }

    /// Tests the minute makes for `failure`: one per slice judged, the slices that
    /// hold every request of the scope (its one model, image …) being one and the same
    /// test.
    fn tests(&self, failure: Failure) -> usize {
        let partial = self
            .slices
            .values()
            .filter(|c| c.requests < self.requests)
            .count();
        let whole = partial < self.slices.len() && failure == Failure::Errors;
        partial + usize::from(whole)
    }
}

/// Values in `sketch` above `x`, to the sketch's relative accuracy: the k-th smallest
/// of n is its quantile at k / (n − 1), found by bisection.
fn count_above(sketch: &DDSketch, x: f64) -> u64 {
    let n = sketch.count() as u64;
    if n == 0 {
        return 0;
    }
    let kth = |k: u64| {
        let q = if n == 1 {
            0.0
        } else {
            ((k as f64 + 0.5) / (n - 1) as f64).min(1.0)
        };
        sketch.quantile(q).ok().flatten().unwrap_or(f64::NAN)
    };
    // The first k whose value is above x; n when none is.
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if kth(mid) > x {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    n - lo
}

/// Splits a scope's minute by slice, counting each slice's requests slower than
/// `slow_above` (ms) when it is known.
pub(crate) fn split<'a>(
    cells: impl IntoIterator<Item = (&'a SeriesKey, &'a RollupCell)>,
    minute: i64,
    slow_above: Option<f64>,
) -> SplitMinute {
    let mut out = SplitMinute {
        minute,
        timed: slow_above.is_some(),
        ..SplitMinute::default()
    };
    for (key, cell) in cells {
        out.requests += cell.requests;
        let slow = slow_above.map_or(0, |x| count_above(&cell.latency_ms, x));
        for dim in SLICED {
            let value = key.get(dim);
            if value.is_empty() {
                continue;
            }
            let slice = out.slices.entry((dim, value.to_owned())).or_default();
            slice.requests += cell.requests;
            slice.errors += cell.errors;
            slice.slow += slow;
        }
    }
    out
}

/// Which of a slice's minutes must hold bad requests for them to add up: a fault
/// persists, a burst of errors is a minute.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Spread {
    /// Each minute, improbably many on its own at √α (two such independent minutes:
    /// α together), which lets two minutes suffice.
    EachOut,
    /// Each minute one or more.
    Each,
    /// Three of the minutes or more, from the first with more than expected (the
    /// onset), and the minutes but the most improbable one still improbable together
    /// at √α: a burst, or a fault's first strong minute, is one minute; these windows
    /// are for faults whose minutes add up.
    AddingUp,
}

/// Whether minutes of a slice hold improbably many bad requests under what is
/// `expected` of it: spread over its minutes as `spread` asks, improbable together at
/// `alpha`, and their share at least `MIN_SLICE_CHANGE` above the expected share.
/// Returns how probable they are, and the window.
fn failing(
    minutes: &[SliceMinute],
    expected: &ShareBelief,
    alpha: f64,
    spread: Spread,
) -> Option<(f64, FailingWindow)> {
    let p0 = expected.share();
    let minutes = match spread {
        Spread::AddingUp => {
            let onset = minutes
                .iter()
                .position(|m| m.bad as f64 > p0 * m.requests as f64)?;
            &minutes[onset..]
        }
        _ => minutes,
    };
    let (first, last) = (minutes.first()?, minutes.last()?);
    let total = |minutes: &mut dyn Iterator<Item = &SliceMinute>| {
        minutes.fold((0, 0), |(b, n), m| (b + m.bad, n + m.requests))
    };
    let spread_enough = match spread {
        Spread::EachOut => minutes
            .iter()
            .all(|m| m.bad > 0 && expected.surprise(m.bad, m.requests) < alpha.sqrt()),
        Spread::Each => minutes.iter().all(|m| m.bad > 0),
        Spread::AddingUp => {
            minutes.iter().filter(|m| m.bad > 0).count() >= 3 && {
                let worst = minutes
                    .iter()
                    .map(|m| (expected.surprise(m.bad, m.requests), m.minute))
                    .min_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(_, minute)| minute);
                let (rest_bad, rest_requests) =
                    total(&mut minutes.iter().filter(|m| Some(m.minute) != worst));
                expected.surprise(rest_bad, rest_requests) < alpha.sqrt()
            }
        }
    };
    if !spread_enough {
        return None;
    }
    let (bad, requests) = total(&mut minutes.iter());
    let share = bad as f64 / requests.max(1) as f64;
    let surprise = expected.surprise(bad, requests);
    (share - p0 >= MIN_SLICE_CHANGE && surprise < alpha).then(|| {
        let sigma = (p0 * (1.0 - p0) / requests as f64).sqrt().max(1e-9);
        (
            surprise,
            FailingWindow {
                onset_minute: first.minute,
                detected_minute: last.minute,
                expected: p0,
                observed: share,
                score: (share - p0) / sigma,
            },
        )
    })
}

impl Slices {
    /// Forgets the slices that had no requests since minute `since`: instances and
    /// canaries come and go, and one gone that long is new if it comes back.
    pub(crate) fn forget_unseen(&mut self, since: i64) {
        self.state.retain(|_, s| s.seen >= since);
    }

    /// Judges one minute of a scope's slices for `failure` against `scope_share` (the
    /// belief about the share of the scope's requests that are bad that way, `None`
    /// while its baseline is short). Returns the most surprising failing slice, if any;
    /// the other slices' minutes go into their baselines once no window can hold them.
    pub(crate) fn judge(
        &mut self,
        cfg: &DetectorConfig,
        scope: &SeriesKey,
        minute: &SplitMinute,
        failure: Failure,
        scope_share: Option<ShareBelief>,
    ) -> Option<FailingSlice> {
        let tests = minute.tests(failure).max(1) as f64;
        let alpha = cfg.alpha() / tests;
        // A dimension's slices (a route's instances, its A/B arms) lend their histories
        // to one another: an instance's own hour of a few hundred requests, holding
        // its share of the route's error bursts by chance, is drawn towards its
        // siblings' share as far as they agree (`PeerShares`).
        let judged: Vec<_> = minute
            .judged(failure)
            .map(|(slice, now)| {
                let key = (scope.clone(), slice.0, slice.1.clone(), failure);
                let history = self.state.get(&key).map(SliceState::history_counts);
                (slice, key, now, history)
            })
            .collect();
        let mut siblings: HashMap<Dimension, PeerShares> = HashMap::new();
        for ((dim, _), _, _, history) in &judged {
            if let Some((bad, requests)) = history {
                siblings
                    .entry(*dim)
                    .or_default()
                    .add(*bad as f64, *requests as f64);
            }
        }
        let priors: HashMap<Dimension, ShareBelief> = siblings
            .into_iter()
            .map(|(dim, peers)| (dim, peers.prior()))
            .collect();
        let mut worst: Option<(f64, FailingSlice)> = None;
        for ((dimension, value), key, now, history) in judged {
            let state = self.state.entry(key).or_insert_with(|| SliceState {
                scope_before: scope_share,
                ..SliceState::default()
            });
            state.seen = minute.minute;
            if failure == Failure::Slow && !minute.timed {
                // Seen, not counted: no quantile to be slower than yet.
                continue;
            }
            // Its own share, from its siblings', once its history holds
            // `OWN_BASELINE` requests.
            let own = history
                .filter(|(_, requests)| *requests >= OWN_BASELINE)
                .map(|(bad, requests)| {
                    let prior = priors.get(dimension).copied();
                    prior
                        .unwrap_or(ShareBelief::UNINFORMED)
                        .observe(bad as f64, requests as f64)
                });
            let found = own.or(state.scope_before).and_then(|expected| {
                state.failing(failure, now, (&expected, own.is_none()), alpha)
            });
            state.push(cfg.window, now, found.map(|(_, w)| w.onset_minute));
            if let Some((surprise, window)) = found {
                if worst.as_ref().is_none_or(|(s, _)| surprise < *s) {
                    let found = FailingSlice {
                        dimension: *dimension,
                        value: value.clone(),
                        window,
                    };
                    worst = Some((surprise, found));
                }
            }
        }
        worst.map(|(_, found)| found)
    }
}

#[cfg(test)]
mod tests;
