//! Account queries (users, login sessions, API tokens, failed-login counts), written once for
//! both backends: the `*_queries!` macros expand to the methods of `UserStore` in `lib.rs`
//! (`impl_store!`). Sessions and tokens are looked up by the SHA-256 of their secret; the secret
//! itself is never stored.

/// Columns of a user, in `user_from_row` order (the `u.` alias is the users table).
macro_rules! user_columns {
    () => {
        "u.id, u.username, u.role, u.created_at, u.disabled_at"
    };
}
pub(crate) use user_columns;

/// Columns of a token with its user's name, in `token_from_row` order (`t.` tokens, `u.` users).
macro_rules! token_columns {
    () => {
        "t.id, t.user_id, u.username, t.name, t.role, t.created_at, t.last_used_at, t.revoked_at"
    };
}
pub(crate) use token_columns;

use crate::domain::Timestamp;
use crate::domain::accounts::{ApiToken, Role, User};

use super::{Result, StoreError};

pub(crate) type UserRow = (i64, String, String, i64, Option<i64>);
pub(crate) type TokenRow = (i64, i64, String, String, String, i64, Option<i64>, Option<i64>);

fn role(stored: &str) -> Result<Role> {
    Role::parse(stored).ok_or_else(|| StoreError::Corrupt(format!("unknown role {stored:?}")))
}

pub(crate) fn user_from_row((id, username, role_name, created_at, disabled_at): UserRow) -> Result<User> {
    Ok(User {
        id,
        username,
        role: role(&role_name)?,
        created_at: Timestamp(created_at),
        disabled_at: disabled_at.map(Timestamp),
    })
}

pub(crate) fn token_from_row(
    (id, user_id, username, name, role_name, created_at, last_used_at, revoked_at): TokenRow,
) -> Result<ApiToken> {
    Ok(ApiToken {
        id,
        user_id,
        username,
        name,
        role: role(&role_name)?,
        created_at: Timestamp(created_at),
        last_used_at: last_used_at.map(Timestamp),
        revoked_at: revoked_at.map(Timestamp),
    })
}

pub(crate) fn user_not_found(id: i64) -> StoreError {
    StoreError::NotFound(format!("user #{id}"))
}

/// `Ok` when an UPDATE/DELETE of user `id` touched a row.
pub(crate) fn one_user(rows_affected: u64, id: i64) -> Result<()> {
    if rows_affected == 0 {
        Err(user_not_found(id))
    } else {
        Ok(())
    }
}

