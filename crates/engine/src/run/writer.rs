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
//! answers again. A chunk the database refuses (it answers with an error that is not an
//! outage) is written again record by record, so the good records are stored and only the one
//! it refuses is set aside, with the reason, in the run's refused-records file (see `spill`);
//! the run's message counts them. Once the run has nothing more to send and the database stays
//! away past [`WriterSettings::finish_after`], what is held goes to the spill file and the run is paused.
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
use crate::error::EngineError;
use crate::store::{DynStore, StoreError};
use crate::tokens::tokenizer::{self, complete_counts};
use crate::wire::client::ChunkText;

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
/// before pausing the run with what it holds in the spill file (stored when the run resumes),
/// by default.
pub const FINISH_LIMIT: Duration = Duration::from_secs(600);
/// Tries of one record the database refuses (a deadlock or a serialization failure passes)
/// before it is set aside.
const REFUSAL_TRIES: u32 = 3;

/// A measured record whose token counts (and grades) are not yet completed.
#[derive(Debug, Clone)]
pub struct Pending {
    pub record: RequestRecord,
    /// Text bytes per chunk, from `Exchange::into_parts` (empty when unknown).
    pub chunk_text: Vec<ChunkText>,
    /// Grade the record against this case (successful measured records, and tool cases cut
    /// mid-call: `domain::tool_calls::cut_mid_call`).
    pub grading: Option<Grading>,
}

/// The case a record answers, for grading it in the writer.
#[derive(Debug, Clone)]
pub struct Grading {
    pub file: Arc<EvalSetFile>,
    pub case_index: usize,
    /// A conversation turn (0-based): graded by that turn's graders and expected value.
    pub turn: Option<usize>,
}

impl Grading {
    /// Every grader of the case that needs no model call (judge graders are graded elsewhere).
    fn grade(&self, record: &mut RequestRecord) {
        let Some(case) = self.file.cases.get(self.case_index) else {
            return;
        };
        // The answer only, unless the set grades the reasoning too. A failed request graded at
        // all is a tool case cut mid-call: only its calls are graded (its text is cut short).
        let mut grades: Vec<_> = if record.succeeded() {
            let text = record.graded_text(self.file.header.grade_reasoning);
            if let Some(turn) = self.turn.and_then(|k| case.turns.get(k)) {
                // A conversation turn: that turn's graders and expected value (no tools there).
                let grades = self
                    .file
                    .graders_for_turn(turn)
                    .iter()
                    .filter(|g| !g.needs_model())
                    .map(|g| g.grade(&text, turn.expected.as_ref()))
                    .collect();
                drop(text);
                record.grades = grades;
                return;
            }
            self.file
                .graders_for(case)
                .iter()
                .filter(|g| !g.needs_model())
                .map(|g| g.grade(&text, case.expected.as_ref()))
                .collect()
        } else {
            Vec::new()
        };
        grades.extend(crate::domain::tool_calls::grade_case(
            case,
            record.tool_turn(),
            record.output(),
        ));
        if let Some(format) = case.response_format.as_ref().filter(|_| record.succeeded()) {
            grades.push(crate::domain::tool_calls::structured::grade_structured(
                format,
                record.output(),
            ));
        }
        record.grades = grades;
    }
}

/// Where workers hand finished records.
#[derive(Clone)]
pub struct RecordSender {
    records: mpsc::UnboundedSender<Pending>,
    /// True while the writer holds fewer than [`BACKLOG_BOUND`] records.
    room: watch::Receiver<bool>,
    /// Records handed over so far, by every clone of this sender.
    sent: Arc<std::sync::atomic::AtomicU64>,
    /// Records the writer has dealt with (stored, found stored, or set aside as refused).
    settled: watch::Receiver<u64>,
}

