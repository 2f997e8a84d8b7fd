//! A request's lineage is the graph as it stood while the request ran: an image rolled
//! onto its instance after it, or a base model an adapter was re-registered onto after
//! it, is not behind it — in the API, the CLI's PROV export and impact. The rollout and
//! the re-registration are shifted in time against the requests.

use serde_json::{json, Value};

use crate::harness::*;

const HOUR: u64 = 3_600_000_000_000;

/// A request on `instance`: gateway root with the route, chat span with the adapter and,
/// when given, the container image it ran in.
/// The model named is the adapter (as vLLM reports a LoRA), so the base model behind it
/// comes from the registry alone.
fn request(trace: u8, instance: &str, image: Option<&str>, start: u64) -> Vec<u8> {
    use opentelemetry_proto::tonic::trace::v1::Span;
    let mut req = llm_trace([trace; 16], "gateway", "fin-lora", start);
    let spans: &mut Vec<Span> = &mut req.resource_spans[0].scope_spans[0].spans;
    spans[1]
        .attributes
        .retain(|kv| kv.key != "llm.lora.adapter_id");
    spans[1].attributes.extend([
        kv("llm.lora.adapter_id", "fin-lora"),
        kv("model.instance.id", instance),
    ]);
    if let Some(image) = image {
        spans[1].attributes.push(kv("container.image", image));
    }
    proto(&req)
}

fn send(server: &TestServer, body: Vec<u8>) {
    let resp = server.post_traces("application/x-protobuf", body, &[]);
    assert_eq!(resp.status(), 200);
}

fn register(server: &TestServer, base: &str) -> Value {
    let manifest = json!({
        "models": [{"id": "llama-3-8b"}, {"id": "llama-3.1-8b"}],
        "adapters": [{"id": "fin-lora", "base_model": base, "relation": "adapter"}],
    });
    let resp = client()
        .put(format!("{}/api/v1/assets", server.api))
        .json(&manifest)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().unwrap()
}

fn chain(server: &TestServer, trace: u8) -> Value {
    let (status, body) = server.get(
        &format!("/api/v1/traces/{}/lineage", hex(&[trace; 16])),
        None,
    );
    assert_eq!(status, 200, "{body}");
    body["chain"].clone()
}

#[test]
fn a_request_lineage_is_the_graph_as_of_the_request() {
    let server = TestServer::start();
    let now = now_nanos();
    register(&server, "llama-3-8b");

    // i-4 runs vllm:0.6.0 three hours ago; the 0.6.2 rollout reaches it an hour ago.
    let before = now - 3 * HOUR;
    send(&server, request(1, "i-4", Some("vllm:0.6.0"), before));
    // A request on i-4 whose spans name no image: the image i-4 ran then.
    send(&server, request(2, "i-4", None, before + 60_000_000_000));
    send(&server, request(3, "i-4", Some("vllm:0.6.2"), now - HOUR));
    // After the rollout, the same: a request naming no image ran on 0.6.2.
    send(
        &server,
        request(4, "i-4", None, now - HOUR + 30_000_000_000),
    );

    for (trace, image) in [
        (1, "image:vllm:0.6.0"),
        (2, "image:vllm:0.6.0"),
        (3, "image:vllm:0.6.2"),
        (4, "image:vllm:0.6.2"),
    ] {
        let c = chain(&server, trace);
        assert_eq!(c["images"], json!([image]), "trace {trace}: {c}");
        assert_eq!(
            c["instances"],
            json!(["instance:i-4"]),
            "trace {trace}: {c}"
        );
    }

    // The adapter is re-registered onto another base: the old base_of edge is
    // superseded, not a rival.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let out = register(&server, "llama-3.1-8b");
    assert!(out.to_string().contains("revised"), "{out}");
    let after = now_nanos() + 2_000_000_000;
    send(&server, request(5, "i-5", Some("vllm:0.6.2"), after));
    let bases = |trace: u8| -> Vec<String> {
        let (_, body) = server.get(
            &format!("/api/v1/traces/{}/lineage", hex(&[trace; 16])),
            None,
        );
        body["edges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "base_of")
            .map(|e| e["src"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(bases(1), ["model:llama-3-8b"], "before the re-registration");
    let models = |trace: u8| chain(&server, trace)["models"].to_string();
    assert!(!models(1).contains("llama-3.1-8b"), "{}", models(1));
    assert_eq!(
        bases(5),
        ["model:llama-3.1-8b"],
        "after it: the new base only"
    );
    assert!(
        models(5).contains("llama-3.1-8b") && !models(5).contains("llama-3-8b"),
        "{}",
        models(5)
    );

    // The adapter's own lineage shows both edges with their validity.
    let (status, up) = server.get("/api/v1/lineage/adapter:fin-lora?direction=upstream", None);
    assert_eq!(status, 200, "{up}");
    let base_of: Vec<&Value> = up["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "base_of")
        .collect();
    assert_eq!(base_of.len(), 2, "{up}");
    let old = base_of
        .iter()
        .find(|e| e["src"] == "model:llama-3-8b")
        .unwrap();
    let new = base_of
        .iter()
        .find(|e| e["src"] == "model:llama-3.1-8b")
        .unwrap();
    assert!(old["superseded_unix_nano"].is_string(), "{old}");
    assert_eq!(old["declared"], true);
    assert!(new["superseded_unix_nano"].is_null(), "{new}");
    assert_eq!(new["valid_from_unix_nano"], old["superseded_unix_nano"]);

    // PROV for request 2 names the image it ran on, not the later one.
    let root = format!("request:{}", hex(&[2u8; 16]));
    let (ok, turtle, err) = server.cli(&["export", "prov", "--root", &root, "--format", "turtle"]);
    assert!(ok, "{err}");
    assert!(turtle.contains("0.6.0"), "{turtle}");
    assert!(!turtle.contains("0.6.2"), "{turtle}");

    // Impact of the old base: no longer reaches the adapter.
    let (status, impact) = server.get("/api/v1/impact/model:llama-3-8b", None);
    assert_eq!(status, 200, "{impact}");
    assert_eq!(impact["affected_count"], 0, "{impact}");
    let (status, impact) = server.get("/api/v1/impact/model:llama-3.1-8b", None);
    assert_eq!(status, 200, "{impact}");
    assert!(
        impact["affected"]["adapter"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("adapter:fin-lora"))),
        "{impact}"
    );
}
