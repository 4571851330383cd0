-- Issue 52. (1) Email (SMTP) as a notification target kind: an email target's `url_shown` is
-- its smtp:// URL (no password in it); its `secret` the sealed SMTP password.
-- (2) Sign-in through an OpenID Connect provider: the provider as an admin configured it (one
-- row; the client secret sealed), logins under way (by the SHA-256 of their `state`, each
-- consumed once, with its nonce and PKCE verifier), and the provider's subject a user signs in
-- as (local accounts have none).
ALTER TABLE notification_targets DROP CONSTRAINT notification_targets_kind_check;
ALTER TABLE notification_targets ADD CONSTRAINT notification_targets_kind_check
    CHECK (kind IN ('webhook', 'slack', 'email'));

ALTER TABLE users ADD COLUMN oidc_subject TEXT;
CREATE UNIQUE INDEX users_by_oidc_subject ON users (oidc_subject) WHERE oidc_subject IS NOT NULL;

CREATE TABLE oidc_provider (
    id            BIGINT  PRIMARY KEY CHECK (id = 1),
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
    changed_at    BIGINT  NOT NULL
);

CREATE TABLE oidc_logins (
    state_hash    TEXT    PRIMARY KEY,
    nonce         TEXT    NOT NULL,
    pkce_verifier TEXT    NOT NULL,
    return_to     TEXT    NOT NULL,
    created_at    BIGINT  NOT NULL
);
