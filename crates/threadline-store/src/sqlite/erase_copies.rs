//! Where an erased subject's id was copied outside its spans: resources (span origins)
//! that name it, rollup series whose dimension values contain it (a route like
//! `/v1/users/ID/chat`) and cells whose span names do, lineage nodes and edges, the
//! tenant's lists of services, models and operations, stored incidents. Series,
//! cells and incidents keep their numbers with the id replaced by `[erased]` (series
//! that then coincide are merged); nodes, edges, names and origins naming it go.

use std::collections::HashSet;

use rusqlite::{params, Connection, OptionalExtension};
use threadline_analysis::SeriesKey;

use crate::sqlite::{codec, StoreError};

pub(crate) use crate::erasure::ERASED;

fn store_error(e: StoreError) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(e.to_string())))
}

pub(crate) use crate::erasure::CopiesErased;

use crate::erasure::json_form;

/// Origins (resource + scope) of the tenant that name the subject in any string.
pub(crate) fn origins_naming(
    tx: &Connection,
    tenant_id: i64,
    subject: &str,
) -> rusqlite::Result<Vec<i64>> {
    let mut out = Vec::new();
    let mut stmt =
        tx.prepare("SELECT origin_hash, origin FROM span_origins WHERE tenant_id = ?1")?;
    let mut rows = stmt.query([tenant_id])?;
    while let Some(row) = rows.next()? {
        let blob: Vec<u8> = row.get(1)?;
        let origin = codec::decode_origin(&blob).map_err(store_error)?;
        if crate::erasure::origin_names(&origin, subject) {
            out.push(row.get(0)?);
        }
    }
    Ok(out)
}

/// Removes or rewrites every copy of `subject` outside the spans and logs (which the
/// caller erased already), for cells in minutes `minutes` (those of the erased spans).
pub(crate) fn erase_copies(
    tx: &Connection,
    tenant_id: i64,
    subject: &str,
    origins: &[i64],
    minutes: Option<(i64, i64)>,
) -> rusqlite::Result<CopiesErased> {
    let mut out = CopiesErased::default();
    for hash in origins {
        out.origins += tx.execute(
            "DELETE FROM span_origins WHERE tenant_id = ?1 AND origin_hash = ?2",
            params![tenant_id, hash],
        )? as u64;
    }
    let (series, cells) = rollups(tx, tenant_id, subject, minutes)?;
    out.rollup_series = series;
    out.rollup_cells = cells;
    let (nodes, edges) = lineage(tx, tenant_id, subject)?;
    out.lineage_nodes = nodes;
    out.lineage_edges = edges;
    for (table, column) in [
        ("tenant_services", "service"),
        ("tenant_models", "model"),
        ("tenant_models", "response_model"),
        ("tenant_operations", "name"),
        ("tenant_operations", "service"),
        ("block_values", "value"),
    ] {
        out.names += tx.execute(
            &format!("DELETE FROM {table} WHERE tenant_id = ?1 AND instr({column}, ?2) > 0"),
            params![tenant_id, subject],
        )? as u64;
    }
    out.incidents = incidents(tx, tenant_id, subject)?;
    Ok(out)
}

