//! Cross-site defences every request passes before a handler runs: the Host must be the public
//! URL's (DNS rebinding), a state-changing request must come from the public origin and carry a
//! CSRF token, and every response carries the security headers.
//!
//! CSRF tokens are HMACs, under a server key, of what the request is bound to: the login
//! session when there is one, else a random per-browser id kept in an HttpOnly cookie
//! (single-user mode, and the login form itself). A page on another site can make the browser
//! send the cookie but cannot read the token from our pages, so it cannot forge the field.
//! Forms carry the token as a hidden `_csrf` field (multipart forms in their action's query);
//! htmx requests send it as the `X-CSRF-Token` header (set once on `<body>`).
//!
//! Who is asking is settled here too (see [`CurrentUser`]): an `Authorization: Bearer` API token,
//! else a login session cookie, else — in single-user mode only — the local user. In accounts
//! mode (any user exists, or the server is reachable from other machines) a request with none
//! of these reaches only the public routes; [`super::access::ROUTES`] says which role every route
//! needs. A bearer request needs no CSRF token (a browser never attaches one by itself); a
//! request authenticated by a cookie always does.
//!
//! Templates read the token through [`page`], a request-scoped value set by [`guard`] with a
//! `tokio::task_local!`: every page and fragment can include it without each of the ~40 view
//! structs growing a field that each handler must fill.
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, MatchedPath, OptionalFromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::AppState;
use super::access::{self, Access};
use super::error::WebError;
use crate::domain::Timestamp;
use crate::domain::accounts::{self as accounts_rules, ApiToken, Role, User, secret_hash};
use crate::store::{Store, StoreError};

/// Name of the form field (and query parameter, for multipart forms) carrying the token.
pub const CSRF_FIELD: &str = "_csrf";
/// Header htmx sends the token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Cookie holding the per-browser id that tokens are bound to when there is no session.
pub const BROWSER_COOKIE: &str = "bakeoff_browser";
/// Cookie holding a login session's id (the database keeps only its hash).
pub const SESSION_COOKIE: &str = "bakeoff_session";
/// Cookie marking a browser that logged in as a name before (see [`Security::device_cookie`]).
pub const DEVICE_COOKIE: &str = "bakeoff_device";
/// How long a browser stays trusted for its name after its last login.
const DEVICE_MAX_AGE_SECS: i64 = 365 * 24 * 3600;
/// The audit log's actor in single-user mode.
pub const LOCAL_USER: &str = "local user (single-user mode)";

/// The one address the app is reached at, e.g. `https://bakeoff.example.com` or
/// `http://127.0.0.1:8080`; Host and Origin headers are checked against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// `scheme://host[:port]`, as browsers send it in `Origin`.
    origin: String,
    https: bool,
    /// Host header values accepted (the public host, and its loopback aliases when it is loopback).
    hosts: Vec<String>,
    /// Origins accepted (each accepted host with the public scheme).
    origins: Vec<String>,
}

