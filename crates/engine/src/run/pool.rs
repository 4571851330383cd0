//! One candidate's request pool within a run: the units to send (`Feed`), sent closed loop
//! (at most c in flight, each replaced when it ends) or open loop (on schedule, whatever the
//! server does), each with its retries, and handed to the record writer. What the store
//! already holds (`FinishedUnits`) is skipped, so a resumed run continues where it stopped.
//!
//! Retries: a failed attempt whose class is worth repeating is sent again (up to the run's
//! `retries`, in every stage), after the wait its response's `Retry-After` asked for (capped),
//! else exponential backoff with jitter (`domain::retry`). Each attempt is its own record
//! (`attempt` 0, 1, …); figures take a request's outcome from its last attempt only.
//!
//! Isolation: each candidate's final outcomes feed its error budget (`domain::run::ErrorBudget`);
//! once it is exceeded the candidate *halts* — no new request, no further retry — while the
//! run goes on with the others (the executor stores the stop and its reason).
//!
//! Stop when decided: with `RunConfig::stop_when_decided`, each measured request's outcome
//! against the SLO feeds the level's `LevelDecision`; once it is decided no new request of the
//! level is sent (those in flight end and count).
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderValue;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::writer::{Grading, RecordSender};
use crate::cancel::Cancel;
use crate::domain::calibers::RequestFigures;
use crate::domain::candidate::Candidate;
use crate::domain::capacity::{LevelDecision, LevelVerdict};
use crate::domain::evalset::EvalSetFile;
use crate::domain::evalset::conversation::{split_turn_key, turn_key};
use crate::domain::retry::retry_delay;
use crate::domain::run::{BudgetWindow, CYCLE_LIMIT, ErrorClass, Phase, Run, RunConfig, join_repetition};
use crate::domain::stats::SplitMix64;
use crate::domain::tool_calls::ToolMode;
use crate::error::EngineError;
use crate::store::RecordFact;
use crate::wire::client::{CandidateClient, Exchange, RecordIdentity, Timeouts, wall_clock_us};
use crate::wire::failure::Failure;
use crate::wire::protocol::{PreparedRequest, RequestParams};
use crate::wire::provider::prepare;
use crate::wire::tools;

/// The first connection session handed to a conversation of its own (outside a closed loop's
/// users, whose sessions are their numbers).
pub(crate) const OWN_SESSIONS_FROM: u32 = 1 << 30;

/// The phase of a plain eval run's measured requests (see `RunConfig::measured_phase`).
pub const MEASURED_PHASE: Phase = Phase::Quality;

/// Whether a failed attempt is worth repeating (see `ErrorClass::is_retryable`).
pub fn is_retryable(class: ErrorClass) -> bool {
    class.is_retryable()
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
    /// A conversation a resumed run continues: from which turn, with which history.
    pub resume: Option<Arc<TurnResume>>,
}

/// Where a conversation stopped before a restart: the turn to send next (0-based; from
/// `first_attempt` on) and the replies the turns before it got (the model's own history).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnResume {
    pub from_turn: usize,
    pub replies: Vec<String>,
}

/// Who sends a unit: which of the level's users, on which connection session, and until when
/// a conversation's turns are the level's ramp.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seat {
    /// Which of the level's closed-loop users (0 outside a closed loop).
    pub user: u32,
    /// The keep-alive connection session its conversation turns go on (`h1::Pool::post`):
    /// a closed-loop user keeps its own for all its turns; None: each conversation takes a
    /// session of its own for its turns, ended with it (an open loop's arrivals).
    pub session: Option<u32>,
    /// The level's ramp, when its users start staggered: turns sent before every user has
    /// started are the ramp (`domain::conversation::RAMP_RULE`).
    pub ramp: Option<Arc<Ramp>>,
}

/// How many of a level's users have started: until all have, the level is in its ramp.
#[derive(Debug)]
pub(crate) struct Ramp {
    users: u32,
    started: std::sync::atomic::AtomicU32,
}

