//! `/api/v1/candidates`: the candidates page as JSON, and importing candidates in the shape of a
//! candidates file (JSON, or the TOML file itself), as `bakeoff candidate import` does. Keys are
//! never accepted nor returned: a candidate names the `BAKEOFF_KEY_…` variable holding its key.
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiResult, Body, Problem, ok, path_id, rfc3339};
use crate::app::files::candidates::{self, CandidateEntry, CandidatesFile};
use crate::domain::candidate::Candidate;
use crate::web::AppState;
use crate::web::error::sentence;
use crate::web::security::CurrentUser;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/candidates", get(list).post(import))
        .route("/api/v1/candidates/{id}", get(get_one))
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
    pub created_at: String,
    pub updated_at: String,
}

impl From<&Candidate> for CandidateView {
    fn from(c: &Candidate) -> Self {
        CandidateView {
            id: c.id,
            name: c.spec.name.clone(),
            file: CandidateEntry::from_spec(&c.spec),
            has_stored_key: c.spec.api_key.is_some(),
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
    let items = state
        .store
        .list_candidates()
        .await?
        .iter()
        .map(CandidateView::from)
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
    ok(&CandidateView::from(&candidate))
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
    ok(&ImportedCandidates {
        items: imported
            .iter()
            .map(|saved| ImportedCandidate {
                outcome: saved.outcome.as_str().to_string(),
                candidate: CandidateView::from(&saved.candidate),
                credentials_dropped: saved.credentials_note().map(|n| sentence(&n)),
            })
            .collect(),
    })
}
