//! Values that move together are one cause: folding co-moving candidates into the
//! better-ranked, more specific one.

use super::{Candidate, CandidateKind};
use crate::rollup::{Dimension, RollupCell, SeriesKey};

/// Requests of the window carrying `a` that also carry `b`, over those carrying `a`.
pub(super) fn overlap(
    window: &[(SeriesKey, RollupCell)],
    a: &(Dimension, String),
    b: &(Dimension, String),
) -> f64 {
    let (mut with_a, mut both) = (0u64, 0u64);
    for (k, c) in window {
        if k.get(a.0) == a.1 {
            with_a += c.requests;
            if k.get(b.0) == b.1 {
                both += c.requests;
            }
        }
    }
    if with_a == 0 {
        0.0
    } else {
        both as f64 / with_a as f64
    }
}

/// Share of a value's requests that must also carry a better-ranked value for the two
/// to move together.
pub(super) const CO_MOVING: f64 = 0.9;

/// Whether `a` is on only part of the window's requests (less than `CO_MOVING` of
/// them).
pub(super) fn partial(window: &[(SeriesKey, RollupCell)], a: &(Dimension, String)) -> bool {
    let (mut with, mut total) = (0u64, 0u64);
    for (k, c) in window {
        total += c.requests;
        if k.get(a.0) == a.1 {
            with += c.requests;
        }
    }
    total > 0 && (with as f64) < CO_MOVING * total as f64
}

/// Values that move together — an adapter loaded only on some instances, the image
/// those instances still run — are one cause, not rivals splitting the confidence:
/// a candidate whose requests (nearly) all carry the value of a better-ranked one is
/// folded into it, listed under its `co_moving` evidence; the better-ranked, more
/// specific one (a lineage change before a bare attribute, then by confidence) stays.
/// `share_before` is a candidate's value's share of requests before the onset.
pub(super) fn fold_co_moving(
    window: &[(SeriesKey, RollupCell)],
    ranked: Vec<Candidate>,
    share_before: &dyn Fn(&Candidate) -> i64,
) -> Vec<Candidate> {
    // A value on (nearly) every request holds every other one: that is no co-movement.
    let partial = |a: &(Dimension, String)| partial(window, a);
    let mut out: Vec<Candidate> = Vec::with_capacity(ranked.len());
    for cand in ranked {
        let host = cand.attribute.as_ref().and_then(|b| {
            out.iter().position(|kept| {
                kept.attribute
                    .as_ref()
                    .is_some_and(|a| a.0 != b.0 && partial(a) && overlap(window, b, a) >= CO_MOVING)
            })
        });
        match host {
            Some(i) => {
                // Of two candidates on the same requests that explain them alike,
                // the more specific leads.
                let mut cand = cand;
                if more_specific_alike(window, &out[i], &cand, share_before) {
                    std::mem::swap(&mut out[i], &mut cand);
                    if let Some(list) = cand.evidence.get_mut("co_moving").map(std::mem::take) {
                        out[i].evidence["co_moving"] = list;
                    }
                    out[i].confidence = out[i].confidence.max(cand.confidence);
                }
                let entry = serde_json::json!({
                    "kind": cand.kind,
                    "subject": cand.subject,
                    "confidence": cand.confidence,
                    "explanation": cand.explanation,
                });
                match out[i]
                    .evidence
                    .get_mut("co_moving")
                    .and_then(|v| v.as_array_mut())
                {
                    Some(list) => list.push(entry),
                    None => out[i].evidence["co_moving"] = serde_json::json!([entry]),
                }
            }
            None => out.push(cand),
        }
    }
    out
}

/// Confidences this close are alike: the evidence does not tell the two apart.
const ALIKE: f64 = 0.01;

/// Whether `b`, to be folded into the better-ranked `a`, should lead instead: the two
/// on the same requests (each holding nearly all of the other's), confidences alike,
/// and `b` the more specific — a lineage change before a bare attribute value (the
/// adapter hot-swapped onto two instances before the old image only they still run),
/// then the value on fewer requests before the onset (a failing instance before that
/// old image).
fn more_specific_alike(
    window: &[(SeriesKey, RollupCell)],
    a: &Candidate,
    b: &Candidate,
    share_before: &dyn Fn(&Candidate) -> i64,
) -> bool {
    let specificity = |c: &Candidate| (c.kind == CandidateKind::Attribute, share_before(c));
    match (&a.attribute, &b.attribute) {
        (Some(x), Some(y)) => {
            a.confidence - b.confidence < ALIKE
                && specificity(b) < specificity(a)
                && overlap(window, x, y) >= CO_MOVING
                && overlap(window, y, x) >= CO_MOVING
        }
        _ => false,
    }
}