impl RecordSender {
    /// Never waits. Returns false only when the writer has already stopped.
    pub fn send(&self, record: RequestRecord, chunk_text: Vec<ChunkText>, grading: Option<Grading>) -> bool {
        let sent = self
            .records
            .send(Pending {
                record,
                chunk_text,
                grading,
            })
            .is_ok();
        if sent {
            self.sent.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        sent
    }

    /// Waits until every record handed over so far is dealt with by the writer (stored, or set
    /// aside as refused), so that reading the store sees them: what a capacity search reads a
    /// probe level's figures from. Returns at once when the writer has stopped; records in the
    /// spill file while the database is away are not dealt with yet (the caller bounds the
    /// wait with the run's cancellation, which a paused writer sets).
    pub async fn settled(&self) {
        let target = self.sent.load(std::sync::atomic::Ordering::Acquire);
        let mut settled = self.settled.clone();
        let _ = settled.wait_for(|&n| n >= target).await;
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
    /// Once the load has ended, how long the writer waits for the database before the run is
    /// paused with what is left in the spill file.
    pub finish_after: Duration,
}

/// Records kept in memory while the database is away, by default (a few MB of output text).
pub const MEMORY_RECORDS: usize = 200;
/// How long the database may stay away before a run is paused, by default.
pub const PAUSE_AFTER: Duration = Duration::from_secs(300);

impl Default for WriterSettings {
    /// No spill directory (records wait in memory), paused after [`PAUSE_AFTER`]: for a
    /// database whose URL is unknown here. Every run of a known database uses
    /// [`WriterSettings::for_database`].
    fn default() -> Self {
        WriterSettings {
            spill_dir: None,
            memory_records: MEMORY_RECORDS,
            pause_after: Some(PAUSE_AFTER),
            finish_after: FINISH_LIMIT,
        }
    }
}

impl WriterSettings {
    /// The settings every run on `database_url` uses unless told otherwise (serve's flags
    /// override them): the default spill directory, [`MEMORY_RECORDS`] in memory, paused
    /// after [`PAUSE_AFTER`].
    pub fn for_database(database_url: &str) -> Self {
        WriterSettings {
            spill_dir: Self::default_spill_dir(database_url),
            ..Self::default()
        }
    }

    /// Where records the database refuses are kept: the spill directory, else the system's
    /// temporary directory (a refused record is kept even when nothing else spills).
    pub fn refused_dir(&self) -> PathBuf {
        self.spill_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("bakeoff-spill"))
    }

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
    /// Records still in the spill file, stored when the run resumes (the database stayed away
    /// past [`WriterSettings::finish_after`] after the load ended).
    pub pending: u64,
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
        // Of the stored ones; those still in the spill file are pending.
        let through = match self.spilled.saturating_sub(self.pending) {
            0 => String::new(),
            n => format!(" ({n} through the spill file)"),
        };
        let kept = match self.pending {
            0 => "",
            _ => " (kept in the spill file, stored when the run resumes)",
        };
        format!(
            "{} records measured, {} stored{through}, {} pending{kept}",
            self.measured, self.stored, self.pending
        )
    }

    /// The paused run's message, when the writer paused the run and that cut something short:
    /// the load (`load_cut`), or the storing of what was measured.
    pub fn pause_message(&self, load_cut: bool) -> Option<String> {
        let paused = self.paused.as_ref().filter(|_| load_cut || self.pending > 0)?;
        Some(format!(
            "paused: the database did not answer for {:.0} s (the limit is {:.0} s; {}); {}; resume the run to \
             measure the rest",
            paused.away.as_secs_f64(),
            paused.limit.as_secs_f64(),
            paused.cause,
            self.counts()
        ))
    }
}

/// The background writer task.
pub struct RecordWriter {
    sender: RecordSender,
    paused: watch::Receiver<bool>,
    task: JoinHandle<Result<WriterEnd, String>>,
}

