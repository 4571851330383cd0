//! Accounts: roles, usernames, password rules and hashes, and the random secrets (session ids,
//! API tokens) that are stored only as hashes.
use argon2::password_hash::{PasswordHash, SaltString};
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
        "This needs the {needed} role{what}; you are signed in as {name}, who is {}. \
         Nothing was changed. Ask an admin if you need more.",
        with_article(has)
    )
}

/// The refusal when an API token's scope, not its owner's role, is what fell short: it names
/// the token, so whoever runs the script knows to use another token rather than ask for a role.
pub fn token_refusal(token: &ApiToken, owner_role: Role, needed: Role, what: Option<&str>) -> String {
    let what = what.map(|w| format!(" ({w})")).unwrap_or_default();
    if owner_role >= needed {
        format!(
            "This needs the {needed} role{what}; the API token #{} \"{}\" that sent it is limited to \
             {} (its owner {} is {}). Nothing was changed. Use a token created with the {needed} \
             scope.",
            token.id,
            token.name,
            token.role,
            token.username,
            with_article(owner_role)
        )
    } else {
        format!(
            "This needs the {needed} role{what}; the API token #{} \"{}\" acts for {}, who is {}. \
             Nothing was changed. Ask an admin if you need more.",
            token.id,
            token.name,
            token.username,
            with_article(owner_role)
        )
    }
}

/// "a viewer", "an editor", "an admin".
pub fn with_article(role: Role) -> String {
    let name = role.to_string();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
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

/// A login form's name as it is looked up and counted: trimmed, lower-case, at most 64
/// characters (what [`username`] stores).
pub fn login_name(raw: &str) -> String {
    raw.trim().to_lowercase().chars().take(64).collect()
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

/// argon2id's memory cost: 19 MiB (in 1 KiB blocks).
const ARGON2_MEMORY_KIB: u32 = 19 * 1024;

fn argon2id() -> Argon2<'static> {
    // OWASP's argon2id baseline: 19 MiB, 2 iterations, 1 lane.
    let params = Params::new(ARGON2_MEMORY_KIB, 2, 1, None).expect("valid argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// argon2id's working memory for one password at a time (19 MiB), kept and reused from one
/// password to the next, so hashing allocates nothing: whoever holds N of these hashes at most
/// N passwords at once, in N × 19 MiB that stays the same however many passwords pass.
pub struct HashMemory(Vec<argon2::Block>);

impl HashMemory {
    pub fn new() -> HashMemory {
        HashMemory(vec![argon2::Block::default(); ARGON2_MEMORY_KIB as usize])
    }

    /// The first `blocks` blocks (grown, once, for a stored hash of a higher cost).
    fn blocks(&mut self, blocks: usize) -> &mut [argon2::Block] {
        if self.0.len() < blocks {
            self.0.resize(blocks, argon2::Block::default());
        }
        &mut self.0[..blocks]
    }
}

impl Default for HashMemory {
    fn default() -> Self {
        HashMemory::new()
    }
}

/// An argon2id hash of `password` in PHC format (salt and parameters included). CPU-heavy:
/// call it off the async threads.
pub fn hash_password(password: &str) -> String {
    hash_password_with(&mut HashMemory::new(), password)
}

/// [`hash_password`] in `memory`.
pub fn hash_password_with(memory: &mut HashMemory, password: &str) -> String {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).expect("the operating system's random source");
    let argon = argon2id();
    let params = argon.params().clone();
    let mut out = [0u8; 32];
    argon
        .hash_password_into_with_memory(
            password.as_bytes(),
            &salt,
            &mut out,
            memory.blocks(params.block_count()),
        )
        .expect("argon2id hashes any password within the length bounds");
    let salt = SaltString::encode_b64(&salt).expect("16 bytes make a valid salt");
    PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: argon2::password_hash::ParamsString::try_from(&params).expect("argon2 parameters print"),
        salt: Some(salt.as_salt()),
        hash: Some(argon2::password_hash::Output::new(&out).expect("a 32-byte output")),
    }
    .to_string()
}

/// Whether `password` matches a stored PHC hash (constant-time). CPU-heavy.
pub fn verify_password(hash: &str, password: &str) -> bool {
    verify_password_with(&mut HashMemory::new(), hash, password)
}

/// [`verify_password`] in `memory`: the stored hash's own algorithm, version and parameters,
/// and a constant-time comparison of the outputs.
pub fn verify_password_with(memory: &mut HashMemory, hash: &str, password: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (Algorithm::try_from(parsed.algorithm), Params::try_from(&parsed)) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from).transpose() {
        Ok(v) => v.unwrap_or(Version::V0x13),
        Err(_) => return false,
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let mut out = vec![0u8; expected.len()];
    let blocks = params.block_count();
    let computed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password.as_bytes(),
        salt,
        &mut out,
        memory.blocks(blocks),
    );
    // `Output`'s equality is constant-time.
    computed.is_ok() && argon2::password_hash::Output::new(&out).is_ok_and(|o| o == expected)
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

/// A change of a user that could leave the server without an active admin, made by the store
/// only while another active admin remains (checked in the same transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminChange {
    SetRole(Role),
    Disable,
    Remove,
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

/// Who a request made with token `token_id` of `username` acts as, in the audit log and in
/// refusals: the user and the token, e.g. `ada (token #3)`.
pub fn token_actor(username: &str, token_id: i64) -> String {
    format!("{username} (token #{token_id})")
}

/// The most a new token may do when created by a request acting with role `requester`: the
/// lower of that and the account's role. A token (or a session) never mints more than itself.
pub fn token_role_cap(account: Role, requester: Role) -> Role {
    account.min(requester)
}

/// Whether a request made with token `acting` of `user` may revoke token `target` of the same
/// account: its own always; the account's others only when the token is not scoped below its
/// user (a read-only token of an admin must not be able to end the admin's other tokens).
pub fn token_may_revoke(user: &User, acting: &ApiToken, target: i64) -> bool {
    target == acting.id || acting.role >= user.role
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
    LoginLimit::PER_NAME_AND_ADDRESS.wait(failures, last_failure, now)
}

/// One throttle: failures allowed free, then each attempt waits 1 s, 2 s, 4 s … up to a cap
/// after the last failure; failures older than the window are forgotten (the count restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimit {
    pub free: i64,
    pub max_wait_ms: i64,
    pub window_ms: i64,
}

