//! Applying a graph update inside the writer's transaction: nodes and edges upserted
//! (seen-intervals widened, JSON properties merged), OpenLineage run events, assets
//! registered and joined to the runs that produce their artifacts.

use rusqlite::{named_params, params, Connection, OptionalExtension};
use threadline_lineage::validity::{plan_revision, DeclaredChange, StoredDeclared};
use threadline_model::{
    AssetOutcome, DeclaredEdge, DeclaredValidity, EdgeEnd, EdgeKind, NodeId, NodeKind,
};

use super::transitions::{apply_run_transition, refresh_drift};
use super::*;
use threadline_lineage::rules;

/// Applies one update. Returns `None` (and changes nothing) when the update carries an
/// event key that is already stored, else what each registered asset became.
pub(crate) fn apply(
    tx: &Connection,
    tenant_id: i64,
    update: &PreparedGraph,
    received_ns: i64,
    cache: &mut GraphCache,
) -> rusqlite::Result<Option<Vec<(NodeId, AssetOutcome)>>> {
    if let Some(run) = &update.run {
        if !apply_run_event(tx, tenant_id, run, cache)? {
            return Ok(None);
        }
    } else if let Some(key) = &update.event {
        let inserted = tx
            .prepare_cached(
                "INSERT OR IGNORE INTO lineage_events
                    (tenant_id, subject, event_type, event_time, received_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                tenant_id,
                key.subject,
                key.event_type,
                key.event_time,
                received_ns,
            ])?;
        if inserted == 0 {
            return Ok(None);
        }
    }
    let mut outcomes = Vec::with_capacity(update.assets.len());
    // Declared edges a revision names anew: they hold from it, once upserted below.
    let mut hold_from = Vec::new();
    for asset in &update.assets {
        let (row, outcome) = register_asset(tx, tenant_id, asset, cache)?;
        if let AssetOutcome::Revised(_) = outcome {
            let stored = stored_declared(tx, row)?;
            for change in plan_revision(&asset.declares, &stored) {
                match change {
                    DeclaredChange::Supersede(edge) => {
                        set_validity(tx, tenant_id, row, &edge, (None, Some(asset.registered_ns)))?
                    }
                    DeclaredChange::HoldFrom(edge) => {
                        hold_from.push((row, edge, asset.registered_ns))
                    }
                }
            }
        }
        outcomes.push((asset.id.clone(), outcome));
    }
    // (row, Some(new version)) for a row this node created: its properties are the
    // patch as it is, and so is its profile.
    let mut touched_versions: Vec<(i64, Option<NewVersion<'_>>)> = Vec::new();
    for node in &update.nodes {
        // Only versions whose facets may have changed need a drift check.
        let track = node.id.kind == NodeKind::DatasetVersion && node.patch.is_some();
        let unchanged = !track
            || cache.holds(
                &(tenant_id, node.id.clone()),
                node.seen_ns,
                node.patch.as_ref(),
            );
        let (row, inserted) = upsert_node_row(
            tx,
            tenant_id,
            &node.id,
            node.seen_ns,
            node.patch.as_ref(),
            cache,
        )?;
        if !unchanged {
            let fresh = node
                .patch
                .as_ref()
                .filter(|_| inserted)
                .map(|p| NewVersion {
                    props: p.text.as_str(),
                    first_seen: node.seen_ns,
                    profile: node.profile.clone(),
                });
            touched_versions.push((row, fresh));
        }
    }
    // New versions and new artifact claims: a run that wrote a version of a dataset an
    // adapter / model version claims as its artifact produced that adapter.
    let mut versions = Vec::new();
    let mut claims = Vec::new();
    for edge in &update.edges {
        let ends = upsert_edge(tx, tenant_id, edge, cache)?;
        match edge.kind {
            EdgeKind::HasVersion => versions.push(ends),
            EdgeKind::ArtifactOf => claims.push(ends),
            _ => {}
        }
    }
    for &(dataset, version) in &versions {
        join_artifact_producers(
            tx,
            tenant_id,
            dataset,
            ArtifactJoin::NewVersion(version),
            cache,
        )?;
    }
    for (dataset, asset) in claims {
        join_artifact_producers(tx, tenant_id, dataset, ArtifactJoin::NewClaim(asset), cache)?;
    }
    for (row, edge, from) in &hold_from {
        set_validity(tx, tenant_id, *row, edge, (Some(*from), None))?;
    }
    for run in &update.runs {
        apply_run_transition(tx, tenant_id, run, cache)?;
    }
    for (row, fresh) in &touched_versions {
        let row = *row;
        // A version this update created (once), with its dataset known from the
        // update's own has_version edge, needs no read of what is stored.
        let known = fresh
            .as_ref()
            .filter(|_| touched_versions.iter().filter(|(r, _)| *r == row).count() == 1)
            .and_then(|new| {
                let (dataset, _) = versions.iter().find(|(_, v)| *v == row)?;
                Some(StoredVersion {
                    props: new.props.into(),
                    first_seen: new.first_seen,
                    dataset: *dataset,
                    fresh: true,
                    profile: new.profile.clone(),
                })
            });
        refresh_drift(tx, row, known, cache)?;
    }
    Ok(Some(outcomes))
}

/// A run event's own run node: one read (is the event applied already? what is
/// stored?) and one write (properties merged, state moved, the event's marker added).
/// A run's applied events are kept on the run itself, not in an index of their own
/// (a random-key index costs a page write per event). False when the event was
/// applied before.
fn apply_run_event(
    tx: &Connection,
    tenant_id: i64,
    run: &PreparedRun,
    cache: &mut GraphCache,
) -> rusqlite::Result<bool> {
    let key = (tenant_id, run.id.clone());
    // A run this writer has not seen is most likely new (its first event): insert it
    // as if nothing were stored, which spares the read; the insert is ignored if the
    // run exists after all, and then it is read and merged.
    let mut stored = if cache.nodes.contains_key(&key) {
        stored_run(tx, tenant_id, run)?
    } else {
        None
    };
    if stored.is_none() {
        if let Some(text) = run_props(None, run) {
            let inserted = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO graph_nodes
                        (tenant_id, kind, key, name, first_seen_ns, last_seen_ns, props)
                     VALUES (?1, 'run', ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    tenant_id,
                    run.id.key,
                    bare_name(&run.id.key),
                    run.first_ns,
                    run.last_ns,
                    text
                ])?;
            if inserted == 1 {
                let row = tx.last_insert_rowid();
                cache.remember_node(key, (row, run.first_ns, run.last_ns, 0));
                return Ok(true);
            }
        }
        stored = stored_run(tx, tenant_id, run)?;
    }
    // Not inserted, so stored: anything else is a storage fault.
    let (row, first, last, props) = stored.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    let Some(text) = run_props(Some(&props), run) else {
        return Ok(false);
    };
    let (first, last) = (first.min(run.first_ns), last.max(run.last_ns));
    tx.prepare_cached(
        "UPDATE graph_nodes SET first_seen_ns = ?2, last_seen_ns = ?3, props = ?4
         WHERE id = ?1",
    )?
    .execute(params![row, first, last, text])?;
    cache.remember_node(key, (row, first, last, 0));
    Ok(true)
}

