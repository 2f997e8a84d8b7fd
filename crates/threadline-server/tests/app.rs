//! The API port in process: `app(AppState::new(&config, store))` driven with
//! `oneshot`, no sockets. Error shapes, unknown parameters, keys, tenants kept apart,
//! and 429 with Retry-After, on every route, against every store backend `backends()`
//! opens (SQLite and ClickHouse). Fast enough to run on every change.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use threadline_model::{
    AttrValue, Attribute, LlmView, SpanDetail, SpanId, SpanKind, SpanOrigin, SpanRecord, TenantId,
    TraceId,
};
use threadline_server::{app, otlp_http_app, AppState, ServerConfig, TenantKeys};
use threadline_store::{
    ClickHouseConfig, ClickHouseOptions, ClickHouseStore, EmbeddedConfig, Store,
};

#[path = "app/busy_store.rs"]
mod busy_store;
use tower::ServiceExt;

const ACME_KEY: &str = "acme-key-0123456789abcdef";
const GLOBEX_KEY: &str = "globex-key-0123456789abcdef";
const OPERATOR_KEY: &str = "operator-key-0123456789abcdef";

/// A store of each backend, fresh, with what keeps it alive.
fn backends() -> Vec<(&'static str, Store, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_embedded(dir.path(), EmbeddedConfig::default()).unwrap();
    let local = tempfile::tempdir().unwrap();
    let clickhouse = ClickHouseStore::open(
        &ClickHouseConfig::for_tests("tl_app"),
        ClickHouseOptions::default(),
        local.path(),
    )
    .unwrap();
    vec![
        ("sqlite", store, dir),
        ("clickhouse", Store::new(clickhouse), local),
    ]
}

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

/// A server with two tenants and an operator key.
fn keyed_config() -> ServerConfig {
    let mut config = ServerConfig {
        tenants: vec![
            TenantKeys {
                tenant: tenant("acme"),
                api_keys: vec![ACME_KEY.into()],
            },
            TenantKeys {
                tenant: tenant("globex"),
                api_keys: vec![GLOBEX_KEY.into()],
            },
        ],
        ..ServerConfig::default()
    };
    config.operator_keys.0 = vec![OPERATOR_KEY.into()];
    config
}

/// The runtime an `AppState` starts its background work on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `check` on the app over each backend.
fn each_backend(config: &ServerConfig, check: impl Fn(&Store, Router) + Sync) {
    let runtime = runtime();
    for (name, store, _dir) in backends() {
        let state = {
            let _entered = runtime.enter();
            AppState::new(config, store.clone()).unwrap()
        };
        let router = app(state);
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&store, router)));
        if let Err(panic) = outcome {
            eprintln!("app broken over the {name} backend");
            std::panic::resume_unwind(panic);
        }
    }
}

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

fn send(router: &Router, method: Method, uri: &str, key: Option<&str>, body: &str) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "127.0.0.1:8080");
    if let Some(key) = key {
        request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    if !body.is_empty() {
        request = request
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len());
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), 64 << 20)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer {
            status,
            retry_after,
            body,
        }
    })
}

fn get(router: &Router, uri: &str, key: Option<&str>) -> Answer {
    send(router, Method::GET, uri, key, "")
}

/// The message of an error answer, whichever API's shape it has: ours
/// (`{"error": "…"}`), Jaeger v1's (`errors[0].msg`) or v3's (`error.message`).
fn message(answer: &Answer) -> String {
    let b = &answer.body;
    b["error"]
        .as_str()
        .or_else(|| b["errors"][0]["msg"].as_str())
        .or_else(|| b["error"]["message"].as_str())
        .unwrap_or_else(|| panic!("not an error body: {b}"))
        .to_owned()
}

const TRACE: TraceId = TraceId([0x5a; 16]);

