//! Archive, drill-down and export/import queries, written once for both backends: the SQL is
//! portable between the two (booleans compare with `NOT x`, aggregates are cast to BIGINT).
//! The `*_queries!` macros expand to the methods of `ArchiveStore` and the `*_helpers!` to the
//! reads, run filter and import steps they share, both in `lib.rs` (`impl_store!`), so their paths are written as seen from
//! there.
use super::rows::SharedTexts;
use super::{RecordFact, RecordOutline, Result, StoreError};
use crate::domain::run::{ErrorClass, Phase};

/// Stores a run's summary of a kind, replacing the one stored before ($1 run, $2 kind, $3 body,
/// $4 when): on its own, and with the run's cases in one transaction.
pub(crate) const SAVE_RUN_SUMMARY: &str = "INSERT INTO run_summaries (run_id, kind, body, created_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (run_id, kind) DO UPDATE SET body = excluded.body, created_at = excluded.created_at";

/// A record's fact as stored (its `passed` is the outcome kept on it, `case_passed`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct FactRow {
    candidate_id: i64,
    case_id: String,
    phase: String,
    repetition: i64,
    attempt: i64,
    is_warmup: bool,
    error_class: Option<String>,
}

impl FactRow {
    pub(crate) fn into_fact(self, passed: Option<bool>, shared: &mut SharedTexts) -> Result<RecordFact> {
        let place = |what: &str| format!("request_records.{what} of a record of case {:?}", self.case_id);
        let bad = |what: &str, value: &str| StoreError::Corrupt(format!("{}: {value:?} is not valid", place(what)));
        Ok(RecordFact {
            candidate_id: self.candidate_id,
            phase: Phase::parse(&self.phase).ok_or_else(|| bad("phase", &self.phase))?,
            repetition: u32::try_from(self.repetition).map_err(|_| bad("repetition", &self.repetition.to_string()))?,
            attempt: u32::try_from(self.attempt).map_err(|_| bad("attempt", &self.attempt.to_string()))?,
            is_warmup: self.is_warmup,
            error_class: match self.error_class.as_deref() {
                None => None,
                Some(s) => Some(ErrorClass::parse(s).ok_or_else(|| bad("error_class", s))?),
            },
            passed,
            case_id: shared.of(self.case_id),
        })
    }
}

/// A record's fact with its place in send order.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct PlacedFactRow {
    pub(crate) id: i64,
    pub(crate) sent_at_us: i64,
    #[sqlx(flatten)]
    fact: FactRow,
    /// The record's outcome and case score, written from its grades (`grading::case_passed`,
    /// `grading::case_score`).
    case_passed: Option<bool>,
    case_score: Option<f64>,
}

impl PlacedFactRow {
    pub(crate) fn into_outline(self, shared: &mut SharedTexts) -> Result<RecordOutline> {
        Ok(RecordOutline {
            id: self.id,
            fact: self.fact.into_fact(self.case_passed, shared)?,
            score: self.case_score,
        })
    }
}

/// The columns of a [`PlacedFactRow`], for reads from `request_records`.
macro_rules! placed_fact_columns {
    () => {
        "id, sent_at_us, candidate_id, case_id, phase, repetition, attempt, is_warmup, error_class, case_passed, case_score"
    };
}
pub(crate) use placed_fact_columns;

/// The read of outlines: every column in the `request_records_outline_by_case` index, so a page
/// of cases is read from the index alone (migration 0025).
pub const OUTLINE_SELECT: &str = concat!("SELECT ", placed_fact_columns!(), " FROM request_records");

/// A run listing one candidate twice breaks `run_candidates`' key: said as a Conflict.
pub(crate) fn twice_listed(e: StoreError) -> StoreError {
    match e {
        StoreError::Database(e) => {
            super::rows::conflict_on_unique(e, || "the run lists the same candidate twice".to_string())
        }
        other => other,
    }
}

/// The error a restored run carries until its import completes.
pub const IMPORT_INCOMPLETE: &str = "import did not complete: delete this run and import it again";

