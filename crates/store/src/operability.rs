//! Operability storage: probe runs and versioned checklist answers. Both tables are append-only
//! (migration 0007). Written once for both backends: `operability_queries!` expands to these
//! `Store` methods and `operability_helpers!` to the check they share, both in `lib.rs`
//! (`impl_store!`), so their paths are written as seen from there.
use super::{Result, StoreError};
use crate::domain::Timestamp;
use crate::domain::operability::{ChecklistAnswers, ChecklistVersion, ProbeReport, ProbeRun};

/// Tries of a checklist save that lost a race for its version number (PostgreSQL; SQLite
/// serialises writers).
pub(crate) const VERSION_TRIES: u32 = 3;

pub(crate) type ProbeRunRow = (i64, i64, String, i64);
pub(crate) type ChecklistRow = (i64, i64, String, String, String, i64);

pub(crate) fn probe_run(row: ProbeRunRow) -> Result<ProbeRun> {
    let (id, candidate_id, report, created_at) = row;
    let report: ProbeReport = serde_json::from_str(&report)
        .map_err(|e| StoreError::Corrupt(format!("operability_probe_runs {id}: report: {e}")))?;
    Ok(ProbeRun {
        id,
        candidate_id,
        at: Timestamp(created_at),
        report,
    })
}

pub(crate) fn checklist_version(row: ChecklistRow) -> Result<ChecklistVersion> {
    let (candidate_id, version, answers, changed_by, rationale, created_at) = row;
    let place = || format!("operability_checklists ({candidate_id}, {version})");
    let answers: ChecklistAnswers =
        serde_json::from_str(&answers).map_err(|e| StoreError::Corrupt(format!("{}: answers: {e}", place())))?;
    Ok(ChecklistVersion {
        candidate_id,
        version: u32::try_from(version).map_err(|_| StoreError::Corrupt(format!("{}: version", place())))?,
        changed_by,
        rationale,
        answers,
        at: Timestamp(created_at),
    })
}

pub(crate) fn json<T: serde::Serialize>(value: &T) -> String {
    // Plain data with string keys: serialising cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

macro_rules! operability_helpers {
    () => {
        async fn candidate_exists(
            conn: &mut <Db<Self> as sqlx::Database>::Connection,
            candidate_id: i64,
        ) -> Result<()> {
            let found: Option<(i64,)> = sqlx::query_as("SELECT id FROM candidates WHERE id = $1")
                .bind(candidate_id)
                .fetch_optional(conn)
                .await?;
            found
                .map(|_| ())
                .ok_or_else(|| StoreError::NotFound(format!("candidate {candidate_id}")))
        }
    };
}
pub(crate) use operability_helpers;

macro_rules! operability_queries {
    () => {
        fn save_probe_run<'a>(&'a self, candidate_id: i64, report: &'a ProbeReport) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                if let Err(e) = Self::candidate_exists(&mut tx, candidate_id).await {
                    // Roll back now: a dropped transaction would idle in the pool holding locks.
                    tx.rollback().await?;
                    return Err(e);
                }
                let (passed, failed, _) = report.counts();
                let (id,): (i64,) = sqlx::query_as(
                    "INSERT INTO operability_probe_runs (candidate_id, report, passed, failed, created_at) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(candidate_id)
                .bind(operability::json(report))
                .bind(passed as i64)
                .bind(failed as i64)
                .bind(Timestamp::now().0)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(id)
            })
        }

        fn list_probe_runs(&self, candidate_id: i64, limit: i64) -> StoreFuture<'_, Vec<ProbeRun>> {
            Box::pin(async move {
                let rows: Vec<operability::ProbeRunRow> = sqlx::query_as(
                    "SELECT id, candidate_id, report, created_at FROM operability_probe_runs \
                     WHERE candidate_id = $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(candidate_id)
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(operability::probe_run).collect()
            })
        }

        fn save_checklist<'a>(
            &'a self,
            candidate_id: i64,
            answers: &'a ChecklistAnswers,
            changed_by: &'a str,
            rationale: &'a str,
        ) -> StoreFuture<'a, u32> {
            Box::pin(async move {
                let mut tries = 0;
                loop {
                    tries += 1;
                    let mut tx = self.begin_write().await?;
                    if let Err(e) = Self::candidate_exists(&mut tx, candidate_id).await {
                        tx.rollback().await?;
                        return Err(e);
                    }
                    let inserted: std::result::Result<(i64,), sqlx::Error> = sqlx::query_as(
                        "INSERT INTO operability_checklists \
                         (candidate_id, version, answers, changed_by, rationale, created_at) \
                         SELECT $1, COALESCE(MAX(version), 0) + 1, $2, $3, $4, $5 \
                         FROM operability_checklists WHERE candidate_id = $1 RETURNING version",
                    )
                    .bind(candidate_id)
                    .bind(operability::json(answers))
                    .bind(changed_by)
                    .bind(rationale)
                    .bind(Timestamp::now().0)
                    .fetch_one(&mut *tx)
                    .await;
                    let version = match inserted {
                        Ok((version,)) => {
                            tx.commit().await?;
                            version
                        }
                        Err(e) => {
                            tx.rollback().await?;
                            if let sqlx::Error::Database(db) = &e
                                && db.is_unique_violation()
                                && tries < operability::VERSION_TRIES
                            {
                                // Another save took this version number first: take the next.
                                continue;
                            }
                            return Err(rows::conflict_on_unique(e, || {
                                format!("the checklist of candidate {candidate_id} changed meanwhile; save again")
                            }));
                        }
                    };
                    return u32::try_from(version).map_err(|_| {
                        StoreError::Corrupt(format!(
                            "operability_checklists {candidate_id}: version {version}"
                        ))
                    });
                }
            })
        }

        fn checklist_history(&self, candidate_id: i64) -> StoreFuture<'_, Vec<ChecklistVersion>> {
            Box::pin(async move {
                let rows: Vec<operability::ChecklistRow> = sqlx::query_as(
                    "SELECT candidate_id, version, answers, changed_by, rationale, created_at \
                     FROM operability_checklists WHERE candidate_id = $1 ORDER BY version DESC",
                )
                .bind(candidate_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(operability::checklist_version).collect()
            })
        }
    };
}
pub(crate) use operability_queries;
