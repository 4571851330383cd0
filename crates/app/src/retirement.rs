//! Retiring and restoring candidates, eval sets and threshold profiles, and choosing the team's
//! default threshold profile. Retired things leave the lists and the new-run form; every run
//! that measured them keeps its snapshot (runs read `run_candidates`, never the live row), so
//! the archive does not change.
use crate::AppError;
use crate::domain::retirement::{DEFAULT_PROFILE_SETTING, ItemKind, default_profile};
use crate::domain::thresholds::ThresholdProfile;
use crate::store::DynStore;

/// The name of the item, or NotFound.
async fn item_name(store: &DynStore, kind: ItemKind, id: i64) -> Result<String, AppError> {
    let name = match kind {
        ItemKind::Candidate => store.get_candidate(id).await?.map(|c| c.spec.name),
        ItemKind::EvalSet => store
            .list_evalsets()
            .await?
            .into_iter()
            .find(|s| s.id == id)
            .map(|s| s.name),
        ItemKind::ThresholdProfile => store.get_threshold_profile(id, None).await?.map(|p| p.name),
    };
    name.ok_or_else(|| AppError::NotFound(format!("{} #{id}", kind.label())))
}

/// Retires an item; returns its name. Retiring twice changes nothing.
pub async fn retire(store: &DynStore, kind: ItemKind, id: i64, by: &str) -> Result<String, AppError> {
    let name = item_name(store, kind, id).await?;
    store.retire_item(kind, id, by).await?;
    Ok(name)
}

/// Brings a retired item back to the lists; returns its name.
pub async fn restore(store: &DynStore, kind: ItemKind, id: i64) -> Result<String, AppError> {
    let name = item_name(store, kind, id).await?;
    store.restore_item(kind, id).await?;
    Ok(name)
}

/// Deletes an item nothing refers to; returns its name. An item a run measured or a saved
/// scorecard names is refused with the reason: retiring keeps it out of the way instead.
pub async fn delete_unused(store: &DynStore, kind: ItemKind, id: i64) -> Result<String, AppError> {
    let name = item_name(store, kind, id).await?;
    // A schedule would lose its eval set (deleted with it), a candidate (its next firing
    // fails) or its profile (judged by the default instead), silently: refused, naming them.
    let users: Vec<String> = store
        .list_schedules()
        .await?
        .into_iter()
        .filter(|s| match kind {
            ItemKind::EvalSet => s.spec.evalset_id == id,
            ItemKind::Candidate => s.spec.candidate_ids.contains(&id),
            ItemKind::ThresholdProfile => s.spec.profile_id == Some(id),
        })
        .map(|s| format!("{:?}", s.spec.name))
        .collect();
    if !users.is_empty() {
        return Err(AppError::Invalid(format!(
            "{} {name:?} cannot be deleted: {} {} {}; edit or delete {} first",
            kind.label(),
            if users.len() == 1 { "schedule" } else { "schedules" },
            users.join(", "),
            if users.len() == 1 { "uses it" } else { "use it" },
            if users.len() == 1 {
                "that schedule"
            } else {
                "those schedules"
            },
        )));
    }
    match store.delete_unused_item(kind, id).await? {
        None => Ok(name),
        Some(why) => Err(AppError::Invalid(format!(
            "{} {name:?} cannot be deleted: {why}, and the archive keeps what they measured; retire it instead",
            kind.label()
        ))),
    }
}

/// The ids of one kind's retired items.
pub async fn retired(store: &DynStore, kind: ItemKind) -> Result<Vec<i64>, AppError> {
    Ok(store.list_retired(kind).await?)
}

/// The default profile's id among `profiles`: the team's choice while it is not retired, else
/// the shipped default, else the first profile in use.
pub async fn default_profile_id(store: &DynStore, profiles: &[ThresholdProfile]) -> Result<Option<i64>, AppError> {
    let retired = store.list_retired(ItemKind::ThresholdProfile).await?;
    let chosen = store
        .get_setting(DEFAULT_PROFILE_SETTING)
        .await?
        .and_then(|v| v.parse::<i64>().ok());
    let in_use: Vec<(i64, &str)> = profiles
        .iter()
        .filter(|p| !retired.contains(&p.id))
        .map(|p| (p.id, p.name.as_str()))
        .collect();
    Ok(default_profile(&in_use, chosen, crate::demo::DEFAULT_PROFILE))
}

/// Makes a profile the team's default; returns its name. A retired profile cannot be chosen.
pub async fn choose_default_profile(store: &DynStore, id: i64, by: &str) -> Result<String, AppError> {
    let name = item_name(store, ItemKind::ThresholdProfile, id).await?;
    if store.list_retired(ItemKind::ThresholdProfile).await?.contains(&id) {
        return Err(AppError::Invalid(format!(
            "threshold profile {name:?} is retired: restore it before making it the default"
        )));
    }
    store.set_setting(DEFAULT_PROFILE_SETTING, &id.to_string(), by).await?;
    Ok(name)
}
