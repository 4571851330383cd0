//! The judge phase: `llm-judge` graders, run after every candidate's measured requests (so the
//! judge calls never add load while anything is measured), when the run turns judging on.
//!
//! For every successful measured record whose case has judge graders and that holds no judge
//! grade yet, each judge grader's prompt (`judge_prompt`) is sent to its judge candidate, the
//! reply parsed into a grade (`parse_judge_reply`) and the grades stored on the judged record
//! (`Store::append_grades`, all of a record's judge grades in one transaction). Each call is
//! recorded as a request record of its own: phase `judge`, under the judged candidate, case and
//! repetition (keys in `domain::grading::judge`), with `is_warmup` set so it is excluded from
//! every figure of that candidate; its tokens are priced at the judge's prices on the scorecard.
//!
//! Resumable: a record that already has its judge grades is skipped, and a stored successful
//! judge reply whose grade was not stored yet (killed in between) is parsed again rather than
//! paid for twice. A judge call that fails after every retry is a failed grade saying why.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cancel::Cancel;
use crate::domain::candidate::Candidate;
use crate::domain::evalset::conversation::{HistoryMode, split_turn_key};
use crate::domain::evalset::{ChatMessage, EvalCase, EvalSetFile};
use crate::domain::grading::{
    Grader, GraderSpec, JUDGE_ATTEMPT_STRIDE, JUDGE_GRADE_POSITION, judge_failed, judge_prompt, judge_slots,
    parse_judge_reply,
};
use crate::domain::load::judge_calls_in_flight;
use crate::domain::run::{Phase, RequestRecord, Run};
use crate::error::EngineError;
use crate::store::DynStore;
use crate::tokens::tokenizer::complete_counts;
use crate::wire::client::{CandidateClient, Exchange, RecordIdentity, Timeouts};
use crate::wire::protocol::RequestParams;
use crate::wire::provider::prepare;

/// Judge replies are a few sentences and a score line; this bounds a runaway judge.
const JUDGE_MAX_TOKENS: u32 = 512;
/// Retry back-off, as for measured requests.
const BASE_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The judge candidates of a run, by the name their graders give.
pub struct Judges {
    by_name: HashMap<String, Candidate>,
}

impl Judges {
    /// "name → candidate" for the event log.
    fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .by_name
            .iter()
            .map(|(name, c)| {
                if *name == c.spec.name {
                    format!("{name:?}")
                } else {
                    format!("{name:?} → {:?}", c.spec.name)
                }
            })
            .collect();
        parts.sort();
        parts.join(", ")
    }
}

/// Resolves every judge the run needs, before anything is sent. Ok(Ok(None)): nothing to
/// judge (judging off, or no judge grader); Ok(Err(message)): a judge is missing and the run
/// must stop, saying which.
pub async fn resolve(
    store: &DynStore,
    run: &Run,
    file: &EvalSetFile,
    case_count: usize,
) -> Result<Result<Option<Judges>, String>, EngineError> {
    let names = file.judge_names(case_count);
    let Some(config) = &run.config.judge else {
        return Ok(Ok(None));
    };
    if names.is_empty() {
        return Ok(Ok(None));
    }
    let all = store.list_candidates().await?;
    let mut by_name = HashMap::new();
    for (name, case_id) in names {
        match config.resolve(&name, &all) {
            Some(c) => {
                by_name.insert(name, c.clone());
            }
            None => {
                let why = match config.judge_for(&name) {
                    Some(id) => format!("candidate #{id}, chosen as its judge, no longer exists"),
                    None => format!("there is no candidate named {name:?}"),
                };
                return Ok(Err(format!(
                    "llm-judge: the grader of case {case_id:?} names judge {name:?}, but {why}; \
                     add that candidate or choose a judge on the run form (nothing was sent)"
                )));
            }
        }
    }
    Ok(Ok(Some(Judges { by_name })))
}

/// One measured record to judge, with the judge graders of its case (or conversation turn).
struct Target {
    record: RequestRecord,
    /// The case judged: a conversation turn's is the turn as sent (`turn_as_case`).
    case: EvalCase,
    /// A conversation turn (0-based).
    turn: Option<usize>,
    slots: Vec<(u32, Grader)>,
    /// Judge calls already stored for this record, by attempt.
    earlier: Vec<RequestRecord>,
}

