//! Runs: the list, the "new run" form, and a run's live page with its first side-by-side table.
use axum::Router;
use axum::routing::{get, post};

use super::AppState;
use crate::store::RunListItem;

mod again;
mod cases;
mod detail;
mod events;
mod list;
mod new;
pub(crate) mod report;

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
        .route("/runs/{id}/cancel", post(detail::cancel))
        .route("/runs/{id}/again", post(again::again))
        .route("/runs/{id}/resume", post(again::resume))
}

/// One row of a runs table (overview and list).
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: i64,
    pub name: String,
    pub evalset: String,
    pub candidates: String,
    pub status: &'static str,
    pub created: String,
    pub records: i64,
}

impl From<RunListItem> for RunRow {
    fn from(item: RunListItem) -> Self {
        RunRow {
            id: item.run.id,
            name: item.run.name,
            evalset: item.evalset_name,
            candidates: item.candidate_names.join(", "),
            status: item.run.status.as_str(),
            created: item.run.created_at.display(),
            records: item.record_count,
        }
    }
}
