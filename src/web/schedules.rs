//! Schedules (issue 52): `GET /schedules` lists them with their cadence in words and when each
//! is next due; `/schedules/new` (also "schedule this run" from a run, `?from_run=N`) and
//! `/schedules/{id}/edit` save one through `app::schedules::save`; `/schedules/{id}` is its
//! history: every firing (on time, missed, skipped and why), and per candidate the series of
//! its runs with their verdicts and changes since the baseline marked.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AppState;
use super::error::{WebError, parse_id};
use super::runs::new::{condition_fields, limit_fields, load_draft, load_fields};
use super::security::actor;
use super::views::{FieldKind, FieldView, FormBody};
use crate::app::AppError;
use crate::app::schedules::ScheduleRequest;
use crate::domain::Timestamp;
use crate::domain::presets::LoadDraft;
use crate::domain::run::{RunConfig, RunDraft};
use crate::domain::schedule::{Schedule, local_time};
use crate::domain::validation::FieldErrors;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/schedules", get(list).post(create))
        .route("/schedules/new", get(new_form))
        .route("/schedules/{id}", get(page))
        .route("/schedules/{id}/edit", get(edit_form).post(edit))
        .route("/schedules/{id}/pause", post(pause))
        .route("/schedules/{id}/resume", post(resume))
        .route("/schedules/{id}/delete", post(delete))
}

/// One schedule as listed.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    pub id: i64,
    pub name: String,
    /// "every weekday at 06:00 (Europe/Berlin)".
    pub cadence: String,
    /// "2026-12-08 06:00 Europe/Berlin", or why none.
    pub next_due: String,
    pub evalset: String,
    pub candidates: String,
    pub owner: String,
    pub budget: String,
    pub baseline: String,
    pub paused: bool,
}

