//! What an erasure is asked (`ErasureSubject`) and reports (`ErasureReport`, the
//! audit log's `ErasureRecord`s): the same for every backend.

use sha2::Digest;

/// What the subject's id is replaced by where numbers are kept.
pub const ERASED: &str = "[erased]";

/// Whose data to erase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErasureSubject {
    UserId(String),
    SessionId(String),
}

impl ErasureSubject {
    pub fn kind(&self) -> &'static str {
        match self {
            ErasureSubject::UserId(_) => "user_id",
            ErasureSubject::SessionId(_) => "session_id",
        }
    }

    /// The id itself (never to be logged).
    pub fn value(&self) -> &str {
        match self {
            ErasureSubject::UserId(v) | ErasureSubject::SessionId(v) => v,
        }
    }

    /// SHA-256 hex of the subject id: what the audit log keeps.
    pub fn digest(&self) -> String {
        hex::encode(sha2::Sha256::digest(self.value().as_bytes()))
    }
}

/// What an erasure did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErasureReport {
    pub erasure_id: i64,
    pub traces_matched: u64,
    pub spans_deleted: u64,
    /// Log records of the erased traces, and those naming the subject themselves.
    pub logs_deleted: u64,
    pub blocks_rewritten: u64,
    /// Whether the erased bytes left the disk right away (the embedded backend: false
    /// when a long read held its write-ahead log; its checkpointer clears it later).
    pub disk_cleared: bool,
    /// Copies of the id outside the traces, removed or rewritten.
    pub copies: CopiesErased,
}

impl ErasureReport {
    /// Whether the erasure found the subject anywhere.
    pub fn matched_anything(&self) -> bool {
        self.traces_matched + self.logs_deleted + self.copies.total() > 0
    }
}

/// One row of the erasure audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErasureRecord {
    pub erasure_id: i64,
    pub requested_by: String,
    pub requested_ns: i64,
    pub subject_kind: String,
    pub subject_sha256: String,
    pub traces_matched: u64,
    pub spans_deleted: u64,
}

/// How many copies an erasure removed or rewrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopiesErased {
    pub origins: u64,
    pub rollup_series: u64,
    pub rollup_cells: u64,
    pub lineage_nodes: u64,
    pub lineage_edges: u64,
    pub names: u64,
    pub incidents: u64,
}

impl CopiesErased {
    pub fn total(&self) -> u64 {
        self.origins
            + self.rollup_series
            + self.rollup_cells
            + self.lineage_nodes
            + self.lineage_edges
            + self.names
            + self.incidents
    }
}
