//! Verdicts of runs by threshold profiles (`run_verdicts`), written once for both backends:
//! `verdict_queries!` expands to the methods of this aggregate's trait and `verdict_helpers!` to the replacement
//! that saving a scorecard shares, both in `lib.rs` (`impl_store!`), so their paths are
//! written as seen from there.
//!
//! One row per (run, profile, candidate) holds the latest judgement of the run by the profile,
//! so the archive can filter by profile and verdict with an indexed `EXISTS`.
use super::{Result, RunVerdict, StoreError};
use crate::domain::Timestamp;
use crate::domain::scorecard::Verdict;

/// One row of `run_verdicts`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct VerdictRow {
    run_id: i64,
    profile_id: i64,
    candidate_id: i64,
    profile_version: i64,
    verdict: String,
    scorecard_id: Option<i64>,
    judged_at: i64,
}

impl VerdictRow {
    pub(crate) fn into_verdict(self) -> Result<RunVerdict> {
        let verdict = parse_verdict(&self.verdict).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "run_verdicts.verdict of run {} is {:?}, not GO, NO-GO or INCONCLUSIVE",
                self.run_id, self.verdict
            ))
        })?;
        Ok(RunVerdict {
            run_id: self.run_id,
            profile_id: self.profile_id,
            candidate_id: self.candidate_id,
            profile_version: u32::try_from(self.profile_version).map_err(|_| {
                StoreError::Corrupt(format!(
                    "run_verdicts.profile_version of run {} is out of range",
                    self.run_id
                ))
            })?,
            verdict,
            scorecard_id: self.scorecard_id,
            judged_at: Timestamp(self.judged_at),
        })
    }
}

/// "GO" / "NO-GO" / "INCONCLUSIVE" → the verdict.
pub fn parse_verdict(s: &str) -> Option<Verdict> {
    [Verdict::Go, Verdict::NoGo, Verdict::Inconclusive]
        .into_iter()
        .find(|v| v.as_str() == s)
}

macro_rules! verdict_helpers {
    () => {
        /// Replaces the run's verdicts by the profile (inside the caller's transaction).
        async fn replace_verdicts(
            conn: &mut <Db<Self> as sqlx::Database>::Connection,
            run_id: i64,
            profile_id: i64,
            profile_version: u32,
            scorecard_id: Option<i64>,
            verdicts: &[RecordedVerdict],
        ) -> Result<()> {
            sqlx::query("DELETE FROM run_verdicts WHERE run_id = $1 AND profile_id = $2")
                .bind(run_id)
                .bind(profile_id)
                .execute(&mut *conn)
                .await?;
            if verdicts.is_empty() {
                return Ok(());
            }
            let now = Timestamp::now().0;
            let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                "INSERT INTO run_verdicts (run_id, profile_id, candidate_id, profile_version, verdict, \
                 scorecard_id, judged_at) ",
            );
            qb.push_values(verdicts, |mut b, v| {
                b.push_bind(run_id)
                    .push_bind(profile_id)
                    .push_bind(v.candidate_id)
                    .push_bind(i64::from(profile_version))
                    .push_bind(v.verdict.as_str())
                    .push_bind(scorecard_id)
                    .push_bind(now);
            });
            // A candidate listed twice keeps its first verdict.
            qb.push(" ON CONFLICT (run_id, profile_id, candidate_id) DO NOTHING");
            qb.build().execute(&mut *conn).await?;
            Ok(())
        }
    };
}
pub(crate) use verdict_helpers;

macro_rules! verdict_queries {
    () => {
        fn save_run_verdicts<'a>(
            &'a self,
            run_id: i64,
            profile_id: i64,
            profile_version: u32,
            verdicts: &'a [RecordedVerdict],
        ) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let mut tx = self.begin().await?;
                Self::replace_verdicts(&mut tx, run_id, profile_id, profile_version, None, verdicts)
                    .await
                    .map_err(|e| {
                        rows::not_found_on_foreign_key(e, || format!("run {run_id} or threshold profile {profile_id}"))
                    })?;
                tx.commit().await?;
                Ok(())
            })
        }

        fn list_run_verdicts<'a>(&'a self, run_ids: &'a [i64], profile_id: i64) -> StoreFuture<'a, Vec<RunVerdict>> {
            Box::pin(async move {
                if run_ids.is_empty() {
                    return Ok(Vec::new());
                }
                let mut qb = sqlx::QueryBuilder::<Db<Self>>::new(
                    "SELECT run_id, profile_id, candidate_id, profile_version, verdict, scorecard_id, judged_at \
                     FROM run_verdicts WHERE profile_id = ",
                );
                qb.push_bind(profile_id).push(" AND run_id IN (");
                let mut ids = qb.separated(", ");
                for id in run_ids {
                    ids.push_bind(*id);
                }
                qb.push(") ORDER BY run_id, candidate_id");
                let rows: Vec<verdicts::VerdictRow> = qb.build_query_as().fetch_all(self.pool()).await?;
                rows.into_iter().map(verdicts::VerdictRow::into_verdict).collect()
            })
        }

        fn unjudged_runs(&self, limit: i64) -> StoreFuture<'_, Vec<(i64, i64)>> {
            Box::pin(async move {
                Ok(sqlx::query_as(
                    "SELECT runs.id, p.id FROM runs CROSS JOIN threshold_profiles p \
                     WHERE runs.status = 'finished' AND NOT EXISTS \
                       (SELECT 1 FROM run_verdicts rv WHERE rv.run_id = runs.id AND rv.profile_id = p.id) \
                     ORDER BY runs.id, p.id LIMIT $1",
                )
                .bind(limit.max(0))
                .fetch_all(self.pool())
                .await?)
            })
        }
    };
}
pub(crate) use verdict_queries;
