//! Executes one stored run: for each candidate in turn, warm-ups, then every selected case ×
//! repetition with at most `concurrency` requests in flight (closed loop), retries, grading, and
//! the records streamed to the store. Resumable: units whose final attempt is stored are skipped.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::{CandidateClient, Exchange, RecordIdentity, Timeouts, wall_clock_us};
use super::error::{EngineError, Failure};
use super::provider::{PreparedRequest, RequestParams, prepare};
use super::writer::{RecordSender, RecordWriter};
use crate::domain::candidate::Candidate;
use crate::domain::evalset::{EvalCase, EvalSetFile};
use crate::domain::grading::grade;
use crate::domain::run::{ErrorClass, Phase, RequestRecord, Run, RunConfig, RunStatus};
use crate::store::DynStore;
use reqwest::header::HeaderValue;

/// The phase every measured (non-warm-up) request of this executor belongs to. Staged phases
/// (smoke → quality → throughput sweep → soak) extend this.
pub const MEASURED_PHASE: Phase = Phase::Quality;

/// First retry waits this long; each further retry doubles it, up to `MAX_BACKOFF`.
const BASE_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Asks a running executor to stop (in-flight requests are dropped, unrecorded).
#[derive(Clone)]
pub struct Cancel(watch::Receiver<bool>);

