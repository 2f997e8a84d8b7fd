//! Drift between two versions of a dataset, from the OpenLineage facets stored on the
//! version nodes: schema changes (field added / removed / type changed), null-rate
//! change per column, row-count and distinct-count ratio change, and label entropy
//! drop when a column carries a value histogram.
//!
//! Where facts come from, on a version node's props: `facets.schema.fields`;
//! `dataQualityMetrics` (row count, `columnMetrics.{col}.nullCount / distinctCount`)
//! and `outputStatistics.rowCount` under `facets`, `inputFacets` or `outputFacets`.
//! A value histogram is Threadline's extension of a column's metrics:
//! `columnMetrics.{col}.histogram = {"value": count, …}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DriftConfig {
    /// Null-rate change that counts, in percentage points.
    pub null_rate_points: f64,
    /// Row / distinct count ratio (either way) that counts.
    pub count_ratio: f64,
    /// Label entropy drop that counts, in bits.
    pub entropy_drop_bits: f64,
}

impl Default for DriftConfig {
    fn default() -> Self {
        Self {
            null_rate_points: 5.0,
            count_ratio: 2.0,
            entropy_drop_bits: 0.5,
        }
    }
}

/// What a version's facets say, in one shape: all that drift compares. The store
/// keeps it per version so a new version is compared without re-reading the previous.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DriftProfile {
    fields: BTreeMap<String, String>,
    has_schema: bool,
    rows: Option<f64>,
    nulls: BTreeMap<String, f64>,
    distinct: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .filter(|x: &f64| x.is_finite())
}

impl DriftProfile {
    /// The profile of a version node's properties.
    pub fn of(props: &Value) -> Self {
        profile(props)
    }
}

fn profile(props: &Value) -> DriftProfile {
    let mut p = DriftProfile::default();
    if let Some(fields) = props
        .pointer("/facets/schema/fields")
        .and_then(Value::as_array)
    {
        p.has_schema = true;
        for f in fields {
            if let Some(name) = f.get("name").and_then(Value::as_str) {
                let ty = f.get("type").and_then(Value::as_str).unwrap_or_default();
                p.fields.insert(name.to_owned(), ty.to_owned());
            }
        }
    }
    for place in ["facets", "inputFacets", "outputFacets"] {
        let Some(facets) = props.get(place) else {
            continue;
        };
        for stats in ["dataQualityMetrics", "outputStatistics"] {
            if let Some(rows) = facets
                .pointer(&format!("/{stats}/rowCount"))
                .and_then(number)
            {
                p.rows = Some(rows);
            }
        }
        let Some(columns) = facets
            .pointer("/dataQualityMetrics/columnMetrics")
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (col, m) in columns {
            if let Some(n) = m.get("nullCount").and_then(number) {
                p.nulls.insert(col.clone(), n);
            }
            if let Some(n) = m.get("distinctCount").and_then(number) {
                p.distinct.insert(col.clone(), n);
            }
            if let Some(h) = m.get("histogram").and_then(Value::as_object) {
                p.histograms
                    .insert(col.clone(), h.values().filter_map(number).collect());
            }
        }
    }
    p
}

/// Shannon entropy in bits of a histogram.
fn entropy(counts: &[f64]) -> f64 {
    let total: f64 = counts.iter().filter(|c| **c > 0.0).sum();
    if total <= 0.0 {
        return 0.0;
    }
    -counts
        .iter()
        .filter(|c| **c > 0.0)
        .map(|c| {
            let p = c / total;
            p * p.log2()
        })
        .sum::<f64>()
}

fn ratio_changed(a: f64, b: f64, limit: f64) -> bool {
    if a <= 0.0 || b <= 0.0 {
        return (a <= 0.0) != (b <= 0.0);
    }
    let r = b / a;
    r >= limit || r <= 1.0 / limit
}

