//! A run assessed by a threshold-profile version: the one place a scorecard is assembled, for
//! the scorecard page, its exports, saved scorecards and the background verdicts (`verdicts`).
//! Everything is recomputed from the run's raw records; the choice only fixes the inputs
//! (profile version, incumbent, stated pipeline).
use std::collections::HashMap;

use crate::app::AppError;
use crate::domain::calibers::{HarnessReport, resumes_of};
use crate::domain::candidate::Candidate;
use crate::domain::pipeline::{PipelineDraft, PipelineSpec};
use crate::domain::run::{CandidateStop, RequestRecord, Run};
use crate::domain::scorecard::{self, CandidateOperability, RecordedVerdict, Scorecard, ScorecardInput, Verdict};
use crate::domain::thresholds::ThresholdProfile;
use crate::domain::validation::FieldErrors;
use crate::store::{DynStore, EvalSetVersion, StoreError};

/// What to assess a run by. No profile: the default profile (else the first); no version: the
/// profile's current one; the pipeline as typed (an invalid one is reported, not applied).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScorecardChoice {
    pub profile: Option<i64>,
    pub version: Option<u32>,
    pub incumbent: Option<i64>,
    pub pipeline: PipelineDraft,
}

/// A run's scorecard with everything it was assembled from.
pub struct RunScorecard {
    pub run: Run,
    pub version: Option<EvalSetVersion>,
    pub candidates: Vec<Candidate>,
    pub records: Vec<RequestRecord>,
    pub profile: ThresholdProfile,
    /// The profile's newest version (differs from `profile.version` when assessing an old one).
    pub current_version: u32,
    pub profiles: Vec<ThresholdProfile>,
    pub pipeline: PipelineSpec,
    pub pipeline_errors: FieldErrors,
    pub incumbent: Option<i64>,
    pub card: Scorecard,
    /// The harness's report on the run: an unreliable one flags the speed rules.
    pub harness: Option<HarnessReport>,
    /// Candidates stopped within the run: NO-GO, their stop the first reason.
    pub stops: Vec<CandidateStop>,
    /// When the run was resumed (wall clock µs): its aggregates are taken per segment.
    pub resumes: Vec<i64>,
}

impl RunScorecard {
    /// Each candidate's verdict, as a saved scorecard or the archive's verdicts record it.
    pub fn verdicts(&self) -> Vec<RecordedVerdict> {
        self.card
            .columns
            .iter()
            .map(|c| RecordedVerdict {
                candidate_id: c.candidate_id,
                candidate: c.name.clone(),
                verdict: c.verdict,
            })
            .collect()
    }
}

/// Loads the run and the chosen profile version, and builds the scorecard.
pub async fn assemble(store: &DynStore, run_id: i64, choice: &ScorecardChoice) -> Result<RunScorecard, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    let profiles = store.list_threshold_profiles().await?;
    let chosen_id = match choice.profile {
        Some(id) => id,
        None => crate::app::retirement::default_profile_id(store, &profiles)
            .await?
            .ok_or_else(|| {
                AppError::Invalid("there is no threshold profile yet: create one under Thresholds first".to_string())
            })?,
    };
    let current = profiles
        .iter()
        .find(|p| p.id == chosen_id)
        .ok_or_else(|| AppError::NotFound(format!("threshold profile #{chosen_id}")))?;
    let profile = match choice.version {
        Some(v) if v != current.version => store
            .get_threshold_profile(chosen_id, Some(v))
            .await?
            .ok_or_else(|| AppError::NotFound(format!("version {v} of threshold profile {:?}", current.name)))?,
        _ => current.clone(),
    };
    let current_version = current.version;
    let version = store.get_evalset_version(run.evalset_version_id).await?;
    // The candidates as the run measured them (its snapshot: names, prices, conditions), so
    // editing a candidate later changes nothing of this scorecard.
    let candidates: Vec<Candidate> = store.run_candidates(run.id).await?;
    // The judge may be a candidate outside the run: looked up among all of them.
    let all = store.list_candidates().await?;
    let incumbent = match choice.incumbent {
        Some(id) if !run.candidate_ids.contains(&id) => {
            return Err(AppError::Invalid(format!(
                "candidate #{id} is not part of run #{run_id}, so it cannot be the incumbent"
            )));
        }
        other => other,
    };
    let (pipeline, pipeline_errors) = match choice.pipeline.validate() {
        Ok(p) => (p, FieldErrors::default()),
        Err(e) => (PipelineSpec::default(), e),
    };
    let records = store.list_request_records(run.id).await?;
    let events = store.list_run_events(run.id).await?;
    let resumes = resumes_of(events.iter().map(|e| (e.at.0, e.message.as_str())));
    let operability = operability_evidence(store, &candidates).await?;
    let weights: HashMap<String, f64> = version
        .as_ref()
        .map(|v| v.file.cases.iter().map(|c| (c.id.clone(), c.weight())).collect())
        .unwrap_or_default();
    let mut card = scorecard::build(&ScorecardInput {
        run_concurrency: run.config.concurrency,
        candidates: &candidates,
        records: &records,
        weights: &weights,
        rules: &profile.rules,
        incumbent,
        pipeline: &pipeline,
        operability: &operability,
        judge: version.as_ref().map(|v| scorecard::JudgeInput {
            file: &v.file,
            config: run.config.judge.as_ref(),
            all_candidates: &all,
        }),
        resumes: &resumes,
    });
    let stops = store.list_candidate_stops(run_id).await?;
    mark_stopped(&mut card, &stops);
    Ok(RunScorecard {
        stops,
        harness: store.get_run_harness(run_id).await?,
        resumes,
        run,
        version,
        candidates,
        records,
        profile,
        current_version,
        profiles,
        pipeline,
        pipeline_errors,
        incumbent,
        card,
    })
}

/// A candidate stopped within the run is NO-GO whatever its partial figures say, and its stop
/// is its first reason ("stopped at staged start: …"): never silently missing, never a GO.
fn mark_stopped(card: &mut Scorecard, stops: &[CandidateStop]) {
    for column in &mut card.columns {
        if let Some(stop) = stops.iter().find(|s| s.candidate_id == column.candidate_id) {
            column.verdict = Verdict::NoGo;
            column.reasons.insert(0, stop.outcome());
        }
    }
}

/// The operability evidence a scorecard assesses, per candidate in order: its latest probe run
/// and its current readiness checklist (evidence lives with the candidate, not the run).
async fn operability_evidence(
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
