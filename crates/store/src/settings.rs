//! Team settings and retired items (`team_settings`, `retired_items`), written once for both
//! backends: `setting_queries!` expands to the methods of this aggregate's trait in `lib.rs`
//! (`impl_store!`), so its paths are written as seen from there.

macro_rules! setting_queries {
    () => {
        fn get_setting<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<String>> {
            Box::pin(async move {
                let value: Option<String> = sqlx::query_scalar("SELECT value FROM team_settings WHERE name = $1")
                    .bind(name)
                    .fetch_optional(self.pool())
                    .await?;
                Ok(value.map(|v| Self::TEXT.decode(v)))
            })
        }

        fn set_setting<'a>(&'a self, name: &'a str, value: &'a str, changed_by: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO team_settings (name, value, changed_by, changed_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (name) DO UPDATE SET value = excluded.value, \
                     changed_by = excluded.changed_by, changed_at = excluded.changed_at",
                )
                .bind(name)
                .bind(Self::TEXT.encode(value))
                .bind(Self::TEXT.encode(changed_by))
                .bind(Timestamp::now().0)
                .execute(self.pool())
                .await?;
                Ok(())
            })
        }

        fn retire_item<'a>(&'a self, kind: ItemKind, id: i64, retired_by: &'a str) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let done = sqlx::query(
                    "INSERT INTO retired_items (kind, item_id, retired_by, retired_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (kind, item_id) DO NOTHING",
                )
                .bind(kind.as_str())
                .bind(id)
                .bind(Self::TEXT.encode(retired_by))
                .bind(Timestamp::now().0)
                .execute(self.pool())
                .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn restore_item(&self, kind: ItemKind, id: i64) -> StoreFuture<'_, bool> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM retired_items WHERE kind = $1 AND item_id = $2")
                    .bind(kind.as_str())
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn list_retired(&self, kind: ItemKind) -> StoreFuture<'_, Vec<i64>> {
            Box::pin(async move {
                Ok(
                    sqlx::query_scalar("SELECT item_id FROM retired_items WHERE kind = $1 ORDER BY item_id")
                        .bind(kind.as_str())
                        .fetch_all(self.pool())
                        .await?,
                )
            })
        }

        fn delete_unused_item(&self, kind: ItemKind, id: i64) -> StoreFuture<'_, Option<String>> {
            Box::pin(async move {
                // What would lose its meaning with the item: runs (and their snapshots), saved
                // scorecards. Probe runs, checklists and automatic verdicts are the item's own.
                let (in_use, why, delete) = match kind {
                    ItemKind::Candidate => (
                        "SELECT (SELECT COUNT(*) FROM run_candidates WHERE candidate_id = $1) \
                              + (SELECT COUNT(*) FROM scorecards WHERE incumbent_candidate_id = $1)",
                        "runs or saved scorecards refer to it",
                        "DELETE FROM candidates WHERE id = $1",
                    ),
                    ItemKind::EvalSet => (
                        "SELECT COUNT(*) FROM runs r JOIN evalset_versions v ON v.id = r.evalset_version_id \
                         WHERE v.evalset_id = $1",
                        "runs measured one of its versions",
                        "DELETE FROM evalsets WHERE id = $1",
                    ),
                    ItemKind::ThresholdProfile => (
                        "SELECT COUNT(*) FROM scorecards WHERE profile_id = $1",
                        "saved scorecards were judged by it",
                        "DELETE FROM threshold_profiles WHERE id = $1",
                    ),
                };
                let mut tx = self.begin_write().await?;
                let users: i64 = sqlx::query_scalar(in_use).bind(id).fetch_one(&mut *tx).await?;
                if users > 0 {
                    tx.rollback().await?;
                    return Ok(Some(format!("{users} {why}")));
                }
                let done = sqlx::query(delete).bind(id).execute(&mut *tx).await?;
                if done.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Err(StoreError::NotFound(format!("{} {id}", kind.label())));
                }
                sqlx::query("DELETE FROM retired_items WHERE kind = $1 AND item_id = $2")
                    .bind(kind.as_str())
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(None)
            })
        }
    };
}
pub(crate) use setting_queries;
