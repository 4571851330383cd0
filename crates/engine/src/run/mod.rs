//! Executing stored runs. The `Runner` (here) is a process's measurement worker: it takes the
//! units of admitted runs from the database under leases (`domain::workers`: the caps hold
//! across every worker, a unit whose worker died is taken over) and hands each to the
//! `executor` — one candidate's staged `rollout`, warm-ups and every load level through its
//! request `pool` (a `soak` instead when the run is one), then the run's closing step. Records
//! reach the store through the `writer`; the `harness` clock says whether bakeoff itself kept
//! up; the `llm_judge` pass grades outputs after all measured load. Everything a run does
//! executes on the measurement `runtime`, apart from the threads that serve pages.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::domain::run::RunStatus;
use crate::domain::workers::{Claim, Claimant, QueueSnapshot, UnitStatus, WorkerStatus};
use crate::store::DynStore;

/// The admission plan is pure and lives in `domain` (the database claim uses it too).
pub use crate::domain::admission;
pub mod capacity;
pub mod conversation;
pub mod executor;
pub mod harness;
pub mod llm_judge;
pub mod pairwise_judge;
pub mod pool;
pub mod precise_wait;
pub mod replay_level;
pub mod rollout;
pub mod runtime;
pub mod soak;
pub mod spill;
pub mod telemetry;
pub mod writer;

use crate::cancel::Cancel;
use admission::{Blocker, Caps};
use executor::{UnitContext, UnitEnd};

/// How this process's worker shows itself to the others and how long its leases last.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerIdentity {
    /// Unique among live workers; stable across a restart, so a restarted worker takes back
    /// its own units at once instead of waiting for their leases to run out.
    pub name: String,
    /// What it carries (its network, its host): candidates that need labels go to workers
    /// with all of them.
    pub labels: Vec<String>,
    /// Units it measures at once, at most.
    pub capacity: usize,
    /// `serve`'s own worker (shown as such on the workers page).
    pub embedded: bool,
    /// A lease not renewed for this long is lost: another worker may take the unit over.
    pub lease: Duration,
    /// Takes units of every run (serve, `bakeoff worker`), or only of the runs this process
    /// was asked to start (`bakeoff run start`, tests).
    pub claims_any: bool,
    /// Takes no unit at all (`serve --no-worker`): it still shows the queue.
    pub measures: bool,
}

impl WorkerIdentity {
    /// A worker for this process alone: a unique name, no labels, room for `capacity` units,
    /// leases of 10 s, only the runs it is asked to start.
    pub fn local(capacity: usize) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        WorkerIdentity {
            name: format!(
                "{}#{}.{}",
                harness::host_name(),
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            labels: Vec::new(),
            capacity: capacity.max(1),
            embedded: true,
            lease: DEFAULT_LEASE,
            claims_any: false,
            measures: true,
        }
    }

    /// How often it beats: five times per lease, so a lease survives four lost beats.
    pub fn heartbeat(&self) -> Duration {
        (self.lease / 5).max(Duration::from_millis(100))
    }
}

/// How long a lease lasts unless renewed.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// How long the loop lets a burst of starts land before handing them to the workers.
const START_BURST: Duration = Duration::from_millis(20);

/// Longest one claim (or one look at ended runs) may take before the loop moves on.
const STEP_BOUND: Duration = Duration::from_secs(5);

/// How often the worker looks for work when nothing wakes it (another process's run may have
/// ended, a lease run out).
const POLL: Duration = Duration::from_millis(500);

/// Executes stored runs in the background and reports live progress, as this process's
/// worker. Runs are admitted under [`Caps`] across every worker sharing the database: at most
/// `max_runs` execute at once and at most `per_candidate` send requests to one candidate; the
/// others wait, `queued`, first come first served (see `admission`).
#[derive(Clone)]
pub struct Runner {
    shared: Arc<Shared>,
}

