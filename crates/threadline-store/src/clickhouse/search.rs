//! Trace search on ClickHouse, with the embedded store's semantics (see
//! `sqlite::search`): a trace matches when each filter holds on some span of it, the
//! first filter (the anchor) on a span starting in the time range, and the trace's own
//! start is in the range; newest trace start first, ties by trace id descending.
//!
//! How: the anchor's matching spans are read newest first (`ORDER BY start_ns DESC
//! LIMIT k`, in the narrowest window back from `to` — or from now, if `to` is later —
//! that holds k of them: 1 s, 10 s, 1 min, 10 min, 1 h, 6 h, 1 d, 7 d, 30 d, all). A trace starts no later than any of its spans, so every trace that
//! starts after the k-th anchor span read has its anchor spans among the k: those
//! traces are complete candidates. Their starts come from all their spans (`spans`, by
//! key), the other filters are checked on their spans (each a query over the candidate
//! ids), and the page is theirs; when it is short, k grows fourfold. Filters are SQL on
//! `span_search`, exact but for free text, which SQL screens (every word, any case, in
//! the span's name or `texts` — a superset of its searchable text, read in the
//! window's rows alone — or in a log record of its trace) and Rust then checks in full
//! with the embedded store's word matcher, span by span.

use threadline_model::{TenantId, TraceId};

use crate::clickhouse::client::Connection;
use crate::clickhouse::rows::{HeadRow, HEAD_COLUMNS};
use crate::clickhouse::search_rows::FOLDS;
use crate::clickhouse::sql::{bind_all, equals, ns, trace_sql};
use crate::search::{NameMatch, TracePage, TraceQuery, TraceSummary};
use crate::sqlite::text_index::TextQuery;
use crate::{SkeletonSpan, StoreError};

/// One filter of a search: SQL on `span_search` (with its arguments) and, for free
/// text, the words its spans and logs are checked for in full.
struct Predicate {
    sql: String,
    args: Vec<String>,
    text: Option<TextQuery>,
}

/// The `position` function that finds a word in any case: byte-wise for ASCII words,
/// else through the UTF-8 variant.
fn position_of(word: &str) -> &'static str {
    if word.is_ascii() {
        "positionCaseInsensitive"
    } else {
        "positionCaseInsensitiveUTF8"
    }
}

