//! `rank` end to end: attribute values, changes, spans and rules on small windows
//! built by hand, each test a situation a platform meets.

use super::*;
use crate::cell::SpanSlot;

pub(super) fn key(instance: &str, adapter: &str, prompt: &str, image: &str) -> SeriesKey {
    SeriesKey::default()
        .with(Dimension::Service, "gw")
        .with(Dimension::Route, "/v1/chat")
        .with(Dimension::Instance, instance)
        .with(Dimension::Adapter, adapter)
        .with(Dimension::PromptVersion, prompt)
        .with(Dimension::Image, image)
}

pub(super) fn cell(ms: f64, n: u64, kv: f64) -> RollupCell {
    let mut c = RollupCell::default();
    for i in 0..n {
        c.requests += 1;
        c.latency_ms.add(ms * (0.7 + 0.6 * i as f64 / n as f64));
        c.kv_hit_sum += kv;
        c.kv_hit_count += 1;
    }
    c
}

/// Ranks with the shipped rules for an incident of `metric` at minute 100.
pub(super) fn rank_at_onset(
    metric: Metric,
    co_anomalies: Vec<Metric>,
    baseline: &[(SeriesKey, RollupCell)],
    window: &[(SeriesKey, RollupCell)],
    changes: Vec<Change>,
) -> Vec<Candidate> {
    rank(&RcaInput {
        traces: None,
        metric,
        co_anomalies,
        onset_minute: 100,
        baseline,
        window,
        changes,
        rules: &FaultRules::default_rules(),
    })
}

/// `rank_at_onset` for a P99 incident with no other anomaly.
pub(super) fn rank_p99(
    baseline: &[(SeriesKey, RollupCell)],
    window: &[(SeriesKey, RollupCell)],
    changes: Vec<Change>,
) -> Vec<Candidate> {
    rank_at_onset(Metric::P99Latency, vec![], baseline, window, changes)
}

/// Adapter `fin@7` rolled out at minute `at`.
pub(super) fn fin_lora_7_at(at: i64) -> Change {
    change(
        "adapter_rollout",
        "adapter:fin@7",
        at,
        (Dimension::Adapter, "fin@7"),
    )
}

/// Ranks an error-rate incident at minute 100, adapter `fin@7` rolled out then.
pub(super) fn rank_errors_after_fin_7(
    baseline: &[(SeriesKey, RollupCell)],
    window: &[(SeriesKey, RollupCell)],
) -> Vec<Candidate> {
    rank_at_onset(
        Metric::ErrorRate,
        vec![],
        baseline,
        window,
        vec![fin_lora_7_at(100)],
    )
}

/// Image `img:2` rolled out at minute `at`.
pub(super) fn img_2_at(at: i64) -> Change {
    change(
        "image_rollout",
        "image:img:2",
        at,
        (Dimension::Image, "img:2"),
    )
}

pub(super) fn change(kind: &str, subject: &str, at: i64, attr: (Dimension, &str)) -> Change {
    Change {
        kind: serde_json::from_value(serde_json::json!(kind)).unwrap(),
        subject: subject.into(),
        at_minute: at,
        attribute: Some((attr.0, attr.1.into())),
        feeds: vec![],
        path: vec![],
        detail: serde_json::Value::Null,
    }
}

#[test]
fn the_swapped_adapter_outranks_harmless_changes_and_the_instances_it_runs_on() {
    let baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
        .iter()
        .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
        .collect();
    let window: Vec<_> = [
        ("i-1", "fin@6", 500.0),
        ("i-2", "fin@6", 500.0),
        ("i-3", "fin@7", 1400.0),
        ("i-4", "fin@7", 1400.0),
    ]
    .iter()
    .map(|(i, a, ms)| (key(i, a, "v3", "img:2"), cell(*ms, 300, 0.8)))
    .collect();
    let ranked = rank_p99(
        &baseline,
        &window,
        vec![
            fin_lora_7_at(100),
            change(
                "prompt_version",
                "prompt:chat@v3",
                99,
                (Dimension::PromptVersion, "v3"),
            ),
            img_2_at(98),
        ],
    );
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    assert!(ranked[0].confidence > 0.7);
    let prompt = ranked
        .iter()
        .find(|c| c.kind == CandidateKind::PromptVersion)
        .unwrap();
    assert!(prompt.confidence <= 0.5 && prompt.contrast == 0.0);
    // i-3 and i-4 run fin@7 and nothing else: they move with it, one cause.
    assert!(
        ranked.iter().all(|c| c.subject != "instance=i-3"),
        "{ranked:#?}"
    );
    let folded: Vec<&str> = ranked[0].evidence["co_moving"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["subject"].as_str().unwrap())
        .collect();
    assert!(
        folded.contains(&"instance=i-3") && folded.contains(&"instance=i-4"),
        "{folded:?}"
    );
}

