//! Stopping a run, a soak or a judge pass from outside: the runner cancels, the work checks.
use tokio::sync::watch;

/// Asks a running executor to stop (in-flight requests are dropped, unrecorded).
#[derive(Clone)]
pub struct Cancel(watch::Receiver<bool>);

impl Cancel {
    pub fn new(rx: watch::Receiver<bool>) -> Self {
        Cancel(rx)
    }

    /// A handle that is never cancelled (terminal commands).
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(false);
        // Keep the sender alive for the process's life: a dropped sender reads as "never".
        std::mem::forget(tx);
        Cancel(rx)
    }

    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once cancelled (never if the sender is gone without cancelling).
    pub async fn cancelled(&mut self) {
        if self.0.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
