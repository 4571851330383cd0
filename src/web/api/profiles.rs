//! `/api/v1/profiles`: threshold profiles (rules in the profile file's shape, values in the unit
//! shown: 95 means 95 %), one profile at any version with its history, and importing a profile
//! file as `bakeoff profile import` does (a changed profile appends a version).
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiResult, Body, Params, Problem, ok, path_id, rfc3339};
use crate::app::files::profiles::{self, ProfileFile, RuleEntry};
use crate::domain::thresholds::ThresholdProfile;
use crate::web::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/profiles", get(list).post(import))
        .route("/api/v1/profiles/{id}", get(get_one))
}

/// A profile at one version.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProfileView {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: u32,
    /// Its rules as a profile file writes them.
    pub rules: Vec<RuleEntry>,
    /// Each rule's stored metric key (`ttft_p95_ms@c=8`), in the order of `rules`: what scorecards
    /// and verdicts name.
    pub metric_keys: Vec<String>,
    /// The profile's SLO block as a profile file writes it (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<profiles::SloEntry>,
}

impl From<&ThresholdProfile> for ProfileView {
    fn from(p: &ThresholdProfile) -> Self {
        ProfileView {
            id: p.id,
            name: p.name.clone(),
            description: p.description.clone(),
            version: p.version,
            rules: profiles::to_file(p).rule,
            metric_keys: p.rules.iter().map(|r| r.metric.clone()).collect(),
            slo: profiles::to_file(p).slo,
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProfileList {
    pub items: Vec<ProfileView>,
}

/// One change in a profile's history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProfileChangeView {
    pub version: u32,
    pub changed_by: String,
    pub rationale: String,
    pub at: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProfileDetail {
    #[serde(flatten)]
    pub profile: ProfileView,
    /// The newest version (differs from `version` when an older one was asked for).
    pub current_version: u32,
    /// Every version, newest first.
    pub history: Vec<ProfileChangeView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportedProfile {
    /// `created`, `new version` or `unchanged`.
    pub outcome: String,
    pub profile: ProfileView,
}

/// Every threshold profile at its current version.
#[utoipa::path(get, operation_id = "list_profiles", path = "/api/v1/profiles", tag = "profiles",
    responses((status = 200, description = "The profiles", body = ProfileList)))]
pub async fn list(State(state): State<AppState>) -> ApiResult {
    let items = state
        .store
        .list_threshold_profiles()
        .await?
        .iter()
        .map(ProfileView::from)
        .collect();
    ok(&ProfileList { items })
}

/// One profile with its history.
///
/// At its current version, or the `version` asked for.
#[utoipa::path(get, operation_id = "get_profile", path = "/api/v1/profiles/{id}", tag = "profiles",
    params(
        ("id" = i64, Path, description = "The profile's id"),
        ("version" = Option<u32>, Query, description = "A version of its history (default: the current one)"),
    ),
    responses((status = 200, description = "The profile", body = ProfileDetail)))]
pub async fn get_one(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = path_id(&raw, "threshold profile")?;
    let version = Params::parse(query)
        .int("version", 1, i64::from(u32::MAX))?
        .map(|v| v as u32);
    let current = state
        .store
        .get_threshold_profile(id, None)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("threshold profile #{id}")))?;
    let profile = match version {
        None => current.clone(),
        Some(v) => state
            .store
            .get_threshold_profile(id, Some(v))
            .await?
            .ok_or_else(|| Problem::not_found(&format!("version {v} of threshold profile #{id}")))?,
    };
    let mut history = state.store.threshold_profile_history(id).await?;
    history.sort_by_key(|c| std::cmp::Reverse(c.version));
    ok(&ProfileDetail {
        profile: ProfileView::from(&profile),
        current_version: current.version,
        history: history
            .iter()
            .map(|c| ProfileChangeView {
                version: c.version,
                changed_by: c.changed_by.clone(),
                rationale: c.rationale.clone(),
                at: rfc3339(c.at),
            })
            .collect(),
    })
}

/// Imports a threshold profile file.
///
/// Creates the profile, or appends a version to the stored profile of its name when its rules
/// or description differ (signed by the caller; `rationale` says why).
#[utoipa::path(post, operation_id = "import_profile", path = "/api/v1/profiles", tag = "profiles",
    params(("rationale" = Option<String>, Query, description = "Why this version (kept in the history)")),
    request_body(content(
        (ProfileFile = "application/json"),
        (String = "application/toml"),
    ), description = "A profile file: its JSON form, or the TOML file itself"),
    responses((status = 200, description = "The profile as stored now", body = ImportedProfile)))]
pub async fn import(State(state): State<AppState>, RawQuery(query): RawQuery, body: Body) -> ApiResult {
    let rationale = Params::parse(query)
        .text("rationale")
        .unwrap_or_else(|| "imported through the API".to_string());
    let (text, lines) = body.file_text()?;
    let actor = crate::web::security::actor();
    let save =
        profiles::parse("request body", &text, &actor, &rationale).map_err(|e| Problem::from_file_error(&e, lines))?;
    let (profile, outcome) = profiles::import(&state.store, &save, &actor).await?;
    ok(&ImportedProfile {
        outcome: outcome.as_str().to_string(),
        profile: ProfileView::from(&profile),
    })
}