/// `n` requests of about 500 ms on `instance`, `adapter` and `image`, `errors` of
/// them failed.
fn errors_cell(
    (instance, adapter, image): (&str, &str, &str),
    n: u64,
    errors: u64,
) -> (SeriesKey, RollupCell) {
    let mut c = cell(500.0, n, 0.8);
    c.errors = errors;
    (key(instance, adapter, "", image), c)
}

/// Ranks an error-rate incident: every instance served 300 requests with one error
/// on `before` (adapter, image) in the baseline; `window` as given; one change.
fn rank_errors(
    instances: &[&str],
    before: (&str, &str),
    window: &[((&str, &str, &str), u64)],
    change: Change,
) -> Vec<Candidate> {
    let baseline: Vec<_> = instances
        .iter()
        .map(|i| errors_cell((i, before.0, before.1), 300, 1))
        .collect();
    let window: Vec<_> = window
        .iter()
        .map(|(at, errors)| errors_cell(*at, 100, *errors))
        .collect();
    rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![change])
}

#[test]
fn a_failing_instance_inside_a_wider_rollout_is_blamed_before_the_rollout() {
    // A harmless image went to i-1 and i-3 three minutes before i-3 began failing:
    // the image holds every bad request, but its other requests (i-1) are healthy.
    let ranked = rank_errors(
        &["i-1", "i-2", "i-3"],
        ("", "img:1"),
        &[
            (("i-1", "", "img:2"), 0),
            (("i-2", "", "img:1"), 0),
            (("i-3", "", "img:2"), 25),
        ],
        img_2_at(97),
    );
    assert_eq!(ranked[0].subject, "instance=i-3", "{ranked:#?}");
    let image = ranked.iter().find(|c| c.subject == "image:img:2").unwrap();
    assert_eq!(image.contrast, 0.0, "{image:#?}");
}

#[test]
fn a_failing_instance_comes_before_the_old_image_only_it_still_runs() {
    // i-1 took a new image five minutes before i-2 began failing: in the window the
    // old image is on i-2's requests alone, a tie the baseline breaks.
    let ranked = rank_errors(
        &["i-1", "i-2"],
        ("", "img:1"),
        &[(("i-1", "", "img:2"), 0), (("i-2", "", "img:1"), 35)],
        img_2_at(95),
    );
    assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
    let folded = ranked[0].evidence["co_moving"][0]["subject"].as_str();
    assert_eq!(folded, Some("image=img:1"), "{ranked:#?}");
}

/// The same, with i-2 a little worse than i-1 before: counted beyond their own
/// background, the old image (the two instances' requests before) explains the
/// window's errors a hair better than i-2 does. Alike, on the same requests: the
/// instance, narrower before, still leads.
#[test]
fn a_failing_instance_leads_the_old_image_it_still_runs_on_alike_evidence() {
    let baseline = vec![
        errors_cell(("i-1", "", "img:1"), 300, 0),
        errors_cell(("i-2", "", "img:1"), 300, 3),
    ];
    let window = vec![
        errors_cell(("i-1", "", "img:2"), 100, 0),
        errors_cell(("i-2", "", "img:1"), 100, 35),
    ];
    let rollout = img_2_at(95);
    let ranked = rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![rollout]);
    assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
    let folded = ranked[0].evidence["co_moving"][0]["subject"].as_str();
    assert_eq!(folded, Some("image=img:1"), "{ranked:#?}");
}

/// An adapter hot-swapped onto i-3 and i-4 slows them, four minutes after a new
/// image went onto i-1 and i-2: in the window the old image is on (nearly) the
/// adapter's requests alone, with contrast alike. The adapter's rollout, a lineage
/// change, is the more specific and leads; the old image moves with it.
#[test]
fn a_swapped_adapter_leads_the_old_image_its_instances_still_run() {
    let instances = ["i-1", "i-2", "i-3", "i-4"];
    let baseline: Vec<_> = instances
        .iter()
        .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
        .collect();
    // i-3's first requests of the minute still ran the old adapter, slow already:
    // the old image holds a few more of the bad requests than the adapter does.
    let window: Vec<_> = [
        ("i-1", "fin@6", "img:2", 500.0, 100),
        ("i-2", "fin@6", "img:2", 500.0, 100),
        ("i-3", "fin@6", "img:1", 1400.0, 5),
        ("i-3", "fin@7", "img:1", 1400.0, 100),
        ("i-4", "fin@7", "img:1", 1400.0, 100),
    ]
    .iter()
    .map(|(i, a, img, ms, n)| (key(i, a, "v2", img), cell(*ms, *n, 0.8)))
    .collect();
    let changes = vec![img_2_at(96), fin_lora_7_at(100)];
    let ranked = rank_at_onset(Metric::P99Latency, vec![], &baseline, &window, changes);
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    let folded: Vec<_> = ranked[0].evidence["co_moving"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["subject"].as_str())
        .collect();
    assert!(folded.contains(&"image=img:1"), "{ranked:#?}");
}

