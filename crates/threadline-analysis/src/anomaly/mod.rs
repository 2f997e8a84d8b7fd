//! Streaming anomaly detection per series and metric (their grouping into incidents:
//! `incident`).
//!
//! Each detector sees one value per closed minute. Its baseline is the median and the
//! MAD of the last `window` normal minutes (anomalous minutes never enter it, so an
//! ongoing incident does not become the new normal). A minute is anomalous when it
//! deviates in the metric's bad direction by more than `sensitivity` robust standard
//! deviations (for a spread measured from few baseline minutes, Student's t at the
//! same tail; for a latency quantile, a spread no less than its sampling noise among
//! the baseline's requests, `quantile_noise`) *and* by a minimum practical change
//! (20% relative, 2 points for ratios).
//! An anomaly opens after `confirm` anomalous minutes in a row (or one minute three
//! times as far out, by deviations and by the practical change) with the first of them
//! as onset, and closes after `recover` normal ones.
//! Minutes resting on fewer than `min_count` requests are skipped.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::metric::Metric;
use crate::quantile_noise::PooledRequests;
use crate::share::ShareBelief;
use sketches_ddsketch::DDSketch;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectorConfig {
    /// Normal minutes the baseline keeps.
    pub window: usize,
    /// Normal minutes needed before anything can be called anomalous.
    pub min_baseline: usize,
    /// Requests (or observations) a minute needs to be judged.
    pub min_count: u64,
    /// Robust standard deviations a minute must be off by.
    pub sensitivity: f64,
    /// Minimum relative change for non-ratio metrics (0.2 = 20%).
    pub min_relative_change: f64,
    /// Minimum absolute change for ratio metrics (0.02 = 2 points).
    pub min_ratio_change: f64,
    pub confirm: usize,
    pub recover: usize,
    /// Anomalies of one scope whose onsets are this many minutes apart or less form one
    /// incident.
    pub group_minutes: i64,
}

impl DetectorConfig {
    /// α: how often a test calls an ordinary minute (or minutes) out — the normal
    /// tail beyond `sensitivity` standard deviations.
    pub fn alpha(&self) -> f64 {
        crate::tails::normal_tail(self.sensitivity)
    }

    /// What is wrong with these settings, each named as `prefix` + the setting's name
    /// (`detector.` in the config file, `--` on a command line); empty when nothing is.
    pub fn problems(&self, prefix: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if !(self.sensitivity.is_finite() && self.sensitivity > 0.0) {
            problems.push(format!(
                "{prefix}sensitivity {} must be a positive number of robust standard deviations",
                self.sensitivity
            ));
        }
        if self.window < self.min_baseline || self.min_baseline == 0 {
            problems.push(format!(
                "{prefix}window ({}) must be at least {prefix}min_baseline ({}), which must be positive",
                self.window, self.min_baseline
            ));
        }
        problems
    }
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            window: 60,
            min_baseline: 10,
            min_count: 20,
            sensitivity: 4.0,
            min_relative_change: 0.2,
            min_ratio_change: 0.02,
            confirm: 2,
            recover: 3,
            group_minutes: 5,
        }
    }
}

/// One closed minute of one series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinuteValue {
    pub minute: i64,
    pub value: f64,
    pub count: u64,
}

/// An anomaly that opened: when, against what baseline, how far out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnomalyOnset {
    pub metric: Metric,
    pub onset_minute: i64,
    /// The minute whose close confirmed it.
    pub detected_minute: i64,
    pub baseline: f64,
    pub observed: f64,
    /// Robust standard deviations off the baseline (positive = bad direction).
    pub score: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DetectorEvent {
    Opened(AnomalyOnset),
    /// The anomaly ended; the last anomalous minute.
    Closed {
        last_minute: i64,
    },
}

/// Minutes a quiet scope's requests are pooled over at most before they are judged
/// as one point (`watch`): a route at 5 requests a minute is judged every four
/// minutes, one at 1 not at all.
pub(crate) const POOL_MINUTES: i64 = 5;

/// The least sigma of a cache hit ratio (a mean of per-request ratios): a point.
const CACHE_RATIO_FLOOR: f64 = 0.01;

