//! Runs: the list, the "new run" form, and a run's live page with its first side-by-side table.
use axum::Router;
use axum::routing::{get, post};

use super::AppState;
use super::archive::list::VerdictCell;
use super::error::WebError;
use crate::store::RunListItem;

mod again;
mod cases;
mod detail;
mod events;
mod list;
pub(crate) mod new;
mod telemetry;

pub use detail::{LiveView, RunPage};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/runs", get(list::page).post(new::create))
        .route("/runs/new", get(new::form))
        .route("/runs/estimate", get(new::estimate_fragment))
        .route("/runs/{id}", get(detail::page))
        .route("/runs/{id}/live", get(detail::live))
        .route("/runs/{id}/events", get(events::events))
        .route("/runs/{id}/cases", get(cases::page))
        .route("/runs/{id}/timeline", get(cases::timeline))
        .route("/runs/{id}/telemetry", get(telemetry::page))
        .route("/runs/{id}/cancel", post(detail::cancel))
        .route("/runs/{id}/again", post(again::again))
        .route("/runs/{id}/resume", post(again::resume))
}

/// One row of a runs table (overview and list).
#[derive(Debug, Clone)]
pub struct RunRow {
    pub id: i64,
    pub name: String,
    pub evalset: String,
    pub candidates: String,
    pub status: &'static str,
    pub created: String,
    /// Start to end (or to now while it executes); "—" before it starts.
    pub duration: String,
    pub records: i64,
    /// Each candidate's verdict by the default profile (the archive's), once judged.
    pub verdicts: Vec<VerdictCell>,
}

/// The runs table's rows for these runs, with their verdicts by the default threshold profile
/// (the one the archive shows when none is chosen).
pub async fn run_rows(state: &AppState, items: Vec<RunListItem>) -> Result<Vec<RunRow>, WebError> {
    let profiles = state.store.list_threshold_profiles().await?;
    let (_, shown) = super::archive::list::resolve(state, &mut Default::default(), &profiles).await?;
    let verdicts = super::archive::list::verdicts_of(state, &items, shown.as_ref()).await?;
    let now = crate::domain::Timestamp::now();
    Ok(items
        .into_iter()
        .map(|item| {
            let run = &item.run;
            let duration = run.started_at.map_or_else(
                || crate::web::views::NOT_MEASURED.to_string(),
                |start| {
                    let end = run.finished_at.unwrap_or(now);
                    crate::domain::format::duration((end.0 - start.0).max(0) as f64 / 1000.0)
                },
            );
            let verdicts = shown.as_ref().map_or_else(Vec::new, |p| {
                super::archive::list::verdict_cells(p, &run.candidate_ids, &item.candidate_names, run.id, &verdicts)
            });
            RunRow {
                id: run.id,
                name: run.name.clone(),
                evalset: item.evalset_name.clone(),
                candidates: item.candidate_names.join(", "),
                status: run.status.as_str(),
                created: run.created_at.display(),
                duration,
                records: item.record_count,
                verdicts,
            }
        })
        .collect())
}
