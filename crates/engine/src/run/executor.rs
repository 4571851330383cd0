//! Executes one stored run, a unit at a time (`domain::workers`: a worker takes each under a
//! lease; `execute` runs them all in this process). A candidate's unit (`execute_unit`; one
//! share of it when its load is split over several clients, `Share`):
//!
//! 1. the staged rollout (unless turned off): the shortest case, the longest case, then a few
//!    requests at once; a failed stage stops that candidate before its budget is spent, with
//!    what failed and the checks to make, in order (`rollout` module);
//! 2. warm-ups, excluded from every figure;
//! 3. every load level of the run's shape (fixed concurrency, a list of concurrencies, a
//!    sweep, or a rate), for every prompt-length bin (cases tagged `prompt_tokens:N`), for every
//!    repetition: closed loop (at most c requests in flight, each replaced when it ends) or open
//!    loop (sent on schedule whatever the server does; the lateness is recorded as the
//!    request's client queue time), with retries; records streamed to the store. A candidate
//!    whose measured requests pass the run's error budget halts (`pool`).
//!
//! One candidate never sinks the others: a candidate stopped at its staged start, by its error
//! budget, or because its client could not be built is stored as stopped with its reason
//! (`CandidateStop`: pages, scorecards and exports show it as that candidate's NO-GO outcome)
//! and the run goes on with the next. The run ends `finished` when at least one candidate was
//! measured (the stopped ones marked), `failed` only when every candidate was stopped.
//!
//! Then the closing step (`close_run`): candidates that declare a tokenize endpoint have their uncounted outputs counted by it
//! (`server_tokenizer`), the units' harness reports (bakeoff's CPU, schedule lag, the
//! unreliable flag; one per worker) are combined and stored with the run, and, when the run turns judging on, the `llm-judge` graders run
//! (`llm_judge`: after all measured load, so judge calls never distort a figure). Resumable: units
//! whose final attempt is stored are skipped, and so are outputs already judged.
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::harness::HarnessClock;
use super::llm_judge;
use super::pool::{CandidateRun, CycleFeed, Feed, FinishedUnits, Tally, Unit};
use super::telemetry::{self, Scraper};
use super::writer::{RecordWriter, WriterSettings};
use super::{rollout, soak};
use crate::cancel::Cancel;
use crate::domain::Timestamp;
use crate::domain::calibers::HarnessReport;
use crate::domain::capacity::saturation_signs;
use crate::domain::evalset::prompt_bin;
use crate::domain::load::Load;
use crate::domain::run::{CandidateStop, Phase, RunStatus, StopStage};
use crate::domain::telemetry::Boundary;
use crate::error::EngineError;
use crate::store::DynStore;
use crate::tokens::server_tokenizer;
use crate::wire::client::wall_clock_us;

/// Records read per query at the end of a unit (the harness report reads them in pages).
const RECORDS_PER_PAGE: i64 = 2_000;

/// Runs `run_id` to its end. Returns the final status: Finished, Cancelled, or Failed when every
/// candidate was stopped (the run's error and events say why). An error means the run could
/// not go on and should be marked failed by the caller.
pub async fn execute(store: DynStore, run_id: i64, cancel: Cancel) -> Result<RunStatus, EngineError> {
    execute_with(store, run_id, cancel, WriterSettings::default()).await
}

/// [`execute`] with the records writer's spill directory and pause limit: a run whose
/// database stays away past the limit ends `Paused` (every finished record stored, through the
/// spill file if need be) and is resumed like an interrupted run.
///
/// Every unit in order in this process (`bakeoff measure` and tests): what the workers do a
/// unit at a time (`Worker`), without leases.
pub async fn execute_with(
    store: DynStore,
    run_id: i64,
    cancel: Cancel,
    writer_settings: WriterSettings,
) -> Result<RunStatus, EngineError> {
    let run = store.get_run(run_id).await?.ok_or(EngineError::RunNotFound(run_id))?;
    if run.status.is_terminal() {
        return Ok(run.status);
    }
    let mut reports = Vec::new();
    for (seq, candidate_id) in run.candidate_ids.iter().enumerate() {
        // One process is one client: a load meant for several is measured whole here.
        let unit = UnitContext {
            seq: seq as u32,
            worker: None,
            share: Share::WHOLE,
            abandoned: None,
        };
        match execute_unit(&store, run_id, *candidate_id, &unit, cancel.clone(), &writer_settings).await? {
            UnitEnd::Done { harness } => reports.extend(harness.map(|h| *h)),
            UnitEnd::RunEnded(status) => return Ok(status),
            UnitEnd::Abandoned => unreachable!("a unit without a lease is never abandoned"),
        }
    }
    close_run(&store, run_id, &reports, cancel).await
}

/// Where a unit is measured: its place in the run and the worker measuring it (None in a
/// process of its own), for the event log.
#[derive(Debug, Clone)]
pub struct UnitContext {
    pub seq: u32,
    pub worker: Option<String>,
    /// This unit's share of the candidate's load (the whole of it unless split).
    pub share: Share,
    /// Turns true when the worker lost its lease (another worker took the unit over): the load
    /// stops and the unit ends `Abandoned`, leaving the run to the new holder.
    pub abandoned: Option<tokio::sync::watch::Receiver<bool>>,
}

/// How one candidate's unit ended.
#[derive(Debug)]
pub enum UnitEnd {
    /// Measured (or stopped, its stop stored): the run goes on with its next unit. The
    /// harness report of this unit's load, when it measured any request.
    Done { harness: Option<Box<HarnessReport>> },
    /// The run ended or paused here with this status (cancelled, paused, failed, or a soak run
    /// to its end): its slot is given up.
    RunEnded(RunStatus),
    /// The worker lost its lease mid-unit: what it measured is stored (records are keyed, so
    /// the new holder neither sends nor stores them again) and the run is left as it is.
    Abandoned,
}

/// Reads the run and its eval-set version for a unit; `Err(status)` when the run has already
/// ended (here or elsewhere): nothing to do.
async fn open_run(
    store: &DynStore,
    run_id: i64,
) -> Result<Result<(crate::domain::run::Run, crate::store::EvalSetVersion), RunStatus>, EngineError> {
    let run = store.get_run(run_id).await?.ok_or(EngineError::RunNotFound(run_id))?;
    if run.status.is_terminal() {
        return Ok(Err(run.status));
    }
    let version = store
        .get_evalset_version(run.evalset_version_id)
        .await?
        .ok_or(EngineError::EvalSetNotFound {
            run_id,
            version_id: run.evalset_version_id,
        })?;
    Ok(Ok((run, version)))
}