/// What the judge phase did.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    graded: u32,
    failed: u32,
    reused: u32,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.graded += other.graded;
        self.failed += other.failed;
        self.reused += other.reused;
    }
}

/// Runs the judge phase of `run` (see the module comment). Returns early, leaving the rest for
/// a resumed run, when cancelled.
pub async fn judge_run(
    store: &DynStore,
    run: &Run,
    file: Arc<EvalSetFile>,
    judges: &Judges,
    cancel: &Cancel,
) -> Result<(), EngineError> {
    if run.config.judge.is_none() {
        return Ok(());
    }
    let records = store.list_request_records(run.id).await?;
    let targets = targets(run, &file, records);
    if targets.is_empty() {
        return Ok(());
    }
    let concurrency = judge_calls_in_flight(run.config.concurrency);
    let mut clients: HashMap<i64, CandidateClient> = HashMap::new();
    for c in judges.by_name.values() {
        if clients.contains_key(&c.id) {
            continue;
        }
        let client = CandidateClient::new(&c.spec, concurrency, Timeouts::for_run(&run.config)).map_err(|e| {
            EngineError::Client {
                candidate: c.spec.name.clone(),
                message: e.to_string(),
            }
        })?;
        clients.insert(c.id, client);
    }
    let started = Instant::now();
    store
        .append_run_event(
            run.id,
            "info",
            &format!(
                "llm-judge: judging {} outputs with {} at up to {concurrency} calls at once (judge calls are not counted in any figure)",
                targets.len(),
                judges.describe()
            ),
        )
        .await?;
    let shared = Arc::new(Shared {
        run_id: run.id,
        retries: run.config.retries,
        stream: run.config.stream,
        concurrency,
        file,
        judges: judges.by_name.clone(),
        clients,
        store: store.clone(),
        cancel: cancel.clone(),
    });
    let limit = Arc::new(Semaphore::new(concurrency as usize));
    let mut set: JoinSet<Result<Tally, EngineError>> = JoinSet::new();
    let mut total = Tally::default();
    for target in targets {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        if cancel.is_cancelled() {
            break;
        }
        let shared = shared.clone();
        set.spawn(async move {
            let out = shared.judge_record(target).await;
            drop(permit);
            out
        });
        // Finished tasks are collected as we go.
        while let Some(joined) = set.try_join_next() {
            total.add(collect(joined, &mut set)?);
        }
    }
    while let Some(joined) = set.join_next().await {
        total.add(collect(joined, &mut set)?);
    }
    let level = if total.failed > 0 { "warn" } else { "info" };
    let mut msg = format!(
        "llm-judge: {} judge grades stored in {:.1} s",
        total.graded,
        started.elapsed().as_secs_f64()
    );
    if total.failed > 0 {
        msg.push_str(&format!(
            "; {} judge calls failed (graded as failed, reason on each)",
            total.failed
        ));
    }
    if total.reused > 0 {
        msg.push_str(&format!(
            "; {} replies stored before a restart were read again, not re-sent",
            total.reused
        ));
    }
    store.append_run_event(run.id, level, &msg).await?;
    Ok(())
}

fn collect(
    joined: Result<Result<Tally, EngineError>, tokio::task::JoinError>,
    set: &mut JoinSet<Result<Tally, EngineError>>,
) -> Result<Tally, EngineError> {
    match joined {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => {
            set.abort_all();
            Err(e)
        }
        Err(e) => {
            set.abort_all();
            Err(EngineError::Internal(format!("a judge task ended abnormally: {e}")))
        }
    }
}

