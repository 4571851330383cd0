//! `/api/v1/runs`: the runs list, starting a run with the inputs of `bakeoff run start` (an eval
//! set, candidates, run settings in the settings file's shape) through the run form's own
//! `app::runs::create_run`, a run's status with its progress counts, cancelling it, and its raw
//! request records page by page (a cursor: the last record id of the page before).
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::routing::{get, post};
use serde::Serialize;
use utoipa::ToSchema;

use super::problem::{ApiError, FieldProblem};
use super::{ApiResult, Body, PageInfo, Params, Problem, json, ok, path_id, rfc3339};
use crate::app::AppError;
pub use crate::app::api::{RunCreate, RunStatusView};
use crate::app::files::{dotted, settings};
use crate::app::gate::progress::progress;
use crate::app::gate::{self, GateRun};
use crate::domain::audit::Action;
use crate::web::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/runs", get(list).post(create))
        .route("/api/v1/runs/{id}", get(status))
        .route("/api/v1/runs/{id}/cancel", post(cancel))
        .route("/api/v1/runs/{id}/records", get(records))
}

/// A run as the runs page lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunListItem {
    pub id: i64,
    pub name: String,
    pub status: String,
    pub evalset: String,
    pub evalset_version_id: i64,
    pub candidates: Vec<RunCandidate>,
    pub record_count: i64,
    pub created_at: String,
    pub finished_at: Option<String>,
}

impl From<crate::store::RunListItem> for RunListItem {
    fn from(item: crate::store::RunListItem) -> Self {
        RunListItem {
            id: item.run.id,
            name: item.run.name.clone(),
            status: item.run.status.as_str().to_string(),
            evalset: item.evalset_name,
            evalset_version_id: item.run.evalset_version_id,
            candidates: item
                .run
                .candidate_ids
                .iter()
                .zip(item.candidate_names)
                .map(|(&id, name)| RunCandidate { id, name })
                .collect(),
            record_count: item.record_count,
            created_at: rfc3339(item.run.created_at),
            finished_at: item.run.finished_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunCandidate {
    pub id: i64,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunList {
    #[serde(flatten)]
    pub page: PageInfo,
    /// Newest first.
    pub items: Vec<RunListItem>,
}

/// One stored request record with its id (the cursor).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RecordItem {
    pub id: i64,
    /// The raw record as exports hold it: case, phase, repetition, attempt, concurrency, timings
    /// (µs), token counts with their source, output, error class, grades.
    #[schema(value_type = Object)]
    pub record: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RecordPage {
    pub run_id: i64,
    pub limit: i64,
    pub items: Vec<RecordItem>,
    /// Pass as `after` for the next page; None when this page is the last one so far (a running
    /// run may store more later).
    pub next_after: Option<i64>,
}

/// Runs, newest first.
#[utoipa::path(get, operation_id = "list_runs", path = "/api/v1/runs", tag = "runs",
    params(super::PageParams),
    responses((status = 200, description = "A page of runs", body = RunList)))]
pub async fn list(State(state): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let (limit, offset) = Params::parse(query).page()?;
    let total = state.store.count_runs().await?;
    let items = state
        .store
        .list_runs(limit, offset)
        .await?
        .into_iter()
        .map(RunListItem::from)
        .collect();
    ok(&RunList {
        page: PageInfo { total, limit, offset },
        items,
    })
}

/// The request's field for a field of the run form (as `create_run` names them).
fn request_field(field: &str) -> String {
    match field {
        "evalset_version" => "evalset_version_id".to_string(),
        "candidates" => "candidate_ids".to_string(),
        "name" => "name".to_string(),
        other => format!("settings.{}", dotted(&settings::field_path(other))),
    }
}

/// The run settings of the request, read by the settings file's reader.
fn read_settings(value: Option<&serde_json::Value>) -> Result<settings::RunSettings, Problem> {
    let Some(value) = value else {
        return Ok(settings::RunSettings::defaults());
    };
    let mut value = value.clone();
    let Some(object) = value.as_object_mut() else {
        return Err(Problem::field(
            "settings",
            "must be an object in the run settings file's shape",
        ));
    };
    object
        .entry("bakeoff_settings")
        .or_insert(serde_json::Value::from(settings::VERSION));
    let text = toml::to_string(&value)
        .map_err(|e| Problem::field("settings", format!("cannot be read as a settings file: {e}")))?;
    settings::parse("settings", &text).map_err(|e| {
        let mut p = Problem::from_file_error(&e, false);
        for f in &mut p.field_errors {
            f.field = format!("settings.{}", f.field);
        }
        p
    })
}

/// Starts a run.
///
/// The run is queued until the server's run caps let it start. Answers 201 with its status and
/// `Location`; poll the status until `terminal`, then read its scorecard or verdict.
#[utoipa::path(post, operation_id = "create_run", path = "/api/v1/runs", tag = "runs",
    request_body(content((RunCreate = "application/json"))),
    responses((status = 201, description = "The run, created and started", body = RunStatusView,
        headers(("location" = String, description = "The run's status address")))))]