impl Ramp {
    pub(crate) fn new(users: u32) -> Ramp {
        Ramp {
            users,
            started: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// One more user started (its stagger wait is over; its first turn is about to be sent).
    fn start(&self) {
        self.started.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether some user has not started yet: a turn sent now is in the ramp.
    pub(crate) fn on(&self) -> bool {
        self.started.load(Ordering::Acquire) < self.users
    }
}

/// What the store already holds for one candidate, keyed by (case, phase, repetition).
#[derive(Debug, Default)]
pub struct FinishedUnits {
    /// Highest stored attempt and whether that unit is settled.
    units: HashMap<(String, Phase, u32), (u32, bool)>,
    /// Conversations by (case id, phase, repetition): the highest turn stored (1-based) and
    /// whether an attempt of it succeeded.
    conversations: HashMap<(String, Phase, u32), (usize, bool)>,
    /// The replies of the turns already sent of the conversations to continue (`with_replies`).
    replies: HashMap<(String, Phase, u32), Vec<String>>,
    /// Warm-ups already stored; new warm-ups are numbered after them so none collide.
    pub warmups: u32,
    /// Whether a staged rollout was already recorded (a resumed run does not repeat it).
    pub rollout_done: bool,
}

impl FinishedUnits {
    /// What the store holds of `candidate_id`, from the stored facts (keys and outcomes, no
    /// text), so a resumed run does not load every record. A unit is settled when an attempt
    /// succeeded, the last allowed attempt is stored, or the last stored failure is not worth
    /// retrying.
    pub fn from_facts(facts: &[RecordFact], candidate_id: i64, retries: u32) -> Self {
        let mut out = FinishedUnits::default();
        for r in facts.iter().filter(|f| f.candidate_id == candidate_id) {
            if r.phase == Phase::Judge {
                // Judge calls are the judge pass's to resume (`llm_judge`), not units.
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
                r.error_class.is_none() || r.attempt >= retries || r.error_class.is_some_and(|c| !is_retryable(c));
            let entry = out
                .units
                .entry((r.case_id.to_string(), r.phase, r.repetition))
                .or_insert((r.attempt, false));
            if r.attempt >= entry.0 {
                entry.0 = r.attempt;
            }
            entry.1 |= settled_by_this;
            if let Some((case, turn)) = split_turn_key(&r.case_id) {
                let seen = out
                    .conversations
                    .entry((case.to_string(), r.phase, r.repetition))
                    .or_insert((turn, false));
                if turn > seen.0 {
                    *seen = (turn, false);
                }
                if turn == seen.0 {
                    seen.1 |= r.error_class.is_none();
                }
            }
        }
        out
    }

    /// Where conversation `case_id` (of `turns` turns) stands: None when it is settled (its
    /// last turn succeeded, or a turn failed for good: the later ones are never sent); else the
    /// turn to send next (0-based) and the attempt to send it from.
    pub fn conversation_next(
        &self,
        case_id: &str,
        turns: usize,
        phase: Phase,
        repetition: u32,
    ) -> Option<(usize, u32)> {
        let Some(&(turn, succeeded)) = self.conversations.get(&(case_id.to_string(), phase, repetition)) else {
            return Some((0, 0));
        };
        if succeeded {
            return (turn < turns).then_some((turn, 0));
        }
        let key = turn_key(case_id, turn);
        self.next_attempt(&key, phase, repetition)
            .map(|attempt| (turn - 1, attempt))
    }

    /// The conversations a resumed run continues past their first turn, whose earlier turns'
    /// stored replies it needs as history: (case id, phase, repetition, the next turn, 0-based).
    /// `turns_of` gives a conversation case's turns (None: no longer one of the set's).
    pub fn conversations_to_continue(
        &self,
        turns_of: impl Fn(&str) -> Option<usize>,
    ) -> Vec<(String, Phase, u32, usize)> {
        let mut out: Vec<(String, Phase, u32, usize)> = self
            .conversations
            .keys()
            .filter_map(|(case, phase, rep)| {
                let (next, _) = self.conversation_next(case, turns_of(case)?, *phase, *rep)?;
                (next > 0).then(|| (case.clone(), *phase, *rep, next))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, a.1.as_str(), a.2).cmp(&(&b.0, b.1.as_str(), b.2)));
        out
    }

    /// Keeps the replies a continued conversation's earlier turns got (`replies[j]`: turn j+1's),
    /// read from their stored records.
    pub fn with_replies(&mut self, case_id: &str, phase: Phase, repetition: u32, replies: Vec<String>) {
        self.replies.insert((case_id.to_string(), phase, repetition), replies);
    }

    /// How a conversation to continue is resumed (None: it starts at turn 1).
    fn resume_of(&self, case_id: &str, phase: Phase, repetition: u32, from_turn: usize) -> Option<Arc<TurnResume>> {
        (from_turn > 0).then(|| {
            let replies = self
                .replies
                .get(&(case_id.to_string(), phase, repetition))
                .cloned()
                .unwrap_or_default();
            Arc::new(TurnResume { from_turn, replies })
        })
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
    pub(crate) fn add(&mut self, other: Tally) {
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
    /// Turns of each case (0: not a conversation).
    pub turns: Vec<usize>,
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
                let (case_id, turns) = (&f.case_ids[k], f.turns[k]);
                // A conversation goes on from the turn it reached.
                let next = if turns > 0 {
                    f.done.conversation_next(case_id, turns, f.phase, repetition)
                } else {
                    f.done.next_attempt(case_id, f.phase, repetition).map(|a| (0, a))
                };
                if let Some((from_turn, first_attempt)) = next {
                    return Some(Unit {
                        case_index: f.cases[k],
                        phase: f.phase,
                        repetition,
                        is_warmup: false,
                        first_attempt,
                        last_attempt: f.last_attempt,
                        concurrency: f.concurrency,
                        resume: f.done.resume_of(case_id, f.phase, repetition, from_turn),
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
    pub(crate) client: CandidateClient,
    pub(crate) params: RequestParams,
    pub(crate) records: RecordSender,
    pub cancel: Cancel,
    /// The last outcomes of this candidate's measured requests, against its error budget.
    budget: Mutex<BudgetWindow>,
    halt: Halt,
    /// The current level's attainment against the SLO target, with `stop_when_decided`.
    decision: Mutex<Option<LevelDecision>>,
    /// Turns of the longest conversation case sent (0: none), for the users' stagger.
    pub(crate) longest_conversation: usize,
    /// The next connection session of a conversation sent outside a closed loop's users.
    pub(crate) next_session: std::sync::atomic::AtomicU32,
    /// The current level's successful measured requests as (send time µs, TTFT ms): the
    /// level's signs of over-saturation (`domain::capacity::saturation_signs`).
    level_ttft: Mutex<Vec<(i64, f64)>>,
}

/// One candidate's stop signal: set once, with its reason, when its error budget runs out.
#[derive(Default)]
struct Halt {
    halted: AtomicBool,
    reason: Mutex<Option<String>>,
    notify: Notify,
}

impl CandidateRun {
    pub(crate) fn new(
        run: &Run,
        candidate: &Candidate,
        file: Arc<EvalSetFile>,
        records: RecordSender,
        cancel: Cancel,
    ) -> Result<Arc<Self>, EngineError> {
        let config = run.config.clone();
        let client =
            CandidateClient::new(&candidate.spec, config.pool_size(), Timeouts::for_run(&config)).map_err(|e| {
                EngineError::Client {
                    candidate: candidate.spec.name.clone(),
                    message: e.to_string(),
                }
            })?;
        let case_count = config.case_count(file.cases.len());
        Ok(Arc::new(CandidateRun {
            run_id: run.id,
            params: RequestParams::resolve(&config, &file.header, &candidate.spec),
            config,
            candidate: candidate.clone(),
            file: file.clone(),
            case_count,
            client,
            records,
            cancel,
            budget: Mutex::new(BudgetWindow::new(run.config.error_budget)),
            halt: Halt::default(),
            decision: Mutex::new(None),
            longest_conversation: file.cases[..case_count]
                .iter()
                .map(|c| c.turns.len())
                .max()
                .unwrap_or(0),
            next_session: std::sync::atomic::AtomicU32::new(OWN_SESSIONS_FROM),
            level_ttft: Mutex::new(Vec::new()),
        }))
    }

    /// A new level begins: with `stop_when_decided` and a target, its decision starts empty.
    pub(crate) fn begin_level(&self) {
        let target = self
            .config
            .effective_slo()
            .target_attainment
            .filter(|_| self.config.stop_when_decided);
        *self.decision.lock().unwrap_or_else(|p| p.into_inner()) = target.map(LevelDecision::new);
        self.level_ttft.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The current level's (send time, TTFT) of its successful measured requests so far.
    pub(crate) fn level_ttft(&self) -> Vec<(i64, f64)> {
        self.level_ttft.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The current level's verdict and the requests it had counted when it was reached, once
    /// decided.
    pub(crate) fn level_decided(&self) -> Option<(LevelVerdict, u64)> {
        let guard = self.decision.lock().unwrap_or_else(|p| p.into_inner());
        let d = guard.as_ref()?;
        Some((d.decided()?, d.decided_after()?))
    }

    fn deciding(&self) -> bool {
        self.decision.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Whether this candidate stopped sending because its error budget ran out.
    pub(crate) fn halted(&self) -> bool {
        self.halt.halted.load(Ordering::Acquire)
    }

    /// Why it halted ("12 of its last 20 measured requests failed, …"), once it has.
    pub(crate) fn halt_reason(&self) -> Option<String> {
        self.halt.reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// No new request, no further retry: the run was cancelled or this candidate halted.
    fn stopping(&self) -> bool {
        self.cancel.is_cancelled() || self.halted()
    }

    /// Counts a measured request's final outcome against the error budget (warm-ups and the
    /// staged start do not count); halts the candidate when the budget is exceeded.
    /// `met`: whether a successful request met the SLO (None when no decision is kept).
    pub(crate) fn settle_unit(&self, unit: &Unit, failure: Option<&Failure>, met: Option<bool>) {
        self.settle(unit, failure, met)
    }

    fn settle(&self, unit: &Unit, failure: Option<&Failure>, met: Option<bool>) {
        if unit.is_warmup {
            return;
        }
        if unit.phase == self.config.measured_phase()
            && let Some(d) = self.decision.lock().unwrap_or_else(|p| p.into_inner()).as_mut()
        {
            d.add(failure.is_none() && met.unwrap_or(false));
        }
        let exceeded = self
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(failure.is_some());
        let (Some(x), Some(last)) = (exceeded, failure) else {
            return;
        };
        let reason = format!(
            "{} of its last {} measured requests failed, over the error budget ({} failed); the last: {} ({})",
            x.failed,
            x.window,
            self.config.error_budget.describe(),
            last.class.as_str(),
            last.detail
        );
        let mut slot = self.halt.reason.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(reason);
            self.halt.halted.store(true, Ordering::Release);
            self.halt.notify.notify_waiters();
        }
    }

    /// The jitter draw of a unit's retry: seeded by the attempt's key, so a run's waits are
    /// reproducible and requests failed together spread out.
    /// Waits out a retry's delay (backoff with jitter, or the server's Retry-After); false when
    /// the run was cancelled meanwhile.
    pub(crate) async fn backed_off(
        &self,
        unit: &Unit,
        attempt: u32,
        retry_after: Option<Duration>,
        cancel: &mut Cancel,
    ) -> bool {
        let wait = retry_delay(attempt - unit.first_attempt, retry_after, self.jitter(unit, attempt));
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = cancel.cancelled() => false,
        }
    }

    fn jitter(&self, unit: &Unit, attempt: u32) -> f64 {
        let key = (self.run_id as u64).rotate_left(40)
            ^ (self.candidate.id as u64).rotate_left(24)
            ^ (unit.case_index as u64).rotate_left(8)
            ^ u64::from(unit.repetition).rotate_left(48)
            ^ u64::from(attempt);
        SplitMix64::new(key).next_f64()
    }
}

impl CandidateRun {
    /// Closed loop: `concurrency` workers, each taking the next unit as soon as its previous
    /// one ends, so at most `concurrency` requests are ever in flight.
    pub(crate) async fn closed_loop(self: Arc<Self>, feed: Feed, concurrency: u32) -> Result<Tally, EngineError> {
        let workers = match &feed {
            Feed::List(units) => units.len().min(concurrency.max(1) as usize),
            Feed::Cycle(_) => concurrency.max(1) as usize,
        };
        let feed = Arc::new(Mutex::new(feed));
        let mut set = JoinSet::new();
        let started = Instant::now();
        // With conversations and a think time, users start staggered; until every one has
        // started, the level is in its ramp (`domain::conversation::RAMP_RULE`).
        let start_of = |user: usize| {
            self.config
                .think_time
                .filter(|_| self.longest_conversation > 0)
                .map(|think| {
                    let offset = crate::domain::conversation::user_start_offset_us(
                        user as u32,
                        workers as u32,
                        self.longest_conversation,
                        &think,
                    );
                    started + Duration::from_micros(offset.max(0) as u64)
                })
        };
        let staggered = start_of(workers.saturating_sub(1)).is_some_and(|last| last > started);
        let ramp = staggered.then(|| Arc::new(Ramp::new(workers as u32)));
        for user in 0..workers {
            let seat = Seat {
                user: user as u32,
                session: Some(user as u32),
                ramp: ramp.clone(),
            };
            set.spawn(self.clone().worker(feed.clone(), seat, start_of(user)));
        }
        join_all(set).await
    }

    /// One closed-loop worker: with conversation cases, one *user* (`seat`), whose first
    /// conversation starts at its stagger offset (`starts`) so the users are on different turns,
    /// and whose turns all go on its own connection.
    async fn worker(self: Arc<Self>, feed: Arc<Mutex<Feed>>, seat: Seat, starts: Option<Instant>) -> Tally {
        let mut tally = Tally::default();
        if let Some(at) = starts {
            let mut cancel = self.cancel.clone();
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = cancel.cancelled() => return tally,
            }
        }
        if let Some(ramp) = &seat.ramp {
            ramp.start();
        }
        loop {
            if self.stopping() || self.level_decided().is_some() {
                return tally;
            }
            // The unit is ready to go now: everything until the send is bakeoff's own queue.
            let ready = Instant::now();
            let Some(unit) = feed.lock().unwrap_or_else(|p| p.into_inner()).next() else {
                return tally;
            };
            tally.add(self.send_unit_as(unit, ready, seat.clone()).await);
        }
    }

    /// Open loop: units sent at `per_second` (evenly spaced, or with exponential gaps when
    /// `poisson`, seeded) whatever the server does, at most `max_in_flight` at once; each
    /// request's client queue time is its lateness against the schedule.
    pub(crate) async fn open_loop(
        self: Arc<Self>,
        mut feed: Feed,
        per_second: f64,
        poisson: bool,
        max_in_flight: usize,
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
        let limit = Arc::new(Semaphore::new(max_in_flight));
        let mut set = JoinSet::new();
        let mut cancel = self.cancel.clone();
        let mut planned = Instant::now();
        loop {
            let halted = self.halt.notify.notified();
            tokio::pin!(halted);
            halted.as_mut().enable();
            if self.halted() || self.level_decided().is_some() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(planned) => {}
                _ = cancel.cancelled() => break,
                _ = &mut halted => break,
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
        self.send_unit_as(unit, ready, Seat::default()).await
    }

    /// [`CandidateRun::send_unit`] from `seat` (a conversation case is sent turn by turn).
    pub(crate) async fn send_unit_as(&self, unit: Unit, ready: Instant, seat: Seat) -> Tally {
        if self.file.cases[unit.case_index].is_conversation() {
            return self.send_conversation(unit, ready, seat).await;
        }
        let mut tally = Tally::default();
        let mut cancel = self.cancel.clone();
        let case = &self.file.cases[unit.case_index];
        let sent = tools::case_as_sent(&self.file, case, self.tool_mode());
        let prepared = prepare(
            &self.candidate.spec,
            self.client.api_key(),
            &self.file,
            &sent,
            &self.params,
        );
        drop(sent);
        let prepared = match prepared {
            Ok(p) => p,
            Err(failure) => {
                tally.failed += 1;
                tally.failures.push((case.id.clone(), failure.clone()));
                self.settle(&unit, Some(&failure), None);
                self.store_record(&unit, unit.first_attempt, unsent(failure, ready));
                return tally;
            }
        };
        let mut ready = ready;
        for attempt in unit.first_attempt..=unit.last_attempt.max(unit.first_attempt) {
            // While the database is away and the writer holds its bound of records, no new
            // request is sent (the wait shows as client queue time): the run pauses, nothing is lost.
            tokio::select! {
                _ = self.records.room() => {}
                _ = cancel.cancelled() => return tally,
            }
            let request = self.with_request_id(&prepared, &unit, attempt);
            let queue_us = micros(ready.elapsed());
            let in_flight = crate::own_metrics::InFlight::begin();
            let exchange = tokio::select! {
                x = self.client.send(&request, queue_us) => x,
                _ = cancel.cancelled() => return tally,
            };
            drop(in_flight);
            let failure = exchange.failure.clone();
            let retry_after = exchange.retry_after;
            let truncated = exchange.finish_reason.as_deref() == Some("length");
            let met = self.store_record(&unit, attempt, exchange);
            let retry = match &failure {
                None => {
                    tally.succeeded += 1;
                    tally.truncated += u32::from(truncated);
                    self.settle(&unit, None, met);
                    break;
                }
                Some(f) => attempt < unit.last_attempt && is_retryable(f.class) && !self.halted(),
            };
            if retry {
                if !self.backed_off(&unit, attempt, retry_after, &mut cancel).await {
                    return tally;
                }
                // A candidate halted meanwhile sends no more; the attempt stays its last.
                if !self.halted() {
                    tally.retries += 1;
                    ready = Instant::now();
                    continue;
                }
            }
            if let Some(f) = failure {
                tally.failed += 1;
                self.settle(&unit, Some(&f), None);
                tally.failures.push((case.id.clone(), f));
            }
            break;
        }
        tally
    }

    /// Tags the attempt with `x-request-id: bakeoff-RUN-CANDIDATE-PHASE-CASEINDEX-REPETITION-ATTEMPT`,
    /// so it can be found in the server's logs (the mock's ground truth keeps it).
    pub(crate) fn with_request_id(&self, prepared: &PreparedRequest, unit: &Unit, attempt: u32) -> PreparedRequest {
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
    /// How this candidate's tool cases are sent (`wire::tools::mode_for`).
    fn tool_mode(&self) -> ToolMode {
        tools::mode_for(
            self.candidate.spec.provider,
            self.config.tool_mode_of(self.candidate.id),
        )
    }

    /// Returns whether it met the SLO when the level keeps a decision.
    fn store_record(&self, unit: &Unit, attempt: u32, mut exchange: Exchange) -> Option<bool> {
        let case = &self.file.cases[unit.case_index];
        tools::mark_tool_turn(&mut exchange, case, self.tool_mode());
        tools::structured_answer(&mut exchange, case);
        // A tool case whose stream broke off mid-call is graded too (`stream-cut`, malformed):
        // it is a failed request and a failed tool call, whatever retries then make of it.
        let cut_mid_call = !exchange.succeeded()
            && case.is_tool_case()
            && crate::domain::tool_calls::cut_mid_call(exchange.tool_turn.as_ref(), &exchange.output);
        let graded = (exchange.succeeded() || cut_mid_call) && !unit.is_warmup;
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
            turn: None,
        });
        let met = self.slo_met(unit, &record);
        if !self.records.send(record, chunk_text, grading) {
            tracing::error!(run_id = self.run_id, "record writer stopped; a record was dropped");
        }
        met
    }
}

impl CandidateRun {
    /// Whether the record met the SLO, when the level keeps a decision. A measured record's TTFT
    /// is also kept for the level's signs of over-saturation.
    pub(crate) fn slo_met(&self, unit: &Unit, record: &crate::domain::run::RequestRecord) -> Option<bool> {
        // A conversation's ramp turns are in no speed figure (`domain::conversation::RAMP_RULE`).
        let figures = (!unit.is_warmup && !record.in_ramp() && unit.phase == self.config.measured_phase())
            .then(|| RequestFigures::of(record))
            .flatten();
        if let Some(f) = &figures {
            self.level_ttft
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((record.sent_at_us, f.ttft_ms));
        }
        self.deciding()
            .then(|| figures.as_ref().is_some_and(|f| f.meets(&self.config.effective_slo())))
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

pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::{RequestRecord, TokenSource};

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
        let records = [
            rec("a", 0, 0, None, false),
            rec("b", 0, 0, Some(ErrorClass::HttpServerError), false),
            rec("c", 0, 0, Some(ErrorClass::HttpServerError), false),
            rec("c", 0, 1, Some(ErrorClass::StreamCut), false),
            rec("d", 0, 0, Some(ErrorClass::ContextLengthExceeded), false),
            rec("w", 0, 0, None, true),
            rec("w", 1, 0, None, true),
            smoke,
        ];
        // The stored facts (no text), as a resumed run reads them.
        let facts: Vec<RecordFact> = records
            .iter()
            .map(|r| RecordFact {
                candidate_id: r.candidate_id,
                case_id: r.case_id.clone(),
                phase: r.phase,
                repetition: r.repetition,
                attempt: r.attempt,
                is_warmup: r.is_warmup,
                error_class: r.error_class,
                passed: None,
            })
            .collect();
        let done = FinishedUnits::from_facts(&facts, 3, 1);
        assert_eq!(done.next_attempt("a", MEASURED_PHASE, 0), None);
        assert_eq!(done.next_attempt("a", MEASURED_PHASE, 1), Some(0));
        assert_eq!(done.next_attempt("b", MEASURED_PHASE, 0), Some(1));
        assert_eq!(done.next_attempt("c", MEASURED_PHASE, 0), None, "retries used up");
        assert_eq!(done.next_attempt("d", MEASURED_PHASE, 0), None, "not worth retrying");
        assert_eq!(done.next_attempt("new", MEASURED_PHASE, 0), Some(0));
        assert_eq!(done.warmups, 2);
        assert!(done.rollout_done);
        let other = FinishedUnits::from_facts(&facts, 4, 1);
        assert_eq!(other.next_attempt("a", MEASURED_PHASE, 0), Some(0));
        assert!(!other.rollout_done);
    }

    #[test]
    fn a_conversation_goes_on_from_the_turn_it_reached() {
        let fact = |case: &str, attempt: u32, class: Option<ErrorClass>| RecordFact {
            candidate_id: 3,
            case_id: case.into(),
            phase: MEASURED_PHASE,
            repetition: 0,
            attempt,
            is_warmup: false,
            error_class: class,
            passed: None,
        };
        let facts = [
            // a: two of four turns done.
            fact("a#1", 0, None),
            fact("a#2", 0, None),
            // b: turn 2 failed, a retry left.
            fact("b#1", 0, None),
            fact("b#2", 0, Some(ErrorClass::HttpServerError)),
            // c: turn 2 failed for good: the conversation stopped there.
            fact("c#1", 0, None),
            fact("c#2", 0, Some(ErrorClass::ContextLengthExceeded)),
            // d: every turn done.
            fact("d#1", 0, None),
            fact("d#2", 0, None),
        ];
        let done = FinishedUnits::from_facts(&facts, 3, 1);
        let next = |case| done.conversation_next(case, if case == "d" { 2 } else { 4 }, MEASURED_PHASE, 0);
        assert_eq!(next("a"), Some((2, 0)), "turn 3 next, from its first attempt");
        assert_eq!(next("b"), Some((1, 1)), "turn 2 again, its second attempt");
        assert_eq!(next("c"), None);
        assert_eq!(next("d"), None);
        assert_eq!(next("new"), Some((0, 0)));
        let turns = |case: &str| Some(if case == "d" { 2 } else { 4 });
        let todo: Vec<(String, usize)> = done
            .conversations_to_continue(turns)
            .into_iter()
            .map(|(case, _, _, next)| (case, next))
            .collect();
        assert_eq!(todo, [("a".to_string(), 2), ("b".to_string(), 1)]);
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
            turns: vec![0, 0],
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
