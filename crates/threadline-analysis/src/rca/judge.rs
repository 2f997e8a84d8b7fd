//! When a request is "bad" for a metric, against a baseline: slower than the
//! baseline's quantile, failed, refused, short of the baseline's KV-cache hits or of
//! its generation speed. The same request can be bad against the whole scope's
//! baseline and ordinary against its own slice's (an instance that always serves the
//! long prompts): both judgements are made, for different terms.

use crate::metric::Metric;
use crate::rollup::RollupCell;

/// Requests a reference baseline needs before requests are judged against it; with
/// fewer they are judged against the scope's.
pub(super) const OWN_BASELINE_REQUESTS: u64 = 20;

/// Requests of a baseline that must lie above a quantile threshold: with fewer
/// requests, the threshold is taken at a lower quantile (the P99 of 60 requests is
/// their slowest one — noise, not a tail).
const ABOVE_THRESHOLD: f64 = 3.0;

/// How a request of a cell is judged for one metric, fixed from one baseline.
#[derive(Clone, Copy, Debug)]
pub(super) enum Judge {
    /// Latency above a threshold (ms).
    LatencyAbove(Option<f64>),
    /// Time to first token above a threshold (ms).
    TtftAbove(Option<f64>),
    Errors,
    Rejections,
    /// The KV-cache hit deficit against the baseline's ratio.
    KvDeficit(f64),
    /// Generation time beyond the baseline's tokens per second.
    SlowGeneration(Option<f64>),
    /// Cost and the prompt cache are not watched: no request is bad for them.
    Nothing,
}

impl Judge {
    /// Judged against `base` (the whole scope's baseline, or a slice's own).
    pub(super) fn against(metric: Metric, base: &RollupCell) -> Judge {
        let threshold = |sketch: &sketches_ddsketch::DDSketch, q: f64| {
            let n = sketch.count() as f64;
            if n <= 0.0 {
                return None;
            }
            // At least `ABOVE_THRESHOLD` requests of the baseline above it.
            let q = q.min(1.0 - ABOVE_THRESHOLD / n).max(0.5);
            sketch.quantile(q).ok().flatten()
        };
        match metric {
            Metric::P50Latency | Metric::P95Latency | Metric::P99Latency => {
                let q = metric.latency_quantile().unwrap_or(0.99);
                Judge::LatencyAbove(threshold(&base.latency_ms, q))
            }
            Metric::TtftP99 => Judge::TtftAbove(threshold(&base.ttft_ms, 0.99)),
            Metric::ErrorRate => Judge::Errors,
            Metric::RejectionRate => Judge::Rejections,
            Metric::KvCacheHitRatio => {
                Judge::KvDeficit(Metric::KvCacheHitRatio.value(base, 60.0).unwrap_or(1.0))
            }
            Metric::TokensPerS => {
                Judge::SlowGeneration(Metric::TokensPerS.value(base, 60.0).filter(|t| *t > 0.0))
            }
            Metric::RequestRate | Metric::Cost | Metric::PromptCacheHitRatio => Judge::Nothing,
        }
    }

    /// Whether its bad mass counts requests (slow, failed, refused) — then how it
    /// falls across values is binomial — rather than a deficit spread over them (KV
    /// hits, generation speed).
    pub(super) fn counts_requests(&self) -> bool {
        matches!(
            self,
            Judge::LatencyAbove(_) | Judge::TtftAbove(_) | Judge::Errors | Judge::Rejections
        )
    }

    /// (bad mass, total mass) of a cell.
    pub(super) fn mass(&self, cell: &RollupCell) -> (f64, f64) {
        let n = cell.requests as f64;
        match *self {
            Judge::LatencyAbove(Some(t)) => (RollupCell::count_above(&cell.latency_ms, t), n),
            Judge::TtftAbove(Some(t)) => (
                RollupCell::count_above(&cell.ttft_ms, t),
                cell.ttft_ms.count() as f64,
            ),
            Judge::LatencyAbove(None) | Judge::Nothing => (0.0, n),
            Judge::TtftAbove(None) => (0.0, cell.ttft_ms.count() as f64),
            Judge::Errors => (cell.errors as f64, n),
            Judge::Rejections => (cell.rejected() as f64, n),
            Judge::KvDeficit(ratio) => {
                let expected = ratio * cell.kv_hit_count as f64;
                (
                    (expected - cell.kv_hit_sum).max(0.0),
                    cell.kv_hit_count as f64,
                )
            }
            Judge::SlowGeneration(Some(tps)) => {
                let expected = cell.gen_tokens as f64 / tps;
                ((cell.gen_seconds - expected).max(0.0), cell.gen_seconds)
            }
            Judge::SlowGeneration(None) => (0.0, cell.gen_seconds),
        }
    }

    /// (bad mass, total mass) of some cells.
    pub(super) fn masses<'a>(&self, cells: impl IntoIterator<Item = &'a RollupCell>) -> (f64, f64) {
        cells
            .into_iter()
            .map(|c| self.mass(c))
            .fold((0.0, 0.0), |(b, t), (x, y)| (b + x, t + y))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ms: &[f64]) -> RollupCell {
        let mut c = RollupCell::default();
        for m in ms {
            c.requests += 1;
            c.latency_ms.add(*m);
        }
        c
    }

    /// A slice that was always slower, judged against its own tail: a request as slow
    /// as its usual is bad against the scope and ordinary against itself.
    #[test]
    fn a_slice_is_judged_against_its_own_tail() {
        let fast: Vec<f64> = (0..200).map(|i| 100.0 + i as f64).collect();
        let slow: Vec<f64> = (0..200).map(|i| 300.0 + i as f64).collect();
        let scope = cell(&[fast.clone(), slow.clone()].concat());
        let own = cell(&slow);
        let by_scope = Judge::against(Metric::P95Latency, &scope);
        let by_own = Judge::against(Metric::P95Latency, &own);
        let usual = cell(&[480.0]);
        assert_eq!(by_scope.mass(&usual), (1.0, 1.0));
        assert_eq!(by_own.mass(&usual), (0.0, 1.0));
    }

    /// The P99 of 100 requests is taken where three of them lie above it.
    #[test]
    fn a_thin_baseline_sets_its_threshold_at_a_lower_quantile() {
        let ms: Vec<f64> = (1..=100).map(f64::from).collect();
        let Judge::LatencyAbove(Some(t)) = Judge::against(Metric::P99Latency, &cell(&ms)) else {
            panic!("a threshold");
        };
        assert!((95.0..=98.5).contains(&t), "{t}");
    }
}
