//! `threadline bench lineage`: builds a synthetic lineage graph (default 1,000,000
//! nodes and 3,000,000 edges: datasets, versions, jobs, runs, base models, adapters,
//! instances, routes) in a fresh embedded store through the real write path, writes
//! request traces bound to it, then times the two queries issue #3 sets targets for:
//! a 6-hop downstream closure from a dataset, and a request → dataset chain (trace read
//! plus upstream walks, as `GET /api/v1/traces/{id}/lineage` does).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use serde_json::{json, Value};
use threadline_model::{
    Direction, EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate, LlmView, NodeId, NodeKind, NodeUpsert,
    SpanDetail, SpanId, SpanKind, SpanOrigin, SpanRecord, TenantId, TraceId,
};
use threadline_store::{Store, StoreError, WalkLimits};

/// Sizes of the synthetic graph.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LineageBenchSize {
    pub(crate) nodes: usize,
    pub(crate) edges: usize,
    /// Queries timed per measurement.
    pub(crate) samples: usize,
}

struct Layout {
    datasets: usize,
    versions: usize,
    jobs: usize,
    runs: usize,
    models: usize,
    adapters: usize,
    instances: usize,
    routes: usize,
}

impl Layout {
    fn new(nodes: usize) -> Self {
        let part = |f: f64| ((nodes as f64 * f) as usize).max(1);
        let (datasets, versions, jobs, runs) = (part(0.10), part(0.30), part(0.05), part(0.30));
        let (models, adapters, instances) = (part(0.01), part(0.16), part(0.04));
        let used = datasets + versions + jobs + runs + models + adapters + instances;
        Self {
            datasets,
            versions,
            jobs,
            runs,
            models,
            adapters,
            instances,
            routes: nodes.saturating_sub(used).max(1),
        }
    }
}

fn dataset(i: usize) -> NodeId {
    NodeId::namespaced(NodeKind::Dataset, "warehouse", &format!("ds-{i}"))
}
fn version(layout: &Layout, v: usize) -> NodeId {
    NodeId::dataset_version(&dataset(v % layout.datasets), &format!("v{v}"))
}
fn run(r: usize) -> NodeId {
    NodeId::new(NodeKind::Run, format!("run-{r}"))
}
fn adapter(a: usize) -> NodeId {
    NodeId::new(NodeKind::Adapter, format!("lora-{a}"))
}
fn instance(i: usize) -> NodeId {
    NodeId::new(NodeKind::Instance, format!("inst-{i}"))
}
fn route(r: usize) -> NodeId {
    NodeId::new(NodeKind::Route, format!("/v1/route-{r}"))
}

const T0: i64 = 1_760_000_000_000_000_000;

fn edge(src: NodeId, dst: NodeId, kind: EdgeKind, seen_ns: i64) -> EdgeUpsert {
    EdgeUpsert {
        declared: None,
        src: EdgeEnd::Node(src),
        dst: EdgeEnd::Node(dst),
        kind,
        seen_ns,
        evidence: Value::Null,
    }
}

