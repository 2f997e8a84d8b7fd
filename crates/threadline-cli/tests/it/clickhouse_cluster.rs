//! Shards and replicas: `serve` through a ClickHouse cluster (`[clickhouse] cluster`)
//! answers every query as it does on one ClickHouse server, on two shards behind a
//! `Distributed` table and on two replicas of one shard (Replicated tables, ZooKeeper);
//! with one replica stopped, every query still answers with all the data, and a
//! replica that comes back catches up with what was written while it was away.
//! Each test runs its own ZooKeeper and ClickHouse servers (`scripts/clickhouse`).

use std::ops::Range;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::clickhouse_replicas::trace_of;
use crate::diagnosis::{latency_step_minute, T0_S};
use crate::harness::*;
use crate::openlineage::events_in;
use crate::scratch::*;

/// Servers compared answer for answer read whole pages (`first_page_budget_ms = 0`):
/// a first page cut by its time budget depends on how fast each read was, not on the
/// data (the budget has tests of its own).
pub(crate) const WHOLE_PAGES: &str = "[clickhouse]\nfirst_page_budget_ms = 0\n";

fn config(cluster: &str) -> String {
    format!("{WHOLE_PAGES}cluster = \"{cluster}\"\n")
}

/// The single-server store the clusters are compared with (the suite's test server).
fn reference() -> TestServer {
    TestServer::start_on_store(
        &threadline_store::ClickHouseConfig::test_store_url("tl_reference"),
        Some(WHOLE_PAGES),
    )
}

/// Minutes of LLM traffic (the latency step of the diagnosis tests: 60 requests a
/// minute, slow from minute 30) to each server.
fn send_minutes(servers: &[&TestServer], minutes: Range<u64>) {
    for minute in minutes {
        let body = proto(&latency_step_minute(minute));
        for server in servers {
            let status = server
                .post_traces("application/x-protobuf", body.clone(), &[])
                .status();
            assert_eq!(status, 200);
        }
    }
}

/// Every OpenLineage event of the shared corpus, in order, to each server.
fn send_lineage(servers: &[&TestServer]) {
    for (file, event) in events_in(&corpus_dir().join("openlineage")) {
        for server in servers {
            let (status, body) =
                server.post_json("/api/v1/lineage", event.to_string().into_bytes(), &[], None);
            assert!(status == 201 || status == 200, "{file}: {status} {body}");
        }
    }
}

/// The reads compared: search (pages, filters, free text), a trace whole and its
/// lineage, services, metrics, the graph and a walk.
fn queries() -> Vec<String> {
    let range = format!("from={T0_S}&to={}", T0_S + 40 * 60);
    let trace = hex(&trace_of(10_001 + 20 * 60));
    vec![
        format!("/api/v1/traces?limit=50&{range}"),
        format!("/api/v1/traces?limit=20&route=/v1/chat&min_duration=2500ms&{range}"),
        format!("/api/v1/traces?limit=20&q=llama&{range}"),
        format!("/api/v1/traces?limit=20&attr.model.instance.id=i-2&{range}"),
        format!("/api/v1/traces?limit=20&attr.model.instance.id=nowhere&{range}"),
        format!("/api/v1/traces/{trace}"),
        format!("/api/v1/traces/{trace}/lineage"),
        "/api/v1/services".to_owned(),
        format!("/api/v1/metrics?metric=p99_latency&group_by=route&{range}"),
        format!("/api/v1/metrics?metric=request_rate&group_by=instance&step=10m&{range}"),
        "/api/v1/nodes?kind=instance".to_owned(),
        "/api/v1/nodes?kind=dataset".to_owned(),
        format!(
            "/api/v1/lineage/{}?direction=downstream&depth=6",
            encode_node("dataset:my-datasource-namespace:instance.schema.table")
        ),
    ]
}

/// Asserts `server` answers every query as `reference` does.
fn answers_as(server: &TestServer, reference: &TestServer, what: &str) {
    for query in queries() {
        let (status, body) = server.get(&query, None);
        let (want_status, want) = reference.get(&query, None);
        assert_eq!(want_status, 200, "{query} on the reference: {want}");
        assert_eq!(
            (status, &body),
            (want_status, &want),
            "{query} {what} differs from one server's answer"
        );
    }
}

#[test]
fn two_shards_answer_as_one_server_does() {
    let cluster = ScratchCluster::start(&["ch1", "ch2"]);
    let one = reference();
    let sharded = TestServer::start_on_store(
        &cluster.store("ch1", "tl_shards"),
        Some(&config("threadline_two_shards")),
    );
    send_minutes(&[&one, &sharded], 0..40);
    send_lineage(&[&one, &sharded]);
    answers_as(&sharded, &one, "on two shards");

    // The spans are spread: each shard holds some of every table's rows, none all.
    let counts: Vec<u64> = ["ch1", "ch2"]
        .iter()
        .map(|node| rows_on(&cluster.url(node), "tl_shards", "spans_local"))
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 40 * 60, "{counts:?}");
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
}

#[test]
fn with_a_replica_stopped_every_query_answers_with_all_the_data() {
    let cluster = ScratchCluster::start(&["ch3", "ch4"]);
    let one = reference();
    let toml = config("threadline_two_replicas");
    let via_ch3 = TestServer::start_on_store(&cluster.store("ch3", "tl_replicated"), Some(&toml));
    let via_ch4 = TestServer::start_on_store(&cluster.store("ch4", "tl_replicated"), Some(&toml));
    send_minutes(&[&one, &via_ch3], 0..30);
    send_lineage(&[&one, &via_ch3]);
    answers_as(&via_ch3, &one, "on two replicas");
    caught_up(&cluster, "tl_replicated");
    answers_as(&via_ch4, &one, "through the other replica");

    // ch4 stops: reads and writes through ch3 go on, with everything.
    cluster.stop("ch4");
    answers_as(&via_ch3, &one, "with a replica stopped");
    send_minutes(&[&one, &via_ch3], 30..40);
    answers_as(&via_ch3, &one, "after writes with a replica stopped");

    // ch4 comes back and catches up; then ch3 stops and ch4 answers with all of it.
    cluster.restart("ch4");
    caught_up(&cluster, "tl_replicated");
    cluster.stop("ch3");
    answers_as(&via_ch4, &one, "from the replica that was away");
}

/// Rows of `table` in `database` on one node (its own rows, not the cluster's).
fn rows_on(url: &str, database: &str, table: &str) -> u64 {
    let text = client()
        .post(url)
        .body(format!("SELECT count() FROM {database}.{table}"))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.text())
        .unwrap_or_else(|e| panic!("count {table} on {url}: {e}"));
    text.trim().parse().unwrap()
}

/// Waits until ch3 and ch4 hold the same rows in every table of `database`.
fn caught_up(cluster: &ScratchCluster, database: &str) {
    let tables = |node: &str| -> Value {
        let text = client()
            .post(cluster.url(node))
            .body(format!(
                "SELECT table, sum(rows) AS rows FROM system.parts WHERE database = '{database}' \
                 AND active GROUP BY table ORDER BY table FORMAT JSON"
            ))
            .send()
            .and_then(|r| r.text())
            .unwrap();
        serde_json::from_str::<Value>(&text).unwrap()["data"].clone()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (a, b) = (tables("ch3"), tables("ch4"));
        if a == b {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas never held the same rows: {a} vs {b}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
