//! A run assessed by a threshold-profile version: the one place a scorecard is assembled, for
//! the scorecard page, its exports, saved scorecards and the background verdicts (`verdicts`).
//! The run's raw records are reduced to one summary per candidate (`domain::scorecard::summary`:
//! measured inputs, never verdicts), stored with the run's other summaries when it ends, so a
//! scorecard of a big run costs what it shows; the choice only fixes the inputs (profile
//! version, incumbent, stated pipeline).
use std::collections::HashMap;

use crate::AppError;
use crate::domain::calibers::{HarnessReport, resumes_of};
use crate::domain::candidate::Candidate;
use crate::domain::evalset::EvalSetFile;
use crate::domain::pipeline::{PipelineDraft, PipelineSpec};
use crate::domain::review::calibration::JudgeFlag;
use crate::domain::run::{CandidateStop, Phase, RequestRecord, Run, RunConfig};
use crate::domain::scorecard::preference::is_preference_metric;
use crate::domain::scorecard::{
    self, CandidateOperability, CandidateRecords, CandidateSummary, JudgePricing, RecordedVerdict, Scorecard,
    SummaryContext, SummaryInput, Verdict,
};
use crate::domain::thresholds::ThresholdProfile;
use crate::domain::thresholds::key::MetricKey;
use crate::domain::validation::FieldErrors;
use crate::live::Live;
use crate::runs::{RunRecords, RunVersion, store_summary, stored_summary};
use crate::store::{DynStore, EvalSetVersionHead, StoreError};

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
    /// The run's eval-set version, its head only (the whole of a 100,000-case version takes
    /// half a second to read).
    pub version: Option<EvalSetVersionHead>,
    pub candidates: Vec<Candidate>,
    /// One per candidate, in `candidates` order: what the scorecard reads of the records.
    pub summaries: Vec<CandidateSummary>,
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
    /// The LLM judges grading this run that are flagged by their calibration against human
    /// labels (issue 50): every view and export of the scorecard says so.
    pub judge_flags: Vec<JudgeFlag>,
    /// Which SLO judged the SLO-based rules (`judging_slo_of`), None when no SLO is set.
    pub slo_note: Option<String>,
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
pub async fn assemble(
    store: &DynStore,
    live: &Live<Vec<CandidateSummary>>,
    run_id: i64,
    choice: &ScorecardChoice,
) -> Result<RunScorecard, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    let profiles = store.list_threshold_profiles().await?;
    let chosen_id = match choice.profile {
        Some(id) => id,
        None => {
            let evalset = store
                .get_evalset_version_head(run.evalset_version_id)
                .await?
                .map(|v| v.header.name);
            crate::profiles::judging_profile(store, evalset.as_deref())
                .await?
                .map(|(id, _)| id)
                .ok_or_else(|| {
                    AppError::Invalid(
                        "there is no threshold profile yet: create one under Thresholds first".to_string(),
                    )
                })?
        }
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
    let version = store.get_evalset_version_head(run.evalset_version_id).await?;
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
    let events = store.list_run_events(run.id).await?;
    let resumes = resumes_of(events.iter().map(|e| (e.at.0, e.message.as_str())));
    // A terminal run's are stored; its records and version outline are read only to compute them.
    let summaries = candidate_summaries(
        store,
        live,
        &run,
        &RunVersion::of(&run),
        &candidates,
        &RunRecords::of(run.id),
    )
    .await?;
    let mut operability = operability_evidence(store, &candidates).await?;
    // GPU energy per output token comes from the run's telemetry, read only when a rule asks.
    if profile
        .rules
        .iter()
        .any(|r| r.metric.starts_with("joules_per_output_token"))
    {
        let telemetry = crate::telemetry::run_telemetry(store, run.id).await?;
        for (ops, c) in operability.iter_mut().zip(&candidates) {
            if let Some(t) = telemetry.candidates.iter().find(|t| t.candidate_id == c.id) {
                ops.joules_per_output_token = t
                    .levels
                    .iter()
                    .filter_map(|l| Some((l.concurrency?, l.joules_per_output_token?)))
                    .collect();
            }
        }
    }
    // A find-capacity run's capacity @ SLO and the cost there, per candidate.
    let searches = store.list_run_capacity(run.id).await?;
    for ((ops, c), s) in operability.iter_mut().zip(&candidates).zip(&summaries) {
        if let Some(search) = searches.iter().find(|x| x.candidate_id == c.id) {
            let answered = s.answered;
            let accuracy = (answered.answers > 0).then(|| answered.correct as f64 / answered.answers as f64);
            ops.capacity = Some(crate::domain::capacity::CapacityEvidence::of(search, &c.spec, accuracy));
        }
    }
    // The blind comparisons are read only when a win-rate rule asks.
    let preferences = if profile
        .rules
        .iter()
        .any(|r| MetricKey::parse(&r.metric).is_ok_and(|k| is_preference_metric(k.base)))
    {
        store.list_preferences(Some(run.id)).await?
    } else {
        Vec::new()
    };
    let (slo_note, slo_mismatch) = judging_slo_of(&run.config, &profile);
    let mut card = scorecard::build_from(&SummaryInput {
        run_concurrency: run.config.load.judged_concurrency(run.config.concurrency),
        candidates: &candidates,
        summaries: &summaries,
        rules: &profile.rules,
        incumbent,
        pipeline: &pipeline,
        operability: &operability,
        judge: version.as_ref().map(|_| JudgePricing {
            config: run.config.judge.as_ref(),
            all_candidates: &all,
        }),
        preferences: &preferences,
        slo_mismatch,
    });
    let stops = store.list_candidate_stops(run_id).await?;
    mark_stopped(&mut card, &stops);
    // Only a run an LLM judge graded (judge calls or judge grades) reads the judges' calibration.
    let judged = summaries
        .iter()
        .any(|s| s.judge.is_some() || s.measurements.contains_key(JUDGE_GRADES_SLOT));
    let judge_flags = match judged {
        true => crate::review::judge_flags(store, run.id).await?,
        false => Vec::new(),
    };
    Ok(RunScorecard {
        stops,
        harness: store.get_run_harness(run_id).await?,
        resumes,
        run,
        version,
        candidates,
        summaries,
        profile,
        current_version,
        profiles,
        pipeline,
        pipeline_errors,
        incumbent,
        card,
        judge_flags,
        slo_note,
    })
}

