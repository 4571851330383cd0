//! Executing stored runs. The `Runner` (here) queues runs under the caps (`admission`) and
//! hands each admitted run to the `executor`, which sends it per candidate: the staged
//! `rollout`, warm-ups and every load level through the candidate's request `pool`; a `soak`
//! instead when the run is one. Records reach the store through the `writer`; the `harness`
//! clock says whether bakeoff itself kept up; the `llm_judge` pass grades outputs after all
//! measured load. Everything a run does executes on the measurement `runtime`, apart from
//! the threads that serve pages.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

use crate::domain::run::RunStatus;
use crate::store::DynStore;

pub mod admission;
pub mod executor;
pub mod harness;
pub mod llm_judge;
pub mod pool;
pub mod rollout;
pub mod runtime;
pub mod soak;
pub mod spill;
pub mod writer;

use crate::engine::cancel::Cancel;
use admission::{Blocker, Caps, Decision, Entry};

/// Executes stored runs in the background and reports live progress. Runs are admitted under
/// [`Caps`]: at most `max_runs` execute at once and at most `per_candidate` send requests to
/// one candidate; the others wait, `queued`, first come first served (see `admission`).
#[derive(Clone)]
pub struct Runner {
    store: DynStore,
    caps: Caps,
    /// Where each run's records writer spills and when it pauses the run.
    writer: writer::WriterSettings,
    state: Arc<Mutex<State>>,
    /// Told when a run ends (the verdict worker looks for runs to assess).
    run_ended: Arc<Notify>,
    /// Told when the last executing run gives up its slot.
    idle: Arc<Notify>,
    /// Run after a run's execution ends, before it gives up its slot (see [`Runner::on_end`]).
    on_end: Arc<std::sync::OnceLock<RunEndHook>>,
}

/// What the runner calls with a run's id once its execution has ended (whatever its status).
pub type RunEndHook = Arc<dyn Fn(i64) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// Everything this runner handles now.
#[derive(Default)]
struct State {
    /// Every run handled, waiting or executing.
    active: HashMap<i64, ActiveRun>,
    /// Runs holding a slot, in start order.
    executing: Vec<Slot>,
    /// Runs waiting for a slot, by run id (creation order; a restart keeps each run's place).
    waiting: Vec<Slot>,
    /// Candidates an endpoint probe is checking now, one entry per probe.
    probing: Vec<i64>,
}

/// A run being executed (or waiting to be) by this process.
struct ActiveRun {
    cancel: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

/// A run in the queue or holding a slot.
struct Slot {
    entry: Entry,
    /// Told when the run may start (waiting runs only).
    admit: Option<oneshot::Sender<()>>,
    /// Why it waits now (waiting runs only).
    blocker: Option<Blocker>,
    /// Whether a wait was written to its event log.
    logged: bool,
    since: Instant,
}

/// The queue as pages show it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueView {
    pub caps: Caps,
    /// Runs executing now: (run id, candidate names), in start order.
    pub executing: Vec<(i64, Vec<String>)>,
    /// Runs waiting: (run id, why), in the order they will start.
    pub waiting: Vec<(i64, String)>,
}

/// How the wait for a slot ended.
enum Admission {
    Go,
    Cancelled,
    /// The run no longer exists or has already ended: nothing to do.
    Gone,
}

impl Runner {
    /// A runner with the default caps (4 runs at once, 1 per candidate).
    pub fn new(store: DynStore) -> Self {
        Self::with_caps(store, Caps::default())
    }