/// Every GET route, with the path parameters a request needs and the query
/// parameters it must have to get past parsing (so the unknown one is what fails).
const GET_ROUTES: &[&str] = &[
    "/api/v1/traces",
    "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a/skeleton",
    "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a/spans/5a5a5a5a5a5a5a01",
    "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a/logs",
    "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a/lineage",
    "/api/v1/sessions",
    "/api/v1/sessions/s-1",
    "/api/v1/services",
    "/api/v1/service-map",
    "/api/v1/logs",
    "/api/v1/assets/models",
    "/api/v1/prov",
    "/api/v1/lineage?nodeId=dataset:wh:orders",
    "/api/v1/lineage/dataset:wh:orders",
    "/api/v1/column-lineage?nodeId=dataset:wh:orders",
    "/api/v1/nodes",
    "/api/v1/impact/dataset:wh:orders",
    "/api/v1/rca?service=chat&metric=p99_latency&at=1700000000",
    "/api/v1/node-health/route:/chat",
    "/api/v1/incidents",
    "/api/v1/incidents/inc-1",
    "/api/v1/metrics?metric=request_rate",
    "/api/v1/erasures",
    "/jaeger/api/services",
    "/jaeger/api/services/gateway/operations",
    "/jaeger/api/operations?service=gateway",
    "/jaeger/api/traces?service=gateway",
    "/jaeger/api/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    "/jaeger/api/dependencies?endTs=1700000000000&lookback=3600000",
    "/jaeger/api/v3/services",
    "/jaeger/api/v3/operations?service=gateway",
    "/jaeger/api/v3/traces?query.service_name=gateway&query.start_time_min=2026-01-01T00:00:00Z&query.start_time_max=2026-01-02T00:00:00Z",
    "/jaeger/api/v3/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
];

fn with_param(route: &str, param: &str) -> String {
    let joiner = if route.contains('?') { '&' } else { '?' };
    format!("{route}{joiner}{param}")
}

#[test]
fn every_route_refuses_an_unknown_parameter_by_name() {
    each_backend(&ServerConfig::default(), |_, router| {
        for route in GET_ROUTES {
            let answer = get(&router, &with_param(route, "sevice=chat"), None);
            assert_eq!(
                answer.status,
                StatusCode::BAD_REQUEST,
                "{route}: {}",
                answer.body
            );
            let message = message(&answer);
            assert!(message.contains("sevice"), "{route}: {message}");
        }
    });
}

#[test]
fn every_route_wants_a_tenant_key_on_a_keyed_server() {
    each_backend(&keyed_config(), |_, router| {
        for route in GET_ROUTES {
            let missing = get(&router, route, None);
            assert_eq!(
                missing.status,
                StatusCode::UNAUTHORIZED,
                "{route}: {}",
                missing.body
            );
            assert!(message(&missing).contains("missing API key"), "{route}");
            let wrong = get(&router, route, Some("not-a-key"));
            assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{route}");
            assert_eq!(message(&wrong), "invalid API key", "{route}");
            // An operator reads server-wide figures, no tenant's data.
            let operator = get(&router, route, Some(OPERATOR_KEY));
            assert_eq!(operator.status, StatusCode::UNAUTHORIZED, "{route}");
            assert!(message(&operator).contains("operator key"), "{route}");
            // The right key gets past the gate (an answer or a 404, not a 401).
            let acme = get(&router, route, Some(ACME_KEY));
            assert_ne!(
                acme.status,
                StatusCode::UNAUTHORIZED,
                "{route}: {}",
                acme.body
            );
        }
        // The liveness endpoint needs no key; the server-wide counters need the operator.
        let health = get(&router, "/api/v1/health", None);
        assert_eq!(health.status, StatusCode::OK);
        assert!(health.body.get("ingest").is_none(), "{}", health.body);
        let operator = get(&router, "/api/v1/health", Some(OPERATOR_KEY));
        assert!(operator.body.get("ingest").is_some(), "{}", operator.body);
    });
}

#[test]
fn errors_have_one_shape_per_api_and_name_what_was_wrong() {
    each_backend(&ServerConfig::default(), |_, router| {
        let bad_id = get(&router, "/api/v1/traces/not-hex", None);
        assert_eq!(bad_id.status, StatusCode::BAD_REQUEST);
        assert!(message(&bad_id).contains("not-hex"), "{}", bad_id.body);

        let absent = get(
            &router,
            "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
            None,
        );
        assert_eq!(absent.status, StatusCode::NOT_FOUND);
        assert!(absent.body["error"].is_string(), "{}", absent.body);

        let nowhere = get(&router, "/api/v1/no-such-thing", None);
        assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
        assert_eq!(message(&nowhere), "no such endpoint");

        let limit = get(&router, "/api/v1/traces?limit=0", None);
        assert_eq!(limit.status, StatusCode::BAD_REQUEST);
        assert!(message(&limit).contains("limit"), "{}", limit.body);

        let too_many = format!(
            "/api/v1/traces?{}",
            (0..65)
                .map(|i| format!("attr.k{i}=v"))
                .collect::<Vec<_>>()
                .join("&")
        );
        let refused = get(&router, &too_many, None);
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(
            message(&refused).contains("attribute filters"),
            "{}",
            refused.body
        );

        // Jaeger's two versions answer in their own shapes.
        let v1 = get(&router, "/jaeger/api/traces/zz", None);
        assert_eq!(v1.status, StatusCode::BAD_REQUEST);
        assert_eq!(v1.body["errors"][0]["code"], 400, "{}", v1.body);
        assert!(v1.body["data"].is_null());
        let v3 = get(&router, "/jaeger/api/v3/traces/zz", None);
        assert_eq!(v3.status, StatusCode::BAD_REQUEST);
        assert_eq!(v3.body["error"]["httpCode"], 400, "{}", v3.body);

        let not_json = send(&router, Method::POST, "/api/v1/lineage", None, "{not json");
        assert_eq!(
            not_json.status,
            StatusCode::BAD_REQUEST,
            "{}",
            not_json.body
        );
        assert!(not_json.body["error"].is_string());
    });
}

