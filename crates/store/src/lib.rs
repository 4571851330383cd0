//! Storage. One `Store` trait, two implementations (SQLite by default, PostgreSQL for teams),
//! chosen by URL scheme. Nothing above this module knows which database it is on.
//!
//! The contract, in three parts:
//! - one trait per aggregate, declared below (`AuditStore`, `UserStore`, `CandidateStore`,
//!   `EvalSetStore`, `ProfileStore`, `ScorecardStore`, `RunStore`, `SettingStore`,
//!   `StopStore`, `RecordStore`, `TokenCountStore`, `OperabilityStore`, `ArchiveStore`,
//!   `VerdictStore`, `WorkerStore`), each documented with the rule its data keeps;
//! - [`Store`], their sum, which every backend implementing them all is (a blanket impl):
//!   callers hold an `Arc<dyn Store>` ([`DynStore`]) and never name an aggregate's trait;
//! - [`SqlBackend`] (`backend.rs`): what a backend gives the queries, and nothing else (its
//!   sqlx database, pool, text codec, clock statement, server-key sealer, head cache, and the
//!   transactions that differ: `BEGIN IMMEDIATE` on SQLite, advisory locks on PostgreSQL).
//!
//! Each query is written once, in the file of its aggregate (`audit.rs`, `users.rs`, …),
//! inside `macro_rules!` that write that aggregate's methods; `impl_store!` below expands them
//! for `SqliteStore` and again for `PostgresStore`. Macros rather than functions generic over
//! the backend because the SQL is portable (`$N` placeholders, `ON CONFLICT`, `RETURNING`) and
//! each expansion is type-checked against its own driver with no trait bounds, where a generic
//! function would need an `Encode + Type` bound for every value it binds. Connection setup and
//! migrations stay in the backend files. Row structs and their conversions are in `rows.rs`.
//! Queries are runtime-checked `sqlx::query_as`; the same test suite (`tests/api/store*.rs`)
//! runs against both databases.
use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::domain::Timestamp;
use crate::domain::accounts::{ApiToken, Role, User};
use crate::domain::admission::Caps;
use crate::domain::audit::{AuditEntry, AuditFilter, NewAuditEntry};
use crate::domain::calibers::HarnessReport;
use crate::domain::candidate::{Candidate, CandidateSpec};
use crate::domain::case_index::{IndexedCase, MarkTest};
use crate::domain::credentials::{CandidateChange, NewCandidate};
use crate::domain::evalset::{EvalCase, EvalSetFile, EvalSetHeader, TaskKind};
use crate::domain::grading::{Grade, case_passed, case_score};
use crate::domain::notify::{Delivery, DeliveryStatus, NewDelivery, Target, TargetKind, TargetSecrets, TargetSpec};
use crate::domain::oidc::{PendingLogin, ProviderConfig};
use crate::domain::operability::{ChecklistAnswers, ChecklistVersion, ProbeReport, ProbeRun};
use crate::domain::retirement::ItemKind;
use crate::domain::review::pairwise::Preference;
use crate::domain::review::{Label, LabelBody, NewReviewItem, Progress, QueuePlace, ReviewItem};
use crate::domain::run::{
    CandidateStop, ErrorClass, NewRun, Phase, RecordGroup, RequestRecord, Run, RunEvent, RunStatus, ServerTokenCount,
    UncountedRecord,
};
use crate::domain::schedule::{Firing, Schedule, ScheduleSpec};
use crate::domain::scorecard::{NewScorecard, RecordedVerdict, ScorecardListItem, ScorecardRecord, Verdict};
use crate::domain::sealed::KeySealer;
use crate::domain::telemetry::Scrape;
use crate::domain::thresholds::{ThresholdProfile, ThresholdRule};
use crate::domain::workers::{Claimant, Coordination, Decision as WorkerDecision, OpenRun, RunUnit, WorkerStatus};
use crate::domain::workload::WorkloadFile;
use crate::domain::workload::replay::ReplaySend;

mod archive;
mod audit;
mod backend;
pub use archive::{IMPORT_INCOMPLETE, OUTLINE_SELECT};
use backend::Db;
pub use backend::SqlBackend;
mod candidates;
mod evalsets;
mod notifications;
mod oidc;
mod operability;
pub mod postgres;
mod profiles;
mod records;
mod review;
mod rows;
mod runs;
mod schedules;
mod scorecards;
pub mod server_key;
mod settings;
pub mod sqlite;
mod stops;
mod telemetry;
pub mod text;
mod token_counts;
mod users;
mod verdicts;
pub use verdicts::parse_verdict;
mod workers;
mod workloads;
pub use workers::{MAX_RUNS_SETTING, PER_CANDIDATE_SETTING};

/// The store layer's one error type.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was broken, e.g. a second candidate with the same name.
    #[error("{0}")]
    Conflict(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("unsupported database URL {0:?}: use sqlite://FILE or postgres://…")]
    UnsupportedUrl(String),
    /// The server's secret key could not be read, created or used; the message says what to do.
    #[error("{0}")]
    Key(String),
    /// Stored data that no longer parses (JSON columns, enum strings).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    /// Whether the database did not answer (unreachable, connection reset, no free connection in
    /// time, shutting down), as opposed to refusing a query: worth retrying, and what pages
    /// answer with 503 rather than 500.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(e) => match e {
                sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
                sqlx::Error::Protocol(_) => true,
                // PostgreSQL connection exceptions (08…) and operator interventions such as
                // admin shutdown (57P…); SQLite's "database is locked" (5) after the busy timeout.
                sqlx::Error::Database(db) => db
                    .code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "5" || c == "6"),
                _ => false,
            },
            _ => false,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a database URL names: `sqlite:…`, or `postgres://` / `postgresql://`.
    pub fn of_url(url: &str) -> Result<Backend> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(StoreError::UnsupportedUrl(url.to_string()))
        }
    }
}

/// Whether `url` names an SQLite database that lives only in memory (nothing persists).
fn is_in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// A path beside an SQLite database file (`bakeoff.db` + `.key` → `bakeoff.db.key`); None for
/// any other database. Files that belong with the database (the server key, the records
/// writer's spill files) default to such a path.
pub fn beside_sqlite_file(database_url: &str, suffix: &str) -> Option<std::path::PathBuf> {
    let path = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    Some(std::path::PathBuf::from(format!("{path}{suffix}")))
}

/// An eval set with its newest version, for lists.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSetSummary {
    pub id: i64,
    pub name: String,
    pub task: TaskKind,
    pub description: Option<String>,
    pub latest_version_id: i64,
    pub latest_hash: String,
    pub case_count: usize,
    pub version_count: usize,
    pub updated_at: Timestamp,
}

/// One version of an eval set without its cases: the header, how many cases, when.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSetVersionHead {
    pub id: i64,
    pub evalset_id: i64,
    pub content_hash: String,
    pub header: EvalSetHeader,
    pub case_count: usize,
    pub created_at: Timestamp,
}

/// One case of an eval-set version without its input, expected value or graders.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalCaseKey {
    pub id: String,
    pub tags: Vec<String>,
    pub weight: f64,
}

/// Heads of eval-set versions read lately. A version never changes, so its head is read once:
/// on SQLite the row's columns after `content` (header, case count) sit behind the content's
/// overflow pages, thousands of them for a 100,000-case version. At most [`HeadCache::KEPT`].
#[derive(Debug, Default)]
pub struct HeadCache(
    std::sync::Mutex<Vec<EvalSetVersionHead>>,
    /// Version links per eval set, valid while the set has that many versions (versions are
    /// added, never changed or removed).
    std::sync::Mutex<Vec<(i64, Vec<EvalSetVersionLink>)>>,
);

impl HeadCache {
    const KEPT: usize = 64;

