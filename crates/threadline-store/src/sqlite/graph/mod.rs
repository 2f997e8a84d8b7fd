//! The lineage graph in SQLite: applying graph updates inside the writer's
//! transaction (upserts that widen seen-intervals and merge JSON properties), and
//! reading nodes and walking edges for queries.
//!
//! Here: the writer's cache of graph rows and the update as the submitting thread
//! prepares it (patches serialized and digested). `apply`: an update's rows, run
//! events and assets; `transitions`: a dataset version's drift and a run's state;
//! `read`: lookups, walks and dumps.

use sha2::Digest;
use threadline_model::{
    EdgeEnd, EdgeKind, GraphUpdate, LineageEventKey, NodeId, NodeKind, RunTransition, TenantId,
};

use crate::sqlite::{sqlite_err, StoreError};

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
    declared: Option<threadline_model::DeclaredValidity>,
}

struct PreparedAsset {
    id: NodeId,
    declares: Vec<threadline_model::DeclaredEdge>,
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
                threadline_lineage::rules::merge_patch(&mut run.patch, &node.props);
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

/// A `GraphUpdate` with its JSON serialized and digested off the writer thread.
pub(crate) struct PreparedGraph {
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
                        declares: a.declares,
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
                    declared: e.declared,
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

mod apply;
mod read;
mod transitions;

pub(crate) use crate::queries::WalkLimits;
pub(crate) use apply::apply;
pub(crate) use read::{
    bound_instances, dump, find_nodes, get_node, node_counts, resolve, runs_for_trace, walk,
};
