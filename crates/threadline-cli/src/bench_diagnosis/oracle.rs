//! What any detector could have seen: for a fault that fails or refuses requests, how
//! probable by chance its affected requests' bad ones were in the minutes a prompt
//! detection has (the onset minute and the next: detected by the end of the second,
//! 2 minutes after the onset), for a test told which requests the fault hit, when it
//! began and the rate they failed at before — one test, where the detector makes
//! one per slice. A late detection whose chance is above the detector's α was out of
//! reach of any test that calls ordinary minutes out no more often. One whose chance
//! is below α only from one of the two minutes was out of reach of a test that, like
//! the detector, does not take a single minute's errors for a fault (bursts).

use threadline_analysis::binomial_tail;

use super::platform::Scenario;
use super::traffic::{Served, BASE_ERRORS};

/// Minutes after the onset a detection counts as prompt in (the target: 2). The
/// minutes it can use are the onset's and the next `WITHIN_MINUTES − 1`.
pub(crate) const WITHIN_MINUTES: i64 = 2;

/// How probable by chance a fault's bad requests in the prompt minutes were.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub(crate) struct PromptChance {
    /// The least of any one minute's and of the minutes together.
    pub(crate) any: f64,
    /// For a test that needs each minute out: the minutes together, or the less
    /// probable minute's chance squared (each minute at √α), whichever is larger.
    pub(crate) each_minute: f64,
}

/// For a fault that fails or refuses requests: how probable its affected requests'
/// bad ones in the prompt minutes were against the base failure rate. `None` for
/// faults that slow requests or move a ratio.
pub(crate) fn prompt_chance(scenario: &Scenario, served: &[Served]) -> Option<PromptChance> {
    let fault = &scenario.fault;
    let change = scenario
        .fault_change()
        .filter(|c| c.effect.errors > 0.0 || c.effect.refusal.is_some())?;
    let minutes = WITHIN_MINUTES as usize;
    let mut counts = vec![(0u64, 0u64); minutes];
    for s in served {
        let offset = s.minute - fault.onset;
        if s.route == fault.route
            && (0..WITHIN_MINUTES).contains(&offset)
            && change.scope.applies(s.who)
        {
            let c = &mut counts[offset as usize];
            c.0 += u64::from(s.bad);
            c.1 += 1;
        }
    }
    let chance = |(bad, n): (u64, u64)| binomial_tail(bad, n, BASE_ERRORS);
    let each: Vec<f64> = counts.iter().map(|c| chance(*c)).collect();
    let together = chance(counts.iter().fold((0, 0), |(b, n), c| (b + c.0, n + c.1)));
    let weakest = each.iter().copied().fold(0.0, f64::max);
    Some(PromptChance {
        any: each.iter().copied().fold(together, f64::min),
        each_minute: together.max(weakest.powi(2)),
    })
}

/// Minutes of the healthy routes whose errors alone a one-minute test at `alpha`
/// would call a fault, against the base failure rate: mostly error bursts. What
/// alarming on a single minute would cost in false incidents.
pub(crate) fn lone_minute_alarms(scenario: &Scenario, served: &[Served], alpha: f64) -> usize {
    let mut counts: std::collections::HashMap<(usize, i64), (u64, u64)> = Default::default();
    for s in served.iter().filter(|s| s.route != scenario.fault.route) {
        let c = counts.entry((s.route, s.minute)).or_default();
        c.0 += u64::from(s.bad);
        c.1 += 1;
    }
    counts
        .values()
        .filter(|(bad, n)| binomial_tail(*bad, *n, BASE_ERRORS) < alpha)
        .count()
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::bench_diagnosis::faults::generate;
    use crate::bench_diagnosis::platform::{FaultKind, Scope, Variant, Who};

    /// `n` requests of route `r` at `minute` by `who`, the first `bad` of them bad.
    fn served(r: usize, minute: i64, who: Who, bad: usize, n: usize) -> Vec<Served> {
        (0..n)
            .map(|i| Served {
                route: r,
                minute,
                who,
                bad: i < bad,
            })
            .collect()
    }

    /// An instance failing from the onset: its errors in the two prompt minutes, told
    /// apart from the spared instances'; one weak minute leaves only the one-minute
    /// test. A healthy route's burst minute is a lone-minute alarm, its ordinary one
    /// and the faulty route's are not.
    #[test]
    fn prompt_chances_count_the_requests_the_fault_hit() {
        let scenario = generate(
            &mut StdRng::seed_from_u64(3),
            FaultKind::InstanceErrors,
            Variant::Plain,
        );
        let f = &scenario.fault;
        let hit = match scenario.fault_change().map(|c| &c.scope) {
            Some(Scope::Instances(set)) => set[0],
            other => panic!("an instance fault, not {other:?}"),
        };
        let who = |instance| Who {
            instance,
            provider: 0,
            arm: "A",
            canary: false,
            u: 0.5,
        };
        let spared = (0..4).find(|i| *i != hit).unwrap();
        let mut all = Vec::new();
        all.extend(served(f.route, f.onset, who(hit), 3, 10));
        all.extend(served(f.route, f.onset + 1, who(hit), 4, 10));
        // Before the onset, after the prompt minutes, and spared: not counted.
        all.extend(served(f.route, f.onset - 1, who(hit), 9, 10));
        all.extend(served(f.route, f.onset + 2, who(hit), 9, 10));
        all.extend(served(f.route, f.onset, who(spared), 0, 40));
        let chance = prompt_chance(&scenario, &all).unwrap();
        // 7 of 20 at 0.3%: 1.6e-13; the weaker minute, 3 of 10, 3.2e-6.
        assert!(chance.any < 2e-13 && chance.any > 1e-13, "{chance:?}");
        let weaker = binomial_tail(3, 10, BASE_ERRORS);
        assert!(
            (chance.each_minute / weaker.powi(2) - 1.0).abs() < 1e-9,
            "{chance:?}"
        );

        let mut weak_onset = served(f.route, f.onset, who(hit), 0, 10);
        weak_onset.extend(served(f.route, f.onset + 1, who(hit), 5, 10));
        let chance = prompt_chance(&scenario, &weak_onset).unwrap();
        assert!(chance.any < 1e-9 && chance.each_minute == 1.0, "{chance:?}");

        let healthy = (f.route + 1) % scenario.routes.len();
        let mut minutes = served(healthy, 10, who(0), 6, 50);
        minutes.extend(served(healthy, 11, who(0), 1, 50));
        minutes.extend(served(f.route, 10, who(hit), 9, 10));
        assert_eq!(lone_minute_alarms(&scenario, &minutes, 3.2e-5), 1);
    }
}
