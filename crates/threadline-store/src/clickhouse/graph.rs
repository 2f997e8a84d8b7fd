//! The lineage graph on ClickHouse: the log of every change (`graph_events`, JSON
//! bodies ordered by a stamp) is the truth; each replica keeps a materialized copy in
//! an embedded store of its own (a scratch directory) that it brings up to date from
//! the log before every graph read and write, and rebuilds from the log when it starts
//! or after an erasure rewrote the log. Walks, lookups, registry outcomes and drift are
//! then the embedded store's, hop by hop in memory-mapped SQLite — no graph query runs
//! as ClickHouse SQL (a measured reason: ARCHITECTURE.md).
//!
//! Order: a replica applies the log in stamp order: a catch-up reads the entries after
//! the newest it applied. Events another replica stamped earlier but inserted after
//! this one read past them are picked up by a sweep, at most once a second, of the
//! stamps in a slack window behind the newest (`SLACK_NS`; bodies read only for the
//! stamps not applied), and applied late; the changes a
//! graph update makes (seen-intervals widen, properties merge) do not depend on order
//! but for properties two replicas set differently at once.
//!
//! Span bindings (instance → image, adapter, route …) repeat on every request: a
//! binding is logged when new or when its last-seen time moved by more than
//! `BINDING_REFRESH_NS`, so the log grows with the deployment's changes, not traffic.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use threadline_model::{EdgeEnd, EdgeKind, GraphUpdate, TenantId};

use crate::clickhouse::client::Connection;
use crate::clickhouse::{next_stamp, schema, sql};
use crate::sqlite::SqliteStore;
use crate::{Applied, StoreBackend, StoreError, WriteAck};

/// How far behind the newest applied stamp a catch-up re-reads the log (nanoseconds
/// of stamp, which follow the writing replica's clock).
const SLACK_NS: u64 = 120_000_000_000;
/// How often a catch-up also sweeps the slack window for entries inserted late.
const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// A binding seen again is logged once its last-seen time moved this far.
const BINDING_REFRESH_NS: i64 = 60_000_000_000;

/// One entry of the log.
#[derive(Serialize, Deserialize)]
enum Event {
    Update {
        update: GraphUpdate,
        received_ns: i64,
    },
    /// The log was rewritten (an erasure): every copy is rebuilt from it.
    Rebuild,
}

#[derive(clickhouse::Row, Serialize, Deserialize)]
struct EventRow {
    seq: u64,
    tenant: String,
    #[serde(with = "crate::clickhouse::rows::bytes")]
    body: Vec<u8>,
}

/// A replica's materialized copy.
struct Local {
    store: SqliteStore,
    dir: PathBuf,
    /// Stamps applied in the slack window (older ones are below `horizon`).
    applied: BTreeSet<u64>,
    newest: u64,
    /// When the slack window was last swept.
    swept: Option<std::time::Instant>,
}

impl Local {
    /// A fresh, empty copy in `dir` (whatever was there goes).
    fn create(
        dir: &std::path::Path,
        drift: &threadline_analysis::DriftConfig,
    ) -> Result<Self, StoreError> {
        let dir = dir.to_owned();
        let _ = std::fs::remove_dir_all(&dir);
        let config = crate::EmbeddedConfig {
            drift: drift.clone(),
            ..Default::default()
        };
        let store = SqliteStore::open(&dir, config)?;
        Ok(Self {
            store,
            dir,
            applied: BTreeSet::new(),
            newest: 0,
            swept: None,
        })
    }

