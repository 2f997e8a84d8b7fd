//! Diagnosis over the store, as typed functions that return typed reports: the
//! incident watcher (the streaming detector run over each tenant's rollups, with SLO
//! rules and news for alerts), root-cause reports of a series at an onset, the health
//! of a lineage node, the lineage chain behind one request, and lineage as the APIs show
//! it (Marquez's graphs, the impact of a change), metric series of the rollups,
//! and the ingest pipeline below the OTLP transports (convert, observe, bind, queue). The server's handlers
//! parse a request, call these and render the report; the CLI's benchmarks call them
//! directly. No HTTP here.

pub mod health;
pub mod ingest;
pub mod lineage_views;
pub mod metric_series;
pub mod rca;
pub mod service_map;
#[cfg(test)]
mod test_traffic;
pub mod trace_lineage;
mod watcher;

pub use rca::{diagnose, RankedCause, RcaReport, RcaTarget};
pub use watcher::{IncidentListener, IncidentNews, IncidentWatcher};

use threadline_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DiagnosisError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The incident or trace asked for does not exist for the tenant.
    #[error("{0}")]
    NotFound(String),
    /// What was asked names no series to diagnose.
    #[error("{0}")]
    InvalidTarget(String),
}