impl PublicUrl {
    /// Parses `scheme://host[:port]` (a trailing `/` is fine; a path, query or credentials are not).
    pub fn parse(raw: &str) -> Result<PublicUrl, String> {
        let url = url::Url::parse(raw.trim()).map_err(|e| format!("{raw:?} is not a URL ({e})"))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(format!("{raw:?} must start with http:// or https://"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(format!(
                "{raw:?} must be only scheme, host and port (bakeoff is served at the root of its address)"
            ));
        }
        let host = url
            .host_str()
            .ok_or_else(|| format!("{raw:?} names no host"))?
            .to_ascii_lowercase();
        let port = url.port();
        let with_port = |h: &str| match port {
            Some(p) => format!("{h}:{p}"),
            None => h.to_string(),
        };
        let mut hosts = vec![with_port(&host)];
        if is_loopback_host(&host) {
            for alias in ["127.0.0.1", "localhost", "[::1]"] {
                let h = with_port(alias);
                if !hosts.contains(&h) {
                    hosts.push(h);
                }
            }
        }
        let scheme = url.scheme().to_string();
        let origins = hosts.iter().map(|h| format!("{scheme}://{h}")).collect();
        Ok(PublicUrl {
            origin: format!("{scheme}://{}", with_port(&host)),
            https: scheme == "https",
            hosts,
            origins,
        })
    }

    /// `http://ADDR` for an address that names one interface; None for 0.0.0.0 / [::], which
    /// do not say how the app is reached.
    pub fn from_listen(addr: SocketAddr) -> Option<PublicUrl> {
        if addr.ip().is_unspecified() {
            return None;
        }
        PublicUrl::parse(&format!("http://{addr}")).ok()
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn is_https(&self) -> bool {
        self.https
    }

    /// Whether people reach the app only from this machine (`localhost`, 127.0.0.0/8, ::1).
    pub fn is_loopback(&self) -> bool {
        let host = self.origin.split_once("://").map_or("", |(_, rest)| rest);
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        is_loopback_host(host)
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
    }
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The server's cross-site settings: where it is reached and the key CSRF tokens are signed with.
pub struct Security {
    pub public_url: PublicUrl,
    csrf_key: [u8; 32],
    /// Set once accounts are required (see [`Security::accounts_mode`]); never unset while running.
    accounts: AtomicBool,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("public_url", &self.public_url)
            .field("csrf_key", &"****")
            .field("accounts", &self.accounts)
            .finish()
    }
}

impl Security {
    /// `csrf_key` signs CSRF tokens: derive it from the server's secret key so tokens in open
    /// pages survive a restart.
    pub fn new(public_url: PublicUrl, csrf_key: [u8; 32]) -> Security {
        Security {
            public_url,
            csrf_key,
            accounts: AtomicBool::new(false),
        }
    }

    /// Requires a login on every page from now on, whether or not a user exists yet (a server
    /// reachable from other machines).
    pub fn require_accounts(&self) {
        self.accounts.store(true, Ordering::Relaxed);
    }

    /// Accounts mode: required at start-up, or any user exists (created by `bakeoff user add`
    /// while the server runs, too). Once on it stays on: removing every user never reopens a
    /// running server to anonymous changes.
    pub async fn accounts_mode(&self, store: &dyn Store) -> Result<bool, StoreError> {
        if self.accounts.load(Ordering::Relaxed) {
            return Ok(true);
        }
        if store.count_users().await? > 0 {
            self.require_accounts();
            return Ok(true);
        }
        Ok(false)
    }

    /// `; Path=/; HttpOnly; SameSite=Lax`, plus `; Secure` when the public URL is https.
    fn cookie_attributes(&self) -> &'static str {
        if self.public_url.https {
            "; Path=/; HttpOnly; SameSite=Lax; Secure"
        } else {
            "; Path=/; HttpOnly; SameSite=Lax"
        }
    }

    /// The `Set-Cookie` value carrying a new login session.
    pub fn session_cookie(&self, secret: &str) -> HeaderValue {
        let max_age = accounts_rules::SESSION_MAX_MS / 1000;
        HeaderValue::from_str(&format!(
            "{SESSION_COOKIE}={secret}{}; Max-Age={max_age}",
            self.cookie_attributes()
        ))
        .expect("hex and ASCII make a valid header")
    }

    /// The `Set-Cookie` value removing the session cookie (logout, expired session).
    pub fn cleared_session_cookie(&self) -> HeaderValue {
        HeaderValue::from_str(&format!("{SESSION_COOKIE}={}; Max-Age=0", self.cookie_attributes()))
            .expect("ASCII makes a valid header")
    }

    /// What a session-bound CSRF token is bound to (distinct from any browser id).
    fn session_binding(secret: &str) -> String {
        format!("session:{secret}")
    }

    /// The CSRF token of the login session `secret`: lets scripted clients (tests) post forms
    /// as a logged-in browser does.
    pub fn session_csrf_token(&self, secret: &str) -> String {
        self.csrf_token(&Self::session_binding(secret))
    }

    /// For a server reached at the loopback address it listens on (tests, benches), with a
    /// random CSRF key.
    pub fn for_loopback(addr: SocketAddr) -> Security {
        let public_url = PublicUrl::from_listen(addr).expect("a loopback address names its interface");
        Security::new(public_url, random_key())
    }

    /// A browser id with its cookie header value and CSRF token, as a browser holds them after
    /// loading a page: lets scripted clients (tests) post forms.
    pub fn browser_credentials(&self) -> (String, String) {
        let id = random_hex(16);
        let token = self.csrf_token(&id);
        (format!("{BROWSER_COOKIE}={id}"), token)
    }

    /// The CSRF token for whatever a request is bound to (session id or browser id).
    pub fn csrf_token(&self, binding: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.csrf_key).expect("HMAC takes any key length");
        mac.update(b"bakeoff csrf v1\0");
        mac.update(binding.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    fn csrf_valid(&self, binding: &str, token: &str) -> bool {
        let Ok(given) = hex::decode(token) else {
            return false;
        };
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.csrf_key).expect("HMAC takes any key length");
        mac.update(b"bakeoff csrf v1\0");
        mac.update(binding.as_bytes());
        // Constant-time comparison.
        mac.verify_slice(&given).is_ok()
    }

    /// The device cookie a browser gets when it logs in as `username`: a random id and an HMAC
    /// binding it to the name under the server key. Failed logins from a browser holding it are
    /// counted on their own (`domain::accounts::login_throttle_keys`), so nobody else's failures
    /// — from the same address, or from anywhere — slow its user down. Sent to `/login` only.
    pub fn device_cookie(&self, username: &str) -> HeaderValue {
        let id = random_hex(16);
        let mac = self.device_mac(username, &id);
        let secure = if self.public_url.https { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{DEVICE_COOKIE}={id}.{mac}; Path=/login; HttpOnly; SameSite=Strict; Max-Age={DEVICE_MAX_AGE_SECS}{secure}"
        ))
        .expect("hex and ASCII make a valid header")
    }

