//! Per-block column values: for each detail block, one row per distinct value of each
//! filterable span column (`block_values`, keyed (tenant, field, value, block)). A
//! column filter then costs one index seek per block to skip a block that lacks the
//! value, and the block's rows are read by their row range only when it has it.
//!
//! It replaces per-span indexes on those columns: a block of 100 LLM-shaped spans
//! writes ≈ 20 of these rows instead of ≈ 200 index entries, and ingest's writer
//! spent 14% of its time seeking those per-span indexes. The rows are appended at the
//! end of each (tenant, field, value) range, since block ids grow.
//!
//! Exactness: a block has a row for a value iff one of its span rows has that value
//! (an erasure deletes the rows of values it took from a block, `Refill`), so a filter on
//! probed columns alone needs no look at the rows to know a block matches.

use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension};

/// A span column whose distinct values each block records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ValueField {
    Service,
    Model,
    Route,
    Adapter,
    Instance,
    Image,
    PromptVersion,
    AbGroup,
    /// Spans with an error status; the value is always ''.
    Error,
}

impl ValueField {
    pub(crate) const ALL: [ValueField; 9] = [
        ValueField::Service,
        ValueField::Model,
        ValueField::Route,
        ValueField::Adapter,
        ValueField::Instance,
        ValueField::Image,
        ValueField::PromptVersion,
        ValueField::AbGroup,
        ValueField::Error,
    ];

    /// The stored code; fixed forever (migration 16 writes them as literals).
    pub(crate) fn code(self) -> i64 {
        match self {
            ValueField::Service => 1,
            ValueField::Model => 2,
            ValueField::Route => 3,
            ValueField::Adapter => 4,
            ValueField::Instance => 5,
            ValueField::Image => 6,
            ValueField::PromptVersion => 7,
            ValueField::AbGroup => 8,
            ValueField::Error => 9,
        }
    }

    /// The `spans` column holding the value, and the condition a span row must meet
    /// to have one.
    fn column(self) -> (&'static str, &'static str) {
        match self {
            ValueField::Service => ("service", "1"),
            ValueField::Model => ("model", "model IS NOT NULL"),
            ValueField::Route => ("route", "route IS NOT NULL"),
            ValueField::Adapter => ("adapter", "adapter IS NOT NULL"),
            ValueField::Instance => ("instance", "instance IS NOT NULL"),
            ValueField::Image => ("image", "image IS NOT NULL"),
            ValueField::PromptVersion => ("prompt_version", "prompt_version IS NOT NULL"),
            ValueField::AbGroup => ("ab_group", "ab_group IS NOT NULL"),
            ValueField::Error => ("''", "status_code = 2"),
        }
    }

    /// The `spans` column this field records (`''` for errors).
    pub(crate) fn column_name(self) -> &'static str {
        self.column().0
    }

    /// The field recording a `spans` column's values, if one does.
    /// The field holding a rollup dimension's value on a span, if spans carry it.
    pub(crate) fn of_dimension(dimension: threadline_analysis::Dimension) -> Option<Self> {
        use threadline_analysis::Dimension as D;
        Some(match dimension {
            D::Service => ValueField::Service,
            D::Route => ValueField::Route,
            D::Model => ValueField::Model,
            D::Adapter => ValueField::Adapter,
            D::Instance => ValueField::Instance,
            D::Image => ValueField::Image,
            D::PromptVersion => ValueField::PromptVersion,
            D::AbGroup => ValueField::AbGroup,
            D::GrayTag | D::Provider | D::UpstreamService => return None,
        })
    }
}

/// The distinct (field, value) pairs of one block's spans, gathered on the ingest pool.
#[derive(Debug, Default)]
pub(crate) struct BlockValues {
    pairs: Vec<(ValueField, String)>,
}

/// One span's values as `BlockValues` reads them.
pub(crate) struct SpanValues<'a> {
    pub(crate) service: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) route: Option<&'a str>,
    pub(crate) adapter: Option<&'a str>,
    pub(crate) instance: Option<&'a str>,
    pub(crate) image: Option<&'a str>,
    pub(crate) prompt_version: Option<&'a str>,
    pub(crate) ab_group: Option<&'a str>,
    pub(crate) error: bool,
}

