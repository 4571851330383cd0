//! The audit log: who changed what and when. Entries are only ever appended.
use serde::Serialize;

use super::Timestamp;

/// One change, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    /// Milliseconds since the epoch.
    pub at: Timestamp,
    /// Who: a user name, or the single-user mode's local user.
    pub actor: String,
    /// What, as `thing.verb`, e.g. `candidate.key_cleared` (see [`Action`]).
    pub action: String,
    /// Which, e.g. `candidate #3 "fast"`.
    pub target: String,
    /// Anything else worth keeping (a rationale, what changed); never a secret.
    pub detail: String,
}

/// A change to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAuditEntry {
    pub actor: String,
    pub action: Action,
    pub target: String,
    pub detail: String,
}

/// Every kind of change the log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    CandidateCreated,
    CandidateUpdated,
    CandidateKeySet,
    CandidateKeyCleared,
    EvalSetSaved,
    ThresholdProfileSaved,
    ChecklistSaved,
    ProbesRun,
    SoakStarted,
    RunStarted,
    RunCancelled,
    RunImported,
    ScorecardSaved,
    UserCreated,
    UserRoleChanged,
    UserPasswordChanged,
    UserPasswordReset,
    UserDisabled,
    UserEnabled,
    UserRemoved,
    TokenCreated,
    TokenRevoked,
    LoggedIn,
    LoggedOut,
    CandidateRetired,
    CandidateRestored,
    EvalSetRetired,
    EvalSetRestored,
    ThresholdProfileRetired,
    ThresholdProfileRestored,
    DefaultProfileChosen,
    CandidateDeleted,
    EvalSetDeleted,
    ThresholdProfileDeleted,
    CandidateWorkerLabels,
    CandidateKeyEnvChanged,
    UserUnlocked,
    LoginThrottled,
    ReviewQueued,
    ReviewLabelled,
    ReviewAssigned,
    PreferenceRecorded,
    ScheduleSaved,
    ScheduleDeleted,
    ScheduleFired,
    NotificationTargetSaved,
    NotificationTargetDeleted,
    NotificationDelivered,
    NotificationFailed,
    /// An admin set or changed the OIDC provider (never its client secret).
    OidcProviderSaved,
    OidcProviderRemoved,
    /// A workload version was stored (imported or generated).
    WorkloadSaved,
}

