//! What an update changes beyond its own rows: a new dataset version's drift against
//! the version before it, and a run's state after a transition.

use rusqlite::{params, Connection, OptionalExtension};
use threadline_model::RunTransition;

use super::apply::upsert_node;
use super::*;

/// Recomputes the drift of a dataset version against the version before it (by first
/// seen) and keeps it as the version's `drift` property. `known` saves reading the
/// version back when the caller has it.
pub(super) fn refresh_drift(
    tx: &Connection,
    row: i64,
    known: Option<StoredVersion<'_>>,
    cache: &mut GraphCache,
) -> rusqlite::Result<()> {
    use std::sync::Arc;
    use threadline_analysis::DriftProfile;
    let current = match known {
        Some(v) => Some(v),
        // A version's has_version edge and its node are upserted by the same event
        // with the same time, so the edge's first seen is the version's (and indexed).
        None => tx
            .prepare_cached(
                "SELECT v.props, e.first_seen_ns, e.src FROM graph_edges e
                 JOIN graph_nodes v ON v.id = e.dst
                 WHERE e.dst = ?1 AND e.kind = 'has_version' LIMIT 1",
            )?
            .query_row([row], |r| {
                Ok(StoredVersion {
                    props: r.get::<_, String>(0)?.into(),
                    first_seen: r.get(1)?,
                    dataset: r.get(2)?,
                    fresh: false,
                    profile: None,
                })
            })
            .optional()?,
    };
    let Some(current) = current else {
        return Ok(());
    };
    let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap_or_default();
    let profile = match current.profile {
        Some(p) => p,
        None => Arc::new(DriftProfile::of(&parse(&current.props))),
    };
    cache.remember_profile(row, &profile);
    // The index holds (dataset, first seen, version): finding the previous version
    // reads no node.
    let previous: Option<i64> = tx
        .prepare_cached(
            "SELECT e.dst FROM graph_edges e
             WHERE e.src = ?1 AND e.kind = 'has_version' AND e.dst != ?2
               AND e.first_seen_ns <= ?3
             ORDER BY e.first_seen_ns DESC, e.dst DESC LIMIT 1",
        )?
        .query_row(params![current.dataset, row, current.first_seen], |r| {
            r.get(0)
        })
        .optional()?;
    let Some(previous) = previous else {
        return Ok(());
    };
    let previous_profile = match cache.profiles.get(&previous) {
        Some(p) => Arc::clone(p),
        None => {
            let props: String = tx
                .prepare_cached("SELECT props FROM graph_nodes WHERE id = ?1")?
                .query_row([previous], |r| r.get(0))?;
            let p = Arc::new(DriftProfile::of(&parse(&props)));
            cache.remember_profile(previous, &p);
            p
        }
    };
    let previous_key = || {
        tx.prepare_cached("SELECT key FROM graph_nodes WHERE id = ?1")?
            .query_row([previous], |r| r.get::<_, String>(0))
    };
    match threadline_analysis::drift_mark(
        Some((&previous_profile, previous_key)),
        &profile,
        current.fresh,
        &cache.drift,
    )? {
        threadline_analysis::DriftMark::Set(drift) => {
            tx.prepare_cached(
                "UPDATE graph_nodes SET props = json_set(props, '$.drift', json(?2)) WHERE id = ?1",
            )?
            .execute(params![row, json_text(&drift)])?;
        }
        threadline_analysis::DriftMark::Clear => {
            tx.prepare_cached("UPDATE graph_nodes SET props = json_remove(props, '$.drift') WHERE id = ?1 AND json_type(props, '$.drift') IS NOT NULL")?
                .execute([row])?;
        }
        threadline_analysis::DriftMark::Keep => {}
    }
    Ok(())
}

/// A state move of a run other than the event's own (read, move, write).
pub(super) fn apply_run_transition(
    tx: &Connection,
    tenant_id: i64,
    run: &RunTransition,
    cache: &mut GraphCache,
) -> rusqlite::Result<()> {
    let row = upsert_node(tx, tenant_id, &run.run, run.event_time_ns, None, cache)?;
    let props: String = tx
        .prepare_cached("SELECT props FROM graph_nodes WHERE id = ?1")?
        .query_row([row], |r| r.get(0))?;
    let mut props: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&props).unwrap_or_default();
    threadline_lineage::rules::move_run_state(&mut props, run);
    tx.prepare_cached("UPDATE graph_nodes SET props = ?2 WHERE id = ?1")?
        .execute(params![row, json_text(&serde_json::Value::Object(props))])?;
    Ok(())
}