macro_rules! archive_read_helpers {
    () => {
        /// `select` (`SELECT … FROM request_records`) of the records of `case_ids` in run
        /// `run_id`, unsorted: an ORDER BY lets SQLite pick the (run, send time) index and scan
        /// every record of the run instead of looking the cases up, so callers sort.
        fn case_records_query(select: &'static str, run_id: i64, case_ids: &[String]) -> sqlx::QueryBuilder<Db<Self>> {
            let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(select);
            qb.push(" WHERE run_id = ").push_bind(run_id).push(" AND case_id IN (");
            let mut ids = qb.separated(", ");
            for id in case_ids {
                ids.push_bind(id.as_str());
            }
            qb.push(")");
            qb
        }

        /// Record rows with their grades and server token counts, in the rows' order. Grades
        /// are read by the rows' ids (an index lookup each), not by a join the planner might
        /// start from the whole grades table.
        async fn complete_records(
            &self,
            records: Vec<rows::RecordRow>,
            shared: &mut rows::SharedTexts,
        ) -> Result<Vec<RequestRecord>> {
            let ids: Vec<i64> = records.iter().map(|r| r.id).collect();
            let mut grades: Vec<rows::GradeRow> = Vec::new();
            for chunk in ids.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                    "SELECT g.request_record_id, g.grader, g.score, g.passed, g.reason, g.detail, g.weight, g.required FROM grades g \
                     WHERE g.request_record_id IN (",
                );
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                qb.push(") ORDER BY g.request_record_id, g.position");
                grades.extend(qb.build_query_as::<rows::GradeRow>().fetch_all(self.pool()).await?);
            }
            let counts = self.counts_for_records(&ids).await?;
            let mut records = rows::attach_grades(records, grades, Self::TEXT, shared)?;
            token_counts::attach_counts(&ids, &mut records, &counts);
            Ok(records)
        }

        /// Outlines of `records`, in send order.
        fn outlines_of(mut records: Vec<archive::PlacedFactRow>, shared: &mut rows::SharedTexts) -> Result<Vec<RecordOutline>> {
            records.sort_by_key(|r| (r.sent_at_us, r.id));
            records.into_iter().map(|r| r.into_outline(shared)).collect()
        }

        /// Appends `WHERE …` for `f` to a query over `runs` joined with `evalset_versions v`.
        fn push_filter(qb: &mut sqlx::QueryBuilder<Db<Self>>, f: &RunFilter) {
            qb.push(" WHERE 1 = 1");
            if let Some(id) = f.evalset_id {
                qb.push(" AND v.evalset_id = ").push_bind(id);
            }
            if let Some(id) = f.candidate_id {
                qb.push(" AND EXISTS (SELECT 1 FROM run_candidates fc WHERE fc.run_id = runs.id AND fc.candidate_id = ")
                    .push_bind(id)
                    .push(")");
            }
            if let Some(status) = f.status {
                qb.push(" AND runs.status = ").push_bind(status.as_str());
            }
            if f.terminal_only {
                qb.push(" AND runs.status IN ('finished', 'failed', 'cancelled')");
            }
            if let Some(from) = f.created_from {
                qb.push(" AND runs.created_at >= ").push_bind(from.0);
            }
            if let Some(before) = f.created_before {
                qb.push(" AND runs.created_at < ").push_bind(before.0);
            }
            if f.profile_id.is_some() || f.verdict.is_some() {
                // One indexed lookup per run (run_verdicts' key starts with run_id).
                qb.push(" AND EXISTS (SELECT 1 FROM run_verdicts rv WHERE rv.run_id = runs.id");
                if let Some(id) = f.profile_id {
                    qb.push(" AND rv.profile_id = ").push_bind(id);
                }
                if let Some(verdict) = f.verdict {
                    qb.push(" AND rv.verdict = ").push_bind(verdict.as_str());
                }
                if let Some(id) = f.candidate_id {
                    qb.push(" AND rv.candidate_id = ").push_bind(id);
                }
                qb.push(")");
            }
            if f.measured_here {
                qb.push(" AND runs.import_hash IS NULL");
            }
            if let Some(id) = f.not_judged_by {
                // NOT IN over one profile's run ids: hashed once by either database, where a
                // correlated NOT EXISTS on a fresh PostgreSQL table (no statistics) may be
                // planned as a scan per run.
                qb.push(" AND runs.status = 'finished' AND runs.id NOT IN (SELECT nj.run_id FROM run_verdicts nj WHERE nj.profile_id = ")
                    .push_bind(id)
                    .push(")");
            }
        }
    };
}
pub(crate) use archive_read_helpers;

