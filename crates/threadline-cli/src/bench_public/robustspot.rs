//! RobustSpot's real incidents (`data/RS/` of shaido987/riskloc): per minute, leaf
//! rows of several attributes with a count of viewers and of those whose video
//! stalled; `anomaly.yaml` names each case's file, the anomalous minute and the
//! slice (one or more elements of one to three attribute values) that caused it.
//!
//! A case is replayed as requests: each viewer of a leaf and minute one request of a
//! route, its attributes on the model call the request makes, a stalled one failed.
//! The attributes go to the dimensions the rollups slice by (`ATTRIBUTES`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use rand::rngs::StdRng;
use rand::Rng;

use crate::loadgen::{s, service_spans};
use crate::synth::nonzero_id;

/// RS attribute → the span attribute it is sent as, and the RCA dimension that reads
/// it. Every RS attribute has a dimension of its own that takes any text.
pub(crate) const ATTRIBUTES: [(&str, &str, &str); 7] = [
    ("cdn", "model.instance.id", "instance"),
    ("bitrate", "llm.lora.adapter_id", "adapter"),
    ("p2p", "gray.tag", "gray_tag"),
    ("device", "container.image", "image"),
    ("isp", "ab.group", "ab_group"),
    ("platform", "llm.prompt.version", "prompt_version"),
    ("gameid", "gen_ai.provider.name", "provider"),
];

pub(crate) const SERVICE: &str = "rs-gateway";
pub(crate) const ROUTE: &str = "/play";

/// A slice: attribute values that all hold (`{cdn: 7, p2p: 0}`).
pub(crate) type Element = BTreeSet<(String, String)>;

/// One labelled case.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) name: String,
    /// The anomalous minute, Unix seconds.
    pub(crate) at: i64,
    pub(crate) cause: Vec<Element>,
    pub(crate) file: PathBuf,
}

/// A scalar of the label as the CSV writes it (`2000`, `C3`).
fn text(v: &serde_yaml_ng::Value) -> Option<String> {
    match v {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn element(map: &serde_yaml_ng::Mapping) -> anyhow::Result<Element> {
    map.iter()
        .map(|(k, v)| match (text(k), text(v)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => bail!("a cause element's keys and values are scalars: {map:?}"),
        })
        .collect()
}

/// The cases of `dir/anomaly.yaml`, in file order.
pub(crate) fn cases(dir: &Path) -> anyhow::Result<Vec<Case>> {
    let path = dir.join("anomaly.yaml");
    let yaml = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let entries: Vec<serde_yaml_ng::Value> =
        serde_yaml_ng::from_str(&yaml).with_context(|| format!("{} is no list", path.display()))?;
    entries
        .iter()
        .map(|e| {
            let name = e["data"]
                .as_str()
                .map(str::to_owned)
                .context("an anomaly without `data`")?;
            let at = e["timestamp"]
                .as_i64()
                .with_context(|| format!("{name}: no integer `timestamp`"))?;
            let cause = match &e["cause"] {
                serde_yaml_ng::Value::Mapping(m) => vec![element(m)?],
                serde_yaml_ng::Value::Sequence(list) => list
                    .iter()
                    .map(|x| {
                        x.as_mapping()
                            .context("a cause list holds mappings")
                            .and_then(element)
                    })
                    .collect::<anyhow::Result<_>>()?,
                other => bail!("{name}: a cause is a mapping or a list of them, not {other:?}"),
            };
            Ok(Case {
                file: dir.join(format!("{name}.csv")),
                name,
                at,
                cause,
            })
        })
        .collect()
}

/// One leaf of one minute.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Leaf {
    pub(crate) minute: i64,
    /// (RS attribute, value), in the file's column order.
    pub(crate) values: Vec<(String, String)>,
    pub(crate) failed: u64,
    pub(crate) count: u64,
}

/// The leaves of a case file: columns `min`, `value`, `cnt` and the attributes, in
/// any order.
pub(crate) fn leaves(path: &Path) -> anyhow::Result<Vec<Leaf>> {
    let body =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = body.lines();
    let header: Vec<&str> = lines
        .next()
        .context("an empty case file")?
        .split(',')
        .map(str::trim)
        .collect();
    let n = header.len();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let (Some(min), Some(value), Some(cnt)) = (column("min"), column("value"), column("cnt"))
    else {
        bail!(
            "{}: the header names `min`, `value`, `cnt` and the attributes, not {header:?}",
            path.display()
        );
    };
    let attributes: Vec<(usize, &str)> = header
        .iter()
        .enumerate()
        .filter(|(i, _)| ![min, value, cnt].contains(i))
        .map(|(i, a)| (i, *a))
        .collect();
    for (_, a) in &attributes {
        if !ATTRIBUTES.iter().any(|(name, _, _)| name == a) {
            bail!("{}: unknown attribute {a:?}", path.display());
        }
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            let at = || format!("{} line {}", path.display(), i + 2);
            if cols.len() != n {
                bail!("{}: {} columns, the header has {n}", at(), cols.len());
            }
            let number = |s: &str| -> anyhow::Result<f64> {
                s.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .with_context(|| format!("{}: {s:?} is no count", at()))
            };
            Ok(Leaf {
                minute: number(cols[min])? as i64 / 60,
                values: attributes
                    .iter()
                    .map(|(i, a)| ((*a).to_owned(), cols[*i].to_owned()))
                    .collect(),
                failed: number(cols[value])? as u64,
                count: number(cols[cnt])? as u64,
            })
        })
        .collect()
}

