//! The verdict in a pipeline: a run started without the browser (by `bakeoff run start` or the
//! JSON API), judged by one threshold profile through the one scorecard assembly
//! (`app::scorecard::assemble`), optionally checked against an archived baseline run with the
//! scorecard's paired test, and summed up as a [`GateReport`] with the exit code CI reads.
//! The report is plain data (serde both ways), so a client of a team server writes the same
//! JSON, JUnit and Markdown files from what the API returns (`report`).

use serde::{Deserialize, Serialize};

use crate::AppError;
use crate::domain::candidate::Candidate;
use crate::domain::paired::{self, CaseResults, PairedOutcome};
use crate::domain::run::RunStatus;
use crate::domain::scorecard::{CandidateSummary, RuleState, Verdict};
use crate::engine::run::Runner;
use crate::files::settings::RunSettings;
use crate::runs::{RunRequest, create_run};
use crate::scorecard::{RunScorecard, ScorecardChoice, assemble, candidate_summaries};
use crate::store::DynStore;

pub mod progress;
pub mod report;

/// The exit codes of `bakeoff run start`, in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// 0: every candidate is GO (and no significant regression against the baseline).
    Go,
    /// 1: a candidate is NO-GO, or significantly less accurate than the baseline.
    NoGo,
    /// 2: no candidate is NO-GO, but some rule could not be decided.
    Inconclusive,
    /// 3: the input was wrong (a file, a name, a flag); nothing ran.
    Configuration,
    /// 4: the run failed or was cancelled (an unreachable server, a staged rollout that stopped).
    RunError,
}

impl Exit {
    pub fn code(&self) -> i32 {
        match self {
            Exit::Go => 0,
            Exit::NoGo => 1,
            Exit::Inconclusive => 2,
            Exit::Configuration => 3,
            Exit::RunError => 4,
        }
    }
}

/// What to run, resolved to stored things.
#[derive(Debug, Clone, PartialEq)]
pub struct GateRun {
    pub evalset_version_id: i64,
    pub candidate_ids: Vec<i64>,
    pub settings: RunSettings,
}

/// Creates and starts the run through `app::runs::create_run` (the run form's path); returns
/// its id. The judge candidate of the settings is named; it is resolved here.
pub async fn start(store: &DynStore, runner: &Runner, run: &GateRun) -> Result<i64, AppError> {
    let judge_candidate = match run.settings.judge_candidate.trim() {
        "" => String::new(),
        name => candidate_by_name(store, name).await?.id.to_string(),
    };
    let request = RunRequest {
        name: run.settings.name.clone(),
        evalset_version: run.evalset_version_id.to_string(),
        candidates: run.candidate_ids.iter().map(i64::to_string).collect(),
        draft: run.settings.draft.clone(),
        load: run.settings.load.clone(),
        judge: run.settings.judge,
        judge_candidate,
    };
    create_run(store, runner, &request).await
}

/// The stored candidate named `name`.
pub async fn candidate_by_name(store: &DynStore, name: &str) -> Result<Candidate, AppError> {
    store
        .list_candidates()
        .await?
        .into_iter()
        .find(|c| c.spec.name == name)
        .ok_or_else(|| AppError::NotFound(format!("candidate {name:?}")))
}

/// The newest version of the eval set named `name`.
pub async fn evalset_by_name(store: &DynStore, name: &str) -> Result<i64, AppError> {
    store
        .list_evalsets()
        .await?
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| s.latest_version_id)
        .ok_or_else(|| AppError::NotFound(format!("eval set {name:?}")))
}

/// The id of the threshold profile named `name`.
pub async fn profile_by_name(store: &DynStore, name: &str) -> Result<i64, AppError> {
    store
        .list_threshold_profiles()
        .await?
        .into_iter()
        .find(|p| p.name == name)
        .map(|p| p.id)
        .ok_or_else(|| AppError::NotFound(format!("threshold profile {name:?}")))
}

/// Checks that `baseline` is an archived run that can be compared against (finished).
pub async fn check_baseline(store: &DynStore, baseline: i64) -> Result<(), AppError> {
    let run = store
        .get_run(baseline)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("baseline run #{baseline}")))?;
    if run.status != RunStatus::Finished {
        return Err(AppError::Invalid(format!(
            "baseline run #{baseline} is {}; only a finished run can be a baseline",
            run.status.as_str()
        )));
    }
    Ok(())
}

