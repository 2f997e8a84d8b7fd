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

/// The bit positions probed for `hash` in a filter of `bits` bits.
fn probes(hash: u64, bits: u64, count: u8) -> impl Iterator<Item = u64> {
    // A second hash from the first; odd, so the probes differ.
    let step = splitmix(hash.wrapping_add(0x9e37_79b9_7f4a_7c15)) | 1;
    (0..u64::from(count)).map(move |i| hash.wrapping_add(i.wrapping_mul(step)) % bits)
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
        let bits = ((self.bytes.len() - 1) * 8) as u64;
        for bit in probes(hash, bits, PROBES) {
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
    probes(hash, bits, count).all(|bit| bitmap[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
