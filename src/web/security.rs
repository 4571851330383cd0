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
//! Templates read the token through [`page`], a request-scoped value set by [`guard`] with a
//! `tokio::task_local!`: every page and fragment can include it without each of the ~40 view
//! structs growing a field that each handler must fill.
use std::net::{IpAddr, SocketAddr};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::AppState;
use super::error::WebError;

/// Name of the form field (and query parameter, for multipart forms) carrying the token.
pub const CSRF_FIELD: &str = "_csrf";
/// Header htmx sends the token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Cookie holding the per-browser id that tokens are bound to when there is no session.
pub const BROWSER_COOKIE: &str = "bakeoff_browser";

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
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("public_url", &self.public_url)
            .field("csrf_key", &"****")
            .finish()
    }
}

impl Security {
    /// `csrf_key` signs CSRF tokens: derive it from the server's secret key so tokens in open
    /// pages survive a restart.
    pub fn new(public_url: PublicUrl, csrf_key: [u8; 32]) -> Security {
        Security { public_url, csrf_key }
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

    /// A fresh per-browser id and its `Set-Cookie` value.
    pub fn new_browser_cookie(&self) -> (String, HeaderValue) {
        let id = random_hex(16);
        let secure = if self.public_url.https { "; Secure" } else { "" };
        let cookie = format!("{BROWSER_COOKIE}={id}; Path=/; HttpOnly; SameSite=Lax{secure}");
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

/// What the page being rendered may show about the request: its CSRF token, and the mode the
/// server runs in (stated on every page).
#[derive(Debug, Clone, Default)]
pub struct PageContext {
    pub csrf_token: String,
    /// Set in single-user mode: the address anyone on this machine can use it at.
    pub single_user_at: Option<String>,
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

/// Who the current request acts as, for the audit log: in single-user mode, the local user.
pub fn actor() -> String {
    PAGE.try_with(|p| {
        p.single_user_at
            .as_ref()
            .map(|_| "local user (single-user mode)".to_string())
    })
    .ok()
    .flatten()
    .unwrap_or_else(|| "unknown".to_string())
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
        };
        let status = match self {
            Refusal::ForeignHost => StatusCode::MISDIRECTED_REQUEST,
            Refusal::ForeignOrigin | Refusal::BadToken => StatusCode::FORBIDDEN,
        };
        WebError::Refused { status, message }.into_response()
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

/// The middleware in front of every route: Host, then (for state-changing requests) Origin and
/// the CSRF token; then the handler runs with the page context set.
pub async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let security = &state.security;
    if let Err(refusal) = check_host(&security.public_url, req.headers()) {
        return refusal.response(&security.public_url);
    }
    let (binding, new_cookie) = match cookie(req.headers(), BROWSER_COOKIE) {
        Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => (id.to_string(), None),
        _ => {
            let (id, cookie) = security.new_browser_cookie();
            (id, Some(cookie))
        }
    };
    let mut req = req;
    if is_state_changing(req.method()) {
        if let Err(refusal) = check_origin(&security.public_url, req.headers()) {
            return refusal.response(&security.public_url);
        }
        let (token, rest) = match take_token(req).await {
            Ok(t) => t,
            Err(response) => return response,
        };
        req = rest;
        // A browser without our cookie cannot hold a token bound to it.
        if new_cookie.is_some() || !token.is_some_and(|t| security.csrf_valid(&binding, &t)) {
            return Refusal::BadToken.response(&security.public_url);
        }
    }
    let ctx = PageContext {
        csrf_token: security.csrf_token(&binding),
        single_user_at: Some(security.public_url.origin().to_string()),
    };
    let mut response = PAGE.scope(ctx, next.run(req)).await;
    if let Some(cookie) = new_cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie);
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
