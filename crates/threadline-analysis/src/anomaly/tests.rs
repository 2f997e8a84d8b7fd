//! Tests of the per-series detector.

use super::*;

fn feed(
    det: &mut SeriesDetector,
    cfg: &DetectorConfig,
    values: &[f64],
    from: i64,
) -> Vec<DetectorEvent> {
    feed_minutes_of(det, cfg, values, from, 200)
}

/// Minutes of `count` requests each, from `from` on.
fn feed_minutes_of(
    det: &mut SeriesDetector,
    cfg: &DetectorConfig,
    values: &[f64],
    from: i64,
    count: u64,
) -> Vec<DetectorEvent> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, &value)| {
            det.push(
                cfg,
                MinuteValue {
                    minute: from + i as i64,
                    value,
                    count,
                },
            )
        })
        .collect()
}

#[test]
fn a_step_opens_with_its_first_minute_as_onset_and_closes_on_recovery() {
    let cfg = DetectorConfig::default();
    let mut det = SeriesDetector::new(Metric::P99Latency);
    let base: Vec<f64> = (0..40).map(|i| 500.0 + (i % 5) as f64 * 10.0).collect();
    assert!(feed(&mut det, &cfg, &base, 0).is_empty());
    let events = feed(&mut det, &cfg, &[660.0, 670.0, 665.0], 40);
    let DetectorEvent::Opened(a) = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!((a.onset_minute, a.detected_minute), (40, 41));
    assert!((a.baseline - 520.0).abs() < 1e-9 && a.score > 4.0);
    let events = feed(&mut det, &cfg, &[510.0, 505.0, 515.0], 43);
    assert_eq!(events, vec![DetectorEvent::Closed { last_minute: 42 }]);
}

#[test]
fn lone_outliers_small_changes_and_good_directions_are_not_anomalies() {
    let cfg = DetectorConfig::default();
    let mut det = SeriesDetector::new(Metric::P99Latency);
    let mut values: Vec<f64> = (0..40).map(|i| 500.0 + (i % 3) as f64).collect();
    values[20] = 640.0; // one minute only
    values.extend([560.0; 5]); // +12%: many sigmas but not a practical change
    values.extend([100.0; 5]); // faster is not an incident
    assert!(feed(&mut det, &cfg, &values, 0).is_empty());
    let mut kv = SeriesDetector::new(Metric::KvCacheHitRatio);
    let mut v: Vec<f64> = vec![0.8; 30];
    v.extend([0.6, 0.6]);
    assert!(matches!(
        feed(&mut kv, &cfg, &v, 0).as_slice(),
        [DetectorEvent::Opened(_)]
    ));
}

/// Errors in minutes of 45 requests: (minute, errors).
fn errors(
    det: &mut SeriesDetector,
    cfg: &DetectorConfig,
    minutes: &[(i64, u64)],
) -> Vec<DetectorEvent> {
    minutes
        .iter()
        .filter_map(|&(minute, bad)| {
            let point = MinuteValue {
                minute,
                value: bad as f64 / 45.0,
                count: 45,
            };
            det.push(cfg, point)
        })
        .collect()
}

#[test]
fn a_share_two_minutes_out_together_opens_though_neither_alone_is() {
    let cfg = DetectorConfig::default();
    // 0.3% errors: one error every ~7 minutes.
    let base: Vec<(i64, u64)> = (0..60).map(|m| (m, u64::from(m % 7 == 0))).collect();
    let mut det = SeriesDetector::new(Metric::ErrorRate);
    assert!(errors(&mut det, &cfg, &base).is_empty());
    // 3 and 3 errors: neither minute alone is 4 sigma out at this volume.
    let events = errors(&mut det, &cfg, &[(60, 3), (61, 3)]);
    let [DetectorEvent::Opened(a)] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!((a.onset_minute, a.detected_minute), (60, 61));
    assert!((a.observed - 6.0 / 90.0).abs() < 1e-9, "{a:?}");

    // A burst of one minute beside an ordinary one is no onset; nor is a minute
    // barely above the baseline after another.
    let mut det = SeriesDetector::new(Metric::ErrorRate);
    assert!(errors(&mut det, &cfg, &base).is_empty());
    assert!(errors(
        &mut det,
        &cfg,
        &[(60, 3), (61, 1), (62, 0), (63, 1), (64, 2)]
    )
    .is_empty());
    // Latency is no share: nothing pooled.
    let mut det = SeriesDetector::new(Metric::P99Latency);
    let _ = feed(&mut det, &cfg, &[500.0; 30], 0);
    assert!(det
        .pooled_share(
            &cfg,
            &MinuteValue {
                minute: 30,
                value: 900.0,
                count: 45
            }
        )
        .is_none());
}

