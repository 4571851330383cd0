//! How far a run has got, from stored counts (no records loaded): what the terminal's progress
//! bar, the API's run status and the run page's bar show.
use serde::{Deserialize, Serialize};

use crate::AppError;
use crate::domain::run::Run;
use crate::store::DynStore;

/// Requests a run should make per candidate: cases (or the stated requests per level) × load
/// levels × repetitions, from the eval-set version's case count (0: the version is gone). A
/// duration limit may end levels early.
pub fn expected_requests(run: &Run, version_cases: usize) -> i64 {
    let cases = run.config.case_count(version_cases) as i64;
    let per_level = match run.config.requests_per_level {
        Some(n) if cases > 0 => i64::from(n),
        _ => cases,
    };
    per_level * run.config.loads().len() as i64 * i64::from(run.config.repetitions)
}

/// A run's status and progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunProgress {
    pub run_id: i64,
    pub status: String,
    pub terminal: bool,
    pub error: Option<String>,
    /// Measured attempts stored, over all candidates (at most `expected`; retries count once).
    pub done: i64,
    /// Requests the run should make over all candidates.
    pub expected: i64,
    /// Attempts that ended in an error.
    pub failed: i64,
    pub warmups: i64,
}

/// The progress of run `run_id`.
pub async fn progress(store: &DynStore, run_id: i64) -> Result<RunProgress, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    let version = store.get_evalset_version_head(run.evalset_version_id).await?;
    let per_candidate = expected_requests(&run, version.map_or(0, |v| v.case_count));
    let counts = store.run_progress(run_id).await?;
    let done = counts
        .iter()
        .map(|c| c.measured_attempts.min(per_candidate))
        .sum::<i64>();
    Ok(RunProgress {
        run_id,
        status: run.status.as_str().to_string(),
        terminal: run.status.is_terminal(),
        error: run.error.clone(),
        done,
        expected: per_candidate * run.candidate_ids.len() as i64,
        failed: counts.iter().map(|c| c.failed_attempts).sum(),
        warmups: counts.iter().map(|c| c.warmup_attempts).sum(),
    })
}
