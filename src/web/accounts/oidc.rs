//! Sign-in through the team's OIDC provider (`app::oidc` holds the rules): `/login/oidc` sends
//! the browser to the provider with a state also kept in a short-lived cookie (so the callback
//! is accepted only in the browser that started it), `/login/oidc/callback` finishes it; and
//! the admins' provider form on the Users page.
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::login::{ClientAddress, LoginPage, safe_next};
use crate::app::AppError;
use crate::app::oidc::{self, ProviderForm, SignedIn};
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::security::{CurrentUser, cookie};
use crate::web::views::FormBody;

/// The cookie holding a sign-in's state while the browser is at the provider.
const STATE_COOKIE: &str = "bakeoff_oidc_state";

fn state_cookie(state: &AppState, value: &str, max_age: i64) -> HeaderValue {
    // Lax: sent on the provider's top-level redirect back, never on a cross-site subrequest.
    let secure = if state.security.public_url.is_https() {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{STATE_COOKIE}={value}; Path=/login/oidc; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    ))
    .expect("hex and ASCII make a valid header")
}

/// The login page with a refusal (the status says which kind).
fn login_refused(status: StatusCode, message: String) -> Response {
    (
        status,
        LoginPage {
            nav: "",
            next: "/".into(),
            username: String::new(),
            message: Some(message),
            single_user: false,
            provider: None,
        },
    )
        .into_response()
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct Start {
    next: String,
}

/// Leaves for the provider.
pub async fn start(State(state): State<AppState>, Query(q): Query<Start>) -> Result<Response, WebError> {
    let origin = state.security.public_url.origin().to_string();
    match oidc::begin(state.store.as_ref(), oidc::client(), &origin, &safe_next(&q.next)).await {
        Ok((login_state, url)) => {
            let mut response = Redirect::to(&url).into_response();
            response.headers_mut().append(
                header::SET_COOKIE,
                state_cookie(&state, &login_state, crate::domain::oidc::LOGIN_MAX_MS / 1000),
            );
            Ok(response)
        }
        Err(AppError::Invalid(why)) => Ok(login_refused(StatusCode::BAD_GATEWAY, sentence(&why))),
        // No provider (any more): the login page, which offers the password form only.
        Err(AppError::NotFound(_)) => Ok(Redirect::to("/login").into_response()),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct Callback {
    state: String,
    code: String,
    error: String,
    error_description: String,
}

/// Back from the provider: a session, a wait for an admin, or a refusal naming the check.
pub async fn callback(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Result<Response, WebError> {
    let clear = state_cookie(&state, "", 0);
    let mut response = if !q.error.is_empty() {
        // The provider's own refusal (the user cancelled, or is not allowed): its words, escaped.
        let detail = if q.error_description.is_empty() {
            q.error.clone()
        } else {
            q.error_description.clone()
        };
        login_refused(
            StatusCode::UNAUTHORIZED,
            format!(
                "The identity provider did not sign you in: {}",
                crate::domain::validation::truncate(&detail, 200)
            ),
        )
    } else {
        let browser_state = cookie(&headers, STATE_COOKIE);
        let origin = state.security.public_url.origin().to_string();
        match oidc::finish(
            state.store.as_ref(),
            oidc::client(),
            &origin,
            &q.state,
            &q.code,
            browser_state,
            &address,
        )
        .await
        {
            Ok(SignedIn::Session { secret, return_to, .. }) => {
                let mut response = Redirect::to(&return_to).into_response();
                response
                    .headers_mut()
                    .append(header::SET_COOKIE, state.security.session_cookie(&secret));
                response
            }
            Ok(SignedIn::Waiting { username }) => login_refused(
                StatusCode::FORBIDDEN,
                format!(
                    "You are signed in with the identity provider as {username}, but your bakeoff account is \
                     disabled: it waits for an admin to give it a role and enable it (Users page). Nothing else is \
                     needed from you."
                ),
            ),
            Err(AppError::Invalid(why)) => login_refused(StatusCode::UNAUTHORIZED, sentence(&why)),
            Err(e) => return Err(e.into()),
        }
    };
    response.headers_mut().append(header::SET_COOKIE, clear);
    Ok(response)
}

fn sentence(why: &str) -> String {
    crate::web::error::sentence(why)
}

/// Saves the provider (admins); the client secret is sealed and never shown back.
pub async fn save(State(state): State<AppState>, me: CurrentUser, body: FormBody) -> Result<Response, WebError> {
    let text = |name: &str| body.get(name).unwrap_or_default().to_string();
    let form = ProviderForm {
        issuer: text("issuer"),
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        role_claim: text("role_claim"),
        role_map: text("role_map"),
        default_role: text("default_role"),
    };
    match oidc::save_provider(state.store.as_ref(), &form, &me.name).await {
        Ok(_) => Ok(Redirect::to("/users?done=oidc").into_response()),
        Err(e) => super::users::refused_provider(&state, e, form).await,
    }
}

/// Stops sign-in through the provider (its accounts stay).
pub async fn remove(State(state): State<AppState>, me: CurrentUser) -> Result<Response, WebError> {
    oidc::remove_provider(state.store.as_ref(), &me.name).await?;
    Ok(Redirect::to("/users?done=oidc-removed").into_response())
}
