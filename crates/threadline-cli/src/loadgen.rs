//! `threadline loadgen`: synthetic LLM platform traffic over OTLP/HTTP protobuf.
//! Each trace is gateway → retriever → LLM chat call → tool, with GenAI and platform
//! attributes and realistic prompt/response sizes. Reports acked spans/s and the ack
//! latency distribution (time from sending a batch to its 2xx, i.e. its commit).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use threadline_ingest::RpcStatus;

#[derive(Args, Clone)]
pub(crate) struct LoadgenArgs {
    /// OTLP/HTTP base URL (the path /v1/traces is appended).
    #[arg(long, default_value = "http://127.0.0.1:4318", value_name = "URL")]
    endpoint: String,
    #[command(flatten)]
    api_key: crate::ApiKeyArg,
    /// Target spans per second across all workers; 0 sends as fast as acks allow.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// How long to send, in seconds (10 unless --spans is given).
    #[arg(long)]
    duration: Option<f64>,
    /// Stop once this many spans have been sent (and answered).
    #[arg(long, value_name = "N")]
    spans: Option<u64>,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Spans per export request (a multiple of 4: each trace has 4 spans).
    #[arg(long, default_value_t = 100)]
    batch_spans: usize,
    /// gzip request bodies.
    #[arg(long)]
    gzip: bool,
    /// Seed of the synthetic text. Trace and span ids are always fresh: a run that
    /// repeated ids would only measure how fast duplicates are ignored.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Send OpenLineage RunEvents (one per request) to the JSON API's
    /// `/api/v1/lineage` instead of OTLP spans; --endpoint is then the API base URL.
    #[arg(long)]
    openlineage: bool,
}

#[derive(Default)]
struct Tally {
    spans_sent: AtomicU64,
    spans_acked: AtomicU64,
    /// Uncompressed protobuf bytes of the acknowledged requests.
    bytes_acked: AtomicU64,
    errors: AtomicU64,
    throttled: AtomicU64,
}

