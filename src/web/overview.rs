//! `/`: what bakeoff is, counts, recent runs and where to go next.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::routing::get;

use super::AppState;
use super::error::WebError;
use super::runs::RunRow;

pub fn router() -> Router<AppState> {
    Router::new().route("/", get(page))
}

#[derive(Template, WebTemplate)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub nav: &'static str,
    pub candidates: usize,
    pub evalsets: usize,
    pub runs: i64,
    pub profiles: usize,
    pub recent: Vec<RunRow>,
    pub demo_mock_url: Option<String>,
}

const RECENT_RUNS: i64 = 5;

async fn page(State(state): State<AppState>) -> Result<OverviewPage, WebError> {
    let store = &state.store;
    let candidates = store.list_candidates().await?.len();
    let evalsets = store.list_evalsets().await?.len();
    let runs = store.count_runs().await?;
    let profiles = store.list_threshold_profiles().await?.len();
    let recent = super::runs::run_rows(&state, store.list_runs(RECENT_RUNS, 0).await?).await?;
    Ok(OverviewPage {
        nav: "overview",
        candidates,
        evalsets,
        runs,
        profiles,
        recent,
        demo_mock_url: state.demo_mock_url.as_deref().map(str::to_string),
    })
}
