//! What the demo adds for people to look at beside the diagnosis scenario: assistant
//! sessions whose traces carry whole conversations (GenAI messages, a tool call, a
//! retrieval) priced on a hosted model — on odd sessions the answering call sends its
//! messages as GenAI log events instead, as current instrumentations do, and every tool
//! call logs a line — and one 1,200-span document-indexing trace
//! whose repeated chunk spans the UI folds. None of it is on a watched route at a rate
//! the detector judges, so the scenario's incidents are unchanged.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::loadgen::{i, s};

/// Sessions, turns per session, and chunks of the large trace.
pub(crate) const SESSIONS: usize = 6;
pub(crate) const TURNS: usize = 3;
pub(crate) const CHUNKS: usize = 1200;
pub(crate) const ASSISTANT_MODEL: &str = "gpt-4o-mini";

const QUESTIONS: [&str; 6] = [
    "What is my current account balance?",
    "Why was I charged twice this month?",
    "Can you summarize my last three invoices?",
    "How do I change the card on file?",
    "Is my refund processed yet?",
    "Which plan am I on and what does it include?",
];

fn id<const N: usize>(rng: &mut StdRng) -> Vec<u8> {
    let mut b = [0u8; N];
    while b.iter().all(|&x| x == 0) {
        rng.fill(&mut b[..]);
    }
    b.to_vec()
}

struct Builder {
    rng: StdRng,
    by_service: Vec<(&'static str, Vec<Span>)>,
    /// Log records of the `assistant` service.
    logs: Vec<LogRecord>,
}

/// A text `AnyValue`.
fn text(v: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(v.to_owned())),
    }
}

/// A map `AnyValue`.
fn map(entries: Vec<(&str, AnyValue)>) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::KvlistValue(KeyValueList {
            values: entries
                .into_iter()
                .map(|(k, v)| KeyValue {
                    key: k.to_owned(),
                    value: Some(v),
                    ..Default::default()
                })
                .collect(),
        })),
    }
}

impl Builder {
    fn span(
        &mut self,
        service: &'static str,
        (trace, parent): (&[u8], &[u8]),
        name: &str,
        kind: i32,
        (start, end): (u64, u64),
        attributes: Vec<KeyValue>,
    ) -> Vec<u8> {
        let span_id = id::<8>(&mut self.rng);
        let span = Span {
            trace_id: trace.to_vec(),
            span_id: span_id.clone(),
            parent_span_id: parent.to_vec(),
            name: name.to_owned(),
            kind,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            status: None,
            ..Default::default()
        };
        match self.by_service.iter_mut().find(|(s, _)| *s == service) {
            Some((_, spans)) => spans.push(span),
            None => self.by_service.push((service, vec![span])),
        }
        span_id
    }

    /// A log record of span `(trace, span)` at `at`: an event when `event` is set.
    fn log(
        &mut self,
        (trace, span): (&[u8], &[u8]),
        at: u64,
        severity: i32,
        event: &str,
        body: AnyValue,
    ) {
        self.logs.push(LogRecord {
            time_unix_nano: at,
            observed_time_unix_nano: at,
            severity_number: severity,
            severity_text: if severity >= 13 { "WARN" } else { "INFO" }.to_owned(),
            event_name: event.to_owned(),
            body: Some(body),
            trace_id: trace.to_vec(),
            span_id: span.to_vec(),
            ..Default::default()
        });
    }

    fn export_logs(&mut self) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![
                        s("service.name", "assistant"),
                        s("deployment.environment.name", "demo"),
                    ],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    log_records: std::mem::take(&mut self.logs),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn export(self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: self
                .by_service
                .into_iter()
                .map(|(service, spans)| crate::loadgen::service_spans(service, "demo", spans))
                .collect(),
        }
    }
}

const MS: u64 = 1_000_000;

