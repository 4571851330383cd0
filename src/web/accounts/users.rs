//! The admins' Users page: add a user, change a role, disable or re-enable, reset a password,
//! revoke a user's tokens, remove a user. Each action redirects back with what was done (or re-shows the page
//! with why not); `app::accounts` writes the audit entry.
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::{form_message, parse_role, role_names};
use crate::app::{AppError, accounts};
use crate::domain::accounts::User;
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::security::CurrentUser;
use crate::web::views::FormBody;

pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub role: &'static str,
    pub created: String,
    pub disabled: Option<String>,
    pub active_tokens: usize,
    /// Made by a sign-in through the identity provider (no password of its own).
    pub via_provider: bool,
}

/// The identity-provider form: the stored values (never the client secret), or what was typed.
pub struct ProviderView {
    pub configured: bool,
    pub issuer: String,
    pub client_id: String,
    pub has_secret: bool,
    pub role_claim: String,
    pub role_map: String,
    pub default_role: String,
    /// What to register with the provider as the redirect URI.
    pub redirect_uri: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "accounts/users.html")]
pub struct UsersPage {
    pub nav: &'static str,
    pub users: Vec<UserRow>,
    pub roles: Vec<&'static str>,
    pub notice: Option<String>,
    pub error: Option<String>,
    /// The add form's name, kept when it is re-shown.
    pub new_username: String,
    pub provider: ProviderView,
    /// Why the provider form was refused.
    pub provider_error: Option<String>,
}

async fn build(state: &AppState) -> Result<UsersPage, WebError> {
    let users = state.store.list_users().await?;
    let tokens = state.store.list_api_tokens(None).await?;
    let local = state.store.local_users().await?;
    let stored = state.store.oidc_provider().await?;
    let provider = ProviderView {
        configured: stored.is_some(),
        issuer: stored.as_ref().map(|(c, _)| c.issuer.clone()).unwrap_or_default(),
        client_id: stored.as_ref().map(|(c, _)| c.client_id.clone()).unwrap_or_default(),
        has_secret: stored.as_ref().is_some_and(|(_, secret)| *secret),
        role_claim: stored.as_ref().map(|(c, _)| c.role_claim.clone()).unwrap_or_default(),
        role_map: stored.as_ref().map(|(c, _)| c.role_map_text()).unwrap_or_default(),
        default_role: stored
            .as_ref()
            .and_then(|(c, _)| c.default_role)
            .map_or("none", |r| r.as_str())
            .to_string(),
        redirect_uri: crate::app::oidc::redirect_uri(state.security.public_url.origin()),
    };
    Ok(UsersPage {
        nav: "users",
        users: users
            .iter()
            .map(|u| UserRow {
                id: u.id,
                username: u.username.clone(),
                role: u.role.as_str(),
                created: u.created_at.display(),
                disabled: u.disabled_at.map(|t| t.display()),
                active_tokens: tokens
                    .iter()
                    .filter(|t| t.user_id == u.id && t.revoked_at.is_none())
                    .count(),
                via_provider: !local.contains(&u.id),
            })
            .collect(),
        roles: role_names(),
        notice: None,
        error: None,
        new_username: String::new(),
        provider,
        provider_error: None,
    })
}

