//! Anthropic Messages API: `POST {base}/messages` with `x-api-key` and `anthropic-version`,
//! the system prompt separate from the messages, and named stream events (`message_start`,
//! `content_block_delta` with `text_delta`/`thinking_delta`, `message_delta`, `message_stop`).
use serde_json::{Map, Value, json};

use super::failure::{Failure, classify_stream_error};
use super::protocol::{
    Completion, RequestParams, StreamDecoder, StreamUpdate, ToolPiece, Usage, count, is_error_object, malformed,
    parse_json_object,
};
use super::sse::SseEvent;
use crate::domain::candidate::CandidateSpec;
use crate::domain::evalset::ChatMessage;
use crate::domain::tool_calls::calls_from_anthropic_content;

pub const API_VERSION: &str = "2023-06-01";
/// The API requires `max_tokens`; used when neither run, eval set nor candidate sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

pub fn body(spec: &CandidateSpec, messages: &[ChatMessage], params: &RequestParams) -> Map<String, Value> {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == "system")
        .map(|m| m.content.as_str())
        .collect();
    let turns: Vec<&ChatMessage> = messages.iter().filter(|m| m.role != "system").collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(spec.model));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), json!(turns));
    body.insert(
        "max_tokens".into(),
        json!(params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(params.stream));
    body
}

/// Decodes the named Messages events; the JSON `type` field is trusted over the SSE event name.
#[derive(Default)]
pub struct Decoder;

impl StreamDecoder for Decoder {
    fn decode(&mut self, event: &SseEvent) -> Result<StreamUpdate, Failure> {
        let data = event.data.trim();
        let json = parse_json_object(data).map_err(|why| malformed(data, &why))?;
        if is_error_object(&json) {
            return Err(classify_stream_error(&json, data));
        }
        let mut update = StreamUpdate::default();
        match json.get("type").and_then(Value::as_str) {
            Some("message_start") => update.usage = json.get("message").and_then(|m| usage(m, false)),
            Some("content_block_start") => {
                if let Some(block) = json.get("content_block") {
                    take_block(block, &mut update.content, &mut update.reasoning);
                    if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                        update.tool_piece = Some(Box::new(ToolPiece::Anthropic(json.clone())));
                    }
                }
            }
            Some("content_block_delta") => {
                if let Some(delta) = json.get("delta") {
                    match delta.get("type").and_then(Value::as_str) {
                        Some("text_delta") => update.content = text(delta.get("text")),
                        Some("thinking_delta") => update.reasoning = text(delta.get("thinking")),
                        Some("input_json_delta") => {
                            update.tool_piece = Some(Box::new(ToolPiece::Anthropic(json.clone())))
                        }
                        _ => {} // signature_delta: not output text
                    }
                }
            }
            // Closes a tool_use block (the assembler ignores the close of other blocks).
            Some("content_block_stop") => update.tool_piece = Some(Box::new(ToolPiece::Anthropic(json.clone()))),
            Some("message_delta") => {
                update.finish_reason = json
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                update.usage = usage(&json, true);
            }
            Some("message_stop") => update.done = true,
            _ => {} // ping, and event types added later
        }
        Ok(update)
    }
}

pub fn parse_message(json: &Value) -> Completion {
    let mut c = Completion {
        finish_reason: json.get("stop_reason").and_then(Value::as_str).map(str::to_string),
        usage: usage(json, true),
        ..Default::default()
    };
    for block in json.get("content").and_then(Value::as_array).into_iter().flatten() {
        take_block(block, &mut c.content, &mut c.reasoning);
    }
    if let Some(content) = json.get("content") {
        c.tool_calls = calls_from_anthropic_content(content);
    }
    c
}

fn take_block(block: &Value, content: &mut String, reasoning: &mut String) {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => content.push_str(&text(block.get("text"))),
        Some("thinking") => reasoning.push_str(&text(block.get("thinking"))),
        _ => {}
    }
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Input = uncached + cache-written + cache-read tokens (`domain::prompt_cache::normalise`, the
/// one place the shapes meet). `message_start` carries a placeholder output count, so output is
/// only taken when `output_is_final` (`message_delta`, whole messages).
fn usage(holder: &Value, output_is_final: bool) -> Option<Usage> {
    let u = holder.get("usage").filter(|u| u.is_object())?;
    let (read, creation) = (
        count(u.get("cache_read_input_tokens")),
        count(u.get("cache_creation_input_tokens")),
    );
    let prompt = crate::domain::prompt_cache::normalise(
        crate::domain::prompt_cache::UsageShape::InputExcludesCached,
        count(u.get("input_tokens")),
        read,
        creation,
    );
    let output = if output_is_final {
        count(u.get("output_tokens"))
    } else {
        None
    };
    Some(Usage {
        input_tokens: prompt.whole,
        output_tokens: output,
        // The API counts thinking inside output_tokens without a separate figure.
        reasoning_tokens: None,
        cached_tokens: read,
        cache_creation_tokens: creation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::ErrorClass;

    fn ev(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: Some(name.into()),
            data: data.into(),
        }
    }

    #[test]
    fn a_full_stream_decodes() {
        let mut d = Decoder;
        let start = d
            .decode(&ev(
                "message_start",
                r#"{"type":"message_start","message":{"type":"message","role":"assistant","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
            ))
            .unwrap();
        assert_eq!(
            start.usage,
            Some(Usage {
                input_tokens: Some(30),
                output_tokens: None,
                reasoning_tokens: None,
                cached_tokens: Some(5),
                cache_creation_tokens: None,
            })
        );
        assert!(!start.carries_tokens());
        let block = d
            .decode(&ev(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ))
            .unwrap();
        assert!(!block.carries_tokens());
        let think = d
            .decode(&ev(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#,
            ))
            .unwrap();
        assert_eq!(think.reasoning, "Let me");
        let sig = d
            .decode(&ev(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#,
            ))
            .unwrap();
        assert!(!sig.carries_tokens());
        let text = d
            .decode(&ev(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello"}}"#,
            ))
            .unwrap();
        assert_eq!(text.content, "Hello");
        assert!(!d.decode(&ev("ping", r#"{"type": "ping"}"#)).unwrap().done);
        let delta = d
            .decode(&ev(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
            ))
            .unwrap();
        assert_eq!(delta.finish_reason.as_deref(), Some("end_turn"));
        assert_eq!(delta.usage.unwrap().output_tokens, Some(15));
        assert!(
            d.decode(&ev("message_stop", r#"{"type":"message_stop"}"#))
                .unwrap()
                .done
        );
    }

    #[test]
    fn stream_errors_and_garbage_are_classified() {
        let mut d = Decoder;
        let e = d
            .decode(&ev(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ))
            .unwrap_err();
        assert_eq!(e.class, ErrorClass::HttpServerError);
        assert_eq!(
            d.decode(&ev("x", "not json")).unwrap_err().class,
            ErrorClass::MalformedChunk
        );
    }

    #[test]
    fn whole_messages_parse() {
        let j: Value = serde_json::from_str(
            r#"{"type":"message","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","usage":{"input_tokens":3,"output_tokens":7}}"#,
        )
        .unwrap();
        let c = parse_message(&j);
        assert_eq!((c.content.as_str(), c.reasoning.as_str()), ("Hi", "hm"));
        assert_eq!(c.finish_reason.as_deref(), Some("max_tokens"));
        assert_eq!(c.usage.unwrap().output_tokens, Some(7));
    }
}