impl LoginLimit {
    /// One name from one address (or one browser that logged in as that name before):
    /// 5 free, then up to 15 minutes between attempts; remembered for a day.
    pub const PER_NAME_AND_ADDRESS: LoginLimit = LoginLimit {
        free: FREE_LOGIN_FAILURES,
        max_wait_ms: MAX_LOGIN_WAIT_MS,
        window_ms: 24 * 3600 * 1000,
    };
    /// One name from every address but its trusted browsers (spraying guesses over many
    /// addresses): 10 free, then slowed to one attempt a minute at most, never blocked for
    /// longer; forgotten after an hour without failures.
    pub const PER_ACCOUNT: LoginLimit = LoginLimit {
        free: 10,
        max_wait_ms: 60 * 1000,
        window_ms: 3600 * 1000,
    };
    /// One address over every name (spraying one password over many names): 30 free, then
    /// slowed to one attempt a minute at most; forgotten after an hour without failures.
    pub const PER_ADDRESS: LoginLimit = LoginLimit {
        free: 30,
        max_wait_ms: 60 * 1000,
        window_ms: 3600 * 1000,
    };

    /// How long (ms) an attempt must still wait after `failures` failures within the window,
    /// the last at `last_failure`; None when it may be made now.
    pub fn wait(&self, failures: i64, last_failure: Timestamp, now: Timestamp) -> Option<i64> {
        if failures < self.free || now.0 - last_failure.0 >= self.window_ms {
            return None;
        }
        let doublings = (failures - self.free).min(30) as u32;
        let wait = (1000i64 << doublings).min(self.max_wait_ms);
        let left = last_failure.0 + wait - now.0;
        (left > 0).then_some(left)
    }
}

/// What failed logins are counted under: a name and an address (or a `device:` / `*` stand-in).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ThrottleKey {
    pub username: String,
    pub address: String,
    pub limit_of: KeyKind,
}

/// Which limit a [`ThrottleKey`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyKind {
    /// One name from one address.
    NameAndAddress,
    /// One name from one browser that logged in as it before.
    TrustedBrowser,
    /// One name from every untrusted address.
    Account,
    /// One address over every name.
    Address,
}

/// The stand-in for "every address" (per-account key) and "every name" (per-address key):
/// neither a login name (letters, digits and `. _ @ -`) nor an IP address.
pub const ANY: &str = "*";

impl ThrottleKey {
    pub fn limit(&self) -> LoginLimit {
        match self.limit_of {
            KeyKind::NameAndAddress | KeyKind::TrustedBrowser => LoginLimit::PER_NAME_AND_ADDRESS,
            KeyKind::Account => LoginLimit::PER_ACCOUNT,
            KeyKind::Address => LoginLimit::PER_ADDRESS,
        }
    }

    /// Whether a successful login forgets this key's failures (its own name and place), rather
    /// than only taking back the attempt it counted (shared budgets).
    pub fn cleared_by_success(&self) -> bool {
        matches!(self.limit_of, KeyKind::NameAndAddress | KeyKind::TrustedBrowser)
    }
}

/// The keys a login attempt for `name` from `address` is counted under, in the order they are
/// locked. A browser holding a valid device cookie for `name` (`device`: its random id, from an
/// earlier successful login) is counted on its own, so others' failures — from the same address
/// behind a proxy, or from anywhere — never slow its user down. Anyone else is counted per name
/// and address, per name over every address, and per address over every name.
pub fn login_throttle_keys(name: &str, address: &str, device: Option<&str>) -> Vec<ThrottleKey> {
    let key = |username: &str, address: String, limit_of| ThrottleKey {
        username: username.to_string(),
        address,
        limit_of,
    };
    let mut keys = match device {
        Some(id) => vec![key(name, format!("device:{id}"), KeyKind::TrustedBrowser)],
        None => vec![
            key(name, address.to_string(), KeyKind::NameAndAddress),
            key(name, ANY.to_string(), KeyKind::Account),
            key(ANY, address.to_string(), KeyKind::Address),
        ],
    };
    keys.sort_by(|a, b| (&a.username, &a.address).cmp(&(&b.username, &b.address)));
    keys
}

