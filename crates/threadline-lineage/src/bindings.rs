//! Bindings from spans: the edges request traffic reveals, upserted at ingest with
//! first-seen / last-seen times (span start times), so a hot-swapped adapter appears
//! as a new edge at the moment it first served traffic.
//!
//! Per trace within one export request: every instance seen serves each route seen
//! (instance → route); the adapter, model and image on an instance's spans feed it
//! (adapter / model → instance, image → instance); a prompt template version feeds the
//! routes (prompt → route); with no instance reported, the adapter / model feeds the
//! route directly. A span whose parent is in the same request under another service
//! makes the callee serve the caller (service → service).

use std::collections::BTreeMap;

// Seeded per process: keys come from senders, so a fixed hash could be flooded.
use foldhash::{HashMap, HashMapExt};

use serde_json::Value;
use threadline_model::{EdgeEnd, EdgeKind, EdgeUpsert, NodeId, NodeKind, SpanRecord, TraceId};

/// A node the spans name, borrowed from them: made a `NodeId` once per distinct edge,
/// at the end (a batch's spans name a few nodes many times over).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum End<'a> {
    Node(NodeKind, &'a str),
    /// A prompt template's version (`registry::prompt_node`).
    Prompt(&'a str, &'a str),
}

impl End<'_> {
    fn kind(self) -> NodeKind {
        match self {
            End::Node(kind, _) => kind,
            End::Prompt(..) => NodeKind::Prompt,
        }
    }

    fn id(self) -> NodeId {
        match self {
            End::Node(kind, key) => NodeId::new(kind, key),
            End::Prompt(id, version) => crate::registry::prompt_node(id, version),
        }
    }
}

/// What the spans of one trace (in one request) said, with the earliest and latest
/// span start each value was seen at.
#[derive(Default)]
struct TraceFacts<'a> {
    routes: BTreeMap<&'a str, (i64, i64)>,
    instances: BTreeMap<&'a str, InstanceFacts<'a>>,
    /// Adapters / models / images / prompts seen on spans without an instance.
    loose: InstanceFacts<'a>,
}

#[derive(Default)]
struct InstanceFacts<'a> {
    seen: Option<(i64, i64)>,
    feeds: BTreeMap<End<'a>, (i64, i64)>,
    prompts: BTreeMap<End<'a>, (i64, i64)>,
}

fn widen(slot: &mut (i64, i64), t: i64) {
    slot.0 = slot.0.min(t);
    slot.1 = slot.1.max(t);
}

fn note<'a>(map: &mut BTreeMap<End<'a>, (i64, i64)>, end: End<'a>, t: i64) {
    widen(map.entry(end).or_insert((t, t)), t);
}