    fn links(&self, evalset_id: i64, versions: usize) -> Option<Vec<EvalSetVersionLink>> {
        let links = self.1.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        links
            .iter()
            .find(|(id, l)| *id == evalset_id && l.len() == versions)
            .map(|(_, l)| l.clone())
    }

    fn put_links(&self, evalset_id: i64, found: &[EvalSetVersionLink]) {
        let mut links = self.1.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        links.retain(|(id, _)| *id != evalset_id);
        if links.len() >= Self::KEPT {
            links.remove(0);
        }
        links.push((evalset_id, found.to_vec()));
    }

    fn get(&self, id: i64) -> Option<EvalSetVersionHead> {
        self.lock().iter().find(|h| h.id == id).cloned()
    }

    fn put(&self, head: &EvalSetVersionHead) {
        let mut heads = self.lock();
        if heads.len() >= Self::KEPT {
            heads.remove(0);
        }
        heads.push(head.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<EvalSetVersionHead>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One version of an eval set, for a list of its versions.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSetVersionLink {
    pub id: i64,
    pub content_hash: String,
    pub case_count: usize,
    pub created_at: Timestamp,
}

/// One immutable version of an eval set, with its parsed file and original text.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSetVersion {
    pub id: i64,
    pub evalset_id: i64,
    pub content_hash: String,
    pub file: EvalSetFile,
    pub created_at: Timestamp,
}

/// A run as listed, with counts that do not need the records loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct RunListItem {
    pub run: Run,
    pub evalset_name: String,
    pub candidate_names: Vec<String>,
    pub record_count: i64,
}

/// A change to a threshold profile, as kept in its history.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileChange {
    pub version: u32,
    pub changed_by: String,
    pub rationale: String,
    pub rules: Vec<ThresholdRule>,
    /// The version's SLO block (None: it has none).
    pub slo: Option<crate::domain::run::Slo>,
    pub at: Timestamp,
}

/// How far one candidate of a run has got, from stored records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateProgress {
    pub candidate_id: i64,
    /// Stored attempts excluding warm-ups (retries included).
    pub measured_attempts: i64,
    pub warmup_attempts: i64,
    /// Attempts that ended in an error.
    pub failed_attempts: i64,
}

/// Filters for the archive's run list (all optional; `terminal_only` keeps finished, failed
/// and cancelled runs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Runs of any version of this eval set.
    pub evalset_id: Option<i64>,
    /// Runs that include this candidate.
    pub candidate_id: Option<i64>,
    pub status: Option<RunStatus>,
    /// Created at or after.
    pub created_from: Option<Timestamp>,
    /// Created strictly before.
    pub created_before: Option<Timestamp>,
    pub terminal_only: bool,
    /// Runs judged by this threshold profile (any version; see [`RunVerdict`]).
    pub profile_id: Option<i64>,
    /// Runs where a candidate (the filtered one, when `candidate_id` is set) got this verdict
    /// (by `profile_id` when set, else by any profile).
    pub verdict: Option<Verdict>,
    /// Finished runs with no verdict yet by this profile (still to be judged).
    pub not_judged_by: Option<i64>,
    /// Leave out imported runs (measured elsewhere: they never overlap a run measured here).
    pub measured_here: bool,
}

/// The latest verdict of one candidate of a run by one threshold profile: judged when the run
/// finished (by the profile's version then current, no incumbent or pipeline), or taken from
/// the newest scorecard of the run saved with that profile (`scorecard_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunVerdict {
    pub run_id: i64,
    pub profile_id: i64,
    pub candidate_id: i64,
    pub profile_version: u32,
    pub verdict: Verdict,
    pub scorecard_id: Option<i64>,
    pub judged_at: Timestamp,
}

/// One stored attempt's outcome without its text or timings: enough to filter, group and
/// compare cases without loading whole records.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordFact {
    pub candidate_id: i64,
    /// Shared by the facts read at once (a run's million facts name a few thousand cases).
    pub case_id: std::sync::Arc<str>,
    pub phase: Phase,
    pub repetition: u32,
    pub attempt: u32,
    pub is_warmup: bool,
    pub error_class: Option<ErrorClass>,
    /// Whether every required grade passed; None when the attempt has no required grade.
    pub passed: Option<bool>,
}

/// A stored attempt's outcome and case score without its body (no chunks, output or grade
/// reasons): what a page needs to choose which records to read whole
/// ([`ArchiveStore::list_records_by_id`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordOutline {
    /// The record's id, to read it whole.
    pub id: i64,
    pub fact: RecordFact,
    /// The weighted mean of its grades' scores (`grading::case_score`); None without grades.
    pub score: Option<f64>,
}

/// A run as it arrives from an export: stored with its original status and times.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoredRun {
    pub run: NewRun,
    pub status: RunStatus,
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub events: Vec<RunEvent>,
}

/// A run export to store in one transaction ([`ArchiveStore::import_run`]), besides its records and
/// stops, which arrive after it ([`ImportPart`]): either all of it is stored or nothing is (no
/// candidate, eval-set version or run left behind by a refusal).
#[derive(Debug, Clone)]
pub struct RunImport {
    pub evalset: EvalSetFile,
    /// The run's candidates in order.
    pub candidates: Vec<ImportedCandidate>,
    /// The run with its status, times and events (`run.evalset_version_id` and
    /// `run.candidate_ids` are filled in by the import).
    pub restored: RestoredRun,
    pub harness: Option<HarnessReport>,
}

/// What an import hands the store after its [`RunImport`], in order: its records a batch at a
/// time, then its end. A source that closes before its end stores nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportPart {
    /// Records whose `candidate_id` is the position of their candidate in `candidates`.
    Records(Vec<RequestRecord>),
    End(ImportEnd),
}

/// What an export holds after its records, and what is known only once they were all read.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportEnd {
    /// The export's content hash (it covers the records): a second import of the same content
    /// stores nothing.
    pub content_hash: String,
    /// Stopped candidates, `candidate_id` the position as for records (`run_id` is ignored).
    pub stops: Vec<CandidateStop>,
    /// Appended to the run's event log (e.g. where it was imported from).
    pub note: String,
    /// Telemetry scrapes, each with its candidate's position as for records.
    pub telemetry: Vec<(usize, Scrape)>,
    /// A find-capacity run's searches, each with its candidate's position as for records (its
    /// `candidate_id` and its probes' `run_id` are the exporting installation's: replaced).
    pub capacity: Vec<(usize, crate::domain::capacity::CandidateCapacity)>,
}

/// One candidate of an imported run: the candidate as the export describes it (the run's
/// snapshot), and the stored candidate it is or the checked one to create.
#[derive(Debug, Clone)]
pub struct ImportedCandidate {
    pub stored: ImportedAs,
    pub spec: CandidateSpec,
}

/// Which stored candidate an imported run's candidate is.
#[derive(Debug, Clone)]
pub enum ImportedAs {
    /// This stored candidate (same name and endpoint).
    Existing(i64),
    /// A new one, its credentials checked like every other candidate's.
    New(Box<NewCandidate>),
}

/// What [`ArchiveStore::import_run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportOutcome {
    Imported(i64),
    /// The same export was imported before, as this run; nothing was stored.
    AlreadyImported(i64),
    /// The parts stopped before their end (the import refused its file half-way); nothing was
    /// stored.
    Incomplete,
}

/// What every [`Store`] method returns: the boxed `Send` future that `#[async_trait]` would
/// write, so `Store` works as `dyn Store`. Spelled out because the methods come from the query
/// macros, and `#[async_trait]` rewrites an impl before the macros inside it expand.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T>>;

