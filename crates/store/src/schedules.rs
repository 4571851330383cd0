//! Schedules and their firings (`schedules`, `schedule_firings`), written once for both
//! backends: `schedule_queries!` expands to the methods of `ScheduleStore` in `lib.rs`
//! (`impl_store!`), so its paths are written as seen from there.
use super::text::TextCodec;
use super::{Result, StoreError};
use crate::domain::Timestamp;
use crate::domain::run::RunConfig;
use crate::domain::schedule::{Baseline, Firing, Schedule, ScheduleSpec};

/// The columns of `schedules`, in [`ScheduleRow`]'s order.
macro_rules! schedule_columns {
    () => {
        "id, name, evalset_id, evalset_version_id, candidate_ids, config, profile_id, cadence, time_zone, \
         owner, max_requests, max_cost_usd, baseline, paused, counting_since, created_at, updated_at"
    };
}
pub(crate) use schedule_columns;

/// One row of `schedules`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScheduleRow {
    id: i64,
    name: String,
    evalset_id: i64,
    evalset_version_id: Option<i64>,
    candidate_ids: String,
    config: String,
    profile_id: Option<i64>,
    cadence: String,
    time_zone: String,
    owner: String,
    max_requests: Option<i64>,
    max_cost_usd: Option<f64>,
    baseline: String,
    paused: bool,
    counting_since: i64,
    created_at: i64,
    updated_at: i64,
}

impl ScheduleRow {
    pub(crate) fn into_schedule(self, text: TextCodec) -> Result<Schedule> {
        let place = |column: &str| format!("schedules.{column} of schedule {}", self.id);
        let candidate_ids: Vec<i64> = super::rows::parse_json(place("candidate_ids"), &self.candidate_ids)?;
        let config: RunConfig = super::rows::parse_json(place("config"), &self.config)?;
        let baseline = Baseline::parse(&self.baseline)
            .ok_or_else(|| StoreError::Corrupt(format!("{}: unknown value {:?}", place("baseline"), self.baseline)))?;
        Ok(Schedule {
            id: self.id,
            spec: ScheduleSpec {
                name: text.decode(self.name),
                evalset_id: self.evalset_id,
                evalset_version_id: self.evalset_version_id,
                candidate_ids,
                config,
                profile_id: self.profile_id,
                cadence: self.cadence,
                time_zone: self.time_zone,
                owner: text.decode(self.owner),
                max_requests: self.max_requests.map(|n| n.max(0) as u64),
                max_cost_usd: self.max_cost_usd,
                baseline,
                paused: self.paused,
            },
            counting_since: Timestamp(self.counting_since),
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
        })
    }
}

/// One row of `schedule_firings`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct FiringRow {
    schedule_id: i64,
    due_at: i64,
    fired_at: i64,
    run_id: Option<i64>,
    missed: bool,
    note: String,
}

impl FiringRow {
    pub(crate) fn into_firing(self, text: TextCodec) -> Firing {
        Firing {
            schedule_id: self.schedule_id,
            due_at: Timestamp(self.due_at),
            fired_at: Timestamp(self.fired_at),
            run_id: self.run_id,
            missed: self.missed,
            note: text.decode(self.note),
        }
    }
}

/// Binds a [`ScheduleSpec`]'s values as `$1`…`$13`, in the order of the INSERT's and the
/// UPDATE's column lists.
macro_rules! bind_schedule {
    ($query:expr, $spec:expr) => {
        $query
            .bind(Self::TEXT.encode(&$spec.name))
            .bind($spec.evalset_id)
            .bind($spec.evalset_version_id)
            .bind(rows::to_json(&$spec.candidate_ids))
            .bind(rows::run_config_json(&$spec.config))
            .bind($spec.profile_id)
            .bind(&$spec.cadence)
            .bind(&$spec.time_zone)
            .bind(Self::TEXT.encode(&$spec.owner))
            .bind($spec.max_requests.map(|n| n.min(i64::MAX as u64) as i64))
            .bind($spec.max_cost_usd)
            .bind($spec.baseline.as_text())
            .bind($spec.paused)
    };
}

pub(crate) use bind_schedule;

