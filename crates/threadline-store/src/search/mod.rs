//! Trace search: filters, a stable cursor, and the summaries of a page.
//!
//! Semantics: a trace matches when at least one of its spans matches every filter.
//! Traces are ordered newest first by the start time of their newest matching span,
//! ties broken by trace id (descending); the cursor is that (time, trace id) pair, so
//! pages never repeat or skip a trace while data is appended.
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
use threadline_model::{SpanId, TenantId, TraceId};

use crate::block_values::{BlockProbe, ValueField};
use crate::newest_first::{Keep, NewestFirst, RowFilter, SpanWindow, TENANT_ONLY};
use crate::query::{tenant_key, tenant_services, BlockCache, DetailSlot, OriginCache};
use crate::span_screen::{PairScreen, TextScreen};
use crate::text_groups::{self, BlockSet};
use crate::text_index::TextQuery;
use crate::trace_index::RunFilters;
use crate::trace_lookup::{self, RowRange};
use crate::{sqlite_err, StoreError};

/// Filters of a trace search. Every set filter must hold on one span of the trace.
#[derive(Clone, Debug, Default)]
pub struct TraceQuery {
    /// A service name or its beginning, in any case.
    pub service: Option<String>,
    pub span_name: Option<String>,
    /// A model name or its beginning, in any case: the requested model or the one
    /// that responded.
    pub model: Option<String>,
    pub route: Option<String>,
    pub adapter: Option<String>,
    pub ab_group: Option<String>,
    pub session_id: Option<String>,
    pub user_id: Option<String>,
    /// Free text: every word in a span's name or texts (prompts, completions,
    /// messages, exceptions; `SpanDetail::for_each_text`), in any case, the last word
    /// by prefix. Text without a word filters nothing.
    pub text: Option<String>,
    pub errors_only: bool,
    pub min_duration_nanos: Option<u64>,
    pub max_duration_nanos: Option<u64>,
    pub start_from_unix_nano: Option<u64>,
    pub start_to_unix_nano: Option<u64>,
    /// `attr.KEY=VALUE` filters, matched against span then resource attributes.
    pub attributes: Vec<(String, String)>,
    /// How `service` and `model` match stored names.
    pub names: NameMatch,
    pub limit: usize,
    pub cursor: Option<TraceCursor>,
}

impl TraceQuery {
    /// Attribute filters one search may carry: each is a condition on every block
    /// and span read, and the database bounds a statement's arguments.
    pub const MAX_ATTRIBUTE_FILTERS: usize = 64;

    /// Why this query cannot run as asked, if it cannot.
    pub fn problem(&self) -> Option<String> {
        (self.attributes.len() > Self::MAX_ATTRIBUTE_FILTERS).then(|| {
            format!(
                "{} attribute filters given: a search takes at most {}",
                self.attributes.len(),
                Self::MAX_ATTRIBUTE_FILTERS
            )
        })
    }
}

/// How a service or model filter matches stored names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameMatch {
    /// Equal or starting with the filter, ignoring case (what people type).
    #[default]
    Prefix,
    /// Exactly equal (what a picker of stored names sends, as Jaeger's UI does).
    Exact,
}

/// Where the next page starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceCursor {
    pub start_unix_nano: u64,
    pub trace_id: TraceId,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TraceSummary {
    pub trace_id: TraceId,
    pub root_service: String,
    pub root_name: String,
    pub start_time_unix_nano: u64,
    pub duration_nanos: u64,
    pub span_count: usize,
    pub error: bool,
    pub models: Vec<String>,
    pub total_tokens: i64,
    /// Tokens by model, of the spans that count toward `total_tokens`: what a price
    /// table turns into the trace's cost.
    pub usage: Vec<ModelUsage>,
    /// The first session and user its spans name (by start time).
    pub session_id: Option<String>,
    pub user_id: Option<String>,
}

/// Tokens one model consumed and produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelUsage {
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TracePage {
    pub traces: Vec<TraceSummary>,
    pub next_cursor: Option<TraceCursor>,
}

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

