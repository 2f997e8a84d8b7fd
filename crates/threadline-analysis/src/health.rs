//! Health of a lineage node: 1.0 minus what is wrong with it or upstream of it.
//!
//! Factors, each a penalty in [0, 1]; the score is the product of `(1 − penalty)`:
//! - `stale`: a dataset or job whose last version / run is late against its usual
//!   cadence (median gap between its last versions / runs): `0.1 × lateness` once more
//!   than twice the usual gap has passed, at most 0.5 (halved when upstream);
//! - `drift`: a dataset version with drift, 0.3 on the version itself, 0.25 upstream;
//! - `incident`: an open incident on the node's route or model, or on a route the node
//!   serves: 0.4 critical, 0.2 warning.
//!
//! Problems upstream count downstream (that is the propagation): an adapter trained on
//! a drifted version is less healthy, and so is every instance and route serving it.

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HealthFactor {
    pub kind: &'static str,
    /// The node the problem is on.
    pub node: String,
    pub penalty: f64,
    pub detail: String,
}

/// Lateness of the newest of `times` (ns, any order) at `now_ns`, against the median
/// gap of the last ten: the penalty when more than twice the usual gap has passed.
pub fn staleness(times: &[i64], now_ns: i64) -> Option<(f64, String)> {
    let mut t: Vec<i64> = times.to_vec();
    t.sort_unstable();
    t.dedup();
    if t.len() < 3 {
        return None;
    }
    let recent = &t[t.len().saturating_sub(11)..];
    let mut gaps: Vec<i64> = recent.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let usual = gaps[gaps.len() / 2].max(1);
    let last = *t.last()?;
    let lateness = (now_ns - last) as f64 / usual as f64;
    (lateness > 2.0).then(|| {
        (
            (0.1 * lateness).min(0.5),
            format!(
                "last one {:.1} h ago, usually every {:.1} h",
                (now_ns - last) as f64 / 3.6e12,
                usual as f64 / 3.6e12
            ),
        )
    })
}

/// The score of a node from its factors, and a status word.
pub fn score(factors: &[HealthFactor]) -> (f64, &'static str) {
    let s = factors
        .iter()
        .fold(1.0, |acc, f| acc * (1.0 - f.penalty.clamp(0.0, 1.0)));
    let status = if s >= 0.8 {
        "healthy"
    } else if s >= 0.5 {
        "degraded"
    } else {
        "unhealthy"
    };
    (s, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000_000_000;

    #[test]
    fn late_against_the_usual_cadence_is_stale() {
        let daily: Vec<i64> = (0..5).map(|d| d * 24 * H).collect();
        assert_eq!(staleness(&daily, 4 * 24 * H + 30 * H), None);
        let (penalty, detail) = staleness(&daily, 4 * 24 * H + 96 * H).unwrap();
        assert!((penalty - 0.4).abs() < 1e-9, "{penalty}");
        assert!(detail.contains("usually every 24.0 h"), "{detail}");
        assert_eq!(staleness(&daily[..2], 100 * H), None);
    }

    #[test]
    fn factors_multiply() {
        let f = |p| HealthFactor {
            kind: "drift",
            node: "n".into(),
            penalty: p,
            detail: String::new(),
        };
        assert_eq!(score(&[]), (1.0, "healthy"));
        let (s, status) = score(&[f(0.3), f(0.4)]);
        assert!((s - 0.42).abs() < 1e-9);
        assert_eq!(status, "unhealthy");
    }
}