    /// The id of the request's device cookie when it is valid for `username` (as the login form
    /// looks it up: see `domain::accounts::login_name`).
    pub fn trusted_device<'a>(&self, headers: &'a HeaderMap, username: &str) -> Option<&'a str> {
        let (id, mac) = cookie(headers, DEVICE_COOKIE)?.split_once('.')?;
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let given = hex::decode(mac).ok()?;
        let mut check = <Hmac<Sha256> as Mac>::new_from_slice(&self.csrf_key).expect("HMAC takes any key length");
        check.update(b"bakeoff device v1\0");
        check.update(username.as_bytes());
        check.update(b"\0");
        check.update(id.as_bytes());
        // Constant-time comparison.
        check.verify_slice(&given).is_ok().then_some(id)
    }

    fn device_mac(&self, username: &str, id: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.csrf_key).expect("HMAC takes any key length");
        mac.update(b"bakeoff device v1\0");
        mac.update(username.as_bytes());
        mac.update(b"\0");
        mac.update(id.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A fresh per-browser id and its `Set-Cookie` value.
    pub fn new_browser_cookie(&self) -> (String, HeaderValue) {
        let id = random_hex(16);
        let cookie = format!("{BROWSER_COOKIE}={id}{}", self.cookie_attributes());
        (
            id,
            HeaderValue::from_str(&cookie).expect("hex and ASCII make a valid header"),
        )
    }
}

/// 32 random bytes from the operating system.
pub fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).expect("the operating system's random source");
    key
}

/// `n` random bytes from the operating system, hex-encoded.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

/// What the page being rendered may show about the request: its CSRF token, the mode the
/// server runs in (stated on every page), and who is logged in.
#[derive(Debug, Clone, Default)]
pub struct PageContext {
    pub csrf_token: String,
    /// Set in single-user mode: the address anyone on this machine can use it at.
    pub single_user_at: Option<String>,
    /// Set in accounts mode for a logged-in user (or an API token's user).
    pub signed_in: Option<SignedIn>,
}

/// The logged-in user, as pages show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub name: String,
    pub role: Role,
}

