//! Export and import of whole runs as one JSON document (`"schema": "bakeoff.run/1"`), so
//! results can move between installations: the run with its conditions, status and times, the
//! eval-set version it ran (full text, checked against its content hash), its candidates
//! (never their API keys: a stored key is left out, a password in the base URL is masked; the
//! name of a key's environment variable is kept), every raw record with its grades, the
//! harness's report on itself (whether the speed figures can be trusted; restored on import),
//! the telemetry scrapes (what the servers and GPUs said; restored on import) and the event log. Used by `GET /runs/{id}/export.json`, the import form on /archive and
//! `bakeoff run export|import`. The web's export is streamed ([`export_stream`]): the records
//! are read a page at a time and written as they come, in the same bytes as the whole document
//! pretty-printed at once, so a 100,000-request run never sits in memory whole.
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::AppError;
use crate::domain::Timestamp;
use crate::domain::calibers::HarnessReport;
use crate::domain::candidate::{ClaimedFigure, Conditions, Pricing, ProviderKind, TokenizeEndpoint};
use crate::domain::reasoning::ReasoningInContent;
use crate::domain::run::{RequestRecord, RunConfig, RunStatus, StopStage};
use crate::domain::telemetry::{Boundary, Scrape, Source};
use crate::store::Store;

/// The format's name and version; a reader refuses any other.
pub const SCHEMA: &str = "bakeoff.run/1";

mod import;
pub use import::{ImportReport, Imported, content_hash, import_from, import_run};

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
    /// A find-capacity run's searches, one per candidate (settings, every probe with its
    /// attainment and figures, the bracket and why it stopped; `candidate_id` the exporting
    /// installation's id, as in `candidates`). Before the harness report, so an import has it
    /// with the head. Absent when the run searched none, and in exports written before it was
    /// added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<crate::domain::capacity::CandidateCapacity>,
    /// The harness's report on the run (CPU, schedule lag / client queue, event-loop lag, the
    /// unreliable flag with its reasons); null when the run stored none. Absent in exports
    /// written before it was added, which read as null.
    #[serde(default)]
    pub harness: Option<HarnessReport>,
    /// The telemetry scrapes of every candidate in time order (its server's `/metrics` and GPU
    /// exporter, as kept: the catalogue's series and those kept by name). Absent when none were
    /// taken, and in exports written before it was added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub telemetry: Vec<ExportedScrape>,
    /// Raw records; `run_id` and `candidate_id` are the exporting installation's ids.
    pub records: Vec<RequestRecord>,
    /// Candidates stopped while the others went on (staged start, error budget, setup), in the
    /// order they stopped. Absent in exports written before it was added: none stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stops: Vec<ExportedStop>,
    /// Indexes into `records` of the measured requests whose span (send → end) overlapped one
    /// of the harness's lag spikes: their timings may be late. Derived from `harness` and the
    /// records (so not part of the content hash, and ignored on import).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lag_spike_marked: Vec<usize>,
}

/// One telemetry scrape (`domain::telemetry::Scrape`), as exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedScrape {
    /// The exporting installation's id, as in `candidates[].id`.
    pub candidate_id: i64,
    pub source: Source,
    /// Midpoint of the scrape, µs since the Unix epoch (the records' `sent_at_us` clock).
    pub at_us: i64,
    pub took_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<Boundary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kept samples as Prometheus exposition lines (`name{labels} value`).
    pub samples: String,
}

impl ExportedScrape {
    fn of(candidate_id: i64, s: &Scrape) -> ExportedScrape {
        ExportedScrape {
            candidate_id,
            source: s.source,
            at_us: s.at_us,
            took_us: s.took_us,
            level: s.level,
            boundary: s.boundary,
            error: s.error.clone(),
            samples: s.samples_text(),
        }
    }

    /// The scrape it holds; Err says why its samples do not read (`index` names it).
    pub fn scrape(&self, index: usize) -> Result<Scrape, AppError> {
        let samples = Scrape::samples_from_text(&self.samples).map_err(|e| {
            AppError::Invalid(format!(
                "telemetry scrape {} has samples that do not parse: {e}",
                index + 1
            ))
        })?;
        Ok(Scrape {
            source: self.source,
            at_us: self.at_us,
            took_us: self.took_us,
            level: self.level,
            boundary: self.boundary,
            error: self.error.clone(),
            samples,
        })
    }
}

