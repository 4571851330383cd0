//! A small OpenID Connect provider on loopback, standards-compliant for what bakeoff uses:
//! discovery (`/.well-known/openid-configuration`), a JWKS, an authorization endpoint (a page
//! with a "Sign in" button, the code flow with PKCE S256 only) and a token endpoint
//! (client_secret_basic, the code single-use and bound to its redirect URI and PKCE challenge)
//! issuing ID tokens signed RS256 with a test key (tests/fixtures/oidc). A test chooses who
//! signs in next (subject, name, groups) and can make the next token forged in one way.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use sha2::Digest;

pub const CLIENT_ID: &str = "bakeoff-test-client";
pub const CLIENT_SECRET: &str = "the-client-secret-of-bakeoff";
pub const KEY_ID: &str = "test-key-1";

/// One way the next ID token is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forgery {
    /// Signed by another key under the provider's key id.
    BadSignature,
    /// For another client.
    WrongAudience,
    /// Expired an hour ago.
    Expired,
    /// Carries this nonce (an earlier login's) instead of the one asked for.
    Nonce(String),
    /// From another issuer.
    WrongIssuer,
}

/// Who signs in next.
#[derive(Debug, Clone)]
pub struct Person {
    pub sub: String,
    pub name: String,
    pub groups: Vec<String>,
}

struct Grant {
    redirect_uri: String,
    challenge: String,
    nonce: String,
    person: Person,
}

struct Inner {
    issuer: String,
    next: Person,
    forgery: Option<Forgery>,
    codes: HashMap<String, Grant>,
    /// Every nonce an authorization request carried, in order.
    nonces: Vec<String>,
    key: RsaKeyPair,
    forger: RsaKeyPair,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Inner>>);

pub struct OidcProvider {
    pub issuer: String,
    shared: Shared,
    _task: tokio::task::JoinHandle<()>,
}

fn key(name: &str) -> RsaKeyPair {
    let path = format!("{}/tests/fixtures/oidc/{name}-key.der.b64", env!("CARGO_MANIFEST_DIR"));
    let der = STANDARD.decode(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
    RsaKeyPair::from_der(&der).unwrap()
}

impl OidcProvider {
    pub async fn start() -> OidcProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let shared = Shared(Arc::new(Mutex::new(Inner {
            issuer: issuer.clone(),
            next: Person {
                sub: "u-1001".into(),
                name: "ana".into(),
                groups: vec![],
            },
            forgery: None,
            codes: HashMap::new(),
            nonces: Vec::new(),
            key: key("provider"),
            forger: key("forger"),
        })));
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize_page).post(approve))
            .route("/token", axum::routing::post(token))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        OidcProvider {
            issuer,
            shared,
            _task: task,
        }
    }

    /// Who signs in next (and after, until changed).
    pub fn sign_in_as(&self, sub: &str, name: &str, groups: &[&str]) {
        self.shared.0.lock().unwrap().next = Person {
            sub: sub.into(),
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
    }

    /// The next token issued is forged this way (once).
    pub fn forge_next(&self, forgery: Forgery) {
        self.shared.0.lock().unwrap().forgery = Some(forgery);
    }

    /// The nonces authorization requests carried, in order.
    pub fn nonces(&self) -> Vec<String> {
        self.shared.0.lock().unwrap().nonces.clone()
    }
}

async fn discovery(State(shared): State<Shared>) -> Response {
    let issuer = shared.0.lock().unwrap().issuer.clone();
    axum::Json(serde_json::json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        "scopes_supported": ["openid", "profile", "email"],
    }))
    .into_response()
}

