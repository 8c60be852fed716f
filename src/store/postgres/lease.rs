//! Fenced escrow leases: which replica may append to an escrow's diff log.
//!
//! One row per escrow in `escrow_leases (escrow_id, owner, epoch, expires_at)`, timed by the
//! database's clock (`now()`), so replicas' clocks never matter. A replica **claims** a lease
//! that is free, expired or its own, always with `epoch + 1`; it **renews** every held lease each
//! TTL/3 (only while owner and epoch are unchanged), and **releases** them on shutdown (expiry set
//! to now, epoch kept so it only grows). Every diff append checks, in its own transaction and
//! under a `FOR SHARE` lock of the lease row, that this replica still holds the epoch it claimed
//! ([`fence`]); a claim by another replica waits for that lock, so it starts after the last
//! append of the previous owner has committed, and reads the log after it.
//!
//! The decisions are pure functions ([`decide_claim`], [`fence`]); the SQL around them only
//! reads the row, locks it and writes the decision.

use std::time::Duration;

use devshard_actors::store::StoreError;
use tokio_postgres::Client;

use super::{link::in_transaction, pg_err};

/// Default lease time to live.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A lease row as read from the database, with the database's clock at the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub owner: String,
    pub epoch: u64,
    /// Whether `expires_at <= now()` at the read.
    pub expired: bool,
}

/// What a claim does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Take the lease with this epoch.
    Take { epoch: u64 },
    /// Another replica holds an unexpired lease.
    Held { owner: String },
}

/// Decides a claim by `me` on the current row (`None`: never leased).
pub fn decide_claim(row: Option<&LeaseRow>, me: &str) -> ClaimDecision {
    match row {
        None => ClaimDecision::Take { epoch: 1 },
        Some(r) if r.owner == me || r.expired => ClaimDecision::Take {
            epoch: r.epoch.saturating_add(1),
        },
        Some(r) => ClaimDecision::Held {
            owner: r.owner.clone(),
        },
    }
}

/// Whether an append issued under `epoch` by `me` may land, given the row under lock. Expiry
/// alone does not fence: only a claim by someone (which bumps the epoch) does.
pub fn fence(row: Option<&LeaseRow>, me: &str, escrow: &str, epoch: u64) -> Result<(), StoreError> {
    match row {
        Some(r) if r.owner == me && r.epoch == epoch => Ok(()),
        _ => Err(StoreError::LeaseLost {
            escrow: escrow.to_string(),
            epoch,
        }),
    }
}

/// How often held leases are renewed.
pub fn renew_every(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(10))
}

