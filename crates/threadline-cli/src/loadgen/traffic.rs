//! The traffic `loadgen` sends: request templates (a batch of LLM-shaped traces,
//! encoded once, refreshed with new ids and times before each send), the text corpus
//! their prompts and responses are drawn from, and OTLP attribute helpers the other
//! generators share.

use super::*;

/// Requests each worker builds up front and re-sends with fresh ids and times.
pub(super) const TEMPLATES_PER_WORKER: usize = 4;

/// A request encoded once, with where each span's ids and times sit in its bytes.
/// Ids and times are fixed-size fields (16- and 8-byte ids, fixed64 times), so a
/// copy with fresh values is the same bytes with those slots overwritten: the
/// loadgen, which shares the cores with the server, never re-encodes a request
/// (measured: its user CPU per span 3.9 → 1.5 µs; the server's is ≈ 40).
pub(super) struct Template {
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
    pub(super) fn new(mut request: ExportTraceServiceRequest, rng: &mut SmallRng) -> Self {
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
    pub(super) fn refreshed(&mut self, rng: &mut SmallRng) -> Vec<u8> {
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
pub(super) struct TextCorpus {
    prompts: Vec<String>,
    /// `gen_ai.input.messages` / `gen_ai.output.messages` JSON, built once.
    input_messages: Vec<String>,
    output_messages: Vec<String>,
    /// Whether spans carry the prompt, response and retrieval query texts at all.
    with_text: bool,
}

/// The attributes that carry prompt and response text (left out by `--no-text`).
const TEXT_ATTRIBUTES: [&str; 3] = [
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.retrieval.query.text",
];

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
    /// Spans without prompt and response text: what most spans of a platform are.
    pub(super) fn without_text(mut self) -> Self {
        self.with_text = false;
        self
    }

    pub(super) fn new(seed: u64) -> Self {
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
            with_text: true,
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

pub(super) fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(super) fn build_request(
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
    if !corpus.with_text {
        for span in by_service.iter_mut().flatten() {
            span.attributes
                .retain(|a| !TEXT_ATTRIBUTES.contains(&a.key.as_str()));
        }
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
}
