//! PROV-O: the lineage graph exported as W3C PROV (Turtle or JSON-LD), and a validator
//! for PROV documents. Runs and requests are `prov:Activity`; datasets, dataset
//! versions, models, adapters, prompt versions and responses are `prov:Entity`; jobs,
//! services, instances and users are `prov:Agent`. Usage and generation are written
//! qualified, with their times, so the PROV-CONSTRAINTS ordering rules can be checked.
//!
//! The validator checks shapes (every Activity has a start time; `prov:used` targets
//! and derivation ends are Entities) and the ordering constraints timestamps allow:
//! C30 start precedes end, C33 usage within its activity, C34 generation within its
//! activity, C37 generation precedes usage, C41 derivation: generation of the source
//! precedes generation of the derived entity, C42 derivation: the source's usage by the
//! generating activity precedes the generation; and no derivation cycles.

use std::collections::{BTreeSet, HashMap, HashSet};

use oxrdf::vocab::{rdf, rdfs, xsd};
use oxrdf::{BlankNode, Literal, NamedNode, NamedOrBlankNode, Term, Triple};
use oxrdfio::{RdfFormat, RdfParser, RdfSerializer};
use serde_json::Value;
use threadline_model::{EdgeKind, LineageGraph, NodeId, NodeKind};

const PROV: &str = "http://www.w3.org/ns/prov#";
const TL: &str = "https://threadline.dev/ns#";
const ID: &str = "urn:threadline:";

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProvFormat {
    Turtle,
    JsonLd,
}

impl std::str::FromStr for ProvFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "turtle" | "ttl" => Ok(ProvFormat::Turtle),
            "jsonld" | "json-ld" => Ok(ProvFormat::JsonLd),
            other => Err(format!("format {other:?} is not turtle or jsonld")),
        }
    }
}

impl ProvFormat {
    fn rdf(self) -> RdfFormat {
        match self {
            ProvFormat::Turtle => RdfFormat::Turtle,
            ProvFormat::JsonLd => RdfFormat::JsonLd {
                profile: Default::default(),
            },
        }
    }

