//! Rollups in SQLite. The writer keeps the cells of recent commits in memory (the
//! ledger) and merges them into the stored cells at most once a second, or when a
//! reader asks for a flush; the same transaction records the last detail block the
//! rollups cover. At open, blocks committed after that mark (a crash between flushes,
//! or a database from before rollups existed) are replayed, so acknowledged spans are
//! never missing from rollups.

use foldhash::HashMap;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};
use threadline_analysis::{RollupCell, Rollups, SeriesKey};
use threadline_model::{SpanDetail, SpanId, SpanKind, SpanRecord, TraceId};

use crate::sqlite::{codec, sqlite_err, StoreError};

/// How long cells may wait in memory before the writer merges them into the store.
const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Cells held in memory that force a flush whatever the time.
const MAX_PENDING_CELLS: usize = 50_000;
const MARK: &str = "rollups_through_block";
/// Blocks replayed per transaction at open.
const REPLAY_CHUNK: i64 = 2_000;

/// The writer's rollup state between flushes.
/// What one transaction's span batches add to the aggregates, by tenant row id.
#[derive(Default)]
pub(crate) struct Staged {
    pub(crate) rollups: HashMap<i64, Rollups>,
    pub(crate) hops: HashMap<i64, threadline_analysis::hops::Hops>,
}

#[derive(Default)]
pub(crate) struct RollupLedger {
    /// Tenant row id → cells committed since the last flush.
    pending: HashMap<i64, Rollups>,
    /// Tenant row id → service hops committed since the last flush (merged into
    /// `service_hops` with the cells: a hop's row is rewritten once a flush, not once a
    /// batch). Derived from spans of several requests, they are not replayed: a crash
    /// loses at most the last second of them.
    pending_hops: HashMap<i64, threadline_analysis::hops::Hops>,
    pending_cells: usize,
    /// (tenant row id, series) → series row id.
    series: HashMap<(i64, SeriesKey), i64>,
    last_flush: Option<Instant>,
    /// The newest detail block committed.
    pub(crate) last_block: i64,
    /// The block the stored mark names (as far as this writer knows).
    marked_block: i64,
    /// A reader asked for the cells to be in the store.
    pub(crate) forced: bool,
}

impl RollupLedger {
    /// Whether this commit should flush: never when there is nothing to write (no
    /// cells, the mark already at `last_block`), so an idle store is not written to
    /// by the readers' flush requests; else when asked, when many cells wait, or once
    /// a second (which also moves the mark past blocks without LLM requests, keeping
    /// the replay at open short).
    pub(crate) fn due(&self, staged_cells: usize, last_block: i64) -> bool {
        let hop_cells: usize = self.pending_hops.values().map(|h| h.cells.len()).sum();
        let cells = self.pending_cells + staged_cells + hop_cells;
        if cells == 0 && last_block <= self.marked_block {
            return false;
        }
        self.forced
            || cells >= MAX_PENDING_CELLS
            || self
                .last_flush
                .is_none_or(|t| t.elapsed() >= FLUSH_INTERVAL)
    }

    /// Whether cells or hops wait in memory for the next flush (what readers must not
    /// miss).
    pub(crate) fn holds_unflushed(&self) -> bool {
        self.pending_cells > 0
            || self.pending.values().any(|r| !r.is_empty())
            || self.pending_hops.values().any(|h| !h.cells.is_empty())
    }

    /// After a commit: what it staged is now pending, or everything was flushed.
    pub(crate) fn committed(&mut self, staged: Staged, flushed: bool) {
        // A request for a flush is answered by this commit either way: flushed, or
        // there was nothing to write.
        self.forced = false;
        if flushed {
            self.pending.clear();
            self.pending_hops.clear();
            self.pending_cells = 0;
            self.last_flush = Some(Instant::now());
            self.marked_block = self.last_block;
            return;
        }
        for (tenant, rollups) in staged.rollups {
            self.pending.entry(tenant).or_default().absorb(rollups);
        }
        for (tenant, hops) in staged.hops {
            self.pending_hops.entry(tenant).or_default().absorb(hops);
        }
        self.pending_cells = self.pending.values().map(Rollups::len).sum();
    }

    /// After an erasure: cells not stored yet lose the subject's id as the stored ones
    /// did, and series ids are looked up again (the erasure rewrote or merged series).
    /// How many cells changed.
    pub(crate) fn erased(&mut self, tenant_id: i64, subject: &str) -> usize {
        self.series.clear();
        self.pending
            .get_mut(&tenant_id)
            .map_or(0, |r| r.redact(subject, crate::sqlite::ERASED))
    }

    /// After a failed commit: series rows it inserted are gone.
    pub(crate) fn rolled_back(&mut self) {
        self.series.clear();
    }

