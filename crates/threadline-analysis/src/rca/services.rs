//! Which **service** the added time or the new failures of a route's requests go back
//! to, read from sampled traces before and during the anomaly (kind `service`).
//!
//! The rollups keep where a route's time went by span name, at most
//! `MAX_SPAN_SLOTS` of them: enough for an LLM request, not for a request that crosses
//! forty microservices. And a service whose network is slow shows in none of its own
//! spans: the time appears in its callers' client spans, between their start and the
//! start of its server span and after its end. So, per sampled trace, each span on the
//! critical path is either **own time** of its service, or — a span that calls another
//! service (a child in another service) — the **gap** of that call, which belongs to
//! one of its ends or both: the callee's (its network, its queue), the caller's (its
//! network too: a delay on a pod's interface slows what it sends as much as what it
//! receives; a starved caller is slow to send and read). Which end, **the one whose
//! other calls slowed alike** (`gap_shares`): with `a` and `b` how much A's and B's
//! other calls, in and out, slowed per call as a share of this call's slowing, B
//! carries `1 − a(1 − b)` of it and A `(1 − b)(½ + ½a)`. A call whose callee's other
//! calls slowed alike is the callee's alone; one whose caller's did and callee's did
//! not, the caller's; where neither end's other calls slowed (or there are none to
//! tell), the callee carries the gap whole and the caller half. A service's
//! **contribution** is the growth of its own time plus its shares of the calls' gaps,
//! per request; its share of the request's added mean latency, discounted when it
//! barely grew against its own baseline, is its score `D` — as for the rollups'
//! parts.
//!
//! For failures (error rate), a request failed when any of its spans did, and its
//! failure began in the services of the failed spans below which nothing failed; a
//! service's score is the rise of the share of requests whose failure began there,
//! over the rise of the failure rate.

use std::collections::BTreeMap;

use threadline_model::trace_tree::{critical_path, Tree};
use threadline_model::SpanId;

use crate::metric::Metric;
use crate::rca::{Candidate, CandidateKind};
use crate::time_went::{ms, settled, WHOLE_REQUEST};

/// What the service view reads of a span (a store's trace skeleton has it).
#[derive(Clone, Debug, PartialEq)]
pub struct SampledSpan {
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub service: String,
    pub name: String,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub error: bool,
    /// It names a model: a model call.
    pub model_call: bool,
}

impl SampledSpan {
    fn duration_nanos(&self) -> u64 {
        self.end_time_unix_nano
            .saturating_sub(self.start_time_unix_nano)
    }
}

/// The traces of a route sampled before the onset and during the anomaly (each one
/// trace's spans).
#[derive(Clone, Debug, Default)]
pub struct TraceSamples {
    pub before: Vec<Vec<SampledSpan>>,
    pub during: Vec<Vec<SampledSpan>>,
}

/// The weight of a slower call's gap on its caller when no other call tells which
/// end slowed (the callee carries it whole).
const CALLER_WEIGHT: f64 = 0.5;
/// Calls of a caller into a callee, in both samples, for their mean gap per call to
/// tell which end slowed.
const MIN_CALLS: u64 = 5;
/// A service whose contribution is this much one of its own span names is that span
/// (the rollups' part names it, more specifically).
const ONE_PART: f64 = 0.8;
/// Services a route's sampled requests must cross for the service view to say more
/// than the route itself.
const MIN_SERVICES: usize = 2;

/// Milliseconds per trace summed over a sample, by what they are.
#[derive(Clone, Debug, Default)]
struct ServiceTime {
    /// On its own spans (model calls left out), by span name.
    own: BTreeMap<String, f64>,
    /// Requests whose failure began here.
    failures_began: u64,
}

/// The calls of one service into another on the critical path, summed over a sample.
#[derive(Clone, Copy, Debug, Default)]
struct Calls {
    count: u64,
    /// Their gaps: the caller's client span less the callee's spans.
    gap_ms: f64,
}