impl SignedIn {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

tokio::task_local! {
    static PAGE: PageContext;
}

/// The current request's page context (empty outside a request, e.g. in unit tests).
pub fn page() -> PageContext {
    PAGE.try_with(Clone::clone).unwrap_or_default()
}

/// The current request's CSRF token, for templates.
pub fn csrf_token() -> String {
    PAGE.try_with(|p| p.csrf_token.clone()).unwrap_or_default()
}

/// Set in single-user mode: the origin the mode applies to (for the banner on every page).
pub fn single_user_at() -> Option<String> {
    PAGE.try_with(|p| p.single_user_at.clone()).unwrap_or_default()
}

/// The logged-in user, for templates (None in single-user mode and on anonymous pages).
pub fn signed_in() -> Option<SignedIn> {
    PAGE.try_with(|p| p.signed_in.clone()).unwrap_or_default()
}

/// Whether the current request may do what `role` may (single-user mode's local user may do
/// everything), so pages offer only the buttons the guard will let through.
pub fn may(role: Role) -> bool {
    PAGE.try_with(|p| p.single_user_at.is_some() || p.signed_in.as_ref().is_some_and(|me| me.role >= role))
        .unwrap_or(false)
}

/// Who the current request acts as, for the audit log: the logged-in user's name, or in
/// single-user mode the local user.
pub fn actor() -> String {
    PAGE.try_with(|p| match (&p.signed_in, &p.single_user_at) {
        (Some(me), _) => Some(me.name.clone()),
        (None, Some(_)) => Some(LOCAL_USER.to_string()),
        (None, None) => None,
    })
    .ok()
    .flatten()
    .unwrap_or_else(|| "unknown".to_string())
}

/// Who a request acts as, put in its extensions by [`guard`]; handlers take it as an extractor
/// (`user: CurrentUser`, or `Option<CurrentUser>` on public routes). Reusable by any JSON API:
/// it is the same for a session and an API token.
#[derive(Debug, Clone)]
pub struct CurrentUser {
    pub name: String,
    /// What the request may do (for a token: the lower of the token's and its user's role).
    pub role: Role,
    pub via: Via,
}

/// How a request was authenticated.
#[derive(Debug, Clone)]
pub enum Via {
    /// Single-user mode: the local user, who may do everything.
    SingleUser,
    /// A login session (its id's hash, to end it on logout).
    Session { user: User, session_hash: String },
    /// `Authorization: Bearer` with an API token.
    Token { user: User, token: ApiToken },
}

impl CurrentUser {
    fn single_user() -> CurrentUser {
        CurrentUser {
            name: LOCAL_USER.to_string(),
            role: Role::Admin,
            via: Via::SingleUser,
        }
    }

    /// The account behind the request (None in single-user mode).
    pub fn user(&self) -> Option<&User> {
        match &self.via {
            Via::SingleUser => None,
            Via::Session { user, .. } | Via::Token { user, .. } => Some(user),
        }
    }

    /// Refuses with a 403 naming the role `what` needs when this user's role is lower. For the
    /// rare checks finer than a route (a candidate's key); routes are checked by the guard.
    /// Who acts, as the app layer's use cases take it.
    pub fn actor(&self) -> crate::app::candidates::Actor {
        crate::app::candidates::Actor {
            name: self.name.clone(),
            role: self.role,
        }
    }

    pub fn require(&self, role: Role, what: &str) -> Result<(), WebError> {
        if self.role >= role {
            Ok(())
        } else {
            Err(self.forbidden(role, Some(what)))
        }
    }

    /// The 403 for this caller: naming the API token when its scope, not the user, fell short.
    fn forbidden(&self, needed: Role, what: Option<&str>) -> WebError {
        let message = match &self.via {
            Via::Token { user, token } => accounts_rules::token_refusal(token, user.role, needed, what),
            _ => crate::domain::accounts::refusal(&self.name, self.role, needed, what),
        };
        WebError::Refused {
            status: StatusCode::FORBIDDEN,
            message,
        }
    }
}

fn login_required() -> WebError {
    WebError::Refused {
        status: StatusCode::UNAUTHORIZED,
        message: "Log in first: this server has accounts. Scripts send an API token as `Authorization: Bearer …`."
            .to_string(),
    }
}

impl<S: Send + Sync> FromRequestParts<S> for CurrentUser {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<CurrentUser>()
            .cloned()
            .ok_or_else(login_required)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for CurrentUser {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<CurrentUser>().cloned())
    }
}

