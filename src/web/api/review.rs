//! The review queue through the API (issue 50; docs/review.md), so a team can label from its
//! own tool: a run's queue with its progress (filled from the graders on request), the items
//! offered to the caller next, one item's view, labels, claims, skips and assignments, blind
//! comparisons and their win rates, and an LLM judge's calibration. The same `app::review`
//! functions as the pages, so a label saved here is the label the page shows.
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiResult, Body, Params, Problem, ok, path_id};
use crate::app::review as use_case;
use crate::domain::review::LabelInput;
use crate::domain::review::pairwise::Choice;
use crate::web::AppState;
use crate::web::security::CurrentUser;

/// Who labels, claims and compares: the account's name (a token acts as its user), so a label
/// saved here and one saved on the page are the same labeller's.
fn who(user: &CurrentUser) -> String {
    user.user().map_or_else(|| user.name.clone(), |u| u.username.clone())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/runs/{id}/review", get(run_queue))
        .route("/api/v1/runs/{id}/review/fill", post(fill))
        .route("/api/v1/review/items", get(offered))
        .route("/api/v1/review/items/{id}", get(item))
        .route("/api/v1/review/items/{id}/label", post(label))
        .route("/api/v1/review/items/{id}/claim", post(claim))
        .route("/api/v1/review/items/{id}/skip", post(skip))
        .route("/api/v1/review/items/{id}/assign", post(assign))
        .route("/api/v1/runs/{id}/review/preferences", post(prefer))
        .route("/api/v1/runs/{id}/review/win-rates", get(win_rates))
        .route("/api/v1/judges/{name}/calibration", get(calibration))
}

/// A label, as the labelling page's form sends it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct LabelRequest {
    /// `pass` or `fail`.
    pub verdict: String,
    /// On the case's scale (1–5 when its LLM judge scores 1–5, else 0–1), as a number or text.
    #[serde(default)]
    pub score: Option<serde_json::Value>,
    /// The expected answer as it should be; saved as the eval set's next version on request.
    #[serde(default)]
    pub corrected_expected: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AssignRequest {
    /// A user's name; null or absent: anyone.
    #[serde(default)]
    pub assignee: Option<String>,
}

/// One blind comparison: the candidates as shown left and right, and the side picked.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PreferenceRequest {
    pub case_id: String,
    pub left_candidate: i64,
    pub right_candidate: i64,
    /// `left`, `right` or `tie`.
    pub choice: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Saved {
    pub id: i64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Done {
    /// Whether anything changed.
    pub changed: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Filled {
    /// Answers added to the queue (those queued before are not added again).
    pub added: u64,
}

/// Items one page of the queue API holds by default, and at most.
const PER_PAGE: i64 = 100;
const MAX_PER_PAGE: i64 = 1_000;

/// A run's queue, a page at a time.
///
/// `{progress, page, per_page, pages, items, labels, next, previous}`: the queue's counts (all of
/// it), one page of items by id with their labels, and the links to the neighbouring pages.
#[utoipa::path(get, operation_id = "get_run_review", path = "/api/v1/runs/{id}/review", tag = "review",
    params(
        ("id" = i64, Path, description = "The run's id"),
        ("page" = Option<i64>, Query, description = "1-based page (default 1)"),
        ("per_page" = Option<i64>, Query, description = "Items a page (default 100, at most 1000)"),
    ),
    responses((status = 200, description = "One page of the queue: progress, items (by id) and their labels", body = serde_json::Value)))]
