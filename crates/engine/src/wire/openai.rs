//! OpenAI-compatible chat completions and completions (OpenAI, vLLM, SGLang, TGI, llama.cpp,
//! Ollama…). Streams ask for `usage` with `stream_options.include_usage`; reasoning arrives
//! as `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama, newer vLLM).
use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};

use super::failure::{Failure, classify_stream_error};
use super::protocol::{
    Completion, RequestParams, StreamDecoder, StreamUpdate, ToolPiece, Usage, count, is_error_object, malformed,
    parse_json_object,
};
use super::sse::SseEvent;
use crate::domain::candidate::CandidateSpec;
use crate::domain::evalset::ChatMessage;
use crate::domain::tool_calls::calls_from_openai_message;

pub fn chat_body(spec: &CandidateSpec, messages: &[ChatMessage], params: &RequestParams) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(spec.model));
    body.insert("messages".into(), json!(messages));
    common(&mut body, params);
    body
}

pub fn completions_body(spec: &CandidateSpec, prompt: &str, params: &RequestParams) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(spec.model));
    body.insert("prompt".into(), json!(prompt));
    common(&mut body, params);
    body
}

fn common(body: &mut Map<String, Value>, params: &RequestParams) {
    body.insert("stream".into(), json!(params.stream));
    if params.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(n) = params.max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
}

/// Decodes `data: {chunk}` events up to `data: [DONE]`.
pub struct Decoder {
    chat: bool,
}

impl Decoder {
    pub fn chat() -> Self {
        Decoder { chat: true }
    }
    pub fn completions() -> Self {
        Decoder { chat: false }
    }
}

impl StreamDecoder for Decoder {
    fn decode(&mut self, event: &SseEvent) -> Result<StreamUpdate, Failure> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(StreamUpdate {
                done: true,
                ..Default::default()
            });
        }
        // The usual chunk is read into a typed, borrowed `Chunk` (no map or string per field);
        // anything else (an error object, a field of an odd type, not an object, not JSON) takes
        // the general route, which classifies it exactly as before.
        if data.starts_with('{')
            && let Ok(chunk) = serde_json::from_str::<Chunk>(data)
            && !chunk.is_error()
        {
            return Ok(self.typed_update(chunk));
        }
        self.general_update(data)
    }
}

impl Decoder {
    fn typed_update(&self, chunk: Chunk) -> StreamUpdate {
        let mut update = StreamUpdate {
            usage: chunk.usage.map(ChunkUsage::into_usage),
            ..Default::default()
        };
        let mut choices = chunk.choices.into_iter();
        let choice = match choices.len() {
            0 | 1 => choices.next(),
            // Only the first choice is measured (bakeoff never asks for n > 1).
            _ => {
                let all: Vec<ChunkChoice> = choices.collect();
                let first = all.iter().position(|c| c.index == Some(0)).unwrap_or(0);
                all.into_iter().nth(first)
            }
        };
        if let Some(choice) = choice {
            if self.chat {
                if let Some(delta) = choice.delta {
                    update.tool_piece = delta.tool_calls.map(|t| Box::new(ToolPiece::OpenAi(t)));
                    update.content = owned(delta.content);
                    let reasoning = owned(delta.reasoning_content);
                    update.reasoning = if reasoning.is_empty() {
                        owned(delta.reasoning)
                    } else {
                        reasoning
                    };
                }
            } else {
                update.content = owned(choice.text);
            }
            update.finish_reason = choice.finish_reason.map(Cow::into_owned);
        }
        update
    }

    fn general_update(&self, data: &str) -> Result<StreamUpdate, Failure> {
        let json = parse_json_object(data).map_err(|why| malformed(data, &why))?;
        if is_error_object(&json) {
            return Err(classify_stream_error(&json, data));
        }
        let mut update = StreamUpdate {
            usage: usage(&json),
            ..Default::default()
        };
        // Only the first choice is measured (bakeoff never asks for n > 1).
        if let Some(choice) = first_choice(&json) {
            if self.chat {
                if let Some(delta) = choice.get("delta") {
                    update.tool_piece = delta
                        .get("tool_calls")
                        .filter(|t| t.is_array())
                        .map(|t| Box::new(ToolPiece::OpenAi(t.clone())));
                    update.content = text(delta.get("content"));
                    update.reasoning = reasoning(delta);
                }
            } else {
                update.content = text(choice.get("text"));
            }
            update.finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
        }
        Ok(update)
    }
}