async fn rows(state: &AppState, schedules: &[Schedule]) -> Result<Vec<ScheduleRow>, WebError> {
    let evalsets = state.store.list_evalsets().await?;
    let candidates = state.store.list_candidates().await?;
    let now = Timestamp::now();
    Ok(schedules
        .iter()
        .map(|s| {
            let spec = &s.spec;
            let set = evalsets
                .iter()
                .find(|e| e.id == spec.evalset_id)
                .map_or_else(|| format!("eval set #{}", spec.evalset_id), |e| e.name.clone());
            ScheduleRow {
                id: s.id,
                name: spec.name.clone(),
                cadence: spec.cadence_words(),
                next_due: match s.next_due(now) {
                    Some(at) => local_time(&spec.time_zone, at),
                    None if spec.paused => "paused".into(),
                    None => "never".into(),
                },
                evalset: match spec.evalset_version_id {
                    Some(v) => format!("{set} (version #{v})"),
                    None => format!("{set} (latest version)"),
                },
                candidates: spec
                    .candidate_ids
                    .iter()
                    .map(|id| {
                        candidates
                            .iter()
                            .find(|c| c.id == *id)
                            .map_or_else(|| format!("#{id} (deleted)"), |c| c.spec.name.clone())
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                owner: spec.owner.clone(),
                budget: budget_text(s),
                baseline: spec.baseline.words(),
                paused: spec.paused,
            }
        })
        .collect())
}

fn budget_text(s: &Schedule) -> String {
    let mut parts = Vec::new();
    if let Some(n) = s.spec.max_requests {
        parts.push(format!("≤ {} requests", crate::domain::format::thousands(n)));
    }
    if let Some(usd) = s.spec.max_cost_usd {
        parts.push(format!("≤ ${usd:.2} estimated"));
    }
    if parts.is_empty() {
        "no limit".into()
    } else {
        format!("{} per run", parts.join(", "))
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "schedules/list.html")]
pub struct ListPage {
    pub nav: &'static str,
    pub rows: Vec<ScheduleRow>,
}

async fn list(State(state): State<AppState>) -> Result<ListPage, WebError> {
    let schedules = state.store.list_schedules().await?;
    Ok(ListPage {
        nav: "schedules",
        rows: rows(&state, &schedules).await?,
    })
}

/// An option of a select or a checkbox list.
#[derive(Debug, Clone)]
pub struct Choice {
    pub value: String,
    pub label: String,
    pub chosen: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "schedules/form.html")]
pub struct FormPage {
    pub nav: &'static str,
    /// "/schedules" or "/schedules/{id}/edit".
    pub action: String,
    pub title: String,
    pub name: FieldView,
    pub evalset: FieldView,
    pub evalset_version: FieldView,
    pub candidates: Vec<Choice>,
    pub candidates_error: Option<String>,
    pub profile: FieldView,
    pub cadence: FieldView,
    pub time_zone: FieldView,
    pub owner: FieldView,
    pub max_requests: FieldView,
    pub max_cost_usd: FieldView,
    pub baseline: FieldView,
    pub paused: FieldView,
    pub conditions: Vec<FieldView>,
    pub limits: Vec<FieldView>,
    pub load: Vec<FieldView>,
    pub stream: FieldView,
    pub staged_rollout: FieldView,
    pub stop_when_decided: FieldView,
    pub measure_past_saturation: FieldView,
    pub has_errors: bool,
}

fn request_from_body(body: &FormBody) -> Result<ScheduleRequest, WebError> {
    let text = |name: &str| body.get(name).unwrap_or_default().to_string();
    Ok(ScheduleRequest {
        name: text("name"),
        evalset: text("evalset"),
        evalset_version: text("evalset_version"),
        candidates: body.all("candidate").into_iter().map(str::to_string).collect(),
        draft: body.to_draft()?,
        load: load_draft(body),
        profile: text("profile"),
        cadence: text("cadence"),
        time_zone: text("time_zone"),
        owner: text("owner"),
        max_requests: text("max_requests"),
        max_cost_usd: text("max_cost_usd"),
        baseline: text("baseline"),
        paused: body.get("paused").is_some(),
    })
}

fn request_from_schedule(s: &Schedule) -> ScheduleRequest {
    let spec = &s.spec;
    ScheduleRequest {
        name: spec.name.clone(),
        evalset: spec.evalset_id.to_string(),
        evalset_version: spec
            .evalset_version_id
            .map_or_else(|| "latest".to_string(), |v| v.to_string()),
        candidates: spec.candidate_ids.iter().map(i64::to_string).collect(),
        draft: RunDraft::from_config(&spec.config),
        load: LoadDraft::from_config(&spec.config),
        profile: spec.profile_id.map(|p| p.to_string()).unwrap_or_default(),
        cadence: spec.cadence.clone(),
        time_zone: spec.time_zone.clone(),
        owner: spec.owner.clone(),
        max_requests: spec.max_requests.map(|n| n.to_string()).unwrap_or_default(),
        max_cost_usd: spec.max_cost_usd.map(|n| n.to_string()).unwrap_or_default(),
        baseline: spec.baseline.as_text(),
        paused: spec.paused,
    }
}

async fn render_form(
    state: &AppState,
    action: String,
    title: String,
    r: &ScheduleRequest,
    errors: &FieldErrors,
) -> Result<FormPage, WebError> {
    let field = |name, label, kind, value: &str| FieldView::new(name, label, kind, value).errors_from(errors);
    let evalsets = state.store.list_evalsets().await?;
    let candidates = state.store.list_candidates().await?;
    let profiles = state.store.list_threshold_profiles().await?;
    let mut evalset_options = vec![(String::new(), "Choose an eval set…".to_string())];
    evalset_options.extend(evalsets.iter().map(|e| (e.id.to_string(), e.name.clone())));
    let mut profile_options = vec![(String::new(), "the team's default profile".to_string())];
    profile_options.extend(
        profiles
            .iter()
            .map(|p| (p.id.to_string(), format!("{} (v{})", p.name, p.version))),
    );
    let d = &r.draft;
    Ok(FormPage {
        nav: "schedules",
        action,
        title,
        name: field("name", "Name", FieldKind::Text, &r.name).required(),
        evalset: field("evalset", "Eval set", FieldKind::Select, &r.evalset)
            .options(evalset_options)
            .required(),
        evalset_version: field(
            "evalset_version",
            "Version",
            FieldKind::Text,
            if r.evalset_version.trim().is_empty() {
                "latest"
            } else {
                &r.evalset_version
            },
        )
        .help("\"latest\": the eval set's newest version at each firing; or a version id to pin one."),
        candidates: candidates
            .iter()
            .map(|c| Choice {
                value: c.id.to_string(),
                label: c.spec.name.clone(),
                chosen: r.candidates.iter().any(|x| x.trim() == c.id.to_string()),
            })
            .collect(),
        candidates_error: errors.get("candidates").map(str::to_string),
        profile: field("profile", "Judged by", FieldKind::Select, &r.profile).options(profile_options),
        cadence: field("cadence", "Cadence (cron)", FieldKind::Text, &r.cadence)
            .required()
            .help(
                "minute hour day-of-month month weekday, e.g. \"0 6 * * 1-5\" (every weekday at 06:00), \
                 or @hourly, @daily, @weekly, @monthly.",
            ),
        time_zone: field(
            "time_zone",
            "Time zone",
            FieldKind::Text,
            if r.time_zone.trim().is_empty() {
                "UTC"
            } else {
                &r.time_zone
            },
        )
        .help("IANA name, e.g. Europe/Berlin; the cadence is read in it (daylight saving included)."),
        owner: field("owner", "Owner", FieldKind::Text, &r.owner).help("Blank: you."),
        max_requests: field(
            "max_requests",
            "Most requests per run",
            FieldKind::Number,
            &r.max_requests,
        )
        .help("A firing whose estimate exceeds it starts no run and says so. Blank: no limit."),
        max_cost_usd: field(
            "max_cost_usd",
            "Most cost per run (USD)",
            FieldKind::Number,
            &r.max_cost_usd,
        )
        .decimal()
        .help("Against the estimate's upper bound at the candidates' prices. Blank: no limit."),
        baseline: field(
            "baseline",
            "Baseline",
            FieldKind::Text,
            if r.baseline.trim().is_empty() {
                "last-passed"
            } else {
                &r.baseline
            },
        )
        .help("\"last-passed\": the schedule's last run where every candidate was GO; or a run id."),
        paused: FieldView::new(
            "paused",
            "Paused (fires nothing until resumed)",
            FieldKind::Checkbox,
            "",
        )
        .checked(r.paused),
        conditions: condition_fields(d, errors),
        limits: limit_fields(d, errors),
        load: load_fields(&r.load, errors),
        stream: FieldView::new("stream", "Stream responses", FieldKind::Checkbox, "")
            .checked(d.stream.is_some())
            .errors_from(errors),
        staged_rollout: FieldView::new("staged_rollout", "Staged rollout", FieldKind::Checkbox, "")
            .checked(r.load.staged_rollout.is_some())
            .errors_from(errors),
        stop_when_decided: FieldView::new(
            "stop_when_decided",
            "Stop each level when decided",
            FieldKind::Checkbox,
            "",
        )
        .checked(r.load.stop_when_decided.is_some())
        .errors_from(errors),
        measure_past_saturation: FieldView::new(
            "measure_past_saturation",
            "Measure past saturation",
            FieldKind::Checkbox,
            "",
        )
        .checked(r.load.measure_past_saturation.is_some())
        .errors_from(errors),
        has_errors: !errors.is_empty(),
    })
}

#[derive(Debug, serde::Deserialize, Default)]
#[serde(default)]
pub struct NewQuery {
    from_run: Option<String>,
}

/// `GET /schedules/new`, blank or (`?from_run=N`) with run N's eval set, candidates and settings.
async fn new_form(State(state): State<AppState>, Query(q): Query<NewQuery>) -> Result<FormPage, WebError> {
    let mut request = ScheduleRequest {
        draft: RunDraft::from_config(&RunConfig::default()),
        load: LoadDraft::from_config(&RunConfig::default()),
        cadence: "0 6 * * 1-5".into(),
        ..Default::default()
    };
    if let Some(raw) = q.from_run.as_deref().filter(|r| !r.trim().is_empty()) {
        let id = parse_id(raw, "run")?;
        let run = state
            .store
            .get_run(id)
            .await?
            .ok_or_else(|| WebError::NotFound(format!("run {id}")))?;
        let head = state.store.get_evalset_version_head(run.evalset_version_id).await?;
        request.name = run.name.clone();
        request.evalset = head.map(|h| h.evalset_id.to_string()).unwrap_or_default();
        request.candidates = run.candidate_ids.iter().map(i64::to_string).collect();
        request.draft = RunDraft::from_config(&run.config);
        request.load = LoadDraft::from_config(&run.config);
        request.baseline = format!("run:{id}");
    }
    render_form(
        &state,
        "/schedules".into(),
        "New schedule".into(),
        &request,
        &FieldErrors::default(),
    )
    .await
}

async fn saved_or_form(
    state: &AppState,
    id: Option<i64>,
    request: &ScheduleRequest,
    action: String,
    title: String,
) -> Result<Response, WebError> {
    match crate::app::schedules::save(&state.store, id, request, &actor()).await {
        Ok(id) => Ok(Redirect::to(&format!("/schedules/{id}")).into_response()),
        Err(AppError::Fields(errors)) => {
            let page = render_form(state, action, title, request, &errors).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

async fn create(State(state): State<AppState>, body: FormBody) -> Result<Response, WebError> {
    let request = request_from_body(&body)?;
    saved_or_form(&state, None, &request, "/schedules".into(), "New schedule".into()).await
}

async fn schedule(state: &AppState, raw: &str) -> Result<Schedule, WebError> {
    let id = parse_id(raw, "schedule")?;
    state
        .store
        .get_schedule(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("schedule {id}")))
}

async fn edit_form(State(state): State<AppState>, Path(raw): Path<String>) -> Result<FormPage, WebError> {
    let s = schedule(&state, &raw).await?;
    render_form(
        &state,
        format!("/schedules/{}/edit", s.id),
        format!("Edit schedule {:?}", s.spec.name),
        &request_from_schedule(&s),
        &FieldErrors::default(),
    )
    .await
}

async fn edit(State(state): State<AppState>, Path(raw): Path<String>, body: FormBody) -> Result<Response, WebError> {
    let s = schedule(&state, &raw).await?;
    let request = request_from_body(&body)?;
    saved_or_form(
        &state,
        Some(s.id),
        &request,
        format!("/schedules/{}/edit", s.id),
        format!("Edit schedule {:?}", s.spec.name),
    )
    .await
}

async fn pause(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let s = schedule(&state, &raw).await?;
    crate::app::schedules::set_paused(&state.store, s.id, true, &actor()).await?;
    Ok(Redirect::to(&format!("/schedules/{}", s.id)).into_response())
}

async fn resume(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let s = schedule(&state, &raw).await?;
    crate::app::schedules::set_paused(&state.store, s.id, false, &actor()).await?;
    Ok(Redirect::to(&format!("/schedules/{}", s.id)).into_response())
}

async fn delete(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let s = schedule(&state, &raw).await?;
    crate::app::schedules::delete(&state.store, s.id, &actor()).await?;
    Ok(Redirect::to("/schedules").into_response())
}

/// One firing of the history.
#[derive(Debug, Clone)]
pub struct FiringRow {
    pub due: String,
    pub fired: String,
    pub missed: bool,
    pub run_id: Option<i64>,
    pub run_status: String,
    pub note: String,
}

/// One run of a candidate's series.
#[derive(Debug, Clone)]
pub struct SeriesPoint {
    pub run_id: i64,
    pub due: String,
    pub verdict: String,
    /// "kind", text; the candidate's changes since the baseline.
    pub changes: Vec<(&'static str, String)>,
    /// Why nothing was compared (first run, no run passed yet…).
    pub no_baseline: Option<String>,
    pub baseline_run_id: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub candidate_id: i64,
    pub name: String,
    pub points: Vec<SeriesPoint>,
}

#[derive(Template, WebTemplate)]
#[template(path = "schedules/page.html")]
pub struct SchedulePage {
    pub nav: &'static str,
    pub row: ScheduleRow,
    pub firings: Vec<FiringRow>,
    pub series: Vec<Series>,
    /// The profile the verdicts are by, in words.
    pub judged_by: String,
}

/// Firings shown on a schedule's page (newest first).
const HISTORY: i64 = 30;

async fn page(State(state): State<AppState>, Path(raw): Path<String>) -> Result<SchedulePage, WebError> {
    let s = schedule(&state, &raw).await?;
    let row = rows(&state, std::slice::from_ref(&s)).await?.remove(0);
    let zone = &s.spec.time_zone;
    let firings = state.store.list_firings(s.id, HISTORY).await?;
    let mut firing_rows = Vec::new();
    let mut runs = Vec::new();
    for f in &firings {
        let run = match f.run_id {
            Some(id) => state.store.get_run(id).await?,
            None => None,
        };
        firing_rows.push(FiringRow {
            due: local_time(zone, f.due_at),
            fired: local_time(zone, f.fired_at),
            missed: f.missed,
            run_id: f.run_id,
            run_status: run
                .as_ref()
                .map_or_else(|| "no run".to_string(), |r| r.status.as_str().to_string()),
            note: f.note.clone(),
        });
        if let Some(run) = run {
            runs.push((f.due_at, run));
        }
    }
    let profiles = state.store.list_threshold_profiles().await?;
    let profile_id = match s.spec.profile_id {
        Some(id) => Some(id),
        None => crate::app::retirement::default_profile_id(&state.store, &profiles).await?,
    };
    let judged_by = profile_id
        .and_then(|id| profiles.iter().find(|p| p.id == id))
        .map_or_else(|| "no threshold profile yet".to_string(), |p| p.name.clone());
    let run_ids: Vec<i64> = runs.iter().map(|(_, r)| r.id).collect();
    let verdicts = match profile_id {
        Some(p) => state.store.list_run_verdicts(&run_ids, p).await?,
        None => Vec::new(),
    };
    let mut changes = Vec::new();
    for (_, run) in &runs {
        changes.push(crate::app::baseline::changes_of_run(&state.store, run.id).await?);
    }
    let names = state.store.list_candidates().await?;
    let series = s
        .spec
        .candidate_ids
        .iter()
        .map(|&cid| Series {
            candidate_id: cid,
            name: names
                .iter()
                .find(|c| c.id == cid)
                .map_or_else(|| format!("candidate #{cid}"), |c| c.spec.name.clone()),
            points: runs
                .iter()
                .zip(&changes)
                .filter(|((_, run), _)| run.candidate_ids.contains(&cid))
                .map(|((due, run), ch)| SeriesPoint {
                    run_id: run.id,
                    due: local_time(zone, *due),
                    verdict: verdicts
                        .iter()
                        .find(|v| v.run_id == run.id && v.candidate_id == cid)
                        .map_or_else(
                            || format!("not judged yet ({})", run.status.as_str()),
                            |v| v.verdict.as_str().to_string(),
                        ),
                    changes: ch
                        .as_ref()
                        .map(|c| {
                            c.changes
                                .iter()
                                .filter(|x| x.candidate_id == cid)
                                .map(|x| (x.kind.as_str(), x.text.clone()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    no_baseline: ch.as_ref().and_then(|c| c.no_baseline.clone()),
                    baseline_run_id: ch.as_ref().and_then(|c| c.baseline_run_id),
                })
                .collect(),
        })
        .collect();
    Ok(SchedulePage {
        nav: "schedules",
        row,
        firings: firing_rows,
        series,
        judged_by,
    })
}
