//! Byte encodings of what the store keeps in blobs: span details (attributes, events,
//! links, status, LLM view), log record details and origins (resource + scope). postcard for compact
//! structure, zstd for the large text LLM spans carry (prompts, responses).
//!
//! Details are stored in blocks: the details of all spans of one export request are
//! concatenated and compressed together, and each span row points at its slice. One
//! zstd frame over a whole request compresses far better than one per span (prompts
//! share system prompts and templates) and costs the writer one row instead of many.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use threadline_model::{LlmView, LogDetail, SpanDetail, SpanOrigin};

use crate::sqlite::StoreError;

/// First byte of a blob: how the rest is encoded. New formats get new tags; old ones stay
/// readable.
const TAG_POSTCARD: u8 = 1;
const TAG_POSTCARD_ZSTD: u8 = 2;
/// Blobs smaller than this are not worth a zstd frame header.
const COMPRESS_MIN_BYTES: usize = 160;
/// Level 1: most of the ratio of higher levels on text, at a fraction of the CPU.
const ZSTD_LEVEL: i32 = 1;

thread_local! {
    /// Reused per thread: creating a zstd context per call costs more than compressing.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// The same for decompression.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// A block's encoded bytes, and its frame while compressed: reused per thread, so
    /// a batch does not allocate (and the allocator map fresh pages for) two buffers
    /// of a block's size that live for microseconds.
    static SCRATCH: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Scratch buffers larger than this are not kept after use (one huge export request
/// must not hold its memory for good).
const MAX_KEPT_SCRATCH: usize = 4 << 20;

/// The compressed details of a batch and where each span's detail sits in it.
pub(crate) struct EncodedBlock {
    pub(crate) blob: Vec<u8>,
    /// (offset, length) of each span's detail inside the decompressed block.
    pub(crate) slots: Vec<(u32, u32)>,
}

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

pub(crate) fn encode_block<'a>(
    details: impl ExactSizeIterator<Item = (&'a SpanDetail, &'a Option<LlmView>)>,
) -> Result<EncodedBlock, StoreError> {
    encode_items(
        details.map(|(detail, llm)| DetailRef { detail, llm }),
        "span detail",
    )
}

/// The compressed details of a batch of log records.
pub(crate) fn encode_log_block<'a>(
    details: impl ExactSizeIterator<Item = &'a LogDetail>,
) -> Result<EncodedBlock, StoreError> {
    encode_items(details, "log record")
}

fn encode_items<T: Serialize>(
    items: impl ExactSizeIterator<Item = T>,
    what: &str,
) -> Result<EncodedBlock, StoreError> {
    let mut raw = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().0));
    raw.clear();
    // About what an LLM-shaped span encodes to: avoids most regrowth copies.
    raw.reserve(items.len() * 1024);
    let mut slots = Vec::with_capacity(items.len());
    for item in items {
        let start = raw.len();
        // On an error the buffer is gone with it; the next block starts a new one.
        raw = postcard::to_extend(&item, raw)
            .map_err(|e| StoreError::corrupt(format!("cannot encode {what}: {e}")))?;
        let len = raw.len() - start;
        let as_u32 = |n: usize| {
            u32::try_from(n)
                .map_err(|_| StoreError::corrupt(format!("block of {n} bytes is too large")))
        };
        slots.push((as_u32(start)?, as_u32(len)?));
    }
    let blob = wrap(&raw);
    if raw.capacity() <= MAX_KEPT_SCRATCH {
        SCRATCH.with(|s| s.borrow_mut().0 = raw);
    }
    Ok(EncodedBlock { blob, slots })
}

/// The decompressed bytes of a block.
pub(crate) fn open_block(blob: &[u8]) -> Result<Vec<u8>, StoreError> {
    unwrap(blob).map(std::borrow::Cow::into_owned)
}

/// One span's detail from an opened block.
pub(crate) fn decode_detail(
    block: &[u8],
    offset: u32,
    len: u32,
) -> Result<(SpanDetail, Option<LlmView>), StoreError> {
    let owned: DetailOwned = decode_slot(block, offset, len, "span detail")?;
    Ok((owned.detail, owned.llm))
}

