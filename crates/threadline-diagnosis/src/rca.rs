//! Root-cause reports: for a series at an onset, gathers the inputs — rollup cells an
//! hour before and during the anomaly, the changes in the lineage graph upstream of
//! the affected route or model, the fault rules — ranks them with
//! `threadline_analysis::rank`, and adds exemplar traces to the leading candidates.

use std::collections::BTreeMap;

use threadline_analysis::{
    changes_upstream, matches_at, rank, Candidate, Dimension, FaultRules, Incident, Level, Metric,
    RcaInput, RollupCell, SampledSpan, SeriesKey, TraceSamples, BUCKET_NS,
};
use threadline_model::{Direction, NodeId, NodeKind, TenantId, TraceId};
use threadline_store::{
    ExemplarQuery, NameMatch, Store, TraceQuery, WalkLimits, EXEMPLAR_DIMENSIONS,
};

use crate::DiagnosisError;

/// Minutes of normal traffic the anomaly is contrasted with.
pub const BASELINE_MINUTES: i64 = 60;
/// The anomaly window when the incident has not ended (or no incident was given).
const DEFAULT_WINDOW_MINUTES: i64 = 10;
const MAX_WINDOW_MINUTES: i64 = 30;
const CANDIDATES: usize = 10;
const EXEMPLAR_CANDIDATES: usize = 5;
const EXEMPLARS: usize = 5;
const UPSTREAM_DEPTH: usize = 8;
const UPSTREAM_NODES: usize = 20_000;
/// Minutes after a series' data begins in which a value first seen was already there.
const SETTLING_MINUTES: i64 = 3;
/// Traces of a route read on each side of the onset for the service view (newest
/// first), and the minutes before the onset and from it they are read from: the
/// first minutes of the anomaly are where it began (a window of ten minutes read
/// newest first would give its end).
const SAMPLED_TRACES: usize = 200;
const SAMPLE_BEFORE_MINUTES: i64 = 10;
const SAMPLE_DURING_MINUTES: i64 = 3;

/// The metric of the incident's anomaly furthest off its baseline (in its own robust
/// standard deviations): what the incident's bad requests are. The first anomaly is
/// not always that one: a route's median can drift out by chance a minute before an
/// instance starts failing a third of its requests, and the errors, many times
/// further out, are then what needs explaining.
fn strongest_metric(incident: &Incident) -> Metric {
    incident
        .anomalies
        .iter()
        .max_by(|a, b| a.score.total_cmp(&b.score))
        .map_or(incident.metric, |a| a.metric)
}

/// What to diagnose: a series (route requests end to end, or a model's calls), the
/// metric that moved, and the anomaly window.
#[derive(Clone, Debug)]
pub struct RcaTarget {
    pub level: Level,
    pub filter: Vec<(Dimension, String)>,
    pub metric: Metric,
    /// Other metrics the incident moved.
    pub co_anomalies: Vec<Metric>,
    pub onset_minute: i64,
    /// The last minute of the anomaly window (inclusive).
    pub end_minute: i64,
    /// The incident diagnosed, when the target is one.
    pub incident: Option<Incident>,
}

impl RcaTarget {
    /// The incident's series (service and route, or model), strongest metric (P99
    /// rather than the median when both moved), onset and window; the other metrics
    /// it moved are co-anomalies.
    pub fn of_incident(incident: &Incident) -> Self {
        let mut filter = vec![(Dimension::Service, incident.service.clone())];
        if incident.route.is_empty() {
            filter.push((Dimension::Model, incident.model.clone()));
        } else {
            filter.push((Dimension::Route, incident.route.clone()));
        }
        // The median opens first on a step that slows every request (its band is
        // narrow), but when the tail moved too, its bad mass — requests slower than
        // nearly all before — tells the slowed requests apart far better than
        // "slower than the median" does, which half the requests always are.
        let tail_moved = incident
            .anomalies
            .iter()
            .any(|a| a.metric == Metric::P99Latency);
        let metric = match strongest_metric(incident) {
            Metric::P50Latency if tail_moved => Metric::P99Latency,
            strongest => strongest,
        };
        let co_anomalies = incident
            .anomalies
            .iter()
            .map(|a| a.metric)
            .filter(|m| *m != metric)
            .collect();
        let end = incident
            .end_minute
            .unwrap_or(incident.onset_minute + DEFAULT_WINDOW_MINUTES - 1);
        Self {
            level: Level::implied_by(filter.iter().map(|(d, _)| *d)),
            filter,
            metric,
            co_anomalies,
            onset_minute: incident.onset_minute,
            end_minute: end.clamp(
                incident.onset_minute,
                incident.onset_minute + MAX_WINDOW_MINUTES,
            ),
            incident: Some(incident.clone()),
        }
    }

