//! A non-streaming completion: the whole body at once, after the same schedule.
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::Shared;
use super::admission::acquire_slot;
use super::tracker::Tracker;
use crate::SERVER_HEADER;
use crate::generate::{Api, Generator, Step, usage_json};
use crate::log::Outcome;

/// A non-streaming response: generate on the same schedule, then send everything at once.
pub(super) async fn whole_response(
    state: Shared,
    profile: usize,
    api: Api,
    mut tracker: Tracker,
    mut generator: Generator,
    prompt_tokens: u32,
    created: u64,
) -> Response {
    let slot = acquire_slot(&state, profile).await;
    tracker.queue_done();
    generator.begin(Instant::now());
    let (mut reasoning, mut content) = (String::new(), String::new());
    let (mut reasoning_n, mut content_n, mut malformed) = (0, 0, false);
    let cut = loop {
        match generator.next().await {
            Step::Tokens {
                start,
                end,
                reasoning: is_reasoning,
                malformed: m,
            } => {
                let (text, n) = if is_reasoning {
                    (&mut reasoning, &mut reasoning_n)
                } else {
                    (&mut content, &mut content_n)
                };
                for i in start..end {
                    text.push_str(generator.plan.piece(i));
                }
                *n += end - start;
                malformed |= m;
            }
            Step::Cut => break true,
            Step::Finished => break false,
        }
    };
    drop(slot);
    tracker.sent(reasoning_n, true, 0, false);
    tracker.sent(content_n, false, 0, malformed);
    let finish_reason = generator.plan.finish_reason;
    let in_content = generator.plan.reasoning_in_content();
    let mut usage = usage_json(
        prompt_tokens,
        reasoning_n + content_n,
        (!in_content).then_some(reasoning_n),
    );
    if let Some(cached) = tracker.record.cached_prompt_tokens {
        usage["prompt_tokens_details"] = serde_json::json!({ "cached_tokens": cached });
    }
    if in_content {
        content = std::mem::take(&mut reasoning) + &content;
        reasoning_n = 0;
    }
    let model = state.profiles[profile].reported_model();
    let body = match api {
        Api::Chat => {
            let mut message = serde_json::json!({ "role": "assistant", "content": content });
            let calls = generator.plan.tool_calls();
            if !calls.is_empty() {
                // The content is the calls' arguments one after another (cut short at the limit).
                let (mut start, mut tool_calls) = (0, Vec::new());
                for (i, (name, end)) in calls.iter().enumerate() {
                    if start >= content.len() {
                        break;
                    }
                    let args = content.get(start..(*end).min(content.len())).unwrap_or_default();
                    tool_calls.push(serde_json::json!({"id": format!("call_{i}"), "type": "function",
                        "function": {"name": name, "arguments": args}}));
                    start = *end;
                }
                message["content"] = serde_json::Value::Null;
                message["tool_calls"] = serde_json::Value::Array(tool_calls);
            }
            if reasoning_n > 0 {
                message["reasoning_content"] = serde_json::Value::String(reasoning);
            }
            serde_json::json!({
                "id": tracker.record.id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason }],
                "usage": usage,
                "system_fingerprint": SERVER_HEADER,
            })
        }
        Api::Responses => {
            let mut output = Vec::new();
            if reasoning_n > 0 {
                output.push(
                    serde_json::json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]}),
                );
            }
            output.push(
                serde_json::json!({"type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}]}),
            );
            let (status, details) = if finish_reason == "length" {
                ("incomplete", serde_json::json!({"reason": "max_output_tokens"}))
            } else {
                ("completed", serde_json::Value::Null)
            };
            serde_json::json!({
                "id": tracker.record.id, "object": "response", "created_at": created, "model": model,
                "status": status, "incomplete_details": details, "output": output,
                "usage": crate::generate::responses_usage_json(prompt_tokens, reasoning_n + content_n, reasoning_n),
            })
        }
        Api::Messages => {
            let mut blocks = Vec::new();
            if reasoning_n > 0 {
                blocks.push(serde_json::json!({"type": "thinking", "thinking": reasoning}));
            }
            blocks.push(serde_json::json!({"type": "text", "text": content}));
            serde_json::json!({
                "id": tracker.record.id, "type": "message", "role": "assistant", "model": model,
                "content": blocks,
                "stop_reason": crate::generate::stop_reason(finish_reason), "stop_sequence": null,
                "usage": crate::generate::messages_usage_json(
                    prompt_tokens,
                    tracker.record.cached_prompt_tokens.unwrap_or(0),
                    tracker.record.cache_creation_tokens.unwrap_or(0),
                    usage["completion_tokens"].as_u64().map_or(0, |n| n as u32),
                ),
            })
        }
        Api::Completions => serde_json::json!({
            "id": tracker.record.id, "object": "text_completion", "created": created, "model": model,
            "choices": [{ "index": 0, "text": content, "logprobs": null, "finish_reason": finish_reason }],
            "usage": usage,
            "system_fingerprint": SERVER_HEADER,
        }),
    };
    let mut bytes = body.to_string().into_bytes();
    let body = if cut {
        // The connection drops half-way through the body.
        tracker.finish(200, Outcome::Cut);
        bytes.truncate(bytes.len() / 2);
        let head = futures_util::stream::iter([Ok(Bytes::from(bytes))]);
        // The pause lets the first half reach the client before the connection is dropped.
        let failure = futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err(std::io::Error::other("connection cut (injected by the mock)"))
        });
        Body::from_stream(futures_util::StreamExt::chain(head, failure))
    } else {
        if malformed {
            // The closing brace goes missing: the body is not valid JSON.
            bytes.pop();
        }
        tracker.record.finish_reason = Some(finish_reason);
        tracker.finish(200, Outcome::Completed);
        Body::from(bytes)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