/// Every query of the application: the sum of one trait per aggregate, each implemented once,
/// in the file named in its doc, for both backends (see the module comment). Callers hold an
/// `Arc<dyn Store>` and call any aggregate's method on it without importing that trait.
pub trait Store:
    AuditStore
    + UserStore
    + CandidateStore
    + EvalSetStore
    + ProfileStore
    + ScorecardStore
    + RunStore
    + SettingStore
    + StopStore
    + RecordStore
    + TokenCountStore
    + OperabilityStore
    + ArchiveStore
    + VerdictStore
    + WorkerStore
    + ReviewStore
    + ScheduleStore
    + NotificationStore
    + OidcStore
    + TelemetryStore
    + WorkloadStore
    + Send
    + Sync
    + 'static
{
    fn backend(&self) -> Backend;
}

/// Every backend that implements every aggregate is a [`Store`].
impl<T> Store for T
where
    T: SqlBackend
        + AuditStore
        + UserStore
        + CandidateStore
        + EvalSetStore
        + ProfileStore
        + ScorecardStore
        + RunStore
        + SettingStore
        + StopStore
        + RecordStore
        + TokenCountStore
        + OperabilityStore
        + ArchiveStore
        + VerdictStore
        + WorkerStore
        + ReviewStore
        + ScheduleStore
        + NotificationStore
        + OidcStore
        + TelemetryStore
        + WorkloadStore,
{
    fn backend(&self) -> Backend {
        T::KIND
    }
}

/// The audit log (`audit.rs`): append-only, the table refuses updates and deletes.
pub trait AuditStore: Send + Sync {
    /// Records one change; returns its id.
    fn append_audit<'a>(&'a self, entry: &'a NewAuditEntry) -> StoreFuture<'a, i64>;
    /// Entries matching `filter`, newest first.
    fn list_audit<'a>(&'a self, filter: &'a AuditFilter, limit: i64, offset: i64) -> StoreFuture<'a, Vec<AuditEntry>>;
    fn count_audit<'a>(&'a self, filter: &'a AuditFilter) -> StoreFuture<'a, i64>;
}

/// Accounts (`users.rs`): users, sessions, API tokens and failed logins; sessions and tokens
/// are looked up by the hash of their secret.
pub trait UserStore: Send + Sync {
    fn count_users(&self) -> StoreFuture<'_, i64>;
    /// `username` already checked and lower-cased; Conflict when it is taken.
    fn create_user<'a>(&'a self, username: &'a str, role: Role, password_hash: &'a str) -> StoreFuture<'a, i64>;
    /// By name.
    fn list_users(&self) -> StoreFuture<'_, Vec<User>>;
    fn get_user(&self, id: i64) -> StoreFuture<'_, Option<User>>;
    fn find_user<'a>(&'a self, username: &'a str) -> StoreFuture<'a, Option<User>>;
    /// The stored argon2id hash, read only to verify a password.
    fn password_hash(&self, user_id: i64) -> StoreFuture<'_, Option<String>>;
    /// NotFound when the user does not exist (so do the other user setters).
    fn set_user_role(&self, id: i64, role: Role) -> StoreFuture<'_, ()>;
    fn set_user_password<'a>(&'a self, id: i64, password_hash: &'a str) -> StoreFuture<'a, ()>;
    fn set_user_disabled(&self, id: i64, disabled: bool) -> StoreFuture<'_, ()>;
    /// Removes the user with its sessions and tokens.
    fn delete_user(&self, id: i64) -> StoreFuture<'_, ()>;
    /// A session created at `now` (expiring per `accounts::session_expiry`).
    fn create_session<'a>(&'a self, id_hash: &'a str, user_id: i64, now: Timestamp) -> StoreFuture<'a, ()>;
    /// The active user of an unexpired session; extends the session (at most once a minute).
    fn session_user<'a>(&'a self, id_hash: &'a str, now: Timestamp) -> StoreFuture<'a, Option<User>>;
    fn delete_session<'a>(&'a self, id_hash: &'a str) -> StoreFuture<'a, ()>;
    /// Ends every session of a user except `keep`; returns how many ended.
    fn delete_user_sessions<'a>(&'a self, user_id: i64, keep: Option<&'a str>) -> StoreFuture<'a, u64>;
    fn create_api_token<'a>(
        &'a self,
        user_id: i64,
        name: &'a str,
        role: Role,
        token_hash: &'a str,
    ) -> StoreFuture<'a, i64>;
    /// One user's tokens (everyone's when None), revoked ones included, by user then newest.
    fn list_api_tokens(&self, user_id: Option<i64>) -> StoreFuture<'_, Vec<ApiToken>>;
    /// The active user and unrevoked token with this hash; records its use (at most once a minute).
    fn token_user<'a>(&'a self, token_hash: &'a str, now: Timestamp) -> StoreFuture<'a, Option<(User, ApiToken)>>;
    /// Whether the token was active (and is now revoked).
    fn revoke_api_token(&self, id: i64) -> StoreFuture<'_, bool>;
    /// Revokes every active token of a user; returns how many.
    fn revoke_user_tokens(&self, user_id: i64) -> StoreFuture<'_, u64>;
    /// Failed logins in a row for this name from this address, with the last one's time.
    fn login_failures<'a>(&'a self, username: &'a str, address: &'a str) -> StoreFuture<'a, Option<(i64, Timestamp)>>;
    /// Counts one more failure; returns the count.
    fn record_login_failure<'a>(&'a self, username: &'a str, address: &'a str, now: Timestamp) -> StoreFuture<'a, i64>;
    fn clear_login_failures<'a>(&'a self, username: &'a str, address: &'a str) -> StoreFuture<'a, ()>;
    /// Applies `change` to user `id` unless it would leave no active local admin (one with a
    /// password, not made by an OIDC sign-in; checked and done in one transaction, serialised
    /// with every other such change): false when refused.
    fn change_user_keeping_an_admin(
        &self,
        id: i64,
        change: crate::domain::accounts::AdminChange,
    ) -> StoreFuture<'_, bool>;
    /// Counts a login attempt as a failure under every key before its password is checked,
    /// atomically (parallel attempts are counted one after another), unless a key's limit says
    /// it must wait: then nothing is counted but the refusal (see `domain::accounts`).
    fn reserve_login_attempt<'a>(
        &'a self,
        keys: &'a [crate::domain::accounts::ThrottleKey],
        now: Timestamp,
    ) -> StoreFuture<'a, crate::domain::accounts::Reservation>;
    /// The reserved attempt was a success: its own keys forget their failures, shared budgets
    /// take back the attempt.
    fn settle_login_success<'a>(&'a self, keys: &'a [crate::domain::accounts::ThrottleKey]) -> StoreFuture<'a, ()>;
    /// Forgets every failed login counted for `username` (its password was reset, or an admin
    /// unlocked it); returns how many counts were removed.
    fn clear_user_login_failures<'a>(&'a self, username: &'a str) -> StoreFuture<'a, u64>;
    /// Deletes failed-login counts whose last failure is before `before`; returns how many.
    fn prune_login_failures(&self, before: Timestamp) -> StoreFuture<'_, u64>;
}

/// Candidates (`candidates.rs`).
pub trait CandidateStore: Send + Sync {
    fn list_candidates(&self) -> StoreFuture<'_, Vec<Candidate>>;
    fn get_candidate(&self, id: i64) -> StoreFuture<'_, Option<Candidate>>;
    /// Conflict when the name is taken. Takes only a candidate whose credentials were checked
    /// (`domain::credentials::check_new`).
    fn create_candidate<'a>(&'a self, candidate: &'a NewCandidate) -> StoreFuture<'a, i64>;
    /// Conflict when the new name is taken; NotFound when the candidate does not exist. Takes
    /// only a change whose credentials were checked (`domain::credentials::check_change`).
    fn update_candidate<'a>(&'a self, change: &'a CandidateChange) -> StoreFuture<'a, ()>;
    /// The prompt-mode variant of candidate `of`, for a run whose tool mode is `both`
    /// (`domain::tool_calls::RunToolMode`): created as `variant` the first time, else brought up
    /// to date with it; its id. Variants are not listed by `list_candidates`.
    fn prompt_mode_variant<'a>(&'a self, of: i64, variant: &'a NewCandidate) -> StoreFuture<'a, i64>;
}