/// Runs `f` (a render outside the request's task, e.g. in a server-sent event stream) with
/// the page context captured from the request.
pub fn with_page<R>(ctx: PageContext, f: impl FnOnce() -> R) -> R {
    PAGE.sync_scope(ctx, f)
}

/// A request refused before any handler ran.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The Host header is not the public URL's (DNS rebinding, or a misconfigured proxy).
    ForeignHost,
    /// The Origin (or Referer) of a state-changing request is another site.
    ForeignOrigin,
    /// A state-changing request without a valid CSRF token.
    BadToken,
    /// An `Authorization: Bearer` token that is unknown, revoked, or whose user is disabled.
    BadBearer,
    /// Single-user mode, but the request came through a proxy (the header naming it).
    ProxiedSingleUser(&'static str),
}

impl Refusal {
    fn response(self, public: &PublicUrl) -> Response {
        let message = match self {
            Refusal::ForeignHost => format!(
                "This server answers only at {}. Open bakeoff at that address (or start it with --public-url).",
                public.origin()
            ),
            Refusal::ForeignOrigin => format!(
                "This request came from another site and was refused; nothing was changed. Use bakeoff at {}.",
                public.origin()
            ),
            Refusal::BadToken => "This form is out of date or did not come from bakeoff, so nothing was changed. \
                 Reload the page and submit it again."
                .to_string(),
            Refusal::BadBearer => "This API token is not valid: it is unknown or revoked, or its user is disabled. \
                 Create a new one on your account page (or with `bakeoff user token create`)."
                .to_string(),
            Refusal::ProxiedSingleUser(header) => format!(
                "This server runs in single-user mode (no login: anyone who reaches it may change everything), and \
                 this request came through a proxy (it carries {header}), so it was refused. To serve bakeoff behind \
                 a proxy, start it with --public-url set to the address people open, and add a user first: \
                 `bakeoff user add NAME --role admin`."
            ),
        };
        let status = match self {
            Refusal::ForeignHost => StatusCode::MISDIRECTED_REQUEST,
            Refusal::ForeignOrigin | Refusal::BadToken | Refusal::ProxiedSingleUser(_) => StatusCode::FORBIDDEN,
            Refusal::BadBearer => StatusCode::UNAUTHORIZED,
        };
        let mut response = WebError::Refused { status, message }.into_response();
        if self == Refusal::BadBearer {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"bakeoff\", error=\"invalid_token\""),
            );
        }
        response
    }
}

fn header_str(headers: &HeaderMap, name: impl axum::http::header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The value of cookie `name` in the request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Host check: a request whose Host is not the public URL's is refused (browsers always send
/// Host; a request without one cannot come from a rebinding page).
fn check_host(public: &PublicUrl, headers: &HeaderMap) -> Result<(), Refusal> {
    match header_str(headers, header::HOST) {
        Some(host) if !public.host_allowed(host) => Err(Refusal::ForeignHost),
        _ => Ok(()),
    }
}

/// Origin check for a state-changing request: `Origin` must be the public origin; without it, a
/// `Sec-Fetch-Site` other than same-origin/none, or a `Referer` from elsewhere, refuses it.
/// A request with none of these (curl, scripts) passes here and still needs its token.
fn check_origin(public: &PublicUrl, headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(origin) = header_str(headers, header::ORIGIN) {
        return if public.origin_allowed(origin) {
            Ok(())
        } else {
            Err(Refusal::ForeignOrigin)
        };
    }
    if let Some(site) = header_str(headers, "sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return Err(Refusal::ForeignOrigin);
    }
    if let Some(referer) = header_str(headers, header::REFERER) {
        let origin = url::Url::parse(referer).map(|u| u.origin().ascii_serialization());
        if !origin.is_ok_and(|o| public.origin_allowed(&o)) {
            return Err(Refusal::ForeignOrigin);
        }
    }
    Ok(())
}

fn is_state_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The token a request carries: header, query parameter, or urlencoded form field. A form
/// field is removed from the body so handlers see exactly the form they expect.
async fn take_token(req: Request) -> Result<(Option<String>, Request), Response> {
    if let Some(t) = header_str(req.headers(), CSRF_HEADER) {
        return Ok((Some(t.to_string()), req));
    }
    if let Some(t) = req.uri().query().and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == CSRF_FIELD)
            .map(|(_, v)| v.into_owned())
    }) {
        return Ok((Some(t), req));
    }
    let is_form = header_str(req.headers(), header::CONTENT_TYPE)
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok((None, req));
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, super::MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => return Err(WebError::PayloadTooLarge.into_response()),
    };
    let (token, rest) = split_token_field(&bytes);
    Ok((token, Request::from_parts(parts, Body::from(rest))))
}

