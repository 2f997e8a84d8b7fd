//! The ClickHouse writer: one task that takes every queued write, merges what queued
//! while the last insert ran (group commit: one INSERT per table per round, however
//! many export requests it carries), inserts, then resolves each write's ack.
//!
//! Within a round, tables are written in an order that keeps a failed round safe to
//! retry: spans, search rows, logs and the rest first (their keys collapse a second
//! copy), the rollup and hop cells last (a cell row counts, so it must be written once:
//! if anything before fails, no cell was written and the retried spans count anew).
//!
//! Work that must see every earlier write and no later one (an erasure) runs as an
//! `Exclusive` job between rounds.
//!
//! A round that cannot reach ClickHouse (unreachable, timed out, overloaded) is put in
//! the spool (`spool`) and acknowledged once fsynced; while the spool holds records,
//! new rounds go behind them, and a sender task replays them in order with backoff.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foldhash::HashMap;
use threadline_analysis::hops::Hops;
use threadline_analysis::Rollups;
use tokio::sync::{mpsc, oneshot};

use crate::ack::JobOutcome;
use crate::clickhouse::rows::*;
use crate::clickhouse::search_rows::SearchRow;
use crate::clickhouse::spool::Spool;
use crate::{Applied, StoreError, WriteAck, WriterStats};

/// The least time between two rounds' inserts: at most this many INSERTs per second
/// per table, however small the writes (ClickHouse wants few large inserts).
const MIN_ROUND_INTERVAL: Duration = Duration::from_millis(100);
/// Rows a round takes at most before it inserts.
const MAX_ROUND_ROWS: usize = 200_000;

/// What one write adds to the tables.
#[derive(Default)]
pub(crate) struct Rows {
    pub(crate) spans: Vec<SpanRow>,
    pub(crate) search: Vec<SearchRow>,
    pub(crate) logs: Vec<LogRow>,
    pub(crate) operations: Vec<OperationRow>,
    pub(crate) tenants: Vec<TenantRow>,
    pub(crate) incidents: Vec<IncidentRow>,
    pub(crate) marks: Vec<MarkRow>,
    /// Rollup cells and service hops by tenant, merged across a round's writes.
    pub(crate) rollups: HashMap<String, Rollups>,
    pub(crate) hops: HashMap<String, Hops>,
}

impl Rows {
    fn absorb(&mut self, other: Rows) {
        self.spans.extend(other.spans);
        self.search.extend(other.search);
        self.logs.extend(other.logs);
        self.operations.extend(other.operations);
        self.tenants.extend(other.tenants);
        self.incidents.extend(other.incidents);
        self.marks.extend(other.marks);
        for (tenant, r) in other.rollups {
            self.rollups.entry(tenant).or_default().absorb(r);
        }
        for (tenant, h) in other.hops {
            self.hops.entry(tenant).or_default().absorb(h);
        }
    }

    fn len(&self) -> usize {
        self.spans.len() + self.logs.len() + self.incidents.len()
    }
}

/// A round as inserted, and as the spool keeps it: every table's rows, the cells
/// encoded with the round's id (a replayed round collapses with its first copy).
#[derive(serde::Serialize, serde::Deserialize, Default)]
pub(crate) struct Payload {
    spans: Vec<SpanRow>,
    search: Vec<SearchRow>,
    logs: Vec<LogRow>,
    operations: Vec<OperationRow>,
    tenants: Vec<TenantRow>,
    incidents: Vec<IncidentRow>,
    marks: Vec<MarkRow>,
    hops: Vec<HopRow>,
    cells: Vec<CellRow>,
}

