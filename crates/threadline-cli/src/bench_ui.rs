//! `threadline bench ui`: how fast the UI opens huge traces, in a real headless
//! Chromium on this machine. For each size it sends one trace of that many spans (an
//! agent whose model calls each have thousands of per-token decode steps, with tool
//! calls between) over OTLP into a fresh server, then measures:
//!
//! - the skeleton API (`GET /api/v1/traces/{id}/skeleton`), wall time and bytes;
//! - navigation → first screen of waterfall rows (the page's own performance mark),
//!   on a fresh page load each sample;
//! - the span detail API for a model call;
//! - a click on a span → its detail panel shown (mark minus the click's time);
//! - a click on a folded group → its rows drawn.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

use crate::loadgen::{i, s};
use crate::webdriver::Chromium;

pub(crate) struct UiBenchArgs {
    pub(crate) sizes: Vec<usize>,
    pub(crate) samples: usize,
    pub(crate) chromedriver: String,
    pub(crate) chromium: String,
}

/// Spans of the benchmark trace, in export requests of at most 10,000 spans.
fn big_trace(trace_id: [u8; 16], spans: usize) -> Vec<ExportTraceServiceRequest> {
    const MS: u64 = 1_000_000;
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        - 600_000 * MS;
    let mut n = 0u64;
    let mut next_id = || {
        n += 1;
        n.to_be_bytes().to_vec()
    };
    let mk =
        |id: Vec<u8>, parent: &[u8], name: &str, kind: i32, start: u64, end: u64, attributes| {
            Span {
                trace_id: trace_id.to_vec(),
                span_id: id,
                parent_span_id: parent.to_vec(),
                name: name.to_owned(),
                kind,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes,
                ..Default::default()
            }
        };
    let calls = (spans / 5000).max(1);
    let steps = (spans.saturating_sub(2 + 2 * calls)) / calls;
    let call_ms = steps as u64 * 2 + 40;
    let end = t0 + calls as u64 * (call_ms + 30) * MS + 20 * MS;
    let (root, agent) = (next_id(), next_id());
    let mut gateway = vec![mk(
        root.clone(),
        &[],
        "POST /v1/agent",
        2,
        t0,
        end,
        vec![s("api.route", "/v1/agent")],
    )];
    let mut worker = vec![mk(
        agent.clone(),
        &root,
        "invoke_agent researcher",
        1,
        t0 + MS,
        end - MS,
        vec![s("gen_ai.operation.name", "invoke_agent")],
    )];
    let mut at = t0 + 2 * MS;
    for c in 0..calls {
        let call = next_id();
        worker.push(mk(
            call.clone(),
            &agent,
            "chat gpt-4o",
            3,
            at,
            at + call_ms * MS,
            vec![
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.request.model", "gpt-4o"),
                i("gen_ai.usage.input_tokens", 1200),
                i("gen_ai.usage.output_tokens", steps as i64),
            ],
        ));
        for k in 0..steps {
            let st = at + 20 * MS + k as u64 * 2 * MS;
            worker.push(mk(
                next_id(),
                &call,
                "decode_step",
                1,
                st,
                st + 2 * MS - 100_000,
                vec![i("token.index", k as i64)],
            ));
        }
        at += call_ms * MS;
        worker.push(mk(
            next_id(),
            &agent,
            "execute_tool web_search",
            1,
            at,
            at + 25 * MS,
            vec![
                s("gen_ai.tool.name", "web_search"),
                i("call.index", c as i64),
            ],
        ));
        at += 30 * MS;
    }
    let mut out = vec![export("gateway", std::mem::take(&mut gateway))];
    for chunk in worker.chunks(10_000) {
        out.push(export("agent-worker", chunk.to_vec()));
    }
    out
}