/// Splits `_csrf=…` out of a urlencoded body, keeping every other pair byte for byte.
fn split_token_field(body: &[u8]) -> (Option<String>, Bytes) {
    let mut token = None;
    let mut kept: Vec<&[u8]> = Vec::new();
    for pair in body.split(|b| *b == b'&') {
        let key = pair.split(|b| *b == b'=').next().unwrap_or_default();
        if key == CSRF_FIELD.as_bytes() {
            token = url::form_urlencoded::parse(pair).next().map(|(_, v)| v.into_owned());
        } else {
            kept.push(pair);
        }
    }
    (token, Bytes::from(kept.join(&b'&')))
}

/// The `Authorization: Bearer` token of a request, if it sends one.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = header_str(headers, header::AUTHORIZATION)?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Who a request is, before any handler runs.
struct Caller {
    user: Option<CurrentUser>,
    /// What its CSRF token is bound to; None for a bearer request (it needs none).
    binding: Option<String>,
    /// A browser cookie to set (the browser had none).
    new_browser_cookie: Option<HeaderValue>,
    /// The request sent a session cookie that is no longer valid: remove it.
    stale_session: bool,
    bearer: bool,
}

async fn identify(state: &AppState, headers: &HeaderMap, accounts: bool) -> Result<Caller, Response> {
    let security = &state.security;
    let now = Timestamp::now();
    if let Some(token) = bearer_token(headers) {
        // A bearer request is the token's alone: cookies it may also carry are ignored.
        return match state.store.token_user(&secret_hash(token), now).await {
            Ok(Some((user, token))) => Ok(Caller {
                user: Some(CurrentUser {
                    // Every audit entry, refusal and page of a bearer request names the token.
                    name: accounts_rules::token_actor(&user.username, token.id),
                    role: accounts_rules::effective_role(user.role, token.role),
                    via: Via::Token { user, token },
                }),
                binding: None,
                new_browser_cookie: None,
                stale_session: false,
                bearer: true,
            }),
            Ok(None) => Err(Refusal::BadBearer.response(&security.public_url)),
            Err(e) => Err(WebError::from(e).into_response()),
        };
    }
    let mut stale_session = false;
    if let Some(secret) = cookie(headers, SESSION_COOKIE) {
        let hash = secret_hash(secret);
        match state.store.session_user(&hash, now).await {
            Ok(Some(user)) => {
                return Ok(Caller {
                    user: Some(CurrentUser {
                        name: user.username.clone(),
                        role: user.role,
                        via: Via::Session {
                            user,
                            session_hash: hash,
                        },
                    }),
                    binding: Some(Security::session_binding(secret)),
                    new_browser_cookie: None,
                    stale_session: false,
                    bearer: false,
                });
            }
            Ok(None) => stale_session = true,
            Err(e) => return Err(WebError::from(e).into_response()),
        }
    }
    let (binding, new_browser_cookie) = match cookie(headers, BROWSER_COOKIE) {
        Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => (id.to_string(), None),
        _ => {
            let (id, cookie) = security.new_browser_cookie();
            (id, Some(cookie))
        }
    };
    Ok(Caller {
        user: (!accounts).then(CurrentUser::single_user),
        binding: Some(binding),
        new_browser_cookie,
        stale_session,
        bearer: false,
    })
}

