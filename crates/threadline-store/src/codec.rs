//! Byte encodings of what the store keeps in blobs: span detail (attributes, events,
//! links, status, LLM view) and span origins (resource + scope). postcard for compact
//! structure, zstd for the large text LLM spans carry (prompts, responses).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use threadline_model::{LlmView, SpanDetail, SpanOrigin};

use crate::StoreError;

/// First byte of a blob: how the rest is encoded. New formats get new tags; old ones stay
/// readable.
const TAG_POSTCARD: u8 = 1;
const TAG_POSTCARD_ZSTD: u8 = 2;
/// Blobs smaller than this are not worth a zstd frame header.
const COMPRESS_MIN_BYTES: usize = 160;
const ZSTD_LEVEL: i32 = 3;

#[derive(Serialize)]
struct DetailRef<'a> {
    detail: &'a SpanDetail,
    llm: &'a Option<LlmView>,
}

#[derive(Deserialize)]
struct DetailOwned {
    detail: SpanDetail,
    llm: Option<LlmView>,
}

pub(crate) fn encode_detail(
    detail: &SpanDetail,
    llm: &Option<LlmView>,
) -> Result<Vec<u8>, StoreError> {
    let raw = postcard::to_stdvec(&DetailRef { detail, llm })
        .map_err(|e| StoreError::Corrupt(format!("cannot encode span detail: {e}")))?;
    Ok(wrap(raw))
}

pub(crate) fn decode_detail(blob: &[u8]) -> Result<(SpanDetail, Option<LlmView>), StoreError> {
    let raw = unwrap(blob)?;
    let owned: DetailOwned = postcard::from_bytes(&raw)
        .map_err(|e| StoreError::Corrupt(format!("span detail does not decode: {e}")))?;
    Ok((owned.detail, owned.llm))
}

pub(crate) fn encode_origin(origin: &SpanOrigin) -> Result<(i64, Vec<u8>), StoreError> {
    let raw = postcard::to_stdvec(origin)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode span origin: {e}")))?;
    let digest = Sha256::digest(&raw);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Ok((i64::from_le_bytes(first), wrap(raw)))
}

pub(crate) fn decode_origin(blob: &[u8]) -> Result<SpanOrigin, StoreError> {
    let raw = unwrap(blob)?;
    postcard::from_bytes(&raw)
        .map_err(|e| StoreError::Corrupt(format!("span origin does not decode: {e}")))
}

fn wrap(raw: Vec<u8>) -> Vec<u8> {
    if raw.len() >= COMPRESS_MIN_BYTES {
        if let Ok(compressed) = zstd::bulk::compress(&raw, ZSTD_LEVEL) {
            if compressed.len() < raw.len() {
                let mut out = Vec::with_capacity(compressed.len() + 1);
                out.push(TAG_POSTCARD_ZSTD);
                out.extend_from_slice(&compressed);
                return out;
            }
        }
    }
    let mut out = Vec::with_capacity(raw.len() + 1);
    out.push(TAG_POSTCARD);
    out.extend_from_slice(&raw);
    out
}

fn unwrap(blob: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, StoreError> {
    match blob.split_first() {
        Some((&TAG_POSTCARD, rest)) => Ok(std::borrow::Cow::Borrowed(rest)),
        Some((&TAG_POSTCARD_ZSTD, rest)) => zstd::stream::decode_all(rest)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| StoreError::Corrupt(format!("zstd frame does not decompress: {e}"))),
        Some((tag, _)) => Err(StoreError::Corrupt(format!(
            "unknown blob format tag {tag}"
        ))),
        None => Err(StoreError::Corrupt("empty blob".to_owned())),
    }
}
