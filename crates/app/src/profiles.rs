//! Saving a threshold profile's version with its audit entry: the one way the web's profile
//! form (create, edit) and a profile file (`app::files::profiles::import`) store one. And which
//! profile an eval set is judged by: a profile is written for a task, and a run on a set it was
//! not written for says so (issue 54).
use crate::AppError;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::thresholds::form::ProfileSave;
use crate::store::DynStore;

/// Stores `save` as a new version of the profile of its name (created when there is none) and
/// audits it as done by `actor`; the entry's detail is `how` (e.g. "created, ") followed by
/// who signed the change and why. Returns (profile id, version).
pub async fn save(store: &DynStore, save: &ProfileSave, actor: &str, how: &str) -> Result<(i64, u32), AppError> {
    let (id, version) = store
        .save_threshold_profile_with_slo(
            &save.name,
            &save.description,
            &save.rules,
            save.slo.as_ref(),
            &save.changed_by,
            &save.change_rationale,
        )
        .await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ThresholdProfileSaved,
            target: format!("threshold profile #{id} {:?} version {version}", save.name),
            detail: format!("{how}signed {:?}: {}", save.changed_by, save.change_rationale),
        })
        .await?;
    Ok((id, version))
}

/// The setting naming the threshold profile an eval set (by name, so every version) is judged by.
pub fn evalset_profile_setting(evalset: &str) -> String {
    format!("evalset_profile:{evalset}")
}

/// The profile eval set `evalset` is judged by, when one was chosen for it (and still exists
/// and is not retired).
pub async fn profile_for_evalset(store: &DynStore, evalset: &str) -> Result<Option<i64>, AppError> {
    let Some(id) = store
        .get_setting(&evalset_profile_setting(evalset))
        .await?
        .and_then(|v| v.parse::<i64>().ok())
    else {
        return Ok(None);
    };
    let retired = store
        .list_retired(crate::domain::retirement::ItemKind::ThresholdProfile)
        .await?;
    let exists = store.list_threshold_profiles().await?.iter().any(|p| p.id == id);
    Ok((exists && !retired.contains(&id)).then_some(id))
}

/// The profile a run of eval set `evalset` is judged by when none is chosen: the set's own,
/// else the default one. With whether it is the set's own (the default was written for
/// another task, and pages say so).
pub async fn judging_profile(store: &DynStore, evalset: Option<&str>) -> Result<Option<(i64, bool)>, AppError> {
    if let Some(name) = evalset
        && let Some(id) = profile_for_evalset(store, name).await?
    {
        return Ok(Some((id, true)));
    }
    let profiles = store.list_threshold_profiles().await?;
    Ok(crate::retirement::default_profile_id(store, &profiles)
        .await?
        .map(|id| (id, false)))
}

/// Chooses the profile eval set `evalset` is judged by, audited as done by `actor`.
pub async fn set_profile_for_evalset(
    store: &DynStore,
    evalset: &str,
    profile_id: i64,
    actor: &str,
) -> Result<String, AppError> {
    let profile = store
        .list_threshold_profiles()
        .await?
        .into_iter()
        .find(|p| p.id == profile_id)
        .ok_or_else(|| AppError::NotFound(format!("threshold profile #{profile_id}")))?;
    store
        .set_setting(&evalset_profile_setting(evalset), &profile_id.to_string(), actor)
        .await?;
    store
        .append_audit(&NewAuditEntry {
            actor: actor.to_string(),
            action: Action::ThresholdProfileSaved,
            target: format!("threshold profile #{profile_id} {:?}", profile.name),
            detail: format!("chosen to judge eval set {evalset:?}"),
        })
        .await?;
    Ok(profile.name)
}

/// The eval sets (names) profile `profile_id` was chosen to judge.
pub async fn evalsets_of_profile(store: &DynStore, profile_id: i64) -> Result<Vec<String>, AppError> {
    let mut out = Vec::new();
    for e in store.list_evalsets().await? {
        if store
            .get_setting(&evalset_profile_setting(&e.name))
            .await?
            .and_then(|v| v.parse::<i64>().ok())
            == Some(profile_id)
        {
            out.push(e.name);
        }
    }
    Ok(out)
}

/// Whether `profile_id` fits a run of eval set `evalset`, in words when it does not: it was
/// written for other sets, or the set has its own profile. None when it fits (or nothing says).
pub async fn fit_note(
    store: &DynStore,
    evalset: &str,
    profile_id: i64,
    profile_name: &str,
) -> Result<Option<String>, AppError> {
    let own = profile_for_evalset(store, evalset).await?;
    if own == Some(profile_id) {
        return Ok(None);
    }
    let written_for = evalsets_of_profile(store, profile_id).await?;
    let own_name = match own {
        Some(id) => store
            .list_threshold_profiles()
            .await?
            .into_iter()
            .find(|p| p.id == id)
            .map(|p| p.name),
        None => None,
    };
    Ok(match (own_name, written_for.is_empty()) {
        (Some(own), _) => Some(format!(
            "Judged by {profile_name:?}, but eval set {evalset:?} is judged by {own:?}: its rules and rationales are the ones written for this task."
        )),
        (None, false) => Some(format!(
            "{profile_name:?} was written for {} — not for eval set {evalset:?}: its rules and rationales may not fit this task. Choose a profile for {evalset:?} on its page, or create one from a template.",
            written_for
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        (None, true) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::thresholds::{Comparator, ThresholdRule};
    use crate::test_support::audit_entries;

    fn profile(value: f64, rationale: &str) -> ProfileSave {
        ProfileSave {
            name: "gate".into(),
            description: String::new(),
            changed_by: "Ana".into(),
            change_rationale: rationale.into(),
            rules: vec![ThresholdRule {
                metric: "accuracy".into(),
                comparator: Comparator::AtLeast,
                value,
                unit: "ratio".into(),
                rationale: String::new(),
            }],
            slo: None,
        }
    }

    #[tokio::test]
    async fn every_version_saved_is_audited_with_who_signed_it() {
        let store = crate::store::connect("sqlite::memory:").await.unwrap();
        let (id, first) = save(&store, &profile(0.9, "start"), "ana", "created, ").await.unwrap();
        let (same, second) = save(&store, &profile(0.95, "stricter"), "bob", "").await.unwrap();
        assert_eq!((same, first, second), (id, 1, 2));
        let stored = store.get_threshold_profile(id, None).await.unwrap().unwrap();
        assert_eq!((stored.version, stored.rules[0].value), (2, 0.95));
        assert_eq!(
            audit_entries(&store, Action::ThresholdProfileSaved).await,
            [
                (
                    "ana".to_string(),
                    format!("threshold profile #{id} \"gate\" version 1"),
                    "created, signed \"Ana\": start".to_string()
                ),
                (
                    "bob".to_string(),
                    format!("threshold profile #{id} \"gate\" version 2"),
                    "signed \"Ana\": stricter".to_string()
                ),
            ]
        );
    }
}