    /// A series named by its dimensions (route, service, model), a metric and the
    /// onset (unix seconds); the window is the default ten minutes.
    pub fn of_series(
        filter: Vec<(Dimension, String)>,
        metric: Metric,
        at_unix_seconds: i64,
    ) -> Result<Self, DiagnosisError> {
        if filter.is_empty() {
            return Err(DiagnosisError::InvalidTarget(
                "a series is required: a route, service or model".into(),
            ));
        }
        let onset_minute = at_unix_seconds.div_euclid(60);
        Ok(Self {
            level: Level::implied_by(filter.iter().map(|(d, _)| *d)),
            filter,
            metric,
            co_anomalies: Vec::new(),
            onset_minute,
            end_minute: onset_minute + DEFAULT_WINDOW_MINUTES - 1,
            incident: None,
        })
    }

    fn value_of(&self, d: Dimension) -> Option<&str> {
        self.filter
            .iter()
            .find(|(x, _)| *x == d)
            .map(|(_, v)| v.as_str())
    }

    /// The lineage node the series hangs off: its route, else its model, else service.
    fn affected_node(&self) -> Result<NodeId, DiagnosisError> {
        let find = |d| self.value_of(d);
        match (
            find(Dimension::Route),
            find(Dimension::Model),
            find(Dimension::Service),
        ) {
            (Some(r), _, _) => Ok(NodeId::new(NodeKind::Route, r)),
            (None, Some(m), _) => Ok(NodeId::new(NodeKind::Model, m)),
            (None, None, Some(s)) => Ok(NodeId::new(NodeKind::Service, s)),
            _ => Err(DiagnosisError::InvalidTarget(
                "a series is required: a route, service or model".into(),
            )),
        }
    }
}

/// The series an incident id names, read from the store after the watcher caught up.
pub fn target_of_incident(
    watcher: &crate::IncidentWatcher,
    tenant: &TenantId,
    id: &threadline_analysis::IncidentId,
) -> Result<RcaTarget, DiagnosisError> {
    watcher.catch_up(tenant)?;
    let incident = watcher
        .store()
        .incident(tenant, id)?
        .ok_or_else(|| DiagnosisError::NotFound(format!("no incident {:?}", id.as_str())))?;
    Ok(RcaTarget::of_incident(&incident))
}

/// One ranked candidate with the traces that show it.
#[derive(Clone, Debug)]
pub struct RankedCause {
    pub rank: usize,
    pub candidate: Candidate,
    /// Slow (latency metrics) or failed requests of the candidate's value; `None` when
    /// none were looked up (later ranks, candidates that are not an attribute value).
    pub exemplars: Option<Vec<TraceId>>,
}

/// What a root-cause analysis found.
#[derive(Clone, Debug)]
pub struct RcaReport {
    pub target: RcaTarget,
    /// The first baseline minute.
    pub baseline_from_minute: i64,
    pub metric_before: Option<f64>,
    pub metric_during: Option<f64>,
    pub requests_before: u64,
    pub requests_during: u64,
    /// Share of requests per rejection reason, before and during.
    pub rejections_before: BTreeMap<String, f64>,
    pub rejections_during: BTreeMap<String, f64>,
    pub causes: Vec<RankedCause>,
}

impl RcaReport {
    /// No request of the series in the baseline or the window: nothing was ranked
    /// because nothing was there.
    pub fn is_empty_window(&self) -> bool {
        self.requests_before == 0 && self.requests_during == 0
    }
}

/// How the candidates' confidence is combined from their scores.
pub const CONFIDENCE_FORMULA: &str = "explains = 1 - (1 - contrast) * (1 - before_after); link = 1 - (1 - proximity / 2) * (1 - rule); confidence = 1 - (1 - explains) * (1 - explains * link); a part of the request or a service: time_share";

