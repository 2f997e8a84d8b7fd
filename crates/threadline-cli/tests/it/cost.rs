//! Cost: the default price table prices hosted models, a configured entry prices a
//! self-hosted one, and the price shows on spans, trace summaries, the trace and the
//! `cost` metric.

use crate::harness::*;

#[test]
fn spans_traces_and_the_cost_metric_are_priced_by_the_table() {
    let server = TestServer::start_with_config(Some(
        "[[prices]]\nmodel = \"acme/llama-*\"\ninput_per_million = 1.0\noutput_per_million = 2.0\n",
    ));
    let now = now_nanos();
    // 120 input and 30 output tokens each (see `llm_trace`).
    for (n, model) in [
        (1u8, "gpt-4o"),
        (2, "acme/llama-3-70b"),
        (3, "my-own-model"),
    ] {
        let resp = server.post_traces(
            "application/x-protobuf",
            proto(&llm_trace([n; 16], "gateway", model, now - 60_000_000_000)),
            &[],
        );
        assert!(resp.status().is_success());
    }
    // gpt-4o: 120 × $2.50 + 30 × $10 per million; the configured glob: 120 × $1 + 30 × $2.
    let expected = [(1u8, 0.0006), (2, 0.00018), (3, 0.0)];
    let (_, page) = server.get("/api/v1/traces?limit=10", None);
    for (n, usd) in expected {
        let t = find_in(&page["traces"], "trace_id", &hex(&[n; 16]));
        let got = t["cost_usd"].as_f64().unwrap();
        assert!((got - usd).abs() < 1e-12, "trace {n}: {got} ≠ {usd}");
        let (_, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[n; 16])), None);
        assert!((trace["cost_usd"].as_f64().unwrap() - usd).abs() < 1e-12);
        let call = &trace["roots"][0]["children"][0];
        assert!(
            (call["llm"]["cost_usd"].as_f64().unwrap() - usd).abs() < 1e-12,
            "{call}"
        );
    }
    let from = (now / 1_000_000_000) - 600;
    let (status, metric) = server.get(
        &format!("/api/v1/metrics?metric=cost&group_by=model&from={from}&step=1h"),
        None,
    );
    assert_eq!(status, 200, "{metric}");
    assert_eq!(metric["unit"], "USD");
    let total: f64 = metric["series"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["points"].as_array().unwrap().clone())
        .filter_map(|p| p["value"].as_f64())
        .sum();
    assert!((total - 0.00078).abs() < 1e-9, "{metric}");
    let gpt = metric["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["labels"]["model"] == "gpt-4o")
        .unwrap();
    assert!((gpt["points"][0]["value"].as_f64().unwrap() - 0.0006).abs() < 1e-12);
}
