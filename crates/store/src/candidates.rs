//! Candidate queries, written once for both backends (see `store`): `candidate_queries!`
//! expands to the methods of `CandidateStore` in `lib.rs`, so its paths are written as
//! seen from there.

/// Binds a candidate spec's 32 column values, in `rows::CandidateValues` order, to a query
/// (`sqlx::query` or `sqlx::query_scalar`): the one place the INSERT and the UPDATE share. The
/// key is sealed for candidate `$id` (None: the INSERT, whose key is written once the id is known).
macro_rules! bind_candidate {
    ($query:expr, $spec:expr, $sealer:expr, $id:expr) => {{
        let v = rows::CandidateValues::new($spec, $sealer, $id);
        $query
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
            .bind(v.tls_ca_file)
            .bind(v.reasoning_in_content)
            .bind(v.headers)
            .bind(v.metrics_url)
            .bind(v.gpu_metrics_url)
            .bind(v.gpu_count)
            .bind(v.gpu_kind)
            .bind(v.gpu_hour_price)
            .bind(v.metrics_keep)
            .bind(v.price_cached_input_per_mtok)
            .bind(v.price_cache_write_per_mtok)
    }};
}
pub(crate) use bind_candidate;

macro_rules! candidate_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self))]
        fn list_candidates(&self) -> StoreFuture<'_, Vec<Candidate>> {
            Box::pin(async move {
                let rows: Vec<rows::CandidateRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    rows::candidate_columns!(),
                    // Prompt-mode variants are a run's, not the team's: not listed.
                    " FROM candidates WHERE prompt_mode_of IS NULL ORDER BY name, id"
                ))
                .fetch_all(self.pool())
                .await?;
                rows.into_iter()
                    .map(|r| r.into_candidate(self.sealer()))
                    .collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_candidate(&self, id: i64) -> StoreFuture<'_, Option<Candidate>> {
            Box::pin(async move {
                let row: Option<rows::CandidateRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    rows::candidate_columns!(),
                    " FROM candidates WHERE id = $1"
                ))
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
                row.map(|r| r.into_candidate(self.sealer())).transpose()
            })
        }

        #[tracing::instrument(level = "debug", skip(self, candidate), fields(name = %candidate.spec().name))]
        fn create_candidate<'a>(&'a self, candidate: &'a NewCandidate) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let id = self.create_candidate_in(&mut tx, candidate).await?;
                tx.commit().await?;
                Ok(id)
            })
        }

        #[tracing::instrument(level = "debug", skip(self, change), fields(name = %change.spec().name))]
        fn update_candidate<'a>(&'a self, change: &'a CandidateChange) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                self.update_candidate_in(&mut tx, change.id(), change.spec())
                    .await?;
                tx.commit().await?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self, variant), fields(name = %variant.spec().name))]
        fn prompt_mode_variant<'a>(&'a self, of: i64, variant: &'a NewCandidate) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                let existing: Option<i64> = sqlx::query_scalar("SELECT id FROM candidates WHERE prompt_mode_of = $1")
                    .bind(of)
                    .fetch_optional(&mut *tx)
                    .await?;
                let id = match existing {
                    Some(id) => {
                        self.update_candidate_in(&mut tx, id, variant.spec()).await?;
                        id
                    }
                    None => {
                        let id = self.create_candidate_in(&mut tx, variant).await?;
                        sqlx::query("UPDATE candidates SET prompt_mode_of = $2 WHERE id = $1")
                            .bind(id)
                            .bind(of)
                            .execute(&mut *tx)
                            .await?;
                        id
                    }
                };
                tx.commit().await?;
                Ok(id)
            })
        }
    };
}
pub(crate) use candidate_queries;

