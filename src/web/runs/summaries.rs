//! A run's page summaries stored when it ends (the runner calls [`store_when_ended`]), so the
//! first view of a big run reads them instead of computing them from every record. Each is
//! computed by the one function its page uses (and caches with), nothing else, from one read
//! of the run's records.
use crate::app::runs::{RunRecords, RunVersion};
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
/// unfinished run).
pub async fn store_when_ended(state: &AppState, run_id: i64) -> Result<(), WebError> {
    let (run, _, candidates) = super::detail::load(state, &run_id.to_string()).await?;
    if !run.status.is_terminal() {
        return Ok(());
    }
    // The run's records were written since the planner last looked; its reads below (and its
    // pages' later) plan by its size, and its outlines are read from indexes alone.
    state.store.refresh_record_statistics().await?;
    // One read of the records (and of the eval-set version's outline) serves the three
    // summaries computed from them.
    let records = RunRecords::of(run.id);
    let version = RunVersion::of(&run);
    super::detail::cached_record_parts(state, &run, &version, &candidates, &records).await?;
    crate::web::archive::run_figures(state, &run, &version, &records).await?;
    let snapshot = state.store.run_candidates(run.id).await?;
    crate::app::scorecard::candidate_summaries(&state.store, &run, &version, &snapshot, &records).await?;
    drop(records);
    // The case index reads the records' lighter facts; its cases are read by index after.
    super::cases::case_index(state, &run, false).await?;
    state.store.refresh_record_statistics().await?;
    crate::release_freed_memory();
    Ok(())
}

/// Installs [`store_when_ended`] as the runner's end-of-run step (serve calls this once).
pub fn install(state: &AppState) {
    let hook_state = state.clone();
    state.runner.on_end(std::sync::Arc::new(move |run_id| {
        let state = hook_state.clone();
        Box::pin(async move {
            if let Err(e) = store_when_ended(&state, run_id).await {
                // The pages compute them on first view instead.
                tracing::warn!(run_id, error = %e, "could not store the run's summaries");
            }
        })
    }));
}