#[derive(Debug, Default)]
struct Sample {
    traces: u64,
    latency_ms: f64,
    failed: u64,
    by_service: BTreeMap<String, ServiceTime>,
    /// By (caller, callee).
    calls: BTreeMap<(String, String), Calls>,
}

impl Sample {
    fn of(traces: &[Vec<SampledSpan>]) -> Self {
        let mut out = Sample::default();
        for spans in traces {
            out.add(spans);
        }
        out
    }

    fn add(&mut self, spans: &[SampledSpan]) {
        let tree = Tree::of(spans.iter().map(|s| (s.span_id, s.parent_span_id)));
        // The entry: the longest span without a parent in the trace.
        let Some(root) = (0..spans.len())
            .filter(|&i| tree.parent[i].is_none())
            .max_by_key(|&i| (spans[i].duration_nanos(), std::cmp::Reverse(i)))
        else {
            return;
        };
        let times: Vec<(u64, u64)> = spans
            .iter()
            .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano))
            .collect();
        let on = critical_path(&times, &tree.children, [root]);
        self.traces += 1;
        self.latency_ms += spans[root].duration_nanos() as f64 / 1e6;
        for (j, ns) in on.iter().enumerate() {
            let Some(ns) = ns else { continue };
            let t = *ns as f64 / 1e6;
            let span = &spans[j];
            let callee = tree.children[j]
                .iter()
                .filter(|&&c| spans[c].service != span.service)
                .max_by_key(|&&c| spans[c].duration_nanos())
                .map(|&c| spans[c].service.as_str());
            match callee {
                Some(callee) => {
                    let calls = self
                        .calls
                        .entry((span.service.clone(), callee.to_owned()))
                        .or_default();
                    calls.count += 1;
                    calls.gap_ms += t;
                }
                // A model call's own time is its attributes' to explain (adapter,
                // instance …) and the rollups' part's to show.
                None if span.model_call => {}
                None => {
                    *self
                        .service(&span.service)
                        .own
                        .entry(span.name.clone())
                        .or_default() += t;
                }
            }
        }
        let failed: Vec<usize> = (0..spans.len()).filter(|&i| spans[i].error).collect();
        if !failed.is_empty() {
            self.failed += 1;
            // Each service once per request; a failed model call is its
            // attributes' to explain (as its time is).
            let mut began: Vec<&str> = failed
                .iter()
                .filter(|&&i| !spans[i].model_call)
                .filter(|&&i| !tree.children[i].iter().any(|&c| spans[c].error))
                .map(|&i| spans[i].service.as_str())
                .collect();
            began.sort_unstable();
            began.dedup();
            for s in began {
                self.service(s).failures_began += 1;
            }
        }
    }

    fn service(&mut self, name: &str) -> &mut ServiceTime {
        if !self.by_service.contains_key(name) {
            self.by_service
                .insert(name.to_owned(), ServiceTime::default());
        }
        self.by_service.get_mut(name).expect("inserted above")
    }

    fn per_trace(&self, v: f64) -> f64 {
        v / self.traces.max(1) as f64
    }

    /// The services of its traces: with spans of their own, or at an end of a call.
    fn services(&self) -> std::collections::BTreeSet<&str> {
        let ends = self
            .calls
            .keys()
            .flat_map(|(a, b)| [a.as_str(), b.as_str()]);
        self.by_service
            .keys()
            .map(String::as_str)
            .chain(ends)
            .collect()
    }

    /// The gaps of the calls into `service` and of its calls out, summed.
    fn gaps(&self, service: &str) -> (f64, f64) {
        self.calls
            .iter()
            .fold((0.0, 0.0), |(called, calling), ((a, b), c)| {
                (
                    called + if b == service { c.gap_ms } else { 0.0 },
                    calling + if a == service { c.gap_ms } else { 0.0 },
                )
            })
    }
}

/// How one service's time moved, per request.
#[derive(Clone, Debug)]
struct Shift {
    service: String,
    before_ms: f64,
    during_ms: f64,
    /// Of the growth: in its own spans, its shares of the calls into it and of its
    /// calls out (`gap_shares`).
    own_ms: f64,
    called_ms: f64,
    calling_ms: f64,
    /// Its own span name that grew most, and by how much.
    top_part: Option<(String, f64)>,
}

