//! Importing a run export, streamed: the document is parsed on a blocking thread as it is read,
//! and its records reach the store a batch at a time inside the import's one transaction. A
//! million-record export used to be held several times over (its text, its parsed tree, the
//! records, their copy for the store and the tree its content hash was taken from); now at most
//! [`BATCHES_IN_FLIGHT`] batches are, besides the document's head.
//!
//! Bakeoff writes the records after everything the content hash puts before them (candidates,
//! eval set, events, harness report); a document in another order (hand-made, or exported
//! before the harness report existed) is read whole first, as every import used to be.
use std::collections::HashMap;
use std::io::Read;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};

use super::{
    ExportedCandidate, ExportedEvalSet, ExportedEvent, ExportedRun, ExportedScrape, ExportedStop, RunExport, SCHEMA,
};
use crate::AppError;
use crate::candidates::Actor;
use crate::domain::Timestamp;
use crate::domain::audit::{Action, NewAuditEntry};
use crate::domain::calibers::HarnessReport;
use crate::domain::candidate::{CandidateDraft, CandidateSpec};
use crate::domain::capacity::CandidateCapacity;
use crate::domain::evalset::EvalSetFile;
use crate::domain::run::{CandidateStop, NewRun, RequestRecord, RunEvent};
use crate::domain::validation::{FieldErrors, MAX_NAME_CHARS};
use crate::store::{
    ImportEnd, ImportOutcome, ImportPart, ImportedAs, ImportedCandidate, RestoredRun, RunImport, Store,
};

/// Records handed to the store at a time, and batches parsed ahead of the store's writes.
const BATCH: usize = 1_000;
const BATCHES_IN_FLIGHT: usize = 2;

/// What an import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imported {
    /// Stored as this new run.
    New(i64),
    /// The same export was imported before, as this run; nothing was stored.
    Before(i64),
}

impl Imported {
    pub fn run_id(self) -> i64 {
        match self {
            Imported::New(id) | Imported::Before(id) => id,
        }
    }
}

/// An import's outcome with what the file held, for the message that reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportReport {
    pub imported: Imported,
    /// The run's id where it was exported.
    pub exported_run_id: i64,
    pub records: usize,
    pub harness: Option<HarnessReport>,
    /// Candidates the import created, as (id, name).
    pub created: Vec<(i64, String)>,
    /// Key variables named by the export that no created candidate took (candidate name,
    /// variable): an import never gives a candidate credentials.
    pub key_envs_not_taken: Vec<(String, String)>,
}

/// Stores an export already in memory ([`import_from`] its bytes), as the terminal does.
pub async fn import_run(store: &dyn Store, export: &RunExport) -> Result<Imported, AppError> {
    let bytes =
        serde_json::to_vec(export).map_err(|e| AppError::Invalid(format!("the export cannot be written: {e}")))?;
    Ok(import_from(store, &Actor::terminal(), std::io::Cursor::new(bytes))
        .await?
        .imported)
}

