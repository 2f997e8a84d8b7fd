//! The background thread that keeps the trace-id index (`trace_index`) small: it turns
//! each tenant's newest blocks into a level-0 run once there are enough of them, and
//! merges a level's runs into one of the next level once there are `fanout` of them.
//! It reads through its own connection, one short statement at a time (inputs never
//! change until the compactor itself purges them), and hands every write to the
//! single writer as an ordinary job, in pieces of about a megabyte, so ingest never
//! waits on a merge for longer than one such piece.

use std::sync::{Arc, Weak};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use crate::sqlite::trace_index::{
    self, Chunk, Chunker, Entry, IndexWrite, Run, RunFilterBuilder, ENTRY_LEN,
};
use crate::sqlite::{sqlite_err, StoreError};

/// Shape of the index.
#[derive(Clone, Copy, Debug)]
pub struct TraceIndexConfig {
    /// Blocks a tenant's level-0 run is made of; at most this many newest blocks are
    /// in no run, and a lookup scans their trace lists.
    pub level0_blocks: usize,
    /// Runs of one level merged into one run of the next.
    pub fanout: usize,
    /// Entries past which runs are no longer merged (a merge's output would be larger).
    pub max_run_entries: i64,
}

impl Default for TraceIndexConfig {
    fn default() -> Self {
        Self {
            level0_blocks: 64,
            fanout: 4,
            max_run_entries: 4_000_000,
        }
    }
}

/// The level of runs that are merged no further.
const FINAL_LEVEL: i64 = 1_000;

/// Chunks per write job while a merge's output is being written.
const CHUNKS_PER_WRITE: usize = 64;

/// How long the compactor sleeps when it found nothing to do.
const IDLE: Duration = Duration::from_millis(200);

/// What the compactor needs of the store; `Weak`, so that it never keeps a store open.
pub(crate) trait IndexSink: Send + Sync + 'static {
    /// Commits `writes` in one transaction and waits for the ack.
    fn write(&self, writes: Vec<IndexWrite>) -> Result<(), StoreError>;
}

pub(crate) fn spawn<S: IndexSink>(
    conn: Connection,
    sink: Weak<S>,
    config: TraceIndexConfig,
) -> Result<(), StoreError> {
    crate::sqlite::background::spawn("threadline-trace-index", move || run(conn, sink, config))
}

fn run<S: IndexSink>(conn: Connection, sink: Weak<S>, config: TraceIndexConfig) {
    let mut compactor = match Compactor::start(&conn, config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "trace index compactor could not start");
            return;
        }
    };
    crate::sqlite::background::until_closed(&sink, "trace index compaction", IDLE, |sink| {
        compactor.round(&conn, sink)
    });
}

struct Compactor {
    config: TraceIndexConfig,
    next_run_id: i64,
    /// Unlisted runs whose chunks are still to be deleted.
    purge: Vec<i64>,
}

impl Compactor {
    fn start(conn: &Connection, config: TraceIndexConfig) -> Result<Self, StoreError> {
        let err = |e| sqlite_err(conn, e);
        let max = |sql: &str| -> Result<i64, StoreError> {
            conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
                .map(|v| v.unwrap_or(0))
                .map_err(err)
        };
        let next_run_id = max("SELECT MAX(run_id) FROM trace_runs")?
            .max(max("SELECT MAX(run_id) FROM trace_run_chunks")?)
            + 1;
        // Chunks of a run that never reached the catalog: a merge cut short.
        let mut stmt = conn
            .prepare(
                "SELECT DISTINCT c.run_id FROM trace_run_chunks AS c
                 WHERE NOT EXISTS (SELECT 1 FROM trace_runs AS r WHERE r.run_id = c.run_id)",
            )
            .map_err(err)?;
        let purge = stmt
            .query_map([], |r| r.get(0))
            .map_err(err)?
            .collect::<Result<Vec<i64>, _>>()
            .map_err(err)?;
        Ok(Self {
            config,
            next_run_id,
            purge,
        })
    }

