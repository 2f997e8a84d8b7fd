//! The trace-id index: per tenant, a few sorted runs of (trace id, block id) entries,
//! built and merged in the background (`trace_compactor`) from the blocks' own sorted
//! trace lists, the way a log-structured merge tree is. Ingest writes nothing here: a
//! commit only appends its block's trace list to `block_traces`, as before. A lookup
//! seeks once per run (a run's entries are cut into chunks keyed by their first trace
//! id, and one trace's entries never straddle two chunks) and then scans the trace
//! lists of the few newest blocks no run covers yet. Runs are merged four at a time
//! into the next level, up to `MAX_RUN_ENTRIES`, so the number of runs grows with the
//! logarithm of the store, then by one per `MAX_RUN_ENTRIES` traces.
//!
//! Each run has a Bloom filter of its trace ids (`trace_run_filters`, 10 bits a trace,
//! written with its catalog row), which readers keep in memory once read (`RunFilters`,
//! ≈ 1.25 bytes a stored trace): a lookup seeks only the runs whose filter may hold
//! the id — about one for a known id, about none for an unknown one — instead of
//! every run, so its page reads do not grow with the number of runs. (A cold page is
//! a disk read: the runs' chunks were most of a first lookup's reads.) Runs listed
//! before the filters existed get theirs from the compactor, and are sought until then.
//!
//! Tables: `trace_runs` (the catalog: tenant, level, the block range it covers, its
//! entry count), `trace_run_chunks` (run, first trace id, entries) and
//! `trace_run_filters` (run, filter). A run exists
//! for readers once its catalog row does: its chunks are written first, in pieces, and
//! a merge's inputs leave the catalog in the transaction that adds their output, their
//! chunks being purged afterwards. Chunks without a catalog row are leftovers of a
//! merge cut short, purged when the compactor starts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension};
use threadline_model::TraceId;

use crate::sqlite::bloom::{self, splitmix, Bloom};
use crate::sqlite::{sqlite_err, StoreError};

/// Bytes of one entry: the trace id, then the block id big-endian (so entries sort
/// bytewise by trace id, then block).
pub(crate) const ENTRY_LEN: usize = TraceId::LEN + 8;

/// Entries a chunk is cut after (more only when one trace's entries go on).
pub(crate) const CHUNK_ENTRIES: usize = 256;

/// One (trace id, block id) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) trace_id: [u8; 16],
    pub(crate) block_id: u64,
}

impl Entry {
    pub(crate) fn decode(bytes: &[u8]) -> Self {
        let mut trace_id = [0u8; 16];
        trace_id.copy_from_slice(&bytes[..TraceId::LEN]);
        let mut block = [0u8; 8];
        block.copy_from_slice(&bytes[TraceId::LEN..ENTRY_LEN]);
        Self {
            trace_id,
            block_id: u64::from_be_bytes(block),
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.trace_id);
        out.extend_from_slice(&self.block_id.to_be_bytes());
    }
}

/// A trace id's hash in the runs' filters (fixed forever: filters are stored). Both
/// halves count: some tracers leave the high half zero.
pub(crate) fn id_hash(trace_id: &[u8; 16]) -> u64 {
    let half = |b: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        u64::from_le_bytes(w)
    };
    splitmix(half(&trace_id[..8]) ^ splitmix(half(&trace_id[8..])))
}

/// The filter of a run of at most `entries` entries, filled as they come.
pub(crate) struct RunFilterBuilder {
    bloom: Bloom,
    last: Option<[u8; 16]>,
}

impl RunFilterBuilder {
    pub(crate) fn new(entries: usize) -> Self {
        Self {
            bloom: Bloom::with_capacity(entries),
            last: None,
        }
    }

    /// Records an entry's trace (entries come sorted: a trace's entries are hashed once).
    pub(crate) fn push(&mut self, entry: &Entry) {
        if self.last != Some(entry.trace_id) {
            self.bloom.insert(id_hash(&entry.trace_id));
            self.last = Some(entry.trace_id);
        }
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        self.bloom.into_bytes()
    }
}