/// The edges `spans` (one export request) reveal. Each distinct edge appears at most
/// twice (at its earliest and latest sighting), so the store widens its interval.
pub fn span_bindings<'a>(spans: &'a [SpanRecord]) -> Vec<EdgeUpsert> {
    let mut traces: HashMap<TraceId, TraceFacts<'a>> = HashMap::new();
    let mut calls: BTreeMap<(&'a str, &'a str), (i64, i64)> = BTreeMap::new();
    let service_of: HashMap<_, &str> = spans
        .iter()
        .map(|s| (s.span_id, s.service.as_str()))
        .collect();
    for span in spans {
        let t = span.start_time_unix_nano.min(i64::MAX as u64) as i64;
        if let Some(parent) = span.parent_span_id.and_then(|p| service_of.get(&p)) {
            if *parent != span.service && !span.service.is_empty() && !parent.is_empty() {
                widen(
                    calls
                        .entry((span.service.as_str(), *parent))
                        .or_insert((t, t)),
                    t,
                );
            }
        }
        let Some(llm) = &span.llm else { continue };
        let facts = traces.entry(span.trace_id).or_default();
        if let Some(route) = &llm.route {
            widen(facts.routes.entry(route).or_insert((t, t)), t);
        }
        let target = match &llm.instance_id {
            Some(instance) => {
                let f = facts.instances.entry(instance).or_default();
                widen(f.seen.get_or_insert((t, t)), t);
                f
            }
            None => &mut facts.loose,
        };
        if let Some(adapter) = &llm.adapter_id {
            note(&mut target.feeds, End::Node(NodeKind::Adapter, adapter), t);
        }
        if let Some(model) = llm.model() {
            note(&mut target.feeds, End::Node(NodeKind::Model, model), t);
        }
        if let Some(image) = &llm.image {
            note(&mut target.feeds, End::Node(NodeKind::Image, image), t);
        }
        if let (Some(id), Some(version)) = (&llm.prompt_template_id, &llm.prompt_template_version) {
            note(&mut target.prompts, End::Prompt(id, version), t);
        }
    }

    let mut edges: HashMap<(End<'a>, End<'a>, EdgeKind), (i64, i64)> = HashMap::new();
    let mut add = |src: End<'a>, dst: End<'a>, kind: EdgeKind, seen: (i64, i64)| {
        let slot = edges.entry((src, dst, kind)).or_insert(seen);
        slot.0 = slot.0.min(seen.0);
        slot.1 = slot.1.max(seen.1);
    };
    let feed_kind = |end: End<'a>| {
        if end.kind() == NodeKind::Image {
            EdgeKind::RunsOn
        } else {
            EdgeKind::ServedBy
        }
    };
    for facts in traces.values() {
        let routes: Vec<End<'a>> = facts
            .routes
            .keys()
            .map(|r| End::Node(NodeKind::Route, r))
            .collect();
        for (instance, f) in &facts.instances {
            let node = End::Node(NodeKind::Instance, instance);
            let seen = f.seen.unwrap_or_default();
            for &route in &routes {
                add(node, route, EdgeKind::Answers, seen);
            }
            for (&feed, s) in &f.feeds {
                add(feed, node, feed_kind(feed), *s);
            }
            for (&prompt, s) in &f.prompts {
                for &route in &routes {
                    add(prompt, route, EdgeKind::PromptFor, *s);
                }
            }
        }
        for &route in &routes {
            if facts.instances.is_empty() {
                for (&feed, s) in &facts.loose.feeds {
                    if feed.kind() != NodeKind::Image {
                        add(feed, route, EdgeKind::ServedBy, *s);
                    }
                }
            }
            for (&prompt, s) in &facts.loose.prompts {
                add(prompt, route, EdgeKind::PromptFor, *s);
            }
        }
    }
    for ((callee, caller), seen) in calls {
        add(
            End::Node(NodeKind::Service, callee),
            End::Node(NodeKind::Service, caller),
            EdgeKind::Serves,
            seen,
        );
    }
    // Owned ids once per distinct edge, in the order of the ids (two borrowed ends can
    // name one node: a prompt's id and version are trimmed).
    let mut distinct: BTreeMap<(NodeId, NodeId, EdgeKind), (i64, i64)> = BTreeMap::new();
    for ((src, dst, kind), seen) in edges {
        let slot = distinct.entry((src.id(), dst.id(), kind)).or_insert(seen);
        slot.0 = slot.0.min(seen.0);
        slot.1 = slot.1.max(seen.1);
    }
    let mut out = Vec::with_capacity(distinct.len() * 2);
    for ((src, dst, kind), (first, last)) in distinct {
        let times: &[i64] = if first == last {
            &[first]
        } else {
            &[first, last]
        };
        for &t in times {
            out.push(EdgeUpsert {
                declared: None,
                src: EdgeEnd::Node(src.clone()),
                dst: EdgeEnd::Node(dst.clone()),
                kind,
                seen_ns: t,
                evidence: Value::Null,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use threadline_model::{LlmView, SpanDetail, SpanId, SpanKind, SpanOrigin};

    use super::*;

    fn span(id: u8, parent: Option<u8>, service: &str, start: u64, llm: LlmView) -> SpanRecord {
        SpanRecord {
            trace_id: TraceId([1; 16]),
            span_id: SpanId([id; 8]),
            parent_span_id: parent.map(|p| SpanId([p; 8])),
            name: "s".into(),
            service: service.into(),
            kind: SpanKind::Internal,
            start_time_unix_nano: start,
            end_time_unix_nano: start + 10,
            detail: SpanDetail::default(),
            origin: Arc::new(SpanOrigin::default()),
            llm: Some(llm),
        }
    }

    fn edge_strings(edges: &[EdgeUpsert]) -> Vec<String> {
        let mut v: Vec<String> = edges
            .iter()
            .map(|e| match (&e.src, &e.dst) {
                (EdgeEnd::Node(s), EdgeEnd::Node(d)) => {
                    format!("{s} -{}-> {d} @{}", e.kind, e.seen_ns)
                }
                _ => unreachable!("bindings name their nodes"),
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_request_trace_binds_route_instance_adapter_model_image_prompt_and_services() {
        let root = span(
            1,
            None,
            "gateway",
            100,
            LlmView {
                route: Some("/v1/chat".into()),
                ..Default::default()
            },
        );
        let chat = span(
            2,
            Some(1),
            "inference",
            150,
            LlmView {
                instance_id: Some("inst-3".into()),
                adapter_id: Some("fin-lora@7".into()),
                request_model: Some("llama-3-8b".into()),
                image: Some("ghcr.io/acme/inference:v2".into()),
                prompt_template_id: Some("support-chat".into()),
                prompt_template_version: Some("v2.1.4".into()),
                ..Default::default()
            },
        );
        let edges = edge_strings(&span_bindings(&[root, chat]));
        assert_eq!(
            edges,
            [
                "adapter:fin-lora@7 -served_by-> instance:inst-3 @150",
                "image:ghcr.io/acme/inference:v2 -runs_on-> instance:inst-3 @150",
                "instance:inst-3 -answers-> route:/v1/chat @150",
                "model:llama-3-8b -served_by-> instance:inst-3 @150",
                "prompt:support-chat@v2.1.4 -prompt_for-> route:/v1/chat @150",
                "service:inference -serves-> service:gateway @150",
            ]
        );
    }
}
