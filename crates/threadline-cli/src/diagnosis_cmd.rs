//! Diagnosis commands: `threadline incidents`, `threadline rca`, `threadline health`.

use clap::Args;
use serde_json::Value;

use crate::client::ApiClient;
use crate::ClientArgs;

#[derive(Args)]
pub(crate) struct IncidentsArgs {
    /// Onsets from this time (RFC 3339 or unix seconds).
    #[arg(long)]
    from: Option<String>,
    /// Onsets up to this time.
    #[arg(long)]
    to: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["incident", "route", "service", "model"])))]
pub(crate) struct RcaArgs {
    /// An incident id from `threadline incidents`.
    #[arg(long, conflicts_with_all = ["route", "service", "model", "metric", "at"])]
    incident: Option<String>,
    /// The route whose metric moved.
    #[arg(long)]
    route: Option<String>,
    /// The service whose metric moved (with or instead of --route).
    #[arg(long)]
    service: Option<String>,
    /// The model whose metric moved (with or instead of --route).
    #[arg(long)]
    model: Option<String>,
    /// p99_latency, error_rate, ttft_p99, tokens_per_s, kv_cache_hit_ratio, rejection_rate, …
    #[arg(long, requires = "at")]
    metric: Option<String>,
    /// When it moved (RFC 3339 or unix seconds).
    #[arg(long, requires = "metric")]
    at: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct HealthArgs {
    /// Node id (`kind:key`) or an unambiguous bare name.
    node: String,
    #[command(flatten)]
    client: ClientArgs,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn pairs(list: &[(&str, &Option<String>)]) -> Vec<(String, String)> {
    list.iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

/// One line per incident.
pub(crate) fn incident_line(i: &Value) -> String {
    let series = if text(&i["route"]).is_empty() {
        text(&i["model"]).to_owned()
    } else {
        format!("{} ({})", text(&i["route"]), text(&i["model"]))
    };
    format!(
        "{}  {} on {}  {}  onset {}  {}, {}",
        text(&i["id"]),
        series,
        text(&i["service"]),
        text(&i["metric"]),
        text(&i["onset"]),
        text(&i["severity"]),
        text(&i["status"]),
    )
}

/// Ranked candidates, one per line, with their first exemplar trace.
pub(crate) fn candidate_lines(candidates: &Value, indent: &str) -> String {
    let mut out = String::new();
    for c in candidates.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{indent}{:>2}. {:<16} {:<44} confidence {:.2}",
            c["rank"],
            text(&c["kind"]),
            text(&c["subject"]),
            c["confidence"].as_f64().unwrap_or_default(),
        ));
        if let Some(t) = c
            .pointer("/evidence/exemplar_trace_ids/0")
            .and_then(Value::as_str)
        {
            out.push_str(&format!("  e.g. trace {t}"));
        }
        out.push('\n');
        if let Some(why) = c["explanation"].as_str().filter(|w| !w.is_empty()) {
            out.push_str(&format!("{indent}      {why}\n"));
        }
        // Values that move with it: one cause, reported together.
        let with: Vec<&str> = c
            .pointer("/evidence/co_moving")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m["subject"].as_str())
            .collect();
        if !with.is_empty() {
            out.push_str(&format!(
                "{indent}      moves with it: {}\n",
                with.join(", ")
            ));
        }
    }
    out
}

pub(crate) async fn incidents(args: IncidentsArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&args.client)?;
    let listed = api
        .get(
            "/api/v1/incidents",
            &pairs(&[("from", &args.from), ("to", &args.to)]),
        )
        .await?;
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&listed)?);
        return Ok(());
    }
    let all = listed["incidents"].as_array().cloned().unwrap_or_default();
    crate::out::outln!("{} incidents", all.len());
    for i in &all {
        crate::out::outln!("  {}", incident_line(i));
    }
    Ok(())
}

pub(crate) async fn rca(args: RcaArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&args.client)?;
    let query = pairs(&[
        ("incident", &args.incident),
        ("route", &args.route),
        ("service", &args.service),
        ("model", &args.model),
        ("metric", &args.metric),
        ("at", &args.at),
    ]);
    let report = api.get("/api/v1/rca", &query).await?;
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let t = &report["target"];
    if report["incident"].is_object() {
        crate::out::outln!("incident {}", incident_line(&report["incident"]));
    }
    let unit = text(&t["unit"]);
    let series: Vec<String> = t["series"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    if let Some(note) = report["note"].as_str() {
        crate::out::outln!("{}: {note}", series.join(" "));
        return Ok(());
    }
    crate::out::outln!(
        "{} of {} from {}: {} before → {} during",
        text(&t["metric"]),
        series.join(" "),
        text(&t["onset"]),
        if report["metric_before"].is_null() {
            "no requests".to_owned()
        } else {
            crate::render::metric_value(&report["metric_before"], unit)
        },
        crate::render::metric_value(&report["metric_during"], unit),
    );
    crate::out::outln!(
        "likely causes, best first (confidence = {}):",
        text(&report["confidence_formula"])
    );
    crate::out::out!("{}", candidate_lines(&report["candidates"], "  "));
    Ok(())
}

pub(crate) async fn health(args: HealthArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&args.client)?;
    let report = api
        .get(
            &format!(
                "/api/v1/node-health/{}",
                crate::lineage_cmd::encode(&args.node)
            ),
            &[],
        )
        .await?;
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    crate::out::outln!(
        "{}: health {:.2} ({})",
        text(&report["node"]),
        report["score"].as_f64().unwrap_or_default(),
        text(&report["status"]),
    );
    for f in report["factors"].as_array().into_iter().flatten() {
        crate::out::outln!(
            "  -{:.2}  {:<9} {}: {}",
            f["penalty"].as_f64().unwrap_or_default(),
            text(&f["kind"]),
            text(&f["node"]),
            text(&f["detail"]),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_lines_show_the_explanation_and_what_moves_with_it() {
        let candidates = serde_json::json!([{
            "rank": 1,
            "kind": "adapter_rollout",
            "subject": "adapter:fin-lora@7",
            "confidence": 0.91,
            "explanation": "adapter rollout adapter:fin-lora@7 at the onset",
            "evidence": {
                "exemplar_trace_ids": ["4bf92f3577b34da6a3ce929d0e0e4736"],
                "co_moving": [{"subject": "instance=i-3"}, {"subject": "instance=i-4"}],
            },
        }]);
        let lines = candidate_lines(&candidates, "");
        assert!(lines.contains("adapter:fin-lora@7"), "{lines}");
        assert!(lines.contains("e.g. trace 4bf92f35"), "{lines}");
        assert!(lines.contains("at the onset"), "{lines}");
        assert!(
            lines.contains("moves with it: instance=i-3, instance=i-4"),
            "{lines}"
        );
    }
}
