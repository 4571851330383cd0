//! Reading a completion request: the body parsed and checked into a [`Parsed`], and the
//! OpenAI-shaped [`ApiError`] every refusal is answered with.
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::generate::Api;
use crate::profile::ModelProfile;
use crate::tokens::{count_chat_tokens, count_tokens};

/// An error in OpenAI's shape: `{"error":{"message","type","param","code"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) kind: &'static str,
    pub(super) param: Option<&'static str>,
    pub(super) code: Option<&'static str>,
    pub(super) retry_after_s: Option<u64>,
}

impl ApiError {
    pub(super) fn new(
        status: StatusCode,
        message: impl Into<String>,
        kind: &'static str,
        param: Option<&'static str>,
        code: Option<&'static str>,
    ) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param,
            code,
            retry_after_s: None,
        }
    }

    pub(super) fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message, "invalid_request_error", param, None)
    }

    pub(super) fn rate_limited(message: impl Into<String>, code: &'static str, retry_after_s: u64) -> ApiError {
        ApiError {
            retry_after_s: Some(retry_after_s),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, message, "requests", None, Some(code))
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "message": self.message, "type": self.kind, "param": self.param, "code": self.code }
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// A request after parsing and checking, before any model logic.
pub(super) struct Parsed {
    pub(super) model: String,
    pub(super) stream: bool,
    pub(super) include_usage: bool,
    pub(super) prompt_tokens: u32,
    pub(super) max_tokens: Option<u32>,
    pub(super) min_tokens: u32,
    pub(super) ignore_eos: bool,
    /// The text answers are matched on: last user message (chat) or the prompt (completions).
    pub(super) match_text: Option<String>,
    /// The request carried tools (a non-empty `tools` list): a tool case is answered natively.
    pub(super) has_tools: bool,
    /// A chat request's messages as (role, text), in order (empty for completions).
    pub(super) messages: Vec<(String, String)>,
    /// The request asked for structured output (`response_format` of type `json_schema`).
    pub(super) constrained: bool,
}

#[derive(Deserialize)]
struct RawRequest {
    model: Option<String>,
    messages: Option<Vec<RawMessage>>,
    prompt: Option<serde_json::Value>,
    stream: Option<bool>,
    stream_options: Option<RawStreamOptions>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    /// The Responses API's conversation (a string, or messages) and output limit.
    input: Option<serde_json::Value>,
    max_output_tokens: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    n: Option<i64>,
    tools: Option<serde_json::Value>,
    response_format: Option<serde_json::Value>,
    /// The Messages API's system prompt (a string or text blocks), apart from the messages.
    system: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawMessage {
    role: String,
    #[serde(default)]
    content: serde_json::Value,
}

#[derive(Deserialize)]
struct RawStreamOptions {
    #[serde(default)]
    include_usage: bool,
}

pub(super) fn parse_request(api: Api, body: &[u8]) -> Result<Parsed, ApiError> {
    let raw: RawRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("We could not parse the JSON body of your request: {e}."), None))?;
    let model = raw
        .model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("You must provide a model parameter.", Some("model")))?;
    if raw.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid(
            "The mock generates one choice per request; `n` must be 1.",
            Some("n"),
        ));
    }
    let max_param = if raw.max_output_tokens.is_some() {
        "max_output_tokens"
    } else if raw.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_tokens = match raw.max_output_tokens.or(raw.max_completion_tokens).or(raw.max_tokens) {
        None => None,
        Some(m) if m >= 1 => Some(u32::try_from(m).unwrap_or(u32::MAX)),
        Some(m) => {
            return Err(ApiError::invalid(
                format!(
                    "Invalid '{max_param}': integer below minimum value. Expected a value >= 1, but got {m} instead."
                ),
                Some(max_param),
            ));
        }
    };
    let min_tokens = match raw.min_tokens {
        Some(m) if m < 0 => return Err(ApiError::invalid("`min_tokens` must be >= 0.", Some("min_tokens"))),
        Some(m) => u32::try_from(m).unwrap_or(u32::MAX),
        None => 0,
    };
    let messages = match (api, raw.input) {
        (Api::Responses, Some(serde_json::Value::String(s))) => Some(vec![RawMessage {
            role: "user".into(),
            content: serde_json::Value::String(s),
        }]),
        (Api::Responses, Some(input)) => Some(
            serde_json::from_value::<Vec<RawMessage>>(input)
                .map_err(|e| ApiError::invalid(format!("`input` must be a string or messages: {e}"), Some("input")))?,
        ),
        (Api::Responses, None) => None,
        // The system prompt is the conversation's first message, as chat sends it.
        (Api::Messages, _) => match (raw.system, raw.messages) {
            (Some(system), Some(mut messages)) => {
                messages.insert(
                    0,
                    RawMessage {
                        role: "system".into(),
                        content: system,
                    },
                );
                Some(messages)
            }
            (_, messages) => messages,
        },
        _ => raw.messages,
    };
    let mut chat_messages = Vec::new();
    let (prompt_tokens, match_text) = match api {
        Api::Chat | Api::Responses | Api::Messages => {
            let messages = messages
                .filter(|m| !m.is_empty())
                .ok_or_else(|| ApiError::invalid("`messages` must be a non-empty array.", Some("messages")))?;
            let mut contents = Vec::with_capacity(messages.len());
            for m in &messages {
                contents.push(message_text(&m.content)?);
            }
            let last_user = messages
                .iter()
                .zip(&contents)
                .rev()
                .find(|(m, _)| m.role == "user")
                .map(|(_, c)| c.clone());
            let tokens = count_chat_tokens(contents.iter().map(String::as_str));
            chat_messages = messages.iter().map(|m| m.role.clone()).zip(contents).collect();
            (tokens, last_user)
        }
        Api::Completions => prompt_of(raw.prompt)?,
    };
    Ok(Parsed {
        model,
        stream: raw.stream.unwrap_or(false),
        // Anthropic streams always carry usage.
        include_usage: api == Api::Messages || raw.stream_options.is_some_and(|o| o.include_usage),
        prompt_tokens,
        max_tokens,
        min_tokens,
        ignore_eos: raw.ignore_eos.unwrap_or(false),
        match_text,
        has_tools: raw
            .tools
            .as_ref()
            .and_then(|t| t.as_array())
            .is_some_and(|t| !t.is_empty()),
        messages: chat_messages,
        constrained: raw
            .response_format
            .as_ref()
            .is_some_and(|f| f.get("type").and_then(|t| t.as_str()) == Some("json_schema")),
    })
}