/// What the runner's handles and its worker loop share.
struct Shared {
    store: DynStore,
    /// The caps when the database holds none (`workers.*` team settings).
    caps: Caps,
    /// Whether `caps` were set by the process (flags): written to the database on start so
    /// every worker applies them.
    publish_caps: bool,
    /// Where each run's records writer spills and when it pauses the run.
    writer: writer::WriterSettings,
    identity: WorkerIdentity,
    state: Mutex<State>,
    /// Wakes the worker loop (a run started, a unit ended, a probe let go).
    wake: Arc<Notify>,
    /// Told when a run ends (the verdict worker looks for runs to assess).
    run_ended: Notify,
    /// Told when the last unit this worker executes ends.
    idle: Notify,
    /// Run after a run's execution ends, before its slot is given up (see [`Runner::on_end`]).
    on_end: std::sync::OnceLock<RunEndHook>,
    looping: AtomicBool,
}

/// What the runner calls with a run's id once its execution has ended (whatever its status).
pub type RunEndHook = Arc<dyn Fn(i64) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

#[derive(Default)]
struct State {
    /// Runs this process was asked to start, until they end (or pause).
    active: HashMap<i64, ActiveRun>,
    /// Units this worker executes now.
    executing: Vec<Held>,
    /// Candidates an endpoint probe is checking now, one entry per probe.
    probing: Vec<i64>,
    /// The queue as the last claim saw it.
    queue: QueueSnapshot,
    /// Whether a claim has been made since the runner started (before it, runs are "being
    /// prepared").
    looked: bool,
}

/// A run this process was asked to start.
struct ActiveRun {
    done: watch::Sender<bool>,
    /// Why it waits, as last written to its event log, and since when it waits.
    logged: Option<Blocker>,
    since: Instant,
    /// Whether it was seen admitted (its wait, if logged, has been closed in the log).
    admitted: bool,
    /// Whether it was handed to the workers (a paused run queued again): until then it is
    /// neither queued in the database nor over.
    ready: bool,
}

/// A unit this worker executes.
struct Held {
    run_id: i64,
    seq: u32,
    candidate_id: Option<i64>,
    cancel: watch::Sender<bool>,
    /// Told when its lease is lost (another worker took the unit over).
    lost: watch::Sender<bool>,
    /// Its end is being written: a beat that no longer sees its lease is not a loss.
    ending: bool,
}

/// The queue as pages show it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueView {
    pub caps: Caps,
    /// Runs executing now (on any worker): (run id, candidate names), by run id.
    pub executing: Vec<(i64, Vec<String>)>,
    /// Runs waiting: (run id, why), in the order they will start.
    pub waiting: Vec<(i64, String)>,
}

impl Runner {
    /// A runner with the default caps (4 runs at once, 1 per candidate) that measures the runs
    /// it is asked to start.
    pub fn new(store: DynStore) -> Self {
        Self::build(store, Caps::default(), false)
    }

    /// A runner whose caps are written to the database on start, for every worker.
    pub fn with_caps(store: DynStore, caps: Caps) -> Self {
        Self::build(store, caps, true)
    }

    fn build(store: DynStore, caps: Caps, publish_caps: bool) -> Self {
        let caps = Caps {
            max_runs: caps.max_runs.max(1),
            per_candidate: caps.per_candidate.max(1),
        };
        Runner {
            shared: Arc::new(Shared {
                store,
                caps,
                publish_caps,
                writer: writer::WriterSettings::default(),
                identity: WorkerIdentity::local(caps.max_runs),
                state: Mutex::new(State::default()),
                wake: Arc::new(Notify::new()),
                run_ended: Notify::new(),
                idle: Notify::new(),
                on_end: std::sync::OnceLock::new(),
                looping: AtomicBool::new(false),
            }),
        }
    }

    /// Mutable settings, before the runner is shared or started.
    fn configure(&mut self) -> &mut Shared {
        Arc::get_mut(&mut self.shared).expect("a runner is configured before it is cloned or started")
    }

    /// Sets the step run after each run's execution ends (and after a resumed one ends): serve
    /// stores the run's page summaries there, so no page computes them from every record. It
    /// runs while the run still holds its slot, so no run of the same candidate is measured
    /// meanwhile; runs of other candidates may be, so serve computes it on its page threads, at
    /// a lower priority than this runtime's.
    /// Only the first call counts.
    pub fn on_end(&self, hook: RunEndHook) {
        let _ = self.shared.on_end.set(hook);
    }

    /// This runner with the records writer's spill directory and pause limit (serve and
    /// `run start` set them from the database URL; by default records wait in memory).
    pub fn with_writer(mut self, settings: writer::WriterSettings) -> Self {
        self.configure().writer = settings;
        self
    }

