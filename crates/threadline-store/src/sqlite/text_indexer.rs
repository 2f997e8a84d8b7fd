//! The background thread that builds the full-text index (`text_index`). Once a group
//! of `TEXT_GROUP_BLOCKS` blocks is complete — or the newest blocks have been left
//! alone for `TextIndexConfig::idle` — it gathers the distinct words of the group's
//! blocks, as one snapshot of its own connection has them, into the group's document,
//! and hands it to the single writer as an ordinary job. The writer writes it unless an
//! erasure was committed after the snapshot (the document could hold erased words; it
//! is built again from what is left).
//!
//! The texts of each block come from the writer, which hands them over once the block
//! is committed (`BlockFeed`; ingest copies them out of the spans as it encodes the
//! block), so that the indexer does not read back, decompress and decode what ingest
//! has just encoded: that was two thirds of its work. A held block is used only while
//! no erasure has been committed since it was (`CommittedBlock::erasures`); otherwise,
//! and for blocks it missed (a full hand-over, a restart), the indexer reads the store.
//!
//! So ingest neither gathers words nor writes the index, and a group's words are
//! gathered once for its 16 blocks. The thread keeps the default CPU priority: at nice
//! 10 it fell a quarter of the spans behind at full ingest speed (`scripts/bench-ingest`),
//! for no gain in acks, and searches over the blocks it has not reached read them span
//! by span (correct, slower); at the default it stays within a few dozen blocks.
//! `SqliteStore::text_index_backlog` says how far behind it is.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Weak;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::sqlite::text_groups::{self, group_of, IndexState, TEXT_GROUP_BLOCKS};
use crate::sqlite::text_index::{BlockTexts, BlockWords};
use crate::sqlite::{sqlite_err, StoreError};

/// When the indexer takes blocks that do not yet fill a group.
#[derive(Clone, Copy, Debug)]
pub struct TextIndexConfig {
    /// How long the newest block must stay the newest before the blocks of an
    /// incomplete group are indexed (and the group's document rebuilt as it grows).
    pub idle: Duration,
}

impl Default for TextIndexConfig {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(1),
        }
    }
}

/// How long the indexer sleeps when it found nothing to do: short enough that the
/// blocks handed over meanwhile fit in `HELD_BLOCKS` at full ingest speed (≈ 1,500
/// blocks/s on 2 cores: 15 a sleep). At 50 ms the hand-over overflowed from about
/// 1,300 blocks/s and half the documents were built from blocks read back and
/// decompressed.
const SLEEP: Duration = Duration::from_millis(10);

/// Blocks the hand-over queues, and the indexer holds, at most (four groups; ≈ 100
/// spans each, their texts copied out).
const HELD_BLOCKS: usize = 4 * TEXT_GROUP_BLOCKS as usize;

/// A committed span block's searchable texts, as the writer hands them over.
pub(crate) struct CommittedBlock {
    pub(crate) block_id: i64,
    /// `text_index_state.erasures` when the block was inserted: the texts are the
    /// block's stored ones as long as no erasure has been committed since.
    pub(crate) erasures: i64,
    pub(crate) texts: BlockTexts,
}

/// The writer's end of the hand-over. It never waits: a block the indexer has no room
/// for is read back from the store.
pub(crate) struct BlockFeed(SyncSender<CommittedBlock>);

impl BlockFeed {
    pub(crate) fn offer(&self, block: CommittedBlock) {
        // Full or gone: the indexer reads the block from the store, if it runs at all.
        let _ = self.0.try_send(block);
    }
}

/// The hand-over of committed blocks from the writer to the indexer.
pub(crate) fn feed() -> (BlockFeed, Receiver<CommittedBlock>) {
    let (sender, receiver) = mpsc::sync_channel(HELD_BLOCKS);
    (BlockFeed(sender), receiver)
}

/// One group's document, replacing the one it had.
pub(crate) struct TextWrite {
    group: i64,
    /// The index as the document was built against.
    from: IndexState,
    /// `indexed_end` once written.
    to_end: i64,
    before: String,
    after: String,
}

impl TextWrite {
    pub(crate) fn bytes(&self) -> usize {
        64 + self.before.len() + self.after.len()
    }

    #[cfg(test)]
    pub(crate) fn document(&self) -> &str {
        &self.after
    }
}

/// Writes the document in the writer's transaction; false (nothing written) when the
/// index is no longer as the document was built against (an erasure came first).
pub(crate) fn apply(tx: &Connection, write: &TextWrite) -> rusqlite::Result<bool> {
    if IndexState::select(tx)? != write.from {
        return Ok(false);
    }
    text_groups::replace_document(tx, write.group, &write.before, &write.after)?;
    tx.prepare_cached("UPDATE text_index_state SET indexed_end = ?1")?
        .execute([write.to_end])?;
    Ok(true)
}

/// What the indexer needs of the store; `Weak`, so that it never keeps a store open.
pub(crate) trait TextSink: Send + Sync + 'static {
    /// Commits the document and waits for the ack; whether it was written.
    fn write_text(&self, write: TextWrite) -> Result<bool, StoreError>;
}