#[test]
fn a_rollout_whose_bad_requests_gather_on_one_instance_keeps_its_contrast() {
    // An adapter hot-swapped onto i-1 and i-2 fails on both, more on i-1 by chance:
    // i-1 leads the contrast, but the adapter's requests outside it went bad too.
    let ranked = rank_errors(
        &["i-1", "i-2", "i-3"],
        ("fin@6", ""),
        &[
            (("i-1", "fin@7", ""), 30),
            (("i-2", "fin@7", ""), 18),
            (("i-3", "fin@6", ""), 0),
        ],
        fin_lora_7_at(99),
    );
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    assert!(ranked[0].contrast > 0.3, "{:#?}", ranked[0]);
}

#[test]
fn a_kv_drop_on_one_instance_blames_that_instance() {
    let baseline: Vec<_> = ["i-1", "i-2", "i-3"]
        .iter()
        .map(|i| (key(i, "", "", ""), cell(500.0, 300, 0.8)))
        .collect();
    let window: Vec<_> = [("i-1", 0.8), ("i-2", 0.1), ("i-3", 0.8)]
        .iter()
        .map(|(i, kv)| (key(i, "", "", ""), cell(500.0, 300, *kv)))
        .collect();
    let ranked = rank_at_onset(
        Metric::KvCacheHitRatio,
        vec![Metric::P99Latency],
        &baseline,
        &window,
        vec![],
    );
    assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
    assert!(ranked[0].rule > 0.0);
    // The healthy instances match the same rule but hold none of the deficit:
    // they are no candidates.
    assert!(
        ranked
            .iter()
            .all(|c| !c.subject.starts_with("instance=i-1")
                && !c.subject.starts_with("instance=i-3")),
        "{ranked:#?}"
    );
}

/// i-2's KV cache collapses four minutes after it took a new image, and the image
/// served it well until then: in the window the image is on i-2's requests alone,
/// but its healthy minutes before the onset say it did not bring the collapse.
/// The instance leads; the image rollout moves with it.
#[test]
fn a_change_that_served_well_until_the_onset_yields_to_the_instance() {
    let baseline = vec![
        (key("i-1", "", "", "img:1"), cell(500.0, 300, 0.8)),
        (key("i-2", "", "", "img:1"), cell(500.0, 260, 0.8)),
        (key("i-2", "", "", "img:2"), cell(500.0, 40, 0.8)),
    ];
    let window = vec![
        (key("i-1", "", "", "img:1"), cell(500.0, 100, 0.8)),
        (key("i-2", "", "", "img:2"), cell(500.0, 100, 0.1)),
    ];
    let rollout = img_2_at(96);
    let ranked = rank_at_onset(
        Metric::KvCacheHitRatio,
        vec![Metric::P99Latency],
        &baseline,
        &window,
        vec![rollout],
    );
    assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
    let folded = ranked[0].evidence["co_moving"][0]["subject"].as_str();
    assert_eq!(folded, Some("image:img:2"), "{ranked:#?}");
}

/// A request cell of `n` requests: retrieval `retrieve_ms`, model call `call_ms`,
/// the gateway's own 20 ms; latency their sum (lognormal-ish spread).
fn request_cell(n: u64, retrieve_ms: f64, call_ms: f64) -> RollupCell {
    let mut c = RollupCell::default();
    let mut add = |service: &str, name: &str, ms: f64, model_call: bool| {
        c.span_time.insert(
            SpanSlot {
                service: service.into(),
                name: name.into(),
            },
            crate::cell::SlotTime {
                critical_ms: ms * n as f64,
                spans: n,
                model_call,
            },
        );
    };
    add("docs-index", "search_docs", retrieve_ms, false);
    add("vllm", "chat llama", call_ms, true);
    add("gateway", "POST /v1/chat", 20.0, false);
    for i in 0..n {
        c.requests += 1;
        let spread = 0.7 + 0.6 * i as f64 / n as f64;
        c.latency_ms.add((retrieve_ms + call_ms + 20.0) * spread);
    }
    c
}

