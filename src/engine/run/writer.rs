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
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::domain::evalset::EvalSetFile;
use crate::domain::run::RequestRecord;
use crate::engine::error::EngineError;
use crate::engine::tokens::tokenizer::{self, complete_counts};
use crate::engine::wire::client::ChunkText;
use crate::store::DynStore;

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

/// The background writer task.
pub struct RecordWriter {
    sender: RecordSender,
    task: JoinHandle<Result<u64, String>>,
}

impl RecordWriter {
    pub fn spawn(store: DynStore) -> Self {
        // Parse the tokenizer's ranks now, not when the first batch is due.
        tokio::task::spawn_blocking(tokenizer::warm_up);
        let (tx, rx) = mpsc::unbounded_channel();
        let (room_tx, room) = watch::channel(true);
        RecordWriter {
            sender: RecordSender { records: tx, room },
            task: tokio::spawn(write_loop(store, rx, room_tx)),
        }
    }

    pub fn sender(&self) -> RecordSender {
        self.sender.clone()
    }

    /// Writes what is still queued (after every sender is dropped) and returns how many
    /// records were new to the store.
    pub async fn finish(self) -> Result<u64, EngineError> {
        drop(self.sender);
        match self.task.await {
            Ok(Ok(n)) => Ok(n),
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
    last_error: String,
}

async fn write_loop(
    store: DynStore,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    room: watch::Sender<bool>,
) -> Result<u64, String> {
    let mut batch: Vec<Pending> = Vec::with_capacity(BATCH_RECORDS);
    // Completed records not yet stored, in the order they arrived.
    let mut held: std::collections::VecDeque<RequestRecord> = std::collections::VecDeque::new();
    let mut deadline = Instant::now() + BATCH_WAIT;
    let mut written = 0u64;
    let mut received = 0u64;
    let mut closed_at: Option<Instant> = None;
    let mut outage: Option<Outage> = None;
    let mut retry_wait = FIRST_RETRY_WAIT;
    let mut retry_at: Option<Instant> = None;
    let mut refusals = 0u32;
    let mut refused = 0u64;
    let mut first_refusal: Option<String> = None;
    loop {
        tokio::select! {
            next = rx.recv(), if closed_at.is_none() => match next {
                Some(record) => {
                    if batch.is_empty() {
                        deadline = Instant::now() + BATCH_WAIT;
                    }
                    received += 1;
                    batch.push(record);
                }
                None => closed_at = Some(Instant::now()),
            },
            _ = sleep_until(deadline), if !batch.is_empty() => {}
            _ = sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => retry_at = None,
        }
        let closed = closed_at.is_some();
        let due = closed || batch.len() >= BATCH_RECORDS || (!batch.is_empty() && Instant::now() >= deadline);
        if due && !batch.is_empty() {
            held.extend(complete_batch(std::mem::take(&mut batch)).await);
        }
        if let Some(o) = &mut outage {
            o.held = o.held.max(held.len() + rx.len());
        }
        // Store what is held, oldest first, unless waiting out a failed try.
        while retry_at.is_none() && !held.is_empty() {
            let n = held.len().min(BATCH_RECORDS);
            let chunk: Vec<RequestRecord> = held.iter().take(n).cloned().collect();
            match store.append_request_records(&chunk).await {
                Ok(new) => {
                    written += new;
                    refusals = 0;
                    held.drain(..n);
                    if held.is_empty()
                        && let Some(o) = outage.take()
                    {
                        retry_wait = FIRST_RETRY_WAIT;
                        tell_outage_over(&store, &chunk[0], &o, written, received).await;
                    }
                }
                Err(e) if !e.is_unavailable() => {
                    // The database answered and refused: trying again will not help. The chunk
                    // is given up after a few tries and the run fails with exact counts.
                    refusals += 1;
                    if refusals < REFUSAL_TRIES {
                        retry_at = Some(Instant::now() + FIRST_RETRY_WAIT);
                        continue;
                    }
                    refusals = 0;
                    tracing::error!(error = %e, records = n, "the database refused request records");
                    refused += n as u64;
                    first_refusal.get_or_insert(e.to_string());
                    held.drain(..n);
                }
                Err(e) => {
                    let o = outage.get_or_insert_with(|| {
                        tracing::warn!(error = %e, held = held.len(), "the database is not answering; records are held until it does");
                        Outage {
                            since: Instant::now(),
                            held: 0,
                            last_error: String::new(),
                        }
                    });
                    o.held = o.held.max(held.len() + rx.len());
                    o.last_error = e.to_string();
                    retry_at = Some(Instant::now() + retry_wait);
                    retry_wait = (retry_wait * 2).min(MAX_RETRY_WAIT);
                }
            }
        }
        let backlog = held.len() + batch.len() + rx.len();
        room.send_if_modified(|open| {
            let now = backlog < BACKLOG_BOUND;
            std::mem::replace(open, now) != now
        });
        if let Some(at) = closed_at {
            if held.is_empty() && batch.is_empty() {
                return match first_refusal {
                    None => Ok(written),
                    Some(e) => Err(format!(
                        "{refused} of {received} records not stored: the database refused them ({e})"
                    )),
                };
            }
            if at.elapsed() >= FINISH_LIMIT {
                let away = outage
                    .as_ref()
                    .map(|o| o.since.elapsed().as_secs_f64())
                    .unwrap_or_default();
                let cause = outage.map(|o| o.last_error).unwrap_or_default();
                return Err(format!(
                    "{} of {received} records not stored: the database did not answer for {away:.0} s ({cause}); \
                     resume the run to measure them again",
                    held.len()
                ));
            }
        }
    }
}

/// Says in the run's log, once the database answers again, how long it was away and exactly
/// what was held meanwhile (nothing was lost).
async fn tell_outage_over(store: &DynStore, any: &RequestRecord, outage: &Outage, written: u64, received: u64) {
    let away = outage.since.elapsed().as_secs_f64();
    let message = format!(
        "the database did not answer for {away:.1} s ({}); {} records were held meanwhile and are now stored \
         ({written} of {received} records stored so far, none lost)",
        outage.last_error, outage.held
    );
    tracing::info!(run_id = any.run_id, "{message}");
    if let Err(e) = store.append_run_event(any.run_id, "warn", &message).await {
        tracing::warn!(error = %e, "could not log the database outage in the run's events");
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
