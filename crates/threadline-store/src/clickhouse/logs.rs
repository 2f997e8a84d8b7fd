//! OTLP log records on ClickHouse: `logs`, ordered by (tenant, time, sequence) for the
//! newest-first list; a trace's logs are found by scanning the tenant's rows for its id
//! (a bloom filter skips granules on servers that have skip indexes). Free text is
//! screened in SQL on the record's raw detail and checked in full here, as spans are.

use threadline_model::{LogRecord, SpanId, TenantId, TraceId};

use crate::clickhouse::client::Connection;
use crate::clickhouse::rows::{by_trace, LogRow, Origins, LOG_COLUMNS};
use crate::clickhouse::sql::{bind_all, trace_sql};
use crate::sqlite::text_index::TextQuery;
use crate::{LogCursor, LogPage, LogQuery, StoreError, StoredLog};

pub(crate) fn logs_of(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
    span_id: Option<SpanId>,
) -> Result<Vec<LogRecord>, StoreError> {
    Ok(logs_of_traces(conn, tenant, &[trace_id], span_id)?
        .remove(&trace_id)
        .unwrap_or_default())
}

/// The log records of several traces in one query (at most a few thousand ids), by
/// trace, each in time order; of one span of each only, with `span_id`.
pub(crate) fn logs_of_traces(
    conn: &Connection,
    tenant: &TenantId,
    trace_ids: &[TraceId],
    span_id: Option<SpanId>,
) -> Result<foldhash::HashMap<TraceId, Vec<LogRecord>>, StoreError> {
    if trace_ids.is_empty() {
        return Ok(Default::default());
    }
    let list: Vec<String> = trace_ids.iter().map(|id| trace_sql(*id)).collect();
    let mut sql = format!(
        "SELECT {LOG_COLUMNS} FROM logs PREWHERE trace_id IN ({}) WHERE tenant = ? AND has_trace = 1",
        list.join(",")
    );
    if let Some(s) = span_id {
        sql.push_str(&format!(
            " AND has_span = 1 AND span_id = unhex('{}')",
            hex::encode(s.0)
        ));
    }
    sql.push_str(
        " ORDER BY trace_id, time_ns, seq, version DESC LIMIT 1 BY trace_id, time_ns, seq",
    );
    let rows: Vec<LogRow> = conn.fetch_all(conn.client.query(&sql).bind(tenant.as_str()))?;
    by_trace(rows, |r| r.trace_id, LogRow::into_record)
}

pub(crate) fn search(
    conn: &Connection,
    tenant: &TenantId,
    q: &LogQuery,
) -> Result<LogPage, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let text = q.text.as_deref().and_then(TextQuery::parse);
    let mut sql = format!("SELECT {LOG_COLUMNS} FROM logs WHERE tenant = ?");
    let mut args = vec![tenant.as_str().to_owned()];
    if let Some(text) = &text {
        for word in text.words() {
            let f = if word.is_ascii() {
                "positionCaseInsensitive"
            } else {
                "positionCaseInsensitiveUTF8"
            };
            sql.push_str(&format!(" AND {f}(detail, ?) > 0"));
            args.push(word.clone());
        }
    }
    if let Some(t) = q.trace_id {
        sql.push_str(&format!(
            " AND has_trace = 1 AND trace_id = {}",
            trace_sql(t)
        ));
    }
    if let Some(s) = q.span_id {
        sql.push_str(&format!(
            " AND has_span = 1 AND span_id = unhex('{}')",
            hex::encode(s.0)
        ));
    }
    if let Some(service) = &q.service {
        sql.push_str(" AND service = ?");
        args.push(service.clone());
    }
    if let Some(min) = q.min_severity {
        sql.push_str(&format!(" AND severity >= {min}"));
    }
    if let Some(prefix) = &q.event_prefix {
        sql.push_str(" AND startsWith(event_name, ?)");
        args.push(prefix.clone());
    }
    if let Some(from) = q.from_unix_nano {
        sql.push_str(&format!(" AND time_ns >= {from}"));
    }
    if let Some(to) = q.to_unix_nano {
        sql.push_str(&format!(" AND time_ns <= {to}"));
    }
    if let Some(c) = q.cursor {
        sql.push_str(&format!(
            " AND (time_ns < {t} OR (time_ns = {t} AND seq < {s}))",
            t = c.time_unix_nano,
            s = c.seq
        ));
    }
    sql.push_str(" ORDER BY time_ns DESC, seq DESC, version DESC LIMIT 1 BY time_ns, seq");
    let mut logs = Vec::new();
    let mut more = false;
    let mut origins = Origins::default();
    // Pages of candidates until the page is full: the text screen lets through a few
    // that the full check drops.
    let batch = (limit + 1) * 2;
    let mut offset = 0;
    'pages: loop {
        let page_sql = format!("{sql} LIMIT {offset}, {batch}");
        let rows: Vec<LogRow> = conn.fetch_all(bind_all(conn.client.query(&page_sql), &args))?;
        let exhausted = rows.len() < batch;
        offset += rows.len();
        for row in rows {
            let seq = row.seq;
            let record = row.into_record(&mut origins)?;
            if let Some(text) = &text {
                if !text.matches_texts(|f| record.detail.for_each_text(f)) {
                    continue;
                }
            }
            if logs.len() == limit {
                more = true;
                break 'pages;
            }
            logs.push(StoredLog { seq, record });
        }
        if exhausted {
            break;
        }
    }
    let next_cursor = more.then(|| logs.last()).flatten().map(|l| LogCursor {
        time_unix_nano: l.record.time_unix_nano,
        seq: l.seq,
    });
    Ok(LogPage { logs, next_cursor })
}
