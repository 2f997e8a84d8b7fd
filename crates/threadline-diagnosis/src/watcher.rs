//! Runs the streaming incident detector over each tenant's rollups: a background pass
//! (the server runs one every few seconds), and on demand before incidents are read (so a client that just
//! loaded traffic sees what it caused). A minute is closed once span time has moved
//! past it (a newer minute holds cells; for the background pass, a minute newer than
//! any it saw at its previous pass, see `Pass`); the detector's progress is stored with the
//! incidents, so a restart resumes where it stopped. No minute is closed before the
//! wall clock has passed it: a span from a sender whose clock runs ahead (ingest
//! refuses those beyond a skew, but a store may hold older ones) must not move the
//! mark past minutes that are still to come, and a stored mark ahead of the clock is
//! taken back (see `resume`). The same pass evaluates the SLO
//! rules and hands new and resolved incidents (with their top causes) and SLO
//! breaches to a listener (the server's alert sink).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use threadline_analysis::{
    DetectorConfig, FaultRules, Incident, IncidentId, SloEvent, SloRule, SloState, Watch,
};
use threadline_model::TenantId;
use threadline_store::{Store, StoreError};

use crate::rca::{top_causes, RankedCause};

/// Minutes replayed (without reporting) to rebuild detector baselines after a restart.
const WARM_MINUTES: i64 = 120;
/// Minutes read from the store at a time.
const CHUNK_MINUTES: i64 = 360;
/// Top causes an incident's news carries.
const NEWS_CAUSES: usize = 3;

/// An incident that opened or resolved, with its top causes.
#[derive(Clone, Debug)]
pub struct IncidentNews {
    pub incident: Incident,
    pub causes: Vec<RankedCause>,
}

/// Told of incidents that opened or resolved and of SLO events, once each, from the
/// detector's pass (which it must not hold up: queue, do not deliver).
pub trait IncidentListener: Send + Sync {
    fn notify(
        &self,
        tenant: &TenantId,
        incidents: Vec<IncidentNews>,
        slo_events: Vec<(SloRule, SloEvent)>,
    );
}

struct TenantWatch {
    watch: Watch,
    slo: Vec<(SloRule, SloState)>,
    processed: i64,
    /// Open incidents whose opening was told (their resolution is told next).
    told_open: HashSet<IncidentId>,
}

pub struct IncidentWatcher {
    store: Store,
    cfg: DetectorConfig,
    rca_rules: Arc<FaultRules>,
    slo_rules: Vec<SloRule>,
    listener: Option<Arc<dyn IncidentListener>>,
    tenants: Mutex<HashMap<TenantId, Arc<Mutex<TenantWatch>>>>,
    /// Per tenant, the newest rollup minute the previous background pass saw.
    newest_at_last_pass: Mutex<HashMap<TenantId, i64>>,
    /// Whether this process runs the detector: on a store many replicas share, only
    /// the one holding the lease does (`set_active`); others read what it stored.
    active: std::sync::atomic::AtomicBool,
    /// Saves refused as a full write queue would (tests of what a refusal loses).
    #[cfg(test)]
    refuse_saves: std::sync::atomic::AtomicBool,
}

/// Who runs the detector. A client reading incidents wants every minute that has data
/// after it. The background pass closes only minutes before the newest one it saw at
/// its previous pass: exports still in flight then (a sender's concurrent exports
/// finish out of order, a backfill sends hours in seconds) have landed since, so a
/// minute is never judged on part of its traffic and then left as judged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    OnDemand,
    Background,
}

type Fed = (Vec<Incident>, Vec<(SloRule, SloEvent)>);

fn poisoned() -> StoreError {
    StoreError::poisoned("incident watcher")
}