pub async fn create(State(state): State<AppState>, body: Body) -> ApiResult {
    let request: RunCreate = body.json()?;
    let mut errors: Vec<FieldProblem> = Vec::new();
    let mut settings = match read_settings(request.settings.as_ref()) {
        Ok(settings) => settings,
        Err(p) if !p.field_errors.is_empty() => {
            errors.extend(p.field_errors);
            settings::RunSettings::defaults()
        }
        Err(p) => return Err(p.into()),
    };
    if let Some(name) = &request.name {
        settings.name = name.clone();
    }
    let mut problem = |field: &str, message: String| {
        errors.push(FieldProblem {
            field: field.to_string(),
            message,
            line: None,
        })
    };
    let evalset_version_id = match (&request.evalset_version_id, &request.evalset) {
        (Some(id), None) => Some(*id),
        (None, Some(name)) => match gate::evalset_by_name(&state.store, name).await {
            Ok(id) => Some(id),
            Err(AppError::NotFound(_)) => {
                problem("evalset", format!("no eval set is named {name:?}"));
                None
            }
            Err(e) => return Err(e.into()),
        },
        (Some(_), Some(_)) => {
            problem("evalset", "give evalset_version_id or evalset, not both".to_string());
            None
        }
        (None, None) => {
            problem(
                "evalset_version_id",
                "give the eval set: evalset_version_id, or evalset (a name)".to_string(),
            );
            None
        }
    };
    let mut candidate_ids = request.candidate_ids.clone();
    for name in &request.candidates {
        match gate::candidate_by_name(&state.store, name).await {
            Ok(c) => candidate_ids.push(c.id),
            Err(AppError::NotFound(_)) => problem("candidates", format!("no candidate is named {name:?}")),
            Err(e) => return Err(e.into()),
        }
    }
    let judge = settings.judge_candidate.trim().to_string();
    if !judge.is_empty() {
        match gate::candidate_by_name(&state.store, &judge).await {
            Ok(_) => {}
            Err(AppError::NotFound(_)) => {
                problem("settings.judge_candidate", format!("no candidate is named {judge:?}"))
            }
            Err(e) => return Err(e.into()),
        }
    }
    let Some(evalset_version_id) = evalset_version_id.filter(|_| errors.is_empty()) else {
        return Err(Problem::fields(errors).into());
    };
    let run = GateRun {
        evalset_version_id,
        candidate_ids,
        settings,
    };
    let id = match gate::start(&state.store, &state.runner, &run).await {
        Ok(id) => id,
        Err(AppError::Fields(e)) => return Err(Problem::from_field_errors(&e, request_field).into()),
        Err(e) => return Err(e.into()),
    };
    crate::web::audit::record(
        &state,
        Action::RunStarted,
        format!("run #{id}"),
        "through the API".into(),
    )
    .await?;
    let view = load_status(&state, id).await?;
    let mut response = json(StatusCode::CREATED, &view);
    if let Ok(location) = HeaderValue::from_str(&format!("/api/v1/runs/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

async fn load_status(state: &AppState, id: i64) -> Result<RunStatusView, ApiError> {
    let run = state
        .store
        .get_run(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("run #{id}")))?;
    let progress = progress(&state.store, id).await?;
    Ok(RunStatusView::new(&run, progress))
}

/// A run's status and progress (what the terminal's progress bar shows).
#[utoipa::path(get, operation_id = "get_run", path = "/api/v1/runs/{id}", tag = "runs",
    params(("id" = i64, Path, description = "The run's id")),
    responses((status = 200, description = "The run's status", body = RunStatusView)))]
pub async fn status(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "run")?;
    ok(&load_status(&state, id).await?)
}

/// Cancels a run.
///
/// It stops at its next request and ends as cancelled, keeping its finished records. An ended
/// run is left as it is. Answers the run's status.
#[utoipa::path(post, operation_id = "cancel_run", path = "/api/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = i64, Path, description = "The run's id")),
    responses((status = 200, description = "The run's status after the request", body = RunStatusView)))]
pub async fn cancel(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let run = crate::app::runs::cancel_run(&state.store, &state.runner, id, "the API").await?;
    crate::web::audit::record(
        &state,
        Action::RunCancelled,
        format!("run #{id} {:?}", run.name),
        "through the API".into(),
    )
    .await?;
    ok(&load_status(&state, id).await?)
}

/// A run's raw request records, page by page.
///
/// In the order they were stored, `limit` at a time after record `after` (the previous page's
/// `next_after`; 0 or absent: from the first).
#[utoipa::path(get, operation_id = "list_run_records", path = "/api/v1/runs/{id}/records", tag = "runs",
    params(
        ("id" = i64, Path, description = "The run's id"),
        ("after" = Option<i64>, Query, description = "The cursor: the id of the last record already read"),
        ("limit" = Option<i64>, Query, description = "Records per page (default 50, at most 500)"),
    ),
    responses((status = 200, description = "A page of records", body = RecordPage)))]
pub async fn records(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let params = Params::parse(query);
    let (limit, _) = params.page()?;
    let after = params.int("after", 0, i64::MAX)?.unwrap_or(0);
    if state.store.get_run(id).await?.is_none() {
        return Err(Problem::not_found(&format!("run #{id}")).into());
    }
    let page = state.store.list_request_records_page(id, after, limit).await?;
    let next_after = (page.len() as i64 == limit)
        .then(|| page.last().map(|(id, _)| *id))
        .flatten();
    let items = page
        .into_iter()
        .map(|(id, record)| RecordItem {
            id,
            record: serde_json::to_value(&record).unwrap_or_default(),
        })
        .collect();
    ok(&RecordPage {
        run_id: id,
        limit,
        items,
        next_after,
    })
}