/// An import's steps inside its transaction: the run, then its records.
macro_rules! import_helpers {
    () => {
        /// Appends events with their original times to a run's log inside `tx`.
        async fn insert_run_events(tx: &mut sqlx::Transaction<'_, Db<Self>>, run_id: i64, events: &[RunEvent]) -> Result<()> {
            for chunk in events.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new("INSERT INTO run_events (run_id, at, level, message) ");
                qb.push_values(chunk, |mut b, e| {
                    b.push_bind(run_id)
                        .push_bind(e.at.0)
                        .push_bind(e.level.as_str())
                        .push_bind(Self::TEXT.encode(e.message.as_str()));
                });
                qb.build().execute(&mut **tx).await?;
            }
            Ok(())
        }

        /// `import_run` inside one transaction; any error rolls all of it back (the caller drops
        /// `tx`), and so does an outcome other than Imported. The content hash covers the
        /// records, so an earlier import of the same content is looked for at the end.
        async fn import_run_in(
            &self,
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            import: &RunImport,
            parts: &mut tokio::sync::mpsc::Receiver<ImportPart>,
        ) -> Result<ImportOutcome> {
            let (run_id, candidate_ids) = self.insert_imported_run(tx, import).await?;
            let Some(end) = Self::receive_imported_records(tx, parts, run_id, &candidate_ids).await? else {
                return Ok(ImportOutcome::Incomplete);
            };
            if let Some(earlier) = self.claim_import_hash(tx, run_id, &end.content_hash).await? {
                return Ok(ImportOutcome::AlreadyImported(earlier));
            }
            Self::finish_import(tx, run_id, &candidate_ids, &end, import.harness.as_ref()).await?;
            Ok(ImportOutcome::Imported(run_id))
        }

        /// An import's eval-set version, new candidates, run, run candidates and events;
        /// returns the run's id and its candidates' ids in order.
        async fn insert_imported_run(
            &self,
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            import: &RunImport,
        ) -> Result<(i64, Vec<i64>)> {
            let version_id = Self::save_evalset_version_in(tx, &import.evalset).await?;
            let mut candidate_ids = Vec::with_capacity(import.candidates.len());
            for c in &import.candidates {
                candidate_ids.push(match &c.stored {
                    ImportedAs::Existing(id) => *id,
                    ImportedAs::New(candidate) => self.create_candidate_in(tx, candidate).await?,
                });
            }
            let r = &import.restored;
            let run_id: i64 = sqlx::query_scalar(
                "INSERT INTO runs (name, evalset_version_id, config, status, error, created_at, started_at, finished_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(&r.run.name)
            .bind(version_id)
            .bind(rows::run_config_json(&r.run.config))
            .bind(r.status.as_str())
            .bind(Self::TEXT.encode_opt(r.error.as_deref()))
            .bind(r.created_at.0)
            .bind(r.started_at.map(|t| t.0))
            .bind(r.finished_at.map(|t| t.0))
            .fetch_one(&mut **tx)
            .await?;
            let snapshots: Vec<CandidateSpec> = import.candidates.iter().map(|c| c.spec.clone()).collect();
            self.insert_run_candidates(tx, run_id, &candidate_ids, Some(&snapshots))
                .await
                .map_err(archive::twice_listed)?;
            Self::insert_run_events(tx, run_id, &r.events).await?;
            Ok((run_id, candidate_ids))
        }

        /// Stores the records `parts` brings, on the run's candidates, until its end; None when
        /// it closes before.
        async fn receive_imported_records(
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            parts: &mut tokio::sync::mpsc::Receiver<ImportPart>,
            run_id: i64,
            candidate_ids: &[i64],
        ) -> Result<Option<ImportEnd>> {
            loop {
                match parts.recv().await {
                    Some(ImportPart::Records(mut records)) => {
                        for record in &mut records {
                            let position = usize::try_from(record.candidate_id)
                                .ok()
                                .filter(|p| *p < candidate_ids.len())
                                .ok_or_else(|| {
                                    StoreError::NotFound(format!(
                                        "candidate #{} of a record of case {:?} in the export",
                                        record.candidate_id, record.case_id
                                    ))
                                })?;
                            record.run_id = run_id;
                            record.candidate_id = candidate_ids[position];
                        }
                        for chunk in records.chunks(rows::RECORDS_PER_STATEMENT) {
                            Self::append_request_records_in(tx, chunk).await?;
                        }
                    }
                    Some(ImportPart::End(end)) => return Ok(Some(end)),
                    None => return Ok(None),
                }
            }
        }
    };
}
pub(crate) use import_helpers;