/// Which SLO judged the run's SLO-based rules, in words (None: no SLO at all), and why those
/// rules are not measured when the profile judging has an SLO other than the one the run counted
/// its requests against (its figures would answer another question).
pub fn judging_slo_of(config: &RunConfig, profile: &ThresholdProfile) -> (Option<String>, Option<String>) {
    let judging = config.judging_slo();
    match profile.slo.filter(|s| s.is_set()) {
        Some(own) if own == judging.slo => (
            own.describe()
                .map(|limits| format!("SLO from profile {:?} v{}: {limits}", profile.name, profile.version)),
            None,
        ),
        Some(own) => {
            let counted = judging.describe().unwrap_or_else(|| "no SLO".to_string());
            let wanted = own.describe().unwrap_or_default();
            (
                Some(format!(
                    "SLO from profile {:?} v{}: {wanted} — but this run counted its requests against {counted}, so its SLO-based rules are not measured",
                    profile.name, profile.version
                )),
                Some(format!(
                    "this run counted its requests against {counted}, not this profile's SLO ({wanted}); run it again to judge it by this one"
                )),
            )
        }
        None => (judging.describe(), None),
    }
}

/// Where a summary keeps the mean score of the `llm-judge` grader: present when any answer of
/// the candidate was graded by a judge.
const JUDGE_GRADES_SLOT: &str = "grader_score:llm-judge";