/// Every edge of the synthetic graph, in a fixed order.
fn edges(layout: &Layout, total: usize, rng: &mut StdRng) -> Vec<EdgeUpsert> {
    let l = layout;
    let mut out = Vec::with_capacity(total);
    for v in 0..l.versions {
        out.push(edge(
            dataset(v % l.datasets),
            version(l, v),
            EdgeKind::HasVersion,
            T0,
        ));
    }
    for r in 0..l.runs {
        let job = NodeId::namespaced(NodeKind::Job, "pipelines", &format!("job-{}", r % l.jobs));
        out.push(edge(job, run(r), EdgeKind::HasRun, T0));
    }
    // Versions past each dataset's first are written by some run.
    for v in l.datasets..l.versions {
        out.push(edge(
            run(rng.random_range(0..l.runs)),
            version(l, v),
            EdgeKind::Produced,
            T0,
        ));
    }
    for a in 0..l.adapters {
        let model = NodeId::new(NodeKind::Model, format!("base-{}", a % l.models));
        out.push(edge(model, adapter(a), EdgeKind::BaseOf, T0));
        out.push(edge(
            run(rng.random_range(0..l.runs)),
            adapter(a),
            EdgeKind::Produced,
            T0,
        ));
        out.push(edge(
            adapter(a),
            instance(a % l.instances),
            EdgeKind::ServedBy,
            T0,
        ));
    }
    for i in 0..l.instances {
        out.push(edge(
            instance(i),
            route(i % l.routes),
            EdgeKind::Answers,
            T0,
        ));
    }
    // The rest: runs reading versions.
    while out.len() < total {
        out.push(edge(
            version(l, rng.random_range(0..l.versions)),
            run(rng.random_range(0..l.runs)),
            EdgeKind::InputTo,
            T0,
        ));
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn timings(mut samples: Vec<Duration>) -> Value {
    samples.sort();
    json!({
        "p50_ms": (percentile(&samples, 0.50) * 100.0).round() / 100.0,
        "p99_ms": (percentile(&samples, 0.99) * 100.0).round() / 100.0,
        "max_ms": (percentile(&samples, 1.0) * 100.0).round() / 100.0,
    })
}

/// One request trace: gateway root on a route, chat span on an instance serving an adapter.
fn request_spans(trace: u64, adapter_ix: usize, layout: &Layout) -> Vec<SpanRecord> {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&trace.to_be_bytes());
    id[15] = 1;
    let inst = adapter_ix % layout.instances;
    let start = (T0 + 3_600_000_000_000) as u64 + trace * 1_000_000;
    let origin = Arc::new(SpanOrigin::default());
    let span = |n: u8, parent: Option<u8>, llm: LlmView| SpanRecord {
        trace_id: TraceId(id),
        span_id: SpanId([n; 8]),
        parent_span_id: parent.map(|p| SpanId([p; 8])),
        name: "bench".into(),
        service: "gateway".into(),
        kind: SpanKind::Server,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 500_000_000,
        detail: SpanDetail::default(),
        origin: Arc::clone(&origin),
        llm: Some(llm),
    };
    vec![
        span(
            1,
            None,
            LlmView {
                route: Some(route(inst % layout.routes).key),
                ..Default::default()
            },
        ),
        span(
            2,
            Some(1),
            LlmView {
                instance_id: Some(instance(inst).key),
                adapter_id: Some(adapter(adapter_ix).key),
                ..Default::default()
            },
        ),
    ]
}

/// Builds the graph under `data_dir` and times the queries. Prints progress to stderr.
pub(crate) fn lineage(store: Store, size: LineageBenchSize) -> Result<Value, StoreError> {
    let tenant = TenantId::new("bench").expect("valid tenant");
    let layout = Layout::new(size.nodes);
    let mut rng = StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
    let all_edges = edges(&layout, size.edges, &mut rng);

    // A store that already holds this graph (same --data-dir) is reused as it is.
    let reuse = store
        .get_node(
            &tenant,
            &NodeId::new(NodeKind::Route, route(layout.routes - 1).key),
        )?
        .is_some();
    let build = Instant::now();
    // Nodes first (each with its kind's props), then edges, in big updates.
    let mut nodes: Vec<NodeId> = Vec::with_capacity(size.nodes);
    nodes.extend((0..layout.datasets).map(dataset));
    nodes.extend((0..layout.versions).map(|v| version(&layout, v)));
    nodes.extend(
        (0..layout.jobs)
            .map(|j| NodeId::namespaced(NodeKind::Job, "pipelines", &format!("job-{j}"))),
    );
    nodes.extend((0..layout.runs).map(run));
    nodes.extend((0..layout.models).map(|m| NodeId::new(NodeKind::Model, format!("base-{m}"))));
    nodes.extend((0..layout.adapters).map(adapter));
    nodes.extend((0..layout.instances).map(instance));
    nodes.extend((0..layout.routes).map(route));
    let submit = |update: GraphUpdate| -> Result<(), StoreError> {
        store
            .write_graph(&tenant, update, T0)?
            .wait_blocking()
            .map(|_| ())
    };
    for chunk in nodes.chunks(50_000).filter(|_| !reuse) {
        submit(GraphUpdate {
            nodes: chunk
                .iter()
                .map(|id| NodeUpsert {
                    id: id.clone(),
                    seen_ns: T0,
                    props: json!({"bench": true}),
                })
                .collect(),
            ..Default::default()
        })?;
    }
    let mut written = 0;
    for chunk in all_edges.chunks(50_000).filter(|_| !reuse) {
        submit(GraphUpdate {
            edges: chunk.to_vec(),
            ..Default::default()
        })?;
        written += chunk.len();
        if written % 500_000 < 50_000 {
            eprintln!("bench: {written} of {} edges written", all_edges.len());
        }
    }
    let build_s = build.elapsed().as_secs_f64();
    // Queries are timed on the graph at rest: on the embedded store, first let the
    // background checkpointer copy the bulk load into the database file (reported as
    // settle time). This measures the embedded store's internals, hence the escape
    // hatch.
    let settle = Instant::now();
    while let Some(embedded) = store.as_sqlite() {
        if settle.elapsed() > Duration::from_secs(300)
            || embedded.uncheckpointed_bytes() <= 4 * 1024 * 1024
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let settle_s = settle.elapsed().as_secs_f64();

    // Request traces bound to random adapters.
    let traces: Vec<(u64, usize)> = (0..size.samples as u64)
        .map(|t| (t, rng.random_range(0..layout.adapters)))
        .collect();
    for &(t, a) in &traces {
        store.write_blocking(&tenant, &request_spans(t, a, &layout))?;
    }

    let mut closure_times = Vec::new();
    let mut closure_sizes = Vec::new();
    for _ in 0..size.samples {
        let start = dataset(rng.random_range(0..layout.datasets));
        let began = Instant::now();
        let graph = store.walk(
            &tenant,
            &start,
            &WalkLimits {
                direction: Direction::Downstream,
                depth: 6,
                max_nodes: 1_000_000,
                edge_kinds: Vec::new(),
            },
        )?;
        closure_times.push(began.elapsed());
        closure_sizes.push(graph.map_or(0, |g| g.nodes.len()));
    }
    let mut chain_times = Vec::new();
    let mut chain_datasets = 0usize;
    for &(t, _) in &traces {
        let trace_id = request_spans(t, 0, &layout)[0].trace_id;
        let began = Instant::now();
        let spans = store.get_trace(&tenant, trace_id)?;
        let mut served = threadline_diagnosis::trace_lineage::ServedBy::of(&spans);
        let (start_ns, end_ns) = threadline_model::trace_tree::time_bounds(
            spans
                .iter()
                .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano)),
        );
        let window = threadline_lineage::validity::Window {
            start_ns: start_ns as i64,
            end_ns: end_ns as i64,
        };
        let graph = threadline_diagnosis::trace_lineage::chain(
            &store,
            &tenant,
            trace_id,
            window,
            &mut served,
        )?;
        chain_times.push(began.elapsed());
        chain_datasets += graph
            .nodes
            .iter()
            .filter(|n| n.id.kind == NodeKind::Dataset)
            .count();
    }
    closure_sizes.sort_unstable();
    Ok(json!({
        "nodes": size.nodes,
        "edges": all_edges.len(),
        "reused_store": reuse,
        "build_seconds": (build_s * 10.0).round() / 10.0,
        "settle_seconds": (settle_s * 10.0).round() / 10.0,
        "graph_writes_per_s": ((size.nodes + all_edges.len()) as f64 / build_s).round(),
        "closure_6_hops": timings(closure_times),
        "closure_nodes_p50": closure_sizes.get(closure_sizes.len() / 2).copied().unwrap_or(0),
        "closure_nodes_max": closure_sizes.last().copied().unwrap_or(0),
        "request_to_dataset_chain": timings(chain_times),
        "chain_datasets_avg": chain_datasets as f64 / traces.len().max(1) as f64,
        "samples": size.samples,
    }))
}
