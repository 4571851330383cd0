//! Eval set queries (versions are immutable), written once for both backends: `evalset_queries!`
//! expands to these `Store` methods in `store/mod.rs` (`impl_store!`), so its paths are written as
//! seen from there.

macro_rules! evalset_helpers {
    ($db:ty) => {
        /// Stores `file` as a version inside `tx` (see `save_evalset_version`); an identical
        /// version already stored is returned and nothing is written.
        async fn save_evalset_version_in(tx: &mut sqlx::Transaction<'_, $db>, file: &EvalSetFile) -> Result<i64> {
            let hash = file.content_hash();
            let header = &file.header;
            let now = Timestamp::now().0;

            sqlx::query(
                "INSERT INTO evalsets (name, task, description, created_at, updated_at) VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(&header.name)
            .bind(header.task.as_str())
            .bind(&header.description)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            let evalset_id: i64 = sqlx::query_scalar("SELECT id FROM evalsets WHERE name = $1")
                .bind(&header.name)
                .fetch_one(&mut **tx)
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
            .fetch_optional(&mut **tx)
            .await?;
            let Some(version_id) = inserted else {
                let existing: i64 =
                    sqlx::query_scalar("SELECT id FROM evalset_versions WHERE evalset_id = $1 AND content_hash = $2")
                        .bind(evalset_id)
                        .bind(&hash)
                        .fetch_one(&mut **tx)
                        .await?;
                return Ok(existing);
            };

            for chunk in rows::case_values(file).chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::<$db>::new(
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
                qb.build().execute(&mut **tx).await?;
            }

            // The set's task and description follow its newest version.
            sqlx::query("UPDATE evalsets SET task = $2, description = $3, updated_at = $4 WHERE id = $1")
                .bind(evalset_id)
                .bind(header.task.as_str())
                .bind(&header.description)
                .bind(now)
                .execute(&mut **tx)
                .await?;
            Ok(version_id)
        }
    };
}
pub(super) use evalset_helpers;

macro_rules! evalset_queries {
    ($db:ty) => {
        #[tracing::instrument(
            level = "debug",
            skip(self, file),
            fields(name = %file.header.name, cases = file.cases.len())
        )]
        fn save_evalset_version<'a>(&'a self, file: &'a EvalSetFile) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let version_id = Self::save_evalset_version_in(&mut tx, file).await?;
                tx.commit().await?;
                Ok(version_id)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_evalsets(&self) -> StoreFuture<'_, Vec<EvalSetSummary>> {
            Box::pin(async move {
                let rows: Vec<rows::EvalSetSummaryRow> = sqlx::query_as(
                    "SELECT e.id, e.name, e.task, e.description, e.updated_at, v.id AS latest_version_id, \
                     v.content_hash AS latest_hash, v.case_count, \
                     (SELECT COUNT(*) FROM evalset_versions c WHERE c.evalset_id = e.id) AS version_count \
                     FROM evalsets e \
                     JOIN evalset_versions v ON v.id = (SELECT MAX(id) FROM evalset_versions m WHERE m.evalset_id = e.id) \
                     ORDER BY e.name, e.id",
                )
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(rows::EvalSetSummaryRow::into_summary).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_evalset_version(&self, version_id: i64) -> StoreFuture<'_, Option<EvalSetVersion>> {
            Box::pin(async move {
                let row: Option<rows::EvalSetVersionRow> = sqlx::query_as(
                    "SELECT id, evalset_id, content_hash, content, created_at FROM evalset_versions WHERE id = $1",
                )
                .bind(version_id)
                .fetch_optional(self.pool())
                .await?;
                row.map(rows::EvalSetVersionRow::into_version).transpose()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_evalset_versions(&self, evalset_id: i64) -> StoreFuture<'_, Vec<EvalSetVersion>> {
            Box::pin(async move {
                let rows: Vec<rows::EvalSetVersionRow> = sqlx::query_as(
                    "SELECT id, evalset_id, content_hash, content, created_at FROM evalset_versions \
                     WHERE evalset_id = $1 ORDER BY id DESC",
                )
                .bind(evalset_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(rows::EvalSetVersionRow::into_version).collect()
            })
        }
    };
}
pub(super) use evalset_queries;
