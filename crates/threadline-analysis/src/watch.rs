//! The streaming watch of one tenant: each closed minute's rollup cells are merged per
//! scope — a route's requests (its entry service + route, measured end to end), or
//! the model calls of a service + model that no routed request carries — each watched
//! metric of each scope feeds its detector, its slices (instances, canary, A/B arms …)
//! are tested for one that fails far more than it did (`slices`), and anomalies that
//! open on one scope close together in time become one incident.

use std::collections::{BTreeMap, HashMap};

use crate::anomaly::{
    AnomalyOnset, DetectorConfig, DetectorEvent, MinuteValue, SeriesDetector, POOL_MINUTES,
};
use crate::incident::Incident;
use crate::metric::Metric;
use crate::rollup::{Dimension, Level, RollupCell, SeriesKey};
use crate::share::{PeerShares, ShareBelief};
use crate::slices::{self, Failure, Slices};

/// What anomalies are watched on: a request's entry service and route; a model call's
/// service and model when it has no route. A model call with a route is not watched
/// apart: its route's requests, which contain it, are (one fault, one incident).
pub fn scope_of(key: &SeriesKey) -> Option<SeriesKey> {
    match key.level() {
        Level::Request => Some(key.project(&[Dimension::Service, Dimension::Route])),
        Level::Call if key.get(Dimension::Route).is_empty() => {
            Some(key.project(&[Dimension::Service, Dimension::Model]))
        }
        Level::Call => None,
    }
}

