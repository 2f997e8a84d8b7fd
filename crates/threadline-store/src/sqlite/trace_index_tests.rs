//! The trace-id index against a real database: lookups stay exact while the
//! compactor builds, merges, relabels and purges runs, across tenants and a reopen.

use crate::StoreBackend as _;
use std::time::{Duration, Instant};

use threadline_model::{TenantId, TraceId};

use crate::sqlite::tests::{acme, span};
use crate::sqlite::trace_compactor::TraceIndexConfig;
use crate::sqlite::{EmbeddedConfig, SqliteStore};

fn trace_id(n: u32) -> TraceId {
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&n.wrapping_add(1).wrapping_mul(2_654_435_761).to_be_bytes());
    id[12..].copy_from_slice(&n.wrapping_add(1).to_be_bytes());
    TraceId(id)
}

/// Blocks of 3 traces of 2 spans each; a long trace adds a span to every 7th block.
fn fill(store: &SqliteStore, tenant: &TenantId, blocks: u32) {
    for b in 0..blocks {
        let mut spans = Vec::new();
        for t in 0..3 {
            let id = trace_id(b * 3 + t);
            for s in 0..2u8 {
                let mut sp = span(0, s + 1, (s == 1).then_some(1), 1_000 + b as u64, None);
                sp.trace_id = id;
                spans.push(sp);
            }
        }
        if b % 7 == 0 {
            let mut sp = span(0, (b / 7) as u8 + 1, None, 1_000 + b as u64, None);
            sp.trace_id = trace_id(1_000_000);
            spans.push(sp);
        }
        store.write_blocking(tenant, &spans).unwrap();
    }
}

