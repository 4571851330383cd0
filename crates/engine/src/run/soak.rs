//! Soak: a fixed concurrency held for a set duration, re-sending the eval set's cases round-robin,
//! every request recorded with `Phase::Soak`. `domain::stability::soak_analysis` windows the
//! records and says whether the endpoint degrades. Bounded by duration *and* request count.
//!
//! A soak run is stored with `RunConfig::soak` and writes its records as they arrive, so after a
//! restart (even kill -9) [`resume`] continues it as a soak: numbering after the last stored
//! request, for the part of its duration not yet covered by stored records. The time bakeoff
//! was down is not load time: `domain::stability::soak_analysis` cuts such pauses out of its
//! windows and says so, and the run's events state what was kept and what is re-measured.
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::writer::{self, Grading, Pending, RecordSender, RecordWriter, WriterSettings};
use crate::cancel::Cancel;
use crate::domain::candidate::Candidate;
use crate::domain::evalset::EvalSetFile;
use crate::domain::load::{Load, LoadShape};
use crate::domain::run::{
    CYCLE_LIMIT, NewRun, Phase, RequestRecord, Run, RunConfig, RunStatus, join_repetition, split_repetition,
};
use crate::error::EngineError;
use crate::store::{DynStore, EvalSetVersion};
use crate::tokens::{server_tokenizer, tokenizer};
use crate::wire::client::{CandidateClient, Exchange, RecordIdentity, Timeouts, wall_clock_us};
use crate::wire::protocol::RequestParams;
use crate::wire::provider::prepare;

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
            soak: true,
            ..RunConfig::default()
        }
    }

    /// The soak a stored soak run describes (the inverse of [`SoakConfig::run_config`]).
    pub fn from_run_config(c: &RunConfig) -> SoakConfig {
        let d = SoakConfig::default();
        SoakConfig {
            concurrency: c.concurrency.max(1),
            duration: c
                .duration_secs
                .map_or(d.duration, |s| Duration::from_secs(u64::from(s))),
            max_requests: c.requests_per_level.unwrap_or(d.max_requests),
            timeout: Duration::from_secs(u64::from(c.timeout_secs.max(1))),
            max_tokens: c.max_tokens,
            temperature: c.temperature,
            stream: c.stream,
        }
    }
}

/// What a soak sent: how many requests, how many failed, and (when not written as they
/// arrived) the records themselves.
struct Sent {
    pending: Vec<Pending>,
    total: usize,
    failed: usize,
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
    Ok(send(run_id, candidate, file, config, cancel, 0, None).await?.pending)
}