/// The answer to an anonymous request for a route that needs a login: a browser opening a page
/// is sent to the login form (and back afterwards); htmx is told to go there; anything else
/// gets a 401.
fn to_login(req: &Request) -> Response {
    let headers = req.headers();
    let next = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let login = format!(
        "/login?{}",
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("next", next)
            .finish()
    );
    let wants_page = header_str(headers, header::ACCEPT).is_some_and(|a| a.contains("text/html"));
    let is_htmx = headers.contains_key("hx-request");
    let mut response = if matches!(*req.method(), Method::GET | Method::HEAD) && wants_page && !is_htmx {
        axum::response::Redirect::to(&login).into_response()
    } else {
        login_required().into_response()
    };
    let h = response.headers_mut();
    if is_htmx && let Ok(v) = HeaderValue::from_str(&login) {
        h.insert("hx-redirect", v);
    }
    h.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"bakeoff\""),
    );
    response
}

/// The refusal when the route table does not let `user` call the matched route.
fn refused_access(req: &Request, user: Option<&CurrentUser>) -> Option<Response> {
    // Unmatched paths reach only the 404 fallback.
    let pattern = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string())?;
    let Some(access) = access::required(req.method(), &pattern) else {
        let method_known = access::ROUTES.iter().any(|(_, p, _)| *p == pattern);
        if !method_known {
            tracing::error!(route = %pattern, method = %req.method(), "route has no declared access in web/access.rs: refused");
        }
        let (status, message) = if method_known {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{} is not answered at this address.", req.method()),
            )
        } else {
            (
                StatusCode::FORBIDDEN,
                "This address declares no role, so it is refused.".to_string(),
            )
        };
        return Some(WebError::Refused { status, message }.into_response());
    };
    match (access, user) {
        (Access::Public, _) => None,
        (Access::Role(_), None) => Some(to_login(req)),
        (Access::Role(needed), Some(u)) if u.role < needed => Some(u.forbidden(needed, None).into_response()),
        (Access::Role(_), Some(_)) => None,
    }
}

/// The middleware in front of every route: Host; who is asking (token, session, or the local
/// user); for a state-changing request from a browser, Origin and the CSRF token; the role the
/// route needs; then the handler runs with the page context set.
pub async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let security = &state.security;
    if let Err(refusal) = check_host(&security.public_url, req.headers()) {
        return refusal.response(&security.public_url);
    }
    let accounts = match security.accounts_mode(state.store.as_ref()).await {
        Ok(a) => a,
        Err(e) => return WebError::from(e).into_response(),
    };
    if !accounts && let Some(header) = proxied(req.headers()) {
        return Refusal::ProxiedSingleUser(header).response(&security.public_url);
    }
    let caller = match identify(&state, req.headers(), accounts).await {
        Ok(c) => c,
        Err(response) => return response,
    };
    // Every response of a route that needs a login is for its reader only: never stored by a
    // browser or a proxy cache.
    let private = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|p| access::required(req.method(), p.as_str()))
        .is_some_and(|a| matches!(a, Access::Role(_)));
    let mut req = req;
    if is_state_changing(req.method()) {
        if let Err(refusal) = check_origin(&security.public_url, req.headers()) {
            return refusal.response(&security.public_url);
        }
        if !caller.bearer {
            let (token, rest) = match take_token(req).await {
                Ok(t) => t,
                Err(response) => return response,
            };
            req = rest;
            // A browser without our cookie cannot hold a token bound to it.
            let valid = caller.new_browser_cookie.is_none()
                && caller
                    .binding
                    .as_deref()
                    .is_some_and(|b| token.is_some_and(|t| security.csrf_valid(b, &t)));
            if !valid {
                return Refusal::BadToken.response(&security.public_url);
            }
        }
    }
    let ctx = PageContext {
        csrf_token: caller
            .binding
            .as_deref()
            .map(|b| security.csrf_token(b))
            .unwrap_or_default(),
        single_user_at: (!accounts).then(|| security.public_url.origin().to_string()),
        signed_in: caller.user.as_ref().filter(|u| u.user().is_some()).map(|u| SignedIn {
            name: u.name.clone(),
            role: u.role,
        }),
    };
    // A refused page keeps the header: who is signed in, with what role.
    if let Some(response) = PAGE.sync_scope(ctx.clone(), || refused_access(&req, caller.user.as_ref())) {
        return with_cookies(response, &caller, security);
    }
    if let Some(user) = caller.user.clone() {
        req.extensions_mut().insert(user);
    }
    let mut response = PAGE.scope(ctx, next.run(req)).await;
    if private {
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    with_cookies(response, &caller, security)
}