/// Run filters read so far, shared by the store's readers. A run's filter never changes,
/// so it is read once per process; `None` is kept for a run that has none yet.
#[derive(Default)]
pub(crate) struct RunFilters {
    loaded: Mutex<HashMap<i64, RunFilter>>,
}

struct RunFilter {
    tenant_id: i64,
    filter: Option<Arc<[u8]>>,
}

impl RunFilters {
    /// Whether `run` may hold a trace hashed to `hash`: false only when its filter
    /// rules it out.
    fn may_hold(
        &self,
        conn: &Connection,
        tenant_id: i64,
        run: &Run,
        listed: &[Run],
        hash: u64,
    ) -> Result<bool, StoreError> {
        let cached = self
            .loaded
            .lock()
            .ok()
            .and_then(|m| m.get(&run.run_id).map(|f| f.filter.clone()));
        let filter = match cached {
            // A run without a filter is asked again: the compactor may have written one.
            Some(Some(filter)) => Some(filter),
            _ => {
                let stored: Option<Vec<u8>> = conn
                    .prepare_cached("SELECT filter FROM trace_run_filters WHERE run_id = ?1")
                    .and_then(|mut s| s.query_row([run.run_id], |r| r.get(0)).optional())
                    .map_err(|e| sqlite_err(conn, e))?;
                let filter: Option<Arc<[u8]>> = stored.map(Arc::from);
                if let Ok(mut loaded) = self.loaded.lock() {
                    // Runs merged away since are forgotten (their ids never come back).
                    loaded.retain(|id, f| {
                        f.tenant_id != tenant_id || listed.iter().any(|r| r.run_id == *id)
                    });
                    loaded.insert(
                        run.run_id,
                        RunFilter {
                            tenant_id,
                            filter: filter.clone(),
                        },
                    );
                }
                filter
            }
        };
        Ok(filter.is_none_or(|f| bloom::may_contain(&f, hash)))
    }
}

/// A run's chunk: its first trace id and its entries, encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) first_id: [u8; 16],
    pub(crate) entries: Vec<u8>,
}

/// Cuts a sorted stream of entries into chunks.
#[derive(Default)]
pub(crate) struct Chunker {
    current: Vec<u8>,
    done: Vec<Chunk>,
}

impl Chunker {
    pub(crate) fn push(&mut self, entry: Entry) {
        let len = self.current.len() / ENTRY_LEN;
        if len >= CHUNK_ENTRIES {
            let last = Entry::decode(&self.current[(len - 1) * ENTRY_LEN..]);
            if last.trace_id != entry.trace_id {
                self.cut();
            }
        }
        entry.encode_into(&mut self.current);
    }

    fn cut(&mut self) {
        if self.current.is_empty() {
            return;
        }
        let mut first_id = [0u8; 16];
        first_id.copy_from_slice(&self.current[..TraceId::LEN]);
        self.done.push(Chunk {
            first_id,
            entries: std::mem::take(&mut self.current),
        });
    }

    /// Chunks completed so far (the one being filled stays).
    pub(crate) fn take_done(&mut self) -> Vec<Chunk> {
        std::mem::take(&mut self.done)
    }

    /// Every remaining chunk, the partial one included.
    pub(crate) fn finish(mut self) -> Vec<Chunk> {
        self.cut();
        self.done
    }
}

