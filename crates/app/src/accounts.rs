//! Accounts use cases, shared by the web pages and `bakeoff user`: users and roles, passwords,
//! logins and sessions, API tokens. Every change is written to the audit log here, with the
//! acting user's name, so neither caller can forget it.
//!
//! Invariant kept: while any user exists, at least one of them is an active admin (the last
//! admin cannot be demoted, disabled or removed), so the server can always be administered.
use crate::domain::Timestamp;
use crate::domain::accounts::{self, ApiToken, Role, User};
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::validation::FieldErrors;
use crate::store::Store;

use super::AppError;

/// Appends one audit entry.
async fn audit(store: &dyn Store, actor: &str, action: Action, target: String, detail: String) -> Result<(), AppError> {
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action,
            target,
            detail,
        })
        .await?;
    Ok(())
}

fn user_target(user: &User) -> String {
    format!("user {:?}", user.username)
}

/// argon2id off the async threads (it takes tens of milliseconds of CPU by design).
async fn hash(password: String) -> Result<String, AppError> {
    tokio::task::spawn_blocking(move || accounts::hash_password(&password))
        .await
        .map_err(|e| AppError::Invalid(format!("hashing the password failed: {e}")))
}

async fn verify(hash: String, password: String) -> bool {
    tokio::task::spawn_blocking(move || accounts::verify_password(&hash, &password))
        .await
        .unwrap_or(false)
}

fn checked_password(field: &str, raw: &str) -> Result<String, AppError> {
    let mut errors = FieldErrors::default();
    let password = accounts::new_password(&mut errors, field, raw);
    errors
        .into_result(password.unwrap_or_default())
        .map_err(AppError::Fields)
}

/// The user named `username` (any case), or NotFound.
pub async fn user_named(store: &dyn Store, username: &str) -> Result<User, AppError> {
    store
        .find_user(&username.trim().to_lowercase())
        .await?
        .ok_or_else(|| AppError::NotFound(format!("user {:?}", username.trim())))
}

pub async fn user_by_id(store: &dyn Store, id: i64) -> Result<User, AppError> {
    store
        .get_user(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("user #{id}")))
}

/// Creates a user. The first user of a server must be an admin (someone must be able to
/// manage the others).
pub async fn add_user(
    store: &dyn Store,
    actor: &str,
    username: &str,
    role: Role,
    password: &str,
) -> Result<User, AppError> {
    let mut errors = FieldErrors::default();
    let name = accounts::username(&mut errors, "username", username);
    let password = accounts::new_password(&mut errors, "password", password);
    let (Some(name), Some(password)) = (name, password) else {
        return Err(AppError::Fields(errors));
    };
    if role != Role::Admin && store.count_users().await? == 0 {
        return Err(AppError::Invalid(format!(
            "the first user must be an admin (--role admin), so that someone can manage the others; \
             {name:?} would be {role}"
        )));
    }
    let id = store
        .create_user(&name, role, &hash(password).await?)
        .await
        .map_err(|e| match e {
            crate::store::StoreError::Conflict(why) => AppError::Invalid(why),
            e => AppError::Store(e),
        })?;
    let user = user_by_id(store, id).await?;
    audit(
        store,
        actor,
        Action::UserCreated,
        user_target(&user),
        format!("role {role}"),
    )
    .await?;
    Ok(user)
}

/// Refuses a change that would leave no active admin among the users.
async fn keep_an_admin(store: &dyn Store, user: &User, what: &str) -> Result<(), AppError> {
    if user.role != Role::Admin || !user.is_active() {
        return Ok(());
    }
    let admins = store
        .list_users()
        .await?
        .into_iter()
        .filter(|u| u.role == Role::Admin && u.is_active())
        .count();
    if admins <= 1 {
        return Err(AppError::Invalid(format!(
            "{:?} is the only active admin: make another user an admin before you {what} it",
            user.username
        )));
    }
    Ok(())
}

pub async fn set_role(store: &dyn Store, actor: &str, user: &User, role: Role) -> Result<User, AppError> {
    if role == user.role {
        return Ok(user.clone());
    }
    if role < Role::Admin {
        keep_an_admin(store, user, "demote").await?;
    }
    store.set_user_role(user.id, role).await?;
    audit(
        store,
        actor,
        Action::UserRoleChanged,
        user_target(user),
        format!("{} → {role}", user.role),
    )
    .await?;
    user_by_id(store, user.id).await
}

