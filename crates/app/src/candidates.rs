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
            name: super::files::terminal_actor(),
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

/// What the change does to credentials that needs an admin, if anything.
fn credentials_touched(before: Option<&CandidateSpec>, next: &CandidateSpec, key_typed: bool) -> Option<&'static str> {
    let (key_before, env_before) = before.map_or((false, None), |b| (b.api_key.is_some(), b.api_key_env.as_deref()));
    if key_typed {
        Some("setting a candidate's API key")
    } else if key_before && next.api_key.is_none() {
        Some("clearing a candidate's API key")
    } else if next.api_key_env.as_deref() != env_before {
        Some("setting or changing a candidate's API key variable")
    } else {
        None
    }
}

/// Refuses a change of credentials (see [`credentials_touched`]) unless `actor` is an admin.
pub fn check_credentials(
    actor: &Actor,
    before: Option<&CandidateSpec>,
    next: &CandidateSpec,
    key_typed: bool,
) -> Result<(), AppError> {
    match credentials_touched(before, next, key_typed) {
        Some(what) if actor.role < Role::Admin => Err(AppError::Forbidden(crate::domain::accounts::refusal(
            &actor.name,
            actor.role,
            Role::Admin,
            Some(what),
        ))),
        _ => Ok(()),
    }
}

/// Creates (`before` None) or updates a candidate to `next`, whose `api_key` is the key typed
/// (`key_typed`) or the stored one kept, or None when cleared. Refused (nothing stored) when the
/// credentials change and `actor` is no admin; a name already taken is a field error on `name`.
pub async fn save(
    store: &DynStore,
    actor: &Actor,
    source: Source,
    before: Option<&Candidate>,
    mut next: CandidateSpec,
    key_typed: bool,
) -> Result<Saved, AppError> {
    check_credentials(actor, before.map(|c| &c.spec), &next, key_typed)?;
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
    let (id, outcome, dropped) = match before {
        None => {
            let id = store.create_candidate(&next).await.map_err(name_taken)?;
            store
                .append_audit(&audit(
                    Action::CandidateCreated,
                    id,
                    &next.name,
                    format!("{}{from}", next.base_url),
                ))
                .await?;
            (id, Outcome::Created, false)
        }
        Some(c) => {
            let dropped = next.drop_credentials_if_moved(&c.spec, key_typed);
            if next == c.spec {
                (c.id, Outcome::Unchanged, false)
            } else {
                store.update_candidate(c.id, &next).await.map_err(name_taken)?;
                store
                    .append_audit(&audit(
                        Action::CandidateUpdated,
                        c.id,
                        &next.name,
                        format!("{}{from}", next.base_url),
                    ))
                    .await?;
                let why = if dropped {
                    Some(format!("the base URL moved to another server ({})", next.base_url))
                } else if c.spec.api_key.is_some() && next.api_key.is_none() {
                    Some("removed on the form".to_string())
                } else {
                    None
                };
                if let Some(why) = why {
                    store
                        .append_audit(&audit(Action::CandidateKeyCleared, c.id, &next.name, why))
                        .await?;
                }
                (c.id, Outcome::Updated, dropped)
            }
        }
    };
    if key_typed && outcome != Outcome::Unchanged {
        store
            .append_audit(&audit(Action::CandidateKeySet, id, &next.name, String::new()))
            .await?;
    }
    let candidate = store
        .get_candidate(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("candidate #{id}")))?;
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
    use crate::domain::candidate::{CandidateDraft, Secret};

    fn spec(url: &str, key: Option<&str>, env: Option<&str>) -> CandidateSpec {
        let mut s = CandidateDraft {
            name: "a".into(),
            provider: "openai-chat".into(),
            base_url: url.into(),
            model: "m".into(),
            ..Default::default()
        }
        .validate(None)
        .unwrap();
        s.api_key = key.map(Secret::new);
        s.api_key_env = env.map(str::to_string);
        s
    }

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

    #[test]
    fn only_a_change_of_key_or_key_variable_needs_an_admin() {
        let stored = spec("http://h/v1", Some("sk-1"), Some("BAKEOFF_KEY_A"));
        // Kept as they are (also when the URL moves: the move drops them, which needs nobody).
        let same = spec("http://other/v1", Some("sk-1"), Some("BAKEOFF_KEY_A"));
        assert_eq!(credentials_touched(Some(&stored), &same, false), None);
        assert!(credentials_touched(Some(&stored), &same, true).is_some(), "typed");
        let cleared = spec("http://h/v1", None, Some("BAKEOFF_KEY_A"));
        assert!(credentials_touched(Some(&stored), &cleared, false).is_some(), "cleared");
        let env = spec("http://h/v1", Some("sk-1"), Some("BAKEOFF_KEY_B"));
        assert!(
            credentials_touched(Some(&stored), &env, false).is_some(),
            "changed variable"
        );
        let no_env = spec("http://h/v1", Some("sk-1"), None);
        assert!(
            credentials_touched(Some(&stored), &no_env, false).is_some(),
            "removed variable"
        );
        // A new candidate: only with credentials.
        assert_eq!(credentials_touched(None, &spec("http://h/v1", None, None), false), None);
        assert!(credentials_touched(None, &spec("http://h/v1", None, Some("BAKEOFF_KEY_A")), false).is_some());
    }
}
