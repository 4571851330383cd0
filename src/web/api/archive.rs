//! `/api/v1/archive`: ended runs with the archive page's filters (eval set, candidate, status,
//! created from/to, threshold profile, verdict) and each candidate's recorded verdict by the
//! shown profile (the filtered one, else the default profile), read by the page's own filter.
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::runs::RunListItem;
use super::{ApiResult, PageInfo, Params, ok};
use crate::web::AppState;
use crate::web::archive::list::{ArchiveFilters, resolve, verdicts_of};

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/archive", get(query))
}

/// The profile whose verdicts the answer carries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShownProfileView {
    pub id: i64,
    pub name: String,
    pub current_version: u32,
}

/// One candidate's recorded verdict.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VerdictView {
    pub candidate_id: i64,
    /// GO, NO-GO or INCONCLUSIVE.
    pub verdict: String,
    /// The profile version that judged (older than current when the profile changed since).
    pub profile_version: u32,
    /// The saved scorecard it was read from, when one was saved.
    pub scorecard_id: Option<i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArchiveRun {
    #[serde(flatten)]
    pub run: RunListItem,
    /// Verdicts by the shown profile, in the run's candidate order; empty when not judged yet.
    pub verdicts: Vec<VerdictView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArchivePage {
    #[serde(flatten)]
    pub page: PageInfo,
    pub profile: Option<ShownProfileView>,
    /// Newest first.
    pub items: Vec<ArchiveRun>,
}

/// Ended runs (finished, failed, cancelled), filtered as on the archive page.
#[utoipa::path(get, operation_id = "query_archive", path = "/api/v1/archive", tag = "archive",
    params(
        ("evalset" = Option<i64>, Query, description = "An eval set's id"),
        ("candidate" = Option<i64>, Query, description = "A candidate's id"),
        ("status" = Option<String>, Query, description = "finished, failed or cancelled"),
        ("from" = Option<String>, Query, description = "Created on or after this day (YYYY-MM-DD, UTC)"),
        ("to" = Option<String>, Query, description = "Created on or before this day (YYYY-MM-DD, UTC)"),
        ("profile" = Option<i64>, Query, description = "The threshold profile whose verdicts are shown and filtered"),
        ("verdict" = Option<String>, Query, description = "GO, NO-GO or INCONCLUSIVE (by `profile`, else the default profile)"),
        super::PageParams,
    ),
    responses((status = 200, description = "A page of archived runs", body = ArchivePage)))]
pub async fn query(State(state): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let params = Params::parse(query);
    let (limit, offset) = params.page()?;
    let mut filters = ArchiveFilters::read(|name| params.text(name).unwrap_or_default());
    let profiles = state.store.list_threshold_profiles().await?;
    let (filter, shown) = resolve(&state, &mut filters, &profiles).await?;
    let total = state.store.count_runs_filtered(&filter).await?;
    let items = state.store.list_runs_filtered(&filter, limit, offset).await?;
    let verdicts = verdicts_of(&state, &items, shown.as_ref()).await?;
    let items = items
        .into_iter()
        .map(|item| ArchiveRun {
            verdicts: item
                .run
                .candidate_ids
                .iter()
                .filter_map(|c| {
                    verdicts
                        .iter()
                        .find(|v| v.run_id == item.run.id && v.candidate_id == *c)
                })
                .map(|v| VerdictView {
                    candidate_id: v.candidate_id,
                    verdict: v.verdict.as_str().to_string(),
                    profile_version: v.profile_version,
                    scorecard_id: v.scorecard_id,
                })
                .collect(),
            run: RunListItem::from(item),
        })
        .collect();
    ok(&ArchivePage {
        page: PageInfo { total, limit, offset },
        profile: shown.map(|p| ShownProfileView {
            id: p.id,
            name: p.name,
            current_version: p.current_version,
        }),
        items,
    })
}
