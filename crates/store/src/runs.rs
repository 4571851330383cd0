//! Run queries (runs, their candidates and event logs), written once for both backends:
//! `run_queries!` and `run_state_queries!` expand to the methods of `RunStore` and `run_helpers!` to queries other
//! aggregates share, both in `lib.rs` (`impl_store!`), so their paths are written as seen
//! from there.

macro_rules! run_helpers {
    () => {
        /// Inserts a run's candidates in order inside `tx`, each with its snapshot
        /// (`rows::CandidateSnapshot`): `snapshots[i]` when given (an import: the candidate as
        /// exported), else the candidate as stored now. Errors are the caller's to map.
        async fn insert_run_candidates(
            &self,
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            run_id: i64,
            ids: &[i64],
            snapshots: Option<&[CandidateSpec]>,
        ) -> Result<()> {
            if ids.is_empty() {
                return Ok(());
            }
            let mut json: std::collections::HashMap<usize, String> = std::collections::HashMap::new();
            match snapshots {
                Some(specs) => {
                    for (position, spec) in specs.iter().enumerate() {
                        json.insert(position, rows::CandidateSnapshot::json(spec));
                    }
                }
                None => {
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(concat!(
                        "SELECT ",
                        rows::candidate_columns!(),
                        " FROM candidates WHERE id IN ("
                    ));
                    let mut list = qb.separated(", ");
                    for id in ids {
                        list.push_bind(*id);
                    }
                    qb.push(")");
                    let found: Vec<rows::CandidateRow> = qb.build_query_as().fetch_all(&mut **tx).await?;
                    for row in found {
                        let id = row.id;
                        let spec = row.into_spec_without_key(self.sealer())?;
                        for (position, _) in ids.iter().enumerate().filter(|(_, c)| **c == id) {
                            json.insert(position, rows::CandidateSnapshot::json(&spec));
                        }
                    }
                }
            }
            let mut qb =
                sqlx::QueryBuilder::<Db<Self>>::new("INSERT INTO run_candidates (run_id, candidate_id, position, snapshot) ");
            qb.push_values(ids.iter().enumerate(), |mut b, (position, id)| {
                b.push_bind(run_id)
                    .push_bind(*id)
                    .push_bind(position as i64)
                    .push_bind(json.remove(&position));
            });
            qb.build().execute(&mut **tx).await?;
            Ok(())
        }

        /// Inserts a new run, queued, with its candidates inside `tx`; returns its id.
        async fn insert_run(&self, tx: &mut sqlx::Transaction<'_, Db<Self>>, run: &NewRun, now: i64) -> Result<i64> {
            let run_id: i64 = sqlx::query_scalar(
                "INSERT INTO runs (name, evalset_version_id, config, status, created_at) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(&run.name)
            .bind(run.evalset_version_id)
            .bind(rows::run_config_json(&run.config))
            .bind(RunStatus::Queued.as_str())
            .bind(now)
            .fetch_one(&mut **tx)
            .await?;
            self.insert_run_candidates(tx, run_id, &run.candidate_ids, None)
                .await
                .map_err(archive::twice_listed)?;
            Ok(run_id)
        }

        /// Fills the snapshot of every run candidate stored before snapshots existed (migration
        /// 0013) from the candidate as it is now; returns how many were filled.
        pub(crate) async fn backfill_run_snapshots(&self) -> Result<u64> {
            let missing: Vec<rows::RunCandidateSnapshotRow> = sqlx::query_as(concat!(
                "SELECT rc.run_id, rc.snapshot, ",
                rows::candidate_columns!(),
                " FROM run_candidates rc JOIN candidates ON candidates.id = rc.candidate_id WHERE rc.snapshot IS NULL"
            ))
            .fetch_all(self.pool())
            .await?;
            let filled = missing.len() as u64;
            for row in missing {
                let run_id = row.run_id;
                let candidate = row.into_candidate(self.sealer())?;
                sqlx::query(
                    "UPDATE run_candidates SET snapshot = $3 WHERE run_id = $1 AND candidate_id = $2 AND snapshot IS NULL",
                )
                .bind(run_id)
                .bind(candidate.id)
                .bind(rows::CandidateSnapshot::json(&candidate.spec))
                .execute(self.pool())
                .await?;
            }
            if filled > 0 {
                tracing::info!(filled, "runs created before snapshots now keep their candidates as they are now");
            }
            Ok(filled)
        }

        /// List items for runs read with `rows::run_list_select!()`: each run with its candidates
        /// (ids and names, in the run's order).
        async fn run_list_items(&self, rows: Vec<rows::RunListRow>) -> Result<Vec<RunListItem>> {
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                "SELECT rc.run_id, rc.candidate_id, c.name, rc.snapshot FROM run_candidates rc \
                 JOIN candidates c ON c.id = rc.candidate_id WHERE rc.run_id IN (",
            );
            let mut ids = qb.separated(", ");
            for row in &rows {
                ids.push_bind(row.run.id);
            }
            qb.push(") ORDER BY rc.run_id, rc.position");
            let mut candidates = rows::group_run_candidates(qb.build_query_as().fetch_all(self.pool()).await?);
            rows.into_iter()
                .map(|row| {
                    let (candidate_ids, candidate_names) = candidates.remove(&row.run.id).unwrap_or_default();
                    Ok(RunListItem {
                        run: row.run.into_run(candidate_ids, Self::TEXT)?,
                        evalset_name: row.evalset_name,
                        candidate_names,
                        record_count: row.record_count,
                    })
                })
                .collect()
        }
    };
}
pub(crate) use run_helpers;