/// Eval sets (`evalsets.rs`): versions are immutable, saving an identical file returns the
/// existing one.
pub trait EvalSetStore: Send + Sync {
    /// Stores `file` as a version of the eval set named in its header, creating the set if
    /// needed. Idempotent on content hash. Returns the version id.
    fn save_evalset_version<'a>(&'a self, file: &'a EvalSetFile) -> StoreFuture<'a, i64>;
    fn list_evalsets(&self) -> StoreFuture<'_, Vec<EvalSetSummary>>;
    fn get_evalset_version(&self, version_id: i64) -> StoreFuture<'_, Option<EvalSetVersion>>;
    /// Every version of one eval set, newest first.
    fn list_evalset_versions(&self, evalset_id: i64) -> StoreFuture<'_, Vec<EvalSetVersion>>;
    /// One version's header and case count, without reading its cases (for pages that show a
    /// page of cases: a 100,000-case version is never parsed whole for them).
    fn get_evalset_version_head(&self, version_id: i64) -> StoreFuture<'_, Option<EvalSetVersionHead>>;
    /// Every version of one eval set as links (id, hash, case count, created), newest first.
    fn list_evalset_version_links(&self, evalset_id: i64) -> StoreFuture<'_, Vec<EvalSetVersionLink>>;
    /// Cases `offset..offset + limit` of a version, in file order (read from `eval_cases`).
    /// A case's graders are empty when they are the header's defaults, as in the file.
    fn list_eval_cases_page(&self, version_id: i64, offset: i64, limit: i64) -> StoreFuture<'_, Vec<EvalCase>>;
    /// Every case of a version as its key (id, tags, weight), in file order: what a run's
    /// summaries and its drill-down's order and filters need, without inputs, expected values
    /// or graders.
    fn list_eval_case_keys(&self, version_id: i64) -> StoreFuture<'_, Vec<EvalCaseKey>>;
    /// The cases of a version with these ids (in file order; ids it does not hold are skipped).
    fn list_eval_cases_by_ids<'a>(&'a self, version_id: i64, ids: &'a [String]) -> StoreFuture<'a, Vec<EvalCase>>;
}

/// Threshold profiles (`profiles.rs`): each save is a new version, history kept.
pub trait ProfileStore: Send + Sync {
    /// Creates the profile or appends a version without an SLO block; returns (profile id,
    /// version number).
    fn save_threshold_profile<'a>(
        &'a self,
        name: &'a str,
        description: &'a str,
        rules: &'a [ThresholdRule],
        changed_by: &'a str,
        rationale: &'a str,
    ) -> StoreFuture<'a, (i64, u32)> {
        self.save_threshold_profile_with_slo(name, description, rules, None, changed_by, rationale)
    }
    /// Creates the profile or appends a version with its SLO block (None: none); returns
    /// (profile id, version number).
    fn save_threshold_profile_with_slo<'a>(
        &'a self,
        name: &'a str,
        description: &'a str,
        rules: &'a [ThresholdRule],
        slo: Option<&'a crate::domain::run::Slo>,
        changed_by: &'a str,
        rationale: &'a str,
    ) -> StoreFuture<'a, (i64, u32)>;
    fn list_threshold_profiles(&self) -> StoreFuture<'_, Vec<ThresholdProfile>>;
    fn threshold_profile_history(&self, profile_id: i64) -> StoreFuture<'_, Vec<ProfileChange>>;
    /// One profile at `version` (its current version when None), with that version's
    /// description and rules.
    fn get_threshold_profile(&self, profile_id: i64, version: Option<u32>)
    -> StoreFuture<'_, Option<ThresholdProfile>>;
}

/// Archived scorecards (`scorecards.rs`): never updated, the verdict is recomputed from
/// records.
pub trait ScorecardStore: Send + Sync {
    /// NotFound when the run, the profile version or the incumbent does not exist.
    fn save_scorecard<'a>(&'a self, scorecard: &'a NewScorecard) -> StoreFuture<'a, i64>;
    fn get_scorecard(&self, id: i64) -> StoreFuture<'_, Option<ScorecardRecord>>;
    /// Newest first.
    fn list_scorecards(&self, limit: i64, offset: i64) -> StoreFuture<'_, Vec<ScorecardListItem>>;
    fn count_scorecards(&self) -> StoreFuture<'_, i64>;
    /// The scorecards archived for one run, newest first.
    fn list_run_scorecards(&self, run_id: i64) -> StoreFuture<'_, Vec<ScorecardListItem>>;
}

/// Runs and their event logs (`runs.rs`).
pub trait RunStore: Send + Sync {
    /// Stores the run with a snapshot of each candidate as it is now (see `run_candidates`).
    fn create_run<'a>(&'a self, run: &'a NewRun) -> StoreFuture<'a, i64>;
    fn get_run(&self, id: i64) -> StoreFuture<'_, Option<Run>>;
    /// The run's candidates as the run measured them: the snapshot taken when it was created
    /// (name, provider, base URL without password, model, parameters, conditions, prices,
    /// claimed figure; never the API key), in the run's order. Archived views, exports, costs
    /// and verdicts read these, so editing a candidate later changes nothing of the run.
    fn run_candidates(&self, run_id: i64) -> StoreFuture<'_, Vec<Candidate>>;
    /// Newest first.
    fn list_runs(&self, limit: i64, offset: i64) -> StoreFuture<'_, Vec<RunListItem>>;
    fn count_runs(&self) -> StoreFuture<'_, i64>;
    /// Sets status, and started_at/finished_at when entering running/terminal states.
    fn set_run_status<'a>(&'a self, id: i64, status: RunStatus, error: Option<&'a str>) -> StoreFuture<'a, ()>;
    /// Runs left queued, running or paused (to resume after a restart).
    fn unfinished_runs(&self) -> StoreFuture<'_, Vec<i64>>;
    /// Stores the harness's self-report for a run, replacing an earlier one (a resumed run
    /// reports again). NotFound when the run does not exist.
    fn set_run_harness<'a>(&'a self, run_id: i64, harness: &'a HarnessReport) -> StoreFuture<'a, ()>;
    /// The run's harness report; None when none was stored (or the run does not exist).
    fn get_run_harness(&self, run_id: i64) -> StoreFuture<'_, Option<HarnessReport>>;
    fn append_run_event<'a>(&'a self, run_id: i64, level: &'a str, message: &'a str) -> StoreFuture<'a, ()>;
    fn list_run_events(&self, run_id: i64) -> StoreFuture<'_, Vec<RunEvent>>;
    /// Stores a candidate's capacity search within a find-capacity run, replacing the one stored
    /// before (written after each probe). NotFound when the run does not exist.
    fn save_run_capacity<'a>(
        &'a self,
        run_id: i64,
        search: &'a crate::domain::capacity::CandidateCapacity,
    ) -> StoreFuture<'a, ()>;
    /// The run's capacity searches, in the run's candidate order (none for other runs).
    fn list_run_capacity(&self, run_id: i64) -> StoreFuture<'_, Vec<crate::domain::capacity::CandidateCapacity>>;
}

/// Team settings and retired items (`settings.rs`).
pub trait SettingStore: Send + Sync {
    /// A team setting's value (see `domain::retirement::DEFAULT_PROFILE_SETTING`).
    fn get_setting<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<String>>;
    fn set_setting<'a>(&'a self, name: &'a str, value: &'a str, changed_by: &'a str) -> StoreFuture<'a, ()>;
    /// Marks an item retired; false when it already was.
    fn retire_item<'a>(&'a self, kind: ItemKind, id: i64, retired_by: &'a str) -> StoreFuture<'a, bool>;
    /// Takes an item out of retirement; false when it was not retired.
    fn restore_item(&self, kind: ItemKind, id: i64) -> StoreFuture<'_, bool>;
    /// The ids of the retired items of one kind, ascending.
    fn list_retired(&self, kind: ItemKind) -> StoreFuture<'_, Vec<i64>>;
    /// Deletes an item nothing refers to (no run measured it, no saved scorecard names it), in
    /// one transaction; Some(why) when something does, and nothing is deleted. NotFound when
    /// there is no such item.
    fn delete_unused_item(&self, kind: ItemKind, id: i64) -> StoreFuture<'_, Option<String>>;
}

