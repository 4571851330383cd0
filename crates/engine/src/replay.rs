//! Replaying a workload (`domain::workload::replay`): every candidate gets the identical
//! schedule — each request due at its recorded arrival ÷ the speed-up, from one common start —
//! and the identical prompts: synthetic text of exactly the recorded input length (o200k) whose
//! prefix blocks are the same text wherever the workload's block ids repeat (or the kept prompt,
//! in a workload that keeps text), with `max_tokens` the recorded output length.
//!
//! Requests are built just ahead of their time (never inside the timed part) and sent on
//! schedule whatever the server does, like the open loop's (`run::pool`); the wait ends with a
//! short spin, since a timer alone wakes up to a millisecond late. Fidelity — send lag, lengths
//! sent and received — is measured for every request.
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;

use crate::cancel::Cancel;
use crate::domain::candidate::CandidateSpec;
use crate::domain::evalset::{ChatMessage, EvalCase, EvalSetFile, EvalSetHeader, TaskKind};
use crate::domain::workload::WorkloadFile;
use crate::domain::workload::replay::{Fidelity, MAX_SPEED, Sent, due_ms, pieces};
use crate::error::EngineError;
use crate::tokens::tokenizer::replay_prompt;
use crate::wire::client::{CandidateClient, Timeouts, wall_clock_us};
use crate::wire::protocol::RequestParams;
use crate::wire::provider::prepare;

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// 1.0: as recorded; 2.0: twice as fast.
    pub speed: f64,
    /// Seeds the synthetic text (the schedule needs none: it is the workload's).
    pub seed: u64,
    pub stream: bool,
    /// Also ask for at least the recorded output (`min_tokens` and `ignore_eos`, which vLLM,
    /// SGLang and the built-in mock honour), so answers are the recorded length.
    pub exact_output: bool,
    /// Replay the first requests only.
    pub limit: Option<usize>,
    /// Keep each prompt sent in the report (for checking; costs memory).
    pub keep_prompts: bool,
    /// Most requests in flight per candidate; past it sends wait (and the wait shows as lag).
    pub max_in_flight: usize,
    pub timeouts: Timeouts,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            speed: 1.0,
            seed: 0,
            stream: true,
            exact_output: false,
            limit: None,
            keep_prompts: false,
            max_in_flight: crate::domain::load::OPEN_LOOP_MAX_IN_FLIGHT,
            timeouts: Timeouts {
                connect: Duration::from_secs(10),
                first_token: Duration::from_secs(120),
                stall: Duration::from_secs(60),
                total: Duration::from_secs(600),
            },
        }
    }
}

/// One request as sent to one candidate.
#[derive(Debug, Clone, Serialize)]
pub struct SentRequest {
    pub index: usize,
    /// When it was due and when it was written, microseconds since the Unix epoch.
    pub due_unix_us: i64,
    pub sent_unix_us: i64,
    /// Tokens of the prompt sent (o200k).
    pub input_tokens: u32,
    pub max_tokens: u32,
    /// What the server's usage said.
    pub server_input_tokens: Option<u32>,
    pub output_tokens: Option<u32>,
    pub failure: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// One candidate's replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub candidate: String,
    pub model: String,
    pub start_unix_us: i64,
    pub speed: f64,
    pub sent: Vec<SentRequest>,
    pub fidelity: Fidelity,
}

/// Replays `workload` against every candidate at once, from one common start.
pub async fn replay(
    specs: &[CandidateSpec],
    workload: Arc<WorkloadFile>,
    options: &ReplayOptions,
    cancel: Cancel,
) -> Result<Vec<ReplayReport>, EngineError> {
    if !(options.speed.is_finite() && options.speed > 0.0 && options.speed <= MAX_SPEED) {
        return Err(EngineError::Internal(format!(
            "the speed-up must be above 0 and at most {MAX_SPEED}"
        )));
    }
    let mut clients = Vec::new();
    for spec in specs {
        let client = CandidateClient::new(spec, options.max_in_flight.min(1024) as u32, options.timeouts).map_err(
            |message| EngineError::Client {
                candidate: spec.name.clone(),
                message,
            },
        )?;
        clients.push(client);
    }
    // Time for every candidate's loop to be ready before the first request is due.
    let start = Instant::now() + Duration::from_millis(100);
    let start_unix_us = wall_clock_us() + 100_000;
    let mut loops = JoinSet::new();
    for (spec, client) in specs.iter().cloned().zip(clients) {
        let (workload, options, cancel) = (workload.clone(), options.clone(), cancel.clone());
        loops.spawn(async move {
            let sent = candidate_loop(&spec, client, &workload, &options, cancel, start, start_unix_us).await;
            (spec, sent)
        });
    }
    let mut reports = Vec::new();
    while let Some(joined) = loops.join_next().await {
        let (spec, sent) = joined.map_err(|e| EngineError::Internal(format!("a replay loop ended abnormally: {e}")))?;
        let figures: Vec<Sent> = sent
            .iter()
            .map(|s| Sent {
                index: s.index,
                sent_ms: (s.sent_unix_us - start_unix_us) as f64 / 1000.0,
                input_tokens: s.input_tokens,
                max_tokens: s.max_tokens,
                output_tokens: s.output_tokens,
            })
            .collect();
        reports.push(ReplayReport {
            candidate: spec.name.clone(),
            model: spec.model.clone(),
            start_unix_us,
            speed: options.speed,
            fidelity: Fidelity::of(&workload, options.speed, &figures),
            sent,
        });
    }
    // In the order the candidates were given.
    reports.sort_by_key(|r| specs.iter().position(|s| s.name == r.candidate));
    Ok(reports)
}