#[test]
fn a_slower_retriever_is_named_as_where_the_time_went_over_a_harmless_change() {
    let k = |i: &str| key(i, "fin@6", "v2", "img:1");
    let baseline: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| (k(i), request_cell(300, 70.0, 500.0)))
        .collect();
    let window: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| {
            (
                key(i, "fin@6", "v3", "img:1"),
                request_cell(300, 560.0, 500.0),
            )
        })
        .collect();
    let ranked = rank_p99(
        &baseline,
        &window,
        vec![change(
            "prompt_version",
            "prompt:chat@v3",
            100,
            (Dimension::PromptVersion, "v3"),
        )],
    );
    let top = &ranked[0];
    assert_eq!(
        (top.kind.as_str(), top.subject.as_str()),
        ("span", "service=docs-index span=search_docs"),
        "{ranked:#?}"
    );
    assert!(top.confidence > 0.8, "{top:#?}");
    assert!(
        top.explanation.contains("70 ms → 560 ms") && top.explanation.contains("100%"),
        "{}",
        top.explanation
    );
    let prompt = ranked
        .iter()
        .find(|c| c.kind == CandidateKind::PromptVersion)
        .unwrap();
    assert!(prompt.confidence <= 0.5, "{prompt:#?}");
    assert!(ranked.iter().all(|c| !c.explanation.is_empty()));
}

#[test]
fn a_slower_model_call_on_a_swapped_adapter_blames_the_adapter_before_the_call() {
    let baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
        .iter()
        .map(|i| {
            (
                key(i, "fin@6", "v2", "img:1"),
                request_cell(300, 70.0, 500.0),
            )
        })
        .collect();
    let window: Vec<_> = [
        ("i-1", "fin@6", 500.0),
        ("i-2", "fin@6", 500.0),
        ("i-3", "fin@7", 1500.0),
        ("i-4", "fin@7", 1500.0),
    ]
    .iter()
    .map(|(i, a, ms)| (key(i, a, "v2", "img:1"), request_cell(300, 70.0, *ms)))
    .collect();
    let ranked = rank_p99(&baseline, &window, vec![fin_lora_7_at(99)]);
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    let call = ranked.iter().find(|c| c.kind == CandidateKind::Span);
    assert!(
        call.is_none_or(|c| c.confidence < ranked[0].confidence),
        "{ranked:#?}"
    );
    // The model calls are one part, whatever their span names.
    assert!(
        ranked[0].evidence["where_the_time_went"][0]["span"] == crate::time_went::MODEL_CALLS,
        "{ranked:#?}"
    );
}

/// Arm B of an A/B test slows its model calls: the arm, not "the model calls took
/// the time", is the cause — it picks the variant of the call that slowed.
#[test]
fn a_slower_ab_arm_is_ranked_before_the_model_calls_it_slowed() {
    let arm = |group: &str, i: &str| key(i, "fin@6", "v2", "img:1").with(Dimension::AbGroup, group);
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for i in ["i-1", "i-2"] {
        for group in ["A", "B"] {
            baseline.push((arm(group, i), request_cell(300, 70.0, 500.0)));
            let ms = if group == "B" { 1400.0 } else { 500.0 };
            window.push((arm(group, i), request_cell(300, 70.0, ms)));
        }
    }
    let ranked = rank_at_onset(Metric::P99Latency, vec![], &baseline, &window, vec![]);
    assert_eq!(ranked[0].subject, "ab_group=B", "{ranked:#?}");
    let calls = ranked.iter().find(|c| c.kind == CandidateKind::Span);
    assert!(
        calls.is_none_or(|c| c.confidence < ranked[0].confidence),
        "{ranked:#?}"
    );
}

/// An arm on half of a route whose two models differ threefold in latency slows
/// by 60%, two minutes after a harmless image went onto every instance. The bad
/// requests of a median incident are those above the baseline median — half of
/// them even before — and the arm is held against the other arm, not against all
/// requests, itself included (which capped it at 0.5, under the image's proximity
/// and rule).
#[test]
fn an_arm_on_half_the_traffic_outranks_a_harmless_image_just_before() {
    let at = |image: &str, model: &str, group: &str| {
        key("i-1", "fin@6", "v2", image)
            .with(Dimension::Model, model)
            .with(Dimension::AbGroup, group)
    };
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for (model, ms) in [("small", 500.0), ("big", 1500.0)] {
        for group in ["A", "B"] {
            baseline.push((at("img:1", model, group), request_cell(300, 70.0, ms)));
            let slower = if group == "B" { 1.6 } else { 1.0 };
            window.push((
                at("img:2", model, group),
                request_cell(300, 70.0, ms * slower),
            ));
        }
    }
    let image = img_2_at(98);
    let ranked = rank_at_onset(Metric::P50Latency, vec![], &baseline, &window, vec![image]);
    assert_eq!(ranked[0].subject, "ab_group=B", "{ranked:#?}");
    assert!(ranked[0].contrast > 0.5, "{:#?}", ranked[0]);
}

