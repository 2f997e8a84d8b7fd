//! SQL text the ClickHouse modules share: literals and bound queries.

use threadline_model::{SpanId, TraceId};

/// A trace id as SQL (hex digits only: safe to inline).
pub(crate) fn trace_sql(id: TraceId) -> String {
    format!("unhex('{}')", hex::encode(id.0))
}

/// A span id as SQL.
pub(crate) fn span_sql(id: SpanId) -> String {
    format!("unhex('{}')", hex::encode(id.0))
}

/// A string as a ClickHouse literal.
pub(crate) fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `query` with `args` bound to its `?`s in order.
pub(crate) fn bind_all(
    mut query: clickhouse::query::Query,
    args: &[String],
) -> clickhouse::query::Query {
    for a in args {
        query = query.bind(a.as_str());
    }
    query
}

/// `column` equals a non-empty value (an empty value matches nothing, as a missing
/// field never equals anything in the embedded store).
pub(crate) fn equals(column: &str, value: &str, args: &mut Vec<String>) -> String {
    args.push(value.to_owned());
    format!("({column} != '' AND {column} = ?)")
}

/// Unsigned nanoseconds as ClickHouse compares them.
pub(crate) fn ns(n: u64) -> String {
    n.to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(super::string(r"a'b\c"), r"'a\'b\\c'");
    }
}
