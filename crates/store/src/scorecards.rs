//! Archived scorecard queries, written once for both backends: `scorecard_queries!` expands to
//! the methods of this aggregate's trait in `lib.rs` (`impl_store!`), so its paths are written as seen from
//! there. Saving a scorecard also replaces the run's verdicts by its profile (`verdicts.rs`).

macro_rules! scorecard_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, scorecard), fields(run_id = scorecard.run_id))]
        fn save_scorecard<'a>(&'a self, scorecard: &'a NewScorecard) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let (pipeline, verdicts) = rows::scorecard_json(scorecard);
                let mut tx = self.begin().await?;
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
                .bind(Self::TEXT.encode(&scorecard.note))
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
                Self::replace_verdicts(
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
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_scorecard(&self, id: i64) -> StoreFuture<'_, Option<ScorecardRecord>> {
            Box::pin(async move {
                let row: Option<rows::ScorecardRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    rows::scorecard_columns!(),
                    " FROM scorecards WHERE scorecards.id = $1"
                ))
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
                row.map(|r| r.into_record(Self::TEXT)).transpose()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_scorecards(&self, limit: i64, offset: i64) -> StoreFuture<'_, Vec<ScorecardListItem>> {
            Box::pin(async move {
                let rows: Vec<rows::ScorecardListRow> = sqlx::query_as(concat!(
                    rows::scorecard_list_select!(),
                    " ORDER BY scorecards.created_at DESC, scorecards.id DESC LIMIT $1 OFFSET $2"
                ))
                .bind(limit.max(0))
                .bind(offset.max(0))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_item(Self::TEXT)).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn count_scorecards(&self) -> StoreFuture<'_, i64> {
            Box::pin(async move {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM scorecards")
                    .fetch_one(self.pool())
                    .await?)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_run_scorecards(&self, run_id: i64) -> StoreFuture<'_, Vec<ScorecardListItem>> {
            Box::pin(async move {
                let rows: Vec<rows::ScorecardListRow> = sqlx::query_as(concat!(
                    rows::scorecard_list_select!(),
                    " WHERE scorecards.run_id = $1 ORDER BY scorecards.created_at DESC, scorecards.id DESC"
                ))
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_item(Self::TEXT)).collect()
            })
        }
    };
}
pub(crate) use scorecard_queries;
