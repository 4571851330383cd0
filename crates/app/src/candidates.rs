//! Saving a candidate: the one way the browser's form and every import (`POST
//! /api/v1/candidates`, `bakeoff candidate import`, `bakeoff run start`) store one, so the two
//! credentials rules hold on every path:
//! - setting, changing or clearing a stored key or the key variable needs the admin role (a
//!   key can be sent to any URL the candidate names);
//! - a key follows its server: moving the base URL to another origin drops a stored key that was
//!   not typed anew and a key variable left as it was (audited as `candidate.key_cleared`).
use crate::domain::accounts::Role;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::candidate::{Candidate, CandidateSpec};
use crate::domain::credentials::{NeedsAdmin, NewCandidate};
use crate::store::{DynStore, StoreError};

use super::AppError;

/// Who saves: the name the audit log keeps and the role that allows it.
#[derive(Debug, Clone)]
pub struct Actor {
    pub name: String,
    pub role: Role,
}

impl Actor {
    /// The terminal: whoever runs bakeoff on the database's machine is its admin.
    pub fn terminal() -> Actor {
        Actor {
            name: super::accounts::terminal_actor(),
            role: Role::Admin,
        }
    }
}

/// Where a change came from, for the audit entry's detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Form,
    File,
}

/// What saving did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Updated,
    /// The stored candidate already matched.
    Unchanged,
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// A saved candidate.
#[derive(Debug, Clone)]
pub struct Saved {
    pub candidate: Candidate,
    pub outcome: Outcome,
    /// The base URL moved to another server, so the stored key and/or key variable were dropped.
    pub credentials_dropped: bool,
}

impl Saved {
    /// Said to whoever saved when the move dropped credentials (the page, the API, the terminal).
    pub fn credentials_note(&self) -> Option<String> {
        self.credentials_dropped.then(|| moved_note(&self.candidate))
    }
}

/// Why a candidate that moved to another server lost its stored key and key variable.
pub fn moved_note(c: &Candidate) -> String {
    format!(
        "the base URL of {:?} now points at another server ({}), so its stored API key and key variable \
         were removed: a key is only ever sent to the server it was set for; an admin sets them again if \
         this server should get them",
        c.spec.name,
        crate::domain::candidate::origin_of(&c.spec.base_url).unwrap_or_default()
    )
}

/// The refusal, for `actor`, of what [`crate::domain::credentials`] says needs an admin.
fn needs_admin(actor: &Actor, refused: NeedsAdmin) -> AppError {
    AppError::Forbidden(crate::domain::accounts::refusal(
        &actor.name,
        actor.role,
        Role::Admin,
        Some(refused.0),
    ))
}

/// Refuses a change of credentials (see [`crate::domain::credentials::touched`]) unless `actor`
/// is an admin; for checking a whole file before anything of it is stored.
pub fn check_credentials(
    actor: &Actor,
    before: Option<&CandidateSpec>,
    next: &CandidateSpec,
    key_typed: bool,
) -> Result<(), AppError> {
    match crate::domain::credentials::touched(before, next, key_typed) {
        Some(what) if actor.role < Role::Admin => Err(needs_admin(actor, NeedsAdmin(what))),
        _ => Ok(()),
    }
}

/// A new candidate checked for `actor` (the store creates nothing else).
pub fn checked_new(actor: &Actor, next: CandidateSpec, key_typed: bool) -> Result<NewCandidate, AppError> {
    crate::domain::credentials::check_new(actor.role, next, key_typed).map_err(|e| needs_admin(actor, e))
}

/// The audit entry of a changed key variable (the variable's name is no secret; its value is
/// never read here).
fn key_env_change(before: Option<&str>, after: Option<&str>) -> Option<String> {
    let shown = |v: Option<&str>| v.map_or_else(|| "none".to_string(), |v| format!("{v:?}"));
    (before != after).then(|| format!("key variable {} → {}", shown(before), shown(after)))
}

/// Why this change cleared the stored key, if it did.
fn key_cleared(before: &CandidateSpec, next: &CandidateSpec, dropped: bool) -> Option<String> {
    if dropped {
        Some(format!("the base URL moved to another server ({})", next.base_url))
    } else if before.api_key.is_some() && next.api_key.is_none() {
        Some("removed on the form".to_string())
    } else {
        None
    }
}

