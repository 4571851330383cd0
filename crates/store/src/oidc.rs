//! Sign-in through an OpenID Connect provider (`oidc_provider`, `oidc_logins`,
//! `users.oidc_subject`), written once for both backends: `oidc_queries!` expands to the
//! methods of `OidcStore` in `lib.rs` (`impl_store!`), so its paths are written as seen from
//! there. The client secret is sealed bound to [`SECRET_OWNER`]; a login under way is found by
//! the SHA-256 of its `state` and taken (deleted) when the browser comes back, so it is used once.

/// What the provider's client secret is sealed to.
pub(crate) const SECRET_OWNER: &str = "oidc provider";
/// The password hash of an account made by a sign-in: no password verifies against it.
pub(crate) const NO_PASSWORD: &str = "!oidc";

macro_rules! oidc_queries {
    () => {
        fn oidc_provider(&self) -> StoreFuture<'_, Option<(ProviderConfig, bool)>> {
            Box::pin(async move {
                let row: Option<(String, String, Option<String>, String, String, String)> = sqlx::query_as(
                    "SELECT issuer, client_id, client_secret, role_claim, role_map, default_role \
                     FROM oidc_provider WHERE id = 1",
                )
                .fetch_optional(self.pool())
                .await?;
                let Some((issuer, client_id, secret, role_claim, role_map, default_role)) = row else {
                    return Ok(None);
                };
                let names: std::collections::BTreeMap<String, String> = serde_json::from_str(&role_map)
                    .map_err(|e| StoreError::Corrupt(format!("oidc_provider.role_map: {e}")))?;
                let mut role_map = std::collections::BTreeMap::new();
                for (value, name) in names {
                    let role = crate::domain::accounts::Role::parse(&name)
                        .ok_or_else(|| StoreError::Corrupt(format!("oidc_provider.role_map: role {name:?}")))?;
                    role_map.insert(value, role);
                }
                let config = ProviderConfig {
                    issuer,
                    client_id,
                    role_claim,
                    role_map,
                    default_role: crate::domain::accounts::Role::parse(&default_role),
                };
                Ok(Some((config, secret.is_some())))
            })
        }

        fn save_oidc_provider<'a>(
            &'a self,
            config: &'a ProviderConfig,
            secret: Option<&'a str>,
            by: &'a str,
        ) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let sealed = secret.map(|s| self.sealer().seal_bound(oidc::SECRET_OWNER, s));
                let names: std::collections::BTreeMap<&str, &str> =
                    config.role_map.iter().map(|(value, role)| (value.as_str(), role.as_str())).collect();
                let role_map = serde_json::to_string(&names).expect("a role map serialises");
                let default_role = config.default_role.map_or("none", |r| r.as_str());
                // A secret left blank keeps the stored one (it is write-only: never shown back).
                sqlx::query(
                    "INSERT INTO oidc_provider \
                     (id, issuer, client_id, client_secret, role_claim, role_map, default_role, changed_by, changed_at) \
                     VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (id) DO UPDATE SET issuer = excluded.issuer, client_id = excluded.client_id, \
                     client_secret = COALESCE(excluded.client_secret, oidc_provider.client_secret), \
                     role_claim = excluded.role_claim, role_map = excluded.role_map, \
                     default_role = excluded.default_role, changed_by = excluded.changed_by, \
                     changed_at = excluded.changed_at",
                )
                .bind(&config.issuer)
                .bind(&config.client_id)
                .bind(sealed)
                .bind(&config.role_claim)
                .bind(role_map)
                .bind(default_role)
                .bind(by)
                .bind(Timestamp::now().0)
                .execute(self.pool())
                .await?;
                Ok(())
            })
        }

        fn delete_oidc_provider(&self) -> StoreFuture<'_, bool> {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM oidc_provider WHERE id = 1").execute(self.pool()).await?;
                Ok(done.rows_affected() > 0)
            })
        }

        fn oidc_client_secret(&self) -> StoreFuture<'_, Option<String>> {
            Box::pin(async move {
                let sealed: Option<Option<String>> =
                    sqlx::query_scalar("SELECT client_secret FROM oidc_provider WHERE id = 1")
                        .fetch_optional(self.pool())
                        .await?;
                sealed
                    .flatten()
                    .map(|s| {
                        self.sealer()
                            .open_bound(oidc::SECRET_OWNER, &s)
                            .map_err(|e| StoreError::Key(format!("the OIDC client secret: {e}")))
                    })
                    .transpose()
            })
        }

        fn create_oidc_login<'a>(&'a self, state_hash: &'a str, login: &'a PendingLogin) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                // Logins abandoned at the provider go when the next one starts.
                sqlx::query("DELETE FROM oidc_logins WHERE created_at < $1")
                    .bind(login.created_at.0 - crate::domain::oidc::LOGIN_MAX_MS)
                    .execute(self.pool())
                    .await?;
                sqlx::query(
                    "INSERT INTO oidc_logins (state_hash, nonce, pkce_verifier, return_to, created_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(state_hash)
                .bind(&login.nonce)
                .bind(&login.pkce_verifier)
                .bind(&login.return_to)
                .bind(login.created_at.0)
                .execute(self.pool())
                .await?;
                Ok(())
            })
        }

        fn take_oidc_login<'a>(&'a self, state_hash: &'a str) -> StoreFuture<'a, Option<PendingLogin>> {
            Box::pin(async move {
                let row: Option<(String, String, String, i64)> = sqlx::query_as(
                    "DELETE FROM oidc_logins WHERE state_hash = $1 \
                     RETURNING nonce, pkce_verifier, return_to, created_at",
                )
                .bind(state_hash)
                .fetch_optional(self.pool())
                .await?;
                Ok(row.map(|(nonce, pkce_verifier, return_to, created_at)| PendingLogin {
                    nonce,
                    pkce_verifier,
                    return_to,
                    created_at: Timestamp(created_at),
                }))
            })
        }

        fn oidc_user<'a>(&'a self, subject: &'a str) -> StoreFuture<'a, Option<User>> {
            Box::pin(async move {
                let row: Option<users::UserRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    users::user_columns!(),
                    " FROM users u WHERE u.oidc_subject = $1"
                ))
                .bind(subject)
                .fetch_optional(self.pool())
                .await?;
                row.map(users::user_from_row).transpose()
            })
        }

        fn create_oidc_user<'a>(
            &'a self,
            username: &'a str,
            role: Role,
            disabled: bool,
            subject: &'a str,
        ) -> StoreFuture<'a, i64> {
            Box::pin(async move {
                let now = Timestamp::now().0;
                sqlx::query_scalar(
                    "INSERT INTO users (username, role, password_hash, created_at, disabled_at, oidc_subject) \
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                )
                .bind(username)
                .bind(role.as_str())
                .bind(oidc::NO_PASSWORD)
                .bind(now)
                .bind(disabled.then_some(now))
                .bind(subject)
                .fetch_one(self.pool())
                .await
                .map_err(|e| rows::conflict_on_unique(e, || format!("a user named {username:?} already exists")))
            })
        }

        fn local_users(&self) -> StoreFuture<'_, Vec<i64>> {
            Box::pin(async move {
                Ok(sqlx::query_scalar("SELECT id FROM users WHERE oidc_subject IS NULL ORDER BY id")
                    .fetch_all(self.pool())
                    .await?)
            })
        }
    };
}
pub(crate) use oidc_queries;
