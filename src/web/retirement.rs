//! Retire / restore buttons on the candidates, eval sets and thresholds lists, and "Make
//! default" on a threshold profile. Each changes one thing, is audited, and goes back to the
//! list (`app::retirement` does the work).
use axum::Router;
use axum::extract::{Path, State};
use axum::response::Redirect;
use axum::routing::post;

use super::AppState;
use super::error::{WebError, parse_id};
use crate::app::retirement;
use crate::domain::audit::Action;
use crate::domain::retirement::ItemKind;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/candidates/{id}/retire",
            post(|s, p| change(s, p, ItemKind::Candidate, true)),
        )
        .route(
            "/candidates/{id}/restore",
            post(|s, p| change(s, p, ItemKind::Candidate, false)),
        )
        .route(
            "/evalsets/{version_id}/retire",
            post(|s, p| change(s, p, ItemKind::EvalSet, true)),
        )
        .route(
            "/evalsets/{version_id}/restore",
            post(|s, p| change(s, p, ItemKind::EvalSet, false)),
        )
        .route(
            "/thresholds/{id}/retire",
            post(|s, p| change(s, p, ItemKind::ThresholdProfile, true)),
        )
        .route(
            "/thresholds/{id}/restore",
            post(|s, p| change(s, p, ItemKind::ThresholdProfile, false)),
        )
        .route(
            "/candidates/{id}/delete",
            post(|s, p| delete_unused(s, p, ItemKind::Candidate)),
        )
        .route(
            "/evalsets/{version_id}/delete",
            post(|s, p| delete_unused(s, p, ItemKind::EvalSet)),
        )
        .route(
            "/thresholds/{id}/delete",
            post(|s, p| delete_unused(s, p, ItemKind::ThresholdProfile)),
        )
        .route("/thresholds/{id}/default", post(make_default))
}

/// Where each kind is listed, and its audit actions.
struct KindPages {
    list: &'static str,
    retired: Action,
    restored: Action,
    deleted: Action,
}

fn pages_of(kind: ItemKind) -> KindPages {
    let (list, retired, restored, deleted) = match kind {
        ItemKind::Candidate => (
            "/candidates",
            Action::CandidateRetired,
            Action::CandidateRestored,
            Action::CandidateDeleted,
        ),
        ItemKind::EvalSet => (
            "/evalsets",
            Action::EvalSetRetired,
            Action::EvalSetRestored,
            Action::EvalSetDeleted,
        ),
        ItemKind::ThresholdProfile => (
            "/thresholds",
            Action::ThresholdProfileRetired,
            Action::ThresholdProfileRestored,
            Action::ThresholdProfileDeleted,
        ),
    };
    KindPages {
        list,
        retired,
        restored,
        deleted,
    }
}

/// Retires (`retire`) or restores the item named by the path.
async fn change(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    kind: ItemKind,
    retire: bool,
) -> Result<Redirect, WebError> {
    let id = item_id(&state, kind, &raw).await?;
    let pages = pages_of(kind);
    let actor = super::security::actor();
    let (name, action, detail) = if retire {
        let name = retirement::retire(&state.store, kind, id, &actor).await?;
        (
            name,
            pages.retired,
            "retired: hidden from lists and new runs; its runs keep what they measured",
        )
    } else {
        (
            retirement::restore(&state.store, kind, id).await?,
            pages.restored,
            "restored to the lists",
        )
    };
    super::audit::record(
        &state,
        action,
        format!("{} #{id} {name:?}", kind.label()),
        detail.to_string(),
    )
    .await?;
    Ok(Redirect::to(pages.list))
}

/// The item id named by the path; an eval set through any of its versions, since the lists
/// link versions.
async fn item_id(state: &AppState, kind: ItemKind, raw: &str) -> Result<i64, WebError> {
    match kind {
        ItemKind::EvalSet => evalset_of(state, raw).await,
        _ => parse_id(raw, kind.label()),
    }
}

/// Deletes (admin only, see `access.rs`) an item nothing refers to; otherwise says why not.
async fn delete_unused(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    kind: ItemKind,
) -> Result<Redirect, WebError> {
    let id = item_id(&state, kind, &raw).await?;
    let name = retirement::delete_unused(&state.store, kind, id).await?;
    let pages = pages_of(kind);
    super::audit::record(
        &state,
        pages.deleted,
        format!("{} #{id} {name:?}", kind.label()),
        "deleted: no run measured it and no saved scorecard named it".to_string(),
    )
    .await?;
    Ok(Redirect::to(pages.list))
}

/// An eval set is retired as a whole, through any of its versions' pages.
async fn evalset_of(state: &AppState, raw: &str) -> Result<i64, WebError> {
    let version_id = parse_id(raw, "eval set version")?;
    let version = state
        .store
        .get_evalset_version_head(version_id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("eval set version #{version_id}")))?;
    Ok(version.evalset_id)
}

async fn make_default(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Redirect, WebError> {
    let id = parse_id(&raw, "threshold profile")?;
    let name = retirement::choose_default_profile(&state.store, id, &super::security::actor()).await?;
    super::audit::record(
        &state,
        Action::DefaultProfileChosen,
        format!("threshold profile #{id} {name:?}"),
        "now judges the archive, the runs list and scorecards opened without a choice".to_string(),
    )
    .await?;
    Ok(Redirect::to("/thresholds"))
}
