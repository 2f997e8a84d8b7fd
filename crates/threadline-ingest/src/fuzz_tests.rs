//! Mutation fuzzing of the decoders, run as an ordinary test: valid OTLP payloads (the
//! convention fixtures, as JSON and re-encoded as protobuf) are corrupted thousands of
//! ways (bit flips, truncation, splices, byte runs) and fed through decode + convert +
//! normalize, which must return a value or an error, never panic or hang.

use prost::Message;

use crate::{convert_request, decode_export_request, parse_otlp_json, BodyLimits, ContentKind};

pub(crate) const FIXTURES: [&str; 5] = [
    include_str!("../fixtures/conventions/genai-current.json"),
    include_str!("../fixtures/conventions/genai-deprecated.json"),
    include_str!("../fixtures/conventions/openinference.json"),
    include_str!("../fixtures/conventions/vllm.json"),
    include_str!("../fixtures/conventions/platform.json"),
];

/// The fixtures re-encoded as OTLP/protobuf.
pub(crate) fn protobuf_fixtures() -> Vec<Vec<u8>> {
    FIXTURES
        .iter()
        .map(|f| {
            parse_otlp_json(f.as_bytes())
                .expect("fixture parses")
                .encode_to_vec()
        })
        .collect()
}

/// xorshift64*: deterministic, so a failure reproduces from the iteration number.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub(crate) fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(6) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => out.truncate(rng.below(out.len())),
            2 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next() as u8;
            }
            3 => {
                let at = rng.below(out.len() + 1);
                let run = vec![rng.next() as u8; rng.below(64)];
                out.splice(at..at, run);
            }
            4 if out.len() > 2 => {
                let a = rng.below(out.len());
                let b = rng.below(out.len());
                let (lo, hi) = (a.min(b), a.max(b));
                let copy = out[lo..hi].to_vec();
                let at = rng.below(out.len());
                out.splice(at..at, copy);
            }
            _ => {
                let tokens: [&[u8]; 8] = [
                    b"{}",
                    b"null",
                    b"[",
                    b"\"",
                    b"-1",
                    b"1e999",
                    b"\"intValue\":",
                    b"\xff\xff\xff\xff\x0f",
                ];
                let t = tokens[rng.below(tokens.len())];
                let at = rng.below(out.len() + 1);
                out.splice(at..at, t.iter().copied());
            }
        }
    }
    out
}

fn exercise(kind: ContentKind, body: &[u8]) {
    if kind == ContentKind::Protobuf {
        crate::traces_wire::tests::same_as_prost(body);
    }
    let limits = BodyLimits {
        max_body_bytes: 1 << 20,
    };
    if let Ok((request, _)) =
        decode_export_request(kind, None, body, limits, &mut crate::Unbudgeted)
    {
        let batch = convert_request(request, &crate::TimeBounds::storable());
        let _ = batch.error_message();
    }
}

#[test]
fn corrupted_payloads_never_panic() {
    let json_seeds: Vec<Vec<u8>> = FIXTURES.iter().map(|f| f.as_bytes().to_vec()).collect();
    let proto_seeds = protobuf_fixtures();
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    for iteration in 0..6000 {
        let seed = &json_seeds[iteration % json_seeds.len()];
        exercise(ContentKind::Json, &mutate(&mut rng, seed));
        let seed = &proto_seeds[iteration % proto_seeds.len()];
        exercise(ContentKind::Protobuf, &mutate(&mut rng, seed));
    }
}

#[test]
fn deeply_nested_values_are_refused_not_overflowing_the_stack() {
    let depth = 100_000;
    let mut doc = String::from(
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","attributes":[{"key":"k","value":"#,
    );
    for _ in 0..depth {
        doc.push_str(r#"{"arrayValue":{"values":["#);
    }
    exercise(ContentKind::Json, doc.as_bytes());
    // The protobuf equivalent: nested ArrayValue messages far beyond prost's recursion limit.
    let mut nested: Vec<u8> = Vec::new();
    for _ in 0..2_000 {
        let mut any = vec![0x2a]; // AnyValue.array_value (field 5, length-delimited)
        let mut array = vec![0x0a]; // ArrayValue.values (field 1)
        push_len(&mut array, nested.len());
        array.extend_from_slice(&nested);
        push_len(&mut any, array.len());
        any.extend_from_slice(&array);
        nested = any;
    }
    exercise(ContentKind::Protobuf, &nested);
}

fn push_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
