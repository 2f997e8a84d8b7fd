//! End-to-end tests: each starts the real `threadline` binary on free ports with its own
//! data directory and talks to it as users do (HTTP, gRPC, the CLI, the OpenTelemetry
//! Python SDK).

mod big_trace;
mod browser;
mod cli;
mod clickhouse_cluster;
mod clickhouse_replicas;
mod clickhouse_spool;
mod conformance;
mod cost;
mod crash;
mod data_in;
mod diagnosis;
mod disk;
mod erasure;
mod erasure_paths;
mod grpc;
mod hardening;
mod harness;
mod http_ingest;
mod jaeger;
mod lineage_chain;
mod lineage_in_time;
mod openai_instrumentors;
mod openlineage;
mod python_sdk;
mod scratch;
mod search;
mod tenants;
mod tidy;
mod time_went;
mod ui;
mod ui_pages;
#[path = "../../src/webdriver.rs"]
mod webdriver;
