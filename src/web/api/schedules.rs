//! `/api/v1/schedules` and `/api/v1/notification-targets` (docs/schedules.md): schedules in the
//! schedules file's shape (import as `bakeoff schedule import` does, all or nothing), one
//! schedule with its firings and each run's changes since the baseline; notification targets
//! without their secrets (an admin adds one; the secret is write-only).
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiResult, Body, Problem, ok, path_id, rfc3339};
use crate::app::files::schedules::{self, ScheduleEntry};
use crate::domain::Timestamp;
use crate::domain::notify::{TargetKind, TargetSpec};
use crate::domain::schedule::Schedule;
use crate::web::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/schedules", get(list).post(import))
        .route("/api/v1/schedules/{id}", get(get_one))
        .route("/api/v1/notification-targets", get(list_targets).post(create_target))
}

/// A stored schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleView {
    pub id: i64,
    /// The cadence in words with its zone: "every weekday at 06:00 (Europe/Berlin)".
    pub cadence_words: String,
    /// RFC 3339; absent while paused.
    pub next_due: Option<String>,
    /// As a schedules file states it.
    pub schedule: ScheduleEntry,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleList {
    pub items: Vec<ScheduleView>,
}

/// One change of one candidate since the baseline.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChangeView {
    pub candidate_id: i64,
    pub candidate: String,
    /// `verdict`, `rule-flipped`, `regressed`, `improved` or `not-compared`.
    pub kind: String,
    pub text: String,
}

/// One due time claimed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FiringView {
    pub due_at: String,
    pub fired_at: String,
    /// The due time passed while no scheduler ran; the run was started once, late.
    pub missed: bool,
    pub run_id: Option<i64>,
    pub note: String,
    /// The run's baseline, once the run has ended and had one.
    pub baseline_run_id: Option<i64>,
    /// Why the run was not compared (no baseline yet…).
    pub not_compared: Option<String>,
    pub changes: Vec<ChangeView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleDetail {
    #[serde(flatten)]
    pub view: ScheduleView,
    /// The latest 30, newest first.
    pub firings: Vec<FiringView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportedSchedule {
    pub id: i64,
    pub name: String,
    /// `created` or `updated`.
    pub outcome: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportedSchedules {
    pub items: Vec<ImportedSchedule>,
}

async fn view(state: &AppState, s: &Schedule) -> Result<ScheduleView, Problem> {
    Ok(ScheduleView {
        id: s.id,
        cadence_words: s.spec.cadence_words(),
        next_due: s.next_due(Timestamp::now()).map(rfc3339),
        schedule: schedules::to_entry(&state.store, s)
            .await
            .map_err(super::ApiError::from)
            .map_err(|e| e.0)?,
    })
}

/// Every schedule.
#[utoipa::path(get, operation_id = "list_schedules", path = "/api/v1/schedules", tag = "schedules",
    responses((status = 200, description = "The schedules", body = ScheduleList)))]
pub async fn list(State(state): State<AppState>) -> ApiResult {
    let mut items = Vec::new();
    for s in state.store.list_schedules().await? {
        items.push(view(&state, &s).await?);
    }
    ok(&ScheduleList { items })
}

/// One schedule with its latest firings and their runs' changes since the baseline.
#[utoipa::path(get, operation_id = "get_schedule", path = "/api/v1/schedules/{id}", tag = "schedules",
    params(("id" = i64, Path, description = "The schedule's id")),
    responses((status = 200, description = "The schedule", body = ScheduleDetail)))]
