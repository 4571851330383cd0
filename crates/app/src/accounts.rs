//! Accounts use cases, shared by the web pages and `bakeoff user`: users and roles, passwords,
//! logins and sessions, API tokens. Every change is written to the audit log here, with the
//! acting user's name, so neither caller can forget it.
//!
//! Invariant kept: while any user exists, at least one of them is an active local admin (the
//! last admin with a password, not made by an OIDC sign-in, cannot be demoted, disabled or
//! removed), so the server can always be administered, even with its identity provider down.
use crate::domain::Timestamp;
use crate::domain::accounts::{self, AdminChange, ApiToken, Role, User};
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

/// Password hashing, bounded: argon2id takes 19 MiB and tens of milliseconds of CPU per
/// password by design, so at most [`HASHING_AT_ONCE`] run at once (memory stays below their sum)
/// and at most [`HASHING_QUEUED`] more wait for a turn; beyond that a request is refused with
/// [`AppError::Busy`] at once, before anything is counted or read (an anonymous flood of logins
/// costs the server neither memory nor a thread each).
struct Hashing {
    running: tokio::sync::Semaphore,
    admitted: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Passwords hashed or verified at once: the machine's cores, at most 4 (76 MiB).
pub static HASHING_AT_ONCE: std::sync::LazyLock<usize> =
    std::sync::LazyLock::new(|| std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 4));
/// Password checks that may wait for a turn besides those running.
pub const HASHING_QUEUED: usize = 32;
/// What a refused check tells the client to wait.
pub const HASHING_RETRY_AFTER_SECS: u64 = 1;

static HASHING: std::sync::LazyLock<Hashing> = std::sync::LazyLock::new(|| Hashing {
    running: tokio::sync::Semaphore::new(*HASHING_AT_ONCE),
    admitted: std::sync::Arc::new(tokio::sync::Semaphore::new(*HASHING_AT_ONCE + HASHING_QUEUED)),
});

/// A place in the hashing queue, taken before any other work of a request that will hash.
struct HashTurn(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit);

fn hash_turn() -> Result<HashTurn, AppError> {
    HASHING
        .admitted
        .clone()
        .try_acquire_owned()
        .map(HashTurn)
        .map_err(|_| AppError::Busy {
            retry_after_secs: HASHING_RETRY_AFTER_SECS,
        })
}

/// argon2id's working memory, one per hash running at once: taken by a hash, given back after,
/// never freed (so the memory of hashing stays [`HASHING_AT_ONCE`] × 19 MiB however many
/// passwords are checked, instead of the allocator keeping what each hash freed).
static MEMORY: std::sync::Mutex<Vec<accounts::HashMemory>> = std::sync::Mutex::new(Vec::new());

/// Runs `work` (argon2id, in one of the kept working memories) on a blocking thread once one of
/// the [`HASHING_AT_ONCE`] turns is free.
async fn hashing<T: Send + 'static>(
    _turn: &HashTurn,
    work: impl FnOnce(&mut accounts::HashMemory) -> T + Send + 'static,
) -> Result<T, AppError> {
    let _running = HASHING
        .running
        .acquire()
        .await
        .map_err(|e| AppError::Invalid(format!("hashing the password failed: {e}")))?;
    tokio::task::spawn_blocking(move || {
        let kept = MEMORY.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let mut memory = kept.unwrap_or_default();
        let done = work(&mut memory);
        MEMORY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(memory);
        done
    })
    .await
    .map_err(|e| AppError::Invalid(format!("hashing the password failed: {e}")))
}

/// argon2id off the async threads (it takes tens of milliseconds of CPU by design), bounded.
async fn hash(password: String) -> Result<String, AppError> {
    let turn = hash_turn()?;
    hashing(&turn, move |memory| accounts::hash_password_with(memory, &password)).await
}

/// Checks `password` against `hash`, or against the decoy hash when there is none (an unknown
/// name costs as much as a wrong password).
async fn verify(turn: &HashTurn, hash: Option<String>, password: String) -> Result<bool, AppError> {
    hashing(turn, move |memory| {
        let hash = hash.as_deref().unwrap_or_else(|| accounts::decoy_hash());
        accounts::verify_password_with(memory, hash, &password)
    })
    .await
}

fn checked_password(field: &str, raw: &str) -> Result<String, AppError> {
    let mut errors = FieldErrors::default();
    let password = accounts::new_password(&mut errors, field, raw);
    errors
        .into_result(password.unwrap_or_default())
        .map_err(AppError::Fields)
}

