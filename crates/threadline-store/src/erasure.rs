//! What an erasure is asked (`ErasureSubject`) and reports (`ErasureReport`, the
//! audit log's `ErasureRecord`s): the same for every backend.

use sha2::Digest;

/// What the subject's id is replaced by where numbers are kept.
pub const ERASED: &str = "[erased]";

/// Whose data to erase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErasureSubject {
    UserId(String),
    SessionId(String),
}

impl ErasureSubject {
    pub fn kind(&self) -> &'static str {
        match self {
            ErasureSubject::UserId(_) => "user_id",
            ErasureSubject::SessionId(_) => "session_id",
        }
    }

    /// The id itself (never to be logged).
    pub fn value(&self) -> &str {
        match self {
            ErasureSubject::UserId(v) | ErasureSubject::SessionId(v) => v,
        }
    }

    /// SHA-256 hex of the subject id: what the audit log keeps.
    pub fn digest(&self) -> String {
        hex::encode(sha2::Sha256::digest(self.value().as_bytes()))
    }
}

/// What an erasure did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErasureReport {
    pub erasure_id: i64,
    pub traces_matched: u64,
    pub spans_deleted: u64,
    /// Log records of the erased traces, and those naming the subject themselves.
    pub logs_deleted: u64,
    pub blocks_rewritten: u64,
    /// Whether the erased bytes left the disk right away (the embedded backend: false
    /// when a long read held its write-ahead log; its checkpointer clears it later).
    pub disk_cleared: bool,
    /// Copies of the id outside the traces, removed or rewritten.
    pub copies: CopiesErased,
}

impl ErasureReport {
    /// Whether the erasure found the subject anywhere.
    pub fn matched_anything(&self) -> bool {
        self.traces_matched + self.logs_deleted + self.copies.total() > 0
    }
}

/// One row of the erasure audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErasureRecord {
    pub erasure_id: i64,
    pub requested_by: String,
    pub requested_ns: i64,
    pub subject_kind: String,
    pub subject_sha256: String,
    pub traces_matched: u64,
    pub spans_deleted: u64,
}

/// How many copies an erasure removed or rewrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopiesErased {
    pub origins: u64,
    pub rollup_series: u64,
    pub rollup_cells: u64,
    pub lineage_nodes: u64,
    pub lineage_edges: u64,
    pub names: u64,
    pub incidents: u64,
}

impl CopiesErased {
    pub fn total(&self) -> u64 {
        self.origins
            + self.rollup_series
            + self.rollup_cells
            + self.lineage_nodes
            + self.lineage_edges
            + self.names
            + self.incidents
    }
}

// What an erasure rewrites and where a subject was copied: the rules every backend
// applies, over model types; the backend reads the candidates and persists the answer.

/// The subject as it appears inside JSON text (escaped, without the quotes): what a
/// stored JSON body (properties, evidence, incidents, series keys) holds of it.
pub(crate) fn json_form(subject: &str) -> String {
    let quoted = serde_json::to_string(subject).unwrap_or_default();
    quoted[1..quoted.len().saturating_sub(1)].to_owned()
}

/// Whether a resource and scope the spans were sent with name the subject in any
/// string, keys included: every span sent with it goes.
pub(crate) fn origin_names(origin: &threadline_model::SpanOrigin, subject: &str) -> bool {
    let text = serde_json::to_string(origin).unwrap_or_default();
    !subject.is_empty() && text.contains(&json_form(subject))
}

/// A stored JSON body (an incident) with every occurrence of the subject replaced by
/// `ERASED`; `None` when it does not name it.
pub(crate) fn redact_json_body(body: &str, subject: &str) -> Option<String> {
    let escaped = json_form(subject);
    (!subject.is_empty() && body.contains(&escaped)).then(|| body.replace(&escaped, ERASED))
}

/// Whether a lineage node names the subject in its key, its name or its properties
/// (JSON text): such a node goes with its edges and revisions.
pub(crate) fn node_names(key: &str, name: &str, props_json: &str, subject: &str) -> bool {
    !subject.is_empty()
        && (key.contains(subject)
            || name.contains(subject)
            || props_json.contains(&json_form(subject)))
}

