//! Log records: their rows (`logs`), compressed details (`log_blocks`, one per export
//! request, as span details are), origins (shared with spans), and their full-text
//! index (`log_text`, one document per block, as `text_index` builds for spans).
//!
//! Reads: the logs of a trace or one span, in time order (through the index on trace
//! id: log records are few next to spans — a handful per model call — so a random
//! index write per record is affordable where it was not for span ids); and a search,
//! newest first by time, with text, severity, service, trace and window filters.
use rusqlite::types::Value;
use rusqlite::{params, Connection, Transaction};
use threadline_model::{LogRecord, SpanId, TenantId, TraceId};

use crate::sqlite::query::{tenant_key, BlockCache, DetailSlot, OriginCache};
use crate::sqlite::text_index::{self, BlockWords, TextQuery};
use crate::sqlite::{codec, sqlite_err, StoreError};

/// One record, encoded into column values.
struct LogRow {
    trace_id: Option<[u8; 16]>,
    span_id: Option<[u8; 8]>,
    time_ns: i64,
    severity: i32,
    event_name: String,
    service: String,
    origin_hash: i64,
    user_id: Option<String>,
    session_id: Option<String>,
    block_offset: u32,
    block_len: u32,
}

/// The log records of one request, encoded and ready for the writer.
pub(crate) struct PreparedLogs {
    pub(crate) tenant: TenantId,
    rows: Vec<LogRow>,
    origins: Vec<(i64, Vec<u8>)>,
    block: Vec<u8>,
    text: String,
    pub(crate) encoded_bytes: usize,
}

impl PreparedLogs {
    pub(crate) fn encode(tenant: &TenantId, records: &[LogRecord]) -> Result<Self, StoreError> {
        let block = codec::encode_log_block(records.iter().map(|r| &r.detail))?;
        let mut origins = codec::BatchOrigins::default();
        let mut words = BlockWords::default();
        let mut rows = Vec::with_capacity(records.len());
        for (record, (block_offset, block_len)) in records.iter().zip(block.slots) {
            let (origin_hash, _) = origins.hash(&record.origin)?;
            record.detail.for_each_text(|t| words.add_text(t));
            let (user_id, session_id) = record.detail.subject_ids();
            rows.push(LogRow {
                trace_id: record.trace_id.map(|t| t.0),
                span_id: record.span_id.map(|s| s.0),
                time_ns: record.time_unix_nano.min(i64::MAX as u64) as i64,
                severity: record.detail.severity_number,
                event_name: record.detail.event_name.clone(),
                service: record.service.clone(),
                origin_hash,
                user_id: user_id.map(str::to_owned),
                session_id: session_id.map(str::to_owned),
                block_offset,
                block_len,
            });
        }
        let text = words.document();
        let encoded_bytes = block.blob.len() + text.len() + origins.bytes() + rows.len() * 160;
        Ok(Self {
            tenant: tenant.clone(),
            rows,
            origins: origins.encoded,
            block: block.blob,
            text,
            encoded_bytes,
        })
    }

    pub(crate) fn record_count(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn origins(&self) -> &[(i64, Vec<u8>)] {
        &self.origins
    }
}

/// Writes the records in the writer's transaction (origins are written by the caller).
pub(crate) fn insert(
    tx: &Transaction<'_>,
    tenant_id: i64,
    logs: &PreparedLogs,
) -> rusqlite::Result<()> {
    if logs.rows.is_empty() {
        return Ok(());
    }
    tx.prepare_cached("INSERT INTO log_blocks (tenant_id, block) VALUES (?1, ?2)")?
        .execute(params![tenant_id, logs.block])?;
    let block_id = tx.last_insert_rowid();
    let mut stmt = tx.prepare_cached(
        "INSERT INTO logs (tenant_id, trace_id, span_id, time_ns, severity, event_name, service,
            origin_hash, user_id, session_id, block_id, block_offset, block_len)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    for row in &logs.rows {
        stmt.execute(params![
            tenant_id,
            row.trace_id.as_ref().map(|t| &t[..]),
            row.span_id.as_ref().map(|s| &s[..]),
            row.time_ns,
            row.severity,
            row.event_name,
            row.service,
            row.origin_hash,
            row.user_id,
            row.session_id,
            block_id,
            row.block_offset,
            row.block_len,
        ])?;
    }
    text_index::insert_into(tx, "log_text", block_id, &logs.text)
}

pub(crate) use crate::log_search::{LogCursor, LogPage, LogQuery, StoredLog};

const LOG_COLUMNS: &str =
    "rowid, trace_id, span_id, time_ns, service, origin_hash, block_id, block_offset, block_len";

/// Reads rows selected with `LOG_COLUMNS` into records.
struct LogReader {
    origins: OriginCache,
    blocks: BlockCache,
}

impl LogReader {
    fn new(tenant_id: i64) -> Self {
        Self {
            origins: OriginCache::new(tenant_id),
            blocks: BlockCache::logs(),
        }
    }

