//! Per-block attribute filters: a Bloom filter over every (key, value) pair the spans
//! of one detail block carry (span attributes and their resources' attributes, values
//! as the search compares them: their display string). A search with `attr.KEY=VALUE`
//! filters opens a block's details only when its filter says the pair may be there, so
//! a filter that matches nothing costs one small read per block instead of
//! decompressing and decoding every span.
//!
//! Values longer than `MAX_INDEXED_VALUE` bytes (prompts, documents) are left out —
//! they are what full-text search is for; a search for such a value reads every block
//! as before. The filters are `bloom`'s (≈ 1% false positives); the pair hash
//! (`pair_hash`) is our own and fixed forever, since filters are stored.

use threadline_model::{AttrValue, Attribute};

pub(crate) use crate::sqlite::bloom::may_contain;
use crate::sqlite::bloom::{splitmix, Bloom};

/// Longest value (bytes of its display string) a filter records.
pub(crate) const MAX_INDEXED_VALUE: usize = 256;

/// The pair's hash: the key's and the value's bytes eight at a time, each followed by
/// its length (so ("ab", "c") is not ("a", "bc")), then a splitmix64 finish.
pub(crate) fn pair_hash(key: &str, value: &str) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h: u64 = 0x243f_6a88_85a3_08d3;
    for part in [key.as_bytes(), value.as_bytes()] {
        let mut words = part.chunks_exact(8);
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            h = (h ^ u64::from_le_bytes(word))
                .wrapping_mul(K)
                .rotate_left(29);
        }
        let mut tail = [0u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        h = (h ^ u64::from_le_bytes(tail))
            .wrapping_mul(K)
            .rotate_left(29);
        h = (h ^ part.len() as u64).wrapping_mul(K);
    }
    splitmix(h)
}

/// Collects the pairs of one block.
#[derive(Default)]
pub(crate) struct FilterBuilder {
    hashes: Vec<u64>,
    /// Where numbers and booleans are written as the search shows them.
    shown: String,
}

impl FilterBuilder {
    pub(crate) fn add_attributes(&mut self, attributes: &[Attribute]) {
        for a in attributes {
            match &a.value {
                AttrValue::String(s) if s.len() > MAX_INDEXED_VALUE => {}
                AttrValue::String(s) => self.hashes.push(pair_hash(&a.key, s)),
                // As `to_display_string` shows them, without allocating each.
                AttrValue::Int(i) => self.push_shown(&a.key, format_args!("{i}")),
                AttrValue::Double(d) => self.push_shown(&a.key, format_args!("{d}")),
                AttrValue::Bool(b) => self.push_shown(&a.key, format_args!("{b}")),
                other => {
                    self.shown.clear();
                    other.write_display(&mut self.shown);
                    if self.shown.len() <= MAX_INDEXED_VALUE {
                        self.hashes.push(pair_hash(&a.key, &self.shown));
                    }
                }
            }
        }
    }

    fn push_shown(&mut self, key: &str, value: std::fmt::Arguments<'_>) {
        use std::fmt::Write;
        self.shown.clear();
        // Writing to a String cannot fail.
        let _ = self.shown.write_fmt(value);
        self.hashes.push(pair_hash(key, &self.shown));
    }

    /// The filter (`bloom`'s stored form). Empty when no pair.
    pub(crate) fn encode(mut self) -> Vec<u8> {
        self.hashes.sort_unstable();
        self.hashes.dedup();
        if self.hashes.is_empty() {
            return Vec::new();
        }
        let mut bloom = Bloom::with_capacity(self.hashes.len());
        for h in &self.hashes {
            bloom.insert(*h);
        }
        bloom.into_bytes()
    }
}

/// The SQL function `tl_may_hold(filter, hash, …)` (hashes as stored `i64` bits):
/// whether a block whose filter is `filter` may hold every pair hashed to them.
/// Registered on every reader connection (`register`), so that a search tests filters
/// inside the statement that walks the blocks, not in a query of its own per block.
const MAY_HOLD: &str = "tl_may_hold";

