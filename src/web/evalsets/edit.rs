//! Editing an eval set case by case. Stored versions never change: every edit (change, add or
//! delete a case) makes the whole file anew, validates it like an uploaded file, stores it as a
//! new version and redirects there. The version the edit started from stays as it was.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::load;
use crate::domain::evalset::{ChatMessage, EvalCase, EvalSetFile, Problem};
use crate::domain::grading::Grader;
use crate::domain::tool_calls::{ToolChoice, ToolDef, ToolExpectation};
use crate::domain::validation::FieldErrors;
use crate::store::EvalSetVersion;
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::views::{FormBody, short_hash};

/// The case form's text fields, as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaseForm {
    pub id: String,
    /// JSON object.
    pub vars: String,
    /// JSON list of `{role, content}`; blank = use the set's prompt template.
    pub messages: String,
    pub expected: String,
    /// `text`, `json` or `none`.
    pub expected_kind: String,
    /// JSON list of graders; blank = the set's default graders.
    pub graders: String,
    /// Comma-separated.
    pub tags: String,
    /// Blank = 1.
    pub weight: String,
    /// A tool case's tools (JSON list, OpenAI or Anthropic shape); blank = not a tool case.
    pub tools: String,
    /// Blank = the model decides.
    pub tool_choice: String,
    /// A list of calls, `{"calls": […], "ordered": true}`, `"no-call"` or `"text"`.
    pub expected_calls: String,
    /// A conversation case's turns (JSON list of `{user, vars, expected, graders, golden}`);
    /// blank = not a conversation case.
    pub turns: String,
    /// `own`, `golden`, or blank = the set's.
    pub history: String,
    /// Structured output: `{"type": "json_schema", "json_schema": {…}}` as JSON, or blank.
    pub response_format: String,
}

impl CaseForm {
    pub fn from_case(case: &EvalCase) -> Self {
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
        let (expected, expected_kind) = match &case.expected {
            None => (String::new(), "none"),
            Some(Value::String(s)) => (s.clone(), "text"),
            Some(other) => (pretty(other), "json"),
        };
        CaseForm {
            id: case.id.clone(),
            vars: if case.vars.is_empty() {
                String::new()
            } else {
                pretty(&Value::Object(case.vars.clone()))
            },
            messages: case
                .messages
                .as_ref()
                .map(|m| serde_json::to_string_pretty(m).unwrap_or_default())
                .unwrap_or_default(),
            expected,
            expected_kind: expected_kind.into(),
            graders: if case.graders.is_empty() {
                String::new()
            } else {
                serde_json::to_string_pretty(&case.graders).unwrap_or_default()
            },
            tags: case.tags.join(", "),
            weight: case.weight.map(|w| w.to_string()).unwrap_or_default(),
            tools: if case.tools.is_empty() {
                String::new()
            } else {
                serde_json::to_string_pretty(&case.tools).unwrap_or_default()
            },
            tool_choice: case
                .tool_choice
                .as_ref()
                .map(|c| c.openai().to_string())
                .unwrap_or_default(),
            expected_calls: case
                .expected_calls
                .as_ref()
                .map(|e| serde_json::to_string_pretty(e).unwrap_or_default())
                .unwrap_or_default(),
            turns: if case.turns.is_empty() {
                String::new()
            } else {
                serde_json::to_string_pretty(&case.turns).unwrap_or_default()
            },
            history: case.history.map(|h| h.as_str().to_string()).unwrap_or_default(),
            response_format: case
                .response_format
                .as_ref()
                .map(|f| serde_json::to_string_pretty(&f.openai()).unwrap_or_default())
                .unwrap_or_default(),
        }
    }

    /// A tool field's text by its form name.
    pub fn tool_value(&self, name: &str) -> &str {
        match name {
            "tools" => &self.tools,
            "tool_choice" => &self.tool_choice,
            "response_format" => &self.response_format,
            _ => &self.expected_calls,
        }
    }

    fn from_body(body: &FormBody) -> Self {
        let get = |k: &str| body.get(k).unwrap_or_default().to_string();
        CaseForm {
            id: get("id"),
            vars: get("vars"),
            messages: get("messages"),
            expected: get("expected"),
            expected_kind: get("expected_kind"),
            graders: get("graders"),
            tags: get("tags"),
            weight: get("weight"),
            tools: get("tools"),
            tool_choice: get("tool_choice"),
            expected_calls: get("expected_calls"),
            turns: get("turns"),
            history: get("history"),
            response_format: get("response_format"),
        }
    }

