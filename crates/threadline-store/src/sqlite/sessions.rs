//! The session list's index: each block's distinct (session, user) pairs, one row per
//! block (`block_sessions`), appended with the block — the list reads the newest
//! blocks first until it has its sessions. (As per-value rows, the pairs would land
//! all over an index, a page write each, and halved ingest.)

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use threadline_model::TenantId;

use crate::sqlite::{sqlite_err, StoreError};

/// Blocks the list reads at most (a session seen only further back is not listed).
const MAX_BLOCKS_READ: usize = 200_000;

/// One block's distinct (session, user) pairs, as stored: `session\tuser` lines, sorted.
#[derive(Debug, Default)]
pub(crate) struct BlockSessions {
    pairs: String,
}

impl BlockSessions {
    pub(crate) fn of_rows<'a>(rows: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        let mut pairs: Vec<(&str, &str)> = rows
            // A tab or newline in an id would break the lines: such an id is left out.
            .filter(|(s, u)| !has_separator(s) && !u.is_some_and(has_separator))
            .map(|(s, u)| (s, u.unwrap_or("")))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        let lines: Vec<String> = pairs.iter().map(|(s, u)| format!("{s}\t{u}")).collect();
        Self {
            pairs: lines.join("\n"),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.pairs.len()
    }

    pub(crate) fn insert(
        &self,
        tx: &Connection,
        tenant_id: i64,
        block_id: i64,
    ) -> rusqlite::Result<()> {
        if self.pairs.is_empty() {
            return Ok(());
        }
        tx.prepare_cached(
            "INSERT OR REPLACE INTO block_sessions (tenant_id, block_id, pairs) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![tenant_id, block_id, self.pairs])?;
        Ok(())
    }
}

fn has_separator(s: &str) -> bool {
    s.contains(['\t', '\n'])
}

/// After an erasure removed spans of a block: its pairs again from the rows left (no
/// pair of an erased session or user stays).
pub(crate) fn refresh_block(
    tx: &Connection,
    tenant_id: i64,
    block_id: i64,
) -> rusqlite::Result<()> {
    let rows: Option<(i64, i64)> = tx
        .prepare_cached(
            "SELECT first_span_rowid, last_span_rowid FROM block_traces
             WHERE tenant_id = ?1 AND block_id = ?2",
        )?
        .query_row(params![tenant_id, block_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some(rows) = rows else {
        return Ok(());
    };
    let remaining: Vec<(String, Option<String>)> = tx
        .prepare_cached(
            "SELECT DISTINCT session_id, user_id FROM spans NOT INDEXED
             WHERE rowid BETWEEN ?1 AND ?2 AND block_id = ?3 AND tenant_id = ?4
               AND session_id IS NOT NULL",
        )?
        .query_map(params![rows.0, rows.1, block_id, tenant_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    tx.prepare_cached("DELETE FROM block_sessions WHERE tenant_id = ?1 AND block_id = ?2")?
        .execute(params![tenant_id, block_id])?;
    BlockSessions::of_rows(remaining.iter().map(|(s, u)| (s.as_str(), u.as_deref())))
        .insert(tx, tenant_id, block_id)
}

/// Up to `limit` sessions with spans in blocks whose span-time zone meets `from..=to`,
/// newest block first; with `user`, the sessions seen with that user.
pub(crate) fn recent(
    conn: &Connection,
    tenant: &TenantId,
    (from, to): (Option<u64>, Option<u64>),
    user: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let ns = |t: u64| t.min(i64::MAX as u64) as i64;
    let mut stmt = conn
        .prepare_cached(
            "SELECT s.pairs FROM block_sessions s
             JOIN block_traces b ON b.tenant_id = s.tenant_id AND b.block_id = s.block_id
             WHERE s.tenant_id = ?1 AND b.max_start_ns >= ?2 AND b.min_start_ns <= ?3
             ORDER BY s.block_id DESC",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let mut rows = stmt
        .query(params![
            tenant_id,
            from.map_or(i64::MIN, ns),
            to.map_or(i64::MAX, ns)
        ])
        .map_err(|e| sqlite_err(conn, e))?;
    let mut found: Vec<String> = Vec::new();
    let mut seen: HashMap<String, ()> = HashMap::new();
    let mut read = 0;
    while let Some(row) = rows.next().map_err(|e| sqlite_err(conn, e))? {
        let pairs: String = row.get(0).map_err(|e| sqlite_err(conn, e))?;
        for line in pairs.lines() {
            let (session, pair_user) = line.split_once('\t').unwrap_or((line, ""));
            if user.is_some_and(|u| u != pair_user) || seen.contains_key(session) {
                continue;
            }
            seen.insert(session.to_owned(), ());
            found.push(session.to_owned());
            if found.len() >= limit {
                return Ok(found);
            }
        }
        read += 1;
        if read >= MAX_BLOCKS_READ {
            break;
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::BlockSessions;

    #[test]
    fn a_block_keeps_each_pair_once_sorted() {
        let b = BlockSessions::of_rows(
            [
                ("s2", Some("u1")),
                ("s1", None),
                ("s2", Some("u1")),
                ("bad\tid", None),
            ]
            .into_iter(),
        );
        assert_eq!(b.pairs, "s1\t\ns2\tu1");
    }
}
