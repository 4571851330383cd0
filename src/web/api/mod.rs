//! The JSON API under `/api/v1`: what the pages show (candidates, eval sets, threshold
//! profiles, runs with their progress and records, scorecards, the archive), for scripts and
//! CI. One file per resource; handlers are as thin as the pages' and call the same `app` and
//! `store` functions, so a figure in the API is the figure on the page.
//!
//! Who may call what is the route table of [`super::access`], like every page; the guard in
//! front of every route authenticates `Authorization: Bearer` API tokens (no CSRF token needed)
//! as well as login sessions (whose state-changing requests need the CSRF header, as pages do).
//! Errors are RFC 9457 problem details ([`problem`]). The OpenAPI 3.1 document is generated
//! from the handlers' annotations by utoipa ([`ApiDoc`]), served at `/api/v1/openapi.json` and
//! committed as `docs/api/openapi.json` (a unit test fails when the two differ).
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

use super::AppState;
use super::views::FormBody;

pub mod archive;
pub mod candidates;
pub mod evalsets;
pub mod problem;
pub mod profiles;
pub mod review;
pub mod runs;
pub mod schedules;
pub mod scorecards;
pub mod workers;
pub mod workloads;

pub use problem::{ApiError, Problem};

/// Where the API lives.
pub const PREFIX: &str = "/api/v1";
/// Items per page when `limit` is not given, and the most a page holds.
pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 500;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/openapi.json", get(openapi_json))
        .merge(candidates::router())
        .merge(evalsets::router())
        .merge(profiles::router())
        .merge(runs::router())
        .merge(scorecards::router())
        .merge(archive::router())
        .merge(workers::router())
        .merge(review::router())
        .merge(schedules::router())
        .merge(workloads::router())
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "bakeoff API",
        version = "1",
        description = "The JSON API of a bakeoff server: candidates, eval sets, threshold profiles, runs \
                       (create, progress, cancel, raw records), scorecards (judged and saved), CI verdicts and the archive \
                       (filtered, runs compared side by side, one candidate's history), and the measurement workers. \
                       Authenticate with `Authorization: Bearer <API token>` (created on the account page or \
                       with `bakeoff user token create`). Errors are RFC 9457 problem details. See docs/api.md."
    ),
    paths(
        openapi_json,
        candidates::list,
        candidates::get_one,
        candidates::import,
        candidates::set_labels,
        evalsets::list,
        evalsets::get_one,
        evalsets::upload,
        evalsets::cases,
        profiles::list,
        profiles::get_one,
        profiles::import,
        runs::list,
        runs::create,
        runs::status,
        runs::cancel,
        runs::records,
        scorecards::scorecard,
        scorecards::verdict,
        scorecards::save,
        scorecards::list_saved,
        scorecards::get_saved,
        archive::query,
        archive::compare_runs,
        archive::history_of,
        workers::list,
        review::run_queue,
        review::fill,
        review::offered,
        review::item,
        review::label,
        review::claim,
        review::skip,
        review::assign,
        review::prefer,
        review::win_rates,
        review::calibration,
        schedules::list,
        schedules::get_one,
        schedules::import,
        schedules::list_targets,
        schedules::create_target,
        workloads::list,
        workloads::version,
        workloads::import,
    ),
    components(schemas(Problem, problem::FieldProblem)),
    modifiers(&Security, &ErrorResponses),
    tags(
        (name = "candidates", description = "Models behind endpoints; keys are never returned"),
        (name = "evalsets", description = "Versioned eval sets and their cases"),
        (name = "profiles", description = "Threshold profiles (the team's minimum acceptable values)"),
        (name = "runs", description = "Runs: create, progress, cancel, raw request records"),
        (name = "scorecards", description = "A run judged by a threshold profile, and saved scorecards"),
        (name = "archive", description = "Finished runs: filtered as on the archive page, compared side by side, one candidate's history"),
        (name = "workers", description = "The measurement workers sharing the database: heartbeats, labels, load"),
        (name = "review", description = "The review queue, labels, blind comparisons and LLM-judge calibration"),
        (name = "schedules", description = "Schedules, their firings and changes since the baseline, and notification targets"),
        (name = "workloads", description = "Workloads: a team's traffic (imported logs, generated shared-prefix loads) as versioned load descriptions"),
        (name = "meta", description = "This document"),
    )
)]
pub struct ApiDoc;

