//! Tests of the failing-slice tests.

use super::*;
use crate::rollup::Level;

fn scope() -> SeriesKey {
    SeriesKey::at(Level::Request)
        .with(Dimension::Service, "gw")
        .with(Dimension::Route, "/v1/agent")
}

/// The belief a scope's hour of 3 000 requests at `share` gives.
fn scope_share(share: f64) -> Option<ShareBelief> {
    Some(ShareBelief::UNINFORMED.observe(share * 3000.0, 3000.0))
}

/// A scope's minute `m`; its requests are those of the first dimension's slices.
fn minute(m: i64, slices: &[(Dimension, &str, u64, u64)]) -> SplitMinute {
    let requests = slices
        .iter()
        .filter(|s| s.0 == slices[0].0)
        .map(|s| s.3)
        .sum();
    let slices = slices
        .iter()
        .map(|(d, v, errors, requests)| {
            (
                (*d, (*v).to_owned()),
                SliceCounts {
                    requests: *requests,
                    errors: *errors,
                    slow: 0,
                },
            )
        })
        .collect();
    SplitMinute {
        minute: m,
        requests,
        timed: false,
        slices,
    }
}

impl Slices {
    /// Judges errors in minute `m` of `scope()` split into `slices` (dimension,
    /// value, errors, requests), the scope's share at `share`.
    fn errors_at(
        &mut self,
        m: i64,
        slices: &[(Dimension, &str, u64, u64)],
        share: f64,
    ) -> Option<FailingSlice> {
        let cfg = DetectorConfig::default();
        self.judge(
            &cfg,
            &scope(),
            &minute(m, slices),
            Failure::Errors,
            scope_share(share),
        )
    }
}

/// A canary on 12% of 45 requests a minute failing a third of them is found in
/// its second minute; the route's own share (+4 points) is inside its noise.
#[test]
fn a_new_canary_failing_a_third_of_its_requests_is_found_in_two_minutes() {
    let mut slices = Slices::default();
    for m in 0..60 {
        let errs = u64::from(m % 20 == 0);
        let got = slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", errs, 22),
                (Dimension::Instance, "i-2", 0, 23),
            ],
            0.003,
        );
        assert_eq!(got, None, "minute {m}");
    }
    let mut found = None;
    for m in 60..64 {
        found = found.or(slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", 1, 22),
                (Dimension::Instance, "i-2", 1, 23),
                (Dimension::GrayTag, "canary", 2, 6),
            ],
            0.003,
        ));
    }
    let found = found.expect("the canary");
    assert_eq!(
        (found.window.onset_minute, found.window.detected_minute),
        (60, 61)
    );
    assert_eq!(found.dimension, Dimension::GrayTag);
}

/// A canary failing one of its 6 requests a minute has no minute improbable on its
/// own; its three minutes together are.
#[test]
fn a_weaker_canary_is_found_on_three_minutes_together() {
    let mut slices = Slices::default();
    let mut found = None;
    for m in 60..64 {
        let got = slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", 0, 22),
                (Dimension::Instance, "i-2", 1, 23),
                (Dimension::GrayTag, "canary", 1, 6),
            ],
            0.001,
        );
        found = found.or(got.map(|f| (f.window.onset_minute, f.window.detected_minute)));
    }
    assert_eq!(found, Some((60, 62)));
}

/// An instance whose hour held 7 errors of 540 requests while each of its three
/// siblings held 2 is held to a share drawn towards theirs, not to its own 1.3%:
/// failing 2 of 6 and then 6 of 10, it is found in its second minute. On its
/// own share, its first minute is no surprise at √α.
#[test]
fn an_instance_is_held_to_its_siblings_share_as_far_as_they_agree() {
    let instances = ["i-1", "i-2", "i-3", "i-4"];
    let at = |errors: [u64; 4], requests: [u64; 4]| -> Vec<(Dimension, &str, u64, u64)> {
        (0..4)
            .map(|i| (Dimension::Instance, instances[i], errors[i], requests[i]))
            .collect()
    };
    let mut slices = Slices::default();
    for m in 0..70 {
        let first = u64::from(m % 10 == 0 || m == 55);
        let other = u64::from(m % 30 == 5);
        let got = slices.errors_at(m, &at([first, other, other, other], [9; 4]), 0.005);
        assert_eq!(got, None, "minute {m}");
    }
    let (_, history) = slices.state[&(
        scope(),
        Dimension::Instance,
        "i-1".to_owned(),
        Failure::Errors,
    )]
        .history_counts();
    assert_eq!(history, 540);
    assert_eq!(
        slices.errors_at(70, &at([2, 0, 0, 0], [6, 9, 9, 9]), 0.005),
        None
    );
    let found = slices
        .errors_at(71, &at([6, 0, 0, 0], [10, 9, 9, 9]), 0.005)
        .map(|f| (f.value, f.window.onset_minute));
    assert_eq!(found, Some(("i-1".to_owned(), 70)));
}

