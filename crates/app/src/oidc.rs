//! Sign-in through the team's OpenID Connect provider (the rules are `domain::oidc`'s):
//! an admin saves the provider (audited, its client secret sealed); a browser is sent to the
//! provider with a fresh state, nonce and PKCE verifier kept under the state's hash; when it
//! comes back, the login is taken (once), the code exchanged at the token endpoint with the
//! verifier, the ID token verified against the provider's JWKS, and the account found by its
//! subject or made — with the role its claims map to, or the default, or disabled until an
//! admin gives it one. Local accounts keep working beside it (see `accounts`).
use std::time::Duration;

use crate::AppError;
use crate::domain::Timestamp;
use crate::domain::accounts::{self, Role, User};
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::oidc::{self, Discovery, Expected, Identity, Jwks, PendingLogin, ProviderConfig};
use crate::store::Store;

/// How long one call to the provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// The provider form as submitted (the secret blank: keep the stored one).
#[derive(Debug, Clone, Default)]
pub struct ProviderForm {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    pub role_claim: String,
    pub role_map: String,
    pub default_role: String,
}

/// Checks and saves the provider (an admin's: the caller checks the role), audited without
/// its secret.
pub async fn save_provider(store: &dyn Store, form: &ProviderForm, actor: &str) -> Result<ProviderConfig, AppError> {
    let config = ProviderConfig::from_form(
        &form.issuer,
        &form.client_id,
        &form.role_claim,
        &form.role_map,
        &form.default_role,
    )
    .map_err(AppError::Fields)?;
    let secret = Some(form.client_secret.trim()).filter(|s| !s.is_empty());
    store.save_oidc_provider(&config, secret, actor).await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::OidcProviderSaved,
            target: format!("OIDC provider {}", config.issuer),
            detail: format!(
                "client {:?}{}; roles from {}; new users: {}",
                config.client_id,
                if secret.is_some() { ", client secret sealed" } else { "" },
                if config.role_claim.is_empty() {
                    "no claim".to_string()
                } else {
                    format!(
                        "claim {:?} ({} values mapped)",
                        config.role_claim,
                        config.role_map.len()
                    )
                },
                config
                    .default_role
                    .map_or("disabled until an admin gives a role", |r| r.as_str()),
            ),
        })
        .await?;
    Ok(config)
}

/// Removes the provider, audited; its accounts stay (and can be given passwords).
pub async fn remove_provider(store: &dyn Store, actor: &str) -> Result<(), AppError> {
    if store.delete_oidc_provider().await? {
        store
            .append_audit(&NewAuditEntry {
                actor: actor.to_string(),
                action: Action::OidcProviderRemoved,
                target: "OIDC provider".into(),
                detail: String::new(),
            })
            .await?;
    }
    Ok(())
}

/// The HTTP client used with the provider, built once: no redirects (an endpoint answers
/// itself), every call bounded.
pub fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::LazyLock<reqwest::Client> = std::sync::LazyLock::new(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .expect("building the OIDC client")
    });
    &CLIENT
}

/// A refusal of a sign-in, in words for the login page (never the token or a secret).
fn refused(why: impl Into<String>) -> AppError {
    AppError::Invalid(why.into())
}

async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    what: &str,
) -> Result<T, AppError> {
    let response = client
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|_| refused(format!("the identity provider's {what} could not be read (no answer)")))?;
    if !response.status().is_success() {
        return Err(refused(format!(
            "the identity provider's {what} answered {}",
            response.status()
        )));
    }
    response
        .json()
        .await
        .map_err(|_| refused(format!("the identity provider's {what} is not the JSON expected")))
}

async fn discovery(client: &reqwest::Client, config: &ProviderConfig) -> Result<Discovery, AppError> {
    let found: Discovery = get_json(client, &config.discovery_url(), "discovery document").await?;
    found.check(config).map_err(refused)?;
    Ok(found)
}

