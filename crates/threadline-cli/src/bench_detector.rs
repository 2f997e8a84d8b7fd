//! Benchmarks of issue #4 that print figures:
//!
//! - `threadline bench detector`: simulated per-minute traffic of many series through
//!   the streaming detector — clean traffic for a day (false incidents per series per
//!   24 h), then the same series with a +50% P99 step (detection delay).
//! - `threadline bench rca`: one hour of LLM request spans (default 1,000,000) with a
//!   latency incident, written through the real write path with rollups and lineage
//!   bindings; times incident detection and the RCA of the incident.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use threadline_analysis::{
    DetectorConfig, Dimension, FaultRules, Level, Metric, RollupCell, SeriesKey, Watch,
};
use threadline_diagnosis::{diagnose, IncidentWatcher, RcaTarget};
use threadline_model::{LlmView, SpanDetail, SpanId, SpanKind, SpanRecord, TenantId, TraceId};
use threadline_store::Store;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::synth::gauss;

#[derive(Clone, Copy, Debug)]
pub(crate) struct DetectorBenchSize {
    pub(crate) series: usize,
    pub(crate) hours: usize,
    pub(crate) requests_per_minute: usize,
}

/// One minute of one series: lognormal latency (σ 0.3), 0.5% errors, KV hits around
/// 0.8, tokens; the rate swings ±30% over the day.
fn minute_cell(
    rng: &mut StdRng,
    size: &DetectorBenchSize,
    minute: usize,
    latency_factor: f64,
) -> RollupCell {
    let day = (minute as f64 / 1440.0 * std::f64::consts::TAU).sin();
    let n = ((size.requests_per_minute as f64) * (1.0 + 0.3 * day)) as usize;
    let mut cell = RollupCell::default();
    for _ in 0..n {
        let ms = 800.0 * latency_factor * (0.3 * gauss(rng)).exp();
        cell.requests += 1;
        cell.latency_ms.add(ms);
        cell.ttft_ms.add(ms * 0.15);
        if rng.random::<f64>() < 0.005 {
            cell.errors += 1;
        }
        cell.kv_hit_sum += (0.8 + 0.03 * gauss(rng)).clamp(0.0, 1.0);
        cell.kv_hit_count += 1;
        cell.gen_tokens += 200;
        cell.gen_seconds += ms * 0.85 / 1e3;
    }
    cell
}

/// A route's requests: the level the detector watches routes at.
fn series_key(i: usize) -> SeriesKey {
    SeriesKey::at(Level::Request)
        .with(Dimension::Service, "vllm")
        .with(Dimension::Route, format!("/v1/route-{i}"))
}

/// Runs `minutes` of traffic for every series; `step` gives (series → first slow
/// minute). Returns the incidents' (series, onset, detected) and the watch's time.
fn simulate(
    size: &DetectorBenchSize,
    minutes: usize,
    step: &dyn Fn(usize) -> Option<usize>,
    seed: u64,
) -> (Vec<(usize, i64, i64, threadline_analysis::IncidentId)>, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut watch = Watch::new(DetectorConfig::default());
    let keys: Vec<SeriesKey> = (0..size.series).map(series_key).collect();
    let mut found = Vec::new();
    let mut watch_seconds = 0.0;
    for minute in 0..minutes {
        let cells: Vec<RollupCell> = (0..size.series)
            .map(|s| {
                let slow = step(s).is_some_and(|at| minute >= at);
                minute_cell(&mut rng, size, minute, if slow { 1.5 } else { 1.0 })
            })
            .collect();
        let started = Instant::now();
        let changed = watch.push_minute(minute as i64, keys.iter().zip(&cells));
        watch_seconds += started.elapsed().as_secs_f64();
        for incident in changed {
            let series = keys
                .iter()
                .position(|k| k.get(Dimension::Route) == incident.route)
                .unwrap_or(usize::MAX);
            if !found.iter().any(|(_, _, _, id)| *id == incident.id) {
                found.push((
                    series,
                    incident.onset_minute,
                    incident.detected_minute,
                    incident.id,
                ));
            }
        }
    }
    (found, watch_seconds)
}