impl Payload {
    fn of(rows: Rows) -> Result<Self, StoreError> {
        // Unique across rounds and replicas; a retried round is a new round.
        let batch = crate::clickhouse::next_stamp();
        let mut cells = Vec::new();
        for (tenant, rollups) in &rows.rollups {
            for ((minute, key), cell) in rollups.iter() {
                cells.push(CellRow {
                    tenant: tenant.clone(),
                    minute: *minute,
                    series: key.to_text(),
                    cell: encode(cell, "rollup cell")?,
                    batch,
                });
            }
        }
        let mut hops = Vec::new();
        for (tenant, h) in &rows.hops {
            for ((minute, hop), cell) in &h.cells {
                hops.push(HopRow {
                    tenant: tenant.clone(),
                    minute: *minute,
                    caller: hop.caller.clone(),
                    callee: hop.callee.clone(),
                    cell: encode(cell, "hop cell")?,
                    batch,
                });
            }
        }
        Ok(Self {
            spans: rows.spans,
            search: rows.search,
            logs: rows.logs,
            operations: dedup(rows.operations),
            tenants: dedup(rows.tenants),
            incidents: rows.incidents,
            marks: rows.marks,
            hops,
            cells,
        })
    }

    /// Inserts every table's rows, the tables at once (one request each, side by side),
    /// the rollup cells once all the others succeeded.
    async fn insert(&self, client: &clickhouse::Client) -> Result<(), StoreError> {
        tokio::try_join!(
            insert(client, "spans", &self.spans),
            insert(client, "span_search", &self.search),
            insert(client, "logs", &self.logs),
            insert(client, "operations", &self.operations),
            insert(client, "tenants", &self.tenants),
            insert(client, "incidents", &self.incidents),
            insert(client, "detector_marks", &self.marks),
        )?;
        insert(client, "hop_cells", &self.hops).await?;
        insert(client, "rollup_cells", &self.cells).await?;
        Ok(())
    }
}

/// Whether a failed insert may succeed later unchanged (ClickHouse unreachable or
/// overloaded), so the round waits in the spool instead of failing its writes.
fn worth_spooling(e: &StoreError) -> bool {
    matches!(
        e.kind(),
        crate::ErrorKind::Unavailable | crate::ErrorKind::Busy
    )
}

type ExclusiveWork = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = JobOutcome> + Send>> + Send>;

enum Job {
    Rows {
        rows: Box<Rows>,
        bytes: usize,
        /// Retry-window keys to forget if the rows are not stored.
        marked: Vec<u64>,
        done: oneshot::Sender<JobOutcome>,
    },
    Exclusive {
        work: ExclusiveWork,
        done: oneshot::Sender<JobOutcome>,
    },
}

#[derive(Default)]
struct Counters {
    queued_batches: AtomicUsize,
    queued_bytes: AtomicUsize,
    spans_committed: AtomicU64,
    commits: AtomicU64,
    commit_nanos_total: AtomicU64,
}

/// The handle writes are queued through.
pub(crate) struct Writer {
    tx: mpsc::UnboundedSender<Job>,
    spool: Arc<Spool>,
    counters: Arc<Counters>,
    max_queued_bytes: usize,
    max_queued_batches: usize,
}

impl Writer {
    pub(crate) fn start(
        handle: &tokio::runtime::Handle,
        client: clickhouse::Client,
        recent: Arc<Mutex<crate::retries::RecentSpans>>,
        spool: Arc<Spool>,
        max_queued_bytes: usize,
        max_queued_batches: usize,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        handle.spawn(send_spooled(client.clone(), Arc::clone(&spool)));
        handle.spawn(run(
            rx,
            client,
            recent,
            Arc::clone(&spool),
            Arc::clone(&counters),
        ));
        Self {
            tx,
            spool,
            counters,
            max_queued_bytes,
            max_queued_batches,
        }
    }