/// The detector of one metric of one series.
#[derive(Clone, Debug)]
pub struct SeriesDetector {
    metric: Metric,
    history: VecDeque<MinuteValue>,
    pending: Vec<Pending>,
    /// The minute pushed last (judged: enough requests), for shares pooled over two.
    last: Option<MinuteValue>,
    active: bool,
    last_bad_minute: i64,
    normal_streak: usize,
    /// For shares of requests: the belief the baseline's counts update (`share`).
    share_prior: ShareBelief,
    /// For latency quantiles: the baseline's requests pooled (`quantile_noise`).
    requests: Option<PooledRequests>,
}

/// A minute out, waiting for its confirmation.
#[derive(Clone, Debug)]
struct Pending {
    point: MinuteValue,
    score: f64,
    /// How likely its quantile is by chance among the baseline's requests.
    chance: Option<f64>,
    requests: Option<Requests>,
}

/// A minute's requests, as the sketch of the values a quantile is read from.
#[derive(Clone)]
struct Requests(DDSketch);

// The sketch has no Debug of its own.
impl std::fmt::Debug for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Requests({})", self.0.count())
    }
}

/// Median, MAD and the spread of the worse tail (90th percentile above the median, or
/// 10th below it when lower is worse) of a small window.
fn median_mad_tail(values: &VecDeque<MinuteValue>, higher_is_worse: bool) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().map(|p| p.value).collect();
    v.sort_by(f64::total_cmp);
    let median = middle(&v);
    let tail = if v.is_empty() {
        0.0
    } else if higher_is_worse {
        v[(v.len() - 1) * 9 / 10] - median
    } else {
        median - v[(v.len() - 1) / 10]
    };
    let mut dev: Vec<f64> = v.iter().map(|x| (x - median).abs()).collect();
    dev.sort_by(f64::total_cmp);
    (median, middle(&dev), tail.max(0.0))
}

