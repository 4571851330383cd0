//! A replay run level (`LoadShape::Replay`, docs/workloads.md "Replay as a run level"): one
//! candidate's share of "our traffic". Every request of the workload version is sent once, due
//! at its recorded arrival ÷ the speed-up from the level's start — the identical schedule for
//! every candidate — with the identical prompt for every candidate (synthetic text of exactly
//! the recorded o200k length whose prefix blocks repeat where the workload's block ids do,
//! seeded by the run; or the kept text) and `max_tokens` the recorded output length.
//!
//! Each request is an ordinary record of the level (case id `replay-N`, concurrency 0 like an
//! open loop's, not graded), so every figure, SLO, cost and threshold rule reads it unchanged;
//! beside it, what the schedule asked of it (`ReplaySend`: due and sent offsets, recorded and
//! sent lengths) is stored in batches as the level goes. A request is sent once, never retried
//! (production sent it once). A resumed run sends only the requests with no stored record, on
//! the schedule re-anchored at the resume (its sends are marked as after a restart); every
//! finished record is kept.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::pool::{CandidateRun, FinishedUnits, Tally, Unit};
use crate::domain::evalset::{ChatMessage, EvalCase};
use crate::domain::run::join_repetition;
use crate::domain::workload::replay::{ReplaySend, ReplaySummary, due_ms, replay_case_id};
use crate::error::EngineError;
use crate::store::DynStore;
use crate::wire::client::{RecordIdentity, wall_clock_us};
use crate::wire::provider::prepare;

/// Time for the loop to be ready before the first request is due.
const LEAD: Duration = Duration::from_millis(100);
/// Fidelity rows are stored at least this often while the level goes (and at its end).
const FLUSH_EVERY: Duration = Duration::from_millis(250);
const FLUSH_ROWS: usize = 500;

