//! OpenLineage conformance: every event of the shared corpus (Spark, Airflow, Dataproc,
//! Marquez, the spec) is accepted and its jobs, runs and datasets appear in the graph;
//! lenient envelopes are accepted with a warning; the invalid ones are refused (missing
//! required field) or stored with the broken facet flagged.

use std::path::Path;

use serde_json::Value;

use crate::harness::*;

pub(crate) fn events_in(dir: &Path) -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no events in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read(&p).unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::from_slice(&text).unwrap(),
            )
        })
        .collect()
}

/// The corpus files reuse run ids and event times across unrelated events (they are
/// fixtures of separate test stores), and (runId, eventType, eventTime) is what makes
/// an event a duplicate: each file gets a tenant of its own.
fn server_with_tenants(n: usize) -> TestServer {
    let config: String = (0..n)
        .map(|i| {
            format!(
                "[[tenants]]\nid = \"ol-{i}\"\napi_keys = [\"{}\"]\n",
                key(i)
            )
        })
        .collect();
    TestServer::start_with_config(Some(&config))
}

fn key(i: usize) -> String {
    format!("openlineage-file-key-{i:04}")
}

fn post_event(server: &TestServer, event: &Value, i: usize) -> (u16, Value) {
    server.post_json(
        "/api/v1/lineage",
        event.to_string().into_bytes(),
        &[],
        Some(&key(i)),
    )
}

fn get(server: &TestServer, path: &str, i: usize) -> (u16, Value) {
    server.get(path, Some(&key(i)))
}

