//! Reads that let a viewer open a trace of any size in two steps: the skeleton of
//! every span from the slim span rows alone (no detail block is opened), then one
//! span's full record when it is looked at.

use std::collections::HashSet;

use rusqlite::{params, Connection};
use threadline_model::{SpanId, SpanKind, SpanRecord, TenantId, TraceId};

use crate::skeleton::{SkeletonSpan, SpanLocation};
use crate::sqlite::query::{span_from_row, trace_rows, BlockCache, DetailSlot, OriginCache};
use crate::sqlite::trace_index::RunFilters;
use crate::sqlite::trace_lookup::RowRange;
use crate::sqlite::{sqlite_err, StoreError};

/// Opens skeleton spans whole, one at a time, over one connection and bounded caches
/// of decompressed blocks and decoded origins: a caller walking a trace of any size
/// holds the skeleton and these caches, never every record at once.
pub(crate) struct SqliteSpans {
    conn: Option<Connection>,
    pool: std::sync::Weak<crate::sqlite::Inner>,
    trace_id: TraceId,
    origins: OriginCache,
    blocks: BlockCache,
}

impl SqliteSpans {
    pub(crate) fn new(
        conn: Connection,
        pool: std::sync::Weak<crate::sqlite::Inner>,
        tenant_id: i64,
        trace_id: TraceId,
    ) -> Self {
        Self {
            conn: Some(conn),
            pool,
            trace_id,
            origins: OriginCache::new(tenant_id),
            blocks: BlockCache::default(),
        }
    }
}

impl crate::OpenSpans for SqliteSpans {
    fn span(&mut self, skeleton: &SkeletonSpan) -> Result<SpanRecord, StoreError> {
        let conn = self.conn.as_ref().ok_or(StoreError::writer_stopped())?;
        let (slot, origin_hash) = DetailSlot::of_located(skeleton.location.0).ok_or_else(|| {
            StoreError::invalid_query("a skeleton of another store was handed to the embedded one")
        })?;
        let (detail, llm) = self.blocks.detail(conn, slot)?;
        Ok(SpanRecord {
            trace_id: self.trace_id,
            span_id: skeleton.span_id,
            parent_span_id: skeleton.parent_span_id,
            name: skeleton.name.clone(),
            service: skeleton.service.clone(),
            kind: skeleton.kind,
            start_time_unix_nano: skeleton.start_time_unix_nano,
            end_time_unix_nano: skeleton.end_time_unix_nano,
            detail,
            origin: self.origins.get(conn, origin_hash)?,
            llm,
        })
    }
}

impl Drop for SqliteSpans {
    fn drop(&mut self) {
        if let (Some(conn), Some(inner)) = (self.conn.take(), self.pool.upgrade()) {
            inner.return_reader(conn);
        }
    }
}

/// Every span of a trace as a skeleton, in start order (first stored copy of each
/// span id). Empty when the tenant has no such trace.
pub(crate) fn trace_skeleton(
    conn: &Connection,
    filters: &RunFilters,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Vec<SkeletonSpan>, StoreError> {
    let Some((tenant_id, ranges)) = trace_rows(conn, filters, tenant, trace_id)? else {
        return Ok(Vec::new());
    };
    let mut spans = skeleton_rows(conn, tenant_id, trace_id, &ranges)?;
    spans.sort_by(|a, b| {
        (a.start_time_unix_nano, a.span_id).cmp(&(b.start_time_unix_nano, b.span_id))
    });
    Ok(spans)
}

/// The skeletons of a trace's spans in `ranges`, in storage order, the first stored
/// copy of each span id only (a retried export stores a span again). Search
/// summaries are computed from these too.
pub(crate) fn skeleton_rows(
    conn: &Connection,
    tenant_id: i64,
    trace_id: TraceId,
    ranges: &[RowRange],
) -> Result<Vec<SkeletonSpan>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT span_id, parent_span_id, name, service, kind, start_ns, end_ns, status_code,
                    model, total_tokens, input_tokens, output_tokens, origin_hash,
                    block_id, block_offset, block_len, session_id, user_id
             FROM spans NOT INDEXED
             WHERE rowid BETWEEN ?1 AND ?2 AND tenant_id = ?3 AND trace_id = ?4
             ORDER BY rowid",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let corrupt = |e: threadline_model::IdError| StoreError::corrupt(e.to_string());
    let mut spans = Vec::new();
    let mut seen = HashSet::new();
    for range in ranges {
        let mut rows = stmt
            .query(params![range.first, range.last, tenant_id, &trace_id.0[..]])
            .map_err(|e| sqlite_err(conn, e))?;
        while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
            let get_err = |e| sqlite_err(conn, e);
            let span_id: Vec<u8> = row.get(0).map_err(get_err)?;
            let span_id = SpanId::from_bytes(&span_id).map_err(corrupt)?;
            if !seen.insert(span_id) {
                continue;
            }
            let parent: Option<Vec<u8>> = row.get(1).map_err(get_err)?;
            spans.push(SkeletonSpan {
                span_id,
                parent_span_id: parent
                    .map(|p| SpanId::from_bytes(&p))
                    .transpose()
                    .map_err(corrupt)?,
                name: row.get(2).map_err(get_err)?,
                service: row.get(3).map_err(get_err)?,
                kind: SpanKind::from_otlp(row.get(4).map_err(get_err)?),
                start_time_unix_nano: row.get::<_, i64>(5).map_err(get_err)? as u64,
                end_time_unix_nano: row.get::<_, i64>(6).map_err(get_err)? as u64,
                error: row.get::<_, i64>(7).map_err(get_err)? == 2,
                model: row.get(8).map_err(get_err)?,
                total_tokens: row.get(9).map_err(get_err)?,
                input_tokens: row.get(10).map_err(get_err)?,
                output_tokens: row.get(11).map_err(get_err)?,
                session_id: row.get(16).map_err(get_err)?,
                user_id: row.get(17).map_err(get_err)?,
                location: SpanLocation(
                    DetailSlot::from_row(conn, row, 13)?.located(row.get(12).map_err(get_err)?),
                ),
            });
        }
    }
    Ok(spans)
}

/// One span of a trace, whole (first stored copy), or `None`.
pub(crate) fn get_span(
    conn: &Connection,
    filters: &RunFilters,
    tenant: &TenantId,
    trace_id: TraceId,
    span_id: SpanId,
) -> Result<Option<SpanRecord>, StoreError> {
    let Some((tenant_id, ranges)) = trace_rows(conn, filters, tenant, trace_id)? else {
        return Ok(None);
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT trace_id, span_id, parent_span_id, name, service, kind, start_ns, end_ns,
                    origin_hash, block_id, block_offset, block_len
             FROM spans NOT INDEXED
             WHERE rowid BETWEEN ?1 AND ?2 AND tenant_id = ?3 AND trace_id = ?4 AND span_id = ?5
             ORDER BY rowid LIMIT 1",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let mut origins = OriginCache::new(tenant_id);
    let mut blocks = BlockCache::default();
    for range in ranges {
        let mut rows = stmt
            .query(params![
                range.first,
                range.last,
                tenant_id,
                &trace_id.0[..],
                &span_id.0[..]
            ])
            .map_err(|e| sqlite_err(conn, e))?;
        if let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
            return span_from_row(conn, row, &mut origins, &mut blocks).map(Some);
        }
    }
    Ok(None)
}
