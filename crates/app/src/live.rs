//! What an unfinished run's views compute from all its records (the run page's parts, the
//! scorecard's summaries, the archive's figures, the cases page's index), shared by every view
//! of the run in this process: one view at a time computes; views arriving meanwhile take the
//! last value (or, when there is none yet, wait for that computation) instead of computing it
//! again, so however many watch a run, at most one computation of it runs; a value that took a
//! while is reused for a few times as long (at most 30 s), which bounds how often it is
//! recomputed and how far its figures lag. The app holds one `Live` per kind of value
//! (`state::LiveViews`), so two apps over two stores (the tests run many) share nothing.
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::run::Run;
use crate::runs::summaries_are_stored;

/// A value that took at least this long is reused: smaller runs are always recomputed.
const REUSE_FROM: Duration = Duration::from_millis(100);
/// For this many times its computing time…
const REUSE_FACTOR: u32 = 4;
/// …but never longer than this: the figures lag by at most that.
const REUSE_MAX: Duration = Duration::from_secs(30);

struct Last<T> {
    at: Instant,
    took: Duration,
    value: T,
}

impl<T> Last<T> {
    fn reusable(&self) -> bool {
        self.took >= REUSE_FROM && self.at.elapsed() < (self.took * REUSE_FACTOR).min(REUSE_MAX)
    }
}

/// A run's last value and the gate its recomputation passes.
struct LiveRun<T> {
    /// Held while the value is recomputed.
    gate: Arc<tokio::sync::Mutex<()>>,
    last: Option<Last<T>>,
}

impl<T> Default for LiveRun<T> {
    fn default() -> Self {
        LiveRun {
            gate: Arc::default(),
            last: None,
        }
    }
}

/// The run's id (a `Live` belongs to one store's views: `LiveViews`).
type Key = i64;

/// One kind of value of unfinished runs.
pub struct Live<T> {
    runs: Mutex<BTreeMap<Key, LiveRun<T>>>,
}

impl<T: Clone> Live<T> {
    pub const fn new() -> Self {
        Live {
            runs: Mutex::new(BTreeMap::new()),
        }
    }

    fn last(&self, key: Key, keep: impl Fn(&Last<T>) -> bool) -> Option<T> {
        let runs = self.runs.lock().ok()?;
        let last = runs.get(&key)?.last.as_ref()?;
        keep(last).then(|| last.value.clone())
    }

    /// `compute`'s value for an ended run (its summaries are stored once computed, so it is
    /// computed once); an unfinished run's shared by its views as [`Live::get`] shares it.
    pub async fn for_run<E, F>(&self, run: &Run, compute: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        if summaries_are_stored(run) {
            compute.await
        } else {
            self.get(run.id, compute).await
        }
    }

    /// Run `run_id`'s value: the last one while it may be reused or another view is computing
    /// a newer one, else `compute`'s.
    pub async fn get<E, F>(&self, key: Key, compute: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        if let Some(value) = self.last(key, Last::reusable) {
            return Ok(value);
        }
        let gate = match self.runs.lock() {
            Ok(mut runs) => runs.entry(key).or_default().gate.clone(),
            Err(_) => Arc::default(),
        };
        let asked = Instant::now();
        let _computing = match gate.clone().try_lock_owned() {
            Ok(computing) => computing,
            Err(_) => {
                if let Some(value) = self.last(key, |_| true) {
                    return Ok(value);
                }
                gate.lock_owned().await
            }
        };
        // Computed while this view waited for the gate: that one.
        if let Some(value) = self.last(key, |last| last.at >= asked) {
            return Ok(value);
        }
        let started = Instant::now();
        let value = compute.await?;
        if let Ok(mut runs) = self.runs.lock() {
            runs.entry(key).or_default().last = Some(Last {
                at: Instant::now(),
                took: started.elapsed(),
                value: value.clone(),
            });
            // Forget runs nobody watched for a while (ended or deleted),
            // unless a view is computing them.
            runs.retain(|_, run| {
                Arc::strong_count(&run.gate) > 1 || run.last.as_ref().is_some_and(|l| l.at.elapsed() < REUSE_MAX * 2)
            });
        }
        Ok(value)
    }
}

impl<T: Clone> Default for Live<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn counted(computed: &AtomicUsize, wait: Duration) -> Result<usize, ()> {
        tokio::time::sleep(wait).await;
        Ok(computed.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[tokio::test]
    async fn views_arriving_while_a_value_is_computed_share_it() {
        let live = Live::new();
        let computed = AtomicUsize::new(0);
        let views = (0..8).map(|_| live.get(7, counted(&computed, Duration::from_millis(50))));
        let values = futures_util::future::join_all(views).await;
        assert_eq!(computed.load(Ordering::SeqCst), 1);
        assert!(values.iter().all(|v| *v == Ok(1)), "{values:?}");
        // Another run's value is its own.
        assert_eq!(live.get(8, counted(&computed, Duration::ZERO)).await, Ok(2));
    }

    #[tokio::test]
    async fn a_quick_value_is_computed_again_and_an_error_is_not_kept() {
        let live = Live::new();
        let computed = AtomicUsize::new(0);
        assert_eq!(live.get(7, counted(&computed, Duration::ZERO)).await, Ok(1));
        assert_eq!(live.get(7, counted(&computed, Duration::ZERO)).await, Ok(2));
        assert_eq!(live.get(7, async { Err::<usize, ()>(()) }).await, Err(()));
        assert_eq!(live.get(7, counted(&computed, Duration::ZERO)).await, Ok(3));
    }
}
