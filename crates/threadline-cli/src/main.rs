//! `threadline`: the server (`serve`) and the client commands that talk to it over the
//! JSON API (`trace`, `search`, `register`, `lineage`) or OTLP (`loadgen`). Thin:
//! parsing, output, exit codes.

mod bench_detector;
mod bench_diagnosis;
mod bench_lineage;
mod bench_public;
mod bench_ui;
mod client;
mod demo;
mod demo_showcase;
mod diagnosis_cmd;
mod lineage_cmd;
mod loadgen;
mod local_server;
mod out;
mod prov_cmd;
mod render;
mod synth;
mod webdriver;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

/// mimalloc: ingest allocates many small strings per span; measured faster than glibc's
/// allocator on the ingest benchmark (see BENCHMARKS.md). Built without transparent
/// huge pages (`no_thp`): mimalloc asks for them on its arena, and a 2 MB page counts in
/// full however little of it is used (100 MB of 199 MB anonymous RSS at full ingest
/// speed were huge pages; 152 MB without them, spans/s unchanged within noise).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "threadline",
    version,
    about = "Tracing and lineage for LLM systems: one graph from the dataset to the token"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server: OTLP/HTTP, OTLP/gRPC and the JSON API on the embedded store.
    Serve(ServeArgs),
    /// Start the server with a synthetic LLM platform and six injected incidents, print
    /// the incidents found and their root causes, then keep serving (or exit with
    /// --no-serve).
    Demo(Box<demo::DemoArgs>),
    /// List the incidents the anomaly detector found.
    Incidents(Box<diagnosis_cmd::IncidentsArgs>),
    /// Rank the likely causes of an incident, or of a metric change on a route at a time.
    Rca(Box<diagnosis_cmd::RcaArgs>),
    /// Health of a lineage node: freshness, drift upstream, open incidents.
    Health(Box<diagnosis_cmd::HealthArgs>),
    /// Show one trace as an indented tree.
    Trace {
        /// Trace id (32 hex characters).
        trace_id: String,
        /// One span whole instead: its prompt and reply, tool calls, attributes and
        /// logs (the tree prints LLM spans' ids as span=…).
        #[arg(long, value_name = "SPAN_ID")]
        span: Option<String>,
        /// Every span, with big groups of like siblings unfolded.
        #[arg(long)]
        expand: bool,
        #[command(flatten)]
        client: ClientArgs,
        /// Print the API's JSON instead of the tree.
        #[arg(long)]
        json: bool,
    },
    /// Search traces, newest start first (each filter holds on some span of the trace)
    Search(Box<SearchArgs>),
    /// Send synthetic LLM-shaped OTLP traffic and report throughput and ack latency.
    Loadgen(Box<loadgen::LoadgenArgs>),
    /// Register models, adapters, prompt templates and deployments from a manifest.
    Register(Box<lineage_cmd::RegisterArgs>),
    /// Walk the lineage graph from a node (upstream, downstream or both).
    Lineage(Box<lineage_cmd::LineageArgs>),
    /// Erase every trace of a user or session (GDPR), with an audit entry.
    Erase(Box<lineage_cmd::EraseArgs>),
    /// What a change to a node affects downstream, with a plan from the impact policy.
    Impact(Box<lineage_cmd::ImpactArgs>),
    /// Export data from the server (`export prov`: lineage as W3C PROV-O).
    #[command(subcommand)]
    Export(prov_cmd::ExportWhat),
    /// Check a PROV-O document's shapes and PROV-CONSTRAINTS ordering rules.
    ValidateProv(prov_cmd::ValidateProvArgs),
    /// Benchmarks that print figures (`bench lineage`: graph closure and chain latency).
    #[command(subcommand)]
    Bench(BenchWhat),
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Build a synthetic lineage graph in a fresh store and time a 6-hop downstream
    /// closure and the request → dataset chain.
    Lineage {
        /// Nodes of the synthetic graph.
        #[arg(long, default_value_t = 1_000_000)]
        nodes: usize,
        /// Edges of the synthetic graph.
        #[arg(long, default_value_t = 3_000_000)]
        edges: usize,
        /// Queries timed per measurement.
        #[arg(long, default_value_t = 500)]
        samples: usize,
        /// Where to build the store [default: a temporary directory, removed after].
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Build it in ClickHouse instead (`clickhouse://HOST:PORT/DATABASE`; user and
        /// password from THREADLINE_CLICKHOUSE_USER / _PASSWORD); the data dir then
        /// holds the local copy of the lineage graph.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// OpenLineage RunEvents as the loadgen sends them, parsed, projected and applied
    /// in process through the store's write path (no HTTP): the server's CPU per
    /// event apart from HTTP. Deterministic enough to run under
    /// `valgrind --tool=callgrind`.
    Openlineage {
        /// RunEvents applied.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Events submitted before waiting for their acks.
        #[arg(long, default_value_t = 32)]
        in_flight: usize,
        /// Where to build the store [default: a temporary directory, removed after].
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Simulated per-minute traffic through the anomaly detector: false incidents per
    /// series per 24 h on clean traffic, detection delay of a +50% P99 step.
    Detector {
        /// Series watched.
        #[arg(long, default_value_t = 50)]
        series: usize,
        /// Hours of simulated traffic.
        #[arg(long, default_value_t = 24)]
        hours: usize,
        /// Requests per series and minute.
        #[arg(long, default_value_t = 200)]
        requests_per_minute: usize,
    },
    /// The fault simulator: generated platforms with one injected fault each (16 kinds
    /// in turn), decoys and healthy routes, sent to a server of their own; scores the
    /// incidents found and the rank of the true cause.
    Diagnosis(bench_diagnosis::DiagnosisBenchArgs),
    /// Public labelled incidents (RobustSpot's RS), replayed through a server of their
    /// own as OTLP; scores the cause the RCA ranks first against the label.
    RcaPublic(bench_public::PublicBenchArgs),
    /// One hour of request spans with a latency incident through the real write path,
    /// then the time to detect it and to rank its causes.
    Rca {
        /// Request spans written in the hour.
        #[arg(long, default_value_t = 1_000_000)]
        spans: usize,
        /// RCA queries timed.
        #[arg(long, default_value_t = 5)]
        samples: usize,
        /// Where to build the store [default: a temporary directory, removed after].
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Build it in ClickHouse instead (`clickhouse://HOST:PORT/DATABASE`; user and
        /// password from THREADLINE_CLICKHOUSE_USER / _PASSWORD); the data dir then
        /// holds the local copy of the lineage graph.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// Huge traces in the UI, in headless Chromium: skeleton API time, navigation to
    /// the first screen of the waterfall, a click to a span's detail, a folded group
    /// expanded.
    Ui {
        /// Spans of each trace measured.
        #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
        spans: Vec<usize>,
        /// Page loads (and clicks) per trace.
        #[arg(long, default_value_t = 5)]
        samples: usize,
        /// The WebDriver server to start (Debian's chromium-driver).
        #[arg(long, default_value = "/usr/bin/chromedriver")]
        chromedriver: String,
        /// The browser it drives, headless.
        #[arg(long, default_value = "/usr/bin/chromium")]
        chromium: String,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// OTLP/HTTP listen address [default: 127.0.0.1:4318].
    #[arg(long, value_name = "ADDR")]
    otlp_http: Option<String>,
    /// OTLP/gRPC listen address [default: 127.0.0.1:4317].
    #[arg(long, value_name = "ADDR")]
    otlp_grpc: Option<String>,
    /// JSON API listen address [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Where the embedded database lives [default: ./threadline-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The store: `embedded` (the default, under --data-dir) or
    /// `clickhouse://HOST:PORT/DATABASE` (ClickHouse's HTTP port). ClickHouse's user and
    /// password come from the config file's [clickhouse] or from
    /// THREADLINE_CLICKHOUSE_USER / THREADLINE_CLICKHOUSE_PASSWORD, never from here.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// TOML config file (listeners, data dir, tenants and API keys).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Allow listening on non-loopback addresses without API keys.
    #[arg(long)]
    allow_unauthenticated: bool,
}

/// How client commands reach the server.
#[derive(Args, Clone)]
pub(crate) struct ClientArgs {
    /// Base URL of the Threadline JSON API.
    #[arg(long, default_value = "http://127.0.0.1:8080", value_name = "URL")]
    server: String,
    #[command(flatten)]
    api_key: ApiKeyArg,
}

/// `--api-key`, shared by every command that talks to a server.
#[derive(Args, Clone)]
pub(crate) struct ApiKeyArg {
    /// API key (sent as a Bearer token).
    #[arg(
        long = "api-key",
        env = "THREADLINE_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub(crate) key: Option<String>,
}

#[derive(Args)]
struct SearchArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Words in a span's name, prompt, reply or error message or in one of the trace's
    /// log records (any case; the last word may be the start of one), e.g. "charged
    /// twice". A token with punctuation (user-40) or a quoted run ("\"charged
    /// twice\"") is a phrase: its words one after the other.
    #[arg(long)]
    text: Option<String>,
    /// A span of this service (its resource's service.name), or the start of its name.
    #[arg(long)]
    service: Option<String>,
    /// Span name.
    #[arg(long)]
    name: Option<String>,
    /// A model call to this model, or a model whose name starts so (the requested
    /// one or the one that answered).
    #[arg(long)]
    model: Option<String>,
    /// A span on this API route (api.route / http.route).
    #[arg(long)]
    route: Option<String>,
    /// A model call through this LoRA adapter (llm.lora.adapter_id).
    #[arg(long)]
    adapter: Option<String>,
    /// A span in this A/B experiment arm (ab.group).
    #[arg(long)]
    ab_group: Option<String>,
    /// A span of this conversation (session.id, gen_ai.conversation.id).
    #[arg(long)]
    session: Option<String>,
    /// A span of this end user (user.id, enduser.id).
    #[arg(long)]
    user: Option<String>,
    /// Only traces with an error span.
    #[arg(long)]
    errors: bool,
    /// e.g. 250ms, 1.5s.
    #[arg(long)]
    min_duration: Option<String>,
    /// A span no longer than this, e.g. 2s.
    #[arg(long)]
    max_duration: Option<String>,
    /// Traces that started this long ago or later, e.g. 15m, 1h, 7d (the UI's presets).
    #[arg(long, conflicts_with = "from")]
    since: Option<String>,
    /// Start of the time range: RFC 3339 or unix seconds.
    #[arg(long)]
    from: Option<String>,
    /// End of the time range: RFC 3339 or unix seconds.
    #[arg(long)]
    to: Option<String>,
    /// Attribute filter KEY=VALUE (repeatable).
    #[arg(long = "attr", value_name = "KEY=VALUE")]
    attrs: Vec<String>,
    /// Traces per page (1 to 1000).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Continue from a previous page's next_cursor.
    #[arg(long)]
    cursor: Option<String>,
    /// Machine-readable output (the API's JSON).
    #[arg(long)]
    json: bool,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, leaving out a cause whose text the message
/// before it already ends with (many errors quote their source: "cannot listen on
/// 127.0.0.1:8080 (http): Address already in use" is not followed by it again).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Demo(args) => runtime.block_on(demo::run(*args, shutdown_signal())),
        Command::Incidents(args) => runtime.block_on(diagnosis_cmd::incidents(*args)),
        Command::Rca(args) => runtime.block_on(diagnosis_cmd::rca(*args)),
        Command::Health(args) => runtime.block_on(diagnosis_cmd::health(*args)),
        Command::Trace {
            trace_id,
            span,
            expand,
            client,
            json,
        } => runtime.block_on(async {
            let api = client::ApiClient::new(&client)?;
            let path = match &span {
                Some(span) => format!("/api/v1/traces/{trace_id}/spans/{span}"),
                None => format!("/api/v1/traces/{trace_id}"),
            };
            let answer = api.get(&path, &[]).await?;
            if json {
                crate::out::outln!("{}", serde_json::to_string_pretty(&answer)?);
            } else if span.is_some() {
                crate::out::out!("{}", render::span_detail(&answer));
            } else {
                crate::out::out!("{}", render::trace_tree(&answer, expand));
            }
            Ok(())
        }),
        Command::Search(args) => runtime.block_on(search(*args)),
        Command::Loadgen(args) => runtime.block_on(loadgen::run(*args)),
        Command::Register(args) => runtime.block_on(lineage_cmd::register(*args)),
        Command::Lineage(args) => runtime.block_on(lineage_cmd::lineage(*args)),
        Command::Erase(args) => runtime.block_on(lineage_cmd::erase(*args)),
        Command::Impact(args) => runtime.block_on(lineage_cmd::impact(*args)),
        Command::Export(what) => runtime.block_on(prov_cmd::export(what)),
        Command::ValidateProv(args) => prov_cmd::validate(args),
        Command::Bench(BenchWhat::Lineage {
            nodes,
            edges,
            samples,
            data_dir,
            store,
        }) => {
            let (_temp, dir) = bench_data_dir(data_dir)?;
            let report = bench_lineage::lineage(
                bench_store(store.as_deref(), &dir)?,
                bench_lineage::LineageBenchSize {
                    nodes,
                    edges,
                    samples,
                },
            )?;
            crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::Bench(BenchWhat::Openlineage {
            events,
            in_flight,
            data_dir,
        }) => {
            let (_temp, dir) = bench_data_dir(data_dir)?;
            let report = loadgen::bench_openlineage(&dir, events, in_flight)?;
            crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::Bench(BenchWhat::Detector {
            series,
            hours,
            requests_per_minute,
        }) => {
            let report = bench_detector::detector(bench_detector::DetectorBenchSize {
                series,
                hours,
                requests_per_minute,
            });
            crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::Bench(BenchWhat::Ui {
            spans,
            samples,
            chromedriver,
            chromium,
        }) => {
            let report = runtime.block_on(bench_ui::run(bench_ui::UiBenchArgs {
                sizes: spans,
                samples,
                chromedriver,
                chromium,
            }))?;
            crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Command::Bench(BenchWhat::Diagnosis(args)) => {
            let report = runtime.block_on(bench_diagnosis::run(args))?;
            crate::out::outln!("{report}");
            Ok(())
        }
        Command::Bench(BenchWhat::RcaPublic(args)) => {
            let report = runtime.block_on(bench_public::run(args))?;
            crate::out::outln!("{report}");
            Ok(())
        }
        Command::Bench(BenchWhat::Rca {
            spans,
            samples,
            data_dir,
            store,
        }) => {
            let (_temp, dir) = bench_data_dir(data_dir)?;
            let report = bench_detector::rca(
                bench_store(store.as_deref(), &dir)?,
                &dir,
                bench_detector::RcaBenchSize { spans, samples },
            )?;
            crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("THREADLINE_LOG")
                .unwrap_or_else(|_| "info,memory_serve=warn".into()),
        )
        .init();
    let overrides = threadline_server::ConfigOverrides {
        otlp_http: args.otlp_http,
        otlp_grpc: args.otlp_grpc,
        http: args.http,
        data_dir: args.data_dir,
        store: args.store,
        allow_unauthenticated: args.allow_unauthenticated,
    };
    let config = threadline_server::ServerConfig::load(args.config.as_deref(), &overrides)?;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(threadline_server::serve_reporting(
        config,
        shutdown_signal(),
        Some(ready_tx),
    ));
    if let Ok(addrs) = ready_rx.await {
        // The UI first: it is what a person opens.
        crate::out::outln!(
            "Threadline UI: http://{}/  (JSON API under /api/v1, Jaeger API under /jaeger; OTLP/HTTP {}, OTLP/gRPC {})",
            addrs.http, addrs.otlp_http, addrs.otlp_grpc
        );
    }
    server.await.context("server task failed")??;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}

async fn search(args: SearchArgs) -> anyhow::Result<()> {
    let api = client::ApiClient::new(&args.client)?;
    let mut params: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            params.push((k.to_owned(), v.clone()));
        }
    };
    push("q", &args.text);
    push("service", &args.service);
    push("name", &args.name);
    push("model", &args.model);
    push("route", &args.route);
    push("adapter", &args.adapter);
    push("ab_group", &args.ab_group);
    push("session", &args.session);
    push("user", &args.user);
    push("min_duration", &args.min_duration);
    push("max_duration", &args.max_duration);
    push("since", &args.since);
    push("from", &args.from);
    push("to", &args.to);
    push("cursor", &args.cursor);
    if args.errors {
        params.push(("status".into(), "error".into()));
    }
    for attr in &args.attrs {
        let (k, v) = attr
            .split_once('=')
            .with_context(|| format!("--attr {attr:?} must be KEY=VALUE"))?;
        params.push((format!("attr.{k}"), v.to_owned()));
    }
    params.push(("limit".into(), args.limit.to_string()));
    let page = api.get("/api/v1/traces", &params).await?;
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&page)?);
    } else {
        crate::out::out!("{}", render::search_table(&page));
    }
    Ok(())
}

/// Where a benchmark keeps its store: `data_dir` when given, else a temporary
/// directory that lives as long as the returned guard.
/// The store a benchmark builds: embedded under `dir`, or the ClickHouse database `url`
/// names (with `dir` as its local directory).
fn bench_store(
    url: Option<&str>,
    dir: &std::path::Path,
) -> anyhow::Result<threadline_store::Store> {
    let Some(url) = url else {
        return Ok(threadline_store::Store::open_embedded(
            dir,
            threadline_store::EmbeddedConfig::default(),
        )?);
    };
    let mut config = threadline_store::ClickHouseConfig::from_url(url)?;
    config.user = std::env::var("THREADLINE_CLICKHOUSE_USER").ok();
    config.password = std::env::var("THREADLINE_CLICKHOUSE_PASSWORD").ok();
    let store = threadline_store::ClickHouseStore::open(
        &config,
        threadline_store::ClickHouseOptions::default(),
        dir,
    )?;
    Ok(threadline_store::Store::new(store))
}

fn bench_data_dir(
    data_dir: Option<PathBuf>,
) -> anyhow::Result<(Option<tempfile::TempDir>, PathBuf)> {
    match data_dir {
        Some(dir) => Ok((None, dir)),
        None => {
            let temp = tempfile::tempdir().context("cannot create a temporary directory")?;
            let dir = temp.path().to_owned();
            Ok((Some(temp), dir))
        }
    }
}

#[cfg(test)]
mod tests {
    /// `--help` explains every flag and argument of every command.
    #[test]
    fn every_flag_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(
            &<super::Cli as clap::CommandFactory>::command(),
            "threadline",
            &mut missing,
        );
        assert!(missing.is_empty(), "flags without help: {missing:#?}");
    }

    #[test]
    fn a_cause_quoted_by_its_error_is_not_repeated() {
        let e = anyhow::Error::new(threadline_server::ServeError::Bind {
            what: "http",
            addr: "127.0.0.1:8080".parse().unwrap(),
            source: std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use"),
        });
        assert_eq!(
            super::error_text(&e),
            "cannot listen on 127.0.0.1:8080 (http): Address already in use"
        );
        let chained = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::error_text(&chained), "outer: inner");
    }
}
