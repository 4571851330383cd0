//! Both completion endpoints: check the request, admit it, draw its faults and its answer, then
//! respond streaming or whole. The order of the random draws is part of the mock's ground truth
//! (calibration and tests rely on it): the fault roll, then the schedule.
use std::sync::atomic::Ordering;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::time::Instant;

use super::admission::{admit, rate_headers};
use super::faults::{count_scheduled_faults, fit_context, injected_error, plan_cut, planned_rate_limit};
use super::request::{ApiError, Parsed, parse_request};
use super::streaming::{Phase, Streamer, stream_response};
use super::tracker::Tracker;
use super::whole::whole_response;
use super::{MockState, Received, Shared, unix_ms};
use crate::answers::Answer;
use crate::generate::{Api, Generator, Limits, Plan, Renderer, Schedule, judge_reply};
use crate::log::CaseTruth;
use crate::profile::ModelProfile;
use crate::rng::{SplitMix, stable_hash};

pub(super) async fn handle(
    state: Shared,
    api: Api,
    received: Received,
    headers: &HeaderMap,
    body: &[u8],
    api_version: Option<String>,
) -> Response {
    let mut tracker = Tracker::new(state.clone(), api, received, headers);
    tracker.record.api_version = api_version;
    let req = match parse_request(api, body) {
        Ok(r) => r,
        Err(e) => return tracker.reject(as_the_named_profile_answers(&state, body, e)),
    };
    tracker.record.model = req.model.clone();
    tracker.record.stream = req.stream;
    tracker.record.prompt_tokens = req.prompt_tokens;
    tracker.record.max_tokens = req.max_tokens;
    let Some(&p) = state.by_name.get(&req.model) else {
        let error = ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "The model `{}` does not exist or you do not have access to it.",
                req.model
            ),
            "invalid_request_error",
            Some("model"),
            Some("model_not_found"),
        );
        // Not found is not a stream: nothing was sent.
        tracker.record.stream = false;
        return tracker.reject(error);
    };
    tracker.profile = Some(p);
    let ps = &state.profiles[p];
    let profile = &ps.profile;

    let prompt_tokens = match fit_context(&state, profile, api, &req).await {
        Ok(n) => n,
        Err(e) => {
            tracker.record.stream = false;
            return tracker.reject(e);
        }
    };
    tracker.record.prompt_tokens = prompt_tokens;
    let rate = admit(ps);
    let rate_headers_on = !profile.no_rate_limit_headers;
    let with_rate = |mut response: Response| {
        if rate_headers_on {
            rate_headers(&mut response, &rate);
        }
        response
    };
    let refuse = |mut tracker: Tracker, error: ApiError| {
        tracker.record.stream = false;
        with_rate(tracker.reject(error))
    };
    if !rate.allowed {
        let error = ApiError::rate_limited(
            format!(
                "Rate limit reached for {} on requests per minute: limit {}.",
                profile.name, rate.limit
            ),
            "rate_limit_exceeded",
            rate.reset.as_secs_f64().ceil() as u64,
        );
        return refuse(tracker, error);
    }
    let number = ps.admitted.fetch_add(1, Ordering::Relaxed) + 1;
    let key = ps.draw_key(state.seed, req.match_text.as_deref().unwrap_or_default());
    let mut rng = SplitMix::new(key);
    if let Some(error) = injected_error(&state, ps, rng.next_f64()) {
        return refuse(tracker, error);
    }
    if let Some(error) = planned_rate_limit(&state, profile, number) {
        return refuse(tracker, error);
    }

    let (mut answer, turn) = match conversation_answer(&state, profile, api, &req) {
        Some((answer, turn)) => (Some(answer), Some(turn)),
        None => (choose_answer(&state, profile, api, &req, key), None),
    };
    // Structured output: the answer is JSON (the case's expected value); a share of them broken.
    let structured = answer.as_mut().filter(|_| req.constrained).map(|a| {
        let broken = profile.invalid_json_rate > 0.0
            && SplitMix::new(stable_hash(&[&key.to_le_bytes(), b"invalid-json"])).chance(profile.invalid_json_rate);
        if broken {
            a.text.pop();
            a.correct = false;
            "invalid_json"
        } else {
            "valid"
        }
    });
    tracker.record.case = answer.as_ref().map(|a| CaseTruth {
        set: a.set.clone(),
        case_id: a.case_id.clone(),
        correct: a.tool.as_ref().map_or(a.correct, |t| t.fault.is_none()),
        tool_fault: a.tool.as_ref().and_then(|t| t.fault),
        tool_mode: a.tool.as_ref().map(|t| match (req.has_tools, t.in_text) {
            (true, false) => "native",
            (true, true) => "in_text",
            (false, _) => "prompt",
        }),
        turn: turn.map(|t| t.turn),
        history_right: turn.map(|t| t.history_right),
        remembers: turn.map(|t| t.remembers),
        structured,
    });
    // The prefix cache (`prefix_cache`): only the uncached part of the prompt is prefilled.
    let cache_use = ps
        .prefix
        .as_ref()
        .filter(|_| matches!(api, Api::Chat | Api::Messages) && !req.messages.is_empty())
        .map(|cache| cache.admit(&req.messages, Instant::now()));
    let cached = cache_use.map(|u| u.read.min(prompt_tokens));
    tracker.record.cached_prompt_tokens = cached;
    tracker.record.cache_creation_tokens = cache_use.map(|u| u.written.min(prompt_tokens - cached.unwrap_or(0)));
    let cut_mid_call = answer
        .as_ref()
        .and_then(|a| a.tool.as_ref())
        .is_some_and(|t| t.cut_mid_call());
    let plan = plan_reply(&state, profile, api, &req, prompt_tokens, answer);
    tracker.record.reasoning_in_content = plan.reasoning_in_content();
    let mut schedule = Schedule::new(profile, prompt_tokens - cached.unwrap_or(0), plan.total(), &mut rng);
    schedule.slow_down(ps.drift_factor());
    if req.constrained {
        schedule.slow_decode(profile.constrained_decode_factor);
    }
    plan_cut(profile, number, plan.total(), &mut schedule);
    if cut_mid_call && let Some(sent) = plan.tokens_before_mid_first_call() {
        schedule.cut_after = Some(sent);
    }
    count_scheduled_faults(&state, profile, &schedule, &mut tracker);
    ps.prompt_tokens.fetch_add(u64::from(prompt_tokens), Ordering::Relaxed);
    match cached {
        // With a prefix cache, its own counts (vLLM's: tokens queried, tokens read).
        Some(read) => ps.sim.admitted_cached(prompt_tokens, read),
        None => ps.sim.admitted(
            prompt_tokens,
            ps.seen_before(req.match_text.as_deref().unwrap_or_default()),
        ),
    }
    let created = unix_ms() as u64 / 1000;
    let renderer = Renderer::new(api, &tracker.record.id, created, ps.reported_model());
    let generator = Generator::new(plan, schedule, rng, Instant::now());
    let id = tracker.record.id.clone();
    let mut response = if req.stream {
        stream_response(Streamer {
            state: state.clone(),
            profile: p,
            api,
            tracker,
            renderer,
            generator,
            include_usage: req.include_usage && !profile.no_usage_in_stream,
            prompt_tokens,
            slot: None,
            phase: Phase::Start,
        })
    } else {
        whole_response(state.clone(), p, api, tracker, generator, prompt_tokens, created).await
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    with_rate(response)
}