/// 0 errors in the first 12 minutes of a 0.3% route (one time in five), then 2 and
/// 2: Poisson at the baseline's point estimate (half an error in 540 requests)
/// calls that a fault at α. The baseline's predictive does not, alone or with what
/// the tenant's other routes show; 6 and 6 is one either way.
#[test]
fn a_short_clean_baseline_is_no_proof_of_a_clean_route() {
    let cfg = DetectorConfig::default();
    let alpha = cfg.alpha();
    assert!(crate::tails::poisson_tail(4, 0.5 / 540.0 * 90.0) < alpha);
    let clean: Vec<(i64, u64)> = (0..12).map(|m| (m, 0)).collect();
    let mut peers = crate::share::PeerShares::default();
    for bad in [2.0, 1.0, 3.0, 2.0] {
        peers.add(bad, 540.0);
    }
    for prior in [ShareBelief::UNINFORMED, peers.prior()] {
        let fresh = || {
            let mut det = SeriesDetector::new(Metric::ErrorRate);
            det.set_share_prior(prior);
            assert!(errors(&mut det, &cfg, &clean).is_empty());
            det
        };
        let events = errors(&mut fresh(), &cfg, &[(12, 2), (13, 2)]);
        assert!(events.is_empty(), "{prior:?}: {events:?}");
        let events = errors(&mut fresh(), &cfg, &[(12, 6), (13, 6)]);
        assert!(
            matches!(events.as_slice(), [DetectorEvent::Opened(a)] if a.onset_minute == 12),
            "{prior:?}: {events:?}"
        );
    }
}

/// A median of a few dozen requests a minute swings by ~6%; a +25% shift puts
/// each minute about 4 sigmas out, under the bar, and two of them well over it.
/// P99 is not judged that way: its minutes' scores are heavy-tailed.
#[test]
fn a_sustained_shift_of_the_median_opens_on_two_minutes_together() {
    let cfg = DetectorConfig::default();
    let wobble = [0.0, 80.0, -80.0, 40.0, -40.0, 120.0, -120.0, 0.0];
    let base: Vec<f64> = (0..60).map(|i| 1500.0 + wobble[i % 8]).collect();
    let shifted = [1870.0, 1880.0, 1875.0];
    for metric in [Metric::P50Latency, Metric::P99Latency] {
        let mut det = SeriesDetector::new(metric);
        assert!(feed(&mut det, &cfg, &base, 0).is_empty());
        let (median, sigma) = det.baseline(200);
        assert!(
            (1870.0 - median) / sigma < det.needed_score(&cfg),
            "{sigma}"
        );
        let events = feed(&mut det, &cfg, &shifted, 60);
        if metric == Metric::P99Latency {
            assert!(events.is_empty(), "{events:?}");
            continue;
        }
        let DetectorEvent::Opened(a) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!((a.onset_minute, a.detected_minute), (60, 61));
        assert_eq!(a.metric, Metric::P50Latency);
    }
}

#[test]
fn a_skewed_quantile_series_is_judged_against_its_worse_tail() {
    let cfg = DetectorConfig::default();
    // A per-minute P99 of few requests: mostly ~500 ms, one minute in eight ~640 ms.
    let values: Vec<f64> = (0..60)
        .map(|i| {
            if i % 8 == 3 {
                640.0
            } else {
                500.0 + (i % 4) as f64 * 5.0
            }
        })
        .collect();
    let mut det = SeriesDetector::new(Metric::P99Latency);
    assert!(feed(&mut det, &cfg, &values, 0).is_empty());
    // Two high minutes like the tail's are no anomaly (the MAD alone, ~7 ms, would
    // put them 13 sigmas out); a real step still is.
    assert!(feed(&mut det, &cfg, &[650.0, 650.0, 500.0], 60).is_empty());
    assert!(matches!(
        feed(&mut det, &cfg, &[1200.0, 1200.0], 63).as_slice(),
        [DetectorEvent::Opened(_)]
    ));
}

