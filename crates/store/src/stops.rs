//! Candidates stopped within a run (`run_candidate_stops`), written once for both backends:
//! `stop_queries!` expands to the methods of this aggregate's trait in `lib.rs` (`impl_store!`), so its
//! paths are written as seen from there.
use super::text::TextCodec;
use super::{Result, StoreError};
use crate::domain::Timestamp;
use crate::domain::run::{CandidateStop, StopStage};

/// One row of `run_candidate_stops`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StopRow {
    run_id: i64,
    candidate_id: i64,
    stage: String,
    reason: String,
    stopped_at: i64,
}

impl StopRow {
    pub(crate) fn into_stop(self, text: TextCodec) -> Result<CandidateStop> {
        let stage = StopStage::parse(&self.stage).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "run_candidate_stops.stage of run {} is {:?}",
                self.run_id, self.stage
            ))
        })?;
        Ok(CandidateStop {
            run_id: self.run_id,
            candidate_id: self.candidate_id,
            stage,
            reason: text.decode(self.reason),
            at: Timestamp(self.stopped_at),
        })
    }
}

macro_rules! stop_queries {
    () => {
        fn save_candidate_stop<'a>(&'a self, stop: &'a CandidateStop) -> StoreFuture<'a, bool> {
            Box::pin(async move {
                let done = sqlx::query(
                    "INSERT INTO run_candidate_stops (run_id, candidate_id, stage, reason, stopped_at) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, candidate_id) DO NOTHING",
                )
                .bind(stop.run_id)
                .bind(stop.candidate_id)
                .bind(stop.stage.as_str())
                .bind(Self::TEXT.encode(&stop.reason))
                .bind(stop.at.0)
                .execute(self.pool())
                .await
                .map_err(|e| rows::not_found_on_foreign_key(e.into(), || format!("run {}", stop.run_id)))?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn list_candidate_stops(&self, run_id: i64) -> StoreFuture<'_, Vec<CandidateStop>> {
            Box::pin(async move {
                let rows: Vec<stops::StopRow> = sqlx::query_as(
                    "SELECT run_id, candidate_id, stage, reason, stopped_at FROM run_candidate_stops \
                     WHERE run_id = $1 ORDER BY stopped_at, candidate_id",
                )
                .bind(run_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(|r| r.into_stop(Self::TEXT)).collect()
            })
        }
    };
}
pub(crate) use stop_queries;
