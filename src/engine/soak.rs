//! Soak: a fixed concurrency held for a set duration, re-sending the eval set's cases round-robin,
//! every request recorded with `Phase::Soak`. `domain::stability::soak_analysis` windows the
//! records and says whether the endpoint degrades. Bounded by duration *and* request count.
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::{CandidateClient, RecordIdentity, Timeouts};
use super::error::EngineError;
use super::executor::Cancel;
use super::provider::{RequestParams, prepare};
use super::writer::{Grading, Pending, RecordWriter};
use crate::domain::candidate::Candidate;
use crate::domain::evalset::EvalSetFile;
use crate::domain::run::{CYCLE_LIMIT, LoadShape, NewRun, Phase, RequestRecord, RunConfig, RunStatus, join_repetition};
use crate::store::DynStore;

/// Most requests one soak sends, whatever its duration.
pub const MAX_SOAK_REQUESTS: u32 = 100_000;

/// How a soak runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakConfig {
    /// Requests in flight at once (closed loop).
    pub concurrency: u32,
    /// No request is sent after this much time; those in flight finish.
    pub duration: Duration,
    /// Stop after this many requests even if time remains.
    pub max_requests: u32,
    /// Whole-request timeout.
    pub timeout: Duration,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub stream: bool,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            concurrency: 4,
            duration: Duration::from_secs(60),
            max_requests: 10_000,
            timeout: Duration::from_secs(60),
            max_tokens: None,
            temperature: Some(0.2),
            stream: true,
        }
    }
}

impl SoakConfig {
    /// The run configuration stored with a soak run (its identity on every page).
    pub fn run_config(&self) -> RunConfig {
        RunConfig {
            concurrency: self.concurrency,
            repetitions: 1,
            warmup_requests: 0,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            timeout_secs: self.timeout.as_secs().max(1) as u32,
            retries: 0,
            stream: self.stream,
            load: LoadShape::Fixed,
            staged_rollout: false,
            requests_per_level: Some(self.max_requests),
            duration_secs: Some(self.duration.as_secs().max(1) as u32),
            ..RunConfig::default()
        }
    }
}

/// Sends the soak and returns every measured request (token counts and grades not yet
/// completed: hand them to a `RecordWriter`, or use [`complete`]). Stops early when cancelled.
pub async fn soak(
    run_id: i64,
    candidate: &Candidate,
    file: Arc<EvalSetFile>,
    config: &SoakConfig,
    cancel: Option<Cancel>,
) -> Result<Vec<Pending>, EngineError> {
    if file.cases.is_empty() {
        return Ok(Vec::new());
    }
    let concurrency = config.concurrency.clamp(1, 1024);
    let timeouts = Timeouts {
        connect: config.timeout.min(Duration::from_secs(10)),
        first_token: config.timeout,
        total: config.timeout,
    };
    let client = CandidateClient::new(&candidate.spec, concurrency, timeouts).map_err(|e| EngineError::Client {
        candidate: candidate.spec.name.clone(),
        message: e.to_string(),
    })?;
    let params = RequestParams {
        max_tokens: config
            .max_tokens
            .or(file.header.max_tokens)
            .or(candidate.spec.max_tokens),
        temperature: config
            .temperature
            .or(file.header.temperature)
            .or(candidate.spec.temperature),
        stream: config.stream,
    };
    let cases = file.cases.len() as u32;
    // Every request keeps a unique (case, phase, repetition) key: the round is the cycle.
    let limit = config
        .max_requests
        .min(MAX_SOAK_REQUESTS)
        .min(cases.saturating_mul(CYCLE_LIMIT));
    let shared = Arc::new(Shared {
        run_id,
        candidate: candidate.clone(),
        file,
        client,
        params,
        concurrency,
        next: AtomicU32::new(0),
        limit,
        end: Instant::now() + config.duration,
        cancel,
    });
    let mut workers = JoinSet::new();
    for _ in 0..concurrency {
        workers.spawn(shared.clone().worker());
    }
    let mut out = Vec::new();
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(mut records) => out.append(&mut records),
            Err(e) => {
                workers.abort_all();
                return Err(EngineError::Internal(format!("a soak worker ended abnormally: {e}")));
            }
        }
    }
    out.sort_by_key(|p| p.record.sent_at_us);
    Ok(out)
}

struct Shared {
    run_id: i64,
    candidate: Candidate,
    file: Arc<EvalSetFile>,
    client: CandidateClient,
    params: RequestParams,
    concurrency: u32,
    next: AtomicU32,
    limit: u32,
    end: Instant,
    cancel: Option<Cancel>,
}

