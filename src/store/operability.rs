//! Operability storage on both backends: probe runs and versioned checklist answers. Both tables
//! are append-only (migration 0007). The SQL is the same on SQLite and PostgreSQL, so one macro
//! writes both implementations; `Store` delegates to them.
use super::postgres::PostgresStore;
use super::sqlite::SqliteStore;
use super::{Result, StoreError};
use crate::domain::Timestamp;
use crate::domain::operability::{ChecklistAnswers, ChecklistVersion, ProbeReport, ProbeRun};

/// Tries of a checklist save that lost a race for its version number (PostgreSQL; SQLite
/// serialises writers).
const VERSION_TRIES: u32 = 3;

type ProbeRunRow = (i64, i64, String, i64);
type ChecklistRow = (i64, i64, String, String, String, i64);

fn probe_run(row: ProbeRunRow) -> Result<ProbeRun> {
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

fn checklist_version(row: ChecklistRow) -> Result<ChecklistVersion> {
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

fn json<T: serde::Serialize>(value: &T) -> String {
    // Plain data with string keys: serialising cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

impl SqliteStore {
    async fn operability_begin(&self) -> sqlx::Result<sqlx::Transaction<'_, sqlx::Sqlite>> {
        // Take the write lock up front (see the sqlite module comment).
        self.pool().begin_with("BEGIN IMMEDIATE").await
    }
}

impl PostgresStore {
    async fn operability_begin(&self) -> sqlx::Result<sqlx::Transaction<'_, sqlx::Postgres>> {
        self.pool().begin().await
    }
}

macro_rules! operability_store {
    ($store:ty) => {
        impl $store {
            async fn candidate_exists<'c, E>(executor: E, candidate_id: i64) -> Result<()>
            where
                E: sqlx::Executor<'c, Database = <$store as StoreDb>::Db>,
            {
                let found: Option<(i64,)> = sqlx::query_as("SELECT id FROM candidates WHERE id = $1")
                    .bind(candidate_id)
                    .fetch_optional(executor)
                    .await?;
                found
                    .map(|_| ())
                    .ok_or_else(|| StoreError::NotFound(format!("candidate {candidate_id}")))
            }

            pub(super) async fn op_save_probe_run(&self, candidate_id: i64, report: &ProbeReport) -> Result<i64> {
                let mut tx = self.operability_begin().await?;
                if let Err(e) = Self::candidate_exists(&mut *tx, candidate_id).await {
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
                .bind(json(report))
                .bind(passed as i64)
                .bind(failed as i64)
                .bind(Timestamp::now().0)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(id)
            }

            pub(super) async fn op_list_probe_runs(&self, candidate_id: i64, limit: i64) -> Result<Vec<ProbeRun>> {
                let rows: Vec<ProbeRunRow> = sqlx::query_as(
                    "SELECT id, candidate_id, report, created_at FROM operability_probe_runs \
                     WHERE candidate_id = $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(candidate_id)
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(probe_run).collect()
            }

            pub(super) async fn op_save_checklist(
                &self,
                candidate_id: i64,
                answers: &ChecklistAnswers,
                changed_by: &str,
                rationale: &str,
            ) -> Result<u32> {
                let mut tries = 0;
                loop {
                    tries += 1;
                    let mut tx = self.operability_begin().await?;
                    if let Err(e) = Self::candidate_exists(&mut *tx, candidate_id).await {
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
                    .bind(json(answers))
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
                                && tries < VERSION_TRIES
                            {
                                // Another save took this version number first: take the next.
                                continue;
                            }
                            return Err(super::rows::conflict_on_unique(e, || {
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
            }

            pub(super) async fn op_checklist_history(&self, candidate_id: i64) -> Result<Vec<ChecklistVersion>> {
                let rows: Vec<ChecklistRow> = sqlx::query_as(
                    "SELECT candidate_id, version, answers, changed_by, rationale, created_at \
                     FROM operability_checklists WHERE candidate_id = $1 ORDER BY version DESC",
                )
                .bind(candidate_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(checklist_version).collect()
            }
        }
    };
}

/// The sqlx database of each store, so the macro can name executor types.
trait StoreDb {
    type Db: sqlx::Database;
}

impl StoreDb for SqliteStore {
    type Db = sqlx::Sqlite;
}

impl StoreDb for PostgresStore {
    type Db = sqlx::Postgres;
}

operability_store!(SqliteStore);
operability_store!(PostgresStore);