/// Stores the export read from `source` as a new run, all of it or nothing (one transaction: a
/// refusal, even at the last record, leaves no candidate, eval-set version or run behind).
/// Everything but the records and stops is checked before anything is written; a record is
/// checked as it is read. Candidates are matched by name (same provider, base URL and model) or
/// added — under "NAME (imported)" when the name is taken by a different endpoint; the run
/// keeps each candidate as the export describes it (its snapshot). The eval-set version is
/// stored if new. An export whose content was imported before is recognised by its hash and
/// stores nothing (the hash covers the records, so it is known, and compared, at the end).
///
/// A candidate the import creates goes through the one credentials check (for `actor`) like
/// every other, and is created without credentials: the key variable an export names belongs to
/// the installation it came from (the run's snapshot keeps its name), and pointing one of this
/// server's variables at the export's base URL is an admin's decision, made on the candidate.
/// Each one created is audited as `candidate.created` by `actor`.
pub async fn import_from(
    store: &dyn Store,
    actor: &Actor,
    source: impl Read + Send + 'static,
) -> Result<ImportReport, AppError> {
    let (head_tx, head_rx) = oneshot::channel();
    let (parts_tx, mut parts) = mpsc::channel(BATCHES_IN_FLIGHT);
    let reading = tokio::task::spawn_blocking(move || read_export(source, head_tx, parts_tx));
    let finish_reading = |reading: tokio::task::JoinHandle<Result<usize, AppError>>| async move {
        reading
            .await
            .map_err(|e| AppError::Invalid(format!("reading the export stopped: {e}")))?
    };
    let Ok(head) = head_rx.await else {
        // The reader stopped before the records: its error says why.
        return Err(match finish_reading(reading).await {
            Err(e) => e,
            Ok(_) => AppError::Invalid("the export ended before its records".into()),
        });
    };
    let import = match prepare(store, actor, &head).await {
        Ok(import) => import,
        Err(e) => {
            // The reader stops at its next batch.
            drop(parts);
            let _ = finish_reading(reading).await;
            return Err(e);
        }
    };
    let stored = store.import_run(&import, &mut parts).await;
    drop(parts);
    let read = finish_reading(reading).await;
    let (imported, records) = match (stored?, read) {
        (ImportOutcome::Imported(id), Ok(records)) => (Imported::New(id), records),
        (ImportOutcome::AlreadyImported(id), Ok(records)) => (Imported::Before(id), records),
        // The reader refused the file half-way; the store rolled back what it had written.
        (_, Err(e)) => return Err(e),
        (ImportOutcome::Incomplete, Ok(_)) => return Err(AppError::Invalid("the export ended before its end".into())),
    };
    let mut created = Vec::new();
    let mut key_envs_not_taken = Vec::new();
    if let Imported::New(run_id) = imported {
        let stored = store.run_candidates(run_id).await?;
        for (c, run_candidate) in import.candidates.iter().zip(&stored) {
            let ImportedAs::New(new) = &c.stored else {
                continue;
            };
            let spec = new.spec();
            let mut detail = format!("{} (created by importing run #{run_id})", spec.base_url);
            if let Some(var) = &c.spec.api_key_env {
                detail.push_str(&format!(
                    "; the export's key variable {var:?} was not taken: an admin sets credentials"
                ));
                key_envs_not_taken.push((spec.name.clone(), var.clone()));
            }
            store
                .append_audit(&NewAuditEntry {
                    actor: actor.name.clone(),
                    action: Action::CandidateCreated,
                    target: format!("candidate #{} {:?}", run_candidate.id, spec.name),
                    detail,
                })
                .await?;
            created.push((run_candidate.id, spec.name.clone()));
        }
    }
    Ok(ImportReport {
        imported,
        exported_run_id: head.run.id,
        records,
        harness: head.harness,
        created,
        key_envs_not_taken,
    })
}

/// The content hash that identifies an export on import: SHA-256 of everything it holds but
/// when and by which version it was exported, so the same run exported twice (or the same file
/// imported twice) is recognised.
pub fn content_hash(export: &RunExport) -> String {
    let hash = || -> Result<String, serde_json::Error> {
        let mut hasher = ContentHasher::new(
            &export.candidates,
            &export.capacity,
            &export.evalset,
            &export.events,
            &export.harness,
        )?;
        for r in &export.records {
            hasher.record(r)?;
        }
        hasher.finish(&export.run, &export.schema, &export.stops, &export.telemetry)
    };
    // Values that serialise to JSON here always do.
    hash().unwrap_or_default()
}

/// The content hash written piece by piece, in the bytes `serde_json::json!({…}).to_string()`
/// of the content gives (keys sorted at every level, no spaces): a record is hashed as it
/// passes, and an export hashes as it always has, so re-imports of older files are recognised.
struct ContentHasher {
    sha: Sha256,
    records: usize,
}

impl ContentHasher {
    /// Everything the content puts before its records (its keys sorted); the capacity searches
    /// only when there are any (an export without them keeps the hash it had before).
    fn new(
        candidates: &[ExportedCandidate],
        capacity: &[CandidateCapacity],
        evalset: &ExportedEvalSet,
        events: &[ExportedEvent],
        harness: &Option<HarnessReport>,
    ) -> Result<Self, serde_json::Error> {
        let mut hasher = ContentHasher {
            sha: Sha256::new(),
            records: 0,
        };
        hasher.field("{\"candidates\":", candidates)?;
        if !capacity.is_empty() {
            hasher.field(",\"capacity\":", capacity)?;
        }
        hasher.field(",\"evalset\":", evalset)?;
        hasher.field(",\"events\":", events)?;
        hasher.field(",\"harness\":", harness)?;
        hasher.sha.update(b",\"records\":[");
        Ok(hasher)
    }

