//! Accounts: roles, usernames, password rules and hashes, and the random secrets (session ids,
//! API tokens) that are stored only as hashes.
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use sha2::{Digest, Sha256};

use super::Timestamp;
use super::validation::FieldErrors;

/// What a user may do. Each role includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads every page, exports.
    Viewer,
    /// Also: eval sets, candidates (not their keys), thresholds, runs, probes, scorecards.
    Editor,
    /// Also: users, credentials (API keys and key variables), deletion.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Editor, Role::Admin];

    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s.trim())
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a request was refused for its role, with what it needed and what to do (the web's 403
/// and the app's `Forbidden` say it the same way).
pub fn refusal(name: &str, has: Role, needed: Role, what: Option<&str>) -> String {
    let what = what.map(|w| format!(" ({w})")).unwrap_or_default();
    format!(
        "This needs the {needed} role{what}; you are signed in as {name}, who is {} {has}. \
         Nothing was changed. Ask an admin if you need more.",
        if has == Role::Admin { "an" } else { "a" }
    )
}

/// Shortest password accepted.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Longest password accepted (hashing cost grows with length).
pub const MAX_PASSWORD_CHARS: usize = 256;

/// A login name: 1–64 of letters, digits and `. _ @ -`, compared case-insensitively (stored
/// lower-case), so no two users look alike.
pub fn username(errors: &mut FieldErrors, field: &str, raw: &str) -> Option<String> {
    let value = raw.trim().to_lowercase();
    if value.is_empty() {
        errors.add(field, "is required");
        None
    } else if value.chars().count() > 64 {
        errors.add(field, "is too long (at most 64 characters)");
        None
    } else if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
    {
        errors.add(field, "may contain only letters, digits and . _ @ -");
        None
    } else {
        Some(value)
    }
}

/// A new password: at least [`MIN_PASSWORD_CHARS`] characters, at most [`MAX_PASSWORD_CHARS`].
pub fn new_password(errors: &mut FieldErrors, field: &str, raw: &str) -> Option<String> {
    let n = raw.chars().count();
    if n < MIN_PASSWORD_CHARS {
        errors.add(field, format!("must be at least {MIN_PASSWORD_CHARS} characters long"));
        None
    } else if n > MAX_PASSWORD_CHARS {
        errors.add(field, format!("must be at most {MAX_PASSWORD_CHARS} characters long"));
        None
    } else {
        Some(raw.to_string())
    }
}

fn argon2id() -> Argon2<'static> {
    // OWASP's argon2id baseline: 19 MiB, 2 iterations, 1 lane.
    let params = Params::new(19 * 1024, 2, 1, None).expect("valid argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// An argon2id hash of `password` in PHC format (salt and parameters included). CPU-heavy:
/// call it off the async threads.
pub fn hash_password(password: &str) -> String {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).expect("the operating system's random source");
    let salt = SaltString::encode_b64(&salt).expect("16 bytes make a valid salt");
    argon2id()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2id hashes any password within the length bounds")
        .to_string()
}

/// Whether `password` matches a stored PHC hash (constant-time). CPU-heavy.
pub fn verify_password(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| argon2id().verify_password(password.as_bytes(), &parsed).is_ok())
}

/// A hash to verify against when the user does not exist, so a login for an unknown name takes
/// as long as one with a wrong password.
pub fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_password("decoy password that nobody has"))
}

/// Prefix of API tokens, so a leaked one is recognisable (and greppable) as bakeoff's.
pub const TOKEN_PREFIX: &str = "bko_";

/// A new random secret (session id or API token): 256 bits, hex. Only its [`secret_hash`] is
/// stored, so a database dump cannot be replayed as a login.
pub fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    format!("{prefix}{}", hex::encode(bytes))
}

/// SHA-256 of a secret, hex: how session ids and API tokens are stored and looked up (they are
/// long and random, so a fast hash is enough; passwords get argon2id).
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A user as stored (never with the password hash: that is read only to verify a login).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub role: Role,
    pub created_at: Timestamp,
    /// Set when an admin disabled the account: it can no longer log in or use its tokens.
    pub disabled_at: Option<Timestamp>,
}

impl User {
    pub fn is_active(&self) -> bool {
        self.disabled_at.is_none()
    }
}

/// An API token as listed (the secret itself is shown once, at creation, and never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    pub username: String,
    pub name: String,
    /// What the token may do: at most its user's role (the lower of the two applies).
    pub role: Role,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

/// A token's name: the one name rule for user-named things.
pub fn token_name(errors: &mut FieldErrors, field: &str, raw: &str) -> Option<String> {
    super::validation::name(errors, field, raw)
}