/// Candidates stopped within a run (`stops.rs`): one per run and candidate, never changed.
pub trait StopStore: Send + Sync {
    /// Stores that a candidate of a run was stopped; false when it already was (the first stop
    /// stands). NotFound when the run does not exist.
    fn save_candidate_stop<'a>(&'a self, stop: &'a CandidateStop) -> StoreFuture<'a, bool>;
    /// The run's stopped candidates, in the order they stopped.
    fn list_candidate_stops(&self, run_id: i64) -> StoreFuture<'_, Vec<CandidateStop>>;
}

/// Raw records (`records.rs`): append-only.
pub trait RecordStore: Send + Sync {
    /// Inserts records and their grades in one transaction. A record whose key
    /// (run, candidate, case, phase, repetition, attempt) already exists is skipped, so a
    /// retried batch never duplicates. Returns how many were new.
    fn append_request_records<'a>(&'a self, records: &'a [RequestRecord]) -> StoreFuture<'a, u64>;
    /// All records of a run with their grades, in send order. Records counted by the server's
    /// tokenizer carry that count (source `server-tokenizer`), here and in every other read.
    fn list_request_records(&self, run_id: i64) -> StoreFuture<'_, Vec<RequestRecord>>;
    /// One candidate's records of a run with their grades, in send order (as
    /// [`RecordStore::list_request_records`] reads them), each cut for summaries as it is read
    /// ([`RequestRecord::cut_for_summaries`]: no answer or reasoning text) and then handed to
    /// `each` (which may feed it to figures and let part of it go) before the next page is read.
    fn candidate_records_for_summaries<'a>(
        &'a self,
        run_id: i64,
        candidate_id: i64,
        each: &'a mut (dyn FnMut(&mut RequestRecord) + Send),
    ) -> StoreFuture<'a, Vec<RequestRecord>>;
    /// How many records of `candidate_id` the run stored under each (phase, warm-up, repetition,
    /// concurrency): counted with the same rows [`RecordStore::candidate_records_for_summaries`] reads.
    fn record_groups(&self, run_id: i64, candidate_id: i64) -> StoreFuture<'_, Vec<RecordGroup>>;
    /// (first send, last end) of a run's measured records (warm-ups left out), wall clock µs;
    /// None before any: the axis its charts over time share.
    fn measured_span(&self, run_id: i64) -> StoreFuture<'_, Option<(i64, i64)>>;
    /// Adds grades to a stored record (found by its key; NotFound when absent) at positions
    /// `first_position`, `first_position + 1`, …, in one statement. Grades are never updated:
    /// a position already graded is skipped, so a repeated call adds nothing. Returns how many
    /// were new. (Grades that need a model call, `llm-judge`, arrive after their record.)
    fn append_grades<'a>(
        &'a self,
        record: &'a RequestRecord,
        first_position: u32,
        grades: &'a [Grade],
    ) -> StoreFuture<'a, u64>;
    /// Counts of stored records per candidate, for progress bars without loading records.
    fn run_progress(&self, run_id: i64) -> StoreFuture<'_, Vec<CandidateProgress>>;
}

/// Server-tokenizer counts (`token_counts.rs`): append-only, applied whenever records are
/// read.
pub trait TokenCountStore: Send + Sync {
    /// Measured records of one candidate of a run with generated text, no `usage` count and no
    /// server-tokenizer count yet, in send order.
    fn uncounted_records(&self, run_id: i64, candidate_id: i64) -> StoreFuture<'_, Vec<UncountedRecord>>;
    /// Stores server-tokenizer counts beside their records (append-only; a record already
    /// counted keeps its first count). Returns how many were new.
    fn save_server_token_counts<'a>(&'a self, run_id: i64, counts: &'a [ServerTokenCount]) -> StoreFuture<'a, u64>;
}

/// Operability (`operability.rs`): append-only probe runs, and checklist answers versioned
/// like thresholds.
pub trait OperabilityStore: Send + Sync {
    /// Stores one probe report for a candidate; NotFound when the candidate does not exist.
    fn save_probe_run<'a>(&'a self, candidate_id: i64, report: &'a ProbeReport) -> StoreFuture<'a, i64>;
    /// A candidate's probe runs, newest first, at most `limit`.
    fn list_probe_runs(&self, candidate_id: i64, limit: i64) -> StoreFuture<'_, Vec<ProbeRun>>;
    /// Appends a version of a candidate's checklist answers; returns its version number (1, 2, …).
    fn save_checklist<'a>(
        &'a self,
        candidate_id: i64,
        answers: &'a ChecklistAnswers,
        changed_by: &'a str,
        rationale: &'a str,
    ) -> StoreFuture<'a, u32>;
    /// Every version of a candidate's checklist, newest first.
    fn checklist_history(&self, candidate_id: i64) -> StoreFuture<'_, Vec<ChecklistVersion>>;
}