/// `x` rounded up or down at random, in proportion: the expectation is `x`.
fn stochastic_round(rng: &mut StdRng, x: f64) -> u64 {
    let floor = x.floor();
    floor as u64 + u64::from(rng.random::<f64>() < x - floor)
}

/// The requests of a case as OTLP export requests, minute `m` of the file sent as
/// Unix minute `m + shift`; viewers sampled one in `keep_one_in`. Returns the
/// batches and the requests sent.
pub(crate) fn replay(
    rng: &mut StdRng,
    leaves: &[Leaf],
    shift: i64,
    keep_one_in: f64,
) -> (Vec<ExportTraceServiceRequest>, u64) {
    let mut by_minute: BTreeMap<i64, Vec<&Leaf>> = BTreeMap::new();
    for leaf in leaves {
        by_minute.entry(leaf.minute).or_default().push(leaf);
    }
    let mut batches = Vec::new();
    let mut sent = 0;
    for (minute, leaves) in by_minute {
        let mut spans = Vec::new();
        for leaf in leaves {
            let n = stochastic_round(rng, leaf.count as f64 / keep_one_in);
            let failed =
                stochastic_round(rng, leaf.failed.min(leaf.count) as f64 / keep_one_in).min(n);
            for k in 0..n {
                let start = ((minute + shift) * 60) as u64 * 1_000_000_000
                    + rng.random_range(0..58_000_000_000u64);
                spans.extend(request(rng, leaf, start, k < failed));
                sent += 1;
            }
        }
        for chunk in spans.chunks(4_000) {
            batches.push(ExportTraceServiceRequest {
                resource_spans: vec![service_spans(SERVICE, "robustspot", chunk.to_vec())],
            });
        }
    }
    (batches, sent)
}

/// One viewer: the route's server span and the call carrying the leaf's attributes.
fn request(rng: &mut StdRng, leaf: &Leaf, start: u64, failed: bool) -> [Span; 2] {
    let trace_id = nonzero_id::<16>(rng).to_vec();
    let root_id = nonzero_id::<8>(rng).to_vec();
    let ms = 80.0 + 40.0 * rng.random::<f64>();
    let end = start + (ms * 1e6) as u64;
    let status = failed.then(|| Status {
        code: 2,
        message: "playback stalled".into(),
    });
    let mut attributes = vec![
        s("gen_ai.operation.name", "chat"),
        s("gen_ai.request.model", "rs-player"),
        s("llm.prompt_template.id", "rs"),
    ];
    for (name, value) in &leaf.values {
        if let Some((_, key, _)) = ATTRIBUTES.iter().find(|(a, _, _)| a == name) {
            attributes.push(s(key, value.clone()));
        }
    }
    let call = Span {
        trace_id: trace_id.clone(),
        span_id: nonzero_id::<8>(rng).to_vec(),
        parent_span_id: root_id.clone(),
        name: "play".into(),
        kind: 3,
        start_time_unix_nano: start + 1_000_000,
        end_time_unix_nano: end - 1_000_000,
        attributes,
        status: status.clone(),
        ..Default::default()
    };
    let root = Span {
        trace_id,
        span_id: root_id,
        name: format!("GET {ROUTE}"),
        kind: 2,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes: vec![s("http.route", ROUTE), s("http.request.method", "GET")],
        status,
        ..Default::default()
    };
    [root, call]
}

