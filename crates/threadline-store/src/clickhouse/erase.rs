//! Erasure on ClickHouse: the traces of a user or session (and spans sent with a
//! resource naming them), their logs and the subject's own log records go; its copies
//! elsewhere are rewritten (`crate::erasure` has the rules every backend follows):
//! rollup series and cells, operation names, incidents, the lineage log.
//!
//! ClickHouse deletes and rewrites rows by mutations, which write new parts without the
//! rows and leave the old parts inactive; an inactive part's files are unlinked once it
//! is older than the table's `old_parts_lifetime` (set low by `schema`). The erasure
//! runs alone in the writer's queue (after every write queued before it), waits until
//! its mutations are done and then until no inactive part is left, and reports
//! `disk_cleared` only then: no byte of the subject is left in a file ClickHouse reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use threadline_analysis::{RollupCell, SeriesKey};
use threadline_model::{SpanOrigin, TenantId};

use crate::clickhouse::client::Connection;
use crate::clickhouse::graph::Graph;
use crate::clickhouse::rows::{CellRow, IncidentRow};
use crate::clickhouse::schema;
use crate::clickhouse::sql::{string as sql_string, trace_sql};
use crate::clickhouse::{next_stamp, writer, ClickHouseStore};
use crate::erasure::{json_form, redact_json_body, CopiesErased, ERASED};
use crate::{Applied, ErasureRecord, ErasureReport, ErasureSubject, StoreError, WriteAck};