fn request_spans(trace: TraceId, service: &str) -> Vec<SpanRecord> {
    let origin = std::sync::Arc::new(SpanOrigin {
        resource_attributes: vec![Attribute::new(
            "service.name",
            AttrValue::String(service.into()),
        )],
        ..Default::default()
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    vec![SpanRecord {
        trace_id: trace,
        span_id: SpanId([0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 1]),
        parent_span_id: None,
        name: "POST /chat".into(),
        service: service.into(),
        kind: SpanKind::Server,
        start_time_unix_nano: now - 2_000_000_000,
        end_time_unix_nano: now - 1_800_000_000,
        detail: SpanDetail {
            flags: 1,
            attributes: vec![Attribute::new(
                "session.id",
                AttrValue::String("s-1".into()),
            )],
            ..Default::default()
        },
        origin,
        llm: Some(LlmView {
            route: Some("/chat".into()),
            session_id: Some("s-1".into()),
            ..Default::default()
        }),
    }]
}

#[test]
fn a_tenant_reads_only_its_own_data() {
    each_backend(&keyed_config(), |store, router| {
        store
            .write_blocking(&tenant("acme"), &request_spans(TRACE, "acme-gateway"))
            .unwrap();
        let trace = "/api/v1/traces/5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
        assert_eq!(get(&router, trace, Some(ACME_KEY)).status, StatusCode::OK);
        assert_eq!(
            get(&router, trace, Some(GLOBEX_KEY)).status,
            StatusCode::NOT_FOUND
        );
        for (route, key, expect) in [
            ("/api/v1/traces", ACME_KEY, 1),
            ("/api/v1/traces", GLOBEX_KEY, 0),
        ] {
            let found = get(&router, route, Some(key));
            assert_eq!(
                found.body["traces"].as_array().map(Vec::len),
                Some(expect),
                "{route} {}",
                found.body
            );
        }
        let services = |key| get(&router, "/api/v1/services", Some(key)).body.to_string();
        assert!(services(ACME_KEY).contains("acme-gateway"));
        assert!(!services(GLOBEX_KEY).contains("acme-gateway"));
        let jaeger = |key| {
            get(&router, "/jaeger/api/services", Some(key))
                .body
                .to_string()
        };
        assert!(jaeger(ACME_KEY).contains("acme-gateway"));
        assert!(!jaeger(GLOBEX_KEY).contains("acme-gateway"));
        let sessions = |key| get(&router, "/api/v1/sessions/s-1", Some(key)).status;
        assert_eq!(sessions(ACME_KEY), StatusCode::OK);
        assert_eq!(sessions(GLOBEX_KEY), StatusCode::NOT_FOUND);
    });
}

#[test]
fn over_the_body_budget_is_429_with_retry_after() {
    let mut config = ServerConfig::default();
    config.limits.max_inflight_body_bytes = 1024;
    each_backend(&config, |_, router| {
        let event = format!(
            r#"{{"eventType":"COMPLETE","eventTime":"2026-12-01T00:00:00Z","run":{{"runId":"0193a4a0-0000-7000-8000-000000000001"}},"job":{{"namespace":"ns","name":"{}"}},"producer":"test","schemaURL":"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"}}"#,
            "j".repeat(4096)
        );
        let answer = send(&router, Method::POST, "/api/v1/lineage", None, &event);
        assert_eq!(
            answer.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            answer.body
        );
        assert_eq!(answer.retry_after.as_deref(), Some("1"));
        assert!(answer.body["error"].is_string(), "{}", answer.body);
        // Within the budget the same endpoint takes the event.
        let small = event.replace(&"j".repeat(4096), "j");
        let stored = send(&router, Method::POST, "/api/v1/lineage", None, &small);
        assert_eq!(stored.status, StatusCode::CREATED, "{}", stored.body);
    });
}

#[test]
fn a_busy_store_is_429_with_retry_after_on_every_write() {
    let runtime = runtime();
    for (name, store, _dir) in backends() {
        let busy = Store::new(busy_store::BusyStore(store));
        let state = {
            let _entered = runtime.enter();
            AppState::new(&ServerConfig::default(), busy).unwrap()
        };
        let api = app(state.clone());
        let otlp = otlp_http_app(state);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let spans = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"gw"}}}}]}},"scopeSpans":[{{"spans":[{{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"chat","kind":2,"startTimeUnixNano":"{now}","endTimeUnixNano":"{}"}}]}}]}}]}}"#,
            now + 1_000_000
        );
        let logs = format!(
            r#"{{"resourceLogs":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"gw"}}}}]}},"scopeLogs":[{{"logRecords":[{{"timeUnixNano":"{now}","body":{{"stringValue":"hello"}}}}]}}]}}]}}"#
        );
        let event = r#"{"eventType":"COMPLETE","eventTime":"2026-12-01T00:00:00Z","run":{"runId":"0193a4a0-0000-7000-8000-000000000001"},"job":{"namespace":"ns","name":"j"},"producer":"test","schemaURL":"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"}"#;
        for (router, uri, body) in [
            (&otlp, "/v1/traces", spans.as_str()),
            (&otlp, "/v1/logs", logs.as_str()),
            (&api, "/api/v1/lineage", event),
        ] {
            let answer = send(router, Method::POST, uri, None, body);
            assert_eq!(
                (answer.status, answer.retry_after.as_deref()),
                (StatusCode::TOO_MANY_REQUESTS, Some("1")),
                "{name}: POST {uri}: {}",
                answer.body
            );
        }
    }
}