/// A new image on every instance slows every request: nothing to contrast it with
/// inside the window, so the window is compared with the baseline before it; a
/// harmless adapter swapped onto half the instances in the same minute loses.
#[test]
fn a_change_on_all_traffic_is_ranked_by_before_and_after_over_a_harmless_one() {
    let baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
        .iter()
        .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
        .collect();
    let window: Vec<_> = [
        ("i-1", "fin@6"),
        ("i-2", "fin@6"),
        ("i-3", "fin@7"),
        ("i-4", "fin@7"),
    ]
    .iter()
    .map(|(i, a)| (key(i, a, "v2", "img:2"), cell(1300.0, 300, 0.8)))
    .collect();
    let ranked = rank_p99(&baseline, &window, vec![img_2_at(100), fin_lora_7_at(100)]);
    assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
    assert!(ranked[0].before_after > 0.9, "{:#?}", ranked[0]);
    let adapter = ranked
        .iter()
        .find(|c| c.subject == "adapter:fin@7")
        .unwrap();
    assert!(adapter.before_after < 0.5, "{adapter:#?}");
    assert!(adapter.confidence < ranked[0].confidence);
}

/// An adapter hot-swapped onto i-3 at minute 97, its incident's onset found at
/// 100: its 90 requests before the onset were as slow as since. They are the
/// change's doing, not a background of the adapter's: it keeps its contrast and
/// leads the instance it runs on (which was healthy for the rest of the baseline).
#[test]
fn a_change_found_a_few_minutes_before_a_late_onset_keeps_its_contrast() {
    let mut baseline: Vec<_> = ["i-1", "i-2", "i-3", "i-4"]
        .iter()
        .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 1000, 0.8)))
        .collect();
    baseline.push((key("i-3", "fin@7", "v2", "img:1"), cell(1400.0, 90, 0.8)));
    let mut window: Vec<_> = ["i-1", "i-2", "i-4"]
        .iter()
        .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 300, 0.8)))
        .collect();
    window.push((key("i-3", "fin@7", "v2", "img:1"), cell(1400.0, 300, 0.8)));
    let ranked = rank_p99(&baseline, &window, vec![fin_lora_7_at(97)]);
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    assert!(ranked[0].contrast > 0.8, "{:#?}", ranked[0]);
}

/// Two changes take all of a route's traffic: a harmless prompt bump two minutes
/// before the onset, then the image that slows every request. Both carry every bad
/// request; the prompt's requests before the onset were as fast as the rest, so
/// its arrival did not bring them, and the image ranks first.
#[test]
fn a_value_healthy_before_the_onset_loses_its_before_and_after() {
    let mut baseline: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| (key(i, "fin@6", "v2", "img:1"), cell(500.0, 1500, 0.8)))
        .collect();
    baseline.extend(
        ["i-1", "i-2"]
            .iter()
            .map(|i| (key(i, "fin@6", "v3", "img:1"), cell(500.0, 50, 0.8))),
    );
    let window: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| (key(i, "fin@6", "v3", "img:2"), cell(1300.0, 250, 0.8)))
        .collect();
    let ranked = rank_p99(
        &baseline,
        &window,
        vec![
            change(
                "prompt_version",
                "prompt:p@v3",
                98,
                (Dimension::PromptVersion, "v3"),
            ),
            img_2_at(100),
        ],
    );
    assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
    let prompt = ranked.iter().find(|c| c.subject == "prompt:p@v3").unwrap();
    assert!(prompt.before_after < 0.1, "{prompt:#?}");
    assert!(
        ranked[0].confidence - prompt.confidence > 0.2,
        "{ranked:#?}"
    );
}

/// The same change on every instance, on requests that are (nearly) all model
/// call: the added time went into model calls, so an image on all of them keeps
/// its before/after contrast.
#[test]
fn a_change_on_all_traffic_keeps_its_before_and_after_when_the_call_is_the_request() {
    let baseline: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| {
            (
                key(i, "fin@6", "v2", "img:1"),
                request_cell(300, 5.0, 500.0),
            )
        })
        .collect();
    // The retrieval wobbles up a little too (5 → 8 ms).
    let window: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| {
            (
                key(i, "fin@6", "v2", "img:2"),
                request_cell(300, 8.0, 1300.0),
            )
        })
        .collect();
    let ranked = rank_p99(&baseline, &window, vec![img_2_at(100)]);
    assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
    assert!(ranked[0].before_after > 0.9, "{:#?}", ranked[0]);
    // The model call was the whole request: no span candidate names it, and the
    // retrieval's wobble is no cause.
    assert!(
        ranked.iter().all(|c| c.kind != CandidateKind::Span
            || (!c.subject.contains("chat llama") && c.confidence < 0.1)),
        "{ranked:#?}"
    );
}

/// Ranks an error-rate incident on four instances, each serving two images half and
/// half; `errors` per instance in the window (100 requests each), 1 in 300 before.
fn rank_instances_failing(errors: [u64; 4]) -> Vec<Candidate> {
    let instances = ["i-1", "i-2", "i-3", "i-4"];
    let halves = |n: u64, e: u64, i: &str| {
        [
            errors_cell((i, "", "img:a"), n / 2, e / 2),
            errors_cell((i, "", "img:b"), n / 2, e - e / 2),
        ]
    };
    let baseline: Vec<_> = instances.iter().flat_map(|i| halves(300, 1, i)).collect();
    let window: Vec<_> = instances
        .iter()
        .zip(errors)
        .flat_map(|(i, e)| halves(100, e, i))
        .collect();
    rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![])
}

