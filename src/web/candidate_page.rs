//! `GET /candidates/{id}`: one candidate — what is declared about it, whether it is retired, its
//! last endpoint probes, and the runs that measured it (newest first, paged) with their
//! verdicts by the default profile, each eval set linking to the candidate's history on it; and
//! `POST /candidates/{id}/worker-labels`, the labels a worker must carry to measure it.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AppState;
use super::candidates::CandidateRow;
use super::error::{WebError, parse_id, parse_page};
use super::runs::{RunRow, run_rows};
use super::security::CurrentUser;
use super::views::{FormBody, Pagination};
use crate::app::AppError;
use crate::app::candidates::{parse_worker_labels, set_worker_labels, worker_labels};
use crate::domain::retirement::ItemKind;
use crate::store::RunFilter;

/// Runs per page.
const PER_PAGE: u32 = 20;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/candidates/{id}", get(page))
        .route("/candidates/{id}/worker-labels", post(save_worker_labels))
}

/// The "measured only by workers labelled" form: what it shows, and its error when refused.
#[derive(Debug, Clone, Default)]
pub struct LabelsForm {
    /// The field's value: the stored labels ("eu, gpu-a"), or what was typed when refused.
    pub value: String,
    pub error: Option<String>,
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
    /// The labels it requires of its workers, as stored (empty: any worker).
    pub worker_labels: Vec<String>,
    pub labels_form: LabelsForm,
}

async fn page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<CandidatePage, WebError> {
    let id = parse_id(&raw, "candidate")?;
    let q = FormBody::parse(query.as_deref().unwrap_or_default().as_bytes());
    let page = parse_page(q.get("page"))?;
    build(&state, id, page, None).await
}

/// The page of candidate `id`; `refused` holds the labels form as typed with its error.
async fn build(state: &AppState, id: i64, page: u32, refused: Option<LabelsForm>) -> Result<CandidatePage, WebError> {
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
        if let Some(version) = state
            .store
            .get_evalset_version_head(item.run.evalset_version_id)
            .await?
            && !histories.iter().any(|h| h.evalset_id == version.evalset_id)
        {
            histories.push(HistoryLink {
                evalset_id: version.evalset_id,
                name: item.evalset_name.clone(),
            });
        }
    }
    let worker_labels = worker_labels(&state.store, id).await?;
    let labels_form = refused.unwrap_or_else(|| LabelsForm {
        value: worker_labels.join(", "),
        error: None,
    });
    Ok(CandidatePage {
        nav: "candidates",
        c: CandidateRow::from(&candidate).with_worker_labels(&worker_labels),
        retired,
        probes,
        runs: run_rows(state, items).await?,
        pager: Pagination::new(format!("/candidates/{id}"), page, PER_PAGE, total),
        histories,
        worker_labels,
        labels_form,
    })
}

/// Saves the labels a worker must carry to measure the candidate (blank: any worker), audited
/// as `candidate.worker_labels`; a bad label re-shows the page with the error (422), nothing
/// changed.
async fn save_worker_labels(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(raw): Path<String>,
    body: FormBody,
) -> Result<Response, WebError> {
    let id = parse_id(&raw, "candidate")?;
    let candidate = state
        .store
        .get_candidate(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("candidate #{id}")))?;
    let typed = body.get("labels").unwrap_or_default();
    let saved = match parse_worker_labels("labels", typed) {
        Ok(labels) => set_worker_labels(&state.store, &user.actor(), &candidate, &labels).await,
        Err(e) => Err(e),
    };
    match saved {
        Ok(changed) => {
            tracing::info!(candidate_id = id, changed, "candidate worker labels saved");
            Ok(Redirect::to(&format!("/candidates/{id}")).into_response())
        }
        Err(AppError::Fields(errors)) => {
            let form = LabelsForm {
                value: typed.to_string(),
                error: errors.get("labels").map(super::error::sentence),
            };
            let page = build(&state, id, 1, Some(form)).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}
