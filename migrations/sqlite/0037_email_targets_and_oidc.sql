-- no-transaction
-- Issue 52. (1) Email (SMTP) as a notification target kind: SQLite cannot change a CHECK
-- constraint in place, so `notification_targets` is rebuilt the documented way (as 0020 did:
-- foreign keys off outside a transaction, copy, drop, rename, check, in one transaction; the
-- delivery log keeps its rows). An email target's `url_shown` is its smtp:// URL (no password
-- in it); its `secret` the sealed SMTP password.
-- (2) Sign-in through an OpenID Connect provider: the provider as an admin configured it (one
-- row; the client secret sealed), logins under way (by the SHA-256 of their `state`, each
-- consumed once, with its nonce and PKCE verifier), and the provider's subject a user signs in
-- as (local accounts have none).
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE notification_targets_with_email (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL UNIQUE,
    kind         TEXT    NOT NULL CHECK (kind IN ('webhook', 'slack', 'email')),
    -- A webhook's URL; for Slack only its host (the URL itself is in url_sealed); an email
    -- target's smtp:// URL.
    url_shown    TEXT    NOT NULL,
    url_sealed   TEXT,
    secret       TEXT,
    schedule_id  INTEGER REFERENCES schedules (id) ON DELETE CASCADE,
    profile_id   INTEGER REFERENCES threshold_profiles (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL
) STRICT;
INSERT INTO notification_targets_with_email
    (id, name, kind, url_shown, url_sealed, secret, schedule_id, profile_id, created_at)
    SELECT id, name, kind, url_shown, url_sealed, secret, schedule_id, profile_id, created_at
    FROM notification_targets;
DROP TABLE notification_targets;
ALTER TABLE notification_targets_with_email RENAME TO notification_targets;

ALTER TABLE users ADD COLUMN oidc_subject TEXT;
CREATE UNIQUE INDEX users_by_oidc_subject ON users (oidc_subject) WHERE oidc_subject IS NOT NULL;

CREATE TABLE oidc_provider (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    issuer        TEXT    NOT NULL,
    client_id     TEXT    NOT NULL,
    -- Sealed with the server key, bound to "oidc provider".
    client_secret TEXT,
    -- The ID token claim roles are read from (e.g. groups); '' reads none.
    role_claim    TEXT    NOT NULL,
    -- JSON object: a claim value -> viewer / editor / admin.
    role_map      TEXT    NOT NULL,
    -- The role of a new user no mapping names; 'none': disabled until an admin assigns one.
    default_role  TEXT    NOT NULL CHECK (default_role IN ('none', 'viewer', 'editor', 'admin')),
    changed_by    TEXT    NOT NULL,
    changed_at    INTEGER NOT NULL
) STRICT;

CREATE TABLE oidc_logins (
    state_hash    TEXT    PRIMARY KEY,
    nonce         TEXT    NOT NULL,
    pkce_verifier TEXT    NOT NULL,
    return_to     TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
) STRICT;
COMMIT;
PRAGMA foreign_keys = ON;