pub(crate) async fn run(args: LoadgenArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(args.batch_spans >= 4, "--batch-spans must be at least 4");
    let seconds = match (args.duration, args.spans) {
        (Some(d), _) => d,
        (None, Some(_)) => f64::from(u32::MAX),
        (None, None) => 10.0,
    };
    anyhow::ensure!(seconds > 0.0, "--duration must be positive");
    let path = if args.openlineage {
        "/api/v1/lineage"
    } else {
        "/v1/traces"
    };
    let url = format!("{}{path}", args.endpoint.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()
        .context("cannot build HTTP client")?;
    let corpus = Arc::new(TextCorpus::new(args.seed));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let duration = Duration::from_secs_f64(seconds);
    let bar = match args.spans {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new(duration.as_secs().max(1)),
    };
    bar.set_style(
        ProgressStyle::with_template(if args.spans.is_some() {
            "{spinner} [{elapsed_precise}] {bar:30} {human_pos}/{human_len} spans {msg}"
        } else {
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len}s {msg}"
        })
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..args.concurrency {
        let (client, url, corpus, tally, stop, args) = (
            client.clone(),
            url.clone(),
            Arc::clone(&corpus),
            Arc::clone(&tally),
            Arc::clone(&stop),
            args.clone(),
        );
        workers.push(tokio::spawn(async move {
            worker_loop(worker, client, url, corpus, tally, stop, args).await
        }));
    }
    while started.elapsed() < duration && !workers.iter().all(|w| w.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let secs = started.elapsed().as_secs_f64();
        bar.set_position(match args.spans {
            Some(_) => tally.spans_acked.load(Ordering::Relaxed),
            None => secs as u64,
        });
        bar.set_message(format!(
            "{:.0} spans/s acked",
            tally.spans_acked.load(Ordering::Relaxed) as f64 / secs.max(0.001)
        ));
    }
    stop.store(true, Ordering::Relaxed);
    let mut latencies: Vec<Duration> = Vec::new();
    for w in workers {
        latencies.extend(w.await.context("a loadgen worker failed")??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let idx = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies[idx].as_secs_f64() * 1000.0
    };
    let acked = tally.spans_acked.load(Ordering::Relaxed);
    let report = serde_json::json!({
        "spans_sent": tally.spans_sent.load(Ordering::Relaxed),
        "spans_acked": acked,
        "elapsed_s": elapsed,
        "spans_per_s": acked as f64 / elapsed,
        "requests": latencies.len(),
        "protobuf_bytes_per_span": tally.bytes_acked.load(Ordering::Relaxed) as f64 / acked.max(1) as f64,
        "ack_p50_ms": pct(0.50),
        "ack_p99_ms": pct(0.99),
        "ack_max_ms": latencies.last().map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0),
        "errors": tally.errors.load(Ordering::Relaxed),
        "throttled": tally.throttled.load(Ordering::Relaxed),
    });
    if args.json {
        crate::out::outln!("{report}");
    } else {
        crate::out::outln!(
            "acked {acked} spans in {elapsed:.1} s: {:.0} spans/s; ack latency p50 {:.1} ms, p99 {:.1} ms; {} errors, {} throttled (429)",
            acked as f64 / elapsed,
            pct(0.50),
            pct(0.99),
            report["errors"],
            report["throttled"],
        );
    }
    anyhow::ensure!(acked > 0, "no span was acknowledged by {url}");
    Ok(())
}

async fn worker_loop(
    worker: usize,
    client: reqwest::Client,
    url: String,
    corpus: Arc<TextCorpus>,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    args: LoadgenArgs,
) -> anyhow::Result<Vec<Duration>> {
    // Ids and timings come from the OS RNG: fresh on every run.
    let mut rng = SmallRng::from_os_rng();
    let traces_per_batch = args.batch_spans / 4;
    // In OpenLineage mode a "span" of the tally is one event.
    let spans_per_batch = if args.openlineage {
        1
    } else {
        (traces_per_batch * 4) as u64
    };
    let mut ticker = (args.rate > 0).then(|| {
        let batches_per_s = args.rate as f64 / spans_per_batch as f64;
        let period = Duration::from_secs_f64(args.concurrency as f64 / batches_per_s);
        // Workers start evenly staggered over one period, so a fixed rate arrives
        // evenly spread rather than as bursts of `concurrency` requests.
        let offset = period.mul_f64(worker as f64 / args.concurrency as f64);
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut latencies = Vec::new();
    // A few requests built once per worker, then re-sent with fresh ids and times:
    // building hundreds of attribute strings per request cost the loadgen, which
    // shares the cores with the server, more than encoding them.
    // None in OpenLineage mode: with 256 workers, building span templates never sent
    // was the loadgen's largest cost in a profile of the run's first seconds.
    let templates_needed = if args.openlineage {
        0
    } else {
        TEMPLATES_PER_WORKER
    };
    let mut templates: Vec<Template> = (0..templates_needed)
        .map(|_| {
            let request = build_request(&mut rng, &corpus, traces_per_batch);
            Template::new(request, &mut rng)
        })
        .collect();
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        if let Some(t) = ticker.as_mut() {
            t.tick().await;
        }
        let (mut body, content_type) = if args.openlineage {
            (openlineage_event(&mut rng, next), "application/json")
        } else {
            let template = &mut templates[next % TEMPLATES_PER_WORKER];
            (template.refreshed(&mut rng), "application/x-protobuf")
        };
        next += 1;
        let protobuf_bytes = body.len() as u64;
        let mut req = client.post(&url).header("content-type", content_type);
        if args.gzip {
            use std::io::Write;
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(&body)?;
            body = enc.finish()?;
            req = req.header("content-encoding", "gzip");
        }
        if let Some(key) = &args.api_key.key {
            req = req.bearer_auth(key);
        }
        let before = tally
            .spans_sent
            .fetch_add(spans_per_batch, Ordering::Relaxed);
        if args.spans.is_some_and(|n| before >= n) {
            tally
                .spans_sent
                .fetch_sub(spans_per_batch, Ordering::Relaxed);
            break;
        }
        let sent = Instant::now();
        match req.body(body).send().await {
            Ok(resp) if resp.status().is_success() => {
                let _ = resp.bytes().await;
                latencies.push(sent.elapsed());
                tally
                    .spans_acked
                    .fetch_add(spans_per_batch, Ordering::Relaxed);
                tally
                    .bytes_acked
                    .fetch_add(protobuf_bytes, Ordering::Relaxed);
            }
            Ok(resp) if resp.status().as_u16() == 429 => {
                tally.throttled.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(resp) => {
                let status = resp.status();
                let protobuf = resp
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
                let body = resp.bytes().await.unwrap_or_default();
                if tally.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!(
                        "loadgen: {url} answered {status}: {}",
                        error_text(&body, protobuf)
                    );
                }
            }
            Err(e) => {
                if tally.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("loadgen: request to {url} failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Ok(latencies)
}

/// An OTLP/HTTP error body as text: a protobuf `Status`'s message, or the text sent.
fn error_text(body: &[u8], protobuf: bool) -> String {
    let text = match protobuf.then(|| RpcStatus::decode(body)) {
        Some(Ok(status)) => status.message,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    text.chars().take(300).collect()
}

/// `threadline bench openlineage`: `events` of the loadgen's RunEvents parsed,
/// projected and applied through the store's write path in process, `in_flight` at a
/// time, each waited for as the loadgen waits for its ack. Reports events/s and the
/// process's CPU per event (from `/proc/self/stat`, where there is one).
pub(crate) fn bench_openlineage(
    data_dir: &std::path::Path,
    events: usize,
    in_flight: usize,
) -> anyhow::Result<serde_json::Value> {
    use threadline_store::{SqliteConfig, SqliteStore};
    let store = SqliteStore::open(data_dir, SqliteConfig::default())?;
    let tenant = threadline_model::TenantId::new("bench")?;
    let mut rng = SmallRng::seed_from_u64(7);
    let bodies: Vec<Vec<u8>> = (0..events)
        .map(|n| openlineage_event(&mut rng, n))
        .collect();
    let (cpu_before, started) = (process_cpu_seconds(), Instant::now());
    for chunk in bodies.chunks(in_flight.max(1)) {
        let mut acks = Vec::with_capacity(chunk.len());
        for body in chunk {
            let parsed = threadline_lineage::parse_event(body)?;
            let graph = SqliteStore::prepare_graph(parsed.update);
            acks.push(store.submit_prepared_graph(&tenant, graph, now_nanos() as i64)?);
        }
        for ack in acks {
            ack.wait_blocking()?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    let runs = store
        .nodes_of_kind(&tenant, threadline_model::NodeKind::Run, events + 1)?
        .len();
    Ok(serde_json::json!({
        "events": events,
        "in_flight": in_flight,
        "seconds": seconds,
        "events_per_s": events as f64 / seconds.max(1e-9),
        "cpu_us_per_event": cpu.map(|c| c * 1e6 / events.max(1) as f64),
        "runs_stored": runs,
    }))
}

/// User + system CPU time of this process so far, on Linux.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // The kernel reports in USER_HZ, which is 100 on every Linux this runs on.
    Some(ticks / 100.0)
}

/// The schema facet every dataset of the loadgen's RunEvents carries, as JSON text.
const LOADGEN_SCHEMA_FACET: &str = r#"{"_producer":"loadgen","_schemaURL":"https://openlineage.io/spec/facets/1-1-1/SchemaDatasetFacet.json","fields":[{"name":"id","type":"BIGINT"},{"name":"question","type":"STRING"},{"name":"answer","type":"STRING"}]}"#;

/// A training-pipeline RunEvent: a fresh run (UUIDv7 id) of one of 200 jobs reading two
/// of 1,000 datasets (with schema and quality facets) and writing one; START or COMPLETE.
/// Written straight into JSON text: building a `serde_json::Value` per event cost the
/// loadgen, which shares the cores with the server, about 100 µs of CPU per event.
fn openlineage_event(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    // UUIDv7 (48-bit unix milliseconds, then random), as the openlineage-python
    // client, the Airflow provider and the Spark integration generate run ids.
    let mut id: [u8; 16] = rng.random();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    id[..6].copy_from_slice(&(now.as_millis() as u64).to_be_bytes()[2..]);
    id[6] = 0x70 | (id[6] & 0x0f);
    id[8] = 0x80 | (id[8] & 0x3f);
    let run_id = format!(
        "{}-{}-{}-{}-{}",
        hex_of(&id[0..4]),
        hex_of(&id[4..6]),
        hex_of(&id[6..8]),
        hex_of(&id[8..10]),
        hex_of(&id[10..16])
    );
    let (a, b, out) = (
        rng.random_range(0..1000u32),
        rng.random_range(0..1000u32),
        rng.random_range(0..1000u32),
    );
    let time = format!(
        "{}.{:06}Z",
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(now.as_secs()))
            .to_string()
            .trim_end_matches('Z'),
        now.subsec_micros()
    );
    let event_type = if n.is_multiple_of(2) {
        "START"
    } else {
        "COMPLETE"
    };
    let job = rng.random_range(0..200u32);
    let rows = rng.random_range(1000..100000u32);
    let nulls = rng.random_range(0..100u32);
    let schema = LOADGEN_SCHEMA_FACET;
    format!(
        r#"{{"eventType":"{event_type}","eventTime":"{time}","run":{{"runId":"{run_id}","facets":{{"nominalTime":{{"_producer":"loadgen","_schemaURL":"https://openlineage.io/spec/facets/1-0-0/NominalTimeRunFacet.json","nominalStartTime":"{time}"}}}}}},"job":{{"namespace":"pipelines","name":"job-{job}"}},"inputs":[{{"namespace":"warehouse","name":"warehouse.table_{a}","facets":{{"schema":{schema}}},"inputFacets":{{"dataQualityMetrics":{{"_producer":"loadgen","_schemaURL":"https://openlineage.io/spec/facets/1-0-2/DataQualityMetricsInputDatasetFacet.json","rowCount":{rows},"columnMetrics":{{"answer":{{"nullCount":{nulls}}}}}}}}}}},{{"namespace":"warehouse","name":"warehouse.table_{b}","facets":{{"schema":{schema}}}}}],"outputs":[{{"namespace":"warehouse","name":"warehouse.table_{out}","facets":{{"schema":{schema}}}}}],"producer":"https://github.com/threadline/loadgen","schemaURL":"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"}}"#
    )
    .into_bytes()
}

fn hex_of(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Requests each worker builds up front and re-sends with fresh ids and times.
const TEMPLATES_PER_WORKER: usize = 4;

/// A request encoded once, with where each span's ids and times sit in its bytes.
/// Ids and times are fixed-size fields (16- and 8-byte ids, fixed64 times), so a
/// copy with fresh values is the same bytes with those slots overwritten: the
/// loadgen, which shares the cores with the server, never re-encodes a request
/// (measured: its user CPU per span 3.9 → 1.5 µs; the server's is ≈ 40).
struct Template {
    /// The request as last sent.
    encoded: Vec<u8>,
    /// Its spans in encoding order.
    spans: Vec<SpanSlots>,
    /// How many distinct traces the spans belong to.
    trace_count: usize,
    /// The latest original start time: refreshed, it becomes about now.
    latest_start: u64,
}

/// One span of a `Template`: the byte offsets of its fields and its original times.
struct SpanSlots {
    /// Index of the span's trace among the template's traces.
    trace: usize,
    trace_id_at: usize,
    span_id_at: usize,
    /// Offset of the parent id and the parent's index among the template's spans.
    parent: Option<(usize, usize)>,
    start_at: usize,
    end_at: usize,
    start: u64,
    end: u64,
}

/// Random values written into one span's slots to find them in the encoding.
struct SlotMarkers {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_id: [u8; 8],
    start: u64,
    end: u64,
}

impl SlotMarkers {
    fn new(rng: &mut SmallRng) -> Self {
        Self {
            trace_id: rng.random(),
            span_id: rng.random(),
            parent_id: rng.random(),
            start: rng.random(),
            end: rng.random(),
        }
    }
}

impl Template {
    /// Encodes `request` with a unique random marker in every id and time, then finds
    /// the markers: a span's fields follow the previous span's, so one forward scan
    /// over the bytes finds them all.
    fn new(mut request: ExportTraceServiceRequest, rng: &mut SmallRng) -> Self {
        let original: Vec<Span> = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect();
        let mut trace_index: HashMap<&[u8], usize> = HashMap::new();
        let mut span_index: HashMap<&[u8], usize> = HashMap::new();
        for (i, span) in original.iter().enumerate() {
            let traces = trace_index.len();
            trace_index.entry(&span.trace_id).or_insert(traces);
            span_index.insert(&span.span_id, i);
        }
        let markers: Vec<SlotMarkers> = original.iter().map(|_| SlotMarkers::new(rng)).collect();
        let spans_mut = request
            .resource_spans
            .iter_mut()
            .flat_map(|r| &mut r.scope_spans)
            .flat_map(|s| &mut s.spans);
        for (span, m) in spans_mut.zip(&markers) {
            span.trace_id = m.trace_id.to_vec();
            span.span_id = m.span_id.to_vec();
            if !span.parent_span_id.is_empty() {
                span.parent_span_id = m.parent_id.to_vec();
            }
            span.start_time_unix_nano = m.start;
            span.end_time_unix_nano = m.end;
        }
        let encoded = request.encode_to_vec();
        // Where `pattern` first occurs in the encoding at or after `from`.
        let find = |pattern: &[u8], from: usize| -> usize {
            from + encoded[from..]
                .windows(pattern.len())
                .position(|w| w == pattern)
                .expect("a marker written into the template is in its encoding")
        };
        let mut spans: Vec<SpanSlots> = Vec::with_capacity(original.len());
        let mut from = 0;
        for (span, m) in original.iter().zip(&markers) {
            let slots = SpanSlots {
                trace: trace_index[span.trace_id.as_slice()],
                trace_id_at: find(&m.trace_id, from),
                span_id_at: find(&m.span_id, from),
                parent: span_index
                    .get(span.parent_span_id.as_slice())
                    .map(|&p| (find(&m.parent_id, from), p)),
                start_at: find(&m.start.to_le_bytes(), from),
                end_at: find(&m.end.to_le_bytes(), from),
                start: span.start_time_unix_nano,
                end: span.end_time_unix_nano,
            };
            from = [
                slots.trace_id_at,
                slots.span_id_at,
                slots.start_at,
                slots.end_at,
            ]
            .into_iter()
            .chain(slots.parent.map(|(at, _)| at))
            .max()
            .unwrap_or(from)
                + 8;
            spans.push(slots);
        }
        let latest_start = spans.iter().map(|s| s.start).max().unwrap_or(0);
        Self {
            encoded,
            spans,
            trace_count: trace_index.len(),
            latest_start,
        }
    }

    /// The request with a new random id for every trace and span (parent links and
    /// trace membership kept) and its times moved so the newest root starts about now.
    fn refreshed(&mut self, rng: &mut SmallRng) -> Vec<u8> {
        // Signed: a template built a moment ago has spans starting in the future (its
        // LLM calls last up to 2.5 s), which must move back.
        let shift = now_nanos() as i64 - self.latest_start as i64;
        // Each trace also starts up to 50 ms earlier, so copies of a template sent in
        // the same millisecond do not all start on the same nanosecond.
        let traces: Vec<([u8; 16], i64)> = (0..self.trace_count)
            .map(|_| (rng.random(), rng.random_range(0..50_000_000)))
            .collect();
        let span_ids: Vec<[u8; 8]> = (0..self.spans.len()).map(|_| rng.random()).collect();
        let bytes = &mut self.encoded;
        // Times come from the template's original ones, so jitter never accumulates.
        for (slots, span_id) in self.spans.iter().zip(&span_ids) {
            let (trace_id, jitter) = traces[slots.trace];
            bytes[slots.trace_id_at..][..16].copy_from_slice(&trace_id);
            bytes[slots.span_id_at..][..8].copy_from_slice(span_id);
            if let Some((at, parent)) = slots.parent {
                bytes[at..][..8].copy_from_slice(&span_ids[parent]);
            }
            let start = (slots.start as i64 + shift - jitter) as u64;
            let end = (slots.end as i64 + shift - jitter) as u64;
            bytes[slots.start_at..][..8].copy_from_slice(&start.to_le_bytes());
            bytes[slots.end_at..][..8].copy_from_slice(&end.to_le_bytes());
        }
        bytes.clone()
    }
}

/// Pre-generated prompts and responses, so sending costs little CPU.
struct TextCorpus {
    prompts: Vec<String>,
    /// `gen_ai.input.messages` / `gen_ai.output.messages` JSON, built once.
    input_messages: Vec<String>,
    output_messages: Vec<String>,
}

const WORDS: &[&str] = &[
    "the",
    "customer",
    "account",
    "balance",
    "transfer",
    "please",
    "explain",
    "why",
    "my",
    "card",
    "was",
    "declined",
    "yesterday",
    "when",
    "I",
    "tried",
    "to",
    "pay",
    "for",
    "groceries",
    "and",
    "what",
    "should",
    "do",
    "next",
    "policy",
    "states",
    "that",
    "refunds",
    "are",
    "processed",
    "within",
    "five",
    "business",
    "days",
    "after",
    "approval",
    "from",
    "support",
    "team",
    "you",
    "can",
    "check",
    "status",
    "in",
    "the",
    "mobile",
    "app",
    "under",
    "payments",
    "history",
    "if",
    "problem",
    "persists",
    "contact",
    "branch",
    "interest",
    "rate",
    "loan",
    "mortgage",
    "fixed",
    "variable",
    "term",
    "years",
    "monthly",
    "payment",
    "estimate",
    "based",
    "on",
    "current",
    "market",
    "conditions",
    "document",
    "retrieved",
    "section",
    "fees",
    "overdraft",
    "limit",
    "international",
    "transaction",
    "currency",
    "exchange",
    "fraud",
    "alert",
    "verify",
    "identity",
    "security",
    "question",
    "answer",
    "summary",
    "context",
    "following",
    "passages",
    "relevant",
    "assistant",
    "helpful",
    "concise",
    "accurate",
    "cite",
    "sources",
    "do",
    "not",
    "invent",
    "information",
    "regulation",
    "compliance",
    "report",
    "quarterly",
    "earnings",
    "revenue",
];

impl TextCorpus {
    fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut text = |min: usize, max: usize| -> String {
            let target = rng.random_range(min..max);
            let mut s = String::with_capacity(target + 16);
            while s.len() < target {
                s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
                s.push(if rng.random_ratio(1, 12) { '.' } else { ' ' });
            }
            s
        };
        let system_prompts: Vec<String> = (0..4).map(|_| text(300, 600)).collect();
        let prompts: Vec<String> = (0..64).map(|_| text(1200, 3000)).collect();
        let responses: Vec<String> = (0..64).map(|_| text(300, 1200)).collect();
        let input_messages = prompts
            .iter()
            .enumerate()
            .map(|(i, prompt)| {
                serde_json::json!([
                    {"role": "system", "parts": [{"type": "text", "content": system_prompts[i % system_prompts.len()]}]},
                    {"role": "user", "parts": [{"type": "text", "content": prompt}]},
                ])
                .to_string()
            })
            .collect();
        let output_messages = responses
            .iter()
            .map(|response| {
                serde_json::json!([
                    {"role": "assistant", "parts": [{"type": "text", "content": response}], "finish_reason": "stop"},
                ])
                .to_string()
            })
            .collect();
        Self {
            prompts,
            input_messages,
            output_messages,
        }
    }
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

pub(crate) fn s(key: &str, v: impl Into<String>) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

pub(crate) fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

pub(crate) fn d(key: &str, v: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(v))
}

/// One service's spans, under a resource naming the service and its environment.
pub(crate) fn service_spans(service: &str, environment: &str, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                s("service.name", service),
                s("deployment.environment.name", environment),
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn resource(service: &str, extra: Vec<KeyValue>) -> Resource {
    let mut attributes = vec![
        s("service.name", service),
        s("service.version", "2.3.1"),
        s("deployment.environment.name", "loadgen"),
        s("telemetry.sdk.name", "threadline-loadgen"),
    ];
    attributes.extend(extra);
    Resource {
        attributes,
        ..Default::default()
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn build_request(
    rng: &mut SmallRng,
    corpus: &TextCorpus,
    traces: usize,
) -> ExportTraceServiceRequest {
    let mut by_service: [Vec<Span>; 4] = Default::default();
    let base = now_nanos();
    for _ in 0..traces {
        let trace_id: [u8; 16] = rng.random();
        let ids: [[u8; 8]; 4] = rng.random();
        let start = base - rng.random_range(0..50_000_000u64);
        let llm_ms = rng.random_range(200..2500u64);
        let retr_ms = rng.random_range(5..80u64);
        let tool_ms = rng.random_range(1..40u64);
        let total = (retr_ms + llm_ms + tool_ms + 10) * 1_000_000;
        let route =
            ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"][rng.random_range(0..3)];
        let instance = rng.random_range(1..=6u32);
        let adapter = if instance <= 2 {
            "fin-lora@7"
        } else {
            "support-lora@3"
        };
        let input_tokens = rng.random_range(300..1200i64);
        let output_tokens = rng.random_range(50..400i64);
        let failed = rng.random_ratio(1, 40);
        let prompt_idx = rng.random_range(0..corpus.prompts.len());
        let prompt = &corpus.prompts[prompt_idx];
        let input_messages = &corpus.input_messages[prompt_idx];
        let output_messages =
            &corpus.output_messages[rng.random_range(0..corpus.output_messages.len())];
        let user = format!("user-{}", rng.random_range(0..500u32));
        let span = |id: usize,
                    parent: Option<usize>,
                    name: &str,
                    kind: span::SpanKind,
                    start: u64,
                    dur_ms: u64,
                    attributes: Vec<KeyValue>,
                    error: bool| Span {
            trace_id: trace_id.to_vec(),
            span_id: ids[id].to_vec(),
            parent_span_id: parent.map(|p| ids[p].to_vec()).unwrap_or_default(),
            name: name.to_owned(),
            kind: kind as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: start + dur_ms * 1_000_000,
            attributes,
            status: Some(Status {
                code: if error {
                    status::StatusCode::Error
                } else {
                    status::StatusCode::Unset
                } as i32,
                message: if error {
                    "upstream model timed out".to_owned()
                } else {
                    String::new()
                },
            }),
            flags: 0x101,
            ..Default::default()
        };
        by_service[0].push(span(
            0,
            None,
            &format!("POST {route}"),
            span::SpanKind::Server,
            start,
            total / 1_000_000,
            vec![
                s("http.request.method", "POST"),
                s("http.route", route),
                s("api.route", route),
                i("http.response.status_code", if failed { 504 } else { 200 }),
                s("ab.group", if rng.random_bool(0.5) { "A" } else { "B" }),
                s(
                    "gray.tag",
                    if rng.random_ratio(1, 10) {
                        "canary"
                    } else {
                        "stable"
                    },
                ),
                s("user.id", user.clone()),
                s(
                    "session.id",
                    format!("sess-{}", rng.random_range(0..2000u32)),
                ),
            ],
            failed,
        ));
        let retr_start = start + 2_000_000;
        by_service[1].push(span(
            1,
            Some(0),
            "retrieval support-kb",
            span::SpanKind::Client,
            retr_start,
            retr_ms,
            vec![
                s("gen_ai.operation.name", "retrieval"),
                s("gen_ai.data_source.id", "support-kb"),
                s(
                    "gen_ai.retrieval.query.text",
                    prompt.chars().take(120).collect::<String>(),
                ),
                i("db.response.returned_rows", 8),
            ],
            false,
        ));
        let llm_start = retr_start + retr_ms * 1_000_000 + 1_000_000;
        by_service[2].push(span(
            2,
            Some(0),
            "chat llama-3-8b-instruct",
            span::SpanKind::Client,
            llm_start,
            llm_ms,
            vec![
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.provider.name", "openai"),
                s(
                    "gen_ai.request.model",
                    "meta-llama/Meta-Llama-3-8B-Instruct",
                ),
                s(
                    "gen_ai.response.model",
                    "meta-llama/Meta-Llama-3-8B-Instruct",
                ),
                s(
                    "gen_ai.response.id",
                    format!("chatcmpl-{:x}", rng.random::<u64>()),
                ),
                i("gen_ai.usage.input_tokens", input_tokens),
                i("gen_ai.usage.output_tokens", output_tokens),
                i("gen_ai.request.max_tokens", 512),
                d("gen_ai.request.temperature", 0.2),
                d(
                    "gen_ai.response.time_to_first_chunk",
                    rng.random_range(0.05..0.4),
                ),
                kv(
                    "gen_ai.response.finish_reasons",
                    any_value::Value::ArrayValue(ArrayValue {
                        values: vec![AnyValue {
                            value: Some(any_value::Value::StringValue("stop".into())),
                        }],
                    }),
                ),
                s("gen_ai.input.messages", input_messages.as_str()),
                s("gen_ai.output.messages", output_messages.as_str()),
                s("server.address", format!("inference-{instance}.svc")),
                s("llm.prompt_template.id", "support-chat"),
                s("llm.prompt.version", "v2.1.4"),
                s("llm.lora.adapter_id", adapter),
                s("model.instance.id", format!("inst-{instance}")),
                s("api.route", route),
                d("llm.kvcache.hit_ratio", rng.random_range(0.3..0.95)),
            ],
            failed,
        ));
        let tool_start = llm_start + llm_ms * 1_000_000 + 1_000_000;
        by_service[3].push(span(
            3,
            Some(0),
            "execute_tool lookup_account",
            span::SpanKind::Internal,
            tool_start,
            tool_ms,
            vec![
                s("gen_ai.operation.name", "execute_tool"),
                s("gen_ai.tool.name", "lookup_account"),
                s(
                    "gen_ai.tool.call.id",
                    format!("call_{:x}", rng.random::<u32>()),
                ),
                s(
                    "gen_ai.tool.call.arguments",
                    format!("{{\"account\":\"{user}\"}}"),
                ),
            ],
            false,
        ));
    }
    let services = [
        ("gateway", vec![]),
        ("retriever", vec![]),
        (
            "inference",
            vec![s("container.image", "ghcr.io/acme/inference:v2.3.1")],
        ),
        ("agent-tools", vec![]),
    ];
    ExportTraceServiceRequest {
        resource_spans: services
            .into_iter()
            .zip(by_service)
            .map(|((name, extra), spans)| ResourceSpans {
                resource: Some(resource(name, extra)),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "threadline.loadgen".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod error_text_tests {
    use super::*;

    #[test]
    fn protobuf_status_bodies_are_shown_as_their_message() {
        let body = RpcStatus {
            code: 3,
            message: "span 1: end before start".into(),
        }
        .encode_to_vec();
        assert_eq!(error_text(&body, true), "span 1: end before start");
        assert_eq!(error_text(b"plain words", false), "plain words");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refreshed template is the request it was built from with new ids (parent links
    /// and trace membership kept) and times moved to now; nothing else changes.
    #[test]
    fn refreshed_templates_keep_structure_with_fresh_ids_and_times() {
        let mut rng = SmallRng::seed_from_u64(3);
        let corpus = TextCorpus::new(3);
        let original = build_request(&mut rng, &corpus, 25);
        let mut template = Template::new(original.clone(), &mut rng);
        let spans = |r: &ExportTraceServiceRequest| -> Vec<Span> {
            r.resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| s.spans.clone())
                .collect()
        };
        let before = spans(&original);
        let mut seen_ids = std::collections::HashSet::new();
        for _ in 0..2 {
            let sent_at = now_nanos();
            let refreshed =
                ExportTraceServiceRequest::decode(template.refreshed(&mut rng).as_slice()).unwrap();
            let after = spans(&refreshed);
            assert_eq!(after.len(), before.len());
            let new_id_of: HashMap<&[u8], &[u8]> = before
                .iter()
                .zip(&after)
                .map(|(b, a)| (b.span_id.as_slice(), a.span_id.as_slice()))
                .collect();
            for (b, a) in before.iter().zip(&after) {
                assert!(seen_ids.insert(a.span_id.clone()), "span ids are fresh");
                assert_ne!(a.trace_id, b.trace_id);
                assert_eq!(a.name, b.name);
                assert_eq!(a.attributes, b.attributes);
                if b.parent_span_id.is_empty() {
                    assert!(a.parent_span_id.is_empty());
                } else {
                    assert_eq!(a.parent_span_id, new_id_of[b.parent_span_id.as_slice()]);
                }
                assert_eq!(
                    a.end_time_unix_nano - a.start_time_unix_nano,
                    b.end_time_unix_nano - b.start_time_unix_nano
                );
            }
            // Spans of one trace still share a trace id, spans of two never do.
            for (b1, a1) in before.iter().zip(&after) {
                for (b2, a2) in before.iter().zip(&after) {
                    assert_eq!(b1.trace_id == b2.trace_id, a1.trace_id == a2.trace_id);
                }
            }
            let newest = after.iter().map(|s| s.start_time_unix_nano).max().unwrap();
            assert!(newest <= now_nanos() && newest + 60_000_000 >= sent_at);
        }
    }

    /// The hand-written JSON is a valid RunEvent the server takes without warnings.
    #[test]
    fn openlineage_events_are_valid_run_events() {
        let mut rng = SmallRng::seed_from_u64(7);
        for n in 0..4 {
            let body = openlineage_event(&mut rng, n);
            let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(event["inputs"].as_array().map(Vec::len), Some(2));
            assert_eq!(
                event["inputs"][0]["facets"]["schema"]["fields"][2]["name"],
                "answer"
            );
            let parsed = threadline_lineage::parse_event(&body).unwrap();
            assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
            assert_eq!(parsed.update.runs.len(), 1);
        }
    }
}