/// The run's stored row: (id, first seen, last seen, properties).
fn stored_run(
    tx: &Connection,
    tenant_id: i64,
    run: &PreparedRun,
) -> rusqlite::Result<Option<(i64, i64, i64, String)>> {
    tx.prepare_cached(
        "SELECT id, first_seen_ns, last_seen_ns, props FROM graph_nodes
         WHERE tenant_id = ?1 AND kind = 'run' AND key = ?2",
    )?
    .query_row(params![tenant_id, run.id.key], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })
    .optional()
}

/// A run's properties after the event: the stored ones (`None`: a new run) with the
/// event's patch merged, its state moved and its marker added. `None` when the stored
/// properties show the event applied already.
fn run_props(stored: Option<&str>, run: &PreparedRun) -> Option<String> {
    let stored = stored.map(|text| serde_json::from_str(text).unwrap_or_default());
    rules::apply_run_event(stored, &run.marker, &run.patch, &run.transitions)
        .map(|props| json_text(&props))
}

/// What is new between an artifact dataset and the assets claiming it.
enum ArtifactJoin {
    /// A version of the dataset (row) was written.
    NewVersion(i64),
    /// An asset (row) claims the dataset as its artifact.
    NewClaim(i64),
}

/// A run that wrote a version of an artifact dataset produced the adapter / model
/// version registered with that artifact: add run → asset (`produced`), so dataset →
/// run → adapter is one chain whichever of the event and the registration came first.
/// A new version starts from the dataset's claims (a prefix seek, however many
/// versions the dataset has; a dataset the cache knows nobody claims costs nothing); a
/// new claim, which is rare, walks the dataset's versions. `CROSS JOIN` pins that order
/// for the planner.
fn join_artifact_producers(
    tx: &Connection,
    tenant_id: i64,
    dataset: i64,
    join: ArtifactJoin,
    cache: &mut GraphCache,
) -> rusqlite::Result<()> {
    if let ArtifactJoin::NewVersion(_) = join {
        if cache.unclaimed.contains(&dataset) {
            return Ok(());
        }
        let claimed: bool = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM graph_edges WHERE src = ?1 AND kind = 'artifact_of')",
            )?
            .query_row([dataset], |r| r.get(0))?;
        if !claimed {
            if cache.unclaimed.len() >= CACHE_CAP {
                cache.unclaimed.clear();
            }
            cache.unclaimed.insert(dataset);
            return Ok(());
        }
    }
    // One literal per statement (no SQL text built per call on this per-version path).
    macro_rules! insert_produced {
        ($from_where:literal) => {
            concat!(
                "INSERT INTO graph_edges (src, dst, kind, tenant_id, first_seen_ns, last_seen_ns, evidence)
                 SELECT p.src, a.dst, 'produced', ?2, p.first_seen_ns, p.last_seen_ns,
                        json_object('via_artifact_version', v.key) ",
                $from_where,
                " ON CONFLICT (src, kind, dst) DO UPDATE SET
                    first_seen_ns = min(first_seen_ns, excluded.first_seen_ns),
                    last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)"
            )
        };
    }
    // ?3: the new version, or the asset making the new claim.
    let (sql, new_row) = match join {
        ArtifactJoin::NewVersion(version) => (
            insert_produced!(
                "FROM graph_edges a CROSS JOIN graph_edges p CROSS JOIN graph_nodes v
                 WHERE a.src = ?1 AND a.kind = 'artifact_of'
                   AND p.dst = ?3 AND p.kind = 'produced' AND v.id = ?3"
            ),
            version,
        ),
        ArtifactJoin::NewClaim(asset) => (
            insert_produced!(
                "FROM graph_edges a CROSS JOIN graph_edges hv CROSS JOIN graph_edges p
                      CROSS JOIN graph_nodes v
                 WHERE a.src = ?1 AND a.kind = 'artifact_of' AND a.dst = ?3
                   AND hv.src = ?1 AND hv.kind = 'has_version'
                   AND p.dst = hv.dst AND p.kind = 'produced' AND v.id = hv.dst"
            ),
            asset,
        ),
    };
    tx.prepare_cached(sql)?
        .execute(params![dataset, tenant_id, new_row])?;
    Ok(())
}

