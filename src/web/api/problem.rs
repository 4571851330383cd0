//! Errors of the JSON API as RFC 9457 problem details (`application/problem+json`): `type`,
//! `title`, `status`, `detail`, and for a validation error `field_errors`, each naming the field
//! (and the line, for a TOML or JSONL body). Every error the web layer produces (the guard's
//! refusals, 404s, store failures) is turned into the same shape for `/api/` addresses by
//! [`problems`], so a script never has to read an HTML error page.
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::AppError;
use crate::app::files::FileError;
use crate::domain::validation::FieldErrors;
use crate::store::StoreError;
use crate::web::error::{PublicError, WebError, sentence};

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
fn kind_of(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
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
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        let (slug, title) = kind_of(status);
        Problem {
            kind: format!("urn:bakeoff:problem:{slug}"),
            title: title.to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            field_errors: Vec::new(),
        }
    }

    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }

    pub fn not_found(what: &str) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, format!("There is no {what}."))
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
            ..Problem::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
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

    fn from_public(e: &PublicError) -> Problem {
        Problem::new(e.status, e.message.clone())
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&self).expect("a problem serialises");
        let mut response = (status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        response
    }
}

impl From<WebError> for Problem {
    fn from(e: WebError) -> Problem {
        let status = e.status();
        if status.is_server_error() {
            tracing::error!(error = %e, "API request failed");
        }
        Problem::from_public(&e.public())
    }
}

impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Problem {
        WebError::from(e).into()
    }
}

impl From<AppError> for Problem {
    fn from(e: AppError) -> Problem {
        match e {
            AppError::Fields(errors) => Problem::from_field_errors(&errors, str::to_string),
            AppError::Invalid(why) => Problem::new(StatusCode::UNPROCESSABLE_ENTITY, sentence(&why)),
            AppError::NotFound(what) => Problem::not_found(&what),
            AppError::Forbidden(message) => Problem::new(StatusCode::FORBIDDEN, message),
            e @ AppError::Busy { .. } => WebError::from(e).into(),
            AppError::Store(e) => e.into(),
        }
    }
}

/// For `/api/` addresses: any error answered as an HTML page by the web layer (the guard's
/// 401/403/421, the 404 fallback, a 405, a 413) is answered as a problem detail instead,
/// keeping its status and headers (e.g. `WWW-Authenticate`).
pub async fn problems(req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api/");
    let mut response = next.run(req).await;
    if !api {
        return response;
    }
    let Some(public) = response.extensions_mut().remove::<PublicError>() else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    let problem = Problem::from_public(&public).into_response();
    let (problem_parts, body) = problem.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        problem_parts.headers[header::CONTENT_TYPE].clone(),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, body)
}
