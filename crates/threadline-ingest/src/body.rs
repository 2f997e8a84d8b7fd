//! OTLP/HTTP request bodies: content type, gzip (bounded, so bombs stop early) and the
//! protobuf or JSON decode into an `ExportTraceServiceRequest`.

use std::io::Read;

use crate::lenient::Undecodable;
use crate::otlp_json::parse_otlp_json_as;
use crate::ExportRequest;

/// The two OTLP/HTTP encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentKind {
    Protobuf,
    Json,
}

impl ContentKind {
    /// Reads the media type of a `Content-Type` header (parameters ignored).
    pub fn from_content_type(header: Option<&str>) -> Result<Self, DecodeError> {
        let raw = header.unwrap_or("");
        let media = raw
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(ContentKind::Protobuf),
            "application/json" => Ok(ContentKind::Json),
            _ => Err(DecodeError::UnsupportedMediaType(
                raw.chars().take(100).collect(),
            )),
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            ContentKind::Protobuf => "application/x-protobuf",
            ContentKind::Json => "application/json",
        }
    }
}

/// Size limits on one request.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Largest body accepted, counted after decompression (OTLP recommends 64 MiB).
    pub max_body_bytes: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("unsupported content type {0:?}: send application/x-protobuf or application/json")]
    UnsupportedMediaType(String),
    #[error("unsupported content encoding {0:?}: send gzip or identity")]
    UnsupportedEncoding(String),
    #[error("request body exceeds the limit of {limit} bytes (after decompression)")]
    TooLarge { limit: usize },
    #[error("the server holds too many request bytes at once; retry later")]
    OverBudget,
    #[error("{0}")]
    Malformed(String),
}

/// Memory granted to a body being inflated, chunk by chunk: the server's in-flight
/// byte budget, so that many small gzip bodies cannot each inflate to the size limit
/// at once.
pub trait InflateBudget {
    /// Whether `bytes` more may be held; once refused, inflating stops.
    fn grant(&mut self, bytes: usize) -> bool;
}

/// No budget beyond the per-body limit (tools, tests).
pub struct Unbudgeted;

impl InflateBudget for Unbudgeted {
    fn grant(&mut self, _bytes: usize) -> bool {
        true
    }
}

/// Decompresses a request body if its `Content-Encoding` asks for it (gzip or
/// identity), within the size limit and what `budget` grants.
pub fn decode_body<'a>(
    content_encoding: Option<&str>,
    body: &'a [u8],
    limits: BodyLimits,
    budget: &mut dyn InflateBudget,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    let bytes = match content_encoding
        .map(|e| e.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("identity") => std::borrow::Cow::Borrowed(body),
        Some("gzip") | Some("x-gzip") => {
            std::borrow::Cow::Owned(gunzip_bounded(body, limits.max_body_bytes, budget)?)
        }
        Some(other) => {
            return Err(DecodeError::UnsupportedEncoding(
                other.chars().take(50).collect(),
            ))
        }
    };
    if bytes.len() > limits.max_body_bytes {
        return Err(DecodeError::TooLarge {
            limit: limits.max_body_bytes,
        });
    }
    Ok(bytes)
}

/// Decompresses (if asked) and decodes one OTLP/HTTP export body (traces or logs),
/// with the records that could not be decoded (protobuf only: see `decode_protobuf`).
pub fn decode_export_request<R: ExportRequest>(
    kind: ContentKind,
    content_encoding: Option<&str>,
    body: &[u8],
    limits: BodyLimits,
    budget: &mut dyn InflateBudget,
) -> Result<(R, Undecodable), DecodeError> {
    let bytes = decode_body(content_encoding, body, limits, budget)?;
    decode_export(kind, &bytes)
}

/// One decompressed export body (traces or logs), decoded, with the records that
/// could not be (protobuf only: see `decode_protobuf`).
pub fn decode_export<R: ExportRequest>(
    kind: ContentKind,
    bytes: &[u8],
) -> Result<(R, Undecodable), DecodeError> {
    match kind {
        ContentKind::Protobuf => decode_protobuf(bytes),
        ContentKind::Json => parse_otlp_json_as::<R>(bytes)
            .map(|r| (r, Undecodable::default()))
            .map_err(DecodeError::Malformed),
    }
}

/// One decompressed trace export body, decoded and converted. Protobuf is read
/// straight into records (`traces_wire`); a body that reader gives up on, and JSON,
/// go through prost's messages and `convert_request` — the same records either way.
pub fn decode_traces(
    kind: ContentKind,
    bytes: &[u8],
    bounds: &crate::TimeBounds,
) -> Result<crate::ConvertedBatch, DecodeError> {
    if kind == ContentKind::Protobuf {
        if let Ok(batch) = crate::traces_wire::convert_protobuf(bytes, bounds) {
            return Ok(batch);
        }
    }
    let (request, refused) = decode_export::<crate::ExportTraceServiceRequest>(kind, bytes)?;
    let mut batch = crate::convert_request(request, bounds);
    batch.add_undecodable(refused);
    Ok(batch)
}