    /// The case these fields describe; every problem is recorded against its field.
    pub fn to_case(&self) -> Result<EvalCase, FieldErrors> {
        let mut errors = FieldErrors::default();
        let id = self.id.trim().to_string();
        if id.is_empty() {
            errors.add("id", "is required");
        }
        let vars = match self.vars.trim() {
            "" => serde_json::Map::new(),
            raw => match serde_json::from_str::<Value>(raw) {
                Ok(Value::Object(map)) => map,
                Ok(_) => {
                    errors.add("vars", "must be a JSON object, e.g. {\"ticket\": \"…\"}");
                    serde_json::Map::new()
                }
                Err(e) => {
                    errors.add("vars", format!("is not valid JSON: {e}"));
                    serde_json::Map::new()
                }
            },
        };
        let messages = match self.messages.trim() {
            "" => None,
            raw => match serde_json::from_str::<Vec<ChatMessage>>(raw) {
                Ok(m) if m.is_empty() => {
                    errors.add("messages", "must list at least one message, or be left blank");
                    None
                }
                Ok(m) => Some(m),
                Err(e) => {
                    errors.add(
                        "messages",
                        format!("must be a JSON list of {{\"role\": …, \"content\": …}} objects: {e}"),
                    );
                    None
                }
            },
        };
        let expected = match self.expected_kind.as_str() {
            "none" => None,
            "json" => match serde_json::from_str::<Value>(self.expected.trim()) {
                Ok(v) => Some(v),
                Err(e) => {
                    errors.add("expected", format!("is not valid JSON: {e}"));
                    None
                }
            },
            // Text is kept exactly as typed, except the line endings a browser sends.
            _ => Some(Value::String(self.expected.replace("\r\n", "\n"))),
        };
        let graders = match self.graders.trim() {
            "" => Vec::new(),
            raw => match serde_json::from_str::<Vec<Grader>>(raw) {
                Ok(g) => g,
                Err(e) => {
                    errors.add("graders", format!("must be a JSON list of graders: {e}"));
                    Vec::new()
                }
            },
        };
        let tags: Vec<String> = self
            .tags
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        let weight = match self.weight.trim() {
            "" => None,
            raw => match raw.parse::<f64>() {
                Ok(w) if w.is_finite() && w > 0.0 => Some(w),
                _ => {
                    errors.add("weight", "must be a positive number, or blank for 1");
                    None
                }
            },
        };
        let tools = match self.tools.trim() {
            "" => Vec::new(),
            raw => match serde_json::from_str::<Value>(raw) {
                Ok(Value::Array(items)) => items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, item)| {
                        ToolDef::read(item, &format!("tools[{i}]"))
                            .map_err(|e| errors.add("tools", e.to_string()))
                            .ok()
                    })
                    .collect(),
                Ok(_) => {
                    errors.add("tools", "must be a JSON list of tools");
                    Vec::new()
                }
                Err(e) => {
                    errors.add("tools", format!("is not valid JSON: {e}"));
                    Vec::new()
                }
            },
        };
        let mut tool_field = |field: &'static str, raw: &str| -> Option<Value> {
            match raw.trim() {
                "" => None,
                // A bare word (`auto`, `no-call`) is read as the JSON string it stands for.
                word if word.chars().all(|c| c.is_ascii_alphabetic() || c == '-') => Some(Value::String(word.into())),
                raw => serde_json::from_str::<Value>(raw)
                    .map_err(|e| errors.add(field, format!("is not valid JSON: {e}")))
                    .ok(),
            }
        };
        let choice = tool_field("tool_choice", &self.tool_choice);
        let expectation = tool_field("expected_calls", &self.expected_calls);
        let tool_choice = choice.and_then(|v| {
            ToolChoice::read(&v, "tool_choice")
                .map_err(|e| errors.add("tool_choice", e.message))
                .ok()
        });
        let expected_calls = expectation.and_then(|v| {
            ToolExpectation::read(&v, "expected_calls")
                .map_err(|e| errors.add("expected_calls", e.to_string()))
                .ok()
        });
        let turns = match self.turns.trim() {
            "" => Vec::new(),
            raw => match serde_json::from_str::<Vec<crate::domain::evalset::conversation::Turn>>(raw) {
                Ok(t) if t.is_empty() => {
                    errors.add("turns", "must list at least one turn, or be left blank");
                    Vec::new()
                }
                Ok(t) => t,
                Err(e) => {
                    errors.add(
                        "turns",
                        format!("must be a JSON list of {{\"user\": …, \"expected\": …, \"graders\": […]}} turns: {e}"),
                    );
                    Vec::new()
                }
            },
        };
        let history = match self.history.trim() {
            "" => None,
            raw => match crate::domain::evalset::conversation::HistoryMode::parse(raw) {
                Some(h) => Some(h),
                None => {
                    errors.add("history", "must be own, golden, or blank for the set's");
                    None
                }
            },
        };
        let response_format = match self.response_format.trim() {
            "" => None,
            raw => match serde_json::from_str::<Value>(raw) {
                Ok(v) => crate::domain::tool_calls::structured::ResponseFormat::read(&v, "response_format")
                    .map_err(|e| errors.add("response_format", e.to_string()))
                    .ok(),
                Err(e) => {
                    errors.add("response_format", format!("is not valid JSON: {e}"));
                    None
                }
            },
        };
        errors.into_result(EvalCase {
            id,
            vars,
            messages,
            expected,
            graders,
            tags,
            weight,
            tools,
            tool_choice,
            expected_calls,
            turns,
            history,
            response_format,
        })
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "evalsets/case_form.html")]
pub struct CaseFormPage {
    pub nav: &'static str,
    pub version_id: i64,
    pub set_name: String,
    pub hash_short: String,
    /// Some(1-based position) when editing an existing case.
    pub position: Option<usize>,
    pub action: String,
    pub form: CaseForm,
    pub errors: FieldErrors,
    /// A problem with the case as a whole (not one field).
    pub general_error: Option<String>,
    pub prompt: Option<String>,
    pub default_graders: Vec<String>,
    pub case_count: usize,
}

