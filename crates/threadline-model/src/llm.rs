//! The LLM view: one typed shape for what OpenTelemetry GenAI, OpenInference, vLLM and
//! Threadline's platform attributes say about an LLM call, whichever the sender used.

use serde::{Deserialize, Serialize};

/// Why a request was refused before or during generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectionReason {
    RateLimit,
    SafetyFilter,
    ContextOverflow,
    /// Any other reason, kept verbatim.
    Other(String),
}

impl RejectionReason {
    pub fn parse(value: &str) -> Self {
        match value.trim().to_ascii_lowercase().as_str() {
            "rate_limit" | "rate_limited" | "ratelimit" => RejectionReason::RateLimit,
            "safety_filter" | "content_filter" | "safety" => RejectionReason::SafetyFilter,
            "context_overflow" | "context_length_exceeded" => RejectionReason::ContextOverflow,
            _ => RejectionReason::Other(value.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            RejectionReason::RateLimit => "rate_limit",
            RejectionReason::SafetyFilter => "safety_filter",
            RejectionReason::ContextOverflow => "context_overflow",
            RejectionReason::Other(s) => s,
        }
    }
}

/// Normalized LLM fields of a span. Field names are the public API contract.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmView {
    pub operation: Option<String>,
    pub provider: Option<String>,
    pub request_model: Option<String>,
    pub response_model: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub total_tokens: Option<i64>,
    pub ttft_ms: Option<f64>,
    pub finish_reasons: Vec<String>,
    pub rejection_reason: Option<RejectionReason>,
    pub prompt_template_id: Option<String>,
    pub prompt_template_version: Option<String>,
    /// SHA-256 hex of system prompt, prompt and template version.
    pub prompt_hash: Option<String>,
    pub adapter_id: Option<String>,
    pub base_model: Option<String>,
    pub instance_id: Option<String>,
    pub image: Option<String>,
    pub route: Option<String>,
    pub ab_group: Option<String>,
    pub gray_tag: Option<String>,
    pub session_id: Option<String>,
    pub user_id: Option<String>,
    /// Share of prompt tokens an inference server's KV / prefix cache served: only
    /// from where such a cache applies (the platform attribute, vLLM's own span).
    pub kv_cache_hit_ratio: Option<f64>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    /// Share of prompt tokens a hosted provider's prompt cache served, as its client
    /// reports it (`gen_ai.usage.cache_read.input_tokens` …): kept apart from the
    /// KV-cache ratio, and absent on calls no prompt cache applies to (embeddings).
    /// Last, so views stored before it still decode (see the store's codec).
    #[serde(default, deserialize_with = "absent_at_the_end")]
    pub prompt_cache_hit_ratio: Option<f64>,
}

/// A field added at the end of a struct stored in a format without field names
/// (postcard): what was stored before the field existed ends where it begins, and
/// reads as `None`.
fn absent_at_the_end<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<f64>::deserialize(d).unwrap_or(None))
}

impl LlmView {
    /// The model to index and show: the requested one, else the one that answered.
    pub fn model(&self) -> Option<&str> {
        self.request_model
            .as_deref()
            .or(self.response_model.as_deref())
    }
}

/// The family a dated model snapshot belongs to, for grouping: `gpt-4o-mini-2024-07-18`
/// → `gpt-4o-mini`, `claude-3-5-sonnet-20241022` (or `@20241022`) →
/// `claude-3-5-sonnet`, `gpt-3.5-turbo-0125` → `gpt-3.5-turbo`. Other names are
/// their own family. The exact name stays on the span.
pub fn model_family(name: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let plausible_date = |y: &str, m: &str, d: &str| {
        y.starts_with("20")
            && m.parse::<u8>().is_ok_and(|m| (1..=12).contains(&m))
            && d.parse::<u8>().is_ok_and(|d| (1..=31).contains(&d))
    };
    // -YYYY-MM-DD
    if name.len() > 11 {
        let (head, tail) = name.split_at(name.len() - 11);
        let b = tail.as_bytes();
        if b[0] == b'-' && b[5] == b'-' && b[8] == b'-' {
            let (y, m, d) = (&tail[1..5], &tail[6..8], &tail[9..11]);
            if digits(y) && digits(m) && digits(d) && plausible_date(y, m, d) && !head.is_empty() {
                return head;
            }
        }
    }
    // -YYYYMMDD or @YYYYMMDD
    if name.len() > 9 {
        let (head, tail) = name.split_at(name.len() - 9);
        if matches!(tail.as_bytes()[0], b'-' | b'@') {
            let date = &tail[1..];
            if digits(date)
                && plausible_date(&date[..4], &date[4..6], &date[6..])
                && !head.is_empty()
            {
                return head;
            }
        }
    }
    // OpenAI's -MMDD snapshots (gpt-4-0613, gpt-3.5-turbo-0125).
    if name.starts_with("gpt-") && name.len() > 9 {
        let (head, tail) = name.split_at(name.len() - 5);
        let date = &tail[1..];
        if tail.starts_with('-')
            && digits(date)
            && date[..2].parse::<u8>().is_ok_and(|m| (1..=12).contains(&m))
            && date[2..].parse::<u8>().is_ok_and(|d| (1..=31).contains(&d))
        {
            return head;
        }
    }
    name
}

#[cfg(test)]
mod family_tests {
    use super::model_family;

    #[test]
    fn dated_snapshots_group_with_their_family() {
        for (name, family) in [
            ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
            ("gpt-4o-2024-08-06", "gpt-4o"),
            ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
            ("claude-3-5-sonnet@20240620", "claude-3-5-sonnet"),
            ("gpt-3.5-turbo-0125", "gpt-3.5-turbo"),
            ("gpt-4-0613", "gpt-4"),
            ("gpt-4o-mini", "gpt-4o-mini"),
            (
                "meta-llama/Meta-Llama-3-8B-Instruct",
                "meta-llama/Meta-Llama-3-8B-Instruct",
            ),
            ("llama-3-8b-0613", "llama-3-8b-0613"),
            ("model-12345678", "model-12345678"),
            ("text-embedding-3-small", "text-embedding-3-small"),
            ("2024-07-18", "2024-07-18"),
        ] {
            assert_eq!(model_family(name), family, "{name}");
        }
    }
}
