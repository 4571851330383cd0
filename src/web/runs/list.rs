//! `GET /runs`: every run, newest first, paginated on the server.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::RunRow;
use crate::engine::run::QueueView;
use crate::web::AppState;
use crate::web::error::{WebError, parse_page};
use crate::web::views::Pagination;

pub const RUNS_PER_PAGE: u32 = 20;

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub page: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "runs/list.html")]
pub struct RunsPage {
    pub nav: &'static str,
    pub rows: Vec<RunRow>,
    pub pager: Pagination,
    /// The admission caps, the runs executing and the queue, as this process sees them now.
    pub queue: QueueView,
}

pub async fn page(State(state): State<AppState>, Query(q): Query<PageQuery>) -> Result<RunsPage, WebError> {
    let page = parse_page(q.page.as_deref())?;
    let total = state.store.count_runs().await?;
    let pager = Pagination::new("/runs", page, RUNS_PER_PAGE, total);
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!(
            "page {page} of runs (there are {} pages)",
            pager.pages
        )));
    }
    let rows = super::run_rows(
        &state,
        state.store.list_runs(RUNS_PER_PAGE as i64, pager.offset()).await?,
    )
    .await?;
    Ok(RunsPage {
        nav: "runs",
        rows,
        pager,
        queue: state.runner.queue(),
    })
}
