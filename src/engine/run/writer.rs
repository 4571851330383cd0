//! Records go from the request workers to the store through this writer, in batches, so a slow
//! database never delays a measured request: workers only push onto a channel.
//!
//! A finished record is never dropped: when the database does not answer, the writer keeps
//! every record (in order) and tries again with backoff until it answers, then goes on. Memory
//! stays bounded because the load generator waits for room ([`RecordSender::room`]) before each
//! new request once [`BACKLOG_BOUND`] records are held: the run pauses instead of measuring
//! into a void, and resumes by itself when the database is back. Records are keyed (run,
//! candidate, case, phase, repetition, attempt), so a batch retried after an unclear failure
//! never duplicates. Each outage is told in the run's log with exact counts once the database
//! answers again.
//! Token counting (the canonical o200k count, counts missing from the server, per-chunk counts)
//! and grading happen here too, on the blocking pool, once a batch is due: never in the request
//! loop, where they would delay the next send.
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use super::spill::{self, SpillFile};
use crate::domain::evalset::EvalSetFile;
use crate::domain::run::RequestRecord;
use crate::engine::error::EngineError;
use crate::engine::tokens::tokenizer::{self, complete_counts};
use crate::engine::wire::client::ChunkText;
use crate::store::{DynStore, StoreError};

/// A batch is written when it holds this many records…
pub const BATCH_RECORDS: usize = 50;
/// …or when its oldest record has waited this long.
pub const BATCH_WAIT: Duration = Duration::from_millis(250);
/// Records held (received, not yet stored) beyond which no new request is sent until the
/// database takes them.
pub const BACKLOG_BOUND: usize = 1_000;
/// First and longest wait between two tries while the database is away.
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(200);
const MAX_RETRY_WAIT: Duration = Duration::from_secs(2);
/// Once the run has nothing more to send, how long the writer still waits for the database
/// before giving up with exact counts (the run then fails and can be resumed; the records it
/// could not store are measured again).
const FINISH_LIMIT: Duration = Duration::from_secs(600);
/// Tries of a chunk the database refuses (answers with an error that is not an outage).
const REFUSAL_TRIES: u32 = 3;

/// A measured record whose token counts (and grades) are not yet completed.
#[derive(Debug, Clone)]
pub struct Pending {
    pub record: RequestRecord,
    /// Text bytes per chunk, from `Exchange::into_parts` (empty when unknown).
    pub chunk_text: Vec<ChunkText>,
    /// Grade the record against this case (successful measured records only).
    pub grading: Option<Grading>,
}

/// The case a record answers, for grading it in the writer.
#[derive(Debug, Clone)]
pub struct Grading {
    pub file: Arc<EvalSetFile>,
    pub case_index: usize,
}

impl Grading {
    /// Every grader of the case that needs no model call (judge graders are graded elsewhere).
    fn grade(&self, record: &mut RequestRecord) {
        let Some(case) = self.file.cases.get(self.case_index) else {
            return;
        };
        record.grades = self
            .file
            .graders_for(case)
            .iter()
            .filter(|g| !g.needs_model())
            .map(|g| g.grade(&record.output, case.expected.as_ref()))
            .collect();
    }
}

/// Where workers hand finished records.
#[derive(Clone)]
pub struct RecordSender {
    records: mpsc::UnboundedSender<Pending>,
    /// True while the writer holds fewer than [`BACKLOG_BOUND`] records.
    room: watch::Receiver<bool>,
}

impl RecordSender {
    /// Never waits. Returns false only when the writer has already stopped.
    pub fn send(&self, record: RequestRecord, chunk_text: Vec<ChunkText>, grading: Option<Grading>) -> bool {
        self.records
            .send(Pending {
                record,
                chunk_text,
                grading,
            })
            .is_ok()
    }

    /// Waits until the writer has room for more records (at once, unless the database is away
    /// and [`BACKLOG_BOUND`] records are held). Load generators await this before each new
    /// request; the caller bounds the wait with its own cancellation.
    pub async fn room(&self) {
        let mut room = self.room.clone();
        // An error means the writer stopped: nothing to wait for.
        let _ = room.wait_for(|open| *open).await;
    }
}