/// An import's last steps: its content hash, stops, harness and note.
macro_rules! import_end_helpers {
    () => {
        /// Marks the run as imported from the export with `content_hash`; Some(that run) when
        /// the same export was imported before (now, or by an import that committed meanwhile).
        async fn claim_import_hash(
            &self,
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            run_id: i64,
            content_hash: &str,
        ) -> Result<Option<i64>> {
            let earlier: Option<i64> = sqlx::query_scalar("SELECT id FROM runs WHERE import_hash = $1")
                .bind(content_hash)
                .fetch_optional(&mut **tx)
                .await?;
            if let Some(id) = earlier {
                return Ok(Some(id));
            }
            let hashed = sqlx::query("UPDATE runs SET import_hash = $2 WHERE id = $1")
                .bind(run_id)
                .bind(content_hash)
                .execute(&mut **tx)
                .await;
            if let Err(e) = hashed {
                // Another import of the same content committed while this one was written.
                return match rows::conflict_on_unique(e, String::new) {
                    StoreError::Conflict(_) => {
                        let id: i64 = sqlx::query_scalar("SELECT id FROM runs WHERE import_hash = $1")
                            .bind(content_hash)
                            .fetch_one(self.pool())
                            .await?;
                        Ok(Some(id))
                    }
                    other => Err(other),
                };
            }
            Ok(None)
        }

        /// An import's stops, harness report and the note in its event log.
        async fn finish_import(
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            run_id: i64,
            candidate_ids: &[i64],
            end: &ImportEnd,
            harness: Option<&HarnessReport>,
        ) -> Result<()> {
            for stop in &end.stops {
                let position = usize::try_from(stop.candidate_id)
                    .ok()
                    .filter(|p| *p < candidate_ids.len())
                    .ok_or_else(|| {
                        StoreError::NotFound(format!(
                            "candidate #{} of a stop in the export",
                            stop.candidate_id
                        ))
                    })?;
                sqlx::query(
                    "INSERT INTO run_candidate_stops (run_id, candidate_id, stage, reason, stopped_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(run_id)
                .bind(candidate_ids[position])
                .bind(stop.stage.as_str())
                .bind(Self::TEXT.encode(&stop.reason))
                .bind(stop.at.0)
                .execute(&mut **tx)
                .await?;
            }
            for (position, scrape) in &end.telemetry {
                let candidate_id = candidate_ids.get(*position).ok_or_else(|| {
                    StoreError::NotFound(format!(
                        "candidate #{position} of a telemetry scrape in the export"
                    ))
                })?;
                Self::insert_telemetry_scrapes_in(tx, run_id, *candidate_id, std::slice::from_ref(scrape)).await?;
            }
            for (position, search) in &end.capacity {
                let candidate_id = *candidate_ids.get(*position).ok_or_else(|| {
                    StoreError::NotFound(format!(
                        "candidate #{position} of a capacity search in the export"
                    ))
                })?;
                let mut search = search.clone();
                search.candidate_id = candidate_id;
                for probe in &mut search.probes {
                    probe.run_id = run_id;
                }
                sqlx::query(
                    "INSERT INTO run_capacity (run_id, candidate_id, search, updated_at) VALUES ($1, $2, $3, $4)",
                )
                .bind(run_id)
                .bind(candidate_id)
                .bind(rows::to_json(&search))
                .bind(Timestamp::now().0)
                .execute(&mut **tx)
                .await?;
            }
            if let Some(harness) = harness {
                sqlx::query("UPDATE runs SET harness = $2 WHERE id = $1")
                    .bind(run_id)
                    .bind(rows::harness_json(harness))
                    .execute(&mut **tx)
                    .await?;
            }
            sqlx::query("INSERT INTO run_events (run_id, at, level, message) VALUES ($1, $2, $3, $4)")
                .bind(run_id)
                .bind(Timestamp::now().0)
                .bind("info")
                .bind(Self::TEXT.encode(&end.note))
                .execute(&mut **tx)
                .await?;
            Ok(())
        }
    };
}
pub(crate) use import_end_helpers;

macro_rules! archive_list_queries {
    () => {
        fn list_runs_filtered<'a>(&'a self, filter: &'a RunFilter, limit: i64, offset: i64)
        -> StoreFuture<'a, Vec<RunListItem>> {
            Box::pin(async move {
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(rows::run_list_select!());
                Self::push_filter(&mut qb, filter);
                qb.push(" ORDER BY runs.created_at DESC, runs.id DESC LIMIT ")
                    .push_bind(limit.max(0))
                    .push(" OFFSET ")
                    .push_bind(offset.max(0));
                let rows: Vec<rows::RunListRow> = qb.build_query_as().fetch_all(self.pool()).await?;
                self.run_list_items(rows).await
            })
        }

        fn count_runs_filtered<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                    "SELECT COUNT(*) FROM runs JOIN evalset_versions v ON v.id = runs.evalset_version_id",
                );
                Self::push_filter(&mut qb, filter);
                Ok(qb.build_query_scalar().fetch_one(self.pool()).await?)
            })
        }

        fn refresh_record_statistics(&self) -> StoreFuture<'_, ()> {
            Box::pin(async move { Ok(self.vacuum_record_tables().await?) })
        }

        fn cases_with_differing_outputs<'a>(&'a self, run_id: i64, case_ids: &'a [String]) -> StoreFuture<'a, Vec<String>> {
            Box::pin(async move {
                if case_ids.is_empty() {
                    return Ok(Vec::new());
                }
                // A case differs when some successful output was not given by every candidate that
                // answered it: then its distinct (candidate, output) pairs fall short of candidates ×
                // outputs. One grouped scan, no join, so no plan can turn it quadratic (a fresh
                // PostgreSQL table has no statistics to plan a join with).
                let mut qb = Self::case_records_query("SELECT case_id FROM request_records", run_id, case_ids);
                qb.push(
                    " AND NOT is_warmup AND error_class IS NULL \
                     GROUP BY case_id \
                     HAVING COUNT(DISTINCT candidate_id) > 1 \
                       AND COUNT(DISTINCT CAST(candidate_id AS TEXT) || '|' || output) \
                         < COUNT(DISTINCT candidate_id) * COUNT(DISTINCT output) \
                     ORDER BY case_id",
                );
                Ok(qb.build_query_scalar().fetch_all(self.pool()).await?)
            })
        }

        fn search_run_cases<'a>(&'a self, run_id: i64, version_id: i64, text: &'a str) -> StoreFuture<'a, Vec<String>> {
            Box::pin(async move {
                // A LIKE pattern matching `text` anywhere: its own % _ and \ taken literally; both sides
                // lowered by the database (SQLite: ASCII letters only).
                let pattern = |t: &str| {
                    let mut p = String::from("%");
                    for ch in t.chars() {
                        if matches!(ch, '%' | '_' | '\\') {
                            p.push('\\');
                        }
                        p.push(ch);
                    }
                    p.push('%');
                    p
                };
                let plain = pattern(text);
                // Outputs are stored through the text codec: matched in the same encoding.
                let encoded = pattern(&Self::TEXT.encode(text));
                Ok(sqlx::query_scalar(
                    "SELECT case_id FROM eval_cases WHERE version_id = $1 \
                       AND (LOWER(case_id) LIKE LOWER($2) ESCAPE '\\' OR LOWER(input) LIKE LOWER($2) ESCAPE '\\' \
                         OR LOWER(COALESCE(expected, '')) LIKE LOWER($2) ESCAPE '\\') \
                     UNION \
                     SELECT case_id FROM request_records WHERE run_id = $3 AND NOT is_warmup \
                       AND LOWER(output) LIKE LOWER($4) ESCAPE '\\' \
                     ORDER BY case_id",
                )
                .bind(version_id)
                .bind(plain)
                .bind(run_id)
                .bind(encoded)
                .fetch_all(self.pool())
                .await?)
            })
        }
    };
}
pub(crate) use archive_list_queries;

