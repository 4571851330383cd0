//! Threshold profile queries (each save is a new version, history kept), written once for both
//! backends: `profile_queries!` expands to the methods of this aggregate's trait in `lib.rs` (`impl_store!`),
//! so its paths are written as seen from there.

macro_rules! profile_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, description, rules, slo, rationale), fields(rules = rules.len()))]
        fn save_threshold_profile_with_slo<'a>(
            &'a self,
            name: &'a str,
            description: &'a str,
            rules: &'a [ThresholdRule],
            slo: Option<&'a crate::domain::run::Slo>,
            changed_by: &'a str,
            rationale: &'a str,
        ) -> StoreFuture<'a, (i64, u32)> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                let mut tx = self.begin_write().await?;
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
                     (profile_id, version, description, rules, changed_by, rationale, at, slo) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(profile_id)
                .bind(version)
                .bind(description)
                .bind(rows::rules_json(rules))
                .bind(changed_by)
                .bind(rationale)
                .bind(now)
                .bind(slo.map(rows::to_json))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                let version = u32::try_from(version)
                    .map_err(|_| StoreError::Corrupt(format!("threshold profile {profile_id}: version {version}")))?;
                Ok((profile_id, version))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_threshold_profiles(&self) -> StoreFuture<'_, Vec<ThresholdProfile>> {
            Box::pin(async move {
                let rows: Vec<rows::ProfileRow> = sqlx::query_as(
                    "SELECT p.id, p.name, p.description, v.version, v.rules, v.slo FROM threshold_profiles p \
                     JOIN threshold_profile_versions v ON v.profile_id = p.id AND v.version = p.current_version \
                     ORDER BY p.name, p.id",
                )
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(rows::ProfileRow::into_profile).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn threshold_profile_history(&self, profile_id: i64) -> StoreFuture<'_, Vec<ProfileChange>> {
            Box::pin(async move {
                let rows: Vec<rows::ProfileChangeRow> = sqlx::query_as(
                    "SELECT profile_id, version, changed_by, rationale, rules, slo, at FROM threshold_profile_versions \
                     WHERE profile_id = $1 ORDER BY version DESC",
                )
                .bind(profile_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(rows::ProfileChangeRow::into_change).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_threshold_profile(&self, profile_id: i64, version: Option<u32>)
        -> StoreFuture<'_, Option<ThresholdProfile>> {
            Box::pin(async move {
                let row: Option<rows::ProfileVersionRow> = sqlx::query_as(
                    "SELECT p.id, p.name, v.description, v.version, v.rules, v.slo FROM threshold_profiles p \
                     JOIN threshold_profile_versions v ON v.profile_id = p.id \
                     AND v.version = COALESCE($2, p.current_version) WHERE p.id = $1",
                )
                .bind(profile_id)
                .bind(version.map(i64::from))
                .fetch_optional(self.pool())
                .await?;
                row.map(rows::ProfileVersionRow::into_profile).transpose()
            })
        }
    };
}
pub(crate) use profile_queries;