/// Where and how long the writer keeps records the database cannot take.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// Directory of the spill files (see `spill`); None keeps everything in memory (bounded
    /// by [`BACKLOG_BOUND`] all the same).
    pub spill_dir: Option<PathBuf>,
    /// Finished records kept in memory while the database is away; the rest go to the spill
    /// file.
    pub memory_records: usize,
    /// How long the database may stay away before the run is paused (None: never).
    pub pause_after: Option<Duration>,
}

/// Records kept in memory while the database is away, by default (a few MB of output text).
pub const MEMORY_RECORDS: usize = 200;
/// How long the database may stay away before a run is paused, by default.
pub const PAUSE_AFTER: Duration = Duration::from_secs(300);

impl Default for WriterSettings {
    /// In memory only, never paused: what a terminal command or a soak uses.
    fn default() -> Self {
        WriterSettings {
            spill_dir: None,
            memory_records: MEMORY_RECORDS,
            pause_after: None,
        }
    }
}

impl WriterSettings {
    /// The default spill directory for a database: beside an SQLite file
    /// (`bakeoff.db` → `bakeoff.db.spill/`), `./bakeoff-spill/` for PostgreSQL, none for an
    /// in-memory database (nothing of it outlives the process either).
    pub fn default_spill_dir(database_url: &str) -> Option<PathBuf> {
        if database_url.contains(":memory:") || database_url.contains("mode=memory") {
            return None;
        }
        Some(crate::store::beside_sqlite_file(database_url, ".spill").unwrap_or_else(|| PathBuf::from("bakeoff-spill")))
    }
}

/// What the writer did, in exact counts, once it has ended.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterEnd {
    /// Records handed to the writer (every finished request, warm-ups included).
    pub measured: u64,
    /// Records new to the store (a record it already held is not counted).
    pub stored: u64,
    /// Records that went through the spill file.
    pub spilled: u64,
    /// The run was paused because the database stayed away past the limit.
    pub paused: Option<Paused>,
}

/// Why the writer paused its run.
#[derive(Debug, Clone, PartialEq)]
pub struct Paused {
    /// How long the database had been away when the run was paused.
    pub away: Duration,
    pub limit: Duration,
    pub cause: String,
}

impl WriterEnd {
    /// "57 records measured, 57 stored (40 through the spill file), 0 pending".
    pub fn counts(&self) -> String {
        let through = match self.spilled {
            0 => String::new(),
            n => format!(" ({n} through the spill file)"),
        };
        format!(
            "{} records measured, {} stored{through}, 0 pending",
            self.measured, self.stored
        )
    }
}

/// The background writer task.
pub struct RecordWriter {
    sender: RecordSender,
    paused: watch::Receiver<bool>,
    task: JoinHandle<Result<WriterEnd, String>>,
}

impl RecordWriter {
    /// A writer that keeps what the database cannot take in memory, never pausing.
    pub fn spawn(store: DynStore) -> Self {
        Self::spawn_with(store, 0, WriterSettings::default())
    }

    /// A writer for run `run_id`'s records, spilling and pausing as `settings` say.
    pub fn spawn_with(store: DynStore, run_id: i64, settings: WriterSettings) -> Self {
        // Parse the tokenizer's ranks now, not when the first batch is due.
        tokio::task::spawn_blocking(tokenizer::warm_up);
        let (tx, rx) = mpsc::unbounded_channel();
        let (room_tx, room) = watch::channel(true);
        let (paused_tx, paused) = watch::channel(false);
        let state = WriteLoop::new(store, run_id, settings, room_tx, paused_tx);
        RecordWriter {
            sender: RecordSender { records: tx, room },
            paused,
            task: tokio::spawn(state.run(rx)),
        }
    }

    pub fn sender(&self) -> RecordSender {
        self.sender.clone()
    }

    /// Turns true when the database has stayed away past the limit: the run stops sending
    /// and ends paused (see [`WriterEnd::paused`]).
    pub fn paused(&self) -> watch::Receiver<bool> {
        self.paused.clone()
    }