fn export(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![crate::loadgen::service_spans(service, "bench", spans)],
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs a script that resolves with a number (milliseconds).
async fn timed(browser: &Chromium, script: &str) -> anyhow::Result<f64> {
    let v = browser
        .client
        .execute_async(script, vec![])
        .await
        .context("script in the page failed")?;
    v.as_f64()
        .with_context(|| format!("the page answered {v} instead of a time"))
}

/// Waits for a performance mark newer than `since` (page time) and resolves with its time.
const WAIT_MARK: &str = "
const [name, since, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const t0 = performance.now();
(function poll() {
  const m = performance.getEntriesByName(name).filter((e) => e.startTime >= since);
  if (m.length) return done(m[m.length - 1].startTime);
  if (performance.now() - t0 > 60000) return done(-1);
  requestAnimationFrame(poll);
})();";

async fn wait_mark(browser: &Chromium, name: &str, since: f64) -> anyhow::Result<f64> {
    let v = browser
        .client
        .execute_async(WAIT_MARK, vec![json!(name), json!(since)])
        .await
        .context("waiting for a mark failed")?;
    match v.as_f64() {
        Some(t) if t >= 0.0 => Ok(t),
        _ => {
            let panel = browser
                .client
                .execute(
                    "return document.querySelector('main').innerText.slice(0, 2000)",
                    vec![],
                )
                .await
                .unwrap_or_default();
            let errors = browser.console_errors().await.unwrap_or_default();
            bail!(
                "the page never set the mark {name}; the page: {panel}; console errors: {errors:?}"
            )
        }
    }
}

pub(crate) async fn run(args: UiBenchArgs) -> anyhow::Result<Value> {
    let temp = tempfile::tempdir()?;
    let overrides = crate::local_server::LocalServer::loopback(temp.path().join("data"));
    let config = threadline_server::ServerConfig::load(None, &overrides)?;
    let server = crate::local_server::LocalServer::start(config).await?;
    let addrs = server.addrs;
    let api = format!("http://{}", addrs.http);
    let http = reqwest::Client::new();
    let browser = Chromium::start(&args.chromedriver, &args.chromium, 1280, 1000)
        .await
        .map_err(anyhow::Error::msg)?;
    browser
        .client
        .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
            Some(Duration::from_secs(120)),
            Some(Duration::from_secs(120)),
            None,
        ))
        .await?;
    let mut results = Vec::new();
    for (k, &size) in args.sizes.iter().enumerate() {
        let mut trace_id = [0x7au8; 16];
        trace_id[15] = k as u8;
        let requests = big_trace(trace_id, size);
        let sent: usize = requests
            .iter()
            .map(|r| r.resource_spans[0].scope_spans[0].spans.len())
            .sum();
        for r in requests {
            let resp = http
                .post(format!("http://{}/v1/traces", addrs.otlp_http))
                .header("content-type", "application/x-protobuf")
                .body(r.encode_to_vec())
                .send()
                .await?;
            if !resp.status().is_success() {
                bail!("ingest answered {}", resp.status());
            }
        }
        let hex: String = trace_id.iter().map(|b| format!("{b:02x}")).collect();
        eprintln!("bench ui: {sent} spans stored as trace {hex}");
        let (mut api_ms, mut bytes) = (Vec::new(), 0);
        for _ in 0..args.samples {
            let t = Instant::now();
            let body = http
                .get(format!("{api}/api/v1/traces/{hex}/skeleton"))
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await?;
            api_ms.push(t.elapsed().as_secs_f64() * 1e3);
            bytes = body.len();
        }
        // The first model call's detail, as a click asks for it.
        let skeleton: Value = http
            .get(format!("{api}/api/v1/traces/{hex}/skeleton"))
            .send()
            .await?
            .json()
            .await?;
        let chat = skeleton["spans"]["model"]
            .as_array()
            .and_then(|m| m.iter().position(|v| v.as_i64() == Some(0)))
            .context("no model call in the skeleton")?;
        let chat_id = skeleton["spans"]["span_id"][chat]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut detail_ms = Vec::new();
        for _ in 0..args.samples {
            let t = Instant::now();
            http.get(format!("{api}/api/v1/traces/{hex}/spans/{chat_id}"))
                .send()
                .await?
                .error_for_status()?;
            detail_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        eprintln!(
            "bench ui: span detail API {:.1} ms",
            median(detail_ms.clone())
        );
        let (mut first, mut click, mut expand) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.samples {
            // A fresh navigation each time (a new query string defeats no cache: assets
            // revalidate, the skeleton is fetched again).
            browser.client.goto(&format!("{api}/traces/{hex}")).await?;
            first.push(wait_mark(&browser, "threadline:waterfall-shown", 0.0).await?);
            eprintln!("bench ui: first screen at {:.0} ms", first[first.len() - 1]);
            // Click the agent's row (a span row; the model calls may be folded).
            let t = timed(
                &browser,
                "const done = arguments[arguments.length - 1];
                 const row = [...document.querySelectorAll('.wf-row:not(.wf-group-row)')].find((r) => r.textContent.includes('invoke_agent'));
                 const t = performance.now(); row.click(); done(t);",
            )
            .await?;
            click.push(wait_mark(&browser, "threadline:span-shown", t).await? - t);
            let t = timed(
                &browser,
                "const done = arguments[arguments.length - 1];
                 const g = document.querySelector('.wf-group-row');
                 const t = performance.now(); g.click(); done(t);",
            )
            .await?;
            expand.push(wait_mark(&browser, "threadline:rows-changed", t).await? - t);
        }
        results.push(json!({
            "spans": sent,
            "skeleton_api_ms_median": median(api_ms),
            "skeleton_bytes": bytes,
            "span_detail_api_ms_median": median(detail_ms),
            "first_screen_ms_median": median(first.clone()),
            "first_screen_ms_all": first,
            "click_to_detail_ms_median": median(click.clone()),
            "click_to_detail_ms_all": click,
            "expand_group_ms_median": median(expand),
        }));
    }
    let console_errors = browser.console_errors().await.map_err(anyhow::Error::msg)?;
    browser.close().await;
    server.stop().await?;
    Ok(json!({"samples": args.samples, "traces": results, "console_errors": console_errors}))
}
