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

use crate::checkpoint::CheckpointRequests;
use crate::text_groups::IndexState;
use crate::text_indexer::{BlockFeed, CommittedBlock};
use crate::{codec, SqliteConfig, StoreError};

/// One span, encoded into column values.
struct SpanRow {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    name: String,
    service: String,
    kind: i32,
    start_ns: i64,
    end_ns: i64,
    duration_ns: i64,
    status_code: i32,
    origin_hash: i64,
    model: Option<String>,
    route: Option<String>,
    adapter: Option<String>,
    ab_group: Option<String>,
    instance: Option<String>,
    image: Option<String>,
    prompt_version: Option<String>,
    user_id: Option<String>,
    session_id: Option<String>,
    total_tokens: Option<i64>,
    input_tokens: Option<i64>,
    /// The responding model, when it is not the one in `model`.
    response_model: Option<String>,
    output_tokens: Option<i64>,
    block_offset: u32,
    block_len: u32,
}

/// Spans of one request, encoded and ready for the writer.
pub struct PreparedBatch {
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
    values: crate::block_values::BlockValues,
    /// Distinct services, (service, span name, kind) operations, and (model,
    /// response model or "") pairs, of the rows.
    services: Vec<String>,
    operations: Vec<(String, String, i32)>,
    models: Vec<(String, String)>,
    min_start_ns: i64,
    max_start_ns: i64,
    encoded_bytes: usize,
    /// Lineage edges the spans reveal, committed with them.
    graph: Option<crate::graph::PreparedGraph>,
    /// The request spans' rollup cells, computed here rather than on the writer.
    rollups: threadline_analysis::Rollups,
    /// The spans' searchable texts, handed to the full-text indexer once committed.
    texts: crate::text_index::BlockTexts,
    /// (block id, erasures so far), set by the transaction that inserts the block.
    inserted: Option<(i64, i64)>,
}

