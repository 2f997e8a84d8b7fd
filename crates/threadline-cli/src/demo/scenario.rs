//! The demo's platform and its four hours: the injected incidents and when they run,
//! each request's shape at a minute (route, instance, adapter, latency, errors), its
//! spans, the registry manifest and the OpenLineage events of datasets and fine-tunes.

use super::*;

// The scenario's minutes (offsets into the last 240 simulated minutes).
pub(super) const WINDOW: i64 = 240;
/// Incident A: adapter fin-lora@7 hot-swapped onto i-3 and i-4 (/v1/chat), rolled back.
const A_ON: i64 = 70;
const A_OFF: i64 = 100;
/// Incident F: a new image on every /v1/summarize instance slows it (all traffic at
/// once: no contrast inside the window, only before / after); a harmless prompt bump
/// on the same route lands two minutes before. Rolled back.
const F_ON: i64 = 88;
const F_OFF: i64 = 112;
/// Incident B: prompt support-answer v3 (/v1/support) overflows the context; reverted.
const B_ON: i64 = 115;
const B_OFF: i64 = 135;
/// Incident C: dataset fin-docs v2 drifts, sum-lora@4 is trained on it and deployed on
/// every /v1/summarize instance, and fails requests' output validation.
const C_DRIFT: i64 = 138;
const C_TRAIN_END: i64 = 150;
const C_ON: i64 = 160;
/// Incident D: the KV-cache hit ratio collapses on instance i-6 (/v1/support).
const D_ON: i64 = 200;
/// Incident E: the document index /v1/chat retrieves from slows down (an upstream
/// service, no LLM attribute at all); a harmless image rollout on i-3 and i-4 lands
/// two minutes before.
const E_ON: i64 = 215;

/// One injected incident and the cause RCA should rank first.
pub(super) struct Injected {
    pub(super) name: &'static str,
    pub(super) route: &'static str,
    pub(super) onset: i64,
    pub(super) cause: String,
}

pub(super) fn injected() -> Vec<Injected> {
    vec![
        Injected {
            name: "adapter hot-swap slows /v1/chat",
            route: "/v1/chat",
            onset: A_ON,
            cause: "adapter:fin-lora@7".into(),
        },
        Injected {
            name: "a new image on every /v1/summarize instance slows it",
            route: "/v1/summarize",
            onset: F_ON,
            cause: "image:ghcr.io/acme/vllm:0.7.0".into(),
        },
        Injected {
            name: "prompt template bump causes context_overflow rejections",
            route: "/v1/support",
            onset: B_ON,
            cause: "prompt:support-answer@v3".into(),
        },
        Injected {
            name: "dataset drift upstream of an adapter, then quality errors",
            route: "/v1/summarize",
            onset: C_ON,
            cause: "dataset_version:warehouse:fin-docs@v2".into(),
        },
        Injected {
            name: "KV-cache hit-ratio drop on one instance",
            route: "/v1/support",
            onset: D_ON,
            cause: "instance=i-6".into(),
        },
        Injected {
            name: "the retriever's document index slows /v1/chat",
            route: "/v1/chat",
            onset: E_ON,
            cause: "service=docs-index span=search_docs".into(),
        },
    ]
}

const BASE_MODEL: &str = "meta-llama/Meta-Llama-3-8B-Instruct";

/// The API port the demo listens on unless told otherwise.
pub(super) const DEFAULT_HTTP_PORT: u16 = 8080;
const EMBED_MODEL: &str = "BAAI/bge-small-en-v1.5";