/// Measures one candidate's part of a run (its unit): the staged start, warm-ups and every
/// level, records streamed to the store. Resumable: attempts already stored are not sent again,
/// a candidate stopped before stays stopped. A soak run is one unit: its whole soak.
pub async fn execute_unit(
    store: &DynStore,
    run_id: i64,
    candidate_id: i64,
    unit: &UnitContext,
    cancel: Cancel,
    writer_settings: &WriterSettings,
) -> Result<UnitEnd, EngineError> {
    let (run, version) = match open_run(store, run_id).await? {
        Err(status) => return Ok(UnitEnd::RunEnded(status)),
        Ok(opened) => opened,
    };
    if run.candidate_ids.is_empty() {
        return Err(EngineError::NoCandidates(run_id));
    }
    let candidate = store
        .get_candidate(candidate_id)
        .await?
        .ok_or(EngineError::CandidateNotFound { run_id, candidate_id })?;
    let case_count = run.config.case_count(version.file.cases.len());
    let first = unit.seq == 0;
    // Every judge is found before anything is sent, so a missing one costs nothing.
    if first && let Err(message) = llm_judge::resolve(store, &run, &version.file, case_count).await? {
        store.append_run_event(run_id, "error", &message).await?;
        store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
        return Ok(UnitEnd::RunEnded(RunStatus::Failed));
    }
    // A soak (the operability page's) resumes as a soak, not as an ordinary run of its config.
    if run.config.soak {
        let status = soak::resume(store, &run, version, &candidate, cancel, writer_settings).await?;
        return Ok(UnitEnd::RunEnded(status));
    }
    // Records the previous process spilled and could not store before it ended, first.
    let replayed = super::writer::replay_spilled(store, writer_settings, run_id).await?;
    // Keys and outcomes only: what resuming needs to skip settled units, without the text.
    let existing = store.list_record_facts(run_id).await?;
    let mine = existing.iter().filter(|f| f.candidate_id == candidate_id).count();
    store.set_run_status(run_id, RunStatus::Running, None).await?;
    let name = &candidate.spec.name;
    let started = started_message(&run, &version, unit, existing.is_empty() && first, mine, name);
    if !started.is_empty() {
        store.append_run_event(run_id, "info", &started).await?;
    }
    if let Some(message) = replayed.message() {
        store.append_run_event(run_id, "warn", &message).await?;
    }
    before_load(store, &run, &version, &candidate, first, case_count).await?;
    if stopped_before(store, run_id, candidate_id, name).await? {
        return Ok(UnitEnd::Done { harness: None });
    }

    let clock = HarnessClock::start();
    let since_us = wall_clock_us();
    let file = if run.config.unconstrained_twins {
        crate::domain::tool_calls::structured::with_twins(version.file)
    } else {
        version.file
    };
    let file = Arc::new(file);
    let writer = RecordWriter::spawn_with(store.clone(), run_id, writer_settings.clone());
    // The load stops the same way when the run is cancelled and when the writer pauses it.
    let user_cancel = cancel;
    let cancel = match &unit.abandoned {
        Some(lost) => user_cancel.or_when(lost.clone()),
        None => user_cancel.clone(),
    };
    let cancel = cancel.or_when(writer.paused());
    let mut done = FinishedUnits::from_facts(&existing, candidate_id, run.config.retries);
    drop(existing);
    let continued = load_histories(store, run_id, candidate_id, &file, &mut done).await?;
    if continued > 0 {
        let msg = format!(
            "{name}: {continued} conversation(s) cut by the restart go on from the turn they reached, with the \
             replies already stored as their history"
        );
        store.append_run_event(run_id, "info", &msg).await?;
    }
    let split = unit.share.split_refused(&run.config, case_count);
    let ctx = CandidateRun::new(&run, &candidate, file, writer.sender(), cancel.clone());
    let outcome = load_candidate(ctx, split, name, store, done, unit).await;
    // The pause cut the load short (not a run that had sent everything when it came).
    let load_paused = cancel.is_cancelled() && !user_cancel.is_cancelled();
    // Whatever happened, everything measured so far is stored before the status changes.
    let stored = writer.finish().await;
    let outcome = outcome?;
    let writer_end = stored?;
    if unit.abandoned.as_ref().is_some_and(|lost| *lost.borrow()) {
        return Ok(UnitEnd::Abandoned);
    }
    if let Some(message) = writer_end.pause_message(load_paused) {
        super::writer::append_event_patiently(store, run_id, "warn", &message).await?;
        store.set_run_status(run_id, RunStatus::Paused, Some(&message)).await?;
        return Ok(UnitEnd::RunEnded(RunStatus::Paused));
    }
    // The harness clock covers the load only.
    let harness = unit_harness(store, &run, candidate_id, unit, clock, since_us).await?;
    end_unit(
        store,
        &run,
        candidate_id,
        name,
        outcome,
        harness,
        user_cancel.is_cancelled(),
    )
    .await
}

/// Turn keys read back in one query at most (bind parameters stay far below any limit).
const HISTORY_KEYS_PER_READ: usize = 500;

/// The replies a resumed run's unfinished conversations already got, read back from their
/// stored turns (successful attempts) into `done`, so each goes on from its next turn with the
/// history it really had. Returns how many conversations go on past their first turn.
async fn load_histories(
    store: &DynStore,
    run_id: i64,
    candidate_id: i64,
    file: &crate::domain::evalset::EvalSetFile,
    done: &mut FinishedUnits,
) -> Result<usize, EngineError> {
    use crate::domain::evalset::conversation::{split_turn_key, turn_key};
    let turns: HashMap<&str, usize> = file
        .cases
        .iter()
        .filter(|c| c.is_conversation())
        .map(|c| (c.id.as_str(), c.turns.len()))
        .collect();
    let todo = done.conversations_to_continue(|id| turns.get(id).copied());
    if todo.is_empty() {
        return Ok(0);
    }
    let mut keys: Vec<String> = todo
        .iter()
        .flat_map(|(case, _, _, next)| (1..=*next).map(move |k| turn_key(case, k)))
        .collect();
    keys.sort();
    keys.dedup();
    let mut replies: HashMap<(String, Phase, u32), Vec<String>> = todo
        .iter()
        .map(|(case, phase, rep, next)| ((case.clone(), *phase, *rep), vec![String::new(); *next]))
        .collect();
    for chunk in keys.chunks(HISTORY_KEYS_PER_READ) {
        for r in store.list_case_records(run_id, chunk).await? {
            if r.candidate_id != candidate_id || r.is_warmup || !r.succeeded() {
                continue;
            }
            let Some((case, k)) = split_turn_key(&r.case_id) else {
                continue;
            };
            if let Some(slot) = replies
                .get_mut(&(case.to_string(), r.phase, r.repetition))
                .and_then(|v| v.get_mut(k - 1))
            {
                *slot = r.output().to_string();
            }
        }
    }
    let n = replies.len();
    for ((case, phase, rep), got) in replies {
        done.with_replies(&case, phase, rep, got);
    }
    Ok(n)
}

