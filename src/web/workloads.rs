//! Workloads (docs/workloads.md): the list with the upload of a traffic log and the
//! shared-prefix generator, one version's page (arrivals, length distributions, shared
//! prefixes, versions) and the download of its normalised file. A bad file is refused whole with
//! its line and field, and nothing is stored.
use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{DefaultBodyLimit, Form, Multipart, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::AppState;
use super::error::{WebError, parse_id};
use super::views::short_hash;
use crate::app::pages::charts::{Chart, arrivals_chart};
use crate::app::workloads::{LogImport, read_log, save_version};
use crate::domain::format;
use crate::domain::metrics::Distribution;
use crate::domain::workload::generate::{PoolPrefix, SharedPrefixSpec};
use crate::domain::workload::import::Format;
use crate::domain::workload::summary::WorkloadSummary;
use crate::domain::workload::{DEFAULT_BLOCK_TOKENS, MAX_FILE_BYTES};

pub fn router() -> Router<AppState> {
    let upload_limit = DefaultBodyLimit::max(MAX_FILE_BYTES + 256 * 1024);
    Router::new()
        .route("/workloads", get(list))
        .route("/workloads/import", post(import).layer(upload_limit))
        .route("/workloads/generate", post(generate))
        .route("/workloads/versions/{version_id}", get(detail))
        .route("/workloads/versions/{version_id}/download", get(download))
}

#[derive(Debug, Clone)]
pub struct WorkloadRow {
    pub name: String,
    pub description: String,
    pub version_id: i64,
    pub versions: usize,
    pub requests: usize,
    pub duration: String,
    pub source: String,
    pub keeps_text: bool,
    pub updated: String,
}

/// The generator form's fields, as typed (re-shown after an error).
#[derive(Debug, Clone, Deserialize)]
pub struct GenerateForm {
    pub name: String,
    #[serde(default)]
    pub requests: String,
    #[serde(default)]
    pub per_second: String,
    #[serde(default)]
    pub poisson: Option<String>,
    #[serde(default)]
    pub seed: String,
    #[serde(default)]
    pub system_tokens: String,
    /// "tokens:weight, tokens:weight", e.g. "1000:3, 4000:1".
    #[serde(default)]
    pub prefixes: String,
    #[serde(default)]
    pub suffix_min: String,
    #[serde(default)]
    pub suffix_max: String,
    #[serde(default)]
    pub output_tokens: String,
    #[serde(default)]
    pub cache_bust: Option<String>,
}

impl Default for GenerateForm {
    fn default() -> Self {
        GenerateForm {
            name: String::new(),
            requests: "600".into(),
            per_second: "2".into(),
            poisson: Some("on".into()),
            seed: "1".into(),
            system_tokens: "2000".into(),
            prefixes: "500:3, 1500:1".into(),
            suffix_min: "50".into(),
            suffix_max: "400".into(),
            output_tokens: "200".into(),
            cache_bust: None,
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "workloads/list.html")]
pub struct WorkloadsPage {
    pub nav: &'static str,
    pub rows: Vec<WorkloadRow>,
    pub problem: Option<String>,
    pub generate: GenerateForm,
    pub formats: Vec<(&'static str, &'static str)>,
    pub max_file: String,
    pub block_tokens: u32,
}

impl WorkloadsPage {
    async fn new(state: &AppState, problem: Option<String>, generate: GenerateForm) -> Result<Self, WebError> {
        let rows = state
            .store
            .list_workloads()
            .await?
            .into_iter()
            .map(|w| WorkloadRow {
                name: w.name,
                description: crate::domain::validation::truncate(&w.description, 160),
                version_id: w.latest_version_id,
                versions: w.version_count,
                requests: w.latest.requests,
                duration: format::significant_trimmed(w.latest.duration_ms / 1000.0) + " s",
                source: w.latest.source,
                keeps_text: w.latest.keeps_text,
                updated: w.updated_at.display(),
            })
            .collect();
        Ok(WorkloadsPage {
            nav: "workloads",
            rows,
            problem,
            generate,
            formats: vec![
                ("auto", "Detect from the first line"),
                ("openai", "OpenAI-style request log (JSONL)"),
                ("otel", "OpenTelemetry / Langfuse trace export"),
                ("mooncake", "Mooncake trace (JSONL)"),
                ("workload", "bakeoff workload file"),
            ],
            max_file: format::bytes(MAX_FILE_BYTES as u64),
            block_tokens: DEFAULT_BLOCK_TOKENS,
        })
    }
}

async fn list(State(state): State<AppState>) -> Result<WorkloadsPage, WebError> {
    WorkloadsPage::new(&state, None, GenerateForm::default()).await
}

/// Refused input: the list page again with the problem, 422.
async fn refuse(state: &AppState, problem: String, generate: GenerateForm) -> Response {
    match WorkloadsPage::new(state, Some(problem), generate).await {
        Ok(page) => (StatusCode::UNPROCESSABLE_ENTITY, page).into_response(),
        Err(e) => e.into_response(),
    }
}

/// POST /workloads/import: a multipart upload of `file` with `format`, `name`, `keep_text`.
async fn import(State(state): State<AppState>, multipart: Result<Multipart, MultipartRejection>) -> Response {
    let mut multipart = match multipart {
        Ok(m) => m,
        Err(e) => {
            return refuse(
                &state,
                format!("The form could not be read ({}).", e.body_text()),
                GenerateForm::default(),
            )
            .await;
        }
    };
    let (mut file_name, mut bytes) = (String::from("uploaded file"), Vec::new());
    let mut how = LogImport {
        name: String::new(),
        description: String::new(),
        format: None,
        keep_text: false,
        block_tokens: None,
    };
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                let message = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    format!(
                        "The upload is larger than {}; nothing was stored. Import it with `bakeoff workload import`.",
                        format::bytes(MAX_FILE_BYTES as u64)
                    )
                } else {
                    format!("The form could not be read ({}).", e.body_text())
                };
                return refuse(&state, message, GenerateForm::default()).await;
            }
        };
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            if let Some(n) = field.file_name().filter(|n| !n.is_empty()) {
                file_name = n.to_string();
            }
            match field.bytes().await {
                Ok(b) => bytes = b.to_vec(),
                Err(e) => {
                    return refuse(
                        &state,
                        format!("The file could not be read ({}).", e.body_text()),
                        GenerateForm::default(),
                    )
                    .await;
                }
            }
            continue;
        }
        let value = field.text().await.unwrap_or_default();
        match name.as_str() {
            "name" => how.name = value.trim().to_string(),
            "description" => how.description = value.trim().to_string(),
            "keep_text" => how.keep_text = !value.is_empty(),
            "block_tokens" if !value.trim().is_empty() => match value.trim().parse() {
                Ok(n) => how.block_tokens = Some(n),
                Err(_) => {
                    return refuse(
                        &state,
                        "Block size must be a whole number of tokens.".into(),
                        GenerateForm::default(),
                    )
                    .await;
                }
            },
            "format" if value != "auto" && !value.is_empty() => match Format::parse(&value) {
                Some(f) => how.format = Some(f),
                None => {
                    return refuse(
                        &state,
                        format!("Unknown format {:?}.", crate::domain::validation::truncate(&value, 40)),
                        GenerateForm::default(),
                    )
                    .await;
                }
            },
            _ => {}
        }
    }
    if bytes.is_empty() {
        return refuse(&state, "Choose a log file to upload.".into(), GenerateForm::default()).await;
    }
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            return refuse(
                &state,
                format!("{file_name} is not UTF-8 text (first bad byte at offset {at})."),
                GenerateForm::default(),
            )
            .await;
        }
    };
    if how.name.is_empty() {
        how.name = file_name
            .rsplit_once('.')
            .map_or(file_name.as_str(), |(stem, _)| stem)
            .to_string();
    }
    let workload = match read_log(&file_name, text.trim_start_matches('\u{feff}'), &how) {
        Ok(w) => w,
        Err(e) => return refuse(&state, format!("Nothing was stored: {e}"), GenerateForm::default()).await,
    };
    let detail = format!("imported from {file_name}");
    match save_version(&state.store, &workload, &crate::web::security::actor(), detail).await {
        Ok(saved) => Redirect::to(&format!("/workloads/versions/{}", saved.id)).into_response(),
        Err(e) => WebError::from(e).into_response(),
    }
}