/// One candidate compared with its counterpart in the baseline run on the cases both answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BaselineCheck {
    pub candidate: String,
    /// The baseline run's candidate it was compared with (None: the baseline has no counterpart).
    pub baseline_candidate: Option<String>,
    /// Cases right for this candidate only, for the baseline only, and graded for both.
    pub only_candidate: usize,
    pub only_baseline: usize,
    pub shared_cases: usize,
    pub p_value: Option<f64>,
    /// Significantly fewer cases right than the baseline (exact McNemar, p < 0.05).
    pub regression: bool,
    pub text: String,
}

/// Each candidate of the run against the baseline run: the same candidate (by id, else by
/// name), or the baseline's only candidate; the scorecard's paired test on shared cases.
pub fn compare_with_baseline(
    candidates: &[Candidate],
    summaries: &[CandidateSummary],
    baseline_candidates: &[Candidate],
    baseline_summaries: &[CandidateSummary],
    baseline_run: i64,
) -> Vec<BaselineCheck> {
    candidates
        .iter()
        .zip(summaries)
        .map(|(c, summary)| {
            let counterpart = baseline_candidates
                .iter()
                .find(|b| b.id == c.id)
                .or_else(|| baseline_candidates.iter().find(|b| b.spec.name == c.spec.name))
                .or(match baseline_candidates {
                    [only] => Some(only),
                    _ => None,
                });
            let Some(b) = counterpart else {
                return BaselineCheck {
                    candidate: c.spec.name.clone(),
                    baseline_candidate: None,
                    only_candidate: 0,
                    only_baseline: 0,
                    shared_cases: 0,
                    p_value: None,
                    regression: false,
                    text: format!(
                        "baseline run #{baseline_run} has no candidate {:?} (nor a single candidate to compare with)",
                        c.spec.name
                    ),
                };
            };
            let none = CaseResults::default();
            let theirs = baseline_summaries
                .iter()
                .find(|s| s.candidate_id == b.id)
                .map_or(&none, |s| &s.correct_cases);
            let outcome: PairedOutcome = paired::compare(&summary.correct_cases, theirs);
            let regression = outcome.significant() && outcome.only_b > outcome.only_a;
            let label_b = format!("baseline {} (run #{baseline_run})", b.spec.name);
            BaselineCheck {
                candidate: c.spec.name.clone(),
                baseline_candidate: Some(b.spec.name.clone()),
                only_candidate: outcome.only_a,
                only_baseline: outcome.only_b,
                shared_cases: outcome.cases,
                p_value: Some(outcome.p_value),
                regression,
                text: outcome.describe(&c.spec.name, &label_b),
            }
        })
        .collect()
}

/// One rule for one candidate, as CI reports show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuleResult {
    /// The stored metric key, e.g. `ttft_p95_ms@c=8`.
    pub metric: String,
    /// The rule in words, e.g. `TTFT p95 @c=8 ≤ 1000 ms`.
    pub rule: String,
    pub dimension: Option<String>,
    /// `pass`, `fail`, `inconclusive` or `not_measured`.
    pub state: String,
    /// The measured value with its unit, and its 90 % interval when there is one.
    pub measured: Option<String>,
    pub interval: Option<String>,
    /// `@c=4 · n=20 requests`.
    pub conditions: String,
    /// One line in words: why this state.
    pub reason: String,
    /// For an inconclusive rule: how much more data would likely settle it.
    pub settle: Option<String>,
}

/// One candidate's verdict with every rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CandidateResult {
    pub candidate_id: i64,
    pub name: String,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    pub rules: Vec<RuleResult>,
    pub baseline: Option<BaselineCheck>,
}

/// Everything CI needs from one run: the JSON report, and the source of the JUnit and Markdown ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GateReport {
    /// `bakeoff.gate/1`.
    pub format: String,
    pub run_id: i64,
    pub run_name: String,
    /// queued, running, finished, failed or cancelled.
    pub status: String,
    /// The run's error when it failed.
    pub error: Option<String>,
    pub evalset: Option<String>,
    pub evalset_hash: Option<String>,
    pub profile: String,
    pub profile_id: i64,
    pub profile_version: u32,
    pub baseline_run: Option<i64>,
    /// The worst candidate verdict (NO-GO before INCONCLUSIVE before GO), regressions counted as NO-GO.
    pub verdict: Option<Verdict>,
    pub exit: Exit,
    pub exit_code: i32,
    pub candidates: Vec<CandidateResult>,
    /// True when the harness flagged its own speed figures as unreliable (schedule lag, CPU).
    pub speed_unreliable: bool,
    /// LLM judges grading the run that their calibration against human labels flags.
    #[serde(default)]
    pub judge_flags: Vec<crate::domain::review::calibration::JudgeFlag>,
}

pub const REPORT_FORMAT: &str = "bakeoff.gate/1";