/// The candidate's load, unless it cannot start: a split load the run refuses, or a setup
/// that failed (then a stop at setup, saying why).
async fn load_candidate(
    ctx: Result<Arc<CandidateRun>, EngineError>,
    split: Option<String>,
    name: &str,
    store: &DynStore,
    done: FinishedUnits,
    unit: &UnitContext,
) -> Result<Outcome, EngineError> {
    match ctx {
        Ok(_) if split.is_some() => {
            let reason = split.unwrap_or_default();
            Ok(Outcome::Stopped {
                stage: StopStage::Setup,
                message: format!("{name}: {reason}"),
                reason,
            })
        }
        Ok(ctx) => run_candidate(ctx, store, done, unit).await,
        Err(e) => Ok(Outcome::Stopped {
            stage: StopStage::Setup,
            reason: e.to_string(),
            message: e.to_string(),
        }),
    }
}

/// Before any load: one call per declared tokenize endpoint (so a wrong one shows now), and on
/// the first unit a word that llm-judge graders are not run when judging is off.
async fn before_load(
    store: &DynStore,
    run: &crate::domain::run::Run,
    version: &crate::store::EvalSetVersion,
    candidate: &crate::domain::candidate::Candidate,
    first: bool,
    case_count: usize,
) -> Result<(), EngineError> {
    server_tokenizer::preflight(store, run.id, std::slice::from_ref(candidate)).await?;
    if first && run.config.judge.is_none() && !version.file.judge_names(case_count).is_empty() {
        store
            .append_run_event(
                run.id,
                "info",
                "llm-judge graders are not run: judging is off for this run (turn it on on the run form)",
            )
            .await?;
    }
    Ok(())
}

