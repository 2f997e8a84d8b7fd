//! Time arithmetic of a trace's tree: its bounds, and each span's self time = its
//! duration minus the union of its children's time inside it.

/// The earliest start and the latest end of (start, end) pairs; (0, 0) for none.
pub(crate) fn time_bounds(spans: impl Iterator<Item = (u64, u64)>) -> (u64, u64) {
    spans
        .fold(None, |acc: Option<(u64, u64)>, (s, e)| {
            Some(acc.map_or((s, e), |(a, b)| (a.min(s), b.max(e))))
        })
        .unwrap_or((0, 0))
}

/// Duration of `[start, end]` not covered by any child interval (clipped to the span).
pub(crate) fn self_time(start: u64, end: u64, mut children: Vec<(u64, u64)>) -> u64 {
    children.sort_unstable();
    let mut covered = 0u64;
    let mut cursor = start;
    for (s, e) in children {
        let s = s.max(cursor);
        let e = e.min(end);
        if e > s {
            covered += e - s;
            cursor = e;
        }
    }
    end.saturating_sub(start).saturating_sub(covered)
}

#[cfg(test)]
mod tests {
    use super::self_time;

    #[test]
    fn self_time_subtracts_the_union_of_children() {
        assert_eq!(self_time(0, 100, vec![]), 100);
        assert_eq!(self_time(0, 100, vec![(10, 30), (20, 40)]), 70);
        assert_eq!(self_time(0, 100, vec![(90, 150), (0, 5)]), 85);
        assert_eq!(self_time(0, 100, vec![(0, 100), (10, 20)]), 0);
    }
}