impl RecordWriter {
    /// A writer for run `run_id`'s records, spilling and pausing as `settings` say.
    pub fn spawn_with(store: DynStore, run_id: i64, settings: WriterSettings) -> Self {
        // Parse the tokenizer's ranks now, not when the first batch is due.
        tokio::task::spawn_blocking(tokenizer::warm_up);
        let (tx, rx) = mpsc::unbounded_channel();
        let (room_tx, room) = watch::channel(true);
        let (paused_tx, paused) = watch::channel(false);
        let (settled_tx, settled) = watch::channel(0);
        let mut state = WriteLoop::new(store, run_id, settings, room_tx, paused_tx);
        state.settled_tx = Some(settled_tx);
        RecordWriter {
            sender: RecordSender {
                records: tx,
                room,
                sent: Arc::default(),
                settled,
            },
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
    /// Records the database refused, set aside in the refused-records file.
    refused: u64,
    first_refusal: Option<String>,
    /// The refused-records file, once one was written.
    refused_file: Option<PathBuf>,
    /// Refused records that could not be written there either, and why.
    refused_unkept: Option<(u64, String)>,
    /// Received records dealt with (stored, found stored, or refused), told to the senders.
    settled: u64,
    settled_tx: Option<watch::Sender<u64>>,
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
            refused: 0,
            first_refusal: None,
            refused_file: None,
            refused_unkept: None,
            settled: 0,
            settled_tx: None,
        }
    }