pub(crate) fn search(
    conn: &Connection,
    run_filters: &RunFilters,
    tenant: &TenantId,
    q: &TraceQuery,
) -> Result<TracePage, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(TracePage {
            traces: Vec::new(),
            next_cursor: None,
        });
    };
    let filters = sql_filters(conn, tenant_id, q)?;
    let window = SpanWindow {
        tenant_id,
        from: q.start_from_unix_nano.map_or(i64::MIN, sql_nanos),
        to: [q.start_to_unix_nano, q.cursor.map(|c| c.start_unix_nano)]
            .into_iter()
            .flatten()
            .map(sql_nanos)
            .min()
            .unwrap_or(i64::MAX),
    };
    let text = q.text.as_deref().and_then(TextQuery::parse);
    let (columns, decode): (String, crate::newest_first::DecodeRow<Candidate>) = if text.is_some() {
        (format!("{CANDIDATE_COLUMNS}, name"), |conn, row| {
            Candidate::from_row_named(conn, row).map(|c| (c.start_ns, c))
        })
    } else {
        (CANDIDATE_COLUMNS.to_owned(), |conn, row| {
            Candidate::from_row(conn, row).map(|c| (c.start_ns, c))
        })
    };
    let mut matcher = SpanMatcher::new(conn, tenant_id, &q.attributes, text)?;
    let attr_hashes = filter_hashes(&q.attributes);
    let mut candidates = NewestFirst::new(
        conn,
        window,
        &columns,
        filters.row_filter(&attr_hashes),
        decode,
    );

    let mut emitted: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    // Candidates come newest first, ties by trace id descending: the page's order.
    // Blocks are skipped by their filters as they are read; a row's detail is checked
    // when it comes out, newest first. (A `loop`, not `while let`: the filter's borrow
    // of `matcher` must end before the body hands `matcher` on.)
    loop {
        let next = candidates.next(&mut SearchKeep {
            conn,
            matcher: &mut matcher,
        })?;
        let Some(cand) = next else { break };
        if seen.contains(&cand.trace_id) {
            continue;
        }
        if let Some(c) = &q.cursor {
            if cand.start_ns == c.start_unix_nano as i64
                && cand.trace_id.as_slice() >= &c.trace_id.0[..]
            {
                continue;
            }
        }
        if cand.screened != Screened::Matches
            && !matcher.matches(conn, cand.slot, cand.origin_hash, cand.name.as_deref())?
        {
            continue;
        }
        seen.insert(cand.trace_id.clone());
        if let Some(c) = &q.cursor {
            let id = TraceId::from_bytes(&cand.trace_id)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let ranges = trace_lookup::ranges_for(conn, run_filters, tenant_id, &[id])?
                .remove(&id)
                .unwrap_or_default();
            if matched_before_cursor(
                conn,
                &filters.sql,
                &filters.args,
                &cand.trace_id,
                &ranges,
                c,
                &mut matcher,
            )? {
                continue;
            }
        }
        emitted.push((cand.start_ns, cand.trace_id));
        if emitted.len() > limit {
            break;
        }
    }

    let has_more = emitted.len() > limit;
    emitted.truncate(limit);
    let next_cursor = if has_more {
        emitted.last().and_then(|(start, tid)| {
            Some(TraceCursor {
                start_unix_nano: *start as u64,
                trace_id: TraceId::from_bytes(tid).ok()?,
            })
        })
    } else {
        None
    };
    let ids = emitted
        .iter()
        .map(|(_, tid)| TraceId::from_bytes(tid).map_err(|e| StoreError::Corrupt(e.to_string())))
        .collect::<Result<Vec<TraceId>, StoreError>>()?;
    let ranges = trace_lookup::ranges_for(conn, run_filters, tenant_id, &ids)?;
    let mut traces = Vec::with_capacity(ids.len());
    for trace_id in ids {
        let trace_ranges = ranges.get(&trace_id).map(Vec::as_slice).unwrap_or_default();
        traces.push(summarize(conn, tenant_id, trace_id, trace_ranges)?);
    }
    Ok(TracePage {
        traces,
        next_cursor,
    })
}

/// Session ids by their newest block (blocks are numbered in arrival order), among
/// blocks whose span-time zone meets `from..=to`.
pub(crate) fn recent_sessions(
    conn: &Connection,
    tenant: &TenantId,
    (from, to): (Option<u64>, Option<u64>),
    user: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let Some(tenant_id) = tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT v.value, max(v.block_id) AS newest FROM block_values v
             JOIN block_traces b ON b.tenant_id = v.tenant_id AND b.block_id = v.block_id
             WHERE v.tenant_id = ?1 AND v.field = ?2
               AND b.max_start_ns >= ?3 AND b.min_start_ns <= ?4
               AND (?5 IS NULL OR v.block_id IN
                    (SELECT block_id FROM block_values
                     WHERE tenant_id = ?1 AND field = ?6 AND value = ?5))
             GROUP BY v.value ORDER BY newest DESC, v.value LIMIT ?7",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map(
            rusqlite::params![
                tenant_id,
                ValueField::Session.code(),
                from.map_or(i64::MIN, sql_nanos),
                to.map_or(i64::MAX, sql_nanos),
                user,
                ValueField::User.code(),
                limit.min(10_000) as i64,
            ],
            |r| r.get::<_, String>(0),
        )
        .map_err(|e| sqlite_err(conn, e))?;
    rows.collect::<Result<_, _>>()
        .map_err(|e| sqlite_err(conn, e))
}