fn ttl_secs(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

/// The query reading an escrow's lease row (`$1`), locked with `lock` (`FOR UPDATE` /
/// `FOR SHARE`); its rows decode with [`lease_row`].
pub(super) fn select_locked(lock: &str) -> String {
    format!(
        "SELECT owner, epoch, expires_at <= now() FROM escrow_leases WHERE escrow_id = $1 {lock}"
    )
}

/// A row of [`select_locked`].
pub(super) fn lease_row(r: &tokio_postgres::Row) -> LeaseRow {
    LeaseRow {
        owner: r.get(0),
        epoch: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
        expired: r.get(2),
    }
}

/// Reads the lease row of `escrow`, locked with `lock` (`FOR UPDATE` / `FOR SHARE`).
pub(super) async fn read_locked(
    client: &impl tokio_postgres::GenericClient,
    escrow: &str,
    lock: &str,
) -> Result<Option<LeaseRow>, tokio_postgres::Error> {
    let row = client.query_opt(&select_locked(lock), &[&escrow]).await?;
    Ok(row.as_ref().map(lease_row))
}

/// Claims `escrow` for `me` in one transaction; returns the epoch taken. `client` runs no
/// other transaction meanwhile (the store serialises claims).
pub(super) async fn claim(
    client: &Client,
    escrow: &str,
    me: &str,
    ttl: Duration,
) -> Result<u64, StoreError> {
    in_transaction(client, async {
        // A missing row is inserted free (expired) first, so the row lock below always exists.
        client
            .execute(
                "INSERT INTO escrow_leases (escrow_id, owner, epoch, expires_at) \
                 VALUES ($1, '', 0, now()) ON CONFLICT (escrow_id) DO NOTHING",
                &[&escrow],
            )
            .await
            .map_err(pg_err)?;
        let row = read_locked(client, escrow, "FOR UPDATE")
            .await
            .map_err(pg_err)?;
        let epoch = match decide_claim(row.as_ref(), me) {
            ClaimDecision::Take { epoch } => epoch,
            ClaimDecision::Held { owner } => {
                return Err(StoreError::LeaseHeld {
                    escrow: escrow.to_string(),
                    owner,
                })
            }
        };
        let sql_epoch =
            i64::try_from(epoch).map_err(|_| StoreError::Corrupt("lease epoch".into()))?;
        client
            .execute(
                "UPDATE escrow_leases SET owner = $2, epoch = $3, \
                 expires_at = now() + make_interval(secs => $4) WHERE escrow_id = $1",
                &[&escrow, &me, &sql_epoch, &ttl_secs(ttl)],
            )
            .await
            .map_err(pg_err)?;
        Ok(epoch)
    })
    .await
}

/// Renews every lease in `held` that `me` still holds at that epoch; returns the ones renewed.
/// One statement per lease, so a renewal holds one row lock at a time and cannot deadlock with
/// the writer's group, which holds its escrows' rows `FOR SHARE` until it commits.
pub(super) async fn renew(
    client: &Client,
    me: &str,
    held: &[(String, u64)],
    ttl: Duration,
) -> Result<Vec<String>, StoreError> {
    let mut renewed = Vec::with_capacity(held.len());
    for (escrow, epoch) in held {
        let epoch = i64::try_from(*epoch).unwrap_or(i64::MAX);
        let n = client
            .execute(
                "UPDATE escrow_leases SET expires_at = now() + make_interval(secs => $2) \
                 WHERE escrow_id = $3 AND epoch = $4 AND owner = $1",
                &[&me, &ttl_secs(ttl), escrow, &epoch],
            )
            .await
            .map_err(pg_err)?;
        if n > 0 {
            renewed.push(escrow.clone());
        }
    }
    Ok(renewed)
}

/// Frees every lease `me` holds at the given epochs (shutdown): another replica may claim them
/// at once.
pub(super) async fn release(
    client: &Client,
    me: &str,
    held: &[(String, u64)],
) -> Result<u64, StoreError> {
    let ids: Vec<&str> = held.iter().map(|(e, _)| e.as_str()).collect();
    let epochs: Vec<i64> = held
        .iter()
        .map(|(_, n)| i64::try_from(*n).unwrap_or(i64::MAX))
        .collect();
    client
        .execute(
            "UPDATE escrow_leases l SET expires_at = now() \
             FROM unnest($2::text[], $3::bigint[]) AS h(escrow_id, epoch) \
             WHERE l.escrow_id = h.escrow_id AND l.epoch = h.epoch AND l.owner = $1",
            &[&me, &ids, &epochs],
        )
        .await
        .map_err(pg_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(owner: &str, epoch: u64, expired: bool) -> LeaseRow {
        LeaseRow {
            owner: owner.into(),
            epoch,
            expired,
        }
    }

    #[test]
    fn claims_take_free_expired_or_own_leases_with_a_higher_epoch() {
        assert_eq!(decide_claim(None, "a"), ClaimDecision::Take { epoch: 1 });
        let b_live = row("b", 4, false);
        assert_eq!(
            decide_claim(Some(&b_live), "a"),
            ClaimDecision::Held { owner: "b".into() }
        );
        assert_eq!(
            decide_claim(Some(&row("b", 4, true)), "a"),
            ClaimDecision::Take { epoch: 5 }
        );
        // A restarted replica with the same id fences its predecessor too.
        assert_eq!(
            decide_claim(Some(&row("a", 4, false)), "a"),
            ClaimDecision::Take { epoch: 5 }
        );
    }

    #[test]
    fn only_the_claimed_epoch_of_the_owner_may_append() {
        assert!(fence(Some(&row("a", 3, false)), "a", "e", 3).is_ok());
        // Expired but not taken over: still the owner's.
        assert!(fence(Some(&row("a", 3, true)), "a", "e", 3).is_ok());
        let lost = Err(StoreError::LeaseLost {
            escrow: "e".into(),
            epoch: 3,
        });
        assert_eq!(fence(Some(&row("b", 4, false)), "a", "e", 3), lost);
        assert_eq!(fence(Some(&row("a", 4, false)), "a", "e", 3), lost);
        assert_eq!(fence(None, "a", "e", 3), lost);
        assert_eq!(renew_every(DEFAULT_TTL), DEFAULT_TTL / 3);
    }
}