macro_rules! user_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self))]
        fn count_users(&self) -> StoreFuture<'_, i64> {
            Box::pin(async move { Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users").fetch_one(self.pool()).await?) })
        }

        #[tracing::instrument(level = "debug", skip(self, password_hash))]
        fn create_user<'a>(&'a self, username: &'a str, role: Role, password_hash: &'a str) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                sqlx::query_scalar(
                    "INSERT INTO users (username, role, password_hash, created_at) VALUES ($1, $2, $3, $4) RETURNING id",
                )
                .bind(username)
                .bind(role.as_str())
                .bind(password_hash)
                .bind(Timestamp::now().0)
                .fetch_one(self.pool())
                .await
                .map_err(|e| rows::conflict_on_unique(e, || format!("a user named {username:?} already exists")))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_users(&self) -> StoreFuture<'_, Vec<User>> {
            Box::pin(async move {
                let rows: Vec<users::UserRow> =
                    sqlx::query_as(concat!("SELECT ", users::user_columns!(), " FROM users u ORDER BY u.username"))
                        .fetch_all(self.pool())
                        .await?;
                rows.into_iter().map(users::user_from_row).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn get_user(&self, id: i64) -> StoreFuture<'_, Option<User>> {
            Box::pin(async move {
                let row: Option<users::UserRow> =
                    sqlx::query_as(concat!("SELECT ", users::user_columns!(), " FROM users u WHERE u.id = $1"))
                        .bind(id)
                        .fetch_optional(self.pool())
                        .await?;
                row.map(users::user_from_row).transpose()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn find_user<'a>(&'a self, username: &'a str) -> StoreFuture<'a, Option<User>> {
            Box::pin(async move {
                let row: Option<users::UserRow> =
                    sqlx::query_as(concat!("SELECT ", users::user_columns!(), " FROM users u WHERE u.username = $1"))
                        .bind(username)
                        .fetch_optional(self.pool())
                        .await?;
                row.map(users::user_from_row).transpose()
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn password_hash(&self, user_id: i64) -> StoreFuture<'_, Option<String>> {
            Box::pin(async move {
                Ok(sqlx::query_scalar("SELECT password_hash FROM users WHERE id = $1")
                    .bind(user_id)
                    .fetch_optional(self.pool())
                    .await?)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn set_user_role(&self, id: i64, role: Role) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                let done = sqlx::query("UPDATE users SET role = $1 WHERE id = $2")
                    .bind(role.as_str())
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                users::one_user(done.rows_affected(), id)
            })
        }

        #[tracing::instrument(level = "debug", skip(self, password_hash))]
        fn set_user_password<'a>(&'a self, id: i64, password_hash: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let done = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
                    .bind(password_hash)
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                users::one_user(done.rows_affected(), id)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn set_user_disabled(&self, id: i64, disabled: bool) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE users SET disabled_at = CASE WHEN $1 THEN COALESCE(disabled_at, $2) ELSE NULL END WHERE id = $3",
                )
                .bind(disabled)
                .bind(Timestamp::now().0)
                .bind(id)
                .execute(self.pool())
                .await?;
                users::one_user(done.rows_affected(), id)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn delete_user(&self, id: i64) -> StoreFuture<'_, ()> {
            Box::pin(async move {
                // Sessions and tokens go with the user (ON DELETE CASCADE).
                let done = sqlx::query("DELETE FROM users WHERE id = $1").bind(id).execute(self.pool()).await?;
                users::one_user(done.rows_affected(), id)
            })
        }
    };
}
pub(crate) use user_queries;

/// Sessions, looked up by the hash of their id.
macro_rules! session_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, id_hash))]
        fn create_session<'a>(&'a self, id_hash: &'a str, user_id: i64, now: Timestamp) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO sessions (id_hash, user_id, created_at, last_seen_at, expires_at) VALUES ($1, $2, $3, $3, $4)",
                )
                .bind(id_hash)
                .bind(user_id)
                .bind(now.0)
                .bind(crate::domain::accounts::session_expiry(now, now).0)
                .execute(self.pool())
                .await
                .map_err(|e| rows::not_found_on_foreign_key(e.into(), || format!("user #{user_id}")))?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self, id_hash))]
        fn session_user<'a>(&'a self, id_hash: &'a str, now: Timestamp) -> StoreFuture<'a, Option<User>> {
            Box::pin(async move {
                let row: Option<(i64, String, String, i64, Option<i64>, i64, i64)> = sqlx::query_as(concat!(
                    "SELECT ",
                    users::user_columns!(),
                    ", s.created_at, s.last_seen_at FROM sessions s JOIN users u ON u.id = s.user_id \
                     WHERE s.id_hash = $1 AND s.expires_at > $2 AND u.disabled_at IS NULL"
                ))
                .bind(id_hash)
                .bind(now.0)
                .fetch_optional(self.pool())
                .await?;
                let Some((id, username, role, created_at, disabled_at, session_created, last_seen)) = row else {
                    return Ok(None);
                };
                if now.0 - last_seen >= crate::domain::accounts::SESSION_TOUCH_MS {
                    sqlx::query("UPDATE sessions SET last_seen_at = $1, expires_at = $2 WHERE id_hash = $3")
                        .bind(now.0)
                        .bind(crate::domain::accounts::session_expiry(Timestamp(session_created), now).0)
                        .bind(id_hash)
                        .execute(self.pool())
                        .await?;
                }
                users::user_from_row((id, username, role, created_at, disabled_at)).map(Some)
            })
        }

        #[tracing::instrument(level = "debug", skip(self, id_hash))]
        fn delete_session<'a>(&'a self, id_hash: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sqlx::query("DELETE FROM sessions WHERE id_hash = $1").bind(id_hash).execute(self.pool()).await?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self, keep))]
        fn delete_user_sessions<'a>(&'a self, user_id: i64, keep: Option<&'a str>) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND ($2 IS NULL OR id_hash <> $2)")
                    .bind(user_id)
                    .bind(keep)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected())
            })
        }
    };
}
pub(crate) use session_queries;