    fn record(&mut self, record: &RequestRecord) -> Result<(), serde_json::Error> {
        let separator = if self.records == 0 { "" } else { "," };
        self.records += 1;
        self.field(separator, record)
    }

    /// What follows the records; the stops and the telemetry only when there are any (an export
    /// without them keeps the hash it had before they existed).
    fn finish(
        mut self,
        run: &ExportedRun,
        schema: &str,
        stops: &[ExportedStop],
        telemetry: &[ExportedScrape],
    ) -> Result<String, serde_json::Error> {
        self.field("],\"run\":", run)?;
        self.field(",\"schema\":", schema)?;
        if !stops.is_empty() {
            self.field(",\"stops\":", stops)?;
        }
        if !telemetry.is_empty() {
            self.field(",\"telemetry\":", telemetry)?;
        }
        self.sha.update(b"}");
        Ok(hex::encode(self.sha.finalize()))
    }

    /// `prefix`, then `value` as a JSON tree prints (through `Value`: its maps sort their keys).
    fn field<T: Serialize + ?Sized>(&mut self, prefix: &str, value: &T) -> Result<(), serde_json::Error> {
        self.sha.update(prefix.as_bytes());
        let tree = serde_json::to_value(value)?;
        serde_json::to_writer(HashWriter(&mut self.sha), &tree)
    }
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything of an export but its records and stops.
struct ExportHead {
    schema: String,
    run: ExportedRun,
    evalset: ExportedEvalSet,
    candidates: Vec<ExportedCandidate>,
    events: Vec<ExportedEvent>,
    harness: Option<HarnessReport>,
}

/// The run to store from a head the reader found: checked (schema, a terminal run, every name
/// by the forms' rule, the eval set's content against its hash, each candidate like the
/// candidate form and its credentials for `actor`) and matched with the stored candidates.
/// Writes nothing.
async fn prepare(store: &dyn Store, actor: &Actor, head: &ExportHead) -> Result<RunImport, AppError> {
    if head.schema != SCHEMA {
        return Err(super::other_schema(&head.schema));
    }
    check_names(head)?;
    if !head.run.status.is_terminal() {
        return Err(AppError::Invalid(format!(
            "the exported run is {}; only finished, failed or cancelled runs can be imported",
            head.run.status.as_str()
        )));
    }
    let evalset = &head.evalset;
    let file = EvalSetFile::parse(&format!("{}.jsonl", evalset.name), &evalset.content)
        .map_err(|e| AppError::Invalid(format!("the eval set in the export does not parse: {e}")))?;
    if file.content_hash() != evalset.content_hash {
        return Err(AppError::Invalid(format!(
            "the eval set's content does not match its hash {} (the file was changed after export)",
            // The first 12 characters, as pages show a version.
            evalset.content_hash.get(..12).unwrap_or(&evalset.content_hash)
        )));
    }
    let existing = store.list_candidates().await?;
    let mut candidates = Vec::with_capacity(head.candidates.len());
    for c in &head.candidates {
        let same_endpoint =
            |s: &CandidateSpec| s.provider == c.provider && s.base_url == c.base_url && s.model == c.model;
        // Validated like the candidate form under its own name first, so a refusal names it.
        spec_of(c, &c.name)?;
        let mut name = c.name.clone();
        let mut n = 1;
        let found = loop {
            match existing.iter().find(|e| e.spec.name == name) {
                Some(e) if same_endpoint(&e.spec) => break Some(e.id),
                Some(_) => {
                    n += 1;
                    name = imported_name(&c.name, n - 1);
                }
                None => break None,
            }
        };
        // Validated like the candidate form, whether matched or new: it is the run's snapshot.
        let spec = spec_of(c, &name)?;
        let stored = match found {
            Some(id) => ImportedAs::Existing(id),
            None => {
                if let Some(other) = existing
                    .iter()
                    .find(|e| crate::domain::validation::confusable(&name, &e.spec.name))
                {
                    return Err(AppError::Invalid(format!(
                        "candidate {:?} of the export looks like candidate #{} {:?} here (the same letters from \
                         another script, in another case, or with invisible characters); rename one of them first",
                        name, other.id, other.spec.name
                    )));
                }
                // The live candidate takes no credentials from a file (see `import_from`), and
                // is checked like every candidate the store creates.
                let live = CandidateSpec {
                    api_key: None,
                    api_key_env: None,
                    ..spec.clone()
                };
                ImportedAs::New(Box::new(crate::candidates::checked_new(actor, live, false)?))
            }
        };
        candidates.push(ImportedCandidate { stored, spec });
    }
    let run = &head.run;
    Ok(RunImport {
        evalset: file,
        candidates,
        restored: RestoredRun {
            run: NewRun {
                name: run.name.clone(),
                evalset_version_id: 0,
                candidate_ids: Vec::new(),
                config: run.config.clone(),
            },
            status: run.status,
            error: run.error.clone(),
            created_at: Timestamp(run.created_at),
            started_at: run.started_at.map(Timestamp),
            finished_at: run.finished_at.map(Timestamp),
            events: head
                .events
                .iter()
                .map(|e| RunEvent {
                    at: Timestamp(e.at),
                    level: e.level.clone(),
                    message: e.message.clone(),
                })
                .collect(),
        },
        harness: head.harness.clone(),
    })
}

/// "NAME (imported)", "NAME (imported 2)", …: the name of the `n`th different endpoint under an
/// exported name already taken here, the exported name shortened to keep within the name rule's
/// length.
fn imported_name(name: &str, n: usize) -> String {
    let suffix = if n == 1 {
        " (imported)".to_string()
    } else {
        format!(" (imported {n})")
    };
    let room = MAX_NAME_CHARS.saturating_sub(suffix.chars().count());
    let base: String = name.chars().take(room).collect();
    format!("{}{suffix}", base.trim_end())
}

/// Every name the export brings checked by the forms' rule (`validation::name`: length,
/// control and bidirectional characters, confusable mixes of scripts), so a name no form
/// accepts cannot reach a page by an import: the run's, the eval set's and the judges'
/// (candidates are checked with the candidate form's rules, case ids as the eval set's and,
/// in each record, by the reader).
fn check_names(head: &ExportHead) -> Result<(), AppError> {
    let mut errors = FieldErrors::default();
    crate::domain::validation::name(&mut errors, "run.name", &head.run.name);
    crate::domain::validation::name(&mut errors, "evalset.name", &head.evalset.name);
    if let Some(judge) = &head.run.config.judge {
        for name in judge.judges.keys() {
            crate::domain::validation::name(&mut errors, "run.config.judge.judges", name);
        }
    }
    if let Some(e) = errors.0.first() {
        return Err(AppError::Invalid(format!("the export's {} {}", e.field, e.message)));
    }
    Ok(())
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
        tls_ca_file: c.tls_ca_file.clone(),
        wire: crate::domain::candidate::WireOptions {
            reasoning_in_content: c.reasoning_in_content,
            headers: Vec::new(),
        },
        metrics_url: c.metrics_url.clone(),
        gpu_metrics_url: c.gpu_metrics_url.clone(),
        metrics_keep: c.metrics_keep.clone(),
        gpu_count: c.gpu_count,
        gpu_kind: c.gpu_kind.clone(),
        gpu_hour_price: c.gpu_hour_price,
    };
    CandidateDraft::from_spec(&spec)
        .validate(None)
        .map_err(|e| AppError::Invalid(format!("candidate {:?}: {e}", c.name)))
}