/// A candidate stopped within the run (`CandidateStop`), as exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedStop {
    /// The exporting installation's id, as in `candidates[].id`.
    pub candidate_id: i64,
    pub stage: StopStage,
    pub reason: String,
    /// Unix milliseconds.
    pub at: i64,
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
    /// The CA file trusted for its `https` (a path on the exporting machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<String>,
    /// Self-hosted cost (absent in exports made before it existed, and for API-priced candidates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
    /// The reasoning-in-content switch (absent: auto, as before it existed).
    #[serde(default, skip_serializing_if = "is_auto")]
    pub reasoning_in_content: ReasoningInContent,
    /// The telemetry source (absent in exports made before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_metrics_url: Option<String>,
    /// Series kept beyond the catalogue (absent: none, as before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_keep: Vec<String>,
}

fn is_auto(mode: &ReasoningInContent) -> bool {
    *mode == ReasoningInContent::Auto
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedEvent {
    pub at: i64,
    pub level: String,
    pub message: String,
}

/// Reads a whole terminal run out of the store.
pub async fn export_run(store: &dyn Store, run_id: i64) -> Result<RunExport, AppError> {
    let mut export = export_head(store, run_id).await?;
    let records = store.list_request_records(run_id).await?;
    export.lag_spike_marked = match &export.harness {
        Some(h) => records
            .iter()
            .enumerate()
            .filter(|(_, r)| h.lag_spikes.marks(r))
            .map(|(i, _)| i)
            .collect(),
        None => Vec::new(),
    };
    export.records = records;
    Ok(export)
}

/// Records read per page of a streamed export.
const EXPORT_PAGE: i64 = 500;

/// The export of a terminal run as the bytes of [`RunExport`] pretty-printed, produced piece by
/// piece: everything but the records at once (checked before anything is sent), then the
/// records a page at a time, then what follows them (the stops, the records marked by lag
/// spikes, found as the records go by). A store error half-way ends the stream with it.
pub async fn export_stream(
    store: crate::store::DynStore,
    run_id: i64,
) -> Result<BoxStream<'static, Result<Vec<u8>, AppError>>, AppError> {
    let mut head = export_head(store.as_ref(), run_id).await?;
    let stops = std::mem::take(&mut head.stops);
    let harness = head.harness.clone();
    // With no records, stops nor marks, "records" is the document's last field.
    let whole = serde_json::to_string_pretty(&head).map_err(unwritable)?;
    let opening = whole
        .strip_suffix("[]\n}")
        .filter(|o| o.ends_with("\"records\": "))
        .ok_or_else(|| {
            AppError::Store(crate::store::StoreError::Corrupt(
                "the export's records are not its last field".into(),
            ))
        })?
        .to_string();
    struct Writing {
        store: crate::store::DynStore,
        /// Position of the last record written (None: none yet).
        after: Option<(i64, i64)>,
        written: usize,
        marked: Vec<usize>,
        stops: Vec<ExportedStop>,
        harness: Option<HarnessReport>,
        done: bool,
    }
    let writing = Writing {
        store,
        after: None,
        written: 0,
        marked: Vec::new(),
        stops,
        harness,
        done: false,
    };
    let records = futures_util::stream::unfold(writing, move |mut w| async move {
        if w.done {
            return None;
        }
        let page = match w
            .store
            .list_request_records_sent_after(run_id, w.after, EXPORT_PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                w.done = true;
                return Some((Err(AppError::from(e)), w));
            }
        };
        let mut text = String::new();
        if page.is_empty() {
            w.done = true;
            text.push_str(if w.written == 0 { "[]" } else { "\n  ]" });
            match closing(&w.stops, &w.marked) {
                Ok(tail) => text.push_str(&tail),
                Err(e) => return Some((Err(e), w)),
            }
            return Some((Ok(text.into_bytes()), w));
        }
        for (position, record) in page {
            text.push_str(if w.written == 0 { "[\n    " } else { ",\n    " });
            match serde_json::to_string_pretty(&record) {
                Ok(json) => text.push_str(&nested(&json, "    ")),
                Err(e) => {
                    w.done = true;
                    return Some((Err(unwritable(e)), w));
                }
            }
            if w.harness.as_ref().is_some_and(|h| h.lag_spikes.marks(&record)) {
                w.marked.push(w.written);
            }
            w.written += 1;
            w.after = Some(position);
        }
        Some((Ok(text.into_bytes()), w))
    });
    let opening = futures_util::stream::once(async move { Ok(opening.into_bytes()) });
    Ok(Box::pin(futures_util::StreamExt::chain(opening, records)))
}

/// A value of the export that cannot be written as JSON (never expected: every part is plain data).
fn unwritable(e: serde_json::Error) -> AppError {
    AppError::Store(crate::store::StoreError::Corrupt(format!(
        "the export could not be written: {e}"
    )))
}

