//! Raw record queries (append-only records and their grades), written once for both backends:
//! `record_*_queries!` expand to the methods of `RecordStore` and `record_*_helpers!` to the
//! grade INSERT and the send-order reads they share, both in `lib.rs` (`impl_store!`), so their paths are written as seen from
//! there.

macro_rules! record_write_helpers {
    () => {
        /// Inserts records and their grades inside `tx`, skipping keys already stored (see
        /// `append_request_records`); returns how many were new.
        async fn append_request_records_in(
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            records: &[RequestRecord],
        ) -> Result<u64> {
            let first_by_key = rows::first_index_by_key(records);
            // (record id, index in `records`) for every record this call actually stored.
            let mut stored: Vec<(i64, usize)> = Vec::with_capacity(records.len());
            for chunk in records.chunks(rows::RECORDS_PER_STATEMENT) {
                // With the record's outcome and case score from its grades (what its outline reads).
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(concat!(
                    "INSERT INTO request_records (",
                    rows::record_insert_columns!(),
                    ", case_passed, case_score) "
                ));
                qb.push_values(chunk, |mut b, record| {
                    let v = rows::RecordValues::new(record, Self::TEXT);
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
                        .push_bind(v.error_detail)
                        .push_bind(v.chunk_attribution)
                        .push_bind(v.chunk_text)
                        .push_bind(v.clock)
                        .push_bind(v.content_reasoning)
                        .push_bind(v.rate_limit)
                        .push_bind(v.tool_turn)
                        .push_bind(v.turn)
                        .push_bind(v.cached_prompt_tokens)
                        .push_bind(v.cache_creation_tokens)
                        .push_bind(case_passed(&record.grades))
                        .push_bind(case_score(&record.grades));
                });
                qb.push(
                    " ON CONFLICT (run_id, candidate_id, case_id, phase, repetition, attempt) DO NOTHING \
                     RETURNING id, run_id, candidate_id, case_id, phase, repetition, attempt",
                );
                let inserted: Vec<rows::InsertedRecordRow> = qb.build_query_as().fetch_all(&mut **tx).await?;
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
            for chunk in grades.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                Self::insert_grades(chunk).build().execute(&mut **tx).await?;
            }
            Ok(stored.len() as u64)
        }

        /// `INSERT INTO grades … VALUES …` of these grades, for the caller to finish and run.
        fn insert_grades(grades: &[rows::GradeValues<'_>]) -> sqlx::QueryBuilder<Db<Self>> {
            let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                "INSERT INTO grades (request_record_id, position, grader, score, passed, reason, detail, weight, required) ",
            );
            qb.push_values(grades, |mut b, &(record_id, position, grade)| {
                b.push_bind(record_id)
                    .push_bind(position)
                    .push_bind(&*grade.grader)
                    .push_bind(grade.score)
                    .push_bind(grade.passed)
                    .push_bind(Self::TEXT.encode(grade.reason.as_str()))
                    .push_bind(grade.detail.as_ref().map(|d| d.to_string()))
                    .push_bind(grade.weight)
                    .push_bind(grade.required);
            });
            qb
        }
    };
}
pub(crate) use record_write_helpers;