impl BlockValues {
    pub(crate) fn of_spans<'a>(spans: impl Iterator<Item = SpanValues<'a>>) -> Self {
        let mut borrowed: Vec<(ValueField, &str)> = Vec::new();
        for s in spans {
            borrowed.push((ValueField::Service, s.service));
            for (field, value) in [
                (ValueField::Model, s.model),
                (ValueField::Route, s.route),
                (ValueField::Adapter, s.adapter),
                (ValueField::Instance, s.instance),
                (ValueField::Image, s.image),
                (ValueField::PromptVersion, s.prompt_version),
                (ValueField::AbGroup, s.ab_group),
            ] {
                if let Some(v) = value {
                    borrowed.push((field, v));
                }
            }
            if s.error {
                borrowed.push((ValueField::Error, ""));
            }
        }
        // The values are a batch's interned strings (see `sorted_distinct_interned`).
        let borrowed = crate::sqlite::distinct::sorted_distinct_interned(
            borrowed.into_iter(),
            |(field, value)| (*field, crate::sqlite::distinct::address(value)),
        );
        Self {
            pairs: borrowed
                .into_iter()
                .map(|(f, v)| (f, v.to_owned()))
                .collect(),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.pairs.iter().map(|(_, v)| v.len() + 16).sum()
    }

    /// Stores the pairs as the rows of `block_id`.
    pub(crate) fn insert(
        &self,
        tx: &Connection,
        tenant_id: i64,
        block_id: i64,
    ) -> rusqlite::Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT OR IGNORE INTO block_values (tenant_id, field, value, block_id)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (field, value) in &self.pairs {
            stmt.execute(params![tenant_id, field.code(), value, block_id])?;
        }
        Ok(())
    }
}

/// The pairs of a block's stored span rows, as an erasure finds them before it
/// deletes some of its spans; `after_erasure` then deletes the pairs no span of the
/// block has any more (rows are deleted by key: the table is not keyed by block).
pub(crate) struct Refill {
    tenant_id: i64,
    block_id: i64,
    rows: Option<(i64, i64)>,
    before: Vec<(i64, String)>,
}