/// The declared edges stored into the asset `row` (edges of the declared kinds, less
/// `produced` edges joined through an artifact dataset, which the artifact implies).
fn stored_declared(tx: &Connection, row: i64) -> rusqlite::Result<Vec<StoredDeclared>> {
    let mut stmt = tx.prepare_cached(
        "SELECT n.kind, n.key, e.kind, e.superseded_ns IS NOT NULL
         FROM graph_edges e JOIN graph_nodes n ON n.id = e.src
         WHERE e.dst = ?1 AND e.kind IN ('base_of', 'has_version', 'artifact_of', 'produced')
           AND json_extract(e.evidence, '$.via_artifact_version') IS NULL",
    )?;
    let rows = stmt.query_map([row], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, bool>(3)?,
        ))
    })?;
    let mut stored = Vec::new();
    for row in rows {
        let (node_kind, key, kind, superseded) = row?;
        if let (Ok(node_kind), Ok(kind)) = (node_kind.parse(), kind.parse()) {
            stored.push(StoredDeclared {
                src: NodeId::new(node_kind, key),
                kind,
                superseded,
            });
        }
    }
    Ok(stored)
}

/// Sets a declared edge's validity (valid from, superseded at) into the asset `row`.
fn set_validity(
    tx: &Connection,
    tenant_id: i64,
    row: i64,
    edge: &DeclaredEdge,
    (from, until): (Option<i64>, Option<i64>),
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE graph_edges SET valid_from_ns = coalesce(?5, valid_from_ns), superseded_ns = ?6
         WHERE dst = ?1 AND kind = ?2 AND src =
            (SELECT id FROM graph_nodes WHERE tenant_id = ?3 AND kind = ?4 AND key = ?7)",
    )?
    .execute(params![
        row,
        edge.kind.as_str(),
        tenant_id,
        edge.src.kind.as_str(),
        from,
        until,
        edge.src.key,
    ])?;
    Ok(())
}

