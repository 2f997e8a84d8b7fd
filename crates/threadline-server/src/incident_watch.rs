//! Runs the streaming incident detector over each tenant's rollups: a background task
//! every few seconds, and on demand before incidents are read (so a client that just
//! loaded traffic sees what it caused). A minute is closed once span time has moved
//! past it (a newer minute holds cells); the detector's progress is stored with the
//! incidents, so a restart resumes where it stopped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use threadline_analysis::{DetectorConfig, Incident, Watch};
use threadline_model::TenantId;
use threadline_store::{SqliteStore, StoreError};

/// Minutes replayed (without reporting) to rebuild detector baselines after a restart.
const WARM_MINUTES: i64 = 120;
/// Minutes read from the store at a time.
const CHUNK_MINUTES: i64 = 360;
const INTERVAL: Duration = Duration::from_secs(5);

struct TenantWatch {
    watch: Watch,
    processed: i64,
}

pub(crate) struct IncidentWatcher {
    store: SqliteStore,
    cfg: DetectorConfig,
    tenants: Mutex<HashMap<TenantId, Arc<Mutex<TenantWatch>>>>,
}

impl IncidentWatcher {
    pub(crate) fn new(store: SqliteStore, cfg: DetectorConfig) -> Self {
        Self {
            store,
            cfg,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn config(&self) -> &DetectorConfig {
        &self.cfg
    }

    pub(crate) fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// Runs the detector over every closed minute not yet seen. Blocking.
    pub(crate) fn catch_up(&self, tenant: &TenantId) -> Result<(), StoreError> {
        self.store.flush_rollups()?.wait_blocking()?;
        let Some((first, last)) = self.store.rollup_minute_range(tenant)? else {
            return Ok(());
        };
        let closed = last - 1;
        let slot = {
            let mut tenants = self
                .tenants
                .lock()
                .map_err(|_| StoreError::Corrupt("incident watcher lock poisoned".into()))?;
            match tenants.get(tenant) {
                Some(s) => Arc::clone(s),
                None => {
                    let state = self.resume(tenant, first)?;
                    Arc::clone(
                        tenants
                            .entry(tenant.clone())
                            .or_insert_with(|| Arc::new(Mutex::new(state))),
                    )
                }
            }
        };
        let mut state = slot
            .lock()
            .map_err(|_| StoreError::Corrupt("incident watcher lock poisoned".into()))?;
        if closed <= state.processed {
            return Ok(());
        }
        let mut changed: BTreeMap<String, Incident> = BTreeMap::new();
        let mut from = state.processed + 1;
        while from <= closed {
            let to = (from + CHUNK_MINUTES - 1).min(closed);
            for incident in feed(&self.store, tenant, &mut state.watch, from, to)? {
                changed.insert(incident.id.clone(), incident);
            }
            from = to + 1;
        }
        state.processed = closed;
        self.store
            .save_incidents(tenant, changed.into_values().collect(), closed)?
            .wait_blocking()?;
        Ok(())
    }

    /// A watch for a tenant seen for the first time since start: baselines rebuilt from
    /// the minutes before the stored mark, or a fresh start at the first minute.
    fn resume(&self, tenant: &TenantId, first: i64) -> Result<TenantWatch, StoreError> {
        let mut watch = Watch::new(self.cfg.clone());
        let processed = match self.store.detector_mark(tenant)? {
            Some(mark) => {
                let _ = feed(
                    &self.store,
                    tenant,
                    &mut watch,
                    (mark - WARM_MINUTES).max(first),
                    mark,
                )?;
                mark
            }
            None => first - 1,
        };
        Ok(TenantWatch { watch, processed })
    }

    /// The background loop: every tenant, every few seconds, until the server stops.
    pub(crate) fn spawn(self: Arc<Self>) {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            loop {
                tick.tick().await;
                let watcher = Arc::clone(&self);
                let result = tokio::task::spawn_blocking(move || {
                    for tenant in watcher.store.tenants()? {
                        watcher.catch_up(&tenant)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await;
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "incident detection failed"),
                    Err(e) => tracing::warn!(error = %e, "incident detection task failed"),
                }
            }
        });
    }
}

/// Feeds minutes `from..=to` to the watch; returns the incidents it opened or changed.
fn feed(
    store: &SqliteStore,
    tenant: &TenantId,
    watch: &mut Watch,
    from: i64,
    to: i64,
) -> Result<Vec<Incident>, StoreError> {
    let cells = store.rollup_cells(tenant, from, to)?;
    let mut by_minute: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (minute, _, _)) in cells.iter().enumerate() {
        by_minute.entry(*minute).or_default().push(i);
    }
    let mut out = Vec::new();
    for (minute, rows) in by_minute {
        out.extend(watch.push_minute(minute, rows.iter().map(|&i| (&cells[i].1, &cells[i].2))));
    }
    Ok(out)
}