pub(crate) fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        MAY_HOLD,
        -1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let filter = ctx
                .get_raw(0)
                .as_blob()
                .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
            for at in 1..ctx.len() {
                let hash: i64 = ctx.get(at)?;
                if !may_contain(filter, hash as u64) {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
}

/// The SQL condition (starting with ` AND`) that the filter of block `block` of tenant
/// `tenant` (SQL expressions), if it has one, may hold every pair of `hashes`, and its
/// arguments. Blocks stored before filters existed have none and pass.
pub(crate) fn block_condition(
    tenant: &str,
    block: &str,
    hashes: &[u64],
) -> (String, Vec<rusqlite::types::Value>) {
    (
        format!(
            " AND NOT EXISTS (SELECT 1 FROM block_attr_filters f
                              WHERE f.tenant_id = {tenant} AND f.block_id = {block}
                                AND NOT {MAY_HOLD}(f.filter, {marks}))",
            marks = crate::sqlite::placeholders(hashes.len())
        ),
        hashes
            .iter()
            .map(|h| rusqlite::types::Value::Integer(*h as i64))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreBackend as _;

    /// `pair_hash("gray.tag", "canary")` as stored filters have it.
    const PINNED: u64 = 951_740_692_782_245_879;

    #[test]
    fn every_recorded_pair_is_found_and_few_others_are() {
        let mut b = FilterBuilder::default();
        let attrs: Vec<Attribute> = (0..500)
            .map(|i| Attribute::new(format!("k{}", i % 20), AttrValue::String(format!("v{i}"))))
            .chain([
                Attribute::new("n", AttrValue::Int(42)),
                Attribute::new("d", AttrValue::Double(0.25)),
                Attribute::new("b", AttrValue::Bool(true)),
                Attribute::new("long", AttrValue::String("x".repeat(MAX_INDEXED_VALUE + 1))),
            ])
            .collect();
        b.add_attributes(&attrs);
        let filter = b.encode();
        for i in 0..500 {
            assert!(may_contain(
                &filter,
                pair_hash(&format!("k{}", i % 20), &format!("v{i}"))
            ));
        }
        assert!(may_contain(&filter, pair_hash("n", "42")));
        for (key, value) in [("d", AttrValue::Double(0.25)), ("b", AttrValue::Bool(true))] {
            assert!(may_contain(
                &filter,
                pair_hash(key, &value.to_display_string())
            ));
        }
        assert!(!may_contain(
            &filter,
            pair_hash("long", &"x".repeat(MAX_INDEXED_VALUE + 1))
        ));
        let false_positives = (0..10_000)
            .filter(|i| may_contain(&filter, pair_hash("k1", &format!("w{i}"))))
            .count();
        assert!(false_positives < 300, "{false_positives} of 10000");
        // Key and value are kept apart: ("ab", "c") is not ("a", "bc").
        assert_ne!(pair_hash("ab", "c"), pair_hash("a", "bc"));
        assert!(!may_contain(&[], pair_hash("n", "42")));
        // The hash is stored on disk: it must never change.
        assert_eq!(pair_hash("gray.tag", "canary"), PINNED);
    }

    /// Attribute searches skip the blocks whose filter rules the pair out: with every
    /// block but one made unreadable, a search for a pair only that block holds still
    /// answers (it never opened the others), and one that must open a broken block fails.
    #[test]
    fn attribute_searches_open_only_blocks_whose_filter_may_match() {
        use crate::sqlite::tests::{acme, span};
        use threadline_model::TraceId;
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::sqlite::SqliteStore::open(dir.path(), crate::sqlite::EmbeddedConfig::default())
                .unwrap();
        for t in 1..=40u8 {
            let mut sp = span(t, 1, None, 1_000 + u64::from(t), None);
            sp.detail.attributes.push(Attribute::new(
                "customer",
                AttrValue::String(format!("c-{t}")),
            ));
            store.write_blocking(&acme(), &[sp]).unwrap();
        }
        let raw = rusqlite::Connection::open(dir.path().join(crate::sqlite::DB_FILE_NAME)).unwrap();
        raw.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
        raw.execute(
            "UPDATE span_blocks SET block = x'00ffffffff' WHERE id NOT IN
               (SELECT block_id FROM spans WHERE trace_id = ?1)",
            [&[7u8; 16][..]],
        )
        .unwrap();
        let search = |key: &str, value: &str| {
            store.search(
                &acme(),
                &crate::sqlite::TraceQuery {
                    attributes: vec![(key.into(), value.into())],
                    limit: 10,
                    ..Default::default()
                },
            )
        };
        let found = search("customer", "c-7").unwrap();
        assert_eq!(found.traces.len(), 1);
        assert_eq!(found.traces[0].trace_id, TraceId([7; 16]));
        assert!(search("customer", "nobody").unwrap().traces.is_empty());
        assert!(search("tier", "platinum").unwrap().traces.is_empty());
        assert!(
            search("tier", "gold").is_err(),
            "even traces are gold: their blocks are read"
        );
        assert!(
            search("customer", "c-8").is_err(),
            "c-8's block is broken and must be opened"
        );
    }
}
