//! A scenario's traffic as OTLP spans (minute by minute: diurnal rate, lognormal
//! latency, bursts of errors, the state each request sees) and its registry manifest
//! and OpenLineage events.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};

use super::platform::{
    Backend, Convention, Refusal, Route, Scenario, Step, Who, CRM, CRM_CLIENT_SPAN, CRM_MS,
    CRM_NETWORK_MS, CRM_SPAN, MINUTES,
};
use crate::loadgen::{d, i, s, service_spans};
use crate::synth::{dataset_input, gauss, nonzero_id, training_run};

const NS_PER_MS: f64 = 1e6;
const GATEWAY: &str = "llm-gateway";
const ENGINE: &str = "vllm";

/// Lognormal around `typical` with log-sd `sigma`.
fn lognormal(rng: &mut StdRng, typical: f64, sigma: f64) -> f64 {
    typical * (sigma * gauss(rng)).exp()
}

fn status_error(message: impl Into<String>) -> Option<Status> {
    Some(Status {
        code: 2,
        message: message.into(),
    })
}

/// The spans of one export request, by service.
#[derive(Default)]
struct Batch {
    by_service: Vec<(&'static str, Vec<Span>)>,
    requests: usize,
}

impl Batch {
    fn push(&mut self, service: &'static str, span: Span) {
        match self.by_service.iter_mut().find(|(s, _)| *s == service) {
            Some((_, spans)) => spans.push(span),
            None => self.by_service.push((service, vec![span])),
        }
    }

    fn export(self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: self
                .by_service
                .into_iter()
                .map(|(service, spans)| service_spans(service, "bench", spans))
                .collect(),
        }
    }
}

/// Share of requests that fail outside bursts and faults.
pub(crate) const BASE_ERRORS: f64 = 0.003;

/// One request as the simulator served it: what the spans sent say of it, kept to
/// measure what any detector could have seen (`oracle`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Served {
    pub(crate) route: usize,
    pub(crate) minute: i64,
    pub(crate) who: Who,
    /// It failed or was refused.
    pub(crate) bad: bool,
}

/// A span of `kind` under `parent`, from `from` (ns) for `ms`.
fn below(rng: &mut StdRng, parent: &Span, name: &str, kind: i32, from: u64, ms: f64) -> Span {
    Span {
        trace_id: parent.trace_id.clone(),
        span_id: nonzero_id::<8>(rng).to_vec(),
        parent_span_id: parent.span_id.clone(),
        name: name.to_owned(),
        kind,
        start_time_unix_nano: from,
        end_time_unix_nano: from + (ms * NS_PER_MS) as u64,
        ..Default::default()
    }
}

