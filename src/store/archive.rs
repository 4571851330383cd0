//! Archive, drill-down and export/import queries, written once and expanded for each backend
//! (`sqlite` and `postgres` below): the SQL is portable between the two (booleans compare with
//! `NOT x`, aggregates are cast to BIGINT), so only the database type differs. The backends'
//! `Store` impls delegate here.
use super::rows::{
    self, GradeRow, RecordRow, RunCandidateRow, RunListRow, record_insert_columns, record_select_columns, run_columns,
};
use super::{RecordFact, RestoredRun, Result, RunFilter, RunListItem, StoreError};
use crate::domain::Timestamp;
use crate::domain::grading::Grade;
use crate::domain::run::{ErrorClass, Phase, RequestRecord, RunStatus};

/// One row of `list_record_facts`.
#[derive(Debug, sqlx::FromRow)]
struct FactRow {
    candidate_id: i64,
    case_id: String,
    phase: String,
    repetition: i64,
    attempt: i64,
    is_warmup: bool,
    error_class: Option<String>,
    /// 1 every required grade passed, 0 one failed, NULL no required grade.
    passed: Option<i64>,
}

impl FactRow {
    fn into_fact(self) -> Result<RecordFact> {
        let place = |what: &str| format!("request_records.{what} of a record of case {:?}", self.case_id);
        let bad = |what: &str, value: &str| StoreError::Corrupt(format!("{}: {value:?} is not valid", place(what)));
        Ok(RecordFact {
            candidate_id: self.candidate_id,
            phase: Phase::parse(&self.phase).ok_or_else(|| bad("phase", &self.phase))?,
            repetition: u32::try_from(self.repetition).map_err(|_| bad("repetition", &self.repetition.to_string()))?,
            attempt: u32::try_from(self.attempt).map_err(|_| bad("attempt", &self.attempt.to_string()))?,
            is_warmup: self.is_warmup,
            error_class: match self.error_class.as_deref() {
                None => None,
                Some(s) => Some(ErrorClass::parse(s).ok_or_else(|| bad("error_class", s))?),
            },
            passed: self.passed.map(|p| p != 0),
            case_id: self.case_id,
        })
    }
}

/// The error a restored run carries until its import completes.
pub const IMPORT_INCOMPLETE: &str = "import did not complete: delete this run and import it again";

