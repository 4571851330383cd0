//! What every provider's protocol shares: request parameters, the prepared request, the
//! decoded stream and response shapes, and the JSON helpers their decoders use.
use bytes::Bytes;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::failure::{Failure, excerpt};
use super::sse::SseEvent;
use crate::domain::candidate::CandidateSpec;
use crate::domain::evalset::EvalSetHeader;
use crate::domain::run::{ErrorClass, RunConfig};

/// Request parameters after precedence: run config override > eval-set header > candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestParams {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub stream: bool,
}

impl RequestParams {
    pub fn resolve(run: &RunConfig, header: &EvalSetHeader, spec: &CandidateSpec) -> Self {
        RequestParams {
            max_tokens: run.max_tokens.or(header.max_tokens).or(spec.max_tokens),
            temperature: run.temperature.or(header.temperature).or(spec.temperature),
            stream: run.stream,
        }
    }
}

/// A request ready to send: serialised before the clock starts, so building it is never timed.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub url: String,
    /// Includes the credential header, marked sensitive so it is never printed.
    pub headers: HeaderMap,
    pub body: Bytes,
    pub stream: bool,
    /// A session's requests (a simulated user's conversation turns) go on that session's own
    /// keep-alive connection, never one another session or a single request used: the pool
    /// keys its idle connections by it (`h1::Pool::post`). None: any pooled connection.
    pub session: Option<u32>,
}

/// Token counts reported by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: Option<u32>,
    pub output_tokens: Option<u32>,
    pub reasoning_tokens: Option<u32>,
    /// Prompt tokens read from the server's prompt cache (OpenAI
    /// `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`).
    pub cached_tokens: Option<u32>,
    /// Prompt tokens written to the cache (Anthropic `cache_creation_input_tokens`).
    pub cache_creation_tokens: Option<u32>,
}

impl Usage {
    /// Later reports win field by field (Anthropic sends input and output in separate events).
    pub fn merge(&mut self, later: Usage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.reasoning_tokens = later.reasoning_tokens.or(self.reasoning_tokens);
        self.cached_tokens = later.cached_tokens.or(self.cached_tokens);
        self.cache_creation_tokens = later.cache_creation_tokens.or(self.cache_creation_tokens);
    }

    /// The prompt-cache report, when the server gave one.
    pub fn prompt_cache(&self) -> Option<crate::domain::conversation::PromptCache> {
        if self.cached_tokens.is_none() && self.cache_creation_tokens.is_none() {
            return None;
        }
        Some(crate::domain::conversation::PromptCache {
            read_tokens: self.cached_tokens.unwrap_or(0),
            creation_tokens: self.cache_creation_tokens,
        })
    }
}

/// What one stream event contributed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamUpdate {
    pub reasoning: String,
    pub content: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// The protocol's explicit end (`[DONE]`, `message_stop`): stop reading.
    pub done: bool,
    /// A piece of a tool call (see `tools`), boxed: most updates carry none.
    pub tool_piece: Option<Box<ToolPiece>>,
}

/// A piece of a tool call as the stream sent it, for `domain::tool_calls::CallAssembler`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolPiece {
    /// An OpenAI-compatible `delta.tool_calls` list.
    OpenAi(Value),
    /// An Anthropic `content_block_start` (tool_use), `input_json_delta` or `content_block_stop`.
    Anthropic(Value),
}

impl StreamUpdate {
    pub fn carries_tokens(&self) -> bool {
        !self.reasoning.is_empty() || !self.content.is_empty()
    }
}

/// Turns a provider's stream events into updates; one decoder per request.
pub trait StreamDecoder: Send {
    fn decode(&mut self, event: &SseEvent) -> Result<StreamUpdate, Failure>;
}

/// A whole (non-streamed) response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    pub content: String,
    pub reasoning: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// The tool calls of the message, arguments as sent.
    pub tool_calls: Vec<crate::domain::tool_calls::ToolCall>,
}

/// A JSON object, or the reason it is not one.
pub(super) fn parse_json_object(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A chunk that is valid JSON but not an object, or not JSON at all.
pub(super) fn malformed(data: &str, why: &str) -> Failure {
    Failure::new(
        ErrorClass::MalformedChunk,
        format!("stream chunk is not valid ({why}): {}", excerpt(data)),
    )
}

/// `{"error": …}` (OpenAI, vLLM mid-stream), `{"object": "error"}` (vLLM) or
/// `{"type": "error"}` (Anthropic).
pub(super) fn is_error_object(json: &Value) -> bool {
    json.get("error").is_some_and(|e| !e.is_null())
        || json.get("object").and_then(Value::as_str) == Some("error")
        || json.get("type").and_then(Value::as_str) == Some("error")
}

/// A count field as u32 (absent, negative or non-numeric → None).
pub(super) fn count(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok())
}
