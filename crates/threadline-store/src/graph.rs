//! The lineage graph in SQLite: applying graph updates inside the writer's
//! transaction (upserts that widen seen-intervals and merge JSON properties), and
//! reading nodes and walking edges for queries.

use std::collections::{HashMap, HashSet, VecDeque};

use rusqlite::{named_params, params, params_from_iter, Connection, OptionalExtension};
use sha2::Digest;
use threadline_model::{
    AssetOutcome, Direction, EdgeEnd, EdgeKind, GraphUpdate, LineageEdge, LineageEventKey,
    LineageGraph, LineageNode, NodeId, NodeKind, RunTransition, TenantId,
};

use crate::{sqlite_err, StoreError};

/// Seen-intervals the writer already stored, so a binding seen again within this many
/// nanoseconds of its stored last-seen costs no write (span ingest re-reveals the same
/// edges on every request).
const LAST_SEEN_SLACK_NS: i64 = 1_000_000_000;

/// Entries the writer's graph cache holds before it starts over: enough for every
/// binding a platform's traffic keeps re-revealing, bounded for graphs of millions of
/// OpenLineage nodes.
const CACHE_CAP: usize = 200_000;

/// What the writer remembers about graph rows between commits.
#[derive(Default)]
pub(crate) struct GraphCache {
    /// (tenant row id, node) → (row id, first seen, last seen, digest of the last
    /// properties patch applied).
    nodes: foldhash::HashMap<(i64, NodeId), (i64, i64, i64, u64)>,
    /// (src, dst, kind) → (first seen, last seen, digest of the last evidence patch).
    edges: foldhash::HashMap<(i64, i64, EdgeKind), (i64, i64, u64)>,
    /// dataset row → (newest version row, its first seen): inputs without a version
    /// facet read the newest version.
    current_version: foldhash::HashMap<i64, (i64, i64)>,
    /// version row → its drift profile as last stored, so a new version's drift is
    /// computed without reading and parsing the previous version's properties.
    profiles: foldhash::HashMap<i64, std::sync::Arc<threadline_analysis::DriftProfile>>,
    /// Dataset rows no asset claims as its artifact (no `artifact_of` edge from them):
    /// their new versions join nothing. An `artifact_of` upsert takes its dataset out.
    unclaimed: foldhash::HashSet<i64>,
    /// What counts as drift (a setting, kept across resets).
    pub(crate) drift: threadline_analysis::DriftConfig,
}

impl GraphCache {
    /// Whether upserting `id` at `seen_ns` with `patch` would change nothing: seen
    /// within the stored interval (with slack) and the patch is the one applied last
    /// (merging it once more changes nothing).
    fn holds(&self, key: &(i64, NodeId), seen_ns: i64, patch: Option<&Patch>) -> bool {
        self.nodes
            .get(key)
            .is_some_and(|&(_, first, last, last_patch)| {
                seen_ns >= first
                    && seen_ns <= last + LAST_SEEN_SLACK_NS
                    && patch.is_none_or(|p| p.digest == last_patch)
            })
    }

    fn remember_node(&mut self, key: (i64, NodeId), stored: (i64, i64, i64, u64)) {
        if self.nodes.len() >= CACHE_CAP {
            self.nodes.clear();
        }
        self.nodes.insert(key, stored);
    }

    fn remember_profile(
        &mut self,
        version: i64,
        profile: &std::sync::Arc<threadline_analysis::DriftProfile>,
    ) {
        if self.profiles.len() >= CACHE_CAP {
            self.profiles.clear();
        }
        self.profiles
            .insert(version, std::sync::Arc::clone(profile));
    }
}

/// A JSON value's text. `serde_json::to_string` writes straight into a buffer; the
/// `Display` impl (`value.to_string()`) goes through `fmt::Write` per token, which took
/// about a third more instructions on the patches of an OpenLineage event.
fn json_text(value: &serde_json::Value) -> String {
    // Serializing a `Value` cannot fail (its map keys are strings).
    serde_json::to_string(value).unwrap_or_default()
}

