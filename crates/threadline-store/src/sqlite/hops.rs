//! Calls between services per minute (`service_hops`), merged into as span batches
//! commit and read back for the service map.

use rusqlite::{params, Connection, OptionalExtension};
use threadline_analysis::hops::{Hop, HopCell, Hops};
use threadline_model::TenantId;

use crate::sqlite::{codec, sqlite_err, StoreError};

/// Merges a batch's hop cells into the stored ones (inside the writer's transaction).
pub(crate) fn merge(tx: &Connection, tenant_id: i64, hops: &Hops) -> rusqlite::Result<()> {
    for ((minute, hop), cell) in &hops.cells {
        let stored: Option<Vec<u8>> = tx
            .prepare_cached(
                "SELECT cell FROM service_hops
                 WHERE tenant_id = ?1 AND minute = ?2 AND caller = ?3 AND callee = ?4",
            )?
            .query_row(params![tenant_id, minute, hop.caller, hop.callee], |r| {
                r.get(0)
            })
            .optional()?;
        let mut merged = match stored.map(|b| codec::decode_postcard::<HopCell>(&b, "hop cell")) {
            Some(Ok(c)) => c,
            // Only the aggregate is lost; the cell starts over from this batch.
            Some(Err(_)) | None => HopCell::default(),
        };
        merged.merge(cell);
        let blob = codec::encode_postcard(&merged, "hop cell")
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO service_hops (tenant_id, minute, caller, callee, cell)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![tenant_id, minute, hop.caller, hop.callee, blob])?;
    }
    Ok(())
}

/// The tenant's hops in `from_minute..=to_minute`, each merged over the minutes, by
/// caller then callee.
pub(crate) fn between(
    conn: &Connection,
    tenant: &TenantId,
    from_minute: i64,
    to_minute: i64,
) -> Result<Vec<(Hop, HopCell)>, StoreError> {
    let Some(tenant_id) = crate::sqlite::query::tenant_key(conn, tenant)? else {
        return Ok(Vec::new());
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT caller, callee, cell FROM service_hops
             WHERE tenant_id = ?1 AND minute BETWEEN ?2 AND ?3",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let rows: Vec<(String, String, Vec<u8>)> = stmt
        .query_map(params![tenant_id, from_minute, to_minute], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .and_then(|rows| rows.collect())
        .map_err(|e| sqlite_err(conn, e))?;
    let mut merged: std::collections::BTreeMap<Hop, HopCell> = Default::default();
    for (caller, callee, blob) in rows {
        let cell = codec::decode_postcard::<HopCell>(&blob, "hop cell")?;
        merged
            .entry(Hop { caller, callee })
            .or_default()
            .merge(&cell);
    }
    Ok(merged.into_iter().collect())
}