/// FNV-1a: a stable short digest for incident ids.
fn digest(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

pub struct Watch {
    cfg: DetectorConfig,
    detectors: HashMap<(SeriesKey, Metric), SeriesDetector>,
    /// Incidents still open or ended recently enough to take a new anomaly.
    recent: Vec<(SeriesKey, Incident)>,
    slices: Slices,
    /// Per quiet scope: its last minutes with too few requests to judge alone
    /// (`min_count`), pooled from the first of them until they are enough.
    pooled: HashMap<SeriesKey, (i64, RollupCell)>,
}

/// How a scope's minute is judged.
enum Judged {
    /// On its own requests.
    Alone,
    /// With the minutes before it, from the first (minute) on.
    Pooled(i64, Box<RollupCell>),
    /// Not yet: too few requests so far.
    NotYet,
}

impl Watch {
    pub fn new(cfg: DetectorConfig) -> Self {
        Self {
            cfg,
            detectors: HashMap::new(),
            recent: Vec::new(),
            slices: Slices::default(),
            pooled: HashMap::new(),
        }
    }

    pub fn config(&self) -> &DetectorConfig {
        &self.cfg
    }

    /// Feeds one closed minute (every cell of it, any series). Returns the incidents
    /// it opened or changed.
    pub fn push_minute<'a>(
        &mut self,
        minute: i64,
        cells: impl IntoIterator<Item = (&'a SeriesKey, &'a RollupCell)>,
    ) -> Vec<Incident> {
        let mut scopes: BTreeMap<SeriesKey, ScopeMinute<'a>> = BTreeMap::new();
        for (key, cell) in cells {
            let Some(scope) = scope_of(key) else {
                continue;
            };
            let this = scopes.entry(scope).or_default();
            this.merged.merge(cell);
            *this
                .models
                .entry(key.get(Dimension::Model).to_owned())
                .or_default() += cell.requests;
            this.members.push((key, cell));
        }
        self.lend_share_priors();
        let mut changed: Vec<usize> = Vec::new();
        for (scope, this) in &scopes {
            // A minute with too few requests is pooled with the scope's next ones
            // until they are enough, and judged as one point dated by its first.
            let pooled;
            let (at, cell) = match self.pool(scope, minute, &this.merged) {
                Judged::Alone => (minute, &this.merged),
                Judged::Pooled(first, cell) => {
                    pooled = cell;
                    (first, &*pooled)
                }
                Judged::NotYet => (minute, &this.merged),
            };
            let judge = cell.requests >= self.cfg.min_count;
            for metric in Metric::WATCHED.into_iter().filter(|_| judge) {
                let Some(value) = metric.value(cell, 60.0) else {
                    continue;
                };
                let point = MinuteValue {
                    minute: at,
                    value,
                    count: metric.support(cell),
                };
                let event = self
                    .detectors
                    .entry((scope.clone(), metric))
                    .or_insert_with(|| SeriesDetector::new(metric))
                    .push_requests(&self.cfg, point, metric.requests_sketch(cell));
                changed.extend(self.apply(scope, metric, event, &this.models));
            }
            // A slice of the scope's requests failing, or slow, far more than the rest:
            // against the scope's error share before the earliest minute a slice's
            // window can begin (the longest window, `SCAN_MINUTES` back: the scope's
            // minutes since stayed inside its noise and joined its baseline, the
            // failing slice's bad requests with them), and one in ten slower than its
            // baseline requests' 90th percentile.
            let earliest = minute - (slices::SCAN_MINUTES as i64 - 1);
            let share = self
                .detectors
                .get(&(scope.clone(), Metric::ErrorRate))
                .and_then(|d| d.baseline_share_before(&self.cfg, earliest));
            let slow = self
                .detectors
                .get(&(scope.clone(), Metric::P50Latency))
                .and_then(|d| d.pooled_quantile(slices::SLOW_QUANTILE));
            let split = slices::split(this.members.iter().copied(), minute, slow.map(|s| s.0));
            let slow_share = slow.map(|(_, pooled)| {
                let pooled = pooled as f64;
                ShareBelief::UNINFORMED.observe((1.0 - slices::SLOW_QUANTILE) * pooled, pooled)
            });
            for (failure, expected, metric) in [
                (Failure::Errors, share, Metric::ErrorRate),
                (Failure::Slow, slow_share, Metric::P99Latency),
            ] {
                let Some(found) = self
                    .slices
                    .judge(&self.cfg, scope, &split, failure, expected)
                    .map(|f| f.window)
                else {
                    continue;
                };
                let detector = self
                    .detectors
                    .entry((scope.clone(), metric))
                    .or_insert_with(|| SeriesDetector::new(metric));
                // An error share is the slice's own; a latency anomaly is told in the
                // scope's P99, as its detector tells it.
                let told = match failure {
                    Failure::Errors => Some((found.expected, found.observed)),
                    Failure::Slow => detector
                        .typical(&self.cfg)
                        .zip(metric.value(&this.merged, 60.0)),
                };
                let Some((baseline, observed)) = told else {
                    continue;
                };
                let event = detector.open_found(AnomalyOnset {
                    metric,
                    onset_minute: found.onset_minute,
                    detected_minute: found.detected_minute,
                    baseline,
                    observed,
                    score: found.score,
                });
                changed.extend(self.apply(scope, metric, event, &this.models));
            }
        }
        let window = (self.cfg.window + slices::SCAN_MINUTES) as i64;
        self.slices.forget_unseen(minute - window);
        changed.sort_unstable();
        changed.dedup();
        let out = changed.iter().map(|&i| self.recent[i].1.clone()).collect();
        let keep = self.cfg.group_minutes;
        self.recent
            .retain(|(_, i)| i.end_minute.is_none_or(|end| minute - end <= keep));
        out
    }

    /// Whether a minute of `scope` is judged alone, or pooled with the scope's minutes
    /// before it that had too few requests to judge (`min_count`) — judged once the
    /// pool holds enough, within `POOL_MINUTES` of its first minute.
    fn pool(&mut self, scope: &SeriesKey, minute: i64, cell: &RollupCell) -> Judged {
        if cell.requests >= self.cfg.min_count {
            // Its pool's minutes stay unjudged, as they were.
            self.pooled.remove(scope);
            return Judged::Alone;
        }
        let entry = self
            .pooled
            .entry(scope.clone())
            .or_insert_with(|| (minute, RollupCell::default()));
        if minute - entry.0 >= POOL_MINUTES {
            *entry = (minute, RollupCell::default());
        }
        entry.1.merge(cell);
        if entry.1.requests < self.cfg.min_count {
            return Judged::NotYet;
        }
        match self.pooled.remove(scope) {
            Some((first, pooled)) => Judged::Pooled(first, Box::new(pooled)),
            None => Judged::NotYet,
        }
    }

    /// Gives each share detector (error, rejection rate) the prior its tenant's scopes
    /// together make (`share`): a scope with a short or clean baseline is judged by
    /// the rate its peers show, as far as they agree.
    fn lend_share_priors(&mut self) {
        for metric in [Metric::ErrorRate, Metric::RejectionRate] {
            let mut peers = PeerShares::default();
            for ((_, m), detector) in &self.detectors {
                if *m == metric {
                    let (bad, requests) = detector.baseline_counts(i64::MAX);
                    peers.add(bad, requests);
                }
            }
            let prior = peers.prior();
            for ((_, m), detector) in &mut self.detectors {
                if *m == metric {
                    detector.set_share_prior(prior);
                }
            }
        }
    }

    /// Files a detector's event under its scope's incident (a new one, or the recent
    /// one it joins). Returns the index of the incident it changed.
    fn apply(
        &mut self,
        scope: &SeriesKey,
        metric: Metric,
        event: Option<DetectorEvent>,
        models: &BTreeMap<String, u64>,
    ) -> Option<usize> {
        match event? {
            DetectorEvent::Opened(anomaly) => {
                let cfg = &self.cfg;
                let at = self
                    .recent
                    .iter()
                    .position(|(s, i)| s == scope && i.takes(anomaly.onset_minute, cfg));
                match at {
                    Some(i) => {
                        self.recent[i].1.attach(anomaly);
                        Some(i)
                    }
                    None => {
                        let model = models
                            .iter()
                            .max_by_key(|(_, n)| **n)
                            .map(|(m, _)| m.clone())
                            .unwrap_or_default();
                        let id = crate::incident::IncidentId::new(format!(
                            "inc-{}-{:08x}",
                            anomaly.onset_minute,
                            digest(&scope.to_text())
                        ));
                        let mut incident = Incident {
                            id,
                            service: scope.get(Dimension::Service).to_owned(),
                            route: scope.get(Dimension::Route).to_owned(),
                            model: if scope.get(Dimension::Model).is_empty() {
                                model
                            } else {
                                scope.get(Dimension::Model).to_owned()
                            },
                            onset_minute: anomaly.onset_minute,
                            detected_minute: anomaly.detected_minute,
                            end_minute: None,
                            metric: anomaly.metric,
                            anomalies: Vec::new(),
                            score: 0.0,
                            open: Vec::new(),
                        };
                        incident.attach(anomaly);
                        self.recent.push((scope.clone(), incident));
                        Some(self.recent.len() - 1)
                    }
                }
            }
            DetectorEvent::Closed { last_minute } => {
                let i = self
                    .recent
                    .iter()
                    .position(|(s, i)| s == scope && i.open.contains(&metric))?;
                self.recent[i].1.close(metric, last_minute);
                Some(i)
            }
        }
    }
}