    /// Writes what is still held (after every sender is dropped) and says what was done.
    pub async fn finish(self) -> Result<WriterEnd, EngineError> {
        drop(self.sender);
        match self.task.await {
            Ok(Ok(end)) => Ok(end),
            Ok(Err(message)) => Err(EngineError::RecordWriter(message)),
            Err(join) => Err(EngineError::RecordWriter(format!(
                "writer task ended abnormally: {join}"
            ))),
        }
    }
}

/// A time the database was away, as the run's log tells it.
struct Outage {
    since: Instant,
    /// Records held at any time during it (received before it ended).
    held: usize,
    /// Of which in the spill file, at most.
    spilled: usize,
    last_error: String,
}

/// The spill file of the writer's run, once it was needed.
struct Spill {
    dir: PathBuf,
    file: Option<SpillFile>,
    /// Records in the file not yet known to be stored.
    pending: usize,
    /// Records ever written to it.
    total: u64,
    /// The last append failed (told once; records stay in memory meanwhile).
    broken: bool,
}

/// The writer's state between two turns of its loop.
struct WriteLoop {
    store: DynStore,
    run_id: i64,
    settings: WriterSettings,
    room: watch::Sender<bool>,
    paused_tx: watch::Sender<bool>,
    /// Completed records not yet stored, in the order they arrived.
    held: VecDeque<RequestRecord>,
    spill: Option<Spill>,
    written: u64,
    received: u64,
    outage: Option<Outage>,
    paused: Option<Paused>,
    retry_wait: Duration,
    retry_at: Option<Instant>,
    refusals: u32,
    refused: u64,
    first_refusal: Option<String>,
}

impl WriteLoop {
    fn new(
        store: DynStore,
        run_id: i64,
        settings: WriterSettings,
        room: watch::Sender<bool>,
        paused_tx: watch::Sender<bool>,
    ) -> Self {
        let spill = settings.spill_dir.clone().map(|dir| Spill {
            dir,
            file: None,
            pending: 0,
            total: 0,
            broken: false,
        });
        WriteLoop {
            store,
            run_id,
            settings,
            room,
            paused_tx,
            held: VecDeque::new(),
            spill,
            written: 0,
            received: 0,
            outage: None,
            paused: None,
            retry_wait: FIRST_RETRY_WAIT,
            retry_at: None,
            refusals: 0,
            refused: 0,
            first_refusal: None,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Pending>) -> Result<WriterEnd, String> {
        let mut batch: Vec<Pending> = Vec::with_capacity(BATCH_RECORDS);
        let mut deadline = Instant::now() + BATCH_WAIT;
        let mut closed_at: Option<Instant> = None;
        loop {
            let retry_at = self.retry_at;
            tokio::select! {
                next = rx.recv(), if closed_at.is_none() => match next {
                    Some(record) => {
                        if batch.is_empty() {
                            deadline = Instant::now() + BATCH_WAIT;
                        }
                        self.received += 1;
                        batch.push(record);
                    }
                    None => closed_at = Some(Instant::now()),
                },
                _ = sleep_until(deadline), if !batch.is_empty() => {}
                _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => self.retry_at = None,
            }
            let closed = closed_at.is_some();
            let due = closed || batch.len() >= BATCH_RECORDS || (!batch.is_empty() && Instant::now() >= deadline);
            if due && !batch.is_empty() {
                self.held.extend(complete_batch(std::mem::take(&mut batch)).await);
            }
            let holding = self.held.len() + self.spill_pending() + rx.len();
            if let Some(o) = &mut self.outage {
                o.held = o.held.max(holding);
            }
            self.store_held().await;
            self.check_pause().await;
            if self.outage.is_some() {
                // Beyond what memory may keep (all of it once paused), to the spill file.
                let keep = if self.paused.is_some() {
                    0
                } else {
                    self.settings.memory_records
                };
                self.spill_beyond(keep).await;
            }
            let backlog = self.held.len() + self.spill_pending() + batch.len() + rx.len();
            self.room.send_if_modified(|open| {
                let now = backlog < BACKLOG_BOUND;
                std::mem::replace(open, now) != now
            });
            if let Some(at) = closed_at {
                if self.held.is_empty() && batch.is_empty() && self.spill_pending() == 0 {
                    return self.end();
                }
                if at.elapsed() >= FINISH_LIMIT {
                    return Err(self.given_up());
                }
            }
        }
    }

    fn spill_pending(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.pending)
    }

