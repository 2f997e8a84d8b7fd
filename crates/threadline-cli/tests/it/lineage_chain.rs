//! The lineage chain end to end: a YAML manifest registered with the CLI, a training
//! run reported over OpenLineage, request spans over OTLP; then one query from a
//! request to the dataset version behind it, and one from the dataset to what it
//! touched. Also: idempotent re-registration, revisions, and a hot-swap edge.

use serde_json::{json, Value};

use crate::harness::*;

const RUN_ID: &str = "3f0c9a62-7d1e-4b55-9a8e-1c2d3e4f5a6b";

const MANIFEST: &str = r#"
models:
  - {id: meta-llama/Meta-Llama-3-8B}
adapters:
  - id: fin-lora@7
    base_model: meta-llama/Meta-Llama-3-8B
    relation: adapter
    artifact: "s3://models/fin-lora/7"
    tags: [pii]
prompt_templates:
  - {id: support-chat, version: v2.1.4, text_sha256: "9f2b5c1a0d3e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c"}
deployments:
  - id: chat-prod
    image: "ghcr.io/acme/inference:v2.3.1"
    route: /v1/chat/completions
    instances:
      - {id: inst-3, serves: fin-lora@7}
"#;

fn training_event(event_type: &str, minutes: u32, outputs: Value) -> Value {
    json!({
        "eventType": event_type,
        "eventTime": format!("2025-11-28T02:{minutes:02}:00Z"),
        "run": {"runId": RUN_ID},
        "job": {"namespace": "training", "name": "finetune-fin"},
        "inputs": [{"namespace": "warehouse", "name": "fin-qa",
                    "facets": {"version": {"_producer": "p", "_schemaURL": "s", "datasetVersion": "v3"}},
                    "inputFacets": {"dataQualityMetrics": {"_producer": "p", "_schemaURL": "s",
                        "rowCount": 1000, "columnMetrics": {"answer": {"nullCount": 3}}}}}],
        "outputs": outputs,
        "producer": "https://example.com/trainer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
    })
}

/// A request: gateway root with the route, chat span on inst-3 with the adapter.
fn request(trace: u8, adapter: &str, start: u64) -> Vec<u8> {
    use opentelemetry_proto::tonic::trace::v1::Span;
    let mut req = llm_trace([trace; 16], "gateway", "meta-llama/Meta-Llama-3-8B", start);
    let spans: &mut Vec<Span> = &mut req.resource_spans[0].scope_spans[0].spans;
    spans[1]
        .attributes
        .retain(|kv| kv.key != "llm.lora.adapter_id");
    spans[1].attributes.extend([
        kv("llm.lora.adapter_id", adapter),
        kv("model.instance.id", "inst-3"),
        kv("llm.prompt_template.id", "support-chat"),
        kv("llm.prompt.version", "v2.1.4"),
    ]);
    proto(&req)
}