impl Shift {
    fn contribution(&self) -> f64 {
        self.own_ms + self.called_ms + self.calling_ms
    }
}

/// Per service, the growth of the gaps of calls into it and of its calls out that it
/// carries, in ms per request (see the module's docs): each call's growth shared
/// between its ends by how much their other calls slowed per call.
fn gap_shares<'a>(before: &'a Sample, during: &'a Sample) -> BTreeMap<&'a str, (f64, f64)> {
    let empty = Calls::default();
    // The growth of the mean gap per call, where both samples hold enough calls.
    let slowed = |edge: &(String, String)| {
        let (b, d) = (
            before.calls.get(edge).unwrap_or(&empty),
            &during.calls[edge],
        );
        (b.count >= MIN_CALLS && d.count >= MIN_CALLS)
            .then(|| d.gap_ms / d.count as f64 - b.gap_ms / b.count as f64)
    };
    // How much the calls among `others` slowed per call, weighted by their counts.
    let breadth = |others: &mut dyn Iterator<Item = &(String, String)>| {
        let (mut weighted, mut count) = (0.0, 0.0);
        for edge in others {
            if let Some(delta) = slowed(edge) {
                let n = during.calls[edge].count as f64;
                weighted += n * delta;
                count += n;
            }
        }
        (count > 0.0).then(|| (weighted / count).max(0.0))
    };
    let mut out: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for edge @ (caller, callee) in during.calls.keys() {
        let grew = during.per_trace(during.calls[edge].gap_ms)
            - before.per_trace(before.calls.get(edge).unwrap_or(&empty).gap_ms);
        let (callee_share, caller_share) = match slowed(edge).filter(|d| grew > 0.0 && *d > 0.0) {
            None => (1.0, CALLER_WEIGHT),
            Some(delta) => {
                let of = |v: Option<f64>| v.map(|v| (v / delta).clamp(0.0, 1.0));
                // Every other call of an end, in or out: a delay on a pod's interface
                // slows what it sends and what it receives.
                let alike = |end: &String| {
                    of(breadth(&mut during.calls.keys().filter(|other| {
                        *other != edge && (&other.0 == end || &other.1 == end)
                    })))
                };
                let (callee_alike, caller_alike) = (alike(callee), alike(caller));
                // No other call to tell counts as none slowed: the default shares.
                let (b, a) = (callee_alike.unwrap_or(0.0), caller_alike.unwrap_or(0.0));
                (
                    1.0 - a * (1.0 - b),
                    (1.0 - b) * (CALLER_WEIGHT + (1.0 - CALLER_WEIGHT) * a),
                )
            }
        };
        out.entry(callee.as_str()).or_default().0 += callee_share * grew;
        out.entry(caller.as_str()).or_default().1 += caller_share * grew;
    }
    // Calls that stopped: their gaps' fall, shared as by default.
    for edge @ (caller, callee) in before.calls.keys() {
        if !during.calls.contains_key(edge) {
            let fell = before.per_trace(before.calls[edge].gap_ms);
            out.entry(callee.as_str()).or_default().0 -= fell;
            out.entry(caller.as_str()).or_default().1 -= CALLER_WEIGHT * fell;
        }
    }
    out
}

/// What the sampled traces say of the services: the `service` candidates for
/// `metric`, best first, and every service's score (those left to a part too).
#[derive(Debug, Default)]
pub(crate) struct ServiceView {
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) scores: BTreeMap<String, f64>,
}

impl ServiceView {
    /// A part of a service cannot be surer than the service's own view from the
    /// traces: a caller's client span into a slower service holds time the traces
    /// give that service (where the rollups can only name the caller's span).
    pub(crate) fn cap_part(&self, part: &mut Candidate) {
        let service = part.evidence["service"].as_str().unwrap_or_default();
        if let Some(score) = self.scores.get(service) {
            part.confidence = part.confidence.min(*score);
            part.time_share = part.time_share.min(*score);
        }
    }
}

