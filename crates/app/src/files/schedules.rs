//! The schedules file: `bakeoff_schedules = 1` and `[[schedule]]` tables, each naming its eval
//! set, candidates and profile by name (so a file moves between servers), with the run
//! settings file's fields under `[schedule.settings]`. Read into the same request the browser's
//! form submits and checked by the same check (`schedules::check`); a file with any problem
//! changes nothing. Notification targets are not in it: their secrets never leave the server.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::settings::{self, SettingsFile};
use super::{FileError, FileProblem, Located, Step, check_version, dotted, parse_toml};
use crate::AppError;
use crate::domain::schedule::Schedule;
use crate::schedules::ScheduleRequest;
use crate::store::DynStore;

/// The format version this code reads.
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "bakeoff schedules file",
    description = "Schedules as `bakeoff schedule import` (and POST /api/v1/schedules) reads and `bakeoff \
                   schedule export` writes them, in TOML (JSON for the API). Stored by name, created or \
                   replaced, all or nothing; eval sets, candidates and profiles are named (docs/schedules.md)."
)]
pub struct SchedulesFile {
    /// Format version; 1.
    pub bakeoff_schedules: u32,
    #[serde(default)]
    pub schedule: Vec<ScheduleEntry>,
}

/// One schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    pub name: String,
    /// The eval set's name.
    pub evalset: String,
    /// "latest" (the default: the newest version at each firing) or a version's content hash
    /// (at least its first 12 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Candidates' names, in order.
    pub candidates: Vec<String>,
    /// The threshold profile's name; omitted: the team's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Cron: `MIN HOUR DOM MON DOW`, or @hourly/@daily/@weekly/@monthly.
    pub cadence: String,
    /// IANA name; omitted: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// "last-passed" (the default) or "run:ID" (an id on the server it was exported from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The run settings file's fields (`bakeoff_settings` left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // An object, not `SettingsFile`: that one requires its `bakeoff_settings` version.
    #[schema(value_type = Option<Object>)]
    #[schemars(schema_with = "settings_without_version")]
    pub settings: Option<serde_json::Value>,
}

/// The settings file's schema without its format version: a schedule's `[schedule.settings]`
/// holds the same fields and is checked by the same code.
fn settings_without_version(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = SettingsFile::json_schema(generator);
    if let Some(properties) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.remove("bakeoff_settings");
    }
    if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
        required.retain(|name| name != "bakeoff_settings");
    }
    schema.remove("title");
    schema.insert(
        "description".into(),
        "The run settings file's fields (docs/schemas/settings.schema.json) without `bakeoff_settings`.".into(),
    );
    schema
}

/// Where a form field of a schedule is in its entry.
fn field_path(field: &str) -> Vec<Step> {
    let k = |s: &str| Step::Key(s.to_string());
    match field {
        "evalset_version" => vec![k("version")],
        "settings" => vec![k("settings")],
        // A key of the settings table as written (an unknown one, which no form field names).
        written if written.starts_with("settings.") => vec![k("settings"), k(&written["settings.".len()..])],
        "profile" | "name" | "evalset" | "candidates" | "cadence" | "time_zone" | "owner" | "max_requests"
        | "max_cost_usd" | "baseline" => vec![k(field)],
        other => {
            let mut path = vec![k("settings")];
            path.extend(settings::field_path(other));
            path
        }
    }
}

