//! A metric of the rollups over time, per group (`GET /api/v1/metrics`, Grafana): the
//! cells of a window read once, priced per model when the metric is cost, filtered by
//! level and dimension values, grouped and bucketed by step.

use threadline_analysis::{group_cells, Dimension, Level, Metric, PriceTable};
use threadline_model::TenantId;
use threadline_store::{Store, StoreError};

/// What series to compute.
#[derive(Clone, Debug)]
pub struct SeriesQuery {
    pub metric: Metric,
    pub level: Level,
    pub group_by: Vec<Dimension>,
    pub filter: Vec<(Dimension, String)>,
    /// First and last minute (unix minutes), both included.
    pub from_minute: i64,
    pub to_minute: i64,
    pub step_minutes: i64,
}

/// One group's series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The group's value of each `group_by` dimension, in the query's order.
    pub labels: Vec<(Dimension, String)>,
    pub points: Vec<Point>,
}

/// One step of a series.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The step's first minute (unix minutes).
    pub minute: i64,
    /// The metric over the step; `None` when it has no value (no requests, no tokens).
    pub value: Option<f64>,
    pub requests: u64,
}

/// The series of `query` over the tenant's rollups, one per group with requests.
pub fn metric_series(
    store: &Store,
    tenant: &TenantId,
    query: &SeriesQuery,
    prices: &PriceTable,
) -> Result<Vec<Series>, StoreError> {
    let mut cells = store.rollup_cells(tenant, query.from_minute, query.to_minute)?;
    // Each series names its model, so each cell is priced before cells merge.
    if query.metric == Metric::Cost {
        for (_, key, cell) in &mut cells {
            cell.price(key.get(Dimension::Model), prices);
        }
    }
    let groups = group_cells(
        &cells,
        query.level,
        &query.filter,
        &query.group_by,
        query.step_minutes,
        query.from_minute,
    );
    let seconds = (query.step_minutes * 60) as f64;
    Ok(groups
        .iter()
        .map(|(key, buckets)| Series {
            labels: query
                .group_by
                .iter()
                .map(|d| (*d, key.get(*d).to_owned()))
                .collect(),
            points: buckets
                .iter()
                .map(|(minute, cell)| Point {
                    minute: *minute,
                    value: query.metric.value(cell, seconds),
                    requests: cell.requests,
                })
                .collect(),
        })
        .collect())
}
