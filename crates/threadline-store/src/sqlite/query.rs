//! Reads: one trace by id, the detail caches other reads share, services, operations,
//! and the span queries behind diagnosis (requests served, exemplars). Search is in
//! `search`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, Row};
use threadline_model::{
    LlmView, NodeId, NodeKind, SpanDetail, SpanId, SpanKind, SpanOrigin, SpanRecord, TenantId,
    TraceId,
};

use crate::sqlite::block_values::{BlockProbe, ValueField};
use crate::sqlite::newest_first::{spans_in_window, SpanWindow};
use crate::sqlite::trace_index::RunFilters;
use crate::sqlite::trace_lookup::{self, RowRange};
use crate::sqlite::{codec, sqlite_err, StoreError};
use crate::{RequestsServed, ServiceSummary};

pub(crate) fn tenant_key(conn: &Connection, tenant: &TenantId) -> Result<Option<i64>, StoreError> {
    conn.prepare_cached("SELECT id FROM tenants WHERE name = ?1")
        .and_then(|mut s| s.query_row([tenant.as_str()], |r| r.get(0)).optional())
        .map_err(|e| sqlite_err(conn, e))
}

/// The tenant's key and the row ranges that may hold a trace's spans; `None` for a
/// tenant that has stored nothing.
pub(crate) fn trace_rows(
    conn: &Connection,
    filters: &RunFilters,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Option<(i64, Vec<RowRange>)>, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(None);
    };
    let ranges = trace_lookup::ranges_for(conn, filters, tenant_id, &[trace_id])?
        .remove(&trace_id)
        .unwrap_or_default();
    Ok(Some((tenant_id, ranges)))
}

pub(crate) fn get_trace(
    conn: &Connection,
    filters: &RunFilters,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Vec<SpanRecord>, StoreError> {
    let Some((tenant_id, ranges)) = trace_rows(conn, filters, tenant, trace_id)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT trace_id, span_id, parent_span_id, name, service, kind, start_ns, end_ns,
                    origin_hash, block_id, block_offset, block_len
             FROM spans NOT INDEXED
             WHERE rowid BETWEEN ?1 AND ?2 AND tenant_id = ?3 AND trace_id = ?4
             ORDER BY rowid",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let mut origins = OriginCache::new(tenant_id);
    let mut blocks = BlockCache::default();
    let mut spans: Vec<SpanRecord> = Vec::new();
    let mut seen = HashSet::new();
    for range in ranges {
        let mut rows = stmt
            .query(params![range.first, range.last, tenant_id, &trace_id.0[..]])
            .map_err(|e| sqlite_err(conn, e))?;
        while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
            let span = span_from_row(conn, row, &mut origins, &mut blocks)?;
            // A retried export stored the span twice: the first copy is the one kept.
            if seen.insert(span.span_id) {
                spans.push(span);
            }
        }
    }
    spans.sort_by(|a, b| {
        (a.start_time_unix_nano, a.span_id).cmp(&(b.start_time_unix_nano, b.span_id))
    });
    Ok(spans)
}

pub(crate) fn span_from_row(
    conn: &Connection,
    row: &Row<'_>,
    origins: &mut OriginCache,
    blocks: &mut BlockCache,
) -> Result<SpanRecord, StoreError> {
    let get_err = |e| sqlite_err(conn, e);
    let trace_id: Vec<u8> = row.get(0).map_err(get_err)?;
    let span_id: Vec<u8> = row.get(1).map_err(get_err)?;
    let parent: Option<Vec<u8>> = row.get(2).map_err(get_err)?;
    let origin_hash: i64 = row.get(8).map_err(get_err)?;
    let (detail, llm) = blocks.detail(conn, DetailSlot::from_row(conn, row, 9)?)?;
    let corrupt = |e: threadline_model::IdError| StoreError::corrupt(e.to_string());
    Ok(SpanRecord {
        trace_id: TraceId::from_bytes(&trace_id).map_err(corrupt)?,
        span_id: SpanId::from_bytes(&span_id).map_err(corrupt)?,
        parent_span_id: parent
            .map(|p| SpanId::from_bytes(&p))
            .transpose()
            .map_err(corrupt)?,
        name: row.get(3).map_err(get_err)?,
        service: row.get(4).map_err(get_err)?,
        kind: SpanKind::from_otlp(row.get(5).map_err(get_err)?),
        start_time_unix_nano: row.get::<_, i64>(6).map_err(get_err)? as u64,
        end_time_unix_nano: row.get::<_, i64>(7).map_err(get_err)? as u64,
        detail,
        origin: origins.get(conn, origin_hash)?,
        llm,
    })
}