macro_rules! run_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, run), fields(name = %run.name))]
        fn create_run<'a>(&'a self, run: &'a NewRun) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                let inserted: Result<i64> = async {
                    let mut tx = self.begin_write().await?;
                    let run_id = self.insert_run(&mut tx, run, now).await?;
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
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn run_candidates(&self, run_id: i64) -> StoreFuture<'_, Vec<Candidate>> {
            Box::pin(async move {
                let rows: Vec<rows::RunCandidateSnapshotRow> = sqlx::query_as(concat!(
                    "SELECT rc.run_id, rc.snapshot, ",
                    rows::candidate_columns!(),
                    " FROM run_candidates rc JOIN candidates ON candidates.id = rc.candidate_id \
                     WHERE rc.run_id = $1 ORDER BY rc.position"
                ))
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter()
                    .map(|r| r.into_candidate(self.sealer()))
                    .collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_run(&self, id: i64) -> StoreFuture<'_, Option<Run>> {
            Box::pin(async move {
                let row: Option<rows::RunRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    rows::run_columns!(),
                    " FROM runs WHERE runs.id = $1"
                ))
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
                let Some(row) = row else { return Ok(None) };
                let candidate_ids: Vec<i64> =
                    sqlx::query_scalar("SELECT candidate_id FROM run_candidates WHERE run_id = $1 ORDER BY position")
                        .bind(id)
                        .fetch_all(self.pool())
                        .await?;
                row.into_run(candidate_ids, Self::TEXT).map(Some)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_runs(&self, limit: i64, offset: i64) -> StoreFuture<'_, Vec<RunListItem>> {
            Box::pin(async move {
                let rows: Vec<rows::RunListRow> = sqlx::query_as(concat!(
                    rows::run_list_select!(),
                    " ORDER BY runs.created_at DESC, runs.id DESC LIMIT $1 OFFSET $2"
                ))
                .bind(limit.max(0))
                .bind(offset.max(0))
                .fetch_all(self.pool())
                .await?;
                self.run_list_items(rows).await
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn count_runs(&self) -> StoreFuture<'_, i64> {
            Box::pin(async move {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM runs")
                    .fetch_one(self.pool())
                    .await?)
            })
        }
    };
}
pub(crate) use run_queries;