/// The prompt of request `index`: the kept text, else the synthetic one; with its o200k length.
pub fn prompt_of(workload: &WorkloadFile, index: usize, seed: u64) -> (String, u32) {
    let r = &workload.requests[index];
    match &r.text {
        Some(text) => (text.clone(), crate::tokens::tokenizer::count(text)),
        // Exact by construction (the tokenizer tests check it), so not counted again here.
        None => (replay_prompt(&pieces(workload, index, seed)), r.input_tokens),
    }
}

async fn candidate_loop(
    spec: &CandidateSpec,
    client: CandidateClient,
    workload: &WorkloadFile,
    options: &ReplayOptions,
    mut cancel: Cancel,
    start: Instant,
    start_unix_us: i64,
) -> Vec<SentRequest> {
    let file = replay_file();
    let client = Arc::new(client);
    let limit = Arc::new(tokio::sync::Semaphore::new(options.max_in_flight.max(1)));
    let mut set: JoinSet<SentRequest> = JoinSet::new();
    let mut out = Vec::new();
    let n = options.limit.unwrap_or(usize::MAX).min(workload.requests.len());
    for index in 0..n {
        let r = &workload.requests[index];
        let (text, input_tokens) = prompt_of(workload, index, options.seed);
        let case = EvalCase {
            id: format!("r{index}"),
            messages: Some(vec![ChatMessage {
                role: "user".into(),
                content: text,
            }]),
            ..Default::default()
        };
        let params = RequestParams {
            max_tokens: Some(r.output_tokens),
            temperature: spec.temperature,
            stream: options.stream,
        };
        let mut spec_here;
        let spec_used = if options.exact_output {
            spec_here = spec.clone();
            spec_here.extra_body.insert("min_tokens".into(), r.output_tokens.into());
            spec_here.extra_body.insert("ignore_eos".into(), true.into());
            &spec_here
        } else {
            spec
        };
        let prepared = prepare(spec_used, client.api_key(), &file, &case, &params);
        let prompt = options
            .keep_prompts
            .then(|| case.messages.as_ref().map(|m| m[0].content.clone()))
            .flatten();
        drop(case);
        let due_offset = Duration::from_secs_f64(due_ms(r, options.speed) / 1000.0);
        let due = start + due_offset;
        let due_unix_us = start_unix_us + due_offset.as_micros() as i64;
        tokio::select! {
            _ = wait_until(due) => {}
            _ = cancel.cancelled() => break,
        }
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let client = client.clone();
        let max_tokens = r.output_tokens;
        set.spawn(async move {
            let mut s = SentRequest {
                index,
                due_unix_us,
                sent_unix_us: wall_clock_us(),
                input_tokens,
                max_tokens,
                server_input_tokens: None,
                output_tokens: None,
                failure: None,
                prompt,
            };
            match prepared {
                Err(f) => s.failure = Some(f.detail),
                Ok(request) => {
                    let queue_us = (wall_clock_us() - due_unix_us).max(0);
                    let exchange = client.send(&request, queue_us).await;
                    s.sent_unix_us = exchange.sent_at_us;
                    s.server_input_tokens = exchange.input_tokens;
                    s.output_tokens = exchange.output_tokens;
                    s.failure = exchange.failure.map(|f| f.detail);
                }
            }
            drop(permit);
            s
        });
        // The send goes first: building the next prompt can wait, this request cannot.
        tokio::task::yield_now().await;
        while let Some(Ok(done)) = set.try_join_next() {
            out.push(done);
        }
    }
    while let Some(joined) = set.join_next().await {
        if let Ok(done) = joined {
            out.push(done);
        }
    }
    out.sort_by_key(|s| s.index);
    out
}

/// Sleeps until shortly before `due`, then yields until it: the timer alone wakes up to a
/// millisecond late.
pub(crate) async fn wait_until(due: Instant) {
    const SPIN: Duration = Duration::from_micros(1500);
    if let Some(early) = due.checked_sub(SPIN)
        && early > Instant::now()
    {
        tokio::time::sleep_until(early.into()).await;
    }
    while Instant::now() < due {
        tokio::task::yield_now().await;
    }
}

/// The header replayed prompts are prepared with: no system prompt, nothing but the text (the
/// CLI's replay and a run's replay level alike).
pub(crate) fn replay_file() -> EvalSetFile {
    EvalSetFile {
        header: EvalSetHeader {
            bakeoff_evalset: 1,
            name: "replay".into(),
            task: TaskKind::Generation,
            description: None,
            language: None,
            system: None,
            prompt: None,
            graders: Vec::new(),
            max_tokens: None,
            temperature: None,
            grade_reasoning: false,
            history: None,
        },
        cases: Vec::new(),
    }
}
