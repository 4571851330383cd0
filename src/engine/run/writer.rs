//! Records go from the request workers to the store through this writer, in batches, so a slow
//! database never delays a measured request: workers only push onto an unbounded channel.
//! Token counting (the canonical o200k count, counts missing from the server, per-chunk counts)
//! and grading happen here too, on the blocking pool, once a batch is due: never in the request
//! loop, where they would delay the next send.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};

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
/// Tries per batch before the writer gives up on it (the run then fails and can be resumed).
const WRITE_TRIES: u32 = 3;

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
pub struct RecordSender(mpsc::UnboundedSender<Pending>);

impl RecordSender {
    /// Never waits. Returns false only when the writer has already stopped.
    pub fn send(&self, record: RequestRecord, chunk_text: Vec<ChunkText>, grading: Option<Grading>) -> bool {
        self.0
            .send(Pending {
                record,
                chunk_text,
                grading,
            })
            .is_ok()
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
        RecordWriter {
            sender: RecordSender(tx),
            task: tokio::spawn(write_loop(store, rx)),
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

async fn write_loop(store: DynStore, mut rx: mpsc::UnboundedReceiver<Pending>) -> Result<u64, String> {
    let mut batch: Vec<Pending> = Vec::with_capacity(BATCH_RECORDS);
    let mut deadline = Instant::now() + BATCH_WAIT;
    let mut written = 0u64;
    let mut first_error: Option<String> = None;
    loop {
        let closed = tokio::select! {
            received = rx.recv() => match received {
                Some(record) => {
                    if batch.is_empty() {
                        deadline = Instant::now() + BATCH_WAIT;
                    }
                    batch.push(record);
                    false
                }
                None => true,
            },
            _ = sleep_until(deadline), if !batch.is_empty() => false,
        };
        let due = closed || batch.len() >= BATCH_RECORDS || (!batch.is_empty() && Instant::now() >= deadline);
        if due && !batch.is_empty() {
            let records = complete_batch(std::mem::take(&mut batch)).await;
            match write_batch(&store, &records).await {
                Ok(n) => written += n,
                Err(e) => {
                    tracing::error!(error = %e, records = records.len(), "storing request records failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        if closed {
            return match first_error {
                None => Ok(written),
                Some(e) => Err(e),
            };
        }
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

async fn write_batch(store: &DynStore, batch: &[RequestRecord]) -> Result<u64, String> {
    let mut last = String::new();
    for attempt in 0..WRITE_TRIES {
        if attempt > 0 {
            sleep(Duration::from_millis(200 << attempt)).await;
        }
        match store.append_request_records(batch).await {
            Ok(n) => return Ok(n),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!(
        "{} records not stored after {WRITE_TRIES} tries: {last}",
        batch.len()
    ))
}