/// Stores the asset's spec as a new revision unless it equals the latest one. Returns
/// the asset's row and what became of it.
fn register_asset(
    tx: &Connection,
    tenant_id: i64,
    asset: &PreparedAsset,
    cache: &mut GraphCache,
) -> rusqlite::Result<(i64, AssetOutcome)> {
    let row = upsert_node(tx, tenant_id, &asset.id, asset.registered_ns, None, cache)?;
    let latest: Option<(u32, String)> = tx
        .prepare_cached(
            "SELECT revision, spec_sha256 FROM asset_revisions WHERE node_id = ?1
             ORDER BY revision DESC LIMIT 1",
        )?
        .query_row([row], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let outcome = rules::next_revision(
        latest.as_ref().map(|(n, sha)| (*n, sha.as_str())),
        &asset.spec_sha256,
    );
    let revision = match outcome {
        AssetOutcome::Unchanged => return Ok((row, outcome)),
        AssetOutcome::Created => 1,
        AssetOutcome::Revised(n) => n,
    };
    tx.prepare_cached(
        "INSERT INTO asset_revisions (node_id, revision, spec_sha256, spec, registered_ns)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        row,
        revision,
        asset.spec_sha256,
        asset.spec,
        asset.registered_ns
    ])?;
    tx.prepare_cached(
        "UPDATE graph_nodes SET props = json_set(props, '$.spec', json(?2), '$.revision', ?3,
            '$.registered_at_ns', ?4) WHERE id = ?1",
    )?
    .execute(params![row, asset.spec, revision, asset.registered_ns])?;
    Ok((row, outcome))
}

pub(super) fn upsert_node(
    tx: &Connection,
    tenant_id: i64,
    id: &NodeId,
    seen_ns: i64,
    patch: Option<&Patch>,
    cache: &mut GraphCache,
) -> rusqlite::Result<i64> {
    upsert_node_row(tx, tenant_id, id, seen_ns, patch, cache).map(|(row, _)| row)
}

