//! GDPR erasure: every trace of a user disappears, other users' traces stay, the audit
//! log records it (without the id), and no byte of the id remains in the database
//! files — the WAL and the full-text index included.

use serde_json::Value;

use crate::harness::*;

const SUBJECT: &str = "user-5f3c9e-erase-me";
const OTHER: &str = "user-11aa22-keep-me";

fn request(trace: [u8; 16], user: &str, session: &str, start: u64) -> Vec<u8> {
    let mut req = llm_trace(trace, "gateway", "llama-3-8b", start);
    let spans = &mut req.resource_spans[0].scope_spans[0].spans;
    spans[0]
        .attributes
        .extend([kv("user.id", user), kv("session.id", session)]);
    spans[1].attributes.push(kv(
        "gen_ai.prompt",
        &format!("hello, I am {user} and my card was declined"),
    ));
    proto(&req)
}

#[test]
fn erasing_a_user_removes_every_byte_of_them() {
    let server = TestServer::start();
    let t0: u64 = 1_764_400_000_000_000_000;
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..60u8 {
        let (user, list) = if i % 3 == 0 {
            (SUBJECT, &mut mine)
        } else {
            (OTHER, &mut theirs)
        };
        let id = [i + 1; 16];
        let body = request(
            id,
            user,
            &format!("sess-{user}"),
            t0 + u64::from(i) * 1_000_000,
        );
        // A retried export stores the same spans twice.
        for _ in 0..if i == 0 { 2 } else { 1 } {
            assert_eq!(
                server
                    .post_traces("application/x-protobuf", body.clone(), &[])
                    .status(),
                200
            );
        }
        list.push(hex(&id));
    }
    // GenAI events sent as logs: one tied to each of the subject's traces, and one
    // that names the subject without a trace.
    let mut records: Vec<Value> = mine
        .iter()
        .map(|id| {
            serde_json::json!({"timeUnixNano": t0.to_string(), "traceId": id,
                "spanId": "0101010101010101", "eventName": "gen_ai.user.message",
                "body": {"kvlistValue": {"values": [{"key": "content",
                    "value": {"stringValue": "my card ending 4242 was declined (Vqzxjwu)"}}]}}})
        })
        .collect();
    records.push(
        serde_json::json!({"timeUnixNano": t0.to_string(), "severityNumber": 9,
        "body": {"stringValue": format!("login by {SUBJECT} (Vqzxjwu)")},
        "attributes": [{"key": "user.id", "value": {"stringValue": SUBJECT}}]}),
    );
    records.push(
        serde_json::json!({"timeUnixNano": t0.to_string(), "severityNumber": 9,
        "body": {"stringValue": "login by someone else (Vqzxjwu)"},
        "attributes": [{"key": "user.id", "value": {"stringValue": OTHER}}]}),
    );
    let logs = serde_json::json!({"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gateway"}}]},
        "scopeLogs": [{"logRecords": records}]}]});
    let resp = server.post_otlp(
        "/v1/logs",
        "application/json",
        logs.to_string().into_bytes(),
        &[],
    );
    assert_eq!(resp.status(), 200);
    let (_, found) = server.get("/api/v1/logs?q=vqzxjwu&limit=100", None);
    assert_eq!(found["logs"].as_array().map(Vec::len), Some(22), "{found}");

    // Let the background checkpointer copy pages into the database file as well.
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert!(
        !server.files_holding(SUBJECT).is_empty(),
        "the id is on disk before"
    );

    // Free text finds the id's words in the prompts (the full-text index holds them).
    let text_search = "/api/v1/traces?q=5f3c9e&limit=100";
    let (_, found) = server.get(text_search, None);
    assert_eq!(
        found["traces"].as_array().map(Vec::len),
        Some(20),
        "{found}"
    );

    let (ok, out, err) = server.cli(&["erase", "--user-id", SUBJECT, "--requested-by", "dpo@acme"]);
    assert!(ok, "{err}");
    // The retried export's second copy: the embedded store keeps both rows and counts
    // each; ClickHouse collapses them into one span (its key is the span's id).
    let spans = if on_clickhouse() { 40 } else { 42 };
    assert!(
        out.contains(&format!("20 traces, {spans} spans, 21 log records deleted")),
        "{out}"
    );

    let leftovers = server.files_holding(SUBJECT);
    assert!(
        leftovers.is_empty(),
        "the erased id is still in {leftovers:?}"
    );
    for id in &mine {
        assert_eq!(
            server.get(&format!("/api/v1/traces/{id}"), None).0,
            404,
            "{id} survived"
        );
    }
    for id in &theirs {
        let (status, trace) = server.get(&format!("/api/v1/traces/{id}"), None);
        assert_eq!(status, 200, "{id} was lost");
        assert_eq!(trace["span_count"], 2);
    }
    let (_, found) = server.get(&format!("/api/v1/traces?attr.user.id={SUBJECT}"), None);
    assert_eq!(found["traces"], Value::Array(vec![]));
    let (_, found) = server.get(text_search, None);
    assert_eq!(found["traces"], Value::Array(vec![]));
    let (_, found) = server.get("/api/v1/logs?q=vqzxjwu&limit=100", None);
    let left: Vec<&Value> = found["logs"].as_array().unwrap().iter().collect();
    assert_eq!(left.len(), 1, "{found}");
    assert_eq!(left[0]["attributes"]["user.id"], OTHER);
    let leftovers = server.files_holding("5f3c9e");
    assert!(
        leftovers.is_empty(),
        "a word of the id is still in {leftovers:?}"
    );

    // The audit log: who, when, what matched, how many — and only a digest of the id.
    let (status, log) = server.get("/api/v1/erasures", None);
    assert_eq!(status, 200);
    let entry = &log["erasures"][0];
    assert_eq!(entry["requested_by"], "dpo@acme");
    assert_eq!(entry["subject_kind"], "user_id");
    assert_eq!(
        (
            entry["traces_matched"].as_u64(),
            entry["spans_deleted"].as_u64()
        ),
        (Some(20), Some(spans))
    );
    assert_eq!(entry["subject_sha256"].as_str().unwrap().len(), 64);
    assert!(!log.to_string().contains(SUBJECT));

    // Sessions too; and bad requests say what is wrong.
    let (status, body) = server.post_json(
        "/api/v1/erasures",
        br#"{"session_id": "sess-user-11aa22-keep-me"}"#.to_vec(),
        &[],
        None,
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["traces_matched"], 40);
    let (status, body) = server.post_json("/api/v1/erasures", b"{}".to_vec(), &[], None);
    assert_eq!(status, 400);
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("user_id or session_id"));
}