/// The searchable texts of one span's detail, read from an opened block without
/// copying them: what the full-text indexer reads (`SpanDetail::for_each_text` gives
/// the same texts of the decoded detail; the LLM view after it is not read).
pub(crate) fn detail_texts(
    block: &[u8],
    offset: u32,
    len: u32,
) -> Result<DetailTexts<'_>, StoreError> {
    postcard::take_from_bytes::<DetailTexts<'_>>(slot(block, offset, len, "span detail")?)
        .map(|(texts, _llm)| texts)
        .map_err(|e| StoreError::corrupt(format!("span detail does not decode: {e}")))
}

/// `SpanDetail` as postcard lays it out, its strings borrowed (fields in the same
/// order and of the same kinds; a test holds the two together).
#[derive(Deserialize)]
pub(crate) struct DetailTexts<'a> {
    #[serde(borrow)]
    _trace_state: &'a str,
    _flags: u32,
    #[serde(borrow)]
    attributes: Vec<AttributeRef<'a>>,
    _dropped_attributes_count: u32,
    #[serde(borrow)]
    events: Vec<EventRef<'a>>,
    _dropped_events_count: u32,
    #[serde(borrow)]
    _links: Vec<LinkRef<'a>>,
    _dropped_links_count: u32,
    _status_code: threadline_model::StatusCode,
    #[serde(borrow)]
    status_message: &'a str,
}

#[derive(Deserialize)]
struct AttributeRef<'a> {
    #[serde(borrow)]
    key: &'a str,
    #[serde(borrow)]
    value: AttrValueRef<'a>,
}

// The other kinds' values are decoded (they take their place on the wire), not read.
#[allow(dead_code)]
#[derive(Deserialize)]
enum AttrValueRef<'a> {
    Empty,
    String(#[serde(borrow)] &'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Vec<u8>),
    Array(#[serde(borrow)] Vec<AttrValueRef<'a>>),
    KvList(#[serde(borrow)] Vec<AttributeRef<'a>>),
}

#[derive(Deserialize)]
struct EventRef<'a> {
    _time_unix_nano: u64,
    #[serde(borrow)]
    name: &'a str,
    #[serde(borrow)]
    attributes: Vec<AttributeRef<'a>>,
    _dropped_attributes_count: u32,
}

#[derive(Deserialize)]
struct LinkRef<'a> {
    _trace_id: threadline_model::TraceId,
    _span_id: threadline_model::SpanId,
    #[serde(borrow)]
    _trace_state: &'a str,
    #[serde(borrow)]
    _attributes: Vec<AttributeRef<'a>>,
    _dropped_attributes_count: u32,
    _flags: u32,
}

impl<'a> AttrValueRef<'a> {
    fn for_each_string(&self, f: &mut impl FnMut(&'a str)) {
        match self {
            AttrValueRef::String(s) => f(s),
            AttrValueRef::Array(items) => items.iter().for_each(|v| v.for_each_string(f)),
            AttrValueRef::KvList(kvs) => kvs.iter().for_each(|kv| kv.value.for_each_string(f)),
            AttrValueRef::Empty
            | AttrValueRef::Bool(_)
            | AttrValueRef::Int(_)
            | AttrValueRef::Double(_)
            | AttrValueRef::Bytes(_) => {}
        }
    }
}

fn text_attributes<'a>(attributes: &[AttributeRef<'a>], all: bool, f: &mut impl FnMut(&'a str)) {
    for a in attributes {
        if all || threadline_model::is_text_key(a.key) {
            a.value.for_each_string(f);
        }
    }
}