/// A pretty-printed value placed `indent` deep in the document (JSON text has no raw newline
/// inside a string, so every newline starts a line of the value).
fn nested(json: &str, indent: &str) -> String {
    json.replace('\n', &format!("\n{indent}"))
}

/// What follows the records in the document: the stops and the marked records when there are
/// any (both are left out when empty), then the end of the object.
fn closing(stops: &[ExportedStop], marked: &[usize]) -> Result<String, AppError> {
    fn pretty<T: Serialize + ?Sized>(value: &T) -> Result<String, AppError> {
        serde_json::to_string_pretty(value).map_err(unwritable)
    }
    let mut tail = String::new();
    if !stops.is_empty() {
        tail.push_str(",\n  \"stops\": ");
        tail.push_str(&nested(&pretty(stops)?, "  "));
    }
    if !marked.is_empty() {
        tail.push_str(",\n  \"lag_spike_marked\": ");
        tail.push_str(&nested(&pretty(marked)?, "  "));
    }
    tail.push_str("\n}");
    Ok(tail)
}

/// Everything of a run's export but its records and the marks derived from them.
async fn export_head(store: &dyn Store, run_id: i64) -> Result<RunExport, AppError> {
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
    // The candidates as the run measured them (its snapshot), not as they are now.
    let candidates = store
        .run_candidates(run_id)
        .await?
        .into_iter()
        .map(|c| {
            let s = c.spec;
            ExportedCandidate {
                id: c.id,
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
                tls_ca_file: s.tls_ca_file,
                gpu_count: s.gpu_count,
                gpu_kind: s.gpu_kind,
                gpu_hour_price: s.gpu_hour_price,
                reasoning_in_content: s.wire.reasoning_in_content,
                metrics_url: s.metrics_url.as_deref().map(crate::domain::redact::url),
                gpu_metrics_url: s.gpu_metrics_url.as_deref().map(crate::domain::redact::url),
                metrics_keep: s.metrics_keep,
            }
        })
        .collect();
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
    let harness = store.get_run_harness(run_id).await?;
    let capacity = store.list_run_capacity(run_id).await?;
    let mut telemetry = Vec::new();
    for &candidate_id in &run.candidate_ids {
        let scrapes = store.list_telemetry_scrapes(run_id, candidate_id).await?;
        telemetry.extend(scrapes.iter().map(|s| ExportedScrape::of(candidate_id, s)));
    }
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
        capacity,
        lag_spike_marked: Vec::new(),
        harness,
        telemetry,
        records: Vec::new(),
        stops: store
            .list_candidate_stops(run_id)
            .await?
            .into_iter()
            .map(|s| ExportedStop {
                candidate_id: s.candidate_id,
                stage: s.stage,
                reason: s.reason,
                at: s.at.0,
            })
            .collect(),
    })
}

/// Parses an export held in memory, refusing other schemas with a message that says what was
/// found (an import reads its file as a stream instead: [`import_from`]).
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
        Some(other) => return Err(other_schema(other)),
        None => return Err(no_schema()),
    }
    serde_json::from_value(value).map_err(|e| AppError::Invalid(format!("the export does not match {SCHEMA}: {e}")))
}

fn other_schema(found: &str) -> AppError {
    AppError::Invalid(format!(
        "the file's schema is {:?}; this bakeoff reads {SCHEMA:?}",
        crate::domain::validation::truncate(found, 40)
    ))
}

