//! Sign-in through an OpenID Connect provider: the provider as an admin configures it, the
//! authorization request (code flow with PKCE S256, state and nonce), and the verification of
//! the ID token the provider returns — its RS256 signature against the provider's JWKS, then
//! `iss`, `aud` (and `azp`), `exp`/`iat` with a small skew, and the nonce of this login — and the
//! role its claims map to. Pure: fetching the discovery document, the JWKS and the token is the
//! app's (`app::oidc`). RS256 is what every provider signs ID tokens with by default (OpenID
//! Connect Core §15.1 makes it the one algorithm a provider must support); the signature is
//! checked by `ring`, already built for rustls.
use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::accounts::Role;
use crate::validation::FieldErrors;

/// How far the provider's clock may be from ours when `exp` and `iat` are checked.
pub const CLOCK_SKEW_SECS: i64 = 60;
/// How long a login may take between leaving for the provider and coming back.
pub const LOGIN_MAX_MS: i64 = 10 * 60 * 1000;
/// The path the provider sends the browser back to (under the server's public URL).
pub const CALLBACK_PATH: &str = "/login/oidc/callback";

/// The provider as saved by an admin (the client secret is sealed apart and never in here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// The issuer identifier, e.g. `https://login.example.com/realms/team`: the discovery
    /// document is read at `{issuer}/.well-known/openid-configuration` and must name it exactly.
    pub issuer: String,
    pub client_id: String,
    /// The ID token claim roles are read from (e.g. `groups`); empty: none is read.
    pub role_claim: String,
    /// A value of that claim -> the role it grants; with several, the highest wins.
    pub role_map: BTreeMap<String, Role>,
    /// The role of a user no mapping names; None: the account waits, disabled, for an admin
    /// to give it a role.
    pub default_role: Option<Role>,
}

impl ProviderConfig {
    /// Checks a form's fields into a config; every wrong field named.
    pub fn from_form(
        issuer: &str,
        client_id: &str,
        role_claim: &str,
        role_map: &str,
        default_role: &str,
    ) -> Result<ProviderConfig, FieldErrors> {
        let mut errors = FieldErrors::default();
        let issuer = issuer.trim().trim_end_matches('/').to_string();
        match url::Url::parse(&issuer) {
            Ok(u) if u.scheme() == "https" && u.host().is_some() => {}
            Ok(u) if u.scheme() == "http" && u.host_str().is_some_and(is_loopback) => {}
            Ok(u) if u.scheme() == "http" => errors.add(
                "issuer",
                "must be https:// (http:// only for a provider on this machine)",
            ),
            _ => errors.add(
                "issuer",
                "must be the provider's issuer URL, e.g. https://login.example.com",
            ),
        }
        let client_id = client_id.trim().to_string();
        if client_id.is_empty() {
            errors.add("client_id", "is required: the id the provider gave bakeoff");
        }
        let mut map = BTreeMap::new();
        for (n, line) in role_map.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            match line.rsplit_once('=') {
                Some((value, role)) if !value.trim().is_empty() => match Role::parse(role) {
                    Some(role) => {
                        map.insert(value.trim().to_string(), role);
                    }
                    None => errors.add(
                        "role_map",
                        format!(
                            "line {}: {:?} is not a role (viewer, editor or admin)",
                            n + 1,
                            role.trim()
                        ),
                    ),
                },
                _ => errors.add(
                    "role_map",
                    format!("line {}: write VALUE = ROLE, e.g. bakeoff-admins = admin", n + 1),
                ),
            }
        }
        let role_claim = role_claim.trim().to_string();
        if !map.is_empty() && role_claim.is_empty() {
            errors.add("role_claim", "name the claim the mapped values are in (e.g. groups)");
        }
        let default_role = match default_role.trim() {
            "" | "none" => None,
            other => match Role::parse(other) {
                Some(r) => Some(r),
                None => {
                    errors.add("default_role", "is none, viewer, editor or admin");
                    None
                }
            },
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(ProviderConfig {
            issuer,
            client_id,
            role_claim,
            role_map: map,
            default_role,
        })
    }

    /// The mapping as the form shows it: one `VALUE = ROLE` a line.
    pub fn role_map_text(&self) -> String {
        self.role_map
            .iter()
            .map(|(value, role)| format!("{value} = {role}\n"))
            .collect()
    }

