//! A run judged by a threshold profile: `/api/v1/runs/{id}/scorecard`, the scorecard page's
//! figures as its JSON export holds them (`bakeoff.scorecard/1`, from the one scorecard
//! assembly), and `/api/v1/runs/{id}/verdict`, the CI gate's report (`bakeoff.gate/1`: each
//! candidate's verdict with every rule, the exit code `bakeoff run start` would give, and the
//! paired test against a baseline run when one is named). Saved scorecards, as the archive of
//! scorecards keeps them: `/api/v1/scorecards` (listed, newest first), one of them with its
//! scorecard recomputed at the profile version it was saved with, and saving one for a run
//! (what the scorecard page's "save scorecard" does), through the same check and store.
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiResult, Body, PageInfo, Params, Problem, bad_parameter, json, ok, path_id, rfc3339};
use crate::app::gate::{self, GateReport};
use crate::app::scorecard::{ScorecardChoice, assemble};
use crate::domain::scorecard::ScorecardRecord;
use crate::web::AppState;
use crate::web::scorecards::archive::{drifted, record_choice, save_problem, store_saved};
use crate::web::scorecards::export;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/runs/{id}/scorecard", get(scorecard))
        .route("/api/v1/runs/{id}/verdict", get(verdict))
        .route("/api/v1/runs/{id}/scorecards", post(save))
        .route("/api/v1/scorecards", get(list_saved))
        .route("/api/v1/scorecards/{id}", get(get_saved))
}

/// One candidate's verdict as it read when the scorecard was saved.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SavedVerdictView {
    pub candidate_id: i64,
    /// The candidate's name then.
    pub candidate: String,
    /// GO, NO-GO or INCONCLUSIVE.
    pub verdict: String,
}

/// A saved scorecard: which run it judged, by which profile version and incumbent, who signed it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SavedScorecard {
    pub id: i64,
    pub run_id: i64,
    pub profile_id: i64,
    /// The profile version it was judged by (kept when the profile changes later).
    pub profile_version: u32,
    pub incumbent: Option<i64>,
    pub created_by: String,
    pub created_at: String,
    pub note: String,
    pub verdicts: Vec<SavedVerdictView>,
}

impl From<&ScorecardRecord> for SavedScorecard {
    fn from(r: &ScorecardRecord) -> Self {
        SavedScorecard {
            id: r.id,
            run_id: r.run_id,
            profile_id: r.profile_id,
            profile_version: r.profile_version,
            incumbent: r.incumbent,
            created_by: r.created_by.clone(),
            created_at: rfc3339(r.created_at),
            note: r.note.clone(),
            verdicts: r
                .verdicts
                .iter()
                .map(|v| SavedVerdictView {
                    candidate_id: v.candidate_id,
                    candidate: v.candidate.clone(),
                    verdict: v.verdict.as_str().to_string(),
                })
                .collect(),
        }
    }
}

/// A saved scorecard as listed, with the names the list shows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SavedListItem {
    #[serde(flatten)]
    pub saved: SavedScorecard,
    pub run_name: String,
    pub profile_name: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SavedList {
    #[serde(flatten)]
    pub page: PageInfo,
    /// Newest first.
    pub items: Vec<SavedListItem>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SavedDetail {
    #[serde(flatten)]
    pub saved: SavedScorecard,
    /// The profile's newest version (a re-judgement by it: `/api/v1/runs/{run_id}/scorecard?profile=…`).
    pub current_version: u32,
    /// Recomputing from the same records now gives another verdict than the one saved (e.g. the
    /// run was resumed since).
    pub drifted: bool,
    /// The scorecard at the saved profile version (`bakeoff.scorecard/1`, as the page's JSON export).
    #[schema(value_type = Object)]
    pub scorecard: serde_json::Value,
}

/// What to save: the scorecard of the run by a profile version, as the scorecard page shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScorecardSave {
    /// The threshold profile (default: the default profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<i64>,
    /// A version of the profile (default: its current one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The candidate the others are compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incumbent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Saved scorecards, newest first.
#[utoipa::path(get, operation_id = "list_saved_scorecards", path = "/api/v1/scorecards", tag = "scorecards",
    params(super::PageParams),
    responses((status = 200, description = "A page of saved scorecards", body = SavedList)))]
pub async fn list_saved(State(state): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let (limit, offset) = Params::parse(query).page()?;
    let total = state.store.count_scorecards().await?;
    let items = state
        .store
        .list_scorecards(limit, offset)
        .await?
        .into_iter()
        .map(|item| SavedListItem {
            saved: SavedScorecard::from(&item.record),
            run_name: item.run_name,
            profile_name: item.profile_name,
        })
        .collect();
    ok(&SavedList {
        page: PageInfo { total, limit, offset },
        items,
    })
}

/// One saved scorecard.
///
/// With its scorecard recomputed from the run's records at the profile version it was saved
/// with, and whether that still gives the verdicts saved.
#[utoipa::path(get, operation_id = "get_saved_scorecard", path = "/api/v1/scorecards/{id}", tag = "scorecards",
    params(("id" = i64, Path, description = "The saved scorecard's id")),
    responses((status = 200, description = "The saved scorecard", body = SavedDetail)))]
