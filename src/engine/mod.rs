//! The measurement engine: providers, the streaming client with its timings, load shapes,
//! and the run executor. Knows nothing of pages; talks to the world through `store`.
use crate::store::DynStore;

/// Executes stored runs in the background and reports live progress.
#[derive(Clone)]
pub struct Runner {
    #[allow(dead_code)]
    store: DynStore,
}

impl Runner {
    pub fn new(store: DynStore) -> Self {
        Runner { store }
    }

    /// Starts executing a stored (queued) run in the background; returns at once.
    pub fn start(&self, _run_id: i64) {
        todo!("engine")
    }
}

impl Runner {
    /// Restarts every run left queued or running (after a crash or restart); returns how many.
    pub async fn resume_unfinished(&self) -> anyhow::Result<usize> {
        todo!("engine")
    }
}
