//! How a scenario fared: the incidents the server raised (on the faulty route near the
//! onset, on healthy routes, elsewhere), the detection delay, and where the injected
//! cause ranked in the RCA of the faulty route's incident.

use std::time::{Instant, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use super::platform::Scenario;
use crate::client::ApiClient;

/// How far (minutes) an incident's onset may be from the injected onset to be its.
const ONSET_SLACK: i64 = 5;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Outcome {
    pub(crate) seed: u64,
    pub(crate) scenario: usize,
    pub(crate) kind: &'static str,
    pub(crate) variant: &'static str,
    pub(crate) route: String,
    pub(crate) cause: String,
    /// An incident on the faulty route with its onset near the injected one.
    pub(crate) found: bool,
    pub(crate) metric: Option<String>,
    /// Minutes from the injected onset to the end of the minute that confirmed it.
    pub(crate) detection_delay_minutes: Option<i64>,
    /// 1-based rank of the injected cause in the incident's RCA.
    pub(crate) rank: Option<usize>,
    /// The first three candidates' subjects.
    pub(crate) top: Vec<String>,
    /// Incidents on healthy routes.
    pub(crate) false_incidents: usize,
    /// Incidents on the faulty route that began before the fault.
    pub(crate) early_incidents: usize,
    /// Incidents of series without a route (model, service).
    pub(crate) other_incidents: usize,
    pub(crate) rca_ms: Option<f64>,
    /// For a fault that fails or refuses requests: how probable by chance its
    /// affected requests' bad ones were within the prompt minutes (`oracle`).
    pub(crate) prompt_chance: Option<super::oracle::PromptChance>,
    /// Minutes of the healthy routes a one-minute test would have alarmed on.
    pub(crate) lone_minute_alarms: usize,
}

fn minute_of_rfc3339(v: &Value) -> Option<i64> {
    let t = humantime::parse_rfc3339(v.as_str()?).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64 / 60)
}

