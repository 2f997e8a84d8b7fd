//! The pages a new user finds from the navigation on the demo's data — sessions,
//! service map, lineage browser — each opened by clicking its link, and what each
//! leads to; and an empty store's page telling where to send data, waiting for the
//! first span.

use fantoccini::Locator;

use crate::browser::{chromedriver, Browser};
use crate::harness::*;

/// Clicks the navigation link `label` and waits for `path`.
async fn nav(b: &Browser, label: &str, path: &str) {
    b.wait_for_text("header.top nav a", label)
        .await
        .click()
        .await
        .unwrap();
    b.wait_path(path).await;
}

/// From the search page, every section through the navigation (called by the UI test
/// on its demo).
pub(crate) async fn every_section_from_the_navigation(b: &Browser, base: &str) {
    b.open(&format!("{base}/"), "a.trace-link").await;
    let links = b.text("header.top nav").await;
    for label in [
        "Traces",
        "Sessions",
        "Service map",
        "Lineage",
        "Dashboard",
        "Incidents",
    ] {
        assert!(
            links.contains(label),
            "no {label} in the navigation: {links}"
        );
    }

    // Sessions: the demo's six conversations with their users, newest activity first.
    nav(b, "Sessions", "/sessions").await;
    b.wait_for("a.session-link").await;
    assert_eq!(b.count("a.session-link").await, 6);
    let table = b.text("table.grid tbody").await;
    assert!(
        table.contains("user-45") && table.contains("sess-1005"),
        "{table}"
    );
    let first = b.text("table.grid tbody tr:first-child").await;
    assert!(first.contains("sess-1005"), "newest first: {first}");
    b.screenshot("sessions").await;
    b.assert_no_console_errors("sessions").await;
    b.click("a.session-link").await;
    b.wait_path("/sessions/").await;
    b.wait_for("a.trace-link").await;
    // A session's trace names its session in the header, which leads back.
    b.click("a.trace-link").await;
    b.wait_path("/traces/").await;
    b.wait_for(".trace-context a.session-link").await;
    b.click(".trace-context a.session-link").await;
    b.wait_path("/sessions/sess-").await;

    // The Traces page filters by session and user, and shows both columns.
    b.open(&format!("{base}/traces?user=user-42"), "a.trace-link")
        .await;
    assert_eq!(b.count("a.trace-link").await, 3);
    let rows = b.text("table.grid tbody").await;
    assert!(
        rows.contains("sess-1002") && rows.contains("user-42"),
        "{rows}"
    );

    // A time with an offset in the URL shows converted in the UTC range inputs.
    b.open(
        &format!("{base}/traces?from=2026-12-04T10:00:00%2B01:00&to=2026-12-04T12:30:00Z"),
        "#from",
    )
    .await;
    let value = |id: &'static str| async move {
        b.client
            .find(Locator::Css(id))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap()
            .unwrap_or_default()
    };
    assert_eq!(value("#from").await, "2026-12-04T09:00");
    assert_eq!(value("#to").await, "2026-12-04T12:30");

    // The service map: services and the calls between them, across processes.
    nav(b, "Service map", "/service-map").await;
    b.wait_for(".service-graph svg .map-node").await;
    for node in ["service:llm-gateway", "service:vllm", "service:docs-index"] {
        assert!(
            b.count(&format!(".map-node[data-node='{node}']")).await == 1,
            "no {node} on the map"
        );
    }
    assert!(
        b.count(".map-edge[data-caller='llm-gateway'][data-callee='vllm']")
            .await
            == 1
    );
    let rows = b.text("table.grid tbody").await;
    assert!(
        rows.contains("docs-index") && rows.contains("/min"),
        "{rows}"
    );
    b.screenshot("service-map").await;
    b.assert_no_console_errors("the service map").await;

    // The lineage browser: nodes by kind, with badges, each opening its graph.
    nav(b, "Lineage", "/lineage").await;
    b.wait_for("a.node-link").await;
    b.click(".kind-tabs a[data-kind='adapter']").await;
    b.wait_path("/lineage?kind=adapter").await;
    // The last kind's rows stay on screen until the adapters arrive.
    b.wait_for_text("table.grid[data-kind='adapter'] tbody", "fin-lora@7")
        .await;
    assert!(
        !b.text("table.grid tbody").await.contains("dataset"),
        "only adapters"
    );
    b.click(".kind-tabs a[data-kind='route']").await;
    b.wait_path("/lineage?kind=route").await;
    b.wait_for("table.grid[data-kind='route'] .badge-incident")
        .await;
    b.click(".kind-tabs a[data-kind='dataset_version']").await;
    b.wait_path("/lineage?kind=dataset_version").await;
    b.wait_for("table.grid[data-kind='dataset_version'] .badge-drift")
        .await;
    b.screenshot("lineage-browser").await;
    b.client
        .find(Locator::Css("#node-q"))
        .await
        .unwrap()
        .send_keys("fin-qa")
        .await
        .unwrap();
    b.click("form.toolbar button[type=submit]").await;
    b.wait_path("/lineage?kind=dataset_version&q=fin-qa").await;
    b.wait_for_text("table.grid tbody", "fin-qa").await;
    b.click("a.node-link").await;
    b.wait_path("/lineage/dataset_version").await;
    b.wait_for(".graph svg .node.center").await;
    b.assert_no_console_errors("the lineage browser").await;
}

