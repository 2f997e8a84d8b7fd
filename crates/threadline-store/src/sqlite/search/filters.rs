//! The SQL half of a search's filters: columns, names and models as conditions on
//! `spans` and the block probes that skip blocks without a match.

use super::*;

/// Unsigned nanoseconds as SQLite stores them (saturating at `i64::MAX`).
pub(super) fn sql_nanos(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

/// Whether `stored` is what a user meant by `wanted`.
fn names_match(how: NameMatch, stored: &str, wanted: &str) -> bool {
    match how {
        NameMatch::Prefix => stored.to_lowercase().starts_with(&wanted.to_lowercase()),
        NameMatch::Exact => stored == wanted,
    }
}

/// A model filter: the span's model (the requested one) or its responding model
/// matches. `models` are the requested models of every span that can match (what the
/// block probe looks for); `condition` is `None` when every span with one of them
/// matches, else the SQL that tells.
struct ModelFilter {
    models: Vec<String>,
    condition: Option<(String, Vec<Value>)>,
}

fn model_filter(
    conn: &Connection,
    tenant_id: i64,
    how: NameMatch,
    wanted: &str,
) -> Result<ModelFilter, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT model, response_model FROM tenant_models WHERE tenant_id = ?1")
        .map_err(|e| sqlite_err(conn, e))?;
    let rows = stmt
        .query_map([tenant_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(|e| sqlite_err(conn, e))?;
    let (mut direct, mut behind, mut responses) = (Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        let (model, response) = row.map_err(|e| sqlite_err(conn, e))?;
        if names_match(how, &model, wanted) {
            direct.push(model);
        } else if !response.is_empty() && names_match(how, &response, wanted) {
            behind.push(model);
            responses.push(response);
        }
    }
    for v in [&mut direct, &mut behind, &mut responses] {
        v.sort_unstable();
        v.dedup();
    }
    let text = |v: &[String]| v.iter().cloned().map(Value::Text).collect::<Vec<_>>();
    let mut models: Vec<String> = direct.iter().chain(&behind).cloned().collect();
    models.sort_unstable();
    models.dedup();
    if responses.is_empty() {
        return Ok(ModelFilter {
            models: direct,
            condition: None,
        });
    }
    let mut args = Vec::new();
    let mut either = Vec::new();
    if !direct.is_empty() {
        either.push(format!(
            "model IN ({})",
            crate::sqlite::placeholders(direct.len())
        ));
        args.extend(text(&direct));
    }
    either.push(format!(
        "response_model IN ({})",
        crate::sqlite::placeholders(responses.len())
    ));
    args.extend(text(&responses));
    Ok(ModelFilter {
        models,
        condition: Some((format!("({})", either.join(" OR ")), args)),
    })
}

/// The SQL half of a search's filters (everything but attributes and text).
pub(super) struct SqlFilters {
    /// The condition on `spans` and its arguments.
    pub(super) sql: String,
    pub(super) args: Vec<Value>,
    /// What a block must hold to hold a match.
    probes: Vec<BlockProbe>,
    /// Whether the condition tests nothing but the probed values.
    probes_decide: bool,
}

impl SqlFilters {
    /// Only the spans a trace is entered by: its root, or a server or consumer span
    /// (whose caller may not report): what an unfiltered search reads, so a trace is
    /// found by its start and not by every span that started after it.
    pub(super) fn entries_only(&mut self) {
        self.sql
            .push_str(" AND (parent_span_id IS NULL OR kind IN (2, 5))");
        self.probes_decide = false;
    }

    /// The rows to read, in blocks whose attribute filter may hold `attr_hashes`.
    pub(super) fn row_filter<'a>(&'a self, attr_hashes: &'a [u64]) -> RowFilter<'a> {
        RowFilter {
            sql: &self.sql,
            args: self.args.clone(),
            probes: &self.probes,
            probes_decide: self.probes_decide,
            attr_hashes,
        }
    }
}

pub(super) fn sql_filters(
    conn: &Connection,
    tenant_id: i64,
    q: &TraceQuery,
) -> Result<SqlFilters, StoreError> {
    let mut sql = String::from(TENANT_ONLY);
    let mut args = vec![Value::Integer(tenant_id)];
    let mut probes = Vec::new();
    let mut probes_decide = true;
    let mut one_of = |sql: &mut String, probe: BlockProbe| {
        let (condition, values) = probe.row_sql("");
        sql.push_str(&condition);
        args.extend(values);
        probes.push(probe);
    };
    if let Some(wanted) = &q.service {
        let mut names = tenant_services(conn, tenant_id)?;
        names.retain(|name| names_match(q.names, name, wanted));
        one_of(&mut sql, BlockProbe::new(ValueField::Service, names));
    }
    let mut model_condition = None;
    if let Some(wanted) = &q.model {
        let filter = model_filter(conn, tenant_id, q.names, wanted)?;
        one_of(&mut sql, BlockProbe::new(ValueField::Model, filter.models));
        model_condition = filter.condition;
    }
    for (field, value) in [
        (ValueField::Route, &q.route),
        (ValueField::Adapter, &q.adapter),
        (ValueField::AbGroup, &q.ab_group),
    ] {
        if let Some(v) = value {
            one_of(&mut sql, BlockProbe::new(field, vec![v.clone()]));
        }
    }
    if q.errors_only {
        one_of(&mut sql, BlockProbe::errors());
    }
    if let Some((condition, values)) = model_condition {
        sql.push_str(&format!(" AND {condition}"));
        args.extend(values);
        probes_decide = false;
    }
    for (column, value) in [
        ("name", &q.span_name),
        ("session_id", &q.session_id),
        ("user_id", &q.user_id),
    ] {
        if let Some(v) = value {
            sql.push_str(&format!(" AND {column} = ?"));
            args.push(Value::Text(v.clone()));
            probes_decide = false;
        }
    }
    // Start times are the window's, which the read tests on every row it keeps; the
    // probes still decide which blocks hold a match in it.
    for (condition, n, of_window) in [
        (" AND duration_ns >= ?", q.min_duration_nanos, false),
        (" AND duration_ns <= ?", q.max_duration_nanos, false),
        (" AND start_ns >= ?", q.start_from_unix_nano, true),
        (" AND start_ns <= ?", q.start_to_unix_nano, true),
    ] {
        if let Some(n) = n {
            sql.push_str(condition);
            args.push(Value::Integer(sql_nanos(n)));
            probes_decide &= of_window;
        }
    }
    Ok(SqlFilters {
        sql,
        args,
        probes,
        probes_decide,
    })
}