fn middle(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

impl SeriesDetector {
    pub fn new(metric: Metric) -> Self {
        Self {
            metric,
            history: VecDeque::new(),
            last: None,
            pending: Vec::new(),
            active: false,
            last_bad_minute: 0,
            normal_streak: 0,
            share_prior: ShareBelief::UNINFORMED,
            requests: metric
                .requests_quantile()
                .map(|_| PooledRequests::default()),
        }
    }

    /// The belief a share's baseline starts from (what the tenant's other scopes show).
    pub(crate) fn set_share_prior(&mut self, prior: ShareBelief) {
        self.share_prior = prior;
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    /// (baseline, robust sigma) for a minute resting on `count` observations. For
    /// values that are no share, the sigma is the larger of the MAD's and the worse
    /// tail's (its 90th percentile is 1.28 sigma out for a normal series): a
    /// per-minute P99 of a few dozen requests is nearly their maximum, skewed towards
    /// the worse side, and the MAD alone puts ordinary high minutes several sigmas
    /// out. For a latency quantile, it is also no less than the quantile's sampling
    /// noise at `count` requests, read off the baseline's requests: a few baseline
    /// minutes that happen to be alike do not make an ordinary one look far out.
    fn baseline(&self, count: u64) -> (f64, f64) {
        let (median, mad, tail) = median_mad_tail(&self.history, self.metric.higher_is_worse());
        let floor = match self.metric {
            // Binomial noise of a share of `count` requests (the tail of a share that is
            // mostly 0 is a request or two: binomial noise already).
            Metric::ErrorRate | Metric::RejectionRate => {
                let p = median.clamp(1.0 / count.max(1) as f64, 0.5);
                (p * (1.0 - p) / count.max(1) as f64).sqrt()
            }
            // A mean of per-request hit ratios: no binomial noise, its own spread.
            Metric::KvCacheHitRatio | Metric::PromptCacheHitRatio => {
                CACHE_RATIO_FLOOR.max(tail / 1.2816)
            }
            _ => {
                // A quantile of `count` requests is no steadier than its sampling noise
                // (`quantile_noise`), however alike the baseline's few minutes were.
                let noise = self
                    .metric
                    .requests_quantile()
                    .zip(self.requests.as_ref())
                    .and_then(|(q, pool)| pool.sampling_log_sd(q, count))
                    .map_or(0.0, |sd| median.abs() * sd.exp_m1());
                (0.05 * median.abs()).max(tail / 1.2816).max(noise)
            }
        };
        let sigma = (1.4826 * mad).max(floor).max(1e-9);
        (median, sigma)
    }

    /// Robust standard deviations a minute must be off by. A spread measured from the
    /// baseline's own minutes (latency, TTFT, cache ratios …) is itself uncertain while
    /// they are few: the bar is then Student's t at the tail `sensitivity` stands for
    /// (≈ 7 at 10 minutes, 4.7 at 30, 4.3 at 60 for sensitivity 4). Shares of
    /// requests have their binomial noise as a floor and are held to `sensitivity`.
    fn needed_score(&self, cfg: &DetectorConfig) -> f64 {
        match self.metric {
            Metric::ErrorRate | Metric::RejectionRate => cfg.sensitivity,
            _ => crate::tails::student_quantile(
                cfg.sensitivity,
                self.history.len().saturating_sub(1) as f64,
            ),
        }
    }

    /// The belief about the share of bad requests (errors, rejections) that the
    /// baseline's minutes before `before_minute` give, once the baseline is long enough
    /// to judge by.
    pub(crate) fn baseline_share_before(
        &self,
        cfg: &DetectorConfig,
        before_minute: i64,
    ) -> Option<ShareBelief> {
        (self.history.len() >= cfg.min_baseline).then(|| self.baseline_share(before_minute))
    }

    /// For latency and TTFT: the quantile `q` of the baseline's requests pooled, and
    /// how many it holds, once they are enough to read it.
    pub(crate) fn pooled_quantile(&self, q: f64) -> Option<(f64, u64)> {
        self.requests.as_ref()?.quantile(q)
    }

    /// The baseline's median minute, once the baseline is long enough to judge by.
    pub(crate) fn typical(&self, cfg: &DetectorConfig) -> Option<f64> {
        (self.history.len() >= cfg.min_baseline).then(|| self.baseline(1).0)
    }

    /// Bad requests and requests of the baseline's minutes before `before_minute`.
    pub(crate) fn baseline_counts(&self, before_minute: i64) -> (f64, f64) {
        self.history
            .iter()
            .filter(|p| p.minute < before_minute)
            .fold((0.0, 0.0), |(b, n), p| {
                (b + p.value * p.count as f64, n + p.count as f64)
            })
    }

    /// Opens an anomaly found by another test of this series (a slice of its requests
    /// far worse than the rest, `slices`), unless one is open: from then on it closes
    /// as one of its own does. The onset minute leaves the baseline.
    pub fn open_found(&mut self, found: AnomalyOnset) -> Option<DetectorEvent> {
        if self.active {
            return None;
        }
        self.take_back_from(found.onset_minute);
        self.pending.clear();
        self.active = true;
        self.last_bad_minute = found.detected_minute;
        self.normal_streak = 0;
        Some(DetectorEvent::Opened(found))
    }

    /// Feeds one closed minute; minutes must come in time order.
    pub fn push(&mut self, cfg: &DetectorConfig, point: MinuteValue) -> Option<DetectorEvent> {
        self.push_requests(cfg, point, None)
    }

    /// Feeds one closed minute with the sketch of its requests' values, which a
    /// quantile metric is read from: a latency quantile is then judged against the
    /// baseline's requests pooled too (`quantile_noise`) — its sigma no less than its
    /// sampling noise, and a P99 improbable among them.
    pub fn push_requests(
        &mut self,
        cfg: &DetectorConfig,
        point: MinuteValue,
        requests: Option<&DDSketch>,
    ) -> Option<DetectorEvent> {
        if point.count < cfg.min_count || !point.value.is_finite() {
            self.last = None;
            return None;
        }
        let requests = requests
            .filter(|_| self.requests.is_some())
            .map(|s| Requests(s.clone()));
        let event = self.judge(cfg, point, requests);
        self.last = Some(point);
        event
    }

    /// The point judged just before `point`: the minute before, or — for a quiet
    /// scope whose minutes are pooled until they hold enough requests (`watch`) — the
    /// pool before, dated by its first minute, at most `POOL_MINUTES` back. A minute
    /// skipped for too few requests breaks the sequence (`push_requests`).
    fn previous(&self, point: &MinuteValue) -> Option<MinuteValue> {
        self.last
            .filter(|p| p.minute < point.minute && point.minute - p.minute <= POOL_MINUTES)
    }

    /// How likely this minute's upper quantile is by chance among the baseline's
    /// requests; `None` for other metrics or while the pool is small.
    fn chance(&self, point: &MinuteValue) -> Option<f64> {
        let q = self.metric.requests_quantile().filter(|q| *q >= 0.9)?;
        self.requests.as_ref()?.chance(q, point.value, point.count)
    }

    /// The belief about the share of bad requests (errors or rejections over requests)
    /// after the baseline's minutes before `before_minute`.
    fn baseline_share(&self, before_minute: i64) -> ShareBelief {
        let (bad, n) = self.baseline_counts(before_minute);
        self.share_prior.observe(bad, n)
    }

    /// For shares of requests (error, rejection rate): whether the point before
    /// (`previous`) and this one, pooled, hold more bad requests than the baseline
    /// makes plausible (its predictive tail below α, the normal tail at
    /// `sensitivity`), each minute out at √α and together `min_ratio_change` above the
    /// baseline's share. A share's
    /// evidence adds up over minutes: 3 errors in each of two minutes of 45 requests
    /// against a 0.3% baseline are as sure as 4 in one.
    /// Returns (previous minute, baseline share, pooled share, score).
    fn pooled_share(
        &self,
        cfg: &DetectorConfig,
        point: &MinuteValue,
    ) -> Option<(MinuteValue, f64, f64, f64)> {
        if !matches!(self.metric, Metric::ErrorRate | Metric::RejectionRate) {
            return None;
        }
        let prev = self.previous(point)?;
        let belief = self.baseline_share(prev.minute);
        let p0 = belief.share();
        let alpha = cfg.alpha();
        // Each minute out on its own at √α (two independent minutes: α together), so
        // that a burst of one minute beside an ordinary one is no onset: bad requests
        // come in bursts, not as Poisson's independent arrivals.
        let out = |p: &MinuteValue| {
            let bad = (p.value * p.count as f64).round() as u64;
            belief.surprise(bad, p.count) < alpha.sqrt()
        };
        if !(out(&prev) && out(point)) {
            return None;
        }
        let n = prev.count + point.count;
        let bad = (prev.value * prev.count as f64 + point.value * point.count as f64).round();
        let pooled = bad / n as f64;
        if pooled - p0 < cfg.min_ratio_change {
            return None;
        }
        let surprise = belief.surprise(bad as u64, n);
        let sigma = (p0 * (1.0 - p0) / n as f64).sqrt().max(1e-9);
        (surprise < alpha).then_some((prev, p0, pooled, (pooled - p0) / sigma))
    }

    /// For the median latency: whether the point before (`previous`) and this one are
    /// out together — their scores' sum `needed · √2` or more, as one minute's score
    /// `needed` is under the null — each at least a sigma out and their mean at least
    /// half the minimum relative change off the baseline. A slower tool adds the same
    /// time to every request: a shift of the median a minute of a few dozen requests
    /// cannot show on its own, and two can. Returns (previous minute, their mean,
    /// score).
    fn sustained_shift(
        &self,
        cfg: &DetectorConfig,
        point: &MinuteValue,
        (median, sigma): (f64, f64),
        needed: f64,
    ) -> Option<(MinuteValue, f64, f64)> {
        if self.metric != Metric::P50Latency {
            return None;
        }
        let prev = self.previous(point)?;
        let z = |p: &MinuteValue| (p.value - median) / sigma;
        let (z0, z1) = (z(&prev), z(point));
        let score = (z0 + z1) / std::f64::consts::SQRT_2;
        let mean = (prev.value + point.value) / 2.0;
        let shift = mean - median >= 0.5 * cfg.min_relative_change * median.abs();
        (z0 >= 1.0 && z1 >= 1.0 && score >= needed && shift).then_some((prev, mean, score))
    }

    fn judge(
        &mut self,
        cfg: &DetectorConfig,
        point: MinuteValue,
        requests: Option<Requests>,
    ) -> Option<DetectorEvent> {
        if self.history.len() < cfg.min_baseline {
            self.remember(cfg, point, requests);
            return None;
        }
        let (median, sigma) = self.baseline(point.count);
        let sign = if self.metric.higher_is_worse() {
            1.0
        } else {
            -1.0
        };
        let deviation = (point.value - median) * sign;
        let score = deviation / sigma;
        let practical = if self.metric.is_ratio() {
            cfg.min_ratio_change
        } else {
            cfg.min_relative_change * median.abs().max(1e-9)
        };
        let big_enough = deviation >= practical;
        let needed = self.needed_score(cfg);
        let out = big_enough && score >= needed;
        if self.active {
            if out {
                self.last_bad_minute = point.minute;
                self.normal_streak = 0;
                return None;
            }
            self.normal_streak += 1;
            self.remember(cfg, point, requests);
            if self.normal_streak >= cfg.recover {
                self.active = false;
                self.normal_streak = 0;
                return Some(DetectorEvent::Closed {
                    last_minute: self.last_bad_minute,
                });
            }
            return None;
        }
        // An upper quantile must also be unlikely among the baseline's requests: a
        // minute at √α (two such minutes together make α), and the minutes that open
        // an anomaly at α together.
        let alpha = cfg.alpha();
        let chance = self.chance(&point);
        let bad = out && chance.is_none_or(|c| c < alpha.sqrt());
        let waiting = !bad || self.pending.len() + 1 < cfg.confirm;
        let pooled = if waiting {
            // A minute out on its own waits for its confirmation instead: its onset
            // is its own, not the ordinary minute before it.
            let shift = || self.sustained_shift(cfg, &point, (median, sigma), needed);
            self.pooled_share(cfg, &point).or_else(|| {
                (!bad)
                    .then(shift)
                    .flatten()
                    .map(|(prev, mean, score)| (prev, median, mean, score))
            })
        } else {
            None
        };
        if let Some((prev, p0, pooled, pooled_score)) = pooled {
            // The previous minute went into the baseline as normal: take it back out.
            self.take_back_from(prev.minute);
            self.pending.clear();
            self.active = true;
            self.last_bad_minute = point.minute;
            self.normal_streak = 0;
            return Some(DetectorEvent::Opened(AnomalyOnset {
                metric: self.metric,
                onset_minute: prev.minute,
                detected_minute: point.minute,
                baseline: p0,
                observed: pooled,
                score: pooled_score.max(score),
            }));
        }
        if !bad {
            // A lone outlier that was not confirmed is ordinary noise after all.
            for p in std::mem::take(&mut self.pending) {
                self.remember(cfg, p.point, p.requests);
            }
            self.remember(cfg, point, requests);
            return None;
        }
        self.pending.push(Pending {
            point,
            score,
            chance,
            requests,
        });
        // Alone, a minute must be three times as far out in both senses: a burst of
        // errors for one minute on a busy route is many deviations out, and ordinary.
        let severe = score >= 3.0 * needed
            && deviation >= 3.0 * practical
            && chance.is_none_or(|c| c < alpha);
        let together: f64 = self
            .pending
            .iter()
            .map(|p| p.chance.unwrap_or(0.0))
            .product();
        let confirmed = self.pending.len() >= cfg.confirm && together < alpha;
        if !confirmed && !severe {
            return None;
        }
        let first = self.pending[0].point;
        let peak = self
            .pending
            .iter()
            .map(|p| p.score)
            .fold(f64::MIN, f64::max);
        self.pending.clear();
        self.active = true;
        self.last_bad_minute = point.minute;
        self.normal_streak = 0;
        Some(DetectorEvent::Opened(AnomalyOnset {
            metric: self.metric,
            onset_minute: first.minute,
            detected_minute: point.minute,
            baseline: median,
            observed: point.value,
            score: peak,
        }))
    }

    /// Takes the baseline's minutes from `minute` on back out (an onset's first
    /// minutes, judged normal before it showed), with their requests.
    fn take_back_from(&mut self, minute: i64) {
        while self.history.back().is_some_and(|p| p.minute >= minute) {
            self.history.pop_back();
        }
        if let Some(pool) = &mut self.requests {
            pool.forget_from(minute);
        }
    }

    fn remember(&mut self, cfg: &DetectorConfig, point: MinuteValue, requests: Option<Requests>) {
        if let (Some(pool), Some(requests)) = (&mut self.requests, requests) {
            pool.remember(point.minute, requests.0, cfg.window);
        }
        self.history.push_back(point);
        while self.history.len() > cfg.window {
            self.history.pop_front();
        }
    }
}

#[cfg(test)]
mod tests;
