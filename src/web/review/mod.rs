//! Humans in the loop (issue 50; docs/review.md): the review queue of a run and of every run,
//! the labelling page (one item at a time, keyboard-first: `static/review.js` keeps the next
//! items in the page and shows the next one the moment a verdict key is pressed; without
//! JavaScript the page reads and its forms post as usual), labels saved as the next eval-set
//! version, blind pairwise comparisons (`compare`) and each LLM judge's calibration.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Redirect;
use axum::routing::{get, post};
use serde::Deserialize;

use super::AppState;
use super::error::{WebError, parse_id, parse_page};
use super::views::{FormBody, Pagination};
use crate::app::review::{self as use_case, ItemView, QueuePage};
use crate::domain::review::calibration::Calibration;
use crate::domain::review::{LabelInput, Progress, QueuePlace, ReviewItem};

mod compare;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/review", get(all_queues))
        .route("/runs/{id}/review", get(run_queue))
        .route("/runs/{id}/review/fill", post(fill))
        .route("/runs/{id}/review/add", post(add_by_hand))
        .route("/runs/{id}/review/ground-truth", post(ground_truth))
        .route("/runs/{id}/review/compare", get(compare::page).post(compare::choose))
        .route("/runs/{id}/review/judge-pairs", post(compare::judge_pairs))
        .route("/review/items/{id}", get(item_page))
        .route("/review/items/{id}/label", post(label))
        .route("/review/items/{id}/claim", post(claim))
        .route("/review/items/{id}/skip", post(skip))
        .route("/review/items/{id}/assign", post(assign))
        .route("/judges/{name}/calibration", get(calibration_page))
}

/// Items the labelling page keeps ready after the one shown, so the next appears at once.
pub const PREFETCHED: usize = 5;

/// One queue item as a row of the queue page.
#[derive(Debug, Clone)]
pub struct ItemRow {
    pub id: i64,
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: String,
    pub repetition: u32,
    pub reasons: String,
    pub detail: String,
    pub status: &'static str,
    pub assignee: String,
    pub labels: usize,
    pub disagreement: bool,
}

fn rows(queue: &QueuePage) -> Vec<ItemRow> {
    queue
        .items
        .iter()
        .map(|i: &ReviewItem| {
            let labels: Vec<_> = queue.labels.iter().filter(|l| l.item_id == i.id).collect();
            ItemRow {
                id: i.id,
                run_id: i.run_id,
                candidate_id: i.candidate_id,
                case_id: i.case_id.clone(),
                repetition: i.repetition,
                reasons: i.reasons.iter().map(|r| r.describe()).collect::<Vec<_>>().join("; "),
                detail: i.detail.clone(),
                status: i.status.as_str(),
                assignee: i.assignee.clone().unwrap_or_default(),
                labels: labels.len(),
                disagreement: crate::domain::review::disagreement(&labels),
            }
        })
        .collect()
}

/// Items a queue page lists.
pub const QUEUE_PAGE: u32 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub page: Option<String>,
}

/// Page `raw` of a queue, or NotFound past its last page.
async fn queue_page(
    state: &AppState,
    run: Option<i64>,
    raw: Option<&str>,
) -> Result<(QueuePage, Pagination), WebError> {
    let page = parse_page(raw)?;
    let offset = i64::from(page - 1) * i64::from(QUEUE_PAGE);
    let queue = use_case::queue_page(&state.store, run, offset, i64::from(QUEUE_PAGE)).await?;
    let base = match run {
        Some(id) => format!("/runs/{id}/review"),
        None => "/review".to_string(),
    };
    let pagination = Pagination::new(base, page, QUEUE_PAGE, queue.progress.total as i64);
    if pagination.out_of_range() {
        return Err(WebError::NotFound(format!("page {page} of this review queue")));
    }
    Ok((queue, pagination))
}

/// The first item offered to the viewer, where "Start labelling" leads.
async fn first_offered(state: &AppState, run: Option<i64>) -> Result<Option<i64>, WebError> {
    let who = super::security::actor();
    Ok(use_case::offered(&state.store, run, &who, None, 1)
        .await?
        .first()
        .map(|i| i.id))
}

#[derive(Template, WebTemplate)]
#[template(path = "review/queue.html")]
pub struct QueueView {
    pub nav: &'static str,
    /// None: every run's queue.
    pub run: Option<(i64, String)>,
    pub progress: Progress,
    /// This page of the queue's items, and the links to the others.
    pub rows: Vec<ItemRow>,
    pub pagination: Pagination,
    /// The first item offered to the viewer, where "Start labelling" leads.
    pub start: Option<i64>,
    /// Filled automatically just now (a terminal run's first visit).
    pub filled: Option<u64>,
    /// (id, name) of the run's candidates, for the blind comparison form.
    pub candidates: Vec<(i64, String)>,
    pub win_rates: Vec<compare::WinRateRow>,
    /// Judges the run's eval set names: (name, calibration page, flagged).
    pub judges: Vec<(String, String, bool)>,
    pub may_edit: bool,
    pub evalset_version: Option<i64>,
}

