//! What the queries share: row structs (decoded by `sqlx::FromRow` on either database), their
//! conversion into domain types, column lists, values prepared for binding, and error mapping.
//! The queries themselves are in the aggregate files; everything here is plain data.
use crate::domain::sealed::{KeySealer, is_sealed};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Display;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::text::TextCodec;
use super::{CandidateProgress, EvalSetSummary, EvalSetVersion, EvalSetVersionHead, ProfileChange, StoreError};
use crate::domain::Timestamp;
use crate::domain::candidate::{
    Candidate, CandidateSpec, ClaimedFigure, Conditions, CustomHeader, HeaderText, Pricing, ProviderKind, Secret,
    TokenizeEndpoint, TokenizeKind, WireOptions,
};
use crate::domain::evalset::{EvalCase, EvalSetFile, EvalSetHeader, TaskKind};
use crate::domain::grading::Grade;
use crate::domain::pipeline::PipelineSpec;
use crate::domain::reasoning::ReasoningInContent;
use crate::domain::run::{
    ChunkAttribution, ErrorClass, Phase, RecordGroup, RecordTexts, RequestRecord, Run, RunConfig, RunEvent, RunStatus,
    TimingClock, TokenSource,
};
use crate::domain::scorecard::{NewScorecard, RecordedVerdict, ScorecardListItem, ScorecardRecord};
use crate::domain::thresholds::{ThresholdProfile, ThresholdRule};

/// Records per multi-row INSERT: 40 binds each stays far below SQLite's 32 766 and
/// PostgreSQL's 65 535 bind limits.
pub(crate) const RECORDS_PER_STATEMENT: usize = 200;
/// Grades / eval cases / run candidates / run cases and their marks per multi-row INSERT (at
/// most 9 binds each).
pub(crate) const SMALL_ROWS_PER_STATEMENT: usize = 1_000;
/// Records `Store::list_request_records` reads per query.
pub(crate) const RECORDS_PER_READ: i64 = 5_000;

/// What a read of many records does with each as it arrives, before the next page is read:
/// cuts it for summaries (`RequestRecord::cut_for_summaries`), then hands it to the reader's
/// own step, which may feed it to figures and let part of it go. None: held whole.
pub(crate) type ForSummaries<'a> = Option<&'a mut (dyn FnMut(&mut RequestRecord) + Send)>;

// ---------------------------------------------------------------- errors

/// A unique-constraint violation becomes `Conflict(message)`; anything else stays a database error.
pub(crate) fn conflict_on_unique(err: sqlx::Error, message: impl FnOnce() -> String) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(message()),
        _ => StoreError::Database(err),
    }
}

/// A foreign-key violation becomes `NotFound(what)`: the row referred to does not exist.
pub(crate) fn not_found_on_foreign_key(err: StoreError, what: impl FnOnce() -> String) -> StoreError {
    match &err {
        StoreError::Database(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
            StoreError::NotFound(what())
        }
        _ => err,
    }
}

fn corrupt(place: impl Display, problem: impl Display) -> StoreError {
    StoreError::Corrupt(format!("{place}: {problem}"))
}

pub(crate) fn parse_json<T: DeserializeOwned>(place: impl Display, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(place, format!("invalid JSON ({e})")))
}

fn parse_enum<T>(place: impl Display, text: &str, parse: impl FnOnce(&str) -> Option<T>) -> Result<T, StoreError> {
    parse(text).ok_or_else(|| corrupt(place, format!("unknown value {text:?}")))
}

fn to_u32(place: impl Display, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| corrupt(place, format!("{value} is out of range")))
}

fn to_usize(place: impl Display, value: i64) -> Result<usize, StoreError> {
    usize::try_from(value).map_err(|_| corrupt(place, format!("{value} is out of range")))
}

fn opt_u32(place: impl Display, value: Option<i64>) -> Result<Option<u32>, StoreError> {
    value.map(|v| to_u32(place, v)).transpose()
}

pub(crate) fn to_json(value: &impl serde::Serialize) -> String {
    // Serialising plain data (maps, vectors, derived structs) into a String cannot fail.
    serde_json::to_string(value).expect("serialising a domain value to JSON")
}

fn parse_task(place: impl Display, text: &str) -> Result<TaskKind, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|_| corrupt(place, format!("unknown task {text:?}")))
}

