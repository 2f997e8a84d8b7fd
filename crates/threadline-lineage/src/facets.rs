//! Schema checks for the OpenLineage facets Threadline reads (their required fields and
//! value types, from the spec's facet schemas). A facet that fails is still stored —
//! raw, flagged invalid — but analysis never reads it. Facets not listed here (custom
//! or newer ones) are stored as they come, unchecked.

use serde_json::Value;

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    Arr,
    Obj,
}

impl Ty {
    fn matches(self, v: &Value) -> bool {
        match self {
            Ty::Str => v.is_string(),
            Ty::Int => v.is_i64() || v.is_u64(),
            Ty::Bool => v.is_boolean(),
            Ty::Arr => v.is_array(),
            Ty::Obj => v.is_object(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Ty::Str => "a string",
            Ty::Int => "an integer",
            Ty::Bool => "a boolean",
            Ty::Arr => "an array",
            Ty::Obj => "an object",
        }
    }
}

/// (field, type, required)
type Fields = &'static [(&'static str, Ty, bool)];

/// Where a facet sits in an event; the same name can mean different facets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FacetPlace {
    Run,
    Job,
    Dataset,
    InputDataset,
    OutputDataset,
}

struct Rule {
    place: FacetPlace,
    name: &'static str,
    fields: Fields,
    /// An array field whose items must have these fields.
    items: Option<(&'static str, Fields)>,
}

use FacetPlace::*;
use Ty::*;

const OWNERS: Option<(&str, Fields)> = Some(("owners", &[("name", Str, true)]));
/// `dataQualityMetrics` is the same facet on a dataset and on an input.
const DQ_METRICS: Fields = &[
    ("columnMetrics", Obj, true),
    ("rowCount", Int, false),
    ("bytes", Int, false),
    ("fileCount", Int, false),
];
const ASSERTIONS: Option<(&str, Fields)> = Some((
    "assertions",
    &[("assertion", Str, true), ("success", Bool, true)],
));

const RULES: &[Rule] = &[
    Rule {
        place: Run,
        name: "parent",
        fields: &[("run", Obj, true), ("job", Obj, true), ("root", Obj, false)],
        items: None,
    },
    Rule {
        place: Run,
        name: "nominalTime",
        fields: &[
            ("nominalStartTime", Str, true),
            ("nominalEndTime", Str, false),
        ],
        items: None,
    },
    Rule {
        place: Run,
        name: "errorMessage",
        fields: &[
            ("message", Str, true),
            ("programmingLanguage", Str, true),
            ("stackTrace", Str, false),
        ],
        items: None,
    },
    Rule {
        place: Run,
        name: "processing_engine",
        fields: &[("version", Str, true), ("name", Str, false)],
        items: None,
    },
    Rule {
        place: Run,
        name: "externalQuery",
        fields: &[("externalQueryId", Str, true), ("source", Str, true)],
        items: None,
    },
    Rule {
        place: Job,
        name: "ownership",
        fields: &[("owners", Arr, false)],
        items: OWNERS,
    },
    Rule {
        place: Job,
        name: "sql",
        fields: &[("query", Str, true), ("dialect", Str, false)],
        items: None,
    },
    Rule {
        place: Job,
        name: "jobType",
        fields: &[
            ("processingType", Str, true),
            ("integration", Str, true),
            ("jobType", Str, false),
        ],
        items: None,
    },
    Rule {
        place: Job,
        name: "documentation",
        fields: &[("description", Str, true)],
        items: None,
    },
    Rule {
        place: Job,
        name: "sourceCode",
        fields: &[("language", Str, true), ("sourceCode", Str, true)],
        items: None,
    },
    Rule {
        place: Job,
        name: "sourceCodeLocation",
        fields: &[("type", Str, true), ("url", Str, true)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "schema",
        fields: &[("fields", Arr, false)],
        items: Some(("fields", &[("name", Str, true), ("type", Str, false)])),
    },
    Rule {
        place: Dataset,
        name: "ownership",
        fields: &[("owners", Arr, false)],
        items: OWNERS,
    },
    Rule {
        place: Dataset,
        name: "columnLineage",
        fields: &[("fields", Obj, true), ("dataset", Arr, false)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "version",
        fields: &[("datasetVersion", Str, true)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "datasetVersion",
        fields: &[("datasetVersion", Str, true)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "documentation",
        fields: &[("description", Str, true)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "dataSource",
        fields: &[("name", Str, false), ("uri", Str, false)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "symlinks",
        fields: &[("identifiers", Arr, false)],
        items: Some((
            "identifiers",
            &[
                ("namespace", Str, true),
                ("name", Str, true),
                ("type", Str, true),
            ],
        )),
    },
    Rule {
        place: Dataset,
        name: "lifecycleStateChange",
        fields: &[("lifecycleStateChange", Str, true)],
        items: None,
    },
    Rule {
        place: Dataset,
        name: "dataQualityMetrics",
        fields: DQ_METRICS,
        items: None,
    },
    Rule {
        place: InputDataset,
        name: "dataQualityMetrics",
        fields: DQ_METRICS,
        items: None,
    },
    Rule {
        place: InputDataset,
        name: "dataQualityAssertions",
        fields: &[("assertions", Arr, true)],
        items: ASSERTIONS,
    },
    Rule {
        place: Dataset,
        name: "dataQualityAssertions",
        fields: &[("assertions", Arr, true)],
        items: ASSERTIONS,
    },
    Rule {
        place: InputDataset,
        name: "inputStatistics",
        fields: &[
            ("rowCount", Int, false),
            ("size", Int, false),
            ("fileCount", Int, false),
        ],
        items: None,
    },
    Rule {
        place: OutputDataset,
        name: "outputStatistics",
        fields: &[
            ("rowCount", Int, false),
            ("size", Int, false),
            ("fileCount", Int, false),
        ],
        items: None,
    },
];

/// Checks one facet; `Err` says what breaks its schema. Unknown facets pass.
pub(crate) fn check(place: FacetPlace, name: &str, facet: &Value) -> Result<(), String> {
    let Some(rule) = RULES.iter().find(|r| r.place == place && r.name == name) else {
        return Ok(());
    };
    let Some(obj) = facet.as_object() else {
        return Err("is not an object".to_owned());
    };
    check_fields(obj, rule.fields, "")?;
    if let Some((array, item_fields)) = rule.items {
        if let Some(items) = obj.get(array).and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                let item = item
                    .as_object()
                    .ok_or_else(|| format!("{array}[{i}] is not an object"))?;
                check_fields(item, item_fields, &format!("{array}[{i}]."))?;
            }
        }
    }
    if place == Run && name == "parent" {
        check_parent(obj)?;
    }
    if place == Dataset && name == "columnLineage" {
        check_column_lineage(obj)?;
    }
    Ok(())
}

fn check_fields(
    obj: &serde_json::Map<String, Value>,
    fields: Fields,
    prefix: &str,
) -> Result<(), String> {
    for &(field, ty, required) in fields {
        match obj.get(field) {
            None | Some(Value::Null) if required => {
                return Err(format!("{prefix}{field} is required"))
            }
            None | Some(Value::Null) => {}
            Some(v) if !ty.matches(v) => {
                return Err(format!(
                    "{prefix}{field} must be {}, got {}",
                    ty.name(),
                    short(v)
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn check_parent(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let run = obj.get("run").and_then(Value::as_object);
    match run.and_then(|r| r.get("runId")) {
        Some(Value::String(_)) => {}
        Some(v) => return Err(format!("run.runId must be a string, got {}", short(v))),
        None => return Err("run.runId is required".to_owned()),
    }
    let job = obj.get("job").and_then(Value::as_object);
    for field in ["namespace", "name"] {
        if !job.and_then(|j| j.get(field)).is_some_and(Value::is_string) {
            return Err(format!("job.{field} is required (a string)"));
        }
    }
    Ok(())
}

fn check_column_lineage(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let Some(fields) = obj.get("fields").and_then(Value::as_object) else {
        return Ok(());
    };
    for (column, spec) in fields {
        let inputs = spec
            .get("inputFields")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("fields.{column}.inputFields is required (an array)"))?;
        for (i, input) in inputs.iter().enumerate() {
            for field in ["namespace", "name", "field"] {
                if !input.get(field).is_some_and(Value::is_string) {
                    return Err(format!(
                        "fields.{column}.inputFields[{i}].{field} is required (a string)"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A value, cut short for messages.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn known_facets_are_checked_and_unknown_ones_pass() {
        assert!(check(OutputDataset, "outputStatistics", &json!({"rowCount": 10})).is_ok());
        let err = check(
            OutputDataset,
            "outputStatistics",
            &json!({"rowCount": "wrong"}),
        )
        .unwrap_err();
        assert_eq!(err, "rowCount must be an integer, got \"wrong\"");
        let err = check(Job, "ownership", &json!({"owners": [{"no-name": "x"}]})).unwrap_err();
        assert_eq!(err, "owners[0].name is required");
        let err = check(
            Run,
            "parent",
            &json!({"run": {"noRunId": "x"}, "job": {"namespace": "n", "name": "j"}}),
        )
        .unwrap_err();
        assert_eq!(err, "run.runId is required");
        assert!(check(Run, "additionalProp1", &json!("anything")).is_ok());
    }
}