/// The service view of the sampled traces for `metric`. Model calls' own time and
/// failures are left out: their own attributes (adapter, instance …) and the
/// rollups' parts say more of them. `named_parts` are the subjects of the span
/// candidates already ranked: a service that is one of them is left to it.
pub(crate) fn view(metric: Metric, samples: &TraceSamples, named_parts: &[String]) -> ServiceView {
    let (before, during) = (Sample::of(&samples.before), Sample::of(&samples.during));
    if before.traces == 0 || during.traces == 0 {
        return ServiceView::default();
    }
    let crossed = before.services().union(&during.services()).count();
    if crossed < MIN_SERVICES {
        return ServiceView::default();
    }
    let scored = match metric {
        Metric::ErrorRate => failure_candidates(&before, &during),
        m if m.latency_quantile().is_some() => latency_candidates(&before, &during),
        _ => Vec::new(),
    };
    let mut view = ServiceView::default();
    for (candidate, top_part) in scored {
        let service = candidate.evidence["service"].as_str().unwrap_or_default();
        view.scores.insert(service.to_owned(), candidate.confidence);
        // One own span name that is nearly all of it: the part is the cause, named.
        let left_to_part = top_part
            .is_some_and(|name| named_parts.contains(&format!("service={service} span={name}")));
        if !left_to_part {
            view.candidates.push(candidate);
        }
    }
    view.candidates
        .sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    view
}

