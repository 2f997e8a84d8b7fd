//! SLO rules: a metric over a trailing window of closed minutes, on the requests a
//! selector picks, against a threshold. A rule fires when the window's value crosses
//! the threshold in the metric's bad direction and resolves when it comes back.

use std::collections::VecDeque;

use crate::metric::Metric;
use crate::rollup::{matches, Dimension, RollupCell, SeriesKey};

#[derive(Clone, Debug, PartialEq)]
pub struct SloRule {
    pub name: String,
    /// Tenant the rule watches; every tenant when `None`.
    pub tenant: Option<String>,
    pub selector: Vec<(Dimension, String)>,
    pub metric: Metric,
    pub threshold: f64,
    pub window_minutes: usize,
    /// Requests the window needs before it is judged.
    pub min_requests: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SloEvent {
    Breached { minute: i64, value: f64 },
    Recovered { minute: i64, value: f64 },
}

/// The trailing window of one rule (for one tenant).
#[derive(Clone, Debug, Default)]
pub struct SloState {
    window: VecDeque<(i64, RollupCell)>,
    breached: bool,
}

impl SloState {
    pub fn is_breached(&self) -> bool {
        self.breached
    }

    /// Feeds one closed minute (all its cells).
    pub fn push_minute<'a>(
        &mut self,
        rule: &SloRule,
        minute: i64,
        cells: impl IntoIterator<Item = (&'a SeriesKey, &'a RollupCell)>,
    ) -> Option<SloEvent> {
        let picked = cells
            .into_iter()
            .filter(|(key, _)| matches(key, &rule.selector))
            .map(|(_, cell)| cell)
            .collect::<RollupCell>();
        self.window.push_back((minute, picked));
        let oldest = minute - rule.window_minutes as i64 + 1;
        while self.window.front().is_some_and(|(m, _)| *m < oldest) {
            self.window.pop_front();
        }
        let all: RollupCell = self.window.iter().map(|(_, c)| c).collect();
        if all.requests < rule.min_requests {
            return None;
        }
        let value = rule.metric.value(&all, (rule.window_minutes * 60) as f64)?;
        let bad = if rule.metric.higher_is_worse() {
            value > rule.threshold
        } else {
            value < rule.threshold
        };
        match (bad, self.breached) {
            (true, false) => {
                self.breached = true;
                Some(SloEvent::Breached { minute, value })
            }
            (false, true) => {
                self.breached = false;
                Some(SloEvent::Recovered { minute, value })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_over_the_threshold_fires_once_and_resolves() {
        let rule = SloRule {
            name: "chat-p99".into(),
            tenant: None,
            selector: vec![(Dimension::Route, "/v1/chat".into())],
            metric: Metric::P99Latency,
            threshold: 1000.0,
            window_minutes: 3,
            min_requests: 10,
        };
        let chat = SeriesKey::default().with(Dimension::Route, "/v1/chat");
        let other = SeriesKey::default().with(Dimension::Route, "/v1/embed");
        let cell = |ms: f64| {
            let mut c = RollupCell::default();
            for _ in 0..20 {
                c.requests += 1;
                c.latency_ms.add(ms);
            }
            c
        };
        let mut state = SloState::default();
        let slow_elsewhere = cell(5000.0);
        let mut events = Vec::new();
        for (minute, ms) in [500.0, 500.0, 3000.0, 3000.0, 500.0, 500.0, 500.0]
            .iter()
            .enumerate()
        {
            let c = cell(*ms);
            events.extend(state.push_minute(
                &rule,
                minute as i64,
                [(&chat, &c), (&other, &slow_elsewhere)],
            ));
        }
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(matches!(events[0], SloEvent::Breached { minute: 2, .. }));
        // The 3-minute window holds a slow minute until minute 5 has pushed it out.
        assert!(matches!(events[1], SloEvent::Recovered { minute: 6, .. }));
    }
}