/// A first page out of ClickHouse's time budget says from when it searched, and its
/// cursor finds the older traces; Jaeger's API, which has no next page, reads them all.
#[test]
fn a_first_page_out_of_time_says_from_when_and_jaeger_reads_everything() {
    let local = tempfile::tempdir().unwrap();
    let mut config = ClickHouseConfig::for_tests("tl_app_budget");
    config.first_page_budget = Some(std::time::Duration::ZERO);
    let store = Store::new(
        ClickHouseStore::open(&config, ClickHouseOptions::default(), local.path()).unwrap(),
    );
    let runtime = runtime();
    let state = {
        let _entered = runtime.enter();
        AppState::new(&ServerConfig::default(), store.clone()).unwrap()
    };
    let router = app(state);
    // A server without keys is the default tenant's.
    let acme = TenantId::default_tenant();
    let old = TraceId([0x0d; 16]);
    let mut spans = request_spans(old, "gateway");
    for span in &mut spans {
        span.start_time_unix_nano -= 3 * 86_400_000_000_000;
        span.end_time_unix_nano -= 3 * 86_400_000_000_000;
    }
    store.write_blocking(&acme, &spans).unwrap();
    store
        .write_blocking(&acme, &request_spans(TRACE, "gateway"))
        .unwrap();

    let first = get(&router, "/api/v1/traces?service=gateway", None);
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let ids = |page: &Value| -> Vec<String> {
        page["traces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["trace_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let from: u64 = first.body["searched_from_unix_nano"]
        .as_str()
        .expect("a cut first page says from when it searched")
        .parse()
        .unwrap();
    assert!(from > spans[0].start_time_unix_nano);
    // Its cursor goes on, page after page, to the oldest trace.
    let mut seen = ids(&first.body);
    let mut page = first.body;
    while let Some(cursor) = page["next_cursor"].as_str() {
        let next = get(
            &router,
            &format!("/api/v1/traces?service=gateway&cursor={cursor}"),
            None,
        );
        assert_eq!(next.status, StatusCode::OK, "{}", next.body);
        assert!(next.body["searched_from_unix_nano"].is_null());
        seen.extend(ids(&next.body));
        page = next.body;
    }
    assert_eq!(seen, ["5a".repeat(16), "0d".repeat(16)]);

    let jaeger = get(&router, "/jaeger/api/traces?service=gateway", None);
    let found: Vec<&str> = jaeger.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["traceID"].as_str().unwrap())
        .collect();
    assert_eq!(found.len(), 2, "{}", jaeger.body);
}