/// One decompressed logs export body, decoded and converted (records that did not
/// decode or convert counted, their reasons first).
pub fn decode_logs(
    kind: ContentKind,
    bytes: &[u8],
    bounds: &crate::TimeBounds,
) -> Result<crate::ConvertedLogs, DecodeError> {
    let (request, refused) = decode_export::<crate::ExportLogsServiceRequest>(kind, bytes)?;
    let mut logs = crate::convert_logs_request(request, bounds);
    logs.add_undecodable(refused);
    Ok(logs)
}

/// A protobuf export request; when it does not decode whole, record by record (a span
/// with a string that is not UTF-8 is refused alone, its batch kept).
pub fn decode_protobuf<R: ExportRequest>(bytes: &[u8]) -> Result<(R, Undecodable), DecodeError> {
    match R::decode(bytes) {
        Ok(request) => Ok((request, Undecodable::default())),
        Err(whole) => match crate::lenient::decode_record_wise::<R>(bytes) {
            Ok((request, refused)) if refused.records > 0 => Ok((request, refused)),
            _ => Err(DecodeError::Malformed(format!(
                "protobuf body is not a valid {}: {whole}",
                R::NAME
            ))),
        },
    }
}

/// Inflates at most `limit` bytes; one byte more means the body is too large, and we
/// stop there instead of inflating the rest of a gzip bomb. Each chunk is granted by
/// `budget` before it is kept.
fn gunzip_bounded(
    body: &[u8],
    limit: usize,
    budget: &mut dyn InflateBudget,
) -> Result<Vec<u8>, DecodeError> {
    const CHUNK: usize = 256 * 1024;
    let mut out = Vec::new();
    let mut decoder = flate2::read::MultiGzDecoder::new(body).take(limit as u64 + 1);
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = decoder.read(&mut chunk).map_err(|e| {
            DecodeError::Malformed(format!("gzip body could not be decompressed: {e}"))
        })?;
        if n == 0 {
            break;
        }
        if out.len() + n > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        if !budget.grant(n) {
            return Err(DecodeError::OverBudget);
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok(out)
}

/// `google.rpc.Status`, the error body OTLP/HTTP prescribes (protobuf requests get it
/// encoded; JSON requests the same fields as JSON).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gzip_bomb_is_stopped_at_the_limit() {
        let bomb = gzip(&vec![0u8; 10 * 1024 * 1024]);
        let limits = BodyLimits {
            max_body_bytes: 1024 * 1024,
        };
        let err = decode_export_request::<crate::ExportTraceServiceRequest>(
            ContentKind::Protobuf,
            Some("gzip"),
            &bomb,
            limits,
            &mut Unbudgeted,
        )
        .unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { limit } if limit == 1024 * 1024));
    }

    /// Inflating stops at the first chunk the budget refuses.
    #[test]
    fn inflating_stops_where_the_budget_does() {
        struct Left(usize);
        impl InflateBudget for Left {
            fn grant(&mut self, bytes: usize) -> bool {
                let ok = bytes <= self.0;
                self.0 = self.0.saturating_sub(bytes);
                ok
            }
        }
        let body = gzip(&vec![b'x'; 2 * 1024 * 1024]);
        let limits = BodyLimits::default();
        let err = decode_body(Some("gzip"), &body, limits, &mut Left(1024 * 1024)).unwrap_err();
        assert!(matches!(err, DecodeError::OverBudget), "{err}");
        let ok = decode_body(Some("gzip"), &body, limits, &mut Left(4 * 1024 * 1024)).unwrap();
        assert_eq!(ok.len(), 2 * 1024 * 1024);
    }

    #[test]
    fn content_types_are_recognized_with_parameters() {
        assert_eq!(
            ContentKind::from_content_type(Some("application/json; charset=utf-8")).unwrap(),
            ContentKind::Json
        );
        assert!(ContentKind::from_content_type(Some("text/plain")).is_err());
        assert!(ContentKind::from_content_type(None).is_err());
    }

    #[test]
    fn corrupt_gzip_and_garbage_protobuf_are_malformed() {
        let limits = BodyLimits::default();
        let err = decode_export_request::<crate::ExportTraceServiceRequest>(
            ContentKind::Protobuf,
            Some("gzip"),
            b"nope",
            limits,
            &mut Unbudgeted,
        )
        .unwrap_err();
        assert!(err.to_string().contains("gzip"), "{err}");
        let err = decode_export_request::<crate::ExportTraceServiceRequest>(
            ContentKind::Protobuf,
            None,
            &[0xff, 0xff, 0xff],
            limits,
            &mut Unbudgeted,
        )
        .unwrap_err();
        assert!(err.to_string().contains("protobuf"), "{err}");
    }
}