/// An admin sets a new password for `user`: every session of the user ends (whoever knew the
/// old password is logged out).
pub async fn reset_password(store: &dyn Store, actor: &str, user: &User, password: &str) -> Result<(), AppError> {
    let password = checked_password("password", password)?;
    store.set_user_password(user.id, &hash(password).await?).await?;
    let ended = store.delete_user_sessions(user.id, None).await?;
    audit(
        store,
        actor,
        Action::UserPasswordReset,
        user_target(user),
        format!("{ended} session(s) ended"),
    )
    .await
}

/// A user changes their own password, proving they know the current one. Their other sessions
/// end; `keep_session` (the hash of the session making the change) stays.
pub async fn change_own_password(
    store: &dyn Store,
    user: &User,
    current: &str,
    new: &str,
    keep_session: Option<&str>,
) -> Result<(), AppError> {
    let stored = store.password_hash(user.id).await?.unwrap_or_default();
    if !verify(stored, current.to_string()).await {
        let mut errors = FieldErrors::default();
        errors.add("current_password", "is not your current password");
        return Err(AppError::Fields(errors));
    }
    let new = checked_password("new_password", new)?;
    store.set_user_password(user.id, &hash(new).await?).await?;
    let ended = store.delete_user_sessions(user.id, keep_session).await?;
    audit(
        store,
        &user.username,
        Action::UserPasswordChanged,
        user_target(user),
        format!("{ended} other session(s) ended"),
    )
    .await
}

/// Disables (or re-enables) an account. A disabled user's sessions end and its tokens stop
/// working (they are refused while the account is disabled).
pub async fn set_disabled(store: &dyn Store, actor: &str, user: &User, disabled: bool) -> Result<(), AppError> {
    if disabled != user.is_active() {
        return Ok(());
    }
    if disabled {
        keep_an_admin(store, user, "disable").await?;
    }
    store.set_user_disabled(user.id, disabled).await?;
    let (action, detail) = if disabled {
        let ended = store.delete_user_sessions(user.id, None).await?;
        (Action::UserDisabled, format!("{ended} session(s) ended"))
    } else {
        (Action::UserEnabled, String::new())
    };
    audit(store, actor, action, user_target(user), detail).await
}

/// Removes a user: its sessions end and its tokens are revoked first (so the audit entry says
/// how many), then the account goes; the audit log keeps its name. `by` is the acting account
/// (None from the terminal): nobody removes themselves, nor the last active admin.
pub async fn remove_user(store: &dyn Store, actor: &str, by: Option<&User>, user: &User) -> Result<(), AppError> {
    if by.is_some_and(|me| me.id == user.id) {
        return Err(AppError::Invalid(format!(
            "you cannot remove yourself ({:?}): another admin removes your account",
            user.username
        )));
    }
    keep_an_admin(store, user, "remove").await?;
    let ended = store.delete_user_sessions(user.id, None).await?;
    let revoked = store.revoke_user_tokens(user.id).await?;
    store.delete_user(user.id).await?;
    audit(
        store,
        actor,
        Action::UserRemoved,
        user_target(user),
        format!(
            "was {}; {ended} session(s) ended, {revoked} token(s) revoked",
            user.role
        ),
    )
    .await
}

/// Creates an API token for `user`, scoped to `role` (default: the user's role; never above it).
/// Returns the token and its secret, which is shown once and never stored.
pub async fn create_token(
    store: &dyn Store,
    actor: &str,
    user: &User,
    name: &str,
    role: Option<Role>,
) -> Result<(ApiToken, String), AppError> {
    let mut errors = FieldErrors::default();
    let Some(name) = accounts::token_name(&mut errors, "name", name) else {
        return Err(AppError::Fields(errors));
    };
    let role = role.unwrap_or(user.role);
    if role > user.role {
        return Err(AppError::Invalid(format!(
            "a token cannot do more than its user: {:?} is {}, the token asked for {role}",
            user.username, user.role
        )));
    }
    if !user.is_active() {
        return Err(AppError::Invalid(format!("{:?} is disabled", user.username)));
    }
    let secret = accounts::new_secret(accounts::TOKEN_PREFIX);
    let id = store
        .create_api_token(user.id, &name, role, &accounts::secret_hash(&secret))
        .await?;
    audit(
        store,
        actor,
        Action::TokenCreated,
        format!("token #{id} {name:?} of user {:?}", user.username),
        format!("role {role}"),
    )
    .await?;
    let token = store
        .list_api_tokens(Some(user.id))
        .await?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| AppError::NotFound(format!("token #{id}")))?;
    Ok((token, secret))
}

