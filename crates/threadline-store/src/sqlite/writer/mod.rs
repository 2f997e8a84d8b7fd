//! The single writer: a dedicated thread owns the write connection, drains whatever
//! batches are queued, commits them in one transaction (group commit) and only then
//! acknowledges each batch. The queue is bounded in batches and bytes; a full queue is
//! refused at once so the server can answer 429 instead of growing without bound.
//!
//! Durability is pipelined: the writer's commits do not wait for the disk
//! (`synchronous = NORMAL`); a second thread fsyncs the WAL file after each commit
//! (one fsync for every commit that queued up meanwhile) and only then sends the acks,
//! so the writer builds the next transaction while the disk flushes the last one. An
//! ack still means "on disk": the fsync started after the commit's frames were
//! written.
//!
//! Here: the jobs, the queue and its handle. `batch`: encoding spans into rows;
//! `commit`: the writer and syncer threads; `insert`: one batch's rows.

use std::collections::HashMap;

use foldhash::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use rusqlite::{params, Connection, Transaction};
use threadline_model::{SpanRecord, TenantId};
use tokio::sync::oneshot;

use crate::sqlite::checkpoint::CheckpointRequests;
use crate::sqlite::text_groups::IndexState;
use crate::sqlite::text_indexer::{BlockFeed, CommittedBlock};
use crate::sqlite::{codec, EmbeddedConfig, StoreError};

/// One span, encoded into column values.
/// One span's row. Its strings are shared within the batch (`Interned`): a batch's
/// spans repeat a few services, names, models and routes, and each would otherwise be
/// a string allocated on the ingest pool and freed on the writer thread.
struct SpanRow {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    name: Arc<str>,
    service: Arc<str>,
    kind: i32,
    start_ns: i64,
    end_ns: i64,
    duration_ns: i64,
    status_code: i32,
    origin_hash: i64,
    model: Option<Arc<str>>,
    route: Option<Arc<str>>,
    adapter: Option<Arc<str>>,
    ab_group: Option<Arc<str>>,
    instance: Option<Arc<str>>,
    image: Option<Arc<str>>,
    prompt_version: Option<Arc<str>>,
    user_id: Option<Arc<str>>,
    session_id: Option<Arc<str>>,
    total_tokens: Option<i64>,
    input_tokens: Option<i64>,
    /// The responding model, when it is not the one in `model`.
    response_model: Option<Arc<str>>,
    output_tokens: Option<i64>,
    block_offset: u32,
    block_len: u32,
}

/// Spans of one request, encoded and ready for the writer.
pub(crate) struct PreparedBatch {
    tenant: TenantId,
    /// Identities of the spans this batch is the first to bring (`retries`).
    pub(crate) marked: Vec<u64>,
    rows: Vec<SpanRow>,
    origins: Vec<(i64, Vec<u8>)>,
    /// Compressed details of all rows; each row points at its slot.
    block: Vec<u8>,
    /// The distinct trace ids of the rows, sorted, 16 bytes each.
    trace_ids: Vec<u8>,
    /// The block's attribute filter (`attr_filter`).
    attr_filter: Vec<u8>,
    /// The block's distinct values of filterable columns (`block_values`).
    values: crate::sqlite::block_values::BlockValues,
    /// The distinct (session, user) pairs of the rows, for the session list.
    sessions: crate::sqlite::sessions::BlockSessions,
    /// Distinct services, (service, span name, kind) operations, and (model,
    /// response model or "") pairs, of the rows.
    services: Vec<String>,
    operations: Vec<(String, String, i32)>,
    models: Vec<(String, String)>,
    min_start_ns: i64,
    max_start_ns: i64,
    encoded_bytes: usize,
    /// Lineage edges the spans reveal, committed with them.
    graph: Option<crate::sqlite::graph::PreparedGraph>,
    /// The request spans' rollup cells, computed here rather than on the writer.
    rollups: threadline_analysis::BatchRollups,
    /// Calls between services among the spans (and joined with earlier requests).
    pub(crate) hops: threadline_analysis::hops::Hops,
    /// The spans' searchable texts, handed to the full-text indexer once committed.
    texts: crate::sqlite::text_index::BlockTexts,
    /// (block id, erasures so far), set by the transaction that inserts the block.
    inserted: Option<(i64, i64)>,
}

/// The distinct items, sorted.
fn sorted_distinct<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort_unstable();
    v.dedup();
    v
}

use crate::ack::{Applied, JobOutcome, WriteAck, WriterStats};

/// A lineage graph change for the writer.
pub(crate) struct GraphJob {
    pub(crate) tenant: TenantId,
    pub(crate) graph: crate::sqlite::graph::PreparedGraph,
    pub(crate) received_ns: i64,
}

/// An erasure for the writer.
pub(crate) struct EraseJob {
    pub(crate) tenant: TenantId,
    pub(crate) subject: crate::sqlite::ErasureSubject,
    pub(crate) requested_by: String,
    pub(crate) requested_ns: i64,
}