/// Who a terminal command acts as, for the audit log: the operating-system user (every
/// command that changes the database names it the same way).
pub fn terminal_actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "unknown".to_string());
    format!("{user} (terminal)")
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

/// Applies `change` unless it would leave no active admin among the users: checked and done in
/// one transaction by the store, so two admins demoting each other at the same moment leave one.
async fn keep_an_admin(store: &dyn Store, user: &User, change: AdminChange, what: &str) -> Result<(), AppError> {
    if store.change_user_keeping_an_admin(user.id, change).await? {
        Ok(())
    } else {
        Err(only_admin(user, what))
    }
}

fn only_admin(user: &User, what: &str) -> AppError {
    AppError::Invalid(format!(
        "{:?} is the only active admin: make another user an admin before you {what} it",
        user.username
    ))
}

/// Whether `user` is the only active admin now (a read, for refusing before other work; the
/// change itself is guarded by [`keep_an_admin`]).
async fn last_active_admin(store: &dyn Store, user: &User) -> Result<bool, AppError> {
    if user.role != Role::Admin || !user.is_active() {
        return Ok(false);
    }
    let admins = store
        .list_users()
        .await?
        .into_iter()
        .filter(|u| u.role == Role::Admin && u.is_active())
        .count();
    Ok(admins <= 1)
}