/// One streamed chunk as the usual server sends it; texts borrow from the event unless escaped.
/// Any field of another type fails the parse and the chunk takes the general route.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    /// Non-null: an error object (its content is read on the general route).
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
}

impl Chunk<'_> {
    /// What `is_error_object` recognises.
    fn is_error(&self) -> bool {
        self.error.is_some() || self.object.as_deref() == Some("error") || self.kind.as_deref() == Some("error")
    }
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

/// A chat delta; reasoning arrives under either name.
#[derive(Deserialize)]
struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    /// Pieces of tool calls (read whole: rare, and the assembler reads them as JSON).
    #[serde(default)]
    tool_calls: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens_details: Option<ChunkUsageDetails>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ChunkUsageDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl ChunkUsage {
    /// As `usage` reads it: a count beyond u32 is no count.
    fn into_usage(self) -> Usage {
        let n = |v: Option<u64>| v.and_then(|n| u32::try_from(n).ok());
        Usage {
            input_tokens: n(self.prompt_tokens),
            output_tokens: n(self.completion_tokens),
            reasoning_tokens: n(self.completion_tokens_details.and_then(|d| d.reasoning_tokens)),
            cached_tokens: n(self.prompt_tokens_details.and_then(|d| d.cached_tokens)),
            cache_creation_tokens: None,
        }
    }
}

fn owned(text: Option<Cow<'_, str>>) -> String {
    text.map(Cow::into_owned).unwrap_or_default()
}

pub fn parse_chat(json: &Value) -> Completion {
    let choice = first_choice(json);
    let message = choice.and_then(|c| c.get("message"));
    Completion {
        content: text(message.and_then(|m| m.get("content"))),
        reasoning: message.map(reasoning).unwrap_or_default(),
        finish_reason: finish_reason(choice),
        usage: usage(json),
        tool_calls: message.map(calls_from_openai_message).unwrap_or_default(),
    }
}

pub fn parse_completions(json: &Value) -> Completion {
    let choice = first_choice(json);
    Completion {
        content: text(choice.and_then(|c| c.get("text"))),
        reasoning: String::new(),
        finish_reason: finish_reason(choice),
        usage: usage(json),
        tool_calls: Vec::new(),
    }
}

fn first_choice(json: &Value) -> Option<&Value> {
    let choices = json.get("choices")?.as_array()?;
    choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
        .or_else(|| choices.first())
}