/// A minute of 40 requests around 100 ms (log-sd 0.3, evenly spread quantiles),
/// its two slowest at `top` ms: its P99.
fn requests(top: f64) -> (MinuteValue, DDSketch) {
    let mut sketch = crate::cell::new_sketch();
    for i in 0..38 {
        let u = (i as f64 + 0.5) / 40.0;
        sketch.add(100.0 * (0.3 * crate::quantile_noise::normal_quantile(u)).exp());
    }
    sketch.add(top);
    sketch.add(top);
    let value = sketch.quantile(0.99).unwrap().unwrap();
    let point = MinuteValue {
        minute: 0,
        value,
        count: 40,
    };
    (point, sketch)
}

/// Thirty minutes whose P99s happen to be alike (their two slowest requests at
/// the same 171 ms) put two ordinary minutes — their two slowest at 218 ms, as one
/// minute in sixty has — many baseline sigmas out. Their requests say how noisy
/// a P99 of 40 is: no anomaly. Twice the latency still is one.
#[test]
fn a_p99_of_few_requests_is_judged_against_its_sampling_noise() {
    let cfg = DetectorConfig::default();
    let run = |with_requests: bool, tops: &[f64]| {
        let mut det = SeriesDetector::new(Metric::P99Latency);
        let mut events = Vec::new();
        for (m, top) in std::iter::repeat_n(171.0, 30)
            .chain(tops.iter().copied())
            .enumerate()
        {
            let (mut point, sketch) = requests(top);
            point.minute = m as i64;
            let sketch = with_requests.then_some(&sketch);
            events.extend(det.push_requests(&cfg, point, sketch));
        }
        events
    };
    let ordinary = [218.0, 218.0, 171.0];
    assert_eq!(
        run(false, &ordinary).len(),
        1,
        "the baseline alone is fooled"
    );
    assert!(run(true, &ordinary).is_empty());
    assert!(matches!(
        run(true, &[400.0, 400.0]).as_slice(),
        [DetectorEvent::Opened(a)] if a.onset_minute == 30
    ));
}

/// Error rates of minutes of 400 requests from `from` on.
fn busy_errors(
    det: &mut SeriesDetector,
    cfg: &DetectorConfig,
    rates: &[f64],
    from: i64,
) -> Vec<DetectorEvent> {
    feed_minutes_of(det, cfg, rates, from, 400)
}

#[test]
fn a_one_minute_burst_on_a_busy_route_waits_for_its_second_minute() {
    let cfg = DetectorConfig::default();
    let base: Vec<f64> = (0..40).map(|i| [0.005, 0.0075, 0.0025][i % 3]).collect();
    // 5.5% for one minute: three times as many deviations out as needed, but not
    // three times the practical change (2 points).
    let mut det = SeriesDetector::new(Metric::ErrorRate);
    assert!(busy_errors(&mut det, &cfg, &base, 0).is_empty());
    assert!(busy_errors(&mut det, &cfg, &[0.055, 0.005, 0.0075], 40).is_empty());
    // Kept up, it opens on its second minute, dated by the first.
    let mut det = SeriesDetector::new(Metric::ErrorRate);
    busy_errors(&mut det, &cfg, &base, 0);
    let events = busy_errors(&mut det, &cfg, &[0.055, 0.05], 40);
    let [DetectorEvent::Opened(a)] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!((a.onset_minute, a.detected_minute), (40, 41));
    // Three times the practical change as well: at once.
    let mut det = SeriesDetector::new(Metric::ErrorRate);
    busy_errors(&mut det, &cfg, &base, 0);
    let events = busy_errors(&mut det, &cfg, &[0.12], 40);
    assert!(
        matches!(events.as_slice(), [DetectorEvent::Opened(a)] if a.detected_minute == 40),
        "{events:?}"
    );
}
