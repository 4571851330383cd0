-- Accounts (issue 12): users with a role and an argon2id password hash, login sessions and API
-- tokens stored only as SHA-256 hashes of their random secrets (a dump cannot be replayed), and
-- failed-login counts per account and address (so throttling survives a restart).
CREATE TABLE users (
    id BIGSERIAL PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
    password_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    disabled_at BIGINT
);
CREATE TABLE sessions (
    id_hash TEXT PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE TABLE api_tokens (
    id BIGSERIAL PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
    token_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);
CREATE TABLE login_failures (
    username TEXT NOT NULL,
    address TEXT NOT NULL,
    failures BIGINT NOT NULL,
    last_failure_at BIGINT NOT NULL,
    PRIMARY KEY (username, address)
);