/// Successful measured records of the run's candidates whose case (or conversation turn) has
/// judge graders and that hold no judge grade yet, in send order, each with the judge calls
/// already stored for it.
fn targets(run: &Run, file: &EvalSetFile, records: Vec<RequestRecord>) -> Vec<Target> {
    let phase = run.config.measured_phase();
    let case_count = run.config.case_count(file.cases.len());
    let cases: HashMap<&str, &EvalCase> = file.cases[..case_count].iter().map(|c| (c.id.as_str(), c)).collect();
    let mut earlier: HashMap<(i64, std::sync::Arc<str>, u32), Vec<RequestRecord>> = HashMap::new();
    // The replies each conversation's turns got: (candidate, conversation, repetition) → by turn.
    let mut replies: HashMap<(i64, String, u32), HashMap<usize, String>> = HashMap::new();
    let mut out = Vec::new();
    for r in records {
        if r.phase == Phase::Judge {
            earlier
                .entry((r.candidate_id, r.case_id.clone(), r.repetition))
                .or_default()
                .push(r);
            continue;
        }
        if r.is_warmup || !r.succeeded() || r.phase != phase || !run.candidate_ids.contains(&r.candidate_id) {
            continue;
        }
        // A conversation turn's record (`case#k`) is judged by that turn's graders.
        let (case, turn) = match split_turn_key(&r.case_id) {
            Some((id, k)) if !cases.contains_key(r.case_id.as_ref()) => match cases.get(id) {
                Some(case) if k <= case.turns.len() => (*case, Some(k - 1)),
                _ => continue,
            },
            _ => match cases.get(r.case_id.as_ref()) {
                Some(case) => (*case, None),
                None => continue,
            },
        };
        if let Some(k) = turn {
            replies
                .entry((r.candidate_id, case.id.clone(), r.repetition))
                .or_default()
                .insert(k, r.output().to_string());
        }
        let graders = match turn {
            Some(k) => file.graders_for_turn(&case.turns[k]),
            None => file.graders_for(case),
        };
        let slots: Vec<(u32, Grader)> = judge_slots(graders).into_iter().map(|(s, g)| (s, g.clone())).collect();
        if slots.is_empty() || r.grades.iter().any(|g| &*g.grader == "llm-judge") {
            continue;
        }
        out.push(Target {
            record: r,
            case: case.clone(),
            turn,
            slots,
            earlier: Vec::new(),
        });
    }
    for t in &mut out {
        let key = (t.record.candidate_id, t.record.case_id.clone(), t.record.repetition);
        t.earlier = earlier.get(&key).cloned().unwrap_or_default();
        // A turn is judged as it was asked: the conversation up to it, with the history it was
        // sent (the candidate's own earlier replies, or the file's golden ones).
        if let Some(k) = t.turn {
            let history: Vec<String> = match file.history_for(&t.case) {
                HistoryMode::Golden => file.golden_replies(&t.case),
                HistoryMode::Own => {
                    let got = replies.get(&(t.record.candidate_id, t.case.id.clone(), t.record.repetition));
                    (0..k)
                        .map(|j| got.and_then(|g| g.get(&j)).cloned().unwrap_or_default())
                        .collect()
                }
            };
            t.case = file.turn_as_case(&t.case, k, &history);
        }
    }
    out
}

/// What every judge task shares.
struct Shared {
    run_id: i64,
    retries: u32,
    stream: bool,
    concurrency: u32,
    file: Arc<EvalSetFile>,
    judges: HashMap<String, Candidate>,
    clients: HashMap<i64, CandidateClient>,
    store: DynStore,
    cancel: Cancel,
}

impl Shared {
    /// Judges one record with each of its judge graders in turn, then stores the grades
    /// together (so a record is either wholly judged or not at all).
    async fn judge_record(&self, t: Target) -> Result<Tally, EngineError> {
        let mut tally = Tally::default();
        let mut grades = Vec::with_capacity(t.slots.len());
        for (slot, grader) in &t.slots {
            if self.cancel.is_cancelled() {
                return Ok(tally);
            }
            let GraderSpec::LlmJudge {
                judge,
                rubric,
                scale,
                min,
            } = &grader.spec
            else {
                continue;
            };
            let (Some(candidate), first) = (self.judges.get(judge), slot * JUDGE_ATTEMPT_STRIDE) else {
                grades.push(judge_failed(grader, &format!("no judge candidate named {judge:?}")));
                tally.failed += 1;
                continue;
            };
            let mine: Vec<&RequestRecord> = t
                .earlier
                .iter()
                .filter(|r| (first..first + JUDGE_ATTEMPT_STRIDE).contains(&r.attempt))
                .collect();
            let grade = if let Some(done) = mine.iter().find(|r| r.succeeded()) {
                tally.reused += 1;
                parse_judge_reply(*scale, *min, done.output())
            } else {
                let next_try = mine.iter().map(|r| r.attempt - first + 1).max().unwrap_or(0);
                let last_failure = mine.iter().max_by_key(|r| r.attempt).map(|r| failure_text(r));
                match self
                    .call(
                        &t,
                        candidate,
                        first,
                        next_try,
                        judge_prompt_for(&self.file, &t, *scale, rubric),
                    )
                    .await?
                {
                    Call::Replied(reply) => parse_judge_reply(*scale, *min, &reply),
                    Call::Failed(why) => {
                        tally.failed += 1;
                        judge_failed(grader, &why)
                    }
                    Call::NoTriesLeft => {
                        tally.failed += 1;
                        judge_failed(grader, &last_failure.unwrap_or_else(|| "no tries left".into()))
                    }
                    Call::Cancelled => return Ok(tally),
                }
            };
            grades.push(grader.weigh(grade));
        }
        if self.cancel.is_cancelled() || grades.is_empty() {
            return Ok(tally);
        }
        tally.graded += self
            .store
            .append_grades(&t.record, JUDGE_GRADE_POSITION, &grades)
            .await? as u32;
        Ok(tally)
    }

