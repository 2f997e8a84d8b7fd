//! An incident: the anomalies of one scope that started close together, open while
//! any of them is.

use serde::{Deserialize, Serialize};

use crate::anomaly::{AnomalyOnset, DetectorConfig};
use crate::metric::Metric;

/// An incident's id (`inc-<onset minute>-<digest of its scope>`, as the watcher makes
/// it): stable across restarts, the key incidents are stored, read and linked by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IncidentId(String);

impl IncidentId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for IncidentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An incident: anomalies of one scope that started close together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    pub id: IncidentId,
    pub service: String,
    pub route: String,
    pub model: String,
    pub onset_minute: i64,
    pub detected_minute: i64,
    /// The last anomalous minute once every anomaly closed; `None` while open.
    pub end_minute: Option<i64>,
    /// The first anomaly's metric: what the incident is about.
    pub metric: Metric,
    pub anomalies: Vec<AnomalyOnset>,
    /// The largest anomaly score.
    pub score: f64,
    /// Open anomalies (by metric) of this incident.
    #[serde(default)]
    pub open: Vec<Metric>,
}

impl Incident {
    /// `critical` from twice the sensitivity, else `warning`.
    pub fn severity(&self, cfg: &DetectorConfig) -> &'static str {
        if self.score >= 2.0 * cfg.sensitivity {
            "critical"
        } else {
            "warning"
        }
    }

    pub fn is_open(&self) -> bool {
        self.end_minute.is_none()
    }

    /// Adds an anomaly that opened on this incident's scope.
    pub fn attach(&mut self, anomaly: AnomalyOnset) {
        if anomaly.onset_minute < self.onset_minute {
            self.onset_minute = anomaly.onset_minute;
            self.metric = anomaly.metric;
        }
        self.score = self.score.max(anomaly.score);
        self.end_minute = None;
        self.open.push(anomaly.metric);
        self.anomalies.push(anomaly);
    }

    /// An anomaly of this incident closed; the incident ends with its last one.
    pub fn close(&mut self, metric: Metric, last_minute: i64) {
        self.open.retain(|m| *m != metric);
        if self.open.is_empty() {
            self.end_minute = Some(last_minute.max(self.onset_minute));
        }
    }

    /// Whether an anomaly with this onset joins this incident: one that starts near
    /// its onset, while it is open, or within `group_minutes` of its end (a fault that
    /// flaps — a minute back under the threshold — reopens its incident rather than
    /// opening a new one).
    pub fn takes(&self, onset_minute: i64, cfg: &DetectorConfig) -> bool {
        let near = (onset_minute - self.onset_minute).abs() <= cfg.group_minutes;
        let recent = self
            .end_minute
            .is_none_or(|end| onset_minute - end <= cfg.group_minutes);
        near || recent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anomalies_close_in_time_group_into_one_incident_with_the_earliest_onset() {
        let cfg = DetectorConfig::default();
        let onset = |metric: &str, minute: i64| AnomalyOnset {
            metric: Metric::parse(metric).unwrap(),
            onset_minute: minute,
            detected_minute: minute + 1,
            baseline: 1.0,
            observed: 2.0,
            score: 5.0,
        };
        let mut incident = Incident {
            id: IncidentId::new("i1"),
            service: "gw".into(),
            route: "/v1/chat".into(),
            model: String::new(),
            onset_minute: 100,
            detected_minute: 101,
            end_minute: None,
            metric: Metric::P99Latency,
            anomalies: vec![onset("p99_latency", 100)],
            score: 5.0,
            open: vec![Metric::P99Latency],
        };
        assert!(incident.takes(98, &cfg));
        incident.attach(onset("kv_cache_hit_ratio", 98));
        assert_eq!(
            (incident.onset_minute, incident.metric.as_str()),
            (98, "kv_cache_hit_ratio")
        );
        incident.close(Metric::parse("p99_latency").unwrap(), 110);
        assert!(incident.is_open());
        incident.close(Metric::parse("kv_cache_hit_ratio").unwrap(), 111);
        assert_eq!(incident.end_minute, Some(111));
        assert!(!incident.takes(200, &cfg));
        // A fault that flaps: back within five minutes of the end, the same incident.
        assert!(incident.takes(115, &cfg) && !incident.takes(117, &cfg));
        incident.attach(onset("error_rate", 115));
        assert!(incident.is_open() && incident.end_minute.is_none());
        assert_eq!(incident.onset_minute, 98);
    }
}