    /// Where the discovery document is.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer)
    }

    /// The role the claims grant: the highest mapped value among the role claim's (a string or
    /// an array of strings); None when no value is mapped.
    pub fn mapped_role(&self, claims: &serde_json::Value) -> Option<Role> {
        if self.role_claim.is_empty() {
            return None;
        }
        let values: Vec<&str> = match claims.get(&self.role_claim) {
            Some(serde_json::Value::String(s)) => vec![s.as_str()],
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
            _ => Vec::new(),
        };
        values.iter().filter_map(|v| self.role_map.get(*v).copied()).max()
    }
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "[::1]" | "::1") || host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// The provider's discovery document (OpenID Connect Discovery 1.0 §3), the fields used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
}

impl Discovery {
    /// The document must be the configured issuer's (§4.3: `issuer` identical) and its
    /// endpoints on https (or on this machine, as the issuer may be).
    pub fn check(&self, config: &ProviderConfig) -> Result<(), String> {
        if self.issuer.trim_end_matches('/') != config.issuer {
            return Err(format!(
                "the provider's discovery document names issuer {:?}, not the configured {:?}",
                self.issuer, config.issuer
            ));
        }
        for (name, url) in [
            ("authorization_endpoint", &self.authorization_endpoint),
            ("token_endpoint", &self.token_endpoint),
            ("jwks_uri", &self.jwks_uri),
        ] {
            match url::Url::parse(url) {
                Ok(u) if u.scheme() == "https" => {}
                Ok(u) if u.scheme() == "http" && u.host_str().is_some_and(is_loopback) => {}
                _ => return Err(format!("the provider's {name} {url:?} is not an https:// URL")),
            }
        }
        if !self.code_challenge_methods_supported.is_empty()
            && !self.code_challenge_methods_supported.iter().any(|m| m == "S256")
        {
            return Err("the provider does not support PKCE with S256".into());
        }
        Ok(())
    }
}

/// What one login keeps while the browser is at the provider: `state` (its SHA-256 is the key),
/// the nonce the ID token must carry, and the PKCE verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingLogin {
    pub nonce: String,
    pub pkce_verifier: String,
    /// A local path to go to afterwards.
    pub return_to: String,
    pub created_at: crate::Timestamp,
}

/// PKCE's S256 challenge of a verifier (RFC 7636 §4.2).
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The authorization request's URL (code flow, PKCE S256, state and nonce).
pub fn authorization_url(
    discovery: &Discovery,
    client_id: &str,
    redirect_uri: &str,
    state: &str,
    nonce: &str,
    pkce_verifier: &str,
) -> String {
    let mut url = url::Url::parse(&discovery.authorization_endpoint).expect("checked by Discovery::check");
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", redirect_uri)
        .append_pair("scope", "openid profile email")
        .append_pair("state", state)
        .append_pair("nonce", nonce)
        .append_pair("code_challenge", &pkce_challenge(pkce_verifier))
        .append_pair("code_challenge_method", "S256");
    url.into()
}

/// A JSON Web Key Set (RFC 7517), the RSA fields used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    pub kty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// RSA modulus, base64url, big-endian.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    /// RSA public exponent, base64url, big-endian.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
}

/// Why an ID token was refused. Each names the check that failed; none echoes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the ID token is not a signed JWT ({0})")]
    Malformed(String),
    #[error("the ID token is signed with {0:?}; bakeoff accepts RS256")]
    Algorithm(String),
    #[error("the provider's key set has no RSA signing key {0}")]
    UnknownKey(String),
    #[error("the ID token's signature does not verify against the provider's keys")]
    BadSignature,
    #[error("the ID token was issued by {found:?}, not the configured issuer {expected:?}")]
    WrongIssuer { found: String, expected: String },
    #[error("the ID token is for another client (aud {0}), not this bakeoff")]
    WrongAudience(String),
    #[error("the ID token expired {0} s ago")]
    Expired(i64),
    #[error("the ID token is issued {0} s in the future")]
    IssuedInFuture(i64),
    #[error("the ID token's nonce is not this login's (a replayed or injected token)")]
    Nonce,
    #[error("the ID token has no {0:?} claim")]
    Missing(&'static str),
}