/// An invalid request is answered as the profile named in its body (if any) answers them.
fn as_the_named_profile_answers(state: &MockState, body: &[u8], mut e: ApiError) -> ApiError {
    let named = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("model").and_then(|m| m.as_str()).map(str::to_string))
        .and_then(|m| state.by_name.get(&m).copied());
    if let Some(p) = named {
        let status = state.profiles[p].profile.invalid_param_status;
        e.status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        if e.status.is_server_error() {
            e.kind = "server_error";
        }
    }
    e
}

/// A conversation turn's answer (None: the request is no known turn): the turn is found by the
/// request's user messages, and its answer depends on the assistant replies it carried.
fn conversation_answer(
    state: &MockState,
    profile: &ModelProfile,
    api: Api,
    req: &Parsed,
) -> Option<(Answer, crate::answers::TurnTruth)> {
    if !matches!(api, Api::Chat | Api::Messages) || req.has_tools {
        return None;
    }
    let users = req
        .messages
        .iter()
        .filter(|(r, _)| r == "user")
        .map(|(_, c)| c.as_str());
    let at = state.answers.find_turn(users)?;
    let history: Vec<&str> = req
        .messages
        .iter()
        .filter(|(r, _)| r == "assistant")
        .map(|(_, c)| c.as_str())
        .collect();
    Some(state.answers.turn_answer(
        at,
        &history,
        state.seed,
        &profile.name,
        profile.accuracy,
        profile.memory_turns,
    ))
}

