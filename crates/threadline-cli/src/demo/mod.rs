//! `threadline demo`: starts the server on the embedded store, loads a synthetic LLM
//! platform — datasets and versions, fine-tune runs, base models, adapters, prompt
//! templates, four routes on ten instances — with hours of traffic compressed in time
//! (span times in the past, loaded in seconds), injects six incidents among harmless
//! changes, then prints the incidents Threadline found, their ranked causes, and
//! whether each injected cause ranked first.
//!
//! The scenario is fixed by a seed, so the report is the same on every run. Minutes
//! below are offsets from the start of the simulated window (the last 240 minutes;
//! `--hours` beyond 4 adds quiet traffic before).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::client::ApiClient;
use crate::loadgen::{d, i, s};
use crate::synth::{dataset_input, gauss, nonzero_id, rfc3339, training_run};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Print the report and exit (for scripts and CI) instead of serving until Ctrl-C.
    #[arg(long)]
    no_serve: bool,
    /// Hours of traffic to simulate (at least 4).
    #[arg(long, default_value_t = 4)]
    hours: u32,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Where to keep the store [default: a temporary directory, removed at exit].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The store, as `serve --store` takes it [default: the embedded store]. A ClickHouse
    /// database should be empty: the demo's checks count what it finds.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// JSON API listen address [default: 127.0.0.1:8080; a free port with --no-serve].
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// OTLP/HTTP listen address [default: 127.0.0.1:4318; a free port with --no-serve].
    #[arg(long, value_name = "ADDR")]
    otlp_http: Option<String>,
    /// OTLP/gRPC listen address [default: 127.0.0.1:4317; a free port with --no-serve].
    #[arg(long, value_name = "ADDR")]
    otlp_grpc: Option<String>,
    /// Seed of the synthetic traffic.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

mod scenario;

use scenario::*;

