//! Each candidate's figures of a run (`domain::compare::Figures`), as the archive's comparisons
//! and history read them: stored when the run ends, computed a candidate at a time before.
use crate::AppError;
use crate::domain::compare::{Figures, figures_of};
use crate::domain::run::Run;
use crate::domain::scorecard::CandidateRecords;
use crate::live::Live;
use crate::runs::{RunRecords, RunVersion, store_summary, stored_summary};
use crate::store::DynStore;

/// Cache kind of a terminal run's per-candidate figures.
/// (2: aggregates from the one level computation, per level; 3: latencies per level and the
/// token sources, for comparing like with like; 4: per-level finals keyed by level, as the
/// scorecard reads them; 5: a run's headline TTFT, E2E and decode are its level's; 6: a
/// resumed run's aggregates per segment, with its segments; 7: downtime over every repetition; 8: bins on a fixed grid.)
pub const FIGURES_KIND: &str = "figures/8";

/// Per-candidate figures of a run, in the run's candidate order: read from the run's cached
/// summary when it is terminal, else computed from its records a candidate at a time (and
/// cached when terminal). A resumed run's aggregates are per segment, as on the run page and
/// the scorecard. `version` is read only when they are computed.
pub async fn run_figures(
    store: &DynStore,
    live: &Live<Vec<Figures>>,
    run: &Run,
    version: &RunVersion,
    records: &RunRecords,
) -> Result<Vec<Figures>, AppError> {
    if let Some(stored) = stored_summary(store, run, FIGURES_KIND).await? {
        return Ok(stored);
    }
    let every_candidate = async {
        let mut out = Vec::with_capacity(run.candidate_ids.len());
        for &id in &run.candidate_ids {
            out.push(candidate_figures(store, version, records, id).await?);
        }
        Ok::<_, AppError>(out)
    };
    // An unfinished run's are shared by its views (history, comparisons).
    let out = live.for_run(run, every_candidate).await?;
    store_summary(store, run, FIGURES_KIND, &out).await?;
    Ok(out)
}

/// One candidate's figures, from its records alone.
pub async fn candidate_figures(
    store: &DynStore,
    version: &RunVersion,
    records: &RunRecords,
    candidate_id: i64,
) -> Result<Figures, AppError> {
    let (mine, levels) = records.of_candidate_leveled(store, candidate_id, &mut |_| {}).await?;
    let resumes = records.resumes(store).await?;
    let weights = version.outline(store).await?.map(|v| v.weights()).unwrap_or_default();
    let data = CandidateRecords::new(candidate_id, &mine)
        .with_resumes(resumes)
        .with_levels(levels)
        .map_err(|e| records.corrupt(candidate_id, e))?;
    Ok(figures_of(&data, &mine, |case| {
        weights.get(case).copied().unwrap_or(1.0)
    }))
}