/// Cells of the target merged per series over a minute range.
fn per_series(
    cells: &[(i64, SeriesKey, RollupCell)],
    level: Level,
    filter: &[(Dimension, String)],
    from: i64,
    to: i64,
) -> Vec<(SeriesKey, RollupCell)> {
    let mut out: BTreeMap<&SeriesKey, RollupCell> = Default::default();
    for (minute, key, cell) in cells {
        if (from..=to).contains(minute) && matches_at(key, level, filter) {
            out.entry(key).or_default().merge(cell);
        }
    }
    out.into_iter().map(|(k, c)| (k.clone(), c)).collect()
}

fn reason_shares(cell: &RollupCell) -> BTreeMap<String, f64> {
    let n = cell.requests.max(1) as f64;
    cell.rejections
        .iter()
        .map(|(r, k)| (r.clone(), *k as f64 / n))
        .collect()
}

/// Ranks the causes of `target`. Blocking: reads the rollup cells, walks the lineage graph upstream of the series and looks up exemplars.
pub fn diagnose(
    store: &Store,
    tenant: &TenantId,
    rules: &FaultRules,
    target: RcaTarget,
) -> Result<RcaReport, DiagnosisError> {
    let affected = target.affected_node()?;
    let from = target.onset_minute - BASELINE_MINUTES;
    let cells = store.rollup_cells(tenant, from, target.end_minute)?;
    let baseline = per_series(
        &cells,
        target.level,
        &target.filter,
        from,
        target.onset_minute - 1,
    );
    let window = per_series(
        &cells,
        target.level,
        &target.filter,
        target.onset_minute,
        target.end_minute,
    );
    let merged =
        |series: &[(SeriesKey, RollupCell)]| series.iter().map(|(_, c)| c).collect::<RollupCell>();
    let (base_all, window_all) = (merged(&baseline), merged(&window));
    let value = |c: &RollupCell, minutes: i64| target.metric.value(c, (minutes * 60) as f64);

    let upstream = store.walk(
        tenant,
        &affected,
        &WalkLimits {
            direction: Direction::Upstream,
            depth: UPSTREAM_DEPTH,
            max_nodes: UPSTREAM_NODES,
            edge_kinds: Vec::new(),
        },
    )?;
    let mut changes = upstream
        .map(|g| changes_upstream(&g, &affected, target.onset_minute))
        .unwrap_or_default();
    // Values the series served from its first minutes on were there when its data
    // began: first seen then is no rollout (every value of a series sent since ten
    // minutes before the onset would otherwise be "new" near it).
    let first_minute = cells
        .iter()
        .filter(|(_, key, _)| matches_at(key, target.level, &target.filter))
        .map(|(minute, _, _)| *minute)
        .min();
    if let Some(first) = first_minute.filter(|m| *m > from) {
        changes.retain(|c| c.attribute.is_none() || c.at_minute > first + SETTLING_MINUTES);
    }
    // Requests whose critical paths cross services besides their model calls: only
    // then can the services' view say more than the route and its parts.
    let crossed: std::collections::BTreeSet<&str> = window
        .iter()
        .flat_map(|(_, cell)| &cell.span_time)
        .filter(|(slot, time)| !slot.is_other() && !time.model_call)
        .map(|(slot, _)| slot.service.as_str())
        .collect();
    let traces = if crossed.len() >= 2 {
        sample_traces(store, tenant, &target)?
    } else {
        None
    };
    let ranked = rank(&RcaInput {
        metric: target.metric,
        co_anomalies: target.co_anomalies.clone(),
        onset_minute: target.onset_minute,
        baseline: &baseline,
        window: &window,
        changes,
        rules,
        traces: traces.as_ref(),
    });

    // Exemplars: the slowest (latency metrics) or failed requests of the candidate's
    // value, over the baseline's quantile when there is one.
    let threshold_ms = target
        .metric
        .latency_quantile()
        .and_then(|q| base_all.latency_ms.quantile(q).ok().flatten());
    let errors_only = matches!(target.metric, Metric::ErrorRate | Metric::RejectionRate);
    // A request's entry span carries its service and route; its model fields are on
    // the model call below, with the call's own (shorter) duration: exemplars of those
    // are looked up on the calls, by route when they carry it.
    let on_spans = |d: &Dimension| EXEMPLAR_DIMENSIONS.contains(d);
    let base_filters: Vec<(Dimension, String)> = target
        .filter
        .iter()
        .filter(|(d, _)| target.level == Level::Call || *d == Dimension::Route)
        .filter(|(d, _)| on_spans(d))
        .cloned()
        .collect();
    let mut causes = Vec::new();
    for (i, candidate) in ranked.into_iter().take(CANDIDATES).enumerate() {
        let mut exemplars = None;
        let attribute = candidate
            .attribute
            .as_ref()
            .filter(|_| i < EXEMPLAR_CANDIDATES);
        if let Some((dim, v)) = attribute {
            if on_spans(dim) {
                let on_entry = matches!(dim, Dimension::Route | Dimension::AbGroup);
                let mut query = ExemplarQuery {
                    filters: base_filters.clone(),
                    from_ns: target.onset_minute * BUCKET_NS,
                    to_ns: (target.end_minute + 1) * BUCKET_NS - 1,
                    min_duration_ns: threshold_ms
                        .filter(|_| target.level == Level::Call || on_entry)
                        .map(|t| (t * 1e6) as i64),
                    errors_only,
                    limit: EXEMPLARS,
                };
                query.filters.push((*dim, v.clone()));
                let mut found = store.exemplars(tenant, &query)?;
                if found.is_empty() {
                    // The route is often set on the gateway span only (rollups
                    // inherit it); the model call's span then has no route.
                    query
                        .filters
                        .retain(|(d, _)| *d != Dimension::Route || *dim == Dimension::Route);
                    found = store.exemplars(tenant, &query)?;
                }
                exemplars = Some(found.into_iter().map(|(t, _)| t).collect());
            }
        }
        causes.push(RankedCause {
            rank: i + 1,
            candidate,
            exemplars,
        });
    }
    Ok(RcaReport {
        baseline_from_minute: from,
        metric_before: value(&base_all, BASELINE_MINUTES),
        metric_during: value(&window_all, target.end_minute - target.onset_minute + 1),
        requests_before: base_all.requests,
        requests_during: window_all.requests,
        rejections_before: reason_shares(&base_all),
        rejections_during: reason_shares(&window_all),
        causes,
        target,
    })
}