/// The audit detail of changed secret headers, by name only (`None`: unchanged).
fn secret_header_change(before: Option<&CandidateSpec>, after: Option<&CandidateSpec>) -> Option<String> {
    let names = |spec: Option<&CandidateSpec>| -> Vec<String> {
        spec.map(|s| {
            s.wire
                .secret_headers()
                .into_iter()
                .map(|(n, _)| n.to_string())
                .collect()
        })
        .unwrap_or_default()
    };
    let (was, now) = (names(before), names(after));
    let changed = match (before, after) {
        (Some(b), Some(a)) => b.wire.secret_headers() != a.wire.secret_headers(),
        (None, _) => !now.is_empty(),
        _ => false,
    };
    let shown = |n: &[String]| if n.is_empty() { "none".to_string() } else { n.join(", ") };
    changed.then(|| format!("secret headers {} → {}", shown(&was), shown(&now)))
}

/// Creates (`before` None) or updates a candidate to `next`, whose `api_key` is the key typed
/// (`key_typed`) or the stored one kept, or None when cleared. Refused (nothing stored) when the
/// credentials change and `actor` is no admin; a name already taken is a field error on `name`.
pub async fn save(
    store: &DynStore,
    actor: &Actor,
    source: Source,
    before: Option<&Candidate>,
    next: CandidateSpec,
    key_typed: bool,
) -> Result<Saved, AppError> {
    let audit = |action: Action, id: i64, name: &str, detail: String| NewAuditEntry {
        actor: actor.name.clone(),
        action,
        target: format!("candidate #{id} {name:?}"),
        detail,
    };
    let from = match source {
        Source::Form => String::new(),
        Source::File => " (imported from a file)".to_string(),
    };
    // A new name only: a candidate keeps the name it has.
    if before.is_none_or(|c| c.spec.name != next.name) {
        refuse_lookalike(store, before.map(|c| c.id), &next.name).await?;
    }
    let (id, name, outcome, dropped) = match before {
        None => {
            let new = checked_new(actor, next, key_typed)?;
            let id = store.create_candidate(&new).await.map_err(name_taken)?;
            let spec = new.spec();
            store
                .append_audit(&audit(
                    Action::CandidateCreated,
                    id,
                    &spec.name,
                    format!("{}{from}", spec.base_url),
                ))
                .await?;
            if let Some(detail) = key_env_change(None, spec.api_key_env.as_deref()) {
                store
                    .append_audit(&audit(Action::CandidateKeyEnvChanged, id, &spec.name, detail))
                    .await?;
            }
            (id, spec.name.clone(), Outcome::Created, false)
        }
        Some(c) => {
            let mut change = crate::domain::credentials::check_change(actor.role, c, next, key_typed)
                .map_err(|e| needs_admin(actor, e))?;
            let dropped = change.drop_credentials_if_moved(key_typed);
            let next = change.spec();
            if !change.changes_anything() {
                (c.id, next.name.clone(), Outcome::Unchanged, false)
            } else {
                store.update_candidate(&change).await.map_err(name_taken)?;
                store
                    .append_audit(&audit(
                        Action::CandidateUpdated,
                        c.id,
                        &next.name,
                        format!("{}{from}", next.base_url),
                    ))
                    .await?;
                if let Some(why) = key_cleared(&c.spec, next, dropped) {
                    store
                        .append_audit(&audit(Action::CandidateKeyCleared, c.id, &next.name, why))
                        .await?;
                }
                if let Some(mut detail) = key_env_change(c.spec.api_key_env.as_deref(), next.api_key_env.as_deref()) {
                    if dropped && next.api_key_env.is_none() {
                        detail.push_str(" (the base URL moved to another server)");
                    }
                    store
                        .append_audit(&audit(Action::CandidateKeyEnvChanged, c.id, &next.name, detail))
                        .await?;
                }
                (c.id, next.name.clone(), Outcome::Updated, dropped)
            }
        }
    };
    let stored = store.get_candidate(id).await?;
    if outcome != Outcome::Unchanged
        && let Some(detail) = secret_header_change(before.map(|c| &c.spec), stored.as_ref().map(|c| &c.spec))
    {
        store
            .append_audit(&audit(Action::CandidateKeySet, id, &name, detail))
            .await?;
    }
    if key_typed && outcome != Outcome::Unchanged {
        store
            .append_audit(&audit(Action::CandidateKeySet, id, &name, String::new()))
            .await?;
    }
    let candidate = stored.ok_or_else(|| AppError::NotFound(format!("candidate #{id}")))?;
    Ok(Saved {
        candidate,
        outcome,
        credentials_dropped: dropped,
    })
}

/// The labels a candidate requires of the workers that measure it (`domain::workers`): none
/// when it needs none.
pub async fn worker_labels(store: &DynStore, candidate_id: i64) -> Result<Vec<String>, AppError> {
    Ok(store
        .candidate_worker_labels()
        .await?
        .into_iter()
        .find(|(id, _)| *id == candidate_id)
        .map(|(_, labels)| labels)
        .unwrap_or_default())
}