    /// One step for each tenant that needs one; whether anything was done.
    fn round<S: IndexSink>(
        &mut self,
        conn: &Connection,
        sink: &Arc<S>,
    ) -> Result<bool, StoreError> {
        let mut worked = self.purge_step(conn, sink.as_ref())?;
        let tenants: Vec<i64> = {
            let mut stmt = conn
                .prepare_cached("SELECT id FROM tenants ORDER BY id")
                .map_err(|e| sqlite_err(conn, e))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(|e| sqlite_err(conn, e))?;
            rows.collect::<Result<_, _>>()
                .map_err(|e| sqlite_err(conn, e))?
        };
        for tenant_id in tenants {
            worked |= self.tenant_step(conn, sink, tenant_id)?;
        }
        Ok(worked)
    }

    /// Deletes a piece of the chunks of unlisted runs.
    fn purge_step(&mut self, conn: &Connection, sink: &dyn IndexSink) -> Result<bool, StoreError> {
        if self.purge.is_empty() {
            return Ok(false);
        }
        sink.write(vec![IndexWrite::Purge {
            run_ids: self.purge.clone(),
            limit: CHUNKS_PER_WRITE,
        }])?;
        let mut left = Vec::new();
        for run_id in std::mem::take(&mut self.purge) {
            let more: Option<i64> = conn
                .query_row(
                    "SELECT 1 FROM trace_run_chunks WHERE run_id = ?1 LIMIT 1",
                    [run_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| sqlite_err(conn, e))?;
            if more.is_some() {
                left.push(run_id);
            }
        }
        self.purge = left;
        Ok(true)
    }

    fn tenant_step<S: IndexSink>(
        &mut self,
        conn: &Connection,
        sink: &Arc<S>,
        tenant_id: i64,
    ) -> Result<bool, StoreError> {
        let runs = trace_index::runs(conn, tenant_id)?;
        if let Some(inputs) = merge_inputs(&runs, &self.config) {
            let total: i64 = inputs.iter().map(|r| r.entries).sum();
            if total > self.config.max_run_entries {
                let relabel = inputs.iter().map(|r| (r.run_id, FINAL_LEVEL)).collect();
                sink.write(vec![IndexWrite::Publish {
                    tenant_id,
                    run: None,
                    replaces: Vec::new(),
                    relabel,
                }])?;
            } else {
                let run_id = self.allocate();
                if let Err(e) = self.merge(conn, sink, tenant_id, &inputs, run_id) {
                    // Pieces already written belong to no listed run: purge them.
                    self.purge.push(run_id);
                    return Err(e);
                }
            }
            return Ok(true);
        }
        if let Some(run) = self.unfiltered(conn, tenant_id, &runs)? {
            let mut cursor = RunCursor::new(run.run_id);
            let mut filter = RunFilterBuilder::new(run.entries.max(0) as usize);
            while let Some(e) = cursor.next(conn)? {
                filter.push(&e);
            }
            sink.write(vec![IndexWrite::Filter {
                run_id: run.run_id,
                filter: filter.finish(),
            }])?;
            return Ok(true);
        }
        let covered_through = runs.iter().map(|r| r.last_block).max().unwrap_or(0);
        self.level0(conn, sink.as_ref(), tenant_id, covered_through)
    }

    /// A listed run without a filter (written before runs had them), if any.
    fn unfiltered(
        &self,
        conn: &Connection,
        tenant_id: i64,
        runs: &[Run],
    ) -> Result<Option<Run>, StoreError> {
        let run_id: Option<i64> = conn
            .prepare_cached(
                "SELECT r.run_id FROM trace_runs AS r WHERE r.tenant_id = ?1 AND NOT EXISTS
                    (SELECT 1 FROM trace_run_filters AS f WHERE f.run_id = r.run_id) LIMIT 1",
            )
            .and_then(|mut s| s.query_row([tenant_id], |r| r.get(0)).optional())
            .map_err(|e| sqlite_err(conn, e))?;
        Ok(run_id.and_then(|id| runs.iter().find(|r| r.run_id == id).cloned()))
    }

    /// A level-0 run of the oldest blocks after `covered_through`, when there are enough.
    fn level0(
        &mut self,
        conn: &Connection,
        sink: &dyn IndexSink,
        tenant_id: i64,
        covered_through: i64,
    ) -> Result<bool, StoreError> {
        let err = |e| sqlite_err(conn, e);
        let mut stmt = conn
            .prepare_cached(
                "SELECT block_id, trace_ids FROM block_traces
                 WHERE tenant_id = ?1 AND block_id > ?2 ORDER BY block_id LIMIT ?3",
            )
            .map_err(err)?;
        let blocks = stmt
            .query_map(
                params![tenant_id, covered_through, self.config.level0_blocks as i64],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)),
            )
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        if blocks.len() < self.config.level0_blocks {
            return Ok(false);
        }
        let mut entries = Vec::new();
        for (block_id, ids) in &blocks {
            for id in ids.chunks_exact(16) {
                let mut trace_id = [0u8; 16];
                trace_id.copy_from_slice(id);
                entries.push(Entry {
                    trace_id,
                    block_id: *block_id as u64,
                });
            }
        }
        entries.sort_unstable();
        let mut chunker = Chunker::default();
        let mut filter = RunFilterBuilder::new(entries.len());
        for e in &entries {
            chunker.push(*e);
            filter.push(e);
        }
        let run = Run {
            run_id: self.allocate(),
            level: 0,
            first_block: blocks[0].0,
            last_block: blocks[blocks.len() - 1].0,
            entries: entries.len() as i64,
        };
        sink.write(vec![
            IndexWrite::Chunks {
                run_id: run.run_id,
                chunks: chunker.finish(),
            },
            IndexWrite::Publish {
                tenant_id,
                run: Some((run, filter.finish())),
                replaces: Vec::new(),
                relabel: Vec::new(),
            },
        ])?;
        Ok(true)
    }

    /// Merges `inputs` into run `run_id` of the next level, then purges them.
    fn merge<S: IndexSink>(
        &mut self,
        conn: &Connection,
        sink: &Arc<S>,
        tenant_id: i64,
        inputs: &[Run],
        run_id: i64,
    ) -> Result<(), StoreError> {
        let mut cursors = inputs
            .iter()
            .map(|r| RunCursor::new(r.run_id))
            .collect::<Vec<_>>();
        let mut heads = Vec::with_capacity(cursors.len());
        for c in &mut cursors {
            heads.push(c.next(conn)?);
        }
        let mut chunker = Chunker::default();
        let mut filter =
            RunFilterBuilder::new(inputs.iter().map(|r| r.entries.max(0) as usize).sum());
        let mut entries = 0i64;
        while let Some(i) = (0..heads.len())
            .filter(|&i| heads[i].is_some())
            .min_by_key(|&i| heads[i])
        {
            if let Some(e) = heads[i] {
                chunker.push(e);
                filter.push(&e);
                entries += 1;
            }
            heads[i] = cursors[i].next(conn)?;
            if entries % (CHUNKS_PER_WRITE * trace_index::CHUNK_ENTRIES) as i64 == 0 {
                let done = chunker.take_done();
                if !done.is_empty() {
                    sink.write(vec![IndexWrite::Chunks {
                        run_id,
                        chunks: done,
                    }])?;
                }
                if Arc::strong_count(sink) == 1 {
                    // The store is closing: the unlisted chunks are purged at next start.
                    return Err(StoreError::writer_stopped());
                }
            }
        }
        let level = inputs.iter().map(|r| r.level).max().unwrap_or(0) + 1;
        let run = Run {
            run_id,
            level,
            first_block: inputs.iter().map(|r| r.first_block).min().unwrap_or(0),
            last_block: inputs.iter().map(|r| r.last_block).max().unwrap_or(0),
            entries,
        };
        sink.write(vec![
            IndexWrite::Chunks {
                run_id,
                chunks: chunker.finish(),
            },
            IndexWrite::Publish {
                tenant_id,
                run: Some((run, filter.finish())),
                replaces: inputs.iter().map(|r| r.run_id).collect(),
                relabel: Vec::new(),
            },
        ])?;
        self.purge.extend(inputs.iter().map(|r| r.run_id));
        Ok(())
    }

    fn allocate(&mut self) -> i64 {
        self.next_run_id += 1;
        self.next_run_id - 1
    }
}