/// Reading records a page at a time, in send order.
macro_rules! record_read_helpers {
    () => {
        /// Up to `limit` records of a run (of one candidate, when given) after position `after`
        /// (sent_at_us, id; None: from the first) in send order, each with its position: one
        /// page of the send-order keyset. Each page costs the same on the (run, sent_at_us, id)
        /// index; the `sent_at_us >= …` conjunct is what PostgreSQL bounds the index scan with
        /// (given only the OR it scanned the run from its first record: 364 ms a page at
        /// 900,000 records against 1.7 ms), and `candidate_id + 0` keeps both databases off the
        /// unique key's index, whose order would have each page sort all of a candidate's.
        async fn records_page(
            &self,
            run_id: i64,
            candidate_id: Option<i64>,
            after: Option<(i64, i64)>,
            limit: i64,
            shared: &mut rows::SharedTexts,
        ) -> Result<Vec<((i64, i64), RequestRecord)>> {
            let (sent, id) = after.unwrap_or((i64::MIN, i64::MIN));
            let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(concat!(
                "SELECT ",
                rows::record_select_columns!(),
                " FROM request_records WHERE run_id = "
            ));
            qb.push_bind(run_id)
                .push(" AND sent_at_us >= ")
                .push_bind(sent)
                .push(" AND (sent_at_us > ")
                .push_bind(sent)
                .push(" OR id > ")
                .push_bind(id)
                .push(")");
            if let Some(candidate_id) = candidate_id {
                qb.push(" AND candidate_id + 0 = ").push_bind(candidate_id);
            }
            qb.push(" ORDER BY sent_at_us, id LIMIT ").push_bind(limit);
            let rows: Vec<rows::RecordRow> = qb.build_query_as().fetch_all(self.pool()).await?;
            let positions: Vec<(i64, i64)> = rows.iter().map(|r| (r.sent_at_us, r.id)).collect();
            Ok(positions
                .into_iter()
                .zip(self.complete_records(rows, shared).await?)
                .collect())
        }

        /// Every record of a run (of one candidate, when given) with its grades, in send order,
        /// a page at a time (each page's grades and counts read after its records, all
        /// committed with them): every query answers within the bound on one answer, which a
        /// single read of a million records does not on PostgreSQL.
        async fn records_in_send_order(
            &self,
            run_id: i64,
            candidate_id: Option<i64>,
            mut for_summaries: rows::ForSummaries<'_>,
        ) -> Result<Vec<RequestRecord>> {
            // Sized by a count first (an index-only read): grown by doubling, a candidate's
            // 500,000 records held their old array beside the new one at the last doubling
            // (262,144 records of 400 bytes: ~100 MB more at its peak) and could end with most
            // of an array unused.
            let mut qb = sqlx::QueryBuilder::<Db<Self>>::new("SELECT COUNT(*) FROM request_records WHERE run_id = ");
            qb.push_bind(run_id);
            if let Some(candidate_id) = candidate_id {
                qb.push(" AND candidate_id = ").push_bind(candidate_id);
            }
            let count: i64 = qb.build_query_scalar().fetch_one(self.pool()).await?;
            let mut records: Vec<RequestRecord> = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
            let mut after = None;
            let mut shared = rows::SharedTexts::default();
            loop {
                let page = self
                    .records_page(run_id, candidate_id, after, rows::RECORDS_PER_READ, &mut shared)
                    .await?;
                let full = page.len() as i64 == rows::RECORDS_PER_READ;
                after = page.last().map(|(position, _)| *position);
                records.extend(page.into_iter().map(|(_, mut r)| {
                    // Cut page by page: a page's whole texts are the most ever held at once.
                    if let Some(step) = for_summaries.as_mut() {
                        r.cut_for_summaries();
                        step(&mut r);
                    }
                    r
                }));
                if !full {
                    return Ok(records);
                }
            }
        }
    };
}
pub(crate) use record_read_helpers;

macro_rules! record_write_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, records), fields(batch = records.len()))]
        fn append_request_records<'a>(&'a self, records: &'a [RequestRecord]) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                if records.is_empty() {
                    return Ok(0);
                }
                let appended: Result<u64> = async {
                    let mut tx = self.begin_write().await?;
                    let stored = Self::append_request_records_in(&mut tx, records).await?;
                    tx.commit().await?;
                    Ok(stored)
                }
                .await;
                appended.map_err(|e| {
                    rows::not_found_on_foreign_key(e, || {
                        "a record names a run, or a candidate of that run, that does not exist".to_string()
                    })
                })
            })
        }

        fn append_grades<'a>(
            &'a self,
            record: &'a RequestRecord,
            first_position: u32,
            grades: &'a [Grade],
        ) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                if grades.is_empty() {
                    return Ok(0);
                }
                // One write transaction (SQLite: BEGIN IMMEDIATE, so no read lock to upgrade): the
                // grades, then the record's outcome and case score from all of its grades.
                let mut tx = self.begin_write().await?;
                let id: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM request_records WHERE run_id = $1 AND candidate_id = $2 AND case_id = $3 \
                     AND phase = $4 AND repetition = $5 AND attempt = $6",
                )
                .bind(record.run_id)
                .bind(record.candidate_id)
                .bind(record.case_id.as_ref())
                .bind(record.phase.as_str())
                .bind(i64::from(record.repetition))
                .bind(i64::from(record.attempt))
                .fetch_optional(&mut *tx)
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
                let values: Vec<rows::GradeValues<'_>> = grades
                    .iter()
                    .enumerate()
                    .map(|(i, grade)| (id, i64::from(first_position) + i as i64, grade))
                    .collect();
                let mut qb = Self::insert_grades(&values);
                qb.push(" ON CONFLICT (request_record_id, position) DO NOTHING");
                let added = qb.build().execute(&mut *tx).await?.rows_affected();
                let figures: Vec<rows::GradeFigureRow> = sqlx::query_as(
                    "SELECT score, passed, weight, required FROM grades WHERE request_record_id = $1 ORDER BY position",
                )
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
                let all: Vec<Grade> = figures
                    .into_iter()
                    .map(rows::GradeFigureRow::into_grade)
                    .collect();
                sqlx::query("UPDATE request_records SET case_passed = $1, case_score = $2 WHERE id = $3")
                    .bind(case_passed(&all))
                    .bind(case_score(&all))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(added)
            })
        }
    };
}
pub(crate) use record_write_queries;