impl<'a> DetailTexts<'a> {
    /// What `SpanDetail::for_each_text` calls `f` with, in the same order.
    pub(crate) fn for_each_text(&self, mut f: impl FnMut(&'a str)) {
        if !self.status_message.is_empty() {
            f(self.status_message);
        }
        text_attributes(&self.attributes, false, &mut f);
        for event in &self.events {
            text_attributes(
                &event.attributes,
                threadline_model::is_text_event(event.name),
                &mut f,
            );
        }
    }
}

/// One log record's detail from an opened block.
pub(crate) fn decode_log(block: &[u8], offset: u32, len: u32) -> Result<LogDetail, StoreError> {
    decode_slot(block, offset, len, "log record")
}

/// The bytes of one slot of an opened block.
fn slot<'b>(block: &'b [u8], offset: u32, len: u32, what: &str) -> Result<&'b [u8], StoreError> {
    block
        .get(offset as usize..offset as usize + len as usize)
        .ok_or_else(|| {
            StoreError::corrupt(format!(
                "{what} slot {offset}+{len} is outside its block of {} bytes",
                block.len()
            ))
        })
}

fn decode_slot<T: serde::de::DeserializeOwned>(
    block: &[u8],
    offset: u32,
    len: u32,
    what: &str,
) -> Result<T, StoreError> {
    postcard::from_bytes(slot(block, offset, len, what)?)
        .map_err(|e| StoreError::corrupt(format!("{what} does not decode: {e}")))
}

/// The block with the given detail slots overwritten by zeros, recompressed (erasure:
/// other spans keep their slots, so their rows need no change).
pub(crate) fn blank_slots(blob: &[u8], slots: &[(u32, u32)]) -> Result<Vec<u8>, StoreError> {
    let mut raw = open_block(blob)?;
    for &(offset, len) in slots {
        let range = offset as usize..offset as usize + len as usize;
        let slot = raw.get_mut(range).ok_or_else(|| {
            StoreError::corrupt(format!("detail slot {offset}+{len} is outside its block"))
        })?;
        slot.fill(0);
    }
    Ok(wrap(&raw))
}

/// The distinct origins of one batch, each hashed and encoded once: the records of one
/// scope share one `Arc<SpanOrigin>`.
#[derive(Default)]
pub(crate) struct BatchOrigins {
    by_ptr: foldhash::HashMap<*const SpanOrigin, i64>,
    /// (hash, encoded origin) of each distinct origin, in first-seen order.
    pub(crate) encoded: Vec<(i64, Vec<u8>)>,
}

impl BatchOrigins {
    /// The origin's hash, and whether the batch meets it for the first time.
    pub(crate) fn hash(
        &mut self,
        origin: &std::sync::Arc<SpanOrigin>,
    ) -> Result<(i64, bool), StoreError> {
        let ptr = std::sync::Arc::as_ptr(origin);
        if let Some(h) = self.by_ptr.get(&ptr) {
            return Ok((*h, false));
        }
        let (hash, blob) = encode_origin(origin)?;
        self.encoded.push((hash, blob));
        self.by_ptr.insert(ptr, hash);
        Ok((hash, true))
    }

    /// Bytes of the encoded origins.
    pub(crate) fn bytes(&self) -> usize {
        self.encoded.iter().map(|(_, b)| b.len()).sum()
    }
}

pub(crate) fn encode_origin(origin: &SpanOrigin) -> Result<(i64, Vec<u8>), StoreError> {
    let raw = postcard::to_stdvec(origin)
        .map_err(|e| StoreError::corrupt(format!("cannot encode span origin: {e}")))?;
    let digest = Sha256::digest(&raw);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Ok((i64::from_le_bytes(first), wrap(&raw)))
}

pub(crate) fn decode_origin(blob: &[u8]) -> Result<SpanOrigin, StoreError> {
    let raw = unwrap(blob)?;
    postcard::from_bytes(&raw)
        .map_err(|e| StoreError::corrupt(format!("span origin does not decode: {e}")))
}

pub(crate) fn encode_cell(cell: &threadline_analysis::RollupCell) -> Result<Vec<u8>, StoreError> {
    encode_postcard(cell, "rollup cell")
}

pub(crate) fn decode_cell(blob: &[u8]) -> Result<threadline_analysis::RollupCell, StoreError> {
    decode_postcard(blob, "rollup cell")
}

