//! Workers, run units and their leases (`workers`, `run_units`, `candidate_worker_labels`),
//! written once for both backends: `worker_queries!` and
//! `unit_queries!` expand to the methods of `WorkerStore` (`claim_helpers!` to a claim's steps) in
//! `lib.rs` (`impl_store!`), so its paths are written as seen from there.
//!
//! Times here are the database's clock (`NOW_MS` of each backend), never a worker's: leases
//! are compared across machines whose clocks may disagree. A claim runs in one transaction
//! that the backend serialises (`begin_coordination`: SQLite's `BEGIN IMMEDIATE`, a
//! transaction-scoped advisory lock on PostgreSQL), because the caps are a predicate over every
//! admitted run — a row lock (`FOR UPDATE SKIP LOCKED`) cannot say "at most N runs at once".

/// The team setting holding the run cap that every worker applies.
pub const MAX_RUNS_SETTING: &str = "workers.max_runs";
/// The team setting holding the per-candidate cap that every worker applies.
pub const PER_CANDIDATE_SETTING: &str = "workers.per_candidate";

/// The runs a claim reads (`runs r`): those handed to the workers and not ended, and those that
/// still hold their slot — a unit not done — whatever their status: a run that has just ended
/// keeps its slot while its worker finishes its end-of-run step, and a run cancelled elsewhere
/// keeps it until its worker has stopped its load.
macro_rules! open_runs {
    () => {
        "((r.status IN ('queued', 'running') AND r.requested_at IS NOT NULL) \
         OR EXISTS (SELECT 1 FROM run_units p WHERE p.run_id = r.id AND p.status <> 'done'))"
    };
}
pub(crate) use open_runs;

macro_rules! claim_helpers {
    () => {
        /// The caps a claim applies: the team settings where set, else `caps`.
        async fn team_caps(tx: &mut sqlx::Transaction<'_, Db<Self>>, caps: Caps) -> Result<Caps> {
            let settings: Vec<(String, String)> =
                sqlx::query_as("SELECT name, value FROM team_settings WHERE name IN ($1, $2)")
                    .bind(workers::MAX_RUNS_SETTING)
                    .bind(workers::PER_CANDIDATE_SETTING)
                    .fetch_all(&mut **tx)
                    .await?;
            let mut caps = caps;
            for (name, value) in settings {
                let value = value.parse::<usize>().unwrap_or(0).max(1);
                if name == workers::MAX_RUNS_SETTING {
                    caps.max_runs = value;
                } else {
                    caps.per_candidate = value;
                }
            }
            Ok(caps)
        }

        /// Every open run (see `open_runs!`) with its candidates and units, and the labels the
        /// candidates need, as `domain::workers::decide` reads them.
        async fn read_coordination(
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            caps: Caps,
            now: i64,
        ) -> Result<Coordination> {
            // Clients per candidate, from each queued run's configuration.
            let configs: Vec<(i64, String)> = sqlx::query_as(concat!(
                "SELECT r.id, r.config FROM runs r WHERE ",
                workers::open_runs!()
            ))
            .fetch_all(&mut **tx)
            .await?;
            let clients = |run_id: i64| {
                configs
                    .iter()
                    .find(|(id, _)| *id == run_id)
                    .and_then(|(_, c)| serde_json::from_str::<crate::domain::run::RunConfig>(c).ok())
                    .map_or(1, |c| c.clients())
            };
            let candidates: Vec<(i64, i64, String)> = sqlx::query_as(concat!(
                "SELECT rc.run_id, rc.candidate_id, c.name FROM run_candidates rc \
                 JOIN candidates c ON c.id = rc.candidate_id JOIN runs r ON r.id = rc.run_id WHERE ",
                workers::open_runs!(),
                " ORDER BY rc.run_id, rc.position"
            ))
            .fetch_all(&mut **tx)
            .await?;
            let units: Vec<rows::RunUnitRow> = sqlx::query_as(concat!(
                "SELECT ",
                rows::run_unit_columns!(),
                " FROM run_units u JOIN runs r ON r.id = u.run_id WHERE ",
                workers::open_runs!(),
                " ORDER BY u.run_id, u.seq"
            ))
            .fetch_all(&mut **tx)
            .await?;
            let labels: Vec<(i64, String)> = sqlx::query_as("SELECT candidate_id, labels FROM candidate_worker_labels")
                .fetch_all(&mut **tx)
                .await?;
            let mut runs: Vec<OpenRun> = Vec::new();
            for (run_id, candidate_id, name) in candidates {
                if runs.last().is_none_or(|r| r.run_id != run_id) {
                    runs.push(OpenRun {
                        run_id,
                        clients: clients(run_id),
                        candidates: Vec::new(),
                        units: Vec::new(),
                    });
                }
                if let Some(run) = runs.last_mut() {
                    run.candidates.push((candidate_id, Self::TEXT.decode(name)));
                }
            }
            for unit in units {
                let unit = unit.into_unit()?;
                if let Some(run) = runs.iter_mut().find(|r| r.run_id == unit.run_id) {
                    run.units.push(unit);
                }
            }
            Ok(Coordination {
                caps,
                now: Timestamp(now),
                runs,
                labels: labels
                    .into_iter()
                    .map(|(id, l)| (id, crate::domain::workers::stored_labels(&l)))
                    .collect(),
            })
        }

        /// Leases the claimed unit to `me` until `until`, writing a newly admitted run's units
        /// first.
        async fn lease_claim(
            tx: &mut sqlx::Transaction<'_, Db<Self>>,
            claim: &crate::domain::workers::Claim,
            me: &Claimant,
            until: i64,
            now: i64,
        ) -> Result<()> {
            for (seq, unit) in claim.admits.iter().flatten().enumerate() {
                sqlx::query(
                    "INSERT INTO run_units (run_id, seq, candidate_id, shard, shards, status) \
                     VALUES ($1, $2, $3, $4, $5, 'queued') ON CONFLICT (run_id, seq) DO NOTHING",
                )
                .bind(claim.run_id)
                .bind(seq as i64)
                .bind(unit.candidate_id)
                .bind(i64::from(unit.shard))
                .bind(i64::from(unit.shards))
                .execute(&mut **tx)
                .await?;
            }
            sqlx::query(
                "UPDATE run_units SET status = 'leased', worker = $3, lease_until = $4, claims = claims + 1, \
                 started_at = COALESCE(started_at, $5), finished_at = NULL WHERE run_id = $1 AND seq = $2",
            )
            .bind(claim.run_id)
            .bind(i64::from(claim.seq))
            .bind(&me.name)
            .bind(until)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            Ok(())
        }
    };
}
pub(crate) use claim_helpers;