macro_rules! schedule_queries {
    () => {
        fn create_schedule<'a>(&'a self, spec: &'a ScheduleSpec) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                let insert = sqlx::query_scalar(
                    "INSERT INTO schedules (name, evalset_id, evalset_version_id, candidate_ids, config, profile_id, \
                     cadence, time_zone, owner, max_requests, max_cost_usd, baseline, paused, counting_since, \
                     created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14, $14) RETURNING id",
                );
                let id: i64 = schedules::bind_schedule!(insert, spec)
                .bind(now)
                .fetch_one(self.pool())
                .await
                .map_err(|e| rows::conflict_on_unique(e, || format!("a schedule named {:?} exists", spec.name)))
                .map_err(|e| rows::not_found_on_foreign_key(e, || format!("eval set {} or its version", spec.evalset_id)))?;
                Ok(id)
            })
        }

        fn update_schedule<'a>(&'a self, id: i64, spec: &'a ScheduleSpec, recount: bool) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                let update = sqlx::query(
                    "UPDATE schedules SET name = $1, evalset_id = $2, evalset_version_id = $3, candidate_ids = $4, \
                     config = $5, profile_id = $6, cadence = $7, time_zone = $8, owner = $9, max_requests = $10, \
                     max_cost_usd = $11, baseline = $12, paused = $13, updated_at = $14, \
                     counting_since = CASE WHEN $15 THEN $14 ELSE counting_since END WHERE id = $16",
                );
                let done = schedules::bind_schedule!(update, spec)
                .bind(now)
                .bind(recount)
                .bind(id)
                .execute(self.pool())
                .await
                .map_err(|e| rows::conflict_on_unique(e, || format!("a schedule named {:?} exists", spec.name)))
                .map_err(|e| rows::not_found_on_foreign_key(e, || format!("eval set {} or its version", spec.evalset_id)))?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("schedule {id}")));
                }
                Ok(())
            })
        }

        fn list_schedules(&self) -> StoreFuture<'_, Vec<Schedule>> {
            Box::pin(async move {
                let rows: Vec<schedules::ScheduleRow> =
                    sqlx::query_as(concat!("SELECT ", schedules::schedule_columns!(), " FROM schedules ORDER BY name, id"))
                        .fetch_all(self.pool())
                        .await?;
                rows.into_iter().map(|r| r.into_schedule(Self::TEXT)).collect()
            })
        }

        fn get_schedule(&self, id: i64) -> StoreFuture<'_, Option<Schedule>> {
            Box::pin(async move {
                let row: Option<schedules::ScheduleRow> =
                    sqlx::query_as(concat!("SELECT ", schedules::schedule_columns!(), " FROM schedules WHERE id = $1"))
                        .bind(id)
                        .fetch_optional(self.pool())
                        .await?;
                row.map(|r| r.into_schedule(Self::TEXT)).transpose()
            })
        }

        fn delete_schedule(&self, id: i64) -> StoreFuture<'_, bool> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM schedules WHERE id = $1")
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn last_firing_due(&self, schedule_id: i64) -> StoreFuture<'_, Option<Timestamp>> {
            Box::pin(async move {
                let due: Option<i64> = sqlx::query_scalar("SELECT MAX(due_at) FROM schedule_firings WHERE schedule_id = $1")
                    .bind(schedule_id)
                    .fetch_one(self.pool())
                    .await?;
                Ok(due.map(Timestamp))
            })
        }

        fn claim_firing<'a>(&'a self, firing: &'a Firing, run: Option<&'a NewRun>) -> StoreFuture<'a, Option<Firing>> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                // The claim first: a second scheduler's insert of the same due time waits for
                // this transaction and then does nothing.
                let claimed = sqlx::query(
                    "INSERT INTO schedule_firings (schedule_id, due_at, fired_at, run_id, missed, note) \
                     VALUES ($1, $2, $3, NULL, $4, $5) ON CONFLICT (schedule_id, due_at) DO NOTHING",
                )
                .bind(firing.schedule_id)
                .bind(firing.due_at.0)
                .bind(firing.fired_at.0)
                .bind(firing.missed)
                .bind(Self::TEXT.encode(&firing.note))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::from)
                .map_err(|e| rows::not_found_on_foreign_key(e, || format!("schedule {}", firing.schedule_id)))?;
                if claimed.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                let run_id = match run {
                    Some(run) => {
                        let id = self
                            .insert_run(&mut tx, run, Timestamp::now().0)
                            .await
                            .map_err(|e| {
                                rows::not_found_on_foreign_key(e, || {
                                    format!(
                                        "eval set version {} or one of candidates {:?}",
                                        run.evalset_version_id, run.candidate_ids
                                    )
                                })
                            })?;
                        sqlx::query("UPDATE schedule_firings SET run_id = $3 WHERE schedule_id = $1 AND due_at = $2")
                            .bind(firing.schedule_id)
                            .bind(firing.due_at.0)
                            .bind(id)
                            .execute(&mut *tx)
                            .await?;
                        Some(id)
                    }
                    None => None,
                };
                tx.commit().await?;
                Ok(Some(Firing {
                    run_id,
                    ..firing.clone()
                }))
            })
        }

        fn list_firings(&self, schedule_id: i64, limit: i64) -> StoreFuture<'_, Vec<Firing>> {
            Box::pin(async move {
                let rows: Vec<schedules::FiringRow> = sqlx::query_as(
                    "SELECT schedule_id, due_at, fired_at, run_id, missed, note FROM schedule_firings \
                     WHERE schedule_id = $1 ORDER BY due_at DESC LIMIT $2",
                )
                .bind(schedule_id)
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?;
                Ok(rows.into_iter().map(|r| r.into_firing(Self::TEXT)).collect())
            })
        }

        fn firing_of_run(&self, run_id: i64) -> StoreFuture<'_, Option<Firing>> {
            Box::pin(async move {
                let row: Option<schedules::FiringRow> = sqlx::query_as(
                    "SELECT schedule_id, due_at, fired_at, run_id, missed, note FROM schedule_firings WHERE run_id = $1",
                )
                .bind(run_id)
                .fetch_optional(self.pool())
                .await?;
                Ok(row.map(|r| r.into_firing(Self::TEXT)))
            })
        }
    };
}
pub(crate) use schedule_queries;