#[test]
fn an_empty_store_shows_where_to_send_data_and_waits_for_the_first_span() {
    let Some(driver) = chromedriver("the empty-store UI test") else {
        return;
    };
    let server = TestServer::start();
    let otlp_port = server.otlp_http.rsplit(':').next().unwrap().to_owned();
    runtime().block_on(async {
        let b = Browser::start(&driver, 1280, 900).await;
        b.open(&format!("{}/", server.api), ".get-started").await;
        // The guidance shows the default port until the health answer names this
        // server's.
        b.wait_for_text(".get-started", &format!(":{otlp_port}/v1/traces"))
            .await;
        let text = b.text(".get-started").await;
        assert!(
            text.contains(&format!(":{otlp_port}/v1/traces"))
                && text.contains("OTEL_EXPORTER_OTLP_ENDPOINT")
                && text.contains("Waiting for the first span"),
            "{text}"
        );
        b.screenshot("empty-store").await;
        // The first span arrives: the page shows it without a reload by the user.
        // (The harness's client blocks: it runs on a thread of its own.)
        let status = std::thread::scope(|s| {
            s.spawn(|| {
                server
                    .post_traces(
                        "application/x-protobuf",
                        proto(&llm_trace(
                            [9; 16],
                            "my-llm-app",
                            "gpt-4o-mini",
                            now_nanos(),
                        )),
                        &[],
                    )
                    .status()
            })
            .join()
            .unwrap()
        });
        assert_eq!(status, 200);
        b.wait_for("a.trace-link").await;
        assert!(b.text("table.grid tbody").await.contains("my-llm-app"));
        b.assert_no_console_errors("the empty store").await;
        b.close().await;
    });
}

/// On ClickHouse, a first page out of its time budget says from when it searched and
/// links to the older traces, which the next page shows.
#[test]
fn a_first_page_out_of_time_says_so_and_links_to_older_traces() {
    if !on_clickhouse() {
        return; // the embedded store is never out of time
    }
    let Some(driver) = chromedriver("the first-page budget UI test") else {
        return;
    };
    let server = TestServer::start_with_config(Some("[clickhouse]\nfirst_page_budget_ms = 1\n"));
    let three_days = 3 * 86_400_000_000_000;
    for (id, start) in [(7u8, now_nanos() - three_days), (8, now_nanos())] {
        let sent = server.post_traces(
            "application/x-protobuf",
            proto(&llm_trace([id; 16], "budget-app", "gpt-4o-mini", start)),
            &[],
        );
        assert_eq!(sent.status(), 200);
    }
    runtime().block_on(async {
        let b = Browser::start(&driver, 1280, 900).await;
        b.open(
            &format!("{}/traces?service=budget-app", server.api),
            ".partial-search",
        )
        .await;
        assert!(
            b.text(".partial-search")
                .await
                .contains("Searched traces that started since"),
            "{}",
            b.text(".partial-search").await
        );
        b.screenshot("search-cut-first-page").await;
        b.click("a.search-older").await;
        b.wait_for_text("table.grid tbody", &"07".repeat(8)).await;
        b.screenshot("search-older").await;
        b.assert_no_console_errors("a cut first page").await;
        b.close().await;
    });
}