// ---------------------------------------------------------------- candidates

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CandidateRow {
    pub id: i64,
    pub name: String,
    pub provider: String,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub extra_body: String,
    pub hardware: Option<String>,
    pub framework: Option<String>,
    pub quantization: Option<String>,
    pub context_length: Option<i64>,
    pub price_input_per_mtok: Option<f64>,
    pub price_output_per_mtok: Option<f64>,
    pub claimed_tokens_per_second: Option<f64>,
    pub claimed_caliber: Option<String>,
    pub claimed_conditions: Option<String>,
    pub notes: Option<String>,
    pub tokenize_kind: Option<String>,
    pub tokenize_path: Option<String>,
    pub tls_ca_file: Option<String>,
    pub reasoning_in_content: String,
    pub headers: Option<String>,
    pub metrics_url: Option<String>,
    pub gpu_metrics_url: Option<String>,
    pub gpu_count: Option<i64>,
    pub gpu_kind: Option<String>,
    pub gpu_hour_price: Option<f64>,
    /// The kept series' names, one a line (NULL: none).
    pub metrics_keep: Option<String>,
    pub price_cached_input_per_mtok: Option<f64>,
    pub price_cache_write_per_mtok: Option<f64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The column list matching `CandidateRow` (a macro so SQL can be assembled with `concat!`).
macro_rules! candidate_columns {
    () => {
        "id, name, provider, base_url, model, api_key, api_key_env, max_tokens, temperature, extra_body, hardware, \
         framework, quantization, context_length, price_input_per_mtok, price_output_per_mtok, \
         claimed_tokens_per_second, claimed_caliber, claimed_conditions, notes, tokenize_kind, tokenize_path, \
         tls_ca_file, reasoning_in_content, headers, metrics_url, gpu_metrics_url, gpu_count, gpu_kind, \
         gpu_hour_price, metrics_keep, price_cached_input_per_mtok, price_cache_write_per_mtok, created_at, updated_at"
    };
}
pub(crate) use candidate_columns;

impl CandidateRow {
    /// The stored row as a candidate, its sealed API key opened with `sealer` for this row's id
    /// (a plaintext key from before sealing is read as it is; `connect` seals those, and
    /// re-seals v1 values for their row, on start).
    pub(crate) fn into_candidate(self, sealer: &KeySealer) -> Result<Candidate, StoreError> {
        let place = |column: &str| format!("candidates.{column} of candidate {}", self.id);
        let api_key = match self.api_key.as_deref() {
            None => None,
            Some(stored) if !is_sealed(stored) => Some(Secret::new(stored)),
            Some(stored) => Some(Secret::new(
                sealer
                    .open_for(self.id, stored)
                    .map_err(|e| StoreError::Key(format!("{}: {e}; start bakeoff with the server key it was sealed with (BAKEOFF_SECRET_KEY or its key file)", place("api_key"))))?,
            )),
        };
        let provider = parse_enum(place("provider"), &self.provider, ProviderKind::parse)?;
        let extra_body = parse_json(place("extra_body"), &self.extra_body)?;
        let max_tokens = opt_u32(place("max_tokens"), self.max_tokens)?;
        let context_length = opt_u32(place("context_length"), self.context_length)?;
        let gpu_count = opt_u32(place("gpu_count"), self.gpu_count)?;
        let claimed = match (self.claimed_tokens_per_second, self.claimed_caliber) {
            (Some(tokens_per_second), Some(caliber)) => Some(ClaimedFigure {
                tokens_per_second,
                caliber,
                conditions: self.claimed_conditions,
            }),
            _ => None,
        };
        let tokenize = match self.tokenize_kind.as_deref() {
            None => None,
            Some(kind) => Some(TokenizeEndpoint {
                kind: parse_enum(place("tokenize_kind"), kind, TokenizeKind::parse)?,
                path: self
                    .tokenize_path
                    .ok_or_else(|| corrupt(place("tokenize_path"), "missing beside tokenize_kind"))?,
            }),
        };
        let reasoning_in_content = parse_enum(
            place("reasoning_in_content"),
            &self.reasoning_in_content,
            ReasoningInContent::parse,
        )?;
        let headers = match self.headers.as_deref() {
            None => Vec::new(),
            Some(json) => {
                let stored: Vec<StoredHeader> = parse_json(place("headers"), json)?;
                let mut headers = Vec::with_capacity(stored.len());
                for h in stored {
                    let value = match (h.value, h.sealed) {
                        (Some(v), None) => HeaderText::Plain(v),
                        (None, Some(sealed)) => {
                            HeaderText::Secret(Secret::new(sealer.open_for(self.id, &sealed).map_err(|e| {
                                StoreError::Key(format!(
                                    "{}: {e}; start bakeoff with the server key it was sealed with",
                                    place("headers")
                                ))
                            })?))
                        }
                        _ => return Err(corrupt(place("headers"), "a header needs a value or a sealed value")),
                    };
                    headers.push(CustomHeader { name: h.name, value });
                }
                headers
            }
        };
        Ok(Candidate {
            id: self.id,
            spec: CandidateSpec {
                name: self.name,
                provider,
                base_url: self.base_url,
                model: self.model,
                api_key,
                api_key_env: self.api_key_env,
                max_tokens,
                temperature: self.temperature,
                extra_body,
                conditions: Conditions {
                    hardware: self.hardware,
                    framework: self.framework,
                    quantization: self.quantization,
                    context_length,
                },
                pricing: Pricing {
                    input_per_mtok: self.price_input_per_mtok,
                    output_per_mtok: self.price_output_per_mtok,
                    cached_input_per_mtok: self.price_cached_input_per_mtok,
                    cache_write_per_mtok: self.price_cache_write_per_mtok,
                },
                claimed,
                notes: self.notes,
                tokenize,
                tls_ca_file: self.tls_ca_file,
                wire: WireOptions {
                    reasoning_in_content,
                    headers,
                },
                metrics_url: self.metrics_url,
                gpu_metrics_url: self.gpu_metrics_url,
                metrics_keep: self
                    .metrics_keep
                    .as_deref()
                    .map(|k| k.lines().map(str::to_string).collect())
                    .unwrap_or_default(),
                gpu_count,
                gpu_kind: self.gpu_kind,
                gpu_hour_price: self.gpu_hour_price,
            },
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
        })
    }
}

/// A candidate spec flattened into bindable column values (bound in this order by
/// `candidates::bind_candidate!`).
pub(crate) struct CandidateValues<'a> {
    pub name: &'a str,
    pub provider: &'static str,
    pub base_url: &'a str,
    pub model: &'a str,
    /// Sealed, never the plaintext.
    pub api_key: Option<String>,
    pub api_key_env: Option<&'a str>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub extra_body: String,
    pub hardware: Option<&'a str>,
    pub framework: Option<&'a str>,
    pub quantization: Option<&'a str>,
    pub context_length: Option<i64>,
    pub price_input_per_mtok: Option<f64>,
    pub price_output_per_mtok: Option<f64>,
    pub claimed_tokens_per_second: Option<f64>,
    pub claimed_caliber: Option<&'a str>,
    pub claimed_conditions: Option<&'a str>,
    pub notes: Option<&'a str>,
    pub tokenize_kind: Option<&'static str>,
    pub tokenize_path: Option<&'a str>,
    pub tls_ca_file: Option<&'a str>,
    pub reasoning_in_content: &'static str,
    /// JSON; secret values sealed for the candidate (left out when its id is not known yet).
    pub headers: Option<String>,
    pub metrics_url: Option<&'a str>,
    pub gpu_metrics_url: Option<&'a str>,
    pub gpu_count: Option<i64>,
    pub gpu_kind: Option<&'a str>,
    pub gpu_hour_price: Option<f64>,
    pub metrics_keep: Option<String>,
    pub price_cached_input_per_mtok: Option<f64>,
    pub price_cache_write_per_mtok: Option<f64>,
}

/// A custom header as stored: a plain value, or a secret one sealed for its candidate.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredHeader {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<String>,
}

/// A spec's headers as stored, secrets sealed for candidate `id` (None: left out).
pub(crate) fn stored_headers(spec: &CandidateSpec, sealer: &KeySealer, id: Option<i64>) -> Option<String> {
    let stored: Vec<StoredHeader> = spec
        .wire
        .headers
        .iter()
        .filter_map(|h| match (&h.value, id) {
            (HeaderText::Plain(v), _) => Some(StoredHeader {
                name: h.name.clone(),
                value: Some(v.clone()),
                sealed: None,
            }),
            (HeaderText::Secret(s), Some(id)) => Some(StoredHeader {
                name: h.name.clone(),
                value: None,
                sealed: Some(sealer.seal_for(id, s.expose())),
            }),
            (HeaderText::Secret(_), None) => None,
        })
        .collect();
    (!stored.is_empty()).then(|| to_json(&stored))
}

