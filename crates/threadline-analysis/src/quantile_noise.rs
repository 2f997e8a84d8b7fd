//! What a latency quantile of a minute's requests can do by chance, read off the
//! baseline's requests themselves rather than off the spread of its per-minute
//! quantiles.
//!
//! A per-minute P99 of a few dozen requests is their second-largest: a noisy, skewed
//! statistic whose spread the detector estimates from the baseline's per-minute values
//! (their 90th percentile, a handful of minutes). When those few happen to sit low, two
//! ordinary high minutes both look many sigmas out. The baseline's requests pooled
//! (thousands of them) say steadily how noisy the quantile of `n` requests is:
//!
//! - its sampling noise (`sampling_log_sd`): the k-th of n spreads by
//!   √(p (1 − p) / (n + 2)) / f(x_p), f the requests' density where it falls — the
//!   detector's sigma is never smaller;
//! - the chance of a value (`chance`): the quantile at rank k = ⌊q (n − 1)⌋ is at or
//!   above x exactly when n − k or more of the `n` requests are, a binomial tail in the
//!   share of requests above x, taken from a lognormal upper tail through the pool's
//!   90th and 99th percentiles (the pool holds too few requests further out).
//!
//! The pool keeps the requests of the baseline's minutes: an older and a newer half of
//! the detector's window, the older dropped whole when the newer is full. A minute
//! joins it only after `SETTLE_MINUTES`, while the detector may still take it back out
//! of its baseline (the first minute of an onset found a minute late).

use std::collections::VecDeque;

use sketches_ddsketch::DDSketch;

use crate::cell::new_sketch;
use crate::tails::{binomial_tail, normal_tail};

/// Requests the pool needs before its tail is read: its 99th percentile then rests on
/// ten requests or more.
const MIN_POOLED: usize = 1_000;
/// Requests the pool needs before its body's spread is read (its median and 90th
/// percentile).
const MIN_POOLED_BODY: usize = 200;
/// Pooled requests a quantile's neighbourhood needs on its thinner side before the
/// pool's density there is read.
const MIN_BEYOND: f64 = 10.0;
/// Minutes a minute waits before it joins the pool.
const SETTLE_MINUTES: usize = 2;
/// Standard normal quantiles at 0.90 and 0.99.
const Z90: f64 = 1.281_551_6;
const Z99: f64 = 2.326_347_9;
/// The least log-spread of the tail: the sketch's own relative accuracy (1%).
const MIN_LOG_SPREAD: f64 = 0.01;

/// The baseline's requests of one measure (latency or TTFT), pooled.
#[derive(Clone)]
pub(crate) struct PooledRequests {
    older: DDSketch,
    newer: DDSketch,
    newer_minutes: usize,
    /// Minutes remembered, not yet in the pool.
    settling: VecDeque<(i64, DDSketch)>,
    /// The older and newer halves together.
    pool: DDSketch,
}

/// A lognormal upper tail through the pool's 90th and 99th percentiles.
#[derive(Clone, Copy, Debug, PartialEq)]
struct UpperTail {
    ln_p99: f64,
    log_spread: f64,
}

impl UpperTail {
    fn of(pool: &DDSketch) -> Option<Self> {
        if pool.count() < MIN_POOLED {
            return None;
        }
        let p90 = pool.quantile(0.90).ok().flatten()?;
        let p99 = pool.quantile(0.99).ok().flatten()?;
        (p90 > 0.0 && p99 > 0.0).then(|| Self {
            ln_p99: p99.ln(),
            log_spread: ((p99 / p90).ln() / (Z99 - Z90)).max(MIN_LOG_SPREAD),
        })
    }

    /// The share of requests at or above `x`.
    fn share_above(&self, x: f64) -> f64 {
        if x <= 0.0 {
            return 1.0;
        }
        normal_tail(Z99 + (x.ln() - self.ln_p99) / self.log_spread)
    }
}

// The sketch has no Debug of its own.
impl std::fmt::Debug for PooledRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledRequests")
            .field("pooled", &(self.older.count() + self.newer.count()))
            .field("settling", &self.settling.len())
            .field("tail", &UpperTail::of(&self.pool))
            .finish()
    }
}

impl Default for PooledRequests {
    fn default() -> Self {
        Self {
            older: new_sketch(),
            newer: new_sketch(),
            newer_minutes: 0,
            settling: VecDeque::new(),
            pool: new_sketch(),
        }
    }
}