/// Why the reader stopped, beside the parser's own errors.
enum Stop {
    /// The file is wrong; nothing is stored.
    Refused(AppError),
    /// The importer stopped taking records (it refused the head, or the store failed).
    Unwanted,
}

/// The reader's state while it parses: the head's fields as they come, then the records.
#[derive(Default)]
struct Reading {
    schema: Option<String>,
    exported_by: Option<String>,
    run: Option<ExportedRun>,
    evalset: Option<ExportedEvalSet>,
    candidates: Option<Vec<ExportedCandidate>>,
    events: Option<Vec<ExportedEvent>>,
    harness: Option<Option<HarnessReport>>,
    capacity: Vec<CandidateCapacity>,
    stops: Vec<ExportedStop>,
    telemetry: Vec<ExportedScrape>,
    /// Records met before the head was whole (a document in another order than bakeoff's).
    early: Vec<RequestRecord>,
    streaming: Option<Streaming>,
    stopped: Option<Stop>,
}

/// Records on their way to the store, once the head was sent.
struct Streaming {
    /// Exported candidate id → its position in the export's list (what the store maps).
    positions: HashMap<i64, usize>,
    hasher: ContentHasher,
    /// What the hash puts after the records, and the note names.
    run: ExportedRun,
    schema: String,
    /// The capacity searches (read with the head), exporting ids.
    capacity: Vec<CandidateCapacity>,
    batch: Vec<RequestRecord>,
    parts: mpsc::Sender<ImportPart>,
}

