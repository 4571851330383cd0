//! A run's page summaries stored when it ends (the runner calls [`store_when_ended`]), so the
//! first view of a big run reads them instead of computing them from every record. Each is
//! computed by the functions its page uses (and caches with), nothing else, from one read of
//! each candidate's records.
use crate::app::runs::{RunRecords, RunVersion, store_summary};
use crate::domain::calibers::ReadAfterSealing;
use crate::domain::run::RequestRecord;
use crate::domain::scorecard::{CandidateRecords, LevelsFold};
use crate::web::AppState;
use crate::web::error::WebError;

/// The cache kinds stored when a run ends: the run page's parts, its case index, its figures,
/// its scorecard summaries (what the scorecard, its exports and gate reports read).
pub const KINDS: [&str; 4] = [
    super::detail::RECORD_PARTS_KIND,
    super::cases::CASE_INDEX_KIND,
    crate::web::archive::FIGURES_KIND,
    crate::app::scorecard::SUMMARIES_KIND,
];

/// Computes and stores the run page's parts, its case index, its per-candidate figures and its
/// scorecard summaries, when the run is terminal (the functions store nothing for an
/// unfinished run). Each candidate's records are read once, every summary's part of them
/// computed, and let go before the next candidate's are read.
pub async fn store_when_ended(state: &AppState, run_id: i64) -> Result<(), WebError> {
    let (run, _, candidates) = super::detail::load(state, &run_id.to_string()).await?;
    if !crate::app::runs::summaries_are_stored(&run) {
        return Ok(());
    }
    // The run's records were written since the planner last looked; its reads below (and its
    // pages' later) plan by its size, and its outlines are read from indexes alone.
    state.store.refresh_record_statistics().await?;
    // The case index reads the records' lighter facts (its cases are read by index after). It
    // goes first: what malloc keeps of the memory it frees is then reused by the candidates'
    // records read next, where after them it came on top (a million requests: peak RSS 476 →
    // 454 MiB).
    super::cases::case_index(state, &run, false).await?;
    let records = RunRecords::of(run.id);
    let version = RunVersion::of(&run);
    let page = super::detail::PageContext::new(state, &run, version.outline(&state.store).await?, &candidates).await?;
    let resumes = records.resumes(&state.store).await?;
    let (mut parts, mut figures, mut summaries) = (Vec::new(), Vec::new(), Vec::new());
    for &id in &run.candidate_ids {
        // The figures that read chunk times are fed each record as it is read, and its chunk
        // times let go: what a candidate's records hold no longer grows with their answers. Each
        // repetition's chunk-time bins are reduced to its window's sums once its last record was
        // read: nor do they grow with the run's length.
        let groups = state.store.record_groups(run_id, id).await?;
        let mut timed = page.timed_parts(id, resumes).sealing(&groups);
        let mut levels = LevelsFold::new(id, resumes).sealing(&groups);
        let mut feed = |r: &mut RequestRecord| {
            timed.add(r);
            levels.add(r);
            r.chunks.keep_first_only();
        };
        let mine = records.of_candidate_feeding(&state.store, id, &mut feed).await?;
        // Their chunk-time bins let go before the rest is computed from the records.
        let in_read = |e: ReadAfterSealing| records.corrupt(id, e);
        let (levels, timed) = (levels.finish().map_err(in_read)?, timed.finish().map_err(in_read)?);
        let inputs = crate::app::scorecard::summary_inputs(&state.store, &version, &mine).await?;
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
            summaries.push(crate::app::scorecard::summary_of(&run, &inputs, &data, &mine));
        }
        drop(mine);
        records.release().await;
    }
    let parts = page.assemble(&state.store, parts).await?;
    store_summary(&state.store, &run, super::detail::RECORD_PARTS_KIND, &parts).await?;
    store_summary(&state.store, &run, crate::web::archive::FIGURES_KIND, &figures).await?;
    let snapshot = state.store.run_candidates(run.id).await?;
    crate::app::scorecard::store_summaries(&state.store, &run, summaries, &snapshot).await?;
    state.store.refresh_record_statistics().await?;
    crate::release_freed_memory();
    Ok(())
}

/// Installs [`store_when_ended`] as the runner's end-of-run step (serve calls this once, on the
/// runtime serving pages). The runner calls it from the measurement runtime; the step itself runs
/// on the runtime serving pages: it computes for seconds on end (a million requests: about a
/// minute) and would hold a `bakeoff-engine` thread that other runs' streams, up to the run cap
/// executing at once, take their timestamps on.
pub fn install(state: &AppState) {
    let hook_state = state.clone();
    let pages = tokio::runtime::Handle::current();
    state.runner.on_end(std::sync::Arc::new(move |run_id| {
        let state = hook_state.clone();
        let step = pages.spawn(async move { store_when_ended(&state, run_id).await });
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