pub(crate) fn spawn<S: TextSink>(
    conn: Connection,
    sink: Weak<S>,
    config: TextIndexConfig,
    offered: Receiver<CommittedBlock>,
) -> Result<(), StoreError> {
    crate::sqlite::background::spawn("threadline-text-index", move || {
        run(conn, sink, config, offered)
    })
}

fn run<S: TextSink>(
    conn: Connection,
    sink: Weak<S>,
    config: TextIndexConfig,
    offered: Receiver<CommittedBlock>,
) {
    let mut indexer = Indexer::new(config, offered);
    crate::sqlite::background::until_closed(&sink, "full-text indexing", SLEEP, |sink| {
        indexer.round(&conn, sink.as_ref())
    });
}

struct Indexer {
    config: TextIndexConfig,
    /// The newest block seen, and since when it is the newest.
    newest: Option<(i64, Instant)>,
    offered: Receiver<CommittedBlock>,
    /// Blocks handed over and not yet past, by id.
    held: BTreeMap<i64, CommittedBlock>,
}

impl Indexer {
    fn new(config: TextIndexConfig, offered: Receiver<CommittedBlock>) -> Self {
        Self {
            config,
            newest: None,
            offered,
            held: BTreeMap::new(),
        }
    }

    /// Indexes the next group, or the newest blocks once idle; false when there was
    /// nothing to do yet.
    fn round(&mut self, conn: &Connection, sink: &dyn TextSink) -> Result<bool, StoreError> {
        // One read transaction: the blocks and the index state of one snapshot.
        conn.execute_batch("BEGIN")
            .map_err(|e| sqlite_err(conn, e))?;
        let built = self.next_write(conn);
        conn.execute_batch("COMMIT")
            .map_err(|e| sqlite_err(conn, e))?;
        let Some(write) = built? else {
            return Ok(false);
        };
        // Not written (an erasure came first): built again on the next round.
        sink.write_text(write)?;
        Ok(true)
    }

    fn next_write(&mut self, conn: &Connection) -> Result<Option<TextWrite>, StoreError> {
        let state = IndexState::read(conn)?;
        let newest: i64 = conn
            .prepare_cached("SELECT coalesce(max(id), 0) FROM span_blocks")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| sqlite_err(conn, e))?;
        let now = Instant::now();
        let since = match self.newest {
            Some((block, since)) if block == newest => since,
            _ => {
                self.newest = Some((newest, now));
                now
            }
        };
        self.take_offered(state);
        if newest < state.indexed_end {
            return Ok(None);
        }
        let group = group_of(state.indexed_end);
        let group_start = group * TEXT_GROUP_BLOCKS;
        let group_end = group_start + TEXT_GROUP_BLOCKS;
        let to_end = if newest >= group_end - 1 {
            group_end
        } else if now.duration_since(since) >= self.config.idle {
            newest + 1
        } else {
            return Ok(None);
        };
        let covered = state.covered(group);
        let before = if covered.is_empty() {
            String::new()
        } else {
            self.document(conn, state, covered)?
        };
        let after = self.document(conn, state, group_start..to_end)?;
        Ok(Some(TextWrite {
            group,
            from: state,
            to_end,
            before,
            after,
        }))
    }

    /// Takes the blocks handed over, keeping those still ahead of the index (from the
    /// group it is in) that no erasure has changed since (blocks committed after the
    /// snapshot may count more erasures), the oldest first when there are too many.
    fn take_offered(&mut self, state: IndexState) {
        let floor = group_of(state.indexed_end) * TEXT_GROUP_BLOCKS;
        for block in self.offered.try_iter() {
            self.held.insert(block.block_id, block);
        }
        self.held
            .retain(|id, block| *id >= floor && block.erasures >= state.erasures);
        while self.held.len() > HELD_BLOCKS {
            self.held.pop_last();
        }
    }

    /// The document of `blocks` (of one group) as the snapshot `state` belongs to has
    /// them: from the blocks held when all of them are and no erasure came after any,
    /// else from the store.
    fn document(
        &self,
        conn: &Connection,
        state: IndexState,
        blocks: std::ops::Range<i64>,
    ) -> Result<String, StoreError> {
        let stored = text_groups::stored_blocks(conn, blocks)?;
        let held: Option<Vec<&CommittedBlock>> = stored
            .iter()
            .map(|stored| {
                self.held
                    .get(&stored.id)
                    .filter(|block| block.erasures == state.erasures)
            })
            .collect();
        let Some(held) = held else {
            return text_groups::group_document(conn, &stored);
        };
        let mut words = BlockWords::default();
        for text in held.iter().flat_map(|block| block.texts.iter()) {
            words.add_text(text);
        }
        Ok(words.document())
    }
}

/// The write the indexer would hand over now, with no wait for idle blocks, from the
/// blocks `offered` and the store (tests).
#[cfg(test)]
pub(crate) fn build_now(
    conn: &Connection,
    offered: Receiver<CommittedBlock>,
) -> Result<Option<TextWrite>, StoreError> {
    Indexer::new(
        TextIndexConfig {
            idle: Duration::ZERO,
        },
        offered,
    )
    .next_write(conn)
}