impl Refill {
    pub(crate) fn before_erasure(
        tx: &Connection,
        tenant_id: i64,
        block_id: i64,
    ) -> rusqlite::Result<Self> {
        let rows = tx
            .prepare_cached(
                "SELECT first_span_rowid, last_span_rowid FROM block_traces
                 WHERE tenant_id = ?1 AND block_id = ?2",
            )?
            .query_row(params![tenant_id, block_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let before = match rows {
            Some(rows) => stored_pairs(tx, tenant_id, block_id, rows)?,
            None => Vec::new(),
        };
        Ok(Self {
            tenant_id,
            block_id,
            rows,
            before,
        })
    }

    pub(crate) fn after_erasure(self, tx: &Connection) -> rusqlite::Result<()> {
        let Some(rows) = self.rows else {
            return Ok(());
        };
        let after = stored_pairs(tx, self.tenant_id, self.block_id, rows)?;
        let mut stmt = tx.prepare_cached(
            "DELETE FROM block_values
             WHERE tenant_id = ?1 AND field = ?2 AND value = ?3 AND block_id = ?4",
        )?;
        for (code, value) in self.before.iter().filter(|p| !after.contains(p)) {
            stmt.execute(params![self.tenant_id, code, value, self.block_id])?;
        }
        Ok(())
    }
}

/// The distinct (field code, value) pairs of a block's span rows `first..=last`.
fn stored_pairs(
    tx: &Connection,
    tenant_id: i64,
    block_id: i64,
    rows: (i64, i64),
) -> rusqlite::Result<Vec<(i64, String)>> {
    let sql = ValueField::ALL
        .iter()
        .map(|field| {
            let (column, has) = field.column();
            format!(
                "SELECT DISTINCT {code}, {column} FROM spans NOT INDEXED
                 WHERE rowid BETWEEN ?1 AND ?2 AND block_id = ?3 AND tenant_id = ?4 AND {has}",
                code = field.code()
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    tx.prepare_cached(&sql)?
        .query_map(params![rows.0, rows.1, block_id, tenant_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect()
}

/// A block holds a span with one of `values` in `field`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlockProbe {
    pub(crate) field: ValueField,
    pub(crate) values: Vec<String>,
}

impl BlockProbe {
    pub(crate) fn new(field: ValueField, values: Vec<String>) -> Self {
        Self { field, values }
    }

    pub(crate) fn errors() -> Self {
        Self::new(ValueField::Error, vec![String::new()])
    }

    /// The SQL condition (starting with ` AND`) that a span row — its columns named
    /// with `prefix`, as `"s."` or `""` — holds one of the values, and its arguments.
    pub(crate) fn row_sql(&self, prefix: &str) -> (String, Vec<Value>) {
        if self.field == ValueField::Error {
            return (format!(" AND {prefix}status_code = 2"), Vec::new());
        }
        if self.values.is_empty() {
            return (" AND 0".to_owned(), Vec::new());
        }
        (
            format!(
                " AND {prefix}{} IN ({})",
                self.field.column_name(),
                crate::sqlite::placeholders(self.values.len())
            ),
            self.values.iter().cloned().map(Value::Text).collect(),
        )
    }
}

/// SQL conditions (each starting with ` AND`) that a block — `tenant` and `block` being
/// SQL expressions for its tenant and id — holds every probe's value, and their
/// arguments. A probe without values matches no block.
pub(crate) fn probes_sql(tenant: &str, block: &str, probes: &[BlockProbe]) -> (String, Vec<Value>) {
    let mut sql = String::new();
    let mut args = Vec::new();
    for probe in probes {
        if probe.values.is_empty() {
            sql.push_str(" AND 0");
            continue;
        }
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM block_values
                          WHERE tenant_id = {tenant} AND field = {code}
                            AND value IN ({marks}) AND block_id = {block})",
            code = probe.field.code(),
            marks = crate::sqlite::placeholders(probe.values.len()),
        ));
        args.extend(probe.values.iter().cloned().map(Value::Text));
    }
    (sql, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_every_exemplar_dimension_has_a_field() {
        let mut codes: Vec<i64> = ValueField::ALL.iter().map(|f| f.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ValueField::ALL.len());
        let mut fields: Vec<ValueField> = crate::EXEMPLAR_DIMENSIONS
            .iter()
            .map(|d| ValueField::of_dimension(*d).unwrap())
            .collect();
        fields.sort_by_key(|f| f.code());
        fields.dedup();
        assert_eq!(fields.len(), crate::EXEMPLAR_DIMENSIONS.len());
        for d in threadline_analysis::Dimension::ALL {
            let carried = crate::EXEMPLAR_DIMENSIONS.contains(&d);
            assert_eq!(ValueField::of_dimension(d).is_some(), carried, "{d:?}");
        }
    }

    #[test]
    fn a_block_records_each_value_once() {
        let span = |service, model, error| SpanValues {
            service,
            model,
            route: None,
            adapter: None,
            instance: Some("inst-1"),
            image: None,
            prompt_version: None,
            ab_group: None,
            error,
        };
        let values = BlockValues::of_spans(
            [
                span("gateway", None, false),
                span("llm", Some("gpt-4o"), true),
                span("llm", Some("gpt-4o"), true),
                span("gateway", Some("llama"), false),
            ]
            .into_iter(),
        );
        let pairs: Vec<(ValueField, &str)> =
            values.pairs.iter().map(|(f, v)| (*f, v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                (ValueField::Service, "gateway"),
                (ValueField::Service, "llm"),
                (ValueField::Model, "gpt-4o"),
                (ValueField::Model, "llama"),
                (ValueField::Instance, "inst-1"),
                (ValueField::Error, ""),
            ]
        );
    }
}