/// Whether the trace has a matching span at or after the cursor, i.e. it was on an
/// earlier page.
fn matched_before_cursor(
    conn: &Connection,
    filters: &str,
    filter_args: &[Value],
    trace_id: &[u8],
    ranges: &[RowRange],
    cursor: &TraceCursor,
    matcher: &mut SpanMatcher<'_>,
) -> Result<bool, StoreError> {
    let sql = format!(
        "SELECT start_ns, origin_hash, block_id, block_offset, block_len, name
         FROM spans NOT INDEXED
         WHERE rowid BETWEEN ? AND ? AND {filters} AND trace_id = ? AND start_ns >= ?"
    );
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| sqlite_err(conn, e))?;
    for range in ranges {
        let mut args = vec![Value::Integer(range.first), Value::Integer(range.last)];
        args.extend_from_slice(filter_args);
        args.push(Value::Blob(trace_id.to_vec()));
        args.push(Value::Integer(cursor.start_unix_nano as i64));
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args.iter()))
            .map_err(|e| sqlite_err(conn, e))?;
        while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
            let start: i64 = row.get(0).map_err(|e| sqlite_err(conn, e))?;
            let later = start > cursor.start_unix_nano as i64 || trace_id >= &cursor.trace_id.0[..];
            if !later {
                continue;
            }
            let origin_hash: i64 = row.get(1).map_err(|e| sqlite_err(conn, e))?;
            let slot = DetailSlot::from_row(conn, row, 2)?;
            let name: String = row.get(5).map_err(|e| sqlite_err(conn, e))?;
            if matcher.matches(conn, slot, origin_hash, Some(&name))? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn summarize(
    conn: &Connection,
    tenant_id: i64,
    trace_id: TraceId,
    ranges: &[RowRange],
) -> Result<TraceSummary, StoreError> {
    let heads = crate::skeleton::skeleton_rows(conn, tenant_id, trace_id, ranges)?;
    let ids: HashSet<SpanId> = heads.iter().map(|h| h.span_id).collect();
    // The root: a span without a parent in this trace, earliest first.
    let root = heads
        .iter()
        .filter(|h| h.parent_span_id.is_none_or(|p| !ids.contains(&p)))
        .min_by_key(|h| h.start_time_unix_nano)
        .or_else(|| heads.iter().min_by_key(|h| h.start_time_unix_nano));
    let start = heads
        .iter()
        .map(|h| h.start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let end = heads
        .iter()
        .map(|h| h.end_time_unix_nano)
        .max()
        .unwrap_or(0);
    let mut models: Vec<String> = heads.iter().filter_map(|h| h.model.clone()).collect();
    models.sort();
    models.dedup();
    // Agent spans repeat the usage of the LLM calls below them: count only spans whose
    // children carry no token counts.
    let parents_with_tokenized_children: HashSet<SpanId> = heads
        .iter()
        .filter(|h| h.total_tokens.is_some())
        .filter_map(|h| h.parent_span_id)
        .collect();
    let counted = || {
        heads
            .iter()
            .filter(|h| !parents_with_tokenized_children.contains(&h.span_id))
    };
    let total_tokens = counted().filter_map(|h| h.total_tokens).sum();
    let mut usage: Vec<ModelUsage> = Vec::new();
    for h in counted().filter(|h| h.input_tokens.is_some() || h.output_tokens.is_some()) {
        let model = h.model.clone().unwrap_or_default();
        let at = match usage.iter().position(|u| u.model == model) {
            Some(at) => at,
            None => {
                usage.push(ModelUsage {
                    model,
                    ..ModelUsage::default()
                });
                usage.len() - 1
            }
        };
        usage[at].input_tokens += h.input_tokens.unwrap_or(0).max(0);
        usage[at].output_tokens += h.output_tokens.unwrap_or(0).max(0);
    }
    let first_named = |get: fn(&crate::SkeletonSpan) -> Option<&String>| {
        heads
            .iter()
            .filter(|h| get(h).is_some())
            .min_by_key(|h| h.start_time_unix_nano)
            .and_then(|h| get(h).cloned())
    };
    let session_id = first_named(|h| h.session_id.as_ref());
    let user_id = first_named(|h| h.user_id.as_ref());
    Ok(TraceSummary {
        session_id,
        user_id,
        trace_id,
        root_service: root.map(|r| r.service.clone()).unwrap_or_default(),
        root_name: root.map(|r| r.name.clone()).unwrap_or_default(),
        start_time_unix_nano: start,
        duration_nanos: end.saturating_sub(start),
        span_count: heads.len(),
        error: heads.iter().any(|h| h.error),
        models,
        total_tokens,
        usage,
    })
}
