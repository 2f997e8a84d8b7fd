//! Diagnosis: rollups queried through `/api/v1/metrics` on span time, and the
//! Prometheus exposition checked by `promtool`.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use crate::harness::*;

/// A minute boundary in the past: everything runs on span time, not arrival time.
pub(crate) const T0_S: u64 = 1_793_527_200;

/// One LLM request span.
pub(crate) struct Req<'a> {
    pub(crate) id: u64,
    pub(crate) start_s: f64,
    pub(crate) ms: f64,
    pub(crate) route: &'a str,
    pub(crate) model: &'a str,
    pub(crate) attrs: Vec<KeyValue>,
    pub(crate) error: bool,
}

pub(crate) fn export(service: &str, reqs: &[Req<'_>]) -> ExportTraceServiceRequest {
    let spans = reqs
        .iter()
        .map(|r| {
            let start = T0_S * 1_000_000_000 + (r.start_s * 1e9) as u64;
            let mut trace_id = [7u8; 16];
            trace_id[..8].copy_from_slice(&r.id.to_be_bytes());
            let mut attributes = vec![
                kv("api.route", r.route),
                kv("gen_ai.request.model", r.model),
                kv_int("gen_ai.usage.input_tokens", 200),
                kv_int("gen_ai.usage.output_tokens", 50),
            ];
            attributes.extend(r.attrs.iter().cloned());
            Span {
                trace_id: trace_id.to_vec(),
                span_id: (r.id + 1).to_be_bytes().to_vec(),
                name: format!("POST {}", r.route),
                kind: 2,
                start_time_unix_nano: start,
                end_time_unix_nano: start + (r.ms * 1e6) as u64,
                attributes,
                status: r.error.then(|| Status {
                    code: 2,
                    message: "upstream failed".into(),
                }),
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", service)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn metrics_are_rolled_up_on_span_time_and_grouped_and_filtered() {
    let server = TestServer::start();
    // Minute 0: 100 requests on /v1/chat (1 in 10 an error, 10..=1000 ms), 20 on
    // /v1/embed at 5 ms. Minute 1: /v1/chat again, ten times slower, in two exports.
    let mut minute0 = Vec::new();
    for i in 0..100u64 {
        minute0.push(Req {
            id: i,
            start_s: i as f64 * 0.5,
            ms: 10.0 * (i + 1) as f64,
            route: "/v1/chat",
            model: "llama-3-8b",
            attrs: vec![
                kv(
                    "llm.lora.adapter_id",
                    if i % 2 == 0 {
                        "fin-lora@7"
                    } else {
                        "fin-lora@6"
                    },
                ),
                kv("gen_ai.server.time_to_first_token", "0.05"),
            ],
            error: i % 10 == 0,
        });
    }
    for i in 0..20u64 {
        minute0.push(Req {
            id: 1000 + i,
            start_s: i as f64,
            ms: 5.0,
            route: "/v1/embed",
            model: "bge-small",
            attrs: vec![],
            error: false,
        });
    }
    let slow: Vec<Req> = (0..100u64)
        .map(|i| Req {
            id: 2000 + i,
            start_s: 60.0 + i as f64 * 0.5,
            ms: 100.0 * (i + 1) as f64,
            route: "/v1/chat",
            model: "llama-3-8b",
            attrs: vec![kv("llm.lora.adapter_id", "fin-lora@7")],
            error: false,
        })
        .collect();
    for body in [
        export("gateway", &minute0),
        export("gateway", &slow[..50]),
        export("gateway", &slow[50..]),
    ] {
        assert_eq!(
            server
                .post_traces("application/x-protobuf", proto(&body), &[])
                .status(),
            200
        );
    }
    let range = format!("from={T0_S}&to={}", T0_S + 119);
    let get = |q: &str| {
        let (status, body) = server.get(&format!("/api/v1/metrics?{q}&{range}"), None);
        assert_eq!(status, 200, "{q}: {body}");
        body
    };

    let p99 = get("metric=p99_latency&group_by=route");
    assert_eq!(p99["unit"], "ms");
    let series = p99["series"].as_array().unwrap();
    let by_route = |route: &str| {
        series
            .iter()
            .find(|s| s["labels"]["route"] == route)
            .unwrap_or_else(|| panic!("no series for {route}: {p99}"))
    };
    let chat = &by_route("/v1/chat")["points"];
    assert_eq!(chat.as_array().unwrap().len(), 2);
    assert_eq!(chat[0]["t"], T0_S);
    assert_eq!(chat[0]["requests"], 100);
    let within = |v: &serde_json::Value, want: f64| {
        let v = v.as_f64().unwrap();
        assert!((v - want).abs() <= want * 0.02, "{v} vs {want}");
    };
    // DDSketch: 1% relative accuracy; p99 of 10..=1000 ms by 10 is 990.
    within(&chat[0]["value"], 990.0);
    within(&chat[1]["value"], 9900.0);
    within(&by_route("/v1/embed")["points"][0]["value"], 5.0);

    let errors = get("metric=error_rate&route=/v1/chat&step=120");
    let point = &errors["series"][0]["points"][0];
    assert_eq!(point["requests"], 200);
    within(&point["value"], 0.05);

    let rate = get("metric=request_rate&group_by=adapter&route=/v1/chat&step=2m");
    let adapters = rate["series"].as_array().unwrap();
    assert_eq!(adapters.len(), 2, "{rate}");
    let fin7 = adapters
        .iter()
        .find(|s| s["labels"]["adapter"] == "fin-lora@7")
        .unwrap();
    // 50 + 100 requests over 120 s.
    within(&fin7["points"][0]["value"], 150.0 / 120.0);

    let ttft = get("metric=ttft_p99&route=/v1/chat");
    within(&ttft["series"][0]["points"][0]["value"], 50.0);
    let tps = get("metric=tokens_per_s&route=/v1/embed");
    // 50 tokens in 5 ms (no TTFT reported: the whole span generates).
    within(&tps["series"][0]["points"][0]["value"], 10_000.0);

    for (query, fragment) in [
        ("metric=p42", "unknown metric \"p42\""),
        (
            "metric=p99_latency&group_by=colour",
            "group_by \"colour\" is not a dimension",
        ),
        ("metric=p99_latency&step=90", "whole number of minutes"),
        (
            "metric=p99_latency&colour=red",
            "unknown query parameter \"colour\"",
        ),
        ("group_by=route", "metric is required"),
        (
            "metric=p99_latency&from=yesterday",
            "from \"yesterday\" is not a time",
        ),
    ] {
        let (status, body) = server.get(&format!("/api/v1/metrics?{query}"), None);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(fragment),
            "{query}: {body}"
        );
    }
}

#[test]
fn prometheus_exposition_passes_promtool_and_counts_committed_llm_requests() {
    let server = TestServer::start();
    let t = now_nanos();
    for i in 0..3u8 {
        let resp = server.post_traces(
            "application/x-protobuf",
            proto(&llm_trace([i + 1; 16], "gw", "gpt-4o", t)),
            &[],
        );
        assert_eq!(resp.status(), 200);
    }
    let bound: Vec<Req> = ["i-1", "i-2"]
        .iter()
        .enumerate()
        .map(|(n, instance)| Req {
            id: 50 + n as u64,
            start_s: 0.0,
            ms: 100.0,
            route: "/v1/chat",
            model: "llama-3-8b",
            attrs: vec![
                kv("model.instance.id", instance),
                kv("container.image", "ghcr.io/acme/vllm:0.6"),
            ],
            error: false,
        })
        .collect();
    let resp = server.post_traces(
        "application/x-protobuf",
        proto(&export("vllm", &bound)),
        &[],
    );
    assert_eq!(resp.status(), 200);
    let resp = client()
        .get(format!("{}/metrics", server.api))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = resp.text().unwrap();
    for line in [
        "threadline_spans_ingested_total 8",
        // The gateway span is the request, end to end, with the model of the chat span
        // under it; the chat span the model call, which alone counts the tokens.
        "threadline_llm_requests_total{level=\"request\",service=\"gw\",route=\"/v1/chat/completions\",model=\"gpt-4o\",status=\"ok\"} 3",
        "threadline_llm_requests_total{level=\"call\",service=\"gw\",route=\"/v1/chat/completions\",model=\"gpt-4o\",status=\"ok\"} 3",
        "threadline_llm_tokens_total{level=\"call\",service=\"gw\",route=\"/v1/chat/completions\",model=\"gpt-4o\",direction=\"input\"} 360",
        "threadline_llm_request_duration_seconds_count{level=\"request\",service=\"gw\",route=\"/v1/chat/completions\",model=\"gpt-4o\"} 3",
        "threadline_instances_bound{kind=\"route\",node=\"/v1/chat\"} 2",
        "threadline_instances_bound{kind=\"image\",node=\"ghcr.io/acme/vllm:0.6\"} 2",
        "threadline_instances_bound{kind=\"model\",node=\"llama-3-8b\"} 2",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in\n{text}"
        );
    }
    let Some(promtool) = std::env::var("THREADLINE_PROMTOOL").ok() else {
        eprintln!("THREADLINE_PROMTOOL is not set: promtool check skipped (scripts/test sets it)");
        return;
    };
    let out = pipe_through(&promtool, &["check", "metrics"], &text);
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn demo_finds_every_injected_incident_and_ranks_its_true_cause_first() {
    let store = store_args();
    let mut args = vec!["demo", "--no-serve", "--json"];
    args.extend(store.iter().map(String::as_str));
    let report = cli_json(&args);
    let injected = report["injected"].as_array().unwrap();
    assert_eq!(injected.len(), 6);
    for case in injected {
        assert_eq!(case["true_cause_rank"], 1, "{case}\n{report:#}");
    }
    // Healthy routes with harmless changes raised nothing.
    assert_eq!(
        report["unexpected_incidents"],
        serde_json::json!([]),
        "{report:#}"
    );
    assert!(report["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["route"] != "/v1/embed"));
    // Each cause comes with evidence: exemplar traces, and a lineage path for changes.
    let drift_case = injected
        .iter()
        .find(|c| c["true_cause"] == "dataset_version:warehouse:fin-docs@v2")
        .unwrap();
    let drift = report["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == drift_case["incident"])
        .unwrap();
    let top = &drift["causes"][0];
    assert_eq!(top["kind"], "dataset_drift");
    assert!(top["confidence"].as_f64().unwrap() > 0.5);
    let path: Vec<&str> = top["evidence"]["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(path.first(), Some(&"dataset_version:warehouse:fin-docs@v2"));
    assert_eq!(path.last(), Some(&"route:/v1/summarize"));
    assert!(path.contains(&"adapter:sum-lora@4"), "{path:?}");
    assert!(!top["evidence"]["exemplar_trace_ids"]
        .as_array()
        .unwrap()
        .is_empty());
    let kinds: Vec<&str> = top["evidence"]["detail"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"null_rate") && kinds.contains(&"field_added"),
        "{kinds:?}"
    );
    assert!(report["spans"].as_u64().unwrap() > 100_000);
}

/// The demo keeps serving; the CLI's diagnosis commands work against it.
#[test]
fn demo_serves_and_the_cli_lists_incidents_ranks_causes_and_scores_health() {
    let demo = crate::harness::Demo::start();
    let (report, base) = (demo.report.clone(), demo.api.clone());
    assert!(report.contains("Incidents found: 6"), "{report}");
    // Every command the demo suggests runs as printed and finds something.
    assert!(demo.commands.len() >= 10, "{report}");
    for command in &demo.commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "threadline", "{command}");
        let out = std::process::Command::new(BIN)
            .args(&words[1..])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.lines().count() >= 2,
            "{command}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !stdout.contains("no traces")
                && !stdout.contains("No ")
                && !stdout.lines().any(|l| l == "0 trace(s)"),
            "{command}: {stdout}"
        );
    }
    assert_eq!(report.matches("  ok   ").count(), 6, "{report}");
    let cli = |args: &[&str]| cli_at(&base, args);
    let (ok, listed, err) = cli(&["incidents", "--json"]);
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let chat = listed["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["route"] == "/v1/chat")
        .unwrap()
        .clone();
    let (ok, text, err) = cli(&["rca", "--incident", chat["id"].as_str().unwrap()]);
    assert!(ok, "{err}");
    let first = text
        .lines()
        .find(|l| l.trim_start().starts_with("1."))
        .unwrap();
    assert!(first.contains("adapter:fin-lora@7"), "{text}");
    // The metric in its unit, as a person reads it ("1.47 s before → 3.75 s during").
    let summary = text.lines().find(|l| l.contains(" before → ")).unwrap();
    assert!(summary.ends_with(" s during"), "{summary}");
    assert!(
        !summary.contains(".00000") && summary.len() < 120,
        "{summary}"
    );
    // The same diagnosis by route, metric and time.
    let (ok, json_text, err) = cli(&[
        "rca",
        "--route",
        "/v1/chat",
        "--metric",
        "p99_latency",
        "--at",
        chat["onset"].as_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let by_time: serde_json::Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(by_time["candidates"][0]["subject"], "adapter:fin-lora@7");
    assert!(by_time["metric_during"].as_f64() > by_time["metric_before"].as_f64());
    // The overflow incident: the refusals that moved are in the evidence.
    let overflow = listed["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["route"] == "/v1/support" && i["metric"] == "error_rate")
        .unwrap();
    let (ok, text, err) = cli(&[
        "rca",
        "--incident",
        overflow["id"].as_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let rca: serde_json::Value = serde_json::from_str(&text).unwrap();
    let during = rca["rejections_by_reason"]["during"]["context_overflow"]
        .as_f64()
        .unwrap();
    assert!(during > 0.1, "{}", rca["rejections_by_reason"]);
    assert!(rca["rejections_by_reason"]["before"]
        .get("context_overflow")
        .is_none());
    // Requests by who called them: the gateway's span is the model call's parent.
    let from = chat["onset_unix"].as_i64().unwrap() - 3600;
    let by_caller = client()
        .get(format!(
            "{base}/api/v1/metrics?metric=request_rate&group_by=upstream_service&from={from}&step=1h"
        ))
        .send()
        .unwrap()
        .json::<serde_json::Value>()
        .unwrap();
    assert_eq!(
        by_caller["series"].as_array().unwrap().len(),
        1,
        "{by_caller}"
    );
    assert_eq!(
        by_caller["series"][0]["labels"]["upstream_service"],
        "llm-gateway"
    );
    let (ok, _, err) = cli(&["rca", "--route", "/v1/chat"]);
    assert!(!ok && err.contains("metric"), "{err}");
    // Health: the drifted version, what it feeds, and a healthy route.
    let (ok, text, err) = cli(&["health", "adapter:sum-lora@4"]);
    assert!(ok, "{err}");
    assert!(
        text.contains("degraded") || text.contains("unhealthy"),
        "{text}"
    );
    assert!(
        text.contains("dataset_version:warehouse:fin-docs@v2"),
        "{text}"
    );
    let (ok, text, _) = cli(&["health", "route:/v1/embed", "--json"]);
    assert!(ok);
    let embed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (embed["score"].as_f64(), embed["status"].as_str()),
        (Some(1.0), Some("healthy"))
    );
}

/// A webhook receiver: answers 500 to the first request, 200 after; keeps the bodies.
struct Webhook {
    url: String,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    attempts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Webhook {
    fn start() -> Self {
        use std::io::{BufRead, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (b, a) = (bodies.clone(), attempts.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let n = a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let status = if n == 0 {
                    "500 Internal Server Error"
                } else {
                    "200 OK"
                };
                if n > 0 {
                    if let Ok(v) = serde_json::from_slice(&body) {
                        b.lock().unwrap().push(v);
                    }
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        Self {
            url,
            bodies,
            attempts,
        }
    }

    fn wait_for(&self, n: usize) -> Vec<serde_json::Value> {
        for _ in 0..200 {
            if self.bodies.lock().unwrap().len() >= n {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.bodies.lock().unwrap().clone()
    }
}

/// Minute `minute` of a latency step on /v1/chat: 60 requests, latency ×3 from minute
/// 30 (half of them then on a new instance, i-2).
pub(crate) fn latency_step_minute(minute: u64) -> ExportTraceServiceRequest {
    let reqs: Vec<Req> = (0..60u64)
        .map(|k| {
            let jitter = 0.8 + 0.4 * ((k * 37 + minute * 11) % 60) as f64 / 60.0;
            Req {
                id: 10_001 + minute * 60 + k,
                start_s: (minute * 60 + k) as f64,
                ms: if minute >= 30 { 3000.0 } else { 1000.0 } * jitter,
                route: "/v1/chat",
                model: "llama-3-8b",
                attrs: vec![kv(
                    "model.instance.id",
                    if minute >= 30 && k % 2 == 0 {
                        "i-2"
                    } else {
                        "i-1"
                    },
                )],
                error: false,
            }
        })
        .collect();
    export("vllm", &reqs)
}

/// Minute `minute` of normal traffic on /v1/chat after the step (back to 1 s on i-1).
pub(crate) fn recovered_minute(minute: u64) -> ExportTraceServiceRequest {
    let reqs: Vec<Req> = (0..60u64)
        .map(|k| Req {
            id: 90_001 + minute * 60 + k,
            start_s: (minute * 60 + k) as f64,
            ms: 1000.0 * (0.8 + 0.4 * ((k * 37 + minute * 11) % 60) as f64 / 60.0),
            route: "/v1/chat",
            model: "llama-3-8b",
            attrs: vec![kv("model.instance.id", "i-1")],
            error: false,
        })
        .collect();
    export("vllm", &reqs)
}

/// 40 minutes on /v1/chat, 60 requests a minute; latency ×3 from minute 30.
fn latency_step(server: &TestServer, headers: &[(&str, &str)]) {
    for minute in 0..40u64 {
        let resp = server.post_traces(
            "application/x-protobuf",
            proto(&latency_step_minute(minute)),
            headers,
        );
        assert_eq!(resp.status(), 200);
    }
}

#[test]
fn incidents_and_slo_breaches_reach_the_webhook_with_retries_in_both_formats() {
    for format in ["threadline", "alertmanager"] {
        let hook = Webhook::start();
        let server = TestServer::start_with_config(Some(&format!(
            "[alerts]\nwebhook = {:?}\nformat = {format:?}\nbase_url = \"https://threadline.example\"\n\n[[alerts.slo]]\nname = \"chat-p99\"\nroute = \"/v1/chat\"\nmetric = \"p99_latency\"\nthreshold = 2000.0\nwindow = \"2m\"\n",
            hook.url
        )));
        latency_step(&server, &[]);
        let (status, listed) = server.get("/api/v1/incidents", None);
        assert_eq!(status, 200);
        assert_eq!(listed["incidents"].as_array().unwrap().len(), 1, "{listed}");
        let bodies = hook.wait_for(2);
        assert!(
            hook.attempts.load(std::sync::atomic::Ordering::SeqCst) >= 3,
            "the first attempt failed and was retried"
        );
        assert_eq!(bodies.len(), 2, "{bodies:?}");
        if format == "threadline" {
            let incident = bodies.iter().find(|b| b["kind"] == "incident").unwrap();
            assert_eq!(incident["status"], "firing");
            assert_eq!(incident["incident"]["route"], "/v1/chat");
            // i-2 joined at the step: the new instance, or its requests, lead.
            let top = incident["causes"][0]["subject"].as_str().unwrap();
            assert!(top.ends_with("i-2"), "{incident:#}");
            assert!(incident["causes"].as_array().unwrap().len() <= 3);
            assert!(incident["links"]["rca"]
                .as_str()
                .unwrap()
                .starts_with("https://threadline.example/api/v1/rca?incident=inc-"));
            let slo = bodies.iter().find(|b| b["kind"] == "slo").unwrap();
            assert_eq!(
                (slo["status"].as_str(), slo["rule"]["name"].as_str()),
                (Some("firing"), Some("chat-p99"))
            );
            assert!(slo["value"].as_f64().unwrap() > 2000.0);
        } else {
            let alerts: Vec<&serde_json::Value> =
                bodies.iter().flat_map(|b| b.as_array().unwrap()).collect();
            let incident = alerts
                .iter()
                .find(|a| a["labels"]["alertname"] == "ThreadlineIncident")
                .unwrap();
            assert_eq!(incident["labels"]["route"], "/v1/chat");
            assert!(incident["annotations"]["top_cause"]
                .as_str()
                .unwrap()
                .contains("i-2"));
            assert!(incident["startsAt"].as_str().unwrap().ends_with('Z'));
            assert!(incident.get("endsAt").is_none());
            let slo = alerts
                .iter()
                .find(|a| a["labels"]["alertname"] == "ThreadlineSLO")
                .unwrap();
            assert_eq!(slo["labels"]["slo"], "chat-p99");
        }
    }
}

#[test]
fn bad_alert_and_detector_config_is_refused_with_every_problem_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[detector]\nsensitivity = -1.0\n\n[alerts]\nwebhook = \"ftp://x\"\n\n[[alerts.slo]]\nname = \"s\"\nmetric = \"p98\"\nthreshold = 1.0\nwindow = \"90s\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap(), "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for fragment in [
        "detector.sensitivity -1",
        "alerts.webhook \"ftp://x\" is not an http(s) URL",
        "unknown metric \"p98\"",
        "window \"90s\" must be a whole number of minutes",
    ] {
        assert!(err.contains(fragment), "{fragment:?} missing in {err}");
    }
}

#[test]
fn diagnosis_is_per_tenant_on_every_endpoint() {
    let server = TestServer::start_with_config(Some(
        "[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-secret-key-0001\"]\n\n[[tenants]]\nid = \"globex\"\napi_keys = [\"globex-secret-key-0002\"]\n",
    ));
    let (acme, globex) = ("acme-secret-key-0001", "globex-secret-key-0002");
    latency_step(&server, &[("authorization", &format!("Bearer {acme}"))]);
    let range = format!("from={T0_S}&to={}", T0_S + 40 * 60);
    let metrics = format!("/api/v1/metrics?metric=request_rate&step=1h&{range}");
    let (status, mine) = server.get(&metrics, Some(acme));
    assert_eq!(status, 200, "{mine}");
    assert_eq!(mine["series"].as_array().unwrap().len(), 1);
    let (_, theirs) = server.get(&metrics, Some(globex));
    assert_eq!(theirs["series"], serde_json::json!([]));
    let (_, mine) = server.get("/api/v1/incidents", Some(acme));
    let incidents = mine["incidents"].as_array().unwrap();
    assert_eq!(incidents.len(), 1, "{mine}");
    let id = incidents[0]["id"].as_str().unwrap();
    let (_, theirs) = server.get("/api/v1/incidents", Some(globex));
    assert_eq!(theirs["incidents"], serde_json::json!([]));
    for path in [
        format!("/api/v1/incidents/{id}"),
        format!("/api/v1/rca?incident={id}"),
        "/api/v1/node-health/route:%2Fv1%2Fchat".to_owned(),
    ] {
        assert_eq!(server.get(&path, Some(acme)).0, 200, "{path}");
        assert_eq!(server.get(&path, Some(globex)).0, 404, "{path}");
        assert_eq!(server.get(&path, None).0, 401, "{path}");
    }
    // RCA by route for the other tenant finds nothing to blame.
    let (status, rca) = server.get(
        &format!(
            "/api/v1/rca?route=/v1/chat&metric=p99_latency&at={}",
            T0_S + 30 * 60
        ),
        Some(globex),
    );
    assert_eq!(status, 200);
    assert_eq!(
        (
            rca["requests_during"].as_u64(),
            rca["candidates"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0))
    );
    let scrape = |key: &str| {
        client()
            .get(format!("{}/metrics", server.api))
            .bearer_auth(key)
            .send()
            .unwrap()
            .text()
            .unwrap()
    };
    assert!(scrape(acme).contains(
        "threadline_llm_requests_total{level=\"request\",service=\"vllm\",route=\"/v1/chat\""
    ));
    let other = scrape(globex);
    assert!(!other.contains("/v1/chat"), "{other}");
    assert_eq!(
        client()
            .get(format!("{}/metrics", server.api))
            .send()
            .unwrap()
            .status(),
        401
    );
}

#[test]
fn a_dataset_late_against_its_cadence_is_stale_and_lowers_what_it_feeds() {
    let server = TestServer::start();
    // Versions every day for four days, then nothing for six: traffic keeps coming.
    let day = 86_400u64;
    for (n, v) in ["v1", "v2", "v3", "v4"].iter().enumerate() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(T0_S + n as u64 * day);
        let event = serde_json::json!({
            "eventType": "COMPLETE",
            "eventTime": humantime::format_rfc3339_seconds(t).to_string(),
            "producer": "https://example.com/etl",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": format!("01935a2e-0000-7000-8000-00000000010{n}")},
            "job": {"namespace": "etl", "name": "export-tickets"},
            "inputs": [],
            "outputs": [{"namespace": "warehouse", "name": "tickets",
                "facets": {"version": {"_producer": "p", "_schemaURL": "s", "datasetVersion": v}}}]
        });
        let (status, body) =
            server.post_json("/api/v1/lineage", event.to_string().into_bytes(), &[], None);
        assert_eq!(status, 201, "{body}");
    }
    let later: Vec<Req> = (0..30u64)
        .map(|i| Req {
            id: 70_000 + i,
            start_s: (10 * day) as f64 + i as f64,
            ms: 100.0,
            route: "/v1/chat",
            model: "llama-3-8b",
            attrs: vec![],
            error: false,
        })
        .collect();
    let resp = server.post_traces(
        "application/x-protobuf",
        proto(&export("vllm", &later)),
        &[],
    );
    assert_eq!(resp.status(), 200);
    let (status, health) = server.get("/api/v1/node-health/dataset:warehouse:tickets", None);
    assert_eq!(status, 200, "{health}");
    let stale = health["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "stale")
        .unwrap_or_else(|| panic!("{health}"));
    assert!(
        stale["detail"]
            .as_str()
            .unwrap()
            .contains("usually every 24.0 h"),
        "{stale}"
    );
    assert!(health["score"].as_f64().unwrap() < 1.0);
    // Downstream of it, the version it wrote last is less healthy too (half the penalty).
    let (_, version) = server.get(
        &format!(
            "/api/v1/node-health/{}",
            encode_node("dataset_version:warehouse:tickets@v4")
        ),
        None,
    );
    let penalty = |h: &serde_json::Value| h["factors"][0]["penalty"].as_f64().unwrap();
    assert_eq!(version["factors"][0]["kind"], "stale", "{version}");
    assert!((penalty(&version) * 2.0 - penalty(&health)).abs() < 1e-9);
}

#[test]
fn incidents_survive_a_kill_and_the_detector_resumes_where_it_stopped() {
    let mut server = TestServer::start();
    latency_step(&server, &[]);
    let (_, before) = server.get("/api/v1/incidents", None);
    let incidents = before["incidents"].as_array().unwrap().clone();
    assert_eq!(incidents.len(), 1, "{before}");
    assert_eq!(incidents[0]["status"], "open");
    server.restart();
    // Back to normal for ten minutes after the restart: the same incident resolves,
    // no second one opens (baselines were rebuilt from the stored rollups).
    for minute in 40..50u64 {
        let resp = server.post_traces(
            "application/x-protobuf",
            proto(&recovered_minute(minute)),
            &[],
        );
        assert_eq!(resp.status(), 200);
    }
    let (_, after) = server.get("/api/v1/incidents", None);
    let list = after["incidents"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{after}");
    assert_eq!(list[0]["id"], incidents[0]["id"]);
    assert_eq!(list[0]["status"], "resolved", "{after}");
    assert_eq!(list[0]["end"].as_str().unwrap(), "2026-11-01T10:40:00Z");
}
