//! `/api/v1/workloads`: workloads with their versions, a version's summary (what its page shows),
//! and importing a traffic log as a version (the same content again answers the same version).
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiResult, Body, Params, Problem, bad_parameter, ok, path_id, rfc3339};
use crate::app::workloads::{LogImport, read_log, save_version};
use crate::domain::workload::import::Format;
use crate::domain::workload::summary::WorkloadSummary;
use crate::store::WorkloadVersionLink;
use crate::web::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/workloads", get(list).post(import))
        .route("/api/v1/workload-versions/{id}", get(version))
}

/// One immutable version, without its requests.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkloadVersionView {
    pub id: i64,
    /// SHA-256 of the version's normalised file.
    pub content_hash: String,
    pub requests: usize,
    pub duration_ms: f64,
    /// openai-log, traces, mooncake or generated.
    pub source: String,
    /// The real prompts are kept (an explicit choice at import).
    pub keeps_text: bool,
    pub created_at: String,
}

impl From<&WorkloadVersionLink> for WorkloadVersionView {
    fn from(v: &WorkloadVersionLink) -> Self {
        WorkloadVersionView {
            id: v.id,
            content_hash: v.content_hash.clone(),
            requests: v.requests,
            duration_ms: v.duration_ms,
            source: v.source.clone(),
            keeps_text: v.keeps_text,
            created_at: rfc3339(v.created_at),
        }
    }
}

/// A workload with its newest version.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkloadView {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub latest_version_id: i64,
    pub version_count: usize,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkloadList {
    pub items: Vec<WorkloadView>,
}

/// A version as its page shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkloadVersionDetail {
    pub id: i64,
    pub workload_id: i64,
    pub name: String,
    pub content_hash: String,
    /// The file's header line (`bakeoff_workload`, name, source, block_tokens, keeps_text).
    #[schema(value_type = Object)]
    pub header: serde_json::Value,
    /// Arrivals, length distributions, the share of requests with a shared prefix and of prompt
    /// tokens in repeated blocks.
    #[schema(value_type = Object)]
    pub summary: serde_json::Value,
    /// Every version of the workload, newest first.
    pub versions: Vec<WorkloadVersionView>,
}

/// What an import stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImportedWorkload {
    pub version_id: i64,
    pub name: String,
    /// False: the same content was stored already (nothing was written).
    pub stored: bool,
    pub requests: usize,
}

/// Every workload, with its newest version.
#[utoipa::path(get, operation_id = "list_workloads", path = "/api/v1/workloads", tag = "workloads",
    responses((status = 200, description = "The workloads", body = WorkloadList)))]
pub async fn list(State(state): State<AppState>) -> ApiResult {
    let items = state
        .store
        .list_workloads()
        .await?
        .into_iter()
        .map(|w| WorkloadView {
            id: w.id,
            name: w.name,
            description: w.description,
            latest_version_id: w.latest_version_id,
            version_count: w.version_count,
            updated_at: rfc3339(w.updated_at),
        })
        .collect();
    ok(&WorkloadList { items })
}

/// One version's summary and the workload's versions.
#[utoipa::path(get, operation_id = "get_workload_version", path = "/api/v1/workload-versions/{id}", tag = "workloads",
    params(("id" = i64, Path, description = "The version's id")),
    responses((status = 200, description = "The version", body = WorkloadVersionDetail)))]
pub async fn version(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id = path_id(&raw, "workload version")?;
    let version = state
        .store
        .get_workload_version(id)
        .await?
        .ok_or_else(|| Problem::not_found(&format!("workload version #{id}")))?;
    let versions = state.store.list_workload_versions(version.workload_id).await?;
    ok(&WorkloadVersionDetail {
        id,
        workload_id: version.workload_id,
        name: version.file.header.name.clone(),
        content_hash: version.content_hash.clone(),
        header: serde_json::to_value(&version.file.header).unwrap_or_default(),
        summary: serde_json::to_value(WorkloadSummary::of(&version.file)).unwrap_or_default(),
        versions: versions.iter().map(WorkloadVersionView::from).collect(),
    })
}

/// Imports a traffic log as a workload version.
///
/// The body is the log: an OpenAI-style request log (JSONL), an OpenTelemetry or Langfuse trace
/// export, a Mooncake trace, or a bakeoff workload file. A bad line is refused with its line and
/// field, and nothing is stored.
#[utoipa::path(post, operation_id = "import_workload", path = "/api/v1/workloads", tag = "workloads",
    params(
        ("name" = String, Query, description = "The workload's name"),
        ("format" = Option<String>, Query, description = "auto (default), openai, otel, mooncake or workload"),
        ("keep_text" = Option<bool>, Query, description = "Keep the real prompts (default false: lengths, arrivals and prefix hashes only)"),
        ("block_tokens" = Option<u32>, Query, description = "Tokens per prefix block for logs with text (default 512)"),
    ),
    request_body(content((String = "application/jsonl")), description = "The log"),
    responses((status = 200, description = "The stored version", body = ImportedWorkload)))]
pub async fn import(State(state): State<AppState>, RawQuery(query): RawQuery, body: Body) -> ApiResult {
    let params = Params::parse(query);
    let name = params
        .text("name")
        .ok_or_else(|| bad_parameter("name", "is required"))?;
    let format = match params.text("format").as_deref() {
        None | Some("auto") => None,
        Some(f) => Some(
            Format::parse(f)
                .ok_or_else(|| bad_parameter("format", format!("must be auto, {}", Format::NAMES.join(", "))))?,
        ),
    };
    let keep_text = matches!(params.text("keep_text").as_deref(), Some("true" | "1" | "on"));
    let block_tokens = params.int("block_tokens", 1, 1_048_576)?.map(|n| n as u32);
    let how = LogImport {
        name,
        description: params.text("description").unwrap_or_default(),
        format,
        keep_text,
        block_tokens,
    };
    let workload = read_log("request body", body.text()?, &how).map_err(|e| {
        Problem::fields(vec![super::problem::FieldProblem {
            field: e.field.clone().unwrap_or_else(|| "body".to_string()),
            message: e.message.clone(),
            line: e.line,
        }])
    })?;
    let actor = crate::web::security::actor();
    let saved = save_version(&state.store, &workload, &actor, "imported through the API".into()).await?;
    ok(&ImportedWorkload {
        version_id: saved.id,
        name: workload.header.name.clone(),
        stored: saved.stored,
        requests: workload.requests.len(),
    })
}