// Jobs are moved once, into the bounded queue and out: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Work {
    Spans(PreparedBatch),
    Logs(crate::sqlite::logs::PreparedLogs),
    Graph(GraphJob),
    Erase(EraseJob),
    /// Merge the rollup cells held in memory into the store (a reader wants them).
    FlushRollups,
    Incidents(IncidentsJob),
    /// The trace-id index compactor's writes (`trace_index`), committed together.
    TraceIndex(Vec<crate::sqlite::trace_index::IndexWrite>),
    /// A full-text document from the background indexer (`text_indexer`).
    Text(crate::sqlite::text_indexer::TextWrite),
}

/// Incidents the detector opened or updated, and how far it has looked.
pub(crate) struct IncidentsJob {
    pub(crate) tenant: TenantId,
    pub(crate) incidents: Vec<threadline_analysis::Incident>,
    pub(crate) processed_minute: i64,
}

impl Work {
    /// Rows it writes: what a commit group is bounded by.
    fn rows(&self) -> usize {
        match self {
            Work::Spans(b) => b.rows.len(),
            Work::Logs(l) => l.record_count(),
            Work::Graph(g) => g.graph.size(),
            Work::Erase(_) | Work::FlushRollups => 1,
            Work::Incidents(j) => 1 + j.incidents.len(),
            Work::TraceIndex(w) => w.iter().map(|w| w.rows()).sum(),
            Work::Text(_) => 1,
        }
    }

    fn encoded_bytes(&self) -> usize {
        match self {
            Work::Spans(b) => b.encoded_bytes,
            Work::Logs(l) => l.encoded_bytes,
            Work::Graph(g) => g.graph.bytes(),
            Work::Erase(_) | Work::FlushRollups => 256,
            Work::Incidents(j) => 256 + 1024 * j.incidents.len(),
            Work::TraceIndex(w) => w.iter().map(|w| w.bytes()).sum(),
            Work::Text(w) => w.bytes(),
        }
    }
}

struct Job {
    work: Work,
    /// Encoded size, counted against the queue's byte bound.
    bytes: usize,
    ack: oneshot::Sender<JobOutcome>,
}

#[derive(Default)]
struct Counters {
    /// Whether the writer holds rollup cells or service hops not merged into their
    /// tables yet (a reader then asks for a flush; otherwise it reads right away).
    rollups_unflushed: std::sync::atomic::AtomicBool,
    queued_batches: AtomicUsize,
    queued_bytes: AtomicUsize,
    /// Writes being prepared on callers' threads, not queued yet (`WriteComing`).
    preparing: Arc<AtomicUsize>,
    spans_committed: AtomicU64,
    commits: AtomicU64,
    commit_nanos_total: AtomicU64,
}

pub(crate) struct WriterHandle {
    sender: SyncSender<Job>,
    counters: Arc<Counters>,
    max_queued_batches: usize,
    max_queued_bytes: usize,
}

impl WriterHandle {
    pub(crate) fn spawn(
        conn: Connection,
        path: PathBuf,
        config: EmbeddedConfig,
        checkpoints: CheckpointRequests,
        text_feed: BlockFeed,
    ) -> Result<Self, StoreError> {
        let (sender, receiver) = mpsc::sync_channel(config.max_queued_batches);
        let counters = Arc::new(Counters::default());
        // Blocks after the stored mark are replayed into the ledger at open.
        counters.rollups_unflushed.store(true, Ordering::SeqCst);
        let thread_counters = Arc::clone(&counters);
        let max_queued_bytes = config.max_queued_bytes;
        let max_queued_batches = config.max_queued_batches;
        let (synced, to_sync) = mpsc::channel();
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        crate::sqlite::background::spawn("threadline-sync", move || run_syncer(&wal, to_sync))?;
        crate::sqlite::background::spawn("threadline-writer", move || {
            run_writer(
                conn,
                path,
                receiver,
                thread_counters,
                config,
                Handoffs {
                    synced,
                    checkpoints,
                    text_feed,
                },
            )
        })?;
        Ok(Self {
            sender,
            counters,
            max_queued_batches,
            max_queued_bytes,
        })
    }

    /// Counts a write as being prepared until the guard drops (just before it is
    /// queued, or when its preparation failed): while any is, the writer waits a
    /// little for it before committing, so that under load one commit takes several
    /// batches (see `run_writer`).
    pub(crate) fn preparing(&self) -> crate::WriteComing {
        crate::WriteComing::counted_in(&self.counters.preparing)
    }