/// The node's row id, and whether this call created it.
fn upsert_node_row(
    tx: &Connection,
    tenant_id: i64,
    id: &NodeId,
    seen_ns: i64,
    patch: Option<&Patch>,
    cache: &mut GraphCache,
) -> rusqlite::Result<(i64, bool)> {
    // How a stored row absorbs an upsert, for the row found by id or by key.
    macro_rules! merge_node {
        ($where:literal, $returning:literal) => {
            concat!(
                "UPDATE graph_nodes SET
                    first_seen_ns = min(first_seen_ns, :seen),
                    last_seen_ns = max(last_seen_ns, :seen),
                    props = CASE WHEN :patch IS NULL THEN props ELSE json_patch(props, :patch) END
                 WHERE ",
                $where,
                " RETURNING ",
                $returning
            )
        };
    }
    let cache_key = (tenant_id, id.clone());
    if let Some(&(row, _, _, last_patch)) = cache.nodes.get(&cache_key) {
        if cache.holds(&cache_key, seen_ns, patch) {
            return Ok((row, false));
        }
        // A row this writer knows: widen its seen-interval by row id, and merge the
        // patch only if it is not the one applied last (merging it again would change
        // nothing, and costs a parse and a rewrite of the properties).
        let patch = patch.filter(|p| p.digest != last_patch);
        let (first, last): (i64, i64) = tx
            .prepare_cached(merge_node!("id = :row", "first_seen_ns, last_seen_ns"))?
            .query_row(
                named_params! {
                    ":row": row,
                    ":seen": seen_ns,
                    ":patch": patch.map(|p| p.text.as_str()),
                },
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
        let digest = patch.map_or(last_patch, |p| p.digest);
        cache.remember_node(cache_key, (row, first, last, digest));
        return Ok((row, false));
    }
    // Patches are serde_json's output, so a new row takes the text as it is (no json()
    // parse); a merge into an existing row parses both sides anyway. The insert has no
    // RETURNING: SQLite buffers its rows in an ephemeral table per execution, which cost
    // more than the insert; a new row's id and times are known. Only the (rarer) merge
    // into an existing row returns what is stored.
    let patch_text = patch.map(|p| p.text.as_str());
    let inserted = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO graph_nodes
                (tenant_id, kind, key, name, first_seen_ns, last_seen_ns, props)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, coalesce(?6, '{}'))",
        )?
        .execute(params![
            tenant_id,
            id.kind.as_str(),
            id.key,
            bare_name(&id.key),
            seen_ns,
            patch_text,
        ])?;
    let (row, first, last) = if inserted == 1 {
        (tx.last_insert_rowid(), seen_ns, seen_ns)
    } else {
        tx.prepare_cached(merge_node!(
            "tenant_id = :tenant AND kind = :kind AND key = :key",
            "id, first_seen_ns, last_seen_ns"
        ))?
        .query_row(
            named_params! {
                ":tenant": tenant_id,
                ":kind": id.kind.as_str(),
                ":key": id.key,
                ":seen": seen_ns,
                ":patch": patch_text,
            },
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
    };
    cache.remember_node(cache_key, (row, first, last, patch.map_or(0, |p| p.digest)));
    Ok((row, inserted == 1))
}

