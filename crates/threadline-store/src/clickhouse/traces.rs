//! Trace reads and search on ClickHouse.
//!
//! A trace by id is one primary-key range of `spans` per day partition. Search runs on
//! `span_search` (ordered by start time) with the embedded store's semantics (see
//! `sqlite::search`): a trace matches when each filter holds on some span of it,
//! the first filter (the anchor) on a span starting in the time range, and the trace's
//! own start is in the range; newest trace start first, ties by trace id descending.
//!
//! How: the anchor's matching spans are read newest first (`ORDER BY start_ns DESC
//! LIMIT k`, in the narrowest window back from `to` that holds k of them: 1 h, 6 h, 1 d,
//! 7 d, 30 d, all). A trace starts no later than any of its spans, so every trace that
//! starts after the k-th anchor span read has its anchor spans among the k: those
//! traces are complete candidates. Their starts come from all their spans (`spans`, by
//! key), the other filters are checked on their spans (each a query over the candidate
//! ids), and the page is theirs; when it is short, k grows fourfold. Filters are SQL on
//! `span_search`, exact but for free text, which SQL screens (every word in the span's
//! name or raw detail, any case) and Rust then checks in full with the embedded
//! store's word matcher, span by span.

use threadline_model::{SpanId, SpanKind, SpanRecord, TenantId, TraceId};

use crate::clickhouse::client::Connection;
use crate::clickhouse::rows::{HeadRow, Origins, SpanRow, HEAD_COLUMNS};
use crate::clickhouse::sql::{bind_all, span_sql, trace_sql};
use crate::search::{NameMatch, TraceCursor, TracePage, TraceQuery, TraceSummary};
use crate::sqlite::text_index::TextQuery;
use crate::{
    ExemplarQuery, OpenSpans, RequestsServed, ServiceSummary, SkeletonSpan, SpanReader, StoreError,
};

/// Unsigned nanoseconds as ClickHouse compares them.
fn ns(n: u64) -> String {
    n.to_string()
}