    /// Stores what is held, oldest first, then what the spill file holds, unless waiting out
    /// a failed try.
    async fn store_held(&mut self) {
        while self.retry_at.is_none() && (!self.held.is_empty() || self.spill_pending() > 0) {
            let from_memory = !self.held.is_empty();
            let result = if from_memory {
                let n = self.held.len().min(BATCH_RECORDS);
                let chunk: Vec<RequestRecord> = self.held.iter().take(n).cloned().collect();
                self.store.append_request_records(&chunk).await.map(|new| (new, n))
            } else {
                self.replay_spill().await.map(|new| (new, 0))
            };
            match result {
                Ok((new, n)) => {
                    self.written += new;
                    self.refusals = 0;
                    self.held.drain(..n);
                    if !from_memory && let Some(s) = &mut self.spill {
                        s.pending = 0;
                    }
                    if self.held.is_empty()
                        && self.spill_pending() == 0
                        && let Some(o) = self.outage.take()
                    {
                        self.retry_wait = FIRST_RETRY_WAIT;
                        self.tell_outage_over(&o).await;
                    }
                }
                Err(e) if !e.is_unavailable() => {
                    // The database answered and refused: trying again will not help. The chunk
                    // is given up after a few tries and the run fails with exact counts (a
                    // refused spill file is kept: a resumed run tries it again).
                    self.refusals += 1;
                    if self.refusals < REFUSAL_TRIES {
                        self.retry_at = Some(Instant::now() + FIRST_RETRY_WAIT);
                        continue;
                    }
                    self.refusals = 0;
                    let n = if from_memory {
                        self.held.len().min(BATCH_RECORDS)
                    } else {
                        self.spill_pending()
                    };
                    tracing::error!(error = %e, records = n, "the database refused request records");
                    self.refused += n as u64;
                    self.first_refusal.get_or_insert(e.to_string());
                    if from_memory {
                        self.held.drain(..n);
                    } else if let Some(s) = &mut self.spill {
                        s.pending = 0;
                    }
                }
                Err(e) => {
                    let (held, spilled) = (self.held.len(), self.spill_pending());
                    let o = self.outage.get_or_insert_with(|| {
                        tracing::warn!(error = %e, held, "the database is not answering; records are held until it does");
                        Outage {
                            since: Instant::now(),
                            held: 0,
                            spilled: 0,
                            last_error: String::new(),
                        }
                    });
                    o.held = o.held.max(held + spilled);
                    o.last_error = e.to_string();
                    self.retry_at = Some(Instant::now() + self.retry_wait);
                    self.retry_wait = (self.retry_wait * 2).min(MAX_RETRY_WAIT);
                }
            }
        }
    }

    /// Stores every record of the spill file (those already stored are skipped by key) and
    /// removes the file once all are. Returns how many were new. A file that cannot be read
    /// back is kept for the next resume and its records counted as not stored.
    async fn replay_spill(&mut self) -> Result<u64, StoreError> {
        let Some(s) = &mut self.spill else { return Ok(0) };
        // Appends are over once the file is read back whole: a new outage opens a new one.
        s.file = None;
        let path = spill::path(&s.dir, self.run_id);
        match replay_file(&self.store, path).await {
            Ok(r) => Ok(r.new),
            Err(EngineError::Store(e)) => Err(e),
            Err(e) => {
                tracing::error!(error = %e, "the spill file could not be replayed; it is kept for the next resume");
                self.refused += s.pending as u64;
                self.first_refusal.get_or_insert(e.to_string());
                s.pending = 0;
                Ok(0)
            }
        }
    }

