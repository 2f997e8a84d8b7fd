//! Service hops: calls from one service to another, per minute — what a service map
//! draws. A hop is a span whose parent is a span of another service; it is measured on
//! the callee's span (its duration and status). Parent and child in one export request
//! join at once; a child whose parent is in another export request (another process:
//! a client span calling a server span) waits in `HopJoiner` until the parent comes,
//! or the parent waits for its children, for `JOIN_WINDOW_NS` of wall time.

use foldhash::HashMap;
use serde::{Deserialize, Serialize};
use sketches_ddsketch::DDSketch;
use threadline_model::{SpanId, SpanKind, SpanRecord, TraceId};

use crate::rollup::minute_of;

/// How long a span waits for the other end of a hop in another export request.
pub const JOIN_WINDOW_NS: i64 = 5 * 60 * 1_000_000_000;
/// Entries the joiner holds per tenant, per kind: waiting parents in two generations
/// (the older dropped whole when the newer is full), orphans all dropped past it.
const JOINER_CAP: usize = 200_000;
/// Waiting parents per generation (`Parents`): two generations hold `JOINER_CAP`.
const GENERATION_CAP: usize = JOINER_CAP / 2;
/// How often orphans that waited past the window are dropped (a sweep reads each).
const SWEEP_EVERY_NS: i64 = 1_000_000_000;
/// Service names a tenant's waiting spans may name before everything waiting is
/// dropped (the names are interned: the maps hold small ids, not strings).
const SERVICES_CAP: usize = 4096;

/// Calls of one hop in one minute.
#[derive(Clone, Serialize, Deserialize)]
pub struct HopCell {
    pub calls: u64,
    pub errors: u64,
    pub latency_ms: DDSketch,
}

impl Default for HopCell {
    fn default() -> Self {
        Self {
            calls: 0,
            errors: 0,
            latency_ms: crate::cell::new_sketch(),
        }
    }
}

impl HopCell {
    fn add(&mut self, call: &Call) {
        self.calls += 1;
        self.errors += u64::from(call.error);
        self.latency_ms.add(call.duration_ns as f64 / 1e6);
    }

    /// The `q` quantile of the calls' latency (ms); `None` without calls.
    pub fn latency_quantile_ms(&self, q: f64) -> Option<f64> {
        self.latency_ms.quantile(q).ok().flatten()
    }

    pub fn merge(&mut self, other: &HopCell) {
        self.calls += other.calls;
        self.errors += other.errors;
        // Both sketches share one configuration (`new_sketch`).
        let _ = self.latency_ms.merge(&other.latency_ms);
    }
}

/// A hop's ends: the calling service and the called one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hop {
    pub caller: String,
    pub callee: String,
}

/// Hop cells by (minute of the callee span's start, hop).
#[derive(Clone, Default)]
pub struct Hops {
    pub cells: HashMap<(i64, Hop), HopCell>,
}

impl Hops {
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn absorb(&mut self, other: Hops) {
        for (at, cell) in other.cells {
            self.cells.entry(at).or_default().merge(&cell);
        }
    }
}

/// The callee end of a hop (its service is kept beside it).
#[derive(Clone, Copy, Debug)]
struct Call {
    start_ns: i64,
    duration_ns: u64,
    error: bool,
}

impl Call {
    fn of(span: &SpanRecord) -> Self {
        Self {
            start_ns: span.start_time_unix_nano.min(i64::MAX as u64) as i64,
            duration_ns: span.duration_nanos(),
            error: span.is_error(),
        }
    }
}

/// Spans waiting for the other end of a hop sent in another export request, per
/// tenant (`K`: the tenant's key).
pub struct HopJoiner<K> {
    tenants: HashMap<K, Waiting>,
    /// Keys (trace, span) to the 64 bits the maps hold: a per-process keyed hash (a
    /// collision among the 200 k spans a map holds at most has odds of about 10⁻⁹).
    ids: foldhash::fast::RandomState,
}

/// A (trace id, span id), hashed (`HopJoiner::ids`).
type SpanKey = u64;

/// One tenant's waiting spans. Memory matters: a client span calling a service that
/// reports no spans (an LLM provider) waits the whole window, so at full speed the
/// parents sit at their cap; an entry is 16 bytes and a service name an id.
#[derive(Default)]
struct Waiting {
    /// Service names the entries refer to by index.
    services: Vec<String>,
    service_ids: HashMap<String, u32>,
    /// A client or producer span with no child in its request, the parent of a call
    /// whose callee has not reported yet.
    parents: Parents,
    /// (trace, parent span) → children that came before their parent: their service,
    /// the call, and when it came.
    orphans: HashMap<SpanKey, Vec<(u32, Call, i64)>>,
    /// When the last sweep ran.
    swept_ns: i64,
}