/// How long an erasure waits for its mutations and for the old parts to go.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) fn submit(
    store: &ClickHouseStore,
    tenant: &TenantId,
    subject: ErasureSubject,
    requested_by: &str,
    requested_ns: i64,
) -> Result<WriteAck, StoreError> {
    let conn = Arc::clone(&store.conn);
    let graph = Arc::clone(&store.graph);
    let tenant = tenant.clone();
    let requested_by = requested_by.to_owned();
    store.writer.exclusive(move || async move {
        let work = tokio::task::spawn_blocking(move || {
            run(
                &conn,
                &graph,
                &tenant,
                &subject,
                &requested_by,
                requested_ns,
            )
        });
        match work.await {
            Ok(Ok(report)) => Ok(Applied {
                changed: true,
                assets: Vec::new(),
                erasure: Some(report),
            }),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(format!("the erasure task failed: {e}").into()),
        }
    })
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Matched {
    trace_id: [u8; 16],
    start: u64,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct OriginMatch {
    trace_id: [u8; 16],
    start_ns: u64,
    #[serde(with = "crate::clickhouse::rows::bytes")]
    origin: Vec<u8>,
}

fn count(conn: &Connection, sql: String) -> Result<u64, StoreError> {
    let client = conn.client.clone();
    conn.run(async move { client.query(&sql).fetch_one::<u64>().await })
}

fn run(
    conn: &Connection,
    graph: &Graph,
    tenant: &TenantId,
    subject: &ErasureSubject,
    requested_by: &str,
    requested_ns: i64,
) -> Result<ErasureReport, StoreError> {
    let value = subject.value();
    let t = sql_string(tenant.as_str());
    let v = sql_string(value);
    let column = subject.kind();
    // Whole traces (the embedded store's rule): a span names the subject (its user or
    // session), its route holds it (`/v1/users/ID/chat`), or it was sent with a
    // resource that names it anywhere.
    let mut matched: Vec<([u8; 16], i64)> = conn
        .fetch_all::<Matched>(conn.client.query(&format!(
            "SELECT trace_id, min(start_ns) AS start FROM span_search
             WHERE tenant = {t} AND ({column} = {v} OR (route != '' AND position(route, {v}) > 0))
             GROUP BY trace_id"
        )))?
        .into_iter()
        .map(|m| (m.trace_id, m.start.min(i64::MAX as u64) as i64))
        .collect();
    if !value.is_empty() {
        let by_origin: Vec<OriginMatch> = conn.fetch_all(conn.client.query(&format!(
            "SELECT trace_id, start_ns, any(origin) FROM spans
             WHERE tenant = {t} AND position(origin, {v}) > 0 GROUP BY trace_id, start_ns"
        )))?;
        for m in by_origin {
            let origin: SpanOrigin = postcard::from_bytes(&m.origin).map_err(|e| {
                StoreError::corrupt(format!("a stored origin does not decode: {e}"))
            })?;
            if crate::erasure::origin_names(&origin, value) {
                matched.push((m.trace_id, m.start_ns.min(i64::MAX as u64) as i64));
            }
        }
    }
    let (traces, minutes) =
        crate::erasure::traces_and_minutes(matched.iter().map(|(id, start)| (id, *start)));
    // Trace ids a statement at a time (ClickHouse bounds a query's size).
    let trace_lists: Vec<String> = traces
        .chunks(1_000)
        .map(|chunk| {
            chunk
                .iter()
                .map(|id| trace_sql(threadline_model::TraceId(**id)))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let mut spans_deleted = 0;
    let mut log_keys: std::collections::BTreeSet<(u64, i64)> = Default::default();
    for list in &trace_lists {
        spans_deleted += count(
            conn,
            format!(
                "SELECT uniqExact(trace_id, span_id) FROM spans
                 WHERE tenant = {t} AND trace_id IN ({list})"
            ),
        )?;
        let keys: Vec<(u64, i64)> = conn.fetch_all(conn.client.query(&format!(
            "SELECT DISTINCT time_ns, seq FROM logs
             WHERE tenant = {t} AND has_trace = 1 AND trace_id IN ({list})"
        )))?;
        log_keys.extend(keys);
    }
    // The subject's own records, in a trace or not.
    let own: Vec<(u64, i64)> = conn.fetch_all(conn.client.query(&format!(
        "SELECT DISTINCT time_ns, seq FROM logs WHERE tenant = {t} AND {column} = {v}"
    )))?;
    log_keys.extend(own);
    let logs_deleted = log_keys.len() as u64;
    let trace_keys: Vec<String> = traces
        .iter()
        .map(|id| trace_sql(threadline_model::TraceId(**id)))
        .collect();
    for table in ["spans", "span_search"] {
        delete_in(conn, table, &t, "trace_id", &trace_keys)?;
    }
    let log_keys: Vec<String> = log_keys
        .iter()
        .map(|(t, s)| format!("({t}, {s})"))
        .collect();
    delete_in(conn, "logs", &t, "(time_ns, seq)", &log_keys)?;
    let mut copies = CopiesErased::default();
    if !value.is_empty() {
        let names_where =
            format!("tenant = {t} AND (position(service, {v}) > 0 OR position(name, {v}) > 0)");
        copies.names = count(
            conn,
            format!("SELECT count() FROM operations WHERE {names_where}"),
        )?;
        if copies.names > 0 {
            let hashes: Vec<u64> = conn.fetch_all(conn.client.query(&format!(
                "SELECT DISTINCT cityHash64(service, name, kind) FROM operations WHERE {names_where}"
            )))?;
            let hashes: Vec<String> = hashes.iter().map(u64::to_string).collect();
            delete_in(
                conn,
                "operations",
                &t,
                "cityHash64(service, name, kind)",
                &hashes,
            )?;
        }
        let (series, cells) = rollups(conn, tenant, value, minutes)?;
        copies.rollup_series = series;
        copies.rollup_cells = cells;
        copies.incidents = incidents(conn, tenant, value)?;
        let lineage = graph.erase(tenant, subject, requested_by, requested_ns)?;
        copies.lineage_nodes = lineage.lineage_nodes;
        copies.lineage_edges = lineage.lineage_edges;
    }
    let disk_cleared = settle(conn)?;
    let erasure_id = count(
        conn,
        format!("SELECT toUInt64(max(erasure_id) + 1) FROM erasures WHERE tenant = {t}"),
    )?
    .max(1) as i64;
    let record = ErasureRecordRow {
        tenant: tenant.as_str().to_owned(),
        erasure_id,
        requested_by: requested_by.to_owned(),
        requested_ns,
        subject_kind: subject.kind().to_owned(),
        subject_sha256: subject.digest(),
        traces_matched: traces.len() as u64,
        spans_deleted,
    };
    let client = conn.client.clone();
    conn.run(async move {
        let mut insert = client.insert::<ErasureRecordRow>("erasures").await?;
        insert.write(&record).await?;
        insert.end().await
    })?;
    Ok(ErasureReport {
        erasure_id,
        traces_matched: traces.len() as u64,
        spans_deleted,
        logs_deleted,
        blocks_rewritten: 0,
        disk_cleared,
        copies,
    })
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct StoredCell {
    minute: i64,
    series: String,
    #[serde(with = "crate::clickhouse::rows::bytes")]
    cell: Vec<u8>,
    batch: u64,
}

/// Rollup rows whose series names the subject, or whose cell does (in the erased
/// spans' minutes), are written again redacted and the originals deleted. Returns
/// (series rewritten, cells rewritten).
fn rollups(
    conn: &Connection,
    tenant: &TenantId,
    subject: &str,
    minutes: Option<(i64, i64)>,
) -> Result<(u64, u64), StoreError> {
    let t = sql_string(tenant.as_str());
    let in_minutes = minutes.map_or("0".to_owned(), |(a, b)| {
        format!("minute BETWEEN {a} AND {b}")
    });
    let rows: Vec<StoredCell> = conn.fetch_all(conn.client.query(&format!(
        "SELECT minute, series, cell, batch FROM rollup_cells
         WHERE tenant = {t} AND (position(series, {jf}) > 0 OR {in_minutes})
         LIMIT 1 BY minute, series, batch",
        jf = sql_string(&json_form(subject))
    )))?;
    let mut rewritten = Vec::new();
    let mut gone = Vec::new();
    let mut series = std::collections::HashSet::new();
    let mut cells = 0;
    for row in rows {
        let Some(key) = SeriesKey::from_text(&row.series) else {
            continue;
        };
        let cell: RollupCell = postcard::from_bytes(&row.cell).map_err(|e| {
            StoreError::corrupt(format!("a stored rollup cell does not decode: {e}"))
        })?;
        let new_key = key.redacted(subject, ERASED);
        let new_cell = cell.redacted(subject, ERASED);
        if new_key.is_none() && new_cell.is_none() {
            continue;
        }
        if new_key.is_some() {
            series.insert(row.series.clone());
        }
        if new_cell.is_some() {
            cells += 1;
        }
        rewritten.push(CellRow {
            tenant: tenant.as_str().to_owned(),
            minute: row.minute,
            series: new_key.unwrap_or(key).to_text(),
            cell: writer::encode(&new_cell.unwrap_or(cell), "rollup cell")?,
            // A fresh id: the rewritten row must not collide with the one it replaces.
            batch: next_stamp(),
        });
        gone.push(format!(
            "({}, {}, cityHash64({}))",
            row.minute,
            row.batch,
            sql_string(&row.series)
        ));
    }
    if rewritten.is_empty() {
        return Ok((0, 0));
    }
    let client = conn.client.clone();
    conn.wait(async move { writer::insert(&client, "rollup_cells", &rewritten).await })?;
    let gone = hashed_keys(conn, &gone)?;
    delete_in(
        conn,
        "rollup_cells",
        &t,
        "(minute, batch, cityHash64(series))",
        &gone,
    )?;
    Ok((series.len() as u64, cells))
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct NamedIncident {
    id: String,
    onset: i64,
    #[serde(with = "crate::clickhouse::rows::bytes")]
    body: Vec<u8>,
}

/// Incidents any of whose versions name the subject: the newest version written
/// again redacted, every older version deleted. How many.
fn incidents(conn: &Connection, tenant: &TenantId, subject: &str) -> Result<u64, StoreError> {
    let t = sql_string(tenant.as_str());
    let named: Vec<NamedIncident> = conn.fetch_all(conn.client.query(&format!(
        "SELECT id, argMax(onset_minute, version), argMax(body, version) FROM incidents
         WHERE tenant = {t} AND id IN (
           SELECT id FROM incidents WHERE tenant = {t} AND position(body, {jf}) > 0)
         GROUP BY id",
        jf = sql_string(&json_form(subject))
    )))?;
    if named.is_empty() {
        return Ok(0);
    }
    let version = next_stamp();
    let mut rows = Vec::new();
    for n in &named {
        let body = String::from_utf8_lossy(&n.body).into_owned();
        let body = redact_json_body(&body, subject).unwrap_or(body);
        rows.push(IncidentRow {
            tenant: tenant.as_str().to_owned(),
            id: n.id.clone(),
            onset_minute: n.onset,
            body: body.into_bytes(),
            version,
        });
    }
    let ids: Vec<String> = named
        .iter()
        .map(|n| format!("cityHash64({})", sql_string(&n.id)))
        .collect();
    let ids = hashed_keys(conn, &ids)?;
    let client = conn.client.clone();
    conn.wait(async move { writer::insert(&client, "incidents", &rows).await })?;
    for chunk in ids.chunks(500) {
        schema::delete_where(
            conn,
            "incidents",
            &format!(
                "tenant = {t} AND version < {version} AND cityHash64(id) IN ({})",
                chunk.join(", ")
            ),
        )?;
    }
    Ok(named.len() as u64)
}

/// Deletes the tenant's rows of `table` whose `key` is one of `keys` (SQL literals that
/// hold no subject text: a mutation's statement is kept in a file of the table's
/// directory, so it may name rows only by numbers and hashes).
fn delete_in(
    conn: &Connection,
    table: &str,
    tenant: &str,
    key: &str,
    keys: &[String],
) -> Result<(), StoreError> {
    for chunk in keys.chunks(1000) {
        schema::delete_where(
            conn,
            table,
            &format!("tenant = {tenant} AND {key} IN ({})", chunk.join(", ")),
        )?;
    }
    Ok(())
}

/// Key expressions that hash a text (`cityHash64('…')`) computed by the server, so the
/// text itself never reaches a mutation's statement.
fn hashed_keys(conn: &Connection, expressions: &[String]) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::with_capacity(expressions.len());
    for chunk in expressions.chunks(500) {
        let sql = format!(
            "SELECT toString(x) FROM (SELECT arrayJoin([{}]) AS x)",
            chunk.join(", ")
        );
        let rows: Vec<String> = conn.fetch_all(conn.client.query(&sql))?;
        out.extend(rows);
    }
    Ok(out)
}

/// Waits until this database's mutations are done, then until its inactive parts are
/// gone; whether they went within the timeout. On a cluster, on each shard's replica
/// that answers reads (`schema::cluster_system`); the others apply the same mutations
/// from the replication log.
fn settle(conn: &Connection) -> Result<bool, StoreError> {
    let started = Instant::now();
    let (mutations, parts) = match conn.cluster {
        None => ("system.mutations", "system.parts"),
        Some(_) => ("cluster_mutations", "cluster_parts"),
    };
    let db = conn.database.clone();
    loop {
        let pending = count(
            conn,
            format!("SELECT count() FROM {mutations} WHERE database = '{db}' AND is_done = 0"),
        )?;
        if pending == 0 {
            break;
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            return Err(StoreError::unavailable(
                "ClickHouse has not finished the erasure's mutations: retry the erasure",
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    loop {
        let inactive = count(
            conn,
            format!("SELECT count() FROM {parts} WHERE database = '{db}' AND active = 0"),
        )?;
        if inactive == 0 {
            return Ok(true);
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[derive(clickhouse::Row, serde::Serialize, serde::Deserialize)]
struct ErasureRecordRow {
    tenant: String,
    erasure_id: i64,
    requested_by: String,
    requested_ns: i64,
    subject_kind: String,
    subject_sha256: String,
    traces_matched: u64,
    spans_deleted: u64,
}

pub(crate) fn audit_log(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Vec<ErasureRecord>, StoreError> {
    let rows: Vec<ErasureRecordRow> = conn.fetch_all(
        conn.client
            .query(
                "SELECT ?fields FROM erasures WHERE tenant = ?
                 ORDER BY erasure_id DESC LIMIT 1 BY erasure_id LIMIT 1000",
            )
            .bind(tenant.as_str()),
    )?;
    Ok(rows
        .into_iter()
        .map(|r| ErasureRecord {
            erasure_id: r.erasure_id,
            requested_by: r.requested_by,
            requested_ns: r.requested_ns,
            subject_kind: r.subject_kind,
            subject_sha256: r.subject_sha256,
            traces_matched: r.traces_matched,
            spans_deleted: r.spans_deleted,
        })
        .collect())
}
