//! Executes one stored run. For each candidate in turn:
//!
//! 1. the staged rollout (unless turned off): the shortest case, the longest case, then a few
//!    requests at once; a failed stage stops the run before the budget is spent, with what
//!    failed and the checks to make, in order (`rollout` module);
//! 2. warm-ups, excluded from every figure;
//! 3. every load level of the run's shape (fixed concurrency, a list of concurrencies, a
//!    sweep, or a rate), for every prompt-length bin (cases tagged `prompt_tokens:N`), for every
//!    repetition: closed loop (at most c requests in flight, each replaced when it ends) or open
//!    loop (sent on schedule whatever the server does; the lateness is recorded as the
//!    request's client queue time), with retries; records streamed to the store.
//!
//! Then candidates that declare a tokenize endpoint have their uncounted outputs counted by it
//! (`server_tokenizer`), the harness report (bakeoff's CPU, schedule lag, the unreliable flag)
//! is stored with the run, and, when the run turns judging on, the `llm-judge` graders run
//! (`judge`: after all measured load, so judge calls never distort a figure). Resumable: units
//! whose final attempt is stored are skipped, and so are outputs already judged.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderValue;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::{CandidateClient, Exchange, RecordIdentity, Timeouts, wall_clock_us};
use super::error::{EngineError, Failure};
use super::harness::HarnessClock;
use super::provider::{PreparedRequest, RequestParams, prepare};
use super::rollout;
#[path = "judge.rs"]
pub mod judge;
use super::writer::{Grading, RecordSender, RecordWriter};
use crate::domain::calibers::{HarnessReport, Load};
use crate::domain::candidate::Candidate;
use crate::domain::evalset::{EvalSetFile, prompt_bin};
use crate::domain::run::{CYCLE_LIMIT, ErrorClass, Phase, RequestRecord, Run, RunConfig, RunStatus, join_repetition};
use crate::domain::stats::SplitMix64;
use crate::store::DynStore;

/// The phase of a plain eval run's measured requests (see `RunConfig::measured_phase`).
pub const MEASURED_PHASE: Phase = Phase::Quality;