#[test]
fn two_instances_failing_alike_are_either_of_them() {
    // Behind one switch, i-1 and i-2 fail alike; neither holds most of the excess.
    let ranked = rank_instances_failing([25, 22, 0, 1]);
    assert_eq!(
        ranked[0].subject, "instance=i-1 | instance=i-2",
        "{ranked:#?}"
    );
    assert!(ranked[0].confidence > 0.8, "{:#?}", ranked[0]);
    // One that holds most of it is the cause alone.
    let ranked = rank_instances_failing([30, 6, 0, 1]);
    assert_eq!(ranked[0].subject, "instance=i-1", "{ranked:#?}");
    assert!(
        ranked.iter().all(|c| !c.subject.contains(" | ")),
        "{ranked:#?}"
    );
}

#[test]
fn a_combination_with_what_a_change_brought_is_that_changes() {
    // Prompt v2 went to half of the requests at the onset and overflows only on
    // i-1's (its longer contexts): `instance=i-1 & prompt_version=v2` holds the
    // excess, and it is the prompt change's, narrowed — not a rival of it.
    let cell_of = |instance: &str, prompt: &str, n: u64, errors: u64| {
        let mut c = cell(500.0, n, 0.8);
        c.errors = errors;
        (key(instance, "", prompt, ""), c)
    };
    let baseline = vec![cell_of("i-1", "v1", 300, 1), cell_of("i-2", "v1", 300, 1)];
    let window = vec![
        cell_of("i-1", "v1", 100, 0),
        cell_of("i-1", "v2", 100, 30),
        cell_of("i-2", "v1", 100, 0),
        cell_of("i-2", "v2", 100, 1),
    ];
    let prompt = change(
        "prompt_version",
        "prompt:chat@v2",
        100,
        (Dimension::PromptVersion, "v2"),
    );
    let ranked = rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![prompt]);
    assert_eq!(ranked[0].subject, "prompt:chat@v2", "{ranked:#?}");
    assert_eq!(
        ranked[0].evidence["narrowed_to"]["subject"], "instance=i-1 & prompt_version=v2",
        "{ranked:#?}"
    );
    assert!(
        ranked.iter().all(|c| !c.subject.contains(" & ")),
        "{ranked:#?}"
    );
}

#[test]
fn a_change_on_every_instance_bad_only_on_one_is_the_pair() {
    // A new adapter on every instance at the onset fails only on i-2 (the new image
    // it reached before, harmless until then): i-2 holds the bad requests, but it did
    // not change — the adapter did, and it leads, narrowed to i-2.
    let baseline = vec![
        errors_cell(("i-1", "fin@6", "img:1"), 300, 1),
        errors_cell(("i-2", "fin@6", "img:2"), 300, 1),
        errors_cell(("i-3", "fin@6", "img:1"), 300, 1),
    ];
    let window = vec![
        errors_cell(("i-1", "fin@7", "img:1"), 100, 0),
        errors_cell(("i-2", "fin@7", "img:2"), 100, 25),
        errors_cell(("i-3", "fin@7", "img:1"), 100, 1),
    ];
    let ranked = rank_errors_after_fin_7(&baseline, &window);
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    assert!(ranked[0].confidence > 0.8, "{:#?}", ranked[0]);
    let narrowed = ranked[0].evidence["narrowed_to"]["subject"].as_str();
    assert!(
        matches!(narrowed, Some("instance=i-2" | "image=img:2")),
        "{ranked:#?}"
    );
    assert!(
        !ranked[0].explanation.contains("not concentrated"),
        "{}",
        ranked[0].explanation
    );
    // Two minutes before the onset, its requests healthy meanwhile, a change is no
    // pair with it: the value leads.
    let mut healthy_since = baseline.clone();
    for (i, image) in [("i-1", "img:1"), ("i-2", "img:2"), ("i-3", "img:1")] {
        healthy_since.push(errors_cell((i, "fin@7", image), 10, 0));
    }
    let ranked = rank_at_onset(
        Metric::ErrorRate,
        vec![],
        &healthy_since,
        &window,
        vec![fin_lora_7_at(98)],
    );
    assert_ne!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
    // An instance that differs from the others in nothing deployed failed by itself
    // (its KV cache), whatever went to every instance at the onset.
    let same = |cells: &[(SeriesKey, RollupCell)]| -> Vec<(SeriesKey, RollupCell)> {
        cells
            .iter()
            .map(|(k, c)| (k.clone().with(Dimension::Image, "img:1"), c.clone()))
            .collect()
    };
    let ranked = rank_at_onset(
        Metric::ErrorRate,
        vec![],
        &same(&baseline),
        &same(&window),
        vec![fin_lora_7_at(100)],
    );
    assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
    // A prompt version is no part of a deployment: one at the onset, bad only on
    // i-2, leaves i-2 the cause (its KV cache, not the prompt).
    let prompt = |p: &str, n, e| {
        let (mut k, c) = errors_cell(("i-2", "fin@6", "img:2"), n, e);
        k = k.with(Dimension::PromptVersion, p);
        (k, c)
    };
    let baseline = vec![
        errors_cell(("i-1", "fin@6", "img:1"), 300, 1),
        prompt("v1", 300, 1),
    ];
    let window = vec![
        {
            let (k, c) = errors_cell(("i-1", "fin@6", "img:1"), 100, 0);
            (k.with(Dimension::PromptVersion, "v2"), c)
        },
        prompt("v2", 100, 25),
    ];
    let change = change(
        "prompt_version",
        "prompt:chat@v2",
        100,
        (Dimension::PromptVersion, "v2"),
    );
    let ranked = rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![change]);
    assert!(
        ranked[0].subject == "instance=i-2" || ranked[0].subject == "image=img:2",
        "{ranked:#?}"
    );
}