impl IncidentWatcher {
    /// A watcher over `store`; SLO rules are evaluated and news is told to `listener`
    /// when there is one.
    pub fn new(
        store: Store,
        cfg: DetectorConfig,
        rca_rules: Arc<FaultRules>,
        slo_rules: Vec<SloRule>,
        listener: Option<Arc<dyn IncidentListener>>,
    ) -> Self {
        Self {
            store,
            cfg,
            rca_rules,
            slo_rules,
            listener,
            tenants: Mutex::new(HashMap::new()),
            newest_at_last_pass: Mutex::new(HashMap::new()),
            active: std::sync::atomic::AtomicBool::new(true),
            #[cfg(test)]
            refuse_saves: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes this process the one that runs the detector (it holds the lease), or not.
    /// On becoming it, what it remembers from an earlier turn is dropped: the next
    /// pass resumes from the stored mark, which another replica may have moved.
    pub fn set_active(&self, active: bool) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let was = self.active.swap(active, Ordering::SeqCst);
        if active && !was {
            self.tenants.lock().map_err(|_| poisoned())?.clear();
            self.newest_at_last_pass
                .lock()
                .map_err(|_| poisoned())?
                .clear();
        }
        Ok(())
    }

    /// Whether this process runs the detector.
    pub fn is_active(&self) -> bool {
        self.active.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn config(&self) -> &DetectorConfig {
        &self.cfg
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The fault rules the news' causes are ranked with.
    pub fn rca_rules(&self) -> &FaultRules {
        &self.rca_rules
    }

    /// Runs the detector over every closed minute not yet seen. Blocking.
    pub fn catch_up(&self, tenant: &TenantId) -> Result<(), StoreError> {
        self.catch_up_through(tenant, Pass::OnDemand)
    }

    /// One background pass over every tenant. Blocking.
    pub fn background_pass(&self) -> Result<(), StoreError> {
        for tenant in self.store.tenants()? {
            self.catch_up_through(&tenant, Pass::Background)?;
        }
        Ok(())
    }

    fn catch_up_through(&self, tenant: &TenantId, pass: Pass) -> Result<(), StoreError> {
        if !self.is_active() {
            return Ok(());
        }
        let Some((first, last)) = self.store.rollup_minute_range(tenant)? else {
            return Ok(());
        };
        // A minute is closed once span time has moved past it and the wall clock too:
        // span time past the clock (stored before ingest bounded it) counts as now.
        let last = last.min(wall_clock_minute());
        let mut closed = last - 1;
        if pass == Pass::Background {
            let previous = self
                .newest_at_last_pass
                .lock()
                .map_err(|_| poisoned())?
                .insert(tenant.clone(), last);
            match previous {
                Some(previous) => closed = closed.min(previous - 1),
                None => return Ok(()),
            }
        }
        let slot = {
            let mut tenants = self.tenants.lock().map_err(|_| poisoned())?;
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
        let mut state = slot.lock().map_err(|_| poisoned())?;
        if closed <= state.processed {
            return Ok(());
        }
        let mut changed: BTreeMap<IncidentId, Incident> = BTreeMap::new();
        let mut slo_events = Vec::new();
        let mut from = state.processed + 1;
        while from <= closed {
            let to = (from + CHUNK_MINUTES - 1).min(closed);
            let TenantWatch { watch, slo, .. } = &mut *state;
            let (incidents, events) = feed(&self.store, tenant, watch, slo, from, to)?;
            for incident in incidents {
                changed.insert(incident.id.clone(), incident);
            }
            slo_events.extend(events);
            from = to + 1;
        }
        let changed: Vec<Incident> = changed.into_values().collect();
        // The mark moves only once the incidents it covers are stored. If they cannot
        // be (a full write queue), this watch has judged minutes the store has not
        // recorded: drop it, so the next pass resumes from the stored mark, judges those
        // minutes again and opens (and alerts) the same incidents.
        let saved = self.save(tenant, changed.clone(), closed);
        if let Err(e) = saved {
            drop(state);
            self.tenants.lock().map_err(|_| poisoned())?.remove(tenant);
            return Err(e);
        }
        state.processed = closed;
        if let Some(listener) = &self.listener {
            let news = self.news(tenant, &mut state.told_open, changed);
            if !news.is_empty() || !slo_events.is_empty() {
                listener.notify(tenant, news, slo_events);
            }
        }
        Ok(())
    }

    fn save(
        &self,
        tenant: &TenantId,
        incidents: Vec<Incident>,
        processed_minute: i64,
    ) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.refuse_saves.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::queue_full(0, 0));
        }
        self.store
            .save_incidents(tenant, incidents, processed_minute)?
            .wait_blocking()
            .map(|_| ())
    }

    /// Incidents that opened or resolved since they were last told, with their top
    /// causes. Blocking (RCA).
    fn news(
        &self,
        tenant: &TenantId,
        told_open: &mut HashSet<IncidentId>,
        changed: Vec<Incident>,
    ) -> Vec<IncidentNews> {
        changed
            .into_iter()
            .filter(|incident| {
                if incident.is_open() {
                    told_open.insert(incident.id.clone())
                } else {
                    told_open.remove(&incident.id)
                }
            })
            .map(|incident| IncidentNews {
                causes: top_causes(&self.store, tenant, &self.rca_rules, &incident, NEWS_CAUSES),
                incident,
            })
            .collect()
    }

    /// A watch for a tenant seen for the first time since start: baselines and SLO
    /// windows rebuilt from the minutes before the stored mark (nothing is reported
    /// again), or a fresh start at the first minute.
    fn resume(&self, tenant: &TenantId, first: i64) -> Result<TenantWatch, StoreError> {
        let mut watch = Watch::new(self.cfg.clone());
        let mut slo: Vec<(SloRule, SloState)> = self
            .slo_rules
            .iter()
            .filter(|r| r.tenant.as_deref().is_none_or(|t| t == tenant.as_str()))
            .map(|r| (r.clone(), SloState::default()))
            .collect();
        let now = wall_clock_minute();
        let processed = match self.store.detector_mark(tenant)? {
            // A mark ahead of the clock came from span times ahead of it (a sender's
            // clock a year fast, stored before ingest bounded times): every real
            // minute since would stay behind it, never judged. Judge again from the
            // start: incident ids are their scope and onset, so those already stored
            // are found again and replaced, not doubled, and those already told are
            // not told again.
            Some(mark) if mark >= now => {
                tracing::warn!(
                    tenant = %tenant,
                    mark,
                    now,
                    "the incident detector's mark is ahead of the clock: judging the stored minutes again"
                );
                first - 1
            }
            Some(mark) => {
                let from = (mark - WARM_MINUTES).max(first);
                let _ = feed(&self.store, tenant, &mut watch, &mut slo, from, mark)?;
                mark
            }
            None => first - 1,
        };
        let told_open = self
            .store
            .incidents(tenant, i64::MIN, i64::MAX)?
            .into_iter()
            .filter(Incident::is_open)
            .map(|i| i.id)
            .collect();
        Ok(TenantWatch {
            watch,
            slo,
            processed,
            told_open,
        })
    }
}

/// The minute the wall clock is in (unix minutes).
fn wall_clock_minute() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (now / 60) as i64
}