/// The RS elements an RCA candidate names: one of its attribute value(s)
/// (`instance=7`, or a pair `adapter=2000 & gray_tag=1`), or two for either of two
/// values (`adapter=2000 | adapter=4000`), mapped back to RS attributes; `None` for a
/// candidate that is no attribute value.
pub(crate) fn elements_of(subject: &str) -> Option<Vec<Element>> {
    subject.split(" | ").map(element_of).collect()
}

fn element_of(subject: &str) -> Option<Element> {
    subject
        .split(" & ")
        .map(|part| {
            let (dim, value) = part.split_once('=')?;
            let (rs, _, _) = ATTRIBUTES.iter().find(|(_, _, d)| *d == dim)?;
            Some(((*rs).to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_case_directory_reads_its_labels_and_leaves() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("anomaly.yaml"),
            "- data: c1\n  timestamp: 1566397800\n  cause: {'bitrate':2000,'p2p':1}\n\
             - data: c2\n  timestamp: 60\n  cause: [{'cdn':7}, {'device': 'C3'}]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("c1.csv"),
            "min,cdn,bitrate,p2p,value,cnt\n1566397200,5,500,1,3,48\n1566397260,3,2000,0,0,2\n",
        )
        .unwrap();
        let cases = cases(dir.path()).unwrap();
        assert_eq!(cases.len(), 2);
        let pair: Element = [("bitrate", "2000"), ("p2p", "1")]
            .map(|(a, v)| (a.to_owned(), v.to_owned()))
            .into();
        assert_eq!(cases[0].cause, vec![pair]);
        assert_eq!(cases[1].cause.len(), 2);
        let leaves = leaves(&cases[0].file).unwrap();
        assert_eq!(leaves.len(), 2);
        assert_eq!(
            (leaves[0].minute, leaves[0].failed, leaves[0].count),
            (26106620, 3, 48)
        );
        assert_eq!(leaves[1].values[1], ("bitrate".into(), "2000".into()));
        // Replayed in full: one request per viewer, two spans each.
        let mut rng = StdRng::seed_from_u64(1);
        let (batches, sent) = replay(&mut rng, &leaves, 0, 1.0);
        assert_eq!(sent, 50);
        let spans: usize = batches.iter().map(crate::synth::span_count).sum();
        assert_eq!(spans, 100);
    }

    #[test]
    fn bad_case_files_are_refused_with_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.csv");
        std::fs::write(&file, "min,colour,value,cnt\n1,red,0,1\n").unwrap();
        let err = leaves(&file).unwrap_err().to_string();
        assert!(err.contains("unknown attribute \"colour\""), "{err}");
        std::fs::write(&file, "value,cnt,min,cdn\n0,1,60,3\n").unwrap();
        assert_eq!(
            leaves(&file).unwrap()[0].values,
            vec![("cdn".into(), "3".into())]
        );
        std::fs::write(&file, "min,cdn,value,cnt\n1,3,x,1\n").unwrap();
        let err = leaves(&file).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("\"x\""), "{err}");
    }

    #[test]
    fn candidates_map_back_to_rs_attributes() {
        let e = elements_of("adapter=2000 & gray_tag=1").unwrap();
        assert_eq!(e.len(), 1);
        assert!(e[0].contains(&("bitrate".into(), "2000".into())));
        assert!(e[0].contains(&("p2p".into(), "1".into())));
        let either = elements_of("adapter=2000 | adapter=4000").unwrap();
        assert_eq!(either.len(), 2);
        assert!(either[1].contains(&("bitrate".into(), "4000".into())));
        assert_eq!(elements_of("service=x span=y"), None);
    }
}