    /// Sends the judge prompt from try `next_try` on, with retries and back-off like measured
    /// requests, recording every attempt.
    async fn call(
        &self,
        t: &Target,
        judge: &Candidate,
        first: u32,
        next_try: u32,
        prompt: String,
    ) -> Result<Call, EngineError> {
        if next_try > self.retries {
            return Ok(Call::NoTriesLeft);
        }
        let client = &self.clients[&judge.id];
        let case = EvalCase {
            id: t.case.id.clone(),
            vars: Default::default(),
            messages: Some(vec![ChatMessage {
                role: "user".into(),
                content: prompt,
            }]),
            ..Default::default()
        };
        let params = RequestParams {
            max_tokens: Some(judge.spec.max_tokens.unwrap_or(JUDGE_MAX_TOKENS)),
            // A judge should give the same verdict for the same output.
            temperature: Some(0.0),
            stream: self.stream,
        };
        let request = match prepare(&judge.spec, client.api_key(), &self.file, &case, &params) {
            Ok(r) => r,
            Err(f) => return Ok(Call::Failed(format!("{}: {}", f.class.as_str(), f.detail))),
        };
        let mut cancel = self.cancel.clone();
        let mut last = String::new();
        for try_no in next_try..=self.retries {
            let ready = Instant::now();
            let exchange = tokio::select! {
                x = client.send(&request, i64::try_from(ready.elapsed().as_micros()).unwrap_or(0)) => x,
                _ = cancel.cancelled() => return Ok(Call::Cancelled),
            };
            let failure = exchange.failure.clone();
            let reply = exchange.output.clone();
            self.record(t, first + try_no, exchange).await?;
            match failure {
                None => return Ok(Call::Replied(reply)),
                Some(f) => {
                    last = format!("{}: {}", f.class.as_str(), f.detail);
                    if try_no == self.retries || !f.class.is_retryable() {
                        break;
                    }
                    let wait = BASE_BACKOFF.saturating_mul(1 << (try_no - next_try).min(8));
                    tokio::select! {
                        _ = tokio::time::sleep(wait.min(MAX_BACKOFF)) => {}
                        _ = cancel.cancelled() => return Ok(Call::Cancelled),
                    }
                }
            }
        }
        Ok(Call::Failed(last))
    }

    /// Stores one judge call (token counts completed on the blocking pool, as the writer does).
    async fn record(&self, t: &Target, attempt: u32, exchange: Exchange) -> Result<(), EngineError> {
        let (mut record, chunk_text) = exchange.into_parts(RecordIdentity {
            run_id: self.run_id,
            candidate_id: t.record.candidate_id,
            case_id: t.record.case_id.to_string(),
            phase: Phase::Judge,
            repetition: t.record.repetition,
            attempt,
            concurrency: self.concurrency,
            is_warmup: true,
        });
        let record = tokio::task::spawn_blocking(move || {
            complete_counts(&mut record, &chunk_text);
            record
        })
        .await
        .map_err(|e| EngineError::Internal(format!("counting a judge reply's tokens: {e}")))?;
        self.store.append_request_records(&[record]).await?;
        Ok(())
    }
}

enum Call {
    Replied(String),
    Failed(String),
    /// Every try was used before a restart; the last stored failure is the reason.
    NoTriesLeft,
    Cancelled,
}

fn failure_text(r: &RequestRecord) -> String {
    match (r.error_class, &r.error_detail()) {
        (Some(c), Some(d)) => format!("{}: {d}", c.as_str()),
        (Some(c), None) => c.as_str().to_string(),
        _ => "unknown".to_string(),
    }
}

