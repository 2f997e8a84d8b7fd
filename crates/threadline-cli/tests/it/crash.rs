//! Durability: every span acknowledged with a 2xx survives `kill -9` of the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::*;

#[test]
fn acknowledged_spans_survive_kill_9() {
    let mut server = TestServer::start();
    let url = format!("{}/v1/traces", server.otlp_http);
    let acked: Arc<Mutex<Vec<[u8; 16]>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4u8)
        .map(|worker| {
            let (url, acked, stop) = (url.clone(), Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                let client = client();
                let mut n: u32 = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let mut id = [worker + 1; 16];
                    id[..4].copy_from_slice(&n.to_be_bytes());
                    let body = proto(&llm_trace(id, "crash", "m", now_nanos()));
                    match client
                        .post(&url)
                        .header("content-type", "application/x-protobuf")
                        .body(body)
                        .send()
                    {
                        Ok(r) if r.status().is_success() => acked.lock().unwrap().push(id),
                        _ => {}
                    }
                }
            })
        })
        .collect();
    // Let acknowledgements accumulate, then pull the plug mid-stream.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while acked.lock().unwrap().len() < 300 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 300,
        "only {} acks before the deadline",
        acked.len()
    );
    server.restart();
    for id in &acked {
        let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(id)), None);
        assert_eq!(status, 200, "acknowledged trace {} lost", hex(id));
        assert_eq!(trace["span_count"], 2, "trace {} incomplete", hex(id));
    }
}