    /// Merges the pending and the staged cells into the store and moves the mark to
    /// `through_block`.
    pub(crate) fn flush(
        &mut self,
        tx: &Connection,
        staged: &Staged,
        through_block: i64,
    ) -> rusqlite::Result<()> {
        for source in [&self.pending, &staged.rollups] {
            for (&tenant_id, rollups) in source {
                for ((minute, key), cell) in rollups.iter() {
                    let series_id = series_id(tx, tenant_id, key, &mut self.series)?;
                    merge_cell(tx, tenant_id, *minute, series_id, cell)?;
                }
            }
        }
        for source in [&self.pending_hops, &staged.hops] {
            for (&tenant_id, hops) in source {
                crate::sqlite::hops::merge(tx, tenant_id, hops)?;
            }
        }
        tx.prepare_cached("INSERT OR REPLACE INTO store_marks (name, value) VALUES (?1, ?2)")?
            .execute(params![MARK, through_block])?;
        Ok(())
    }
}

fn series_id(
    tx: &Connection,
    tenant_id: i64,
    key: &SeriesKey,
    cache: &mut HashMap<(i64, SeriesKey), i64>,
) -> rusqlite::Result<i64> {
    if let Some(&id) = cache.get(&(tenant_id, key.clone())) {
        return Ok(id);
    }
    let dims = key.to_text();
    let id: i64 = tx
        .prepare_cached(
            "INSERT INTO rollup_series (tenant_id, dims) VALUES (?1, ?2)
             ON CONFLICT (tenant_id, dims) DO UPDATE SET dims = excluded.dims
             RETURNING id",
        )?
        .query_row(params![tenant_id, dims], |r| r.get(0))?;
    cache.insert((tenant_id, key.clone()), id);
    Ok(id)
}

/// Merges `cell` into the series' stored cell of `minute` (or stores it, if none).
pub(crate) fn merge_cell(
    tx: &Connection,
    tenant_id: i64,
    minute: i64,
    series_id: i64,
    cell: &RollupCell,
) -> rusqlite::Result<()> {
    let stored: Option<Vec<u8>> = tx
        .prepare_cached(
            "SELECT cell FROM rollups WHERE tenant_id = ?1 AND minute = ?2 AND series_id = ?3",
        )?
        .query_row(params![tenant_id, minute, series_id], |r| r.get(0))
        .optional()?;
    let merged = match stored.map(|b| codec::decode_cell(&b)) {
        Some(Ok(mut c)) => {
            c.merge(cell);
            c
        }
        Some(Err(e)) => {
            // Only aggregates are lost, and the cell is rebuilt from here on.
            tracing::warn!(minute, series_id, error = %e, "replacing an unreadable rollup cell");
            cell.clone()
        }
        None => cell.clone(),
    };
    write_cell(tx, tenant_id, minute, series_id, &merged)
}

/// Stores `cell` as the series' cell of `minute`, replacing what was there.
pub(crate) fn write_cell(
    tx: &Connection,
    tenant_id: i64,
    minute: i64,
    series_id: i64,
    cell: &RollupCell,
) -> rusqlite::Result<()> {
    let blob = codec::encode_cell(cell)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO rollups (tenant_id, minute, series_id, cell) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![tenant_id, minute, series_id, blob])?;
    Ok(())
}

