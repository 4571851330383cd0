//! The engine's own error: a run that cannot go on (a failed request is data, a `Failure`).
use crate::store::StoreError;

/// Why a run could not be executed at all (as opposed to a failed request, which is data).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("run {0} does not exist")]
    RunNotFound(i64),
    #[error("eval set version {version_id} used by run {run_id} does not exist")]
    EvalSetNotFound { run_id: i64, version_id: i64 },
    #[error("candidate {candidate_id} used by run {run_id} does not exist")]
    CandidateNotFound { run_id: i64, candidate_id: i64 },
    #[error("run {0} has no candidates")]
    NoCandidates(i64),
    #[error("building the HTTP client for candidate {candidate:?}: {message}")]
    Client { candidate: String, message: String },
    #[error("storing request records failed: {0}")]
    RecordWriter(String),
    /// The writer's spill file could not be read or removed (its records are not lost: the file
    /// is kept for the next resume).
    #[error("spill file {path}: {message}")]
    Spill { path: String, message: String },
    /// A capacity search that cannot start (no objective, no target, an unknown candidate).
    #[error("capacity search: {0}")]
    CapacitySearch(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