/// The drift from `previous` to `current` (version node props); `None` when nothing
/// crossed a threshold.
pub fn drift(previous: &Value, current: &Value, cfg: &DriftConfig) -> Option<Value> {
    drift_between(&profile(previous), &profile(current), cfg)
}

/// `drift` of two profiles.
pub fn drift_between(a: &DriftProfile, b: &DriftProfile, cfg: &DriftConfig) -> Option<Value> {
    let mut changes = Vec::new();
    if a.has_schema && b.has_schema {
        for (name, ty) in &b.fields {
            match a.fields.get(name) {
                None => changes.push(json!({"kind": "field_added", "field": name, "type": ty})),
                Some(old) if old != ty => changes
                    .push(json!({"kind": "type_changed", "field": name, "from": old, "to": ty})),
                _ => {}
            }
        }
        for name in a.fields.keys().filter(|n| !b.fields.contains_key(*n)) {
            changes.push(json!({"kind": "field_removed", "field": name}));
        }
    }
    if let (Some(ra), Some(rb)) = (a.rows, b.rows) {
        if ratio_changed(ra, rb, cfg.count_ratio) {
            changes.push(json!({"kind": "row_count", "from": ra, "to": rb}));
        }
        for (col, nb) in &b.nulls {
            if let Some(na) = a.nulls.get(col) {
                let (pa, pb) = (100.0 * na / ra.max(1.0), 100.0 * nb / rb.max(1.0));
                if (pb - pa).abs() >= cfg.null_rate_points {
                    changes.push(json!({
                        "kind": "null_rate", "column": col,
                        "from_percent": pa, "to_percent": pb,
                    }));
                }
            }
        }
    }
    for (col, db) in &b.distinct {
        if let Some(da) = a.distinct.get(col) {
            if ratio_changed(*da, *db, cfg.count_ratio) {
                changes
                    .push(json!({"kind": "distinct_count", "column": col, "from": da, "to": db}));
            }
        }
    }
    for (col, hb) in &b.histograms {
        if let Some(ha) = a.histograms.get(col) {
            let (ea, eb) = (entropy(ha), entropy(hb));
            if ea - eb >= cfg.entropy_drop_bits {
                changes.push(json!({
                    "kind": "label_entropy", "column": col,
                    "from_bits": ea, "to_bits": eb,
                }));
            }
        }
    }
    (!changes.is_empty()).then(|| json!({ "changes": changes }))
}

/// What a dataset version's stored `drift` property becomes once its previous version
/// (same dataset, the latest first seen no later than it) is known.
#[derive(Clone, Debug, PartialEq)]
pub enum DriftMark {
    /// The versions differ: the drift, naming the previous version's node.
    Set(Value),
    /// They do not (any longer): a stored drift goes.
    Clear,
    /// Nothing to write: no previous version, or a new version without drift.
    Keep,
}

