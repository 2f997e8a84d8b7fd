//! Trace search: filters, a stable cursor, and the summaries of a page.
//!
//! Semantics: a trace matches when each filter holds on at least one of its spans (not
//! necessarily the same one); free text also holds when one of the trace's log records
//! has the words. Traces are ordered newest first by their start (their earliest
//! span), ties broken by trace id (descending); the cursor is that (start, trace id)
//! pair, so pages never repeat or skip a trace. The time range is the trace start's,
//! and a trace is found through a span (or log record) in the range.
//!
//! How: the most selective filter (`predicates`' order) is the anchor, whose matching
//! spans are read newest first; each trace they name is checked against the other
//! filters (`Check`) and waits until no trace still to come can start after it.
//!
//! How the filters find spans: column filters are SQL on `spans` (through a column's
//! index when one applies); `attr.` filters skip blocks by their attribute filter
//! (`attr_filter`) and free text skips blocks by the full-text index (`text_index`);
//! both then screen each remaining span's raw bytes as its block is read
//! (`span_screen`), and check a screened span in full when it comes out newest first.

use std::collections::HashSet;
use std::sync::Arc;

use rusqlite::types::Value;
use rusqlite::{Connection, Row};
use threadline_model::{TenantId, TraceId};

use crate::sqlite::block_values::{BlockProbe, ValueField};
use crate::sqlite::newest_first::{Keep, NewestFirst, RowFilter, SpanWindow, TENANT_ONLY};
use crate::sqlite::query::{tenant_key, tenant_services, BlockCache, DetailSlot, OriginCache};
use crate::sqlite::span_screen::{PairScreen, TextScreen};
use crate::sqlite::text_groups::{self, BlockSet};
use crate::sqlite::text_index::TextQuery;
use crate::sqlite::trace_index::RunFilters;
use crate::sqlite::trace_lookup::{self, RowRange};
use crate::sqlite::{sqlite_err, StoreError};

pub(crate) use crate::search::{NameMatch, TracePage, TraceQuery, TraceSummary};

mod filters;
mod matcher;

use filters::*;
use matcher::*;

/// A search's detail filters as `NewestFirst` applies them.
struct SearchKeep<'a, 'q> {
    conn: &'a Connection,
    matcher: &'a mut SpanMatcher<'q>,
}

impl Keep<Candidate> for SearchKeep<'_, '_> {
    fn block(&mut self, block_id: i64) -> Result<bool, StoreError> {
        Ok(self.matcher.block_may_match(block_id))
    }

    /// Every row is screened as its block is read; the full check of those that pass
    /// waits until the row is the newest left (in `search`), so a filter that many
    /// spans pass decodes only the rows a page shows.
    fn row(&mut self, cand: &mut Candidate) -> Result<bool, StoreError> {
        cand.screened =
            self.matcher
                .screen(self.conn, cand.slot, cand.origin_hash, cand.name.as_deref())?;
        Ok(cand.screened != Screened::Out)
    }
}

/// A span that passed the SQL filters of a search.
struct Candidate {
    start_ns: i64,
    trace_id: Vec<u8>,
    slot: DetailSlot,
    origin_hash: i64,
    /// Read only for free text.
    name: Option<String>,
    screened: Screened,
}

/// What a candidate reads; `name` is added for free text.
const CANDIDATE_COLUMNS: &str =
    "start_ns, trace_id, origin_hash, block_id, block_offset, block_len";

impl Candidate {
    /// Reads `CANDIDATE_COLUMNS`.
    fn from_row(conn: &Connection, row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            start_ns: row.get(0).map_err(|e| sqlite_err(conn, e))?,
            trace_id: row.get(1).map_err(|e| sqlite_err(conn, e))?,
            origin_hash: row.get(2).map_err(|e| sqlite_err(conn, e))?,
            slot: DetailSlot::from_row(conn, row, 3)?,
            name: None,
            screened: Screened::Check,
        })
    }

    /// Reads `CANDIDATE_COLUMNS, name`.
    fn from_row_named(conn: &Connection, row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            name: Some(row.get(6).map_err(|e| sqlite_err(conn, e))?),
            ..Self::from_row(conn, row)?
        })
    }
}

