//! The web layer's one error type, mapped once to an HTML error page.
//!
//! 4xx errors say what was wrong in words meant for the user; 5xx errors are logged with their
//! cause and shown as a generic message, so internal details (SQL, paths) never reach a page.
use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use crate::app::AppError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The thing named does not exist, e.g. "run 42".
    #[error("not found: {0}")]
    NotFound(String),
    /// The request itself is malformed (bad query parameter, unparseable form body).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request is valid but conflicts with what is happening now (e.g. a run measures the
    /// candidate a probe would hit); the message says what and what to do.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Refused before any handler ran (foreign Host or Origin, missing CSRF token, not allowed
    /// for this role); the message says why and what to do.
    #[error("refused ({status}): {message}")]
    Refused { status: StatusCode, message: String },
    /// A request body above [`super::MAX_BODY_BYTES`].
    #[error("request body too large")]
    PayloadTooLarge,
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("template: {0}")]
    Template(#[from] askama::Error),
    /// Any other failure whose cause must be logged but not shown.
    #[error("internal: {0}")]
    Internal(String),
    /// Bounded work (password hashing) is full: 503 with `Retry-After`.
    #[error("busy, retry after {retry_after_secs} s")]
    Busy { retry_after_secs: u64 },
}

impl WebError {
    pub fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Conflict(_) => StatusCode::CONFLICT,
            WebError::Refused { status, .. } => *status,
            WebError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            WebError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            // A store-level "not found" reached here means a stale link or id race.
            WebError::Store(StoreError::NotFound(_)) => StatusCode::NOT_FOUND,
            WebError::Store(e) if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            WebError::Store(_) | WebError::Template(_) | WebError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What may be shown of this error (also to API clients, as a problem detail).
    pub fn public(&self) -> PublicError {
        let (heading, message) = self.public_text();
        PublicError {
            status: self.status(),
            heading,
            message,
        }
    }

    /// (heading, message) for the page; never contains internal error text for 5xx.
    fn public_text(&self) -> (&'static str, String) {
        match self {
            WebError::NotFound(what) => (
                "Not found",
                format!("There is no {what}. It may have been removed, or the link is wrong."),
            ),
            WebError::BadRequest(why) => ("Bad request", why.clone()),
            WebError::Conflict(why) => ("Not now", why.clone()),
            WebError::Refused { message, .. } => ("Refused", message.clone()),
            WebError::Busy { retry_after_secs } => (
                "Busy",
                format!(
                    "The server is checking many passwords at once right now, so this one was not checked and \
                     nothing was counted. Try again in {retry_after_secs} s."
                ),
            ),
            WebError::PayloadTooLarge => (
                "Form too large",
                format!(
                    "The form was larger than {}; nothing was stored.",
                    crate::domain::format::bytes(super::MAX_BODY_BYTES as u64)
                ),
            ),
            WebError::Store(StoreError::NotFound(_)) => (
                "Not found",
                "That item no longer exists. It may have been removed, or the link is wrong.".to_string(),
            ),
            WebError::Store(e) if e.is_unavailable() => (
                "Database not answering",
                "bakeoff's database is not answering right now. Runs in progress keep their finished \
                 records and pause until it is back; reload this page in a moment."
                    .to_string(),
            ),
            _ => (
                "Something went wrong",
                "bakeoff could not complete this request. The cause has been logged on the server; \
                 nothing you submitted was lost if it was already saved. Try again, or check the server log."
                    .to_string(),
            ),
        }
    }
}

impl From<AppError> for WebError {
    fn from(e: AppError) -> Self {
        match e {
            AppError::Invalid(why) => WebError::BadRequest(sentence(&why)),
            AppError::Fields(errors) => WebError::BadRequest(sentence(&errors.to_string())),
            AppError::NotFound(what) => WebError::NotFound(what),
            AppError::Forbidden(message) => WebError::Refused {
                status: StatusCode::FORBIDDEN,
                message,
            },
            AppError::Busy { retry_after_secs } => WebError::Busy { retry_after_secs },
            AppError::Store(e) => WebError::Store(e),
        }
    }
}

/// An application-layer message (a lowercase clause) as a sentence for a page.
pub fn sentence(clause: &str) -> String {
    let mut chars = clause.chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => String::new(),
    }
}

/// The shown part of an error, kept in the extensions of its response so the JSON API can
/// answer it as a problem detail instead of a page (`api::problem::problems`).
#[derive(Debug, Clone)]
pub struct PublicError {
    pub status: StatusCode,
    pub heading: &'static str,
    pub message: String,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub nav: &'static str,
    pub status: u16,
    pub heading: &'static str,
    pub message: String,
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            WebError::Busy { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        };
        if status.is_server_error() && retry_after.is_none() {
            // The full cause goes to the log only.
            tracing::error!(error = %self, "request failed");
        }
        let public = self.public();
        let page = ErrorPage {
            nav: "",
            status: status.as_u16(),
            heading: public.heading,
            message: public.message.clone(),
        };
        let mut response = match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(err) => {
                tracing::error!(error = %err, "rendering the error page failed");
                (status, public.heading).into_response()
            }
        };
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
        }
        response.extensions_mut().insert(public);
        response
    }
}

/// The fallback for unknown paths.
pub async fn not_found() -> WebError {
    WebError::NotFound("page at this address".to_string())
}

/// Parses an id from a path segment; anything that is not a positive integer is "not found"
/// (a typo'd link should get the same friendly page as a deleted item).
pub fn parse_id(raw: &str, what: &str) -> Result<i64, WebError> {
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(WebError::NotFound(format!("{what} {raw:?}"))),
    }
}

/// The 1-based page number from `?page=`; absent means 1.
pub fn parse_page(raw: Option<&str>) -> Result<u32, WebError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(1),
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(WebError::BadRequest(format!(
                "The page number must be a whole number from 1, got {:?}.",
                crate::domain::validation::truncate(s, 20)
            ))),
        },
    }
}

/// `YYYY-MM-DD` → Unix milliseconds at 00:00 UTC.
pub fn parse_day(raw: &str, field: &str) -> Result<Option<i64>, WebError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    let bad = || {
        WebError::BadRequest(format!(
            "The {field} date {:?} is not a date like 2025-03-31.",
            crate::domain::validation::truncate(raw, 40)
        ))
    };
    let mut parts = raw.split('-');
    let (Some(y), Some(m), Some(d), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let (y, m, d) = (
        y.parse::<i32>().map_err(|_| bad())?,
        m.parse::<u8>().map_err(|_| bad())?,
        d.parse::<u8>().map_err(|_| bad())?,
    );
    let month = time::Month::try_from(m).map_err(|_| bad())?;
    let date = time::Date::from_calendar_date(y, month, d).map_err(|_| bad())?;
    Ok(Some(date.midnight().assume_utc().unix_timestamp() * 1000))
}
