//! Importing an eval set in the browser: upload a file or paste text (any supported format),
//! see a preview that says whether it is a new set, a new version or identical to a stored
//! version, then save. Nothing is stored before "Save", and a file with any error is refused
//! whole, with every bad line and field (up to a bound) on the page.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::{CaseRowView, case_rows};
use crate::domain::evalset::diff::diff_versions;
use crate::domain::evalset::import::{
    Format, FormatChoice, GraderChoice, GraderDecision, ImportOptions, Imported, import_with_grader,
};
use crate::domain::evalset::{EvalSetError, EvalSetFile, MAX_CASES, MAX_FILE_BYTES, TaskKind};
use crate::domain::format;
use crate::domain::validation::{MAX_FIELD_CHARS, truncate};
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::views::short_hash;

/// Largest upload body: the file itself plus room for the form's other fields and multipart
/// framing. Applied to the import routes only; every other form keeps the 1 MiB limit.
pub const MAX_UPLOAD_BODY_BYTES: usize = MAX_FILE_BYTES + 256 * 1024;
/// Cases shown in the preview.
const PREVIEW_CASES: usize = 10;

/// What the import form shows, and re-shows with the typed values after an error.
#[derive(Debug, Clone, Default)]
pub struct ImportForm {
    pub format: String,
    pub name: String,
    pub task: String,
    pub prompt: String,
    /// `proposed` (or empty) or a grader kind (`GraderChoice`).
    pub grader: String,
    pub text: String,
}

/// A refused import, as the page shows it: the form's own complaint (`message`), or every
/// problem found in the file, each with its place.
#[derive(Debug, Clone)]
pub struct ImportProblem {
    pub source: String,
    pub message: String,
    pub problems: Vec<ProblemRow>,
    /// "and 12 more problems", when the list was cut.
    pub unlisted: Option<String>,
}

/// One problem of a file: `place` is `3` or `3, column 14` (empty for the whole file).
#[derive(Debug, Clone)]
pub struct ProblemRow {
    pub place: String,
    pub field: Option<String>,
    pub message: String,
    /// The same, as the terminal says it: `tiny.jsonl:3: field "id" …`.
    pub line: String,
}

impl From<EvalSetError> for ImportProblem {
    fn from(e: EvalSetError) -> Self {
        let lines = e.lines();
        let count = e.problems.len() + e.unlisted;
        ImportProblem {
            message: format!("{count} problem{} found.", if count == 1 { "" } else { "s" }),
            unlisted: e.unlisted_note(),
            problems: e
                .problems
                .iter()
                .zip(lines)
                .map(|(p, line)| ProblemRow {
                    place: p.place(),
                    field: p.field.clone(),
                    message: p.message.clone(),
                    line,
                })
                .collect(),
            source: e.source_name,
        }
    }
}

impl ImportProblem {
    fn plain(message: impl Into<String>) -> Self {
        ImportProblem {
            source: String::new(),
            message: message.into(),
            problems: Vec::new(),
            unlisted: None,
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "evalsets/import.html")]
pub struct ImportPage {
    pub nav: &'static str,
    pub form: ImportForm,
    pub problem: Option<ImportProblem>,
    pub formats: Vec<(&'static str, &'static str)>,
    pub tasks: Vec<&'static str>,
    pub max_file: String,
    pub max_cases: usize,
}

impl ImportPage {
    fn new(form: ImportForm, problem: Option<ImportProblem>) -> Self {
        let mut formats = vec![("auto", "Detect from the file name and content")];
        formats.extend(Format::ALL.iter().map(|f| (f.as_str(), f.label())));
        ImportPage {
            nav: "evalsets",
            form,
            problem,
            formats,
            tasks: TaskKind::ALL.iter().map(TaskKind::as_str).collect(),
            max_file: format::bytes(MAX_FILE_BYTES as u64),
            max_cases: MAX_CASES,
        }
    }
}

/// How the previewed file relates to what is stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    NewSet,
    /// A new version of a stored set: its latest version and what changes from it.
    NewVersion {
        latest_version_id: i64,
        latest_hash: String,
        versions: usize,
        added: usize,
        removed: usize,
        changed: usize,
        header_changed: Vec<String>,
    },
    /// The same content hash as a stored version: saving would store nothing.
    Identical {
        version_id: i64,
    },
}

#[derive(Template, WebTemplate)]
#[template(path = "evalsets/preview.html")]
pub struct PreviewPage {
    pub nav: &'static str,
    pub name: String,
    pub task: &'static str,
    pub description: Option<String>,
    pub format: &'static str,
    pub source: String,
    pub case_count: usize,
    pub hash: String,
    pub hash_short: String,
    pub graders: Vec<String>,
    pub prompt: Option<String>,
    pub cases: Vec<CaseRowView>,
    pub standing: Standing,
    /// The normalised file, carried in the Save form.
    pub content: String,
    /// The grader bakeoff picked (formats without graders of their own) and why.
    pub grader: Option<GraderView>,
    /// What was submitted, carried by the "change the grader" form.
    pub form: ImportForm,
}