/// By start time, then trace id: search results come greatest first.
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.start_ns, &self.trace_id).cmp(&(other.start_ns, &other.trace_id))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Candidate {}

/// One filter of a search as a query of its own: what one span of a trace must match.
fn predicates(q: &TraceQuery) -> Vec<TraceQuery> {
    let base = || TraceQuery {
        names: q.names,
        ..Default::default()
    };
    type Field = fn(&mut TraceQuery) -> &mut Option<String>;
    let column = |value: &Option<String>, slot: Field| {
        value.as_ref().map(|v| {
            let mut t = base();
            *slot(&mut t) = Some(v.clone());
            t
        })
    };
    // Most selective first: the first is the anchor whose matching spans are read.
    let mut out: Vec<TraceQuery> = q
        .text
        .iter()
        .map(|text| TraceQuery {
            text: Some(text.clone()),
            ..base()
        })
        .chain(q.attributes.iter().map(|pair| TraceQuery {
            attributes: vec![pair.clone()],
            ..base()
        }))
        .chain(
            [
                column(&q.session_id, |t| &mut t.session_id),
                column(&q.user_id, |t| &mut t.user_id),
                column(&q.adapter, |t| &mut t.adapter),
                // Errors are rarer than a route or a model.
                q.errors_only.then(|| TraceQuery {
                    errors_only: true,
                    ..base()
                }),
                column(&q.route, |t| &mut t.route),
                column(&q.model, |t| &mut t.model),
                column(&q.span_name, |t| &mut t.span_name),
                column(&q.service, |t| &mut t.service),
                column(&q.ab_group, |t| &mut t.ab_group),
            ]
            .into_iter()
            .flatten(),
        )
        .collect();
    // A span's duration: both bounds on one span.
    if q.min_duration_nanos.is_some() || q.max_duration_nanos.is_some() {
        out.push(TraceQuery {
            min_duration_nanos: q.min_duration_nanos,
            max_duration_nanos: q.max_duration_nanos,
            ..base()
        });
    }
    out
}

/// A filter checked on a trace found by another: some span of the trace matches it
/// (or, for free text, one of its log records does).
struct Check<'q> {
    filters: SqlFilters,
    matcher: SpanMatcher<'q>,
    text: Option<&'q str>,
}

impl<'q> Check<'q> {
    fn new(conn: &Connection, tenant_id: i64, q: &'q TraceQuery) -> Result<Self, StoreError> {
        Ok(Self {
            filters: sql_filters(conn, tenant_id, q)?,
            matcher: SpanMatcher::new(
                conn,
                tenant_id,
                &q.attributes,
                q.text.as_deref().and_then(TextQuery::parse),
            )?,
            text: q.text.as_deref(),
        })
    }

    fn holds(
        &mut self,
        conn: &Connection,
        tenant: &TenantId,
        trace_id: TraceId,
        ranges: &[RowRange],
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "SELECT origin_hash, block_id, block_offset, block_len, name
             FROM spans NOT INDEXED
             WHERE rowid BETWEEN ? AND ? AND {} AND trace_id = ?",
            self.filters.sql
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| sqlite_err(conn, e))?;
        for range in ranges {
            let mut args = vec![Value::Integer(range.first), Value::Integer(range.last)];
            args.extend_from_slice(&self.filters.args);
            args.push(Value::Blob(trace_id.0.to_vec()));
            let mut rows = stmt
                .query(rusqlite::params_from_iter(args.iter()))
                .map_err(|e| sqlite_err(conn, e))?;
            while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
                let origin_hash: i64 = row.get(0).map_err(|e| sqlite_err(conn, e))?;
                let slot = DetailSlot::from_row(conn, row, 1)?;
                let name: String = row.get(4).map_err(|e| sqlite_err(conn, e))?;
                if self.matcher.matches(conn, slot, origin_hash, Some(&name))? {
                    return Ok(true);
                }
            }
        }
        match self.text {
            Some(text) => Ok(!crate::sqlite::logs::search(
                conn,
                tenant,
                &crate::sqlite::LogQuery {
                    text: Some(text.to_owned()),
                    trace_id: Some(trace_id),
                    limit: 1,
                    ..Default::default()
                },
            )?
            .logs
            .is_empty()),
            None => Ok(false),
        }
    }
}

