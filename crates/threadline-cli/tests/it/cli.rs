//! The client commands as users run them: search, trace, loadgen.

use crate::harness::*;

#[test]
fn search_trace_and_loadgen_commands() {
    let server = TestServer::start();
    let report = cli_json(&[
        "loadgen",
        "--endpoint",
        &server.otlp_http,
        "--duration",
        "1.5",
        "--concurrency",
        "2",
        "--json",
    ]);
    assert!(report["spans_acked"].as_u64().unwrap() >= 100, "{report}");
    assert!(report["spans_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["ack_p99_ms"].as_f64().unwrap() >= report["ack_p50_ms"].as_f64().unwrap());

    let (ok, table, err) = server.cli(&["search", "--service", "gateway", "--limit", "5"]);
    assert!(ok, "{err}");
    assert!(table.contains("gateway POST /v1/"), "{table}");
    assert!(table.contains("5 trace(s)"), "{table}");
    assert!(table.contains("more: --cursor"), "{table}");

    let (ok, json, err) = server.cli(&[
        "search",
        "--attr",
        "gen_ai.tool.name=lookup_account",
        "--max-duration",
        "10s",
        "--json",
        "--limit",
        "2",
    ]);
    assert!(ok, "{err}");
    let page: serde_json::Value = serde_json::from_str(&json).unwrap();
    let first = page["traces"][0]["trace_id"].as_str().unwrap().to_owned();
    assert_eq!(page["traces"][0]["span_count"], 4);
    assert!(page["next_cursor"].is_string());

    // Free text over loadgen's prompts and replies; the tool span's name too.
    let (ok, json, err) = server.cli(&[
        "search",
        "--text",
        "Quarterly EARN",
        "--json",
        "--limit",
        "3",
    ]);
    assert!(ok, "{err}");
    let page: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(page["traces"].as_array().map(Vec::len), Some(3), "{page}");
    let (ok, table, err) = server.cli(&["search", "--text", "zebra crossing"]);
    assert!(ok, "{err}");
    assert!(table.contains("0 trace(s)"), "{table}");

    let (ok, tree, err) = server.cli(&["trace", &first]);
    assert!(ok, "{err}");
    assert!(tree.contains(&format!("trace {first}")), "{tree}");
    assert!(tree.contains("└─ gateway POST"), "{tree}");
    assert!(
        tree.contains("model=meta-llama/Meta-Llama-3-8B-Instruct"),
        "{tree}"
    );
    assert!(tree.contains("tool=lookup_account"), "{tree}");

    let (ok, _, err) = server.cli(&["trace", "not-a-trace-id"]);
    assert!(!ok);
    assert!(err.contains("400") && err.contains("trace id"), "{err}");
    let (ok, _, err) = server.cli(&["search", "--min-duration", "soon"]);
    assert!(!ok);
    assert!(err.contains("min_duration"), "{err}");
}

#[test]
fn loadgen_sends_openlineage_events_that_land_in_the_graph() {
    let server = TestServer::start();
    let report = cli_json(&[
        "loadgen",
        "--openlineage",
        "--endpoint",
        &server.api,
        "--duration",
        "1",
        "--concurrency",
        "2",
        "--json",
    ]);
    assert!(report["spans_acked"].as_u64().unwrap() > 10, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    // The pipelines' jobs, runs and datasets are in the graph.
    let job = (0..200)
        .map(|n| format!("job:pipelines:job-{n}"))
        .find(|id| {
            server
                .get(
                    &format!("/api/v1/lineage/{}?depth=0", encode_node(id)),
                    None,
                )
                .0
                == 200
        })
        .expect("no loadgen job in the graph");
    let (_, graph) = server.get(
        &format!(
            "/api/v1/lineage/{}?direction=downstream&depth=2",
            encode_node(&job)
        ),
        None,
    );
    let kinds: Vec<&str> = strings_of(&graph["nodes"], "kind");
    assert!(
        kinds.contains(&"run") && kinds.contains(&"dataset_version"),
        "{graph}"
    );
}

/// `bench openlineage` applies every event it generates (one run each) and reports
/// its rate and CPU per event.
#[test]
fn bench_openlineage_applies_every_event_in_process() {
    let report = cli_json(&[
        "bench",
        "openlineage",
        "--events",
        "300",
        "--in-flight",
        "8",
    ]);
    assert_eq!(report["events"], 300, "{report}");
    assert_eq!(report["runs_stored"], 300, "{report}");
    assert!(report["events_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        report["cpu_us_per_event"].as_f64().unwrap() > 0.0,
        "{report}"
    );
}

/// A reader that stops early (`threadline search --json | head -1`) ends the command
/// quietly: exit 0, no panic.
#[test]
fn a_closed_pipe_ends_output_quietly() {
    use std::io::{BufRead, BufReader};
    let server = TestServer::start();
    cli_json(&[
        "loadgen",
        "--endpoint",
        &server.otlp_http,
        "--duration",
        "2",
        "--concurrency",
        "2",
        "--json",
    ]);
    for args in [
        vec!["search", "--limit", "1000", "--json"],
        vec!["search", "--limit", "1000"],
    ] {
        let mut child = std::process::Command::new(BIN)
            .args(&args)
            .args(["--server", &server.api])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // The reader is gone now.
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{stderr}"
        );
        assert!(!first.is_empty());
    }
}

/// A client command sent to the OTLP port by mistake is told where the API is.
#[test]
fn the_otlp_port_says_it_is_not_the_api() {
    let server = TestServer::start();
    let (ok, _, err) = cli_at(&server.otlp_http, &["search"]);
    assert!(!ok);
    assert!(
        err.contains("OTLP/HTTP receiver") && err.contains("API port"),
        "{err}"
    );
    // `--server` without a scheme is http://.
    let bare = server.api.trim_start_matches("http://");
    let (ok, out, err) = cli_at(bare, &["search", "--limit", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("trace(s)"), "{out}");
}

/// Diagnosis over a window with no requests says so instead of an empty list.
#[test]
fn an_empty_window_says_so() {
    let server = TestServer::start();
    let (ok, out, err) = server.cli(&[
        "rca",
        "--route",
        "/nowhere",
        "--metric",
        "p99_latency",
        "--at",
        "2026-12-01T09:00:00+01:00",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("route=/nowhere: no requests") && out.contains("2026-12-01T08:10:00Z"),
        "{out}"
    );
    let (status, metrics) = server.get("/api/v1/metrics?metric=p99_latency&from=0&to=100000", None);
    assert_eq!(status, 200);
    assert!(
        metrics["note"].as_str().unwrap().contains("no requests"),
        "{metrics}"
    );
}

/// `bench diagnosis` generates scenarios, sends them to servers of their own and
/// scores them: here two faults of different sources (a lineage change on part of a
/// fleet, a plain upstream span), each found on its route with its cause in the top 3.
#[test]
fn bench_diagnosis_scores_generated_faults_end_to_end() {
    let report = cli_json(&[
        "bench",
        "diagnosis",
        "--seed",
        "11",
        "--scenarios",
        "2",
        "--kinds",
        "adapter_hot_swap,retriever_slow",
    ]);
    let totals = &report["totals"];
    assert_eq!(totals["scenarios"], 2, "{report}");
    assert!(report["spans"].as_u64().unwrap() > 50_000, "{report}");
    assert_eq!(totals["faulty_route_found"], 2, "{report}");
    assert_eq!(totals["top3"], 2, "{report}");
    assert_eq!(totals["false_incidents"], 0, "{report}");
    for kind in ["adapter_hot_swap", "retriever_slow"] {
        assert_eq!(report["by_kind"][kind]["scenarios"], 1, "{report}");
    }
}

/// `bench diagnosis --sensitivity` runs the servers' detectors at another
/// sensitivity: at 40 robust standard deviations nothing is out, so a fault the
/// default finds goes unfound, and the report says which sensitivity and α it is
/// for. A sensitivity that is no positive number is refused, by name.
#[test]
fn bench_diagnosis_runs_the_detector_at_the_sensitivity_asked() {
    let report = cli_json(&[
        "bench",
        "diagnosis",
        "--seed",
        "11",
        "--scenarios",
        "1",
        "--kinds",
        "upstream_slow",
        "--sensitivity",
        "40",
    ]);
    assert_eq!(report["sensitivity"], 40.0, "{report}");
    assert!(report["alpha"].as_f64().unwrap() < 1e-300, "{report}");
    assert_eq!(report["totals"]["faulty_route_found"], 0, "{report}");
    assert_eq!(report["totals"]["false_incidents"], 0, "{report}");

    let out = std::process::Command::new(BIN)
        .args([
            "bench",
            "diagnosis",
            "--sensitivity",
            "0",
            "--scenarios",
            "1",
        ])
        .output()
        .expect("run cli");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--sensitivity 0 must be"), "{stderr}");
}

/// `bench diagnosis --only` prints one scenario to look into: its fault, its
/// incidents with candidates, the faulty route's minutes around the onset, whole and
/// by the dimension of the true cause, and — for a fault that fails requests — how
/// probable its first two minutes' errors were by chance.
#[test]
fn bench_diagnosis_only_prints_the_scenario_and_its_minutes() {
    let out = cli_json(&[
        "bench",
        "diagnosis",
        "--seed",
        "11",
        "--kinds",
        "instance_errors",
        "--only",
        "0",
    ]);
    assert_eq!(out["fault"]["kind"], "instance_errors", "{out}");
    let cause = out["fault"]["cause"].as_str().unwrap();
    assert!(cause.starts_with("instance="), "{out}");
    assert!(!out["incidents"].as_array().unwrap().is_empty(), "{out}");
    let minutes = &out["faulty_route_minutes"];
    let whole = minutes["error_rate"].as_array().unwrap();
    assert_eq!(whole.len(), 21, "{minutes}");
    let hit = minutes[format!("error_rate {cause}")].as_array().unwrap();
    assert_eq!(hit.len(), 21, "{minutes}");
    // After the onset (the 11th minute), the failing instance has errors.
    let failing = hit[10..]
        .iter()
        .filter(|p| !p.as_str().unwrap().contains(": 0.0000 /"))
        .count();
    assert!(failing >= 5, "{minutes}");
    let chance = out["outcome"]["prompt_chance"]["any"].as_f64().unwrap();
    assert!(chance < 0.05, "{out}");
}

/// `serve` at its default log level says where it listens and little else (no line per
/// UI asset).
#[test]
fn serve_starts_with_a_few_lines() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(BIN)
        .args([
            "serve",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
        ])
        .args(["--http", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("THREADLINE_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    child.kill().unwrap();
    child.wait().unwrap();
    let lines = reader.join().unwrap();
    assert!(
        lines.iter().any(|l| l.contains(" http listening on ")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("memory_serve")),
        "{lines:#?}"
    );
    assert!(lines.len() <= 8, "{lines:#?}");
}

/// `trace` folds big groups of like siblings as the UI does (`--expand` shows each),
/// names LLM spans' ids, and `--span` prints one span's prompt and reply.
#[test]
fn trace_folds_like_siblings_and_prints_a_spans_conversation() {
    let server = TestServer::start();
    let mut req = llm_trace([4; 16], "gateway", "gpt-4o-mini", now_nanos());
    let spans = &mut req.resource_spans[0].scope_spans[0].spans;
    spans[1].attributes.push(kv(
        "gen_ai.input.messages",
        r#"[{"role":"user","parts":[{"type":"text","content":"Why was I charged twice?"}]}]"#,
    ));
    spans[1].attributes.push(kv(
        "gen_ai.output.messages",
        r#"[{"role":"assistant","parts":[{"type":"text","content":"One charge was refunded."}]}]"#,
    ));
    let root = spans[0].clone();
    for i in 0..12u8 {
        let mut chunk = root.clone();
        chunk.span_id = vec![9, 9, 9, 9, 9, 9, 9, i];
        chunk.parent_span_id = root.span_id.clone();
        chunk.name = "embed_chunk".into();
        chunk.attributes.clear();
        spans.push(chunk);
    }
    let resp = server.post_traces("application/x-protobuf", proto(&req), &[]);
    assert_eq!(resp.status(), 200);
    let id = hex(&[4; 16]);
    let (ok, tree, err) = server.cli(&["trace", &id]);
    assert!(ok, "{err}");
    assert!(tree.contains("12 × gateway embed_chunk"), "{tree}");
    assert_eq!(tree.lines().count(), 4, "{tree}");
    let (ok, all, _) = server.cli(&["trace", &id, "--expand"]);
    assert!(ok);
    assert_eq!(all.matches("embed_chunk").count(), 12, "{all}");
    assert!(tree.contains("span=0807060504030201"), "{tree}");
    let (ok, span, err) = server.cli(&["trace", &id, "--span", "0807060504030201"]);
    assert!(ok, "{err}");
    assert!(span.contains("> user: Why was I charged twice?"), "{span}");
    assert!(
        span.contains("< assistant: One charge was refunded."),
        "{span}"
    );
}

/// `bench rca-public --format rs` replays RobustSpot's real incidents (ten of the
/// development half, committed with their license) through servers of their own and
/// scores the first-ranked cause against each label: on data nobody here made, the
/// labelled slice — one value or a combination — comes first in most cases.
#[test]
fn bench_rca_public_names_the_service_of_nezha_faults_end_to_end() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nezha");
    let report = cli_json(&["bench", "rca-public", "--format", "nezha", "--path", dir]);
    let totals = &report["totals"];
    assert_eq!(totals["faults"], 2, "{report}");
    // A network delay shows in the callers' client spans, not the service's own: the
    // service called is named first all the same.
    for fault in report["faults"].as_array().unwrap() {
        assert_eq!(fault["rank"], 1, "{fault}");
        assert_eq!(fault["metric"], "p99_latency", "{fault}");
        assert!(fault["log_records"].as_u64().unwrap() > 1000, "{fault}");
    }
    assert_eq!(report["faults"][0]["top"][0], "ts-contacts-service");
    assert_eq!(report["faults"][1]["top"][0], "ts-route-service");
}

#[test]
fn bench_rca_public_scores_robustspot_incidents_end_to_end() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/robustspot");
    let report = cli_json(&["bench", "rca-public", "--format", "rs", "--path", dir]);
    let totals = &report["totals"];
    assert_eq!(totals["cases"], 10, "{report}");
    let exact = totals["top1_exact"].as_u64().unwrap();
    assert!(exact >= 5, "{totals}");
    // A combination of two values is found as one cause where its label says so.
    let pair = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == "case27_1116_1691592144")
        .unwrap();
    assert_eq!(pair["exact"], true, "{pair}");
    // The first candidate names one element (not either of two) of two values.
    assert_eq!(pair["top"][0].as_array().unwrap().len(), 1, "{pair}");
    assert_eq!(pair["top"][0][0].as_array().unwrap().len(), 2, "{pair}");
}