/// The run event a unit starts with: the run's start, a resume keeping `mine` stored records,
/// or the worker measuring it; empty when there is nothing to say.
fn started_message(
    run: &crate::domain::run::Run,
    version: &crate::store::EvalSetVersion,
    unit: &UnitContext,
    fresh_run: bool,
    mine: usize,
    name: &str,
) -> String {
    let by = unit
        .worker
        .as_deref()
        .map(|w| format!(" by worker {w}"))
        .unwrap_or_default();
    if fresh_run {
        format!(
            "started: {} candidate(s), eval set version {} ({} cases), load {}{by}",
            run.candidate_ids.len(),
            &version.content_hash[..version.content_hash.len().min(12)],
            version.file.cases.len(),
            match run.config.load.search_settings() {
                Some(s) => format!(
                    "find capacity @ SLO over {} from {} (bracket within {} %, at most {} probe levels)",
                    match s.axis {
                        crate::domain::capacity::LoadAxis::Rate => "request rate",
                        crate::domain::capacity::LoadAxis::Concurrency => "concurrency",
                    },
                    s.axis.format(s.start),
                    crate::domain::format::shortest((s.width * 100.0 * 1e6).round() / 1e6),
                    s.max_probes
                ),
                None => run
                    .config
                    .loads()
                    .iter()
                    .map(Load::label)
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        )
    } else if mine > 0 {
        format!("resumed: {mine} stored records of {name} kept{by}")
    } else if unit.worker.is_some() {
        format!("{name}: measured{by}")
    } else {
        String::new()
    }
}

/// Whether the candidate was stopped before a restart (then it stays stopped, its outcome
/// already stored; the run's log says so).
async fn stopped_before(store: &DynStore, run_id: i64, candidate_id: i64, name: &str) -> Result<bool, EngineError> {
    let Some(stop) = store
        .list_candidate_stops(run_id)
        .await?
        .into_iter()
        .find(|s| s.candidate_id == candidate_id)
    else {
        return Ok(false);
    };
    let msg = format!("{name}: {} (before the restart); not sent again", stop.outcome());
    store.append_run_event(run_id, "warn", &msg).await?;
    Ok(true)
}

/// The unit's harness report (None when it measured nothing), from its records read a page at
/// a time: memory stays bounded whatever the run's size.
async fn unit_harness(
    store: &DynStore,
    run: &crate::domain::run::Run,
    candidate_id: i64,
    unit: &UnitContext,
    clock: HarnessClock,
    since_us: i64,
) -> Result<Option<Box<HarnessReport>>, EngineError> {
    let clock = clock.stop().await;
    let mut tally = clock.tally();
    let mut after = 0;
    loop {
        let page = store.list_request_records_page(run.id, after, RECORDS_PER_PAGE).await?;
        let Some(&(last, _)) = page.last() else { break };
        after = last;
        page.iter()
            .filter(|(_, r)| r.candidate_id == candidate_id && r.sent_at_us >= since_us)
            .for_each(|(_, r)| tally.add(r));
    }
    let measured = tally.measured();
    let mut report = clock.report_tally(&run.config, tally);
    if let Some(w) = &unit.worker {
        report.host = format!("{} (worker {w})", report.host);
    }
    Ok((measured > 0).then(|| Box::new(report)))
}

/// How a unit whose load has ended ends: a stopped candidate is recorded (failing the run when
/// it was the only one, unless cancelled), a cancelled run is marked so; else done.
async fn end_unit(
    store: &DynStore,
    run: &crate::domain::run::Run,
    candidate_id: i64,
    name: &str,
    outcome: Outcome,
    harness: Option<Box<HarnessReport>>,
    cancelled: bool,
) -> Result<UnitEnd, EngineError> {
    let run_id = run.id;
    if let Outcome::Stopped { stage, reason, message } = outcome {
        let stop = CandidateStop {
            run_id,
            candidate_id,
            stage,
            reason,
            at: Timestamp::now(),
        };
        let alone = run.candidate_ids.len() == 1;
        record_stop(store, name, &stop, !alone).await?;
        if alone && !cancelled {
            // Nothing else to measure: the run fails with the whole story.
            if let Some(report) = &harness {
                record_harness(store, run_id, report).await?;
            }
            store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
            return Ok(UnitEnd::RunEnded(RunStatus::Failed));
        }
    }
    if cancelled {
        if let Some(report) = &harness {
            record_harness(store, run_id, report).await?;
        }
        store.set_run_status(run_id, RunStatus::Cancelled, None).await?;
        store.append_run_event(run_id, "warn", "cancelled").await?;
        return Ok(UnitEnd::RunEnded(RunStatus::Cancelled));
    }
    Ok(UnitEnd::Done { harness })
}

/// The run's closing step, after every candidate's unit: the declared tokenize endpoints count
/// what streams left uncounted, the units' harness reports are combined and stored with the
/// run, the `llm-judge` graders run (after all measured load, so judge calls never distort a
/// figure), and the run gets its final status.
pub async fn close_run(
    store: &DynStore,
    run_id: i64,
    reports: &[HarnessReport],
    cancel: Cancel,
) -> Result<RunStatus, EngineError> {
    let (run, version) = match open_run(store, run_id).await? {
        Err(status) => return Ok(status),
        Ok(opened) => opened,
    };
    let mut candidates = Vec::with_capacity(run.candidate_ids.len());
    for &candidate_id in &run.candidate_ids {
        let c = store
            .get_candidate(candidate_id)
            .await?
            .ok_or(EngineError::CandidateNotFound { run_id, candidate_id })?;
        candidates.push(c);
    }
    let case_count = run.config.case_count(version.file.cases.len());
    // Every candidate's load has ended (two may share a server): now, and on resume, the
    // declared tokenize endpoints count what streams left uncounted.
    if !cancel.is_cancelled() {
        server_tokenizer::count_run(store, run_id, &candidates, &cancel).await?;
    }
    if let Some(report) = HarnessReport::combine(reports) {
        record_harness(store, run_id, &report).await?;
    }
    let stops = store.list_candidate_stops(run_id).await?;
    let name_of = |id: i64| {
        candidates
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.spec.name.clone())
            .unwrap_or_else(|| format!("candidate #{id}"))
    };
    if !cancel.is_cancelled() && !stops.is_empty() && stops.len() >= candidates.len() {
        let message = format!(
            "every candidate was stopped: {}",
            stops
                .iter()
                .map(|stop| format!("{}: {}", name_of(stop.candidate_id), stop.outcome()))
                .collect::<Vec<_>>()
                .join("; ")
        );
        store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
        return Ok(RunStatus::Failed);
    }
    let judges = match llm_judge::resolve(store, &run, &version.file, case_count).await? {
        Ok(judges) => judges,
        Err(message) => {
            store.append_run_event(run_id, "error", &message).await?;
            store.set_run_status(run_id, RunStatus::Failed, Some(&message)).await?;
            return Ok(RunStatus::Failed);
        }
    };
    if let Some(judges) = &judges
        && !cancel.is_cancelled()
    {
        llm_judge::judge_run(store, &run, Arc::new(version.file), judges, &cancel).await?;
    }
    if cancel.is_cancelled() {
        store.set_run_status(run_id, RunStatus::Cancelled, None).await?;
        store.append_run_event(run_id, "warn", "cancelled").await?;
        return Ok(RunStatus::Cancelled);
    }
    store.set_run_status(run_id, RunStatus::Finished, None).await?;
    let ended = match stops.len() {
        0 => "finished".to_string(),
        n => format!(
            "finished: {} of {} candidates measured; stopped: {}",
            candidates.len() - n,
            candidates.len(),
            stops
                .iter()
                .map(|stop| name_of(stop.candidate_id))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let level = if stops.is_empty() { "info" } else { "warn" };
    store.append_run_event(run_id, level, &ended).await?;
    Ok(RunStatus::Finished)
}

/// Stores a candidate's stop and says in the event log that the others go on.
async fn record_stop(store: &DynStore, name: &str, stop: &CandidateStop, others: bool) -> Result<(), EngineError> {
    store.save_candidate_stop(stop).await?;
    let then = if others {
        "; the run goes on with the other candidates"
    } else {
        ""
    };
    let msg = format!("{name}: {}{then}", stop.outcome());
    store.append_run_event(stop.run_id, "error", &msg).await?;
    Ok(())
}

/// How one candidate's part of a run ended.
enum Outcome {
    /// Everything asked was sent (or the run was cancelled meanwhile).
    Measured,
    /// Stopped early: `reason` is its outcome, `message` the fuller story for the run's error.
    Stopped {
        stage: StopStage,
        reason: String,
        message: String,
    },
}

/// The outcome of a candidate whose error budget ran out, if it did.
fn halted(ctx: &CandidateRun) -> Option<Outcome> {
    let reason = ctx.halt_reason()?;
    Some(Outcome::Stopped {
        stage: StopStage::ErrorBudget,
        message: format!("{} stopped by its error budget: {reason}", ctx.candidate.spec.name),
        reason,
    })
}

/// Stores the harness report with the run and says in the event log whether the speed
/// figures can be trusted.
async fn record_harness(store: &DynStore, run_id: i64, report: &HarnessReport) -> Result<(), EngineError> {
    store.set_run_harness(run_id, report).await?;
    crate::own_metrics::harness_reported(
        report.runtime_lag_ms.as_ref().map(|d| d.p99),
        report.runtime_lag_ms.as_ref().map(|d| d.max),
        report.unreliable,
    );
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
        Some(d) => format!(
            "{lag}; event-loop lag p99 {:.2} ms, worst {:.2} ms; {}",
            d.p99,
            d.max,
            report.lag_spikes.describe()
        ),
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

/// The cases grouped by prompt-length bin (one group of all cases when none is tagged).
fn bins(ctx: &CandidateRun, share: Share) -> Vec<(Option<u32>, Vec<usize>)> {
    let mut bins: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
    for (i, case) in ctx.file.cases[..ctx.case_count]
        .iter()
        .enumerate()
        .filter(|(i, _)| share.owns(*i))
    {
        let bin = prompt_bin(&case.tags);
        match bins.iter_mut().find(|(b, _)| *b == bin) {
            Some((_, cases)) => cases.push(i),
            None => bins.push((bin, vec![i])),
        }
    }
    bins.sort_by_key(|(b, _)| *b);
    bins
}

/// Sends one candidate's part of the run: rollout, warm-ups, every level.
async fn run_candidate(
    ctx: Arc<CandidateRun>,
    store: &DynStore,
    done: FinishedUnits,
    unit: &UnitContext,
) -> Result<Outcome, EngineError> {
    let share = unit.share;
    let name = ctx.candidate.spec.name.clone();
    if ctx.case_count == 0 {
        store
            .append_run_event(ctx.run_id, "warn", &format!("{name}: no cases to send"))
            .await?;
        return Ok(Outcome::Measured);
    }
    let done = Arc::new(done);
    // A split load's staged start is made once, by its first share.
    if ctx.config.staged_rollout && !done.rollout_done && share.index == 0 {
        if let Some(stop) = rollout::run(&ctx, store).await? {
            return Ok(Outcome::Stopped {
                stage: StopStage::StagedStart,
                reason: stop.reason,
                message: stop.message,
            });
        }
        if ctx.cancel.is_cancelled() {
            return Ok(Outcome::Measured);
        }
    }
    let loads = ctx.config.loads();
    let first_concurrency = share
        .of_count(ctx.config.load.warmup_concurrency(ctx.config.concurrency))
        .max(1);
    let bins = bins(&ctx, share);
    let own_cases: Vec<usize> = bins.iter().flat_map(|(_, cases)| cases.iter().copied()).collect();
    if ctx.config.warmup_requests > 0 && !own_cases.is_empty() {
        warm_up(&ctx, store, &own_cases, done.warmups, first_concurrency).await?;
    }
    if share.of > 1 {
        split_barrier(store, &ctx, unit).await?;
        if ctx.cancel.is_cancelled() {
            return Ok(Outcome::Measured);
        }
    }
    // Scraped by the first share only: one server, one series.
    let scraper = if share.index == 0 {
        start_scraper(&ctx, store).await?
    } else {
        None
    };
    let outcome = measure_levels(&ctx, store, &bins, &loads, done, share, scraper.as_ref()).await;
    if let Some(scraper) = scraper {
        let (level, msg) = match scraper.finish().await {
            Ok(n) => ("info", format!("{name}: telemetry: {n} scrape(s) stored")),
            Err(e) => ("warn", format!("{name}: telemetry: scrapes not stored: {e}")),
        };
        super::writer::append_event_patiently(store, ctx.run_id, level, &msg).await?;
    }
    outcome
}

/// Starts scraping the candidate's telemetry source, saying in the run's events what is
/// scraped (or why nothing is).
async fn start_scraper(ctx: &Arc<CandidateRun>, store: &DynStore) -> Result<Option<Scraper>, EngineError> {
    let spec = &ctx.candidate.spec;
    let (endpoints, said) = telemetry::resolve(
        &spec.base_url,
        spec.metrics_url.as_deref(),
        spec.gpu_metrics_url.as_deref(),
    );
    let interval = std::time::Duration::from_secs_f64(ctx.config.scrape_interval());
    let started = Scraper::start(
        store.clone(),
        ctx.run_id,
        ctx.candidate.id,
        endpoints,
        Some(interval),
        spec.metrics_keep.clone(),
    );
    let (scraper, msg) = match started {
        Ok(Some(s)) => {
            let keeping = if spec.metrics_keep.is_empty() {
                String::new()
            } else {
                format!(", also keeping {}", spec.metrics_keep.join(", "))
            };
            let msg = format!(
                "{}: telemetry: {said}; scraped every {} s and at each level's start and end{keeping}",
                spec.name,
                crate::domain::format::shortest(s.interval.as_secs_f64())
            );
            (Some(s), msg)
        }
        Ok(None) => (None, format!("{}: telemetry: {said}", spec.name)),
        Err(e) => (None, format!("{}: telemetry: no scraper: {e}", spec.name)),
    };
    super::writer::append_event_patiently(store, ctx.run_id, "info", &msg).await?;
    Ok(scraper)
}

/// Every level of one candidate's measured load, each between two boundary scrapes when its
/// telemetry is scraped; a find-capacity run's levels are its search's probes.
async fn measure_levels(
    ctx: &Arc<CandidateRun>,
    store: &DynStore,
    bins: &[(Option<u32>, Vec<usize>)],
    loads: &[Load],
    done: Arc<FinishedUnits>,
    share: Share,
    scraper: Option<&Scraper>,
) -> Result<Outcome, EngineError> {
    let name = ctx.candidate.spec.name.clone();
    let mut total = Tally::default();
    let started = Instant::now();
    // Each prompt bin's previous level: (offered load, req/s), for "throughput flat while load rose".
    let mut previous: Vec<Option<(f64, f64)>> = vec![None; bins.len()];
    let levels = Levels {
        ctx,
        store,
        bins,
        done: &done,
        share,
        scraper,
    };
    if let Some(settings) = ctx.config.load.search_settings() {
        if let Some(stopped) = search_levels(&levels, settings, &mut previous, &mut total).await? {
            return Ok(stopped);
        }
    } else {
        for (level, load) in loads.iter().enumerate() {
            let past_saturation = match levels.measure(level as u32, *load, &mut previous).await? {
                LevelEnd::Ended(outcome) => return Ok(outcome),
                LevelEnd::Measured { past_saturation, tally } => {
                    total.add(tally);
                    past_saturation
                }
            };
            let higher = &loads[level + 1..];
            // A replay's level is the team's own traffic, not a higher rung: it is always sent.
            let replay = ctx.config.load.replay().is_some();
            if past_saturation && !higher.is_empty() && !ctx.config.measure_past_saturation && !replay {
                let msg = format!(
                    "{name}: {} skipped: level {} is past saturation (a growing queue only grows faster with more \
                     load; the run setting 'measure past saturation' measures them anyway)",
                    higher.iter().map(Load::label).collect::<Vec<_>>().join(", "),
                    load.label()
                );
                super::writer::append_event_patiently(store, ctx.run_id, "info", &msg).await?;
                break;
            }
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
    super::writer::append_event_patiently(store, ctx.run_id, level, &msg).await?;
    Ok(Outcome::Measured)
}

/// What every level of one candidate's load is measured with.
struct Levels<'a> {
    ctx: &'a Arc<CandidateRun>,
    store: &'a DynStore,
    bins: &'a [(Option<u32>, Vec<usize>)],
    done: &'a Arc<FinishedUnits>,
    share: Share,
    scraper: Option<&'a Scraper>,
}

/// How one level ended.
enum LevelEnd {
    /// Measured; whether it was judged past saturation.
    Measured { past_saturation: bool, tally: Tally },
    /// The candidate's load ends here (cancelled, or the candidate halted).
    Ended(Outcome),
}

impl Levels<'_> {
    /// One level (every prompt bin and repetition) at `load`, stored as level `level`.
    async fn measure(
        &self,
        level: u32,
        load: Load,
        previous: &mut [Option<(f64, f64)>],
    ) -> Result<LevelEnd, EngineError> {
        let Levels {
            ctx,
            store,
            bins,
            done,
            share,
            scraper,
        } = *self;
        let name = &ctx.candidate.spec.name;
        let phase = ctx.config.measured_phase();
        let mut past_saturation = false;
        let mut total = Tally::default();
        if let Some(s) = scraper {
            s.mark(level, Boundary::Start).await;
        }
        if let (Load::Replay { speed }, Some((workload_version, _))) = (load, ctx.config.load.replay()) {
            if ctx.cancel.is_cancelled() {
                return Ok(LevelEnd::Ended(Outcome::Measured));
            }
            let level_started = Instant::now();
            ctx.begin_level();
            let tally = super::replay_level::replay_level(ctx, store, level, workload_version, speed, done).await?;
            let msg = format!(
                "{name}: {} phase at {}: {} succeeded, {} failed in {:.1} s",
                phase.as_str(),
                load.label(),
                tally.succeeded,
                tally.failed,
                level_started.elapsed().as_secs_f64()
            );
            let level_name = if tally.failed > 0 { "warn" } else { "info" };
            super::writer::append_event_patiently(store, ctx.run_id, level_name, &msg).await?;
            if let Some(s) = scraper {
                s.mark(level, Boundary::End).await;
            }
            if ctx.cancel.is_cancelled() {
                return Ok(LevelEnd::Ended(Outcome::Measured));
            }
            if let Some(stopped) = halted(ctx) {
                return Ok(LevelEnd::Ended(stopped));
            }
            return Ok(LevelEnd::Measured {
                past_saturation: false,
                tally,
            });
        }
        for (bin_index, (bin, cases)) in bins.iter().enumerate() {
            if ctx.cancel.is_cancelled() {
                return Ok(LevelEnd::Ended(Outcome::Measured));
            }
            let level_started = Instant::now();
            let mut tally = Tally::default();
            ctx.begin_level();
            for repetition in 0..ctx.config.repetitions {
                let feed = feed(ctx, level, repetition, load, cases, (*done).clone(), share);
                let t = send_repetition(ctx, feed, load, level, repetition, share).await?;
                tally.add(t);
                if ctx.cancel.is_cancelled() {
                    return Ok(LevelEnd::Ended(Outcome::Measured));
                }
                if let Some(stopped) = halted(ctx) {
                    return Ok(LevelEnd::Ended(stopped));
                }
            }
            let msg = format!(
                "{name}: {} phase at {}{}: {} repetition(s), {} succeeded, {} failed, {} retries in {:.1} s",
                phase.as_str(),
                load.label(),
                bin.map(|b| format!(", prompts of {b} tokens")).unwrap_or_default(),
                ctx.config.repetitions,
                tally.succeeded,
                tally.failed,
                tally.retries,
                level_started.elapsed().as_secs_f64()
            );
            let level_name = if tally.failed > 0 { "warn" } else { "info" };
            super::writer::append_event_patiently(store, ctx.run_id, level_name, &msg).await?;
            if let Some((verdict, counted)) = ctx.level_decided() {
                let planned = ctx.config.requests_per_level.map_or(cases.len() as u64, u64::from)
                    * u64::from(ctx.config.repetitions);
                let sent = tally.succeeded + tally.failed;
                // Against the fixed plan: the requests not sent, and the time they would have
                // taken at the pace this level kept.
                let unsent = planned.saturating_sub(u64::from(sent));
                let secs = level_started.elapsed().as_secs_f64();
                let saved_s = if sent > 0 {
                    secs / sent as f64 * unsent as f64
                } else {
                    0.0
                };
                let msg = format!(
                    "{name}: level {} stopped when decided: SLO attainment {} the target after {counted} requests \
                     ({sent} of the {planned} planned sent; {unsent} requests and about {saved_s:.1} s saved against \
                     the fixed plan)",
                    load.label(),
                    verdict.as_str(),
                );
                super::writer::append_event_patiently(store, ctx.run_id, "info", &msg).await?;
            }
            // Signs of a growing queue within this level (docs/capacity.md, "Over-saturation").
            let counted = tally.succeeded + tally.failed;
            let secs = level_started.elapsed().as_secs_f64();
            let this = (counted > 0 && secs > 0.0).then(|| (load.amount(), counted as f64 / secs));
            let signs = saturation_signs(&ctx.level_ttft(), false, previous[bin_index], this);
            previous[bin_index] = this;
            if signs.past_saturation() {
                let msg = format!(
                    "{name}: level {}{} past saturation: {}",
                    load.label(),
                    bin.map(|b| format!(", prompts of {b} tokens")).unwrap_or_default(),
                    signs.describe()
                );
                super::writer::append_event_patiently(store, ctx.run_id, "warn", &msg).await?;
                past_saturation = true;
            }
            total.add(tally);
        }
        if let Some(s) = scraper {
            s.mark(level, Boundary::End).await;
        }
        Ok(LevelEnd::Measured {
            past_saturation,
            tally: total,
        })
    }
}

/// A find-capacity run's levels for one candidate: its own search (docs/capacity.md), each
/// probe a level of the run keyed by its load (`capacity::level_of`), judged from its stored
/// records and the search stored after each (`run_capacity`), so a restarted run goes on where
/// it stood. Some(outcome) when the candidate's load ended early.
async fn search_levels(
    levels: &Levels<'_>,
    settings: crate::domain::capacity::SearchSettings,
    previous: &mut [Option<(f64, f64)>],
    total: &mut Tally,
) -> Result<Option<Outcome>, EngineError> {
    use crate::domain::capacity::{CandidateCapacity, SearchState, judge_probe, level_of, probe_message};
    let (ctx, store) = (levels.ctx, levels.store);
    let (run_id, candidate_id, name) = (ctx.run_id, ctx.candidate.id, &ctx.candidate.spec.name);
    // The run was refused at creation without a target; a default keeps this total.
    let target = ctx.config.effective_slo().target_attainment.unwrap_or(1.0);
    let stored = store
        .list_run_capacity(run_id)
        .await?
        .into_iter()
        .find(|c| c.candidate_id == candidate_id);
    let mut search = match stored {
        // Ended before a restart: nothing more to probe.
        Some(ended) if ended.outcome.is_some() => return Ok(None),
        Some(going) => going,
        None => CandidateCapacity::new(candidate_id, name.clone(), settings, target),
    };
    loop {
        let load = match search.search.state() {
            SearchState::Done(outcome) => {
                let said = outcome.describe(settings.axis);
                search.outcome = Some(outcome);
                store.save_run_capacity(run_id, &search).await?;
                let msg = format!(
                    "{name}: {said} after {} probe level(s) ({})",
                    search.probes.len(),
                    search.outcome.as_ref().map_or("", |o| o.reason.describe())
                );
                super::writer::append_event_patiently(store, run_id, "info", &msg).await?;
                return Ok(None);
            }
            SearchState::Probe { load } => load,
        };
        let level = level_of(settings.axis, load);
        let probe_at = crate::domain::load::probe_load(settings.axis, load);
        match levels.measure(level, probe_at, previous).await? {
            LevelEnd::Ended(outcome) => {
                store.save_run_capacity(run_id, &search).await?;
                return Ok(Some(outcome));
            }
            LevelEnd::Measured { tally, .. } => total.add(tally),
        }
        // The probe is judged from its stored records: wait until the writer has them.
        let mut cancelled = ctx.cancel.clone();
        tokio::select! {
            _ = ctx.records.settled() => {}
            _ = cancelled.cancelled() => return Ok(Some(Outcome::Measured)),
        }
        let records: Vec<_> = store
            .list_request_records(run_id)
            .await?
            .into_iter()
            .filter(|r| r.candidate_id == candidate_id && crate::domain::run::split_repetition(r.repetition).0 == level)
            .collect();
        let cap = match probe_at {
            Load::Rate { .. } | Load::Replay { .. } => probe_at.max_in_flight(),
            // A closed loop is at its cap by design: no sign.
            Load::Concurrency { .. } => usize::MAX,
        };
        let probe = judge_probe(run_id, &records, &ctx.config, candidate_id, load, cap, &search.probes);
        let msg = format!(
            "{name}: {}",
            probe_message(search.probes.len(), settings.axis, &probe, target)
        );
        search.record(probe);
        store.save_run_capacity(run_id, &search).await?;
        super::writer::append_event_patiently(store, run_id, "info", &msg).await?;
    }
}

/// The warm-up requests (not counted) at the first level's concurrency, cycling through this
/// unit's cases; numbered after the `warmups_done` a resumed run already sent.
async fn warm_up(
    ctx: &Arc<CandidateRun>,
    store: &DynStore,
    own_cases: &[usize],
    warmups_done: u32,
    first_concurrency: u32,
) -> Result<(), EngineError> {
    let name = &ctx.candidate.spec.name;
    let warmups: VecDeque<Unit> = (0..ctx.config.warmup_requests)
        .map(|i| Unit {
            case_index: own_cases[i as usize % own_cases.len()],
            phase: Phase::Warmup,
            repetition: warmups_done + i,
            is_warmup: true,
            first_attempt: 0,
            last_attempt: 0, // a failed warm-up is not worth repeating
            concurrency: first_concurrency,
            resume: None,
        })
        .collect();
    let msg = format!(
        "{name}: warm-up, {} requests at concurrency {first_concurrency} (not counted)",
        warmups.len()
    );
    super::writer::append_event_patiently(store, ctx.run_id, "info", &msg).await?;
    ctx.clone().closed_loop(Feed::List(warmups), first_concurrency).await?;
    Ok(())
}

/// One repetition of one level: closed loop at this share's concurrency, or open loop at its
/// share of the rate (seeded by run, level, repetition and share).
async fn send_repetition(
    ctx: &Arc<CandidateRun>,
    feed: Feed,
    load: Load,
    level: u32,
    repetition: u32,
    share: Share,
) -> Result<Tally, EngineError> {
    Ok(match load {
        Load::Concurrency { concurrency } => ctx.clone().closed_loop(feed, share.of_count(concurrency)).await?,
        Load::Replay { .. } => {
            return Err(EngineError::Internal(
                "a replay level is sent by `replay_level`, not as a repetition".into(),
            ));
        }
        Load::Rate { per_second, poisson } => {
            let seed =
                (ctx.run_id as u64) << 32 ^ (level as u64) << 16 ^ u64::from(repetition) ^ u64::from(share.index) << 40;
            let in_flight = (share.of_count(load.max_in_flight() as u32).max(1)) as usize;
            ctx.clone()
                .open_loop(feed, per_second / f64::from(share.of), poisson, in_flight, seed)
                .await?
        }
    })
}

fn feed(
    ctx: &CandidateRun,
    level: u32,
    repetition: u32,
    load: Load,
    cases: &[usize],
    done: Arc<FinishedUnits>,
    share: Share,
) -> Feed {
    let phase = ctx.config.measured_phase();
    let limit = match (ctx.config.requests_per_level, ctx.config.duration_secs) {
        (Some(n), _) => Some(share.of_count(n) as usize),
        (None, Some(_)) => None,
        (None, None) => Some(cases.len()),
    };
    Feed::Cycle(CycleFeed {
        cases: cases.to_vec(),
        // A conversation's records are keyed `case#turn`; it goes on from the turn it reached
        // (`FinishedUnits::conversation_next`).
        case_ids: cases.iter().map(|&i| ctx.file.cases[i].id.clone()).collect(),
        turns: cases.iter().map(|&i| ctx.file.cases[i].turns.len()).collect(),
        phase,
        level,
        repetition,
        concurrency: match load {
            Load::Concurrency { concurrency } => concurrency,
            Load::Rate { .. } | Load::Replay { .. } => 0,
        },
        last_attempt: ctx.config.retries,
        limit,
        deadline: ctx
            .config
            .duration_secs
            .map(|s| Instant::now() + Duration::from_secs(u64::from(s))),
        next: 0,
        done,
    })
}

/// One unit's share of a candidate's load: `index` of `of` (0 of 1: the whole load). A share
/// sends the cases whose index is `index` modulo `of` (so no two shares store the same key), at
/// its part of the concurrency or rate; its records keep the level's whole concurrency, so the
/// level's figures pool every share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub index: u32,
    pub of: u32,
}

impl Share {
    pub const WHOLE: Share = Share { index: 0, of: 1 };

    /// This share's part of `n` (concurrency, requests): the first `n mod of` shares take one
    /// more, so the parts add up to `n`.
    pub fn of_count(&self, n: u32) -> u32 {
        n / self.of + u32::from(self.index < n % self.of)
    }

    fn owns(&self, case_index: usize) -> bool {
        case_index % self.of as usize == self.index as usize
    }

    /// Why this run's load cannot be split over `of` clients, if it cannot: one load level only
    /// (shares cannot agree on a level's end), and at least one case and one stream each.
    fn split_refused(&self, config: &crate::domain::run::RunConfig, cases: usize) -> Option<String> {
        if self.of <= 1 {
            return None;
        }
        let loads = config.loads();
        let too_few = |what: &str, n: u32| format!("{n} {what} cannot be split over {} clients", self.of);
        if config.load.search_settings().is_some() {
            return Some(format!(
                "a capacity search's probes are chosen one after the other and cannot be split over {} clients",
                self.of
            ));
        }
        if loads.len() > 1 {
            return Some(format!(
                "a load split over {} clients has one load level ({} asked)",
                self.of,
                loads.len()
            ));
        }
        if let Some(Load::Concurrency { concurrency }) = loads.first()
            && *concurrency < self.of
        {
            return Some(too_few("streams", *concurrency));
        }
        (cases < self.of as usize).then(|| too_few("cases", cases as u32))
    }
}

/// Longest a share waits for the others to be taken by workers before its run fails.
const SPLIT_WAIT: Duration = Duration::from_secs(600);
/// How long after the last share was taken they all start: time for every worker to see it.
const SPLIT_START_MS: i64 = 2_000;

/// The start barrier of a split load, through the database: this worker measures its clock's
/// offset to the database's (the sample with the shortest round trip of five), waits until every
/// share is taken and has its offset, then sleeps until the common start — the last share's
/// claim time plus [`SPLIT_START_MS`], on the database's clock, converted to this worker's. The
/// first share states every worker's offset and the skew bound in the run's event log.
async fn split_barrier(store: &DynStore, ctx: &CandidateRun, unit: &UnitContext) -> Result<(), EngineError> {
    let (run_id, candidate_id, share) = (ctx.run_id, ctx.candidate.id, unit.share);
    let mut best: Option<(f64, f64)> = None;
    for _ in 0..5 {
        let before = wall_clock_us();
        let database_ms = store.database_now().await?.0 as f64;
        let after = wall_clock_us();
        let rtt_ms = (after - before) as f64 / 1000.0;
        let offset_ms = (before + after) as f64 / 2000.0 - database_ms;
        if best.is_none_or(|(rtt, _)| rtt_ms < rtt) {
            best = Some((rtt_ms, offset_ms));
        }
    }
    let (rtt_ms, offset_ms) = best.unwrap_or_default();
    store.set_unit_clock(run_id, unit.seq, offset_ms, rtt_ms).await?;
    let waited = Instant::now();
    let shares = loop {
        let shares: Vec<_> = store
            .list_run_units(run_id)
            .await?
            .into_iter()
            .filter(|u| u.candidate_id == Some(candidate_id) && u.shards == share.of)
            .collect();
        let ready = shares.len() == share.of as usize
            && shares
                .iter()
                .all(|u| u.status != crate::domain::workers::UnitStatus::Queued && u.clock_offset_ms.is_some());
        if ready {
            break shares;
        }
        if ctx.cancel.is_cancelled() {
            return Ok(());
        }
        if waited.elapsed() > SPLIT_WAIT {
            return Err(EngineError::Internal(format!(
                "{}: its load is split over {} clients, but only {} workers took a share in {} s",
                ctx.candidate.spec.name,
                share.of,
                shares.iter().filter(|u| u.clock_offset_ms.is_some()).count(),
                SPLIT_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let start_ms = shares
        .iter()
        .filter_map(|u| u.started_at)
        .map(|t| t.0)
        .max()
        .unwrap_or(0)
        + SPLIT_START_MS;
    let local_start_us = ((start_ms as f64 + offset_ms) * 1000.0) as i64;
    let wait_us = local_start_us - wall_clock_us();
    if share.index == 0 {
        let offsets: Vec<f64> = shares.iter().filter_map(|u| u.clock_offset_ms).collect();
        let spread =
            offsets.iter().copied().fold(f64::MIN, f64::max) - offsets.iter().copied().fold(f64::MAX, f64::min);
        let worst_rtt = shares.iter().filter_map(|u| u.clock_rtt_ms).fold(0.0, f64::max);
        let each: Vec<String> = shares
            .iter()
            .map(|u| {
                format!(
                    "{} {:+.2} ms (round trip {:.2} ms)",
                    u.worker.as_deref().unwrap_or("?"),
                    u.clock_offset_ms.unwrap_or(0.0),
                    u.clock_rtt_ms.unwrap_or(0.0)
                )
            })
            .collect();
        let message = format!(
            "{}: load split over {} clients, started together at {} (database clock); clock offsets to the \
             database: {}; the clients' clocks differ by at most {:.2} ms, so the level's window edges are \
             within that of each other",
            ctx.candidate.spec.name,
            share.of,
            crate::domain::Timestamp(start_ms).display(),
            each.join(", "),
            spread + worst_rtt
        );
        store.append_run_event(run_id, "info", &message).await?;
    }
    if wait_us > 0 {
        let mut cancel = ctx.cancel.clone();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_micros(wait_us as u64)) => {}
            _ = cancel.cancelled() => {}
        }
    }
    Ok(())
}
