//! On ClickHouse a 2xx means the batch is safe: ClickHouse took it, or the local spool
//! holds it (fsynced) until ClickHouse does. A ClickHouse server of the test's own is
//! stopped in the middle of ingest and started again, and Threadline is killed with a
//! spool that still holds writes: every acknowledged span is then readable, once.
//! The ClickHouse-only tests run in every run of the suite (they need no switch).

use std::time::{Duration, Instant};

use crate::harness::*;
use crate::scratch::*;

/// Sends one two-span trace; whether it was acknowledged.
fn send(server: &TestServer, i: u32, t0: u64) -> bool {
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&i.to_be_bytes());
    id[15] = 1;
    let body = proto(&llm_trace(
        id,
        "gateway",
        "llama-3-8b",
        t0 + u64::from(i) * 1_000_000,
    ));
    server
        .post_traces("application/x-protobuf", body, &[])
        .status()
        .is_success()
}

fn spool(server: &TestServer) -> (u64, u64) {
    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!(status, 200, "{health}");
    let spool = &health["store"]["spool"];
    (
        spool["records"]
            .as_u64()
            .unwrap_or_else(|| panic!("{health}")),
        spool["bytes"].as_u64().unwrap(),
    )
}

fn wait_until_drained(server: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while spool(server).0 > 0 {
        assert!(
            Instant::now() < deadline,
            "the spool did not drain: {:?}",
            spool(server)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every acknowledged trace is readable whole, and counted once in search and in the
/// rollups.
fn check_all(server: &TestServer, acked: &[u32], t0: u64) {
    for i in acked {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&i.to_be_bytes());
        id[15] = 1;
        let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&id)), None);
        assert_eq!(status, 200, "acknowledged trace {i} is missing: {trace}");
        assert_eq!(trace["span_count"], 2, "trace {i}: {trace}");
    }
    let from_s = t0 / 1_000_000_000 - 60;
    let to_s = from_s + 3600;
    let (_, page) = server.get(
        &format!("/api/v1/traces?limit=1000&from={from_s}&to={to_s}"),
        None,
    );
    assert_eq!(
        page["traces"].as_array().map(Vec::len),
        Some(acked.len()),
        "search: {page}"
    );
    let (status, rate) = server.get(
        &format!("/api/v1/metrics?metric=request_rate&from={from_s}&to={to_s}&step=60m"),
        None,
    );
    assert_eq!(status, 200, "{rate}");
    let requests: u64 = rate["series"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["points"].as_array().unwrap().iter())
        .map(|p| p["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(requests, acked.len() as u64, "rollups: {rate}");
}

#[test]
fn acknowledged_spans_survive_clickhouse_outages_and_a_crash_once_each() {
    let ch = ScratchClickHouse::start();
    let mut server = TestServer::start_on_store(&ch.store("tl_spool"), None);
    let t0 = now_nanos() - 20 * 60_000_000_000;
    let mut acked = Vec::new();
    let batch = |server: &TestServer, range: std::ops::Range<u32>, acked: &mut Vec<u32>| {
        for i in range {
            assert!(send(server, i, t0), "trace {i} was refused");
            acked.push(i);
        }
    };
    batch(&server, 0..40, &mut acked);
    assert_eq!(spool(&server).0, 0, "ClickHouse is up: nothing spooled");

    // ClickHouse goes away in the middle of ingest: writes are still acknowledged.
    ch.stop();
    batch(&server, 40..100, &mut acked);
    let (records, bytes) = spool(&server);
    assert!(records > 0 && bytes > 0, "{records} records, {bytes} bytes");
    let (_, metrics) = {
        let resp = client()
            .get(format!("{}/metrics", server.api))
            .send()
            .unwrap();
        (resp.status(), resp.text().unwrap())
    };
    assert!(metrics.contains("threadline_spool_records"), "{metrics}");

    ch.restart();
    wait_until_drained(&server);
    batch(&server, 100..120, &mut acked);
    check_all(&server, &acked, t0);

    // Killed with a spool that still holds writes: they are sent after the restart.
    ch.stop();
    batch(&server, 120..160, &mut acked);
    assert!(spool(&server).0 > 0);
    server.kill9();
    ch.restart();
    server.relaunch();
    wait_until_drained(&server);
    check_all(&server, &acked, t0);
}

/// The spool is bounded: with ClickHouse away, writes are acknowledged until the spool
/// holds its bound, then refused with 429 and Retry-After (nothing is lost that was
/// acknowledged, nothing is kept that was refused).
#[test]
fn a_full_spool_answers_429_with_retry_after() {
    let ch = ScratchClickHouse::start();
    let server = TestServer::start_on_store(
        &ch.store("tl_full_spool"),
        Some("[clickhouse]\nspool_max_bytes = 1048576\n"),
    );
    ch.stop();
    let t0 = now_nanos() - 5 * 60_000_000_000;
    let prompt = "spooled prompt text ".repeat(5_000);
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    for i in 0..40u32 {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&i.to_be_bytes());
        id[15] = 2;
        let mut request = llm_trace(id, "gateway", "llama-3-8b", t0 + u64::from(i) * 1_000_000);
        request.resource_spans[0].scope_spans[0].spans[1]
            .attributes
            .push(kv("gen_ai.prompt", &prompt));
        let resp = server.post_traces("application/x-protobuf", proto(&request), &[]);
        match resp.status().as_u16() {
            200 => acked.push(id),
            429 => {
                let retry = resp
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                assert_eq!(retry.as_deref(), Some("1"));
                refused.push(id);
            }
            other => panic!("trace {i}: {other} {:?}", resp.text()),
        }
    }
    assert!(
        !acked.is_empty() && !refused.is_empty(),
        "{} acknowledged, {} refused",
        acked.len(),
        refused.len()
    );
    let (records, bytes) = spool(&server);
    assert!(bytes <= 1 << 20, "{bytes} bytes held in {records} records");
    ch.restart();
    wait_until_drained(&server);
    for id in &acked {
        assert_eq!(
            server.get(&format!("/api/v1/traces/{}", hex(id)), None).0,
            200
        );
    }
    for id in &refused {
        assert_eq!(
            server.get(&format!("/api/v1/traces/{}", hex(id)), None).0,
            404
        );
    }
}
