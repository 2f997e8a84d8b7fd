//! How a graph change combines with what is stored, as pure functions over model
//! types — the same rules for every store backend, which only reads the prior state
//! and persists the result: node properties merge as JSON merge patches, a run keeps
//! the state of its latest event, an event applied once changes nothing again, and a
//! registry entry gets a new revision only when its spec changed.

use serde_json::{Map, Value};
use threadline_model::{AssetOutcome, RunState, RunTransition};

/// RFC 7396 JSON merge patch: how an update's properties land on stored ones.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// A run's properties after a transition: the state of the latest event time (a
/// terminal state wins a tie) with its time, the earliest START as `started_at_ns` and
/// the latest terminal time as `ended_at_ns`. Events may arrive in any order.
pub fn move_run_state(props: &mut Map<String, Value>, run: &RunTransition) {
    let get = |m: &Map<String, Value>, k: &str| -> Option<i64> { m.get(k).and_then(Value::as_i64) };
    let t = run.event_time_ns;
    let state_time = get(props, "state_time_ns");
    let current_terminal = props
        .get("state")
        .and_then(Value::as_str)
        .and_then(RunState::parse)
        .is_some_and(|s| s.is_terminal());
    let newer = match state_time {
        None => true,
        Some(st) => t > st || (t == st && (run.state.is_terminal() || !current_terminal)),
    };
    if newer {
        props.insert("state".into(), run.state.as_str().into());
        props.insert("state_time_ns".into(), t.into());
    }
    if run.state == RunState::Start && get(props, "started_at_ns").is_none_or(|s| t < s) {
        props.insert("started_at_ns".into(), t.into());
    }
    if run.state.is_terminal() && get(props, "ended_at_ns").is_none_or(|e| t > e) {
        props.insert("ended_at_ns".into(), t.into());
    }
}

/// A run's properties after one of its OpenLineage events (`marker`: "TYPE|TIME"),
/// from the stored ones (`None`: a new run): the event's properties merged, its
/// transitions moved, the marker kept in `applied_events`. `None` when the run already
/// holds the marker: a re-sent event changes nothing.
pub fn apply_run_event(
    stored: Option<Value>,
    marker: &str,
    patch: &Value,
    transitions: &[RunTransition],
) -> Option<Value> {
    let mut props = stored.unwrap_or_else(|| Value::Object(Map::new()));
    let applied = props["applied_events"]
        .as_array()
        .is_some_and(|events| events.iter().any(|e| e.as_str() == Some(marker)));
    if applied {
        return None;
    }
    merge_patch(&mut props, patch);
    if let Value::Object(map) = &mut props {
        for transition in transitions {
            move_run_state(map, transition);
        }
        let events = map
            .entry("applied_events")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !events.is_array() {
            *events = Value::Array(Vec::new());
        }
        if let Value::Array(list) = events {
            list.push(marker.into());
        }
    }
    Some(props)
}

/// What registering a spec (by its digest) does, given the entry's latest stored
/// revision and its digest: nothing when the spec is the same, else the next revision.
pub fn next_revision(latest: Option<(u32, &str)>, spec_sha256: &str) -> AssetOutcome {
    match latest {
        Some((_, latest_sha)) if latest_sha == spec_sha256 => AssetOutcome::Unchanged,
        Some((n, _)) => AssetOutcome::Revised(n + 1),
        None => AssetOutcome::Created,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use threadline_model::NodeId;

    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7396() {
        // The RFC's own example (section 3).
        let mut target = json!({"title": "Goodbye!", "author": {"givenName": "John",
            "familyName": "Doe"}, "tags": ["example", "sample"], "content": "This will be unchanged"});
        merge_patch(
            &mut target,
            &json!({"title": "Hello!", "phoneNumber": "+01-123-456-7890",
                "author": {"familyName": null}, "tags": ["example"]}),
        );
        assert_eq!(
            target,
            json!({"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
                "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"})
        );
        let mut scalar = json!("x");
        merge_patch(&mut scalar, &json!({"a": {"b": 1}}));
        assert_eq!(scalar, json!({"a": {"b": 1}}));
    }

    fn transition(state: RunState, t: i64) -> RunTransition {
        RunTransition {
            run: NodeId::new(threadline_model::NodeKind::Run, "r1"),
            state,
            event_time_ns: t,
        }
    }

    #[test]
    fn a_run_keeps_its_latest_state_whatever_the_arrival_order() {
        let mut props = Map::new();
        move_run_state(&mut props, &transition(RunState::Complete, 30));
        move_run_state(&mut props, &transition(RunState::Start, 10));
        move_run_state(&mut props, &transition(RunState::Running, 20));
        assert_eq!(props["state"], "COMPLETE");
        assert_eq!(props["started_at_ns"], 10);
        assert_eq!(props["ended_at_ns"], 30);
        // A terminal state wins a tie with a running one, either way round.
        let mut tie = Map::new();
        move_run_state(&mut tie, &transition(RunState::Fail, 40));
        move_run_state(&mut tie, &transition(RunState::Running, 40));
        assert_eq!(tie["state"], "FAIL");
    }

    #[test]
    fn a_resent_event_changes_nothing() {
        let first = apply_run_event(
            None,
            "START|t1",
            &json!({"name": "train"}),
            &[transition(RunState::Start, 1)],
        )
        .unwrap();
        assert_eq!(first["state"], "START");
        assert_eq!(first["applied_events"], json!(["START|t1"]));
        assert_eq!(
            apply_run_event(Some(first.clone()), "START|t1", &json!({"name": "x"}), &[]),
            None
        );
        let done = apply_run_event(
            Some(first),
            "COMPLETE|t2",
            &json!({"rows": 10}),
            &[transition(RunState::Complete, 2)],
        )
        .unwrap();
        assert_eq!(done["state"], "COMPLETE");
        assert_eq!(done["name"], "train");
        assert_eq!(done["applied_events"], json!(["START|t1", "COMPLETE|t2"]));
    }

    #[test]
    fn a_spec_gets_a_revision_only_when_it_changed() {
        assert_eq!(next_revision(None, "a"), AssetOutcome::Created);
        assert_eq!(next_revision(Some((1, "a")), "a"), AssetOutcome::Unchanged);
        assert_eq!(next_revision(Some((3, "a")), "b"), AssetOutcome::Revised(4));
    }
}