/// The row id of an edge end, creating nodes as needed.
fn resolve_end(
    tx: &Connection,
    tenant_id: i64,
    end: &EdgeEnd,
    seen_ns: i64,
    cache: &mut GraphCache,
) -> rusqlite::Result<i64> {
    match end {
        EdgeEnd::Node(id) => upsert_node(tx, tenant_id, id, seen_ns, None, cache),
        EdgeEnd::CurrentVersionOf(dataset) => {
            let dataset_row = upsert_node(tx, tenant_id, dataset, seen_ns, None, cache)?;
            let newest = match cache.current_version.get(&dataset_row) {
                Some(&(row, _)) => Some(row),
                None => tx
                    .prepare_cached(
                        "SELECT dst, first_seen_ns FROM graph_edges
                         WHERE src = ?1 AND kind = 'has_version'
                         ORDER BY first_seen_ns DESC, dst DESC LIMIT 1",
                    )?
                    .query_row([dataset_row], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?
                    .map(|(row, first): (i64, i64)| {
                        cache.current_version.insert(dataset_row, (row, first));
                        row
                    }),
            };
            if let Some(row) = newest {
                return Ok(row);
            }
            // Read before any version was reported: an "unversioned" version stands in.
            let version = NodeId::dataset_version(dataset, "unversioned");
            let version_row = upsert_node(tx, tenant_id, &version, seen_ns, None, cache)?;
            insert_edge_rows(
                tx,
                tenant_id,
                (dataset_row, version_row, EdgeKind::HasVersion),
                (seen_ns, None),
                None,
                cache,
            )?;
            Ok(version_row)
        }
    }
}

/// Returns the (src, dst) row ids.
fn upsert_edge(
    tx: &Connection,
    tenant_id: i64,
    edge: &PreparedEdge,
    cache: &mut GraphCache,
) -> rusqlite::Result<(i64, i64)> {
    let src = resolve_end(tx, tenant_id, &edge.src, edge.seen_ns, cache)?;
    let dst = resolve_end(tx, tenant_id, &edge.dst, edge.seen_ns, cache)?;
    if edge.kind == EdgeKind::ArtifactOf {
        cache.unclaimed.remove(&src);
    }
    insert_edge_rows(
        tx,
        tenant_id,
        (src, dst, edge.kind),
        (edge.seen_ns, edge.declared),
        edge.patch.as_ref(),
        cache,
    )?;
    Ok((src, dst))
}

/// Upserts an edge seen at `seen_ns`; a declared one (registry) also gets its
/// validity (a re-declaration keeps a revision's `valid_from` unless it names one).
fn insert_edge_rows(
    tx: &Connection,
    tenant_id: i64,
    key: (i64, i64, EdgeKind),
    (seen_ns, declared): (i64, Option<DeclaredValidity>),
    patch: Option<&Patch>,
    cache: &mut GraphCache,
) -> rusqlite::Result<()> {
    if let Some(&(first, last, last_patch)) = cache.edges.get(&key) {
        let covered = seen_ns >= first && seen_ns <= last + LAST_SEEN_SLACK_NS;
        if covered && patch.is_none_or(|p| p.digest == last_patch) && declared.is_none() {
            return Ok(());
        }
    }
    // As for nodes: RETURNING (an ephemeral table per execution) only on a merge.
    let patch_text = patch.map(|p| p.text.as_str());
    let (valid_from, until) = declared.map_or((None, None), |d| (d.from_ns, d.until_ns));
    let inserted = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO graph_edges
                (src, kind, dst, tenant_id, first_seen_ns, last_seen_ns, evidence,
                 declared, valid_from_ns, superseded_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, coalesce(?6, '{}'), ?7, ?8, ?9)",
        )?
        .execute(params![
            key.0,
            key.2.as_str(),
            key.1,
            tenant_id,
            seen_ns,
            patch_text,
            declared.is_some(),
            valid_from,
            until,
        ])?;
    let (first, last): (i64, i64) = if inserted == 1 {
        (seen_ns, seen_ns)
    } else {
        tx.prepare_cached(
            "UPDATE graph_edges SET
                first_seen_ns = min(first_seen_ns, ?4),
                last_seen_ns = max(last_seen_ns, ?4),
                evidence = CASE WHEN ?5 IS NULL THEN evidence ELSE json_patch(evidence, ?5) END,
                declared = max(declared, ?6),
                valid_from_ns = CASE WHEN ?6 THEN coalesce(?7, valid_from_ns) ELSE valid_from_ns END,
                superseded_ns = CASE WHEN ?6 THEN ?8 ELSE superseded_ns END
             WHERE src = ?1 AND kind = ?2 AND dst = ?3
             RETURNING first_seen_ns, last_seen_ns",
        )?
        .query_row(
            params![
                key.0,
                key.2.as_str(),
                key.1,
                seen_ns,
                patch_text,
                declared.is_some(),
                valid_from,
                until
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
    };
    if key.2 == EdgeKind::HasVersion {
        // A newer version becomes what unversioned reads resolve to.
        let newer = cache
            .current_version
            .get(&key.0)
            .is_none_or(|&(_, seen)| first >= seen);
        if newer {
            cache.current_version.insert(key.0, (key.1, first));
        }
    }
    if cache.edges.len() >= CACHE_CAP {
        cache.edges.clear();
        cache.current_version.clear();
    }
    cache
        .edges
        .insert(key, (first, last, patch.map_or(0, |p| p.digest)));
    Ok(())
}
