//! Eval sets: the list, one version's detail with its cases (paginated on the server), the
//! download of the version's normalised file (the exact text its hash identifies), the JSON
//! Schema of the format; importing (`import`), case-by-case editing (`edit`) and the
//! difference between two versions (`diff`).
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

mod diff;
mod edit;
mod import;

pub use edit::CaseForm;
pub use import::MAX_UPLOAD_BODY_BYTES;

use super::AppState;
use super::error::{WebError, parse_id, parse_page};
use super::views::{Pagination, or_dash, short_hash};
use crate::domain::evalset::{EvalCase, EvalSetFile};
use crate::domain::grading::Grader;
use crate::domain::retirement::ItemKind;
use crate::domain::validation::truncate;
use crate::store::EvalSetVersion;

pub const CASES_PER_PAGE: u32 = 50;
/// Characters of the rendered prompt shown per case.
const PROMPT_EXCERPT: usize = 200;
const EXPECTED_EXCERPT: usize = 120;

/// The file format's JSON Schema (draft 2020-12), as published in `docs/`.
pub const SCHEMA_JSON: &str = include_str!("../../docs/evalset.schema.json");

pub fn router() -> Router<AppState> {
    // Uploads may be as large as an eval-set file; every other route keeps the global limit.
    let upload_limit = DefaultBodyLimit::max(MAX_UPLOAD_BODY_BYTES);
    Router::new()
        .route("/evalsets", get(list))
        .route("/evalsets/schema.json", get(schema))
        .route(
            "/evalsets/import",
            get(import::form).post(import::preview).layer(upload_limit),
        )
        .route("/evalsets/import/save", post(import::save).layer(upload_limit))
        .route("/evalsets/{version_id}", get(detail))
        .route("/evalsets/{version_id}/profile", post(choose_profile))
        .route("/evalsets/{version_id}/download", get(download))
        .route("/evalsets/{version_id}/diff/{other_id}", get(diff::page))
        .route(
            "/evalsets/{version_id}/cases/new",
            get(edit::new_form).post(edit::create),
        )
        .route(
            "/evalsets/{version_id}/cases/{position}/edit",
            get(edit::edit_form).post(edit::update),
        )
        .route("/evalsets/{version_id}/cases/{position}/delete", post(edit::delete))
}

#[derive(Debug, Clone)]
pub struct EvalSetRow {
    pub name: String,
    pub task: &'static str,
    pub description: String,
    pub cases: usize,
    pub versions: usize,
    pub version_id: i64,
    pub hash: String,
    pub updated: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "evalsets/list.html")]
pub struct EvalSetsPage {
    pub nav: &'static str,
    pub rows: Vec<EvalSetRow>,
    /// Retired sets: listed apart, each with Restore.
    pub retired: Vec<EvalSetRow>,
}

async fn list(State(state): State<AppState>) -> Result<EvalSetsPage, WebError> {
    let retired_ids = crate::app::retirement::retired(&state.store, ItemKind::EvalSet).await?;
    let (retired, rows): (Vec<_>, Vec<_>) = state
        .store
        .list_evalsets()
        .await?
        .into_iter()
        .partition(|s| retired_ids.contains(&s.id));
    let to_row = |s: crate::store::EvalSetSummary| EvalSetRow {
        name: s.name,
        task: s.task.as_str(),
        description: s.description.map(|d| truncate(&d, 160)).unwrap_or_default(),
        cases: s.case_count,
        versions: s.version_count,
        version_id: s.latest_version_id,
        hash: short_hash(&s.latest_hash).to_string(),
        updated: s.updated_at.display(),
    };
    Ok(EvalSetsPage {
        nav: "evalsets",
        rows: rows.into_iter().map(to_row).collect(),
        retired: retired.into_iter().map(to_row).collect(),
    })
}

#[derive(Debug, Clone)]
pub struct CaseRowView {
    /// 1-based position in the file (the edit links use it).
    pub position: usize,
    pub id: String,
    pub prompt: String,
    pub expected: String,
    pub tags: String,
    pub graders: String,
}

#[derive(Debug, Clone)]
pub struct VersionLink {
    pub id: i64,
    pub hash: String,
    pub created: String,
    pub cases: usize,
    pub current: bool,
    /// The diff page between this version and the one shown, oldest first.
    pub compare_href: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "evalsets/detail.html")]
