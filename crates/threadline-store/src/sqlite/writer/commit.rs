//! The writer thread: it drains the queue, commits the jobs in one transaction, hands
//! the acks to the syncer (which fsyncs the WAL, then acks) and asks for checkpoints
//! so that the WAL starts over.

use super::insert::{insert_batch, insert_origins, tenant_id};
use super::*;

/// Fsyncs the WAL file for every commit the writer hands over (all that are waiting,
/// with one fsync), then sends their acks. A failed fsync fails those acks: whether
/// their pages reached the disk is unknown.
pub(super) fn run_syncer(wal: &std::path::Path, committed: Receiver<CommittedAcks>) {
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
                Err(e) => Err(format!("fsync of {} failed: {e}", wal.display()).into()),
            };
            // A client that hung up no longer waits for its ack; nothing to do.
            let _ = ack.send(outcome);
        }
    }
}

/// How long the writer waits for a batch in preparation before it looks again
/// whether any still is (`EmbeddedConfig::group_commit_wait` bounds the whole wait).
const GATHER_SLICE: std::time::Duration = std::time::Duration::from_micros(500);

pub(super) fn run_writer(
    mut conn: Connection,
    path: PathBuf,
    receiver: Receiver<Job>,
    counters: Arc<Counters>,
    config: EmbeddedConfig,
    handoffs: Handoffs,
) {
    let Handoffs {
        synced,
        checkpoints,
        text_feed,
    } = handoffs;
    let max_spans = config.max_spans_per_commit;
    let gather_wait = config.group_commit_wait;
    let mut wal_restart = WalRestart {
        checkpoints,
        every_bytes: config.wal_restart_bytes.max(1),
        written: 0,
        requested: false,
        restarts: 0,
    };
    let mut cache = WriterCache::default();
    cache.graph.drift = config.drift;
    let mut ledger = crate::sqlite::rollups::RollupLedger::default();
    while let Ok(first) = receiver.recv() {
        let mut rows = first.work.rows();
        let mut jobs = vec![first];
        // Group commit: what is queued, and under load what is being prepared. Every
        // commit rewrites the index pages it touches (block values, sessions, trace
        // ids land all over their B-trees), so two batches in one commit write far
        // less WAL than two commits. With nothing in preparation (light load) it
        // commits at once.
        let mut gather_until = None;
        while rows < max_spans {
            let job = match receiver.try_recv() {
                Ok(job) => job,
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => {
                    if counters.preparing.load(Ordering::SeqCst) == 0 {
                        break;
                    }
                    let until = *gather_until.get_or_insert_with(|| Instant::now() + gather_wait);
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    // In slices, so that a preparation that ends without queuing
                    // anything (it failed) holds the commit no longer than one.
                    match receiver.recv_timeout(left.min(GATHER_SLICE)) {
                        Ok(job) => job,
                        Err(mpsc::RecvTimeoutError::Timeout) => continue,
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
            };
            rows += job.work.rows();
            jobs.push(job);
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
        // Before any ack of this commit is sent (the syncer sends them): a reader told
        // of a write finds its cells either flushed or announced here.
        counters
            .rollups_unflushed
            .store(ledger.holds_unflushed(), Ordering::SeqCst);
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
                            report.disk_cleared = truncated;
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
                vec![Err(e.to_string().into()); jobs.len()]
            }
        };
        // The syncer starts on this commit's fsync while the writer checkpoints: a
        // checkpoint copies into the database file and leaves the WAL's frames as they are.
        let acks: CommittedAcks = jobs.into_iter().map(|j| j.ack).zip(outcomes).collect();
        if let Err(mpsc::SendError(acks)) = synced.send(acks) {
            for (ack, _) in acks {
                let _ = ack.send(Err("the WAL syncer thread stopped".to_owned().into()));
            }
        }
        if wal_restart.due_after(bytes) {
            // Not done (busy, or frames left): asked again after a further pass.
            match restart_checkpoint(&conn) {
                Ok(done) => {
                    if wal_restart.checkpointed(done) {
                        if let Err(e) = crate::sqlite::schema::remap_writer(&conn) {
                            tracing::warn!(path = %path.display(), error = %e, "remapping the database failed");
                        }
                    }
                }
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
    /// Times the WAL started over.
    restarts: u64,
}

/// Every this many WAL restarts the writer drops its memory map of the database (see
/// `schema::remap_writer`): at full ingest speed about every 16 MB written.
const REMAP_EVERY_RESTARTS: u64 = 4;

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
    /// the next transaction starts the WAL over. Whether the writer should remap the
    /// database now.
    fn checkpointed(&mut self, done: bool) -> bool {
        if !done {
            return false;
        }
        self.written = 0;
        self.restarts += 1;
        self.restarts.is_multiple_of(REMAP_EVERY_RESTARTS)
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
    ledger: &mut crate::sqlite::rollups::RollupLedger,
) -> Result<Vec<JobOutcome>, rusqlite::Error> {
    let tx = conn.transaction()?;
    let mut outcomes = Vec::with_capacity(jobs.len());
    // Rollup cells of this transaction's spans, by tenant row id.
    let mut staged = crate::sqlite::rollups::Staged::default();
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
                    .rollups
                    .entry(tenant_id)
                    .or_default()
                    .absorb_batch(std::mem::take(&mut batch.rollups));
                staged
                    .hops
                    .entry(tenant_id)
                    .or_default()
                    .absorb(std::mem::take(&mut batch.hops));
                if let Some(update) = &batch.graph {
                    crate::sqlite::graph::apply(
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
                crate::sqlite::logs::insert(&tx, tenant_id, logs)?;
                Applied::changed()
            }
            Work::Graph(g) => {
                let tenant_id = tenant_id(&tx, &g.tenant, cache)?;
                let result = crate::sqlite::graph::apply(
                    &tx,
                    tenant_id,
                    &g.graph,
                    g.received_ns,
                    &mut cache.graph,
                )?;
                Applied {
                    changed: result.is_some(),
                    assets: result.unwrap_or_default(),
                    erasure: None,
                }
            }
            Work::Erase(job) => {
                erasures = None;
                let tenant_id = tenant_id(&tx, &job.tenant, cache)?;
                let report = crate::sqlite::erase::erase(
                    &tx,
                    tenant_id,
                    &job.subject,
                    &job.requested_by,
                    job.requested_ns,
                )?;
                // Cells not flushed yet, this transaction's too, hold the id as well.
                ledger.erased(tenant_id, job.subject.value());
                if let Some(r) = staged.rollups.get_mut(&tenant_id) {
                    r.redact(job.subject.value(), crate::sqlite::ERASED);
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
                crate::sqlite::incidents::save(
                    &tx,
                    tenant_id,
                    &job.incidents,
                    job.processed_minute,
                )?;
                Applied::changed()
            }
            Work::TraceIndex(writes) => {
                for write in writes.iter() {
                    crate::sqlite::trace_index::apply(&tx, write)?;
                }
                Applied::changed()
            }
            Work::Text(write) => Applied {
                changed: crate::sqlite::text_indexer::apply(&tx, write)?,
                assets: Vec::new(),
                erasure: None,
            },
        };
        outcomes.push(Ok(outcome));
    }
    let staged_cells = staged
        .rollups
        .values()
        .map(threadline_analysis::Rollups::len)
        .sum();
    let flush = ledger.due(staged_cells, last_block);
    if flush {
        ledger.flush(&tx, &staged, last_block)?;
    }
    tx.commit()?;
    ledger.last_block = last_block;
    ledger.committed(staged, flush);
    Ok(outcomes)
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
            if let Err(failure) = outcome {
                assert!(failure.message.contains("missing-wal"), "{failure}");
            }
        }
    }

    /// The writer's map is dropped and set up again: reads after it see the same
    /// rows and go through a map of the same size.
    #[test]
    fn remapping_keeps_the_writer_reading_through_its_map() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::sqlite::schema::open_connection(&dir.path().join("t.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let mmap_size =
            |c: &Connection| -> i64 { c.query_row("PRAGMA mmap_size", [], |r| r.get(0)).unwrap() };
        let before = mmap_size(&conn);
        assert!(before > 0);
        for _ in 0..3 {
            crate::sqlite::schema::remap_writer(&conn).unwrap();
            let sum: i64 = conn
                .query_row("SELECT sum(x) FROM t", [], |r| r.get(0))
                .unwrap();
            assert_eq!(sum, 3);
            assert_eq!(mmap_size(&conn), before);
        }
    }
}