/// The bearer scheme, required by every operation but the document itself.
struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (`bakeoff user token create`, or the account page). In single-user mode \
                         (a loopback server without users) requests need no token; state-changing requests \
                         from a browser session need the X-CSRF-Token header, as pages do.",
                    ))
                    .build(),
            ),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            if path.ends_with("/openapi.json") {
                continue;
            }
            for op in operations(item) {
                op.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
            }
        }
    }
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        item.get.as_mut(),
        item.post.as_mut(),
        item.put.as_mut(),
        item.delete.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// The problem responses every operation can give, added once here rather than on each handler:
/// 400 (a bad parameter), 401 and 403 (the guard), 404 (an id in the path), 422 (a body or
/// parameter refused field by field), 503 (the database is not answering).
struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, doc: &mut Document) {
        let problem = || {
            utoipa::openapi::ResponseBuilder::new().content(
                problem::CONTENT_TYPE,
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Problem"))))
                    .build(),
            )
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            let public = path.ends_with("/openapi.json");
            let has_id = path.contains('{');
            for op in operations(item) {
                let mut add = |code: &str, text: &str| {
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| RefOr::T(problem().description(text).build()));
                };
                if public {
                    continue;
                }
                add("400", "A malformed parameter or body");
                add("401", "No valid API token or session (accounts mode)");
                add(
                    "403",
                    "The caller's role is too low, or a browser request lacks its CSRF token",
                );
                if has_id {
                    add("404", "The id in the path names nothing");
                }
                add(
                    "422",
                    "Input refused field by field (`field_errors`); nothing was changed",
                );
                add("503", "The database is not answering");
            }
        }
    }
}

/// The document, generated from the handlers' annotations.
pub fn openapi() -> Document {
    ApiDoc::openapi()
}

/// The document as served and committed: pretty JSON with a final newline.
pub fn openapi_text() -> String {
    let mut text = openapi().to_pretty_json().expect("the OpenAPI document serialises");
    text.push('\n');
    text
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get, operation_id = "get_openapi",
    path = "/api/v1/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = serde_json::Value))
)]
pub async fn openapi_json() -> Response {
    let mut response = openapi_text().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON answer (`200`, or the status given).
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = (status, body).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(e) => ApiError::from(super::error::WebError::Internal(format!(
            "serialising an API answer: {e}"
        )))
        .into_response(),
    }
}

/// The answer of a handler: JSON, or a problem.
pub type ApiResult = Result<Response, ApiError>;

pub fn ok<T: Serialize>(value: &T) -> ApiResult {
    Ok(json(StatusCode::OK, value))
}

pub use crate::app::api::rfc3339;

/// The query string of a request, read by name with errors that name the parameter.
pub struct Params(FormBody);

impl Params {
    pub fn parse(raw: Option<String>) -> Params {
        Params(FormBody::parse(raw.unwrap_or_default().as_bytes()))
    }

    /// The trimmed value of `name`; None when absent or blank.
    pub fn text(&self, name: &str) -> Option<String> {
        self.0
            .get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    }

    /// A whole number in `min..=max`, or a 400 naming the parameter.
    pub fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, Problem> {
        match self.text(name) {
            None => Ok(None),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(bad_parameter(
                    name,
                    format!(
                        "must be a whole number from {min} to {max}, got {:?}",
                        crate::domain::validation::truncate(&v, 20)
                    ),
                )),
            },
        }
    }

    /// `limit` (default [`DEFAULT_LIMIT`], at most [`MAX_LIMIT`]) and `offset` (default 0).
    pub fn page(&self) -> Result<(i64, i64), Problem> {
        Ok((
            self.int("limit", 1, MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT),
            self.int("offset", 0, i64::MAX)?.unwrap_or(0),
        ))
    }
}

/// A 400 naming the query parameter that is wrong.
pub fn bad_parameter(name: &str, message: impl Into<String>) -> Problem {
    let message = message.into();
    Problem {
        field_errors: vec![problem::FieldProblem {
            field: name.to_string(),
            message: message.clone(),
            line: None,
        }],
        ..Problem::bad_request(format!("The query parameter `{name}` {message}."))
    }
}

/// A positive id from a path segment; anything else names nothing (404).
pub fn path_id(raw: &str, what: &str) -> Result<i64, ApiError> {
    super::error::parse_id(raw, what).map_err(ApiError::from)
}

/// The `limit`/`offset` query parameters, for the document (read by [`Params::page`]).
#[derive(Debug, Clone, Copy, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PageParams {
    /// Items per page (default 50, at most 500).
    limit: Option<i64>,
    /// Items to skip (default 0).
    offset: Option<i64>,
}