/// The archive, drill-down and export/import (`archive.rs`): runs are immutable once
/// terminal.
pub trait ArchiveStore: Send + Sync {
    /// Runs matching `filter`, newest first.
    fn list_runs_filtered<'a>(
        &'a self,
        filter: &'a RunFilter,
        limit: i64,
        offset: i64,
    ) -> StoreFuture<'a, Vec<RunListItem>>;
    fn count_runs_filtered<'a>(&'a self, filter: &'a RunFilter) -> StoreFuture<'a, i64>;
    /// Brings the database's planner statistics and page visibility of the record tables (and
    /// the run case tables) up to date (PostgreSQL: `VACUUM (ANALYZE)`), so the reads of a run
    /// that just ended plan as its size asks and its outlines are read from indexes alone.
    fn refresh_record_statistics(&self) -> StoreFuture<'_, ()>;
    /// Every attempt of a run without text or timings, in send order.
    fn list_record_facts(&self, run_id: i64) -> StoreFuture<'_, Vec<RecordFact>>;
    /// The full records (with grades) of the given cases of a run, in send order.
    fn list_case_records<'a>(&'a self, run_id: i64, case_ids: &'a [String]) -> StoreFuture<'a, Vec<RequestRecord>>;
    /// The outlines of the given cases' records of a run, in send order: what a page reads to
    /// choose the few records it shows whole (a case may hold thousands of attempts).
    fn list_case_outlines<'a>(&'a self, run_id: i64, case_ids: &'a [String]) -> StoreFuture<'a, Vec<RecordOutline>>;
    /// The full records (with grades) of a run with these ids, each with its id, in send
    /// order; ids of other runs or of no record are left out.
    fn list_records_by_id<'a>(&'a self, run_id: i64, ids: &'a [i64]) -> StoreFuture<'a, Vec<(i64, RequestRecord)>>;
    /// Up to `limit` records of a run stored after record `after_id` (0: from the first), in
    /// storage order, each with its id (the cursor of the next page) and its grades.
    fn list_request_records_page(
        &self,
        run_id: i64,
        after_id: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, RequestRecord)>>;
    /// Up to `limit` records of a run after position `after` (sent_at_us, id; None: from the
    /// first) in send order (as [`RecordStore::list_request_records`] lists them), each with its
    /// position (the cursor of the next page) and its grades.
    fn list_request_records_sent_after(
        &self,
        run_id: i64,
        after: Option<(i64, i64)>,
        limit: i64,
    ) -> StoreFuture<'_, Vec<((i64, i64), RequestRecord)>>;
    /// Of the given cases of a run, those where some successful, measured output was not given
    /// by every candidate that answered the case (the candidates' sets of outputs differ); by
    /// case id. One statement: a caller asks a run's cases a batch at a time.
    fn cases_with_differing_outputs<'a>(&'a self, run_id: i64, case_ids: &'a [String]) -> StoreFuture<'a, Vec<String>>;
    /// Cases of a run whose id, stored input or expected value (in eval-set version
    /// `version_id`) or whose measured output contains `text`, ignoring case (SQLite: ASCII letters only); by case id.
    fn search_run_cases<'a>(&'a self, run_id: i64, version_id: i64, text: &'a str) -> StoreFuture<'a, Vec<String>>;
    /// Stores an imported run with its original status, times, candidates and event log (its
    /// records are appended afterwards). The run is stored as failed with an "import did not
    /// complete" error until [`ArchiveStore::complete_restore`] sets its real outcome, so an
    /// interrupted import is never mistaken for a whole run (nor resumed).
    fn restore_run<'a>(&'a self, restored: &'a RestoredRun) -> StoreFuture<'a, i64>;
    /// Stores an export in one transaction: `import`, then what `parts` brings (records, then
    /// the end); AlreadyImported (storing nothing) when an export with the same content hash was
    /// imported before, Incomplete (storing nothing) when `parts` closes before its end.
    fn import_run<'a>(
        &'a self,
        import: &'a RunImport,
        parts: &'a mut tokio::sync::mpsc::Receiver<ImportPart>,
    ) -> StoreFuture<'a, ImportOutcome>;
    /// The content hash of the export a run was imported from; None for a run measured here.
    fn run_import_hash(&self, run_id: i64) -> StoreFuture<'_, Option<String>>;
    /// Sets a restored run's real status, error and times once all its records are stored.
    fn complete_restore<'a>(&'a self, id: i64, restored: &'a RestoredRun) -> StoreFuture<'a, ()>;
    /// Deletes a run with everything it owns (records, grades, events, summaries).
    fn delete_run(&self, id: i64) -> StoreFuture<'_, ()>;
    /// A cached summary of a terminal run (`kind` names what it holds, versioned by its writer).
    fn get_run_summary<'a>(&'a self, run_id: i64, kind: &'a str) -> StoreFuture<'a, Option<String>>;
    /// Caches a summary; a second save for the same (run, kind) replaces the first.
    fn save_run_summary<'a>(&'a self, run_id: i64, kind: &'a str, body: &'a str) -> StoreFuture<'a, ()>;
    /// Stores a terminal run's cases in page order with their marks, and its summary `kind`
    /// (the index's head), in one transaction, replacing any stored before: a reader that finds
    /// the summary finds the cases.
    fn save_run_cases<'a>(
        &'a self,
        run_id: i64,
        cases: &'a [IndexedCase],
        kind: &'a str,
        head: &'a str,
    ) -> StoreFuture<'a, ()>;
    /// Of a run's stored cases, those passing every test, in page order: how many, and their
    /// ids from `page` (offset, most) on (None: all of them).
    fn page_run_cases<'a>(
        &'a self,
        run_id: i64,
        tests: &'a [MarkTest],
        page: Option<(u64, u64)>,
    ) -> StoreFuture<'a, (u64, Vec<String>)>;
}

/// Verdicts by threshold profile (`verdicts.rs`): archive filters; saving a scorecard also
/// writes them.
pub trait VerdictStore: Send + Sync {
    /// Replaces the run's verdicts by the profile with these, judged by `profile_version`
    /// (automatic: no scorecard). NotFound when the run or the profile does not exist.
    fn save_run_verdicts<'a>(
        &'a self,
        run_id: i64,
        profile_id: i64,
        profile_version: u32,
        verdicts: &'a [RecordedVerdict],
    ) -> StoreFuture<'a, ()>;
    /// The verdicts of the given runs by one profile, by run then candidate.
    fn list_run_verdicts<'a>(&'a self, run_ids: &'a [i64], profile_id: i64) -> StoreFuture<'a, Vec<RunVerdict>>;
    /// Finished runs with no verdict yet by some profile, as (run id, profile id), oldest run
    /// first, at most `limit`.
    fn unjudged_runs(&self, limit: i64) -> StoreFuture<'_, Vec<(i64, i64)>>;
}

/// Measurement workers, run units and leases (`workers.rs`): times are the database's clock.
pub trait WorkerStore: Send + Sync {
    /// The database's clock, ms since the epoch.
    fn database_now(&self) -> StoreFuture<'_, Timestamp>;
    /// Writes the worker's heartbeat row and renews the leases it holds for `lease_ms` more;
    /// returns the units still leased to it, (run, seq). A unit it measures that is missing
    /// was taken over by another worker after its lease ran out.
    fn worker_beat<'a>(&'a self, worker: &'a WorkerStatus, lease_ms: i64) -> StoreFuture<'a, Vec<(i64, u32)>>;
    /// Every worker that ever beat, by name.
    fn list_workers(&self) -> StoreFuture<'_, Vec<WorkerStatus>>;
    /// In one serialised transaction: reads every queued or running run with its units, the
    /// caps (team settings, else `caps`) and candidates' labels, decides what `me` takes
    /// (`domain::workers::decide`), and leases it for `lease_ms` (writing a newly admitted
    /// run's units). Returns the decision, with the queue as it stood.
    fn claim_unit<'a>(&'a self, me: &'a Claimant, caps: Caps, lease_ms: i64) -> StoreFuture<'a, WorkerDecision>;
    /// Hands a stored run to the workers: from now on it is in the queue (a run never started is
    /// not, so it holds up nobody). Idempotent.
    fn request_run(&self, run_id: i64) -> StoreFuture<'_, ()>;
    /// Marks a unit done with its harness report; false when `worker` no longer holds it.
    fn finish_unit<'a>(
        &'a self,
        run_id: i64,
        seq: u32,
        worker: &'a str,
        harness: Option<&'a HarnessReport>,
    ) -> StoreFuture<'a, bool>;
    /// Stores a split load's share's clock offset to the database's clock and the round trip it
    /// was measured over (ms).
    fn set_unit_clock(&self, run_id: i64, seq: u32, offset_ms: f64, rtt_ms: f64) -> StoreFuture<'_, ()>;
    /// Gives up a run's slot: its units not done are removed (a run that paused, failed or was
    /// cancelled; resuming admits it again, and its done units stay done).
    fn release_run_slot(&self, run_id: i64) -> StoreFuture<'_, ()>;
    /// A run's units, by seq.
    fn list_run_units(&self, run_id: i64) -> StoreFuture<'_, Vec<RunUnit>>;
    /// The labels each candidate needs a worker to carry (candidates needing none are absent).
    fn candidate_worker_labels(&self) -> StoreFuture<'_, Vec<(i64, Vec<String>)>>;
    /// Sets the labels a candidate needs (none: any worker measures it).
    fn set_candidate_worker_labels<'a>(&'a self, candidate_id: i64, labels: &'a [String]) -> StoreFuture<'a, ()>;
}

