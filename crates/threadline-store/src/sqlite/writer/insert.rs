//! Writing one batch's rows inside the writer's transaction: the tenant, origins and
//! names it needs, its span block and its indexes.

use super::*;

pub(super) fn tenant_id(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    cache: &mut WriterCache,
) -> Result<i64, rusqlite::Error> {
    if let Some(id) = cache.tenant_ids.get(tenant) {
        return Ok(*id);
    }
    tx.execute(
        "INSERT OR IGNORE INTO tenants (name) VALUES (?1)",
        [tenant.as_str()],
    )?;
    let id: i64 = tx.query_row(
        "SELECT id FROM tenants WHERE name = ?1",
        [tenant.as_str()],
        |r| r.get(0),
    )?;
    cache.tenant_ids.insert(tenant.clone(), id);
    Ok(id)
}

/// Returns the id of the detail block it stored, if any.
/// Stores the origins (resource + scope) this writer has not stored yet.
pub(super) fn insert_origins(
    tx: &Transaction<'_>,
    tenant_id: i64,
    origins: &[(i64, Vec<u8>)],
    cache: &mut WriterCache,
) -> rusqlite::Result<()> {
    let mut origin_stmt = tx.prepare_cached(
        "INSERT OR IGNORE INTO span_origins (tenant_id, origin_hash, origin) VALUES (?1, ?2, ?3)",
    )?;
    for (hash, blob) in origins {
        if cache.origins.insert((tenant_id, *hash)) {
            origin_stmt.execute(params![tenant_id, hash, blob])?;
        }
    }
    Ok(())
}

/// Operations the writer remembers having stored; past this many it forgets them all
/// (a forgotten one costs an `INSERT OR IGNORE` that changes nothing).
const MAX_CACHED_OPERATIONS: usize = 100_000;

pub(super) fn insert_batch(
    tx: &Transaction<'_>,
    tenant_id: i64,
    batch: &PreparedBatch,
    cache: &mut WriterCache,
) -> Result<Option<i64>, rusqlite::Error> {
    insert_origins(tx, tenant_id, &batch.origins, cache)?;
    if batch.rows.is_empty() {
        return Ok(None);
    }
    for service in &batch.services {
        if cache.services.insert((tenant_id, service.clone())) {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO tenant_services (tenant_id, service) VALUES (?1, ?2)",
            )?
            .execute(params![tenant_id, service])?;
        }
    }
    for (service, name, kind) in &batch.operations {
        let key = (tenant_id, service.clone(), name.clone(), *kind);
        if cache.operations.contains(&key) {
            continue;
        }
        if cache.operations.len() >= MAX_CACHED_OPERATIONS {
            cache.operations.clear();
        }
        cache.operations.insert(key);
        tx.prepare_cached(
            "INSERT OR IGNORE INTO tenant_operations (tenant_id, service, name, kind)
             VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![tenant_id, service, name, kind])?;
    }
    for (model, response) in &batch.models {
        if cache
            .models
            .insert((tenant_id, model.clone(), response.clone()))
        {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO tenant_models (tenant_id, model, response_model)
                 VALUES (?1, ?2, ?3)",
            )?
            .execute(params![tenant_id, model, response])?;
        }
    }
    tx.prepare_cached("INSERT INTO span_blocks (tenant_id, block) VALUES (?1, ?2)")?
        .execute(params![tenant_id, batch.block])?;
    let block_id = tx.last_insert_rowid();
    // A retried export re-sends the same spans; readers keep the first copy of a span id.
    let mut span_stmt = tx.prepare_cached(
        "INSERT INTO spans (tenant_id, trace_id, span_id, parent_span_id, name, service,
            kind, start_ns, end_ns, duration_ns, status_code, origin_hash, model, route, adapter,
            ab_group, instance, image, prompt_version, user_id, session_id, total_tokens, block_id,
            block_offset, block_len, input_tokens, output_tokens, response_model)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)",
    )?;
    let mut first_rowid = None;
    for row in &batch.rows {
        span_stmt.execute(params![
            tenant_id,
            &row.trace_id[..],
            &row.span_id[..],
            row.parent_span_id.as_ref().map(|p| &p[..]),
            row.name,
            row.service,
            row.kind,
            row.start_ns,
            row.end_ns,
            row.duration_ns,
            row.status_code,
            row.origin_hash,
            row.model,
            row.route,
            row.adapter,
            row.ab_group,
            row.instance,
            row.image,
            row.prompt_version,
            row.user_id,
            row.session_id,
            row.total_tokens,
            block_id,
            row.block_offset,
            row.block_len,
            row.input_tokens,
            row.output_tokens,
            row.response_model,
        ])?;
        first_rowid.get_or_insert_with(|| tx.last_insert_rowid());
    }
    // The single writer appends one request's rows back to back: their rowids are the
    // contiguous range first..=last, which is what trace lookups scan.
    let last_rowid = tx.last_insert_rowid();
    tx.prepare_cached(
        "INSERT INTO block_traces (tenant_id, block_id, first_span_rowid, last_span_rowid,
            min_start_ns, max_start_ns, trace_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        tenant_id,
        block_id,
        first_rowid.unwrap_or(last_rowid),
        last_rowid,
        batch.min_start_ns,
        batch.max_start_ns,
        batch.trace_ids,
    ])?;
    if !batch.attr_filter.is_empty() {
        tx.prepare_cached(
            "INSERT INTO block_attr_filters (tenant_id, block_id, filter) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![tenant_id, block_id, batch.attr_filter])?;
    }
    batch.values.insert(tx, tenant_id, block_id)?;
    batch.sessions.insert(tx, tenant_id, block_id)?;
    Ok(Some(block_id))
}