/// Labels as typed in one field ("gpu-a, eu"), or a field error on `field` naming the bad label.
pub fn parse_worker_labels(field: &str, text: &str) -> Result<Vec<String>, AppError> {
    crate::domain::workers::parse_labels(text).map_err(|why| {
        let mut errors = crate::domain::validation::FieldErrors::default();
        errors.add(field, why);
        AppError::Fields(errors)
    })
}

/// Labels given one by one (the API's list): each must be one valid label, or a field error on
/// `labels[i]`; returned sorted, without repeats.
pub fn worker_labels_of(items: &[String]) -> Result<Vec<String>, AppError> {
    let mut errors = crate::domain::validation::FieldErrors::default();
    let mut labels = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match crate::domain::workers::parse_labels(item) {
            Ok(one) if one.len() == 1 => labels.extend(one),
            Ok(none) if none.is_empty() => errors.add(format!("labels[{i}]"), "is empty"),
            Ok(_) => errors.add(
                format!("labels[{i}]"),
                format!("{item:?} is more than one label: give each as its own item"),
            ),
            Err(why) => errors.add(format!("labels[{i}]"), why),
        }
    }
    if !errors.is_empty() {
        return Err(AppError::Fields(errors));
    }
    labels.sort();
    labels.dedup();
    Ok(labels)
}

/// Sets the labels `candidate` requires of its workers (already parsed: sorted, no repeats);
/// an actual change is audited as `candidate.worker_labels`. Returns whether anything changed.
/// Runs admitted before keep measuring where they are; the next unit claimed follows the labels.
pub async fn set_worker_labels(
    store: &DynStore,
    actor: &Actor,
    candidate: &Candidate,
    labels: &[String],
) -> Result<bool, AppError> {
    let before = worker_labels(store, candidate.id).await?;
    if before == labels {
        return Ok(false);
    }
    store.set_candidate_worker_labels(candidate.id, labels).await?;
    let shown = |l: &[String]| {
        if l.is_empty() {
            "none (any worker)".to_string()
        } else {
            crate::domain::workers::labels_text(l)
        }
    };
    store
        .append_audit(&NewAuditEntry {
            actor: actor.name.clone(),
            action: Action::CandidateWorkerLabels,
            target: format!("candidate #{} {:?}", candidate.id, candidate.spec.name),
            detail: format!(
                "measured only by workers labelled: {} (was {})",
                shown(labels),
                shown(&before)
            ),
        })
        .await?;
    Ok(true)
}

/// Refuses `name` when it looks like another candidate's (`validation::confusable`): the same
/// letters from another script, another case, or with invisible characters. `own` is the
/// candidate being saved (None for a new one).
pub async fn refuse_lookalike(store: &DynStore, own: Option<i64>, name: &str) -> Result<(), AppError> {
    let known = store.list_candidates().await?;
    if let Some(other) = known
        .iter()
        .find(|c| Some(c.id) != own && crate::domain::validation::confusable(name, &c.spec.name))
    {
        let mut errors = crate::domain::validation::FieldErrors::default();
        errors.add(
            "name",
            format!(
                "looks like the name of candidate #{} {:?} (the same letters from another script, in another case, \
                 or with invisible characters); choose a name that reads differently",
                other.id, other.spec.name
            ),
        );
        return Err(AppError::Fields(errors));
    }
    Ok(())
}

/// A name already used by another candidate, as a field error the form and imports both show.
fn name_taken(e: StoreError) -> AppError {
    match e {
        StoreError::Conflict(_) => {
            let mut errors = crate::domain::validation::FieldErrors::default();
            errors.add(
                "name",
                "is already used by another candidate; choose a different name".to_string(),
            );
            AppError::Fields(errors)
        }
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_given_one_by_one_are_each_one_valid_label() {
        let ok = worker_labels_of(&["eu".into(), "GPU-a".into(), "eu".into()]).unwrap();
        assert_eq!(ok, vec!["eu".to_string(), "gpu-a".to_string()]);
        assert!(worker_labels_of(&[]).unwrap().is_empty());
        let Err(AppError::Fields(errors)) = worker_labels_of(&["eu".into(), "a b".into(), "x/y".into(), " ".into()])
        else {
            panic!("refused")
        };
        let fields: Vec<&str> = errors.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["labels[1]", "labels[2]", "labels[3]"]);
        assert!(parse_worker_labels("labels", "eu, gpu-a").is_ok());
        assert!(matches!(
            parse_worker_labels("labels", "eu; gpu"),
            Err(AppError::Fields(_))
        ));
    }
}
