//! Verdicts of finished runs by every threshold profile, stored so the archive can filter by
//! profile and verdict without assessing records on each page view.
//!
//! A background worker assesses each finished run by each profile (its version current at that
//! moment; no incumbent, no pipeline — a saved scorecard with those replaces the row). It works
//! only while no run is executing, so assessing (bootstrap intervals over every record) never
//! takes CPU from a measurement; it wakes when a run ends and once a minute (new profiles, runs
//! finished before this version, imports).
use std::collections::HashSet;
use std::time::Duration;

use crate::AppError;
use crate::engine::run::Runner;
use crate::scorecard::{ScorecardChoice, assemble};
use crate::store::DynStore;

/// How often the worker looks for unassessed runs without being woken.
pub const RECHECK: Duration = Duration::from_secs(60);
/// Runs assessed per look (the worker looks again at once while there are more).
const BATCH: i64 = 50;

/// Assesses `run_id` by the current version of `profile_id` and stores the verdicts. Returns
/// how many candidates were assessed (0 when the run has no candidates).
pub async fn store_verdicts(store: &DynStore, run_id: i64, profile_id: i64) -> Result<usize, AppError> {
    let choice = ScorecardChoice {
        profile: Some(profile_id),
        ..ScorecardChoice::default()
    };
    // A finished run's summaries are stored: nothing to share with other views.
    let scorecard = assemble(store, &crate::live::Live::new(), run_id, &choice).await?;
    let verdicts = scorecard.verdicts();
    store
        .save_run_verdicts(run_id, profile_id, scorecard.profile.version, &verdicts)
        .await?;
    Ok(verdicts.len())
}

/// Starts the background worker that assesses finished runs by every profile (see the module
/// comment). Call once per process.
pub fn spawn(store: DynStore, runner: Runner) {
    tokio::spawn(async move {
        // Pairs that could not be assessed (gone, no candidates, a store error) are not retried
        // in this process, so one bad run cannot keep the worker busy.
        let mut skipped: HashSet<(i64, i64)> = HashSet::new();
        loop {
            let pending = match store.unjudged_runs(BATCH + skipped.len() as i64).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "listing unassessed runs failed");
                    Vec::new()
                }
            };
            let pending: Vec<(i64, i64)> = pending.into_iter().filter(|p| !skipped.contains(p)).collect();
            let mut assessed = 0;
            for (run_id, profile_id) in pending {
                // Never compete with a measurement for CPU.
                runner.until_idle().await;
                match store_verdicts(&store, run_id, profile_id).await {
                    // The run or the profile is gone, or the run has no candidates.
                    Ok(0) | Err(AppError::NotFound(_)) => {
                        skipped.insert((run_id, profile_id));
                    }
                    Ok(n) => {
                        assessed += 1;
                        tracing::debug!(run_id, profile_id, candidates = n, "run assessed");
                    }
                    Err(e) => {
                        tracing::warn!(run_id, profile_id, error = %e, "assessing a finished run failed");
                        skipped.insert((run_id, profile_id));
                    }
                }
            }
            if assessed > 0 {
                continue;
            }
            let _ = tokio::time::timeout(RECHECK, runner.run_ended().notified()).await;
        }
    });
}