    fn settle(&mut self, n: u64) {
        self.settled += n;
        if let Some(tx) = &self.settled_tx {
            tx.send_replace(self.settled);
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
            self.check_pause();
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
                if at.elapsed() >= self.settings.finish_after {
                    // Nothing more to measure: what is held waits in the spill file for the
                    // resumed run instead of failing it.
                    self.spill_beyond(0).await;
                    if self.held.is_empty() {
                        self.pause_now(self.settings.finish_after);
                        return self.end();
                    }
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
            let away = if self.held.is_empty() {
                self.replay_spill().await.err()
            } else {
                let n = self.held.len().min(BATCH_RECORDS);
                let chunk: Vec<RequestRecord> = self.held.iter().take(n).cloned().collect();
                let sorted = store_sorting(&self.store, &chunk).await;
                self.written += sorted.new;
                self.held.drain(..sorted.handled);
                self.settle(sorted.handled as u64);
                self.set_aside(sorted.refused).await;
                sorted.away
            };
            match away {
                None => {
                    if self.held.is_empty()
                        && self.spill_pending() == 0
                        && let Some(o) = self.outage.take()
                    {
                        self.retry_wait = FIRST_RETRY_WAIT;
                        self.tell_outage_over(&o).await;
                    }
                }
                Some(e) => {
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

    /// Keeps records the database refused in the run's refused-records file (on the blocking
    /// pool) and counts them for the run's message.
    async fn set_aside(&mut self, refused: Vec<spill::Refused>) {
        let Some(first) = refused.first() else { return };
        let n = refused.len() as u64;
        self.refused += n;
        self.first_refusal.get_or_insert_with(|| first.reason.clone());
        for r in &refused {
            tracing::error!(run_id = self.run_id, case = %r.record.case_id, reason = %r.reason,
                "the database refused a request record; it is kept in the refused-records file");
        }
        let (dir, run_id) = (self.settings.refused_dir(), self.run_id);
        let kept = tokio::task::spawn_blocking(move || spill::append_refused(&dir, run_id, &refused)).await;
        let failure = match kept {
            Ok(Ok(path)) => {
                self.refused_file = Some(path);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(join) => format!("refused-records task ended abnormally: {join}"),
        };
        tracing::error!(run_id, error = %failure, records = n, "cannot write the refused-records file");
        let unkept = self.refused_unkept.get_or_insert((0, failure));
        unkept.0 += n;
    }

    /// Stores every record of the spill file (those already stored are skipped by key; those
    /// the database refuses are set aside) and removes the file once all are. A file that
    /// cannot be read back is kept for the next resume and its records counted as not stored.
    async fn replay_spill(&mut self) -> Result<(), StoreError> {
        let Some(s) = &mut self.spill else { return Ok(()) };
        // Appends are over once the file is read back whole: a new outage opens a new one.
        s.file = None;
        let path = spill::path(&s.dir, self.run_id);
        let pending = s.pending;
        match replay_file(&self.store, path, &self.settings, self.run_id).await {
            Ok(r) => {
                self.written += r.new;
                self.count_refused(&r);
                self.settle(pending as u64);
                if let Some(s) = &mut self.spill {
                    s.pending = 0;
                }
                Ok(())
            }
            Err(EngineError::Store(e)) => Err(e),
            Err(e) => {
                tracing::error!(error = %e, "the spill file could not be replayed; it is kept for the next resume");
                self.refused += pending as u64;
                self.settle(pending as u64);
                self.first_refusal.get_or_insert(e.to_string());
                if let Some(s) = &mut self.spill {
                    s.pending = 0;
                }
                Ok(())
            }
        }
    }

    /// Counts the records a spill-file replay set aside.
    fn count_refused(&mut self, r: &Replayed) {
        if r.refused == 0 {
            return;
        }
        self.refused += r.refused;
        if let Some(reason) = &r.first_refusal {
            self.first_refusal.get_or_insert_with(|| reason.clone());
        }
        if r.refused_file.is_some() {
            self.refused_file.clone_from(&r.refused_file);
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
    fn check_pause(&mut self) {
        let (Some(limit), Some(o)) = (self.settings.pause_after, &self.outage) else {
            return;
        };
        if o.since.elapsed() >= limit {
            self.pause_now(limit);
        }
    }

    /// Pauses the run (once), the database having been away past `limit`.
    fn pause_now(&mut self, limit: Duration) {
        let (Some(o), None) = (&self.outage, &self.paused) else {
            return;
        };
        let away = o.since.elapsed();
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
        let end = WriterEnd {
            measured: self.received,
            stored: self.written,
            spilled: self.spill.as_ref().map_or(0, |s| s.total),
            pending: self.spill_pending() as u64,
            paused: self.paused.clone(),
        };
        let Some(reason) = &self.first_refusal else {
            return Ok(end);
        };
        // The good records are stored; the run fails so the refused ones are looked at.
        let kept = match &self.refused_file {
            Some(path) => format!("; kept with the reason in {}", path.display()),
            None => String::new(),
        };
        let unkept = match &self.refused_unkept {
            Some((n, e)) => format!("; {n} of them could not be written there either ({e})"),
            None => String::new(),
        };
        Err(format!(
            "{} of {} records refused by the database ({reason}){kept}{unkept}; {}",
            self.refused,
            self.received,
            end.counts()
        ))
    }

    /// The run's error when the database did not answer within [`WriterSettings::finish_after`]
    /// of the end and what it held could not go to a spill file.
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replayed {
    /// Records read back from the file.
    pub records: usize,
    /// Of which new to the store (the others were stored before the file was removed).
    pub new: u64,
    /// Of which the database refused (set aside in the refused-records file).
    pub refused: u64,
    pub first_refusal: Option<String>,
    pub refused_file: Option<PathBuf>,
    /// Lines that could not be read back (a line cut short by a crash).
    pub unreadable: usize,
}

impl Replayed {
    /// What the replay did, for the run's log (None when there was nothing to replay).
    pub fn message(&self) -> Option<String> {
        if self.records == 0 && self.unreadable == 0 {
            return None;
        }
        let refused = match (&self.first_refusal, &self.refused_file) {
            (Some(reason), Some(path)) => format!(
                "; {} refused by the database ({reason}), kept with the reason in {}",
                self.refused,
                path.display()
            ),
            (Some(reason), None) => format!("; {} refused by the database ({reason})", self.refused),
            _ => String::new(),
        };
        Some(format!(
            "spill file replayed: {} records read back, {} of them new to the store ({} stored before){refused}{}",
            self.records,
            self.new,
            self.records as u64 - self.new - self.refused,
            match self.unreadable {
                0 => String::new(),
                n => format!("; {n} line(s) cut short by the crash left out (those requests are measured again)"),
            }
        ))
    }
}

/// What storing a chunk did.
#[derive(Default)]
struct Sorted {
    /// Records dealt with, from the first: stored (or already held) or refused.
    handled: usize,
    new: u64,
    refused: Vec<spill::Refused>,
    /// The database went away before the rest was dealt with.
    away: Option<StoreError>,
}

/// bakeoff's own metrics: records written, and how long the oldest of them waited since its end.
fn note_stored(new: u64, records: &[RequestRecord]) {
    let now = crate::wire::client::wall_clock_us();
    let oldest = records
        .iter()
        .map(|r| r.sent_at_us + r.last_heard_us())
        .min()
        .unwrap_or(now);
    crate::own_metrics::records_stored(new, now - oldest);
}

/// Stores `records` in one transaction; when the database refuses that, record by record, so
/// that one record it refuses never holds back the others. A record refused [`REFUSAL_TRIES`]
/// times is returned with the reason. Stops at the first sign of an outage (a record stored
/// before it is skipped by key when tried again).
async fn store_sorting(store: &DynStore, records: &[RequestRecord]) -> Sorted {
    let whole = match store.append_request_records(records).await {
        Ok(new) => {
            note_stored(new, records);
            return Sorted {
                handled: records.len(),
                new,
                ..Sorted::default()
            };
        }
        Err(e) if e.is_unavailable() => {
            return Sorted {
                away: Some(e),
                ..Sorted::default()
            };
        }
        Err(e) => e,
    };
    tracing::warn!(error = %whole, records = records.len(), "the database refused a chunk of records; storing them one by one");
    let mut sorted = Sorted::default();
    for record in records {
        let mut tries = 0;
        loop {
            tries += 1;
            match store.append_request_records(std::slice::from_ref(record)).await {
                Ok(new) => {
                    note_stored(new, std::slice::from_ref(record));
                    sorted.new += new
                }
                Err(e) if e.is_unavailable() => {
                    sorted.away = Some(e);
                    return sorted;
                }
                Err(e) if tries < REFUSAL_TRIES => {
                    tracing::debug!(error = %e, "a record was refused; trying it again");
                    tokio::time::sleep(FIRST_RETRY_WAIT).await;
                    continue;
                }
                Err(e) => sorted.refused.push(spill::Refused {
                    reason: e.to_string(),
                    record: record.clone(),
                }),
            }
            break;
        }
        sorted.handled += 1;
    }
    sorted
}

/// Stores every record of a spill file (those already stored are skipped by key, those the
/// database refuses go to the refused-records file) and removes the file once all are dealt
/// with. No file: nothing done.
async fn replay_file(
    store: &DynStore,
    path: PathBuf,
    settings: &WriterSettings,
    run_id: i64,
) -> Result<Replayed, EngineError> {
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
    let mut replayed = Replayed {
        records: read.records.len(),
        unreadable: read.unreadable.len(),
        ..Replayed::default()
    };
    for chunk in read.records.chunks(BATCH_RECORDS) {
        let sorted = store_sorting(store, chunk).await;
        replayed.new += sorted.new;
        if let Some(first) = sorted.refused.first() {
            replayed.refused += sorted.refused.len() as u64;
            replayed.first_refusal.get_or_insert_with(|| first.reason.clone());
            let (dir, refused) = (settings.refused_dir(), sorted.refused);
            let kept = tokio::task::spawn_blocking(move || spill::append_refused(&dir, run_id, &refused))
                .await
                .map_err(|e| spill_error(e.to_string()))?
                .map_err(|e| spill_error(e.to_string()))?;
            replayed.refused_file = Some(kept);
        }
        if let Some(e) = sorted.away {
            return Err(e.into());
        }
    }
    let remove_path = path.clone();
    tokio::task::spawn_blocking(move || spill::remove(&remove_path))
        .await
        .map_err(|e| spill_error(e.to_string()))?
        .map_err(|e| spill_error(e.to_string()))?;
    Ok(replayed)
}

/// Stores what run `run_id`'s spill file holds, when a run starts or resumes (the previous
/// process ended before the database took it): every record exactly once.
pub async fn replay_spilled(store: &DynStore, settings: &WriterSettings, run_id: i64) -> Result<Replayed, EngineError> {
    match &settings.spill_dir {
        Some(dir) => replay_file(store, spill::path(dir, run_id), settings, run_id).await,
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