pub(crate) fn get_trace(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Vec<SpanRecord>, StoreError> {
    let query = conn
        .client
        .query(&format!(
            "SELECT ?fields FROM spans WHERE tenant = ? AND trace_id = {}
             ORDER BY start_ns, span_id, version DESC LIMIT 1 BY span_id",
            trace_sql(trace_id)
        ))
        .bind(tenant.as_str());
    let rows: Vec<SpanRow> = conn.fetch_all(query)?;
    let mut origins = Origins::default();
    rows.into_iter()
        .map(|r| r.into_record(&mut origins))
        .collect()
}

pub(crate) fn skeleton(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<Vec<SkeletonSpan>, StoreError> {
    let query = conn
        .client
        .query(&format!(
            "SELECT {HEAD_COLUMNS} FROM spans WHERE tenant = ? AND trace_id = {}
             ORDER BY start_ns, span_id, version DESC LIMIT 1 BY span_id",
            trace_sql(trace_id)
        ))
        .bind(tenant.as_str());
    let rows: Vec<HeadRow> = conn.fetch_all(query)?;
    Ok(rows.into_iter().map(HeadRow::into_skeleton).collect())
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
                "SELECT ?fields FROM spans WHERE tenant = ? AND trace_id = {} AND span_id IN ({})
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
            "SELECT ?fields FROM spans WHERE tenant = ? AND trace_id = {} AND span_id = {}
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

/// One filter of a search: SQL on `span_search` (with its arguments) and, for free
/// text, the words its spans and logs are checked for in full.
struct Predicate {
    sql: String,
    args: Vec<String>,
    text: Option<TextQuery>,
}

/// Words as `position` conditions on a column (ASCII words byte-wise, any case; others
/// through the UTF-8 variant).
fn word_screen(column: &str, text: &TextQuery, args: &mut Vec<String>) -> String {
    let mut all = Vec::new();
    for word in text.words() {
        let f = if word.is_ascii() {
            "positionCaseInsensitive"
        } else {
            "positionCaseInsensitiveUTF8"
        };
        all.push(format!("{f}({column}, ?) > 0"));
        args.push(word.clone());
    }
    all.join(" AND ")
}

/// `column` equals a non-empty value (an empty value matches nothing, as a missing
/// field never equals anything in the embedded store).
fn equals(column: &str, value: &str, args: &mut Vec<String>) -> String {
    args.push(value.to_owned());
    format!("({column} != '' AND {column} = ?)")
}

fn name_matches(column: &str, how: NameMatch, wanted: &str, args: &mut Vec<String>) -> String {
    match how {
        NameMatch::Exact => equals(column, wanted, args),
        NameMatch::Prefix => {
            args.push(wanted.to_lowercase());
            format!("({column} != '' AND startsWith(lowerUTF8({column}), ?))")
        }
    }
}

/// The filters of `q` as predicates, most selective first (the embedded store's order:
/// the first is the anchor).
fn predicates(tenant: &TenantId, q: &TraceQuery) -> Vec<Predicate> {
    let mut out = Vec::new();
    if let Some(text) = q.text.as_deref().and_then(TextQuery::parse) {
        // Spans whose name or raw detail holds every word, or whose trace has a log
        // record that does; checked in full afterwards.
        let mut args = Vec::new();
        let spans = format!(
            "trace_id IN (SELECT trace_id FROM spans WHERE tenant = ? AND start_ns >= {WINDOW} AND ({}))",
            text.words()
                .iter()
                .map(|w| {
                    let f = if w.is_ascii() {
                        "positionCaseInsensitive"
                    } else {
                        "positionCaseInsensitiveUTF8"
                    };
                    format!("({f}(name, ?) > 0 OR {f}(detail, ?) > 0)")
                })
                .collect::<Vec<_>>()
                .join(" AND ")
        );
        args.push(tenant.as_str().to_owned());
        for w in text.words() {
            args.push(w.clone());
            args.push(w.clone());
        }
        let logs_screen = {
            let mut log_args = vec![tenant.as_str().to_owned()];
            let screen = word_screen("detail", &text, &mut log_args);
            args.extend(log_args);
            format!(
                "trace_id IN (SELECT trace_id FROM logs WHERE tenant = ? AND has_trace = 1 AND {screen})"
            )
        };
        out.push(Predicate {
            sql: format!("({spans} OR {logs_screen})"),
            args,
            text: Some(text),
        });
    }
    let mut push = |build: &mut dyn FnMut(&mut Vec<String>) -> String| {
        let mut args = Vec::new();
        let sql = build(&mut args);
        out.push(Predicate {
            sql,
            args,
            text: None,
        });
    };
    for (key, value) in &q.attributes {
        push(&mut |args| {
            args.push(format!("{key}={value}"));
            "has(attributes, ?)".to_owned()
        });
    }
    if let Some(v) = &q.session_id {
        push(&mut |args| equals("session_id", v, args));
    }
    if let Some(v) = &q.user_id {
        push(&mut |args| equals("user_id", v, args));
    }
    if let Some(v) = &q.adapter {
        push(&mut |args| equals("adapter", v, args));
    }
    if q.errors_only {
        push(&mut |_| "error = 1".to_owned());
    }
    if let Some(v) = &q.route {
        push(&mut |args| equals("route", v, args));
    }
    if let Some(v) = &q.model {
        push(&mut |args| {
            let a = name_matches("model", q.names, v, args);
            let b = name_matches("response_model", q.names, v, args);
            format!("({a} OR {b})")
        });
    }
    if let Some(v) = &q.span_name {
        push(&mut |args| equals("name", v, args));
    }
    if let Some(v) = &q.service {
        push(&mut |args| name_matches("service", q.names, v, args));
    }
    if let Some(v) = &q.ab_group {
        push(&mut |args| equals("ab_group", v, args));
    }
    if q.min_duration_nanos.is_some() || q.max_duration_nanos.is_some() {
        push(&mut |_| {
            format!(
                "duration_ns BETWEEN {} AND {}",
                q.min_duration_nanos.unwrap_or(0),
                q.max_duration_nanos.unwrap_or(u64::MAX)
            )
        });
    }
    out
}

/// Where a predicate's SQL takes the window's start: spans of a trace that starts in the
/// window start in it too, so a subquery on `spans` reads only the window's partitions.
const WINDOW: &str = "{WINDOW}";

/// How far back from `to` the anchor spans are read at first, then wider (the last:
/// everything): the primary key (tenant, start_ns) skips what is older.
const WINDOWS_NS: [u64; 6] = [
    3_600_000_000_000,
    6 * 3_600_000_000_000,
    24 * 3_600_000_000_000,
    7 * 24 * 3_600_000_000_000,
    30 * 24 * 3_600_000_000_000,
    u64::MAX,
];

/// Trace ids named in one query's `IN` list at most (ClickHouse's query size is bounded).
const IDS_PER_QUERY: usize = 2_000;

/// Anchor spans read at first; four times as many at each further attempt.
const FIRST_ANCHORS: usize = 256;
/// The same for a free-text anchor, whose every attempt scans the window's details.
const FIRST_TEXT_ANCHORS: usize = 8_192;

#[derive(clickhouse::Row, serde::Deserialize)]
struct Anchor {
    trace_id: [u8; 16],
    start_ns: u64,
}

pub(crate) fn search(
    conn: &Connection,
    tenant: &TenantId,
    q: &TraceQuery,
) -> Result<TracePage, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let from = q.start_from_unix_nano.unwrap_or(0);
    let to = q.start_to_unix_nano.unwrap_or(u64::MAX);
    let empty = || TracePage {
        traces: Vec::new(),
        next_cursor: None,
    };
    if from > to {
        return Ok(empty());
    }
    let mut predicates = predicates(tenant, q);
    let anchor = if predicates.is_empty() {
        Predicate {
            sql: "entry = 1".to_owned(),
            args: Vec::new(),
            text: None,
        }
    } else {
        predicates.remove(0)
    };
    let texts: Vec<(bool, &TextQuery)> = std::iter::once(&anchor)
        .chain(&predicates)
        .enumerate()
        .filter_map(|(i, p)| p.text.as_ref().map(|t| (i == 0, t)))
        .collect();
    // A free-text anchor rescans the raw details at every attempt: read many at once.
    let first = if anchor.text.is_some() {
        FIRST_TEXT_ANCHORS
    } else {
        FIRST_ANCHORS
    };
    let mut wanted = first.max((limit + 1) * 4);
    let mut window = 0;
    // Free-text verdicts of traces checked in an earlier attempt.
    let mut checked: foldhash::HashMap<TraceId, bool> = Default::default();
    loop {
        // The newest `wanted` anchor spans in the range: in the narrowest window that
        // holds as many, or in the whole range.
        let w_from = from.max(to.saturating_sub(WINDOWS_NS[window]));
        let anchors = anchor_spans(conn, tenant, &anchor, (w_from, to), wanted)?;
        let complete = anchors.len() < wanted;
        if complete && w_from > from {
            window += 1;
            continue;
        }
        // Every trace starting after the oldest anchor read has its anchor spans
        // (which start no earlier than it does) among them: those traces are known
        // whole; older ones may not be, unless every anchor was read.
        let horizon = if complete {
            None
        } else {
            anchors.last().map(|a| a.start_ns)
        };
        let found = page_of(
            conn,
            tenant,
            q,
            (&predicates, &texts),
            &anchors,
            horizon,
            limit,
            &mut checked,
        )?;
        if found.len() > limit || complete {
            return Ok(page(found, limit));
        }
        wanted *= 4;
    }
}

/// The anchor spans in `w_from..=to`, newest first, at most `wanted`.
fn anchor_spans(
    conn: &Connection,
    tenant: &TenantId,
    anchor: &Predicate,
    (w_from, to): (u64, u64),
    wanted: usize,
) -> Result<Vec<Anchor>, StoreError> {
    let sql = format!(
        "SELECT trace_id, start_ns FROM span_search
         WHERE tenant = ? AND start_ns BETWEEN {w} AND {to} AND {anchor}
         ORDER BY start_ns DESC, trace_id DESC LIMIT {wanted}",
        w = ns(w_from),
        to = ns(to),
        anchor = anchor.sql.replace(WINDOW, &ns(w_from)),
    );
    let mut args = vec![tenant.as_str().to_owned()];
    args.extend(anchor.args.iter().cloned());
    conn.fetch_all(bind_all(conn.client.query(&sql), &args))
}

/// The traces of `anchors` that match the search, newest start first, at most one more
/// than `limit`; with a `horizon`, only those starting after it (the rest may be
/// incomplete).
#[allow(clippy::too_many_arguments)]
fn page_of(
    conn: &Connection,
    tenant: &TenantId,
    q: &TraceQuery,
    (others, texts): (&[Predicate], &[(bool, &TextQuery)]),
    anchors: &[Anchor],
    horizon: Option<u64>,
    limit: usize,
    checked: &mut foldhash::HashMap<TraceId, bool>,
) -> Result<Vec<TraceSummary>, StoreError> {
    let from = q.start_from_unix_nano.unwrap_or(0);
    let to = q.start_to_unix_nano.unwrap_or(u64::MAX);
    let mut ids: Vec<TraceId> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for a in anchors {
        if seen.insert(a.trace_id) {
            ids.push(TraceId(a.trace_id));
        }
    }
    // The other filters first, each on some span of the trace (a trace that qualifies
    // starts at or after `from`, and so do all its spans).
    for p in others {
        if ids.is_empty() {
            break;
        }
        let mut matched = std::collections::HashSet::new();
        for chunk in ids.chunks(IDS_PER_QUERY) {
            let list: Vec<String> = chunk.iter().map(|id| trace_sql(*id)).collect();
            let sql = format!(
                "SELECT DISTINCT trace_id FROM span_search
                 WHERE tenant = ? AND start_ns >= {f} AND trace_id IN ({list}) AND {cond}",
                f = ns(from),
                list = list.join(","),
                cond = p.sql.replace(WINDOW, &ns(from)),
            );
            let mut args = vec![tenant.as_str().to_owned()];
            args.extend(p.args.iter().cloned());
            let rows: Vec<Matched> = conn.fetch_all(bind_all(conn.client.query(&sql), &args))?;
            matched.extend(rows.into_iter().map(|m| m.trace_id));
        }
        ids.retain(|id| matched.contains(&id.0));
    }
    // Each trace's start from all of its spans (the spans table, by key).
    let mut heads = heads_of(conn, tenant, &ids)?;
    let mut summaries: Vec<TraceSummary> = ids
        .iter()
        .filter_map(|id| {
            let spans = heads.remove(id)?;
            Some(TraceSummary::of_skeleton(*id, &spans))
        })
        .filter(|t| {
            let start = t.start_time_unix_nano;
            (from..=to).contains(&start)
                && horizon.is_none_or(|h| start > h)
                && q.cursor
                    .is_none_or(|c| (start, t.trace_id.0) < (c.start_unix_nano, c.trace_id.0))
        })
        .collect();
    summaries.sort_by(|a, b| {
        (b.start_time_unix_nano, b.trace_id.0).cmp(&(a.start_time_unix_nano, a.trace_id.0))
    });
    let mut found = Vec::new();
    for summary in summaries {
        if found.len() > limit {
            break;
        }
        if !texts.is_empty() {
            let holds = match checked.get(&summary.trace_id) {
                Some(&holds) => holds,
                None => {
                    let holds = texts_hold(conn, tenant, summary.trace_id, texts, (from, to))?;
                    checked.insert(summary.trace_id, holds);
                    holds
                }
            };
            if !holds {
                continue;
            }
        }
        found.push(summary);
    }
    Ok(found)
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Matched {
    trace_id: [u8; 16],
}

/// A page of `limit` from traces found newest first (one more than `limit` says there
/// is a next page).
fn page(mut found: Vec<TraceSummary>, limit: usize) -> TracePage {
    let has_more = found.len() > limit;
    found.truncate(limit);
    let next_cursor = if has_more {
        found.last().map(|t| TraceCursor {
            start_unix_nano: t.start_time_unix_nano,
            trace_id: t.trace_id,
        })
    } else {
        None
    };
    TracePage {
        traces: found,
        next_cursor,
    }
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct TraceHead {
    trace_id: [u8; 16],
    head: HeadRow,
}

/// The skeletons of several traces, by trace.
fn heads_of(
    conn: &Connection,
    tenant: &TenantId,
    ids: &[TraceId],
) -> Result<foldhash::HashMap<TraceId, Vec<SkeletonSpan>>, StoreError> {
    let mut out: foldhash::HashMap<TraceId, Vec<SkeletonSpan>> = Default::default();
    for chunk in ids.chunks(IDS_PER_QUERY) {
        let list: Vec<String> = chunk.iter().map(|id| trace_sql(*id)).collect();
        let query = conn
            .client
            .query(&format!(
                "SELECT trace_id, {HEAD_COLUMNS} FROM spans WHERE tenant = ? AND trace_id IN ({})
                 ORDER BY trace_id, start_ns, span_id, version DESC LIMIT 1 BY trace_id, span_id",
                list.join(",")
            ))
            .bind(tenant.as_str());
        let rows: Vec<TraceHead> = conn.fetch_all(query)?;
        for row in rows {
            out.entry(TraceId(row.trace_id))
                .or_default()
                .push(row.head.into_skeleton());
        }
    }
    Ok(out)
}

/// Whether every free-text filter holds on the trace: on a span's name and texts (the
/// anchor's on a span starting in `range`), or on one of its log records.
fn texts_hold(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: TraceId,
    texts: &[(bool, &TextQuery)],
    (from, to): (u64, u64),
) -> Result<bool, StoreError> {
    let spans = get_trace(conn, tenant, trace_id)?;
    let mut logs: Option<Vec<threadline_model::LogRecord>> = None;
    for (anchor, text) in texts {
        let in_range = |t: u64| !*anchor || (from..=to).contains(&t);
        if spans
            .iter()
            .any(|s| in_range(s.start_time_unix_nano) && text.matches(&s.name, &s.detail))
        {
            continue;
        }
        if logs.is_none() {
            logs = Some(crate::clickhouse::logs::logs_of(
                conn, tenant, trace_id, None,
            )?);
        }
        let held = logs.iter().flatten().any(|l| {
            in_range(l.time_unix_nano) && text.matches_texts(|f| l.detail.for_each_text(f))
        });
        if !held {
            return Ok(false);
        }
    }
    Ok(true)
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
