//! Bloom filters as the store keeps them: one byte of probe count, then the bitmap.
//! An item is a 64-bit hash; its probes are derived by double hashing. Filters are
//! stored (per-block attribute filters, per-run trace-id filters), so the layout and
//! the probe sequence are fixed forever. Sizing: 10 bits per item and 7 probes, ≈ 1%
//! false positives.

const BITS_PER_ITEM: usize = 10;
const PROBES: u8 = 7;

/// splitmix64's finish: spreads the bits of `z` over the whole word.
pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bit positions of a filter of `bits` bits (more than zero).
#[derive(Clone, Copy)]
struct Positions {
    bits: u64,
    /// 2^64 mod `bits`.
    wrap: u64,
}

impl Positions {
    fn new(bits: u64) -> Self {
        Self {
            bits,
            wrap: (u64::MAX % bits + 1) % bits,
        }
    }

    /// The `count` bit positions probed for `hash`: `(hash + i·step) mod 2^64 mod bits`
    /// for i in 0..count (double hashing; `naive_probes` in the tests spells it out).
    /// Stepped with two divisions per hash rather than one per probe: the residue
    /// advances by `step mod bits`, less `2^64 mod bits` whenever the 64-bit sum wraps.
    fn probes(self, hash: u64, count: u8) -> impl Iterator<Item = u64> {
        // A second hash from the first; odd, so the probes differ.
        let step = splitmix(hash.wrapping_add(0x9e37_79b9_7f4a_7c15)) | 1;
        let step_mod = step % self.bits;
        let (mut sum, mut at) = (hash, hash % self.bits);
        (0..count).map(move |_| {
            let probe = at;
            let wrapped;
            (sum, wrapped) = sum.overflowing_add(step);
            at = self.add(at, step_mod);
            if wrapped {
                at = self.add(at, self.bits - self.wrap);
            }
            probe
        })
    }

    /// (a + b) mod bits, for a and b at most `bits` (filters are far below 2^63 bits).
    fn add(self, a: u64, b: u64) -> u64 {
        let s = a + b;
        if s >= self.bits {
            s - self.bits
        } else {
            s
        }
    }
}

/// A filter being filled, sized for a number of items given up front.
pub(crate) struct Bloom {
    /// The probe count, then the bitmap: the stored form.
    bytes: Vec<u8>,
}

impl Bloom {
    pub(crate) fn with_capacity(items: usize) -> Self {
        let len = (items * BITS_PER_ITEM).div_ceil(8).max(8);
        let mut bytes = vec![0u8; 1 + len];
        bytes[0] = PROBES;
        Self { bytes }
    }

    pub(crate) fn insert(&mut self, hash: u64) {
        let positions = Positions::new(((self.bytes.len() - 1) * 8) as u64);
        for bit in positions.probes(hash, PROBES) {
            self.bytes[1 + (bit / 8) as usize] |= 1 << (bit % 8);
        }
    }

    /// The stored form.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Whether the stored filter `filter` may hold the item hashed to `hash` (never for an
/// empty filter).
pub(crate) fn may_contain(filter: &[u8], hash: u64) -> bool {
    let Some((&count, bitmap)) = filter.split_first() else {
        return false;
    };
    let bits = (bitmap.len() * 8) as u64;
    if bits == 0 {
        return false;
    }
    Positions::new(bits)
        .probes(hash, count)
        .all(|bit| bitmap[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe sequence as first written, one division per probe: stored filters
    /// were built with it, so `Positions::probes` must give exactly these positions.
    fn naive_probes(hash: u64, bits: u64, count: u8) -> Vec<u64> {
        let step = splitmix(hash.wrapping_add(0x9e37_79b9_7f4a_7c15)) | 1;
        (0..u64::from(count))
            .map(|i| hash.wrapping_add(i.wrapping_mul(step)) % bits)
            .collect()
    }

    #[test]
    fn probes_are_the_stored_filters_positions() {
        for bits in [
            1u64,
            7,
            64,
            80,
            1000,
            12_345,
            100_003,
            1 << 20,
            (1 << 33) + 17,
        ] {
            let positions = Positions::new(bits);
            for i in 0..5_000u64 {
                // Hashes near 2^64 as well, so that sums wrap at every probe.
                for hash in [splitmix(i), u64::MAX - i, i] {
                    let stepped: Vec<u64> = positions.probes(hash, 7).collect();
                    assert_eq!(stepped, naive_probes(hash, bits, 7), "{hash} in {bits}");
                }
            }
        }
    }

    #[test]
    fn every_item_is_found_and_about_one_percent_of_others() {
        let mut bloom = Bloom::with_capacity(10_000);
        for i in 0..10_000u64 {
            bloom.insert(splitmix(i));
        }
        let filter = bloom.into_bytes();
        assert_eq!(filter.len(), 1 + 12_500);
        assert!((0..10_000u64).all(|i| may_contain(&filter, splitmix(i))));
        let false_positives = (10_000..110_000u64)
            .filter(|i| may_contain(&filter, splitmix(*i)))
            .count();
        assert!(false_positives < 2_000, "{false_positives} of 100000");
        assert!(!may_contain(&[], 1));
        assert!(!may_contain(&[PROBES], 1));
    }
}