/// A slice that has always failed at its own rate is judged by its own share, and a
/// single-minute burst over every slice is no failing slice.
#[test]
fn a_slice_is_judged_by_its_own_history_and_a_burst_minute_is_no_failure() {
    let mut slices = Slices::default();
    for m in 0..120 {
        // Provider b fails 8% of its 25 requests a minute, always; minute 70 is a
        // burst of errors on every slice.
        let burst = u64::from(m == 70) * 3;
        let b = 2 + u64::from(m % 3 == 0) + burst;
        let got = slices.errors_at(
            m,
            &[
                (Dimension::Provider, "a", burst, 25),
                (Dimension::Provider, "b", b, 25),
            ],
            0.04,
        );
        assert_eq!(got, None, "minute {m}");
    }
}

#[test]
fn count_above_counts_the_values_above_a_threshold() {
    let mut sketch = crate::cell::new_sketch();
    assert_eq!(count_above(&sketch, 1.0), 0);
    for v in 1..=40 {
        sketch.add(f64::from(v) * 10.0);
    }
    // 1% relative accuracy: thresholds between values.
    assert_eq!(count_above(&sketch, 355.0), 5);
    assert_eq!(count_above(&sketch, 5.0), 40);
    assert_eq!(count_above(&sketch, 405.0), 0);
    let mut one = crate::cell::new_sketch();
    one.add(700.0);
    assert_eq!((count_above(&one, 650.0), count_above(&one, 750.0)), (1, 0));
}

/// A provider always slower than the route (40% of its requests above the route's
/// 90th percentile) is judged by its own history; when it becomes slower still,
/// it fails (all of its requests slow). The slice holding every request is not
/// judged for slowness.
#[test]
fn a_slow_slice_is_judged_by_its_own_history() {
    let cfg = DetectorConfig::default();
    let mut slices = Slices::default();
    let timed = |m: i64, slow_a: u64, slow_b: u64| {
        let mut split = minute(
            m,
            &[
                (Dimension::Provider, "a", 0, 20),
                (Dimension::Provider, "b", 0, 20),
                (Dimension::Model, "m", 0, 40),
            ],
        );
        split.timed = true;
        for ((_, v), c) in split.slices.iter_mut() {
            c.slow = match v.as_str() {
                "a" => slow_a,
                "b" => slow_b,
                _ => 40,
            };
        }
        split
    };
    // The route's 90th percentile is known from minute 20 on.
    let scope_slow = |m: i64| (m >= 20).then(|| ShareBelief::UNINFORMED.observe(100.0, 1000.0));
    let timed = |m: i64, slow_a: u64, slow_b: u64| {
        let mut split = timed(m, slow_a, slow_b);
        split.timed = m >= 20;
        split
    };
    for m in 0..60 {
        let b = 8 + u64::from(m % 2 == 0);
        let got = slices.judge(
            &cfg,
            &scope(),
            &timed(m, 1, b),
            Failure::Slow,
            scope_slow(m),
        );
        assert_eq!(got, None, "minute {m}");
    }
    let mut found = None;
    for m in 60..62 {
        found = found.or(slices.judge(
            &cfg,
            &scope(),
            &timed(m, 1, 20),
            Failure::Slow,
            scope_slow(m),
        ));
    }
    let found = found.expect("provider b");
    assert_eq!(
        (
            found.dimension,
            found.value.as_str(),
            found.window.onset_minute
        ),
        (Dimension::Provider, "b", 60)
    );
}