/// Cache kind of a terminal run's scorecard summaries (`domain::scorecard::summary`).
/// (2: each candidate's case results as two sorted id lists, `paired::CaseResults`.)
/// (3: `slo_attainment`, counted against the run's SLO.)
pub const SUMMARIES_KIND: &str = "scorecard/3";

/// One summary per candidate of `candidates` (the run's, in its order): read from the run's
/// stored summaries when it is terminal, else reduced from its records a candidate at a time
/// (and stored when terminal). `version` and `records` are read only when they are computed.
pub async fn candidate_summaries(
    store: &DynStore,
    live: &Live<Vec<CandidateSummary>>,
    run: &Run,
    version: &RunVersion,
    candidates: &[Candidate],
    records: &RunRecords,
) -> Result<Vec<CandidateSummary>, AppError> {
    if let Some(stored) = stored_summaries(store, run, candidates).await? {
        return Ok(stored);
    }
    // Every candidate of the run, so a later scorecard of any of them reads the stored ones.
    let every_candidate = async {
        let mut all = Vec::with_capacity(run.candidate_ids.len());
        for &id in &run.candidate_ids {
            all.push(candidate_summary(store, run, version, records, id).await?);
        }
        Ok::<_, AppError>(all)
    };
    // An unfinished run's are shared by its views (its scorecard, exports, API, gate polls).
    let all = live.for_run(run, every_candidate).await?;
    let all = store_summaries(store, run, all, candidates).await?;
    Ok(in_order(&all, candidates).unwrap_or_default())
}

/// One candidate of the run's summary, from its records alone.
pub async fn candidate_summary(
    store: &DynStore,
    run: &Run,
    version: &RunVersion,
    records: &RunRecords,
    candidate_id: i64,
) -> Result<CandidateSummary, AppError> {
    let (mine, levels) = records.of_candidate_leveled(store, candidate_id, &mut |_| {}).await?;
    let resumes = records.resumes(store).await?;
    let inputs = summary_inputs(store, version, &mine).await?;
    let data = CandidateRecords::new(candidate_id, &mine)
        .with_resumes(resumes)
        .with_levels(levels)
        .map_err(|e| records.corrupt(candidate_id, e))?;
    Ok(summary_of(run, &inputs, &data, &mine))
}

/// What a candidate's summary reads besides its records: the cases' weights, and the eval-set
/// file when the records hold judge calls (the cases' graders name the judges; the whole version
/// is read only then).
pub struct SummaryInputs<'v> {
    pub weights: HashMap<String, f64>,
    file: Option<&'v EvalSetFile>,
}

/// A candidate's [`SummaryInputs`], read before its records are prepared (the preparation is not
/// `Sync`: no borrow of it may cross an await).
pub async fn summary_inputs<'v>(
    store: &DynStore,
    version: &'v RunVersion,
    records: &[RequestRecord],
) -> Result<SummaryInputs<'v>, AppError> {
    let weights = version
        .outline(store)
        .await?
        .map(|v| v.cases.iter().map(|c| (c.id.clone(), c.weight)).collect())
        .unwrap_or_default();
    let file = match records.iter().any(|r| r.phase == Phase::Judge) {
        true => version.get(store).await?.map(|v| &v.file),
        false => None,
    };
    Ok(SummaryInputs { weights, file })
}

/// A candidate's summary from its records prepared (`data`, resumed as the run was), whose level
/// figures are shared with the run page's and the archive's of the same records.
pub fn summary_of(
    run: &Run,
    inputs: &SummaryInputs<'_>,
    data: &CandidateRecords<'_>,
    records: &[RequestRecord],
) -> CandidateSummary {
    let cx = SummaryContext {
        slo: run.config.effective_slo(),
        run_concurrency: run.config.load.judged_concurrency(run.config.concurrency),
        weights: &inputs.weights,
        resumes: &data.resumes,
        file: inputs.file,
    };
    scorecard::summarise_data(data, records, &cx)
}

