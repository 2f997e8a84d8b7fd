//! The web UI in a real headless Chromium against the real binary: every page opened
//! from its URL on the demo's data, the clicks a user makes from page to page, a folded
//! group expanded in a large trace, no console errors, and a screenshot of each page.

use fantoccini::Locator;

use crate::browser::{chromedriver, Browser};
use crate::harness::*;

#[test]
fn every_page_renders_from_its_url_and_clicks_lead_where_they_say() {
    let Some(driver) = chromedriver("the UI test") else {
        return;
    };
    let demo = Demo::start();
    let base = demo.api.clone();
    runtime().block_on(async {
        let b = Browser::start(&driver, 1280, 1000).await;

        // Search: newest traces, each row linking to its trace.
        b.open(&format!("{base}/"), "a.trace-link").await;
        assert_eq!(b.client.title().await.unwrap(), "Traces · Threadline");
        assert!(b.count("table.grid tbody tr").await >= 20);
        b.screenshot("search").await;
        b.assert_no_console_errors("/").await;
        // A filter goes into the URL, and the URL alone gives the same results.
        b.client
            .find(Locator::Css("#route"))
            .await
            .unwrap()
            .send_keys("/v1/support")
            .await
            .unwrap();
        b.click("#errors").await;
        b.click("form.filters button[type=submit]").await;
        let path = b.wait_path("/traces?").await;
        assert!(
            path.contains("route=%2Fv1%2Fsupport") && path.contains("status=error"),
            "{path}"
        );
        b.wait_for_text("table.grid tbody", "POST /v1/support")
            .await;
        b.open(&format!("{base}{path}"), "a.trace-link").await;
        let roots = b.text("table.grid tbody").await;
        assert!(
            !roots.contains("/v1/chat") && roots.contains("error"),
            "{roots}"
        );
        assert!(
            b.count("a.next-page").await == 1,
            "more than a page of errors on /v1/support"
        );

        // Free text: words of the conversations, the last one as typed so far.
        b.open(&format!("{base}/traces"), "a.trace-link").await;
        b.client
            .find(Locator::Css("#q"))
            .await
            .unwrap()
            .send_keys("Charged TWI")
            .await
            .unwrap();
        b.click("form.filters button[type=submit]").await;
        let path = b.wait_path("/traces?").await;
        assert!(path.contains("q=Charged"), "{path}");
        b.open(&format!("{base}{path}"), "a.trace-link").await;
        let roots = b.text("table.grid tbody").await;
        assert!(
            roots.contains("POST /v1/assistant") && !roots.contains("/v1/chat"),
            "{path}: {roots}"
        );
        b.screenshot("search-text").await;
        b.open(&format!("{base}/traces?q=charged%20thrice"), "p.empty")
            .await;

        // From a result to its trace.
        b.open(&format!("{base}{path}"), "a.trace-link").await;
        b.click("a.trace-link").await;
        b.wait_path("/traces/").await;
        b.wait_for(".wf-row").await;
        b.assert_no_console_errors("a trace").await;

        // The exemplar trace of the adapter incident: its LLM span's adapter chip
        // opens the adapter's lineage.
        b.open(demo.page("trace"), ".wf-row").await;
        b.wait_for_text(".wf-row", "chat meta-llama")
            .await
            .click()
            .await
            .unwrap();
        b.wait_for(".llm-panel").await;
        let panel = b.text(".span-panel").await;
        assert!(
            panel.contains("input tokens") && panel.contains("fin-lora@7"),
            "{panel}"
        );
        b.screenshot("trace").await;
        // The selection is in the URL: a reload shows the same span.
        let with_span = b.path().await;
        assert!(with_span.contains("?span="), "{with_span}");
        b.open(&format!("{base}{with_span}"), ".llm-panel").await;
        b.click("button.behind").await;
        b.wait_for_text(".behind-panel", "warehouse:fin-qa@v1")
            .await;
        b.click(".llm-panel a.chip[data-node^='adapter:']").await;
        let lineage = b.wait_path("/lineage/").await;
        assert!(
            lineage.starts_with("/lineage/adapter%3Afin-lora%407"),
            "{lineage}"
        );
        b.wait_for(".graph svg .node.center").await;
        for kind in ["dataset_version", "run", "instance", "route"] {
            assert!(
                b.count(&format!(".graph .node[data-node^='{kind}:']"))
                    .await
                    > 0,
                "no {kind} node around the adapter"
            );
        }
        b.wait_for(".node-panel .health").await;
        b.screenshot("lineage").await;
        b.assert_no_console_errors("lineage").await;

        // A conversation: the session's traces in order, one opened, its second model
        // call showing the messages and the tool call.
        b.open(demo.page("session"), "a.trace-link").await;
        assert_eq!(b.count("table.grid tbody tr").await, 3);
        b.screenshot("session").await;
        b.click("a.trace-link").await;
        b.wait_path("/traces/").await;
        // The waterfall renders after the trace's skeleton arrives.
        b.wait_for_text(".wf-row", "chat gpt-4o-mini").await;
        let calls = b.client.find_all(Locator::Css(".wf-row")).await.unwrap();
        let mut chat_rows = Vec::new();
        for row in calls {
            if row.text().await.unwrap().contains("chat gpt-4o-mini") {
                chat_rows.push(row);
            }
        }
        assert_eq!(chat_rows.len(), 2);
        chat_rows.pop().unwrap().click().await.unwrap();
        b.wait_for(".conversation .msg.tool").await;
        let conv = b.text(".conversation").await;
        assert!(
            conv.contains("lookup_account") && conv.contains("billing assistant"),
            "{conv}"
        );
        assert!(b.text(".llm-panel").await.contains("$0.0"), "a priced call");
        b.screenshot("trace-conversation").await;
        b.assert_no_console_errors("a conversation").await;

        // A session whose answering call sent its messages as GenAI log events: the
        // span lists its logs, and they make its conversation.
        b.open(&format!("{base}/sessions/sess-1001"), "a.trace-link")
            .await;
        b.click("a.trace-link").await;
        b.wait_path("/traces/").await;
        b.wait_for(".wf-row").await;
        let mut chat_rows = Vec::new();
        for row in b.client.find_all(Locator::Css(".wf-row")).await.unwrap() {
            if row.text().await.unwrap().contains("chat gpt-4o-mini") {
                chat_rows.push(row);
            }
        }
        chat_rows.pop().unwrap().click().await.unwrap();
        b.wait_for_text("table.logs", "gen_ai.choice").await;
        let logs = b.text("table.logs").await;
        assert!(
            logs.contains("gen_ai.system.message") && logs.contains("gen_ai.user.message"),
            "{logs}"
        );
        let conv = b.text(".conversation").await;
        assert!(
            conv.contains("billing assistant") && conv.contains("your plan is Pro"),
            "{conv}"
        );
        assert!(conv.contains("gen_ai_events"), "{conv}");
        b.screenshot("trace-log-events").await;
        b.assert_no_console_errors("log events").await;

        // Incidents: the list, one incident, and one of its exemplar traces.
        b.open(&format!("{base}/incidents"), "a.incident-link")
            .await;
        assert_eq!(b.count("a.incident-link").await, 6);
        b.screenshot("incidents").await;
        b.open(demo.page("incident"), ".cause").await;
        let first = b.text(".cause").await;
        assert!(first.contains("adapter:fin-lora@7"), "{first}");
        // Each cause says in a line what its evidence is.
        assert!(
            first.contains("of the bad requests (expected 0%) on") && first.contains("explains"),
            "the explanation is shown: {first}"
        );
        // The instances only the adapter runs on are the same cause, shown with it.
        assert!(
            first.contains("moves with it:") && first.contains("instance=i-3"),
            "co-moving values are shown: {first}"
        );
        b.wait_for(".chart .uplot").await;
        b.screenshot("incident").await;
        b.click(".cause a.exemplar").await;
        b.wait_path("/traces/").await;
        b.wait_for(".wf-row").await;
        b.assert_no_console_errors("an incident").await;

        // A large trace: the 1,200 chunk spans are one folded row until expanded.
        b.open(demo.page("large trace"), ".wf-group-row").await;
        let group = b.text(".wf-group-row").await;
        assert!(group.contains("1,200 × embed_chunk"), "{group}");
        assert!(b.count(".wf-row").await < 20, "the group is folded");
        b.screenshot("trace-large").await;
        b.click(".wf-group-row .expand-group").await;
        b.wait_for_text(".wf-tools", "1,206 rows").await;
        // Virtualized: only the rows on screen are in the DOM.
        let rendered = b.count(".wf-row").await;
        assert!(rendered > 20 && rendered < 120, "{rendered} rows rendered");
        b.wait_for_text(".wf-row", "embed_chunk").await;
        // Search inside the trace keeps each match's ancestors.
        b.client
            .find(Locator::Css("#trace-search"))
            .await
            .unwrap()
            .send_keys("upsert")
            .await
            .unwrap();
        b.wait_for_text(".wf-tools", "4 matching spans").await;
        b.wait_for_text(".wf-tools", "5 rows").await;
        assert_eq!(b.count(".wf-row.match").await, 4);
        b.assert_no_console_errors("a large trace").await;

        // Dashboard, impact.
        b.open(demo.page("dashboard"), ".chart .uplot").await;
        b.wait_for_count("section.series-row", 4).await;
        // The overview compares every series in one chart per metric, busiest first;
        // the blocks below come in the same order, the first three open.
        b.wait_for_count("section.overview .chart .uplot", 4).await;
        let legend = b.text("section.overview .chart .u-legend").await;
        let blocks = b.text("section.series-row summary").await;
        let busiest = blocks.split_whitespace().nth(1).unwrap().to_owned();
        assert!(legend.contains(&busiest), "{busiest} not in {legend}");
        assert_eq!(b.count("section.series-row details[open]").await, 3);
        b.screenshot("dashboard").await;
        b.assert_no_console_errors("the dashboard").await;
        b.open(demo.page("impact"), "table.plan").await;
        assert!(b.text(".impact-kinds").await.contains("sum-lora@4"));
        b.screenshot("impact").await;
        b.assert_no_console_errors("impact").await;

        // Every section from the navigation.
        crate::ui_pages::every_section_from_the_navigation(&b, &base).await;

        // The dark theme follows the system setting.
        b.prefer_color_scheme("dark").await;
        b.open(demo.page("incident"), ".cause").await;
        let background = b
            .client
            .execute(
                "return getComputedStyle(document.body).backgroundColor",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(background, "rgb(13, 17, 23)");
        b.wait_for(".chart .uplot").await;
        b.screenshot("incident-dark").await;
        b.open(demo.page("trace"), ".wf-row").await;
        b.screenshot("trace-dark").await;
        b.prefer_color_scheme("light").await;

        // Keyboard: the waterfall moves its selection with the arrow keys.
        b.open(demo.page("trace"), ".wf-row").await;
        let tree = b.client.find(Locator::Css(".wf-body")).await.unwrap();
        tree.send_keys("\u{E015}").await.unwrap(); // ArrowDown
        b.wait_for(".wf-row.sel").await;
        b.wait_path("/traces/").await;
        assert!(b.path().await.contains("?span="));
        b.close().await;

        // A narrow window still reads.
        let narrow = Browser::start(&driver, 420, 900).await;
        narrow.open(&format!("{base}/"), "a.trace-link").await;
        narrow.screenshot("search-narrow").await;
        narrow.open(demo.page("trace"), ".wf-row").await;
        narrow.screenshot("trace-narrow").await;
        narrow.assert_no_console_errors("narrow pages").await;
        narrow.close().await;
    });
}

const TENANTS: &str = r#"
[[tenants]]
id = "acme"
api_keys = ["acme-ui-key-0001"]

[[tenants]]
id = "globex"
api_keys = ["globex-ui-key-0002"]
"#;

#[test]
fn with_tenants_the_ui_asks_for_a_key_once_and_shows_only_that_tenants_data() {
    let Some(driver) = chromedriver("the UI tenant test") else {
        return;
    };
    let server = TestServer::start_with_config(Some(TENANTS));
    for (key, service, trace) in [
        ("acme-ui-key-0001", "acme-gateway", [0x31; 16]),
        ("globex-ui-key-0002", "globex-gateway", [0x32; 16]),
    ] {
        let resp = server.post_traces(
            "application/x-protobuf",
            proto(&llm_trace(trace, service, "gpt-4o", now_nanos())),
            &[("authorization", &format!("Bearer {key}"))],
        );
        assert!(resp.status().is_success());
    }
    let base = server.api.clone();
    runtime().block_on(async {
        let b = Browser::start(&driver, 1280, 900).await;
        b.open(
            &format!("{base}/traces"),
            "dialog[open] input[name=api-key]",
        )
        .await
        .send_keys("acme-ui-key-0001")
        .await
        .unwrap();
        b.click("dialog button[type=submit]").await;
        b.wait_for_text("table.grid tbody", "acme-gateway").await;
        assert!(!b.text("main").await.contains("globex"));
        b.screenshot("tenant-search").await;
        // The other tenant's trace is not found by its id either.
        b.open(&format!("{base}/traces/{}", hex(&[0x32; 16])), ".error-box")
            .await;
        assert!(b.text(".error-box").await.contains("not found"));
        // The key is asked once: a new page load uses the stored key.
        b.open(&format!("{base}/traces/{}", hex(&[0x31; 16])), ".wf-row")
            .await;
        assert_eq!(b.count("dialog[open]").await, 0);
        // 404 from the trace API is the expected console error above; none other.
        let errors = b.console_errors().await;
        assert!(
            errors.iter().all(|e| e.contains("404")),
            "console errors: {errors:#?}"
        );
        b.close().await;
    });
}