/// A canary's errors, while they go unnoticed, raise the route's share (here from
/// 0.4% to 5%): the canary is held to the route's share from before it showed.
#[test]
fn a_new_slice_is_held_to_the_scope_as_it_was_when_it_showed() {
    let mut slices = Slices::default();
    let mut found = None;
    for m in 60..62 {
        let leaked = if m == 60 { 0.004 } else { 0.05 };
        found = found.or(slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", 1, 22),
                (Dimension::Instance, "i-2", 1, 23),
                (Dimension::GrayTag, "canary", 2, 6),
            ],
            leaked,
        ));
    }
    let found = found.expect("the canary");
    assert_eq!(
        (
            found.dimension,
            found.window.onset_minute,
            found.window.detected_minute
        ),
        (Dimension::GrayTag, 60, 61)
    );
}

/// A canary failing one in six of its 5 requests a minute: never two minutes out,
/// nor three in a row with an error, but its minutes since it appeared add up.
#[test]
fn a_weak_canary_adds_up_since_it_appeared() {
    let mut slices = Slices::default();
    let mut found = None;
    for m in 60..72 {
        let errors = u64::from(m % 2 == 0);
        found = found.or(slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", errors, 25),
                (Dimension::Instance, "i-2", 0, 25),
                (Dimension::GrayTag, "canary", errors, 5),
            ],
            0.0036,
        ));
    }
    let found = found.expect("the canary");
    assert_eq!(
        (
            found.dimension,
            found.window.onset_minute,
            found.window.detected_minute
        ),
        (Dimension::GrayTag, 60, 70)
    );
}

/// An instance with a history of its own (0.3% of 6 requests a minute) starts
/// failing 0, 1 or 2 of its 6 requests a minute: no two minutes are out, no three
/// in a row hold an error, and its baseline would take the errors in and chase
/// them, but its last ten minutes add up before they join it.
#[test]
fn a_weak_fault_on_an_old_slice_adds_up_before_it_joins_the_baseline() {
    let mut slices = Slices::default();
    let mut found = None;
    for m in 0..100 {
        let errors = if m < 80 {
            u64::from(m % 50 == 0)
        } else {
            (m % 3) as u64
        };
        let got = slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", errors, 6),
                (Dimension::Instance, "i-2", 0, 30),
            ],
            0.003,
        );
        if m < 80 {
            assert_eq!(got, None, "minute {m}");
        }
        found = found.or(got);
    }
    let found = found.expect("instance i-1");
    assert_eq!(
        (found.dimension, found.value.as_str()),
        (Dimension::Instance, "i-1")
    );
    assert!((80..=82).contains(&found.window.onset_minute), "{found:?}");
    assert!(found.window.detected_minute <= 89, "{found:?}");
}

/// A burst minute (4 of 6 failing) among minutes with a stray error is no fault:
/// the longer windows hold three minutes with an error, but without the burst the
/// rest is ordinary.
#[test]
fn one_burst_minute_does_not_make_a_longer_window_fail() {
    let mut slices = Slices::default();
    for m in 0..100 {
        let errors = match m {
            81 | 84 => 1,
            86 => 4,
            _ => u64::from(m % 50 == 0),
        };
        let got = slices.errors_at(
            m,
            &[
                (Dimension::Instance, "i-1", errors, 6),
                (Dimension::Instance, "i-2", 0, 30),
            ],
            0.003,
        );
        assert_eq!(got, None, "minute {m}");
    }
}

/// A slice gone for longer than any window is forgotten; the others are kept.
#[test]
fn slices_gone_for_long_are_forgotten() {
    let mut slices = Slices::default();
    for m in 0..5 {
        let mut parts = vec![(Dimension::Instance, "i-1", 0, 20)];
        if m == 0 {
            parts.push((Dimension::Instance, "i-2", 0, 20));
        }
        slices.errors_at(m, &parts, 0.003);
    }
    slices.forget_unseen(1);
    let kept: Vec<&str> = slices.state.keys().map(|k| k.2.as_str()).collect();
    assert_eq!(kept, ["i-1"]);
}