/// The drift rule: a version is compared with its previous one (`previous`: its
/// profile, and how to read its graph key — read only when there is a drift to name
/// it in); `fresh` says the version was just created (it holds no drift to clear).
pub fn drift_mark<E>(
    previous: Option<(&DriftProfile, impl FnOnce() -> Result<String, E>)>,
    current: &DriftProfile,
    fresh: bool,
    cfg: &DriftConfig,
) -> Result<DriftMark, E> {
    let Some((previous, previous_key)) = previous else {
        return Ok(DriftMark::Keep);
    };
    Ok(match drift_between(previous, current, cfg) {
        Some(mut drift) => {
            drift["previous_version"] = json!(format!("dataset_version:{}", previous_key()?));
            DriftMark::Set(drift)
        }
        None if fresh => DriftMark::Keep,
        None => DriftMark::Clear,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(fields: &[(&str, &str)], rows: u64, nulls: u64, hist: &[u64]) -> Value {
        json!({
            "facets": {"schema": {"fields": fields.iter().map(|(n, t)| json!({"name": n, "type": t})).collect::<Vec<_>>()}},
            "inputFacets": {"dataQualityMetrics": {
                "rowCount": rows,
                "columnMetrics": {
                    "answer": {"nullCount": nulls, "distinctCount": 900},
                    "label": {"histogram": hist.iter().enumerate().map(|(i, c)| (format!("l{i}"), json!(c))).collect::<serde_json::Map<_, _>>()}
                }
            }}
        })
    }

    #[test]
    fn schema_null_rate_rows_and_entropy_changes_are_drift_and_small_moves_are_not() {
        let cfg = DriftConfig::default();
        let v1 = version(
            &[
                ("question", "string"),
                ("answer", "string"),
                ("score", "int"),
            ],
            10_000,
            100,
            &[25, 25, 25, 25],
        );
        let same = version(
            &[
                ("question", "string"),
                ("answer", "string"),
                ("score", "int"),
            ],
            12_000,
            300,
            &[24, 26, 25, 25],
        );
        assert_eq!(drift(&v1, &same, &cfg), None);
        let v2 = version(
            &[
                ("question", "string"),
                ("answer", "string"),
                ("score", "double"),
                ("lang", "string"),
            ],
            30_000,
            3_600,
            &[97, 1, 1, 1],
        );
        let d = drift(&v1, &v2, &cfg).unwrap();
        let kinds: Vec<&str> = d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "field_added",
                "type_changed",
                "row_count",
                "null_rate",
                "label_entropy"
            ]
        );
        assert_eq!(d["changes"][3]["to_percent"], 12.0);
    }

    #[test]
    fn odd_facets_never_panic_and_zero_rows_are_handled() {
        let cfg = DriftConfig::default();
        let odd = [
            json!(null),
            json!({"facets": {"schema": {"fields": "not a list"}}}),
            json!({"facets": {"schema": {"fields": [{"name": 3}, {"type": "x"}]}}}),
            json!({"inputFacets": {"dataQualityMetrics": {"rowCount": "many", "columnMetrics": {"a": {"nullCount": -5, "histogram": {"x": "y"}}}}}}),
            json!({"inputFacets": {"dataQualityMetrics": {"rowCount": 0, "columnMetrics": {"a": {"nullCount": 0, "distinctCount": 0, "histogram": {}}}}}}),
            json!({"outputFacets": {"outputStatistics": {"rowCount": 1e308}}}),
        ];
        for a in &odd {
            for b in &odd {
                let _ = drift(a, b, &cfg);
            }
        }
        let empty = json!({"outputFacets": {"outputStatistics": {"rowCount": 0}}});
        let full = json!({"outputFacets": {"outputStatistics": {"rowCount": 500}}});
        let d = drift(&empty, &full, &cfg).unwrap();
        assert_eq!(d["changes"][0]["kind"], "row_count");
    }

    #[test]
    fn a_version_is_marked_against_its_previous_one() {
        let cfg = DriftConfig::default();
        let of = |rows: u64| {
            DriftProfile::of(&json!({"facets": {"outputStatistics": {"rowCount": rows}}}))
        };
        let (small, big) = (of(100), of(10_000));
        let key = || Ok::<_, ()>("ds@v1".to_owned());
        let unread = || -> Result<String, ()> { panic!("the key is read only for a drift") };
        match drift_mark(Some((&small, key)), &big, true, &cfg) {
            Ok(DriftMark::Set(d)) => assert_eq!(d["previous_version"], "dataset_version:ds@v1"),
            other => panic!("expected drift, got {other:?}"),
        }
        // No change: a new version writes nothing, a re-sent one clears what it held.
        let mark = |fresh| drift_mark(Some((&small, unread)), &of(100), fresh, &cfg);
        assert_eq!(mark(true), Ok(DriftMark::Keep));
        assert_eq!(mark(false), Ok(DriftMark::Clear));
        let no_previous = None.map(|p: &DriftProfile| (p, unread));
        assert_eq!(
            drift_mark(no_previous, &big, false, &cfg),
            Ok(DriftMark::Keep)
        );
    }
}