    /// Queues rows; refuses with `QueueFull` past the queue's bounds.
    pub(crate) fn submit(
        &self,
        rows: Rows,
        bytes: usize,
        marked: Vec<u64>,
    ) -> Result<WriteAck, StoreError> {
        let batches = self.counters.queued_batches.load(Ordering::SeqCst);
        let queued = self.counters.queued_bytes.load(Ordering::SeqCst);
        if batches >= self.max_queued_batches || queued + bytes > self.max_queued_bytes {
            return Err(StoreError::queue_full(batches, queued));
        }
        let (done, ack) = oneshot::channel();
        self.counters.queued_batches.fetch_add(1, Ordering::SeqCst);
        self.counters
            .queued_bytes
            .fetch_add(bytes, Ordering::SeqCst);
        self.tx
            .send(Job::Rows {
                rows: Box::new(rows),
                bytes,
                marked,
                done,
            })
            .map_err(|_| StoreError::writer_stopped())?;
        Ok(WriteAck::of(ack))
    }

    /// Queues work that runs alone, after every write queued before it.
    pub(crate) fn exclusive<F, Fut>(&self, work: F) -> Result<WriteAck, StoreError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = JobOutcome> + Send + 'static,
    {
        let (done, ack) = oneshot::channel();
        let work: ExclusiveWork = Box::new(move || Box::pin(work()));
        self.tx
            .send(Job::Exclusive { work, done })
            .map_err(|_| StoreError::writer_stopped())?;
        Ok(WriteAck::of(ack))
    }

    pub(crate) fn stats(&self) -> WriterStats {
        let c = &self.counters;
        WriterStats {
            queued_batches: c.queued_batches.load(Ordering::SeqCst),
            queued_bytes: c.queued_bytes.load(Ordering::SeqCst),
            spans_committed: c.spans_committed.load(Ordering::SeqCst),
            commits: c.commits.load(Ordering::SeqCst),
            commit_nanos_total: c.commit_nanos_total.load(Ordering::SeqCst),
            spool: Some(self.spool.stats()),
        }
    }
}

/// One round's writes, merged.
#[derive(Default)]
struct Round {
    rows: Rows,
    bytes: usize,
    marked: Vec<u64>,
    done: Vec<oneshot::Sender<JobOutcome>>,
}