    /// This runner as the worker `identity` (serve's embedded worker, `bakeoff worker`).
    pub fn with_identity(mut self, identity: WorkerIdentity) -> Self {
        self.configure().identity = identity;
        self
    }

    /// The caps as the last look at the database found them (the process's own before that).
    pub fn caps(&self) -> Caps {
        let st = self.lock();
        if st.looked { st.queue.caps } else { self.shared.caps }
    }

    pub fn identity(&self) -> &WorkerIdentity {
        &self.shared.identity
    }

    /// Queues a stored run and returns at once; it starts executing in the background as soon
    /// as the caps allow (on this worker, or on another one when this one takes only its own
    /// runs or the run needs labels it lacks). A paused run is queued again. Starting a run
    /// that this runner already handles does nothing; a finished run is left as is.
    pub fn start(&self, run_id: i64) {
        {
            let mut st = self.lock();
            if st.active.contains_key(&run_id) {
                return;
            }
            let (done, _) = watch::channel(false);
            st.active.insert(
                run_id,
                ActiveRun {
                    done,
                    logged: None,
                    since: Instant::now(),
                    admitted: false,
                    ready: false,
                },
            );
        }
        // Handed to the workers by the loop, in the order started: a run started first is
        // queued first.
        self.shared.wake.notify_one();
        self.ensure_looping();
    }

    /// Starts the worker loop (once): it beats, takes units while it has room, and notices
    /// runs that ended. It stops when the last handle of this runner is dropped.
    fn ensure_looping(&self) {
        if self.shared.looping.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let wake = self.shared.wake.clone();
        runtime::handle().spawn(worker_loop(weak, wake));
    }

    /// Asks a run to stop: a waiting run leaves the queue (marked cancelled), one this worker
    /// executes abandons its in-flight requests (not recorded), keeps its stored records, and
    /// ends `cancelled`. False if this runner neither executes nor queues it (another worker
    /// executing it stops once the run is marked cancelled: it checks at every beat).
    pub fn cancel(&self, run_id: i64) -> bool {
        let st = self.lock();
        let mine: Vec<&Held> = st.executing.iter().filter(|h| h.run_id == run_id).collect();
        if !mine.is_empty() {
            for held in mine {
                let _ = held.cancel.send(true);
            }
            return true;
        }
        let waiting = st.active.get(&run_id).is_some_and(|r| !r.admitted)
            && !st.queue.executing.iter().any(|(id, _)| *id == run_id);
        if !waiting {
            return false;
        }
        drop(st);
        let store = self.shared.store.clone();
        let wake = self.shared.wake.clone();
        runtime::handle().spawn(async move {
            tracing::info!(run_id, "run cancelled while waiting for a slot");
            // The event first: whoever sees the run cancelled sees why.
            let _ = store
                .append_run_event(run_id, "warn", "cancelled while waiting for a slot")
                .await;
            if let Err(e) = store.set_run_status(run_id, RunStatus::Cancelled, None).await {
                tracing::error!(run_id, error = %e, "could not mark the run cancelled");
            }
            let _ = store.release_run_slot(run_id).await;
            wake.notify_one();
        });
        true
    }

    /// Whether this runner handles `run_id` now (executing it or waiting for it to end).
    pub fn is_active(&self, run_id: i64) -> bool {
        let st = self.lock();
        st.active.contains_key(&run_id) || st.executing.iter().any(|h| h.run_id == run_id)
    }

    /// Whether `run_id` holds a slot (is executing, on this worker or another) now.
    pub fn is_executing(&self, run_id: i64) -> bool {
        let st = self.lock();
        st.executing.iter().any(|h| h.run_id == run_id) || st.queue.executing.iter().any(|(id, _)| *id == run_id)
    }

    /// Why `run_id` waits, e.g. "waiting: run #12 is measuring swift-7b"; None unless waiting.
    pub fn waiting_reason(&self, run_id: i64) -> Option<String> {
        let st = self.lock();
        if let Some((_, blocker)) = st
            .queue
            .waiting
            .iter()
            .chain(&st.queue.unplaced)
            .find(|(id, _)| *id == run_id)
        {
            return Some(blocker.describe());
        }
        let unseen = st.active.get(&run_id).is_some_and(|r| !r.admitted)
            && !st.queue.executing.iter().any(|(id, _)| *id == run_id)
            && !st.executing.iter().any(|h| h.run_id == run_id);
        unseen.then(|| Blocker::Preparing.describe())
    }