/// One request's spans: the gateway's server span, its steps and the model call.
fn request(
    rng: &mut StdRng,
    scenario: &Scenario,
    r: usize,
    t: i64,
    start_ns: u64,
    batch: &mut Batch,
) -> Served {
    let route = &scenario.routes[r];
    let canary_share = scenario.canary_share(r, t);
    let mut who = Who {
        instance: match &route.backend {
            Backend::Fleet(f) => rng.random_range(0..f.instances.len()),
            Backend::Providers(_) => 0,
        },
        provider: match &route.backend {
            Backend::Providers(p) if rng.random::<f64>() >= p[0].share => 1,
            _ => 0,
        },
        arm: if rng.random_bool(0.5) { "B" } else { "A" },
        canary: canary_share > 0.0 && rng.random::<f64>() < canary_share,
        u: rng.random(),
    };
    if let Some((arm, share)) = scenario.new_arm(r, t) {
        if who.u < share {
            who.arm = arm;
        }
    }
    if let (true, true, Some(i)) = (
        who.canary,
        r == scenario.fault.route,
        scenario.canary_instance,
    ) {
        who.instance = i;
    }
    let state = scenario.state(r, t, who);
    let trace_id = nonzero_id::<16>(rng).to_vec();
    let gateway_id = nonzero_id::<8>(rng).to_vec();
    let mut at = start_ns + 2_000_000;
    let mut child = |rng: &mut StdRng, name: String, kind: i32, from: u64, ms: f64| Span {
        trace_id: trace_id.clone(),
        span_id: nonzero_id::<8>(rng).to_vec(),
        parent_span_id: gateway_id.clone(),
        name,
        kind,
        start_time_unix_nano: from,
        end_time_unix_nano: from + (ms * NS_PER_MS) as u64,
        ..Default::default()
    };
    let step_span =
        |rng: &mut StdRng,
         step: Step,
         at: &mut u64,
         child: &mut dyn FnMut(&mut StdRng, String, i32, u64, f64) -> Span| {
            let ms = lognormal(rng, step.typical_ms(), 0.3) * state.step_factor[step as usize];
            let mut span = child(rng, step.span().to_owned(), 2, *at, ms);
            span.attributes = match step {
                Step::Profile => vec![s("http.request.method", "GET"), s("url.path", "/profile")],
                Step::Retrieval => vec![
                    s("db.system.name", "elasticsearch"),
                    s("db.operation.name", "search"),
                ],
                Step::Tool => vec![s("rpc.method", "LookupAccount")],
            };
            *at = span.end_time_unix_nano + 1_000_000;
            span
        };
    for step in [Step::Profile, Step::Retrieval] {
        if route.steps.contains(&step) {
            let span = step_span(rng, step, &mut at, &mut child);
            batch.push(step.service(), span);
        }
    }
    let refused = state.refusal.filter(|(_, p)| rng.random::<f64>() < *p);
    let burst = if route.burst_minutes.contains(&t) {
        0.04
    } else {
        0.0
    };
    let failed = refused.is_none() && rng.random::<f64>() < BASE_ERRORS + burst + state.errors;
    let call_ms = match refused {
        Some((Refusal::ContextOverflow, _)) => 3.0 + 5.0 * rng.random::<f64>(),
        Some((Refusal::RateLimit, _)) => 40.0 + 120.0 * rng.random::<f64>(),
        None => lognormal(rng, route.call_ms, 0.25) * state.latency,
    };
    let hosted = matches!(route.backend, Backend::Providers(_));
    let open_inference = route.convention == Convention::OpenInference;
    // An attribute's name in the route's convention.
    let key = |gen_ai: &'static str, oi: &'static str| if open_inference { oi } else { gen_ai };
    let mut call = child(
        rng,
        if open_inference {
            "ChatCompletion".to_owned()
        } else {
            format!("chat {}", state.model)
        },
        if hosted { 3 } else { 2 },
        at,
        call_ms,
    );
    at = call.end_time_unix_nano + 1_000_000;
    let mut attrs = vec![
        if open_inference {
            s("openinference.span.kind", "LLM")
        } else {
            s("gen_ai.operation.name", "chat")
        },
        s(
            key("gen_ai.request.model", "llm.model_name"),
            state.model.clone(),
        ),
        s("llm.prompt_template.id", route.prompt_template.clone()),
        s(
            key("llm.prompt.version", "llm.prompt_template.version"),
            format!("v{}", state.prompt_version),
        ),
        i(
            key("gen_ai.usage.input_tokens", "llm.token_count.prompt"),
            rng.random_range(300..1500),
        ),
    ];
    let provider_key = key("gen_ai.provider.name", "llm.provider");
    match &route.backend {
        Backend::Fleet(f) => {
            attrs.push(s(provider_key, "vllm"));
            attrs.push(s("model.instance.id", f.instances[who.instance].clone()));
            if let Some(image) = &state.image {
                attrs.push(s("container.image", image.clone()));
            }
            if let Some(adapter) = &state.adapter {
                attrs.push(s("llm.lora.adapter_id", adapter.clone()));
            }
        }
        Backend::Providers(p) => {
            attrs.push(s(provider_key, p[who.provider].name));
            attrs.push(s(
                "server.address",
                format!("api.{}.example", p[who.provider].name),
            ));
        }
    }
    let mut status = None;
    let mut http_status = 200;
    match refused {
        Some((Refusal::ContextOverflow, _)) => {
            attrs.push(s("llm.rejection.reason", "context_overflow"));
            status = status_error("request refused: context_overflow");
            http_status = 400;
        }
        Some((Refusal::RateLimit, _)) => {
            attrs.push(s("error.type", "RateLimitError"));
            attrs.push(i("http.response.status_code", 429));
            status = status_error("Error code: 429 - rate limit reached for requests");
            http_status = 429;
        }
        None => {
            if !open_inference {
                attrs.push(s("gen_ai.response.model", state.model.clone()));
            }
            attrs.push(i(
                key("gen_ai.usage.output_tokens", "llm.token_count.completion"),
                rng.random_range(50..400),
            ));
            let ttft = call_ms * state.ttft_share * (0.15 * gauss(rng)).exp();
            if !open_inference {
                attrs.push(d(
                    "gen_ai.server.time_to_first_token",
                    ttft.min(call_ms) / 1e3,
                ));
            }
            if let Some(kv) = state.kv {
                attrs.push(d(
                    "llm.kvcache.hit_ratio",
                    (kv + 0.04 * gauss(rng)).clamp(0.0, 1.0),
                ));
            }
            if failed {
                status = status_error("output failed schema validation");
                http_status = 500;
            }
        }
    }
    call.attributes = attrs;
    call.status = status.clone();
    batch.push(if hosted { GATEWAY } else { ENGINE }, call);
    if refused.is_none() && route.steps.contains(&Step::Tool) {
        let mut span = step_span(rng, Step::Tool, &mut at, &mut child);
        // The tool calls crm-api half-way through its own work: a client span of
        // its own around crm-api's server span, the network on either side of it.
        let network_ms = lognormal(rng, CRM_NETWORK_MS, 0.3) * state.network;
        let crm_ms = lognormal(rng, CRM_MS, 0.3);
        let client_ms = network_ms + crm_ms;
        let mid = (span.start_time_unix_nano + span.end_time_unix_nano) / 2;
        let mut client = below(rng, &span, CRM_CLIENT_SPAN, 3, mid, client_ms);
        client.attributes = vec![s("http.request.method", "GET"), s("server.address", CRM)];
        let served_at = mid + (network_ms / 2.0 * NS_PER_MS) as u64;
        let mut crm = below(rng, &client, CRM_SPAN, 2, served_at, crm_ms);
        crm.attributes = vec![s("http.route", "/accounts/{id}")];
        let added = client.end_time_unix_nano - client.start_time_unix_nano;
        span.end_time_unix_nano += added;
        at += added;
        batch.push(Step::Tool.service(), client);
        batch.push(CRM, crm);
        batch.push(Step::Tool.service(), span);
    }
    let end = at + (3.0 + 6.0 * rng.random::<f64>()) as u64 * 1_000_000;
    let user = rng.random_range(0..400);
    let gateway = Span {
        trace_id,
        span_id: gateway_id,
        name: format!("POST {}", route.path),
        kind: 2,
        start_time_unix_nano: start_ns,
        end_time_unix_nano: end,
        attributes: vec![
            s(route.route_key, route.path.clone()),
            s("http.request.method", "POST"),
            i("http.response.status_code", http_status),
            s("ab.group", who.arm),
            s("gray.tag", if who.canary { "canary" } else { "stable" }),
            s("enduser.id", format!("user-{user}")),
            s("session.id", format!("sess-{user}-{}", t / 30)),
        ],
        status,
        ..Default::default()
    };
    batch.push(GATEWAY, gateway);
    batch.requests += 1;
    Served {
        route: r,
        minute: t,
        who,
        bad: failed || refused.is_some(),
    }
}