/// Waits until the compactor has nothing left to do: no level with two runs below the
/// final level, fewer than 4 blocks outside runs, no unlisted chunks.
fn settled(store: &SqliteStore, tenant_id: i64) -> Vec<crate::sqlite::trace_index::Run> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (runs, tail, orphans) = store
            .with_reader(|conn| {
                let runs = crate::sqlite::trace_index::runs(conn, tenant_id)?;
                let covered = runs.iter().map(|r| r.last_block).max().unwrap_or(0);
                let tail: i64 = conn
                    .query_row(
                        "SELECT COUNT(*) FROM block_traces WHERE tenant_id = ?1 AND block_id > ?2",
                        [tenant_id, covered],
                        |r| r.get(0),
                    )
                    .unwrap();
                let orphans: i64 = conn
                    .query_row(
                        "SELECT COUNT(*) FROM trace_run_chunks c WHERE NOT EXISTS
                         (SELECT 1 FROM trace_runs r WHERE r.run_id = c.run_id)",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                Ok((runs, tail, orphans))
            })
            .unwrap();
        let mut levels: Vec<i64> = runs
            .iter()
            .map(|r| r.level)
            .filter(|l| *l < 1_000)
            .collect();
        levels.sort_unstable();
        let mergeable = levels.windows(2).any(|w| w[0] == w[1]);
        if !mergeable && tail < 4 && orphans == 0 {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "index never settled: {runs:?}, tail {tail}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs of 4 blocks merged two at a time up to 60 entries: many runs and levels soon.
fn small_runs() -> EmbeddedConfig {
    EmbeddedConfig {
        trace_index: TraceIndexConfig {
            level0_blocks: 4,
            fanout: 2,
            max_run_entries: 60,
        },
        ..EmbeddedConfig::default()
    }
}

#[test]
fn lookups_stay_exact_while_runs_are_built_merged_and_purged() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_runs();
    let store = SqliteStore::open(dir.path(), config.clone()).unwrap();
    let other = TenantId::new("other").unwrap();
    fill(&store, &acme(), 90);
    // Another tenant reuses acme's first trace id: each sees only its own spans.
    let mut theirs = span(0, 9, None, 5, None);
    theirs.trace_id = trace_id(0);
    store.write_blocking(&other, &[theirs.clone()]).unwrap();

    let check = |store: &SqliteStore| {
        for n in (0..270).step_by(7) {
            let spans = store.get_trace(&acme(), trace_id(n)).unwrap();
            assert_eq!(spans.len(), 2, "trace {n}");
            assert!(spans.iter().all(|s| s.trace_id == trace_id(n)));
        }
        // The long trace is in 13 blocks, spread over many runs.
        assert_eq!(
            store.get_trace(&acme(), trace_id(1_000_000)).unwrap().len(),
            13
        );
        assert!(store
            .get_trace(&acme(), trace_id(5_000))
            .unwrap()
            .is_empty());
        assert_eq!(
            store.get_trace(&other, trace_id(0)).unwrap(),
            vec![theirs.clone()]
        );
    };
    check(&store);
    let tenant_id = store
        .with_reader(|conn| crate::sqlite::query::tenant_key(conn, &acme()))
        .unwrap()
        .unwrap();
    let runs = settled(&store, tenant_id);
    assert!(
        runs.iter().any(|r| r.level == 1_000),
        "runs too big to merge are final: {runs:?}"
    );
    assert!(
        runs.iter().any(|r| (1..1_000).contains(&r.level)),
        "{runs:?}"
    );
    let indexed: i64 = runs.iter().map(|r| r.entries).sum();
    assert!(indexed >= 260, "{indexed} entries in {runs:?}");
    check(&store);

    // Search pages read the same index for each trace they show.
    let page = store
        .search(
            &acme(),
            &crate::sqlite::TraceQuery {
                limit: 5,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.traces.len(), 5);

    // More blocks after a reopen go on from the same runs.
    drop(store);
    let store = SqliteStore::open(dir.path(), config).unwrap();
    check(&store);
    fill(&store, &acme(), 10);
    settled(&store, tenant_id);
    check(&store);
}

/// Filters of the listed runs: (run id, filter) for every run of the tenant.
fn run_filters(store: &SqliteStore, tenant_id: i64) -> Vec<(i64, Option<Vec<u8>>)> {
    store
        .with_reader(|conn| {
            let runs = crate::sqlite::trace_index::runs(conn, tenant_id)?;
            Ok(runs
                .iter()
                .map(|r| {
                    let filter = conn
                        .query_row(
                            "SELECT filter FROM trace_run_filters WHERE run_id = ?1",
                            [r.run_id],
                            |row| row.get(0),
                        )
                        .ok();
                    (r.run_id, filter)
                })
                .collect())
        })
        .unwrap()
}

/// Every run gets a filter of its trace ids with its catalog row, a merged-away run's
/// filter goes with it, a lookup seeks only the runs whose filter may hold the id, and
/// runs listed before filters existed get theirs from the compactor (and are sought
/// until then).
#[test]
fn lookups_seek_only_runs_whose_filter_may_hold_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_runs();
    let store = SqliteStore::open(dir.path(), config.clone()).unwrap();
    fill(&store, &acme(), 60);
    let tenant_id = store
        .with_reader(|conn| crate::sqlite::query::tenant_key(conn, &acme()))
        .unwrap()
        .unwrap();
    let runs = settled(&store, tenant_id);
    assert!(runs.len() >= 3, "{runs:?}");
    let filters = run_filters(&store, tenant_id);
    assert!(filters.iter().all(|(_, f)| f.is_some()), "{filters:?}");
    let stored: i64 = store
        .with_reader(|conn| {
            Ok(conn
                .query_row("SELECT COUNT(*) FROM trace_run_filters", [], |r| r.get(0))
                .unwrap())
        })
        .unwrap();
    assert_eq!(
        stored as usize,
        filters.len(),
        "merged-away runs keep no filter"
    );
    // Each run's filter holds the traces of its blocks.
    for run in &runs {
        let filter = &filters.iter().find(|(id, _)| *id == run.run_id).unwrap().1;
        let filter = filter.as_ref().unwrap();
        let block = run.first_block;
        let ids: Vec<u8> = store
            .with_reader(|conn| {
                Ok(conn
                    .query_row(
                        "SELECT trace_ids FROM block_traces WHERE block_id = ?1",
                        [block],
                        |r| r.get(0),
                    )
                    .unwrap())
            })
            .unwrap();
        for id in ids.chunks_exact(16) {
            let id: [u8; 16] = id.try_into().unwrap();
            let hash = crate::sqlite::trace_index::id_hash(&id);
            assert!(crate::sqlite::bloom::may_contain(filter, hash));
        }
    }
    let trace = trace_id(4);
    assert_eq!(store.get_trace(&acme(), trace).unwrap().len(), 2);
    drop(store);

    // A filter that rules the trace out keeps its run from being sought: with the
    // filters of every run emptied of bits, the trace is not found.
    let db = dir.path().join(crate::sqlite::DB_FILE_NAME);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let zeroed: Vec<(i64, Vec<u8>)> = filters
        .iter()
        .map(|(id, f)| {
            let mut empty = vec![0u8; f.as_ref().unwrap().len()];
            empty[0] = f.as_ref().unwrap()[0];
            (*id, empty)
        })
        .collect();
    for (id, empty) in &zeroed {
        conn.execute(
            "UPDATE trace_run_filters SET filter = ?2 WHERE run_id = ?1",
            rusqlite::params![id, empty],
        )
        .unwrap();
    }
    drop(conn);
    let store = SqliteStore::open(dir.path(), config.clone()).unwrap();
    assert!(store.get_trace(&acme(), trace).unwrap().is_empty());
    drop(store);

    // A store from before the filters: the runs are sought, and get their filters.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("DELETE FROM trace_run_filters", []).unwrap();
    drop(conn);
    let store = SqliteStore::open(dir.path(), config).unwrap();
    assert_eq!(store.get_trace(&acme(), trace).unwrap().len(), 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while run_filters(&store, tenant_id)
        .iter()
        .any(|(_, f)| f.is_none())
    {
        assert!(Instant::now() < deadline, "the compactor wrote no filters");
        std::thread::sleep(Duration::from_millis(50));
    }
    for n in (0..180).step_by(5) {
        assert_eq!(
            store.get_trace(&acme(), trace_id(n)).unwrap().len(),
            2,
            "{n}"
        );
    }
    assert!(store
        .get_trace(&acme(), trace_id(5_000))
        .unwrap()
        .is_empty());
}
