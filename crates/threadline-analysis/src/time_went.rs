//! Where the time went: for latency and TTFT incidents of request series, the growth
//! of each part of the requests (a span name in a service, on the critical path) over
//! the requests' added mean time, as candidates of kind `span` with their time share
//! `D` (see `rca`).

use std::collections::BTreeMap;

use crate::cell::SpanSlot;
use crate::metric::Metric;
use crate::rca::{Candidate, CandidateKind, RcaInput};
use crate::rollup::{RollupCell, SeriesKey};

/// How one part of the requests (a span name in a service) moved between the baseline
/// and the anomaly window: its mean time on the critical path per request.
#[derive(Clone, Debug)]
struct PartShift {
    slot: SpanSlot,
    before_ms: f64,
    during_ms: f64,
    /// (during − before) over the requests' added mean latency (or time to first token).
    share: f64,
    model_call: bool,
    /// What was added: "latency", or "time to first token".
    of: &'static str,
    /// The part already was (nearly) the whole request before: it says nothing about
    /// where the time went (a request of one span, or one part around all the others),
    /// though it still counts for whether the time went into model calls.
    whole: bool,
}

/// Where the added time went (request series): the parts whose time grew, largest
/// first. The parts of a request's critical path add up to its latency, so their mean
/// shifts add up to its mean shift. For a latency incident (or one whose latency moved
/// too) the shift is the mean latency's; for a TTFT incident the mean TTFT's, over the
/// parts that are no model call (what comes before the first token: retrieval, tools,
/// queueing upstream) — `ttft`, from `before_first_token`.
fn decomposition(
    metric: Metric,
    co_anomalies: &[Metric],
    ttft: bool,
    base: &RollupCell,
    window: &RollupCell,
) -> Vec<PartShift> {
    let latency = |m: &Metric| m.latency_quantile().is_some();
    if !(latency(&metric) || ttft || co_anomalies.iter().any(latency))
        || base.requests == 0
        || window.requests == 0
    {
        return Vec::new();
    }
    let mean = |s: &sketches_ddsketch::DDSketch| {
        (s.count() > 0).then(|| s.sum().unwrap_or(0.0) / s.count() as f64)
    };
    let (before, during) = if ttft {
        (mean(&base.ttft_ms), mean(&window.ttft_ms))
    } else {
        (base.mean_latency_ms(), window.mean_latency_ms())
    };
    let (Some(mean_before), Some(mean_during)) = (before, during) else {
        return Vec::new();
    };
    let added = mean_during - mean_before;
    if added <= 0.0 {
        return Vec::new();
    }
    let (base_parts, window_parts) = (parts_of(base), parts_of(window));
    let per_request = |parts: &BTreeMap<SpanSlot, (f64, bool)>, requests: u64, slot: &SpanSlot| {
        parts
            .get(slot)
            .map_or(0.0, |(critical_ms, _)| critical_ms / requests as f64)
    };
    let mut out: Vec<PartShift> = window_parts
        .iter()
        .filter(|(slot, (_, model_call))| !(slot.is_other() || ttft && *model_call))
        .map(|(slot, (_, model_call))| {
            let before_ms = per_request(&base_parts, base.requests, slot);
            let during_ms = per_request(&window_parts, window.requests, slot);
            PartShift {
                slot: slot.clone(),
                before_ms,
                during_ms,
                share: (during_ms - before_ms) / added,
                model_call: *model_call,
                of: if ttft {
                    "time to first token"
                } else {
                    "latency"
                },
                whole: before_ms >= WHOLE_REQUEST * mean_before,
            }
        })
        .filter(|p| p.share > 0.0)
        .collect();
    out.sort_by(|a, b| b.share.total_cmp(&a.share));
    out
}

/// Whether the decomposition is of the time to the first token — a TTFT incident
/// whose latency did not move — over the parts before the model call.
fn before_first_token(metric: Metric, co_anomalies: &[Metric]) -> bool {
    metric == Metric::TtftP99 && !co_anomalies.iter().any(|m| m.latency_quantile().is_some())
}

/// The name of the part that holds a service's model calls.
pub(crate) const MODEL_CALLS: &str = "(model calls)";

/// A cell's parts: (critical-path milliseconds, model calls?) by part. A service's
/// model calls are one part whatever their span names — GenAI names them after the
/// model (`chat gpt-4o`), so a model swap is the calls growing, not a new part
/// appearing beside one that vanished.
fn parts_of(cell: &RollupCell) -> BTreeMap<SpanSlot, (f64, bool)> {
    let mut out: BTreeMap<SpanSlot, (f64, bool)> = BTreeMap::new();
    for (slot, time) in &cell.span_time {
        let slot = if time.model_call {
            SpanSlot {
                service: slot.service.clone(),
                name: MODEL_CALLS.to_owned(),
            }
        } else {
            slot.clone()
        };
        let part = out.entry(slot).or_default();
        part.0 += time.critical_ms;
        part.1 |= time.model_call;
    }
    out
}

