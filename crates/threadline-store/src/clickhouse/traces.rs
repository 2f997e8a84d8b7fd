//! Trace reads on ClickHouse: a trace by id is one primary-key range of `spans` per day
//! partition; skeletons; a reader that opens a huge trace's spans a chunk at a time;
//! exemplars, requests served, sessions, services and operations. Search is `search`.

use threadline_model::{SpanId, SpanKind, SpanRecord, TenantId, TraceId};

use crate::clickhouse::client::Connection;
use crate::clickhouse::rows::{by_trace, HeadRow, Origins, SpanRow, HEAD_COLUMNS};
use crate::clickhouse::sql::{bind_all, equals, span_sql, trace_sql};
use crate::{
    ExemplarQuery, OpenSpans, RequestsServed, ServiceSummary, SkeletonSpan, SpanReader, StoreError,
};

pub(crate) fn get_trace(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Vec<SpanRecord>, StoreError> {
    Ok(get_traces(conn, tenant, &[trace_id])?
        .remove(&trace_id)
        .unwrap_or_default())
}

/// The spans of several traces in one query (at most a few thousand ids), by trace,
/// each in start order.
pub(crate) fn get_traces(
    conn: &Connection,
    tenant: &TenantId,
    trace_ids: &[TraceId],
) -> Result<foldhash::HashMap<TraceId, Vec<SpanRecord>>, StoreError> {
    if trace_ids.is_empty() {
        return Ok(Default::default());
    }
    let list: Vec<String> = trace_ids.iter().map(|id| trace_sql(*id)).collect();
    // By key, and the ids as PREWHERE (as every read by trace id here): of the
    // granules the key selects (one per id and part), only those holding an id are
    // read past `trace_id` (search's heads of 256 traces at 10 M spans: 286 → 33 ms).
    let query = conn
        .client
        .query(&format!(
            "SELECT ?fields FROM spans PREWHERE trace_id IN ({}) WHERE tenant = ?
             ORDER BY trace_id, span_id, version DESC LIMIT 1 BY trace_id, span_id",
            list.join(",")
        ))
        .bind(tenant.as_str());
    let rows: Vec<SpanRow> = conn.fetch_all(query)?;
    let mut traces = by_trace(rows, |r| r.trace_id, SpanRow::into_record)?;
    for spans in traces.values_mut() {
        spans.sort_unstable_by_key(|s| (s.start_time_unix_nano, s.span_id));
    }
    Ok(traces)
}

pub(crate) fn skeleton(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Vec<SkeletonSpan>, StoreError> {
    let query = conn
        .client
        .query(&format!(
            "SELECT {HEAD_COLUMNS} FROM spans PREWHERE trace_id = {} WHERE tenant = ?
             ORDER BY span_id, version DESC LIMIT 1 BY span_id",
            trace_sql(trace_id)
        ))
        .bind(tenant.as_str());
    let rows: Vec<HeadRow> = conn.fetch_all(query)?;
    let mut heads: Vec<SkeletonSpan> = rows.into_iter().map(HeadRow::into_skeleton).collect();
    in_start_order(&mut heads);
    Ok(heads)
}

/// A trace's skeleton in start order. Reads keep the first copy of a span id (the
/// highest version) before they order: a copy sent again with another start is a row
/// of its own under the key (trace, start, span).
pub(crate) fn in_start_order(heads: &mut [SkeletonSpan]) {
    heads.sort_unstable_by_key(|h| (h.start_time_unix_nano, h.span_id));
}

/// Spans a reader fetches per request once a walk asks for one it has not read.
const READ_AHEAD: usize = 2_000;

/// Opens the spans of one trace a chunk at a time, in the skeleton's order.
struct ClickHouseSpans {
    conn: std::sync::Arc<Connection>,
    tenant: TenantId,
    trace_id: TraceId,
    /// The skeleton's span ids, in order: what the next chunk reads.
    order: Vec<SpanId>,
    chunk: foldhash::HashMap<SpanId, SpanRecord>,
    origins: Origins,
}

impl OpenSpans for ClickHouseSpans {
    fn span(&mut self, skeleton: &SkeletonSpan) -> Result<SpanRecord, StoreError> {
        if let Some(span) = self.chunk.remove(&skeleton.span_id) {
            return Ok(span);
        }
        let at = self
            .order
            .iter()
            .position(|id| *id == skeleton.span_id)
            .unwrap_or(0);
        let mut ids: Vec<SpanId> = self
            .order
            .iter()
            .skip(at)
            .take(READ_AHEAD)
            .copied()
            .collect();
        if !ids.contains(&skeleton.span_id) {
            ids.push(skeleton.span_id);
        }
        let list: Vec<String> = ids.iter().map(|id| span_sql(*id)).collect();
        let query = self
            .conn
            .client
            .query(&format!(
                "SELECT ?fields FROM spans PREWHERE trace_id = {} AND span_id IN ({}) WHERE tenant = ?
                 ORDER BY span_id, version DESC LIMIT 1 BY span_id",
                trace_sql(self.trace_id),
                list.join(",")
            ))
            .bind(self.tenant.as_str());
        let rows: Vec<SpanRow> = self.conn.fetch_all(query)?;
        self.chunk.clear();
        for row in rows {
            let span = row.into_record(&mut self.origins)?;
            self.chunk.insert(span.span_id, span);
        }
        self.chunk.remove(&skeleton.span_id).ok_or_else(|| {
            StoreError::not_found(format!(
                "span {} of trace {} is no longer stored",
                skeleton.span_id, self.trace_id
            ))
        })
    }
}

pub(crate) fn open_trace(
    conn: &std::sync::Arc<Connection>,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Option<(Vec<SkeletonSpan>, SpanReader)>, StoreError> {
    let heads = skeleton(conn, tenant, trace_id)?;
    if heads.is_empty() {
        return Ok(None);
    }
    let reader = ClickHouseSpans {
        conn: std::sync::Arc::clone(conn),
        tenant: tenant.clone(),
        trace_id,
        order: heads.iter().map(|h| h.span_id).collect(),
        chunk: Default::default(),
        origins: Origins::default(),
    };
    Ok(Some((heads, SpanReader::new(reader))))
}

pub(crate) fn get_span(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
    span_id: SpanId,
) -> Result<Option<SpanRecord>, StoreError> {
    let query = conn
        .client
        .query(&format!(
            "SELECT ?fields FROM spans PREWHERE trace_id = {} AND span_id = {} WHERE tenant = ?
             ORDER BY version DESC LIMIT 1",
            trace_sql(trace_id),
            span_sql(span_id)
        ))
        .bind(tenant.as_str());
    let rows: Vec<SpanRow> = conn.fetch_all(query)?;
    let mut origins = Origins::default();
    rows.into_iter()
        .next()
        .map(|r| r.into_record(&mut origins))
        .transpose()
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Exemplar {
    trace_id: [u8; 16],
    duration_ns: u64,
}

pub(crate) fn exemplars(
    conn: &Connection,
    tenant: &TenantId,
    q: &ExemplarQuery,
) -> Result<Vec<(TraceId, u64)>, StoreError> {
    use threadline_analysis::Dimension as D;
    let mut sql = format!(
        "SELECT trace_id, duration_ns FROM span_search
         WHERE tenant = ? AND start_ns BETWEEN {} AND {}",
        q.from_ns.max(0),
        q.to_ns.max(0)
    );
    let mut args = vec![tenant.as_str().to_owned()];
    for (dimension, value) in &q.filters {
        let column = match dimension {
            D::Service => "service",
            D::Route => "route",
            D::Model => "model",
            D::Adapter => "adapter",
            D::Instance => "instance",
            D::Image => "image",
            D::PromptVersion => "prompt_version",
            D::AbGroup => "ab_group",
            D::GrayTag | D::Provider | D::UpstreamService => {
                return Err(StoreError::invalid_query(format!(
                    "spans do not carry {dimension:?}: exemplars filter by {:?}",
                    crate::EXEMPLAR_DIMENSIONS
                )))
            }
        };
        sql.push_str(&format!(" AND {}", equals(column, value, &mut args)));
    }
    if q.errors_only {
        sql.push_str(" AND error = 1");
    }
    if let Some(min) = q.min_duration_ns {
        sql.push_str(&format!(" AND duration_ns >= {}", min.max(0)));
    }
    sql.push_str(&format!(
        " ORDER BY duration_ns DESC LIMIT {}",
        (q.limit * 4).max(1)
    ));
    let rows: Vec<Exemplar> = conn.fetch_all(bind_all(conn.client.query(&sql), &args))?;
    let mut out: Vec<(TraceId, u64)> = Vec::new();
    for row in rows {
        let id = TraceId(row.trace_id);
        if !out.iter().any(|(t, _)| *t == id) {
            out.push((id, row.duration_ns.min(i64::MAX as u64)));
        }
        if out.len() >= q.limit {
            break;
        }
    }
    Ok(out)
}

pub(crate) fn requests_served(
    conn: &Connection,
    tenant: &TenantId,
    adapters: &[String],
    instances: &[String],
    since_ns: i64,
) -> Result<RequestsServed, StoreError> {
    if adapters.is_empty() && instances.is_empty() {
        return Ok(RequestsServed::default());
    }
    let count = |condition: &str, args: &[&str]| -> Result<u64, StoreError> {
        let mut query = conn
            .client
            .query(&format!(
                "SELECT uniqExact(trace_id) FROM span_search
                 WHERE tenant = ? AND start_ns >= {} AND ({condition})",
                since_ns.max(0)
            ))
            .bind(tenant.as_str());
        for a in args {
            query = query.bind(*a);
        }
        let client_query = query;
        conn.run(async move { client_query.fetch_one::<u64>().await })
    };
    let list = |column: &str, values: &[String]| -> String {
        if values.is_empty() {
            "0".to_owned()
        } else {
            format!("{column} IN ({})", vec!["?"; values.len()].join(", "))
        }
    };
    let mut args: Vec<&str> = adapters.iter().map(String::as_str).collect();
    args.extend(instances.iter().map(String::as_str));
    let traces = count(
        &format!(
            "{} OR {}",
            list("adapter", adapters),
            list("instance", instances)
        ),
        &args,
    )?;
    let mut by_node = Vec::new();
    for (kind, column, values) in [
        (threadline_model::NodeKind::Adapter, "adapter", adapters),
        (threadline_model::NodeKind::Instance, "instance", instances),
    ] {
        for id in values {
            let n = count(&format!("{column} = ?"), &[id])?;
            by_node.push((threadline_model::NodeId::new(kind, id.clone()), n));
        }
    }
    Ok(RequestsServed { traces, by_node })
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Session {
    session_id: String,
    _last: u64,
}

pub(crate) fn recent_sessions(
    conn: &Connection,
    tenant: &TenantId,
    (from, to): (Option<u64>, Option<u64>),
    user: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut sql = format!(
        "SELECT session_id, max(start_ns) AS last FROM span_search
         WHERE tenant = ? AND session_id != '' AND start_ns BETWEEN {} AND {}",
        from.unwrap_or(0),
        to.unwrap_or(u64::MAX)
    );
    if user.is_some() {
        sql.push_str(" AND user_id = ?");
    }
    sql.push_str(&format!(
        " GROUP BY session_id ORDER BY last DESC, session_id LIMIT {}",
        limit.max(1)
    ));
    let mut query = conn.client.query(&sql).bind(tenant.as_str());
    if let Some(u) = user {
        query = query.bind(u);
    }
    let rows: Vec<Session> = conn.fetch_all(query)?;
    Ok(rows.into_iter().map(|s| s.session_id).collect())
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Operation {
    service: String,
    name: String,
    kind: u8,
}

pub(crate) fn services(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Vec<ServiceSummary>, StoreError> {
    let query = conn
        .client
        .query("SELECT DISTINCT toString(service) FROM operations WHERE tenant = ? ORDER BY 1")
        .bind(tenant.as_str());
    let names: Vec<String> = conn.fetch_all(query)?;
    Ok(names
        .into_iter()
        .map(|name| ServiceSummary { name })
        .collect())
}

pub(crate) fn operations(
    conn: &Connection,
    tenant: &TenantId,
    service: Option<&str>,
) -> Result<Vec<(String, String, SpanKind)>, StoreError> {
    let mut sql = "SELECT DISTINCT toString(service) AS service, toString(name) AS name, kind
                   FROM operations WHERE tenant = ?"
        .to_owned();
    if service.is_some() {
        sql.push_str(" AND service = ?");
    }
    sql.push_str(" ORDER BY service, name, kind");
    let mut query = conn.client.query(&sql).bind(tenant.as_str());
    if let Some(s) = service {
        query = query.bind(s);
    }
    let rows: Vec<Operation> = conn.fetch_all(query)?;
    Ok(rows
        .into_iter()
        .map(|o| (o.service, o.name, SpanKind::from_otlp(i32::from(o.kind))))
        .collect())
}