/// One assistant turn: gateway → agent → retrieval → model call with a tool call →
/// tool → model call answering.
fn turn(b: &mut Builder, session: usize, turn: usize, start: u64) {
    let trace = id::<16>(&mut b.rng);
    let question = QUESTIONS[(session + turn) % QUESTIONS.len()];
    let conv = format!("sess-{:04}", 1000 + session);
    let user = format!("user-{}", 40 + session);
    let llm1 = 300 + b.rng.random_range(0..300) as u64;
    let tool = 20 + b.rng.random_range(0..40) as u64;
    let llm2 = 400 + b.rng.random_range(0..500) as u64;
    let end = start + (12 + 35 + llm1 + tool + llm2 + 10) * MS;
    let root = b.span(
        "llm-gateway",
        (&trace, &[]),
        "POST /v1/assistant",
        2,
        (start, end),
        vec![
            s("api.route", "/v1/assistant"),
            s("http.request.method", "POST"),
            s("session.id", &conv),
            s("user.id", &user),
        ],
    );
    let agent_start = start + 5 * MS;
    let agent = b.span(
        "assistant",
        (&trace, &root),
        "invoke_agent billing-assistant",
        1,
        (agent_start, end - 3 * MS),
        vec![
            s("gen_ai.operation.name", "invoke_agent"),
            s("gen_ai.agent.name", "billing-assistant"),
            s("gen_ai.conversation.id", &conv),
        ],
    );
    let r0 = agent_start + 2 * MS;
    b.span(
        "docs-index",
        (&trace, &agent),
        "search_docs",
        3,
        (r0, r0 + 35 * MS),
        vec![
            s("openinference.span.kind", "RETRIEVER"),
            s("input.value", question),
            i("retrieval.documents.count", 4),
        ],
    );
    let c1 = r0 + 37 * MS;
    let system = "You are Acme's billing assistant. Answer from the account tools; be brief.";
    let input1 = json!([
        {"role": "user", "parts": [{"type": "text", "content": question}]}
    ]);
    let output1 = json!([{"role": "assistant", "finish_reason": "tool_call", "parts": [
        {"type": "tool_call", "id": format!("call_{session}{turn}"), "name": "lookup_account",
         "arguments": {"user_id": user}}]}]);
    let llm_attrs = |input: &serde_json::Value, output: &serde_json::Value, inp: i64, out: i64| {
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.provider.name", "openai"),
            s("gen_ai.request.model", ASSISTANT_MODEL),
            s("gen_ai.response.model", "gpt-4o-mini-2024-07-18"),
            s("gen_ai.conversation.id", &conv),
            s("gen_ai.system_instructions", system),
            s("gen_ai.input.messages", input.to_string()),
            s("gen_ai.output.messages", output.to_string()),
            i("gen_ai.usage.input_tokens", inp),
            i("gen_ai.usage.output_tokens", out),
            s("llm.prompt_template.id", "billing-assistant"),
            s("llm.prompt.version", "v3"),
        ]
    };
    let in1 = 350 + b.rng.random_range(0..200);
    b.span(
        "assistant",
        (&trace, &agent),
        &format!("chat {ASSISTANT_MODEL}"),
        3,
        (c1, c1 + llm1 * MS),
        llm_attrs(&input1, &output1, in1, 24),
    );
    let t0 = c1 + (llm1 + 1) * MS;
    let tool_span = b.span(
        "assistant",
        (&trace, &agent),
        "execute_tool lookup_account",
        1,
        (t0, t0 + tool * MS),
        vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.name", "lookup_account"),
            s("gen_ai.tool.call.id", format!("call_{session}{turn}")),
        ],
    );
    b.log(
        (&trace, &tool_span),
        t0 + MS,
        13,
        "",
        text(&format!(
            "account cache miss for {user}; read from the billing database"
        )),
    );
    let c2 = t0 + (tool + 1) * MS;
    let answer = format!(
        "Here is what I found for {user}: your plan is Pro, the balance is ${}.{:02}, and nothing is pending.",
        20 + session * 7,
        (turn * 13) % 100
    );
    let input2 = json!([
        {"role": "user", "parts": [{"type": "text", "content": question}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": format!("call_{session}{turn}"), "name": "lookup_account", "arguments": {"user_id": user}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": format!("call_{session}{turn}"), "response": {"plan": "pro", "balance": 20 + session * 7}}]}
    ]);
    let output2 = json!([{"role": "assistant", "finish_reason": "stop", "parts": [{"type": "text", "content": answer}]}]);
    let out2 = 40 + b.rng.random_range(0..60);
    let as_events = session % 2 == 1;
    let mut attrs = llm_attrs(&input2, &output2, in1 + 80, out2);
    if as_events {
        attrs.retain(|kv| {
            !matches!(
                kv.key.as_str(),
                "gen_ai.system_instructions" | "gen_ai.input.messages" | "gen_ai.output.messages"
            )
        });
    }
    let answering = b.span(
        "assistant",
        (&trace, &agent),
        &format!("chat {ASSISTANT_MODEL}"),
        3,
        (c2, c2 + llm2 * MS),
        attrs,
    );
    if as_events {
        let ids = (trace.as_slice(), answering.as_slice());
        b.log(
            ids,
            c2,
            9,
            "gen_ai.system.message",
            map(vec![("content", text(system))]),
        );
        b.log(
            ids,
            c2,
            9,
            "gen_ai.user.message",
            map(vec![("content", text(question))]),
        );
        b.log(
            ids,
            c2 + llm2 * MS,
            9,
            "gen_ai.choice",
            map(vec![
                ("finish_reason", text("stop")),
                (
                    "message",
                    map(vec![
                        ("role", text("assistant")),
                        ("content", text(&answer)),
                    ]),
                ),
            ]),
        );
    }
}