/// Words as `position` conditions on a column.
fn word_screen(column: &str, text: &TextQuery, args: &mut Vec<String>) -> String {
    let mut all = Vec::new();
    for word in text.words() {
        all.push(format!("{}({column}, ?) > 0", position_of(word)));
        args.push(word.clone());
    }
    all.join(" AND ")
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
        // Spans whose name or texts hold every word, or of a trace
        // with a log record that does; checked in full afterwards.
        let mut args = Vec::new();
        let spans = text
            .words()
            .iter()
            .map(|w| {
                let f = position_of(w);
                args.extend([w.clone(), w.clone()]);
                format!("({f}(name, ?) > 0 OR arrayExists(a -> {f}(a, ?) > 0, texts))")
            })
            .collect::<Vec<_>>()
            .join(" AND ");
        let logs_screen = {
            args.push(tenant.as_str().to_owned());
            let screen = word_screen("detail", &text, &mut args);
            format!(
                "trace_id IN (SELECT trace_id FROM logs WHERE tenant = ? AND has_trace = 1 \
                 AND time_ns >= {LOG_WINDOW} AND {screen})"
            )
        };
        out.push(Predicate {
            sql: format!("(({spans}) OR {logs_screen})"),
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
        push(&mut |args| attribute_equals(key, value, args));
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

/// A span's (or its resource's) attribute `key` is `value`: its pair in `texts` or
/// `attributes`, or the column a fold left it to (`FOLDS`).
fn attribute_equals(key: &str, value: &str, args: &mut Vec<String>) -> String {
    args.push(format!("{key}={value}"));
    if threadline_model::is_text_key(key) {
        return "has(texts, ?)".to_owned();
    }
    let mut sql = "(has(attributes, ?)".to_owned();
    for (bit, fold) in FOLDS.iter().enumerate().filter(|(_, f)| f.key == key) {
        args.push(value.to_owned());
        sql.push_str(&format!(
            " OR (bitAnd(folded, {}) != 0 AND {} = ?)",
            1u32 << bit,
            fold.column
        ));
    }
    sql.push(')');
    sql
}

/// Where a predicate's SQL takes the start of the window its log records are looked
/// for in: a trace's records come after its start, but a sender's clock may run behind
/// (`LOG_CLOCK_SLACK_NS`).
const LOG_WINDOW: &str = "{LOG_WINDOW}";

/// How far before a window's start its traces' log records are looked for.
const LOG_CLOCK_SLACK_NS: u64 = 60_000_000_000;

/// A predicate's SQL for traces that start at `window_start` or later.
fn in_window(sql: &str, window_start: u64) -> String {
    sql.replace(
        LOG_WINDOW,
        &ns(window_start.saturating_sub(LOG_CLOCK_SLACK_NS)),
    )
}

/// How far back from `to` (or now, when `to` is later) the anchor spans are read at
/// first, then wider (the last: everything): the primary key (tenant, start_ns) skips
/// what is older. Small first: a busy platform writes millions of spans an hour, and
/// 18.16 sorts every row a window holds to find its newest.
const WINDOWS_NS: [u64; 10] = [
    1_000_000_000,
    10_000_000_000,
    60_000_000_000,
    600_000_000_000,
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

#[derive(clickhouse::Row, serde::Deserialize)]
struct Anchor {
    trace_id: [u8; 16],
    start_ns: u64,
}

pub(crate) fn run(
    conn: &Connection,
    tenant: &TenantId,
    q: &TraceQuery,
) -> Result<TracePage, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let from = q.start_from_unix_nano.unwrap_or(0);
    let to = q.start_to_unix_nano.unwrap_or(u64::MAX);
    if from > to {
        return Ok(TracePage::default());
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
    let mut wanted = FIRST_ANCHORS.max((limit + 1) * 4);
    let mut window = 0;
    // Windows end at `to` but are measured back from now when `to` is later (or not
    // given): spans stamped in the future still fall in every window.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(u64::MAX, |d| d.as_nanos() as u64);
    let mut edge = to.min(now);
    let mut reanchored = false;
    // Free-text verdicts of traces checked in an earlier attempt.
    let mut checked: foldhash::HashMap<TraceId, bool> = Default::default();
    let mut budget = Budget::of(conn, q);
    loop {
        let attempt = std::time::Instant::now();
        // The newest `wanted` anchor spans in the range: in the narrowest window that
        // holds as many, or in the whole range.
        let w_from = from.max(edge.saturating_sub(WINDOWS_NS[window]));
        let anchors = anchor_spans(conn, tenant, &anchor, (w_from, to), wanted)?;
        let complete = anchors.len() < wanted;
        if complete && w_from > from {
            // Wider, and measured back from the newest older span (if there is
            // one): a store not written to for a while is read from its newest
            // spans, not from everything since, and a window holding nothing more
            // is not read again in full.
            if let Some(older) = newest_start_before(conn, tenant, from, w_from)? {
                let next = if reanchored || !anchors.is_empty() {
                    (window + 1).min(WINDOWS_NS.len() - 1)
                } else {
                    window
                };
                // The next window reads its spans as this one read its own: how many
                // more there are is counted on the key (a store's rate varies).
                // (Counted only when the next could overrun at four times its width's
                // ratio: most searches never ask.)
                let next_from = from.max(older.saturating_add(1).saturating_sub(WINDOWS_NS[next]));
                let ratio = (WINDOWS_NS[next] / WINDOWS_NS[window]).max(1) as f64;
                let cut = budget.spent(attempt, ratio * 4.0, || {
                    let (these, wider) = spans_in(conn, tenant, (w_from, next_from), to)?;
                    Ok((wider as f64 / these.max(1) as f64, wider < SMALL_READ_SPANS))
                })?;
                if cut {
                    // Every trace that started in the window has all its anchor
                    // spans among those read: those are known whole.
                    let known = page_of(
                        conn,
                        tenant,
                        q,
                        (&predicates, &texts),
                        &anchors,
                        Some(w_from - 1),
                        limit,
                        &mut checked,
                    )?;
                    return Ok(TracePage::searched_from(known, limit, w_from));
                }
                // The first time, a window that held no anchor is tried again, as
                // narrow, at the newest span (the store paused, or lags the clock):
                // else its first read after a pause would be a window wider than the
                // anchors need (1.3 M spans in a minute at 10 M).
                window = next;
                reanchored = true;
                edge = older.saturating_add(1);
                continue;
            }
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
            return Ok(TracePage::of_found(found, limit));
        }
        if let Some(horizon) = horizon {
            // Four times the anchors, of rows the window holds: a small read unless
            // this one was slow or the budget is half spent (round-trip jitter is no
            // sign of a bigger read to come: a cluster with a replica away answers
            // some in tens of ms, some in hundreds).
            let small = budget.limit.is_some_and(|limit| {
                budget.started.elapsed() < limit / 2 && attempt.elapsed() < limit / 4
            });
            if budget.spent(attempt, 4.0, || Ok((4.0, small)))? {
                return Ok(TracePage::searched_from(found, limit, horizon + 1));
            }
        }
        wanted *= 4;
    }
}

/// The wall time a first page may take (`ClickHouseConfig::first_page_budget`):
/// pages after the first, and exhaustive searches, read as far as they must.
struct Budget {
    started: std::time::Instant,
    limit: Option<std::time::Duration>,
    /// The quickest attempt so far: what an attempt costs whatever it reads (round
    /// trips), not multiplied when the next is predicted.
    floor: Option<std::time::Duration>,
}

impl Budget {
    fn of(conn: &Connection, q: &TraceQuery) -> Self {
        let first_page = q.cursor.is_none() && !q.exhaustive;
        Self {
            started: std::time::Instant::now(),
            limit: conn.first_page_budget.filter(|_| first_page),
            floor: None,
        }
    }

    /// Whether another attempt would likely overrun the budget: the next reads
    /// `growth` times as much (a wider window, or four times the anchors) as the
    /// attempt that began at `attempt`, whose time beyond the quickest attempt's is
    /// counted `growth` times (`overruns`); a `small` read is cut only once the budget
    /// is spent. `growth` (the next read's growth, and whether it is small) is asked
    /// only when growing by `at_most` would overrun.
    fn spent(
        &mut self,
        attempt: std::time::Instant,
        at_most: f64,
        growth: impl FnOnce() -> Result<(f64, bool), StoreError>,
    ) -> Result<bool, StoreError> {
        let took = attempt.elapsed();
        let floor = *self.floor.insert(self.floor.map_or(took, |f| f.min(took)));
        let elapsed = self.started.elapsed();
        let Some(limit) = self.limit else {
            return Ok(false);
        };
        if !overruns(limit, elapsed, floor, took, at_most) {
            return Ok(false);
        }
        let (growth, small) = growth()?;
        let cut = overruns(limit, elapsed, floor, took, growth) && (!small || elapsed >= limit);
        tracing::debug!(
            ?took,
            ?floor,
            ?elapsed,
            growth,
            small,
            cut,
            "search attempt"
        );
        Ok(cut)
    }
}

/// Whether `elapsed` and an attempt after one that took `took` — its time beyond
/// `floor` (round trips) times `growth` — pass `limit`.
fn overruns(
    limit: std::time::Duration,
    elapsed: std::time::Duration,
    floor: std::time::Duration,
    took: std::time::Duration,
    growth: f64,
) -> bool {
    elapsed + floor + took.saturating_sub(floor).mul_f64(growth.clamp(1.0, 100.0)) > limit
}

/// A window of fewer spans than this is read whatever the budget: any filter reads it
/// in well under a tenth of a second, and on a small store an attempt's time is its
/// round trips, whose jitter would predict a read that is not coming.
const SMALL_READ_SPANS: u64 = 200_000;

/// The spans of the tenant in `these_from..=to` and in the wider `wider_from..=to`:
/// the key columns alone are read.
fn spans_in(
    conn: &Connection,
    tenant: &TenantId,
    (these_from, wider_from): (u64, u64),
    to: u64,
) -> Result<(u64, u64), StoreError> {
    #[derive(clickhouse::Row, serde::Deserialize)]
    struct Counts {
        these: u64,
        wider: u64,
    }
    let sql = format!(
        "SELECT countIf(start_ns >= {these}) AS these, count() AS wider FROM span_search
         WHERE tenant = ? AND start_ns BETWEEN {wider} AND {to}",
        these = ns(these_from),
        wider = ns(wider_from.min(these_from)),
        to = ns(to),
    );
    let rows: Vec<Counts> = conn.fetch_all(conn.client.query(&sql).bind(tenant.as_str()))?;
    Ok(rows.first().map_or((0, 0), |c| (c.these, c.wider)))
}

/// The start of the newest span of the tenant in `from..w_from` (any span: the key
/// columns alone are read), if there is one. Looked for in slices back from `w_from`,
/// each twice as wide as the last: each read touches only its slice's rows (18.16
/// reads no key in order, so one `max()` over the range would read every older row).
fn newest_start_before(
    conn: &Connection,
    tenant: &TenantId,
    from: u64,
    w_from: u64,
) -> Result<Option<u64>, StoreError> {
    #[derive(clickhouse::Row, serde::Deserialize)]
    struct Newest {
        n: u64,
        newest: u64,
    }
    let (mut hi, mut width) = (w_from, WINDOWS_NS[0]);
    while hi > from {
        let lo = from.max(hi.saturating_sub(width));
        let sql = format!(
            "SELECT count() AS n, max(start_ns) AS newest FROM span_search
             WHERE tenant = ? AND start_ns >= {lo} AND start_ns < {hi}",
            lo = ns(lo),
            hi = ns(hi),
        );
        let rows: Vec<Newest> = conn.fetch_all(conn.client.query(&sql).bind(tenant.as_str()))?;
        if let Some(r) = rows.first().filter(|r| r.n > 0) {
            return Ok(Some(r.newest));
        }
        hi = lo;
        width = width.saturating_mul(2);
    }
    Ok(None)
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
        anchor = in_window(&anchor.sql, w_from),
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
    // Each trace's spans from the spans table, by key: its start, and where the other
    // filters must look. Traces outside the range, the horizon or the cursor go first.
    let mut heads = heads_of(conn, tenant, &ids)?;
    let mut summaries: Vec<(TraceSummary, Vec<u64>)> = ids
        .iter()
        .filter_map(|id| {
            let spans = heads.remove(id)?;
            let starts = spans.iter().map(|s| s.start_time_unix_nano).collect();
            Some((TraceSummary::of_skeleton(*id, &spans), starts))
        })
        .filter(|(t, _)| {
            let start = t.start_time_unix_nano;
            (from..=to).contains(&start)
                && horizon.is_none_or(|h| start > h)
                && q.cursor
                    .is_none_or(|c| (start, t.trace_id.0) < (c.start_unix_nano, c.trace_id.0))
        })
        .collect();
    // The other filters, each on some span of the trace: read where its spans start
    // (18.16 reads no skip index, so without a bound on the key's `start_ns` every
    // span of the table would be read for the trace ids).
    for p in others {
        if summaries.is_empty() {
            break;
        }
        let mut matched = std::collections::HashSet::new();
        for chunk in summaries.chunks(IDS_PER_QUERY) {
            let list: Vec<String> = chunk.iter().map(|(t, _)| trace_sql(t.trace_id)).collect();
            let sql = format!(
                "SELECT DISTINCT trace_id FROM span_search
                 PREWHERE trace_id IN ({list}) WHERE tenant = ? AND {starts} AND {cond}",
                starts = starts_sql(chunk.iter().flat_map(|(_, s)| s.iter().copied())),
                list = list.join(","),
                cond = in_window(&p.sql, from),
            );
            let mut args = vec![tenant.as_str().to_owned()];
            args.extend(p.args.iter().cloned());
            let rows: Vec<Matched> = conn.fetch_all(bind_all(conn.client.query(&sql), &args))?;
            matched.extend(rows.into_iter().map(|m| m.trace_id));
        }
        summaries.retain(|(t, _)| matched.contains(&t.trace_id.0));
    }
    let mut summaries: Vec<TraceSummary> = summaries.into_iter().map(|(t, _)| t).collect();
    summaries.sort_by(|a, b| {
        (b.start_time_unix_nano, b.trace_id.0).cmp(&(a.start_time_unix_nano, a.trace_id.0))
    });
    let mut found = Vec::new();
    // Free text is checked on batches of the traces next in line, the first as many as
    // the page needs, then twice as many each time (few queries when the screen passes
    // traces the check turns down).
    let mut batch = limit + 1;
    for (i, summary) in summaries.iter().enumerate() {
        if found.len() > limit {
            break;
        }
        if !texts.is_empty() {
            if !checked.contains_key(&summary.trace_id) {
                let next: Vec<TraceId> = summaries[i..]
                    .iter()
                    .map(|s| s.trace_id)
                    .filter(|id| !checked.contains_key(id))
                    .take(batch)
                    .collect();
                checked.extend(texts_hold(conn, tenant, &next, texts, (from, to))?);
                batch = (batch * 2).min(TEXT_BATCH_MAX);
            }
            if checked.get(&summary.trace_id) != Some(&true) {
                continue;
            }
        }
        found.push(summary.clone());
    }
    Ok(found)
}

/// Span starts named in one `IN` list at most; beyond, their whole range is read.
const STARTS_PER_QUERY: usize = 8_000;

/// A condition on `start_ns` that holds for the given starts: the exact set (the
/// primary key reads only the granules holding them) or, for very many, their range.
fn starts_sql(starts: impl Iterator<Item = u64>) -> String {
    let mut all: Vec<u64> = starts.collect();
    all.sort_unstable();
    all.dedup();
    let (Some(lo), Some(hi)) = (all.first(), all.last()) else {
        return "0".to_owned();
    };
    if all.len() > STARTS_PER_QUERY {
        format!("start_ns BETWEEN {} AND {}", ns(*lo), ns(*hi))
    } else {
        let list: Vec<String> = all.iter().map(|s| ns(*s)).collect();
        format!("start_ns IN ({})", list.join(","))
    }
}

/// Traces whose free text one query checks at most.
const TEXT_BATCH_MAX: usize = 1_024;

#[derive(clickhouse::Row, serde::Deserialize)]
struct Matched {
    trace_id: [u8; 16],
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
                "SELECT trace_id, {HEAD_COLUMNS} FROM spans PREWHERE trace_id IN ({}) WHERE tenant = ?
                 ORDER BY trace_id, span_id, version DESC LIMIT 1 BY trace_id, span_id",
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
    out.values_mut()
        .for_each(|heads| crate::clickhouse::traces::in_start_order(heads));
    Ok(out)
}

/// Whether every free-text filter holds on each trace: on a span's name and texts (the
/// anchor's on a span starting in `range`), or on one of its log records. Two queries
/// for all of them: their spans, then the logs of those the spans did not settle.
fn texts_hold(
    conn: &Connection,
    tenant: &TenantId,
    trace_ids: &[TraceId],
    texts: &[(bool, &TextQuery)],
    (from, to): (u64, u64),
) -> Result<Vec<(TraceId, bool)>, StoreError> {
    let mut spans = crate::clickhouse::traces::get_traces(conn, tenant, trace_ids)?;
    let in_range = |anchor: bool, t: u64| !anchor || (from..=to).contains(&t);
    // For each trace, the filters its spans leave unmatched.
    let unmatched: Vec<(TraceId, Vec<usize>)> = trace_ids
        .iter()
        .map(|id| {
            let spans = spans.remove(id).unwrap_or_default();
            let left = texts
                .iter()
                .enumerate()
                .filter(|(_, (anchor, text))| {
                    !spans.iter().any(|s| {
                        in_range(*anchor, s.start_time_unix_nano)
                            && text.matches(&s.name, &s.detail)
                    })
                })
                .map(|(i, _)| i)
                .collect();
            (*id, left)
        })
        .collect();
    let need_logs: Vec<TraceId> = unmatched
        .iter()
        .filter(|(_, left)| !left.is_empty())
        .map(|(id, _)| *id)
        .collect();
    let mut logs = crate::clickhouse::logs::logs_of_traces(conn, tenant, &need_logs, None)?;
    Ok(unmatched
        .into_iter()
        .map(|(id, left)| {
            let logs = logs.remove(&id).unwrap_or_default();
            let holds = left.iter().all(|&i| {
                let (anchor, text) = texts[i];
                logs.iter().any(|l| {
                    in_range(anchor, l.time_unix_nano)
                        && text.matches_texts(|f| l.detail.for_each_text(f))
                })
            });
            (id, holds)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_attempt_is_predicted_from_what_the_last_read_beyond_round_trips() {
        let ms = std::time::Duration::from_millis;
        let budget = ms(800);
        // 10 M spans: a minute's window read in 222 ms after a 28 ms one; the whole
        // store (ten times the rows) would take 2 s.
        assert!(overruns(budget, ms(260), ms(28), ms(222), 10.0));
        // Free text at 10 M: ten seconds' spans screened in 77 ms, the minute before
        // holds twenty times as many (the store's rate varies): 1.5 s to come.
        assert!(overruns(budget, ms(147), ms(11), ms(77), 20.0));
        assert!(!overruns(budget, ms(147), ms(11), ms(77), 6.0));
        // A small store on a slow cluster: every attempt is its round trips.
        assert!(!overruns(budget, ms(300), ms(100), ms(110), 10.0));
        // The first attempt is its own floor: only its time again is counted.
        assert!(!overruns(budget, ms(350), ms(300), ms(300), 10.0));
        assert!(overruns(budget, ms(500), ms(310), ms(310), 10.0));
        // No budget left at all: cut at once.
        assert!(overruns(ms(0), ms(1), ms(1), ms(1), 4.0));
    }

    #[test]
    fn span_starts_are_an_exact_set_then_a_range_beyond_the_cap() {
        assert_eq!(
            starts_sql([30, 10, 30, 20].into_iter()),
            "start_ns IN (10,20,30)"
        );
        let many = (0..=STARTS_PER_QUERY as u64).map(|i| 5 + i * 2);
        assert_eq!(
            starts_sql(many),
            format!("start_ns BETWEEN 5 AND {}", 5 + STARTS_PER_QUERY as u64 * 2)
        );
        assert_eq!(starts_sql(std::iter::empty()), "0");
    }
}