/// The block ids of `id`'s entries in one chunk.
fn blocks_in_chunk(entries: &[u8], id: &TraceId, out: &mut Vec<u64>) {
    let count = entries.len() / ENTRY_LEN;
    let key = |i: usize| &entries[i * ENTRY_LEN..i * ENTRY_LEN + TraceId::LEN];
    // First entry whose trace id is not below `id`.
    let (mut lo, mut hi) = (0usize, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if key(mid) < &id.0[..] {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    while lo < count && key(lo) == &id.0[..] {
        out.push(Entry::decode(&entries[lo * ENTRY_LEN..]).block_id);
        lo += 1;
    }
}

/// A run in the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) run_id: i64,
    pub(crate) level: i64,
    pub(crate) first_block: i64,
    pub(crate) last_block: i64,
    pub(crate) entries: i64,
}

/// The tenant's runs, oldest blocks first.
pub(crate) fn runs(conn: &Connection, tenant_id: i64) -> Result<Vec<Run>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT run_id, level, first_block, last_block, entries FROM trace_runs
             WHERE tenant_id = ?1 ORDER BY last_block",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map([tenant_id], |r| {
            Ok(Run {
                run_id: r.get(0)?,
                level: r.get(1)?,
                first_block: r.get(2)?,
                last_block: r.get(3)?,
                entries: r.get(4)?,
            })
        })
        .map_err(|e| sqlite_err(conn, e))?;
    rows.collect::<Result<_, _>>()
        .map_err(|e| sqlite_err(conn, e))
}