/// At open, before the writer starts: rolls up the blocks committed after the mark.
/// Returns how many blocks it replayed.
pub(crate) fn replay(conn: &mut Connection) -> Result<u64, StoreError> {
    let err = |c: &Connection, e| sqlite_err(c, e);
    let mut ledger = RollupLedger::default();
    let mut replayed = 0;
    loop {
        let mark: i64 = conn
            .query_row(
                "SELECT value FROM store_marks WHERE name = ?1",
                [MARK],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| err(conn, e))?
            .unwrap_or(0);
        let blocks: Vec<(i64, i64)> = {
            let mut stmt = conn
                .prepare("SELECT id, tenant_id FROM span_blocks WHERE id > ?1 ORDER BY id LIMIT ?2")
                .map_err(|e| err(conn, e))?;
            let rows = stmt
                .query_map(params![mark, REPLAY_CHUNK], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(|e| err(conn, e))?;
            rows.collect::<Result<_, _>>().map_err(|e| err(conn, e))?
        };
        let Some(&(last, _)) = blocks.last() else {
            return Ok(replayed);
        };
        let mut staged = Staged::default();
        for (block_id, tenant_id) in &blocks {
            let spans = block_requests(conn, *tenant_id, *block_id)?;
            staged
                .rollups
                .entry(*tenant_id)
                .or_default()
                .absorb(Rollups::of_spans(&spans));
        }
        let path = conn
            .path()
            .map(std::path::PathBuf::from)
            .unwrap_or_default();
        let failed = |source| super::sqlite_error(&path, source);
        let tx = conn.transaction().map_err(failed)?;
        ledger.flush(&tx, &staged, last).map_err(failed)?;
        tx.commit().map_err(failed)?;
        replayed += blocks.len() as u64;
    }
}

/// The spans of one block, with what rollups read (service, name, times, status, LLM
/// view).
fn block_requests(
    conn: &Connection,
    tenant_id: i64,
    block_id: i64,
) -> Result<Vec<SpanRecord>, StoreError> {
    let err = |e| sqlite_err(conn, e);
    let range: Option<(i64, i64)> = conn
        .query_row(
            "SELECT first_span_rowid, last_span_rowid FROM block_traces
             WHERE tenant_id = ?1 AND block_id = ?2",
            params![tenant_id, block_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(err)?;
    let Some((first, last)) = range else {
        return Ok(Vec::new());
    };
    let blob: Vec<u8> = conn
        .query_row(
            "SELECT block FROM span_blocks WHERE id = ?1",
            [block_id],
            |r| r.get(0),
        )
        .map_err(err)?;
    let block = codec::open_block(&blob)?;
    let mut stmt = conn
        .prepare_cached(
            "SELECT service, start_ns, end_ns, block_offset, block_len, span_id, parent_span_id, name
             FROM spans WHERE rowid BETWEEN ?1 AND ?2 AND block_id = ?3",
        )
        .map_err(err)?;
    let mut rows = stmt.query(params![first, last, block_id]).map_err(err)?;
    let mut spans = Vec::new();
    while let Some(row) = rows.next().map_err(err)? {
        let (detail, llm): (SpanDetail, _) =
            codec::decode_detail(&block, row.get(3).map_err(err)?, row.get(4).map_err(err)?)?;
        // Raw bytes: only parent links matter here, and stored ids were checked at ingest.
        let id = |b: Vec<u8>| {
            <[u8; 8]>::try_from(b.as_slice())
                .map(SpanId)
                .map_err(|_| StoreError::corrupt(format!("span id of {} bytes", b.len())))
        };
        spans.push(SpanRecord {
            trace_id: TraceId([0; 16]),
            span_id: id(row.get(5).map_err(err)?)?,
            parent_span_id: row
                .get::<_, Option<Vec<u8>>>(6)
                .map_err(err)?
                .map(id)
                .transpose()?,
            name: row.get(7).map_err(err)?,
            service: row.get(0).map_err(err)?,
            kind: SpanKind::Unspecified,
            start_time_unix_nano: row.get::<_, i64>(1).map_err(err)? as u64,
            end_time_unix_nano: row.get::<_, i64>(2).map_err(err)? as u64,
            detail,
            origin: Default::default(),
            llm,
        });
    }
    Ok(spans)
}

/// The identities of the newest `capacity` stored spans, oldest first: what a retry
/// arriving after a restart is recognized by.
pub(crate) fn recent_spans(
    conn: &Connection,
    capacity: usize,
) -> Result<crate::retries::RecentSpans, StoreError> {
    let err = |e| sqlite_err(conn, e);
    let mut recent = crate::retries::RecentSpans::new(capacity);
    let mut stmt = conn
        .prepare(
            "SELECT t.name, s.trace_id, s.span_id FROM spans s JOIN tenants t ON t.id = s.tenant_id
             ORDER BY s.rowid DESC LIMIT ?1",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map([capacity as i64], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ))
        })
        .map_err(err)?;
    let mut newest_first = Vec::new();
    for row in rows {
        let (tenant, trace, span) = row.map_err(err)?;
        let (Ok(trace), Ok(span)) = (
            <[u8; 16]>::try_from(trace.as_slice()),
            <[u8; 8]>::try_from(span.as_slice()),
        ) else {
            continue;
        };
        newest_first.push((tenant, TraceId(trace), SpanId(span)));
    }
    for (tenant, trace, span) in newest_first.iter().rev() {
        recent.remember(tenant, trace, span);
    }
    Ok(recent)
}

/// Stored cells of a tenant with minutes in `from..=to`.
pub(crate) fn cells_between(
    conn: &Connection,
    tenant_id: i64,
    from_minute: i64,
    to_minute: i64,
) -> Result<Vec<(i64, SeriesKey, RollupCell)>, StoreError> {
    let err = |e| sqlite_err(conn, e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT r.minute, r.series_id, s.dims, r.cell FROM rollups r
             JOIN rollup_series s ON s.id = r.series_id
             WHERE r.tenant_id = ?1 AND r.minute BETWEEN ?2 AND ?3",
        )
        .map_err(err)?;
    let mut rows = stmt
        .query(params![tenant_id, from_minute, to_minute])
        .map_err(err)?;
    let mut keys: HashMap<i64, SeriesKey> = HashMap::default();
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err)? {
        let series_id: i64 = row.get(1).map_err(err)?;
        let key = match keys.get(&series_id) {
            Some(k) => k.clone(),
            None => {
                let dims: String = row.get(2).map_err(err)?;
                let key = SeriesKey::from_text(&dims).ok_or_else(|| {
                    StoreError::corrupt(format!("rollup series {series_id} has dims {dims:?}"))
                })?;
                keys.insert(series_id, key.clone());
                key
            }
        };
        let blob: Vec<u8> = row.get(3).map_err(err)?;
        out.push((row.get(0).map_err(err)?, key, codec::decode_cell(&blob)?));
    }
    Ok(out)
}