pub async fn run_queue(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let params = Params::parse(query);
    let page = params.int("page", 1, i64::from(u32::MAX))?.unwrap_or(1);
    let per_page = params.int("per_page", 1, MAX_PER_PAGE)?.unwrap_or(PER_PAGE);
    if state.store.get_run(id).await?.is_none() {
        return Err(Problem::not_found(&format!("run #{id}")).into());
    }
    let q = use_case::queue_page(&state.store, Some(id), (page - 1) * per_page, per_page).await?;
    let pages = (q.progress.total as i64 + per_page - 1) / per_page;
    let link = |p: i64| format!("/api/v1/runs/{id}/review?page={p}&per_page={per_page}");
    ok(&serde_json::json!({
        "progress": q.progress,
        "page": page,
        "per_page": per_page,
        "pages": pages.max(1),
        "items": q.items,
        "labels": q.labels,
        "next": (page < pages).then(|| link(page + 1)),
        "previous": (page > 1).then(|| link((page - 1).min(pages.max(1)))),
    }))
}

/// Fills a run's queue from its graders (what the queue page does when a finished run is opened).
#[utoipa::path(post, operation_id = "fill_run_review", path = "/api/v1/runs/{id}/review/fill", tag = "review",
    params(("id" = i64, Path, description = "The run's id")),
    responses((status = 200, description = "How many answers were added", body = Filled)))]
pub async fn fill(State(state): State<AppState>, Path(raw): Path<String>, user: CurrentUser) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let added = use_case::fill_queue(&state.store, id, &who(&user)).await?;
    ok(&Filled { added })
}

/// The items offered to the caller next, whole (what the labelling page prefetches).
#[utoipa::path(get, operation_id = "list_review_items", path = "/api/v1/review/items", tag = "review",
    params(
        ("run" = Option<i64>, Query, description = "Only this run's queue (else every run's)"),
        ("after" = Option<i64>, Query, description = "Items offered after this one"),
        ("limit" = Option<i64>, Query, description = "At most this many (default 5, at most 50)"),
    ),
    responses((status = 200, description = "Item views in the order they are offered", body = serde_json::Value)))]
pub async fn offered(State(state): State<AppState>, RawQuery(query): RawQuery, user: CurrentUser) -> ApiResult {
    let params = Params::parse(query);
    let run = params.int("run", 1, i64::MAX)?;
    let after = params.int("after", 1, i64::MAX)?;
    let limit = params.int("limit", 1, 50)?.unwrap_or(5) as usize;
    let place = match after {
        Some(after) => use_case::place_of(&state.store, after).await?,
        None => None,
    };
    let items = use_case::offered(&state.store, run, &who(&user), place, limit).await?;
    ok(&use_case::item_views(&state.store, items).await?)
}

/// One item: the case's input and expected answer, the candidate's answer, its grades and labels.
#[utoipa::path(get, operation_id = "get_review_item", path = "/api/v1/review/items/{id}", tag = "review",
    params(("id" = i64, Path, description = "The item's id")),
    responses((status = 200, description = "The item's view", body = serde_json::Value)))]
pub async fn item(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "review item")?;
    ok(&use_case::item_view(&state.store, id).await?)
}

/// Labels an item as the caller (replacing the caller's earlier label on it); audited.
#[utoipa::path(post, operation_id = "label_review_item", path = "/api/v1/review/items/{id}/label", tag = "review",
    params(("id" = i64, Path, description = "The item's id")),
    request_body = LabelRequest,
    responses((status = 200, description = "The label's id", body = Saved)))]
pub async fn label(State(state): State<AppState>, Path(raw): Path<String>, user: CurrentUser, body: Body) -> ApiResult {
    let id = path_id(&raw, "review item")?;
    let request: LabelRequest = body.json()?;
    let input = LabelInput {
        verdict: request.verdict,
        score: request.score.map(|s| match s {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        }),
        corrected_expected: request.corrected_expected,
        note: request.note,
    };
    let label = use_case::save_label(&state.store, id, &input, &who(&user)).await?;
    ok(&Saved { id: label })
}

/// Claims an item for the caller; `changed` is false when it is labelled or someone else's.
#[utoipa::path(post, operation_id = "claim_review_item", path = "/api/v1/review/items/{id}/claim", tag = "review",
    params(("id" = i64, Path, description = "The item's id")),
    responses((status = 200, description = "Whether the item is now the caller's", body = Done)))]