    pub fn media_type(self) -> &'static str {
        match self {
            ProvFormat::Turtle => "text/turtle",
            ProvFormat::JsonLd => "application/ld+json",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProvError {
    #[error("cannot write PROV: {0}")]
    Write(String),
    #[error("not a valid {format} document: {message}")]
    Parse {
        format: &'static str,
        message: String,
    },
}

/// A request (trace) to export as an Activity with its response.
#[derive(Clone, Debug)]
pub struct ProvRequest {
    pub trace_id: String,
    pub name: String,
    pub start_ns: i64,
    pub end_ns: i64,
    pub service: String,
    /// A digest of the user id (never the id itself), when the trace names a user.
    pub user_digest: Option<String>,
    /// Adapters, models, prompt versions the request used.
    pub used: Vec<NodeId>,
    /// Instances that served it.
    pub served_by: Vec<NodeId>,
}

fn prov(local: &str) -> NamedNode {
    NamedNode::new_unchecked(format!("{PROV}{local}"))
}

fn tl(local: &str) -> NamedNode {
    NamedNode::new_unchecked(format!("{TL}{local}"))
}

/// Characters kept as they are in node IRIs; everything else is percent-encoded.
const IRI_KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'@');

pub fn node_iri(id: &NodeId) -> NamedNode {
    NamedNode::new_unchecked(format!(
        "{ID}{}:{}",
        id.kind,
        percent_encoding::utf8_percent_encode(&id.key, IRI_KEEP)
    ))
}

fn time_literal(ns: i64) -> Literal {
    let t = chrono::DateTime::from_timestamp_nanos(ns);
    Literal::new_typed_literal(
        t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        xsd::DATE_TIME,
    )
}

fn is_entity_kind(kind: NodeKind) -> bool {
    !matches!(
        kind,
        NodeKind::Run | NodeKind::Job | NodeKind::Service | NodeKind::Instance
    )
}

/// Writes `graph` (and `requests`) as PROV-O.
pub fn export(
    graph: &LineageGraph,
    requests: &[ProvRequest],
    format: ProvFormat,
) -> Result<Vec<u8>, ProvError> {
    let mut triples: Vec<Triple> = Vec::new();
    let mut add = |s: NamedOrBlankNode, p: NamedNode, o: Term| triples.push(Triple::new(s, p, o));
    let kinds: HashMap<&NodeId, NodeKind> =
        graph.nodes.iter().map(|n| (&n.id, n.id.kind)).collect();
    let mut run_times: HashMap<&NodeId, (i64, Option<i64>)> = HashMap::new();
    for node in &graph.nodes {
        let s: NamedOrBlankNode = node_iri(&node.id).into();
        let class = match node.id.kind {
            NodeKind::Run => "Activity",
            NodeKind::Job | NodeKind::Service | NodeKind::Instance => "SoftwareAgent",
            _ => "Entity",
        };
        add(s.clone(), rdf::TYPE.into_owned(), prov(class).into());
        if class == "SoftwareAgent" {
            add(s.clone(), rdf::TYPE.into_owned(), prov("Agent").into());
        }
        add(
            s.clone(),
            rdfs::LABEL.into_owned(),
            Literal::new_simple_literal(node.id.to_string()).into(),
        );
        add(
            s.clone(),
            tl("kind"),
            Literal::new_simple_literal(node.id.kind.as_str()).into(),
        );
        if node.id.kind == NodeKind::Run {
            let get = |k: &str| node.props.get(k).and_then(Value::as_i64);
            let start = get("started_at_ns").unwrap_or(node.first_seen_ns);
            let end = get("ended_at_ns");
            add(s.clone(), prov("startedAtTime"), time_literal(start).into());
            if let Some(end) = end {
                add(s.clone(), prov("endedAtTime"), time_literal(end).into());
            }
            run_times.insert(&node.id, (start, end));
        }
    }
    let mut used_by_run: HashMap<&NodeId, Vec<(&NodeId, i64)>> = HashMap::new();
    let mut generated_by_run: HashMap<&NodeId, Vec<(&NodeId, Option<i64>)>> = HashMap::new();
    for e in &graph.edges {
        let (src, dst) = (node_iri(&e.src), node_iri(&e.dst));
        let (sk, dk) = (kinds.get(&e.src).copied(), kinds.get(&e.dst).copied());
        match e.kind {
            EdgeKind::HasVersion => add(dst.into(), prov("specializationOf"), src.into()),
            EdgeKind::InputTo if dk == Some(NodeKind::Run) && sk.is_some_and(is_entity_kind) => {
                // Usage at the first event that reported it, clamped into the run.
                let t = clamp(e.first_seen_ns, run_times.get(&e.dst));
                used_by_run.entry(&e.dst).or_default().push((&e.src, t));
            }
            EdgeKind::Produced if sk == Some(NodeKind::Run) && dk.is_some_and(is_entity_kind) => {
                // A registry-declared training run says nothing about when.
                let declared = e.evidence["via"].as_str() == Some("registry training_run");
                let t = (!declared).then(|| clamp(e.first_seen_ns, run_times.get(&e.src)));
                generated_by_run
                    .entry(&e.src)
                    .or_default()
                    .push((&e.dst, t));
            }
            EdgeKind::HasRun if dk == Some(NodeKind::Run) => {
                add(dst.into(), prov("wasAssociatedWith"), src.into())
            }
            EdgeKind::ParentOf => add(dst.into(), prov("wasInformedBy"), src.into()),
            EdgeKind::BaseOf => {
                add(
                    dst.clone().into(),
                    prov("wasDerivedFrom"),
                    src.clone().into(),
                );
                if let Some(rel) = e.evidence["relation"].as_str() {
                    add(
                        dst.into(),
                        tl("baseModelRelation"),
                        Literal::new_simple_literal(rel).into(),
                    );
                }
            }
            other => add(src.into(), tl(other.as_str()), dst.into()),
        }
    }
    for (run, uses) in &used_by_run {
        for (entity, t) in uses {
            add(node_iri(run).into(), prov("used"), node_iri(entity).into());
            let b = BlankNode::default();
            add(
                node_iri(run).into(),
                prov("qualifiedUsage"),
                b.clone().into(),
            );
            add(
                b.clone().into(),
                rdf::TYPE.into_owned(),
                prov("Usage").into(),
            );
            add(b.clone().into(), prov("entity"), node_iri(entity).into());
            add(b.into(), prov("atTime"), time_literal(*t).into());
        }
    }
    for (run, outputs) in &generated_by_run {
        for (entity, t) in outputs {
            add(
                node_iri(entity).into(),
                prov("wasGeneratedBy"),
                node_iri(run).into(),
            );
            if let Some(t) = t {
                let b = BlankNode::default();
                add(
                    node_iri(entity).into(),
                    prov("qualifiedGeneration"),
                    b.clone().into(),
                );
                add(
                    b.clone().into(),
                    rdf::TYPE.into_owned(),
                    prov("Generation").into(),
                );
                add(b.clone().into(), prov("activity"), node_iri(run).into());
                add(b.into(), prov("atTime"), time_literal(*t).into());
                add(
                    node_iri(entity).into(),
                    prov("generatedAtTime"),
                    time_literal(*t).into(),
                );
            }
            // What a run wrote derives from what it read.
            for (input, _) in used_by_run.get(run).into_iter().flatten() {
                if input != entity {
                    add(
                        node_iri(entity).into(),
                        prov("wasDerivedFrom"),
                        node_iri(input).into(),
                    );
                }
            }
        }
    }
    for r in requests {
        let activity = NamedNode::new_unchecked(format!("{ID}request:{}", r.trace_id));
        let response = NamedNode::new_unchecked(format!("{ID}response:{}", r.trace_id));
        let a: NamedOrBlankNode = activity.clone().into();
        add(a.clone(), rdf::TYPE.into_owned(), prov("Activity").into());
        add(
            a.clone(),
            rdfs::LABEL.into_owned(),
            Literal::new_simple_literal(&r.name).into(),
        );
        add(
            a.clone(),
            prov("startedAtTime"),
            time_literal(r.start_ns).into(),
        );
        add(
            a.clone(),
            prov("endedAtTime"),
            time_literal(r.end_ns).into(),
        );
        let service = node_iri(&NodeId::new(NodeKind::Service, &r.service));
        add(
            service.clone().into(),
            rdf::TYPE.into_owned(),
            prov("SoftwareAgent").into(),
        );
        add(
            service.clone().into(),
            rdf::TYPE.into_owned(),
            prov("Agent").into(),
        );
        add(a.clone(), prov("wasAssociatedWith"), service.into());
        for instance in &r.served_by {
            add(
                a.clone(),
                prov("wasAssociatedWith"),
                node_iri(instance).into(),
            );
        }
        if let Some(user) = &r.user_digest {
            let agent = NamedNode::new_unchecked(format!("{ID}user:{user}"));
            add(
                agent.clone().into(),
                rdf::TYPE.into_owned(),
                prov("Person").into(),
            );
            add(
                agent.clone().into(),
                rdf::TYPE.into_owned(),
                prov("Agent").into(),
            );
            add(a.clone(), prov("wasAssociatedWith"), agent.into());
        }
        for entity in &r.used {
            add(a.clone(), prov("used"), node_iri(entity).into());
            let b = BlankNode::default();
            add(a.clone(), prov("qualifiedUsage"), b.clone().into());
            add(
                b.clone().into(),
                rdf::TYPE.into_owned(),
                prov("Usage").into(),
            );
            add(b.clone().into(), prov("entity"), node_iri(entity).into());
            add(b.into(), prov("atTime"), time_literal(r.start_ns).into());
        }
        let resp: NamedOrBlankNode = response.into();
        add(resp.clone(), rdf::TYPE.into_owned(), prov("Entity").into());
        add(
            resp.clone(),
            prov("wasGeneratedBy"),
            activity.clone().into(),
        );
        add(
            resp.clone(),
            prov("generatedAtTime"),
            time_literal(r.end_ns).into(),
        );
        let b = BlankNode::default();
        add(resp, prov("qualifiedGeneration"), b.clone().into());
        add(
            b.clone().into(),
            rdf::TYPE.into_owned(),
            prov("Generation").into(),
        );
        add(b.clone().into(), prov("activity"), activity.into());
        add(b.into(), prov("atTime"), time_literal(r.end_ns).into());
    }
    let write_err = |e: std::io::Error| ProvError::Write(e.to_string());
    let mut serializer = RdfSerializer::from_format(format.rdf())
        .with_prefix("prov", PROV)
        .and_then(|s| s.with_prefix("tl", TL))
        .and_then(|s| s.with_prefix("rdfs", "http://www.w3.org/2000/01/rdf-schema#"))
        .map_err(|e| ProvError::Write(e.to_string()))?
        .for_writer(Vec::new());
    for t in &triples {
        serializer.serialize_triple(t).map_err(write_err)?;
    }
    serializer.finish().map_err(write_err)
}

fn clamp(t: i64, window: Option<&(i64, Option<i64>)>) -> i64 {
    match window {
        Some(&(start, end)) => t.max(start).min(end.unwrap_or(i64::MAX)),
        None => t,
    }
}

/// One broken rule, with the IRIs involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub message: String,
    pub iris: Vec<String>,
}