/// The text seed of a run's replay: the same for every candidate, so the prompts are too.
pub fn text_seed(run_id: i64) -> u64 {
    (run_id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5245_504C_4159
}

/// Replays workload version `workload_version` at `speed` as level `level` of this candidate's
/// load. Returns the level's tally.
pub(crate) async fn replay_level(
    ctx: &Arc<CandidateRun>,
    store: &DynStore,
    level: u32,
    workload_version: i64,
    speed: f64,
    done: &FinishedUnits,
) -> Result<Tally, EngineError> {
    let (run_id, candidate_id) = (ctx.run_id, ctx.candidate.id);
    let name = ctx.candidate.spec.name.clone();
    let Some(version) = store.get_workload_version(workload_version).await? else {
        return Err(EngineError::Internal(format!(
            "workload version #{workload_version} replayed by run #{run_id} is no longer stored"
        )));
    };
    let workload = Arc::new(version.file);
    let phase = ctx.config.measured_phase();
    let repetition = join_repetition(level, 0, 0);
    // Sent before a restart: a stored record (whatever its outcome) means sent once already.
    let remaining: Vec<usize> = (0..workload.requests.len())
        .filter(|&i| done.next_attempt(&replay_case_id(i), phase, repetition) == Some(0))
        .collect();
    let before = workload.requests.len() - remaining.len();
    let segment = if before == 0 {
        0
    } else {
        store
            .list_replay_sends(run_id)
            .await?
            .iter()
            .filter(|s| s.candidate_id == candidate_id)
            .map(|s| s.segment + 1)
            .max()
            .unwrap_or(1)
    };
    let said = if before == 0 {
        format!(
            "{name}: replaying workload {:?} (version #{workload_version}, {} requests over {:.1} s recorded) at {}×",
            workload.header.name,
            workload.requests.len(),
            workload.duration_ms() / 1000.0,
            crate::domain::format::shortest(speed)
        )
    } else {
        format!(
            "{name}: replay resumed: {before} of {} requests sent before the restart are kept; the other {} \
             are sent on the schedule re-anchored now (marked as sent after a restart)",
            workload.requests.len(),
            remaining.len()
        )
    };
    super::writer::append_event_patiently(store, run_id, "info", &said).await?;
    if remaining.is_empty() {
        return Ok(Tally::default());
    }
    // The schedule's offset the level starts from: 0, or the first unsent request's on resume.
    let anchor_ms = due_ms(&workload.requests[remaining[0]], speed);
    let (tx, rx) = mpsc::unbounded_channel::<ReplaySend>();
    let saver = tokio::spawn(save_sends(store.clone(), run_id, rx));
    let seed = text_seed(run_id);
    let file = Arc::new(crate::replay::replay_file());
    let limit = Arc::new(Semaphore::new(
        crate::domain::load::Load::Replay { speed }.max_in_flight(),
    ));
    let start = Instant::now() + LEAD;
    let start_unix_us = wall_clock_us() + LEAD.as_micros() as i64;
    let mut set: JoinSet<Tally> = JoinSet::new();
    let mut cancel = ctx.cancel.clone();
    for &index in &remaining {
        if ctx.cancel.is_cancelled() || ctx.halted() {
            break;
        }
        let recorded = &workload.requests[index];
        let (text, input_tokens_sent) = crate::replay::prompt_of(&workload, index, seed);
        let case = EvalCase {
            id: replay_case_id(index),
            messages: Some(vec![ChatMessage {
                role: "user".into(),
                content: text,
            }]),
            ..Default::default()
        };
        let mut params = ctx.params;
        params.max_tokens = Some(recorded.output_tokens);
        let prepared = prepare(&ctx.candidate.spec, ctx.client.api_key(), &file, &case, &params);
        drop(case);
        let due_offset_ms = due_ms(recorded, speed);
        let after_start = Duration::from_secs_f64(((due_offset_ms - anchor_ms) / 1000.0).max(0.0));
        let due = start + after_start;
        // While the writer holds its bound of records no new request goes (the wait is lag).
        tokio::select! {
            _ = ctx.records.room() => {}
            _ = cancel.cancelled() => break,
        }
        tokio::select! {
            _ = crate::replay::wait_until(due.into_std()) => {}
            _ = cancel.cancelled() => break,
        }
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let unit = Unit {
            case_index: index,
            phase,
            repetition,
            is_warmup: false,
            first_attempt: 0,
            last_attempt: 0,
            concurrency: 0,
            resume: None,
        };
        let send = ReplaySend {
            candidate_id,
            request_index: index as u32,
            segment,
            due_offset_us: (due_offset_ms * 1000.0).round() as i64,
            sent_offset_us: 0,
            input_tokens_recorded: recorded.input_tokens,
            input_tokens_sent,
            output_tokens_recorded: recorded.output_tokens,
            max_tokens_sent: params.max_tokens.unwrap_or(0),
        };
        let (ctx, tx) = (ctx.clone(), tx.clone());
        let anchor_us = (anchor_ms * 1000.0).round() as i64;
        set.spawn(async move {
            let tally = send_one(&ctx, unit, prepared, due, send, start_unix_us - anchor_us, &tx).await;
            drop(permit);
            tally
        });
        // The send goes first: building the next prompt can wait, this request cannot.
        tokio::task::yield_now().await;
        while let Some(joined) = set.try_join_next() {
            if let Err(e) = joined {
                set.abort_all();
                return Err(EngineError::Internal(format!("a replay request ended abnormally: {e}")));
            }
        }
    }
    let mut tally = Tally::default();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(t) => tally.add(t),
            Err(e) => return Err(EngineError::Internal(format!("a replay request ended abnormally: {e}"))),
        }
    }
    drop(tx);
    match saver.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let msg = format!("{name}: replay fidelity rows not all stored: {e}");
            super::writer::append_event_patiently(store, run_id, "warn", &msg).await?;
        }
        Err(e) => {
            return Err(EngineError::Internal(format!(
                "the replay fidelity writer ended abnormally: {e}"
            )));
        }
    }
    // The fidelity bar, said in the run's events as the run page's block says it.
    let sends = store.list_replay_sends(run_id).await?;
    let summary = ReplaySummary::of(candidate_id, workload.requests.len(), &sends);
    let lag = summary
        .lag_ms
        .as_ref()
        .map(|d| format!("send lag p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms", d.p50, d.p99, d.max))
        .unwrap_or_else(|| "no send lag measured".into());
    let marks = summary.marks();
    let (event_level, msg) = if marks.is_empty() {
        (
            "info",
            format!(
                "{name}: replay fidelity: {} of {} sent, {lag}, lengths exact {} of {}",
                summary.sent, summary.requests, summary.lengths_exact, summary.sent
            ),
        )
    } else {
        (
            "warn",
            format!(
                "{name}: replay fidelity: {} of {} sent, {lag}; its replay level's speed figures are marked: {}",
                summary.sent,
                summary.requests,
                marks.join("; ")
            ),
        )
    };
    super::writer::append_event_patiently(store, run_id, event_level, &msg).await?;
    Ok(tally)
}

