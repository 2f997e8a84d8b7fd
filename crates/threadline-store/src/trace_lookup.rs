//! Trace-by-id lookups. Trace ids are random, so a B-tree index on them costs one random
//! page write per span — the dominant ingest cost measured on the embedded store.
//! Instead each detail block records the sorted ids of the traces it holds (and the
//! contiguous rowid range of its span rows); a lookup scans those compact lists (16
//! bytes per trace per block, binary-searched) and then reads only the matching row
//! ranges. Lookups cost O(blocks of the tenant), restricted by time where the query
//! allows; ingest costs no random writes at all.

use std::collections::HashMap;

use rusqlite::{params, Connection};
use threadline_model::TraceId;

use crate::{sqlite_err, StoreError};

/// Rows `first..=last` of the `spans` table, all from one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
}

/// One block's trace list.
pub(crate) struct BlockTraces {
    range: RowRange,
    trace_ids: Vec<u8>,
}

impl BlockTraces {
    fn contains(&self, id: &TraceId) -> bool {
        sorted_ids_contain(&self.trace_ids, id)
    }
}

/// Binary search in a sorted concatenation of 16-byte ids.
fn sorted_ids_contain(list: &[u8], id: &TraceId) -> bool {
    let (mut lo, mut hi) = (0usize, list.len() / TraceId::LEN);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let at = &list[mid * TraceId::LEN..(mid + 1) * TraceId::LEN];
        match at.cmp(&id.0[..]) {
            std::cmp::Ordering::Equal => return true,
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
        }
    }
    false
}

/// Streams the tenant's block lists (only blocks holding a span that started at or
/// after `newest_start_at_least`, when given) to `visit`.
fn scan_blocks(
    conn: &Connection,
    tenant_id: i64,
    newest_start_at_least: Option<i64>,
    mut visit: impl FnMut(BlockTraces),
) -> Result<(), StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT first_span_rowid, last_span_rowid, trace_ids FROM block_traces
             WHERE tenant_id = ?1 AND max_start_ns >= ?2 ORDER BY block_id",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let mut rows = stmt
        .query(params![
            tenant_id,
            newest_start_at_least.unwrap_or(i64::MIN)
        ])
        .map_err(|e| sqlite_err(conn, e))?;
    while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
        visit(BlockTraces {
            range: RowRange {
                first: row.get(0).map_err(|e| sqlite_err(conn, e))?,
                last: row.get(1).map_err(|e| sqlite_err(conn, e))?,
            },
            trace_ids: row.get(2).map_err(|e| sqlite_err(conn, e))?,
        });
    }
    Ok(())
}

/// The row ranges that may hold spans of each of `trace_ids`, oldest block first.
pub(crate) fn ranges_for(
    conn: &Connection,
    tenant_id: i64,
    trace_ids: &[TraceId],
) -> Result<HashMap<TraceId, Vec<RowRange>>, StoreError> {
    let mut found: HashMap<TraceId, Vec<RowRange>> = HashMap::new();
    scan_blocks(conn, tenant_id, None, |block| {
        for id in trace_ids {
            if block.contains(id) {
                found.entry(*id).or_default().push(block.range);
            }
        }
    })?;
    Ok(found)
}

/// Block lists kept in memory for the span of one search request.
pub(crate) struct LoadedBlocks {
    blocks: Vec<BlockTraces>,
}

impl LoadedBlocks {
    /// Blocks holding a span that started at or after `newest_start_at_least`.
    pub(crate) fn load(
        conn: &Connection,
        tenant_id: i64,
        newest_start_at_least: i64,
    ) -> Result<Self, StoreError> {
        let mut blocks = Vec::new();
        scan_blocks(conn, tenant_id, Some(newest_start_at_least), |b| {
            blocks.push(b)
        })?;
        Ok(Self { blocks })
    }

    pub(crate) fn ranges(&self, id: &TraceId) -> Vec<RowRange> {
        self.blocks
            .iter()
            .filter(|b| b.contains(id))
            .map(|b| b.range)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_id_lists_are_binary_searched() {
        let ids: Vec<[u8; 16]> = vec![[1; 16], [3; 16], [7; 16], [9; 16]];
        let list = ids.concat();
        for id in &ids {
            assert!(sorted_ids_contain(&list, &TraceId(*id)));
        }
        for missing in [[0u8; 16], [2; 16], [8; 16], [10; 16]] {
            assert!(!sorted_ids_contain(&list, &TraceId(missing)));
        }
        assert!(!sorted_ids_contain(&[], &TraceId([1; 16])));
    }
}