/// A dataset version drifted at minute 40; the adapter trained on it reached every
/// instance in the minute before the onset, its first requests there still clean
/// (the onset is known to a minute). The drift acts through that adapter, so it is
/// judged from the adapter's arrival, not its own time: it keeps the adapter's
/// evidence whole and, being where the adapter's fault came from, leads it.
#[test]
fn a_drift_is_judged_from_when_the_adapter_it_feeds_arrived() {
    let mut baseline: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| errors_cell((i, "fin@6", "img:1"), 300, 1))
        .collect();
    baseline.extend(
        ["i-1", "i-2"]
            .iter()
            .map(|i| errors_cell((i, "fin@7", "img:1"), 8, 0)),
    );
    let window: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| errors_cell((i, "fin@7", "img:1"), 100, 20))
        .collect();
    let drift = Change {
        kind: CandidateKind::DatasetDrift,
        subject: "dataset_version:warehouse:fin-examples@v2".into(),
        at_minute: 40,
        attribute: None,
        feeds: vec![(Dimension::Adapter, "fin@7".into())],
        path: vec![],
        detail: serde_json::Value::Null,
    };
    let ranked = rank_at_onset(
        Metric::ErrorRate,
        vec![],
        &baseline,
        &window,
        vec![fin_lora_7_at(99), drift],
    );
    assert_eq!(
        ranked[0].subject, "dataset_version:warehouse:fin-examples@v2",
        "{ranked:#?}"
    );
    let adapter = ranked
        .iter()
        .find(|c| c.subject == "adapter:fin@7")
        .unwrap();
    assert!(ranked[0].confidence > adapter.confidence, "{ranked:#?}");
}

/// A new model on every instance at the onset fails requests on both arms of an A/B
/// test, more on arm B's (its prompts are longer). Arm B holds most of the failures,
/// but arm A's requests fail far beyond their rate before too: the arm cannot be the
/// whole story, and the model that took over the traffic — one cause of all of it —
/// leads the arm that existed all along.
#[test]
fn a_new_model_failing_on_both_arms_leads_the_arm_it_fails_more() {
    let at = |model: &str, group: &str, i: &str| {
        key(i, "fin@6", "v2", "img:1")
            .with(Dimension::Model, model)
            .with(Dimension::AbGroup, group)
    };
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for i in ["i-1", "i-2"] {
        for (group, errors) in [("A", 7), ("B", 20)] {
            let mut before = cell(500.0, 300, 0.8);
            before.errors = u64::from(i == "i-1" && group == "A");
            baseline.push((at("m1", group, i), before));
            let mut during = cell(500.0, 100, 0.8);
            during.errors = errors;
            window.push((at("m2", group, i), during));
        }
    }
    let model = change("model_rollout", "model:m2", 100, (Dimension::Model, "m2"));
    let ranked = rank_at_onset(Metric::ErrorRate, vec![], &baseline, &window, vec![model]);
    assert_eq!(ranked[0].subject, "model:m2", "{ranked:#?}");
    let arm = ranked.iter().find(|c| c.subject == "ab_group=B").unwrap();
    assert!(ranked[0].confidence > arm.confidence, "{ranked:#?}");
}