/// Revokes token `id`; with `owner`, only if it belongs to that user (a user revoking their own).
pub async fn revoke_token(store: &dyn Store, actor: &str, id: i64, owner: Option<i64>) -> Result<(), AppError> {
    let token = store
        .list_api_tokens(owner)
        .await?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| AppError::NotFound(format!("token #{id}")))?;
    if store.revoke_api_token(id).await? {
        audit(
            store,
            actor,
            Action::TokenRevoked,
            format!("token #{id} {:?} of user {:?}", token.name, token.username),
            String::new(),
        )
        .await?;
    }
    Ok(())
}

/// Revokes every active token of `user`; returns how many.
pub async fn revoke_user_tokens(store: &dyn Store, actor: &str, user: &User) -> Result<u64, AppError> {
    let n = store.revoke_user_tokens(user.id).await?;
    if n > 0 {
        audit(
            store,
            actor,
            Action::TokenRevoked,
            format!("every token of user {:?}", user.username),
            format!("{n} token(s)"),
        )
        .await?;
    }
    Ok(n)
}

/// What a login attempt came to.
#[derive(Debug)]
pub enum Login {
    /// Logged in: the new session's secret (for the cookie; only its hash is stored).
    Session { user: User, secret: String },
    /// Too many failures for this name from this address: try again after this many ms.
    Throttled { wait_ms: i64 },
    /// Wrong name or password, or a disabled account (not told apart, on purpose).
    Refused,
}

/// Checks a login. Failures are counted per name and address in the database, so the backoff
/// (see `accounts::login_wait`) survives a restart; an unknown name costs as much time as a
/// wrong password.
pub async fn login(store: &dyn Store, username: &str, password: &str, address: &str) -> Result<Login, AppError> {
    let name: String = username.trim().to_lowercase().chars().take(64).collect();
    let now = Timestamp::now();
    if let Some((failures, last)) = store.login_failures(&name, address).await?
        && let Some(wait_ms) = accounts::login_wait(failures, last, now)
    {
        return Ok(Login::Throttled { wait_ms });
    }
    let user = store.find_user(&name).await?.filter(User::is_active);
    let stored = match &user {
        Some(u) => store.password_hash(u.id).await?,
        None => None,
    };
    let matches = verify(
        stored.unwrap_or_else(|| accounts::decoy_hash().to_string()),
        password.to_string(),
    )
    .await;
    let Some(user) = user.filter(|_| matches) else {
        let failures = store.record_login_failure(&name, address, now).await?;
        tracing::warn!(username = %name, address, failures, "failed login");
        return Ok(Login::Refused);
    };
    store.clear_login_failures(&name, address).await?;
    let secret = accounts::new_secret("");
    store
        .create_session(&accounts::secret_hash(&secret), user.id, now)
        .await?;
    audit(
        store,
        &user.username,
        Action::LoggedIn,
        user_target(&user),
        format!("from {address}"),
    )
    .await?;
    Ok(Login::Session { user, secret })
}

/// Ends a session server-side (its cookie is useless afterwards).
pub async fn logout(store: &dyn Store, user: &User, session_hash: &str) -> Result<(), AppError> {
    store.delete_session(session_hash).await?;
    audit(
        store,
        &user.username,
        Action::LoggedOut,
        user_target(user),
        String::new(),
    )
    .await
}

/// On a server's first start with no user: creates the admin from a password given in the
/// environment (`BAKEOFF_ADMIN_PASSWORD`, name `BAKEOFF_ADMIN_USER`). None when users exist.
pub async fn first_admin(store: &dyn Store, username: &str, password: &str) -> Result<Option<User>, AppError> {
    if store.count_users().await? > 0 {
        return Ok(None);
    }
    add_user(
        store,
        "bakeoff serve (first start, BAKEOFF_ADMIN_PASSWORD)",
        username,
        Role::Admin,
        password,
    )
    .await
    .map(Some)
}