impl Reading {
    /// Whether every field the hash puts before the records has been read. The harness report
    /// counts once seen, even as null: a document without one may still hold it after its
    /// records, and its records are then read whole first.
    fn head_is_whole(&self) -> bool {
        self.schema.is_some()
            && self.run.is_some()
            && self.evalset.is_some()
            && self.candidates.is_some()
            && self.events.is_some()
            && self.harness.is_some()
    }

    /// Sends the head to the importer and readies the records' way to the store.
    fn start_streaming(
        &mut self,
        head_tx: &mut Option<oneshot::Sender<ExportHead>>,
        parts: &mpsc::Sender<ImportPart>,
    ) -> Result<(), Stop> {
        let missing = |field: &str| {
            Stop::Refused(AppError::Invalid(format!(
                "the export does not match {SCHEMA}: missing field `{field}`"
            )))
        };
        let schema = self.schema.take().ok_or_else(|| Stop::Refused(super::no_schema()))?;
        let head = ExportHead {
            run: self.run.take().ok_or_else(|| missing("run"))?,
            evalset: self.evalset.take().ok_or_else(|| missing("evalset"))?,
            candidates: self.candidates.take().ok_or_else(|| missing("candidates"))?,
            events: self.events.take().ok_or_else(|| missing("events"))?,
            harness: self.harness.take().flatten(),
            schema: schema.clone(),
        };
        let capacity = std::mem::take(&mut self.capacity);
        let hasher = ContentHasher::new(&head.candidates, &capacity, &head.evalset, &head.events, &head.harness)
            .map_err(unreadable)?;
        self.streaming = Some(Streaming {
            capacity,
            positions: head.candidates.iter().enumerate().map(|(i, c)| (c.id, i)).collect(),
            hasher,
            run: head.run.clone(),
            schema,
            batch: Vec::with_capacity(BATCH),
            parts: parts.clone(),
        });
        let sender = head_tx.take().ok_or(Stop::Unwanted)?;
        sender.send(head).map_err(|_| Stop::Unwanted)?;
        for record in std::mem::take(&mut self.early) {
            self.take(record)?;
        }
        Ok(())
    }

    fn take(&mut self, record: RequestRecord) -> Result<(), Stop> {
        match &mut self.streaming {
            Some(streaming) => streaming.take(record),
            None => {
                self.early.push(record);
                Ok(())
            }
        }
    }
}

impl Streaming {
    /// Hashes a record as exported, then hands it on with its candidate's position for its id.
    fn take(&mut self, mut record: RequestRecord) -> Result<(), Stop> {
        self.hasher.record(&record).map_err(unreadable)?;
        if let Some(problem) = crate::domain::evalset::case_id_problem(&record.case_id) {
            let shown: String = record.case_id.chars().take(40).collect();
            return Err(Stop::Refused(AppError::Invalid(format!(
                "record {} names case {shown:?}, whose id {problem}",
                self.hasher.records
            ))));
        }
        let Some(&position) = self.positions.get(&record.candidate_id) else {
            return Err(Stop::Refused(AppError::Invalid(format!(
                "record {} (case {:?}) names candidate #{}, which the export does not list",
                self.hasher.records, record.case_id, record.candidate_id
            ))));
        };
        record.candidate_id = position as i64;
        self.batch.push(record);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Stop> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.parts
            .blocking_send(ImportPart::Records(batch))
            .map_err(|_| Stop::Unwanted)
    }