/// A document-indexing trace: one document split into `CHUNKS` chunks, each embedded,
/// then the vectors upserted in batches.
fn indexing_trace(b: &mut Builder, start: u64) -> Vec<u8> {
    let trace = id::<16>(&mut b.rng);
    let per_chunk = 2 * MS;
    let end = start + (CHUNKS as u64 * per_chunk) + 400 * MS;
    let root = b.span(
        "indexer",
        (&trace, &[]),
        "index_document handbook.pdf",
        1,
        (start, end),
        vec![
            s("document.id", "handbook.pdf"),
            i("document.chunks", CHUNKS as i64),
        ],
    );
    b.span(
        "indexer",
        (&trace, &root),
        "split_document",
        1,
        (start + MS, start + 120 * MS),
        vec![],
    );
    let mut t = start + 121 * MS;
    for k in 0..CHUNKS {
        b.span(
            "indexer",
            (&trace, &root),
            "embed_chunk",
            1,
            (t, t + per_chunk - MS / 4),
            vec![
                i("chunk.index", k as i64),
                i("chunk.chars", 900 + (k as i64 * 37) % 300),
            ],
        );
        t += per_chunk;
    }
    for batch in 0..4 {
        b.span(
            "vector-db",
            (&trace, &root),
            "upsert_vectors",
            3,
            (t, t + 60 * MS),
            vec![
                i("db.batch.size", (CHUNKS / 4) as i64),
                i("batch.index", batch),
            ],
        );
        t += 65 * MS;
    }
    trace
}

/// The showcase traces, ending before `end_ns`: (exports, session ids, the large
/// trace's id).
/// What the showcase sends: its traces, its logs, its sessions and the large trace.
pub(crate) struct ShowcaseData {
    pub(crate) traces: ExportTraceServiceRequest,
    pub(crate) logs: ExportLogsServiceRequest,
    pub(crate) sessions: Vec<String>,
    pub(crate) large_trace: String,
}

pub(crate) fn showcase(seed: u64, end_ns: u64) -> ShowcaseData {
    let mut b = Builder {
        rng: StdRng::seed_from_u64(seed ^ 0x5e55_1045),
        by_service: Vec::new(),
        logs: Vec::new(),
    };
    let mut sessions = Vec::new();
    // Sessions spread over the last 50 minutes, turns two minutes apart.
    for session in 0..SESSIONS {
        let at = end_ns - (50 - session as u64 * 7) * 60_000 * MS;
        for t in 0..TURNS {
            turn(&mut b, session, t, at + t as u64 * 120_000 * MS);
        }
        sessions.push(format!("sess-{:04}", 1000 + session));
    }
    let large = indexing_trace(&mut b, end_ns - 20 * 60_000 * MS);
    let logs = b.export_logs();
    ShowcaseData {
        traces: b.export(),
        logs,
        sessions,
        large_trace: hex_of(&large),
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
