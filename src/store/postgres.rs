//! PostgreSQL backend (teams, workers).
//!
//! The SQL mirrors the SQLite backend statement for statement (both accept `$N` placeholders,
//! `ON CONFLICT` and `RETURNING`), so the shared test suite checks one behaviour on both.
//! Objects are unqualified: the schema is whatever `search_path` says, which lets tests isolate
//! themselves with `?options=-c search_path=<schema>` in the URL.
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, QueryBuilder};

use super::rows::{
    self, CandidateRow, CandidateValues, EvalSetSummaryRow, EvalSetVersionRow, GradeRow, InsertedRecordRow,
    ProfileChangeRow, ProfileRow, ProfileVersionRow, ProgressRow, RECORDS_PER_STATEMENT, RecordRow, RecordValues,
    RunCandidateRow, RunEventRow, RunListRow, RunRow, SMALL_ROWS_PER_STATEMENT, ScorecardListRow, ScorecardRow,
    candidate_columns, record_insert_columns, record_select_columns, run_columns, scorecard_columns,
};
use super::{
    Backend, CandidateProgress, EvalSetSummary, EvalSetVersion, ProfileChange, Result, RunListItem, Store, StoreError,
};
use crate::domain::Timestamp;
use crate::domain::calibers::HarnessReport;
use crate::domain::candidate::{Candidate, CandidateSpec};
use crate::domain::evalset::EvalSetFile;
use crate::domain::grading::Grade;
use crate::domain::run::{NewRun, RequestRecord, Run, RunEvent, RunStatus, ServerTokenCount, UncountedRecord};
use crate::domain::scorecard::{NewScorecard, ScorecardListItem, ScorecardRecord};
use crate::domain::thresholds::{ThresholdProfile, ThresholdRule};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// Room for several runs writing records at once plus the web pages reading.
const MAX_CONNECTIONS: u32 = 20;
/// How long a caller waits for a free connection before giving up with an error.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Opens `postgres://USER@HOST:PORT/DB` (URL parameters such as `options` are honoured) and
    /// applies migrations.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)?.application_name("bakeoff");
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        MIGRATOR.run(&pool).await?;
        tracing::debug!("postgres store ready");
        Ok(PostgresStore { pool })
    }

    /// The connection pool, for backend-specific work outside the `Store` trait.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn run_candidate_rows(&self, run_ids: &[i64]) -> Result<Vec<RunCandidateRow>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut qb = QueryBuilder::<Postgres>::new(
            "SELECT rc.run_id, rc.candidate_id, c.name FROM run_candidates rc \
             JOIN candidates c ON c.id = rc.candidate_id WHERE rc.run_id IN (",
        );
        let mut ids = qb.separated(", ");
        for id in run_ids {
            ids.push_bind(*id);
        }
        qb.push(") ORDER BY rc.run_id, rc.position");
        Ok(qb.build_query_as().fetch_all(&self.pool).await?)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    // ------------------------------------------------------------ candidates

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_candidates(&self) -> Result<Vec<Candidate>> {
        let rows: Vec<CandidateRow> = sqlx::query_as(concat!(
            "SELECT ",
            candidate_columns!(),
            " FROM candidates ORDER BY name, id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(CandidateRow::into_candidate).collect()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn get_candidate(&self, id: i64) -> Result<Option<Candidate>> {
        let row: Option<CandidateRow> = sqlx::query_as(concat!(
            "SELECT ",
            candidate_columns!(),
            " FROM candidates WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(CandidateRow::into_candidate).transpose()
    }

    #[tracing::instrument(level = "debug", skip(self, spec), fields(name = %spec.name))]
    async fn create_candidate(&self, spec: &CandidateSpec) -> Result<i64> {
        let v = CandidateValues::new(spec);
        let now = Timestamp::now().0;
        sqlx::query_scalar(
            "INSERT INTO candidates (name, provider, base_url, model, api_key, api_key_env, max_tokens, temperature, \
             extra_body, hardware, framework, quantization, context_length, price_input_per_mtok, \
             price_output_per_mtok, claimed_tokens_per_second, claimed_caliber, claimed_conditions, notes, \
             tokenize_kind, tokenize_path, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, \
             $22, $22) RETURNING id",
        )
        .bind(v.name)
        .bind(v.provider)
        .bind(v.base_url)
        .bind(v.model)
        .bind(v.api_key)
        .bind(v.api_key_env)
        .bind(v.max_tokens)
        .bind(v.temperature)
        .bind(v.extra_body)
        .bind(v.hardware)
        .bind(v.framework)
        .bind(v.quantization)
        .bind(v.context_length)
        .bind(v.price_input_per_mtok)
        .bind(v.price_output_per_mtok)
        .bind(v.claimed_tokens_per_second)
        .bind(v.claimed_caliber)
        .bind(v.claimed_conditions)
        .bind(v.notes)
        .bind(v.tokenize_kind)
        .bind(v.tokenize_path)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| rows::conflict_on_unique(e, || rows::candidate_name_taken(&spec.name)))
    }

    #[tracing::instrument(level = "debug", skip(self, spec), fields(name = %spec.name))]
    async fn update_candidate(&self, id: i64, spec: &CandidateSpec) -> Result<()> {
        let v = CandidateValues::new(spec);
        let now = Timestamp::now().0;
        let done = sqlx::query(
            "UPDATE candidates SET name = $2, provider = $3, base_url = $4, model = $5, api_key = $6, \
             api_key_env = $7, max_tokens = $8, temperature = $9, extra_body = $10, hardware = $11, framework = $12, \
             quantization = $13, context_length = $14, price_input_per_mtok = $15, price_output_per_mtok = $16, \
             claimed_tokens_per_second = $17, claimed_caliber = $18, claimed_conditions = $19, notes = $20, \
             tokenize_kind = $21, tokenize_path = $22, updated_at = $23 WHERE id = $1",
        )
        .bind(id)
        .bind(v.name)
        .bind(v.provider)
        .bind(v.base_url)
        .bind(v.model)
        .bind(v.api_key)
        .bind(v.api_key_env)
        .bind(v.max_tokens)
        .bind(v.temperature)
        .bind(v.extra_body)
        .bind(v.hardware)
        .bind(v.framework)
        .bind(v.quantization)
        .bind(v.context_length)
        .bind(v.price_input_per_mtok)
        .bind(v.price_output_per_mtok)
        .bind(v.claimed_tokens_per_second)
        .bind(v.claimed_caliber)
        .bind(v.claimed_conditions)
        .bind(v.notes)
        .bind(v.tokenize_kind)
        .bind(v.tokenize_path)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| rows::conflict_on_unique(e, || rows::candidate_name_taken(&spec.name)))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("candidate {id}")));
        }
        Ok(())
    }

    // ------------------------------------------------------------ eval sets

    #[tracing::instrument(level = "debug", skip(self, file), fields(name = %file.header.name, cases = file.cases.len()))]
    async fn save_evalset_version(&self, file: &EvalSetFile) -> Result<i64> {
        let hash = file.content_hash();
        let header = &file.header;
        let now = Timestamp::now().0;
        let mut tx = self.pool.begin().await?;

        sqlx::query(
            "INSERT INTO evalsets (name, task, description, created_at, updated_at) VALUES ($1, $2, $3, $4, $4) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&header.name)
        .bind(header.task.as_str())
        .bind(&header.description)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let evalset_id: i64 = sqlx::query_scalar("SELECT id FROM evalsets WHERE name = $1")
            .bind(&header.name)
            .fetch_one(&mut *tx)
            .await?;

        // Same content as a stored version: that version, and nothing changes.
        let inserted: Option<i64> = sqlx::query_scalar(
            "INSERT INTO evalset_versions (evalset_id, content_hash, content, case_count, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (evalset_id, content_hash) DO NOTHING RETURNING id",
        )
        .bind(evalset_id)
        .bind(&hash)
        .bind(file.normalised())
        .bind(file.cases.len() as i64)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(version_id) = inserted else {
            let existing: i64 =
                sqlx::query_scalar("SELECT id FROM evalset_versions WHERE evalset_id = $1 AND content_hash = $2")
                    .bind(evalset_id)
                    .bind(&hash)
                    .fetch_one(&mut *tx)
                    .await?;
            tx.rollback().await?;
            return Ok(existing);
        };

        for chunk in rows::case_values(file).chunks(SMALL_ROWS_PER_STATEMENT) {
            let mut qb = QueryBuilder::<Postgres>::new(
                "INSERT INTO eval_cases (version_id, case_id, position, input, expected, graders, tags, weight) ",
            );
            qb.push_values(chunk, |mut b, c| {
                b.push_bind(version_id)
                    .push_bind(c.case_id)
                    .push_bind(c.position)
                    .push_bind(c.input.as_str())
                    .push_bind(c.expected.as_deref())
                    .push_bind(c.graders.as_str())
                    .push_bind(c.tags.as_str())
                    .push_bind(c.weight);
            });
            qb.build().execute(&mut *tx).await?;
        }

        // The set's task and description follow its newest version.
        sqlx::query("UPDATE evalsets SET task = $2, description = $3, updated_at = $4 WHERE id = $1")
            .bind(evalset_id)
            .bind(header.task.as_str())
            .bind(&header.description)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(version_id)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_evalsets(&self) -> Result<Vec<EvalSetSummary>> {
        let rows: Vec<EvalSetSummaryRow> = sqlx::query_as(
            "SELECT e.id, e.name, e.task, e.description, e.updated_at, v.id AS latest_version_id, \
             v.content_hash AS latest_hash, v.case_count, \
             (SELECT COUNT(*) FROM evalset_versions c WHERE c.evalset_id = e.id) AS version_count \
             FROM evalsets e \
             JOIN evalset_versions v ON v.id = (SELECT MAX(id) FROM evalset_versions m WHERE m.evalset_id = e.id) \
             ORDER BY e.name, e.id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(EvalSetSummaryRow::into_summary).collect()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn get_evalset_version(&self, version_id: i64) -> Result<Option<EvalSetVersion>> {
        let row: Option<EvalSetVersionRow> = sqlx::query_as(
            "SELECT id, evalset_id, content_hash, content, created_at FROM evalset_versions WHERE id = $1",
        )
        .bind(version_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(EvalSetVersionRow::into_version).transpose()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_evalset_versions(&self, evalset_id: i64) -> Result<Vec<EvalSetVersion>> {
        let rows: Vec<EvalSetVersionRow> = sqlx::query_as(
            "SELECT id, evalset_id, content_hash, content, created_at FROM evalset_versions \
             WHERE evalset_id = $1 ORDER BY id DESC",
        )
        .bind(evalset_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(EvalSetVersionRow::into_version).collect()
    }

    // ------------------------------------------------------------ threshold profiles

    #[tracing::instrument(level = "debug", skip(self, description, rules, rationale), fields(rules = rules.len()))]
    async fn save_threshold_profile(
        &self,
        name: &str,
        description: &str,
        rules: &[ThresholdRule],
        changed_by: &str,
        rationale: &str,
    ) -> Result<(i64, u32)> {
        let now = Timestamp::now().0;
        let mut tx = self.pool.begin().await?;
        // One statement creates the profile or bumps its version, so two saves never pick the
        // same number.
        let (profile_id, version): (i64, i64) = sqlx::query_as(
            "INSERT INTO threshold_profiles (name, description, current_version, created_at, updated_at) \
             VALUES ($1, $2, 1, $3, $3) \
             ON CONFLICT (name) DO UPDATE SET description = excluded.description, \
             current_version = threshold_profiles.current_version + 1, updated_at = excluded.updated_at \
             RETURNING id, current_version",
        )
        .bind(name)
        .bind(description)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO threshold_profile_versions \
             (profile_id, version, description, rules, changed_by, rationale, at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(profile_id)
        .bind(version)
        .bind(description)
        .bind(rows::rules_json(rules))
        .bind(changed_by)
        .bind(rationale)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let version = u32::try_from(version)
            .map_err(|_| StoreError::Corrupt(format!("threshold profile {profile_id}: version {version}")))?;
        Ok((profile_id, version))
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_threshold_profiles(&self) -> Result<Vec<ThresholdProfile>> {
        let rows: Vec<ProfileRow> = sqlx::query_as(
            "SELECT p.id, p.name, p.description, v.version, v.rules FROM threshold_profiles p \
             JOIN threshold_profile_versions v ON v.profile_id = p.id AND v.version = p.current_version \
             ORDER BY p.name, p.id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(ProfileRow::into_profile).collect()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn threshold_profile_history(&self, profile_id: i64) -> Result<Vec<ProfileChange>> {
        let rows: Vec<ProfileChangeRow> = sqlx::query_as(
            "SELECT profile_id, version, changed_by, rationale, rules, at FROM threshold_profile_versions \
             WHERE profile_id = $1 ORDER BY version DESC",
        )
        .bind(profile_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(ProfileChangeRow::into_change).collect()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn get_threshold_profile(&self, profile_id: i64, version: Option<u32>) -> Result<Option<ThresholdProfile>> {
        let row: Option<ProfileVersionRow> = sqlx::query_as(
            "SELECT p.id, p.name, v.description, v.version, v.rules FROM threshold_profiles p \
             JOIN threshold_profile_versions v ON v.profile_id = p.id \
             AND v.version = COALESCE($2, p.current_version) WHERE p.id = $1",
        )
        .bind(profile_id)
        .bind(version.map(i64::from))
        .fetch_optional(&self.pool)
        .await?;
        row.map(ProfileVersionRow::into_profile).transpose()
    }

    // ------------------------------------------------------------ archived scorecards

    #[tracing::instrument(level = "debug", skip(self, scorecard), fields(run_id = scorecard.run_id))]
    async fn save_scorecard(&self, scorecard: &NewScorecard) -> Result<i64> {
        let (pipeline, verdicts) = rows::scorecard_json(scorecard);
        let mut tx = self.pool.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO scorecards (run_id, profile_id, profile_version, incumbent_candidate_id, pipeline, \
             created_by, note, verdicts, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(scorecard.run_id)
        .bind(scorecard.profile_id)
        .bind(i64::from(scorecard.profile_version))
        .bind(scorecard.incumbent)
        .bind(pipeline)
        .bind(&scorecard.created_by)
        .bind(&scorecard.note)
        .bind(verdicts)
        .bind(Timestamp::now().0)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::from)
        .map_err(|e| {
            rows::not_found_on_foreign_key(e, || {
                format!(
                    "run {}, profile {} version {} or incumbent {:?}",
                    scorecard.run_id, scorecard.profile_id, scorecard.profile_version, scorecard.incumbent
                )
            })
        })?;
        // The run's verdict by this profile is now the saved scorecard's (archive filters).
        super::verdicts::postgres::replace(
            &mut tx,
            scorecard.run_id,
            scorecard.profile_id,
            scorecard.profile_version,
            Some(id),
            &scorecard.verdicts,
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn get_scorecard(&self, id: i64) -> Result<Option<ScorecardRecord>> {
        let row: Option<ScorecardRow> = sqlx::query_as(concat!(
            "SELECT ",
            scorecard_columns!(),
            " FROM scorecards WHERE scorecards.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(ScorecardRow::into_record).transpose()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_scorecards(&self, limit: i64, offset: i64) -> Result<Vec<ScorecardListItem>> {
        let rows: Vec<ScorecardListRow> = sqlx::query_as(concat!(
            "SELECT ",
            scorecard_columns!(),
            ", runs.name AS run_name, p.name AS profile_name FROM scorecards \
             JOIN runs ON runs.id = scorecards.run_id \
             JOIN threshold_profiles p ON p.id = scorecards.profile_id \
             ORDER BY scorecards.created_at DESC, scorecards.id DESC LIMIT $1 OFFSET $2"
        ))
        .bind(limit.max(0))
        .bind(offset.max(0))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(ScorecardListRow::into_item).collect()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn count_scorecards(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM scorecards")
            .fetch_one(&self.pool)
            .await?)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_run_scorecards(&self, run_id: i64) -> Result<Vec<ScorecardListItem>> {
        let rows: Vec<ScorecardListRow> = sqlx::query_as(concat!(
            "SELECT ",
            scorecard_columns!(),
            ", runs.name AS run_name, p.name AS profile_name FROM scorecards \
             JOIN runs ON runs.id = scorecards.run_id \
             JOIN threshold_profiles p ON p.id = scorecards.profile_id \
             WHERE scorecards.run_id = $1 ORDER BY scorecards.created_at DESC, scorecards.id DESC"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(ScorecardListRow::into_item).collect()
    }

    // ------------------------------------------------------------ runs

    #[tracing::instrument(level = "debug", skip(self, run), fields(name = %run.name))]
    async fn create_run(&self, run: &NewRun) -> Result<i64> {
        let now = Timestamp::now().0;
        let inserted: Result<i64> = async {
            let mut tx = self.pool.begin().await?;
            let run_id: i64 = sqlx::query_scalar(
                "INSERT INTO runs (name, evalset_version_id, config, status, created_at) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(&run.name)
            .bind(run.evalset_version_id)
            .bind(rows::run_config_json(&run.config))
            .bind(RunStatus::Queued.as_str())
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            if !run.candidate_ids.is_empty() {
                let mut qb =
                    QueryBuilder::<Postgres>::new("INSERT INTO run_candidates (run_id, candidate_id, position) ");
                qb.push_values(run.candidate_ids.iter().enumerate(), |mut b, (position, id)| {
                    b.push_bind(run_id).push_bind(*id).push_bind(position as i64);
                });
                qb.build()
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| rows::conflict_on_unique(e, || "a run lists the same candidate twice".to_string()))?;
            }
            tx.commit().await?;
            Ok(run_id)
        }
        .await;
        inserted.map_err(|e| {
            rows::not_found_on_foreign_key(e, || {
                format!(
                    "eval set version {} or one of candidates {:?}",
                    run.evalset_version_id, run.candidate_ids
                )
            })
        })
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn get_run(&self, id: i64) -> Result<Option<Run>> {
        let row: Option<RunRow> = sqlx::query_as(concat!("SELECT ", run_columns!(), " FROM runs WHERE runs.id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let candidate_ids: Vec<i64> =
            sqlx::query_scalar("SELECT candidate_id FROM run_candidates WHERE run_id = $1 ORDER BY position")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        row.into_run(candidate_ids).map(Some)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_runs(&self, limit: i64, offset: i64) -> Result<Vec<RunListItem>> {
        let rows: Vec<RunListRow> = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            ", e.name AS evalset_name, \
             (SELECT COUNT(*) FROM request_records r WHERE r.run_id = runs.id) AS record_count \
             FROM runs JOIN evalset_versions v ON v.id = runs.evalset_version_id \
             JOIN evalsets e ON e.id = v.evalset_id \
             ORDER BY runs.created_at DESC, runs.id DESC LIMIT $1 OFFSET $2"
        ))
        .bind(limit.max(0))
        .bind(offset.max(0))
        .fetch_all(&self.pool)
        .await?;
        let run_ids: Vec<i64> = rows.iter().map(|r| r.run.id).collect();
        let mut candidates = rows::group_run_candidates(self.run_candidate_rows(&run_ids).await?);
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

    #[tracing::instrument(level = "debug", skip(self))]
    async fn count_runs(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM runs")
            .fetch_one(&self.pool)
            .await?)
    }

    #[tracing::instrument(level = "debug", skip(self, error))]
    async fn set_run_status(&self, id: i64, status: RunStatus, error: Option<&str>) -> Result<()> {
        let now = Timestamp::now().0;
        // started_at records the first start only; finished_at is set on entering a terminal
        // state and cleared if the run is resumed.
        let done = sqlx::query(
            "UPDATE runs SET status = $2, error = $3, \
             started_at = CASE WHEN $4 THEN COALESCE(started_at, $6) ELSE started_at END, \
             finished_at = CASE WHEN $5 THEN $6 ELSE NULL END \
             WHERE id = $1",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(error)
        .bind(status == RunStatus::Running)
        .bind(status.is_terminal())
        .bind(now)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("run {id}")));
        }
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip(self, harness))]
    async fn set_run_harness(&self, run_id: i64, harness: &HarnessReport) -> Result<()> {
        let done = sqlx::query("UPDATE runs SET harness = $2 WHERE id = $1")
            .bind(run_id)
            .bind(rows::harness_json(harness))
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("run {run_id}")));
        }
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn get_run_harness(&self, run_id: i64) -> Result<Option<HarnessReport>> {
        let text: Option<Option<String>> = sqlx::query_scalar("SELECT harness FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        text.flatten().map(|t| rows::parse_harness(run_id, &t)).transpose()
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn unfinished_runs(&self) -> Result<Vec<i64>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM runs WHERE status IN ('queued', 'running') ORDER BY id")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    // ------------------------------------------------------------ raw records

    #[tracing::instrument(level = "debug", skip(self, records), fields(batch = records.len()))]
    async fn append_request_records(&self, records: &[RequestRecord]) -> Result<u64> {
        if records.is_empty() {
            return Ok(0);
        }
        let first_by_key = rows::first_index_by_key(records);
        let appended: Result<u64> = async {
            let mut tx = self.pool.begin().await?;
            // (record id, index in `records`) for every record this call actually stored.
            let mut stored: Vec<(i64, usize)> = Vec::with_capacity(records.len());
            for chunk in records.chunks(RECORDS_PER_STATEMENT) {
                let mut qb = QueryBuilder::<Postgres>::new(concat!(
                    "INSERT INTO request_records (",
                    record_insert_columns!(),
                    ") "
                ));
                qb.push_values(chunk, |mut b, record| {
                    let v = RecordValues::new(record);
                    b.push_bind(v.run_id)
                        .push_bind(v.candidate_id)
                        .push_bind(v.case_id)
                        .push_bind(v.phase)
                        .push_bind(v.repetition)
                        .push_bind(v.attempt)
                        .push_bind(v.concurrency)
                        .push_bind(v.is_warmup)
                        .push_bind(v.sent_at_us)
                        .push_bind(v.client_queue_us)
                        .push_bind(v.connect_us)
                        .push_bind(v.connection_reused)
                        .push_bind(v.headers_us)
                        .push_bind(v.first_chunk_us)
                        .push_bind(v.first_reasoning_us)
                        .push_bind(v.first_content_us)
                        .push_bind(v.last_token_us)
                        .push_bind(v.end_us)
                        .push_bind(v.chunks)
                        .push_bind(v.http_status)
                        .push_bind(v.finish_reason)
                        .push_bind(v.input_tokens)
                        .push_bind(v.output_tokens)
                        .push_bind(v.output_tokens_source)
                        .push_bind(v.reasoning_tokens)
                        .push_bind(v.canonical_tokens)
                        .push_bind(v.output_chars)
                        .push_bind(v.output)
                        .push_bind(v.reasoning)
                        .push_bind(v.error_class)
                        .push_bind(v.error_detail);
                });
                qb.push(
                    " ON CONFLICT (run_id, candidate_id, case_id, phase, repetition, attempt) DO NOTHING \
                     RETURNING id, run_id, candidate_id, case_id, phase, repetition, attempt",
                );
                let inserted: Vec<InsertedRecordRow> = qb.build_query_as().fetch_all(&mut *tx).await?;
                for row in inserted {
                    let (id, key) = row.key();
                    if let Some(&index) = first_by_key.get(&key) {
                        stored.push((id, index));
                    }
                }
            }

            let grades: Vec<rows::GradeValues<'_>> = stored
                .iter()
                .flat_map(|&(id, index)| {
                    records[index]
                        .grades
                        .iter()
                        .enumerate()
                        .map(move |(position, grade)| (id, position as i64, grade))
                })
                .collect();
            for chunk in grades.chunks(SMALL_ROWS_PER_STATEMENT) {
                let mut qb = QueryBuilder::<Postgres>::new(
                    "INSERT INTO grades (request_record_id, position, grader, score, passed, reason, detail, weight, required) ",
                );
                qb.push_values(chunk, |mut b, &(record_id, position, grade)| {
                    b.push_bind(record_id)
                        .push_bind(position)
                        .push_bind(grade.grader.as_str())
                        .push_bind(grade.score)
                        .push_bind(grade.passed)
                        .push_bind(grade.reason.as_str())
                        .push_bind(grade.detail.as_ref().map(|d| d.to_string()))
                        .push_bind(grade.weight)
                        .push_bind(grade.required);
                });
                qb.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(stored.len() as u64)
        }
        .await;
        appended.map_err(|e| {
            rows::not_found_on_foreign_key(e, || {
                "a record names a run, or a candidate of that run, that does not exist".to_string()
            })
        })
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_request_records(&self, run_id: i64) -> Result<Vec<RequestRecord>> {
        // Records first, then their grades: a batch is committed with its grades, so every
        // record loaded here has all its grades by the time the second query runs.
        let records: Vec<RecordRow> = sqlx::query_as(concat!(
            "SELECT ",
            record_select_columns!(),
            " FROM request_records WHERE run_id = $1 ORDER BY sent_at_us, id"
        ))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        let grades: Vec<GradeRow> = sqlx::query_as(
            "SELECT g.request_record_id, g.grader, g.score, g.passed, g.reason, g.detail, g.weight, g.required FROM grades g \
             JOIN request_records r ON r.id = g.request_record_id \
             WHERE r.run_id = $1 ORDER BY g.request_record_id, g.position",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        let counts = super::token_counts::postgres::for_run(&self.pool, run_id).await?;
        let ids = super::token_counts::ids(&records);
        let mut records = rows::attach_grades(records, grades)?;
        super::token_counts::attach_counts(&ids, &mut records, &counts);
        Ok(records)
    }

    async fn uncounted_records(&self, run_id: i64, candidate_id: i64) -> Result<Vec<UncountedRecord>> {
        super::token_counts::postgres::uncounted(&self.pool, run_id, candidate_id).await
    }

    async fn save_server_token_counts(&self, run_id: i64, counts: &[ServerTokenCount]) -> Result<u64> {
        super::token_counts::postgres::save(&self.pool, run_id, counts).await
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn run_progress(&self, run_id: i64) -> Result<Vec<CandidateProgress>> {
        let rows: Vec<ProgressRow> = sqlx::query_as(
            "SELECT rc.candidate_id, \
             COUNT(CASE WHEN NOT r.is_warmup THEN 1 END) AS measured_attempts, \
             COUNT(CASE WHEN r.is_warmup AND r.phase <> 'judge' THEN 1 END) AS warmup_attempts, \
             COUNT(CASE WHEN NOT r.is_warmup AND r.error_class IS NOT NULL THEN 1 END) AS failed_attempts \
             FROM run_candidates rc \
             LEFT JOIN request_records r ON r.run_id = rc.run_id AND r.candidate_id = rc.candidate_id \
             WHERE rc.run_id = $1 GROUP BY rc.candidate_id, rc.position ORDER BY rc.position",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(CandidateProgress::from).collect())
    }

    #[tracing::instrument(level = "debug", skip(self, message))]
    async fn append_run_event(&self, run_id: i64, level: &str, message: &str) -> Result<()> {
        sqlx::query("INSERT INTO run_events (run_id, at, level, message) VALUES ($1, $2, $3, $4)")
            .bind(run_id)
            .bind(Timestamp::now().0)
            .bind(level)
            .bind(message)
            .execute(&self.pool)
            .await
            .map_err(StoreError::from)
            .map_err(|e| rows::not_found_on_foreign_key(e, || format!("run {run_id}")))?;
        Ok(())
    }

    // ------------------------------------------------------------ operability (store/operability.rs)

    async fn save_probe_run(&self, candidate_id: i64, report: &crate::domain::operability::ProbeReport) -> Result<i64> {
        self.op_save_probe_run(candidate_id, report).await
    }

    async fn list_probe_runs(
        &self,
        candidate_id: i64,
        limit: i64,
    ) -> Result<Vec<crate::domain::operability::ProbeRun>> {
        self.op_list_probe_runs(candidate_id, limit).await
    }

    async fn save_checklist(
        &self,
        candidate_id: i64,
        answers: &crate::domain::operability::ChecklistAnswers,
        changed_by: &str,
        rationale: &str,
    ) -> Result<u32> {
        self.op_save_checklist(candidate_id, answers, changed_by, rationale)
            .await
    }

    async fn checklist_history(&self, candidate_id: i64) -> Result<Vec<crate::domain::operability::ChecklistVersion>> {
        self.op_checklist_history(candidate_id).await
    }

    #[tracing::instrument(level = "debug", skip(self))]
    async fn list_run_events(&self, run_id: i64) -> Result<Vec<RunEvent>> {
        let rows: Vec<RunEventRow> =
            sqlx::query_as("SELECT at, level, message FROM run_events WHERE run_id = $1 ORDER BY id")
                .bind(run_id)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(RunEvent::from).collect())
    }

    // ------------------------------------------------------------ archive, drill-down, import
    // Portable SQL shared with the other backend: see store/archive.rs.

    async fn list_runs_filtered(&self, filter: &super::RunFilter, limit: i64, offset: i64) -> Result<Vec<RunListItem>> {
        super::archive::postgres::list_runs_filtered(&self.pool, filter, limit, offset).await
    }

    async fn count_runs_filtered(&self, filter: &super::RunFilter) -> Result<i64> {
        super::archive::postgres::count_runs_filtered(&self.pool, filter).await
    }

    async fn list_record_facts(&self, run_id: i64) -> Result<Vec<super::RecordFact>> {
        super::archive::postgres::list_record_facts(&self.pool, run_id).await
    }

    async fn append_grades(&self, record: &RequestRecord, first_position: u32, grades: &[Grade]) -> Result<u64> {
        super::archive::postgres::append_grades(&self.pool, record, first_position, grades).await
    }

    async fn list_case_records(&self, run_id: i64, case_ids: &[String]) -> Result<Vec<RequestRecord>> {
        super::archive::postgres::list_case_records(&self.pool, run_id, case_ids).await
    }

    async fn cases_with_differing_outputs(&self, run_id: i64) -> Result<Vec<String>> {
        super::archive::postgres::cases_with_differing_outputs(&self.pool, run_id).await
    }

    async fn restore_run(&self, run: &super::RestoredRun) -> Result<i64> {
        super::archive::postgres::restore_run(&self.pool, run).await
    }

    async fn complete_restore(&self, id: i64, run: &super::RestoredRun) -> Result<()> {
        super::archive::postgres::complete_restore(&self.pool, id, run).await
    }

    async fn delete_run(&self, id: i64) -> Result<()> {
        super::archive::postgres::delete_run(&self.pool, id).await
    }

    async fn get_run_summary(&self, run_id: i64, kind: &str) -> Result<Option<String>> {
        super::archive::postgres::get_run_summary(&self.pool, run_id, kind).await
    }

    async fn save_run_summary(&self, run_id: i64, kind: &str, body: &str) -> Result<()> {
        super::archive::postgres::save_run_summary(&self.pool, run_id, kind, body).await
    }

    async fn save_run_verdicts(
        &self,
        run_id: i64,
        profile_id: i64,
        profile_version: u32,
        verdicts: &[crate::domain::scorecard::RecordedVerdict],
    ) -> Result<()> {
        super::verdicts::postgres::save(&self.pool, run_id, profile_id, profile_version, verdicts).await
    }

    async fn list_run_verdicts(&self, run_ids: &[i64], profile_id: i64) -> Result<Vec<super::RunVerdict>> {
        super::verdicts::postgres::list(&self.pool, run_ids, profile_id).await
    }

    async fn unjudged_runs(&self, limit: i64) -> Result<Vec<(i64, i64)>> {
        super::verdicts::postgres::unjudged(&self.pool, limit).await
    }
}