/// The blocks that may hold spans of each of `ids`, per the tenant's runs, and the
/// last block the runs cover (blocks after it are in no run yet).
pub(crate) fn indexed_blocks(
    conn: &Connection,
    filters: &RunFilters,
    tenant_id: i64,
    ids: &[TraceId],
) -> Result<(HashMap<TraceId, Vec<u64>>, i64), StoreError> {
    let runs = runs(conn, tenant_id)?;
    let covered_through = runs.iter().map(|r| r.last_block).max().unwrap_or(0);
    let mut stmt = conn
        .prepare_cached(
            "SELECT entries FROM trace_run_chunks
             WHERE run_id = ?1 AND first_id <= ?2 ORDER BY first_id DESC LIMIT 1",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let mut found: HashMap<TraceId, Vec<u64>> = HashMap::new();
    for id in ids {
        let mut blocks = Vec::new();
        let hash = id_hash(&id.0);
        for run in &runs {
            if !filters.may_hold(conn, tenant_id, run, &runs, hash)? {
                continue;
            }
            let chunk: Option<Vec<u8>> = stmt
                .query_row(params![run.run_id, &id.0[..]], |r| r.get(0))
                .optional()
                .map_err(|e| sqlite_err(conn, e))?;
            if let Some(entries) = chunk {
                blocks_in_chunk(&entries, id, &mut blocks);
            }
        }
        if !blocks.is_empty() {
            found.insert(*id, blocks);
        }
    }
    Ok((found, covered_through))
}

/// A write the compactor hands the writer: chunks of a run being built, the catalog
/// change that publishes it, or chunks of unlisted runs to purge.
#[derive(Debug)]
pub(crate) enum IndexWrite {
    Chunks {
        run_id: i64,
        chunks: Vec<Chunk>,
    },
    /// Lists `run` with its filter and unlists `replaces` (a merge's inputs, their
    /// filters deleted), or relabels runs in place.
    Publish {
        tenant_id: i64,
        run: Option<(Run, Vec<u8>)>,
        replaces: Vec<i64>,
        relabel: Vec<(i64, i64)>,
    },
    /// The filter of a listed run that had none (written before filters existed);
    /// dropped if the run is no longer listed.
    Filter {
        run_id: i64,
        filter: Vec<u8>,
    },
    /// Deletes up to `limit` chunks of each of `run_ids` (which no catalog row lists).
    Purge {
        run_ids: Vec<i64>,
        limit: usize,
    },
}

impl IndexWrite {
    pub(crate) fn bytes(&self) -> usize {
        match self {
            IndexWrite::Chunks { chunks, .. } => {
                chunks.iter().map(|c| c.entries.len() + 64).sum::<usize>()
            }
            IndexWrite::Publish { run, .. } => 256 + run.as_ref().map_or(0, |(_, f)| f.len()),
            IndexWrite::Filter { filter, .. } => 64 + filter.len(),
            IndexWrite::Purge { .. } => 256,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        match self {
            IndexWrite::Chunks { chunks, .. } => chunks.len(),
            IndexWrite::Publish { replaces, .. } => 2 + 2 * replaces.len(),
            IndexWrite::Filter { .. } => 1,
            IndexWrite::Purge { run_ids, limit } => run_ids.len() * limit,
        }
    }
}

/// Applies one index write inside the writer's transaction.
pub(crate) fn apply(tx: &Connection, write: &IndexWrite) -> rusqlite::Result<()> {
    match write {
        IndexWrite::Chunks { run_id, chunks } => {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO trace_run_chunks (run_id, first_id, entries) VALUES (?1, ?2, ?3)",
            )?;
            for chunk in chunks {
                stmt.execute(params![run_id, &chunk.first_id[..], chunk.entries])?;
            }
            Ok(())
        }
        IndexWrite::Publish {
            tenant_id,
            run,
            replaces,
            relabel,
        } => {
            let mut unlist = tx.prepare_cached("DELETE FROM trace_runs WHERE run_id = ?1")?;
            let mut unfilter =
                tx.prepare_cached("DELETE FROM trace_run_filters WHERE run_id = ?1")?;
            for id in replaces {
                unlist.execute([id])?;
                unfilter.execute([id])?;
            }
            let mut level =
                tx.prepare_cached("UPDATE trace_runs SET level = ?2 WHERE run_id = ?1")?;
            for (id, to) in relabel {
                level.execute([id, to])?;
            }
            if let Some((run, filter)) = run {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO trace_run_filters (run_id, filter) VALUES (?1, ?2)",
                )?
                .execute(params![run.run_id, filter])?;
                tx.prepare_cached(
                    "INSERT INTO trace_runs (run_id, tenant_id, level, first_block, last_block,
                        entries) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    run.run_id,
                    tenant_id,
                    run.level,
                    run.first_block,
                    run.last_block,
                    run.entries
                ])?;
            }
            Ok(())
        }
        IndexWrite::Filter { run_id, filter } => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO trace_run_filters (run_id, filter)
                 SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM trace_runs WHERE run_id = ?1)",
            )?
            .execute(params![run_id, filter])?;
            Ok(())
        }
        IndexWrite::Purge { run_ids, limit } => {
            let mut stmt = tx.prepare_cached(
                "DELETE FROM trace_run_chunks WHERE rowid IN
                    (SELECT rowid FROM trace_run_chunks WHERE run_id = ?1 LIMIT ?2)",
            )?;
            for id in run_ids {
                stmt.execute(params![id, *limit as i64])?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u8, block: u64) -> Entry {
        Entry {
            trace_id: [id; 16],
            block_id: block,
        }
    }

    #[test]
    fn chunks_never_split_a_trace_and_are_searched_exactly() {
        let mut chunker = Chunker::default();
        let mut entries = Vec::new();
        for i in 0..(CHUNK_ENTRIES as u64 - 1) {
            entries.push(Entry {
                trace_id: {
                    let mut t = [0u8; 16];
                    t[8..].copy_from_slice(&i.to_be_bytes());
                    t
                },
                block_id: i,
            });
        }
        // One trace in 5 blocks straddles the cut at CHUNK_ENTRIES entries.
        for b in 0..5 {
            entries.push(entry(0x80, 1000 + b));
        }
        entries.push(entry(0x90, 7));
        for e in &entries {
            chunker.push(*e);
        }
        let chunks = chunker.finish();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].entries.len(), (CHUNK_ENTRIES + 4) * ENTRY_LEN);
        assert_eq!(chunks[1].first_id, [0x90; 16]);
        let mut blocks = Vec::new();
        blocks_in_chunk(&chunks[0].entries, &TraceId([0x80; 16]), &mut blocks);
        assert_eq!(blocks, vec![1000, 1001, 1002, 1003, 1004]);
        blocks.clear();
        blocks_in_chunk(&chunks[0].entries, &TraceId([0x7f; 16]), &mut blocks);
        blocks_in_chunk(&chunks[1].entries, &TraceId([0x91; 16]), &mut blocks);
        assert!(blocks.is_empty());
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(
                Entry::decode(
                    &chunks[i / (CHUNK_ENTRIES + 4)].entries
                        [(i % (CHUNK_ENTRIES + 4)) * ENTRY_LEN..]
                ),
                *e
            );
        }
    }
}