    /// Moves held records beyond the first `keep` to the spill file (on the blocking pool).
    async fn spill_beyond(&mut self, keep: usize) {
        let run_id = self.run_id;
        let Some(s) = &mut self.spill else { return };
        if self.held.len() <= keep {
            return;
        }
        let moved: Vec<RequestRecord> = self.held.drain(keep..).collect();
        let n = moved.len();
        let file = s.file.take();
        let dir = s.dir.clone();
        let appended = tokio::task::spawn_blocking(move || {
            let opened = match file {
                Some(f) => Ok(f),
                None => SpillFile::open(&dir, run_id),
            };
            match opened {
                Ok(mut file) => file.append(&moved).map(|()| file).map_err(|e| (e, moved)),
                Err(e) => Err((e, moved)),
            }
        })
        .await;
        let failure = match appended {
            Ok(Ok(file)) => {
                s.file = Some(file);
                s.pending += n;
                s.total += n as u64;
                if let Some(o) = &mut self.outage {
                    o.spilled = o.spilled.max(s.pending);
                }
                s.broken = false;
                return;
            }
            Ok(Err((e, moved))) => {
                self.held.extend(moved);
                e.to_string()
            }
            Err(join) => format!("spill task ended abnormally: {join}"),
        };
        if !s.broken {
            s.broken = true;
            tracing::error!(
                run_id,
                dir = %s.dir.display(),
                error = %failure,
                "cannot write the spill file; records stay in memory"
            );
        }
    }

    /// Pauses the run once the database has been away longer than the limit.
    async fn check_pause(&mut self) {
        let (Some(limit), Some(o), None) = (self.settings.pause_after, &self.outage, &self.paused) else {
            return;
        };
        let away = o.since.elapsed();
        if away < limit {
            return;
        }
        tracing::warn!(
            run_id = self.run_id,
            away_s = away.as_secs_f64(),
            held = self.held.len(),
            spilled = self.spill_pending(),
            "the database stayed away past the limit; the run is paused"
        );
        self.paused = Some(Paused {
            away,
            limit,
            cause: o.last_error.clone(),
        });
        let _ = self.paused_tx.send(true);
    }

    fn end(&self) -> Result<WriterEnd, String> {
        match &self.first_refusal {
            None => Ok(WriterEnd {
                measured: self.received,
                stored: self.written,
                spilled: self.spill.as_ref().map_or(0, |s| s.total),
                paused: self.paused.clone(),
            }),
            Some(e) => Err(format!(
                "{} of {} records not stored: the database refused them ({e})",
                self.refused, self.received
            )),
        }
    }

    /// The run's error when the database did not answer within [`FINISH_LIMIT`] of the end.
    fn given_up(&self) -> String {
        let away = self
            .outage
            .as_ref()
            .map(|o| o.since.elapsed().as_secs_f64())
            .unwrap_or_default();
        let cause = self.outage.as_ref().map(|o| o.last_error.as_str()).unwrap_or_default();
        let spilled = self.spill_pending();
        let kept = match &self.spill {
            Some(s) if spilled > 0 => format!(
                "; {spilled} of them are kept in {} and stored when the run resumes",
                spill::path(&s.dir, self.run_id).display()
            ),
            _ => String::new(),
        };
        format!(
            "{} records measured, {} stored, {spilled} spilled, {} pending: the database did not answer for \
             {away:.0} s ({cause}){kept}; resume the run to measure the others again",
            self.received,
            self.written,
            self.held.len() + spilled,
        )
    }

    /// Says in the run's log, once the database answers again, how long it was away and exactly
    /// what was held meanwhile (nothing was lost).
    async fn tell_outage_over(&self, outage: &Outage) {
        let away = outage.since.elapsed().as_secs_f64();
        let spilled = match outage.spilled {
            0 => String::new(),
            n => format!(", up to {n} of them in the spill file"),
        };
        let message = format!(
            "the database did not answer for {away:.1} s ({}); {} records were held meanwhile{spilled} and are now \
             stored ({} of {} records stored so far, none lost)",
            outage.last_error, outage.held, self.written, self.received
        );
        tracing::info!(run_id = self.run_id, "{message}");
        if let Err(e) = self.store.append_run_event(self.run_id, "warn", &message).await {
            tracing::warn!(error = %e, "could not log the database outage in the run's events");
        }
    }
}