impl Cancel {
    pub fn new(rx: watch::Receiver<bool>) -> Self {
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

/// Whether a failed attempt is worth repeating: a too-long prompt or a refused request (4xx)
/// fails the same way again.
pub fn is_retryable(class: ErrorClass) -> bool {
    class.is_retryable()
}

/// Runs `run_id` to its end. Returns the final status (Finished, or Cancelled); an error means
/// the run could not go on and should be marked failed by the caller.
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
    let existing = store.list_request_records(run_id).await?;
    store.set_run_status(run_id, RunStatus::Running, None).await?;
    let started = if existing.is_empty() {
        format!(
            "started: {} candidate(s), eval set version {} ({} cases)",
            candidates.len(),
            &version.content_hash[..version.content_hash.len().min(12)],
            version.file.cases.len()
        )
    } else {
        format!("resumed: {} stored records kept", existing.len())
    };
    store.append_run_event(run_id, "info", &started).await?;

    let file = Arc::new(version.file);
    let writer = RecordWriter::spawn(store.clone());
    let mut result = Ok(());
    for candidate in &candidates {
        if cancel.is_cancelled() {
            break;
        }
        let done = FinishedUnits::from_records(&existing, candidate.id, run.config.retries);
        let ctx = CandidateRun::new(&run, candidate, file.clone(), writer.sender(), cancel.clone())?;
        if let Err(e) = ctx.run(&store, &done).await {
            result = Err(e);
            break;
        }
    }
    // Whatever happened, everything measured so far is stored before the status changes.
    let stored = writer.finish().await;
    result?;
    stored?;
    if cancel.is_cancelled() {
        store.set_run_status(run_id, RunStatus::Cancelled, None).await?;
        store.append_run_event(run_id, "warn", "cancelled").await?;
        return Ok(RunStatus::Cancelled);
    }
    store.set_run_status(run_id, RunStatus::Finished, None).await?;
    store.append_run_event(run_id, "info", "finished").await?;
    Ok(RunStatus::Finished)
}

/// One request to make: a case at a repetition, in a phase, from a given attempt on.
#[derive(Debug, Clone)]
struct Unit {
    case_index: usize,
    phase: Phase,
    repetition: u32,
    is_warmup: bool,
    first_attempt: u32,
    last_attempt: u32,
}

/// What the store already holds for one candidate, keyed by (case, phase, repetition).
#[derive(Debug, Default)]
pub struct FinishedUnits {
    /// Highest stored attempt and whether that unit is settled.
    units: HashMap<(String, Phase, u32), (u32, bool)>,
    /// Warm-ups already stored; new warm-ups are numbered after them so none collide.
    pub warmups: u32,
}

impl FinishedUnits {
    /// A unit is settled when an attempt succeeded, the last allowed attempt is stored, or the
    /// last stored failure is not worth retrying.
    pub fn from_records(records: &[RequestRecord], candidate_id: i64, retries: u32) -> Self {
        let mut out = FinishedUnits::default();
        for r in records.iter().filter(|r| r.candidate_id == candidate_id) {
            if r.is_warmup {
                out.warmups = out.warmups.max(r.repetition + 1);
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
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    succeeded: u32,
    failed: u32,
    retries: u32,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.retries += other.retries;
    }
}

/// Everything the workers of one candidate share.
struct CandidateRun {
    run_id: i64,
    config: RunConfig,
    candidate: Candidate,
    file: Arc<EvalSetFile>,
    case_count: usize,
    client: CandidateClient,
    params: RequestParams,
    records: RecordSender,
    cancel: Cancel,
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
        let client =
            CandidateClient::new(&candidate.spec, config.concurrency, Timeouts::for_run(&config)).map_err(|e| {
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

    async fn run(self: Arc<Self>, store: &DynStore, done: &FinishedUnits) -> Result<(), EngineError> {
        let name = &self.candidate.spec.name;
        let c = self.config.concurrency.max(1);
        let mut measured = Vec::new();
        for repetition in 0..self.config.repetitions {
            for (case_index, case) in self.file.cases[..self.case_count].iter().enumerate() {
                if let Some(first_attempt) = done.next_attempt(&case.id, MEASURED_PHASE, repetition) {
                    measured.push(Unit {
                        case_index,
                        phase: MEASURED_PHASE,
                        repetition,
                        is_warmup: false,
                        first_attempt,
                        last_attempt: self.config.retries,
                    });
                }
            }
        }
        let total = self.case_count * self.config.repetitions as usize;
        if measured.is_empty() {
            let msg = format!("{name}: all {total} requests already recorded");
            store.append_run_event(self.run_id, "info", &msg).await?;
            return Ok(());
        }
        let started = Instant::now();
        if self.config.warmup_requests > 0 && self.case_count > 0 {
            let warmups: Vec<Unit> = (0..self.config.warmup_requests)
                .map(|i| Unit {
                    case_index: i as usize % self.case_count,
                    phase: Phase::Warmup,
                    repetition: done.warmups + i,
                    is_warmup: true,
                    first_attempt: 0,
                    last_attempt: 0, // a failed warm-up is not worth repeating
                })
                .collect();
            let msg = format!(
                "{name}: warm-up, {} requests at concurrency {c} (not counted)",
                warmups.len()
            );
            store.append_run_event(self.run_id, "info", &msg).await?;
            self.clone().pool(warmups).await?;
        }
        if self.cancel.is_cancelled() {
            return Ok(());
        }
        let already = total - measured.len();
        let msg = format!(
            "{name}: {} phase, {} cases × {} repetitions = {total} requests at concurrency {c}{}",
            MEASURED_PHASE.as_str(),
            self.case_count,
            self.config.repetitions,
            if already > 0 {
                format!(" ({already} already recorded)")
            } else {
                String::new()
            }
        );
        store.append_run_event(self.run_id, "info", &msg).await?;
        let tally = self.clone().pool(measured).await?;
        let msg = format!(
            "{name}: done in {:.1} s, {} succeeded, {} failed, {} retries",
            started.elapsed().as_secs_f64(),
            tally.succeeded,
            tally.failed,
            tally.retries
        );
        let level = if tally.failed > 0 { "warn" } else { "info" };
        store.append_run_event(self.run_id, level, &msg).await?;
        Ok(())
    }

    /// Closed loop: `concurrency` workers, each taking the next unit as soon as its previous
    /// one ends, so at most `concurrency` requests are ever in flight.
    async fn pool(self: Arc<Self>, units: Vec<Unit>) -> Result<Tally, EngineError> {
        let workers = (self.config.concurrency.max(1) as usize).min(units.len());
        let queue = Arc::new(Mutex::new(VecDeque::from(units)));
        let mut set = JoinSet::new();
        for _ in 0..workers {
            set.spawn(self.clone().worker(queue.clone()));
        }
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

    async fn worker(self: Arc<Self>, queue: Arc<Mutex<VecDeque<Unit>>>) -> Tally {
        let mut tally = Tally::default();
        let mut cancel = self.cancel.clone();
        loop {
            if cancel.is_cancelled() {
                return tally;
            }
            // The unit is ready to go now: everything until the send is bakeoff's own queue.
            let ready = Instant::now();
            let Some(unit) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front() else {
                return tally;
            };
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
                    self.store_record(&unit, unit.first_attempt, case, unsent(failure, ready));
                    tally.failed += 1;
                    continue;
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
                let class = exchange.failure.as_ref().map(|f| f.class);
                self.store_record(&unit, attempt, case, exchange);
                match class {
                    None => {
                        tally.succeeded += 1;
                        break;
                    }
                    Some(c) if attempt < unit.last_attempt && is_retryable(c) => {
                        tally.retries += 1;
                        let wait = BASE_BACKOFF.saturating_mul(1 << (attempt - unit.first_attempt).min(8));
                        tokio::select! {
                            _ = tokio::time::sleep(wait.min(MAX_BACKOFF)) => {}
                            _ = cancel.cancelled() => return tally,
                        }
                        ready = Instant::now();
                    }
                    Some(_) => {
                        tally.failed += 1;
                        break;
                    }
                }
            }
        }
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

    fn store_record(&self, unit: &Unit, attempt: u32, case: &EvalCase, exchange: Exchange) {
        let graded = exchange.succeeded();
        let (mut record, chunk_text) = exchange.into_parts(RecordIdentity {
            run_id: self.run_id,
            candidate_id: self.candidate.id,
            case_id: case.id.clone(),
            phase: unit.phase,
            repetition: unit.repetition,
            attempt,
            concurrency: self.config.concurrency,
            is_warmup: unit.is_warmup,
        });
        if graded {
            // Judge graders need a model call of their own; they are not graded here.
            record.grades = self
                .file
                .graders_for(case)
                .iter()
                .filter(|g| !g.needs_model())
                .map(|g| grade(g, &record.output, case.expected.as_ref()))
                .collect();
        }
        if !self.records.send(record, chunk_text) {
            tracing::error!(run_id = self.run_id, "record writer stopped; a record was dropped");
        }
    }
}

/// The `x-request-id` bakeoff sends with an attempt.
pub fn request_id(
    run_id: i64,
    candidate_id: i64,
    phase: Phase,
    case_index: usize,
    repetition: u32,
    attempt: u32,
) -> String {
    format!(
        "bakeoff-{run_id}-{candidate_id}-{}-{case_index}-{repetition}-{attempt}",
        phase.as_str()
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
        let records = vec![
            rec("a", 0, 0, None, false),
            rec("b", 0, 0, Some(ErrorClass::HttpServerError), false),
            rec("c", 0, 0, Some(ErrorClass::HttpServerError), false),
            rec("c", 0, 1, Some(ErrorClass::StreamCut), false),
            rec("d", 0, 0, Some(ErrorClass::ContextLengthExceeded), false),
            rec("w", 0, 0, None, true),
            rec("w", 1, 0, None, true),
        ];
        let done = FinishedUnits::from_records(&records, 3, 1);
        assert_eq!(done.next_attempt("a", MEASURED_PHASE, 0), None);
        assert_eq!(done.next_attempt("a", MEASURED_PHASE, 1), Some(0));
        assert_eq!(done.next_attempt("b", MEASURED_PHASE, 0), Some(1));
        assert_eq!(done.next_attempt("c", MEASURED_PHASE, 0), None, "retries used up");
        assert_eq!(done.next_attempt("d", MEASURED_PHASE, 0), None, "not worth retrying");
        assert_eq!(done.next_attempt("new", MEASURED_PHASE, 0), Some(0));
        assert_eq!(done.warmups, 2);
        let other = FinishedUnits::from_records(&records, 4, 1);
        assert_eq!(other.next_attempt("a", MEASURED_PHASE, 0), Some(0));
    }

    #[test]
    fn deterministic_failures_are_not_retried() {
        assert!(!is_retryable(ErrorClass::ContextLengthExceeded));
        assert!(!is_retryable(ErrorClass::HttpClientError));
        assert!(is_retryable(ErrorClass::RateLimited));
        assert!(is_retryable(ErrorClass::StreamCut));
    }
}