pub struct EvalSetPage {
    pub nav: &'static str,
    pub version_id: i64,
    pub name: String,
    pub task: &'static str,
    pub description: Option<String>,
    pub language: String,
    pub hash: String,
    pub hash_short: String,
    pub created: String,
    pub case_count: usize,
    pub system: Option<String>,
    pub prompt: Option<String>,
    pub max_tokens: String,
    pub temperature: String,
    pub graders: Vec<String>,
    pub versions: Vec<VersionLink>,
    pub cases: Vec<CaseRowView>,
    pub pager: Pagination,
    /// What the last action did, after a redirect here.
    pub notice: Option<&'static str>,
    /// The threshold profile this eval set is judged by (id, name), when one was chosen.
    pub judged_by: Option<(i64, String)>,
    /// Every profile, as (id, name), for choosing one.
    pub profile_options: Vec<(i64, String)>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub page: Option<String>,
    pub notice: Option<String>,
}

fn notice_text(raw: Option<&str>) -> Option<&'static str> {
    Some(match raw? {
        "saved" => "Saved. This is the stored version (saving identical content stores nothing new).",
        "edited" => "Saved as a new version. The version you edited is unchanged.",
        "added" => "Case added as a new version. The previous version is unchanged.",
        "deleted" => "Case deleted in a new version. The previous version is unchanged.",
        "unchanged" => "Nothing changed: the case is as it was, so no new version was stored.",
        "profile" => "Saved: runs of this eval set are judged by the chosen threshold profile.",
        _ => return None,
    })
}

/// A grader in words, e.g. `exact (trim, collapse whitespace)`.
pub fn describe_grader(g: &Grader) -> String {
    g.describe()
}

/// What varies per case: the rendered non-system messages (the system message is shown once
/// in the header instead of on every row).
fn case_prompt(file: &EvalSetFile, case: &EvalCase) -> String {
    file.messages_for(case)
        .into_iter()
        .filter(|m| m.role != "system")
        .map(|m| m.content)
        .collect::<Vec<_>>()
        .join("\n\n")
}

async fn load(state: &AppState, raw: &str) -> Result<EvalSetVersion, WebError> {
    let id = parse_id(raw, "eval set version")?;
    state
        .store
        .get_evalset_version(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("eval set version #{id}")))
}

/// `POST /evalsets/{version_id}/profile`: the threshold profile this eval set (every version of
/// it) is judged by: the run page's verdicts and the scorecard's fit note follow it.
async fn choose_profile(
    State(state): State<AppState>,
    user: crate::web::security::CurrentUser,
    Path(raw): Path<String>,
    body: super::views::FormBody,
) -> Result<axum::response::Response, WebError> {
    use axum::response::IntoResponse;
    let id = parse_id(&raw, "eval set version")?;
    let version = state
        .store
        .get_evalset_version_head(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("eval set version #{id}")))?;
    let profile = parse_id(body.get("profile").unwrap_or_default(), "threshold profile")?;
    crate::app::profiles::set_profile_for_evalset(&state.store, &version.header.name, profile, &user.name).await?;
    Ok(axum::response::Redirect::to(&format!("/evalsets/{id}?notice=profile")).into_response())
}