/// What one request looked like: decided per minute and instance by the scenario.
struct Shape {
    route: &'static str,
    model: &'static str,
    instance: &'static str,
    adapter: Option<String>,
    image: String,
    prompt: Option<(&'static str, &'static str)>,
    base_ms: f64,
    kv: Option<f64>,
    /// Share of requests refused with this reason.
    rejection: Option<(&'static str, f64)>,
    /// Share of requests failing output validation.
    quality_errors: f64,
    /// Typical time of the document search before the model call, if the route has one.
    retrieval_ms: Option<f64>,
}

/// Routes: (route, requests per minute, instances).
const ROUTES: [(&str, f64, &[&str]); 4] = [
    ("/v1/chat", 80.0, &["i-1", "i-2", "i-3", "i-4"]),
    ("/v1/support", 50.0, &["i-5", "i-6"]),
    ("/v1/summarize", 40.0, &["i-7", "i-8"]),
    ("/v1/embed", 60.0, &["e-1", "e-2"]),
];

fn shape(route: &'static str, instance: &'static str, t: i64) -> Shape {
    let vllm = |new_from: Option<i64>| {
        if new_from.is_some_and(|m| t >= m) {
            "ghcr.io/acme/vllm:0.6.1".to_owned()
        } else {
            "ghcr.io/acme/vllm:0.6.0".to_owned()
        }
    };
    match route {
        "/v1/chat" => {
            let swapped = matches!(instance, "i-3" | "i-4") && (A_ON..A_OFF).contains(&t);
            Shape {
                route,
                model: BASE_MODEL,
                instance,
                adapter: Some(if swapped { "fin-lora@7" } else { "fin-lora@6" }.into()),
                // Harmless, close to A: a new image on i-1 and i-2, a prompt bump; close
                // to E: a newer image on i-3 and i-4.
                image: if matches!(instance, "i-3" | "i-4") && t >= E_ON - 2 {
                    "ghcr.io/acme/vllm:0.6.2".to_owned()
                } else {
                    vllm(matches!(instance, "i-1" | "i-2").then_some(A_ON - 4))
                },
                prompt: Some(("chat-system", if t >= A_ON - 3 { "v6" } else { "v5" })),
                base_ms: if swapped { 2400.0 } else { 900.0 },
                kv: Some(0.82),
                rejection: None,
                quality_errors: 0.0,
                retrieval_ms: Some(if t >= E_ON { 650.0 } else { 60.0 }),
            }
        }
        "/v1/support" => {
            let overflow = (B_ON..B_OFF).contains(&t);
            let kv_drop = instance == "i-6" && t >= D_ON;
            let version = if t >= D_ON - 2 {
                "v4" // harmless, close to D
            } else if overflow {
                "v3"
            } else {
                "v2"
            };
            Shape {
                route,
                model: BASE_MODEL,
                instance,
                adapter: Some("support-lora@2".into()),
                // Harmless, close to B: every support instance moves to a new image.
                image: vllm(Some(B_ON - 3)),
                prompt: Some(("support-answer", version)),
                base_ms: if kv_drop { 2200.0 } else { 1200.0 },
                kv: Some(if kv_drop { 0.18 } else { 0.85 }),
                rejection: overflow.then_some(("context_overflow", 0.18)),
                quality_errors: 0.0,
                retrieval_ms: None,
            }
        }
        "/v1/summarize" => {
            let v4 = t >= C_ON;
            let new_image = (F_ON..F_OFF).contains(&t);
            // Harmless: close to F, then close to C.
            let prompt = if t >= C_ON - 2 {
                "v3"
            } else if t >= F_ON - 2 {
                "v2"
            } else {
                "v1"
            };
            Shape {
                route,
                model: BASE_MODEL,
                instance,
                adapter: Some(if v4 { "sum-lora@4" } else { "sum-lora@3" }.into()),
                image: if new_image {
                    "ghcr.io/acme/vllm:0.7.0".to_owned()
                } else {
                    vllm(None)
                },
                prompt: Some(("summarize", prompt)),
                base_ms: if new_image { 2600.0 } else { 1500.0 },
                kv: Some(0.78),
                rejection: None,
                quality_errors: if v4 { 0.15 } else { 0.0 },
                retrieval_ms: None,
            }
        }
        _ => Shape {
            route,
            model: EMBED_MODEL,
            instance,
            adapter: None,
            // Harmless rollouts on a healthy route: they must not raise incidents.
            image: if t >= D_ON - 3 {
                "ghcr.io/acme/bge-serve:1.2"
            } else if t >= 80 {
                "ghcr.io/acme/bge-serve:1.1"
            } else {
                "ghcr.io/acme/bge-serve:1.0"
            }
            .to_owned(),
            prompt: None,
            base_ms: 40.0,
            kv: None,
            rejection: None,
            quality_errors: 0.0,
            retrieval_ms: None,
        },
    }
}

/// The spans of one request.
struct RequestSpans {
    gateway: Span,
    /// The document search before the model call (plain span, service docs-index).
    retrieval: Option<Span>,
    inference: Span,
}

/// One request: the gateway span, the document search if the route has one, and the
/// inference span under it.
fn request_spans(rng: &mut StdRng, sh: &Shape, start_ns: u64) -> RequestSpans {
    let trace_id = nonzero_id::<16>(rng).to_vec();
    let gateway_id = nonzero_id::<8>(rng).to_vec();
    let retrieval = sh.retrieval_ms.map(|typical| {
        let ms = typical * (0.25 * gauss(rng)).exp();
        let from = start_ns + 3_000_000;
        Span {
            trace_id: trace_id.clone(),
            span_id: nonzero_id::<8>(rng).to_vec(),
            parent_span_id: gateway_id.clone(),
            name: "search_docs".into(),
            kind: 3,
            start_time_unix_nano: from,
            end_time_unix_nano: from + (ms * 1e6) as u64,
            attributes: vec![
                s("db.system.name", "elasticsearch"),
                s("db.operation.name", "search"),
                s("server.address", "docs-index.internal"),
            ],
            ..Default::default()
        }
    });
    let after_retrieval = retrieval
        .as_ref()
        .map_or(start_ns, |r| r.end_time_unix_nano);
    let latency_ms = sh.base_ms * (0.22 * gauss(rng)).exp();
    let rejected = sh.rejection.filter(|(_, p)| rng.random::<f64>() < *p);
    let failed = rng.random::<f64>() < sh.quality_errors + 0.003;
    let ms = if rejected.is_some() {
        4.0 + rng.random::<f64>() * 4.0
    } else {
        latency_ms
    };
    let infer_start = after_retrieval + 8_000_000;
    let infer_end = infer_start + (ms * 1e6) as u64;
    let mut attrs = vec![
        s(
            "gen_ai.operation.name",
            if sh.route == "/v1/embed" {
                "embeddings"
            } else {
                "chat"
            },
        ),
        s("gen_ai.request.model", sh.model),
        s("gen_ai.provider.name", "vllm"),
        s("model.instance.id", sh.instance),
        s("container.image", sh.image.clone()),
        i("gen_ai.usage.input_tokens", 600 + rng.random_range(0..600)),
    ];
    if let Some(adapter) = &sh.adapter {
        attrs.push(s("llm.lora.adapter_id", adapter.clone()));
    }
    if let Some((template, version)) = sh.prompt {
        attrs.push(s("llm.prompt_template.id", template));
        attrs.push(s("llm.prompt.version", version));
    }
    let mut status = None;
    if let Some((reason, _)) = rejected {
        attrs.push(s("llm.rejection.reason", reason));
        status = Some(Status {
            code: 2,
            message: format!("request refused: {reason}"),
        });
    } else {
        if sh.route != "/v1/embed" {
            attrs.push(i(
                "gen_ai.usage.output_tokens",
                120 + rng.random_range(0..200),
            ));
            attrs.push(d("gen_ai.server.time_to_first_token", ms * 0.18 / 1e3));
        }
        if let Some(kv) = sh.kv {
            attrs.push(d(
                "llm.kvcache.hit_ratio",
                (kv + 0.04 * gauss(rng)).clamp(0.0, 1.0),
            ));
        }
        if failed {
            status = Some(Status {
                code: 2,
                message: "output failed schema validation".into(),
            });
        }
    }
    let gateway = Span {
        trace_id: trace_id.clone(),
        span_id: gateway_id.clone(),
        name: format!("POST {}", sh.route),
        kind: 2,
        start_time_unix_nano: start_ns,
        end_time_unix_nano: infer_end + 4_000_000,
        attributes: vec![
            s("api.route", sh.route),
            s("http.request.method", "POST"),
            s("ab.group", if rng.random::<bool>() { "A" } else { "B" }),
        ],
        status: status.clone(),
        ..Default::default()
    };
    let inference = Span {
        trace_id,
        span_id: nonzero_id::<8>(rng).to_vec(),
        parent_span_id: gateway_id,
        name: format!("chat {}", sh.model),
        kind: 2,
        start_time_unix_nano: infer_start,
        end_time_unix_nano: infer_end,
        attributes: attrs,
        status,
        ..Default::default()
    };
    RequestSpans {
        gateway,
        retrieval,
        inference,
    }
}

/// The spans of one export request, by service.
#[derive(Default)]
struct ExportSpans {
    gateway: Vec<Span>,
    retrieval: Vec<Span>,
    inference: Vec<Span>,
}

impl ExportSpans {
    fn push(&mut self, r: RequestSpans) {
        self.gateway.push(r.gateway);
        self.retrieval.extend(r.retrieval);
        self.inference.push(r.inference);
    }

