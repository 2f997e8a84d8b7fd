//! `threadline register FILE` (asset manifests, YAML or JSON), `threadline lineage
//! NODE` (a walk of the graph as a tree, JSON or Graphviz dot) and `threadline erase`.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::client::ApiClient;
use crate::ClientArgs;

#[derive(Args)]
pub(crate) struct RegisterArgs {
    /// Manifest file: YAML (.yaml/.yml) or JSON (models, model_versions, adapters,
    /// prompt_templates, deployments).
    file: PathBuf,
    #[command(flatten)]
    client: ClientArgs,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

/// Reads a manifest: JSON when it parses as JSON, else YAML.
fn read_manifest(file: &PathBuf) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read manifest {}", file.display()))?;
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return Ok(v);
    }
    serde_yaml_ng::from_str::<Value>(&text).with_context(|| {
        format!(
            "manifest {} is neither valid JSON nor valid YAML",
            file.display()
        )
    })
}

pub(crate) async fn register(args: RegisterArgs) -> anyhow::Result<()> {
    let manifest = read_manifest(&args.file)?;
    let api = ApiClient::new(&args.client)?;
    let result = api
        .send_json(reqwest::Method::PUT, "/api/v1/assets", &manifest)
        .await?;
    for warning in result["warnings"].as_array().into_iter().flatten() {
        eprintln!("warning: {}", warning.as_str().unwrap_or_default());
    }
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(());
    }
    for asset in result["assets"].as_array().into_iter().flatten() {
        let revision = asset["revision"]
            .as_u64()
            .map(|r| format!(" (revision {r})"))
            .unwrap_or_default();
        crate::out::outln!(
            "{:<10} {}{revision}",
            asset["outcome"].as_str().unwrap_or("?"),
            asset["id"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LineageFormat {
    Tree,
    Json,
    Dot,
}

#[derive(Args)]
pub(crate) struct LineageArgs {
    /// Node id (`kind:key`, e.g. dataset:warehouse:fin-qa, adapter:fin-lora@7) or an
    /// unambiguous bare name.
    node: String,
    /// Walk upstream (where it came from).
    #[arg(long, conflicts_with = "down")]
    up: bool,
    /// Walk downstream (what depends on it).
    #[arg(long)]
    down: bool,
    /// Hops to walk from the node.
    #[arg(long, default_value_t = 3)]
    depth: usize,
    /// tree (for reading), json (the API's), or dot (Graphviz).
    #[arg(long, value_enum, default_value = "tree")]
    format: LineageFormat,
    #[command(flatten)]
    client: ClientArgs,
}

pub(crate) fn encode(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub(crate) async fn lineage(args: LineageArgs) -> anyhow::Result<()> {
    let direction = match (args.up, args.down) {
        (true, _) => "upstream",
        (_, true) => "downstream",
        _ => "both",
    };
    let api = ApiClient::new(&args.client)?;
    let graph = api
        .get(
            &format!("/api/v1/lineage/{}", encode(&args.node)),
            &[
                ("direction".to_owned(), direction.to_owned()),
                ("depth".to_owned(), args.depth.to_string()),
            ],
        )
        .await?;
    let out = match args.format {
        LineageFormat::Json => serde_json::to_string_pretty(&graph)?,
        LineageFormat::Dot => render_dot(&graph),
        LineageFormat::Tree => render_tree(&graph, direction),
    };
    crate::out::outln!("{}", out.trim_end());
    Ok(())
}

/// Graphviz: one node per lineage node (labelled with its kind), edges with their kind.
fn render_dot(graph: &Value) -> String {
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let quote = |s: &str| format!("\"{}\"", escape(s));
    let mut out = String::from("digraph lineage {\n  rankdir=LR;\n  node [shape=box];\n");
    for node in graph["nodes"].as_array().into_iter().flatten() {
        let id = node["id"].as_str().unwrap_or_default();
        // Kind over key: `\n` is Graphviz's line break, so it is not escaped itself.
        let label = format!(
            "\"{}\\n{}\"",
            escape(node["kind"].as_str().unwrap_or("")),
            escape(node["key"].as_str().unwrap_or(""))
        );
        let _ = writeln!(out, "  {} [label={label}];", quote(id));
    }
    for edge in graph["edges"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {} -> {} [label={}];",
            quote(edge["src"].as_str().unwrap_or_default()),
            quote(edge["dst"].as_str().unwrap_or_default()),
            quote(edge["kind"].as_str().unwrap_or_default())
        );
    }
    out.push_str("}\n");
    out
}

/// node id → (neighbour id, edge kind).
type Adjacency = BTreeMap<String, Vec<(String, String)>>;

/// An indented tree from the root, one branch per direction walked.
fn render_tree(graph: &Value, direction: &str) -> String {
    let root = graph["root"].as_str().unwrap_or_default().to_owned();
    let mut down = Adjacency::new();
    let mut up = Adjacency::new();
    for e in graph["edges"].as_array().into_iter().flatten() {
        let (src, dst, kind) = (
            e["src"].as_str().unwrap_or_default().to_owned(),
            e["dst"].as_str().unwrap_or_default().to_owned(),
            e["kind"].as_str().unwrap_or_default().to_owned(),
        );
        down.entry(src.clone())
            .or_default()
            .push((dst.clone(), kind.clone()));
        up.entry(dst).or_default().push((src, kind));
    }
    let mut out = format!("{root}\n");
    let branches: &[(&str, &Adjacency)] = match direction {
        "upstream" => &[("upstream", &up)],
        "downstream" => &[("downstream", &down)],
        _ => &[("upstream", &up), ("downstream", &down)],
    };
    for (label, adjacency) in branches {
        let arrow = if *label == "upstream" { "<-" } else { "->" };
        if branches.len() > 1 {
            let _ = writeln!(out, "  [{label}]");
        }
        let mut visited = HashSet::from([root.clone()]);
        walk_tree(
            &root,
            adjacency,
            arrow,
            1 + usize::from(branches.len() > 1),
            &mut visited,
            &mut out,
        );
    }
    out
}

fn walk_tree(
    node: &str,
    adjacency: &Adjacency,
    arrow: &str,
    indent: usize,
    visited: &mut HashSet<String>,
    out: &mut String,
) {
    for (next, kind) in adjacency.get(node).into_iter().flatten() {
        let seen_before = !visited.insert(next.clone());
        let _ = writeln!(
            out,
            "{}{arrow} {next}  ({kind}){}",
            "  ".repeat(indent),
            if seen_before { " …" } else { "" }
        );
        if !seen_before {
            walk_tree(next, adjacency, arrow, indent + 1, visited, out);
        }
    }
}

#[derive(Args)]
#[group(required = true, multiple = false, id = "subject")]
pub(crate) struct EraseArgs {
    /// Erase every trace of this user id.
    #[arg(long, group = "subject")]
    user_id: Option<String>,
    /// Erase every trace of this session id.
    #[arg(long, group = "subject")]
    session_id: Option<String>,
    /// Who asked (recorded in the audit log).
    #[arg(long, default_value = "cli")]
    requested_by: String,
    #[command(flatten)]
    client: ClientArgs,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn erase(args: EraseArgs) -> anyhow::Result<()> {
    let mut body = serde_json::json!({ "requested_by": args.requested_by });
    if let Some(u) = &args.user_id {
        body["user_id"] = Value::String(u.clone());
    }
    if let Some(s) = &args.session_id {
        body["session_id"] = Value::String(s.clone());
    }
    let api = ApiClient::new(&args.client)?;
    let report = api
        .send_json(reqwest::Method::POST, "/api/v1/erasures", &body)
        .await?;
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out::outln!(
            "erasure {}: {} traces, {} spans, {} log records deleted ({} blocks rewritten); audit subject sha256 {}",
            report["erasure_id"], report["traces_matched"], report["spans_deleted"],
            report["logs_deleted"], report["blocks_rewritten"],
            report["subject_sha256"].as_str().unwrap_or("?")
        );
        let copies = &report["copies"];
        let rewritten: Vec<String> = [
            ("resources", "resources"),
            ("rollup_series", "rollup series"),
            ("rollup_cells", "rollup cells"),
            ("lineage_nodes", "lineage nodes"),
            ("names", "listed names"),
            ("incidents", "incidents"),
            ("metric_series", "metric series"),
        ]
        .iter()
        .filter_map(|(k, label)| {
            let n = copies[*k].as_u64().unwrap_or(0);
            (n > 0).then(|| format!("{n} {label}"))
        })
        .collect();
        if !rewritten.is_empty() {
            crate::out::outln!(
                "copies of the id removed or rewritten: {}",
                rewritten.join(", ")
            );
        }
        if let Some(note) = report["note"].as_str() {
            crate::out::outln!("{note}");
        }
    }
    Ok(())
}

#[derive(Args)]
pub(crate) struct ImpactArgs {
    /// Node id (`kind:key`) or an unambiguous bare name.
    node: String,
    /// Count requests served since this time (RFC 3339 or unix seconds) [default: 7 days ago].
    #[arg(long)]
    since: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
    /// Print the API's JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn impact(args: ImpactArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&args.client)?;
    let query: Vec<(String, String)> = args
        .since
        .iter()
        .map(|s| ("since".to_owned(), s.clone()))
        .collect();
    let report = api
        .get(&format!("/api/v1/impact/{}", encode(&args.node)), &query)
        .await?;
    if args.json {
        crate::out::outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    crate::out::outln!(
        "impact of {}: {} downstream nodes",
        report["root"].as_str().unwrap_or("?"),
        report["affected_count"]
    );
    for (kind, ids) in report["affected"].as_object().into_iter().flatten() {
        let ids: Vec<&str> = ids
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        crate::out::outln!("  {kind:<16} {:>4}  {}", ids.len(), ids.join(", "));
    }
    crate::out::outln!(
        "requests served by affected adapters/instances: {} traces",
        report["requests_served"]["traces"]
    );
    for n in report["requests_served"]["by_node"]
        .as_array()
        .into_iter()
        .flatten()
    {
        crate::out::outln!(
            "  {:<40} {}",
            n["node"].as_str().unwrap_or("?"),
            n["traces"]
        );
    }
    crate::out::outln!("plan:");
    for step in report["plan"].as_array().into_iter().flatten() {
        crate::out::outln!(
            "  {:<10} {:<45} {}",
            step["action"].as_str().unwrap_or("?"),
            step["node"].as_str().unwrap_or("?"),
            step["reason"].as_str().unwrap_or("")
        );
    }
    Ok(())
}
