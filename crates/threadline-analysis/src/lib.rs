//! Diagnosis without storage: per-minute rollups of LLM requests (mergeable cells with
//! DDSketch latency quantiles), the public metrics read off them, streaming anomaly
//! detection per series with incident grouping, and root-cause ranking. The store
//! persists rollups and incidents; the server feeds them from it.

pub mod anomaly;
pub mod cell;
pub mod changes;
pub mod cost;
pub mod drift;
pub mod health;
pub mod hops;
pub mod incident;
pub mod metric;
pub mod observe;
mod quantile_noise;
pub mod rca;
pub mod rollup;
pub mod series;
mod share;
mod slices;
pub mod slo;
mod tails;
mod time_went;
pub mod watch;

pub use anomaly::{AnomalyOnset, DetectorConfig, DetectorEvent, MinuteValue, SeriesDetector};
pub use cell::{SlotTime, SpanSlot};
pub use changes::{attribute_of, changes_upstream};
pub use cost::{ModelPrice, PriceTable};
pub use drift::{drift, drift_between, drift_mark, DriftConfig, DriftMark, DriftProfile};
pub use incident::{Incident, IncidentId};
pub use metric::Metric;
pub use observe::{observe, Observed};
pub use rca::{
    rank, Candidate, CandidateKind, Change, FaultRule, FaultRules, RcaInput, SampledSpan,
    TraceSamples,
};
pub use rollup::{
    group_cells, matches, matches_at, minute_of, BatchRollups, Dimension, Level, RollupCell,
    Rollups, SeriesKey, SeriesRef, BUCKET_NS,
};
pub use slo::{SloEvent, SloRule, SloState};
pub use tails::binomial_tail;
pub use watch::{scope_of, Watch};