    fn horizon(&self) -> u64 {
        self.newest.saturating_sub(SLACK_NS << 8)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) struct Graph {
    conn: Arc<Connection>,
    /// Where copies live (in the replica's local directory), one directory each.
    dir: PathBuf,
    copies: std::sync::atomic::AtomicU64,
    drift: threadline_analysis::DriftConfig,
    local: Mutex<Local>,
    /// (tenant, src, dst, kind) → the last-seen time last logged.
    bindings: Mutex<foldhash::HashMap<(TenantId, String, String, EdgeKind), i64>>,
}

fn end_key(end: &EdgeEnd) -> String {
    match end {
        EdgeEnd::Node(id) => id.to_string(),
        EdgeEnd::CurrentVersionOf(id) => format!("current-of:{id}"),
    }
}

impl Graph {
    pub(crate) fn open(
        conn: Arc<Connection>,
        dir: PathBuf,
        drift: threadline_analysis::DriftConfig,
    ) -> Result<Self, StoreError> {
        // Copies of an earlier run are stale: the log rebuilds this one.
        let _ = std::fs::remove_dir_all(&dir);
        let graph = Self {
            conn,
            local: Mutex::new(Local::create(&dir.join("copy-0"), &drift)?),
            dir,
            drift,
            copies: std::sync::atomic::AtomicU64::new(1),
            bindings: Mutex::new(Default::default()),
        };
        graph.read()?;
        Ok(graph)
    }

    /// An empty copy in a directory of its own; the copy it replaces removes its files
    /// when dropped (they may name an erased subject; readers still holding the old
    /// copy keep its open files).
    fn fresh(&self) -> Result<Local, StoreError> {
        Local::create(&self.next_dir(), &self.drift)
    }

