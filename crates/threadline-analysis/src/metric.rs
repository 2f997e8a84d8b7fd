//! The public metric names and how each is read off a (merged) rollup cell.

use crate::cell::RollupCell;

/// A metric of the `/api/v1/metrics` contract. Serialized by its API name (stored
/// incidents carry it so).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    RequestRate,
    ErrorRate,
    P50Latency,
    P95Latency,
    P99Latency,
    TtftP99,
    TokensPerS,
    KvCacheHitRatio,
    /// A hosted provider's prompt-cache hit ratio (apart from the KV cache's).
    PromptCacheHitRatio,
    RejectionRate,
    /// USD spent on tokens in the step (cells priced when read).
    Cost,
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::RequestRate,
        Metric::ErrorRate,
        Metric::P50Latency,
        Metric::P95Latency,
        Metric::P99Latency,
        Metric::TtftP99,
        Metric::TokensPerS,
        Metric::KvCacheHitRatio,
        Metric::PromptCacheHitRatio,
        Metric::RejectionRate,
        Metric::Cost,
    ];

    /// What anomaly detection watches. The median is watched beside P99: a step that
    /// adds the same time to every request (a slower tool or upstream call) moves the
    /// median out of its narrow band well before it lifts a P99 out of its wide one.
    pub const WATCHED: [Metric; 7] = [
        Metric::P99Latency,
        Metric::P50Latency,
        Metric::ErrorRate,
        Metric::TtftP99,
        Metric::TokensPerS,
        Metric::KvCacheHitRatio,
        Metric::RejectionRate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::RequestRate => "request_rate",
            Metric::ErrorRate => "error_rate",
            Metric::P50Latency => "p50_latency",
            Metric::P95Latency => "p95_latency",
            Metric::P99Latency => "p99_latency",
            Metric::TtftP99 => "ttft_p99",
            Metric::TokensPerS => "tokens_per_s",
            Metric::KvCacheHitRatio => "kv_cache_hit_ratio",
            Metric::PromptCacheHitRatio => "prompt_cache_hit_ratio",
            Metric::RejectionRate => "rejection_rate",
            Metric::Cost => "cost",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// `parse`, with a message naming the value and the metrics there are.
    pub fn named(name: &str) -> Result<Self, String> {
        Self::parse(name).ok_or_else(|| {
            format!(
                "unknown metric {name:?}: use one of {}",
                Self::ALL.map(Metric::as_str).join(", ")
            )
        })
    }

    /// The latency quantile a latency metric reads (`None` for the others).
    pub fn latency_quantile(self) -> Option<f64> {
        match self {
            Metric::P50Latency => Some(0.5),
            Metric::P95Latency => Some(0.95),
            Metric::P99Latency => Some(0.99),
            _ => None,
        }
    }

    /// For a quantile of requests (latency P50 … P99, TTFT P99): the quantile.
    pub fn requests_quantile(self) -> Option<f64> {
        match self {
            Metric::TtftP99 => Some(0.99),
            _ => self.latency_quantile(),
        }
    }

    /// The sketch of the per-request values a quantile metric is read from.
    pub fn requests_sketch(self, cell: &RollupCell) -> Option<&sketches_ddsketch::DDSketch> {
        match self {
            Metric::P50Latency | Metric::P95Latency | Metric::P99Latency => Some(&cell.latency_ms),
            Metric::TtftP99 => Some(&cell.ttft_ms),
            _ => None,
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::RequestRate => "requests/s",
            Metric::ErrorRate
            | Metric::RejectionRate
            | Metric::KvCacheHitRatio
            | Metric::PromptCacheHitRatio => "ratio",
            Metric::P50Latency | Metric::P95Latency | Metric::P99Latency | Metric::TtftP99 => "ms",
            Metric::TokensPerS => "tokens/s",
            Metric::Cost => "USD",
        }
    }

    /// True when a rise is the bad direction (latency, errors); false for throughput
    /// and cache hits, where a drop is.
    pub fn higher_is_worse(self) -> bool {
        !matches!(
            self,
            Metric::TokensPerS
                | Metric::KvCacheHitRatio
                | Metric::PromptCacheHitRatio
                | Metric::RequestRate
        )
    }

    /// True for shares of requests (bounded in [0, 1], binomial noise).
    pub fn is_ratio(self) -> bool {
        matches!(
            self,
            Metric::ErrorRate
                | Metric::RejectionRate
                | Metric::KvCacheHitRatio
                | Metric::PromptCacheHitRatio
        )
    }

    /// How many observations the value rests on (for minimum-count guards).
    pub fn support(self, cell: &RollupCell) -> u64 {
        match self {
            Metric::TtftP99 => cell.ttft_ms.count() as u64,
            Metric::KvCacheHitRatio => cell.kv_hit_count,
            Metric::PromptCacheHitRatio => cell.prompt_cache_count,
            Metric::TokensPerS => u64::from(cell.gen_seconds > 0.0) * cell.requests,
            _ => cell.requests,
        }
    }

    /// The metric's value over a cell covering `seconds` of time; `None` when the cell
    /// holds nothing it can be computed from.
    pub fn value(self, cell: &RollupCell, seconds: f64) -> Option<f64> {
        let ratio = |num: u64, den: u64| (den > 0).then(|| num as f64 / den as f64);
        let quantile = |s: &sketches_ddsketch::DDSketch, q: f64| s.quantile(q).ok().flatten();
        match self {
            Metric::RequestRate => (seconds > 0.0).then(|| cell.requests as f64 / seconds),
            Metric::ErrorRate => ratio(cell.errors, cell.requests),
            Metric::RejectionRate => ratio(cell.rejected(), cell.requests),
            Metric::P50Latency | Metric::P95Latency | Metric::P99Latency | Metric::TtftP99 => {
                quantile(self.requests_sketch(cell)?, self.requests_quantile()?)
            }
            Metric::TokensPerS => {
                (cell.gen_seconds > 0.0).then(|| cell.gen_tokens as f64 / cell.gen_seconds)
            }
            Metric::KvCacheHitRatio => {
                (cell.kv_hit_count > 0).then(|| cell.kv_hit_sum / cell.kv_hit_count as f64)
            }
            Metric::PromptCacheHitRatio => (cell.prompt_cache_count > 0)
                .then(|| cell.prompt_cache_sum / cell.prompt_cache_count as f64),
            Metric::Cost => Some(cell.cost_usd),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_empty_cells_have_no_value() {
        for m in Metric::ALL {
            assert_eq!(Metric::parse(m.as_str()), Some(m));
        }
        let cell = RollupCell::default();
        for m in Metric::ALL {
            if !matches!(m, Metric::RequestRate | Metric::Cost) {
                assert_eq!(m.value(&cell, 60.0), None, "{}", m.as_str());
            }
        }
        assert_eq!(Metric::RequestRate.value(&cell, 60.0), Some(0.0));
        // Stored incidents name metrics as the API does.
        for m in Metric::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        assert_eq!(Metric::Cost.value(&cell, 60.0), Some(0.0));
    }
}