pub async fn set_role(store: &dyn Store, actor: &str, user: &User, role: Role) -> Result<User, AppError> {
    if role == user.role {
        return Ok(user.clone());
    }
    keep_an_admin(store, user, AdminChange::SetRole(role), "demote").await?;
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

/// An admin sets a new password for `user`: every session of the user ends and every API token
/// is revoked (whoever knew the old password, or took a token with it, is shut out), and the
/// failed logins counted for the name are forgotten.
pub async fn reset_password(store: &dyn Store, actor: &str, user: &User, password: &str) -> Result<(), AppError> {
    let password = checked_password("password", password)?;
    store.set_user_password(user.id, &hash(password).await?).await?;
    let ended = store.delete_user_sessions(user.id, None).await?;
    let revoked = revoked_tokens(store, user).await?;
    store.clear_user_login_failures(&user.username).await?;
    audit(
        store,
        actor,
        Action::UserPasswordReset,
        user_target(user),
        format!(
            "{ended} session(s) ended, {}; failed logins forgotten",
            tokens_text(&revoked)
        ),
    )
    .await
}

/// Revokes every active token of `user`; returns their ids.
async fn revoked_tokens(store: &dyn Store, user: &User) -> Result<Vec<i64>, AppError> {
    let active: Vec<i64> = store
        .list_api_tokens(Some(user.id))
        .await?
        .into_iter()
        .filter(|t| t.revoked_at.is_none())
        .map(|t| t.id)
        .collect();
    let mut revoked = Vec::with_capacity(active.len());
    for id in active {
        if store.revoke_api_token(id).await? {
            revoked.push(id);
        }
    }
    Ok(revoked)
}

/// "2 token(s) revoked (#3, #5)", for audit details.
fn tokens_text(ids: &[i64]) -> String {
    if ids.is_empty() {
        return "no token revoked".to_string();
    }
    let list: Vec<String> = ids.iter().map(|id| format!("#{id}")).collect();
    format!("{} token(s) revoked ({})", ids.len(), list.join(", "))
}

/// An admin (or `bakeoff user unlock`) forgets the failed logins counted for `user`, so the
/// name is no longer slowed from any address; audited. Returns how many counts were removed.
pub async fn unlock(store: &dyn Store, actor: &str, user: &User) -> Result<u64, AppError> {
    let cleared = store.clear_user_login_failures(&user.username).await?;
    audit(
        store,
        actor,
        Action::UserUnlocked,
        user_target(user),
        format!("{cleared} failed-login count(s) forgotten"),
    )
    .await?;
    Ok(cleared)
}

/// A user changes their own password, proving they know the current one. Their other sessions
/// end, `keep_session` (the hash of the session making the change) stays, and every API token
/// of the account is revoked (a token taken with the old password must not outlive it).
/// Returns how many tokens were revoked. `actor` is who the request acts as (it names the token
/// when made with one).
pub async fn change_own_password(
    store: &dyn Store,
    actor: &str,
    user: &User,
    current: &str,
    new: &str,
    keep_session: Option<&str>,
) -> Result<usize, AppError> {
    let turn = hash_turn()?;
    let stored = store.password_hash(user.id).await?.unwrap_or_default();
    if !verify(&turn, Some(stored), current.to_string()).await? {
        let mut errors = FieldErrors::default();
        errors.add("current_password", "is not your current password");
        return Err(AppError::Fields(errors));
    }
    let new = checked_password("new_password", new)?;
    let new_hash = hashing(&turn, move |memory| accounts::hash_password_with(memory, &new)).await?;
    drop(turn);
    store.set_user_password(user.id, &new_hash).await?;
    let ended = store.delete_user_sessions(user.id, keep_session).await?;
    let revoked = revoked_tokens(store, user).await?;
    audit(
        store,
        actor,
        Action::UserPasswordChanged,
        user_target(user),
        format!("{ended} other session(s) ended, {}", tokens_text(&revoked)),
    )
    .await?;
    Ok(revoked.len())
}

/// Disables (or re-enables) an account. A disabled user's sessions end and its tokens stop
/// working (they are refused while the account is disabled).
pub async fn set_disabled(store: &dyn Store, actor: &str, user: &User, disabled: bool) -> Result<(), AppError> {
    if disabled != user.is_active() {
        return Ok(());
    }
    if disabled {
        keep_an_admin(store, user, AdminChange::Disable, "disable").await?;
    } else {
        store.set_user_disabled(user.id, false).await?;
    }
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
    // Refused before anything ends (the store checks again as it removes, in a transaction).
    if last_active_admin(store, user).await? {
        return Err(only_admin(user, "remove"));
    }
    let ended = store.delete_user_sessions(user.id, None).await?;
    let revoked = store
        .list_api_tokens(Some(user.id))
        .await?
        .iter()
        .filter(|t| t.revoked_at.is_none())
        .count();
    keep_an_admin(store, user, AdminChange::Remove, "remove").await?;
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

/// Creates an API token for `user`, scoped to `role` (default: the user's role; never above it),
/// as the terminal or an admin does. Returns the token and its secret, which is shown once and
/// never stored.
pub async fn create_token(
    store: &dyn Store,
    actor: &str,
    user: &User,
    name: &str,
    role: Option<Role>,
) -> Result<(ApiToken, String), AppError> {
    create_token_capped(store, actor, user, name, role, Role::Admin).await
}

/// Creates an API token for `user` on a request that acts with role `requester` (a session's
/// role, or a token's effective role): the token can do no more than the request that made it,
/// nor than its user ([`accounts::token_role_cap`]); by default it gets that cap.
pub async fn create_token_capped(
    store: &dyn Store,
    actor: &str,
    user: &User,
    name: &str,
    role: Option<Role>,
    requester: Role,
) -> Result<(ApiToken, String), AppError> {
    let mut errors = FieldErrors::default();
    let Some(name) = accounts::token_name(&mut errors, "name", name) else {
        return Err(AppError::Fields(errors));
    };
    let cap = accounts::token_role_cap(user.role, requester);
    let role = role.unwrap_or(cap);
    if role > user.role {
        return Err(AppError::Invalid(format!(
            "a token cannot do more than its user: {:?} is {}, the token asked for {role}",
            user.username, user.role
        )));
    }
    if role > cap {
        return Err(AppError::Forbidden(format!(
            "A token cannot do more than the request that creates it: this request acts as {requester} \
             (its own token's role), and the new token asked for {role}. Nothing was created. Log in, or use a \
             token with that role, to create it."
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

/// Revokes token `id`; with `owner`, only if it belongs to that user (a user revoking their
/// own). `via` is the token the request was made with, if any: a token scoped below its user
/// revokes only itself ([`accounts::token_may_revoke`]).
pub async fn revoke_token(
    store: &dyn Store,
    actor: &str,
    id: i64,
    owner: Option<&User>,
    via: Option<&ApiToken>,
) -> Result<(), AppError> {
    let token = store
        .list_api_tokens(owner.map(|u| u.id))
        .await?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| AppError::NotFound(format!("token #{id}")))?;
    if let (Some(user), Some(acting)) = (owner, via)
        && !accounts::token_may_revoke(user, acting, id)
    {
        return Err(AppError::Forbidden(format!(
            "Token #{} is scoped to {}, below its user's role ({}), so it may revoke only itself, not token #{id}. \
             Nothing was changed. Log in to manage your other tokens.",
            acting.id, acting.role, user.role
        )));
    }
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

/// Revokes every active token of `user`; returns how many. The audit entry names each one.
pub async fn revoke_user_tokens(store: &dyn Store, actor: &str, user: &User) -> Result<u64, AppError> {
    let revoked = revoked_tokens(store, user).await?;
    if !revoked.is_empty() {
        audit(
            store,
            actor,
            Action::TokenRevoked,
            format!("every token of user {:?}", user.username),
            tokens_text(&revoked),
        )
        .await?;
    }
    Ok(revoked.len() as u64)
}

/// What a login attempt came to.
#[derive(Debug)]
pub enum Login {
    /// Logged in: the new session's secret (for the cookie; only its hash is stored).
    Session { user: User, secret: String },
    /// Too many failures for this name or address: try again after this many ms.
    Throttled { wait_ms: i64 },
    /// Wrong name or password, or a disabled account (not told apart, on purpose).
    Refused,
}

/// Who tries to log in, besides the name: the client's address and, when the browser holds a
/// valid device cookie for the name (from an earlier successful login), that cookie's id.
#[derive(Debug, Clone, Copy)]
pub struct LoginFrom<'a> {
    pub address: &'a str,
    pub device: Option<&'a str>,
}

/// Checks a login. The attempt takes a place in the bounded hashing queue first (else
/// [`AppError::Busy`]), then is counted as a failure under every throttle key before the
/// password is checked — atomically, so a burst of parallel attempts is counted one by one —
/// unless a key says it must wait (see `accounts::login_throttle_keys`); a success takes the
/// count back. Counts live in the database, so the backoff survives a restart; an unknown name
/// costs as much time as a wrong password. Throttled attempts are audited (at most once a
/// minute per key).
pub async fn login(store: &dyn Store, username: &str, password: &str, from: LoginFrom<'_>) -> Result<Login, AppError> {
    let turn = hash_turn()?;
    let name = accounts::login_name(username);
    let now = Timestamp::now();
    let keys = accounts::login_throttle_keys(&name, from.address, from.device);
    if let accounts::Reservation::Throttled {
        key,
        wait_ms,
        audit: refused,
    } = store.reserve_login_attempt(&keys, now).await?
    {
        tracing::warn!(username = %name, address = from.address, wait_ms, "login throttled");
        if let Some(refused) = refused {
            let limited = match keys[key].limit_of {
                accounts::KeyKind::NameAndAddress => format!("this name from {}", from.address),
                accounts::KeyKind::TrustedBrowser => "this name from a browser that logged in as it before".to_string(),
                accounts::KeyKind::Account => "this name from every address".to_string(),
                accounts::KeyKind::Address => format!("every name from {}", from.address),
            };
            audit(
                store,
                "login form",
                Action::LoginThrottled,
                format!("user {name:?}"),
                format!(
                    "from {}: too many failed logins for {limited}; {refused} attempt(s) refused so far, the next \
                     may be made in {} s",
                    from.address,
                    (wait_ms + 999) / 1000
                ),
            )
            .await?;
        }
        return Ok(Login::Throttled { wait_ms });
    }
    prune(store, now).await;
    let user = store.find_user(&name).await?.filter(User::is_active);
    let stored = match &user {
        Some(u) => store.password_hash(u.id).await?,
        None => None,
    };
    let matches = verify(&turn, stored, password.to_string()).await?;
    drop(turn);
    let Some(user) = user.filter(|_| matches) else {
        tracing::warn!(username = %name, address = from.address, "failed login");
        return Ok(Login::Refused);
    };
    store.settle_login_success(&keys).await?;
    let secret = accounts::new_secret("");
    store
        .create_session(&accounts::secret_hash(&secret), user.id, now)
        .await?;
    audit(
        store,
        &user.username,
        Action::LoggedIn,
        user_target(&user),
        format!("from {}", from.address),
    )
    .await?;
    Ok(Login::Session { user, secret })
}

/// Deletes failed-login counts untouched for a day (a flood of unknown names leaves a row each,
/// which must not stay forever), on every attempt that gets checked (one indexed delete; the
/// attempts that get that far are bounded by the hashing queue). A failure to prune is logged,
/// never the login's.
async fn prune(store: &dyn Store, now: Timestamp) {
    match store
        .prune_login_failures(Timestamp(now.0 - accounts::LOGIN_FAILURES_KEPT_MS))
        .await
    {
        Ok(0) => {}
        Ok(pruned) => tracing::info!(pruned, "old failed-login counts deleted"),
        Err(e) => tracing::warn!(error = %e, "pruning old failed-login counts failed"),
    }
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
