//! Alerts: incidents (opened and resolved, with their top three causes) and SLO
//! breaches (fired and resolved) POSTed to a webhook, as Threadline JSON or as an
//! Alertmanager-compatible alert list. Delivery runs in its own task with retries and
//! exponential backoff, so a slow or failing receiver never holds up detection.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use threadline_analysis::{DetectorConfig, Incident, SloEvent, SloRule};
use threadline_diagnosis::{IncidentListener, IncidentNews};
use threadline_model::TenantId;
use tokio::sync::mpsc;

use crate::config::{AlertFormat, AlertsConfig};
use crate::dto::{cause_json, incident_json, minute_rfc3339};

/// Alerts waiting for delivery before new ones are dropped (and logged).
const QUEUE: usize = 1024;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) enum Alert {
    Incident {
        tenant: TenantId,
        incident: Incident,
        /// The top candidates of its RCA.
        causes: Vec<Value>,
    },
    Slo {
        tenant: TenantId,
        rule: SloRule,
        event: SloEvent,
    },
}

pub(crate) struct AlertSink {
    tx: mpsc::Sender<Alert>,
    pub(crate) rules: Vec<SloRule>,
}

impl AlertSink {
    /// Starts the delivery task (on the current tokio runtime).
    pub(crate) fn start(
        cfg: AlertsConfig,
        base_url: String,
        detector: DetectorConfig,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let rules = cfg.slo.clone();
        tokio::spawn(deliver(cfg, base_url, detector, rx));
        Arc::new(Self { tx, rules })
    }

    /// Queues an alert; never blocks detection.
    pub(crate) fn send(&self, alert: Alert) {
        if let Err(e) = self.tx.try_send(alert) {
            tracing::warn!(error = %e, "alert queue full or closed: alert dropped");
        }
    }
}

/// The incident watcher's news, queued as alerts.
impl IncidentListener for AlertSink {
    fn notify(
        &self,
        tenant: &TenantId,
        incidents: Vec<IncidentNews>,
        slo_events: Vec<(SloRule, SloEvent)>,
    ) {
        for news in incidents {
            self.send(Alert::Incident {
                tenant: tenant.clone(),
                causes: news.causes.iter().map(cause_json).collect(),
                incident: news.incident,
            });
        }
        for (rule, event) in slo_events {
            self.send(Alert::Slo {
                tenant: tenant.clone(),
                rule,
                event,
            });
        }
    }
}

async fn deliver(
    cfg: AlertsConfig,
    base_url: String,
    detector: DetectorConfig,
    mut rx: mpsc::Receiver<Alert>,
) {
    let client = match reqwest::Client::builder().timeout(TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook client: alerts are off");
            return;
        }
    };
    while let Some(alert) = rx.recv().await {
        let body = match cfg.format {
            AlertFormat::Threadline => threadline_payload(&alert, &base_url, &detector),
            AlertFormat::Alertmanager => alertmanager_payload(&alert, &base_url, &detector),
        };
        post_with_retries(&client, &cfg, &body).await;
    }
}

