//! The store's threads: how each is started (named, its failure to start an error),
//! and the loop of the background ones (the trace-id compactor, the full-text
//! indexer): rounds of work until the store closes, a pause after a round with nothing
//! to do. Those hold the store only as a `Weak` between rounds, so they never keep it
//! open, and stop once they are its last holder or the writer has stopped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::sqlite::StoreError;

/// Starts a thread of the store named `name`.
pub(crate) fn spawn(
    name: &'static str,
    body: impl FnOnce() + Send + 'static,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .map(drop)
        .map_err(|source| {
            StoreError::unavailable(format!("cannot start the {name} thread")).with_source(source)
        })
}

/// Runs `round` (true when it did something) until the store goes; `what` names the
/// work in the warning a failed round logs before it is tried again.
pub(crate) fn until_closed<S>(
    store: &Weak<S>,
    what: &str,
    idle: Duration,
    mut round: impl FnMut(&Arc<S>) -> Result<bool, StoreError>,
) {
    loop {
        let Some(store) = store.upgrade() else { return };
        let worked = match round(&store) {
            Ok(worked) => worked,
            Err(e) if e.is_writer_stopped() => return,
            Err(e) => {
                tracing::warn!(error = %e, "{what} failed; retrying");
                false
            }
        };
        let alone = Arc::strong_count(&store) == 1;
        drop(store);
        if alone {
            return;
        }
        if !worked {
            std::thread::sleep(idle);
        }
    }
}