pub async fn get_saved(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "scorecard")?;
    let record = state
        .store
        .get_scorecard(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("scorecard #{id}")))?;
    let then = assemble(
        &state.store,
        &state.views.summaries,
        record.run_id,
        &record_choice(&record),
    )
    .await?;
    ok(&SavedDetail {
        saved: SavedScorecard::from(&record),
        current_version: then.current_version,
        drifted: drifted(&record, &then),
        scorecard: export::to_json(&then),
    })
}

/// Saves a run's scorecard.
///
/// Judged by the profile version asked for, with the verdicts as they read now, signed by the
/// caller (what the scorecard page's "save scorecard" does). Answers 201 with the saved
/// scorecard and its `Location`.
#[utoipa::path(post, operation_id = "save_scorecard", path = "/api/v1/runs/{id}/scorecards", tag = "scorecards",
    params(("id" = i64, Path, description = "The run's id")),
    request_body(content((ScorecardSave = "application/json"))),
    responses((status = 201, description = "The scorecard, saved", body = SavedScorecard,
        headers(("location" = String, description = "The saved scorecard's address")))))]
pub async fn save(State(state): State<AppState>, Path(raw): Path<String>, body: Body) -> ApiResult {
    let run_id = path_id(&raw, "run")?;
    let request: ScorecardSave = body.json()?;
    let run = state
        .store
        .get_run(run_id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("run #{run_id}")))?;
    // Ids in the body that name nothing are the body's fault (422), not the address's (404).
    if request.version.is_some() && request.profile.is_none() {
        return Err(Problem::field("version", "needs `profile`: the threshold profile it is a version of").into());
    }
    if let Some(profile) = request.profile
        && state
            .store
            .get_threshold_profile(profile, request.version)
            .await?
            .is_none()
    {
        let what = match request.version {
            Some(v) => (
                "version",
                format!("names no version of threshold profile #{profile}: {v}"),
            ),
            None => ("profile", format!("names no threshold profile: {profile}")),
        };
        return Err(Problem::field(what.0, what.1).into());
    }
    if let Some(incumbent) = request.incumbent
        && !run.candidate_ids.contains(&incumbent)
    {
        return Err(Problem::field(
            "incumbent",
            format!("candidate #{incumbent} is not part of run #{run_id}"),
        )
        .into());
    }
    let choice = ScorecardChoice {
        profile: request.profile,
        version: request.version,
        incumbent: request.incumbent,
        pipeline: Default::default(),
    };
    let j = assemble(&state.store, &state.views.summaries, run_id, &choice).await?;
    let created_by = crate::web::security::actor();
    let note = request.note.unwrap_or_default().trim().to_string();
    if let Some((field, what)) = save_problem(&j, &created_by, &note) {
        return Err(Problem::field(field, what).into());
    }
    let id = store_saved(&state, &j, &created_by, note).await?;
    let record = state
        .store
        .get_scorecard(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("scorecard #{id}")))?;
    let mut response = json(StatusCode::CREATED, &SavedScorecard::from(&record));
    if let Ok(location) = HeaderValue::from_str(&format!("/api/v1/scorecards/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// A run's scorecard.
///
/// By a profile version: the same document as the page's JSON export (`bakeoff.scorecard/1`:
/// candidates, every rule's measured value with its interval and state, verdicts with reasons,
/// metric definitions and the decision rule).
#[utoipa::path(get, operation_id = "get_scorecard", path = "/api/v1/runs/{id}/scorecard", tag = "scorecards",
    params(
        ("id" = i64, Path, description = "The run's id"),
        ("profile" = Option<i64>, Query, description = "The threshold profile (default: the default profile)"),
        ("version" = Option<u32>, Query, description = "A version of the profile (default: its current one)"),
        ("incumbent" = Option<i64>, Query, description = "The candidate others are compared with"),
    ),
    responses((status = 200, description = "The scorecard (bakeoff.scorecard/1)", body = serde_json::Value)))]
pub async fn scorecard(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let card = export::load(&state, &raw, query).await?;
    ok(&export::to_json(&card))
}

/// A run's verdict for CI.
///
/// By a threshold profile's current version, optionally checked against a finished baseline
/// run: what `bakeoff run start` writes as `--report-json`. A run that has not finished has no
/// verdict (exit code 4).
#[utoipa::path(get, operation_id = "get_verdict", path = "/api/v1/runs/{id}/verdict", tag = "scorecards",
    params(
        ("id" = i64, Path, description = "The run's id"),
        ("profile" = i64, Query, description = "The threshold profile that judges"),
        ("baseline" = Option<i64>, Query, description = "A finished run: a significant accuracy regression against it is NO-GO"),
    ),
    responses((status = 200, description = "The gate report (bakeoff.gate/1)", body = GateReport)))]
pub async fn verdict(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = path_id(&raw, "run")?;
    let params = Params::parse(query);
    let profile = params
        .int("profile", 1, i64::MAX)?
        .ok_or_else(|| bad_parameter("profile", "is required: the id of the threshold profile that judges"))?;
    let baseline = params.int("baseline", 1, i64::MAX)?;
    if state.store.get_run(id).await?.is_none() {
        return Err(Problem::not_found(&format!("run #{id}")).into());
    }
    ok(&gate::judge(&state.store, id, profile, baseline).await?)
}