/// The page re-shown with why the provider form was refused (422), what was typed kept (but
/// never the secret).
pub(super) async fn refused_provider(
    state: &AppState,
    e: AppError,
    form: crate::app::oidc::ProviderForm,
) -> Result<Response, WebError> {
    let message = form_message(e)?;
    let mut page = build(state).await?;
    page.provider_error = Some(message);
    page.provider.issuer = form.issuer;
    page.provider.client_id = form.client_id;
    page.provider.role_claim = form.role_claim;
    page.provider.role_map = form.role_map;
    page.provider.default_role = form.default_role;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct Done {
    done: String,
    user: String,
}

pub async fn page(State(state): State<AppState>, Query(q): Query<Done>) -> Result<UsersPage, WebError> {
    let mut page = build(&state).await?;
    let who = q.user.trim();
    page.notice = match q.done.as_str() {
        "added" => Some(format!("Added {who}.")),
        "role" => Some(format!("Changed the role of {who}.")),
        "password" => Some(format!(
            "Set a new password for {who}; their sessions were logged out, their API tokens revoked and their \
             failed logins forgotten."
        )),
        "unlocked" => Some(format!(
            "Unlocked {who}: the failed logins counted for the name are forgotten."
        )),
        "disabled" => Some(format!("Disabled {who}: logged out, and their tokens are refused.")),
        "enabled" => Some(format!("Enabled {who}.")),
        "tokens" => Some(format!("Revoked every token of {who}.")),
        "oidc" => Some("Saved the identity provider: the login page offers signing in with it.".to_string()),
        "oidc-removed" => Some(
            "Removed the identity provider: its accounts stay, and sign in only with a password an admin sets."
                .to_string(),
        ),
        "removed" => Some(format!(
            "Removed {who}: logged out, tokens revoked; the audit log keeps their name."
        )),
        _ => None,
    };
    Ok(page)
}

fn done(what: &str, user: &str) -> Response {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("done", what)
        .append_pair("user", user)
        .finish();
    Redirect::to(&format!("/users?{query}")).into_response()
}

/// The page re-shown with why an action was not done (422), or the error to answer with.
async fn refused(state: &AppState, e: AppError, new_username: String) -> Result<Response, WebError> {
    let message = form_message(e)?;
    let mut page = build(state).await?;
    page.error = Some(message);
    page.new_username = new_username;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
}

async fn target(state: &AppState, raw: &str) -> Result<User, WebError> {
    Ok(accounts::user_by_id(state.store.as_ref(), parse_id(raw, "user")?).await?)
}

pub async fn add(State(state): State<AppState>, me: CurrentUser, body: FormBody) -> Result<Response, WebError> {
    let role = parse_role(body.get("role"))?;
    let username = body.get("username").unwrap_or_default();
    match accounts::add_user(
        state.store.as_ref(),
        &me.name,
        username,
        role,
        body.get("password").unwrap_or_default(),
    )
    .await
    {
        Ok(user) => Ok(done("added", &user.username)),
        Err(e) => refused(&state, e, username.to_string()).await,
    }
}

pub async fn set_role(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
    body: FormBody,
) -> Result<Response, WebError> {
    let user = target(&state, &raw).await?;
    let role = parse_role(body.get("role"))?;
    match accounts::set_role(state.store.as_ref(), &me.name, &user, role).await {
        Ok(_) => Ok(done("role", &user.username)),
        Err(e) => refused(&state, e, String::new()).await,
    }
}

pub async fn reset_password(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
    body: FormBody,
) -> Result<Response, WebError> {
    let user = target(&state, &raw).await?;
    let password = body.get("password").unwrap_or_default();
    match accounts::reset_password(state.store.as_ref(), &me.name, &user, password).await {
        Ok(()) => Ok(done("password", &user.username)),
        Err(e) => refused(&state, e, String::new()).await,
    }
}

async fn set_disabled(state: AppState, me: CurrentUser, raw: String, disabled: bool) -> Result<Response, WebError> {
    let user = target(&state, &raw).await?;
    match accounts::set_disabled(state.store.as_ref(), &me.name, &user, disabled).await {
        Ok(()) => Ok(done(if disabled { "disabled" } else { "enabled" }, &user.username)),
        Err(e) => refused(&state, e, String::new()).await,
    }
}

pub async fn disable(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    set_disabled(state, me, raw, true).await
}

pub async fn enable(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    set_disabled(state, me, raw, false).await
}

pub async fn unlock(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    let user = target(&state, &raw).await?;
    accounts::unlock(state.store.as_ref(), &me.name, &user).await?;
    Ok(done("unlocked", &user.username))
}

pub async fn revoke_tokens(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    let user = target(&state, &raw).await?;
    accounts::revoke_user_tokens(state.store.as_ref(), &me.name, &user).await?;
    Ok(done("tokens", &user.username))
}

pub async fn remove(
    State(state): State<AppState>,
    me: CurrentUser,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    let user = target(&state, &raw).await?;
    match accounts::remove_user(state.store.as_ref(), &me.name, me.user(), &user).await {
        Ok(()) => Ok(done("removed", &user.username)),
        Err(e) => refused(&state, e, String::new()).await,
    }
}
