//! Leases on ClickHouse, for work one replica at a time must do (incident detection and
//! its alerts). ClickHouse has no compare-and-set, so a lease is decided by rule over
//! rows every replica can read (`leases`):
//!
//! - a lease runs in terms; a replica that finds the newest term expired (or none)
//!   inserts a claim for the next term, waits `SETTLE` so that claims made at the same
//!   moment are visible, and reads the term's claims: the claim with the smallest
//!   (stamp, holder) wins — the same answer for every replica that reads them;
//! - the winner renews (a row with a later expiry) every pass; others wait until the
//!   expiry of the newest term has passed, then claim the next.
//!
//! A claim whose insert took longer than `SETTLE` could be missed by a winner's read:
//! every renewal reads the term's claims again and steps down if an earlier one
//! appeared, so two holders overlap at most one renewal interval in that case.
//! Expiry is judged by each replica's clock: replicas' clocks must agree to well
//! within the lease's length (15 s by default).

use serde::{Deserialize, Serialize};

use crate::clickhouse::client::Connection;
use crate::clickhouse::{next_stamp, now_ns};
use crate::StoreError;

/// How long a claimant waits before reading the term's claims.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

#[derive(clickhouse::Row, Serialize, Deserialize, Clone, Debug)]
struct LeaseRow {
    name: String,
    term: u64,
    holder: String,
    /// A claim (1) or a renewal by the term's winner (0).
    claim: u8,
    stamp: u64,
    expires_ns: u64,
}

/// A term's state: its winner and how long the winner holds it.
struct Term {
    term: u64,
    winner: String,
    expires_ns: u64,
}

fn insert(conn: &Connection, row: LeaseRow) -> Result<(), StoreError> {
    let client = conn.client.clone();
    conn.wait(async move { crate::clickhouse::writer::insert(&client, "leases", &[row]).await })
}

/// The rows of the newest term of `name`, and of `term` when given.
fn rows(conn: &Connection, name: &str, term: Option<u64>) -> Result<Vec<LeaseRow>, StoreError> {
    let which = match term {
        Some(t) => format!("term = {t}"),
        None => "term = (SELECT max(term) FROM leases WHERE name = ?)".to_owned(),
    };
    let mut query = conn
        .client
        .query(&format!(
            "SELECT ?fields FROM leases WHERE name = ? AND {which}"
        ))
        .bind(name);
    if term.is_none() {
        query = query.bind(name);
    }
    conn.fetch_all(query)
}

/// The winner of a term's rows and its expiry (claims decide the winner; the
/// winner's own rows its expiry).
fn decide(rows: &[LeaseRow]) -> Option<Term> {
    let first = rows
        .iter()
        .filter(|r| r.claim == 1)
        .min_by(|a, b| (a.stamp, &a.holder).cmp(&(b.stamp, &b.holder)))?;
    let expires_ns = rows
        .iter()
        .filter(|r| r.holder == first.holder)
        .map(|r| r.expires_ns)
        .max()
        .unwrap_or(0);
    Some(Term {
        term: first.term,
        winner: first.holder.clone(),
        expires_ns,
    })
}

/// Takes or renews the lease; whether `holder` holds it.
pub(crate) fn hold(
    conn: &Connection,
    name: &str,
    holder: &str,
    ttl_ns: i64,
) -> Result<bool, StoreError> {
    let ttl = ttl_ns.max(1) as u64;
    let now = now_ns();
    let current = decide(&rows(conn, name, None)?);
    let row = |term: u64, claim: u8| LeaseRow {
        name: name.to_owned(),
        term,
        holder: holder.to_owned(),
        claim,
        stamp: next_stamp(),
        expires_ns: now + ttl,
    };
    match current {
        Some(t) if t.winner == holder && t.expires_ns > now => {
            insert(conn, row(t.term, 0))?;
            Ok(true)
        }
        Some(t) if t.expires_ns > now => Ok(false),
        expired => {
            let term = expired.map_or(1, |t| t.term + 1);
            insert(conn, row(term, 1))?;
            std::thread::sleep(SETTLE);
            let won = decide(&rows(conn, name, Some(term))?).is_some_and(|t| t.winner == holder);
            Ok(won)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(holder: &str, stamp: u64, expires_ns: u64) -> LeaseRow {
        LeaseRow {
            name: "l".into(),
            term: 3,
            holder: holder.into(),
            claim: 1,
            stamp,
            expires_ns,
        }
    }

    #[test]
    fn the_earliest_claim_wins_and_only_its_holder_extends_the_term() {
        let mut rows = vec![claim("b", 20, 100), claim("a", 10, 90)];
        let t = decide(&rows).unwrap();
        assert_eq!((t.winner.as_str(), t.expires_ns), ("a", 90));
        rows.push(LeaseRow {
            claim: 0,
            expires_ns: 500,
            ..claim("b", 30, 0)
        });
        assert_eq!(
            decide(&rows).unwrap().expires_ns,
            90,
            "a loser's renewal counts for nothing"
        );
        rows.push(LeaseRow {
            claim: 0,
            expires_ns: 400,
            ..claim("a", 40, 0)
        });
        assert_eq!(decide(&rows).unwrap().expires_ns, 400);
        assert!(decide(&[]).is_none());
    }
}