/// A quiet route: a new adapter on every instance at the onset fails requests; the
/// window's four bad requests all happen to fall on arm B, which has 60% of the
/// traffic — one time in eight by chance. The arm leads nothing: the adapter keeps
/// what it explains before and after and ranks first.
#[test]
fn a_few_bad_requests_on_one_arm_by_chance_do_not_lead() {
    let at = |adapter: &str, group: &str| {
        key("i-1", adapter, "v2", "img:1").with(Dimension::AbGroup, group)
    };
    let mut baseline = Vec::new();
    let mut window = Vec::new();
    for (group, n, bad) in [("A", 8, 0), ("B", 12, 4)] {
        baseline.push((at("fin@6", group), cell(500.0, n * 10, 0.8)));
        let mut during = cell(500.0, n, 0.8);
        during.errors = bad;
        window.push((at("fin@7", group), during));
    }
    let ranked = rank_errors_after_fin_7(&baseline, &window);
    assert_eq!(ranked[0].subject, "adapter:fin@7", "{ranked:#?}");
}

/// `request_cell` whose requests also wait `retrieve_ms + 20 + call_ttft_ms` for their
/// first token (the steps before the model call, then the call's own).
fn request_cell_ttft(n: u64, retrieve_ms: f64, call_ms: f64, call_ttft_ms: f64) -> RollupCell {
    let mut c = request_cell(n, retrieve_ms, call_ms);
    for i in 0..n {
        let spread = 0.7 + 0.6 * i as f64 / n as f64;
        c.ttft_ms.add((retrieve_ms + 20.0 + call_ttft_ms) * spread);
    }
    c
}

/// Ranks a TTFT incident (with `co_anomalies`) after a harmless image went onto every
/// instance at the onset, the requests' retrieval and their call's own time to the
/// first token as given before and during.
fn rank_ttft_after_image(
    co_anomalies: Vec<Metric>,
    (retrieve_before, retrieve_during): (f64, f64),
    (call_ttft_before, call_ttft_during): (f64, f64),
) -> Vec<Candidate> {
    let baseline: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| {
            let cell = request_cell_ttft(300, retrieve_before, 500.0, call_ttft_before);
            (key(i, "fin@6", "v2", "img:1"), cell)
        })
        .collect();
    let window: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| {
            let cell = request_cell_ttft(300, retrieve_during, 500.0, call_ttft_during);
            (key(i, "fin@6", "v2", "img:2"), cell)
        })
        .collect();
    let image = img_2_at(100);
    rank_at_onset(
        Metric::TtftP99,
        co_anomalies,
        &baseline,
        &window,
        vec![image],
    )
}

/// The retrieval before the model call slows: the time to the first token the caller
/// waits for jumps, and with it the latency. An image went onto every instance at
/// the onset; it is on every bad request, but the added wait is before the call,
/// which the image's calls cannot explain: the retriever leads, the image is
/// discounted — whether the latency moved too or not.
#[test]
fn a_first_token_later_by_a_step_before_the_call_is_not_the_images() {
    for co in [vec![Metric::P99Latency], vec![]] {
        let ranked = rank_ttft_after_image(co.clone(), (70.0, 560.0), (100.0, 100.0));
        assert_eq!(
            ranked[0].subject, "service=docs-index span=search_docs",
            "{co:?}: {ranked:#?}"
        );
        let image = ranked.iter().find(|c| c.subject == "image:img:2").unwrap();
        assert!(image.confidence < 0.2, "{co:?}: {image:#?}");
    }
}

/// The image itself makes the first token later (its calls' own time to it), the
/// steps before the call as they were: it keeps what it explains and leads.
#[test]
fn a_first_token_later_in_the_call_is_the_images() {
    let ranked = rank_ttft_after_image(vec![], (70.0, 70.0), (100.0, 600.0));
    assert_eq!(ranked[0].subject, "image:img:2", "{ranked:#?}");
    assert!(ranked[0].confidence > 0.8, "{ranked:#?}");
}

/// A quiet route: instance i-2's KV cache collapses as a prompt version takes all of
/// the traffic. The deficit of hits gathers on i-2 — a deficit spread over its
/// requests, no count of bad requests to test for chance —, so i-2 leads and the
/// prompt, on every request, is judged beyond it.
#[test]
fn a_kv_drop_on_one_instance_of_a_quiet_route_leads_a_prompt_at_the_onset() {
    let baseline: Vec<_> = ["i-1", "i-2"]
        .iter()
        .map(|i| (key(i, "fin@6", "v1", "img:1"), cell(500.0, 150, 0.8)))
        .collect();
    let window = vec![
        (key("i-1", "fin@6", "v2", "img:1"), cell(500.0, 12, 0.8)),
        (key("i-2", "fin@6", "v2", "img:1"), cell(900.0, 15, 0.45)),
    ];
    let prompt = change(
        "prompt_version",
        "prompt:chat@v2",
        100,
        (Dimension::PromptVersion, "v2"),
    );
    let ranked = rank_at_onset(
        Metric::KvCacheHitRatio,
        vec![],
        &baseline,
        &window,
        vec![prompt],
    );
    assert_eq!(ranked[0].subject, "instance=i-2", "{ranked:#?}");
}