/// The review queue, labels and blind preferences (`review.rs`; issue 50): an item is one
/// answer of a run, stored once; a label is one labeller's latest word on an item (saving one
/// marks the item labelled); preferences are append-only.
pub trait ReviewStore: Send + Sync {
    /// Adds the items not yet queued (same run, candidate, case and repetition); returns how
    /// many were added. NotFound when the run does not exist (nothing is added).
    fn add_review_items<'a>(&'a self, items: &'a [NewReviewItem], now: Timestamp) -> StoreFuture<'a, u64>;
    /// One run's items (every run's when None), by id, at most `limit`.
    fn list_review_items(&self, run_id: Option<i64>, limit: i64) -> StoreFuture<'_, Vec<ReviewItem>>;
    /// One page of a queue (every run's when None), by id: `offset` items passed over, at most
    /// `limit` read.
    fn list_review_items_page(&self, run_id: Option<i64>, offset: i64, limit: i64) -> StoreFuture<'_, Vec<ReviewItem>>;
    /// A queue's counts by status and its items whose labellers disagree, counted in SQL.
    fn review_progress(&self, run_id: Option<i64>) -> StoreFuture<'_, Progress>;
    /// The items offered to `who` next ([`ReviewItem::offered_to`]), in the queue's order (open
    /// and claimed by id, then skipped by id), after the place `after` (None: from the start), at
    /// most `limit`: the order `domain::review::next_for` gives, read a page at a time.
    fn offered_review_items<'a>(
        &'a self,
        run_id: Option<i64>,
        who: &'a str,
        after: Option<QueuePlace>,
        limit: i64,
    ) -> StoreFuture<'a, Vec<ReviewItem>>;
    fn get_review_item(&self, id: i64) -> StoreFuture<'_, Option<ReviewItem>>;
    /// Claims an item for `who`: false when it is labelled, claimed by another, assigned to
    /// another, or missing.
    fn claim_review_item<'a>(&'a self, id: i64, who: &'a str) -> StoreFuture<'a, bool>;
    /// Puts an item aside (releasing `who`'s claim): false when it is labelled, claimed by
    /// another, or missing.
    fn skip_review_item<'a>(&'a self, id: i64, who: &'a str) -> StoreFuture<'a, bool>;
    /// Assigns an item to a user (None: to anyone); false when it is missing.
    fn assign_review_item<'a>(&'a self, id: i64, assignee: Option<&'a str>) -> StoreFuture<'a, bool>;
    /// Saves `labeller`'s label on an item (replacing their earlier one) and marks the item
    /// labelled, in one transaction; returns the label's id. NotFound when the item is missing.
    fn save_review_label<'a>(
        &'a self,
        item_id: i64,
        labeller: &'a str,
        body: &'a LabelBody,
        now: Timestamp,
    ) -> StoreFuture<'a, i64>;
    /// The labels on one run's items (every run's when None), by item then time.
    fn list_review_labels(&self, run_id: Option<i64>) -> StoreFuture<'_, Vec<Label>>;
    /// The labels on the items with ids from `first` to `last` (of one run when given), by item
    /// then time: a page's labels.
    fn list_review_labels_between(&self, run_id: Option<i64>, first: i64, last: i64) -> StoreFuture<'_, Vec<Label>>;
    /// Appends one blind comparison of a run; NotFound when the run does not exist.
    fn save_preference<'a>(&'a self, run_id: i64, preference: &'a Preference, now: Timestamp) -> StoreFuture<'a, i64>;
    /// One run's comparisons (every run's when None), in the order they were made.
    fn list_preferences(&self, run_id: Option<i64>) -> StoreFuture<'_, Vec<Preference>>;
}

/// Schedules and their firings (`schedules.rs`): a due time is claimed once (its primary key),
/// and the run it starts is created in the same transaction, so no due time makes two runs.
pub trait ScheduleStore: Send + Sync {
    /// Saves a new schedule; Conflict when the name is taken.
    fn create_schedule<'a>(&'a self, spec: &'a ScheduleSpec) -> StoreFuture<'a, i64>;
    /// Replaces a schedule's spec; `recount`: due times until now are no longer owed (its
    /// timing changed, or it was paused and resumes).
    fn update_schedule<'a>(&'a self, id: i64, spec: &'a ScheduleSpec, recount: bool) -> StoreFuture<'a, ()>;
    fn list_schedules(&self) -> StoreFuture<'_, Vec<Schedule>>;
    fn get_schedule(&self, id: i64) -> StoreFuture<'_, Option<Schedule>>;
    /// Deletes a schedule and its firings (its runs stay); false when there was none.
    fn delete_schedule(&self, id: i64) -> StoreFuture<'_, bool>;
    /// The latest due time claimed for a schedule.
    fn last_firing_due(&self, schedule_id: i64) -> StoreFuture<'_, Option<Timestamp>>;
    /// Claims `firing`'s due time and, with `run`, creates that run (queued) in the same
    /// transaction. None: the due time was claimed already (by this or another process).
    fn claim_firing<'a>(&'a self, firing: &'a Firing, run: Option<&'a NewRun>) -> StoreFuture<'a, Option<Firing>>;
    /// A schedule's firings, latest due time first.
    fn list_firings(&self, schedule_id: i64, limit: i64) -> StoreFuture<'_, Vec<Firing>>;
    /// The firing that created run `run_id`, if a schedule did.
    fn firing_of_run(&self, run_id: i64) -> StoreFuture<'_, Option<Firing>>;
}

/// Notification targets and the delivery log (`notifications.rs`): a target's secret and a
/// Slack URL are sealed (bound to the target) and opened only to deliver; a (target, event) is
/// queued once, and a delivery is leased to one sender at a time.
pub trait NotificationStore: Send + Sync {
    /// Saves a target, sealing its secrets; Conflict when the name is taken.
    fn create_target<'a>(&'a self, spec: &'a TargetSpec) -> StoreFuture<'a, i64>;
    fn list_targets(&self) -> StoreFuture<'_, Vec<Target>>;
    /// Deletes a target and its delivery log; false when there was none.
    fn delete_target(&self, id: i64) -> StoreFuture<'_, bool>;
    /// The URL and secret a delivery needs, opened. Never shown, logged or exported.
    fn target_secrets(&self, id: i64) -> StoreFuture<'_, Option<TargetSecrets>>;
    /// Queues a message; false when this target had this event already (never sent twice).
    fn enqueue_delivery<'a>(&'a self, delivery: &'a NewDelivery) -> StoreFuture<'a, bool>;
    /// The next delivery due at `now`, leased for `lease_ms` to the caller, with its body.
    fn claim_due_delivery<'a>(&'a self, now: Timestamp, lease_ms: i64) -> StoreFuture<'a, Option<(Delivery, String)>>;
    /// Records an attempt: delivered, or pending again at `next_attempt_at`, or given up.
    fn finish_delivery<'a>(
        &'a self,
        id: i64,
        status: DeliveryStatus,
        next_attempt_at: Timestamp,
        error: Option<&'a str>,
    ) -> StoreFuture<'a, ()>;
    /// The delivery log, newest first (one target's, or every target's).
    fn list_deliveries(&self, target_id: Option<i64>, limit: i64) -> StoreFuture<'_, Vec<Delivery>>;
}

/// Sign-in through an OpenID Connect provider (`oidc.rs`): the provider an admin configured
/// (its client secret sealed), logins under way (each taken once), and the accounts sign-ins
/// made (found by their provider subject; no password verifies for them).
pub trait OidcStore: Send + Sync {
    /// The provider and whether a client secret is stored.
    fn oidc_provider(&self) -> StoreFuture<'_, Option<(ProviderConfig, bool)>>;
    /// Saves the provider; `secret` None keeps the stored client secret.
    fn save_oidc_provider<'a>(
        &'a self,
        config: &'a ProviderConfig,
        secret: Option<&'a str>,
        by: &'a str,
    ) -> StoreFuture<'a, ()>;
    /// Removes the provider (sign-in with it stops; its accounts stay); false when none was set.
    fn delete_oidc_provider(&self) -> StoreFuture<'_, bool>;
    /// The client secret, opened. Never shown, logged or exported.
    fn oidc_client_secret(&self) -> StoreFuture<'_, Option<String>>;
    /// Keeps a login under way by the SHA-256 of its state (and drops ones too old to finish).
    fn create_oidc_login<'a>(&'a self, state_hash: &'a str, login: &'a PendingLogin) -> StoreFuture<'a, ()>;
    /// Takes the login of this state: deleted as it is read, so a state (and its nonce) works once.
    fn take_oidc_login<'a>(&'a self, state_hash: &'a str) -> StoreFuture<'a, Option<PendingLogin>>;
    /// The account of a provider subject (`issuer|sub`).
    fn oidc_user<'a>(&'a self, subject: &'a str) -> StoreFuture<'a, Option<User>>;
    /// Creates the account of a first sign-in (disabled: waiting for an admin's role); Conflict
    /// when the name is taken.
    fn create_oidc_user<'a>(
        &'a self,
        username: &'a str,
        role: Role,
        disabled: bool,
        subject: &'a str,
    ) -> StoreFuture<'a, i64>;
    /// The ids of local accounts (made with a password, not by a sign-in).
    fn local_users(&self) -> StoreFuture<'_, Vec<i64>>;
}