/// Log records matching free text, newest first, page by page: traces found by their
/// logs (`q=` covers log text).
struct LogHits<'a> {
    conn: &'a Connection,
    tenant: &'a TenantId,
    query: crate::sqlite::LogQuery,
    page: std::vec::IntoIter<(i64, TraceId)>,
    done: bool,
}

impl LogHits<'_> {
    fn peek_time(&mut self) -> Result<Option<i64>, StoreError> {
        self.fill()?;
        Ok(self.page.as_slice().first().map(|(t, _)| *t))
    }

    fn next(&mut self) -> Result<Option<(i64, TraceId)>, StoreError> {
        self.fill()?;
        Ok(self.page.next())
    }

    fn fill(&mut self) -> Result<(), StoreError> {
        while self.page.as_slice().is_empty() && !self.done {
            let page = crate::sqlite::logs::search(self.conn, self.tenant, &self.query)?;
            self.done = page.next_cursor.is_none();
            self.query.cursor = page.next_cursor;
            let hits: Vec<(i64, TraceId)> = page
                .logs
                .iter()
                .filter_map(|l| Some((sql_nanos(l.record.time_unix_nano), l.record.trace_id?)))
                .collect();
            self.page = hits.into_iter();
        }
        Ok(())
    }
}

/// A trace found and checked, waiting for its turn in the page's order (newest
/// start first, ties by trace id).
struct Found(TraceSummary);

