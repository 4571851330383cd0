//! Export and import of whole runs as one JSON document (`"schema": "bakeoff.run/1"`), so
//! results can move between installations: the run with its conditions, status and times, the
//! eval-set version it ran (full text, checked against its content hash), its candidates
//! (never their API keys: a stored key is left out, a password in the base URL is masked; the
//! name of a key's environment variable is kept), every raw record with its grades, the
//! harness's report on itself (whether the speed figures can be trusted; restored on import),
//! and the event log. Used by `GET /runs/{id}/export.json`, the import form on /archive and
//! `bakeoff run export|import`.
use serde::{Deserialize, Serialize};

use crate::app::AppError;
use crate::domain::Timestamp;
use crate::domain::calibers::HarnessReport;
use crate::domain::candidate::{
    CandidateDraft, CandidateSpec, ClaimedFigure, Conditions, Pricing, ProviderKind, TokenizeEndpoint,
};
use crate::domain::evalset::EvalSetFile;
use crate::domain::run::{NewRun, RequestRecord, RunConfig, RunEvent, RunStatus};
use crate::store::{RestoredRun, Store};

/// The format's name and version; a reader refuses any other.
pub const SCHEMA: &str = "bakeoff.run/1";
/// Records are stored in batches of this many on import.
const IMPORT_BATCH: usize = 500;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunExport {
    pub schema: String,
    /// "bakeoff VERSION" of the exporting installation.
    pub exported_by: String,
    /// Unix milliseconds.
    pub exported_at: i64,
    pub run: ExportedRun,
    pub evalset: ExportedEvalSet,
    pub candidates: Vec<ExportedCandidate>,
    pub events: Vec<ExportedEvent>,
    /// The harness's report on the run (CPU, schedule lag / client queue, event-loop lag, the
    /// unreliable flag with its reasons); null when the run stored none. Absent in exports
    /// written before it was added, which read as null.
    #[serde(default)]
    pub harness: Option<HarnessReport>,
    /// Raw records; `run_id` and `candidate_id` are the exporting installation's ids.
    pub records: Vec<RequestRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedRun {
    /// The run's id where it was exported (for reference only).
    pub id: i64,
    pub name: String,
    pub status: RunStatus,
    pub error: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub config: RunConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedEvalSet {
    pub name: String,
    pub content_hash: String,
    /// The normalised eval-set file (JSONL), exactly what the hash covers.
    pub content: String,
}

/// A candidate without its key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedCandidate {
    /// The candidate's id where it was exported; records refer to it.
    pub id: i64,
    pub name: String,
    pub provider: ProviderKind,
    pub base_url: String,
    pub model: String,
    pub api_key_env: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    pub conditions: Conditions,
    pub pricing: Pricing,
    pub claimed: Option<ClaimedFigure>,
    pub notes: Option<String>,
    /// The declared tokenize endpoint (absent in exports made before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenize: Option<TokenizeEndpoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedEvent {
    pub at: i64,
    pub level: String,
    pub message: String,
}

/// Reads a whole terminal run out of the store.
pub async fn export_run(store: &dyn Store, run_id: i64) -> Result<RunExport, AppError> {
    let run = store
        .get_run(run_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run #{run_id}")))?;
    if !run.status.is_terminal() {
        return Err(AppError::Invalid(format!(
            "run #{run_id} is {}; only finished, failed or cancelled runs are exported (wait for it to end, or cancel it)",
            run.status.as_str()
        )));
    }
    let version = store
        .get_evalset_version(run.evalset_version_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("eval set version #{}", run.evalset_version_id)))?;
    let mut candidates = Vec::with_capacity(run.candidate_ids.len());
    for &id in &run.candidate_ids {
        let c = store
            .get_candidate(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("candidate #{id}")))?;
        let s = c.spec;
        candidates.push(ExportedCandidate {
            id,
            name: s.name,
            provider: s.provider,
            base_url: crate::domain::redact::url(&s.base_url),
            model: s.model,
            api_key_env: s.api_key_env,
            max_tokens: s.max_tokens,
            temperature: s.temperature,
            extra_body: s.extra_body,
            conditions: s.conditions,
            pricing: s.pricing,
            claimed: s.claimed,
            notes: s.notes,
            tokenize: s.tokenize,
        });
    }
    let events = store
        .list_run_events(run_id)
        .await?
        .into_iter()
        .map(|e| ExportedEvent {
            at: e.at.0,
            level: e.level,
            message: e.message,
        })
        .collect();
    Ok(RunExport {
        schema: SCHEMA.to_string(),
        exported_by: format!("bakeoff {}", crate::VERSION),
        exported_at: Timestamp::now().0,
        run: ExportedRun {
            id: run.id,
            name: run.name,
            status: run.status,
            error: run.error,
            created_at: run.created_at.0,
            started_at: run.started_at.map(|t| t.0),
            finished_at: run.finished_at.map(|t| t.0),
            config: run.config,
        },
        evalset: ExportedEvalSet {
            name: version.file.header.name.clone(),
            content_hash: version.content_hash,
            content: version.file.normalised(),
        },
        candidates,
        events,
        harness: store.get_run_harness(run_id).await?,
        records: store.list_request_records(run_id).await?,
    })
}

/// Parses an export, refusing other schemas with a message that says what was found.
pub fn parse_export(text: &str) -> Result<RunExport, AppError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        AppError::Invalid(format!(
            "the file is not JSON (line {}, column {}): {e}",
            e.line(),
            e.column()
        ))
    })?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(SCHEMA) => {}
        Some(other) => {
            return Err(AppError::Invalid(format!(
                "the file's schema is {:?}; this bakeoff reads {SCHEMA:?}",
                crate::domain::validation::truncate(other, 40)
            )));
        }
        None => {
            return Err(AppError::Invalid(format!(
                "the file has no \"schema\" field; a bakeoff run export starts with \"schema\": \"{SCHEMA}\""
            )));
        }
    }
    serde_json::from_value(value).map_err(|e| AppError::Invalid(format!("the export does not match {SCHEMA}: {e}")))
}

