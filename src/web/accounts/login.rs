//! `/login` and `/logout`. A session is a random id in an HttpOnly cookie; the database keeps
//! its hash. Failed logins are throttled per name and address (`app::accounts::login`).
use std::net::SocketAddr;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{ConnectInfo, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use crate::app::accounts::{self, Login};
use crate::web::AppState;
use crate::web::error::WebError;
use crate::web::security::{CurrentUser, Via};
use crate::web::views::FormBody;

/// The peer address of the connection (the proxy's, behind a reverse proxy: bakeoff trusts no
/// forwarded-for header, which any client could forge).
pub struct ClientAddress(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddress(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string()),
        ))
    }
}

/// Where to go after logging in: only a path on this server (never `//other.site` or a URL).
pub(super) fn safe_next(raw: &str) -> String {
    let ok =
        raw.starts_with('/') && !raw.starts_with("//") && !raw.contains('\\') && !raw.chars().any(char::is_control);
    if ok && !raw.starts_with("/login") {
        raw.to_string()
    } else {
        "/".to_string()
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "accounts/login.html")]
pub struct LoginPage {
    pub nav: &'static str,
    pub next: String,
    pub username: String,
    pub message: Option<String>,
    /// Single-user mode: there is nothing to log in to.
    pub single_user: bool,
    /// The identity provider's issuer, when sign-in through it is offered.
    pub provider: Option<String>,
}

/// The configured identity provider's issuer (None also when it cannot be read: the password
/// form works regardless).
async fn provider(state: &AppState) -> Option<String> {
    state
        .store
        .oidc_provider()
        .await
        .ok()
        .flatten()
        .map(|(config, _)| config.issuer)
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct NextQuery {
    next: String,
}

pub async fn form(State(state): State<AppState>, user: Option<CurrentUser>, Query(q): Query<NextQuery>) -> Response {
    let next = safe_next(&q.next);
    match user {
        Some(u) if matches!(u.via, Via::Session { .. }) => Redirect::to(&next).into_response(),
        user => LoginPage {
            nav: "",
            next,
            username: String::new(),
            message: None,
            single_user: user.is_some_and(|u| matches!(u.via, Via::SingleUser)),
            provider: provider(&state).await,
        }
        .into_response(),
    }
}

pub async fn submit(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    headers: axum::http::HeaderMap,
    body: FormBody,
) -> Result<Response, WebError> {
    let username = body.get("username").unwrap_or_default().to_string();
    let password = body.get("password").unwrap_or_default();
    let next = safe_next(body.get("next").unwrap_or_default());
    let provider = provider(&state).await;
    let page = |status: StatusCode, message: String| {
        (
            status,
            LoginPage {
                nav: "",
                next: next.clone(),
                username: username.clone(),
                message: Some(message),
                single_user: false,
                provider: provider.clone(),
            },
        )
            .into_response()
    };
    let name = crate::domain::accounts::login_name(&username);
    let device = state.security.trusted_device(&headers, &name);
    let from = accounts::LoginFrom {
        address: &address,
        device,
    };
    Ok(match accounts::login(state.store.as_ref(), &username, password, from).await? {
        Login::Session { user, secret } => {
            let mut response = Redirect::to(&next).into_response();
            let h = response.headers_mut();
            h.append(header::SET_COOKIE, state.security.session_cookie(&secret));
            h.append(header::SET_COOKIE, state.security.device_cookie(&user.username));
            response
        }
        Login::Throttled { wait_ms } => {
            let secs = (wait_ms + 999) / 1000;
            let mut response = page(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "Too many failed logins for this name or from your address, so this attempt was not checked. Try \
                     again in {}. A browser you have logged in from before is not slowed by other people's failures; \
                     an admin can also unlock your name on the Users page (or reset your password).",
                    crate::domain::format::duration(secs as f64)
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(secs.max(1)));
            response
        }
        Login::Refused => page(
            StatusCode::UNAUTHORIZED,
            "Wrong name or password (or the account is disabled). Nothing is locked yet; after a few more failures \
             each attempt must wait longer."
                .to_string(),
        ),
    })
}

/// Ends the session server-side and removes the cookie.
pub async fn logout(State(state): State<AppState>, user: Option<CurrentUser>) -> Result<Response, WebError> {
    if let Some(CurrentUser {
        via: Via::Session { user, session_hash },
        ..
    }) = user
    {
        accounts::logout(state.store.as_ref(), &user, &session_hash).await?;
    }
    let mut response = Redirect::to("/login").into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, state.security.cleared_session_cookie());
    Ok(response)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_local_paths_are_followed_after_login() {
        assert_eq!(super::safe_next("/runs/3?x=1"), "/runs/3?x=1");
        for bad in [
            "//evil.example",
            "https://evil.example",
            "/\\evil",
            "",
            "/login?next=/x",
            "x",
        ] {
            assert_eq!(super::safe_next(bad), "/", "{bad}");
        }
    }
}