/// A lineage change without the subject, by the rules the stored graph is erased by
/// (`node_names`): node upserts, registrations and run transitions of nodes that name
/// it go, and edges that touch such a node or whose evidence names it; any other
/// occurrence (an event key) is replaced by `ERASED`. `None` when nothing is left.
pub(crate) fn graph_update_without(
    update: threadline_model::GraphUpdate,
    subject: &str,
) -> Option<threadline_model::GraphUpdate> {
    use threadline_model::{EdgeEnd, NodeId};
    if subject.is_empty() {
        return Some(update);
    }
    let json = |v: &serde_json::Value| v.to_string();
    let names = |id: &NodeId| node_names(&id.key, "", "{}", subject);
    let end_names = |end: &EdgeEnd| match end {
        EdgeEnd::Node(id) | EdgeEnd::CurrentVersionOf(id) => names(id),
    };
    let mut out = update;
    out.nodes
        .retain(|n| !node_names(&n.id.key, "", &json(&n.props), subject));
    out.assets
        .retain(|a| !node_names(&a.id.key, "", &json(&a.spec), subject));
    for a in &mut out.assets {
        a.declares.retain(|d| !names(&d.src));
    }
    out.runs.retain(|r| !names(&r.run));
    out.edges.retain(|e| {
        !end_names(&e.src) && !end_names(&e.dst) && !json(&e.evidence).contains(&json_form(subject))
    });
    if let Some(key) = &mut out.event {
        for field in [&mut key.subject, &mut key.event_type, &mut key.event_time] {
            if field.contains(subject) {
                *field = field.replace(subject, ERASED);
            }
        }
    }
    let empty = out.nodes.is_empty()
        && out.edges.is_empty()
        && out.assets.is_empty()
        && out.runs.is_empty();
    (!empty).then_some(out)
}

/// The traces and minutes a set of matched spans spans: `(trace id, start ns)` per
/// span in, the distinct traces (sorted) and the first and last minute out (`None`
/// without spans) — the minutes whose rollup cells may hold the subject's span names.
pub(crate) fn traces_and_minutes<'a, T: Ord + ?Sized + 'a>(
    spans: impl IntoIterator<Item = (&'a T, i64)>,
) -> (Vec<&'a T>, Option<(i64, i64)>) {
    let mut traces = Vec::new();
    let mut minutes: Option<(i64, i64)> = None;
    for (trace, start_ns) in spans {
        traces.push(trace);
        let m = threadline_analysis::minute_of(start_ns);
        minutes = Some(minutes.map_or((m, m), |(a, b)| (a.min(m), b.max(m))));
    }
    traces.sort();
    traces.dedup();
    (traces, minutes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_found_in_json_bodies_as_json_escapes_it() {
        assert_eq!(json_form("a\"b"), "a\\\"b");
        let body = r#"{"route":"/v1/users/u\"1/chat","n":3}"#;
        assert_eq!(
            redact_json_body(body, "u\"1").as_deref(),
            Some(r#"{"route":"/v1/users/[erased]/chat","n":3}"#)
        );
        assert_eq!(redact_json_body(body, "u2"), None);
        assert_eq!(redact_json_body(body, ""), None);
    }

    #[test]
    fn origins_and_nodes_name_a_subject_in_any_string() {
        let mut origin = threadline_model::SpanOrigin::default();
        assert!(!origin_names(&origin, "alice"));
        origin
            .resource_attributes
            .push(threadline_model::Attribute {
                key: "enduser.id".into(),
                value: threadline_model::AttrValue::String("alice".into()),
            });
        assert!(origin_names(&origin, "alice"));
        assert!(!origin_names(&origin, "bob"));
        assert!(node_names("dataset:alice-notes", "", "{}", "alice"));
        assert!(node_names("k", "n", r#"{"owner":"alice"}"#, "alice"));
        assert!(!node_names("k", "n", r#"{"owner":"bob"}"#, "alice"));
    }

    #[test]
    fn matched_spans_give_distinct_traces_and_their_minutes() {
        let minute = 60_000_000_000;
        let (a, b) = (vec![1u8], vec![2u8]);
        let (traces, minutes) =
            traces_and_minutes([(&a, 3 * minute + 5), (&b, minute), (&a, 2 * minute)]);
        assert_eq!(traces, [&a, &b]);
        assert_eq!(minutes, Some((1, 3)));
        let none: [(&Vec<u8>, i64); 0] = [];
        assert_eq!(traces_and_minutes(none), (Vec::<&Vec<u8>>::new(), None));
    }
}