impl Shared {
    fn stopped(&self) -> bool {
        Instant::now() >= self.end || self.cancel.as_ref().is_some_and(Cancel::is_cancelled)
    }

    async fn worker(self: Arc<Self>) -> Vec<Pending> {
        let mut out = Vec::new();
        let cases = self.file.cases.len() as u32;
        loop {
            if self.stopped() {
                break;
            }
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.limit {
                break;
            }
            let case_index = (i % cases) as usize;
            let case = &self.file.cases[case_index];
            let identity = RecordIdentity {
                run_id: self.run_id,
                candidate_id: self.candidate.id,
                case_id: case.id.clone(),
                phase: Phase::Soak,
                repetition: join_repetition(0, 0, i / cases),
                attempt: 0,
                concurrency: self.concurrency,
                is_warmup: false,
            };
            let exchange = match prepare(
                &self.candidate.spec,
                self.client.api_key(),
                &self.file,
                case,
                &self.params,
            ) {
                Ok(request) => {
                    let sending = self.client.send(&request, 0);
                    match &self.cancel {
                        Some(cancel) => {
                            let mut cancel = cancel.clone();
                            tokio::select! {
                                x = sending => x,
                                _ = cancel.cancelled() => break, // in flight when cancelled: not recorded
                            }
                        }
                        None => sending.await,
                    }
                }
                Err(failure) => super::client::Exchange {
                    sent_at_us: super::client::wall_clock_us(),
                    failure: Some(failure),
                    ..Default::default()
                },
            };
            let (record, chunk_text) = exchange.into_parts(identity);
            out.push(Pending {
                grading: record.succeeded().then(|| Grading {
                    file: self.file.clone(),
                    case_index,
                }),
                record,
                chunk_text,
            });
        }
        out
    }
}

/// Completes token counts without a store (grades are left empty): for tests and analyses
/// that only need timings.
pub fn complete(pending: Vec<Pending>) -> Vec<RequestRecord> {
    pending
        .into_iter()
        .map(|mut p| {
            super::tokenizer::complete_counts(&mut p.record, &p.chunk_text);
            p.record
        })
        .collect()
}

/// Creates a run named `name` for `candidate` over an eval-set version, soaks it, stores every
/// record (graded, counted) and marks the run finished; returns the run id. The run appears in
/// the run list like any other, its records in the `soak` phase.
pub async fn soak_run(
    store: &DynStore,
    name: &str,
    candidate: &Candidate,
    evalset_version_id: i64,
    config: &SoakConfig,
) -> Result<i64, EngineError> {
    let version = store
        .get_evalset_version(evalset_version_id)
        .await?
        .ok_or(EngineError::EvalSetNotFound {
            run_id: 0,
            version_id: evalset_version_id,
        })?;
    let run_id = store
        .create_run(&NewRun {
            name: name.to_string(),
            evalset_version_id,
            candidate_ids: vec![candidate.id],
            config: config.run_config(),
        })
        .await?;
    store.set_run_status(run_id, RunStatus::Running, None).await?;
    store
        .append_run_event(
            run_id,
            "info",
            &format!(
                "{}: soak, concurrency {} for {:.0} s (at most {} requests)",
                candidate.spec.name,
                config.concurrency,
                config.duration.as_secs_f64(),
                config.max_requests
            ),
        )
        .await?;
    let started = Instant::now();
    let outcome = soak(run_id, candidate, Arc::new(version.file), config, None).await;
    let pending = match outcome {
        Ok(p) => p,
        Err(e) => {
            store
                .set_run_status(run_id, RunStatus::Failed, Some(&e.to_string()))
                .await?;
            return Err(e);
        }
    };
    let failed = pending.iter().filter(|p| !p.record.succeeded()).count();
    let total = pending.len();
    let writer = RecordWriter::spawn(store.clone());
    let sender = writer.sender();
    for p in pending {
        sender.send(p.record, p.chunk_text, p.grading);
    }
    drop(sender);
    writer.finish().await?;
    // The soak's load has ended: a declared tokenize endpoint counts what streams left uncounted.
    super::server_tokenizer::count_run(store, run_id, std::slice::from_ref(candidate), &Cancel::never()).await?;
    store
        .append_run_event(
            run_id,
            if failed > 0 { "warn" } else { "info" },
            &format!(
                "{}: soak done in {:.1} s, {total} requests, {failed} failed",
                candidate.spec.name,
                started.elapsed().as_secs_f64()
            ),
        )
        .await?;
    store.set_run_status(run_id, RunStatus::Finished, None).await?;
    Ok(run_id)
}
