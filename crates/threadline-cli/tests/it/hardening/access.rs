//! Who sees what: tenants only their own numbers, one process per data directory.

use super::PROTOBUF;
use crate::harness::*;

/// With tenants, the server-wide figures (span counts, queue depth, commits: every
/// tenant's volume over time) are for an operator key only: the health endpoint
/// without a key says it is alive and nothing more, a tenant's `/metrics` shows its
/// own series and no internals, and an operator key reads no tenant's data.
#[test]
fn tenants_see_only_their_own_numbers() {
    let (a, b, op) = (
        "tenant-a-key-0123456789",
        "tenant-b-key-0123456789",
        "operator-key-0123456789",
    );
    let server = TestServer::start_with_config(Some(&format!(
        "[[tenants]]\nid = \"a\"\napi_keys = [\"{a}\"]\n[[tenants]]\nid = \"b\"\napi_keys = [\"{b}\"]\n[operator]\napi_keys = [\"{op}\"]\n"
    )));
    let bearer_b = format!("Bearer {b}");
    let resp = server.post_traces(
        PROTOBUF,
        proto(&llm_trace([0x21; 16], "b-app", "gpt-4o", now_nanos())),
        &[("authorization", &bearer_b)],
    );
    assert_eq!(resp.status(), 200);

    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["auth_required"], true);
    assert!(
        health.get("store").is_none() && health.get("ingest").is_none(),
        "{health}"
    );
    let (_, health) = server.get("/api/v1/health", Some(a));
    assert_eq!(health["tenant"], "a");
    assert!(health.get("ingest").is_none(), "{health}");
    let (_, health) = server.get("/api/v1/health", Some(op));
    assert_eq!(health["ingest"]["spans_accepted"], 2, "{health}");

    let scrape = |key: &str| {
        let resp = client()
            .get(format!("{}/metrics", server.api))
            .bearer_auth(key)
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    let (status, text_a) = scrape(a);
    assert_eq!(status, 200);
    assert!(!text_a.contains("threadline_spans_ingested"), "{text_a}");
    assert!(!text_a.contains("threadline_write_queue"), "{text_a}");
    assert!(!text_a.contains("b-app"), "{text_a}");
    let (_, text_b) = scrape(b);
    assert!(text_b.contains("b-app"), "{text_b}");
    assert!(!text_b.contains("threadline_store_commits"), "{text_b}");
    let (_, text_op) = scrape(op);
    assert!(
        text_op.contains("threadline_spans_ingested_total 2"),
        "{text_op}"
    );
    assert!(!text_op.contains("b-app"), "{text_op}");
    // With keys, the Host is not checked: exporters use whatever name their network
    // gives the server.
    let resp = client()
        .get(format!("{}/api/v1/services", server.api))
        .header("host", "threadline.svc.cluster.local:8080")
        .bearer_auth(a)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    // An operator key is no tenant's key.
    let (status, body) = server.get("/api/v1/traces", Some(op));
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("operator key"),
        "{body}"
    );
}

/// A second `serve` on a data directory in use refuses to start and names the process
/// that holds it; once that one is gone (even by SIGKILL), the directory is free.
#[test]
fn a_second_server_on_the_same_data_directory_refuses_to_start() {
    let mut server = TestServer::start();
    let second = std::process::Command::new(BIN)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("run a second serve");
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("in use by process {}", server.pid())) && stderr.contains("serve"),
        "{stderr}"
    );
    // The first one is untouched, and after a crash the directory opens again.
    assert_eq!(server.get("/api/v1/services", None).0, 200);
    server.restart();
    assert_eq!(server.get("/api/v1/services", None).0, 200);
}