/// A run's records for the drill-down: facts, outlines, pages, by case or id.
macro_rules! drill_down_queries {
    () => {
        fn list_record_facts(&self, run_id: i64) -> StoreFuture<'_, Vec<RecordFact>> {
            Box::pin(async move {
                // A page of records at a time on the send-order keyset (as `list_request_records`
                // reads), each with the outcome kept on it: one grouped join of a million records
                // with their grades gave its first answer only after all of it was sorted, past
                // the bound on one answer (3.7 s on PostgreSQL).
                let (mut facts, mut shared) = (Vec::new(), rows::SharedTexts::default());
                let (mut sent, mut id) = (i64::MIN, i64::MIN);
                loop {
                    let rows: Vec<archive::PlacedFactRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        archive::placed_fact_columns!(),
                        " FROM request_records WHERE run_id = $1 AND sent_at_us >= $2 AND (sent_at_us > $2 OR id > $3) \
                         ORDER BY sent_at_us, id LIMIT $4"
                    ))
                    .bind(run_id)
                    .bind(sent)
                    .bind(id)
                    .bind(rows::RECORDS_PER_READ)
                    .fetch_all(self.pool())
                    .await?;
                    let full = rows.len() as i64 == rows::RECORDS_PER_READ;
                    if let Some(last) = rows.last() {
                        (sent, id) = (last.sent_at_us, last.id);
                    }
                    facts.extend(Self::outlines_of(rows, &mut shared)?.into_iter().map(|o| o.fact));
                    if !full {
                        return Ok(facts);
                    }
                }
            })
        }

        fn list_case_records<'a>(&'a self, run_id: i64, case_ids: &'a [String]) -> StoreFuture<'a, Vec<RequestRecord>> {
            Box::pin(async move {
                if case_ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut qb = Self::case_records_query(
                    concat!("SELECT ", rows::record_select_columns!(), " FROM request_records"),
                    run_id,
                    case_ids,
                );
                let mut records: Vec<rows::RecordRow> = qb.build_query_as().fetch_all(self.pool()).await?;
                records.sort_by_key(|r| (r.sent_at_us, r.id));
                self.complete_records(records, &mut Default::default()).await
            })
        }

        fn list_case_outlines<'a>(
            &'a self,
            run_id: i64,
            case_ids: &'a [String],
        ) -> StoreFuture<'a, Vec<RecordOutline>> {
            Box::pin(async move {
                if case_ids.is_empty() {
                    return Ok(Vec::new());
                }
                // Sorted in `outlines_of`.
                let mut qb = Self::case_records_query(archive::OUTLINE_SELECT, run_id, case_ids);
                Self::outlines_of(
                    qb.build_query_as().fetch_all(self.pool()).await?,
                    &mut Default::default(),
                )
            })
        }

        fn list_records_by_id<'a>(&'a self, run_id: i64, ids: &'a [i64]) -> StoreFuture<'a, Vec<(i64, RequestRecord)>> {
            Box::pin(async move {
                let mut rows: Vec<rows::RecordRow> = Vec::new();
                for chunk in ids.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                    // `+run_id` keeps SQLite from reading the run through an index on run_id
                    // (it guesses ten records a run, and read all of a million-record run's to
                    // find the 240 of a cases page); the ids are looked up by primary key.
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(concat!(
                        "SELECT ",
                        rows::record_select_columns!(),
                        " FROM request_records WHERE +run_id = "
                    ));
                    qb.push_bind(run_id).push(" AND id IN (");
                    let mut list = qb.separated(", ");
                    for id in chunk {
                        list.push_bind(*id);
                    }
                    qb.push(")");
                    rows.extend(
                        qb.build_query_as::<rows::RecordRow>()
                            .fetch_all(self.pool())
                            .await?,
                    );
                }
                rows.sort_by_key(|r| (r.sent_at_us, r.id));
                let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
                Ok(ids
                    .into_iter()
                    .zip(self.complete_records(rows, &mut Default::default()).await?)
                    .collect())
            })
        }

        fn list_request_records_page(
            &self,
            run_id: i64,
            after_id: i64,
            limit: i64,
        ) -> StoreFuture<'_, Vec<(i64, RequestRecord)>> {
            Box::pin(async move {
                // `+run_id`: see `list_records_by_id` (SQLite sorted the whole run otherwise).
                let rows: Vec<rows::RecordRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    rows::record_select_columns!(),
                    " FROM request_records WHERE +run_id = $1 AND id > $2 ORDER BY id LIMIT $3"
                ))
                .bind(run_id)
                .bind(after_id)
                .bind(limit)
                .fetch_all(self.pool())
                .await?;
                let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
                Ok(ids
                    .into_iter()
                    .zip(self.complete_records(rows, &mut Default::default()).await?)
                    .collect())
            })
        }

        fn list_request_records_sent_after(
            &self,
            run_id: i64,
            after: Option<(i64, i64)>,
            limit: i64,
        ) -> StoreFuture<'_, Vec<((i64, i64), RequestRecord)>> {
            Box::pin(async move {
                self.records_page(run_id, None, after, limit, &mut Default::default())
                    .await
            })
        }
    };
}
pub(crate) use drill_down_queries;

