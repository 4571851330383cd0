//! Candidates as the store takes them: checked by `domain::credentials` as an admin would be,
//! for tests that store candidates below the app layer.
use bakeoff::domain::accounts::Role;
use bakeoff::domain::candidate::{Candidate, CandidateSpec};
use bakeoff::domain::credentials::{CandidateChange, NewCandidate, check_change, check_new};
use bakeoff::store::Store;

/// `spec` checked for creation by an admin.
pub fn admin_new(spec: &CandidateSpec) -> NewCandidate {
    check_new(Role::Admin, spec.clone(), false).expect("an admin may set credentials")
}

/// The update of candidate `id` to `spec`, checked as an admin's (a candidate not stored is
/// checked against an empty one of that id, so the store can say it is not found).
pub async fn admin_change(store: &dyn Store, id: i64, spec: &CandidateSpec) -> CandidateChange {
    let before = store
        .get_candidate(id)
        .await
        .expect("reading the candidate")
        .unwrap_or(Candidate {
            id,
            spec: CandidateSpec::openai_chat("missing", "http://127.0.0.1:1/v1", "m"),
            created_at: bakeoff::domain::Timestamp(0),
            updated_at: bakeoff::domain::Timestamp(0),
        });
    check_change(Role::Admin, &before, spec.clone(), false).expect("an admin may set credentials")
}
