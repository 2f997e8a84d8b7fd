//! `rank` on the three shapes of fault a ranking by co-occurrence got wrong (#38): a
//! concentration of bad requests that was already there, a change that took over all
//! of the traffic, a value that appears only with the fault.

use super::tests::{cell, img_2_at, key, rank_at_onset, rank_p99};
use super::*;

/// Three instances, i-3 always 1.7× slower (it serves the long prompts); a new image
/// on every instance slows every request 1.7×. Before and during, i-3 holds most of
/// the requests slower than the route's P99 — against its own tail it got no worse
/// than the others, so it explains nothing.
#[test]
fn a_value_that_always_held_the_slow_requests_explains_nothing_of_a_change_on_all() {
    let slow = |i: &str| if i == "i-3" { 1.7 } else { 1.0 };
    let baseline: Vec<_> = ["i-1", "i-2", "i-3"]
        .iter()
        .map(|i| (key(i, "", "v2", "img:1"), cell(600.0 * slow(i), 400, 0.8)))
        .collect();
    let window: Vec<_> = ["i-1", "i-2", "i-3"]
        .iter()
        .map(|i| {
            let ms = 600.0 * slow(i) * 1.7;
            (key(i, "", "v2", "img:2"), cell(ms, 100, 0.8))
        })
        .collect();
    let image = img_2_at(100);
    let ranked = rank_p99(&baseline, &window, vec![image]);
    assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
    let i3 = ranked.iter().find(|c| c.subject == "instance=i-3");
    assert!(
        i3.is_none_or(|c| c.contrast < 0.02 && c.confidence < 0.1),
        "{i3:#?}"
    );
}

/// The same skewed instance while a new adapter version hot-swapped onto i-1 slows
/// it: the adapter leads, i-3 is no candidate.
#[test]
fn a_value_that_always_held_the_slow_requests_yields_to_the_partial_change() {
    let slow = |i: &str| if i == "i-3" { 1.7 } else { 1.0 };
    let baseline: Vec<_> = ["i-1", "i-2", "i-3"]
        .iter()
        .map(|i| {
            (
                key(i, "fin@6", "v2", "img:1"),
                cell(600.0 * slow(i), 400, 0.8),
            )
        })
        .collect();
    let window: Vec<_> = ["i-1", "i-2", "i-3"]
        .iter()
        .map(|i| {
            let (adapter, factor) = if *i == "i-1" {
                ("fin@7", 2.2)
            } else {
                ("fin@6", 1.0)
            };
            let ms = 600.0 * slow(i) * factor;
            (key(i, adapter, "v2", "img:1"), cell(ms, 100, 0.8))
        })
        .collect();
    let ranked = rank_p99(&baseline, &window, vec![super::tests::fin_lora_7_at(100)]);
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    assert!(
        ranked.iter().all(|c| c.subject != "instance=i-3"),
        "{ranked:#?}"
    );
}

/// Requests of `n` with `rejected` of them refused (context overflow).
fn refusing(n: u64, rejected: u64) -> RollupCell {
    let mut c = cell(500.0, n, 0.8);
    c.rejections.insert("context_overflow".into(), rejected);
    c
}

/// Prompt v3 was tried on 15% of the traffic, refusing a third of it; at the onset
/// it takes all of the traffic and refusals go from 5% to 34%. A harmless adapter
/// went to every instance two minutes before. v3's own rate did not change — what
/// changed is how much traffic it has: it explains the change by the traffic it
/// gained at its rate, and leads.
#[test]
fn a_value_that_took_over_the_traffic_explains_the_change_it_brought() {
    let prompt = |i: &str, p: &str, a: &str| key(i, a, p, "img:1");
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for i in ["i-1", "i-2", "i-3"] {
        baseline.push((prompt(i, "v2", "fin@6"), refusing(340, 1)));
        baseline.push((prompt(i, "v3", "fin@6"), refusing(60, 20)));
        window.push((prompt(i, "v3", "fin@7"), refusing(100, 34)));
    }
    let ranked = rank_at_onset(
        Metric::RejectionRate,
        vec![],
        &baseline,
        &window,
        vec![super::tests::fin_lora_7_at(98)],
    );
    assert_eq!(ranked[0].subject, "prompt_version=v3", "{ranked:#?}");
    assert!(ranked[0].before_after > 0.5, "{:#?}", ranked[0]);
    assert!(
        ranked[0].evidence["explanatory_power"].as_f64() > Some(0.7),
        "{:#?}",
        ranked[0]
    );
}

/// A new A/B arm C takes 30% of the traffic at the onset, every one of its requests
/// twice as slow; most of C runs on i-2. C did not exist before (it was expected to
/// hold none of the bad requests and holds them all): it leads, i-2 — which serves
/// more of it — comes after.
#[test]
fn a_value_that_appears_with_the_fault_leads_the_instance_serving_most_of_it() {
    let at = |i: &str, arm: &str| key(i, "", "v2", "img:1").with(Dimension::AbGroup, arm);
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for i in ["i-1", "i-2", "i-3"] {
        for arm in ["A", "B"] {
            baseline.push((at(i, arm), cell(600.0, 200, 0.8)));
            window.push((at(i, arm), cell(600.0, 35, 0.8)));
        }
    }
    window.push((at("i-2", "C"), cell(1200.0, 54, 0.8)));
    window.push((at("i-1", "C"), cell(1200.0, 9, 0.8)));
    window.push((at("i-3", "C"), cell(1200.0, 9, 0.8)));
    let ranked = rank_p99(&baseline, &window, vec![]);
    assert_eq!(ranked[0].subject, "ab_group=C", "{ranked:#?}");
    let c = &ranked[0].evidence;
    assert_eq!(c["expected_share_of_bad"].as_f64(), Some(0.0), "{c:#}");
    assert!(c["actual_share_of_bad"].as_f64() > Some(0.9), "{c:#}");
    let i2 = ranked.iter().position(|c| c.subject == "instance=i-2");
    assert!(i2.is_none_or(|p| p > 0), "{ranked:#?}");
}

/// A canary pinned to i-2 takes a quarter of the traffic at the onset, every one of
/// its requests 2.5× slower; i-2's other requests are as before. i-2 now serves more
/// of the traffic and all of the slow requests — but so does the canary, inside it:
/// the canary is the narrower cause and leads, i-2 explains nothing beyond it.
#[test]
fn a_canary_pinned_to_one_instance_leads_the_instance() {
    let at = |i: &str, tag: &str| key(i, "", "v2", "img:1").with(Dimension::GrayTag, tag);
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for i in ["i-1", "i-2", "i-3", "i-4"] {
        baseline.push((at(i, "stable"), cell(600.0, 200, 0.8)));
        window.push((at(i, "stable"), cell(600.0, 40, 0.8)));
    }
    window.push((at("i-2", "canary"), cell(1500.0, 50, 0.8)));
    let ranked = rank_p99(&baseline, &window, vec![]);
    assert_eq!(ranked[0].subject, "gray_tag=canary", "{ranked:#?}");
    let i2 = ranked.iter().find(|c| c.subject == "instance=i-2");
    assert!(i2.is_none_or(|c| c.confidence < 0.2), "{i2:#?} {ranked:#?}");
}