    fn read(
        &mut self,
        conn: &Connection,
        row: &rusqlite::Row<'_>,
    ) -> Result<StoredLog, StoreError> {
        let err = |e| sqlite_err(conn, e);
        let corrupt = |e: threadline_model::IdError| StoreError::corrupt(e.to_string());
        let trace: Option<Vec<u8>> = row.get(1).map_err(err)?;
        let span: Option<Vec<u8>> = row.get(2).map_err(err)?;
        let slot = DetailSlot::from_row(conn, row, 6)?;
        Ok(StoredLog {
            seq: row.get(0).map_err(err)?,
            record: LogRecord {
                time_unix_nano: row.get::<_, i64>(3).map_err(err)?.max(0) as u64,
                trace_id: trace
                    .map(|t| TraceId::from_bytes(&t))
                    .transpose()
                    .map_err(corrupt)?,
                span_id: span
                    .map(|s| SpanId::from_bytes(&s))
                    .transpose()
                    .map_err(corrupt)?,
                service: row.get(4).map_err(err)?,
                detail: self.blocks.log(conn, slot)?,
                origin: self.origins.get(conn, row.get(5).map_err(err)?)?,
            },
        })
    }
}

/// The logs of a trace (of one span when given), oldest first.
pub(crate) fn logs_of(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
    span_id: Option<SpanId>,
) -> Result<Vec<LogRecord>, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {LOG_COLUMNS} FROM logs
             WHERE tenant_id = ?1 AND trace_id = ?2 AND (?3 IS NULL OR span_id = ?3)
             ORDER BY time_ns, rowid"
        ))
        .map_err(|e| sqlite_err(conn, e))?;
    let mut rows = stmt
        .query(params![
            tenant_id,
            &trace_id.0[..],
            span_id.as_ref().map(|s| &s.0[..])
        ])
        .map_err(|e| sqlite_err(conn, e))?;
    let mut reader = LogReader::new(tenant_id);
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
        out.push(reader.read(conn, row)?.record);
    }
    Ok(out)
}

/// Log records newest first (by time, then arrival), a page at a time.
pub(crate) fn search(
    conn: &Connection,
    tenant: &TenantId,
    q: &LogQuery,
) -> Result<LogPage, StoreError> {
    let empty = LogPage {
        logs: Vec::new(),
        next_cursor: None,
    };
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(empty);
    };
    let limit = q.limit.clamp(1, 1000);
    let text = q.text.as_deref().and_then(TextQuery::parse);
    let nanos = |n: u64| Value::Integer(n.min(i64::MAX as u64) as i64);
    let mut sql = format!("SELECT {LOG_COLUMNS} FROM logs WHERE tenant_id = ?");
    let mut args = vec![Value::Integer(tenant_id)];
    if let Some(text) = &text {
        // The blocks whose document holds every word; each record is checked below.
        sql.push_str(" AND block_id IN (SELECT rowid FROM log_text WHERE log_text MATCH ?)");
        args.push(Value::Text(text.fts_expression()));
    }
    if let Some(t) = q.trace_id {
        sql.push_str(" AND trace_id = ?");
        args.push(Value::Blob(t.0.to_vec()));
    }
    if let Some(s) = q.span_id {
        sql.push_str(" AND span_id = ?");
        args.push(Value::Blob(s.0.to_vec()));
    }
    if let Some(service) = &q.service {
        sql.push_str(" AND service = ?");
        args.push(Value::Text(service.clone()));
    }
    if let Some(min) = q.min_severity {
        sql.push_str(" AND severity >= ?");
        args.push(Value::Integer(i64::from(min)));
    }
    if let Some(prefix) = &q.event_prefix {
        sql.push_str(" AND substr(event_name, 1, ?) = ?");
        args.push(Value::Integer(prefix.len() as i64));
        args.push(Value::Text(prefix.clone()));
    }
    if let Some(from) = q.from_unix_nano {
        sql.push_str(" AND time_ns >= ?");
        args.push(nanos(from));
    }
    if let Some(to) = q.to_unix_nano {
        sql.push_str(" AND time_ns <= ?");
        args.push(nanos(to));
    }
    if let Some(c) = q.cursor {
        sql.push_str(" AND (time_ns < ? OR (time_ns = ? AND rowid < ?))");
        args.extend([nanos(c.time_unix_nano), nanos(c.time_unix_nano)]);
        args.push(Value::Integer(c.seq));
    }
    sql.push_str(" ORDER BY time_ns DESC, rowid DESC");
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| sqlite_err(conn, e))?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(args.iter()))
        .map_err(|e| sqlite_err(conn, e))?;
    let mut reader = LogReader::new(tenant_id);
    let mut logs = Vec::new();
    let mut more = false;
    while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
        let log = reader.read(conn, row)?;
        if let Some(text) = &text {
            if !text.matches_texts(|f| log.record.detail.for_each_text(f)) {
                continue;
            }
        }
        if logs.len() == limit {
            more = true;
            break;
        }
        logs.push(log);
    }
    let next_cursor = more.then(|| logs.last()).flatten().map(|l| LogCursor {
        time_unix_nano: l.record.time_unix_nano,
        seq: l.seq,
    });
    Ok(LogPage { logs, next_cursor })
}