/// A JSON properties / evidence patch, serialized by the submitting thread, with a
/// digest so the writer can tell it applied the very same patch last time.
pub(crate) struct Patch {
    text: String,
    digest: u64,
}

impl Patch {
    /// `None` for an empty object or a non-object (nothing to merge).
    fn new(value: &serde_json::Value) -> Option<Self> {
        use std::hash::BuildHasher;
        // Seeded once per process: senders cannot aim two patches at one digest
        // (equal digests make the writer skip the second patch).
        static DIGEST: std::sync::OnceLock<foldhash::quality::RandomState> =
            std::sync::OnceLock::new();
        let obj = value.as_object()?;
        if obj.is_empty() {
            return None;
        }
        let text = json_text(value);
        Some(Self {
            digest: DIGEST
                .get_or_init(Default::default)
                .hash_one(text.as_bytes()),
            text,
        })
    }
}

struct PreparedNode {
    id: NodeId,
    seen_ns: i64,
    patch: Option<Patch>,
    /// A dataset version's drift profile of its patch (its properties, when the
    /// upsert creates it), computed off the writer thread.
    profile: Option<std::sync::Arc<threadline_analysis::DriftProfile>>,
}

struct PreparedEdge {
    src: EdgeEnd,
    dst: EdgeEnd,
    kind: EdgeKind,
    seen_ns: i64,
    patch: Option<Patch>,
}

struct PreparedAsset {
    id: NodeId,
    spec: String,
    spec_sha256: String,
    registered_ns: i64,
}

/// The run a run event is about, prepared so the writer reads its node once and
/// writes it once: the event's marker (for idempotency), its upserts' properties
/// merged into one patch, and its state transitions.
struct PreparedRun {
    id: NodeId,
    /// "TYPE|TIME", kept in the node's `applied_events`.
    marker: String,
    first_ns: i64,
    last_ns: i64,
    patch: serde_json::Value,
    transitions: Vec<RunTransition>,
}

impl PreparedRun {
    /// Takes the event's run node (and its transitions) out of `update`; `None` when
    /// the update is not about a run or does not upsert it.
    fn take(update: &mut GraphUpdate) -> Option<Self> {
        let key = update.event.as_ref()?;
        let run_id = key.subject.strip_prefix("run:")?;
        let id = NodeId::new(NodeKind::Run, run_id);
        if !update.nodes.iter().any(|n| n.id == id) {
            return None;
        }
        let mut run = Self {
            marker: format!("{}|{}", key.event_type, key.event_time),
            id,
            first_ns: i64::MAX,
            last_ns: i64::MIN,
            patch: serde_json::Value::Object(serde_json::Map::new()),
            transitions: Vec::new(),
        };
        let seen = |t: i64, run: &mut Self| {
            run.first_ns = run.first_ns.min(t);
            run.last_ns = run.last_ns.max(t);
        };
        for node in std::mem::take(&mut update.nodes) {
            if node.id == run.id {
                seen(node.seen_ns, &mut run);
                merge_patch(&mut run.patch, &node.props);
            } else {
                update.nodes.push(node);
            }
        }
        for transition in std::mem::take(&mut update.runs) {
            if transition.run == run.id {
                seen(transition.event_time_ns, &mut run);
                run.transitions.push(transition);
            } else {
                update.runs.push(transition);
            }
        }
        Some(run)
    }
}

/// RFC 7396 JSON merge patch, as SQLite's `json_patch` applies it to stored properties.
fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let serde_json::Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = serde_json::Value::Object(serde_json::Map::new());
    }
    let serde_json::Value::Object(map) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(
                map.entry(key.clone()).or_insert(serde_json::Value::Null),
                value,
            );
        }
    }
}

