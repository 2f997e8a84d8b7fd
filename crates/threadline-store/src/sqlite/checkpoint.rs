//! WAL checkpoints: the background checkpointer thread, and the handshake by which the
//! writer lets the WAL start over from its beginning.
//!
//! The checkpointer copies committed WAL pages into the database file off the writer's
//! path (PASSIVE never blocks the writer). Under continuous writes that alone never lets
//! the WAL restart: SQLite rewinds the WAL only when a write transaction begins with
//! every frame already copied, which a checkpoint running beside the writer cannot
//! arrange. So the writer runs a checkpoint of its own between two transactions every
//! few MB. That checkpoint stalls every ack for as long as it takes: it copies what the
//! background pass has not copied yet, then syncs the WAL and the database. Hence the
//! handshake: when the writer wants a restart it asks the checkpointer for a pass
//! first, keeps committing meanwhile, and checkpoints itself only once that pass has
//! finished, when little is left to copy. (Measured on OpenLineage ingest: the writer's
//! own checkpoints took ≈ 45 ms each, ≈ 10% of its wall time, with the checkpointer
//! on its 250-ms timer; 15-25 ms after the pass it asks for and the pass's own sync.)

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::sqlite::schema::sqlite;
use crate::sqlite::StoreError;

/// WAL frames (pages) after which the checkpointer forces the WAL back to the start.
const WAL_RESTART_FRAMES: i64 = 16_384;

/// How often the checkpointer runs a pass when nobody asks for one.
const PASS_INTERVAL: Duration = Duration::from_millis(250);

/// The writer's side of the checkpointer. Dropping it (with the writer thread) stops
/// the checkpointer, after a last checkpoint that truncates the WAL.
pub(crate) struct CheckpointRequests {
    wake: mpsc::Sender<()>,
    /// Set by the checkpointer when a pass asked for has finished.
    passed: Arc<AtomicBool>,
}

impl CheckpointRequests {
    /// Asks for a checkpoint pass now rather than at the next tick.
    pub(crate) fn request(&self) {
        self.passed.store(false, Ordering::Release);
        // A stopped checkpointer only means the writer's own checkpoint copies more.
        let _ = self.wake.send(());
    }

    /// Whether a pass asked for by `request` has finished since.
    pub(crate) fn passed(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }
}

/// Starts the checkpointer thread on the database at `path`.
pub(crate) fn spawn_checkpointer(path: &Path) -> Result<CheckpointRequests, StoreError> {
    let conn = Connection::open(path).map_err(sqlite(path))?;
    conn.execute_batch("PRAGMA busy_timeout = 10000;")
        .map_err(sqlite(path))?;
    // SQLite syncs the database file only at the end of a checkpoint that copied the
    // whole WAL, which under continuous writes is only ever the writer's: it then paid
    // for every page the passes here had copied (≈ 40 ms per restart, measured). The
    // checkpointer syncs what it copied itself, off the writer's path.
    let db_file = std::fs::File::open(path).map_err(|source| {
        StoreError::unavailable(format!("cannot open {}", path.display())).with_source(source)
    })?;
    let (wake, woken) = mpsc::channel();
    let passed = Arc::new(AtomicBool::new(false));
    let requests = CheckpointRequests {
        wake,
        passed: Arc::clone(&passed),
    };
    let path = path.to_owned();
    // Returns the frames in the WAL (the pragma's row is busy, frames, copied).
    let checkpoint = move |mode: &str| -> rusqlite::Result<i64> {
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            r.get::<_, i64>(1)
        })
    };
    crate::sqlite::background::spawn("threadline-checkpoint", move || loop {
        let woken = woken.recv_timeout(PASS_INTERVAL);
        let stopping = matches!(woken, Err(RecvTimeoutError::Disconnected));
        let result = checkpoint("PASSIVE").and_then(|frames| {
            if frames >= WAL_RESTART_FRAMES || stopping {
                checkpoint("TRUNCATE")
            } else {
                Ok(frames)
            }
        });
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "wal checkpoint failed");
        } else if let Err(e) = db_file.sync_data() {
            tracing::warn!(path = %path.display(), error = %e, "fsync of the database failed");
        }
        if woken.is_ok() {
            passed.store(true, Ordering::Release);
        }
        if stopping {
            return;
        }
    })?;
    Ok(requests)
}