macro_rules! worker_queries {
    () => {
        fn database_now(&self) -> StoreFuture<'_, Timestamp> {
            Box::pin(async move {
                let now: i64 = sqlx::query_scalar(Self::NOW_MS).fetch_one(self.pool()).await?;
                Ok(Timestamp(now))
            })
        }

        #[tracing::instrument(level = "debug", skip(self, worker), fields(worker = %worker.name))]
        fn worker_beat<'a>(&'a self, worker: &'a WorkerStatus, lease_ms: i64) -> StoreFuture<'a, Vec<(i64, u32)>> {
            Box::pin(async move {
                let now: i64 = sqlx::query_scalar(Self::NOW_MS).fetch_one(self.pool()).await?;
                sqlx::query(
                    "INSERT INTO workers (name, labels, version, host, pid, capacity, embedded, started_at, \
                     heartbeat_at, units_held, cpu_share, load_avg, lease_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10, $11, $12) \
                     ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, version = excluded.version, \
                     host = excluded.host, pid = excluded.pid, capacity = excluded.capacity, \
                     embedded = excluded.embedded, heartbeat_at = excluded.heartbeat_at, \
                     units_held = excluded.units_held, cpu_share = excluded.cpu_share, load_avg = excluded.load_avg, \
                     lease_ms = excluded.lease_ms, \
                     started_at = CASE WHEN workers.pid = excluded.pid THEN workers.started_at ELSE excluded.started_at END",
                )
                .bind(&worker.name)
                .bind(crate::domain::workers::labels_text(&worker.labels))
                .bind(&worker.version)
                .bind(Self::TEXT.encode(&worker.host))
                .bind(i64::from(worker.pid))
                .bind(i64::from(worker.capacity))
                .bind(i64::from(worker.embedded))
                .bind(now)
                .bind(i64::from(worker.units_held))
                .bind(worker.cpu_share)
                .bind(worker.load_avg)
                .bind(lease_ms)
                .execute(self.pool())
                .await?;
                let held: Vec<(i64, i64)> = sqlx::query_as(
                    "UPDATE run_units SET lease_until = $2 WHERE worker = $1 AND status = 'leased' \
                     RETURNING run_id, seq",
                )
                .bind(&worker.name)
                .bind(now + lease_ms)
                .fetch_all(self.pool())
                .await?;
                Ok(held.into_iter().map(|(run, seq)| (run, seq as u32)).collect())
            })
        }

        fn list_workers(&self) -> StoreFuture<'_, Vec<WorkerStatus>> {
            Box::pin(async move {
                let rows: Vec<rows::WorkerRow> = sqlx::query_as(
                    "SELECT name, labels, version, host, pid, capacity, embedded, started_at, heartbeat_at, \
                     units_held, cpu_share, load_avg, lease_ms FROM workers ORDER BY name",
                )
                .fetch_all(self.pool())
                .await?;
                Ok(rows.into_iter().map(|r| r.into_status(Self::TEXT)).collect())
            })
        }

        fn candidate_worker_labels(&self) -> StoreFuture<'_, Vec<(i64, Vec<String>)>> {
            Box::pin(async move {
                let rows: Vec<(i64, String)> =
                    sqlx::query_as("SELECT candidate_id, labels FROM candidate_worker_labels ORDER BY candidate_id")
                        .fetch_all(self.pool())
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, l)| (id, crate::domain::workers::stored_labels(&l)))
                    .collect())
            })
        }

        fn set_candidate_worker_labels<'a>(&'a self, candidate_id: i64, labels: &'a [String]) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                if labels.is_empty() {
                    sqlx::query("DELETE FROM candidate_worker_labels WHERE candidate_id = $1")
                        .bind(candidate_id)
                        .execute(self.pool())
                        .await?;
                    return Ok(());
                }
                sqlx::query(
                    "INSERT INTO candidate_worker_labels (candidate_id, labels) VALUES ($1, $2) \
                     ON CONFLICT (candidate_id) DO UPDATE SET labels = excluded.labels",
                )
                .bind(candidate_id)
                .bind(crate::domain::workers::labels_text(labels))
                .execute(self.pool())
                .await
                .map_err(|e| rows::not_found_on_foreign_key(e.into(), || format!("candidate {candidate_id}")))?;
                Ok(())
            })
        }
    };
}
pub(crate) use worker_queries;

