//! What a careless client or an attacker on loopback must not be able to do: blind the
//! detector with a skewed clock, write from another site, hold connections or memory,
//! read other tenants' numbers, or start a second writer on the same data.

mod access;
mod bodies;
mod connections;
mod records;

use crate::harness::*;

const PROTOBUF: &str = "application/x-protobuf";

/// POST with any content type and headers; (status, JSON body or Null, headers).
fn post_raw(
    url: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value, reqwest::header::HeaderMap) {
    let mut req = client().post(url).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().expect("POST");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (
        status,
        resp.json().unwrap_or(serde_json::Value::Null),
        headers,
    )
}
