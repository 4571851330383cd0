//! Verdicts of finished runs by every threshold profile, stored so the archive can filter by
//! profile and verdict without judging records on each page view.
//!
//! A background worker judges each finished run by each profile (its version current at that
//! moment; no incumbent, no pipeline — a saved scorecard with those replaces the row). It works
//! only while no run is executing, so judging (bootstrap intervals over every record) never
//! takes CPU from a measurement; it wakes when a run ends and once a minute (new profiles, runs
//! finished before this version, imports).
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::domain::candidate::Candidate;
use crate::domain::pipeline::PipelineSpec;
use crate::domain::scorecard::{self, CandidateOperability, RecordedVerdict, ScorecardInput};
use crate::store::{DynStore, StoreError};

/// How often the worker looks for unjudged runs without being woken.
pub const RECHECK: Duration = Duration::from_secs(60);
/// Runs judged per look (the worker looks again at once while there are more).
const BATCH: i64 = 50;

/// Judges `run_id` by the current version of `profile_id` and stores the verdicts. Returns
/// how many candidates were judged (0 when the run or profile is gone, or has no candidates).
pub async fn judge_and_store(store: &DynStore, run_id: i64, profile_id: i64) -> Result<usize, StoreError> {
    let Some(verdicts) = judge(store, run_id, profile_id).await? else {
        return Ok(0);
    };
    let (version, verdicts) = verdicts;
    store.save_run_verdicts(run_id, profile_id, version, &verdicts).await?;
    Ok(verdicts.len())
}

/// The run's verdicts by the profile's current version, as a saved scorecard without incumbent
/// or pipeline would record them; None when the run or profile does not exist.
pub async fn judge(
    store: &DynStore,
    run_id: i64,
    profile_id: i64,
) -> Result<Option<(u32, Vec<RecordedVerdict>)>, StoreError> {
    let Some(run) = store.get_run(run_id).await? else {
        return Ok(None);
    };
    let Some(profile) = store.get_threshold_profile(profile_id, None).await? else {
        return Ok(None);
    };
    let all = store.list_candidates().await?;
    let candidates: Vec<Candidate> = run
        .candidate_ids
        .iter()
        .filter_map(|id| all.iter().find(|c| c.id == *id).cloned())
        .collect();
    let version = store.get_evalset_version(run.evalset_version_id).await?;
    let weights: HashMap<String, f64> = version
        .as_ref()
        .map(|v| v.file.cases.iter().map(|c| (c.id.clone(), c.weight())).collect())
        .unwrap_or_default();
    let records = store.list_request_records(run_id).await?;
    let operability = operability_evidence(store, &candidates).await?;
    let card = scorecard::build(&ScorecardInput {
        run_concurrency: run.config.concurrency,
        candidates: &candidates,
        records: &records,
        weights: &weights,
        rules: &profile.rules,
        incumbent: None,
        pipeline: &PipelineSpec::default(),
        operability: &operability,
        // Verdicts do not depend on what the judge calls cost.
        judge: None,
    });
    let verdicts = card
        .columns
        .iter()
        .map(|c| RecordedVerdict {
            candidate_id: c.candidate_id,
            candidate: c.name.clone(),
            verdict: c.verdict,
        })
        .collect();
    Ok(Some((profile.version, verdicts)))
}

impl super::Runner {
    /// Starts the background worker that judges finished runs by every profile (see the module
    /// comment). Call once per process.
    pub fn spawn_judge(&self) {
        let runner = self.clone();
        tokio::spawn(async move {
            // Pairs that could not be judged (no candidates, a store error) are not retried in
            // this process, so one bad run cannot keep the worker busy.
            let mut skipped: HashSet<(i64, i64)> = HashSet::new();
            loop {
                let pending = match runner.store.unjudged_runs(BATCH + skipped.len() as i64).await {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!(error = %e, "listing unjudged runs failed");
                        Vec::new()
                    }
                };
                let pending: Vec<(i64, i64)> = pending.into_iter().filter(|p| !skipped.contains(p)).collect();
                let mut judged = 0;
                for (run_id, profile_id) in pending {
                    // Never compete with a measurement for CPU.
                    runner.until_idle().await;
                    match judge_and_store(&runner.store, run_id, profile_id).await {
                        Ok(0) => {
                            skipped.insert((run_id, profile_id));
                        }
                        Ok(n) => {
                            judged += 1;
                            tracing::debug!(run_id, profile_id, candidates = n, "run judged");
                        }
                        Err(e) => {
                            tracing::warn!(run_id, profile_id, error = %e, "judging a finished run failed");
                            skipped.insert((run_id, profile_id));
                        }
                    }
                }
                if judged > 0 {
                    continue;
                }
                let woken = runner.judge_wake.clone();
                let _ = tokio::time::timeout(RECHECK, woken.notified()).await;
            }
        });
    }

    /// Resolves when no run is executing.
    async fn until_idle(&self) {
        loop {
            let idle = self.idle.clone();
            let notified = idle.notified();
            if self.lock().executing.is_empty() {
                return;
            }
            // Bounded, in case a notification raced the check.
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }
}

/// The operability evidence a scorecard judges, per candidate in order: its latest probe run
/// and its current readiness checklist (evidence lives with the candidate, not the run).
pub async fn operability_evidence(
    store: &DynStore,
    candidates: &[Candidate],
) -> Result<Vec<CandidateOperability>, StoreError> {
    let mut evidence = Vec::with_capacity(candidates.len());
    for c in candidates {
        let probes = store
            .list_probe_runs(c.id, 1)
            .await?
            .into_iter()
            .next()
            .map(|p| p.report);
        let checklist = store
            .checklist_history(c.id)
            .await?
            .into_iter()
            .next()
            .map(|v| v.answers);
        evidence.push(CandidateOperability { probes, checklist });
    }
    Ok(evidence)
}
