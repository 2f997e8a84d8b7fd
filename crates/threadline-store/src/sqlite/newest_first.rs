//! Span reads by start time. Spans are stored in detail-block order (blocks are
//! numbered in arrival order, and a block's rows are a rowid range); column values are
//! known per block (`block_values`), and what is known about time is
//! each block's zone, the start times of its oldest and newest span, indexed by the
//! newest (`blocks_by_newest_start`). This module owns the two ways reads use it:
//! - `NewestFirst`: matching spans newest first, merged across blocks whose zones
//!   overlap (spans arrive out of start order, so neighbouring blocks' zones do);
//! - `spans_in_window`: the `FROM` clause of a query over the spans of a time window.

use std::collections::{BinaryHeap, VecDeque};

use rusqlite::types::Value;
use rusqlite::{Connection, Row};

use crate::sqlite::attr_filter;
use crate::sqlite::block_values::{probes_sql, BlockProbe};
use crate::sqlite::{sqlite_err, StoreError};

/// Spans that started within `from..=to` (unix ns) of one tenant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanWindow {
    pub(crate) tenant_id: i64,
    pub(crate) from: i64,
    pub(crate) to: i64,
}

/// The row filter of a read that filters on nothing but the tenant.
pub(crate) const TENANT_ONLY: &str = "tenant_id = ?";

/// The `FROM` clause (spans as `s`, their blocks as `b`) and its arguments for a query
/// over the spans of `window` in blocks that pass `probes`: blocks whose zone overlaps
/// the window and that hold the probed values, then their rows. The caller still
/// tests `s.start_ns` and the probed columns; zones and probes only narrow the blocks.
pub(crate) fn spans_in_window(window: SpanWindow, probes: &[BlockProbe]) -> (String, Vec<Value>) {
    let (probed, probe_args) = probes_sql("b.tenant_id", "b.block_id", probes);
    // CROSS JOIN keeps the blocks as the outer loop: each visits its own rows.
    let mut args = vec![
        Value::Integer(window.tenant_id),
        Value::Integer(window.from),
        Value::Integer(window.to),
    ];
    args.extend(probe_args);
    (
        format!(
            "block_traces b CROSS JOIN spans s NOT INDEXED
               ON b.tenant_id = ? AND b.max_start_ns >= ? AND b.min_start_ns <= ? {probed}
              AND s.rowid BETWEEN b.first_span_rowid AND b.last_span_rowid
              AND s.block_id = b.block_id"
        ),
        args,
    )
}

/// A block whose spans are rows `first_rowid..=last_rowid` and started within
/// `min_start..=max_start`.
#[derive(Clone, Copy, Debug)]
struct Zone {
    block_id: i64,
    first_rowid: i64,
    last_rowid: i64,
    max_start: i64,
    min_start: i64,
}

/// Matching spans of a window, newest start first (ties in the order of `T`, greatest
/// first). Blocks are read in order of their newest start; their matching rows wait in
/// a heap, and one leaves it only once no unread block can hold a later start.
pub(crate) struct NewestFirst<'c, T> {
    conn: &'c Connection,
    window: SpanWindow,
    /// The next page of zones holding a matching row, newest start first.
    zones_sql: String,
    /// The arguments of `zones_sql`'s block probes and, when it tests the filter on
    /// the rows, the filter's.
    zones_args: Vec<Value>,
    /// `SELECT … FROM spans WHERE rowid BETWEEN ? AND ? AND block_id = ? AND (filter)`.
    rows_sql: String,
    filter_args: Vec<Value>,
    decode: DecodeRow<T>,
    /// Zones read ahead, newest start first.
    zones: VecDeque<Zone>,
    /// The last zone read ahead; the next page starts after it.
    zones_after: Option<Zone>,
    zones_done: bool,
    /// Rows read, by (start time, `T`).
    ready: BinaryHeap<(i64, T)>,
}

/// What a read keeps: whole blocks first (a block refused is not read at all), then
/// rows one after another as they are read, so a test that opens the block's details
/// opens each block once.
pub(crate) trait Keep<T> {
    fn block(&mut self, block_id: i64) -> Result<bool, StoreError>;
    /// May annotate the item for later (what it learnt of the row).
    fn row(&mut self, item: &mut T) -> Result<bool, StoreError>;
}

/// Turns a selected row into its span's start time and the caller's item.
pub(crate) type DecodeRow<T> = fn(&Connection, &Row<'_>) -> Result<(i64, T), StoreError>;

/// Zones read ahead per query of the zone index (few in tests, so they page).
const ZONE_PAGE: i64 = if cfg!(test) { 4 } else { 256 };

/// What rows a `NewestFirst` reads.
pub(crate) struct RowFilter<'a> {
    /// SQL over the `spans` columns with `?` placeholders bound to `args`.
    pub(crate) sql: &'a str,
    pub(crate) args: Vec<Value>,
    /// Blocks without these values hold no matching row.
    pub(crate) probes: &'a [BlockProbe],
    /// Whether a block that passes the probes surely holds a matching row (the filter
    /// tests nothing the probes do not), so that only the probes test zones.
    pub(crate) probes_decide: bool,
    /// Hashes of `attr.` pairs a block's attribute filter must say it may hold
    /// (`attr_filter`); the rows are checked by the caller.
    pub(crate) attr_hashes: &'a [u64],
}