/// The share of a request's baseline latency above which a part is the request.
pub(crate) const WHOLE_REQUEST: f64 = 0.9;

/// How far a part's growth against its own baseline counts: `1 − e^(−2·growth)` (a 5%
/// wobble of a big part is not a fault, a doubling nearly counts whole).
pub(crate) fn settled(growth: f64) -> f64 {
    1.0 - (-2.0 * growth).exp()
}

/// The score of a part as the cause: its share of the added latency, discounted when
/// the part barely grew against its own baseline (a 5% wobble of a big part is not a
/// fault), and, for a model call, by how much its own attributes (adapter, instance …)
/// explain the bad requests — then they are the more specific cause.
fn part_score(p: &PartShift, call_explained: f64) -> f64 {
    let growth = (p.during_ms - p.before_ms) / p.before_ms.max(1.0);
    let own = if p.model_call {
        1.0 - call_explained
    } else {
        1.0
    };
    (p.share.clamp(0.0, 1.0) * settled(growth) * own).clamp(0.0, 1.0)
}

pub(crate) fn ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} s", v / 1000.0)
    } else {
        format!("{v:.0} ms")
    }
}

/// Where the added time of the incident's requests went, decomposed once per ranking
/// (the merged baseline and window, over every series in scope).
pub(crate) struct TimeWent {
    parts: Vec<PartShift>,
    /// The parts are those before the first token (no model call among them).
    before_first_token: bool,
}

impl TimeWent {
    pub(crate) fn of(input: &RcaInput<'_>) -> Self {
        let merged = |cells: &[(SeriesKey, RollupCell)]| cells.iter().map(|(_, c)| c).collect();
        let (base_all, window_all): (RollupCell, RollupCell) =
            (merged(input.baseline), merged(input.window));
        let before_first_token = before_first_token(input.metric, &input.co_anomalies);
        Self {
            parts: decomposition(
                input.metric,
                &input.co_anomalies,
                before_first_token,
                &base_all,
                &window_all,
            ),
            before_first_token,
        }
    }

    /// The share of the requests' added time that went into model calls, when the
    /// decomposition applies: what a change to a model call's own attributes (prompt,
    /// adapter, image …) can explain at most. Of the time to the first token, what
    /// the parts before the call did not take.
    pub(crate) fn model_call_share(&self) -> Option<f64> {
        if self.parts.is_empty() {
            return None;
        }
        if self.before_first_token {
            let before: f64 = self.parts.iter().map(|p| p.share.max(0.0)).sum();
            return Some((1.0 - before).clamp(0.0, 1.0));
        }
        let total: f64 = self.parts.iter().map(|p| p.share.max(0.0)).sum();
        let calls: f64 = self
            .parts
            .iter()
            .filter(|p| p.model_call)
            .map(|p| p.share.max(0.0))
            .sum();
        (total > 0.0).then(|| (calls / total).clamp(0.0, 1.0))
    }

    /// The `span` candidates (the three parts whose time grew most, scored by
    /// `part_score`) and the breakdown every candidate carries as evidence.
    pub(crate) fn candidates(
        &self,
        call_explained: f64,
    ) -> (Vec<Candidate>, Vec<serde_json::Value>) {
        let parts: Vec<&PartShift> = self.parts.iter().filter(|p| !p.whole).collect();
        let breakdown = parts
            .iter()
            .take(5)
            .map(|p| {
                serde_json::json!({
                    "service": p.slot.service, "span": p.slot.name,
                    "ms_per_request_before": p.before_ms, "ms_per_request_during": p.during_ms,
                    "share_of_added": p.share, "added": p.of,
                })
            })
            .collect();
        let mut out = Vec::new();
        for p in parts.iter().take(3) {
            let d = part_score(p, call_explained);
            if d <= 0.0 {
                continue;
            }
            out.push(Candidate {
                kind: CandidateKind::Span,
                subject: format!("service={} span={}", p.slot.service, p.slot.name),
                // No lineage change or rule speaks for a part: its share is its confidence.
                confidence: d,
                contrast: 0.0,
                before_after: 0.0,
                proximity: 0.0,
                rule: 0.0,
                time_share: d,
                explanation: format!(
                    "{} on {}: {} → {} per request on the critical path, {:.0}% of the added {}",
                    p.slot.name,
                    p.slot.service,
                    ms(p.before_ms),
                    ms(p.during_ms),
                    p.share * 100.0,
                    p.of,
                ),
                evidence: serde_json::json!({
                    "service": p.slot.service,
                    "span": p.slot.name,
                    "ms_per_request_before": p.before_ms,
                    "ms_per_request_during": p.during_ms,
                    "share_of_added": p.share,
                    "added": p.of,
                    "model_call": p.model_call,
                }),
                attribute: None,
            });
        }
        (out, breakdown)
    }
}
