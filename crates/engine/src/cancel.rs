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

    /// A handle cancelled when this one is or when `also` turns true (e.g. the records
    /// writer pausing the run): the work stops the same way for either.
    pub fn or_when(&self, mut also: watch::Receiver<bool>) -> Cancel {
        let (tx, rx) = watch::channel(self.is_cancelled() || *also.borrow());
        let mut this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = this.cancelled() => {}
                told = async { also.wait_for(|on| *on).await.is_ok() } => if !told { this.cancelled().await },
                // Nobody holds the combined handle any more.
                _ = tx.closed() => return,
            }
            let _ = tx.send(true);
        });
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