/// A `GraphUpdate` with its JSON serialized and digested off the writer thread.
pub struct PreparedGraph {
    assets: Vec<PreparedAsset>,
    nodes: Vec<PreparedNode>,
    edges: Vec<PreparedEdge>,
    runs: Vec<RunTransition>,
    run: Option<PreparedRun>,
    event: Option<LineageEventKey>,
}

impl PreparedGraph {
    pub(crate) fn new(mut update: GraphUpdate) -> Self {
        let run = PreparedRun::take(&mut update);
        Self {
            run,
            assets: update
                .assets
                .into_iter()
                .map(|a| {
                    // serde_json maps are sorted by key, so equal specs serialize equally.
                    let spec = json_text(&a.spec);
                    PreparedAsset {
                        id: a.id,
                        spec_sha256: hex::encode(sha2::Sha256::digest(spec.as_bytes())),
                        spec,
                        registered_ns: a.registered_ns,
                    }
                })
                .collect(),
            nodes: update
                .nodes
                .into_iter()
                .map(|n| PreparedNode {
                    patch: Patch::new(&n.props),
                    profile: (n.id.kind == NodeKind::DatasetVersion).then(|| {
                        std::sync::Arc::new(threadline_analysis::DriftProfile::of(&n.props))
                    }),
                    id: n.id,
                    seen_ns: n.seen_ns,
                })
                .collect(),
            edges: update
                .edges
                .into_iter()
                .map(|e| PreparedEdge {
                    patch: Patch::new(&e.evidence),
                    src: e.src,
                    dst: e.dst,
                    kind: e.kind,
                    seen_ns: e.seen_ns,
                })
                .collect(),
            runs: update.runs,
            event: update.event,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.assets.is_empty()
            && self.nodes.is_empty()
            && self.edges.is_empty()
            && self.run.is_none()
    }

    /// Rows it may write, for the writer's group-size bound.
    pub(crate) fn size(&self) -> usize {
        1 + self.assets.len()
            + self.nodes.len()
            + self.edges.len()
            + usize::from(self.run.is_some())
    }

    /// Bytes it holds, for the write queue's byte bound.
    pub(crate) fn bytes(&self) -> usize {
        let patch = |p: &Option<Patch>| p.as_ref().map_or(0, |p| p.text.len());
        128 * self.size()
            + self.nodes.iter().map(|n| patch(&n.patch)).sum::<usize>()
            + self.edges.iter().map(|e| patch(&e.patch)).sum::<usize>()
            + self.assets.iter().map(|a| a.spec.len()).sum::<usize>()
            + self.run.as_ref().map_or(0, |r| 4 * r.marker.len())
    }
}

/// The bare name a node answers to: the key's last `:`-segment.
fn bare_name(key: &str) -> &str {
    key.rsplit(':').next().unwrap_or(key)
}

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
    for asset in &update.assets {
        outcomes.push((
            asset.id.clone(),
            register_asset(tx, tenant_id, asset, cache)?,
        ));
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
    let mut props = match stored {
        Some(text) => serde_json::from_str(text).unwrap_or_default(),
        None => serde_json::Value::Object(serde_json::Map::new()),
    };
    let applied = props["applied_events"]
        .as_array()
        .is_some_and(|events| events.iter().any(|e| e.as_str() == Some(&run.marker)));
    if applied {
        return None;
    }
    merge_patch(&mut props, &run.patch);
    if let serde_json::Value::Object(map) = &mut props {
        for transition in &run.transitions {
            move_run_state(map, transition);
        }
        let events = map
            .entry("applied_events")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if !events.is_array() {
            *events = serde_json::Value::Array(Vec::new());
        }
        if let serde_json::Value::Array(list) = events {
            list.push(run.marker.clone().into());
        }
    }
    Some(json_text(&props))
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

/// Stores the asset's spec as a new revision unless it equals the latest one.
fn register_asset(
    tx: &Connection,
    tenant_id: i64,
    asset: &PreparedAsset,
    cache: &mut GraphCache,
) -> rusqlite::Result<AssetOutcome> {
    let row = upsert_node(tx, tenant_id, &asset.id, asset.registered_ns, None, cache)?;
    let latest: Option<(u32, String)> = tx
        .prepare_cached(
            "SELECT revision, spec_sha256 FROM asset_revisions WHERE node_id = ?1
             ORDER BY revision DESC LIMIT 1",
        )?
        .query_row([row], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let revision = match &latest {
        Some((_, latest_sha)) if *latest_sha == asset.spec_sha256 => {
            return Ok(AssetOutcome::Unchanged)
        }
        Some((n, _)) => n + 1,
        None => 1,
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
    Ok(if revision == 1 {
        AssetOutcome::Created
    } else {
        AssetOutcome::Revised(revision)
    })
}

fn upsert_node(
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
                seen_ns,
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
        edge.seen_ns,
        edge.patch.as_ref(),
        cache,
    )?;
    Ok((src, dst))
}

fn insert_edge_rows(
    tx: &Connection,
    tenant_id: i64,
    key: (i64, i64, EdgeKind),
    seen_ns: i64,
    patch: Option<&Patch>,
    cache: &mut GraphCache,
) -> rusqlite::Result<()> {
    if let Some(&(first, last, last_patch)) = cache.edges.get(&key) {
        let covered = seen_ns >= first && seen_ns <= last + LAST_SEEN_SLACK_NS;
        if covered && patch.is_none_or(|p| p.digest == last_patch) {
            return Ok(());
        }
    }
    // As for nodes: RETURNING (an ephemeral table per execution) only on a merge.
    let patch_text = patch.map(|p| p.text.as_str());
    let inserted = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO graph_edges
                (src, kind, dst, tenant_id, first_seen_ns, last_seen_ns, evidence)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, coalesce(?6, '{}'))",
        )?
        .execute(params![
            key.0,
            key.2.as_str(),
            key.1,
            tenant_id,
            seen_ns,
            patch_text
        ])?;
    let (first, last): (i64, i64) = if inserted == 1 {
        (seen_ns, seen_ns)
    } else {
        tx.prepare_cached(
            "UPDATE graph_edges SET
                first_seen_ns = min(first_seen_ns, ?4),
                last_seen_ns = max(last_seen_ns, ?4),
                evidence = CASE WHEN ?5 IS NULL THEN evidence ELSE json_patch(evidence, ?5) END
             WHERE src = ?1 AND kind = ?2 AND dst = ?3
             RETURNING first_seen_ns, last_seen_ns",
        )?
        .query_row(
            params![key.0, key.2.as_str(), key.1, seen_ns, patch_text],
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

/// A dataset version an update created.
struct NewVersion<'a> {
    props: &'a str,
    first_seen: i64,
    profile: Option<std::sync::Arc<threadline_analysis::DriftProfile>>,
}

/// What refresh_drift needs of a version.
struct StoredVersion<'a> {
    props: std::borrow::Cow<'a, str>,
    first_seen: i64,
    dataset: i64,
    /// Created by this update: its properties hold no drift yet.
    fresh: bool,
    /// Its drift profile, when the caller has it.
    profile: Option<std::sync::Arc<threadline_analysis::DriftProfile>>,
}

/// Recomputes the drift of a dataset version against the version before it (by first
/// seen) and keeps it as the version's `drift` property. `known` saves reading the
/// version back when the caller has it.
fn refresh_drift(
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
    match threadline_analysis::drift_between(&previous_profile, &profile, &cache.drift) {
        Some(mut drift) => {
            let previous_key: String = tx
                .prepare_cached("SELECT key FROM graph_nodes WHERE id = ?1")?
                .query_row([previous], |r| r.get(0))?;
            drift["previous_version"] =
                serde_json::json!(format!("dataset_version:{previous_key}"));
            tx.prepare_cached(
                "UPDATE graph_nodes SET props = json_set(props, '$.drift', json(?2)) WHERE id = ?1",
            )?
            .execute(params![row, json_text(&drift)])?;
        }
        // A new version holds no drift yet: nothing to remove.
        None if current.fresh => {}
        None => {
            tx.prepare_cached("UPDATE graph_nodes SET props = json_remove(props, '$.drift') WHERE id = ?1 AND json_type(props, '$.drift') IS NOT NULL")?
                .execute([row])?;
        }
    }
    Ok(())
}

/// A state move of a run other than the event's own (read, move, write).
fn apply_run_transition(
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
    move_run_state(&mut props, run);
    tx.prepare_cached("UPDATE graph_nodes SET props = ?2 WHERE id = ?1")?
        .execute(params![row, json_text(&serde_json::Value::Object(props))])?;
    Ok(())
}

/// Keeps the state of the latest event time (a terminal state wins a tie), the
/// earliest START as `started_at_ns` and the latest terminal time as `ended_at_ns`.
fn move_run_state(props: &mut serde_json::Map<String, serde_json::Value>, run: &RunTransition) {
    let get = |m: &serde_json::Map<String, serde_json::Value>, k: &str| -> Option<i64> {
        m.get(k).and_then(|v| v.as_i64())
    };
    let t = run.event_time_ns;
    let state_time = get(props, "state_time_ns");
    let current_terminal = props
        .get("state")
        .and_then(|s| s.as_str())
        .and_then(threadline_model::RunState::parse)
        .is_some_and(|s| s.is_terminal());
    let newer = match state_time {
        None => true,
        Some(st) => t > st || (t == st && (run.state.is_terminal() || !current_terminal)),
    };
    if newer {
        props.insert("state".into(), run.state.as_str().into());
        props.insert("state_time_ns".into(), t.into());
    }
    if run.state == threadline_model::RunState::Start
        && get(props, "started_at_ns").is_none_or(|s| t < s)
    {
        props.insert("started_at_ns".into(), t.into());
    }
    if run.state.is_terminal() && get(props, "ended_at_ns").is_none_or(|e| t > e) {
        props.insert("ended_at_ns".into(), t.into());
    }
}

// ---------------------------------------------------------------------------------
// Reads

fn parse_node_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, LineageNode)> {
    let kind: String = r.get(1)?;
    let props: String = r.get(5)?;
    Ok((
        r.get(0)?,
        LineageNode {
            id: NodeId::new(
                kind.parse().unwrap_or(NodeKind::Dataset),
                r.get::<_, String>(2)?,
            ),
            first_seen_ns: r.get(3)?,
            last_seen_ns: r.get(4)?,
            props: serde_json::from_str(&props).unwrap_or(serde_json::Value::Null),
        },
    ))
}

const NODE_COLUMNS: &str = "id, kind, key, first_seen_ns, last_seen_ns, props";

/// The node ids `name` may mean: itself when it parses as an existing `kind:key`,
/// else every node whose key or bare name is `name`.
pub(crate) fn resolve(
    conn: &Connection,
    tenant: &TenantId,
    name: &str,
) -> Result<Vec<NodeId>, StoreError> {
    let Some(tenant_id) = crate::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    if let Ok(id) = name.parse::<NodeId>() {
        if node_row(conn, tenant_id, &id)?.is_some() {
            return Ok(vec![id]);
        }
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT kind, key FROM graph_nodes WHERE tenant_id = ?1 AND name = ?2
                AND kind NOT IN ('run', 'dataset_version') LIMIT 50",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map(params![tenant_id, name], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sqlite_err(conn, e))?;
    let mut ids: Vec<NodeId> = rows
        .into_iter()
        .filter_map(|(kind, key)| Some(NodeId::new(kind.parse().ok()?, key)))
        .collect();
    // A whole key of any kind (a run id, `warehouse:fin-qa@v3`, `/v1/chat`).
    for kind in NodeKind::ALL {
        let id = NodeId::new(kind, name);
        if node_row(conn, tenant_id, &id)?.is_some() {
            ids.push(id);
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

fn node_row(
    conn: &Connection,
    tenant_id: i64,
    id: &NodeId,
) -> Result<Option<(i64, LineageNode)>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE tenant_id = ?1 AND kind = ?2 AND key = ?3"
    ))
    .and_then(|mut s| {
        s.query_row(params![tenant_id, id.kind.as_str(), id.key], parse_node_row)
            .optional()
    })
    .map_err(|e| sqlite_err(conn, e))
}

pub(crate) fn get_node(
    conn: &Connection,
    tenant: &TenantId,
    id: &NodeId,
) -> Result<Option<LineageNode>, StoreError> {
    let Some(tenant_id) = crate::query::tenant_key(conn, tenant)? else {
        return Ok(None);
    };
    Ok(node_row(conn, tenant_id, id)?.map(|(_, n)| n))
}

/// Nodes of one kind, newest first.
pub(crate) fn nodes_of_kind(
    conn: &Connection,
    tenant: &TenantId,
    kind: NodeKind,
    limit: usize,
) -> Result<Vec<LineageNode>, StoreError> {
    let Some(tenant_id) = crate::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE tenant_id = ?1 AND kind = ?2
             ORDER BY last_seen_ns DESC LIMIT ?3"
        ))
        .map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(
        params![tenant_id, kind.as_str(), limit as i64],
        parse_node_row,
    )
    .and_then(|rows| rows.map(|r| r.map(|(_, n)| n)).collect())
    .map_err(|e| sqlite_err(conn, e))
}

