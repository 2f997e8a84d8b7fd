//! Erasure (GDPR): every trace in which a user or session id appears is deleted from
//! the tenant — span rows, and their details inside the shared compressed blocks
//! (blanked and recompressed in place) — and an audit row records who, when, what
//! matched and how much went, with the subject only as a SHA-256 digest. The full-text
//! documents of the blocks' groups are rebuilt from what is left (`text_groups`). Log
//! records go with their traces, and wherever they name the subject (`logs::erase`). The writer
//! runs it with `secure_delete` on and truncates the WAL afterwards, so no byte of the
//! subject stays in the database files.

use std::collections::BTreeMap;

use rusqlite::{params, params_from_iter, Connection};

use crate::sqlite::{block_values, codec, text_groups, StoreError};

/// A store error inside the erasure's SQLite transaction.
fn store_error(e: StoreError) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(e.to_string())))
}

pub(crate) use crate::erasure::{ErasureRecord, ErasureReport, ErasureSubject};

/// Deletes the subject's traces inside the caller's transaction and logs the erasure.
pub(crate) fn erase(
    tx: &Connection,
    tenant_id: i64,
    subject: &ErasureSubject,
    requested_by: &str,
    requested_ns: i64,
) -> rusqlite::Result<ErasureReport> {
    // Whole traces: the subject's id sits on some spans (usually the root), while the
    // prompt and response text it wrote sits on their children. A trace goes when a
    // span names the subject (its view's user or session, from the span, its baggage
    // or its resource), when a span's route holds it (`/v1/users/ID/chat`), or when it
    // was sent with a resource that names it anywhere.
    let column = subject.kind();
    let origins = crate::sqlite::erase_copies::origins_naming(tx, tenant_id, subject.value())?;
    // Hashes read from this database: integers, inlined.
    let by_origin = if origins.is_empty() {
        String::new()
    } else {
        format!(
            " OR origin_hash IN ({})",
            origins
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    let rows: Vec<(i64, Vec<u8>, i64, u32, u32, i64)> = tx
        .prepare(&format!(
            "SELECT rowid, trace_id, block_id, block_offset, block_len, start_ns FROM spans
             WHERE tenant_id = ?1 AND trace_id IN
                (SELECT trace_id FROM spans WHERE tenant_id = ?1
                 AND ({column} = ?2 OR instr(route, ?2) > 0{by_origin}))"
        ))?
        .query_map(params![tenant_id, subject.value()], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let (traces, minutes) = crate::erasure::traces_and_minutes(rows.iter().map(|r| (&r.1, r.5)));
    let mut by_block: BTreeMap<i64, Vec<(u32, u32)>> = BTreeMap::new();
    for (_, _, block, offset, len, _) in &rows {
        by_block.entry(*block).or_default().push((*offset, *len));
    }
    // The full-text documents of the groups indexed, as they are before the erasure.
    let state = text_groups::IndexState::read(tx).map_err(store_error)?;
    let mut groups: Vec<i64> = by_block.keys().map(|b| text_groups::group_of(*b)).collect();
    groups.dedup();
    let mut documents = Vec::with_capacity(groups.len());
    for group in groups {
        let covered = state.covered(group);
        if !covered.is_empty() {
            let blocks = text_groups::stored_blocks(tx, covered).map_err(store_error)?;
            let before = text_groups::group_document(tx, &blocks).map_err(store_error)?;
            documents.push((group, blocks, before));
        }
    }
    // The blocks' column values, as they are before the erasure.
    let refills = by_block
        .keys()
        .map(|block_id| block_values::Refill::before_erasure(tx, tenant_id, *block_id))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (block_id, slots) in &by_block {
        let blob: Vec<u8> = tx
            .prepare_cached("SELECT block FROM span_blocks WHERE id = ?1")?
            .query_row([block_id], |r| r.get(0))?;
        let blanked = codec::blank_slots(&blob, slots).map_err(store_error)?;
        tx.prepare_cached("UPDATE span_blocks SET block = ?2 WHERE id = ?1")?
            .execute(params![block_id, blanked])?;
    }
    for chunk in rows.chunks(500) {
        let sql = format!(
            "DELETE FROM spans WHERE rowid IN ({})",
            crate::sqlite::placeholders(chunk.len())
        );
        tx.execute(&sql, params_from_iter(chunk.iter().map(|r| r.0)))?;
    }
    for refill in refills {
        refill.after_erasure(tx)?;
    }
    for block_id in by_block.keys() {
        crate::sqlite::sessions::refresh_block(tx, tenant_id, *block_id)?;
    }
    for (group, blocks, before) in documents {
        let after = text_groups::group_document(tx, &blocks).map_err(store_error)?;
        text_groups::replace_document(tx, group, &before, &after)?;
    }
    // A document the indexer built before this erasure is not written.
    tx.prepare_cached("UPDATE text_index_state SET erasures = erasures + 1")?
        .execute([])?;
    let logs_deleted = crate::sqlite::logs::erase(tx, tenant_id, &traces, column, subject.value())
        .map_err(store_error)?;
    let copies = crate::sqlite::erase_copies::erase_copies(
        tx,
        tenant_id,
        subject.value(),
        &origins,
        minutes,
    )?;
    let report = ErasureReport {
        erasure_id: 0,
        traces_matched: traces.len() as u64,
        spans_deleted: rows.len() as u64,
        logs_deleted,
        blocks_rewritten: by_block.len() as u64,
        disk_cleared: false,
        copies,
    };
    tx.prepare_cached(
        "INSERT INTO erasures (tenant_id, requested_by, requested_ns, subject_kind,
            subject_sha256, traces_matched, spans_deleted, blocks_rewritten)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        tenant_id,
        requested_by,
        requested_ns,
        subject.kind(),
        subject.digest(),
        report.traces_matched as i64,
        report.spans_deleted as i64,
        report.blocks_rewritten as i64,
    ])?;
    Ok(ErasureReport {
        erasure_id: tx.last_insert_rowid(),
        ..report
    })
}

pub(crate) fn audit_log(conn: &Connection, tenant: &str) -> rusqlite::Result<Vec<ErasureRecord>> {
    conn.prepare(
        "SELECT e.id, e.requested_by, e.requested_ns, e.subject_kind, e.subject_sha256,
                e.traces_matched, e.spans_deleted
         FROM erasures e JOIN tenants t ON t.id = e.tenant_id
         WHERE t.name = ?1 ORDER BY e.id DESC LIMIT 1000",
    )?
    .query_map([tenant], |r| {
        Ok(ErasureRecord {
            erasure_id: r.get(0)?,
            requested_by: r.get(1)?,
            requested_ns: r.get(2)?,
            subject_kind: r.get(3)?,
            subject_sha256: r.get(4)?,
            traces_matched: r.get::<_, i64>(5)? as u64,
            spans_deleted: r.get::<_, i64>(6)? as u64,
        })
    })?
    .collect()
}