/// Import, deletion and cached summaries of whole runs.
macro_rules! transfer_queries {
    () => {
        fn restore_run<'a>(&'a self, restored: &'a RestoredRun) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let mut tx = self.begin().await?;
                let run_id: i64 = sqlx::query_scalar(
                    "INSERT INTO runs (name, evalset_version_id, config, status, error, created_at, started_at, finished_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                )
                .bind(&restored.run.name)
                .bind(restored.run.evalset_version_id)
                .bind(rows::run_config_json(&restored.run.config))
                .bind(RunStatus::Failed.as_str())
                .bind(IMPORT_INCOMPLETE)
                .bind(restored.created_at.0)
                .bind(restored.started_at.map(|t| t.0))
                .bind(restored.finished_at.map(|t| t.0))
                .fetch_one(&mut *tx)
                .await
                .map_err(StoreError::from)
                .map_err(|e| {
                    rows::not_found_on_foreign_key(e, || {
                        format!("eval set version {}", restored.run.evalset_version_id)
                    })
                })?;
                self.insert_run_candidates(&mut tx, run_id, &restored.run.candidate_ids, None)
                    .await
                    .map_err(archive::twice_listed)?;
                Self::insert_run_events(&mut tx, run_id, &restored.events).await?;
                tx.commit().await?;
                Ok(run_id)
            })
        }

        fn import_run<'a>(
            &'a self,
            import: &'a RunImport,
            parts: &'a mut tokio::sync::mpsc::Receiver<ImportPart>,
        ) -> StoreFuture<'a, ImportOutcome> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                match self.import_run_in(&mut tx, import, parts).await? {
                    ImportOutcome::Imported(id) => {
                        tx.commit().await?;
                        Ok(ImportOutcome::Imported(id))
                    }
                    // Dropping `tx` rolls back everything the import wrote.
                    other => Ok(other),
                }
            })
        }

        fn run_import_hash(&self, run_id: i64) -> StoreFuture<'_, Option<String>> {
            Box::pin(async move {
                let hash: Option<Option<String>> = sqlx::query_scalar("SELECT import_hash FROM runs WHERE id = $1")
                    .bind(run_id)
                    .fetch_optional(self.pool())
                    .await?;
                Ok(hash.flatten())
            })
        }

        fn complete_restore<'a>(&'a self, id: i64, restored: &'a RestoredRun) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE runs SET status = $2, error = $3, started_at = $4, finished_at = $5 WHERE id = $1",
                )
                .bind(id)
                .bind(restored.status.as_str())
                .bind(Self::TEXT.encode_opt(restored.error.as_deref()))
                .bind(restored.started_at.map(|t| t.0))
                .bind(restored.finished_at.map(|t| t.0))
                .execute(self.pool())
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("run {id}")));
                }
                Ok(())
            })
        }

        fn delete_run(&self, id: i64) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                // A write transaction: a large run's cascade may take longer than a page's
                // query may (see `postgres::ANSWER_WAIT`).
                let mut tx = self.begin_write().await?;
                let done = sqlx::query("DELETE FROM runs WHERE id = $1").bind(id).execute(&mut *tx).await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("run {id}")));
                }
                tx.commit().await?;
                Ok(())
            })
        }

        fn get_run_summary<'a>(&'a self, run_id: i64, kind: &'a str) -> StoreFuture<'a, Option<String>> {
            Box::pin(async move {
                Ok(
                    sqlx::query_scalar("SELECT body FROM run_summaries WHERE run_id = $1 AND kind = $2")
                        .bind(run_id)
                        .bind(kind)
                        .fetch_optional(self.pool())
                        .await?,
                )
            })
        }

        fn save_run_summary<'a>(&'a self, run_id: i64, kind: &'a str, body: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sqlx::query(archive::SAVE_RUN_SUMMARY)
                .bind(run_id)
                .bind(kind)
                .bind(body)
                .bind(Timestamp::now().0)
                .execute(self.pool())
                .await
                .map_err(StoreError::from)
                .map_err(|e| rows::not_found_on_foreign_key(e, || format!("run {run_id}")))?;
                Ok(())
            })
        }
    };
}
pub(crate) use transfer_queries;

