//! Failures the mock injects on purpose, as the profile asks: over-long prompts answered per
//! `overlong_prompt_behaviour`, drawn 429s and 500s, a full queue, and the stalls, cuts and
//! malformed chunks a schedule carries.
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;

use super::request::{ApiError, Parsed, check_context};
use super::tracker::Tracker;
use super::{MockState, ProfileState};
use crate::generate::{Api, Schedule};
use crate::profile::{ModelProfile, OverlongBehaviour};

/// How long an over-long prompt hangs under `overlong_prompt_behaviour = "hang"`.
const HANG: Duration = Duration::from_secs(30);

/// The prompt tokens the request goes on with, or the error an over-long prompt gets under the
/// profile's `overlong_prompt_behaviour` (`hang` waits first; `truncate` keeps the end that fits).
pub(super) async fn fit_context(
    state: &MockState,
    profile: &ModelProfile,
    api: Api,
    req: &Parsed,
) -> Result<u32, ApiError> {
    let Err(mut e) = check_context(profile, api, req.prompt_tokens, req.max_tokens) else {
        return Ok(req.prompt_tokens);
    };
    let mut prompt_tokens = req.prompt_tokens;
    match profile.overlong_prompt_behaviour {
        OverlongBehaviour::Reject => {}
        OverlongBehaviour::ServerError => {
            e.status = StatusCode::INTERNAL_SERVER_ERROR;
            e.kind = "server_error";
            e.code = None;
            e.param = None;
        }
        OverlongBehaviour::Hang => {
            state.count_fault(&profile.name, "overlong_hang");
            tokio::time::sleep(HANG).await;
            e = ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "Upstream timed out.",
                "server_error",
                None,
                None,
            );
        }
        OverlongBehaviour::Truncate => {
            state.count_fault(&profile.name, "overlong_truncate");
            // Keep the end of the prompt that fits beside the completion, and say nothing.
            let room = profile
                .context_length
                .saturating_sub(req.max_tokens.unwrap_or(profile.default_max_tokens))
                .max(1);
            prompt_tokens = req.prompt_tokens.min(room);
        }
    }
    if prompt_tokens == req.prompt_tokens {
        return Err(e);
    }
    Ok(prompt_tokens)
}

/// The error an admitted request is refused with, if any: a 429 or 500 drawn by `roll` at the
/// profile's rates, or a full queue.
pub(super) fn injected_error(state: &MockState, ps: &ProfileState, roll: f64) -> Option<ApiError> {
    let profile = &ps.profile;
    if roll < profile.error_429_rate {
        state.count_fault(&profile.name, "error_429");
        return Some(ApiError::rate_limited(
            "Rate limit reached (injected by the mock's error_429_rate).",
            "rate_limit_exceeded",
            u64::from(profile.retry_after_s),
        ));
    }
    if roll < profile.error_429_rate + profile.error_500_rate {
        state.count_fault(&profile.name, "error_500");
        return Some(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "The server had an error while processing your request. Sorry about that! (injected by the mock's error_500_rate)",
            "server_error",
            None,
            None,
        ));
    }
    if let (Some(limit), Some(_)) = (profile.max_queue, ps.slots.as_ref())
        && ps.queued.load(Ordering::Relaxed) >= u64::from(limit)
    {
        return Some(ApiError::rate_limited(
            format!("{} is overloaded: {limit} requests are already queued.", profile.name),
            "queue_full",
            u64::from(profile.retry_after_s),
        ));
    }
    None
}

/// The 429 `rate_limit_requests` asks for the profile's `number`-th admitted request (1-based).
pub(super) fn planned_rate_limit(state: &MockState, profile: &ModelProfile, number: u64) -> Option<ApiError> {
    if !profile.rate_limit_requests.contains(&number) {
        return None;
    }
    state.count_fault(&profile.name, "error_429");
    Some(ApiError::rate_limited(
        format!("Rate limit reached (request {number} is in the mock's rate_limit_requests)."),
        "rate_limit_exceeded",
        u64::from(profile.retry_after_s),
    ))
}

/// Cuts the stream of the profile's `number`-th admitted request half-way when
/// `cut_requests` names it (after the first token, so the answer has started).
pub(super) fn plan_cut(profile: &ModelProfile, number: u64, total: u32, schedule: &mut Schedule) {
    if profile.cut_requests.contains(&number) {
        schedule.cut_after = Some((total / 2).max(1));
    }
}

/// Counts the faults a schedule will play (and notes a stall on the request's record).
pub(super) fn count_scheduled_faults(
    state: &MockState,
    profile: &ModelProfile,
    schedule: &Schedule,
    tracker: &mut Tracker,
) {
    if let Some((_, pause)) = schedule.stall {
        state.count_fault(&profile.name, "stall");
        tracker.record.stall_ms = Some(pause.as_secs_f64() * 1000.0);
    }
    if schedule.cut_after.is_some() {
        state.count_fault(&profile.name, "cut");
    }
    if schedule.malformed_at.is_some() {
        state.count_fault(&profile.name, "malformed");
    }
}