/// First retry waits this long; each further retry doubles it, up to `MAX_BACKOFF`.
const BASE_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Open loop: most requests in flight at once. Past it, sends wait (and the wait shows as
/// schedule lag): a runaway server cannot make bakeoff open unbounded connections.
const OPEN_LOOP_MAX_IN_FLIGHT: usize = 4096;

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

/// Whether a failed attempt is worth repeating (see `ErrorClass::is_retryable`).
pub fn is_retryable(class: ErrorClass) -> bool {
    class.is_retryable()
}

/// Runs `run_id` to its end. Returns the final status: Finished, Cancelled, or Failed when the
/// staged rollout stopped the run (the run's error and events say why). An error means the run
/// could not go on and should be marked failed by the caller.
pub async fn execute(store: DynStore, run_id: i64, cancel: Cancel) -> Result<RunStatus, EngineError> {
    let run = store.get_run(run_id).await?.ok_or(EngineError::RunNotFound(run_id))?;
    if run.status.is_terminal() {
        return Ok(run.status);
    }
    let version = store
        .get_evalset_version(run.evalset_version_id)
        .await?
        .ok_or(EngineError::EvalSetNotFound {
            run_id,
            version_id: run.evalset_version_id,
        })?;
    if run.candidate_ids.is_empty() {
        return Err(EngineError::NoCandidates(run_id));
    }
    let mut candidates = Vec::with_capacity(run.candidate_ids.len());
    for &candidate_id in &run.candidate_ids {
        let c = store
            .get_candidate(candidate_id)
            .await?
            .ok_or(EngineError::CandidateNotFound { run_id, candidate_id })?;
        candidates.push(c);
    }
    let case_count = match run.config.case_limit {
        Some(n) => version.file.cases.len().min(n as usize),
        None => version.file.cases.len(),
    };
    // Every judge is found before anything is sent, so a missing one costs nothing.
    let judges = match judge::resolve(&store, &run, &version.file, case_count).await? {
        Ok(judges) => judges,
        Err(message) => {
            store.append_run_event(run_id, "error", &message).await?;
            store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
            return Ok(RunStatus::Failed);
        }
    };
    // A soak (the operability page's) resumes as a soak, not as an ordinary run of its config.
    if run.config.soak {
        return super::soak::resume(&store, &run, version, &candidates[0], cancel).await;
    }
    let existing = store.list_request_records(run_id).await?;
    store.set_run_status(run_id, RunStatus::Running, None).await?;
    let started = if existing.is_empty() {
        format!(
            "started: {} candidate(s), eval set version {} ({} cases), load {}",
            candidates.len(),
            &version.content_hash[..version.content_hash.len().min(12)],
            version.file.cases.len(),
            run.config
                .loads()
                .iter()
                .map(Load::label)
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!("resumed: {} stored records kept", existing.len())
    };
    store.append_run_event(run_id, "info", &started).await?;
    // One call per declared tokenize endpoint, before any load, so a wrong one shows now.
    super::server_tokenizer::preflight(&store, run_id, &candidates).await?;
    if run.config.judge.is_none() && !version.file.judge_names(case_count).is_empty() {
        store
            .append_run_event(
                run_id,
                "info",
                "llm-judge graders are not run: judging is off for this run (turn it on on the run form)",
            )
            .await?;
    }

    let clock = HarnessClock::start();
    let since_us = wall_clock_us();
    let file = Arc::new(version.file);
    let writer = RecordWriter::spawn(store.clone());
    let mut result = Ok(None);
    for candidate in &candidates {
        if cancel.is_cancelled() {
            break;
        }
        let done = FinishedUnits::from_records(&existing, candidate.id, run.config.retries);
        let ctx = CandidateRun::new(&run, candidate, file.clone(), writer.sender(), cancel.clone())?;
        match ctx.run(&store, done).await {
            Ok(None) => {}
            Ok(Some(stopped)) => {
                result = Ok(Some(stopped));
                break;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    // Whatever happened, everything measured so far is stored before the status changes.
    let stored = writer.finish().await;
    let rollout_stop = result?;
    stored?;
    // The harness clock covers the load only, not the counting below.
    let clock = clock.stop().await;
    // Every candidate's load has ended (two may share a server): now, and on resume, the
    // declared tokenize endpoints count what streams left uncounted.
    if !cancel.is_cancelled() {
        super::server_tokenizer::count_run(&store, run_id, &candidates, &cancel).await?;
    }
    let records = store.list_request_records(run_id).await?;
    let fresh: Vec<RequestRecord> = records
        .into_iter()
        .filter(|r| !r.is_warmup && r.sent_at_us >= since_us)
        .collect();
    let report = clock.report(&run.config, &fresh);
    if !fresh.is_empty() {
        record_harness(&store, run_id, &report).await?;
    }
    if let Some(message) = rollout_stop {
        store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
        return Ok(RunStatus::Failed);
    }
    if let Some(judges) = &judges
        && !cancel.is_cancelled()
    {
        judge::judge_run(&store, &run, file.clone(), judges, &cancel).await?;
    }
    if cancel.is_cancelled() {
        store.set_run_status(run_id, RunStatus::Cancelled, None).await?;
        store.append_run_event(run_id, "warn", "cancelled").await?;
        return Ok(RunStatus::Cancelled);
    }
    store.set_run_status(run_id, RunStatus::Finished, None).await?;
    store.append_run_event(run_id, "info", "finished").await?;
    Ok(RunStatus::Finished)
}

/// Stores the harness report with the run and says in the event log whether the speed
/// figures can be trusted.
async fn record_harness(store: &DynStore, run_id: i64, report: &HarnessReport) -> Result<(), EngineError> {
    store.set_run_harness(run_id, report).await?;
    let cpu = match (report.cpu_s, report.cpu_s_per_million_tokens) {
        (Some(c), Some(per)) => format!("{c:.2} CPU-s ({per:.1} CPU-s per million tokens)"),
        (Some(c), None) => format!("{c:.2} CPU-s"),
        _ => "CPU time not measurable here".to_string(),
    };
    let lag = report
        .schedule_lag_ms
        .as_ref()
        .map(|d| format!("schedule lag p50 {:.2} ms, p99 {:.2} ms", d.p50, d.p99))
        .or_else(|| {
            report
                .client_queue_ms
                .as_ref()
                .map(|d| format!("client queue p50 {:.2} ms, p99 {:.2} ms", d.p50, d.p99))
        })
        .unwrap_or_default();
    let lag = match &report.runtime_lag_ms {
        Some(d) => format!("{lag}; event-loop lag p99 {:.2} ms", d.p99),
        None => lag,
    };
    if report.unreliable {
        let msg = format!(
            "harness: speed figures UNRELIABLE: {}. ({cpu}; {lag})",
            report.reasons.join("; ")
        );
        store.append_run_event(run_id, "warn", &msg).await?;
    } else {
        let msg = format!("harness: {cpu}; {lag}; within bounds");
        store.append_run_event(run_id, "info", &msg).await?;
    }
    Ok(())
}

/// One request to make: a case at a repetition, in a phase, from a given attempt on.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    pub case_index: usize,
    pub phase: Phase,
    pub repetition: u32,
    pub is_warmup: bool,
    pub first_attempt: u32,
    pub last_attempt: u32,
    /// The load condition stored with the record: the concurrency, 0 for open loop.
    pub concurrency: u32,
}

/// What the store already holds for one candidate, keyed by (case, phase, repetition).
#[derive(Debug, Default)]
pub struct FinishedUnits {
    /// Highest stored attempt and whether that unit is settled.
    units: HashMap<(String, Phase, u32), (u32, bool)>,
    /// Warm-ups already stored; new warm-ups are numbered after them so none collide.
    pub warmups: u32,
    /// Whether a staged rollout was already recorded (a resumed run does not repeat it).
    pub rollout_done: bool,
}

impl FinishedUnits {
    /// A unit is settled when an attempt succeeded, the last allowed attempt is stored, or the
    /// last stored failure is not worth retrying.
    pub fn from_records(records: &[RequestRecord], candidate_id: i64, retries: u32) -> Self {
        let mut out = FinishedUnits::default();
        for r in records.iter().filter(|r| r.candidate_id == candidate_id) {
            if r.phase == Phase::Judge {
                // Judge calls are the judge phase's to resume (`judge`), not units.
                continue;
            }
            if r.is_warmup {
                if r.phase == Phase::Smoke {
                    out.rollout_done = true;
                } else {
                    out.warmups = out.warmups.max(r.repetition + 1);
                }
                continue;
            }
            let settled_by_this =
                r.succeeded() || r.attempt >= retries || r.error_class.is_some_and(|c| !is_retryable(c));
            let entry = out
                .units
                .entry((r.case_id.clone(), r.phase, r.repetition))
                .or_insert((r.attempt, false));
            if r.attempt >= entry.0 {
                entry.0 = r.attempt;
            }
            entry.1 |= settled_by_this;
        }
        out
    }

    /// None when settled; else the attempt index to continue with.
    pub fn next_attempt(&self, case_id: &str, phase: Phase, repetition: u32) -> Option<u32> {
        match self.units.get(&(case_id.to_string(), phase, repetition)) {
            None => Some(0),
            Some((_, true)) => None,
            Some((last, false)) => Some(last + 1),
        }
    }
}

/// Tallies for one pool of units.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub succeeded: u32,
    pub failed: u32,
    pub retries: u32,
    /// Successful requests that stopped at max_tokens (`finish_reason: length`).
    pub truncated: u32,
    /// The first few final failures: (case id, failure).
    pub failures: Vec<(String, Failure)>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.retries += other.retries;
        self.truncated += other.truncated;
        for f in other.failures {
            if self.failures.len() < 5 {
                self.failures.push(f);
            }
        }
    }
}

/// Where the units of one pool come from.
pub(crate) enum Feed {
    /// A fixed list (rollout stages, warm-ups).
    List(VecDeque<Unit>),
    /// The cases of one level × bin × repetition, cycled `limit` times or until `deadline`.
    Cycle(CycleFeed),
}

pub(crate) struct CycleFeed {
    pub cases: Vec<usize>,
    pub case_ids: Vec<String>,
    pub phase: Phase,
    pub level: u32,
    pub repetition: u32,
    pub concurrency: u32,
    pub last_attempt: u32,
    /// Units to hand out in all (settled ones included); None: until the deadline.
    pub limit: Option<usize>,
    pub deadline: Option<Instant>,
    pub next: usize,
    pub done: Arc<FinishedUnits>,
}

impl Feed {
    fn next(&mut self) -> Option<Unit> {
        match self {
            Feed::List(units) => units.pop_front(),
            Feed::Cycle(f) => loop {
                if f.cases.is_empty() || f.limit.is_some_and(|n| f.next >= n) {
                    return None;
                }
                if f.deadline.is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                let i = f.next;
                f.next += 1;
                let cycle = (i / f.cases.len()) as u32;
                if cycle >= CYCLE_LIMIT {
                    return None;
                }
                let k = i % f.cases.len();
                let repetition = join_repetition(f.level, f.repetition, cycle);
                if let Some(first_attempt) = f.done.next_attempt(&f.case_ids[k], f.phase, repetition) {
                    return Some(Unit {
                        case_index: f.cases[k],
                        phase: f.phase,
                        repetition,
                        is_warmup: false,
                        first_attempt,
                        last_attempt: f.last_attempt,
                        concurrency: f.concurrency,
                    });
                }
            },
        }
    }
}

/// Everything the workers of one candidate share.
pub(crate) struct CandidateRun {
    pub run_id: i64,
    pub config: RunConfig,
    pub candidate: Candidate,
    pub file: Arc<EvalSetFile>,
    pub case_count: usize,
    client: CandidateClient,
    params: RequestParams,
    records: RecordSender,
    pub cancel: Cancel,
}

impl CandidateRun {
    fn new(
        run: &Run,
        candidate: &Candidate,
        file: Arc<EvalSetFile>,
        records: RecordSender,
        cancel: Cancel,
    ) -> Result<Arc<Self>, EngineError> {
        let config = run.config.clone();
        let pool = match config.load {
            crate::domain::run::LoadShape::Rate { .. } => 1024,
            _ => config.max_concurrency(),
        };
        let client = CandidateClient::new(&candidate.spec, pool, Timeouts::for_run(&config)).map_err(|e| {
            EngineError::Client {
                candidate: candidate.spec.name.clone(),
                message: e.to_string(),
            }
        })?;
        let case_count = match config.case_limit {
            Some(n) => file.cases.len().min(n as usize),
            None => file.cases.len(),
        };
        Ok(Arc::new(CandidateRun {
            run_id: run.id,
            params: RequestParams::resolve(&config, &file.header, &candidate.spec),
            config,
            candidate: candidate.clone(),
            file,
            case_count,
            client,
            records,
            cancel,
        }))
    }

    /// The cases grouped by prompt-length bin (one group of all cases when none is tagged).
    fn bins(&self) -> Vec<(Option<u32>, Vec<usize>)> {
        let mut bins: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
        for (i, case) in self.file.cases[..self.case_count].iter().enumerate() {
            let bin = prompt_bin(&case.tags);
            match bins.iter_mut().find(|(b, _)| *b == bin) {
                Some((_, cases)) => cases.push(i),
                None => bins.push((bin, vec![i])),
            }
        }
        bins.sort_by_key(|(b, _)| *b);
        bins
    }

    /// Ok(Some(message)) when the staged rollout stopped the run.
    async fn run(self: Arc<Self>, store: &DynStore, done: FinishedUnits) -> Result<Option<String>, EngineError> {
        let name = self.candidate.spec.name.clone();
        if self.case_count == 0 {
            store
                .append_run_event(self.run_id, "warn", &format!("{name}: no cases to send"))
                .await?;
            return Ok(None);
        }
        let phase = self.config.measured_phase();
        let done = Arc::new(done);
        if self.config.staged_rollout && !done.rollout_done {
            if let Some(stop) = rollout::run(&self, store).await? {
                return Ok(Some(stop));
            }
            if self.cancel.is_cancelled() {
                return Ok(None);
            }
        }
        let loads = self.config.loads();
        let first_concurrency = match loads[0] {
            Load::Concurrency { concurrency } => concurrency,
            Load::Rate { .. } => self.config.concurrency.clamp(1, 4),
        };
        if self.config.warmup_requests > 0 {
            let warmups: VecDeque<Unit> = (0..self.config.warmup_requests)
                .map(|i| Unit {
                    case_index: i as usize % self.case_count,
                    phase: Phase::Warmup,
                    repetition: done.warmups + i,
                    is_warmup: true,
                    first_attempt: 0,
                    last_attempt: 0, // a failed warm-up is not worth repeating
                    concurrency: first_concurrency,
                })
                .collect();
            let msg = format!(
                "{name}: warm-up, {} requests at concurrency {first_concurrency} (not counted)",
                warmups.len()
            );
            store.append_run_event(self.run_id, "info", &msg).await?;
            self.clone().closed_loop(Feed::List(warmups), first_concurrency).await?;
        }
        let bins = self.bins();
        let mut total = Tally::default();
        let started = Instant::now();
        for (level, load) in loads.iter().enumerate() {
            for (bin, cases) in &bins {
                if self.cancel.is_cancelled() {
                    return Ok(None);
                }
                let level_started = Instant::now();
                let mut tally = Tally::default();
                for repetition in 0..self.config.repetitions {
                    let feed = self.feed(level as u32, repetition, *load, cases, phase, done.clone());
                    let t = match *load {
                        Load::Concurrency { concurrency } => self.clone().closed_loop(feed, concurrency).await?,
                        Load::Rate { per_second, poisson } => {
                            let seed = (self.run_id as u64) << 32 ^ (level as u64) << 16 ^ u64::from(repetition);
                            self.clone().open_loop(feed, per_second, poisson, seed).await?
                        }
                    };
                    tally.add(t);
                    if self.cancel.is_cancelled() {
                        return Ok(None);
                    }
                }
                let msg = format!(
                    "{name}: {} phase at {}{}: {} repetition(s), {} succeeded, {} failed, {} retries in {:.1} s",
                    phase.as_str(),
                    load.label(),
                    bin.map(|b| format!(", prompts of {b} tokens")).unwrap_or_default(),
                    self.config.repetitions,
                    tally.succeeded,
                    tally.failed,
                    tally.retries,
                    level_started.elapsed().as_secs_f64()
                );
                let level_name = if tally.failed > 0 { "warn" } else { "info" };
                store.append_run_event(self.run_id, level_name, &msg).await?;
                total.add(tally);
            }
        }
        let msg = format!(
            "{name}: done in {:.1} s, {} succeeded, {} failed, {} retries",
            started.elapsed().as_secs_f64(),
            total.succeeded,
            total.failed,
            total.retries
        );
        let level = if total.failed > 0 { "warn" } else { "info" };
        store.append_run_event(self.run_id, level, &msg).await?;
        Ok(None)
    }

    fn feed(
        &self,
        level: u32,
        repetition: u32,
        load: Load,
        cases: &[usize],
        phase: Phase,
        done: Arc<FinishedUnits>,
    ) -> Feed {
        let limit = match (self.config.requests_per_level, self.config.duration_secs) {
            (Some(n), _) => Some(n as usize),
            (None, Some(_)) => None,
            (None, None) => Some(cases.len()),
        };
        Feed::Cycle(CycleFeed {
            cases: cases.to_vec(),
            case_ids: cases.iter().map(|&i| self.file.cases[i].id.clone()).collect(),
            phase,
            level,
            repetition,
            concurrency: match load {
                Load::Concurrency { concurrency } => concurrency,
                Load::Rate { .. } => 0,
            },
            last_attempt: self.config.retries,
            limit,
            deadline: self
                .config
                .duration_secs
                .map(|s| Instant::now() + Duration::from_secs(u64::from(s))),
            next: 0,
            done,
        })
    }

    /// Closed loop: `concurrency` workers, each taking the next unit as soon as its previous
    /// one ends, so at most `concurrency` requests are ever in flight.
    pub(crate) async fn closed_loop(self: Arc<Self>, feed: Feed, concurrency: u32) -> Result<Tally, EngineError> {
        let workers = match &feed {
            Feed::List(units) => units.len().min(concurrency.max(1) as usize),
            Feed::Cycle(_) => concurrency.max(1) as usize,
        };
        let feed = Arc::new(Mutex::new(feed));
        let mut set = JoinSet::new();
        for _ in 0..workers {
            set.spawn(self.clone().worker(feed.clone()));
        }
        join_all(set).await
    }

    async fn worker(self: Arc<Self>, feed: Arc<Mutex<Feed>>) -> Tally {
        let mut tally = Tally::default();
        loop {
            if self.cancel.is_cancelled() {
                return tally;
            }
            // The unit is ready to go now: everything until the send is bakeoff's own queue.
            let ready = Instant::now();
            let Some(unit) = feed.lock().unwrap_or_else(|p| p.into_inner()).next() else {
                return tally;
            };
            tally.add(self.send_unit(unit, ready).await);
        }
    }

    /// Open loop: units sent at `per_second` (evenly spaced, or with exponential gaps when
    /// `poisson`, seeded) whatever the server does; each request's client queue time is its
    /// lateness against the schedule.
    async fn open_loop(
        self: Arc<Self>,
        mut feed: Feed,
        per_second: f64,
        poisson: bool,
        seed: u64,
    ) -> Result<Tally, EngineError> {
        let mut rng = SplitMix64::new(seed);
        let gap = |rng: &mut SplitMix64| {
            let mean = 1.0 / per_second.max(1e-6);
            let secs = if poisson {
                -(1.0 - rng.next_f64()).ln() * mean
            } else {
                mean
            };
            Duration::from_secs_f64(secs)
        };
        let limit = Arc::new(Semaphore::new(OPEN_LOOP_MAX_IN_FLIGHT));
        let mut set = JoinSet::new();
        let mut cancel = self.cancel.clone();
        let mut planned = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(planned) => {}
                _ = cancel.cancelled() => break,
            }
            let Some(unit) = feed.next() else { break };
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let this = self.clone();
            let due = planned;
            set.spawn(async move {
                let tally = this.send_unit(unit, due).await;
                drop(permit);
                tally
            });
            // Finished tasks are collected as we go, so a long run keeps no dead handles.
            while let Some(joined) = set.try_join_next() {
                if let Err(e) = joined {
                    set.abort_all();
                    return Err(EngineError::Internal(format!("a request task ended abnormally: {e}")));
                }
            }
            planned += gap(&mut rng);
        }
        join_all(set).await
    }

    /// Prepares, sends (with retries) and records one unit. `ready` is when it could have been
    /// sent: the wait until the actual send is recorded as client queue time.
    pub(crate) async fn send_unit(&self, unit: Unit, ready: Instant) -> Tally {
        let mut tally = Tally::default();
        let mut cancel = self.cancel.clone();
        let case = &self.file.cases[unit.case_index];
        let prepared = prepare(
            &self.candidate.spec,
            self.client.api_key(),
            &self.file,
            case,
            &self.params,
        );
        let prepared = match prepared {
            Ok(p) => p,
            Err(failure) => {
                tally.failed += 1;
                tally.failures.push((case.id.clone(), failure.clone()));
                self.store_record(&unit, unit.first_attempt, unsent(failure, ready));
                return tally;
            }
        };
        let mut ready = ready;
        for attempt in unit.first_attempt..=unit.last_attempt.max(unit.first_attempt) {
            let request = self.with_request_id(&prepared, &unit, attempt);
            let queue_us = micros(ready.elapsed());
            let exchange = tokio::select! {
                x = self.client.send(&request, queue_us) => x,
                _ = cancel.cancelled() => return tally,
            };
            let failure = exchange.failure.clone();
            let truncated = exchange.finish_reason.as_deref() == Some("length");
            self.store_record(&unit, attempt, exchange);
            match failure {
                None => {
                    tally.succeeded += 1;
                    tally.truncated += u32::from(truncated);
                    break;
                }
                Some(f) if attempt < unit.last_attempt && is_retryable(f.class) => {
                    tally.retries += 1;
                    let wait = BASE_BACKOFF.saturating_mul(1 << (attempt - unit.first_attempt).min(8));
                    tokio::select! {
                        _ = tokio::time::sleep(wait.min(MAX_BACKOFF)) => {}
                        _ = cancel.cancelled() => return tally,
                    }
                    ready = Instant::now();
                }
                Some(f) => {
                    tally.failed += 1;
                    tally.failures.push((case.id.clone(), f));
                    break;
                }
            }
        }
        tally
    }

    /// Tags the attempt with `x-request-id: bakeoff-RUN-CANDIDATE-PHASE-CASEINDEX-REPETITION-ATTEMPT`,
    /// so it can be found in the server's logs (the mock's ground truth keeps it).
    fn with_request_id(&self, prepared: &PreparedRequest, unit: &Unit, attempt: u32) -> PreparedRequest {
        let mut request = prepared.clone();
        let id = request_id(
            self.run_id,
            self.candidate.id,
            unit.phase,
            unit.case_index,
            unit.repetition,
            attempt,
        );
        if let Ok(value) = HeaderValue::from_str(&id) {
            request.headers.insert("x-request-id", value);
        }
        request
    }

    /// Hands the record to the writer, which counts tokens and grades it off the hot path.
    fn store_record(&self, unit: &Unit, attempt: u32, exchange: Exchange) {
        let case = &self.file.cases[unit.case_index];
        let graded = exchange.succeeded() && !unit.is_warmup;
        let (record, chunk_text) = exchange.into_parts(RecordIdentity {
            run_id: self.run_id,
            candidate_id: self.candidate.id,
            case_id: case.id.clone(),
            phase: unit.phase,
            repetition: unit.repetition,
            attempt,
            concurrency: unit.concurrency,
            is_warmup: unit.is_warmup,
        });
        let grading = graded.then(|| Grading {
            file: self.file.clone(),
            case_index: unit.case_index,
        });
        if !self.records.send(record, chunk_text, grading) {
            tracing::error!(run_id = self.run_id, "record writer stopped; a record was dropped");
        }
    }
}