    pub fn with_caps(store: DynStore, caps: Caps) -> Self {
        Runner {
            store,
            caps: Caps {
                max_runs: caps.max_runs.max(1),
                per_candidate: caps.per_candidate.max(1),
            },
            writer: writer::WriterSettings::default(),
            state: Arc::new(Mutex::new(State::default())),
            run_ended: Arc::new(Notify::new()),
            idle: Arc::new(Notify::new()),
            on_end: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// Sets the step run after each run's execution ends (and after a resumed one ends): serve
    /// stores the run's page summaries there, so no page computes them from every record. It
    /// runs while the run still holds its slot, so it never takes CPU from a measurement.
    /// Only the first call counts.
    pub fn on_end(&self, hook: RunEndHook) {
        let _ = self.on_end.set(hook);
    }

    /// This runner with the records writer's spill directory and pause limit (serve and
    /// `run start` set them from the database URL; by default records wait in memory).
    pub fn with_writer(mut self, settings: writer::WriterSettings) -> Self {
        self.writer = settings;
        self
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Queues a stored (queued) run and returns at once; it starts executing in the
    /// background as soon as the caps allow. Starting a run that this runner already handles
    /// does nothing; a finished run is left as is.
    pub fn start(&self, run_id: i64) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        let (admit_tx, admit_rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if st.active.contains_key(&run_id) {
                return;
            }
            st.active.insert(
                run_id,
                ActiveRun {
                    cancel: cancel_tx,
                    done: done_rx,
                },
            );
            // Placed now, before its candidates are read, so runs started together (a restart)
            // keep their order whatever order their reads finish in.
            let at = st.waiting.partition_point(|s| s.entry.run_id < run_id);
            st.waiting.insert(
                at,
                Slot {
                    entry: Entry {
                        run_id,
                        candidates: None,
                    },
                    admit: Some(admit_tx),
                    blocker: None,
                    logged: false,
                    since: Instant::now(),
                },
            );
        }
        let runner = self.clone();
        // On the measurement runtime: the run's clocks never share a thread with a page.
        runtime::handle().spawn(async move {
            let mut cancel = Cancel::new(cancel_rx);
            match runner.admit(run_id, admit_rx, &mut cancel).await {
                Admission::Go => {
                    runner.execute(run_id, cancel).await;
                    if let Some(hook) = runner.on_end.get() {
                        hook(run_id).await;
                    }
                    runner.run_ended.notify_one();
                }
                Admission::Cancelled => {
                    tracing::info!(run_id, "run cancelled while waiting for a slot");
                    let ended = runner.store.set_run_status(run_id, RunStatus::Cancelled, None).await;
                    if let Err(e) = ended {
                        tracing::error!(run_id, error = %e, "could not mark the run cancelled");
                    }
                    let _ = runner
                        .store
                        .append_run_event(run_id, "warn", "cancelled while waiting for a slot")
                        .await;
                }
                Admission::Gone => {}
            }
            runner.release(run_id).await;
            runner.lock().active.remove(&run_id);
            let _ = done_tx.send(true);
        });
    }

    /// Reads the run's candidates, takes its place in the queue and waits for a slot.
    async fn admit(&self, run_id: i64, admitted: oneshot::Receiver<()>, cancel: &mut Cancel) -> Admission {
        let (candidates, status) = match self.store.get_run(run_id).await {
            Ok(Some(run)) if !run.status.is_terminal() => {
                let known = self.store.list_candidates().await.unwrap_or_default();
                let candidates = run
                    .candidate_ids
                    .iter()
                    .map(|&id| {
                        let name = known
                            .iter()
                            .find(|c| c.id == id)
                            .map(|c| c.spec.name.clone())
                            .unwrap_or_else(|| format!("candidate #{id}"));
                        (id, name)
                    })
                    .collect();
                (candidates, run.status)
            }
            Ok(_) => return Admission::Gone,
            // The executor reads the run again and fails it with the reason.
            Err(e) => {
                tracing::warn!(run_id, error = %e, "reading the run to queue it failed");
                (Vec::new(), RunStatus::Queued)
            }
        };
        let (events, waits) = {
            let mut st = self.lock();
            if let Some(slot) = st.waiting.iter_mut().find(|s| s.entry.run_id == run_id) {
                slot.entry.candidates = Some(candidates);
            }
            let events = self.pump(&mut st);
            (events, st.waiting.iter().any(|s| s.entry.run_id == run_id))
        };
        self.log(events).await;
        if waits && status == RunStatus::Running {
            // A resumed run waits like any other: it shows as queued until it has a slot.
            if let Err(e) = self.store.set_run_status(run_id, RunStatus::Queued, None).await {
                tracing::warn!(run_id, error = %e, "could not mark the waiting run queued");
            }
        }
        tokio::select! {
            biased;
            _ = admitted => {}
            _ = cancel.cancelled() => return Admission::Cancelled,
        }
        let waited = {
            let st = self.lock();
            st.executing
                .iter()
                .find(|s| s.entry.run_id == run_id)
                .filter(|s| s.logged)
                .map(|s| s.since.elapsed())
        };
        if let Some(waited) = waited {
            let message = format!("a slot is free after {:.1} s of waiting", waited.as_secs_f64());
            let _ = self.store.append_run_event(run_id, "info", &message).await;
        }
        Admission::Go
    }

    /// Executes an admitted run to its end; a failure or panic ends with the run marked failed.
    async fn execute(&self, run_id: i64, cancel: Cancel) {
        // A separate task, so even a panic ends with the run marked failed.
        let store = self.store.clone();
        let outcome = tokio::spawn(executor::execute_with(store, run_id, cancel, self.writer.clone())).await;
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
            if let Err(e) = self
                .store
                .set_run_status(run_id, RunStatus::Failed, Some(&message))
                .await
            {
                tracing::error!(run_id, error = %e, "could not mark the run failed");
            }
            let _ = self
                .store
                .append_run_event(run_id, "error", &format!("failed: {message}"))
                .await;
        }
    }

    /// Gives up the run's slot (or its place in the queue) and starts whoever may start now.
    async fn release(&self, run_id: i64) {
        let events = {
            let mut st = self.lock();
            st.executing.retain(|s| s.entry.run_id != run_id);
            st.waiting.retain(|s| s.entry.run_id != run_id);
            let events = self.pump(&mut st);
            if st.executing.is_empty() {
                self.idle.notify_waiters();
            }
            events
        };
        self.log(events).await;
    }

    /// Starts every waiting run the caps allow now and notes why the others wait. Returns the
    /// event-log lines to write: (run id, level, message).
    fn pump(&self, st: &mut State) -> Vec<(i64, &'static str, String)> {
        let executing: Vec<Entry> = st.executing.iter().map(|s| s.entry.clone()).collect();
        let waiting: Vec<Entry> = st.waiting.iter().map(|s| s.entry.clone()).collect();
        let decisions = admission::plan(self.caps, &executing, &waiting, &st.probing);
        let mut events = Vec::new();
        let mut still = Vec::with_capacity(st.waiting.len());
        for (mut slot, decision) in std::mem::take(&mut st.waiting).into_iter().zip(decisions) {
            match decision {
                Decision::Start => {
                    // Only when the per-candidate cap was raised can runs share a candidate:
                    // both say so, since neither run's speed figures stand alone.
                    for (candidate, name) in slot.entry.candidates.iter().flatten() {
                        for other in &st.executing {
                            if other.entry.candidates.iter().flatten().any(|(c, _)| c == candidate) {
                                let (a, b) = (slot.entry.run_id, other.entry.run_id);
                                let note = |x: i64| {
                                    format!(
                                        "sharing {name} with run #{x} (up to {} runs per candidate): the speed \
                                         figures of both runs are affected",
                                        self.caps.per_candidate
                                    )
                                };
                                events.push((a, "warn", note(b)));
                                events.push((b, "warn", note(a)));
                            }
                        }
                    }
                    if let Some(tx) = slot.admit.take() {
                        let _ = tx.send(());
                    }
                    slot.blocker = None;
                    st.executing.push(slot);
                }
                Decision::Wait(blocker) => {
                    if slot.blocker.as_ref() != Some(&blocker) {
                        if blocker.is_worth_logging() {
                            events.push((slot.entry.run_id, "info", blocker.describe()));
                            slot.logged = true;
                        }
                        slot.blocker = Some(blocker);
                    }
                    still.push(slot);
                }
            }
        }
        st.waiting = still;
        events
    }

    async fn log(&self, events: Vec<(i64, &'static str, String)>) {
        for (run_id, level, message) in events {
            if let Err(e) = self.store.append_run_event(run_id, level, &message).await {
                tracing::warn!(run_id, error = %e, "could not write a queue event");
            }
        }
    }

    /// Asks a run this runner handles to stop: a waiting run leaves the queue, an executing one
    /// abandons its in-flight requests (not recorded), keeps its stored records, and ends
    /// `cancelled`. False if this runner does not handle it.
    pub fn cancel(&self, run_id: i64) -> bool {
        match self.lock().active.get(&run_id) {
            Some(run) => run.cancel.send(true).is_ok(),
            None => false,
        }
    }

    /// Whether this runner handles `run_id` now (executing it or waiting to).
    pub fn is_active(&self, run_id: i64) -> bool {
        self.lock().active.contains_key(&run_id)
    }

    /// Whether `run_id` holds a slot (is executing) now.
    pub fn is_executing(&self, run_id: i64) -> bool {
        self.lock().executing.iter().any(|s| s.entry.run_id == run_id)
    }

    /// Why `run_id` waits, e.g. "waiting: run #12 is measuring swift-7b"; None unless waiting.
    pub fn waiting_reason(&self, run_id: i64) -> Option<String> {
        let st = self.lock();
        let slot = st.waiting.iter().find(|s| s.entry.run_id == run_id)?;
        Some(
            slot.blocker
                .as_ref()
                .map(Blocker::describe)
                .unwrap_or_else(|| Blocker::Preparing.describe()),
        )
    }

    /// The caps, the executing runs and the queue, for pages.
    pub fn queue(&self) -> QueueView {
        let st = self.lock();
        let names = |e: &Entry| -> Vec<String> { e.candidates.iter().flatten().map(|(_, n)| n.clone()).collect() };
        QueueView {
            caps: self.caps,
            executing: st.executing.iter().map(|s| (s.entry.run_id, names(&s.entry))).collect(),
            waiting: st
                .waiting
                .iter()
                .map(|s| {
                    let why = s.blocker.as_ref().unwrap_or(&Blocker::Preparing).describe();
                    (s.entry.run_id, why)
                })
                .collect(),
        }
    }

    /// Waits until this runner is no longer handling `run_id` (at once if it is not).
    pub async fn wait(&self, run_id: i64) {
        let done = self.lock().active.get(&run_id).map(|r| r.done.clone());
        if let Some(mut done) = done {
            let _ = done.wait_for(|d| *d).await;
        }
    }

    /// Takes `candidate_id` for an endpoint probe, so no run starts measuring it until the
    /// returned guard is dropped (runs due meanwhile wait, saying why). Refused with the id of
    /// the executing run that measures it now: the probe's requests would distort that run's
    /// figures and its load would distort the probe's.
    pub fn begin_probe(&self, candidate_id: i64) -> Result<ProbeGuard, i64> {
        let mut st = self.lock();
        if let Some(slot) = st
            .executing
            .iter()
            .find(|s| s.entry.candidates.iter().flatten().any(|(c, _)| *c == candidate_id))
        {
            return Err(slot.entry.run_id);
        }
        st.probing.push(candidate_id);
        Ok(ProbeGuard {
            runner: self.clone(),
            candidate_id,
        })
    }

    /// Notified each time a run ends (a run ending while nobody waits wakes the next waiter).
    pub fn run_ended(&self) -> &Notify {
        &self.run_ended
    }

    /// Resolves when no run is executing.
    pub async fn until_idle(&self) {
        loop {
            let idle = self.idle.clone();
            let notified = idle.notified();
            if self.lock().executing.is_empty() {
                return;
            }
            // Bounded, in case a notification raced the check.
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Holds a candidate for an endpoint probe (see [`Runner::begin_probe`]); dropping it lets
/// the runs waiting for the candidate start.
pub struct ProbeGuard {
    runner: Runner,
    candidate_id: i64,
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        let events = {
            let mut st = self.runner.lock();
            if let Some(at) = st.probing.iter().position(|c| *c == self.candidate_id) {
                st.probing.remove(at);
            }
            self.runner.pump(&mut st)
        };
        if !events.is_empty() {
            let runner = self.runner.clone();
            runtime::handle().spawn(async move { runner.log(events).await });
        }
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