async fn jwks(State(shared): State<Shared>) -> Response {
    let inner = shared.0.lock().unwrap();
    let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(inner.key.public());
    axum::Json(serde_json::json!({"keys": [{
        "kty": "RSA", "use": "sig", "alg": "RS256", "kid": KEY_ID,
        "n": URL_SAFE_NO_PAD.encode(&public.n), "e": URL_SAFE_NO_PAD.encode(&public.e),
    }]}))
    .into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The authorization request, checked, as a page with one button (a real provider asks for a
/// password here; the test's user is chosen by the test).
async fn authorize_page(State(shared): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Err(why) = check_request(&q) {
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let name = shared.0.lock().unwrap().next.name.clone();
    let hidden: String = q
        .iter()
        .map(|(k, v)| format!("<input type=\"hidden\" name=\"{}\" value=\"{}\">", escape(k), escape(v)))
        .collect();
    Html(format!(
        "<!doctype html><html lang=\"en\"><title>Test provider</title><main><h1>Test identity provider</h1>\
         <form method=\"post\" action=\"/authorize\">{hidden}<button id=\"approve\" type=\"submit\">Sign in as {}</button></form></main></html>",
        escape(&name)
    ))
    .into_response()
}

fn check_request(q: &HashMap<String, String>) -> Result<(), String> {
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    if get("response_type") != "code" {
        return Err("response_type must be code".into());
    }
    if get("client_id") != CLIENT_ID {
        return Err("unknown client".into());
    }
    if get("code_challenge_method") != "S256" || get("code_challenge").len() != 43 {
        return Err("PKCE with S256 is required".into());
    }
    if !get("scope").split(' ').any(|s| s == "openid") {
        return Err("scope must include openid".into());
    }
    for k in ["redirect_uri", "state", "nonce"] {
        if get(k).is_empty() {
            return Err(format!("{k} is required"));
        }
    }
    Ok(())
}

/// "Sign in": a single-use code, back to the redirect URI with the state.
async fn approve(State(shared): State<Shared>, Form(q): Form<HashMap<String, String>>) -> Response {
    if let Err(why) = check_request(&q) {
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let mut inner = shared.0.lock().unwrap();
    let code = hex::encode(rand_bytes());
    let nonce = q["nonce"].clone();
    inner.nonces.push(nonce.clone());
    let person = inner.next.clone();
    inner.codes.insert(
        code.clone(),
        Grant {
            redirect_uri: q["redirect_uri"].clone(),
            challenge: q["code_challenge"].clone(),
            nonce,
            person,
        },
    );
    let mut back = url::Url::parse(&q["redirect_uri"]).unwrap();
    back.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &q["state"]);
    Redirect::to(back.as_str()).into_response()
}

fn rand_bytes() -> [u8; 16] {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut b).unwrap();
    b
}

fn token_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({"error": error}))).into_response()
}

/// The code for tokens: client authenticated (basic), code used once, same redirect URI, and
/// the PKCE verifier hashing to the challenge.
async fn token(State(shared): State<Shared>, headers: HeaderMap, Form(f): Form<HashMap<String, String>>) -> Response {
    let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let expected = format!("Basic {}", STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}")));
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    if get("grant_type") != "authorization_code" {
        return token_error("unsupported_grant_type");
    }
    let mut inner = shared.0.lock().unwrap();
    let Some(grant) = inner.codes.remove(get("code")) else {
        return token_error("invalid_grant");
    };
    if grant.redirect_uri != get("redirect_uri") {
        return token_error("invalid_grant");
    }
    if URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(get("code_verifier").as_bytes())) != grant.challenge {
        return token_error("invalid_grant");
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let forgery = inner.forgery.take();
    let mut claims = serde_json::json!({
        "iss": inner.issuer,
        "sub": grant.person.sub,
        "aud": CLIENT_ID,
        "exp": now + 300,
        "iat": now,
        "nonce": grant.nonce,
        "preferred_username": grant.person.name,
        "groups": grant.person.groups,
    });
    match &forgery {
        Some(Forgery::WrongAudience) => claims["aud"] = "another-client".into(),
        Some(Forgery::Expired) => {
            claims["iat"] = (now - 7200).into();
            claims["exp"] = (now - 3600).into();
        }
        Some(Forgery::Nonce(n)) => claims["nonce"] = n.clone().into(),
        Some(Forgery::WrongIssuer) => claims["iss"] = "https://evil.example".into(),
        Some(Forgery::BadSignature) | None => {}
    }
    let signer = if forgery == Some(Forgery::BadSignature) {
        &inner.forger
    } else {
        &inner.key
    };
    let id_token = sign(signer, &claims);
    axum::Json(serde_json::json!({
        "access_token": hex::encode(rand_bytes()),
        "token_type": "Bearer",
        "expires_in": 300,
        "id_token": id_token,
    }))
    .into_response()
}

/// A JWS compact serialisation, RS256.
pub fn sign(key: &RsaKeyPair, claims: &serde_json::Value) -> String {
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": KEY_ID});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0u8; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        input.as_bytes(),
        &mut signature,
    )
    .unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}