/// What a valid document holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProvSummary {
    pub activities: usize,
    pub entities: usize,
    pub agents: usize,
    pub triples: usize,
}

/// Reads a PROV document (Turtle, or JSON-LD when it starts with `{` or `[`).
fn parse_triples(bytes: &[u8]) -> Result<Vec<Triple>, ProvError> {
    let json = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{' || *b == b'[');
    let (format, name) = if json {
        (ProvFormat::JsonLd.rdf(), "JSON-LD")
    } else {
        (RdfFormat::Turtle, "Turtle")
    };
    RdfParser::from_format(format)
        .for_slice(bytes)
        .map(|q| q.map(Triple::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ProvError::Parse {
            format: name,
            message: e.to_string(),
        })
}

fn term_key(t: &Term) -> String {
    match t {
        Term::NamedNode(n) => n.as_str().to_owned(),
        Term::BlankNode(b) => format!("_:{}", b.as_str()),
        Term::Literal(l) => l.value().to_owned(),
        #[allow(unreachable_patterns)]
        _ => t.to_string(),
    }
}

fn subject_key(s: &NamedOrBlankNode) -> String {
    match s {
        NamedOrBlankNode::NamedNode(n) => n.as_str().to_owned(),
        NamedOrBlankNode::BlankNode(b) => format!("_:{}", b.as_str()),
    }
}

fn parse_time(t: &Term) -> Option<i64> {
    match t {
        Term::Literal(l) => chrono::DateTime::parse_from_rfc3339(l.value())
            .ok()
            .and_then(|d| d.timestamp_nanos_opt()),
        _ => None,
    }
}

/// Checks a PROV document; returns what it holds, or every violation found.
pub fn validate(bytes: &[u8]) -> Result<Result<ProvSummary, Vec<Violation>>, ProvError> {
    let triples = parse_triples(bytes)?;
    let mut types: HashMap<String, HashSet<String>> = HashMap::new();
    let mut props: HashMap<(String, String), Vec<Term>> = HashMap::new();
    for t in &triples {
        let s = subject_key(&t.subject);
        let p = t.predicate.as_str().to_owned();
        if p == rdf::TYPE.as_str() {
            types
                .entry(s.clone())
                .or_default()
                .insert(term_key(&t.object));
        }
        props.entry((s, p)).or_default().push(t.object.clone());
    }
    let is = |s: &str, class: &str| {
        types
            .get(s)
            .is_some_and(|c| c.contains(&format!("{PROV}{class}")))
    };
    let is_entity = |s: &str| {
        ["Entity", "Plan", "Collection", "Bundle"]
            .iter()
            .any(|c| is(s, c))
    };
    let one = |s: &str, p: &str| {
        props
            .get(&(s.to_owned(), format!("{PROV}{p}")))
            .and_then(|v| v.first())
    };
    let all = |p: &str| -> Vec<(String, String)> {
        let predicate = format!("{PROV}{p}");
        props
            .iter()
            .filter(|((_, pp), _)| *pp == predicate)
            .flat_map(|((s, _), objs)| objs.iter().map(move |o| (s.clone(), term_key(o))))
            .collect()
    };
    let mut violations = Vec::new();
    let mut v = |rule: &'static str, message: String, iris: Vec<String>| {
        violations.push(Violation {
            rule,
            message,
            iris,
        })
    };
    let activities: BTreeSet<&String> = types
        .iter()
        .filter(|(_, c)| c.contains(&format!("{PROV}Activity")))
        .map(|(s, _)| s)
        .collect();
    let start = |a: &str| one(a, "startedAtTime").and_then(parse_time);
    let end = |a: &str| one(a, "endedAtTime").and_then(parse_time);
    for a in &activities {
        match (start(a), end(a)) {
            (None, _) => v(
                "activity-start",
                "every Activity has a start time (prov:startedAtTime)".into(),
                vec![(*a).clone()],
            ),
            (Some(s), Some(e)) if s > e => v(
                "C30",
                "the activity starts after it ends".into(),
                vec![(*a).clone()],
            ),
            _ => {}
        }
    }
    for (a, e) in all("used") {
        if !is_entity(&e) {
            v(
                "used-entity",
                "a prov:used target is not a prov:Entity".into(),
                vec![a, e],
            );
        }
    }
    let derivations: Vec<(String, String)> = all("wasDerivedFrom");
    for (derived, source) in &derivations {
        for end_iri in [derived, source] {
            if !is_entity(end_iri) {
                v(
                    "derivation-entity",
                    "a derivation end is not a prov:Entity".into(),
                    vec![derived.clone(), source.clone(), end_iri.clone()],
                );
            }
        }
    }
    // Qualified usages and generations, with times.
    let mut usages: Vec<(String, String, i64)> = Vec::new(); // (activity, entity, t)
    for (a, b) in all("qualifiedUsage") {
        if let (Some(Term::NamedNode(e)), Some(t)) =
            (one(&b, "entity"), one(&b, "atTime").and_then(parse_time))
        {
            usages.push((a, e.as_str().to_owned(), t));
        }
    }
    let mut generations: Vec<(String, String, i64)> = Vec::new(); // (entity, activity, t)
    for (e, b) in all("qualifiedGeneration") {
        if let (Some(Term::NamedNode(a)), Some(t)) =
            (one(&b, "activity"), one(&b, "atTime").and_then(parse_time))
        {
            generations.push((e, a.as_str().to_owned(), t));
        }
    }
    let generated_at: Vec<(String, i64)> = all("generatedAtTime")
        .into_iter()
        .filter_map(|(e, _)| {
            let t = one(&e, "generatedAtTime").and_then(parse_time)?;
            Some((e, t))
        })
        .collect();
    for (e, t) in generated_at {
        if !generations.iter().any(|(ge, _, _)| *ge == e) {
            generations.push((e, String::new(), t));
        }
    }
    let within = |a: &str, t: i64| start(a).is_none_or(|s| s <= t) && end(a).is_none_or(|x| t <= x);
    for (a, e, t) in &usages {
        if !within(a, *t) {
            v(
                "C33",
                "usage happens outside its activity's start..end".into(),
                vec![a.clone(), e.clone()],
            );
        }
    }
    for (e, a, t) in &generations {
        if !a.is_empty() && !within(a, *t) {
            v(
                "C34",
                "generation happens outside its activity's start..end".into(),
                vec![e.clone(), a.clone()],
            );
        }
    }
    let gen_time: HashMap<&str, i64> = generations
        .iter()
        .map(|(e, _, t)| (e.as_str(), *t))
        .collect();
    for (a, e, t) in &usages {
        if let Some(g) = gen_time.get(e.as_str()) {
            if g > t {
                v(
                    "C37",
                    "the entity is used before it was generated".into(),
                    vec![e.clone(), a.clone()],
                );
            }
        }
    }
    for (derived, source) in &derivations {
        if let (Some(gs), Some(gd)) = (
            gen_time.get(source.as_str()),
            gen_time.get(derived.as_str()),
        ) {
            if gs > gd {
                v(
                    "C41",
                    "the derived entity was generated before its source".into(),
                    vec![derived.clone(), source.clone()],
                );
            }
        }
        // The activity that generated `derived` and used `source`: usage precedes generation.
        for (ge, ga, gt) in generations
            .iter()
            .filter(|(ge, ga, _)| ge == derived && !ga.is_empty())
        {
            for (_, _, ut) in usages.iter().filter(|(ua, ue, _)| ua == ga && ue == source) {
                if ut > gt {
                    v(
                        "C42",
                        "the source was used after the derived entity was generated".into(),
                        vec![ge.clone(), source.clone(), ga.clone()],
                    );
                }
            }
        }
    }
    if let Some(cycle) = derivation_cycle(&derivations) {
        v(
            "derivation-cycle",
            "entities derive from each other in a cycle".into(),
            cycle,
        );
    }
    if violations.is_empty() {
        let agents = types
            .values()
            .filter(|c| c.contains(&format!("{PROV}Agent")))
            .count();
        let entities = types.keys().filter(|s| is_entity(s)).count();
        Ok(Ok(ProvSummary {
            activities: activities.len(),
            entities,
            agents,
            triples: triples.len(),
        }))
    } else {
        Ok(Err(violations))
    }
}

/// A cycle in derived → source edges, if any (iterative DFS, colours).
fn derivation_cycle(edges: &[(String, String)]) -> Option<Vec<String>> {
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    for (d, s) in edges {
        next.entry(d.as_str()).or_default().push(s.as_str());
    }
    let mut colour: HashMap<&str, u8> = HashMap::new(); // 1 = on stack, 2 = done
    for &root in next.keys() {
        if colour.contains_key(root) {
            continue;
        }
        let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
        colour.insert(root, 1);
        while let Some((node, i)) = stack.pop() {
            let children = next.get(node).map(Vec::as_slice).unwrap_or(&[]);
            if i < children.len() {
                stack.push((node, i + 1));
                let child = children[i];
                match colour.get(child) {
                    Some(1) => {
                        let mut cycle: Vec<String> =
                            stack.iter().map(|(n, _)| n.to_string()).collect();
                        let from = cycle.iter().position(|n| n == child).unwrap_or(0);
                        cycle.drain(..from);
                        return Some(cycle);
                    }
                    Some(_) => {}
                    None => {
                        colour.insert(child, 1);
                        stack.push((child, 0));
                    }
                }
            } else {
                colour.insert(node, 2);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use threadline_model::{LineageEdge, LineageNode};

    use super::*;

    fn node(id: &str, first: i64, props: Value) -> LineageNode {
        LineageNode {
            id: id.parse().unwrap(),
            first_seen_ns: first,
            last_seen_ns: first,
            props,
        }
    }

    fn edge(src: &str, dst: &str, kind: EdgeKind, t: i64) -> LineageEdge {
        LineageEdge {
            valid_from_ns: None,
            superseded_ns: None,
            declared: false,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            kind,
            first_seen_ns: t,
            last_seen_ns: t,
            evidence: json!({}),
        }
    }

    fn sample() -> LineageGraph {
        let s = 1_700_000_000_000_000_000;
        LineageGraph {
            nodes: vec![
                node("dataset:warehouse:fin-qa", s, json!({})),
                node("dataset_version:warehouse:fin-qa@v3", s, json!({})),
                node(
                    "run:r1",
                    s,
                    json!({"started_at_ns": s + 10, "ended_at_ns": s + 100}),
                ),
                node("job:training:finetune", s, json!({})),
                node("adapter:fin-lora@7", s, json!({})),
                node("model:llama", s, json!({})),
            ],
            edges: vec![
                edge(
                    "dataset:warehouse:fin-qa",
                    "dataset_version:warehouse:fin-qa@v3",
                    EdgeKind::HasVersion,
                    s,
                ),
                edge(
                    "dataset_version:warehouse:fin-qa@v3",
                    "run:r1",
                    EdgeKind::InputTo,
                    s + 10,
                ),
                edge("run:r1", "adapter:fin-lora@7", EdgeKind::Produced, s + 100),
                edge("job:training:finetune", "run:r1", EdgeKind::HasRun, s),
                edge("model:llama", "adapter:fin-lora@7", EdgeKind::BaseOf, s),
            ],
        }
    }

    #[test]
    fn exports_validate_in_both_formats() {
        for format in [ProvFormat::Turtle, ProvFormat::JsonLd] {
            let bytes = export(&sample(), &[], format).unwrap();
            let summary = validate(&bytes)
                .unwrap()
                .unwrap_or_else(|v| panic!("{format:?}: {v:?}"));
            assert_eq!(summary.activities, 1);
            assert!(summary.entities >= 4, "{summary:?}");
        }
    }

    #[test]
    fn broken_documents_name_the_rule_and_iris() {
        let ttl = r#"
            @prefix prov: <http://www.w3.org/ns/prov#> .
            @prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
            <urn:a> a prov:Activity ; prov:startedAtTime "2024-01-02T00:00:00Z"^^xsd:dateTime ;
                prov:endedAtTime "2024-01-01T00:00:00Z"^^xsd:dateTime ; prov:used <urn:x> .
            <urn:b> a prov:Activity .
            <urn:e1> a prov:Entity ; prov:wasDerivedFrom <urn:e2> .
            <urn:e2> a prov:Entity ; prov:wasDerivedFrom <urn:e1> .
        "#;
        let violations = validate(ttl.as_bytes()).unwrap().unwrap_err();
        let rules: Vec<&str> = violations.iter().map(|v| v.rule).collect();
        for rule in ["C30", "activity-start", "used-entity", "derivation-cycle"] {
            assert!(rules.contains(&rule), "{rule} missing from {violations:?}");
        }
        let c30 = violations.iter().find(|v| v.rule == "C30").unwrap();
        assert_eq!(c30.iris, ["urn:a"]);
        assert!(validate(b"this is not turtle {").is_err());
    }
}
