//! Distinct values of a batch whose strings are interned (`writer::batch`'s
//! `Interned`: equal strings share one allocation), found without comparing every
//! string with every other.

/// `sorted_distinct` of items made of a batch's interned strings (`Interned`: equal
/// strings share one allocation): deduplicated by the strings' addresses first, so
/// that strings are compared only among the few distinct items. Equal strings that
/// are not shared are merged by the second pass.
pub(crate) fn sorted_distinct_interned<T: Ord, A: Ord>(
    items: impl Iterator<Item = T>,
    address: impl Fn(&T) -> A,
) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort_unstable_by_key(|t| address(t));
    v.dedup_by(|a, b| address(a) == address(b));
    v.sort_unstable();
    v.dedup();
    v
}

/// Where a string's bytes are, for `sorted_distinct_interned`.
pub(crate) fn address(s: &str) -> (usize, usize) {
    (s.as_ptr() as usize, s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_and_unshared_equal_strings_come_out_once_in_order() {
        let shared: std::sync::Arc<str> = "gateway".into();
        let copy = String::from("gateway");
        let other = String::from("api");
        let items = [&*shared, "retriever", &copy, &*shared, &other, "api"];
        let distinct = sorted_distinct_interned(items.into_iter(), |s| address(s));
        assert_eq!(distinct, ["api", "gateway", "retriever"]);
    }
}
