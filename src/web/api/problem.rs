//! Errors of the JSON API answered as problem details (`app::api::Problem`, RFC 9457). Every
//! error the web layer produces (the guard's refusals, 404s, store failures) is turned into the
//! same shape for `/api/` addresses by [`problems`], so a script never has to read an HTML
//! error page.
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::AppError;
pub use crate::app::api::{CONTENT_TYPE, FieldProblem, Problem};
use crate::store::StoreError;
use crate::web::error::{PublicError, WebError, sentence};

/// A problem answered over HTTP: its status, `application/problem+json`, the problem as the
/// body. The web's own type, so it can be an axum response (the problem is the app's).
#[derive(Debug)]
pub struct ApiError(pub Problem);

impl ApiError {
    fn from_public(e: &PublicError) -> ApiError {
        ApiError(Problem::new(e.status, e.message.clone()))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&self.0).expect("a problem serialises");
        let mut response = (status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        response
    }
}

impl From<Problem> for ApiError {
    fn from(p: Problem) -> ApiError {
        ApiError(p)
    }
}

impl From<WebError> for ApiError {
    fn from(e: WebError) -> ApiError {
        let status = e.status();
        if status.is_server_error() {
            tracing::error!(error = %e, "API request failed");
        }
        ApiError::from_public(&e.public())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        WebError::from(e).into()
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> ApiError {
        ApiError(match e {
            AppError::Fields(errors) => Problem::from_field_errors(&errors, str::to_string),
            AppError::Invalid(why) => Problem::new(StatusCode::UNPROCESSABLE_ENTITY, sentence(&why)),
            AppError::NotFound(what) => Problem::not_found(&what),
            AppError::Forbidden(message) => Problem::new(StatusCode::FORBIDDEN, message),
            e @ AppError::Busy { .. } => return WebError::from(e).into(),
            AppError::Store(e) => return e.into(),
        })
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
    let problem = ApiError::from_public(&public).into_response();
    let (problem_parts, body) = problem.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        problem_parts.headers[header::CONTENT_TYPE].clone(),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, body)
}
