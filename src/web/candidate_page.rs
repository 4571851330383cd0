//! `GET /candidates/{id}`: one candidate — what is declared about it, whether it is retired, its
//! last endpoint probes, and the runs that measured it (newest first, paged) with their
//! verdicts by the default profile, each eval set linking to the candidate's history on it.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;

use super::AppState;
use super::candidates::CandidateRow;
use super::error::{WebError, parse_id, parse_page};
use super::runs::{RunRow, run_rows};
use super::views::{FormBody, Pagination};
use crate::domain::retirement::ItemKind;
use crate::store::RunFilter;

/// Runs per page.
const PER_PAGE: u32 = 20;

pub fn router() -> Router<AppState> {
    Router::new().route("/candidates/{id}", get(page))
}

/// The last probe run, summarised.
#[derive(Debug, Clone)]
pub struct ProbeSummary {
    pub at: String,
    pub passed: usize,
    pub failed: Vec<&'static str>,
}

/// An eval set the candidate was measured on: its history link.
#[derive(Debug, Clone)]
pub struct HistoryLink {
    pub evalset_id: i64,
    pub name: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "candidates/page.html")]
pub struct CandidatePage {
    pub nav: &'static str,
    pub c: CandidateRow,
    pub retired: bool,
    pub probes: Option<ProbeSummary>,
    pub runs: Vec<RunRow>,
    pub pager: Pagination,
    pub histories: Vec<HistoryLink>,
}

async fn page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<CandidatePage, WebError> {
    let id = parse_id(&raw, "candidate")?;
    let q = FormBody::parse(query.as_deref().unwrap_or_default().as_bytes());
    let page = parse_page(q.get("page"))?;
    let candidate = state
        .store
        .get_candidate(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("candidate #{id}")))?;
    let retired = crate::app::retirement::retired(&state.store, ItemKind::Candidate)
        .await?
        .contains(&id);
    let probes = state
        .store
        .list_probe_runs(id, 1)
        .await?
        .into_iter()
        .next()
        .map(|last| ProbeSummary {
            at: last.at.display(),
            passed: last.report.counts().0,
            failed: last.report.failed_labels(),
        });
    let filter = RunFilter {
        candidate_id: Some(id),
        ..Default::default()
    };
    let total = state.store.count_runs_filtered(&filter).await?;
    let items = state
        .store
        .list_runs_filtered(&filter, PER_PAGE as i64, (page.saturating_sub(1) * PER_PAGE) as i64)
        .await?;
    let mut histories: Vec<HistoryLink> = Vec::new();
    for item in &items {
        if let Some(version) = state.store.get_evalset_version(item.run.evalset_version_id).await?
            && !histories.iter().any(|h| h.evalset_id == version.evalset_id)
        {
            histories.push(HistoryLink {
                evalset_id: version.evalset_id,
                name: item.evalset_name.clone(),
            });
        }
    }
    Ok(CandidatePage {
        nav: "candidates",
        c: CandidateRow::from(&candidate),
        retired,
        probes,
        runs: run_rows(&state, items).await?,
        pager: Pagination::new(format!("/candidates/{id}"), page, PER_PAGE, total),
        histories,
    })
}
