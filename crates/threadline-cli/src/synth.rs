//! Building blocks of the synthetic platforms the demo and `bench diagnosis` generate:
//! ids and noise, OpenLineage fine-tune runs, and the upload of OTLP exports to a
//! server as a collector would send them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use indicatif::ProgressBar;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};

/// A trace or span id that is not all zeros (OTLP's "no id").
pub(crate) fn nonzero_id<const N: usize>(rng: &mut StdRng) -> [u8; N] {
    let mut id = [0u8; N];
    while id.iter().all(|b| *b == 0) {
        rng.fill(&mut id[..]);
    }
    id
}

/// Approximately normal (sum of uniforms), mean 0, sd 1.
pub(crate) fn gauss(rng: &mut StdRng) -> f64 {
    (0..12).map(|_| rng.random::<f64>()).sum::<f64>() - 6.0
}

/// The current Unix minute.
pub(crate) fn now_minute() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64 / 60)
}

/// A Unix minute as RFC 3339 (UTC, seconds).
pub(crate) fn rfc3339(minute: i64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs((minute * 60) as u64))
        .to_string()
}

/// A dataset read with its version, schema and quality facets.
pub(crate) fn dataset_input(
    name: &str,
    version: &str,
    fields: &[&str],
    rows: u64,
    nulls: u64,
) -> Value {
    json!({
        "namespace": "warehouse", "name": name,
        "facets": {
            "version": {"_producer": "demo", "_schemaURL": "s", "datasetVersion": version},
            "schema": {"_producer": "demo", "_schemaURL": "s",
                "fields": fields.iter().map(|f| json!({"name": f, "type": "string"})).collect::<Vec<_>>()},
        },
        "inputFacets": {"dataQualityMetrics": {"_producer": "demo", "_schemaURL": "s",
            "rowCount": rows,
            "columnMetrics": {"summary": {"nullCount": nulls, "distinctCount": rows * 9 / 10}}}}
    })
}

/// START and COMPLETE of one fine-tune run (`n` makes its run id) that reads `input`
/// and writes the model artifact `artifact` (`s3://models/...`), at Unix minutes
/// `start` and `end`.
pub(crate) fn training_run(
    n: u32,
    job: &str,
    input: Value,
    artifact: &str,
    start: i64,
    end: i64,
) -> Vec<Value> {
    let run_id = format!("01935a2e-0000-7000-8000-{n:012}");
    let (ns, name) = artifact.split_at("s3://models".len());
    ["START", "COMPLETE"]
        .iter()
        .zip([start, end])
        .map(|(event_type, minute)| {
            json!({
                "eventType": event_type,
                "eventTime": rfc3339(minute),
                "producer": "https://github.com/acme/trainer",
                "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
                "run": {"runId": run_id},
                "job": {"namespace": "training", "name": job},
                "inputs": [input.clone()],
                "outputs": if *event_type == "COMPLETE" {
                    json!([{"namespace": ns, "name": name.trim_start_matches('/')}])
                } else {
                    json!([])
                },
            })
        })
        .collect()
}

/// Spans in an export request.
pub(crate) fn span_count(batch: &ExportTraceServiceRequest) -> usize {
    batch
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

/// Posts `batches` to `http://{otlp}/v1/traces` as OTLP/HTTP protobuf, four exports in
/// flight as a collector's exporters would send them; `bar` counts the spans
/// acknowledged. Fails on the first export not acknowledged.
pub(crate) async fn upload_traces(
    otlp: &str,
    batches: Vec<ExportTraceServiceRequest>,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let url = format!("http://{otlp}/v1/traces");
    let mut in_flight = tokio::task::JoinSet::new();
    for batch in batches {
        if in_flight.len() >= 4 {
            if let Some(done) = in_flight.join_next().await {
                bar.inc(done.context("upload task failed")?? as u64);
            }
        }
        let n = span_count(&batch);
        let (http, url, body) = (http.clone(), url.clone(), batch.encode_to_vec());
        in_flight.spawn(async move {
            post_protobuf(&http, &url, body).await?;
            Ok::<usize, anyhow::Error>(n)
        });
    }
    while let Some(done) = in_flight.join_next().await {
        bar.inc(done.context("upload task failed")?? as u64);
    }
    Ok(())
}

/// Posts one OTLP/HTTP protobuf body; an answer other than 2xx is an error.
pub(crate) async fn post_protobuf(
    http: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
) -> anyhow::Result<()> {
    let resp = http
        .post(url)
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    if !resp.status().is_success() {
        bail!("{url} answered {}", resp.status());
    }
    Ok(())
}