/// The redirect URI registered with the provider: the public URL's callback.
pub fn redirect_uri(public_origin: &str) -> String {
    format!("{}{}", public_origin.trim_end_matches('/'), oidc::CALLBACK_PATH)
}

/// Starts a sign-in: returns the state (for the browser's cookie) and the provider's URL to
/// send the browser to. NotFound when no provider is configured.
pub async fn begin(
    store: &dyn Store,
    client: &reqwest::Client,
    public_origin: &str,
    return_to: &str,
) -> Result<(String, String), AppError> {
    let (config, _) = store
        .oidc_provider()
        .await?
        .ok_or_else(|| AppError::NotFound("an identity provider (an admin sets one on the Users page)".into()))?;
    let found = discovery(client, &config).await?;
    let state = accounts::new_secret("");
    let login = PendingLogin {
        nonce: accounts::new_secret(""),
        pkce_verifier: accounts::new_secret(""),
        return_to: return_to.to_string(),
        created_at: Timestamp::now(),
    };
    store.create_oidc_login(&accounts::secret_hash(&state), &login).await?;
    let url = oidc::authorization_url(
        &found,
        &config.client_id,
        &redirect_uri(public_origin),
        &state,
        &login.nonce,
        &login.pkce_verifier,
    );
    Ok((state, url))
}

/// How a sign-in ended.
#[derive(Debug)]
pub enum SignedIn {
    /// A session for the user; the browser goes to `return_to`.
    Session {
        user: User,
        secret: String,
        return_to: String,
    },
    /// The account exists but waits, disabled, for an admin to give it a role.
    Waiting { username: String },
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    id_token: Option<String>,
}

/// Finishes a sign-in when the provider sends the browser back with `state` and `code`;
/// `browser_state` is the state cookie of the browser that began it (a login started in
/// another browser is refused: login CSRF). Each refusal says which check failed.
pub async fn finish(
    store: &dyn Store,
    client: &reqwest::Client,
    public_origin: &str,
    state: &str,
    code: &str,
    browser_state: Option<&str>,
    address: &str,
) -> Result<SignedIn, AppError> {
    if browser_state != Some(state) {
        return Err(refused(
            "this sign-in was not started in this browser (its state does not match); start again",
        ));
    }
    let login = store
        .take_oidc_login(&accounts::secret_hash(state))
        .await?
        .ok_or_else(|| refused("this sign-in is unknown or was already used; start again"))?;
    let now = Timestamp::now();
    if now.0 - login.created_at.0 > oidc::LOGIN_MAX_MS {
        return Err(refused("this sign-in took too long; start again"));
    }
    let (config, _) = store
        .oidc_provider()
        .await?
        .ok_or_else(|| refused("no identity provider is configured any more"))?;
    let found = discovery(client, &config).await?;
    let secret = store.oidc_client_secret().await?;
    let redirect = redirect_uri(public_origin);
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect.as_str()),
        ("code_verifier", login.pkce_verifier.as_str()),
        ("client_id", config.client_id.as_str()),
    ];
    let mut request = client.post(&found.token_endpoint).header("accept", "application/json");
    // client_secret_basic (RFC 6749 §2.3.1), the method every provider supports; a public
    // client (no secret) relies on PKCE alone.
    if let Some(secret) = &secret {
        request = request.basic_auth(form_encode(&config.client_id), Some(form_encode(secret)));
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let response = request
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|_| refused("the identity provider's token endpoint did not answer"))?;
    if !response.status().is_success() {
        return Err(refused(format!(
            "the identity provider refused the code ({}): start again",
            response.status()
        )));
    }
    let tokens: TokenResponse = response
        .json()
        .await
        .map_err(|_| refused("the identity provider's token answer is not JSON"))?;
    let id_token = tokens
        .id_token
        .ok_or_else(|| refused("the identity provider sent no ID token"))?;
    let jwks: Jwks = get_json(client, &found.jwks_uri, "key set (JWKS)").await?;
    let identity = oidc::verify_id_token(
        &id_token,
        &jwks,
        Expected {
            issuer: &config.issuer,
            client_id: &config.client_id,
            nonce: &login.nonce,
            now_secs: now.0.div_euclid(1000),
        },
    )
    .map_err(|e| {
        tracing::warn!(error = %e, address, "an OIDC sign-in was refused");
        refused(format!("sign-in refused: {e}"))
    })?;
    account_of(store, &config, &identity, login.return_to, address).await
}