impl<'a> CandidateValues<'a> {
    /// The values of `spec`; its key sealed for candidate `id` (None: a row not inserted yet,
    /// whose key is written once its id is known).
    pub(crate) fn new(spec: &'a CandidateSpec, sealer: &KeySealer, id: Option<i64>) -> Self {
        CandidateValues {
            name: &spec.name,
            provider: spec.provider.as_str(),
            base_url: &spec.base_url,
            model: &spec.model,
            api_key: id.and_then(|id| spec.api_key.as_ref().map(|k| sealer.seal_for(id, k.expose()))),
            api_key_env: spec.api_key_env.as_deref(),
            max_tokens: spec.max_tokens.map(i64::from),
            temperature: spec.temperature,
            extra_body: to_json(&spec.extra_body),
            hardware: spec.conditions.hardware.as_deref(),
            framework: spec.conditions.framework.as_deref(),
            quantization: spec.conditions.quantization.as_deref(),
            context_length: spec.conditions.context_length.map(i64::from),
            price_input_per_mtok: spec.pricing.input_per_mtok,
            price_output_per_mtok: spec.pricing.output_per_mtok,
            claimed_tokens_per_second: spec.claimed.as_ref().map(|c| c.tokens_per_second),
            claimed_caliber: spec.claimed.as_ref().map(|c| c.caliber.as_str()),
            claimed_conditions: spec.claimed.as_ref().and_then(|c| c.conditions.as_deref()),
            notes: spec.notes.as_deref(),
            tokenize_kind: spec.tokenize.as_ref().map(|t| t.kind.as_str()),
            tokenize_path: spec.tokenize.as_ref().map(|t| t.path.as_str()),
            tls_ca_file: spec.tls_ca_file.as_deref(),
            reasoning_in_content: spec.wire.reasoning_in_content.as_str(),
            headers: stored_headers(spec, sealer, id),
            metrics_url: spec.metrics_url.as_deref(),
            gpu_metrics_url: spec.gpu_metrics_url.as_deref(),
            gpu_count: spec.gpu_count.map(i64::from),
            gpu_kind: spec.gpu_kind.as_deref(),
            gpu_hour_price: spec.gpu_hour_price,
            metrics_keep: (!spec.metrics_keep.is_empty()).then(|| spec.metrics_keep.join("\n")),
            price_cached_input_per_mtok: spec.pricing.cached_input_per_mtok,
            price_cache_write_per_mtok: spec.pricing.cache_write_per_mtok,
        }
    }
}

pub(crate) fn candidate_name_taken(name: &str) -> String {
    format!("a candidate named {name:?} already exists")
}

// ---------------------------------------------------------------- eval sets

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EvalSetSummaryRow {
    pub id: i64,
    pub name: String,
    pub task: String,
    pub description: Option<String>,
    pub latest_version_id: i64,
    pub latest_hash: String,
    pub case_count: i64,
    pub version_count: i64,
    pub updated_at: i64,
}

