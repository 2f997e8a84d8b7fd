//! The full-text index's layout: one FTS5 document (`text_groups`) per group of
//! `TEXT_GROUP_BLOCKS` consecutive span blocks, how far the background indexer
//! (`text_indexer`) has come, a group's document from its stored rows, and the blocks
//! a query has to read. Words and queries are `text_index`'s.

use rusqlite::{params, Connection};

use crate::sqlite::text_index::{self, BlockWords, TextQuery};
use crate::sqlite::{codec, sqlite_err, StoreError};

/// Consecutive span blocks (by id) that share one full-text document: a group's
/// distinct words are gathered once (LLM traffic repeats its texts from block to
/// block), at a sixteenth of the documents; a word found sends a search to read the
/// group's blocks, each span screened on its bytes (`span_screen`).
pub(crate) const TEXT_GROUP_BLOCKS: i64 = 16;

/// The group a block belongs to.
pub(crate) fn group_of(block_id: i64) -> i64 {
    block_id.div_euclid(TEXT_GROUP_BLOCKS)
}

/// How far the background indexer (`text_indexer`) has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexState {
    /// Blocks below this id are in their group's document; the others are read span
    /// by span. The document of the group holding `indexed_end` (if it started below
    /// it) covers the group's blocks up to it.
    pub(crate) indexed_end: i64,
    /// Erasures committed so far: a document built before one is not written.
    pub(crate) erasures: i64,
}

impl IndexState {
    pub(crate) fn read(conn: &Connection) -> Result<Self, StoreError> {
        Self::select(conn).map_err(|e| sqlite_err(conn, e))
    }

    /// `read` inside the writer's transaction, whose errors are SQLite's.
    pub(crate) fn select(conn: &Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("SELECT indexed_end, erasures FROM text_index_state")?
            .query_row([], |r| {
                Ok(Self {
                    indexed_end: r.get(0)?,
                    erasures: r.get(1)?,
                })
            })
    }

    /// The blocks of `group` its document covers now.
    pub(crate) fn covered(&self, group: i64) -> std::ops::Range<i64> {
        let start = group * TEXT_GROUP_BLOCKS;
        start..self.indexed_end.clamp(start, start + TEXT_GROUP_BLOCKS)
    }
}

/// Which blocks a text search has to read.
pub(crate) struct BlockSet {
    indexed_end: i64,
    /// Groups whose documents hold every word, ascending.
    groups: Vec<i64>,
}

impl BlockSet {
    pub(crate) fn may_match(&self, block_id: i64) -> bool {
        block_id >= self.indexed_end || self.groups.binary_search(&group_of(block_id)).is_ok()
    }
}

/// The blocks (any tenant's) that may hold a match: those of the groups whose
/// documents hold every word, and those not indexed yet.
pub(crate) fn candidate_blocks(
    query: &TextQuery,
    conn: &Connection,
) -> Result<BlockSet, StoreError> {
    let err = |e| sqlite_err(conn, e);
    let state = IndexState::read(conn)?;
    let groups = conn
        .prepare_cached("SELECT rowid FROM text_groups WHERE text_groups MATCH ?1 ORDER BY rowid")
        .map_err(err)?
        .query_map([query.fts_expression()], |r| r.get(0))
        .and_then(|rows| rows.collect::<Result<Vec<i64>, _>>())
        .map_err(err)?;
    Ok(BlockSet {
        indexed_end: state.indexed_end,
        groups,
    })
}

/// Swaps a group's document `before` (the one written) for `after`.
pub(crate) fn replace_document(
    conn: &Connection,
    group: i64,
    before: &str,
    after: &str,
) -> rusqlite::Result<()> {
    text_index::replace_document(conn, "text_groups", group, before, after)
}

/// A stored span block: its id and the rowids its spans lie between.
pub(crate) struct StoredBlock {
    pub(crate) id: i64,
    first_span_rowid: i64,
    last_span_rowid: i64,
}

/// The span blocks stored with ids in `blocks` (of any tenant), ascending. Looked up
/// through `span_blocks`' ids: `block_traces` is keyed by tenant first.
pub(crate) fn stored_blocks(
    conn: &Connection,
    blocks: std::ops::Range<i64>,
) -> Result<Vec<StoredBlock>, StoreError> {
    conn.prepare_cached(
        "SELECT b.id, z.first_span_rowid, z.last_span_rowid
         FROM span_blocks AS b
         JOIN block_traces AS z ON z.tenant_id = b.tenant_id AND z.block_id = b.id
         WHERE b.id >= ?1 AND b.id < ?2 ORDER BY b.id",
    )
    .and_then(|mut s| {
        s.query_map([blocks.start, blocks.end], |r| {
            Ok(StoredBlock {
                id: r.get(0)?,
                first_span_rowid: r.get(1)?,
                last_span_rowid: r.get(2)?,
            })
        })?
        .collect::<Result<_, _>>()
    })
    .map_err(|e| sqlite_err(conn, e))
}

/// A span's name and the (offset, length) of its detail in its block.
type NamedSlot = (String, u32, u32);

/// The document of the stored `blocks` (of one group) as their rows give it now.
pub(crate) fn group_document(
    conn: &Connection,
    blocks: &[StoredBlock],
) -> Result<String, StoreError> {
    let err = |e| sqlite_err(conn, e);
    // Opened first, so that the texts can borrow from them.
    let mut opened: Vec<(Vec<u8>, Vec<NamedSlot>)> = Vec::with_capacity(blocks.len());
    for block in blocks {
        let rows: Vec<NamedSlot> = conn
            .prepare_cached(
                "SELECT name, block_offset, block_len FROM spans NOT INDEXED
                 WHERE rowid BETWEEN ?1 AND ?2 AND block_id = ?3",
            )
            .and_then(|mut s| {
                s.query_map(
                    params![block.first_span_rowid, block.last_span_rowid, block.id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )?
                .collect::<Result<_, _>>()
            })
            .map_err(err)?;
        if rows.is_empty() {
            continue;
        }
        let blob: Vec<u8> = conn
            .prepare_cached("SELECT block FROM span_blocks WHERE id = ?1")
            .and_then(|mut s| s.query_row([block.id], |r| r.get(0)))
            .map_err(err)?;
        opened.push((codec::open_block(&blob)?, rows));
    }
    let mut spans = Vec::new();
    for (block, rows) in &opened {
        for (name, offset, len) in rows {
            spans.push((name.as_str(), codec::detail_texts(block, *offset, *len)?));
        }
    }
    let mut words = BlockWords::default();
    for (name, texts) in &spans {
        words.add_texts(name, texts);
    }
    Ok(words.document())
}