/// Adds the (empty) summaries of `candidates` outside the run to the run's candidates' `all`,
/// and stores them when the run is terminal; returns them all.
pub async fn store_summaries(
    store: &DynStore,
    run: &Run,
    mut all: Vec<CandidateSummary>,
    candidates: &[Candidate],
) -> Result<Vec<CandidateSummary>, AppError> {
    let cx = SummaryContext {
        slo: run.config.effective_slo(),
        run_concurrency: run.config.load.judged_concurrency(run.config.concurrency),
        weights: &HashMap::new(),
        resumes: &[],
        file: None,
    };
    for c in candidates.iter().filter(|c| !run.candidate_ids.contains(&c.id)) {
        all.push(scorecard::summarise(c.id, &[], &cx));
    }
    store_summary(store, run, SUMMARIES_KIND, &all).await?;
    Ok(all)
}

/// The summaries of `candidates`, in their order, when all of them are stored.
fn in_order(all: &[CandidateSummary], candidates: &[Candidate]) -> Option<Vec<CandidateSummary>> {
    candidates
        .iter()
        .map(|c| all.iter().find(|s| s.candidate_id == c.id).cloned())
        .collect()
}

/// The run's stored summaries of `candidates`, in their order; None when the run has none
/// stored (or not for every one of them, or they cannot be read).
async fn stored_summaries(
    store: &DynStore,
    run: &Run,
    candidates: &[Candidate],
) -> Result<Option<Vec<CandidateSummary>>, StoreError> {
    let all: Option<Vec<CandidateSummary>> = stored_summary(store, run, SUMMARIES_KIND).await?;
    Ok(all.and_then(|all| in_order(&all, candidates)))
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
        evidence.push(CandidateOperability {
            probes,
            checklist,
            ..Default::default()
        });
    }
    Ok(evidence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::{ProfileSlo, Slo};

    fn profile(slo: Option<Slo>) -> ThresholdProfile {
        ThresholdProfile {
            id: 3,
            name: "online".into(),
            description: String::new(),
            version: 2,
            rules: Vec::new(),
            slo,
        }
    }

    #[test]
    fn the_scorecard_says_which_slo_judged_and_refuses_another() {
        let own = Slo {
            ttft_ms: Some(500.0),
            target_attainment: Some(0.95),
            ..Slo::default()
        };
        let profiles = Slo {
            e2e_ms: Some(5000.0),
            target_attainment: Some(0.9),
            ..Slo::default()
        };
        // The run's own SLO judges when the profile has none.
        let config = RunConfig {
            slo: own,
            ..RunConfig::default()
        };
        assert_eq!(
            judging_slo_of(&config, &profile(None)),
            (
                Some("the run's own SLO: TTFT ≤ 500 ms; 95 % must meet all".to_string()),
                None
            )
        );
        // The run took the profile's SLO when it started: that judges, and the note says so.
        let taken = RunConfig {
            profile_slo: Some(ProfileSlo {
                profile_id: 3,
                profile: "online".into(),
                version: 2,
                slo: profiles,
            }),
            ..config.clone()
        };
        let (note, mismatch) = judging_slo_of(&taken, &profile(Some(profiles)));
        assert_eq!(
            note.as_deref(),
            Some("SLO from profile \"online\" v2: E2E ≤ 5 s; 90 % must meet all")
        );
        assert_eq!(mismatch, None);
        // A profile whose SLO differs from the one the run counted against: not measured, both named.
        let (note, mismatch) = judging_slo_of(&config, &profile(Some(profiles)));
        assert!(note.unwrap().contains("not measured"));
        let why = mismatch.unwrap();
        assert!(why.contains("TTFT ≤ 500 ms") && why.contains("E2E ≤ 5 s"), "{why}");
    }
}