impl Action {
    pub const ALL: [Action; 52] = [
        Action::CandidateCreated,
        Action::CandidateUpdated,
        Action::CandidateKeySet,
        Action::CandidateKeyCleared,
        Action::EvalSetSaved,
        Action::ThresholdProfileSaved,
        Action::ChecklistSaved,
        Action::ProbesRun,
        Action::SoakStarted,
        Action::RunStarted,
        Action::RunCancelled,
        Action::RunImported,
        Action::ScorecardSaved,
        Action::UserCreated,
        Action::UserRoleChanged,
        Action::UserPasswordChanged,
        Action::UserPasswordReset,
        Action::UserDisabled,
        Action::UserEnabled,
        Action::UserRemoved,
        Action::TokenCreated,
        Action::TokenRevoked,
        Action::LoggedIn,
        Action::LoggedOut,
        Action::CandidateRetired,
        Action::CandidateRestored,
        Action::EvalSetRetired,
        Action::EvalSetRestored,
        Action::ThresholdProfileRetired,
        Action::ThresholdProfileRestored,
        Action::DefaultProfileChosen,
        Action::CandidateDeleted,
        Action::EvalSetDeleted,
        Action::ThresholdProfileDeleted,
        Action::CandidateWorkerLabels,
        Action::CandidateKeyEnvChanged,
        Action::UserUnlocked,
        Action::LoginThrottled,
        Action::ReviewQueued,
        Action::ReviewLabelled,
        Action::ReviewAssigned,
        Action::PreferenceRecorded,
        Action::ScheduleSaved,
        Action::ScheduleDeleted,
        Action::ScheduleFired,
        Action::NotificationTargetSaved,
        Action::NotificationTargetDeleted,
        Action::NotificationDelivered,
        Action::NotificationFailed,
        Action::OidcProviderSaved,
        Action::OidcProviderRemoved,
        Action::WorkloadSaved,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Action::CandidateCreated => "candidate.created",
            Action::CandidateUpdated => "candidate.updated",
            Action::CandidateKeySet => "candidate.key_set",
            Action::CandidateKeyCleared => "candidate.key_cleared",
            Action::EvalSetSaved => "evalset.saved",
            Action::ThresholdProfileSaved => "threshold_profile.saved",
            Action::ChecklistSaved => "checklist.saved",
            Action::ProbesRun => "probes.run",
            Action::SoakStarted => "soak.started",
            Action::RunStarted => "run.started",
            Action::RunCancelled => "run.cancelled",
            Action::RunImported => "run.imported",
            Action::ScorecardSaved => "scorecard.saved",
            Action::UserCreated => "user.created",
            Action::UserRoleChanged => "user.role_changed",
            Action::UserPasswordChanged => "user.password_changed",
            Action::UserPasswordReset => "user.password_reset",
            Action::UserDisabled => "user.disabled",
            Action::UserEnabled => "user.enabled",
            Action::UserRemoved => "user.removed",
            Action::TokenCreated => "token.created",
            Action::TokenRevoked => "token.revoked",
            Action::LoggedIn => "session.logged_in",
            Action::LoggedOut => "session.logged_out",
            Action::CandidateRetired => "candidate.retired",
            Action::CandidateRestored => "candidate.restored",
            Action::EvalSetRetired => "evalset.retired",
            Action::EvalSetRestored => "evalset.restored",
            Action::ThresholdProfileRetired => "threshold_profile.retired",
            Action::ThresholdProfileRestored => "threshold_profile.restored",
            Action::DefaultProfileChosen => "threshold_profile.default_chosen",
            Action::CandidateDeleted => "candidate.deleted",
            Action::EvalSetDeleted => "evalset.deleted",
            Action::ThresholdProfileDeleted => "threshold_profile.deleted",
            Action::CandidateWorkerLabels => "candidate.worker_labels",
            Action::CandidateKeyEnvChanged => "candidate.key_env_changed",
            Action::UserUnlocked => "user.unlocked",
            Action::LoginThrottled => "session.login_throttled",
            Action::ReviewQueued => "review.queued",
            Action::ReviewLabelled => "review.labelled",
            Action::ReviewAssigned => "review.assigned",
            Action::PreferenceRecorded => "review.preference",
            Action::ScheduleSaved => "schedule.saved",
            Action::ScheduleDeleted => "schedule.deleted",
            Action::ScheduleFired => "schedule.fired",
            Action::NotificationTargetSaved => "notification_target.saved",
            Action::OidcProviderSaved => "oidc_provider.saved",
            Action::OidcProviderRemoved => "oidc_provider.removed",
            Action::WorkloadSaved => "workload.saved",
            Action::NotificationTargetDeleted => "notification_target.deleted",
            Action::NotificationDelivered => "notification.delivered",
            Action::NotificationFailed => "notification.failed",
        }
    }
}

/// Actions whose detail holds a client's address (logins and throttled login attempts).
const WITH_ADDRESS: [Action; 2] = [Action::LoggedIn, Action::LoginThrottled];

/// What replaces the detail of an entry holding someone else's address, for a non-admin reader.
pub const ADDRESS_HIDDEN: &str = "(the address is shown to admins and to the user it concerns)";

/// The entry as `reader` may see it: the addresses logins and throttled attempts came from
/// are shown to admins and to the user the entry is about, and hidden from everyone else (a
/// viewer must not learn where colleagues log in from). `reader` is the reading user's name,
/// None when unknown; `admin` says whether the request acts as an admin.
pub fn as_seen_by(mut entry: AuditEntry, reader: Option<&str>, admin: bool) -> AuditEntry {
    let with_address = WITH_ADDRESS.iter().any(|a| a.as_str() == entry.action);
    let own = reader.is_some_and(|name| entry.target == format!("user {name:?}"));
    if with_address && !admin && !own {
        entry.detail = ADDRESS_HIDDEN.to_string();
    }
    entry
}

/// Filters for the audit page and its exports (all optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    /// Exact actor.
    pub actor: Option<String>,
    /// Exact action, or a prefix ending in `.` for every action on one thing (`candidate.`).
    pub action: Option<String>,
    /// At or after.
    pub from: Option<Timestamp>,
    /// Strictly before.
    pub before: Option<Timestamp>,
}