/// A run's status, harness report and event log.
macro_rules! run_state_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, error))]
        fn set_run_status<'a>(&'a self, id: i64, status: RunStatus, error: Option<&'a str>) -> StoreFuture<'a, ()> {
            Box::pin(async move {
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
                .bind(Self::TEXT.encode_opt(error))
                .bind(status == RunStatus::Running)
                .bind(status.is_terminal())
                .bind(now)
                .execute(self.pool())
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("run {id}")));
                }
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn unfinished_runs(&self) -> StoreFuture<'_, Vec<i64>> {
            Box::pin(async move {
                Ok(sqlx::query_scalar(
                    "SELECT id FROM runs WHERE status IN ('queued', 'running', 'paused') ORDER BY id",
                )
                .fetch_all(self.pool())
                .await?)
            })
        }

        #[tracing::instrument(level = "debug", skip(self, harness))]
        fn set_run_harness<'a>(&'a self, run_id: i64, harness: &'a HarnessReport) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let done = sqlx::query("UPDATE runs SET harness = $2 WHERE id = $1")
                    .bind(run_id)
                    .bind(rows::harness_json(harness))
                    .execute(self.pool())
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("run {run_id}")));
                }
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_run_harness(&self, run_id: i64) -> StoreFuture<'_, Option<HarnessReport>> {
            Box::pin(async move {
                let text: Option<Option<String>> = sqlx::query_scalar("SELECT harness FROM runs WHERE id = $1")
                    .bind(run_id)
                    .fetch_optional(self.pool())
                    .await?;
                text.flatten()
                    .map(|t| rows::parse_harness(run_id, &t))
                    .transpose()
            })
        }

        #[tracing::instrument(level = "debug", skip(self, message))]
        fn append_run_event<'a>(&'a self, run_id: i64, level: &'a str, message: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sqlx::query("INSERT INTO run_events (run_id, at, level, message) VALUES ($1, $2, $3, $4)")
                    .bind(run_id)
                    .bind(Timestamp::now().0)
                    .bind(level)
                    .bind(Self::TEXT.encode(message))
                    .execute(self.pool())
                    .await
                    .map_err(StoreError::from)
                    .map_err(|e| rows::not_found_on_foreign_key(e, || format!("run {run_id}")))?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_run_events(&self, run_id: i64) -> StoreFuture<'_, Vec<RunEvent>> {
            Box::pin(async move {
                let rows: Vec<rows::RunEventRow> =
                    sqlx::query_as("SELECT at, level, message FROM run_events WHERE run_id = $1 ORDER BY id")
                        .bind(run_id)
                        .fetch_all(self.pool())
                        .await?;
                Ok(rows.into_iter().map(|r| r.into_event(Self::TEXT)).collect())
            })
        }

        #[tracing::instrument(level = "debug", skip(self, search))]
        fn save_run_capacity<'a>(
            &'a self,
            run_id: i64,
            search: &'a crate::domain::capacity::CandidateCapacity,
        ) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let json = serde_json::to_string(search).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                sqlx::query(
                    "INSERT INTO run_capacity (run_id, candidate_id, search, updated_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (run_id, candidate_id) DO UPDATE SET search = excluded.search, \
                     updated_at = excluded.updated_at",
                )
                .bind(run_id)
                .bind(search.candidate_id)
                .bind(json)
                .bind(Timestamp::now().0)
                .execute(self.pool())
                .await
                .map_err(StoreError::from)
                .map_err(|e| rows::not_found_on_foreign_key(e, || format!("run {run_id}")))?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_run_capacity(&self, run_id: i64) -> StoreFuture<'_, Vec<crate::domain::capacity::CandidateCapacity>> {
            Box::pin(async move {
                let rows: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT c.candidate_id, c.search FROM run_capacity c LEFT JOIN run_candidates rc \
                     ON rc.run_id = c.run_id AND rc.candidate_id = c.candidate_id \
                     WHERE c.run_id = $1 ORDER BY rc.position, c.candidate_id",
                )
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter()
                    .map(|(candidate_id, text)| {
                        serde_json::from_str(&text).map_err(|e| {
                            StoreError::Corrupt(format!(
                                "run_capacity.search of run {run_id}, candidate {candidate_id}: {e}"
                            ))
                        })
                    })
                    .collect()
            })
        }
    };
}
pub(crate) use run_state_queries;