/// The account an identity signs in as: found by its subject (its role following the mapped
/// claim when one maps), or made on the first sign-in.
async fn account_of(
    store: &dyn Store,
    config: &ProviderConfig,
    identity: &Identity,
    return_to: String,
    address: &str,
) -> Result<SignedIn, AppError> {
    let mapped = config.mapped_role(&identity.claims);
    let user = match store.oidc_user(&identity.subject).await? {
        Some(user) => {
            if let Some(role) = mapped
                && role != user.role
                && user.is_active()
            {
                store.set_user_role(user.id, role).await?;
                audit_role(store, &user, role, "its provider's claim maps to it now").await?;
            }
            store.get_user(user.id).await?.unwrap_or(user)
        }
        None => {
            let role = mapped.or(config.default_role);
            let username = free_name(store, &identity.display_name).await?;
            let id = store
                .create_oidc_user(
                    &username,
                    role.unwrap_or(Role::Viewer),
                    role.is_none(),
                    &identity.subject,
                )
                .await?;
            let user = store
                .get_user(id)
                .await?
                .ok_or_else(|| AppError::NotFound(format!("user #{id}")))?;
            store
                .append_audit(&NewAuditEntry {
                    actor: format!("OIDC sign-in ({})", config.issuer),
                    action: Action::UserCreated,
                    target: format!("user {:?}", user.username),
                    detail: match role {
                        Some(r) if mapped.is_some() => {
                            format!("first sign-in; role {r} from claim {:?}", config.role_claim)
                        }
                        Some(r) => format!("first sign-in; the default role {r}"),
                        None => "first sign-in; disabled until an admin gives a role".into(),
                    },
                })
                .await?;
            user
        }
    };
    if !user.is_active() {
        return Ok(SignedIn::Waiting {
            username: user.username,
        });
    }
    let secret = accounts::new_secret("");
    store
        .create_session(&accounts::secret_hash(&secret), user.id, Timestamp::now())
        .await?;
    store
        .append_audit(&NewAuditEntry {
            actor: user.username.clone(),
            action: Action::LoggedIn,
            target: format!("user {:?}", user.username),
            detail: format!("from {address}, through {}", config.issuer),
        })
        .await?;
    Ok(SignedIn::Session {
        user,
        secret,
        return_to,
    })
}

async fn audit_role(store: &dyn Store, user: &User, role: Role, why: &str) -> Result<(), AppError> {
    store
        .append_audit(&NewAuditEntry {
            actor: "OIDC sign-in".into(),
            action: Action::UserRoleChanged,
            target: format!("user {:?}", user.username),
            detail: format!("{} → {role}: {why}", user.role),
        })
        .await?;
    Ok(())
}

/// A login name for a new account: the provider's name made valid, and made unique with a
/// number when a local account (or another subject) has it.
async fn free_name(store: &dyn Store, wanted: &str) -> Result<String, AppError> {
    let base: String = accounts::login_name(wanted)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(60)
        .collect();
    let base = if base.is_empty() { "user".to_string() } else { base };
    let mut name = base.clone();
    let mut n = 2;
    while store.find_user(&name).await?.is_some() {
        name = format!("{base}-{n}");
        n += 1;
    }
    Ok(name)
}

/// `application/x-www-form-urlencoded` of a client id or secret, as client_secret_basic asks.
fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