/// The run judged by `profile_id` (its current version), and against `baseline` when given.
/// A run that did not finish is reported with exit code 4 and no verdict.
pub async fn judge(
    store: &DynStore,
    run_id: i64,
    profile_id: i64,
    baseline: Option<i64>,
) -> Result<GateReport, AppError> {
    // A verdict is asked of an ended run, whose summaries are stored: no view shares them.
    let live = &crate::live::Live::new();
    let card = assemble(
        store,
        live,
        run_id,
        &ScorecardChoice {
            profile: Some(profile_id),
            ..ScorecardChoice::default()
        },
    )
    .await?;
    if card.run.status == RunStatus::Finished {
        // The archive's verdict filters see the run at once, not when the background worker wakes.
        store
            .save_run_verdicts(run_id, profile_id, card.profile.version, &card.verdicts())
            .await?;
    }
    let checks = match baseline {
        Some(b) if card.run.status == RunStatus::Finished => {
            check_baseline(store, b).await?;
            // The baseline's candidates as it measured them (names at the time), like its scorecard.
            let base_candidates: Vec<Candidate> = store.run_candidates(b).await?;
            let base_run = store
                .get_run(b)
                .await?
                .ok_or_else(|| AppError::NotFound(format!("run #{b}")))?;
            let base_summaries = candidate_summaries(
                store,
                live,
                &base_run,
                &crate::runs::RunVersion::of(&base_run),
                &base_candidates,
                &crate::runs::RunRecords::of(base_run.id),
            )
            .await?;
            compare_with_baseline(&card.candidates, &card.summaries, &base_candidates, &base_summaries, b)
        }
        _ => Vec::new(),
    };
    Ok(build_report(&card, baseline, checks))
}

/// The report of an assembled scorecard and its baseline checks.
pub fn build_report(card: &RunScorecard, baseline: Option<i64>, checks: Vec<BaselineCheck>) -> GateReport {
    let finished = card.run.status == RunStatus::Finished;
    let candidates: Vec<CandidateResult> = card
        .card
        .columns
        .iter()
        .enumerate()
        .map(|(i, col)| CandidateResult {
            candidate_id: col.candidate_id,
            name: col.name.clone(),
            verdict: col.verdict,
            reasons: col.reasons.clone(),
            rules: card
                .card
                .rows
                .iter()
                .map(|row| {
                    let cell = &row.cells[i];
                    let m = &cell.measurement;
                    RuleResult {
                        metric: row.rule.metric.clone(),
                        rule: format!("{} {}", row.label, row.threshold_text()),
                        dimension: row.dimension.map(|d| d.as_str().to_string()),
                        state: match cell.assessment.state {
                            RuleState::NotMeasured => "not_measured".to_string(),
                            s => s.as_str().to_string(),
                        },
                        measured: m.value.map(|v| row.format(v)),
                        interval: m
                            .interval
                            .map(|(lo, hi)| format!("{} – {}", row.format(lo), row.format(hi))),
                        conditions: m.conditions(),
                        reason: cell.assessment.reason.clone(),
                        settle: cell.assessment.settle.as_ref().map(|s| s.describe()),
                    }
                })
                .collect(),
            baseline: checks.iter().find(|b| b.candidate == col.name).cloned(),
        })
        .collect();
    let regression = checks.iter().any(|c| c.regression);
    let verdict = finished.then(|| {
        let verdicts: Vec<Verdict> = candidates.iter().map(|c| c.verdict).collect();
        if regression || verdicts.contains(&Verdict::NoGo) {
            Verdict::NoGo
        } else if !verdicts.is_empty() && verdicts.iter().all(|v| *v == Verdict::Go) {
            Verdict::Go
        } else {
            Verdict::Inconclusive
        }
    });
    let exit = match verdict {
        None => Exit::RunError,
        Some(Verdict::Go) => Exit::Go,
        Some(Verdict::NoGo) => Exit::NoGo,
        Some(Verdict::Inconclusive) => Exit::Inconclusive,
    };
    GateReport {
        format: REPORT_FORMAT.to_string(),
        run_id: card.run.id,
        run_name: card.run.name.clone(),
        status: card.run.status.as_str().to_string(),
        error: card.run.error.clone(),
        evalset: card.version.as_ref().map(|v| v.header.name.clone()),
        evalset_hash: card.version.as_ref().map(|v| v.content_hash.clone()),
        profile: card.profile.name.clone(),
        profile_id: card.profile.id,
        profile_version: card.profile.version,
        baseline_run: baseline,
        verdict,
        exit,
        exit_code: exit.code(),
        candidates,
        speed_unreliable: card.harness.as_ref().is_some_and(|h| h.unreliable),
        judge_flags: card.judge_flags.clone(),
    }
}