/// Requests per minute of `route` at scenario minute `t`: its rate on a daily cycle
/// (phase drawn per scenario) with ±15% noise.
fn per_minute(rng: &mut StdRng, route: &Route, phase: f64, t: i64) -> usize {
    let day = (std::f64::consts::TAU * (t as f64 + phase) / 1440.0).sin();
    (route.rate * (1.0 + 0.25 * day) * (0.85 + 0.3 * rng.random::<f64>())).round() as usize
}

/// The scenario's traffic from Unix minute `s0` on, as export requests of whole
/// minutes (at least 400 requests each), and each request as it was served.
pub(crate) fn traffic(
    rng: &mut StdRng,
    scenario: &Scenario,
    s0: i64,
) -> (Vec<ExportTraceServiceRequest>, Vec<Served>) {
    let phase = rng.random_range(0.0..1440.0);
    let mut out = Vec::new();
    let mut served = Vec::new();
    let mut batch = Batch::default();
    for t in 0..MINUTES {
        for (r, route) in scenario.routes.iter().enumerate() {
            for _ in 0..per_minute(rng, route, phase, t) {
                let start =
                    ((s0 + t) * 60) as u64 * 1_000_000_000 + rng.random_range(0..58_000_000_000u64);
                served.push(request(rng, scenario, r, t, start, &mut batch));
            }
        }
        if batch.requests >= 400 || t == MINUTES - 1 {
            out.push(std::mem::take(&mut batch).export());
        }
    }
    (out, served)
}

