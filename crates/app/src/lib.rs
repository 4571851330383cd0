//! The application layer: the use cases both the web pages and the terminal commands call, so a
//! handler or a command only parses its input, calls one function here and presents the result.
//! Below it are `engine`, `store`, `mock` and `domain`; nothing here knows HTTP or the terminal.
//!
//! - `api`: the JSON API's request, response and problem shapes (server and CLI client alike)
//! - `accounts`: users, roles, passwords, logins, API tokens (each change audited)
//! - `candidates`: saving a candidate from the form or a file (who may set credentials; a key follows its server)
//! - `calibrate`: `bakeoff calibrate`, the harness measured against the mock on its own threads
//! - `evalsets`: saving an eval-set version with its audit entry
//! - `files`: candidates, threshold profiles and run settings as TOML files (schemas in docs/schemas/)
//! - `gate`: a run judged for CI: start, progress, verdict with baseline check, JSON/JUnit/Markdown reports
//! - `live`: what an unfinished run's views compute from its records, shared by every view of it
//! - `pages`: what a run's pages show from its records (worded, charted), stored when it ends
//! - `state`: the application's state (`App`: store, runner, the live views it shares)
//! - `demo`: first-start content (shipped eval sets and profiles) and the demo's mock and candidates
//! - `profiles`: saving a threshold profile's version with its audit entry
//! - `retirement`: retiring and restoring candidates, eval sets and profiles; the default profile
//! - `runs`: creating a run from a request (checked, stored, handed to the runner)
//! - `scorecard`: a run assessed by a threshold-profile version (the one scorecard assembly)
//! - `shutdown`: the Ctrl-C / SIGTERM signal every long-running command stops on
//! - `transfer`: runs exported and imported as `bakeoff.run/1` JSON
//! - `verdicts`: the background worker that assesses finished runs by every profile
use crate::domain::validation::FieldErrors;
use crate::store::StoreError;

pub mod accounts;
pub mod api;
pub mod baseline;
pub mod calibrate;
pub mod candidates;
pub mod demo;
pub mod evalsets;
pub mod files;
pub mod gate;
pub mod live;
pub mod memory;
pub mod notify;
pub mod oidc;
pub mod own_metrics;
pub mod pages;
pub mod profiles;
pub mod retirement;
pub mod review;
pub mod runs;
pub mod schedules;
pub mod scorecard;
pub mod shipped;
pub mod shutdown;
pub mod state;
pub mod telemetry;
pub mod transfer;
pub mod verdicts;
pub mod workloads;

/// Why a use case could not be done. Messages are for the user: a lowercase clause without a
/// final period, which the terminal prints after "error:" and the web turns into a sentence.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The input is wrong or does not fit what is stored.
    #[error("{0}")]
    Invalid(String),
    /// Form fields that are wrong, each named.
    #[error("{0}")]
    Fields(FieldErrors),
    /// The thing named does not exist, e.g. "run #42".
    #[error("not found: {0}")]
    NotFound(String),
    /// The actor's role does not allow it; the message is whole sentences (what was needed,
    /// who asked, that nothing changed), from `domain::accounts::refusal`.
    #[error("{0}")]
    Forbidden(String),
    /// Too much of this work is under way (e.g. password hashing, which is bounded): try again
    /// after this many seconds; nothing was done.
    #[error("the server is busy checking other passwords; try again in {retry_after_secs} s")]
    Busy { retry_after_secs: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

// The layers below, under the names the code has always used (`crate::domain::…`).
use bakeoff_domain as domain;
pub use bakeoff_domain::VERSION;
use bakeoff_engine as engine;
use bakeoff_mock as mock;
use bakeoff_store as store;

/// Helpers of this crate's unit tests.
#[cfg(test)]
mod test_support {
    use crate::domain::audit::{Action, AuditFilter};
    use crate::store::DynStore;

    /// (actor, target, detail) of every audit entry of `action`, sorted.
    pub async fn audit_entries(store: &DynStore, action: Action) -> Vec<(String, String, String)> {
        let filter = AuditFilter {
            action: Some(action.as_str().to_string()),
            ..AuditFilter::default()
        };
        let mut entries: Vec<_> = store
            .list_audit(&filter, 100, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.actor, e.target, e.detail))
            .collect();
        entries.sort();
        entries
    }
}