/// Telemetry scrapes of runs (`telemetry.rs`): append-only.
pub trait TelemetryStore: Send + Sync {
    /// Stores scrapes of one candidate of a run in one transaction; NotFound when the run has no
    /// such candidate. Returns how many were stored.
    fn append_telemetry_scrapes<'a>(
        &'a self,
        run_id: i64,
        candidate_id: i64,
        scrapes: &'a [Scrape],
    ) -> StoreFuture<'a, u64>;
    /// A candidate's scrapes of a run in time order (at most `telemetry::MAX_SCRAPES_READ`).
    fn list_telemetry_scrapes(&self, run_id: i64, candidate_id: i64) -> StoreFuture<'_, Vec<Scrape>>;
}

/// Workloads and their immutable versions (`workloads.rs`).
pub trait WorkloadStore: Send + Sync {
    /// Stores `file` as a version of the workload its header names (created when new): the
    /// version's id and whether it was written (false: an identical version was stored already,
    /// and nothing changed).
    fn save_workload_version<'a>(&'a self, file: &'a WorkloadFile) -> StoreFuture<'a, (i64, bool)>;
    /// Every workload with its newest version, by name.
    fn list_workloads(&self) -> StoreFuture<'_, Vec<WorkloadListItem>>;
    /// A workload's versions, newest first, without their content.
    fn list_workload_versions(&self, workload_id: i64) -> StoreFuture<'_, Vec<WorkloadVersionLink>>;
    /// One version with its whole file.
    fn get_workload_version(&self, version_id: i64) -> StoreFuture<'_, Option<WorkloadVersion>>;
    /// Stores what a replay level sent (one row per candidate and workload request; a request
    /// sent again after a restart replaces its row), in one transaction.
    fn save_replay_sends<'a>(&'a self, run_id: i64, sends: &'a [ReplaySend]) -> StoreFuture<'a, ()>;
    /// Every replay send of a run, by candidate and request.
    fn list_replay_sends(&self, run_id: i64) -> StoreFuture<'_, Vec<ReplaySend>>;
}

/// A workload with its newest version, for lists.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadListItem {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub latest_version_id: i64,
    pub version_count: usize,
    pub latest: WorkloadVersionLink,
    pub updated_at: Timestamp,
}

/// One version of a workload without its requests.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadVersionLink {
    pub id: i64,
    pub content_hash: String,
    pub requests: usize,
    pub duration_ms: f64,
    /// `Source::as_str`.
    pub source: String,
    pub keeps_text: bool,
    pub created_at: Timestamp,
}

/// One version of a workload with its file.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadVersion {
    pub id: i64,
    pub workload_id: i64,
    pub content_hash: String,
    pub file: WorkloadFile,
    pub created_at: Timestamp,
}

/// Implements every aggregate's trait (hence [`Store`]) for one backend `$store` from the
/// aggregates' query macros, which reach the backend only through [`SqlBackend`]. The macros
/// expand here, so the paths inside them are written as seen from this module.
macro_rules! impl_store {
    ($store:ty) => {
        // Queries used by more than one method, some of them of other aggregates.
        impl $store {
            runs::run_helpers!();
            records::record_write_helpers!();
            records::record_read_helpers!();
            archive::archive_read_helpers!();
            archive::import_helpers!();
            archive::import_end_helpers!();
            token_counts::token_count_helpers!();
            verdicts::verdict_helpers!();
            operability::operability_helpers!();
            candidates::candidate_helpers!();
            evalsets::evalset_helpers!();
            workers::claim_helpers!();
            telemetry::telemetry_helpers!();
        }

        impl AuditStore for $store {
            audit::audit_queries!();
        }

        impl UserStore for $store {
            users::user_queries!();
            users::session_queries!();
            users::token_queries!();
            users::admin_queries!();
            users::login_queries!();
        }

        impl CandidateStore for $store {
            candidates::candidate_queries!();
        }

        impl EvalSetStore for $store {
            evalsets::evalset_queries!();
            evalsets::eval_case_queries!();
        }

        impl ProfileStore for $store {
            profiles::profile_queries!();
        }

        impl ScorecardStore for $store {
            scorecards::scorecard_queries!();
        }

        impl RunStore for $store {
            runs::run_queries!();
            runs::run_state_queries!();
        }

        impl SettingStore for $store {
            settings::setting_queries!();
        }

        impl StopStore for $store {
            stops::stop_queries!();
        }

        impl RecordStore for $store {
            records::record_write_queries!();
            records::record_read_queries!();
        }

        impl TokenCountStore for $store {
            token_counts::token_count_queries!();
        }

        impl OperabilityStore for $store {
            operability::operability_queries!();
        }

        impl ArchiveStore for $store {
            archive::archive_list_queries!();
            archive::drill_down_queries!();
            archive::transfer_queries!();
            archive::run_case_queries!();
        }

        impl VerdictStore for $store {
            verdicts::verdict_queries!();
        }

        impl WorkerStore for $store {
            workers::worker_queries!();
            workers::unit_queries!();
        }

        impl ReviewStore for $store {
            review::review_queries!();
        }

        impl ScheduleStore for $store {
            schedules::schedule_queries!();
        }

        impl NotificationStore for $store {
            notifications::notification_queries!();
        }

        impl OidcStore for $store {
            oidc::oidc_queries!();
        }

        impl TelemetryStore for $store {
            telemetry::telemetry_queries!();
        }

        impl WorkloadStore for $store {
            workloads::workload_queries!();
        }
    };
}

impl_store!(sqlite::SqliteStore);
impl_store!(postgres::PostgresStore);

pub type DynStore = Arc<dyn Store>;

/// Opens (creating if needed) and migrates the database named by `url`, with the server key
/// from the environment or the key file beside it (see [`server_key::from_environment`]).
pub async fn connect(url: &str) -> Result<DynStore> {
    // The scheme is checked before the key is loaded: a URL we cannot open must not create a key
    // file (nor be refused for an unrelated key problem).
    Backend::of_url(url)?;
    connect_with_key(url, &server_key::from_environment(url)?).await
}

/// Opens and migrates the database named by `url`; API keys are sealed with `key`, and any
/// still stored in plaintext (from before sealing) are sealed now.
pub async fn connect_with_key(url: &str, key: &server_key::ServerKey) -> Result<DynStore> {
    let sealer = KeySealer::new(&key.sealing_key());
    match Backend::of_url(url)? {
        Backend::Sqlite => {
            let store = sqlite::SqliteStore::connect(url, sealer).await?;
            store.seal_plaintext_keys().await?;
            store.backfill_run_snapshots().await?;
            Ok(Arc::new(store))
        }
        Backend::Postgres => {
            let store = postgres::PostgresStore::connect(url, sealer).await?;
            store.seal_plaintext_keys().await?;
            store.backfill_run_snapshots().await?;
            Ok(Arc::new(store))
        }
    }
}

// The layers below, under the names the code has always used (`crate::domain::…`).
use bakeoff_domain as domain;
pub use bakeoff_domain::VERSION;