/// `limit`/`offset` paging as the list answers state it.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct PageInfo {
    /// Items matching, over all pages.
    pub total: i64,
    pub limit: i64,
    pub offset: i64,
}

/// A request body, read whole (up to the app's limit) with its media type.
pub struct Body {
    pub bytes: Bytes,
    pub media_type: String,
}

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let media_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default();
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(Body { bytes, media_type }),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(super::error::WebError::PayloadTooLarge.into())
            }
            Err(rejection) => Err(Problem::bad_request(format!(
                "The request body could not be read ({}).",
                rejection.body_text()
            ))
            .into()),
        }
    }
}

impl Body {
    pub fn is_json(&self) -> bool {
        self.media_type == "application/json" || self.media_type.ends_with("+json")
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<&str, Problem> {
        std::str::from_utf8(&self.bytes).map_err(|e| {
            Problem::bad_request(format!(
                "The request body is not UTF-8 text (first bad byte at offset {}).",
                e.valid_up_to()
            ))
        })
    }

    /// The body as JSON of `T`; a body that is not says where.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Problem> {
        if !self.is_json() {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Send the body as application/json (got {:?}).",
                    if self.media_type.is_empty() {
                        "no Content-Type"
                    } else {
                        &self.media_type
                    }
                ),
            ));
        }
        serde_json::from_slice(&self.bytes).map_err(|e| {
            Problem::bad_request(format!(
                "The request body is not the JSON expected (line {}, column {}): {e}.",
                e.line(),
                e.column()
            ))
        })
    }

    /// A file-shaped body (candidates, profile): JSON in the file's shape, or the TOML file
    /// itself (`application/toml`). Returns the TOML text the file readers take, and whether
    /// its line numbers are the sender's (a TOML body) or made here (JSON).
    pub fn file_text(&self) -> Result<(String, bool), Problem> {
        if self.is_json() {
            let value: serde_json::Value = self.json()?;
            if !value.is_object() {
                return Err(Problem::bad_request("The request body must be a JSON object."));
            }
            let text = toml::to_string(&value).map_err(|e| {
                Problem::bad_request(format!(
                    "The request body cannot be read as a file (a JSON null has no TOML form): {e}."
                ))
            })?;
            Ok((text, false))
        } else if matches!(
            self.media_type.as_str(),
            "application/toml" | "text/toml" | "text/plain"
        ) {
            Ok((self.text()?.to_string(), true))
        } else {
            Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Send the body as application/json (the file's shape) or application/toml (the file itself).",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/api/openapi.json is generated from the handlers: `BAKEOFF_WRITE_SCHEMAS=1 cargo test
    /// --lib web::api` rewrites it; otherwise a stale file fails here.
    #[test]
    fn the_committed_openapi_document_is_the_one_the_code_generates() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api/openapi.json");
        let text = openapi_text();
        if std::env::var_os("BAKEOFF_WRITE_SCHEMAS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{} is stale: run BAKEOFF_WRITE_SCHEMAS=1 cargo test --lib web::api",
            path.display()
        );
    }

    #[test]
    fn every_documented_path_is_a_route_with_a_declared_access() {
        let doc = openapi();
        assert!(doc.paths.paths.len() >= 15);
        for (path, item) in &doc.paths.paths {
            for (method, present) in [
                ("GET", item.get.is_some()),
                ("POST", item.post.is_some()),
                ("PUT", item.put.is_some()),
            ] {
                if present {
                    assert!(
                        crate::web::access::required(&method.parse().unwrap(), path).is_some(),
                        "{method} {path} is documented but has no entry in web/access.rs"
                    );
                }
            }
        }
        let text = openapi_text();
        assert!(text.contains("\"openapi\": \"3.1.0\""), "{}", &text[..200]);
    }

    #[test]
    fn operation_ids_are_unique_and_every_operation_has_a_summary() {
        let mut doc = openapi();
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in doc.paths.paths.iter_mut() {
            for op in operations(item) {
                let id = op.operation_id.clone().unwrap_or_default();
                assert!(ids.insert(id.clone()), "operationId {id:?} of {path} is used twice");
                let summary = op.summary.clone().unwrap_or_default();
                assert!(
                    !summary.is_empty() && !summary.contains('\n'),
                    "{path}: summary {summary:?}"
                );
            }
        }
    }
}