    /// The last batch, then the end: the stops and telemetry scrapes (checked, candidates as
    /// positions), the content hash and the note the run's log keeps.
    fn end(mut self, stops: &[ExportedStop], telemetry: &[ExportedScrape], exported_by: &str) -> Result<(), Stop> {
        self.flush()?;
        let mut stopped = Vec::with_capacity(stops.len());
        for s in stops {
            let Some(&position) = self.positions.get(&s.candidate_id) else {
                return Err(Stop::Refused(AppError::Invalid(format!(
                    "a stop names candidate #{}, which the export does not list",
                    s.candidate_id
                ))));
            };
            stopped.push(CandidateStop {
                run_id: 0,
                candidate_id: position as i64,
                stage: s.stage,
                reason: s.reason.clone(),
                at: Timestamp(s.at),
            });
        }
        let mut scrapes = Vec::with_capacity(telemetry.len());
        for (i, s) in telemetry.iter().enumerate() {
            let Some(&position) = self.positions.get(&s.candidate_id) else {
                return Err(Stop::Refused(AppError::Invalid(format!(
                    "telemetry scrape {} names candidate #{}, which the export does not list",
                    i + 1,
                    s.candidate_id
                ))));
            };
            scrapes.push((position, s.scrape(i).map_err(Stop::Refused)?));
        }
        let mut searches = Vec::with_capacity(self.capacity.len());
        for search in &self.capacity {
            let Some(&position) = self.positions.get(&search.candidate_id) else {
                return Err(Stop::Refused(AppError::Invalid(format!(
                    "a capacity search names candidate #{}, which the export does not list",
                    search.candidate_id
                ))));
            };
            searches.push((position, search.clone()));
        }
        let records = self.hasher.records;
        let note = format!(
            "imported from {exported_by} (run #{} there), {records} records",
            self.run.id
        );
        let content_hash = self
            .hasher
            .finish(&self.run, &self.schema, stops, telemetry)
            .map_err(unreadable)?;
        self.parts
            .blocking_send(ImportPart::End(ImportEnd {
                content_hash,
                stops: stopped,
                note,
                telemetry: scrapes,
                capacity: searches,
            }))
            .map_err(|_| Stop::Unwanted)
    }
}

fn unreadable(e: serde_json::Error) -> Stop {
    Stop::Refused(AppError::Invalid(format!("the export cannot be hashed: {e}")))
}

/// Parses the document from `source`: the head goes to `head_tx` when the records begin (or at
/// the end, for a document in another order), the records and the end to `parts`.
fn read_export(
    source: impl Read,
    head_tx: oneshot::Sender<ExportHead>,
    parts: mpsc::Sender<ImportPart>,
) -> Result<usize, AppError> {
    let mut reading = Reading::default();
    let mut head_tx = Some(head_tx);
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, source));
    let parsed = Document {
        reading: &mut reading,
        head_tx: &mut head_tx,
        parts: &parts,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    let stop = |reading: &mut Reading, e: serde_json::Error| match reading.stopped.take() {
        Some(Stop::Refused(refusal)) => refusal,
        Some(Stop::Unwanted) => AppError::Invalid("the import stopped reading the export".into()),
        None if e.is_data() => AppError::Invalid(format!("the export does not match {SCHEMA}: {e}")),
        None => AppError::Invalid(format!(
            "the file is not JSON (line {}, column {}): {e}",
            e.line(),
            e.column()
        )),
    };
    if let Err(e) = parsed {
        return Err(stop(&mut reading, e));
    }
    let finished = (|| {
        if reading.streaming.is_none() {
            reading.start_streaming(&mut head_tx, &parts)?;
        }
        let streaming = reading.streaming.take().ok_or(Stop::Unwanted)?;
        let records = streaming.hasher.records;
        let exported_by = reading
            .exported_by
            .take()
            .unwrap_or_else(|| "an unnamed installation".into());
        streaming.end(&reading.stops, &reading.telemetry, &exported_by)?;
        Ok(records)
    })();
    match finished {
        Ok(records) => Ok(records),
        Err(Stop::Refused(e)) => Err(e),
        Err(Stop::Unwanted) => Err(AppError::Invalid("the import stopped reading the export".into())),
    }
}