    fn export(self) -> ExportTraceServiceRequest {
        let resource_spans =
            |service: &str, spans: Vec<Span>| crate::loadgen::service_spans(service, "demo", spans);
        ExportTraceServiceRequest {
            resource_spans: vec![
                resource_spans("llm-gateway", self.gateway),
                resource_spans("docs-index", self.retrieval),
                resource_spans("vllm", self.inference),
            ],
        }
    }
}

/// The traffic, minute by minute (minute `m` is scenario minute `m - offset`), as export
/// requests of whole minutes, at least 400 requests each.
pub(super) fn traffic(
    seed: u64,
    start_minute: i64,
    minutes: i64,
    offset: i64,
) -> Vec<ExportTraceServiceRequest> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut spans = ExportSpans::default();
    for m in 0..minutes {
        let t = m - offset;
        let daily = 1.0 + 0.2 * ((m as f64) / 90.0 * std::f64::consts::PI).sin();
        for (route, rate, instances) in ROUTES {
            let n = (rate * daily * (0.85 + 0.3 * rng.random::<f64>())).round() as usize;
            for k in 0..n {
                let instance = instances[k % instances.len()];
                let sh = shape(route, instance, t);
                let at = ((start_minute + m) * 60) as u64 * 1_000_000_000
                    + rng.random_range(0..59_000_000_000u64);
                spans.push(request_spans(&mut rng, &sh, at));
            }
        }
        if spans.gateway.len() >= 400 || m == minutes - 1 {
            out.push(std::mem::take(&mut spans).export());
        }
    }
    out
}