/// POST /workloads/generate: the shared-prefix generator's form.
async fn generate(State(state): State<AppState>, Form(form): Form<GenerateForm>) -> Response {
    let spec = match spec_of(&form) {
        Ok(s) => s,
        Err(problem) => return refuse(&state, problem, form).await,
    };
    let workload = match spec.generate("form") {
        Ok(w) => w,
        Err(e) => return refuse(&state, format!("Nothing was stored: {e}"), form).await,
    };
    match save_version(
        &state.store,
        &workload,
        &crate::web::security::actor(),
        "generated (shared prefixes)".into(),
    )
    .await
    {
        Ok(saved) => Redirect::to(&format!("/workloads/versions/{}", saved.id)).into_response(),
        Err(e) => WebError::from(e).into_response(),
    }
}

/// The form as a generator spec; a bad field is named.
fn spec_of(f: &GenerateForm) -> Result<SharedPrefixSpec, String> {
    fn number<T: std::str::FromStr>(field: &str, raw: &str) -> Result<T, String> {
        raw.trim().parse().map_err(|_| {
            format!(
                "Field `{field}`: {:?} is not a number.",
                crate::domain::validation::truncate(raw, 40)
            )
        })
    }
    let prefixes = f
        .prefixes
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (tokens, weight) = p.split_once(':').unwrap_or((p, "1"));
            Ok(PoolPrefix {
                tokens: number("prefixes", tokens)?,
                weight: number("prefixes", weight)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(SharedPrefixSpec {
        name: f.name.trim().to_string(),
        description: String::new(),
        requests: number("requests", &f.requests)?,
        per_second: number("per_second", &f.per_second)?,
        poisson: f.poisson.is_some(),
        seed: number("seed", &f.seed)?,
        system_tokens: number("system_tokens", &f.system_tokens)?,
        prefixes,
        suffix_min: number("suffix_min", &f.suffix_min)?,
        suffix_max: number("suffix_max", &f.suffix_max)?,
        output_tokens: number("output_tokens", &f.output_tokens)?,
        cache_bust: f.cache_bust.is_some(),
        block_tokens: DEFAULT_BLOCK_TOKENS,
    })
}

/// One line of the lengths table.
#[derive(Debug, Clone)]
pub struct LengthRow {
    pub what: &'static str,
    pub cells: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct VersionRow {
    pub id: i64,
    pub hash: String,
    pub requests: usize,
    pub source: String,
    pub keeps_text: bool,
    pub created: String,
    pub current: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "workloads/detail.html")]
pub struct WorkloadPage {
    pub nav: &'static str,
    pub id: i64,
    pub name: String,
    pub description: String,
    pub source: &'static str,
    pub keeps_text: bool,
    pub hash: String,
    pub block_tokens: u32,
    pub requests: usize,
    pub duration: String,
    pub mean_rate: String,
    pub shared_prefix: String,
    pub repeated_tokens: String,
    pub distinct_blocks: usize,
    pub chart: Option<Chart>,
    pub lengths: Vec<LengthRow>,
    pub versions: Vec<VersionRow>,
}

async fn detail(State(state): State<AppState>, Path(version_id): Path<String>) -> Result<WorkloadPage, WebError> {
    let id = parse_id(&version_id, "workload version")?;
    let version = state
        .store
        .get_workload_version(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("workload version {id}")))?;
    let file = version.file;
    let s = WorkloadSummary::of(&file);
    let row = |what, d: &Option<Distribution>| LengthRow {
        what,
        cells: match d {
            Some(d) => [d.min, d.p50, d.p90, d.p99, d.max, d.mean]
                .iter()
                .map(|v| format::significant_trimmed(*v))
                .collect(),
            None => vec!["—".into(); 6],
        },
    };
    let versions = state
        .store
        .list_workload_versions(version.workload_id)
        .await?
        .into_iter()
        .map(|v| VersionRow {
            id: v.id,
            hash: short_hash(&v.content_hash).to_string(),
            requests: v.requests,
            source: v.source,
            keeps_text: v.keeps_text,
            created: v.created_at.display(),
            current: v.id == id,
        })
        .collect();
    let percent = |x: f64| format!("{:.1} %", x * 100.0);
    Ok(WorkloadPage {
        nav: "workloads",
        id,
        name: file.header.name.clone(),
        description: file.header.description.clone(),
        source: file.header.source.as_str(),
        keeps_text: file.header.keeps_text,
        hash: short_hash(&version.content_hash).to_string(),
        block_tokens: file.header.block_tokens,
        requests: s.requests,
        duration: format::significant_trimmed(s.duration_s) + " s",
        mean_rate: s
            .mean_rate
            .map_or_else(|| "—".into(), |r| format::significant_trimmed(r) + " req/s"),
        shared_prefix: percent(s.shared_prefix_share),
        repeated_tokens: percent(s.repeated_token_share),
        distinct_blocks: s.distinct_blocks,
        chart: arrivals_chart(s.bar_s, &s.arrivals),
        lengths: vec![
            row("input tokens", &s.input_tokens),
            row("output tokens", &s.output_tokens),
        ],
        versions,
    })
}

async fn download(State(state): State<AppState>, Path(version_id): Path<String>) -> Result<Response, WebError> {
    let id = parse_id(&version_id, "workload version")?;
    let version = state
        .store
        .get_workload_version(id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("workload version {id}")))?;
    let name: String = version
        .file
        .header
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let disposition = format!(
        "attachment; filename=\"{name}-{}.workload.jsonl\"",
        short_hash(&version.content_hash)
    );
    let mut response = version.file.normalised().into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}