/// API tokens, looked up by the hash of their secret.
macro_rules! token_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self, token_hash))]
        fn create_api_token<'a>(
            &'a self,
            user_id: i64,
            name: &'a str,
            role: Role,
            token_hash: &'a str,
        ) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                sqlx::query_scalar(
                    "INSERT INTO api_tokens (user_id, name, role, token_hash, created_at) VALUES ($1, $2, $3, $4, $5) \
                     RETURNING id",
                )
                .bind(user_id)
                .bind(name)
                .bind(role.as_str())
                .bind(token_hash)
                .bind(Timestamp::now().0)
                .fetch_one(self.pool())
                .await
                .map_err(|e| rows::not_found_on_foreign_key(e.into(), || format!("user #{user_id}")))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn list_api_tokens(&self, user_id: Option<i64>) -> StoreFuture<'_, Vec<ApiToken>> {
            Box::pin(async move {
                let rows: Vec<users::TokenRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    users::token_columns!(),
                    " FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE ($1 IS NULL OR t.user_id = $1) \
                     ORDER BY u.username, t.id DESC"
                ))
                .bind(user_id)
                .fetch_all(self.pool())
                .await?;
                rows.into_iter().map(users::token_from_row).collect()
            })
        }

        #[tracing::instrument(level = "debug", skip(self, token_hash))]
        fn token_user<'a>(&'a self, token_hash: &'a str, now: Timestamp) -> StoreFuture<'a, Option<(User, ApiToken)>> {
            Box::pin(async move {
                let row: Option<users::TokenRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    users::token_columns!(),
                    " FROM api_tokens t JOIN users u ON u.id = t.user_id \
                     WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.disabled_at IS NULL"
                ))
                .bind(token_hash)
                .fetch_optional(self.pool())
                .await?;
                let Some(token) = row.map(users::token_from_row).transpose()? else {
                    return Ok(None);
                };
                if token
                    .last_used_at
                    .is_none_or(|t| now.0 - t.0 >= crate::domain::accounts::SESSION_TOUCH_MS)
                {
                    sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
                        .bind(now.0)
                        .bind(token.id)
                        .execute(self.pool())
                        .await?;
                }
                let user: Option<users::UserRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    users::user_columns!(),
                    " FROM users u WHERE u.id = $1"
                ))
                .bind(token.user_id)
                .fetch_optional(self.pool())
                .await?;
                Ok(user.map(users::user_from_row).transpose()?.map(|u| (u, token)))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn revoke_api_token(&self, id: i64) -> StoreFuture<'_, bool> {
            Box::pin(async move {
                let done = sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                    .bind(Timestamp::now().0)
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn revoke_user_tokens(&self, user_id: i64) -> StoreFuture<'_, u64> {
            Box::pin(async move {
                let done =
                    sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL")
                        .bind(Timestamp::now().0)
                        .bind(user_id)
                        .execute(self.pool())
                        .await?;
                Ok(done.rows_affected())
            })
        }
    };
}
pub(crate) use token_queries;

/// Changes that must keep an active admin.
macro_rules! admin_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self))]
        fn change_user_keeping_an_admin(
            &self,
            id: i64,
            change: crate::domain::accounts::AdminChange,
        ) -> StoreFuture<'_, bool> {
            use crate::domain::accounts::AdminChange;
            Box::pin(async move {
                let mut tx = self.begin_accounts().await?;
                let target: Option<(String, Option<i64>, Option<String>)> =
                    sqlx::query_as("SELECT role, disabled_at, oidc_subject FROM users WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                let Some((role, disabled_at, oidc_subject)) = target else {
                    return Err(users::user_not_found(id));
                };
                // The admin kept is a local one (a password, no identity provider): the way
                // back in when the provider is down or misconfigured.
                let stays_admin = matches!(change, AdminChange::SetRole(Role::Admin));
                if role == Role::Admin.as_str() && disabled_at.is_none() && oidc_subject.is_none() && !stays_admin {
                    let others: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled_at IS NULL \
                         AND oidc_subject IS NULL AND id <> $1",
                    )
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await?;
                    if others == 0 {
                        return Ok(false);
                    }
                }
                let done = match change {
                    AdminChange::SetRole(role) => {
                        sqlx::query("UPDATE users SET role = $1 WHERE id = $2")
                            .bind(role.as_str())
                            .bind(id)
                            .execute(&mut *tx)
                            .await?
                    }
                    AdminChange::Disable => {
                        sqlx::query("UPDATE users SET disabled_at = COALESCE(disabled_at, $1) WHERE id = $2")
                            .bind(Timestamp::now().0)
                            .bind(id)
                            .execute(&mut *tx)
                            .await?
                    }
                    // Sessions and tokens go with the user (ON DELETE CASCADE).
                    AdminChange::Remove => {
                        sqlx::query("DELETE FROM users WHERE id = $1")
                            .bind(id)
                            .execute(&mut *tx)
                            .await?
                    }
                };
                users::one_user(done.rows_affected(), id)?;
                tx.commit().await?;
                Ok(true)
            })
        }
    };
}
pub(crate) use admin_queries;