/// The oldest `fanout` runs of the lowest level that has that many (final runs aside).
fn merge_inputs(runs: &[Run], config: &TraceIndexConfig) -> Option<Vec<Run>> {
    let mut levels: Vec<i64> = runs
        .iter()
        .map(|r| r.level)
        .filter(|l| *l < FINAL_LEVEL)
        .collect();
    levels.sort_unstable();
    levels.dedup();
    levels.into_iter().find_map(|level| {
        let of_level: Vec<Run> = runs.iter().filter(|r| r.level == level).cloned().collect();
        (of_level.len() >= config.fanout.max(2))
            .then(|| of_level.into_iter().take(config.fanout.max(2)).collect())
    })
}

/// Reads one run's entries in order, a few chunks per statement.
struct RunCursor {
    run_id: i64,
    after: Option<[u8; 16]>,
    chunks: std::collections::VecDeque<Chunk>,
    pos: usize,
    exhausted: bool,
}

impl RunCursor {
    fn new(run_id: i64) -> Self {
        Self {
            run_id,
            after: None,
            chunks: Default::default(),
            pos: 0,
            exhausted: false,
        }
    }

    fn next(&mut self, conn: &Connection) -> Result<Option<Entry>, StoreError> {
        loop {
            if let Some(chunk) = self.chunks.front() {
                if self.pos * ENTRY_LEN < chunk.entries.len() {
                    let e = Entry::decode(&chunk.entries[self.pos * ENTRY_LEN..]);
                    self.pos += 1;
                    return Ok(Some(e));
                }
                self.chunks.pop_front();
                self.pos = 0;
                continue;
            }
            if self.exhausted {
                return Ok(None);
            }
            self.fill(conn)?;
        }
    }