/// A message's text: a string, or the text parts of a content array.
fn message_text(content: &serde_json::Value) -> Result<String, ApiError> {
    match content {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Null => Ok(String::new()),
        serde_json::Value::Array(parts) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
            .collect::<Vec<_>>()
            .join("")),
        _ => Err(ApiError::invalid(
            "A message's `content` must be a string or an array of content parts.",
            Some("messages"),
        )),
    }
}

/// Prompt tokens and matchable text of a completions `prompt` (one string, or one token array).
fn prompt_of(prompt: Option<serde_json::Value>) -> Result<(u32, Option<String>), ApiError> {
    let refuse = || {
        ApiError::invalid(
            "`prompt` must be one string or one array of token ids (the mock serves one prompt per request).",
            Some("prompt"),
        )
    };
    match prompt.ok_or_else(|| ApiError::invalid("You must provide a prompt.", Some("prompt")))? {
        serde_json::Value::String(s) => Ok((count_tokens(&s), Some(s))),
        serde_json::Value::Array(items) => match items.as_slice() {
            [serde_json::Value::String(s)] => Ok((count_tokens(s), Some(s.clone()))),
            ids if !ids.is_empty() && ids.iter().all(serde_json::Value::is_u64) => {
                Ok((u32::try_from(ids.len()).unwrap_or(u32::MAX), None))
            }
            _ => Err(refuse()),
        },
        _ => Err(refuse()),
    }
}

pub(super) fn check_context(
    profile: &ModelProfile,
    api: Api,
    prompt: u32,
    max_tokens: Option<u32>,
) -> Result<(), ApiError> {
    let limit = profile.context_length;
    let (param, what) = match api {
        Api::Chat | Api::Messages => ("messages", "messages"),
        Api::Completions => ("prompt", "prompt"),
        Api::Responses => ("input", "input"),
    };
    let message = match max_tokens {
        Some(m) if u64::from(prompt) + u64::from(m) > u64::from(limit) => format!(
            "This model's maximum context length is {limit} tokens. However, you requested {} tokens ({prompt} in the {what}, {m} in the completion). Please reduce the length of the {what} or completion.",
            u64::from(prompt) + u64::from(m)
        ),
        None if prompt >= limit => format!(
            "This model's maximum context length is {limit} tokens. However, your {what} resulted in {prompt} tokens. Please reduce the length of the {what}."
        ),
        _ => return Ok(()),
    };
    Err(ApiError::new(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        Some(param),
        Some("context_length_exceeded"),
    ))
}
