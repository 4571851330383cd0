//! Accounts pages: logging in and out, "my account" (password, my API tokens) and the admins'
//! Users page. The rules live in `app::accounts` (shared with `bakeoff user`), which also writes
//! every change to the audit log; these handlers parse forms and render.
use axum::Router;
use axum::routing::{get, post};

use super::AppState;
use super::error::WebError;
use crate::app::AppError;
use crate::domain::accounts::Role;

mod account;
mod login;
mod oidc;
mod users;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/login/oidc", get(oidc::start))
        .route("/login/oidc/callback", get(oidc::callback))
        .route("/account", get(account::page))
        .route("/account/password", post(account::change_password))
        .route("/account/tokens", post(account::create_token))
        .route("/account/tokens/{id}/revoke", post(account::revoke_token))
        .route("/users", get(users::page).post(users::add))
        .route("/users/{id}/role", post(users::set_role))
        .route("/users/{id}/password", post(users::reset_password))
        .route("/users/{id}/disable", post(users::disable))
        .route("/users/{id}/enable", post(users::enable))
        .route("/users/{id}/tokens/revoke", post(users::revoke_tokens))
        .route("/users/{id}/unlock", post(users::unlock))
        .route("/users/{id}/remove", post(users::remove))
        .route("/users/oidc", post(oidc::save))
        .route("/users/oidc/remove", post(oidc::remove))
}

/// Every role, for the forms' choices, lowest first.
fn role_names() -> Vec<&'static str> {
    Role::ALL.iter().map(Role::as_str).collect()
}

/// A role from a form field.
fn parse_role(raw: Option<&str>) -> Result<Role, WebError> {
    let raw = raw.unwrap_or_default();
    Role::parse(raw).ok_or_else(|| WebError::BadRequest(format!("{raw:?} is not a role: use viewer, editor or admin.")))
}

/// An app-layer refusal a form shows above itself (wrong input), or the error to answer with.
fn form_message(e: AppError) -> Result<String, WebError> {
    match e {
        AppError::Invalid(why) => Ok(super::error::sentence(&why)),
        AppError::Fields(errors) => Ok(errors
            .0
            .iter()
            .map(|e| super::error::sentence(&format!("{} {}", e.field.replace('_', " "), e.message)))
            .collect::<Vec<_>>()
            .join(" ")),
        e => Err(e.into()),
    }
}