pub async fn get_one(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "schedule")?;
    let s = state
        .store
        .get_schedule(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("schedule #{id}")))?;
    let mut firings = Vec::new();
    for f in state.store.list_firings(id, 30).await? {
        let changes = match f.run_id {
            Some(run) => crate::app::baseline::changes_of_run(&state.store, run).await?,
            None => None,
        };
        firings.push(FiringView {
            due_at: rfc3339(f.due_at),
            fired_at: rfc3339(f.fired_at),
            missed: f.missed,
            run_id: f.run_id,
            note: f.note,
            baseline_run_id: changes.as_ref().and_then(|c| c.baseline_run_id),
            not_compared: changes.as_ref().and_then(|c| c.no_baseline.clone()),
            changes: changes
                .map(|c| {
                    c.changes
                        .into_iter()
                        .map(|x| ChangeView {
                            candidate_id: x.candidate_id,
                            candidate: x.candidate,
                            kind: x.kind.as_str().to_string(),
                            text: x.text,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    ok(&ScheduleDetail {
        view: view(&state, &s).await?,
        firings,
    })
}

/// Imports a schedules file: each schedule created, or the stored one of its name replaced.
///
/// All or nothing: a file with any problem stores nothing and every problem is named.
#[utoipa::path(post, operation_id = "import_schedules", path = "/api/v1/schedules", tag = "schedules",
    request_body(content(
        (schedules::SchedulesFile = "application/json"),
        (String = "application/toml"),
    ), description = "A schedules file: its JSON form, or the TOML file itself"),
    responses((status = 200, description = "What was stored", body = ImportedSchedules)))]
pub async fn import(State(state): State<AppState>, body: Body) -> ApiResult {
    let (text, _) = body.file_text()?;
    let actor = crate::web::security::actor();
    let done = schedules::import(&state.store, "request body", &text, &actor).await?;
    ok(&ImportedSchedules {
        items: done
            .into_iter()
            .map(|(id, name, outcome)| ImportedSchedule {
                id,
                name,
                outcome: outcome.to_string(),
            })
            .collect(),
    })
}

/// A notification target, without its secret.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TargetView {
    pub id: i64,
    pub name: String,
    /// `webhook` or `slack`.
    pub kind: String,
    /// A webhook's URL; a Slack target's host only (its URL is a credential).
    pub url: String,
    pub schedule_id: Option<i64>,
    pub profile_id: Option<i64>,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TargetList {
    pub items: Vec<TargetView>,
}

/// A new notification target.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetCreate {
    pub name: String,
    /// `webhook`, `slack` or `email`.
    pub kind: String,
    /// The receiver's URL; for email
    /// `smtp://[USER@]HOST[:PORT]?tls=starttls|none&from=ADDRESS&to=ADDRESS[,ADDRESS]`.
    pub url: String,
    /// A webhook's signing secret (at least 16 characters) or an email target's SMTP
    /// password; write-only.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub schedule_id: Option<i64>,
    #[serde(default)]
    pub profile_id: Option<i64>,
}

/// Every notification target (secrets never returned).
#[utoipa::path(get, operation_id = "list_notification_targets", path = "/api/v1/notification-targets", tag = "schedules",
    responses((status = 200, description = "The targets", body = TargetList)))]
pub async fn list_targets(State(state): State<AppState>) -> ApiResult {
    let items = state
        .store
        .list_targets()
        .await?
        .into_iter()
        .map(|t| TargetView {
            id: t.id,
            name: t.name,
            kind: t.kind.as_str().to_string(),
            url: t.url_shown,
            schedule_id: t.schedule_id,
            profile_id: t.profile_id,
            created_at: rfc3339(t.created_at),
        })
        .collect();
    ok(&TargetList { items })
}

/// Adds a notification target (admins): its secret and a Slack URL are sealed.
#[utoipa::path(post, operation_id = "create_notification_target", path = "/api/v1/notification-targets", tag = "schedules",
    request_body(content((TargetCreate = "application/json"))),
    responses((status = 200, description = "The target's id", body = ImportedSchedule)))]
pub async fn create_target(State(state): State<AppState>, body: Body) -> ApiResult {
    let request: TargetCreate = body.json()?;
    let kind = TargetKind::parse(&request.kind)
        .ok_or_else(|| Problem::field("kind", "must be \"webhook\", \"slack\" or \"email\""))?;
    let spec = TargetSpec {
        name: request.name,
        kind,
        url: request.url,
        secret: request.secret,
        schedule_id: request.schedule_id,
        profile_id: request.profile_id,
    };
    let id = crate::app::notify::save_target(&state.store, &spec, &crate::web::security::actor()).await?;
    ok(&ImportedSchedule {
        id,
        name: spec.name,
        outcome: "created".into(),
    })
}