async fn join_all(mut set: JoinSet<Tally>) -> Result<Tally, EngineError> {
    let mut tally = Tally::default();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(t) => tally.add(t),
            Err(e) => {
                set.abort_all();
                return Err(EngineError::Internal(format!("a request worker ended abnormally: {e}")));
            }
        }
    }
    Ok(tally)
}

/// The `x-request-id` bakeoff sends with an attempt: the attempt's key packed into a UUID
/// (version 8, "custom"), because real servers validate this header — llama-cpp-python's
/// server answers any non-UUID `x-request-id` with a bare `400 Bad Request` and no body.
/// Layout: run (32 bits) - candidate (16) - `8` phase (4) attempt (8) - variant+repetition (16)
/// - case index (48), so the mock's ground truth can still be matched to each record.
pub fn request_id(
    run_id: i64,
    candidate_id: i64,
    phase: Phase,
    case_index: usize,
    repetition: u32,
    attempt: u32,
) -> String {
    let phase_nibble = match phase {
        Phase::Warmup => 0,
        Phase::Smoke => 1,
        Phase::Quality => 2,
        Phase::Throughput => 3,
        Phase::Soak => 4,
        Phase::Probe => 5,
        Phase::Judge => 6,
    };
    format!(
        "{:08x}-{:04x}-8{:x}{:02x}-{:04x}-{:012x}",
        run_id as u32,
        candidate_id as u16,
        phase_nibble,
        attempt.min(0xff),
        0x8000 | (repetition & 0x3fff),
        case_index as u64 & 0xffff_ffff_ffff,
    )
}