/// The registry manifest: models, adapters with the artifacts their runs wrote, and
/// prompt template versions, as a platform team registers them.
pub(crate) fn manifest(scenario: &Scenario) -> Value {
    let mut models: Vec<String> = scenario.extra_models.clone();
    let mut prompts = Vec::new();
    for (r, route) in scenario.routes.iter().enumerate() {
        match &route.backend {
            Backend::Fleet(f) => models.push(f.model.clone()),
            Backend::Providers(p) => models.extend(p.iter().map(|p| p.model.to_owned())),
        }
        let mut versions = vec![route.prompt_version];
        for c in scenario.changes.iter().filter(|c| c.route == r) {
            if let Some(super::platform::Setting::Prompt(v)) = c.set {
                versions.push(v);
            }
        }
        versions.sort_unstable();
        versions.dedup();
        for v in versions {
            prompts.push(json!({"id": route.prompt_template, "version": format!("v{v}")}));
        }
    }
    models.sort();
    models.dedup();
    let adapters: Vec<Value> = scenario
        .runs
        .iter()
        .map(|run| {
            let base = scenario
                .routes
                .iter()
                .find_map(|r| match &r.backend {
                    Backend::Fleet(f)
                        if f.adapter
                            .as_ref()
                            .is_some_and(|a| a.name == run.adapter.name) =>
                    {
                        Some(f.model.clone())
                    }
                    _ => None,
                })
                .unwrap_or_default();
            json!({
                "id": run.adapter.id(run.version),
                "base_model": base,
                "relation": "adapter",
                "artifact": artifact(run),
            })
        })
        .collect();
    json!({
        "models": models.iter().map(|m| json!({"id": m})).collect::<Vec<_>>(),
        "adapters": adapters,
        "prompt_templates": prompts,
    })
}

fn artifact(run: &super::platform::TrainingRun) -> String {
    format!("s3://models/{}/{}", run.adapter.name, run.version)
}

