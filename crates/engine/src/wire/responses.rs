//! OpenAI's Responses API: `POST {base}/responses` with the conversation as `input` and
//! `max_output_tokens`; a stream of named events (`response.created`, `response.output_text.delta`,
//! `response.reasoning_text.delta` / `response.reasoning_summary_text.delta`,
//! `response.function_call_arguments.delta`, `response.completed` with `usage`,
//! `response.incomplete`, `response.failed`, `error`) that ends with the response's terminal event
//! (no `[DONE]`).
use serde_json::{Map, Value, json};

use super::failure::{Failure, classify_stream_error};
use super::protocol::{
    Completion, RequestParams, StreamDecoder, StreamUpdate, Usage, count, is_error_object, malformed, parse_json_object,
};
use super::sse::SseEvent;
use crate::domain::candidate::CandidateSpec;
use crate::domain::evalset::ChatMessage;

pub fn body(spec: &CandidateSpec, messages: &[ChatMessage], params: &RequestParams) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(spec.model));
    // System messages stay in `input` (the API takes them there as it takes `instructions`).
    body.insert("input".into(), json!(messages));
    body.insert("stream".into(), json!(params.stream));
    // A measurement keeps nothing on the provider's side.
    body.insert("store".into(), json!(false));
    if let Some(n) = params.max_tokens {
        body.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body
}

/// Decodes the named events; the JSON `type` is trusted over the SSE event name.
#[derive(Default)]
pub struct Decoder;

impl StreamDecoder for Decoder {
    fn decode(&mut self, event: &SseEvent) -> Result<StreamUpdate, Failure> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(StreamUpdate {
                done: true,
                ..Default::default()
            });
        }
        let json = parse_json_object(data).map_err(|why| malformed(data, &why))?;
        let kind = json.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind == "response.failed" {
            let response = json.get("response").unwrap_or(&json);
            return Err(classify_stream_error(response, data));
        }
        if is_error_object(&json) {
            return Err(classify_stream_error(&json, data));
        }
        let delta = || text(json.get("delta"));
        let mut update = StreamUpdate::default();
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => update.content = delta(),
            // A call's arguments are what the model answered with.
            "response.function_call_arguments.delta" => update.content = delta(),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => update.reasoning = delta(),
            "response.completed" | "response.incomplete" => {
                let response = json.get("response").unwrap_or(&Value::Null);
                update.usage = usage(response);
                update.finish_reason = Some(finish_reason(response));
                update.done = true;
            }
            _ => {} // created, in_progress, output_item.*, content_part.*, *.done, and later types
        }
        Ok(update)
    }
}

/// A whole (non-streamed) response object.
pub fn parse_response(json: &Value) -> Result<Completion, Failure> {
    if json.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(classify_stream_error(json, &json.to_string()));
    }
    let mut c = Completion {
        finish_reason: Some(finish_reason(json)),
        usage: usage(json),
        ..Default::default()
    };
    for item in json.get("output").and_then(Value::as_array).into_iter().flatten() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    if matches!(
                        part.get("type").and_then(Value::as_str),
                        Some("output_text" | "refusal")
                    ) {
                        c.content
                            .push_str(&text(part.get("text").or_else(|| part.get("refusal"))));
                    }
                }
            }
            Some("function_call") => c.content.push_str(&text(item.get("arguments"))),
            Some("reasoning") => {
                let parts = ["content", "summary"]
                    .iter()
                    .flat_map(|k| item.get(*k).and_then(Value::as_array).into_iter().flatten());
                for part in parts {
                    c.reasoning.push_str(&text(part.get("text")));
                }
            }
            _ => {}
        }
    }
    Ok(c)
}

/// `stop`, or `length` when the output hit `max_output_tokens`, or the incomplete reason.
fn finish_reason(response: &Value) -> String {
    match response.get("status").and_then(Value::as_str) {
        Some("incomplete") => match response.pointer("/incomplete_details/reason").and_then(Value::as_str) {
            Some("max_output_tokens") | None => "length".into(),
            Some(other) => other.into(),
        },
        _ => "stop".into(),
    }
}