impl<'c, T: Ord> NewestFirst<'c, T> {
    /// `columns` are selected from `spans` for rows that pass `filter`; `decode` turns
    /// such a row into its start time and a `T`.
    pub(crate) fn new(
        conn: &'c Connection,
        window: SpanWindow,
        columns: &str,
        filter: RowFilter<'_>,
        decode: DecodeRow<T>,
    ) -> Self {
        let (mut probed, mut zones_args) = probes_sql("z.tenant_id", "z.block_id", filter.probes);
        if !filter.attr_hashes.is_empty() {
            let (condition, args) =
                attr_filter::block_condition("z.tenant_id", "z.block_id", filter.attr_hashes);
            probed.push_str(&condition);
            zones_args.extend(args);
        }
        // Every zone holds rows of its tenant (but for a block erased whole, which
        // reads as empty): without a filter, the per-zone test would only cost a row
        // read per block. Blocks without a match are skipped here, in one statement:
        // a filter that matches little then costs a probe per block, not a query each.
        let sql = filter.sql;
        let holds_match = if sql == TENANT_ONLY || filter.probes_decide {
            String::new()
        } else {
            zones_args.extend_from_slice(&filter.args);
            format!(
                "AND EXISTS (SELECT 1 FROM spans NOT INDEXED
                             WHERE rowid BETWEEN z.first_span_rowid AND z.last_span_rowid
                               AND block_id = z.block_id AND ({sql}))"
            )
        };
        Self {
            conn,
            window,
            // Keyset paging in index order ((max, min, block) is unique per tenant).
            zones_sql: format!(
                "SELECT z.block_id, z.first_span_rowid, z.last_span_rowid,
                        z.max_start_ns, z.min_start_ns
                 FROM block_traces AS z INDEXED BY blocks_by_newest_start
                 WHERE z.tenant_id = ? AND z.max_start_ns >= ? AND z.min_start_ns <= ?
                   AND (z.max_start_ns, z.min_start_ns, z.block_id) < (?, ?, ?)
                   {probed} {holds_match}
                 ORDER BY z.max_start_ns DESC, z.min_start_ns DESC, z.block_id DESC
                 LIMIT ?"
            ),
            rows_sql: format!(
                "SELECT {columns} FROM spans NOT INDEXED
                 WHERE rowid BETWEEN ? AND ? AND block_id = ? AND ({sql})"
            ),
            zones_args,
            filter_args: filter.args,
            decode,
            zones: VecDeque::new(),
            zones_after: None,
            zones_done: false,
            ready: BinaryHeap::new(),
        }
    }

    /// The next matching span that `keep` accepts, or `None` when every block of the
    /// window has been read.
    pub(crate) fn next(&mut self, keep: &mut dyn Keep<T>) -> Result<Option<T>, StoreError> {
        loop {
            if self.zones.is_empty() && !self.zones_done {
                self.read_zones()?;
            }
            let unread_newest = self.zones.front().map(|z| z.max_start);
            match (self.ready.peek(), unread_newest) {
                (None, None) => return Ok(None),
                (Some((start, _)), unread) if unread.is_none_or(|u| *start > u) => {
                    return Ok(self.ready.pop().map(|(_, item)| item));
                }
                _ => {
                    if let Some(zone) = self.zones.pop_front() {
                        self.read_rows(zone, keep)?;
                    }
                }
            }
        }
    }

    fn read_zones(&mut self) -> Result<(), StoreError> {
        let conn = self.conn;
        let err = |e| sqlite_err(conn, e);
        let (after_max, after_min, after_block) = match self.zones_after {
            Some(z) => (z.max_start, z.min_start, z.block_id),
            None => (i64::MAX, i64::MAX, i64::MAX),
        };
        let mut args = vec![
            Value::Integer(self.window.tenant_id),
            Value::Integer(self.window.from),
            Value::Integer(self.window.to),
            Value::Integer(after_max),
            Value::Integer(after_min),
            Value::Integer(after_block),
        ];
        args.extend_from_slice(&self.zones_args);
        args.push(Value::Integer(ZONE_PAGE));
        let mut stmt = conn.prepare_cached(&self.zones_sql).map_err(err)?;
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args.iter()))
            .map_err(err)?;
        let mut read = 0;
        while let Some(row) = rows.next().map_err(err)? {
            let zone = Zone {
                block_id: row.get(0).map_err(err)?,
                first_rowid: row.get(1).map_err(err)?,
                last_rowid: row.get(2).map_err(err)?,
                max_start: row.get(3).map_err(err)?,
                min_start: row.get(4).map_err(err)?,
            };
            self.zones.push_back(zone);
            self.zones_after = Some(zone);
            read += 1;
        }
        self.zones_done = read < ZONE_PAGE;
        Ok(())
    }

    fn read_rows(&mut self, zone: Zone, keep: &mut dyn Keep<T>) -> Result<(), StoreError> {
        if !keep.block(zone.block_id)? {
            return Ok(());
        }
        let conn = self.conn;
        let err = |e| sqlite_err(conn, e);
        let mut stmt = conn.prepare_cached(&self.rows_sql).map_err(err)?;
        let mut args = vec![
            Value::Integer(zone.first_rowid),
            Value::Integer(zone.last_rowid),
            Value::Integer(zone.block_id),
        ];
        args.extend_from_slice(&self.filter_args);
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args.iter()))
            .map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            let (start, mut item) = (self.decode)(conn, row)?;
            if (self.window.from..=self.window.to).contains(&start) && keep.row(&mut item)? {
                self.ready.push((start, item));
            }
        }
        Ok(())
    }
}