/// The header showing a request came through a proxy (`X-Forwarded-For`, `Forwarded`, `Via`,
/// …), if any: single-user mode serves only people on this machine, and a proxy that forwards
/// `Host: 127.0.0.1` would otherwise hand everyone it serves the local user's rights.
fn proxied(headers: &HeaderMap) -> Option<&'static str> {
    [
        "x-forwarded-for",
        "forwarded",
        "via",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
    ]
    .into_iter()
    .find(|h| headers.contains_key(*h))
}

fn with_cookies(mut response: Response, caller: &Caller, security: &Security) -> Response {
    if let Some(cookie) = &caller.new_browser_cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie.clone());
    }
    let sets_session = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| v.as_bytes().starts_with(SESSION_COOKIE.as_bytes()));
    if caller.stale_session && !sets_session {
        response
            .headers_mut()
            .append(header::SET_COOKIE, security.cleared_session_cookie());
    }
    response
}

/// Headers every response carries: pages load only our own scripts and styles (so even a
/// rendering bug cannot run injected script), are never framed, never sniffed, and send no
/// Referer to other sites.
pub async fn security_headers(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    h.insert(
        "permissions-policy",
        HeaderValue::from_static("camera=(), microphone=(), geolocation=(), payment=(), usb=()"),
    );
    if state.security.public_url.is_https() {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn public_url_accepts_its_host_and_loopback_aliases_only() {
        let p = PublicUrl::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(p.origin(), "http://127.0.0.1:8080");
        for ok in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "LOCALHOST:8080"] {
            assert!(check_host(&p, &headers(&[("host", ok)])).is_ok(), "{ok}");
        }
        for bad in ["evil.example", "evil.example:8080", "127.0.0.1:8081", "127.0.0.1"] {
            assert_eq!(
                check_host(&p, &headers(&[("host", bad)])),
                Err(Refusal::ForeignHost),
                "{bad}"
            );
        }
        let p = PublicUrl::parse("https://bakeoff.example.com").unwrap();
        assert!(p.is_https() && p.host_allowed("bakeoff.example.com"));
        assert!(!p.host_allowed("localhost"));
        assert!(PublicUrl::parse("https://x.example/bakeoff").is_err());
        assert!(PublicUrl::parse("ftp://x.example").is_err());
        assert!(PublicUrl::from_listen("0.0.0.0:8080".parse().unwrap()).is_none());
    }

    #[test]
    fn foreign_origins_and_referers_are_refused() {
        let p = PublicUrl::parse("http://127.0.0.1:8080").unwrap();
        assert!(check_origin(&p, &headers(&[("origin", "http://localhost:8080")])).is_ok());
        assert!(check_origin(&p, &headers(&[])).is_ok());
        for h in [
            headers(&[("origin", "http://evil.example")]),
            headers(&[("origin", "null")]),
            headers(&[("origin", "https://127.0.0.1:8080")]),
            headers(&[("sec-fetch-site", "cross-site")]),
            headers(&[("referer", "http://evil.example/x")]),
        ] {
            assert_eq!(check_origin(&p, &h), Err(Refusal::ForeignOrigin), "{h:?}");
        }
    }

    #[test]
    fn tokens_are_bound_and_the_field_is_split_out_of_the_body() {
        let s = Security::new(PublicUrl::parse("http://127.0.0.1:1").unwrap(), [7; 32]);
        let t = s.csrf_token("browser-a");
        assert!(s.csrf_valid("browser-a", &t));
        assert!(!s.csrf_valid("browser-b", &t));
        assert!(!s.csrf_valid("browser-a", "zz"));
        let (token, rest) = split_token_field(b"name=a+b%26c&_csrf=abc123&x=1");
        assert_eq!(token.as_deref(), Some("abc123"));
        assert_eq!(&rest[..], b"name=a+b%26c&x=1");
        assert_eq!(
            cookie(&headers(&[("cookie", "a=1; bakeoff_browser=ff")]), BROWSER_COOKIE),
            Some("ff")
        );
    }
}