/// Origins decoded once per query.
pub(crate) struct OriginCache {
    tenant_id: i64,
    decoded: HashMap<i64, Arc<SpanOrigin>>,
}

impl OriginCache {
    pub(crate) fn new(tenant_id: i64) -> Self {
        Self {
            tenant_id,
            decoded: HashMap::new(),
        }
    }

    pub(crate) fn get(
        &mut self,
        conn: &Connection,
        hash: i64,
    ) -> Result<Arc<SpanOrigin>, StoreError> {
        if let Some(o) = self.decoded.get(&hash) {
            return Ok(Arc::clone(o));
        }
        let blob: Option<Vec<u8>> = conn
            .prepare_cached(
                "SELECT origin FROM span_origins WHERE tenant_id = ?1 AND origin_hash = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![self.tenant_id, hash], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| sqlite_err(conn, e))?;
        let origin = match blob {
            Some(b) => Arc::new(codec::decode_origin(&b)?),
            None => {
                return Err(StoreError::corrupt(format!(
                    "span origin {hash} is missing"
                )))
            }
        };
        self.decoded.insert(hash, Arc::clone(&origin));
        Ok(origin)
    }
}

/// Where a span's detail lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DetailSlot {
    block_id: i64,
    offset: u32,
    len: u32,
}

impl DetailSlot {
    pub(crate) fn block_id(self) -> i64 {
        self.block_id
    }

    /// The slot as a `SpanLocation` keeps it (with the span's origin).
    pub(crate) fn located(self, origin_hash: i64) -> crate::skeleton::Located {
        crate::skeleton::Located::Embedded {
            block_id: self.block_id,
            offset: self.offset,
            len: self.len,
            origin_hash,
        }
    }

    /// The slot and the origin a `SpanLocation` of the embedded store names; `None`
    /// for another backend's location.
    pub(crate) fn of_located(located: crate::skeleton::Located) -> Option<(Self, i64)> {
        match located {
            crate::skeleton::Located::Embedded {
                block_id,
                offset,
                len,
                origin_hash,
            } => Some((
                Self {
                    block_id,
                    offset,
                    len,
                },
                origin_hash,
            )),
            crate::skeleton::Located::ById => None,
        }
    }

    /// Where the detail sits in its decompressed block.
    pub(crate) fn range(self) -> std::ops::Range<usize> {
        self.offset as usize..self.offset as usize + self.len as usize
    }

    /// Reads `block_id, block_offset, block_len` starting at column `first`.
    pub(crate) fn from_row(
        conn: &Connection,
        row: &Row<'_>,
        first: usize,
    ) -> Result<Self, StoreError> {
        let get_err = |e| sqlite_err(conn, e);
        Ok(Self {
            block_id: row.get(first).map_err(get_err)?,
            offset: row.get(first + 1).map_err(get_err)?,
            len: row.get(first + 2).map_err(get_err)?,
        })
    }
}

/// Detail blocks decompressed once per query (bounded in blocks and bytes: a scan may
/// touch many, and one export request's block may hold thousands of spans). Span
/// blocks by default; `logs()` for log record blocks.
pub(crate) struct BlockCache {
    table: &'static str,
    opened: HashMap<i64, Arc<Vec<u8>>>,
    bytes: usize,
}

impl Default for BlockCache {
    fn default() -> Self {
        Self {
            table: "span_blocks",
            opened: HashMap::new(),
            bytes: 0,
        }
    }
}