/// The set's grader on the preview: chosen, proposed, why, and the select's choices.
#[derive(Debug, Clone)]
pub struct GraderView {
    pub chosen: &'static str,
    pub proposed: &'static str,
    pub why: String,
    pub choices: Vec<(&'static str, &'static str)>,
}

pub async fn form() -> ImportPage {
    ImportPage::new(
        ImportForm {
            format: "auto".into(),
            ..ImportForm::default()
        },
        None,
    )
}

/// The upload: a multipart body with `file` and/or `text`, and the options.
struct Upload {
    form: ImportForm,
    file_name: Option<String>,
    file: Option<Vec<u8>>,
}

/// Reads every field of the multipart body; a body over the limit is an error for the page.
async fn read_upload(multipart: Result<Multipart, MultipartRejection>) -> Result<Upload, (StatusCode, ImportProblem)> {
    let mut multipart = multipart.map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            ImportProblem::plain(format!("The form could not be read ({}).", e.body_text())),
        )
    })?;
    let mut upload = Upload {
        form: ImportForm::default(),
        file_name: None,
        file: None,
    };
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            ImportProblem::plain(format!(
                "The upload is larger than {} (the most an eval-set file may be); nothing was stored. \
                 Split the set, or import it with `bakeoff evalset import`.",
                format::bytes(MAX_FILE_BYTES as u64)
            )),
        )
    };
    let unreadable = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            (
                StatusCode::BAD_REQUEST,
                ImportProblem::plain(format!("The form could not be read ({}).", e.body_text())),
            )
        }
    };
    while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            let file_name = field.file_name().map(str::to_string);
            let bytes = field.bytes().await.map_err(unreadable)?;
            // A file input left empty still sends a part with no name and no bytes.
            if !bytes.is_empty() {
                upload.file_name = file_name.filter(|n| !n.is_empty());
                upload.file = Some(bytes.to_vec());
            }
            continue;
        }
        let value = field.text().await.map_err(unreadable)?;
        match name.as_str() {
            "format" => upload.form.format = value,
            "name" => upload.form.name = value,
            "task" => upload.form.task = value,
            "prompt" => upload.form.prompt = value,
            "grader" => upload.form.grader = value,
            "text" | "content" => upload.form.text = value,
            _ => {}
        }
    }
    Ok(upload)
}

/// Text of an uploaded file: UTF-8 (a byte-order mark is dropped).
fn decode(name: &str, bytes: Vec<u8>) -> Result<String, ImportProblem> {
    String::from_utf8(bytes)
        .map(|t| t.trim_start_matches('\u{feff}').to_string())
        .map_err(|e| {
            ImportProblem::plain(format!(
                "{name} is not UTF-8 text (first bad byte at offset {}); save it as UTF-8 and try again.",
                e.utf8_error().valid_up_to()
            ))
        })
}

fn options_of(form: &ImportForm) -> Result<(FormatChoice, ImportOptions), ImportProblem> {
    let choice: FormatChoice = form.format.parse().map_err(ImportProblem::plain)?;
    let task = match form.task.trim() {
        "" => None,
        t => Some(
            TaskKind::parse(t).ok_or_else(|| ImportProblem::plain(format!("Unknown task {:?}.", truncate(t, 40))))?,
        ),
    };
    if form.prompt.chars().count() > MAX_FIELD_CHARS {
        return Err(ImportProblem::plain(format!(
            "The prompt template is longer than {MAX_FIELD_CHARS} characters."
        )));
    }
    let grader: GraderChoice = form.grader.parse().map_err(ImportProblem::plain)?;
    let some = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
    Ok((
        choice,
        ImportOptions {
            name: some(&form.name),
            task,
            prompt: (!form.prompt.trim().is_empty()).then(|| form.prompt.clone()),
            grader,
        },
    ))
}