/// What must hold of a token: from the configured provider, for this client, now, this login.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub nonce: &'a str,
    pub now_secs: i64,
}

/// The verified identity an ID token carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// `iss` and `sub` together: a subject is unique only within its issuer.
    pub subject: String,
    /// A name to show and to log in as: `preferred_username`, else `email`, else `sub`.
    pub display_name: String,
    pub claims: serde_json::Value,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// Verifies an ID token (OpenID Connect Core §3.1.3.7): the signature first (RS256 against a
/// key of `jwks`, chosen by `kid`), then `iss`, `aud`/`azp`, `exp`, `iat`, `nonce`.
pub fn verify_id_token(token: &str, jwks: &Jwks, expected: Expected<'_>) -> Result<Identity, TokenError> {
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed("not three dot-separated parts".into()));
    };
    let decode = |part: &str, what: &str| {
        URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .map_err(|_| TokenError::Malformed(format!("its {what} is not base64url")))
    };
    let header: Header = serde_json::from_slice(&decode(header_b64, "header")?)
        .map_err(|_| TokenError::Malformed("its header is not a JOSE header".into()))?;
    if header.alg != "RS256" {
        return Err(TokenError::Algorithm(header.alg));
    }
    let signature = decode(signature_b64, "signature")?;
    let signed = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
    let candidates: Vec<&Jwk> = jwks
        .keys
        .iter()
        .filter(|k| k.kty == "RSA" && k.use_.as_deref().is_none_or(|u| u == "sig"))
        .filter(|k| k.alg.as_deref().is_none_or(|a| a == "RS256"))
        .filter(|k| header.kid.is_none() || k.kid == header.kid)
        .collect();
    if candidates.is_empty() {
        return Err(TokenError::UnknownKey(
            header
                .kid
                .map(|k| format!("{k:?}"))
                .unwrap_or_else(|| "(no kid)".into()),
        ));
    }
    let verified = candidates.iter().any(|key| {
        let (Some(n), Some(e)) = (key.n.as_deref(), key.e.as_deref()) else {
            return false;
        };
        let (Ok(n), Ok(e)) = (URL_SAFE_NO_PAD.decode(n), URL_SAFE_NO_PAD.decode(e)) else {
            return false;
        };
        ring::signature::RsaPublicKeyComponents { n: &n, e: &e }
            .verify(&ring::signature::RSA_PKCS1_2048_8192_SHA256, signed, &signature)
            .is_ok()
    });
    if !verified {
        return Err(TokenError::BadSignature);
    }
    let claims: serde_json::Value = serde_json::from_slice(&decode(payload_b64, "payload")?)
        .map_err(|_| TokenError::Malformed("its payload is not JSON".into()))?;
    let text = |name: &'static str| {
        claims
            .get(name)
            .and_then(|v| v.as_str())
            .ok_or(TokenError::Missing(name))
    };
    let iss = text("iss")?;
    if iss.trim_end_matches('/') != expected.issuer {
        return Err(TokenError::WrongIssuer {
            found: iss.to_string(),
            expected: expected.issuer.to_string(),
        });
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(serde_json::Value::String(s)) => vec![s.as_str()],
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
        _ => return Err(TokenError::Missing("aud")),
    };
    let azp_ok = match claims.get("azp").and_then(|v| v.as_str()) {
        Some(azp) => azp == expected.client_id,
        // §3.1.3.7 (4): several audiences need an azp naming this client.
        None => audiences.len() == 1,
    };
    if !audiences.contains(&expected.client_id) || !azp_ok {
        return Err(TokenError::WrongAudience(audiences.join(", ")));
    }
    let number = |name: &'static str| {
        claims
            .get(name)
            .and_then(|v| v.as_i64())
            .ok_or(TokenError::Missing(name))
    };
    let exp = number("exp")?;
    if expected.now_secs > exp + CLOCK_SKEW_SECS {
        return Err(TokenError::Expired(expected.now_secs - exp));
    }
    let iat = number("iat")?;
    if iat > expected.now_secs + CLOCK_SKEW_SECS {
        return Err(TokenError::IssuedInFuture(iat - expected.now_secs));
    }
    let nonce = text("nonce").map_err(|_| TokenError::Nonce)?;
    if !constant_time_eq(nonce.as_bytes(), expected.nonce.as_bytes()) {
        return Err(TokenError::Nonce);
    }
    let sub = text("sub")?;
    let display_name = ["preferred_username", "email"]
        .iter()
        .find_map(|c| claims.get(*c).and_then(|v| v.as_str()))
        .unwrap_or(sub)
        .to_string();
    Ok(Identity {
        subject: format!("{}|{sub}", expected.issuer),
        display_name,
        claims,
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ProviderConfig {
        ProviderConfig::from_form(
            "https://login.example.com/",
            "bakeoff",
            "groups",
            "ml-team = editor\nml-leads = admin\n",
            "none",
        )
        .unwrap()
    }

    #[test]
    fn the_form_is_checked_field_by_field() {
        let c = config();
        assert_eq!(c.issuer, "https://login.example.com");
        assert_eq!(c.role_map.get("ml-leads"), Some(&Role::Admin));
        assert_eq!(c.default_role, None);
        assert_eq!(c.role_map_text(), "ml-leads = admin\nml-team = editor\n");
        let err =
            ProviderConfig::from_form("http://login.example.com", "", "", "x = boss\nnothing", "root").unwrap_err();
        let fields: Vec<&str> = err.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["issuer", "client_id", "role_map", "role_map", "default_role"]);
        assert!(ProviderConfig::from_form("http://127.0.0.1:8080", "c", "", "", "viewer").is_ok());
    }

    #[test]
    fn the_highest_mapped_role_wins_and_unmapped_values_grant_nothing() {
        let c = config();
        let claims = serde_json::json!({"groups": ["ml-team", "ml-leads", "other"]});
        assert_eq!(c.mapped_role(&claims), Some(Role::Admin));
        assert_eq!(
            c.mapped_role(&serde_json::json!({"groups": "ml-team"})),
            Some(Role::Editor)
        );
        assert_eq!(c.mapped_role(&serde_json::json!({"groups": ["other"]})), None);
        assert_eq!(c.mapped_role(&serde_json::json!({})), None);
    }

    #[test]
    fn pkce_s256_matches_rfc_7636_appendix_b() {
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn a_discovery_document_of_another_issuer_or_without_s256_is_refused() {
        let c = config();
        let mut d = Discovery {
            issuer: "https://login.example.com".into(),
            authorization_endpoint: "https://login.example.com/auth".into(),
            token_endpoint: "https://login.example.com/token".into(),
            jwks_uri: "https://login.example.com/jwks".into(),
            code_challenge_methods_supported: vec!["S256".into()],
        };
        assert!(d.check(&c).is_ok());
        let url = authorization_url(
            &d,
            "bakeoff",
            "https://b.example/login/oidc/callback",
            "st",
            "no",
            "ver",
        );
        assert!(url.starts_with("https://login.example.com/auth?response_type=code&client_id=bakeoff&redirect_uri=https%3A%2F%2Fb.example%2Flogin%2Foidc%2Fcallback"), "{url}");
        assert!(url.contains("&state=st&nonce=no&code_challenge=") && url.ends_with("&code_challenge_method=S256"));
        d.code_challenge_methods_supported = vec!["plain".into()];
        assert!(d.check(&c).unwrap_err().contains("S256"));
        d.code_challenge_methods_supported.clear();
        d.issuer = "https://evil.example.com".into();
        assert!(d.check(&c).unwrap_err().contains("names issuer"));
        d.issuer = c.issuer.clone();
        d.token_endpoint = "http://login.example.com/token".into();
        assert!(d.check(&c).unwrap_err().contains("token_endpoint"));
    }

    /// The test provider's key (tests/fixtures/oidc) and its JWKS.
    fn signer() -> (ring::signature::RsaKeyPair, Jwks) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/oidc/provider-key.der.b64"
        );
        let der = base64::engine::general_purpose::STANDARD
            .decode(std::fs::read_to_string(path).unwrap().trim())
            .unwrap();
        let key = ring::signature::RsaKeyPair::from_der(&der).unwrap();
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(key.public());
        let jwk = Jwk {
            kty: "RSA".into(),
            kid: Some("k1".into()),
            use_: Some("sig".into()),
            alg: Some("RS256".into()),
            n: Some(URL_SAFE_NO_PAD.encode(&public.n)),
            e: Some(URL_SAFE_NO_PAD.encode(&public.e)),
        };
        (key, Jwks { keys: vec![jwk] })
    }

    fn signed(key: &ring::signature::RsaKeyPair, kid: &str, claims: serde_json::Value) -> String {
        let header = serde_json::json!({"alg": "RS256", "kid": kid});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut signature = vec![0u8; key.public().modulus_len()];
        key.sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            input.as_bytes(),
            &mut signature,
        )
        .unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    #[test]
    fn each_claim_is_checked_with_its_skew_and_several_audiences_need_azp() {
        let (key, jwks) = signer();
        let now = 1_800_000_000;
        let expected = Expected {
            issuer: "https://login.example.com",
            client_id: "bakeoff",
            nonce: "n-1",
            now_secs: now,
        };
        let claims = |patch: serde_json::Value| {
            let mut c = serde_json::json!({"iss": "https://login.example.com", "sub": "42", "aud": "bakeoff",
                "exp": now + 300, "iat": now, "nonce": "n-1", "email": "ana@corp.example"});
            for (k, v) in patch.as_object().unwrap() {
                c[k] = v.clone();
            }
            c
        };
        let check = |patch| verify_id_token(&signed(&key, "k1", claims(patch)), &jwks, expected);
        let ok = check(serde_json::json!({})).unwrap();
        assert_eq!(ok.subject, "https://login.example.com|42");
        assert_eq!(ok.display_name, "ana@corp.example");
        // Within the skew: accepted; beyond it: refused.
        assert!(check(serde_json::json!({"exp": now - 30})).is_ok());
        assert_eq!(
            check(serde_json::json!({"exp": now - 90})),
            Err(TokenError::Expired(90))
        );
        assert_eq!(
            check(serde_json::json!({"iat": now + 600})),
            Err(TokenError::IssuedInFuture(600))
        );
        // Several audiences: only with azp naming this client.
        let both = serde_json::json!(["bakeoff", "other"]);
        assert!(matches!(
            check(serde_json::json!({"aud": both})),
            Err(TokenError::WrongAudience(_))
        ));
        assert!(check(serde_json::json!({"aud": both, "azp": "bakeoff"})).is_ok());
        assert_eq!(check(serde_json::json!({"nonce": null})), Err(TokenError::Nonce));
        // A key id the set does not have; a payload changed after signing.
        let other = signed(&key, "k9", claims(serde_json::json!({})));
        assert!(matches!(
            verify_id_token(&other, &jwks, expected),
            Err(TokenError::UnknownKey(_))
        ));
        let token = signed(&key, "k1", claims(serde_json::json!({})));
        let mut parts: Vec<&str> = token.split('.').collect();
        let changed = URL_SAFE_NO_PAD.encode(claims(serde_json::json!({"sub": "1"})).to_string());
        parts[1] = &changed;
        assert_eq!(
            verify_id_token(&parts.join("."), &jwks, expected),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn a_token_that_is_not_an_rs256_jwt_is_refused_before_any_claim_is_read() {
        let jwks = Jwks::default();
        let expected = Expected {
            issuer: "https://login.example.com",
            client_id: "bakeoff",
            nonce: "n",
            now_secs: 1_800_000_000,
        };
        let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s);
        assert!(matches!(
            verify_id_token("a.b", &jwks, expected),
            Err(TokenError::Malformed(_))
        ));
        let none = format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(r#"{"iss":"x"}"#));
        assert_eq!(
            verify_id_token(&none, &jwks, expected),
            Err(TokenError::Algorithm("none".into()))
        );
        let hs = format!("{}.{}.c2ln", b64(r#"{"alg":"HS256"}"#), b64("{}"));
        assert_eq!(
            verify_id_token(&hs, &jwks, expected),
            Err(TokenError::Algorithm("HS256".into()))
        );
        let rs = format!("{}.{}.c2ln", b64(r#"{"alg":"RS256","kid":"k1"}"#), b64("{}"));
        assert!(matches!(
            verify_id_token(&rs, &jwks, expected),
            Err(TokenError::UnknownKey(_))
        ));
    }
}