/// Waiting parents in two generations, each a table of at most `GENERATION_CAP`
/// entries: (trace, span) → its service and when it came, in milliseconds after its
/// generation began. New entries go into the newer generation; when it is full, or
/// began a join window ago, the older one is dropped whole and the newer one takes its
/// place. No sweep reads the entries, no table is rebuilt, and memory stays at two
/// tables' worth (4.5 MB at the cap where one table, halved into a fresh one when
/// full, peaked at 15 MB); a lookup ignores an entry older than the window.
#[derive(Default)]
struct Parents {
    newer: Generation,
    older: Generation,
}

#[derive(Default)]
struct Generation {
    began_ns: i64,
    entries: HashMap<SpanKey, (u32, u32)>,
}

impl Generation {
    fn get(&self, key: SpanKey, now_ns: i64) -> Option<u32> {
        let &(service, after_ms) = self.entries.get(&key)?;
        let came_ns = self
            .began_ns
            .saturating_add(i64::from(after_ms) * 1_000_000);
        (now_ns.saturating_sub(came_ns) <= JOIN_WINDOW_NS).then_some(service)
    }
}

impl Parents {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.entries.len() + self.older.entries.len()
    }

    fn get(&self, key: SpanKey, now_ns: i64) -> Option<u32> {
        self.newer
            .get(key, now_ns)
            .or_else(|| self.older.get(key, now_ns))
    }

    fn insert(&mut self, key: SpanKey, service: u32, now_ns: i64) {
        let age_ns = now_ns.saturating_sub(self.newer.began_ns);
        if self.newer.entries.len() >= GENERATION_CAP || age_ns >= JOIN_WINDOW_NS {
            self.older = std::mem::take(&mut self.newer);
            self.newer.began_ns = now_ns;
        }
        let after_ms = now_ns.saturating_sub(self.newer.began_ns) / 1_000_000;
        let after_ms = u32::try_from(after_ms.max(0)).unwrap_or(u32::MAX);
        self.newer.entries.insert(key, (service, after_ms));
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

impl Waiting {
    fn service_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.service_ids.get(name) {
            return id;
        }
        let id = self.services.len() as u32;
        self.services.push(name.to_owned());
        self.service_ids.insert(name.to_owned(), id);
        id
    }
}