/// What a walk may visit.
#[derive(Clone, Debug)]
pub struct WalkLimits {
    pub direction: Direction,
    /// Hops from the start node.
    pub depth: usize,
    /// Stop expanding once this many nodes were reached.
    pub max_nodes: usize,
    /// Follow only these edge kinds (all when empty).
    pub edge_kinds: Vec<EdgeKind>,
}

/// Breadth-first walk from `start`, one batched query per hop and direction.
pub(crate) fn walk(
    conn: &Connection,
    tenant: &TenantId,
    start: &NodeId,
    limits: &WalkLimits,
) -> Result<Option<LineageGraph>, StoreError> {
    let Some(tenant_id) = crate::query::tenant_key(conn, tenant)? else {
        return Ok(None);
    };
    let Some((start_row, start_node)) = node_row(conn, tenant_id, start)? else {
        return Ok(None);
    };
    let mut seen: HashSet<i64> = HashSet::from([start_row]);
    let mut order: Vec<i64> = vec![start_row];
    let mut nodes: HashMap<i64, LineageNode> = HashMap::from([(start_row, start_node)]);
    let mut edges: Vec<(i64, i64, LineageEdge)> = Vec::new();
    let mut edge_seen: HashSet<(i64, i64, EdgeKind)> = HashSet::new();
    let directions: &[bool] = match limits.direction {
        Direction::Downstream => &[true],
        Direction::Upstream => &[false],
        Direction::Both => &[true, false],
    };
    for &downstream in directions {
        let mut frontier: VecDeque<i64> = VecDeque::from([start_row]);
        for _ in 0..limits.depth {
            if frontier.is_empty() || seen.len() >= limits.max_nodes {
                break;
            }
            let batch: Vec<i64> = frontier.drain(..).collect();
            for chunk in batch.chunks(500) {
                for (src, dst, edge) in edges_touching(conn, chunk, downstream)? {
                    if !limits.edge_kinds.is_empty() && !limits.edge_kinds.contains(&edge.kind) {
                        continue;
                    }
                    let next = if downstream { dst } else { src };
                    if edge_seen.insert((src, dst, edge.kind)) {
                        edges.push((src, dst, edge));
                    }
                    if seen.len() < limits.max_nodes && seen.insert(next) {
                        order.push(next);
                        frontier.push_back(next);
                    }
                }
            }
        }
    }
    let missing: Vec<i64> = order
        .iter()
        .copied()
        .filter(|r| !nodes.contains_key(r))
        .collect();
    for chunk in missing.chunks(500) {
        for (row, node) in nodes_by_row(conn, chunk)? {
            nodes.insert(row, node);
        }
    }
    // Edges to nodes past the node budget are dropped with them.
    let node_ids: HashMap<i64, NodeId> = nodes.iter().map(|(r, n)| (*r, n.id.clone())).collect();
    let edges = edges
        .into_iter()
        .filter_map(|(src, dst, mut e)| {
            e.src = node_ids.get(&src)?.clone();
            e.dst = node_ids.get(&dst)?.clone();
            Some(e)
        })
        .collect();
    let nodes = order.iter().filter_map(|r| nodes.remove(r)).collect();
    Ok(Some(LineageGraph { nodes, edges }))
}