fn scope_query(run: Option<i64>) -> String {
    run.map(|r| format!("?run={r}")).unwrap_or_default()
}

async fn all_queues(State(state): State<AppState>, Query(q): Query<PageQuery>) -> Result<QueueView, WebError> {
    let (queue, pagination) = queue_page(&state, None, q.page.as_deref()).await?;
    Ok(QueueView {
        nav: "runs",
        run: None,
        progress: queue.progress,
        start: first_offered(&state, None).await?,
        rows: rows(&queue),
        pagination,
        filled: None,
        candidates: Vec::new(),
        win_rates: Vec::new(),
        judges: Vec::new(),
        may_edit: super::security::may(crate::domain::accounts::Role::Editor),
        evalset_version: None,
    })
}

async fn run_queue(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<QueueView, WebError> {
    let id = parse_id(&raw, "run")?;
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("run #{id}")))?;
    // A finished run's queue fills itself the first time it is read (and adds what is new after).
    let may_edit = super::security::may(crate::domain::accounts::Role::Editor);
    let filled = if run.status.is_terminal() && may_edit {
        let added = use_case::fill_queue(&state.store, id, &super::security::actor()).await?;
        (added > 0).then_some(added)
    } else {
        None
    };
    let (queue, pagination) = queue_page(&state, Some(id), q.page.as_deref()).await?;
    let candidates = state
        .store
        .run_candidates(id)
        .await?
        .into_iter()
        .map(|c| (c.id, c.spec.name))
        .collect::<Vec<_>>();
    let win_rates = compare::win_rate_rows(&state, id, &candidates).await?;
    let mut judges = Vec::new();
    for judge in use_case::run_judges(&state.store, id).await? {
        let flagged = use_case::calibration(&state.store, &judge).await?.flagged();
        judges.push((judge.clone(), calibration_href(&judge), flagged));
    }
    Ok(QueueView {
        nav: "runs",
        run: Some((id, run.name)),
        progress: queue.progress,
        start: first_offered(&state, Some(id)).await?,
        rows: rows(&queue),
        pagination,
        filled,
        candidates,
        win_rates,
        judges,
        may_edit,
        evalset_version: Some(run.evalset_version_id),
    })
}

async fn fill(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    use_case::fill_queue(&state.store, id, &super::security::actor()).await?;
    Ok(Redirect::to(&format!("/runs/{id}/review")))
}

async fn add_by_hand(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    form: FormBody,
) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    let candidate_id = form
        .get("candidate_id")
        .and_then(|c| c.parse::<i64>().ok())
        .ok_or_else(|| WebError::BadRequest("Choose the candidate whose answer to review.".into()))?;
    let case_id = form
        .get("case_id")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| WebError::BadRequest("Name the case to review.".into()))?;
    let repetition = form.get("repetition").and_then(|r| r.parse::<u32>().ok()).unwrap_or(0);
    use_case::add_by_hand(
        &state.store,
        id,
        candidate_id,
        case_id,
        repetition,
        form.get("note").unwrap_or_default(),
        &super::security::actor(),
    )
    .await?;
    Ok(Redirect::to(&format!("/runs/{id}/review")))
}

async fn ground_truth(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "run")?;
    let saved = use_case::labels_to_version(&state.store, id, &super::security::actor()).await?;
    if saved.changed == 0 {
        return Err(WebError::BadRequest(
            "No label corrects an expected answer yet: nothing to save as a new version.".into(),
        ));
    }
    // The diff view shows what the humans changed.
    Ok(Redirect::to(&format!(
        "/evalsets/{}/diff/{}",
        saved.version, saved.from_version
    )))
}

#[derive(Debug, Deserialize, Default)]
pub struct ScopeQuery {
    /// Offer the next items of this run only (else of every run).
    #[serde(default)]
    pub run: Option<i64>,
}

#[derive(Template, WebTemplate)]
#[template(path = "review/item.html")]
pub struct ItemPage {
    pub nav: &'static str,
    pub view: ItemView,
    pub scope: Option<i64>,
    pub progress: Progress,
    /// The items after this one, for the page's script (JSON, `<` escaped).
    pub upcoming_json: String,
    pub may_edit: bool,
    pub score_min: f64,
    pub score_max: f64,
}

/// JSON for a `<script type="application/json">` block: nothing in it can close the block.
pub fn json_for_script<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|_| "null".into())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

async fn item_page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Query(scope): Query<ScopeQuery>,
) -> Result<ItemPage, WebError> {
    let id = parse_id(&raw, "review item")?;
    let view = use_case::item_view(&state.store, id).await?;
    let who = super::security::actor();
    let upcoming = use_case::offered(
        &state.store,
        scope.run,
        &who,
        Some(QueuePlace::of(&view.item)),
        PREFETCHED,
    )
    .await?;
    let upcoming = use_case::item_views(&state.store, upcoming).await?;
    let (score_min, score_max) = view.scale.bounds();
    Ok(ItemPage {
        nav: "runs",
        upcoming_json: json_for_script(&upcoming),
        view,
        scope: scope.run,
        progress: state.store.review_progress(scope.run).await?,
        may_edit: super::security::may(crate::domain::accounts::Role::Editor),
        score_min,
        score_max,
    })
}