/// Erasure of log records: those of the erased traces and those naming the subject.
/// Blanks their slots, rebuilds their blocks' documents, deletes the rows; returns how
/// many went.
pub(crate) fn erase(
    tx: &Connection,
    tenant_id: i64,
    traces: &[&Vec<u8>],
    subject_column: &str,
    subject: &str,
) -> Result<u64, StoreError> {
    let err = |e| sqlite_err(tx, e);
    let mut rows: Vec<(i64, i64, u32, u32)> = tx
        .prepare(&format!(
            "SELECT rowid, block_id, block_offset, block_len FROM logs
             WHERE tenant_id = ?1 AND {subject_column} = ?2"
        ))
        .and_then(|mut s| {
            s.query_map(params![tenant_id, subject], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<Result<_, _>>()
        })
        .map_err(err)?;
    {
        let mut by_trace = tx
            .prepare_cached(
                "SELECT rowid, block_id, block_offset, block_len FROM logs
                 WHERE tenant_id = ?1 AND trace_id = ?2",
            )
            .map_err(err)?;
        for trace in traces {
            let found = by_trace
                .query_map(params![tenant_id, trace], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(err)?;
            rows.extend(found);
        }
    }
    rows.sort_unstable();
    rows.dedup();
    let mut by_block: std::collections::BTreeMap<i64, Vec<(u32, u32)>> = Default::default();
    for (_, block, offset, len) in &rows {
        by_block.entry(*block).or_default().push((*offset, *len));
    }
    for (block_id, slots) in &by_block {
        let before = stored_document(tx, *block_id)?;
        let blob: Vec<u8> = tx
            .prepare_cached("SELECT block FROM log_blocks WHERE id = ?1")
            .and_then(|mut s| s.query_row([block_id], |r| r.get(0)))
            .map_err(err)?;
        let blanked = codec::blank_slots(&blob, slots)?;
        tx.prepare_cached("UPDATE log_blocks SET block = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![block_id, blanked]))
            .map_err(err)?;
        let mut delete = tx
            .prepare_cached(
                "DELETE FROM logs WHERE block_id = ?1 AND block_offset = ?2 AND tenant_id = ?3",
            )
            .map_err(err)?;
        for (offset, _) in slots {
            delete
                .execute(params![block_id, offset, tenant_id])
                .map_err(err)?;
        }
        let after = stored_document(tx, *block_id)?;
        text_index::replace_document(tx, "log_text", *block_id, &before, &after).map_err(err)?;
    }
    Ok(rows.len() as u64)
}

/// The document of a log block as its stored rows give it now.
fn stored_document(conn: &Connection, block_id: i64) -> Result<String, StoreError> {
    let slots: Vec<(u32, u32)> = conn
        .prepare_cached("SELECT block_offset, block_len FROM logs WHERE block_id = ?1")
        .and_then(|mut s| {
            s.query_map([block_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .map_err(|e| sqlite_err(conn, e))?;
    let mut blocks = BlockCache::logs();
    let details = slots
        .iter()
        .map(|(offset, len)| {
            let block = blocks.open(conn, block_id)?;
            codec::decode_log(&block, *offset, *len)
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let mut words = BlockWords::default();
    for d in &details {
        d.for_each_text(|t| words.add_text(t));
    }
    Ok(words.document())
}