/// POST /evalsets/import: validate and show the preview, or the form with every problem found.
pub async fn preview(State(state): State<AppState>, multipart: Result<Multipart, MultipartRejection>) -> Response {
    let upload = match read_upload(multipart).await {
        Ok(u) => u,
        Err((status, problem)) => {
            return (status, ImportPage::new(ImportForm::default(), Some(problem))).into_response();
        }
    };
    let mut form = upload.form;
    let refuse = |form: ImportForm, problem: ImportProblem| {
        (StatusCode::UNPROCESSABLE_ENTITY, ImportPage::new(form, Some(problem))).into_response()
    };
    let (source, text) = match upload.file {
        Some(bytes) => {
            let name = upload.file_name.unwrap_or_else(|| "uploaded file".into());
            match decode(&name, bytes) {
                Ok(text) => (name, text),
                Err(problem) => return refuse(form, problem),
            }
        }
        None if !form.text.trim().is_empty() => ("pasted text".to_string(), form.text.clone()),
        None => {
            return refuse(
                form,
                ImportProblem::plain("Choose a file to upload, or paste the eval set into the text box."),
            );
        }
    };
    let (choice, options) = match options_of(&form) {
        Ok(o) => o,
        Err(problem) => return refuse(form, problem),
    };
    let imported = match import_with_grader(choice, &source, &text, &options) {
        Ok(ok) => ok,
        Err(e) => {
            // Keep pasted text for correction; an uploaded file must be chosen again anyway.
            if source != "pasted text" {
                form.text.clear();
            }
            return refuse(form, e.into());
        }
    };
    // The preview can re-read the same text with another grader.
    let again = ImportForm {
        format: imported.format.as_str().to_string(),
        // Pasted again, the text has no file name to take the set's name from.
        name: imported.file.header.name.clone(),
        text,
        ..form
    };
    match preview_page(&state, imported, &source, again).await {
        Ok(page) => page.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn preview_page(
    state: &AppState,
    imported: Imported,
    source: &str,
    form: ImportForm,
) -> Result<PreviewPage, WebError> {
    let Imported { format, file, grader } = imported;
    let hash = file.content_hash();
    let standing = standing(state, &file, &hash).await?;
    let h = &file.header;
    Ok(PreviewPage {
        nav: "evalsets",
        name: h.name.clone(),
        task: h.task.as_str(),
        description: h.description.clone(),
        format: format.label(),
        source: source.to_string(),
        case_count: file.cases.len(),
        hash_short: short_hash(&hash).to_string(),
        hash,
        graders: h.graders.iter().map(|g| g.describe()).collect(),
        prompt: h.prompt.clone(),
        cases: case_rows(&file, file.cases.iter().take(PREVIEW_CASES)),
        standing,
        content: file.normalised(),
        grader: grader.map(grader_view),
        form,
    })
}

/// The grader decision as the preview shows it, with the choices of its select.
fn grader_view(d: GraderDecision) -> GraderView {
    GraderView {
        chosen: d.chosen.as_str(),
        proposed: d.proposed.as_str(),
        why: d.why,
        choices: GraderChoice::ALL
            .into_iter()
            .filter(|c| *c != GraderChoice::Proposed)
            .map(|c| (c.as_str(), c.label()))
            .collect(),
    }
}

/// Whether `file` is a new set, a new version of a stored one, or identical to a stored version.
async fn standing(state: &AppState, file: &EvalSetFile, hash: &str) -> Result<Standing, WebError> {
    let sets = state.store.list_evalsets().await?;
    let Some(set) = sets.into_iter().find(|s| s.name == file.header.name) else {
        return Ok(Standing::NewSet);
    };
    let versions = state.store.list_evalset_versions(set.id).await?;
    if let Some(same) = versions.iter().find(|v| v.content_hash == hash) {
        return Ok(Standing::Identical { version_id: same.id });
    }
    let latest = versions
        .first()
        .ok_or_else(|| WebError::Internal(format!("eval set {} has no versions", set.id)))?;
    let d = diff_versions(&latest.file, file);
    Ok(Standing::NewVersion {
        latest_version_id: latest.id,
        latest_hash: short_hash(&latest.content_hash).to_string(),
        versions: versions.len(),
        added: d.added.len(),
        removed: d.removed.len(),
        changed: d.changed.len(),
        header_changed: d.header_changed,
    })
}

/// POST /evalsets/import/save: store the previewed (normalised) file and show its version.
pub async fn save(State(state): State<AppState>, multipart: Result<Multipart, MultipartRejection>) -> Response {
    let upload = match read_upload(multipart).await {
        Ok(u) => u,
        Err((status, problem)) => {
            return (status, ImportPage::new(ImportForm::default(), Some(problem))).into_response();
        }
    };
    let text = upload.form.text;
    // The content is the preview's normalised file, so this only fails for a hand-made request.
    let file = match EvalSetFile::parse("previewed file", &text) {
        Ok(f) => f,
        Err(e) => {
            let form = ImportForm {
                format: "bakeoff".into(),
                text,
                ..ImportForm::default()
            };
            return (StatusCode::UNPROCESSABLE_ENTITY, ImportPage::new(form, Some(e.into()))).into_response();
        }
    };
    match crate::app::evalsets::save_version(&state.store, &file, &crate::web::security::actor(), "imported".into())
        .await
    {
        Ok(saved) => Redirect::to(&format!("/evalsets/{}?notice=saved", saved.id)).into_response(),
        Err(e) => WebError::from(e).into_response(),
    }
}