/// Run units: claims, leases, clocks and slots.
macro_rules! unit_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, me), fields(worker = %me.name))]
        fn claim_unit<'a>(&'a self, me: &'a Claimant, caps: Caps, lease_ms: i64) -> StoreFuture<'a, WorkerDecision> {
            Box::pin(async move {
                let mut tx = self.begin_coordination().await?;
                let now: i64 = sqlx::query_scalar(Self::NOW_MS).fetch_one(&mut *tx).await?;
                let caps = Self::team_caps(&mut tx, caps).await?;
                let coordination = Self::read_coordination(&mut tx, caps, now).await?;
                let decision = crate::domain::workers::decide(&coordination, me);
                if let Some(claim) = &decision.claim {
                    Self::lease_claim(&mut tx, claim, me, now + lease_ms, now).await?;
                }
                tx.commit().await?;
                Ok(decision)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn request_run(&self, run_id: i64) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                let now: i64 = sqlx::query_scalar(Self::NOW_MS).fetch_one(self.pool()).await?;
                sqlx::query("UPDATE runs SET requested_at = COALESCE(requested_at, $2) WHERE id = $1")
                    .bind(run_id)
                    .bind(now)
                    .execute(self.pool())
                    .await?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self, harness))]
        fn finish_unit<'a>(
            &'a self,
            run_id: i64,
            seq: u32,
            worker: &'a str,
            harness: Option<&'a HarnessReport>,
        ) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let now: i64 = sqlx::query_scalar(Self::NOW_MS).fetch_one(self.pool()).await?;
                let done = sqlx::query(
                    "UPDATE run_units SET status = 'done', finished_at = $4, lease_until = NULL, harness = $5 \
                     WHERE run_id = $1 AND seq = $2 AND worker = $3 AND status = 'leased'",
                )
                .bind(run_id)
                .bind(i64::from(seq))
                .bind(worker)
                .bind(now)
                .bind(harness.map(rows::harness_json))
                .execute(self.pool())
                .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn set_unit_clock(&self, run_id: i64, seq: u32, offset_ms: f64, rtt_ms: f64) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                sqlx::query(
                    "UPDATE run_units SET clock_offset_ms = $3, clock_rtt_ms = $4 WHERE run_id = $1 AND seq = $2",
                )
                .bind(run_id)
                .bind(i64::from(seq))
                .bind(offset_ms)
                .bind(rtt_ms)
                .execute(self.pool())
                .await?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn release_run_slot(&self, run_id: i64) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                sqlx::query("DELETE FROM run_units WHERE run_id = $1 AND status <> 'done'")
                    .bind(run_id)
                    .execute(self.pool())
                    .await?;
                Ok(())
            })
        }

        fn list_run_units(&self, run_id: i64) -> StoreFuture<'_, Vec<RunUnit>> {
            Box::pin(async move {
                let rows: Vec<rows::RunUnitRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    rows::run_unit_columns!(),
                    " FROM run_units u WHERE u.run_id = $1 ORDER BY u.seq"
                ))
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(rows::RunUnitRow::into_unit).collect()
            })
        }
    };
}
pub(crate) use unit_queries;
