//! "My account": change my password (proving the current one), my API tokens (a new one is
//! shown once, on the page that created it; revoke).
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::{form_message, parse_role, role_names};
use crate::app::accounts;
use crate::domain::accounts::{self as accounts_rules, ApiToken, Role, User};
use crate::web::AppState;
use crate::web::error::{WebError, parse_id};
use crate::web::security::{CurrentUser, Via};
use crate::web::views::FormBody;

/// One token as listed (never its secret).
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub role: &'static str,
    pub created: String,
    pub last_used: String,
    pub revoked: Option<String>,
}

impl From<&ApiToken> for TokenRow {
    fn from(t: &ApiToken) -> Self {
        TokenRow {
            id: t.id,
            name: t.name.clone(),
            role: t.role.as_str(),
            created: t.created_at.display(),
            last_used: t.last_used_at.map_or_else(|| "never".to_string(), |t| t.display()),
            revoked: t.revoked_at.map(|t| t.display()),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "accounts/account.html")]
pub struct AccountPage {
    pub nav: &'static str,
    pub username: String,
    pub role: &'static str,
    pub tokens: Vec<TokenRow>,
    /// Roles a new token may have (up to mine).
    pub token_roles: Vec<&'static str>,
    /// The role a new token form starts at: the least (a script that only reads needs no more;
    /// a wider one is a choice).
    pub token_role_default: &'static str,
    /// A token just created: shown this once.
    pub new_token: Option<(String, String)>,
    pub notice: Option<&'static str>,
    pub password_error: Option<String>,
    pub token_error: Option<String>,
}

/// The account behind the request; single-user mode has none.
fn my_account(user: &CurrentUser) -> Result<&User, WebError> {
    user.user().ok_or_else(|| {
        WebError::BadRequest(
            "Single-user mode has no accounts. Create the first admin with `bakeoff user add NAME --role admin` \
             (or on the Users page); from then on everyone logs in."
                .to_string(),
        )
    })
}

/// The account page of `me`, offering new tokens up to `acting` (the request's effective role).
async fn build(state: &AppState, me: &User, acting: Role) -> Result<AccountPage, WebError> {
    let tokens = state.store.list_api_tokens(Some(me.id)).await?;
    Ok(AccountPage {
        nav: "account",
        username: me.username.clone(),
        role: me.role.as_str(),
        tokens: tokens.iter().map(TokenRow::from).collect(),
        token_roles: role_names()
            .into_iter()
            .filter(|r| Role::parse(r).is_some_and(|r| r <= accounts_rules::token_role_cap(me.role, acting)))
            .collect(),
        token_role_default: Role::Viewer.as_str(),
        new_token: None,
        notice: None,
        password_error: None,
        token_error: None,
    })
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct Done {
    done: String,
}

pub async fn page(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(q): Query<Done>,
) -> Result<AccountPage, WebError> {
    let me = my_account(&user)?;
    let mut page = build(&state, me, user.role).await?;
    page.notice = match q.done.as_str() {
        "password" => Some("Password changed. Your other sessions were logged out and your API tokens revoked."),
        "revoked" => Some("Token revoked: it no longer works."),
        _ => None,
    };
    Ok(page)
}

pub async fn change_password(
    State(state): State<AppState>,
    user: CurrentUser,
    body: FormBody,
) -> Result<Response, WebError> {
    let me = my_account(&user)?;
    let keep = match &user.via {
        Via::Session { session_hash, .. } => Some(session_hash.as_str()),
        _ => None,
    };
    let new = body.get("new_password").unwrap_or_default();
    let outcome = if new != body.get("confirm_password").unwrap_or_default() {
        Err("The new password and its confirmation differ.".to_string())
    } else {
        match accounts::change_own_password(
            state.store.as_ref(),
            &user.name,
            me,
            body.get("current_password").unwrap_or_default(),
            new,
            keep,
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(form_message(e)?),
        }
    };
    match outcome {
        Ok(()) => Ok(Redirect::to("/account?done=password").into_response()),
        Err(message) => {
            let mut page = build(&state, me, user.role).await?;
            page.password_error = Some(message);
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
    }
}

pub async fn create_token(
    State(state): State<AppState>,
    user: CurrentUser,
    body: FormBody,
) -> Result<Response, WebError> {
    let me = my_account(&user)?;
    let role = parse_role(body.get("role"))?;
    let name = body.get("name").unwrap_or_default();
    match accounts::create_token_capped(state.store.as_ref(), &user.name, me, name, Some(role), user.role).await {
        Ok((token, secret)) => {
            let mut page = build(&state, me, user.role).await?;
            page.new_token = Some((token.name, secret));
            // Shown once, in this response only: never cached.
            Ok(([(axum::http::header::CACHE_CONTROL, "no-store")], page).into_response())
        }
        Err(e) => {
            let mut page = build(&state, me, user.role).await?;
            page.token_error = Some(form_message(e)?);
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
    }
}

pub async fn revoke_token(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    let me = my_account(&user)?;
    let id = parse_id(&raw, "token")?;
    let via = match &user.via {
        Via::Token { token, .. } => Some(token),
        _ => None,
    };
    accounts::revoke_token(state.store.as_ref(), &user.name, id, Some(me), via).await?;
    Ok(Redirect::to("/account?done=revoked").into_response())
}