    fn fill(&mut self, conn: &Connection) -> Result<(), StoreError> {
        let err = |e| sqlite_err(conn, e);
        let mut stmt = conn
            .prepare_cached(
                "SELECT first_id, entries FROM trace_run_chunks
                 WHERE run_id = ?1 AND first_id > ?2 ORDER BY first_id LIMIT 16",
            )
            .map_err(err)?;
        let after: &[u8] = self.after.as_ref().map_or(&[], |a| &a[..]);
        let rows = stmt
            .query_map(params![self.run_id, after], |r| {
                let first: Vec<u8> = r.get(0)?;
                let mut first_id = [0u8; 16];
                let n = first.len().min(16);
                first_id[..n].copy_from_slice(&first[..n]);
                Ok(Chunk {
                    first_id,
                    entries: r.get(1)?,
                })
            })
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        if rows.is_empty() {
            self.exhausted = true;
        }
        self.after = rows.last().map(|c| c.first_id).or(self.after);
        self.chunks.extend(rows);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(run_id: i64, level: i64, entries: i64) -> Run {
        Run {
            run_id,
            level,
            first_block: run_id * 10,
            last_block: run_id * 10 + 9,
            entries,
        }
    }

    #[test]
    fn merges_the_oldest_runs_of_the_lowest_full_level() {
        let config = TraceIndexConfig {
            level0_blocks: 4,
            fanout: 2,
            max_run_entries: 100,
        };
        assert_eq!(merge_inputs(&[run(1, 1, 10), run(2, 0, 5)], &config), None);
        let runs = [
            run(1, 1, 10),
            run(2, 1, 10),
            run(3, 0, 5),
            run(4, 0, 5),
            run(5, 0, 5),
        ];
        let picked = merge_inputs(&runs, &config).unwrap();
        assert_eq!(picked.iter().map(|r| r.run_id).collect::<Vec<_>>(), [3, 4]);
        let finals = [
            run(1, FINAL_LEVEL, 90),
            run(2, FINAL_LEVEL, 90),
            run(3, 0, 5),
        ];
        assert_eq!(merge_inputs(&finals, &config), None);
    }
}