/// Traces of a route's requests before the onset and in the window's first minutes
/// (`SAMPLED_TRACES` of each, the newest), for the service view; none for a model's
/// calls.
fn sample_traces(
    store: &Store,
    tenant: &TenantId,
    target: &RcaTarget,
) -> Result<Option<TraceSamples>, DiagnosisError> {
    let (Some(service), Some(route)) = (
        target.value_of(Dimension::Service),
        target.value_of(Dimension::Route),
    ) else {
        return Ok(None);
    };
    let read = |from_minute: i64, to_minute: i64| -> Result<Vec<_>, DiagnosisError> {
        let page = store.search(
            tenant,
            &TraceQuery {
                service: Some(service.to_owned()),
                route: Some(route.to_owned()),
                names: NameMatch::Exact,
                start_from_unix_nano: Some((from_minute * BUCKET_NS).max(0) as u64),
                start_to_unix_nano: Some(((to_minute + 1) * BUCKET_NS - 1).max(0) as u64),
                limit: SAMPLED_TRACES,
                ..TraceQuery::default()
            },
        )?;
        let mut traces = Vec::with_capacity(page.traces.len());
        for t in page.traces {
            // The skeleton has what the view reads; no span's detail is opened.
            let spans = store.trace_skeleton(tenant, t.trace_id)?;
            traces.push(
                spans
                    .into_iter()
                    .map(|s| SampledSpan {
                        span_id: s.span_id,
                        parent_span_id: s.parent_span_id,
                        model_call: s.model.is_some(),
                        service: s.service,
                        name: s.name,
                        start_time_unix_nano: s.start_time_unix_nano,
                        end_time_unix_nano: s.end_time_unix_nano,
                        error: s.error,
                    })
                    .collect(),
            );
        }
        Ok(traces)
    };
    Ok(Some(TraceSamples {
        before: read(
            target.onset_minute - SAMPLE_BEFORE_MINUTES,
            target.onset_minute - 1,
        )?,
        during: read(
            target.onset_minute,
            target
                .end_minute
                .min(target.onset_minute + SAMPLE_DURING_MINUTES - 1),
        )?,
    }))
}