/// Where to go after acting on an item that stood at `place` before the action: the next item
/// offered to the actor, or the queue.
async fn after(state: &AppState, place: Option<QueuePlace>, scope: Option<i64>) -> Result<Redirect, WebError> {
    let next = use_case::offered(&state.store, scope, &super::security::actor(), place, 1).await?;
    Ok(Redirect::to(&match (next.first(), scope) {
        (Some(next), _) => format!("/review/items/{}{}", next.id, scope_query(scope)),
        (None, Some(run)) => format!("/runs/{run}/review"),
        (None, None) => "/review".to_string(),
    }))
}

fn scope_of(form: &FormBody) -> Option<i64> {
    form.get("scope").and_then(|s| s.parse::<i64>().ok())
}

async fn label(State(state): State<AppState>, Path(raw): Path<String>, form: FormBody) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "review item")?;
    let input = LabelInput {
        verdict: form.get("verdict").unwrap_or_default().to_string(),
        score: form.get("score").map(str::to_string),
        corrected_expected: form.get("corrected_expected").map(str::to_string),
        note: form.get("note").map(str::to_string),
    };
    // The place before labelling: the next item is the one after it in the order it was offered.
    let place = use_case::place_of(&state.store, id).await?;
    use_case::save_label(&state.store, id, &input, &super::security::actor()).await?;
    after(&state, place, scope_of(&form)).await
}

async fn claim(State(state): State<AppState>, Path(raw): Path<String>, form: FormBody) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "review item")?;
    if !state.store.claim_review_item(id, &super::security::actor()).await? {
        return Err(WebError::Conflict(
            "This item is labelled, or claimed by or assigned to someone else; nothing changed.".into(),
        ));
    }
    Ok(Redirect::to(&format!(
        "/review/items/{id}{}",
        scope_query(scope_of(&form))
    )))
}

async fn skip(State(state): State<AppState>, Path(raw): Path<String>, form: FormBody) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "review item")?;
    // The place before skipping: a skipped open item moves to the end, and the next one after
    // it is the next open item, not the next skipped one.
    let place = use_case::place_of(&state.store, id).await?;
    state.store.skip_review_item(id, &super::security::actor()).await?;
    after(&state, place, scope_of(&form)).await
}

async fn assign(State(state): State<AppState>, Path(raw): Path<String>, form: FormBody) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "review item")?;
    let assignee = form.get("assignee").map(str::trim).filter(|a| !a.is_empty());
    use_case::assign(&state.store, id, assignee, &super::security::actor()).await?;
    let item = state.store.get_review_item(id).await?;
    Ok(Redirect::to(&item.map_or_else(
        || "/review".to_string(),
        |i| format!("/runs/{}/review", i.run_id),
    )))
}

#[derive(Template, WebTemplate)]
#[template(path = "review/calibration.html")]
pub struct CalibrationPage {
    pub nav: &'static str,
    pub c: Calibration,
    pub min_kappa: f64,
    pub min_labels: u64,
}

async fn calibration_page(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<CalibrationPage, WebError> {
    let c = use_case::calibration(&state.store, &name).await?;
    Ok(CalibrationPage {
        nav: "runs",
        c,
        min_kappa: crate::domain::review::calibration::MIN_KAPPA,
        min_labels: crate::domain::review::calibration::MIN_LABELS,
    })
}

/// A flagged LLM judge, as every scorecard using it says, with its calibration page.
#[derive(Debug, Clone)]
pub struct JudgeFlag {
    pub judge: String,
    pub href: String,
    pub why: String,
}

impl JudgeFlag {
    pub fn of(flag: &crate::domain::review::calibration::JudgeFlag) -> JudgeFlag {
        JudgeFlag {
            judge: flag.judge.clone(),
            href: calibration_href(&flag.judge),
            why: flag.why.clone(),
        }
    }
}

/// The calibration page of a judge.
pub fn calibration_href(judge: &str) -> String {
    let name: String = url::form_urlencoded::byte_serialize(judge.as_bytes()).collect();
    format!("/judges/{}/calibration", name.replace('+', "%20"))
}

/// A figure with 2 decimals, or "—".
pub fn two(x: impl std::borrow::Borrow<Option<f64>>) -> String {
    x.borrow().map_or_else(|| "—".to_string(), |v| format!("{v:.2}"))
}

/// An interval as "[lo, hi]" at its confidence, or "—".
pub fn interval(i: impl std::borrow::Borrow<Option<crate::domain::stats::Interval>>) -> String {
    i.borrow().map_or_else(
        || "—".to_string(),
        |i| format!("[{:.2}, {:.2}] at {:.0} %", i.lo, i.hi, i.confidence * 100.0),
    )
}