/// The longest wait any key asks of an attempt now, given each key's failures within its window
/// and last failure (None for a key with none): the key and the wait, or None to go ahead.
pub fn throttled(keys: &[ThrottleKey], counts: &[Option<(i64, Timestamp)>], now: Timestamp) -> Option<(usize, i64)> {
    keys.iter()
        .zip(counts)
        .enumerate()
        .filter_map(|(i, (key, count))| {
            let (failures, last) = (*count)?;
            key.limit().wait(failures, last, now).map(|w| (i, w))
        })
        .max_by_key(|(_, w)| *w)
}

/// What reserving a login attempt came to ([`login_throttle_keys`]' counts raised, or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// Counted as a failure until the password proves right: go ahead and check it.
    Reserved,
    /// Not counted: wait this long. `key` is the index of the key that asked the longest wait;
    /// `audit` is set (to the number of attempts that key refused so far) when this one is to
    /// be written to the audit log.
    Throttled {
        key: usize,
        wait_ms: i64,
        audit: Option<i64>,
    },
}

/// A throttled attempt is written to the audit log at most this often per key (anyone can make
/// them, so each is not).
pub const THROTTLE_AUDIT_EVERY_MS: i64 = 60 * 1000;

/// Failed-login counts not touched for this long are deleted (unknown names leave rows too).
pub const LOGIN_FAILURES_KEPT_MS: i64 = 24 * 3600 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_use_the_right_article_and_name_a_token_whose_scope_refused() {
        let m = refusal("ed", Role::Editor, Role::Admin, None);
        assert!(m.contains("who is an editor"), "{m}");
        assert!(!m.contains("a editor"), "{m}");
        assert!(refusal("vi", Role::Viewer, Role::Editor, None).contains("who is a viewer"));
        let token = ApiToken {
            id: 7,
            user_id: 1,
            username: "ada".into(),
            name: "ci-read".into(),
            role: Role::Viewer,
            created_at: Timestamp(0),
            last_used_at: None,
            revoked_at: None,
        };
        let m = token_refusal(&token, Role::Admin, Role::Editor, None);
        assert!(m.contains("API token #7 \"ci-read\""), "{m}");
        assert!(m.contains("limited to viewer"), "{m}");
        assert!(m.contains("its owner ada is an admin"), "{m}");
        assert!(!m.contains("you are signed in"), "the token refused, not the user: {m}");
        let m = token_refusal(&token, Role::Viewer, Role::Editor, None);
        assert!(m.contains("acts for ada, who is a viewer"), "{m}");
    }

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
        // The same in reused memory, and as the argon2 crate itself checks it.
        let mut memory = HashMemory::new();
        let again = hash_password_with(&mut memory, "pw in reused memory");
        assert!(verify_password_with(&mut memory, &again, "pw in reused memory"));
        assert!(!verify_password_with(&mut memory, &again, "pw in reused memory?"));
        use argon2::password_hash::PasswordVerifier;
        let parsed = PasswordHash::new(&again).unwrap();
        assert!(argon2id().verify_password(b"pw in reused memory", &parsed).is_ok());
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
    fn shared_budgets_slow_but_never_block_for_long_and_a_trusted_browser_is_counted_alone() {
        let t = Timestamp(1_000_000);
        let account = LoginLimit::PER_ACCOUNT;
        assert_eq!(account.wait(9, t, t), None);
        assert_eq!(account.wait(10, t, t), Some(1000));
        assert_eq!(
            account.wait(1_000, t, t),
            Some(60_000),
            "slowed, never longer than a minute"
        );
        assert_eq!(
            account.wait(1_000, t, Timestamp(t.0 + 3600 * 1000)),
            None,
            "forgotten after the window"
        );
        let untrusted = login_throttle_keys("ada", "10.0.0.1", None);
        let kinds: Vec<KeyKind> = untrusted.iter().map(|k| k.limit_of).collect();
        assert_eq!(
            kinds,
            [KeyKind::Address, KeyKind::Account, KeyKind::NameAndAddress],
            "locked in one order"
        );
        let trusted = login_throttle_keys("ada", "10.0.0.1", Some("ff00"));
        assert_eq!(trusted.len(), 1);
        assert_eq!(trusted[0].address, "device:ff00");
        // The longest wait wins; none when every key is under its limit.
        let counts = [Some((30, t)), Some((3, t)), Some((6, t))];
        assert_eq!(throttled(&untrusted, &counts, t), Some((2, 2000)));
        assert_eq!(throttled(&untrusted, &[None, Some((3, t)), None], t), None);
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