/// The answer key's answer to the case the request asks (None: no case), right as often as the
/// profile's accuracy, flipped as often as its inconsistency (drawn from the request's `key`).
fn choose_answer(state: &MockState, profile: &ModelProfile, api: Api, req: &Parsed, key: u64) -> Option<Answer> {
    let case = req.match_text.as_deref().and_then(|text| match api {
        Api::Chat | Api::Responses | Api::Messages => state.answers.find_chat(text),
        Api::Completions => state.answers.find_prompt(text),
    });
    // A separate generator, so an inconsistent profile draws its faults exactly as before.
    let flip = profile.inconsistency > 0.0
        && SplitMix::new(stable_hash(&[&key.to_le_bytes(), b"inconsistency"])).chance(profile.inconsistency);
    case.map(|c| {
        let usual = state.answers.answer(c, state.seed, &profile.name, profile.accuracy);
        let mut answer = if flip {
            let opposite = if usual.correct { 0.0 } else { 1.0 };
            state.answers.answer(c, state.seed, &profile.name, opposite)
        } else {
            usual
        };
        answer.tool = state
            .answers
            .tool_answer(c, state.seed, &profile.name, answer.correct, &profile.tool_faults)
            .map(|mut tool| {
                // Asked without tools (prompt mode) the calls are in the text anyway: no fault.
                if !req.has_tools && tool.in_text {
                    tool.in_text = false;
                    tool.fault = None;
                }
                tool
            });
        answer
    })
}

/// What the reply says and how long it runs: the answer (or a judge's verdict, or filler) within
/// the request's token limits.
fn plan_reply(
    state: &MockState,
    profile: &ModelProfile,
    api: Api,
    req: &Parsed,
    prompt_tokens: u32,
    answer: Option<Answer>,
) -> Plan {
    let max_tokens = match req.max_tokens {
        Some(m) if profile.ignore_max_tokens => m.saturating_mul(2).saturating_add(1),
        Some(m) => m,
        None => profile
            .default_max_tokens
            .min(profile.context_length.saturating_sub(prompt_tokens).max(1)),
    };
    let limits = Limits {
        max_tokens,
        min_tokens: req.min_tokens,
        ignore_eos: req.ignore_eos,
    };
    let filler_seed = stable_hash(&[
        &state.seed.to_le_bytes(),
        profile.name.as_bytes(),
        req.match_text.as_deref().unwrap_or_default().as_bytes(),
    ]);
    // A tool case asked with tools is answered with calls (their arguments are the plan's text);
    // asked without (prompt mode), or leaking its calls, with the calls written in the text.
    let tool = answer.as_ref().and_then(|a| a.tool.clone());
    if let Some(tool) = &tool
        && req.has_tools
        && api == Api::Chat
        && !tool.in_text
        && !tool.calls.is_empty()
    {
        let text: String = tool.calls.iter().map(|(_, args)| args.as_str()).collect();
        let plan = Plan::new(profile, true, Some(text), limits, filler_seed);
        return plan.with_tool_calls(&tool.calls);
    }
    // A prompt that is no case may be a judge prompt (`llm-judge` graders against the mock), or
    // a blind pairwise judge prompt (the review's "Compare with the judge").
    let text = match tool {
        Some(tool) => Some(tool.as_text()),
        None => answer
            .map(|a| a.text)
            .or_else(|| req.match_text.as_deref().and_then(judge_reply))
            .or_else(|| req.match_text.as_deref().and_then(|t| state.answers.pairwise_reply(t))),
    };
    Plan::new(profile, api != Api::Completions, text, limits, filler_seed)
}
