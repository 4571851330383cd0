//! The JSON API's shapes that both its server (`web::api`) and its client (`bakeoff gate
//! --server`) read and write: errors as RFC 9457 problem details (`application/problem+json`:
//! `type`, `title`, `status`, `detail`, and for a validation error `field_errors`, each naming
//! the field and, for a TOML or JSONL body, its line), a run to create, a run's status.
//! Plain serde types: how they are answered over HTTP is the web's.
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::Timestamp;
use crate::domain::run::Run;
use crate::domain::validation::FieldErrors;
use crate::files::FileError;
use crate::gate::progress::RunProgress;

pub const CONTENT_TYPE: &str = "application/problem+json";

/// A problem detail (RFC 9457).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// What kind of problem, e.g. `urn:bakeoff:problem:validation` (one per status; see docs/api.md).
    #[serde(rename = "type")]
    pub kind: String,
    /// Short, the same for every problem of this type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What was wrong in this request and what to do, in words.
    pub detail: String,
    /// For a validation error (422): every wrong field, each named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub field_errors: Vec<FieldProblem>,
}

/// One wrong field of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FieldProblem {
    /// The field as the request names it: a body member (`candidate_ids`), a dotted path into
    /// a file shape (`candidate[0].base_url`, `settings.concurrency`) or a query parameter.
    pub field: String,
    pub message: String,
    /// The 1-based line in a TOML or JSONL body, when the body was text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

/// The type URI and title of a status.
fn kind_of(status: u16) -> (&'static str, &'static str) {
    match status {
        400 => ("bad-request", "Bad request"),
        401 => ("unauthorized", "Authentication required"),
        403 => ("forbidden", "Forbidden"),
        404 => ("not-found", "Not found"),
        405 => ("method-not-allowed", "Method not allowed"),
        409 => ("conflict", "Conflict"),
        413 => ("too-large", "Request body too large"),
        415 => ("unsupported-media-type", "Unsupported media type"),
        421 => ("misdirected", "Wrong host"),
        422 => ("validation", "Invalid input"),
        503 => ("unavailable", "Service unavailable"),
        _ => ("internal", "Internal error"),
    }
}

impl Problem {
    /// A problem of HTTP status `status` (a `u16` or an `http::StatusCode`).
    pub fn new(status: impl Into<u16>, detail: impl Into<String>) -> Problem {
        let status = status.into();
        let (slug, title) = kind_of(status);
        Problem {
            kind: format!("urn:bakeoff:problem:{slug}"),
            title: title.to_string(),
            status,
            detail: detail.into(),
            field_errors: Vec::new(),
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(400u16, detail)
    }

    pub fn not_found(what: &str) -> Problem {
        Problem::new(404u16, format!("There is no {what}."))
    }

    /// A 422 listing every wrong field.
    pub fn fields(fields: Vec<FieldProblem>) -> Problem {
        let detail = match fields.as_slice() {
            [one] => format!("Field `{}` {}.", one.field, one.message.trim_end_matches('.')),
            many => format!(
                "{} fields are wrong; see field_errors. Nothing was changed.",
                many.len()
            ),
        };
        Problem {
            field_errors: fields,
            ..Problem::new(422u16, detail)
        }
    }

    /// One wrong field (a query parameter or a body member).
    pub fn field(field: &str, message: impl Into<String>) -> Problem {
        Problem::fields(vec![FieldProblem {
            field: field.to_string(),
            message: message.into(),
            line: None,
        }])
    }

    /// Form-field errors of an app use case, each renamed to the request's own field by `rename`.
    pub fn from_field_errors(errors: &FieldErrors, rename: impl Fn(&str) -> String) -> Problem {
        Problem::fields(
            errors
                .0
                .iter()
                .map(|e| FieldProblem {
                    field: rename(&e.field),
                    message: e.message.clone(),
                    line: None,
                })
                .collect(),
        )
    }

    /// A refused file-shaped body; `lines` keeps the line numbers (a TOML body, not JSON).
    pub fn from_file_error(e: &FileError, lines: bool) -> Problem {
        Problem::fields(
            e.problems
                .iter()
                .map(|p| FieldProblem {
                    field: p.field.clone().unwrap_or_else(|| "body".to_string()),
                    message: p.message.clone(),
                    line: if lines { p.line } else { None },
                })
                .collect(),
        )
    }
}

/// A run with its progress.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunStatusView {
    /// `run_id`, `status` (queued, running, finished, failed, cancelled), `terminal`, `error`,
    /// and the counts: `done` of `expected` measured requests, `failed` attempts, `warmups`.
    #[serde(flatten)]
    pub progress: RunProgress,
    pub name: String,
    pub evalset_version_id: i64,
    pub candidate_ids: Vec<i64>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

impl RunStatusView {
    pub fn new(run: &Run, progress: RunProgress) -> RunStatusView {
        RunStatusView {
            progress,
            name: run.name.clone(),
            evalset_version_id: run.evalset_version_id,
            candidate_ids: run.candidate_ids.clone(),
            created_at: rfc3339(run.created_at),
            started_at: run.started_at.map(rfc3339),
            finished_at: run.finished_at.map(rfc3339),
        }
    }
}

/// What to run: what `bakeoff run start` takes. The eval set by version id or by name (its
/// newest version), candidates by id and/or by name, and how to run in the run settings file's
/// shape (`bakeoff_settings` may be left out). Every wrong field is reported at once.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCreate {
    /// The run's name; default: the settings' name, else one made of the eval set's and candidates' names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evalset_version_id: Option<i64>,
    /// An eval set's name: its newest version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evalset: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_ids: Vec<i64>,
    /// Candidates' names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
    /// How the run is executed (preset and overrides), as in a run settings file; default: the run form's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::files::settings::SettingsFile>)]
    pub settings: Option<serde_json::Value>,
}

/// `2026-12-01T21:40:00Z`.
pub fn rfc3339(t: Timestamp) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.0) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}
