//! The measurement engine: providers, the streaming client with its timings, load shapes,
//! and the run executor. Knows nothing of pages; talks to the world through `store`.
//!
//! - `provider` (+ `openai`, `anthropic`): request building and stream/response decoding
//! - `sse`: the event-stream parser
//! - `client`: one pooled HTTP client per candidate; sends and measures one request
//! - `error`: failure classification (`ErrorClass`) and the engine's own error
//! - `executor`: runs a stored run (warm-ups, closed-loop pool, retries, grading, resume)
//! - `writer`: batches records into the store off the hot path
//! - `server_tokenizer`: counts output tokens with a candidate's own tokenize endpoint once its
//!   measured load has ended
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::domain::run::RunStatus;
use crate::store::DynStore;

pub mod anthropic;
pub mod calibrate;
pub mod client;
pub mod error;
pub mod executor;
pub mod harness;
pub mod measure;
pub mod openai;
pub mod probes;
pub mod provider;
pub mod rollout;
pub mod server_tokenizer;
pub mod soak;
pub mod sse;
pub mod tokenizer;
pub mod writer;

pub use client::{CandidateClient, Exchange, RecordIdentity, Timeouts};
pub use error::{EngineError, Failure};
pub use executor::Cancel;

/// Executes stored runs in the background and reports live progress.
#[derive(Clone)]
pub struct Runner {
    store: DynStore,
    active: Arc<Mutex<HashMap<i64, ActiveRun>>>,
}

/// A run being executed by this process.
struct ActiveRun {
    cancel: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

impl Runner {
    pub fn new(store: DynStore) -> Self {
        Runner {
            store,
            active: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Starts executing a stored (queued) run in the background; returns at once. Starting a
    /// run that this runner is already executing does nothing; a finished run is left as is.
    pub fn start(&self, run_id: i64) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        {
            let mut active = self.lock();
            if active.contains_key(&run_id) {
                return;
            }
            active.insert(
                run_id,
                ActiveRun {
                    cancel: cancel_tx,
                    done: done_rx,
                },
            );
        }
        let runner = self.clone();
        tokio::spawn(async move {
            // A separate task, so even a panic ends with the run marked failed.
            let store = runner.store.clone();
            let outcome = tokio::spawn(executor::execute(store, run_id, Cancel::new(cancel_rx))).await;
            let failure = match outcome {
                Ok(Ok(status)) => {
                    tracing::info!(run_id, status = status.as_str(), "run ended");
                    None
                }
                Ok(Err(e)) => Some(e.to_string()),
                Err(join) => Some(format!("internal error: the run task ended abnormally ({join})")),
            };
            if let Some(message) = failure {
                tracing::error!(run_id, error = %message, "run failed");
                if let Err(e) = runner
                    .store
                    .set_run_status(run_id, RunStatus::Failed, Some(&message))
                    .await
                {
                    tracing::error!(run_id, error = %e, "could not mark the run failed");
                }
                let _ = runner
                    .store
                    .append_run_event(run_id, "error", &format!("failed: {message}"))
                    .await;
            }
            runner.lock().remove(&run_id);
            let _ = done_tx.send(true);
        });
    }

    /// Asks a run this runner is executing to stop; in-flight requests are abandoned (not
    /// recorded), stored records are kept, and the run ends `cancelled`. False if not running here.
    pub fn cancel(&self, run_id: i64) -> bool {
        match self.lock().get(&run_id) {
            Some(run) => run.cancel.send(true).is_ok(),
            None => false,
        }
    }

    /// Whether this runner is executing `run_id` now.
    pub fn is_active(&self, run_id: i64) -> bool {
        self.lock().contains_key(&run_id)
    }

    /// Waits until this runner is no longer executing `run_id` (at once if it is not).
    pub async fn wait(&self, run_id: i64) {
        let done = self.lock().get(&run_id).map(|r| r.done.clone());
        if let Some(mut done) = done {
            let _ = done.wait_for(|d| *d).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, ActiveRun>> {
        self.active.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Runner {
    /// Restarts every run left queued or running (after a crash or restart); returns how many.
    pub async fn resume_unfinished(&self) -> anyhow::Result<usize> {
        let ids = self.store.unfinished_runs().await?;
        for &id in &ids {
            self.start(id);
        }
        Ok(ids.len())
    }
}
