//! Nezha's faults replayed and scored: each fault through a server of its own, with
//! the directory's minutes from `BEFORE_MINUTES` before it to `AFTER_MINUTES` after
//! (its baseline and the fault's three minutes) less the requests that began while
//! another labelled fault went on (`FAULT_MINUTES` from its injection: Nezha's faults
//! are 7 to 9 minutes apart, and its directories hold only their minutes, so the
//! minutes before a fault are mostly the previous one's), shifted so that the
//! injection falls on a minute of the server's; the RCA of the entry route at the
//! injection minute asked as an SRE would: about failures when the route's share of
//! requests with a failed span (of the minutes with logs) rose, from the 10 minutes
//! before the injection to the 3 after, two standard errors or more and further out
//! than its mean log latency did, else about latency; about the other when that
//! answer names no service: the services its candidates name, in order, against the
//! injected pod's service (AS@1 / AS@3 / AS@5, as Nezha's paper scores).

use std::path::Path;

use anyhow::Context;
use indicatif::ProgressBar;
use serde::Serialize;
use serde_json::{json, Value};

use super::nezha::{self, Fault};
use super::nezha_otlp::{self, Request};
use super::{case_server, median_ms, percent, progress};

/// Minutes of the directory replayed before a fault's minute and after it.
const BEFORE_MINUTES: i64 = 15;
const AFTER_MINUTES: i64 = 4;
/// How long a fault's requests are the fault's (Nezha injects each for 3 minutes).
const FAULT_MINUTES: i64 = 4;
const MINUTE_NS: i64 = 60_000_000_000;
/// The questions an SRE asks: slower? failing?
const LATENCY: &str = "p99_latency";
const ERRORS: &str = "error_rate";
/// How far out (standard errors) the failed share must rise for the failure question
/// to come first: two, a move a dashboard shows; noise stays within one or so.
const MOVED_Z: f64 = 2.0;
/// Minutes of requests before the injection and after it the dashboard compares.
const DASHBOARD_BEFORE_MINUTES: i64 = 10;
const DASHBOARD_AFTER_MINUTES: i64 = 3;

