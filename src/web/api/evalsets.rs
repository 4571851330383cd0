//! `/api/v1/evalsets`: eval sets with their versions, a version's cases page by page, and
//! uploading a version (a bakeoff JSONL file; storing the same content again is a no-op that
//! answers the same version).
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiResult, Body, PageInfo, Params, Problem, ok, path_id, rfc3339};
use crate::domain::evalset::EvalSetFile;
use crate::store::{EvalSetSummary, EvalSetVersion};
use crate::web::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/evalsets", get(list).post(upload))
        .route("/api/v1/evalsets/{id}", get(get_one))
        .route("/api/v1/evalset-versions/{id}/cases", get(cases))
}

/// An eval set with its newest version.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EvalSetView {
    pub id: i64,
    pub name: String,
    /// extraction, classification, summarisation, translation or generation.
    pub task: String,
    pub description: Option<String>,
    pub latest_version_id: i64,
    /// SHA-256 of the newest version's normalised file.
    pub latest_hash: String,
    pub case_count: usize,
    pub version_count: usize,
    pub updated_at: String,
}

impl From<&EvalSetSummary> for EvalSetView {
    fn from(s: &EvalSetSummary) -> Self {
        EvalSetView {
            id: s.id,
            name: s.name.clone(),
            task: s.task.as_str().to_string(),
            description: s.description.clone(),
            latest_version_id: s.latest_version_id,
            latest_hash: s.latest_hash.clone(),
            case_count: s.case_count,
            version_count: s.version_count,
            updated_at: rfc3339(s.updated_at),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EvalSetList {
    pub items: Vec<EvalSetView>,
}

/// One immutable version.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VersionView {
    pub id: i64,
    pub evalset_id: i64,
    pub content_hash: String,
    pub case_count: usize,
    pub created_at: String,
}

impl From<&EvalSetVersion> for VersionView {
    fn from(v: &EvalSetVersion) -> Self {
        VersionView {
            id: v.id,
            evalset_id: v.evalset_id,
            content_hash: v.content_hash.clone(),
            case_count: v.file.cases.len(),
            created_at: rfc3339(v.created_at),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EvalSetDetail {
    #[serde(flatten)]
    pub evalset: EvalSetView,
    /// Every version, newest first.
    pub versions: Vec<VersionView>,
}

/// A page of one version's cases, with the file's header.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CasesPage {
    pub version: VersionView,
    /// The file's first line (`bakeoff_evalset`, name, task, prompt, graders, …).
    #[schema(value_type = Object)]
    pub header: serde_json::Value,
    #[serde(flatten)]
    pub page: PageInfo,
    /// Cases in file order, as the file holds them (id, vars or messages, expected, graders, tags, weight).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<serde_json::Value>,
}

/// What an upload stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UploadedVersion {
    pub version: VersionView,
    pub name: String,
}

/// Every eval set, with its newest version.
#[utoipa::path(get, operation_id = "list_evalsets", path = "/api/v1/evalsets", tag = "evalsets",
    responses((status = 200, description = "The eval sets", body = EvalSetList)))]
pub async fn list(State(state): State<AppState>) -> ApiResult {
    let items = state
        .store
        .list_evalsets()
        .await?
        .iter()
        .map(EvalSetView::from)
        .collect();
    ok(&EvalSetList { items })
}

/// One eval set with every version.
#[utoipa::path(get, operation_id = "get_evalset", path = "/api/v1/evalsets/{id}", tag = "evalsets",
    params(("id" = i64, Path, description = "The eval set's id (not a version's)")),
    responses((status = 200, description = "The eval set and its versions", body = EvalSetDetail)))]
pub async fn get_one(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "eval set")?;
    let summary = state
        .store
        .list_evalsets()
        .await?
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| Problem::not_found(&format!("eval set #{id}")))?;
    let mut versions = state.store.list_evalset_versions(id).await?;
    versions.sort_by_key(|v| std::cmp::Reverse(v.id));
    ok(&EvalSetDetail {
        evalset: EvalSetView::from(&summary),
        versions: versions.iter().map(VersionView::from).collect(),
    })
}

/// One version's cases, in file order, page by page.
#[utoipa::path(get, operation_id = "list_evalset_cases", path = "/api/v1/evalset-versions/{id}/cases", tag = "evalsets",
    params(
        ("id" = i64, Path, description = "The version's id"),
        super::PageParams,
    ),
    responses((status = 200, description = "A page of cases", body = CasesPage)))]
pub async fn cases(State(state): State<AppState>, Path(raw): Path<String>, RawQuery(query): RawQuery) -> ApiResult {
    let id = path_id(&raw, "eval set version")?;
    let (limit, offset) = Params::parse(query).page()?;
    let version = state
        .store
        .get_evalset_version(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("eval set version #{id}")))?;
    let items = version
        .file
        .cases
        .iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(limit as usize)
        .map(|c| serde_json::to_value(c).unwrap_or_default())
        .collect();
    ok(&CasesPage {
        version: VersionView::from(&version),
        header: serde_json::to_value(&version.file.header).unwrap_or_default(),
        page: PageInfo {
            total: version.file.cases.len() as i64,
            limit,
            offset,
        },
        items,
    })
}

/// Stores an eval-set version.
///
/// The body is a bakeoff JSONL file, stored as a version of the set it names (`bakeoff evalset
/// import` converts other formats first; `bakeoff run start --server` does so itself). The same
/// content again answers the version already stored.
#[utoipa::path(post, operation_id = "upload_evalset", path = "/api/v1/evalsets", tag = "evalsets",
    request_body(content((String = "application/jsonl")), description = "A bakeoff eval-set file (JSON lines: the header, then one case per line)"),
    responses((status = 200, description = "The stored version", body = UploadedVersion)))]
pub async fn upload(State(state): State<AppState>, body: Body) -> ApiResult {
    let file = EvalSetFile::parse("request body", body.text()?).map_err(|e| {
        Problem::fields(
            e.problems
                .iter()
                .map(|p| super::problem::FieldProblem {
                    field: p.field.clone().unwrap_or_else(|| "body".to_string()),
                    message: p.message.clone(),
                    line: p.line,
                })
                .collect(),
        )
    })?;
    // An upload of stored content stores (and audits) nothing: that version is answered.
    let actor = crate::web::security::actor();
    let id = crate::app::evalsets::save_version(&state.store, &file, &actor, "uploaded through the API".into())
        .await?
        .id;
    let version = state
        .store
        .get_evalset_version(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("eval set version #{id}")))?;
    ok(&UploadedVersion {
        version: VersionView::from(&version),
        name: file.header.name.clone(),
    })
}