macro_rules! archive_queries {
    ($db:ty, $backend:ident) => {
        use sqlx::QueryBuilder;

        use super::*;

        type Pool = sqlx::Pool<$db>;

        /// Appends `WHERE …` for `f` to a query over `runs` joined with `evalset_versions v`.
        fn push_filter(qb: &mut QueryBuilder<$db>, f: &RunFilter) {
            qb.push(" WHERE 1 = 1");
            if let Some(id) = f.evalset_id {
                qb.push(" AND v.evalset_id = ").push_bind(id);
            }
            if let Some(id) = f.candidate_id {
                qb.push(" AND EXISTS (SELECT 1 FROM run_candidates fc WHERE fc.run_id = runs.id AND fc.candidate_id = ")
                    .push_bind(id)
                    .push(")");
            }
            if let Some(status) = f.status {
                qb.push(" AND runs.status = ").push_bind(status.as_str());
            }
            if f.terminal_only {
                qb.push(" AND runs.status IN ('finished', 'failed', 'cancelled')");
            }
            if let Some(from) = f.created_from {
                qb.push(" AND runs.created_at >= ").push_bind(from.0);
            }
            if let Some(before) = f.created_before {
                qb.push(" AND runs.created_at < ").push_bind(before.0);
            }
            if f.profile_id.is_some() || f.verdict.is_some() {
                // One indexed lookup per run (run_verdicts' key starts with run_id).
                qb.push(" AND EXISTS (SELECT 1 FROM run_verdicts rv WHERE rv.run_id = runs.id");
                if let Some(id) = f.profile_id {
                    qb.push(" AND rv.profile_id = ").push_bind(id);
                }
                if let Some(verdict) = f.verdict {
                    qb.push(" AND rv.verdict = ").push_bind(verdict.as_str());
                }
                if let Some(id) = f.candidate_id {
                    qb.push(" AND rv.candidate_id = ").push_bind(id);
                }
                qb.push(")");
            }
            if let Some(id) = f.not_judged_by {
                // NOT IN over one profile's run ids: hashed once by either database, where a
                // correlated NOT EXISTS on a fresh PostgreSQL table (no statistics) may be
                // planned as a scan per run.
                qb.push(" AND runs.status = 'finished' AND runs.id NOT IN (SELECT nj.run_id FROM run_verdicts nj WHERE nj.profile_id = ")
                    .push_bind(id)
                    .push(")");
            }
        }

        pub(crate) async fn list_runs_filtered(
            pool: &Pool,
            f: &RunFilter,
            limit: i64,
            offset: i64,
        ) -> Result<Vec<RunListItem>> {
            let mut qb = QueryBuilder::<$db>::new(concat!(
                "SELECT ",
                run_columns!(),
                ", e.name AS evalset_name, \
                 (SELECT COUNT(*) FROM request_records r WHERE r.run_id = runs.id) AS record_count \
                 FROM runs JOIN evalset_versions v ON v.id = runs.evalset_version_id \
                 JOIN evalsets e ON e.id = v.evalset_id"
            ));
            push_filter(&mut qb, f);
            qb.push(" ORDER BY runs.created_at DESC, runs.id DESC LIMIT ")
                .push_bind(limit.max(0))
                .push(" OFFSET ")
                .push_bind(offset.max(0));
            let rows: Vec<RunListRow> = qb.build_query_as().fetch_all(pool).await?;
            let ids: Vec<i64> = rows.iter().map(|r| r.run.id).collect();
            let mut candidates = rows::group_run_candidates(run_candidate_rows(pool, &ids).await?);
            rows.into_iter()
                .map(|row| {
                    let (candidate_ids, candidate_names) = candidates.remove(&row.run.id).unwrap_or_default();
                    Ok(RunListItem {
                        run: row.run.into_run(candidate_ids)?,
                        evalset_name: row.evalset_name,
                        candidate_names,
                        record_count: row.record_count,
                    })
                })
                .collect()
        }

        async fn run_candidate_rows(pool: &Pool, run_ids: &[i64]) -> Result<Vec<RunCandidateRow>> {
            if run_ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut qb = QueryBuilder::<$db>::new(
                "SELECT rc.run_id, rc.candidate_id, c.name FROM run_candidates rc \
                 JOIN candidates c ON c.id = rc.candidate_id WHERE rc.run_id IN (",
            );
            let mut ids = qb.separated(", ");
            for id in run_ids {
                ids.push_bind(*id);
            }
            qb.push(") ORDER BY rc.run_id, rc.position");
            Ok(qb.build_query_as().fetch_all(pool).await?)
        }

        pub(crate) async fn count_runs_filtered(pool: &Pool, f: &RunFilter) -> Result<i64> {
            let mut qb = QueryBuilder::<$db>::new(
                "SELECT COUNT(*) FROM runs JOIN evalset_versions v ON v.id = runs.evalset_version_id",
            );
            push_filter(&mut qb, f);
            Ok(qb.build_query_scalar().fetch_one(pool).await?)
        }

        pub(crate) async fn list_record_facts(pool: &Pool, run_id: i64) -> Result<Vec<RecordFact>> {
            // One join and a MIN per record (a correlated subquery per record is slow on a
            // PostgreSQL table without statistics yet). MIN ignores the NULL of a record
            // without grades and of optional grades (`required` false: they never fail a case,
            // see `grading::case_passed`), so `passed` stays NULL without a required grade.
            let rows: Vec<FactRow> = sqlx::query_as(
                "SELECT r.candidate_id, r.case_id, r.phase, r.repetition, r.attempt, r.is_warmup, r.error_class, \
                 CAST(MIN(CASE WHEN g.id IS NULL OR NOT g.required THEN NULL WHEN g.passed THEN 1 ELSE 0 END) AS BIGINT) AS passed \
                 FROM request_records r LEFT JOIN grades g ON g.request_record_id = r.id \
                 WHERE r.run_id = $1 \
                 GROUP BY r.id, r.candidate_id, r.case_id, r.phase, r.repetition, r.attempt, r.is_warmup, \
                   r.error_class, r.sent_at_us \
                 ORDER BY r.sent_at_us, r.id",
            )
            .bind(run_id)
            .fetch_all(pool)
            .await?;
            rows.into_iter().map(FactRow::into_fact).collect()
        }

        pub(crate) async fn list_case_records(
            pool: &Pool,
            run_id: i64,
            case_ids: &[String],
        ) -> Result<Vec<RequestRecord>> {
            if case_ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut qb = QueryBuilder::<$db>::new(concat!(
                "SELECT ",
                record_select_columns!(),
                " FROM request_records WHERE run_id = "
            ));
            qb.push_bind(run_id).push(" AND case_id IN (");
            let mut ids = qb.separated(", ");
            for id in case_ids {
                ids.push_bind(id.as_str());
            }
            // Sorted here, not in SQL: an ORDER BY lets SQLite pick the (run, send time) index
            // and scan every record of the run instead of looking the cases up.
            qb.push(")");
            let mut records: Vec<RecordRow> = qb.build_query_as().fetch_all(pool).await?;
            records.sort_by_key(|r| (r.sent_at_us, r.id));

            // Grades by the ids just read (an index lookup each), not by a join the planner
            // might start from the whole grades table.
            let ids: Vec<i64> = records.iter().map(|r| r.id).collect();
            let mut grades: Vec<GradeRow> = Vec::new();
            for chunk in ids.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::<$db>::new(
                    "SELECT g.request_record_id, g.grader, g.score, g.passed, g.reason, g.detail, g.weight, g.required FROM grades g \
                     WHERE g.request_record_id IN (",
                );
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                qb.push(") ORDER BY g.request_record_id, g.position");
                grades.extend(qb.build_query_as::<GradeRow>().fetch_all(pool).await?);
            }
            let counts = super::super::token_counts::$backend::for_records(pool, &ids).await?;
            let mut records = rows::attach_grades(records, grades)?;
            super::super::token_counts::attach_counts(&ids, &mut records, &counts);
            Ok(records)
        }

        pub(crate) async fn cases_with_differing_outputs(pool: &Pool, run_id: i64) -> Result<Vec<String>> {
            // A case differs when some successful output was not given by every candidate that
            // answered it: then its distinct (candidate, output) pairs fall short of candidates ×
            // outputs. One grouped scan, no join, so no plan can turn it quadratic (a fresh
            // PostgreSQL table has no statistics to plan a join with).
            Ok(sqlx::query_scalar(
                "SELECT case_id FROM request_records \
                 WHERE run_id = $1 AND NOT is_warmup AND error_class IS NULL \
                 GROUP BY case_id \
                 HAVING COUNT(DISTINCT candidate_id) > 1 \
                   AND COUNT(DISTINCT CAST(candidate_id AS TEXT) || '|' || output) \
                     < COUNT(DISTINCT candidate_id) * COUNT(DISTINCT output) \
                 ORDER BY case_id",
            )
            .bind(run_id)
            .fetch_all(pool)
            .await?)
        }

        pub(crate) async fn restore_run(pool: &Pool, r: &RestoredRun) -> Result<i64> {
            let mut tx = pool.begin().await?;
            let run_id: i64 = sqlx::query_scalar(
                "INSERT INTO runs (name, evalset_version_id, config, status, error, created_at, started_at, finished_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(&r.run.name)
            .bind(r.run.evalset_version_id)
            .bind(rows::run_config_json(&r.run.config))
            .bind(RunStatus::Failed.as_str())
            .bind(IMPORT_INCOMPLETE)
            .bind(r.created_at.0)
            .bind(r.started_at.map(|t| t.0))
            .bind(r.finished_at.map(|t| t.0))
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::from)
            .map_err(|e| {
                rows::not_found_on_foreign_key(e, || format!("eval set version {}", r.run.evalset_version_id))
            })?;
            if !r.run.candidate_ids.is_empty() {
                let mut qb = QueryBuilder::<$db>::new("INSERT INTO run_candidates (run_id, candidate_id, position) ");
                qb.push_values(r.run.candidate_ids.iter().enumerate(), |mut b, (position, id)| {
                    b.push_bind(run_id).push_bind(*id).push_bind(position as i64);
                });
                qb.build().execute(&mut *tx).await.map_err(|e| {
                    rows::conflict_on_unique(e, || "the imported run lists the same candidate twice".to_string())
                })?;
            }
            for chunk in r.events.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::<$db>::new("INSERT INTO run_events (run_id, at, level, message) ");
                qb.push_values(chunk, |mut b, e| {
                    b.push_bind(run_id)
                        .push_bind(e.at.0)
                        .push_bind(e.level.as_str())
                        .push_bind(e.message.as_str());
                });
                qb.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(run_id)
        }

        pub(crate) async fn complete_restore(pool: &Pool, id: i64, r: &RestoredRun) -> Result<()> {
            let done = sqlx::query(
                "UPDATE runs SET status = $2, error = $3, started_at = $4, finished_at = $5 WHERE id = $1",
            )
            .bind(id)
            .bind(r.status.as_str())
            .bind(r.error.as_deref())
            .bind(r.started_at.map(|t| t.0))
            .bind(r.finished_at.map(|t| t.0))
            .execute(pool)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound(format!("run {id}")));
            }
            Ok(())
        }

        pub(crate) async fn delete_run(pool: &Pool, id: i64) -> Result<()> {
            let done = sqlx::query("DELETE FROM runs WHERE id = $1").bind(id).execute(pool).await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound(format!("run {id}")));
            }
            Ok(())
        }

        pub(crate) async fn get_run_summary(pool: &Pool, run_id: i64, kind: &str) -> Result<Option<String>> {
            Ok(
                sqlx::query_scalar("SELECT body FROM run_summaries WHERE run_id = $1 AND kind = $2")
                    .bind(run_id)
                    .bind(kind)
                    .fetch_optional(pool)
                    .await?,
            )
        }

        pub(crate) async fn append_grades(
            pool: &Pool,
            record: &RequestRecord,
            first_position: u32,
            grades: &[Grade],
        ) -> Result<u64> {
            if grades.is_empty() {
                return Ok(0);
            }
            // One lookup, then one INSERT statement (atomic by itself; no transaction, which on
            // SQLite would have to upgrade a read lock and could fail as busy).
            let id: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM request_records WHERE run_id = $1 AND candidate_id = $2 AND case_id = $3 \
                 AND phase = $4 AND repetition = $5 AND attempt = $6",
            )
            .bind(record.run_id)
            .bind(record.candidate_id)
            .bind(record.case_id.as_str())
            .bind(record.phase.as_str())
            .bind(i64::from(record.repetition))
            .bind(i64::from(record.attempt))
            .fetch_optional(pool)
            .await?;
            let Some(id) = id else {
                return Err(StoreError::NotFound(format!(
                    "request record of case {:?} (candidate {}, {}, repetition {}, attempt {}) in run {}",
                    record.case_id,
                    record.candidate_id,
                    record.phase.as_str(),
                    record.repetition,
                    record.attempt,
                    record.run_id
                )));
            };
            let mut qb = QueryBuilder::<$db>::new(
                "INSERT INTO grades (request_record_id, position, grader, score, passed, reason, detail, weight, required) ",
            );
            qb.push_values(grades.iter().enumerate(), |mut b, (i, grade)| {
                b.push_bind(id)
                    .push_bind(i64::from(first_position) + i as i64)
                    .push_bind(grade.grader.as_str())
                    .push_bind(grade.score)
                    .push_bind(grade.passed)
                    .push_bind(grade.reason.as_str())
                    .push_bind(grade.detail.as_ref().map(|d| d.to_string()))
                    .push_bind(grade.weight)
                    .push_bind(grade.required);
            });
            qb.push(" ON CONFLICT (request_record_id, position) DO NOTHING");
            Ok(qb.build().execute(pool).await?.rows_affected())
        }

        pub(crate) async fn save_run_summary(pool: &Pool, run_id: i64, kind: &str, body: &str) -> Result<()> {
            sqlx::query(
                "INSERT INTO run_summaries (run_id, kind, body, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (run_id, kind) DO UPDATE SET body = excluded.body, created_at = excluded.created_at",
            )
            .bind(run_id)
            .bind(kind)
            .bind(body)
            .bind(Timestamp::now().0)
            .execute(pool)
            .await
            .map_err(StoreError::from)
            .map_err(|e| rows::not_found_on_foreign_key(e, || format!("run {run_id}")))?;
            Ok(())
        }
    };
}

pub(crate) mod sqlite {
    archive_queries!(sqlx::Sqlite, sqlite);
}

pub(crate) mod postgres {
    archive_queries!(sqlx::Postgres, postgres);
}