/// Any serializable value as postcard, compressed when large; `what` names it in errors.
pub(crate) fn encode_postcard<T: serde::Serialize>(
    value: &T,
    what: &str,
) -> Result<Vec<u8>, StoreError> {
    let raw = postcard::to_stdvec(value)
        .map_err(|e| StoreError::corrupt(format!("cannot encode {what}: {e}")))?;
    Ok(wrap(&raw))
}

/// What `encode_postcard` wrote.
pub(crate) fn decode_postcard<T: serde::de::DeserializeOwned>(
    blob: &[u8],
    what: &str,
) -> Result<T, StoreError> {
    let raw = unwrap(blob)?;
    postcard::from_bytes(&raw)
        .map_err(|e| StoreError::corrupt(format!("{what} does not decode: {e}")))
}

fn wrap(raw: &[u8]) -> Vec<u8> {
    if raw.len() >= COMPRESS_MIN_BYTES {
        let compressed = SCRATCH.with(|s| {
            let frame = &mut s.borrow_mut().1;
            frame.clear();
            frame.reserve(zstd::zstd_safe::compress_bound(raw.len()));
            let out = compress(raw, frame)
                .ok()
                .filter(|&n| n < raw.len())
                .map(|n| {
                    let mut out = Vec::with_capacity(n + 1);
                    out.push(TAG_POSTCARD_ZSTD);
                    out.extend_from_slice(&frame[..n]);
                    out
                });
            if frame.capacity() > MAX_KEPT_SCRATCH {
                *frame = Vec::new();
            }
            out
        });
        if let Some(out) = compressed {
            return out;
        }
    }
    let mut out = Vec::with_capacity(raw.len() + 1);
    out.push(TAG_POSTCARD);
    out.extend_from_slice(raw);
    out
}

/// Compresses `raw` into `frame` (which has room for the bound); the frame's size.
fn compress(raw: &[u8], frame: &mut Vec<u8>) -> std::io::Result<usize> {
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?);
        }
        match slot.as_mut() {
            Some(c) => c.compress_to_buffer(raw, frame),
            None => {
                *frame = zstd::bulk::compress(raw, ZSTD_LEVEL)?;
                Ok(frame.len())
            }
        }
    })
}

/// One zstd frame, decompressed in one pass into a buffer of the size its header
/// gives (`compress` writes it), with this thread's context; frames without a size
/// (or claiming more than `MAX_ONE_PASS_BYTES`) are streamed.
fn decompress(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    const MAX_ONE_PASS_BYTES: u64 = 1 << 30;
    let size = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) if size <= MAX_ONE_PASS_BYTES => usize::try_from(size).ok(),
        _ => None,
    };
    let Some(size) = size else {
        return zstd::stream::decode_all(frame);
    };
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress(frame, size),
            None => zstd::bulk::decompress(frame, size),
        }
    })
}