/// Sends a soak whose first request is number `first` (cycle `first / cases`, so a resumed soak
/// never reuses a stored request's key). With `sink`, records go to the store as they arrive.
async fn send(
    run_id: i64,
    candidate: &Candidate,
    file: Arc<EvalSetFile>,
    config: &SoakConfig,
    cancel: Option<Cancel>,
    first: u32,
    sink: Option<RecordSender>,
) -> Result<Sent, EngineError> {
    if file.cases.is_empty() {
        return Ok(Sent {
            pending: Vec::new(),
            total: 0,
            failed: 0,
        });
    }
    let load = Load::soak(config.concurrency);
    let concurrency = load.max_in_flight() as u32;
    let timeouts = Timeouts {
        connect: config.timeout.min(Duration::from_secs(10)),
        first_token: config.timeout,
        stall: Duration::from_secs(u64::from(crate::domain::run::DEFAULT_STALL_TIMEOUT_SECS)).min(config.timeout),
        total: config.timeout,
    };
    let client =
        CandidateClient::new(&candidate.spec, load.pool_size(), timeouts).map_err(|e| EngineError::Client {
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
    let limit = first
        .saturating_add(config.max_requests.min(MAX_SOAK_REQUESTS))
        .min(cases.saturating_mul(CYCLE_LIMIT));
    let shared = Arc::new(Shared {
        run_id,
        candidate: candidate.clone(),
        file,
        client,
        params,
        concurrency,
        next: AtomicU32::new(first),
        limit,
        end: Instant::now() + config.duration,
        cancel,
        sink,
        total: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
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
    Ok(Sent {
        pending: out,
        total: shared.total.load(Ordering::Relaxed),
        failed: shared.failed.load(Ordering::Relaxed),
    })
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
    /// Where records go as they arrive (None: returned at the end).
    sink: Option<RecordSender>,
    total: AtomicUsize,
    failed: AtomicUsize,
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
            // While the database is away and the writer's backlog is full, no new request.
            if let Some(sink) = &self.sink {
                match &self.cancel {
                    Some(cancel) => {
                        let mut cancel = cancel.clone();
                        tokio::select! {
                            _ = sink.room() => {}
                            _ = cancel.cancelled() => break,
                        }
                    }
                    None => sink.room().await,
                }
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
                Err(failure) => Exchange {
                    sent_at_us: wall_clock_us(),
                    failure: Some(failure),
                    ..Default::default()
                },
            };
            let (record, chunk_text) = exchange.into_parts(identity);
            self.total.fetch_add(1, Ordering::Relaxed);
            if !record.succeeded() {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
            let grading = record.succeeded().then(|| Grading {
                file: self.file.clone(),
                case_index,
                turn: None,
            });
            match &self.sink {
                Some(sink) => {
                    sink.send(record, chunk_text, grading);
                }
                None => out.push(Pending {
                    grading,
                    record,
                    chunk_text,
                }),
            }
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
            tokenizer::complete_counts(&mut p.record, &p.chunk_text);
            p.record
        })
        .collect()
}

/// Stores a queued soak run named `name` for `candidate` over an eval-set version and returns
/// its id; hand it to the `Runner`, which admits it under the caps like any run (the executor
/// sends it as a soak, see [`resume`]).
pub async fn create_run(
    store: &DynStore,
    name: &str,
    candidate: &Candidate,
    evalset_version_id: i64,
    config: &SoakConfig,
) -> Result<i64, EngineError> {
    if store.get_evalset_version_head(evalset_version_id).await?.is_none() {
        return Err(EngineError::EvalSetNotFound {
            run_id: 0,
            version_id: evalset_version_id,
        });
    }
    Ok(store
        .create_run(&NewRun {
            name: name.to_string(),
            evalset_version_id,
            candidate_ids: vec![candidate.id],
            config: config.run_config(),
        })
        .await?)
}

/// Creates a soak run and sends it at once, outside any `Runner` (tests and tools that own the
/// candidate), storing every record (graded, counted; the writer's default settings, as the
/// store's URL is not known here); returns the run id. The operability page
/// goes through the runner instead ([`create_run`]), so a soak never overlaps another run.
pub async fn soak_run(
    store: &DynStore,
    name: &str,
    candidate: &Candidate,
    evalset_version_id: i64,
    config: &SoakConfig,
) -> Result<i64, EngineError> {
    let run_id = create_run(store, name, candidate, evalset_version_id, config).await?;
    let run = store.get_run(run_id).await?.ok_or(EngineError::RunNotFound(run_id))?;
    let version = store
        .get_evalset_version(evalset_version_id)
        .await?
        .ok_or(EngineError::EvalSetNotFound {
            run_id,
            version_id: evalset_version_id,
        })?;
    let status = resume(
        store,
        &run,
        version,
        candidate,
        Cancel::never(),
        &WriterSettings::default(),
    )
    .await?;
    match status {
        RunStatus::Failed => Err(EngineError::Internal(format!(
            "soak run {run_id} failed; its events say why"
        ))),
        _ => Ok(run_id),
    }
}

/// How a soak's records are written: where the writer spills, when it pauses the run.
struct Writing<'a> {
    settings: &'a WriterSettings,
    cancel: Cancel,
}

/// Sends the soak (from request number `first`), writing records as they arrive (spilling and
/// pausing as every run does), then counts tokens and marks the run finished (or cancelled,
/// paused, or failed with the reason).
async fn finish_soak(
    store: &DynStore,
    run_id: i64,
    candidate: &Candidate,
    file: Arc<EvalSetFile>,
    config: &SoakConfig,
    writing: Writing<'_>,
    first: u32,
) -> Result<RunStatus, EngineError> {
    let started = Instant::now();
    let writer = RecordWriter::spawn_with(store.clone(), run_id, writing.settings.clone());
    // The soak stops the same way when cancelled and when the writer pauses the run.
    let user_cancel = writing.cancel;
    let load_cancel = user_cancel.or_when(writer.paused());
    let outcome = send(
        run_id,
        candidate,
        file,
        config,
        Some(load_cancel.clone()),
        first,
        Some(writer.sender()),
    )
    .await;
    // Whatever happened, what was measured is stored before the status changes.
    let stored = writer.finish().await;
    let (sent, end) = match outcome.and_then(|s| stored.map(|end| (s, end))) {
        Ok(done) => done,
        Err(e) => {
            store
                .set_run_status(run_id, RunStatus::Failed, Some(&e.to_string()))
                .await?;
            return Ok(RunStatus::Failed);
        }
    };
    let load_cut = load_cancel.is_cancelled() && !user_cancel.is_cancelled();
    if let Some(message) = end.pause_message(load_cut) {
        writer::append_event_patiently(store, run_id, "warn", &message).await?;
        store.set_run_status(run_id, RunStatus::Paused, Some(&message)).await?;
        return Ok(RunStatus::Paused);
    }
    let cancel = user_cancel;
    if cancel.is_cancelled() {
        store.set_run_status(run_id, RunStatus::Cancelled, None).await?;
        store.append_run_event(run_id, "warn", "cancelled").await?;
        return Ok(RunStatus::Cancelled);
    }
    // The soak's load has ended: a declared tokenize endpoint counts what streams left uncounted.
    server_tokenizer::count_run(store, run_id, std::slice::from_ref(candidate), &cancel).await?;
    store
        .append_run_event(
            run_id,
            if sent.failed > 0 { "warn" } else { "info" },
            &format!(
                "{}: soak done in {:.1} s, {} requests, {} failed",
                candidate.spec.name,
                started.elapsed().as_secs_f64(),
                sent.total,
                sent.failed
            ),
        )
        .await?;
    store.set_run_status(run_id, RunStatus::Finished, None).await?;
    Ok(RunStatus::Finished)
}

/// Sends a soak run once the runner admitted it. A run never started before sends the whole
/// soak. An unfinished one (a restart) continues as a soak: stored records are kept (those
/// in flight at the stop were lost), numbering continues after the last stored request, and
/// only the part of the duration and request budget not covered by stored records is sent.
/// The run's events say so; the trend windows leave the downtime out.
pub async fn resume(
    store: &DynStore,
    run: &Run,
    version: EvalSetVersion,
    candidate: &Candidate,
    cancel: Cancel,
    settings: &WriterSettings,
) -> Result<RunStatus, EngineError> {
    let config = SoakConfig::from_run_config(&run.config);
    let file = Arc::new(version.file);
    let writing = Writing { settings, cancel };
    // Records the previous process spilled and could not store before it ended, first.
    let replayed = writer::replay_spilled(store, settings, run.id).await?;
    if let Some(message) = replayed.message() {
        store.append_run_event(run.id, "warn", &message).await?;
    }
    // started_at records the first start only: None means nothing was ever sent.
    if run.started_at.is_none() {
        store.set_run_status(run.id, RunStatus::Running, None).await?;
        store
            .append_run_event(
                run.id,
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
        return finish_soak(store, run.id, candidate, file, &config, writing, 0).await;
    }
    let kept: Vec<RequestRecord> = store
        .list_request_records(run.id)
        .await?
        .into_iter()
        .filter(|r| r.phase == Phase::Soak && r.candidate_id == candidate.id)
        .collect();
    let cases = file.cases.len() as u32;
    let first = kept
        .iter()
        .filter_map(|r| {
            let case = file.cases.iter().position(|c| *c.id == *r.case_id)? as u32;
            Some(split_repetition(r.repetition).2 * cases + case + 1)
        })
        .max()
        .unwrap_or(0);
    let end_us = |r: &RequestRecord| r.sent_at_us + r.last_heard_us();
    let covered = match (kept.iter().map(|r| r.sent_at_us).min(), kept.iter().map(end_us).max()) {
        (Some(a), Some(b)) if b > a => Duration::from_micros((b - a) as u64),
        _ => Duration::ZERO,
    };
    let remaining = config.duration.saturating_sub(covered);
    let budget = config.max_requests.saturating_sub(first);
    store.set_run_status(run.id, RunStatus::Running, None).await?;
    let message = if kept.is_empty() {
        format!(
            "resumed soak after a restart: no request had been stored, so the soak starts over for its full {:.0} s",
            config.duration.as_secs_f64()
        )
    } else {
        format!(
            "resumed soak after a restart: {} stored soak requests kept, covering {:.1} s of the {:.0} s soak \
             (requests in flight at the stop were lost); continuing at concurrency {} for the remaining {:.1} s, \
             at most {} more requests. The time bakeoff was down is not load: the trend windows leave it out.",
            kept.len(),
            covered.as_secs_f64(),
            config.duration.as_secs_f64(),
            config.concurrency,
            remaining.as_secs_f64(),
            budget
        )
    };
    store.append_run_event(run.id, "info", &message).await?;
    if remaining.is_zero() || budget == 0 {
        store
            .append_run_event(
                run.id,
                "info",
                "the soak's duration or request budget was used up before the restart; nothing more is sent",
            )
            .await?;
        store.set_run_status(run.id, RunStatus::Finished, None).await?;
        return Ok(RunStatus::Finished);
    }
    let rest = SoakConfig {
        duration: remaining,
        max_requests: budget,
        ..config
    };
    finish_soak(store, run.id, candidate, file, &rest, writing, first).await
}