/// Failed logins and the throttle built on them.
macro_rules! login_queries {
    () => {
        #[tracing::instrument(level = "debug", skip(self))]
        fn login_failures<'a>(&'a self, username: &'a str, address: &'a str) -> StoreFuture<'a, Option<(i64, Timestamp)>> {
            Box::pin(async move {
                let row: Option<(i64, i64)> = sqlx::query_as(
                    "SELECT failures, last_failure_at FROM login_failures WHERE username = $1 AND address = $2",
                )
                .bind(username)
                .bind(address)
                .fetch_optional(self.pool())
                .await?;
                Ok(row.map(|(n, at)| (n, Timestamp(at))))
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn record_login_failure<'a>(&'a self, username: &'a str, address: &'a str, now: Timestamp) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                Ok(sqlx::query_scalar(
                    "INSERT INTO login_failures (username, address, failures, last_failure_at) VALUES ($1, $2, 1, $3) \
                     ON CONFLICT (username, address) DO UPDATE SET failures = login_failures.failures + 1, \
                     last_failure_at = excluded.last_failure_at RETURNING failures",
                )
                .bind(username)
                .bind(address)
                .bind(now.0)
                .fetch_one(self.pool())
                .await?)
            })
        }

        #[tracing::instrument(level = "debug", skip(self, keys))]
        fn reserve_login_attempt<'a>(
            &'a self,
            keys: &'a [crate::domain::accounts::ThrottleKey],
            now: Timestamp,
        ) -> StoreFuture<'a, crate::domain::accounts::Reservation> {
            use crate::domain::accounts::{Reservation, THROTTLE_AUDIT_EVERY_MS, throttled};
            Box::pin(async move {
                // Each key's count is raised first, in one order (its row stays locked until the
                // transaction ends, so parallel attempts are counted one after the other), and
                // the raise is rolled back when the attempt must wait.
                let mut tx = self.begin_write().await?;
                let mut counts = Vec::with_capacity(keys.len());
                for key in keys {
                    let window_start = now.0 - key.limit().window_ms;
                    let (failures, previous): (i64, Option<i64>) = sqlx::query_as(
                        "INSERT INTO login_failures (username, address, failures, last_failure_at) VALUES ($1, $2, 1, $3) \
                         ON CONFLICT (username, address) DO UPDATE SET \
                         failures = CASE WHEN login_failures.last_failure_at < $4 THEN 1 ELSE login_failures.failures + 1 END, \
                         prev_failure_at = CASE WHEN login_failures.last_failure_at < $4 THEN NULL \
                         ELSE login_failures.last_failure_at END, \
                         last_failure_at = excluded.last_failure_at \
                         RETURNING failures, prev_failure_at",
                    )
                    .bind(&key.username)
                    .bind(&key.address)
                    .bind(now.0)
                    .bind(window_start)
                    .fetch_one(&mut *tx)
                    .await?;
                    counts.push(previous.map(|at| (failures - 1, Timestamp(at))));
                }
                let Some((index, wait_ms)) = throttled(keys, &counts, now) else {
                    tx.commit().await?;
                    return Ok(Reservation::Reserved);
                };
                tx.rollback().await?;
                let key = &keys[index];
                let (refused, audited_at): (i64, Option<i64>) = sqlx::query_as(
                    "UPDATE login_failures SET throttled = throttled + 1, throttle_audited_at = CASE \
                     WHEN throttle_audited_at IS NULL OR throttle_audited_at <= $3 THEN $4 ELSE throttle_audited_at END \
                     WHERE username = $1 AND address = $2 RETURNING throttled, throttle_audited_at",
                )
                .bind(&key.username)
                .bind(&key.address)
                .bind(now.0 - THROTTLE_AUDIT_EVERY_MS)
                .bind(now.0)
                .fetch_optional(self.pool())
                .await?
                .unwrap_or((1, None));
                Ok(Reservation::Throttled {
                    key: index,
                    wait_ms,
                    audit: (audited_at == Some(now.0)).then_some(refused),
                })
            })
        }

        #[tracing::instrument(level = "debug", skip(self, keys))]
        fn settle_login_success<'a>(&'a self, keys: &'a [crate::domain::accounts::ThrottleKey]) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let mut tx = self.begin_write().await?;
                for key in keys {
                    let sql = if key.cleared_by_success() {
                        "DELETE FROM login_failures WHERE username = $1 AND address = $2"
                    } else {
                        // A shared budget takes back only the attempt it counted.
                        "UPDATE login_failures SET failures = failures - 1 WHERE username = $1 AND address = $2 AND failures > 0"
                    };
                    sqlx::query(sql).bind(&key.username).bind(&key.address).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn clear_user_login_failures<'a>(&'a self, username: &'a str) -> StoreFuture<'a, u64> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM login_failures WHERE username = $1")
                    .bind(username)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn prune_login_failures(&self, before: Timestamp) -> StoreFuture<'_, u64> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM login_failures WHERE last_failure_at < $1")
                    .bind(before.0)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected())
            })
        }

        #[tracing::instrument(level = "debug", skip(self))]
        fn clear_login_failures<'a>(&'a self, username: &'a str, address: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                sqlx::query("DELETE FROM login_failures WHERE username = $1 AND address = $2")
                    .bind(username)
                    .bind(address)
                    .execute(self.pool())
                    .await?;
                Ok(())
            })
        }
    };
}
pub(crate) use login_queries;