/// Reads the incidents since Unix minute `s0` and the RCA of the faulty route's.
pub(crate) async fn score(
    api: &ApiClient,
    id: usize,
    scenario: &Scenario,
    s0: i64,
) -> anyhow::Result<Outcome> {
    let fault = &scenario.fault;
    let route = scenario.routes[fault.route].path.clone();
    let onset = s0 + fault.onset;
    let listed = api
        .get(
            "/api/v1/incidents",
            &[("from".into(), (s0 * 60).to_string())],
        )
        .await?;
    let incidents = listed["incidents"].as_array().cloned().unwrap_or_default();
    let mut outcome = Outcome {
        seed: 0,
        scenario: id,
        kind: fault.kind.as_str(),
        variant: fault.variant.as_str(),
        route: route.clone(),
        cause: fault.cause.clone(),
        found: false,
        metric: None,
        detection_delay_minutes: None,
        rank: None,
        top: Vec::new(),
        false_incidents: 0,
        early_incidents: 0,
        other_incidents: 0,
        rca_ms: None,
        prompt_chance: None,
        lone_minute_alarms: 0,
    };
    let mut first: Option<(i64, &Value)> = None;
    for incident in &incidents {
        let on = incident["onset_unix"].as_i64().unwrap_or(0) / 60;
        match incident["route"].as_str().filter(|r| !r.is_empty()) {
            None => outcome.other_incidents += 1,
            Some(r) if r != route => outcome.false_incidents += 1,
            Some(_) if on < s0 + fault.first_onset - ONSET_SLACK => outcome.early_incidents += 1,
            Some(_) if on <= onset + ONSET_SLACK => {
                let detected = minute_of_rfc3339(&incident["detected_at"]).unwrap_or(i64::MAX);
                if first.is_none_or(|(d, _)| detected < d) {
                    first = Some((detected, incident));
                }
            }
            // Later incidents on the faulty route: the fault going on.
            Some(_) => {}
        }
    }
    if let Some((detected, incident)) = first {
        outcome.found = true;
        outcome.metric = incident["metric"].as_str().map(str::to_owned);
        // From the change the incident is about: the take-over, or its trial before.
        let on = incident["onset_unix"].as_i64().unwrap_or(0) / 60;
        let began = if on < onset - ONSET_SLACK {
            s0 + fault.first_onset
        } else {
            onset
        };
        outcome.detection_delay_minutes = Some(detected - began);
        let id = incident["id"].as_str().unwrap_or_default().to_owned();
        let started = Instant::now();
        let rca = api.get("/api/v1/rca", &[("incident".into(), id)]).await?;
        outcome.rca_ms = Some(started.elapsed().as_secs_f64() * 1e3);
        let subjects: Vec<String> = rca["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["subject"].as_str().map(str::to_owned))
            .collect();
        outcome.rank = subjects
            .iter()
            .position(|s| *s == fault.cause || fault.cause_value.as_ref() == Some(s))
            .map(|p| p + 1);
        outcome.top = subjects.into_iter().take(3).collect();
    }
    Ok(outcome)
}

/// Every incident since Unix minute `s0` (minutes relative to it) with its first
/// candidates, and the scenario's changes: what `--only` prints to look into one.
pub(crate) async fn details(
    api: &ApiClient,
    scenario: &Scenario,
    s0: i64,
) -> anyhow::Result<Value> {
    let listed = api
        .get(
            "/api/v1/incidents",
            &[("from".into(), (s0 * 60).to_string())],
        )
        .await?;
    let mut incidents = Vec::new();
    for incident in listed["incidents"].as_array().cloned().unwrap_or_default() {
        let id = incident["id"].as_str().unwrap_or_default().to_owned();
        let rca = api.get("/api/v1/rca", &[("incident".into(), id)]).await?;
        let candidates: Vec<Value> = rca["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .take(5)
            .map(|c| {
                let moving: Vec<Value> = c["evidence"]["co_moving"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| serde_json::json!([m["subject"], m["confidence"], m["explanation"]]))
                    .collect();
                serde_json::json!([c["subject"], c["confidence"], c["explanation"], moving])
            })
            .collect();
        // An incident on a healthy route: its minutes, by its first candidate's
        // dimension, to see what opened it.
        let route = incident["route"].as_str().unwrap_or_default();
        let onset = incident["onset_unix"].as_i64().unwrap_or(0) / 60 - s0;
        let healthy = route != scenario.routes[scenario.fault.route].path;
        let minutes = if healthy {
            let first = rca["candidates"][0]["subject"].as_str().unwrap_or_default();
            let by = first.split_once('=').map(|(d, _)| d);
            let metrics = ["error_rate", "p50_latency", "p99_latency"];
            Some(route_minutes(api, route, s0, onset, by, &metrics).await?)
        } else {
            None
        };
        incidents.push(serde_json::json!({
            "minutes": minutes,
            "route": incident["route"],
            "service": incident["service"],
            "model": incident["model"],
            "metric": incident["metric"],
            "onset": onset,
            "detected": minute_of_rfc3339(&incident["detected_at"]).map(|m| m - s0),
            "anomalies": incident["anomalies"],
            "candidates": candidates,
        }));
    }
    let changes: Vec<serde_json::Value> = scenario
        .changes
        .iter()
        .map(|c| {
            serde_json::json!({
                "minute": c.at,
                "route": scenario.routes[c.route].path,
                "scope": c.scope,
                "set": c.set,
                "effect": c.effect,
            })
        })
        .collect();
    Ok(serde_json::json!({
        "fault": scenario.fault,
        "routes": scenario.routes,
        "changes": changes,
        "incidents": incidents,
        "faulty_route_minutes": faulty_route_minutes(api, scenario, s0).await?,
    }))
}

/// Minutes around the onset of the faulty route, as `/api/v1/metrics` reads them:
/// its error rate and median latency per minute (`minute: value / requests`), whole
/// and split by the dimension of the true cause when it is an attribute value
/// (`instance=i-2`): what to look at when a fault was found late or not at all.
async fn faulty_route_minutes(
    api: &ApiClient,
    scenario: &Scenario,
    s0: i64,
) -> anyhow::Result<Value> {
    let fault = &scenario.fault;
    let route = &scenario.routes[fault.route].path;
    let by = fault.cause.split_once('=').map(|(d, _)| d);
    route_minutes(
        api,
        route,
        s0,
        fault.onset,
        by,
        &["error_rate", "p50_latency"],
    )
    .await
}

/// Minutes of `route` within 10 of `onset` (`minute: value / requests`) of each of
/// `metrics`, whole and split by dimension `by`.
async fn route_minutes(
    api: &ApiClient,
    route: &str,
    s0: i64,
    onset: i64,
    by: Option<&str>,
    metrics: &[&str],
) -> anyhow::Result<Value> {
    const AROUND: i64 = 10;
    let (from, to) = (s0 + onset - AROUND, s0 + onset + AROUND);
    let mut out = serde_json::Map::new();
    for metric in metrics {
        for group_by in std::iter::once(None).chain(by.map(Some)) {
            let mut query = vec![
                ("metric".to_owned(), (*metric).to_owned()),
                ("route".to_owned(), route.to_owned()),
                ("from".to_owned(), (from * 60).to_string()),
                ("to".to_owned(), (to * 60).to_string()),
            ];
            query.extend(group_by.map(|g| ("group_by".to_owned(), g.to_owned())));
            let read = api.get("/api/v1/metrics", &query).await?;
            for series in read["series"].as_array().into_iter().flatten() {
                let labels = series["labels"].as_object().map_or(String::new(), |l| {
                    l.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                });
                let points: Vec<String> = series["points"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{}: {:.4} / {}",
                            p["t"].as_i64().unwrap_or(0) / 60 - s0,
                            p["value"].as_f64().unwrap_or(f64::NAN),
                            p["requests"],
                        )
                    })
                    .collect();
                let name = if labels.is_empty() {
                    (*metric).to_owned()
                } else {
                    format!("{metric} {labels}")
                };
                out.insert(name, serde_json::json!(points));
            }
        }
    }
    Ok(Value::Object(out))
}