/// Edges leaving (downstream) or entering (upstream) the given nodes; the returned
/// `LineageEdge`s carry placeholder ids, resolved by the caller from the row ids.
fn edges_touching(
    conn: &Connection,
    rows: &[i64],
    downstream: bool,
) -> Result<Vec<(i64, i64, LineageEdge)>, StoreError> {
    let column = if downstream { "src" } else { "dst" };
    let sql = format!(
        "SELECT src, dst, kind, first_seen_ns, last_seen_ns, evidence FROM graph_edges
         WHERE {column} IN ({})",
        crate::placeholders(rows.len())
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| sqlite_err(conn, e))?;
    let placeholder = NodeId::new(NodeKind::Dataset, "");
    stmt.query_map(params_from_iter(rows), |r| {
        let kind: String = r.get(2)?;
        let evidence: String = r.get(5)?;
        Ok((
            r.get(0)?,
            r.get(1)?,
            LineageEdge {
                src: placeholder.clone(),
                dst: placeholder.clone(),
                kind: kind.parse().unwrap_or(EdgeKind::Produced),
                first_seen_ns: r.get(3)?,
                last_seen_ns: r.get(4)?,
                evidence: serde_json::from_str(&evidence).unwrap_or(serde_json::Value::Null),
            },
        ))
    })
    .and_then(|rows| rows.collect())
    .map_err(|e| sqlite_err(conn, e))
}

