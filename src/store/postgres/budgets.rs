//! Escrow budgets shared between replicas: each replica publishes the live budget (nonce and
//! spendable balance) of every escrow whose lease it holds to `escrow_budgets`, with its id, the
//! lease epoch and the database's `now()`; the rotation's leader reads them, with their age by
//! the database's clock and each escrow's durable nonce (the last diff in `diffs`), for the
//! escrows it does not run (`crate::rotation::remote`).
//!
//! A publication is fenced in its statement: a row lands only while the lease row names this
//! replica at that epoch, and never replaces one of a newer epoch, so a replica that lost an
//! escrow cannot overwrite its new owner's figures.

use devshard_actors::store::StoreError;

use super::{pg_err, PgStore};

/// One escrow's budget as its owner publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetReport {
    pub nonce: u64,
    pub spendable: u64,
}

/// What the shared store knows of one escrow's budget.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharedBudget {
    pub escrow_id: String,
    /// The last nonce of the escrow's durable diff log (0: none).
    pub durable_nonce: u64,
    /// The owner's last publication, if any.
    pub published: Option<Publication>,
}

/// An owner's publication, with its age by the database's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub owner: String,
    pub epoch: u64,
    pub report: BudgetReport,
    pub age_ms: i64,
}

fn to_sql(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_sql(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl PgStore {
    /// Publishes `reports` (escrow id, report) for the escrows whose lease this replica holds
    /// at the epoch it claimed; returns how many rows landed (a lost lease's row does not).
    /// Awaited on the caller's runtime.
    pub async fn publish_budgets(
        &self,
        reports: &[(String, BudgetReport)],
    ) -> Result<u64, StoreError> {
        let held = self.held_leases();
        let mut ids = Vec::new();
        let mut epochs = Vec::new();
        let mut nonces = Vec::new();
        let mut spendables = Vec::new();
        for (id, r) in reports {
            let Some((_, epoch)) = held.iter().find(|(e, _)| e == id) else {
                continue;
            };
            ids.push(id.as_str());
            epochs.push(to_sql(*epoch));
            nonces.push(to_sql(r.nonce));
            spendables.push(to_sql(r.spendable));
        }
        if ids.is_empty() {
            return Ok(0);
        }
        self.reader
            .client()?
            .execute(
                "INSERT INTO escrow_budgets \
                     (escrow_id, owner, epoch, nonce, spendable, published_at) \
                 SELECT b.id, $1, b.epoch, b.nonce, b.spendable, now() \
                 FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) \
                     AS b(id, epoch, nonce, spendable) \
                 JOIN escrow_leases l \
                     ON l.escrow_id = b.id AND l.owner = $1 AND l.epoch = b.epoch \
                 ON CONFLICT (escrow_id) DO UPDATE SET owner = EXCLUDED.owner, \
                     epoch = EXCLUDED.epoch, nonce = EXCLUDED.nonce, \
                     spendable = EXCLUDED.spendable, published_at = EXCLUDED.published_at \
                 WHERE escrow_budgets.epoch <= EXCLUDED.epoch",
                &[&self.replica.id, &ids, &epochs, &nonces, &spendables],
            )
            .await
            .map_err(pg_err)
    }

    /// The durable nonce and the last publication of each of `escrows`, in that order.
    /// Awaited on the caller's runtime.
    pub async fn shared_budgets(
        &self,
        escrows: &[String],
    ) -> Result<Vec<SharedBudget>, StoreError> {
        if escrows.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .reader
            .client()?
            .query(
                "SELECT e.id, \
                     COALESCE((SELECT max(d.nonce) FROM diffs d WHERE d.escrow_id = e.id), 0), \
                     b.owner, b.epoch, b.nonce, b.spendable, \
                     (EXTRACT(EPOCH FROM (now() - b.published_at)) * 1000)::bigint \
                 FROM unnest($1::text[]) WITH ORDINALITY AS e(id, ord) \
                 LEFT JOIN escrow_budgets b ON b.escrow_id = e.id \
                 ORDER BY e.ord",
                &[&escrows],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows
            .iter()
            .map(|r| {
                let owner: Option<String> = r.get(2);
                SharedBudget {
                    escrow_id: r.get(0),
                    durable_nonce: from_sql(r.get(1)),
                    published: owner.map(|owner| Publication {
                        owner,
                        epoch: from_sql(r.get(3)),
                        report: BudgetReport {
                            nonce: from_sql(r.get(4)),
                            spendable: from_sql(r.get(5)),
                        },
                        age_ms: r.get::<_, i64>(6).max(0),
                    }),
                }
            })
            .collect())
    }
}