impl<K> Default for HopJoiner<K> {
    fn default() -> Self {
        Self {
            tenants: HashMap::default(),
            ids: foldhash::fast::RandomState::default(),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash> HopJoiner<K> {
    /// The hops among `spans` (one export request of `tenant`, received at `now_ns`),
    /// less the spans `repeated` marks (a retried export): parent and child in the
    /// request, and those joined with the other end waiting from earlier requests.
    pub fn hops(
        &mut self,
        tenant: &K,
        spans: &[SpanRecord],
        repeated: &[bool],
        now_ns: i64,
    ) -> Hops {
        use std::hash::BuildHasher;
        // Calls found, their ends named by index (a span's service or a waiting
        // service's id); made owned hops once per distinct hop at the end.
        let mut found: Vec<(Named, Named, Call)> = Vec::new();
        let by_id: HashMap<(TraceId, SpanId), usize> = spans
            .iter()
            .enumerate()
            .map(|(i, s)| ((s.trace_id, s.span_id), i))
            .collect();
        let has_child: std::collections::HashSet<(TraceId, SpanId)> = spans
            .iter()
            .filter_map(|s| Some((s.trace_id, s.parent_span_id?)))
            .collect();
        if !self.tenants.contains_key(tenant) {
            self.tenants.insert(tenant.clone(), Waiting::default());
        }
        let ids = &self.ids;
        let Some(waiting) = self.tenants.get_mut(tenant) else {
            return Hops::default();
        };
        waiting.expire(now_ns);
        for (i, span) in spans.iter().enumerate() {
            if repeated.get(i).copied().unwrap_or(false) {
                continue;
            }
            if let Some(parent) = span.parent_span_id {
                match by_id.get(&(span.trace_id, parent)) {
                    Some(&p) => found.push((Named::Span(p), Named::Span(i), Call::of(span))),
                    None => {
                        let key = ids.hash_one((span.trace_id, parent));
                        match waiting.parents.get(key, now_ns) {
                            Some(caller) => {
                                found.push((Named::Waiting(caller), Named::Span(i), Call::of(span)))
                            }
                            None => {
                                let callee = waiting.service_id(&span.service);
                                waiting.orphans.entry(key).or_default().push((
                                    callee,
                                    Call::of(span),
                                    now_ns,
                                ));
                            }
                        }
                    }
                }
            }
            // Children that came before this span join it now; a client or producer
            // span without a child here waits for its callee's.
            let key = ids.hash_one((span.trace_id, span.span_id));
            if let Some(children) = waiting.orphans.remove(&key) {
                for (callee, call, _) in children {
                    found.push((Named::Span(i), Named::Waiting(callee), call));
                }
            } else if matches!(span.kind, SpanKind::Client | SpanKind::Producer)
                && !has_child.contains(&(span.trace_id, span.span_id))
            {
                let caller = waiting.service_id(&span.service);
                waiting.parents.insert(key, caller, now_ns);
            }
        }
        let name = |n: Named| match n {
            Named::Span(i) => spans[i].service.as_str(),
            Named::Waiting(id) => waiting.services[id as usize].as_str(),
        };
        let mut cells: HashMap<(i64, &str, &str), HopCell> = HashMap::default();
        for (caller, callee, call) in &found {
            let (caller, callee) = (name(*caller), name(*callee));
            if caller != callee {
                cells
                    .entry((minute_of(call.start_ns), caller, callee))
                    .or_default()
                    .add(call);
            }
        }
        Hops {
            cells: cells
                .into_iter()
                .map(|((minute, caller, callee), cell)| {
                    let hop = Hop {
                        caller: caller.to_owned(),
                        callee: callee.to_owned(),
                    };
                    ((minute, hop), cell)
                })
                .collect(),
        }
    }
}

/// An end of a call found in a batch: the service of the batch's span at an index, or
/// a waiting service's id.
#[derive(Clone, Copy)]
enum Named {
    Span(usize),
    Waiting(u32),
}

impl Waiting {
    /// Drops the orphans that waited longer than the join window (at most once a
    /// second, unless their map is past its cap: then all of them). Past
    /// `SERVICES_CAP` names, everything waiting goes.
    fn expire(&mut self, now_ns: i64) {
        if self.services.len() > SERVICES_CAP {
            self.parents.clear();
            self.orphans.clear();
            self.services.clear();
            self.service_ids.clear();
        }
        let full = self.orphans.len() > JOINER_CAP;
        if !full && now_ns.saturating_sub(self.swept_ns) < SWEEP_EVERY_NS {
            return;
        }
        self.swept_ns = now_ns;
        let cutoff = now_ns.saturating_sub(JOIN_WINDOW_NS);
        if full {
            self.orphans.clear();
        } else {
            self.orphans.retain(|_, calls| {
                calls.retain(|(_, _, t)| *t > cutoff);
                !calls.is_empty()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use threadline_model::{SpanDetail, SpanOrigin, SpanRecord, StatusCode};

    use super::*;
    use threadline_model::SpanKind;

    fn span(trace: u8, id: u8, parent: Option<u8>, service: &str, error: bool) -> SpanRecord {
        let mut s = SpanRecord {
            trace_id: TraceId([trace; 16]),
            span_id: SpanId([id; 8]),
            parent_span_id: parent.map(|p| SpanId([p; 8])),
            name: "op".into(),
            service: service.into(),
            kind: SpanKind::Internal,
            start_time_unix_nano: 120_000_000_000,
            end_time_unix_nano: 120_000_000_000 + u64::from(id) * 1_000_000,
            detail: SpanDetail::default(),
            origin: std::sync::Arc::new(SpanOrigin::default()),
            llm: None,
        };
        if error {
            s.detail.status.code = StatusCode::Error;
        }
        s
    }

    fn calls(hops: &Hops) -> Vec<(String, String, u64, u64)> {
        let mut v: Vec<_> = hops
            .cells
            .iter()
            .map(|((_, h), c)| (h.caller.clone(), h.callee.clone(), c.calls, c.errors))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_parent_of_another_service_in_the_request_is_a_hop() {
        let spans = [
            span(1, 1, None, "gateway", false),
            span(1, 2, Some(1), "gateway", false),
            span(1, 3, Some(2), "retriever", true),
        ];
        let mut joiner = HopJoiner::<u8>::default();
        let hops = joiner.hops(&0, &spans, &[false; 3], 0);
        assert_eq!(calls(&hops), [("gateway".into(), "retriever".into(), 1, 1)]);
        // A retried export counts nothing again.
        assert!(joiner.hops(&0, &spans, &[true; 3], 0).is_empty());
    }

    #[test]
    fn ends_in_other_requests_join_whichever_comes_first() {
        let mut joiner = HopJoiner::<u8>::default();
        // The server span first (its process exported sooner), then the client's.
        let server = [span(1, 3, Some(2), "llm-backend", false)];
        assert!(joiner.hops(&0, &server, &[false], 0).is_empty());
        let client = [
            span(1, 1, None, "app", false),
            span(1, 2, Some(1), "app", false),
        ];
        let hops = joiner.hops(&0, &client, &[false; 2], 1);
        assert_eq!(calls(&hops), [("app".into(), "llm-backend".into(), 1, 0)]);
        // The client's first (a client span: it waits for its callee), then the
        // server's.
        let mut call = span(2, 2, Some(1), "app", false);
        call.kind = SpanKind::Client;
        let client = [span(2, 1, None, "app", false), call];
        assert!(joiner.hops(&0, &client, &[false; 2], 2).is_empty());
        let server = [span(2, 3, Some(2), "llm-backend", true)];
        let hops = joiner.hops(&0, &server, &[false], 3);
        assert_eq!(calls(&hops), [("app".into(), "llm-backend".into(), 1, 1)]);
        // Another tenant's span with the same ids joins nothing.
        let server = [span(2, 3, Some(2), "llm-backend", true)];
        assert!(joiner.hops(&1, &server, &[false], 4).is_empty());
    }

    #[test]
    fn what_waits_past_the_window_is_dropped() {
        let mut joiner = HopJoiner::<u8>::default();
        let server = [span(1, 3, Some(2), "llm-backend", false)];
        joiner.hops(&0, &server, &[false], 0);
        assert_eq!(joiner.tenants[&0].orphans.len(), 1);
        assert_eq!(joiner.tenants[&0].services, ["llm-backend"]);
        let client = [
            span(1, 1, None, "app", false),
            span(1, 2, Some(1), "app", false),
        ];
        let later = JOIN_WINDOW_NS + 1;
        assert!(joiner.hops(&0, &client, &[false; 2], later).is_empty());
    }

    #[test]
    fn a_joiner_at_its_cap_keeps_two_generations_of_parents() {
        let mut joiner = HopJoiner::<u8>::default();
        let client = |n: u32| {
            let mut s = span(0, 0, None, "app", false);
            s.trace_id = TraceId(u128::from(n).to_le_bytes());
            s.span_id = SpanId(u64::from(n).to_le_bytes());
            s.kind = SpanKind::Client;
            s
        };
        // Client spans whose callee never reports: each waits, the generations stay
        // at their cap.
        for batch in 0..6_000u32 {
            let spans: Vec<SpanRecord> = (0..100u32).map(|i| client(batch * 100 + i)).collect();
            joiner.hops(&0, &spans, &[false; 100], i64::from(batch));
            let parents = &joiner.tenants[&0].parents;
            assert!(parents.len() <= JOINER_CAP);
            for generation in [&parents.newer, &parents.older] {
                // hashbrown fills 7/8 of its buckets: one generation's table.
                assert!(
                    generation.entries.capacity() < (GENERATION_CAP * 8 / 7).next_power_of_two(),
                    "batch {batch}: {} entries in a table for {}",
                    generation.entries.len(),
                    generation.entries.capacity()
                );
            }
        }
        // The most recent parents still join their callees; the oldest were dropped.
        let callee = |n: u32| {
            let mut s = span(0, 1, None, "llm", false);
            s.trace_id = TraceId(u128::from(n).to_le_bytes());
            s.parent_span_id = Some(SpanId(u64::from(n).to_le_bytes()));
            s
        };
        let recent = [callee(599_999)];
        let hops = joiner.hops(&0, &recent, &[false], 6_000);
        assert_eq!(calls(&hops), [("app".into(), "llm".into(), 1, 0)]);
        let oldest = [callee(0)];
        assert!(joiner.hops(&0, &oldest, &[false], 6_000).is_empty());
    }

    #[test]
    fn a_parent_waits_the_join_window_and_no_longer() {
        let mut joiner = HopJoiner::<u8>::default();
        let mut call = span(1, 2, Some(1), "app", false);
        call.kind = SpanKind::Client;
        joiner.hops(&0, &[span(1, 1, None, "app", false), call], &[false; 2], 0);
        let server = [span(1, 3, Some(2), "llm-backend", false)];
        let hops = joiner.hops(&0, &server, &[false], JOIN_WINDOW_NS);
        assert_eq!(calls(&hops), [("app".into(), "llm-backend".into(), 1, 0)]);
        let mut call = span(2, 2, Some(1), "app", false);
        call.kind = SpanKind::Client;
        joiner.hops(&0, &[span(2, 1, None, "app", false), call], &[false; 2], 0);
        let server = [span(2, 3, Some(2), "llm-backend", false)];
        let late = JOIN_WINDOW_NS + 1_000_000;
        assert!(joiner.hops(&0, &server, &[false], late).is_empty());
    }
}