fn nodes_by_row(conn: &Connection, rows: &[i64]) -> Result<Vec<(i64, LineageNode)>, StoreError> {
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE id IN ({})",
        crate::placeholders(rows.len())
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(params_from_iter(rows), parse_node_row)
        .and_then(|rows| rows.collect())
        .map_err(|e| sqlite_err(conn, e))
}

/// Every node and edge of the tenant, up to `max_nodes` nodes (None when the tenant has
/// more: the caller should ask for a subgraph).
pub(crate) fn dump(
    conn: &Connection,
    tenant: &TenantId,
    max_nodes: usize,
) -> Result<Option<LineageGraph>, StoreError> {
    let Some(tenant_id) = crate::query::tenant_key(conn, tenant)? else {
        return Ok(Some(LineageGraph::default()));
    };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {NODE_COLUMNS} FROM graph_nodes WHERE tenant_id = ?1 ORDER BY id LIMIT ?2"
        ))
        .map_err(|e| sqlite_err(conn, e))?;
    let rows: Vec<(i64, LineageNode)> = stmt
        .query_map(params![tenant_id, max_nodes as i64 + 1], parse_node_row)
        .and_then(|r| r.collect())
        .map_err(|e| sqlite_err(conn, e))?;
    if rows.len() > max_nodes {
        return Ok(None);
    }
    let ids: HashMap<i64, NodeId> = rows.iter().map(|(r, n)| (*r, n.id.clone())).collect();
    let mut stmt = conn
        .prepare(
            "SELECT src, dst, kind, first_seen_ns, last_seen_ns, evidence FROM graph_edges
             WHERE tenant_id = ?1",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let edges = stmt
        .query_map([tenant_id], |r| {
            let kind: String = r.get(2)?;
            let evidence: String = r.get(5)?;
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                kind,
                r.get(3)?,
                r.get(4)?,
                evidence,
            ))
        })
        .and_then(|r| r.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sqlite_err(conn, e))?
        .into_iter()
        .filter_map(|(src, dst, kind, first, last, evidence)| {
            Some(LineageEdge {
                src: ids.get(&src)?.clone(),
                dst: ids.get(&dst)?.clone(),
                kind: kind.parse().ok()?,
                first_seen_ns: first,
                last_seen_ns: last,
                evidence: serde_json::from_str(&evidence).unwrap_or(serde_json::Value::Null),
            })
        })
        .collect();
    Ok(Some(LineageGraph {
        nodes: rows.into_iter().map(|(_, n)| n).collect(),
        edges,
    }))
}