impl BlockCache {
    const MAX_BLOCKS: usize = 64;
    const MAX_BYTES: usize = 32 * 1024 * 1024;

    /// A cache of log record blocks.
    pub(crate) fn logs() -> Self {
        Self {
            table: "log_blocks",
            ..Self::default()
        }
    }

    /// The decompressed block.
    pub(crate) fn open(
        &mut self,
        conn: &Connection,
        block_id: i64,
    ) -> Result<Arc<Vec<u8>>, StoreError> {
        if let Some(b) = self.opened.get(&block_id) {
            return Ok(Arc::clone(b));
        }
        let blob: Vec<u8> = conn
            .prepare_cached(&format!("SELECT block FROM {} WHERE id = ?1", self.table))
            .and_then(|mut stmt| stmt.query_row([block_id], |r| r.get(0)))
            .map_err(|e| sqlite_err(conn, e))?;
        let opened = Arc::new(codec::open_block(&blob)?);
        if self.opened.len() >= Self::MAX_BLOCKS || self.bytes + opened.len() > Self::MAX_BYTES {
            self.opened.clear();
            self.bytes = 0;
        }
        self.bytes += opened.len();
        self.opened.insert(block_id, Arc::clone(&opened));
        Ok(opened)
    }

    pub(crate) fn detail(
        &mut self,
        conn: &Connection,
        slot: DetailSlot,
    ) -> Result<(SpanDetail, Option<LlmView>), StoreError> {
        let block = self.open(conn, slot.block_id)?;
        codec::decode_detail(&block, slot.offset, slot.len)
    }

    pub(crate) fn log(
        &mut self,
        conn: &Connection,
        slot: DetailSlot,
    ) -> Result<threadline_model::LogDetail, StoreError> {
        let block = self.open(conn, slot.block_id)?;
        codec::decode_log(&block, slot.offset, slot.len)
    }
}

/// The tenant's stored service names, sorted.
pub(crate) fn tenant_services(
    conn: &Connection,
    tenant_id: i64,
) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT service FROM tenant_services WHERE tenant_id = ?1 ORDER BY service")
        .map_err(|e| sqlite_err(conn, e))?;
    let names = stmt
        .query_map([tenant_id], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sqlite_err(conn, e))?;
    Ok(names)
}

pub(crate) fn services(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Vec<ServiceSummary>, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    Ok(tenant_services(conn, tenant_id)?
        .into_iter()
        .map(|name| ServiceSummary { name })
        .collect())
}

/// Distinct (service, span name, kind) of the tenant's spans, of one service or all,
/// sorted (kept per tenant as spans are written).
pub(crate) fn operations(
    conn: &Connection,
    tenant: &TenantId,
    service: Option<&str>,
) -> Result<Vec<(String, String, SpanKind)>, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT service, name, kind FROM tenant_operations
             WHERE tenant_id = ?1 AND (?2 IS NULL OR service = ?2) ORDER BY service, name, kind",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map(params![tenant_id, service], |r| {
            Ok((r.get(0)?, r.get(1)?, SpanKind::from_otlp(r.get(2)?)))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sqlite_err(conn, e))?;
    Ok(rows)
}