fn no_schema() -> AppError {
    AppError::Invalid(format!(
        "the file has no \"schema\" field; a bakeoff run export starts with \"schema\": \"{SCHEMA}\""
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::calibers::LagSpikes;
    use crate::domain::candidate::CandidateDraft;
    use crate::domain::evalset::EvalSetFile;
    use crate::domain::run::RecordTexts;
    use crate::domain::run::{CandidateStop, NewRun};
    use crate::store::server_key::ServerKey;

    /// The document with its `exported_at` line blanked (it is the time of the export).
    fn undated(text: &str) -> String {
        text.lines()
            .map(|l| {
                if l.starts_with("  \"exported_at\": ") {
                    "  \"exported_at\": 0,"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A store holding one terminal run of `n` records (sends shared by three records each, the
    /// id breaking the tie, stored latest send first), a harness report marking three of them
    /// and a stopped candidate; returns the store and the run's id.
    pub(in crate::transfer) async fn stored_run(n: u32) -> (crate::store::DynStore, i64) {
        let store = crate::store::connect_with_key("sqlite::memory:", &ServerKey::from_bytes([3; 32]))
            .await
            .unwrap();
        let file = EvalSetFile::parse(
            "s.jsonl",
            "{\"bakeoff_evalset\":1,\"name\":\"s\",\"task\":\"classification\",\"prompt\":\"{{t}}\",\"graders\":[{\"kind\":\"exact\"}]}\n\
             {\"id\":\"a\",\"vars\":{\"t\":\"x\"},\"expected\":\"y\"}\n{\"id\":\"b\",\"vars\":{\"t\":\"x\"},\"expected\":\"y\"}\n",
        )
        .unwrap();
        let version = store.save_evalset_version(&file).await.unwrap();
        let spec = CandidateDraft {
            name: "c".into(),
            provider: "openai-chat".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            ..Default::default()
        }
        .validate(None)
        .unwrap();
        let new = crate::domain::credentials::check_new(crate::domain::accounts::Role::Editor, spec, false).unwrap();
        let candidate = store.create_candidate(&new).await.unwrap();
        let run_id = store
            .create_run(&NewRun {
                name: "r".into(),
                evalset_version_id: version,
                candidate_ids: vec![candidate],
                config: RunConfig::default(),
            })
            .await
            .unwrap();
        let records: Vec<RequestRecord> = (0..n)
            .map(|i: u32| RequestRecord {
                run_id,
                candidate_id: candidate,
                repetition: i,
                sent_at_us: 1_000_000 + i64::from((n - 1 - i) / 3) * 1_000,
                end_us: Some(500).into(),
                texts: RecordTexts {
                    output: format!("answer \"{i}\"\nline two \u{0}"),
                    ..Default::default()
                }
                .into(),
                ..RequestRecord::test_quality(if i.is_multiple_of(2) { "a" } else { "b" })
            })
            .collect();
        for chunk in records.chunks(97) {
            store.append_request_records(chunk).await.unwrap();
        }
        let mut harness = crate::engine::run::harness::report(&RunConfig::default(), &records, 2.0, None);
        harness.lag_spikes = LagSpikes {
            threshold_ms: 5.0,
            spikes: vec![(1_100_000, 1_100_200, 8.0)],
            measured_requests: u64::from(n),
            marked_requests: 3,
        };
        store.set_run_harness(run_id, &harness).await.unwrap();
        store
            .append_telemetry_scrapes(run_id, candidate, &test_scrapes())
            .await
            .unwrap();
        store
            .save_candidate_stop(&CandidateStop {
                run_id,
                candidate_id: candidate,
                stage: StopStage::ErrorBudget,
                reason: "too many errors".into(),
                at: Timestamp::now(),
            })
            .await
            .unwrap();
        store.set_run_status(run_id, RunStatus::Finished, None).await.unwrap();
        (store, run_id)
    }

    /// Two scrapes as a run takes them: a level's start (vLLM series and one kept by name) and a
    /// failed periodic one.
    pub(in crate::transfer) fn test_scrapes() -> Vec<Scrape> {
        let samples = crate::domain::telemetry::parse(
            "vllm:num_requests_waiting{model_name=\"m\"} 3\nvllm:num_preemptions_total{model_name=\"m\"} 7\n\
             vllm:spec_decode_num_accepted_tokens_total 12.5\n",
        )
        .unwrap()
        .samples;
        vec![
            Scrape {
                source: Source::Server,
                at_us: 1_000_100,
                took_us: 800,
                level: Some(0),
                boundary: Some(Boundary::Start),
                error: None,
                samples,
            },
            Scrape {
                source: Source::Gpu,
                at_us: 1_000_900,
                took_us: 2_000_000,
                level: None,
                boundary: None,
                error: Some("no answer within 2 s".into()),
                samples: Vec::new(),
            },
        ]
    }

    #[tokio::test]
    async fn the_streamed_export_is_the_whole_document_byte_for_byte() {
        // More than two pages.
        let (store, run_id) = stored_run(1_203).await;
        let whole = export_run(store.as_ref(), run_id).await.unwrap();
        assert_eq!(whole.records.len(), 1_203);
        assert_eq!(whole.lag_spike_marked.len(), 3, "{:?}", whole.lag_spike_marked);
        assert_eq!(whole.stops.len(), 1);
        assert_eq!(whole.telemetry.len(), 2);
        let expected = String::from_utf8(serde_json::to_vec_pretty(&whole).unwrap()).unwrap();
        let mut streamed = Vec::new();
        let mut pieces = export_stream(store.clone(), run_id).await.unwrap();
        while let Some(piece) = futures_util::StreamExt::next(&mut pieces).await {
            streamed.extend(piece.unwrap());
        }
        let streamed = String::from_utf8(streamed).unwrap();
        assert_eq!(undated(&streamed), undated(&expected));
        assert_eq!(parse_export(&streamed).unwrap().records, whole.records);
    }
}
