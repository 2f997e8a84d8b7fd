//! What a write returns: an ack that resolves once the write is durable (`WriteAck`),
//! what the committed job did (`Applied`), and the writer's counters.

use tokio::sync::oneshot;

use crate::StoreError;

/// What the writer reports for one job once its transaction is over.
pub(crate) type JobOutcome = Result<Applied, String>;

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
            Ok(Err(msg)) => Err(StoreError::corrupt(format!("commit failed: {msg}"))),
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
}