impl EvalSetSummaryRow {
    pub(crate) fn into_summary(self) -> Result<EvalSetSummary, StoreError> {
        Ok(EvalSetSummary {
            task: parse_task(format!("evalsets.task of eval set {}", self.id), &self.task)?,
            id: self.id,
            name: self.name,
            description: self.description,
            latest_version_id: self.latest_version_id,
            latest_hash: self.latest_hash,
            case_count: to_usize(
                format!("evalset_versions.case_count of eval set {}", self.id),
                self.case_count,
            )?,
            version_count: to_usize(format!("version count of eval set {}", self.id), self.version_count)?,
            updated_at: Timestamp(self.updated_at),
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EvalSetVersionRow {
    pub id: i64,
    pub evalset_id: i64,
    pub content_hash: String,
    pub content: String,
    pub created_at: i64,
}

impl EvalSetVersionRow {
    pub(crate) fn into_version(self) -> Result<EvalSetVersion, StoreError> {
        let place = format!("evalset_versions.content of version {}", self.id);
        let file = EvalSetFile::parse(&place, &self.content).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        Ok(EvalSetVersion {
            id: self.id,
            evalset_id: self.evalset_id,
            content_hash: self.content_hash,
            file,
            created_at: Timestamp(self.created_at),
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EvalSetHeadRow {
    pub id: i64,
    pub evalset_id: i64,
    pub content_hash: String,
    /// The header line (`evalset_versions.header`).
    pub head: Option<String>,
    pub case_count: i64,
    pub created_at: i64,
}

impl EvalSetHeadRow {
    pub(crate) fn into_head(self) -> Result<EvalSetVersionHead, StoreError> {
        let place = format!("evalset_versions.content (header) of version {}", self.id);
        let header: EvalSetHeader = parse_json(place, self.head.as_deref().unwrap_or_default())?;
        Ok(EvalSetVersionHead {
            id: self.id,
            evalset_id: self.evalset_id,
            content_hash: self.content_hash,
            header,
            case_count: self.case_count.max(0) as usize,
            created_at: Timestamp(self.created_at),
        })
    }
}

/// One row of `eval_cases`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EvalCaseRow {
    pub case_id: String,
    pub position: i64,
    pub input: String,
    pub expected: Option<String>,
    pub graders: String,
    pub tags: String,
    pub weight: f64,
}

impl EvalCaseRow {
    /// The case as its file has it: graders equal to the header's defaults are left out, a
    /// weight of 1 is the default.
    pub(crate) fn into_case(self, version_id: i64, header: &EvalSetHeader) -> Result<EvalCase, StoreError> {
        let place = |column: &str| format!("eval_cases.{column} of version {version_id} position {}", self.position);
        #[derive(serde::Deserialize)]
        struct Input {
            #[serde(default)]
            vars: serde_json::Map<String, serde_json::Value>,
            #[serde(default)]
            messages: Option<Vec<crate::domain::evalset::ChatMessage>>,
            #[serde(default)]
            tools: Vec<crate::domain::tool_calls::ToolDef>,
            #[serde(default)]
            tool_choice: Option<crate::domain::tool_calls::ToolChoice>,
            #[serde(default)]
            expected_calls: Option<crate::domain::tool_calls::ToolExpectation>,
            #[serde(default)]
            turns: Vec<crate::domain::evalset::conversation::Turn>,
            #[serde(default)]
            history: Option<crate::domain::evalset::conversation::HistoryMode>,
            #[serde(default)]
            response_format: Option<crate::domain::tool_calls::structured::ResponseFormat>,
        }
        let input: Input = parse_json(place("input"), &self.input)?;
        let expected = match &self.expected {
            Some(text) => Some(parse_json(place("expected"), text)?),
            None => None,
        };
        let graders: Vec<crate::domain::grading::Grader> = parse_json(place("graders"), &self.graders)?;
        Ok(EvalCase {
            id: self.case_id,
            vars: input.vars,
            messages: input.messages,
            expected,
            graders: if graders == header.graders { Vec::new() } else { graders },
            tags: parse_json(place("tags"), &self.tags)?,
            weight: (self.weight != 1.0).then_some(self.weight),
            tools: input.tools,
            tool_choice: input.tool_choice,
            expected_calls: input.expected_calls,
            turns: input.turns,
            history: input.history,
            response_format: input.response_format,
        })
    }
}

/// One case of a version, flattened for the `eval_cases` table.
pub(crate) struct CaseValues<'a> {
    pub case_id: &'a str,
    pub position: i64,
    pub input: String,
    pub expected: Option<String>,
    pub graders: String,
    pub tags: String,
    pub weight: f64,
}

pub(crate) fn case_values(file: &EvalSetFile) -> Vec<CaseValues<'_>> {
    file.cases
        .iter()
        .enumerate()
        .map(|(position, case)| {
            let mut input = serde_json::Map::new();
            if !case.vars.is_empty() {
                input.insert("vars".into(), serde_json::Value::Object(case.vars.clone()));
            }
            if let Some(messages) = &case.messages {
                input.insert("messages".into(), serde_json::to_value(messages).unwrap_or_default());
            }
            // A tool case's tool fields ride in `input` too: no column of their own.
            if !case.tools.is_empty() {
                input.insert("tools".into(), serde_json::to_value(&case.tools).unwrap_or_default());
            }
            if let Some(choice) = &case.tool_choice {
                input.insert("tool_choice".into(), choice.openai());
            }
            if let Some(expectation) = &case.expected_calls {
                input.insert(
                    "expected_calls".into(),
                    serde_json::to_value(expectation).unwrap_or_default(),
                );
            }
            // A conversation case's turns and history mode too.
            if !case.turns.is_empty() {
                input.insert("turns".into(), serde_json::to_value(&case.turns).unwrap_or_default());
            }
            if let Some(history) = case.history {
                input.insert("history".into(), serde_json::to_value(history).unwrap_or_default());
            }
            if let Some(format) = &case.response_format {
                input.insert("response_format".into(), format.openai());
            }
            CaseValues {
                case_id: &case.id,
                position: position as i64,
                input: to_json(&input),
                expected: case.expected.as_ref().map(to_json),
                graders: to_json(&file.graders_for(case)),
                tags: to_json(&case.tags),
                weight: case.weight(),
            }
        })
        .collect()
}

// ---------------------------------------------------------------- threshold profiles

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ProfileRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: i64,
    pub rules: String,
    pub slo: Option<String>,
}

impl ProfileRow {
    pub(crate) fn into_profile(self) -> Result<ThresholdProfile, StoreError> {
        let place = |column: &str| format!("threshold_profile_versions.{column} of profile {}", self.id);
        Ok(ThresholdProfile {
            version: to_u32(place("version"), self.version)?,
            rules: parse_json(place("rules"), &self.rules)?,
            slo: self.slo.as_deref().map(|s| parse_json(place("slo"), s)).transpose()?,
            id: self.id,
            name: self.name,
            description: self.description,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ProfileChangeRow {
    pub profile_id: i64,
    pub version: i64,
    pub changed_by: String,
    pub rationale: String,
    pub rules: String,
    pub slo: Option<String>,
    pub at: i64,
}

impl ProfileChangeRow {
    pub(crate) fn into_change(self) -> Result<ProfileChange, StoreError> {
        let place = |column: &str| {
            format!(
                "threshold_profile_versions.{column} of profile {} version {}",
                self.profile_id, self.version
            )
        };
        Ok(ProfileChange {
            version: to_u32(place("version"), self.version)?,
            rules: parse_json::<Vec<ThresholdRule>>(place("rules"), &self.rules)?,
            slo: self.slo.as_deref().map(|s| parse_json(place("slo"), s)).transpose()?,
            changed_by: self.changed_by,
            rationale: self.rationale,
            at: Timestamp(self.at),
        })
    }
}

pub(crate) fn rules_json(rules: &[ThresholdRule]) -> String {
    to_json(&rules)
}

// ---------------------------------------------------------------- runs

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunRow {
    pub id: i64,
    pub name: String,
    pub evalset_version_id: i64,
    pub config: String,
    pub status: String,
    pub error: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// The column list matching `RunRow`, qualified so it can be used in joins.
macro_rules! run_columns {
    () => {
        "runs.id, runs.name, runs.evalset_version_id, runs.config, runs.status, runs.error, runs.created_at, \
         runs.started_at, runs.finished_at"
    };
}
pub(crate) use run_columns;

impl RunRow {
    pub(crate) fn into_run(self, candidate_ids: Vec<i64>, text: TextCodec) -> Result<Run, StoreError> {
        let place = |column: &str| format!("runs.{column} of run {}", self.id);
        Ok(Run {
            config: parse_json::<RunConfig>(place("config"), &self.config)?,
            status: parse_enum(place("status"), &self.status, RunStatus::parse)?,
            id: self.id,
            name: self.name,
            evalset_version_id: self.evalset_version_id,
            candidate_ids,
            error: text.decode_opt(self.error),
            created_at: Timestamp(self.created_at),
            started_at: self.started_at.map(Timestamp),
            finished_at: self.finished_at.map(Timestamp),
        })
    }
}

/// The SELECT of `RunListRow`s, to be followed by a filter and an order.
macro_rules! run_list_select {
    () => {
        concat!(
            "SELECT ",
            $crate::rows::run_columns!(),
            ", e.name AS evalset_name, \
             (SELECT COUNT(*) FROM request_records r WHERE r.run_id = runs.id) AS record_count \
             FROM runs JOIN evalset_versions v ON v.id = runs.evalset_version_id \
             JOIN evalsets e ON e.id = v.evalset_id"
        )
    };
}
pub(crate) use run_list_select;

/// A run's list row: the run plus what the list shows beside it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunListRow {
    #[sqlx(flatten)]
    pub run: RunRow,
    pub evalset_name: String,
    pub record_count: i64,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunCandidateRow {
    pub run_id: i64,
    pub candidate_id: i64,
    /// The candidate's current name; the run's snapshot names it as it was.
    pub name: String,
    pub snapshot: Option<String>,
}

/// Candidate ids and names per run, in the run's order (rows must arrive ordered by position).
pub(crate) fn group_run_candidates(rows: Vec<RunCandidateRow>) -> HashMap<i64, (Vec<i64>, Vec<String>)> {
    let mut by_run: HashMap<i64, (Vec<i64>, Vec<String>)> = HashMap::new();
    for row in rows {
        let entry = by_run.entry(row.run_id).or_default();
        entry.0.push(row.candidate_id);
        entry.1.push(snapshot_name(
            row.run_id,
            row.candidate_id,
            row.snapshot.as_deref(),
            row.name,
        ));
    }
    by_run
}

pub(crate) fn harness_json(harness: &crate::domain::calibers::HarnessReport) -> String {
    to_json(harness)
}

pub(crate) fn parse_harness(run_id: i64, text: &str) -> Result<crate::domain::calibers::HarnessReport, StoreError> {
    parse_json(format_args!("runs.harness of run {run_id}"), text)
}

pub(crate) fn run_config_json(config: &RunConfig) -> String {
    to_json(config)
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunEventRow {
    pub at: i64,
    pub level: String,
    pub message: String,
}

impl RunEventRow {
    pub(crate) fn into_event(self, text: TextCodec) -> RunEvent {
        RunEvent {
            at: Timestamp(self.at),
            level: self.level,
            message: text.decode(self.message),
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ProgressRow {
    pub candidate_id: i64,
    pub measured_attempts: i64,
    pub warmup_attempts: i64,
    pub failed_attempts: i64,
}

impl From<ProgressRow> for CandidateProgress {
    fn from(row: ProgressRow) -> Self {
        CandidateProgress {
            candidate_id: row.candidate_id,
            measured_attempts: row.measured_attempts,
            warmup_attempts: row.warmup_attempts,
            failed_attempts: row.failed_attempts,
        }
    }
}

// ---------------------------------------------------------------- request records

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RecordGroupRow {
    pub phase: String,
    pub is_warmup: bool,
    pub repetition: i64,
    pub concurrency: i64,
    pub records: i64,
}

impl RecordGroupRow {
    pub(crate) fn into_group(self, run_id: i64, candidate_id: i64) -> Result<RecordGroup, StoreError> {
        let place = |column: &str| format!("request_records.{column} of run {run_id}, candidate {candidate_id}");
        Ok(RecordGroup {
            phase: parse_enum(place("phase"), &self.phase, Phase::parse)?,
            is_warmup: self.is_warmup,
            repetition: to_u32(place("repetition"), self.repetition)?,
            concurrency: to_u32(place("concurrency"), self.concurrency)?,
            records: self.records.max(0) as u64,
        })
    }
}

/// Columns written for a record, in the order `RecordValues` is bound.
macro_rules! record_insert_columns {
    () => {
        "run_id, candidate_id, case_id, phase, repetition, attempt, concurrency, is_warmup, sent_at_us, \
         client_queue_us, connect_us, connection_reused, headers_us, first_chunk_us, first_reasoning_us, \
         first_content_us, last_token_us, end_us, chunks, http_status, finish_reason, input_tokens, output_tokens, \
         output_tokens_source, reasoning_tokens, canonical_tokens, output_chars, output, reasoning, error_class, \
         error_detail, chunk_attribution, chunk_text, clock, content_reasoning, rate_limit, tool_turn, turn, \
         cached_prompt_tokens, cache_creation_tokens"
    };
}
pub(crate) use record_insert_columns;

/// Columns read for a record (`RecordRow`): its id, then what was written.
macro_rules! record_select_columns {
    () => {
        concat!("id, ", $crate::rows::record_insert_columns!())
    };
}
pub(crate) use record_select_columns;

/// The unique key of a record: (run, candidate, case, phase, repetition, attempt).
pub(crate) type RecordKey = (i64, i64, String, String, i64, i64);

/// A record flattened into bindable values, in `record_insert_columns!()` order.
pub(crate) struct RecordValues<'a> {
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: &'a str,
    pub phase: &'static str,
    pub repetition: i64,
    pub attempt: i64,
    pub concurrency: i64,
    pub is_warmup: bool,
    pub sent_at_us: i64,
    pub client_queue_us: i64,
    pub connect_us: Option<i64>,
    pub connection_reused: Option<bool>,
    pub headers_us: Option<i64>,
    pub first_chunk_us: Option<i64>,
    pub first_reasoning_us: Option<i64>,
    pub first_content_us: Option<i64>,
    pub last_token_us: Option<i64>,
    pub end_us: Option<i64>,
    pub chunks: String,
    pub http_status: Option<i64>,
    pub finish_reason: Option<Cow<'a, str>>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub output_tokens_source: Option<&'static str>,
    pub reasoning_tokens: Option<i64>,
    pub canonical_tokens: Option<i64>,
    pub output_chars: i64,
    pub output: Cow<'a, str>,
    pub reasoning: Option<Cow<'a, str>>,
    pub error_class: Option<&'static str>,
    pub error_detail: Option<Cow<'a, str>>,
    pub chunk_attribution: Option<&'static str>,
    /// JSON, NULL when empty.
    pub chunk_text: Option<String>,
    pub clock: Option<&'static str>,
    /// JSON, NULL when none.
    pub content_reasoning: Option<String>,
    /// JSON, NULL when none.
    pub rate_limit: Option<String>,
    /// JSON (`domain::tool_calls::ToolTurn`), NULL for a request without tools.
    pub tool_turn: Option<String>,
    /// JSON (`domain::conversation::TurnFacts`), NULL for a request that is no conversation turn.
    pub turn: Option<String>,
    pub cached_prompt_tokens: Option<i64>,
    pub cache_creation_tokens: Option<i64>,
}

impl<'a> RecordValues<'a> {
    /// The server's text (output, reasoning, error body, finish reason) encoded with `text`.
    pub(crate) fn new(r: &'a RequestRecord, text: TextCodec) -> Self {
        RecordValues {
            run_id: r.run_id,
            candidate_id: r.candidate_id,
            case_id: &r.case_id,
            phase: r.phase.as_str(),
            repetition: i64::from(r.repetition),
            attempt: i64::from(r.attempt),
            concurrency: i64::from(r.concurrency),
            is_warmup: r.is_warmup,
            sent_at_us: r.sent_at_us,
            client_queue_us: r.client_queue_us,
            connect_us: r.connect_us.into(),
            connection_reused: r.connection_reused,
            headers_us: r.headers_us.into(),
            first_chunk_us: r.first_chunk_us.into(),
            first_reasoning_us: r.first_reasoning_us.into(),
            first_content_us: r.first_content_us.into(),
            last_token_us: r.last_token_us.into(),
            end_us: r.end_us.into(),
            chunks: to_json(&r.chunks),
            http_status: r.http_status.map(i64::from),
            finish_reason: text.encode_opt(r.finish_reason.as_deref()),
            input_tokens: r.input_tokens.map(i64::from),
            output_tokens: r.output_tokens.map(i64::from),
            output_tokens_source: r.output_tokens_source.map(|s| s.as_str()),
            reasoning_tokens: r.reasoning_tokens.map(i64::from),
            canonical_tokens: r.canonical_tokens.map(i64::from),
            output_chars: i64::from(r.output_chars),
            output: text.encode(r.output()),
            reasoning: text.encode_opt(r.reasoning()),
            error_class: r.error_class.map(|c| c.as_str()),
            error_detail: text.encode_opt(r.error_detail()),
            chunk_attribution: r.chunk_attribution.map(|a| a.as_str()),
            chunk_text: (!r.chunk_text().is_empty()).then(|| to_json(r.chunk_text())),
            clock: r.clock.map(|c| c.as_str()),
            content_reasoning: r.content_reasoning().map(|c| to_json(&c)),
            rate_limit: r.rate_limit.as_deref().map(to_json),
            tool_turn: r.tool_turn().map(to_json),
            turn: r.turn.as_deref().map(to_json),
            cached_prompt_tokens: r.prompt_cache.map(|c| i64::from(c.read_tokens)),
            cache_creation_tokens: r.prompt_cache.and_then(|c| c.creation_tokens).map(i64::from),
        }
    }
}

pub(crate) fn record_key(r: &RequestRecord) -> RecordKey {
    (
        r.run_id,
        r.candidate_id,
        r.case_id.to_string(),
        r.phase.as_str().to_string(),
        i64::from(r.repetition),
        i64::from(r.attempt),
    )
}

/// What an `INSERT … RETURNING` gives back for a newly inserted record.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InsertedRecordRow {
    pub id: i64,
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: String,
    pub phase: String,
    pub repetition: i64,
    pub attempt: i64,
}

impl InsertedRecordRow {
    pub(crate) fn key(self) -> (i64, RecordKey) {
        (
            self.id,
            (
                self.run_id,
                self.candidate_id,
                self.case_id,
                self.phase,
                self.repetition,
                self.attempt,
            ),
        )
    }
}

/// Maps each key to the first record in the batch carrying it (a key repeated inside one batch
/// is stored once, like a key already in the database).
pub(crate) fn first_index_by_key(records: &[RequestRecord]) -> HashMap<RecordKey, usize> {
    let mut by_key = HashMap::with_capacity(records.len());
    for (index, record) in records.iter().enumerate() {
        by_key.entry(record_key(record)).or_insert(index);
    }
    by_key
}

/// A grade ready to bind: (record id, position, grade).
pub(crate) type GradeValues<'a> = (i64, i64, &'a Grade);

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RecordRow {
    pub id: i64,
    pub run_id: i64,
    pub candidate_id: i64,
    pub case_id: String,
    pub phase: String,
    pub repetition: i64,
    pub attempt: i64,
    pub concurrency: i64,
    pub is_warmup: bool,
    pub sent_at_us: i64,
    pub client_queue_us: i64,
    pub connect_us: Option<i64>,
    pub connection_reused: Option<bool>,
    pub headers_us: Option<i64>,
    pub first_chunk_us: Option<i64>,
    pub first_reasoning_us: Option<i64>,
    pub first_content_us: Option<i64>,
    pub last_token_us: Option<i64>,
    pub end_us: Option<i64>,
    pub chunks: String,
    pub http_status: Option<i64>,
    pub finish_reason: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub output_tokens_source: Option<String>,
    pub reasoning_tokens: Option<i64>,
    pub canonical_tokens: Option<i64>,
    pub output_chars: i64,
    pub output: String,
    pub reasoning: Option<String>,
    pub error_class: Option<String>,
    pub error_detail: Option<String>,
    pub chunk_attribution: Option<String>,
    pub chunk_text: Option<String>,
    pub clock: Option<String>,
    pub content_reasoning: Option<String>,
    pub rate_limit: Option<String>,
    pub tool_turn: Option<String>,
    pub turn: Option<String>,
    pub cached_prompt_tokens: Option<i64>,
    pub cache_creation_tokens: Option<i64>,
}

impl RecordRow {
    /// The domain record, with `grades` attached.
    pub(crate) fn into_record(
        self,
        grades: Vec<Grade>,
        text: TextCodec,
        shared: &mut SharedTexts,
    ) -> Result<RequestRecord, StoreError> {
        let id = self.id;
        let place = |column: &str| format!("request_records.{column} of record {id}");
        let http_status = self
            .http_status
            .map(|s| u16::try_from(s).map_err(|_| corrupt(place("http_status"), format!("{s} is out of range"))))
            .transpose()?;
        Ok(RequestRecord {
            run_id: self.run_id,
            candidate_id: self.candidate_id,
            phase: parse_enum(place("phase"), &self.phase, Phase::parse)?,
            case_id: shared.of(self.case_id),
            repetition: to_u32(place("repetition"), self.repetition)?,
            attempt: to_u32(place("attempt"), self.attempt)?,
            concurrency: to_u32(place("concurrency"), self.concurrency)?,
            is_warmup: self.is_warmup,
            sent_at_us: self.sent_at_us,
            client_queue_us: self.client_queue_us,
            connect_us: self.connect_us.into(),
            connection_reused: self.connection_reused,
            headers_us: self.headers_us.into(),
            first_chunk_us: self.first_chunk_us.into(),
            first_reasoning_us: self.first_reasoning_us.into(),
            first_content_us: self.first_content_us.into(),
            last_token_us: self.last_token_us.into(),
            end_us: self.end_us.into(),
            chunks: parse_json(place("chunks"), &self.chunks)?,
            http_status,
            finish_reason: text.decode_opt(self.finish_reason).map(|t| shared.of(t)),
            input_tokens: opt_u32(place("input_tokens"), self.input_tokens)?,
            output_tokens: opt_u32(place("output_tokens"), self.output_tokens)?,
            output_tokens_source: self
                .output_tokens_source
                .as_deref()
                .map(|s| parse_enum(place("output_tokens_source"), s, TokenSource::parse))
                .transpose()?,
            reasoning_tokens: opt_u32(place("reasoning_tokens"), self.reasoning_tokens)?,
            canonical_tokens: opt_u32(place("canonical_tokens"), self.canonical_tokens)?,
            output_chars: to_u32(place("output_chars"), self.output_chars)?,
            texts: RecordTexts {
                output: text.decode(self.output),
                reasoning: text.decode_opt(self.reasoning),
                error_detail: text.decode_opt(self.error_detail),
                chunk_text: match &self.chunk_text {
                    Some(json) => parse_json(place("chunk_text"), json)?,
                    None => Default::default(),
                },
                content_reasoning: match &self.content_reasoning {
                    Some(json) => Some(parse_json(place("content_reasoning"), json)?),
                    None => None,
                },
                tool_turn: match &self.tool_turn {
                    Some(json) => Some(parse_json(place("tool_turn"), json)?),
                    None => None,
                },
            }
            .into(),
            error_class: self
                .error_class
                .as_deref()
                .map(|s| parse_enum(place("error_class"), s, ErrorClass::parse))
                .transpose()?,
            grades,
            chunk_attribution: self
                .chunk_attribution
                .as_deref()
                .map(|s| parse_enum(place("chunk_attribution"), s, ChunkAttribution::parse))
                .transpose()?,
            clock: self
                .clock
                .as_deref()
                .map(|s| parse_enum(place("clock"), s, TimingClock::parse))
                .transpose()?,
            rate_limit: match &self.rate_limit {
                Some(json) => Some(Box::new(parse_json(place("rate_limit"), json)?)),
                None => None,
            },
            turn: match &self.turn {
                Some(json) => Some(Box::new(parse_json(place("turn"), json)?)),
                None => None,
            },
            prompt_cache: match (self.cached_prompt_tokens, self.cache_creation_tokens) {
                (None, None) => None,
                (read, created) => Some(crate::domain::conversation::PromptCache {
                    read_tokens: opt_u32(place("cached_prompt_tokens"), read)?.unwrap_or(0),
                    creation_tokens: opt_u32(place("cache_creation_tokens"), created)?,
                }),
            },
            cut: None,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct GradeRow {
    pub request_record_id: i64,
    pub grader: String,
    pub score: f64,
    pub passed: bool,
    pub reason: String,
    /// The grade's structured detail as JSON text (migration 0002), if it has one.
    pub detail: Option<String>,
    /// Migration 0010: the grader's weight and whether it is required.
    pub weight: f64,
    pub required: bool,
}

/// One grade's figures (no grader name, reason or detail): what a record's outcome and case
/// score are computed from.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct GradeFigureRow {
    score: f64,
    passed: bool,
    weight: f64,
    required: bool,
}

impl GradeFigureRow {
    pub(crate) fn into_grade(self) -> Grade {
        Grade {
            grader: Arc::default(),
            score: self.score,
            passed: self.passed,
            reason: String::new(),
            detail: None,
            weight: self.weight,
            required: self.required,
        }
    }
}

/// Attaches grades (ordered by record, then position) to their records (in send order).
pub(crate) fn attach_grades(
    records: Vec<RecordRow>,
    grades: Vec<GradeRow>,
    text: TextCodec,
    shared: &mut SharedTexts,
) -> Result<Vec<RequestRecord>, StoreError> {
    // Each record's grades get their exact room at once. Pushed, a record's first grade
    // reserves room for four; shrunk after, the rest is freed beside a grade held as long as
    // its record, a hole too small for the next record's four: a candidate's 500,000 records
    // held ~100 MB of them.
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for g in &grades {
        *counts.entry(g.request_record_id).or_default() += 1;
    }
    let mut by_record: HashMap<i64, Vec<Grade>> = HashMap::with_capacity(counts.len());
    for g in grades {
        let detail = g
            .detail
            .as_deref()
            .map(|text| parse_json(format_args!("grade detail of record {}", g.request_record_id), text))
            .transpose()?;
        let id = g.request_record_id;
        by_record
            .entry(id)
            .or_insert_with(|| Vec::with_capacity(counts[&id]))
            .push(Grade {
                grader: shared.of(g.grader),
                score: g.score,
                passed: g.passed,
                reason: text.decode(g.reason),
                detail,
                weight: g.weight,
                required: g.required,
            });
    }
    records
        .into_iter()
        .map(|row| {
            let grades = by_record.remove(&row.id).unwrap_or_default();
            row.into_record(grades, text, shared)
        })
        .collect()
}

/// One copy of each distinct short text of the records read at once (their case ids, grader
/// names and finish reasons), shared by them: a run's records repeat a handful of names and
/// each case id once a repetition, and a candidate's 500,000 held by the end step would
/// otherwise hold as many small allocations of each. A read of several pages shares one across
/// them: a page in send order holds each case once.
#[derive(Default)]
pub(crate) struct SharedTexts(std::collections::HashSet<Arc<str>>);

impl SharedTexts {
    pub(crate) fn of(&mut self, text: String) -> Arc<str> {
        if let Some(known) = self.0.get(text.as_str()) {
            return known.clone();
        }
        let text: Arc<str> = text.into();
        self.0.insert(text.clone());
        text
    }
}

// ---------------------------------------------------------------- scorecards

/// The column list matching `ScorecardRow`.
macro_rules! scorecard_columns {
    () => {
        "scorecards.id, scorecards.run_id, scorecards.profile_id, scorecards.profile_version, \
         scorecards.incumbent_candidate_id, scorecards.pipeline, scorecards.created_by, scorecards.note, \
         scorecards.verdicts, scorecards.created_at"
    };
}
pub(crate) use scorecard_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScorecardRow {
    pub id: i64,
    pub run_id: i64,
    pub profile_id: i64,
    pub profile_version: i64,
    pub incumbent_candidate_id: Option<i64>,
    pub pipeline: String,
    pub created_by: String,
    pub note: String,
    pub verdicts: String,
    pub created_at: i64,
}

impl ScorecardRow {
    pub(crate) fn into_record(self, text: TextCodec) -> Result<ScorecardRecord, StoreError> {
        let place = |column: &str| format!("scorecards.{column} of scorecard {}", self.id);
        Ok(ScorecardRecord {
            profile_version: to_u32(place("profile_version"), self.profile_version)?,
            pipeline: parse_json::<PipelineSpec>(place("pipeline"), &self.pipeline)?,
            verdicts: parse_json::<Vec<RecordedVerdict>>(place("verdicts"), &self.verdicts)?,
            id: self.id,
            run_id: self.run_id,
            profile_id: self.profile_id,
            incumbent: self.incumbent_candidate_id,
            created_by: self.created_by,
            note: text.decode(self.note),
            created_at: Timestamp(self.created_at),
        })
    }
}

/// The SELECT of `ScorecardListRow`s, to be followed by a filter and an order.
macro_rules! scorecard_list_select {
    () => {
        concat!(
            "SELECT ",
            $crate::rows::scorecard_columns!(),
            ", runs.name AS run_name, p.name AS profile_name FROM scorecards \
             JOIN runs ON runs.id = scorecards.run_id \
             JOIN threshold_profiles p ON p.id = scorecards.profile_id"
        )
    };
}
pub(crate) use scorecard_list_select;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScorecardListRow {
    #[sqlx(flatten)]
    pub scorecard: ScorecardRow,
    pub run_name: String,
    pub profile_name: String,
}

impl ScorecardListRow {
    pub(crate) fn into_item(self, text: TextCodec) -> Result<ScorecardListItem, StoreError> {
        Ok(ScorecardListItem {
            record: self.scorecard.into_record(text)?,
            run_name: self.run_name,
            profile_name: self.profile_name,
        })
    }
}

/// JSON values of a new scorecard, ready to bind.
pub(crate) fn scorecard_json(s: &NewScorecard) -> (String, String) {
    (to_json(&s.pipeline), to_json(&s.verdicts))
}

/// A profile at one version (joined with its name).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ProfileVersionRow {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub version: i64,
    pub rules: String,
    pub slo: Option<String>,
}

impl ProfileVersionRow {
    pub(crate) fn into_profile(self) -> Result<ThresholdProfile, StoreError> {
        ProfileRow {
            id: self.id,
            name: self.name,
            description: self.description,
            version: self.version,
            rules: self.rules,
            slo: self.slo,
        }
        .into_profile()
    }
}

// ---------------------------------------------------------------- run snapshots

/// What a run measured of one candidate, kept with the run (`run_candidates.snapshot`, JSON)
/// from the moment it is created, so later edits of the candidate never reach an archived run.
/// Never the API key; the base URL without its password.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct CandidateSnapshot {
    pub name: String,
    pub provider: ProviderKind,
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub conditions: Conditions,
    #[serde(default)]
    pub pricing: Pricing,
    #[serde(default)]
    pub claimed: Option<ClaimedFigure>,
    #[serde(default)]
    pub notes: Option<String>,
    #[serde(default)]
    pub tokenize: Option<TokenizeEndpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<String>,
    #[serde(default)]
    pub reasoning_in_content: ReasoningInContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_metrics_url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_keep: Vec<String>,
    pub gpu_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
}

impl CandidateSnapshot {
    pub(crate) fn of(spec: &CandidateSpec) -> Self {
        CandidateSnapshot {
            name: spec.name.clone(),
            provider: spec.provider,
            base_url: crate::domain::redact::url(&spec.base_url),
            model: spec.model.clone(),
            api_key_env: spec.api_key_env.clone(),
            max_tokens: spec.max_tokens,
            temperature: spec.temperature,
            extra_body: spec.extra_body.clone(),
            conditions: spec.conditions.clone(),
            pricing: spec.pricing.clone(),
            claimed: spec.claimed.clone(),
            notes: spec.notes.clone(),
            tokenize: spec.tokenize.clone(),
            tls_ca_file: spec.tls_ca_file.clone(),
            reasoning_in_content: spec.wire.reasoning_in_content,
            metrics_url: spec.metrics_url.clone(),
            gpu_metrics_url: spec.gpu_metrics_url.clone(),
            metrics_keep: spec.metrics_keep.clone(),
            gpu_count: spec.gpu_count,
            gpu_kind: spec.gpu_kind.clone(),
            gpu_hour_price: spec.gpu_hour_price,
        }
    }

    pub(crate) fn json(spec: &CandidateSpec) -> String {
        to_json(&CandidateSnapshot::of(spec))
    }

    pub(crate) fn parse(run_id: i64, candidate_id: i64, text: &str) -> Result<Self, StoreError> {
        parse_json(
            format_args!("run_candidates.snapshot of candidate {candidate_id} in run {run_id}"),
            text,
        )
    }

    fn into_spec(self) -> CandidateSpec {
        CandidateSpec {
            name: self.name,
            provider: self.provider,
            base_url: self.base_url,
            model: self.model,
            api_key: None,
            api_key_env: self.api_key_env,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            extra_body: self.extra_body,
            conditions: self.conditions,
            pricing: self.pricing,
            claimed: self.claimed,
            notes: self.notes,
            tokenize: self.tokenize,
            tls_ca_file: self.tls_ca_file,
            wire: WireOptions {
                reasoning_in_content: self.reasoning_in_content,
                headers: Vec::new(),
            },
            metrics_url: self.metrics_url,
            gpu_metrics_url: self.gpu_metrics_url,
            metrics_keep: self.metrics_keep,
            gpu_count: self.gpu_count,
            gpu_kind: self.gpu_kind,
            gpu_hour_price: self.gpu_hour_price,
        }
    }
}

/// A candidate of a run: its snapshot, and the candidate row for its times (and for a run
/// whose snapshot is still missing, which `backfill_run_snapshots` fills on start).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunCandidateSnapshotRow {
    pub run_id: i64,
    pub snapshot: Option<String>,
    #[sqlx(flatten)]
    pub candidate: CandidateRow,
}

impl RunCandidateSnapshotRow {
    pub(crate) fn into_candidate(self, sealer: &KeySealer) -> Result<Candidate, StoreError> {
        let (id, created_at, updated_at) = (self.candidate.id, self.candidate.created_at, self.candidate.updated_at);
        let spec = match self.snapshot {
            Some(text) => CandidateSnapshot::parse(self.run_id, id, &text)?.into_spec(),
            None => CandidateSnapshot::of(&self.candidate.into_spec_without_key(sealer)?).into_spec(),
        };
        Ok(Candidate {
            id,
            spec,
            created_at: Timestamp(created_at),
            updated_at: Timestamp(updated_at),
        })
    }
}

impl CandidateRow {
    /// The candidate's spec as stored, without opening its API key (snapshots never hold it).
    pub(crate) fn into_spec_without_key(mut self, sealer: &KeySealer) -> Result<CandidateSpec, StoreError> {
        self.api_key = None;
        Ok(self.into_candidate(sealer)?.spec)
    }
}

/// The name a run's list shows for one of its candidates: the snapshot's, else the current one.
pub(crate) fn snapshot_name(run_id: i64, candidate_id: i64, snapshot: Option<&str>, current: String) -> String {
    snapshot
        .and_then(|s| CandidateSnapshot::parse(run_id, candidate_id, s).ok())
        .map(|s| s.name)
        .unwrap_or(current)
}

// ---------------------------------------------------------------- workers and run units

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WorkerRow {
    pub name: String,
    pub labels: String,
    pub version: String,
    pub host: String,
    pub pid: i64,
    pub capacity: i64,
    pub embedded: i64,
    pub started_at: i64,
    pub heartbeat_at: i64,
    pub units_held: i64,
    pub cpu_share: Option<f64>,
    pub load_avg: Option<f64>,
    pub lease_ms: i64,
}

impl WorkerRow {
    pub(crate) fn into_status(self, text: TextCodec) -> crate::domain::workers::WorkerStatus {
        crate::domain::workers::WorkerStatus {
            name: self.name,
            labels: crate::domain::workers::stored_labels(&self.labels),
            version: self.version,
            host: text.decode(self.host),
            pid: self.pid.clamp(0, i64::from(u32::MAX)) as u32,
            capacity: self.capacity.clamp(0, i64::from(u32::MAX)) as u32,
            embedded: self.embedded != 0,
            started_at: Timestamp(self.started_at),
            heartbeat_at: Timestamp(self.heartbeat_at),
            lease_ms: self.lease_ms,
            units_held: self.units_held.clamp(0, i64::from(u32::MAX)) as u32,
            cpu_share: self.cpu_share,
            load_avg: self.load_avg,
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunUnitRow {
    pub run_id: i64,
    pub seq: i64,
    pub candidate_id: Option<i64>,
    pub shard: i64,
    pub shards: i64,
    pub status: String,
    pub worker: Option<String>,
    pub lease_until: Option<i64>,
    pub claims: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub harness: Option<String>,
    pub clock_offset_ms: Option<f64>,
    pub clock_rtt_ms: Option<f64>,
}

/// The column list matching `RunUnitRow`, on `run_units u`.
macro_rules! run_unit_columns {
    () => {
        "u.run_id, u.seq, u.candidate_id, u.shard, u.shards, u.status, u.worker, u.lease_until, u.claims, \
         u.started_at, u.finished_at, u.harness, u.clock_offset_ms, u.clock_rtt_ms"
    };
}
pub(crate) use run_unit_columns;

impl RunUnitRow {
    pub(crate) fn into_unit(self) -> Result<crate::domain::workers::RunUnit, StoreError> {
        use crate::domain::workers::{RunUnit, UnitStatus};
        let place = |column: &str| format!("run_units.{column} of run {} unit {}", self.run_id, self.seq);
        Ok(RunUnit {
            status: parse_enum(place("status"), &self.status, UnitStatus::parse)?,
            harness: match &self.harness {
                Some(text) => Some(parse_json(place("harness"), text)?),
                None => None,
            },
            run_id: self.run_id,
            seq: self.seq.clamp(0, i64::from(u32::MAX)) as u32,
            candidate_id: self.candidate_id,
            shard: self.shard.clamp(0, i64::from(u32::MAX)) as u32,
            shards: self.shards.clamp(1, i64::from(u32::MAX)) as u32,
            clock_offset_ms: self.clock_offset_ms,
            clock_rtt_ms: self.clock_rtt_ms,
            worker: self.worker,
            lease_until: self.lease_until.map(Timestamp),
            claims: self.claims.clamp(0, i64::from(u32::MAX)) as u32,
            started_at: self.started_at.map(Timestamp),
            finished_at: self.finished_at.map(Timestamp),
        })
    }
}
