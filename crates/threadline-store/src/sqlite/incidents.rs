//! Incidents found by the streaming detector (stored as JSON bodies, keyed by id and
//! indexed by onset) and the minute up to which the detector has looked, per tenant.

use rusqlite::{params, Connection, OptionalExtension};
use threadline_analysis::Incident;

use crate::sqlite::{sqlite_err, StoreError};

pub(crate) fn save(
    tx: &Connection,
    tenant_id: i64,
    incidents: &[Incident],
    processed_minute: i64,
) -> rusqlite::Result<()> {
    for incident in incidents {
        let body = serde_json::to_string(incident)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO incidents (tenant_id, id, onset_minute, body) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![tenant_id, incident.id.as_str(), incident.onset_minute, body])?;
    }
    tx.prepare_cached(
        "INSERT OR REPLACE INTO detector_marks (tenant_id, processed_minute) VALUES (?1, ?2)",
    )?
    .execute(params![tenant_id, processed_minute])?;
    Ok(())
}

fn decode(body: &str) -> Result<Incident, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::corrupt(format!("incident body: {e}")))
}

/// Incidents with onsets in `from..=to` (minutes), earliest first.
pub(crate) fn between(
    conn: &Connection,
    tenant_id: i64,
    from_minute: i64,
    to_minute: i64,
) -> Result<Vec<Incident>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT body FROM incidents WHERE tenant_id = ?1 AND onset_minute BETWEEN ?2 AND ?3
             ORDER BY onset_minute, id",
        )
        .map_err(|e| sqlite_err(conn, e))?;
    let bodies: Vec<String> = stmt
        .query_map(params![tenant_id, from_minute, to_minute], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| sqlite_err(conn, e))?;
    bodies.iter().map(|b| decode(b)).collect()
}

pub(crate) fn get(
    conn: &Connection,
    tenant_id: i64,
    id: &str,
) -> Result<Option<Incident>, StoreError> {
    let body: Option<String> = conn
        .query_row(
            "SELECT body FROM incidents WHERE tenant_id = ?1 AND id = ?2",
            params![tenant_id, id],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| sqlite_err(conn, e))?;
    body.as_deref().map(decode).transpose()
}

pub(crate) fn processed_minute(
    conn: &Connection,
    tenant_id: i64,
) -> Result<Option<i64>, StoreError> {
    conn.query_row(
        "SELECT processed_minute FROM detector_marks WHERE tenant_id = ?1",
        [tenant_id],
        |r| r.get(0),
    )
    .optional()
    .map_err(|e| sqlite_err(conn, e))
}