/// Runs whose OpenLineage events named `trace_id` (lowercase hex), newest first.
pub(crate) fn runs_for_trace(
    conn: &Connection,
    tenant: &TenantId,
    trace_id: &str,
) -> Result<Vec<NodeId>, StoreError> {
    let Some(tenant_id) = crate::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT key FROM graph_nodes
             WHERE tenant_id = ?1 AND kind = 'run' AND json_extract(props, '$.trace_id') = ?2
             ORDER BY last_seen_ns DESC LIMIT 100",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    stmt.query_map(params![tenant_id, trace_id], |r| r.get::<_, String>(0))
        .and_then(|rows| {
            rows.map(|k| k.map(|k| NodeId::new(NodeKind::Run, k)))
                .collect()
        })
        .map_err(|e| sqlite_err(conn, e))
}

/// Per image, adapter / model and route: how many instances were bound to it (the
/// binding edge seen) within `window_ns` of the tenant's newest binding, on span time.
pub(crate) fn bound_instances(
    conn: &Connection,
    tenant_id: i64,
    window_ns: i64,
) -> Result<Vec<(String, String, u64)>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "WITH inst AS (SELECT id FROM graph_nodes WHERE tenant_id = ?1 AND kind = 'instance'),
             b AS (
                SELECT e.src AS other, e.dst AS inst, e.last_seen_ns AS seen
                FROM inst JOIN graph_edges e ON e.dst = inst.id
                WHERE e.kind IN ('served_by', 'runs_on')
                UNION ALL
                SELECT e.dst, e.src, e.last_seen_ns
                FROM inst JOIN graph_edges e ON e.src = inst.id AND e.kind = 'answers'
             )
             SELECT n.kind, n.key, count(DISTINCT b.inst) FROM b JOIN graph_nodes n ON n.id = b.other
             WHERE b.seen >= (SELECT max(seen) FROM b) - ?2
             GROUP BY n.kind, n.key ORDER BY n.kind, n.key",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map(params![tenant_id, window_ns], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
        })
        .map_err(|e| sqlite_err(conn, e))?;
    rows.collect::<Result<_, _>>()
        .map_err(|e| sqlite_err(conn, e))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge_patch;

    #[test]
    fn merge_patch_follows_rfc_7396() {
        // The RFC's own example (section 3).
        let mut target = json!({"title": "Goodbye!", "author": {"givenName": "John",
            "familyName": "Doe"}, "tags": ["example", "sample"], "content": "This will be unchanged"});
        merge_patch(
            &mut target,
            &json!({"title": "Hello!", "phoneNumber": "+01-123-456-7890",
                "author": {"familyName": null}, "tags": ["example"]}),
        );
        assert_eq!(
            target,
            json!({"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
                "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"})
        );
        let mut scalar = json!("x");
        merge_patch(&mut scalar, &json!({"a": {"b": 1}}));
        assert_eq!(scalar, json!({"a": {"b": 1}}));
    }
}
