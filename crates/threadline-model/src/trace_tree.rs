//! Time arithmetic of a trace's tree: its bounds, each span's self time (its duration
//! minus the union of its children's time inside it), and the critical path — where
//! the time of a request went. Spans are given as (start, end) pairs with child lists;
//! what they are is the caller's.

/// The earliest start and the latest end of (start, end) pairs; (0, 0) for none.
pub fn time_bounds(spans: impl Iterator<Item = (u64, u64)>) -> (u64, u64) {
    spans
        .fold(None, |acc: Option<(u64, u64)>, (s, e)| {
            Some(acc.map_or((s, e), |(a, b)| (a.min(s), b.max(e))))
        })
        .unwrap_or((0, 0))
}

/// Duration of `[start, end]` not covered by any child interval (clipped to the span).
pub fn self_time(start: u64, end: u64, mut children: Vec<(u64, u64)>) -> u64 {
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

/// The critical path below each of `roots`: for every span on it, the time (ns) of
/// its root's duration it accounts for; `None` off the path. From a span's end, the
/// child that ended last (before the cursor) takes the time back to its start (its
/// part clipped to the parent's remaining window), the parent the gaps between; then
/// the same inside that child. The times on the path below a root add up to the
/// root's duration exactly, so a change in a request's latency is the sum of the
/// changes of its path's parts. Parallel children that finish earlier are off it.
pub fn critical_path(
    times: &[(u64, u64)],
    children: &[Vec<usize>],
    roots: impl IntoIterator<Item = usize>,
) -> Vec<Option<u64>> {
    let mut on: Vec<Option<u64>> = vec![None; times.len()];
    // (span, window start, window end): the part of the root's time it accounts for.
    let mut stack: Vec<(usize, u64, u64)> = roots
        .into_iter()
        .filter(|&r| r < times.len())
        .map(|r| (r, times[r].0, times[r].1.max(times[r].0)))
        .collect();
    while let Some((i, lo, hi)) = stack.pop() {
        if on[i].is_some() {
            // A cycle in bad input, or a span reached twice: counted once.
            continue;
        }
        let mut kids: Vec<usize> = children[i]
            .iter()
            .copied()
            .filter(|&c| c != i && on[c].is_none())
            .collect();
        kids.sort_by_key(|&c| std::cmp::Reverse(times[c].1));
        let mut own = 0u64;
        let mut cursor = hi;
        for c in kids {
            if cursor <= lo {
                break;
            }
            let (start, end) = times[c];
            let (s, e) = (start.max(lo), end.min(cursor));
            if e <= s {
                continue;
            }
            own += cursor - e;
            stack.push((c, s, e));
            cursor = s;
        }
        own += cursor.saturating_sub(lo);
        on[i] = Some(own);
    }
    on
}

#[cfg(test)]
mod tests {
    use super::{critical_path, self_time};

    #[test]
    fn the_critical_path_takes_the_child_that_ended_last_and_adds_up() {
        // root [0, 100]: a retrieval [5, 40], an LLM call [40, 95] with a parallel
        // cache lookup [42, 50] inside it, and a logger [10, 20] parallel to the retrieval.
        let times = [(0, 100), (5, 40), (40, 95), (42, 50), (10, 20)];
        let children = vec![vec![1, 2, 4], vec![], vec![3], vec![], vec![]];
        let on = critical_path(&times, &children, [0]);
        assert_eq!(on, vec![Some(10), Some(35), Some(47), Some(8), None]);
        assert_eq!(on.iter().flatten().sum::<u64>(), 100);
        // A child outliving its parent is clipped to it; a cycle is walked once.
        let times = [(0, 100), (50, 130)];
        let on = critical_path(&times, &[vec![1], vec![0]], [0]);
        assert_eq!(on, vec![Some(50), Some(50)]);
    }

    #[test]
    fn self_time_subtracts_the_union_of_children() {
        assert_eq!(self_time(0, 100, vec![]), 100);
        assert_eq!(self_time(0, 100, vec![(10, 30), (20, 40)]), 70);
        assert_eq!(self_time(0, 100, vec![(90, 150), (0, 5)]), 85);
        assert_eq!(self_time(0, 100, vec![(0, 100), (10, 20)]), 0);
    }
}