/// POSTs until a 2xx, a refusal that retrying cannot fix (4xx other than 408 / 429),
/// or `max_attempts`; waits 0.5 s, 1 s, 2 s … (at most 30 s) between attempts.
async fn post_with_retries(client: &reqwest::Client, cfg: &AlertsConfig, body: &Value) {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=cfg.max_attempts {
        let outcome = client.post(&cfg.webhook).json(body).send().await;
        let retry = match outcome {
            Ok(resp) if resp.status().is_success() => return,
            Ok(resp) => {
                let status = resp.status();
                let retryable = status.is_server_error()
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT;
                tracing::warn!(attempt, %status, "alert webhook refused the alert");
                retryable
            }
            Err(e) => {
                tracing::warn!(attempt, error = %e, "alert webhook unreachable");
                true
            }
        };
        if !retry || attempt == cfg.max_attempts {
            break;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    tracing::error!(attempts = cfg.max_attempts, "alert not delivered");
}

fn links(base: &str, incident: &Incident) -> Value {
    json!({
        "incident": format!("{base}/api/v1/incidents/{}", incident.id),
        "rca": format!("{base}/api/v1/rca?incident={}", incident.id),
        "metrics": format!(
            "{base}/api/v1/metrics?metric={}&route={}&from={}",
            incident.metric,
            incident.route,
            (incident.onset_minute - 60) * 60
        ),
    })
}

fn slo_json(rule: &SloRule) -> Value {
    let selector: serde_json::Map<String, Value> = rule
        .selector
        .iter()
        .map(|(d, v)| (d.as_str().to_owned(), json!(v)))
        .collect();
    json!({
        "name": rule.name,
        "metric": rule.metric.as_str(),
        "threshold": rule.threshold,
        "window_s": rule.window_minutes * 60,
        "selector": selector,
    })
}

fn slo_event(event: &SloEvent) -> (&'static str, i64, f64) {
    match event {
        SloEvent::Breached { minute, value } => ("firing", *minute, *value),
        SloEvent::Recovered { minute, value } => ("resolved", *minute, *value),
    }
}

pub(crate) fn threadline_payload(alert: &Alert, base: &str, detector: &DetectorConfig) -> Value {
    match alert {
        Alert::Incident {
            tenant,
            incident,
            causes,
        } => json!({
            "kind": "incident",
            "status": if incident.is_open() { "firing" } else { "resolved" },
            "tenant": tenant.as_str(),
            "incident": incident_json(incident, detector),
            "causes": causes,
            "links": links(base, incident),
        }),
        Alert::Slo {
            tenant,
            rule,
            event,
        } => {
            let (status, minute, value) = slo_event(event);
            json!({
                "kind": "slo",
                "status": status,
                "tenant": tenant.as_str(),
                "rule": slo_json(rule),
                "value": value,
                "at": minute_rfc3339(minute + 1),
            })
        }
    }
}

/// Alertmanager's `POST /api/v2/alerts` body: a list of alerts with labels,
/// annotations, `startsAt`, `endsAt` once resolved, and a `generatorURL`.
pub(crate) fn alertmanager_payload(alert: &Alert, base: &str, detector: &DetectorConfig) -> Value {
    let one = match alert {
        Alert::Incident {
            tenant,
            incident,
            causes,
        } => {
            let top = causes
                .first()
                .map(|c| {
                    format!(
                        "{} {} (confidence {})",
                        c["kind"].as_str().unwrap_or_default(),
                        c["subject"].as_str().unwrap_or_default(),
                        c["confidence"]
                    )
                })
                .unwrap_or_else(|| "none ranked".to_owned());
            let mut a = json!({
                "labels": {
                    "alertname": "ThreadlineIncident",
                    "severity": incident.severity(detector),
                    "tenant": tenant.as_str(),
                    "service": incident.service,
                    "route": incident.route,
                    "model": incident.model,
                    "metric": incident.metric,
                    "incident": incident.id,
                },
                "annotations": {
                    "summary": format!("{} anomalous on {} since {}", incident.metric, if incident.route.is_empty() { &incident.model } else { &incident.route }, minute_rfc3339(incident.onset_minute)),
                    "top_cause": top,
                    "causes": causes.iter().map(|c| c["subject"].as_str().unwrap_or_default().to_owned()).collect::<Vec<_>>().join(", "),
                    "rca": format!("{base}/api/v1/rca?incident={}", incident.id),
                },
                "startsAt": minute_rfc3339(incident.onset_minute),
                "generatorURL": format!("{base}/api/v1/incidents/{}", incident.id),
            });
            if let Some(end) = incident.end_minute {
                a["endsAt"] = json!(minute_rfc3339(end + 1));
            }
            a
        }
        Alert::Slo {
            tenant,
            rule,
            event,
        } => {
            let (status, minute, value) = slo_event(event);
            let mut a = json!({
                "labels": {
                    "alertname": "ThreadlineSLO",
                    "severity": "warning",
                    "tenant": tenant.as_str(),
                    "slo": rule.name,
                    "metric": rule.metric.as_str(),
                },
                "annotations": {
                    "summary": format!("{} is {value:.3} over {} min (threshold {})", rule.metric.as_str(), rule.window_minutes, rule.threshold),
                },
                "startsAt": minute_rfc3339(minute + 1 - rule.window_minutes as i64),
                "generatorURL": format!("{base}/api/v1/metrics?metric={}", rule.metric.as_str()),
            });
            if status == "resolved" {
                a["endsAt"] = json!(minute_rfc3339(minute + 1));
            }
            a
        }
    };
    json!([one])
}
