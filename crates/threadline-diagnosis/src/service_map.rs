//! The service map over a time range: services, the calls between them (from the
//! stored hops: parent/child pairs across services, joined across processes), and the
//! model endpoints each service calls (from the model-call rollups), each edge with its
//! request rate, error rate and latency quantiles. Read from per-minute aggregates, so
//! its cost does not grow with the traces in the range.

use std::collections::{BTreeMap, BTreeSet};

use threadline_analysis::cell::RollupCell;
use threadline_analysis::hops::HopCell;
use threadline_analysis::{Dimension, Level, BUCKET_NS};
use threadline_model::TenantId;
use threadline_store::{Store, StoreError};

/// What an edge leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EdgeTarget {
    /// Another service (the callee's `service.name`).
    Service,
    /// A model, as the calling service's model-call spans name it.
    Model,
}

impl EdgeTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeTarget::Service => "service",
            EdgeTarget::Model => "model",
        }
    }
}

/// Calls from one service to a service or model over the range.
#[derive(Clone, Debug, PartialEq)]
pub struct MapEdge {
    pub caller: String,
    pub callee: String,
    pub target: EdgeTarget,
    pub calls: u64,
    pub errors: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl MapEdge {
    pub fn error_rate(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.errors as f64 / self.calls as f64
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceMap {
    pub from_ns: i64,
    pub to_ns: i64,
    /// Every service with spans in the store, whether or not it called or was called
    /// in the range, and the models called.
    pub services: Vec<String>,
    pub models: Vec<String>,
    /// By caller, then callee.
    pub edges: Vec<MapEdge>,
}

impl ServiceMap {
    /// Minutes the range spans (at least one), for rates.
    pub fn minutes(&self) -> f64 {
        ((self.to_ns - self.from_ns) as f64 / BUCKET_NS as f64).max(1.0)
    }
}

/// The map of `tenant` over span start times `from_ns..to_ns`.
pub fn service_map(
    store: &Store,
    tenant: &TenantId,
    from_ns: i64,
    to_ns: i64,
) -> Result<ServiceMap, StoreError> {
    let (from_minute, to_minute) = (from_ns.div_euclid(BUCKET_NS), to_ns.div_euclid(BUCKET_NS));
    let mut edges: Vec<MapEdge> = store
        .service_hops(tenant, from_minute, to_minute)?
        .into_iter()
        .map(|(hop, cell): (_, HopCell)| MapEdge {
            caller: hop.caller,
            callee: hop.callee,
            target: EdgeTarget::Service,
            calls: cell.calls,
            errors: cell.errors,
            p50_ms: cell.latency_quantile_ms(0.5),
            p99_ms: cell.latency_quantile_ms(0.99),
        })
        .collect();
    // Model calls by (service, model).
    let mut calls: BTreeMap<(String, String), RollupCell> = BTreeMap::new();
    for (_, key, cell) in store.rollup_cells(tenant, from_minute, to_minute)? {
        if key.level() != Level::Call || key.get(Dimension::Model).is_empty() {
            continue;
        }
        let at = (
            key.get(Dimension::Service).to_owned(),
            key.get(Dimension::Model).to_owned(),
        );
        calls.entry(at).or_default().merge(&cell);
    }
    let models: BTreeSet<String> = calls.keys().map(|(_, m)| m.clone()).collect();
    edges.extend(calls.into_iter().map(|((service, model), cell)| MapEdge {
        caller: service,
        callee: model,
        target: EdgeTarget::Model,
        calls: cell.requests,
        errors: cell.errors,
        p50_ms: cell.latency_quantile_ms(0.5),
        p99_ms: cell.latency_quantile_ms(0.99),
    }));
    edges.sort_by(|a, b| (&a.caller, &a.callee, a.target).cmp(&(&b.caller, &b.callee, b.target)));
    let mut services: BTreeSet<String> = store
        .services(tenant)?
        .into_iter()
        .map(|s| s.name)
        .collect();
    for e in edges.iter().filter(|e| e.target == EdgeTarget::Service) {
        services.insert(e.caller.clone());
        services.insert(e.callee.clone());
    }
    Ok(ServiceMap {
        from_ns,
        to_ns,
        services: services.into_iter().collect(),
        models: models.into_iter().collect(),
        edges,
    })
}
