//! Time arithmetic of a trace's tree: its bounds, each span's self time (its duration
//! minus the union of its children's time inside it), and the critical path — where
//! the time of a request went. Spans are given as (start, end) pairs with child lists;
//! what they are is the caller's.

// Seeded per process: span ids come from senders, so a fixed hash could be flooded.
use foldhash::HashMap;

use crate::SpanId;

/// Ancestor chains followed at most (a tree from bad input can be very deep).
const MAX_DEPTH: usize = 64;

/// Each span's parent and children, by index into a list of spans (a parent outside
/// the list, or one closing a cycle, makes the span a root).
pub struct Tree {
    pub parent: Vec<Option<usize>>,
    pub children: Vec<Vec<usize>>,
}

impl Tree {
    /// From each span's (id, parent id), in list order.
    pub fn of(links: impl Iterator<Item = (SpanId, Option<SpanId>)>) -> Self {
        let links: Vec<(SpanId, Option<SpanId>)> = links.collect();
        let position: HashMap<SpanId, usize> = links
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (*id, i))
            .collect();
        let parent: Vec<Option<usize>> = links
            .iter()
            .enumerate()
            .map(|(i, (_, p))| {
                p.and_then(|p| position.get(&p).copied())
                    .filter(|&p| p != i)
            })
            .collect();
        let parent = break_cycles(parent);
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); links.len()];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = *p {
                children[p].push(i);
            }
        }
        Self { parent, children }
    }

    /// Ancestors, nearest first (at most 64).
    pub fn ancestors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.parent[i], move |&p| self.parent[p]).take(MAX_DEPTH)
    }

    /// `i` and the spans below it, depth first (64 levels at most).
    pub fn subtree(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![(i, 0usize)];
        while let Some((j, depth)) = stack.pop() {
            out.push(j);
            if depth < MAX_DEPTH {
                stack.extend(self.children[j].iter().map(|&c| (c, depth + 1)));
            }
        }
        out
    }
}

/// Parent links with any cycle cut (bad input may form one): a span whose ancestor
/// chain returns to itself becomes a root.
fn break_cycles(mut parent: Vec<Option<usize>>) -> Vec<Option<usize>> {
    let n = parent.len();
    // 0 = unvisited, 1 = on the current walk, 2 = known to reach a root.
    let mut state = vec![0u8; n];
    for start in 0..n {
        let mut walk = Vec::new();
        let mut at = start;
        loop {
            match state[at] {
                2 => break,
                1 => {
                    parent[at] = None;
                    break;
                }
                _ => {}
            }
            state[at] = 1;
            walk.push(at);
            match parent[at] {
                Some(p) => at = p,
                None => break,
            }
        }
        for w in walk {
            state[w] = 2;
        }
    }
    parent
}

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
    use super::{critical_path, self_time, Tree};
    use crate::SpanId;

    #[test]
    fn a_tree_keeps_its_links_and_cuts_cycles() {
        let id = |n: u8| SpanId([n; 8]);
        let chain =
            Tree::of([(id(1), None), (id(2), Some(id(1))), (id(3), Some(id(2)))].into_iter());
        assert_eq!(chain.parent, [None, Some(0), Some(1)]);
        assert_eq!(chain.ancestors(2).collect::<Vec<_>>(), [1, 0]);
        assert_eq!(chain.subtree(0), [0, 1, 2]);
        // 1 → 2 → 1, and a parent outside the list.
        let bad = Tree::of(
            [
                (id(1), Some(id(2))),
                (id(2), Some(id(1))),
                (id(3), Some(id(9))),
            ]
            .into_iter(),
        );
        assert_eq!(bad.parent.iter().filter(|p| p.is_none()).count(), 2);
        assert!(bad.ancestors(0).count() <= 1);
    }

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
