//! What a write returns: an ack that resolves once the write is durable (`WriteAck`),
//! what the committed job did (`Applied`), and the writer's counters.

use tokio::sync::oneshot;

use crate::StoreError;

/// What the writer reports for one job once its transaction is over.
pub(crate) type JobOutcome = Result<Applied, JobFailure>;

/// Why a queued job was not stored: the kind the caller answers by (a full spool is
/// `Busy`: 429, retry later) and what happened.
#[derive(Clone, Debug)]
pub(crate) struct JobFailure {
    pub(crate) kind: crate::ErrorKind,
    pub(crate) message: String,
}

/// A failed commit: the store's own fault unless said otherwise.
impl From<String> for JobFailure {
    fn from(message: String) -> Self {
        Self {
            kind: crate::ErrorKind::Corrupt,
            message: format!("commit failed: {message}"),
        }
    }
}

impl From<StoreError> for JobFailure {
    fn from(e: StoreError) -> Self {
        Self {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl std::fmt::Display for JobFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

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
    pub(crate) fn changed() -> Self {
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
    /// The ack of a job whose outcome `outcome` will carry.
    pub(crate) fn of(outcome: oneshot::Receiver<JobOutcome>) -> Self {
        Self(outcome)
    }

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
            Ok(Err(failure)) => Err(StoreError::new(failure.kind, failure.message)),
            Err(_) => Err(StoreError::writer_stopped()),
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
    /// What waits in a spool for a store that did not take it yet (ClickHouse); `None`
    /// for a backend without one.
    pub spool: Option<crate::SpoolStats>,
}