    pub(crate) fn submit(&self, batch: PreparedBatch) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Spans(batch))
    }

    pub(crate) fn submit_logs(
        &self,
        logs: crate::sqlite::logs::PreparedLogs,
    ) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Logs(logs))
    }

    pub(crate) fn submit_graph(&self, job: GraphJob) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Graph(job))
    }

    pub(crate) fn submit_erase(&self, job: EraseJob) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Erase(job))
    }

    pub(crate) fn submit_rollup_flush(&self) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::FlushRollups)
    }

    /// Merges the rollup cells held in memory into the store and waits until they are
    /// committed, waiting for room in a full queue.
    pub(crate) fn flush_rollups_waiting(&self) -> Result<(), StoreError> {
        if !self.counters.rollups_unflushed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.submit_waiting(Work::FlushRollups).map(drop)
    }

    pub(crate) fn submit_incidents(&self, job: IncidentsJob) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Incidents(job))
    }

    /// Index writes, waiting while the queue is full (the compactor is in no hurry;
    /// ingest is never refused on its account beyond one piece in the queue).
    pub(crate) fn write_index(
        &self,
        writes: Vec<crate::sqlite::trace_index::IndexWrite>,
    ) -> Result<(), StoreError> {
        self.submit_waiting(Work::TraceIndex(writes)).map(|_| ())
    }

    /// A full-text document, waiting as `write_index` does; whether it was written
    /// (not when an erasure came first).
    pub(crate) fn write_text(
        &self,
        write: crate::sqlite::text_indexer::TextWrite,
    ) -> Result<bool, StoreError> {
        self.submit_waiting(Work::Text(write))
            .map(|applied| applied.changed)
    }

    /// Queues a background thread's work, waiting while the queue is full.
    fn submit_waiting(&self, mut work: Work) -> Result<Applied, StoreError> {
        loop {
            match self.try_submit(work).map_err(|r| *r) {
                Ok(ack) => return ack.wait_blocking(),
                Err((e, back)) if e.kind() == crate::ErrorKind::Busy => {
                    work = back;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    fn submit_work(&self, work: Work) -> Result<WriteAck, StoreError> {
        self.try_submit(work).map_err(|refused| refused.0)
    }

    /// Queues `work`, or gives it back with the reason it was refused.
    fn try_submit(&self, work: Work) -> Result<WriteAck, Box<(StoreError, Work)>> {
        let bytes = work.encoded_bytes();
        let queued_bytes = self.counters.queued_bytes.load(Ordering::Relaxed);
        let full = || {
            StoreError::queue_full(
                self.counters.queued_batches.load(Ordering::Relaxed),
                queued_bytes,
            )
        };
        // Both bounds count what was accepted and is not committed yet, the writer's
        // current group included (it gathers batches as they come, see `run_writer`).
        if queued_bytes > 0 && queued_bytes + bytes > self.max_queued_bytes {
            return Err(Box::new((full(), work)));
        }
        if self.counters.queued_batches.load(Ordering::Relaxed) >= self.max_queued_batches {
            return Err(Box::new((full(), work)));
        }
        let (tx, rx) = oneshot::channel();
        self.counters.queued_batches.fetch_add(1, Ordering::Relaxed);
        self.counters
            .queued_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        match self.sender.try_send(Job {
            work,
            bytes,
            ack: tx,
        }) {
            Ok(()) => Ok(WriteAck::of(rx)),
            Err(e) => {
                self.counters.queued_batches.fetch_sub(1, Ordering::Relaxed);
                self.counters
                    .queued_bytes
                    .fetch_sub(bytes, Ordering::Relaxed);
                match e {
                    TrySendError::Full(job) => Err(Box::new((full(), job.work))),
                    TrySendError::Disconnected(job) => {
                        Err(Box::new((StoreError::writer_stopped(), job.work)))
                    }
                }
            }
        }
    }

    pub(crate) fn stats(&self) -> WriterStats {
        let c = &self.counters;
        WriterStats {
            queued_batches: c.queued_batches.load(Ordering::Relaxed),
            queued_bytes: c.queued_bytes.load(Ordering::Relaxed),
            spans_committed: c.spans_committed.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            commit_nanos_total: c.commit_nanos_total.load(Ordering::Relaxed),
            spool: None,
        }
    }
}

/// What the writer remembers between commits to skip redundant statements.
#[derive(Default)]
struct WriterCache {
    tenant_ids: HashMap<TenantId, i64>,
    origins: HashSet<(i64, i64)>,
    services: HashSet<(i64, String)>,
    /// Bounded (`MAX_CACHED_OPERATIONS`): span names can be of any cardinality.
    operations: HashSet<(i64, String, String, i32)>,
    models: HashSet<(i64, String, String)>,
    graph: crate::sqlite::graph::GraphCache,
}

impl WriterCache {
    /// Forgets every remembered row (after a rollback); settings stay.
    fn reset(&mut self) {
        let drift = std::mem::take(&mut self.graph.drift);
        *self = Self::default();
        self.graph.drift = drift;
    }
}

/// Acks of one committed transaction, waiting for the WAL to reach the disk.
type CommittedAcks = Vec<(oneshot::Sender<JobOutcome>, JobOutcome)>;

/// Where the writer hands work on after a commit.
struct Handoffs {
    /// The syncer, which fsyncs the WAL and then acks.
    synced: mpsc::Sender<CommittedAcks>,
    /// The checkpointer.
    checkpoints: CheckpointRequests,
    /// The full-text indexer: the committed blocks' texts.
    text_feed: BlockFeed,
}

mod batch;
mod commit;
mod insert;

use commit::{run_syncer, run_writer};