/// Reading records, their groups, span and progress.
macro_rules! record_read_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self))]
        fn list_request_records(&self, run_id: i64) -> StoreFuture<'_, Vec<RequestRecord>> {
            Box::pin(async move { self.records_in_send_order(run_id, None, None).await })
        }

        #[tracing::instrument(level = "debug", skip(self, each))]
        fn candidate_records_for_summaries<'a>(
            &'a self,
            run_id: i64,
            candidate_id: i64,
            each: &'a mut (dyn FnMut(&mut RequestRecord) + Send),
        ) -> StoreFuture<'a, Vec<RequestRecord>> {
            Box::pin(async move {
                self.records_in_send_order(run_id, Some(candidate_id), Some(each))
                    .await
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn record_groups(&self, run_id: i64, candidate_id: i64) -> StoreFuture<'_, Vec<RecordGroup>> {
            Box::pin(async move {
                let rows: Vec<rows::RecordGroupRow> = sqlx::query_as(
                    "SELECT phase, is_warmup, repetition, concurrency, COUNT(*) AS records FROM request_records \
                     WHERE run_id = $1 AND candidate_id = $2 GROUP BY phase, is_warmup, repetition, concurrency",
                )
                .bind(run_id)
                .bind(candidate_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|g| g.into_group(run_id, candidate_id)).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn measured_span(&self, run_id: i64) -> StoreFuture<'_, Option<(i64, i64)>> {
            Box::pin(async move {
                let span: (Option<i64>, Option<i64>) = sqlx::query_as(
                    "SELECT MIN(sent_at_us), MAX(sent_at_us + COALESCE(end_us, 0)) FROM request_records \
                     WHERE run_id = $1 AND NOT is_warmup",
                )
                .bind(run_id)
                .fetch_one(self.pool())
                .await?;
                Ok(span.0.zip(span.1))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn run_progress(&self, run_id: i64) -> StoreFuture<'_, Vec<CandidateProgress>> {
            Box::pin(async move {
                let rows: Vec<rows::ProgressRow> = sqlx::query_as(
                    "SELECT rc.candidate_id, \
                     COUNT(CASE WHEN NOT r.is_warmup THEN 1 END) AS measured_attempts, \
                     COUNT(CASE WHEN r.is_warmup AND r.phase <> 'judge' THEN 1 END) AS warmup_attempts, \
                     COUNT(CASE WHEN NOT r.is_warmup AND r.error_class IS NOT NULL THEN 1 END) AS failed_attempts \
                     FROM run_candidates rc \
                     LEFT JOIN request_records r ON r.run_id = rc.run_id AND r.candidate_id = rc.candidate_id \
                     WHERE rc.run_id = $1 GROUP BY rc.candidate_id, rc.position ORDER BY rc.position",
                )
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                Ok(rows.into_iter().map(CandidateProgress::from).collect())
            })
        }
    };
}
pub(crate) use record_read_queries;