/// Candidate work outside the `Store` trait.
macro_rules! candidate_helpers {
    () => {
        /// Writes `spec` over candidate `id` in `tx` (its key and secret headers sealed for
        /// `id`); Conflict when the new name is taken, NotFound when there is no such candidate.
        async fn update_candidate_in(
            &self,
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            id: i64,
            spec: &crate::domain::candidate::CandidateSpec,
        ) -> Result<()> {
            let now = Timestamp::now().0;
            let query = sqlx::query(
                "UPDATE candidates SET name = $2, provider = $3, base_url = $4, model = $5, api_key = $6, \
                 api_key_env = $7, max_tokens = $8, temperature = $9, extra_body = $10, hardware = $11, \
                 framework = $12, quantization = $13, context_length = $14, price_input_per_mtok = $15, \
                 price_output_per_mtok = $16, claimed_tokens_per_second = $17, claimed_caliber = $18, \
                 claimed_conditions = $19, notes = $20, tokenize_kind = $21, tokenize_path = $22, \
                 tls_ca_file = $23, reasoning_in_content = $24, headers = $25, metrics_url = $26, \
                 gpu_metrics_url = $27, gpu_count = $28, gpu_kind = $29, gpu_hour_price = $30, \
                 metrics_keep = $31, price_cached_input_per_mtok = $32, price_cache_write_per_mtok = $33, \
                 updated_at = $34 WHERE id = $1",
            )
            .bind(id);
            let done = candidates::bind_candidate!(query, spec, self.sealer(), Some(id))
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(|e| rows::conflict_on_unique(e, || rows::candidate_name_taken(&spec.name)))?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound(format!("candidate {id}")));
            }
            Ok(())
        }

        /// Inserts a checked candidate in `tx`; Conflict when the name is taken. Its key is sealed
        /// for the new row's id, so it is written once the row exists.
        async fn create_candidate_in(&self, tx: &mut sqlx::Transaction<'_, Db<Self>>, candidate: &NewCandidate) -> Result<i64> {
            let spec = candidate.spec();
            let now = Timestamp::now().0;
            let query = sqlx::query_scalar(
                "INSERT INTO candidates (name, provider, base_url, model, api_key, api_key_env, max_tokens, \
                 temperature, extra_body, hardware, framework, quantization, context_length, \
                 price_input_per_mtok, price_output_per_mtok, claimed_tokens_per_second, claimed_caliber, \
                 claimed_conditions, notes, tokenize_kind, tokenize_path, tls_ca_file, reasoning_in_content, headers, \
                 metrics_url, gpu_metrics_url, gpu_count, gpu_kind, gpu_hour_price, metrics_keep, \
                 price_cached_input_per_mtok, price_cache_write_per_mtok, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, \
                 $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $33) RETURNING id",
            );
            let id: i64 = candidates::bind_candidate!(query, spec, self.sealer(), None)
                .bind(now)
                .fetch_one(&mut **tx)
                .await
                .map_err(|e| rows::conflict_on_unique(e, || rows::candidate_name_taken(&spec.name)))?;
            if let Some(key) = &spec.api_key {
                sqlx::query("UPDATE candidates SET api_key = $2 WHERE id = $1")
                    .bind(id)
                    .bind(self.sealer().seal_for(id, key.expose()))
                    .execute(&mut **tx)
                    .await?;
            }
            // Secret headers, like the key, are sealed for the row's id.
            if spec.wire.secrets().next().is_some() {
                sqlx::query("UPDATE candidates SET headers = $2 WHERE id = $1")
                    .bind(id)
                    .bind(rows::stored_headers(spec, self.sealer(), Some(id)))
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(id)
        }

        /// Seals API keys stored in plaintext by versions before sealing, and re-seals keys
        /// sealed before they were bound to their candidate (`sealed:v1:`), each for its own row;
        /// returns how many.
        pub(crate) async fn seal_plaintext_keys(&self) -> Result<u64> {
            let stored: Vec<(i64, String)> = sqlx::query_as(
                "SELECT id, api_key FROM candidates WHERE api_key IS NOT NULL AND api_key NOT LIKE 'sealed:v2:%'",
            )
            .fetch_all(self.pool())
            .await?;
            for (id, value) in &stored {
                let plain = if crate::domain::sealed::is_sealed(value) {
                    self.sealer().open_v1(value).map_err(|e| {
                        StoreError::Key(format!(
                            "candidates.api_key of candidate {id}: {e}; start bakeoff with the server key it was sealed with (BAKEOFF_SECRET_KEY or its key file)"
                        ))
                    })?
                } else {
                    value.clone()
                };
                sqlx::query("UPDATE candidates SET api_key = $2 WHERE id = $1 AND api_key = $3")
                    .bind(id)
                    .bind(self.sealer().seal_for(*id, &plain))
                    .bind(value)
                    .execute(self.pool())
                    .await?;
            }
            if !stored.is_empty() {
                tracing::info!(
                    sealed = stored.len(),
                    "API keys stored in plaintext or sealed without their candidate are now sealed for their candidate"
                );
            }
            Ok(stored.len() as u64)
        }
    };
}
pub(crate) use candidate_helpers;
