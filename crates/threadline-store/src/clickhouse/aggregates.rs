//! Rollups, service hops, incidents, detector marks and tenants on ClickHouse.
//!
//! Rollup and hop cells are stored as each insert round computed them (one row per
//! minute, series and round) and merged here on read: cells merge in any order, so no
//! read-modify-write is needed and replicas never contend. A round sent twice keeps its
//! round id, so its rows collapse (`LIMIT 1 BY ..., batch`). Incidents are versioned
//! rows (the newest version of an id wins).

use std::collections::BTreeMap;

use threadline_analysis::hops::{Hop, HopCell};
use threadline_analysis::{Incident, IncidentId, RollupCell, SeriesKey};
use threadline_model::TenantId;

use crate::clickhouse::client::Connection;
use crate::clickhouse::rows::IncidentRow;
use crate::StoreError;

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    postcard::from_bytes(bytes)
        .map_err(|e| StoreError::corrupt(format!("a stored {what} does not decode: {e}")))
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Cell {
    minute: i64,
    series: String,
    #[serde(with = "crate::clickhouse::rows::bytes")]
    cell: Vec<u8>,
}

pub(crate) fn rollup_cells(
    conn: &Connection,
    tenant: &TenantId,
    from_minute: i64,
    to_minute: i64,
) -> Result<Vec<(i64, SeriesKey, RollupCell)>, StoreError> {
    let query = conn
        .client
        .query(&format!(
            "SELECT minute, series, cell FROM rollup_cells
             WHERE tenant = ? AND minute BETWEEN {from_minute} AND {to_minute}
             LIMIT 1 BY minute, series, batch"
        ))
        .bind(tenant.as_str());
    let rows: Vec<Cell> = conn.fetch_all(query)?;
    let mut merged: BTreeMap<(i64, String), RollupCell> = BTreeMap::new();
    for row in rows {
        let cell: RollupCell = decode(&row.cell, "rollup cell")?;
        match merged.entry((row.minute, row.series)) {
            std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(&cell),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(cell);
            }
        }
    }
    merged
        .into_iter()
        .map(|((minute, series), cell)| {
            let key = SeriesKey::from_text(&series).ok_or_else(|| {
                StoreError::corrupt(format!("a stored rollup series is unreadable: {series:?}"))
            })?;
            Ok((minute, key, cell))
        })
        .collect()
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct MinuteRange {
    first: i64,
    last: i64,
    cells: u64,
}

pub(crate) fn rollup_minute_range(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Option<(i64, i64)>, StoreError> {
    let query = conn
        .client
        .query("SELECT min(minute), max(minute), count() FROM rollup_cells WHERE tenant = ?")
        .bind(tenant.as_str());
    let rows: Vec<MinuteRange> = conn.fetch_all(query)?;
    Ok(rows
        .into_iter()
        .find(|r| r.cells > 0)
        .map(|r| (r.first, r.last)))
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct HopCellRow {
    caller: String,
    callee: String,
    #[serde(with = "crate::clickhouse::rows::bytes")]
    cell: Vec<u8>,
}

pub(crate) fn service_hops(
    conn: &Connection,
    tenant: &TenantId,
    from_minute: i64,
    to_minute: i64,
) -> Result<Vec<(Hop, HopCell)>, StoreError> {
    let query = conn
        .client
        .query(&format!(
            "SELECT toString(caller), toString(callee), cell FROM hop_cells
             WHERE tenant = ? AND minute BETWEEN {from_minute} AND {to_minute}
             LIMIT 1 BY minute, caller, callee, batch"
        ))
        .bind(tenant.as_str());
    let rows: Vec<HopCellRow> = conn.fetch_all(query)?;
    let mut merged: BTreeMap<Hop, HopCell> = BTreeMap::new();
    for row in rows {
        let cell: HopCell = decode(&row.cell, "hop cell")?;
        merged
            .entry(Hop {
                caller: row.caller,
                callee: row.callee,
            })
            .or_default()
            .merge(&cell);
    }
    Ok(merged.into_iter().collect())
}

/// An incident as a versioned row (JSON body, as the embedded store keeps it).
pub(crate) fn incident_row(
    tenant: &TenantId,
    incident: &Incident,
    version: u64,
) -> Result<IncidentRow, StoreError> {
    let body = serde_json::to_vec(incident)
        .map_err(|e| StoreError::corrupt(format!("cannot encode an incident: {e}")))?;
    Ok(IncidentRow {
        tenant: tenant.as_str().to_owned(),
        id: incident.id.as_str().to_owned(),
        onset_minute: incident.onset_minute,
        body,
        version,
    })
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Body {
    #[serde(with = "crate::clickhouse::rows::bytes")]
    body: Vec<u8>,
}

fn incident_of(body: &[u8]) -> Result<Incident, StoreError> {
    serde_json::from_slice(body).map_err(|e| StoreError::corrupt(format!("incident body: {e}")))
}

pub(crate) fn incidents(
    conn: &Connection,
    tenant: &TenantId,
    from_minute: i64,
    to_minute: i64,
) -> Result<Vec<Incident>, StoreError> {
    // The newest version of each id, then its onset: an update may move it.
    let query = conn
        .client
        .query(&format!(
            "SELECT body FROM (
               SELECT id, argMax(body, version) AS body, argMax(onset_minute, version) AS onset
               FROM incidents WHERE tenant = ? GROUP BY id)
             WHERE onset BETWEEN {from_minute} AND {to_minute}
             ORDER BY onset, id"
        ))
        .bind(tenant.as_str());
    let rows: Vec<Body> = conn.fetch_all(query)?;
    rows.iter().map(|r| incident_of(&r.body)).collect()
}

pub(crate) fn incident(
    conn: &Connection,
    tenant: &TenantId,
    id: &IncidentId,
) -> Result<Option<Incident>, StoreError> {
    let query = conn
        .client
        .query(
            "SELECT argMax(body, version) FROM incidents WHERE tenant = ? AND id = ? GROUP BY id",
        )
        .bind(tenant.as_str())
        .bind(id.as_str());
    let rows: Vec<Body> = conn.fetch_all(query)?;
    rows.first().map(|r| incident_of(&r.body)).transpose()
}

pub(crate) fn detector_mark(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Option<i64>, StoreError> {
    let query = conn
        .client
        .query(
            "SELECT argMax(minute, version) FROM detector_marks WHERE tenant = ? GROUP BY tenant",
        )
        .bind(tenant.as_str());
    let rows: Vec<i64> = conn.fetch_all(query)?;
    Ok(rows.first().copied())
}

pub(crate) fn tenants(conn: &Connection) -> Result<Vec<TenantId>, StoreError> {
    let names: Vec<String> = conn.fetch_all(
        conn.client
            .query("SELECT DISTINCT tenant FROM tenants ORDER BY tenant"),
    )?;
    names
        .into_iter()
        .map(|n| {
            TenantId::new(&n)
                .map_err(|e| StoreError::corrupt(format!("a stored tenant is invalid: {e}")))
        })
        .collect()
}