impl CaseFormPage {
    fn new(version: &EvalSetVersion, position: Option<usize>, form: CaseForm) -> Self {
        let action = match position {
            Some(n) => format!("/evalsets/{}/cases/{n}/edit", version.id),
            None => format!("/evalsets/{}/cases/new", version.id),
        };
        CaseFormPage {
            nav: "evalsets",
            version_id: version.id,
            set_name: version.file.header.name.clone(),
            hash_short: short_hash(&version.content_hash).to_string(),
            position,
            action,
            form,
            errors: FieldErrors::default(),
            general_error: None,
            prompt: version.file.header.prompt.clone(),
            default_graders: version.file.header.graders.iter().map(Grader::describe).collect(),
            case_count: version.file.cases.len(),
        }
    }

    pub fn error(&self, field: &str) -> Option<&str> {
        self.errors.get(field)
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || self.general_error.is_some()
    }

    /// The tool fields as (name, label, rows, help).
    pub fn tool_fields(&self) -> [(&'static str, &'static str, usize, &'static str); 4] {
        [
            (
                "tools",
                "Tools (JSON list)",
                6,
                "OpenAI `tools` or Anthropic `tools` shape, with JSON Schema parameters.",
            ),
            (
                "tool_choice",
                "Tool choice",
                1,
                "Blank (the model decides), auto, none, required, or {\"type\":\"function\",\"function\":{\"name\":…}}.",
            ),
            (
                "expected_calls",
                "Expected calls",
                5,
                "A JSON list of {\"name\", \"arguments\", \"graders\"}; {\"calls\": […], \"ordered\": true}; no-call; or text.",
            ),
            (
                "response_format",
                "Structured output",
                4,
                "{\"type\": \"json_schema\", \"json_schema\": {\"name\": …, \"schema\": {…}}}: the answer must be JSON valid against the schema (graded response-format).",
            ),
        ]
    }

    pub fn is_kind(&self, kind: &str) -> bool {
        self.form.expected_kind == kind
            || (kind == "text" && !["json", "none"].contains(&self.form.expected_kind.as_str()))
    }
}

/// The 1-based case position from the path; out of range is "not found".
fn position(raw: &str, file: &EvalSetFile) -> Result<usize, WebError> {
    match raw.parse::<usize>() {
        Ok(n) if (1..=file.cases.len()).contains(&n) => Ok(n),
        _ => Err(WebError::NotFound(format!("case {raw:?} of this eval set version"))),
    }
}

pub async fn edit_form(
    State(state): State<AppState>,
    Path((raw_version, raw_case)): Path<(String, String)>,
) -> Result<CaseFormPage, WebError> {
    let version = load(&state, &raw_version).await?;
    let n = position(&raw_case, &version.file)?;
    let form = CaseForm::from_case(&version.file.cases[n - 1]);
    Ok(CaseFormPage::new(&version, Some(n), form))
}

pub async fn new_form(
    State(state): State<AppState>,
    Path(raw_version): Path<String>,
) -> Result<CaseFormPage, WebError> {
    let version = load(&state, &raw_version).await?;
    let taken: std::collections::HashSet<&str> = version.file.cases.iter().map(|c| c.id.as_str()).collect();
    let id = (version.file.cases.len() + 1..)
        .map(|n| format!("case-{n}"))
        .find(|id| !taken.contains(id.as_str()))
        .unwrap_or_default();
    // Start from the template's variables so the form shows what a case needs.
    let vars = version
        .file
        .cases
        .iter()
        .find(|c| c.messages.is_none())
        .map(|c| {
            c.vars
                .keys()
                .map(|k| (k.clone(), Value::String(String::new())))
                .collect()
        })
        .unwrap_or_default();
    let form = CaseForm {
        id,
        expected_kind: "text".into(),
        ..CaseForm::from_case(&EvalCase {
            id: String::new(),
            vars,
            messages: None,
            expected: None,
            ..Default::default()
        })
    };
    Ok(CaseFormPage::new(&version, None, form))
}

pub async fn update(
    State(state): State<AppState>,
    Path((raw_version, raw_case)): Path<(String, String)>,
    body: FormBody,
) -> Result<Response, WebError> {
    let version = load(&state, &raw_version).await?;
    let n = position(&raw_case, &version.file)?;
    save_case(&state, &version, Some(n), CaseForm::from_body(&body)).await
}

pub async fn create(
    State(state): State<AppState>,
    Path(raw_version): Path<String>,
    body: FormBody,
) -> Result<Response, WebError> {
    let version = load(&state, &raw_version).await?;
    save_case(&state, &version, None, CaseForm::from_body(&body)).await
}

/// Builds the new file with the case replaced (Some(position)) or appended (None), validates
/// it whole, stores it as a new version and redirects there; or re-shows the form.
async fn save_case(
    state: &AppState,
    version: &EvalSetVersion,
    position: Option<usize>,
    form: CaseForm,
) -> Result<Response, WebError> {
    let mut page = CaseFormPage::new(version, position, form);
    let case = match page.form.to_case() {
        Ok(case) => case,
        Err(errors) => {
            page.errors = errors;
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response());
        }
    };
    let mut file = version.file.clone();
    let at = match position {
        Some(n) => {
            file.cases[n - 1] = case;
            n - 1
        }
        None => {
            file.cases.push(case);
            file.cases.len() - 1
        }
    };
    let notice = if position.is_some() { "edited" } else { "added" };
    match store_file(state, version, &file, at, format!("case {notice}")).await? {
        Stored::Unchanged => Ok(Redirect::to(&format!("/evalsets/{}?notice=unchanged", version.id)).into_response()),
        Stored::Version(id) => Ok(Redirect::to(&format!("/evalsets/{id}?notice={notice}")).into_response()),
        Stored::Refused { field, message } => {
            match field {
                Some(f) => page.errors.add(f, message),
                None => page.general_error = Some(message),
            }
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
    }
}

pub async fn delete(
    State(state): State<AppState>,
    Path((raw_version, raw_case)): Path<(String, String)>,
) -> Result<Response, WebError> {
    let version = load(&state, &raw_version).await?;
    let n = position(&raw_case, &version.file)?;
    if version.file.cases.len() == 1 {
        return Err(WebError::BadRequest(
            "This is the set's only case; an eval set needs at least one. Add another case first.".into(),
        ));
    }
    let mut file = version.file.clone();
    file.cases.remove(n - 1);
    match store_file(&state, &version, &file, usize::MAX, format!("case {n} deleted")).await? {
        Stored::Version(id) => Ok(Redirect::to(&format!("/evalsets/{id}?notice=deleted")).into_response()),
        Stored::Unchanged => Err(WebError::Internal("deleting a case left the file unchanged".into())),
        Stored::Refused { message, .. } => Err(WebError::BadRequest(message)),
    }
}

enum Stored {
    Version(i64),
    /// The edit changed nothing: no version is stored.
    Unchanged,
    /// The edited file breaks a rule; `field` is the case-form field when the problem is the
    /// edited case's.
    Refused {
        field: Option<&'static str>,
        message: String,
    },
}

/// Validates the edited file exactly as an uploaded one (re-parsing its normalised text) and
/// stores it. `edited` is the 0-based index of the case the user changed.
async fn store_file(
    state: &AppState,
    version: &EvalSetVersion,
    file: &EvalSetFile,
    edited: usize,
    detail: String,
) -> Result<Stored, WebError> {
    let source = format!("{} (edited)", version.file.header.name);
    let checked = match EvalSetFile::parse(&source, &file.normalised()) {
        Ok(f) => f,
        Err(e) => {
            // Line 1 is the header, line k + 2 is case k.
            // A duplicate id is reported on the later of the two lines, which may not be the
            // edited one; it is still the edited case's problem.
            let on_edited = |p: &Problem| {
                let duplicate_of_edited = file.cases.get(edited).is_some_and(|c| {
                    p.field.as_deref() == Some("id") && p.message == format!("duplicate case id {:?}", c.id)
                });
                p.line == Some(edited + 2) || duplicate_of_edited
            };
            let message = e.to_string();
            let Some(p) = e.problems.iter().find(|p| on_edited(p)) else {
                return Ok(Stored::Refused { field: None, message });
            };
            let field = p.field.as_deref().map(form_field);
            let message = match &p.field {
                Some(f) => format!("`{f}`: {}", p.message),
                None => message,
            };
            return Ok(Stored::Refused { field, message });
        }
    };
    if checked.content_hash() == version.content_hash {
        return Ok(Stored::Unchanged);
    }
    let saved =
        crate::app::evalsets::save_version(&state.store, &checked, &crate::web::security::actor(), detail).await?;
    Ok(Stored::Version(saved.id))
}

/// The form field a file-level field name belongs to (`vars.ticket` → `vars`).
fn form_field(file_field: &str) -> &'static str {
    match file_field.split(['.', '[']).next().unwrap_or_default() {
        "id" => "id",
        "vars" => "vars",
        "messages" => "messages",
        "expected" => "expected",
        "tags" => "tags",
        "weight" => "weight",
        "tools" => "tools",
        "tool_choice" => "tool_choice",
        "expected_calls" => "expected_calls",
        "turns" => "turns",
        "history" => "history",
        _ => "graders",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_round_trips_through_the_form() {
        let case: EvalCase = serde_json::from_str(
            r#"{"id":"a","vars":{"t":"好"},"expected":{"total":3},"graders":[{"kind":"json-fields"}],"tags":["x","y"],"weight":2}"#,
        )
        .unwrap();
        let form = CaseForm::from_case(&case);
        assert_eq!((form.expected_kind.as_str(), form.tags.as_str()), ("json", "x, y"));
        assert_eq!(form.to_case().unwrap(), case);

        let text: EvalCase =
            serde_json::from_str(r#"{"id":"b","messages":[{"role":"user","content":"hi"}],"expected":"yo"}"#).unwrap();
        assert_eq!(CaseForm::from_case(&text).to_case().unwrap(), text);

        let tool: EvalCase = serde_json::from_str(
            r#"{"id":"t","messages":[{"role":"user","content":"天气?"}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}],"tool_choice":{"type":"any"},"expected_calls":[{"name":"f","arguments":{"a":1}}]}"#,
        )
        .unwrap();
        let form = CaseForm::from_case(&tool);
        assert!(
            form.tools.contains("\"parameters\"") && form.tool_choice == "\"required\"",
            "{form:?}"
        );
        assert_eq!(form.to_case().unwrap(), tool);
        let bare = CaseForm {
            expected_calls: "no-call".into(),
            ..form
        };
        assert_eq!(
            bare.to_case().unwrap().expected_calls,
            Some(crate::domain::tool_calls::ToolExpectation::NoCall)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let form = CaseForm {
            id: " ".into(),
            vars: "[1]".into(),
            messages: "{".into(),
            expected: "{nope".into(),
            expected_kind: "json".into(),
            graders: r#"[{"kind":"telepathy"}]"#.into(),
            tags: String::new(),
            weight: "-1".into(),
            tools: r#"[{"name":"has space"}]"#.into(),
            tool_choice: "sometimes".into(),
            expected_calls: "[]".into(),
            turns: r#"[{"user":"hi","answer":1}]"#.into(),
            history: "mine".into(),
            response_format: r#"{"type": "json_object"}"#.into(),
        };
        let errors = form.to_case().unwrap_err();
        for f in [
            "turns",
            "history",
            "id",
            "vars",
            "messages",
            "expected",
            "graders",
            "weight",
            "tools",
            "tool_choice",
            "expected_calls",
            "response_format",
        ] {
            assert!(errors.get(f).is_some(), "{f}: {errors}");
        }
        assert_eq!(form_field("vars.ticket"), "vars");
        assert_eq!(form_field("tags[2]"), "tags");
        assert_eq!(form_field("min"), "graders");
    }
}
