//! `/api/v1/candidates`: the candidates page as JSON, and importing candidates in the shape of a
//! candidates file (JSON, or the TOML file itself), as `bakeoff candidate import` does. Keys are
//! never accepted nor returned: a candidate names the `BAKEOFF_KEY_…` variable holding its key.
//! `PUT /api/v1/candidates/{id}/worker-labels` sets the labels a worker must carry to measure one.
use std::collections::HashMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, put};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, ApiResult, Body, Problem, ok, path_id, rfc3339};
use crate::app::files::candidates::{self, CandidateEntry, CandidatesFile};
use crate::domain::candidate::Candidate;
use crate::web::AppState;
use crate::web::error::sentence;
use crate::web::security::CurrentUser;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/candidates", get(list).post(import))
        .route("/api/v1/candidates/{id}", get(get_one))
        .route("/api/v1/candidates/{id}/worker-labels", put(set_labels))
}

/// A stored candidate, without any key.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CandidateView {
    pub id: i64,
    pub name: String,
    /// The candidate as a candidates file's `[[candidate]]` entry holds it (what `POST
    /// /api/v1/candidates` takes back); `api_key_env` names the variable holding its key.
    pub file: CandidateEntry,
    /// Whether a key is stored for it (set in the browser by an admin); the key is never shown.
    pub has_stored_key: bool,
    /// Labels a worker must carry to measure it (sorted); empty: any worker.
    pub worker_labels: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl CandidateView {
    /// The view with the labels its workers must carry, from every candidate's (`labels`).
    fn labelled(c: &Candidate, labels: &HashMap<i64, Vec<String>>) -> Self {
        CandidateView {
            worker_labels: labels.get(&c.id).cloned().unwrap_or_default(),
            ..CandidateView::from(c)
        }
    }
}

/// Every candidate's worker labels, by candidate.
async fn all_labels(state: &AppState) -> Result<HashMap<i64, Vec<String>>, ApiError> {
    Ok(state.store.candidate_worker_labels().await?.into_iter().collect())
}

impl From<&Candidate> for CandidateView {
    fn from(c: &Candidate) -> Self {
        CandidateView {
            id: c.id,
            name: c.spec.name.clone(),
            file: CandidateEntry::from_spec(&c.spec),
            has_stored_key: c.spec.api_key.is_some(),
            worker_labels: Vec::new(),
            created_at: rfc3339(c.created_at),
            updated_at: rfc3339(c.updated_at),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CandidateList {
    pub items: Vec<CandidateView>,
}

/// What importing did to one candidate.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportedCandidate {
    /// `created`, `updated` or `unchanged`.
    pub outcome: String,
    pub candidate: CandidateView,
    /// Present when the file moved the candidate's base URL to another server, so its stored API
    /// key and key variable were removed (a key only goes to the server it was set for); says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_dropped: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportedCandidates {
    pub items: Vec<ImportedCandidate>,
}

/// Every candidate, by name.
#[utoipa::path(get, operation_id = "list_candidates", path = "/api/v1/candidates", tag = "candidates",
    responses((status = 200, description = "The candidates", body = CandidateList)))]
pub async fn list(State(state): State<AppState>) -> ApiResult {
    let labels = all_labels(&state).await?;
    let items = state
        .store
        .list_candidates()
        .await?
        .iter()
        .map(|c| CandidateView::labelled(c, &labels))
        .collect();
    ok(&CandidateList { items })
}

/// One candidate.
#[utoipa::path(get, operation_id = "get_candidate", path = "/api/v1/candidates/{id}", tag = "candidates",
    params(("id" = i64, Path, description = "The candidate's id")),
    responses((status = 200, description = "The candidate", body = CandidateView)))]
pub async fn get_one(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "candidate")?;
    let candidate = state
        .store
        .get_candidate(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("candidate #{id}")))?;
    ok(&CandidateView::labelled(&candidate, &all_labels(&state).await?))
}

/// The labels a candidate requires of the workers measuring it.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerLabels {
    /// Each one label: letters, digits, `.`, `_` or `-`, at most 40 characters; stored
    /// lowercased, sorted, without repeats. Empty: any worker may measure it.
    pub labels: Vec<String>,
}

/// Sets the labels a worker must carry to measure a candidate.
///
/// Its units go only to workers carrying every label (`bakeoff worker --labels …`); an empty
/// list lets any worker measure it. A change is audited as `candidate.worker_labels`; a bad
/// label is refused (422 naming `labels[i]`), nothing changed. Runs already measuring it are
/// not moved.
#[utoipa::path(put, operation_id = "set_candidate_worker_labels", path = "/api/v1/candidates/{id}/worker-labels", tag = "candidates",
    params(("id" = i64, Path, description = "The candidate's id")),
    request_body(content = WorkerLabels, content_type = "application/json"),
    responses((status = 200, description = "The labels as stored", body = WorkerLabels)))]
pub async fn set_labels(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(raw): Path<String>,
    body: Body,
) -> ApiResult {
    let id = path_id(&raw, "candidate")?;
    let candidate = state
        .store
        .get_candidate(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("candidate #{id}")))?;
    let asked: WorkerLabels = body.json()?;
    let labels = crate::app::candidates::worker_labels_of(&asked.labels)?;
    crate::app::candidates::set_worker_labels(&state.store, &user.actor(), &candidate, &labels).await?;
    ok(&WorkerLabels { labels })
}

/// Imports a candidates file.
///
/// Candidates are created or updated by name (a known name is updated, its stored key kept
/// unless its server moves: a move to another origin removes the stored key and a key variable
/// the file left as it was, and the answer says so in `credentials_dropped`). Setting or changing
/// `api_key_env` needs the admin role (403, nothing stored). The whole file is checked first; one wrong candidate refuses all of
/// them (422 naming each field, e.g. `candidate[1].base_url`).
#[utoipa::path(post, operation_id = "import_candidates", path = "/api/v1/candidates", tag = "candidates",
    request_body(content(
        (CandidatesFile = "application/json"),
        (String = "application/toml"),
    ), description = "A candidates file: its JSON form, or the TOML file itself"),
    responses((status = 200, description = "What was done to each candidate, in file order", body = ImportedCandidates)))]
pub async fn import(State(state): State<AppState>, user: CurrentUser, body: Body) -> ApiResult {
    let (text, lines) = body.file_text()?;
    let specs = candidates::parse("request body", &text).map_err(|e| Problem::from_file_error(&e, lines))?;
    let imported = candidates::import(&state.store, &specs, &user.actor()).await?;
    let labels = all_labels(&state).await?;
    ok(&ImportedCandidates {
        items: imported
            .iter()
            .map(|saved| ImportedCandidate {
                outcome: saved.outcome.as_str().to_string(),
                candidate: CandidateView::labelled(&saved.candidate, &labels),
                credentials_dropped: saved.credentials_note().map(|n| sentence(&n)),
            })
            .collect(),
    })
}