    /// The caps, the executing runs and the queue, for pages.
    pub fn queue(&self) -> QueueView {
        let st = self.lock();
        QueueView {
            caps: if st.looked { st.queue.caps } else { self.shared.caps },
            executing: st
                .queue
                .executing
                .iter()
                .map(|(id, candidates)| (*id, candidates.iter().map(|(_, n)| n.clone()).collect()))
                .collect(),
            waiting: st.queue.waiting.iter().map(|(id, why)| (*id, why.describe())).collect(),
        }
    }

    /// Waits until this runner is no longer handling `run_id` (at once if it is not).
    pub async fn wait(&self, run_id: i64) {
        let done = self.lock().active.get(&run_id).map(|r| r.done.subscribe());
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
        let measuring = st
            .executing
            .iter()
            .find(|h| h.candidate_id == Some(candidate_id))
            .map(|h| h.run_id)
            .or_else(|| {
                st.queue
                    .executing
                    .iter()
                    .find(|(_, candidates)| candidates.iter().any(|(c, _)| *c == candidate_id))
                    .map(|(id, _)| *id)
            });
        if let Some(run_id) = measuring {
            return Err(run_id);
        }
        st.probing.push(candidate_id);
        Ok(ProbeGuard {
            runner: self.clone(),
            candidate_id,
        })
    }

    /// Notified each time a run ends (a run ending while nobody waits wakes the next waiter).
    pub fn run_ended(&self) -> &Notify {
        &self.shared.run_ended
    }