/// The role a request authenticated with a token acts with: the token's, never above its user's
/// current role (a demoted user's old tokens are demoted with them).
pub fn effective_role(user: Role, token: Role) -> Role {
    user.min(token)
}

/// A login session is refused after this long without a request…
pub const SESSION_IDLE_MS: i64 = 12 * 3600 * 1000;
/// …and after this long in any case (the user logs in again).
pub const SESSION_MAX_MS: i64 = 7 * 24 * 3600 * 1000;
/// A session's `last_seen` is written at most this often (not on every request).
pub const SESSION_TOUCH_MS: i64 = 60 * 1000;

/// When a session seen at `last_seen`, created at `created`, expires: the idle limit from its last
/// request, never past the absolute limit from its creation.
pub fn session_expiry(created: Timestamp, last_seen: Timestamp) -> Timestamp {
    Timestamp((last_seen.0 + SESSION_IDLE_MS).min(created.0 + SESSION_MAX_MS))
}

/// Failed logins (per account and address) allowed before each further attempt must wait.
pub const FREE_LOGIN_FAILURES: i64 = 5;
/// The longest wait between attempts once throttled.
pub const MAX_LOGIN_WAIT_MS: i64 = 15 * 60 * 1000;

/// How long (ms) an attempt must still wait after `failures` failed logins, the last at
/// `last_failure`: nothing for the first [`FREE_LOGIN_FAILURES`], then 1 s, 2 s, 4 s, … doubling up
/// to [`MAX_LOGIN_WAIT_MS`]. None when an attempt may be made now.
pub fn login_wait(failures: i64, last_failure: Timestamp, now: Timestamp) -> Option<i64> {
    if failures < FREE_LOGIN_FAILURES {
        return None;
    }
    let doublings = (failures - FREE_LOGIN_FAILURES).min(20) as u32;
    let wait = (1000i64 << doublings).min(MAX_LOGIN_WAIT_MS);
    let left = last_failure.0 + wait - now.0;
    (left > 0).then_some(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_parse() {
        assert!(Role::Viewer < Role::Editor && Role::Editor < Role::Admin);
        assert_eq!(Role::parse(" editor"), Some(Role::Editor));
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn passwords_are_hashed_with_argon2id_and_verified() {
        let h = hash_password("correct horse battery");
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password(&h, "correct horse battery"));
        assert!(!verify_password(&h, "correct horse battery!"));
        assert!(!verify_password("not a hash", "x"));
        assert_ne!(h, hash_password("correct horse battery"), "salted");
    }

    #[test]
    fn usernames_and_passwords_are_checked() {
        let mut e = FieldErrors::default();
        assert_eq!(username(&mut e, "u", " Ada.L ").as_deref(), Some("ada.l"));
        assert_eq!(username(&mut e, "u", "a\u{202E}b"), None);
        assert_eq!(username(&mut e, "u", ""), None);
        assert_eq!(new_password(&mut e, "p", "short"), None);
        assert!(new_password(&mut FieldErrors::default(), "p", "twelve chars").is_some());
    }

    #[test]
    fn logins_wait_longer_after_each_failure_past_five() {
        let t = Timestamp(1_000_000);
        assert_eq!(login_wait(4, t, t), None);
        assert_eq!(login_wait(5, t, t), Some(1000));
        assert_eq!(login_wait(6, t, t), Some(2000));
        assert_eq!(login_wait(6, t, Timestamp(t.0 + 2000)), None);
        assert_eq!(login_wait(60, t, t), Some(MAX_LOGIN_WAIT_MS));
    }

    #[test]
    fn sessions_expire_when_idle_or_old_and_tokens_never_exceed_their_user() {
        let created = Timestamp(0);
        assert_eq!(session_expiry(created, Timestamp(0)).0, SESSION_IDLE_MS);
        assert_eq!(session_expiry(created, Timestamp(SESSION_MAX_MS)).0, SESSION_MAX_MS);
        assert_eq!(effective_role(Role::Viewer, Role::Admin), Role::Viewer);
        assert_eq!(effective_role(Role::Admin, Role::Editor), Role::Editor);
    }

    #[test]
    fn secrets_are_random_and_stored_as_hashes() {
        let t = new_secret(TOKEN_PREFIX);
        assert!(t.starts_with("bko_") && t.len() == 4 + 64);
        assert_ne!(t, new_secret(TOKEN_PREFIX));
        assert_eq!(secret_hash(&t).len(), 64);
        assert_ne!(secret_hash(&t), t);
    }
}