/// A terminal run's case index (cases in page order with their marks).
macro_rules! run_case_queries {
    () => {
        fn save_run_cases<'a>(
            &'a self,
            run_id: i64,
            cases: &'a [crate::domain::case_index::IndexedCase],
            kind: &'a str,
            head: &'a str,
        ) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                for delete in [
                    "DELETE FROM run_case_marks WHERE run_id = $1",
                    "DELETE FROM run_cases WHERE run_id = $1",
                ] {
                    sqlx::query(delete).bind(run_id).execute(&mut *tx).await?;
                }
                let positioned = || cases.iter().enumerate().map(|(i, c)| (i as i64, c));
                let rows: Vec<(i64, &str)> = positioned().map(|(i, c)| (i, c.case_id.as_str())).collect();
                for batch in rows.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                    let mut qb =
                        sqlx::QueryBuilder::<Db<Self>>::new("INSERT INTO run_cases (run_id, position, case_id) ");
                    qb.push_values(batch, |mut row, (position, case_id)| {
                        row.push_bind(run_id).push_bind(*position).push_bind(*case_id);
                    });
                    // Two first views of one ended run may both store its cases: on PostgreSQL
                    // the second's delete does not see the first's rows until it commits, and
                    // both computed the same cases from the same ended run.
                    qb.push(" ON CONFLICT DO NOTHING");
                    qb.build().execute(&mut *tx).await?;
                }
                // Each mark under every key it answers (`Mark::keys`); a key two marks of a case
                // answer (two failure classes of one candidate: "any class") is stored once.
                let keys: Vec<(i64, crate::domain::case_index::MarkKey)> = positioned()
                    .flat_map(|(i, c)| c.marks.iter().flat_map(|m| m.keys()).map(move |k| (i, k)))
                    .collect();
                for batch in keys.chunks(rows::SMALL_ROWS_PER_STATEMENT) {
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                        "INSERT INTO run_case_marks (run_id, kind, value, candidate_id, position) ",
                    );
                    qb.push_values(batch, |mut row, (position, key)| {
                        row.push_bind(run_id)
                            .push_bind(key.kind.as_str())
                            .push_bind(Self::TEXT.encode(&key.value).into_owned())
                            .push_bind(key.candidate_id)
                            .push_bind(*position);
                    });
                    qb.push(" ON CONFLICT DO NOTHING");
                    qb.build().execute(&mut *tx).await?;
                }
                sqlx::query(archive::SAVE_RUN_SUMMARY)
                    .bind(run_id)
                    .bind(kind)
                    .bind(head)
                    .bind(Timestamp::now().0)
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::from)
                    .map_err(|e| rows::not_found_on_foreign_key(e, || format!("run {run_id}")))?;
                tx.commit().await?;
                Ok(())
            })
        }

        fn page_run_cases<'a>(
            &'a self,
            run_id: i64,
            tests: &'a [crate::domain::case_index::MarkTest],
            page: Option<(u64, u64)>,
        ) -> StoreFuture<'a, (u64, Vec<String>)> {
            Box::pin(async move {
                let Some((first, rest)) = tests.split_first() else {
                    // Every case: positions are 0..n-1, so the count is the last one's and a page
                    // starts at its position (an index seek, where OFFSET walks every case before).
                    let matching: Option<i64> =
                        sqlx::query_scalar("SELECT MAX(position) + 1 FROM run_cases WHERE run_id = $1")
                            .bind(run_id)
                            .fetch_one(self.pool())
                            .await?;
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new("SELECT case_id FROM run_cases WHERE run_id = ");
                    qb.push_bind(run_id);
                    if let Some((offset, most)) = page {
                        qb.push(" AND position >= ").push_bind(offset as i64);
                        qb.push(" ORDER BY position LIMIT ").push_bind(most as i64);
                    } else {
                        qb.push(" ORDER BY position");
                    }
                    let ids: Vec<String> = qb.build_query_scalar().fetch_all(self.pool()).await?;
                    return Ok((matching.unwrap_or(0) as u64, ids));
                };
                // The first test's key is one range of marks in page order; each other test is
                // a lookup of its key at the same position. A filter costs the cases its first
                // test matches, never the run's.
                let filtered = |select: &str| {
                    let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(select);
                    qb.push(" FROM run_case_marks m WHERE m.run_id = ")
                        .push_bind(run_id);
                    let key = first.key();
                    qb.push(" AND m.kind = ").push_bind(key.kind.as_str());
                    qb.push(" AND m.value = ")
                        .push_bind(Self::TEXT.encode(&key.value).into_owned());
                    qb.push(" AND m.candidate_id = ").push_bind(key.candidate_id);
                    for test in rest {
                        let key = test.key();
                        qb.push(" AND EXISTS (SELECT 1 FROM run_case_marks t WHERE t.run_id = m.run_id")
                            .push(" AND t.kind = ")
                            .push_bind(key.kind.as_str())
                            .push(" AND t.value = ")
                            .push_bind(Self::TEXT.encode(&key.value).into_owned())
                            .push(" AND t.candidate_id = ")
                            .push_bind(key.candidate_id)
                            .push(" AND t.position = m.position)");
                    }
                    qb
                };
                let matching: i64 = filtered("SELECT CAST(COUNT(*) AS BIGINT)")
                    .build_query_scalar()
                    .fetch_one(self.pool())
                    .await?;
                let mut qb = filtered(
                    "SELECT (SELECT c.case_id FROM run_cases c WHERE c.run_id = m.run_id AND c.position = m.position)",
                );
                qb.push(" ORDER BY m.position");
                if let Some((offset, most)) = page {
                    qb.push(" LIMIT ")
                        .push_bind(most as i64)
                        .push(" OFFSET ")
                        .push_bind(offset as i64);
                }
                let ids: Vec<String> = qb.build_query_scalar().fetch_all(self.pool()).await?;
                Ok((matching as u64, ids))
            })
        }
    };
}
pub(crate) use run_case_queries;