    /// Resolves when this worker executes no unit.
    pub async fn until_idle(&self) {
        loop {
            let notified = self.shared.idle.notified();
            if self.lock().executing.is_empty() {
                return;
            }
            // Bounded, in case a notification raced the check.
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }

    /// Restarts every run left queued, running or paused (after a crash or restart); returns
    /// how many.
    pub async fn resume_unfinished(&self) -> anyhow::Result<usize> {
        let ids = self.shared.store.unfinished_runs().await?;
        for &id in &ids {
            self.start(id);
        }
        // A worker that takes any run looks for work even when there was none to resume.
        self.ensure_looping();
        Ok(ids.len())
    }

    /// Starts the worker loop without starting a run (`bakeoff worker`, `serve`).
    pub fn start_worker(&self) {
        self.ensure_looping();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn log(&self, events: Vec<(i64, &'static str, String)>) {
        for (run_id, level, message) in events {
            if let Err(e) = self.store.append_run_event(run_id, level, &message).await {
                tracing::warn!(run_id, error = %e, "could not write a queue event");
            }
        }
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
        let mut st = self.runner.lock();
        if let Some(at) = st.probing.iter().position(|c| *c == self.candidate_id) {
            st.probing.remove(at);
        }
        drop(st);
        self.runner.shared.wake.notify_one();
    }
}

/// The worker loop: beat when due, take units while there is room, notice ended runs; then
/// sleep until woken or [`POLL`]. Ends when every handle of the runner is gone.
async fn worker_loop(weak: Weak<Shared>, wake: Arc<Notify>) {
    let mut last_beat: Option<Instant> = None;
    let mut cpu_then = (Instant::now(), harness::process_cpu_seconds());
    let mut published = false;
    loop {
        let notified = wake.notified();
        let Some(shared) = weak.upgrade() else { return };
        // Runs started together (a restart resumes them one after another) are handed over
        // together, so the queue takes them by run id rather than by who was first to be seen.
        if shared.lock().active.values().any(|r| !r.ready) {
            tokio::time::sleep(START_BURST).await;
        }
        hand_over_started_runs(&shared).await;
        if shared.publish_caps && !published {
            published = publish_caps(&shared).await;
        }
        if last_beat.is_none_or(|t| t.elapsed() >= shared.identity.heartbeat()) {
            let cpu_now = (Instant::now(), harness::process_cpu_seconds());
            let cpu_share = match (cpu_then.1, cpu_now.1) {
                (Some(a), Some(b)) => Some((b - a) / cpu_now.0.duration_since(cpu_then.0).as_secs_f64().max(1e-3)),
                _ => None,
            };
            cpu_then = cpu_now;
            // Bounded: a database that stops answering must not hold the loop (units go on).
            if tokio::time::timeout(shared.identity.lease / 2, beat(&shared, cpu_share))
                .await
                .is_err()
            {
                tracing::warn!(worker = %shared.identity.name, "heartbeat timed out");
            }
            last_beat = Some(Instant::now());
        }
        while let Ok(true) = tokio::time::timeout(STEP_BOUND, claim(&shared)).await {}
        let _ = tokio::time::timeout(STEP_BOUND, notice_ended_runs(&shared)).await;
        drop(shared);
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Hands the runs started since the last look to the workers, in the order started: each is
/// queued in the database, and a paused run, or one left running by a crash that holds no slot,
/// is queued again (it waits like any other until admitted).
async fn hand_over_started_runs(shared: &Shared) {
    let started: Vec<i64> = {
        let st = shared.lock();
        let mut ids: Vec<(Instant, i64)> = st
            .active
            .iter()
            .filter(|(_, r)| !r.ready)
            .map(|(id, r)| (r.since, *id))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    };
    for run_id in started {
        let store = &shared.store;
        if let Err(e) = store.request_run(run_id).await {
            tracing::warn!(run_id, error = %e, "could not hand the run to the workers");
            continue;
        }
        if let Ok(Some(run)) = store.get_run(run_id).await {
            let holds_slot = store
                .list_run_units(run_id)
                .await
                .map_or(true, |units| units.iter().any(|u| u.status != UnitStatus::Done));
            let requeue = run.status == RunStatus::Paused || (run.status == RunStatus::Running && !holds_slot);
            if requeue && let Err(e) = store.set_run_status(run_id, RunStatus::Queued, None).await {
                tracing::warn!(run_id, error = %e, "could not queue the run again");
            }
        }
        if let Some(run) = shared.lock().active.get_mut(&run_id) {
            run.ready = true;
        }
    }
}

/// Writes the process's caps where every worker reads them.
async fn publish_caps(shared: &Shared) -> bool {
    let caps = shared.caps;
    let by = format!("worker {}", shared.identity.name);
    let written = async {
        shared
            .store
            .set_setting(crate::store::MAX_RUNS_SETTING, &caps.max_runs.to_string(), &by)
            .await?;
        shared
            .store
            .set_setting(
                crate::store::PER_CANDIDATE_SETTING,
                &caps.per_candidate.to_string(),
                &by,
            )
            .await
    }
    .await;
    match written {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not write the run caps to the database");
            false
        }
    }
}

/// The heartbeat: the worker's row, its leases renewed; a unit whose lease another worker
/// took over, or whose run was ended elsewhere (cancelled from a page), is stopped here.
async fn beat(shared: &Shared, cpu_share: Option<f64>) {
    let id = &shared.identity;
    let (held, runs): (usize, Vec<i64>) = {
        let st = shared.lock();
        let mut runs: Vec<i64> = st.executing.iter().map(|h| h.run_id).collect();
        runs.dedup();
        (st.executing.len(), runs)
    };
    let status = WorkerStatus {
        name: id.name.clone(),
        labels: id.labels.clone(),
        version: crate::VERSION.to_string(),
        host: harness::host_name(),
        pid: std::process::id(),
        capacity: if id.measures { id.capacity as u32 } else { 0 },
        embedded: id.embedded,
        started_at: crate::domain::Timestamp::now(),
        heartbeat_at: crate::domain::Timestamp::now(),
        lease_ms: id.lease.as_millis() as i64,
        units_held: held as u32,
        cpu_share,
        load_avg: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next()?.parse().ok()),
    };
    let renewed = match shared.store.worker_beat(&status, id.lease.as_millis() as i64).await {
        Ok(renewed) => renewed,
        Err(e) => {
            // Not fatal: the units go on, and the lease survives a few missed beats.
            tracing::warn!(error = %e, worker = %id.name, "heartbeat failed");
            return;
        }
    };
    let mut ended = Vec::new();
    for run_id in runs {
        if let Ok(Some(run)) = shared.store.get_run(run_id).await
            && run.status.is_terminal()
        {
            ended.push(run_id);
        }
    }
    let st = shared.lock();
    for held in st.executing.iter().filter(|h| !h.ending) {
        if !renewed.contains(&(held.run_id, held.seq)) {
            tracing::warn!(
                run_id = held.run_id,
                seq = held.seq,
                "lease lost: another worker took the unit over"
            );
            let _ = held.lost.send(true);
        } else if ended.contains(&held.run_id) {
            let _ = held.cancel.send(true);
        }
    }
}

/// Asks the database for a unit and starts it; true when one was taken (ask again).
async fn claim(shared: &Arc<Shared>) -> bool {
    let id = &shared.identity;
    let me = {
        let st = shared.lock();
        Claimant {
            name: id.name.clone(),
            labels: id.labels.clone(),
            free: if id.measures {
                id.capacity.saturating_sub(st.executing.len())
            } else {
                0
            },
            probing: st.probing.clone(),
            holding: st.executing.iter().map(|h| (h.run_id, h.seq)).collect(),
            only_runs: (!id.claims_any).then(|| st.active.keys().copied().collect()),
        }
    };
    let decision = match shared
        .store
        .claim_unit(&me, shared.caps, id.lease.as_millis() as i64)
        .await
    {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, worker = %id.name, "could not look for work");
            return false;
        }
    };
    let mut events = Vec::new();
    for (run, other, name) in &decision.sharing {
        let note = |x: i64| {
            format!(
                "sharing {name} with run #{x} (up to {} runs per candidate): the speed figures of both runs are affected",
                decision.queue.caps.per_candidate
            )
        };
        events.push((*run, "warn", note(*other)));
        events.push((*other, "warn", note(*run)));
    }
    let claimed = decision.claim.clone();
    {
        let mut st = shared.lock();
        st.looked = true;
        let waiting: HashMap<i64, Blocker> = decision.queue.waiting.iter().cloned().collect();
        for (run_id, run) in st.active.iter_mut() {
            if let Some(blocker) = waiting.get(run_id) {
                if run.logged.as_ref() != Some(blocker) && blocker.is_worth_logging() {
                    events.push((*run_id, "info", blocker.describe()));
                    run.logged = Some(blocker.clone());
                }
            } else if !run.admitted && decision.queue.executing.iter().any(|(id, _)| id == run_id) {
                run.admitted = true;
                if run.logged.is_some() {
                    let waited = run.since.elapsed().as_secs_f64();
                    events.push((
                        *run_id,
                        "info",
                        format!("a slot is free after {waited:.1} s of waiting"),
                    ));
                }
            }
        }
        st.queue = decision.queue;
    }
    shared.log(events).await;
    match claimed {
        Some(claim) => {
            start_unit(shared, claim).await;
            true
        }
        None => false,
    }
}

/// Executes a claimed unit on the measurement runtime, then records how it ended.
async fn start_unit(shared: &Arc<Shared>, claim: Claim) {
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let (lost_tx, lost_rx) = watch::channel(false);
    shared.lock().executing.push(Held {
        run_id: claim.run_id,
        seq: claim.seq,
        candidate_id: claim.unit.candidate_id,
        cancel: cancel_tx,
        lost: lost_tx,
        ending: false,
    });
    if let Some(from) = &claim.taken_over_from
        && *from != shared.identity.name
    {
        let what = match claim.unit.candidate_id {
            Some(_) if claim.unit.shards > 1 => format!(
                "unit {} (share {} of {})",
                claim.seq + 1,
                claim.unit.shard + 1,
                claim.unit.shards
            ),
            Some(_) => format!("unit {}", claim.seq + 1),
            None => "the closing step".to_string(),
        };
        let message = format!(
            "worker {} took over {what} from worker {from}: its lease ran out; resuming from the stored records",
            shared.identity.name
        );
        let _ = shared.store.append_run_event(claim.run_id, "warn", &message).await;
    }
    let shared = shared.clone();
    runtime::handle().spawn(async move {
        let run_id = claim.run_id;
        let ended = run_unit(&shared, &claim, Cancel::new(cancel_rx), lost_rx).await;
        if let Some(held) = shared
            .lock()
            .executing
            .iter_mut()
            .find(|h| h.run_id == run_id && h.seq == claim.seq)
        {
            held.ending = true;
        }
        let store = &shared.store;
        let name = &shared.identity.name;
        match ended {
            Ok(UnitEnd::Done { harness }) => match store.finish_unit(run_id, claim.seq, name, harness.as_deref()).await
            {
                Ok(true) => {}
                Ok(false) => tracing::warn!(run_id, seq = claim.seq, "the unit's lease was lost before it ended"),
                Err(e) => tracing::error!(run_id, error = %e, "could not mark the unit done"),
            },
            Ok(UnitEnd::Abandoned) => {
                tracing::warn!(
                    run_id,
                    seq = claim.seq,
                    "unit abandoned: its lease was lost to another worker"
                );
            }
            Ok(UnitEnd::RunEnded(status)) => {
                tracing::info!(run_id, status = status.as_str(), "run ended");
                // While the run still holds its slot: no run of its candidates is measured
                // meanwhile (see `Runner::on_end` for runs of others).
                if let Some(hook) = shared.on_end.get() {
                    hook(run_id).await;
                }
                if status == RunStatus::Finished {
                    let _ = store.finish_unit(run_id, claim.seq, name, None).await;
                }
                if let Err(e) = store.release_run_slot(run_id).await {
                    tracing::error!(run_id, error = %e, "could not give up the run's slot");
                }
                shared.run_ended.notify_one();
            }
            Err(message) => {
                tracing::error!(run_id, error = %message, "run failed");
                if let Err(e) = store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await {
                    tracing::error!(run_id, error = %e, "could not mark the run failed");
                }
                let _ = store
                    .append_run_event(run_id, "error", &format!("failed: {message}"))
                    .await;
                if let Some(hook) = shared.on_end.get() {
                    hook(run_id).await;
                }
                let _ = store.release_run_slot(run_id).await;
                shared.run_ended.notify_one();
            }
        }
        let idle = {
            let mut st = shared.lock();
            st.executing.retain(|h| !(h.run_id == run_id && h.seq == claim.seq));
            st.executing.is_empty()
        };
        if idle {
            shared.idle.notify_waiters();
        }
        shared.wake.notify_one();
    });
}

/// Runs a unit in a task of its own, so even a panic ends with the run marked failed.
async fn run_unit(
    shared: &Shared,
    claim: &Claim,
    cancel: Cancel,
    lost: watch::Receiver<bool>,
) -> Result<UnitEnd, String> {
    let store = shared.store.clone();
    let run_id = claim.run_id;
    let unit = UnitContext {
        seq: claim.seq,
        worker: shared.identity.claims_any.then(|| shared.identity.name.clone()),
        share: executor::Share {
            index: claim.unit.shard,
            of: claim.unit.shards.max(1),
        },
        abandoned: Some(lost),
    };
    let writer = shared.writer.clone();
    let task =
        match claim.unit.candidate_id {
            Some(candidate_id) => tokio::spawn(async move {
                executor::execute_unit(&store, run_id, candidate_id, &unit, cancel, &writer).await
            }),
            None => tokio::spawn(async move {
                let reports: Vec<_> = store
                    .list_run_units(run_id)
                    .await?
                    .into_iter()
                    .filter_map(|u| u.harness)
                    .collect();
                executor::close_run(&store, run_id, &reports, cancel)
                    .await
                    .map(UnitEnd::RunEnded)
            }),
        };
    match task.await {
        Ok(Ok(end)) => Ok(end),
        Ok(Err(e)) => Err(e.to_string()),
        Err(join) => Err(format!("internal error: the run task ended abnormally ({join})")),
    }
}

/// Lets `wait` return for runs this process started that have ended (here or on another
/// worker) or paused, and that it no longer executes.
async fn notice_ended_runs(shared: &Shared) {
    let candidates: Vec<i64> = {
        let st = shared.lock();
        st.active
            .iter()
            .filter(|(id, run)| run.ready && !st.executing.iter().any(|h| h.run_id == **id))
            .map(|(id, _)| *id)
            .collect()
    };
    for run_id in candidates {
        let over = match shared.store.get_run(run_id).await {
            Ok(Some(run)) => run.status.is_terminal() || run.status == RunStatus::Paused,
            Ok(None) => true,
            Err(_) => false,
        };
        if over {
            let mut st = shared.lock();
            if !st.executing.iter().any(|h| h.run_id == run_id)
                && let Some(run) = st.active.remove(&run_id)
            {
                let _ = run.done.send(true);
            }
        }
    }
}