/// Feeds minutes `from..=to` to the watch and the SLO rules; returns the incidents
/// opened or changed and the SLO events.
fn feed(
    store: &Store,
    tenant: &TenantId,
    watch: &mut Watch,
    slo: &mut [(SloRule, SloState)],
    from: i64,
    to: i64,
) -> Result<Fed, StoreError> {
    let cells = store.rollup_cells(tenant, from, to)?;
    let mut by_minute: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (minute, _, _)) in cells.iter().enumerate() {
        by_minute.entry(*minute).or_default().push(i);
    }
    let (mut incidents, mut events) = (Vec::new(), Vec::new());
    for (minute, rows) in by_minute {
        let of_minute = || rows.iter().map(|&i| (&cells[i].1, &cells[i].2));
        incidents.extend(watch.push_minute(minute, of_minute()));
        for (rule, state) in slo.iter_mut() {
            if let Some(e) = state.push_minute(rule, minute, of_minute()) {
                events.push((rule.clone(), e));
            }
        }
    }
    Ok((incidents, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_store::EmbeddedConfig;

    use crate::test_traffic::load;

    /// The start of the hour the tests' traffic is in.
    const HOUR_NS: i64 = 28_000_000 * 60_000_000_000;

    /// An empty store (kept while its directory lives) and a watcher over it without
    /// SLO rules or listener.
    fn fresh_watcher() -> (tempfile::TempDir, Store, IncidentWatcher) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_embedded(dir.path(), EmbeddedConfig::default()).unwrap();
        let watcher = IncidentWatcher::new(
            store.clone(),
            DetectorConfig::default(),
            Arc::new(FaultRules::default_rules()),
            Vec::new(),
            None,
        );
        (dir, store, watcher)
    }

    /// Incidents the store refused to save (a full write queue) are not lost: the mark
    /// stays where the store has it, and the next pass opens them again.
    #[test]
    fn incidents_a_full_queue_refused_are_found_again_by_the_next_pass() {
        let (_dir, store, watcher) = fresh_watcher();
        let tenant = TenantId::default_tenant();
        let hour_ns = HOUR_NS;
        load(&store, &tenant, hour_ns, 0, 55, 400);
        watcher
            .refuse_saves
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let refused = watcher.catch_up(&tenant).unwrap_err();
        assert_eq!(
            refused.kind(),
            threadline_store::ErrorKind::Busy,
            "{refused}"
        );
        assert_eq!(processed(&watcher, &tenant), None);
        assert_eq!(store.detector_mark(&tenant).unwrap(), None);
        assert!(store
            .incidents(&tenant, i64::MIN, i64::MAX)
            .unwrap()
            .is_empty());
        watcher
            .refuse_saves
            .store(false, std::sync::atomic::Ordering::Relaxed);
        watcher.catch_up(&tenant).unwrap();
        let found = store.incidents(&tenant, i64::MIN, i64::MAX).unwrap();
        assert!(found.iter().any(|i| i.route == "/v1/chat"), "{found:#?}");
        assert!(store.detector_mark(&tenant).unwrap().is_some());
    }

    /// A span dated a year ahead makes the newest rollup minute a year ahead: minutes
    /// are still judged only up to the wall clock, and a mark stored ahead of it (by a
    /// build that judged up to the newest minute) is taken back on the next start.
    #[test]
    fn a_minute_a_year_ahead_neither_moves_the_mark_past_the_clock_nor_keeps_it_there() {
        let (_dir, store, watcher) = fresh_watcher();
        let tenant = TenantId::default_tenant();
        let year_ns = 365 * 86_400 * 1_000_000_000i64;
        let ahead_ns = (wall_clock_minute() + 1) * 60_000_000_000 + year_ns;
        load(&store, &tenant, HOUR_NS, 0, 55, 400);
        load(&store, &tenant, ahead_ns, 0, 1, 5);
        watcher.catch_up(&tenant).unwrap();
        let mark = store.detector_mark(&tenant).unwrap().unwrap();
        assert!(
            mark < wall_clock_minute(),
            "mark {mark} is not behind the clock"
        );
        let found = store.incidents(&tenant, i64::MIN, i64::MAX).unwrap();
        assert!(found.iter().any(|i| i.route == "/v1/chat"), "{found:#?}");

        // A store whose mark an older build put a year ahead, holding the same minutes.
        let (_dir, store, _) = fresh_watcher();
        load(&store, &tenant, HOUR_NS, 0, 55, 400);
        load(&store, &tenant, ahead_ns, 0, 1, 5);
        let ahead_minute = ahead_ns / 60_000_000_000;
        store
            .save_incidents(&tenant, Vec::new(), ahead_minute)
            .unwrap()
            .wait_blocking()
            .unwrap();
        let restarted = IncidentWatcher::new(
            store.clone(),
            DetectorConfig::default(),
            Arc::new(FaultRules::default_rules()),
            Vec::new(),
            None,
        );
        restarted.catch_up(&tenant).unwrap();
        let again = store.incidents(&tenant, i64::MIN, i64::MAX).unwrap();
        assert_eq!(
            again.iter().map(|i| &i.id).collect::<Vec<_>>(),
            found.iter().map(|i| &i.id).collect::<Vec<_>>()
        );
        assert!(store.detector_mark(&tenant).unwrap().unwrap() < wall_clock_minute());
    }

    fn processed(watcher: &IncidentWatcher, tenant: &TenantId) -> Option<i64> {
        let tenants = watcher.tenants.lock().unwrap();
        let state = tenants.get(tenant)?;
        let processed = state.lock().unwrap().processed;
        Some(processed)
    }

    /// A background pass judges only minutes older than the newest one the previous
    /// pass saw: traffic still arriving for them (exports finishing out of order, a
    /// backfill) is not judged half-loaded. A client's read judges every minute before
    /// the newest.
    #[test]
    fn background_passes_lag_one_pass_behind_the_newest_minute() {
        let (_dir, store, watcher) = fresh_watcher();
        let tenant = TenantId::default_tenant();
        let hour_ns = HOUR_NS;
        let first_minute = hour_ns / 60_000_000_000;
        load(&store, &tenant, hour_ns, 0, 10, 20);
        watcher.catch_up_through(&tenant, Pass::Background).unwrap();
        assert_eq!(
            processed(&watcher, &tenant),
            None,
            "the first pass only looks"
        );
        load(&store, &tenant, hour_ns, 10, 10, 20);
        watcher.catch_up_through(&tenant, Pass::Background).unwrap();
        // The newest minute at the first pass was minute 9: minutes up to 8 are judged.
        assert_eq!(processed(&watcher, &tenant), Some(first_minute + 8));
        watcher.catch_up(&tenant).unwrap();
        assert_eq!(processed(&watcher, &tenant), Some(first_minute + 18));
    }
}
