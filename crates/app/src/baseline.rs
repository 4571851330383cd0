//! A scheduled run's changes since its schedule's baseline (`domain::regression`): both runs
//! judged by the same version of the schedule's profile (the one scorecard assembly), their
//! figures as the archive's comparisons read them, compared like with like. Stored with the
//! run once it has ended (a run summary), so a history page reads it rather than judging twice.
use crate::AppError;
use crate::domain::compare::{Conditions, Figures};
use crate::domain::regression::{ChangesSinceBaseline, Side, all_go, changes_since};
use crate::domain::run::{Run, RunStatus};
use crate::domain::schedule::{Baseline, Firing, Schedule};
use crate::live::Live;
use crate::runs::{RunRecords, RunVersion, store_summary, stored_summary};
use crate::scorecard::{RunScorecard, ScorecardChoice, assemble};
use crate::store::DynStore;

/// Cache kind of a scheduled run's changes since baseline.
pub const CHANGES_KIND: &str = "changes-since-baseline/1";

/// How many earlier firings "the last run that passed" looks back over.
const LOOK_BACK: i64 = 30;

/// A run judged and measured: its scorecard, and per column its figures and conditions.
struct Judged {
    scorecard: RunScorecard,
    figures: Vec<Figures>,
    conditions: Vec<Conditions>,
}

impl Judged {
    fn side(&self) -> Side<'_> {
        Side {
            card: &self.scorecard.card,
            figures: &self.figures,
            conditions: &self.conditions,
        }
    }
}

async fn judge(store: &DynStore, run: &Run, choice: &ScorecardChoice) -> Result<Judged, AppError> {
    let scorecard = assemble(store, &Live::new(), run.id, choice).await?;
    let all =
        crate::pages::figures::run_figures(store, &Live::new(), run, &RunVersion::of(run), &RunRecords::of(run.id))
            .await?;
    let hash = scorecard
        .version
        .as_ref()
        .map(|v| v.content_hash.get(..12).unwrap_or(&v.content_hash).to_string())
        .unwrap_or_else(|| "unknown".into());
    // In the scorecard's column order (the run's candidate order; figures are per run candidate).
    let figures: Vec<Figures> = scorecard
        .card
        .columns
        .iter()
        .map(|c| {
            all.iter()
                .find(|f| f.candidate_id == c.candidate_id)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let conditions = figures
        .iter()
        .map(|f| Conditions::of(&run.config, &hash, f, Vec::new()))
        .collect();
    Ok(Judged {
        scorecard,
        figures,
        conditions,
    })
}

/// The baseline run of `firing`'s run: the schedule's named run, or the latest earlier run of
/// the schedule whose every candidate was GO by `choice`. Err(why) when there is none.
async fn baseline_of(
    store: &DynStore,
    schedule: &Schedule,
    firing: &Firing,
    choice: &ScorecardChoice,
) -> Result<Result<(Run, Judged), String>, AppError> {
    match schedule.spec.baseline {
        Baseline::Run(id) if Some(id) == firing.run_id => Ok(Err("the run is its schedule's baseline".into())),
        Baseline::Run(id) => match store.get_run(id).await? {
            Some(run) if run.status.is_terminal() => {
                let judged = judge(store, &run, choice).await?;
                Ok(Ok((run, judged)))
            }
            Some(_) => Ok(Err(format!("baseline run #{id} has not ended"))),
            None => Ok(Err(format!("baseline run #{id} no longer exists"))),
        },
        Baseline::LastPassed => {
            for earlier in store.list_firings(schedule.id, LOOK_BACK).await? {
                let Some(id) = earlier.run_id.filter(|_| earlier.due_at.0 < firing.due_at.0) else {
                    continue;
                };
                let Some(run) = store.get_run(id).await? else { continue };
                if run.status != RunStatus::Finished {
                    continue;
                }
                let judged = judge(store, &run, choice).await?;
                if all_go(&judged.scorecard.card) {
                    return Ok(Ok((run, judged)));
                }
            }
            Ok(Err("no earlier run of this schedule passed yet".into()))
        }
    }
}

/// The changes since baseline of run `run_id`, None when no schedule started it (or its
/// schedule is gone) or it has not ended. Computed once, then read stored.
pub async fn changes_of_run(store: &DynStore, run_id: i64) -> Result<Option<ChangesSinceBaseline>, AppError> {
    let Some(firing) = store.firing_of_run(run_id).await? else {
        return Ok(None);
    };
    let Some(run) = store.get_run(run_id).await? else {
        return Ok(None);
    };
    if !run.status.is_terminal() {
        return Ok(None);
    }
    if let Some(stored) = stored_summary::<ChangesSinceBaseline>(store, &run, CHANGES_KIND).await? {
        return Ok(Some(stored));
    }
    let Some(schedule) = store.get_schedule(firing.schedule_id).await? else {
        return Ok(None);
    };
    let changes = if run.status != RunStatus::Finished {
        ChangesSinceBaseline {
            baseline_run_id: None,
            no_baseline: Some(format!("the run {}: nothing to compare", run.status.as_str())),
            changes: Vec::new(),
        }
    } else {
        let current = judge(
            store,
            &run,
            &ScorecardChoice {
                profile: schedule.spec.profile_id,
                ..Default::default()
            },
        )
        .await?;
        // The baseline judged by the very profile version that judged this run.
        let choice = ScorecardChoice {
            profile: Some(current.scorecard.profile.id),
            version: Some(current.scorecard.profile.version),
            ..Default::default()
        };
        match baseline_of(store, &schedule, &firing, &choice).await? {
            Ok((base_run, base)) => ChangesSinceBaseline {
                baseline_run_id: Some(base_run.id),
                no_baseline: None,
                changes: changes_since(&base.side(), &current.side()),
            },
            Err(why) => ChangesSinceBaseline {
                baseline_run_id: None,
                no_baseline: Some(why),
                changes: Vec::new(),
            },
        }
    };
    store_summary(store, &run, CHANGES_KIND, &changes).await?;
    Ok(Some(changes))
}