pub(crate) fn requests_served(
    conn: &Connection,
    tenant: &TenantId,
    adapters: &[String],
    instances: &[String],
    since_ns: i64,
) -> Result<RequestsServed, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(RequestsServed::default());
    };
    if adapters.is_empty() && instances.is_empty() {
        return Ok(RequestsServed::default());
    }
    let marks = |n: usize| crate::sqlite::placeholders(n.max(1));
    let window = SpanWindow {
        tenant_id,
        from: since_ns,
        to: i64::MAX,
    };
    let (spans, mut args) = spans_in_window(window, &[]);
    let from_where = format!(
        "FROM {spans} WHERE s.tenant_id = ? AND s.start_ns >= ? AND (s.adapter IN ({}) OR s.instance IN ({}))",
        marks(adapters.len()),
        marks(instances.len())
    );
    args.extend([tenant_id.into(), since_ns.into()]);
    let pad = |list: &[String]| -> Vec<rusqlite::types::Value> {
        if list.is_empty() {
            vec![rusqlite::types::Value::Null]
        } else {
            list.iter().map(|s| s.clone().into()).collect()
        }
    };
    args.extend(pad(adapters));
    args.extend(pad(instances));
    let err = |e| sqlite_err(conn, e);
    let traces: i64 = conn
        .query_row(
            &format!("SELECT count(DISTINCT s.trace_id) {from_where}"),
            rusqlite::params_from_iter(args.iter()),
            |r| r.get(0),
        )
        .map_err(err)?;
    let mut by_node = Vec::new();
    for (kind, field, list) in [
        (NodeKind::Adapter, ValueField::Adapter, adapters),
        (NodeKind::Instance, ValueField::Instance, instances),
    ] {
        let column = field.column_name();
        for id in list {
            let (spans, mut args) =
                spans_in_window(window, &[BlockProbe::new(field, vec![id.clone()])]);
            args.extend([tenant_id.into(), since_ns.into(), id.clone().into()]);
            let n: i64 = conn
                .query_row(
                    &format!(
                        "SELECT count(DISTINCT s.trace_id) FROM {spans}
                         WHERE s.tenant_id = ? AND s.start_ns >= ? AND s.{column} = ?"
                    ),
                    rusqlite::params_from_iter(args.iter()),
                    |r| r.get(0),
                )
                .map_err(err)?;
            by_node.push((NodeId::new(kind, id.clone()), n as u64));
        }
    }
    Ok(RequestsServed {
        traces: traces as u64,
        by_node,
    })
}

/// (trace id, span duration) of the slowest matching spans, distinct traces.
pub(crate) fn exemplars(
    conn: &Connection,
    tenant: &TenantId,
    q: &crate::ExemplarQuery,
) -> Result<Vec<(TraceId, u64)>, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut probes = Vec::new();
    for (dimension, value) in &q.filters {
        let Some(field) = ValueField::of_dimension(*dimension) else {
            return Err(StoreError::invalid_query(format!(
                "spans do not carry {dimension:?}: exemplars filter by {:?}",
                crate::EXEMPLAR_DIMENSIONS
            )));
        };
        probes.push(BlockProbe::new(field, vec![value.clone()]));
    }
    if q.errors_only {
        probes.push(BlockProbe::errors());
    }
    let (spans, mut args) = spans_in_window(
        SpanWindow {
            tenant_id,
            from: q.from_ns,
            to: q.to_ns,
        },
        &probes,
    );
    let mut sql = format!(
        "SELECT s.trace_id, s.duration_ns FROM {spans}
         WHERE s.tenant_id = ? AND s.start_ns BETWEEN ? AND ?"
    );
    args.extend([tenant_id.into(), q.from_ns.into(), q.to_ns.into()]);
    for probe in &probes {
        let (condition, values) = probe.row_sql("s.");
        sql.push_str(&condition);
        args.extend(values);
    }
    if let Some(min) = q.min_duration_ns {
        sql.push_str(" AND s.duration_ns >= ?");
        args.push(min.into());
    }
    sql.push_str(" ORDER BY s.duration_ns DESC LIMIT ?");
    args.push(((q.limit * 4).max(1) as i64).into());
    let err = |e| sqlite_err(conn, e);
    let mut stmt = conn.prepare(&sql).map_err(err)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), |r| {
            Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?))
        })
        .map_err(err)?;
    let mut out: Vec<(TraceId, u64)> = Vec::new();
    for row in rows {
        let (id, duration) = row.map_err(err)?;
        let id = TraceId::from_bytes(&id).map_err(|e| StoreError::corrupt(e.to_string()))?;
        if !out.iter().any(|(t, _)| *t == id) {
            out.push((id, duration.max(0) as u64));
        }
        if out.len() >= q.limit {
            break;
        }
    }
    Ok(out)
}