/// Turns one entry into the form's request, resolving names; problems are pushed with their place.
async fn request_of(
    store: &DynStore,
    entry: &ScheduleEntry,
    at: &[Step],
    located: &Located<'_>,
    problems: &mut Vec<FileProblem>,
) -> Result<ScheduleRequest, AppError> {
    let mut problem = |field: &str, message: String| {
        let mut path = at.to_vec();
        path.extend(field_path(field));
        problems.push(FileProblem {
            line: located.line(&path),
            field: Some(dotted(&path)),
            message,
        });
    };
    let sets = store.list_evalsets().await?;
    let set = sets.iter().find(|s| s.name == entry.evalset);
    if set.is_none() {
        problem("evalset", format!("no eval set is named {:?}", entry.evalset));
    }
    let version = match (entry.version.as_deref().map(str::trim), set) {
        (None | Some("latest") | Some(""), _) => "latest".to_string(),
        (Some(hash), Some(set)) if hash.len() >= 12 => {
            let links = store.list_evalset_version_links(set.id).await?;
            match links.iter().find(|l| l.content_hash.starts_with(hash)) {
                Some(l) => l.id.to_string(),
                None => {
                    problem(
                        "evalset_version",
                        format!("eval set {:?} has no version {hash}", set.name),
                    );
                    String::new()
                }
            }
        }
        (Some(_), Some(_)) => {
            problem(
                "evalset_version",
                "is \"latest\" or a content hash of at least 12 characters".into(),
            );
            String::new()
        }
        (Some(_), None) => String::new(),
    };
    let known = store.list_candidates().await?;
    let mut candidates = Vec::new();
    for name in &entry.candidates {
        match known.iter().find(|c| &c.spec.name == name) {
            Some(c) => candidates.push(c.id.to_string()),
            None => problem("candidates", format!("no candidate is named {name:?}")),
        }
    }
    let profile = match &entry.profile {
        None => String::new(),
        Some(name) => match store.list_threshold_profiles().await?.iter().find(|p| &p.name == name) {
            Some(p) => p.id.to_string(),
            None => {
                problem("profile", format!("no threshold profile is named {name:?}"));
                String::new()
            }
        },
    };
    let run = match &entry.settings {
        None => settings::RunSettings::defaults(),
        Some(value) => {
            let mut value = value.clone();
            if let Some(object) = value.as_object_mut() {
                object
                    .entry("bakeoff_settings")
                    .or_insert(serde_json::Value::from(settings::VERSION));
            }
            match serde_json::from_value::<SettingsFile>(value).map(|f| f.to_settings()) {
                Ok(Ok(s)) => s,
                Ok(Err(errors)) => {
                    for e in errors.0 {
                        problem(&e.field, e.message);
                    }
                    settings::RunSettings::defaults()
                }
                Err(e) => {
                    // serde names an unknown or mistyped field in its message: place it there.
                    let message = e.to_string();
                    let field = message
                        .split_once("field `")
                        .and_then(|(_, rest)| rest.split_once('`'))
                        .map(|(f, _)| f.to_string());
                    match field {
                        Some(f) if !message.starts_with("missing") => problem(&format!("settings.{f}"), message),
                        _ => problem("settings", message),
                    }
                    settings::RunSettings::defaults()
                }
            }
        }
    };
    Ok(ScheduleRequest {
        name: entry.name.clone(),
        evalset: set.map(|s| s.id.to_string()).unwrap_or_default(),
        evalset_version: version,
        candidates,
        draft: run.draft,
        load: run.load,
        profile,
        cadence: entry.cadence.clone(),
        time_zone: entry.time_zone.clone().unwrap_or_default(),
        owner: entry.owner.clone().unwrap_or_default(),
        max_requests: entry.max_requests.map(|n| n.to_string()).unwrap_or_default(),
        max_cost_usd: entry.max_cost_usd.map(|n| n.to_string()).unwrap_or_default(),
        baseline: entry.baseline.clone().unwrap_or_default(),
        paused: entry.paused.unwrap_or(false),
    })
}

