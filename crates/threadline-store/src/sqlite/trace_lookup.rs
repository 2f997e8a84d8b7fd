//! Trace-by-id lookups: the blocks a trace's spans are in, from the trace-id index's
//! runs (`trace_index`) and the trace lists of the few newest blocks no run covers
//! yet; then only those blocks' contiguous rowid ranges are read. Trace ids are
//! random, so a B-tree index on them would cost one random page write per span on
//! ingest; the runs are built off the writer's path instead. A lookup seeks the runs
//! whose filter may hold the id (about one for a known id, about none for an unknown).

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use threadline_model::TraceId;

use crate::sqlite::trace_index::RunFilters;
use crate::sqlite::{sqlite_err, trace_index, StoreError};

/// Rows `first..=last` of the `spans` table, all from one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
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

/// The row ranges that may hold spans of each of `trace_ids`, oldest block first.
pub(crate) fn ranges_for(
    conn: &Connection,
    filters: &RunFilters,
    tenant_id: i64,
    trace_ids: &[TraceId],
) -> Result<HashMap<TraceId, Vec<RowRange>>, StoreError> {
    let err = |e| sqlite_err(conn, e);
    // One read transaction: the compactor may swap runs between two statements.
    let tx = conn.unchecked_transaction().map_err(err)?;
    let (mut blocks, covered_through) =
        trace_index::indexed_blocks(&tx, filters, tenant_id, trace_ids)?;
    let mut tail = tx
        .prepare_cached(
            "SELECT block_id, trace_ids FROM block_traces
             WHERE tenant_id = ?1 AND block_id > ?2 ORDER BY block_id",
        )
        .map_err(err)?;
    let mut rows = tail
        .query(params![tenant_id, covered_through])
        .map_err(err)?;
    while let Some(row) = rows.next().map_err(err)? {
        let block_id: i64 = row.get(0).map_err(err)?;
        let list: Vec<u8> = row.get(1).map_err(err)?;
        for id in trace_ids {
            if sorted_ids_contain(&list, id) {
                blocks.entry(*id).or_default().push(block_id as u64);
            }
        }
    }
    drop(rows);
    let mut range_of = tx
        .prepare_cached(
            "SELECT first_span_rowid, last_span_rowid FROM block_traces
             WHERE tenant_id = ?1 AND block_id = ?2",
        )
        .map_err(err)?;
    let mut found = HashMap::with_capacity(blocks.len());
    for (id, mut ids) in blocks {
        ids.sort_unstable();
        ids.dedup();
        let mut ranges = Vec::with_capacity(ids.len());
        for block_id in ids {
            let range = range_of
                .query_row(params![tenant_id, block_id as i64], |r| {
                    Ok(RowRange {
                        first: r.get(0)?,
                        last: r.get(1)?,
                    })
                })
                .optional()
                .map_err(err)?;
            ranges.extend(range);
        }
        found.insert(id, ranges);
    }
    Ok(found)
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