/// The judge prompt for a target: the case's prompt as sent, the output, and the expected value
/// as reference when the case has one.
fn judge_prompt_for(file: &EvalSetFile, t: &Target, scale: crate::domain::grading::JudgeScale, rubric: &str) -> String {
    // A conversation turn: the conversation so far, each message with its role.
    let input = match t.turn {
        Some(_) => file
            .messages_for(&t.case)
            .iter()
            .map(|m| format!("[{}] {}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n\n"),
        None => file.prompt_text_for(&t.case),
    };
    judge_prompt(
        scale,
        rubric,
        &input,
        &t.record.graded_text(file.header.grade_reasoning),
        t.case.expected_text().as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_judge_is_asked_with_the_conversation_as_it_was_sent() {
        let text = concat!(
            r#"{"bakeoff_evalset":1,"name":"s","task":"generation","system":"Be brief.","graders":[{"kind":"exact"}]}"#,
            "\n",
            r#"{"id":"c","turns":[{"user":"Call me Ann.","expected":"OK Ann"},{"user":"Who am I?","graders":[{"kind":"llm-judge","judge":"big","rubric":"Names the user?"}],"expected":"Ann"}]}"#,
            "\n"
        );
        let file = EvalSetFile::parse("t.jsonl", text).unwrap();
        assert_eq!(file.judge_names(1), [("big".to_string(), "c".to_string())]);
        let run = Run {
            id: 1,
            name: "r".into(),
            evalset_version_id: 1,
            candidate_ids: vec![1],
            config: crate::domain::run::RunConfig {
                judge: Some(Default::default()),
                ..Default::default()
            },
            status: crate::domain::run::RunStatus::Running,
            error: None,
            created_at: crate::domain::Timestamp(0),
            started_at: None,
            finished_at: None,
        };
        let records = vec![
            RequestRecord::test_quality("c#1").with_output("OK, Anne"),
            RequestRecord::test_quality("c#2").with_output("You are Anne"),
        ];
        let found = targets(&run, &file, records);
        // Turn 1's graders have no judge; turn 2 is judged by its own.
        assert_eq!(found.len(), 1);
        let t = &found[0];
        assert_eq!((t.record.case_id.as_ref(), t.turn), ("c#2", Some(1)));
        assert_eq!(t.slots.len(), 1);
        let GraderSpec::LlmJudge { scale, rubric, .. } = &t.slots[0].1.spec else {
            panic!("a judge slot");
        };
        let prompt = judge_prompt_for(&file, t, *scale, rubric);
        // The conversation as sent: the candidate's own earlier reply as history, roles named.
        assert!(
            prompt.contains("[system] Be brief.\n\n[user] Call me Ann.\n\n[assistant] OK, Anne\n\n[user] Who am I?"),
            "{prompt}"
        );
        assert!(prompt.contains("<<<RESPONSE\nYou are Anne\nRESPONSE>>>"), "{prompt}");
        assert!(prompt.contains("<<<REFERENCE\nAnn\nREFERENCE>>>"), "{prompt}");
        // Judged already: not again.
        let mut judged = RequestRecord::test_quality("c#2").with_output("You are Anne");
        judged.grades = vec![crate::domain::grading::Grade {
            grader: "llm-judge".into(),
            ..crate::domain::grading::Grade::test_exact(true)
        }];
        assert!(targets(&run, &file, vec![judged]).is_empty());
    }

    #[test]
    fn judge_names_are_listed_once_with_the_first_case_naming_them() {
        let text = concat!(
            r#"{"bakeoff_evalset":1,"name":"s","task":"generation","prompt":"{{q}}","graders":[{"kind":"llm-judge","judge":"big","rubric":"r"}]}"#,
            "\n",
            r#"{"id":"a","vars":{"q":"1"}}"#,
            "\n",
            r#"{"id":"b","vars":{"q":"2"},"graders":[{"kind":"exact"},{"kind":"llm-judge","judge":"other","rubric":"r"}]}"#,
            "\n",
            r#"{"id":"c","vars":{"q":"3"}}"#,
            "\n"
        );
        let file = EvalSetFile::parse("t.jsonl", text).unwrap();
        assert_eq!(
            file.judge_names(3),
            [
                ("big".to_string(), "a".to_string()),
                ("other".to_string(), "b".to_string())
            ]
        );
        assert_eq!(
            file.judge_names(1).len(),
            1,
            "cases past the limit are not sent, nor judged"
        );
    }
}