impl PooledRequests {
    /// Adds a baseline minute's requests; `window` is the baseline's length in minutes.
    pub(crate) fn remember(&mut self, minute: i64, requests: DDSketch, window: usize) {
        self.settling.push_back((minute, requests));
        if self.settling.len() <= SETTLE_MINUTES {
            return;
        }
        let Some((_, settled)) = self.settling.pop_front() else {
            return;
        };
        if self.newer_minutes >= (window / 2).max(1) {
            self.older = std::mem::replace(&mut self.newer, new_sketch());
            self.newer_minutes = 0;
        }
        // Every sketch comes from `new_sketch`: their configs match.
        let _ = self.newer.merge(&settled);
        self.newer_minutes += 1;
        let mut pool = self.older.clone();
        let _ = pool.merge(&self.newer);
        self.pool = pool;
    }

    /// The pool's quantile `q` and the requests it holds, once it holds `MIN_POOLED`.
    pub(crate) fn quantile(&self, q: f64) -> Option<(f64, u64)> {
        let n = self.pool.count();
        if n < MIN_POOLED {
            return None;
        }
        Some((self.pool.quantile(q).ok().flatten()?, n as u64))
    }

    /// Takes the minutes from `minute` on back out (they were not baseline after all).
    pub(crate) fn forget_from(&mut self, minute: i64) {
        self.settling.retain(|(m, _)| *m < minute);
    }

    /// The standard deviation, in log units, of the quantile `q` of `n` requests like
    /// the pool's: the sampling noise no series of such quantiles is steadier than.
    /// The quantile is the k-th of the n values, k = ⌊q (n − 1)⌋, which spreads by
    /// √(p (1 − p) / (n + 2)) / f(x_p) at p = (k + 1)/(n + 1), f the density of the
    /// requests' log values there. It is read off the pool between p ± δ (a mixture of
    /// fast and slow requests is as noisy as its density makes it), and taken no
    /// smaller than a lognormal with the pool body's spread gives (its median to its
    /// 90th percentile): near the top, that neighbourhood holds few requests and its
    /// density is itself noisy, and a spread read too small is what opens false
    /// incidents. `None` while the pool holds too few requests.
    pub(crate) fn sampling_log_sd(&self, q: f64, n: u64) -> Option<f64> {
        if n == 0 || self.pool.count() < MIN_POOLED_BODY {
            return None;
        }
        let rank = (q * (n - 1) as f64).floor();
        let n = n as f64;
        let p = (rank + 1.0) / (n + 1.0);
        let noise = (p * (1.0 - p) / (n + 2.0)).sqrt();
        let at = |p: f64| self.pool.quantile(p).ok().flatten().filter(|v| *v > 0.0);
        // d ln x / dp of a lognormal with the body's spread: σ / φ(z_p).
        let body = (at(0.9)? / at(0.5)?).ln() / Z90;
        let z = normal_quantile(p);
        let lognormal = body * std::f64::consts::TAU.sqrt() * (0.5 * z * z).exp();
        let delta = (0.5 * p.min(1.0 - p)).min(0.05);
        let local = ((self.pool.count() as f64) * (p.min(1.0 - p) - delta) >= MIN_BEYOND)
            .then(|| Some((at(p + delta)? / at(p - delta)?).ln() / (2.0 * delta)))
            .flatten();
        Some(noise * local.unwrap_or(0.0).max(lognormal))
    }

    /// The probability that the quantile `q` of `n` requests like the pool's is `value`
    /// or more; `None` while the pool is too small to say.
    pub(crate) fn chance(&self, q: f64, value: f64, n: u64) -> Option<f64> {
        let tail = UpperTail::of(&self.pool)?;
        if n == 0 {
            return None;
        }
        let rank = (q * (n - 1) as f64).floor() as u64;
        Some(binomial_tail(n - rank, n, tail.share_above(value)))
    }
}