fn ids(graph: &Value) -> Vec<String> {
    graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn request_to_dataset_chain_registry_and_hot_swap() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("impact.toml");
    std::fs::write(
        &policy,
        "[[rule]]\nkind = \"adapter\"\ntags = [\"pii\"]\naction = \"anonymize\"\nreason = \"adapter tagged pii\"\n\n[[rule]]\nkind = \"adapter\"\naction = \"retrain\"\nreason = \"trained on it\"\n\n[[rule]]\nkind = \"*\"\naction = \"notify\"\nreason = \"downstream\"\n",
    )
    .unwrap();
    let server = TestServer::start_with_config(Some(&format!(
        "[server]\nimpact_policy = {:?}\n",
        policy.display().to_string()
    )));
    let manifest = dir.path().join("platform.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();

    // Register with the CLI; again → unchanged; a change → revision 2.
    let path = manifest.to_str().unwrap();
    let (ok, out, err) = server.cli(&["register", path]);
    assert!(ok, "{err}");
    assert!(out.contains("created    adapter:fin-lora@7"), "{out}");
    assert!(
        !err.contains("warning"),
        "the manifest refers only to what it defines: {err}"
    );
    // A reference to an entry nothing knows is warned about, naming the entry.
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        "adapters: [{id: extra-lora@1, base_model: meta-llama/Meta-Llama-3-8X, relation: adapter}]\n",
    )
    .unwrap();
    let (ok, _, err) = server.cli(&["register", typo.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: adapters[0] (extra-lora@1): base_model model:meta-llama/Meta-Llama-3-8X is not registered"),
        "{err}"
    );
    let (ok, out, _) = server.cli(&["register", path]);
    assert!(ok);
    assert!(out.lines().all(|l| l.starts_with("unchanged")), "{out}");
    std::fs::write(
        &manifest,
        MANIFEST.replace("relation: adapter", "relation: finetune"),
    )
    .unwrap();
    let (_, out, _) = server.cli(&["register", path]);
    assert!(
        out.contains("revised    adapter:fin-lora@7 (revision 2)"),
        "{out}"
    );
    let (status, adapter) = server.get("/api/v1/assets/adapters/fin-lora@7", None);
    assert_eq!(status, 200, "{adapter}");
    assert_eq!(
        (
            adapter["revision"].as_i64(),
            adapter["spec"]["relation"].as_str()
        ),
        (Some(2), Some("finetune"))
    );
    let (status, err) = server.post_json("/api/v1/assets", b"{}".to_vec(), &[], None);
    assert_eq!(status, 405, "PUT only: {err}");
    let bad = client()
        .put(format!("{}/api/v1/assets", server.api))
        .json(&json!({"adapters": [{"id": "x"}]}))
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    assert!(bad.text().unwrap().contains("base_model"));

    // The training run reports the artifact after the registration: joined to the adapter.
    for (t, m, outputs) in [
        ("START", 0, json!([])),
        (
            "COMPLETE",
            40,
            json!([{"namespace": "s3://models", "name": "fin-lora/7"}]),
        ),
    ] {
        let (status, body) = server.post_json(
            "/api/v1/lineage",
            training_event(t, m, outputs).to_string().into_bytes(),
            &[],
            None,
        );
        assert_eq!(status, 201, "{body}");
    }

    // Requests: fin-lora@7 at T, then fin-lora@8 hot-swapped onto inst-3 at T+60s.
    let t0: u64 = 1_764_400_000_000_000_000;
    let swap = t0 + 60_000_000_000;
    for (trace, adapter, start) in [
        (1u8, "fin-lora@7", t0),
        (2, "fin-lora@7", t0 + 1_000_000_000),
        (3, "fin-lora@8", swap),
    ] {
        let resp = server.post_traces(
            "application/x-protobuf",
            request(trace, adapter, start),
            &[],
        );
        assert_eq!(resp.status(), 200);
    }

    // Request → route → instance → adapter → base model / training run → dataset version.
    let (status, chain) = server.get(&format!("/api/v1/traces/{}/lineage", hex(&[1u8; 16])), None);
    assert_eq!(status, 200, "{chain}");
    let c = &chain["chain"];
    assert_eq!(
        c["routes"],
        json!(["route:/v1/chat/completions"]),
        "{chain}"
    );
    assert_eq!(c["instances"], json!(["instance:inst-3"]));
    assert_eq!(
        c["adapters"],
        json!(["adapter:fin-lora@7"]),
        "only this request's adapter: {c}"
    );
    assert!(c["models"]
        .as_array()
        .unwrap()
        .contains(&json!("model:meta-llama/Meta-Llama-3-8B")));
    assert_eq!(c["training_runs"], json!([format!("run:{RUN_ID}")]), "{c}");
    assert!(
        c["dataset_versions"]
            .as_array()
            .unwrap()
            .contains(&json!("dataset_version:warehouse:fin-qa@v3")),
        "{c}"
    );
    assert_eq!(c["prompts"], json!(["prompt:support-chat@v2.1.4"]));
    assert_eq!(c["images"], json!(["image:ghcr.io/acme/inference:v2.3.1"]));
    let v3 = find_in(&chain["nodes"], "id", "dataset_version:warehouse:fin-qa@v3");
    assert_eq!(
        v3["props"]["inputFacets"]["dataQualityMetrics"]["rowCount"], 1000,
        "quality facets ride along"
    );

    // A pipeline run whose parent facet names the request's trace is found from it.
    let batch_run = "0193ab00-2222-7333-8444-555566667777";
    let traced = json!({
        "eventType": "COMPLETE",
        "eventTime": "2025-11-29T08:00:00Z",
        "run": {"runId": batch_run, "facets": {"parent": {
            "_producer": "p", "_schemaURL": "s",
            "run": {"runId": "0193ab00-2222-7333-8444-000000000001", "traceId": hex(&[1u8; 16])},
            "job": {"namespace": "gateway", "name": "request"}}}},
        "job": {"namespace": "batch", "name": "summarize-conversation"},
        "outputs": [{"namespace": "warehouse", "name": "conversation-summaries"}],
        "producer": "https://example.com/batch",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
    });
    let (status, body) = server.post_json(
        "/api/v1/lineage",
        traced.to_string().into_bytes(),
        &[],
        None,
    );
    assert_eq!(status, 201, "{body}");
    let (_, chain) = server.get(&format!("/api/v1/traces/{}/lineage", hex(&[1u8; 16])), None);
    assert_eq!(
        chain["chain"]["traced_runs"],
        json!([format!("run:{batch_run}")]),
        "{chain}"
    );
    assert!(
        chain["chain"]["dataset_versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v
                .as_str()
                .unwrap()
                .starts_with("dataset_version:warehouse:conversation-summaries@")),
        "the traced run's output: {chain}"
    );

    // Dataset → everything downstream, by bare name.
    let (status, down) = server.get("/api/v1/lineage/fin-qa?direction=downstream&depth=6", None);
    assert_eq!(status, 200, "{down}");
    let down_ids = ids(&down);
    for want in [
        "adapter:fin-lora@7",
        "instance:inst-3",
        "route:/v1/chat/completions",
    ] {
        assert!(
            down_ids.contains(&want.to_owned()),
            "{want} not downstream of fin-qa: {down_ids:?}"
        );
    }

    // Filtered to some kinds, the adapter still shows how it comes from the dataset.
    let (_, only) = server.get(
        "/api/v1/lineage/fin-qa?direction=downstream&depth=6&kinds=adapter,instance",
        None,
    );
    let kinds: Vec<&str> = strings_of(&only["nodes"], "kind");
    assert!(
        kinds
            .iter()
            .all(|k| ["dataset", "adapter", "instance"].contains(k)),
        "{kinds:?}"
    );
    let via = only["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "via" && e["dst"] == "adapter:fin-lora@7")
        .unwrap_or_else(|| panic!("no via link: {only}"));
    assert_eq!(via["src"], "dataset:warehouse:fin-qa");
    assert!(
        via["evidence"]["path"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("run:{RUN_ID}"))),
        "{via}"
    );

    // The hot swap is a new edge whose first-seen is the first request it served.
    let (_, up) = server.get(
        &format!(
            "/api/v1/lineage/{}?direction=upstream&depth=1",
            encode_node("instance:inst-3")
        ),
        None,
    );
    let edge = up["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["src"] == "adapter:fin-lora@8" && e["kind"] == "served_by")
        .unwrap_or_else(|| panic!("no hot-swap edge: {up}"));
    // (the chat span on inst-3 starts 100 ms into the request)
    assert_eq!(
        edge["first_seen_unix_nano"],
        (swap + 100_000_000).to_string()
    );
    let old = up["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["src"] == "adapter:fin-lora@7" && e["kind"] == "served_by")
        .unwrap();
    assert!(
        old["first_seen_unix_nano"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            < swap
    );

    // Impact of the dataset: closure by kind, requests served, plan from the policy
    // (fin-lora@7 carries the `pii` tag in the manifest).
    let (status, impact) = server.get(
        "/api/v1/impact/dataset:warehouse:fin-qa?since=2025-01-01T00:00:00Z",
        None,
    );
    assert_eq!(status, 200, "{impact}");
    assert_eq!(
        impact["affected"]["adapter"],
        json!(["adapter:fin-lora@7"]),
        "{impact}"
    );
    assert!(impact["affected"]["route"]
        .as_array()
        .unwrap()
        .contains(&json!("route:/v1/chat/completions")));
    assert_eq!(
        impact["requests_served"]["traces"], 3,
        "inst-3 served all three: {impact}"
    );
    let served: Vec<(String, u64)> = impact["requests_served"]["by_node"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_owned(),
                n["traces"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        served.contains(&("adapter:fin-lora@7".to_owned(), 2)),
        "{served:?}"
    );
    assert!(
        served.contains(&("instance:inst-3".to_owned(), 3)),
        "{served:?}"
    );
    let plan = impact["plan"].as_array().unwrap();
    let action = |node: &str| {
        plan.iter()
            .find(|p| p["node"] == node)
            .map(|p| p["action"].as_str().unwrap().to_owned())
    };
    assert_eq!(action("adapter:fin-lora@7").as_deref(), Some("anonymize"));
    assert_eq!(action("instance:inst-3").as_deref(), Some("notify"));
    let (ok, out, err) = server.cli(&["impact", "fin-qa", "--since", "1700000000"]);
    assert!(ok, "{err}");
    assert!(out.contains("anonymize  adapter:fin-lora@7"), "{out}");
    assert!(
        out.contains("requests served by affected adapters/instances: 3 traces"),
        "{out}"
    );

    prov_export_is_valid_rdf(&server, dir.path());

    // Ambiguous and unknown names.
    let (status, body) = server.get("/api/v1/lineage/nothing-like-this", None);
    assert_eq!(status, 404, "{body}");

    // The CLI: tree, json and dot.
    let (ok, tree, err) = server.cli(&[
        "lineage",
        "dataset:warehouse:fin-qa",
        "--down",
        "--depth",
        "6",
    ]);
    assert!(ok, "{err}");
    assert!(tree.starts_with("dataset:warehouse:fin-qa\n"), "{tree}");
    assert!(tree.contains("-> adapter:fin-lora@7  (produced)"), "{tree}");
    let (ok, dot, _) = server.cli(&["lineage", "adapter:fin-lora@7", "--up", "--format", "dot"]);
    assert!(ok);
    assert!(dot.starts_with("digraph lineage {") && dot.contains("\"model:meta-llama/Meta-Llama-3-8B\" -> \"adapter:fin-lora@7\" [label=\"base_of\"]"), "{dot}");
    // Graphviz renders it, each node's kind above its key.
    if let Some(dot_bin) = graphviz("rendering the dot output") {
        let rendered = pipe_through(&dot_bin, &["-Tsvg"], &dot);
        let svg = String::from_utf8_lossy(&rendered.stdout);
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        assert!(
            svg.contains(">adapter</text>") && svg.contains(">fin&#45;lora@7</text>"),
            "{svg}"
        );
    }
    let (ok, json_out, _) = server.cli(&[
        "lineage", "inst-3", "--up", "--depth", "1", "--format", "json",
    ]);
    assert!(ok);
    let parsed: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(parsed["root"], "instance:inst-3");
}

/// PROV-O of the platform above: the whole graph and one request's chain, in Turtle
/// and JSON-LD; each passes `validate-prov` and parses with Python's rdflib.
fn prov_export_is_valid_rdf(server: &TestServer, dir: &std::path::Path) {
    let request = format!("request:{}", hex(&[1u8; 16]));
    let exports = [
        ("all.ttl", vec!["export", "prov", "--format", "turtle"]),
        ("all.jsonld", vec!["export", "prov", "--format", "jsonld"]),
        (
            "request.ttl",
            vec![
                "export",
                "prov",
                "--root",
                request.as_str(),
                "--format",
                "turtle",
            ],
        ),
        (
            "request.jsonld",
            vec![
                "export",
                "prov",
                "--root",
                request.as_str(),
                "--format",
                "jsonld",
            ],
        ),
    ];
    for (name, args) in exports {
        let path = dir.join(name);
        let mut args = args.clone();
        let path_str = path.to_str().unwrap().to_owned();
        args.extend(["--output", path_str.as_str()]);
        let (ok, _, err) = server.cli(&args);
        assert!(ok, "{name}: {err}");
        let out = std::process::Command::new(BIN)
            .args(["validate-prov", &path_str])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("valid: "),
            "{name}"
        );
        let Some(python) = test_python("the rdflib check") else {
            continue;
        };
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/prov_check.py");
        let out = std::process::Command::new(python)
            .args([script, &path_str])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rdflib could not read {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let used: Vec<(String, String)> = parsed["used"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p[0].as_str().unwrap().to_owned(),
                    p[1].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let run = format!("urn:threadline:run:{RUN_ID}");
        if name.starts_with("all") {
            // The training run used fin-qa v3 and generated the adapter.
            assert!(
                used.contains(&(
                    run.clone(),
                    "urn:threadline:dataset_version:warehouse%3Afin-qa@v3".to_owned()
                )),
                "{name}: {used:?}"
            );
            assert!(
                parsed["generated"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(["urn:threadline:adapter:fin-lora@7", run])),
                "{name}: {parsed}"
            );
            assert!(parsed["activities"].as_u64().unwrap() >= 1);
        } else {
            let activity = format!("urn:threadline:{request}");
            assert!(
                used.contains(&(
                    activity.clone(),
                    "urn:threadline:adapter:fin-lora@7".to_owned()
                )),
                "{name}: {used:?}"
            );
            assert!(parsed["started"][&activity].is_string(), "{name}: {parsed}");
            assert!(parsed["generated"].as_array().unwrap().contains(&json!([
                format!("urn:threadline:response:{}", hex(&[1u8; 16])),
                activity
            ])));
        }
    }

    // Deliberately broken documents: each names its rule and the offending IRIs.
    let prefix = "@prefix prov: <http://www.w3.org/ns/prov#> .\n@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .\n";
    let t = |s: &str| format!("\"{s}\"^^xsd:dateTime");
    let cases = [
        ("C30", format!("<urn:a> a prov:Activity ; prov:startedAtTime {} ; prov:endedAtTime {} .", t("2024-01-02T00:00:00Z"), t("2024-01-01T00:00:00Z")), "urn:a"),
        ("activity-start", "<urn:a> a prov:Activity .".to_owned(), "urn:a"),
        ("used-entity", format!("<urn:a> a prov:Activity ; prov:startedAtTime {} ; prov:used <urn:not-an-entity> .", t("2024-01-01T00:00:00Z")), "urn:not-an-entity"),
        ("C33", format!("<urn:a> a prov:Activity ; prov:startedAtTime {} ; prov:endedAtTime {} ; prov:qualifiedUsage [ prov:entity <urn:e> ; prov:atTime {} ] .\n<urn:e> a prov:Entity .", t("2024-01-01T00:00:00Z"), t("2024-01-01T01:00:00Z"), t("2024-01-02T00:00:00Z")), "urn:a"),
        ("C34", format!("<urn:a> a prov:Activity ; prov:startedAtTime {} ; prov:endedAtTime {} .\n<urn:e> a prov:Entity ; prov:qualifiedGeneration [ prov:activity <urn:a> ; prov:atTime {} ] .", t("2024-01-01T00:00:00Z"), t("2024-01-01T01:00:00Z"), t("2023-12-31T00:00:00Z")), "urn:e"),
        ("C37", format!("<urn:a> a prov:Activity ; prov:startedAtTime {} ; prov:qualifiedUsage [ prov:entity <urn:e> ; prov:atTime {} ] .\n<urn:e> a prov:Entity ; prov:generatedAtTime {} .", t("2024-01-01T00:00:00Z"), t("2024-01-01T00:00:00Z"), t("2024-06-01T00:00:00Z")), "urn:e"),
        ("C41", format!("<urn:d> a prov:Entity ; prov:wasDerivedFrom <urn:s> ; prov:generatedAtTime {} .\n<urn:s> a prov:Entity ; prov:generatedAtTime {} .", t("2024-01-01T00:00:00Z"), t("2024-02-01T00:00:00Z")), "urn:d"),
        ("C42", format!("<urn:a> a prov:Activity ; prov:startedAtTime {} ; prov:qualifiedUsage [ prov:entity <urn:s> ; prov:atTime {} ] .\n<urn:s> a prov:Entity .\n<urn:d> a prov:Entity ; prov:wasDerivedFrom <urn:s> ; prov:qualifiedGeneration [ prov:activity <urn:a> ; prov:atTime {} ] .", t("2024-01-01T00:00:00Z"), t("2024-01-01T05:00:00Z"), t("2024-01-01T02:00:00Z")), "urn:d"),
        ("derivation-cycle", "<urn:x> a prov:Entity ; prov:wasDerivedFrom <urn:y> .\n<urn:y> a prov:Entity ; prov:wasDerivedFrom <urn:x> .".to_owned(), "urn:x"),
    ];
    for (rule, body, iri) in cases {
        let path = dir.join(format!("broken-{rule}.ttl"));
        std::fs::write(&path, format!("{prefix}{body}\n")).unwrap();
        let out = std::process::Command::new(BIN)
            .args(["validate-prov", path.to_str().unwrap()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{rule}: accepted:\n{stdout}");
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{rule}:")))
            .unwrap_or_else(|| panic!("{rule} not reported:\n{stdout}"));
        assert!(line.contains(iri), "{rule}: {line}");
    }
    let garbage = dir.join("garbage.ttl");
    std::fs::write(&garbage, "this is { not turtle").unwrap();
    let out = std::process::Command::new(BIN)
        .args(["validate-prov", garbage.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid Turtle document"));
}