/// One minute of one scope: its cells merged, requests per model, and the cells
/// themselves (for its slices).
#[derive(Default)]
struct ScopeMinute<'a> {
    merged: RollupCell,
    models: BTreeMap<String, u64>,
    members: Vec<(&'a SeriesKey, &'a RollupCell)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(latency_ms: f64, n: u64, kv: f64) -> RollupCell {
        let mut c = RollupCell::default();
        for i in 0..n {
            c.requests += 1;
            c.latency_ms
                .add(latency_ms * (0.8 + 0.4 * (i as f64 / n as f64)));
            c.kv_hit_sum += kv;
            c.kv_hit_count += 1;
        }
        c
    }

    /// Four routes of one tenant fail 0.4% of their requests; `/v1/new` showed 1 error
    /// in its first 1 000 (one time in eleven at that rate). Then 2 of 58 and 3 of 56:
    /// judged on its own baseline alone that is a fault at α; judged with the rate its
    /// peers lend it, it is not.
    #[test]
    fn a_route_with_a_clean_start_is_judged_with_its_peers_rate() {
        let run = |lend: bool| {
            let mut watch = Watch::new(DetectorConfig::default());
            let key = |route: &str| {
                SeriesKey::at(Level::Request)
                    .with(Dimension::Service, "gw")
                    .with(Dimension::Route, route)
            };
            let peers: Vec<SeriesKey> =
                ["/v1/a", "/v1/b", "/v1/c"].iter().map(|r| key(r)).collect();
            let new = key("/v1/new");
            let mut opened = Vec::new();
            for minute in 0..22 {
                let (n, errors) = match minute {
                    20 => (58, 2),
                    21 => (56, 3),
                    _ => (50, u64::from(minute == 7)),
                };
                let mut mine = cell(500.0, n, 0.8);
                mine.errors = errors;
                let mut theirs = cell(500.0, 50, 0.8);
                // One error every five minutes: 0.4%.
                theirs.errors = u64::from(minute % 5 == 0);
                if !lend {
                    // Alone: no peers lend it anything.
                    opened.extend(watch.push_minute(minute, [(&new, &mine)]));
                    continue;
                }
                let cells: Vec<(&SeriesKey, &RollupCell)> = peers
                    .iter()
                    .map(|k| (k, &theirs))
                    .chain([(&new, &mine)])
                    .collect();
                opened.extend(watch.push_minute(minute, cells));
            }
            opened
        };
        let alone = run(false);
        assert!(
            alone
                .iter()
                .any(|i| i.route == "/v1/new" && i.metric == Metric::ErrorRate),
            "{alone:?}"
        );
        let with_peers = run(true);
        assert!(with_peers.is_empty(), "{with_peers:?}");
    }

    #[test]
    fn a_latency_step_with_a_kv_drop_is_one_incident_on_its_route() {
        let mut watch = Watch::new(DetectorConfig::default());
        let chat = SeriesKey::at(Level::Request)
            .with(Dimension::Service, "gw")
            .with(Dimension::Route, "/v1/chat")
            .with(Dimension::Model, "llama");
        // The chat route's model calls are not watched apart from its requests.
        let chat_calls = SeriesKey::default()
            .with(Dimension::Service, "vllm")
            .with(Dimension::Route, "/v1/chat")
            .with(Dimension::Model, "llama");
        let embed = SeriesKey::at(Level::Request)
            .with(Dimension::Service, "gw")
            .with(Dimension::Route, "/v1/embed");
        let mut found = Vec::new();
        for minute in 0..60 {
            let bad = minute >= 40;
            let chat_cell = cell(
                if bad { 900.0 } else { 500.0 },
                100,
                if bad { 0.3 } else { 0.8 },
            );
            let embed_cell = cell(20.0, 50, 0.9);
            found.extend(watch.push_minute(
                minute,
                [
                    (&chat, &chat_cell),
                    (&chat_calls, &chat_cell),
                    (&embed, &embed_cell),
                ],
            ));
        }
        let last = found.last().expect("an incident").clone();
        assert!(found.iter().all(|i| i.id == last.id), "{found:?}");
        assert_eq!(
            (
                last.service.as_str(),
                last.route.as_str(),
                last.model.as_str()
            ),
            ("gw", "/v1/chat", "llama")
        );
        assert_eq!(last.onset_minute, 40);
        let mut metrics: Vec<&str> = last.anomalies.iter().map(|a| a.metric.as_str()).collect();
        metrics.sort_unstable();
        assert_eq!(
            metrics,
            ["kv_cache_hit_ratio", "p50_latency", "p99_latency"]
        );
    }

    /// `n` requests log-uniform between `lo` and `hi` ms.
    fn spread(lo: f64, hi: f64, n: u64) -> RollupCell {
        let mut c = RollupCell::default();
        for i in 0..n {
            c.requests += 1;
            let at = (i as f64 + 0.5) / n as f64;
            c.latency_ms.add(lo * (hi / lo).powf(at));
        }
        c
    }

    /// A canary on 10% of a route whose requests all take longer than the route's 90th
    /// percentile, but no longer than its slowest: no quantile of the route moves out
    /// of its noise, yet the canary holds five slow requests a minute where one in ten
    /// would be. It opens a P99 incident on the route in its second minute.
    #[test]
    fn a_canary_slower_than_the_routes_ninetieth_percentile_opens_in_two_minutes() {
        let mut watch = Watch::new(DetectorConfig::default());
        let key = |tag: &str| {
            SeriesKey::at(Level::Request)
                .with(Dimension::Service, "gw")
                .with(Dimension::Route, "/v1/chat")
                .with(Dimension::GrayTag, tag)
        };
        let (stable, canary) = (key("stable"), key("canary"));
        let mut opened = Vec::new();
        for minute in 0..63 {
            if minute < 60 {
                let all = spread(250.0, 1000.0, 50);
                assert!(watch.push_minute(minute, [(&stable, &all)]).is_empty());
                continue;
            }
            let (most, slow) = (spread(250.0, 1000.0, 45), spread(900.0, 990.0, 5));
            opened.extend(watch.push_minute(minute, [(&stable, &most), (&canary, &slow)]));
        }
        let first = opened.first().expect("an incident");
        assert_eq!(
            (
                first.route.as_str(),
                first.metric,
                first.onset_minute,
                first.detected_minute
            ),
            ("/v1/chat", Metric::P99Latency, 60, 61),
            "{opened:?}"
        );
    }

    /// The incident a quiet route (`/v1/quiet`, 7 requests a minute from `minute_of`)
    /// opens after its step at minute 150, none before it.
    fn quiet_route_incident(mut minute_of: impl FnMut(i64) -> RollupCell) -> Incident {
        let mut watch = Watch::new(DetectorConfig::default());
        let quiet = SeriesKey::at(Level::Request)
            .with(Dimension::Service, "gw")
            .with(Dimension::Route, "/v1/quiet");
        let mut opened = Vec::new();
        for minute in 0..170 {
            let found = watch.push_minute(minute, [(&quiet, &minute_of(minute))]);
            if minute < 150 {
                assert!(found.is_empty(), "minute {minute}: {found:?}");
            }
            opened.extend(found);
        }
        opened
            .into_iter()
            .find(|i| i.route == "/v1/quiet")
            .unwrap_or_else(|| panic!("no incident"))
    }

    /// A route at 7 requests a minute never reaches `min_count` alone: its minutes
    /// are pooled, and a tripled latency from minute 150 on opens an incident with its
    /// onset within the pool the step began in.
    #[test]
    fn a_quiet_route_is_judged_on_its_minutes_pooled() {
        let mut noise = 0.37f64;
        let incident = quiet_route_incident(|minute| {
            // Ordinary minutes wander ±10% (a fixed pseudo-random walk).
            noise = (noise * 997.0 + 0.13).fract();
            let ms = if minute >= 150 { 1500.0 } else { 500.0 } * (0.9 + 0.2 * noise);
            cell(ms, 7, 0.8)
        });
        assert!(
            matches!(incident.metric, Metric::P50Latency | Metric::P99Latency),
            "{incident:?}"
        );
        assert!((148..=150).contains(&incident.onset_minute), "{incident:?}");
    }

    /// A quiet route's median 60% slower for good (a slower tool), its requests
    /// spread as a long tail (σ 0.5 in log): no pool of 21 requests alone is far
    /// enough out, two pools in a row are.
    #[test]
    fn a_quiet_routes_sustained_step_opens_on_two_pools_in_a_row() {
        // A fixed pseudo-random stream of standard normals (Box–Muller).
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let incident = quiet_route_incident(|minute| {
            let median = if minute >= 150 { 800.0 } else { 500.0 };
            let mut c = RollupCell::default();
            for _ in 0..7 {
                let z = (-2.0 * uniform().max(1e-12).ln()).sqrt()
                    * (std::f64::consts::TAU * uniform()).cos();
                c.requests += 1;
                c.latency_ms.add(median * (0.5 * z).exp());
            }
            c
        });
        assert!((147..=153).contains(&incident.onset_minute), "{incident:?}");
    }
}