pub async fn claim(State(state): State<AppState>, Path(raw): Path<String>, user: CurrentUser) -> ApiResult {
    let id = path_id(&raw, "review item")?;
    ok(&Done {
        changed: state.store.claim_review_item(id, &who(&user)).await?,
    })
}

/// Puts an item aside; it is offered again after the open ones.
#[utoipa::path(post, operation_id = "skip_review_item", path = "/api/v1/review/items/{id}/skip", tag = "review",
    params(("id" = i64, Path, description = "The item's id")),
    responses((status = 200, description = "Whether the item was skipped", body = Done)))]
pub async fn skip(State(state): State<AppState>, Path(raw): Path<String>, user: CurrentUser) -> ApiResult {
    let id = path_id(&raw, "review item")?;
    ok(&Done {
        changed: state.store.skip_review_item(id, &who(&user)).await?,
    })
}

/// Assigns an item to a user (or to anyone); audited.
#[utoipa::path(post, operation_id = "assign_review_item", path = "/api/v1/review/items/{id}/assign", tag = "review",
    params(("id" = i64, Path, description = "The item's id")),
    request_body = AssignRequest,
    responses((status = 200, description = "Assigned", body = Done)))]
pub async fn assign(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    user: CurrentUser,
    body: Body,
) -> ApiResult {
    let id = path_id(&raw, "review item")?;
    let request: AssignRequest = body.json()?;
    let assignee = request.assignee.as_deref().map(str::trim).filter(|a| !a.is_empty());
    use_case::assign(&state.store, id, assignee, &who(&user)).await?;
    ok(&Done { changed: true })
}

/// Records one blind comparison made in the caller's own tool; audited.
#[utoipa::path(post, operation_id = "record_preference", path = "/api/v1/runs/{id}/review/preferences", tag = "review",
    params(("id" = i64, Path, description = "The run's id")),
    request_body = PreferenceRequest,
    responses((status = 200, description = "The comparison's id", body = Saved)))]
pub async fn prefer(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    user: CurrentUser,
    body: Body,
) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let request: PreferenceRequest = body.json()?;
    let choice =
        Choice::parse(&request.choice).ok_or_else(|| super::bad_parameter("choice", "must be left, right or tie"))?;
    let saved = use_case::record_preference(
        &state.store,
        id,
        &request.case_id,
        request.left_candidate,
        request.right_candidate,
        choice,
        &who(&user),
    )
    .await?;
    ok(&Saved { id: saved })
}

/// The win rates of a run's blind comparisons.
///
/// Each ordered pair of the run's candidates: wins, losses, ties, the win rate over decided
/// comparisons with its exact 95 % interval, the sign test, and "not worse at 95 %".
#[utoipa::path(get, operation_id = "get_win_rates", path = "/api/v1/runs/{id}/review/win-rates", tag = "review",
    params(
        ("id" = i64, Path, description = "The run's id"),
        ("humans_only" = Option<bool>, Query, description = "Leave out the LLM judge's comparisons"),
    ),
    responses((status = 200, description = "Win rates", body = serde_json::Value)))]
pub async fn win_rates(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let humans_only = Params::parse(query).text("humans_only").is_some_and(|v| v == "true");
    ok(&use_case::win_rates(&state.store, id, humans_only).await?)
}

/// An LLM judge's calibration.
///
/// Agreement with human labels (accuracy, Cohen's κ, intervals), position and length leans,
/// and why it is flagged.
#[utoipa::path(get, operation_id = "get_judge_calibration", path = "/api/v1/judges/{name}/calibration", tag = "review",
    params(("name" = String, Path, description = "The judge's name, as the `llm-judge` graders give it")),
    responses((status = 200, description = "The calibration", body = serde_json::Value)))]
pub async fn calibration(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult {
    ok(&use_case::calibration(&state.store, &name).await?)
}
