//! Team settings and retired items (`team_settings`, `retired_items`), written once for both
//! backends: `setting_queries!` expands to these `Store` methods in `store/mod.rs`
//! (`impl_store!`), so its paths are written as seen from there.

macro_rules! setting_queries {
    ($db:ty) => {
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
    };
}
pub(super) use setting_queries;