/// `usage` of a response: input and output tokens, reasoning among the output.
fn usage(response: &Value) -> Option<Usage> {
    let u = response.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input_tokens: count(u.get("input_tokens")),
        output_tokens: count(u.get("output_tokens")),
        reasoning_tokens: count(u.pointer("/output_tokens_details/reasoning_tokens")),
        cached_tokens: count(u.pointer("/input_tokens_details/cached_tokens")),
        cache_creation_tokens: None,
    })
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::ErrorClass;

    fn ev(data: Value) -> SseEvent {
        SseEvent {
            event: data["type"].as_str().map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn a_stream_gives_reasoning_text_arguments_usage_and_its_end() {
        let mut d = Decoder;
        let created = d
            .decode(&ev(
                json!({"type": "response.created", "response": {"status": "in_progress"}}),
            ))
            .unwrap();
        assert_eq!(created, StreamUpdate::default());
        let r = d
            .decode(&ev(
                json!({"type": "response.reasoning_summary_text.delta", "delta": "hm"}),
            ))
            .unwrap();
        assert_eq!(r.reasoning, "hm");
        let r = d
            .decode(&ev(json!({"type": "response.reasoning_text.delta", "delta": "so"})))
            .unwrap();
        assert_eq!(r.reasoning, "so");
        let t = d
            .decode(&ev(
                json!({"type": "response.output_text.delta", "delta": "正面", "output_index": 1}),
            ))
            .unwrap();
        assert_eq!(t.content, "正面");
        let f = d
            .decode(&ev(
                json!({"type": "response.function_call_arguments.delta", "delta": "{\"a\":"}),
            ))
            .unwrap();
        assert_eq!(f.content, "{\"a\":");
        let done = d
            .decode(&ev(
                json!({"type": "response.completed", "response": {"status": "completed",
                "usage": {"input_tokens": 9, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}}}}),
            ))
            .unwrap();
        assert!(done.done);
        assert_eq!(done.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            done.usage,
            Some(Usage {
                input_tokens: Some(9),
                output_tokens: Some(7),
                reasoning_tokens: Some(3),
                ..Usage::default()
            })
        );
        let cut = d
            .decode(&ev(
                json!({"type": "response.incomplete", "response": {"status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"}}}),
            ))
            .unwrap();
        assert_eq!((cut.done, cut.finish_reason.as_deref()), (true, Some("length")));
    }

    #[test]
    fn failures_and_errors_are_classified() {
        let mut d = Decoder;
        let failed = d
            .decode(&ev(json!({"type": "response.failed", "response": {"status": "failed",
                "error": {"code": "rate_limit_exceeded", "message": "slow down"}}})))
            .unwrap_err();
        assert_eq!(failed.class, ErrorClass::RateLimited);
        assert!(failed.detail.contains("slow down"), "{}", failed.detail);
        let error = d
            .decode(&ev(json!({"type": "error", "code": "server_error", "message": "boom"})))
            .unwrap_err();
        assert_eq!(error.class, ErrorClass::HttpServerError);
        let bad = d
            .decode(&SseEvent {
                event: None,
                data: "{\"type\": ".into(),
            })
            .unwrap_err();
        assert_eq!(bad.class, ErrorClass::MalformedChunk);
    }

    #[test]
    fn a_whole_response_reads_its_output_items() {
        let body = json!({"status": "completed", "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "positive"}]}
        ], "usage": {"input_tokens": 5, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 2}}});
        let c = parse_response(&body).unwrap();
        assert_eq!((c.content.as_str(), c.reasoning.as_str()), ("positive", "think"));
        assert_eq!(c.usage.unwrap().reasoning_tokens, Some(2));
        let failed = json!({"status": "failed", "error": {"code": "server_error", "message": "x"}});
        assert!(parse_response(&failed).is_err());
    }
}