/// The top `n` causes of an incident (for alerts); logged and empty when the
/// analysis fails, so an alert still goes out.
pub fn top_causes(
    store: &Store,
    tenant: &TenantId,
    rules: &FaultRules,
    incident: &Incident,
    n: usize,
) -> Vec<RankedCause> {
    match diagnose(store, tenant, rules, RcaTarget::of_incident(incident)) {
        Ok(report) => report.causes.into_iter().take(n).collect(),
        Err(e) => {
            tracing::warn!(incident = %incident.id, error = %e, "no causes for the alert");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_analysis::AnomalyOnset;
    use threadline_store::EmbeddedConfig;

    use crate::test_traffic::{load, SWAP_MINUTE};

    /// The report of the slowed route: the baseline and window counts, the metric
    /// before and during, the slow adapter ranked first with exemplar traces of it.
    #[test]
    fn a_series_report_ranks_the_slow_adapter_first_with_exemplars() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_embedded(dir.path(), EmbeddedConfig::default()).unwrap();
        let tenant = TenantId::default_tenant();
        let hour_ns = 28_000_000 * BUCKET_NS;
        load(&store, &tenant, hour_ns, 0, 50, 60);
        let onset_s = (hour_ns / BUCKET_NS + SWAP_MINUTE as i64) * 60;
        let target = RcaTarget::of_series(
            vec![(Dimension::Route, "/v1/chat".into())],
            Metric::P99Latency,
            onset_s,
        )
        .unwrap();
        let report = diagnose(&store, &tenant, &FaultRules::default_rules(), target).unwrap();
        assert_eq!(report.requests_before, 40 * 60);
        assert_eq!(report.requests_during, 10 * 60);
        let (before, during) = (report.metric_before.unwrap(), report.metric_during.unwrap());
        assert!(during > 2.0 * before, "{before} → {during}");
        let top = &report.causes[0];
        assert_eq!(top.rank, 1);
        assert!(
            top.candidate.subject.contains("fin-lora@7"),
            "{:#?}",
            report.causes
        );
        assert!(!top.exemplars.as_ref().unwrap().is_empty());
        assert!(!report.is_empty_window());
    }

    /// An incident is diagnosed on its anomaly furthest out, not on its first: a
    /// median out by chance a minute before an instance fails a third of its requests
    /// leaves the errors to explain. A median that opened with the tail still gives
    /// way to the tail.
    #[test]
    fn an_incident_is_diagnosed_on_its_strongest_anomaly() {
        let onset = |metric: Metric, minute: i64, score: f64| AnomalyOnset {
            metric,
            onset_minute: minute,
            detected_minute: minute + 2,
            baseline: 1.0,
            observed: 2.0,
            score,
        };
        let mut incident = Incident {
            id: threadline_analysis::IncidentId::new("i1"),
            service: "gw".into(),
            route: "/v1/summarize".into(),
            model: String::new(),
            onset_minute: 80,
            detected_minute: 82,
            end_minute: Some(110),
            metric: Metric::P50Latency,
            anomalies: vec![onset(Metric::P50Latency, 80, 4.6)],
            score: 4.6,
            open: Vec::new(),
        };
        incident.attach(onset(Metric::ErrorRate, 81, 31.9));
        let target = RcaTarget::of_incident(&incident);
        assert_eq!(target.metric, Metric::ErrorRate);
        assert_eq!(target.co_anomalies, vec![Metric::P50Latency]);
        assert_eq!(
            (target.onset_minute, incident.metric),
            (80, Metric::P50Latency)
        );

        incident.anomalies = vec![
            onset(Metric::P50Latency, 80, 9.0),
            onset(Metric::P99Latency, 81, 5.0),
            onset(Metric::ErrorRate, 82, 3.0),
        ];
        let target = RcaTarget::of_incident(&incident);
        assert_eq!(target.metric, Metric::P99Latency);
        assert_eq!(
            target.co_anomalies,
            vec![Metric::P50Latency, Metric::ErrorRate]
        );
    }

    #[test]
    fn a_target_without_a_series_is_refused() {
        let refused = RcaTarget::of_series(Vec::new(), Metric::ErrorRate, 0).unwrap_err();
        assert!(
            matches!(refused, DiagnosisError::InvalidTarget(_)),
            "{refused}"
        );
    }
}