async fn run(
    mut rx: mpsc::UnboundedReceiver<Job>,
    client: clickhouse::Client,
    recent: Arc<Mutex<crate::retries::RecentSpans>>,
    spool: Arc<Spool>,
    counters: Arc<Counters>,
) {
    let mut last_round: Option<Instant> = None;
    // An exclusive job that ended the previous round's gathering.
    let mut waiting: Option<Job> = None;
    loop {
        let first = match waiting.take() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let mut round = Round::default();
        match first {
            Job::Exclusive { work, done } => {
                let _ = done.send(work().await);
                continue;
            }
            Job::Rows {
                rows,
                bytes,
                marked,
                done,
            } => round.add(rows, bytes, marked, done),
        }
        // Let writes gather for a moment when rounds come back to back.
        if let Some(last) = last_round {
            let next = last + MIN_ROUND_INTERVAL;
            if next > Instant::now() {
                tokio::time::sleep_until(next.into()).await;
            }
        }
        while round.rows.len() < MAX_ROUND_ROWS {
            match rx.try_recv() {
                Ok(Job::Rows {
                    rows,
                    bytes,
                    marked,
                    done,
                }) => round.add(rows, bytes, marked, done),
                Ok(exclusive) => {
                    waiting = Some(exclusive);
                    break;
                }
                Err(_) => break,
            }
        }
        last_round = Some(Instant::now());
        let started = Instant::now();
        let spans = round.rows.spans.len() as u64;
        let outcome = match Payload::of(round.rows) {
            Ok(payload) => store_round(&client, &spool, payload).await,
            Err(e) => Err(e),
        };
        counters
            .queued_batches
            .fetch_sub(round.done.len(), Ordering::SeqCst);
        counters
            .queued_bytes
            .fetch_sub(round.bytes, Ordering::SeqCst);
        let outcome = match outcome {
            Ok(()) => {
                counters.spans_committed.fetch_add(spans, Ordering::SeqCst);
                counters.commits.fetch_add(1, Ordering::SeqCst);
                counters
                    .commit_nanos_total
                    .fetch_add(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
                Ok(Applied::changed())
            }
            Err(e) => {
                tracing::warn!(error = %e, "a ClickHouse insert failed; its writes are refused");
                if let Ok(mut recent) = recent.lock() {
                    recent.forget(&round.marked);
                }
                Err(e.into())
            }
        };
        for done in round.done {
            let _ = done.send(outcome.clone());
        }
    }
}

impl Round {
    fn add(
        &mut self,
        rows: Box<Rows>,
        bytes: usize,
        marked: Vec<u64>,
        done: oneshot::Sender<JobOutcome>,
    ) {
        self.rows.absorb(*rows);
        self.bytes += bytes;
        self.marked.extend(marked);
        self.done.push(done);
    }
}

/// Inserts a round, or spools it when ClickHouse cannot take it now (or earlier rounds
/// still wait in the spool).
async fn store_round(
    client: &clickhouse::Client,
    spool: &Arc<Spool>,
    payload: Payload,
) -> Result<(), StoreError> {
    if !spool.holds_records() {
        match payload.insert(client).await {
            Ok(()) => return Ok(()),
            Err(e) if worth_spooling(&e) => {
                tracing::warn!(error = %e, "ClickHouse did not take a round: spooling it");
            }
            Err(e) => return Err(e),
        }
    }
    let record = postcard::to_stdvec(&payload)
        .map_err(|e| StoreError::corrupt(format!("cannot encode a spooled round: {e}")))?;
    let spool = Arc::clone(spool);
    tokio::task::spawn_blocking(move || spool.append(&record))
        .await
        .map_err(|e| StoreError::unavailable(format!("the spool task failed: {e}")))?
}

/// Replays the spool to ClickHouse in order, for as long as the store is open: each
/// record inserted, then the checkpoint moved; a failure waits (0.1 s, doubling to 5 s)
/// and tries the same record again.
async fn send_spooled(client: clickhouse::Client, spool: Arc<Spool>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let next = {
            let spool = Arc::clone(&spool);
            tokio::task::spawn_blocking(move || spool.peek()).await
        };
        let (record, position) = match next {
            Ok(Ok(Some(found))) => found,
            Ok(Ok(None)) => {
                // Woken by an append, or a look every second.
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), spool.appended.notified()).await;
                continue;
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "the spool cannot be read");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            Err(_) => return,
        };
        let sent = match postcard::from_bytes::<Payload>(&record) {
            Ok(payload) => payload.insert(&client).await,
            Err(e) => Err(StoreError::corrupt(format!(
                "a spooled round does not decode: {e}"
            ))),
        };
        match sent {
            Ok(()) => {
                backoff = Duration::from_millis(100);
                let spool = Arc::clone(&spool);
                let size = record.len() as u64 + 8;
                let moved =
                    tokio::task::spawn_blocking(move || spool.sent_through(position, size)).await;
                if let Ok(Err(e)) = moved {
                    tracing::error!(error = %e, "the spool checkpoint cannot move");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "ClickHouse did not take a spooled round");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// `rows` without repeats, in their first order (a round merges several writes').
fn dedup<T: Clone + Eq + std::hash::Hash>(mut rows: Vec<T>) -> Vec<T> {
    let mut seen = foldhash::HashSet::default();
    rows.retain(|r| seen.insert(r.clone()));
    rows
}

pub(crate) fn encode<T: serde::Serialize>(value: &T, what: &str) -> Result<Vec<u8>, StoreError> {
    postcard::to_stdvec(value)
        .map_err(|e| StoreError::corrupt(format!("cannot encode {what}: {e}")))
}

pub(crate) async fn insert<T>(
    client: &clickhouse::Client,
    table: &str,
    rows: &[T],
) -> Result<(), StoreError>
where
    T: clickhouse::RowOwned + clickhouse::RowWrite,
{
    if rows.is_empty() {
        return Ok(());
    }
    let run = async {
        let mut insert = client.insert::<T>(table).await?;
        for row in rows {
            insert.write(row).await?;
        }
        insert.end().await
    };
    run.await.map_err(crate::clickhouse::client::ch_err)
}
