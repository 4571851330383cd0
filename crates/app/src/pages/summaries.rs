//! A run's page summaries stored when it ends (the runner calls [`store_when_ended`]), so the
//! first view of a big run reads them instead of computing them from every record. Each is
//! computed by the functions its page uses (and caches with), nothing else, from one read of
//! each candidate's records.
use super::case_index::{CASE_INDEX_KIND, case_index};
use super::figures::FIGURES_KIND;
use super::run_page::{PageContext, RECORD_PARTS_KIND};
use crate::AppError;
use crate::domain::calibers::ReadAfterSealing;
use crate::domain::run::RequestRecord;
use crate::domain::scorecard::{CandidateRecords, LevelsFold};
use crate::runs::{RunRecords, RunVersion, store_summary};
use crate::scorecard::{SUMMARIES_KIND, store_summaries, summary_inputs, summary_of};
use crate::state::App;

/// The cache kinds stored when a run ends: the run page's parts, its case index, its figures,
/// its scorecard summaries (what the scorecard, its exports and gate reports read).
pub const KINDS: [&str; 4] = [RECORD_PARTS_KIND, CASE_INDEX_KIND, FIGURES_KIND, SUMMARIES_KIND];

/// Computes and stores the run page's parts, its case index, its per-candidate figures and its
/// scorecard summaries, when the run is terminal (the functions store nothing for an
/// unfinished run). Each candidate's records are read once, every summary's part of them
/// computed, and let go before the next candidate's are read.
pub async fn store_when_ended(app: &App, run_id: i64) -> Result<(), AppError> {
    let store = &app.store;
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    if !crate::runs::summaries_are_stored(&run) {
        return Ok(());
    }
    // As the run measured them (its snapshot), not as they are now.
    let candidates = store.run_candidates(run.id).await?;
    // The run's records were written since the planner last looked; its reads below (and its
    // pages' later) plan by its size, and its outlines are read from indexes alone.
    store.refresh_record_statistics().await?;
    // The case index reads the records' lighter facts (its cases are read by index after). It
    // goes first: what malloc keeps of the memory it frees is then reused by the candidates'
    // records read next, where after them it came on top (a million requests: peak RSS 476 →
    // 454 MiB).
    case_index(store, &app.views.case_index, &run, false).await?;
    let records = RunRecords::of(run.id);
    let version = RunVersion::of(&run);
    let page = PageContext::new(store, &run, version.outline(store).await?, &candidates).await?;
    let resumes = records.resumes(store).await?;
    let (mut parts, mut figures, mut summaries) = (Vec::new(), Vec::new(), Vec::new());
    for &id in &run.candidate_ids {
        // The figures that read chunk times are fed each record as it is read, and its chunk
        // times let go: what a candidate's records hold no longer grows with their answers. Each
        // repetition's chunk-time bins are reduced to its window's sums once its last record was
        // read: nor do they grow with the run's length.
        let groups = store.record_groups(run_id, id).await?;
        let mut timed = page.timed_parts(id, resumes).sealing(&groups);
        let mut levels = LevelsFold::new(id, resumes).sealing(&groups);
        let mut feed = |r: &mut RequestRecord| {
            timed.add(r);
            levels.add(r);
            r.chunks.keep_first_only();
        };
        let mine = records.of_candidate_feeding(store, id, &mut feed).await?;
        // Their chunk-time bins let go before the rest is computed from the records.
        let in_read = |e: ReadAfterSealing| records.corrupt(id, e);
        let (levels, timed) = (levels.finish().map_err(in_read)?, timed.finish().map_err(in_read)?);
        let inputs = summary_inputs(store, &version, &mine).await?;
        {
            // One preparation of the records for all three: each level's figures computed once
            // (as they were read), not once per summary.
            let data = CandidateRecords::new(id, &mine)
                .with_resumes(resumes)
                .with_levels(levels)
                .map_err(|e| records.corrupt(id, e))?;
            let weight = |case: &str| inputs.weights.get(case).copied().unwrap_or(1.0);
            parts.push(page.candidate_parts(&mine, &data, timed));
            figures.push(crate::domain::compare::figures_of(&data, &mine, weight));
            summaries.push(summary_of(&run, &inputs, &data, &mine));
        }
        drop(mine);
        records.release().await;
    }
    let parts = page.assemble(store, parts).await?;
    store_summary(store, &run, RECORD_PARTS_KIND, &parts).await?;
    store_summary(store, &run, FIGURES_KIND, &figures).await?;
    store_summaries(store, &run, summaries, &candidates).await?;
    store.refresh_record_statistics().await?;
    crate::memory::release_freed_memory();
    Ok(())
}

/// Installs [`store_when_ended`] as the runner's end-of-run step (`serve` and `worker` call this
/// once, on the runtime serving pages). The runner calls it from the measurement runtime; the step itself runs
/// on the runtime serving pages: it computes for seconds on end (a million requests: about a
/// minute) and would hold a `bakeoff-engine` thread that other runs' streams, up to the run cap
/// executing at once, take their timestamps on.
pub fn install(app: &App) {
    let hook_app = app.clone();
    let pages = tokio::runtime::Handle::current();
    app.runner.on_end(std::sync::Arc::new(move |run_id| {
        let app = hook_app.clone();
        let step = pages.spawn(async move { store_when_ended(&app, run_id).await });
        Box::pin(async move {
            // On failure the pages compute the summaries on first view instead.
            match step.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(run_id, error = %e, "could not store the run's summaries"),
                Err(e) => tracing::warn!(run_id, error = %e, "the end-of-run step stopped"),
            }
        })
    }));
}