/// START and COMPLETE of every fine-tune run, times from Unix minute `s0`.
pub(crate) fn lineage_events(scenario: &Scenario, s0: i64) -> Vec<Value> {
    let fields = ["question", "answer"];
    let drifted = ["question", "answer", "source_url"];
    scenario
        .runs
        .iter()
        .enumerate()
        .flat_map(|(n, run)| {
            let input = if run.drifted {
                dataset_input(
                    &run.adapter.dataset,
                    &format!("v{}", run.dataset_version),
                    &drifted,
                    31_000,
                    7_800,
                )
            } else {
                dataset_input(
                    &run.adapter.dataset,
                    &format!("v{}", run.dataset_version),
                    &fields,
                    30_000,
                    90,
                )
            };
            training_run(
                n as u32 + 1,
                &format!("finetune-{}", run.adapter.name),
                input,
                &artifact(run),
                s0 + run.start,
                s0 + run.end,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::bench_diagnosis::faults::generate;
    use crate::bench_diagnosis::platform::{FaultKind, Variant};

    /// The network into crm-api: the tool's client span grows around crm-api's server
    /// span, which does not.
    #[test]
    fn a_slower_network_into_a_dependency_shows_only_in_the_callers_client_span() {
        let mut rng = StdRng::seed_from_u64(5);
        let scenario = generate(&mut rng, FaultKind::DependencyNetwork, Variant::Plain);
        assert_eq!(scenario.fault.cause, format!("service={CRM}"));
        let r = scenario.fault.route;
        let gap_and_crm_ms = |t: i64, rng: &mut StdRng| {
            let mut batch = Batch::default();
            request(rng, &scenario, r, t, 1_000_000_000, &mut batch);
            let spans: Vec<&Span> = batch.by_service.iter().flat_map(|(_, s)| s).collect();
            let find = |name: &str| spans.iter().find(|s| s.name == name).copied();
            let (client, crm) = (find(CRM_CLIENT_SPAN)?, find(CRM_SPAN)?);
            assert_eq!(crm.parent_span_id, client.span_id);
            let ms = |s: &Span| (s.end_time_unix_nano - s.start_time_unix_nano) as f64 / 1e6;
            Some((ms(client) - ms(crm), ms(crm)))
        };
        let mut before = Vec::new();
        let mut during = Vec::new();
        for _ in 0..40 {
            before.extend(gap_and_crm_ms(scenario.fault.onset - 1, &mut rng));
            during.extend(gap_and_crm_ms(scenario.fault.onset + 1, &mut rng));
        }
        assert!(!before.is_empty() && !during.is_empty());
        let mean = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
            v.iter().map(f).sum::<f64>() / v.len() as f64
        };
        assert!(mean(&before, |p| p.0) < 10.0);
        assert!(mean(&during, |p| p.0) > 100.0);
        assert!((mean(&during, |p| p.1) / mean(&before, |p| p.1) - 1.0).abs() < 0.3);
    }

    /// A route described in OpenInference sends no GenAI names, and the model call is
    /// one all the same once ingested.
    #[test]
    fn an_open_inference_route_names_its_calls_in_open_inference_only() {
        let mut rng = StdRng::seed_from_u64(9);
        let mut scenario = generate(&mut rng, FaultKind::AdapterSwap, Variant::Plain);
        let r = scenario.fault.route;
        scenario.routes[r].convention = Convention::OpenInference;
        let mut batch = Batch::default();
        request(&mut rng, &scenario, r, 10, 1_000_000_000, &mut batch);
        let spans: Vec<&Span> = batch.by_service.iter().flat_map(|(_, s)| s).collect();
        let call = spans
            .iter()
            .find(|s| s.name == "ChatCompletion")
            .expect("a model call");
        let keys: Vec<&str> = call.attributes.iter().map(|a| a.key.as_str()).collect();
        assert!(
            keys.contains(&"llm.model_name") && keys.contains(&"llm.provider"),
            "{keys:?}"
        );
        assert!(keys.iter().all(|k| !k.starts_with("gen_ai.")), "{keys:?}");
        let request = ExportTraceServiceRequest {
            resource_spans: batch.export().resource_spans,
        };
        let converted =
            threadline_ingest::convert_request(request, &threadline_ingest::TimeBounds::storable());
        let llm = converted
            .spans
            .iter()
            .find(|s| s.name == "ChatCompletion")
            .and_then(|s| s.llm.as_ref())
            .expect("normalized");
        assert!(
            llm.model().is_some()
                && llm.adapter_id.is_some()
                && llm.prompt_template_version.is_some()
        );
    }
}
