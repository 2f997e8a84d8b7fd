//! Retried exports (backend-neutral: every backend keeps one window in memory): an exporter that got no answer in time sends the same spans again.
//! Readers keep the first stored copy of a (trace id, span id); rollups must not count
//! the request twice either. `RecentSpans` remembers the identities of the most recent
//! spans (prepared, committed or rebuilt at open from the newest stored rows), so a
//! request or model call whose span was seen is left out of the rollups of the batch
//! that repeats it. Bounded: the window holds two generations of `capacity / 2` spans
//! each, so a retry of one of the newest `capacity / 2` spans is always recognized and
//! one older than the newest `capacity` never is (917,504 by default: 4–9 seconds of
//! traffic at full speed, 2–4 minutes at 4,000 spans/s, hours at common rates); SDK and
//! Collector retries come within seconds to minutes. Two sets instead of one set and a
//! queue of arrival order: a generation is dropped whole when the next one fills, 9
//! bytes per span instead of 24 or more (9.4 MB at the default, sized so that each
//! set fills its table, 2¹⁹ slots, to hashbrown's 7/8 and no further).

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};

use threadline_model::{SpanId, TenantId, TraceId};

/// The identities are already the output of a per-process keyed hash: the set uses
/// them as they are instead of hashing them again.
#[derive(Default)]
struct AsIs(u64);

impl Hasher for AsIs {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; anything else folds in byte by byte.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(crate) struct RecentSpans {
    /// The newer generation, filling; then the older one.
    current: HashSet<u64, BuildHasherDefault<AsIs>>,
    previous: HashSet<u64, BuildHasherDefault<AsIs>>,
    /// Spans per generation.
    generation: usize,
    hasher: foldhash::fast::RandomState,
}

impl RecentSpans {
    pub(crate) fn new(capacity: usize) -> Self {
        let generation = capacity / 2;
        let set = || HashSet::with_capacity_and_hasher(generation, Default::default());
        Self {
            current: set(),
            previous: set(),
            generation,
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// A span's identity: 64 bits of a per-process keyed hash of tenant, trace and
    /// span id (a collision among 2 M spans has odds of about 10⁻⁷).
    pub(crate) fn key(&self, tenant: &str, trace: &TraceId, span: &SpanId) -> u64 {
        let mut h = self.hasher.build_hasher();
        tenant.hash(&mut h);
        trace.0.hash(&mut h);
        span.0.hash(&mut h);
        h.finish()
    }

    /// Remembers `key`; whether it was already known.
    fn mark(&mut self, key: u64) -> bool {
        if self.generation == 0 {
            return false;
        }
        if self.previous.contains(&key) || !self.current.insert(key) {
            return true;
        }
        if self.current.len() >= self.generation {
            // The older generation goes; its table is reused for the next one.
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
        }
        false
    }

    /// Marks the spans of one batch: for each, whether it was seen before. The keys
    /// this batch added are returned, to be forgotten if the batch is not stored.
    pub(crate) fn mark_batch(
        &mut self,
        tenant: &TenantId,
        ids: impl Iterator<Item = (TraceId, SpanId)>,
    ) -> (Vec<bool>, Vec<u64>) {
        let mut repeated = Vec::new();
        let mut added = Vec::new();
        for (trace, span) in ids {
            let key = self.key(tenant.as_str(), &trace, &span);
            let seen = self.mark(key);
            if !seen {
                added.push(key);
            }
            repeated.push(seen);
        }
        (repeated, added)
    }

    /// Remembers one stored span (rebuilding the window at open).
    pub(crate) fn remember(&mut self, tenant: &str, trace: &TraceId, span: &SpanId) {
        let key = self.key(tenant, trace, span);
        self.mark(key);
    }

    /// A batch that was refused: its spans were not stored after all.
    pub(crate) fn forget(&mut self, keys: &[u64]) {
        for k in keys {
            if !self.current.remove(k) {
                self.previous.remove(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u8) -> impl Iterator<Item = (TraceId, SpanId)> {
        (0..n).map(|i| (TraceId([i; 16]), SpanId([i; 8])))
    }

    #[test]
    fn a_repeated_span_is_known_until_it_leaves_the_window_and_a_refused_batch_is_forgotten() {
        let tenant = TenantId::default_tenant();
        let mut recent = RecentSpans::new(4);
        let (repeated, added) = recent.mark_batch(&tenant, ids(3));
        assert_eq!((repeated, added.len()), (vec![false; 3], 3));
        let (repeated, added) = recent.mark_batch(&tenant, ids(3));
        assert_eq!((repeated, added.len()), (vec![true; 3], 0));
        // Another tenant's ids are its own.
        let other = TenantId::new("globex").unwrap();
        assert_eq!(recent.mark_batch(&other, ids(1)).0, vec![false]);
        // A window of 4 holds two generations of 2: spans 0 and 1 filled the first, 2
        // and the other tenant's the second; span 3 starts a third, and the first goes.
        let one = |i: u8| [(TraceId([i; 16]), SpanId([i; 8]))].into_iter();
        recent.mark_batch(&tenant, one(3));
        assert_eq!(recent.mark_batch(&tenant, one(2)).0, vec![true]);
        assert_eq!(recent.mark_batch(&tenant, one(3)).0, vec![true]);
        assert_eq!(recent.mark_batch(&tenant, one(0)).0, vec![false]);
        let (_, added) =
            recent.mark_batch(&tenant, [(TraceId([9; 16]), SpanId([9; 8]))].into_iter());
        recent.forget(&added);
        assert_eq!(
            recent
                .mark_batch(&tenant, [(TraceId([9; 16]), SpanId([9; 8]))].into_iter())
                .0,
            vec![false]
        );
        assert!(!RecentSpans::new(0).mark(1) && !RecentSpans::new(0).mark(1));
    }

    #[test]
    fn the_window_keeps_its_two_tables_at_their_first_size() {
        let mut recent = RecentSpans::new(917_504);
        let first = (recent.current.capacity(), recent.previous.capacity());
        assert!(first.0 >= 458_752 && first.1 >= 458_752, "{first:?}");
        for key in 0..2_000_000u64 {
            recent.mark(key.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        assert_eq!(
            (recent.current.capacity(), recent.previous.capacity()),
            first
        );
        // The newest generation is known, the oldest spans are not.
        assert!(recent.mark(1_999_999u64.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        assert!(!recent.mark(0));
    }
}