/// Node ids the event's run, job and datasets must have in the graph.
fn expected_nodes(event: &Value) -> Vec<String> {
    let mut ids = Vec::new();
    if let Some(job) = event.get("job") {
        ids.push(format!(
            "job:{}:{}",
            job["namespace"].as_str().unwrap(),
            job["name"].as_str().unwrap()
        ));
    }
    if let Some(run_id) = event.pointer("/run/runId").and_then(Value::as_str) {
        ids.push(format!("run:{run_id}"));
    }
    let datasets = ["inputs", "outputs"]
        .iter()
        .flat_map(|k| {
            event
                .get(*k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        // A DatasetEvent's `dataset`; next to run/job it is an unknown property.
        .chain(
            event
                .get("dataset")
                .filter(|_| event.get("run").is_none())
                .cloned(),
        );
    for ds in datasets {
        ids.push(format!(
            "dataset:{}:{}",
            ds["namespace"].as_str().unwrap(),
            ds["name"].as_str().unwrap()
        ));
    }
    ids
}

#[test]
fn every_corpus_openlineage_event_is_accepted_and_lands_in_the_graph() {
    let dir = corpus_dir().join("openlineage");
    let events = events_in(&dir);
    assert!(
        events.len() >= 40,
        "expected the shared corpus, found {}",
        events.len()
    );
    // One more tenant holds the whole corpus in order, for the run-history checks.
    let all = events.len();
    let server = server_with_tenants(all + 1);
    for (i, (file, event)) in events.iter().enumerate() {
        let (status, body) = post_event(&server, event, i);
        assert_eq!(status, 201, "{file}: {body}");
        assert_eq!(body["status"], "stored", "{file}: {body}");
        post_event(&server, event, all);
        for id in expected_nodes(event) {
            let (status, graph) = get(
                &server,
                &format!("/api/v1/lineage/{}?depth=1", encode_node(&id)),
                i,
            );
            assert_eq!(status, 200, "{file}: node {id} missing: {graph}");
            assert_eq!(graph["root"], id.as_str(), "{file}");
        }
    }

    // A run's state and times follow its events: the Spark CTAS run went
    // START → RUNNING → RUNNING → COMPLETE, and its output carries column lineage.
    let ctas = &events
        .iter()
        .find(|(f, _)| f == "spark-ctas-complete-columnlineage.json")
        .unwrap()
        .1;
    let run_id = ctas["run"]["runId"].as_str().unwrap();
    let (_, graph) = get(
        &server,
        &format!(
            "/api/v1/lineage/{}?depth=1",
            encode_node(&format!("run:{run_id}"))
        ),
        all,
    );
    let run = find_in(&graph["nodes"], "kind", "run");
    assert_eq!(run["props"]["state"], "COMPLETE", "{run}");
    assert!(
        run["props"]["started_at_ns"].as_i64().unwrap()
            < run["props"]["ended_at_ns"].as_i64().unwrap()
    );
    let output = find_in(&graph["nodes"], "kind", "dataset_version");
    assert!(
        output["props"]["facets"]["columnLineage"]["fields"].is_object(),
        "{output}"
    );

    // Column lineage across two Airflow BigQuery tasks: upload_cp.a ← upload.a ← the
    // two CSV files' `a`.
    let (status, columns) = get(
        &server,
        "/api/v1/column-lineage?nodeId=datasetField:bigquery:mock-project.test.upload_cp:a",
        all,
    );
    assert_eq!(status, 200, "{columns}");
    let field = |id: &str| find_in(&columns["graph"], "id", id).clone();
    let upload = field("datasetField:bigquery:mock-project.test.upload:a");
    assert_eq!(
        upload["outEdges"][0]["destination"],
        "datasetField:bigquery:mock-project.test.upload_cp:a"
    );
    assert_eq!(upload["inEdges"].as_array().unwrap().len(), 2, "{upload}");
    let csv = field("datasetField:gs://mock-bucket:copied.csv:a");
    assert_eq!(csv["type"], "DATASET_FIELD");
    let (status, _) = get(
        &server,
        "/api/v1/column-lineage?nodeId=dataset:bigquery:nope",
        all,
    );
    assert_eq!(status, 404);

    // Custom facets are stored, not dropped.
    let (_, graph) = get(
        &server,
        &format!(
            "/api/v1/lineage/{}?depth=0",
            encode_node("job:my-scheduler-namespace:myjob.mytask")
        ),
        all,
    );
    assert!(
        graph["nodes"][0]["props"]["facets"]["additionalProp1"].is_object(),
        "{graph}"
    );
}

#[test]
fn the_same_event_twice_is_stored_once() {
    let server = server_with_tenants(1);
    let (_, event) = events_in(&corpus_dir().join("openlineage"))
        .into_iter()
        .find(|(f, _)| f == "marquez-simple.json")
        .unwrap();
    assert_eq!(post_event(&server, &event, 0).1["status"], "stored");
    assert_eq!(post_event(&server, &event, 0).1["status"], "duplicate");
    // gzip is accepted.
    let (status, body) = server.post_json(
        "/api/v1/lineage",
        gzip(event.to_string().as_bytes()),
        &[("content-encoding", "gzip")],
        Some(&key(0)),
    );
    assert_eq!((status, body["status"].as_str()), (201, Some("duplicate")));
}

#[test]
fn lenient_events_are_accepted_with_a_warning() {
    let events = events_in(&corpus_dir().join("openlineage/lenient"));
    let server = server_with_tenants(events.len());
    for (i, (file, event)) in events.into_iter().enumerate() {
        let (status, body) = post_event(&server, &event, i);
        assert_eq!(status, 201, "{file}: {body}");
        let warnings = body["warnings"].as_array().unwrap();
        assert!(
            !warnings.is_empty(),
            "{file}: accepted without a warning: {body}"
        );
        for id in expected_nodes(&event) {
            let (status, _) = get(
                &server,
                &format!("/api/v1/lineage/{}?depth=0", encode_node(&id)),
                i,
            );
            assert_eq!(status, 200, "{file}: {id}");
        }
    }
}

#[test]
fn invalid_events_are_refused_or_flagged() {
    let events = events_in(&corpus_dir().join("openlineage/invalid"));
    let server = server_with_tenants(events.len());
    let mut output_stats_tenant = None;
    for (i, (file, event)) in events.into_iter().enumerate() {
        let (status, body) = post_event(&server, &event, i);
        if file == "proxy-invalid-output-dataset-facet.json" {
            output_stats_tenant = Some(i);
        }
        if file == "proxy-no-run-id.json" {
            assert_eq!(status, 400, "{file}: {body}");
            assert!(
                body["error"].as_str().unwrap().contains("run.runId"),
                "{file}: {body}"
            );
            continue;
        }
        // A known facet that breaks its schema: stored raw, flagged, reported.
        assert_eq!(status, 201, "{file}: {body}");
        let warning = body["warnings"][0]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no warning: {body}"));
        assert!(
            warning.contains("breaks the facet's schema"),
            "{file}: {warning}"
        );
    }
    // The broken outputStatistics is kept under invalid_facets, not as a facet.
    let (_, graph) = get(
        &server,
        &format!(
            "/api/v1/lineage/{}?direction=downstream&depth=1",
            encode_node("dataset:my-datasource-namespace:instance.schema.output-1")
        ),
        output_stats_tenant.expect("the outputStatistics fixture"),
    );
    let versions: Vec<&Value> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "dataset_version")
        .collect();
    assert!(
        versions.iter().any(
            |v| v["props"]["invalid_facets"]["outputStatistics"]["rowCount"] == "wrong"
                && v["props"]["outputFacets"].get("outputStatistics").is_none()
        ),
        "{graph}"
    );

    // Bodies that are not events at all.
    for (body, needle) in [
        (&b"{not json"[..], "not valid JSON"),
        (&br#"{"eventTime": "2024-01-01T00:00:00Z", "producer": "p", "schemaURL": "s"}"#[..], "run"),
        (&br#"{"eventTime": "noon", "run": {"runId": "x"}, "job": {"namespace": "n", "name": "j"}}"#[..], "eventTime"),
    ] {
        let (status, resp) = server.post_json("/api/v1/lineage", body.to_vec(), &[], Some(&key(0)));
        assert_eq!(status, 400, "{resp}");
        assert!(resp["error"].as_str().unwrap().contains(needle), "{resp}");
    }
}

#[test]
fn openlineage_python_client_events_build_the_pipeline_graph() {
    let Some(python) = test_python("the openlineage-python client test") else {
        return;
    };
    let server = TestServer::start_with_config(Some(
        "[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-secret-key-0001\"]\n[[tenants]]\nid = \"other\"\napi_keys = [\"other-secret-key-0002\"]\n",
    ));
    let run_id = "3f0c9a62-7d1e-4b55-9a8e-1c2d3e4f5a6b";
    let parent_id = "0193aa00-1111-7222-8333-444455556666";
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/openlineage_send.py"
    );
    let out = std::process::Command::new(python)
        .args([
            script,
            "--url",
            &server.api,
            "--api-key",
            "acme-secret-key-0001",
            "--run-id",
            run_id,
            "--parent-run-id",
            parent_id,
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = Some("acme-secret-key-0001");

    // dataset → version → run → artifact version, with the run's state and parent.
    let (status, graph) = server.get(
        &format!(
            "/api/v1/lineage/{}?direction=downstream&depth=4",
            encode_node("dataset:warehouse:fin-qa")
        ),
        key,
    );
    assert_eq!(status, 200, "{graph}");
    let ids: Vec<&str> = strings_of(&graph["nodes"], "id");
    for want in [
        "dataset_version:warehouse:fin-qa@v3",
        &format!("run:{run_id}"),
        &format!("dataset_version:s3://models:fin-lora/7@run-{run_id}"),
    ] {
        assert!(
            ids.contains(&want),
            "{want} not downstream of fin-qa: {ids:?}"
        );
    }
    let run = find_in(&graph["nodes"], "kind", "run");
    assert_eq!(run["props"]["state"], "COMPLETE");
    let version = find_in(&graph["nodes"], "id", "dataset_version:warehouse:fin-qa@v3");
    assert_eq!(
        version["props"]["inputFacets"]["dataQualityMetrics"]["rowCount"], 12000,
        "{version}"
    );
    assert_eq!(
        version["props"]["facets"]["schema"]["fields"][1]["name"],
        "answer"
    );

    // The parent facet links the Airflow run above ours; a bare name resolves.
    let (status, up) = server.get(
        &format!("/api/v1/lineage/{run_id}?direction=upstream&depth=2&kinds=run,job"),
        key,
    );
    assert_eq!(status, 200, "{up}");
    let up_ids: Vec<&str> = strings_of(&up["nodes"], "id");
    assert!(
        up_ids.contains(&format!("run:{parent_id}").as_str()),
        "{up_ids:?}"
    );
    assert!(
        up_ids.contains(&"job:airflow:nightly-finetune"),
        "{up_ids:?}"
    );
    assert!(up_ids.contains(&"job:training:finetune-fin"), "{up_ids:?}");

    // DatasetEvent and JobEvent; and Marquez's graph shape for the eval job.
    let (status, _) = server.get(
        &format!(
            "/api/v1/lineage/{}",
            encode_node("dataset:warehouse:fin-qa-holdout")
        ),
        key,
    );
    assert_eq!(status, 200);
    let (status, marquez) = server.get("/api/v1/lineage?nodeId=job:training:eval-fin&depth=2", key);
    assert_eq!(status, 200, "{marquez}");
    let job = find_in(&marquez["graph"], "id", "job:training:eval-fin");
    assert_eq!(job["type"], "JOB");
    assert_eq!(
        job["inEdges"][0]["origin"], "dataset:warehouse:fin-qa-holdout",
        "{job}"
    );
    assert_eq!(
        job["outEdges"][0]["destination"], "dataset:warehouse:fin-eval-report",
        "{job}"
    );
    let (_, marquez) = server.get(
        "/api/v1/lineage?nodeId=dataset:warehouse:fin-qa&depth=1",
        key,
    );
    let ds = find_in(&marquez["graph"], "id", "dataset:warehouse:fin-qa");
    assert_eq!(ds["type"], "DATASET");
    assert_eq!(
        ds["outEdges"][0]["destination"], "job:training:finetune-fin",
        "{ds}"
    );

    // Another tenant sees none of it.
    let (status, _) = server.get(
        &format!(
            "/api/v1/lineage/{}",
            encode_node("dataset:warehouse:fin-qa")
        ),
        Some("other-secret-key-0002"),
    );
    assert_eq!(status, 404);
    let (status, _) = server.get(
        "/api/v1/lineage?nodeId=dataset:warehouse:fin-qa",
        Some("other-secret-key-0002"),
    );
    assert_eq!(status, 404);
}

/// A RunEvent reading one version of `warehouse/fin-qa` with schema and quality facets.
fn training_read(
    run: &str,
    version: &str,
    fields: &[(&str, &str)],
    rows: u64,
    nulls: u64,
) -> Value {
    use serde_json::json;
    json!({
        "eventType": "COMPLETE",
        "eventTime": "2026-11-30T10:00:00Z",
        "producer": "https://example.com/trainer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": run},
        "job": {"namespace": "training", "name": "finetune-fin"},
        "inputs": [{
            "namespace": "warehouse", "name": "fin-qa",
            "facets": {
                "version": {"_producer": "p", "_schemaURL": "s", "datasetVersion": version},
                "schema": {"_producer": "p", "_schemaURL": "s",
                    "fields": fields.iter().map(|(n, t)| serde_json::json!({"name": n, "type": t})).collect::<Vec<_>>()}
            },
            "inputFacets": {"dataQualityMetrics": {"_producer": "p", "_schemaURL": "s",
                "rowCount": rows,
                "columnMetrics": {"answer": {"nullCount": nulls, "distinctCount": 800}}}}
        }],
        "outputs": []
    })
}

#[test]
fn a_drifted_dataset_version_carries_its_drift_in_lineage_queries() {
    let server = server_with_tenants(1);
    let fields = [("question", "string"), ("answer", "string")];
    let v1 = training_read(
        "01935a2e-0000-7000-8000-000000000001",
        "v1",
        &fields,
        10_000,
        100,
    );
    assert_eq!(post_event(&server, &v1, 0).0, 201);
    // Same shape, a few more rows: no drift.
    let v2 = training_read(
        "01935a2e-0000-7000-8000-000000000002",
        "v2",
        &fields,
        11_000,
        120,
    );
    assert_eq!(post_event(&server, &v2, 0).0, 201);
    let drifted_fields = [
        ("question", "string"),
        ("answer", "string"),
        ("source", "string"),
    ];
    let v3 = training_read(
        "01935a2e-0000-7000-8000-000000000003",
        "v3",
        &drifted_fields,
        11_000,
        1_320,
    );
    assert_eq!(post_event(&server, &v3, 0).0, 201);
    let node = |v: &str| {
        let (status, body) = get(
            &server,
            &format!(
                "/api/v1/lineage/{}?depth=0",
                encode_node(&format!("dataset_version:warehouse:fin-qa@{v}"))
            ),
            0,
        );
        assert_eq!(status, 200, "{body}");
        body["nodes"][0]["props"].clone()
    };
    assert!(node("v2").get("drift").is_none(), "{}", node("v2"));
    let drift = node("v3")["drift"].clone();
    assert_eq!(
        drift["previous_version"],
        "dataset_version:warehouse:fin-qa@v2"
    );
    let kinds: Vec<&str> = drift["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["field_added", "null_rate"], "{drift}");
}

#[test]
fn drift_thresholds_come_from_the_config() {
    let server = TestServer::start_with_config(Some("[drift]\nnull_rate_points = 20.0\n"));
    let fields = [("question", "string"), ("answer", "string")];
    let more = [
        ("question", "string"),
        ("answer", "string"),
        ("source", "string"),
    ];
    for event in [
        training_read(
            "01935a2e-0000-7000-8000-000000000011",
            "v1",
            &fields,
            10_000,
            100,
        ),
        training_read(
            "01935a2e-0000-7000-8000-000000000012",
            "v2",
            &more,
            11_000,
            1_320,
        ),
    ] {
        let (status, body) =
            server.post_json("/api/v1/lineage", event.to_string().into_bytes(), &[], None);
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = server.get(
        &format!(
            "/api/v1/lineage/{}?depth=0",
            encode_node("dataset_version:warehouse:fin-qa@v2")
        ),
        None,
    );
    assert_eq!(status, 200, "{body}");
    // 1 % → 12 % nulls is under the configured 20 points: only the new field is drift.
    let kinds: Vec<&str> = body["nodes"][0]["props"]["drift"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["field_added"], "{body}");
}