/// Series whose dimension values name the subject get them rewritten (merged into the
/// series the rewritten key already has, if any); cells of `minutes` whose span names
/// name it are rewritten. The writer's ledger was flushed first (see `Work::Erase`).
fn rollups(
    tx: &Connection,
    tenant_id: i64,
    subject: &str,
    minutes: Option<(i64, i64)>,
) -> rusqlite::Result<(u64, u64)> {
    let named: Vec<(i64, String)> = tx
        .prepare("SELECT id, dims FROM rollup_series WHERE tenant_id = ?1 AND instr(dims, ?2) > 0")?
        .query_map(params![tenant_id, json_form(subject)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut series_done = 0;
    for (id, dims) in named {
        let Some(key) = SeriesKey::from_text(&dims) else {
            continue;
        };
        let new_text = key.redacted(subject, ERASED).unwrap_or(key).to_text();
        let existing: Option<i64> = tx
            .query_row(
                "SELECT id FROM rollup_series WHERE tenant_id = ?1 AND dims = ?2",
                params![tenant_id, new_text],
                |r| r.get(0),
            )
            .optional()?;
        match existing {
            None => {
                tx.execute(
                    "UPDATE rollup_series SET dims = ?2 WHERE id = ?1",
                    params![id, new_text],
                )?;
            }
            Some(into) => {
                let cells: Vec<(i64, Vec<u8>)> = tx
                    .prepare(
                        "SELECT minute, cell FROM rollups WHERE tenant_id = ?1 AND series_id = ?2",
                    )?
                    .query_map(params![tenant_id, id], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?;
                for (minute, blob) in cells {
                    let cell = codec::decode_cell(&blob).map_err(store_error)?;
                    crate::sqlite::rollups::merge_cell(tx, tenant_id, minute, into, &cell)?;
                }
                tx.execute(
                    "DELETE FROM rollups WHERE tenant_id = ?1 AND series_id = ?2",
                    params![tenant_id, id],
                )?;
                tx.execute("DELETE FROM rollup_series WHERE id = ?1", [id])?;
            }
        }
        series_done += 1;
    }
    let mut cells_done = 0;
    if let Some((from, to)) = minutes {
        let cells: Vec<(i64, i64, Vec<u8>)> = tx
            .prepare("SELECT minute, series_id, cell FROM rollups WHERE tenant_id = ?1 AND minute BETWEEN ?2 AND ?3")?
            .query_map(params![tenant_id, from, to], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        for (minute, series, blob) in cells {
            let cell = codec::decode_cell(&blob).map_err(store_error)?;
            if let Some(rewritten) = cell.redacted(subject, ERASED) {
                crate::sqlite::rollups::write_cell(tx, tenant_id, minute, series, &rewritten)?;
                cells_done += 1;
            }
        }
    }
    Ok((series_done, cells_done))
}

/// Lineage nodes whose key, name or properties name the subject go with their edges
/// and revisions; edges whose evidence names it go.
fn lineage(tx: &Connection, tenant_id: i64, subject: &str) -> rusqlite::Result<(u64, u64)> {
    let escaped = json_form(subject);
    // `instr` narrows the rows; the rule decides.
    let candidates: Vec<(i64, String, String, String)> = tx
        .prepare(
            "SELECT id, key, name, props FROM graph_nodes WHERE tenant_id = ?1
             AND (instr(key, ?2) > 0 OR instr(name, ?2) > 0 OR instr(props, ?3) > 0)",
        )?
        .query_map(params![tenant_id, subject, escaped], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    let nodes: HashSet<i64> = candidates
        .into_iter()
        .filter(|(_, key, name, props)| crate::erasure::node_names(key, name, props, subject))
        .map(|(id, ..)| id)
        .collect();
    let mut edges = 0;
    for id in &nodes {
        edges += tx.execute("DELETE FROM graph_edges WHERE src = ?1 OR dst = ?1", [id])? as u64;
        tx.execute("DELETE FROM asset_revisions WHERE node_id = ?1", [id])?;
        tx.execute("DELETE FROM graph_nodes WHERE id = ?1", [id])?;
    }
    edges += tx.execute(
        "DELETE FROM graph_edges WHERE tenant_id = ?1 AND instr(evidence, ?2) > 0",
        params![tenant_id, escaped],
    )? as u64;
    Ok((nodes.len() as u64, edges))
}

/// Stored incidents whose body names the subject (a route) get it rewritten.
fn incidents(tx: &Connection, tenant_id: i64, subject: &str) -> rusqlite::Result<u64> {
    let escaped = json_form(subject);
    let named: Vec<(String, String)> = tx
        .prepare("SELECT id, body FROM incidents WHERE tenant_id = ?1 AND instr(body, ?2) > 0")?
        .query_map(params![tenant_id, escaped], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut rewritten = 0;
    for (id, body) in &named {
        if let Some(body) = crate::erasure::redact_json_body(body, subject) {
            tx.execute(
                "UPDATE incidents SET body = ?3 WHERE tenant_id = ?1 AND id = ?2",
                params![tenant_id, id, body],
            )?;
            rewritten += 1;
        }
    }
    Ok(rewritten)
}
