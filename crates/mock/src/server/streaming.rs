//! A streaming (SSE) completion, generated chunk by chunk as the client reads.
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::Shared;
use super::admission::{Slot, acquire_slot};
use super::tracker::Tracker;
use crate::generate::{Api, Generator, Renderer, Step, messages_usage_json, responses_usage_json, usage_json};
use crate::log::Outcome;

/// Longest a cancelled stream keeps its slot under `hold_slot_after_cancel`.
const MAX_HOLD: Duration = Duration::from_secs(30);

pub(super) enum Phase {
    Start,
    Tokens,
    Usage,
    Done,
    End,
}

/// One streaming response: polled by the connection's own task (no task or channel per stream).
pub(super) struct Streamer {
    pub(super) state: Shared,
    pub(super) profile: usize,
    pub(super) api: Api,
    pub(super) tracker: Tracker,
    pub(super) renderer: Renderer,
    pub(super) generator: Generator,
    pub(super) include_usage: bool,
    pub(super) prompt_tokens: u32,
    pub(super) slot: Option<Slot>,
    pub(super) phase: Phase,
}

impl Streamer {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            match self.phase {
                Phase::Start => {
                    self.slot = Some(acquire_slot(&self.state, self.profile).await);
                    self.tracker.queue_done();
                    self.generator.begin(Instant::now());
                    self.phase = Phase::Tokens;
                    match self.api {
                        Api::Chat => return Some(self.renderer.role()),
                        Api::Responses => return Some(self.renderer.created()),
                        Api::Messages => {
                            let r = &self.tracker.record;
                            let usage = messages_usage_json(
                                self.prompt_tokens,
                                r.cached_prompt_tokens.unwrap_or(0),
                                r.cache_creation_tokens.unwrap_or(0),
                                1,
                            );
                            return Some(self.renderer.message_start(&usage));
                        }
                        Api::Completions => {}
                    }
                }
                Phase::Tokens => match self.generator.next().await {
                    Step::Tokens {
                        start,
                        end,
                        reasoning,
                        malformed,
                    } => {
                        let plan = &self.generator.plan;
                        // Reasoning in the content is sent as content; the log still knows it.
                        let as_reasoning = reasoning && !plan.reasoning_in_content();
                        let chunk = if !reasoning && !plan.tool_calls().is_empty() {
                            self.renderer.tool_tokens(plan, start..end, malformed)
                        } else {
                            self.renderer
                                .tokens((start..end).map(|i| plan.piece(i)), as_reasoning, malformed)
                        };
                        self.tracker.sent(end - start, reasoning, 1, malformed);
                        return Some(chunk);
                    }
                    Step::Cut => {
                        self.slot = None;
                        self.phase = Phase::End;
                        self.tracker.finish(200, Outcome::Cut);
                        return None;
                    }
                    Step::Finished => {
                        self.slot = None;
                        let reason = self.generator.plan.finish_reason;
                        self.tracker.record.finish_reason = Some(reason);
                        if self.api == Api::Responses {
                            // Its terminal event carries the usage; no `[DONE]` follows.
                            let r = &self.tracker.record;
                            let usage =
                                responses_usage_json(self.prompt_tokens, r.tokens_sent, r.reasoning_tokens_sent);
                            self.phase = Phase::End;
                            self.tracker.finish(200, Outcome::Completed);
                            return Some(self.renderer.completed(reason, &usage));
                        }
                        if self.api == Api::Messages {
                            let sent = self.tracker.record.tokens_sent;
                            self.phase = Phase::End;
                            self.tracker.finish(200, Outcome::Completed);
                            return Some(self.renderer.message_end(reason, sent));
                        }
                        self.phase = if self.include_usage { Phase::Usage } else { Phase::Done };
                        return Some(self.renderer.finish(reason));
                    }
                },
                Phase::Usage => {
                    self.phase = Phase::Done;
                    let r = &self.tracker.record;
                    let reasoning = (!self.generator.plan.reasoning_in_content()).then_some(r.reasoning_tokens_sent);
                    let mut usage = usage_json(self.prompt_tokens, r.tokens_sent, reasoning);
                    if let Some(cached) = r.cached_prompt_tokens {
                        usage["prompt_tokens_details"] = serde_json::json!({ "cached_tokens": cached });
                    }
                    return Some(self.renderer.usage(&usage));
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    self.tracker.finish(200, Outcome::Completed);
                    return Some(Renderer::done());
                }
                Phase::End => return None,
            }
        }
    }
}

impl Drop for Streamer {
    /// A stream abandoned mid-generation frees its slot at once, unless the profile keeps
    /// generating for nobody (`hold_slot_after_cancel`).
    fn drop(&mut self) {
        if !matches!(self.phase, Phase::Tokens) || !self.state.profiles[self.profile].profile.hold_slot_after_cancel {
            return;
        }
        let (Some(slot), Ok(runtime)) = (self.slot.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        self.state
            .count_fault(&self.state.profiles[self.profile].profile.name, "held_after_cancel");
        let hold = self.generator.remaining().min(MAX_HOLD);
        runtime.spawn(async move {
            tokio::time::sleep(hold).await;
            drop(slot);
        });
    }
}

pub(super) fn stream_response(streamer: Streamer) -> Response {
    let body = futures_util::stream::unfold(streamer, |mut s| async move {
        s.next_chunk().await.map(|chunk| (Ok::<_, Infallible>(chunk), s))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