impl PartialEq for Found {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Found {}
impl PartialOrd for Found {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Found {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |f: &Found| (f.0.start_time_unix_nano, f.0.trace_id.0);
        key(self).cmp(&key(other))
    }
}

pub(crate) fn search(
    conn: &Connection,
    run_filters: &RunFilters,
    tenant: &TenantId,
    q: &TraceQuery,
) -> Result<TracePage, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(TracePage::default());
    };
    let mut predicates = predicates(q);
    let unfiltered = predicates.is_empty();
    let anchor = if unfiltered {
        TraceQuery::default()
    } else {
        predicates.remove(0)
    };
    let mut checks = predicates
        .iter()
        .map(|p| Check::new(conn, tenant_id, p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut filters = sql_filters(conn, tenant_id, &anchor)?;
    if unfiltered {
        filters.entries_only();
    }
    let window = SpanWindow {
        tenant_id,
        from: q.start_from_unix_nano.map_or(i64::MIN, sql_nanos),
        to: q.start_to_unix_nano.map_or(i64::MAX, sql_nanos),
    };
    let text = anchor.text.as_deref().and_then(TextQuery::parse);
    let mut logs = text.is_some().then(|| LogHits {
        conn,
        tenant,
        query: crate::sqlite::LogQuery {
            text: anchor.text.clone(),
            from_unix_nano: q.start_from_unix_nano,
            to_unix_nano: q.start_to_unix_nano,
            limit: 200,
            ..Default::default()
        },
        page: Vec::new().into_iter(),
        done: false,
    });
    let (columns, decode): (String, crate::sqlite::newest_first::DecodeRow<Candidate>) =
        if text.is_some() {
            (format!("{CANDIDATE_COLUMNS}, name"), |conn, row| {
                Candidate::from_row_named(conn, row).map(|c| (c.start_ns, c))
            })
        } else {
            (CANDIDATE_COLUMNS.to_owned(), |conn, row| {
                Candidate::from_row(conn, row).map(|c| (c.start_ns, c))
            })
        };
    let mut matcher = SpanMatcher::new(conn, tenant_id, &anchor.attributes, text)?;
    let attr_hashes = filter_hashes(&anchor.attributes);
    let mut candidates = NewestFirst::new(
        conn,
        window,
        &columns,
        filters.row_filter(&attr_hashes),
        decode,
    );

    // Candidates come newest first by the start of a span (or log record) that matches
    // the anchor. A trace starts no later than any of its spans, so once the candidates
    // are older than a found trace's start, no trace still to come starts after it:
    // found traces wait in `ready` until then, and leave it newest start first.
    let mut seen: HashSet<TraceId> = HashSet::new();
    let mut ready: std::collections::BinaryHeap<Found> = Default::default();
    let mut emitted: Vec<TraceSummary> = Vec::new();
    let mut next_span: Option<(i64, TraceId)> = None;
    let mut spans_done = false;
    loop {
        // The next matching span, read ahead one.
        while next_span.is_none() && !spans_done {
            let next = candidates.next(&mut SearchKeep {
                conn,
                matcher: &mut matcher,
            })?;
            let Some(cand) = next else {
                spans_done = true;
                break;
            };
            let id = TraceId::from_bytes(&cand.trace_id)
                .map_err(|e| StoreError::corrupt(e.to_string()))?;
            if seen.contains(&id) {
                continue;
            }
            if cand.screened != Screened::Matches
                && !matcher.matches(conn, cand.slot, cand.origin_hash, cand.name.as_deref())?
            {
                continue;
            }
            next_span = Some((cand.start_ns, id));
        }
        let log_time = match &mut logs {
            Some(l) => l.peek_time()?,
            None => None,
        };
        let next = match (next_span, log_time) {
            (Some((t, _)), Some(lt)) if lt > t => {
                logs.as_mut().map(|l| l.next()).transpose()?.flatten()
            }
            (Some(_), _) => next_span.take(),
            (None, Some(_)) => logs.as_mut().map(|l| l.next()).transpose()?.flatten(),
            (None, None) => None,
        };
        let horizon = next.map_or(i64::MIN, |(t, _)| t);
        while ready
            .peek()
            .is_some_and(|f| next.is_none() || sql_nanos(f.0.start_time_unix_nano) > horizon)
        {
            if let Some(Found(summary)) = ready.pop() {
                emitted.push(summary);
            }
            if emitted.len() > limit {
                break;
            }
        }
        if emitted.len() > limit {
            break;
        }
        let Some((_, trace_id)) = next else { break };
        if !seen.insert(trace_id) {
            continue;
        }
        let ranges = trace_lookup::ranges_for(conn, run_filters, tenant_id, &[trace_id])?
            .remove(&trace_id)
            .unwrap_or_default();
        let summary = summarize(conn, tenant_id, trace_id, &ranges)?;
        let start = summary.start_time_unix_nano;
        // The range is the trace's start's.
        if q.start_from_unix_nano.is_some_and(|from| start < from)
            || q.start_to_unix_nano.is_some_and(|to| start > to)
        {
            continue;
        }
        // On an earlier page.
        if let Some(c) = &q.cursor {
            if (start, trace_id.0) >= (c.start_unix_nano, c.trace_id.0) {
                continue;
            }
        }
        let mut holds = true;
        for check in &mut checks {
            if !check.holds(conn, tenant, trace_id, &ranges)? {
                holds = false;
                break;
            }
        }
        if holds {
            ready.push(Found(summary));
        }
    }
    Ok(TracePage::of_found(emitted, limit))
}

fn summarize(
    conn: &Connection,
    tenant_id: i64,
    trace_id: TraceId,
    ranges: &[RowRange],
) -> Result<TraceSummary, StoreError> {
    let heads = crate::sqlite::skeleton::skeleton_rows(conn, tenant_id, trace_id, ranges)?;
    Ok(TraceSummary::of_skeleton(trace_id, &heads))
}