/// The services' candidates, each with its own span name that is nearly all of its
/// contribution (`ONE_PART`), if one is.
fn latency_candidates(before: &Sample, during: &Sample) -> Vec<(Candidate, Option<String>)> {
    // The requests' mean may not have grown where a tail did (a slower service that
    // few requests reach): the shares are then of the largest contribution.
    let added = during.per_trace(during.latency_ms) - before.per_trace(before.latency_ms);
    let empty = ServiceTime::default();
    let services = during.services();
    let mean_before = before.per_trace(before.latency_ms);
    let gaps = gap_shares(before, during);
    let mut shifts = Vec::new();
    for service in services {
        let b = before.by_service.get(service).unwrap_or(&empty);
        let d = during.by_service.get(service).unwrap_or(&empty);
        let own =
            |s: &Sample, t: &ServiceTime, name: &str| s.per_trace(*t.own.get(name).unwrap_or(&0.0));
        let own_total = |s: &Sample, t: &ServiceTime| s.per_trace(t.own.values().sum());
        let top_part = d
            .own
            .keys()
            .map(|name| (name.clone(), own(during, d, name) - own(before, b, name)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let total = |s: &Sample, t: &ServiceTime| {
            let (called, calling) = s.gaps(service);
            own_total(s, t) + s.per_trace(called) + CALLER_WEIGHT * s.per_trace(calling)
        };
        let shift = Shift {
            service: service.to_owned(),
            before_ms: total(before, b),
            during_ms: total(during, d),
            own_ms: own_total(during, d) - own_total(before, b),
            called_ms: gaps.get(service).map_or(0.0, |g| g.0),
            calling_ms: gaps.get(service).map_or(0.0, |g| g.1),
            top_part,
        };
        // A service that held nearly all of the requests' time before is the request:
        // it says nothing of where the added time went (as for the rollups' parts).
        let whole = shift.before_ms >= WHOLE_REQUEST * mean_before;
        if shift.contribution() > 0.0 && !whole {
            shifts.push(shift);
        }
    }
    // A call's gap counts for both of its ends: the shares are of the added latency, or
    // of the largest contribution when that is more (each service's gaps counted by
    // both ends add up to more than the requests' added time).
    let denominator = shifts.iter().map(Shift::contribution).fold(added, f64::max);
    let mut out = Vec::new();
    for shift in shifts {
        let contribution = shift.contribution();
        let one_part = shift
            .top_part
            .as_ref()
            .filter(|(_, grew)| *grew >= ONE_PART * contribution)
            .map(|(name, _)| name.clone());
        let share = (contribution / denominator).clamp(0.0, 1.0);
        let d = share * settled(contribution / shift.before_ms.max(1.0));
        if d <= 0.0 {
            continue;
        }
        out.push((service_candidate(
            &shift.service,
            d,
            format!(
                "{}: {} → {} per request in its spans and calls ({} own, {} in calls to it, {} in its calls), {:.0}% of the added latency",
                shift.service,
                ms(shift.before_ms),
                ms(shift.during_ms),
                signed_ms(shift.own_ms),
                signed_ms(shift.called_ms),
                signed_ms(shift.calling_ms),
                share * 100.0
            ),
            serde_json::json!({
                "service": shift.service,
                "ms_per_request_before": shift.before_ms,
                "ms_per_request_during": shift.during_ms,
                "own_ms_added": shift.own_ms,
                "called_ms_added": shift.called_ms,
                "calling_ms_added": shift.calling_ms,
                "top_span": shift.top_part.as_ref().map(|(n, _)| n),
                "share_of_added": share,
                "traces_before": before.traces,
                "traces_during": during.traces,
            }),
        ), one_part));
    }
    out
}

fn failure_candidates(before: &Sample, during: &Sample) -> Vec<(Candidate, Option<String>)> {
    let rate = |s: &Sample, n: u64| n as f64 / s.traces.max(1) as f64;
    let rise = rate(during, during.failed) - rate(before, before.failed);
    if rise <= 0.0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (service, d) in &during.by_service {
        let b = before.by_service.get(service);
        let (n_before, n_during) = (b.map_or(0, |b| b.failures_began), d.failures_began);
        let (r_before, r_during) = (rate(before, n_before), rate(during, n_during));
        let excess = r_during - r_before;
        if excess <= 0.0 {
            continue;
        }
        let share = (excess / rise).clamp(0.0, 1.0);
        let score = share * settled(excess / r_before.max(1.0 / before.traces.max(1) as f64));
        out.push((service_candidate(
            service,
            score,
            format!(
                "{service}: failures began here in {:.1}% of the requests (before {:.1}%), {:.0}% of the added failures",
                r_during * 100.0,
                r_before * 100.0,
                share * 100.0
            ),
            serde_json::json!({
                "service": service,
                "failures_began_rate_before": r_before,
                "failures_began_rate_during": r_during,
                "share_of_added_failures": share,
                "traces_before": before.traces,
                "traces_during": during.traces,
            }),
        ), None));
    }
    out
}

fn signed_ms(v: f64) -> String {
    if v < 0.0 {
        format!("−{}", ms(-v))
    } else {
        format!("+{}", ms(v))
    }
}

fn service_candidate(
    service: &str,
    score: f64,
    explanation: String,
    evidence: serde_json::Value,
) -> Candidate {
    Candidate {
        kind: CandidateKind::Service,
        subject: format!("service={service}"),
        // Like a part: no lineage change or rule speaks for a service; its share is
        // its confidence.
        confidence: score,
        contrast: 0.0,
        before_after: 0.0,
        proximity: 0.0,
        rule: 0.0,
        time_share: score,
        explanation,
        evidence,
        attribute: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request: gateway → `orders` → `leaf`, with `gap_ms` of network around the
    /// call into `leaf` and `leaf_ms` in it; `failed` marks the leaf's span ERROR.
    fn request(n: u64, gap_ms: u64, leaf_ms: u64, leaf: &str, failed: bool) -> Vec<SampledSpan> {
        let ms = 1_000_000u64;
        let start = n * 10_000 * ms;
        let span = |id: u8, parent: Option<u8>, service: &str, name: &str, from: u64, to: u64| {
            SampledSpan {
                span_id: SpanId([id; 8]),
                parent_span_id: parent.map(|p| SpanId([p; 8])),
                name: name.into(),
                service: service.into(),
                start_time_unix_nano: start + from * ms,
                end_time_unix_nano: start + to * ms,
                error: false,
                model_call: false,
            }
        };
        let inner = 10 + gap_ms + leaf_ms;
        let mut leaf_span = span(
            4,
            Some(3),
            leaf,
            "lookup",
            15 + gap_ms / 2,
            15 + gap_ms / 2 + leaf_ms,
        );
        leaf_span.error = failed;
        vec![
            span(1, None, "gateway", "/*", 0, inner + 20),
            span(2, Some(1), "orders", "/api/orders", 5, inner + 15),
            span(3, Some(2), "orders", "HTTP GET", 10, inner + 10),
            leaf_span,
        ]
    }

    fn samples(
        before: impl Fn(u64) -> Vec<SampledSpan>,
        during: impl Fn(u64) -> Vec<SampledSpan>,
    ) -> TraceSamples {
        TraceSamples {
            before: (0..50).map(&before).collect(),
            during: (50..100).map(&during).collect(),
        }
    }

    #[test]
    fn a_slow_network_into_a_service_is_that_service() {
        // The leaf's own span is unchanged; the call into it takes 200 ms longer.
        let s = samples(
            |n| request(n, 10, 20, "contacts", false),
            |n| request(n, 210, 20, "contacts", false),
        );
        let out = view(Metric::P99Latency, &s, &[]).candidates;
        assert_eq!(out[0].subject, "service=contacts", "{out:#?}");
        assert!(out[0].confidence > 0.8, "{out:#?}");
        // The caller carries half the gap: second.
        assert_eq!(out[1].subject, "service=orders");
        assert!(out[1].confidence < out[0].confidence);
    }

    /// One request: the gateway calls `preserve` (which calls `route` three times,
    /// then `contacts`, then works 150 ms), then `travel` (which calls `route`); each other
    /// server span 10 ms, each
    /// call's gap 4 ms plus `preserve_ms` on every call from or to `preserve` and
    /// `route_ms` on every call into `route`.
    fn fan(n: u64, preserve_ms: u64, route_ms: u64) -> Vec<SampledSpan> {
        let ms = 1_000_000u64;
        let start = n * 10_000 * ms;
        let span = |id: u8, parent: Option<u8>, service: &str, from: u64, to: u64| SampledSpan {
            span_id: SpanId([id; 8]),
            parent_span_id: parent.map(|p| SpanId([p; 8])),
            name: format!("{service} {id}"),
            service: service.into(),
            start_time_unix_nano: start + from * ms,
            end_time_unix_nano: start + to * ms,
            error: false,
            model_call: false,
        };
        let mut spans: Vec<SampledSpan> = Vec::new();
        // A client span of `caller` from `at`, and the server span `id + 1` of
        // `callee` lasting `inner` in its middle; returns where the server span starts.
        let mut call = |parent, id: u8, caller, callee, gap: u64, at: u64, inner: u64| {
            spans.push(span(id, Some(parent), caller, at, at + gap + inner));
            spans.push(span(
                id + 1,
                Some(id),
                callee,
                at + gap / 2,
                at + gap / 2 + inner,
            ));
            at + gap / 2
        };
        let (p, r) = (preserve_ms, route_ms);
        let (into_route, into_contacts) = (4 + p + r + 10, 4 + p + 10);
        // `preserve` works 150 ms of its own after its calls.
        let inner = 3 * into_route + into_contacts + 150;
        let preserve = call(1, 10, "gateway", "preserve", 4 + p, 0, inner);
        for k in 0..3 {
            call(
                11,
                12 + 2 * k as u8,
                "preserve",
                "route",
                4 + p + r,
                preserve + k * into_route,
                10,
            );
        }
        call(
            11,
            18,
            "preserve",
            "contacts",
            4 + p,
            preserve + 3 * into_route,
            10,
        );
        let second = 4 + p + inner;
        let travel = call(1, 20, "gateway", "travel", 4, second, 4 + r + 10);
        call(21, 22, "travel", "route", 4 + r, travel, 10);
        let end = second + 4 + 4 + r + 10 + 20;
        spans.push(span(1, None, "gateway", 0, end));
        spans
    }

    #[test]
    fn a_slower_call_belongs_to_the_end_whose_other_calls_slowed_too() {
        // `preserve`'s network: its calls into `route` and `contacts` and the
        // gateway's into it slow; `travel`'s call into `route` does not.
        let s = samples(|n| fan(n, 0, 0), |n| fan(n, 40, 0));
        let out = view(Metric::P99Latency, &s, &[]).candidates;
        assert_eq!(out[0].subject, "service=preserve", "{out:#?}");
        // `route`'s network: every call into it slows, whoever the caller.
        let s = samples(|n| fan(n, 0, 0), |n| fan(n, 0, 40));
        let out = view(Metric::P99Latency, &s, &[]).candidates;
        assert_eq!(out[0].subject, "service=route", "{out:#?}");
        assert!(
            out.iter()
                .all(|c| c.subject != "service=preserve" || c.confidence < 0.5 * out[0].confidence),
            "{out:#?}"
        );
    }

    #[test]
    fn a_slower_service_few_requests_reach_is_named_though_the_mean_fell() {
        // One request in ten now goes through `food`, whose network is 200 ms slower;
        // the others got 80 ms faster in `contacts`: the mean fell, the tail grew.
        let s = samples(
            |n| request(n, 10, 100, "contacts", false),
            |n| match n % 10 {
                0 => request(n, 210, 20, "food", false),
                _ => request(n, 10, 20, "contacts", false),
            },
        );
        let out = view(Metric::P99Latency, &s, &[]).candidates;
        assert_eq!(out[0].subject, "service=food", "{out:#?}");
    }

    #[test]
    fn a_slower_own_span_is_left_to_the_part_that_names_it() {
        let s = samples(
            |n| request(n, 10, 20, "contacts", false),
            |n| request(n, 10, 220, "contacts", false),
        );
        let out = view(Metric::P99Latency, &s, &[]).candidates;
        assert_eq!(out[0].subject, "service=contacts");
        let named = ["service=contacts span=lookup".to_owned()];
        let out = view(Metric::P99Latency, &s, &named).candidates;
        assert!(
            out.iter().all(|c| c.subject != "service=contacts"),
            "{out:#?}"
        );
    }

    #[test]
    fn failures_go_to_the_service_where_they_began() {
        let s = samples(
            |n| request(n, 10, 20, "contacts", n % 25 == 0),
            |n| request(n, 10, 20, "contacts", n % 3 == 0),
        );
        let out = view(Metric::ErrorRate, &s, &[]).candidates;
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(out[0].subject, "service=contacts");
        assert!(out[0].confidence > 0.7, "{out:#?}");
        // Nothing moved: nothing to say.
        let same = samples(
            |n| request(n, 10, 20, "contacts", false),
            |n| request(n, 10, 20, "contacts", false),
        );
        assert!(view(Metric::ErrorRate, &same, &[]).candidates.is_empty());
        assert!(view(Metric::P99Latency, &same, &[]).candidates.is_empty());
    }

    #[test]
    fn failed_model_calls_are_left_to_their_own_attributes() {
        let as_call = |mut spans: Vec<SampledSpan>| {
            spans[3].model_call = true;
            spans
        };
        let s = samples(
            |n| as_call(request(n, 10, 20, "vllm", n % 25 == 0)),
            |n| as_call(request(n, 10, 20, "vllm", n % 3 == 0)),
        );
        assert!(view(Metric::ErrorRate, &s, &[]).candidates.is_empty());
    }

    #[test]
    fn a_service_that_was_nearly_the_whole_request_says_nothing() {
        // The leaf holds 500 of 540 ms before: its growth is the request's.
        let s = samples(
            |n| request(n, 10, 500, "vllm", false),
            |n| request(n, 10, 900, "vllm", false),
        );
        let out = view(Metric::P99Latency, &s, &[]).candidates;
        assert!(out.iter().all(|c| c.subject != "service=vllm"), "{out:#?}");
    }
}