/// The record of an attempt that could not even be sent.
fn unsent(failure: Failure, ready: Instant) -> Exchange {
    Exchange {
        sent_at_us: wall_clock_us(),
        client_queue_us: micros(ready.elapsed()),
        end_us: Some(0),
        failure: Some(failure),
        ..Default::default()
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::TokenSource;

    #[test]
    fn request_ids_are_uuids_and_tell_attempts_apart() {
        let id = request_id(3, 2, Phase::Quality, 17, 1, 0);
        assert_eq!(id, "00000003-0002-8200-8001-000000000011");
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert!(id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        let mut seen = std::collections::HashSet::new();
        for phase in [Phase::Warmup, Phase::Quality, Phase::Soak] {
            for (case, rep, attempt) in [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)] {
                assert!(seen.insert(request_id(3, 2, phase, case, rep, attempt)));
            }
        }
    }

    fn rec(case: &str, rep: u32, attempt: u32, class: Option<ErrorClass>, warm: bool) -> RequestRecord {
        let mut x = Exchange {
            failure: class.map(|c| Failure::new(c, "x")),
            output: "ok".into(),
            output_tokens_source: Some(TokenSource::Chunks),
            ..Default::default()
        };
        x.end_us = Some(1);
        x.into_record(RecordIdentity {
            run_id: 1,
            candidate_id: 3,
            case_id: case.into(),
            phase: if warm { Phase::Warmup } else { MEASURED_PHASE },
            repetition: rep,
            attempt,
            concurrency: 1,
            is_warmup: warm,
        })
    }

    #[test]
    fn resume_skips_settled_units_and_continues_attempts() {
        let mut smoke = rec("s", 0, 0, None, true);
        smoke.phase = Phase::Smoke;
        let records = vec![
            rec("a", 0, 0, None, false),
            rec("b", 0, 0, Some(ErrorClass::HttpServerError), false),
            rec("c", 0, 0, Some(ErrorClass::HttpServerError), false),
            rec("c", 0, 1, Some(ErrorClass::StreamCut), false),
            rec("d", 0, 0, Some(ErrorClass::ContextLengthExceeded), false),
            rec("w", 0, 0, None, true),
            rec("w", 1, 0, None, true),
            smoke,
        ];
        let done = FinishedUnits::from_records(&records, 3, 1);
        assert_eq!(done.next_attempt("a", MEASURED_PHASE, 0), None);
        assert_eq!(done.next_attempt("a", MEASURED_PHASE, 1), Some(0));
        assert_eq!(done.next_attempt("b", MEASURED_PHASE, 0), Some(1));
        assert_eq!(done.next_attempt("c", MEASURED_PHASE, 0), None, "retries used up");
        assert_eq!(done.next_attempt("d", MEASURED_PHASE, 0), None, "not worth retrying");
        assert_eq!(done.next_attempt("new", MEASURED_PHASE, 0), Some(0));
        assert_eq!(done.warmups, 2);
        assert!(done.rollout_done);
        let other = FinishedUnits::from_records(&records, 4, 1);
        assert_eq!(other.next_attempt("a", MEASURED_PHASE, 0), Some(0));
        assert!(!other.rollout_done);
    }

    #[test]
    fn deterministic_failures_are_not_retried() {
        assert!(!is_retryable(ErrorClass::ContextLengthExceeded));
        assert!(!is_retryable(ErrorClass::HttpClientError));
        assert!(is_retryable(ErrorClass::RateLimited));
        assert!(is_retryable(ErrorClass::StreamCut));
    }

    #[test]
    fn cycle_feed_numbers_units_uniquely_and_stops_at_its_limit() {
        let mut feed = Feed::Cycle(CycleFeed {
            cases: vec![0, 2],
            case_ids: vec!["a".into(), "c".into()],
            phase: Phase::Throughput,
            level: 2,
            repetition: 1,
            concurrency: 8,
            last_attempt: 1,
            limit: Some(5),
            deadline: None,
            next: 0,
            done: Arc::new(FinishedUnits::default()),
        });
        let units: Vec<(usize, u32)> = std::iter::from_fn(|| feed.next())
            .map(|u| (u.case_index, u.repetition))
            .collect();
        let r = |cycle| join_repetition(2, 1, cycle);
        assert_eq!(units, vec![(0, r(0)), (2, r(0)), (0, r(1)), (2, r(1)), (0, r(2))]);
    }
}