/// Registry manifest: models, adapters (with the artifacts their training runs write)
/// and prompt template versions.
pub(super) fn manifest() -> Value {
    let adapter = |id: &str, artifact: &str| json!({"id": id, "base_model": BASE_MODEL, "relation": "adapter", "artifact": artifact});
    let prompt = |id: &str, v: &str| json!({"id": id, "version": v});
    json!({
        "models": [{"id": BASE_MODEL}, {"id": EMBED_MODEL}],
        "adapters": [
            adapter("fin-lora@6", "s3://models/fin-lora/6"),
            adapter("fin-lora@7", "s3://models/fin-lora/7"),
            adapter("support-lora@2", "s3://models/support-lora/2"),
            adapter("sum-lora@3", "s3://models/sum-lora/3"),
            adapter("sum-lora@4", "s3://models/sum-lora/4"),
        ],
        "prompt_templates": [
            prompt("chat-system", "v5"), prompt("chat-system", "v6"),
            prompt("support-answer", "v2"), prompt("support-answer", "v3"),
            prompt("support-answer", "v4"), prompt("summarize", "v1"), prompt("summarize", "v2"),
            prompt("summarize", "v3"),
        ],
    })
}

pub(super) fn lineage_events(s0: i64) -> Vec<Value> {
    let qa = ["question", "answer"];
    let docs = ["document", "summary"];
    let drifted = ["document", "summary", "source_url"];
    let mut events = Vec::new();
    events.extend(training_run(
        1,
        "finetune-fin",
        dataset_input("fin-qa", "v1", &qa, 40_000, 120),
        "s3://models/fin-lora/6",
        s0 - 300,
        s0 - 240,
    ));
    events.extend(training_run(
        2,
        "finetune-fin",
        dataset_input("fin-qa", "v1", &qa, 40_000, 120),
        "s3://models/fin-lora/7",
        s0 + A_ON - 90,
        s0 + A_ON - 45,
    ));
    events.extend(training_run(
        3,
        "finetune-support",
        dataset_input("support-tickets", "v1", &qa, 25_000, 80),
        "s3://models/support-lora/2",
        s0 - 400,
        s0 - 330,
    ));
    events.extend(training_run(
        4,
        "finetune-sum",
        dataset_input("fin-docs", "v1", &docs, 18_000, 180),
        "s3://models/sum-lora/3",
        s0 - 200,
        s0 - 150,
    ));
    // fin-docs v2: a new column and a quarter of the summaries missing.
    events.extend(training_run(
        5,
        "finetune-sum",
        dataset_input("fin-docs", "v2", &drifted, 19_000, 4_750),
        "s3://models/sum-lora/4",
        s0 + C_DRIFT,
        s0 + C_TRAIN_END,
    ));
    events
}
