//! Records go from the request workers to the store through this writer, in batches, so a slow
//! database never delays a measured request: workers only push onto an unbounded channel.
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};

use super::error::EngineError;
use crate::domain::run::RequestRecord;
use crate::store::DynStore;

/// A batch is written when it holds this many records…
pub const BATCH_RECORDS: usize = 50;
/// …or when its oldest record has waited this long.
pub const BATCH_WAIT: Duration = Duration::from_millis(250);
/// Tries per batch before the writer gives up on it (the run then fails and can be resumed).
const WRITE_TRIES: u32 = 3;

/// Where workers hand finished records.
#[derive(Clone)]
pub struct RecordSender(mpsc::UnboundedSender<RequestRecord>);

impl RecordSender {
    /// Never waits. Returns false only when the writer has already stopped.
    pub fn send(&self, record: RequestRecord) -> bool {
        self.0.send(record).is_ok()
    }
}

/// The background writer task.
pub struct RecordWriter {
    sender: RecordSender,
    task: JoinHandle<Result<u64, String>>,
}

impl RecordWriter {
    pub fn spawn(store: DynStore) -> Self {
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

async fn write_loop(store: DynStore, mut rx: mpsc::UnboundedReceiver<RequestRecord>) -> Result<u64, String> {
    let mut batch: Vec<RequestRecord> = Vec::with_capacity(BATCH_RECORDS);
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
            match write_batch(&store, &batch).await {
                Ok(n) => written += n,
                Err(e) => {
                    tracing::error!(error = %e, records = batch.len(), "storing request records failed");
                    first_error.get_or_insert(e);
                }
            }
            batch.clear();
        }
        if closed {
            return match first_error {
                None => Ok(written),
                Some(e) => Err(e),
            };
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