impl PreparedBatch {
    pub(crate) fn encode(
        tenant: &TenantId,
        spans: &[SpanRecord],
        observed: &[threadline_analysis::Observed],
    ) -> Result<Self, StoreError> {
        let mut origins = codec::BatchOrigins::default();
        let mut rows = Vec::with_capacity(spans.len());
        let mut filter = crate::attr_filter::FilterBuilder::default();
        let block = codec::encode_block(spans.iter().map(|s| (&s.detail, &s.llm)))?;
        let texts = crate::text_index::BlockTexts::of_spans(spans);
        let mut encoded_bytes = block.blob.len() + texts.bytes();
        for (span, (block_offset, block_len)) in spans.iter().zip(block.slots) {
            let (origin_hash, first_seen) = origins.hash(&span.origin)?;
            if first_seen {
                filter.add_attributes(&span.origin.resource_attributes);
            }
            filter.add_attributes(&span.detail.attributes);
            let llm = span.llm.as_ref();
            let field =
                |f: fn(&threadline_model::LlmView) -> Option<&String>| llm.and_then(f).cloned();
            encoded_bytes += span.name.len() + span.service.len() + 128;
            rows.push(SpanRow {
                trace_id: span.trace_id.0,
                span_id: span.span_id.0,
                parent_span_id: span.parent_span_id.map(|p| p.0),
                name: span.name.clone(),
                service: span.service.clone(),
                kind: span.kind.to_otlp(),
                // Nanosecond times are u64 on the wire; stored bit-for-bit as i64.
                start_ns: span.start_time_unix_nano as i64,
                end_ns: span.end_time_unix_nano as i64,
                duration_ns: span.duration_nanos().min(i64::MAX as u64) as i64,
                status_code: span.detail.status.code.to_otlp(),
                origin_hash,
                model: llm.and_then(|l| l.model()).map(str::to_owned),
                route: field(|l| l.route.as_ref()),
                adapter: field(|l| l.adapter_id.as_ref()),
                ab_group: field(|l| l.ab_group.as_ref()),
                instance: field(|l| l.instance_id.as_ref()),
                image: field(|l| l.image.as_ref()),
                prompt_version: field(|l| l.prompt_template_version.as_ref()),
                user_id: field(|l| l.user_id.as_ref()),
                session_id: field(|l| l.session_id.as_ref()),
                total_tokens: llm.and_then(|l| l.total_tokens),
                input_tokens: llm.and_then(|l| l.input_tokens),
                response_model: llm
                    .and_then(|l| l.response_model.as_ref())
                    .filter(|r| Some(r.as_str()) != llm.and_then(|l| l.model()))
                    .cloned(),
                output_tokens: llm.and_then(|l| l.output_tokens),
                block_offset,
                block_len,
            });
        }
        let ids = sorted_distinct(rows.iter().map(|r| r.trace_id));
        // Borrowed while deduplicated: a batch's rows share a few names.
        let services = sorted_distinct(rows.iter().map(|r| r.service.as_str()))
            .into_iter()
            .map(str::to_owned)
            .collect();
        let operations = sorted_distinct(
            rows.iter()
                .map(|r| (r.service.as_str(), r.name.as_str(), r.kind)),
        )
        .into_iter()
        .map(|(service, name, kind)| (service.to_owned(), name.to_owned(), kind))
        .collect();
        let models = sorted_distinct(rows.iter().filter_map(|r| {
            Some((
                r.model.as_deref()?,
                r.response_model.as_deref().unwrap_or_default(),
            ))
        }))
        .into_iter()
        .map(|(m, r)| (m.to_owned(), r.to_owned()))
        .collect();
        let values = crate::block_values::BlockValues::of_spans(rows.iter().map(|r| {
            crate::block_values::SpanValues {
                service: &r.service,
                model: r.model.as_deref(),
                route: r.route.as_deref(),
                adapter: r.adapter.as_deref(),
                instance: r.instance.as_deref(),
                image: r.image.as_deref(),
                prompt_version: r.prompt_version.as_deref(),
                ab_group: r.ab_group.as_deref(),
                error: r.status_code == 2,
            }
        }));
        encoded_bytes += origins.bytes() + values.bytes();
        Ok(Self {
            tenant: tenant.clone(),
            marked: Vec::new(),
            min_start_ns: rows.iter().map(|r| r.start_ns).min().unwrap_or(0),
            max_start_ns: rows.iter().map(|r| r.start_ns).max().unwrap_or(0),
            trace_ids: ids.concat(),
            attr_filter: filter.encode(),
            values,
            services,
            operations,
            models,
            rows,
            origins: origins.encoded,
            block: block.blob,
            encoded_bytes,
            graph: None,
            rollups: threadline_analysis::Rollups::of_observed(spans, observed),
            texts,
            inserted: None,
        })
    }

    /// Lineage graph changes to commit in the same transaction as the spans.
    pub fn attach_graph(&mut self, update: threadline_model::GraphUpdate) {
        let graph = crate::graph::PreparedGraph::new(update);
        if !graph.is_empty() {
            self.encoded_bytes += graph.bytes();
            self.graph = Some(graph);
        }
    }

    pub fn span_count(&self) -> usize {
        self.rows.len()
    }
}

/// The distinct items, sorted.
fn sorted_distinct<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// What the writer reports for one job once its transaction is over.
type JobOutcome = Result<Applied, String>;

/// What a committed job did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// False for an already-stored lineage event (nothing changed).
    pub changed: bool,
    /// What each registry entry of a graph update became.
    pub assets: Vec<(threadline_model::NodeId, threadline_model::AssetOutcome)>,
    /// What an erasure did.
    pub erasure: Option<crate::ErasureReport>,
}

impl Applied {
    fn changed() -> Self {
        Self {
            changed: true,
            assets: Vec::new(),
            erasure: None,
        }
    }
}

/// Resolves when the job is committed to disk, or the commit failed.
pub struct WriteAck(oneshot::Receiver<JobOutcome>);