/// One version's page: its header and one page of its cases, read from the database page by
/// page (from its first position, an index seek on `eval_cases`), so a 100,000-case version
/// costs what a 50-case page costs in memory and CPU.
async fn detail(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<EvalSetPage, WebError> {
    let id = parse_id(&raw, "eval set version")?;
    let version = state
        .store
        .get_evalset_version_head(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("eval set version #{id}")))?;
    let page = parse_page(q.page.as_deref())?;
    let pager = Pagination::new(
        format!("/evalsets/{}", version.id),
        page,
        CASES_PER_PAGE,
        version.case_count as i64,
    );
    if pager.out_of_range() {
        return Err(WebError::NotFound(format!(
            "page {page} of this eval set's cases (there are {} pages)",
            pager.pages
        )));
    }
    let shown = state
        .store
        .list_eval_cases_page(version.id, pager.offset(), i64::from(CASES_PER_PAGE))
        .await?;
    // Only the page's cases, with the header that renders their prompts.
    let file = EvalSetFile {
        header: version.header,
        cases: shown,
    };
    let cases = case_rows(&file, file.cases.iter())
        .into_iter()
        .enumerate()
        .map(|(i, mut row)| {
            row.position = pager.offset() as usize + i + 1;
            row
        })
        .collect();
    let versions = state
        .store
        .list_evalset_version_links(version.evalset_id)
        .await?
        .into_iter()
        .map(|v| VersionLink {
            id: v.id,
            hash: short_hash(&v.content_hash).to_string(),
            created: v.created_at.display(),
            cases: v.case_count,
            current: v.id == version.id,
            compare_href: if v.id < version.id {
                format!("/evalsets/{}/diff/{}", v.id, version.id)
            } else {
                format!("/evalsets/{}/diff/{}", version.id, v.id)
            },
        })
        .collect();
    let h = &file.header;
    let profiles = state.store.list_threshold_profiles().await?;
    let judged_by = crate::app::profiles::profile_for_evalset(&state.store, &h.name)
        .await?
        .and_then(|id| profiles.iter().find(|p| p.id == id))
        .map(|p| (p.id, p.name.clone()));
    Ok(EvalSetPage {
        judged_by,
        profile_options: profiles.into_iter().map(|p| (p.id, p.name)).collect(),
        nav: "evalsets",
        version_id: version.id,
        name: h.name.clone(),
        task: h.task.as_str(),
        description: h.description.clone(),
        language: or_dash(h.language.as_ref()),
        hash: version.content_hash.clone(),
        hash_short: short_hash(&version.content_hash).to_string(),
        created: version.created_at.display(),
        case_count: version.case_count,
        system: h.system.clone(),
        prompt: h.prompt.clone(),
        max_tokens: or_dash(h.max_tokens),
        temperature: or_dash(h.temperature),
        graders: h.graders.iter().map(describe_grader).collect(),
        versions,
        cases,
        pager,
        notice: notice_text(q.notice.as_deref()),
    })
}

/// Rows for a case table (positions numbered from 1 in the order given).
pub fn case_rows<'a>(file: &EvalSetFile, cases: impl Iterator<Item = &'a EvalCase>) -> Vec<CaseRowView> {
    cases
        .enumerate()
        .map(|(i, case)| CaseRowView {
            position: i + 1,
            id: case.id.clone(),
            prompt: truncate(&case_prompt(file, case), PROMPT_EXCERPT),
            expected: case
                .expected_text()
                .map(|t| truncate(&t, EXPECTED_EXCERPT))
                .unwrap_or_else(|| "—".into()),
            tags: case.tags.join(", "),
            graders: case.graders.iter().map(describe_grader).collect::<Vec<_>>().join("; "),
        })
        .collect()
}

async fn schema() -> Response {
    let mut response = SCHEMA_JSON.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/schema+json; charset=utf-8"),
    );
    response
}

/// A file name safe for a header: the set's name reduced to `[A-Za-z0-9._-]`, plus the hash.
fn download_name(name: &str, hash: &str) -> String {
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    base = base.trim_matches(|c| c == '-' || c == '.').to_string();
    if base.is_empty() {
        base = "evalset".into();
    }
    format!(
        "{}-{}.jsonl",
        truncate(&base, 80).trim_end_matches('…'),
        short_hash(hash)
    )
}

async fn download(State(state): State<AppState>, Path(raw): Path<String>) -> Result<Response, WebError> {
    let version = load(&state, &raw).await?;
    let name = download_name(&version.file.header.name, &version.content_hash);
    let mut response = version.file.normalised().into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/jsonl; charset=utf-8"),
    );
    let disposition = format!("attachment; filename=\"{name}\"");
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&disposition).map_err(|e| WebError::Internal(format!("content-disposition: {e}")))?,
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn download_names_are_header_safe() {
        let hash = "0123456789abcdef0123";
        assert_eq!(
            download_name("support ticket/triage", hash),
            "support-ticket-triage-0123456789ab.jsonl"
        );
        assert_eq!(download_name("情感\"分类\"", hash), "evalset-0123456789ab.jsonl");
    }

    #[test]
    fn graders_are_described_in_words() {
        let g: Grader = serde_json::from_str(r#"{"kind":"exact"}"#).unwrap();
        assert_eq!(describe_grader(&g), "exact (trim, collapse whitespace)");
    }
}