/// The spec an exported candidate becomes here (validated like the candidate form).
fn spec_of(c: &ExportedCandidate, name: &str) -> Result<CandidateSpec, AppError> {
    let spec = CandidateSpec {
        name: name.to_string(),
        provider: c.provider,
        base_url: c.base_url.clone(),
        model: c.model.clone(),
        api_key: None,
        api_key_env: c.api_key_env.clone(),
        max_tokens: c.max_tokens,
        temperature: c.temperature,
        extra_body: c.extra_body.clone(),
        conditions: c.conditions.clone(),
        pricing: c.pricing.clone(),
        claimed: c.claimed.clone(),
        notes: c.notes.clone(),
        tokenize: c.tokenize.clone(),
    };
    CandidateDraft::from_spec(&spec)
        .validate(None)
        .map_err(|e| AppError::Invalid(format!("candidate {:?}: {e}", c.name)))
}

/// Stores an export as a new run; returns its id. Candidates are matched by name (same
/// provider, base URL and model) or added — under "NAME (imported)" when the name is taken by a
/// different endpoint. The eval-set version is stored if new (saving identical content returns
/// the existing version). If anything fails, the partly stored run is deleted.
pub async fn import_run(store: &dyn Store, export: &RunExport) -> Result<i64, AppError> {
    if export.schema != SCHEMA {
        return Err(AppError::Invalid(format!(
            "schema {:?} is not {SCHEMA:?}",
            export.schema
        )));
    }
    if !export.run.status.is_terminal() {
        return Err(AppError::Invalid(format!(
            "the exported run is {}; only finished, failed or cancelled runs can be imported",
            export.run.status.as_str()
        )));
    }
    let file = EvalSetFile::parse(&format!("{}.jsonl", export.evalset.name), &export.evalset.content)
        .map_err(|e| AppError::Invalid(format!("the eval set in the export does not parse: {e}")))?;
    if file.content_hash() != export.evalset.content_hash {
        return Err(AppError::Invalid(format!(
            "the eval set's content does not match its hash {} (the file was changed after export)",
            // The first 12 characters, as pages show a version.
            export
                .evalset
                .content_hash
                .get(..12)
                .unwrap_or(&export.evalset.content_hash)
        )));
    }
    let known_ids: std::collections::HashSet<i64> = export.candidates.iter().map(|c| c.id).collect();
    if let Some(r) = export.records.iter().find(|r| !known_ids.contains(&r.candidate_id)) {
        return Err(AppError::Invalid(format!(
            "a record of case {:?} names candidate #{}, which the export does not list",
            r.case_id, r.candidate_id
        )));
    }
    let version_id = store.save_evalset_version(&file).await?;

    let existing = store.list_candidates().await?;
    let mut id_map = std::collections::HashMap::new();
    for c in &export.candidates {
        let same_endpoint =
            |s: &CandidateSpec| s.provider == c.provider && s.base_url == c.base_url && s.model == c.model;
        let id = match existing.iter().find(|e| e.spec.name == c.name) {
            Some(e) if same_endpoint(&e.spec) => e.id,
            _ => {
                let mut name = c.name.clone();
                let mut n = 1;
                while let Some(e) = existing.iter().find(|e| e.spec.name == name) {
                    if same_endpoint(&e.spec) {
                        break;
                    }
                    name = if n == 1 {
                        format!("{} (imported)", c.name)
                    } else {
                        format!("{} (imported {n})", c.name)
                    };
                    n += 1;
                }
                match existing.iter().find(|e| e.spec.name == name) {
                    Some(e) => e.id,
                    None => store.create_candidate(&spec_of(c, &name)?).await?,
                }
            }
        };
        id_map.insert(c.id, id);
    }

    let restored = RestoredRun {
        run: NewRun {
            name: export.run.name.clone(),
            evalset_version_id: version_id,
            candidate_ids: export.candidates.iter().map(|c| id_map[&c.id]).collect(),
            config: export.run.config.clone(),
        },
        status: export.run.status,
        error: export.run.error.clone(),
        created_at: Timestamp(export.run.created_at),
        started_at: export.run.started_at.map(Timestamp),
        finished_at: export.run.finished_at.map(Timestamp),
        events: export
            .events
            .iter()
            .map(|e| RunEvent {
                at: Timestamp(e.at),
                level: e.level.clone(),
                message: e.message.clone(),
            })
            .collect(),
    };
    let run_id = store.restore_run(&restored).await?;
    let stored: Result<(), AppError> = async {
        for chunk in export.records.chunks(IMPORT_BATCH) {
            let batch: Vec<RequestRecord> = chunk
                .iter()
                .map(|r| RequestRecord {
                    run_id,
                    candidate_id: id_map[&r.candidate_id],
                    ..r.clone()
                })
                .collect();
            store.append_request_records(&batch).await?;
        }
        if let Some(harness) = &export.harness {
            store.set_run_harness(run_id, harness).await?;
        }
        store
            .append_run_event(
                run_id,
                "info",
                &format!(
                    "imported from {} (run #{} there), {} records",
                    export.exported_by,
                    export.run.id,
                    export.records.len()
                ),
            )
            .await?;
        store.complete_restore(run_id, &restored).await?;
        Ok(())
    }
    .await;
    if let Err(e) = stored {
        if let Err(cleanup) = store.delete_run(run_id).await {
            tracing::error!(run_id, error = %cleanup, "could not delete a partly imported run");
        }
        return Err(e);
    }
    Ok(run_id)
}
