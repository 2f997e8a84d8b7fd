//! The store's one error type: a kind callers act on, a message for the operator's log,
//! and the backend's own error as its source, never as a type in the signature.

use std::fmt;

/// What went wrong, as far as a caller can act on it. Every backend sorts its failures
/// into these; the server maps each to one HTTP / gRPC status (`threadline-server`'s
/// `error.rs`, nowhere else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Too much queued or the database is locked for now: retry later (429 / 503 with
    /// Retry-After, RESOURCE_EXHAUSTED).
    Busy,
    /// The thing asked for does not exist.
    NotFound,
    /// The query cannot be answered as asked (a bad filter, a value out of range).
    InvalidQuery,
    /// The store cannot serve at all now: its writer stopped, its files or server are
    /// unreachable, its schema is newer than this binary.
    Unavailable,
    /// What is stored cannot be read back as written.
    Corrupt,
}

impl ErrorKind {
    /// What a client may be told: no paths, hosts or backend messages.
    pub fn public_message(self) -> &'static str {
        match self {
            ErrorKind::Busy => "the store is busy; retry later",
            ErrorKind::NotFound => "not found",
            ErrorKind::InvalidQuery => "the store cannot answer this query",
            ErrorKind::Unavailable => "the store is unavailable",
            ErrorKind::Corrupt => "stored data could not be read",
        }
    }
}

const WRITER_STOPPED: &str = "store writer has stopped";

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store failure. `Display` is the detailed message for the log (it may name files,
/// and ends with the backend's own error);
/// clients get `kind().public_message()`, or the message itself for `Busy`,
/// `NotFound` and `InvalidQuery`, which name only what the caller sent.
#[derive(Debug)]
pub struct StoreError {
    kind: ErrorKind,
    message: String,
    source: Option<Source>,
}

impl StoreError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same error with the backend's own error as its source.
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Busy, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub fn invalid_query(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidQuery, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    /// The write queue is full: the caller should retry after a while.
    pub fn queue_full(queued_batches: usize, queued_bytes: usize) -> Self {
        Self::busy(format!(
            "write queue is full ({queued_batches} batches, {queued_bytes} bytes queued)"
        ))
    }

    /// The writer has stopped (the process is shutting down or the writer failed).
    pub fn writer_stopped() -> Self {
        Self::unavailable(WRITER_STOPPED)
    }

    /// Whether this is `writer_stopped()`: background work ends instead of retrying.
    pub(crate) fn is_writer_stopped(&self) -> bool {
        self.kind == ErrorKind::Unavailable && self.message == WRITER_STOPPED
    }

    /// A lock guarding in-memory state was poisoned by a panic elsewhere.
    pub fn poisoned(what: &str) -> Self {
        Self::unavailable(format!("{what} lock poisoned"))
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What a client may be shown (see the type's doc).
    pub fn public_message(&self) -> String {
        match self.kind {
            ErrorKind::Busy | ErrorKind::NotFound | ErrorKind::InvalidQuery => self.message.clone(),
            ErrorKind::Unavailable | ErrorKind::Corrupt => self.kind.public_message().to_owned(),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

/// `source()` stays `None`: `Display` already ends with the backend's message, and an
/// error chain printed in full (`{:#}`) would repeat it. `backend_error` reaches it.
impl std::error::Error for StoreError {}

impl StoreError {
    /// The backend's own error, for logs and tests that need to look inside.
    pub fn backend_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_never_see_paths_of_unavailable_or_corrupt_stores() {
        let e = StoreError::unavailable("cannot open /var/lib/threadline/threadline.db")
            .with_source(std::io::Error::other("permission denied"));
        assert!(e.to_string().contains("/var/lib/threadline"), "{e}");
        assert!(e.to_string().contains("permission denied"), "{e}");
        assert_eq!(e.public_message(), "the store is unavailable");
        let busy = StoreError::queue_full(3, 4096);
        assert_eq!(busy.kind(), ErrorKind::Busy);
        assert!(busy.public_message().contains("3 batches"));
    }
}
