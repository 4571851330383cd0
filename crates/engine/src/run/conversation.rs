//! Sending a conversation case turn by turn (`domain::evalset::conversation`): each turn is one
//! request carrying the history so far — the model's own earlier replies, or the file's golden
//! ones — and one record keyed `case#turn` with its [`TurnFacts`]. Between a reply and the next
//! turn the user thinks: a seeded draw of the run's think time, waited from the reply's recorded
//! end to the next send, both on the records' wall clock, so the wait actually kept can be
//! checked against the schedule (`think_waited_us` vs `think_scheduled_us`).
//!
//! Under a closed-loop load of c, c users each take conversations one after another; the
//! executor staggers their starts (`domain::conversation::user_start_offset_us`) so the level is
//! in steady state rather than every user opening turn 1 at once, and the turns sent before the
//! last user started (the ramp) are marked so the level's speed figures leave them out
//! (`domain::conversation::RAMP_RULE`). Each user keeps one HTTP/1.1 keep-alive connection for
//! all its turns (a session of the candidate's pool, `wire::h1::Pool::post`), as a chat client
//! does; a conversation sent outside a closed loop keeps one to itself while it lasts.
//!
//! A run resumed after a restart continues each conversation from the turn it reached, with
//! the replies already stored as its history (`FinishedUnits::conversation_next`).
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::pool::{CandidateRun, Seat, Tally, Unit, is_retryable, micros};
use super::writer::Grading;
use crate::domain::conversation::{TurnFacts, think_rng};
use crate::domain::evalset::conversation::HistoryMode;
use crate::wire::client::{Exchange, RecordIdentity, wall_clock_us};
use crate::wire::failure::Failure;
use crate::wire::provider::prepare;

/// Where a turn's number sits in the request id's case-index field.
pub const TURN_ID_SHIFT: usize = 40;

impl CandidateRun {
    /// Sends every turn of the conversation case of `unit` from `seat`, in order; stops at a
    /// turn that failed after its retries (the later turns are not sent: their conversation
    /// fails). Every turn goes on the seat's own keep-alive connection (a closed-loop user's,
    /// else one the conversation keeps to itself). A conversation a resumed run continues
    /// (`unit.resume`) starts at the turn it reached, with the replies stored before as its
    /// history. Returns the tallies of every turn.
    pub(crate) async fn send_conversation(&self, unit: Unit, ready: Instant, seat: Seat) -> Tally {
        let own_session = seat.session.is_none();
        let session = seat
            .session
            .unwrap_or_else(|| self.next_session.fetch_add(1, Ordering::Relaxed));
        let tally = self.send_turns(unit, ready, seat, session).await;
        if own_session {
            // Its connection goes back to the candidate's shared pool.
            self.client.end_session(session);
        }
        tally
    }