/// How far the route's requests moved at the injection, as z-scores: of their mean
/// log latency (Welch; latencies are heavy-tailed) and of their share with a failed
/// span (two proportions) among those of minutes with logs (`logged`: minutes of the
/// day whose log file is there — a file `HH_MM` holds the minute before).
fn dashboard(
    requests: &[Request],
    at_ns: i64,
    logged: &std::collections::BTreeSet<i64>,
) -> (f64, f64) {
    let at = at_ns.max(0) as u64;
    let minutes = |m: i64| (m * MINUTE_NS) as u64;
    let before: Vec<&Request> = requests
        .iter()
        .filter(|r| r.start_ns < at && r.start_ns + minutes(DASHBOARD_BEFORE_MINUTES) >= at)
        .collect();
    let during: Vec<&Request> = requests
        .iter()
        .filter(|r| r.start_ns >= at && r.start_ns < at + minutes(DASHBOARD_AFTER_MINUTES))
        .collect();
    let (nb, nd) = (before.len() as f64, during.len() as f64);
    if nb < 2.0 || nd < 2.0 {
        return (0.0, 0.0);
    }
    let ln = |r: &Request| r.ms.max(0.001).ln();
    let mean = |xs: &[&Request]| xs.iter().map(|r| ln(r)).sum::<f64>() / xs.len() as f64;
    let var = |xs: &[&Request], m: f64| {
        xs.iter().map(|r| (ln(r) - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64
    };
    let (mb, md) = (mean(&before), mean(&during));
    let se = (var(&before, mb) / nb + var(&during, md) / nd).sqrt();
    let latency_z = if se > 0.0 { (md - mb) / se } else { 0.0 };
    let with_logs = |xs: &[&Request]| -> Vec<bool> {
        xs.iter()
            .filter(|r| {
                let m = nezha::minute_of_day((r.start_ns / 1_000_000_000) as i64);
                logged.contains(&(m + 1))
            })
            .map(|r| r.failed)
            .collect()
    };
    let (before, during) = (with_logs(&before), with_logs(&during));
    let (nb, nd) = (before.len() as f64, during.len() as f64);
    if nb < 2.0 || nd < 2.0 {
        return (latency_z, 0.0);
    }
    let failed = |xs: &[bool]| xs.iter().filter(|f| **f).count() as f64;
    let (fb, fd) = (failed(&before), failed(&during));
    let pooled = (fb + fd) / (nb + nd);
    let se = (pooled * (1.0 - pooled) * (1.0 / nb + 1.0 / nd)).sqrt();
    let errors_z = if se > 0.0 {
        (fd / nd - fb / nb) / se
    } else {
        0.0
    };
    (latency_z, errors_z)
}

#[derive(Clone, Debug, Serialize)]
struct Outcome {
    fault: String,
    kind: String,
    cause: String,
    pod: String,
    /// The metric whose answer was read.
    metric: String,
    /// How far the route's mean latency and failed share moved (z-scores).
    latency_z: f64,
    errors_z: f64,
    /// The services the candidates name, best first (each once).
    top: Vec<String>,
    /// Where the injected service came (1-based), if among them.
    rank: Option<usize>,
    explanations: Vec<String>,
    spans: usize,
    error_spans: usize,
    log_records: usize,
    rca_ms: f64,
}

async fn run_fault(dir: &Path, fault: &Fault, all: &[Fault]) -> anyhow::Result<Outcome> {
    let minute = nezha::minute_of_day(fault.at);
    let (span_files, log_files) =
        nezha::files_between(dir, minute - BEFORE_MINUTES, minute + AFTER_MINUTES)?;
    let logged = log_files.keys().copied().collect();
    let (span_files, log_files): (Vec<_>, Vec<_>) = (
        span_files.into_values().collect(),
        log_files.into_values().collect(),
    );
    let others: Vec<(u64, u64)> = all
        .iter()
        .filter(|f| f.at != fault.at)
        .map(|f| {
            let from = (f.at * 1_000_000_000) as u64;
            (from, from + (FAULT_MINUTES * MINUTE_NS) as u64)
        })
        .collect();
    let (spans, logs) = nezha_otlp::without_traces_in(
        nezha::read_spans(&span_files)?,
        nezha::read_logs(&log_files)?,
        &others,
    );
    let Some(last_ns) = spans.iter().map(|s| s.end_ns).max() else {
        anyhow::bail!("no spans around {}", fault.name);
    };
    // The injection on a minute's start, the data's last minute closed now.
    let at_ns = fault.at * 1_000_000_000;
    let after_minutes = (last_ns as i64 - at_ns).div_euclid(MINUTE_NS) + 1;
    let onset_minute = crate::synth::now_minute() - 1 - after_minutes;
    let shift_ns = onset_minute * MINUTE_NS - at_ns;
    let replay = nezha_otlp::replay(&spans, &logs, shift_ns);
    let (service, route) = replay
        .entry
        .clone()
        .with_context(|| format!("no root spans around {}", fault.name))?;
    let (_temp, server, api) = case_server().await?;
    let otlp = server.addrs.otlp_http.to_string();
    crate::synth::upload_traces(&otlp, replay.traces, &ProgressBar::hidden()).await?;
    let http = reqwest::Client::new();
    for logs in replay.logs {
        use prost::Message;
        crate::synth::post_protobuf(
            &http,
            &format!("http://{otlp}/v1/logs"),
            logs.encode_to_vec(),
        )
        .await?;
    }
    let at = crate::synth::rfc3339(onset_minute);
    let (latency_z, errors_z) = dashboard(&replay.requests, at_ns, &logged);
    let asked = if errors_z >= MOVED_Z && errors_z > latency_z {
        [ERRORS, LATENCY]
    } else {
        [LATENCY, ERRORS]
    };
    let started = std::time::Instant::now();
    let mut answers = Vec::new();
    for metric in asked {
        let rca = api
            .get(
                "/api/v1/rca",
                &[
                    ("service".into(), service.clone()),
                    ("route".into(), route.clone()),
                    ("metric".into(), metric.into()),
                    ("at".into(), at.clone()),
                ],
            )
            .await?;
        answers.push((metric, rca));
    }
    let rca_ms = started.elapsed().as_secs_f64() * 1e3 / asked.len() as f64;
    server.stop().await?;
    let names_a_service = |rca: &Value| {
        rca["candidates"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| nezha::service_of_candidate(c).is_some()))
    };
    let (metric, rca) = match answers.iter().position(|(_, rca)| names_a_service(rca)) {
        Some(i) => answers.swap_remove(i),
        None => answers.swap_remove(0),
    };
    let candidates = rca["candidates"].as_array().cloned().unwrap_or_default();
    let mut top: Vec<String> = Vec::new();
    for c in &candidates {
        if let Some(s) = nezha::service_of_candidate(c) {
            if !top.contains(&s) {
                top.push(s);
            }
        }
    }
    let rank = top.iter().position(|s| *s == fault.service).map(|p| p + 1);
    top.truncate(5);
    Ok(Outcome {
        fault: fault.name.clone(),
        kind: fault.kind.clone(),
        cause: fault.service.clone(),
        pod: fault.pod.clone(),
        metric: metric.to_owned(),
        latency_z: (latency_z * 10.0).round() / 10.0,
        errors_z: (errors_z * 10.0).round() / 10.0,
        top,
        rank,
        explanations: candidates
            .iter()
            .take(3)
            .map(|c| c["explanation"].as_str().unwrap_or_default().to_owned())
            .collect(),
        spans: replay.spans,
        error_spans: replay.error_spans,
        log_records: replay.log_records,
        rca_ms,
    })
}

fn totals(outcomes: &[Outcome]) -> Value {
    let n = outcomes.len();
    let within = |k: usize| {
        outcomes
            .iter()
            .filter(|o| o.rank.is_some_and(|r| r <= k))
            .count()
    };
    let pct = |k: usize| percent(k, n);
    let mut by_kind = serde_json::Map::new();
    for o in outcomes {
        let e = by_kind
            .entry(o.kind.clone())
            .or_insert_with(|| json!({"faults": 0, "top1": 0, "top3": 0}));
        e["faults"] = json!(e["faults"].as_u64().unwrap_or(0) + 1);
        if o.rank == Some(1) {
            e["top1"] = json!(e["top1"].as_u64().unwrap_or(0) + 1);
        }
        if o.rank.is_some_and(|r| r <= 3) {
            e["top3"] = json!(e["top3"].as_u64().unwrap_or(0) + 1);
        }
    }
    json!({
        "faults": n,
        "top1": within(1), "top1_pct": pct(within(1)),
        "top3": within(3), "top3_pct": pct(within(3)),
        "top5": within(5), "top5_pct": pct(within(5)),
        "by_kind": by_kind,
        "rca_ms_p50": median_ms(outcomes.iter().map(|o| o.rca_ms)),
        "spans": outcomes.iter().map(|o| o.spans).sum::<usize>(),
    })
}

pub(crate) async fn run(dir: &Path, only: Option<&str>, markdown: bool) -> anyhow::Result<String> {
    nezha::check_dir(dir)?;
    let faults_all = nezha::faults(dir)?;
    let mut faults = faults_all.clone();
    if let Some(only) = only {
        faults.retain(|f| f.name.contains(only));
        anyhow::ensure!(!faults.is_empty(), "no fault {only:?} in {}", dir.display());
    }
    let bar = progress(faults.len());
    let mut outcomes = Vec::new();
    for fault in &faults {
        bar.set_message(fault.name.clone());
        outcomes.push(
            run_fault(dir, fault, &faults_all)
                .await
                .with_context(|| format!("fault {}", fault.name))?,
        );
        bar.inc(1);
    }
    bar.finish_and_clear();
    let t = totals(&outcomes);
    Ok(if markdown {
        format!(
            "| format | faults | AS@1 | AS@3 | AS@5 | RCA p50 (ms) |\n|---|---|---|---|---|---|\n| nezha | {} | {} ({}%) | {} ({}%) | {} ({}%) | {} |\n",
            t["faults"], t["top1"], t["top1_pct"], t["top3"], t["top3_pct"], t["top5"], t["top5_pct"], t["rca_ms_p50"],
        )
    } else {
        serde_json::to_string_pretty(&json!({"totals": t, "faults": outcomes}))?
    })
}
