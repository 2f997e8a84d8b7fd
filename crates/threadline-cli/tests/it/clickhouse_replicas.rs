//! Stateless replicas: two `serve` processes on one ClickHouse database both ingest
//! and answer every query the same; incident detection runs on one of them at a time
//! (a lease in ClickHouse) and moves to the other when that one is killed, with no
//! incident lost or doubled. Runs in every run of the suite, on a ClickHouse server
//! of its own.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::diagnosis::{latency_step_minute, recovered_minute, T0_S};
use crate::harness::*;
use crate::scratch::*;

fn detecting(server: &TestServer) -> bool {
    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!(status, 200, "{health}");
    health["store"]["incident_detection"] == "active"
}

/// Waits until exactly one of `servers` runs detection; its index.
fn the_active_one(servers: &[&TestServer]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let active: Vec<usize> = (0..servers.len())
            .filter(|&i| detecting(servers[i]))
            .collect();
        if active.len() == 1 {
            return active[0];
        }
        assert!(
            Instant::now() < deadline,
            "replicas running detection: {active:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn send(server: &TestServer, body: Vec<u8>) {
    assert_eq!(
        server
            .post_traces("application/x-protobuf", body, &[])
            .status(),
        200
    );
}

/// The incidents a server lists, once the detector has judged them as `want` says.
fn incidents_when(server: &TestServer, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, listed) = server.get("/api/v1/incidents", None);
        assert_eq!(status, 200, "{listed}");
        let list = listed["incidents"].as_array().unwrap().clone();
        if want(&list) {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "incidents never became as wanted: {listed}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn two_replicas_answer_alike_and_detection_moves_when_the_active_one_dies() {
    let ch = ScratchClickHouse::start();
    let store = ch.store("tl_replicas");
    // Whole pages: a first page cut by its time budget depends on each read's speed
    // (`clickhouse_cluster::WHOLE_PAGES`).
    let whole_pages = Some(crate::clickhouse_cluster::WHOLE_PAGES);
    let mut servers = [
        TestServer::start_on_store(&store, whole_pages),
        TestServer::start_on_store(&store, whole_pages),
    ];
    let active = the_active_one(&[&servers[0], &servers[1]]);

    // Both ingest: the minutes alternate between them.
    for minute in 0..40u64 {
        send(
            &servers[(minute % 2) as usize],
            proto(&latency_step_minute(minute)),
        );
    }
    let step = incidents_when(&servers[active], |l| l.len() == 1);
    let standby = 1 - active;
    let from_standby = incidents_when(&servers[standby], |l| l.len() == 1);
    assert_eq!(
        from_standby, step,
        "both list the incident the active one found"
    );

    // Every query answers the same from either replica.
    let range = format!("from={T0_S}&to={}", T0_S + 40 * 60);
    for query in [
        format!("/api/v1/traces?limit=50&{range}"),
        format!("/api/v1/traces?limit=20&route=/v1/chat&min_duration=2500ms&{range}"),
        format!("/api/v1/traces/{}", hex(&trace_of(10_001 + 35 * 60))),
        "/api/v1/services".to_owned(),
        format!("/api/v1/metrics?metric=p99_latency&group_by=route&{range}"),
        format!("/api/v1/metrics?metric=request_rate&group_by=instance&step=10m&{range}"),
        "/api/v1/nodes?kind=instance".to_owned(),
        format!(
            "/api/v1/traces/{}/lineage",
            hex(&trace_of(10_001 + 35 * 60))
        ),
        format!("/api/v1/incidents/{}", step[0]["id"].as_str().unwrap()),
    ] {
        let (sa, a) = servers[0].get(&query, None);
        let (sb, b) = servers[1].get(&query, None);
        assert_eq!((sa, &a), (sb, &b), "{query} differs between the replicas");
        assert_eq!(sa, 200, "{query}: {a}");
    }

    // The active replica dies; the other takes detection over where it stopped.
    servers[active].kill9();
    let survivor = &servers[standby];
    for minute in 40..50u64 {
        send(survivor, proto(&recovered_minute(minute)));
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    while !detecting(survivor) {
        assert!(
            Instant::now() < deadline,
            "detection never moved to the survivor"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let after = incidents_when(survivor, |l| {
        l.iter().any(|i| i["status"] == "resolved") || l.len() > 1
    });
    assert_eq!(after.len(), 1, "no incident doubled: {after:?}");
    assert_eq!(after[0]["id"], step[0]["id"], "{after:?}");
    assert_eq!(after[0]["status"], "resolved");
}

/// The trace id `latency_step_minute` gives request `id`.
pub(crate) fn trace_of(id: u64) -> [u8; 16] {
    let mut trace_id = [7u8; 16];
    trace_id[..8].copy_from_slice(&id.to_be_bytes());
    trace_id
}