    fn next_dir(&self) -> PathBuf {
        let n = self
            .copies
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.dir.join(format!("copy-{n}"))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Local>, StoreError> {
        self.local
            .lock()
            .map_err(|_| StoreError::poisoned("lineage graph copy"))
    }

    /// The materialized copy, up to date with the log.
    pub(crate) fn read(&self) -> Result<SqliteStore, StoreError> {
        let mut local = self.lock()?;
        self.catch_up(&mut local)?;
        Ok(local.store.clone())
    }

    /// Applies the log's entries this copy has not applied: those after the newest it
    /// applied, and (a sweep, once a second) those of the slack window it missed.
    fn catch_up(&self, local: &mut Local) -> Result<(), StoreError> {
        let mut rows = self.events_after(local.newest)?;
        if local.newest > 0 && local.swept.is_none_or(|t| t.elapsed() >= SWEEP_INTERVAL) {
            let late: Vec<u64> = self
                .stamps_between(local.horizon(), local.newest)?
                .into_iter()
                .filter(|seq| !local.applied.contains(seq))
                .collect();
            rows.extend(self.events_at(&late)?);
            rows.sort_by_key(|r| r.seq);
            local.swept = Some(std::time::Instant::now());
        }
        if rows
            .iter()
            .any(|r| !local.applied.contains(&r.seq) && is_rebuild(r))
        {
            *local = self.fresh()?;
            return self.replay(local, self.events_after(0)?);
        }
        self.replay(local, rows)
    }

    fn replay(&self, local: &mut Local, rows: Vec<EventRow>) -> Result<(), StoreError> {
        for row in rows {
            if local.applied.contains(&row.seq) || (row.seq <= local.horizon() && local.newest > 0)
            {
                continue;
            }
            let event: Event = serde_json::from_slice(&row.body).map_err(|e| {
                StoreError::corrupt(format!(
                    "lineage log entry {} does not decode: {e}",
                    row.seq
                ))
            })?;
            if let Event::Update {
                update,
                received_ns,
            } = event
            {
                let tenant = TenantId::new(&row.tenant).map_err(|e| {
                    StoreError::corrupt(format!("lineage log entry {}: {e}", row.seq))
                })?;
                local
                    .store
                    .write_graph(&tenant, update, received_ns)?
                    .wait_blocking()?;
            }
            local.applied.insert(row.seq);
            local.newest = local.newest.max(row.seq);
        }
        let horizon = local.horizon();
        local.applied = local.applied.split_off(&horizon);
        Ok(())
    }

    /// The entries after `seq`: their stamps first (the key column alone), then the
    /// bodies of those there are. A granule of the log holds thousands of entries, and
    /// reading its bodies to find none newer cost 190 ms a graph read with 3 M edges
    /// logged.
    fn events_after(&self, seq: u64) -> Result<Vec<EventRow>, StoreError> {
        let query = self.conn.client.query(&format!(
            "SELECT DISTINCT seq FROM graph_events WHERE seq > {seq}"
        ));
        let mut stamps: Vec<u64> = self.conn.fetch_all(query)?;
        if stamps.is_empty() {
            return Ok(Vec::new());
        }
        stamps.sort_unstable();
        self.events_at(&stamps)
    }

    /// The stamps of the entries in `after..=through`.
    fn stamps_between(&self, after: u64, through: u64) -> Result<Vec<u64>, StoreError> {
        let query = self.conn.client.query(&format!(
            "SELECT DISTINCT seq FROM graph_events WHERE seq > {after} AND seq <= {through}"
        ));
        self.conn.fetch_all(query)
    }

    /// The entries of these stamps.
    fn events_at(&self, seqs: &[u64]) -> Result<Vec<EventRow>, StoreError> {
        let mut out = Vec::new();
        for chunk in seqs.chunks(1_000) {
            let list: Vec<String> = chunk.iter().map(u64::to_string).collect();
            let query = self.conn.client.query(&format!(
                "SELECT seq, toString(tenant), body FROM graph_events WHERE seq IN ({})
                 ORDER BY seq LIMIT 1 BY seq",
                list.join(",")
            ));
            out.extend(self.conn.fetch_all::<EventRow>(query)?);
        }
        Ok(out)
    }

    /// Applies a change to this copy and logs it (when it changed anything), on a
    /// blocking thread of the backend's runtime (callers may be async handlers); the ack
    /// is resolved once the log holds it.
    pub(crate) fn write(
        self: &Arc<Self>,
        tenant: &TenantId,
        update: GraphUpdate,
        received_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        let (done, ack) = tokio::sync::oneshot::channel();
        let graph = Arc::clone(self);
        let tenant = tenant.clone();
        self.conn.handle().spawn_blocking(move || {
            let outcome = graph
                .apply_and_log(&tenant, update, received_ns)
                .map_err(Into::into);
            let _ = done.send(outcome);
        });
        Ok(WriteAck::of(ack))
    }

    fn apply_and_log(
        &self,
        tenant: &TenantId,
        update: GraphUpdate,
        received_ns: i64,
    ) -> Result<Applied, StoreError> {
        let mut local = self.lock()?;
        self.catch_up(&mut local)?;
        let event = Event::Update {
            update: update.clone(),
            received_ns,
        };
        let applied = local
            .store
            .write_graph(tenant, update, received_ns)?
            .wait_blocking()?;
        if applied.changed {
            let seq = self.log(tenant, &event)?;
            local.applied.insert(seq);
            local.newest = local.newest.max(seq);
        }
        Ok(applied)
    }

    /// Appends an entry to the log; its stamp.
    fn log(&self, tenant: &TenantId, event: &Event) -> Result<u64, StoreError> {
        let body = serde_json::to_vec(event)
            .map_err(|e| StoreError::corrupt(format!("cannot encode a lineage change: {e}")))?;
        let seq = next_stamp();
        let row = EventRow {
            seq,
            tenant: tenant.as_str().to_owned(),
            body,
        };
        let client = self.conn.client.clone();
        self.conn.run(async move {
            let mut insert = client.insert::<EventRow>("graph_events").await?;
            insert.write(&row).await?;
            insert.end().await
        })?;
        Ok(seq)
    }

    /// Logs the span bindings that are new or whose last-seen time moved on.
    pub(crate) fn note_bindings(
        &self,
        tenant: &TenantId,
        mut bindings: GraphUpdate,
    ) -> Result<(), StoreError> {
        {
            let logged = self
                .bindings
                .lock()
                .map_err(|_| StoreError::poisoned("logged bindings"))?;
            bindings.edges.retain(|e| {
                let key = (tenant.clone(), end_key(&e.src), end_key(&e.dst), e.kind);
                logged
                    .get(&key)
                    .is_none_or(|&seen| e.seen_ns > seen + BINDING_REFRESH_NS || e.seen_ns < seen)
            });
        }
        if bindings.edges.is_empty() && bindings.nodes.is_empty() {
            return Ok(());
        }
        let edges: Vec<(String, String, EdgeKind, i64)> = bindings
            .edges
            .iter()
            .map(|e| (end_key(&e.src), end_key(&e.dst), e.kind, e.seen_ns))
            .collect();
        self.apply_and_log(tenant, bindings, super::now_ns() as i64)?;
        let mut logged = self
            .bindings
            .lock()
            .map_err(|_| StoreError::poisoned("logged bindings"))?;
        if logged.len() > 200_000 {
            logged.clear();
        }
        for (src, dst, kind, seen) in edges {
            let slot = logged
                .entry((tenant.clone(), src, dst, kind))
                .or_insert(seen);
            *slot = (*slot).max(seen);
        }
        Ok(())
    }

    /// Erases the subject from this copy (the report's lineage counts), rewrites every
    /// log entry that names it (`crate::erasure::graph_update_without`), and logs a
    /// rebuild so that every copy — this one too — is rebuilt from the rewritten log.
    pub(crate) fn erase(
        &self,
        tenant: &TenantId,
        subject: &crate::ErasureSubject,
        requested_by: &str,
        requested_ns: i64,
    ) -> Result<crate::CopiesErased, StoreError> {
        let mut local = self.lock()?;
        self.catch_up(&mut local)?;
        let report = local
            .store
            .erase(tenant, subject.clone(), requested_by, requested_ns)?
            .wait_blocking()?
            .erasure
            .unwrap_or_default();
        self.rewrite_log(tenant, subject.value())?;
        self.log(tenant, &Event::Rebuild)?;
        // This copy is rebuilt at the next read; its scratch files go now.
        *local = self.fresh()?;
        Ok(report.copies)
    }
}

impl Graph {
    /// Deletes the tenant's log entries that name `subject` and writes them again
    /// without it (at the same stamps: the rebuilt graph keeps everything else). The
    /// entries are written after the delete was submitted, so the mutation, which
    /// applies to the parts that existed then, leaves them alone.
    fn rewrite_log(&self, tenant: &TenantId, subject: &str) -> Result<(), StoreError> {
        let json_form = crate::erasure::json_form(subject);
        let rows: Vec<EventRow> = self.conn.fetch_all(self.conn.client.query(&format!(
            "SELECT seq, toString(tenant), body FROM graph_events
             WHERE tenant = {t} AND position(body, {s}) > 0 ORDER BY seq LIMIT 1 BY seq",
            t = sql::string(tenant.as_str()),
            s = sql::string(&json_form),
        )))?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut rewritten = Vec::new();
        for row in &rows {
            let event: Event = serde_json::from_slice(&row.body).map_err(|e| {
                StoreError::corrupt(format!(
                    "lineage log entry {} does not decode: {e}",
                    row.seq
                ))
            })?;
            let Event::Update {
                update,
                received_ns,
            } = event
            else {
                continue;
            };
            let Some(update) = crate::erasure::graph_update_without(update, subject) else {
                continue;
            };
            let body = serde_json::to_string(&Event::Update {
                update,
                received_ns,
            })
            .map_err(|e| StoreError::corrupt(format!("cannot encode a lineage change: {e}")))?;
            // Whatever the rules left that still names it (a property of a node kept).
            let body = crate::erasure::redact_json_body(&body, subject).unwrap_or(body);
            rewritten.push(EventRow {
                seq: row.seq,
                tenant: row.tenant.clone(),
                body: body.into_bytes(),
            });
        }
        for chunk in rows.chunks(1000) {
            let seqs: Vec<String> = chunk.iter().map(|r| r.seq.to_string()).collect();
            schema::delete_where(
                &self.conn,
                "graph_events",
                &format!("seq IN ({})", seqs.join(",")),
            )?;
        }
        let client = self.conn.client.clone();
        self.conn.wait(async move {
            crate::clickhouse::writer::insert(&client, "graph_events", &rewritten).await
        })
    }
}

fn is_rebuild(row: &EventRow) -> bool {
    row.body.starts_with(b"\"Rebuild\"")
}
