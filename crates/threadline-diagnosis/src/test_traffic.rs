//! Request spans for this crate's tests: the route `/v1/chat` on instances i-0 … i-3;
//! from minute 40 the adapter `fin-lora@7` on i-2 and i-3 makes their requests about
//! 2.8 times slower.

use std::sync::Arc;

use threadline_model::{LlmView, SpanDetail, SpanId, SpanKind, SpanRecord, TenantId, TraceId};
use threadline_store::Store;

/// The minute the slow adapter arrives.
pub(crate) const SWAP_MINUTE: usize = 40;

/// `count` requests in `minute` of the hour at `hour_ns`; `seed` keeps the ids of
/// separate calls apart.
pub(crate) fn chat_requests(
    hour_ns: i64,
    minute: usize,
    count: usize,
    seed: u32,
) -> Vec<SpanRecord> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ ((seed as u64) << 32 | minute as u64);
    let mut unit = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..count)
        .map(|n| {
            let instance = (unit() * 4.0) as usize;
            let swapped = minute >= SWAP_MINUTE && instance >= 2;
            // About lognormal with σ 0.25: a sum of uniforms stands in for a normal.
            let normal = (0..12).map(|_| unit()).sum::<f64>() - 6.0;
            let ms = if swapped { 2500.0 } else { 900.0 } * (0.25 * normal).exp();
            let start = hour_ns + minute as i64 * 60_000_000_000 + (unit() * 59e9) as i64;
            let mut trace = [0u8; 16];
            trace[..4].copy_from_slice(&seed.to_be_bytes());
            trace[4..8].copy_from_slice(&(minute as u32).to_be_bytes());
            trace[8..].copy_from_slice(&(n as u64 + 1).to_be_bytes());
            SpanRecord {
                trace_id: TraceId(trace),
                span_id: SpanId((n as u64 + 1).to_be_bytes()),
                parent_span_id: None,
                name: "chat /v1/chat".into(),
                service: "vllm".into(),
                kind: SpanKind::Server,
                start_time_unix_nano: start as u64,
                end_time_unix_nano: (start + (ms * 1e6) as i64) as u64,
                detail: SpanDetail::default(),
                origin: Arc::default(),
                llm: Some(LlmView {
                    route: Some("/v1/chat".into()),
                    request_model: Some("meta-llama/Meta-Llama-3-8B-Instruct".into()),
                    adapter_id: Some(if swapped { "fin-lora@7" } else { "fin-lora@6" }.into()),
                    instance_id: Some(format!("i-{instance}")),
                    input_tokens: Some(800),
                    output_tokens: Some(200),
                    ttft_ms: Some(ms * 0.15),
                    ..LlmView::default()
                }),
            }
        })
        .collect()
}

/// Writes minutes `from..from + minutes` of `per_minute` requests, acknowledged.
pub(crate) fn load(
    store: &Store,
    tenant: &TenantId,
    hour_ns: i64,
    from: usize,
    minutes: usize,
    per_minute: usize,
) {
    for minute in from..from + minutes {
        let batch = chat_requests(hour_ns, minute, per_minute, from as u32);
        store.write_blocking(tenant, &batch).unwrap();
    }
}