/// The document's object, visited field by field.
struct Document<'a> {
    reading: &'a mut Reading,
    head_tx: &'a mut Option<oneshot::Sender<ExportHead>>,
    parts: &'a mpsc::Sender<ImportPart>,
}

impl<'de> DeserializeSeed<'de> for Document<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Document<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a {SCHEMA} object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let r = self.reading;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "schema" => {
                    let schema: String = map.next_value()?;
                    if schema != SCHEMA {
                        r.stopped = Some(Stop::Refused(super::other_schema(&schema)));
                        return Err(de::Error::custom("another schema"));
                    }
                    r.schema = Some(schema);
                }
                "exported_by" => r.exported_by = Some(map.next_value()?),
                "run" => r.run = Some(map.next_value()?),
                "evalset" => r.evalset = Some(map.next_value()?),
                "candidates" => r.candidates = Some(map.next_value()?),
                "events" => r.events = Some(map.next_value()?),
                "harness" => r.harness = Some(map.next_value()?),
                "capacity" => {
                    r.capacity = map.next_value()?;
                    // Bakeoff writes it before the records; after them, the hash taken as they
                    // passed would not cover it.
                    if r.streaming.is_some() && !r.capacity.is_empty() {
                        r.stopped = Some(Stop::Refused(AppError::Invalid(
                            "the export's `capacity` comes after its records; bakeoff writes it before them".into(),
                        )));
                        return Err(de::Error::custom("stopped"));
                    }
                }
                "stops" => r.stops = map.next_value()?,
                "telemetry" => r.telemetry = map.next_value()?,
                "records" => {
                    if r.streaming.is_none()
                        && r.head_is_whole()
                        && let Err(stop) = r.start_streaming(self.head_tx, self.parts)
                    {
                        r.stopped = Some(stop);
                        return Err(de::Error::custom("stopped"));
                    }
                    map.next_value_seed(Records { reading: r })?;
                }
                // `exported_at`, the derived `lag_spike_marked`, and fields this version does not know.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The records array, each record taken as it is parsed.
struct Records<'a> {
    reading: &'a mut Reading,
}