/// Loads everything; returns (requests, spans).
async fn load(
    api: &ApiClient,
    otlp: &str,
    s0: i64,
    minutes: i64,
    offset: i64,
    seed: u64,
    quiet: bool,
) -> anyhow::Result<(usize, usize, Showcase)> {
    api.send_json(reqwest::Method::PUT, "/api/v1/assets", &manifest())
        .await?;
    for event in lineage_events(s0) {
        api.send_json(reqwest::Method::POST, "/api/v1/lineage", &event)
            .await?;
    }
    let batches = traffic(seed, s0 - offset, minutes, offset);
    let spans: usize = batches.iter().map(crate::synth::span_count).sum();
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(spans as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("loading {wide_bar} {pos}/{len} spans ({per_sec}) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(format!("{} h of traffic", minutes / 60));
    crate::synth::upload_traces(otlp, batches, &bar).await?;
    bar.finish_and_clear();
    let showcase =
        crate::demo_showcase::showcase(seed, ((s0 + WINDOW) * 60) as u64 * 1_000_000_000);
    let http = reqwest::Client::new();
    for (path, body) in [
        ("traces", showcase.traces.encode_to_vec()),
        ("logs", showcase.logs.encode_to_vec()),
    ] {
        crate::synth::post_protobuf(&http, &format!("http://{otlp}/v1/{path}"), body).await?;
    }
    Ok((
        spans / 2,
        spans,
        Showcase {
            sessions: showcase.sessions,
            large_trace: showcase.large_trace,
        },
    ))
}

/// What the showcase traces are, for the report's links.
struct Showcase {
    sessions: Vec<String>,
    large_trace: String,
}

/// The incidents found, their causes, and how each injected incident fared.
async fn report(
    api: &ApiClient,
    base: &str,
    s0: i64,
    first_minute: i64,
    showcase: &Showcase,
) -> anyhow::Result<Value> {
    let listed = api
        .get(
            "/api/v1/incidents",
            &[("from".into(), (first_minute * 60).to_string())],
        )
        .await?;
    let mut incidents = Vec::new();
    for incident in listed["incidents"].as_array().cloned().unwrap_or_default() {
        let id = incident["id"].as_str().unwrap_or_default().to_owned();
        let rca = api.get("/api/v1/rca", &[("incident".into(), id)]).await?;
        incidents.push((incident, rca));
    }
    let mut matched = vec![false; incidents.len()];
    let mut outcomes = Vec::new();
    for inj in injected() {
        let onset = s0 + inj.onset;
        let found = incidents.iter().position(|(i, _)| {
            i["route"] == inj.route
                && (i["onset_unix"].as_i64().unwrap_or(0) / 60 - onset).abs() <= 5
        });
        let (incident_id, rank) = match found {
            Some(k) => {
                matched[k] = true;
                let (incident, rca) = &incidents[k];
                let rank = rca["candidates"]
                    .as_array()
                    .and_then(|c| c.iter().position(|c| c["subject"] == inj.cause.as_str()))
                    .map(|p| p + 1);
                (incident["id"].clone(), rank)
            }
            None => (Value::Null, None),
        };
        outcomes.push(json!({
            "name": inj.name,
            "route": inj.route,
            "onset": rfc3339(onset),
            "true_cause": inj.cause,
            "incident": incident_id,
            "true_cause_rank": rank,
            "ranked_first": rank == Some(1),
        }));
    }
    let unexpected: Vec<Value> = incidents
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|((i, _), _)| i["id"].clone())
        .collect();
    let exemplar = incidents.iter().find_map(|(_, r)| {
        r.pointer("/candidates/0/evidence/exemplar_trace_ids/0")
            .cloned()
    });
    let commands = example_commands(base, &incidents, exemplar.as_ref(), first_minute);
    Ok(json!({
        "commands": commands,
        "incidents": incidents.iter().map(|(i, r)| {
            let mut i = i.clone();
            i["causes"] = json!(r["candidates"].as_array().map(|c| c.iter().take(3).cloned().collect::<Vec<_>>()));
            i
        }).collect::<Vec<_>>(),
        "injected": outcomes,
        "unexpected_incidents": unexpected,
        // Pages of the UI, in the order a person would open them.
        "pages": [
            ["ui", format!("{base}/")],
            ["incident", incidents.first().map(|(i, _)| format!("{base}/incidents/{}", i["id"].as_str().unwrap_or_default()))],
            ["trace", exemplar.as_ref().map(|t| format!("{base}/traces/{}", t.as_str().unwrap_or_default()))],
            ["session", showcase.sessions.first().map(|s| format!("{base}/sessions/{s}"))],
            ["large trace", format!("{base}/traces/{}", showcase.large_trace)],
            ["lineage", format!("{base}/lineage/dataset%3Awarehouse%3Afin-docs?direction=downstream&depth=6")],
            ["impact", format!("{base}/impact/dataset%3Awarehouse%3Afin-docs")],
            ["dashboard", format!("{base}/dashboard?group_by=route&range=6h")],
        ],
        "urls": {
            "incidents": format!("{base}/api/v1/incidents"),
            "rca": incidents.first().map(|(i, _)| format!("{base}/api/v1/rca?incident={}", i["id"].as_str().unwrap_or_default())),
            "metrics": format!("{base}/api/v1/metrics?metric=p99_latency&group_by=route&from={}&step=300", first_minute * 60),
            "trace": exemplar.map(|t| format!("{base}/api/v1/traces/{}", t.as_str().unwrap_or_default())),
            "lineage": format!("{base}/api/v1/lineage/{}?direction=downstream&depth=6", "dataset:warehouse:fin-docs"),
            "prometheus": format!("{base}/metrics"),
        },
    }))
}

/// The README's command-line examples with this demo's own ids and times (its data is
/// relative to now), each one runnable as printed.
fn example_commands(
    base: &str,
    incidents: &[(Value, Value)],
    exemplar: Option<&Value>,
    first_minute: i64,
) -> Vec<String> {
    let server = if base == format!("http://127.0.0.1:{}", DEFAULT_HTTP_PORT) {
        String::new()
    } else {
        format!(" --server {base}")
    };
    let from = rfc3339(first_minute);
    let mut commands = vec![
        format!("threadline search{server} --model meta-llama/meta-llama-3 --min-duration 1s"),
        format!("threadline search{server} --route /v1/support --errors --from {from}"),
        format!("threadline search{server} --attr gen_ai.tool.name=lookup_account"),
        format!("threadline search{server} --text refund"),
    ];
    if let Some(trace) = exemplar.and_then(Value::as_str) {
        commands.push(format!("threadline trace{server} {trace}"));
    }
    commands.push(format!("threadline incidents{server}"));
    if let Some((incident, _)) = incidents.first() {
        let id = incident["id"].as_str().unwrap_or_default();
        commands.push(format!("threadline rca{server} --incident {id}"));
        let at = incident["onset_unix"].as_i64().unwrap_or(0) / 60 + 2;
        commands.push(format!(
            "threadline rca{server} --route {} --metric {} --at {}",
            incident["route"].as_str().unwrap_or_default(),
            incident["metric"].as_str().unwrap_or("p99_latency"),
            rfc3339(at)
        ));
    }
    commands.extend([
        format!("threadline health{server} adapter:sum-lora@4"),
        format!("threadline lineage{server} dataset:warehouse:fin-docs --down --depth 6"),
        format!("threadline lineage{server} fin-lora@7 --up"),
        format!("threadline impact{server} dataset:warehouse:fin-docs --since {from}"),
    ]);
    if let Some(trace) = exemplar.and_then(Value::as_str) {
        commands.push(format!(
            "threadline export prov{server} --root request:{trace} --format turtle"
        ));
    }
    commands
}

fn print_report(r: &Value, requests: usize, spans: usize, hours: u32, serving: bool) {
    crate::out::outln!(
        "Threadline demo: {hours} h of synthetic LLM traffic, {requests} requests ({spans} spans) on 4 routes and 10 instances,\nplus a registry manifest, 10 OpenLineage events (5 fine-tune runs over 3 datasets), {} assistant sessions\nwith their conversations and a {}-span document-indexing trace.\n",
        crate::demo_showcase::SESSIONS,
        crate::demo_showcase::CHUNKS + 6
    );
    let incidents = r["incidents"].as_array().cloned().unwrap_or_default();
    crate::out::outln!("Incidents found: {}", incidents.len());
    for i in &incidents {
        crate::out::outln!("  {}", crate::diagnosis_cmd::incident_line(i));
        crate::out::out!(
            "{}",
            crate::diagnosis_cmd::candidate_lines(&i["causes"], "      ")
        );
    }
    crate::out::outln!("\nInjected incidents:");
    for o in r["injected"].as_array().into_iter().flatten() {
        let mark = if o["ranked_first"].as_bool() == Some(true) {
            "ok  "
        } else {
            "MISS"
        };
        let rank = o["true_cause_rank"]
            .as_u64()
            .map_or("not ranked".to_owned(), |n| format!("ranked {n}"));
        crate::out::outln!(
            "  {mark} {} ({}): true cause {} {rank}, incident {}",
            o["name"].as_str().unwrap_or_default(),
            o["route"].as_str().unwrap_or_default(),
            o["true_cause"].as_str().unwrap_or_default(),
            o["incident"].as_str().unwrap_or("none found"),
        );
    }
    let unexpected = r["unexpected_incidents"].as_array().map_or(0, Vec::len);
    crate::out::outln!("  unexpected incidents (false alarms): {unexpected}");
    crate::out::outln!("\nOpen in a browser:");
    for page in r["pages"].as_array().into_iter().flatten() {
        if let (Some(name), Some(url)) = (page[0].as_str(), page[1].as_str()) {
            crate::out::outln!("  {name:<11} {url}");
        }
    }
    if serving {
        crate::out::outln!("\nTry on the command line (while the demo serves):");
        for command in r["commands"].as_array().into_iter().flatten() {
            crate::out::outln!("  {}", command.as_str().unwrap_or_default());
        }
    }
    crate::out::outln!("\nJSON API:");
    for (name, url) in r["urls"].as_object().into_iter().flatten() {
        if let Some(url) = url.as_str() {
            crate::out::outln!("  {name:<11} {url}");
        }
    }
}

pub(crate) async fn run(
    args: DemoArgs,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    if args.hours < 4 {
        bail!(
            "--hours {} is too short: the scenario spans 4 hours",
            args.hours
        );
    }
    let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let addr = |flag: &Option<String>, port: u16| {
        Some(flag.clone().unwrap_or_else(|| {
            if args.no_serve {
                "127.0.0.1:0".to_owned()
            } else {
                format!("127.0.0.1:{port}")
            }
        }))
    };
    let overrides = threadline_server::ConfigOverrides {
        otlp_http: addr(&args.otlp_http, 4318),
        otlp_grpc: addr(&args.otlp_grpc, 4317),
        http: addr(&args.http, DEFAULT_HTTP_PORT),
        data_dir: Some(
            args.data_dir
                .clone()
                .unwrap_or_else(|| temp.path().join("data")),
        ),
        store: args.store.clone(),
        allow_unauthenticated: false,
    };
    let config = threadline_server::ServerConfig::load(None, &overrides)?;
    let server = crate::local_server::LocalServer::start(config).await?;
    let addrs = server.addrs;
    let base = format!("http://{}", addrs.http);
    let api = ApiClient::local(&base)?;
    let s0 = crate::synth::now_minute() - WINDOW;
    let offset = i64::from(args.hours) * 60 - WINDOW;
    let (requests, spans, showcase) = load(
        &api,
        &addrs.otlp_http.to_string(),
        s0,
        WINDOW + offset,
        offset,
        args.seed,
        args.json,
    )
    .await?;
    let report = report(&api, &base, s0, s0 - offset, &showcase).await?;
    if args.json {
        let mut out = report.clone();
        out["requests"] = json!(requests);
        out["spans"] = json!(spans);
        crate::out::outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_report(&report, requests, spans, args.hours, !args.no_serve);
    }
    if !args.no_serve {
        crate::out::outln!(
            "\nServing on {base} (the UI at {base}/; OTLP/HTTP {}, OTLP/gRPC {}) until Ctrl-C.",
            addrs.otlp_http,
            addrs.otlp_grpc
        );
        stop.await;
    }
    server.stop().await
}