fn finish_reason(choice: Option<&Value>) -> Option<String> {
    choice?.get("finish_reason")?.as_str().map(str::to_string)
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

fn reasoning(delta_or_message: &Value) -> String {
    let r = text(delta_or_message.get("reasoning_content"));
    if r.is_empty() {
        text(delta_or_message.get("reasoning"))
    } else {
        r
    }
}

/// `usage` when the server sent it (non-null). Reasoning tokens are part of completion tokens.
fn usage(json: &Value) -> Option<Usage> {
    let u = json.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input_tokens: count(u.get("prompt_tokens")),
        output_tokens: count(u.get("completion_tokens")),
        reasoning_tokens: count(
            u.get("completion_tokens_details")
                .and_then(|d| d.get("reasoning_tokens")),
        ),
        cached_tokens: count(u.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens"))),
        cache_creation_tokens: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::ErrorClass;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: data.into(),
        }
    }

    #[test]
    fn chat_chunks_give_role_reasoning_content_finish_usage_and_done() {
        let mut d = Decoder::chat();
        let role = d
            .decode(&ev(
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            ))
            .unwrap();
        assert!(!role.carries_tokens());
        let think = d
            .decode(&ev(
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm","content":null}}]}"#,
            ))
            .unwrap();
        assert_eq!((think.reasoning.as_str(), think.content.as_str()), ("hm", ""));
        let alt = d.decode(&ev(r#"{"choices":[{"delta":{"reasoning":"so"}}]}"#)).unwrap();
        assert_eq!(alt.reasoning, "so");
        let content = d
            .decode(&ev(
                r#"{"choices":[{"index":0,"delta":{"content":"正面"},"finish_reason":"stop"}],"usage":null}"#,
            ))
            .unwrap();
        assert_eq!(content.content, "正面");
        assert_eq!(content.finish_reason.as_deref(), Some("stop"));
        assert_eq!(content.usage, None);
        let usage = d
            .decode(&ev(r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":2},"prompt_tokens_details":{"cached_tokens":6}}}"#))
            .unwrap();
        assert_eq!(
            usage.usage,
            Some(Usage {
                input_tokens: Some(9),
                output_tokens: Some(4),
                reasoning_tokens: Some(2),
                cached_tokens: Some(6),
                cache_creation_tokens: None,
            })
        );
        assert!(d.decode(&ev("[DONE]")).unwrap().done);
    }

    #[test]
    fn completions_chunks_carry_text() {
        let mut d = Decoder::completions();
        let u = d
            .decode(&ev(
                r#"{"choices":[{"text":" hi","index":0,"finish_reason":"length"}]}"#,
            ))
            .unwrap();
        assert_eq!(u.content, " hi");
        assert_eq!(u.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn bad_and_error_chunks_are_classified() {
        let mut d = Decoder::chat();
        assert_eq!(
            d.decode(&ev("{\"choices\": [")).unwrap_err().class,
            ErrorClass::MalformedChunk
        );
        assert_eq!(d.decode(&ev("42")).unwrap_err().class, ErrorClass::MalformedChunk);
        let e = d
            .decode(&ev(r#"{"error":{"message":"engine died","type":"server_error"}}"#))
            .unwrap_err();
        assert_eq!(e.class, ErrorClass::HttpServerError);
    }

    #[test]
    fn the_typed_route_reads_every_chunk_as_the_general_route_does() {
        let chunks = [
            r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm","content":null}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"so"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a \"q\" \u00e9\n"},"finish_reason":"stop"}],"usage":null}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"second"}},{"index":0,"delta":{"content":"first"}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"only one"}},{"index":2,"delta":{"content":"no"}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":99999999999,"completion_tokens_details":null}}"#,
            r#"{"choices":[],"usage":{}}"#,
            r#"{"choices":[{"text":" hi","index":0,"finish_reason":"length"}]}"#,
            r#"{"error":null,"choices":[{"delta":{"content":"x"}}]}"#,
        ];
        for data in chunks {
            for d in [Decoder::chat(), Decoder::completions()] {
                let chunk: Chunk = serde_json::from_str(data).unwrap_or_else(|e| panic!("{data}: {e}"));
                assert!(!chunk.is_error(), "{data}");
                assert_eq!(d.typed_update(chunk), d.general_update(data).unwrap(), "{data}");
            }
        }
        let mut d = Decoder::chat();
        let first = d
            .decode(&ev(
                r#"{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}]}"#,
            ))
            .unwrap();
        assert_eq!(first.content, "a");
        // Odd types are not the typed route's: the general route reads them as before.
        let odd = d
            .decode(&ev(
                r#"{"choices":[{"index":"0","delta":{"content":7,"reasoning":"r"}}],"usage":"n/a"}"#,
            ))
            .unwrap();
        assert_eq!(
            (odd.content.as_str(), odd.reasoning.as_str(), odd.usage),
            ("", "r", None)
        );
        assert_eq!(d.decode(&ev("[]")).unwrap_err().class, ErrorClass::MalformedChunk);
        let e = d.decode(&ev(
            r#"{"object":"error","message":"rate_limit_exceeded","type":"rate_limit_error"}"#,
        ));
        assert_eq!(e.unwrap_err().class, ErrorClass::RateLimited);
    }

    #[test]
    fn non_streamed_completions_parse() {
        let j: Value = serde_json::from_str(
            r#"{"choices":[{"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
        )
        .unwrap();
        let c = parse_completions(&j);
        assert_eq!((c.content.as_str(), c.finish_reason.as_deref()), ("ok", Some("stop")));
    }
}