impl<'de> DeserializeSeed<'de> for Records<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Records<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of records")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(record) = seq.next_element::<RequestRecord>()? {
            if let Err(stop) = self.reading.take(record) {
                self.reading.stopped = Some(stop);
                return Err(de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DynStore;
    use crate::store::server_key::ServerKey;
    use crate::transfer::export_run;
    use crate::transfer::tests::stored_run;

    async fn empty_store() -> DynStore {
        crate::store::connect_with_key("sqlite::memory:", &ServerKey::from_bytes([3; 32]))
            .await
            .unwrap()
    }

    /// The content hash as first defined: the content as one JSON tree, printed.
    fn tree_hash(export: &RunExport) -> String {
        let mut content = serde_json::json!({
            "schema": export.schema,
            "run": export.run,
            "evalset": export.evalset,
            "candidates": export.candidates,
            "events": export.events,
            "harness": export.harness,
            "records": export.records,
        });
        if !export.stops.is_empty() {
            content["stops"] = serde_json::json!(export.stops);
        }
        if !export.telemetry.is_empty() {
            content["telemetry"] = serde_json::json!(export.telemetry);
        }
        if !export.capacity.is_empty() {
            content["capacity"] = serde_json::json!(export.capacity);
        }
        hex::encode(Sha256::digest(content.to_string().as_bytes()))
    }

    #[tokio::test]
    async fn the_hash_taken_piece_by_piece_is_the_content_trees() {
        let (store, run) = stored_run(7).await;
        let mut export = export_run(store.as_ref(), run).await.unwrap();
        // Maps whose keys are not in order, and floats.
        let extra = &mut export.candidates[0].extra_body;
        extra.insert("top_p".into(), serde_json::json!(0.95));
        extra.insert(
            "chat_template_kwargs".into(),
            serde_json::json!({"z": 1, "a": [1.5, "x\"y"]}),
        );
        assert_eq!(content_hash(&export), tree_hash(&export));
        export.stops.clear();
        assert_eq!(content_hash(&export), tree_hash(&export));
        export.records.clear();
        export.harness = None;
        assert_eq!(content_hash(&export), tree_hash(&export));
    }

    #[tokio::test]
    async fn an_export_imports_batch_by_batch_and_in_any_field_order() {
        // More than two batches.
        let (from, run) = stored_run(2_345).await;
        let export = export_run(from.as_ref(), run).await.unwrap();
        let text = serde_json::to_string_pretty(&export).unwrap();
        let to = empty_store().await;
        let report = import_from(to.as_ref(), &Actor::terminal(), std::io::Cursor::new(text.into_bytes()))
            .await
            .unwrap();
        let Imported::New(id) = report.imported else {
            panic!("a new run: {report:?}")
        };
        assert_eq!((report.exported_run_id, report.records), (run, 2_345));
        assert_eq!(report.harness, export.harness);
        let stored = to.list_request_records(id).await.unwrap();
        let candidate = to.run_candidates(id).await.unwrap()[0].id;
        let expected: Vec<RequestRecord> = export
            .records
            .iter()
            .map(|r| RequestRecord {
                run_id: id,
                candidate_id: candidate,
                ..r.clone()
            })
            .collect();
        assert_eq!(stored, expected);
        assert_eq!(to.list_candidate_stops(id).await.unwrap().len(), 1);
        assert_eq!(
            to.list_telemetry_scrapes(id, candidate).await.unwrap(),
            crate::transfer::tests::test_scrapes(),
            "the telemetry is restored on the run's candidate"
        );
        assert_eq!(to.run_import_hash(id).await.unwrap(), Some(content_hash(&export)));

        // The same content with its fields in another order (records before the run and the
        // schema): read whole first, recognised by the same hash, nothing stored.
        let sorted = serde_json::to_value(&export).unwrap().to_string();
        assert!(sorted.find("\"records\"") < sorted.find("\"schema\""));
        let again = import_from(
            to.as_ref(),
            &Actor::terminal(),
            std::io::Cursor::new(sorted.into_bytes()),
        )
        .await
        .unwrap();
        assert_eq!(again.imported, Imported::Before(id));
        assert_eq!(to.count_runs().await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_file_refused_half_way_says_where_and_stores_nothing() {
        let (from, run) = stored_run(2_345).await;
        let mut export = export_run(from.as_ref(), run).await.unwrap();
        let to = empty_store().await;
        let refusal = |text: String| {
            let to = to.clone();
            async move {
                let refused =
                    import_from(to.as_ref(), &Actor::terminal(), std::io::Cursor::new(text.into_bytes())).await;
                let stored = (
                    to.count_runs().await.unwrap(),
                    to.list_candidates().await.unwrap().len(),
                    to.list_evalsets().await.unwrap().len(),
                );
                assert_eq!(stored, (0, 0, 0), "nothing stored");
                refused.unwrap_err().to_string()
            }
        };

        // A record past the first batch (already written in the transaction) that does not parse.
        let text = serde_json::to_string_pretty(&export).unwrap();
        let line = text.lines().position(|l| l.trim() == "\"repetition\": 1999,").unwrap() + 1;
        let broken = text.replace("\"repetition\": 1999,", "\"repetition\": \"1999\",");
        let message = refusal(broken).await;
        assert!(message.contains(&format!("line {line}")), "{message}");
        assert!(message.contains("does not match bakeoff.run/1"), "{message}");

        // Cut off half-way: not JSON, and where.
        let message = refusal(text[..text.len() / 2].to_string()).await;
        assert!(message.starts_with("the file is not JSON (line "), "{message}");

        // A record naming a candidate the export does not list.
        export.records[1_500].candidate_id = 999;
        let message = refusal(serde_json::to_string_pretty(&export).unwrap()).await;
        assert!(
            message.contains("record 1501 (case") && message.contains("names candidate #999"),
            "{message}"
        );

        // Another schema: refused at its first field.
        export.schema = "bakeoff.run/9".into();
        let message = refusal(serde_json::to_string_pretty(&export).unwrap()).await;
        assert!(message.contains("\"bakeoff.run/9\""), "{message}");
    }
}