/// Imports every schedule of a file (created, or the stored one of the same name replaced),
/// all or nothing: every problem is reported with its line and field before anything is
/// saved. Returns (id, name, "created" | "updated") per schedule.
pub async fn import(
    store: &DynStore,
    file: &str,
    text: &str,
    actor: &str,
) -> Result<Vec<(i64, String, &'static str)>, AppError> {
    let text = text.trim_start_matches('\u{feff}');
    let parsed: SchedulesFile = parse_toml(file, text).map_err(file_error)?;
    let located = Located::new(text);
    check_version(file, &located, "bakeoff_schedules", parsed.bakeoff_schedules, VERSION).map_err(file_error)?;
    let stored = store.list_schedules().await?;
    let mut problems = Vec::new();
    let mut requests = Vec::new();
    for (i, entry) in parsed.schedule.iter().enumerate() {
        let at = [Step::Key("schedule".into()), Step::Index(i)];
        let request = request_of(store, entry, &at, &located, &mut problems).await?;
        match crate::schedules::check(store, &request, actor).await {
            Ok(_) => {}
            Err(AppError::Fields(errors)) => {
                problems.extend(located.problems(&at, &errors, field_path));
            }
            Err(e) => return Err(e),
        }
        let existing = stored.iter().find(|s| s.spec.name == entry.name).map(|s| s.id);
        requests.push((existing, request));
    }
    if !problems.is_empty() {
        return Err(file_error(FileError {
            file: file.to_string(),
            problems,
        }));
    }
    let mut out = Vec::new();
    for (existing, request) in requests {
        let id = crate::schedules::save(store, existing, &request, actor).await?;
        out.push((
            id,
            request.name.clone(),
            if existing.is_some() { "updated" } else { "created" },
        ));
    }
    Ok(out)
}

fn file_error(e: FileError) -> AppError {
    AppError::Invalid(e.to_string())
}

/// One stored schedule as a file entry (names, not ids).
pub async fn to_entry(store: &DynStore, s: &Schedule) -> Result<ScheduleEntry, AppError> {
    let spec = &s.spec;
    let set = store
        .list_evalsets()
        .await?
        .into_iter()
        .find(|e| e.id == spec.evalset_id)
        .ok_or_else(|| AppError::NotFound(format!("eval set #{}", spec.evalset_id)))?;
    let version = match spec.evalset_version_id {
        None => None,
        Some(id) => Some(
            store
                .get_evalset_version_head(id)
                .await?
                .ok_or_else(|| AppError::NotFound(format!("eval set version #{id}")))?
                .content_hash,
        ),
    };
    let known = store.list_candidates().await?;
    let candidates = spec
        .candidate_ids
        .iter()
        .map(|id| {
            known
                .iter()
                .find(|c| c.id == *id)
                .map(|c| c.spec.name.clone())
                .ok_or_else(|| AppError::NotFound(format!("candidate #{id}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let profile = match spec.profile_id {
        None => None,
        Some(id) => store.get_threshold_profile(id, None).await?.map(|p| p.name),
    };
    let mut settings = serde_json::to_value(
        settings::from_config(&spec.config, None)
            .map_err(|lost| AppError::Invalid(format!("schedule {:?}: {}", spec.name, lost.join("; "))))?,
    )
    .map_err(|e| AppError::Invalid(e.to_string()))?;
    if let Some(object) = settings.as_object_mut() {
        object.remove("bakeoff_settings");
    }
    Ok(ScheduleEntry {
        name: spec.name.clone(),
        evalset: set.name,
        version,
        candidates,
        profile,
        cadence: spec.cadence.clone(),
        time_zone: Some(spec.time_zone.clone()),
        owner: Some(spec.owner.clone()),
        max_requests: spec.max_requests,
        max_cost_usd: spec.max_cost_usd,
        baseline: Some(spec.baseline.as_text()),
        paused: Some(spec.paused),
        settings: Some(settings),
    })
}

/// Every stored schedule (or those named) as a schedules file.
pub async fn export(store: &DynStore, names: &[String]) -> Result<String, AppError> {
    let mut file = SchedulesFile {
        bakeoff_schedules: VERSION,
        schedule: Vec::new(),
    };
    for s in store.list_schedules().await? {
        if names.is_empty() || names.contains(&s.spec.name) {
            file.schedule.push(to_entry(store, &s).await?);
        }
    }
    for name in names {
        if !file.schedule.iter().any(|e| &e.name == name) {
            return Err(AppError::NotFound(format!("schedule {name:?}")));
        }
    }
    let body = super::to_toml(&file).map_err(AppError::Invalid)?;
    Ok(format!("# bakeoff schedules (docs/schedules.md)\n{body}"))
}