impl WriteAck {
    pub async fn wait(self) -> Result<Applied, StoreError> {
        Self::outcome(self.0.await)
    }

    pub fn wait_blocking(self) -> Result<Applied, StoreError> {
        Self::outcome(self.0.blocking_recv())
    }

    fn outcome(
        received: Result<JobOutcome, oneshot::error::RecvError>,
    ) -> Result<Applied, StoreError> {
        match received {
            Ok(Ok(applied)) => Ok(applied),
            Ok(Err(msg)) => Err(StoreError::Corrupt(format!("commit failed: {msg}"))),
            Err(_) => Err(StoreError::WriterStopped),
        }
    }
}

/// A lineage graph change for the writer.
pub(crate) struct GraphJob {
    pub(crate) tenant: TenantId,
    pub(crate) graph: crate::graph::PreparedGraph,
    pub(crate) received_ns: i64,
}

/// An erasure for the writer.
pub(crate) struct EraseJob {
    pub(crate) tenant: TenantId,
    pub(crate) subject: crate::ErasureSubject,
    pub(crate) requested_by: String,
    pub(crate) requested_ns: i64,
}

// Jobs are moved once, into the bounded queue and out: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Work {
    Spans(PreparedBatch),
    Logs(crate::logs::PreparedLogs),
    Graph(GraphJob),
    Erase(EraseJob),
    /// Merge the rollup cells held in memory into the store (a reader wants them).
    FlushRollups,
    Incidents(IncidentsJob),
    /// The trace-id index compactor's writes (`trace_index`), committed together.
    TraceIndex(Vec<crate::trace_index::IndexWrite>),
    /// A full-text document from the background indexer (`text_indexer`).
    Text(crate::text_indexer::TextWrite),
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

/// Counters the server exposes about the writer.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriterStats {
    pub queued_batches: usize,
    pub queued_bytes: usize,
    pub spans_committed: u64,
    pub commits: u64,
    pub commit_nanos_total: u64,
}

struct Job {
    work: Work,
    /// Encoded size, counted against the queue's byte bound.
    bytes: usize,
    ack: oneshot::Sender<JobOutcome>,
}

#[derive(Default)]
struct Counters {
    queued_batches: AtomicUsize,
    queued_bytes: AtomicUsize,
    spans_committed: AtomicU64,
    commits: AtomicU64,
    commit_nanos_total: AtomicU64,
}

pub(crate) struct WriterHandle {
    sender: SyncSender<Job>,
    counters: Arc<Counters>,
    max_queued_bytes: usize,
}

impl WriterHandle {
    pub(crate) fn spawn(
        conn: Connection,
        path: PathBuf,
        config: SqliteConfig,
        checkpoints: CheckpointRequests,
        text_feed: BlockFeed,
    ) -> Result<Self, StoreError> {
        let (sender, receiver) = mpsc::sync_channel(config.max_queued_batches);
        let counters = Arc::new(Counters::default());
        let thread_counters = Arc::clone(&counters);
        let max_queued_bytes = config.max_queued_bytes;
        let (synced, to_sync) = mpsc::channel();
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        crate::background::spawn("threadline-sync", move || run_syncer(&wal, to_sync))?;
        crate::background::spawn("threadline-writer", move || {
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
            max_queued_bytes,
        })
    }