    async fn send_turns(&self, unit: Unit, ready: Instant, seat: Seat, session: u32) -> Tally {
        let mut tally = Tally::default();
        let mut cancel = self.cancel.clone();
        let case = &self.file.cases[unit.case_index];
        let history = self.file.history_for(case);
        let golden = self.file.golden_replies(case);
        let (from_turn, mut replies) = match &unit.resume {
            Some(r) => (r.from_turn.min(case.turns.len()), r.replies.clone()),
            None => (0, Vec::with_capacity(case.turns.len())),
        };
        replies.truncate(from_turn);
        replies.resize(from_turn, String::new());
        let last_graded = case
            .turns
            .iter()
            .rposition(|t| !self.file.graders_for_turn(t).is_empty())
            .map(|i| i as u32 + 1);
        let think = self.config.think_time.unwrap_or_default();
        let mut rng = think_rng(
            self.run_id,
            self.candidate.id,
            unit.case_index as u32,
            unit.repetition,
            u32::from(unit.phase as u8),
        );
        // The previous turn's end on the records' wall clock (µs since the epoch).
        let mut previous_end_us: Option<i64> = None;
        let mut ready = ready;
        for k in 0..case.turns.len() {
            // Each turn after the first draws its think time, sent or not, so a continued
            // conversation's later turns wait what they would have.
            let drawn_us = (k > 0).then(|| (think.draw(&mut rng) * 1000.0).round() as i64);
            if k < from_turn {
                continue;
            }
            let sent_case = self.file.turn_as_case(
                case,
                k,
                match history {
                    HistoryMode::Own => &replies,
                    HistoryMode::Golden => &golden,
                },
            );
            let prepared = prepare(
                &self.candidate.spec,
                self.client.api_key(),
                &self.file,
                &sent_case,
                &self.params,
            )
            .map(|mut p| {
                p.session = Some(session);
                p
            });
            let mut facts = TurnFacts {
                conversation: case.id.clone(),
                turn: k as u32 + 1,
                turns: case.turns.len() as u32,
                user: seat.user,
                history,
                last_graded_turn: last_graded,
                think_scheduled_us: None,
                think_waited_us: None,
                ramp: false,
            };
            // Think: the draw is waited from the previous reply's end, on the records' clock.
            if let (Some(end_us), Some(scheduled_us)) = (previous_end_us, drawn_us) {
                facts.think_scheduled_us = Some(scheduled_us);
                let due_in_us = end_us + scheduled_us - wall_clock_us();
                let deadline = Instant::now() + Duration::from_micros(due_in_us.max(0) as u64);
                tokio::select! {
                    _ = super::precise_wait::wait_until(deadline) => {}
                    _ = cancel.cancelled() => return tally,
                }
                ready = deadline;
            }
            let prepared = match prepared {
                Ok(p) => p,
                Err(failure) => {
                    tally.failed += 1;
                    tally.failures.push((sent_case.id.clone(), failure.clone()));
                    self.settle_unit(&unit, Some(&failure), None);
                    let x = unsent_turn(failure, ready);
                    self.store_turn(&unit, k, &sent_case.id, unit.first_attempt, x, facts);
                    return tally;
                }
            };
            // The request id carries the turn above the case index (bits 40–47), so the mock's
            // ground truth tells the turns of one conversation apart.
            let mut id_unit = unit.clone();
            id_unit.case_index |= (k + 1) << TURN_ID_SHIFT;
            let mut answer: Option<String> = None;
            let mut attempt_ready = ready;
            // A continued turn goes on from the attempt it reached; every later turn from 0.
            let first_attempt = if k == from_turn { unit.first_attempt } else { 0 };
            for attempt in first_attempt..=unit.last_attempt.max(first_attempt) {
                tokio::select! {
                    _ = self.records.room() => {}
                    _ = cancel.cancelled() => return tally,
                }
                let request = self.with_request_id(&prepared, &id_unit, attempt);
                let queue_us = micros(attempt_ready.elapsed());
                // In the ramp: sent before every user had started (`RAMP_RULE`); a turn's
                // retries are its first attempt's. Nothing awaits between this and the send.
                if attempt == first_attempt {
                    facts.ramp = !unit.is_warmup && seat.ramp.as_ref().is_some_and(|r| r.on());
                }
                let in_flight = crate::own_metrics::InFlight::begin();
                let exchange = tokio::select! {
                    x = self.client.send(&request, queue_us) => x,
                    _ = cancel.cancelled() => return tally,
                };
                drop(in_flight);
                let mut facts_now = facts.clone();
                if let (Some(end_us), Some(_)) = (previous_end_us, facts.think_scheduled_us)
                    && attempt == first_attempt
                {
                    facts_now.think_waited_us = Some(exchange.sent_at_us - end_us);
                }
                let failure = exchange.failure.clone();
                let retry_after = exchange.retry_after;
                let truncated = exchange.finish_reason.as_deref() == Some("length");
                let end_us = exchange.sent_at_us + exchange.end_us.unwrap_or(0);
                let output = exchange.output.clone();
                let met = self.store_turn(&unit, k, &sent_case.id, attempt, exchange, facts_now);
                let retry = match &failure {
                    None => {
                        tally.succeeded += 1;
                        tally.truncated += u32::from(truncated);
                        // A conversation counts once against the budget: at its last turn.
                        if k + 1 == case.turns.len() {
                            self.settle_unit(&unit, None, met);
                        }
                        previous_end_us = Some(end_us);
                        answer = Some(output);
                        break;
                    }
                    Some(f) => attempt < unit.last_attempt && is_retryable(f.class) && !self.halted(),
                };
                if retry {
                    if !self.backed_off(&unit, attempt, retry_after, &mut cancel).await {
                        return tally;
                    }
                    if !self.halted() {
                        tally.retries += 1;
                        attempt_ready = Instant::now();
                        continue;
                    }
                }
                if let Some(f) = failure {
                    tally.failed += 1;
                    self.settle_unit(&unit, Some(&f), None);
                    tally.failures.push((sent_case.id.clone(), f));
                }
                break;
            }
            match answer {
                Some(a) => replies.push(a),
                // The turn failed: the rest of the conversation is not sent.
                None => return tally,
            }
            if self.halted() {
                return tally;
            }
        }
        tally
    }

    /// Hands a turn's record to the writer, graded by the turn's graders.
    fn store_turn(
        &self,
        unit: &Unit,
        turn: usize,
        key: &str,
        attempt: u32,
        exchange: Exchange,
        facts: TurnFacts,
    ) -> Option<bool> {
        let graded = exchange.succeeded() && !unit.is_warmup;
        let (mut record, chunk_text) = exchange.into_parts(RecordIdentity {
            run_id: self.run_id,
            candidate_id: self.candidate.id,
            case_id: key.to_string(),
            phase: unit.phase,
            repetition: unit.repetition,
            attempt,
            concurrency: unit.concurrency,
            is_warmup: unit.is_warmup,
        });
        record.turn = Some(Box::new(facts));
        let grading = graded.then(|| Grading {
            file: self.file.clone(),
            case_index: unit.case_index,
            turn: Some(turn),
        });
        let met = self.slo_met(unit, &record);
        if !self.records.send(record, chunk_text, grading) {
            tracing::error!(run_id = self.run_id, "record writer stopped; a record was dropped");
        }
        met
    }
}

/// The record of a turn that could not even be prepared.
fn unsent_turn(failure: Failure, ready: Instant) -> Exchange {
    Exchange {
        sent_at_us: wall_clock_us(),
        client_queue_us: micros(ready.elapsed()),
        end_us: Some(0),
        failure: Some(failure),
        ..Default::default()
    }
}