/// What replaying a spill file did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Replayed {
    /// Records read back from the file.
    pub records: usize,
    /// Of which new to the store (the others were stored before the file was removed).
    pub new: u64,
    /// Lines that could not be read back (a line cut short by a crash).
    pub unreadable: usize,
}

/// Stores every record of a spill file (those already stored are skipped by key) and removes
/// the file once all are. No file: nothing done.
async fn replay_file(store: &DynStore, path: PathBuf) -> Result<Replayed, EngineError> {
    let spill_error = |message: String| EngineError::Spill {
        path: path.display().to_string(),
        message,
    };
    let read_path = path.clone();
    let read = tokio::task::spawn_blocking(move || spill::read(&read_path))
        .await
        .map_err(|e| spill_error(e.to_string()))?
        .map_err(|e| spill_error(e.to_string()))?;
    let Some(read) = read else {
        return Ok(Replayed::default());
    };
    for line in &read.unreadable {
        tracing::warn!(line = %line, "a spill file line could not be read back (cut short by a crash?)");
    }
    let mut new = 0;
    for chunk in read.records.chunks(BATCH_RECORDS) {
        new += store.append_request_records(chunk).await?;
    }
    let remove_path = path.clone();
    tokio::task::spawn_blocking(move || spill::remove(&remove_path))
        .await
        .map_err(|e| spill_error(e.to_string()))?
        .map_err(|e| spill_error(e.to_string()))?;
    Ok(Replayed {
        records: read.records.len(),
        new,
        unreadable: read.unreadable.len(),
    })
}

/// Stores what run `run_id`'s spill file holds, when a run starts or resumes (the previous
/// process ended before the database took it): every record exactly once.
pub async fn replay_spilled(store: &DynStore, settings: &WriterSettings, run_id: i64) -> Result<Replayed, EngineError> {
    match &settings.spill_dir {
        Some(dir) => replay_file(store, spill::path(dir, run_id)).await,
        None => Ok(Replayed::default()),
    }
}

/// Completes every record's token counts and grades on the blocking pool. A record whose
/// counting fails is still stored, with the counts its stream gave.
async fn complete_batch(batch: Vec<Pending>) -> Vec<RequestRecord> {
    let counted = tokio::task::spawn_blocking(move || {
        batch
            .into_iter()
            .map(|mut p| {
                // A panic here would be a bug; the record (each field assigned whole) is kept.
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    complete_counts(&mut p.record, &p.chunk_text);
                    if let Some(g) = &p.grading {
                        g.grade(&mut p.record);
                    }
                }));
                if outcome.is_err() {
                    tracing::error!(case = %p.record.case_id, "counting or grading failed for a record");
                }
                p.record
            })
            .collect::<Vec<_>>()
    })
    .await;
    match counted {
        Ok(records) => records,
        Err(e) => {
            tracing::error!(error = %e, "token counting task ended abnormally");
            Vec::new()
        }
    }
}

/// Appends a run event the way records are stored: while the database does not answer, waits
/// and tries again (bounded by [`FINISH_LIMIT`]) instead of failing the run over a log line.
/// A refusal (the database answered with an error) is returned at once.
pub(crate) async fn append_event_patiently(
    store: &DynStore,
    run_id: i64,
    level: &str,
    message: &str,
) -> Result<(), crate::store::StoreError> {
    let started = Instant::now();
    let mut wait = FIRST_RETRY_WAIT;
    loop {
        match store.append_run_event(run_id, level, message).await {
            Err(e) if e.is_unavailable() && started.elapsed() < FINISH_LIMIT => {
                tracing::debug!(error = %e, "the database is not answering; the run event waits");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_RETRY_WAIT);
            }
            other => return other,
        }
    }
}