pub(crate) fn detector(size: DetectorBenchSize) -> Value {
    let minutes = size.hours * 60;
    let (clean, clean_seconds) = simulate(&size, minutes, &|_| None, 0x5eed);
    let per_series_per_day = clean.len() as f64 / size.series as f64 / (size.hours as f64 / 24.0);
    // Steps spread over the second half of the run, one per series.
    let step_at = |s: usize| minutes / 2 + (s * 37) % (minutes / 2 - 30).max(1);
    let (stepped, _) = simulate(&size, minutes, &|s| Some(step_at(s)), 0x5eed);
    let mut delays: Vec<i64> = Vec::new();
    let mut missed = 0;
    for s in 0..size.series {
        let at = step_at(s) as i64;
        // The first incident on the series at or after the step (earlier ones are the
        // clean run's false alarms, counted above).
        let hit = stepped
            .iter()
            .filter(|(series, onset, _, _)| *series == s && *onset >= at - 2)
            .map(|(_, _, detected, _)| detected + 1 - at)
            .min();
        match hit {
            Some(d) => delays.push(d),
            None => missed += 1,
        }
    }
    delays.sort_unstable();
    let within_2 = delays.iter().filter(|d| **d <= 2).count();
    json!({
        "series": size.series,
        "simulated_hours": size.hours,
        "requests_per_minute": size.requests_per_minute,
        "clean": {
            "false_incidents": clean.len(),
            "false_incidents_per_series_per_24h": per_series_per_day,
            "watch_ms_per_minute_all_series": clean_seconds * 1e3 / minutes as f64,
        },
        "p99_step_plus_50_percent": {
            "detected": delays.len(),
            "missed": missed,
            "detected_within_2_minutes": within_2,
            "delay_minutes_p50": delays.get(delays.len() / 2),
            "delay_minutes_max": delays.last(),
        },
        "targets": {"false_incidents_per_series_per_24h": "< 1", "detection_delay_minutes": "<= 2"},
    })
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct RcaBenchSize {
    pub(crate) spans: usize,
    pub(crate) samples: usize,
}

const ROUTES: [&str; 4] = ["/v1/chat", "/v1/support", "/v1/summarize", "/v1/embed"];

/// One request span at `minute` (0..60) of the hour starting at `hour_ns`.
pub(crate) fn request(rng: &mut StdRng, n: u64, hour_ns: i64, minute: usize) -> SpanRecord {
    let route_ix = rng.random_range(0..ROUTES.len());
    let route = ROUTES[route_ix];
    let instance_ix = route_ix * 4 + rng.random_range(0..4);
    let swapped = route_ix == 0 && (instance_ix == 2 || instance_ix == 3) && minute >= 40;
    let adapter = match (route_ix, swapped) {
        (0, true) => "fin-lora@7".to_owned(),
        (0, false) => "fin-lora@6".to_owned(),
        (r, _) => format!("lora-{r}@1"),
    };
    let ms = if swapped { 2500.0 } else { 900.0 } * (0.25 * gauss(rng)).exp();
    let start =
        hour_ns + minute as i64 * 60_000_000_000 + rng.random_range(0..59_000) as i64 * 1_000_000;
    let mut trace = [0u8; 16];
    trace[..8].copy_from_slice(&(n + 1).to_be_bytes());
    trace[8..].copy_from_slice(&rng.random::<u64>().to_be_bytes());
    SpanRecord {
        trace_id: TraceId(trace),
        span_id: SpanId((n + 1).to_be_bytes()),
        parent_span_id: None,
        name: format!("chat {route}"),
        service: "vllm".into(),
        kind: SpanKind::Server,
        start_time_unix_nano: start as u64,
        end_time_unix_nano: (start + (ms * 1e6) as i64) as u64,
        detail: SpanDetail::default(),
        origin: Arc::default(),
        llm: Some(LlmView {
            route: Some(route.into()),
            request_model: Some("meta-llama/Meta-Llama-3-8B-Instruct".into()),
            adapter_id: Some(adapter),
            instance_id: Some(format!("i-{instance_ix}")),
            image: Some("ghcr.io/acme/vllm:0.6.1".into()),
            prompt_template_id: Some("system".into()),
            prompt_template_version: Some("v3".into()),
            input_tokens: Some(800),
            output_tokens: Some(200),
            ttft_ms: Some(ms * 0.15),
            kv_cache_hit_ratio: Some(0.8),
            ..LlmView::default()
        }),
    }
}

pub(crate) fn rca(store: Store, data_dir: &Path, size: RcaBenchSize) -> anyhow::Result<Value> {
    let tenant = TenantId::default_tenant();
    let now_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 / 60);
    let hour_ns = (now_minute - 120) * 60_000_000_000;
    let mut rng = StdRng::seed_from_u64(0x00c0_ffee);
    let per_minute = size.spans.div_ceil(60);
    let started = Instant::now();
    let mut acks = std::collections::VecDeque::new();
    let mut n = 0u64;
    for minute in 0..60 {
        let mut left = per_minute;
        while left > 0 {
            let batch: Vec<SpanRecord> = (0..left.min(1000))
                .map(|_| {
                    n += 1;
                    request(&mut rng, n, hour_ns, minute)
                })
                .collect();
            left -= batch.len();
            let mut found = threadline_store::SpanBatch::of(&batch);
            acks.push_back(store.write_spans(
                &tenant,
                &batch,
                &mut found.observed,
                found.bindings,
            )?);
            if acks.len() > 16 {
                if let Some(ack) = acks.pop_front() {
                    ack.wait_blocking()?;
                }
            }
        }
    }
    for ack in acks {
        ack.wait_blocking()?;
    }
    let load_seconds = started.elapsed().as_secs_f64();

    let rules = Arc::new(FaultRules::default_rules());
    let watcher = IncidentWatcher::new(
        store.clone(),
        DetectorConfig::default(),
        Arc::clone(&rules),
        Vec::new(),
        None,
    );
    let started = Instant::now();
    watcher.catch_up(&tenant)?;
    let detect_ms = started.elapsed().as_secs_f64() * 1e3;
    let incidents = store.incidents(&tenant, i64::MIN, i64::MAX)?;
    let chat = incidents.iter().find(|i| i.route == "/v1/chat");

    let at = (hour_ns / 60_000_000_000 + 40) * 60;
    let mut times = Vec::new();
    let mut top = None;
    for _ in 0..size.samples.max(1) {
        let started = Instant::now();
        let target = RcaTarget::of_series(
            vec![(Dimension::Route, "/v1/chat".to_owned())],
            Metric::P99Latency,
            at,
        )?;
        let report = diagnose(&store, &tenant, &rules, target)?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
        top = report.causes.into_iter().next();
    }
    let top = top.map(|c| c.candidate);
    times.sort_by(f64::total_cmp);
    // The embedded store's file (ClickHouse's size is the server's to report).
    let database_mb = store.as_sqlite().map(|_| {
        std::fs::metadata(data_dir.join(threadline_store::DB_FILE_NAME)).map_or(0, |m| m.len())
            as f64
            / 1e6
    });
    Ok(json!({
        "spans": n,
        "window_minutes": 60,
        "load_seconds": load_seconds,
        "load_spans_per_s": n as f64 / load_seconds,
        "database_mb": database_mb,
        "incident_detection_ms": detect_ms,
        "incidents": incidents.len(),
        "incident_on_chat": chat.map(|i| json!({"id": i.id, "metric": i.metric, "onset_minute_of_hour": i.onset_minute - hour_ns / 60_000_000_000})),
        "rca_ms_p50": times[times.len() / 2],
        "rca_ms_max": times.last(),
        "rca_top_candidate": top.map(|c| json!({"kind": c.kind, "subject": c.subject, "confidence": (c.confidence * 1000.0).round() / 1000.0})),
        "target": {"rca_ms": "< 1000"},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series are the route request series the detector watches (a call-level key
    /// with a route is inside its route's requests and never watched: the benchmark once
    /// measured nothing and reported "missed" for every step).
    #[test]
    fn the_detector_benchmark_watches_its_series_and_finds_the_steps() {
        let report = detector(DetectorBenchSize {
            series: 4,
            hours: 4,
            requests_per_minute: 200,
        });
        assert_eq!(
            report["p99_step_plus_50_percent"]["detected"], 4,
            "{report}"
        );
        assert_eq!(report["clean"]["false_incidents"], 0, "{report}");
    }
}
