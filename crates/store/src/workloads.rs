//! Workload queries (versions are immutable, like eval sets'), written once for both backends:
//! `workload_queries!` expands to the methods of `WorkloadStore` in `lib.rs` (`impl_store!`), so
//! its paths are written as seen from there.

macro_rules! workload_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, file), fields(name = %file.header.name, requests = file.requests.len()))]
        fn save_workload_version<'a>(&'a self, file: &'a WorkloadFile) -> StoreFuture<'a, (i64, bool)> {
            Box::pin(async move {
                let hash = file.content_hash();
                let header = &file.header;
                let now = Timestamp::now().0;
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "INSERT INTO workloads (name, description, created_at, updated_at) VALUES ($1, $2, $3, $3) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(&header.name)
                .bind(&header.description)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                let workload_id: i64 = sqlx::query_scalar("SELECT id FROM workloads WHERE name = $1")
                    .bind(&header.name)
                    .fetch_one(&mut *tx)
                    .await?;
                let inserted: Option<i64> = sqlx::query_scalar(
                    "INSERT INTO workload_versions (workload_id, content_hash, content, request_count, duration_ms, \
                     source, keeps_text, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (workload_id, content_hash) DO NOTHING RETURNING id",
                )
                .bind(workload_id)
                .bind(&hash)
                .bind(file.normalised())
                .bind(file.requests.len() as i64)
                .bind(file.duration_ms())
                .bind(header.source.as_str())
                .bind(header.keeps_text)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(version_id) = inserted else {
                    // Same content as a stored version: that version, and nothing changes.
                    let existing: i64 = sqlx::query_scalar(
                        "SELECT id FROM workload_versions WHERE workload_id = $1 AND content_hash = $2",
                    )
                    .bind(workload_id)
                    .bind(&hash)
                    .fetch_one(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    return Ok((existing, false));
                };
                sqlx::query("UPDATE workloads SET description = $2, updated_at = $3 WHERE id = $1")
                    .bind(workload_id)
                    .bind(&header.description)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok((version_id, true))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_workloads(&self) -> StoreFuture<'_, Vec<WorkloadListItem>> {
            Box::pin(async move {
                let rows: Vec<(i64, String, String, i64, i64, i64, i64, f64, String, bool, i64)> = sqlx::query_as(
                    "SELECT w.id, w.name, w.description, w.updated_at, v.id, \
                     (SELECT COUNT(*) FROM workload_versions c WHERE c.workload_id = w.id), \
                     v.request_count, v.duration_ms, v.source, v.keeps_text, v.created_at \
                     FROM workloads w \
                     JOIN workload_versions v ON v.id = (SELECT MAX(id) FROM workload_versions m WHERE m.workload_id = w.id) \
                     ORDER BY w.name, w.id",
                )
                .fetch_all(self.pool())
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, name, description, updated_at, latest, versions, requests, duration_ms, source, keeps_text, created)| {
                        WorkloadListItem {
                            id,
                            name,
                            description,
                            latest_version_id: latest,
                            version_count: versions.max(0) as usize,
                            latest: WorkloadVersionLink {
                                id: latest,
                                content_hash: String::new(),
                                requests: requests.max(0) as usize,
                                duration_ms,
                                source,
                                keeps_text,
                                created_at: Timestamp(created),
                            },
                            updated_at: Timestamp(updated_at),
                        }
                    })
                    .collect())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_workload_versions(&self, workload_id: i64) -> StoreFuture<'_, Vec<WorkloadVersionLink>> {
            Box::pin(async move {
                let rows: Vec<(i64, String, i64, f64, String, bool, i64)> = sqlx::query_as(
                    "SELECT id, content_hash, request_count, duration_ms, source, keeps_text, created_at \
                     FROM workload_versions WHERE workload_id = $1 ORDER BY id DESC",
                )
                .bind(workload_id)
                .fetch_all(self.pool())
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, content_hash, requests, duration_ms, source, keeps_text, created_at)| WorkloadVersionLink {
                        id,
                        content_hash,
                        requests: requests.max(0) as usize,
                        duration_ms,
                        source,
                        keeps_text,
                        created_at: Timestamp(created_at),
                    })
                    .collect())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_workload_version(&self, version_id: i64) -> StoreFuture<'_, Option<WorkloadVersion>> {
            Box::pin(async move {
                let row: Option<(i64, i64, String, String, i64)> = sqlx::query_as(
                    "SELECT id, workload_id, content_hash, content, created_at FROM workload_versions WHERE id = $1",
                )
                .bind(version_id)
                .fetch_optional(self.pool())
                .await?;
                let Some((id, workload_id, content_hash, content, created_at)) = row else {
                    return Ok(None);
                };
                let place = format!("workload_versions.content of version {id}");
                let file = WorkloadFile::parse(&place, &content).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok(Some(WorkloadVersion {
                    id,
                    workload_id,
                    content_hash,
                    file,
                    created_at: Timestamp(created_at),
                }))
            })
        }

        #[tracing::instrument(level = "debug", skip(self, sends), fields(n = sends.len()))]
        fn save_replay_sends<'a>(&'a self, run_id: i64, sends: &'a [ReplaySend]) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                if sends.is_empty() {
                    return Ok(());
                }
                let mut tx = self.begin_write().await?;
                for batch in sends.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                        "INSERT INTO run_replay_sends (run_id, candidate_id, request_index, segment, due_offset_us, \
                         sent_offset_us, input_tokens_recorded, input_tokens_sent, output_tokens_recorded, \
                         max_tokens_sent) ",
                    );
                    qb.push_values(batch, |mut row, s| {
                        row.push_bind(run_id)
                            .push_bind(s.candidate_id)
                            .push_bind(i64::from(s.request_index))
                            .push_bind(i64::from(s.segment))
                            .push_bind(s.due_offset_us)
                            .push_bind(s.sent_offset_us)
                            .push_bind(i64::from(s.input_tokens_recorded))
                            .push_bind(i64::from(s.input_tokens_sent))
                            .push_bind(i64::from(s.output_tokens_recorded))
                            .push_bind(i64::from(s.max_tokens_sent));
                    });
                    // A request sent again after a restart replaces its row.
                    qb.push(
                        " ON CONFLICT (run_id, candidate_id, request_index) DO UPDATE SET segment = excluded.segment, \
                         due_offset_us = excluded.due_offset_us, sent_offset_us = excluded.sent_offset_us, \
                         input_tokens_recorded = excluded.input_tokens_recorded, \
                         input_tokens_sent = excluded.input_tokens_sent, \
                         output_tokens_recorded = excluded.output_tokens_recorded, \
                         max_tokens_sent = excluded.max_tokens_sent",
                    );
                    qb.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_replay_sends(&self, run_id: i64) -> StoreFuture<'_, Vec<ReplaySend>> {
            Box::pin(async move {
                type Row = (i64, i64, i64, i64, i64, i64, i64, i64, i64);
                let rows: Vec<Row> = sqlx::query_as(
                    "SELECT candidate_id, request_index, segment, due_offset_us, sent_offset_us, \
                     input_tokens_recorded, input_tokens_sent, output_tokens_recorded, max_tokens_sent \
                     FROM run_replay_sends WHERE run_id = $1 ORDER BY candidate_id, request_index",
                )
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                let n = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
                Ok(rows
                    .into_iter()
                    .map(|(c, i, seg, due, sent, ir, is, or, mt)| ReplaySend {
                        candidate_id: c,
                        request_index: n(i),
                        segment: n(seg),
                        due_offset_us: due,
                        sent_offset_us: sent,
                        input_tokens_recorded: n(ir),
                        input_tokens_sent: n(is),
                        output_tokens_recorded: n(or),
                        max_tokens_sent: n(mt),
                    })
                    .collect())
            })
        }
    };
}
pub(crate) use workload_queries;