/// Φ⁻¹(p) for p in (0, 1) (Acklam's rational approximation, relative error < 1.2e-9).
pub(crate) fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.024_25 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.024_25 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minute of `n` lognormal requests around 100 ms (log-sd 0.3), deterministic:
    /// evenly spaced normal quantiles.
    fn minute(n: usize, factor: f64) -> DDSketch {
        let mut s = new_sketch();
        for i in 0..n {
            let u = (i as f64 + 0.5) / n as f64;
            s.add(100.0 * factor * (0.3 * normal_quantile(u)).exp());
        }
        s
    }

    #[test]
    fn normal_quantiles_invert_the_tail() {
        for z in [-3.5, -2.5, -1.0, 0.0, 0.3, 1.2816, 2.0, 3.5] {
            let p = 1.0 - normal_tail(z);
            assert!((normal_quantile(p) - z).abs() < 1e-4, "{z}");
        }
    }

    /// The order statistic's spread against simulated ones (20,000 draws each): the
    /// median of 40 standard normals spreads by 0.195, their second largest (the P99
    /// of 40) by 0.352, the third largest of 200 by 0.240. Requests lognormal with
    /// log-sd 0.3 spread their quantiles' logs 0.3 times as far.
    #[test]
    fn a_quantile_of_few_requests_is_as_noisy_as_its_order_statistic() {
        let mut pool = PooledRequests::default();
        for m in 0..3i64 {
            pool.remember(m, minute(200, 1.0), 60);
        }
        // 200 requests: the body's spread gives a median's noise and a P99's.
        assert!(pool.sampling_log_sd(0.5, 40).is_some());
        assert!(pool.sampling_log_sd(0.99, 40).is_some());
        for m in 3..12i64 {
            pool.remember(m, minute(200, 1.0), 60);
        }
        for (q, n, simulated) in [(0.5, 40, 0.195), (0.99, 40, 0.352), (0.99, 200, 0.240)] {
            let got = pool.sampling_log_sd(q, n).unwrap() / 0.3;
            assert!(
                (got - simulated).abs() / simulated < 0.1,
                "{q} of {n}: {got} vs {simulated}"
            );
        }
        assert!(PooledRequests::default().sampling_log_sd(0.5, 40).is_none());
    }

    /// Half the requests fast, half ten times slower: the median of 40 falls on
    /// either side from one minute to the next, far noisier than a lognormal of
    /// the same spread would be, and the pool's density where it falls says so.
    #[test]
    fn a_mixture_of_fast_and_slow_requests_has_a_noisy_median() {
        let mut pool = PooledRequests::default();
        let mut mixed = minute(200, 1.0);
        let _ = mixed.merge(&minute(200, 10.0));
        for m in 0..12i64 {
            pool.remember(m, mixed.clone(), 60);
        }
        let sd = pool.sampling_log_sd(0.5, 40).unwrap();
        // A lognormal through its median and 90th percentile: ~0.2 in log units.
        assert!(sd > 0.5, "{sd}");
    }

    #[test]
    fn a_pool_reads_how_far_the_top_of_a_minute_reaches() {
        let mut pool = PooledRequests::default();
        for m in 0..24i64 {
            assert!(pool.chance(0.99, 500.0, 40).is_none() || m > SETTLE_MINUTES as i64);
            pool.remember(m, minute(50, 1.0), 60);
        }
        // 22 minutes of 50 settled: 1,100 requests, a tail through ~147 and ~201 ms.
        let tail = UpperTail::of(&pool.pool).expect("fitted");
        assert!((tail.log_spread - 0.3).abs() < 0.03, "{tail:?}");
        let chance = |v| pool.chance(0.99, v, 40).unwrap();
        // The P99 of 40 is their second largest: at the pool's P99 (~200 ms), one
        // minute in sixteen (two of 40 at 1% or more); at 1.3× that, a few minutes in
        // ten thousand; at twice it, never by chance.
        assert!((0.03..0.12).contains(&chance(200.0)), "{}", chance(200.0));
        assert!((1e-4..1e-3).contains(&chance(260.0)), "{}", chance(260.0));
        assert!(chance(400.0) < 1e-6, "{}", chance(400.0));
        // More requests a minute: the same value is less likely their P99.
        assert!(pool.chance(0.99, 260.0, 400).unwrap() < chance(260.0));
    }

    #[test]
    fn minutes_taken_back_never_join_the_pool() {
        let mut pool = PooledRequests::default();
        for m in 0..30 {
            pool.remember(m, minute(50, 1.0), 60);
        }
        let before = UpperTail::of(&pool.pool);
        // Two slow minutes remembered, then found to be an onset: taken back out.
        pool.remember(30, minute(50, 5.0), 60);
        pool.remember(31, minute(50, 5.0), 60);
        pool.forget_from(30);
        pool.remember(32, minute(50, 1.0), 60);
        pool.remember(33, minute(50, 1.0), 60);
        pool.remember(34, minute(50, 1.0), 60);
        let after = UpperTail::of(&pool.pool);
        assert!(
            (after.unwrap().ln_p99 - before.unwrap().ln_p99).abs() < 0.02,
            "{after:?} vs {before:?}"
        );
    }
}