/// Sends one replayed request (one attempt), records it as the level's and its fidelity row.
/// `zero_us`: the wall clock of the schedule's offset 0 (re-anchored on resume).
async fn send_one(
    ctx: &CandidateRun,
    unit: Unit,
    prepared: Result<crate::wire::protocol::PreparedRequest, crate::wire::failure::Failure>,
    due: Instant,
    mut send: ReplaySend,
    zero_us: i64,
    tx: &mpsc::UnboundedSender<ReplaySend>,
) -> Tally {
    let mut tally = Tally::default();
    let case_id = replay_case_id(unit.case_index);
    let exchange = match prepared {
        Ok(prepared) => {
            let request = ctx.with_request_id(&prepared, &unit, 0);
            let queue_us = super::pool::micros(due.elapsed());
            let in_flight = crate::own_metrics::InFlight::begin();
            let mut cancel = ctx.cancel.clone();
            let exchange = tokio::select! {
                x = ctx.client.send(&request, queue_us) => x,
                _ = cancel.cancelled() => return tally,
            };
            drop(in_flight);
            exchange
        }
        Err(failure) => crate::wire::client::Exchange {
            sent_at_us: wall_clock_us(),
            client_queue_us: super::pool::micros(due.elapsed()),
            end_us: Some(0),
            failure: Some(failure),
            ..Default::default()
        },
    };
    send.sent_offset_us = exchange.sent_at_us - zero_us;
    let failure = exchange.failure.clone();
    let (record, chunk_text) = exchange.into_parts(RecordIdentity {
        run_id: ctx.run_id,
        candidate_id: ctx.candidate.id,
        case_id: case_id.clone(),
        phase: unit.phase,
        repetition: unit.repetition,
        attempt: 0,
        concurrency: 0,
        is_warmup: false,
    });
    let met = ctx.slo_met(&unit, &record);
    if !ctx.records.send(record, chunk_text, None) {
        tracing::error!(
            run_id = ctx.run_id,
            "record writer stopped; a replay record was dropped"
        );
    }
    let _ = tx.send(send);
    match failure {
        None => tally.succeeded += 1,
        Some(f) => {
            tally.failed += 1;
            tally.failures.push((case_id, f));
        }
    }
    ctx.settle_unit(&unit, tally.failures.first().map(|(_, f)| f), met);
    tally
}

/// Stores fidelity rows in batches as they come, until every sender is gone.
async fn save_sends(
    store: DynStore,
    run_id: i64,
    mut rx: mpsc::UnboundedReceiver<ReplaySend>,
) -> Result<(), crate::store::StoreError> {
    let mut batch = Vec::new();
    let mut first_error = None;
    loop {
        let deadline = tokio::time::sleep(FLUSH_EVERY);
        tokio::pin!(deadline);
        let open = loop {
            tokio::select! {
                got = rx.recv() => match got {
                    Some(s) => {
                        batch.push(s);
                        if batch.len() >= FLUSH_ROWS {
                            break true;
                        }
                    }
                    None => break false,
                },
                _ = &mut deadline => break true,
            }
        };
        if !batch.is_empty() {
            // A failed batch is tried again with the next (rows are keyed: no duplicate).
            match store.save_replay_sends(run_id, &batch).await {
                Ok(()) => batch.clear(),
                Err(e) => {
                    if !open {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if !open {
            return match first_error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
    }
}