fn unwrap(blob: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, StoreError> {
    match blob.split_first() {
        Some((&TAG_POSTCARD, rest)) => Ok(std::borrow::Cow::Borrowed(rest)),
        Some((&TAG_POSTCARD_ZSTD, rest)) => decompress(rest)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| StoreError::corrupt(format!("zstd frame does not decompress: {e}"))),
        Some((tag, _)) => Err(StoreError::corrupt(format!(
            "unknown blob format tag {tag}"
        ))),
        None => Err(StoreError::corrupt("empty blob".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::{
        AttrValue, Attribute, LlmView, SpanEvent, SpanId, SpanLink, SpanStatus, StatusCode, TraceId,
    };

    /// Views stored before `prompt_cache_hit_ratio` was added are today's bytes
    /// without the trailing `None` (one zero byte): they decode, the ratio absent.
    #[test]
    fn a_view_stored_before_the_prompt_cache_ratio_still_decodes() {
        let view = LlmView {
            request_model: Some("gpt-4o".into()),
            kv_cache_hit_ratio: Some(0.25),
            tool_call_id: Some("call-1".into()),
            ..LlmView::default()
        };
        let detail = SpanDetail::default();
        let now = postcard::to_allocvec(&DetailRef {
            detail: &detail,
            llm: &Some(view.clone()),
        })
        .unwrap();
        assert_eq!(now.last(), Some(&0), "the ratio is absent: a None");
        let before = &now[..now.len() - 1];
        let decoded = decode_detail(before, 0, before.len() as u32).unwrap();
        assert_eq!(decoded.1, Some(view.clone()));
        let with_ratio = LlmView {
            prompt_cache_hit_ratio: Some(0.5),
            ..view
        };
        let now = postcard::to_allocvec(&DetailRef {
            detail: &detail,
            llm: &Some(with_ratio.clone()),
        })
        .unwrap();
        assert_eq!(
            decode_detail(&now, 0, now.len() as u32).unwrap().1,
            Some(with_ratio)
        );
    }

    #[test]
    fn borrowed_texts_are_the_decoded_details_texts() {
        let kinds = |prefix: &str| {
            vec![
                Attribute::new(format!("{prefix}.empty"), AttrValue::Empty),
                Attribute::new(format!("{prefix}.bool"), AttrValue::Bool(true)),
                Attribute::new(format!("{prefix}.int"), AttrValue::Int(-7)),
                Attribute::new(format!("{prefix}.double"), AttrValue::Double(0.5)),
                Attribute::new(format!("{prefix}.bytes"), AttrValue::Bytes(vec![1, 2, 255])),
                Attribute::new(
                    format!("{prefix}.array"),
                    AttrValue::Array(vec![
                        AttrValue::String(format!("{prefix} item")),
                        AttrValue::Int(3),
                    ]),
                ),
                Attribute::new(
                    format!("{prefix}.kv"),
                    AttrValue::KvList(vec![Attribute::new(
                        "role",
                        AttrValue::String(format!("{prefix} value")),
                    )]),
                ),
                Attribute::new(prefix, AttrValue::String(format!("{prefix} text"))),
            ]
        };
        let detail = SpanDetail {
            trace_state: "k=v".into(),
            flags: 257,
            attributes: [kinds("gen_ai.prompt"), kinds("http.route")].concat(),
            dropped_attributes_count: 2,
            events: vec![
                SpanEvent {
                    time_unix_nano: 99,
                    name: "gen_ai.choice".into(),
                    attributes: kinds("message"),
                    dropped_attributes_count: 1,
                },
                SpanEvent {
                    time_unix_nano: 100,
                    name: "cache.lookup".into(),
                    attributes: kinds("cache"),
                    dropped_attributes_count: 0,
                },
            ],
            dropped_events_count: 3,
            links: vec![SpanLink {
                trace_id: TraceId([7; 16]),
                span_id: SpanId([8; 8]),
                trace_state: "a=b".into(),
                attributes: kinds("link"),
                dropped_attributes_count: 4,
                flags: 1,
            }],
            dropped_links_count: 5,
            status: SpanStatus {
                code: StatusCode::Error,
                message: "it failed".into(),
            },
        };
        let llm = Some(LlmView {
            request_model: Some("gpt-4o".into()),
            ..LlmView::default()
        });
        let block =
            encode_block([(&detail, &llm), (&SpanDetail::default(), &None)].into_iter()).unwrap();
        let opened = open_block(&block.blob).unwrap();
        let mut expected = Vec::new();
        detail.for_each_text(|t| expected.push(t.to_owned()));
        assert!(expected.len() > 5, "{expected:?}");
        let (offset, len) = block.slots[0];
        let mut found = Vec::new();
        detail_texts(&opened, offset, len)
            .unwrap()
            .for_each_text(|t| found.push(t.to_owned()));
        assert_eq!(found, expected);
        let (offset, len) = block.slots[1];
        let mut none = Vec::new();
        detail_texts(&opened, offset, len)
            .unwrap()
            .for_each_text(|t| none.push(t.to_owned()));
        assert!(none.is_empty());
        assert!(detail_texts(&opened, offset, len + 10_000).is_err());
    }
}
