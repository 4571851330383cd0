//! Saving a threshold profile's version with its audit entry: the one way the web's profile
//! form (create, edit) and a profile file (`app::files::profiles::import`) store one.
use crate::AppError;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::thresholds::form::ProfileSave;
use crate::store::DynStore;

/// Stores `save` as a new version of the profile of its name (created when there is none) and
/// audits it as done by `actor`; the entry's detail is `how` (e.g. "created, ") followed by
/// who signed the change and why. Returns (profile id, version).
pub async fn save(store: &DynStore, save: &ProfileSave, actor: &str, how: &str) -> Result<(i64, u32), AppError> {
    let (id, version) = store
        .save_threshold_profile(
            &save.name,
            &save.description,
            &save.rules,
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