    pub(crate) fn submit(&self, batch: PreparedBatch) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Spans(batch))
    }

    pub(crate) fn submit_logs(
        &self,
        logs: crate::logs::PreparedLogs,
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

    pub(crate) fn submit_incidents(&self, job: IncidentsJob) -> Result<WriteAck, StoreError> {
        self.submit_work(Work::Incidents(job))
    }

    /// Index writes, waiting while the queue is full (the compactor is in no hurry;
    /// ingest is never refused on its account beyond one piece in the queue).
    pub(crate) fn write_index(
        &self,
        writes: Vec<crate::trace_index::IndexWrite>,
    ) -> Result<(), StoreError> {
        self.submit_waiting(Work::TraceIndex(writes)).map(|_| ())
    }

    /// A full-text document, waiting as `write_index` does; whether it was written
    /// (not when an erasure came first).
    pub(crate) fn write_text(
        &self,
        write: crate::text_indexer::TextWrite,
    ) -> Result<bool, StoreError> {
        self.submit_waiting(Work::Text(write))
            .map(|applied| applied.changed)
    }

    /// Queues a background thread's work, waiting while the queue is full.
    fn submit_waiting(&self, mut work: Work) -> Result<Applied, StoreError> {
        loop {
            match self.try_submit(work).map_err(|r| *r) {
                Ok(ack) => return ack.wait_blocking(),
                Err((StoreError::QueueFull { .. }, back)) => {
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
        let full = || StoreError::QueueFull {
            queued_batches: self.counters.queued_batches.load(Ordering::Relaxed),
            queued_bytes,
        };
        if queued_bytes > 0 && queued_bytes + bytes > self.max_queued_bytes {
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
            Ok(()) => Ok(WriteAck(rx)),
            Err(e) => {
                self.counters.queued_batches.fetch_sub(1, Ordering::Relaxed);
                self.counters
                    .queued_bytes
                    .fetch_sub(bytes, Ordering::Relaxed);
                match e {
                    TrySendError::Full(job) => Err(Box::new((full(), job.work))),
                    TrySendError::Disconnected(job) => {
                        Err(Box::new((StoreError::WriterStopped, job.work)))
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
    graph: crate::graph::GraphCache,
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

/// Fsyncs the WAL file for every commit the writer hands over (all that are waiting,
/// with one fsync), then sends their acks. A failed fsync fails those acks: whether
/// their pages reached the disk is unknown.
fn run_syncer(wal: &std::path::Path, committed: Receiver<CommittedAcks>) {
    let mut file: Option<std::fs::File> = None;
    while let Ok(first) = committed.recv() {
        let mut acks = first;
        while let Ok(more) = committed.try_recv() {
            acks.extend(more);
        }
        // fsync flushes the file's pages whichever descriptor wrote them; the writer's
        // connection keeps the WAL file in place for as long as the store is open.
        let synced = match &file {
            Some(f) => f.sync_data(),
            None => std::fs::File::open(wal).and_then(|f| {
                let done = f.sync_data();
                file = Some(f);
                done
            }),
        };
        if let Err(e) = &synced {
            tracing::error!(path = %wal.display(), error = %e, "fsync of the WAL failed");
        }
        for (ack, outcome) in acks {
            let outcome = match &synced {
                Ok(()) => outcome,
                Err(e) => Err(format!("fsync of {} failed: {e}", wal.display())),
            };
            // A client that hung up no longer waits for its ack; nothing to do.
            let _ = ack.send(outcome);
        }
    }
}

/// Where the writer hands work on after a commit.
struct Handoffs {
    /// The syncer, which fsyncs the WAL and then acks.
    synced: mpsc::Sender<CommittedAcks>,
    /// The checkpointer.
    checkpoints: CheckpointRequests,
    /// The full-text indexer: the committed blocks' texts.
    text_feed: BlockFeed,
}

fn run_writer(
    mut conn: Connection,
    path: PathBuf,
    receiver: Receiver<Job>,
    counters: Arc<Counters>,
    config: SqliteConfig,
    handoffs: Handoffs,
) {
    let Handoffs {
        synced,
        checkpoints,
        text_feed,
    } = handoffs;
    let max_spans = config.max_spans_per_commit;
    let mut wal_restart = WalRestart {
        checkpoints,
        every_bytes: config.wal_restart_bytes.max(1),
        written: 0,
        requested: false,
    };
    let mut cache = WriterCache::default();
    cache.graph.drift = config.drift;
    let mut ledger = crate::rollups::RollupLedger::default();
    while let Ok(first) = receiver.recv() {
        let mut rows = first.work.rows();
        let mut jobs = vec![first];
        while rows < max_spans {
            match receiver.try_recv() {
                Ok(job) => {
                    rows += job.work.rows();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let spans: usize = jobs
            .iter()
            .map(|j| match &j.work {
                Work::Spans(b) => b.rows.len(),
                Work::Logs(l) => l.record_count(),
                _ => 0,
            })
            .sum();
        let started = Instant::now();
        let result = commit_jobs(&mut conn, &mut jobs, &mut cache, &mut ledger);
        let elapsed = started.elapsed().as_nanos() as u64;
        let bytes: usize = jobs.iter().map(|j| j.bytes).sum();
        counters
            .queued_batches
            .fetch_sub(jobs.len(), Ordering::Relaxed);
        counters.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
        let outcomes = match result {
            Ok(mut outcomes) => {
                for job in &mut jobs {
                    if let Work::Spans(batch) = &mut job.work {
                        if let Some((block_id, erasures)) = batch.inserted {
                            text_feed.offer(CommittedBlock {
                                block_id,
                                erasures,
                                texts: std::mem::take(&mut batch.texts),
                            });
                        }
                    }
                }
                if outcomes
                    .iter()
                    .any(|o| o.as_ref().is_ok_and(|a| a.erasure.is_some()))
                {
                    let truncated = truncate_wal(&conn);
                    for o in outcomes.iter_mut().flatten() {
                        if let Some(report) = &mut o.erasure {
                            report.wal_truncated = truncated;
                        }
                    }
                }
                counters
                    .spans_committed
                    .fetch_add(spans as u64, Ordering::Relaxed);
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .commit_nanos_total
                    .fetch_add(elapsed, Ordering::Relaxed);
                outcomes
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "commit failed");
                // The transaction rolled back: forget what it may have inserted.
                cache.reset();
                ledger.rolled_back();
                vec![Err(e.to_string()); jobs.len()]
            }
        };
        // The syncer starts on this commit's fsync while the writer checkpoints: a
        // checkpoint copies into the database file and leaves the WAL's frames as they are.
        let acks: CommittedAcks = jobs.into_iter().map(|j| j.ack).zip(outcomes).collect();
        if let Err(mpsc::SendError(acks)) = synced.send(acks) {
            for (ack, _) in acks {
                let _ = ack.send(Err("the WAL syncer thread stopped".to_owned()));
            }
        }
        if wal_restart.due_after(bytes) {
            // Not done (busy, or frames left): asked again after a further pass.
            match restart_checkpoint(&conn) {
                Ok(done) => wal_restart.checkpointed(done),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "wal checkpoint failed")
                }
            }
        }
    }
}

/// When the writer checkpoints so that the WAL starts over (see `checkpoint`).
struct WalRestart {
    checkpoints: CheckpointRequests,
    /// Encoded bytes written after which the WAL should start over.
    every_bytes: usize,
    /// Encoded bytes committed since the WAL last started over.
    written: usize,
    /// A checkpointer pass was asked for since the writer's last checkpoint.
    requested: bool,
}

impl WalRestart {
    /// Counts a commit of `bytes`; whether the writer should checkpoint now: once the
    /// checkpointer's pass it asked for has finished, or when the checkpointer falls so
    /// far behind that the WAL would keep growing.
    fn due_after(&mut self, bytes: usize) -> bool {
        self.written += bytes;
        let written = self.written;
        if written < self.every_bytes {
            return false;
        }
        if !self.requested {
            self.checkpoints.request();
            self.requested = true;
            return false;
        }
        if self.checkpoints.passed() || written >= 4 * self.every_bytes {
            self.requested = false;
            return true;
        }
        false
    }

    /// After the writer's checkpoint: `done` when every frame is in the database, so
    /// the next transaction starts the WAL over.
    fn checkpointed(&mut self, done: bool) {
        if done {
            self.written = 0;
        }
    }
}

/// The writer's checkpoint between two transactions: true when every frame is in the
/// database, so the next transaction starts the WAL over.
fn restart_checkpoint(conn: &Connection) -> rusqlite::Result<bool> {
    // (busy, frames in WAL, frames checkpointed)
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok(r.get::<_, i64>(0)? == 0 && r.get::<_, i64>(1)? == r.get::<_, i64>(2)?)
    })
}

/// After an erasure: copy the WAL into the database and truncate it, so the erased
/// bytes' old page images are gone from the WAL file too. Retries while readers hold
/// old snapshots; false if it could not finish (the checkpointer truncates later).
fn truncate_wal(conn: &Connection) -> bool {
    for _ in 0..20 {
        let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok(r.get::<_, i64>(0)? == 0)
        });
        match done {
            Ok(true) => return true,
            Ok(false) => std::thread::sleep(std::time::Duration::from_millis(50)),
            Err(e) => {
                tracing::warn!(error = %e, "wal truncation after erasure failed");
                return false;
            }
        }
    }
    false
}

/// One transaction for all jobs. Inputs are validated before they are queued, so a
/// failing statement is a storage fault: it fails the whole group (every sender gets
/// the error and the transaction rolls back). No savepoint per job: on graph updates
/// their sub-journal cost more than the updates themselves.
fn commit_jobs(
    conn: &mut Connection,
    jobs: &mut [Job],
    cache: &mut WriterCache,
    ledger: &mut crate::rollups::RollupLedger,
) -> Result<Vec<JobOutcome>, rusqlite::Error> {
    let tx = conn.transaction()?;
    let mut outcomes = Vec::with_capacity(jobs.len());
    // Rollup cells of this transaction's spans, by tenant row id.
    let mut staged: HashMap<i64, threadline_analysis::Rollups> = HashMap::new();
    let mut last_block = ledger.last_block;
    // Erasures committed before the next span block, read once per transaction unless
    // one of its jobs erases.
    let mut erasures: Option<i64> = None;
    for job in jobs.iter_mut() {
        let outcome = match &mut job.work {
            Work::Spans(batch) => {
                let tenant_id = tenant_id(&tx, &batch.tenant, cache)?;
                if let Some(block_id) = insert_batch(&tx, tenant_id, batch, cache)? {
                    last_block = last_block.max(block_id);
                    let count = match erasures {
                        Some(count) => count,
                        None => *erasures.insert(IndexState::select(&tx)?.erasures),
                    };
                    batch.inserted = Some((block_id, count));
                }
                // Moved, not copied: the writer is the serial stage. A failed commit
                // drops them with the transaction.
                staged
                    .entry(tenant_id)
                    .or_default()
                    .absorb(std::mem::take(&mut batch.rollups));
                if let Some(update) = &batch.graph {
                    crate::graph::apply(
                        &tx,
                        tenant_id,
                        update,
                        batch.max_start_ns,
                        &mut cache.graph,
                    )?;
                }
                Applied::changed()
            }
            Work::Logs(logs) => {
                let tenant_id = tenant_id(&tx, &logs.tenant, cache)?;
                insert_origins(&tx, tenant_id, logs.origins(), cache)?;
                crate::logs::insert(&tx, tenant_id, logs)?;
                Applied::changed()
            }
            Work::Graph(g) => {
                let tenant_id = tenant_id(&tx, &g.tenant, cache)?;
                let result =
                    crate::graph::apply(&tx, tenant_id, &g.graph, g.received_ns, &mut cache.graph)?;
                Applied {
                    changed: result.is_some(),
                    assets: result.unwrap_or_default(),
                    erasure: None,
                }
            }
            Work::Erase(job) => {
                erasures = None;
                let tenant_id = tenant_id(&tx, &job.tenant, cache)?;
                let report = crate::erase::erase(
                    &tx,
                    tenant_id,
                    &job.subject,
                    &job.requested_by,
                    job.requested_ns,
                )?;
                // Cells not flushed yet, this transaction's too, hold the id as well.
                ledger.erased(tenant_id, job.subject.value());
                if let Some(r) = staged.get_mut(&tenant_id) {
                    r.redact(job.subject.value(), crate::ERASED);
                }
                Applied {
                    changed: true,
                    assets: Vec::new(),
                    erasure: Some(report),
                }
            }
            Work::FlushRollups => {
                ledger.forced = true;
                Applied::changed()
            }
            Work::Incidents(job) => {
                let tenant_id = tenant_id(&tx, &job.tenant, cache)?;
                crate::incidents::save(&tx, tenant_id, &job.incidents, job.processed_minute)?;
                Applied::changed()
            }
            Work::TraceIndex(writes) => {
                for write in writes.iter() {
                    crate::trace_index::apply(&tx, write)?;
                }
                Applied::changed()
            }
            Work::Text(write) => Applied {
                changed: crate::text_indexer::apply(&tx, write)?,
                assets: Vec::new(),
                erasure: None,
            },
        };
        outcomes.push(Ok(outcome));
    }
    let staged_cells = staged.values().map(threadline_analysis::Rollups::len).sum();
    let flush = ledger.due(staged_cells, last_block);
    if flush {
        ledger.flush(&tx, &staged, last_block)?;
    }
    tx.commit()?;
    ledger.last_block = last_block;
    ledger.committed(staged, flush);
    Ok(outcomes)
}

fn tenant_id(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    cache: &mut WriterCache,
) -> Result<i64, rusqlite::Error> {
    if let Some(id) = cache.tenant_ids.get(tenant) {
        return Ok(*id);
    }
    tx.execute(
        "INSERT OR IGNORE INTO tenants (name) VALUES (?1)",
        [tenant.as_str()],
    )?;
    let id: i64 = tx.query_row(
        "SELECT id FROM tenants WHERE name = ?1",
        [tenant.as_str()],
        |r| r.get(0),
    )?;
    cache.tenant_ids.insert(tenant.clone(), id);
    Ok(id)
}

/// Returns the id of the detail block it stored, if any.
/// Stores the origins (resource + scope) this writer has not stored yet.
fn insert_origins(
    tx: &Transaction<'_>,
    tenant_id: i64,
    origins: &[(i64, Vec<u8>)],
    cache: &mut WriterCache,
) -> rusqlite::Result<()> {
    let mut origin_stmt = tx.prepare_cached(
        "INSERT OR IGNORE INTO span_origins (tenant_id, origin_hash, origin) VALUES (?1, ?2, ?3)",
    )?;
    for (hash, blob) in origins {
        if cache.origins.insert((tenant_id, *hash)) {
            origin_stmt.execute(params![tenant_id, hash, blob])?;
        }
    }
    Ok(())
}

/// Operations the writer remembers having stored; past this many it forgets them all
/// (a forgotten one costs an `INSERT OR IGNORE` that changes nothing).
const MAX_CACHED_OPERATIONS: usize = 100_000;

fn insert_batch(
    tx: &Transaction<'_>,
    tenant_id: i64,
    batch: &PreparedBatch,
    cache: &mut WriterCache,
) -> Result<Option<i64>, rusqlite::Error> {
    insert_origins(tx, tenant_id, &batch.origins, cache)?;
    if batch.rows.is_empty() {
        return Ok(None);
    }
    for service in &batch.services {
        if cache.services.insert((tenant_id, service.clone())) {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO tenant_services (tenant_id, service) VALUES (?1, ?2)",
            )?
            .execute(params![tenant_id, service])?;
        }
    }
    for (service, name, kind) in &batch.operations {
        let key = (tenant_id, service.clone(), name.clone(), *kind);
        if cache.operations.contains(&key) {
            continue;
        }
        if cache.operations.len() >= MAX_CACHED_OPERATIONS {
            cache.operations.clear();
        }
        cache.operations.insert(key);
        tx.prepare_cached(
            "INSERT OR IGNORE INTO tenant_operations (tenant_id, service, name, kind)
             VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![tenant_id, service, name, kind])?;
    }
    for (model, response) in &batch.models {
        if cache
            .models
            .insert((tenant_id, model.clone(), response.clone()))
        {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO tenant_models (tenant_id, model, response_model)
                 VALUES (?1, ?2, ?3)",
            )?
            .execute(params![tenant_id, model, response])?;
        }
    }
    tx.prepare_cached("INSERT INTO span_blocks (tenant_id, block) VALUES (?1, ?2)")?
        .execute(params![tenant_id, batch.block])?;
    let block_id = tx.last_insert_rowid();
    // A retried export re-sends the same spans; readers keep the first copy of a span id.
    let mut span_stmt = tx.prepare_cached(
        "INSERT INTO spans (tenant_id, trace_id, span_id, parent_span_id, name, service,
            kind, start_ns, end_ns, duration_ns, status_code, origin_hash, model, route, adapter,
            ab_group, instance, image, prompt_version, user_id, session_id, total_tokens, block_id,
            block_offset, block_len, input_tokens, output_tokens, response_model)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)",
    )?;
    let mut first_rowid = None;
    for row in &batch.rows {
        span_stmt.execute(params![
            tenant_id,
            &row.trace_id[..],
            &row.span_id[..],
            row.parent_span_id.as_ref().map(|p| &p[..]),
            row.name,
            row.service,
            row.kind,
            row.start_ns,
            row.end_ns,
            row.duration_ns,
            row.status_code,
            row.origin_hash,
            row.model,
            row.route,
            row.adapter,
            row.ab_group,
            row.instance,
            row.image,
            row.prompt_version,
            row.user_id,
            row.session_id,
            row.total_tokens,
            block_id,
            row.block_offset,
            row.block_len,
            row.input_tokens,
            row.output_tokens,
            row.response_model,
        ])?;
        first_rowid.get_or_insert_with(|| tx.last_insert_rowid());
    }
    // The single writer appends one request's rows back to back: their rowids are the
    // contiguous range first..=last, which is what trace lookups scan.
    let last_rowid = tx.last_insert_rowid();
    tx.prepare_cached(
        "INSERT INTO block_traces (tenant_id, block_id, first_span_rowid, last_span_rowid,
            min_start_ns, max_start_ns, trace_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        tenant_id,
        block_id,
        first_rowid.unwrap_or(last_rowid),
        last_rowid,
        batch.min_start_ns,
        batch.max_start_ns,
        batch.trace_ids,
    ])?;
    if !batch.attr_filter.is_empty() {
        tx.prepare_cached(
            "INSERT INTO block_attr_filters (tenant_id, block_id, filter) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![tenant_id, block_id, batch.attr_filter])?;
    }
    batch.values.insert(tx, tenant_id, block_id)?;
    Ok(Some(block_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Acks wait for the WAL fsync; when it cannot be done they fail instead of
    /// claiming durability.
    #[test]
    fn acks_are_sent_after_the_wal_fsync_and_fail_with_it() {
        let dir = tempfile::tempdir().unwrap();
        for (wal, expect_ok) in [
            (dir.path().join("store.db-wal"), true),
            (dir.path().join("missing-wal"), false),
        ] {
            if expect_ok {
                std::fs::write(&wal, b"frames").unwrap();
            }
            let (to_syncer, committed) = mpsc::channel();
            let (ack, acked) = oneshot::channel();
            to_syncer.send(vec![(ack, Ok(Applied::changed()))]).unwrap();
            drop(to_syncer);
            run_syncer(&wal, committed);
            let outcome = acked.blocking_recv().unwrap();
            assert_eq!(outcome.is_ok(), expect_ok, "{outcome:?}");
            if let Err(msg) = outcome {
                assert!(msg.contains("missing-wal"), "{msg}");
            }
        }
    }
}
