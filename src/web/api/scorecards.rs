//! A run judged by a threshold profile: `/api/v1/runs/{id}/scorecard`, the scorecard page's
//! figures as its JSON export holds them (`bakeoff.scorecard/1`, from the one scorecard
//! assembly), and `/api/v1/runs/{id}/verdict`, the CI gate's report (`bakeoff.gate/1`: each
//! candidate's verdict with every rule, the exit code `bakeoff run start` would give, and the
//! paired test against a baseline run when one is named).
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;

use super::{ApiResult, Params, Problem, bad_parameter, ok, path_id};
use crate::app::gate::{self, GateReport};
use crate::web::AppState;
use crate::web::scorecards::export;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/runs/{id}/scorecard", get(scorecard))
        .route("/api/v1/runs/{id}/verdict", get(verdict))
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
        return Err(Problem::not_found(&format!("run #{id}")));
    }
    ok(&gate::judge(&state.store, id, profile, baseline).await?)
}
